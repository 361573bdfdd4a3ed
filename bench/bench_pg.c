/*
 * bench_pg.c -- W1 and W3 on the PostgreSQL store (--store), next to a
 * libpq floor.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "bench.h"
#include "cli.h"      /* cli_store_shown(): no password printed */
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- PostgreSQL: W1 and W3 on the PostgreSQL store ------------------------------ */

/*
 * With --store postgresql://...: W1 and W3 on the PostgreSQL store, next to
 * a raw libpq floor on the same server in the same run: a 160 B record
 * INSERTed and committed by itself (autocommit: the statement and its
 * commit in one round trip, a prepared statement), with the engine's
 * synchronous_commit for the mode (on for sync and group, off for
 * process).  Every store and floor is a schema of its own, made fresh for
 * each repetition and dropped after it; path_in() and remove_store() name
 * and drop them, so the LMDB workloads' children run unchanged.
 */
/* "w1.db" -> plbench_w1_db_<pid>: a schema of this run's own. */
static void pg_schema(char *out, size_t n, const char *name)
{
    int len = snprintf(out, n, "plbench_%s_%ld", name, (long)getpid());
    for (int i = 0; i < len && (size_t)i < n; i++)
        if (out[i] == '.' || out[i] == '-')
            out[i] = '_';
}

void pg_path_in(char *out, size_t n, const char *name)
{
    char schema[128];
    pg_schema(schema, sizeof schema, name);
    snprintf(out, n, "%s%cschema=%s", g_pg_uri,
             strchr(g_pg_uri, '?') ? '&' : '?', schema);
}

static void pg_quiet(void *user, const char *message)
{
    (void)user;
    (void)message;
}

PGconn *pg_connect(void)
{
    PGconn *c = PQconnectdb(g_pg_uri);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pl-bench: cannot connect to %s: %s",
                cli_store_shown(g_pg_uri), PQerrorMessage(c));
        _exit(1);
    }
    PQsetNoticeProcessor(c, pg_quiet, NULL); /* DROP ... CASCADE's */
    return c;
}

static PGconn *g_xid_conn; /* store_commits()'s, in this process */
static pid_t g_xid_pid;

uint64_t store_commits(pl_engine *e)
{
    uint64_t v = 0;
    if (!g_pg_uri) {
        if (pl_engine_change_mark(&v, e))
            die("change mark");
        return v;
    }
    if (!g_xid_conn || g_xid_pid != getpid()) {
        g_xid_conn = pg_connect();
        g_xid_pid = getpid();
    }
    PGresult *r = PQexec(g_xid_conn, "SELECT txid_snapshot_xmax("
                                     "txid_current_snapshot())");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        fprintf(stderr, "pl-bench: reading the next xid: %s",
                PQresultErrorMessage(r));
        _exit(1);
    }
    v = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

void pg_sql(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK) {
        fprintf(stderr, "pl-bench: %s: %s", sql, PQresultErrorMessage(r));
        _exit(1);
    }
    PQclear(r);
}

/* ---- the server's WAL flushes ---------------------------------------------- */

int pg_wal_counts(long long *syncs, long long *commits)
{
    PGconn *c = pg_connect();
    /* a session's statistics reach the server when it ends: wait for the
     * others to end (5 s at most) */
    long long others = 1;
    for (int i = 0; i < 500 && others; i++) {
        PGresult *r = PQexec(c, "SELECT count(*) FROM pg_stat_activity "
                                "WHERE backend_type = 'client backend' AND "
                                "pid <> pg_backend_pid()");
        others = PQresultStatus(r) == PGRES_TUPLES_OK
                     ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
                     : -1;
        PQclear(r);
        if (others > 0) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    pg_sql(c, "SELECT pg_stat_clear_snapshot()");
    PGresult *r = PQexec(c, "SELECT wal_sync, (SELECT xact_commit FROM "
                            "pg_stat_database WHERE datname = "
                            "current_database()) FROM pg_stat_wal");
    int rc = others == 0 && PQresultStatus(r) == PGRES_TUPLES_OK &&
                     PQntuples(r) == 1
                 ? 0
                 : -1;
    if (!rc) {
        *syncs = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        *commits = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    }
    PQclear(r);
    PQfinish(c);
    return rc;
}

/* ---- CPU, the server's and the process's ---------------------------------- */

/* Field @p n (1-based, as proc(5) numbers them) of /proc/@p pid/stat, after
 * the command's parentheses; -1 when it cannot be read. */
static long long proc_stat_field(long long pid, int n)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *p = strrchr(buf, ')');
    for (int i = 3; p && i <= n; i++) {
        p = strchr(p + 1, ' ');
        if (p && i == n)
            return strtoll(p + 1, NULL, 10);
    }
    return -1;
}

long long pg_postmaster(void)
{
    PGconn *c = pg_connect();
    PGresult *r = PQexec(c, "SELECT pg_backend_pid()");
    long long pm = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        pm = proc_stat_field(strtoll(PQgetvalue(r, 0, 0), NULL, 10), 4);
    PQclear(r);
    PQfinish(c);
    return pm > 1 ? pm : -1;
}

double schedstat_s(const char *path)
{
    unsigned long long ns;
    FILE *f = fopen(path, "r");
    double s = f && fscanf(f, "%llu", &ns) == 1 ? (double)ns / 1e9 : 0;
    if (f)
        fclose(f);
    return s;
}

double pg_server_cpu_s(long long pm)
{
    long long reaped = proc_stat_field(pm, 16),
              sreaped = proc_stat_field(pm, 17);
    DIR *d = pm > 0 && reaped >= 0 && sreaped >= 0 ? opendir("/proc") : NULL;
    if (!d)
        return -1;
    double s = (double)(reaped + sreaped) / (double)sysconf(_SC_CLK_TCK);
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long long pid = strtoll(e->d_name, &end, 10);
        if (*end || pid <= 0 || (pid != pm && proc_stat_field(pid, 4) != pm))
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%lld/schedstat", pid);
        s += schedstat_s(path);
    }
    closedir(d);
    return s;
}

double self_cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* Drop the schema of a pg_path_in() path. */
void pg_remove(const char *path)
{
    const char *schema = strstr(path, "schema=");
    if (!schema)
        return;
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
             schema + 7);
    PGconn *c = pg_connect();
    pg_sql(c, sql);
    PQfinish(c);
}

/* A floor session: the mode's synchronous_commit, the INSERT prepared. */
static PGconn *pg_floor_session(pl_durability mode, const char *schema)
{
    PGconn *c = pg_connect();
    pg_sql(c, mode == PL_DURABILITY_PROCESS ? "SET synchronous_commit = off"
                                            : "SET synchronous_commit = on");
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO \"%s\".r (k, v) VALUES ($1, $2)",
             schema);
    PGresult *r = PQprepare(c, "put", sql, 2, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "pl-bench: %s: %s", sql, PQresultErrorMessage(r));
        _exit(1);
    }
    PQclear(r);
    return c;
}

/* Writer @p id's records from .. from+n-1, each committed alone. */
static void pg_floor_puts(PGconn *c, int id, int from, int n)
{
    char key[12], val[160];
    memset(val, 'v', sizeof val);
    const char *vals[2] = {key, val};
    int lens[2] = {sizeof key, sizeof val}, fmts[2] = {1, 1};
    for (int i = from; i < from + n; i++) {
        uint32_t be[3] = {htonl((uint32_t)id), 0, htonl((uint32_t)i)};
        memcpy(key, be, sizeof key);
        PGresult *r = PQexecPrepared(c, "put", 2, vals, lens, fmts, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "pl-bench: floor insert: %s",
                    PQresultErrorMessage(r));
            _exit(1);
        }
        PQclear(r);
    }
}

/* A fresh floor table in the schema of @p name (its path_in() path and
 * pg_schema() into @p path and @p schema). */
static void pg_floor_create(const char *name, char path[1100], char schema[128])
{
    char sql[512];
    path_in(path, 1100, name);
    pg_schema(schema, 128, name);
    pg_remove(path);
    PGconn *c = pg_connect();
    snprintf(sql, sizeof sql,
             "CREATE SCHEMA \"%s\"; CREATE TABLE \"%s\".r (k bytea PRIMARY "
             "KEY, v bytea NOT NULL)",
             schema, schema);
    pg_sql(c, sql);
    PQfinish(c);
}

PGconn *pg_floor_turns(const char *name, pl_durability mode)
{
    char path[1100], schema[128];
    pg_floor_create(name, path, schema);
    return pg_floor_session(mode, schema);
}

void pg_floor_turn(PGconn *c, int i) { pg_floor_puts(c, 0, i, 1); }

void pg_floor_turns_end(PGconn *c, const char *name)
{
    char path[1100];
    path_in(path, sizeof path, name);
    PQfinish(c);
    pg_remove(path);
}

typedef struct pg_floor_thread {
    const floor_arg *a;
    const char *schema;
    int id;
} pg_floor_thread;

static void *pg_floor_commits(void *arg)
{
    const pg_floor_thread *t = arg;
    PGconn *c = pg_floor_session(t->a->mode, t->schema);
    pg_floor_puts(c, t->id, 0, t->a->n);
    PQfinish(c);
    return NULL;
}

/* The floor: a->threads sessions making a->n commits each. */
void pg_floor(const void *varg, void *vres)
{
    const floor_arg *a = varg;
    floor_res *r = vres;
    char path[1100], schema[128];
    pg_floor_create("floor", path, schema);
    pg_floor_thread args[256];
    int threads = a->threads < 1 ? 1 : a->threads > 256 ? 256 : a->threads;
    for (int i = 0; i < threads; i++)
        args[i] = (pg_floor_thread){a, schema, i};
    timed_threads(pg_floor_commits, args, sizeof *args, threads, a->n, r);
    pg_remove(path);
}

/*
 * The drift's probe on PostgreSQL (bench_floor.c): PROBE_REPS rounds of
 * a->n commits each on one session, timed apart from the session's start
 * (a backend forked, its caches filled: milliseconds that move with the
 * server's memory, not with the host's speed) and after a->n / 4 commits
 * not timed, which warm the new table's pages and the plan.
 */
void pg_probe(const void *varg, void *vres)
{
    const floor_arg *a = varg;
    probe_res *r = vres;
    char path[1100], schema[128];
    pg_floor_create("probe", path, schema);
    PGconn *c = pg_floor_session(a->mode, schema);
    int from = a->n / 4;
    pg_floor_puts(c, 0, 0, from);
    for (int i = 0; i < PROBE_REPS; i++, from += a->n) {
        double t0 = now_s();
        pg_floor_puts(c, 0, from, a->n);
        r->s[r->n++] = (now_s() - t0) / a->n;
    }
    PQfinish(c);
    pg_remove(path);
}

/* The server as a workload leaves it, settled: its dirty pages written
 * (CHECKPOINT) and its autovacuum workers gone (at most SETTLE_MAX_S),
 * so that the drift's probe after a workload measures the host, not the
 * server's work after that workload's writes. */
#define SETTLE_MAX_S 60
void pg_settle(void)
{
    PGconn *c = pg_connect();
    pg_sql(c, "CHECKPOINT");
    double t0 = now_s();
    while (now_s() - t0 < SETTLE_MAX_S) {
        PGresult *r = PQexec(c, "SELECT count(*) FROM pg_stat_activity WHERE "
                                "backend_type = 'autovacuum worker'");
        bool busy = PQresultStatus(r) == PGRES_TUPLES_OK &&
                    strcmp(PQgetvalue(r, 0, 0), "0") != 0;
        PQclear(r);
        if (!busy)
            break;
        struct timespec nap = {0, 100000000L};
        nanosleep(&nap, NULL);
    }
    PQfinish(c);
}

/* The floor's side of W1's turns (see w1_turns) on PostgreSQL. */
static void pg_floor_in_turns(const void *varg, void *vres)
{
    const w1_arg *a = varg;
    turns_res *r = vres;
    signal(SIGPIPE, SIG_IGN);
    close(a->turns->to_floors[1]);
    close(a->turns->to_run[0]);
    char path[1100], schema[128];
    pg_floor_create("floor", path, schema);
    PGconn *c = pg_floor_session(a->mode, schema);
    int n;
    while (read(a->turns->to_floors[0], &n, sizeof n) == (ssize_t)sizeof n) {
        double t0 = now_s();
        pg_floor_puts(c, 0, r->n, n);
        r->floor_s += now_s() - t0;
        r->n += n;
        char done = 1;
        if (write(a->turns->to_run[1], &done, 1) != 1)
            break;
    }
    PQfinish(c);
    pg_remove(path);
}

/* One repetition of W1 on PostgreSQL: sync and group take turns with the
 * floor every TURN calls, process runs back to back, first in turn (k). */
static int pg_w1_rep(const w1_arg *a, int k, w1_res *run, double *floor_s)
{
    if (a->mode == PL_DURABILITY_PROCESS) {
        floor_arg fa = {a->mode, a->n, 1, false};
        floor_res fr;
        int rc = k % 2 ? in_child(pg_floor, &fa, &fr, sizeof fr) ||
                             in_child(w1_child, a, run, sizeof *run)
                       : in_child(w1_child, a, run, sizeof *run) ||
                             in_child(pg_floor, &fa, &fr, sizeof fr);
        *floor_s = fr.per_record_s;
        return rc;
    }
    w1_turns t;
    if (pipe(t.to_floors))
        return -1;
    if (pipe(t.to_run)) {
        close(t.to_floors[0]);
        close(t.to_floors[1]);
        return -1;
    }
    w1_arg ta = *a;
    ta.turns = &t;
    turns_res floors;
    int from_floor, from_run;
    pid_t fpid = child_start(pg_floor_in_turns, &ta, &floors, sizeof floors,
                             &from_floor);
    pid_t rpid = fpid < 0
                     ? -1
                     : child_start(w1_child, &ta, run, sizeof *run, &from_run);
    /* only the two children hold the pipes now */
    close(t.to_floors[0]);
    close(t.to_floors[1]);
    close(t.to_run[0]);
    close(t.to_run[1]);
    int rc = rpid < 0 ? -1 : child_finish(rpid, from_run, run, sizeof *run);
    if (fpid < 0 ||
        child_finish(fpid, from_floor, &floors, sizeof floors) != 0 ||
        floors.n != a->n)
        return -1;
    *floor_s = floors.floor_s / a->n;
    return rc;
}

/* W1 on PostgreSQL in every mode, next to the floor; returns the failures. */
int report_pg_w1(bool quick)
{
    int failures = 0, n = quick ? 300 : 2000;
    cJSON *jw1 = cJSON_AddArrayToObject(g_json, "pg_w1_sequential");
    say("W1 sequential on PostgreSQL: one run, %d calls; floor: a 160 B "
        "INSERT committed alone\n  (same synchronous_commit), measured in "
        "turns with the run every %d calls (sync,\n  group) or back to back "
        "(process)\n",
        n, TURN);
    say("  %-8s %6s %9s %8s %8s %8s %9s %7s %6s %6s %8s\n", "mode", "N",
        "calls/s", "us/call", "p50 us", "p95 us", "floor us", "ratio", "rt",
        "stmts", "rt us");
    for (size_t m = 0; m < 3; m++) {
        w1_arg a = {modes[m], n, NULL};
        w1_res runs[REPS_MAX];
        double eng[REPS_MAX], flo[REPS_MAX], pair[REPS_MAX];
        int ok = 0;
        cJSON *o = cJSON_CreateObject();
        drift d;
        drift_begin(&d, modes[m]);
        for (int k = 0; k < g_reps; k++) {
            if (pg_w1_rep(&a, k, &runs[ok], &flo[ok]))
                continue;
            eng[ok] = runs[ok].per_call_s;
            pair[ok] = eng[ok] / flo[ok];
            ok++;
        }
        drift_end(&d, o);
        if (!ok) {
            say("  %-8s %6d failed\n", pl_durability_name(modes[m]), n);
            failures++;
            cJSON_Delete(o);
            continue;
        }
        double eng_s = median(eng, ok), floor_s = median(flo, ok);
        double ratio = median(pair, ok);
        w1_res r = runs[0];
        for (int k = 0; k < ok; k++) /* the run with the median time */
            if (runs[k].per_call_s == eng_s)
                r = runs[k];
        say("  %-8s %6d %9.0f %8.1f %8.1f %8.1f %9.1f %6.2fx %6.2f %6.2f %8.1f"
            "  %s\n",
            pl_durability_name(modes[m]), n, r.calls_per_s, eng_s * 1e6,
            r.p50_s * 1e6, r.p95_s * 1e6, floor_s * 1e6, ratio,
            r.round_trips_per_call, r.statements_per_call,
            r.wait_per_call_s * 1e6, d.note);
        if (modes[m] == PL_DURABILITY_SYNC)
            add_goal_noted("PostgreSQL W1 sync: time per call / floor", ratio,
                           "x", true, 1.2, d.note);
        cJSON_AddStringToObject(o, "durability", pl_durability_name(modes[m]));
        jnum(o, "n", n);
        jnum(o, "calls_per_s", r.calls_per_s);
        jnum(o, "us_per_call", eng_s * 1e6);
        jnum(o, "p50_us", r.p50_s * 1e6);
        jnum(o, "p95_us", r.p95_s * 1e6);
        jnum(o, "commits_per_call", r.commits_per_call);
        jnum(o, "round_trips_per_call", r.round_trips_per_call);
        jnum(o, "statements_per_call", r.statements_per_call);
        jnum(o, "round_trip_us_per_call", r.wait_per_call_s * 1e6);
        jnum(o, "floor_us_per_record", floor_s * 1e6);
        jnum(o, "ratio_to_floor", ratio);
        cJSON_AddItemToArray(jw1, o);
    }
    return failures;
}

/* W3 on PostgreSQL (the pool driver) in every mode; returns the failures. */
int report_pg_w3(bool quick)
{
    int failures = 0, runs = quick ? 50 : 100, calls = quick ? 40 : 100;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 2 && ncpu < 64 ? (int)ncpu : 2;
    cJSON *jw3 = cJSON_AddArrayToObject(g_json, "pg_w3_concurrency");
    say("\nW3 concurrency on PostgreSQL: %d runs x %d calls as tasks of a "
        "pl_pool of %d threads;\n  floor: %d sessions, each a 160 B INSERT "
        "committed alone\n",
        runs, calls, threads, threads);
    say("  %-8s %11s %12s %10s %8s %8s %8s\n", "mode", "calls/s", "floor rec/s",
        "ratio", "rt/call", "srv us", "cli us");
    double eng[3][REPS_MAX], flo[3][REPS_MAX], pair[REPS_MAX], rt[3] = {0};
    /* CPU a call, the server's and this process's (-1: not measured) */
    double srv[3][REPS_MAX], cli[3][REPS_MAX];
    int ok[3] = {0}, pairs = 0;
    drift d;
    drift_begin(&d, PL_DURABILITY_SYNC);
    for (int k = 0; k < g_reps; k++) {
        double got[3];
        bool have[3] = {false, false, false};
        for (size_t m = 0; m < 3; m++) {
            floor_arg fa = {modes[m], quick ? 100 : 250, threads, false};
            w3_arg a = {modes[m], runs, calls, threads, true};
            floor_res fr;
            w3_res r;
            if (in_child(pg_floor, &fa, &fr, sizeof fr) ||
                in_child(w3_child, &a, &r, sizeof r))
                continue;
            srv[m][ok[m]] = r.server_cpu_per_call * 1e6;
            cli[m][ok[m]] = r.client_cpu_per_call * 1e6;
            eng[m][ok[m]] = got[m] = r.calls_per_s;
            flo[m][ok[m]++] = fr.records_per_s;
            rt[m] = r.round_trips_per_call; /* the last repetition's */
            have[m] = true;
        }
        if (have[0] && have[1])
            pair[pairs++] = got[1] / got[0];
    }
    drift_end(&d, NULL);
    for (size_t m = 0; m < 3; m++) {
        if (!ok[m]) {
            say("  %-8s failed\n", pl_durability_name(modes[m]));
            failures++;
            continue;
        }
        double rate = median(eng[m], ok[m]), floor_rate = median(flo[m], ok[m]);
        double srv_us = median(srv[m], ok[m]), cli_us = median(cli[m], ok[m]);
        say("  %-8s %11.0f %12.0f %9.2fx %8.3f ", pl_durability_name(modes[m]),
            rate, floor_rate, rate / floor_rate, rt[m]);
        if (srv_us >= 0)
            say("%8.1f %8.1f\n", srv_us, cli_us);
        else
            say("%8s %8.1f\n", "-", cli_us);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "durability", pl_durability_name(modes[m]));
        jnum(o, "runs", runs);
        jnum(o, "calls_per_run", calls);
        jnum(o, "threads", threads);
        jnum(o, "calls_per_s", rate);
        jnum(o, "floor_records_per_s", floor_rate);
        jnum(o, "ratio_to_floor", rate / floor_rate);
        jnum(o, "round_trips_per_call", rt[m]);
        if (srv_us >= 0)
            jnum(o, "server_cpu_us_per_call", srv_us);
        jnum(o, "client_cpu_us_per_call", cli_us);
        cJSON_AddItemToArray(jw3, o);
    }
    if (pairs) {
        double p = median(pair, pairs);
        say("  group / sync (the median of each repetition's): %.1fx  %s\n", p,
            d.note);
        add_goal_noted("PostgreSQL W3, pool: group / sync calls per s", p, "x",
                       false, 10.0, d.note);
        if (d.note[0])
            cJSON_AddStringToObject(g_json, "pg_w3_noise", d.note);
        jnum(g_json, "pg_w3_group_over_sync", p);
    }
    return failures;
}
