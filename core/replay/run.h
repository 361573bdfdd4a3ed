/*
 * run.h -- a run in execution: create, fail, free (run.c).
 */
#ifndef PL_RUN_H
#define PL_RUN_H

#include "internal.h"

/* A run object for run @p id, with its hasher and genesis hash.  Caller owns;
 * free with pl__run_free().  PL_ENOMEM or the hasher's error. */
PL__HIDDEN int pl__run_new(pl_engine *e, const char *id,
                           pl__run **out) PL__MUST_CHECK;
/* A new run id, a UUIDv7 (runner.c). */
PL__HIDDEN int pl__new_run_id(char out[PL_UUID_LEN + 1]) PL__MUST_CHECK;
/* Free a run and all its invocations; NULL does nothing. */
PL__HIDDEN void pl__run_free(pl__run *r);
/* Fail the run (once): set stop and reason; returns the run's stop status. */
PL__HIDDEN int pl__run_fail(pl__run *r, int status, const char *fmt, ...)
    PL__PRINTF(3, 4);

/* The root action as stored in a run's info record, decoded for execution
 * (runner.c). */
typedef struct pl__root_action {
    pl__run_info info;
    pl_action action;
    cJSON *payload;
    pl_steps *seed;
} pl__root_action;

/* Decode run @p id's info record @p info into @p ra (cleared on failure). */
PL__HIDDEN int pl__root_decode(pl__root_action *ra, const char *id,
                               const uint8_t *info, size_t len) PL__MUST_CHECK;
PL__HIDDEN void pl__root_clear(pl__root_action *ra);

/*
 * Execute the root invocation of @p r (claimed: its state as written, its
 * lease held) and record the end (runner.c); @p replaying unless the run
 * is known to have no step.  Returns PL_OK with an outcome, or a status
 * when the end could not be recorded.
 */
PL__HIDDEN int pl__run_execute(pl__run *r, const pl_policy_def *def,
                               const pl_action *root, bool replaying,
                               pl_outcome **out) PL__MUST_CHECK;

/*
 * Execute run @p lease->id, whose lease this worker has just taken from
 * the queue (generation lease->gen), as pl_run_continue() would (runner.c).
 */
PL__HIDDEN int pl__run_continue_leased(pl_outcome **out, pl_engine *e,
                                       const pl__lease *lease) PL__MUST_CHECK;

/*
 * A delivery to a run (wait.c) that may take the run's lease, claim it and
 * write the run's next commit in its own transaction: @c fn delivers
 * record @c rec, with @c take given to pl__store_inbox_put().
 */
typedef struct pl__delivery {
    int (*fn)(pl_engine *e, pl__inbox_take *take, void *user);
    void *user;
    const pl__inbox_rec *rec;
    bool tried;   /* set: fn was called (whatever it returned) */
    uint64_t num; /* set before fn is called: the run's number, as read */
} pl__delivery;

/*
 * RIDES.  pl_run_signal() (and pl_run_cancel()) continuing a waiting run
 * in its thread makes one transaction, one sync, of the delivery and the
 * run's next commit: the
 * run is claimed in memory only (as the claim would, from the state read),
 * replayed with the record in its inbox as if delivered, and its first
 * commit, whatever it holds (the `event` step and a call's `action_call`,
 * the run parked again, its end), is handed to the delivery, which writes
 * it after taking the lease and claiming the state, in the same
 * transaction.  The store takes the run only when its state is the one
 * read and the record gets the seq the replay gave it: else the delivery
 * alone is written (or, when that is refused too, nothing), and this
 * execution stops, writing nothing (PL_EBUSY).  Until that commit nothing
 * of the execution is visible outside the process, and no call that is not
 * idempotent has run (its `action_call` is that commit).
 */
typedef struct pl__ride {
    pl__delivery *dv;
    pl__buf expect; /* the run's state as read */
    uint64_t seq;   /* the seq the replay gave it; 0: not yet looked */
    /* the run is parked with a concurrency key: the ride takes it as soon
     * as its wait ends (wait.c), so that nothing of its policy runs past
     * the wait before the store has given it a place under its key */
    bool keyed;
    const pl__kvs *inbox; /* the run's inbox, read with its state */
    pl__kvs *ledger;      /* its root ledger's first read, or NULL */
} pl__ride;

/* Claim run @p r, whose state as read is @p sb (decoded in r->state), in
 * memory only, for the delivery @p dv to ride its next commit, into
 * @p ride (claim.c). */
PL__HIDDEN int pl__run_ride_begin(pl__run *r, pl__delivery *dv,
                                  const pl__buf *sb,
                                  pl__ride *ride) PL__MUST_CHECK;

/* Write run @p r's pending batch with its ride (commit.c calls it for the
 * first commit of an execution that has one; claim.c). */
PL__HIDDEN int pl__run_ride(pl__run *r) PL__MUST_CHECK;

/*
 * Continue run @p id here, as pl_run_continue() would, the delivery @p dv
 * riding its next commit (RIDES).  When the run is not a waiting one this
 * engine can execute, nothing is done (dv->tried false: the caller
 * delivers alone); when the delivery could not take it (another holds its
 * lease, or it changed), PL_EBUSY, and the delivery alone may have been
 * made (the caller knows).
 */
PL__HIDDEN int pl__run_continue_delivered(pl_outcome **out, pl_engine *e,
                                          const char *id,
                                          pl__delivery *dv) PL__MUST_CHECK;

/*
 * Continue run @p id here as a wake would (after a delivery the store
 * would not let take the run): as pl_run_continue(), but a run parked
 * with a concurrency key only while its key has room; else PL_EBUSY and
 * nothing runs: the run's timer, due, wakes it once a place frees.
 */
PL__HIDDEN int pl__run_continue_woken(pl_outcome **out, pl_engine *e,
                                      const char *id) PL__MUST_CHECK;

/* Take run @p num's lease for this engine's worker: free, expired, or held
 * by a dead process of this host.  *had says whether the run had a lease.
 * PL_EBUSY (another holder, named) or the store's error (runner.c). */
PL__HIDDEN int pl__run_take_lease(pl_engine *e, uint64_t num, const char *id,
                                  uint64_t *gen, bool *had) PL__MUST_CHECK;

/* Have the engine renew run @p num's (@p id) lease of generation @p gen,
 * which it does not execute, until pl__engine_release(): copying a run of
 * many steps (a fork, an import) may outlast a lease, and a worker that
 * took the lease meanwhile would have the commit that ends the copy
 * refused; *@p lost is set when a renewal finds it taken (runner.c). */
PL__HIDDEN int pl__run_keep_lease(pl_engine *e, uint64_t num, const char *id,
                                  uint64_t gen,
                                  atomic_bool *lost) PL__MUST_CHECK;

/* Hand run @p num's lease @p gen back to the queue: held @p hold_us more
 * (PL__HAND_BACK_US: expired, first in the queue), unless another has
 * taken it over; a failure leaves it to expire (runner.c). */
PL__HIDDEN void pl__run_hand_back(pl_engine *e, uint64_t num, uint64_t gen,
                                  int64_t hold_us);

/* A new outcome of run @p r with @p status (outcome.c); NULL when out of
 * memory. */
PL__HIDDEN pl_outcome *pl__outcome_new(pl__run *r, pl_run_status status);
/* The outcome run @p id's state record @p rs holds, executing nothing
 * (outcome.c): a suspended run's prompt and token, a failed run's reason,
 * or just the status of one not ended.  Counters are 0: nothing ran. */
PL__HIDDEN int pl__recorded_outcome(pl_outcome **out, const char *id,
                                    const pl__run_state *rs) PL__MUST_CHECK;

/*
 * The run ends continued (pl_ctx_continue_as_new() was called): make its
 * state record name its successor, and its final batch create the
 * successor, queued, in the same commit (continued.c).
 */
PL__HIDDEN int pl__run_continued(pl__run *r) PL__MUST_CHECK;

/* The id of run @p id's successor in @p out (PL_MAX_RUN_ID + 1 bytes):
 * "<id>~1", and "<base>~<n+1>" for "<base>~<n>"; PL_ELIMIT when it would
 * be too long (continued.c). */
PL__HIDDEN int pl__successor_id(char *out, const char *id) PL__MUST_CHECK;
/* Run @p id, deleted, continued as new before: the id of its successor
 * in @p next (PL_MAX_RUN_ID + 1 bytes), by the ids' rule, while its
 * tombstone lasts (continued.c).  PL_ENOTFOUND when it has no tombstone
 * or ended otherwise. */
PL__HIDDEN int pl__chain_next_deleted(pl_engine *e, const char *id,
                                      char *next) PL__MUST_CHECK;

#endif /* PL_RUN_H */
