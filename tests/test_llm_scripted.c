/*
 * test_llm_scripted.c -- the scripted model (scripted://PATH), a human's
 * approval inside an agent, and crash recovery: a child process runs an
 * agent and kill -9s itself at a step boundary; continuing the run repeats
 * no model request but the one in flight, and no tool side effect but the
 * one in flight (against the scripted model and the loopback server).
 */
#include "llm_support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *SCRIPT =
    "{\"responses\": ["
    " {\"text\": \"Noting.\", \"tool_calls\": [{\"id\": \"n1\", \"name\": "
    "\"effect\", \"arguments\": {\"note\": \"first\"}}],"
    "  \"usage\": {\"input\": 11, \"output\": 3}},"
    " {\"tool_calls\": [{\"id\": \"n2\", \"name\": \"effect\", "
    "\"arguments\": {\"note\": \"second\"}}, {\"name\": \"add\", "
    "\"arguments\": \"{\\\"a\\\": 2, \\\"b\\\": 5}\"}],"
    "  \"usage\": {\"input\": 30, \"output\": 9}},"
    " {\"text\": \"Done: 7.\", \"usage\": {\"input\": 50, \"output\": 4}}"
    "]}";

static char g_url[4300];
static const char *g_script;

/* The scripted model playing @p script_text, with @p o (NULL: the
 * defaults). */
static pl_registry *scripted_with(const char *script_text,
                                  const pl_llm_options *o)
{
    g_script = t_write_file("script.json", script_text);
    snprintf(g_url, sizeof g_url, "scripted://%s", g_script);
    return t_llm_registry(g_url, o);
}

static pl_registry *scripted_registry(const char *script_text)
{
    return scripted_with(script_text, NULL);
}

static uint64_t served(void) { return t_scripted_served(g_script); }

Test(llm_scripted, plays_the_script_and_replays_without_it)
{
    pl_registry *reg = scripted_registry(SCRIPT);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    cr_expect_eq(served(), 0);
    pl_outcome *o = t_agent(e, "note twice", "[\"effect\", \"add\"]", "s1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "Done: 7.");
    cr_expect_eq(served(), 3);
    cr_expect_eq(t_calls.add, 1);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "s1"), PL_OK);
    cr_expect_eq(tok.input, 91);
    cr_expect_eq(tok.output, 16);
    cr_expect_eq(tok.exchanges, 3);

    /* the second answer's call without an id got one, and kept it */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "s1", "0.0"), PL_OK);
    int calls = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_CALL)
            continue;
        const char *id = t_str(pl_step_payload(s), "call_id");
        const char *want[] = {"n1", "n2", "call_1_1"};
        cr_assert_lt(calls, 3);
        cr_expect_str_eq(id, want[calls]);
        calls++;
    }
    cr_expect_eq(calls, 3);
    pl_steps_free(l);

    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "s1", NULL), PL_OK);
    cr_expect_eq(again->status, PL_RUN_COMPLETED);
    cr_expect_eq(served(), 3, "replay asks the model nothing");
    cr_expect_eq(t_calls.add, 1);
    pl_outcome_free(again);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_expect_eq(pl_llm_run_tokens(&tok, NULL, "s1"), PL_EINVAL);
    e = t_engine(t_store_path(), reg = scripted_registry(SCRIPT),
                 PL_DURABILITY_PROCESS);
    cr_expect_eq(pl_llm_run_tokens(&tok, e, "no-such-run"), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_scripted, a_retryable_fault_plays_the_next_response)
{
    pl_registry *reg = scripted_registry(
        "{\"responses\": [{\"status\": 503}, {\"text\": \"fine\"}, "
        "{\"status\": 401}]}");
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_agent(e, "hi", "[]", "f1");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "fine");
    pl_outcome_free(o);
    /* a second run starts the script over: its first response again */
    o = t_agent(e, "hi", "[]", "f2");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "fine");
    cr_expect_eq(served(), 4);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_scripted, faults_and_the_end_of_the_script_are_error_results)
{
    pl_registry *reg = scripted_registry(
        "{\"responses\": [{\"status\": 401}]}");
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_agent(e, "hi", "[]", "u1");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "code"), PL_ERR_UNAUTHORIZED);
    /* the error result ends the turn: it carries the turn's tokens */
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(
                  pl_outcome_result(o), "tokens_in")),
              "%s", t_text(pl_outcome_result(o)));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);

    reg = scripted_registry(
        "{\"responses\": [{\"tool_calls\": [{\"name\": "
        "\"add\", \"arguments\": {\"a\": 1, \"b\": 1}}]}]}");
    e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    o = t_agent(e, "hi", "[\"add\"]", "end");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "code"), PL_ERR_INVALID_INPUT);
    cr_expect(strstr(t_str(pl_outcome_result(o), "message"), "no response 1"));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_scripted, a_bad_script_fails_the_run_clearly)
{
    pl_registry *reg = scripted_registry("{\"responses\": 3}");
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    cJSON *p = t_json("{\"text\": \"hi\", \"actions\": []}");
    pl_action a = {PL_ACTION_VERSION, "agent", p, NULL, 0, NULL};
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, NULL), PL_OK);
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect(o->reason && strstr(o->reason, "\"responses\" array"), "%s",
              o->reason ? o->reason : "");
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_scripted, a_humans_approval_is_kept_across_the_suspension)
{
    pl_registry *reg = scripted_registry(
        "{\"responses\": ["
        " {\"tool_calls\": [{\"id\": \"h1\", \"name\": \"ask_human\", "
        "\"arguments\": {\"question\": \"Ship it?\"}}]},"
        " {\"text\": \"Shipped, as approved.\"}]}");
    cr_assert_eq(pl_registry_add_human(reg, "ask_human"), PL_OK);
    const char *store = t_store_path();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_agent(e, "ship?", "[\"ask_human\"]", "h");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    cr_expect_str_eq(t_str(o->prompt, "question"), "Ship it?");
    char token[256];
    snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome_free(o);
    pl_engine_close(e);
    cr_expect_eq(served(), 1);

    e = t_engine(store, reg, PL_DURABILITY_SYNC);
    cJSON *ans = t_json("{\"approved\": true}");
    cr_assert_eq(pl_run_resume(&o, e, "h", token, ans), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ans);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"),
                     "Shipped, as approved.");
    cr_expect_eq(served(), 2, "the first model call was not asked again");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Crashes                                                                  */
/* ------------------------------------------------------------------------ */

static int g_kill_at, g_appended;

static void kill_on_append(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STEP_APPENDED && ++g_appended == g_kill_at)
        kill(getpid(), SIGKILL);
}

/* Lines of a file, as a JSON array of strings. */
static cJSON *lines(const char *path)
{
    cJSON *arr = cJSON_CreateArray();
    char *t = t_read_file(path, NULL);
    char *save = NULL;
    for (char *l = t ? strtok_r(t, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save))
        cJSON_AddItemToArray(arr, cJSON_CreateString(l));
    free(t);
    return arr;
}

/* Items [from, to) of @p all are distinct, and of [to, end) too; the two
 * share at most the last item before @p to: the one in flight at the kill. */
static void expect_no_repeat_but_in_flight(const cJSON *all, int to,
                                           const char *what, int k)
{
    int n = cJSON_GetArraySize(all);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const char *a = cJSON_GetArrayItem(all, i)->valuestring;
            const char *b = cJSON_GetArrayItem(all, j)->valuestring;
            if (strcmp(a, b) != 0)
                continue;
            cr_expect(i == to - 1 && j >= to,
                      "kill point %d: %s '%s' repeated (items %d and %d; %d "
                      "before the kill)",
                      k, what, a, i, j, to);
        }
}

/* Kill a child running the agent at the k-th appended step, for k = 1, 2,
 * ... until a child finishes; continue each run and check what repeated.
 * @p model_url NULL: the scripted model. */
static void crash_matrix(const char *model_url, const t_server *srv)
{
    const char *url = model_url ? model_url : g_url;
    for (int k = 1; k < 200; k++) {
        const char *dir = t_tmpdir();
        char store[4300], effects[4300];
        snprintf(store, sizeof store, "%s/store.db", dir);
        snprintf(effects, sizeof effects, "%s/effects", dir);
        snprintf(t_effects_path, sizeof t_effects_path, "%s", effects);
        if (!model_url) { /* a fresh script, so its count starts at 0 */
            g_script = t_write_file("script.json", SCRIPT);
            snprintf(g_url, sizeof g_url, "scripted://%s", g_script);
        }
        int logged_before = srv ? t_server_requests(srv) : 0;
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            pl_registry *reg = t_llm_registry(url, NULL);
            pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
            eo.on_event = kill_on_append;
            g_kill_at = k;
            pl_engine *e = NULL;
            if (pl_engine_open(&e, store, reg, &eo))
                _exit(2);
            cJSON *p = cJSON_Parse("{\"text\": \"note twice\", \"actions\": "
                                   "[\"effect\", \"add\"]}");
            pl_action a = {PL_ACTION_VERSION, "agent", p, NULL, 0, NULL};
            pl_run_options ro = PL_RUN_OPTIONS_INIT;
            ro.run_id = "crash";
            pl_outcome *o = NULL;
            int st = pl_run_start(&o, e, &a, &ro);
            _exit(st || o->status != PL_RUN_COMPLETED ? 3 : 0);
        }
        int wst;
        cr_assert_eq(waitpid(pid, &wst, 0), pid);
        bool killed = WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL;
        cr_assert(killed || (WIFEXITED(wst) && WEXITSTATUS(wst) == 0),
                  "kill point %d: the child ended with status %d", k, wst);
        cJSON *eff = lines(effects);
        int eff_before = cJSON_GetArraySize(eff);
        cJSON_Delete(eff);
        uint64_t served_before = model_url ? 0 : served();
        int logged_mid = srv ? t_server_requests(srv) : 0;

        pl_registry *reg = t_llm_registry(url, NULL);
        pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
        pl_outcome *o = NULL;
        cr_assert_eq(pl_run_continue(&o, e, "crash", NULL), PL_OK,
                     "kill point %d: %s", k, pl_errmsg());
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "kill point %d: %s", k,
                     o->reason ? o->reason : "");
        cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "Done: 7.");
        pl_outcome_free(o);
        pl_engine_close(e);
        pl_registry_free(reg);

        eff = lines(effects);
        cr_expect_geq(cJSON_GetArraySize(eff), 2, "kill point %d", k);
        expect_no_repeat_but_in_flight(eff, eff_before, "tool side effect", k);
        cJSON_Delete(eff);
        cJSON *req = NULL;
        int req_before = 0;
        if (!model_url) {
            char served_path[4400];
            snprintf(served_path, sizeof served_path, "%s.served", g_script);
            req = lines(served_path);
            req_before = (int)served_before;
        } else {
            cJSON *log = t_server_log(srv);
            req = cJSON_CreateArray();
            for (int i = logged_before; i < cJSON_GetArraySize(log); i++) {
                char t[32];
                snprintf(t, sizeof t, "turn %d",
                         cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetArrayItem(log, i), "turn")
                             ->valueint);
                cJSON_AddItemToArray(req, cJSON_CreateString(t));
            }
            cJSON_Delete(log);
            req_before = logged_mid - logged_before;
        }
        cr_expect_geq(cJSON_GetArraySize(req), 3, "kill point %d", k);
        expect_no_repeat_but_in_flight(req, req_before, "model request", k);
        cJSON_Delete(req);
        t_effects_path[0] = '\0';
        if (!killed) { /* past the last step: every kill point is covered */
            cr_expect_gt(k, 10, "the run has more step boundaries than %d", k);
            return;
        }
    }
    cr_assert_fail("the agent never finished within 200 steps");
}

Test(llm_scripted, crash_at_every_step_with_the_scripted_model, .timeout = 300)
{
    crash_matrix(NULL, NULL);
}

Test(llm_scripted, crash_at_every_step_with_the_loopback_server, .timeout = 300)
{
    t_needs_curl();
    t_server srv;
    t_server_start(
        &srv,
        "{\"by_turn\": true, \"responses\": ["
        "{\"body\": {\"choices\": [{\"message\": {\"role\": \"assistant\", "
        "\"content\": \"Noting.\", \"tool_calls\": [{\"id\": \"n1\", "
        "\"type\": \"function\", \"function\": {\"name\": \"effect\", "
        "\"arguments\": \"{\\\"note\\\": \\\"first\\\"}\"}}]}}]}},"
        "{\"body\": {\"choices\": [{\"message\": {\"role\": \"assistant\", "
        "\"content\": null, \"tool_calls\": [{\"id\": \"n2\", "
        "\"type\": \"function\", \"function\": {\"name\": \"effect\", "
        "\"arguments\": \"{\\\"note\\\": \\\"second\\\"}\"}}, "
        "{\"id\": \"a2\", \"type\": \"function\", \"function\": "
        "{\"name\": \"add\", \"arguments\": "
        "\"{\\\"a\\\": 2, \\\"b\\\": 5}\"}}]}}]}},"
        "{\"body\": {\"choices\": [{\"message\": {\"role\": \"assistant\", "
        "\"content\": \"Done: 7.\"}}], \"usage\": {\"prompt_tokens\": 9, "
        "\"completion_tokens\": 2}}}]}");
    char url[160];
    snprintf(url, sizeof url, "openai+http://127.0.0.1:%d/v1#m", srv.port);
    crash_matrix(url, &srv);
    t_server_stop(&srv);
}

Test(llm_scripted,
     the_record_of_a_model_call_does_not_grow_with_the_conversation)
{
    enum { TURNS = 15 };
    char script[8192];
    size_t len = (size_t)snprintf(script, sizeof script, "{\"responses\": [");
    for (int i = 0; i < TURNS; i++)
        len += (size_t)
            snprintf(script + len, sizeof script - len,
                     "{\"tool_calls\": [{\"id\": \"c%02d\", \"name\": "
                     "\"add\", \"arguments\": {\"a\": %d, \"b\": "
                     "1000}}]},",
                     i, 100 + i);
    snprintf(script + len, sizeof script - len, "{\"text\": \"done\"}]}");
    pl_registry *reg = scripted_registry(script);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    cJSON *p = t_json("{\"text\": \"add many\", \"actions\": [\"add\"], "
                      "\"max_turns\": 20}");
    pl_action a = {PL_ACTION_VERSION, "agent", p, NULL, 0, NULL};
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "done");
    cJSON_Delete(p);

    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, o->run_id, "0.0"), PL_OK);
    size_t first = 0, last = 0;
    double req_first = 0, req_last = 0;
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT ||
            !cJSON_GetObjectItemCaseSensitive(pl_step_payload(s), "value"))
            continue;
        char *t = t_text(pl_step_payload(s));
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                          "value");
        double rb = cJSON_GetObjectItemCaseSensitive(v, "request_bytes")
                        ->valuedouble;
        if (n++ == 1) { /* the first of the tool-call answers' followers */
            first = strlen(t);
            req_first = rb;
        }
        if (n == TURNS) { /* the last tool-call answer, same shape */
            last = strlen(t);
            req_last = rb;
        }
        free(t);
    }
    cr_assert_eq(n, TURNS + 1);
    cr_expect_gt(req_last, req_first + 1000,
                 "the requests grew with the conversation (%g -> %g bytes)",
                 req_first, req_last);
    cr_expect_leq(last, first + 8,
                  "the recorded exchange grew from %zu to %zu bytes", first,
                  last);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_scripted, malformed_answers_of_every_shape_are_named)
{
    static const char *const cases[][2] = {
        {"{\"text\": 5}", "wrong shape"},
        {"{\"tool_calls\": \"add\"}", "wrong shape"},
        {"{}", "neither text nor tool calls"},
        {"{\"tool_calls\": [7]}", "not an object"},
        {"{\"tool_calls\": [{\"arguments\": {}}]}", "no tool name"},
        {"{\"tool_calls\": [{\"name\": \"add\"}]}", "has no arguments"},
        {"{\"tool_calls\": [{\"name\": \"add\", \"arguments\": 5}]}",
         "not a JSON object"},
        {"{\"tool_calls\": [{\"name\": \"add\", \"arguments\": \"[1]\"}]}",
         "not a JSON object"},
        {"{\"tool_calls\": [{\"name\": \"add\", \"arguments\": \"{\\\"a\"}]}",
         "not JSON"},
        {"{\"tool_calls\": [{\"name\": \"submit\", \"arguments\": {}}]}",
         "'submit', which is not among the tools offered"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char script[512];
        snprintf(script, sizeof script, "{\"responses\": [%s]}", cases[i][0]);
        pl_registry *reg = scripted_registry(script);
        pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
        pl_outcome *o = t_agent(e, "hi", "[\"add\"]", "bad");
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s: %s", cases[i][0],
                     o->reason ? o->reason : "");
        const cJSON *r = pl_outcome_result(o);
        cr_expect_str_eq(t_str(r, "code"), PL_LLM_ERR_INVALID_MODEL_ACTION,
                         "%s", cases[i][0]);
        cr_expect(t_str(r, "message") &&
                      strstr(t_str(r, "message"), cases[i][1]),
                  "%s: %s", cases[i][0], t_str(r, "message"));
        cr_expect_eq(t_calls.add, 0);
        pl_outcome_free(o);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

/* reprompt_limit counts re-prompts in a row: one allowed, two malformed
 * answers apart both re-prompted.  Without loop() the call ends with the
 * re-prompt's step, {"text", "reprompt": true, "again": true}. */
Test(llm_scripted, reprompts_are_counted_in_a_row)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.malformed = PL_LLM_MALFORMED_REPROMPT;
    o.reprompt_limit = 1;
    pl_registry *reg = scripted_with(
        "{\"responses\": [{\"tool_calls\": [{\"name\": \"nope\", "
        "\"arguments\": {}}]}, {\"tool_calls\": [{\"name\": \"add\", "
        "\"arguments\": {\"a\": 1, \"b\": 2}}]}, {\"tool_calls\": "
        "[{\"name\": \"nope\", \"arguments\": {}}]}, {\"text\": "
        "\"3\"}, {\"tool_calls\": [{\"name\": \"nope\", \"arguments\": "
        "{}}]}]}",
        &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "1+2?", "[\"add\"]", "row");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(t_str(pl_outcome_result(out), "text"), "3", "%s",
                     t_text(pl_outcome_result(out)));
    cr_expect_eq(served(), 4);
    cr_expect_eq(t_calls.add, 1);
    pl_outcome_free(out);
    /* a new run plays the script from its first answer: to the LLM
     * policy called alone */
    out = t_start(e, "llm", "{\"text\": \"hi\"}", "alone");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s",
                 out->reason ? out->reason : "");
    const cJSON *r = pl_outcome_result(out);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "reprompt")),
              "%s", t_text(r));
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "again")));
    cr_expect(t_str(r, "text") && strstr(t_str(r, "text"), "'nope'"), "%s",
              t_text(r));
    /* the turn's last step, it carries the turn's tokens */
    const cJSON *tk[3] = {cJSON_GetObjectItemCaseSensitive(r, "tokens"),
                          cJSON_GetObjectItemCaseSensitive(r, "tokens_in"),
                          cJSON_GetObjectItemCaseSensitive(r, "tokens_out")};
    cr_assert(cJSON_IsNumber(tk[0]) && cJSON_IsNumber(tk[1]) &&
                  cJSON_IsNumber(tk[2]),
              "%s", t_text(r));
    cr_expect(tk[0]->valuedouble > 0 &&
                  tk[0]->valuedouble == tk[1]->valuedouble + tk[2]->valuedouble,
              "%s", t_text(r));
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The root policy "twice": the LLM policy called twice, two ledgers. */
static int twice(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *r[2] = {NULL, NULL};
    int st = pl_ctx_invoke(&r[0], ctx, "llm", a->payload);
    if (!st)
        st = pl_ctx_invoke(&r[1], ctx, "llm", a->payload);
    if (!st)
        st = pl_steps_add_result(out, r[1]);
    cJSON_Delete(r[0]);
    cJSON_Delete(r[1]);
    return st;
}

/* pl_llm_run_tokens() sums the model calls of every ledger of a run.  Each
 * invocation plays the script from its first response. */
Test(llm_scripted, a_runs_tokens_are_summed_over_its_ledgers)
{
    pl_registry *reg = scripted_registry(
        "{\"responses\": [{\"text\": \"a\", \"usage\": {\"input\": 5, "
        "\"output\": 1}}, {\"text\": \"b\", \"usage\": {\"input\": 7, "
        "\"output\": 2}}]}");
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "twice";
    d.fn = twice;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "twice", "{\"text\": \"hi\"}", "two");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "a");
    char path[4400];
    snprintf(path, sizeof path, "%s.served", g_script);
    char *lines = t_read_file(path, NULL);
    cr_expect_str_eq(lines, "0\n0\n", "each response's number, as played");
    free(lines);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "two"), PL_OK);
    cr_expect(tok.input == 10 && tok.output == 2 && tok.exchanges == 2,
              "%llu %llu %llu", (unsigned long long)tok.input,
              (unsigned long long)tok.output,
              (unsigned long long)tok.exchanges);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void tool_error_run(pl_llm_tool_errors rule, const char *want_code,
                           uint64_t want_served)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.tool_errors = rule;
    pl_registry *reg = scripted_with(
        "{\"responses\": [{\"tool_calls\": [{\"id\": \"b1\", \"name\": "
        "\"add\", \"arguments\": {\"a\": \"one\"}}]}, "
        "{\"text\": \"The tool failed; I give up.\"}]}",
        &o);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *out = t_agent(e, "hi", "[\"add\"]", "te");
    cr_assert_eq(out->status, PL_RUN_COMPLETED);
    const cJSON *r = pl_outcome_result(out);
    if (want_code)
        cr_expect_str_eq(t_str(r, "code"), want_code);
    else
        cr_expect_str_eq(t_str(r, "text"), "The tool failed; I give up.");
    cr_expect_eq(served(), want_served);
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(llm_scripted, a_tool_error_goes_to_the_model_by_default)
{
    tool_error_run(PL_LLM_TOOL_ERRORS_CONTINUE, NULL, 2);
}

Test(llm_scripted, a_tool_error_ends_the_call_when_told_to_fail_fast)
{
    tool_error_run(PL_LLM_TOOL_ERRORS_FAIL, PL_ERR_INVALID_INPUT, 1);
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.tool_errors = (pl_llm_tool_errors)7;
    cr_expect_eq(pl_llm_register(reg, "m", "scripted://x", NULL, &o),
                 PL_EINVAL);
    pl_registry_free(reg);
}

Test(llm_scripted, arguments_against_the_tools_input_schema)
{
    pl_registry *reg = scripted_registry(
        "{\"responses\": [{\"tool_calls\": [{\"name\": \"effect\", "
        "\"arguments\": {\"note\": 5}}]}]}");
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_agent(e, "hi", "[\"effect\"]", "sch");
    const cJSON *r = pl_outcome_result(o);
    cr_expect_str_eq(t_str(r, "code"), PL_LLM_ERR_INVALID_MODEL_ACTION);
    cr_expect(strstr(t_str(r, "message"), "'effect'") &&
                  strstr(t_str(r, "message"), "/note"),
              "%s", t_str(r, "message"));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Model tokens against a budget                                            */
/* ------------------------------------------------------------------------ */

/* The number member @p key of @p o, or -1. */
static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The steps of the llm's ledger (run @p id, "0.0") that carry "tokens",
 * as [tokens, tokens_in, tokens_out] triples into @p got; how many. */
static int turn_tokens_of(pl_engine *e, const char *id, double got[][3],
                          int max)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0.0"), PL_OK, "%s", pl_errmsg());
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        if (num(p, "tokens") < 0 ||
            pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT)
            continue;
        cr_assert_lt(n, max);
        got[n][0] = num(p, "tokens");
        got[n][1] = num(p, "tokens_in");
        got[n][2] = num(p, "tokens_out");
        n++;
    }
    pl_steps_free(l);
    return n;
}

/*
 * The three turns of SCRIPT (or of the loopback server's same script) use
 * 11 + 3, 30 + 9 and 50 + 4 tokens.  Under budget(max_tokens = 50) the
 * third turn finds 53 spent and does not run: the call's result is a
 * recorded BudgetExceeded, two model requests were made, and a replay of
 * the run makes none and ends the same.  With 60 the third turn runs.
 * @p requests counts the model's requests so far.
 */
static void budget_of_tokens(pl_registry *reg, int (*requests)(void))
{
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "agent",
                            "{\"text\": \"note twice\", \"actions\": "
                            "[\"effect\", \"add\"], \"max_tokens\": 50}",
                            "b50");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "code"),
                     PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(t_str(pl_outcome_result(o), "message"),
                     "53 tokens used, the "
                     "limit is 50"),
              "%s", t_str(pl_outcome_result(o), "message"));
    cr_expect_eq(requests(), 2);
    cr_expect_eq(t_calls.add, 1, "the second turn's calls ran");

    /* each turn's last step: its exchange's tokens, the totals so far */
    double got[4][3];
    cr_assert_eq(turn_tokens_of(e, "b50", got, 4), 2);
    cr_expect(got[0][0] == 14 && got[0][1] == 11 && got[0][2] == 3, "%g %g %g",
              got[0][0], got[0][1], got[0][2]);
    cr_expect(got[1][0] == 39 && got[1][1] == 41 && got[1][2] == 12, "%g %g %g",
              got[1][0], got[1][1], got[1][2]);

    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "b50", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(again->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(t_str(pl_outcome_result(again), "code"),
                     PL_ERR_BUDGET_EXCEEDED);
    cr_expect_eq(requests(), 2, "the replay asks the model nothing");
    cr_expect_eq(t_calls.add, 1);
    pl_outcome_free(again);
    pl_outcome_free(o);

    o = t_start(e, "agent",
                "{\"text\": \"note twice\", \"actions\": [\"effect\", "
                "\"add\"], \"max_tokens\": 60}",
                "b60");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const cJSON *r = pl_outcome_result(o);
    cr_expect_str_eq(t_str(r, "text"), "Done: 7.");
    cr_expect(num(r, "tokens") == 54 && num(r, "tokens_in") == 91 &&
                  num(r, "tokens_out") == 16,
              "the result carries the call's tokens");
    cr_expect_eq(requests(), 5);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "b60"), PL_OK);
    cr_expect(tok.input == 91 && tok.output == 16);
    pl_outcome_free(o);
    pl_engine_close(e);
}

static int scripted_requests(void) { return (int)served(); }

Test(llm_scripted, a_token_budget_stops_the_agent_at_the_turn_that_spends_it)
{
    pl_registry *reg = scripted_registry(SCRIPT);
    budget_of_tokens(reg, scripted_requests);
    pl_registry_free(reg);
}

static t_server g_srv;

static int server_requests(void) { return t_server_requests(&g_srv); }

Test(llm_scripted, a_token_budget_on_the_loopback_server)
{
    t_needs_curl();
    t_server_start(
        &g_srv,
        "{\"responses\": ["
        " {\"answer\": {\"text\": \"Noting.\", \"tool_calls\": [{\"id\": "
        "\"n1\", \"name\": \"effect\", \"arguments\": {\"note\": "
        "\"first\"}}]}, \"usage\": [11, 3]},"
        " {\"answer\": {\"tool_calls\": [{\"id\": \"n2\", \"name\": "
        "\"effect\", \"arguments\": {\"note\": \"second\"}}, {\"id\": "
        "\"a2\", \"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 5}}]}, "
        "\"usage\": [30, 9]},"
        " {\"answer\": {\"text\": \"Noting.\", \"tool_calls\": [{\"id\": "
        "\"n1\", \"name\": \"effect\", \"arguments\": {\"note\": "
        "\"first\"}}]}, \"usage\": [11, 3]},"
        " {\"answer\": {\"tool_calls\": [{\"id\": \"n2\", \"name\": "
        "\"effect\", \"arguments\": {\"note\": \"second\"}}, {\"id\": "
        "\"a2\", \"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 5}}]}, "
        "\"usage\": [30, 9]},"
        " {\"answer\": {\"text\": \"Done: 7.\"}, \"usage\": [50, 4]}]}");
    char url[160];
    snprintf(url, sizeof url, "openai+http://127.0.0.1:%d/v1#m", g_srv.port);
    pl_registry *reg = t_llm_registry(url, NULL);
    budget_of_tokens(reg, server_requests);
    pl_registry_free(reg);
    t_server_stop(&g_srv);
}

/*
 * A ledger recorded before turns carried tokens still replays.  A child
 * records, as that code did, an LLM policy's first turn (an exchange with
 * no "tokens", the tool call it made, the tool's result) and is killed at
 * its second exchange; the real policy then continues the run: the first
 * turn replays to the same steps (no token fields: a divergence would fail
 * the run), and the run ends with no model request for that turn.
 */
static int old_exchange(cJSON **out, void *user)
{
    *out = cJSON_Parse(user);
    return *out ? PL_OK : PL_ENOMEM;
}

static int old_llm(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    bool second = false;
    for (size_t i = 0; !st && i < pl_steps_count(l); i++)
        second |= pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT;
    cJSON *v = NULL;
    if (!st)
        st = pl_ctx_side_effect(
            &v, ctx, "llm_exchange", old_exchange,
            second ? "{\"status\": 200, \"usage\": {\"input\": 20, "
                     "\"output\": 2}, \"answer\": {\"text\": \"Seven.\", "
                     "\"tool_calls\": []}}"
                   : "{\"status\": 200, \"usage\": {\"input\": 10, "
                     "\"output\": 4}, \"answer\": {\"tool_calls\": [{\"id\": "
                     "\"c1\", \"name\": \"add\", \"arguments\": {\"a\": 2, "
                     "\"b\": 5}}]}}");
    cJSON_Delete(v);
    cJSON *p = NULL;
    if (!st && second)
        st = pl_steps_add_text(out, NULL, "Seven.");
    else if (!st && !(st = pl_json_pack(&p, "{s:s, s:{s:i, s:i}, s:s}",
                                        "policy", "add", "payload", "a", 2, "b",
                                        5, "call_id", "c1")))
        st = pl_steps_add(out, PL_STEP_ACTION_CALL, NULL, p);
    cJSON_Delete(p);
    return st;
}

static int old_agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    static const char *const tools[] = {"add"};
    cJSON *p = NULL;
    int st = pl_json_pack(&p, "{s:s}", "text", "2 + 5?");
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_loop(&d[0], 4), PL_OK);
    cr_assert_eq(pl_decorator_invoke_action(&d[1]), PL_OK);
    pl_action call = PL_ACTION_INIT;
    call.policy = "llm";
    call.payload = p;
    call.actions = tools;
    call.n_actions = 1;
    pl_step *res = NULL;
    if (!st)
        st = pl_ctx_call(&res, ctx, &call, d, 2);
    cJSON_Delete(p);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static pl_registry *old_registry(bool recorded_then)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "old_agent", old_agent, NULL), PL_OK,
                 "%s", pl_errmsg());
    if (recorded_then) {
        cr_assert_eq(pl_registry_add_fn(reg, "llm", old_llm, NULL), PL_OK, "%s",
                     pl_errmsg());
    } else {
        g_script = t_write_file("script.json",
                                "{\"responses\": [{\"text\": \"Seven.\", "
                                "\"usage\": {\"input\": 20, \"output\": "
                                "2}}]}");
        snprintf(g_url, sizeof g_url, "scripted://%s", g_script);
        cr_assert_eq(pl_llm_register(reg, "llm", g_url, NULL, NULL), PL_OK,
                     "%s", pl_errmsg());
    }
    return reg;
}

static void kill_at_second_exchange(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STEP_APPENDED &&
        ev->step_type == PL_STEP_SIDE_EFFECT && ++g_appended == 2)
        kill(getpid(), SIGKILL);
}

Test(llm_scripted, a_ledger_recorded_before_turns_carried_tokens_replays)
{
    const char *store = t_store_path();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_registry *reg = old_registry(true);
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.on_event = kill_at_second_exchange;
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, &eo))
            _exit(2);
        pl_outcome *o = t_start(e, "old_agent", "{}", "old");
        _exit(o ? 3 : 4); /* not reached: killed */
    }
    int wst;
    cr_assert_eq(waitpid(pid, &wst, 0), pid);
    cr_assert(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL, "status %d", wst);

    pl_registry *reg = old_registry(false);
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "old", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "text"), "Seven.");
    cr_expect_eq(t_calls.add, 0, "the tool's recorded result was served");
    cr_expect_leq(served(), 1, "the first turn asked the model nothing");
    /* the first turn's call carries no tokens, as it was recorded */
    double got[4][3];
    int n = turn_tokens_of(e, "old", got, 4);
    cr_expect_leq(n, 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
