/*
 * test_llm_stream.c -- streamed model output on every protocol, against
 * the loopback server's streams (tests/llm_server.py): the deltas arrive
 * in order and make the recorded answer; what is recorded is what the
 * same call without streaming records; arguments cut in many events
 * reassemble; a stream cut in the middle is retried after a "restarted"
 * delta; usage counts; a replayed turn is one delta a part; streams that
 * are not the protocol's, or too large, fail clearly and are not retried.
 */
#include "llm_support.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rec {
    pl_llm_delta_kind kind;
    char *text;
    char tool[64];
    bool no_tool; /* tool was NULL */
    unsigned index, turn;
    int replayed;
    char run[64], path[64];
    pthread_t thread; /* the callback's */
} rec;

#define MAX_RECS 20000
static rec g_recs[MAX_RECS];
static size_t g_n;

static pthread_mutex_t g_recs_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_bad; /* a callback without its user pointer, or past the end */

/* Called on a pool's threads too: no assertion here (recs_clear() checks
 * g_bad). */
static void on_delta(const pl_llm_delta *d, void *user)
{
    pthread_mutex_lock(&g_recs_mu); /* runs of a pool call it at once */
    if (user != (void *)g_recs || g_n >= MAX_RECS) {
        g_bad = 1;
        pthread_mutex_unlock(&g_recs_mu);
        return;
    }
    rec *r = &g_recs[g_n++];
    pthread_mutex_unlock(&g_recs_mu);
    r->thread = pthread_self();
    r->kind = d->kind;
    r->text = malloc(d->len + 1);
    memcpy(r->text, d->text, d->len);
    r->text[d->len] = '\0';
    snprintf(r->tool, sizeof r->tool, "%s", d->tool ? d->tool : "");
    r->no_tool = d->tool == NULL;
    r->index = d->tool_index;
    r->turn = d->turn;
    r->replayed = d->replayed;
    snprintf(r->run, sizeof r->run, "%s", d->run_id);
    snprintf(r->path, sizeof r->path, "%s", d->path);
}

static void recs_clear(void)
{
    cr_expect_eq(g_bad, 0, "a delta without its user pointer, or too many");
    for (size_t i = 0; i < g_n; i++)
        free(g_recs[i].text);
    g_n = 0;
}

/* The deltas of @p kind for @p turn after its last restart, joined;
 * *count: how many.  Caller frees. */
static char *joined(unsigned turn, pl_llm_delta_kind kind, size_t *count)
{
    size_t from = 0, len = 0, n = 0;
    for (size_t i = 0; i < g_n; i++)
        if (g_recs[i].turn == turn && g_recs[i].kind == PL_LLM_DELTA_RESTARTED)
            from = i + 1;
    for (size_t i = from; i < g_n; i++)
        len += g_recs[i].turn == turn && g_recs[i].kind == kind
                   ? strlen(g_recs[i].text)
                   : 0;
    char *s = calloc(1, len + 1);
    size_t at = 0;
    for (size_t i = from; i < g_n; i++)
        if (g_recs[i].turn == turn && g_recs[i].kind == kind) {
            size_t l = strlen(g_recs[i].text);
            memcpy(s + at, g_recs[i].text, l);
            at += l;
            n++;
        }
    if (count)
        *count = n;
    return s;
}

static const cJSON *at(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static pl_llm_options quick(const char *base, bool stream)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = base;
    o.timeout_ms = 5000;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 50;
    if (stream) {
        o.on_delta = on_delta;
        o.delta_user = g_recs;
    }
    return o;
}

/* The recorded exchanges of the model's invocation, a JSON array. */
static cJSON *exchanges(pl_engine *e, const char *run)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, run, "0.0"), PL_OK, "%s", pl_errmsg());
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT)
            cJSON_AddItemToArray(a, cJSON_Duplicate(at(pl_step_payload(s),
                                                       "value"),
                                                    1));
    }
    pl_steps_free(l);
    return a;
}

typedef struct proto {
    const char *name;  /* the server's protocol */
    const char *model; /* the model URL; %d the port for Ollama */
    bool split_args;   /* arguments come in pieces */
} proto;

static const char *const g_first =
    "{\"answer\": {\"text\": \"Let me note that down.\", \"tool_calls\": "
    "[{\"id\": \"c1\", \"name\": \"effect\", \"arguments\": {\"note\": "
    "\"a note long enough to be cut in many pieces\"}}]}, "
    "\"usage\": [30, 8], \"chunk\": 3},";
static const char
    *const g_last = "{\"answer\": {\"text\": \"Noted, in small pieces.\"}, "
                    "\"usage\": [50, 6], \"chunk\": 2}";

/* The model URL of @p url for a server on @p port: Ollama's names it. */
static void model_url(char *out, size_t n, const char *url, int port)
{
    if (!strncmp(url, "ollama://", 9))
        snprintf(out, n, "ollama://127.0.0.1:%d/%s", port, url + 9);
    else
        snprintf(out, n, "%s", url);
}

static pl_engine *run_on(t_server *srv, pl_registry **reg, const proto *p,
                         bool stream, const char *run, const char *cut,
                         pl_outcome **out)
{
    char script[2048], model[128], base[80];
    snprintf(script, sizeof script,
             "{\"protocol\": \"%s\", \"responses\": [%s%s%s]}", p->name,
             g_first, cut, g_last);
    t_server_start(srv, script);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv->port);
    model_url(model, sizeof model, p->model, srv->port);
    pl_llm_options o = quick(strncmp(model, "ollama", 6) ? base : NULL, stream);
    *reg = t_llm_registry(model, &o);
    static char store[2][4200]; /* each its own store */
    t_store_in(store[stream], sizeof store[stream],
               t_on_pg() ? NULL : t_tmpdir(), stream ? "st.db" : "plain.db");
    pl_engine *e = t_engine(store[stream], *reg, PL_DURABILITY_PROCESS);
    *out = t_agent(e, "note it", "[\"effect\"]", run);
    cr_assert_eq((*out)->status, PL_RUN_COMPLETED, "%s: %s", p->name,
                 (*out)->reason ? (*out)->reason : "");
    return e;
}

/* Turn @p turn's deltas make the recorded answer. */
static void expect_deltas_make(const cJSON *x, unsigned turn, bool split,
                               const char *run)
{
    const cJSON *ans = at(x, "answer");
    size_t n_text = 0, n_args = 0;
    char *text = joined(turn, PL_LLM_DELTA_TEXT, &n_text);
    cr_expect_str_eq(text, t_str(ans, "text"), "turn %u", turn);
    cr_expect_gt(n_text, 3, "turn %u's text came in pieces", turn);
    char *args = joined(turn, PL_LLM_DELTA_TOOL_ARGS, &n_args);
    const cJSON *call = cJSON_GetArrayItem(at(ans, "tool_calls"), 0);
    if (call) {
        cJSON *got = cJSON_Parse(args), *want = NULL;
        const cJSON *a = at(call, "arguments");
        want = cJSON_IsString(a) ? cJSON_Parse(a->valuestring)
                                 : cJSON_Duplicate(a, 1);
        cr_expect(cJSON_Compare(got, want, 1), "turn %u: arguments %s", turn,
                  args);
        cr_expect(split ? n_args > 5 : n_args == 1,
                  "turn %u: %zu argument deltas", turn, n_args);
        cJSON_Delete(got);
        cJSON_Delete(want);
    } else {
        cr_expect_eq(n_args, 0);
    }
    size_t last = g_n;
    for (size_t i = 0; i < g_n; i++)
        last = g_recs[i].turn == turn ? i : last;
    cr_expect(last < g_n && g_recs[last].kind == PL_LLM_DELTA_END,
              "turn %u ends with its end", turn);
    for (size_t i = 0; i < g_n; i++) {
        if (g_recs[i].turn != turn)
            continue;
        cr_expect_str_eq(g_recs[i].run, run);
        cr_expect_str_eq(g_recs[i].path, "0.0");
        cr_expect_eq(g_recs[i].replayed, 0);
        /* only a call's arguments name a tool; the marks carry "" */
        cr_expect_eq(g_recs[i].no_tool,
                     g_recs[i].kind != PL_LLM_DELTA_TOOL_ARGS);
        if (g_recs[i].kind == PL_LLM_DELTA_RESTARTED ||
            g_recs[i].kind == PL_LLM_DELTA_END)
            cr_expect_str_eq(g_recs[i].text, "");
        if (g_recs[i].kind == PL_LLM_DELTA_TOOL_ARGS) {
            cr_expect_str_eq(g_recs[i].tool, "effect");
            cr_expect_eq(g_recs[i].index, 0);
        }
    }
    free(text);
    free(args);
}

static void round_trip(const proto *p)
{
    recs_clear();
    t_server a, b;
    pl_registry *ra, *rb;
    pl_outcome *oa, *ob;
    pl_engine *ea = run_on(&a, &ra, p, true, "st", "", &oa);
    pl_engine *eb = run_on(&b, &rb, p, false, "st", "", &ob);
    cr_expect_str_eq(t_str(pl_outcome_result(oa), "text"),
                     "Noted, in small pieces.");

    /* what is recorded is what the call without streaming records */
    cJSON *xa = exchanges(ea, "st"), *xb = exchanges(eb, "st");
    cr_assert_eq(cJSON_GetArraySize(xa), 2);
    cr_expect(cJSON_Compare(xa, xb, 1), "%s: streamed %s\nwhole %s", p->name,
              t_text(xa), t_text(xb));
    for (unsigned t = 1; t <= 2; t++)
        expect_deltas_make(cJSON_GetArrayItem(xa, (int)t - 1), t, p->split_args,
                           "st");

    /* the streamed requests asked for a stream; the others did not */
    cJSON *la = t_server_log(&a), *lb = t_server_log(&b);
    const cJSON *ra0 = cJSON_GetArrayItem(la, 0),
                *rb0 = cJSON_GetArrayItem(lb, 0);
    if (!strcmp(p->name, "gemini")) {
        cr_expect(strstr(t_str(ra0, "path"), ":streamGenerateContent?alt=sse"),
                  "%s", t_str(ra0, "path"));
        cr_expect(strstr(t_str(rb0, "path"), ":generateContent"));
    } else {
        cr_expect(cJSON_IsTrue(at(at(ra0, "body"), "stream")));
        cr_expect(!cJSON_IsTrue(at(at(rb0, "body"), "stream")));
    }
    if (!strcmp(p->name, "openai"))
        cr_expect(cJSON_IsTrue(at(at(at(ra0, "body"), "stream_options"),
                                  "include_usage")));

    /* usage chunks are counted */
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, ea, "st"), PL_OK);
    cr_expect_eq(tok.input, 80, "%s", p->name);
    cr_expect_eq(tok.output, 14, "%s", p->name);

    cJSON_Delete(la);
    cJSON_Delete(lb);
    cJSON_Delete(xa);
    cJSON_Delete(xb);
    pl_outcome_free(oa);
    pl_outcome_free(ob);
    pl_engine_close(ea);
    pl_engine_close(eb);
    pl_registry_free(ra);
    pl_registry_free(rb);
    t_server_stop(&a);
    t_server_stop(&b);
    recs_clear();
}

static const proto g_openai = {"openai", "openai://m", true};
static const proto g_anthropic = {"anthropic", "anthropic://claude-test", true};
static const proto g_gemini = {"gemini", "gemini://gem-test", false};
static const proto g_ollama = {"ollama", "ollama://qwen3:8b", false};

Test(llm_stream, openai_round_trip) { round_trip(&g_openai); }

static int g_flaky_calls;

/* Fails the run the first time (a crash's stand-in), then succeeds. */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)user;
    if (g_flaky_calls++ == 0)
        return pl_errorf(PL_EIO, "flaky: the first call fails the run");
    cJSON *ok = t_json("{\"ok\": true}");
    int st = pl_steps_add_result(out, ok);
    cJSON_Delete(ok);
    return st;
}

/* An OpenAI model with @p o, and flaky() as the policy @p tool. */
static pl_registry *with_flaky(const pl_llm_options *o, const char *tool)
{
    pl_registry *reg = t_llm_registry("openai://m", o);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = tool;
    d.fn = flaky;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    return reg;
}

/* A turn served from the ledger delivers its recorded answer whole:
 * one text delta, one delta for each call's arguments, marked replayed. */
Test(llm_stream, a_replayed_turn_is_one_delta_a_part)
{
    recs_clear();
    t_server srv;
    t_server_start(
        &srv, "{\"responses\": [{\"answer\": {\"text\": \"Trying the flaky "
              "tool.\", \"tool_calls\": [{\"id\": \"c1\", \"name\": \"flaky\", "
              "\"arguments\": {\"n\": 1234567}}]}, \"usage\": [10, 5]},"
              "{\"answer\": {\"text\": \"It worked the second time.\"}, "
              "\"usage\": [20, 5]}]}");
    pl_llm_options o = quick(srv.base, true);
    pl_registry *reg = with_flaky(&o, "flaky");
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    g_flaky_calls = 0;
    pl_outcome *out = t_agent(e, "try", "[\"flaky\"]", "rp");
    cr_assert_eq(out->status, PL_RUN_FAILED);
    pl_outcome_free(out);
    size_t live = g_n;
    cr_expect_gt(live, 3, "turn 1 streamed");
    recs_clear();

    cr_assert_eq(pl_run_continue(&out, e, "rp", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_eq(t_server_requests(&srv), 2, "turn 1 was not asked again");
    size_t n = 0;
    char *t1 = joined(1, PL_LLM_DELTA_TEXT, &n);
    cr_expect_str_eq(t1, "Trying the flaky tool.");
    cr_expect_eq(n, 1);
    char *a1 = joined(1, PL_LLM_DELTA_TOOL_ARGS, &n);
    cr_expect_str_eq(a1, "{\"n\": 1234567}", "the arguments as recorded");
    cr_expect_eq(n, 1);
    cr_expect_eq(g_recs[2].kind, PL_LLM_DELTA_END, "then the turn's end");
    cr_expect_eq(g_recs[g_n - 1].kind, PL_LLM_DELTA_END);
    for (size_t i = 0; i < g_n; i++) {
        cr_expect_eq(g_recs[i].replayed, g_recs[i].turn == 1);
        if (g_recs[i].kind == PL_LLM_DELTA_TOOL_ARGS)
            cr_expect_str_eq(g_recs[i].tool, "flaky");
    }
    char *t2 = joined(2, PL_LLM_DELTA_TEXT, &n);
    cr_expect_str_eq(t2, "It worked the second time.");
    cr_expect_gt(n, 3, "turn 2 streamed live");
    free(t1);
    free(a1);
    free(t2);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    recs_clear();
}
Test(llm_stream, anthropic_round_trip) { round_trip(&g_anthropic); }
Test(llm_stream, gemini_round_trip) { round_trip(&g_gemini); }
Test(llm_stream, ollama_round_trip) { round_trip(&g_ollama); }

/* Turn 2 of @p run took @p attempts, its deltas make its answer; then the
 * run's outcome, engine, registry and server go. */
static void turn_2_then_close(pl_engine *e, pl_registry *reg, t_server *srv,
                              pl_outcome *out, const char *run, bool split,
                              int attempts)
{
    cJSON *x = exchanges(e, run);
    cr_expect_eq(at(cJSON_GetArrayItem(x, 1), "attempts")->valueint, attempts);
    expect_deltas_make(cJSON_GetArrayItem(x, 1), 2, split, run);
    cJSON_Delete(x);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(srv);
    recs_clear();
}

/* A stream cut in the middle: retried; a restarted delta follows what the
 * cut attempt delivered; the answer recorded is the whole one. */
static void cut_and_retry(const proto *p)
{
    recs_clear();
    t_server srv;
    pl_registry *reg;
    pl_outcome *out;
    pl_engine *e = run_on(
        &srv, &reg, p, true, "cut",
        "{\"answer\": {\"text\": \"Noted, in small pieces.\"}, "
        "\"usage\": [50, 6], \"chunk\": 2, \"cut_after\": 5},",
        &out);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"),
                     "Noted, in small pieces.");
    cr_expect_eq(t_server_requests(&srv), 3, "%s: the cut call was retried",
                 p->name);
    size_t restarts = 0, before = 0;
    for (size_t i = 0; i < g_n; i++) {
        if (g_recs[i].kind == PL_LLM_DELTA_RESTARTED) {
            restarts++;
            cr_expect_eq(g_recs[i].turn, 2);
            cr_expect_gt(before, 0, "deltas came before the cut");
        } else if (g_recs[i].turn == 2 && !restarts) {
            before++;
        }
    }
    cr_expect_eq(restarts, 1, "%s", p->name);
    turn_2_then_close(e, reg, &srv, out, "cut", p->split_args, 2);
}

Test(llm_stream, openai_cut_is_retried) { cut_and_retry(&g_openai); }
Test(llm_stream, anthropic_cut_is_retried) { cut_and_retry(&g_anthropic); }
Test(llm_stream, gemini_cut_is_retried) { cut_and_retry(&g_gemini); }
Test(llm_stream, ollama_cut_is_retried) { cut_and_retry(&g_ollama); }

/* A stream whose last event came (OpenAI's [DONE], Anthropic's
 * message_stop, Gemini's finishReason, Ollama's "done": true) is the whole
 * answer, whatever the connection does after it: cut before the chunked
 * body's end, or held open with nothing more.  Recorded at the first
 * attempt, no restart, the model asked once. */
static void ended_then(const proto *p, const char *how)
{
    recs_clear();
    t_server srv;
    pl_registry *reg;
    pl_outcome *out;
    char turn[200];
    snprintf(turn, sizeof turn,
             "{\"answer\": {\"text\": \"Noted, in small pieces.\"}, "
             "\"usage\": [50, 6], \"chunk\": 2, \"after_end\": \"%s\"},",
             how);
    pl_engine *e = run_on(&srv, &reg, p, true, "end", turn, &out);
    cr_expect_eq(t_server_requests(&srv), 2, "%s, %s: asked again", p->name,
                 how);
    for (size_t i = 0; i < g_n; i++)
        cr_expect_neq(g_recs[i].kind, PL_LLM_DELTA_RESTARTED, "%s, %s", p->name,
                      how);
    turn_2_then_close(e, reg, &srv, out, "end", p->split_args, 1);
}

Test(llm_stream, openai_ended_then_cut) { ended_then(&g_openai, "drop"); }
Test(llm_stream, anthropic_ended_then_cut) { ended_then(&g_anthropic, "drop"); }
Test(llm_stream, gemini_ended_then_cut) { ended_then(&g_gemini, "drop"); }
Test(llm_stream, ollama_ended_then_cut) { ended_then(&g_ollama, "drop"); }
Test(llm_stream, openai_ended_then_held) { ended_then(&g_openai, "hang"); }
Test(llm_stream, ollama_ended_then_held) { ended_then(&g_ollama, "hang"); }

/* A stream that is not the protocol's: an error result naming it, one
 * request (not retried), nothing recorded as an answer. */
static void refused(const char *protocol, const char *model_fmt,
                    const char *response, size_t cap, const char *want)
{
    recs_clear();
    char script[1024], model[128], base[80];
    snprintf(script, sizeof script,
             "{\"protocol\": \"%s\", \"responses\": [%s]}", protocol, response);
    t_server srv;
    t_server_start(&srv, script);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    model_url(model, sizeof model, model_fmt, srv.port);
    pl_llm_options o = quick(strncmp(model, "ollama", 6) ? base : NULL, true);
    o.max_response_bytes = cap;
    pl_registry *reg = t_llm_registry(model, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "bad");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    const cJSON *r = pl_outcome_result(out);
    cr_expect(cJSON_IsTrue(at(r, "error")), "%s", t_text(r));
    cr_expect_str_eq(t_str(r, "code"), PL_ERR_INVALID_INPUT);
    cr_expect(t_str(r, "message") && strstr(t_str(r, "message"), want),
              "message %s, wanted %s", t_str(r, "message"), want);
    cr_expect_eq(t_server_requests(&srv), 1, "not retried");
    /* what it delivered is void: the restart ends it, no end */
    for (size_t i = 0; i < g_n; i++)
        cr_expect_neq(g_recs[i].kind, PL_LLM_DELTA_END);
    if (g_n)
        cr_expect_eq(g_recs[g_n - 1].kind, PL_LLM_DELTA_RESTARTED);
    cJSON *x = exchanges(e, "bad");
    cr_expect_null(at(cJSON_GetArrayItem(x, 0), "answer"));
    cJSON_Delete(x);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    recs_clear();
}

/* A server that answers a stream request with a whole JSON body: read as
 * one, its answer one delta a part, then the end; recorded as streamed. */
Test(llm_stream, a_whole_body_for_a_stream_is_one_delta_a_part)
{
    recs_clear();
    t_server srv;
    t_server_start(&srv, "{\"responses\": [{\"whole\": true, \"answer\": "
                         "{\"text\": \"Noting it, whole.\", \"tool_calls\": "
                         "[{\"id\": \"c1\", \"name\": \"effect\", "
                         "\"arguments\": {\"note\": \"n\"}}]}, "
                         "\"usage\": [9, 4]}, {\"whole\": true, \"answer\": "
                         "{\"text\": \"Done.\"}, \"usage\": [12, 2]}]}");
    pl_llm_options o = quick(srv.base, true);
    pl_registry *reg = t_llm_registry("openai://m", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "note", "[\"effect\"]", "wh");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Done.");
    size_t n = 0;
    char *t1 = joined(1, PL_LLM_DELTA_TEXT, &n);
    cr_expect_str_eq(t1, "Noting it, whole.");
    cr_expect_eq(n, 1);
    char *a1 = joined(1, PL_LLM_DELTA_TOOL_ARGS, &n);
    cJSON *args = cJSON_Parse(a1), *want = t_json("{\"note\": \"n\"}");
    cr_expect(cJSON_Compare(args, want, 1), "%s", a1);
    cr_expect_eq(n, 1);
    cr_assert_eq(g_n, 5, "text, arguments, end; text, end");
    cr_expect_eq(g_recs[2].kind, PL_LLM_DELTA_END);
    cr_expect_str_eq(g_recs[1].tool, "effect");
    cr_expect_eq(g_recs[4].kind, PL_LLM_DELTA_END);
    for (size_t i = 0; i < g_n; i++)
        cr_expect_eq(g_recs[i].replayed, 0);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "wh"), PL_OK);
    cr_expect_eq(tok.input, 21);
    cr_expect_eq(tok.output, 6);
    cJSON_Delete(args);
    cJSON_Delete(want);
    free(t1);
    free(a1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    recs_clear();
}

/* A policy whose name the provider refuses goes under a name of its own:
 * its argument deltas name the policy, as the steps do. */
Test(llm_stream, the_deltas_of_a_renamed_tool_name_the_policy)
{
    recs_clear();
    t_server srv;
    t_server_start(&srv, "{\"responses\": [{\"answer\": {\"tool_calls\": "
                         "[{\"id\": \"c1\", \"tool\": 0, \"arguments\": "
                         "{\"n\": 12345678}}]}}, {\"answer\": {\"text\": "
                         "\"Charged.\"}}]}");
    pl_llm_options o = quick(srv.base, true);
    pl_registry *reg = with_flaky(&o, "orders.charge");
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    g_flaky_calls = 1; /* it succeeds */
    pl_outcome *out = t_agent(e, "charge", "[\"orders.charge\"]", "rn");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cJSON *log = t_server_log(&srv);
    const char *wire = cJSON_GetStringValue(
        cJSON_GetArrayItem(at(cJSON_GetArrayItem(log, 0), "tool_names"), 0));
    cr_expect(wire && strcmp(wire, "orders.charge") != 0, "sent as %s", wire);
    size_t n = 0;
    for (size_t i = 0; i < g_n; i++)
        if (g_recs[i].kind == PL_LLM_DELTA_TOOL_ARGS) {
            cr_expect_str_eq(g_recs[i].tool, "orders.charge");
            n++;
        }
    cr_expect_gt(n, 1, "the arguments came in pieces");
    cJSON_Delete(log);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    recs_clear();
}

/* A stream cut on every attempt: each cut is followed by its restart, and
 * the call, failed for good, ends with the restart, never an end. */
Test(llm_stream, a_call_cut_for_good_ends_with_its_restart)
{
    recs_clear();
    t_server srv;
    t_server_start(&srv, "{\"rest\": {\"answer\": {\"text\": \"Never "
                         "whole, alas.\"}, \"chunk\": 2, \"cut_after\": 3}, "
                         "\"responses\": []}");
    pl_llm_options o = quick(srv.base, true);
    o.max_attempts = 2;
    pl_registry *reg = t_llm_registry("openai://m", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "cut2");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    const cJSON *r = pl_outcome_result(out);
    cr_expect(cJSON_IsTrue(at(r, "error")), "%s", t_text(r));
    cr_expect_str_eq(t_str(r, "code"), PL_ERR_RETRYABLE_SERVER, "%s",
                     t_text(r));
    cr_expect_eq(t_server_requests(&srv), 2);
    size_t restarts = 0;
    for (size_t i = 0; i < g_n; i++) {
        cr_expect_neq(g_recs[i].kind, PL_LLM_DELTA_END, "delta %zu", i);
        restarts += g_recs[i].kind == PL_LLM_DELTA_RESTARTED;
    }
    cr_expect_eq(restarts, 2);
    cr_assert_gt(g_n, 2);
    cr_expect_eq(g_recs[g_n - 1].kind, PL_LLM_DELTA_RESTARTED);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    recs_clear();
}

/* A run recorded without streaming continues with it: the recorded turn
 * is served whole, the next streamed, the model asked once each. */
Test(llm_stream, a_run_recorded_without_streaming_continues_with_it)
{
    recs_clear();
    t_server srv;
    t_server_start(&srv,
                   "{\"responses\": [{\"answer\": {\"text\": \"Trying.\", "
                   "\"tool_calls\": [{\"id\": \"c1\", \"name\": \"flaky\", "
                   "\"arguments\": {}}]}, \"usage\": [10, 5]},"
                   "{\"answer\": {\"text\": \"It worked then.\"}, "
                   "\"usage\": [20, 5]}]}");
    pl_llm_options plain = quick(srv.base, false), o = quick(srv.base, true);
    pl_registry *regs[2] = {with_flaky(&plain, "flaky"),
                            with_flaky(&o, "flaky")};
    pl_engine *e[2];
    const char *store = t_store_path();
    g_flaky_calls = 0;
    e[0] = t_engine(store, regs[0], PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e[0], "try", "[\"flaky\"]", "mix");
    cr_assert_eq(out->status, PL_RUN_FAILED);
    pl_outcome_free(out);
    pl_engine_close(e[0]);
    cr_expect_eq(g_n, 0, "nothing streamed");
    e[1] = t_engine(store, regs[1], PL_DURABILITY_PROCESS);
    cr_assert_eq(pl_run_continue(&out, e[1], "mix", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    cr_expect_eq(t_server_requests(&srv), 2);
    size_t n = 0;
    char *t1 = joined(1, PL_LLM_DELTA_TEXT, &n);
    cr_expect_str_eq(t1, "Trying.");
    cr_expect(g_recs[0].replayed);
    char *t2 = joined(2, PL_LLM_DELTA_TEXT, &n);
    cr_expect_str_eq(t2, "It worked then.");
    cr_expect_gt(n, 1, "turn 2 streamed");
    free(t1);
    free(t2);
    pl_outcome_free(out);
    pl_engine_close(e[1]);
    for (int k = 0; k < 2; k++)
        pl_registry_free(regs[k]);
    t_server_stop(&srv);
    recs_clear();
}

Test(llm_stream, data_that_is_not_json_is_refused)
{
    refused("openai", "openai://m",
            "{\"stream_raw\": \"data: {\\\"choices\\\": [\\n\\n\"}", 0,
            "an event's data that is refused (not JSON (at byte ");
}

Test(llm_stream, a_line_that_is_no_sse_field_is_refused)
{
    refused("anthropic", "anthropic://c",
            "{\"stream_raw\": \"<html>busy</html>\\n\\n\"}", 0,
            "is not server-sent events: a line reads '<html>busy</html>'");
}

Test(llm_stream, an_ndjson_line_that_is_not_an_object_is_refused)
{
    refused("ollama", "ollama://m",
            "{\"stream_raw\": \"{\\\"message\\\": {}}\\n[1, 2]\\n\"}", 0,
            "a line that is not a JSON object: '[1, 2]'");
}

Test(llm_stream, a_tool_index_past_the_bound_is_refused)
{
    refused("openai", "openai://m",
            "{\"stream_raw\": \"data: {\\\"choices\\\": [{\\\"delta\\\": "
            "{\\\"tool_calls\\\": [{\\\"index\\\": 1000000}]}}]}\\n\\n\"}",
            0, "more than 128 tool calls");
}

Test(llm_stream, a_50_mb_stream_stops_at_the_cap)
{
    refused("openai", "openai://m", "{\"flood\": 52428800}", 1 << 20,
            "the model's stream is larger than max_response_bytes (1048576 "
            "bytes)");
}

/* An error event in the stream is a failed attempt: retried. */
Test(llm_stream, an_error_event_is_retried)
{
    recs_clear();
    t_server srv;
    t_server_start(
        &srv, "{\"protocol\": \"anthropic\", \"responses\": ["
              "{\"stream_raw\": \"event: message_start\\ndata: {\\\"type\\\": "
              "\\\"message_start\\\", \\\"message\\\": {}}\\n\\nevent: "
              "error\\ndata: {\\\"type\\\": \\\"error\\\", \\\"error\\\": "
              "{\\\"type\\\": \\\"overloaded_error\\\", \\\"message\\\": "
              "\\\"Overloaded\\\"}}\\n\\n\"},"
              "{\"answer\": {\"text\": \"fine now\"}, \"usage\": [3, 2]}]}");
    char base[80];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    pl_llm_options o = quick(base, true);
    pl_registry *reg = t_llm_registry("anthropic://c", &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[]", "ev");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "fine now");
    cr_expect_eq(t_server_requests(&srv), 2);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
    recs_clear();
}

/* The scripted model streams too: word by word, arguments in pieces. */
Test(llm_stream, the_scripted_model_streams)
{
    recs_clear();
    const char *script = t_write_file(
        "s.json",
        "{\"responses\": ["
        "{\"text\": \"One moment please.\", \"tool_calls\": [{\"id\": "
        "\"c1\", \"name\": \"effect\", \"arguments\": {\"note\": "
        "\"scripted\"}}]},"
        "{\"text\": \"Done and noted.\"}]}");
    char url[4300];
    snprintf(url, sizeof url, "scripted://%s", script);
    pl_llm_options o = quick(NULL, true);
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "note", "[\"effect\"]", "sc");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    size_t n = 0;
    char *t2 = joined(2, PL_LLM_DELTA_TEXT, &n);
    cr_expect_str_eq(t2, "Done and noted.");
    cr_expect_eq(n, 3, "word by word");
    char *a1 = joined(1, PL_LLM_DELTA_TOOL_ARGS, &n);
    cr_expect_str_eq(a1, "{\"note\":\"scripted\"}");
    cr_expect_eq(n, 3);
    free(t2);
    free(a1);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    recs_clear();
}

/* A scripted "usage" that is no count of tokens (past 1e15, below 0)
 * counts as none given: the default, as the HTTP providers' usage does;
 * it failed the run (a long made of 1e300 is no count at all). */
Test(llm_stream, a_scripted_usage_out_of_range_counts_as_none)
{
    const char *bad = t_write_file(
        "bad.json", "{\"responses\": [{\"text\": \"Two words.\", \"usage\": "
                    "{\"input\": 1e300, \"output\": -5}}]}");
    const char *none = t_write_file(
        "none.json", "{\"responses\": [{\"text\": \"Two words.\"}]}");
    pl_llm_tokens tok[2] = {PL_LLM_TOKENS_INIT, PL_LLM_TOKENS_INIT};
    for (int i = 0; i < 2; i++) {
        char url[4300];
        snprintf(url, sizeof url, "scripted://%s", i ? none : bad);
        pl_llm_options o = quick(NULL, false);
        pl_registry *reg = t_llm_registry(url, &o);
        pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
        pl_outcome *out = t_agent(e, "hi", "[]", i ? "none" : "bad");
        cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                     out->reason ? out->reason : "");
        cr_expect_eq(pl_llm_run_tokens(&tok[i], e, i ? "none" : "bad"), PL_OK);
        pl_outcome_free(out);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
    cr_expect_gt(tok[1].input, 0);
    cr_expect_eq(tok[0].input, tok[1].input);
    cr_expect_eq(tok[0].output, tok[1].output);
}

/* An options struct of version 1 or 2, from before on_delta: whatever
 * lies past its end is not read, so the model does not stream.  (The
 * script has no "usage": the scripted model's default is checked too.) */
Test(llm_stream, an_older_options_struct_does_not_stream)
{
    const char *script = t_write_file(
        "s.json", "{\"responses\": [{\"text\": \"Two words.\"}]}");
    char url[4300];
    snprintf(url, sizeof url, "scripted://%s", script);
    for (unsigned v = 1; v <= PL_LLM_OPTIONS_VERSION; v++) {
        recs_clear();
        pl_llm_options o = quick(NULL, true);
        o.version = v;
        pl_registry *reg = t_llm_registry(url, &o);
        pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
        pl_outcome *out = t_agent(e, "hi", "[]", "old");
        cr_assert_eq(out->status, PL_RUN_COMPLETED);
        cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "Two words.");
        cr_expect_eq(g_n, v < 3 ? 0 : 3, "version %u: %zu deltas", v, g_n);
        /* no "usage" in the script: a quarter of the request's bytes and
         * of the answer's */
        cJSON *x = exchanges(e, "old");
        const cJSON *x0 = cJSON_GetArrayItem(x, 0), *u = at(x0, "usage");
        char *ans = cJSON_PrintUnformatted(at(x0, "answer"));
        cr_assert(ans && cJSON_IsNumber(at(x0, "request_bytes")));
        cr_expect_eq(at(u, "input")->valueint,
                     at(x0, "request_bytes")->valueint / 4);
        cr_expect_eq(at(u, "output")->valueint, (int)(strlen(ans) / 4));
        free(ans);
        cJSON_Delete(x);
        pl_outcome_free(out);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
    recs_clear();
}

typedef struct pooled {
    char id[16];
    pthread_t thread; /* the one its run ran on */
    int status;
} pooled;

static void pooled_agent(pl_engine *e, void *user)
{
    pooled *r = user;
    r->thread = pthread_self();
    pl_outcome *o = t_agent(e, "hi", "[]", r->id);
    r->status = (int)o->status;
    pl_outcome_free(o);
}

/* on_delta is called on the thread running the policy: runs on a pool's
 * threads get their deltas on their own threads. */
Test(llm_stream, deltas_come_on_the_thread_of_their_run)
{
    recs_clear();
    const char *script = t_write_file(
        "s.json", "{\"responses\": [{\"text\": \"Three small words.\"}]}");
    char url[4300];
    snprintf(url, sizeof url, "scripted://%s", script);
    pl_llm_options o = quick(NULL, true);
    pl_registry *reg = t_llm_registry(url, &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_pool *pool = NULL;
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 2;
    cr_assert_eq(pl_pool_new(&pool, e, &po), PL_OK, "%s", pl_errmsg());
    pooled runs[4];
    for (int i = 0; i < 4; i++) {
        snprintf(runs[i].id, sizeof runs[i].id, "pool-%d", i);
        cr_assert_eq(pl_pool_submit(pool, pooled_agent, &runs[i]), PL_OK);
    }
    cr_assert_eq(pl_pool_wait(pool), PL_OK);
    pl_pool_free(pool);
    cr_expect_eq(g_n, 4 * 4, "three words and an end, each run");
    for (size_t i = 0; i < g_n; i++) {
        int k = -1;
        cr_assert(sscanf(g_recs[i].run, "pool-%d", &k) == 1 && k >= 0 && k < 4);
        cr_expect_eq(runs[k].status, PL_RUN_COMPLETED);
        cr_expect(pthread_equal(g_recs[i].thread, runs[k].thread),
                  "delta %zu of %s on another thread", i, g_recs[i].run);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    recs_clear();
}
