/*
 * bench_rate.c -- pl-bench's rate workload: one rate limit shared by
 * processes through the store.
 *
 *   rate           RATE_PROCS processes, each executing runs of calls to a
 *                  tool through pl_decorator_rate_limit() on one resource
 *                  (RATE_LIMIT calls per RATE_WINDOW_MS window), as fast as
 *                  the budget lets them, in sync mode, for a span of whole
 *                  windows (30 s; --quick: 3 s); then the calls admitted in
 *                  the span are counted from the store's times that the
 *                  runs recorded.  The figure: admitted calls per second
 *                  against the limit (the goal: within 10%), the fewest and
 *                  most admitted in one window, and the waits recorded.
 *                  No floor: the limit is the figure's measure.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

#include "bench.h"

#define RATE_PROCS 3
#define RATE_LIMIT 20
#define RATE_WINDOW_MS 1000
#define RATE_CALLS 10 /* calls a run */

static pl_rate_limit_options g_rate;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int rate_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)a;
    (void)u;
    return pl_steps_add_resultf(out, "{s:b}", "ok", 1);
}

static int rate_run(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    pl_decorator d;
    int st = pl_decorator_rate_limit(&d, &g_rate);
    for (int i = 0; !st && i < RATE_CALLS; i++) {
        pl_action call = PL_ACTION_INIT;
        call.policy = "rate_tool";
        call.payload = cJSON_CreateObject();
        pl_step *res = NULL;
        st = call.payload ? pl_ctx_call(&res, ctx, &call, &d, 1)
                          : pl_errorf(PL_ENOMEM, "out of memory");
        pl_step_free(res);
        cJSON_Delete((cJSON *)call.payload);
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static pl_registry *rate_registry(void)
{
    g_rate = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    g_rate.resource = "bench-provider";
    g_rate.limit = RATE_LIMIT;
    g_rate.window_ms = RATE_WINDOW_MS;
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg) ||
        pl_registry_add_fn(reg, "rate_tool", rate_tool, NULL) ||
        pl_registry_add_fn(reg, "rate_run", rate_run, NULL)) {
        pl_registry_free(reg);
        return NULL;
    }
    return reg;
}

/* A child: runs of rate_run until @p until_ms; exits 0 when all went. */
static void rate_child(const char *path, int i, int64_t until_ms)
{
    pl_registry *reg = rate_registry();
    pl_engine *e = NULL;
    if (!reg || pl_engine_open(&e, path, reg, NULL))
        _exit(1);
    int st = PL_OK;
    for (int n = 0; !st && wall_ms() < until_ms; n++) {
        char id[32];
        snprintf(id, sizeof id, "rate-%d-%d", i, n);
        pl_action root = PL_ACTION_INIT;
        root.policy = "rate_run";
        root.payload = cJSON_CreateObject();
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        st = pl_run_start(&o, e, &root, &ro);
        if (!st && o->status != PL_RUN_COMPLETED)
            st = PL_EPOLICY;
        pl_outcome_free(o);
        cJSON_Delete((cJSON *)root.payload);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    _exit(st ? 1 : 0);
}

typedef struct rate_count {
    int64_t from_ms, to_ms; /* the span measured */
    int per[64];            /* admitted in each window of the span */
    long admitted, waits;
} rate_count;

static int rate_visit(const pl_step *s, void *user)
{
    rate_count *c = user;
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT || !cJSON_IsString(name) ||
        strcmp(name->valuestring, "rate_limit") != 0)
        return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(v, "at_ms");
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "admitted"))) {
        c->waits++;
        return 0;
    }
    int64_t t = cJSON_IsNumber(at) ? (int64_t)at->valuedouble : -1;
    if (t >= c->from_ms && t < c->to_ms) {
        c->admitted++;
        c->per[(t - c->from_ms) / RATE_WINDOW_MS]++;
    }
    return 0;
}

int bench_rate(bool quick, const char *path)
{
    int secs = quick ? 3 : 30;
    pl_registry *reg = rate_registry();
    pl_engine *e = NULL;
    if (!reg || pl_engine_open(&e, path, reg, NULL)) {
        say("rate: cannot open %s: %s\n", path, pl_errmsg());
        pl_registry_free(reg);
        return 1;
    }
    pl_engine_close(e);
    /* the span: whole windows, from the first that starts a window after
     * the children have started */
    int64_t now = wall_ms();
    rate_count c = {0};
    c.from_ms = (now / RATE_WINDOW_MS + 2) * RATE_WINDOW_MS;
    c.to_ms = c.from_ms + (int64_t)secs * 1000;
    pid_t kids[RATE_PROCS];
    for (int i = 0; i < RATE_PROCS; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            rate_child(path, i, c.to_ms + RATE_WINDOW_MS);
    }
    int failures = 0;
    for (int i = 0; i < RATE_PROCS; i++) {
        int ws;
        if (kids[i] < 0 || waitpid(kids[i], &ws, 0) != kids[i] ||
            !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            failures++;
    }
    if (failures) {
        say("rate: %d of %d processes failed\n", failures, RATE_PROCS);
        pl_registry_free(reg);
        return 1;
    }
    if (pl_engine_open(&e, path, reg, NULL)) {
        pl_registry_free(reg);
        return 1;
    }
    /* every run of every child, by id */
    for (int i = 0; i < RATE_PROCS; i++) {
        for (int n = 0;; n++) {
            char id[32];
            snprintf(id, sizeof id, "rate-%d-%d", i, n);
            int st = pl_run_walk(e, id, rate_visit, &c);
            if (st == PL_ENOTFOUND)
                break;
            if (st)
                failures++;
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    int fewest = RATE_LIMIT, most = 0;
    for (int w = 0; w < secs; w++) {
        fewest = c.per[w] < fewest ? c.per[w] : fewest;
        most = c.per[w] > most ? c.per[w] : most;
    }
    double per_s = (double)c.admitted / secs;
    double off = fabs(per_s - RATE_LIMIT) / RATE_LIMIT * 100;
    say("\nrate: one limit of %d calls/s shared by %d processes (sync), "
        "over %d s\n",
        RATE_LIMIT, RATE_PROCS, secs);
    say("  admitted %.2f calls/s (%ld calls), %.1f%% off the limit; "
        "%d..%d a window; %ld waits recorded\n",
        per_s, c.admitted, off, fewest, most, c.waits);
    cJSON *j = cJSON_AddObjectToObject(g_json, "rate_shared");
    cJSON_AddNumberToObject(j, "limit_per_s", RATE_LIMIT);
    cJSON_AddNumberToObject(j, "processes", RATE_PROCS);
    cJSON_AddNumberToObject(j, "seconds", secs);
    cJSON_AddNumberToObject(j, "admitted_per_s", per_s);
    cJSON_AddNumberToObject(j, "off_limit_percent", off);
    cJSON_AddNumberToObject(j, "fewest_in_window", fewest);
    cJSON_AddNumberToObject(j, "most_in_window", most);
    cJSON_AddNumberToObject(j, "waits", (double)c.waits);
    add_goal("rate limit shared by 3 processes: off by", off, "%", true, 10);
    return failures ? 1 : 0;
}
