/*
 * test_observe.c -- the observe decorator (core/ext/decorator_observe.c):
 * a tool's raw result and the observation a model sees, both recorded; the
 * built-in normaliser, a user's, one that asks a (scripted) model for the
 * summary; and an LLM policy that sends the observation, capped, not the
 * raw result (over loopback HTTP, tests/llm_server.py).
 */
#include "llm_support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pl_decorator g_decos[4];
static size_t g_n_decos;
static int g_search_runs;

static const cJSON *member(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* search: {"q": s, "n": items, "fail": true} -> {"results": [...],
 * "total": n, "query": q, "truncated": true, "blob": 3000 bytes} */
static int search(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    g_search_runs++;
    if (cJSON_IsTrue(member(a->payload, "fail")))
        return pl_steps_add_error(out, PL_ERR_RATE_LIMITED, "slow down");
    int n = cJSON_IsNumber(member(a->payload, "n"))
                ? member(a->payload, "n")->valueint
                : 3;
    cJSON *r = cJSON_CreateObject();
    cJSON *items = cJSON_AddArrayToObject(r, "results");
    for (int i = 0; i < n; i++) {
        char t[32];
        snprintf(t, sizeof t, "result %d", i + 1);
        cJSON_AddItemToArray(items, cJSON_CreateString(t));
    }
    cJSON_AddNumberToObject(r, "total", n);
    cJSON_AddStringToObject(r, "query", t_str(a->payload, "q"));
    cJSON_AddTrueToObject(r, "truncated");
    char blob[3001];
    memset(blob, 'z', 3000);
    blob[3000] = '\0';
    cJSON_AddStringToObject(r, "blob", blob);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* caller: {"tool": name, "args": {...}} -> the tool's result through
 * g_decos. */
static int caller(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    static const char *const allowed[] = {"search"};
    pl_action c = PL_ACTION_INIT;
    c.policy = t_str(a->payload, "tool");
    c.payload = member(a->payload, "args");
    c.actions = allowed;
    c.n_actions = 1;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &c, g_decos, g_n_decos);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "caller", caller, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "search", search, NULL), PL_OK, "%s",
                 pl_errmsg());
    return reg;
}

static pl_outcome *run(pl_engine *e, const char *id, const char *tool,
                       const char *args)
{
    char payload[2048];
    snprintf(payload, sizeof payload, "{\"tool\": \"%s\", \"args\": %s}", tool,
             args);
    pl_outcome *o = t_start(e, "caller", payload, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    return o;
}

static void use(const pl_observe_options *oo)
{
    cr_assert_eq(pl_decorator_observe(&g_decos[0], oo), PL_OK, "%s",
                 pl_errmsg());
    g_n_decos = 1;
}

Test(observe, the_raw_result_and_the_observation_are_both_recorded,
     .fini = t_cleanup)
{
    use(NULL);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = run(e, "o", "search", "{\"q\": \"lmdb\", \"n\": 25}");
    const cJSON *r = pl_outcome_result(o);
    const cJSON *obs = member(r, "observation");
    cr_assert(cJSON_IsObject(obs), "%s", t_text(r));
    const char *sum = t_str(obs, "summary");
    cr_assert_not_null(sum);
    cr_expect(strstr(sum, "'search' returned 5 fields"), "%s", sum);
    cr_expect(strstr(sum, "truncated"), "%s", sum);
    const cJSON *facts = member(obs, "key_facts");
    cr_expect_str_eq(t_str(facts, "query"), "lmdb");
    cr_expect_str_eq(t_str(facts, "total"), "25");
    cr_expect_str_eq(t_str(facts, "results"), "25 items");
    cr_expect_str_eq(t_str(facts, "truncated"), "true");
    cr_expect_eq(strlen(t_str(facts, "blob")), 203, "cut at 200, then ...");
    char *aff = t_text(member(obs, "affordances"));
    cr_expect_str_eq(aff, "[\"read_more\",\"refine_query\"]");
    free(aff);
    /* the raw result whole, in the result and in the call's ledger */
    const cJSON *raw = member(r, "raw");
    cr_expect_eq(cJSON_GetArraySize(member(raw, "results")), 25);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "o", "0.0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 2);
    const pl_step *tool = pl_steps_at(l, 0), *shown = pl_steps_at(l, 1);
    cr_expect_str_eq(pl_step_actor(tool), "search");
    cr_expect(cJSON_Compare(pl_step_payload(tool), raw, true));
    cr_expect_str_eq(pl_step_actor(shown), "observe");
    cr_expect(cJSON_IsObject(member(pl_step_payload(shown), "observation")));
    pl_steps_free(l);
    /* replay serves it */
    int runs = g_search_runs;
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "o", NULL), PL_OK);
    cr_expect_eq(again->calls_executed, 0);
    cr_expect_eq(g_search_runs, runs);
    pl_outcome_free(again);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(observe, errors_and_other_tools_pass_unchanged, .fini = t_cleanup)
{
    static const char *const only[] = {"other"};
    static pl_observe_options oo;
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    use(&oo);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = run(e, "err", "search", "{\"fail\": true}");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "code"), PL_ERR_RATE_LIMITED);
    cr_expect_null(member(pl_outcome_result(o), "observation"));
    pl_outcome_free(o);
    oo.tools = only;
    oo.n_tools = 1;
    o = run(e, "other", "search", "{\"q\": \"x\"}");
    cr_expect_null(member(pl_outcome_result(o), "observation"));
    cr_expect_str_eq(t_str(pl_outcome_result(o), "query"), "x");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A user's normaliser: its own shape. */
static int titles(cJSON **out, pl_ctx *ctx, const pl_action *action,
                  const cJSON *raw, void *user)
{
    (void)ctx;
    (void)user;
    return pl_json_pack(out, "{s:s, s:i, s:O}", "tool", action->policy, "count",
                        cJSON_GetArraySize(member(raw, "results")), "first",
                        cJSON_GetArrayItem(member(raw, "results"), 0));
}

static int not_an_object(cJSON **out, pl_ctx *ctx, const pl_action *action,
                         const cJSON *raw, void *user)
{
    (void)ctx;
    (void)action;
    (void)raw;
    (void)user;
    *out = cJSON_CreateString("a summary");
    return *out ? PL_OK : PL_ENOMEM;
}

Test(observe, a_users_normaliser, .fini = t_cleanup)
{
    static pl_observe_options oo;
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    oo.fn = titles;
    use(&oo);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = run(e, "u", "search", "{\"q\": \"x\", \"n\": 2}");
    char *got = t_text(member(pl_outcome_result(o), "observation"));
    cr_expect_str_eq(
        got, "{\"tool\":\"search\",\"count\":2,\"first\":\"result 1\"}");
    free(got);
    pl_outcome_free(o);
    /* one that makes no object fails the run, saying so */
    oo.fn = not_an_object;
    o = t_start(e, "caller", "{\"tool\": \"search\", \"args\": {\"q\": \"x\"}}",
                "bad");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect(o->reason && strstr(o->reason, "no JSON object"), "%s",
              o->reason ? o->reason : "");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(observe, a_model_writes_the_summary_recorded_like_any_call,
     .fini = t_cleanup)
{
    const char *script = t_write_file(
        "script.json",
        "{\"responses\": [{\"text\": \"Three results about LMDB.\"}]}");
    char url[4400];
    snprintf(url, sizeof url, "scripted://%s", script);
    static pl_observe_options oo;
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    oo.summarizer = "summariser";
    oo.summarize_over = 100;
    use(&oo);
    pl_registry *reg = registry();
    cr_assert_eq(pl_llm_register(reg, "summariser", url, "Be brief.", NULL),
                 PL_OK, "%s", pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = run(e, "m", "search", "{\"q\": \"lmdb\"}");
    const cJSON *obs = member(pl_outcome_result(o), "observation");
    cr_expect_str_eq(t_str(obs, "summary"), "Three results about LMDB.");
    cr_expect_str_eq(t_str(member(obs, "key_facts"), "query"), "lmdb");
    /* the model's call is in the tool call's ledger, between the raw
     * result and the observation */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "m", "0.0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 4);
    cr_expect_str_eq(pl_step_actor(pl_steps_at(l, 0)), "search");
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 1)), PL_STEP_ACTION_CALL);
    cr_expect_str_eq(pl_step_actor(pl_steps_at(l, 2)), "summariser");
    cr_expect_str_eq(pl_step_actor(pl_steps_at(l, 3)), "observe");
    const char *asked = t_str(member(pl_step_payload(pl_steps_at(l, 1)),
                                     "payload"),
                              "text");
    cr_expect(asked && strstr(asked, "\"query\":\"lmdb\""), "%s",
              asked ? asked : "");
    pl_steps_free(l);
    cr_expect_eq(t_scripted_served(script), 1);
    /* a replay asks the model nothing */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "m", NULL), PL_OK);
    cr_expect_eq(again->calls_executed, 0);
    cr_expect_eq(t_scripted_served(script), 1);
    pl_outcome_free(again);
    pl_outcome_free(o);
    /* a short result is not sent to the model */
    oo.summarize_over = 100000;
    o = run(e, "s", "search", "{\"q\": \"lmdb\"}");
    cr_expect(strstr(t_str(member(pl_outcome_result(o), "observation"),
                           "summary"),
                     "'search' returned"));
    cr_expect_eq(t_scripted_served(script), 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A summariser that keeps what it was asked. */
static char *g_asked;

static int keeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    free(g_asked);
    g_asked = strdup(t_str(a->payload, "text"));
    return pl_steps_add_resultf(out, "{s:s}", "text", "Many results.");
}

Test(observe, a_summariser_is_given_the_raw_json_cut_at_32_kib,
     .fini = t_cleanup)
{
    static pl_observe_options oo;
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    oo.summarizer = "keeper";
    use(&oo);
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "keeper", keeper, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = run(e, "big", "search", "{\"q\": \"x\", \"n\": 4000}");
    cr_expect_str_eq(t_str(member(pl_outcome_result(o), "observation"),
                           "summary"),
                     "Many results.");
    /* the raw result, as the tool's ledger holds it */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "big", "0.0"), PL_OK, "%s", pl_errmsg());
    char *raw = cJSON_PrintUnformatted(pl_step_payload(pl_steps_at(l, 0)));
    cr_assert_not_null(raw);
    cr_assert_gt(strlen(raw), 32768, "a raw result past the cut");
    cr_assert_not_null(g_asked);
    size_t n = strlen(g_asked);
    cr_assert_gt(n, 32768);
    cr_expect_eq(memcmp(g_asked + n - 32768, raw, 32768), 0,
                 "the prompt ends with the raw JSON's first 32 KiB");
    cr_expect_not_null(strstr(g_asked, "(cut)"), "the prompt says it is cut");
    free(raw);
    free(g_asked);
    g_asked = NULL;
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a crash in the summariser ------------------------------------------- */

static bool g_kill_in_summary;
static int g_summaries;

static int dying_summary(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    if (g_kill_in_summary)
        raise(SIGKILL);
    g_summaries++;
    return pl_steps_add_resultf(out, "{s:s}", "text", "Summed up.");
}

/* Run "caller" of search as run @p id in a child killed in the summariser;
 * then, in this process, the tool's ledger holds @p durable steps, and the
 * run continues to the summary, running search @p search_runs times. */
static void crash_in_summary(const char *id, size_t durable, int search_runs)
{
    static pl_observe_options oo;
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    oo.summarizer = "summary";
    oo.summarize_over = 100;
    cr_assert_eq(pl_decorator_observe(&g_decos[0], &oo), PL_OK);
    const char *path = t_store_path();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_kill_in_summary = true;
        pl_registry *reg = NULL;
        pl_engine *e = NULL;
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_PROCESS;
        if (pl_registry_new(&reg) ||
            pl_registry_add_fn(reg, "caller", caller, NULL) ||
            pl_registry_add_fn(reg, "search", search, NULL) ||
            pl_registry_add_fn(reg, "summary", dying_summary, NULL) ||
            pl_engine_open(&e, path, reg, &eo))
            _exit(11);
        cJSON *p = cJSON_Parse("{\"tool\": \"search\", \"args\": "
                               "{\"q\": \"lmdb\"}}");
        pl_action a = {PL_ACTION_VERSION, "caller", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, e, &a, &ro);
        _exit(st ? 12 : 3); /* it should have died before this */
    }
    t_expect_killed(pid, "in the summariser");
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "summary", dying_summary, NULL),
                 PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0.0"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_steps_count(l), durable, "%s: steps durable", id);
    pl_steps_free(l);
    g_search_runs = g_summaries = 0;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_str_eq(t_str(member(pl_outcome_result(o), "observation"),
                           "summary"),
                     "Summed up.");
    cr_expect_eq(g_search_runs, search_runs, "%s: search ran", id);
    cr_expect_eq(g_summaries, 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The raw result goes with the summariser's call, durable with its
 * result: a crash in the summariser executes the whole call again.  With
 * paginate inside observe the tool's result is a call of its own, durable
 * when it returned, and the continued run serves it. */
Test(observe, a_crash_in_the_summariser_runs_the_tool_again_but_paginates,
     .fini = t_cleanup)
{
    g_n_decos = 1;
    crash_in_summary("alone", 0, 1);

    static pl_paginate_options po;
    po = (pl_paginate_options)PL_PAGINATE_OPTIONS_INIT;
    cr_assert_eq(pl_decorator_paginate(&g_decos[1], &po), PL_OK);
    g_n_decos = 2;
    crash_in_summary("paged", 2, 0);
}

/* ---- what an LLM policy sends ------------------------------------------- */

static pl_decorator g_agent_decos[2];

/* agent: {"text"} -> the llm's answer, its tool calls made through
 * g_agent_decos. */
static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    static const char *const tools[] = {"search"};
    pl_action c = PL_ACTION_INIT;
    c.policy = "llm";
    c.payload = a->payload;
    c.actions = tools;
    c.n_actions = 1;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &c, g_agent_decos, 2);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* The content of the first "tool" message of request @p i. */
static char *tool_message(const t_server *srv, int i)
{
    cJSON *log = t_server_log(srv);
    const cJSON *body = member(cJSON_GetArrayItem(log, i), "body");
    const cJSON *m;
    char *content = NULL;
    cJSON_ArrayForEach(m, member(body, "messages"))
    {
        if (t_str(m, "role") && strcmp(t_str(m, "role"), "tool") == 0) {
            content = strdup(t_str(m, "content"));
            break;
        }
    }
    cJSON_Delete(log);
    cr_assert_not_null(content, "no tool message in request %d", i);
    return content;
}

static void agent_run(size_t max_tool_bytes, bool observed, char **sent)
{
    t_needs_curl(); /* the model is served over HTTP */
    t_server srv;
    t_server_start(&srv,
                   "{\"responses\": ["
                   "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", \"name\": "
                   "\"search\", \"arguments\": {\"q\": \"lmdb\", \"n\": 4}}]},"
                   " \"usage\": [10, 5]},"
                   "{\"answer\": {\"text\": \"done\"}, \"usage\": [20, 2]}]}");
    setenv("OPENAI_API_KEY", "sk-test", 1);
    pl_llm_options lo = PL_LLM_OPTIONS_INIT;
    lo.base_url = srv.base;
    lo.max_tool_result_bytes = max_tool_bytes;
    static pl_observe_options oo;
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    static pl_decorator per[1];
    cr_assert_eq(pl_decorator_observe(&per[0], &oo), PL_OK);
    cr_assert_eq(pl_decorator_loop(&g_agent_decos[0], 4), PL_OK);
    cr_assert_eq(pl_decorator_invoke_action_with(&g_agent_decos[1], per,
                                                 observed ? 1 : 0),
                 PL_OK);
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "agent", agent, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_llm_register(reg, "llm", "openai://m", NULL, &lo), PL_OK,
                 "%s", pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "agent", "{\"text\": \"find lmdb\"}", NULL);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "done");
    *sent = tool_message(&srv, 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_server_stop(&srv);
}

Test(observe, an_llm_policy_sends_the_observation_capped, .fini = t_cleanup)
{
    char *sent = NULL;
    agent_run(0, true, &sent);
    cJSON *j = cJSON_Parse(sent);
    cr_assert(cJSON_IsObject(j), "%s", sent);
    cr_expect(t_str(j, "summary") != NULL, "the observation: %s", sent);
    cr_expect_null(member(j, "raw"), "not the raw result: %s", sent);
    cr_expect_null(strstr(sent, "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"
                                "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"
                                "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"
                                "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"
                                "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"),
                   "the raw blob was sent");
    cJSON_Delete(j);
    free(sent);
    /* without observe, the raw result; over the cap, cut with a note */
    agent_run(1000, false, &sent);
    j = cJSON_Parse(sent);
    cr_assert(cJSON_IsObject(j), "%s", sent);
    cr_expect(cJSON_IsTrue(member(j, "truncated")), "%s", sent);
    cr_expect_leq(strlen(sent), 1000);
    cr_expect_gt(member(j, "original_bytes")->valuedouble, 3000);
    cr_expect(strncmp(t_str(j, "preview"), "{\"results\"", 10) == 0, "%s",
              sent);
    cJSON_Delete(j);
    free(sent);
}

/* Is @p s well-formed UTF-8 (shortest forms, no surrogates)? */
static bool utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80                  ? 1
                : *p >= 0xc2 && *p <= 0xdf ? 2
                : *p >= 0xe0 && *p <= 0xef ? 3
                : *p >= 0xf0 && *p <= 0xf4 ? 4
                                           : 0;
        if (!n)
            return false;
        for (int k = 1; k < n; k++)
            if ((p[k] & 0xc0) != 0x80)
                return false;
        p += n;
    }
    return true;
}

/* @p n bytes @p c, then @p tail, into @p buf. */
static void padded(char *buf, size_t cap, char c, size_t n, const char *tail)
{
    cr_assert_lt(n, cap);
    memset(buf, c, n);
    snprintf(buf + n, cap - n, "%s", tail);
}

/* The summary quotes member names, the tool's name and why pagination
 * stopped cut short: never through a character, whose half would make the
 * observation text a model's provider refuses. */
Test(observe, the_summary_cuts_names_on_a_character_boundary, .fini = t_cleanup)
{
    /* 39 bytes, then a character of two, three or four bytes */
    char key[64], stopped[64], tool[160];
    padded(key, sizeof key, 'k', 39, "\xc3\xa9t\xc3\xa9");
    padded(stopped, sizeof stopped, 's', 39, "\xe6\x97\xa5");
    padded(tool, sizeof tool, 't', 99, "\xf0\x9f\x98\x80");
    cJSON *raw = cJSON_CreateObject();
    cJSON_AddNumberToObject(raw, key, 1);
    cJSON *pg = cJSON_AddObjectToObject(raw, "pagination");
    cJSON_AddNumberToObject(pg, "pages", 2);
    cJSON_AddStringToObject(pg, "stopped", stopped);
    cJSON *obs = NULL;
    cr_assert_eq(pl_observation_default(&obs, tool, raw), PL_OK, "%s",
                 pl_errmsg());
    const char *sum = t_str(obs, "summary");
    cr_assert_not_null(sum);
    cr_expect(utf8_ok(sum), "the summary is not UTF-8: %s", sum);
    cr_expect(strstr(sum, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"), "%s",
              sum);
    cr_expect(strstr(sum, "incomplete: stopped by sss"), "%s", sum);
    char *all = t_text(obs);
    cr_expect(utf8_ok(all), "%s", all);
    free(all);
    cJSON_Delete(obs);
    cJSON_Delete(raw);
}

Test(observe, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    cr_expect_eq(pl_decorator_observe(NULL, NULL), PL_EINVAL);
    pl_observe_options oo = PL_OBSERVE_OPTIONS_INIT;
    oo.version = 0;
    cr_expect_eq(pl_decorator_observe(&d, &oo), PL_EINVAL);
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    oo.n_tools = 2;
    cr_expect_eq(pl_decorator_observe(&d, &oo), PL_EINVAL);
    static const char *const names[] = {"a", ""};
    oo.tools = names;
    cr_expect_eq(pl_decorator_observe(&d, &oo), PL_EINVAL);
    oo = (pl_observe_options)PL_OBSERVE_OPTIONS_INIT;
    oo.summarizer = "";
    cr_expect_eq(pl_decorator_observe(&d, &oo), PL_EINVAL);
    cJSON *out = NULL;
    cr_expect_eq(pl_observation_default(&out, "t", NULL), PL_EINVAL);
    cr_expect_null(out);
    cJSON *arr = cJSON_CreateArray();
    cr_expect_eq(pl_observation_default(&out, "t", arr), PL_EINVAL);
    cJSON_Delete(arr);
}
