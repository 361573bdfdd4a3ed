/*
 * test_llm_stream_odd.c -- streams and quotes that are odd but fair,
 * against the loopback server's raw streams (tests/llm_server.py) and the
 * scripted model: an NDJSON stream whose last line has no newline; bytes
 * past the final event that would pass max_response_bytes; what a server
 * or a model sent, quoted in a message, cut on a character boundary (the
 * message, and a re-prompt that carries it, stay UTF-8); the scripted
 * model's argument pieces cut on a character boundary; OpenAI tool calls
 * that share an index but not an id, and indexes with a gap; a byte order
 * mark before the first event.
 */
#include "llm_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* @p n times "\u00e9" (two bytes of UTF-8 each), as JSON escapes. */
static char *e_acutes(size_t n)
{
    char *s = malloc(6 * n + 1);
    cr_assert_not_null(s);
    for (size_t i = 0; i < n; i++)
        memcpy(s + 6 * i, "\\u00e9", 6);
    s[6 * n] = '\0';
    return s;
}

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

/* A server-sent event stream may begin with a byte order mark, which a
 * reader skips (the SSE specification's decoding step); it was taken for
 * a line that is not SSE, and the answer refused. */
Test(llm_stream_odd, a_byte_order_mark_before_the_first_event_is_skipped)
{
    t_server srv;
    pl_engine *e;
    pl_registry *reg;
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = t_count_delta; /* streamed */
    pl_outcome *out = ask(&srv, &e, &reg, "openai", "openai://m",
                          "{\"stream_raw\": \"\ufeffdata: {\\\"choices\\\": "
                          "[{\\\"delta\\\": {\\\"content\\\": "
                          "\\\"Marked.\\\"}}]}\\n\\ndata: [DONE]\\n\\n\"}",
                          &o);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Marked.", "%s",
                     t_text(pl_outcome_result(out)));
    cr_expect_eq(t_server_requests(&srv), 1, "asked once");
    done(&srv, e, reg, out);
}

/* The result's message of a failed model call is well-formed UTF-8. */
static void expect_message_utf8(pl_outcome *out, const char *want)
{
    const cJSON *r = pl_outcome_result(out);
    const char *msg = t_str(r, "message");
    cr_assert_not_null(msg, "%s", t_text(r));
    cr_expect(strstr(msg, want), "message %s, wanted %s", msg, want);
    cr_expect(t_utf8_ok(msg, strlen(msg)), "a character cut in two: %s", msg);
}

/* What a server sent, quoted in a message and cut short there, is cut
 * between characters: an error body's message (200 bytes), an error event
 * (239), a line that is not the protocol's (40).  Each text is "a" and
 * two-byte characters, so that a cut by bytes falls inside one. */
Test(llm_stream_odd, a_quote_is_cut_between_characters)
{
    char *e150 = e_acutes(150), *e30 = e_acutes(30);
    char resp[3][2048];
    snprintf(resp[0], sizeof resp[0],
             "{\"status\": 400, \"body\": {\"error\": {\"message\": "
             "\"a%s\"}}}",
             e150);
    snprintf(resp[1], sizeof resp[1],
             "{\"stream_raw\": \"data: {\\\"error\\\": {\\\"message\\\": "
             "\\\"a%s\\\"}}\\n\\n\"}",
             e150);
    snprintf(resp[2], sizeof resp[2], "{\"stream_raw\": \"a%s\\n\\n\"}", e30);
    const char *want[3] = {"HTTP 400 from the model's server: a",
                           "carried an error: a", "a line reads 'a"};
    for (int i = 0; i < 3; i++) {
        t_server srv;
        pl_engine *e;
        pl_registry *reg;
        pl_llm_options o = PL_LLM_OPTIONS_INIT;
        o.max_attempts = 1;
        if (i)
            o.on_delta = t_count_delta;
        pl_outcome *out = ask(&srv, &e, &reg, "openai", "openai://m", resp[i],
                              &o);
        expect_message_utf8(out, want[i]);
        done(&srv, e, reg, out);
    }
    free(e150);
    free(e30);
}

/* A malformed answer's message quotes what came back (cut at 196 bytes);
 * re-prompted, that message is the next request's user message, which
 * must stay UTF-8 for the provider to read it. */
Test(llm_stream_odd, a_reprompt_quoting_the_answer_stays_utf8)
{
    char *e150 = e_acutes(150);
    char resp[2048];
    snprintf(resp, sizeof resp,
             "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", \"name\": "
             "\"effect\", \"raw_arguments\": \"[\\\"a%s\\\"]\"}]}},"
             "{\"answer\": {\"text\": \"Sorry.\"}}",
             e150);
    free(e150);
    t_server srv;
    pl_engine *e;
    pl_registry *reg;
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.malformed = PL_LLM_MALFORMED_REPROMPT;
    char script[2200];
    snprintf(script, sizeof script,
             "{\"protocol\": \"openai\", "
             "\"responses\": [%s]}",
             resp);
    t_server_start(&srv, script);
    char model[128];
    o.base_url = t_model_on(model, sizeof model, &srv, "openai", "openai://m");
    o.backoff_base_ms = 10;
    reg = t_llm_registry(model, &o);
    e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[\"effect\"]", "odd");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Sorry.");
    cJSON *log = t_server_log(&srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(log,
                                                                            1),
                                                         "body");
    cr_expect(cJSON_IsObject(body),
              "the re-prompt's request is not JSON the server can read (a "
              "character cut in two)");
    cJSON_Delete(log);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "odd", "0.0"), PL_OK, "%s", pl_errmsg());
    bool seen = false;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "reprompt")))
            continue;
        const char *t = t_str(p, "text");
        seen = true;
        cr_expect(t && strstr(t, "not a JSON object: '[\"a"), "%s", t);
        cr_expect(t && t_utf8_ok(t, strlen(t)), "a character cut in two: %s",
                  t);
    }
    cr_expect(seen, "no re-prompt step");
    pl_steps_free(l);
    done(&srv, e, reg, out);
}

/* Every delta of the scripted model's stream stands alone as UTF-8: its
 * arguments' pieces of 8 bytes are cut between characters. */
static char g_args[4096];
static size_t g_args_len;
static int g_args_bad;

static void keep_args(const pl_llm_delta *d, void *user)
{
    (void)user;
    if (d->kind != PL_LLM_DELTA_TOOL_ARGS)
        return;
    if (!t_utf8_ok(d->text, d->len))
        g_args_bad++;
    if (g_args_len + d->len < sizeof g_args) {
        memcpy(g_args + g_args_len, d->text, d->len);
        g_args_len += d->len;
    }
}

Test(llm_stream_odd, the_scripted_pieces_are_cut_between_characters)
{
    const char *path = t_write_file(
        "s.json", "{\"responses\": ["
                  "{\"tool_calls\": [{\"id\": \"c1\", \"name\": \"effect\", "
                  "\"arguments\": {\"note\": \"\\u00e9t\\u00e9 \\u20ac "
                  "\\ud83d\\ude00 caf\\u00e9s \\u00e9\\u00e9\\u00e9\"}}]},"
                  "{\"text\": \"Noted.\"}]}");
    char url[4400];
    snprintf(url, sizeof url, "scripted://%s", path);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = keep_args;
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "note", "[\"effect\"]", "pieces");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_eq(g_args_bad, 0, "pieces that are not UTF-8 on their own");
    g_args[g_args_len] = '\0';
    cr_expect_str_eq(g_args, "{\"note\":\"\xc3\xa9t\xc3\xa9 \xe2\x82\xac "
                             "\xf0\x9f\x98\x80 caf\xc3\xa9s "
                             "\xc3\xa9\xc3\xa9\xc3\xa9\"}");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The deltas' tool_index of turn 1. */
static unsigned g_index_seen[4];
static size_t g_n_index;

static void keep_index(const pl_llm_delta *d, void *user)
{
    (void)user;
    if (d->kind == PL_LLM_DELTA_TOOL_ARGS && d->turn == 1 && g_n_index < 4)
        g_index_seen[g_n_index++] = d->tool_index;
}

/* The OpenAI stream @p stream (SSE events, escaped as a JSON string's
 * text) of two calls of "echo", ids c1 and c2, then "Echoed twice.", as
 * run @p run, its deltas kept (keep_index()): the two calls must be
 * recorded in that order.  The completed outcome; done() ends it. */
static pl_outcome *echo_twice(t_server *srv, pl_engine **e, pl_registry **reg,
                              const char *stream, const char *run)
{
    char script[2600];
    snprintf(script, sizeof script,
             "{\"protocol\": \"openai\", \"responses\": ["
             "{\"stream_raw\": \"%sdata: [DONE]\\n\\n\"},"
             "{\"answer\": {\"text\": \"Echoed twice.\"}}]}",
             stream);
    t_server_start(srv, script);
    char model[128];
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = t_model_on(model, sizeof model, srv, "openai", "openai://m");
    o.on_delta = keep_index;
    *reg = t_llm_registry(model, &o);
    *e = t_engine(t_store_path(), *reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(*e, "hi", "[\"echo\"]", run);
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Echoed twice.",
                     "%s", t_text(pl_outcome_result(out)));
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, *e, run, "0.0"), PL_OK, "%s", pl_errmsg());
    const char *ids[2] = {"c1", "c2"};
    int calls = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_CALL)
            continue;
        cr_assert_lt(calls, 2, "more than two calls");
        const cJSON *p = pl_step_payload(s);
        cr_expect_str_eq(t_str(p, "policy"), "echo");
        cr_expect_str_eq(t_str(p, "call_id"), ids[calls]);
        calls++;
    }
    cr_expect_eq(calls, 2);
    pl_steps_free(l);
    return out;
}

/* A server that numbers every streamed tool call 0 (each call whole in a
 * piece of its own, with its own id): an id other than the one its place
 * holds begins another call, as the whole answer would have two.  They
 * were joined into one call ("echoecho", arguments "{}{}"): a malformed
 * answer, no tool run. */
Test(llm_stream_odd, calls_that_share_an_index_but_not_an_id_are_two)
{
#define PIECE(ID)                                                              \
    "data: {\\\"choices\\\": [{\\\"delta\\\": {\\\"tool_calls\\\": "           \
    "[{\\\"index\\\": 0, \\\"id\\\": \\\"" ID "\\\", \\\"function\\\": "       \
    "{\\\"name\\\": \\\"echo\\\", \\\"arguments\\\": \\\"{}\\\"}}]}}]}\\n\\n"
    const char *two = PIECE("c1") PIECE("c2");
#undef PIECE
    t_server srv;
    pl_engine *e = NULL;
    pl_registry *reg = NULL;
    pl_outcome *out = echo_twice(&srv, &e, &reg, two, "odd");
    cr_expect_eq(g_n_index, 2);
    cr_expect_eq(g_index_seen[0], 0);
    cr_expect_eq(g_index_seen[1], 1, "the second call's place");
    done(&srv, e, reg, out);
}

/* A server whose tool call indexes leave a gap (0, then 2): the answer
 * records the calls in their places, 0 and 1, and the deltas say those
 * places, so that a viewer matches each piece with its recorded call.
 * The second call's pieces said 2, the server's index, which no recorded
 * call has. */
Test(llm_stream_odd, a_gap_in_the_tool_call_indexes_is_no_gap_in_the_deltas)
{
#define PIECE(I, ID, NAME, ARGS)                                               \
    "data: {\\\"choices\\\": [{\\\"delta\\\": {\\\"tool_calls\\\": "           \
    "[{\\\"index\\\": " I ID ", \\\"function\\\": {" NAME                      \
    "\\\"arguments\\\": \\\"" ARGS "\\\"}}]}}]}\\n\\n"
#define ID(X) ", \\\"id\\\": \\\"" X "\\\""
#define NAME "\\\"name\\\": \\\"echo\\\", "
    const char *pieces = PIECE("0", ID("c1"), NAME, "{") PIECE("0", "", "", "}")
        PIECE("2", ID("c2"), NAME, "{") PIECE("2", "", "", "}");
#undef NAME
#undef ID
#undef PIECE
    t_server srv;
    pl_engine *e = NULL;
    pl_registry *reg = NULL;
    pl_outcome *out = echo_twice(&srv, &e, &reg, pieces, "gap");
    cr_expect_eq(g_n_index, 4);
    cr_expect_eq(g_index_seen[0], 0);
    cr_expect_eq(g_index_seen[1], 0);
    cr_expect_eq(g_index_seen[2], 1, "the second call's place, not its index");
    cr_expect_eq(g_index_seen[3], 1, "the second call's place, not its index");
    done(&srv, e, reg, out);
}
