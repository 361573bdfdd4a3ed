/*
 * test_suspend.c -- suspend and resume (docs/design.md §12; pl_ctx_suspend
 * in core/replay/suspend.c, pl_run_resume in core/replay/runner.c).
 *
 * A root policy calls tools and a "human" policy that suspends with a prompt.
 * Covers: the suspended outcome and run record, continue/resume state and
 * token errors, resuming with an answer (and not executing the tools before
 * the suspension again), two suspensions in one run, a non-object answer,
 * where the suspend and resume steps sit in the ledger, check mode on a
 * suspended run, verification of the final run, and a resume past the
 * run's deadline.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static pl_engine *open_engine(const pl_registry *reg)
{
    return t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
}

static pl_run_info *get_info(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    cr_assert_eq(st, PL_OK, "pl_run_get(%s): %s", id, pl_errmsg());
    return info;
}

static pl_outcome *resume_ok(pl_engine *e, const char *id, const char *token,
                             const char *answer_json)
{
    cJSON *ans = t_json(answer_json ? answer_json : "{}");
    pl_outcome *o = NULL;
    int st = pl_run_resume(&o, e, id, token, ans);
    cJSON_Delete(ans);
    cr_assert_eq(st, PL_OK, "pl_run_resume(%s): %s: %s", id, pl_status_name(st),
                 pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

static int resume_status(pl_engine *e, const char *id, const char *token,
                         const char *answer_json)
{
    cJSON *ans = t_json(answer_json ? answer_json : "{}");
    pl_outcome *o = NULL;
    int st = pl_run_resume(&o, e, id, token, ans);
    cJSON_Delete(ans);
    cr_expect_null(o, "a refused resume gives no outcome");
    pl_outcome_free(o);
    return st;
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

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

static int call_json(pl_ctx *ctx, const char *policy, const char *json,
                     pl_step **res)
{
    cJSON *p = cJSON_Parse(json ? json : "{}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    int st = pl_ctx_call(res, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    return st == PL_ERESULT ? PL_OK : st; /* an error result is data */
}

/* ------------------------------------------------------------------------ */
/* Test policies                                                            */
/* ------------------------------------------------------------------------ */

/* human: suspends with its payload as the prompt; returns {"answer": ...}. */
static int g_human_runs;
static char g_answers[8][256];
static int g_nanswers;

static int human(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    g_human_runs++;
    cJSON *ans = NULL;
    int st = pl_ctx_suspend(&ans, ctx, a->payload);
    if (st)
        return st;
    char *txt = cJSON_PrintUnformatted(ans);
    snprintf(g_answers[g_nanswers & 7], sizeof g_answers[0], "%s",
             txt ? txt : "");
    g_nanswers++;
    free(txt);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "answer", ans);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* approve: echo, then ask a human, then add; returns all three results. */
static int approve(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_step *r1 = NULL, *r2 = NULL, *r3 = NULL;
    int st = call_json(ctx, "echo", "{\"order\": 1}", &r1);
    if (!st)
        st = call_json(ctx, "human", "{\"question\": \"ship order 1?\"}", &r2);
    if (!st)
        st = call_json(ctx, "add", "{\"a\": 1, \"b\": 2}", &r3);
    if (!st) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToObject(r, "echo",
                              cJSON_Duplicate(pl_step_payload(r1), 1));
        cJSON_AddItemToObject(r, "human",
                              cJSON_Duplicate(pl_step_payload(r2), 1));
        cJSON_AddItemToObject(r, "add",
                              cJSON_Duplicate(pl_step_payload(r3), 1));
        st = pl_steps_add_result(out, r);
        cJSON_Delete(r);
    }
    pl_step_free(r1);
    pl_step_free(r2);
    pl_step_free(r3);
    return st;
}

/* twice: echo, then two questions; returns both answers. */
static int twice(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_step *r1 = NULL, *r2 = NULL;
    int st = call_json(ctx, "echo", "{\"step\": 0}", NULL);
    if (!st)
        st = call_json(ctx, "human", "{\"q\": \"first\"}", &r1);
    if (!st)
        st = call_json(ctx, "human", "{\"q\": \"second\"}", &r2);
    if (!st) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToObject(r, "first",
                              cJSON_Duplicate(pl_step_payload(r1), 1));
        cJSON_AddItemToObject(r, "second",
                              cJSON_Duplicate(pl_step_payload(r2), 1));
        st = pl_steps_add_result(out, r);
        cJSON_Delete(r);
    }
    pl_step_free(r1);
    pl_step_free(r2);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"human", human}, {"approve", approve}, {"twice", twice}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* Start "approve" as run @p id; it suspends at 0.2. */
static pl_outcome *start_approve(pl_engine *e, const char *id)
{
    pl_outcome *o = t_start(e, "approve", NULL, id);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "status %s: %s",
                 pl_run_status_name(o->status), o->reason ? o->reason : "");
    return o;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

Test(suspend, start_suspends_with_token_prompt_and_path)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-1");
    cr_assert_not_null(o->resume_token);
    cr_expect_eq(strlen(o->resume_token), 32, "token: %s", o->resume_token);
    expect_json(o->prompt, "{\"question\": \"ship order 1?\"}");
    cr_assert_not_null(o->suspended_path);
    cr_expect_str_eq(o->suspended_path, "0.2");
    cr_expect_str_eq(o->run_id, "s-1");
    cr_expect_eq(o->error, 0);
    cr_expect_null(o->reason);
    cr_expect_eq(t_calls.echo, 1);
    cr_expect_eq(t_calls.add, 0, "nothing after the suspension ran");
    cr_expect_eq(g_human_runs, 1);

    pl_run_info *info = get_info(e, "s-1");
    cr_expect_eq(info->status, PL_RUN_SUSPENDED);
    expect_json(info->prompt, "{\"question\": \"ship order 1?\"}");
    cr_assert_not_null(info->suspended_path);
    cr_expect_str_eq(info->suspended_path, "0.2");
    cr_expect_null(info->reason);
    cr_expect_eq(pl_run_verify(e, "s-1"), PL_OK, "%s", pl_errmsg());

    /* two suspended runs get different tokens */
    pl_outcome *o2 = start_approve(e, "s-2");
    cr_expect_str_neq(o2->resume_token, o->resume_token);
    pl_run_info_free(info);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, continue_of_a_suspended_run_is_estate)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-cont");
    pl_outcome *o2 = NULL;
    int st = pl_run_continue(&o2, e, "s-cont", NULL);
    cr_expect_eq(st, PL_ESTATE, "%s", pl_status_name(st));
    cr_expect_null(o2);
    expect_has(pl_errmsg(), "s-cont");
    expect_has(pl_errmsg(), "suspended");
    cr_expect_eq(status_of(e, "s-cont"), PL_RUN_SUSPENDED);
    cr_expect_eq(g_human_runs, 1, "nothing ran");
    cr_expect_eq(t_calls.echo, 1);

    /* the run still resumes with its token */
    pl_outcome *o3 = resume_ok(e, "s-cont", o->resume_token, "{\"ok\": 1}");
    cr_expect_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    pl_outcome_free(o);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, wrong_token_is_etoken_and_the_run_stays_suspended)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-tok");
    pl_run_info *before = get_info(e, "s-tok");

    int st = resume_status(e, "s-tok", "0123456789abcdef0123456789abcdef",
                           "{\"approved\": true}");
    cr_expect_eq(st, PL_ETOKEN, "%s", pl_status_name(st));
    expect_has(pl_errmsg(), "token");
    expect_has(pl_errmsg(), "s-tok");
    st = resume_status(e, "s-tok", "", "{\"approved\": true}");
    cr_expect_eq(st, PL_ETOKEN, "an empty token: %s", pl_status_name(st));

    pl_run_info *after = get_info(e, "s-tok");
    cr_expect_eq(after->status, PL_RUN_SUSPENDED);
    cr_expect_eq(after->steps, before->steps, "no answer was written");
    cr_expect_eq(after->attempts, before->attempts);
    expect_json(after->prompt, "{\"question\": \"ship order 1?\"}");
    cr_expect_eq(g_human_runs, 1);
    cr_expect_eq(g_nanswers, 0);
    cr_expect_eq(pl_run_verify(e, "s-tok"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, resume_completes_without_re_executing_earlier_tools)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-res");
    cr_assert_eq(t_calls.echo, 1);

    pl_outcome *o2 = resume_ok(e, "s-res", o->resume_token,
                               "{\"approved\": true, \"by\": \"alice\"}");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_null(o2->resume_token);
    cr_expect_null(o2->suspended_path);
    cr_expect_null(o2->prompt);
    /* the policy received the answer */
    cr_assert_eq(g_nanswers, 1);
    cr_expect_str_eq(g_answers[0], "{\"approved\":true,\"by\":\"alice\"}");
    expect_json(pl_outcome_result(o2),
                "{\"echo\": {\"order\": 1}, "
                "\"human\": {\"answer\": {\"approved\": true, "
                "\"by\": \"alice\"}}, \"add\": {\"sum\": 3}}");
    /* the tool before the suspension was served, not executed */
    cr_expect_eq(t_calls.echo, 1);
    cr_expect_eq(t_calls.add, 1);
    cr_expect_eq(o2->calls_served, 1, "echo");
    cr_expect_eq(o2->calls_executed, 2, "human (replayed to its answer), add");

    pl_run_info *info = get_info(e, "s-res");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_null(info->prompt);
    cr_expect_null(info->suspended_path);
    cr_expect_eq(info->attempts, 2);
    pl_run_info_free(info);

    /* replaying the completed run executes nothing at all */
    pl_outcome *o3 = NULL;
    cr_assert_eq(pl_run_continue(&o3, e, "s-res", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o3->status, PL_RUN_COMPLETED);
    cr_expect_eq(o3->calls_served, 3);
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(g_human_runs, 2, "human is served on this replay");
    char *a = t_text(pl_outcome_result(o2)), *b = t_text(pl_outcome_result(o3));
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, resuming_a_run_that_is_not_suspended_is_estate)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-done");
    char token[64];
    snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome *o2 = resume_ok(e, "s-done", token, "{\"approved\": false}");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED);
    pl_steps *before = NULL;
    cr_assert_eq(pl_run_ledger(&before, e, "s-done", "0.2"), PL_OK);

    /* the same token again: the run is completed now */
    int st = resume_status(e, "s-done", token, "{\"approved\": true}");
    cr_expect_eq(st, PL_ESTATE, "%s", pl_status_name(st));
    expect_has(pl_errmsg(), "s-done");
    expect_has(pl_errmsg(), "completed");
    /* any token */
    st = resume_status(e, "s-done", "whatever", "{}");
    cr_expect_eq(st, PL_ESTATE, "%s", pl_status_name(st));
    cr_expect_eq(status_of(e, "s-done"), PL_RUN_COMPLETED);
    cr_expect_eq(g_nanswers, 1, "the second answer was never delivered");
    pl_steps *after = NULL;
    cr_assert_eq(pl_run_ledger(&after, e, "s-done", "0.2"), PL_OK);
    cr_expect_eq(pl_steps_count(after), pl_steps_count(before));

    /* a completed run that never suspended */
    pl_outcome *o3 = t_start(e, "chain", NULL, "s-never");
    st = resume_status(e, "s-never", "x", "{}");
    cr_expect_eq(st, PL_ESTATE, "%s", pl_status_name(st));
    /* a run that does not exist */
    st = resume_status(e, "s-missing", token, "{}");
    cr_expect_eq(st, PL_ENOTFOUND, "%s", pl_status_name(st));
    pl_steps_free(before);
    pl_steps_free(after);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, two_suspensions_in_one_run)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o1 = t_start(e, "twice", NULL, "s-two");
    cr_assert_eq(o1->status, PL_RUN_SUSPENDED, "%s", o1->reason);
    cr_expect_str_eq(o1->suspended_path, "0.2");
    expect_json(o1->prompt, "{\"q\": \"first\"}");

    pl_outcome *o2 = resume_ok(e, "s-two", o1->resume_token, "{\"n\": 1}");
    cr_assert_eq(o2->status, PL_RUN_SUSPENDED, "%s", o2->reason);
    cr_expect_str_eq(o2->suspended_path, "0.4");
    expect_json(o2->prompt, "{\"q\": \"second\"}");
    cr_assert_not_null(o2->resume_token);
    cr_expect_str_neq(o2->resume_token, o1->resume_token, "a new token");
    pl_run_info *info = get_info(e, "s-two");
    cr_expect_eq(info->status, PL_RUN_SUSPENDED);
    cr_expect_str_eq(info->suspended_path, "0.4");
    expect_json(info->prompt, "{\"q\": \"second\"}");
    pl_run_info_free(info);

    /* the first token no longer works */
    int st = resume_status(e, "s-two", o1->resume_token, "{\"n\": 99}");
    cr_expect_eq(st, PL_ETOKEN, "%s", pl_status_name(st));
    cr_expect_eq(status_of(e, "s-two"), PL_RUN_SUSPENDED);

    pl_outcome *o3 = resume_ok(e, "s-two", o2->resume_token, "{\"n\": 2}");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    expect_json(pl_outcome_result(o3), "{\"first\": {\"answer\": {\"n\": 1}}, "
                                       "\"second\": {\"answer\": {\"n\": 2}}}");
    cr_expect_eq(t_calls.echo, 1, "echo ran once over three executions");
    cr_expect_eq(o3->calls_served, 2, "echo and the first human call");
    cr_expect_eq(pl_run_verify(e, "s-two"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Time and events: "A suspended or submitted run, whose policies are not
 * running, ends cancelled at once", with the reason; nothing of it runs
 * again, and the answer it waited for is refused. */
Test(suspend, a_suspended_run_is_cancelled_at_once)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-cancel");
    cr_assert_eq(pl_run_cancel(e, "s-cancel", "no longer wanted"), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info *info = get_info(e, "s-cancel");
    cr_expect_eq(info->status, PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(info->status));
    cr_assert_not_null(info->reason);
    expect_has(info->reason, "no longer wanted");
    pl_run_info_free(info);
    int st = resume_status(e, "s-cancel", o->resume_token, "{\"ok\": true}");
    cr_expect_eq(st, PL_ESTATE, "%s", pl_status_name(st));
    cr_expect_eq(pl_run_cancel(e, "s-cancel", "again"), PL_ESTATE);
    cr_expect_eq(g_human_runs, 1, "the human policy never ran again");
    cr_expect_eq(g_nanswers, 0, "no answer was delivered");
    cr_expect_eq(t_calls.add, 0, "nothing after the suspension ran");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, non_object_answer_is_ejson)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-json");
    const char *bad[] = {"[1, 2]", "\"yes\"", "42", "true", "null"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *ans = cJSON_Parse(bad[i]);
        cr_assert_not_null(ans, "%s", bad[i]);
        pl_outcome *out = NULL;
        int st = pl_run_resume(&out, e, "s-json", o->resume_token, ans);
        cJSON_Delete(ans);
        cr_expect_eq(st, PL_EJSON, "answer %s: %s", bad[i], pl_status_name(st));
        cr_expect_null(out);
        expect_has(pl_errmsg(), "object");
    }
    cr_expect_eq(status_of(e, "s-json"), PL_RUN_SUSPENDED);
    cr_expect_eq(g_nanswers, 0);

    /* a proper answer still works afterwards */
    pl_outcome *o2 = resume_ok(e, "s-json", o->resume_token, "{\"ok\": true}");
    cr_expect_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void expect_step(const pl_steps *l, size_t i, pl_step_type type,
                        const char *actor, const char *id)
{
    const pl_step *s = pl_steps_at(l, i);
    cr_assert_not_null(s, "step %zu missing", i);
    cr_expect_eq(pl_step_type_of(s), type, "step %s: type %s, want %s", id,
                 pl_step_type_name(pl_step_type_of(s)),
                 pl_step_type_name(type));
    cr_expect_str_eq(pl_step_actor(s), actor, "step %s", id);
    cr_expect_str_eq(pl_step_id(s), id);
}

Test(suspend, ledger_holds_suspend_then_resume_in_the_suspended_invocation)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-led");

    /* while suspended: the suspend step ends the suspended invocation */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "s-led", "0.2"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 1);
    expect_step(l, 0, PL_STEP_SUSPEND, "human", "0.2:0");
    const cJSON *p = pl_step_payload(pl_steps_at(l, 0));
    expect_json(cJSON_GetObjectItemCaseSensitive(p, "prompt"),
                "{\"question\": \"ship order 1?\"}");
    pl_steps_free(l);
    cr_assert_eq(pl_run_ledger(&l, e, "s-led", "0"), PL_OK);
    cr_expect_eq(pl_steps_count(l), 3, "echo call, echo result, human call");
    expect_step(l, 2, PL_STEP_ACTION_CALL, "approve", "0:2");
    pl_steps_free(l);

    pl_outcome *o2 = resume_ok(e, "s-led", o->resume_token,
                               "{\"approved\": true}");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);

    /* the answer follows the suspend step, then the human's result */
    cr_assert_eq(pl_run_ledger(&l, e, "s-led", "0.2"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 3);
    expect_step(l, 0, PL_STEP_SUSPEND, "human", "0.2:0");
    expect_step(l, 1, PL_STEP_RESUME, "human", "0.2:1");
    expect_step(l, 2, PL_STEP_ACTION_RESULT, "human", "0.2:2");
    p = pl_step_payload(pl_steps_at(l, 1));
    expect_json(cJSON_GetObjectItemCaseSensitive(p, "answer"),
                "{\"approved\": true}");
    pl_steps_free(l);

    cr_assert_eq(pl_run_ledger(&l, e, "s-led", "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 7);
    expect_step(l, 0, PL_STEP_ACTION_CALL, "approve", "0:0");
    expect_step(l, 1, PL_STEP_ACTION_RESULT, "echo", "0:1");
    expect_step(l, 2, PL_STEP_ACTION_CALL, "approve", "0:2");
    expect_step(l, 3, PL_STEP_ACTION_RESULT, "human", "0:3");
    expect_step(l, 4, PL_STEP_ACTION_CALL, "approve", "0:4");
    expect_step(l, 5, PL_STEP_ACTION_RESULT, "add", "0:5");
    expect_step(l, 6, PL_STEP_ACTION_RESULT, "approve", "0:6");
    pl_steps_free(l);

    pl_run_info *info = get_info(e, "s-led");
    cr_expect_eq(info->steps, 7 + 3 + 1 + 1, "root, human, echo, add");
    pl_run_info_free(info);
    cr_expect_eq(pl_run_verify(e, "s-led"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, check_mode_on_a_suspended_run_is_echeck)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = start_approve(e, "s-chk");
    pl_run_info *before = get_info(e, "s-chk");
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o2 = NULL;
    int st = pl_run_continue(&o2, e, "s-chk", &ro);
    cr_expect_eq(st, PL_ECHECK, "%s", pl_status_name(st));
    cr_expect_null(o2);
    expect_has(pl_errmsg(), "s-chk");
    pl_run_info *after = get_info(e, "s-chk");
    cr_expect_eq(after->status, PL_RUN_SUSPENDED);
    cr_expect_eq(after->steps, before->steps);
    cr_expect_eq(after->attempts, before->attempts);
    cr_expect_eq(t_calls.echo, 1);
    /* the token still works after the check */
    pl_outcome *o3 = resume_ok(e, "s-chk", o->resume_token, "{}");
    cr_expect_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, suspension_survives_reopening_the_store)
{
    pl_registry *reg = registry();
    char path[4300];
    snprintf(path, sizeof path, "%s", t_store_path());
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "approve", NULL, "s-reopen");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_engine_close(e);

    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome *o2 = resume_ok(e, "s-reopen", o->resume_token,
                               "{\"approved\": true}");
    cr_expect_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(t_calls.echo, 1);
    cr_expect_eq(pl_run_verify(e, "s-reopen"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(suspend, the_root_itself_may_suspend)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(e, "human", "{\"q\": \"root?\"}", "s-root");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason);
    cr_expect_str_eq(o->suspended_path, "0");
    expect_json(o->prompt, "{\"q\": \"root?\"}");
    pl_outcome *o2 = resume_ok(e, "s-root", o->resume_token, "{\"a\": 1}");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    expect_json(pl_outcome_result(o2), "{\"answer\": {\"a\": 1}}");
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "s-root", "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 3);
    expect_step(l, 0, PL_STEP_SUSPEND, "human", "0:0");
    expect_step(l, 1, PL_STEP_RESUME, "human", "0:1");
    expect_step(l, 2, PL_STEP_ACTION_RESULT, "human", "0:2");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "s-root"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the built-in human policy -------------------------------------------- */

static int ship(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "question", "ship order 42?");
    pl_action ask = {PL_ACTION_VERSION, "approve", q, NULL, 0, NULL};
    pl_step *answer = NULL;
    int st = pl_ctx_call(&answer, ctx, &ask, NULL, 0);
    cJSON_Delete(q);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(answer));
    pl_step_free(answer);
    return st;
}

Test(suspend, the_human_policy_asks_and_returns_the_answer)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_EEXIST);
    cr_assert_eq(pl_registry_add_fn(reg, "ship", ship, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);

    pl_outcome *o1 = t_start(e, "ship", NULL, "human-1");
    cr_assert_eq(o1->status, PL_RUN_SUSPENDED);
    char *prompt = t_text(o1->prompt);
    cr_expect_str_eq(prompt, "{\"question\":\"ship order 42?\"}");
    cr_expect_str_eq(o1->suspended_path, "0.0");
    free(prompt);

    cJSON *answer = t_json("{\"approved\": true, \"by\": \"alice\"}");
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_resume(&o2, e, "human-1", o1->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    char *result = t_text(pl_outcome_result(o2));
    cr_expect_str_eq(result, "{\"approved\":true,\"by\":\"alice\"}");
    free(result);
    cr_expect_eq(pl_run_verify(e, "human-1"), PL_OK, "%s", pl_errmsg());

    /* the approval is part of the record: a replay serves it */
    pl_outcome *o3 = NULL;
    cr_assert_eq(pl_run_continue(&o3, e, "human-1", NULL), PL_OK);
    cr_expect_eq(o3->status, PL_RUN_COMPLETED);
    cr_expect_eq(o3->calls_served, 1);
    cJSON_Delete(answer);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* design.md §12.1, deadline: a run fails with PL_EDEADLINE at the first
 * call boundary past it at the end of its ledger, "a replay of recorded
 * steps never fails on it": resumed past its deadline, the run replays
 * its recorded call and its answered suspension, and fails at its next
 * call, which executes nothing. */
Test(suspend, a_replay_past_the_deadline_fails_only_at_the_ledgers_end)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = NULL;
    int64_t deadline = 0;
    /* a deadline the start meets, doubled for a host too slow for it */
    for (int64_t in_ms = 200; !o || o->status != PL_RUN_SUSPENDED; in_ms *= 2) {
        cr_assert_leq(in_ms, 6400, "the start never met its deadline");
        pl_outcome_free(o);
        o = NULL;
        char id[32];
        snprintf(id, sizeof id, "s-dl-%lld", (long long)in_ms);
        pl_action a = {
            PL_ACTION_VERSION, "approve", pl_json_empty(), NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        deadline = wall_ms() + in_ms;
        ro.deadline_ms = deadline;
        cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    }
    int echoes = t_calls.echo, answers = g_nanswers;
    char id[PL_MAX_RUN_ID + 1];
    snprintf(id, sizeof id, "%s", o->run_id);
    while (wall_ms() <= deadline) {
        struct timespec nap = {0, 5000000L};
        nanosleep(&nap, NULL);
    }
    pl_outcome *o2 = resume_ok(e, id, o->resume_token, "{\"ok\": 1}");
    cr_expect_eq(o2->status, PL_RUN_FAILED);
    cr_expect_eq(o2->error, PL_EDEADLINE, "%s", o2->reason);
    cr_expect_eq(t_calls.echo, echoes, "the recorded call is served");
    cr_expect_eq(g_nanswers, answers + 1, "the answered suspension replayed");
    cr_expect_eq(t_calls.add, 0, "the call past the ledger's end fails");
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}
