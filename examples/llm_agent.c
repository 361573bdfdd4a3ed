/*
 * llm_agent.c -- an LLM agent in a few lines: the model decides, the tools
 * run, every model call and tool call is durable.
 *
 *   llm-agent STORE MODEL_URL QUESTION
 *
 * MODEL_URL is scripted://examples/llm/agent.json (offline), openai://MODEL
 * (with OPENAI_API_KEY set), or openai+http://HOST:PORT/v1#MODEL.  Run it
 * again with the same store: the finished run is replayed from the ledger,
 * and the model is not asked again.
 */
#include <stdio.h>
#include <string.h>

#include <policyledger_llm.h>

#include "help.h"

static int add(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    double x, y;
    if (pl_json_unpack(a->payload, "{s:f, s:f}", "a", &x, "b", &y))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    return pl_steps_add_resultf(out, "{s:f}", "sum", x + y);
}

/* The agent: the model with the tool "add", turn after turn (at most 8). */
static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    static const char *const tools[] = {"add"};
    pl_action call = PL_ACTION_INIT;
    call.policy = "model";
    call.payload = a->payload; /* {"text": the question} */
    call.actions = tools;
    call.n_actions = 1;
    pl_decorator d[2];
    pl_step *answer = NULL;
    int st = pl_decorator_loop(&d[0], 8);
    if (!st)
        st = pl_decorator_invoke_action(&d[1]);
    if (!st)
        st = pl_ctx_call(&answer, ctx, &call, d, 2);
    if (!st || st == PL_ERESULT) /* an error result is the answer too */
        st = pl_steps_add_result(out, pl_step_payload(answer));
    pl_step_free(answer);
    return st;
}

int main(int argc, char **argv)
{
    static const char use[] = "usage: llm-agent STORE MODEL_URL QUESTION";
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        printf("%s\n", use);
        return help_written("llm-agent");
    }
    /* an option is taken for no store nor model */
    for (int i = 1; i < argc && i < 3; i++)
        if (argv[i][0] == '-') {
            fprintf(stderr, "llm-agent: unknown option '%s' (%s)\n", argv[i],
                    use);
            return 2;
        }
    if (argc != 4) {
        fprintf(stderr, "%s\n", use);
        return 2;
    }
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_outcome *o = NULL;
    cJSON *q = NULL;
    pl_policy_def add_def = PL_POLICY_DEF_INIT;
    add_def.name = "add";
    add_def.fn = add;
    add_def.description = "Add two numbers.";
    add_def.input_schema = "{\"type\":\"object\",\"properties\":{\"a\":"
                           "{\"type\":\"number\"},\"b\":{\"type\":\"number\"}},"
                           "\"required\":[\"a\",\"b\"]}";
    int st = pl_registry_new(&reg);
    if (!st)
        st = pl_registry_add(reg, &add_def);
    if (!st)
        st = pl_registry_add_fn(reg, "agent", agent, NULL);
    if (!st)
        st = pl_llm_register(reg, "model", argv[2], "Use the tools.", NULL);
    if (!st)
        st = pl_engine_open(&e, argv[1], reg, NULL);
    if (!st)
        st = pl_json_pack(&q, "{s:s}", "text", argv[3]);
    pl_action root = PL_ACTION_INIT;
    root.policy = "agent";
    root.payload = q;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "question";
    ro.if_exists = PL_IF_EXISTS_CONTINUE; /* or finish (or replay) it */
    if (!st)
        st = pl_run_start(&o, e, &root, &ro);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    size_t n = !st && o->steps ? pl_steps_count(o->steps) : 0;
    if (!st && o->status == PL_RUN_COMPLETED && n &&
        pl_step_is_error(pl_steps_at(o->steps, n - 1))) {
        /* the model or a tool ended it with an error: no answer */
        char *r = cJSON_PrintUnformatted(pl_outcome_result(o));
        fprintf(stderr, "llm-agent: no answer: %s\n", r ? r : "?");
        cJSON_free(r);
        st = PL_EPOLICY;
    } else if (!st && o->status == PL_RUN_COMPLETED &&
               !(st = pl_llm_run_tokens(&tok, e, "question"))) {
        char *r = cJSON_PrintUnformatted(pl_outcome_result(o));
        printf("%s\n%llu model calls, %llu input and %llu output tokens\n",
               r ? r : "?", (unsigned long long)tok.exchanges,
               (unsigned long long)tok.input, (unsigned long long)tok.output);
        cJSON_free(r);
    } else if (!st) {
        printf("run %s: %s\n", pl_run_status_name(o->status),
               o->reason ? o->reason : "");
        st = PL_EPOLICY;
    } else {
        fprintf(stderr, "llm-agent: %s\n", pl_errmsg());
    }
    pl_outcome_free(o);
    cJSON_Delete(q);
    pl_engine_close(e);
    pl_registry_free(reg);
    return st ? 1 : 0;
}
