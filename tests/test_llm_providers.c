/*
 * test_llm_providers.c -- the Anthropic (messages, tool use) and Ollama
 * (/api/chat) protocols against the loopback server: request bodies field
 * by field, tool-call round trips with their ids, token usage.
 */
#include "llm_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const cJSON *at(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const cJSON *item(const cJSON *a, int i)
{
    const cJSON *v = cJSON_GetArrayItem(a, i);
    cr_assert_not_null(v, "no item %d", i);
    return v;
}

static void expect_str(const char *got, const char *want)
{
    cr_expect(got && strcmp(got, want) == 0, "expected \"%s\", got \"%s\"",
              want, got ? got : "(null)");
}

static const cJSON *body_of(const cJSON *log, int i)
{
    const cJSON *b = at(item(log, i), "body");
    cr_assert(cJSON_IsObject(b), "request %d's body is not an object", i);
    return b;
}

static pl_llm_options quick(const char *base)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = base;
    o.timeout_ms = 2000;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 50;
    return o;
}

Test(llm_providers, anthropic_tool_use_round_trip)
{
    const char *key = "sk-ant-test-42424242";
    setenv("PL_TEST_EXPECT_KEY", key, 1);
    setenv("ANTHROPIC_API_KEY", key, 1);
    t_server srv;
    t_server_start(
        &srv, "{\"responses\": ["
              "{\"body\": {\"type\": \"message\", \"role\": \"assistant\", "
              "\"content\": [{\"type\": \"text\", \"text\": \"Noting.\"}, "
              "{\"type\": \"tool_use\", \"id\": \"toolu_01\", \"name\": "
              "\"effect\", \"input\": {\"note\": \"x\"}}], \"usage\": "
              "{\"input_tokens\": 30, \"output_tokens\": 8}}},"
              "{\"body\": {\"content\": [{\"type\": \"text\", \"text\": "
              "\"Noted.\"}], \"usage\": {\"input_tokens\": 50, "
              "\"output_tokens\": 2}}}]}");
    char base[80];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    pl_llm_options o = quick(base);
    o.temperature = 0;
    pl_registry *reg = t_llm_registry("anthropic://claude-test", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "note x", "[\"effect\"]", "an");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "Noted.");

    cJSON *log = t_server_log(&srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    expect_str(t_str(item(log, 0), "path"), "/v1/messages");
    cr_expect(cJSON_IsTrue(at(item(log, 0), "x_api_key_matches")));
    expect_str(t_str(item(log, 0), "auth"), "none");
    expect_str(t_str(item(log, 0), "anthropic_version"), "2023-06-01");
    const cJSON *b = body_of(log, 0);
    expect_str(t_str(b, "model"), "claude-test");
    expect_str(t_str(b, "system"), "You are terse.");
    cr_expect_eq(at(b, "max_tokens")->valueint, 1024);
    cr_expect_eq(at(b, "temperature")->valuedouble, 0);
    const cJSON *msgs = at(b, "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 1);
    expect_str(t_str(item(msgs, 0), "role"), "user");
    expect_str(t_str(item(msgs, 0), "content"), "note x");
    const cJSON *tool = item(at(b, "tools"), 0);
    expect_str(t_str(tool, "name"), "effect");
    expect_str(t_str(tool, "description"), "Record a note.");
    const cJSON *req0 = item(at(at(tool, "input_schema"), "required"), 0);
    expect_str(cJSON_IsString(req0) ? req0->valuestring : NULL, "note");
    b = body_of(log, 1);
    msgs = at(b, "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 3);
    const cJSON *asst = item(msgs, 1);
    expect_str(t_str(asst, "role"), "assistant");
    expect_str(t_str(item(at(asst, "content"), 0), "type"), "text");
    expect_str(t_str(item(at(asst, "content"), 0), "text"), "Noting.");
    const cJSON *use = item(at(asst, "content"), 1);
    expect_str(t_str(use, "type"), "tool_use");
    expect_str(t_str(use, "id"), "toolu_01");
    expect_str(t_str(use, "name"), "effect");
    expect_str(t_str(at(use, "input"), "note"), "x");
    const cJSON *user = item(msgs, 2);
    expect_str(t_str(user, "role"), "user");
    const cJSON *res = item(at(user, "content"), 0);
    expect_str(t_str(res, "type"), "tool_result");
    expect_str(t_str(res, "tool_use_id"), "toolu_01");
    cJSON *content = cJSON_Parse(t_str(res, "content"));
    cr_expect(cJSON_IsTrue(at(content, "ok")));
    cJSON_Delete(content);
    cJSON_Delete(log);

    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "an"), PL_OK);
    cr_expect_eq(tok.input, 80);
    cr_expect_eq(tok.output, 10);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

Test(llm_providers, ollama_chat_round_trip)
{
    t_server srv;
    t_server_start(
        &srv,
        "{\"responses\": ["
        "{\"body\": {\"model\": \"qwen3:8b\", \"message\": {\"role\": "
        "\"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": "
        "{\"name\": \"add\", \"arguments\": {\"a\": 4, \"b\": 5}}}]}, "
        "\"done\": true, \"prompt_eval_count\": 17, \"eval_count\": 6}},"
        "{\"body\": {\"message\": {\"role\": \"assistant\", \"content\": "
        "\"9\"}, \"done\": true, \"prompt_eval_count\": 25, "
        "\"eval_count\": 1}}]}");
    char url[80];
    snprintf(url, sizeof url, "ollama://127.0.0.1:%d/qwen3:8b", srv.port);
    pl_llm_options o = quick(NULL);
    o.max_tokens = 64;
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "4+5?", "[\"add\"]", "ol");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "9");
    cr_expect_eq(t_calls.add, 1);

    cJSON *log = t_server_log(&srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    expect_str(t_str(item(log, 0), "path"), "/api/chat");
    const cJSON *b = body_of(log, 0);
    expect_str(t_str(b, "model"), "qwen3:8b");
    cr_expect(cJSON_IsFalse(at(b, "stream")));
    cr_expect_eq(at(at(b, "options"), "num_predict")->valueint, 64);
    expect_str(t_str(at(item(at(b, "tools"), 0), "function"), "name"), "add");
    b = body_of(log, 1);
    const cJSON *msgs = at(b, "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 4);
    const cJSON *fn = at(item(at(item(msgs, 2), "tool_calls"), 0), "function");
    expect_str(t_str(fn, "name"), "add");
    cr_expect(cJSON_IsObject(at(fn, "arguments")), "arguments as an object");
    cr_expect_eq(at(at(fn, "arguments"), "b")->valuedouble, 5);
    const cJSON *tool = item(msgs, 3);
    expect_str(t_str(tool, "role"), "tool");
    expect_str(t_str(tool, "tool_name"), "add");
    cJSON *content = cJSON_Parse(t_str(tool, "content"));
    cr_expect_eq(at(content, "sum")->valuedouble, 9);
    cJSON_Delete(content);
    /* Ollama sends no call id: one is made, and the result binds to it */
    expect_str(t_str(item(at(item(msgs, 2), "tool_calls"), 0), "id"),
               t_str(tool, "tool_call_id"));
    cJSON_Delete(log);

    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "ol"), PL_OK);
    cr_expect_eq(tok.input, 42);
    cr_expect_eq(tok.output, 7);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

Test(llm_providers, anthropic_and_ollama_urls)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    const char *bad[] = {"anthropic://",    "anthropic://a/b",  "ollama://",
                         "ollama://host:1", "ollama://host:1/", "ollama:///m",
                         "ollama://:1/m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(pl_llm_register(reg, "m", bad[i], NULL, NULL), PL_EINVAL,
                     "%s", bad[i]);
        cr_expect(strstr(pl_errmsg(), bad[i][0] == 'a'
                                          ? "anthropic://MODEL"
                                          : "ollama://HOST[:PORT]"),
                  "%s: %s", bad[i], pl_errmsg());
    }
    /* a port that is no port is malformed at registration, not a request
     * that fails (and is retried) at every model call */
    const char *bad_port[] = {
        "ollama://host:99999/m",   "ollama://host:abc/m",
        "ollama://host:0/m",       "ollama://host:/m",
        "ollama://[::1]:x/m",      "openai+http://127.0.0.1:65536/v1#m",
        "openai+https://h:8x/v1#m"};
    for (size_t i = 0; i < sizeof bad_port / sizeof bad_port[0]; i++) {
        cr_expect_eq(pl_llm_register(reg, "m", bad_port[i], NULL, NULL),
                     PL_EINVAL, "%s", bad_port[i]);
        cr_expect(strstr(pl_errmsg(), "port"), "%s: %s", bad_port[i],
                  pl_errmsg());
    }
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = "http://127.0.0.1:123456/v1";
    cr_expect_eq(pl_llm_register(reg, "m", "openai://x", NULL, &o), PL_EINVAL);
    const char *good[] = {"ollama://[::1]:11434/m", "ollama://h/m",
                          "openai+http://u:p@h:8080/v1#m"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char name[8];
        snprintf(name, sizeof name, "g%zu", i);
        cr_expect_eq(pl_llm_register(reg, name, good[i], NULL, NULL), PL_OK,
                     "%s: %s", good[i], pl_errmsg());
    }
    cr_expect_eq(pl_llm_register(reg, "a", "anthropic://claude-x", NULL, NULL),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_llm_register(reg, "o", "ollama://localhost:11434/qwen3:8b",
                                 NULL, NULL),
                 PL_OK, "%s", pl_errmsg());
    pl_registry_free(reg);
}

/* $ANTHROPIC_BASE_URL and $GEMINI_BASE_URL name the server when the
 * options do not; options.base_url wins over $OPENAI_BASE_URL. */
static void base_from(const char *protocol, const char *model, const char *var,
                      bool in_options)
{
    char script[200];
    snprintf(script, sizeof script,
             "{\"protocol\": \"%s\", \"responses\": [{\"answer\": "
             "{\"text\": \"here\"}, \"usage\": [2, 1]}]}",
             protocol);
    t_server srv;
    t_server_start(&srv, script);
    char base[80];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    setenv(var, in_options ? "http://127.0.0.1:1/v1" : base, 1);
    pl_llm_options o = quick(in_options ? base : NULL);
    pl_registry *reg = t_llm_registry(model, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "env");
    unsetenv(var);
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "here", "%s: %s",
                     var, t_text(pl_outcome_result(out)));
    cr_expect_eq(t_server_requests(&srv), 1, "%s", var);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

Test(llm_providers, base_urls_from_the_environment_and_the_options)
{
    base_from("anthropic", "anthropic://c", "ANTHROPIC_BASE_URL", false);
    base_from("gemini", "gemini://g", "GEMINI_BASE_URL", false);
    base_from("openai", "openai://m", "OPENAI_BASE_URL", true);
}

/* A scripted Gemini server answering @p script, its key expected and set;
 * @p base gets its base URL. */
static void gemini_start(t_server *srv, const char *script, char *base,
                         size_t n)
{
    const char *key = "gm-test-key-31337";
    setenv("PL_TEST_EXPECT_KEY", key, 1);
    setenv("GEMINI_API_KEY", key, 1);
    t_server_start(srv, script);
    snprintf(base, n, "http://127.0.0.1:%d/v1beta", srv->port);
}

Test(llm_providers, gemini_function_calling_round_trip)
{
    t_server srv;
    char base[80];
    gemini_start(
        &srv,
        "{\"responses\": ["
        "{\"body\": {\"candidates\": [{\"content\": {\"role\": \"model\", "
        "\"parts\": [{\"functionCall\": {\"name\": \"add\", \"args\": "
        "{\"a\": 1, \"b\": 1}}}]}}], \"usageMetadata\": "
        "{\"promptTokenCount\": 12, \"candidatesTokenCount\": 3}}},"
        "{\"body\": {\"candidates\": [{\"content\": {\"role\": \"model\", "
        "\"parts\": [{\"text\": \"Two.\"}]}}], \"usageMetadata\": "
        "{\"promptTokenCount\": 20, \"candidatesTokenCount\": 1}}}]}",
        base, sizeof base);
    pl_llm_options o = quick(base);
    o.max_tokens = 99;
    pl_registry *reg = t_llm_registry("gemini://gemini-test", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "1+1?", "[\"add\"]", "gm");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "Two.");

    cJSON *log = t_server_log(&srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    expect_str(t_str(item(log, 0), "path"),
               "/v1beta/models/gemini-test:generateContent");
    expect_str(t_str(item(log, 0), "auth"), "none");
    const cJSON *b = body_of(log, 0);
    expect_str(t_str(item(at(at(b, "systemInstruction"), "parts"), 0), "text"),
               "You are terse.");
    expect_str(t_str(item(at(b, "contents"), 0), "role"), "user");
    expect_str(t_str(item(at(item(at(b, "contents"), 0), "parts"), 0), "text"),
               "1+1?");
    const cJSON *decl = item(at(item(at(b, "tools"), 0),
                                "functionDeclarations"),
                             0);
    expect_str(t_str(decl, "name"), "add");
    expect_str(t_str(at(decl, "parameters"), "type"), "object");
    cr_expect_eq(at(at(b, "generationConfig"), "maxOutputTokens")->valueint,
                 99);
    b = body_of(log, 1);
    const cJSON *contents = at(b, "contents");
    cr_assert_eq(cJSON_GetArraySize(contents), 3);
    const cJSON *call = at(item(at(item(contents, 1), "parts"), 0),
                           "functionCall");
    expect_str(t_str(item(contents, 1), "role"), "model");
    expect_str(t_str(call, "name"), "add");
    cr_expect_eq(at(at(call, "args"), "a")->valuedouble, 1);
    const cJSON *resp = at(item(at(item(contents, 2), "parts"), 0),
                           "functionResponse");
    expect_str(t_str(item(contents, 2), "role"), "user");
    expect_str(t_str(resp, "name"), "add");
    cr_expect_eq(at(at(resp, "response"), "sum")->valuedouble, 2);
    cJSON_Delete(log);
    /* the call came without an id: its step has one made, call_E_I */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "gm", "0.0"), PL_OK, "%s", pl_errmsg());
    const char *id = NULL;
    for (size_t i = 0; i < pl_steps_count(l) && !id; i++)
        if (pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_CALL)
            id = t_str(pl_step_payload(pl_steps_at(l, i)), "call_id");
    expect_str(id, "call_0_0");
    pl_steps_free(l);

    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "gm"), PL_OK);
    cr_expect_eq(tok.input, 32);
    cr_expect_eq(tok.output, 4);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_expect_eq(pl_llm_register(reg, "g", "gemini://a:b", NULL, NULL),
                 PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "gemini://MODEL"));
    pl_registry_free(reg);
}

/* Gemini's FunctionCall.args is optional: a call of a tool that takes no
 * arguments may come without it.  Streamed, such a call was taken as {};
 * as a whole response it was refused ("has no arguments"), so streaming
 * changed what the answer was.  Both take it as {} now. */
Test(llm_providers, a_gemini_call_without_args_takes_none)
{
    t_server srv;
    char base[80];
    gemini_start(
        &srv,
        "{\"responses\": ["
        "{\"body\": {\"candidates\": [{\"content\": {\"role\": \"model\", "
        "\"parts\": [{\"functionCall\": {\"name\": \"echo\"}}]}}]}},"
        "{\"body\": {\"candidates\": [{\"content\": {\"role\": \"model\", "
        "\"parts\": [{\"text\": \"Done.\"}]}}]}}]}",
        base, sizeof base);
    pl_llm_options o = quick(base);
    pl_registry *reg = t_llm_registry("gemini://gemini-test", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "echo", "[\"echo\"]", "gm0");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "Done.");
    /* the tool was called with {} */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "gm0", "0.0"), PL_OK, "%s", pl_errmsg());
    const cJSON *args = NULL;
    for (size_t i = 0; i < pl_steps_count(l) && !args; i++)
        if (pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_CALL &&
            !strcmp(t_str(pl_step_payload(pl_steps_at(l, i)), "policy"),
                    "echo"))
            args = at(pl_step_payload(pl_steps_at(l, i)), "payload");
    cr_assert(cJSON_IsObject(args) && !args->child, "echo's payload");
    pl_steps_free(l);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

/* Arguments {"note": "x", "deep": {"a": {"a": ... 1}}} nesting @p depth
 * levels, the arguments object included. */
static char *deep_args(int depth)
{
    size_t n = (size_t)depth * 8 + 64;
    char *s = malloc(n);
    cr_assert_not_null(s);
    size_t at = (size_t)snprintf(s, n, "{\"note\": \"x\", \"deep\": ");
    for (int i = 2; i < depth; i++)
        at += (size_t)snprintf(s + at, n - at, "{\"a\": ");
    at += (size_t)snprintf(s + at, n - at, "{\"a\": 1}");
    for (int i = 1; i < depth; i++)
        at += (size_t)snprintf(s + at, n - at, "}");
    return s;
}

/* One run whose model calls "effect" with arguments @p depth deep, then
 * answers "Done.".  Returns the run's outcome; *requests the model calls. */
static pl_outcome *deep_run(const char *proto, int depth, int *requests,
                            bool again)
{
    char *args = deep_args(depth);
    size_t n = strlen(args) + 512;
    char *script = malloc(n);
    cr_assert_not_null(script);
    snprintf(script, n,
             "{\"protocol\": \"%s\", \"by_turn\": true, \"responses\": ["
             "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", \"name\": "
             "\"effect\", \"arguments\": %s}]}, \"usage\": [5, 5]},"
             "{\"answer\": {\"text\": \"Done.\"}, \"usage\": [5, 1]}]}",
             proto, args);
    t_server srv;
    t_server_start(&srv, script);
    char url[96], base[80];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    pl_llm_options o = quick(base);
    o.malformed = PL_LLM_MALFORMED_FAIL;
    if (!strcmp(proto, "ollama")) {
        snprintf(url, sizeof url, "ollama://127.0.0.1:%d/m", srv.port);
        o.base_url = NULL;
    } else {
        snprintf(url, sizeof url, "%s://m", proto);
    }
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "note it", "[\"effect\"]", "deep");
    if (again) { /* a continue of the finished run asks the model nothing */
        pl_outcome *next = NULL;
        int st = pl_run_continue(&next, e, "deep", NULL);
        cr_expect(st == PL_OK || st == PL_ESTATE, "continue: %s", pl_errmsg());
        pl_outcome_free(next);
    }
    *requests = t_server_requests(&srv);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    free(script);
    free(args);
    return out;
}

/* Tool arguments as deep as a tool call's step can hold (29 levels) work
 * on every protocol; deeper ones are a malformed model action like any
 * other: the model's answer is recorded, the run fails with
 * InvalidModelAction naming the nesting limit, and continuing it asks the
 * model nothing again. */
static void deep_arguments(const char *proto)
{
    for (int depth = 27; depth <= 29; depth += 2) {
        int requests = 0;
        pl_outcome *out = deep_run(proto, depth, &requests, false);
        cr_expect_eq(out->status, PL_RUN_COMPLETED, "%s, %d levels: %s", proto,
                     depth, out->reason ? out->reason : "");
        cr_expect_eq(requests, 2, "%s, %d levels", proto, depth);
        pl_outcome_free(out);
    }
    for (int depth = 30; depth <= 31; depth++) {
        int requests = 0;
        pl_outcome *out = deep_run(proto, depth, &requests, true);
        /* the agent's result is the error result of the model call */
        size_t ns = pl_steps_count(out->steps);
        const pl_step *last = ns ? pl_steps_at(out->steps, ns - 1) : NULL;
        cr_assert(last && pl_step_is_error(last), "%s, %d levels: status %d",
                  proto, depth, out->status);
        const char *code = t_str(pl_step_payload(last), "code");
        const char *why = t_str(pl_step_payload(last), "message");
        expect_str(code, PL_LLM_ERR_INVALID_MODEL_ACTION);
        cr_expect(why && strstr(why, "nesting limit") &&
                      !strstr(why, "not JSON"),
                  "%s, %d levels: %s", proto, depth, why ? why : "-");
        cr_expect_eq(requests, 1, "%s, %d levels: the model was asked again",
                     proto, depth);
        pl_outcome_free(out);
    }
}

Test(llm_providers, deep_tool_arguments_openai) { deep_arguments("openai"); }

Test(llm_providers, deep_tool_arguments_anthropic)
{
    deep_arguments("anthropic");
}

Test(llm_providers, deep_tool_arguments_ollama) { deep_arguments("ollama"); }

/* A scripted model's script is a file: a device that never ends or a FIFO
 * no one writes is refused at the model call, as a missing script is
 * (PL_EIO), not read for ever. */
Test(llm_providers, a_script_that_is_no_file_fails_the_run_clearly)
{
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/script.fifo", t_tmpdir());
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    const char *paths[] = {"/dev/zero", fifo};
    for (size_t i = 0; i < 2; i++) {
        char url[4300];
        snprintf(url, sizeof url, "scripted://%s", paths[i]);
        pl_registry *reg = t_llm_registry(url, NULL);
        char store[4400];
        t_store_in(store, sizeof store, t_on_pg() ? NULL : t_tmpdir(),
                   i ? "fifo.db" : "zero.db");
        pl_engine *e = t_engine(store, reg, PL_DURABILITY_PROCESS);
        cJSON *p = t_json("{\"text\": \"hi\", \"actions\": []}");
        pl_action a = {PL_ACTION_VERSION, "agent", p, NULL, 0, NULL};
        pl_outcome *o = NULL;
        /* as a script that cannot be opened: nothing recorded, the run
         * goes on once the script is there */
        cr_expect_eq(pl_run_start(&o, e, &a, NULL), PL_EIO, "%s", paths[i]);
        cr_expect(strstr(pl_errmsg(), "not a regular file"), "%s: %s", paths[i],
                  pl_errmsg());
        pl_outcome_free(o);
        cJSON_Delete(p);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

/* ollama://HOST/MODEL without a port asks Ollama's own port, 11434, not
 * HTTP's 80: the transport's error names the port it tried (nothing of
 * the suite listens on 11434). */
Test(llm_providers, ollama_without_a_port_asks_port_11434)
{
    pl_llm_options o = quick(NULL);
    o.max_attempts = 1;
    pl_registry *reg = t_llm_registry("ollama://127.0.0.1/m", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "noport");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    const char *msg = t_str(pl_outcome_result(out), "message");
    cr_assert_not_null(msg, "the result has no message");
    cr_expect(!strstr(msg, "port 80 "), "%s", msg);
    cr_expect(strstr(msg, "port 11434") || !strstr(msg, "transport error"),
              "%s", msg);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* An output schema with no tools goes to every provider: OpenAI's
 * response_format, Gemini's responseSchema, Ollama's format; Anthropic's
 * messages API has no response format, so the schema goes as the "submit"
 * tool, the answer a call of it; and the answer is checked and kept as
 * JSON alike. */
static void schema_reaches(const char *protocol, const char *model_url,
                           const char *answer)
{
    char script[400], model[128];
    snprintf(script, sizeof script,
             "{\"protocol\": \"%s\", \"responses\": [{\"answer\": %s, "
             "\"usage\": [2, 1]}]}",
             protocol, answer);
    t_server srv;
    t_server_start(&srv, script);
    pl_llm_options o = quick(t_model_on(model, sizeof model, &srv, protocol,
                                        model_url));
    o.output_schema = "{\"type\": \"object\", \"required\": [\"zeta\"], "
                      "\"properties\": {\"zeta\": {\"type\": \"integer\"}}}";
    pl_registry *reg = t_llm_registry(model, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "give zeta", "[]", "schema");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    const cJSON *json = at(pl_outcome_result(out), "json");
    cr_expect(cJSON_IsNumber(at(json, "zeta")) &&
                  at(json, "zeta")->valueint == 7,
              "%s: %s", protocol, t_text(pl_outcome_result(out)));
    cJSON *log = t_server_log(&srv);
    char *body = t_text(body_of(log, 0));
    cr_expect(strstr(body, "\"required\":[\"zeta\"]"),
              "%s: the schema is not in the request: %s", protocol, body);
    if (!strcmp(protocol, "anthropic")) {
        const cJSON *b = body_of(log, 0);
        expect_str(t_str(item(at(b, "tools"), 0), "name"), "submit");
        expect_str(t_str(at(b, "tool_choice"), "name"), "submit");
        expect_str(t_str(at(b, "tool_choice"), "type"), "tool");
    }
    free(body);
    cJSON_Delete(log);
    /* replayed from the ledger: the same request, no model call */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "schema", NULL), PL_OK);
    cr_expect_eq(again->status, PL_RUN_COMPLETED, "%s: %s", protocol,
                 again->reason ? again->reason : "");
    cr_expect_eq(t_server_requests(&srv), 1, "%s", protocol);
    pl_outcome_free(again);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

Test(llm_providers, an_output_schema_without_tools_reaches_every_provider)
{
    const char *json = "{\"text\": \"{\\\"zeta\\\": 7}\"}";
    schema_reaches("openai", "openai://m", json);
    schema_reaches("gemini", "gemini://g", json);
    schema_reaches("ollama", "ollama", json);
    schema_reaches("anthropic", "anthropic://c",
                   "{\"tool_calls\": [{\"id\": \"toolu_1\", \"name\": "
                   "\"submit\", \"arguments\": {\"zeta\": 7}}]}");
}
