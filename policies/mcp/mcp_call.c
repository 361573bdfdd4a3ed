/*
 * mcp_call.c -- a tool call: the policy, and the tools/call result or
 * error as steps, errors read as the taxonomy (policyledger_mcp.h).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_int.h"
#include "platform.h"
#include "root_call.h"

#define MAX_ERROR_TEXT 4096
#define META_KEY "policyledger/idempotencyKey"

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

static bool has_ci(const char *text, const char *word)
{
    size_t w = strlen(word);
    for (const char *p = text; *p; p++) {
        size_t i = 0;
        while (i < w && p[i] &&
               tolower((unsigned char)p[i]) == (unsigned char)word[i])
            i++;
        if (i == w)
            return true;
    }
    return false;
}

/* The error code a tool's error text reads as (see the header). */
static const char *classify(const char *text)
{
    static const struct {
        const char *word, *code;
    } rules[] = {
        {"not found", PL_ERR_NOT_FOUND},
        {"no such", PL_ERR_NOT_FOUND},
        {"enoent", PL_ERR_NOT_FOUND},
        {"access denied", PL_ERR_FORBIDDEN},
        {"outside", PL_ERR_FORBIDDEN},
        {"permission", PL_ERR_FORBIDDEN},
        {"not allowed", PL_ERR_FORBIDDEN},
        {"unauthorized", PL_ERR_UNAUTHORIZED},
        {"timed out", PL_ERR_TIMEOUT},
        {"timeout", PL_ERR_TIMEOUT},
        {"invalid", PL_ERR_INVALID_INPUT},
        {"validation", PL_ERR_INVALID_INPUT},
        {"required", PL_ERR_INVALID_INPUT},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (has_ci(text, rules[i].word))
            return rules[i].code;
    return PL_ERR_TOOL_BUG;
}

/* Copy @p key of @p from to @p to if it is a string. */
static bool copy_str(cJSON *to, const cJSON *from, const char *key)
{
    const char *s = pl__mcp_str(from, key);
    return !s || cJSON_AddStringToObject(to, key, s);
}

/* Base64 data: its "bytes" (decoded size) and, up to the cap, itself. */
static bool add_data(cJSON *to, const char *key, const char *b64, size_t cap)
{
    size_t len = strlen(b64), digits = len;
    while (digits && b64[digits - 1] == '=')
        digits--;
    /* 6 bits a digit, padded or not ("QUI" and "QUI=" are 2 bytes; "=="
     * alone is none) */
    if (!cJSON_AddNumberToObject(to, "bytes",
                                 (double)(digits / 4 * 3 + digits % 4 * 3 / 4)))
        return false;
    if (len <= cap)
        return cJSON_AddStringToObject(to, key, b64) != NULL;
    return cJSON_AddTrueToObject(to, "omitted") != NULL;
}

/* One content item as the result keeps it (see the header). */
static cJSON *content_item(const cJSON *it, size_t cap)
{
    const char *type = pl__mcp_str(it, "type");
    if (!type)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", type))
        goto fail;
    if (strcmp(type, "text") == 0) {
        if (!copy_str(o, it, "text"))
            goto fail;
    } else if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0) {
        const char *d = pl__mcp_str(it, "data");
        if (!copy_str(o, it, "mimeType") || (d && !add_data(o, "data", d, cap)))
            goto fail;
    } else if (strcmp(type, "resource") == 0) {
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(it, "resource");
        cJSON *r = cJSON_AddObjectToObject(o, "resource");
        const char *text = pl__mcp_str(res, "text"),
                   *blob = pl__mcp_str(res, "blob");
        if (!r || !copy_str(r, res, "uri") || !copy_str(r, res, "mimeType"))
            goto fail;
        if (text && strlen(text) > cap) {
            size_t k = cap; /* cut at a character boundary */
            while (k > 0 && ((unsigned char)text[k] & 0xC0) == 0x80)
                k--;
            char *cut = pl__strndup(text, k);
            bool ok = cut && cJSON_AddStringToObject(r, "text", cut) &&
                      cJSON_AddTrueToObject(r, "truncated");
            free(cut);
            if (!ok)
                goto fail;
        } else if (text && !cJSON_AddStringToObject(r, "text", text)) {
            goto fail;
        }
        if (blob && !add_data(r, "blob", blob, cap))
            goto fail;
    } else {
        /* resource_link and later types: as sent */
        cJSON_Delete(o);
        return cJSON_Duplicate(it, 1);
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* The text items of @p content joined by newlines, cut at a cap. */
static char *joined_text(const cJSON *content)
{
    pl__buf b = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, content)
    {
        const char *t = pl__mcp_str(it, "text");
        if (!t || (pl__mcp_str(it, "type") &&
                   strcmp(pl__mcp_str(it, "type"), "text") != 0))
            continue;
        size_t room = MAX_ERROR_TEXT - b.len;
        size_t k = strlen(t) < room ? strlen(t) : room;
        if ((b.len && pl__buf_append(&b, "\n", 1)) ||
            pl__buf_append(&b, t, k)) {
            pl__buf_free(&b);
            return NULL;
        }
        if (b.len >= MAX_ERROR_TEXT - 1)
            break;
    }
    if (pl__buf_append(&b, "", 1)) {
        pl__buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* Whether content item @p it is {"type": "text", "text": a string}, in
 * that order: kept as it is. */
static bool plain_text(const cJSON *it)
{
    const cJSON *type = it->child, *text = type ? type->next : NULL;
    return text && !text->next && type->string && text->string &&
           strcmp(type->string, "type") == 0 && cJSON_IsString(type) &&
           strcmp(type->valuestring, "text") == 0 &&
           strcmp(text->string, "text") == 0 && cJSON_IsString(text);
}

/* Add the steps of a tools/call result @p r, whose parts it takes. */
static int add_result(pl_steps *out, cJSON *r, size_t cap)
{
    if (!cJSON_IsObject(r))
        return pl_steps_add_error(out, PL_ERR_TOOL_BUG,
                                  "the server's result is not an object");
    cJSON *content = cJSON_GetObjectItemCaseSensitive(r, "content");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "isError"))) {
        char *text = joined_text(content);
        if (!text)
            return PL_ENOMEM;
        int st = pl_steps_add_error(out, classify(text),
                                    *text ? text : "the tool failed");
        free(text);
        return st;
    }
    if (content && !cJSON_IsArray(content))
        return pl_steps_add_error(out, PL_ERR_TOOL_BUG,
                                  "the server's result has a \"content\" "
                                  "that is not an array");
    cJSON *sc = cJSON_GetObjectItemCaseSensitive(r, "structuredContent");
    if (sc && !cJSON_IsNull(sc) && !cJSON_IsObject(sc))
        /* dropped, the result would say less than the server did */
        return pl_steps_add_error(out, PL_ERR_TOOL_BUG,
                                  "the server's result has a "
                                  "\"structuredContent\" that is not an "
                                  "object");
    cJSON *res = cJSON_CreateObject();
    cJSON *items = res ? cJSON_AddArrayToObject(res, "content") : NULL;
    int st = items ? PL_OK : PL_ENOMEM;
    /* a text item as content_item() would make it is moved, not copied */
    cJSON *it = content ? content->child : NULL;
    for (int i = 0; !st && it; i++) {
        cJSON *next = it->next;
        if (!pl__mcp_str(it, "type")) {
            /* no content item: what it meant is unknown, and a result
             * without it would say less than the server did */
            char text[128];
            snprintf(text, sizeof text,
                     "the server's content item %d is not an object with "
                     "a \"type\"",
                     i);
            cJSON_Delete(res);
            return pl_steps_add_error(out, PL_ERR_TOOL_BUG, text);
        }
        cJSON *c = plain_text(it) ? cJSON_DetachItemViaPointer(content, it)
                                  : content_item(it, cap);
        if (!c || !cJSON_AddItemToArray(items, c)) {
            cJSON_Delete(c);
            st = PL_ENOMEM;
        }
        it = next;
    }
    if (!st && cJSON_IsObject(sc)) {
        sc = cJSON_DetachItemViaPointer(r, sc);
        if (!cJSON_AddItemToObject(res, "structuredContent", sc)) {
            cJSON_Delete(sc);
            st = PL_ENOMEM;
        }
    }
    if (!st)
        st = pl_steps_add_result(out, res);
    cJSON_Delete(res);
    return st;
}

static int add_rpc_error(pl_steps *out, const pl_mcp *m, const char *tname,
                         const cJSON *e)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    const char *msg = pl__mcp_str(e, "message");
    /* as sent: a code past an int's range is no known code, and converting
     * it would be undefined behaviour */
    double code = cJSON_IsNumber(c) ? c->valuedouble : 0;
    const char *kind = code == -32602   ? PL_ERR_INVALID_INPUT
                       : code == -32601 ? PL_ERR_NOT_FOUND
                       : code == -32002 ? PL_ERR_NOT_FOUND
                       : code == -32001 ? PL_ERR_TIMEOUT
                                        : PL_ERR_TOOL_BUG;
    char text[1024];
    snprintf(text, sizeof text, "MCP server %s, tool %s: error %.15g: %.900s",
             m->name, tname, code, msg ? msg : "(no message)");
    return pl_steps_add_error(out, kind, text);
}

int pl__mcp_answer_steps(pl_steps *out, const pl_mcp *m, const char *tname,
                         cJSON *result, const cJSON *error)
{
    return error ? add_rpc_error(out, m, tname, error)
                 : add_result(out, result, m->max_inline);
}

/* ------------------------------------------------------------------------ */
/* The policy                                                               */
/* ------------------------------------------------------------------------ */

typedef struct snap_args {
    pl_mcp *m;
    tool *t;
    const char *run;
} snap_args;

/* What this process last recorded in run @p run, or NULL (under the
 * lock).  The entry found last is looked at first: a call looks its run
 * up three times, and a run's calls follow each other. */
static run_seen *seen(pl_mcp *m, const char *run)
{
    if (strcmp(m->runs[m->last_seen].id, run) == 0)
        return &m->runs[m->last_seen];
    for (size_t i = 0; i < PL__MCP_RUNS; i++)
        if (strcmp(m->runs[i].id, run) == 0) {
            m->last_seen = i;
            return &m->runs[i];
        }
    return NULL;
}

/* Note that run @p run has recorded the list @p fp (under the lock). */
static void remember(pl_mcp *m, const char *run, const char *fp)
{
    run_seen *r = seen(m, run);
    if (r && strcmp(r->fingerprint, fp) == 0)
        return;
    if (!r) {
        r = &m->runs[m->next_run++ % PL__MCP_RUNS];
        snprintf(r->id, sizeof r->id, "%s", run);
    }
    snprintf(r->fingerprint, sizeof r->fingerprint, "%s", fp);
}

/* Whether run @p run's next snapshot holds the list itself: the run has
 * not recorded it in this process, or the list changed since (under the
 * lock). */
static bool whole_due(pl_mcp *m, const char *run)
{
    const run_seen *r = seen(m, run);
    return !r || strcmp(r->fingerprint, m->fingerprint) != 0;
}

/* The tool's code identity in the list as last listed, or NULL when the
 * server lists it no more (looked up once a list, under the lock). */
static const char *code_now(const pl_mcp *m, tool *t)
{
    if (t->code_gen == m->list_gen)
        return t->code_cur;
    const char *code = NULL;
    const cJSON *it, *c = m->codes ? m->codes->child : NULL;
    cJSON_ArrayForEach(it, m->list)
    {
        const char *tn = pl__mcp_str(it, "name");
        if (tn && strcmp(tn, t->name) == 0) {
            code = cJSON_GetStringValue(c);
            break;
        }
        c = c ? c->next : NULL;
    }
    t->code_gen = m->list_gen;
    t->code_cur = code;
    return code;
}

/*
 * The side effect "mcp.tools": what the server was when the call was
 * made: its name, protocol version, the number and fingerprint of the
 * tools it lists, this tool's code identity in that list; and the list
 * itself ("list", and "codes" in its order) at the run's first call in
 * this process, and again whenever the list changed since the run last
 * recorded it.  It reads what this process knows of the server and does
 * nothing outside it, so but for the list itself it is a capture
 * (pl_ctx_capture()), durable with the call's result instead of by a
 * commit of its own before the request.
 */
static int snapshot(cJSON **out, void *user)
{
    snap_args *a = user;
    pl_mcp *m = a->m;
    pl__mcp_lock(m);
    bool whole = whole_due(m, a->run);
    const char *code = code_now(m, a->t);
    cJSON *v = cJSON_CreateObject();
    bool ok = v && cJSON_AddStringToObject(v, "server", m->name) &&
              cJSON_AddStringToObject(v, "protocol", m->version) &&
              cJSON_AddNumberToObject(v, "tools", m->list_size) &&
              cJSON_AddStringToObject(v, "fingerprint", m->fingerprint) &&
              (code ? cJSON_AddStringToObject(v, "tool", code)
                    : cJSON_AddNullToObject(v, "tool"));
    if (ok && whole)
        ok = cJSON_AddItemToObjectCS(v, "list", cJSON_Duplicate(m->list, 1)) &&
             cJSON_AddItemToObjectCS(v, "codes", cJSON_Duplicate(m->codes, 1));
    pthread_mutex_unlock(&m->lock);
    if (!ok) {
        cJSON_Delete(v);
        return PL_ENOMEM;
    }
    *out = v;
    return PL_OK;
}

/* Before a call: read what the server sent meanwhile, and list its tools
 * again if it said they changed (or was started again), before
 * @p deadline: none is asked for once it has passed.  A list that cannot
 * be read keeps the last one: the call says what is wrong. */
static void follow_list(pl_mcp *m, int64_t deadline)
{
    char why[256];
    pl__mcp_lock(m);
    pl__mcp_drain(m);
    if (m->list_changed && deadline > pl__mcp_mono_ms() &&
        pl__mcp_ensure(m, deadline, why, sizeof why) == T_OK &&
        pl__mcp_relist(m, deadline) != PL_OK)
        m->list_changed = true; /* try again at the next call */
    pthread_mutex_unlock(&m->lock);
}

/*
 * Add the result this invocation recorded, when a replay of it has
 * reached it: the stored step after its "mcp.tools" side effect.  *found
 * false if there is none.
 */
static int add_recorded(bool *found, pl_steps *out, pl_ctx *ctx)
{
    *found = false;
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, pl_ctx_engine(ctx), pl_ctx_run_id(ctx),
                           pl_ctx_path(ctx));
    size_t n = st ? 0 : pl_steps_count(l);
    for (size_t i = 0; i + 1 < n; i++) {
        const pl_step *s = pl_steps_at(l, i);
        const char *name = pl__mcp_str(pl_step_payload(s), "name");
        if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT && name &&
            strcmp(name, "mcp.tools") == 0) {
            const pl_step *r = pl_steps_at(l, i + 1);
            st = pl_steps_add(out, pl_step_type_of(r), pl_step_actor(r),
                              pl_step_payload(r));
            *found = !st;
            break;
        }
    }
    pl_steps_free(l);
    return st;
}

typedef struct call_params {
    const char *name;
    const cJSON *args;
    const char *key;
} call_params;

/*
 * A tools/call's params, {"_meta": {META_KEY: key, "progressToken": key},
 * "name", "arguments"} as cJSON prints them, written straight into the
 * message: the arguments are the action's payload itself, never copied.
 */
static bool write_params(pl__buf *b, const void *user)
{
    const call_params *p = user;
    return !pl__buf_append(b, "{\"_meta\":{\"" META_KEY "\":",
                           sizeof "{\"_meta\":{\"" META_KEY "\":" - 1) &&
           pl__mcp_append_string(b, p->key) &&
           !pl__buf_append(b, ",\"progressToken\":",
                           sizeof ",\"progressToken\":" - 1) &&
           pl__mcp_append_string(b, p->key) &&
           !pl__buf_append(b, "},\"name\":", sizeof "},\"name\":" - 1) &&
           pl__mcp_append_string(b, p->name) &&
           (!p->args || (!pl__buf_append(b, ",\"arguments\":",
                                         sizeof ",\"arguments\":" - 1) &&
                         pl__mcp_append_json(b, p->args))) &&
           !pl__buf_append(b, "}", 1);
}

/* The error result of a call whose exchange ended @p tr (not T_OK), as
 * the taxonomy (mcp.h), with the server's Retry-After as retry_after_ms
 * (the retry decorator waits it) when it gave one. */
static int transport_error(pl_steps *out, const pl_mcp *m, const char *tname,
                           int tr, const char *why, long retry_after)
{
    const char *code = tr == T_TIMEOUT                 ? PL_ERR_TIMEOUT
                       : tr == T_TOOBIG || tr == T_BAD ? PL_ERR_TOOL_BUG
                       : tr == T_AUTH                  ? PL_ERR_UNAUTHORIZED
                       : tr == T_FORBIDDEN             ? PL_ERR_FORBIDDEN
                       : tr == T_NOTFOUND              ? PL_ERR_NOT_FOUND
                       : tr == T_RATE                  ? PL_ERR_RATE_LIMITED
                       : tr == T_INVALID               ? PL_ERR_INVALID_INPUT
                                         : PL_ERR_RETRYABLE_SERVER;
    char text[512];
    snprintf(text, sizeof text, "MCP server %s, tool %s: %s", m->name, tname,
             why);
    if (retry_after < 0)
        return pl_steps_add_error(out, code, text);
    cJSON *v = cJSON_CreateObject();
    int st = v && cJSON_AddTrueToObject(v, "error") &&
                     cJSON_AddStringToObject(v, "code", code) &&
                     cJSON_AddStringToObject(v, "message", text) &&
                     cJSON_AddNumberToObject(v, "retry_after_ms",
                                             (double)retry_after)
                 ? pl_steps_add_result(out, v)
                 : PL_ENOMEM;
    cJSON_Delete(v);
    return st;
}

/* @p ms, or what is left before the call's deadline @p dl (Unix ms; 0:
 * none) when that is sooner: <= 0 once it has passed. */
static int64_t within(int64_t dl, int64_t ms)
{
    int64_t left = dl > 0 ? dl - pl__now_us() / 1000 : ms;
    return left < ms ? left : ms;
}

int pl__mcp_call_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    tool *t = user;
    pl_mcp *m = t->mcp;
    /* as a run's root, a tool not idempotent calls itself: so a crash in
     * flight gets its in-doubt rule (root_call.c) */
    bool called = false;
    int rst = t->idempotent ? PL_OK : pl__root_call(&called, ctx, a, out);
    if (rst || called)
        return rst;
    /* the list read again before the call waits start_timeout_ms, and
     * never past the call's deadline */
    int64_t dl = pl_ctx_deadline(ctx);
    if (!pl_ctx_replaying(ctx))
        follow_list(m, pl__mcp_mono_ms() + within(dl, m->start_timeout_ms));
    cJSON *snap = NULL;
    snap_args sa = {m, t, pl_ctx_run_id(ctx)};
    /* A snapshot that holds the list is made durable before the call goes
     * on, since the handle then remembers that the run holds it (a run
     * whose steps a failed commit dropped, continued in this process, must
     * record it again); the others are captures, durable with the call */
    pl__mcp_lock(m);
    bool whole = whole_due(m, sa.run);
    pthread_mutex_unlock(&m->lock);
    int sst = whole ? pl_ctx_side_effect(&snap, ctx, "mcp.tools", snapshot, &sa)
                    : pl_ctx_capture(&snap, ctx, "mcp.tools", snapshot, &sa);
    if (!sst && (whole || !cJSON_GetObjectItemCaseSensitive(snap, "list"))) {
        const char *fp = pl__mcp_str(snap, "fingerprint");
        pl__mcp_lock(m);
        remember(m, sa.run, fp ? fp : "");
        pthread_mutex_unlock(&m->lock);
    }
    bool gone = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(snap, "tool"));
    cJSON_Delete(snap);
    if (sst)
        return sst;
    if (pl_ctx_replaying(ctx)) {
        /* this policy itself is replayed (a run whose root is the tool
         * and sent its request, a check replay): its recorded result is
         * served, never asked for */
        bool found = false;
        if ((sst = add_recorded(&found, out, ctx)) || found)
            return sst;
        /* no result recorded, and still replaying: a check replay (which
         * writes nothing and sends nothing), not the end of the record */
        if (pl_ctx_replaying(ctx))
            return pl_steps_add_error(out, PL_ERR_IN_DOUBT,
                                      "a check replay reached a call with "
                                      "no recorded result: not sent");
    }
    if (gone) {
        char text[512];
        snprintf(text, sizeof text,
                 "MCP server %s no longer lists the tool %s: not sent", m->name,
                 t->name);
        return pl_steps_add_error(out, PL_ERR_NOT_FOUND, text);
    }
    if (within(dl, 1) <= 0) {
        /* no time left for an answer: a request could only act */
        char text[512];
        snprintf(text, sizeof text,
                 "MCP server %s, tool %s: not sent: the call's deadline "
                 "has passed",
                 m->name, t->name);
        return pl_steps_add_error(out, PL_ERR_TIMEOUT, text);
    }
    call_params p = {t->name, a->payload, pl_ctx_idempotency_key(ctx)};
    char why[256] = "", started[200] = "";
    cJSON *r = NULL, *e = NULL;
    pl__mcp_lock(m);
    m->retry_after_ms = -1;
    /* a server started again here (a session begun again) has
     * start_timeout_ms for its handshake, as at registration; then the
     * answer has timeout_ms: both within the call's deadline */
    int tr = pl__mcp_ensure(m,
                            pl__mcp_mono_ms() + within(dl, m->start_timeout_ms),
                            started, sizeof started);
    int64_t wait = within(dl, m->timeout_ms);
    if (tr != T_OK) {
        snprintf(why, sizeof why, "%s: %s",
                 m->http ? "cannot begin a session" : "cannot start the server",
                 started);
    } else if (wait <= 0) {
        snprintf(why, sizeof why,
                 "not sent: the call's deadline passed while the server "
                 "started");
        tr = T_TIMEOUT;
    } else {
        tr = pl__mcp_rpc_with(m, "tools/call", write_params, &p,
                              pl__mcp_mono_ms() + wait, &r, &e, why,
                              sizeof why);
    }
    long retry_after = m->retry_after_ms;
    pthread_mutex_unlock(&m->lock);
    int st;
    if (tr == T_OK) {
        st = pl__mcp_answer_steps(out, m, t->name, r, e);
    } else if (tr == T_NOMEM) {
        st = pl__err(PL_ENOMEM, "MCP server %s, tool %s: %s", m->name, t->name,
                     why);
    } else {
        st = transport_error(out, m, t->name, tr, why, retry_after);
    }
    cJSON_Delete(r);
    cJSON_Delete(e);
    return st;
}
