/*
 * bench_keys_scale.c -- take, keyed, at scale: what a wake and a take on
 * PostgreSQL (pl__pg_take_due(), pl__pg_take(); pg_flow.c, KEYS and TIMER
 * KEYS; docs/design.md §14) cost past what their keys refuse, next to the
 * libpq floor's commit in the same run.
 *
 *   wake_key_full:  a key of limit 1 with one run running and DUE_KEY
 *                   runs parked with it on due timers, due ahead of TAIL
 *                   runs without a key: each wake takes the next of those;
 *   wake_full_keys: FULL_KEYS keys of limit 1, each with one run running
 *                   and one parked on a due timer, due ahead of TAIL
 *                   runs without a key: each wake takes the next of
 *                   those (and the same with a fifth of the keys);
 *   take_full_keys: FULL_KEYS keys of limit 1, each with one run running
 *                   and one queued, ranked ahead of TAIL queued runs
 *                   without a key: each take takes the next of those
 *                   (and the same with a fifth of the keys).
 *
 * On LMDB (no --store), lmdb_wake_key_full: the wake's case by the engine
 * (runs parked and signalled, the key's place held by a run executing),
 * LMDB_DUE_KEY due runs of the full key ahead of LMDB_FREE runs without a
 * key, all woken and executed by one pl_engine_wake(); against the same
 * LMDB_FREE runs with nothing due ahead, in the same run.
 *
 * RUNNING runs without a key run meanwhile, as in bench_take_keys.c;
 * after each wake or take its lease is dropped (outside the time
 * measured), so every one finds the store as the first did.  The buffers
 * are EXPLAIN (ANALYZE, BUFFERS)'s of pl_wake(1) and pl_take(), in a
 * transaction rolled back.  The server's CPU is its store connection's
 * (/proc, utime + stime): a figure the host's other load moves less than
 * the time a wake or take takes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_take(), pl__pg_take_due() */

#define DUE_KEY 10000
#define FULL_KEYS 5000
#define TAIL 2000
#define RUNNING 1000
#define LMDB_DUE_KEY 10000
#define LMDB_FREE 200

#define NOW_SQL "(extract(epoch from clock_timestamp()) * 1e6)::bigint"

/* The planner's statistics of a timed schema @p n, once it is filled. */
static void analyze_timed(PGconn *c, const char *n)
{
    char sql[512]; /* five names of at most 63 bytes */
    snprintf(sql, sizeof sql,
             "ANALYZE \"%s\".runs, \"%s\".state, \"%s\".leases, \"%s\".timers, "
             "\"%s\".parked",
             n, n, n, n, n);
    pg_sql(c, sql);
}

/* Schema @p n for wake_key_full: run 1 running with key "tenant" (limit
 * 1), runs 2..DUE_KEY + 1 parked with it on timers due at their numbers,
 * then TAIL runs without a key due after them, then RUNNING running
 * without a key.  The timers' keys filled as the store keeps them, where
 * it keeps them (a build before timers.fkey has no such column). */
static void wake_fill(PGconn *c, const char *n)
{
    char sql[1400];
    int parked = DUE_KEY + 1, due = parked + TAIL;
    take_runs(c, n, due + RUNNING);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
             "fkey, flimit) SELECT num, 1, 'other@host', 'k-' || num, " NOW_SQL
             " + 3600000000, 0, CASE WHEN num = 1 THEN 'tenant' END, CASE "
             "WHEN num = 1 THEN 1 ELSE 0 END FROM \"%s\".runs WHERE num = 1 "
             "OR num > %d",
             n, n, due);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".parked (run, fkey, flimit) SELECT num, "
             "'tenant', 1 FROM \"%s\".runs WHERE num BETWEEN 2 AND %d",
             n, n, parked);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".timers (run, due, id, rec) SELECT num, num, "
             "'k-' || num, '\\x00' FROM \"%s\".runs WHERE num BETWEEN 2 AND "
             "%d",
             n, n, due);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "DO $d$ BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE attrelid "
             "= '\"%s\".timers'::regclass AND attname = 'fkey' AND NOT "
             "attisdropped) THEN EXECUTE 'UPDATE \"%s\".timers t SET fkey = "
             "p.fkey FROM \"%s\".parked p WHERE p.run = t.run'; END IF; END "
             "$d$",
             n, n, n);
    pg_sql(c, sql);
    analyze_timed(c, n);
}

/* Schema @p n for wake_full_keys: runs 1..@p keys running, each with a
 * key of its own (limit 1), runs @p keys + 1..2 * @p keys parked with
 * them on timers due at their numbers, then TAIL runs without a key due
 * after them, then RUNNING running without a key. */
static void wake_keys_fill(PGconn *c, const char *n, int keys)
{
    char sql[1400];
    int due = 2 * keys + TAIL;
    take_runs(c, n, due + RUNNING);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
             "fkey, flimit) SELECT num, 1, 'other@host', 'k-' || num, " NOW_SQL
             " + 3600000000, 0, CASE WHEN num <= %d THEN 'key' || lpad(num || "
             "'', 5, '0') END, CASE WHEN num <= %d THEN 1 ELSE 0 END FROM "
             "\"%s\".runs WHERE num <= %d OR num > %d",
             n, keys, keys, n, keys, due);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".parked (run, fkey, flimit) SELECT num, 'key' "
             "|| lpad(num - %d || '', 5, '0'), 1 FROM \"%s\".runs WHERE num "
             "BETWEEN %d AND %d",
             n, keys, n, keys + 1, 2 * keys);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".timers (run, due, id, rec, fkey) SELECT "
             "r.num, r.num, 'k-' || r.num, '\\x00', p.fkey FROM \"%s\".runs r "
             "LEFT JOIN \"%s\".parked p ON p.run = r.num WHERE r.num BETWEEN "
             "%d AND %d",
             n, n, n, keys + 1, due);
    pg_sql(c, sql);
    analyze_timed(c, n);
}

/* Schema @p n for take_full_keys: runs 1..@p keys running, each with a
 * key of its own (limit 1), runs @p keys + 1..2 * @p keys queued with
 * them, then TAIL queued without a key, then RUNNING running without. */
static void keys_fill(PGconn *c, const char *n, int keys)
{
    char sql[1400];
    int queued = 2 * keys + TAIL;
    take_runs(c, n, queued + RUNNING);
    snprintf(
        sql, sizeof sql,
        "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
        "fkey, flimit) SELECT num, CASE WHEN num <= %d OR num > %d THEN 1 "
        "ELSE 0 END, CASE WHEN num <= %d OR num > %d THEN 'other@host' ELSE "
        "'' END, 'k-' || num, CASE WHEN num <= %d OR num > %d THEN " NOW_SQL
        " + 3600000000 ELSE 0 END, CASE WHEN num > %d THEN 0 ELSE num END, "
        "CASE WHEN num <= %d THEN 'key' || lpad((num - 1) %% %d + 1 || '', "
        "5, '0') END, CASE WHEN num <= %d THEN 1 ELSE 0 END FROM \"%s\".runs",
        n, keys, queued, keys, queued, keys, queued, queued, 2 * keys, keys,
        2 * keys, n);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "ANALYZE \"%s\".runs, \"%s\".state, \"%s\".leases", n, n, n);
    pg_sql(c, sql);
}

long explain_buffers(PGconn *c, const char *sql)
{
    long b = -1;
    for (int i = 0; i < 2; i++) {
        pg_sql(c, "BEGIN");
        PGresult *r = PQexec(c, sql);
        b = -1;
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            cJSON *j = cJSON_Parse(PQgetvalue(r, 0, 0));
            cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "Plan");
            cJSON *h = cJSON_GetObjectItem(p, "Shared Hit Blocks");
            cJSON *d = cJSON_GetObjectItem(p, "Shared Read Blocks");
            if (cJSON_IsNumber(h) && cJSON_IsNumber(d))
                b = (long)(h->valuedouble + d->valuedouble);
            cJSON_Delete(j);
        }
        PQclear(r);
        pg_sql(c, "ROLLBACK");
    }
    return b;
}

/* Seconds of CPU the server's other connections (the store's) have used,
 * as @p c sees them; -1 if /proc has none of them. */
static double server_cpu_s(PGconn *c)
{
    PGresult *r = PQexec(c, "SELECT pid FROM pg_stat_activity WHERE pid <> "
                            "pg_backend_pid() AND backend_type = 'client "
                            "backend'");
    double cpu = -1;
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r);
         i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", PQgetvalue(r, i, 0));
        FILE *f = fopen(path, "r");
        size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[got] = '\0';
        /* after the command's ")": state, then 10 fields to utime, stime */
        const char *p = strrchr(buf, ')');
        unsigned long long ut, st;
        if (p && sscanf(p + 1,
                        " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu "
                        "%llu",
                        &ut, &st) == 2)
            cpu = (cpu < 0 ? 0 : cpu) +
                  (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    PQclear(r);
    return cpu;
}

int timed_takes(pl__pg_store *s, PGconn *c, const char *schema, bool wake,
                int n, uint64_t first, uint64_t step, double *t, int *done)
{
    for (*done = 0; *done < n; ++*done) {
        int i = *done;
        pl__lease l = {0};
        bool taken;
        int64_t next;
        uint64_t want = first + (uint64_t)i * step;
        double t0 = now_s();
        int st = wake ? pl__pg_take_due(s, "bench@host", 60000000, take_refuse,
                                        NULL, &l, &taken, &next)
                      : pl__pg_take(s, "bench@host", 60000000, take_refuse,
                                    NULL, &l, &taken);
        t[i] = now_s() - t0;
        if (!taken || st != PL_EBUSY || l.run != want) {
            say("    %s %d: %s run #%llu, not #%llu (%s)\n",
                wake ? "wake" : "take", i, taken ? "took" : "took no",
                (unsigned long long)l.run, (unsigned long long)want,
                pl_errmsg());
            return 1;
        }
        char sql[256];
        snprintf(sql, sizeof sql, "DELETE FROM \"%s\".leases WHERE run = %llu",
                 schema, (unsigned long long)l.run);
        pg_sql(c, sql);
    }
    return 0;
}

void take_case_end(cJSON *k, double p50, double p99, long buffers, double *t,
                   PGconn *c, pl__pg_store *s, const char *path)
{
    jnum(k, "p50_ms", p50 * 1e3);
    jnum(k, "p99_ms", p99 * 1e3);
    jnum(k, "buffers", (double)buffers);
    free(t);
    PQfinish(c);
    pl__pg_close(s);
    remove_store(path);
}

/* One case, a wake (@p wake) or a take past @p keys full keys (a wake
 * with none: past the one full key's due timers): @p n of them, each
 * expected to take run @p first + i, timed; 1 on a wrong one. */
static int scale_case(const char *name, const char *what, bool wake, int keys,
                      int n, uint64_t first, double floor, cJSON *o)
{
    say("  %s: %s\n", name, what);
    char path[1200], sql[512];
    pl__pg_store *s;
    const char *schema = take_open(name, path, sizeof path, &s);
    PGconn *c = pg_connect();
    if (wake && !keys)
        wake_fill(c, schema);
    else if (wake)
        wake_keys_fill(c, schema, keys);
    else
        keys_fill(c, schema, keys);
    snprintf(sql, sizeof sql,
             "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM "
             "\"%s\".%s",
             schema, wake ? "pl_wake(1)" : "pl_take('bench@host', 60000000)");
    long buffers = explain_buffers(c, sql);
    double *t = malloc(sizeof *t * (size_t)n);
    if (!t)
        die("out of memory");
    int done;
    double cpu0 = server_cpu_s(c);
    int failures = timed_takes(s, c, schema, wake, n, first, 1, t, &done);
    double cpu = server_cpu_s(c) - cpu0;
    if (cpu0 < 0 || !done)
        cpu = -1;
    else
        cpu /= done;
    double p50 = percentile(t, (size_t)done, 0.5),
           p99 = percentile(t, (size_t)done, 0.99);
    say("    a %s, p50 / p99              %8.2f / %.2f ms (floor %.1fx)\n"
        "    the server's CPU, one          %8.2f ms\n"
        "    its function's buffers, one    %8ld\n",
        wake ? "wake" : "take", p50 * 1e3, p99 * 1e3,
        floor > 0 ? p50 / floor : 0, cpu * 1e3, buffers);
    cJSON *k = cJSON_AddObjectToObject(o, name);
    jnum(k, "refused", wake && !keys ? DUE_KEY : keys);
    jnum(k, "n", done);
    jnum(k, "server_cpu_ms", cpu * 1e3);
    take_case_end(k, p50, p99, buffers, t, c, s, path);
    return failures;
}

int report_keys_scale(bool quick, cJSON *o)
{
    double floor = floor_commit_s();
    say("\ntake, keyed, past what keys refuse (one commit of the floor %.2f "
        "ms)\n",
        floor * 1e3);
    int f = scale_case("wake_key_full",
                       "a wake past 10,000 due timers of a full key", true, 0,
                       quick ? 100 : 500, DUE_KEY + 2, floor, o);
    /* the wake's and the take's cost against the keys: a fifth of them
     * too */
    f |= scale_case("wake_full_keys_1000",
                    "a wake past 1,000 full keys' due timers", true,
                    FULL_KEYS / 5, quick ? 20 : 100, 2 * FULL_KEYS / 5 + 1,
                    floor, o);
    f |= scale_case("wake_full_keys", "a wake past 5,000 full keys' due timers",
                    true, FULL_KEYS, quick ? 20 : 100, 2 * FULL_KEYS + 1, floor,
                    o);
    f |= scale_case("take_full_keys_1000",
                    "a take past 1,000 full keys' queued runs", false,
                    FULL_KEYS / 5, quick ? 20 : 100, 2 * FULL_KEYS / 5 + 1,
                    floor, o);
    f |= scale_case("take_full_keys",
                    "a take past 5,000 full keys' queued runs", false,
                    FULL_KEYS, quick ? 20 : 100, 2 * FULL_KEYS + 1, floor, o);
    return f;
}

/* ---- LMDB: a wake past a full key's due timers, by the engine ------------ */

static atomic_int g_holding, g_release;

/* "ks-wait": waits for the event "go" (parked meanwhile), then ends. */
static int ks_wait(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "ks-hold": holds its key's place until g_release. */
static int ks_hold(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)a;
    (void)u;
    atomic_store(&g_holding, 1);
    while (!atomic_load(&g_release)) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    return pl_steps_add_resultf(out, "{}");
}

/* Run @p id of @p policy submitted (with key "tenant", limit 1, when
 * @p key) and continued: "ks-wait" parks. */
static void ks_start(pl_engine *e, const char *policy, const char *id, bool key)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = cJSON_CreateObject();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    if (key) {
        ro.concurrency_key = "tenant";
        ro.concurrency_limit = 1;
    }
    if (pl_run_submit(NULL, e, &root, &ro))
        die("submitting a run");
    cJSON_Delete((cJSON *)root.payload);
    pl_outcome *o = NULL;
    if (pl_run_continue(&o, e, id, NULL) || o->status != PL_RUN_WAITING)
        die("parking a run");
    pl_outcome_free(o);
}

static void *ks_hold_main(void *arg)
{
    pl_outcome *o = NULL;
    if (pl_run_continue(&o, arg, "hold", NULL))
        die("the key's holder");
    pl_outcome_free(o);
    return NULL;
}

/* The wake of LMDB_FREE runs without a key behind @p keyed due runs of a
 * full key: seconds a run woken; *failed: some were not. */
static double ks_wake(const char *name, int keyed, int *failed)
{
    char path[1200], id[32];
    path_in(path, sizeof path, name);
    remove_store(path);
    pl_registry *reg = make_registry(false);
    if (pl_registry_add_fn(reg, "ks-wait", ks_wait, NULL) ||
        pl_registry_add_fn(reg, "ks-hold", ks_hold, NULL))
        die("registering");
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    if (pl_engine_set_wait_in_place(e, 0))
        die("parking");
    for (int i = 0; i < keyed; i++) {
        snprintf(id, sizeof id, "k%d", i);
        ks_start(e, "ks-wait", id, true);
    }
    for (int i = 0; i < LMDB_FREE; i++) {
        snprintf(id, sizeof id, "f%d", i);
        ks_start(e, "ks-wait", id, false);
    }
    pl_action root = PL_ACTION_INIT;
    root.policy = "ks-hold";
    root.payload = cJSON_CreateObject();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "hold";
    ro.concurrency_key = "tenant";
    ro.concurrency_limit = 1;
    if (pl_run_submit(NULL, e, &root, &ro))
        die("submitting the holder");
    cJSON_Delete((cJSON *)root.payload);
    atomic_store(&g_holding, 0);
    atomic_store(&g_release, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, ks_hold_main, e))
        die("thread");
    while (!atomic_load(&g_holding)) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    cJSON *p = cJSON_CreateObject();
    for (int i = 0; i < keyed + LMDB_FREE; i++) {
        if (i < keyed)
            snprintf(id, sizeof id, "k%d", i);
        else
            snprintf(id, sizeof id, "f%d", i - keyed);
        if (pl_run_signal(NULL, e, id, "go", p))
            die("signalling");
    }
    cJSON_Delete(p);
    int64_t next = 0;
    double t0 = now_s();
    if (pl_engine_wake(e, &next))
        die("waking");
    double t = now_s() - t0;
    int left = 0;
    for (int i = 0; i < LMDB_FREE; i++) {
        pl_run_info *info = NULL;
        snprintf(id, sizeof id, "f%d", i);
        if (pl_run_get(&info, e, id))
            die("reading a run");
        left += info->status != PL_RUN_COMPLETED;
        pl_run_info_free(info);
    }
    if (left)
        say("  %d of the %d runs without a key not woken\n", left, LMDB_FREE);
    *failed = left != 0;
    atomic_store(&g_release, 1);
    pthread_join(th, NULL);
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
    return t / LMDB_FREE;
}

int report_keys_scale_lmdb(bool quick, cJSON *o)
{
    int keyed = quick ? LMDB_DUE_KEY / 10 : LMDB_DUE_KEY;
    say("\nwake, keyed, on LMDB: %d runs without a key woken past %d due "
        "runs of a full key\n",
        LMDB_FREE, keyed);
    int f0, f1;
    double floor = ks_wake("wake_free", 0, &f0);
    double past = ks_wake("wake_key_full", keyed, &f1);
    say("  a run woken and executed, nothing due ahead   %8.3f ms\n"
        "  the same past the full key's due runs          %8.3f ms (%.1fx)\n",
        floor * 1e3, past * 1e3, floor > 0 ? past / floor : 0);
    cJSON *k = cJSON_AddObjectToObject(o, "lmdb_wake_key_full");
    jnum(k, "refused", keyed);
    jnum(k, "floor_ms", floor * 1e3);
    jnum(k, "ms", past * 1e3);
    return f0 | f1;
}
