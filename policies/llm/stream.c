/*
 * stream.c -- a model's streamed answer: server-sent events (OpenAI,
 * Anthropic, Gemini) or NDJSON lines (Ollama), read as they arrive.  Each
 * piece of text and of tool-call arguments goes to on_delta; the whole is
 * assembled into the response the provider sends without streaming, and
 * parsed as that response is (response.c), so the answer recorded is the
 * same either way.
 *
 * Bounded: every byte up to the final event counts against the cap
 * (max_response_bytes), so the buffers (a line, an event's data, the
 * text, the arguments) stay within it; what comes past the final event is
 * neither read nor counted.  A line that is not the protocol's fails at
 * once.  An event whose data is cut by the end of the stream is dropped,
 * as the SSE rules say, and the stream is then one that ended before its
 * end: retried.  An NDJSON stream's last line may come without its
 * newline: read when it is whole JSON, else dropped as the SSE event is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"

#define MAX_CALLS PL__LLM_MAX_CALLS   /* tool calls in one answer */
#define MAX_BLOCKS PL__LLM_MAX_BLOCKS /* Anthropic's content blocks */
#define EVENT_NAME 64

typedef struct call {
    pl__buf name; /* the wire name */
    char *id;
    pl__buf args; /* arguments as written (OpenAI, Anthropic) */
    cJSON *whole; /* arguments sent whole (Gemini, Ollama) */
    cJSON *start; /* Anthropic: the block's first "input" */
    bool used;
} call;

struct pl__llm_stream {
    const pl__llm *m;
    pl__llm_deltas *d;
    const char *key; /* the API key: quoted text is redacted */
    size_t cap, total;
    pl__buf line;
    bool cr;       /* the last byte was '\r': a '\n' after it ends no line */
    bool read_one; /* a line was read: a byte order mark is past */
    pl__buf data;
    bool has_data;
    char event[EVENT_NAME];
    pl__buf text;
    call calls[MAX_CALLS];
    size_t n_calls;
    int blocks[MAX_BLOCKS]; /* Anthropic: block -> call + 1, 0 none */
    int route[MAX_CALLS];   /* OpenAI: index -> call + 1, 0 none yet */
    cJSON *usage;           /* the usage the provider sent, merged */
    bool done;
    int fail; /* 0, STREAM_BAD or STREAM_ERROR */
    char *why;
};

pl__llm_stream *pl__llm_stream_new(const pl__llm *m, pl__llm_deltas *d,
                                   size_t cap, const char *key)
{
    pl__llm_stream *s = calloc(1, sizeof *s);
    if (s) {
        s->m = m;
        s->d = d;
        s->cap = cap;
        s->key = key;
    }
    return s;
}

/* ---- what a server sent, quoted -------------------------------------- */

/* @p s (taken over) with every @p key in it, whatever its length, as
 * "[redacted]", in one pass (the text put in a key's place is not searched
 * again: it may hold the key), kept up to @p limit bytes or a little past
 * (what is past is dropped: never a part of a key put back).  NULL when
 * out of memory. */
static char *redact(char *s, const char *key, size_t limit)
{
    char *p = s && key && *key ? strstr(s, key) : NULL;
    if (!p)
        return s;
    size_t kl = strlen(key);
    pl__buf b = {0};
    const char *from = s;
    int st = PL_OK;
    for (; p && b.len < limit; p = strstr(from, key)) {
        if ((st = pl__buf_append(&b, from, (size_t)(p - from))) ||
            (st = pl__buf_append(&b, "[redacted]", 10)))
            break;
        from = p + kl;
    }
    if (!st && b.len < limit)
        st = pl__buf_append(&b, from, strlen(from));
    if (!st)
        st = pl__buf_append(&b, "", 1);
    free(s);
    if (st) {
        pl__buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

char *pl__llm_redact(char *s, const char *key)
{
    return redact(s, key, SIZE_MAX);
}

size_t pl__llm_char_start(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return n;
}

int pl__llm_cut(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    return (int)(n <= max ? n : pl__llm_char_start(s, max));
}

char *pl__llm_quote(const char *p, size_t n, size_t max, const char *key)
{
    char *t = malloc(n + 1);
    if (!t)
        return NULL;
    if (n)
        memcpy(t, p, n);
    t[n] = '\0';
    /* the key out first: a cut made before would leave its start */
    if ((t = redact(t, key, max)) && strlen(t) > max)
        t[pl__llm_char_start(t, max)] = '\0'; /* no character cut in two */
    for (char *q = t; q && *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = ' ';
    return t;
}

void pl__llm_stream_free(pl__llm_stream *s)
{
    if (!s)
        return;
    pl__buf_free(&s->line);
    pl__buf_free(&s->data);
    pl__buf_free(&s->text);
    for (size_t i = 0; i < MAX_CALLS; i++) {
        pl__buf_free(&s->calls[i].name);
        pl__buf_free(&s->calls[i].args);
        free(s->calls[i].id);
        cJSON_Delete(s->calls[i].whole);
        cJSON_Delete(s->calls[i].start);
    }
    cJSON_Delete(s->usage);
    free(s->why);
    free(s);
}

int pl__llm_stream_failed(const pl__llm_stream *s, const char **why)
{
    *why = s->why ? s->why : "out of memory";
    return s->fail;
}

bool pl__llm_stream_done(const pl__llm_stream *s) { return s->done; }

/* Fail the stream with @p why, taken over (the first failure stays);
 * returns -1 for the parser. */
static int fail(pl__llm_stream *s, int kind, char *why)
{
    if (!s->fail) {
        s->fail = kind;
        s->why = why;
    } else {
        free(why);
    }
    return -1;
}

static int oom(pl__llm_stream *s) { return fail(s, PL__LLM_STREAM_BAD, NULL); }

/* ---- deltas ------------------------------------------------------------- */

void pl__llm_delta_send(pl__llm_deltas *d, pl_llm_delta_kind kind,
                        const char *p, size_t n, const char *wire,
                        unsigned index, bool replayed)
{
    bool mark = kind == PL_LLM_DELTA_RESTARTED || kind == PL_LLM_DELTA_END;
    if (!d || !d->m->o.on_delta || (!mark && !n))
        return;
    const pl__llm_tool *t = wire ? pl__llm_tool_by_wire(d->tools, d->n_tools,
                                                        wire)
                                 : NULL;
    pl_llm_delta x;
    memset(&x, 0, sizeof x);
    x.kind = kind;
    x.run_id = d->run_id;
    x.path = d->path;
    x.turn = d->turn;
    x.text = p ? p : "";
    x.len = n;
    x.tool = t ? t->name : wire;
    x.tool_index = index;
    x.replayed = replayed;
    d->m->o.on_delta(&x, d->m->o.delta_user);
    d->sent = !mark;
}

const char *pl__llm_args_text(const cJSON *tc, char **printed)
{
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(tc, "arguments");
    *printed = args && !cJSON_IsString(args) ? cJSON_PrintUnformatted(args)
                                             : NULL;
    return cJSON_IsString(args) ? args->valuestring : *printed ? *printed : "";
}

const char *pl__llm_call_name(const cJSON *tc)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    return cJSON_IsString(name) ? name->valuestring : NULL;
}

void pl__llm_delta_whole(pl__llm_deltas *d, const cJSON *answer, bool replayed)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(answer, "text");
    if (cJSON_IsString(text))
        pl__llm_delta_send(d, PL_LLM_DELTA_TEXT, text->valuestring,
                           strlen(text->valuestring), NULL, 0, replayed);
    const cJSON *c;
    unsigned i = 0;
    cJSON_ArrayForEach(c,
                       cJSON_GetObjectItemCaseSensitive(answer, "tool_calls"))
    {
        char *printed = NULL;
        const char *a = pl__llm_args_text(c, &printed);
        pl__llm_delta_send(d, PL_LLM_DELTA_TOOL_ARGS, a, strlen(a),
                           pl__llm_call_name(c), i++, replayed);
        free(printed);
    }
}

/* ---- the answer as it comes --------------------------------------------- */

static int add_text(pl__llm_stream *s, const cJSON *v)
{
    if (!cJSON_IsString(v) || !*v->valuestring)
        return 0;
    size_t n = strlen(v->valuestring);
    if (pl__buf_append(&s->text, v->valuestring, n))
        return oom(s);
    pl__llm_delta_send(s->d, PL_LLM_DELTA_TEXT, v->valuestring, n, NULL, 0,
                       false);
    return 0;
}

static call *call_at(pl__llm_stream *s, double index)
{
    if (!(index >= 0)) {
        fail(s, PL__LLM_STREAM_BAD,
             pl__strdup("the model's stream has a negative tool call index"));
        return NULL;
    }
    if (index >= MAX_CALLS) { /* as a whole answer of as many is refused */
        fail(s, PL__LLM_STREAM_BAD,
             pl__asprintf("the model's response has more than %d tool "
                          "calls, the most one answer may hold",
                          MAX_CALLS));
        return NULL;
    }
    size_t i = (size_t)index;
    if (i >= s->n_calls)
        s->n_calls = i + 1;
    s->calls[i].used = true;
    return &s->calls[i];
}

static int add_name(pl__llm_stream *s, call *c, const cJSON *name)
{
    if (cJSON_IsString(name) &&
        pl__buf_append(&c->name, name->valuestring, strlen(name->valuestring)))
        return oom(s);
    return 0;
}

static int set_id(pl__llm_stream *s, call *c, const cJSON *id)
{
    if (!cJSON_IsString(id) || c->id)
        return 0;
    return (c->id = pl__strdup(id->valuestring)) ? 0 : oom(s);
}

/* The wire name so far, NUL-terminated, or NULL. */
static const char *name_of(pl__llm_stream *s, call *c)
{
    if (!c->name.len || pl__buf_reserve(&c->name, 1))
        return NULL;
    c->name.data[c->name.len] = '\0';
    (void)s;
    return (const char *)c->name.data;
}

static int add_args(pl__llm_stream *s, call *c, const char *p)
{
    size_t n = p ? strlen(p) : 0;
    if (!n)
        return 0;
    if (pl__buf_append(&c->args, p, n))
        return oom(s);
    pl__llm_delta_send(s->d, PL_LLM_DELTA_TOOL_ARGS, p, n, name_of(s, c),
                       (unsigned)(c - s->calls), false);
    return 0;
}

/* A call whose arguments come whole (Gemini, Ollama). */
static int whole_call(pl__llm_stream *s, const cJSON *name, const cJSON *id,
                      const cJSON *args)
{
    call *c = call_at(s, (double)s->n_calls);
    if (!c || add_name(s, c, name) || set_id(s, c, id))
        return -1;
    if (args && !(c->whole = cJSON_Duplicate(args, 1)))
        return oom(s);
    char *text = args ? cJSON_PrintUnformatted(args) : NULL;
    if (args && !text)
        return oom(s);
    pl__llm_delta_send(s->d, PL_LLM_DELTA_TOOL_ARGS, text,
                       text ? strlen(text) : 0, name_of(s, c),
                       (unsigned)(c - s->calls), false);
    free(text);
    return 0;
}

/* Merge the fields of @p u into the usage kept. */
static int merge_usage(pl__llm_stream *s, const cJSON *u)
{
    if (!cJSON_IsObject(u))
        return 0;
    if (!s->usage && !(s->usage = cJSON_CreateObject()))
        return oom(s);
    const cJSON *f;
    cJSON_ArrayForEach(f, u)
    {
        cJSON *v = cJSON_Duplicate(f, 1);
        if (!v)
            return oom(s);
        cJSON_DeleteItemFromObjectCaseSensitive(s->usage, f->string);
        if (!cJSON_AddItemToObject(s->usage, f->string, v)) {
            cJSON_Delete(v);
            return oom(s);
        }
    }
    return 0;
}

/* An error the provider sent in the stream: the attempt failed. */
static int error_event(pl__llm_stream *s, const cJSON *e)
{
    const cJSON *msg = cJSON_IsObject(e)
                           ? cJSON_GetObjectItemCaseSensitive(e, "message")
                           : e;
    const char *m = cJSON_IsString(msg) ? msg->valuestring : "no message";
    char *quoted = pl__llm_quote(m, strlen(m), 239, s->key);
    if (!quoted)
        return oom(s);
    char *why = pl__asprintf("the model's stream carried an error: %s", quoted);
    free(quoted);
    return fail(s, PL__LLM_STREAM_ERROR, why);
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static int openai_event(pl__llm_stream *s, const cJSON *v)
{
    if (get(v, "error"))
        return error_event(s, get(v, "error"));
    if (merge_usage(s, get(v, "usage")))
        return -1;
    const cJSON *delta = get(cJSON_GetArrayItem(get(v, "choices"), 0), "delta");
    if (add_text(s, get(delta, "content")))
        return -1;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, get(delta, "tool_calls"))
    {
        const cJSON *idx = get(tc, "index"), *fn = get(tc, "function");
        const cJSON *id = get(tc, "id");
        bool numbered = cJSON_IsNumber(idx);
        double at = numbered ? idx->valuedouble : (double)s->n_calls;
        bool in = numbered && at >= 0 && at < MAX_CALLS;
        int to = in ? s->route[(size_t)at] : 0;
        /* a call takes the next place as it begins, whatever its index
         * (0, then 2): the place the answer records it in, and the
         * deltas' tool_index; a piece with no index begins a call */
        call *c = call_at(s, to                ? to - 1
                             : in || !numbered ? (double)s->n_calls
                                               : at);
        if (c && in && !to)
            s->route[(size_t)at] = (int)(c - s->calls) + 1;
        /* a call's id comes in its first piece: another id (not empty)
         * where a call is begins another call (servers that number every
         * call 0), and the index's next pieces are that call's */
        if (c && c->id && cJSON_IsString(id) && *id->valuestring &&
            strcmp(c->id, id->valuestring)) {
            c = call_at(s, (double)s->n_calls);
            if (c)
                s->route[(size_t)at] = (int)(c - s->calls) + 1;
        }
        const cJSON *a = get(fn, "arguments");
        if (!c || set_id(s, c, id) || add_name(s, c, get(fn, "name")) ||
            add_args(s, c, cJSON_IsString(a) ? a->valuestring : NULL))
            return -1;
    }
    return 0;
}

static int anthropic_event(pl__llm_stream *s, const cJSON *v)
{
    const cJSON *type = get(v, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    const cJSON *idx = get(v, "index");
    double bi = cJSON_IsNumber(idx) ? idx->valuedouble : -1;
    bool block = bi >= 0 && bi < MAX_BLOCKS;
    if (!strcmp(t, "error"))
        return error_event(s, get(v, "error"));
    if (!strcmp(t, "message_stop"))
        s->done = true;
    else if (!strcmp(t, "message_start"))
        return merge_usage(s, get(get(v, "message"), "usage"));
    else if (!strcmp(t, "message_delta"))
        return merge_usage(s, get(v, "usage"));
    else if (!strcmp(t, "content_block_start") ||
             !strcmp(t, "content_block_delta")) {
        if (!block)
            return fail(s, PL__LLM_STREAM_BAD,
                        bi >= MAX_BLOCKS
                            ? pl__asprintf("the model's response has more "
                                           "than %d content blocks, the "
                                           "most one answer may hold",
                                           MAX_BLOCKS)
                            : pl__strdup("the model's stream has a content "
                                         "block without a valid index"));
        bool start = t[14] == 's';
        const cJSON *b = get(v, start ? "content_block" : "delta");
        const cJSON *bt = get(b, "type");
        const char *k = cJSON_IsString(bt) ? bt->valuestring : "";
        if (!strcmp(k, "text") || !strcmp(k, "text_delta"))
            return add_text(s, get(b, "text"));
        if (start && !strcmp(k, "tool_use")) {
            call *c = call_at(s, (double)s->n_calls);
            if (!c || set_id(s, c, get(b, "id")) ||
                add_name(s, c, get(b, "name")))
                return -1;
            s->blocks[(size_t)bi] = (int)(c - s->calls) + 1;
            if (get(b, "input") &&
                !(c->start = cJSON_Duplicate(get(b, "input"), 1)))
                return oom(s);
            return 0;
        }
        if (!strcmp(k, "input_json_delta")) {
            int ci = s->blocks[(size_t)bi];
            const cJSON *pj = get(b, "partial_json");
            if (!ci)
                return fail(s, PL__LLM_STREAM_BAD,
                            pl__strdup("the model's stream sends arguments "
                                       "for a content block that is no tool "
                                       "call"));
            return add_args(s, &s->calls[ci - 1],
                            cJSON_IsString(pj) ? pj->valuestring : NULL);
        }
    }
    return 0; /* ping, content_block_stop, thinking: nothing to keep */
}

static int gemini_event(pl__llm_stream *s, const cJSON *v)
{
    if (get(v, "error"))
        return error_event(s, get(v, "error"));
    if (get(v, "usageMetadata")) {
        cJSON_Delete(s->usage); /* each chunk sends the totals so far */
        s->usage = NULL;
        if (merge_usage(s, get(v, "usageMetadata")))
            return -1;
    }
    const cJSON *cand = cJSON_GetArrayItem(get(v, "candidates"), 0);
    const cJSON *p;
    cJSON_ArrayForEach(p, get(get(cand, "content"), "parts"))
    {
        const cJSON *fc = get(p, "functionCall");
        if (get(p, "text") ? add_text(s, get(p, "text"))
            : fc
                ? whole_call(s, get(fc, "name"), get(fc, "id"), get(fc, "args"))
                : 0)
            return -1;
    }
    if (cJSON_IsString(get(cand, "finishReason")))
        s->done = true;
    return 0;
}

static int ollama_event(pl__llm_stream *s, const cJSON *v)
{
    if (get(v, "error"))
        return error_event(s, get(v, "error"));
    const cJSON *msg = get(v, "message");
    if (add_text(s, get(msg, "content")))
        return -1;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, get(msg, "tool_calls"))
    {
        const cJSON *fn = get(tc, "function");
        if (whole_call(s, get(fn, "name"), get(tc, "id"), get(fn, "arguments")))
            return -1;
    }
    if (cJSON_IsTrue(get(v, "done"))) {
        s->done = true;
        cJSON *u = NULL;
        if (pl_json_pack(&u, "{s:O*, s:O*}", "prompt_eval_count",
                         get(v, "prompt_eval_count"), "eval_count",
                         get(v, "eval_count")))
            return oom(s);
        int st = merge_usage(s, u);
        cJSON_Delete(u);
        return st;
    }
    return 0;
}

/* Refuse the stream, quoting the start of what it sent. */
static int refuse(pl__llm_stream *s, const char *what, const char *p, size_t n)
{
    char *quoted = pl__llm_quote(p, n, 40, s->key);
    if (!quoted)
        return oom(s);
    char *why = pl__asprintf("the model's stream %s '%s'", what, quoted);
    free(quoted);
    return fail(s, PL__LLM_STREAM_BAD, why);
}

/* One event's data (SSE) or one line (NDJSON). */
static int event(pl__llm_stream *s, const char *data, size_t n)
{
    pl__llm_provider p = s->m->url.provider;
    if (p == PL__LLM_OPENAI && n == 6 && !memcmp(data, "[DONE]", 6)) {
        s->done = true;
        return 0;
    }
    /* not JSON, or a string cJSON would cut at a NUL: refused, saying which */
    cJSON *v = NULL;
    int pst = pl_json_parse(&v, data, n);
    if (pst == PL_ENOMEM)
        return oom(s);
    if (pst) {
        char *what = pl__asprintf("%s (%s):",
                                  p == PL__LLM_OLLAMA
                                      ? "has a line that is refused"
                                      : "has an event's data that is refused",
                                  pl_errmsg());
        if (!what)
            return oom(s);
        int st = refuse(s, what, data, n);
        free(what);
        return st;
    }
    if (!cJSON_IsObject(v)) {
        cJSON_Delete(v);
        return refuse(s,
                      p == PL__LLM_OLLAMA
                          ? "has a line that is not a JSON object:"
                          : "has an event's data that is not a JSON object:",
                      data, n);
    }
    int st = p == PL__LLM_ANTHROPIC ? anthropic_event(s, v)
             : p == PL__LLM_GEMINI  ? gemini_event(s, v)
             : p == PL__LLM_OLLAMA  ? ollama_event(s, v)
                                    : openai_event(s, v);
    cJSON_Delete(v);
    return st;
}

/* One SSE line (without its end). */
static int sse_line(pl__llm_stream *s, const char *l, size_t n)
{
    if (n == 0) { /* the event ends */
        int st = s->has_data ? event(s, (const char *)s->data.data, s->data.len)
                             : 0;
        pl__buf_reset(&s->data);
        s->has_data = false;
        s->event[0] = '\0';
        return st;
    }
    if (l[0] == ':')
        return 0; /* a comment */
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl && *v == ' ')
        v++, vl--;
    if (fl == 4 && !memcmp(l, "data", 4)) {
        if ((s->has_data && pl__buf_append(&s->data, "\n", 1)) ||
            pl__buf_append(&s->data, v, vl))
            return oom(s);
        s->has_data = true;
    } else if (fl == 5 && !memcmp(l, "event", 5)) {
        snprintf(s->event, sizeof s->event, "%.*s", (int)vl, v);
    } else if (!((fl == 2 && !memcmp(l, "id", 2)) ||
                 (fl == 5 && !memcmp(l, "retry", 5)))) {
        return refuse(s, "is not server-sent events: a line reads", l, n);
    }
    return 0;
}

static int line(pl__llm_stream *s, const char *l, size_t n)
{
    if (s->done)
        return 0; /* past the final event: not read */
    /* a byte order mark before the first line is skipped, as an SSE
     * reader does (and a JSON reader may) */
    if (!s->read_one && n >= 3 && !memcmp(l, "\xEF\xBB\xBF", 3))
        l += 3, n -= 3;
    s->read_one = true;
    if (s->m->url.provider != PL__LLM_OLLAMA)
        return sse_line(s, l, n);
    while (n && (l[n - 1] == ' ' || l[n - 1] == '\t'))
        n--;
    return n ? event(s, l, n) : 0;
}

int pl__llm_stream_feed(pl__llm_stream *s, const char *p, size_t n)
{
    if (s->fail)
        return -1;
    if (s->done)
        return 0; /* past the final event: neither read nor counted */
    /* the bytes within the cap are read first: a final event among them
     * ends the stream, and what follows it is not counted */
    size_t room = s->cap - s->total, all = n;
    if (n > room)
        n = room;
    s->total += n;
    size_t from = 0;
    for (size_t i = 0; i < n && !s->done; i++) {
        if (p[i] != '\n' && p[i] != '\r') {
            s->cr = false;
            continue;
        }
        bool skip = p[i] == '\n' && s->cr && i == from && !s->line.len;
        s->cr = p[i] == '\r';
        if (skip) { /* the '\n' of a "\r\n" */
            from = i + 1;
            continue;
        }
        int st;
        if (s->line.len) {
            if (pl__buf_append(&s->line, p + from, i - from))
                return oom(s);
            st = line(s, (const char *)s->line.data, s->line.len);
            pl__buf_reset(&s->line);
        } else {
            st = line(s, p + from, i - from);
        }
        if (st)
            return -1;
        from = i + 1;
    }
    if (s->done)
        return 0;
    if (all > n)
        return fail(s, PL__LLM_STREAM_BAD,
                    pl__asprintf("the model's stream is larger than "
                                 "max_response_bytes (%zu bytes)",
                                 s->cap));
    if (from < n && pl__buf_append(&s->line, p + from, n - from))
        return oom(s);
    return 0;
}

/* ---- the whole ---------------------------------------------------------- */

/* A call's arguments: whole, or the text written parsed (empty: the
 * block's start, else {}), or the text itself when it is not JSON. */
static cJSON *args_value(call *c, bool want_text)
{
    if (c->whole)
        return cJSON_Duplicate(c->whole, 1);
    if (c->args.len && pl__buf_reserve(&c->args, 1))
        return NULL;
    if (c->args.len)
        c->args.data[c->args.len] = '\0'; /* the text, for a string */
    const char *t = c->args.len ? (const char *)c->args.data : "";
    if (want_text)
        return cJSON_CreateString(t);
    if (!c->args.len)
        return c->start ? cJSON_Duplicate(c->start, 1) : cJSON_CreateObject();
    /* text that is not JSON, or holds a string cJSON would cut at a NUL,
     * stays text: the answer's check refuses it, saying why */
    cJSON *v = NULL;
    return pl_json_parse(&v, t, c->args.len) ? cJSON_CreateString(t) : v;
}

/* The response the provider sends without streaming, from what came. */
static cJSON *whole_response(pl__llm_stream *s)
{
    pl__llm_provider p = s->m->url.provider;
    if (pl__buf_append(&s->text, "", 1))
        return NULL;
    s->text.len--;
    const char *text = (const char *)s->text.data;
    cJSON *r = cJSON_CreateObject(), *parts = cJSON_CreateArray();
    bool ok = r && parts;
    if (ok && s->text.len) {
        cJSON *t = p == PL__LLM_ANTHROPIC || p == PL__LLM_GEMINI
                       ? NULL
                       : cJSON_CreateString(text);
        if (p == PL__LLM_ANTHROPIC)
            pl_json_pack(&t, "{s:s, s:s}", "type", "text", "text", text);
        else if (p == PL__LLM_GEMINI)
            pl_json_pack(&t, "{s:s}", "text", text);
        ok = t && (p == PL__LLM_ANTHROPIC || p == PL__LLM_GEMINI
                       ? cJSON_AddItemToArray(parts, t)
                       : cJSON_AddItemToObject(r, "content", t));
    }
    for (size_t i = 0; ok && i < s->n_calls; i++) {
        call *c = &s->calls[i];
        if (!c->used)
            continue;
        cJSON *args = args_value(c, p == PL__LLM_OPENAI);
        cJSON *x = NULL;
        const char *nm = c->name.len ? name_of(s, &s->calls[i]) : NULL;
        if (!args)
            ok = false;
        else if (p == PL__LLM_ANTHROPIC)
            pl_json_pack(&x, "{s:s, s:s*, s:s*, s:o}", "type", "tool_use", "id",
                         c->id, "name", nm, "input", args);
        else if (p == PL__LLM_GEMINI)
            pl_json_pack(&x, "{s:{s:s*, s:s*, s:o}}", "functionCall", "id",
                         c->id, "name", nm, "args", args);
        else
            pl_json_pack(&x, "{s:s*, s:{s:s*, s:o}}", "id", c->id, "function",
                         "name", nm, "arguments", args);
        ok = ok && x && cJSON_AddItemToArray(parts, x);
    }
    cJSON *u = s->usage;
    s->usage = NULL;
    cJSON *resp = NULL;
    if (ok && p == PL__LLM_ANTHROPIC)
        pl_json_pack(&resp, "{s:o, s:o*}", "content", parts, "usage", u);
    else if (ok && p == PL__LLM_GEMINI)
        pl_json_pack(&resp, "{s:[{s:{s:s, s:o}}], s:o*}", "candidates",
                     "content", "role", "model", "parts", parts,
                     "usageMetadata", u);
    else if (ok) {
        if (cJSON_GetArraySize(parts))
            cJSON_AddItemToObject(r, "tool_calls", parts);
        else
            cJSON_Delete(parts);
        cJSON *msg = r;
        r = NULL;
        if (p == PL__LLM_OLLAMA) {
            pl_json_pack(&resp, "{s:o}", "message", msg);
            const cJSON *f;
            cJSON_ArrayForEach(f, u)
            {
                if (resp)
                    cJSON_AddItemToObject(resp, f->string,
                                          cJSON_Duplicate(f, 1));
            }
            cJSON_Delete(u);
        } else {
            pl_json_pack(&resp, "{s:[{s:o}], s:o*}", "choices", "message", msg,
                         "usage", u);
        }
    } else {
        cJSON_Delete(parts);
        cJSON_Delete(u);
    }
    cJSON_Delete(r);
    return resp;
}

/* NDJSON's last line may end the body without its newline: read it,
 * when it is whole (JSON).  One that is not is a line the end of the
 * stream cut: dropped, and the stream one that ended before its end. */
static void last_line(pl__llm_stream *s)
{
    cJSON *v = NULL;
    if (s->done || s->fail || !s->line.len ||
        s->m->url.provider != PL__LLM_OLLAMA ||
        pl_json_parse(&v, (const char *)s->line.data, s->line.len))
        return;
    cJSON_Delete(v);
    line(s, (const char *)s->line.data, s->line.len);
    pl__buf_reset(&s->line);
}

int pl__llm_stream_end(pl__llm_stream *s, cJSON **answer, long *in_tokens,
                       long *out_tokens)
{
    *answer = NULL;
    last_line(s);
    if (s->fail)
        return -1;
    if (!s->done)
        return fail(s, PL__LLM_STREAM_ERROR,
                    pl__asprintf("the model's stream ended before its end "
                                 "(%zu bytes came)",
                                 s->total));
    cJSON *r = whole_response(s);
    if (!r)
        return oom(s);
    int st = pl__llm_parse_value(answer, in_tokens, out_tokens, s->m, r);
    cJSON_Delete(r);
    if (st)
        return fail(s, PL__LLM_STREAM_BAD, pl__strdup(pl_errmsg()));
    return 0;
}

long pl__llm_member_at(const char *b, size_t n, const char *key)
{
    size_t kl = strlen(key);
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == '"') {
            size_t start = ++i;
            for (; i < n && b[i] != '"'; i++)
                if (b[i] == '\\')
                    i++;
            if (i >= n)
                return -1;
            size_t j = i + 1;
            while (j < n && (b[j] == ' ' || b[j] == '\n' || b[j] == '\t' ||
                             b[j] == '\r'))
                j++;
            if (depth != 1 || j >= n || b[j] != ':' || i - start != kl ||
                memcmp(b + start, key, kl))
                continue;
            for (j++; j < n && (b[j] == ' ' || b[j] == '\n' || b[j] == '\t' ||
                                b[j] == '\r');
                 j++)
                ;
            return (long)j;
        }
    }
    return -1;
}
