/*
 * agent.c -- the research-and-approve agent's policies.
 *
 * The root asks the model (under loop + invoke_action, so each tool call the
 * model makes is executed and recorded before the next turn), then asks a
 * human to approve the model's answer.  The human's answer decides the
 * result: {"approved": true} publishes the answer, anything else withholds
 * it.  A crash at any point is continued from the ledger: no model call,
 * tool call or approval is made twice.
 *
 * With "approval_timeout_ms": N in the root's payload, the approval is
 * timed: the root tells the approver (notify_approver, a recorded call),
 * then waits up to N ms for an "approval" event (pl_run_signal()), parked
 * in the store meanwhile.  An answer in time decides as above; none in
 * time escalates (escalate, a recorded call) and the run ends with the
 * answer withheld and "escalated": true.
 *
 * When the registry holds the reference filesystem MCP server's tools as
 * "fs.*" (agent-demo --mcp fs=...), the model reads files with
 * fs.read_text_file, each read a tools/call to that server, recorded like
 * any call, instead of the built-in read_file.
 *
 * The model's tool calls go through the tool adapter: paginate reads every
 * page of a tool that has pages (search_notes), each page a recorded call,
 * and observe shows the model a normalised observation of a search, not
 * its raw pages; both stay in the ledger.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "agent.h"

static const char *const model_tools[] = {"search_notes", "calculator",
                                          "read_file", "http_get", AGENT_HUMAN};
/* The same, with the files read through the reference filesystem MCP
 * server (its tools registered as "fs.*"). */
static const char *const mcp_model_tools[] = {"search_notes", "calculator",
                                              AGENT_MCP_READ, AGENT_MCP_ROOTS,
                                              "http_get",     AGENT_HUMAN};

/* The files search_notes reads, and the matches on one of its pages. */
static const char *const note_files[] = {"fleet.md", "rates.json"};
#define NOTES_PER_PAGE 2
#define NOTES_MAX_BYTES 65536

/* The text of a data file (at most NOTES_MAX_BYTES), or NULL. */
static char *read_note(const pl_sandbox *data, const char *name)
{
    int fd = -1;
    if (pl_sandbox_open_file(&fd, data, name, strlen(name), O_RDONLY, 0))
        return NULL;
    char *buf = malloc(NOTES_MAX_BYTES + 1);
    size_t n = 0;
    ssize_t got = 0;
    while (buf && n < NOTES_MAX_BYTES &&
           (got = read(fd, buf + n, NOTES_MAX_BYTES - n)) > 0)
        n += (size_t)got;
    close(fd);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/*
 * search_notes: {"query": q, "page_token": "pN"} -> {"query", "matches":
 * [{"file", "line", "text"}], "total": all matches, "next_token": "pN+1"
 * while more follow}: the lines of the data files that hold q (case
 * ignored), NOTES_PER_PAGE a page.
 */
static int search_notes(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                        void *user)
{
    (void)ctx;
    const pl_sandbox *data = user;
    const char *q = NULL, *tok = NULL;
    if (pl_json_unpack(a->payload, "{s:s, s?s !}", "query", &q, "page_token",
                       &tok) ||
        !*q)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "search_notes takes {\"query\": a "
                                  "non-empty string, \"page_token\"}");
    /* pages are p1, p2, ...: the first match of the largest one and the
     * next page's number stay within a long */
    char *end = NULL;
    long page = 1;
    if (tok) {
        errno = 0;
        page = tok[0] == 'p' && isdigit((unsigned char)tok[1])
                   ? strtol(tok + 1, &end, 10)
                   : 0;
        if (errno || !end || *end || page > LONG_MAX / NOTES_PER_PAGE - 1)
            page = 0;
    }
    if (page < 1)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "bad page_token (pages are p1, p2, ...)");
    cJSON *r = NULL, *matches = NULL;
    int st = pl_json_pack(&r, "{s:s, s:[]}", "query", q, "matches");
    matches = r ? cJSON_GetObjectItemCaseSensitive(r, "matches") : NULL;
    long total = 0, first = (page - 1) * NOTES_PER_PAGE;
    size_t qlen = strlen(q);
    for (size_t f = 0; !st && f < sizeof note_files / sizeof *note_files; f++) {
        char *text = read_note(data, note_files[f]);
        int line = 0;
        for (char *l = text, *next; l && *l; l = next) {
            next = strchr(l, '\n');
            if (next)
                *next++ = '\0';
            else
                next = l + strlen(l);
            line++;
            bool hit = false;
            for (const char *p = l; !hit && strlen(p) >= qlen; p++)
                hit = strncasecmp(p, q, qlen) == 0;
            if (!hit || total++ < first || total > first + NOTES_PER_PAGE)
                continue;
            cJSON *m = NULL;
            if ((st = pl_json_pack(&m, "{s:s, s:i, s:s}", "file", note_files[f],
                                   "line", line, "text", l)))
                break;
            cJSON_AddItemToArray(matches, m);
        }
        free(text);
    }
    char next_tok[32];
    snprintf(next_tok, sizeof next_tok, "p%ld", page + 1);
    if (!st && !(cJSON_AddNumberToObject(r, "total", (double)total) &&
                 (total <= first + NOTES_PER_PAGE ||
                  cJSON_AddStringToObject(r, "next_token", next_tok))))
        st = PL_ENOMEM;
    if (!st)
        st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* The adapter on every tool call of the model: observe (search_notes),
 * then paginate (a tool without pages passes through). */
static const pl_paginate_options paginate_opts = {PL_PAGINATE_OPTIONS_VERSION,
                                                  "/next_token",
                                                  "/page_token",
                                                  "/matches",
                                                  10,
                                                  0,
                                                  NULL,
                                                  0};
static const char *const observed[] = {"search_notes"};
static const pl_observe_options observe_opts = {
    PL_OBSERVE_OPTIONS_VERSION, NULL, NULL, observed, 1, NULL, 0};

static const char system_prompt[] =
    "You are a careful research assistant.  Answer the user's question "
    "from the data you can reach: search_notes finds lines in the notes, "
    "read_file reads files of the data directory (start with fleet.md), "
    "http_get fetches URLs, calculator "
    "does arithmetic.  Call ask_human only for a question the data cannot "
    "answer.  Finish with a short answer that names the figures you used; "
    "a human reviews it before it is published.";

/* notify_approver and escalate: the messages of the timed approval.  Here a
 * line on stdout; a mail or a page in real life.  Each is a recorded call,
 * so a replay does not send it again. */
static int message(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    const char *to = user, *q = NULL;
    if (pl_json_unpack(a->payload, "{s:s}", "question", &q))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "the payload needs a \"question\" string");
    printf("%s: %s about \"%s\"\n", a->policy, to, q);
    fflush(stdout);
    return pl_steps_add_resultf(out, "{s:s}", "sent_to", to);
}

/* The timed approval: tell the approver, then wait up to @p ms for the
 * answer.  PL_ETIMEDOUT when none came. */
static int timed_approval(cJSON **answer, pl_ctx *ctx, const cJSON *prompt,
                          int64_t ms)
{
    int st = pl_ctx_invoke(NULL, ctx, AGENT_NOTIFY, prompt);
    return st ? st : pl_ctx_wait_event(answer, ctx, AGENT_APPROVAL_EVENT, ms);
}

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
    const cJSON *wait = cJSON_GetObjectItemCaseSensitive(a->payload,
                                                         "approval_timeout_ms");
    if (wait && (!cJSON_IsNumber(wait) || wait->valuedouble < 0 ||
                 wait->valuedouble > 1e12))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "\"approval_timeout_ms\" is a number of "
                                  "milliseconds, 0 to 1e12");
    cJSON *text = NULL, *prompt = NULL, *answer = NULL, *esc = NULL;
    pl_step *res = NULL;
    int st = pl_json_pack(&text, "{s:s}", "text", q->valuestring);
    if (st)
        return st;
    pl_action call = PL_ACTION_INIT;
    call.policy = AGENT_MODEL_POLICY;
    call.payload = text;
    call.actions = model_tools;
    call.n_actions = sizeof model_tools / sizeof *model_tools;
    if (pl_registry_find(pl_engine_registry(pl_ctx_engine(ctx)),
                         AGENT_MCP_READ)) {
        call.actions = mcp_model_tools;
        call.n_actions = sizeof mcp_model_tools / sizeof *mcp_model_tools;
    }
    pl_decorator per_call[2], d[2];
    if (!(st = pl_decorator_loop(&d[0], AGENT_MAX_TURNS)) &&
        !(st = pl_decorator_observe(&per_call[0], &observe_opts)) &&
        !(st = pl_decorator_paginate(&per_call[1], &paginate_opts)) &&
        !(st = pl_decorator_invoke_action_with(&d[1], per_call, 2)))
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
        if (wait)
            st = timed_approval(&answer, ctx, prompt,
                                (int64_t)wait->valuedouble);
        else
            st = pl_ctx_invoke(&answer, ctx, AGENT_HUMAN, prompt);
        if (st == PL_ETIMEDOUT) /* recorded: a replay escalates here too */
            break;
        if (st)
            goto done; /* PL_ESUSPENDED first: the run waits for the human */
        ok = cJSON_GetObjectItemCaseSensitive(answer, "approved");
    }
    const cJSON *comment = cJSON_GetObjectItemCaseSensitive(answer, "comment");
    if (st == PL_ETIMEDOUT) {
        if (!(st = pl_ctx_invokef(&esc, ctx, AGENT_ESCALATE, "{s:s, s:s, s:I}",
                                  "question", q->valuestring, "draft",
                                  draft->valuestring, "waited_ms",
                                  (int64_t)wait->valuedouble)))
            st = pl_steps_add_resultf(out, "{s:s, s:b, s:b, s:s, s:O}",
                                      "question", q->valuestring, "approved",
                                      false, "escalated", true, "withheld",
                                      draft->valuestring, "escalation", esc);
    } else if (!cJSON_IsBool(ok)) {
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
    cJSON_Delete(esc);
    cJSON_Delete(answer);
    cJSON_Delete(prompt);
    cJSON_Delete(text);
    return st;
}

int agent_register(pl_registry *reg, const char *model_url,
                   const pl_tools *tools, const pl_sandbox *data,
                   pl_llm_delta_fn on_delta)
{
    pl_llm_options lo = PL_LLM_OPTIONS_INIT;
    lo.description = "Researches a question with the tools.";
    lo.temperature = 0;
    lo.on_delta = on_delta;
    int st = pl_llm_register(reg, AGENT_MODEL_POLICY, model_url, system_prompt,
                             &lo);
    if (!st)
        st = pl_tools_register(reg, tools);
    if (!st)
        st = pl_registry_add_human(reg, AGENT_HUMAN);
    if (st)
        return st;
    pl_policy_def def = PL_POLICY_DEF_INIT;
    def.name = AGENT_NOTIFY;
    def.fn = message;
    def.user = "the approver";
    def.description = "Tell the approver an answer awaits their approval.";
    if ((st = pl_registry_add(reg, &def)))
        return st;
    def.name = AGENT_ESCALATE;
    def.user = "the approver's manager";
    def.description = "Escalate an approval that did not come in time.";
    if ((st = pl_registry_add(reg, &def)))
        return st;
    def = (pl_policy_def)PL_POLICY_DEF_INIT;
    def.name = "search_notes";
    def.fn = search_notes;
    def.user = (void *)data;
    def.description = "Search the data directory's notes for a word or "
                      "phrase; returns the matching lines.";
    def.input_schema = "{\"type\":\"object\",\"properties\":{\"query\":"
                       "{\"type\":\"string\",\"minLength\":1}},"
                       "\"required\":[\"query\"]}";
    if ((st = pl_registry_add(reg, &def)))
        return st;
    def = (pl_policy_def)PL_POLICY_DEF_INIT;
    def.name = AGENT_ROOT;
    def.fn = agent;
    def.description = "Research a question, then have a human approve the "
                      "answer.";
    def.input_schema = "{\"type\":\"object\",\"properties\":{\"question\":"
                       "{\"type\":\"string\",\"minLength\":1},"
                       "\"approval_timeout_ms\":{\"type\":\"integer\","
                       "\"minimum\":0}},\"required\":[\"question\"]}";
    return pl_registry_add(reg, &def);
}
