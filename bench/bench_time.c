/*
 * bench_time.c -- pl-bench's W7 (parked timers) and W8 (a signal to a
 * waiting run); see bench.c for the whole program.
 *
 * W7: N runs each sleeping a random 0..60 s (0..5 s with --quick) are
 * parked by one process while worker processes (pl_worker_run; one on
 * LMDB, four on PostgreSQL) wake them, for two N ten times apart.  Each
 * wake's lateness (the time the sleeper goes on minus its due time) is
 * noted in memory the processes share; each worker samples its anonymous
 * RSS as it works.  Figures: the workers' peak RSS (VmHWM, which counts
 * the store's pages the worker has mapped and read: page cache, not the
 * worker's memory) and peak anonymous RSS (its own memory: the goal, at
 * most 50 MB and flat in N), store bytes per waiting run (LMDB), and
 * lateness p50/p99, with the p99 of the wakes due once every run was
 * parked (no parking process taking turns at the store) and the host's
 * load average (1 min) at the end.
 *
 * W8: a run parked waiting for an event; pl_run_signal() delivers the
 * event and continues the run in the caller's thread, which consumes the
 * event and makes one call: the time from the signal to that call's
 * result being durable, in sync mode, next to one commit of the floor,
 * synced (raw LMDB; with --store, a 160 B INSERT), one after each signal
 * in turn; and the store's write
 * transactions (each a sync) the signal costs, counted by the store; on
 * PostgreSQL also the round trips and statements to the next step durable
 * and to the call's, counted by the library (pl__pg_counts_get()).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

#include <libpq-fe.h>

/* ---- W7: parked timers ------------------------------------------------------ */

#define W7_WORKERS_MAX 4

/* Shared by the parking process and the workers (MAP_SHARED). */
typedef struct w7_shared {
    atomic_int woken;
    int cap;
    double peak_kb[W7_WORKERS_MAX], anon_peak_kb[W7_WORKERS_MAX];
    /* each worker's round trips, statements and CPU seconds (user and
     * system), from its start to its stop */
    double rt[W7_WORKERS_MAX], stmts[W7_WORKERS_MAX], cpu_s[W7_WORKERS_MAX];
    double *due;   /* Unix ms each wake was due, beside late[] */
    double late[]; /* ms, one per wake */
} w7_shared;

static w7_shared *g_w7;

/* "sleeper": sleep payload.ms, then note how late the wake came. */
static int w7_sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)user;
    int64_t t0;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    int st = pl_ctx_now(&t0, ctx);
    if (!st)
        st = pl_ctx_sleep(ctx, (int64_t)ms->valuedouble);
    if (st)
        return st;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double late = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6 -
                  (double)(t0 + (int64_t)ms->valuedouble);
    int k = atomic_fetch_add(&g_w7->woken, 1);
    if (k < g_w7->cap) {
        g_w7->late[k] = late;
        g_w7->due[k] = (double)(t0 + (int64_t)ms->valuedouble);
    }
    return pl_steps_add_resultf(out, "{}");
}

/* "waiter": wait for "go", then one call to "tool". */
static int w8_waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "tool", "{s:i}", "i", 1);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static pl_registry *time_registry(void)
{
    pl_registry *reg = make_registry(false);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "sleeper";
    d.fn = w7_sleeper;
    if (pl_registry_add(reg, &d))
        die("registry");
    d.name = "waiter";
    d.fn = w8_waiter;
    if (pl_registry_add(reg, &d))
        die("registry");
    return reg;
}

typedef struct w7_arg {
    int runs;
    int max_ms;
    int workers;
    bool drain; /* the workers start once every run is parked and due */
} w7_arg;

typedef struct w7_res {
    double peak_kb, anon_peak_kb, bytes_per_run, late_p50_ms, late_p99_ms,
        park_s;
    double after_p50_ms, after_p99_ms; /* of the wakes due once all were
                                           parked */
    double txns_per_wake; /* LMDB: write transactions a wake cost, then */
    int woken;
    /* drain: wakes a second, and per wake the workers' round trips,
     * statements and CPU, and the server's CPU (its backends that ended) */
    double wakes_per_s, rt_per_wake, stmts_per_wake, cpu_ms_per_wake,
        server_ms_per_wake;
} w7_res;

static pl_engine *g_w7_engine;

static void *w7_work(void *arg)
{
    (void)arg;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    if (pl_worker_run(g_w7_engine, &wo))
        die("W7 worker");
    return NULL;
}

/* A worker process: wakes runs until all are woken, sampling its
 * anonymous RSS; never returns. */
static void w7_worker(const char *path, int id, int runs)
{
    pl_registry *reg = time_registry();
    g_w7_engine = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    pthread_t th;
    if (pthread_create(&th, NULL, w7_work, NULL))
        die("W7 thread");
    double anon = 0;
    while (atomic_load(&g_w7->woken) < runs) {
        double a = (double)status_kb("RssAnon");
        anon = a > anon ? a : anon;
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    pl_worker_stop(g_w7_engine);
    pthread_join(th, NULL);
    pl__pg_counts_get(&c1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    g_w7->rt[id] = (double)(c1.round_trips - c0.round_trips);
    g_w7->stmts[id] = (double)(c1.statements - c0.statements);
    g_w7->cpu_s[id] = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                      (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    g_w7->peak_kb[id] = (double)status_kb("VmHWM");
    g_w7->anon_peak_kb[id] = anon;
    pl_engine_close(g_w7_engine);
    pl_registry_free(reg);
    _exit(0);
}

/* The worker processes, forked. */
static void w7_fork(const char *path, const w7_arg *a, pid_t *pids)
{
    pid_t self = getpid();
    for (int w = 0; w < a->workers; w++) {
        fflush(NULL);
        pids[w] = fork();
        if (pids[w] < 0)
            die("W7 fork");
        if (pids[w] == 0)
            child_bind(self);
        if (pids[w] == 0)
            w7_worker(path, w, a->runs);
    }
}

/* The CPU seconds of the server's backends that have ended (what its
 * postmaster reaped: /proc/PID/stat's cutime and cstime), -1 when that
 * cannot be read (a server on another host). */
static double server_ended_s(void)
{
    PGconn *c = PQconnectdb(g_pg_uri);
    PGresult *r = PQexec(c, "SELECT pg_backend_pid()");
    long pid = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                   ? strtol(PQgetvalue(r, 0, 0), NULL, 10)
                   : 0;
    PQclear(r);
    PQfinish(c);
    double v[2] = {-1, -1};
    for (int k = 0; k < 2 && pid > 0; k++) {
        char path[64], line[1024];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f || !fgets(line, sizeof line, f)) {
            if (f)
                fclose(f);
            return -1;
        }
        fclose(f);
        char *p = strrchr(line, ')'); /* past the name: state, ppid, ... */
        long long x[15] = {0};
        int n = 0;
        for (char *t = p ? p + 1 : NULL; t && n < 15; n++) {
            while (*t == ' ')
                t++;
            char *end;
            x[n] = strtoll(t, &end, 10); /* the state, a letter: 0 */
            t = end == t ? strchr(t, ' ') : end;
        }
        if (n < 15)
            return -1;
        if (!k) { /* the backend: its parent is the postmaster */
            pid = (long)x[1];
            continue;
        }
        v[0] = (double)x[13]; /* cutime, cstime: in clock ticks */
        v[1] = (double)x[14];
    }
    return v[0] < 0 ? -1 : (v[0] + v[1]) / (double)sysconf(_SC_CLK_TCK);
}

static void w7_child(const void *varg, void *vres)
{
    const w7_arg *a = varg;
    w7_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w7.db");
    remove_store(path);
    size_t size = sizeof *g_w7 + (size_t)a->runs * 2 * sizeof g_w7->late[0];
    g_w7 = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                -1, 0);
    if (g_w7 == MAP_FAILED)
        die("W7 mmap");
    g_w7->cap = a->runs;
    g_w7->due = g_w7->late + a->runs;
    /* the workers run while the runs are parked: a run due meanwhile is
     * woken on time (forked before this process opens the store) */
    /* the store is made before a worker opens it: an open meeting a store
     * that another process is still making can find it short */
    pl_registry *reg = time_registry();
    pl_engine_close(open_engine(path, reg, PL_DURABILITY_PROCESS, NULL));
    pid_t pids[W7_WORKERS_MAX];
    double srv0 = -1, drain0 = 0;
    if (!a->drain) {
        srv0 = g_pg_uri ? server_ended_s() : -1;
        w7_fork(path, a, pids);
    }
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    if (pl_engine_set_wait_in_place(e, 0))
        die("W7 wait in place");
    pl_store_stats s0 = {.version = PL_STORE_STATS_VERSION},
                   s1 = {.version = PL_STORE_STATS_VERSION};
    if (!g_pg_uri && pl_engine_stats(&s0, e))
        die("W7 stats");
    double t0 = now_s();
    unsigned seed = 7;
    for (int i = 0; i < a->runs; i++) {
        char id[32];
        snprintf(id, sizeof id, "w7-%06d", i);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "ms",
                                a->drain ? 1 : rand_r(&seed) % (a->max_ms + 1));
        pl_action root = {PL_ACTION_VERSION, "sleeper", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        if (pl_run_start(&o, e, &root, &ro))
            die("W7 start");
        pl_outcome_free(o);
        cJSON_Delete(p);
    }
    r->park_s = now_s() - t0;
    struct timespec pe;
    clock_gettime(CLOCK_REALTIME, &pe);
    double parked_ms = (double)pe.tv_sec * 1e3 + (double)pe.tv_nsec / 1e6;
    uint64_t x0 = g_pg_uri ? 0 : store_commits(e);
    int woken0 = atomic_load(&g_w7->woken);
    if (!g_pg_uri && pl_engine_stats(&s1, e))
        die("W7 stats");
    r->bytes_per_run = g_pg_uri ? 0
                                : (double)((s1.used_pages - s0.used_pages) *
                                           s1.page_size) /
                                      a->runs;
    if (a->drain) { /* every run due: then the workers */
        struct timespec nap = {0, 50000000L};
        nanosleep(&nap, NULL);
        srv0 = g_pg_uri ? server_ended_s() : -1;
        drain0 = now_s();
        w7_fork(path, a, pids);
    }
    for (int w = 0; w < a->workers; w++) {
        int ws;
        if (waitpid(pids[w], &ws, 0) != pids[w] || !WIFEXITED(ws) ||
            WEXITSTATUS(ws))
            die("W7 worker process");
        r->peak_kb = g_w7->peak_kb[w] > r->peak_kb ? g_w7->peak_kb[w]
                                                   : r->peak_kb;
        r->anon_peak_kb = g_w7->anon_peak_kb[w] > r->anon_peak_kb
                              ? g_w7->anon_peak_kb[w]
                              : r->anon_peak_kb;
    }
    r->woken = atomic_load(&g_w7->woken);
    double rt = 0, stmts = 0, cpu = 0; /* the workers', from start to stop */
    for (int w = 0; w < a->workers; w++) {
        rt += g_w7->rt[w];
        stmts += g_w7->stmts[w];
        cpu += g_w7->cpu_s[w];
    }
    if (r->woken) {
        r->rt_per_wake = rt / r->woken;
        r->stmts_per_wake = stmts / r->woken;
        r->cpu_ms_per_wake = cpu * 1e3 / r->woken;
    }
    if (a->drain && r->woken) {
        /* the last wake, as the sleepers noted it */
        double last = 0;
        for (int i = 0; i < r->woken && i < a->runs; i++)
            if (g_w7->due[i] + g_w7->late[i] > last)
                last = g_w7->due[i] + g_w7->late[i];
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double since = now_s() - drain0; /* now_s(): monotonic */
        double span = since - ((double)ts.tv_sec * 1e3 +
                               (double)ts.tv_nsec / 1e6 - last) /
                                  1e3;
        r->wakes_per_s = span > 0 ? r->woken / span : 0;
    }
    if (r->woken && srv0 >= 0) { /* the workers' sessions, ended */
        struct timespec nap = {0, 200000000L}; /* the backends reaped */
        nanosleep(&nap, NULL);
        double srv1 = server_ended_s();
        r->server_ms_per_wake = srv1 >= 0 ? (srv1 - srv0) * 1e3 / r->woken : -1;
    }
    if (!g_pg_uri && r->woken > woken0)
        r->txns_per_wake = (double)(store_commits(e) - x0) /
                           (double)(r->woken - woken0);
    size_t na = 0;
    double *after = malloc((size_t)a->runs * sizeof *after);
    for (int i = 0; after && i < r->woken && i < a->runs; i++)
        if (g_w7->due[i] > parked_ms)
            after[na++] = g_w7->late[i];
    r->after_p50_ms = na ? percentile(after, na, 0.50) : 0;
    r->after_p99_ms = na ? percentile(after, na, 0.99) : 0;
    free(after);
    r->late_p50_ms = percentile(g_w7->late, (size_t)a->runs, 0.50);
    r->late_p99_ms = percentile(g_w7->late, (size_t)a->runs, 0.99);
    pl_engine_close(e);
    pl_registry_free(reg);
    munmap(g_w7, size);
    remove_store(path);
}

int report_w7(bool quick)
{
    int sizes[2] = {quick ? 200 : 10000, quick ? 2000 : 100000};
    int max_ms = quick ? 1000 : 60000, workers = g_pg_uri ? 4 : 1;
    say("\nW7 timers: N runs sleeping a random 0..%d s, parked on one %s "
        "store\n  by one process, woken by %d worker process%s\n",
        max_ms / 1000, g_pg_uri ? "PostgreSQL" : "LMDB", workers,
        workers > 1 ? "es" : "");
    say("  %-8s %12s %12s %10s %9s %11s %11s %11s %11s %5s\n", "runs",
        "worker peak", "worker anon", "bytes/run", "park", "late p50",
        "late p99", "p50 after", "p99 after", "load");
    cJSON *arr = cJSON_AddArrayToObject(g_json, g_pg_uri ? "pg_w7_timers"
                                                         : "w7_timers");
    double anon[2] = {0}, p50 = -1, p99 = -1;
    int failures = 0;
    /* the server settled before each probe: W7's 110,000 runs leave it
     * dirty pages to write and tables to vacuum (bench/README.md, "Noise:
     * the floor's drift") */
    drift d;
    drift_begin_settled(&d, PL_DURABILITY_PROCESS);
    for (int k = 0; k < 2; k++) {
        w7_arg a = {sizes[k], max_ms, workers, false};
        w7_res r;
        memset(&r, 0, sizeof r);
        if (in_child(w7_child, &a, &r, sizeof r) || r.woken != a.runs) {
            say("  %-8d failed\n", a.runs);
            failures++;
            continue;
        }
        anon[k] = r.anon_peak_kb;
        p50 = r.late_p50_ms;
        p99 = r.late_p99_ms;
        char bytes[32] = "-"; /* LMDB's pages; not measured on PostgreSQL */
        if (!g_pg_uri)
            snprintf(bytes, sizeof bytes, "%.0f", r.bytes_per_run);
        double load = 0;
        if (getloadavg(&load, 1) != 1)
            load = -1;
        say("  %-8d %9.1f MB %9.1f MB %10s %7.1f s %8.1f ms %8.1f ms %8.1f ms "
            "%8.1f ms %5.1f\n",
            a.runs, r.peak_kb / 1024, r.anon_peak_kb / 1024, bytes, r.park_s,
            r.late_p50_ms, r.late_p99_ms, r.after_p50_ms, r.after_p99_ms, load);
        if (!g_pg_uri)
            say("  %-8s write transactions per wake once all were parked: "
                "%.2f\n",
                "", r.txns_per_wake);
        else /* the workers' looks that found nothing count too */
            say("  %-8s a wake: %.2f round trips, %.2f statements, %.3f ms of "
                "the workers' CPU, %.3f ms of their sessions' on the server\n",
                "", r.rt_per_wake, r.stmts_per_wake, r.cpu_ms_per_wake,
                r.server_ms_per_wake);
        cJSON *o = cJSON_CreateObject();
        jnum(o, "runs", a.runs);
        jnum(o, "workers", workers);
        jnum(o, "max_sleep_ms", max_ms);
        jnum(o, "worker_peak_rss_kb", r.peak_kb);
        jnum(o, "worker_peak_anon_rss_kb", r.anon_peak_kb);
        if (!g_pg_uri)
            jnum(o, "store_bytes_per_waiting_run", r.bytes_per_run);
        jnum(o, "wake_late_p50_ms", r.late_p50_ms);
        jnum(o, "wake_late_p99_ms", r.late_p99_ms);
        jnum(o, "wake_late_p50_after_parking_ms", r.after_p50_ms);
        jnum(o, "wake_late_p99_after_parking_ms", r.after_p99_ms);
        if (!g_pg_uri)
            jnum(o, "write_transactions_per_wake", r.txns_per_wake);
        if (g_pg_uri) {
            jnum(o, "round_trips_per_wake", r.rt_per_wake);
            jnum(o, "statements_per_wake", r.stmts_per_wake);
            jnum(o, "server_cpu_ms_per_wake", r.server_ms_per_wake);
        }
        jnum(o, "worker_cpu_ms_per_wake", r.cpu_ms_per_wake);
        jnum(o, "load_average_1min", load);
        jnum(o, "park_all_s", r.park_s);
        cJSON_AddItemToArray(arr, o);
    }
    /* the wake path's throughput: every run due before the workers start */
    w7_arg da = {quick ? 1000 : 5000, 1, workers, true};
    w7_res dr;
    memset(&dr, 0, sizeof dr);
    if (in_child(w7_child, &da, &dr, sizeof dr) || dr.woken != da.runs) {
        say("  drain of %d due runs failed\n", da.runs);
        failures++;
    } else {
        double load = 0;
        if (getloadavg(&load, 1) != 1)
            load = -1;
        say("  drain: %d runs all due, then woken by %d worker%s: %.0f wakes/s"
            " (load %.1f)\n",
            da.runs, workers, workers > 1 ? "s" : "", dr.wakes_per_s, load);
        if (g_pg_uri)
            say("    a wake: %.2f round trips, %.2f statements, %.3f ms of the "
                "workers' CPU, %.3f ms of the server's\n",
                dr.rt_per_wake, dr.stmts_per_wake, dr.cpu_ms_per_wake,
                dr.server_ms_per_wake);
        else
            say("    a wake: %.3f ms of the worker's CPU\n",
                dr.cpu_ms_per_wake);
        cJSON *o = cJSON_AddObjectToObject(g_json, g_pg_uri ? "pg_w7_drain"
                                                            : "w7_drain");
        jnum(o, "runs", da.runs);
        jnum(o, "workers", workers);
        jnum(o, "wakes_per_s", dr.wakes_per_s);
        jnum(o, "worker_cpu_ms_per_wake", dr.cpu_ms_per_wake);
        if (g_pg_uri) {
            jnum(o, "round_trips_per_wake", dr.rt_per_wake);
            jnum(o, "statements_per_wake", dr.stmts_per_wake);
            jnum(o, "server_cpu_ms_per_wake", dr.server_ms_per_wake);
        }
        jnum(o, "load_average_1min", load);
    }
    const char *noise = drift_end(&d, NULL);
    say("  the floor's probes, us a commit: before");
    for (int i = 0; i < d.nb; i++)
        say(" %.1f", d.before[i] * 1e6);
    say(", after");
    for (int i = 0; i < d.na; i++)
        say(" %.1f", d.after[i] * 1e6);
    say("\n");
    if (noise[0]) {
        say("  %s: lateness not judged\n", noise);
        cJSON_AddStringToObject(g_json, g_pg_uri ? "pg_w7_noise" : "w7_noise",
                                noise);
    }
    const char *pre = g_pg_uri ? "PostgreSQL W7" : "W7";
    char what[96];
    if (anon[1] > 0) {
        snprintf(what, sizeof what, "%s worker anon RSS, %d waiting runs", pre,
                 sizes[1]);
        add_goal(what, anon[1] / 1024, "MB", true, 50);
    }
    if (anon[0] > 0 && anon[1] > 0) {
        say("  worker anon RSS at %dx the runs: %.2fx\n", sizes[1] / sizes[0],
            anon[1] / anon[0]);
        snprintf(what, sizeof what, "%s worker anon RSS, 10x the runs", pre);
        add_goal(what, anon[1] / anon[0], "x", true, 1.5);
    }
    if (p50 >= 0) {
        snprintf(what, sizeof what, "%s wake lateness p50", pre);
        add_goal_noted(what, p50, "ms", true, 5, noise);
        snprintf(what, sizeof what, "%s wake lateness p99", pre);
        add_goal_noted(what, p99, "ms", true, g_pg_uri ? 200 : 50, noise);
    }
    return failures;
}

/* ---- W8: a signal to a waiting run ------------------------------------------ */

static uint64_t g_w8_commits;
static double g_w8_first; /* when the signal's first commit was made */
static pl__pg_counts g_w8_at_first; /* PostgreSQL's counts then */

static void w8_count(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_COMMIT && !g_w8_commits++) {
        g_w8_first = now_s();
        pl__pg_counts_get(&g_w8_at_first);
    }
}

typedef struct w8_res {
    double next_s, signal_s, floor_s, commits, txns;
    /* PostgreSQL: round trips and statements to the next step durable,
     * and round trips of the whole signal; the time to the next step in
     * round trips (the server's work, the socket, the sync) */
    double rt_next, stmts_next, rt_all, wait_next_s;
} w8_res;

#define W8_N 200
#define W8_N_QUICK 50 /* --quick */

static void w8_child(const void *varg, void *vres)
{
    (void)varg;
    w8_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w8.db");
    remove_store(path);
    pl_registry *reg = time_registry();
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, w8_count);
    if (pl_engine_set_wait_in_place(e, 0))
        die("W8 wait in place");
    uint64_t commits = 0;
    int n = g_quick ? W8_N_QUICK : W8_N;
    double lat[W8_N], next[W8_N], flo[W8_N], txns[W8_N];
    double rt_next[W8_N], stmts_next[W8_N], rt_all[W8_N], wait_next[W8_N];
    cJSON *go = cJSON_CreateObject();
    /* the floor in turns with the signals, one commit after each: both
     * meet the disk at the same moments */
    PGconn *fc = NULL;
    MDB_env *fenv = NULL;
    MDB_dbi fdbi = 0;
    if (g_pg_uri)
        fc = pg_floor_turns("w8-floor.db", PL_DURABILITY_SYNC);
    else
        fenv = raw_open("w8-floor.db", PL_DURABILITY_SYNC, &fdbi);
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "w8-%04d", i);
        pl_action root = {PL_ACTION_VERSION, "waiter", go, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        if (pl_run_start(&o, e, &root, &ro) || o->status != PL_RUN_WAITING)
            die("W8 start");
        pl_outcome_free(o);
        o = NULL;
        g_w8_commits = 0;
        uint64_t x0 = store_commits(e);
        pl__pg_counts c0, c1;
        pl__pg_counts_get(&c0);
        double t0 = now_s();
        if (pl_run_signal(&o, e, id, "go", go) || !o ||
            o->status != PL_RUN_COMPLETED || !g_w8_commits)
            die("W8 signal");
        lat[i] = now_s() - t0;
        pl__pg_counts_get(&c1);
        next[i] = g_w8_first - t0;
        rt_next[i] = (double)(g_w8_at_first.round_trips - c0.round_trips);
        stmts_next[i] = (double)(g_w8_at_first.statements - c0.statements);
        rt_all[i] = (double)(c1.round_trips - c0.round_trips);
        wait_next[i] = (double)(g_w8_at_first.wait_ns - c0.wait_ns) / 1e9;
        txns[i] = (double)(store_commits(e) - x0);
        commits += g_w8_commits;
        pl_outcome_free(o);
        t0 = now_s();
        if (fc)
            pg_floor_turn(fc, i);
        else
            raw_commits(fenv, fdbi, 0, i, 1, false, true);
        flo[i] = now_s() - t0;
    }
    if (fc)
        pg_floor_turns_end(fc, "w8-floor.db");
    else
        raw_close(fenv, "w8-floor.db");
    cJSON_Delete(go);
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
    r->floor_s = percentile(flo, n, 0.50);
    r->commits = (double)commits / n;
    r->txns = percentile(txns, n, 0.50);
    r->rt_next = percentile(rt_next, n, 0.50);
    r->stmts_next = percentile(stmts_next, n, 0.50);
    r->rt_all = percentile(rt_all, n, 0.50);
    r->wait_next_s = percentile(wait_next, n, 0.50);
    r->signal_s = percentile(lat, n, 0.50);
    r->next_s = percentile(next, n, 0.50);
}

int report_w8(void)
{
    w8_res r;
    memset(&r, 0, sizeof r);
    say("\nW8 signal: a parked run signalled and continued in the caller's "
        "thread,\n  until its next call is durable (sync mode, %s; median "
        "of %d)\n",
        g_pg_uri ? "PostgreSQL" : "LMDB", g_quick ? W8_N_QUICK : W8_N);
    drift d;
    drift_begin(&d, PL_DURABILITY_SYNC);
    int failed = in_child(w8_child, NULL, &r, sizeof r);
    drift_end(&d, NULL);
    if (failed) {
        say("  failed\n");
        return 1;
    }
    double x = r.floor_s > 0 ? r.next_s / r.floor_s : 0;
    say("  one commit of the floor         %8.2f ms\n"
        "  signal to the next step durable %8.2f ms  %5.1fx\n"
        "  signal to the call durable      %8.2f ms  %5.1fx  (%.1f of the "
        "run's commits)\n"
        "  synced transactions per signal  %8.0f\n",
        r.floor_s * 1e3, r.next_s * 1e3, x, r.signal_s * 1e3,
        r.floor_s > 0 ? r.signal_s / r.floor_s : 0, r.commits, r.txns);
    if (g_pg_uri)
        say("  round trips to the next step     %8.0f  (%.0f statements; "
            "%.0f to the call's)\n"
            "    in them (server, socket, sync) %8.2f ms; the engine's own "
            "%.2f ms\n",
            r.rt_next, r.stmts_next, r.rt_all, r.wait_next_s * 1e3,
            (r.next_s - r.wait_next_s) * 1e3);
    if (d.note[0])
        say("  %s: not judged\n", d.note);
    cJSON *o = cJSON_AddObjectToObject(g_json,
                                       g_pg_uri ? "pg_w8_signal" : "w8_signal");
    drift_json(&d, o);
    jnum(o, "signal_to_next_step_ms", r.next_s * 1e3);
    jnum(o, "signal_to_durable_ms", r.signal_s * 1e3);
    jnum(o, "raw_commit_ms", r.floor_s * 1e3);
    jnum(o, "run_commits_per_signal", r.commits);
    jnum(o, "synced_transactions_per_signal", r.txns);
    if (g_pg_uri) {
        jnum(o, "round_trips_to_next_step", r.rt_next);
        jnum(o, "statements_to_next_step", r.stmts_next);
        jnum(o, "round_trips_per_signal", r.rt_all);
        jnum(o, "round_trip_ms_to_next_step", r.wait_next_s * 1e3);
    }
    if (r.floor_s > 0) {
        jnum(o, "of_floor", x);
        add_goal_noted(g_pg_uri ? "PostgreSQL W8 signal to durable next step, "
                                  "of one commit"
                                : "W8 signal to durable next step, of one "
                                  "commit",
                       x, "x", true, 2, d.note);
    }
    return 0;
}
