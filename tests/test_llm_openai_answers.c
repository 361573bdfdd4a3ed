/*
 * test_llm_openai_answers.c -- LLM policies against an OpenAI-compatible
 * server on loopback (tests/llm_server.py): malformed answers (unknown
 * tools, arguments not JSON or not an object), reprompts and their bounds,
 * output schemas and structured answers, time budgets, each request
 * recorded with the digest of what was sent, and runs on a pool.
 */
#include "llm_support.h"
#include "support_llm_openai.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */

/* Malformed answers                                                        */
/* ------------------------------------------------------------------------ */

Test(llm_openai, unknown_tool_fails_fast)
{
    serve(script(1, answer(NULL, "c9", "rm_rf", "{}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[\"add\"]", "unk");
    expect_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION, "'rm_rf'");
    cr_expect_eq(t_calls.add, 0);
    cr_expect_eq(t_server_requests(&g_srv), 1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, arguments_not_json_fail_fast)
{
    serve(script(1, answer(NULL, "c1", "add", "{\"a\": 1,")));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[\"add\"]", "args");
    expect_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION, "not JSON");
    expect_has(t_str(pl_outcome_result(out), "message"), "{\"a\": 1,");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, arguments_not_an_object_fail_fast)
{
    serve(script(1, answer(NULL, "c1", "add", "[1, 2]")));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[\"add\"]", "shape");
    expect_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION, "not a JSON object");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, reprompt_recovers_and_is_recorded)
{
    serve(script(3, answer(NULL, "c1", "add", "oops"),
                 answer(NULL, "c2", "add", "{\"a\":2,\"b\":2}"),
                 answer("4", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.malformed = PL_LLM_MALFORMED_REPROMPT;
    o.reprompt_limit = 1;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "2+2?", "[\"add\"]", "rp");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    expect_str(t_str(pl_outcome_result(out), "text"), "4");
    cr_expect_eq(t_calls.add, 1);
    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 3);
    /* the re-prompt: the user's message names the fault and the catalog */
    const cJSON *msgs = at(req(log, 1), "messages");
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    expect_str(t_str(last, "role"), "user");
    expect_has(t_str(last, "content"), "not JSON");
    expect_has(t_str(last, "content"), "- add");
    cJSON_Delete(log);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "rp"), PL_OK);
    cr_expect_eq(tok.exchanges, 3);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, reprompts_are_bounded)
{
    serve(script(4, answer(NULL, "c1", "nope", "{}"),
                 answer(NULL, "c2", "nope", "{}"),
                 answer(NULL, "c3", "nope", "{}"),
                 answer(NULL, "c4", "nope", "{}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.malformed = PL_LLM_MALFORMED_REPROMPT;
    o.reprompt_limit = 2;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[\"add\"]", "rpmax");
    expect_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION, "'nope'");
    cr_expect_eq(t_server_requests(&g_srv), 3, "1 call + 2 re-prompts");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, output_schema_goes_to_the_server_and_is_checked)
{
    serve(script(1, answer("{\"city\": \"Oslo\"}", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.output_schema = "{\"type\":\"object\",\"required\":[\"city\",\"temp\"]}";
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "weather?", "[]", "schema");
    expect_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION,
                 "at the top (required): the required property \"temp\"");
    cJSON *log = t_server_log(&g_srv);
    const cJSON *rf = at(req(log, 0), "response_format");
    expect_str(t_str(rf, "type"), "json_schema");
    expect_str(t_str(at(at(rf, "json_schema"), "schema"), "type"), "object");
    cJSON_Delete(log);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* Registration                                                             */
/* ------------------------------------------------------------------------ */

Test(llm_openai, bad_model_urls_are_clear_errors)
{
    const char *bad[][2] = {
        {"gpt-4o", "SCHEME://"},
        {"foo://bar", "unknown scheme 'foo'"},
        {"openai://", "openai://MODEL"},
        {"openai://a/b", "openai://MODEL"},
        {"openai+http://127.0.0.1:8080/v1", "no #MODEL"},
        {"openai+http://#m", "no host"},
        {"openai+http://127.0.0.1/v1#", "no #MODEL"},
        {"scripted://", "no script path"},
        {"://x", "SCHEME://"},
    };
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(pl_llm_register(reg, "m", bad[i][0], NULL, NULL),
                     PL_EINVAL, "%s", bad[i][0]);
        expect_has(pl_errmsg(), bad[i][1]);
    }
    cr_expect_eq(pl_registry_count(reg), 0);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.version = 99;
    cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, &o), PL_EINVAL);
    o = (pl_llm_options)PL_LLM_OPTIONS_INIT;
    o.output_schema = "[1]";
    cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, &o), PL_EINVAL);
    o.output_schema = "{\"type\": 5}";
    cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, &o), PL_EINVAL);
    expect_has(pl_errmsg(), "output_schema");
    o.output_schema = NULL;
    o.base_url = "ftp://x";
    cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, &o), PL_EINVAL);
    /* a base URL without a host */
    const char *hostless[] = {"http://", "https:///v1", "http://:8080/v1"};
    for (size_t i = 0; i < sizeof hostless / sizeof hostless[0]; i++) {
        o.base_url = hostless[i];
        cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, &o),
                     PL_EINVAL, "%s", hostless[i]);
    }
    o.base_url = NULL;
    /* a key's variable that no variable can be: refused here, not a run
     * failing at its first model call ("set  in the environment") or a
     * server asked without the key that was meant */
    const char *no_var[] = {"", "KEY=x"};
    for (size_t i = 0; i < sizeof no_var / sizeof no_var[0]; i++) {
        o.api_key_env = no_var[i];
        cr_expect_eq(pl_llm_register(reg, "m", "openai+http://h:1/v1#x", NULL,
                                     &o),
                     PL_EINVAL, "'%s'", no_var[i]);
        expect_has(pl_errmsg(), "api_key_env");
    }
    o.api_key_env = NULL;
    cr_expect_eq(pl_llm_register(NULL, "m", "openai://x", NULL, NULL),
                 PL_EINVAL);
    cr_expect_eq(pl_llm_register(reg, "m", "openai+http://h:1/v1#x", NULL,
                                 NULL),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, NULL),
                 PL_EEXIST);
    cr_expect_eq(pl_registry_count(reg), 1);
    pl_registry_free(reg);
}

Test(llm_openai, structured_answer_is_parsed_when_it_fits)
{
    serve(script(1, answer("{\"city\": \"Oslo\", \"temp\": 4}", NULL, NULL,
                           NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.output_schema = "{\"type\":\"object\",\"required\":[\"city\",\"temp\"]}";
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "weather?", "[]", "schema-ok");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    const cJSON *json = at(pl_outcome_result(out), "json");
    expect_str(t_str(json, "city"), "Oslo");
    cr_expect_eq(at(json, "temp")->valuedouble, 4);
    expect_str(t_str(pl_outcome_result(out), "text"),
               "{\"city\": \"Oslo\", \"temp\": 4}");
    /* a schema that does not compile, or is no object: at registration */
    const char *bad[] = {"{\"$ref\": \"#/definitions/none\"}",
                         "{\"unevaluatedProperties\": false}", "{"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.output_schema = bad[i];
        cr_expect_eq(pl_llm_register(reg, "llm2", "openai://m", NULL, &o),
                     PL_EINVAL, "%s", bad[i]);
        cr_expect_null(pl_registry_find(reg, "llm2"));
    }
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, with_tools_the_structured_answer_comes_by_submit)
{
    serve(script(2, answer(NULL, "c1", "add", "{\"a\":20,\"b\":1}"),
                 answer(NULL, "c2", "submit", "{\"total\":21}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.output_schema = "{\"type\":\"object\",\"properties\":{\"total\":"
                      "{\"type\":\"number\"}},\"required\":[\"total\"]}";
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "20+1?", "[\"add\"]", "submit");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    cr_expect_eq(at(at(pl_outcome_result(out), "json"), "total")->valuedouble,
                 21);
    /* the final step's "text" is the JSON text of its "json" */
    cJSON *text = cJSON_Parse(t_str(pl_outcome_result(out), "text"));
    cr_expect(cJSON_Compare(text, at(pl_outcome_result(out), "json"), 1), "%s",
              t_text(pl_outcome_result(out)));
    cJSON_Delete(text);
    cr_expect_eq(t_calls.add, 1);
    cJSON *log = t_server_log(&g_srv);
    const cJSON *tools = at(req(log, 0), "tools");
    cr_assert_eq(cJSON_GetArraySize(tools), 2);
    const cJSON *f = at(cJSON_GetArrayItem(tools, 1), "function");
    expect_str(t_str(f, "name"), "submit");
    const cJSON *r0 = cJSON_GetArrayItem(at(at(f, "parameters"), "required"),
                                         0);
    expect_str(cJSON_IsString(r0) ? r0->valuestring : NULL, "total");
    cr_expect_null(at(req(log, 0), "response_format"),
                   "with tools the schema goes by submit");
    cJSON_Delete(log);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, a_retry_after_past_the_time_budget_is_not_waited_for)
{
    serve(script(2,
                 raw("{\"status\": 429, \"headers\": {\"Retry-After\": "
                     "\"3600\"}, \"body\": {\"error\": {\"message\": "
                     "\"come back in an hour\"}}}"),
                 answer("too late", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.total_timeout_ms = 3000;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "ra");
    expect_error(out, PL_ERR_RATE_LIMITED, "come back in an hour");
    cr_expect_eq(t_server_requests(&g_srv), 1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* Turns: re-prompts in the budget, the request as sent, replay's check     */
/* ------------------------------------------------------------------------ */

Test(llm_openai, reprompts_count_against_the_loops_turns)
{
    serve(script(4, answer(NULL, "c1", "add", "oops"),
                 answer(NULL, "c2", "add", "{\"a\": 1,"),
                 answer("4", NULL, NULL, NULL),
                 answer("never asked", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.malformed = PL_LLM_MALFORMED_REPROMPT;
    o.reprompt_limit = 5; /* the loop's budget binds first */
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_start(e, "agent",
                              "{\"text\": \"2+2?\", \"actions\": [\"add\"], "
                              "\"max_turns\": 3}",
                              "rp3");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    expect_str(t_str(pl_outcome_result(out), "text"), "4");
    cr_expect_eq(t_server_requests(&g_srv), 3, "two re-prompts, one answer");
    pl_outcome_free(out);

    /* the re-prompts are turns of the ledger: a replay makes no call */
    cr_assert_eq(pl_run_continue(&out, e, "rp3", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(out->status, PL_RUN_COMPLETED);
    cr_expect_eq(t_server_requests(&g_srv), 3);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, reprompts_past_the_loops_turns_exceed_its_budget)
{
    serve(script(4, answer(NULL, "c1", "nope", "{}"),
                 answer(NULL, "c2", "nope", "{}"),
                 answer(NULL, "c3", "nope", "{}"),
                 answer("never asked", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.malformed = PL_LLM_MALFORMED_REPROMPT;
    o.reprompt_limit = 5;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_start(e, "agent",
                              "{\"text\": \"hi\", \"actions\": [\"add\"], "
                              "\"max_turns\": 3}",
                              "rpb");
    expect_error(out, PL_ERR_BUDGET_EXCEEDED, "max_turns=3");
    cr_expect_eq(t_server_requests(&g_srv), 3, "within the loop's 3 turns");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A 200 whose message calls add twice: {"a": a1, "b": 1} and {"a": a2, ...}. */
static cJSON *two_calls(const char *text, int a1, int a2)
{
    char body[900];
    snprintf(body, sizeof body,
             "{\"status\": 200, \"body\": {\"choices\": [{\"message\": "
             "{\"role\": \"assistant\", \"content\": %s%s%s, \"tool_calls\": "
             "[{\"id\": \"x%d\", \"type\": \"function\", \"function\": "
             "{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": %d, "
             "\\\"b\\\": 1}\"}}, {\"id\": \"y%d\", \"type\": \"function\", "
             "\"function\": {\"name\": \"add\", \"arguments\": "
             "\"{\\\"a\\\": %d, \\\"b\\\": 1}\"}}]}, \"finish_reason\": "
             "\"tool_calls\"}], \"usage\": {\"prompt_tokens\": 9, "
             "\"completion_tokens\": 3}}}",
             text ? "\"" : "", text ? text : "null", text ? "\"" : "", a1, a1,
             a2, a2);
    return raw(body);
}

Test(llm_openai, each_request_is_recorded_with_the_digest_of_what_was_sent)
{
    serve(script(4, two_calls(NULL, 1, 2), two_calls("and more", 3, 4),
                 answer(NULL, "z", "add", "{\"a\": 5, \"b\": 1}"),
                 answer("done", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "add them", "[\"add\"]", "dg");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "done");
    cr_expect_eq(t_calls.add, 5);
    pl_outcome_free(out);

    /* the n-th exchange holds the SHA-256 and length of the n-th body */
    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 4);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "dg", "0.0"), PL_OK, "%s", pl_errmsg());
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT)
            continue;
        const cJSON *v = at(pl_step_payload(s), "value");
        const cJSON *sent = cJSON_GetArrayItem(log, n++);
        expect_str(t_str(v, "request_sha256"), t_str(sent, "sha256"));
        cr_expect_eq(at(v, "request_bytes")->valuedouble,
                     at(sent, "bytes")->valuedouble);
    }
    cr_expect_eq(n, 4);
    /* the last request carries the whole conversation, in order */
    const cJSON *msgs = at(req(log, 3), "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 10,
                 "system, user, 2 x (assistant, "
                 "2 results), assistant, result");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 2), "role"), "assistant");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 3), "tool_call_id"), "x1");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 4), "tool_call_id"), "y2");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 5), "content"), "and more");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 9), "tool_call_id"), "z");
    pl_steps_free(l);
    cJSON_Delete(log);
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct diverged {
    int n;
    char payload[600], detail[600];
    uint64_t tokens[2]; /* the last completed call of "llm": in, out */
} diverged;

static void on_diverged(const pl_event *ev, void *user)
{
    diverged *d = user;
    if (ev->kind == PL_EVENT_CALL_COMPLETED && ev->policy &&
        strcmp(ev->policy, "llm") == 0) {
        d->tokens[0] = ev->tokens_in;
        d->tokens[1] = ev->tokens_out;
    }
    if (ev->kind != PL_EVENT_DIVERGED)
        return;
    d->n++;
    snprintf(d->payload, sizeof d->payload, "%s",
             ev->diff && ev->diff->new_payload ? ev->diff->new_payload : "");
    snprintf(d->detail, sizeof d->detail, "%s", ev->detail ? ev->detail : "");
}

/* Suspend run @p id at the model's first turn (it calls "approve"). */
static char *suspended_at_approval(const char *store, const pl_llm_options *o,
                                   const char *id)
{
    pl_registry *reg = t_llm_registry("openai://test-model", o);
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "ship?", "[\"approve\"]", id);
    cr_assert_eq(out->status, PL_RUN_SUSPENDED, "%s",
                 out->reason ? out->reason : "");
    char *token = strdup(out->resume_token);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    return token;
}

Test(llm_openai, a_changed_system_prompt_is_a_divergence_on_replay)
{
    serve(script(3, answer(NULL, "h1", "approve", "{}"),
                 answer(NULL, "h2", "approve", "{}"),
                 answer("shipped", NULL, NULL, NULL)));
    pl_llm_options o = opts();
    const char *store = t_store_path();
    char *changed = suspended_at_approval(store, &o, "changed");
    char *same = suspended_at_approval(store, &o, "same");
    cr_assert_eq(t_server_requests(&g_srv), 2);

    /* resumed under another system prompt: the recorded answer was to
     * another request, so it is not served */
    pl_registry *reg = t_llm_registry_prompt("openai://test-model",
                                             "You are verbose.", &o);
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    diverged d = {0};
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = on_diverged;
    eo.event_user = &d;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &eo), PL_OK, "%s", pl_errmsg());
    cJSON *yes = t_json("{\"approved\": true}");
    pl_outcome *out = NULL;
    int st = pl_run_resume(&out, e, "changed", changed, yes);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(out->status, PL_RUN_FAILED);
    cr_expect_eq(out->error, PL_ENONDET);
    expect_has(out->reason, "llm_exchange");
    expect_has(out->reason, "system prompt");
    cr_expect_eq(d.n, 1);
    expect_has(d.payload, "\"mismatch\"");
    expect_has(d.detail, "another request");
    cr_expect_eq(t_server_requests(&g_srv), 2, "nothing was sent");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);

    /* the same prompt replays, and goes on */
    reg = t_llm_registry("openai://test-model", &o);
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    d.n = 0;
    cr_assert_eq(pl_engine_open(&e, store, reg, &eo), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_resume(&out, e, "same", same, yes), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "shipped");
    cr_expect_eq(d.n, 0);
    cr_expect_eq(t_server_requests(&g_srv), 3);
    pl_outcome_free(out);
    cJSON_Delete(yes);
    free(changed);
    free(same);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int g_probe_calls;

/* Fails the run at its first call (a crash's stand-in), then succeeds. */
static int probe(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)user;
    if (g_probe_calls++ == 0)
        return pl_errorf(PL_EIO, "probe: the first call fails the run");
    return pl_steps_add_resultf(out, "{s:b}", "ok", 1);
}

/* Open @p store with the LLM policy and "probe" described as @p desc. */
static pl_engine *probe_engine(pl_registry **reg, const char *store,
                               const char *desc, diverged *d)
{
    pl_llm_options o = opts();
    *reg = t_llm_registry("openai://test-model", &o);
    pl_policy_def def = PL_POLICY_DEF_INIT;
    def.name = "probe";
    def.fn = probe;
    def.description = desc;
    cr_assert_eq(pl_registry_add(*reg, &def), PL_OK);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = on_diverged;
    eo.event_user = d;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, *reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    return e;
}

/* A turn replayed after a tool's description changed was asked another
 * request: a divergence, nothing sent; with the description as it was,
 * the run goes on. */
Test(llm_openai, a_changed_tool_description_is_a_divergence_on_replay)
{
    serve(script(2, answer(NULL, "p1", "probe", "{}"),
                 answer("probed", NULL, NULL, NULL)));
    const char *store = t_store_path();
    diverged d = {0};
    pl_registry *reg;
    g_probe_calls = 0;
    pl_engine *e = probe_engine(&reg, store, "Probe the system.", &d);
    pl_outcome *out = t_agent(e, "probe it", "[\"probe\"]", "desc");
    cr_expect_eq(out->status, PL_RUN_FAILED);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    for (int k = 0; k < 2; k++) {
        e = probe_engine(&reg, store,
                         k ? "Probe the system." : "Probe it, gently.", &d);
        cr_assert_eq(pl_run_continue(&out, e, "desc", NULL), PL_OK, "%s",
                     pl_errmsg());
        cr_expect_eq(out->status, k ? PL_RUN_COMPLETED : PL_RUN_FAILED,
                     "%d: %s", k, out->reason ? out->reason : "");
        if (!k) {
            cr_expect_eq(out->error, PL_ENONDET);
            expect_has(out->reason, "the tools");
            cr_expect_eq(d.n, 1);
            cr_expect_eq(t_server_requests(&g_srv), 1, "nothing was sent");
        } else {
            expect_str(t_str(pl_outcome_result(out), "text"), "probed");
            /* the call's event reports the invocation's tokens so far */
            cr_expect(d.tokens[0] == 40 && d.tokens[1] == 10, "%llu %llu",
                      (unsigned long long)d.tokens[0],
                      (unsigned long long)d.tokens[1]);
        }
        pl_outcome_free(out);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
    cr_expect_eq(t_server_requests(&g_srv), 2);
    cr_expect_eq(d.n, 1);
}

typedef struct pool_run {
    char id[16], payload[96];
    int status;
    char text[32];
} pool_run;

static void pool_agent(pl_engine *e, void *user)
{
    pool_run *r = user;
    cJSON *p = cJSON_Parse(r->payload);
    pl_action a = PL_ACTION_INIT;
    a.policy = "agent";
    a.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = r->id;
    pl_outcome *o = NULL;
    r->status = pl_run_start(&o, e, &a, &ro) ? -1 : (int)o->status;
    const char *t = o ? t_str(pl_outcome_result(o), "text") : NULL;
    snprintf(r->text, sizeof r->text, "%s", t ? t : "");
    pl_outcome_free(o);
    cJSON_Delete(p);
}

Test(llm_openai, runs_on_a_pool_build_their_own_requests)
{
    /* every run gets the same answers by its turn: add, add, done */
    char *s = script(3, answer(NULL, "p1", "add", "{\"a\": 1, \"b\": 1}"),
                     answer(NULL, "p2", "add", "{\"a\": 2, \"b\": 2}"),
                     answer("done", NULL, NULL, NULL));
    cJSON *sj = cJSON_Parse(s);
    cJSON_AddTrueToObject(sj, "by_turn");
    free(s);
    serve(t_text(sj));
    cJSON_Delete(sj);
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_pool *pool = NULL;
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 2;
    cr_assert_eq(pl_pool_new(&pool, e, &po), PL_OK, "%s", pl_errmsg());
    enum { N = 6 };
    pool_run runs[N];
    for (int i = 0; i < N; i++) {
        snprintf(runs[i].id, sizeof runs[i].id, "pool-%d", i);
        snprintf(runs[i].payload, sizeof runs[i].payload,
                 "{\"text\": \"run %d\", \"actions\": [\"add\"]}", i);
        cr_assert_eq(pl_pool_submit(pool, pool_agent, &runs[i]), PL_OK);
    }
    cr_assert_eq(pl_pool_wait(pool), PL_OK);
    pl_pool_free(pool);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(runs[i].status, PL_RUN_COMPLETED, "%s", runs[i].id);
        expect_str(runs[i].text, "done");
    }
    /* each request carries its own run's conversation, turn by turn */
    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 3 * N);
    int seen[N][3] = {{0}};
    const cJSON *entry;
    cJSON_ArrayForEach(entry, log)
    {
        const cJSON *msgs = at(at(entry, "body"), "messages");
        int turn = at(entry, "turn")->valueint, k = -1;
        const char *user = t_str(cJSON_GetArrayItem(msgs, 1), "content");
        cr_assert(user && sscanf(user, "run %d", &k) == 1 && k >= 0 && k < N,
                  "the user's message: %s", user ? user : "(none)");
        cr_assert(turn >= 0 && turn < 3);
        seen[k][turn]++;
        cr_expect_eq(cJSON_GetArraySize(msgs), 2 + 2 * turn);
        for (int t = 0; t < turn; t++)
            expect_str(t_str(cJSON_GetArrayItem(msgs, 3 + 2 * t),
                             "tool_call_id"),
                       t ? "p2" : "p1");
    }
    for (int k = 0; k < N; k++)
        for (int t = 0; t < 3; t++)
            cr_expect_eq(seen[k][t], 1, "run %d, turn %d", k, t);
    cJSON_Delete(log);
    pl_engine_close(e);
    pl_registry_free(reg);
}
