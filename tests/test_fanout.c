/*
 * test_fanout.c -- pl_ctx_call_all (core/replay/fanout.c; docs/design.md §13).
 *
 * A root policy "fan" takes {"calls": [{"policy", "payload", "retry"}...]}
 * and makes them all at once; its result lists the callees' results in
 * argument order.  "sleeper" sleeps payload.ms milliseconds, appends its
 * id to an effects file (a direct effect, as a tool's would be) and returns
 * {"id"}.  Covered: the ledger's order whatever finishes first, replay
 * (nothing runs again; a check replay passes), a decorator on one call
 * only, an error result in one call, bad arguments, a callee that
 * suspends, runs on a pool and in sync mode, and the crash matrix: a
 * fan-out of 4 SIGKILLed at every step boundary, then continued.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLS 8

static char effects_path[4096];
static atomic_int sleeper_runs, flaky_runs, later_runs;

/* ---- policies ---------------------------------------------------------------- */

static int get_int(const cJSON *o, const char *k, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

static void add_effect(int id)
{
    if (!effects_path[0])
        return;
    int fd = open(effects_path, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0)
        return;
    char line[32];
    int n = snprintf(line, sizeof line, "%d\n", id);
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static int sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    int ms = get_int(a->payload, "ms", 0);
    int id = get_int(a->payload, "id", -1);
    atomic_fetch_add(&sleeper_runs, 1);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    add_effect(id);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "id", id);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* The first attempt fails with a retryable error, the second succeeds. */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)user;
    if (atomic_fetch_add(&flaky_runs, 1) == 0)
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER, "try again");
    cJSON *r = t_json("{\"ok\": true}");
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *prompt = t_json("{\"question\": \"go?\"}");
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, prompt);
    cJSON_Delete(prompt);
    if (st)
        return st;
    st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static int count_later(cJSON **out, void *user)
{
    (void)user;
    atomic_fetch_add(&later_runs, 1);
    *out = t_json("{\"done\": true}");
    return PL_OK;
}

/* Its effect goes through the context: recorded once. */
static int later(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, "later", count_later, NULL);
    if (st)
        return st;
    st = pl_steps_add_result(out, v);
    cJSON_Delete(v);
    return st;
}

/* Dies (SIGKILL) while g_die_in_charge is set: in flight at a crash. */
static bool g_die_in_charge;

static int charge(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    add_effect(9);
    if (g_die_in_charge)
        raise(SIGKILL);
    return pl_steps_add_result(out, a->payload);
}

static int no_sleep(int64_t ms, void *user)
{
    (void)ms, (void)user;
    return PL_OK;
}

static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(a->payload, "calls");
    int n = cJSON_GetArraySize(calls);
    cr_assert(n > 0 && n <= MAX_CALLS);
    pl_action acts[MAX_CALLS];
    pl_call_spec specs[MAX_CALLS];
    pl_decorator retry[MAX_CALLS];
    pl_retry_options ro = PL_RETRY_OPTIONS_INIT;
    ro.base_ms = 1;
    ro.max_backoff_ms = 2;
    ro.sleep = no_sleep;
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(calls, i);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "policy");
        const cJSON *pl = cJSON_GetObjectItemCaseSensitive(c, "payload");
        acts[i] = (pl_action)PL_ACTION_INIT;
        acts[i].policy = p->valuestring;
        acts[i].payload = pl ? pl : pl_json_empty();
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &acts[i];
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "retry"))) {
            cr_assert_eq(pl_decorator_retry(&retry[i], &ro), PL_OK);
            specs[i].decorators = &retry[i];
            specs[i].n_decorators = 1;
        }
    }
    pl_step *res[MAX_CALLS];
    int st = pl_ctx_call_all(res, ctx, specs, (size_t)n);
    if (st && st != PL_ERESULT) { /* error results are data here */
        for (int i = 0; i < n; i++)
            cr_assert_null(res[i], "no results on failure");
        return st;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "results");
    bool errors = false;
    for (int i = 0; i < n; i++)
        errors = errors || pl_step_is_error(res[i]);
    cr_assert_eq(st == PL_ERESULT, errors,
                 "PL_ERESULT exactly when a "
                 "result is an error");
    for (int i = 0; i < n; i++) {
        cr_assert_not_null(res[i]);
        cJSON_AddItemToArray(arr,
                             cJSON_Duplicate(pl_step_payload(res[i]), true));
        pl_step_free(res[i]);
    }
    st = pl_steps_add_result(out, o);
    cJSON_Delete(o);
    return st;
}

/* Bad arguments, one per payload "case". */
static int badargs(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *which = cJSON_GetObjectItemCaseSensitive(a->payload, "case")
                            ->valuestring;
    pl_action act = PL_ACTION_INIT;
    act.policy = "echo";
    act.payload = pl_json_empty();
    pl_call_spec spec = PL_CALL_SPEC_INIT;
    spec.action = &act;
    pl_step *res[2] = {NULL, NULL};
    int st;
    if (strcmp(which, "zero") == 0) {
        st = pl_ctx_call_all(res, ctx, &spec, 0);
        cr_expect_eq(st, PL_EINVAL);
        cr_expect(strstr(pl_errmsg(), "zero calls"), "%s", pl_errmsg());
        st = pl_ctx_call_all(res, ctx, NULL, 1);
        cr_expect_eq(st, PL_EINVAL);
        st = pl_ctx_call_all(NULL, ctx, &spec, PL_CALL_ALL_MAX + 1);
        cr_expect_eq(st, PL_ELIMIT);
        /* none of these stopped the run: a real fan-out still works */
        st = pl_ctx_call_all(res, ctx, &spec, 1);
        cr_expect_eq(st, PL_OK, "%s", pl_errmsg());
        pl_step_free(res[0]);
        return st ? st : pl_steps_add_text(out, NULL, "ok");
    }
    if (strcmp(which, "null_policy") == 0)
        act.policy = NULL;
    else if (strcmp(which, "no_init") == 0)
        spec.version = 0;
    else if (strcmp(which, "null_action") == 0)
        spec.action = NULL;
    st = pl_ctx_call_all(res, ctx, &spec, 1);
    cr_expect_null(res[0]);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"fan", fan}, {"sleeper", sleeper}, {"flaky", flaky},
                {"ask", ask}, {"later", later},     {"badargs", badargs}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    /* not idempotent: after a crash inside, its in-doubt rule decides */
    static const struct {
        const char *name;
        pl_in_doubt rule;
    } charges[] = {{"charge_fail", PL_IN_DOUBT_FAIL},
                   {"charge_ask", PL_IN_DOUBT_SUSPEND}};
    for (size_t i = 0; i < 2; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = charges[i].name;
        d.fn = charge;
        d.idempotent = false;
        d.in_doubt = charges[i].rule;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* ---- helpers ------------------------------------------------------------------- */

static void use_effects(void)
{
    snprintf(effects_path, sizeof effects_path, "%s/effects", t_tmpdir());
}

/* How many times each id is in the effects file. */
static void count_effects(int *counts, int n)
{
    memset(counts, 0, (size_t)n * sizeof *counts);
    FILE *f = fopen(effects_path, "r");
    if (!f)
        return;
    int id;
    while (fscanf(f, "%d", &id) == 1)
        if (id >= 0 && id < n)
            counts[id]++;
    fclose(f);
}

/* {"calls": [sleeper i sleeping ms[i]...]} */
static char *sleepers_payload(const int *ms, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *calls = cJSON_AddArrayToObject(o, "calls");
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "policy", "sleeper");
        cJSON *p = cJSON_AddObjectToObject(c, "payload");
        cJSON_AddNumberToObject(p, "id", i);
        cJSON_AddNumberToObject(p, "ms", ms[i]);
        cJSON_AddItemToArray(calls, c);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, e, id, path);
    cr_assert_eq(st, PL_OK, "pl_run_ledger(%s): %s", path, pl_errmsg());
    return l;
}

static void expect_json(const cJSON *got, const char *want_json)
{
    cJSON *want = t_json(want_json);
    char *g = got ? t_text(got) : NULL;
    cr_expect(got && cJSON_Compare(got, want, true), "expected %s, got %s",
              want_json, g ? g : "(null)");
    free(g);
    cJSON_Delete(want);
}

/* Start run @p id of @p policy with the payload @p json: pl_run_start()'s
 * status (no test assertion: forked children and pool tasks use it too). */
static int start_as(pl_outcome **o, pl_engine *e, const char *policy,
                    const char *json, const char *id)
{
    cJSON *payload = cJSON_Parse(json);
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    *o = NULL;
    int st = payload ? pl_run_start(o, e, &a, &ro) : PL_EJSON;
    cJSON_Delete(payload);
    return st;
}

/* The root ledger: n action_calls, then n action_results from @p callee
 * with ids 0..n-1, then the root's result. */
static void expect_fan_ledger(pl_engine *e, const char *id, int n,
                              const char *callee)
{
    pl_steps *l = ledger(e, id, "0");
    cr_assert_eq(pl_steps_count(l), (size_t)(2 * n + 1), "%zu steps",
                 pl_steps_count(l));
    for (int i = 0; i < n; i++) {
        const pl_step *c = pl_steps_at(l, (size_t)i);
        const pl_step *r = pl_steps_at(l, (size_t)(n + i));
        cr_expect_eq(pl_step_type_of(c), PL_STEP_ACTION_CALL);
        cr_expect_eq(pl_step_type_of(r), PL_STEP_ACTION_RESULT);
        cr_expect_str_eq(pl_step_actor(r), callee);
        const cJSON *cp = cJSON_GetObjectItemCaseSensitive(pl_step_payload(c),
                                                           "payload");
        cr_expect_eq(get_int(cp, "id", -1), i, "call %d in argument order", i);
        cr_expect_eq(get_int(pl_step_payload(r), "id", -1), i,
                     "result %d in argument order", i);
    }
    pl_steps_free(l);
}

static const char *const want4 =
    "{\"results\": [{\"id\": 0}, {\"id\": 1}, {\"id\": 2}, {\"id\": 3}]}";

/* ---- tests --------------------------------------------------------------------- */

TestSuite(fanout, .fini = t_cleanup);

Test(fanout, results_in_argument_order_whatever_finishes_first)
{
    use_effects();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    int ms[4] = {60, 0, 30, 10}; /* they finish 1, 3, 2, 0 */
    char *p = sleepers_payload(ms, 4);
    pl_outcome *o = t_start(e, "fan", p, "fan-1");
    expect_json(pl_outcome_result(o), want4);
    cr_expect_eq(o->calls_executed, 4, "executed %llu",
                 (unsigned long long)o->calls_executed);
    expect_fan_ledger(e, "fan-1", 4, "sleeper");
    int counts[4];
    count_effects(counts, 4);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(counts[i], 1, "effect %d: %d", i, counts[i]);
    cr_expect_eq(pl_run_verify(e, "fan-1"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    free(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, replay_serves_every_call)
{
    use_effects();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    int ms[4] = {20, 5, 15, 0};
    char *p = sleepers_payload(ms, 4);
    pl_outcome *o = t_start(e, "fan", p, "fan-2");
    pl_outcome_free(o);
    int before = atomic_load(&sleeper_runs);
    cr_expect_eq(before, 4);
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "fan-2", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    expect_json(pl_outcome_result(o), want4);
    cr_expect_eq(o->calls_executed, 0, "no callee runs again: %llu",
                 (unsigned long long)o->calls_executed);
    cr_expect_eq(o->calls_served, 4, "served %llu",
                 (unsigned long long)o->calls_served);
    cr_expect_eq(o->steps_appended, 0);
    pl_outcome_free(o);
    cr_expect_eq(atomic_load(&sleeper_runs), before, "no callee ran again");
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "fan-2", &ro), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "fan-2"), PL_OK, "%s", pl_errmsg());
    free(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, a_fanout_inside_a_fanout)
{
    use_effects();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_GROUP);
    int ms[3] = {10, 0, 5};
    char *inner = sleepers_payload(ms, 3);
    char outer[1024];
    snprintf(outer, sizeof outer,
             "{\"calls\": [{\"policy\": \"fan\", \"payload\": %s}, "
             "{\"policy\": \"ask\"}, {\"policy\": \"fan\", "
             "\"payload\": %s}]}",
             inner, inner);
    pl_outcome *o = t_start(e, "fan", outer, "nested");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(o->suspended_path, "0.1");
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);
    cJSON *ans = t_json("{\"ok\": 1}");
    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "nested", token, ans), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ans);
    free(token);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const char
        *want_inner = "{\"results\": [{\"id\": 0}, {\"id\": 1}, {\"id\": 2}]}";
    const cJSON *rs = cJSON_GetObjectItem(pl_outcome_result(o), "results");
    expect_json(cJSON_GetArrayItem(rs, 0), want_inner);
    expect_json(cJSON_GetArrayItem(rs, 1), "{\"ok\": 1}");
    expect_json(cJSON_GetArrayItem(rs, 2), want_inner);
    pl_outcome_free(o);
    pl_steps *l = ledger(e, "nested", "0.2");
    cr_expect_eq(pl_steps_count(l), 7, "the inner fan-out's ledger");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "nested"), PL_OK, "%s", pl_errmsg());
    /* six sleeper calls in all; those of the third call ran before the
     * suspension and were served after it, never run again */
    int counts[3];
    count_effects(counts, 3);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(counts[i], 2, "sleeper %d: %d", i, counts[i]);
    free(inner);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, decorators_apply_per_call)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "fan",
                            "{\"calls\": [{\"policy\": \"flaky\", \"retry\": "
                            "true}, {\"policy\": \"echo\", \"payload\": "
                            "{\"x\": 1}}]}",
                            "fan-3");
    expect_json(pl_outcome_result(o),
                "{\"results\": [{\"ok\": true}, {\"x\": 1}]}");
    cr_expect_eq(atomic_load(&flaky_runs), 2, "retried once");
    pl_outcome_free(o);
    /* the retry's attempts are in the flaky call's ledger only */
    pl_steps *l = ledger(e, "fan-3", "0.0");
    cr_expect_gt(pl_steps_count(l), 2, "attempts recorded: %zu",
                 pl_steps_count(l));
    pl_steps_free(l);
    l = ledger(e, "fan-3", "0.1");
    cr_expect_leq(pl_steps_count(l), 1, "echo: %zu steps", pl_steps_count(l));
    pl_steps_free(l);
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "fan-3", NULL), PL_OK);
    cr_expect_eq(atomic_load(&flaky_runs), 2, "a replay never retries");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "fan-3"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, an_error_result_is_that_calls_result)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "fan",
                            "{\"calls\": [{\"policy\": \"oops\"}, {\"policy\":"
                            " \"nosuch\"}, {\"policy\": \"echo\", "
                            "\"payload\": {\"y\": 2}}]}",
                            "fan-4");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                       "results");
    cr_assert_eq(cJSON_GetArraySize(rs), 3);
    const cJSON *r0 = cJSON_GetArrayItem(rs, 0),
                *r1 = cJSON_GetArrayItem(rs, 1);
    cr_expect_str_eq(cJSON_GetObjectItem(r0, "code")->valuestring, "ToolBug");
    cr_expect_str_eq(cJSON_GetObjectItem(r1, "code")->valuestring, "NotFound");
    cr_expect(strstr(cJSON_GetObjectItem(r1, "message")->valuestring,
                     "nosuch"));
    expect_json(cJSON_GetArrayItem(rs, 2), "{\"y\": 2}");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "fan-4"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void expect_bad(pl_engine *e, const char *which, int want,
                       const char *msg)
{
    char p[64], id[64];
    snprintf(p, sizeof p, "{\"case\": \"%s\"}", which);
    snprintf(id, sizeof id, "bad-%s", which);
    pl_outcome *o;
    cr_assert_eq(start_as(&o, e, "badargs", p, id), PL_OK, "%s", pl_errmsg());
    if (want == PL_OK) {
        cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s: %s", which,
                     o->reason ? o->reason : "");
    } else {
        cr_expect_eq(o->status, PL_RUN_FAILED, "%s", which);
        cr_expect_eq(o->error, want, "%s: %s", which, pl_status_name(o->error));
        cr_expect(o->reason && strstr(o->reason, msg), "%s: %s", which,
                  o->reason ? o->reason : "(none)");
    }
    pl_outcome_free(o);
}

Test(fanout, bad_arguments_are_clear_errors)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    expect_bad(e, "zero", PL_OK, NULL);
    expect_bad(e, "null_policy", PL_EINVAL, "no valid policy name");
    expect_bad(e, "no_init", PL_EINVAL, "PL_CALL_SPEC_INIT");
    expect_bad(e, "null_action", PL_EINVAL, "no action");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, a_suspended_callee_suspends_the_fanout)
{
    use_effects();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "fan",
                            "{\"calls\": [{\"policy\": \"sleeper\", "
                            "\"payload\": {\"id\": 0, \"ms\": 5}}, "
                            "{\"policy\": \"ask\"}, {\"policy\": \"later\"}]}",
                            "fan-5");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(o->suspended_path, "0.1");
    expect_json(o->prompt, "{\"question\": \"go?\"}");
    cr_expect_eq(atomic_load(&later_runs), 1, "the others finished first");
    /* the calls, and the result before the suspended call's */
    pl_steps *l = ledger(e, "fan-5", "0");
    cr_expect_eq(pl_steps_count(l), 4);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 3)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);
    cJSON *ans = t_json("{\"yes\": true}");
    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "fan-5", token, ans), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ans);
    free(token);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    expect_json(pl_outcome_result(o),
                "{\"results\": [{\"id\": 0}, {\"yes\": true}, "
                "{\"done\": true}]}");
    pl_outcome_free(o);
    cr_expect_eq(atomic_load(&sleeper_runs), 1, "the served call never ran");
    cr_expect_eq(atomic_load(&later_runs), 1, "its effect happened once");
    cr_expect_eq(pl_run_verify(e, "fan-5"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, a_failing_callee_fails_the_run_after_the_others_stop)
{
    use_effects();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o;
    cr_assert_eq(start_as(&o, e, "fan",
                          "{\"calls\": [{\"policy\": \"fail\"}, {\"policy\": "
                          "\"sleeper\", \"payload\": {\"id\": 1, \"ms\": "
                          "30}}]}",
                          "fan-fail"),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY, "%s", pl_status_name(o->error));
    cr_expect(o->reason && strstr(o->reason, "fail"), "%s",
              o->reason ? o->reason : "(none)");
    /* the other callee had finished before the call returned */
    int counts[2];
    count_effects(counts, 2);
    cr_expect_eq(counts[1], 1);
    cr_expect_eq(atomic_load(&sleeper_runs), 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Start the fan-out in a child that dies inside the charge call. */
static void crash_in_charge(const char *store, const pl_registry *reg,
                            const char *p, const char *id)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        g_die_in_charge = true;
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, NULL))
            _exit(1);
        pl_outcome *o;
        start_as(&o, e, "fan", p, id);
        _exit(2);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

Test(fanout, in_doubt_rules_apply_to_each_call)
{
    use_effects();
    pl_registry *reg = registry();
    const char *store = t_store_path();
    /* InDoubt error: the call in flight fails, the others go on */
    crash_in_charge(store, reg,
                    "{\"calls\": [{\"policy\": \"sleeper\", \"payload\": "
                    "{\"id\": 0, \"ms\": 0}}, {\"policy\": \"charge_fail\","
                    " \"payload\": {\"amount\": 5}}]}",
                    "doubt-fail");
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "doubt-fail", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const cJSON *rs = cJSON_GetObjectItem(pl_outcome_result(o), "results");
    expect_json(cJSON_GetArrayItem(rs, 0), "{\"id\": 0}");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rs, 1), "code")
                         ->valuestring,
                     "InDoubt");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "doubt-fail"), PL_OK, "%s", pl_errmsg());
    int counts[10];
    count_effects(counts, 10);
    cr_expect_eq(counts[9], 1, "the in-doubt charge never ran again");

    /* suspend to ask: the operator gives the result */
    pl_engine_close(e);
    crash_in_charge(store, reg,
                    "{\"calls\": [{\"policy\": \"charge_ask\", \"payload\":"
                    " {\"amount\": 7}}, {\"policy\": \"later\"}]}",
                    "doubt-ask");
    e = t_engine(store, reg, PL_DURABILITY_SYNC);
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "doubt-ask", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason ? o->reason : "");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(o->prompt, "in_doubt")));
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);
    cJSON *ans = t_json(
        "{\"decision\": \"result\", \"result\": {\"paid\": 7}}");
    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "doubt-ask", token, ans), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ans);
    free(token);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    expect_json(pl_outcome_result(o),
                "{\"results\": [{\"paid\": 7}, {\"done\": true}]}");
    pl_outcome_free(o);
    cr_expect_leq(atomic_load(&later_runs), 1, "its effect is recorded once");
    cr_expect_eq(pl_run_verify(e, "doubt-ask"), PL_OK, "%s", pl_errmsg());
    count_effects(counts, 10);
    cr_expect_eq(counts[9], 2, "each charge ran once, in its crashed run");
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct pool_job {
    const char *payload;
    char id[32];
    pl_outcome *o;
    int st;
} pool_job;

static void pool_task(pl_engine *e, void *user)
{
    pool_job *j = user;
    j->st = start_as(&j->o, e, "fan", j->payload, j->id);
}

static void fan_on_pool(pl_durability d)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, d);
    int ms[4] = {20, 0, 10, 5};
    char *p = sleepers_payload(ms, 4);
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 2;
    pl_pool *pool = NULL;
    cr_assert_eq(pl_pool_new(&pool, e, &po), PL_OK, "%s", pl_errmsg());
    pool_job jobs[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (pool_job){.payload = p};
        snprintf(jobs[i].id, sizeof jobs[i].id, "pool-%d", i);
        cr_assert_eq(pl_pool_submit(pool, pool_task, &jobs[i]), PL_OK);
    }
    cr_assert_eq(pl_pool_wait(pool), PL_OK);
    pl_pool_free(pool);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(jobs[i].st, PL_OK, "%s", pl_status_name(jobs[i].st));
        cr_expect_eq(jobs[i].o->status, PL_RUN_COMPLETED, "%s",
                     jobs[i].o->reason ? jobs[i].o->reason : "");
        expect_json(pl_outcome_result(jobs[i].o), want4);
        pl_outcome_free(jobs[i].o);
        expect_fan_ledger(e, jobs[i].id, 4, "sleeper");
        cr_expect_eq(pl_run_verify(e, jobs[i].id), PL_OK, "%s", pl_errmsg());
    }
    free(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, on_a_pool_in_group_mode) { fan_on_pool(PL_DURABILITY_GROUP); }
Test(fanout, on_a_pool_in_process_mode) { fan_on_pool(PL_DURABILITY_PROCESS); }

Test(fanout, in_sync_mode)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    int ms[4] = {10, 0, 5, 1};
    char *p = sleepers_payload(ms, 4);
    pl_outcome *o = t_start(e, "fan", p, "fan-sync");
    expect_json(pl_outcome_result(o), want4);
    pl_outcome_free(o);
    expect_fan_ledger(e, "fan-sync", 4, "sleeper");
    cr_expect_eq(pl_run_verify(e, "fan-sync"), PL_OK, "%s", pl_errmsg());
    free(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the crash matrix -------------------------------------------------------- */

static atomic_long boundaries;
static long kill_at;

static void on_boundary(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    long k = atomic_fetch_add(&boundaries, 1) + 1;
    if (kill_at > 0 && k == kill_at)
        raise(SIGKILL);
}

static pl_engine *crash_engine(const char *store, const pl_registry *reg)
{
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = on_boundary;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, store, reg, &eo);
    if (st)
        return NULL;
    return e;
}

/* Start the fan-out, counting boundaries; SIGKILL at @p at (0: never). */
static int run_fan(const char *store, const pl_registry *reg, const char *p,
                   long at)
{
    kill_at = at;
    atomic_store(&boundaries, 0);
    pl_engine *e = crash_engine(store, reg);
    if (!e)
        return 1;
    pl_outcome *o;
    int st = start_as(&o, e, "fan", p, "crash");
    int rc = st || o->status != PL_RUN_COMPLETED ? 2 : 0;
    pl_outcome_free(o);
    pl_engine_close(e);
    return rc;
}

/* Every step of the run's ledgers, as text, for comparison. */
static char *ledgers_text(pl_engine *e)
{
    static const char *const paths[] = {"0", "0.0", "0.1", "0.2", "0.3"};
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        pl_steps *l = ledger(e, "crash", paths[i]);
        for (size_t j = 0; j < pl_steps_count(l); j++) {
            const pl_step *s = pl_steps_at(l, j);
            char *t = t_text(pl_step_payload(s));
            int n = snprintf(out + len, cap - len, "%s %s %s %s\n",
                             pl_step_id(s),
                             pl_step_type_name(pl_step_type_of(s)),
                             pl_step_actor(s), t);
            free(t);
            cr_assert(n > 0 && (size_t)n < cap - len);
            len += (size_t)n;
        }
        pl_steps_free(l);
    }
    return out;
}

Test(fanout, crash_matrix_at_every_boundary, .timeout = 300)
{
    pl_registry *reg = registry();
    int ms[4] = {30, 0, 20, 10};
    char *p = sleepers_payload(ms, 4);
    /* the reference: uncrashed */
    const char *ref_store = t_store_path();
    use_effects();
    cr_assert_eq(run_fan(ref_store, reg, p, 0), 0, "%s", pl_errmsg());
    long K = atomic_load(&boundaries);
    cr_assert_gt(K, 10, "boundaries: %ld", K);
    pl_engine *e = t_engine(ref_store, reg, PL_DURABILITY_PROCESS);
    char *want = ledgers_text(e);
    pl_engine_close(e);

    cr_log_info("fan-out crash matrix: %ld boundaries", K);
    int partial = 0, repeated = 0;
    for (long k = 1; k <= K; k++) {
        const char *store = t_store_path();
        use_effects();
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0)
            _exit(run_fan(store, reg, p, k));
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "boundary %ld: the child should die of SIGKILL (status "
                  "%d)",
                  k, status);
        /* what the crash left: the results durable in the root's ledger */
        e = t_engine(store, reg, PL_DURABILITY_PROCESS);
        int durable[4] = {0};
        pl_steps *l = NULL;
        if (pl_run_ledger(&l, e, "crash", "0") == PL_OK) {
            for (size_t j = 0; j < pl_steps_count(l); j++) {
                const pl_step *s = pl_steps_at(l, j);
                int id = get_int(pl_step_payload(s), "id", -1);
                if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT && id >= 0 &&
                    id < 4)
                    durable[id] = 1;
            }
            pl_steps_free(l);
        }
        int before[4];
        count_effects(before, 4);
        partial += durable[0] && !durable[3];
        for (int i = 0; i < 4; i++)
            cr_expect(!durable[i] || before[i] == 1,
                      "boundary %ld: call %d is durable, its effect is "
                      "there once (%d)",
                      k, i, before[i]);
        pl_run_info *info = NULL;
        bool started = pl_run_get(&info, e, "crash") == PL_OK;
        pl_run_info_free(info);
        pl_outcome *o = NULL;
        if (started) {
            cr_expect_eq(pl_run_verify(e, "crash"), PL_OK,
                         "boundary %ld: the crashed run verifies: %s", k,
                         pl_errmsg());
            cr_assert_eq(pl_run_continue(&o, e, "crash", NULL), PL_OK,
                         "boundary %ld: %s", k, pl_errmsg());
        } else { /* killed before the run's record was written */
            cr_assert_eq(start_as(&o, e, "fan", p, "crash"), PL_OK, "%s",
                         pl_errmsg());
        }
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "boundary %ld: %s", k,
                     o->reason ? o->reason : "");
        expect_json(pl_outcome_result(o), want4);
        pl_outcome_free(o);
        cr_expect_eq(pl_run_verify(e, "crash"), PL_OK,
                     "boundary %ld: the recovered run verifies: %s", k,
                     pl_errmsg());
        char *got = ledgers_text(e);
        cr_expect_str_eq(got, want, "boundary %ld: the ledgers differ", k);
        free(got);
        int after[4];
        count_effects(after, 4);
        for (int i = 0; i < 4; i++) {
            if (durable[i])
                cr_expect_eq(after[i], 1,
                             "boundary %ld: call %d was durable; its effect "
                             "happened %d times",
                             k, i, after[i]);
            repeated += after[i] == 2;
            if (!durable[i])
                cr_expect(after[i] >= 1 && after[i] <= before[i] + 1 &&
                              after[i] <= 2,
                          "boundary %ld: call %d in flight: effect %d "
                          "times (%d before recovery)",
                          k, i, after[i], before[i]);
        }
        pl_engine_close(e);
    }
    /* the matrix saw crashes between the results, and calls in flight */
    cr_expect_gt(partial, 0, "no crash fell between two results");
    cr_expect_gt(repeated, 0, "no crash fell inside a call");
    free(want);
    free(p);
    pl_registry_free(reg);
}
