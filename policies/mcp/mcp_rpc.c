/*
 * mcp_rpc.c -- JSON-RPC with an MCP server: the stdio transport, and a
 * request over either transport.
 *
 * The stdio transport: the server is a child process in a process group
 * of its own, killed with the engine's process (pl__child_prepare()).
 * Its standard input and output are Unix sockets, so a write to a server
 * that is gone is EPIPE (MSG_NOSIGNAL), never SIGPIPE.  Messages are
 * JSON-RPC 2.0 objects, one a line:
 *
 *   client -> server   {"jsonrpc": "2.0", "id": N, "method": M, "params": P}
 *                      {"jsonrpc": "2.0", "method": "notifications/..."}
 *                      {"jsonrpc": "2.0", "id": X, "result"|"error": ...}
 *                      (the answer to a request of the server)
 *   server -> client   the same three shapes
 *
 * Reading keeps at most max_message_bytes of a line: a longer one stops
 * the server.  Its output is read blocking, under a receive timeout of at
 * most a second (SO_RCVTIMEO, set only when it changes): waiting for an
 * answer is one recv(), not a poll() and a read() (a poll() of a socket
 * with data costs about as much again as the recv()), and the deadline is
 * looked at after each.  One request is in flight at a time (the handle's
 * lock); answers to other ids (a request that timed out) are dropped.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mcp_int.h"
#include "platform.h"

/* ------------------------------------------------------------------------ */
/* The process                                                              */
/* ------------------------------------------------------------------------ */

/* Wait up to @p ms for the server to exit; true when it was reaped. */
static bool reap_within(pid_t pid, int64_t ms)
{
    int64_t end = pl__mcp_mono_ms() + ms;
    for (;;) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        if (pl__mcp_mono_ms() >= end)
            return false;
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Stop the server: its input closed, then SIGTERM, then SIGKILL, each to
 * its process group. */
void pl__mcp_stop(pl_mcp *m)
{
    m->up = m->quiet = false;
    pl__mcp_close_fd(&m->wfd);
    pl__mcp_close_fd(&m->rfd);
    m->len = 0;
    if (m->pid <= 0)
        return;
    if (!reap_within(m->pid, 1000)) {
        kill(-m->pid, SIGTERM);
        if (!reap_within(m->pid, 1000)) {
            kill(-m->pid, SIGKILL);
            waitpid(m->pid, NULL, 0);
        }
    }
    m->pid = 0;
}

/* Start the server.  T_OK, or T_DEAD with @p why set. */
int pl__mcp_spawn(pl_mcp *m, char *why, size_t n)
{
    int sin[2] = {-1, -1}, sout[2] = {-1, -1}, ep[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sin) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, sout) != 0 || pipe(ep) != 0) {
        snprintf(why, n, "cannot make pipes: %s", strerror(errno));
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        pl__mcp_cloexec(sin[i]);
        pl__mcp_cloexec(sout[i]);
        pl__mcp_cloexec(ep[i]);
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "cannot fork: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0)
        pl__child_exec(parent, sin[1], sout[1], m->err_fd, -1, ep[1], m->argv,
                       m->env);
    pl__mcp_close_fd(&sin[1]);
    pl__mcp_close_fd(&sout[1]);
    pl__mcp_close_fd(&ep[1]);
    int e = 0;
    ssize_t r;
    do
        r = read(ep[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    pl__mcp_close_fd(&ep[0]);
    if (r == (ssize_t)sizeof e) {
        waitpid(pid, NULL, 0);
        snprintf(why, n, "cannot run '%s': %s", m->argv[0], strerror(e));
        goto fail;
    }
    m->pid = pid;
    m->wfd = sin[0];
    m->rfd = sout[0];
    m->rcv_ms = 0;
    m->len = 0;
    return T_OK;
fail:
    for (int i = 0; i < 2; i++) {
        pl__mcp_close_fd(&sin[i]);
        pl__mcp_close_fd(&sout[i]);
        pl__mcp_close_fd(&ep[i]);
    }
    return T_DEAD;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */
/* ------------------------------------------------------------------------ */

/* Append the string literal @p s. */
#define APPEND(b, s) pl__buf_append(b, s, sizeof s - 1)

/* Append @p v printed as compact JSON to @p b, its numbers exact
 * (pl_json_print(): cJSON alone sends 2^53 - 1 as 9.00719925474099e+15,
 * another number, to the tool).  False when out of memory. */
bool pl__mcp_append_json(pl__buf *b, const cJSON *v)
{
    char *text = pl_json_print(v, false);
    bool ok = text && !pl__buf_append(b, text, strlen(text));
    free(text);
    return ok;
}

bool pl__mcp_append_string(pl__buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    if (APPEND(b, "\""))
        return false;
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 32 && c != '"' && c != '\\')
            continue;
        if (pl__buf_append(b, run, (size_t)(s - run)))
            return false;
        if (!c)
            break;
        char esc[6] = {'\\', (char)c, 0};
        size_t k = 2;
        switch (c) {
        case '"':
        case '\\': break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        }
        if (pl__buf_append(b, esc, k))
            return false;
        run = s + 1;
    }
    return !APPEND(b, "\"");
}

/* The params of a message as a tree: printed. */
static bool tree_params(pl__buf *b, const void *user)
{
    return pl__mcp_append_json(b, user);
}

/* Append the decimal digits of @p v (> 0). */
static bool append_id(pl__buf *b, int64_t v)
{
    char num[24];
    size_t k = sizeof num;
    for (uint64_t u = (uint64_t)v; u; u /= 10)
        num[--k] = (char)('0' + u % 10);
    return !pl__buf_append(b, num + k, sizeof num - k);
}

/*
 * The text of a message, {"jsonrpc", "method", "params", "id"} as cJSON
 * would print it, into the handle's buffer m->out (kept from one message
 * to the next): a request with @p id > 0, else a notification; its
 * params written by @p params (none when NULL).  @p method is one of
 * ours, a name that needs no escaping.  False when out of memory.
 */
static bool message_text(pl_mcp *m, const char *method,
                         pl__mcp_params_fn params, const void *user, int64_t id)
{
    pl__buf *b = &m->out;
    pl__buf_reset(b);
    if (APPEND(b, "{\"jsonrpc\":\"2.0\",\"method\":\"") ||
        pl__buf_append(b, method, strlen(method)) || APPEND(b, "\""))
        return false;
    if (params && (APPEND(b, ",\"params\":") || !params(b, user)))
        return false;
    if (id > 0 && (APPEND(b, ",\"id\":") || !append_id(b, id)))
        return false;
    return !APPEND(b, "}");
}

/* Write m->out and a newline before @p deadline (monotonic ms). */
static int send_text(pl_mcp *m, int64_t deadline, char *why, size_t n)
{
    if (pl__buf_append(&m->out, "\n", 1))
        return T_NOMEM;
    const char *text = (const char *)m->out.data;
    size_t len = m->out.len - 1;
    size_t off = 0;
    int t = T_OK;
    while (off < len + 1) {
        ssize_t w = send(m->wfd, text + off, len + 1 - off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int64_t left = deadline - pl__mcp_mono_ms();
            if (left <= 0) {
                /* a server whose input stays full reads no more (what was
                 * written of the message would run into the next one, on
                 * a line it could not read; a short message goes in whole
                 * or not at all): it is stopped, the next call starting
                 * it again, and nothing is cancelled of a request it
                 * never had */
                snprintf(why, n,
                         "the server does not read its input (%zu of %zu "
                         "bytes of the message taken: it was stopped)",
                         off, len + 1);
                pl__mcp_stop(m);
                t = T_TIMEOUT;
                break;
            }
            struct pollfd pf = {m->wfd, POLLOUT, 0};
            poll(&pf, 1, left > 1000 ? 1000 : (int)left);
            continue;
        }
        snprintf(why, n, "the server exited or closed its input: %s",
                 strerror(errno));
        t = T_DEAD;
        break;
    }
    return t;
}

/* Wait up to @p ms (at most a second) for the server's output and read
 * what it wrote: recv()'s answer, -1 with errno EAGAIN when nothing came
 * (the receive timeout set only when it changes). */
static ssize_t read_within(pl_mcp *m, int64_t ms)
{
    if (ms > 1000)
        ms = 1000;
    if (ms != m->rcv_ms) {
        struct timeval tv = {(time_t)(ms / 1000),
                             (suseconds_t)(ms % 1000 * 1000)};
        m->rcv_ms = 0;
        if (setsockopt(m->rfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv))
            return -1;
        m->rcv_ms = ms;
    }
    return recv(m->rfd, m->buf + m->len, m->max_msg + 1 - m->len, 0);
}

/* The UTF-16 unit of "\uXXXX" at @p p (6 bytes left at least), or -1. */
static long utf16_at(const char *p)
{
    long v = 0;
    if (p[0] != '\\' || p[1] != 'u')
        return -1;
    for (int i = 2; i < 6; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Put U+FFFD in place of each escaped lone UTF-16 surrogate of @p text,
 * which cJSON refuses; whether there was one. */
static bool fix_surrogates(char *text, size_t len)
{
    bool fixed = false;
    for (size_t i = 0; i + 1 < len;) {
        if (text[i] != '\\') {
            i++;
            continue;
        }
        long u = i + 6 <= len ? utf16_at(text + i) : -1;
        if (u < 0xD800 || u > 0xDFFF) {
            i += u < 0 ? 2 : 6; /* another escape, or a unit that is one */
            continue;
        }
        long lo = u <= 0xDBFF && i + 12 <= len ? utf16_at(text + i + 6) : -1;
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            i += 12; /* a pair */
            continue;
        }
        memcpy(text + i + 2, "fffd", 4);
        fixed = true;
        i += 6;
    }
    return fixed;
}

/* A message pl_json_parse() refused (pl_errmsg() says why): when cJSON
 * reads an answer in it, its id's error in *out, so that the call it
 * answers fails now, saying why, rather than waiting for another answer;
 * else NULL (no message).  PL_OK or PL_ENOMEM. */
static int refused(cJSON **out, const char *text, size_t len)
{
    char why[1024];
    snprintf(why, sizeof why, "the server's answer is refused: %s",
             pl_errmsg());
    cJSON *v = cJSON_ParseWithLength(text, len);
    cJSON *id = cJSON_DetachItemFromObjectCaseSensitive(v, "id");
    int st = PL_OK;
    if ((cJSON_IsNumber(id) || cJSON_IsString(id)) &&
        !cJSON_HasObjectItem(v, "method"))
        st = pl_json_pack(out, "{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
                          "id", id, "error", "code", -32700, "message", why);
    cJSON_Delete(id);
    cJSON_Delete(v);
    return st == PL_ENOMEM ? PL_ENOMEM : PL_OK;
}

int pl__mcp_parse(cJSON **out, char *text, size_t len)
{
    /* pl_json_parse() refuses a string cJSON would cut at a NUL */
    *out = NULL;
    int st = pl_json_parse(out, text, len);
    if (st == PL_EJSON && memchr(text, '\\', len) && fix_surrogates(text, len))
        st = pl_json_parse(out, text, len);
    if (st == PL_EJSON)
        return refused(out, text, len);
    return st == PL_ENOMEM ? PL_ENOMEM : PL_OK;
}

int pl__mcp_take_msg(pl_mcp *m, cJSON **out, size_t *garbage)
{
    *out = NULL;
    for (;;) {
        char *nl = memchr(m->buf, '\n', m->len);
        if (!nl)
            return 0;
        size_t line = (size_t)(nl - m->buf);
        /* a blank line (of "\r\n" too) is no message, and no garbage */
        bool blank = line == 0 || (line == 1 && m->buf[0] == '\r');
        cJSON *v = NULL;
        int st = pl__mcp_parse(&v, m->buf, line);
        memmove(m->buf, nl + 1, m->len - line - 1);
        m->len -= line + 1;
        if (st == PL_ENOMEM)
            return -1;
        if (v && cJSON_IsObject(v)) {
            *out = v;
            return 1;
        }
        cJSON_Delete(v);
        if (!blank)
            (*garbage)++;
    }
}

/*
 * Read the next JSON object the server writes, before @p deadline.  Lines
 * that are not JSON objects are skipped and counted in @p *garbage; a
 * line that cannot be read for want of memory is T_NOMEM.
 */
static int read_msg(pl_mcp *m, cJSON **out, int64_t deadline, size_t *garbage,
                    char *why, size_t n)
{
    *out = NULL;
    for (;;) {
        int k = pl__mcp_take_msg(m, out, garbage);
        if (k > 0)
            return T_OK;
        if (k < 0) {
            snprintf(why, n, "out of memory reading the server's message");
            return T_NOMEM;
        }
        if (m->len > m->max_msg) {
            snprintf(why, n,
                     "the server sent a message longer than %zu bytes "
                     "(max_message_bytes)",
                     m->max_msg);
            return T_TOOBIG;
        }
        int64_t left = deadline - pl__mcp_mono_ms();
        if (left <= 0) {
            if (*garbage)
                snprintf(why, n,
                         "no answer in time (%zu lines that are not "
                         "JSON-RPC were skipped)",
                         *garbage);
            else
                snprintf(why, n, "no answer in time");
            return T_TIMEOUT;
        }
        ssize_t r = read_within(m, left);
        if (r < 0 &&
            (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (r < 0) {
            snprintf(why, n, "cannot read the server's output: %s",
                     strerror(errno));
            return T_DEAD;
        }
        if (r == 0) {
            snprintf(why, n, "the server exited or closed its output");
            return T_DEAD;
        }
        m->len += (size_t)r;
    }
}

/* Answer a request the server sent: "ping" with {}, others -32601. */
static void answer_server(pl_mcp *m, const cJSON *req, int64_t deadline)
{
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(req, "method");
    cJSON *a = cJSON_CreateObject();
    if (!a)
        return;
    cJSON_AddStringToObject(a, "jsonrpc", "2.0");
    cJSON_AddItemToObject(
        a, "id",
        cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(req, "id"), 1));
    if (cJSON_IsString(method) && strcmp(method->valuestring, "ping") == 0) {
        cJSON_AddObjectToObject(a, "result");
    } else {
        cJSON *e = cJSON_AddObjectToObject(a, "error");
        cJSON_AddNumberToObject(e, "code", -32601);
        cJSON_AddStringToObject(e, "message", "Method not found");
    }
    char why[64];
    pl__buf_reset(&m->out);
    if (pl__mcp_append_json(&m->out, a))
        send_text(m, deadline, why, sizeof why);
    cJSON_Delete(a);
}

/* A message from the server that answers no request of ours: answer its
 * request; note that its tool list changed; drop the rest. */
static void from_server(pl_mcp *m, const cJSON *in, int64_t deadline)
{
    const char *method = pl__mcp_str(in, "method");
    if (cJSON_GetObjectItemCaseSensitive(in, "id")) {
        if (cJSON_GetObjectItemCaseSensitive(in, "method"))
            answer_server(m, in, deadline);
    } else if (method &&
               strcmp(method, "notifications/tools/list_changed") == 0) {
        m->list_changed = true;
    }
}

void pl__mcp_drain(pl_mcp *m)
{
    m->quiet = false;
    if (m->http || m->rfd < 0)
        return;
    size_t garbage = 0;
    char why[128];
    for (int i = 0; i < 1000; i++) {
        struct pollfd pf = {m->rfd, POLLIN, 0};
        if (!memchr(m->buf, '\n', m->len)) {
            /* nothing, not even a hang-up: the server's output is open */
            int k = poll(&pf, 1, 0);
            m->quiet = k == 0;
            if (k <= 0)
                return;
        }
        cJSON *in = NULL;
        int t = read_msg(m, &in, pl__mcp_mono_ms() + 1, &garbage, why,
                         sizeof why);
        if (t == T_DEAD || t == T_TOOBIG)
            pl__mcp_stop(m); /* the call starts it again */
        if (t != T_OK)
            return;
        from_server(m, in, pl__mcp_mono_ms() + 1000);
        cJSON_Delete(in);
    }
}

int pl__mcp_notify(pl_mcp *m, const char *method, cJSON *params, char *why,
                   size_t n)
{
    bool ok = message_text(m, method, params ? tree_params : NULL, params, 0);
    cJSON_Delete(params);
    if (!ok) {
        snprintf(why, n, "out of memory");
        return T_NOMEM;
    }
    if (!m->http)
        return send_text(m, pl__mcp_mono_ms() + 1000, why, n);
    /* over HTTP the notification is a POST of its own, whatever the last
     * one came to: there is no stdio pipe to fall back on */
    cJSON *none = NULL;
    int t = pl__mcp_http_post(m->http, (const char *)m->out.data, m->out.len, 0,
                              m->version, 1000, &none, why, n);
    cJSON_Delete(none);
    /* a notification's 404 ends the session too: the next request
     * begins a new one */
    if (t == T_EXPIRED)
        m->up = false;
    return t;
}

/*
 * Send the request @p method with @p params (taken) and read its answer:
 * *result (the "result" member) or *error (the "error" member), one of
 * them set on T_OK; caller frees.  A timeout sends notifications/cancelled
 * for a request the server may have read (over HTTP, one sent in the
 * session that lives; never initialize); a dead server or a message too
 * long stops the server.
 */
int pl__mcp_rpc(pl_mcp *m, const char *method, cJSON *params, int64_t deadline,
                cJSON **result, cJSON **error, char *why, size_t n)
{
    int t = pl__mcp_rpc_with(m, method, params ? tree_params : NULL, params,
                             deadline, result, error, why, n);
    cJSON_Delete(params);
    return t;
}

/* POST m->out, the request @p id, with what is left before @p deadline;
 * *sent: whether the server may have read it (pl__mcp_http_post() sends
 * nothing once the deadline has passed). */
static int post_request(pl_mcp *m, int64_t id, int64_t deadline, cJSON **in,
                        bool *sent, char *why, size_t n)
{
    int64_t left = deadline - pl__mcp_mono_ms();
    *sent = left > 0;
    return pl__mcp_http_post(m->http, (const char *)m->out.data, m->out.len, id,
                             m->version, left, in, why, n);
}

int pl__mcp_rpc_with(pl_mcp *m, const char *method, pl__mcp_params_fn params,
                     const void *user, int64_t deadline, cJSON **result,
                     cJSON **error, char *why, size_t n)
{
    *result = *error = NULL;
    m->quiet = false;
    m->retry_after_ms = -1;
    int64_t id = ++m->next_id;
    if (!message_text(m, method, params, user, id))
        return T_NOMEM;
    /* whether the server may have read request id: a timeout cancels
     * only such a request */
    bool sent = true;
    int t;
    if (m->http) {
        cJSON *in = NULL;
        t = post_request(m, id, deadline, &in, &sent, why, n);
        if (t == T_EXPIRED && strcmp(method, "initialize") != 0) {
            /* the session ended, the request unread: a new session (the
             * spec's way), and the request sent once more in it; until
             * it is, the new session has seen none */
            m->up = false;
            sent = false;
            t = pl__mcp_ensure(m, deadline, why, n);
            if (t == T_OK) {
                id = ++m->next_id;
                t = message_text(m, method, params, user, id) ? T_OK : T_NOMEM;
            }
            if (t == T_OK)
                t = post_request(m, id, deadline, &in, &sent, why, n);
        }
        m->retry_after_ms = pl__mcp_http_retry_after(m->http);
        if (pl__mcp_http_list_changed(m->http))
            m->list_changed = true;
        if (t == T_OK) {
            *result = cJSON_DetachItemFromObjectCaseSensitive(in, "result");
            *error = cJSON_DetachItemFromObjectCaseSensitive(in, "error");
            cJSON_Delete(in);
            if (*result || *error)
                return T_OK;
            snprintf(why, n, "an answer with neither result nor error");
            t = T_DEAD;
        }
    } else {
        t = send_text(m, deadline, why, n);
    }
    size_t garbage = 0;
    while (t == T_OK) {
        cJSON *in = NULL;
        t = read_msg(m, &in, deadline, &garbage, why, n);
        if (t != T_OK)
            break;
        const cJSON *mid = cJSON_GetObjectItemCaseSensitive(in, "id");
        if (cJSON_GetObjectItemCaseSensitive(in, "method")) {
            from_server(m, in, deadline);
        } else if (cJSON_IsNumber(mid) && mid->valuedouble == (double)id) {
            cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(in, "result");
            cJSON *e = cJSON_DetachItemFromObjectCaseSensitive(in, "error");
            cJSON_Delete(in);
            if (e) {
                cJSON_Delete(r);
                *error = e;
                return T_OK;
            }
            if (r) {
                *result = r;
                return T_OK;
            }
            snprintf(why, n, "an answer with neither result nor error");
            garbage++;
            continue;
        } else if (!mid) {
            /* neither a request, a notification nor an answer (another
             * request's: one that timed out): no JSON-RPC */
            garbage++;
        }
        cJSON_Delete(in);
    }
    /* initialize is never cancelled (the spec forbids it) */
    if (t == T_TIMEOUT && sent && (m->http || m->wfd >= 0) &&
        strcmp(method, "initialize") != 0) {
        cJSON *p = cJSON_CreateObject();
        if (p) {
            cJSON_AddNumberToObject(p, "requestId", (double)id);
            cJSON_AddStringToObject(p, "reason", "timeout");
        }
        char said[160];
        int c = pl__mcp_notify(m, "notifications/cancelled", p, said,
                               sizeof said);
        size_t k = strlen(why);
        /* a session that ended (404) dropped the request with it */
        if (c != T_OK && c != T_EXPIRED && k < n)
            snprintf(why + k, n - k,
                     " (notifications/cancelled was not taken: %s)", said);
    } else if (t == T_DEAD || t == T_TOOBIG || t == T_BAD || t == T_EXPIRED) {
        pl__mcp_stop(m); /* HTTP: a new session at the next call */
    }
    return t;
}
