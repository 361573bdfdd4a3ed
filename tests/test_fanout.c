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
 *
 * The crash matrix is in test_fanout_crash.c.
 */
#include "support.h"
#include "support_fanout.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- policies ---------------------------------------------------------------- */

/* ---- helpers ------------------------------------------------------------------- */

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

/* Resume run @p id, suspended as @p o says (freed), with @p answer_json;
 * the new outcome. */
static pl_outcome *resume_with(pl_engine *e, const char *id, pl_outcome *o,
                               const char *answer_json)
{
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);
    cJSON *ans = t_json(answer_json);
    pl_outcome *next = NULL;
    cr_assert_eq(pl_run_resume(&next, e, id, token, ans), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ans);
    free(token);
    return next;
}

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
    cr_assert_eq(t_try_start(&o, e, "badargs", p, id), PL_OK, "%s",
                 pl_errmsg());
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

/* "gauge": counts the callees running at once, keeping the most seen. */
static atomic_int g_running, g_most;

static int gauge(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    int now = atomic_fetch_add(&g_running, 1) + 1;
    int most = atomic_load(&g_most);
    while (now > most && !atomic_compare_exchange_weak(&g_most, &most, now))
        ;
    struct timespec ts = {0, 200000}; /* 0.2 ms: a chance to overlap */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    atomic_fetch_sub(&g_running, 1);
    return pl_steps_add_result(out, a->payload);
}

/* PL_CALL_ALL_MAX calls of "gauge", {"i": k} each; returns {"n", "ok"}:
 * how many results, and whether each is its own call's, in order. */
static int widest(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    enum { N = PL_CALL_ALL_MAX };
    static pl_action acts[N];
    static pl_call_spec specs[N];
    static pl_step *res[N];
    cJSON *payloads = cJSON_CreateArray();
    for (int i = 0; i < N; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "i", i);
        cJSON_AddItemToArray(payloads, p);
        acts[i] = (pl_action)PL_ACTION_INIT;
        acts[i].policy = "gauge";
        acts[i].payload = p;
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &acts[i];
    }
    int st = pl_ctx_call_all(res, ctx, specs, N);
    cJSON_Delete(payloads);
    if (st)
        return st;
    bool ok = true;
    for (int i = 0; i < N; i++) {
        ok = ok && get_int(pl_step_payload(res[i]), "i", -1) == i;
        pl_step_free(res[i]);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "n", N);
    cJSON_AddBoolToObject(r, "ok", ok);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Fan-out: "makes n calls (1 to PL_CALL_ALL_MAX, 1,024) at once", on
 * "threads the call starts (at most 16; more calls queue on them)", the
 * results in argument order; and the run replays from its ledger. */
Test(fanout, the_most_calls_run_on_at_most_16_threads)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "gauge", gauge, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "widest", widest, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "widest", NULL, "fan-max");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    expect_json(pl_outcome_result(o), "{\"n\": 1024, \"ok\": true}");
    pl_outcome_free(o);
    int most = atomic_load(&g_most);
    cr_expect(most >= 1 && most <= 16, "%d callees ran at once", most);
    pl_steps *l = ledger(e, "fan-max", "0");
    cr_expect_eq(pl_steps_count(l), 2 * PL_CALL_ALL_MAX + 1);
    pl_steps_free(l);
    atomic_store(&g_most, 0);
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "fan-max", NULL), PL_OK, "%s",
                 pl_errmsg());
    expect_json(pl_outcome_result(o), "{\"n\": 1024, \"ok\": true}");
    cr_expect_eq(o->calls_served, PL_CALL_ALL_MAX);
    pl_outcome_free(o);
    cr_expect_eq(atomic_load(&g_most), 0, "a replay runs no callee");
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
    o = resume_with(e, "fan-5", o, "{\"yes\": true}");
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

/* Fan-out: "When several callees suspend, the first in argument order is
 * the run's suspension; the next resume meets the next one." */
Test(fanout, several_suspended_callees_are_met_in_argument_order)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "fan",
                            "{\"calls\": [{\"policy\": \"ask\"}, "
                            "{\"policy\": \"later\"}, "
                            "{\"policy\": \"ask\"}]}",
                            "fan-2s");
    const char *want_path[2] = {"0.0", "0.2"};
    char first[64] = "";
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(o->status, PL_RUN_SUSPENDED, "resume %d: %s", i,
                     o->reason ? o->reason : "");
        cr_expect_str_eq(o->suspended_path, want_path[i], "resume %d", i);
        if (i) {
            /* design.md §12: a replay that reaches a suspension with no
             * answer suspends again with a new token; the old one is spent */
            cr_expect_str_neq(o->resume_token, first);
            cJSON *ans = t_json("{}");
            pl_outcome *no = NULL;
            cr_expect_eq(pl_run_resume(&no, e, "fan-2s", first, ans),
                         PL_ETOKEN);
            cr_expect_null(no);
            cJSON_Delete(ans);
        }
        snprintf(first, sizeof first, "%s", o->resume_token);
        o = resume_with(e, "fan-2s", o,
                        i ? "{\"answer\": 1}" : "{\"answer\": 0}");
    }
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    expect_json(pl_outcome_result(o),
                "{\"results\": [{\"answer\": 0}, {\"done\": true}, "
                "{\"answer\": 1}]}");
    pl_outcome_free(o);
    cr_expect_eq(atomic_load(&later_runs), 1, "its effect happened once");
    cr_expect_eq(pl_run_verify(e, "fan-2s"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fanout, a_failing_callee_fails_the_run_after_the_others_stop)
{
    use_effects();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o;
    cr_assert_eq(
        t_try_start(&o, e, "fan",
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

/* "late_fail": sleeps payload.ms, then fails the run, returning
 * PL_ETIMEDOUT (the reason names it: another failure than "fail"'s). */
static int late_fail(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx, (void)out, (void)u;
    int ms = get_int(a->payload, "ms", 0);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return pl_errorf(PL_ETIMEDOUT, "late_fail: gave up");
}

/* Fan-out: two callees fail the run: the call returns the first failure
 * in argument order, whichever came first, and appends no result. */
Test(fanout, the_first_failure_in_argument_order_fails_the_run)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "late_fail", late_fail, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o;
    cr_assert_eq(t_try_start(&o, e, "fan",
                             "{\"calls\": [{\"policy\": \"late_fail\", "
                             "\"payload\": {\"ms\": 20}}, "
                             "{\"policy\": \"fail\"}]}",
                             "fan-2f"),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY, "%s", pl_status_name(o->error));
    cr_expect(o->reason && strstr(o->reason, "'late_fail' at 0.0 returned "
                                             "PL_ETIMEDOUT"),
              "%s", o->reason ? o->reason : "(none)");
    pl_outcome_free(o);
    pl_steps *l = ledger(e, "fan-2f", "0");
    cr_expect_eq(pl_steps_count(l), 2, "the two calls, no result");
    pl_steps_free(l);
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
        t_try_start(&o, e, "fan", p, id);
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
    j->st = t_try_start(&j->o, e, "fan", j->payload, j->id);
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
