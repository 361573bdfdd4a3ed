/*
 * test_llm_faults.c -- every HTTP provider's protocol (OpenAI, Anthropic,
 * Gemini, Ollama) against the loopback server (tests/llm_server.py, which
 * renders one scripted answer in each protocol's shape): tool-call round
 * trips with call ids bound, request bodies read field by field, and tool
 * names the providers refuse.  test_llm_faults_retry.c: retries and
 * failures.
 *
 * Each test runs once per protocol: g_protos describes them, and a request
 * body is read into one provider-neutral view (struct view) by the
 * protocol's own reader (support_llm_faults.c), which checks each field
 * where that protocol puts it.  Call ids: OpenAI and Anthropic send theirs, and they must come back
 * in the assistant's replayed calls and in the results; Ollama's and
 * Gemini's protocols carry none.  Ollama gets ids made for it (sent in the
 * replayed calls and results, and with the tool's name); Gemini's results
 * bind by order and by name: the n-th functionResponse answers the n-th
 * functionCall of the model's turn, under that call's name.
 */
#include "support_llm_faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */
/* ------------------------------------------------------------------------ */

PROTO_TEST(tool_calls_round_trip_with_their_ids)
{
    serve(&g_protos[*ix],
          list(2,
               "{\"answer\": {\"text\": \"Working.\", \"tool_calls\": ["
               "{\"id\": \"c_add\", \"name\": \"add\", \"arguments\": "
               "{\"a\": 1, \"b\": 2}},"
               "{\"id\": \"c_eff\", \"name\": \"effect\", \"arguments\": "
               "{\"note\": \"x\"}}]}, \"usage\": [20, 5]}",
               "{\"answer\": {\"text\": \"Done: 3.\"}, \"usage\": [40, 2]}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.temperature = 0.25;
    o.max_tokens = 300;
    fixture f = {0};
    run(&f, &o, "What is 1+2?", "[\"add\", \"effect\"]", "rt");
    expect_text(&f, "Done: 3.");
    cr_expect_eq(t_calls.add, 1);

    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2, "%s", g_p->name);
    const cJSON *e0 = cJSON_GetArrayItem(log, 0);
    if (strcmp(g_p->name, "openai") == 0)
        cr_expect(cJSON_IsTrue(at(e0, "auth_matches")), "bearer key");
    if (strcmp(g_p->name, "anthropic") == 0) {
        cr_expect(cJSON_IsTrue(at(e0, "x_api_key_matches")), "x-api-key");
        expect_str_eq(t_str(e0, "anthropic_version"), "2023-06-01",
                      "anthropic-version");
    }
    if (strcmp(g_p->name, "gemini") == 0)
        cr_expect(cJSON_IsTrue(at(e0, "x_goog_api_key_matches")),
                  "x-goog-api-key");

    /* the first request: model, options, system prompt, user, tools */
    view v;
    request(&v, log, 0);
    if (strcmp(g_p->name, "gemini") != 0)
        expect_str_eq(v.model, "m", "the model");
    expect_str_eq(v.system, "You are terse.", "the system prompt");
    cr_expect_float_eq(v.temperature, 0.25, 1e-9, "%s: temperature", g_p->name);
    cr_expect_eq(v.max_tokens, 300, "%s: max tokens", g_p->name);
    cr_assert_eq(v.n, 1, "%s: one message", g_p->name);
    expect_str_eq(v.msgs[0].role, "user", "the first role");
    expect_str_eq(v.msgs[0].text, "What is 1+2?", "the user's text");
    cr_assert_eq(v.n_tools, 2, "%s: two tools", g_p->name);
    expect_str_eq(v.tool_names[0], "add", "tool 0");
    cr_expect_null(v.tool_desc[0], "%s: add has no description", g_p->name);
    char *p0 = t_text(v.tool_params[0]);
    expect_str_eq(p0, "{\"type\":\"object\"}", "add's parameters");
    free(p0);
    expect_str_eq(v.tool_names[1], "effect", "tool 1");
    expect_str_eq(v.tool_desc[1], "Record a note.", "effect's description");
    const cJSON *req0 = cJSON_GetArrayItem(at(v.tool_params[1], "required"), 0);
    expect_str_eq(cJSON_IsString(req0) ? req0->valuestring : NULL, "note",
                  "effect's required field");
    view_free(&v);

    /* the second: the assistant's calls, then each result bound to its call */
    request(&v, log, 1);
    cr_assert_eq(v.n, 4, "%s: user, assistant, two results; got %d", g_p->name,
                 v.n);
    const vmsg *a = &v.msgs[1];
    expect_str_eq(a->role, "assistant", "the model's role");
    expect_str_eq(a->text, "Working.", "the model's text");
    cr_assert_eq(a->n_calls, 2, "%s: two calls replayed", g_p->name);
    expect_str_eq(a->calls[0].name, "add", "call 0");
    cr_expect_eq(at(a->calls[0].args, "b")->valuedouble, 2);
    expect_str_eq(a->calls[1].name, "effect", "call 1");
    expect_str_eq(t_str(a->calls[1].args, "note"), "x", "call 1's note");
    const vmsg *r0 = &v.msgs[2], *r1 = &v.msgs[3];
    expect_str_eq(r0->role, "tool", "result 0");
    expect_str_eq(r1->role, "tool", "result 1");
    cr_expect_eq(at(r0->result, "sum")->valuedouble, 3, "%s", g_p->name);
    cr_expect(cJSON_IsTrue(at(r1->result, "ok")), "%s", g_p->name);
    if (g_p->ids) { /* the provider's ids, as it sent them */
        expect_str_eq(a->calls[0].id, "c_add", "call 0's id");
        expect_str_eq(a->calls[1].id, "c_eff", "call 1's id");
        expect_str_eq(r0->result_id, "c_add", "result 0's id");
        expect_str_eq(r1->result_id, "c_eff", "result 1's id");
    } else if (g_p->made_ids) { /* ids made here, and the tool's name */
        cr_assert_not_null(a->calls[0].id);
        cr_expect_str_neq(a->calls[0].id, a->calls[1].id);
        expect_str_eq(r0->result_id, a->calls[0].id, "result 0's id");
        expect_str_eq(r1->result_id, a->calls[1].id, "result 1's id");
        expect_str_eq(r0->result_name, "add", "result 0's tool");
        expect_str_eq(r1->result_name, "effect", "result 1's tool");
    } else { /* Gemini: by order and by name */
        cr_expect_null(a->calls[0].id);
        expect_str_eq(r0->result_name, a->calls[0].name, "result 0's name");
        expect_str_eq(r1->result_name, a->calls[1].name, "result 1's name");
    }
    view_free(&v);
    cJSON_Delete(log);

    /* the ledger keeps the ids (made ones where the protocol has none) */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, f.e, "rt", "0.0"), PL_OK, "%s", pl_errmsg());
    int k = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_CALL)
            continue;
        const char *id = t_str(pl_step_payload(s), "call_id");
        cr_expect_not_null(id);
        if (g_p->ids)
            expect_str_eq(id, k == 0 ? "c_add" : "c_eff", "the ledger's id");
        k++;
    }
    cr_expect_eq(k, 2);
    pl_steps_free(l);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, f.e, "rt"), PL_OK);
    cr_expect_eq(tok.input, 60, "%s", g_p->name);
    cr_expect_eq(tok.output, 7, "%s", g_p->name);

    /* replay: the server hears nothing more */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, f.e, "rt", NULL), PL_OK);
    cr_expect_eq(again->status, PL_RUN_COMPLETED);
    cr_expect_eq(t_server_requests(&g_srv), 2);
    pl_outcome_free(again);
    fixture_free(&f);
}

/* A policy of a name providers refuse, counting its calls. */
static int g_odd_calls;
static int odd(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    g_odd_calls++;
    return pl_steps_add_resultf(out, "{s:s}", "ran", (const char *)user);
}

#define LONG_NAME                                                              \
    "a-policy-name-far-longer-than-any-provider-takes/with/slashes/and.dots"   \
    ".too"

PROTO_TEST(tool_names_the_providers_refuse_round_trip)
{
    /* the model calls tool 0 and tool 2 by the names it was given */
    serve(&g_protos[*ix],
          list(2,
               "{\"answer\": {\"tool_calls\": ["
               "{\"id\": \"n1\", \"tool\": 0, \"arguments\": {}},"
               "{\"id\": \"n2\", \"tool\": 2, \"arguments\": {}}]}}",
               "{\"answer\": {\"text\": \"charged\"}}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    fixture f = {0};
    f.reg = registry_for(g_p, &o);
    const char *names[] = {"orders.charge", "tools/read_file", LONG_NAME,
                           "1st"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(pl_registry_add_fn(f.reg, names[i], odd, (void *)names[i]),
                     PL_OK, "%s", pl_errmsg());
    }
    f.e = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    f.out = t_agent(f.e, "charge",
                    "[\"orders.charge\", \"tools/read_file\", \"" LONG_NAME
                    "\", \"1st\"]",
                    "names");
    expect_text(&f, "charged");
    cr_expect_eq(g_odd_calls, 2, "%s", g_p->name);

    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    view v0, v1;
    request(&v0, log, 0); /* checks every name is valid for the protocol */
    request(&v1, log, 1);
    cr_assert_eq(v0.n_tools, 4);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            cr_expect_str_neq(v0.tool_names[i], v0.tool_names[j]);
    if (strcmp(g_p->name, "gemini") == 0) /* Gemini takes dots */
        expect_str_eq(v0.tool_names[0], "orders.charge", "Gemini's name");
    else
        cr_expect_str_neq(v0.tool_names[0], "orders.charge");
    cr_expect_leq(strlen(v0.tool_names[2]), 64);
    /* the replayed calls carry the names the model used, the same again */
    cr_assert_eq(v1.n, 4);
    expect_str_eq(v1.msgs[1].calls[0].name, v0.tool_names[0], "call 0");
    expect_str_eq(v1.msgs[1].calls[1].name, v0.tool_names[2], "call 1");
    expect_str_eq(v1.tool_names[0], v0.tool_names[0], "the name, again");
    expect_str_eq(t_str(v1.msgs[2].result, "ran"), "orders.charge",
                  "the policy ran");
    expect_str_eq(t_str(v1.msgs[3].result, "ran"), LONG_NAME, "the policy ran");
    view_free(&v0);
    view_free(&v1);
    cJSON_Delete(log);

    /* the ledger names the policies themselves */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, f.e, "names", "0.0"), PL_OK);
    int k = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_ACTION_CALL)
            expect_str_eq(t_str(pl_step_payload(s), "policy"),
                          k++ == 0 ? "orders.charge" : LONG_NAME,
                          "the ledger's policy");
    }
    cr_expect_eq(k, 2);
    pl_steps_free(l);
    fixture_free(&f);
}

PROTO_TEST(a_policy_name_called_as_is_is_an_unknown_tool)
{
    /* '/' is in no protocol's rule: the tool went as another name */
    serve(&g_protos[*ix], list(1, "{\"answer\": {\"tool_calls\": [{\"id\": "
                                  "\"u\", \"name\": \"tools/read_file\", "
                                  "\"arguments\": {}}]}}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    fixture f = {0};
    f.reg = registry_for(g_p, &o);
    cr_assert_eq(pl_registry_add_fn(f.reg, "tools/read_file", odd,
                                    "tools/read_file"),
                 PL_OK);
    f.e = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    f.out = t_agent(f.e, "read", "[\"tools/read_file\"]", "unk");
    expect_error(&f, PL_LLM_ERR_INVALID_MODEL_ACTION,
                 "not among the tools offered");
    cr_expect_eq(g_odd_calls, 0);
    fixture_free(&f);
}

/* A tool's error result goes to the model as the call's result, the error
 * readable (Anthropic's is_error set), and the model answers again. */
PROTO_TEST(an_error_result_goes_to_the_model)
{
    serve(&g_protos[*ix],
          list(2,
               "{\"answer\": {\"tool_calls\": [{\"id\": \"e1\", \"name\": "
               "\"add\", \"arguments\": {\"a\": \"one\"}}]}}",
               "{\"answer\": {\"text\": \"It failed.\"}}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    fixture f = {0};
    run(&f, &o, "add", "[\"add\"]", "err");
    expect_text(&f, "It failed.");
    cJSON *log = t_server_log(&g_srv);
    view v;
    request(&v, log, 1);
    cr_assert_eq(v.n, 3, "%s: user, assistant, result", g_p->name);
    const vmsg *r = &v.msgs[2];
    expect_str_eq(r->role, "tool", "the result");
    cr_expect(cJSON_IsTrue(at(r->result, "error")), "%s: %s", g_p->name,
              t_text(r->result));
    expect_str_eq(t_str(r->result, "code"), PL_ERR_INVALID_INPUT, "its code");
    if (strcmp(g_p->name, "anthropic") == 0)
        cr_expect(r->is_error, "is_error");
    view_free(&v);
    cJSON_Delete(log);
    fixture_free(&f);
}
