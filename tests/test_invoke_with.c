/*
 * test_invoke_with.c -- decorators on the tool calls a model makes:
 * pl_decorator_invoke_action_with() and pl_ctx_call_step_with()
 * (core/ext/decorators.c, core/replay/call.c).
 *
 * An agent-shaped loop: a scripted "model" returns the action_calls its
 * payload lists, one turn at a time, under loop + invoke_action_with
 * [validate, retry, cap].  A bad argument is an InvalidInput result the
 * model reads and the tool never runs; a flaky tool is retried; a large
 * result is capped; a run killed with SIGKILL continues with every recorded
 * result served.
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int g_add_runs, g_flaky_runs, g_big_runs;
static pl_schema_cache *g_cache;
static bool g_kill_at_end;   /* the model SIGKILLs itself on its last turn */
static bool g_kill_in_flaky; /* flaky SIGKILLs itself on its 2nd attempt */
static bool g_bad_per_call;  /* the per-call list holds a broken decorator */

#define ADD_SCHEMA                                                             \
    "{\"type\":\"object\",\"required\":[\"a\",\"b\"],"                         \
    "\"properties\":{\"a\":{\"type\":\"number\"},"                             \
    "\"b\":{\"type\":\"number\"}},\"additionalProperties\":false}"

static int add(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    atomic_fetch_add(&g_add_runs, 1);
    double x = cJSON_GetObjectItemCaseSensitive(a->payload, "a")->valuedouble;
    double y = cJSON_GetObjectItemCaseSensitive(a->payload, "b")->valuedouble;
    return pl_steps_add_resultf(out, "{s:f}", "sum", x + y);
}

/* Fails with RetryableServer on its first two attempts (it counts the
 * error steps of its own ledger, so a replay decides the same), then
 * answers. */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    atomic_fetch_add(&g_flaky_runs, 1);
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    int failed = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        failed += pl_step_is_error(pl_steps_at(l, i));
    if (failed == 1 && g_kill_in_flaky)
        raise(SIGKILL);
    if (failed < 2)
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER, "try again");
    return pl_steps_add_resultf(out, "{s:i}", "attempt", failed + 1);
}

/* A result of ~4 KiB, over the cap. */
static int big(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    atomic_fetch_add(&g_big_runs, 1);
    char text[4096];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    return pl_steps_add_resultf(out, "{s:s}", "blob", text);
}

/*
 * The model: {"turns": [[{"policy", "payload"}, ...], ...]}.  Turn i (the
 * number of its `text` steps so far) says "turn i" and returns turn i's
 * calls; after the last, it returns {"seen": [every result it read]}.
 */
static int model(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    int turn = 0;
    cJSON *seen = cJSON_CreateArray();
    if (!seen)
        return PL_ENOMEM;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_TEXT)
            turn++;
        else if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT)
            cJSON_AddItemToArray(seen,
                                 cJSON_Duplicate(pl_step_payload(s), true));
    }
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const cJSON *calls = cJSON_GetArrayItem(turns, turn);
    if (!calls) {
        if (g_kill_at_end)
            raise(SIGKILL);
        return pl_steps_add_resultf(out, "{s:o}", "seen", seen);
    }
    cJSON_Delete(seen);
    char said[32];
    snprintf(said, sizeof said, "turn %d", turn);
    st = pl_steps_add_text(out, NULL, said);
    const cJSON *c;
    cJSON_ArrayForEach(c, calls)
    {
        if (st)
            break;
        st = pl_steps_add_call(
            out, cJSON_GetObjectItemCaseSensitive(c, "policy")->valuestring,
            cJSON_GetObjectItemCaseSensitive(c, "payload"));
    }
    return st;
}

static int no_sleep(int64_t ms, void *user)
{
    (void)ms;
    (void)user;
    return PL_OK;
}

/* The agent: the model under loop(8) + invoke_action_with [validate,
 * retry, cap]. */
static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    static const char *const tools[] = {"adder", "flaky", "big"};
    pl_retry_options ro = PL_RETRY_OPTIONS_INIT;
    ro.max_attempts = 4;
    ro.sleep = no_sleep;
    pl_decorator per[3], d[2];
    int st = pl_decorator_validate(&per[0], g_cache);
    if (!st)
        st = pl_decorator_retry(&per[1], &ro);
    if (!st)
        st = pl_decorator_cap(&per[2], 256);
    if (!st)
        st = pl_decorator_loop(&d[0], 8);
    if (!st)
        st = pl_decorator_invoke_action_with(&d[1], per, 3);
    if (st)
        return st;
    if (g_bad_per_call)
        per[1].fn = NULL; /* changed by hand after it was made */
    pl_action call = PL_ACTION_INIT;
    call.policy = "model";
    call.payload = a->payload;
    call.actions = tools;
    call.n_actions = 3;
    pl_step *r = NULL;
    st = pl_ctx_call(&r, ctx, &call, d, 2);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(r));
    pl_step_free(r);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
        const char *in;
    } defs[] = {
        {"adder", add, ADD_SCHEMA}, {"flaky", flaky, "{\"type\":\"object\"}"},
        {"big", big, NULL},         {"model", model, NULL},
        {"agent", agent, NULL},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.input_schema = defs[i].in;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    cr_assert_eq(pl_schema_cache_new(&g_cache), PL_OK);
    return reg;
}

/* Turn 0: add with a bad argument, add, flaky; turn 1: big; then done. */
#define SCRIPT                                                                 \
    "{\"turns\":[[{\"policy\":\"adder\",\"payload\":{\"a\":1,\"b\":\"two\"}}," \
    "{\"policy\":\"adder\",\"payload\":{\"a\":1,\"b\":2}},"                    \
    "{\"policy\":\"flaky\",\"payload\":{}}],"                                  \
    "[{\"policy\":\"big\",\"payload\":{}}]]}"

static const cJSON *seen_at(const pl_outcome *o, int i)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "");
    const cJSON *r = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "seen"), i);
    cr_assert_not_null(r, "the model saw no result %d", i);
    return r;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* What the model saw, run after run: the same four results. */
static void expect_seen(const pl_outcome *o)
{
    const cJSON *bad = seen_at(o, 0);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bad, "error")));
    cr_expect_str_eq(str(bad, "code"), PL_ERR_INVALID_INPUT);
    cr_expect_str_eq(str(bad, "path"), "/b");
    cr_expect_str_eq(str(bad, "keyword"), "type");
    cr_expect_eq(num(seen_at(o, 1), "sum"), 3);
    cr_expect_eq(num(seen_at(o, 2), "attempt"), 3,
                 "flaky answered at its "
                 "third attempt");
    const cJSON *capped = seen_at(o, 3);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(capped,
                                                            "truncated")));
    cr_expect_eq(num(capped, "max_bytes"), 256);
    cr_expect_null(cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "seen"), 4));
}

Test(invoke_with, validates_retries_and_caps_a_models_tool_calls)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "agent", SCRIPT, "agent");
    expect_seen(o);
    cr_expect_eq(atomic_load(&g_add_runs), 1, "the bad call never ran");
    cr_expect_eq(atomic_load(&g_flaky_runs), 3);
    cr_expect_eq(atomic_load(&g_big_runs), 1);
    pl_outcome_free(o);

    /* a finished run continued: every result served, nothing runs */
    cr_assert_eq(pl_run_continue(&o, e, "agent", NULL), PL_OK, "%s",
                 pl_errmsg());
    expect_seen(o);
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(atomic_load(&g_add_runs), 1);
    cr_expect_eq(atomic_load(&g_flaky_runs), 3);
    cr_expect_eq(atomic_load(&g_big_runs), 1);
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "agent"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

/* Start the agent in a child that kills itself where the flags say. */
static void crash_child(const char *store, bool at_end, bool in_flaky)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        pl_registry *reg = registry();
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, NULL))
            _exit(3);
        g_kill_at_end = at_end;
        g_kill_in_flaky = in_flaky;
        cJSON *p = cJSON_Parse(SCRIPT);
        pl_action a = PL_ACTION_INIT;
        a.policy = "agent";
        a.payload = p;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "crash";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, &a, &ro);
        _exit(4); /* not reached: the process kills itself */
    }
    int status = 0;
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child should have died of SIGKILL (status %d)", status);
}

Test(invoke_with, a_crash_after_every_tool_call_serves_them_all)
{
    const char *store = t_store_path();
    crash_child(store, true, false);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "crash", NULL), PL_OK, "%s",
                 pl_errmsg());
    expect_seen(o);
    cr_expect_eq(atomic_load(&g_add_runs), 0, "a tool ran again");
    cr_expect_eq(atomic_load(&g_flaky_runs), 0, "a tool ran again");
    cr_expect_eq(atomic_load(&g_big_runs), 0, "a tool ran again");
    cr_expect_eq(o->calls_served, 4, "the four tool calls");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "crash"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

Test(invoke_with, a_crash_inside_a_retried_call_goes_on_with_its_attempts)
{
    const char *store = t_store_path();
    crash_child(store, false, true);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "crash", NULL), PL_OK, "%s",
                 pl_errmsg());
    expect_seen(o);
    cr_expect_eq(atomic_load(&g_add_runs), 0, "add's result was durable");
    /* the call was in flight: its invocation runs again, replaying the
     * first attempt (its error compared with the durable one, its backoff
     * served), then the attempt killed and the third */
    cr_expect_eq(atomic_load(&g_flaky_runs), 3, "flaky ran %d times",
                 atomic_load(&g_flaky_runs));
    cr_expect_eq(atomic_load(&g_big_runs), 1);
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "crash"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

Test(invoke_with, refuses_a_broken_list)
{
    pl_decorator d = PL_DECORATOR_INIT, per[1] = {PL_DECORATOR_INIT};
    cr_expect_eq(pl_decorator_invoke_action_with(NULL, per, 0), PL_EINVAL);
    cr_expect_eq(pl_decorator_invoke_action_with(&d, NULL, 2), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "NULL") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_decorator_invoke_action_with(&d, per, 1), PL_EINVAL,
                 "a decorator without a function");
    cr_expect(strstr(pl_errmsg(), "decorator 0") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl_decorator_loop(&per[0], 1), PL_OK);
    per[0].version = 99;
    cr_expect_eq(pl_decorator_invoke_action_with(&d, per, 1), PL_EINVAL,
                 "a decorator of another version");
    /* an empty list is invoke_action itself */
    cr_assert_eq(pl_decorator_invoke_action_with(&d, NULL, 0), PL_OK);
    pl_decorator plain;
    cr_assert_eq(pl_decorator_invoke_action(&plain), PL_OK);
    cr_expect(d.fn == plain.fn);
    cr_expect_str_eq(d.name, "invoke_action");
}

Test(invoke_with, a_decorator_broken_after_it_was_made_fails_the_run)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    g_bad_per_call = true;
    cJSON *p = t_json(SCRIPT);
    pl_action a = PL_ACTION_INIT;
    a.policy = "agent";
    a.payload = p;
    pl_outcome *o = NULL;
    pl_run_start(&o, e, &a, NULL);
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL, "%s", pl_status_name(o->error));
    cr_expect(o->reason && strstr(o->reason, "decorator 1"), "%s",
              o->reason ? o->reason : "(no reason)");
    cr_expect_eq(atomic_load(&g_add_runs), 0, "no tool ran");
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}
