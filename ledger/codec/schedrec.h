/*
 * schedrec.h -- the schedule record (schedrec.c has its format).
 */
#ifndef PL_SCHEDREC_H
#define PL_SCHEDREC_H

#include "util.h"

#define PL__SCHEDREC_VERSION 2      /* 2: with run options (schedrec.c) */
#define PL__SCHED_NAME_MAX 100      /* a name's bytes (run ids add a tick) */
#define PL__SCHED_PAYLOAD_MAX 65536 /* the root payload's JSON text */

/* A schedule as stored.  Strings owned (pl__sched_rec_clear()). */
typedef struct pl__sched_rec {
    char *cron, *zone, *policy;
    char *payload;         /* the root payload, JSON text of an object */
    unsigned overlap;      /* pl_schedule_overlap */
    unsigned catch_up;     /* pl_schedule_catch_up */
    unsigned catch_up_max; /* PL_CATCH_UP_ALL: N */
    int64_t created_ms;    /* when it was put */
    int64_t cursor_ms;     /* ticks at or before it are handled */
    char *last_run;        /* the last run it started ("" none) */
    /* what each tick's run is submitted with (0 / NULL: none) */
    int32_t priority;
    char *flow_key;         /* the concurrency key */
    unsigned flow_limit;    /* with flow_key: 1..INT32_MAX */
    int64_t deadline_in_ms; /* the run's deadline after its tick */
} pl__sched_rec;

/* A deadline after the tick, at most (as pl_run_submit()'s relative one). */
#define PL__SCHED_DEADLINE_MAX (INT64_MAX / 4)

/* Whether @p name is a schedule name: 1..PL__SCHED_NAME_MAX bytes of
 * [A-Za-z0-9._-]. */
PL__HIDDEN bool pl__sched_name_ok(const char *name);

/* Append the record of schedule @p name to @p out. */
PL__HIDDEN int pl__sched_rec_encode(pl__buf *out, const char *name,
                                    const pl__sched_rec *r) PL__MUST_CHECK;

/*
 * Decode schedule @p name's record: every field checked, the checksum
 * too.  PL_ECORRUPT (message naming the schedule), PL_EVERSION, PL_ENOMEM.
 */
PL__HIDDEN int pl__sched_rec_decode(pl__sched_rec *out, const char *name,
                                    const uint8_t *data,
                                    size_t len) PL__MUST_CHECK;

PL__HIDDEN void pl__sched_rec_clear(pl__sched_rec *r);

#endif /* PL_SCHEDREC_H */
