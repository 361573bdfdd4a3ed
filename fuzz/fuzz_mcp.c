/*
 * fuzz_mcp.c -- what an MCP server sends (policies/mcp/), hostile: the
 * first byte picks the surface, the next four the sizes of the pieces the
 * rest arrives in (in turn; 0: all that is left) where it arrives so.
 *   0  stdio: JSON-RPC lines as they are read (pl__mcp_take_msg()), under
 *      a cap that holds them and under one of 64..319 bytes;
 *   1  Streamable HTTP: a response body, an event stream or JSON (the
 *      5th byte's low bit), for the request of id 7 (pl__mcp_http_read());
 *   2  a tools/list result's tools into policies (pl__mcp_take_list());
 *   3  a tools/call answer into its step (pl__mcp_answer_steps()).
 * Whatever the bytes: a status, never a crash or a leak.  Read lines and
 * bodies give objects, the same ones however the bytes were cut (under a
 * cap that holds them), the answer the one of the request's id; the lines
 * skipped are counted as they are here (not blank, not an object); every
 * answer (result or error) becomes exactly one action_result, an error
 * one with a code of the taxonomy.  A tool list that registers gives a
 * policy per tool, each in the registry and its tool listed under it; one
 * that is refused leaves no policy of it behind.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "mcp_int.h"
#include "fuzz.h"

#define SERVER "srv"
#define TAKEN SERVER ".taken" /* a policy registered before the list */

static pl_mcp *handle(size_t max_msg)
{
    pl_mcp *m = calloc(1, sizeof *m);
    CHECK(m != NULL);
    m->wfd = m->rfd = m->err_fd = -1;
    m->max_msg = max_msg;
    m->max_inline = 64;
    pthread_mutex_init(&m->lock, NULL);
    m->name = pl__strdup(SERVER);
    m->buf = malloc(max_msg + 1);
    CHECK(m->name && m->buf);
    return m;
}

/* The piece starting at @p at: its size from @p sizes in turn. */
static size_t piece(const uint8_t *sizes, unsigned k, size_t at, size_t len)
{
    size_t n = sizes[k % 4] ? sizes[k % 4] : len - at;
    return n < len - at ? n : len - at;
}

/* One tools/call answer, {"result"} or {"error"}, into exactly one
 * action_result. */
static void answer(const pl_mcp *m, cJSON *msg)
{
    cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(msg, "result");
    cJSON *e = cJSON_DetachItemFromObjectCaseSensitive(msg, "error");
    if (!r && !e)
        return;
    pl_steps *steps = NULL;
    CHECK(pl_steps_new(&steps) == PL_OK);
    steps->default_actor = SERVER ".tool";
    int st = pl__mcp_answer_steps(steps, m, "tool", r, e);
    CHECK(st == PL_OK || st == PL_ENOMEM || st == PL_ELIMIT || st == PL_EJSON ||
          st == PL_EINVAL);
    if (st == PL_OK) {
        CHECK(pl_steps_count(steps) == 1);
        const pl_step *s = pl_steps_at(steps, 0);
        CHECK(pl_step_type_of(s) == PL_STEP_ACTION_RESULT);
        const cJSON *p = pl_step_payload(s);
        CHECK(cJSON_IsObject(p));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "error"))) {
            static const char *codes[] = {
                PL_ERR_NOT_FOUND, PL_ERR_FORBIDDEN,     PL_ERR_UNAUTHORIZED,
                PL_ERR_TIMEOUT,   PL_ERR_INVALID_INPUT, PL_ERR_TOOL_BUG};
            const char *c = pl__mcp_str(p, "code");
            bool known = false;
            for (size_t i = 0; c && i < sizeof codes / sizeof *codes; i++)
                known = known || strcmp(c, codes[i]) == 0;
            CHECK(known && pl__mcp_str(p, "message"));
        } else {
            CHECK(!e &&
                  cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(p,
                                                                 "content")));
        }
    }
    pl_steps_free(steps);
    cJSON_Delete(r);
    cJSON_Delete(e);
}

/* Read @p body's lines in pieces (all at once: @p sizes NULL) under the
 * cap @p max_msg; the messages printed one a line into @p seen. */
static void lines(pl__buf *seen, size_t *garbage, const uint8_t *sizes,
                  const char *body, size_t len, size_t max_msg)
{
    pl_mcp *m = handle(max_msg);
    size_t at = 0;
    *garbage = 0;
    for (unsigned k = 0; at < len; k++) {
        /* as recv() fills the buffer: at most what it has room for */
        size_t n = sizes ? piece(sizes, k, at, len) : len - at;
        size_t room = m->max_msg + 1 - m->len;
        n = n < room ? n : room;
        memcpy(m->buf + m->len, body + at, n);
        m->len += n;
        at += n;
        cJSON *msg;
        while (pl__mcp_take_msg(m, &msg, garbage) > 0) {
            CHECK(cJSON_IsObject(msg));
            char *text = cJSON_PrintUnformatted(msg);
            CHECK(text && !pl__buf_append(seen, text, strlen(text)) &&
                  !pl__buf_append(seen, "\n", 1));
            free(text);
            answer(m, msg);
            cJSON_Delete(msg);
        }
        CHECK(m->len <= m->max_msg + 1 && !memchr(m->buf, '\n', m->len));
        if (m->len > m->max_msg)
            break; /* a line too long: the server is stopped */
    }
    pl_mcp_close(m);
}

/* The lines of @p body that are neither JSON objects nor blank ("" or
 * "\r"), counted here, each read as a server's line is read
 * (pl__mcp_parse(): one JSON value and nothing after it, a string holding
 * a NUL refused; it may mend the copy it is given). */
static size_t garbage_in(const char *body, size_t len)
{
    size_t n = 0;
    for (const char *p = body, *nl;
         (nl = memchr(p, '\n', len - (size_t)(p - body))); p = nl + 1) {
        size_t k = (size_t)(nl - p);
        char *copy = malloc(k + 1);
        CHECK(copy);
        memcpy(copy, p, k);
        copy[k] = '\0';
        cJSON *v = NULL;
        CHECK(pl__mcp_parse(&v, copy, k) == PL_OK);
        n += !cJSON_IsObject(v) && k && !(k == 1 && *p == '\r');
        cJSON_Delete(v);
        free(copy);
    }
    return n;
}

static void stdio(const uint8_t *sizes, const char *body, size_t len)
{
    pl__buf a = {0}, b = {0}, c = {0};
    size_t ga, gb, gc;
    lines(&a, &ga, sizes, body, len, len + 1);
    lines(&b, &gb, NULL, body, len, len + 1);
    CHECK(a.len == b.len && (!a.len || !memcmp(a.data, b.data, a.len)));
    CHECK(ga == gb && ga == garbage_in(body, len));
    lines(&c, &gc, sizes, body, len, 64 + sizes[0]);
    pl__buf_free(&a);
    pl__buf_free(&b);
    pl__buf_free(&c);
}

#ifdef PL_MCP_HTTP
static cJSON *http_read(pl__mcp_http *h, bool stream, const uint8_t *sizes,
                        const char *body, size_t len, bool *too_big)
{
    const char **pieces = malloc((len + 1) * sizeof *pieces);
    size_t *lens = malloc((len + 1) * sizeof *lens);
    CHECK(pieces && lens);
    size_t n = 0;
    for (size_t at = 0; at < len; n++) {
        lens[n] = sizes ? piece(sizes, (unsigned)n, at, len) : len - at;
        pieces[n] = body + at;
        at += lens[n];
    }
    cJSON *a = pl__mcp_http_read(h, 7, stream, pieces, lens, n, too_big);
    free(pieces);
    free(lens);
    if (a) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        CHECK(!*too_big && cJSON_IsObject(a) && cJSON_IsNumber(id) &&
              id->valuedouble == 7 &&
              !cJSON_GetObjectItemCaseSensitive(a, "method"));
    }
    return a;
}

static void http(const uint8_t *sizes, const char *body, size_t len)
{
    bool stream = sizes[3] & 1;
    pl__mcp_http *big = pl__mcp_http_new("http://127.0.0.1:9/mcp", NULL,
                                         len + 1);
    pl__mcp_http *small = pl__mcp_http_new("http://127.0.0.1:9/mcp", NULL,
                                           64 + sizes[0]);
    CHECK(big && small);
    bool tb1, tb2, tb3;
    cJSON *a = http_read(big, stream, sizes, body, len, &tb1);
    cJSON *b = http_read(big, stream, NULL, body, len, &tb2);
    CHECK(!tb1 && !tb2);
    CHECK((!a && !b) || same_json(a, b));
    cJSON *c = http_read(small, stream, sizes, body, len, &tb3);
    pl_mcp *m = handle(64);
    if (a)
        answer(m, a);
    pl_mcp_close(m);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    pl__mcp_http_free(big);
    pl__mcp_http_free(small);
}

#endif

static int noop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)out, (void)user;
    return PL_OK;
}

/* An answer's JSON as the engine reads it (pl__mcp_parse()): NULL when
 * refused. */
static cJSON *parsed(const char *body, size_t len)
{
    cJSON *v = NULL;
    return pl_json_parse(&v, body, len) ? NULL : v;
}

static void tools_list(const char *body, size_t len)
{
    cJSON *v = parsed(body, len);
    cJSON *list = cJSON_IsObject(v)
                      ? cJSON_DetachItemFromObjectCaseSensitive(v, "tools")
                      : NULL;
    if (!cJSON_IsArray(list)) {
        cJSON_Delete(list);
        list = cJSON_IsArray(v) ? v : NULL;
        v = list ? NULL : v;
    }
    cJSON_Delete(v);
    if (!list)
        return;
    pl_registry *reg = NULL;
    CHECK(pl_registry_new(&reg) == PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = TAKEN;
    d.fn = noop;
    CHECK(pl_registry_add(reg, &d) == PL_OK);
    pl_mcp *m = handle(64);
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    /* the names, for after (the list is the handle's once taken) */
    cJSON *names = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        const char *tn = pl__mcp_str(it, "name");
        char *pn = tn ? pl__asprintf(SERVER ".%s", tn) : NULL;
        if (pn && strcmp(pn, TAKEN) != 0)
            cJSON_AddItemToArray(names, cJSON_CreateString(pn));
        free(pn);
    }
    int n = cJSON_GetArraySize(list);
    int st = pl__mcp_take_list(m, reg, list, &o);
    CHECK(st == PL_OK || st == PL_EIO || st == PL_EINVAL || st == PL_EEXIST ||
          st == PL_ENOMEM || st == PL_ELIMIT);
    CHECK(st == PL_OK || *pl_errmsg());
    if (st == PL_OK) {
        CHECK(pl_mcp_tool_count(m) == (size_t)n);
        cJSON_ArrayForEach(it, names)
        {
            CHECK(pl_registry_find(reg, it->valuestring) != NULL);
            CHECK(pl_mcp_tool(m, it->valuestring) != NULL);
        }
    } else {
        CHECK(pl_mcp_tool_count(m) == 0);
        cJSON_ArrayForEach(it, names)
            CHECK(pl_registry_find(reg, it->valuestring) == NULL);
    }
    CHECK(pl_registry_find(reg, TAKEN) != NULL);
    cJSON_Delete(names);
    pl_registry_free(reg);
    pl_mcp_close(m);
}

static void tools_call(const char *body, size_t len)
{
    cJSON *v = parsed(body, len);
    pl_mcp *m = handle(64);
    if (cJSON_IsObject(v))
        answer(m, v);
    pl_mcp_close(m);
    cJSON_Delete(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    const char *body = (const char *)data + 5;
    size_t len = size - 5;
    unsigned surface = data[0] % 4;
    if (surface == 0)
        stdio(data + 1, body, len);
#ifdef PL_MCP_HTTP
    else if (surface == 1)
        http(data + 1, body, len);
#endif
    else if (surface == 2)
        tools_list(body, len);
    else if (surface == 3)
        tools_call(body, len);
    return 0;
}
