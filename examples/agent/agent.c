/*
 * agent.c -- the research-and-approve agent's policies.
 *
 * The root asks the model (under loop + invoke_action, so each tool call the
 * model makes is executed and recorded before the next turn), then asks a
 * human to approve the model's answer.  The human's answer decides the
 * result: {"approved": true} publishes the answer, anything else withholds
 * it.  A crash at any point is continued from the ledger: no model call,
 * tool call or approval is made twice.
 */
#include "agent.h"

static const char *const model_tools[] = {"calculator", "read_file", "http_get",
                                          AGENT_HUMAN};

static const char system_prompt[] =
    "You are a careful research assistant.  Answer the user's question "
    "from the data you can reach: read_file reads files of the data "
    "directory (start with fleet.md), http_get fetches URLs, calculator "
    "does arithmetic.  Call ask_human only for a question the data cannot "
    "answer.  Finish with a short answer that names the figures you used; "
    "a human reviews it before it is published.";

/* The approval prompt shown to the human. */
static int approval_prompt(cJSON **out, const char *question, const char *draft,
                           bool again)
{
    return pl_json_pack(out, "{s:s, s:s, s:s, s:s*}", "question", question,
                        "draft", draft, "ask",
                        "Approve this answer?  Reply {\"approved\": true} or "
                        "{\"approved\": false, \"comment\": \"why\"}.",
                        "note",
                        again ? "The last reply had no true or false "
                                "\"approved\": please answer again."
                              : NULL);
}

static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(a->payload, "question");
    if (!cJSON_IsString(q) || !*q->valuestring)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "the payload needs a non-empty "
                                  "\"question\" string");
    cJSON *text = NULL, *prompt = NULL, *answer = NULL;
    pl_step *res = NULL;
    int st = pl_json_pack(&text, "{s:s}", "text", q->valuestring);
    if (st)
        return st;
    pl_action call = PL_ACTION_INIT;
    call.policy = AGENT_MODEL_POLICY;
    call.payload = text;
    call.actions = model_tools;
    call.n_actions = sizeof model_tools / sizeof *model_tools;
    pl_decorator d[2];
    if ((st = pl_decorator_loop(&d[0], AGENT_MAX_TURNS)) ||
        (st = pl_decorator_invoke_action(&d[1])))
        goto done;
    st = pl_ctx_call(&res, ctx, &call, d, 2);
    if (st && st != PL_ERESULT)
        goto done;
    /* The model failed for good (error-as-data): that is the answer. */
    if (pl_step_is_error(res)) {
        st = pl_steps_add_result(out, pl_step_payload(res));
        goto done;
    }
    const cJSON *draft = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                          "text");
    if (!cJSON_IsString(draft)) {
        st = pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                "the model ended without a text answer");
        goto done;
    }
    /* Ask until the answer says yes or no (each ask is a call of its own,
     * so a replay asks the same questions in the same order). */
    const cJSON *ok = NULL;
    for (int ask = 0; ask < AGENT_MAX_ASKS && !cJSON_IsBool(ok); ask++) {
        cJSON_Delete(prompt);
        cJSON_Delete(answer);
        prompt = answer = NULL;
        if ((st = approval_prompt(&prompt, q->valuestring, draft->valuestring,
                                  ask > 0)))
            goto done;
        st = pl_ctx_invoke(&answer, ctx, AGENT_HUMAN, prompt);
        if (st)
            goto done; /* PL_ESUSPENDED first: the run waits for the human */
        ok = cJSON_GetObjectItemCaseSensitive(answer, "approved");
    }
    const cJSON *comment = cJSON_GetObjectItemCaseSensitive(answer, "comment");
    if (!cJSON_IsBool(ok)) {
        st = pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                "no approval: the human's answers were not "
                                "{\"approved\": true} or {\"approved\": "
                                "false}");
    } else if (cJSON_IsTrue(ok)) {
        st = pl_steps_add_resultf(out, "{s:s, s:s, s:b}", "question",
                                  q->valuestring, "answer", draft->valuestring,
                                  "approved", true);
    } else {
        st = pl_steps_add_resultf(out, "{s:s, s:b, s:s, s:s}", "question",
                                  q->valuestring, "approved", false, "withheld",
                                  draft->valuestring, "comment",
                                  cJSON_IsString(comment) ? comment->valuestring
                                                          : "");
    }
done:
    pl_step_free(res);
    cJSON_Delete(answer);
    cJSON_Delete(prompt);
    cJSON_Delete(text);
    return st;
}

int agent_register(pl_registry *reg, const char *model_url,
                   const pl_tools *tools)
{
    pl_llm_options lo = PL_LLM_OPTIONS_INIT;
    lo.description = "Researches a question with the tools.";
    lo.temperature = 0;
    int st = pl_llm_register(reg, AGENT_MODEL_POLICY, model_url, system_prompt,
                             &lo);
    if (!st)
        st = pl_tools_register(reg, tools);
    if (!st)
        st = pl_registry_add_human(reg, AGENT_HUMAN);
    if (st)
        return st;
    pl_policy_def def = PL_POLICY_DEF_INIT;
    def.name = AGENT_ROOT;
    def.fn = agent;
    def.description = "Research a question, then have a human approve the "
                      "answer.";
    def.input_schema = "{\"type\":\"object\",\"properties\":{\"question\":"
                       "{\"type\":\"string\",\"minLength\":1}},"
                       "\"required\":[\"question\"]}";
    return pl_registry_add(reg, &def);
}
