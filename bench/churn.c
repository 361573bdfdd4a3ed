/*
 * churn.c -- pl-bench's churn workload: a store whose runs are created and
 * pruned as fast as they come must stop growing.
 *
 * Each cycle starts RUNS runs (each a root that makes CALLS recorded calls
 * to a tool returning ~100 bytes) and then prunes every ended run
 * (pl_engine_prune(), 64 runs per transaction, tombstones kept), so that
 * each cycle leaves the store with as many live records as it found.  The
 * figure is the data's size after the last cycle against its size after
 * cycle WARM: on LMDB the data file (pages freed by a prune are reused by
 * the next cycle's writes); on PostgreSQL the schema's tables and indexes
 * after a plain VACUUM (what autovacuum runs), which marks the deleted
 * rows' space free for reuse.  Goal: within 10%.
 */
#include "bench.h"

#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CALLS 4

static int churn_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "i", cJSON_IsNumber(i) ? i->valuedouble : -1);
    cJSON_AddStringToObject(r, "message",
                            "the quick brown fox jumps over the lazy dog, "
                            "then the lazy dog sleeps on");
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int churn_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)a;
    (void)user;
    cJSON *p = cJSON_CreateObject();
    cJSON *iv = cJSON_AddNumberToObject(p, "i", 0);
    int st = PL_OK;
    for (int i = 0; !st && i < CALLS; i++) {
        cJSON_SetNumberValue(iv, i);
        pl_action call = {PL_ACTION_VERSION, "churn_tool", p, NULL, 0, NULL};
        pl_step *res = NULL;
        st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        pl_step_free(res);
    }
    cJSON_Delete(p);
    return st ? st : pl_steps_add_result(out, pl_json_empty());
}

/* PostgreSQL: VACUUM the store's tables (@p uri names its schema). */
static int vacuum(const char *server, const char *schema)
{
    PGconn *c = PQconnectdb(server);
    int st = PQstatus(c) == CONNECTION_OK ? 0 : -1;
    static const char *const tables[] = {"runs", "state", "steps", "tombs",
                                         "leases"};
    for (size_t i = 0; !st && i < sizeof tables / sizeof *tables; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "VACUUM \"%s\".%s", schema, tables[i]);
        PGresult *r = PQexec(c, sql);
        st = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
        if (st)
            fprintf(stderr, "pl-bench: churn: %s: %s", sql,
                    PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
    return st;
}

int churn_run(const churn_config *cfg, churn_result *out)
{
    memset(out, 0, sizeof *out);
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_policy_def d = PL_POLICY_DEF_INIT;
    int st = pl_registry_new(&reg);
    if (!st) {
        d.name = "churn_tool";
        d.fn = churn_tool;
        st = pl_registry_add(reg, &d);
    }
    if (!st) {
        d.name = "churn_root";
        d.fn = churn_root;
        st = pl_registry_add(reg, &d);
    }
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = cfg->durability;
    eo.tombstone_ms = cfg->tombstone_ms;
    if (!st)
        st = pl_engine_open(&e, cfg->store, reg, &eo);
    cJSON *payload = cJSON_CreateObject();
    pl_action root = {PL_ACTION_VERSION, "churn_root", payload, NULL, 0, NULL};
    double t0 = now_s();
    for (unsigned c = 1; !st && c <= cfg->cycles; c++) {
        for (unsigned i = 0; !st && i < cfg->runs; i++) {
            pl_outcome *o = NULL;
            st = pl_run_start(&o, e, &root, NULL);
            if (!st && o->status != PL_RUN_COMPLETED)
                st = PL_EPOLICY;
            pl_outcome_free(o);
        }
        uint64_t deleted = 0;
        if (!st)
            st = pl_engine_prune(e, NULL, &deleted);
        if (!st && deleted != cfg->runs)
            st = pl_errorf(PL_ESTATE, "cycle %u pruned %llu runs, not %u", c,
                           (unsigned long long)deleted, cfg->runs);
        if (!st && cfg->pg_server && vacuum(cfg->pg_server, cfg->pg_schema))
            st = PL_ESTORE;
        pl_store_stats s = PL_STORE_STATS_INIT;
        if (!st)
            st = pl_engine_stats(&s, e);
        if (!st && c == cfg->warm)
            out->bytes_warm = s.file_bytes;
        if (!st && c == cfg->cycles) {
            out->bytes_last = s.file_bytes;
            out->runs_left = s.runs;
            out->steps_left = s.step_records;
        }
        if (!st && cfg->progress)
            cfg->progress(c, s.file_bytes, cfg->progress_user);
    }
    out->seconds = now_s() - t0;
    if (st)
        fprintf(stderr, "pl-bench: churn: %s (%s)\n", pl_errmsg(),
                pl_status_name(st));
    cJSON_Delete(payload);
    pl_engine_close(e);
    pl_registry_free(reg);
    out->ratio = out->bytes_warm
                     ? (double)out->bytes_last / (double)out->bytes_warm
                     : NAN;
    return st;
}

/* ---- in pl-bench's report ------------------------------------------------- */

static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static void progress(unsigned cycle, uint64_t bytes, void *user)
{
    const churn_report *r = user;
    if (!r->quiet && (cycle % 10 == 0 || cycle == 1 || r->pg_uri))
        fprintf(stderr, "  churn: cycle %u, %.2f MiB\n", cycle,
                (double)bytes / 1048576.0);
}

int churn_report_run(const churn_report *r)
{
    char store[1400], schema[64] = "";
    churn_config cfg = {0};
    cfg.runs = r->quick ? 200 : 1000;
    cfg.cycles = r->quick ? 30 : 100;
    cfg.warm = 10;
    /* tombstones churn too: each prune removes those of the last */
    cfg.tombstone_ms = 1;
    cfg.progress = progress;
    cfg.progress_user = (void *)r;
    if (r->pg_uri) {
        snprintf(schema, sizeof schema, "pl_churn_%ld", (long)getpid());
        snprintf(store, sizeof store, "%s%cschema=%s", r->pg_uri,
                 strchr(r->pg_uri, '?') ? '&' : '?', schema);
        cfg.pg_server = r->pg_uri;
        cfg.pg_schema = schema;
        cfg.durability = PL_DURABILITY_PROCESS;
    } else {
        snprintf(store, sizeof store, "%s/churn.db", r->dir);
        cfg.durability = PL_DURABILITY_PROCESS;
    }
    cfg.store = store;
    churn_result res;
    int st = churn_run(&cfg, &res);
    if (r->pg_uri) {
        PGconn *c = PQconnectdb(r->pg_uri);
        PQsetNoticeProcessor(c, quiet_notice, NULL);
        char sql[128];
        snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
        PQclear(PQexec(c, sql));
        PQfinish(c);
    } else {
        char lock[1500];
        snprintf(lock, sizeof lock, "%s-lock", store);
        remove(store);
        remove(lock);
    }
    cJSON *j = cJSON_AddObjectToObject(r->json,
                                       r->pg_uri ? "churn_pg" : "churn");
    cJSON_AddNumberToObject(j, "runs_per_cycle", cfg.runs);
    cJSON_AddNumberToObject(j, "cycles", cfg.cycles);
    cJSON_AddNumberToObject(j, "bytes_after_cycle_10", (double)res.bytes_warm);
    cJSON_AddNumberToObject(j, "bytes_after_last", (double)res.bytes_last);
    cJSON_AddNumberToObject(j, "ratio", isfinite(res.ratio) ? res.ratio : 0);
    cJSON_AddNumberToObject(j, "seconds", res.seconds);
    cJSON_AddBoolToObject(j, "goal_met", !st && res.ratio <= 1.10);
    if (!r->quiet)
        printf("Churn (%s): %u runs created and pruned per cycle, %u cycles, "
               "%.1f s\n"
               "  size after cycle 10 %.2f MiB, after cycle %u %.2f MiB: "
               "%.3fx (goal: at most 1.10x) %s\n"
               "  left after the last prune: %llu runs, %llu step records\n\n",
               r->pg_uri ? "PostgreSQL, VACUUM after each prune" : "LMDB",
               cfg.runs, cfg.cycles, res.seconds,
               (double)res.bytes_warm / 1048576.0, cfg.cycles,
               (double)res.bytes_last / 1048576.0, res.ratio,
               !st && res.ratio <= 1.10 ? "met" : "NOT MET",
               (unsigned long long)res.runs_left,
               (unsigned long long)res.steps_left);
    return st ? 1 : 0;
}
