/*
 * test_validate.c -- the validate decorator (core/ext/validate.c): a callee's
 * input refused before it runs, its result checked after, both recorded so
 * that a replay after a real crash (fork + SIGKILL) serves them.
 */
#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int g_tool_runs;
static bool g_crash; /* the agent SIGKILLs itself after its calls */
static pl_schema_cache *g_cache;
static bool g_clear_user;

#define IN_SCHEMA                                                              \
    "{\"type\":\"object\",\"required\":[\"a\",\"b\"],"                         \
    "\"properties\":{\"a\":{\"type\":\"number\"},"                             \
    "\"b\":{\"type\":\"number\",\"maximum\":100}},"                            \
    "\"additionalProperties\":false}"
#define OUT_SCHEMA                                                             \
    "{\"type\":\"object\",\"required\":[\"sum\"],"                             \
    "\"properties\":{\"sum\":{\"type\":\"number\"}}}"

/* {"a", "b"} -> {"sum"}; {"lie": true} in the payload returns {"total"}
 * instead; {"oops": true} returns an error result. */
static int tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    atomic_fetch_add(&g_tool_runs, 1);
    double x = cJSON_GetObjectItemCaseSensitive(a->payload, "a")->valuedouble;
    double y = cJSON_GetObjectItemCaseSensitive(a->payload, "b")->valuedouble;
    return pl_steps_add_resultf(out, "{s:f}", "sum", x + y);
}

static int liar(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    atomic_fetch_add(&g_tool_runs, 1);
    return pl_steps_add_resultf(out, "{s:s}", "total", "many");
}

static int failing(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    atomic_fetch_add(&g_tool_runs, 1);
    return pl_steps_add_error(out, PL_ERR_NOT_FOUND, "no such thing");
}

/* Returns no step: its result is {} */
static int silent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    atomic_fetch_add(&g_tool_runs, 1);
    return PL_OK;
}

/* {"calls": [{"policy": p, "payload": {...}}, ...]}: call each through the
 * validate decorator; return {"results": [...]}. */
static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *results = cJSON_CreateArray();
    const cJSON *c;
    int st = PL_OK;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(a->payload, "calls"))
    {
        pl_action call = PL_ACTION_INIT;
        call.policy = cJSON_GetObjectItemCaseSensitive(c, "policy")
                          ->valuestring;
        call.payload = cJSON_GetObjectItemCaseSensitive(c, "payload");
        pl_decorator d = PL_DECORATOR_INIT;
        if ((st = pl_decorator_validate(&d, g_cache)))
            break;
        if (g_clear_user)
            d.user = NULL; /* a decorator changed after it was made */
        pl_step *r = NULL;
        st = pl_ctx_call(&r, ctx, &call, &d, 1);
        if (st == PL_ERESULT) /* a refusal is the result to collect */
            st = PL_OK;
        if (st)
            break;
        cJSON_AddItemToArray(results, cJSON_Duplicate(pl_step_payload(r), 1));
        pl_step_free(r);
    }
    if (!st && g_crash)
        raise(SIGKILL);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:o}", "results", results);
    else
        cJSON_Delete(results);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
        const char *in, *out;
    } defs[] = {
        {"tool", tool, IN_SCHEMA, OUT_SCHEMA},
        {"liar", liar, IN_SCHEMA, OUT_SCHEMA},
        {"failing", failing, IN_SCHEMA, OUT_SCHEMA},
        {"silent", silent, IN_SCHEMA, OUT_SCHEMA},
        {"plain", tool, NULL, NULL},
        {"agent", agent, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.input_schema = defs[i].in;
        d.output_schema = defs[i].out;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    cr_assert_eq(pl_schema_cache_new(&g_cache), PL_OK);
    return reg;
}

static const cJSON *result_at(const pl_outcome *o, int i)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "");
    const cJSON *r = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "results"), i);
    cr_assert_not_null(r);
    return r;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static void expect_error(const cJSON *r, const char *code, const char *path,
                         const char *keyword)
{
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")),
              "not an error result");
    cr_expect_str_eq(str(r, "code"), code);
    cr_expect_str_eq(str(r, "path"), path);
    cr_expect_str_eq(str(r, "keyword"), keyword);
}

Test(validate, valid_input_and_result_pass)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"calls\":[{\"policy\":\"tool\",\"payload\":{\"a\":1,\"b\":2}},"
        "{\"policy\":\"plain\",\"payload\":{\"a\":1,\"b\":\"x\",\"c\":0}}]}",
        "ok");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(result_at(o, 0), "sum");
    cr_assert(cJSON_IsNumber(sum) && sum->valuedouble == 3);
    /* a policy without schemas is called as is */
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(result_at(o, 1), "error"));
    cr_expect_eq(atomic_load(&g_tool_runs), 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

Test(validate, invalid_input_is_refused_without_running_the_callee)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"calls\":[{\"policy\":\"tool\",\"payload\":{\"a\":\"one\",\"b\":2}},"
        "{\"policy\":\"tool\",\"payload\":{\"a\":1}},"
        "{\"policy\":\"tool\",\"payload\":{\"a\":1,\"b\":101}},"
        "{\"policy\":\"tool\",\"payload\":{\"a\":1,\"b\":1,\"x/y\":1}}]}",
        "bad");
    expect_error(result_at(o, 0), PL_ERR_INVALID_INPUT, "/a", "type");
    expect_error(result_at(o, 1), PL_ERR_INVALID_INPUT, "", "required");
    expect_error(result_at(o, 2), PL_ERR_INVALID_INPUT, "/b", "maximum");
    expect_error(result_at(o, 3), PL_ERR_INVALID_INPUT, "/x~1y",
                 "additionalProperties");
    cr_expect(strstr(str(result_at(o, 1), "message"), "\"b\"") != NULL, "%s",
              str(result_at(o, 1), "message"));
    cr_expect_eq(atomic_load(&g_tool_runs), 0, "the tool ran");
    cr_expect_eq(o->calls_executed, 4); /* the calls ran, not the tool */

    /* the refusal is a recorded error step of the callee's invocation */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "bad", "0"), PL_OK, "%s", pl_errmsg());
    size_t errors = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        errors += pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT &&
                  pl_step_is_error(pl_steps_at(l, i));
    cr_expect_eq(errors, 4);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

Test(validate, result_that_breaks_the_output_schema_is_a_mismatch)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"calls\":[{\"policy\":\"liar\",\"payload\":{\"a\":1,\"b\":2}},"
        "{\"policy\":\"failing\",\"payload\":{\"a\":1,\"b\":2}},"
        "{\"policy\":\"silent\",\"payload\":{\"a\":1,\"b\":2}}]}",
        "lie");
    expect_error(result_at(o, 0), PL_ERR_OUTPUT_SCHEMA_MISMATCH, "",
                 "required");
    /* an error result is passed on as the callee gave it */
    cr_expect_str_eq(str(result_at(o, 1), "code"), PL_ERR_NOT_FOUND);
    /* no step is the result {}, checked as such */
    expect_error(result_at(o, 2), PL_ERR_OUTPUT_SCHEMA_MISMATCH, "",
                 "required");
    cr_expect_eq(atomic_load(&g_tool_runs), 3);

    /* the callee's own result stays in its ledger, before the mismatch */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "lie", "0.0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 2);
    cr_expect_str_eq(str(pl_step_payload(pl_steps_at(l, 0)), "total"), "many");
    cr_expect_str_eq(pl_step_error_code(pl_steps_at(l, 1)),
                     PL_ERR_OUTPUT_SCHEMA_MISMATCH);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

Test(validate, replay_after_a_crash_serves_validated_results)
{
    const char *store = t_store_path();
    const char *payload =
        "{\"calls\":[{\"policy\":\"tool\",\"payload\":{\"a\":1,\"b\":2}},"
        "{\"policy\":\"tool\",\"payload\":{\"b\":2}},"
        "{\"policy\":\"liar\",\"payload\":{\"a\":1,\"b\":2}}]}";
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        pl_registry *reg = registry();
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, NULL))
            _exit(3);
        g_crash = true;
        cJSON *p = cJSON_Parse(payload);
        pl_action a = PL_ACTION_INIT;
        a.policy = "agent";
        a.payload = p;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "crash";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, &a, &ro);
        _exit(4); /* not reached: the agent kills the process */
    }
    int status = 0;
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child should have died of SIGKILL (status %d)", status);

    pl_registry *reg = registry();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "crash", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(atomic_load(&g_tool_runs), 0, "a callee ran again");
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(o->calls_served, 3);
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(result_at(o, 0), "sum")
                     ->valuedouble,
                 3);
    expect_error(result_at(o, 1), PL_ERR_INVALID_INPUT, "", "required");
    expect_error(result_at(o, 2), PL_ERR_OUTPUT_SCHEMA_MISMATCH, "",
                 "required");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "crash"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

Test(validate, a_bad_schema_is_refused_at_registration)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "t";
    d.fn = tool;
    d.input_schema = "{\"properties\":{\"a\":{\"minimum\":\"zero\"}}}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "input_schema") &&
                  strstr(pl_errmsg(), "#/properties/a/minimum"),
              "%s", pl_errmsg());
    d.input_schema = NULL;
    d.output_schema = "{\"$ref\":\"#/definitions/missing\"}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "output_schema") &&
                  strstr(pl_errmsg(), "#/$ref"),
              "%s", pl_errmsg());
    d.output_schema = "[]";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EJSON);
    cr_expect(strstr(pl_errmsg(), "output_schema") != NULL, "%s", pl_errmsg());
    d.output_schema = "{\"pattern\":\"(?=a)\"}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "#/pattern") != NULL, "%s", pl_errmsg());
    d.output_schema = OUT_SCHEMA;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(pl_registry_find(reg, "t")->output_schema, OUT_SCHEMA);
    cr_expect_eq(pl_registry_count(reg), 1);
    pl_registry_free(reg);
}

/* A def built against version 1 of the struct (before output_schema) is
 * read without the field. */
typedef struct def_v1 {
    unsigned version;
    const char *name;
    pl_policy_fn fn;
    void *user;
    const char *description;
    const char *input_schema;
    bool idempotent;
    pl_in_doubt in_doubt;
    const char *code_version;
} def_v1;

Test(validate, a_version_1_def_is_still_read)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    def_v1 *old = malloc(sizeof *old); /* exactly its size: ASan checks */
    cr_assert_not_null(old);
    *old = (def_v1){1,    "old",
                    tool, NULL,
                    NULL, "{\"type\":\"object\"}",
                    true, PL_IN_DOUBT_RERUN,
                    NULL};
    cr_assert_eq(pl_registry_add(reg, (const pl_policy_def *)(void *)old),
                 PL_OK, "%s", pl_errmsg());
    free(old);
    const pl_policy_def *d = pl_registry_find(reg, "old");
    cr_assert_not_null(d);
    cr_expect_null(d->output_schema);
    cr_expect_str_eq(d->input_schema, "{\"type\":\"object\"}");
    pl_registry_free(reg);
}

Test(validate, no_cache_is_refused)
{
    pl_registry *reg = registry();
    pl_decorator d = PL_DECORATOR_INIT;
    cr_expect_eq(pl_decorator_validate(&d, NULL), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "cache") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_decorator_validate(NULL, g_cache), PL_EINVAL);
    cr_expect_eq(pl_schema_cache_new(NULL), PL_EINVAL);
    pl_schema_cache_free(NULL);

    /* a decorator whose cache was taken away fails the run, saying so */
    g_clear_user = true;
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"calls\":[{\"policy\":\"tool\",\"payload\":{\"a\":1,\"b\":2}}]}",
        "nocache");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect(o->reason && strstr(o->reason, "PL_EINVAL") &&
                  strstr(o->reason, "no schema cache"),
              "%s", o->reason ? o->reason : "");
    cr_expect_eq(atomic_load(&g_tool_runs), 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

/* An input too costly to check (a "$ref" cycle: the depth bound) fails
 * the run with PL_ELIMIT and the validator's reason; the tool never runs. */
Test(validate, a_value_too_costly_to_check_fails_the_run_with_elimit)
{
    pl_registry *reg = registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "cyclic";
    d.fn = tool;
    d.input_schema = "{\"$ref\": \"#\"}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"calls\":[{\"policy\":\"cyclic\",\"payload\":{\"a\":1,\"b\":2}}]}",
        "costly");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ELIMIT);
    cr_expect(o->reason && strstr(o->reason, "deeper"), "%s",
              o->reason ? o->reason : "");
    cr_expect_eq(atomic_load(&g_tool_runs), 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

/* A validated policy whose own run is the first validated call of many
 * other policies: the cache grows (its table moves) while the outer call
 * still has its output schema to check (a read of the old table is a
 * heap-use-after-free under AddressSanitizer). */
Test(validate, a_cache_that_grows_during_a_call_still_checks_its_result)
{
    pl_registry *reg = registry();
    char calls[2048] = "";
    size_t len = 0;
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof name, "tool%d", i);
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = name;
        d.fn = tool;
        d.input_schema = IN_SCHEMA;
        d.output_schema = OUT_SCHEMA;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
        len += (size_t)snprintf(calls + len, sizeof calls - len,
                                "%s{\"policy\":\"%s\",\"payload\":"
                                "{\"a\":%d,\"b\":1}}",
                                i ? "," : "", name, i);
    }
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "inner";
    d.fn = agent;
    d.output_schema = "{\"properties\":{\"results\":{\"maxItems\":5}}}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    char payload[2200];
    snprintf(
        payload, sizeof payload,
        "{\"calls\":[{\"policy\":\"inner\",\"payload\":{\"calls\":[%s]}}]}",
        calls);
    pl_outcome *o = t_start(e, "agent", payload, "grows");
    expect_error(result_at(o, 0), PL_ERR_OUTPUT_SCHEMA_MISMATCH, "/results",
                 "maxItems");
    cr_expect_eq(atomic_load(&g_tool_runs), 12);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

/* Runs on several threads share one cache: each policy is compiled once,
 * under the cache's lock, and every run sees the same verdicts. */
typedef struct worker {
    pl_engine *e;
    int id, ok, refused;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 10; i++) {
        char id[32], payload[256];
        snprintf(id, sizeof id, "t%d-%d", w->id, i);
        snprintf(payload, sizeof payload,
                 "{\"calls\":[{\"policy\":\"tool\",\"payload\":"
                 "{\"a\":%d,\"b\":1}},{\"policy\":\"tool\",\"payload\":"
                 "{\"a\":%d,\"b\":\"x\"}}]}",
                 i, i);
        cJSON *p = cJSON_Parse(payload);
        pl_action a = PL_ACTION_INIT;
        a.policy = "agent";
        a.payload = p;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        if (!pl_run_start(&o, w->e, &a, &ro) && o->status == PL_RUN_COMPLETED) {
            const cJSON *rs = cJSON_GetObjectItemCaseSensitive(
                pl_outcome_result(o), "results");
            const cJSON *sum = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(rs, 0), "sum");
            w->ok += cJSON_IsNumber(sum) && sum->valuedouble == i + 1;
            w->refused += !strcmp(str(cJSON_GetArrayItem(rs, 1), "code"),
                                  PL_ERR_INVALID_INPUT);
        }
        pl_outcome_free(o);
        cJSON_Delete(p);
    }
    return NULL;
}

Test(validate, one_cache_serves_concurrent_runs)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){e, i, 0, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(w[i].ok, 10, "thread %d: %d results right", i, w[i].ok);
        cr_expect_eq(w[i].refused, 10, "thread %d: %d refused", i,
                     w[i].refused);
    }
    cr_expect_eq(atomic_load(&g_tool_runs), 40);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}

/* A model-like policy: calls "tool" on its first turn, then says "done". */
static int assistant(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    size_t results = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        results += pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT;
    if (results)
        return pl_steps_add_text(out, NULL, "done");
    cJSON *args = cJSON_Parse("{\"a\":2,\"b\":3}");
    st = pl_steps_add_call(out, "tool", args);
    cJSON_Delete(args);
    return st;
}

static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    static const char *const tools[] = {"tool"};
    pl_action call = PL_ACTION_INIT;
    call.policy = "assistant";
    call.payload = a->payload;
    call.actions = tools;
    call.n_actions = 1;
    pl_decorator d[3];
    int st = pl_decorator_validate(&d[0], g_cache);
    if (!st)
        st = pl_decorator_loop(&d[1], 3);
    if (!st)
        st = pl_decorator_invoke_action(&d[2]);
    if (st)
        return st;
    pl_step *r = NULL;
    st = pl_ctx_call(&r, ctx, &call, d, 3);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(r));
    pl_step_free(r);
    return st;
}

Test(validate, composes_with_loop_and_invoke_action)
{
    pl_registry *reg = registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "assistant";
    d.fn = assistant;
    d.input_schema = "{\"required\":[\"goal\"],\"properties\":{\"goal\":"
                     "{\"type\":\"string\",\"minLength\":1}}}";
    d.output_schema = "{\"required\":[\"text\"]}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "outer", outer, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);

    pl_outcome *ok = t_start(e, "outer", "{\"goal\":\"add\"}", "good");
    cr_assert_eq(ok->status, PL_RUN_COMPLETED, "%s",
                 ok->reason ? ok->reason : "");
    cr_expect_str_eq(str(pl_outcome_result(ok), "text"), "done");
    cr_expect_eq(atomic_load(&g_tool_runs), 1);

    pl_outcome *bad = t_start(e, "outer", "{\"goal\":\"\"}", "empty");
    cr_assert_eq(bad->status, PL_RUN_COMPLETED);
    expect_error(pl_outcome_result(bad), PL_ERR_INVALID_INPUT, "/goal",
                 "minLength");
    cr_expect_eq(atomic_load(&g_tool_runs), 1, "no turn ran");
    pl_outcome_free(ok);
    pl_outcome_free(bad);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(g_cache);
}
