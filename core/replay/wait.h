/*
 * wait.h -- time and the outside world (wait.c).
 */
#ifndef PL_WAIT_H
#define PL_WAIT_H

#include "internal.h"

/*
 * A call boundary of @p c (call.c, fanout.c): a recorded cancellation is
 * seen again (PL_ECANCELLED); at the ledger's end, a cancellation in the
 * run's inbox is recorded and seen (PL_ECANCELLED), and a run past its
 * deadline fails (PL_EDEADLINE).  PL_OK otherwise.
 */
PL__HIDDEN int pl__wait_boundary(pl_ctx *c) PL__MUST_CHECK;

/*
 * The end of run @p r's execution (runner.c; outcome.c), recorded and its outcome in
 * @p out: its root returned after its cancellation was seen, and it ends
 * cancelled with the steps it made since (compensating calls); or it parked
 * at a wait, and is recorded waiting, with its timer.  @p t0 is when it
 * began (pl__ev_clock()).
 */
PL__HIDDEN int pl__end_cancelled(pl__run *r, const pl_policy_def *def,
                                 uint64_t t0, pl_outcome **out) PL__MUST_CHECK;
PL__HIDDEN int pl__end_waiting(pl__run *r, const pl_policy_def *def,
                               uint64_t t0, pl_outcome **out) PL__MUST_CHECK;

#endif /* PL_WAIT_H */
