/*
 * test_adapter.c -- the tool adapter's decorators (retry, timeout, budget,
 * cap; core/decorator_*.c), the cooperative deadline (pl_ctx_deadline())
 * and the JSON-lines trace writer (core/ext/trace.c).
 *
 * A root policy "caller" calls the tool named in its payload through the
 * decorators the test put in g_decos, and returns the tool's result.  The
 * tool "flaky" fails its first payload.fail attempts (it counts its
 * attempts from its own ledger, so it is deterministic) with an error
 * result of payload.code, and each attempt does its outside-world work in
 * a recorded side effect "hit" that appends a byte to an effects file: the
 * file's size is how many attempts really executed, in any process.
 *
 * Waits go through a sleep hook that counts them and never sleeps (and can
 * SIGKILL the process in the middle of one): no test depends on time.
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Policies and hooks                                                       */
/* ------------------------------------------------------------------------ */

static pl_decorator g_decos[4];
static size_t g_n_decos;
static char g_fx[4400];         /* the effects file */
static int g_sleeps;            /* waits the sleep hook saw */
static int64_t g_sleep_ms[64];  /* what each was asked to wait */
static int g_kill_at_sleep;     /* SIGKILL in this wait (1-based); 0 never */
static long g_kill_at_boundary; /* SIGKILL at this boundary; 0 never */
static long g_boundaries;       /* step appends and commits seen */
static int64_t g_seen_deadline; /* pl_ctx_deadline() flaky last saw */
static int64_t g_nest_deadline; /* ... and "nest" */
static int g_setdl_status;      /* pl_ctx_set_deadline(-1) in "setdl" */

static const cJSON *member(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str_member(const cJSON *o, const char *k)
{
    const cJSON *v = member(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_member(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = member(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : 0;
}

static int hit(cJSON **out, void *user)
{
    (void)user;
    FILE *f = fopen(g_fx, "a");
    if (!f || fputc('x', f) == EOF || fclose(f) != 0)
        return PL_EIO;
    *out = cJSON_CreateNumber((double)file_size(g_fx));
    return *out ? PL_OK : PL_ENOMEM;
}

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void real_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/*
 * flaky: {"fail": F, "code": C, "retry_after_ms": R, "tokens": T,
 *         "sleep_ms": S, "past_deadline": true, "big": N}
 */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    g_seen_deadline = pl_ctx_deadline(ctx);
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    int attempt = 1;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        if (pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT)
            attempt++;
    cJSON *n = NULL;
    if ((st = pl_ctx_side_effect(&n, ctx, "hit", hit, NULL)))
        return st;
    cJSON_Delete(n);
    const cJSON *p = a->payload;
    int64_t sleep_ms = (int64_t)num_member(p, "sleep_ms", 0);
    if (sleep_ms > 0)
        real_sleep_ms(sleep_ms);
    if (cJSON_IsTrue(member(p, "past_deadline")) && g_seen_deadline) {
        while (real_ms() <= g_seen_deadline + 20)
            real_sleep_ms(10);
    }
    if (attempt <= (int)num_member(p, "fail", 0)) {
        const char *code = str_member(p, "code");
        cJSON *err = NULL;
        st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code",
                          code ? code : PL_ERR_RETRYABLE_SERVER, "message",
                          "the server is busy");
        /* passed on as given, of any type: tools can be wrong */
        const char *const extra[] = {"retry_after_ms", "tokens"};
        for (size_t i = 0; !st && i < 2; i++)
            if (member(p, extra[i]))
                cJSON_AddItemToObject(err, extra[i],
                                      cJSON_Duplicate(member(p, extra[i]),
                                                      true));
        if (!st)
            st = pl_steps_add_result(out, err);
        cJSON_Delete(err);
        return st;
    }
    int big = (int)num_member(p, "big", 0);
    if (big > 0) {
        const char *unit = str_member(p, "unit");
        size_t ul = unit ? strlen(unit) : 1;
        char *data = malloc((size_t)big * ul + 1);
        cr_assert_not_null(data);
        for (int i = 0; i < big; i++)
            memcpy(data + (size_t)i * ul, unit ? unit : "x", ul);
        data[(size_t)big * ul] = '\0';
        st = pl_steps_add_resultf(out, "{s:s}", "data", data);
        free(data);
        return st;
    }
    return pl_steps_add_resultf(out, "{s:b, s:i}", "ok", 1, "attempt", attempt);
}

/* nest: calls flaky (no decorators) and notes its own deadline. */
static int nest(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    g_nest_deadline = pl_ctx_deadline(ctx);
    pl_step *res = NULL;
    pl_action c = PL_ACTION_INIT;
    c.policy = "flaky";
    c.payload = a->payload;
    int st = pl_ctx_call(&res, ctx, &c, NULL, 0);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* setdl: a negative deadline is refused; 0 removes it. */
static int setdl(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    g_setdl_status = pl_ctx_set_deadline(ctx, -1);
    int st = pl_ctx_set_deadline(ctx, 0);
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:I}", "deadline", pl_ctx_deadline(ctx));
}

/* caller: {"tool": name, "args": {...}} -> the tool's result, through
 * g_decos. */
static int caller(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *args = member(a->payload, "args");
    pl_action c = PL_ACTION_INIT;
    c.policy = str_member(a->payload, "tool");
    c.payload = cJSON_IsObject(args) ? args : pl_json_empty();
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &c, g_decos, g_n_decos);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static int sleep_hook(int64_t ms, void *user)
{
    (void)user;
    cr_assert_geq(ms, 0, "a wait of %lld ms", (long long)ms);
    if (g_sleeps < 64)
        g_sleep_ms[g_sleeps] = ms;
    g_sleeps++;
    if (g_kill_at_sleep && g_sleeps == g_kill_at_sleep)
        raise(SIGKILL);
    return PL_OK;
}

static void kill_at_boundary(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    g_boundaries++;
    if (g_kill_at_boundary && g_boundaries == g_kill_at_boundary)
        raise(SIGKILL);
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {
        {"caller", caller}, {"flaky", flaky}, {"nest", nest}, {"setdl", setdl}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

static pl_engine *open_engine(const char *store, const pl_registry *reg,
                              pl_event_fn on_event, void *user)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = on_event;
    o.event_user = user;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

static void fresh_fx(const char *dir)
{
    snprintf(g_fx, sizeof g_fx, "%s/effects", dir);
}

/* Run caller -> tool with @p args_json through the decorators given. */
static pl_outcome *run_tool(pl_engine *e, const char *id, const char *tool,
                            const char *args_json)
{
    char payload[4096];
    snprintf(payload, sizeof payload, "{\"tool\": \"%s\", \"args\": %s}", tool,
             args_json);
    return t_start(e, "caller", payload, id);
}

static void set_decos(size_t n, const pl_decorator *d)
{
    if (n)
        memcpy(g_decos, d, n * sizeof *d);
    g_n_decos = n;
}

static pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, path), PL_OK, "%s", pl_errmsg());
    return l;
}

/* Side effects named @p name in a ledger. */
static int count_effects(const pl_steps *l, const char *name)
{
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        const char *got = str_member(pl_step_payload(s), "name");
        if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT && got &&
            strcmp(got, name) == 0)
            n++;
    }
    return n;
}

static int count_type(const pl_steps *l, pl_step_type type)
{
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        n += pl_step_type_of(pl_steps_at(l, i)) == type;
    return n;
}

static void expect_code(const pl_outcome *o, const char *code)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "?");
    const char *got = str_member(pl_outcome_result(o), "code");
    cr_expect(got && strcmp(got, code) == 0, "expected %s, got %s", code,
              got ? got : "(no code)");
}

static void expect_ok(const pl_outcome *o)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "?");
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "ok")), "result: %s",
              t_text(pl_outcome_result(o)));
}

static void expect_msg(const char *needle)
{
    cr_expect(strstr(pl_errmsg(), needle) != NULL, "expected \"%s\" in: %s",
              needle, pl_errmsg());
}

/* Continue a completed run: the outcome must be the same, and nothing
 * executes, waits or touches the effects file. */
static void expect_replay_still(pl_engine *e, const char *id,
                                const pl_outcome *first)
{
    int sleeps = g_sleeps;
    long hits = file_size(g_fx);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    char *a = t_text(pl_outcome_result(o)),
         *b = t_text(pl_outcome_result(first));
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(g_sleeps, sleeps, "a replay waited");
    cr_expect_eq(file_size(g_fx), hits, "a replay executed an attempt");
    pl_outcome_free(o);
}

/* ------------------------------------------------------------------------ */
/* retry                                                                    */
/* ------------------------------------------------------------------------ */

static pl_retry_options retry_opts(unsigned attempts)
{
    pl_retry_options o = PL_RETRY_OPTIONS_INIT;
    o.max_attempts = attempts;
    o.sleep = sleep_hook;
    return o;
}

Test(retry, retries_until_success_and_replay_never_waits, .fini = t_cleanup)
{
    const char *store = t_store_path();
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(5);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(store, reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "r1", "flaky", "{\"fail\": 2}");
    expect_ok(o);
    cr_expect_eq(num_member(pl_outcome_result(o), "attempt", 0), 3);
    cr_expect_eq(file_size(g_fx), 3, "three attempts executed");
    cr_expect_eq(g_sleeps, 2, "one wait between two attempts");
    pl_steps *l = ledger(e, "r1", "0.0");
    cr_expect_eq(count_effects(l, "retry.backoff"), 2);
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 3,
                 "every attempt's result is in the ledger");
    /* each recorded wait lies within the bounds */
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        const char *name = str_member(p, "name");
        if (!name || strcmp(name, "retry.backoff") != 0)
            continue;
        double delay = num_member(member(p, "value"), "delay_ms", -1);
        cr_expect(delay >= 100 && delay <= 10000, "delay %g", delay);
    }
    pl_steps_free(l);
    expect_replay_still(e, "r1", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, exhaustion_returns_the_last_error, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "r", "flaky", "{\"fail\": 10}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    cr_expect_eq(file_size(g_fx), 3, "exactly max_attempts attempts");
    cr_expect_eq(g_sleeps, 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, only_retryable_codes_and_custom_ones, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(4);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "a", "flaky",
                             "{\"fail\": 2, \"code\": \"ToolBug\"}");
    expect_code(o, PL_ERR_TOOL_BUG);
    cr_expect_eq(file_size(g_fx), 1, "ToolBug is not retried by default");
    cr_expect_eq(g_sleeps, 0);
    pl_outcome_free(o);
    const char *const defaults[] = {"RateLimited", "Timeout"};
    for (size_t i = 0; i < 2; i++) {
        char args[128], id[16];
        snprintf(args, sizeof args, "{\"fail\": 1, \"code\": \"%s\"}",
                 defaults[i]);
        snprintf(id, sizeof id, "d%zu", i);
        o = run_tool(e, id, "flaky", args);
        expect_ok(o);
        pl_outcome_free(o);
    }
    /* the codes are configurable */
    static const char *const codes[] = {"ToolBug"};
    ro.codes = codes;
    ro.n_codes = 1;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    o = run_tool(e, "b", "flaky", "{\"fail\": 2, \"code\": \"ToolBug\"}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "c", "flaky", "{\"fail\": 2}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER); /* no longer in the list */
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, honours_retry_after_and_bounds_the_jitter, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    ro.base_ms = 10;
    ro.max_backoff_ms = 50;
    ro.max_retry_after_ms = 600000;
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "ra", "flaky",
                             "{\"fail\": 2, \"retry_after_ms\": 600000}");
    expect_ok(o);
    pl_steps *l = ledger(e, "ra", "0.0");
    int seen = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        const char *name = str_member(p, "name");
        if (!name || strcmp(name, "retry.backoff") != 0)
            continue;
        cr_expect_eq(num_member(member(p, "value"), "delay_ms", -1), 600000,
                     "retry_after_ms wins over the backoff");
        seen++;
    }
    cr_expect_eq(seen, 2);
    pl_steps_free(l);
    /* the hook was asked to wait what is left of 600 s: more than 0 */
    cr_expect_eq(g_sleeps, 2);
    cr_expect(g_sleep_ms[0] > 0 && g_sleep_ms[0] <= 600000);
    pl_outcome_free(o);

    /* a tool asking for more than max_retry_after_ms: no retry */
    int sleeps = g_sleeps;
    long hits = file_size(g_fx);
    o = run_tool(e, "long", "flaky",
                 "{\"fail\": 2, \"retry_after_ms\": 600001}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    cr_expect_eq(g_sleeps, sleeps);
    cr_expect_eq(file_size(g_fx), hits + 1);
    pl_outcome_free(o);

    /* a wrong retry_after_ms (negative, not a number) is ignored; an
     * enormous one ends the retries */
    const char *const wrong[] = {"-5", "\"soon\"", "null", "[1]"};
    for (size_t i = 0; i < 4; i++) {
        char args[128], id[16];
        snprintf(args, sizeof args, "{\"fail\": 1, \"retry_after_ms\": %s}",
                 wrong[i]);
        snprintf(id, sizeof id, "w%zu", i);
        o = run_tool(e, id, "flaky", args);
        expect_ok(o);
        pl_outcome_free(o);
    }
    o = run_tool(e, "huge", "flaky",
                 "{\"fail\": 1, \"retry_after_ms\": 1e300}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    pl_outcome_free(o);

    /* many attempts: every delay within [base, min(max, 3 * previous)] */
    ro.max_attempts = 12;
    o = run_tool(e, "j", "flaky", "{\"fail\": 11}");
    expect_ok(o);
    l = ledger(e, "j", "0.0");
    double prev = ro.base_ms;
    seen = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        const char *name = str_member(p, "name");
        if (!name || strcmp(name, "retry.backoff") != 0)
            continue;
        double delay = num_member(member(p, "value"), "delay_ms", -1);
        double hi = prev * 3 < ro.max_backoff_ms ? prev * 3 : ro.max_backoff_ms;
        cr_expect(delay >= ro.base_ms && delay <= hi,
                  "delay %g outside [%u, %g]", delay, ro.base_ms, hi);
        cr_expect_eq(num_member(member(p, "value"), "attempt", -1), seen + 1);
        prev = delay;
        seen++;
    }
    cr_expect_eq(seen, 11);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, a_backoff_past_the_deadline_is_a_timeout, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(5);
    ro.base_ms = 3600 * 1000;
    ro.max_backoff_ms = 3600 * 1000;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_timeout(&d[0], 60 * 1000), PL_OK);
    cr_assert_eq(pl_decorator_retry(&d[1], &ro), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "t", "flaky", "{\"fail\": 3}");
    expect_code(o, PL_ERR_TIMEOUT);
    cr_expect_eq(g_sleeps, 0, "no wait past the deadline");
    cr_expect_eq(file_size(g_fx), 1);
    cr_expect_gt(g_seen_deadline, 0, "the callee saw the deadline");
    expect_replay_still(e, "t", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    pl_retry_options o = PL_RETRY_OPTIONS_INIT;
    cr_expect_eq(pl_decorator_retry(&d, NULL), PL_OK, "defaults are good");
    cr_expect_eq(pl_decorator_retry(NULL, &o), PL_EINVAL);
    o.max_attempts = 0;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("max_attempts is 0");
    o = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    o.base_ms = 500;
    o.max_backoff_ms = 100;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("max_backoff_ms");
    o = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    o.n_codes = 2;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("n_codes without codes");
    static const char *const codes[] = {"Timeout", ""};
    o.codes = codes;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("NULL or empty");
    o = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    o.version = 99;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("pl_retry_options version 99 is newer");
    o.version = 0;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("not made with PL_RETRY_OPTIONS_INIT");

    /* changed after creation: refused at first use, failing the run */
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    ro.max_attempts = 0;
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *out = run_tool(e, "bad", "flaky", "{}");
    cr_expect_eq(out->status, PL_RUN_FAILED);
    cr_expect_eq(out->error, PL_EINVAL);
    cr_expect(out->reason && strstr(out->reason, "max_attempts is 0"), "%s",
              out->reason ? out->reason : "(null)");
    cr_expect_eq(file_size(g_fx), 0, "nothing ran");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* retry across crashes                                                     */
/* ------------------------------------------------------------------------ */

/* In a forked child: start run "c" and die at the planned point. */
static void crash_child(const char *store)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_boundaries = 0;
        pl_registry *reg = registry();
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        o.on_event = kill_at_boundary;
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, &o))
            _exit(11);
        cJSON *p = t_json("{\"tool\": \"flaky\", \"args\": {\"fail\": 3}}");
        pl_action a = {PL_ACTION_VERSION, "caller", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c";
        pl_outcome *out = NULL;
        int st = pl_run_start(&out, e, &a, &ro);
        _exit(st ? 12 : 3); /* it should have died before this */
    }
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) == -1 && errno == EINTR)
        ;
    cr_assert_eq(w, pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child should have died of SIGKILL (boundary %ld, wait "
              "%d), but exited with %d",
              g_kill_at_boundary, g_kill_at_sleep,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* The shape of a ledger: its steps' types, actors and side effect names. */
static char *shape(const pl_steps *l)
{
    size_t cap = 64 + pl_steps_count(l) * 64, len = 0;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    s[0] = '\0';
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *st = pl_steps_at(l, i);
        const char *name = str_member(pl_step_payload(st), "name");
        len += (size_t)snprintf(s + len, cap - len, "%s/%s/%s ",
                                pl_step_type_name(pl_step_type_of(st)),
                                pl_step_actor(st), name ? name : "-");
    }
    return s;
}

typedef struct crash_state {
    int backoffs;      /* durable backoff records */
    bool tail_backoff; /* the ledger ends in one: the crash was mid-wait */
    int attempts;      /* attempts whose outside work is durable */
} crash_state;

static crash_state state_at_crash(const char *store, const pl_registry *reg)
{
    crash_state cs = {0, false, 0};
    pl_engine *e = open_engine(store, reg, NULL, NULL);
    pl_steps *l = NULL;
    if (pl_run_ledger(&l, e, "c", "0.0") == PL_OK) {
        cs.backoffs = count_effects(l, "retry.backoff");
        cs.attempts = count_effects(l, "hit");
        size_t n = pl_steps_count(l);
        const char *name = n ? str_member(pl_step_payload(pl_steps_at(l,
                                                                      n - 1)),
                                          "name")
                             : NULL;
        cs.tail_backoff = name && strcmp(name, "retry.backoff") == 0;
    }
    pl_steps_free(l);
    pl_engine_close(e);
    return cs;
}

/* Continue run "c" and check the crash invariants against @p ref. */
static void recover_and_check(const char *store, const pl_registry *reg,
                              const char *ref, crash_state cs)
{
    g_sleeps = 0;
    long hits_before = file_size(g_fx);
    pl_engine *e = open_engine(store, reg, NULL, NULL);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "c", NULL), PL_OK, "%s", pl_errmsg());
    expect_ok(o);
    cr_expect_eq(num_member(pl_outcome_result(o), "attempt", 0), 4);
    pl_steps *l = ledger(e, "c", "0.0");
    char *got = shape(l);
    cr_expect_str_eq(got, ref,
                     "the recovered ledger differs from an "
                     "uncrashed run's");
    free(got);
    /* every bound holds: 4 attempts, 3 waits in all */
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 4);
    cr_expect_eq(count_effects(l, "retry.backoff"), 3);
    pl_steps_free(l);
    /* nothing finished repeats: attempts durable at the crash are not
     * executed again; only one in flight (effect done, not durable) may */
    long executed_after = file_size(g_fx) - hits_before;
    cr_expect_eq(executed_after, 4 - cs.attempts,
                 "recovery executed %ld attempts, %d were durable",
                 executed_after, cs.attempts);
    cr_expect(hits_before - cs.attempts == 0 || hits_before - cs.attempts == 1,
              "%ld attempts ran before the crash, %d are durable", hits_before,
              cs.attempts);
    /* the waits: none for a backoff already followed by an attempt; the
     * rest of one the crash interrupted; each new one */
    int want = 3 - cs.backoffs + (cs.tail_backoff ? 1 : 0);
    cr_expect_eq(g_sleeps, want,
                 "recovery waited %d times; %d backoffs were durable%s",
                 g_sleeps, cs.backoffs,
                 cs.tail_backoff ? ", the last one interrupted" : "");
    cr_expect_eq(pl_run_verify(e, "c"), PL_OK, "%s", pl_errmsg());
    expect_replay_still(e, "c", o);
    pl_outcome_free(o);
    pl_engine_close(e);
}

static char *reference_shape(const pl_registry *reg, long *boundaries)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", t_tmpdir());
    char store[4400];
    t_store_in(store, sizeof store, dir, "ref.db");
    fresh_fx(dir);
    g_boundaries = 0;
    pl_engine *e = open_engine(store, reg, kill_at_boundary, NULL);
    pl_outcome *o = run_tool(e, "c", "flaky", "{\"fail\": 3}");
    expect_ok(o);
    *boundaries = g_boundaries;
    pl_steps *l = ledger(e, "c", "0.0");
    char *s = shape(l);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    return s;
}

Test(retry_crash, kill_at_every_boundary, .fini = t_cleanup)
{
    static pl_retry_options ro;
    ro = retry_opts(5);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    long k_max = 0;
    char *ref = reference_shape(reg, &k_max);
    cr_assert_gt(k_max, 10);
    int mid_wait = 0; /* boundaries at which a wait was recorded, not done */
    for (long k = 1; k <= k_max; k++) {
        char dir[4200], store[4400];
        snprintf(dir, sizeof dir, "%s", t_tmpdir());
        t_store_in(store, sizeof store, dir, "store.db");
        fresh_fx(dir);
        g_kill_at_boundary = k;
        g_kill_at_sleep = 0;
        crash_child(store);
        g_kill_at_boundary = 0;
        crash_state cs = state_at_crash(store, reg);
        mid_wait += cs.tail_backoff;
        recover_and_check(store, reg, ref, cs);
    }
    /* two per wait: its commit, and the next attempt's first append (lost
     * with the crash) */
    cr_expect_eq(mid_wait, 6, "%d boundaries left a wait the last durable step",
                 mid_wait);
    free(ref);
    pl_registry_free(reg);
}

Test(retry_crash, kill_in_every_wait, .fini = t_cleanup)
{
    static pl_retry_options ro;
    ro = retry_opts(5);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    long k_max = 0;
    char *ref = reference_shape(reg, &k_max);
    for (int w = 1; w <= 3; w++) {
        char dir[4200], store[4400];
        snprintf(dir, sizeof dir, "%s", t_tmpdir());
        t_store_in(store, sizeof store, dir, "store.db");
        fresh_fx(dir);
        g_sleeps = 0;
        g_kill_at_sleep = w;
        crash_child(store);
        g_kill_at_sleep = 0;
        crash_state cs = state_at_crash(store, reg);
        cr_expect(cs.tail_backoff,
                  "wait %d: the backoff is durable before "
                  "the wait",
                  w);
        cr_expect_eq(cs.backoffs, w);
        cr_expect_eq(cs.attempts, w,
                     "every attempt before the wait is "
                     "durable");
        pl_engine *e = open_engine(store, reg, NULL, NULL);
        pl_steps *l = ledger(e, "c", "0.0");
        cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), w,
                     "so is its result");
        pl_steps_free(l);
        /* a check replay stops where the record ends, without waiting */
        g_sleeps = 0;
        pl_run_options check = PL_RUN_OPTIONS_INIT;
        check.check = true;
        pl_outcome *o = NULL;
        cr_expect_eq(pl_run_continue(&o, e, "c", &check), PL_ECHECK, "%s",
                     pl_errmsg());
        cr_expect_null(o);
        cr_expect_eq(g_sleeps, 0, "a check replay waited");
        pl_engine_close(e);
        cr_expect_eq(file_size(g_fx), w);
        recover_and_check(store, reg, ref, cs);
        cr_expect_eq(file_size(g_fx), 4, "no attempt ran twice");
    }
    free(ref);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* timeout and the deadline                                                 */
/* ------------------------------------------------------------------------ */

Test(timeout, in_time_passes_the_result_and_carries_the_deadline,
     .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_decorator d;
    cr_assert_eq(pl_decorator_timeout(&d, 3600 * 1000), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "t", "nest", "{}");
    expect_ok(o);
    cr_expect_gt(g_nest_deadline, 0);
    cr_expect_eq(g_seen_deadline, g_nest_deadline,
                 "a callee starts with its caller's deadline");
    pl_steps *l = ledger(e, "t", "0.0");
    cr_expect_eq(count_type(l, PL_STEP_ERROR), 0);
    cr_expect_eq(count_effects(l, "now"), 2, "start and end are recorded");
    pl_steps_free(l);
    pl_outcome_free(o);
    /* without a timeout there is no deadline */
    set_decos(0, NULL);
    o = run_tool(e, "n", "nest", "{}");
    expect_ok(o);
    cr_expect_eq(g_nest_deadline, 0);
    cr_expect_eq(g_seen_deadline, 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(timeout, a_late_result_becomes_a_recorded_timeout, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_decorator d;
    cr_assert_eq(pl_decorator_timeout(&d, 30), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* flaky waits until 20 ms past the deadline it was given */
    pl_outcome *o = run_tool(e, "late", "flaky", "{\"past_deadline\": true}");
    expect_code(o, PL_ERR_TIMEOUT);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"),
                     "past its deadline"));
    pl_steps *l = ledger(e, "late", "0.0");
    /* the callee's own result stays in its ledger, the error after it */
    size_t n = pl_steps_count(l);
    cr_assert_geq(n, 2);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, n - 1)), PL_STEP_ERROR);
    cr_expect_str_eq(pl_step_actor(pl_steps_at(l, n - 1)), "timeout");
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 1);
    pl_steps_free(l);
    expect_replay_still(e, "late", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(timeout, per_attempt_inside_retry, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_timeout(&d[1], 30), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* every attempt is late: Timeout is retryable, so all three run */
    pl_outcome *o = run_tool(e, "pa", "flaky", "{\"past_deadline\": true}");
    expect_code(o, PL_ERR_TIMEOUT);
    cr_expect_eq(file_size(g_fx), 3);
    cr_expect_eq(g_sleeps, 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(timeout, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    cr_expect_eq(pl_decorator_timeout(&d, 0), PL_EINVAL);
    expect_msg("not a timeout");
    cr_expect_eq(pl_decorator_timeout(&d, -5), PL_EINVAL);
    expect_msg("-5 ms");
    cr_expect_eq(pl_decorator_timeout(NULL, 5), PL_EINVAL);
    /* a hand-made one with arg 0: refused at first use */
    cr_assert_eq(pl_decorator_timeout(&d, 5), PL_OK);
    d.arg = 0;
    set_decos(1, &d);
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "b", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    pl_outcome_free(o);
    /* pl_ctx_set_deadline refuses a negative deadline; 0 removes it */
    set_decos(0, NULL);
    cr_assert_eq(pl_decorator_timeout(&d, 1000), PL_OK);
    set_decos(1, &d);
    o = run_tool(e, "s", "setdl", "{}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(g_setdl_status, PL_EINVAL);
    cr_expect_eq(num_member(pl_outcome_result(o), "deadline", -1), 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_expect_eq(pl_ctx_deadline(NULL), 0);
}

/* ------------------------------------------------------------------------ */
/* budget                                                                   */
/* ------------------------------------------------------------------------ */

Test(budget, steps_bound_the_retries, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(50);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_steps = 20;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[1], &b), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "s", "flaky", "{\"fail\": 1000}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"), "steps"));
    /* per attempt: budget's clock, the hit, the result, then random, now
     * and the backoff: 6 steps; the 4th attempt's check sees 18 + 1 */
    long hits = file_size(g_fx);
    cr_expect(hits >= 1 && hits < 50,
              "retries count against the budget: "
              "%ld attempts",
              hits);
    pl_steps *l = ledger(e, "s", "0.0");
    /* the budget stops the chain once the ledger holds max_steps steps */
    cr_expect_leq(pl_steps_count(l), b.max_steps + 6);
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), hits);
    pl_steps_free(l);
    expect_replay_still(e, "s", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, tokens_recorded_by_steps_count, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(50);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_tokens = 100;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[1], &b), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* 40 tokens an attempt: after three, 120 >= 100 */
    pl_outcome *o = run_tool(e, "t", "flaky",
                             "{\"fail\": 1000, \"tokens\": 40}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"), "120 tokens"),
              "%s", str_member(pl_outcome_result(o), "message"));
    cr_expect_eq(file_size(g_fx), 3);
    expect_replay_still(e, "t", o);
    pl_outcome_free(o);
    /* tokens that are not a positive number count nothing */
    o = run_tool(e, "t2", "flaky", "{\"fail\": 3, \"tokens\": -40}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "t3", "flaky", "{\"fail\": 3, \"tokens\": \"many\"}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "t4", "flaky", "{\"fail\": 3, \"tokens\": 1e300}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, wall_clock, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(50);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_wall_ms = 5;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[1], &b), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* each attempt takes 10 ms of real time: the second is refused */
    pl_outcome *o = run_tool(e, "w", "flaky",
                             "{\"fail\": 1000, \"sleep_ms\": 10}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"), " ms used"));
    cr_expect_eq(file_size(g_fx), 1);
    expect_replay_still(e, "w", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, within_it_nothing_changes, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_budget b = PL_BUDGET_INIT;
    b.max_steps = 100;
    b.max_wall_ms = 3600 * 1000;
    b.max_tokens = 1000;
    pl_decorator d;
    cr_assert_eq(pl_decorator_budget(&d, &b), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "ok", "flaky", "{}");
    expect_ok(o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    pl_budget b = PL_BUDGET_INIT;
    cr_expect_eq(pl_decorator_budget(&d, &b), PL_EINVAL);
    expect_msg("no limit is set");
    cr_expect_eq(pl_decorator_budget(&d, NULL), PL_EINVAL);
    cr_expect_eq(pl_decorator_budget(NULL, &b), PL_EINVAL);
    b.max_wall_ms = -1;
    cr_expect_eq(pl_decorator_budget(&d, &b), PL_EINVAL);
    expect_msg("negative");
    b = (pl_budget)PL_BUDGET_INIT;
    b.max_steps = 3;
    b.version = 7;
    cr_expect_eq(pl_decorator_budget(&d, &b), PL_EINVAL);
    expect_msg("pl_budget version 7 is newer");
    /* emptied after creation: refused at first use */
    static pl_budget lim = PL_BUDGET_INIT;
    lim.max_steps = 5;
    cr_assert_eq(pl_decorator_budget(&d, &lim), PL_OK);
    lim.max_steps = 0;
    set_decos(1, &d);
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "b", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    cr_expect(o->reason && strstr(o->reason, "no limit is set"));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* cap                                                                      */
/* ------------------------------------------------------------------------ */

/* Run flaky with a big result under cap(@p cap) and return the outcome. */
static pl_outcome *capped(pl_engine *e, const char *id, size_t cap,
                          const char *args)
{
    pl_decorator d;
    cr_assert_eq(pl_decorator_cap(&d, cap), PL_OK);
    set_decos(1, &d);
    return run_tool(e, id, "flaky", args);
}

static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80             ? 0
                : (*p & 0xe0) == 0xc0 ? 1
                : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 ? 3
                                      : -1;
        if (n < 0)
            return false;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return false;
    }
    return true;
}

Test(cap, over_the_cap_is_truncated_with_a_note, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = capped(e, "big", 200, "{\"big\": 1000}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    const cJSON *r = pl_outcome_result(o);
    char *text = t_text(r);
    cr_expect_leq(strlen(text), 200, "the replacement fits: %s", text);
    free(text);
    cr_expect(cJSON_IsTrue(member(r, "truncated")));
    cr_expect_eq(num_member(r, "original_bytes", 0), 1000 + 11);
    cr_expect_eq(num_member(r, "max_bytes", 0), 200);
    cr_expect(strstr(str_member(r, "note"), "truncated"));
    const char *preview = str_member(r, "preview");
    cr_assert_not_null(preview);
    cr_expect_gt(strlen(preview), 20);
    cr_expect_eq(strncmp(preview, "{\"data\":\"xxxx", 13), 0, "%s", preview);
    /* the full result stays in the callee's ledger */
    pl_steps *l = ledger(e, "big", "0.0");
    const pl_step *last = pl_steps_at(l, pl_steps_count(l) - 1);
    cr_expect_str_eq(pl_step_actor(last), "cap");
    const pl_step *full = pl_steps_at(l, pl_steps_count(l) - 2);
    cr_expect_eq(strlen(str_member(pl_step_payload(full), "data")), 1000);
    pl_steps_free(l);
    expect_replay_still(e, "big", o);
    pl_outcome_free(o);

    /* within the cap: untouched */
    o = capped(e, "small", 2000, "{\"big\": 1000}");
    cr_expect_eq(strlen(str_member(pl_outcome_result(o), "data")), 1000);
    cr_expect_null(member(pl_outcome_result(o), "truncated"));
    pl_outcome_free(o);
    /* exactly at the cap: untouched */
    o = capped(e, "edge", 1011, "{\"big\": 1000}");
    cr_expect_null(member(pl_outcome_result(o), "truncated"));
    pl_outcome_free(o);
    o = capped(e, "over", 1010, "{\"big\": 1000}");
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "truncated")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(cap, utf8_and_escapes_are_cut_cleanly, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* two-byte characters, and quotes that escaping doubles */
    const char *const units[] = {"\xc3\xa9", "\\\"", "\xe2\x82\xac!"};
    for (size_t u = 0; u < 3; u++) {
        for (size_t cap = 180; cap < 192; cap++) {
            char args[128], id[32];
            snprintf(args, sizeof args, "{\"big\": 300, \"unit\": \"%s\"}",
                     units[u]);
            snprintf(id, sizeof id, "u%zu-%zu", u, cap);
            pl_outcome *o = capped(e, id, cap, args);
            cr_assert_eq(o->status, PL_RUN_COMPLETED);
            const cJSON *r = pl_outcome_result(o);
            char *text = t_text(r);
            cr_expect_leq(strlen(text), cap, "%s", text);
            free(text);
            const char *preview = str_member(r, "preview");
            cr_assert_not_null(preview);
            cr_expect(valid_utf8(preview), "cap %zu: a cut character", cap);
            pl_outcome_free(o);
        }
    }
    /* a cap smaller than the note: an empty preview, and a note */
    pl_outcome *o = capped(e, "tiny", 10, "{\"big\": 100}");
    cr_expect_str_eq(str_member(pl_outcome_result(o), "preview"), "");
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "truncated")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(cap, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    cr_expect_eq(pl_decorator_cap(&d, 0), PL_EINVAL);
    expect_msg("cap of 0");
    cr_expect_eq(pl_decorator_cap(NULL, 10), PL_EINVAL);
    cr_assert_eq(pl_decorator_cap(&d, 10), PL_OK);
    d.arg = 0;
    set_decos(1, &d);
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "b", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    cr_expect_eq(file_size(g_fx), 0, "nothing ran");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* all of them together                                                     */
/* ------------------------------------------------------------------------ */

Test(adapter, the_decorators_compose, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(4);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_steps = 200;
    pl_decorator d[4];
    cr_assert_eq(pl_decorator_timeout(&d[0], 3600 * 1000), PL_OK);
    cr_assert_eq(pl_decorator_retry(&d[1], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[2], &b), PL_OK);
    cr_assert_eq(pl_decorator_cap(&d[3], 100), PL_OK);
    set_decos(4, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "all", "flaky", "{\"fail\": 2, \"big\": 500}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "truncated")));
    cr_expect_eq(file_size(g_fx), 3);
    cr_expect_eq(g_sleeps, 2);
    expect_replay_still(e, "all", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(adapter, errorf_sets_the_message)
{
    cr_expect_eq(pl_errorf(PL_EIO, "disk %d is gone", 3), PL_EIO);
    cr_expect_str_eq(pl_errmsg(), "disk 3 is gone");
    cr_expect_eq(pl_errorf(PL_ELIMIT, NULL), PL_ELIMIT);
    cr_expect_str_eq(pl_errmsg(), "PL_ELIMIT");
}

/* ------------------------------------------------------------------------ */
/* traces                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct forward {
    pl_trace *trace;
    long events;
    long kinds[16];
} forward;

/* A program's own callback that also writes the trace. */
static void count_and_trace(const pl_event *ev, void *user)
{
    forward *f = user;
    f->events++;
    if ((unsigned)ev->kind < 16)
        f->kinds[ev->kind]++;
    pl_trace_event(ev, f->trace);
}

static const char *const known_events[] = {
    "run_started",  "call_started",  "call_served",   "call_completed",
    "call_failed",  "step_appended", "step_replayed", "commit",
    "code_changed", "run_suspended", "run_completed", "run_failed"};

Test(trace, one_parsable_line_per_event, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    char path[4400];
    snprintf(path, sizeof path, "%s/trace.jsonl", t_tmpdir());
    forward f = {0};
    cr_assert_eq(pl_trace_open(&f.trace, path), PL_OK, "%s", pl_errmsg());
    static pl_retry_options ro;
    ro = retry_opts(3);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, count_and_trace, &f);
    pl_outcome *o = run_tool(e, "tr", "flaky", "{\"fail\": 1}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "tf", "flaky", "{\"fail\": 5, \"code\": \"ToolBug\"}");
    pl_outcome_free(o);
    pl_engine_close(e);
    cr_assert_eq(pl_trace_close(f.trace), PL_OK, "%s", pl_errmsg());
    pl_registry_free(reg);

    FILE *in = fopen(path, "r");
    cr_assert_not_null(in);
    char buf[8192];
    long lines = 0, completed_calls = 0, failed_calls = 0, appended = 0;
    const char *first_event = NULL;
    char last_event[64] = "";
    while (fgets(buf, sizeof buf, in)) {
        size_t len = strlen(buf);
        cr_assert(len > 0 && buf[len - 1] == '\n', "a line is whole");
        cJSON *l = cJSON_Parse(buf);
        cr_assert_not_null(l, "line %ld is not JSON: %s", lines + 1, buf);
        lines++;
        cr_expect(cJSON_IsNumber(member(l, "ts_us")) &&
                      member(l, "ts_us")->valuedouble > 1.5e15,
                  "ts_us: %s", buf);
        const char *id = str_member(l, "trace_id");
        cr_expect(id && (strcmp(id, "tr") == 0 || strcmp(id, "tf") == 0),
                  "trace_id: %s", buf);
        const char *ev = str_member(l, "event");
        cr_assert_not_null(ev);
        bool known = false;
        for (size_t i = 0; i < 12; i++)
            known = known || strcmp(ev, known_events[i]) == 0;
        cr_expect(known, "unknown event %s", ev);
        if (!first_event)
            first_event = strcmp(ev, "run_started") == 0 ? "run_started"
                                                         : "other";
        snprintf(last_event, sizeof last_event, "%s", ev);
        if (strcmp(ev, "step_appended") == 0) {
            appended++;
            cr_expect_not_null(str_member(l, "step_type"), "%s", buf);
            cr_expect_not_null(str_member(l, "path"), "%s", buf);
            cr_expect_not_null(str_member(l, "policy"), "%s", buf);
            cr_expect(cJSON_IsNumber(member(l, "seq")), "%s", buf);
            cr_expect_null(member(l, "outcome"));
            cr_expect_null(member(l, "elapsed_ns"));
        }
        if (strcmp(ev, "call_completed") == 0) {
            completed_calls++;
            cr_expect_str_eq(str_member(l, "path"), "0");
            cr_expect_str_eq(str_member(l, "policy"), "flaky");
            cr_expect_str_eq(str_member(l, "outcome"), "completed");
            cr_expect_eq(num_member(l, "seq", -1), 0);
            cr_expect(cJSON_IsNumber(member(l, "elapsed_ns")), "%s", buf);
            cr_expect_null(member(l, "status"));
        }
        if (strcmp(ev, "call_failed") == 0) {
            failed_calls++;
            cr_expect_str_eq(str_member(l, "outcome"), "failed");
            cr_expect_str_eq(str_member(l, "detail"), "ToolBug");
            cr_expect_str_eq(str_member(l, "trace_id"), "tf");
        }
        if (strcmp(ev, "run_completed") == 0) {
            cr_expect_str_eq(str_member(l, "policy"), "caller");
            cr_expect_str_eq(str_member(l, "outcome"), "completed");
        }
        if (strcmp(ev, "commit") == 0)
            cr_expect_gt(num_member(l, "seq", 0), 0, "%s", buf);
        cJSON_Delete(l);
    }
    fclose(in);
    cr_expect_eq(lines, f.events, "one line per event");
    cr_expect_eq(appended, f.kinds[PL_EVENT_STEP_APPENDED]);
    cr_expect_eq(completed_calls, 1);
    cr_expect_eq(failed_calls, 1);
    cr_expect_str_eq(first_event, "run_started");
    cr_expect_str_eq(last_event, "run_completed");
}

Test(trace, open_and_close_errors, .fini = t_cleanup)
{
    pl_trace *t = (pl_trace *)&t;
    cr_expect_eq(pl_trace_open(&t, NULL), PL_EINVAL);
    cr_expect_null(t);
    cr_expect_eq(pl_trace_open(NULL, "x"), PL_EINVAL);
    char path[4400];
    snprintf(path, sizeof path, "%s/no/such/dir/trace.jsonl", t_tmpdir());
    cr_expect_eq(pl_trace_open(&t, path), PL_EIO);
    expect_msg("cannot open");
    cr_expect_eq(pl_trace_close(NULL), PL_OK);
    pl_trace_event(NULL, NULL); /* nothing to write to: nothing happens */
    /* a line that cannot be written is reported at close */
    if (access("/dev/full", W_OK) == 0) {
        cr_assert_eq(pl_trace_open(&t, "/dev/full"), PL_OK);
        pl_event ev = {.kind = PL_EVENT_RUN_STARTED,
                       .run_id = "r",
                       .path = "0",
                       .policy = "caller"};
        pl_trace_event(&ev, t);
        cr_expect_eq(pl_trace_close(t), PL_EIO);
        expect_msg("could not be written");
    }
}
