/*
 * bench_fanout.c -- fan-out: call_all against sequential calls, and the
 * cost of a wrap.
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

/* ---- fan-out: call_all against sequential calls; the cost of a wrap -------------- */

/*
 * A tool that waits FAN_WAIT_MS on I/O: poll() on a pipe nobody writes, as
 * a tool waits for a reply.  "fan_root" makes FAN_CALLS calls to it, all at
 * once (pl_ctx_call_all) or one after another; "wrap_root" makes n calls
 * to the plain tool bare, under an empty retry, or under validate (the
 * tool's input schema {"type": "object"}).  Process mode throughout.
 */
#define FAN_CALLS 10
#define FAN_WAIT_MS 10

static int g_fan_pipe[2] = {-1, -1};

static int io_wait_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                        void *user)
{
    (void)ctx, (void)user;
    struct pollfd pfd = {g_fan_pipe[0], POLLIN, 0};
    int left = FAN_WAIT_MS;
    double until = now_s() + FAN_WAIT_MS / 1e3;
    while (left > 0 && poll(&pfd, 1, left) >= 0)
        left = (int)((until - now_s()) * 1e3 + 0.999);
    return pl_steps_add_result(out, a->payload);
}

static int fan_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    bool all = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a->payload,
                                                             "all"));
    cJSON *p[FAN_CALLS];
    pl_action acts[FAN_CALLS];
    pl_call_spec specs[FAN_CALLS];
    pl_step *res[FAN_CALLS] = {NULL};
    int st = PL_OK;
    for (int i = 0; i < FAN_CALLS; i++) {
        p[i] = cJSON_CreateObject();
        cJSON_AddNumberToObject(p[i], "i", i);
        acts[i] = (pl_action)PL_ACTION_INIT;
        acts[i].policy = "io_wait";
        acts[i].payload = p[i];
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &acts[i];
    }
    if (all)
        st = pl_ctx_call_all(res, ctx, specs, FAN_CALLS);
    for (int i = 0; !all && !st && i < FAN_CALLS; i++)
        st = pl_ctx_call(&res[i], ctx, &acts[i], NULL, 0);
    for (int i = 0; i < FAN_CALLS; i++) {
        pl_step_free(res[i]);
        cJSON_Delete(p[i]);
    }
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

static int wrap_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    pl_schema_cache *cache = user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    int wrap = cJSON_GetObjectItemCaseSensitive(a->payload, "wrap")->valueint;
    pl_decorator d = PL_DECORATOR_INIT;
    int st = wrap == 1   ? pl_decorator_retry(&d, NULL)
             : wrap == 2 ? pl_decorator_validate(&d, cache)
                         : PL_OK;
    cJSON *p = cJSON_CreateObject();
    cJSON *iv = cJSON_AddNumberToObject(p, "i", 0);
    for (int i = 0; !st && i < n; i++) {
        cJSON_SetNumberValue(iv, i);
        pl_action call = PL_ACTION_INIT;
        call.policy = "tool";
        call.payload = p;
        pl_step *res = NULL;
        st = pl_ctx_call(&res, ctx, &call, wrap ? &d : NULL, wrap ? 1 : 0);
        pl_step_free(res);
    }
    cJSON_Delete(p);
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

typedef struct fan_arg {
    int what; /* 0 sequential, 1 call_all; 10 + wrap: wrap_root */
    int n;    /* fan_root: runs; wrap_root: calls in its one run */
} fan_arg;

typedef struct fan_res {
    double s;     /* the runs' wall time */
    double cpu_s; /* ... and the process's CPU time meanwhile */
} fan_res;

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fan_child(const void *varg, void *vres)
{
    const fan_arg *a = varg;
    fan_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "fanout.db");
    remove_store(path);
    pl_schema_cache *cache = NULL;
    pl_registry *reg = NULL;
    if (pl_schema_cache_new(&cache) || pl_registry_new(&reg) ||
        pipe(g_fan_pipe))
        die("fan-out setup");
    static const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"io_wait", io_wait_tool},
                {"fan_root", fan_root},
                {"wrap_root", wrap_root},
                {"tool", bench_tool}};
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.user = i == 2 ? (void *)cache : NULL;
        d.input_schema = i == 3 ? "{\"type\": \"object\"}" : NULL;
        if (pl_registry_add(reg, &d))
            die("registry");
    }
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    cJSON *p = cJSON_CreateObject();
    int runs = 1;
    if (a->what < 10) {
        cJSON_AddBoolToObject(p, "all", a->what == 1);
        runs = a->n;
    } else {
        cJSON_AddNumberToObject(p, "n", a->n);
        cJSON_AddNumberToObject(p, "wrap", a->what - 10);
    }
    pl_action root = PL_ACTION_INIT;
    root.policy = a->what < 10 ? "fan_root" : "wrap_root";
    root.payload = p;
    double t0 = now_s(), c0 = cpu_now_s();
    for (int i = 0; i < runs; i++) {
        pl_outcome *o = NULL;
        if (pl_run_start(&o, e, &root, NULL) || o->status != PL_RUN_COMPLETED)
            die("fan-out run");
        pl_outcome_free(o);
    }
    r->s = now_s() - t0;
    r->cpu_s = cpu_now_s() - c0;
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(cache);
    remove_store(path);
}

/*
 * Run the @p n workloads of @p a interleaved, each rep in a child of its
 * own; each[w][k] is rep k's time of workload w, wall or (@p cpu) CPU
 * time (< 0: it failed), per[w] the median.  Returns -1 when a workload never ran.
 */
static int fan_interleaved(const fan_arg *a, int n, bool cpu,
                           double each[][REPS_MAX], double *per)
{
    double v[4][REPS_MAX];
    int ok[4] = {0};
    for (int k = 0; k < g_reps; k++)
        for (int w = 0; w < n; w++) {
            fan_res r;
            each[w][k] = -1;
            if (!in_child(fan_child, &a[w], &r, sizeof r))
                v[w][ok[w]++] = each[w][k] = cpu ? r.cpu_s : r.s;
        }
    for (int w = 0; w < n; w++) {
        if (!ok[w])
            return -1;
        per[w] = median(v[w], ok[w]);
    }
    return 0;
}

/* The median of the reps' own ratios of workload @p w to workload 0. */
static double fan_ratio(double each[][REPS_MAX], int w)
{
    double ratios[REPS_MAX];
    int nr = 0;
    for (int k = 0; k < g_reps; k++)
        if (each[w][k] > 0 && each[0][k] > 0)
            ratios[nr++] = each[w][k] / each[0][k];
    return nr ? median(ratios, nr) : NAN;
}

int report_fanout(bool quick)
{
    int runs = quick ? 5 : 20;
    say("\nFan-out: %d calls whose tools each wait %d ms on I/O, %d runs "
        "(process mode)\n",
        FAN_CALLS, FAN_WAIT_MS, runs);
    fan_arg fa[2] = {{0, runs}, {1, runs}};
    double each[3][REPS_MAX], per[3];
    if (fan_interleaved(fa, 2, false, each, per)) {
        say("  failed\n");
        return 1;
    }
    double speedup = 1 / fan_ratio(each, 1);
    say("  %-22s %10.2f ms/run\n  %-22s %10.2f ms/run %6.2fx faster\n",
        "sequential pl_ctx_call", per[0] * 1e3 / runs, "pl_ctx_call_all",
        per[1] * 1e3 / runs, speedup);
    cJSON *jf = cJSON_AddObjectToObject(g_json, "fanout");
    jnum(jf, "sequential_ms", per[0] * 1e3 / runs);
    jnum(jf, "call_all_ms", per[1] * 1e3 / runs);
    jnum(jf, "speedup", speedup);
    add_goal("Fan-out: call_all of 10 vs sequential", speedup, "x", false, 8);

    /* CPU time: in process mode a call waits for nothing, and CPU time
     * is what a host busy with other work disturbs least */
    int n = quick ? 2000 : 20000;
    say("\nWrap cost: %d calls, bare or wrapped (process mode, CPU time)\n", n);
    say("  %-22s %10s %10s\n", "call", "us/call", "vs bare");
    fan_arg wa[3] = {{10, n}, {11, n}, {12, n}};
    if (fan_interleaved(wa, 3, true, each, per)) {
        say("  failed\n");
        return 1;
    }
    static const char *const names[] = {"bare", "empty retry",
                                        "validate {type:object}"};
    static const char *const keys[] = {"bare", "retry", "validate"};
    cJSON *jw = cJSON_AddObjectToObject(g_json, "wrap_cost");
    for (int w = 0; w < 3; w++) {
        double ratio = w ? fan_ratio(each, w) : 1;
        say("  %-22s %10.2f %9.2fx\n", names[w], per[w] * 1e6 / n, ratio);
        cJSON *o = cJSON_AddObjectToObject(jw, keys[w]);
        jnum(o, "cpu_us_per_call", per[w] * 1e6 / n);
        jnum(o, "ratio_to_bare", ratio);
        if (w == 1)
            add_goal("Wrap: empty retry vs a bare call", ratio, "x", true, 1.1);
        if (w == 2)
            add_goal("Wrap: validate vs a bare call", ratio, "x", true, 1.1);
    }
    return 0;
}
