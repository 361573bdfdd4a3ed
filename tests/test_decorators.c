/*
 * test_decorators.c -- loop(max_turns), invoke_action and user decorators
 * (docs/design.md §11; core/ext/decorators.c and the chain in
 * core/replay/chain.c).
 *
 * A scripted fake "model" policy stands in for an LLM: it is deterministic
 * given its ledger (it counts the action_result steps there to know its turn)
 * and returns one action_call per turn from payload.script, then a final text
 * that summarises the results it saw.  An "agent" root calls it with
 * loop(max_turns) + invoke_action.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static pl_engine *open_engine(const pl_registry *reg)
{
    return t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
}

static pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, e, id, path);
    cr_assert_eq(st, PL_OK, "pl_run_ledger(%s, %s): %s", id, path, pl_errmsg());
    return l;
}

static void expect_str(const char *got, const char *want)
{
    cr_expect(got && strcmp(got, want) == 0, "expected \"%s\", got \"%s\"",
              want, got ? got : "(null)");
}

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ------------------------------------------------------------------------ */
/* The scripted model                                                       */
/* ------------------------------------------------------------------------ */

/* What the model saw at the start of each of its turns. */
typedef struct turn_view {
    size_t n;
    pl_step_type types[16];
    char ids[16][32];
} turn_view;

static turn_view g_turns[32];
static int g_model_runs;

/* "done: r1,r2,..." where each ri is a sum, an error code, or "ok". */
static void summarise(const pl_steps *l, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "done:");
    for (size_t i = 0; i < pl_steps_count(l) && len < cap; i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_RESULT)
            continue;
        const cJSON *p = pl_step_payload(s);
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(p, "sum");
        if (pl_step_is_error(s))
            len += (size_t)snprintf(buf + len, cap - len, " %s",
                                    pl_step_error_code(s));
        else if (cJSON_IsNumber(sum))
            len += (size_t)snprintf(buf + len, cap - len, " %g",
                                    sum->valuedouble);
        else
            len += (size_t)snprintf(buf + len, cap - len, " ok");
    }
}

static int model(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    size_t turn = 0;
    turn_view *v = &g_turns[g_model_runs & 31];
    g_model_runs++;
    memset(v, 0, sizeof *v);
    v->n = pl_steps_count(l);
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (i < 16) {
            v->types[i] = pl_step_type_of(s);
            snprintf(v->ids[i], sizeof v->ids[i], "%s", pl_step_id(s));
        }
        if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT)
            turn++;
    }
    const cJSON *script = cJSON_GetObjectItemCaseSensitive(a->payload,
                                                           "script");
    const cJSON *entry = cJSON_GetArrayItem(script, (int)turn);
    if (entry) {
        const cJSON *raw = cJSON_GetObjectItemCaseSensitive(entry, "raw");
        if (raw)
            st = pl_steps_add(out, PL_STEP_ACTION_CALL, NULL, raw);
        else
            st = pl_steps_add_call(out, json_str(entry, "policy"),
                                   cJSON_GetObjectItemCaseSensitive(entry,
                                                                    "payload"));
    } else {
        char buf[512];
        summarise(l, buf, sizeof buf);
        st = pl_steps_add_text(out, NULL, buf);
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* The agent, tools and a user decorator                                    */
/* ------------------------------------------------------------------------ */

static bool g_result_is_error;
static char g_result_code[64];

/*
 * agent: payload {"max_turns": n, "actions": [...], "script": [...]}.
 * Calls "model" with loop(max_turns) + invoke_action; returns the model's
 * result payload.
 */
static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(a->payload, "max_turns");
    const cJSON *acts = cJSON_GetObjectItemCaseSensitive(a->payload, "actions");
    const char *names[8];
    size_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, acts)
    {
        if (n < 8 && cJSON_IsString(it))
            names[n++] = it->valuestring;
    }
    cJSON *mp = cJSON_CreateObject();
    cJSON_AddItemToObject(
        mp, "script",
        cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a->payload, "script"),
                        1));
    pl_decorator decos[2];
    cr_assert_eq(pl_decorator_loop(&decos[0], cJSON_IsNumber(mt)
                                                  ? (unsigned)mt->valueint
                                                  : 10),
                 PL_OK);
    cr_assert_eq(pl_decorator_invoke_action(&decos[1]), PL_OK);
    pl_action call = {PL_ACTION_VERSION, "model", mp, names, n, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, decos, 2);
    cJSON_Delete(mp);
    if (st && st != PL_ERESULT)
        return st;
    g_result_is_error = pl_step_is_error(res);
    snprintf(g_result_code, sizeof g_result_code, "%s",
             pl_step_error_code(res) ? pl_step_error_code(res) : "");
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* flaky: fails the run (PL_EPOLICY) while g_flaky_broken. */
static bool g_flaky_broken;
static int g_flaky_runs;

static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    g_flaky_runs++;
    if (g_flaky_broken)
        return PL_EPOLICY;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddTrueToObject(r, "ok");
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* human: suspends; returns {"answer": ...}. */
static int human(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *ans = NULL;
    int st = pl_ctx_suspend(&ans, ctx, a->payload);
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "answer", ans);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/*
 * audit: a user decorator.  It records a text step of its own
 * ({"audit": g_audit_note, "policy": ...}) and adds "stamped": true to the
 * payload the wrapped policy sees.
 */
static const char *g_audit_note = "checked";
static int g_audit_runs;
static char g_audit_ids[8][32];

static int audit_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                    const pl_decorator *self, pl_next *next)
{
    g_audit_runs++;
    cJSON *note = cJSON_CreateObject();
    cJSON_AddStringToObject(note, "audit", g_audit_note);
    cJSON_AddStringToObject(note, "policy", action->policy);
    cJSON_AddNumberToObject(note, "arg", (double)self->arg);
    int st = pl_ctx_emit(ctx, out, PL_STEP_TEXT, "audit", note);
    cJSON_Delete(note);
    if (st)
        return st;
    const pl_step *mine = pl_steps_at(out, pl_steps_count(out) - 1);
    snprintf(g_audit_ids[(g_audit_runs - 1) & 7], sizeof g_audit_ids[0], "%s",
             pl_step_id(mine));
    cJSON *p = action->payload ? cJSON_Duplicate(action->payload, 1)
                               : cJSON_CreateObject();
    cJSON_AddTrueToObject(p, "stamped");
    pl_action changed = *action;
    changed.payload = p;
    st = pl_next_call(next, ctx, &changed, out);
    cJSON_Delete(p);
    return st;
}

/* audited: calls payload.call (default "echo") wrapped in audit. */
static int audited(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *name = json_str(a->payload, "call");
    pl_decorator d = {PL_DECORATOR_VERSION, audit_fn, "audit", 42, NULL};
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "question", "ok?");
    pl_action call = {
        PL_ACTION_VERSION, name ? name : "echo", p, NULL, 0, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, &d, 1);
    cJSON_Delete(p);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* emitter: a policy (not a decorator) that records a step with
 * pl_ctx_emit into its own output list, then returns a result. */
static int emitter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "note", "thinking");
    int st = pl_ctx_emit(ctx, out, PL_STEP_TEXT, NULL, p);
    cJSON_Delete(p);
    if (st)
        return st;
    return pl_steps_add_text(out, NULL, "answer");
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"model", model}, {"agent", agent},     {"flaky", flaky},
                {"human", human}, {"audited", audited}, {"emitter", emitter}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

#define TWO_ADDS                                                               \
    "\"script\": [{\"policy\": \"add\", \"payload\": {\"a\": 1, \"b\": 2}},"   \
    "             {\"policy\": \"add\", \"payload\": {\"a\": 3, \"b\": 4}}]"

/* ------------------------------------------------------------------------ */
/* loop + invoke_action                                                     */
/* ------------------------------------------------------------------------ */

Test(decorators, loop_runs_tool_calls_until_the_model_answers)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent", "{\"max_turns\": 5, \"actions\": [\"add\"], " TWO_ADDS "}",
        "d-loop");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    expect_str(json_str(pl_outcome_result(o), "text"), "done: 3 7");
    cr_expect_eq(t_calls.add, 2);
    cr_expect_eq(g_model_runs, 3, "two turns with calls, one final");
    cr_expect(!g_result_is_error);
    cr_expect_eq(o->calls_executed, 3, "model, add, add");

    /* the model's ledger: its calls, their results, its answer */
    pl_steps *l = ledger(e, "d-loop", "0.0");
    cr_assert_eq(pl_steps_count(l), 5);
    const pl_step_type types[] = {PL_STEP_ACTION_CALL, PL_STEP_ACTION_RESULT,
                                  PL_STEP_ACTION_CALL, PL_STEP_ACTION_RESULT,
                                  PL_STEP_TEXT};
    const char *actors[] = {"model", "add", "model", "add", "model"};
    for (size_t i = 0; i < 5; i++) {
        const pl_step *s = pl_steps_at(l, i);
        cr_expect_eq(pl_step_type_of(s), types[i], "step %zu", i);
        expect_str(pl_step_actor(s), actors[i]);
    }
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(
        pl_step_payload(pl_steps_at(l, 3)), "sum");
    cr_expect(cJSON_IsNumber(sum) && sum->valuedouble == 7);
    pl_steps_free(l);
    /* each tool ran in its own invocation, named by its call's position */
    l = ledger(e, "d-loop", "0.0.0");
    cr_expect_eq(pl_steps_count(l), 1);
    pl_steps_free(l);
    l = ledger(e, "d-loop", "0.0.2");
    cr_expect_eq(pl_steps_count(l), 1);
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "d-loop"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, turns_share_one_ledger)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent", "{\"max_turns\": 5, \"actions\": [\"add\"], " TWO_ADDS "}",
        "d-share");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_assert_eq(g_model_runs, 3);
    cr_expect_eq(g_turns[0].n, 0, "turn 1 starts from an empty ledger");
    cr_assert_eq(g_turns[1].n, 2, "turn 2 sees turn 1's call and result");
    cr_expect_eq(g_turns[1].types[0], PL_STEP_ACTION_CALL);
    cr_expect_eq(g_turns[1].types[1], PL_STEP_ACTION_RESULT);
    expect_str(g_turns[1].ids[0], "0.0:0");
    expect_str(g_turns[1].ids[1], "0.0:1");
    cr_assert_eq(g_turns[2].n, 4, "turn 3 sees both turns");
    expect_str(g_turns[2].ids[3], "0.0:3");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, exhausting_max_turns_is_a_recorded_budget_error)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"max_turns\": 2, \"actions\": [\"add\"], \"script\": ["
        "{\"policy\": \"add\", \"payload\": {\"a\": 1, \"b\": 1}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 2, \"b\": 2}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 3, \"b\": 3}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 4, \"b\": 4}}]}",
        "d-budget");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "not a failed run: %s",
                 o->reason);
    cr_expect(g_result_is_error, "the caller gets an error result");
    expect_str(g_result_code, PL_ERR_BUDGET_EXCEEDED);
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")));
    expect_str(json_str(r, "code"), PL_ERR_BUDGET_EXCEEDED);
    expect_has(json_str(r, "message"), "max_turns=2");
    cr_expect_eq(g_model_runs, 2);
    cr_expect_eq(t_calls.add, 2, "the calls of both turns ran");

    /* recorded: an error step at the end of the model's ledger, and the
     * action_result in the caller's */
    pl_steps *l = ledger(e, "d-budget", "0.0");
    cr_assert_eq(pl_steps_count(l), 5);
    const pl_step *last = pl_steps_at(l, 4);
    cr_expect_eq(pl_step_type_of(last), PL_STEP_ERROR);
    expect_str(pl_step_actor(last), "loop");
    expect_str(pl_step_id(last), "0.0:4");
    expect_str(pl_step_error_code(last), PL_ERR_BUDGET_EXCEEDED);
    pl_steps_free(l);
    l = ledger(e, "d-budget", "0");
    const pl_step *res = pl_steps_at(l, 1);
    cr_assert_not_null(res);
    cr_expect_eq(pl_step_type_of(res), PL_STEP_ACTION_RESULT);
    expect_str(pl_step_error_code(res), PL_ERR_BUDGET_EXCEEDED);
    pl_steps_free(l);

    /* replay reaches the same outcome without executing anything */
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_continue(&o2, e, "d-budget", NULL), PL_OK);
    cr_expect_eq(o2->calls_executed, 0);
    char *a = t_text(pl_outcome_result(o)), *b = t_text(pl_outcome_result(o2));
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, loop_zero_runs_no_turn)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent", "{\"max_turns\": 0, \"actions\": [\"add\"], " TWO_ADDS "}",
        "d-zero");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(g_model_runs, 0, "zero turns: the model never runs");
    cr_expect_eq(t_calls.add, 0);
    cr_expect(g_result_is_error);
    expect_str(g_result_code, PL_ERR_BUDGET_EXCEEDED);
    pl_steps *l = ledger(e, "d-zero", "0.0");
    cr_expect_eq(pl_steps_count(l), 1, "only the budget error");
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 0)), PL_STEP_ERROR);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, action_outside_the_allowed_set_is_not_allowed)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"actions\": [\"add\"], \"script\": ["
        "{\"policy\": \"echo\", \"payload\": {\"secret\": 1}}]}",
        "d-deny");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(t_calls.echo, 0, "echo was never called");
    expect_str(json_str(pl_outcome_result(o), "text"), "done: NotAllowed");

    pl_steps *l = ledger(e, "d-deny", "0.0");
    cr_assert_eq(pl_steps_count(l), 3);
    const pl_step *res = pl_steps_at(l, 1);
    cr_expect_eq(pl_step_type_of(res), PL_STEP_ACTION_RESULT);
    cr_expect(pl_step_is_error(res));
    expect_str(pl_step_error_code(res), PL_ERR_NOT_ALLOWED);
    expect_has(json_str(pl_step_payload(res), "message"), "echo");
    pl_steps_free(l);
    l = ledger(e, "d-deny", "0.0.0");
    cr_expect_eq(pl_steps_count(l), 0, "no invocation was opened");
    pl_steps_free(l);

    /* no allowed set at all: nothing is allowed */
    pl_outcome *o2 = t_start(
        e, "agent",
        "{\"script\": [{\"policy\": \"add\", \"payload\": {\"a\": 1, "
        "\"b\": 1}}]}",
        "d-deny-all");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    expect_str(json_str(pl_outcome_result(o2), "text"), "done: NotAllowed");
    cr_expect_eq(t_calls.add, 0);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, unregistered_allowed_action_is_not_found)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent",
        "{\"actions\": [\"ghost\", \"add\"], \"script\": ["
        "{\"policy\": \"ghost\", \"payload\": {}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 2, \"b\": 3}}]}",
        "d-ghost");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    expect_str(json_str(pl_outcome_result(o), "text"), "done: NotFound 5");
    pl_steps *l = ledger(e, "d-ghost", "0.0");
    cr_assert_geq(pl_steps_count(l), 2);
    const pl_step *res = pl_steps_at(l, 1);
    expect_str(pl_step_error_code(res), PL_ERR_NOT_FOUND);
    expect_str(pl_step_actor(res), "ghost");
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, malformed_action_call_is_invalid_input)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(e, "agent",
                            "{\"actions\": [\"add\"], \"script\": ["
                            "{\"raw\": {\"oops\": 1}},"
                            "{\"raw\": {\"policy\": \"add\"}},"
                            "{\"raw\": {\"policy\": \"add\", \"payload\": 5}},"
                            "{\"raw\": {\"policy\": 7, \"payload\": {}}}]}",
                            "d-bad");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    expect_str(json_str(pl_outcome_result(o), "text"),
               "done: InvalidInput InvalidInput InvalidInput InvalidInput");
    cr_expect_eq(t_calls.add, 0, "a malformed call is never a call");
    pl_steps *l = ledger(e, "d-bad", "0.0");
    cr_assert_eq(pl_steps_count(l), 9);
    for (size_t i = 1; i < 8; i += 2) {
        const pl_step *res = pl_steps_at(l, i);
        cr_expect_eq(pl_step_type_of(res), PL_STEP_ACTION_RESULT);
        expect_str(pl_step_error_code(res), PL_ERR_INVALID_INPUT);
    }
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "d-bad"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Replay of an agent                                                       */
/* ------------------------------------------------------------------------ */

Test(decorators, completed_agent_replays_from_the_ledger)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(
        e, "agent", "{\"max_turns\": 5, \"actions\": [\"add\"], " TWO_ADDS "}",
        "d-replay");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    int model_runs = g_model_runs;
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_continue(&o2, e, "d-replay", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(o2->calls_executed, 0);
    cr_expect_eq(o2->calls_served, 1, "the model call, with its whole loop");
    cr_expect_eq(o2->steps_appended, 0);
    cr_expect_eq(t_calls.add, 2);
    cr_expect_eq(g_model_runs, model_runs, "no model call is paid twice");
    char *a = t_text(pl_outcome_result(o)), *b = t_text(pl_outcome_result(o2));
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, interrupted_agent_replays_its_tool_calls_from_the_ledger)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    const char *payload =
        "{\"max_turns\": 10, \"actions\": [\"add\", \"flaky\"], \"script\": ["
        "{\"policy\": \"add\", \"payload\": {\"a\": 1, \"b\": 1}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 2, \"b\": 2}},"
        "{\"policy\": \"flaky\", \"payload\": {}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 3, \"b\": 3}}]}";
    g_flaky_broken = true;
    pl_outcome *o1 = t_start(e, "agent", payload, "d-crash");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    cr_expect_eq(o1->error, PL_EPOLICY);
    expect_has(o1->reason, "'flaky'");
    cr_expect_eq(t_calls.add, 2);
    cr_expect_eq(g_flaky_runs, 1);

    g_flaky_broken = false;
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_continue(&o2, e, "d-crash", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    expect_str(json_str(pl_outcome_result(o2), "text"), "done: 2 4 ok 6");
    cr_expect_eq(o2->calls_served, 2, "both earlier adds came from the ledger");
    cr_expect_eq(o2->calls_executed, 3, "flaky, the last add, the model");
    cr_expect_eq(t_calls.add, 3, "only the new add ran");
    cr_expect_eq(g_flaky_runs, 2);
    cr_expect_eq(pl_run_verify(e, "d-crash"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, agent_suspends_inside_the_loop_and_resumes)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    const char *payload =
        "{\"actions\": [\"add\", \"human\"], \"script\": ["
        "{\"policy\": \"add\", \"payload\": {\"a\": 1, \"b\": 1}},"
        "{\"policy\": \"human\", \"payload\": {\"q\": \"continue?\"}},"
        "{\"policy\": \"add\", \"payload\": {\"a\": 5, \"b\": 5}}]}";
    pl_outcome *o1 = t_start(e, "agent", payload, "d-susp");
    cr_assert_eq(o1->status, PL_RUN_SUSPENDED, "%s", o1->reason);
    expect_str(o1->suspended_path, "0.0.2");
    cr_expect_eq(t_calls.add, 1);
    int model_runs = g_model_runs;

    cJSON *ans = t_json("{\"yes\": true}");
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_resume(&o2, e, "d-susp", o1->resume_token, ans), PL_OK,
                 "%s", pl_errmsg());
    cJSON_Delete(ans);
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    expect_str(json_str(pl_outcome_result(o2), "text"), "done: 2 ok 10");
    cr_expect_eq(t_calls.add, 2, "the first add was served");
    cr_expect_eq(o2->calls_served, 1);
    cr_expect_eq(g_model_runs, model_runs + 4, "turns 1-2 replayed, 3-4 new");
    cr_expect_eq(pl_run_verify(e, "d-susp"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* A user decorator                                                         */
/* ------------------------------------------------------------------------ */

Test(decorators, user_decorator_wraps_a_call_and_emits_a_step)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(e, "audited", "{\"call\": \"echo\"}", "d-user");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(g_audit_runs, 1);
    expect_str(g_audit_ids[0], "0.0:0");
    /* the wrapped policy saw the changed action */
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "stamped")));
    expect_str(json_str(r, "question"), "ok?");

    pl_steps *l = ledger(e, "d-user", "0.0");
    cr_assert_eq(pl_steps_count(l), 2);
    const pl_step *s = pl_steps_at(l, 0);
    cr_expect_eq(pl_step_type_of(s), PL_STEP_TEXT);
    expect_str(pl_step_actor(s), "audit");
    expect_str(json_str(pl_step_payload(s), "audit"), "checked");
    const cJSON *arg = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                        "arg");
    cr_expect(cJSON_IsNumber(arg) && arg->valueint == 42, "self->arg");
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 1)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, user_decorator_step_is_replayed_consistently)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    cJSON *answer = t_json("{\"yes\": true}");

    /* the decorated invocation suspends; resuming replays the decorator */
    g_audit_note = "checked";
    pl_outcome *o1 = t_start(e, "audited", "{\"call\": \"human\"}", "d-rep");
    cr_assert_eq(o1->status, PL_RUN_SUSPENDED, "%s", o1->reason);
    expect_str(o1->suspended_path, "0.0");
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_resume(&o2, e, "d-rep", o1->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(g_audit_runs, 2);
    expect_str(g_audit_ids[1], g_audit_ids[0]);
    cr_expect_eq(o2->steps_replayed >= 3, true,
                 "the audit step, the call "
                 "and the suspend replayed");
    pl_steps *l = ledger(e, "d-rep", "0.0");
    cr_assert_eq(pl_steps_count(l), 4);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 0)), PL_STEP_TEXT);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 1)), PL_STEP_SUSPEND);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 2)), PL_STEP_RESUME);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 3)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "d-rep"), PL_OK, "%s", pl_errmsg());

    /* a decorator that emits something else on replay diverges */
    pl_outcome *o3 = t_start(e, "audited", "{\"call\": \"human\"}", "d-nd");
    cr_assert_eq(o3->status, PL_RUN_SUSPENDED);
    g_audit_note = "rechecked";
    pl_outcome *o4 = NULL;
    cr_assert_eq(pl_run_resume(&o4, e, "d-nd", o3->resume_token, answer), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(o4->status, PL_RUN_FAILED);
    cr_expect_eq(o4->error, PL_ENONDET);
    expect_has(o4->reason, "d-nd");
    expect_has(o4->reason, "0.0:0");
    expect_has(o4->reason, "'audit'");
    expect_has(o4->reason, "\"checked\"");
    expect_has(o4->reason, "\"rechecked\"");
    g_audit_note = "checked";
    cJSON_Delete(answer);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_outcome_free(o4);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(decorators, ctx_emit_records_a_step_once)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(e, "emitter", NULL, "d-emit");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_steps *l = ledger(e, "d-emit", "0");
    /* "record a step in this invocation's ledger ... and add it to out":
     * one step for the emit, one for the answer */
    cr_expect_eq(pl_steps_count(l), 2,
                 "the emitted step is recorded %zu "
                 "times",
                 pl_steps_count(l) - 1);
    if (pl_steps_count(l) >= 2) {
        expect_str(json_str(pl_step_payload(pl_steps_at(l, 0)), "note"),
                   "thinking");
        expect_str(json_str(pl_step_payload(pl_steps_at(l, 1)), "text"),
                   "answer");
    }
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
