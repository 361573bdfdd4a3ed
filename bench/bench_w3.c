/*
 * bench_w3.c -- W3, concurrency: runs on threads or as a pool's tasks,
 * sharing commits.
 */
#define _GNU_SOURCE
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
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- W3: concurrency --------------------------------------------------------------- */

typedef struct w3_pool {
    pl_engine *e;
    const w3_arg *a;
    atomic_int next;
    atomic_int failed;
} w3_pool;

static void *w3_worker(void *arg)
{
    w3_pool *p = arg;
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->a->runs)
            return NULL;
        char id[32];
        snprintf(id, sizeof id, "w3-%d", i);
        if (start_run(p->e, p->a->calls, id)) {
            fprintf(stderr, "pl-bench: W3 run %s: %s\n", id, pl_errmsg());
            atomic_store(&p->failed, 1);
        }
    }
}

static void w3_task(pl_engine *e, void *user)
{
    w3_pool *p = user;
    int i = atomic_fetch_add(&p->next, 1);
    char id[32];
    snprintf(id, sizeof id, "w3-%d", i);
    if (start_run(e, p->a->calls, id)) {
        fprintf(stderr, "pl-bench: W3 run %s: %s\n", id, pl_errmsg());
        atomic_store(&p->failed, 1);
    }
}

/* The runs as tasks of a pool: a.threads threads, each carrying its share. */
static void w3_on_pool(pl_engine *e, const w3_arg *a, w3_pool *state)
{
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = (unsigned)a->threads;
    po.tasks_per_thread = (unsigned)((a->runs + a->threads - 1) / a->threads);
    pl_pool *pool;
    if (pl_pool_new(&pool, e, &po))
        die("W3 pool");
    for (int i = 0; i < a->runs; i++)
        if (pl_pool_submit(pool, w3_task, state))
            die("W3 pool");
    pl_pool_free(pool);
}

void w3_child(const void *varg, void *vres)
{
    const w3_arg *a = varg;
    w3_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w3.db");
    remove_store(path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, a->mode, NULL);
    w3_pool pool = {e, a, 0, 0};
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    long long pm = g_pg_uri ? pg_postmaster() : -1;
    double srv0 = pg_server_cpu_s(pm), cli0 = self_cpu_s();
    pthread_t th[256];
    int threads = a->threads > 256 ? 256 : a->threads;
    double t0 = now_s();
    if (a->pool) {
        w3_on_pool(e, a, &pool);
    } else {
        for (int i = 0; i < threads; i++)
            pthread_create(&th[i], NULL, w3_worker, &pool);
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
    }
    double dt = now_s() - t0;
    double srv1 = pg_server_cpu_s(pm), cli1 = self_cpu_s();
    if (atomic_load(&pool.failed))
        die("W3");
    double calls = (double)a->runs * a->calls;
    r->calls_per_s = calls / dt;
    pl__pg_counts_get(&c1);
    r->round_trips_per_call = (double)(c1.round_trips - c0.round_trips) / calls;
    r->server_cpu_per_call = srv0 < 0 || srv1 < 0 ? -1 : (srv1 - srv0) / calls;
    r->client_cpu_per_call = (cli1 - cli0) / calls;
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
}

/* W3 in every mode, next to its floors; returns the failures. */
int report_w3(bool quick)
{
    int failures = 0;
    int runs = quick ? 20 : 100, calls = quick ? 20 : 100;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int pool_threads = ncpu > 2 && ncpu < 64 ? (int)ncpu : 2;
    /* threads: one per run, every run in flight at once; pool: as many
     * threads as CPUs, carrying every run at once between them */
    const w3_arg drivers[] = {
        {PL_DURABILITY_SYNC, runs, calls, runs, false},
        {PL_DURABILITY_SYNC, runs, calls, pool_threads, true},
    };
    say("\nW3 concurrency: %d runs x %d calls; threads: one per run; pool: "
        "pl_pool, %d threads\n",
        runs, calls, pool_threads);
    say("  %-8s %-8s %11s %12s %10s\n", "driver", "mode", "calls/s",
        "floor rec/s", "ratio");
    cJSON *jw3 = cJSON_AddArrayToObject(g_json, "w3_concurrency");
    /*
     * Each repetition runs every mode, each mode's floor and drivers back
     * to back.  The table shows medians; group / sync is the median of the
     * repetitions' own ratios, so a stretch of slow disk that falls on one
     * mode's runs does not move it.
     */
    double eng[3][2][REPS_MAX], flo[3][REPS_MAX], pair[2][REPS_MAX];
    int ok[3] = {0}, pairs = 0;
    drift dr;
    drift_begin(&dr, PL_DURABILITY_SYNC);
    for (int k = 0; k < g_reps; k++) {
        double got[3][2];
        bool have[3] = {false, false, false};
        for (size_t m = 0; m < 3; m++) {
            /* the floor: raw LMDB, a put and commit per record, on one
             * thread per run */
            floor_arg fa = {modes[m], quick ? 20 : 50, runs, false};
            floor_res frk;
            w3_res rk[2];
            w3_arg a0 = drivers[0], a1 = drivers[1];
            a0.mode = a1.mode = modes[m];
            if (in_child(floor_puts, &fa, &frk, sizeof frk) ||
                in_child(w3_child, &a0, &rk[0], sizeof rk[0]) ||
                in_child(w3_child, &a1, &rk[1], sizeof rk[1]))
                continue;
            for (int d = 0; d < 2; d++)
                eng[m][d][ok[m]] = got[m][d] = rk[d].calls_per_s;
            flo[m][ok[m]++] = frk.records_per_s;
            have[m] = true;
        }
        if (have[0] && have[1]) {
            for (int d = 0; d < 2; d++)
                pair[d][pairs] = got[1][d] / got[0][d];
            pairs++;
        }
    }
    drift_end(&dr, NULL);
    if (dr.note[0]) {
        say("  %s: these figures are not a steady host's\n", dr.note);
        cJSON_AddStringToObject(g_json, "w3_noise", dr.note);
    }
    for (size_t m = 0; m < 3; m++) {
        if (!ok[m]) {
            say("  %-8s failed\n", pl_durability_name(modes[m]));
            failures++;
            continue;
        }
        double floor_rate = median(flo[m], ok[m]);
        for (int d = 0; d < 2; d++) {
            double rate = median(eng[m][d], ok[m]);
            double ratio = rate / floor_rate;
            const char *driver = drivers[d].pool ? "pool" : "threads";
            say("  %-8s %-8s %11.0f %12.0f %9.2fx\n", driver,
                pl_durability_name(modes[m]), rate, floor_rate, ratio);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "driver", driver);
            cJSON_AddStringToObject(o, "durability",
                                    pl_durability_name(modes[m]));
            jnum(o, "runs", runs);
            jnum(o, "calls_per_run", calls);
            jnum(o, "threads", drivers[d].threads);
            jnum(o, "calls_per_s", rate);
            jnum(o, "floor_records_per_s", floor_rate);
            jnum(o, "ratio_to_floor", ratio);
            cJSON_AddItemToArray(jw3, o);
        }
    }
    if (pairs) {
        double t = median(pair[0], pairs), p = median(pair[1], pairs);
        say("  group / sync (the median of each repetition's): threads "
            "%.1fx, pool %.1fx\n",
            t, p);
        add_goal_noted("W3, pool: group / sync calls per second", p, "x", false,
                       20.0, dr.note);
        jnum(g_json, "w3_group_over_sync", p);
        jnum(g_json, "w3_threads_group_over_sync", t);
    }
    return failures;
}
