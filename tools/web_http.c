/*
 * web_http.c -- ledger-web's HTTP side, on libmicrohttpd: a thread per
 * connection, bounded in number, time and size (web_guard.c for slow
 * clients); a request read whole, handed to web_route.c, and its answer
 * sent with the headers every answer carries (an event stream and an
 * export's download as callbacks).
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
#include "web_guard.h"

/* What libmicrohttpd holds a request's line and headers in (and a record
 * of each header, parameter and cookie), and then the answer's headers:
 * twice what a request may have (WEB_HEAD_MAX), so that one over that is
 * read whole and refused with our JSON (web_route.c), 414 or 431, and only
 * one over this gets libmicrohttpd's own page (docs/tools.md, Bounded). */
#define HEADER_MEMORY (128 * 1024)

/* Script, style and data only from the server itself, no inline script,
 * no framing, no plugin. */
#define CSP                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src "        \
    "'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; "     \
    "form-action 'self'; frame-ancestors 'none'"

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

/* ---- where a request's values come from ------------------------------------------ */

static const char *mhd_get(void *conn, web_kind kind, const char *name)
{
    static const enum MHD_ValueKind kinds[] = {
        [WEB_HEADER] = MHD_HEADER_KIND,
        [WEB_COOKIE] = MHD_COOKIE_KIND,
        [WEB_ARG] = MHD_GET_ARGUMENT_KIND};
    return MHD_lookup_connection_value(conn, kinds[kind], name);
}

typedef struct each_arg {
    void (*fn)(void *cls, const char *name);
    void *cls;
} each_arg;

static enum MHD_Result each_one(void *cls, enum MHD_ValueKind kind,
                                const char *key, const char *value)
{
    (void)kind;
    (void)value;
    each_arg *e = cls;
    e->fn(e->cls, key);
    return MHD_YES;
}

static void mhd_each_arg(void *conn, void (*fn)(void *cls, const char *name),
                         void *cls)
{
    each_arg e = {fn, cls};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, each_one, &e);
}

static const web_src mhd_src = {mhd_get, mhd_each_arg};

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

/* ---- answers ------------------------------------------------------------------------ */

/* @p out as libmicrohttpd's response: its body, an event stream or an
 * export's file (each then theirs, freed with the response). */
static struct MHD_Response *response_of(web *w, web_reply *out)
{
    struct MHD_Response *resp = NULL;
    if (out->events) {
        sse *s = calloc(1, sizeof *s);
        if (!s)
            return NULL;
        s->w = w;
        pthread_mutex_lock(&w->mu);
        s->seq = w->event_seq;
        pthread_mutex_unlock(&w->mu);
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                 sse_read, s, sse_free);
        if (resp)
            out->events = false; /* the stream's place is the response's */
        else
            free(s);
    } else if (out->fd >= 0) {
        download *d = malloc(sizeof *d);
        if (!d)
            return NULL;
        *d = (download){out->fd, out->slot};
        resp = MHD_create_response_from_callback(out->len, 32 * 1024,
                                                 download_read, d,
                                                 download_free);
        if (resp) {
            out->fd = -1; /* the download's */
            out->slot = NULL;
        } else {
            free(d);
        }
    } else {
        resp = MHD_create_response_from_buffer(out->len, out->body,
                                               out->own
                                                   ? MHD_RESPMEM_MUST_FREE
                                                   : MHD_RESPMEM_PERSISTENT);
        if (resp)
            out->own = false; /* the response's */
    }
    return resp;
}

static enum MHD_Result send_reply(web *w, struct MHD_Connection *c,
                                  web_reply *out)
{
    struct MHD_Response *resp = response_of(w, out);
    if (!resp) {
        web_reply_free(w, out);
        return MHD_NO;
    }
    if (!out->bare)
        common_headers(resp, out->api);
    if (out->type)
        MHD_add_response_header(resp, "Content-Type", out->type);
    for (size_t i = 0; i < out->n_headers; i++)
        MHD_add_response_header(resp, out->headers[i].name,
                                out->headers[i].value);
    if (out->status == 503) {
        char retry[16];
        snprintf(retry, sizeof retry, "%d", WEB_RETRY_S);
        MHD_add_response_header(resp, "Retry-After", retry);
    }
    enum MHD_Result r = MHD_queue_response(c, (unsigned)out->status, resp);
    MHD_destroy_response(resp);
    web_reply_free(w, out);
    return r;
}

/* ---- requests ---------------------------------------------------------------------- */

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
    r->src = &mhd_src;
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    r->client = i ? i->client_addr : NULL;
    i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    r->head_bytes = i ? i->header_size : 0;
    int lines = MHD_get_connection_values(c, MHD_HEADER_KIND, NULL, NULL);
    r->head_lines = lines > 0 ? (size_t)lines : 0;
    web_reply out;
    web_handle(w, r, &out);
    return send_reply(w, c, &out);
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
