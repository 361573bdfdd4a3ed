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

/* A tool call waiting for its result (pl__llm_conv.pending). */
static int pending_push(pl__llm_conv *cv, const cJSON *call)
{
    const cJSON **v = pl__grow((void *)cv->calls, &cv->cap, cv->n, sizeof *v,
                               8);
    if (!v)
        return PL_ENOMEM;
    cv->calls = v;
    cv->calls[cv->n++] = call;
    return PL_OK;
}

/* An action_call step as the assistant's tool call. */
static int add_call(pl__llm_conv *cv, const pl_step *s)
{
    char idbuf[64];
    const cJSON *pay = pl_step_payload(s);
    const char *name = str_of(pay, "policy");
    const char *id = str_of(pay, "call_id");
    if (!pay || !name)
        return PL_OK; /* a malformed call got an error result: no tool call */
    if (!id) {
        snprintf(idbuf, sizeof idbuf, "call_%s", pl_step_id(s));
        id = idbuf;
    }
    if (!cv->open && !(cv->open = message(cv->msgs, "assistant", NULL)))
        return PL_ENOMEM;
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(cv->open, "tool_calls");
    if (!calls && !(calls = cJSON_AddArrayToObject(cv->open, "tool_calls")))
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
        if (!st) /* the call lives in the message: the queue points at it */
            st = pending_push(cv, c);
        c = NULL;
    }
    cJSON_Delete(c);
    free(text);
    return st;
}

/* The most bytes of one tool result sent, by default. */
#define DEFAULT_TOOL_RESULT 512000

/*
 * What the model is sent for the tool's result step @p s: its observation
 * when it has one (pl_decorator_observe()), else the result, as compact
 * JSON; over @p cap bytes, the shape pl_decorator_cap() gives, within the
 * cap (with a cap smaller than its note, an empty preview), an error
 * result's an error of its code as cap's is.  Caller frees; NULL when out
 * of memory.
 */
static char *tool_content(const pl_step *s, size_t cap)
{
    const cJSON *r = pl_step_payload(s);
    bool err = pl_step_is_error(s);
    const char *code = pl_step_error_code(s);
    const cJSON *obs = cJSON_GetObjectItemCaseSensitive(r, "observation");
    if (cJSON_IsObject(obs) && cJSON_GetObjectItemCaseSensitive(r, "raw"))
        r = obs;
    char *text = cJSON_PrintUnformatted(r);
    size_t len = text ? strlen(text) : 0;
    if (!text || len <= cap)
        return text;
    char note[160];
    snprintf(note, sizeof note,
             "truncated: the tool's result is %zu bytes of JSON, the most "
             "sent is %zu; the ledger keeps it whole",
             len, cap);
    char *out = NULL;
    for (size_t keep = pl__llm_char_start(text, cap);;) {
        char saved = text[keep];
        text[keep] = '\0';
        cJSON *c = NULL;
        int st = pl_json_pack(&c, "{s:b, s:I, s:I, s:s, s:s}", "truncated", 1,
                              "original_bytes", (int64_t)len, "max_bytes",
                              (int64_t)cap, "note", note, "preview", text);
        if (!st && err &&
            (!cJSON_AddTrueToObject(c, "error") ||
             (code && !cJSON_AddStringToObject(c, "code", code)) ||
             !cJSON_AddStringToObject(c, "message",
                                      "the error result was truncated")))
            st = PL_ENOMEM;
        text[keep] = saved;
        free(out);
        out = st ? NULL : cJSON_PrintUnformatted(c);
        cJSON_Delete(c);
        size_t olen = out ? strlen(out) : 0;
        if (!out || olen <= cap || keep == 0)
            break;
        keep = pl__llm_char_start(text,
                                  olen - cap < keep ? keep - (olen - cap) : 0);
    }
    free(text);
    return out;
}

int pl__llm_conv_start(pl__llm_conv *cv, const pl__llm *m,
                       const pl_action *action, bool with_system)
{
    memset(cv, 0, sizeof *cv);
    cv->msgs = cJSON_CreateArray();
    int st = cv->msgs ? PL_OK : PL_ENOMEM;
    if (!st && with_system && m->system_prompt &&
        !message(cv->msgs, "system", m->system_prompt))
        st = PL_ENOMEM;
    const cJSON *pay = action->payload;
    const char *text = str_of(pay, "text");
    if (!st && text && !message(cv->msgs, "user", text))
        st = PL_ENOMEM;
    if (!st && !text && pay && pay->child) {
        char *j = cJSON_PrintUnformatted(pay);
        if (!j || !message(cv->msgs, "user", j))
            st = PL_ENOMEM;
        free(j);
    }
    if (st) {
        pl__llm_conv_free(cv);
        return pl__err(st, "out of memory");
    }
    return PL_OK;
}

void pl__llm_conv_free(pl__llm_conv *cv)
{
    cJSON_Delete(cv->msgs);
    free((void *)cv->calls);
    memset(cv, 0, sizeof *cv);
}

int pl__llm_conv_step(pl__llm_conv *cv, const pl__llm *m, const pl_step *s)
{
    pl_step_type type = pl_step_type_of(s);
    if (type != PL_STEP_TEXT && type != PL_STEP_ACTION_CALL &&
        type != PL_STEP_ACTION_RESULT)
        return PL_OK; /* exchanges, suspends, errors: not the conversation */
    const cJSON *sp = pl_step_payload(s);
    int st = sp ? PL_OK : PL_ENOMEM;
    switch (sp ? type : PL_STEP_ERROR) {
    case PL_STEP_TEXT: {
        const char *t = str_of(sp, "text");
        bool mine = strcmp(pl_step_actor(s), m->name) == 0 &&
                    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sp,
                                                                   "reprompt"));
        char *j = NULL;
        if (!t)
            t = j = cJSON_PrintUnformatted(sp);
        cJSON *msg = t ? message(cv->msgs, mine ? "assistant" : "user", t)
                       : NULL;
        free(j);
        if (!msg)
            st = PL_ENOMEM;
        cv->open = mine ? msg : NULL;
        break;
    }
    case PL_STEP_ACTION_CALL: st = add_call(cv, s); break;
    case PL_STEP_ACTION_RESULT: {
        cv->open = NULL;
        if (cv->head >= cv->n)
            break; /* no call of the model's: nothing to bind to */
        const cJSON *call = cv->calls[cv->head++];
        char *j = tool_content(s, m->o.max_tool_result_bytes
                                      ? m->o.max_tool_result_bytes
                                      : DEFAULT_TOOL_RESULT);
        cJSON *msg = j ? message(cv->msgs, "tool", j) : NULL;
        if (!msg ||
            !cJSON_AddStringToObject(msg, "tool_call_id", str_of(call, "id")) ||
            !cJSON_AddStringToObject(msg, "name", str_of(call, "name")) ||
            (pl_step_is_error(s) && !cJSON_AddTrueToObject(msg, "error")))
            st = PL_ENOMEM;
        free(j);
        break;
    }
    default: break;
    }
    return st ? pl__err(st, "out of memory") : PL_OK;
}

/* The name the provider sees for a tool the conversation names (names.c):
 * a tool call of an earlier turn, or the tool a result answers. */
static const char *wire(char buf[PL__LLM_WIRE_CAP], const pl__llm *m,
                        const pl__llm_tool *tools, size_t n_tools,
                        const char *name)
{
    return pl__llm_wire_of(buf, m->url.provider, tools, n_tools, name);
}

/* A neutral message as an OpenAI chat message. */
static cJSON *openai_message(const cJSON *n, const pl__llm *m,
                             const pl__llm_tool *tools, size_t n_tools)
{
    char wb[PL__LLM_WIRE_CAP];
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
            if (ok &&
                pl_json_pack(&tc, "{s:s, s:s, s:{s:s, s:s}}", "id",
                             str_of(c, "id"), "type", "function", "function",
                             "name",
                             wire(wb, m, tools, n_tools, str_of(c, "name")),
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

static cJSON *openai_body(const pl__llm *m, const cJSON *messages,
                          const pl__llm_tool *tools, size_t n_tools)
{
    cJSON *b = cJSON_CreateObject();
    bool ok = b && cJSON_AddStringToObject(b, "model", m->url.model);
    cJSON *msgs = ok ? cJSON_AddArrayToObject(b, "messages") : NULL;
    ok = msgs != NULL;
    const cJSON *n;
    cJSON_ArrayForEach(n, messages)
    {
        cJSON *o = ok ? openai_message(n, m, tools, n_tools) : NULL;
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
                             "function", "function", "name", tools[i].wire,
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
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

/* A tool call's arguments text as an object ({} when it is not one: the
 * call was checked when it was made, so this is only a stored oddity). */
static cJSON *args_object(const cJSON *call)
{
    const char *text = str_of(call, "arguments") ? str_of(call, "arguments")
                                                 : "{}";
    cJSON *o = NULL; /* not one cJSON would cut at a NUL */
    pl_json_parse(&o, text, strlen(text));
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
    }
    return o;
}

/* Anthropic's messages API: the system prompt apart, assistant content as
 * text and tool_use blocks, tool results as tool_result blocks in the
 * user's turn. */
static cJSON *anthropic_body(const pl__llm *m, const cJSON *messages,
                             const pl__llm_tool *tools, size_t n_tools)
{
    cJSON *b = cJSON_CreateObject();
    bool ok = b && cJSON_AddStringToObject(b, "model", m->url.model) &&
              cJSON_AddNumberToObject(b, "max_tokens",
                                      m->o.max_tokens ? m->o.max_tokens : 1024);
    cJSON *msgs = ok ? cJSON_AddArrayToObject(b, "messages") : NULL;
    ok = msgs != NULL;
    cJSON *results = NULL; /* the user turn tool results join */
    const cJSON *n;
    cJSON_ArrayForEach(n, messages)
    {
        const char *role = str_of(n, "role");
        const char *content = str_of(n, "content");
        if (!ok || !role)
            break;
        if (strcmp(role, "system") == 0) {
            ok = cJSON_AddStringToObject(b, "system", content) != NULL;
            continue;
        }
        if (strcmp(role, "tool") == 0) {
            cJSON *blk = NULL;
            if (!results) {
                cJSON *u = message(msgs, "user", NULL);
                results = u ? cJSON_AddArrayToObject(u, "content") : NULL;
            }
            ok = results &&
                 !pl_json_pack(&blk, "{s:s, s:s, s:s}", "type", "tool_result",
                               "tool_use_id", str_of(n, "tool_call_id"),
                               "content", content) &&
                 cJSON_AddItemToArray(results, blk);
            if (ok &&
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "error")))
                ok = cJSON_AddTrueToObject(blk, "is_error") != NULL;
            continue;
        }
        results = NULL;
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(n, "tool_calls");
        if (!calls) {
            ok = message(msgs, role, content) != NULL;
            continue;
        }
        cJSON *a = message(msgs, "assistant", NULL);
        cJSON *blocks = a ? cJSON_AddArrayToObject(a, "content") : NULL;
        cJSON *blk = NULL;
        ok = blocks != NULL;
        if (ok && content)
            ok = !pl_json_pack(&blk, "{s:s, s:s}", "type", "text", "text",
                               content) &&
                 cJSON_AddItemToArray(blocks, blk);
        const cJSON *c;
        char wb[PL__LLM_WIRE_CAP];
        cJSON_ArrayForEach(c, calls)
        {
            blk = NULL;
            if (ok)
                ok = !pl_json_pack(&blk, "{s:s, s:s, s:s, s:o}", "type",
                                   "tool_use", "id", str_of(c, "id"), "name",
                                   wire(wb, m, tools, n_tools,
                                        str_of(c, "name")),
                                   "input", args_object(c)) &&
                     cJSON_AddItemToArray(blocks, blk);
        }
    }
    if (ok && n_tools) {
        cJSON *arr = cJSON_AddArrayToObject(b, "tools");
        ok = arr != NULL;
        for (size_t i = 0; ok && i < n_tools; i++) {
            cJSON *t = NULL;
            ok = !pl_json_pack(&t, "{s:s, s:s*, s:O}", "name", tools[i].wire,
                               "description", tools[i].description,
                               "input_schema", tools[i].parameters) &&
                 cJSON_AddItemToArray(arr, t);
        }
    }
    /* the output schema's tool alone (no tools offered): the answer is
     * its call, as Anthropic's API gives structured output */
    if (ok && n_tools == 1 && tools[0].submit) {
        cJSON *tc = NULL;
        ok = !pl_json_pack(&tc, "{s:s, s:s}", "type", "tool", "name",
                           tools[0].wire) &&
             cJSON_AddItemToObject(b, "tool_choice", tc);
        if (!ok)
            cJSON_Delete(tc);
    }
    if (ok && m->o.temperature >= 0)
        ok = cJSON_AddNumberToObject(b, "temperature", m->o.temperature);
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

/* Ollama's /api/chat: OpenAI's shape, arguments as objects, no stream. */
static cJSON *ollama_body(const pl__llm *m, const cJSON *messages,
                          const pl__llm_tool *tools, size_t n_tools)
{
    cJSON *b = openai_body(m, messages, tools, n_tools);
    if (!b)
        return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(b, "temperature");
    cJSON_DeleteItemFromObjectCaseSensitive(b, "max_tokens");
    cJSON_DeleteItemFromObjectCaseSensitive(b, "response_format");
    bool ok = cJSON_AddFalseToObject(b, "stream") != NULL;
    cJSON *msg;
    size_t i = 0;
    cJSON_ArrayForEach(msg, cJSON_GetObjectItemCaseSensitive(b, "messages"))
    {
        const cJSON *n = cJSON_GetArrayItem(messages, (int)i++);
        cJSON *tc;
        cJSON_ArrayForEach(tc,
                           cJSON_GetObjectItemCaseSensitive(msg, "tool_calls"))
        {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            cJSON *obj = args_object(fn);
            ok = ok && obj &&
                 cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
        }
        char wb[PL__LLM_WIRE_CAP];
        if (ok && str_of(msg, "tool_call_id"))
            ok = cJSON_AddStringToObject(msg, "tool_name",
                                         wire(wb, m, tools, n_tools,
                                              str_of(n, "name"))) != NULL;
    }
    cJSON *opts = ok ? cJSON_CreateObject() : NULL;
    if (opts && m->o.temperature >= 0)
        ok = cJSON_AddNumberToObject(opts, "temperature", m->o.temperature);
    if (opts && ok && m->o.max_tokens)
        ok = cJSON_AddNumberToObject(opts, "num_predict", m->o.max_tokens);
    if (opts && ok && opts->child) {
        ok = cJSON_AddItemToObject(b, "options", opts);
        if (ok)
            opts = NULL;
    }
    cJSON_Delete(opts);
    if (ok && m->output_schema && !n_tools)
        ok = cJSON_AddItemToObject(b, "format",
                                   cJSON_Duplicate(m->output_schema, 1));
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

/* A part {"text": t} appended to @p parts. */
static bool text_part(cJSON *parts, const char *t)
{
    cJSON *p = NULL;
    if (pl_json_pack(&p, "{s:s}", "text", t))
        return false;
    if (!cJSON_AddItemToArray(parts, p)) {
        cJSON_Delete(p);
        return false;
    }
    return true;
}

/* A content {"role": role, "parts": []} appended to @p contents. */
static cJSON *content_of(cJSON *contents, const char *role)
{
    cJSON *c = cJSON_CreateObject();
    if (!c || !cJSON_AddItemToArray(contents, c)) {
        cJSON_Delete(c);
        return NULL;
    }
    if (!cJSON_AddStringToObject(c, "role", role))
        return NULL;
    return cJSON_AddArrayToObject(c, "parts");
}

/* Gemini's generateContent: contents of parts (text, functionCall,
 * functionResponse), the system prompt as systemInstruction. */
static cJSON *gemini_body(const pl__llm *m, const cJSON *messages,
                          const pl__llm_tool *tools, size_t n_tools)
{
    cJSON *b = cJSON_CreateObject();
    cJSON *contents = b ? cJSON_AddArrayToObject(b, "contents") : NULL;
    bool ok = contents != NULL;
    cJSON *results = NULL; /* the user turn function responses join */
    char wb[PL__LLM_WIRE_CAP];
    const cJSON *n;
    cJSON_ArrayForEach(n, messages)
    {
        const char *role = str_of(n, "role");
        const char *content = str_of(n, "content");
        if (!ok || !role)
            break;
        if (strcmp(role, "system") == 0) {
            cJSON *si = cJSON_AddObjectToObject(b, "systemInstruction");
            cJSON *parts = si ? cJSON_AddArrayToObject(si, "parts") : NULL;
            ok = parts && text_part(parts, content);
            continue;
        }
        if (strcmp(role, "tool") == 0) {
            if (!results)
                results = content_of(contents, "user");
            /* text cJSON would cut at a NUL goes as the text it is */
            cJSON *resp = NULL;
            pl_json_parse(&resp, content, strlen(content));
            if (!cJSON_IsObject(resp)) {
                cJSON_Delete(resp);
                resp = NULL;
                pl_json_pack(&resp, "{s:s}", "result", content);
            }
            cJSON *part = NULL;
            ok = results && resp &&
                 !pl_json_pack(&part, "{s:{s:s, s:o}}", "functionResponse",
                               "name",
                               wire(wb, m, tools, n_tools, str_of(n, "name")),
                               "response", resp) &&
                 cJSON_AddItemToArray(results, part);
            continue;
        }
        results = NULL;
        bool model = strcmp(role, "assistant") == 0;
        cJSON *parts = content_of(contents, model ? "model" : "user");
        ok = parts != NULL;
        if (ok && content)
            ok = text_part(parts, content);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(n, "tool_calls"))
        {
            cJSON *part = NULL;
            if (ok)
                ok = !pl_json_pack(&part, "{s:{s:s, s:o}}", "functionCall",
                                   "name",
                                   wire(wb, m, tools, n_tools,
                                        str_of(c, "name")),
                                   "args", args_object(c)) &&
                     cJSON_AddItemToArray(parts, part);
        }
    }
    if (ok && n_tools) {
        cJSON *decls = NULL, *t = NULL;
        ok = !pl_json_pack(&t, "[{s:[]}]", "functionDeclarations") &&
             cJSON_AddItemToObject(b, "tools", t);
        decls = ok ? cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(t, 0),
                                                      "functionDeclarations")
                   : NULL;
        for (size_t i = 0; ok && i < n_tools; i++) {
            cJSON *d = NULL;
            ok = !pl_json_pack(&d, "{s:s, s:s*, s:O}", "name", tools[i].wire,
                               "description", tools[i].description,
                               "parameters", tools[i].parameters) &&
                 cJSON_AddItemToArray(decls, d);
        }
    }
    cJSON *gc = ok ? cJSON_CreateObject() : NULL;
    if (gc && m->o.temperature >= 0)
        ok = cJSON_AddNumberToObject(gc, "temperature", m->o.temperature);
    if (gc && ok && m->o.max_tokens)
        ok = cJSON_AddNumberToObject(gc, "maxOutputTokens", m->o.max_tokens);
    if (gc && ok && m->output_schema && !n_tools)
        ok = cJSON_AddStringToObject(gc, "responseMimeType",
                                     "application/json") &&
             cJSON_AddItemToObject(gc, "responseSchema",
                                   cJSON_Duplicate(m->output_schema, 1));
    if (gc && ok && gc->child) {
        ok = cJSON_AddItemToObject(b, "generationConfig", gc);
        if (ok)
            gc = NULL;
    }
    cJSON_Delete(gc);
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

static cJSON *body_of(const pl__llm *m, const cJSON *messages,
                      const pl__llm_tool *tools, size_t n_tools)
{
    return m->url.provider == PL__LLM_ANTHROPIC
               ? anthropic_body(m, messages, tools, n_tools)
           : m->url.provider == PL__LLM_OLLAMA
               ? ollama_body(m, messages, tools, n_tools)
           : m->url.provider == PL__LLM_GEMINI
               ? gemini_body(m, messages, tools, n_tools)
               : openai_body(m, messages, tools, n_tools);
}

/* ------------------------------------------------------------------------ */
/* The body in parts                                                        */
/* ------------------------------------------------------------------------ */

bool pl__llm_system_apart(const pl__llm *m)
{
    return m->url.provider == PL__LLM_ANTHROPIC ||
           m->url.provider == PL__LLM_GEMINI;
}

bool pl__llm_joins_tool_results(const pl__llm *m)
{
    return m->url.provider == PL__LLM_ANTHROPIC ||
           m->url.provider == PL__LLM_GEMINI;
}

/* The key of the conversation's array in a body. */
static const char *array_key(const pl__llm *m)
{
    return m->url.provider == PL__LLM_GEMINI ? "contents" : "messages";
}

int pl__llm_body_frame(char **out, size_t *head_len, const pl__llm *m,
                       const pl__llm_tool *tools, size_t n_tools)
{
    *out = NULL;
    *head_len = 0;
    cJSON *none = cJSON_CreateArray();
    if (none && pl__llm_system_apart(m) && m->system_prompt &&
        !message(none, "system", m->system_prompt)) {
        cJSON_Delete(none);
        none = NULL;
    }
    cJSON *b = none ? body_of(m, none, tools, n_tools) : NULL;
    cJSON_Delete(none);
    char *text = b ? cJSON_PrintUnformatted(b) : NULL;
    cJSON_Delete(b);
    if (!text)
        return pl__err(PL_ENOMEM, "out of memory");
    /* inside a JSON string every '"' is escaped, so the first match is the
     * key itself */
    char marker[32];
    snprintf(marker, sizeof marker, "\"%s\":[]", array_key(m));
    const char *at = strstr(text, marker);
    if (!at) {
        free(text);
        return pl__err(PL_EINVAL, "the request body has no %s array",
                       array_key(m));
    }
    *head_len = (size_t)(at - text) + strlen(marker) - 1;
    *out = text;
    return PL_OK;
}

int pl__llm_encode_messages(pl__buf *out, const pl__llm *m,
                            const cJSON *messages, bool comma)
{
    cJSON *b = body_of(m, messages, NULL, 0);
    char *text = b ? cJSON_PrintUnformatted(
                         cJSON_GetObjectItemCaseSensitive(b, array_key(m)))
                   : NULL;
    cJSON_Delete(b);
    size_t n = text ? strlen(text) : 0;
    int st = text && n >= 2 ? PL_OK : PL_ENOMEM;
    if (!st && n > 2) /* "[...]": the inside */
        st = comma ? pl__buf_append(out, ",", 1) : PL_OK;
    if (!st && n > 2)
        st = pl__buf_append(out, text + 1, n - 2);
    free(text);
    return st ? pl__err(PL_ENOMEM, "out of memory") : PL_OK;
}
