/*
 * bench_w4.c -- W4, replay: a finished run read back from its ledger,
 * next to a raw scan.
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

/* ---- W4: replay ---------------------------------------------------------------------- */

typedef struct w4_arg {
    int n;
} w4_arg;

typedef struct w4_res {
    double steps_per_s;
    double seconds;
    uint64_t steps;
    long peak_rss_kb;
    long anon_rss_kb;
} w4_res;

static void w4_build_child(const void *varg, void *vres)
{
    const w4_arg *a = varg;
    (void)vres;
    char path[1100];
    path_in(path, sizeof path, "w4.db");
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    if (start_run(e, a->n, "w4"))
        die("W4 build");
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void w4_replay_child(const void *varg, void *vres)
{
    (void)varg;
    w4_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w4.db");
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, NULL);
    pl_outcome *o = NULL;
    long anon0 = status_kb("RssAnon");
    double t0 = now_s();
    if (pl_run_continue(&o, e, "w4", NULL) || o->status != PL_RUN_COMPLETED ||
        o->calls_executed != 0)
        die("W4 replay");
    double dt = now_s() - t0;
    r->steps = o->steps_replayed;
    r->seconds = dt;
    r->steps_per_s = (double)o->steps_replayed / dt;
    r->peak_rss_kb = status_kb("VmHWM");
    r->anon_rss_kb = status_kb("RssAnon") - anon0; /* the replay's own */
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int w4(int n, w4_res *r)
{
    char path[1100];
    path_in(path, sizeof path, "w4.db");
    remove_store(path);
    w4_arg a = {n};
    w4_res dummy;
    int rc = in_child(w4_build_child, &a, &dummy, sizeof dummy);
    if (!rc)
        rc = in_child(w4_replay_child, &a, r, sizeof *r);
    remove_store(path);
    return rc;
}

/* W4 at every size, next to its floors; returns the failures. */
int report_w4(bool quick)
{
    int failures = 0;
    int w4_full[] = {1000, 10000, 100000}, w4_quick[] = {1000, 10000};
    int *w4_sizes = quick ? w4_quick : w4_full;
    int w4_n = quick ? 2 : 3;
    say("\nW4 replay: continue a finished run, every result from the ledger\n");
    say("  %8s %10s %12s %12s %10s %9s %11s\n", "calls", "steps", "steps/s",
        "floor rec/s", "ratio", "peak MB", "+anon kB");
    cJSON *jw4 = cJSON_AddArrayToObject(g_json, "w4_replay");
    for (int s = 0; s < w4_n; s++) {
        w4_res r, runs[REPS_MAX];
        scan_res fr;
        double rate[REPS_MAX], flo[REPS_MAX];
        int ok = 0;
        for (int k = 0; k < g_reps; k++) {
            if (w4(w4_sizes[s], &runs[ok]) || floor_scan(2 * w4_sizes[s], &fr))
                continue;
            rate[ok] = runs[ok].steps_per_s;
            flo[ok++] = fr.records_per_s;
        }
        if (!ok) {
            say("  %8d failed\n", w4_sizes[s]);
            failures++;
            continue;
        }
        double mid = median(rate, ok);
        r = runs[0];
        for (int k = 0; k < ok; k++)
            if (runs[k].steps_per_s == mid)
                r = runs[k];
        fr.records_per_s = median(flo, ok);
        double ratio = r.steps_per_s / fr.records_per_s;
        say("  %8d %10llu %12.0f %12.0f %9.2fx %9.1f %11ld\n", w4_sizes[s],
            (unsigned long long)r.steps, r.steps_per_s, fr.records_per_s, ratio,
            (double)r.peak_rss_kb / 1024, r.anon_rss_kb);
        if (w4_sizes[s] >= 10000) {
            char what[96];
            snprintf(what, sizeof what, "W4, %d calls: replayed steps per s",
                     w4_sizes[s]);
            add_goal(what, r.steps_per_s / 1e6, "M", false, 1.0);
            /* flat: the replay's own heap does not grow with the ledger */
            snprintf(what, sizeof what, "W4, %d calls: anonymous memory added",
                     w4_sizes[s]);
            add_goal(what, (double)r.anon_rss_kb / 1024, "MB", true, 1.0);
        }
        cJSON *o = cJSON_CreateObject();
        jnum(o, "calls", w4_sizes[s]);
        jnum(o, "steps", (double)r.steps);
        jnum(o, "steps_per_s", r.steps_per_s);
        jnum(o, "seconds", r.seconds);
        jnum(o, "peak_rss_kb", (double)r.peak_rss_kb);
        jnum(o, "anon_rss_growth_kb", (double)r.anon_rss_kb);
        jnum(o, "floor_records_per_s", fr.records_per_s);
        jnum(o, "ratio_to_floor", ratio);
        cJSON_AddItemToArray(jw4, o);
    }
    return failures;
}
