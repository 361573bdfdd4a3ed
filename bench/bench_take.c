/*
 * bench_take.c -- take: a worker's take of the queue's head on PostgreSQL
 * (pl__pg_take(), docs/design.md §14) with many runs running ahead of it,
 * next to the libpq floor's commit in the same run.
 *
 * The store is made with RUNNING runs whose leases other workers hold
 * (ranks 1..RUNNING: queued before every run still queued, as the runs of
 * a busy fleet are) and QUEUED runs queued after them, its tables
 * analyzed; then each take takes the queue's head and keeps its lease
 * unclaimed (the claim is refused: no state is written), as a worker's
 * take does before it executes a run, in one transaction and one commit.
 * What it shows is what the live leases ahead cost a take: the queue's
 * index walking past them, or not.  Then the keyed takes
 * (bench_take_keys.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_take() */

#define RUNNING 10000
#define QUEUED 2000

/* The claim refused: the lease alone is taken and kept. */
int take_refuse(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    (void)t;
    (void)state;
    (void)user;
    *drop = false;
    return PL_EBUSY;
}

/* Runs 1..@p count of schema @p n, each with a state. */
void take_runs(PGconn *c, const char *n, int count)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".runs (id, num, info) SELECT "
             "convert_to('take-' || i, 'UTF8'), nextval('\"%s\".run_num'), "
             "'\\x00' FROM generate_series(1, %d) i",
             n, n, count);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".state SELECT num, '\\x00' FROM \"%s\".runs", n,
             n);
    pg_sql(c, sql);
}

/* A new store @p name, open in @p s, its path in @p path (@p size
 * bytes): its schema. */
const char *take_open(const char *name, char *path, size_t size,
                      pl__pg_store **s)
{
    path_in(path, size, name);
    remove_store(path);
    *s = NULL;
    if (pl__pg_open(s, path, NULL))
        die("opening a take's store");
    return strstr(path, "schema=") + 7;
}

/* The runs of schema @p n: RUNNING running, then QUEUED queued. */
static void take_fill(PGconn *c, const char *n)
{
    char sql[1024];
    take_runs(c, n, RUNNING + QUEUED);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank) "
             "SELECT num, CASE WHEN num <= %d THEN 1 ELSE 0 END, CASE WHEN "
             "num <= %d THEN 'other@host' ELSE '' END, 'take-' || num, CASE "
             "WHEN num <= %d THEN (extract(epoch from clock_timestamp()) * "
             "1e6)::bigint + 3600000000 ELSE 0 END, num FROM \"%s\".runs",
             n, RUNNING, RUNNING, RUNNING, n);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "ANALYZE \"%s\".runs, \"%s\".state, \"%s\".leases", n, n, n);
    pg_sql(c, sql);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int report_take(bool quick)
{
    if (!g_pg_uri) {
        say("\ntake: on PostgreSQL only (--store), but for a wake's keys\n");
        return report_keys_scale_lmdb(quick,
                                      cJSON_AddObjectToObject(g_json, "take"));
    }
    int n = quick ? 200 : QUEUED / 2;
    say("\ntake: a worker's take of the queue's head with %d runs running "
        "ahead of it (%d takes)\n",
        RUNNING, n);
    char path[1200];
    pl__pg_store *s;
    const char *schema = take_open("take", path, sizeof path, &s);
    PGconn *c = pg_connect();
    take_fill(c, schema);
    double *t = malloc(sizeof *t * (size_t)n);
    if (!t)
        die("out of memory");
    int failures = 0, done = 0;
    uint64_t want = RUNNING + 1; /* the queue's head, in rank order */
    for (int i = 0; i < n; i++, done++) {
        pl__lease l = {0};
        bool taken;
        double t0 = now_s();
        int st = pl__pg_take(s, "bench@host", 60000000, take_refuse, NULL, &l,
                             &taken);
        t[i] = now_s() - t0;
        if (!taken || st != PL_EBUSY || l.run != want + (uint64_t)i) {
            say("  take %d: %s run #%llu, not #%llu (%s)\n", i,
                taken ? "took" : "took no", (unsigned long long)l.run,
                (unsigned long long)(want + (uint64_t)i), pl_errmsg());
            failures = 1;
            break;
        }
    }
    double floor = floor_commit_s();
    qsort(t, (size_t)done, sizeof *t, cmp_double);
    double p50 = done ? t[done / 2] : 0, p99 = done ? t[done * 99 / 100] : 0;
    say("  a take, p50 / p99                %8.2f / %.2f ms\n"
        "  one commit of the floor          %8.2f ms (take p50 %.1fx)\n",
        p50 * 1e3, p99 * 1e3, floor * 1e3, floor > 0 ? p50 / floor : 0);
    cJSON *o = cJSON_AddObjectToObject(g_json, "take");
    jnum(o, "running", RUNNING);
    jnum(o, "takes", done);
    jnum(o, "p50_ms", p50 * 1e3);
    jnum(o, "p99_ms", p99 * 1e3);
    jnum(o, "floor_ms", floor * 1e3);
    free(t);
    PQfinish(c);
    pl__pg_close(s);
    remove_store(path);
    return failures | report_take_keys(quick, o);
}
