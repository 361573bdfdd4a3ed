/*
 * agent_check.c -- read a research-and-approve run back from its store and
 * print what the tests assert on, one "key value" line each:
 *
 *   status completed          the run's status
 *   verify ok                 pl_run_verify() (else its message)
 *   exchanges 4               recorded model calls (pl_llm_run_tokens())
 *   calls TOOL N              the model's calls to TOOL (fs.read_text_file:
 *                             the filesystem MCP server's, agent-demo --mcp)
 *   results TOOL N            their results, and how many were errors:
 *   tool_errors N
 *   suspends N / resumes N    the approval's steps
 *   answer TEXT               the approved answer, or "-"
 *
 *   agent-check STORE PLUGIN RUN   (AGENT_MODEL and AGENT_DATA set)
 */
#include <stdio.h>
#include <string.h>

#include <policyledger_llm.h>

#define MAX_TOOLS 8

typedef struct tally {
    const char *name[MAX_TOOLS];
    unsigned calls[MAX_TOOLS], results[MAX_TOOLS];
    unsigned n, errors, suspends, resumes, unknown;
} tally;

static unsigned *slot(tally *t, const char *name, int results)
{
    for (unsigned i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name))
            return results ? &t->results[i] : &t->calls[i];
    return NULL;
}

/* The model's ledger is "0.0" (the root's first call): its action_calls
 * and action_results are the tool calls. */
static int visit(const pl_step *s, void *user)
{
    tally *t = user;
    const char *id = pl_step_id(s);
    pl_step_type type = pl_step_type_of(s);
    if (type == PL_STEP_SUSPEND)
        t->suspends++;
    if (type == PL_STEP_RESUME)
        t->resumes++;
    if (strncmp(id, "0.0:", 4) != 0)
        return 0;
    const char *tool = NULL;
    if (type == PL_STEP_ACTION_CALL) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                          "policy");
        tool = cJSON_IsString(p) ? p->valuestring : NULL;
    } else if (type == PL_STEP_ACTION_RESULT) {
        tool = pl_step_actor(s);
        if (pl_step_is_error(s))
            t->errors++;
    } else {
        return 0;
    }
    unsigned *n = tool ? slot(t, tool, type == PL_STEP_ACTION_RESULT) : NULL;
    if (n)
        (*n)++;
    else
        t->unknown++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: agent-check STORE PLUGIN RUN\n");
        return 2;
    }
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_run_info *info = NULL;
    pl_steps *root = NULL;
    tally t = {{"calculator", "read_file", "http_get", "search_notes",
                "ask_human", "fs.read_text_file"},
               {0},
               {0},
               6,
               0,
               0,
               0,
               0};
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    int st;
    if ((st = pl_registry_new(&reg)) || (st = pl_plugin_load(reg, argv[2])) ||
        (st = pl_engine_open(&e, argv[1], reg, NULL)) ||
        (st = pl_run_get(&info, e, argv[3])))
        goto fail;
    printf("status %s\n", pl_run_status_name(info->status));
    st = pl_run_verify(e, argv[3]);
    printf("verify %s\n", st ? pl_errmsg() : "ok");
    if ((st = pl_llm_run_tokens(&tok, e, argv[3])) ||
        (st = pl_run_walk(e, argv[3], visit, &t)) ||
        (st = pl_run_ledger(&root, e, argv[3], "0")))
        goto fail;
    printf("exchanges %llu\n", (unsigned long long)tok.exchanges);
    for (unsigned i = 0; i < t.n; i++)
        printf("calls %s %u\nresults %s %u\n", t.name[i], t.calls[i], t.name[i],
               t.results[i]);
    printf("tool_errors %u\nother_calls %u\nsuspends %u\nresumes %u\n",
           t.errors, t.unknown, t.suspends, t.resumes);
    const cJSON *answer = NULL;
    size_t n = pl_steps_count(root);
    if (info->status == PL_RUN_COMPLETED && n)
        answer = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(pl_steps_at(root, n - 1)), "answer");
    printf("answer %s\n", cJSON_IsString(answer) ? answer->valuestring : "-");
    st = 0;
    goto done;
fail:
    fprintf(stderr, "agent-check: %s (%s)\n", pl_errmsg(), pl_status_name(st));
done:
    pl_steps_free(root);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
    return st ? 1 : 0;
}
