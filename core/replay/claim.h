/*
 * claim.h -- a run claimed for an execution (claim.c): its state's claim,
 * and a worker's take of a queued run with the claim in the same store
 * transaction.  A delivery's ride on a run's next commit is in run.h.
 */
#ifndef PL_CLAIM_H
#define PL_CLAIM_H

#include "internal.h"

/* Name this process as @p st's owner, written now. */
PL__HIDDEN void pl__set_owner(pl_engine *e, pl__run_state *st);

/* What pl__claim_fn() checks a run's state against, and what it found. */
typedef struct pl__claim_ctx {
    pl_engine *e;
    const char *id;
    bool resume;
    const char *token;
    bool leased;           /* the run's lease is ours: no other owner */
    bool worker;           /* taken from the queue: running or submitted */
    bool waiting;          /* a delivery's take: a waiting run only */
    pl__run_state *out;    /* the state as claimed */
    pl_run_status before;  /* status found */
    const pl__kvs *steps;  /* resume: the answer record to write */
    const pl__buf *expect; /* non-NULL: only this state (a ride's) */
} pl__claim_ctx;

/*
 * The claim of a run's state for an execution here (a pl__state_fn, its
 * user a pl__claim_ctx): refused when the run is not in a state the
 * caller may execute (PL_ESTATE; PL_ETOKEN for a wrong resume token;
 * PL_EBUSY for a live owner elsewhere), else the state made `running`,
 * owned by this process, one attempt more.
 */
PL__HIDDEN int pl__claim_fn(pl__buf *state, pl__kvs *extra,
                            void *user) PL__MUST_CHECK;

/* Count the steps of run @p num: its records, and the callee steps folded
 * into them (record.c). */
PL__HIDDEN int pl__count_steps(pl_engine *e, uint64_t num,
                               uint64_t *out) PL__MUST_CHECK;

/*
 * A worker's next run from the queue: take the first expired lease, claim
 * its run in the same store transaction (pl__store_take()), and execute
 * it, as pl_run_continue() would.  PL_ENOTFOUND (*taken false) when no
 * lease is expired.  *taken says whether a lease was taken (in @p lease):
 * the status is then the execution's (or why the run was not executed),
 * else the store's.
 */
PL__HIDDEN int pl__run_take_next(pl_outcome **out, pl_engine *e,
                                 pl__lease *lease, bool *taken) PL__MUST_CHECK;

/*
 * Wakes: waiting runs whose timers are due, taken in batches
 * (pl__store_take_dues(): on PostgreSQL up to PL__DUES_MAX runs, their
 * claims and their root ledgers' first records in two round trips and one
 * flush) and executed one at a time, in due order.  A batch belongs to one
 * thread (pl__woken): the runs waiting their turn in it are claimed by
 * this process, their leases renewed.
 */
typedef struct pl__woken pl__woken;
/* A lease handed back expires this long ago: first in the queue. */
#define PL__HAND_BACK_US (-((int64_t)1 << 60))
PL__HIDDEN int pl__woken_new(pl__woken **out, pl_engine *e) PL__MUST_CHECK;
/* Whether runs of the batch wait their turn. */
PL__HIDDEN bool pl__woken_pending(const pl__woken *w);
/* Whether the batch's runs have all been executed and the take that made
 * it found fewer due than it could take: none is left due that it saw. */
PL__HIDDEN bool pl__woken_spent(const pl__woken *w);
/* Free @p w, handing the runs still waiting their turn back to the queue
 * (their leases made to have run out: another worker takes them, as it
 * takes a crashed run). */
PL__HIDDEN void pl__woken_free(pl__woken *w);

/*
 * The next run of batch @p w, or, none left, a new batch's first, executed
 * as pl__run_take_next() executes a queued run: PL_ENOTFOUND (*taken false)
 * when none is due, *next_due_us saying when to look again (Unix us; 0:
 * no timer).  *taken says whether a lease was taken (in @p lease): the
 * status is then the execution's (or why the run was not executed), else
 * the store's.
 */
PL__HIDDEN int pl__run_take_due(pl_outcome **out, pl__woken *w,
                                pl__lease *lease, bool *taken,
                                int64_t *next_due_us) PL__MUST_CHECK;

#endif /* PL_CLAIM_H */
