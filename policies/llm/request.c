/*
 * request.c -- the ledger as a conversation, and the conversation as a
 * provider's request body.
 *
 * The conversation is rebuilt from the ledger on every model call, so the
 * recorded exchange never needs to keep the request: the same ledger gives
 * the same request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"

static cJSON *message(cJSON *msgs, const char *role, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(msgs, m))
        return cJSON_Delete(m), NULL;
    if (!cJSON_AddStringToObject(m, "role", role))
        return NULL;
    if (content && !cJSON_AddStringToObject(m, "content", content))
        return NULL;
    return m;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Call ids waiting for their results, oldest first. */
typedef struct pending {
    const char **ids;
    size_t n, head, cap;
} pending;

static int pending_push(pending *p, const char *id)
{
    const char **v = pl__grow((void *)p->ids, &p->cap, p->n, sizeof *v, 8);
    if (!v)
        return PL_ENOMEM;
    p->ids = v;
    p->ids[p->n++] = id;
    return PL_OK;
}

/* An action_call step as the assistant's tool call. */
static int add_call(cJSON *msgs, cJSON **open, const pl_step *s, pending *p,
                    char *idbuf, size_t idcap)
{
    const cJSON *pay = pl_step_payload(s);
    const char *name = str_of(pay, "policy");
    const char *id = str_of(pay, "call_id");
    if (!pay || !name)
        return PL_OK; /* a malformed call got an error result: no tool call */
    if (!id) {
        snprintf(idbuf, idcap, "call_%s", pl_step_id(s));
        id = idbuf;
    }
    if (!*open && !(*open = message(msgs, "assistant", NULL)))
        return PL_ENOMEM;
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(*open, "tool_calls");
    if (!calls && !(calls = cJSON_AddArrayToObject(*open, "tool_calls")))
        return PL_ENOMEM;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(pay, "payload");
    char *text = args ? cJSON_PrintUnformatted(args) : pl__strdup("{}");
    cJSON *c = cJSON_CreateObject();
    int st = PL_ENOMEM;
    if (text && c && cJSON_AddItemToArray(calls, c)) {
        st = cJSON_AddStringToObject(c, "id", id) &&
                     cJSON_AddStringToObject(c, "name", name) &&
                     cJSON_AddStringToObject(c, "arguments", text)
                 ? PL_OK
                 : PL_ENOMEM;
        c = NULL;
    }
    cJSON_Delete(c);
    free(text);
    if (!st) {
        /* the id now lives in the message: point the queue at that copy */
        cJSON *last = cJSON_GetArrayItem(calls, cJSON_GetArraySize(calls) - 1);
        st = pending_push(p, cJSON_GetObjectItemCaseSensitive(last, "id")
                                 ->valuestring);
    }
    return st;
}

int pl__llm_messages(cJSON **out, const pl__llm *m, const pl_action *action,
                     const pl_steps *ledger)
{
    *out = NULL;
    cJSON *msgs = cJSON_CreateArray();
    pending p = {0};
    int st = msgs ? PL_OK : PL_ENOMEM;
    if (!st && m->system_prompt && !message(msgs, "system", m->system_prompt))
        st = PL_ENOMEM;
    const cJSON *pay = action->payload;
    const char *text = str_of(pay, "text");
    if (!st && text && !message(msgs, "user", text))
        st = PL_ENOMEM;
    if (!st && !text && pay && pay->child) {
        char *j = cJSON_PrintUnformatted(pay);
        if (!j || !message(msgs, "user", j))
            st = PL_ENOMEM;
        free(j);
    }
    cJSON *open = NULL; /* the assistant message tool calls join */
    for (size_t i = 0; !st && i < pl_steps_count(ledger); i++) {
        const pl_step *s = pl_steps_at(ledger, i);
        const cJSON *sp = pl_step_payload(s);
        if (!sp) {
            st = PL_ENOMEM;
            break;
        }
        char idbuf[64];
        switch (pl_step_type_of(s)) {
        case PL_STEP_TEXT: {
            const char *t = str_of(sp, "text");
            bool mine = strcmp(pl_step_actor(s), m->name) == 0 &&
                        !cJSON_IsTrue(
                            cJSON_GetObjectItemCaseSensitive(sp, "reprompt"));
            char *j = NULL;
            if (!t)
                t = j = cJSON_PrintUnformatted(sp);
            cJSON *msg = t ? message(msgs, mine ? "assistant" : "user", t)
                           : NULL;
            free(j);
            if (!msg)
                st = PL_ENOMEM;
            open = mine ? msg : NULL;
            break;
        }
        case PL_STEP_ACTION_CALL:
            st = add_call(msgs, &open, s, &p, idbuf, sizeof idbuf);
            break;
        case PL_STEP_ACTION_RESULT: {
            open = NULL;
            if (p.head >= p.n)
                break; /* no call of the model's: nothing to bind to */
            char *j = cJSON_PrintUnformatted(sp);
            cJSON *msg = j ? message(msgs, "tool", j) : NULL;
            if (!msg ||
                !cJSON_AddStringToObject(msg, "tool_call_id", p.ids[p.head++]))
                st = PL_ENOMEM;
            free(j);
            break;
        }
        default: /* exchanges, suspends, errors: not the conversation */ break;
        }
    }
    free((void *)p.ids);
    if (st) {
        cJSON_Delete(msgs);
        return pl__err(st, "out of memory");
    }
    *out = msgs;
    return PL_OK;
}

/* A neutral message as an OpenAI chat message. */
static cJSON *openai_message(const cJSON *n)
{
    cJSON *o = cJSON_CreateObject();
    const char *role = str_of(n, "role");
    const char *content = str_of(n, "content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(n, "tool_calls");
    bool ok = o && cJSON_AddStringToObject(o, "role", role);
    if (ok)
        ok = content ? cJSON_AddStringToObject(o, "content", content) != NULL
                     : cJSON_AddNullToObject(o, "content") != NULL;
    if (ok && str_of(n, "tool_call_id"))
        ok = cJSON_AddStringToObject(o, "tool_call_id",
                                     str_of(n, "tool_call_id")) != NULL;
    if (ok && calls) {
        cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
        const cJSON *c;
        ok = arr != NULL;
        cJSON_ArrayForEach(c, calls)
        {
            cJSON *tc = NULL;
            if (ok && pl_json_pack(&tc, "{s:s, s:s, s:{s:s, s:s}}", "id",
                                   str_of(c, "id"), "type", "function",
                                   "function", "name", str_of(c, "name"),
                                   "arguments", str_of(c, "arguments")))
                ok = false;
            if (ok && !cJSON_AddItemToArray(arr, tc)) {
                cJSON_Delete(tc);
                ok = false;
            }
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int pl__llm_request_body(char **out, const pl__llm *m, const cJSON *messages,
                         const pl__llm_tool *tools, size_t n_tools)
{
    *out = NULL;
    cJSON *b = cJSON_CreateObject();
    bool ok = b && cJSON_AddStringToObject(b, "model", m->url.model);
    cJSON *msgs = ok ? cJSON_AddArrayToObject(b, "messages") : NULL;
    ok = msgs != NULL;
    const cJSON *n;
    cJSON_ArrayForEach(n, messages)
    {
        cJSON *o = ok ? openai_message(n) : NULL;
        if (!o || !cJSON_AddItemToArray(msgs, o)) {
            cJSON_Delete(o);
            ok = false;
        }
    }
    if (ok && n_tools) {
        cJSON *arr = cJSON_AddArrayToObject(b, "tools");
        ok = arr != NULL;
        for (size_t i = 0; ok && i < n_tools; i++) {
            cJSON *t = NULL;
            if (pl_json_pack(&t, "{s:s, s:{s:s, s:s*, s:O}}", "type",
                             "function", "function", "name", tools[i].name,
                             "description", tools[i].description, "parameters",
                             tools[i].parameters) ||
                !cJSON_AddItemToArray(arr, t)) {
                cJSON_Delete(t);
                ok = false;
            }
        }
    }
    if (ok && m->o.temperature >= 0)
        ok = cJSON_AddNumberToObject(b, "temperature", m->o.temperature);
    if (ok && m->o.max_tokens)
        ok = cJSON_AddNumberToObject(b, "max_tokens", m->o.max_tokens);
    if (ok && m->output_schema && !n_tools) {
        cJSON *rf = NULL;
        ok = !pl_json_pack(&rf, "{s:s, s:{s:s, s:O}}", "type", "json_schema",
                           "json_schema", "name", "answer", "schema",
                           m->output_schema) &&
             cJSON_AddItemToObject(b, "response_format", rf);
    }
    char *text = ok ? cJSON_PrintUnformatted(b) : NULL;
    cJSON_Delete(b);
    if (!text)
        return pl__err(PL_ENOMEM, "out of memory");
    *out = text;
    return PL_OK;
}
