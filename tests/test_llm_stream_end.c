/*
 * test_llm_stream_end.c -- what a model's stream sends at and past its
 * end, against the loopback server's raw streams (tests/llm_server.py):
 * bytes past the final event are not read; what the stream quotes in an
 * error has the API key out of it before it is cut short; an answer the
 * store cannot record ends in a restart, not an end.
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

/* A streamed answer delivered whole that the store then cannot record
 * (its map full, not allowed to grow: the turn's commit fails) was never
 * the answer: the viewer gets PL_LLM_DELTA_RESTARTED, never
 * PL_LLM_DELTA_END, and the run fails with the store's error. */
Test(llm_stream_end, an_answer_the_store_cannot_record_is_restarted)
{
    size_t words = 20000, cap = words * 101 + 64;
    char *script = malloc(cap);
    cr_assert_not_null(script);
    size_t k = (size_t)snprintf(script, cap, "{\"responses\": [{\"text\": \"");
    for (size_t i = 0; i < words; i++)
        k += (size_t)snprintf(script + k, cap - k, "%.99s ", t_pad());
    snprintf(script + k, cap - k, "\"}]}");
    const char *path = t_write_file("big.json", script);
    free(script);
    char url[4400];
    snprintf(url, sizeof url, "scripted://%s", path);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = t_count_delta;
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.map_size = (size_t)256 << 10;
    eo.map_size_max = (size_t)1 << 20;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    cJSON *p = t_json("{\"text\": \"hi\", \"actions\": []}");
    pl_action a = {PL_ACTION_VERSION, "agent", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "full";
    pl_outcome *out = NULL;
    int st = pl_run_start(&out, e, &a, &ro);
    cJSON_Delete(p);
    cr_expect_eq(st, PL_EMAPFULL, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_TEXT], (int)words);
    cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_END], 0);
    cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_RESTARTED], 1);
    cr_expect_eq(t_scripted_served(path), 1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}
