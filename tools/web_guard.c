/*
 * web_guard.c -- what ledger-web holds against a hostile client, beside
 * web_http.c's checks of who asks: a POST from another origin, a
 * parameter given twice or too many of them, a NUL in a path or a
 * parameter, bytes that are not UTF-8, a client too slow to finish its
 * request or that takes none of its answer, and exports (a file each)
 * asked for at once.
 */
#define _GNU_SOURCE
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked */
#include <netinet/in.h>
#include <stddef.h>
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
bool web_same_origin(const web_req *r)
{
    const char *site = web_header(r, "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0)
        return false;
    const char *origin = web_header(r, "Origin");
    if (!origin)
        return true;
    const char *host = web_header(r, "Host");
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

static void count_arg(void *cls, const char *key)
{
    arg_count *a = cls;
    /* by libmicrohttpd's lookup, without case: "LIMIT" is read as limit */
    for (size_t i = 0; key && i < N_KNOWN_ARGS; i++)
        if (!strcasecmp(key, known_args[i]) && ++a->n[i] == 2 && !a->twice)
            a->twice = known_args[i];
}

/* The name of a parameter given twice, or NULL. */
const char *web_arg_twice(const web_req *r)
{
    arg_count a;
    memset(&a, 0, sizeof a);
    r->src->each_arg(r->conn, count_arg, &a);
    return a.twice;
}

/*
 * libmicrohttpd keeps a record of each query parameter in the connection's
 * memory (64 KiB): about a thousand exhaust it, and it closes the
 * connection without an answer, having no room left for one.  It parses
 * the query after calling this, from the request line's buffer this gets:
 * a query of too many parameters is cut to none there, so that the
 * request is whole and is answered with a 400 (web_http.c).
 */
void *web_uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    web_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL; /* without memory: libmicrohttpd's own limit holds */
    r->target_len = strlen(uri);
    char *query = strchr(uri, '?');
    if (query && r->target_len > WEB_TARGET_MAX) {
        query[1] = '\0'; /* refused (414): no parameter is read */
        return r;
    }
    if (!query)
        return r;
    size_t n = 1;
    for (const char *p = query + 1; *p; p++)
        n += *p == '&';
    if (n > WEB_ARGS_MAX) {
        query[1] = '\0';
        r->args = n;
    }
    return r;
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

/* ---- exports ------------------------------------------------------------------ */

/*
 * An export is written to a file (up to WEB_EXPORT_MAX) by the thread of
 * its connection, then downloaded from it: a place is taken from the
 * start until the download ends or is cut, when the file goes.  So at
 * most WEB_EXPORTS files (256 MiB) and threads at it, and one address
 * cannot take them all.
 */
struct web_slot {
    bool used;
    struct sockaddr_storage addr; /* the client's; AF_UNSPEC unknown */
};

static pthread_mutex_t g_slot_mu = PTHREAD_MUTEX_INITIALIZER;
static web_slot g_slots[WEB_EXPORTS];

static bool same_host(const struct sockaddr_storage *a,
                      const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                       &((const struct sockaddr_in *)b)->sin_addr,
                       sizeof(struct in_addr));
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return true; /* unknown: all one */
}

web_slot *web_export_enter(const struct sockaddr *client, bool *mine)
{
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    if (client) {
        sa_family_t f = client->sa_family;
        if (f == AF_INET || f == AF_INET6)
            memcpy(&addr, client,
                   f == AF_INET ? sizeof(struct sockaddr_in)
                                : sizeof(struct sockaddr_in6));
    }
    web_slot *slot = NULL;
    unsigned here = 0;
    pthread_mutex_lock(&g_slot_mu);
    for (size_t k = 0; k < WEB_EXPORTS; k++) {
        if (g_slots[k].used)
            here += same_host(&g_slots[k].addr, &addr);
        else if (!slot)
            slot = &g_slots[k];
    }
    *mine = here >= WEB_EXPORTS_PER_IP;
    if (*mine)
        slot = NULL;
    if (slot) {
        slot->used = true;
        slot->addr = addr;
    }
    pthread_mutex_unlock(&g_slot_mu);
    return slot;
}

void web_export_leave(web_slot *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&g_slot_mu);
    s->used = false;
    pthread_mutex_unlock(&g_slot_mu);
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
 *
 * Nor does its timeout see a client that takes none of an answer (an
 * event stream, a download) while the server's socket still has room:
 * libmicrohttpd's writes go on, into the socket's buffer.  While a
 * connection answers, the guard reads TCP's count of the bytes its client
 * has acknowledged (TCP_INFO): none more in the stall bound while bytes
 * wait for it, and the connection is reset (SO_LINGER 0, shutdown()).  A
 * client that reads, however slowly, acknowledges something; one whose
 * window is closed, nothing.
 */
typedef struct web_conn {
    int fd;
    int64_t since_us; /* waiting for a request since (CLOCK_MONOTONIC) */
    bool busy, cut;   /* answering; shut down */
    uint64_t acked;   /* bytes the client acknowledged, at stall_us */
    int64_t stall_us; /* since when it took none of those waiting */
    struct web_conn *prev, *next;
} web_conn;

static pthread_mutex_t g_conn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_conn_cv; /* on CLOCK_MONOTONIC: web_guard_start() */
static pthread_once_t g_conn_cv_once = PTHREAD_ONCE_INIT;
static bool g_conn_cv_ok;
static web_conn *g_conns;
static bool g_guard_stop;
static pthread_t g_guard;
static bool g_guard_started;
static int64_t g_stall_us;
static void (*g_on_cut)(void *);
static void *g_on_cut_arg;

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
    if (k) {
        k->busy = true;
        k->stall_us = mono_us();
    }
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

/* Has the client of @p k, answering, taken none of the bytes waiting for
 * it for the stall bound?  False where TCP does not say. */
static bool stalled(web_conn *k, int64_t now)
{
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(k->fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
        n < offsetof(struct tcp_info, tcpi_notsent_bytes) +
                sizeof ti.tcpi_notsent_bytes)
        return false; /* an old kernel: libmicrohttpd's timeout holds */
    bool waiting = ti.tcpi_unacked > 0 || ti.tcpi_notsent_bytes > 0;
    if (!waiting || ti.tcpi_bytes_acked != k->acked) {
        k->acked = ti.tcpi_bytes_acked;
        k->stall_us = now;
        return false;
    }
    return now - k->stall_us >= g_stall_us;
}

static void *guard_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_conn_mu);
    while (!g_guard_stop) {
        int64_t now = mono_us();
        bool answer_cut = false;
        for (web_conn *k = g_conns; k; k = k->next) {
            if (k->cut)
                continue;
            if (!k->busy &&
                now - k->since_us > (int64_t)WEB_REQUEST_S * 1000000) {
                shutdown(k->fd, SHUT_RDWR);
                k->cut = true;
            } else if (k->busy && stalled(k, now)) {
                /* a reset: what waits for the client is dropped */
                struct linger l = {1, 0};
                setsockopt(k->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
                shutdown(k->fd, SHUT_RDWR);
                k->cut = answer_cut = true;
            }
        }
        if (answer_cut && g_on_cut) {
            pthread_mutex_unlock(&g_conn_mu);
            g_on_cut(g_on_cut_arg);
            pthread_mutex_lock(&g_conn_mu);
        }
        struct timespec t = cli_deadline_ms(1000);
        pthread_cond_timedwait(&g_conn_cv, &g_conn_mu, &t);
    }
    pthread_mutex_unlock(&g_conn_mu);
    return NULL;
}

/* The guard's look comes a second after the last, whatever the wall clock
 * does meanwhile. */
static void conn_cv_init(void)
{
    g_conn_cv_ok = cli_cond_init_mono(&g_conn_cv);
}

bool web_guard_start(unsigned stall_s, void (*on_cut)(void *), void *arg)
{
    g_stall_us = (int64_t)stall_s * 1000000;
    g_on_cut = on_cut;
    g_on_cut_arg = arg;
    g_guard_stop = false;
    pthread_once(&g_conn_cv_once, conn_cv_init);
    g_guard_started = g_conn_cv_ok &&
                      pthread_create(&g_guard, NULL, guard_main, NULL) == 0;
    if (!g_guard_started)
        cli_error("note: slow requests, and answers a client does not "
                  "take, are cut after %d s of silence only, not %d s "
                  "after they start or %u s without progress (no thread "
                  "for the guard)",
                  WEB_TIMEOUT_S, WEB_REQUEST_S, stall_s);
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
