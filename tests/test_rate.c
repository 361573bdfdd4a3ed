/*
 * test_rate.c -- rate limits shared through the store (pl_rate_take(),
 * pl_decorator_rate_limit()), on the store the suite runs on: LMDB, and
 * PostgreSQL as pg_test_rate (tests/CMakeLists.txt).
 *
 * Nothing is timed: the calls admitted per window are counted from the
 * times the store gave, as the runs recorded them.
 */
#include "support_rate.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define R_WINDOW_MS 1000 /* wide: 4 calls fill it even on a busy machine */
#define R_LIMIT 4

TestSuite(rate, .init = rt_setup, .fini = t_cleanup, .timeout = 300);

static pl_rate_limit_options r_opts;

static pl_rate_limit_options r_durable_opts;

/* "limited" and "durable": payload.n calls of "echo", each through a
 * rate_limit with the options @p user points to (r_opts; r_durable_opts,
 * which waits with the engine's durable sleep). */
static int limited(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    pl_decorator d;
    int st = pl_decorator_rate_limit(&d, user);
    for (int i = 0; !st && i < n->valueint; i++) {
        pl_action call = PL_ACTION_INIT;
        call.policy = "echo";
        call.payload = cJSON_CreateObject();
        pl_step *res = NULL;
        st = pl_ctx_call(&res, ctx, &call, &d, 1);
        pl_step_free(res);
        cJSON_Delete((cJSON *)call.payload);
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static pl_registry *r_registry(void)
{
    r_opts = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    r_opts.resource = "provider";
    r_opts.limit = R_LIMIT;
    r_opts.window_ms = R_WINDOW_MS;
    r_opts.sleep = rt_sleep;
    r_durable_opts = r_opts;
    r_durable_opts.resource = "durable-provider";
    r_durable_opts.sleep = NULL;
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "limited", limited, &r_opts), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "durable", limited, &r_durable_opts),
                 PL_OK);
    return reg;
}

/* The takes a run recorded (in its calls' ledgers): admitted ones' store
 * times into at (NULL: not kept), and the count of each kind. */
typedef struct r_count {
    int64_t *at;
    size_t cap, admitted, denied;
} r_count;

static int r_visit(const pl_step *s, void *user)
{
    r_count *c = user;
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT ||
        strcmp(name->valuestring, "rate_limit") != 0)
        return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "at_ms");
    cr_assert(cJSON_IsNumber(t));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "admitted"))) {
        if (c->at) {
            cr_assert_lt(c->admitted, c->cap);
            c->at[c->admitted] = (int64_t)t->valuedouble;
        }
        c->admitted++;
    } else {
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(v,
                                                                  "until_ms")));
        c->denied++;
    }
    return 0;
}

static void r_takes(pl_engine *e, const char *id, int64_t *at, size_t cap,
                    size_t *admitted, size_t *denied)
{
    r_count c = {at, cap, *admitted, *denied};
    cr_assert_eq(pl_run_walk(e, id, r_visit, &c), PL_OK, "%s", pl_errmsg());
    *admitted = c.admitted;
    *denied = c.denied;
}

/* No window of @p window ms of the store's clock holds more than R_LIMIT
 * admissions. */
static int r_check_windows_of(const int64_t *at, size_t n, int64_t window)
{
    int most = 0;
    for (size_t i = 0; i < n; i++) {
        int in = 0;
        for (size_t j = 0; j < n; j++)
            in += at[j] / window == at[i] / window;
        cr_assert_leq(in, R_LIMIT, "%d calls admitted in the window at %lld",
                      in, (long long)(at[i] / window * window));
        most = in > most ? in : most;
    }
    return most;
}

static int r_check_windows(const int64_t *at, size_t n)
{
    return r_check_windows_of(at, n, R_WINDOW_MS);
}

Test(rate, bad_arguments_are_refused)
{
    pl_registry *reg = r_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    bool ok;
    int64_t at, retry;
    cr_assert_eq(pl_rate_take(NULL, &at, &retry, e, "x", 1, 10), PL_EINVAL);
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, NULL, "x", 1, 10), PL_EINVAL);
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "", 1, 10), PL_EINVAL);
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "x", 0, 10), PL_EINVAL);
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "x", 1, 0), PL_EINVAL);
    char name[PL_MAX_FLOW_KEY + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, name, 1, 10), PL_EINVAL);
    /* a name is text, on both stores */
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "\xff\xfe", 1, 10),
                 PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "UTF-8"), "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "a\nb", 1, 10), PL_EINVAL);
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "caf\xc3\xa9", 1, 10), PL_OK,
                 "%s", pl_errmsg());
    cr_assert(ok);

    pl_decorator d;
    pl_rate_limit_options o = PL_RATE_LIMIT_OPTIONS_INIT;
    cr_assert_eq(pl_decorator_rate_limit(NULL, &o), PL_EINVAL);
    cr_assert_eq(pl_decorator_rate_limit(&d, NULL), PL_EINVAL);
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL); /* no name */
    cr_assert(strstr(pl_errmsg(), "resource"), "%s", pl_errmsg());
    o.resource = "\xff";
    o.limit = 1;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL); /* not text */
    cr_assert(strstr(pl_errmsg(), "UTF-8"), "%s", pl_errmsg());
    o.limit = 0;
    o.resource = "r";
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL); /* limit 0 */
    o.limit = 1;
    o.window_ms = 0;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    /* a window pl_rate_take() refuses is refused when the decorator is
     * made, not by every run that uses it */
    o.window_ms = ((int64_t)1 << 53) + 1;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "2^53"), "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "r", 1, o.window_ms),
                 PL_EINVAL);
    o.window_ms = (int64_t)1 << 53;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "r", 1, o.window_ms), PL_OK,
                 "%s", pl_errmsg());
    o.window_ms = 1000;
    o.version = 0;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    o.version = PL_RATE_LIMIT_OPTIONS_VERSION + 1;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    o.version = PL_RATE_LIMIT_OPTIONS_VERSION;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A window admits its limit and no more; the next take waits for the
 * next window, which the answer names. */
Test(rate, a_window_admits_its_limit)
{
    pl_registry *reg = r_registry();
    const char *path = t_store_path();
    pl_engine *e = rt_engine(path, reg);
    bool ok;
    int64_t at, retry, first = 0;
    const int64_t window = 3600 * 1000; /* an hour: one window, surely */
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "hourly", 3, window),
                     PL_OK, "%s", pl_errmsg());
        if (i == 0)
            first = at;
        if (ok) {
            admitted++;
            cr_assert_eq(retry, 0);
        } else {
            cr_assert_eq(retry, at - at % window + window);
        }
    }
    /* two takes may straddle an hour's boundary: a fresh window then */
    bool same = first / window == at / window;
    cr_assert_eq(admitted, same ? 3 : admitted);
    cr_assert_geq(admitted, 3);
    /* another limit starts afresh; another name is another budget */
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "hourly", 4, window), PL_OK);
    cr_assert(ok);
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "other", 1, window), PL_OK);
    cr_assert(ok);
    /* another window length starts afresh too (windows of 2^40 and 2^41
     * ms, whose boundaries are decades away) */
    for (int64_t len = (int64_t)1 << 40; len <= (int64_t)1 << 41; len *= 2)
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "long", 2, len),
                         PL_OK);
            cr_assert_eq(ok, i < 2, "window of %lld ms, take %d",
                         (long long)len, i);
        }
    pl_engine_close(e);

    /* a read-only engine keeps no budget */
    pl_engine_options ro = PL_ENGINE_OPTIONS_INIT;
    ro.read_only = true;
    pl_engine *r = NULL;
    cr_assert_eq(pl_engine_open(&r, path, reg, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, r, "hourly", 4, window),
                 PL_ESTATE);
    pl_engine_close(r);
    pl_registry_free(reg);
}

static void r_run(pl_engine *e, const char *id, int n)
{
    char json[32];
    snprintf(json, sizeof json, "{\"n\": %d}", n);
    pl_outcome *o = t_start(e, "limited", json, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
}

/*
 * One run makes more calls than a window admits: it waits for the next
 * windows, each take recorded; a replay takes nothing and waits for
 * nothing.
 */
Test(rate, a_run_waits_for_budget_and_replays_without_waiting)
{
    pl_registry *reg = r_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    enum { N = 3 * R_LIMIT };
    int64_t at[N];
    size_t admitted = 0, denied = 0;
    char id[16] = "one";
    /* on a machine so slow that the windows passed by themselves, the run
     * never had to wait: what the test is about did not happen, so it
     * runs again (the recorded takes say so, not a clock) */
    for (int attempt = 0; attempt < 4; attempt++) {
        if (attempt)
            snprintf(id, sizeof id, "one-%d", attempt);
        r_run(e, id, N);
        admitted = denied = 0;
        r_takes(e, id, at, N, &admitted, &denied);
        cr_assert_eq(admitted, N);
        r_check_windows(at, admitted);
        if (denied >= 2)
            break;
    }
    cr_assert_geq(denied, 2, "12 calls at 4 a window waited only %zu times",
                  denied);
    /* the replay: served from the ledger, nothing taken (the budget as
     * stored is as it was) */
    pl__rate_budget before, after;
    cr_assert_eq(pl__store_rate_get(e->store, "provider", &before), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_leq(before.count, R_LIMIT);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    size_t a2 = 0, d2 = 0;
    r_takes(e, id, NULL, 0, &a2, &d2);
    cr_assert_eq(a2, admitted);
    cr_assert_eq(d2, denied);
    cr_assert_eq(pl__store_rate_get(e->store, "provider", &after), PL_OK);
    cr_assert_eq(after.start_ms, before.start_ms);
    cr_assert_eq(after.count, before.count);
    cr_assert_eq(pl__store_rate_get(e->store, "nobody", &after), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Three processes share one budget: no window of the store's clock admits
 * more than the limit, whoever asked. */
Test(rate, processes_share_one_budget)
{
    pl_registry *reg = r_registry();
    const char *path = t_store_path();
    pl_engine *e = rt_engine(path, reg);
    pl_engine_close(e);
    enum { P = 3, N = 8 };
    pid_t kids[P];
    for (int i = 0; i < P; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            char id[24], json[48];
            snprintf(id, sizeof id, "proc-%d", i);
            snprintf(json, sizeof json, "{\"n\": %d}", N);
            rt_child_run(path, reg, "limited", json, id);
        }
    }
    for (int i = 0; i < P; i++) {
        int status;
        cr_assert_eq(waitpid(kids[i], &status, 0), kids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    e = rt_engine(path, reg);
    int64_t at[P * N];
    size_t admitted = 0, denied = 0;
    for (int i = 0; i < P; i++) {
        char id[24];
        snprintf(id, sizeof id, "proc-%d", i);
        r_takes(e, id, at, P * N, &admitted, &denied);
    }
    cr_assert_eq(admitted, P * N);
    int most = r_check_windows(at, admitted);
    cr_log_info("rate: %zu admitted, %zu waits, at most %d in a window",
                admitted, denied, most);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A process killed while it waits for budget: the wait was recorded; the
 * run, continued, waits what is left, takes again and completes. */
Test(rate, a_wait_survives_a_kill)
{
    pl_registry *reg = r_registry();
    const char *path = t_store_path();
    pl_engine *e = rt_engine(path, reg);
    pl_engine_close(e);
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        char json[32];
        snprintf(json, sizeof json, "{\"n\": %d}", 4 * R_LIMIT);
        rt_child_run(path, reg, "limited", json, "killed");
    }
    rt_kill_in_wait(kid);
    e = rt_engine(path, reg);
    size_t admitted = 0, denied = 0;
    r_takes(e, "killed", NULL, 0, &admitted, &denied);
    cr_assert_geq(denied, 1, "the wait was not recorded before it began");
    rt_continue_to_end(e, "killed");
    int64_t at[8 * R_LIMIT];
    size_t a2 = 0, d2 = 0;
    r_takes(e, "killed", at, 8 * R_LIMIT, &a2, &d2);
    cr_assert_eq(a2, 4 * R_LIMIT);
    cr_assert_geq(d2, denied);
    r_check_windows(at, a2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int r_count_waits(const pl_step *s, void *user)
{
    *(int *)user += pl_step_type_of(s) == PL_STEP_WAIT;
    return 0;
}

/* Waiting with the engine's durable sleep: a wait longer than the engine
 * waits in place parks the run, freeing its thread; woken, it takes again
 * and completes, within the budget.  Nothing depends on how fast the
 * machine is: the test spends the window's budget itself before the run
 * starts, so the run's first take finds it spent, unless the window ended
 * in between (a stalled machine), which the run's record shows (it
 * completed at once, no take denied): then again with a longer window. */
Test(rate, a_long_wait_parks_the_run)
{
    pl_registry *reg = r_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    enum { N = R_LIMIT + 1 };
    char json[32], id[32];
    snprintf(json, sizeof json, "{\"n\": %d}", N);
    int64_t window = R_WINDOW_MS;
    size_t admitted = 0, denied = 0;
    int64_t at[N];
    for (;; window *= 2) {
        cr_assert_leq(window, 64 * R_WINDOW_MS,
                      "the run never found its window spent");
        r_durable_opts.window_ms = window;
        bool ok = true;
        int64_t t, retry;
        while (ok)
            cr_assert_eq(pl_rate_take(&ok, &t, &retry, e, "durable-provider",
                                      R_LIMIT, window),
                         PL_OK, "%s", pl_errmsg());
        snprintf(id, sizeof id, "parks-%lld", (long long)window);
        pl_outcome *o = t_start(e, "durable", json, id);
        pl_run_status first = o->status;
        pl_outcome_free(o);
        admitted = denied = 0;
        if (first == PL_RUN_COMPLETED) {
            /* every take admitted: a denied one would have parked it */
            r_takes(e, id, at, N, &admitted, &denied);
            cr_assert_eq(admitted, N);
            cr_assert_eq(denied, 0);
            continue;
        }
        cr_assert_eq(first, PL_RUN_WAITING, "%s", pl_run_status_name(first));
        break;
    }
    for (int ms = 0;; ms += 10) {
        int64_t next = 0;
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK);
        pl_run_status st = info->status;
        pl_run_info_free(info);
        if (st == PL_RUN_COMPLETED)
            break;
        cr_assert_eq(st, PL_RUN_WAITING);
        cr_assert_lt(ms, 600000, "the run never completed");
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    r_takes(e, id, at, N, &admitted, &denied);
    cr_assert_eq(admitted, N);
    cr_assert_geq(denied, 1);
    r_check_windows_of(at, admitted, window);
    /* each denied take parked the run: a wait step for each */
    int waits = 0;
    cr_assert_eq(pl_run_walk(e, id, r_count_waits, &waits), PL_OK);
    cr_assert_geq((size_t)waits, denied, "%d waits for %zu denials", waits,
                  denied);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a deadline, and a fan-out, which cannot park ---- */

static pl_rate_limit_options r_far_opts, r_fan_opts;
static int r_slept;

static int r_count_sleep(int64_t ms, void *user)
{
    (void)ms;
    (void)user;
    r_slept++;
    return PL_OK;
}

/* One call of "echo" through rate_limit(r_far_opts), with a deadline a
 * minute away: {"code": the result's error code, or null}. */
static int deadlined(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    int64_t now;
    pl_decorator d;
    int st = pl_ctx_now(&now, ctx);
    if (!st)
        st = pl_ctx_set_deadline(ctx, now + 60000);
    if (!st)
        st = pl_decorator_rate_limit(&d, &r_far_opts);
    pl_action call = PL_ACTION_INIT;
    call.policy = "echo";
    call.payload = pl_json_empty();
    pl_step *res = NULL;
    if (!st && (st = pl_ctx_call(&res, ctx, &call, &d, 1)) == PL_ERESULT)
        st = PL_OK;
    if (!st)
        st = pl_steps_add_resultf(out, "{s:s?}", "code",
                                  pl_step_error_code(res));
    pl_step_free(res);
    return st;
}

Test(rate, a_wait_past_the_deadline_is_a_recorded_timeout)
{
    r_far_opts = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    r_far_opts.resource = "far";
    r_far_opts.limit = 1;
    r_far_opts.window_ms = (int64_t)1 << 42; /* the next starts in 2109 */
    r_far_opts.sleep = r_count_sleep;
    pl_registry *reg = r_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "deadlined", deadlined, NULL), PL_OK);
    pl_engine *e = rt_engine(t_store_path(), reg);
    bool ok = false;
    int64_t t, retry;
    cr_assert_eq(pl_rate_take(&ok, &t, &retry, e, "far", 1, (int64_t)1 << 42),
                 PL_OK, "%s", pl_errmsg());
    cr_assert(ok, "the window's one call, taken");
    pl_outcome *o = t_start(e, "deadlined", "{}", "late");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                         pl_outcome_result(o), "code")),
                     PL_ERR_TIMEOUT);
    cr_expect_eq(r_slept, 0, "nothing waited");
    cr_expect_eq(t_calls.echo, 0, "the call was not made");
    size_t admitted = 0, denied = 0;
    r_takes(e, "late", NULL, 0, &admitted, &denied);
    cr_expect_eq(admitted, 0);
    cr_expect_eq(denied, 1, "the take is recorded");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* One call of "echo" through rate_limit(r_fan_opts), in a fan-out. */
static int fanned(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    pl_decorator d;
    int st = pl_decorator_rate_limit(&d, &r_fan_opts);
    pl_action call = PL_ACTION_INIT;
    call.policy = "echo";
    call.payload = pl_json_empty();
    pl_call_spec spec = PL_CALL_SPEC_INIT;
    spec.action = &call;
    spec.decorators = &d;
    spec.n_decorators = 1;
    if (!st)
        st = pl_ctx_call_all(NULL, ctx, &spec, 1);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

Test(rate, a_call_of_a_fanout_waits_in_place)
{
    r_fan_opts = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    r_fan_opts.resource = "fan";
    r_fan_opts.limit = 1;
    r_fan_opts.window_ms = 200;
    pl_registry *reg = r_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "fanned", fanned, NULL), PL_OK);
    pl_engine *e = rt_engine(t_store_path(), reg);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK); /* else parks */
    size_t admitted = 0, denied = 0;
    for (int i = 0; !denied; i++) {
        cr_assert_lt(i, 50,
                     "never denied: a busy host's every take fell "
                     "in a window of its own");
        bool ok = true;
        int64_t t, retry;
        while (ok) /* spend the window */
            cr_assert_eq(pl_rate_take(&ok, &t, &retry, e, "fan", 1, 200), PL_OK,
                         "%s", pl_errmsg());
        char id[32];
        snprintf(id, sizeof id, "fan-%d", i);
        pl_outcome *o = t_start(e, "fanned", "{}", id);
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s: %s", id,
                     o->reason ? o->reason : pl_run_status_name(o->status));
        pl_outcome_free(o);
        admitted = denied = 0;
        r_takes(e, id, NULL, 0, &admitted, &denied);
        cr_assert_eq(admitted, 1);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}
