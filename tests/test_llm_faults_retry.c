/*
 * test_llm_faults_retry.c -- every HTTP provider's protocol against the
 * loopback server, as test_llm_faults.c (the protocols' table and the
 * agent's fixture in support_llm_faults.c): retries (429 with Retry-After,
 * retry-after-ms winning over it, Retry-After as an HTTP date, 500, 408 and
 * 409, a dropped connection), a hanging response, the call's deadline (a
 * provider's and the scripted model's), a retry not made saying
 * why, deep and misshapen responses; and failures, none retried: a body
 * that is not JSON or of another shape, an unknown tool, malformed
 * arguments or arguments against the tool's schema, an oversized body, a
 * 401 that hides the key.
 */
#include "support_llm_faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Retries                                                                  */
/* ------------------------------------------------------------------------ */

PROTO_TEST(rate_limited_with_retry_after_then_success)
{
    serve(&g_protos[*ix],
          list(2,
               "{\"status\": 429, \"headers\": {\"Retry-After\": \"1\"}, "
               "\"body\": {\"error\": {\"message\": \"slow down\"}}}",
               TEXT_ANSWER));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "429");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 2, "%s", g_p->name);
    cr_expect_eq(attempts(&f, "429"), 2, "%s", g_p->name);
    fixture_free(&f);
}

PROTO_TEST(server_error_then_success)
{
    serve(&g_protos[*ix],
          list(2, "{\"status\": 500, \"body\": {\"error\": \"boom\"}}",
               TEXT_ANSWER));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "500");
    expect_text(&f, "fine");
    cr_expect_eq(attempts(&f, "500"), 2, "%s", g_p->name);
    fixture_free(&f);
}

PROTO_TEST(a_dropped_connection_is_retried)
{
    serve(&g_protos[*ix], list(2, "{\"drop\": true}", TEXT_ANSWER));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "drop");
    expect_text(&f, "fine");
    cr_expect_eq(attempts(&f, "drop"), 2, "%s", g_p->name);
    fixture_free(&f);
}

PROTO_TEST(a_hanging_response_times_out)
{
    serve(&g_protos[*ix], list(2, "{\"hang\": 5}", "{\"hang\": 5}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.timeout_ms = 300;
    o.max_attempts = 2;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "hang");
    expect_error(&f, PL_ERR_TIMEOUT, "transport error");
    cr_expect_eq(t_server_requests(&g_srv), 2, "%s", g_p->name);
    fixture_free(&f);
}

/* The agent run @p id, its model calls' deadline @p in_ms away. */
static pl_outcome *within(pl_engine *e, int in_ms, const char *id)
{
    char payload[128];
    snprintf(payload, sizeof payload,
             "{\"text\": \"hi\", \"actions\": [], \"deadline_in_ms\": %d}",
             in_ms);
    return t_start(e, "agent", payload, id);
}

/* The call's deadline (a timeout decorator's, pl_ctx_deadline()), when it
 * comes first, bounds a model call as total_timeout_ms does: the hanging
 * request is cut at it and not tried again; one already past asks
 * nothing.  The same for every protocol: once is enough. */
Test(llm_faults, the_calls_deadline_bounds_a_model_call)
{
    serve(&g_protos[0], list(2, "{\"hang\": 5}", "{\"hang\": 5}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.timeout_ms = 30000;
    o.max_attempts = 2;
    fixture f = {0};
    f.reg = registry_for(g_p, &o);
    f.e = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    static const struct {
        int in_ms;
        const char *run, *says;
    } cases[] = {{2000, "dl", "the call's deadline"},
                 {-1000, "past", "the model was not asked"}};
    for (int i = 0; i < 2; i++) {
        pl_outcome_free(f.out);
        f.out = within(f.e, cases[i].in_ms, cases[i].run);
        expect_error(&f, PL_ERR_TIMEOUT, cases[i].says);
        cr_expect_eq(t_server_requests(&g_srv), 1, "%s: %d requests",
                     cases[i].run, t_server_requests(&g_srv));
    }
    fixture_free(&f);
}

/* The scripted model keeps the call's deadline as the providers do: an
 * answer streamed at 250 ms a word (40 words, 10 s) is cut at a deadline
 * 2 s away, a Timeout whose deltas are void (a restart, no end); one
 * already past plays nothing. */
Test(llm_faults, the_calls_deadline_bounds_a_scripted_call)
{
    char words[400] = "";
    for (int i = 0; i < 40; i++)
        snprintf(words + strlen(words), sizeof words - strlen(words), "%sw%d",
                 i ? " " : "", i);
    char text[1000];
    snprintf(text, sizeof text,
             "{\"stream_delay_ms\": 250, \"responses\": [{\"text\": \"%s\"},"
             " {\"text\": \"%s\"}]}",
             words, words);
    const char *script = t_write_file("paced.json", text);
    char url[4400];
    snprintf(url, sizeof url, "scripted://%s", script);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = t_count_delta;
    fixture f = {0};
    f.reg = t_llm_registry(url, &o);
    f.e = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    static const struct {
        int in_ms;
        const char *run, *says;
    } cases[] = {{2000, "dl", "before the scripted answer was whole"},
                 {-1000, "past", "the model was not asked"}};
    for (int i = 0; i < 2; i++) {
        memset(t_delta_kinds, 0, sizeof t_delta_kinds);
        pl_outcome_free(f.out);
        f.out = within(f.e, cases[i].in_ms, cases[i].run);
        cr_assert_eq(f.out->status, PL_RUN_COMPLETED, "%s: %s", cases[i].run,
                     f.out->reason ? f.out->reason : "");
        const cJSON *r = pl_outcome_result(f.out);
        const char *code = t_str(r, "code"), *msg = t_str(r, "message");
        cr_expect(code && strcmp(code, PL_ERR_TIMEOUT) == 0, "%s: %s",
                  cases[i].run, t_text(r));
        cr_expect(msg && strstr(msg, cases[i].says), "%s: %s", cases[i].run,
                  t_text(r));
        cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_END], 0, "%s", cases[i].run);
        cr_expect_lt(t_delta_kinds[PL_LLM_DELTA_TEXT], 40, "%s", cases[i].run);
        if (i == 0) /* a part of the answer came, then the deadline */
            cr_expect_gt(t_delta_kinds[PL_LLM_DELTA_TEXT], 0);
        cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_RESTARTED],
                     t_delta_kinds[PL_LLM_DELTA_TEXT] ? 1 : 0, "%s",
                     cases[i].run);
        cr_expect_eq(t_scripted_served(script), 1, "%s", cases[i].run);
    }
    fixture_free(&f);
}

/* Retry-After as an HTTP date (IMF-fixdate) an hour ahead, past the total
 * time the policy may spend: the transport takes the server's word and
 * gives up after the one request (ignoring the date, its own backoff would
 * retry at once).  No clock is read here: test_llm_retry_after checks the
 * date's arithmetic.  The way back off is the same for every protocol, so
 * once is enough. */
Test(llm_faults, retry_after_as_an_http_date)
{
    serve(&g_protos[0],
          list(2,
               "{\"status\": 429, \"retry_after_in\": 3600, \"body\": "
               "{\"error\": {\"message\": \"slow down\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "date");
    expect_error(&f, PL_ERR_RATE_LIMITED, "slow down");
    cr_expect_eq(t_server_requests(&g_srv), 1, "the date was not honoured");
    cr_expect_eq(attempts(&f, "date"), 1);
    fixture_free(&f);
}

/* retry-after-ms (OpenAI's and Anthropic's) wins over Retry-After: here
 * Retry-After alone (an hour) would be past the total time, and the call
 * would give up after one request. */
Test(llm_faults, retry_after_ms_wins_over_retry_after)
{
    serve(&g_protos[0],
          list(2,
               "{\"status\": 429, \"headers\": {\"Retry-After\": \"3600\", "
               "\"retry-after-ms\": \"5\"}, \"body\": {\"error\": "
               "{\"message\": \"slow down\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "ms");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 2);
    fixture_free(&f);
}

/* A Retry-After that is neither seconds nor a date is ignored (the
 * backoff's wait of a few ms), and a date past means at once: either read
 * as a wait past the minute of total_timeout_ms would end the call after
 * its first request. */
Test(llm_faults, a_retry_after_unreadable_or_past_is_no_wait)
{
    serve(&g_protos[0],
          list(3,
               "{\"status\": 429, \"headers\": {\"Retry-After\": \"soon\"}, "
               "\"body\": {\"error\": {\"message\": \"slow down\"}}}",
               "{\"status\": 503, \"retry_after_in\": -3600, \"body\": "
               "{\"error\": {\"message\": \"busy\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "ra");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 3);
    fixture_free(&f);
}

/* 408 and 409 are tried again, as the official SDKs do. */
Test(llm_faults, timeout_and_conflict_are_retried)
{
    serve(&g_protos[0],
          list(3, "{\"status\": 408, \"body\": {\"error\": \"slow\"}}",
               "{\"status\": 409, \"body\": {\"error\": \"busy\"}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "408");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 3);
    cr_expect_eq(attempts(&f, "408"), 3);
    fixture_free(&f);
}

/* A retry that is not made says why, and after how many attempts. */
Test(llm_faults, a_skipped_retry_says_why)
{
    serve(&g_protos[0],
          list(2,
               "{\"status\": 429, \"headers\": {\"Retry-After\": "
               "\"3600\"}, \"body\": {\"error\": {\"message\": \"slow "
               "down\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "budget");
    expect_error(&f, PL_ERR_RATE_LIMITED,
                 "not tried again after 1 attempt: "
                 "the wait of 3600000 ms the server "
                 "asked for is past the");
    fixture_free(&f);
    serve(&g_protos[0],
          list(2, "{\"status\": 500, \"body\": {\"error\": \"boom\"}}",
               "{\"status\": 500, \"body\": {\"error\": \"boom\"}}"));
    o.max_attempts = 2;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    fixture g = {0};
    run(&g, &o, "hi", "[]", "spent");
    expect_error(&g, PL_ERR_RETRYABLE_SERVER,
                 "not tried again after 2 attempts: no attempt was left "
                 "(max_attempts 2)");
    fixture_free(&g);
}

/* A response nested past what the parser takes says so, not "not JSON";
 * a body of another shape names what it lacks in plain words. */
Test(llm_faults, deep_and_misshapen_responses_say_what_they_are)
{
    size_t n = 2 * 1200 + 64;
    char *r = malloc(n);
    cr_assert_not_null(r);
    size_t at = (size_t)snprintf(r, n, "{\"raw\": \"");
    for (int i = 0; i < 1200; i++)
        r[at++] = '[';
    for (int i = 0; i < 1200; i++)
        r[at++] = ']';
    snprintf(r + at, n - at, "\"}");
    serve(&g_protos[0], list(1, r));
    free(r);
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "deep");
    expect_error(&f, PL_ERR_INVALID_INPUT, "nests deeper than 1000 levels");
    fixture_free(&f);
    serve(&g_protos[0], list(1, "{\"body\": {\"id\": \"x\"}}"));
    fixture g = {0};
    run(&g, NULL, "hi", "[]", "shape");
    expect_error(&g, PL_ERR_INVALID_INPUT,
                 "the model's response has no choices[0].message object");
    fixture_free(&g);
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                 */
/* ------------------------------------------------------------------------ */

/* The agent, offered @p actions, gets @p response (with @p o, or the
 * defaults) and ends in an error result @p code naming @p in_message,
 * after one request: none of these is retried, and no tool runs. */
static void fails_with(const proto *p, const char *response,
                       const pl_llm_options *o, const char *actions,
                       const char *code, const char *in_message)
{
    char *r = malloc(strlen(response) + 1);
    cr_assert_not_null(r);
    memcpy(r, response, strlen(response) + 1);
    serve(p, list(1, r));
    free(r);
    fixture f = {0};
    run(&f, o, "hi", actions, "fails");
    expect_error(&f, code, in_message);
    cr_expect_eq(t_server_requests(&g_srv), 1, "%s: not retried", p->name);
    cr_expect_eq(t_calls.add, 0);
    fixture_free(&f);
}

PROTO_TEST(a_body_that_is_not_json_is_an_error_result)
{
    fails_with(&g_protos[*ix], "{\"raw\": \"{not json at all\"}", NULL, "[]",
               PL_ERR_INVALID_INPUT, "not JSON");
}

PROTO_TEST(a_body_of_another_shape_is_an_error_result)
{
    fails_with(&g_protos[*ix], "{\"body\": {\"id\": \"x\"}}", NULL, "[]",
               PL_ERR_INVALID_INPUT, "the model's response has no");
}

PROTO_TEST(an_unknown_tool_fails_fast)
{
    fails_with(&g_protos[*ix],
               "{\"answer\": {\"tool_calls\": [{\"id\": \"c9\", \"name\": "
               "\"rm_rf\", \"arguments\": {}}]}}",
               NULL, "[\"add\"]", PL_LLM_ERR_INVALID_MODEL_ACTION, "'rm_rf'");
}

PROTO_TEST(malformed_arguments_fail_fast)
{
    /* OpenAI sends arguments as text, which may not be JSON; the others
     * send a JSON value, which may not be an object */
    const proto *p = &g_protos[*ix];
    fails_with(p,
               p->text_args ? "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", "
                              "\"name\": \"add\", \"raw_arguments\": "
                              "\"{\\\"a\\\": 1,\"}]}}"
                            : "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", "
                              "\"name\": \"add\", \"arguments\": [1, 2]}]}}",
               NULL, "[\"add\"]", PL_LLM_ERR_INVALID_MODEL_ACTION,
               p->text_args ? "not JSON" : "not a JSON object");
}

PROTO_TEST(arguments_against_the_tools_schema_fail_fast)
{
    fails_with(&g_protos[*ix],
               "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", \"name\": "
               "\"effect\", \"arguments\": {\"note\": 5}}]}}",
               NULL, "[\"effect\"]", PL_LLM_ERR_INVALID_MODEL_ACTION,
               "does not match");
}

PROTO_TEST(an_oversized_body_is_refused)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_response_bytes = 4096;
    fails_with(&g_protos[*ix], "{\"size\": 200000}", &o, "[]",
               PL_ERR_INVALID_INPUT, "max_response_bytes");
}

PROTO_TEST(unauthorized_maps_without_retry_and_hides_the_key)
{
    char r[300];
    snprintf(r, sizeof r,
             "{\"status\": 401, \"body\": {\"error\": {\"message\": "
             "\"bad key %s\"}}}",
             g_key);
    serve(&g_protos[*ix], list(1, r));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "401");
    expect_error(&f, PL_ERR_UNAUTHORIZED, "HTTP 401");
    cr_expect_eq(t_server_requests(&g_srv), 1, "%s: not retried", g_p->name);
    char *res = t_text(pl_outcome_result(f.out));
    if (g_p->key_env) /* Ollama sends no key: its echo is no secret */
        cr_expect(!strstr(res, g_key), "%s: the key is in the result: %s",
                  g_p->name, res);
    free(res);
    fixture_free(&f);
}

/* The scripted model plays HTTP failures as the servers' are taken: a
 * retryable one whose attempts are spent says so, and after how many, as
 * the header promises of every RateLimited, RetryableServer or Timeout
 * result; 408 and 409 are retried as they are over HTTP. */
Test(llm_faults, the_scripted_models_spent_retries_say_why)
{
    const char *script = t_write_file(
        "spent.json", "{\"responses\": [{\"status\": 408}, {\"status\": 429}, "
                      "{\"status\": 429}, {\"text\": \"late\"}]}");
    char url[4400];
    snprintf(url, sizeof url, "scripted://%s", script);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "spent");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    const cJSON *r = pl_outcome_result(out);
    cr_expect_str_eq(t_str(r, "code"), PL_ERR_RATE_LIMITED, "%s", t_text(r));
    const char *msg = t_str(r, "message");
    cr_expect(msg && strstr(msg, "HTTP 429 from the scripted model (not tried "
                                 "again after 3 attempts: no attempt was "
                                 "left (max_attempts 3))"),
              "%s", msg ? msg : "(none)");
    cr_expect_eq(t_scripted_served(script), 3);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}
