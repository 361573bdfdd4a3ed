/*
 * response.c -- a provider's response as a normalised answer, and a
 * normalised answer as steps: a `text` step and one `action_call` per tool
 * call, its arguments parsed into an object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long tokens(const cJSON *usage, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(usage, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e15)
        return 0;
    return (long)v->valuedouble;
}

/* Add a tool call {"id", "name", "arguments"} to @p calls; missing fields
 * stay missing, for answer_steps to name. */
/* How deep @p v nests: 1 for an object or array of scalars, 0 for a
 * scalar. */
static int depth_of(const cJSON *v)
{
    int most = 0;
    for (const cJSON *c = v ? v->child : NULL; c; c = c->next) {
        int d = depth_of(c);
        most = d > most ? d : most;
    }
    return cJSON_IsObject(v) || cJSON_IsArray(v) ? most + 1 : 0;
}

/* A tool call's step holds its arguments one level down ({"policy",
 * "payload": ARGS}), so they nest one level less than a payload may. */
#define ARGS_DEPTH_MAX (PL_MAX_JSON_DEPTH - 1)
/* The recorded exchange holds arguments a few levels down ({"answer":
 * {"calls": [{"arguments": ...}]}}): deeper ones are kept as their JSON
 * text, as OpenAI sends them, so that every answer can be recorded. */
#define STORED_DEPTH_MAX (PL_MAX_JSON_DEPTH - 8)

static bool add_call(cJSON *calls, const char *id, const char *name,
                     const cJSON *args)
{
    cJSON *c = cJSON_CreateObject();
    if (!c || !cJSON_AddItemToArray(calls, c)) {
        cJSON_Delete(c);
        return false;
    }
    bool ok = !id || cJSON_AddStringToObject(c, "id", id);
    if (ok && name)
        ok = cJSON_AddStringToObject(c, "name", name) != NULL;
    if (ok && cJSON_IsString(args))
        ok = cJSON_AddStringToObject(c, "arguments", args->valuestring) != NULL;
    else if (ok && args && depth_of(args) > STORED_DEPTH_MAX) {
        char *text = cJSON_PrintUnformatted(args);
        ok = text && cJSON_AddStringToObject(c, "arguments", text);
        free(text);
    } else if (ok && args) /* an object (Anthropic, Ollama), or a wrong shape */
        ok = cJSON_AddItemToObjectCS(c, "arguments", cJSON_Duplicate(args, 1));
    return ok;
}

/* OpenAI and Ollama: {"message": {"content", "tool_calls": [{"id",
 * "function": {"name", "arguments"}}]}}, under choices[0] for OpenAI. */
static bool chat_answer(cJSON *a, cJSON *calls, cJSON *msg, bool move)
{
    bool ok = true;
    cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    const char *text = cJSON_IsString(content) ? content->valuestring : NULL;
    if (text && *text && move) /* from a response freed next: not copied */
        ok = cJSON_AddItemToObject(a, "text",
                                   cJSON_DetachItemViaPointer(msg, content));
    else if (text && *text)
        ok = cJSON_AddStringToObject(a, "text", text) != NULL;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(msg, "tool_calls"))
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        ok = ok && add_call(calls, str_of(tc, "id"), str_of(fn, "name"),
                            cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
    }
    return ok;
}

/* Anthropic: {"content": [{"type": "text", "text"}, {"type": "tool_use",
 * "id", "name", "input"}]}. */
static bool anthropic_answer(cJSON *a, cJSON *calls, const cJSON *content)
{
    bool ok = true;
    pl__buf text = {0};
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content)
    {
        const char *type = str_of(blk, "type");
        if (ok && type && strcmp(type, "text") == 0 && str_of(blk, "text"))
            ok = !pl__buf_append(&text, str_of(blk, "text"),
                                 strlen(str_of(blk, "text")));
        else if (ok && type && strcmp(type, "tool_use") == 0)
            ok = add_call(calls, str_of(blk, "id"), str_of(blk, "name"),
                          cJSON_GetObjectItemCaseSensitive(blk, "input"));
    }
    if (ok && text.len)
        ok = !pl__buf_append(&text, "", 1) &&
             cJSON_AddStringToObject(a, "text", (char *)text.data);
    pl__buf_free(&text);
    return ok;
}

/* Gemini: candidates[0].content.parts of text and functionCall. */
static bool gemini_answer(cJSON *a, cJSON *calls, const cJSON *parts)
{
    bool ok = true;
    pl__buf text = {0};
    const cJSON *p;
    cJSON_ArrayForEach(p, parts)
    {
        const cJSON *fc = cJSON_GetObjectItemCaseSensitive(p, "functionCall");
        if (ok && str_of(p, "text"))
            ok = !pl__buf_append(&text, str_of(p, "text"),
                                 strlen(str_of(p, "text")));
        else if (ok && fc) {
            /* "args" is optional: a tool that takes none may come
             * without it, as a streamed call is taken (stream.c) */
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(fc, "args");
            cJSON *none = args ? NULL : cJSON_CreateObject();
            ok = (args || none) &&
                 add_call(calls, str_of(fc, "id"), str_of(fc, "name"),
                          args ? args : none);
            cJSON_Delete(none);
        }
    }
    if (ok && text.len)
        ok = !pl__buf_append(&text, "", 1) &&
             cJSON_AddStringToObject(a, "text", (char *)text.data);
    pl__buf_free(&text);
    return ok;
}

/* Do the brackets of @p text (outside its strings) nest past @p limit? */
static bool nests_past(const char *text, size_t len, int limit)
{
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit)
                return true;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return false;
}

static int parse_tree(cJSON **answer, long *in_tokens, long *out_tokens,
                      const pl__llm *m, cJSON *r, bool move);

int pl__llm_parse_response(cJSON **answer, long *in_tokens, long *out_tokens,
                           const pl__llm *m, const char *body, size_t len)
{
    *answer = NULL;
    *in_tokens = *out_tokens = 0;
    cJSON *r = NULL;
    int st = pl_json_parse(&r, body, len);
    if (st == PL_EJSON && nests_past(body, len, CJSON_NESTING_LIMIT))
        return pl__err(PL_EJSON,
                       "the model's response nests deeper than %d levels, "
                       "the most this build parses (%zu bytes)",
                       CJSON_NESTING_LIMIT, len);
    if (st) /* not JSON, or a string cJSON would cut at a NUL */
        return pl__err(st, "the model's response: %s", pl_errmsg());
    st = parse_tree(answer, in_tokens, out_tokens, m, r, true);
    cJSON_Delete(r);
    return st;
}

int pl__llm_parse_value(cJSON **answer, long *in_tokens, long *out_tokens,
                        const pl__llm *m, const cJSON *r)
{
    /* @p r is only read: nothing moves out of it */
    return parse_tree(answer, in_tokens, out_tokens, m, (cJSON *)r, false);
}

/* pl__llm_parse_value(); with @p move, a long text moves from @p r into
 * the answer rather than being copied. */
static int parse_tree(cJSON **answer, long *in_tokens, long *out_tokens,
                      const pl__llm *m, cJSON *r, bool move)
{
    *answer = NULL;
    *in_tokens = *out_tokens = 0;
    cJSON *msg = NULL;
    const cJSON *content = NULL, *parts = NULL;
    const char *want = NULL;
    switch (m->url.provider) {
    case PL__LLM_ANTHROPIC:
        content = cJSON_GetObjectItemCaseSensitive(r, "content");
        want = cJSON_IsArray(content) ? NULL : "content array";
        *in_tokens = tokens(cJSON_GetObjectItemCaseSensitive(r, "usage"),
                            "input_tokens");
        *out_tokens = tokens(cJSON_GetObjectItemCaseSensitive(r, "usage"),
                             "output_tokens");
        break;
    case PL__LLM_GEMINI: {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r,
                                                                "candidates"),
                               0),
            "content");
        parts = cJSON_GetObjectItemCaseSensitive(c, "parts");
        want = cJSON_IsArray(parts) ? NULL
                                    : "candidates[0].content.parts array";
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usageMetadata");
        *in_tokens = tokens(u, "promptTokenCount");
        *out_tokens = tokens(u, "candidatesTokenCount");
        break;
    }
    case PL__LLM_OLLAMA:
        msg = cJSON_GetObjectItemCaseSensitive(r, "message");
        want = cJSON_IsObject(msg) ? NULL : "message object";
        *in_tokens = tokens(r, "prompt_eval_count");
        *out_tokens = tokens(r, "eval_count");
        break;
    default:
        msg = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "choices"),
                               0),
            "message");
        want = cJSON_IsObject(msg) ? NULL : "choices[0].message object";
        *in_tokens = tokens(cJSON_GetObjectItemCaseSensitive(r, "usage"),
                            "prompt_tokens");
        *out_tokens = tokens(cJSON_GetObjectItemCaseSensitive(r, "usage"),
                             "completion_tokens");
        break;
    }
    if (want)
        return pl__err(PL_EJSON, "the model's response has no %s", want);
    /* the limits a stream is held to (stream.c), so that an answer is
     * taken or refused alike, streamed or not */
    if (content && cJSON_GetArraySize(content) > PL__LLM_MAX_BLOCKS)
        return pl__err(PL_EJSON,
                       "the model's response has more than %d content "
                       "blocks, the most one answer may hold",
                       PL__LLM_MAX_BLOCKS);
    cJSON *a = cJSON_CreateObject();
    cJSON *calls = a ? cJSON_AddArrayToObject(a, "tool_calls") : NULL;
    bool ok = calls && (content ? anthropic_answer(a, calls, content)
                        : parts ? gemini_answer(a, calls, parts)
                                : chat_answer(a, calls, msg, move));
    if (!ok) {
        cJSON_Delete(a);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    if (cJSON_GetArraySize(calls) > PL__LLM_MAX_CALLS) {
        cJSON_Delete(a);
        return pl__err(PL_EJSON,
                       "the model's response has more than %d tool calls, "
                       "the most one answer may hold",
                       PL__LLM_MAX_CALLS);
    }
    *answer = a;
    return PL_OK;
}

static bool offered(const pl_action *action, const char *name)
{
    for (size_t i = 0; i < action->n_actions; i++)
        if (strcmp(action->actions[i], name) == 0)
            return true;
    return false;
}

bool pl__llm_has_submit(const pl__llm *m, const pl_action *action)
{
    return m->output_schema &&
           (action->n_actions || m->url.provider == PL__LLM_ANTHROPIC) &&
           !offered(action, PL__LLM_SUBMIT);
}

/* A short, printable quote of what the model sent. */
static char *quote(const cJSON *v)
{
    char *t = cJSON_IsString(v) ? pl__strdup(v->valuestring)
                                : cJSON_PrintUnformatted(v);
    if (t && strlen(t) > 200) /* no character cut in two */
        memcpy(t + pl__llm_char_start(t, 196), "...", 4);
    for (char *p = t; p && *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    return t;
}

/* Why @p value does not match @p check (NULL when it does). */
static char *mismatch(const pl_schema *check, const cJSON *value,
                      const char *what)
{
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    int st = pl_schema_validate(&e, check, value);
    if (st == PL_OK)
        return NULL;
    if (st != PL_EJSON)
        return pl__asprintf("%s could not be checked against its schema: %s",
                            what, pl_errmsg());
    return pl__asprintf("%s does not match its schema at %s%s%s (%s): %s", what,
                        e.path[0] ? "'" : "", e.path[0] ? e.path : "the top",
                        e.path[0] ? "'" : "", e.keyword, e.message);
}

/* Check the final answer against the output schema. */
static char *check_schema(const pl__llm *m, const char *text)
{
    cJSON *v = NULL;
    if (pl_json_parse(&v, text, strlen(text)))
        return pl__asprintf("the answer is not JSON, as the output schema "
                            "requires (%s): '%.*s'",
                            pl_errmsg(), pl__llm_cut(text, 120), text);
    char *why = mismatch(m->output_check, v, "the answer");
    cJSON_Delete(v);
    return why;
}

/* A tool call's arguments against the tool's input schema.  "submit" is
 * checked as the final answer instead. */
static char *check_args(const pl__llm_tool *t, const char *name,
                        const cJSON *args, int i)
{
    if (!t || !t->check || strcmp(t->name, PL__LLM_SUBMIT) == 0)
        return NULL;
    char what[160];
    snprintf(what, sizeof what, "tool call %d ('%.*s'): its arguments", i,
             pl__llm_cut(name, 100), name);
    return mismatch(t->check, args, what);
}

/* The policy a tool call names: the model calls tools by the names the
 * provider saw (names.c); NULL for a name no offered tool has. */
static const char *policy_of(const pl__llm_tool *tools, size_t n,
                             const cJSON *call)
{
    const pl__llm_tool *t = pl__llm_tool_by_wire(tools, n,
                                                 str_of(call, "name"));
    return t ? t->name : NULL;
}

/* Arguments too deep for a tool call's step: NULL, or why (caller frees). */
static char *too_deep(const cJSON *args, const char *name, int i)
{
    int d = depth_of(args);
    if (d <= ARGS_DEPTH_MAX)
        return NULL;
    return pl__asprintf("tool call %d ('%.*s') has arguments nested %d "
                        "levels deep, past the nesting limit: a tool call's "
                        "arguments nest at most %d levels (a payload %d)",
                        i, pl__llm_cut(name, 100), name, d, ARGS_DEPTH_MAX,
                        PL_MAX_JSON_DEPTH);
}

int pl__llm_answer_steps(pl_steps *out, char **why, const pl__llm *m,
                         const cJSON *answer, const pl_action *action,
                         const pl__llm_tool *tools, size_t n_tools,
                         unsigned exchange, const cJSON *tok)
{
    *why = NULL;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(answer, "text");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(answer, "tool_calls");
    if ((text && !cJSON_IsString(text)) || (calls && !cJSON_IsArray(calls))) {
        *why = pl__strdup("the answer has the wrong shape");
        return PL_EJSON;
    }
    if (!cJSON_GetArraySize(calls) && !cJSON_IsString(text)) {
        *why = pl__strdup("the answer has neither text nor tool calls");
        return PL_EJSON;
    }
    /* check every call before adding any step */
    int i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls)
    {
        const char *name = str_of(c, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "arguments");
        const pl__llm_tool *t = pl__llm_tool_by_wire(tools, n_tools, name);
        char *q = NULL;
        if (!cJSON_IsObject(c))
            *why = pl__asprintf("tool call %d is not an object", i);
        else if (!name)
            *why = pl__asprintf("tool call %d has no tool name", i);
        else if (!t)
            *why = pl__asprintf("tool call %d names the tool '%.*s', which "
                                "is not among the tools offered",
                                i, pl__llm_cut(name, 100), name);
        else if (!args)
            *why = pl__asprintf("tool call %d ('%.*s') has no arguments", i,
                                pl__llm_cut(name, 100), name);
        else if (cJSON_IsString(args)) {
            /* JSON text: a string in it holding \u0000 is refused, as
             * cJSON would cut it */
            cJSON *parsed = NULL;
            int pst = pl_json_parse(&parsed, args->valuestring,
                                    strlen(args->valuestring));
            if (pst == PL_ENOMEM)
                return PL_ENOMEM;
            if (pst)
                *why = pl__asprintf("tool call %d ('%.*s') has arguments "
                                    "that are refused: %s: '%s'",
                                    i, pl__llm_cut(name, 100), name,
                                    pl_errmsg(), (q = quote(args)) ? q : "?");
            else if (!cJSON_IsObject(parsed))
                *why = pl__asprintf("tool call %d ('%.*s') has arguments "
                                    "that are not a JSON object: '%s'",
                                    i, pl__llm_cut(name, 100), name,
                                    (q = quote(args)) ? q : "?");
            else
                *why = too_deep(parsed, name, i);
            if (!*why)
                *why = check_args(t, name, parsed, i);
            cJSON_Delete(parsed);
        } else if (!cJSON_IsObject(args))
            *why = pl__asprintf("tool call %d ('%.*s') has arguments that "
                                "are not a JSON object: '%s'",
                                i, pl__llm_cut(name, 100), name,
                                (q = quote(args)) ? q : "?");
        else if (!(*why = too_deep(args, name, i)))
            *why = check_args(t, name, args, i);
        free(q);
        if (*why)
            return PL_EJSON;
        i++;
    }
    bool submit = pl__llm_has_submit(m, action);
    const cJSON *final = NULL; /* the submit call */
    cJSON_ArrayForEach(c, calls)
    {
        if (submit && strcmp(policy_of(tools, n_tools, c), PL__LLM_SUBMIT) == 0)
            final = c;
    }
    if (final && i > 1) {
        *why = pl__strdup("the answer calls 'submit' with other tools; "
                          "'submit' comes alone");
        return PL_EJSON;
    }
    const char *answer_text = NULL;
    char *args_text = NULL;
    if (final) {
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(final,
                                                             "arguments");
        answer_text = cJSON_IsString(args)
                          ? args->valuestring
                          : (args_text = cJSON_PrintUnformatted(args));
        if (!answer_text)
            return PL_ENOMEM;
    } else if (!i && m->output_schema) {
        answer_text = text->valuestring;
    }
    if (answer_text && (*why = check_schema(m, answer_text))) {
        free(args_text);
        return PL_EJSON;
    }
    int st = PL_OK;
    if (answer_text) { /* the final answer: its text and its JSON */
        cJSON *p = NULL;
        cJSON *json = cJSON_Parse(answer_text);
        st = json ? pl_json_pack(&p, "{s:s, s:o}", "text", answer_text, "json",
                                 json)
                  : PL_ENOMEM;
        if (!st && tok)
            st = pl__llm_add_tokens(p, tok);
        if (!st)
            st = pl_steps_add(out, PL_STEP_TEXT, NULL, p);
        cJSON_Delete(p);
        free(args_text);
        return st;
    }
    if (cJSON_IsString(text) && *text->valuestring) {
        cJSON *p = NULL;
        /* the turn's last step when there are no calls */
        const cJSON *t = cJSON_GetArraySize(calls) ? NULL : tok;
        /* the text refers to the answer's, which outlives the step's
         * encoding: a long answer is not copied once more */
        cJSON *ref = cJSON_CreateStringReference(text->valuestring);
        if (!(p = cJSON_CreateObject()) || !ref ||
            !cJSON_AddItemToObject(p, "text", ref)) {
            cJSON_Delete(ref);
            st = pl__err(PL_ENOMEM, "out of memory");
        }
        if (!st && t)
            st = pl__llm_add_tokens(p, t);
        if (!st)
            st = pl_steps_add(out, PL_STEP_TEXT, NULL, p);
        cJSON_Delete(p);
    }
    int last = cJSON_GetArraySize(calls) - 1;
    i = 0;
    cJSON_ArrayForEach(c, calls)
    {
        if (st)
            break;
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "arguments");
        cJSON *obj = cJSON_IsString(args) ? cJSON_Parse(args->valuestring)
                                          : cJSON_Duplicate(args, 1);
        char idbuf[48];
        const char *id = str_of(c, "id");
        if (!id) {
            snprintf(idbuf, sizeof idbuf, "call_%u_%d", exchange, i);
            id = idbuf;
        }
        cJSON *step = NULL;
        if (!obj)
            st = PL_ENOMEM;
        else
            st = pl_json_pack(&step, "{s:s, s:o, s:s}", "policy",
                              policy_of(tools, n_tools, c), "payload", obj,
                              "call_id", id);
        if (!st && tok && i == last)
            st = pl__llm_add_tokens(step, tok);
        if (!st)
            st = pl_steps_add(out, PL_STEP_ACTION_CALL, NULL, step);
        cJSON_Delete(step);
        i++;
    }
    return st;
}
