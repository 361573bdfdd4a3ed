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

#endif /* PL_WAIT_H */
