/*
 * test_indoubt.c -- in-doubt calls (docs/design.md §5;
 * pl_policy_def.idempotent and .in_doubt in policyledger.h;
 * core/replay/call.c resolve_call, core/replay/indoubt.c).
 *
 * A non-idempotent tool ("risky") appends a line to an effects file and, on
 * its first execution only (a marker file remembers it across the process
 * restart), SIGKILLs its own process inside its body, after the side
 * effect.  The root calls it once and returns its result unchanged.  A
 * forked child runs the run and dies; the parent recovers it and checks what
 * each rule does:
 *   PL_IN_DOUBT_RERUN    the call executes again (two lines) and completes;
 *   PL_IN_DOUBT_FAIL     it does not execute; its result is an "InDoubt"
 *                        error result, which the root passes through;
 *   PL_IN_DOUBT_SUSPEND  the run suspends with a prompt {"in_doubt": true,
 *                        "call": ..., "policy": ...}; resuming with
 *                        {"decision": "rerun" | "fail" | "result"} decides.
 * Also: a non-idempotent call's action_call is durable before the callee
 * runs, while nothing of an idempotent call is; an idempotent tool killed in
 * its body is simply re-run; and runs that failed or suspended (rather than
 * crashed) with a call open, or that crashed after the call's result was
 * durable, get no in-doubt handling.
 *
 * Runs that did not crash, and calls in doubt again or nested, are in
 * test_indoubt_again.c.
 */
#include "support.h"
#include "support_indoubt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the outside world ------------------------------------------------------ */

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- policies ----------------------------------------------------------------- */

/* ---- running, crashing --------------------------------------------------------- */

/* Crash "risky" under @p rule and recover once. */
static pl_outcome *crash_and_recover(world *w, pl_registry **reg_out,
                                     pl_engine **e_out, bool idempotent,
                                     pl_in_doubt rule, pl_durability mode)
{
    world_init(w);
    pl_registry *reg = doubt_registry(w, idempotent, rule);
    crash_run(w, reg, mode, "{}");
    cr_assert(file_exists(w->marker));
    pl_engine *e = open_after_crash(w, reg, idempotent, "risky");
    pl_outcome *o = continue_ok(e);
    *reg_out = reg;
    *e_out = e;
    return o;
}

/* ---- the rules ------------------------------------------------------------------- */

Test(indoubt, rerun_executes_again)
{
    static const pl_durability modes[] = {
        PL_DURABILITY_SYNC, PL_DURABILITY_GROUP, PL_DURABILITY_PROCESS};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        world w;
        pl_registry *reg;
        pl_engine *e;
        pl_outcome *o = crash_and_recover(&w, &reg, &e, false,
                                          PL_IN_DOUBT_RERUN, modes[m]);
        expect_tool_result(o, "risky");
        cr_assert_eq(o->calls_executed, 1);
        cr_assert_eq(o->calls_served, 0);
        pl_outcome_free(o);
        cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 2,
                     "%s: executed twice, under one key",
                     pl_durability_name(modes[m]));
        cr_assert_eq(count_all_lines(&w), 2);
        /* call, result, the root's result: no suspend, no error */
        cr_assert_eq(ledger_len(e, "0"), 3);
        expect_step(e, "0", 1, PL_STEP_ACTION_RESULT, "risky", NULL);
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

Test(indoubt, fail_gives_in_doubt_error)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *o = crash_and_recover(&w, &reg, &e, false, PL_IN_DOUBT_FAIL,
                                      PL_DURABILITY_SYNC);
    expect_in_doubt_result(o);
    cr_assert_eq(o->calls_executed, 0, "the in-doubt call is not executed");
    pl_outcome_free(o);
    cr_assert_eq(count_all_lines(&w), 1, "no second execution");
    expect_step(e, "0", 0, PL_STEP_ACTION_CALL, "root", NULL);
    expect_step(e, "0", 1, PL_STEP_ACTION_RESULT, "risky", PL_ERR_IN_DOUBT);
    expect_step(e, "0", 2, PL_STEP_ACTION_RESULT, "root", PL_ERR_IN_DOUBT);
    cr_assert_eq(ledger_len(e, "0"), 3);
    cr_assert_eq(ledger_len(e, "0.0"), 0);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());

    /* the decision is recorded: replaying the run serves it */
    o = continue_ok(e);
    expect_in_doubt_result(o);
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->calls_served, 1);
    pl_outcome_free(o);
    cr_assert_eq(count_all_lines(&w), 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Crash under PL_IN_DOUBT_SUSPEND: the run suspends for a human. */
static pl_outcome *suspended_in_doubt(world *w, pl_registry **reg,
                                      pl_engine **e)
{
    pl_outcome *o = crash_and_recover(w, reg, e, false, PL_IN_DOUBT_SUSPEND,
                                      PL_DURABILITY_SYNC);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "status %s: %s",
                 pl_run_status_name(o->status), o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_not_null(o->resume_token);
    cr_assert_str_eq(o->suspended_path, "0");
    cr_assert_not_null(o->prompt);
    char *txt = t_text(o->prompt);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o->prompt,
                                                            "in_doubt")),
              "prompt %s", txt);
    cr_assert_str_eq(str_of(o->prompt, "call"), "0:0", "prompt %s", txt);
    cr_assert_str_eq(str_of(o->prompt, "policy"), "risky", "prompt %s", txt);
    free(txt);
    cr_assert_eq(count_all_lines(w), 1, "suspending executes nothing");
    /* the engine's suspend follows the open call */
    cr_assert_eq(ledger_len(*e, "0"), 2);
    expect_step(*e, "0", 1, PL_STEP_SUSPEND, "engine", NULL);

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, *e, RUN), PL_OK);
    cr_assert_eq(info->status, PL_RUN_SUSPENDED);
    cr_assert_not_null(info->prompt);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(info->prompt,
                                                            "in_doubt")));
    pl_run_info_free(info);

    /* it waits: continuing is refused, a wrong token too */
    pl_outcome *none = NULL;
    cr_assert_eq(pl_run_continue(&none, *e, RUN, NULL), PL_ESTATE);
    cr_assert_null(none);
    cJSON *ans = t_json("{\"decision\": \"rerun\"}");
    cr_assert_eq(pl_run_resume(&none, *e, RUN, "not-the-token", ans),
                 PL_ETOKEN);
    cr_assert_null(none);
    cJSON_Delete(ans);
    cr_assert_eq(count_all_lines(w), 1);
    return o;
}

Test(indoubt, suspend_then_rerun)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    pl_outcome *o = resume_ok(e, s, "{\"decision\": \"rerun\"}");
    expect_tool_result(o, "risky");
    cr_assert_eq(o->calls_executed, 1);
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 2,
                 "the rerun executed it again");
    /* call, engine suspend, human resume, result, root's result */
    cr_assert_eq(ledger_len(e, "0"), 5);
    expect_step(e, "0", 2, PL_STEP_RESUME, "human", NULL);
    expect_step(e, "0", 3, PL_STEP_ACTION_RESULT, "risky", NULL);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(indoubt, suspend_then_fail)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    pl_outcome *o = resume_ok(e, s, "{\"decision\": \"fail\"}");
    expect_in_doubt_result(o);
    cr_assert_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_all_lines(&w), 1, "not executed again");
    expect_step(e, "0", 3, PL_STEP_ACTION_RESULT, "risky", PL_ERR_IN_DOUBT);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(indoubt, suspend_then_result)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    pl_outcome *o = resume_ok(e, s,
                              "{\"decision\": \"result\", \"result\": "
                              "{\"done\": true, \"by\": \"operator\", "
                              "\"ref\": \"ch_123\"}}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, 0);
    char *got = t_text(pl_outcome_result(o));
    cr_assert_str_eq(got, "{\"done\":true,\"by\":\"operator\",\"ref\":"
                          "\"ch_123\"}");
    free(got);
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_all_lines(&w), 1, "not executed again");
    /* the object is the call's recorded result */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, RUN, "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 5);
    const pl_step *r = pl_steps_at(l, 3);
    cr_assert_eq(pl_step_type_of(r), PL_STEP_ACTION_RESULT);
    cr_assert_str_eq(pl_step_actor(r), "risky");
    cr_assert_str_eq(str_of(pl_step_payload(r), "ref"), "ch_123");
    pl_steps_free(l);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* An answer without a valid decision never executes the call. */
Test(indoubt, suspend_bad_decision_does_not_execute)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    cJSON *a = t_json("{\"decision\": \"maybe\"}");
    pl_outcome *o = NULL;
    int st = pl_run_resume(&o, e, RUN, s->resume_token, a);
    cJSON_Delete(a);
    if (st == PL_OK) {
        cr_assert_eq(o->calls_executed, 0);
        if (o->status == PL_RUN_COMPLETED)
            cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                          pl_outcome_result(o), "error")),
                      "an unclear answer must not become a success");
    }
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_all_lines(&w), 1, "not executed again");
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- durability of the call, idempotent tools ------------------------------------- */

Test(indoubt, call_durability_before_the_callee_runs)
{
    /* non-idempotent: open_after_crash checks the durable action_call */
    world w1;
    world_init(&w1);
    pl_registry *reg = doubt_registry(&w1, false, PL_IN_DOUBT_FAIL);
    crash_run(&w1, reg, PL_DURABILITY_SYNC, "{}");
    pl_engine *e = open_after_crash(&w1, reg, false, "risky");
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, RUN), PL_OK);
    cr_assert_geq(info->attempts, 1);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);

    /* idempotent, killed at the same point: nothing of the call */
    world w2;
    world_init(&w2);
    reg = doubt_registry(&w2, true, PL_IN_DOUBT_FAIL);
    crash_run(&w2, reg, PL_DURABILITY_SYNC, "{}");
    e = open_after_crash(&w2, reg, true, "risky");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(indoubt, idempotent_tool_is_rerun_without_in_doubt_handling)
{
    /* its in_doubt rule says suspend, but applies to non-idempotent tools */
    static const pl_in_doubt rules[] = {PL_IN_DOUBT_SUSPEND, PL_IN_DOUBT_FAIL};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        world w;
        pl_registry *reg;
        pl_engine *e;
        pl_outcome *o = crash_and_recover(&w, &reg, &e, true, rules[i],
                                          PL_DURABILITY_SYNC);
        expect_tool_result(o, "risky");
        cr_assert_eq(o->calls_executed, 1);
        pl_outcome_free(o);
        cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 2);
        cr_assert_eq(ledger_len(e, "0"), 3, "call, result, root's result");
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}
