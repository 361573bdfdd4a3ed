/*
 * test_llm_stream_odd.c -- streams and quotes that are odd but fair,
 * against the loopback server's raw streams (tests/llm_server.py) and the
 * scripted model: an NDJSON stream whose last line has no newline; bytes
 * past the final event that would pass max_response_bytes.
 */
#include "llm_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A model on the loopback server @p srv (started on @p responses for
 * @p protocol) with the options @p o (NULL: the defaults) and short
 * waits; the agent asked "hi", no tools. */
static pl_outcome *ask(t_server *srv, pl_engine **e, pl_registry **reg,
                       const char *protocol, const char *url,
                       const char *responses, const pl_llm_options *o)
{
    size_t n = strlen(responses) + 64;
    char *script = malloc(n);
    cr_assert_not_null(script);
    snprintf(script, n, "{\"protocol\": \"%s\", \"responses\": [%s]}", protocol,
             responses);
    t_server_start(srv, script);
    free(script);
    char model[128];
    pl_llm_options opts = PL_LLM_OPTIONS_INIT;
    if (o)
        opts = *o;
    opts.base_url = t_model_on(model, sizeof model, srv, protocol, url);
    opts.timeout_ms = 5000;
    opts.backoff_base_ms = 10;
    opts.backoff_max_ms = 50;
    *reg = t_llm_registry(model, &opts);
    *e = t_engine(t_store_path(), *reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(*e, "hi", "[]", "odd");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    return out;
}

static void done(t_server *srv, pl_engine *e, pl_registry *reg, pl_outcome *out)
{
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(srv);
}

/* NDJSON's last line needs no newline: an Ollama stream whose "done"
 * line ends the body without one came whole, and is the answer, asked
 * once (it was dropped as a cut line, the stream taken as cut and
 * retried). */
Test(llm_stream_odd, an_ndjson_last_line_without_its_newline_is_read)
{
    t_server srv;
    pl_engine *e;
    pl_registry *reg;
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = t_count_delta;
    memset(t_delta_kinds, 0, sizeof t_delta_kinds);
    pl_outcome *out = ask(
        &srv, &e, &reg, "ollama", "ollama://m",
        "{\"stream_raw\": \"{\\\"message\\\": {\\\"role\\\": "
        "\\\"assistant\\\", \\\"content\\\": \\\"Hi \\\"}, \\\"done\\\": "
        "false}\\r\\n{\\\"message\\\": {\\\"role\\\": \\\"assistant\\\", "
        "\\\"content\\\": \\\"there.\\\"}, \\\"done\\\": true, "
        "\\\"prompt_eval_count\\\": 7, \\\"eval_count\\\": 2}\"}",
        &o);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Hi there.", "%s",
                     t_text(pl_outcome_result(out)));
    cr_expect_eq(t_server_requests(&srv), 1, "asked once");
    cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_TEXT], 2);
    cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_RESTARTED], 0);
    cr_expect_eq(t_delta_kinds[PL_LLM_DELTA_END], 1);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_expect_eq(pl_llm_run_tokens(&tok, e, "odd"), PL_OK);
    cr_expect_eq(tok.input, 7);
    cr_expect_eq(tok.output, 2);
    done(&srv, e, reg, out);
}

/* Bytes past the final event are not read, so they do not count against
 * max_response_bytes either: an answer within the cap, then a tail that
 * would pass it (in the same chunk), is the answer. */
Test(llm_stream_odd, bytes_past_the_final_event_do_not_count_against_the_cap)
{
    size_t tail = 8192; /* comment lines of 63 ':' (JSON escapes) */
    char *junk = malloc(tail + tail / 64 + 1);
    cr_assert_not_null(junk);
    size_t k = 0;
    for (size_t i = 0; i < tail; i++)
        if (i % 64 == 63)
            junk[k++] = '\\', junk[k++] = 'n';
        else
            junk[k++] = ':';
    junk[k] = '\0';
    char *resp = malloc(k + 256);
    cr_assert_not_null(resp);
    snprintf(resp, k + 256,
             "{\"stream_raw\": \"data: {\\\"choices\\\": [{\\\"delta\\\": "
             "{\\\"content\\\": \\\"Short.\\\"}}]}\\n\\ndata: "
             "[DONE]\\n\\n%s\"}",
             junk);
    free(junk);
    t_server srv;
    pl_engine *e;
    pl_registry *reg;
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = t_count_delta;
    o.max_response_bytes = 4096;
    pl_outcome *out = ask(&srv, &e, &reg, "openai", "openai://m", resp, &o);
    free(resp);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Short.", "%s",
                     t_text(pl_outcome_result(out)));
    cr_expect_eq(t_server_requests(&srv), 1);
    done(&srv, e, reg, out);
}
