/*
 * test_replay.c -- replay by comparison (docs/design.md §3;
 * core/replay/invocation.c, core/replay/call.c and core/replay/runner.c).
 *
 * Covers: a finished run continued executes nothing and returns the same
 * result; step ids derive from position; a policy that behaves differently on
 * replay fails the run with PL_ENONDET naming the run, invocation, position
 * and both steps, keeps failing until the code is fixed, then completes;
 * code identity changes are reported as events; check mode writes nothing;
 * recorded helpers (now/random/uuid/side_effect) replay their values.  What
 * a policy sees of its ledger, and failures, are in test_replay_ctx.c.
 */
#include "support.h"
#include "support_replay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* tool / callv: for code identity. */
static int g_tool_runs;

static int tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    g_tool_runs++;
    return pl_steps_add_result(out, a->payload);
}

static int callv(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_step *res = NULL;
    int st = call_json(ctx, "tool", "{\"n\": 7}", &res);
    if (st)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

Test(replay, completed_run_continued_executes_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "chain", "{\"n\": 3}", "r1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(o1->calls_executed, 3);
    cr_assert_eq(o1->calls_served, 0);
    cr_assert_eq(t_calls.add, 3);
    cr_assert_eq(t_calls.chain, 1);

    pl_outcome *o2 = cont(e, "r1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(o2->calls_served, 3, "every call is served from the ledger");
    cr_expect_eq(o2->calls_executed, 0, "no callee runs on replay");
    cr_expect_eq(o2->steps_appended, 0, "replay writes no step");
    cr_expect_eq(o2->steps_replayed, 7, "3 calls, 3 results, 1 root result");
    cr_expect_eq(t_calls.add, 3, "add was not executed again");
    /* the root policy is re-executed (replay is re-execution), its callees
     * are not */
    cr_expect_eq(t_calls.chain, 2);

    char *r1 = result_text(o1), *r2 = result_text(o2);
    cr_expect_str_eq(r2, r1, "the same result");
    cr_expect_str_eq(r1, "{\"total\":3}");
    cr_expect_str_eq(pl_step_id(pl_steps_at(o2->steps, 0)),
                     pl_step_id(pl_steps_at(o1->steps, 0)));
    free(r1);
    free(r2);

    /* and a third time, still nothing executes */
    pl_outcome *o3 = cont(e, "r1");
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(o3->calls_served, 3);
    cr_expect_eq(t_calls.add, 3);
    pl_run_info *info = get_info(e, "r1");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_eq(info->steps, 10, "7 root steps + 3 callee results");
    cr_expect_eq(info->attempts, 1,
                 "replaying a completed run writes "
                 "nothing, not even an attempt");
    cr_expect_eq(pl_run_verify(e, "r1"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct id_list {
    size_t n;
    char ids[32][32];
    pl_step_type types[32];
    int64_t times[32];
} id_list;

static void collect_ids(pl_engine *e, const char *run, const char *path,
                        id_list *out)
{
    pl_steps *l = ledger(e, run, path);
    memset(out, 0, sizeof *out);
    out->n = pl_steps_count(l);
    cr_assert_leq(out->n, 32);
    for (size_t i = 0; i < out->n; i++) {
        const pl_step *s = pl_steps_at(l, i);
        snprintf(out->ids[i], sizeof out->ids[i], "%s", pl_step_id(s));
        out->types[i] = pl_step_type_of(s);
        out->times[i] = pl_step_time_us(s);
        cr_expect_eq(pl_step_seq(s), (uint32_t)i);
    }
    pl_steps_free(l);
}

Test(replay, step_ids_derive_from_position)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "chain", "{\"n\": 3}", "ids-a");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);

    id_list root, again;
    collect_ids(e, "ids-a", "0", &root);
    cr_assert_eq(root.n, 7);
    for (size_t i = 0; i < root.n; i++) {
        char want[32];
        snprintf(want, sizeof want, "0:%zu", i);
        cr_expect_str_eq(root.ids[i], want);
        pl_step_type t = i == 6         ? PL_STEP_ACTION_RESULT
                         : (i % 2 == 0) ? PL_STEP_ACTION_CALL
                                        : PL_STEP_ACTION_RESULT;
        cr_expect_eq(root.types[i], t, "step %zu", i);
    }
    /* each callee's invocation is named by the position of its call */
    const char *kids[] = {"0.0", "0.2", "0.4"};
    for (size_t k = 0; k < 3; k++) {
        id_list kid;
        collect_ids(e, "ids-a", kids[k], &kid);
        cr_expect_eq(kid.n, 1, "%s", kids[k]);
        char want[32];
        snprintf(want, sizeof want, "%s:0", kids[k]);
        cr_expect_str_eq(kid.ids[0], want);
    }
    id_list none;
    collect_ids(e, "ids-a", "0.1", &none);
    cr_expect_eq(none.n, 0, "no call at position 1");

    /* the outcome's result step has its place in the root ledger */
    const pl_step *last = pl_steps_at(o1->steps, pl_steps_count(o1->steps) - 1);
    cr_expect_str_eq(pl_step_id(last), "0:6");

    /* replay reproduces the same ids, and rewrites nothing */
    pl_outcome *o2 = cont(e, "ids-a");
    const pl_step *last2 = pl_steps_at(o2->steps,
                                       pl_steps_count(o2->steps) - 1);
    cr_expect_str_eq(pl_step_id(last2), "0:6");
    cr_expect_eq(pl_step_seq(last2), 6);
    collect_ids(e, "ids-a", "0", &again);
    cr_assert_eq(again.n, root.n);
    for (size_t i = 0; i < root.n; i++) {
        cr_expect_str_eq(again.ids[i], root.ids[i]);
        cr_expect_eq(again.times[i], root.times[i], "step %zu unchanged", i);
    }

    /* another run of the same program gets the same ids */
    pl_outcome *o3 = t_start(e, "chain", "{\"n\": 3}", "ids-b");
    id_list other;
    collect_ids(e, "ids-b", "0", &other);
    cr_assert_eq(other.n, root.n);
    for (size_t i = 0; i < root.n; i++)
        cr_expect_str_eq(other.ids[i], root.ids[i]);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

Test(replay, divergent_payload_fails_with_enondet_until_fixed)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_value = 1;
    pl_outcome *o1 = t_start(e, "drift", NULL, "nd-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(t_calls.echo, 1);
    char *want = result_text(o1);

    g_value = 2; /* the "deploy" changes what the policy sends */
    for (int attempt = 0; attempt < 2; attempt++) {
        char *reason = diverge(e, "nd-1");
        expect_has(reason, "nd-1");          /* the run */
        expect_has(reason, "invocation 0,"); /* the invocation */
        expect_has(reason, "step 0");        /* the position */
        expect_has(reason, "0:0");           /* the step id */
        expect_has(reason, "action_call");
        /* both steps: the recorded one and the new one */
        expect_has(reason, "{\"policy\":\"echo\",\"payload\":{\"v\":1}}");
        expect_has(reason, "{\"policy\":\"echo\",\"payload\":{\"v\":2}}");
        cr_expect_eq(t_calls.echo, 1, "nothing executed on a divergence");
        free(reason);
    }

    g_value = 1; /* the code is fixed */
    pl_outcome *o3 = cont(e, "nd-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(o3->calls_served, 1);
    cr_expect_eq(t_calls.echo, 1);
    char *got = result_text(o3);
    cr_expect_str_eq(got, want);
    pl_run_info *info = get_info(e, "nd-1");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_null(info->reason);
    cr_expect_eq(info->error, 0);
    cr_expect_eq(pl_run_verify(e, "nd-1"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info);
    free(want);
    free(got);
    pl_outcome_free(o1);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* JSON objects are unordered: a call whose members come in another order
 * is the same call. */
Test(replay, a_call_with_its_members_reordered_replays)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_tool = "add";
    g_value = 3;
    pl_outcome *o1 = t_start(e, "drift", NULL, "nd-order");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    g_reorder = true;
    pl_outcome *o2 = cont(e, "nd-order");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(o2->calls_executed, 0);
    cr_expect_eq(o2->calls_served, 1);
    /* a reordered call that also changed is still a divergence */
    g_value = 4;
    char *reason = diverge(e, "nd-order");
    expect_has(reason, "action_call");
    free(reason);
    g_reorder = false;
    g_tool = "echo";
    g_value = 1;
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, calling_a_different_tool_is_nondeterminism)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_tool = "echo";
    pl_outcome *o1 = t_start(e, "drift", NULL, "nd-tool");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    g_tool = "add";
    char *reason = diverge(e, "nd-tool");
    expect_has(reason, "nd-tool");
    expect_has(reason, "\"policy\":\"echo\"");
    expect_has(reason, "\"policy\":\"add\"");
    cr_expect_eq(t_calls.add, 0, "the new tool never ran");
    g_tool = "echo";
    free(reason);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, divergence_in_a_nested_invocation_names_its_path)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_value = 1;
    g_gate_closed = true;
    /* outer -> drift_gate (0.0) -> echo (0.0.0), gate (0.0.2) fails */
    pl_outcome *o1 = t_start(e, "outer", NULL, "nd-nested");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    cr_assert_eq(o1->error, PL_EPOLICY, "%s", o1->reason);
    cr_assert_eq(t_calls.echo, 1);

    /* the nested invocation replays (its call has no result) and diverges */
    g_gate_closed = false;
    g_value = 5;
    pl_outcome *o2 = cont(e, "nd-nested");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    cr_expect_eq(o2->error, PL_ENONDET, "%s", o2->reason);
    expect_has(o2->reason, "nd-nested");
    expect_has(o2->reason, "invocation 0.0,");
    expect_has(o2->reason, "0.0:0");
    expect_has(o2->reason, "{\"v\":1}");
    expect_has(o2->reason, "{\"v\":5}");
    cr_expect_eq(t_calls.echo, 1);

    /* fixed: the echo call is served, the gate runs, the run completes */
    g_value = 1;
    int gate_before = g_gate_runs;
    pl_outcome *o3 = cont(e, "nd-nested");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(t_calls.echo, 1, "the recorded echo result was served");
    cr_expect_eq(g_gate_runs, gate_before + 1);
    cr_expect_eq(o3->calls_served, 1);
    cr_expect_eq(o3->calls_executed, 2, "gate and drift_gate");
    cr_expect_eq(pl_run_verify(e, "nd-nested"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, appending_fewer_steps_than_recorded_is_nondeterminism)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_talk = 2;
    g_talk_result = true;
    pl_outcome *o1 = t_start(e, "talky", NULL, "nd-short");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    cr_assert_eq(pl_steps_count(o1->steps), 3);
    expect_str(cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o1), "text")
                   ->valuestring,
               "final");

    /* the new code stops early: its steps are a strict prefix of the
     * record, so no single comparison fails -- but the recorded "final"
     * step is never reached and the result would change */
    g_talk_result = false;
    char *reason = diverge(e, "nd-short");
    expect_has(reason, "nd-short");
    expect_has(reason, "step 2");
    expect_has(reason, "\"final\"");
    g_talk_result = true;
    free(reason);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

typedef struct code_events {
    int n_changed;
    char detail[512];
    char path[64];
    uint32_t seq;
    char policy[64];
} code_events;

static void on_code_event(const pl_event *ev, void *user)
{
    code_events *ce = user;
    if (ev->kind != PL_EVENT_CODE_CHANGED)
        return;
    ce->n_changed++;
    snprintf(ce->detail, sizeof ce->detail, "%s", ev->detail ? ev->detail : "");
    snprintf(ce->path, sizeof ce->path, "%s", ev->path ? ev->path : "");
    snprintf(ce->policy, sizeof ce->policy, "%s", ev->policy ? ev->policy : "");
    ce->seq = ev->seq;
}

static pl_registry *versioned_registry(const char *version)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "tool";
    d.fn = tool;
    d.code_version = version;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "callv", callv, NULL), PL_OK);
    return reg;
}

static pl_engine *engine_with_events(const char *path, const pl_registry *reg,
                                     pl_event_fn fn, void *user)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = fn;
    o.event_user = user;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

Test(replay, code_change_passes_and_is_reported)
{
    char path[4300];
    snprintf(path, sizeof path, "%s", t_store_path());
    code_events ce = {0};
    pl_registry *v1 = versioned_registry("tool-v1");
    pl_engine *e = engine_with_events(path, v1, on_code_event, &ce);
    pl_outcome *o1 = t_start(e, "callv", NULL, "code-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    cr_expect_eq(ce.n_changed, 0);
    pl_steps *l = ledger(e, "code-1", "0");
    cr_assert_geq(pl_steps_count(l), 1);
    expect_str(pl_step_code(pl_steps_at(l, 0)), "tool-v1");
    pl_steps_free(l);

    /* same code: replay reports nothing */
    pl_outcome *o2 = cont(e, "code-1");
    cr_expect_eq(ce.n_changed, 0);
    pl_engine_close(e);

    /* a deploy: the same policy under a new code version */
    pl_registry *v2 = versioned_registry("tool-v2");
    e = engine_with_events(path, v2, on_code_event, &ce);
    pl_outcome *o3 = cont(e, "code-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(o3->calls_served, 1);
    cr_expect_eq(g_tool_runs, 1);
    cr_expect_eq(ce.n_changed, 1, "one code change, at the call");
    expect_has(ce.detail, "tool-v1");
    expect_has(ce.detail, "tool-v2");
    expect_has(ce.detail, "0:0");
    cr_expect_str_eq(ce.path, "0");
    cr_expect_eq(ce.seq, 0);
    char *a = result_text(o1), *b = result_text(o3);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    /* the record keeps the code that ran it */
    l = ledger(e, "code-1", "0");
    expect_str(pl_step_code(pl_steps_at(l, 0)), "tool-v1");
    pl_steps_free(l);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(v1);
    pl_registry_free(v2);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

Test(replay, check_mode_on_a_completed_run_writes_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "chain", "{\"n\": 4}", "chk-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    pl_run_info *before = get_info(e, "chk-1");

    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o2 = NULL;
    int st = pl_run_continue(&o2, e, "chk-1", &ro);
    cr_assert_eq(st, PL_OK, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_not_null(o2);
    cr_expect_eq(o2->status, PL_RUN_COMPLETED);
    cr_expect_eq(o2->calls_executed, 0);
    cr_expect_eq(o2->calls_served, 4);
    cr_expect_eq(o2->steps_appended, 0);
    cr_expect_eq(t_calls.add, 4, "nothing executed");
    char *a = result_text(o1), *b = result_text(o2);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);

    pl_run_info *after = get_info(e, "chk-1");
    cr_expect_eq(after->status, before->status);
    cr_expect_eq(after->steps, before->steps, "no step written");
    cr_expect_eq(after->attempts, before->attempts, "no execution recorded");
    cr_expect_eq(after->updated_us, before->updated_us, "record untouched");
    cr_expect_eq(after->heartbeat_us, before->heartbeat_us);
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, check_mode_reports_divergence_and_touches_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_value = 1;
    pl_outcome *o1 = t_start(e, "drift", NULL, "chk-nd");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    pl_run_info *before = get_info(e, "chk-nd");

    g_value = 3;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    static pl_outcome dummy;
    pl_outcome *o2 = &dummy; /* must be reset to NULL */
    int st = pl_run_continue(&o2, e, "chk-nd", &ro);
    cr_expect_eq(st, PL_ENONDET, "%s", pl_status_name(st));
    cr_expect_null(o2);
    expect_has(pl_errmsg(), "chk-nd");
    expect_has(pl_errmsg(), "{\"v\":3}");

    pl_run_info *after = get_info(e, "chk-nd");
    cr_expect_eq(after->status, PL_RUN_COMPLETED, "still completed");
    cr_expect_eq(after->error, 0);
    cr_expect_null(after->reason);
    cr_expect_eq(after->attempts, before->attempts);
    cr_expect_eq(after->steps, before->steps);
    cr_expect_eq(after->updated_us, before->updated_us);
    cr_expect_eq(t_calls.echo, 1);
    g_value = 1;
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, check_mode_on_an_unfinished_run_is_echeck)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_gate_closed = true;
    pl_outcome *o1 = t_start(e, "outer", NULL, "chk-open");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    pl_run_info *before = get_info(e, "chk-open");
    g_gate_closed = false;
    int gate_runs = g_gate_runs;

    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o2 = NULL;
    int st = pl_run_continue(&o2, e, "chk-open", &ro);
    cr_expect_eq(st, PL_ECHECK, "%s", pl_status_name(st));
    cr_expect_null(o2);
    expect_has(pl_errmsg(), "chk-open");
    cr_expect_eq(g_gate_runs, gate_runs, "check mode executes nothing");
    pl_run_info *after = get_info(e, "chk-open");
    cr_expect_eq(after->status, PL_RUN_FAILED);
    cr_expect_eq(after->attempts, before->attempts);
    cr_expect_eq(after->steps, before->steps);
    cr_expect_str_eq(after->reason, before->reason);
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

Test(replay, recorded_helpers_return_the_same_values)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "helpers", NULL, "help-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(g_effect_calls, 1);
    pl_outcome *o2 = cont(e, "help-1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    pl_outcome *o3 = cont(e, "help-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_assert_eq(g_helper_runs, 3, "the root re-executes on every replay");
    cr_expect_eq(g_effect_calls, 1, "the side effect ran once");

    cr_expect_gt(g_seen[0].now, 1600000000000LL,
                 "a Unix time in ms, after 2020");
    cr_expect_eq(strlen(g_seen[0].uuid), PL_UUID_LEN);
    cr_expect_eq(g_seen[0].uuid[14], '4', "a version 4 UUID");
    for (int i = 1; i < 3; i++) {
        cr_expect_eq(g_seen[i].now, g_seen[0].now, "now, replay %d", i);
        cr_expect_eq(g_seen[i].rnd, g_seen[0].rnd, "random, replay %d", i);
        cr_expect_str_eq(g_seen[i].uuid, g_seen[0].uuid);
        cr_expect_str_eq(g_seen[i].fetched, g_seen[0].fetched);
    }
    cr_expect_str_eq(g_seen[0].fetched,
                     "{\"body\":\"external data\",\"call\":1}");
    char *a = result_text(o1), *b = result_text(o3);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);

    /* a new run records new values */
    pl_outcome *o4 = t_start(e, "helpers", NULL, "help-2");
    cr_expect_eq(g_effect_calls, 2);
    cr_expect_neq(g_seen[3].rnd, g_seen[0].rnd, "fresh randomness");
    cr_expect_str_neq(g_seen[3].uuid, g_seen[0].uuid);

    /* the values are side_effect steps of the invocation's own ledger */
    pl_steps *l = ledger(e, "help-1", "0");
    cr_assert_eq(pl_steps_count(l), 5);
    const char *names[] = {"now", "random", "uuid", "fetch"};
    for (size_t i = 0; i < 4; i++) {
        const pl_step *s = pl_steps_at(l, i);
        cr_expect_eq(pl_step_type_of(s), PL_STEP_SIDE_EFFECT);
        cr_expect_str_eq(pl_step_actor(s), "helpers");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                          "name");
        cr_expect(cJSON_IsString(n) && strcmp(n->valuestring, names[i]) == 0,
                  "side effect %zu is named %s", i, names[i]);
    }
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 4)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_outcome_free(o4);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* "allowed": calls "echo" allowing the actions g_allowed names. */
static const char *g_allowed[2] = {"add", "echo"};

static int allowed(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a, (void)u;
    pl_action call = PL_ACTION_INIT;
    call.policy = "echo";
    call.payload = pl_json_empty();
    call.actions = g_allowed;
    call.n_actions = 2;
    pl_step *r = NULL;
    int st = pl_ctx_call(&r, ctx, &call, NULL, 0);
    pl_step_free(r);
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

/* Deploying changes: a recorded call whose allowed actions changed strands
 * the run (the call records them), as a changed payload does. */
Test(replay, changed_allowed_actions_are_nondeterminism)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "allowed", allowed, NULL), PL_OK);
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "allowed", NULL, "nd-actions");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    g_allowed[0] = "chain";
    char *reason = diverge(e, "nd-actions");
    expect_has(reason, "nd-actions");
    expect_has(reason, "step 0");
    free(reason);
    g_allowed[0] = "add";
    pl_outcome *o2 = cont(e, "nd-actions");
    cr_expect_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(t_calls.echo, 1, "served, never run again");
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, renamed_side_effect_is_nondeterminism)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_effect_name = "fetch";
    pl_outcome *o1 = t_start(e, "helpers", NULL, "se-name");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    g_effect_name = "download";
    char *reason = diverge(e, "se-name");
    expect_has(reason, "se-name");
    expect_has(reason, "\"fetch\"");
    expect_has(reason, "'download'");
    expect_has(reason, "step 3");
    free(reason);
    cr_expect_eq(g_effect_calls, 1, "the renamed side effect never ran");
    g_effect_name = "fetch";
    pl_outcome *o3 = cont(e, "se-name");
    cr_expect_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(g_effect_calls, 1);
    pl_outcome_free(o1);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
