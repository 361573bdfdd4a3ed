/*
 * web_route.c -- ledger-web's answer to a request, whatever carried it:
 * who may ask (the token, the Host of a loopback server, the CSRF token
 * and the Origin of every POST), the bounds of a request, the page's
 * embedded files, the routes of the JSON API, and the JSON every answer
 * of the API is.  web_http.c hands it libmicrohttpd's requests and sends
 * what it answers; fuzz/fuzz_web.c hands it requests decoded from bytes.
 *
 * Routes (docs/tools.md is the API's manual):
 *   GET  /  /index.html  /app.js  /style.css ...   the page (tools/web/)
 *   GET  /login?token=T                            the cookie, then /
 *   GET  /api/session  /api/runs  /api/runs/ID  /api/runs/ID/timeline
 *        /api/runs/ID/export  /api/overview  /api/inbox  /api/events
 *   POST /api/runs/ID/{answer,continue,fork,upgrade,check,verify,signal,
 *                    cancel,delete}
 *        /api/batch/{continue,cancel,delete}
 * A path asked with the method it does not take is 405, its methods in
 * Allow.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "web.h"
#include "web_assets.h"
#include "web_guard.h"

#define COOKIE "pl_web"

/* ---- replies ---------------------------------------------------------------- */

int web_fail(cJSON **out, int status, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON_Delete(*out);
    *out = cJSON_CreateObject();
    if (*out) {
        cJSON_AddStringToObject(*out, "error", code);
        cJSON_AddStringToObject(*out, "message", msg);
    }
    return status;
}

int web_http_status(int st)
{
    switch (st) {
    case PL_ENOTFOUND: return 404;
    case PL_EBUSY:
    case PL_ESTATE:
    case PL_EEXIST: /* a new run's id taken */
    case PL_ESUSPENDED:
    case PL_ECANCELLED:
    case PL_ENEWERCODE: /* left as it was for newer code: a refusal */
        return 409;
    case PL_EINVAL:
    case PL_ETOKEN:
    case PL_EJSON:
    case PL_ELIMIT: return 400;
    default: return 500;
    }
}

int web_fail_status(cJSON **out, int st, const char *what)
{
    return web_fail(out, web_http_status(st), pl_status_name(st), "%s: %s",
                    what, pl_errmsg());
}

const char *web_arg(const web_req *r, const char *name)
{
    return r->src->get(r->conn, WEB_ARG, name);
}

const char *web_header(const web_req *r, const char *name)
{
    return r->src->get(r->conn, WEB_HEADER, name);
}

static void add_header(web_reply *out, const char *name, const char *value)
{
    if (out->n_headers == WEB_REPLY_HEADERS)
        return;
    out->headers[out->n_headers].name = name;
    snprintf(out->headers[out->n_headers].value, sizeof out->headers[0].value,
             "%s", value);
    out->n_headers++;
}

char *web_json_inert(char *text)
{
    size_t n = 0, len = strlen(text);
    for (size_t i = 0; i < len; i++)
        n += text[i] == '<' || text[i] == '>' || text[i] == '&';
    if (!n)
        return text;
    char *out = malloc(len + 5 * n + 1), *o = out;
    for (size_t i = 0; out && i < len; i++) {
        char ch = text[i];
        if (ch == '<' || ch == '>' || ch == '&') {
            memcpy(o,
                   ch == '<'   ? "\\u003c"
                   : ch == '>' ? "\\u003e"
                               : "\\u0026",
                   6);
            o += 6;
        } else {
            *o++ = ch;
        }
    }
    if (out)
        *o = '\0';
    free(text);
    return out;
}

/* @p doc (taken) as the answer, with @p status. */
static void json_reply(web_reply *out, int status, cJSON *doc)
{
    char *text = doc ? pl_json_print(doc, false) : NULL;
    cJSON_Delete(doc);
    if (text)
        text = cli_json_safe(text);
    if (text)
        text = web_json_inert(text);
    out->type = "application/json";
    out->api = true;
    if (!text) {
        static char oom[] = "{\"error\":\"PL_ENOMEM\",\"message\":\"out of "
                            "memory\"}";
        out->status = 500;
        out->body = oom;
        out->len = strlen(oom);
        return;
    }
    out->status = status;
    out->body = text;
    out->len = strlen(text);
    out->own = true;
}

static void error_reply(web_reply *out, int status, const char *code,
                        const char *msg)
{
    cJSON *doc = NULL;
    web_fail(&doc, status, code, "%s", msg);
    json_reply(out, status, doc);
}

void web_reply_free(web *w, web_reply *out)
{
    if (out->own)
        free(out->body);
    if (out->fd >= 0)
        close(out->fd); /* the file is unnamed: its space goes with it */
    web_export_leave(out->slot);
    if (out->events)
        web_sse_leave(w);
    *out = (web_reply){.fd = -1};
}

/* ---- the page's files -------------------------------------------------------- */

static const char *content_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".woff2", "font/woff2"},
        {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i].ext))
            return types[i].type;
    return "application/octet-stream";
}

static void asset(const web_req *r, web_reply *out)
{
    const char *url = !strcmp(r->url, "/") ? "/index.html" : r->url;
    const web_asset *a = web_assets;
    while (a->path && strcmp(a->path, url) != 0)
        a++;
    if (!a->path) {
        error_reply(out, 404, "not_found", "no such page");
        return;
    }
    /* the bytes' FNV-1a hash: the same build serves the same ETag */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < a->len; i++)
        h = (h ^ a->bytes[i]) * 1099511628211ull;
    char etag[24];
    snprintf(etag, sizeof etag, "\"%016llx\"", (unsigned long long)h);
    const char *inm = web_header(r, "If-None-Match");
    bool same = inm && !strcmp(inm, etag);
    out->status = same ? 304 : 200;
    out->type = content_type(a->path);
    out->body = same ? NULL : (char *)a->bytes;
    out->len = same ? 0 : a->len;
    /* revalidated each time: a new build's page is never stale */
    add_header(out, "Cache-Control", "no-cache");
    add_header(out, "ETag", etag);
}

/* ---- who may ask ---------------------------------------------------------------- */

/* Compare without an early exit, so timing says nothing of the token. */
static bool same_secret(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < na; i++)
        d |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return d == 0;
}

static bool authorized(web *w, const web_req *r)
{
    if (!w->token)
        return true;
    const char *auth = web_header(r, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7) &&
        same_secret(auth + 7, w->token))
        return true;
    const char *cookie = r->src->get(r->conn, WEB_COOKIE, COOKIE);
    return cookie && same_secret(cookie, w->token);
}

/*
 * Without a token, only a page served from a loopback name may ask: a
 * Host naming anything else is a page of another site whose name was
 * made to point here (DNS rebinding).
 */
static bool host_ok(web *w, const web_req *r)
{
    if (w->token)
        return true;
    const char *host = web_header(r, "Host");
    if (!host)
        return false;
    char name[128];
    size_t n = strlen(host);
    if (n >= sizeof name)
        return false;
    memcpy(name, host, n + 1);
    if (name[0] == '[') {
        char *end = strchr(name, ']');
        if (!end)
            return false;
        *end = '\0';
        return !strcmp(name + 1, "::1");
    }
    char *colon = strchr(name, ':');
    if (colon)
        *colon = '\0';
    struct in_addr a4;
    if (!strcmp(name, "localhost"))
        return true;
    return inet_pton(AF_INET, name, &a4) == 1 &&
           (ntohl(a4.s_addr) >> 24) == 127;
}

static void login(web *w, const web_req *r, web_reply *out)
{
    const char *t = web_arg(r, "token");
    if (!w->token) {
        error_reply(out, 404, "no_token",
                    "this server asks for no token: open / instead");
        return;
    }
    if (!t || !same_secret(t, w->token)) {
        error_reply(out, 403, "bad_token", "wrong or missing token");
        return;
    }
#define COOKIE_ATTRS "; Path=/; HttpOnly; SameSite=Strict"
    char cookie[sizeof out->headers[0].value];
    /* web_main.c takes no longer token: the header is never cut */
    _Static_assert(sizeof COOKIE "=" + WEB_TOKEN_MAX + sizeof COOKIE_ATTRS <=
                       sizeof cookie,
                   "a token's cookie fits its header");
    snprintf(cookie, sizeof cookie, COOKIE "=%s" COOKIE_ATTRS, w->token);
    out->status = 303;
    out->api = true;
    add_header(out, "Set-Cookie", cookie);
    add_header(out, "Location", "/");
}

/* ---- routing ------------------------------------------------------------------------ */

static void export(web *w, const web_req *r, const char *id, web_reply *out)
{
    bool mine;
    web_slot *slot = web_export_enter(r->client, &mine);
    cJSON *doc = NULL;
    if (!slot) {
        if (mine)
            web_fail(&doc, 503, "busy",
                     "this address has %d exports under way: wait for one "
                     "to end",
                     WEB_EXPORTS_PER_IP);
        else
            web_fail(&doc, 503, "busy",
                     "%d exports are under way: try again shortly",
                     WEB_EXPORTS);
        json_reply(out, 503, doc);
        return;
    }
    int fd = -1;
    size_t len = 0;
    int status = api_export(w, id, &fd, &len, &doc);
    if (status != 200) {
        web_export_leave(slot);
        json_reply(out, status, doc);
        return;
    }
    cJSON_Delete(doc);
    char disp[PL_MAX_RUN_ID + 64];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s.jsonl\"", id);
    *out = (web_reply){.status = 200,
                       .type = "application/x-ndjson",
                       .len = len,
                       .api = true,
                       .fd = fd,
                       .slot = slot};
    add_header(out, "Content-Disposition", disp);
}

static void events(web *w, web_reply *out)
{
    if (!web_sse_enter(w)) {
        error_reply(out, 503, "busy",
                    "too many event streams open: close a page");
        return;
    }
    out->status = 200;
    out->type = "text/event-stream";
    out->api = true;
    out->events = true;
}

/* "/api/runs/ID[/what]": the id into @p id, the rest in *what ("" for
 * none).  False for a path of another shape. */
static bool run_path(const char *url, char *id, size_t n, const char **what)
{
    const char *p = url + strlen("/api/runs/");
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len == 0 || len >= n)
        return false;
    memcpy(id, p, len);
    id[len] = '\0';
    *what = slash ? slash + 1 : "";
    return !strchr(*what, '/');
}

#define READS "GET, HEAD"

/* The methods API path @p url takes, as an Allow header gives them: READS
 * for a read, "POST" for an action, NULL for a path the API has not. */
static const char *api_methods(const char *url)
{
    static const char *const reads[] = {"/api/session", "/api/runs",
                                        "/api/overview", "/api/inbox",
                                        "/api/events"};
    static const char *const run_reads[] = {"", "steps", "step", "timeline",
                                            "export"};
    if (!strncmp(url, "/api/batch/", 11))
        return web_is_action(url + 11, true) ? "POST" : NULL;
    if (strncmp(url, "/api/runs/", 10) != 0) {
        for (size_t i = 0; i < sizeof reads / sizeof *reads; i++)
            if (!strcmp(url, reads[i]))
                return READS;
        return NULL;
    }
    char id[PL_MAX_RUN_ID + 2];
    const char *what;
    if (!run_path(url, id, sizeof id, &what))
        return NULL;
    for (size_t i = 0; i < sizeof run_reads / sizeof *run_reads; i++)
        if (!strcmp(what, run_reads[i]))
            return READS;
    return web_is_action(what, false) ? "POST" : NULL;
}

/* 405, with the methods the path takes in Allow. */
static void not_allowed(web_reply *out, const char *allow, const char *msg)
{
    error_reply(out, 405, "method", msg);
    add_header(out, "Allow", allow);
}

static void route_get(web *w, web_req *r, web_reply *out)
{
    const char *url = r->url;
    cJSON *doc = NULL;
    int status;
    if (!strcmp(url, "/api/events")) {
        events(w, out);
        return;
    }
    if (!strcmp(url, "/api/session"))
        status = api_session(w, r, &doc);
    else if (!strcmp(url, "/api/runs"))
        status = api_runs(w, r, &doc);
    else if (!strcmp(url, "/api/overview"))
        status = api_overview(w, r, &doc);
    else if (!strcmp(url, "/api/inbox"))
        status = api_inbox(w, r, &doc);
    else if (!strncmp(url, "/api/runs/", 10)) {
        char id[PL_MAX_RUN_ID + 2];
        const char *what;
        if (!run_path(url, id, sizeof id, &what))
            status = web_fail(&doc, 404, "not_found", "no such API path");
        else if (!cli_run_id_ok(id))
            status = web_fail(&doc, 400, "bad_run_id",
                              "not a run id: 1..%d bytes of [A-Za-z0-9._:@~-]",
                              PL_MAX_RUN_ID);
        else if (!*what)
            status = api_run(w, id, &doc);
        else if (!strcmp(what, "steps"))
            status = api_steps(w, id, r, &doc);
        else if (!strcmp(what, "step"))
            status = api_step(w, id, r, &doc);
        else if (!strcmp(what, "timeline"))
            status = api_timeline(w, id, &doc);
        else if (!strcmp(what, "export")) {
            export(w, r, id, out);
            return;
        } else
            status = web_fail(&doc, 404, "not_found", "no such API path");
    } else
        status = web_fail(&doc, 404, "not_found", "no such API path");
    json_reply(out, status, doc);
}

static bool is_post_path(const char *url)
{
    return !strncmp(url, "/api/runs/", 10) || !strncmp(url, "/api/batch/", 11);
}

/* POST /api/runs/ID/verify: an action that writes nothing (pl_run_verify()
 * reads the run), which --read-only serves as ledger-dump --verify does. */
static bool is_verify(const char *url)
{
    char id[PL_MAX_RUN_ID + 2];
    const char *what;
    return !strncmp(url, "/api/runs/", 10) &&
           run_path(url, id, sizeof id, &what) && !strcmp(what, "verify");
}

static void route_post(web *w, web_req *r, web_reply *out)
{
    if (!is_post_path(r->url)) {
        error_reply(out, 404, "not_found", "no such API path");
        return;
    }
    if (w->read_only && !is_verify(r->url)) {
        error_reply(out, 403, "read_only",
                    "this server was started with --read-only: it changes "
                    "nothing");
        return;
    }
    const char *csrf = web_header(r, "X-CSRF-Token");
    if (!csrf || !same_secret(csrf, w->csrf)) {
        error_reply(out, 403, "csrf",
                    "a POST needs the header X-CSRF-Token with the value GET "
                    "/api/session gives");
        return;
    }
    if (!web_same_origin(r)) {
        error_reply(out, 403, "origin",
                    "a POST from a page of another origin (Origin, "
                    "Sec-Fetch-Site) is refused");
        return;
    }
    if (r->too_big) {
        error_reply(out, 413, "too_large", "the request body is too large");
        return;
    }
    cJSON *doc = NULL;
    int status;
    if (!strncmp(r->url, "/api/batch/", 11)) {
        status = api_batch(w, r->url + 11, r, &doc);
    } else {
        char id[PL_MAX_RUN_ID + 2];
        const char *what;
        if (!run_path(r->url, id, sizeof id, &what) || !*what)
            status = web_fail(&doc, 404, "not_found", "no such API path");
        else if (!cli_run_id_ok(id))
            status = web_fail(&doc, 400, "bad_run_id",
                              "not a run id: 1..%d bytes of [A-Za-z0-9._:@~-]",
                              PL_MAX_RUN_ID);
        else
            status = api_action(w, id, what, r, &doc);
    }
    json_reply(out, status, doc);
}

/* A parameter read given twice: 400 duplicate_parameter in @p out. */
static bool given_twice(const web_req *r, web_reply *out)
{
    const char *twice = web_arg_twice(r);
    if (!twice)
        return false;
    char msg[64];
    snprintf(msg, sizeof msg, "the parameter %s is given twice", twice);
    error_reply(out, 400, "duplicate_parameter", msg);
    return true;
}

void web_handle(web *w, web_req *r, web_reply *out)
{
    *out = (web_reply){.fd = -1};
    if (r->target_len > WEB_TARGET_MAX) {
        char msg[128];
        snprintf(msg, sizeof msg,
                 "the request line's target is %zu bytes: at most %d",
                 r->target_len, WEB_TARGET_MAX);
        error_reply(out, 414, "uri_too_long", msg);
        out->bare = true;
        return;
    }
    if (r->head_bytes > WEB_HEAD_MAX || r->head_lines > WEB_HEAD_LINES) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the request's headers are %zu lines, %zu bytes with its "
                 "line: at most %d and %d",
                 r->head_lines, r->head_bytes, WEB_HEAD_LINES, WEB_HEAD_MAX);
        error_reply(out, 431, "headers_too_large", msg);
        out->bare = true;
        return;
    }
    if (!host_ok(w, r)) {
        error_reply(out, 403, "host",
                    "this server answers pages of its own address only (the "
                    "Host header names another)");
        return;
    }
    bool get = !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD");
    bool api = !strncmp(r->url, "/api/", 5);
    if (r->args) {
        char msg[128];
        snprintf(msg, sizeof msg, "%zu query parameters: at most %d are taken",
                 r->args, WEB_ARGS_MAX);
        if (api) {
            error_reply(out, 400, "too_many_parameters", msg);
            return;
        }
        size_t n = strlen(msg);
        char *text = malloc(n + 2);
        if (!text) {
            error_reply(out, 500, "PL_ENOMEM", "out of memory");
            return;
        }
        memcpy(text, msg, n);
        memcpy(text + n, "\n", 2);
        *out = (web_reply){.status = 400,
                           .type = "text/plain; charset=utf-8",
                           .body = text,
                           .len = n + 1,
                           .own = true,
                           .fd = -1};
        return;
    }
    if (get && !strcmp(r->url, "/login")) {
        if (!given_twice(r, out)) /* ?token=RIGHT&token=x is not a login */
            login(w, r, out);
        return;
    }
    const char *allow = api ? api_methods(r->url) : READS;
    if (!get && strcmp(r->method, "POST") != 0) {
        not_allowed(out, allow ? allow : READS ", POST", "GET or POST only");
        return;
    }
    if (!api) {
        if (get)
            asset(r, out);
        else
            not_allowed(out, READS, "the page's files are GET");
        return;
    }
    if (!authorized(w, r)) {
        error_reply(out, 401, "unauthorized",
                    "this server needs its token: open /login?token=TOKEN or "
                    "send Authorization: Bearer TOKEN");
        return;
    }
    /* a read asked by POST, an action by GET: the path says which it is */
    if (allow && get == !strcmp(allow, "POST")) {
        not_allowed(out, allow,
                    get ? "this path is an action: POST only"
                        : "this path is a read: GET only");
        return;
    }
    if (r->too_big && get) {
        error_reply(out, 413, "too_large", "the request body is too large");
        return;
    }
    if (given_twice(r, out))
        return;
    if (get)
        route_get(w, r, out);
    else
        route_post(w, r, out);
}
