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
 *   rate tokens    then the same with a budget of tokens: TOK_BUDGET
 *                  tokens per TOK_WINDOW_MS window, each call charged its
 *                  max_tokens (TOK_EST) and then the tokens its result
 *                  reports (TOK_EST / 3 to TOK_EST, by the call's number);
 *                  the tokens charged in each window of the span are added
 *                  up from the usage the runs recorded, by the window
 *                  their calls were admitted in.  The figures: tokens
 *                  charged per window against the budget (the goal: no
 *                  window above it), the fewest and most in one window,
 *                  calls, and the waits recorded.
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
#define TOK_BUDGET 2000
#define TOK_WINDOW_MS 1000
#define TOK_EST 300 /* each call's max_tokens */

static pl_rate_limit_options g_rate, g_tokens;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The tool: its result reports the tokens the payload says it used. */
static int rate_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)u;
    const cJSON *use = cJSON_GetObjectItemCaseSensitive(a->payload, "use");
    if (cJSON_IsNumber(use))
        return pl_steps_add_resultf(out, "{s:b, s:i}", "ok", 1, "tokens",
                                    use->valueint);
    return pl_steps_add_resultf(out, "{s:b}", "ok", 1);
}

/* RATE_CALLS calls of the tool through rate_limit with the options @p u
 * points to (g_rate, g_tokens). */
static int rate_run(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    pl_decorator d;
    int st = pl_decorator_rate_limit(&d, u);
    for (int i = 0; !st && i < RATE_CALLS; i++) {
        pl_action call = PL_ACTION_INIT;
        call.policy = "rate_tool";
        /* a budget of tokens: the estimate, and a use at most it */
        call.payload = u == &g_tokens ? cJSON_Parse("{\"max_tokens\": 300}")
                                      : cJSON_CreateObject();
        if (call.payload && u == &g_tokens)
            cJSON_AddNumberToObject((cJSON *)call.payload, "use",
                                    TOK_EST / 3 + i * 37 % (TOK_EST * 2 / 3));
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
    g_tokens = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    g_tokens.resource = "bench-provider";
    g_tokens.budget = TOK_BUDGET;
    g_tokens.window_ms = TOK_WINDOW_MS;
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg) ||
        pl_registry_add_fn(reg, "rate_tool", rate_tool, NULL) ||
        pl_registry_add_fn(reg, "rate_run", rate_run, &g_rate) ||
        pl_registry_add_fn(reg, "tokens_run", rate_run, &g_tokens)) {
        pl_registry_free(reg);
        return NULL;
    }
    return reg;
}

/* A child: runs of @p policy until @p until_ms; exits 0 when all went. */
static void rate_child(const char *path, const char *policy, int i,
                       int64_t until_ms)
{
    pl_registry *reg = rate_registry();
    pl_engine *e = NULL;
    if (!reg || pl_engine_open(&e, path, reg, NULL))
        _exit(1);
    int st = PL_OK;
    for (int n = 0; !st && wall_ms() < until_ms; n++) {
        char id[48];
        snprintf(id, sizeof id, "%s-%d-%d", policy, i, n);
        pl_action root = PL_ACTION_INIT;
        root.policy = policy;
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
    int64_t per[64];        /* admitted (tokens: charged) in each window */
    long admitted, waits;
} rate_count;

static int rate_visit(const pl_step *s, void *user)
{
    rate_count *c = user;
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT || !cJSON_IsString(name))
        return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    if (strcmp(name->valuestring, "rate_limit_usage") == 0) {
        /* a call's tokens, charged to the window it was admitted in */
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(v, "window_start_ms");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "charged");
        int64_t t = cJSON_IsNumber(w) ? (int64_t)w->valuedouble : -1;
        if (cJSON_IsNumber(n) && t >= c->from_ms && t < c->to_ms)
            c->per[(t - c->from_ms) / TOK_WINDOW_MS] += (int64_t)n->valuedouble;
        return 0;
    }
    if (strcmp(name->valuestring, "rate_limit") != 0)
        return 0;
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(v, "at_ms");
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "admitted"))) {
        c->waits++;
        return 0;
    }
    int64_t t = cJSON_IsNumber(at) ? (int64_t)at->valuedouble : -1;
    if (t >= c->from_ms && t < c->to_ms) {
        c->admitted++;
        if (!cJSON_GetObjectItemCaseSensitive(v, "estimate"))
            c->per[(t - c->from_ms) / RATE_WINDOW_MS]++;
    }
    return 0;
}

/* RATE_PROCS processes running @p policy over whole windows of @p secs s,
 * then every run's records counted into *c; the failures. */
static int rate_span(const char *path, const char *policy, int secs,
                     int64_t window_ms, rate_count *c)
{
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
    c->from_ms = (now / window_ms + 2) * window_ms;
    c->to_ms = c->from_ms + (int64_t)secs * 1000;
    pid_t kids[RATE_PROCS], self = getpid();
    for (int i = 0; i < RATE_PROCS; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            child_bind(self);
        if (kids[i] == 0)
            rate_child(path, policy, i, c->to_ms + window_ms);
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
            char id[48];
            snprintf(id, sizeof id, "%s-%d-%d", policy, i, n);
            int st = pl_run_walk(e, id, rate_visit, c);
            if (st == PL_ENOTFOUND)
                break;
            if (st)
                failures++;
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    return failures;
}

static void fewest_most(const rate_count *c, int windows, int64_t *fewest,
                        int64_t *most)
{
    *fewest = INT64_MAX;
    *most = 0;
    for (int w = 0; w < windows; w++) {
        *fewest = c->per[w] < *fewest ? c->per[w] : *fewest;
        *most = c->per[w] > *most ? c->per[w] : *most;
    }
}

/* The budget of tokens: charged per window against it. */
static int bench_tokens(bool quick, const char *path)
{
    int secs = quick ? 3 : 30;
    rate_count c = {0};
    int failures = rate_span(path, "tokens_run", secs, TOK_WINDOW_MS, &c);
    if (failures)
        return failures;
    int64_t fewest, most, total = 0;
    fewest_most(&c, secs, &fewest, &most);
    for (int w = 0; w < secs; w++)
        total += c.per[w];
    double per_w = (double)total / secs;
    double over = most > TOK_BUDGET
                      ? (double)(most - TOK_BUDGET) / TOK_BUDGET * 100
                      : 0;
    say("\nrate tokens: a budget of %d tokens/s shared by %d processes "
        "(sync), each call estimated %d, using %d..%d, over %d windows\n",
        TOK_BUDGET, RATE_PROCS, TOK_EST, TOK_EST / 3, TOK_EST - 1, secs);
    say("  charged %.0f tokens a window (%.1f%% of the budget; %ld calls); "
        "%lld..%lld a window; %ld waits recorded\n",
        per_w, per_w / TOK_BUDGET * 100, c.admitted, (long long)fewest,
        (long long)most, c.waits);
    cJSON *j = cJSON_AddObjectToObject(g_json, "rate_tokens_shared");
    cJSON_AddNumberToObject(j, "budget_per_window", TOK_BUDGET);
    cJSON_AddNumberToObject(j, "window_ms", TOK_WINDOW_MS);
    cJSON_AddNumberToObject(j, "processes", RATE_PROCS);
    cJSON_AddNumberToObject(j, "windows", secs);
    cJSON_AddNumberToObject(j, "charged_per_window", per_w);
    cJSON_AddNumberToObject(j, "fewest_in_window", (double)fewest);
    cJSON_AddNumberToObject(j, "most_in_window", (double)most);
    cJSON_AddNumberToObject(j, "calls", (double)c.admitted);
    cJSON_AddNumberToObject(j, "waits", (double)c.waits);
    add_goal("token budget shared by 3 processes: a window over it by", over,
             "%", true, 0);
    return 0;
}

int bench_rate(bool quick, const char *path)
{
    int secs = quick ? 3 : 30;
    rate_count c = {0};
    int failures = rate_span(path, "rate_run", secs, RATE_WINDOW_MS, &c);
    if (failures)
        return failures;
    int64_t fewest, most;
    fewest_most(&c, secs, &fewest, &most);
    double per_s = (double)c.admitted / secs;
    double off = fabs(per_s - RATE_LIMIT) / RATE_LIMIT * 100;
    say("\nrate: one limit of %d calls/s shared by %d processes (sync), "
        "over %d s\n",
        RATE_LIMIT, RATE_PROCS, secs);
    say("  admitted %.2f calls/s (%ld calls), %.1f%% off the limit; "
        "%lld..%lld a window; %ld waits recorded\n",
        per_s, c.admitted, off, (long long)fewest, (long long)most, c.waits);
    cJSON *j = cJSON_AddObjectToObject(g_json, "rate_shared");
    cJSON_AddNumberToObject(j, "limit_per_s", RATE_LIMIT);
    cJSON_AddNumberToObject(j, "processes", RATE_PROCS);
    cJSON_AddNumberToObject(j, "seconds", secs);
    cJSON_AddNumberToObject(j, "admitted_per_s", per_s);
    cJSON_AddNumberToObject(j, "off_limit_percent", off);
    cJSON_AddNumberToObject(j, "fewest_in_window", (double)fewest);
    cJSON_AddNumberToObject(j, "most_in_window", (double)most);
    cJSON_AddNumberToObject(j, "waits", (double)c.waits);
    add_goal("rate limit shared by 3 processes: off by", off, "%", true, 10);
    return bench_tokens(quick, path);
}
