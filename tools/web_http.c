/*
 * web_http.c -- ledger-web's HTTP side, on libmicrohttpd: a thread per
 * connection, bounded in number, time and size (web_guard.c for slow
 * clients); who may ask (the token, the Host of a loopback server, the
 * CSRF token and the Origin of every POST); the
 * page's embedded files; the routes of the JSON API; the headers every
 * answer carries.
 *
 * Routes (docs/tools.md is the API's manual):
 *   GET  /  /index.html  /app.js  /style.css ...   the page (tools/web/)
 *   GET  /login?token=T                            the cookie, then /
 *   GET  /api/session  /api/runs  /api/runs/ID  /api/runs/ID/timeline
 *        /api/runs/ID/export  /api/overview  /api/inbox  /api/events
 *   POST /api/runs/ID/{answer,continue,fork,upgrade,check,verify,signal,
 *                    cancel,delete}
 *        /api/batch/{continue,cancel,delete}
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "web.h"
#include "web_assets.h"
#include "web_guard.h"

#define COOKIE "pl_web"
#define HEADER_MEMORY (64 * 1024) /* a request's headers, at most */

/* Script, style and data only from the server itself, no inline script,
 * no framing, no plugin. */
#define CSP                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src "        \
    "'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; "     \
    "form-action 'self'; frame-ancestors 'none'"

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
    case PL_ECANCELLED: return 409;
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

static void common_headers(struct MHD_Response *resp, bool api)
{
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy", CSP);
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
    MHD_add_response_header(resp, "Cross-Origin-Resource-Policy",
                            "same-origin");
    if (api)
        MHD_add_response_header(resp, "Cache-Control", "no-store");
}

/* @p status with @p data (@p len bytes) of @p type; a 503 says when to
 * ask again (Retry-After). */
static enum MHD_Result send_bytes(struct MHD_Connection *c, int status,
                                  const char *type, void *data, size_t len,
                                  enum MHD_ResponseMemoryMode mode, bool api)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, data,
                                                                mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(data);
        return MHD_NO;
    }
    common_headers(resp, api);
    MHD_add_response_header(resp, "Content-Type", type);
    if (status == 503) {
        char retry[16];
        snprintf(retry, sizeof retry, "%d", WEB_RETRY_S);
        MHD_add_response_header(resp, "Retry-After", retry);
    }
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return r;
}

/*
 * @p text with every '<', '>' and '&' as a \u escape: they occur in JSON
 * only inside strings, where the escape means the same, and so no answer
 * holds markup, whatever reads it.  Takes @p text; NULL on OOM.
 */
static char *inert(char *text)
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

/*
 * @p text with each byte that is not part of well-formed UTF-8 as U+FFFD:
 * JSON is UTF-8, and a request's bytes or a store's may not be ("no
 * action \"\xff\"").  Takes @p text; NULL on OOM.
 */
static char *utf8_only(char *text)
{
    size_t len = strlen(text), at = web_utf8_bad(text, len);
    if (at == len)
        return text;
    char *out = malloc(3 * len + 1), *o = out;
    for (size_t i = 0; out && i < len;) {
        size_t ok = web_utf8_bad(text + i, len - i);
        memcpy(o, text + i, ok);
        o += ok;
        i += ok;
        if (i < len) {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    if (out)
        *o = '\0';
    free(text);
    return out;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status,
                                 cJSON *doc)
{
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (text)
        text = utf8_only(text);
    if (text)
        text = inert(text);
    if (!text) {
        static char oom[] = "{\"error\":\"PL_ENOMEM\",\"message\":\"out of "
                            "memory\"}";
        return send_bytes(c, 500, "application/json", oom, strlen(oom),
                          MHD_RESPMEM_PERSISTENT, true);
    }
    return send_bytes(c, status, "application/json", text, strlen(text),
                      MHD_RESPMEM_MUST_FREE, true);
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status,
                                  const char *code, const char *msg)
{
    cJSON *doc = NULL;
    web_fail(&doc, status, code, "%s", msg);
    return send_json(c, status, doc);
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

static enum MHD_Result send_asset(struct MHD_Connection *c, const char *url)
{
    if (!strcmp(url, "/"))
        url = "/index.html";
    const web_asset *a = web_assets;
    while (a->path && strcmp(a->path, url) != 0)
        a++;
    if (!a->path)
        return send_error(c, 404, "not_found", "no such page");
    /* the bytes' FNV-1a hash: the same build serves the same ETag */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < a->len; i++)
        h = (h ^ a->bytes[i]) * 1099511628211ull;
    char etag[24];
    snprintf(etag, sizeof etag, "\"%016llx\"", (unsigned long long)h);
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  "If-None-Match");
    bool same = inm && !strcmp(inm, etag);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        same ? 0 : a->len, same ? NULL : (void *)a->bytes,
        MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    common_headers(resp, false);
    MHD_add_response_header(resp, "Content-Type", content_type(a->path));
    /* revalidated each time: a new build's page is never stale */
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "ETag", etag);
    enum MHD_Result r = MHD_queue_response(c, same ? 304 : 200, resp);
    MHD_destroy_response(resp);
    return r;
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

static bool authorized(web *w, struct MHD_Connection *c)
{
    if (!w->token)
        return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7) &&
        same_secret(auth + 7, w->token))
        return true;
    const char *cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND,
                                                     COOKIE);
    return cookie && same_secret(cookie, w->token);
}

/*
 * Without a token, only a page served from a loopback name may ask: a
 * Host naming anything else is a page of another site whose name was
 * made to point here (DNS rebinding).
 */
static bool host_ok(web *w, struct MHD_Connection *c)
{
    if (w->token)
        return true;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
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

static enum MHD_Result login(web *w, struct MHD_Connection *c)
{
    const char *t = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                "token");
    if (!w->token)
        return send_error(c, 404, "no_token",
                          "this server asks for no token: open / instead");
    if (!t || !same_secret(t, w->token))
        return send_error(c, 403, "bad_token", "wrong or missing token");
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    char cookie[700];
    snprintf(cookie, sizeof cookie,
             COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict", w->token);
    common_headers(resp, true);
    MHD_add_response_header(resp, "Set-Cookie", cookie);
    MHD_add_response_header(resp, "Location", "/");
    enum MHD_Result r = MHD_queue_response(c, 303, resp);
    MHD_destroy_response(resp);
    return r;
}

const char *web_arg(const web_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* ---- Server-Sent Events ------------------------------------------------------------ */

typedef struct sse {
    web *w;
    uint64_t seq;
    bool hello;
} sse;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse *s = cls;
    if (!s->hello) {
        s->hello = true;
        int n = snprintf(buf, max,
                         "retry: 2000\nevent: hello\ndata: "
                         "{\"seq\":%llu}\n\n",
                         (unsigned long long)s->seq);
        return n < 0 || (size_t)n >= max ? MHD_CONTENT_READER_END_WITH_ERROR
                                         : n;
    }
    long n = web_sse_next(s->w, &s->seq, buf, max, 10000);
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n == 0) {
        static const char ping[] = ": keep-alive\n\n";
        memcpy(buf, ping, sizeof ping - 1);
        return (ssize_t)(sizeof ping - 1);
    }
    return n;
}

static void sse_free(void *cls)
{
    sse *s = cls;
    web_sse_leave(s->w);
    free(s);
}

static enum MHD_Result events(web *w, struct MHD_Connection *c)
{
    if (!web_sse_enter(w))
        return send_error(c, 503, "busy",
                          "too many event streams open: close a page");
    sse *s = calloc(1, sizeof *s);
    if (!s) {
        web_sse_leave(w);
        return send_error(c, 500, "PL_ENOMEM", "out of memory");
    }
    s->w = w;
    pthread_mutex_lock(&w->mu);
    s->seq = w->event_seq;
    pthread_mutex_unlock(&w->mu);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 4096, sse_read, s, sse_free);
    if (!resp) {
        sse_free(s);
        return MHD_NO;
    }
    common_headers(resp, true);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    enum MHD_Result r = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return r;
}

/* ---- exports ---------------------------------------------------------------------- */

/* A download of an export's file, which holds its place (web_guard.c)
 * until it ends, however it ends: libmicrohttpd frees the response when
 * it is sent, when the client goes, and when the server stops. */
typedef struct download {
    int fd;
    web_slot *slot;
} download;

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    download *d = cls;
    ssize_t n;
    do
        n = pread(d->fd, buf, max, (off_t)pos);
    while (n < 0 && errno == EINTR);
    return n > 0 ? n : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void download_free(void *cls)
{
    download *d = cls;
    close(d->fd); /* the file is unnamed: its space goes with it */
    web_export_leave(d->slot);
    free(d);
}

static enum MHD_Result send_export(web *w, struct MHD_Connection *c,
                                   const char *id)
{
    bool mine;
    web_slot *slot = web_export_enter(c, &mine);
    cJSON *out = NULL;
    if (!slot) {
        if (mine)
            web_fail(&out, 503, "busy",
                     "this address has %d exports under way: wait for one "
                     "to end",
                     WEB_EXPORTS_PER_IP);
        else
            web_fail(&out, 503, "busy",
                     "%d exports are under way: try again shortly",
                     WEB_EXPORTS);
        return send_json(c, 503, out);
    }
    download *d = malloc(sizeof *d);
    int fd = -1;
    size_t len = 0;
    int status = d ? api_export(w, id, &fd, &len, &out)
                   : web_fail(&out, 500, "PL_ENOMEM", "out of memory");
    if (status != 200) {
        free(d);
        web_export_leave(slot);
        return send_json(c, status, out);
    }
    *d = (download){fd, slot};
    struct MHD_Response *resp = MHD_create_response_from_callback(
        len, 32 * 1024, download_read, d, download_free);
    if (!resp) {
        download_free(d);
        return MHD_NO;
    }
    char disp[PL_MAX_RUN_ID + 64];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s.jsonl\"", id);
    common_headers(resp, true);
    MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
    MHD_add_response_header(resp, "Content-Disposition", disp);
    enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}

/* ---- routing ------------------------------------------------------------------------ */

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

static enum MHD_Result route_get(web *w, web_req *r)
{
    struct MHD_Connection *c = r->conn;
    const char *url = r->url;
    cJSON *out = NULL;
    int status;
    if (!strcmp(url, "/api/events"))
        return events(w, c);
    if (!strcmp(url, "/api/session"))
        status = api_session(w, r, &out);
    else if (!strcmp(url, "/api/runs"))
        status = api_runs(w, r, &out);
    else if (!strcmp(url, "/api/overview"))
        status = api_overview(w, r, &out);
    else if (!strcmp(url, "/api/inbox"))
        status = api_inbox(w, r, &out);
    else if (!strncmp(url, "/api/runs/", 10)) {
        char id[PL_MAX_RUN_ID + 2];
        const char *what;
        if (!run_path(url, id, sizeof id, &what))
            status = web_fail(&out, 404, "not_found", "no such API path");
        else if (!cli_run_id_ok(id))
            status = web_fail(&out, 400, "bad_run_id",
                              "not a run id: 1..%d bytes of [A-Za-z0-9._:-]",
                              PL_MAX_RUN_ID);
        else if (!*what)
            status = api_run(w, id, &out);
        else if (!strcmp(what, "steps"))
            status = api_steps(w, id, r, &out);
        else if (!strcmp(what, "step"))
            status = api_step(w, id, r, &out);
        else if (!strcmp(what, "timeline"))
            status = api_timeline(w, id, &out);
        else if (!strcmp(what, "export"))
            return send_export(w, c, id);
        else
            status = web_fail(&out, 404, "not_found", "no such API path");
    } else
        status = web_fail(&out, 404, "not_found", "no such API path");
    return send_json(c, status, out);
}

static bool is_post_path(const char *url)
{
    return !strncmp(url, "/api/runs/", 10) || !strncmp(url, "/api/batch/", 11);
}

static enum MHD_Result route_post(web *w, web_req *r)
{
    struct MHD_Connection *c = r->conn;
    if (!is_post_path(r->url))
        return send_error(c, 404, "not_found", "no such API path");
    if (w->read_only)
        return send_error(c, 403, "read_only",
                          "this server was started with --read-only: it "
                          "changes nothing");
    const char *csrf = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "X-CSRF-Token");
    if (!csrf || !same_secret(csrf, w->csrf))
        return send_error(c, 403, "csrf",
                          "a POST needs the header X-CSRF-Token with the "
                          "value GET /api/session gives");
    if (!web_same_origin(c))
        return send_error(c, 403, "origin",
                          "a POST from a page of another origin (Origin, "
                          "Sec-Fetch-Site) is refused");
    if (r->too_big)
        return send_error(c, 413, "too_large", "the request body is too large");
    cJSON *out = NULL;
    int status;
    if (!strncmp(r->url, "/api/batch/", 11)) {
        status = api_batch(w, r->url + 11, r, &out);
    } else {
        char id[PL_MAX_RUN_ID + 2];
        const char *what;
        if (!run_path(r->url, id, sizeof id, &what) || !*what)
            status = web_fail(&out, 404, "not_found", "no such API path");
        else if (!cli_run_id_ok(id))
            status = web_fail(&out, 400, "bad_run_id",
                              "not a run id: 1..%d bytes of [A-Za-z0-9._:-]",
                              PL_MAX_RUN_ID);
        else
            status = api_action(w, id, what, r, &out);
    }
    return send_json(c, status, out);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    web *w = cls;
    web_req *r = *con_cls; /* web_uri_seen()'s */
    if (!r || !r->conn) {
        if (!r && !(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->conn = c;
        r->method = method;
        r->url = url;
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > WEB_BODY_MAX)
            r->too_big = true;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_big || r->len + n > WEB_BODY_MAX) {
            r->too_big = true;
            return MHD_YES;
        }
        char *grown = realloc(r->body, r->len + n + 1);
        if (!grown)
            return MHD_NO;
        memcpy(grown + r->len, upload, n);
        r->body = grown;
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    web_conn_busy(c);
    if (!host_ok(w, c))
        return send_error(c, 403, "host",
                          "this server answers pages of its own address "
                          "only (the Host header names another)");
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool api = !strncmp(url, "/api/", 5);
    if (r->args) {
        char msg[128];
        snprintf(msg, sizeof msg, "%zu query parameters: at most %d are taken",
                 r->args, WEB_ARGS_MAX);
        if (api)
            return send_error(c, 400, "too_many_parameters", msg);
        size_t n = strlen(msg);
        msg[n] = '\n';
        return send_bytes(c, 400, "text/plain; charset=utf-8", msg, n + 1,
                          MHD_RESPMEM_MUST_COPY, false);
    }
    if (get && !strcmp(url, "/login"))
        return login(w, c);
    if (!get && strcmp(method, "POST") != 0)
        return send_error(c, 405, "method", "GET or POST only");
    if (!api)
        return get ? send_asset(c, url)
                   : send_error(c, 405, "method", "the page's files are GET");
    if (!authorized(w, c))
        return send_error(c, 401, "unauthorized",
                          "this server needs its token: open "
                          "/login?token=TOKEN or send Authorization: Bearer "
                          "TOKEN");
    if (r->too_big && get)
        return send_error(c, 413, "too_large", "the request body is too large");
    const char *twice = web_arg_twice(c);
    if (twice) {
        char msg[64];
        snprintf(msg, sizeof msg, "the parameter %s is given twice", twice);
        return send_error(c, 400, "duplicate_parameter", msg);
    }
    return get ? route_get(w, r) : route_post(w, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)code;
    web_req *r = *con_cls;
    web_conn_idle(c);
    if (r) {
        free(r->body);
        free(r);
        *con_cls = NULL;
    }
}

/* ---- start and stop --------------------------------------------------------------- */

static struct MHD_Daemon *g_daemon;

/* libmicrohttpd's own messages, which it would print bare on stderr: while
 * it starts, the last one is kept for the one line that says why it could
 * not; once it serves, each is a line of ours. */
static char g_start_error[256];
static _Atomic bool g_serving;

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[sizeof g_start_error];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    if (g_serving)
        cli_error("libmicrohttpd: %s", msg);
    else
        memcpy(g_start_error, msg, n + 1);
}

/* A connection answering was cut: an event stream waiting for its next
 * event finds out now, not at its next keep-alive. */
static void kick_streams(void *arg) { web_sse_kick(arg); }

bool web_http_start(web *w, const char *host, unsigned port)
{
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    const char *name = !strcmp(host, "localhost") ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, name, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, name, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        cli_error("--listen: %s is not an IP address (or localhost)",
                  QUOTE(host));
        return false;
    }
    g_start_error[0] = '\0';
    g_daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, w,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)WEB_CONN_MAX,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)WEB_CONN_PER_IP,
        MHD_OPTION_NOTIFY_CONNECTION, web_on_connection, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, web_uri_seen, NULL,
        MHD_OPTION_UNESCAPE_CALLBACK, web_unescape, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)WEB_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, w, MHD_OPTION_END);
    if (!g_daemon) {
        cli_error("cannot serve on %s port %u: %s", QUOTE(host), port,
                  g_start_error[0] ? g_start_error
                                   : "the address is in use or cannot be "
                                     "bound");
        return false;
    }
    g_serving = true;
    web_guard_start(w->stall_s, kick_streams, w);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(
        g_daemon, MHD_DAEMON_INFO_BIND_PORT);
    unsigned bound = info ? info->port : port;
    bool v6 = sa == (struct sockaddr *)&a6;
    snprintf(w->url, sizeof w->url, "http://%s%s%s:%u", v6 ? "[" : "", name,
             v6 ? "]" : "", bound);
    return true;
}

void web_http_stop(web *w)
{
    if (!g_daemon)
        return;
    /* the event streams end first, so their threads can be joined */
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
    web_guard_stop();
    MHD_stop_daemon(g_daemon);
    g_daemon = NULL;
}
