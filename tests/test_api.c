/*
 * test_api.c -- the API's guard rails and short forms: stale and foreign
 * contexts are refused, pl_ctx_invoke() and PL_ERESULT, the versioned
 * input structs, the incremental ledger view, step lists for decorators,
 * and pl_run_head().
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

/* foreign: the caller's context, used inside its callee. */
static int foreign_child(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    int64_t ms = 0;
    g_stale_status = pl_ctx_now(&ms, g_kept);
    snprintf(g_stale_msg, sizeof g_stale_msg, "%s", pl_errmsg());
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
    pl_decorator d = pl_decorator_invoke_action();
    d.version = 0;
    g_version_status[1] = pl_ctx_call(NULL, ctx, &call, &d, 1);
    (void)out;
    return g_version_status[1];
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
    } defs[] = {{"keeper", keeper},     {"stale", stale},
                {"foreign", foreign},   {"foreign_child", foreign_child},
                {"invoker", invoker},   {"viewer", viewer},
                {"versions", versions}, {"invokerf", invokerf}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
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
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
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
    char *text = t_text(t_result(o));
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
