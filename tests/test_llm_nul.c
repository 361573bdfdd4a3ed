/*
 * test_llm_nul.c -- a model's answer holding \u0000, on every protocol,
 * whole and streamed, against the loopback server (tests/llm_server.py).
 *
 * cJSON ends a string at the NUL that \u0000 decodes to: an answer "ok\u0000
 * and the rest" was recorded as "ok", a tool's argument "a\u0000b" called
 * the tool with "a", as if whole.  Such an answer is an error result that
 * names where the NUL is, after one request; nothing is recorded as the
 * answer and no tool runs.  "\\u0000" (an escaped backslash) is text and
 * is recorded whole.
 */
#include "llm_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ignore(const pl_llm_delta *d, void *user) { (void)d, (void)user; }

typedef struct proto {
    const char *name;  /* the server's protocol */
    const char *model; /* the model URL; Ollama's names the server */
    const char *text;  /* where a text answer is, as a JSON pointer */
} proto;

static const proto g_protos[] = {
    {"openai", "openai://m", "/choices/0/message/content"},
    {"anthropic", "anthropic://claude-test", "/content/0/text"},
    {"gemini", "gemini://gem-test", "/candidates/0/content/parts/0/text"},
    {"ollama", "ollama://qwen3:8b", "/message/content"},
};

#define N_PROTOS (sizeof g_protos / sizeof g_protos[0])

/* The agent on @p p, offered @p actions, answered @p response, streamed
 * or not.  The outcome, the server stopped. */
static pl_outcome *agent_on(const proto *p, bool stream, const char *response,
                            const char *actions, pl_engine **e,
                            pl_registry **reg, int *requests)
{
    char script[2048], model[128], base[80];
    snprintf(script, sizeof script,
             "{\"protocol\": \"%s\", \"responses\": [%s]}", p->name, response);
    t_server srv;
    t_server_start(&srv, script);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    if (!strncmp(p->model, "ollama://", 9))
        snprintf(model, sizeof model, "ollama://127.0.0.1:%d/%s", srv.port,
                 p->model + 9);
    else
        snprintf(model, sizeof model, "%s", p->model);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = strncmp(p->model, "ollama", 6) ? base : NULL;
    o.timeout_ms = 5000;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 50;
    if (stream)
        o.on_delta = ignore;
    *reg = t_llm_registry(model, &o);
    *e = t_engine(t_store_path(), *reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(*e, "hi", actions, stream ? "st" : "whole");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s: %s", p->name,
                 out->reason ? out->reason : "");
    *requests = t_server_requests(&srv);
    t_server_stop(&srv);
    return out;
}

/* No exchange of run @p run recorded an answer (@p kept NULL), or one
 * recorded whose text holds @p kept: kept whole. */
static void expect_answer(pl_engine *e, const char *run, const char *name,
                          const char *kept)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, run, "0.0"), PL_OK, "%s", pl_errmsg());
    int answers = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(pl_steps_at(l, i)), "value");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "answer");
        if (!a)
            continue;
        answers++;
        char *text = t_text(a);
        cr_expect(kept && strstr(text, kept), "%s: an answer was recorded: %s",
                  name, text);
        free(text);
    }
    cr_expect(!kept || answers == 1, "%s: %d answers recorded", name, answers);
    pl_steps_free(l);
}

/* The agent's result is an error @p code whose message holds @p want
 * (and @p also, when not NULL), after one request, no tool run; no answer
 * recorded, or (@p kept) one whose text holds @p kept. */
static void expect_refused(const proto *p, bool stream, const char *response,
                           const char *actions, const char *code,
                           const char *want, const char *also, const char *kept)
{
    pl_engine *e = NULL;
    pl_registry *reg = NULL;
    int requests = 0;
    memset(&t_calls, 0, sizeof t_calls);
    pl_outcome *out = agent_on(p, stream, response, actions, &e, &reg,
                               &requests);
    const cJSON *r = pl_outcome_result(out);
    const char *msg = t_str(r, "message");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")),
              "%s%s: not an error: %s", p->name, stream ? " streamed" : "",
              t_text(r));
    cr_expect(t_str(r, "code") && !strcmp(t_str(r, "code"), code),
              "%s%s: code %s, wanted %s", p->name, stream ? " streamed" : "",
              t_str(r, "code"), code);
    cr_expect(msg && strstr(msg, want), "%s%s: message '%s', wanted '%s'",
              p->name, stream ? " streamed" : "", msg, want);
    cr_expect(!also || (msg && strstr(msg, also)),
              "%s%s: message '%s', wanted '%s'", p->name,
              stream ? " streamed" : "", msg, also);
    cr_expect_eq(requests, 1, "%s: not retried", p->name);
    cr_expect_eq(t_calls.add, 0, "%s: a tool ran", p->name);
    expect_answer(e, stream ? "st" : "whole", p->name, kept);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_nul, a_text_answer_holding_u0000_is_refused_naming_it)
{
    const char *r = "{\"answer\": {\"text\": \"ok\\u0000 and the rest\"}}";
    for (size_t i = 0; i < N_PROTOS; i++) {
        expect_refused(&g_protos[i], false, r, "[]", PL_ERR_INVALID_INPUT,
                       "holds \\u0000", g_protos[i].text, NULL);
        expect_refused(&g_protos[i], true, r, "[]", PL_ERR_INVALID_INPUT,
                       "holds \\u0000", NULL, NULL);
    }
}

Test(llm_nul, a_tool_argument_holding_u0000_is_refused)
{
    /* OpenAI's arguments are JSON text: \u0000 in it comes escaped in the
     * body, and is found as that text is parsed.  The answer is recorded
     * then, its text whole (the escape is six characters of it), and
     * refused as a malformed action */
    const char *r = "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", \"name\": "
                    "\"add\", \"arguments\": {\"a\": 1, \"b\": 2, \"c\": "
                    "\"x\\u0000y\"}}]}}";
    for (size_t i = 0; i < N_PROTOS; i++)
        for (int stream = 0; stream < 2; stream++) {
            bool text = !strcmp(g_protos[i].name, "openai") ||
                        (stream && !strcmp(g_protos[i].name, "anthropic"));
            expect_refused(&g_protos[i], stream, r, "[\"add\"]",
                           text ? PL_LLM_ERR_INVALID_MODEL_ACTION
                                : PL_ERR_INVALID_INPUT,
                           "holds \\u0000", text ? "'/c'" : NULL,
                           text ? "x\\\\u0000y" : NULL);
        }
}

Test(llm_nul, an_escaped_backslash_before_u0000_is_text)
{
    const char *r = "{\"answer\": {\"text\": \"\\\\u0000 is six characters\"}}";
    for (size_t i = 0; i < N_PROTOS; i++)
        for (int stream = 0; stream < 2; stream++) {
            pl_engine *e = NULL;
            pl_registry *reg = NULL;
            int requests = 0;
            pl_outcome *out = agent_on(&g_protos[i], stream, r, "[]", &e, &reg,
                                       &requests);
            cr_expect_str_eq(t_str(pl_outcome_result(out), "text"),
                             "\\u0000 is six characters", "%s: %s",
                             g_protos[i].name, t_text(pl_outcome_result(out)));
            pl_outcome_free(out);
            pl_engine_close(e);
            pl_registry_free(reg);
        }
}

/* The scripted model's script is read as a model's answer is: a text
 * holding \u0000 fails the run, naming where it is, and plays nothing. */
Test(llm_nul, a_script_holding_u0000_fails_the_run_naming_it)
{
    const char *path = t_write_file("script.json",
                                    "{\"responses\": [{\"text\": \"ok\\u0000 "
                                    "and the rest\"}]}");
    char url[4300];
    snprintf(url, sizeof url, "scripted://%s", path);
    pl_registry *reg = t_llm_registry(url, NULL);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_agent(e, "hi", "[]", "script");
    cr_expect_eq(o->status, PL_RUN_FAILED, "%s", t_text(pl_outcome_result(o)));
    cr_expect(o->reason &&
                  strstr(o->reason, "the string at '/responses/0/text' "
                                    "holds \\u0000"),
              "%s", o->reason ? o->reason : "");
    cr_expect_eq(t_scripted_served(path), 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
