/*
 * commit.h -- a run's pending steps made durable (commit.c).
 */
#ifndef PL_COMMIT_H
#define PL_COMMIT_H

#include "internal.h"

/* Commit the steps appended since the last commit (a sync point); a
 * failure fails the run. */
PL__HIDDEN int pl__run_commit(pl__run *r) PL__MUST_CHECK;
/* The same, with the run's state record whatever the heartbeat: the heads
 * of the open ledgers are anchored before code runs that may not return
 * (a call that is not idempotent). */
PL__HIDDEN int pl__run_commit_state(pl__run *r) PL__MUST_CHECK;
/* The same, the batch's bytes kept where they were, so that its records
 * can be read back (until the next append); then pl__run_batch_trim()
 * frees what a large step left. */
PL__HIDDEN int pl__run_commit_keep(pl__run *r) PL__MUST_CHECK;
PL__HIDDEN void pl__run_batch_trim(pl__run *r);
/* Commit the pending steps with the run's state: when the heartbeat is due,
 * or always when @p final (an execution's end).  Returns the store's error
 * and leaves the run as it was on failure. */
PL__HIDDEN int pl__run_write(pl__run *r, bool final) PL__MUST_CHECK;
/* The run's lease was taken over (a renewal saw it, or the store's fence
 * refused a commit): PL_EVENT_LEASE_LOST, once, from the run's own thread
 * (a fan-out branch marks the run's, and leaves the event to that thread:
 * its next commit, or its end); returns @p rc. */
PL__HIDDEN int pl__run_lease_lost(pl__run *r, int rc);
/* The hash of the root ledger's last step (for the run state's head). */
PL__HIDDEN int pl__run_head(pl__run *r,
                            uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

#endif /* PL_COMMIT_H */
