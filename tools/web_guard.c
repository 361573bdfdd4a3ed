/*
 * web_guard.c -- what ledger-web holds against a hostile client, beside
 * web_http.c's checks of who asks: a POST from another origin, a
 * parameter given twice, a NUL in a path or a parameter, bytes that are not
 * UTF-8, and a client too slow to finish its request.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "web.h"
#include "web_guard.h"

/* ---- what a request says ---------------------------------------------------- */

/*
 * A browser says which page sent a POST (Origin; Sec-Fetch-Site): a page
 * of another origin may not act here, even if it came by the CSRF token
 * somehow.  A client that sends neither (a script) is judged by the token
 * alone.
 */
bool web_same_origin(struct MHD_Connection *c)
{
    const char *site = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0)
        return false;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Origin");
    if (!origin)
        return true;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *auth = strstr(origin, "://"); /* "null" has none */
    return host && auth && !strcasecmp(auth + 3, host);
}

/* The query parameters the API reads: each at most once in a request (a
 * second value would be ignored, where a proxy or a reader of the logs
 * might take it for the one that counted). */
static const char *const known_args[] = {
    "status", "policy", "prefix", "q",  "since",   "until",  "limit",
    "order",  "cursor", "window", "id", "dry_run", "reason", "token"};
#define N_KNOWN_ARGS (sizeof known_args / sizeof known_args[0])

typedef struct arg_count {
    unsigned n[N_KNOWN_ARGS];
    const char *twice;
} arg_count;

static enum MHD_Result count_arg(void *cls, enum MHD_ValueKind kind,
                                 const char *key, const char *value)
{
    (void)kind;
    (void)value;
    arg_count *a = cls;
    for (size_t i = 0; key && i < N_KNOWN_ARGS; i++)
        if (!strcmp(key, known_args[i]) && ++a->n[i] == 2 && !a->twice)
            a->twice = known_args[i];
    return MHD_YES;
}

/* The name of a parameter given twice, or NULL. */
const char *web_arg_twice(struct MHD_Connection *c)
{
    arg_count a;
    memset(&a, 0, sizeof a);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, count_arg, &a);
    return a.twice;
}

/*
 * libmicrohttpd's decoding of %XX in the path and the parameters, but for
 * %00: the application reads them as C strings, where a NUL would cut
 * "/app.js%00.html" to "/app.js" and "a%00b" to "a".  Left as it came,
 * "%00" is refused where it is not valid (a run id, a status) and taken
 * literally where any text is (q).
 */
static int hex_digit(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

size_t web_unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *o = s;
    for (const char *p = s; *p; p++) {
        int hi = p[0] == '%' ? hex_digit(p[1]) : -1;
        int lo = hi >= 0 ? hex_digit(p[2]) : -1;
        if (lo >= 0 && (hi | lo)) {
            *o++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return (size_t)(o - s);
}

size_t web_utf8_bad(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (!len || i + len > n)
            return i;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xc0) != 0x80)
                return i;
        /* no overlong three- or four-byte form, no surrogate, nothing
         * past U+10FFFF */
        if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] > 0x9f) ||
            (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] > 0x8f))
            return i;
        i += len;
    }
    return n;
}

/* ---- slow clients ------------------------------------------------------------ */

/*
 * libmicrohttpd's timeout counts from a connection's last byte, so a
 * client that sends a byte a second keeps a connection (and its thread)
 * for ever, and WEB_CONN_MAX of them keep the server from everyone else.
 * Each connection is timed here from its start, or from its previous
 * answer: a request not whole (headers and body) WEB_REQUEST_S later is
 * cut by a shutdown() of its socket, which its thread sees as the end of
 * the connection.  An entry leaves the list (under g_conn_mu) before
 * libmicrohttpd closes its socket, so no other connection's is cut.
 */
typedef struct web_conn {
    int fd;
    int64_t since_us; /* waiting for a request since (CLOCK_MONOTONIC) */
    bool busy, cut;   /* answering; shut down */
    struct web_conn *prev, *next;
} web_conn;

static pthread_mutex_t g_conn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_conn_cv = PTHREAD_COND_INITIALIZER;
static web_conn *g_conns;
static bool g_guard_stop;
static pthread_t g_guard;
static bool g_guard_started;

static int64_t mono_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static web_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* A request of @p c is whole: answering it, no deadline. */
void web_conn_busy(struct MHD_Connection *c)
{
    web_conn *k = conn_of(c);
    pthread_mutex_lock(&g_conn_mu);
    if (k)
        k->busy = true;
    pthread_mutex_unlock(&g_conn_mu);
}

/* Answered: the next request's time starts. */
void web_conn_idle(struct MHD_Connection *c)
{
    web_conn *k = conn_of(c);
    pthread_mutex_lock(&g_conn_mu);
    if (k) {
        k->busy = false;
        k->since_us = mono_us();
    }
    pthread_mutex_unlock(&g_conn_mu);
}

void web_on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                       enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    web_conn *k = *ctx;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *i = MHD_get_connection_info(
            c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!i || !(k = calloc(1, sizeof *k)))
            return; /* unguarded: libmicrohttpd's own timeout still holds */
        k->fd = i->connect_fd;
        k->since_us = mono_us();
        pthread_mutex_lock(&g_conn_mu);
        k->next = g_conns;
        if (g_conns)
            g_conns->prev = k;
        g_conns = k;
        pthread_mutex_unlock(&g_conn_mu);
        *ctx = k;
    } else if (k) {
        pthread_mutex_lock(&g_conn_mu);
        if (k->prev)
            k->prev->next = k->next;
        else
            g_conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        pthread_mutex_unlock(&g_conn_mu);
        free(k);
        *ctx = NULL;
    }
}

static void *guard_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_conn_mu);
    while (!g_guard_stop) {
        int64_t now = mono_us();
        for (web_conn *k = g_conns; k; k = k->next)
            if (!k->busy && !k->cut &&
                now - k->since_us > (int64_t)WEB_REQUEST_S * 1000000) {
                shutdown(k->fd, SHUT_RDWR);
                k->cut = true;
            }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_sec += 1;
        pthread_cond_timedwait(&g_conn_cv, &g_conn_mu, &t);
    }
    pthread_mutex_unlock(&g_conn_mu);
    return NULL;
}

bool web_guard_start(void)
{
    g_guard_stop = false;
    g_guard_started = pthread_create(&g_guard, NULL, guard_main, NULL) == 0;
    if (!g_guard_started)
        cli_error("note: slow requests are cut after %d s of silence only, "
                  "not %d s after they start (no thread for the guard)",
                  WEB_TIMEOUT_S, WEB_REQUEST_S);
    return g_guard_started;
}

void web_guard_stop(void)
{
    if (!g_guard_started)
        return;
    pthread_mutex_lock(&g_conn_mu);
    g_guard_stop = true;
    pthread_cond_signal(&g_conn_cv);
    pthread_mutex_unlock(&g_conn_mu);
    pthread_join(g_guard, NULL);
    g_guard_started = false;
}
