/*
 * bench_w6.c -- W6, workers draining a queue.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- W6: workers draining a queue ------------------------------------------------ */

/*
 * W6: @p runs submitted runs of 10 calls, drained by 1, 2 and 4 worker
 * processes (pl_worker_run(), concurrency 1 each, a host id each, on one
 * store).  A worker's event callback writes a byte to a pipe per run it
 * completes; the parent times from "go" to the last byte, then stops the
 * workers with SIGTERM (their handler calls pl_worker_stop()).  More bytes
 * than runs would mean a run completed twice: that fails the workload.
 */
#define W6_CALLS 10

typedef struct w6_arg {
    pl_durability mode;
    int runs;
    int workers;
    char path[1100]; /* set by w6(): a PostgreSQL schema names its pid */
} w6_arg;

typedef struct w6_res {
    double runs_per_s;
    double calls_per_s;
    double srv_us;    /* the server's CPU a run, us (< 0: not on this host) */
    double worker_us; /* the workers' CPU a run, us (< 0: not readable) */
    double srv_sw;    /* the server's context switches a run (< 0: ...) */
    double worker_sw; /* the workers' */
    double flushes;   /* the server's WAL flushes a run (< 0: unknown) */
    double per_flush; /* the commits a flush covered (< 0: unknown) */
} w6_res;

/* What processes have used so far: CPU seconds, the sum over their
 * threads of /proc/PID/task/TID/schedstat (ns); and context switches,
 * voluntary (a wait: for the server, a lock, the disk) and not (a
 * preemption), from each thread's status. */
typedef struct w6_use {
    double cpu_s;
    double switches;
} w6_use;

/* Add process @p pid's use to @p u; false when it cannot be read. */
static bool proc_use(pid_t pid, w6_use *u)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char p[300];
        snprintf(p, sizeof p, "/proc/%d/task/%s/schedstat", (int)pid,
                 e->d_name);
        u->cpu_s += schedstat_s(p);
        snprintf(p, sizeof p, "/proc/%d/task/%s/status", (int)pid, e->d_name);
        FILE *f = fopen(p, "r");
        char line[256];
        unsigned long long n;
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %llu", &n) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %llu", &n) == 1)
                u->switches += (double)n;
        if (f)
            fclose(f);
    }
    closedir(d);
    return true;
}

/* The use of @p n processes together (cpu_s < 0: any unreadable). */
static w6_use procs_use(const pid_t *pids, int n)
{
    w6_use u = {0, 0};
    for (int i = 0; i < n; i++)
        if (!proc_use(pids[i], &u))
            return (w6_use){-1, -1};
    return u;
}

/* The context switches of the server's processes: postmaster @p pm's and
 * its children's (< 0: not on this host).  Its CPU is pg_server_cpu_s()'s,
 * which counts the children that ended too; a child's switches end with
 * it (during a drain, none of the workers' backends ends). */
static double server_switches(long long pm)
{
    DIR *d = pm > 0 ? opendir("/proc") : NULL;
    if (!d)
        return -1;
    w6_use u = {0, 0};
    for (struct dirent *e; (e = readdir(d));) {
        char *end, path[64], buf[512];
        long long pid = strtoll(e->d_name, &end, 10), ppid = -1;
        if (*end || pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%lld/stat", pid);
        FILE *f = fopen(path, "r");
        size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[len] = '\0';
        const char *q = strrchr(buf, ')'); /* then " STATE PPID" */
        if (q && sscanf(q + 1, " %*c %lld", &ppid) == 1 &&
            (pid == pm || ppid == pm))
            proc_use((pid_t)pid, &u);
    }
    closedir(d);
    return u.switches;
}

static pl_engine *g_w6_engine;
static long long g_w6_postmaster = -1; /* the server's, if on this host */
static int g_w6_done_fd = -1;

static void w6_on_term(int sig)
{
    (void)sig;
    pl_worker_stop(g_w6_engine);
}

static void w6_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_RUN_COMPLETED && g_w6_done_fd >= 0 &&
        write(g_w6_done_fd, "c", 1) != 1)
        _exit(1);
}

/* Submit the queue (in a child of its own: no engine is open in the parent
 * when it forks the workers). */
static void w6_submit_child(const void *varg, void *vres)
{
    const w6_arg *a = varg;
    (void)vres;
    remove_store(a->path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(a->path, reg, PL_DURABILITY_PROCESS, NULL);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n", W6_CALLS);
    pl_action root = {PL_ACTION_VERSION, "root", p, NULL, 0, NULL};
    for (int i = 0; i < a->runs; i++) {
        char id[32];
        snprintf(id, sizeof id, "w6-%05d", i);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        char *got = NULL;
        if (pl_run_submit(&got, e, &root, &ro))
            die("W6 submit");
        free(got);
    }
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A worker: open, say ready, wait for go, work until SIGTERM. */
static void w6_worker(const w6_arg *a, int id, int ready_fd, int go_fd,
                      int done_fd)
{
    char host[32];
    snprintf(host, sizeof host, "bench-%d", id);
    pl_registry *reg = make_registry(false);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = a->mode;
    o.on_event = w6_event;
    o.host_id = host;
    if (pl_engine_open(&g_w6_engine, a->path, reg, &o))
        die("W6 worker open");
    g_w6_done_fd = done_fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = w6_on_term;
    sigaction(SIGTERM, &sa, NULL);
    char c;
    if (write(ready_fd, "r", 1) != 1 || read(go_fd, &c, 1) != 1)
        _exit(1);
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 5;
    if (pl_worker_run(g_w6_engine, &wo))
        die("W6 worker");
    pl_engine_close(g_w6_engine);
    pl_registry_free(reg);
    _exit(0);
}

static int w6(w6_arg *a, w6_res *r)
{
    path_in(a->path, sizeof a->path, "w6");
    w6_res none;
    if (in_child(w6_submit_child, a, &none, sizeof none))
        return -1;
    /* the server's flushes and commits, from before the workers open
     * (their opens' few commits count too) to after they have ended */
    long long sy0 = 0, cm0 = 0, sy1 = 0, cm1 = 0;
    bool wal = g_pg_uri && !pg_wal_counts(&sy0, &cm0);
    int ready[2], go[2], done[2];
    if (pipe(ready) || pipe(go) || pipe(done))
        die("W6 pipes");
    pid_t kids[4], self = getpid();
    int n = 0;
    fflush(NULL);
    for (; n < a->workers; n++) {
        if ((kids[n] = fork()) < 0)
            break;
        if (kids[n] == 0) {
            child_bind(self);
            close(ready[0]);
            close(go[1]);
            close(done[0]);
            w6_worker(a, n, ready[1], go[0], done[1]);
        }
    }
    close(ready[1]);
    close(go[0]);
    close(done[1]);
    int rc = n == a->workers ? 0 : -1;
    char c;
    for (int i = 0; !rc && i < n; i++)
        if (read(ready[0], &c, 1) != 1)
            rc = -1;
    /* the CPU of the drain: the server's processes and the workers' */
    long long pm = g_w6_postmaster;
    double srv0 = pm > 0 ? pg_server_cpu_s(pm) : -1;
    double ssw0 = server_switches(pm);
    w6_use wk0 = procs_use(kids, n);
    double t0 = now_s();
    for (int i = 0; !rc && i < n; i++)
        if (write(go[1], "g", 1) != 1)
            rc = -1;
    int got = 0;
    while (!rc && got < a->runs) {
        char buf[256];
        struct pollfd pf = {done[0], POLLIN, 0};
        ssize_t k = poll(&pf, 1, 60000) == 1 ? read(done[0], buf, sizeof buf)
                                             : -1;
        if (k <= 0) { /* every worker died, or none got on for a minute */
            fprintf(stderr,
                    "pl-bench: W6: the workers stopped after %d "
                    "of %d runs\n",
                    got, a->runs);
            rc = -1;
        } else
            got += (int)k;
    }
    double t1 = now_s();
    double srv1 = srv0 >= 0 ? pg_server_cpu_s(pm) : -1;
    double ssw1 = ssw0 >= 0 ? server_switches(pm) : -1;
    w6_use wk1 = wk0.cpu_s >= 0 ? procs_use(kids, n) : (w6_use){-1, -1};
    for (int i = 0; i < n; i++)
        kill(kids[i], SIGTERM);
    close(go[1]);
    for (int i = 0; i < n; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status))
            rc = -1;
    }
    wal = wal && !pg_wal_counts(&sy1, &cm1) && sy1 > sy0;
    /* every worker is gone: whatever is left in the pipe came late */
    char buf[256];
    ssize_t k;
    while ((k = read(done[0], buf, sizeof buf)) > 0)
        got += (int)k;
    close(done[0]);
    close(ready[0]);
    if (!rc && got != a->runs) {
        fprintf(stderr, "pl-bench: W6: %d completions of %d runs\n", got,
                a->runs);
        rc = -1;
    }
    remove_store(a->path);
    if (rc)
        return rc;
    r->runs_per_s = a->runs / (t1 - t0);
    r->calls_per_s = r->runs_per_s * W6_CALLS;
    r->srv_us = srv0 >= 0 && srv1 >= 0 ? (srv1 - srv0) * 1e6 / a->runs : -1;
    bool wk = wk0.cpu_s >= 0 && wk1.cpu_s >= 0;
    r->worker_us = wk ? (wk1.cpu_s - wk0.cpu_s) * 1e6 / a->runs : -1;
    r->srv_sw = ssw0 >= 0 && ssw1 >= 0 ? (ssw1 - ssw0) / a->runs : -1;
    r->worker_sw = wk ? (wk1.switches - wk0.switches) / a->runs : -1;
    r->flushes = wal ? (double)(sy1 - sy0) / a->runs : -1;
    r->per_flush = wal ? (double)(cm1 - cm0) / (double)(sy1 - sy0) : -1;
    return 0;
}

/* W6's round trips a run: one worker in this child drains W6_COUNT runs. */
#define W6_COUNT 20

static int g_w6_left;

static void w6_count_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_RUN_COMPLETED && --g_w6_left == 0)
        pl_worker_stop(g_w6_engine);
}

static void w6_count_child(const void *varg, void *vres)
{
    const w6_arg *a = varg;
    double *per_run = vres; /* round trips, statements */
    w6_res none;
    w6_submit_child(a, &none);
    pl_registry *reg = make_registry(false);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = a->mode;
    o.on_event = w6_count_event;
    o.host_id = "bench-count";
    if (pl_engine_open(&g_w6_engine, a->path, reg, &o))
        die("W6 count open");
    g_w6_left = a->runs;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 5;
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    if (pl_worker_run(g_w6_engine, &wo))
        die("W6 count worker");
    pl__pg_counts_get(&c1);
    per_run[0] = (double)(c1.round_trips - c0.round_trips) / a->runs;
    per_run[1] = (double)(c1.statements - c0.statements) / a->runs;
    pl_engine_close(g_w6_engine);
    pl_registry_free(reg);
    remove_store(a->path);
}

/* W6's figures beside runs/s, each a median over the repetitions: its
 * column, decimals, JSON key and place in w6_res (< 0: not known). */
static const struct {
    const char *col;
    int decimals;
    const char *key;
    size_t at;
} w6_cols[] = {
    {"srv us", 0, "server_cpu_us_per_run", offsetof(w6_res, srv_us)},
    {"wrk us", 0, "workers_cpu_us_per_run", offsetof(w6_res, worker_us)},
    {"srv sw", 1, "server_switches_per_run", offsetof(w6_res, srv_sw)},
    {"wrk sw", 1, "workers_switches_per_run", offsetof(w6_res, worker_sw)},
    {"flushes", 1, "server_flushes_per_run", offsetof(w6_res, flushes)},
    {"com/fl", 2, "commits_per_flush", offsetof(w6_res, per_flush)},
};
#define W6_COLS (sizeof w6_cols / sizeof w6_cols[0])

/* W6 with 1, 2 and 4 workers; returns the failures. */
int report_w6(bool quick)
{
    static const int counts[] = {1, 2, 4};
    int runs = quick ? 50 : 1000, reps = g_reps < 3 ? g_reps : 3;
    int failures = 0;
    pl_durability mode = PL_DURABILITY_SYNC;
    say("\nW6 workers: %d submitted runs of %d calls drained by N worker "
        "processes\n  (pl_worker_run, concurrency 1 each, %s mode; median "
        "of %d;\n  srv, wrk: the server's processes and the workers, during "
        "the drain: us, their CPU a run,\n  sw, their context switches a "
        "run; flushes: the server's WAL flushes a run,\n  com/fl: the commits "
        "each covered)\n",
        runs, W6_CALLS, pl_durability_name(mode), reps);
    say("  %-8s %8s %8s %8s", "workers", "runs/s", "calls/s", "scaling");
    for (size_t c = 0; c < W6_COLS; c++)
        say(" %7s", w6_cols[c].col);
    say("\n");
    g_w6_postmaster = g_pg_uri ? pg_postmaster() : -1;
    cJSON *jw6 = cJSON_AddArrayToObject(g_json, "w6_workers");
    double rate[3][REPS_MAX], fig[3][W6_COLS][REPS_MAX];
    int ok[3] = {0};
    drift d;
    drift_begin(&d, mode);
    /* interleaved, so drift between repetitions touches every count */
    for (int k = 0; k < reps; k++)
        for (size_t w = 0; w < 3; w++) {
            w6_arg a = {mode, runs, counts[w], ""};
            w6_res r;
            if (!w6(&a, &r)) {
                for (size_t c = 0; c < W6_COLS; c++)
                    memcpy(&fig[w][c][ok[w]], (char *)&r + w6_cols[c].at,
                           sizeof(double));
                rate[w][ok[w]++] = r.runs_per_s;
            }
        }
    drift_end(&d, NULL);
    if (d.note[0]) {
        say("  %s: the scaling below is not a steady host's\n", d.note);
        cJSON_AddStringToObject(g_json, "w6_noise", d.note);
    }
    double one = ok[0] ? median(rate[0], ok[0]) : 0;
    if (g_pg_uri) { /* round trips a run (deterministic but for polls) */
        w6_arg a = {mode, W6_COUNT, 1, ""};
        path_in(a.path, sizeof a.path, "w6count");
        double per_run[2] = {0, 0};
        if (in_child(w6_count_child, &a, per_run, sizeof per_run))
            failures++;
        else {
            say("  round trips a run, one worker: %.1f (statements: %.1f)\n",
                per_run[0], per_run[1]);
            jnum(g_json, "pg_w6_round_trips_per_run", per_run[0]);
            jnum(g_json, "pg_w6_statements_per_run", per_run[1]);
        }
    }
    for (size_t w = 0; w < 3; w++) {
        if (!ok[w]) {
            say("  %-8d failed\n", counts[w]);
            failures++;
            continue;
        }
        double m = median(rate[w], ok[w]);
        say("  %-8d %8.0f %8.0f %7.2fx", counts[w], m, m * W6_CALLS,
            one > 0 ? m / one : 0);
        cJSON *o = cJSON_CreateObject();
        jnum(o, "workers", counts[w]);
        jnum(o, "runs", runs);
        jnum(o, "calls_per_run", W6_CALLS);
        cJSON_AddStringToObject(o, "durability", pl_durability_name(mode));
        jnum(o, "runs_per_s", m);
        jnum(o, "calls_per_s", m * W6_CALLS);
        if (one > 0)
            jnum(o, "scaling", m / one);
        for (size_t c = 0; c < W6_COLS; c++) {
            double v = median(fig[w][c], ok[w]);
            char b[16] = "-";
            if (v >= 0) {
                snprintf(b, sizeof b, "%.*f", w6_cols[c].decimals, v);
                jnum(o, w6_cols[c].key, v);
            }
            say(" %7s", b);
        }
        say("\n");
        cJSON_AddItemToArray(jw6, o);
    }
    return failures;
}
