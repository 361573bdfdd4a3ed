/*
 * test_llm_openai.c -- LLM policies against an OpenAI-compatible server on
 * loopback (tests/llm_server.py): tool-call round trips, request bodies
 * field by field, retries, timeouts, failures as error results, replay
 * without requests, and the API key kept out of the store.  Malformed
 * answers, reprompts, structured answers and recorded requests are in
 * test_llm_openai_answers.c.
 */
#include "llm_support.h"
#include "support_llm_openai.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */

/* Scripts                                                                  */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* Round trips                                                              */
/* ------------------------------------------------------------------------ */

Test(llm_openai, tool_call_round_trip_binds_call_ids)
{
    serve(script(2, answer("Adding.", "call_A", "add", "{\"a\":1,\"b\":2}"),
                 answer("The sum is 3.", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.temperature = 0.25;
    o.max_tokens = 300;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "What is 1+2?", "[\"add\", \"effect\"]",
                              "rt-1");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "The sum is 3.");
    cr_expect_eq(t_calls.add, 1);

    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    expect_str(t_str(cJSON_GetArrayItem(log, 0), "path"),
               "/v1/chat/completions");
    expect_str(t_str(cJSON_GetArrayItem(log, 0), "auth"), "none");

    /* request 1: model, options, system + user, tools from the registry */
    const cJSON *b = req(log, 0);
    expect_str(t_str(b, "model"), "test-model");
    cr_expect_float_eq(at(b, "temperature")->valuedouble, 0.25, 1e-9);
    cr_expect_eq(at(b, "max_tokens")->valueint, 300);
    const cJSON *msgs = at(b, "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 2);
    expect_str(t_str(cJSON_GetArrayItem(msgs, 0), "role"), "system");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 0), "content"), "You are terse.");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 1), "role"), "user");
    expect_str(t_str(cJSON_GetArrayItem(msgs, 1), "content"), "What is 1+2?");
    const cJSON *tools = at(b, "tools");
    cr_assert_eq(cJSON_GetArraySize(tools), 2);
    const cJSON *f0 = at(cJSON_GetArrayItem(tools, 0), "function");
    expect_str(t_str(cJSON_GetArrayItem(tools, 0), "type"), "function");
    expect_str(t_str(f0, "name"), "add");
    cr_expect_null(at(f0, "description"));
    char *p0 = t_text(at(f0, "parameters"));
    expect_str(p0, "{\"type\":\"object\"}"); /* no schema registered */
    free(p0);
    const cJSON *f1 = at(cJSON_GetArrayItem(tools, 1), "function");
    expect_str(t_str(f1, "name"), "effect");
    expect_str(t_str(f1, "description"), "Record a note.");
    expect_str(t_str(at(at(at(f1, "parameters"), "properties"), "note"),
                     "type"),
               "string");

    /* request 2: the assistant's tool call and the tool's result, bound */
    b = req(log, 1);
    msgs = at(b, "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 4);
    const cJSON *asst = cJSON_GetArrayItem(msgs, 2);
    expect_str(t_str(asst, "role"), "assistant");
    expect_str(t_str(asst, "content"), "Adding.");
    const cJSON *tc = cJSON_GetArrayItem(at(asst, "tool_calls"), 0);
    expect_str(t_str(tc, "id"), "call_A");
    expect_str(t_str(tc, "type"), "function");
    expect_str(t_str(at(tc, "function"), "name"), "add");
    cJSON *args = cJSON_Parse(t_str(at(tc, "function"), "arguments"));
    cr_expect_eq(at(args, "a")->valuedouble, 1);
    cr_expect_eq(at(args, "b")->valuedouble, 2);
    cJSON_Delete(args);
    const cJSON *tool = cJSON_GetArrayItem(msgs, 3);
    expect_str(t_str(tool, "role"), "tool");
    expect_str(t_str(tool, "tool_call_id"), "call_A");
    cJSON *content = cJSON_Parse(t_str(tool, "content"));
    cr_expect_eq(at(content, "sum")->valuedouble, 3);
    cJSON_Delete(content);
    cJSON_Delete(log);

    /* the ledger: exchange, text, action_call with the call id, result, ... */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "rt-1", "0.0"), PL_OK, "%s", pl_errmsg());
    bool saw_call = false;
    int exchanges = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        const cJSON *p = pl_step_payload(s);
        if (pl_step_type_of(s) == PL_STEP_ACTION_CALL) {
            saw_call = true;
            expect_str(t_str(p, "call_id"), "call_A");
            expect_str(t_str(p, "policy"), "add");
        }
        if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT) {
            exchanges++;
            const cJSON *v = at(p, "value");
            cr_expect_eq(strlen(t_str(v, "request_sha256")), 64);
            cr_expect_null(at(v, "request"), "the request is not recorded");
        }
    }
    cr_expect(saw_call);
    cr_expect_eq(exchanges, 2);
    pl_steps_free(l);

    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "rt-1"), PL_OK);
    cr_expect_eq(tok.input, 40);
    cr_expect_eq(tok.output, 10);
    cr_expect_eq(tok.exchanges, 2);

    /* replay of the finished run: no request reaches the server */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "rt-1", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(again->status, PL_RUN_COMPLETED);
    cr_expect_eq(t_server_requests(&g_srv), 2);
    cr_expect_eq(t_calls.add, 1);
    pl_outcome_free(again);
    pl_outcome_free(out);
    pl_engine_close(e);

    /* and in a fresh process's view: a new engine on the same store */
    e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, check_mode_replays_without_the_server)
{
    serve(script(2, answer(NULL, "c1", "effect", "{\"note\":\"hi\"}"),
                 answer("noted", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    const char *store = t_store_path();
    reg = t_llm_registry("openai://m", &o);
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "note hi", "[\"effect\"]", "ck-1");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    pl_outcome_free(out);
    t_server_stop(&g_srv); /* nothing listens any more */
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_assert_eq(pl_run_continue(&out, e, "ck-1", &ro), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(out->status, PL_RUN_COMPLETED);
    expect_str(t_str(pl_outcome_result(out), "text"), "noted");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, base_url_from_the_environment_and_key_header)
{
    setenv("PL_TEST_EXPECT_KEY", "sk-test-env-0123456789", 1);
    serve(script(1, answer("hello", NULL, NULL, NULL)));
    setenv("OPENAI_BASE_URL", g_srv.base, 1);
    setenv("OPENAI_API_KEY", "sk-test-env-0123456789", 1);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    pl_registry *reg;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "env-1");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "hello");
    cJSON *log = t_server_log(&g_srv);
    expect_str(t_str(cJSON_GetArrayItem(log, 0), "auth"), "bearer");
    cr_expect(cJSON_IsTrue(at(cJSON_GetArrayItem(log, 0), "auth_matches")));
    cr_expect_null(at(req(log, 0), "tools"), "no tools offered: none sent");
    cJSON_Delete(log);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The conversation: the system prompt, the payload as JSON when it has
 * no "text", then the seeded text steps, another's as the user's, the
 * model's own as its. */
Test(llm_openai, a_payload_without_text_and_seeded_steps_make_the_messages)
{
    serve(script(1, answer("9", NULL, NULL, NULL)));
    pl_llm_options o = opts();
    pl_registry *reg = t_llm_registry("openai://m", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_steps *seed = NULL;
    cr_assert_eq(pl_steps_new(&seed), PL_OK);
    cr_assert_eq(pl_steps_add_text(seed, "user", "And 4+5?"), PL_OK);
    cr_assert_eq(pl_steps_add_text(seed, "llm", "Ask away."), PL_OK);
    cJSON *p = t_json("{\"q\": 5}");
    pl_action a = PL_ACTION_INIT;
    a.policy = "llm";
    a.payload = p;
    a.seed = seed;
    pl_outcome *out = NULL;
    cr_assert_eq(pl_run_start(&out, e, &a, NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(out->status, PL_RUN_COMPLETED);
    cJSON *log = t_server_log(&g_srv);
    const cJSON *msgs = at(req(log, 0), "messages");
    const char *want[][2] = {{"system", "You are terse."},
                             {"user", "{\"q\":5}"},
                             {"user", "And 4+5?"},
                             {"assistant", "Ask away."}};
    cr_assert_eq(cJSON_GetArraySize(msgs), 4, "%s", t_text(msgs));
    for (int i = 0; i < 4; i++) {
        expect_str(t_str(cJSON_GetArrayItem(msgs, i), "role"), want[i][0]);
        expect_str(t_str(cJSON_GetArrayItem(msgs, i), "content"), want[i][1]);
    }
    cJSON_Delete(log);
    cJSON_Delete(p);
    pl_steps_free(seed);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* An OpenAI-compatible server at its own URL: the key is sent only when
 * its variable is set, read at each request. */
Test(llm_openai, a_compatible_server_gets_a_key_only_when_it_is_set)
{
    setenv("PL_TEST_EXPECT_KEY", "sk-compat-99", 1);
    serve(script(2, answer("one", NULL, NULL, NULL),
                 answer("two", NULL, NULL, NULL)));
    unsetenv("OPENAI_API_KEY");
    char url[128];
    snprintf(url, sizeof url, "openai+http://127.0.0.1:%d/v1#m", g_srv.port);
    pl_registry *reg = t_llm_registry(url, NULL);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "k1");
    expect_str(t_str(pl_outcome_result(out), "text"), "one");
    pl_outcome_free(out);
    setenv("OPENAI_API_KEY", "sk-compat-99", 1);
    out = t_agent(e, "hi", "[]", "k2");
    unsetenv("OPENAI_API_KEY");
    expect_str(t_str(pl_outcome_result(out), "text"), "two");
    pl_outcome_free(out);
    cJSON *log = t_server_log(&g_srv);
    expect_str(t_str(cJSON_GetArrayItem(log, 0), "auth"), "none");
    expect_str(t_str(cJSON_GetArrayItem(log, 1), "auth"), "bearer");
    cr_expect(cJSON_IsTrue(at(cJSON_GetArrayItem(log, 1), "auth_matches")));
    cJSON_Delete(log);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* Retries and failures                                                     */
/* ------------------------------------------------------------------------ */

static int attempts_of_first_exchange(pl_engine *e, const char *run)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, run, "0.0"), PL_OK, "%s", pl_errmsg());
    int n = -1;
    for (size_t i = 0; i < pl_steps_count(l) && n < 0; i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT)
            n = at(at(pl_step_payload(s), "value"), "attempts")->valueint;
    }
    pl_steps_free(l);
    return n;
}

Test(llm_openai, rate_limited_with_retry_after_then_success)
{
    serve(script(2,
                 raw("{\"status\": 429, \"headers\": {\"Retry-After\": \"1\"},"
                     " \"body\": {\"error\": {\"message\": \"slow down\"}}}"),
                 answer("ok after waiting", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "r429");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    expect_str(t_str(pl_outcome_result(out), "text"), "ok after waiting");
    cr_expect_eq(t_server_requests(&g_srv), 2);
    cr_expect_eq(attempts_of_first_exchange(e, "r429"), 2);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, server_error_then_success)
{
    serve(script(2, raw("{\"status\": 500, \"body\": {\"error\": \"boom\"}}"),
                 answer("recovered", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "r500");
    expect_str(t_str(pl_outcome_result(out), "text"), "recovered");
    cr_expect_eq(attempts_of_first_exchange(e, "r500"), 2);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, retries_are_bounded_by_attempts)
{
    serve(script(3, raw("{\"status\": 503, \"body\": {}}"),
                 raw("{\"status\": 502, \"body\": {}}"),
                 raw("{\"status\": 500, \"body\": {}}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.max_attempts = 3;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "rmax");
    expect_error(out, PL_ERR_RETRYABLE_SERVER, "HTTP 500");
    cr_expect_eq(t_server_requests(&g_srv), 3);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, a_hanging_response_times_out)
{
    serve(script(2, raw("{\"hang\": 5}"), raw("{\"hang\": 5}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.timeout_ms = 300;
    o.max_attempts = 2;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "hang");
    expect_error(out, PL_ERR_TIMEOUT, "transport error");
    cr_expect_eq(t_server_requests(&g_srv), 2);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, a_dropped_connection_is_retried)
{
    serve(script(2, raw("{\"drop\": true}"),
                 answer("second try", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "drop");
    expect_str(t_str(pl_outcome_result(out), "text"), "second try");
    cr_expect_eq(t_server_requests(&g_srv), 2);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, nothing_listening_fails_after_the_attempts)
{
    serve(script(0));
    int port = g_srv.port;
    t_server_stop(&g_srv);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", port);
    pl_registry *reg;
    pl_llm_options o = opts();
    o.base_url = base;
    o.max_attempts = 2;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "refused");
    expect_error(out, PL_ERR_RETRYABLE_SERVER, "transport error");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, malformed_json_body_is_an_error_result)
{
    serve(script(1, raw("{\"raw\": \"{not json at all\"}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "badjson");
    expect_error(out, PL_ERR_INVALID_INPUT, "not JSON");
    cr_expect_eq(t_server_requests(&g_srv), 1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, a_body_without_choices_is_an_error_result)
{
    serve(script(1, raw("{\"body\": {\"id\": \"x\"}}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "shape");
    expect_error(out, PL_ERR_INVALID_INPUT, "choices[0].message");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, an_oversized_body_is_refused)
{
    serve(script(1, raw("{\"size\": 200000}")));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.max_response_bytes = 4096;
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "big");
    expect_error(out, PL_ERR_INVALID_INPUT, "max_response_bytes");
    cr_expect_eq(t_server_requests(&g_srv), 1, "not retried");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void expect_status_maps(int status, const char *code)
{
    char r[160];
    snprintf(r, sizeof r,
             "{\"status\": %d, \"body\": {\"error\": {\"message\": "
             "\"status %d\"}}}",
             status, status);
    serve(script(1, raw(r)));
    pl_registry *reg;
    pl_llm_options o = opts();
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "hi", "[]", "st");
    char want[32];
    snprintf(want, sizeof want, "HTTP %d", status);
    expect_error(out, code, want);
    cr_expect_eq(t_server_requests(&g_srv), 1, "a 4xx is not retried");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_openai, forbidden_maps_without_retry)
{
    expect_status_maps(403, PL_ERR_FORBIDDEN);
}

Test(llm_openai, not_found_maps_without_retry)
{
    expect_status_maps(404, PL_ERR_NOT_FOUND);
}

Test(llm_openai, bad_request_maps_without_retry)
{
    expect_status_maps(400, PL_ERR_INVALID_INPUT);
}

static bool contains(const char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; k && i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return true;
    return false;
}

/* Every file under @p dir holds no @p needle. */
static void expect_not_in_files(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        size_t n = 0;
        char *t = t_read_file(p, &n);
        if (!t)
            continue;
        cr_expect(!contains(t, n, needle), "the key is in %s", p);
        free(t);
    }
    closedir(d);
}

Test(llm_openai, unauthorized_and_the_key_goes_nowhere)
{
    const char *key = "sk-planted-SECRET-7f3a9c1e5b";
    /* the server echoes the key in its error, as some providers do */
    char r[300];
    snprintf(r, sizeof r,
             "{\"status\": 401, \"body\": {\"error\": {\"message\": "
             "\"Incorrect API key provided: %s\"}}}",
             key);
    setenv("PL_TEST_EXPECT_KEY", key, 1);
    serve(script(1, raw(r)));
    setenv("MY_LLM_KEY", key, 1);
    pl_llm_options o = opts();
    o.api_key_env = "MY_LLM_KEY";
    pl_registry *reg = t_llm_registry("openai://m", &o);
    const char *store = t_store_path();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = on_event;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &eo), PL_OK);
    pl_outcome *out = t_agent(e, "hi", "[]", "auth");
    expect_error(out, PL_ERR_UNAUTHORIZED, "[redacted]");
    cJSON *log = t_server_log(&g_srv);
    cr_expect(cJSON_IsTrue(at(cJSON_GetArrayItem(log, 0), "auth_matches")),
              "the key was sent");
    cJSON_Delete(log);
    char *res = t_text(pl_outcome_result(out));
    cr_expect(!strstr(res, key), "the key is in the result: %s", res);
    free(res);
    cr_expect(!strstr(pl_errmsg(), key));
    cr_expect(!contains(g_events, g_events_len, key), "the key is in an event");
    pl_outcome_free(out);
    pl_engine_close(e);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", store);
    *strrchr(dir, '/') = '\0';
    expect_not_in_files(dir, key);
    pl_registry_free(reg);
}

/* A key of any length is redacted from what a provider echoes: one of
 * three bytes, one of a byte, and two that "[redacted]" itself holds (the
 * text put in a key's place is not searched again: "redacted" was, for
 * ever). */
Test(llm_openai, a_short_key_echoed_is_redacted)
{
    static const struct {
        const char *key, *says;
    } cases[] = {{"k9Z", "provided: [redacted]"},
                 {"Q", "provided: [redacted]"},
                 {"d", "provi[redacted]e[redacted]: [redacted]"},
                 {"redacted", "provided: [redacted]"}};
    for (int i = 0; i < 4; i++) {
        char r[300];
        snprintf(r, sizeof r,
                 "{\"status\": 401, \"body\": {\"error\": {\"message\": "
                 "\"Incorrect API key provided: %s\"}}}",
                 cases[i].key);
        serve(script(1, raw(r)));
        setenv("MY_LLM_KEY", cases[i].key, 1);
        pl_llm_options o = opts();
        o.api_key_env = "MY_LLM_KEY";
        pl_registry *reg = NULL;
        pl_engine *e = engine_for(&reg, &o);
        char id[16];
        snprintf(id, sizeof id, "short-%d", i);
        pl_outcome *out = t_agent(e, "hi", "[]", id);
        expect_error(out, PL_ERR_UNAUTHORIZED, cases[i].says);
        char *res = t_text(pl_outcome_result(out));
        if (i < 2) /* the others stand in the message's own words */
            cr_expect(!strstr(res, cases[i].key), "the key is in %s", res);
        free(res);
        pl_outcome_free(out);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
    unsetenv("MY_LLM_KEY");
}

/* The error text is cut to be short only once the key is out of it: a
 * server that echoes the key past the cut point (after a long message, in
 * a body that is not JSON) leaves no part of it in the result. */
Test(llm_openai, an_echoed_key_past_the_cut_leaves_no_part_of_it)
{
    const char *key = "sk-planted-SECRET-7f3a9c1e5b";
    char r[2][600];
    snprintf(r[0], sizeof r[0],
             "{\"status\": 401, \"body\": {\"error\": {\"message\": "
             "\"%.185s: %s\"}}}",
             t_pad(), key);
    snprintf(r[1], sizeof r[1], "{\"status\": 403, \"raw\": \"%.105s %s\"}",
             t_pad(), key);
    setenv("MY_LLM_KEY", key, 1);
    for (int i = 0; i < 2; i++) {
        serve(script(1, raw(r[i])));
        pl_llm_options o = opts();
        o.api_key_env = "MY_LLM_KEY";
        pl_registry *reg = NULL;
        pl_engine *e = engine_for(&reg, &o);
        pl_outcome *out = t_agent(e, "hi", "[]", i ? "echo-raw" : "echo");
        expect_error(out, i ? PL_ERR_FORBIDDEN : PL_ERR_UNAUTHORIZED, "xxx");
        char *res = t_text(pl_outcome_result(out));
        cr_expect(!strstr(res, "sk-planted"), "part of the key: %s", res);
        free(res);
        pl_outcome_free(out);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
    unsetenv("MY_LLM_KEY");
}

Test(llm_openai, no_key_for_the_default_server_fails_the_run_clearly)
{
    unsetenv("OPENAI_API_KEY");
    unsetenv("OPENAI_BASE_URL");
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    pl_registry *reg;
    pl_engine *e = engine_for(&reg, &o);
    cJSON *p = t_json("{\"text\": \"hi\", \"actions\": []}");
    pl_action a = {PL_ACTION_VERSION, "agent", p, NULL, 0, NULL};
    pl_outcome *out = NULL;
    cr_assert_eq(pl_run_start(&out, e, &a, NULL), PL_OK);
    cr_expect_eq(out->status, PL_RUN_FAILED);
    expect_has(out->reason, "OPENAI_API_KEY");
    /* nothing was recorded: with the key set (and here a server of our
     * own to ask) the run continues */
    char run[128];
    snprintf(run, sizeof run, "%s", out->run_id);
    pl_outcome_free(out);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_expect_eq(pl_llm_run_tokens(&tok, e, run), PL_OK);
    cr_expect_eq(tok.exchanges, 0);
    serve(script(1, answer("keyed", NULL, NULL, NULL)));
    setenv("OPENAI_BASE_URL", g_srv.base, 1);
    setenv("OPENAI_API_KEY", "sk-now-set", 1);
    cr_assert_eq(pl_run_continue(&out, e, run, NULL), PL_OK, "%s", pl_errmsg());
    unsetenv("OPENAI_BASE_URL");
    unsetenv("OPENAI_API_KEY");
    cr_expect_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    expect_str(t_str(pl_outcome_result(out), "text"), "keyed");
    pl_outcome_free(out);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A tool's error result over max_tool_result_bytes is cut as cap cuts
 * it (pl_decorator_cap()): the replacement stays an error of its code,
 * so the model reads that the tool failed, not a preview that looks like
 * a result. */
Test(llm_openai, a_cut_error_result_stays_an_error_for_the_model)
{
    serve(script(2, answer(NULL, "c1", "oops", "{}"),
                 answer("it failed", NULL, NULL, NULL)));
    pl_registry *reg;
    pl_llm_options o = opts();
    o.max_tool_result_bytes = 40; /* the error result is 57 bytes */
    pl_engine *e = engine_for(&reg, &o);
    pl_outcome *out = t_agent(e, "try it", "[\"oops\"]", "cut");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cJSON *log = t_server_log(&g_srv);
    const cJSON *m, *tool = NULL;
    cJSON_ArrayForEach(m, at(req(log, 1), "messages"))
    {
        if (t_str(m, "role") && !strcmp(t_str(m, "role"), "tool"))
            tool = m;
    }
    cr_assert_not_null(tool, "no tool message");
    cJSON *sent = cJSON_Parse(t_str(tool, "content"));
    cr_expect(cJSON_IsTrue(at(sent, "truncated")), "%s",
              t_str(tool, "content"));
    cr_expect(cJSON_IsTrue(at(sent, "error")), "not an error: %s",
              t_str(tool, "content"));
    expect_str(t_str(sent, "code"), PL_ERR_TOOL_BUG);
    expect_has(t_str(sent, "message"), "truncated");
    cJSON_Delete(sent);
    cJSON_Delete(log);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}
