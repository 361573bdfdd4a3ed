/*
 * bench_w2.c -- W2, recovery: a run killed in its middle, and the
 * time until its next tool call after a restart.
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

/* ---- W2: recovery ---------------------------------------------------------------- */

typedef struct w2_arg {
    int recorded; /* calls done before the kill */
    int total;
} w2_arg;

typedef struct w2_res {
    double to_first_exec_s;
    double to_done_s;
    uint64_t served, executed;
} w2_res;

static void w2_crash_child(const void *varg, void *vres)
{
    const w2_arg *a = varg;
    (void)vres;
    char path[1100];
    path_in(path, sizeof path, "w2.db");
    g_kill_at = a->recorded + 1; /* die inside the next call */
    pl_registry *reg = make_registry(true);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, NULL);
    start_run(e, a->total, "w2");
    _exit(3); /* never reached: the tool kills the process */
}

static void w2_recover_child(const void *varg, void *vres)
{
    (void)varg;
    w2_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w2.db");
    double t0 = now_s(); /* the restart */
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, w2_event);
    pl_outcome *o = NULL;
    g_first_exec = 0;
    if (pl_run_continue(&o, e, "w2", NULL) || o->status != PL_RUN_COMPLETED)
        die("W2 recovery");
    double t1 = now_s();
    r->to_first_exec_s = g_first_exec - t0;
    r->to_done_s = t1 - t0;
    r->served = o->calls_served;
    r->executed = o->calls_executed;
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int w2(const w2_arg *a, w2_res *r)
{
    char path[1100];
    path_in(path, sizeof path, "w2.db");
    remove_store(path);
    w2_res dummy;
    /* the crash: a real SIGKILL, so in_child reports failure */
    if (in_child(w2_crash_child, a, &dummy, sizeof dummy) == 0)
        return -1;
    int rc = in_child(w2_recover_child, a, r, sizeof *r);
    remove_store(path);
    return rc;
}

/* W2 next to its floor; returns the failures. */
int report_w2(void)
{
    int failures = 0;
    say("\nW2 recovery: a run SIGKILLed after M of 2M calls, then restarted\n");
    {
        w2_arg a = {500, 1000};
        w2_res r, runs[REPS_MAX];
        scan_res fr;
        double first[REPS_MAX], flo[REPS_MAX];
        int ok = 0;
        for (int k = 0; k < g_reps; k++) {
            if (w2(&a, &runs[ok]) || floor_scan(2 * a.recorded, &fr))
                continue;
            first[ok] = runs[ok].to_first_exec_s;
            flo[ok++] = fr.open_read_s;
        }
        if (!ok) {
            say("  failed\n");
            failures++;
        } else {
            double mid = median(first, ok);
            r = runs[0];
            for (int k = 0; k < ok; k++)
                if (runs[k].to_first_exec_s == mid)
                    r = runs[k];
            fr.open_read_s = median(flo, ok);
            double ratio = r.to_first_exec_s / fr.open_read_s;
            say("  %d recorded calls: restart -> first new call %.2f ms "
                "(floor: open + read %d records %.2f ms, %.1fx); restart -> "
                "done %.1f ms; served %llu, executed %llu\n",
                a.recorded, r.to_first_exec_s * 1e3, 2 * a.recorded,
                fr.open_read_s * 1e3, ratio, r.to_done_s * 1e3,
                (unsigned long long)r.served, (unsigned long long)r.executed);
            add_goal("W2: restart to first new call", r.to_first_exec_s * 1e3,
                     "ms", true, 5.0);
            cJSON *o = cJSON_AddObjectToObject(g_json, "w2_recovery");
            jnum(o, "recorded_calls", a.recorded);
            jnum(o, "total_calls", a.total);
            jnum(o, "ms_to_first_new_call", r.to_first_exec_s * 1e3);
            jnum(o, "ms_to_done", r.to_done_s * 1e3);
            jnum(o, "served", (double)r.served);
            jnum(o, "executed", (double)r.executed);
            jnum(o, "floor_ms_open_and_read", fr.open_read_s * 1e3);
            jnum(o, "ratio_to_floor", ratio);
        }
    }
    return failures;
}
