/*
 * test_api.c -- the API's guard rails and short forms: stale and foreign
 * contexts are refused, pl_ctx_invoke() and PL_ERESULT, the one rule of
 * the call functions, the versioned input structs, the incremental ledger
 * view, step lists for decorators, pl_run_head(), pl_registry_add_fn(),
 * pl_outcome_result(), NULL-safe step accessors and decorator constructors.
 * (pl_run_start()'s if_exists: test_start.c.)
 */
#include "support.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Contexts used where they do not belong                                   */
/* ------------------------------------------------------------------------ */

static pl_ctx *g_kept;     /* a context kept past its policy's return */
static int g_stale_status; /* what using it gave */
static char g_stale_msg[512];

/* keeper: keeps its own context, then returns. */
static int keeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    g_kept = ctx;
    return pl_steps_add_result(out, a->payload);
}

/* stale: calls keeper, then uses keeper's context. */
static int stale(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = pl_ctx_invoke(NULL, ctx, "keeper", pl_json_empty());
    if (st)
        return st;
    pl_action call = PL_ACTION_INIT;
    call.policy = "echo";
    call.payload = pl_json_empty();
    g_stale_status = pl_ctx_call(NULL, g_kept, &call, NULL, 0);
    snprintf(g_stale_msg, sizeof g_stale_msg, "%s", pl_errmsg());
    /* the refusal touched nothing: this context still works */
    return pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty()) ||
           pl_steps_add_text(out, NULL, "went on");
}

/* foreign: the caller's context, used inside its callee, for a recorded
 * clock and for a side effect labelled "charge". */
static int g_stale_se_status;
static char g_stale_se_msg[512];
static int g_charges;

static int charge(cJSON **out, void *user)
{
    (void)user;
    g_charges++;
    *out = cJSON_CreateTrue();
    return *out ? PL_OK : PL_ENOMEM;
}

static int foreign_child(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    int64_t ms = 0;
    g_stale_status = pl_ctx_now(&ms, g_kept);
    snprintf(g_stale_msg, sizeof g_stale_msg, "%s", pl_errmsg());
    cJSON *v = NULL;
    g_stale_se_status = pl_ctx_side_effect(&v, g_kept, "charge", charge, NULL);
    snprintf(g_stale_se_msg, sizeof g_stale_se_msg, "%s", pl_errmsg());
    cJSON_Delete(v);
    return pl_steps_add_result(out, pl_json_empty());
}

static int foreign(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    g_kept = ctx;
    int st = pl_ctx_invoke(NULL, ctx, "foreign_child", pl_json_empty());
    return st ? st : pl_steps_add_text(out, NULL, "went on");
}

/* other_run: its policy starts another run, whose policy ("intruder")
 * uses other_run's context. */
static int intruder(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    g_stale_status = pl_ctx_invoke(NULL, g_kept, "echo", pl_json_empty());
    snprintf(g_stale_msg, sizeof g_stale_msg, "%s", pl_errmsg());
    return pl_steps_add_result(out, pl_json_empty());
}

static int other_run(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    g_kept = ctx;
    pl_action in = PL_ACTION_INIT;
    in.policy = "intruder";
    in.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "inner";
    ro.if_exists = PL_IF_EXISTS_CONTINUE;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, pl_ctx_engine(ctx), &in, &ro);
    pl_outcome_free(o);
    /* the refusal touched nothing: this context still works */
    return st ? st
              : pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty()) ||
                    pl_steps_add_text(out, NULL, "went on");
}

/* ------------------------------------------------------------------------ */
/* pl_ctx_invoke()                                                          */
/* ------------------------------------------------------------------------ */

static int g_invoke_status;
static char g_invoke_code[64];

/* invoker: invokes payload.call with payload.with; handles or returns an
 * error result as payload.handle says. */
static int invoker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "call");
    const cJSON *with = cJSON_GetObjectItemCaseSensitive(a->payload, "with");
    bool handle = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a->payload,
                                                                "handle"));
    cJSON *res = NULL;
    int st = pl_ctx_invoke(&res, ctx, name->valuestring,
                           cJSON_IsObject(with) ? with : pl_json_empty());
    g_invoke_status = st;
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(res, "code");
    snprintf(g_invoke_code, sizeof g_invoke_code, "%s",
             cJSON_IsString(code) ? code->valuestring : "");
    if (st == PL_ERESULT && handle)
        st = pl_steps_add_text(out, NULL, "handled");
    else if (!st)
        st = pl_steps_add_result(out, res);
    cJSON_Delete(res);
    return st;
}

/* ------------------------------------------------------------------------ */
/* The ledger view                                                          */
/* ------------------------------------------------------------------------ */

static size_t g_view_counts[3];
static bool g_view_same_list, g_view_same_steps;

static int viewer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    const pl_steps *v1 = NULL, *v2 = NULL, *v3 = NULL;
    int st = pl_ctx_ledger(&v1, ctx);
    if (st)
        return st;
    g_view_counts[0] = pl_steps_count(v1);
    if ((st = pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty())) ||
        (st = pl_ctx_ledger(&v2, ctx)))
        return st;
    g_view_counts[1] = pl_steps_count(v2);
    const pl_step *first = pl_steps_at(v2, 0);
    if ((st = pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty())) ||
        (st = pl_ctx_ledger(&v3, ctx)))
        return st;
    g_view_counts[2] = pl_steps_count(v3);
    g_view_same_list = v1 == v2 && v2 == v3;
    g_view_same_steps = pl_steps_at(v3, 0) == first &&
                        pl_step_type_of(first) == PL_STEP_ACTION_CALL &&
                        strcmp(pl_step_id(pl_steps_at(v3, 3)), "0:3") == 0;
    return pl_steps_add_text(out, NULL, "viewed");
}

/* ------------------------------------------------------------------------ */
/* Versioned input structs                                                  */
/* ------------------------------------------------------------------------ */

static int g_version_status[2];

static int versions(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_action call = PL_ACTION_INIT;
    call.policy = "echo";
    call.payload = pl_json_empty();
    const char *which = cJSON_GetObjectItemCaseSensitive(a->payload, "which")
                            ->valuestring;
    if (strcmp(which, "action") == 0) {
        call.version = 99;
        g_version_status[0] = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        return g_version_status[0];
    }
    pl_decorator d;
    cr_assert_eq(pl_decorator_invoke_action(&d), PL_OK);
    d.version = 0;
    g_version_status[1] = pl_ctx_call(NULL, ctx, &call, &d, 1);
    (void)out;
    return g_version_status[1];
}

/* ------------------------------------------------------------------------ */
/* The call rule: an error result is PL_ERESULT, handed out                 */
/* ------------------------------------------------------------------------ */

static int g_rule_status[5];
static bool g_rule_handed_out[5];

/* rules: pl_ctx_call() of "oops" (an error result) with and without an out,
 * of "nosuch" (NotFound), of "echo" (a result); pl_ctx_call_all() of echo
 * and oops.  Handles every error result and completes. */
static int rules(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    const char *names[] = {"oops", "oops", "nosuch", "echo"};
    for (int i = 0; i < 4; i++) {
        pl_action call = PL_ACTION_INIT;
        call.policy = names[i];
        call.payload = pl_json_empty();
        pl_step *res = NULL;
        g_rule_status[i] = pl_ctx_call(i == 1 ? NULL : &res, ctx, &call, NULL,
                                       0);
        g_rule_handed_out[i] = res != NULL;
        pl_step_free(res);
    }
    pl_action echo = PL_ACTION_INIT, oops = PL_ACTION_INIT;
    echo.policy = "echo";
    oops.policy = "oops";
    echo.payload = oops.payload = pl_json_empty();
    pl_call_spec specs[2] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT};
    specs[0].action = &echo;
    specs[1].action = &oops;
    pl_step *res[2] = {NULL, NULL};
    g_rule_status[4] = pl_ctx_call_all(res, ctx, specs, 2);
    g_rule_handed_out[4] = res[0] && !pl_step_is_error(res[0]) && res[1] &&
                           pl_step_is_error(res[1]);
    pl_step_free(res[0]);
    pl_step_free(res[1]);
    return pl_steps_add_text(out, NULL, "handled");
}

/* ------------------------------------------------------------------------ */
/* pl_ctx_call_step() on a call that has its result                         */
/* ------------------------------------------------------------------------ */

static int g_again_status[2];
static char g_again_msg[2][512];

/* resolver: pl_ctx_invoke() of echo (steps 0, 1), then pl_ctx_call_step()
 * on that action_call; an action_call of its own (step 2) resolved by
 * pl_ctx_call_step() (step 3), then again.  Both second resolutions must be
 * refused: each would run echo again and append a second result. */
static int resolver(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    const char *actions[] = {"echo"};
    pl_action allowed = PL_ACTION_INIT;
    allowed.policy = "resolver";
    allowed.payload = pl_json_empty();
    allowed.actions = actions;
    allowed.n_actions = 1;
    const pl_steps *l = NULL;
    int st = pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty());
    if (!st)
        st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    pl_step *res = NULL;
    g_again_status[0] = pl_ctx_call_step(&res, ctx, pl_steps_at(l, 0),
                                         &allowed);
    snprintf(g_again_msg[0], sizeof g_again_msg[0], "%s", pl_errmsg());
    pl_step_free(res);
    res = NULL;
    pl_steps *mine = NULL;
    cJSON *call = t_json("{\"policy\": \"echo\", \"payload\": {}}");
    if (!(st = pl_steps_new(&mine)))
        st = pl_ctx_emit(ctx, mine, PL_STEP_ACTION_CALL, NULL, call);
    cJSON_Delete(call);
    if (!st)
        st = pl_ctx_call_step(&res, ctx, pl_steps_at(mine, 0), &allowed);
    pl_step_free(res);
    res = NULL;
    if (!st) {
        g_again_status[1] = pl_ctx_call_step_with(&res, ctx,
                                                  pl_steps_at(mine, 0),
                                                  &allowed, NULL, 0);
        snprintf(g_again_msg[1], sizeof g_again_msg[1], "%s", pl_errmsg());
        pl_step_free(res);
    }
    pl_steps_free(mine);
    return st ? st : pl_steps_add_text(out, NULL, "went on");
}

static int g_invokef_status[3];
static double g_invokef_sum;

/* invokerf: pl_ctx_invokef with a good format, a bad one, a non-object. */
static int invokerf(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *r = NULL;
    g_invokef_status[0] = pl_ctx_invokef(&r, ctx, "add", "{s:f, s:i}", "a", 1.5,
                                         "b", 2);
    if (!g_invokef_status[0])
        pl_json_unpack(r, "{s:f}", "sum", &g_invokef_sum);
    cJSON_Delete(r);
    g_invokef_status[1] = pl_ctx_invokef(&r, ctx, "add", "{s:x}", "a", 1);
    g_invokef_status[2] = pl_ctx_invokef(&r, ctx, "add", "[i]", 1);
    /* neither refusal called anything or stopped the run */
    return pl_steps_add_resultf(out, "{s:s}", "went", "on");
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"keeper", keeper},       {"stale", stale},
                {"foreign", foreign},     {"foreign_child", foreign_child},
                {"invoker", invoker},     {"viewer", viewer},
                {"versions", versions},   {"invokerf", invokerf},
                {"rules", rules},         {"intruder", intruder},
                {"other_run", other_run}, {"resolver", resolver}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

Test(api, a_callee_context_used_after_it_returned_is_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "stale", NULL, "stale");
    cr_expect_eq(g_stale_status, PL_EINVAL, "%s",
                 pl_status_name(g_stale_status));
    cr_expect(strstr(g_stale_msg, "not the running invocation's"), "%s",
              g_stale_msg);
    cr_expect(strstr(g_stale_msg, "'keeper' at 0.0"), "%s", g_stale_msg);
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(pl_steps_count(o->steps), 1);
    /* nothing the refused call could have written is in the ledger */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "stale", "0"), PL_OK);
    cr_expect_eq(pl_steps_count(l), 5, "two calls and the text");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "stale"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, a_caller_context_used_inside_its_callee_is_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "foreign", NULL, "foreign");
    cr_expect_eq(g_stale_status, PL_EINVAL, "%s",
                 pl_status_name(g_stale_status));
    cr_expect(strstr(g_stale_msg, "'foreign' at 0 "), "%s", g_stale_msg);
    /* the refusal names the function called, not the value's label */
    cr_expect(strncmp(g_stale_msg, "pl_ctx_now: ", 12) == 0, "%s", g_stale_msg);
    cr_expect_eq(g_stale_se_status, PL_EINVAL, "%s",
                 pl_status_name(g_stale_se_status));
    cr_expect(strncmp(g_stale_se_msg, "pl_ctx_side_effect: ", 20) == 0, "%s",
              g_stale_se_msg);
    cr_expect_eq(g_charges, 0, "the refused side effect never ran");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, a_context_used_inside_another_run_is_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "other_run", NULL, "outer");
    cr_expect_eq(g_stale_status, PL_EINVAL, "%s",
                 pl_status_name(g_stale_status));
    cr_expect(strstr(g_stale_msg, "'other_run' at 0 in run outer"), "%s",
              g_stale_msg);
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    /* outer's ledger holds its own call alone, and replays */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "outer", "0"), PL_OK);
    cr_expect_eq(pl_steps_count(l), 3, "one call, its result, the text");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "outer"), PL_OK, "%s", pl_errmsg());
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "outer", &ro), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, invoke_returns_an_owned_result)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "invoker",
                            "{\"call\": \"add\", \"with\": {\"a\": 2, "
                            "\"b\": 3}}",
                            "inv-ok");
    cr_expect_eq(g_invoke_status, PL_OK);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    char *text = t_text(pl_outcome_result(o));
    cr_expect_str_eq(text, "{\"sum\":5}");
    cJSON_free(text);
    pl_outcome_free(o);
    /* continued, the result is served from the ledger */
    cr_assert_eq(pl_run_continue(&o, e, "inv-ok", NULL), PL_OK);
    cr_expect_eq(o->calls_served, 1);
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(t_calls.add, 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, invoke_of_an_error_result_is_eresult_and_fails_the_run_if_returned)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "invoker", "{\"call\": \"oops\"}", "inv-err");
    cr_expect_eq(g_invoke_status, PL_ERESULT, "%s",
                 pl_status_name(g_invoke_status));
    cr_expect_str_eq(g_invoke_code, "ToolBug", "*out holds the error");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_expect(strstr(o->reason, "returned PL_ERESULT"), "%s", o->reason);
    cr_expect(strstr(o->reason, "call to 'oops' at 0:0 returned ToolBug: "
                                "something broke"),
              "%s", o->reason);
    pl_outcome_free(o);

    /* handled, it is just a result */
    o = t_start(e, "invoker", "{\"call\": \"oops\", \"handle\": true}",
                "inv-handled");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);

    /* an unregistered policy is a NotFound error result */
    o = t_start(e, "invoker", "{\"call\": \"nosuch\", \"handle\": true}",
                "inv-nf");
    cr_expect_eq(g_invoke_status, PL_ERESULT);
    cr_expect_str_eq(g_invoke_code, "NotFound");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, ledger_view_is_one_list_extended_as_the_ledger_grows)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "viewer", NULL, "view");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(g_view_counts[0], 0);
    cr_expect_eq(g_view_counts[1], 2);
    cr_expect_eq(g_view_counts[2], 4);
    cr_expect(g_view_same_list, "one list, extended");
    cr_expect(g_view_same_steps, "earlier steps stay where they are");
    pl_outcome_free(o);
    /* a replay reads the recorded ledger the same way */
    memset(g_view_counts, 0, sizeof g_view_counts);
    g_view_same_list = g_view_same_steps = false;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_assert_eq(pl_run_continue(&o, e, "view", &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(g_view_counts[2], 4);
    cr_expect(g_view_same_list && g_view_same_steps);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, actions_and_decorators_of_another_version_are_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "versions", "{\"which\": \"action\"}", "v-a");
    cr_expect_eq(g_version_status[0], PL_EINVAL);
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect(strstr(o->reason, "pl_action version 99 is newer than this "
                                "library's (it takes 1.."),
              "%s", o->reason);
    pl_outcome_free(o);
    o = t_start(e, "versions", "{\"which\": \"decorator\"}", "v-d");
    cr_expect_eq(g_version_status[1], PL_EINVAL);
    cr_expect(strstr(o->reason, "PL_DECORATOR_INIT"), "%s", o->reason);
    pl_outcome_free(o);
    cr_expect_eq(t_calls.echo, 0, "nothing was called");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, steps_move_push_and_clear)
{
    pl_steps *a = NULL, *b = NULL;
    cr_assert_eq(pl_steps_new(&a), PL_OK);
    cr_assert_eq(pl_steps_new(&b), PL_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(pl_steps_add_text(a, "x", "a"), PL_OK);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(pl_steps_add_text(b, "y", "b"), PL_OK);
    const pl_step *b0 = pl_steps_at(b, 0);
    cr_expect_eq(pl_steps_move(a, b), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_steps_count(a), 25);
    cr_expect_eq(pl_steps_count(b), 0);
    cr_expect_eq(pl_steps_at(a, 5), b0, "moved, not copied, in order");
    cr_expect_eq(pl_steps_move(a, a), PL_EINVAL);
    cr_expect_eq(pl_steps_move(NULL, a), PL_EINVAL);
    cr_expect_eq(pl_steps_move(a, b), PL_OK, "moving nothing is fine");
    cr_expect_eq(pl_steps_push(NULL, NULL), PL_EINVAL);
    pl_steps_clear(a);
    cr_expect_eq(pl_steps_count(a), 0);
    cr_expect_eq(pl_steps_add_text(a, "x", "again"), PL_OK);
    pl_steps_clear(NULL);
    pl_steps_free(a);
    pl_steps_free(b);
}

Test(api, step_flag_is_a_member_that_is_true)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_steps_new(&l), PL_OK);
    cJSON *p = cJSON_Parse("{\"again\": true, \"no\": false, \"one\": 1, "
                           "\"text\": \"true\", \"in\": {\"deep\": true}}");
    cr_assert_not_null(p);
    cr_assert_eq(pl_steps_add(l, PL_STEP_TEXT, "x", p), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(p);
    const pl_step *s = pl_steps_at(l, 0);
    cr_expect(pl_step_flag(s, "again"));
    cr_expect(!pl_step_flag(s, "no"), "false is not true");
    cr_expect(!pl_step_flag(s, "one"), "1 is not true");
    cr_expect(!pl_step_flag(s, "text"), "the string \"true\" is not true");
    cr_expect(!pl_step_flag(s, "missing"));
    cr_expect(!pl_step_flag(s, "deep"), "only top-level members");
    cr_expect(!pl_step_flag(s, NULL));
    cr_expect(!pl_step_flag(s, "AGAIN"), "names are case-sensitive");
    cr_expect(!pl_step_is_error(s));
    p = cJSON_Parse("{\"error\": true, \"code\": \"Oops\"}");
    cr_assert_not_null(p);
    cr_assert_eq(pl_steps_add(l, PL_STEP_ACTION_RESULT, "x", p), PL_OK);
    cJSON_Delete(p);
    cr_expect(pl_step_flag(pl_steps_at(l, 1), "error"));
    cr_expect(pl_step_is_error(pl_steps_at(l, 1)));
    pl_steps_free(l);
}

Test(api, run_head_anchors_a_finished_run)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "chain", "{\"n\": 3}", "headed");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    uint8_t head[PL_HASH_LEN], again[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, e, "headed"), PL_OK, "%s", pl_errmsg());
    /* a completed run is final: replaying it leaves its head as it was */
    cr_assert_eq(pl_run_continue(&o, e, "headed", NULL), PL_OK);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_head(again, e, "headed"), PL_OK);
    cr_expect_eq(memcmp(head, again, PL_HASH_LEN), 0);
    uint8_t zero[PL_HASH_LEN] = {0};
    cr_expect_neq(memcmp(head, zero, PL_HASH_LEN), 0);

    o = t_start(e, "fail", NULL, "failed");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    cr_expect_eq(pl_run_head(head, e, "failed"), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "failed"), "%s", pl_errmsg());
    cr_expect_eq(pl_run_head(head, e, "nosuch"), PL_ENOTFOUND);
    cr_expect_eq(pl_run_head(NULL, e, "headed"), PL_EINVAL);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, invokef_packs_the_payload)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "invokerf", NULL, "invf");
    cr_expect_eq(g_invokef_status[0], PL_OK);
    cr_expect_eq(g_invokef_sum, 3.5);
    cr_expect_eq(g_invokef_status[1], PL_EINVAL, "a malformed format");
    cr_expect_eq(g_invokef_status[2], PL_EJSON, "a payload that is no object");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(o->calls_executed, 1);
    cr_expect_eq(t_calls.add, 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, every_call_function_returns_eresult_for_an_error_result)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "rules", NULL, "rules");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "the run went on: %s",
                 o->reason ? o->reason : "");
    cr_expect_eq(g_rule_status[0], PL_ERESULT);
    cr_expect(g_rule_handed_out[0], "the error result is handed out");
    cr_expect_eq(g_rule_status[1], PL_ERESULT, "also when it is discarded");
    cr_expect_eq(g_rule_status[2], PL_ERESULT, "NotFound is an error result");
    cr_expect(g_rule_handed_out[2]);
    cr_expect_eq(g_rule_status[3], PL_OK);
    cr_expect_eq(g_rule_status[4], PL_ERESULT, "one of the fan-out's results");
    cr_expect(g_rule_handed_out[4], "every fan-out result is handed out");
    pl_outcome_free(o);
    /* a replay serves the same results with the same statuses */
    memset(g_rule_status, 0, sizeof g_rule_status);
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "rules", NULL), PL_OK);
    cr_expect_eq(again->calls_executed, 0);
    cr_expect_eq(g_rule_status[0], PL_ERESULT);
    cr_expect_eq(g_rule_status[2], PL_ERESULT);
    cr_expect_eq(g_rule_status[4], PL_ERESULT);
    pl_outcome_free(again);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int noop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    return PL_OK;
}

Test(api, registry_add_fn_registers_with_the_defaults)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    int token = 0;
    cr_assert_eq(pl_registry_add_fn(reg, "p", noop, &token), PL_OK);
    const pl_policy_def *d = pl_registry_find(reg, "p");
    cr_assert_not_null(d);
    cr_expect_eq(d->fn, noop);
    cr_expect_eq(d->user, &token);
    cr_expect(d->idempotent, "PL_POLICY_DEF_INIT's default");
    cr_expect_eq(d->in_doubt, PL_IN_DOUBT_RERUN);
    cr_expect_null(d->description);
    cr_expect_null(d->input_schema);
    cr_expect_null(d->code_version);
    /* and every refusal of pl_registry_add() */
    cr_expect_eq(pl_registry_add_fn(reg, "p", noop, NULL), PL_EEXIST);
    cr_expect_eq(pl_registry_add_fn(reg, "q", NULL, NULL), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "no function"), "%s", pl_errmsg());
    cr_expect_eq(pl_registry_add_fn(reg, NULL, noop, NULL), PL_EINVAL);
    cr_expect_eq(pl_registry_add_fn(reg, "", noop, NULL), PL_EINVAL);
    cr_expect_eq(pl_registry_add_fn(reg, "a\nb", noop, NULL), PL_EINVAL);
    cr_expect_eq(pl_registry_add_fn(NULL, "r", noop, NULL), PL_EINVAL);
    cr_expect_eq(pl_registry_count(reg), 1);
    pl_registry_free(reg);
}

/* empty: returns no steps at all (its result is {}). */
static int empty(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    return noop(ctx, a, out, user);
}

/* asks: suspends. */
static int asks(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    (void)out;
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, a->payload);
    cJSON_Delete(answer);
    return st;
}

Test(api, outcome_result_is_the_last_step_or_the_empty_object)
{
    cr_expect_eq(pl_outcome_result(NULL), pl_json_empty());
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "empty", empty, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "asks", asks, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);

    pl_outcome *o = t_start(e, "echo", "{\"x\": 1}", "res-echo");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    const cJSON *r = pl_outcome_result(o);
    cr_expect_eq(r, pl_step_payload(pl_steps_at(o->steps, 0)),
                 "borrowed from the outcome's last step");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(r, "x")->valuedouble, 1);
    pl_outcome_free(o);

    o = t_start(e, "empty", NULL, "res-empty");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(pl_steps_count(o->steps), 0);
    cr_expect_eq(pl_outcome_result(o), pl_json_empty());
    pl_outcome_free(o);

    o = t_start(e, "fail", NULL, "res-failed");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(pl_outcome_result(o), pl_json_empty());
    pl_outcome_free(o);

    o = t_start(e, "asks", NULL, "res-suspended");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    cr_expect_eq(pl_outcome_result(o), pl_json_empty());
    pl_outcome_free(o);

    /* an error result is still the result */
    o = t_start(e, "oops", NULL, "res-oops");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect(cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "error")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(api, step_accessors_take_null)
{
    cr_expect_eq((int)pl_step_type_of(NULL), 0);
    cr_expect_null(pl_step_actor(NULL));
    cr_expect_null(pl_step_payload(NULL));
    cr_expect_str_eq(pl_step_id(NULL), "");
    cr_expect_eq(pl_step_seq(NULL), 0);
    cr_expect_eq(pl_step_time_us(NULL), 0);
    cr_expect_null(pl_step_code(NULL));
    cr_expect(!pl_step_is_error(NULL));
    cr_expect(!pl_step_flag(NULL, "again"));
    cr_expect_null(pl_step_error_code(NULL));
    cr_expect_eq(pl_steps_count(NULL), 0);
    cr_expect_null(pl_steps_at(NULL, 0));
    uint8_t h[PL_HASH_LEN];
    cr_expect_eq(pl_step_hash(h, NULL), PL_EINVAL);
    cr_expect_eq(pl_step_prev_hash(h, NULL), PL_EINVAL);
    /* the accessors chain: the last step of an empty list */
    pl_steps *l = NULL;
    cr_assert_eq(pl_steps_new(&l), PL_OK);
    cr_expect_null(pl_step_payload(pl_steps_at(l, pl_steps_count(l) - 1)));
    pl_steps_free(l);
}

Test(api, decorator_constructors_take_out_first_and_return_a_status)
{
    pl_decorator d = PL_DECORATOR_INIT;
    cr_expect_eq(pl_decorator_loop(NULL, 3), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "pl_decorator_loop"), "%s", pl_errmsg());
    cr_assert_eq(pl_decorator_loop(&d, 3), PL_OK);
    cr_expect_eq(d.version, PL_DECORATOR_VERSION);
    cr_expect_not_null(d.fn);
    cr_expect_str_eq(d.name, "loop");
    cr_expect_eq(d.arg, 3);

    cr_expect_eq(pl_decorator_invoke_action(NULL), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "pl_decorator_invoke_action"), "%s",
              pl_errmsg());
    cr_assert_eq(pl_decorator_invoke_action(&d), PL_OK);
    cr_expect_not_null(d.fn);
    cr_expect_str_eq(d.name, "invoke_action");
    cr_expect_null(d.user);

    /* the rest share the form */
    cr_expect_eq(pl_decorator_invoke_action_with(NULL, NULL, 0), PL_EINVAL);
    cr_expect_eq(pl_decorator_retry(NULL, NULL), PL_EINVAL);
    cr_expect_eq(pl_decorator_timeout(NULL, 10), PL_EINVAL);
    cr_expect_eq(pl_decorator_cap(NULL, 10), PL_EINVAL);
    cr_expect_eq(pl_decorator_budget(NULL, NULL), PL_EINVAL);
    cr_expect_eq(pl_decorator_validate(NULL, NULL), PL_EINVAL);
}

/* A call resolved once (by pl_ctx_call(), or by pl_ctx_call_step()) is
 * not resolved again: its callee ran once, its result is in the ledger
 * once, and a check replay of the run agrees with its record. */
Test(api, call_step_refuses_a_call_that_has_its_result)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "resolver", NULL, "again");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(g_again_status[i], PL_EINVAL, "%d: %s: %s", i,
                     pl_status_name(g_again_status[i]), g_again_msg[i]);
        cr_expect(strstr(g_again_msg[i], "has its result"), "%d: %s", i,
                  g_again_msg[i]);
    }
    /* each refusal names the function called */
    cr_expect(strncmp(g_again_msg[0], "pl_ctx_call_step: ", 18) == 0, "%s",
              g_again_msg[0]);
    cr_expect(strncmp(g_again_msg[1], "pl_ctx_call_step_with: ", 23) == 0, "%s",
              g_again_msg[1]);
    cr_expect_eq(t_calls.echo, 2, "echo ran once for each call");
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "again", "0"), PL_OK);
    cr_expect_eq(pl_steps_count(l), 5, "two calls, their results, the text");
    pl_steps_free(l);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    o = NULL;
    int st = pl_run_continue(&o, e, "again", &ro);
    cr_expect_eq(st, PL_OK, "%s: %s", pl_status_name(st), pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
