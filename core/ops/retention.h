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

/* Apply a retention rule: delete the runs that have ended whose last
 * write is at least @p retain_ms old. */
PL__HIDDEN int pl__retain(pl_engine *e, uint64_t retain_ms) PL__MUST_CHECK;

#endif /* PL_RETENTION_H */
