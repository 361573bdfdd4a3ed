/*
 * test_llm_limits.c -- the limits an LLM policy holds a model's answer
 * to are the same whether the answer is streamed or not: an answer of
 * more tool calls than one answer may hold is refused alike on every
 * protocol, and one at the limit is taken alike (against the loopback
 * server, tests/llm_server.py).
 */
#include "llm_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void no_delta(const pl_llm_delta *d, void *user)
{
    (void)d;
    (void)user;
}

/* Run the agent on a server of @p proto whose first answer is @p n calls
 * of "add"; the agent's result (caller frees) and *adds, the calls made. */
static cJSON *answer_of_calls(const char *proto, const char *url, int n,
                              bool stream, int *adds)
{
    size_t cap = 200 + 100 * (size_t)n;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    int k = snprintf(s, cap,
                     "{\"protocol\": \"%s\", \"responses\": [{\"answer\": "
                     "{\"tool_calls\": [",
                     proto);
    for (int i = 0; i < n; i++)
        k += snprintf(s + k, cap - (size_t)k,
                      "%s{\"id\": \"c%d\", \"name\": \"add\", \"arguments\": "
                      "{\"a\": 1, \"b\": %d}}",
                      i ? "," : "", i, i);
    snprintf(s + k, cap - (size_t)k,
             "]}, \"usage\": [1, 1]}, {\"answer\": {\"text\": \"done\"}}]}");
    t_server srv;
    t_server_start(&srv, s);
    free(s);
    char model[128];
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = t_model_on(model, sizeof model, &srv, proto, url);
    o.timeout_ms = 5000;
    o.max_attempts = 1;
    if (stream)
        o.on_delta = no_delta;
    pl_registry *reg = t_llm_registry(model, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    int before = t_calls.add;
    pl_outcome *out = t_agent(e, "add them", "[\"add\"]", stream ? "s" : "w");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s: %s", proto,
                 out->reason ? out->reason : "");
    cJSON *r = cJSON_Duplicate(pl_outcome_result(out), 1);
    *adds = t_calls.add - before;
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    return r;
}

/* Past the limit: refused alike, streamed or not, naming the limit; at
 * it: taken alike. */
static void calls_limit(const char *proto, const char *url)
{
    for (int stream = 0; stream < 2; stream++) {
        int adds = -1;
        cJSON *r = answer_of_calls(proto, url, 129, stream, &adds);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")),
                  "%s, streamed %d: 129 calls taken: %s", proto, stream,
                  t_text(r));
        const char *code = t_str(r, "code"), *msg = t_str(r, "message");
        cr_expect(code && !strcmp(code, PL_ERR_INVALID_INPUT), "%s: %s", proto,
                  t_text(r));
        cr_expect(msg && strstr(msg, "has more than 128 tool calls"),
                  "%s, streamed %d: %s", proto, stream, msg ? msg : "(none)");
        cr_expect_eq(adds, 0, "%s, streamed %d: no tool runs", proto, stream);
        cJSON_Delete(r);

        r = answer_of_calls(proto, url, 128, stream, &adds);
        cr_expect_str_eq(t_str(r, "text"), "done", "%s, streamed %d: %s", proto,
                         stream, t_text(r));
        cr_expect_eq(adds, 128);
        cJSON_Delete(r);
    }
}

Test(llm_limits, tool_calls_openai, .timeout = 120)
{
    calls_limit("openai", "openai://m");
}

Test(llm_limits, tool_calls_anthropic, .timeout = 120)
{
    calls_limit("anthropic", "anthropic://claude-test");
}

Test(llm_limits, tool_calls_gemini, .timeout = 120)
{
    calls_limit("gemini", "gemini://gem-test");
}

Test(llm_limits, tool_calls_ollama, .timeout = 120)
{
    calls_limit("ollama", "ollama");
}

/* Anthropic's content blocks: a whole body of more than a stream may hold
 * is refused as the stream is. */
Test(llm_limits, content_blocks_anthropic)
{
    size_t cap = 64 * 1100;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    int k = snprintf(s, cap,
                     "{\"protocol\": \"anthropic\", \"responses\": "
                     "[{\"status\": 200, \"body\": {\"content\": [");
    for (int i = 0; i < 1025; i++)
        k += snprintf(s + k, cap - (size_t)k,
                      "%s{\"type\": \"text\", \"text\": \"w\"}", i ? "," : "");
    snprintf(s + k, cap - (size_t)k, "]}}]}");
    t_server srv;
    t_server_start(&srv, s);
    free(s);
    char base[80];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    setenv("ANTHROPIC_API_KEY", "sk-limits-1234", 1);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = base;
    o.max_attempts = 1;
    pl_registry *reg = t_llm_registry("anthropic://claude-test", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "talk", "[]", "blocks");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    const char *msg = t_str(pl_outcome_result(out), "message");
    cr_expect_str_eq(t_str(pl_outcome_result(out), "code"),
                     PL_ERR_INVALID_INPUT);
    cr_expect(msg && strstr(msg, "more than 1024 content blocks"), "%s",
              t_text(pl_outcome_result(out)));
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}
