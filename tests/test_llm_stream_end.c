/*
 * test_llm_stream_end.c -- what a model's stream sends at and past its
 * end, against the loopback server's raw streams (tests/llm_server.py):
 * bytes past the final event are not read; what the stream quotes in an
 * error has the API key out of it before it is cut short.
 */
#include "llm_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ignore(const pl_llm_delta *d, void *user) { (void)d, (void)user; }

/* An OpenAI model on @p base that streams. */
static pl_llm_options quick(const char *base)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = base;
    o.timeout_ms = 5000;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 50;
    o.on_delta = ignore;
    return o;
}

/* What a server sends past its stream's final event is not the answer,
 * nor a fault of it: the answer stands, the model asked once. */
Test(llm_stream_end, bytes_past_the_final_event_are_left)
{
    t_server srv;
    t_server_start(
        &srv, "{\"responses\": [{\"stream_raw\": \"data: {\\\"choices\\\": "
              "[{\\\"delta\\\": {\\\"content\\\": \\\"All done.\\\"}}]}"
              "\\n\\ndata: [DONE]\\n\\nnot an event\\n\\n\"}]}");
    pl_llm_options o = quick(srv.base);
    pl_registry *reg = t_llm_registry("openai://m", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "past");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "All done.", "%s",
                     t_text(pl_outcome_result(out)));
    cr_expect_eq(t_server_requests(&srv), 1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

/* A stream that quotes the key, in a line refused or in an error event:
 * the message quotes it redacted, then cut, so no part of the key reaches
 * the result (a cut made first left its start). */
Test(llm_stream_end, a_stream_quoting_the_key_leaves_no_part_of_it)
{
    const char *key = "sk-planted-SECRET-7f3a9c1e5b";
    char raw[2][600];
    snprintf(raw[0], sizeof raw[0],
             "{\"stream_raw\": \"Authorization: Bearer %s\\n\\n\"}", key);
    snprintf(raw[1], sizeof raw[1],
             "{\"stream_raw\": \"data: {\\\"error\\\": {\\\"message\\\": "
             "\\\"%.225s %s\\\"}}\\n\\n\"}",
             t_pad(), key);
    setenv("MY_LLM_KEY", key, 1);
    for (int i = 0; i < 2; i++) {
        char script[sizeof raw + 32];
        snprintf(script, sizeof script, "{\"responses\": [%s]}", raw[i]);
        t_server srv;
        t_server_start(&srv, script);
        pl_llm_options o = quick(srv.base);
        o.api_key_env = "MY_LLM_KEY";
        o.max_attempts = 1;
        pl_registry *reg = t_llm_registry("openai://m", &o);
        pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
        pl_outcome *out = t_agent(e, "hi", "[]", i ? "key-event" : "key-line");
        cr_assert_eq(out->status, PL_RUN_COMPLETED);
        char *res = t_text(pl_outcome_result(out));
        cr_expect(strstr(res, i ? "carried an error" : "a line reads"), "%s",
                  res);
        cr_expect(!strstr(res, "sk-planted"), "part of the key: %s", res);
        free(res);
        pl_outcome_free(out);
        pl_engine_close(e);
        pl_registry_free(reg);
        t_server_stop(&srv);
    }
    unsetenv("MY_LLM_KEY");
}
