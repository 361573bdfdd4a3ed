/*
 * retention.h -- deleted runs' tombstones, as the runner and the worker
 * see them (retention.c).
 */
#ifndef PL_RETENTION_H
#define PL_RETENTION_H

#include "internal.h"

/* Read run @p id's tombstone: PL_ENOTFOUND when it has none, or it has
 * expired (message set either way). */
PL__HIDDEN int pl__tomb_load(pl_engine *e, const char *id,
                             pl__tomb *t) PL__MUST_CHECK;

/* PL_EEXIST, saying that the tombstone @p t keeps id @p id. */
PL__HIDDEN int pl__tomb_taken(const char *id, const pl__tomb *t);

/* The outcome pl_run_start() gives for a tombstoned id (see the header's
 * Retention section). */
PL__HIDDEN int pl__tomb_outcome(pl_outcome **out, const char *id,
                                const pl__tomb *t) PL__MUST_CHECK;

/* PL_EINVAL, naming the field and @p fn, when @p retain_ms or
 * @p retain_failed_ms is more than PL_RETAIN_MS_MAX. */
PL__HIDDEN int pl__retain_ok(uint64_t retain_ms, uint64_t retain_failed_ms,
                             const char *fn) PL__MUST_CHECK;

/* Apply a retention rule: delete the runs that ended failed or cancelled
 * whose last write is at least @p failed_ms old, and the other ended runs
 * at least @p retain_ms old (0: that rule deletes nothing).  One prune
 * when the two are equal, else one a rule; the first failure is
 * returned, the other rule applied still. */
PL__HIDDEN int pl__retain(pl_engine *e, uint64_t retain_ms,
                          uint64_t failed_ms) PL__MUST_CHECK;

#endif /* PL_RETENTION_H */
