/*
 * churn.h -- pl-bench's churn workload (churn.c): runs created and pruned
 * cycle after cycle, and the store's size.
 */
#ifndef PL_BENCH_CHURN_H
#define PL_BENCH_CHURN_H

#include <policyledger.h>

typedef struct churn_config {
    const char *store;     /* an LMDB path, or a postgresql:// URI */
    const char *pg_server; /* PostgreSQL: the server's URI, to VACUUM */
    const char *pg_schema; /* and the store's schema */
    pl_durability durability;
    uint64_t tombstone_ms; /* pl_engine_options.tombstone_ms */
    unsigned runs, cycles; /* runs per cycle; cycles */
    unsigned warm;         /* the cycle whose size is the reference */
    void (*progress)(unsigned cycle, uint64_t bytes, void *user);
    void *progress_user;
} churn_config;

typedef struct churn_result {
    uint64_t bytes_warm, bytes_last; /* after cycle warm, after the last */
    uint64_t runs_left, steps_left;  /* records after the last prune */
    double ratio;                    /* bytes_last / bytes_warm */
    double seconds;
} churn_result;

/* Run the workload: PL_OK, or the status that stopped it. */
int churn_run(const churn_config *cfg, churn_result *out);

/* pl-bench's report of it: LMDB in @p dir, or PostgreSQL on @p pg_uri. */
typedef struct churn_report {
    bool quick, quiet; /* quiet: --json */
    const char *dir, *pg_uri;
    cJSON *json; /* the figures go in "churn" or "churn_pg" */
} churn_report;

/* 0, or 1 when the workload could not run. */
int churn_report_run(const churn_report *r);

#endif /* PL_BENCH_CHURN_H */
