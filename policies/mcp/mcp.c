/*
 * mcp.c -- tools of a Model Context Protocol server as policies
 * (policyledger_mcp.h has the rules).
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
 * the server.  One request is in flight at a time (the handle's lock);
 * answers to other ids (a request that timed out) are dropped.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <policyledger_mcp.h>

#include "mcp.h"
#include "platform.h"

#define MAX_ARGS 256
#define MAX_TOOLS 1024
#define MAX_PAGES 100
#define MAX_PREFIX 64
#define MAX_ERROR_TEXT 4096
#define META_KEY "policyledger/idempotencyKey"

static const char *const versions[] = {"2025-06-18", "2025-03-26",
                                       "2024-11-05"};
static const char *const base_env[] = {"HOME", "LOGNAME", "PATH", "SHELL",
                                       "TERM", "USER",    "LANG"};

typedef struct tool {
    pl_mcp *mcp;
    char *name; /* on the server */
} tool;

struct pl_mcp {
    char *name;
    char **argv;
    char **env;
    int err_fd; /* the server's stderr; -1: ours */
    long timeout_ms, start_timeout_ms;
    size_t max_msg, max_inline;
    pthread_mutex_t lock;
    pl__mcp_http *http; /* Streamable HTTP; NULL: stdio */
    bool up;            /* HTTP: initialized */
    pid_t pid;          /* stdio: 0 when not running */
    int wfd, rfd;
    char *buf; /* what was read and not yet taken: max_msg + 1 bytes */
    size_t len;
    int64_t next_id;
    char version[16];
    char fingerprint[32]; /* "fnv1a64:" and 16 hex digits: the tool list */
    tool *tools;
    size_t n_tools;
};

static int64_t mono_ms(void) { return (int64_t)(pl__mono_ns() / 1000000); }

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static int cloexec(int fd) { return fcntl(fd, F_SETFD, FD_CLOEXEC); }

/* ------------------------------------------------------------------------ */
/* The process                                                              */
/* ------------------------------------------------------------------------ */

/* Wait up to @p ms for the server to exit; true when it was reaped. */
static bool reap_within(pid_t pid, int64_t ms)
{
    int64_t end = mono_ms() + ms;
    for (;;) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        if (mono_ms() >= end)
            return false;
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Stop the server: its input closed, then SIGTERM, then SIGKILL, each to
 * its process group. */
static void stop(pl_mcp *m)
{
    m->up = false;
    close_fd(&m->wfd);
    close_fd(&m->rfd);
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
static int spawn(pl_mcp *m, char *why, size_t n)
{
    int sin[2] = {-1, -1}, sout[2] = {-1, -1}, ep[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sin) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, sout) != 0 || pipe(ep) != 0) {
        snprintf(why, n, "cannot make pipes: %s", strerror(errno));
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        cloexec(sin[i]);
        cloexec(sout[i]);
        cloexec(ep[i]);
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
    close_fd(&sin[1]);
    close_fd(&sout[1]);
    close_fd(&ep[1]);
    int e = 0;
    ssize_t r;
    do
        r = read(ep[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    close_fd(&ep[0]);
    if (r == (ssize_t)sizeof e) {
        waitpid(pid, NULL, 0);
        snprintf(why, n, "cannot run '%s': %s", m->argv[0], strerror(e));
        goto fail;
    }
    m->pid = pid;
    m->wfd = sin[0];
    m->rfd = sout[0];
    m->len = 0;
    fcntl(m->rfd, F_SETFL, fcntl(m->rfd, F_GETFL) | O_NONBLOCK);
    return T_OK;
fail:
    for (int i = 0; i < 2; i++) {
        close_fd(&sin[i]);
        close_fd(&sout[i]);
        close_fd(&ep[i]);
    }
    return T_DEAD;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */
/* ------------------------------------------------------------------------ */

/* Write @p msg and a newline before @p deadline (monotonic ms). */
static int send_msg(pl_mcp *m, const cJSON *msg, int64_t deadline, char *why,
                    size_t n)
{
    char *text = cJSON_PrintUnformatted(msg);
    if (!text)
        return T_NOMEM;
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the NUL: written by length */
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
            int64_t left = deadline - mono_ms();
            if (left <= 0) {
                snprintf(why, n, "the server does not read its input");
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
    free(text);
    return t;
}

/*
 * Read the next JSON object the server writes, before @p deadline.  Lines
 * that are not JSON objects are skipped and counted in @p *garbage.
 */
static int read_msg(pl_mcp *m, cJSON **out, int64_t deadline, size_t *garbage,
                    char *why, size_t n)
{
    *out = NULL;
    for (;;) {
        char *nl = memchr(m->buf, '\n', m->len);
        if (nl) {
            size_t line = (size_t)(nl - m->buf);
            cJSON *v = cJSON_ParseWithLength(m->buf, line);
            memmove(m->buf, nl + 1, m->len - line - 1);
            m->len -= line + 1;
            if (v && cJSON_IsObject(v)) {
                *out = v;
                return T_OK;
            }
            cJSON_Delete(v);
            if (line > 0 && !(line == 1 && m->buf[0] == '\r'))
                (*garbage)++;
            continue;
        }
        if (m->len > m->max_msg) {
            snprintf(why, n,
                     "the server sent a message longer than %zu bytes "
                     "(max_message_bytes)",
                     m->max_msg);
            return T_TOOBIG;
        }
        int64_t left = deadline - mono_ms();
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
        struct pollfd pf = {m->rfd, POLLIN, 0};
        int p = poll(&pf, 1, left > 1000 ? 1000 : (int)left);
        if (p <= 0)
            continue;
        ssize_t r = read(m->rfd, m->buf + m->len, m->max_msg + 1 - m->len);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0) {
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
    send_msg(m, a, deadline, why, sizeof why);
    cJSON_Delete(a);
}

static cJSON *message(const char *method, cJSON *params)
{
    cJSON *msg = cJSON_CreateObject();
    if (!msg) {
        cJSON_Delete(params);
        return NULL;
    }
    cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
    cJSON_AddStringToObject(msg, "method", method);
    if (params)
        cJSON_AddItemToObject(msg, "params", params);
    return msg;
}

static void notify(pl_mcp *m, const char *method, cJSON *params)
{
    cJSON *msg = message(method, params);
    char why[128];
    cJSON *none = NULL;
    if (msg && m->http)
        pl__mcp_http_post(m->http, msg, 0, m->version, 1000, &none, why,
                          sizeof why);
    else if (msg)
        send_msg(m, msg, mono_ms() + 1000, why, sizeof why);
    cJSON_Delete(none);
    cJSON_Delete(msg);
}

/*
 * Send the request @p method with @p params (taken) and read its answer:
 * *result (the "result" member) or *error (the "error" member), one of
 * them set on T_OK; caller frees.  A timeout sends notifications/cancelled;
 * a dead server or a message too long stops the server.
 */
static int rpc(pl_mcp *m, const char *method, cJSON *params, int64_t deadline,
               cJSON **result, cJSON **error, char *why, size_t n)
{
    *result = *error = NULL;
    int64_t id = ++m->next_id;
    cJSON *msg = message(method, params);
    if (!msg || !cJSON_AddNumberToObject(msg, "id", (double)id)) {
        cJSON_Delete(msg);
        return T_NOMEM;
    }
    int t;
    if (m->http) {
        cJSON *in = NULL;
        t = pl__mcp_http_post(m->http, msg, id, m->version,
                              deadline - mono_ms(), &in, why, n);
        cJSON_Delete(msg);
        if (t == T_OK) {
            *result = cJSON_DetachItemFromObjectCaseSensitive(in, "result");
            *error = cJSON_DetachItemFromObjectCaseSensitive(in, "error");
            cJSON_Delete(in);
            if (*result || *error)
                return T_OK;
            snprintf(why, n, "an answer with neither result nor error");
            t = T_DEAD;
        }
        msg = NULL;
    } else {
        t = send_msg(m, msg, deadline, why, n);
        cJSON_Delete(msg);
    }
    size_t garbage = 0;
    while (t == T_OK) {
        cJSON *in = NULL;
        t = read_msg(m, &in, deadline, &garbage, why, n);
        if (t != T_OK)
            break;
        const cJSON *mid = cJSON_GetObjectItemCaseSensitive(in, "id");
        if (cJSON_GetObjectItemCaseSensitive(in, "method")) {
            if (mid)
                answer_server(m, in, deadline);
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
        }
        cJSON_Delete(in);
    }
    if (t == T_TIMEOUT) {
        cJSON *p = cJSON_CreateObject();
        if (p) {
            cJSON_AddNumberToObject(p, "requestId", (double)id);
            cJSON_AddStringToObject(p, "reason", "timeout");
        }
        notify(m, "notifications/cancelled", p);
    } else if (t == T_DEAD || t == T_TOOBIG) {
        stop(m);
    }
    return t;
}

static bool known_version(const char *v)
{
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

/* Start the server if it is not running, and perform the handshake. */
static int ensure(pl_mcp *m, int64_t deadline, char *why, size_t n)
{
    if (m->http && m->up)
        return T_OK;
    if (m->http) {
        pl__mcp_http_forget(m->http); /* a new session */
    } else if (m->pid > 0) {
        /* an exit noticed here rather than on the next read */
        if (waitpid(m->pid, NULL, WNOHANG) == m->pid) {
            m->pid = 0;
            stop(m);
        } else {
            return T_OK;
        }
    }
    int t = m->http ? T_OK : spawn(m, why, n);
    if (t != T_OK)
        return t;
    cJSON *p = cJSON_CreateObject();
    cJSON *info = p ? cJSON_AddObjectToObject(p, "clientInfo") : NULL;
    if (!info ||
        !cJSON_AddStringToObject(p, "protocolVersion",
                                 PL_MCP_PROTOCOL_VERSION) ||
        !cJSON_AddObjectToObject(p, "capabilities") ||
        !cJSON_AddStringToObject(info, "name", "policyledger") ||
        !cJSON_AddStringToObject(info, "version", "0.1.0")) {
        cJSON_Delete(p);
        stop(m);
        return T_NOMEM;
    }
    cJSON *r = NULL, *e = NULL;
    t = rpc(m, "initialize", p, deadline, &r, &e, why, n);
    if (t == T_OK && e) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        snprintf(why, n, "initialize failed: %s",
                 cJSON_IsString(msg) ? msg->valuestring : "(no message)");
        t = T_DEAD;
    } else if (t == T_OK) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "protocolVersion");
        if (!cJSON_IsString(v) || !known_version(v->valuestring)) {
            snprintf(why, n,
                     "the server speaks protocol version %.40s, "
                     "not one of 2024-11-05, 2025-03-26, 2025-06-18",
                     cJSON_IsString(v) ? v->valuestring : "(none)");
            t = T_DEAD;
        } else {
            snprintf(m->version, sizeof m->version, "%s", v->valuestring);
        }
    }
    cJSON_Delete(r);
    cJSON_Delete(e);
    if (t != T_OK) {
        stop(m);
        return t;
    }
    notify(m, "notifications/initialized", NULL);
    m->up = true;
    return T_OK;
}

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

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Copy @p key of @p from to @p to if it is a string. */
static bool copy_str(cJSON *to, const cJSON *from, const char *key)
{
    const char *s = str(from, key);
    return !s || cJSON_AddStringToObject(to, key, s);
}

/* Base64 data: its "bytes" (decoded size) and, up to the cap, itself. */
static bool add_data(cJSON *to, const char *key, const char *b64, size_t cap)
{
    size_t len = strlen(b64);
    size_t pad = len >= 2 && b64[len - 1] == '=' ? (b64[len - 2] == '=' ? 2 : 1)
                                                 : 0;
    if (!cJSON_AddNumberToObject(to, "bytes", (double)(len / 4 * 3 - pad)))
        return false;
    if (len <= cap)
        return cJSON_AddStringToObject(to, key, b64) != NULL;
    return cJSON_AddTrueToObject(to, "omitted") != NULL;
}

/* One content item as the result keeps it (see the header). */
static cJSON *content_item(const cJSON *it, size_t cap)
{
    const char *type = str(it, "type");
    if (!type)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", type))
        goto fail;
    if (strcmp(type, "text") == 0) {
        if (!copy_str(o, it, "text"))
            goto fail;
    } else if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0) {
        const char *d = str(it, "data");
        if (!copy_str(o, it, "mimeType") || (d && !add_data(o, "data", d, cap)))
            goto fail;
    } else if (strcmp(type, "resource") == 0) {
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(it, "resource");
        cJSON *r = cJSON_AddObjectToObject(o, "resource");
        const char *text = str(res, "text"), *blob = str(res, "blob");
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
        const char *t = str(it, "text");
        if (!t || (str(it, "type") && strcmp(str(it, "type"), "text") != 0))
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

/* Add the steps of a tools/call result. */
static int add_result(pl_steps *out, const cJSON *r, size_t cap)
{
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(r, "content");
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
    cJSON *res = cJSON_CreateObject();
    cJSON *items = res ? cJSON_AddArrayToObject(res, "content") : NULL;
    int st = items ? PL_OK : PL_ENOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, content)
    {
        if (st)
            break;
        cJSON *c = content_item(it, cap);
        if (c)
            cJSON_AddItemToArray(items, c);
    }
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(r, "structuredContent");
    if (!st && cJSON_IsObject(sc) &&
        !cJSON_AddItemToObject(res, "structuredContent",
                               cJSON_Duplicate(sc, 1)))
        st = PL_ENOMEM;
    if (!st)
        st = pl_steps_add_result(out, res);
    cJSON_Delete(res);
    return st;
}

static int add_rpc_error(pl_steps *out, const pl_mcp *m, const char *tname,
                         const cJSON *e)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    const char *msg = str(e, "message");
    int code = cJSON_IsNumber(c) ? (int)c->valuedouble : 0;
    const char *kind = code == -32602   ? PL_ERR_INVALID_INPUT
                       : code == -32601 ? PL_ERR_NOT_FOUND
                       : code == -32002 ? PL_ERR_NOT_FOUND
                       : code == -32001 ? PL_ERR_TIMEOUT
                                        : PL_ERR_TOOL_BUG;
    char text[1024];
    snprintf(text, sizeof text, "MCP server %s, tool %s: error %d: %.900s",
             m->name, tname, code, msg ? msg : "(no message)");
    return pl_steps_add_error(out, kind, text);
}

/* ------------------------------------------------------------------------ */
/* The policy                                                               */
/* ------------------------------------------------------------------------ */

/* The side effect "mcp.tools": what the server was when the call was
 * made. */
static int snapshot(cJSON **out, void *user)
{
    const pl_mcp *m = user;
    cJSON *v = cJSON_CreateObject();
    if (!v || !cJSON_AddStringToObject(v, "server", m->name) ||
        !cJSON_AddStringToObject(v, "protocol", m->version) ||
        !cJSON_AddNumberToObject(v, "tools", (double)m->n_tools) ||
        !cJSON_AddStringToObject(v, "fingerprint", m->fingerprint)) {
        cJSON_Delete(v);
        return PL_ENOMEM;
    }
    *out = v;
    return PL_OK;
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
        const char *name = str(pl_step_payload(s), "name");
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

static int call_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    tool *t = user;
    pl_mcp *m = t->mcp;
    cJSON *snap = NULL;
    int sst = pl_ctx_side_effect(&snap, ctx, "mcp.tools", snapshot, m);
    cJSON_Delete(snap);
    if (sst)
        return sst;
    if (pl_ctx_replaying(ctx)) {
        /* this policy itself is replayed (a run whose root is the tool, a
         * check replay): its recorded result is served, never asked for */
        bool found = false;
        if ((sst = add_recorded(&found, out, ctx)) || found)
            return sst;
    }
    int64_t wait = m->timeout_ms;
    int64_t dl = pl_ctx_deadline(ctx);
    if (dl > 0) {
        int64_t left = dl - pl__now_us() / 1000;
        if (left < wait)
            wait = left > 0 ? left : 0;
    }
    cJSON *p = cJSON_CreateObject();
    cJSON *meta = p ? cJSON_AddObjectToObject(p, "_meta") : NULL;
    if (!meta || !cJSON_AddStringToObject(p, "name", t->name) ||
        !cJSON_AddItemToObject(p, "arguments",
                               cJSON_Duplicate(a->payload, 1)) ||
        !cJSON_AddStringToObject(meta, META_KEY, pl_ctx_idempotency_key(ctx))) {
        cJSON_Delete(p);
        return PL_ENOMEM;
    }
    char why[256] = "";
    cJSON *r = NULL, *e = NULL;
    int64_t deadline = mono_ms() + wait;
    pthread_mutex_lock(&m->lock);
    int tr = ensure(m, deadline, why, sizeof why);
    if (tr == T_OK)
        tr = rpc(m, "tools/call", p, deadline, &r, &e, why, sizeof why);
    else
        cJSON_Delete(p);
    pthread_mutex_unlock(&m->lock);
    int st;
    if (tr == T_OK && e) {
        st = add_rpc_error(out, m, t->name, e);
    } else if (tr == T_OK) {
        st = add_result(out, r, m->max_inline);
    } else if (tr == T_NOMEM) {
        st = PL_ENOMEM;
    } else {
        char text[512];
        snprintf(text, sizeof text, "MCP server %s, tool %s: %s", m->name,
                 t->name, why);
        st = pl_steps_add_error(out,
                                tr == T_TIMEOUT  ? PL_ERR_TIMEOUT
                                : tr == T_TOOBIG ? PL_ERR_TOOL_BUG
                                : tr == T_AUTH   ? PL_ERR_UNAUTHORIZED
                                                 : PL_ERR_RETRYABLE_SERVER,
                                text);
    }
    cJSON_Delete(r);
    cJSON_Delete(e);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Registration                                                             */
/* ------------------------------------------------------------------------ */

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* "stdio:COMMAND ARG..." as an argument vector. */
static int parse_spec(char ***out, const char *spec)
{
    *out = NULL;
    if (!spec || strncmp(spec, "stdio:", 6) != 0)
        return pl__err(PL_EINVAL,
                       "MCP server spec '%.80s': expected "
                       "\"stdio:COMMAND ARG...\"",
                       spec ? spec : "(null)");
    char **v = calloc(MAX_ARGS + 1, sizeof *v);
    if (!v)
        return PL_ENOMEM;
    size_t n = 0;
    for (const char *p = spec + 6; *p;) {
        while (*p == ' ')
            p++;
        size_t k = strcspn(p, " ");
        if (!k)
            break;
        if (n == MAX_ARGS) {
            free_strv(v);
            return pl__err(PL_EINVAL, "MCP server spec: more than %d words",
                           MAX_ARGS);
        }
        if (!(v[n++] = pl__strndup(p, k))) {
            free_strv(v);
            return PL_ENOMEM;
        }
        p += k;
    }
    if (!n) {
        free(v);
        return pl__err(PL_EINVAL, "MCP server spec '%s': no command", spec);
    }
    *out = v;
    return PL_OK;
}

static int make_env(char ***out, const pl_mcp_options *o)
{
    size_t nb = sizeof base_env / sizeof base_env[0];
    char **env = calloc(nb + o->n_env + 1, sizeof *env);
    if (!env)
        return PL_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < nb + o->n_env; i++) {
        const char *k = i < nb ? base_env[i] : o->env[i - nb];
        if (!k || !*k || strchr(k, '=')) {
            free_strv(env);
            return pl__err(PL_EINVAL, "MCP options: bad variable name '%s'",
                           k ? k : "(null)");
        }
        const char *v = getenv(k);
        if (v && !(env[n++] = pl__asprintf("%s=%s", k, v))) {
            free_strv(env);
            return PL_ENOMEM;
        }
    }
    *out = env;
    return PL_OK;
}

static bool listed(const char *name, const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] && strcmp(v[i], name) == 0)
            return true;
    return false;
}

/* Every tool of the server, following nextCursor.  Caller frees. */
static int list_tools(cJSON **out, pl_mcp *m, int64_t deadline)
{
    *out = cJSON_CreateArray();
    if (!*out)
        return PL_ENOMEM;
    char *cursor = NULL;
    char why[256];
    int st = PL_OK;
    for (int page = 0;; page++) {
        if (page == MAX_PAGES) {
            st = pl__err(PL_EIO, "MCP server %s: more than %d pages of tools",
                         m->name, MAX_PAGES);
            break;
        }
        cJSON *p = cJSON_CreateObject();
        if (!p || (cursor && !cJSON_AddStringToObject(p, "cursor", cursor))) {
            cJSON_Delete(p);
            st = PL_ENOMEM;
            break;
        }
        cJSON *r = NULL, *e = NULL;
        int t = rpc(m, "tools/list", p, deadline, &r, &e, why, sizeof why);
        if (t != T_OK || e) {
            const char *msg = e ? str(e, "message") : why;
            st = t == T_NOMEM ? PL_ENOMEM
                              : pl__err(PL_EIO, "MCP server %s: tools/list: %s",
                                        m->name, msg ? msg : "an error");
            cJSON_Delete(r);
            cJSON_Delete(e);
            break;
        }
        cJSON *tools = cJSON_GetObjectItemCaseSensitive(r, "tools");
        cJSON *it;
        cJSON_ArrayForEach(it, tools)
        {
            if (cJSON_GetArraySize(*out) >= MAX_TOOLS) {
                st = pl__err(PL_EIO, "MCP server %s: more than %d tools",
                             m->name, MAX_TOOLS);
                break;
            }
            cJSON_AddItemToArray(*out, cJSON_Duplicate(it, 1));
        }
        const char *next = str(r, "nextCursor");
        free(cursor);
        cursor = next && *next ? pl__strdup(next) : NULL;
        bool more = next && *next;
        cJSON_Delete(r);
        if (st || !more)
            break;
        if (!cursor) {
            st = PL_ENOMEM;
            break;
        }
    }
    free(cursor);
    if (st) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return st;
}

/* Register @p list's tools; every name and schema is checked first. */
static int register_tools(pl_mcp *m, pl_registry *reg, const cJSON *list,
                          const pl_mcp_options *o)
{
    size_t n = (size_t)cJSON_GetArraySize(list);
    char **names = calloc(n + 1, sizeof *names);
    char **schemas = calloc(n + 1, sizeof *schemas);
    m->tools = calloc(n + 1, sizeof *m->tools);
    int st = names && schemas && m->tools ? PL_OK : PL_ENOMEM;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (st)
            break;
        const char *tn = str(it, "name");
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(it, "inputSchema");
        if (!tn || !*tn) {
            st = pl__err(PL_EIO, "MCP server %s: a tool without a name",
                         m->name);
            break;
        }
        names[i] = pl__asprintf("%s.%s", m->name, tn);
        m->tools[i].mcp = m;
        m->tools[i].name = pl__strdup(tn);
        if (!names[i] || !m->tools[i].name) {
            st = PL_ENOMEM;
            break;
        }
        if (!pl__name_ok(names[i]))
            st = pl__err(PL_EINVAL,
                         "MCP server %s: tool name '%.80s' "
                         "makes a bad policy name",
                         m->name, tn);
        else if (pl_registry_find(reg, names[i]))
            st = pl__err(PL_EEXIST, "MCP server %s: policy '%s' exists",
                         m->name, names[i]);
        if (!st && cJSON_IsObject(in)) {
            pl_schema *s = NULL;
            if (!(schemas[i] = cJSON_PrintUnformatted(in)))
                st = PL_ENOMEM;
            else if ((st = pl_schema_compile_text(&s, schemas[i])))
                st = pl_errorf(st, "MCP server %s, tool %s: inputSchema: %s",
                               m->name, tn, pl_errmsg());
            pl_schema_free(s);
        }
        i++;
    }
    m->n_tools = st ? 0 : n;
    for (i = 0; !st && i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(list, (int)i);
        const cJSON *ann = cJSON_GetObjectItemCaseSensitive(t, "annotations");
        bool ro = !o->ignore_hints &&
                  cJSON_IsTrue(
                      cJSON_GetObjectItemCaseSensitive(ann, "readOnlyHint"));
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = names[i];
        d.fn = call_tool;
        d.user = &m->tools[i];
        d.description = str(t, "description");
        d.input_schema = schemas[i];
        d.idempotent = ro ||
                       listed(m->tools[i].name, o->idempotent, o->n_idempotent);
        d.in_doubt = o->in_doubt;
        st = pl_registry_add(reg, &d);
    }
    for (i = 0; i < n; i++) {
        free(names ? names[i] : NULL);
        free(schemas ? schemas[i] : NULL);
    }
    free(names);
    free(schemas);
    return st;
}

/* FNV-1a (64 bits) of the tool list as the server listed it. */
static int fingerprint(pl_mcp *m, const cJSON *list)
{
    char *text = cJSON_PrintUnformatted(list);
    if (!text)
        return PL_ENOMEM;
    uint64_t h = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 0x100000001b3u;
    free(text);
    snprintf(m->fingerprint, sizeof m->fingerprint, "fnv1a64:%016llx",
             (unsigned long long)h);
    return PL_OK;
}

static int check_options(const pl_mcp_options *o)
{
    if (o->timeout_ms < 0 || o->start_timeout_ms < 0)
        return pl__err(PL_EINVAL, "pl_mcp_options: a negative timeout");
    if (o->max_message_bytes > (size_t)256 << 20)
        return pl__err(PL_EINVAL,
                       "pl_mcp_options: max_message_bytes past 256 MiB");
    if ((o->n_env && !o->env) || (o->n_idempotent && !o->idempotent))
        return pl__err(PL_EINVAL, "pl_mcp_options: a count without its list");
    if (o->in_doubt != PL_IN_DOUBT_RERUN && o->in_doubt != PL_IN_DOUBT_FAIL &&
        o->in_doubt != PL_IN_DOUBT_SUSPEND)
        return pl__err(PL_EINVAL, "pl_mcp_options: bad in_doubt");
    return PL_OK;
}

int pl_mcp_register(pl_mcp **out, pl_registry *reg, const char *name,
                    const char *spec, const pl_mcp_options *opts)
{
    if (!out || !reg)
        return pl__err(PL_EINVAL, "pl_mcp_register: NULL argument");
    *out = NULL;
    pl_mcp_options current;
    if (pl__struct_in(&current, opts, &pl__mcp_options_layout,
                      "pl_mcp_register"))
        return PL_EINVAL;
    const pl_mcp_options *o = &current;
    int st = check_options(o);
    if (st)
        return st;
    if (!name || !*name || strlen(name) > MAX_PREFIX || strchr(name, '.') ||
        !pl__name_ok(name))
        return pl__err(PL_EINVAL,
                       "MCP server name '%.80s': 1..%d bytes, no "
                       "dot or control character",
                       name ? name : "(null)", MAX_PREFIX);
    pl_mcp *m = calloc(1, sizeof *m);
    if (!m)
        return PL_ENOMEM;
    m->wfd = m->rfd = m->err_fd = -1;
    m->timeout_ms = o->timeout_ms ? o->timeout_ms : 30000;
    m->start_timeout_ms = o->start_timeout_ms ? o->start_timeout_ms : 60000;
    m->max_msg = o->max_message_bytes ? o->max_message_bytes : 4 << 20;
    m->max_inline = o->max_inline_bytes ? o->max_inline_bytes : 64 << 10;
    pthread_mutex_init(&m->lock, NULL);
    cJSON *list = NULL;
    if (!(m->name = pl__strdup(name)) || !(m->buf = malloc(m->max_msg + 1))) {
        st = PL_ENOMEM;
        goto done;
    }
    if (spec && (strncmp(spec, "http://", 7) == 0 ||
                 strncmp(spec, "https://", 8) == 0)) {
#ifdef PL_MCP_HTTP
        if (o->token_env && (!*o->token_env || strchr(o->token_env, '='))) {
            st = pl__err(PL_EINVAL, "MCP options: bad token_env");
            goto done;
        }
        if (!(m->http = pl__mcp_http_new(spec, o->token_env, m->max_msg))) {
            st = pl__err(PL_ENOMEM, "MCP server %s: cannot start libcurl",
                         name);
            goto done;
        }
#else
        st = pl__err(PL_EINVAL,
                     "MCP server %s: built without libcurl, "
                     "so without the HTTP transport",
                     name);
        goto done;
#endif
    } else if ((st = parse_spec(&m->argv, spec)) ||
               (st = make_env(&m->env, o))) {
        goto done;
    }
    if (o->stderr_path) {
        m->err_fd = open(o->stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (m->err_fd < 0) {
            st = pl__err(PL_EIO, "MCP server %s: cannot open %s: %s", name,
                         o->stderr_path, strerror(errno));
            goto done;
        }
        cloexec(m->err_fd);
    }
    char why[256] = "";
    int64_t deadline = mono_ms() + m->start_timeout_ms;
    int t = ensure(m, deadline, why, sizeof why);
    if (t != T_OK) {
        st = t == T_NOMEM
                 ? PL_ENOMEM
                 : pl__err(PL_EIO, "MCP server %s (%s): %s", name, spec, why);
        goto done;
    }
    if ((st = list_tools(&list, m, deadline)) || (st = fingerprint(m, list)) ||
        (st = register_tools(m, reg, list, o)))
        goto done;
    *out = m;
done:
    cJSON_Delete(list);
    if (st) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        pl_mcp_close(m);
        pl__errmsg_restore(saved);
    }
    return st;
}

const char *pl_mcp_protocol_version(const pl_mcp *mcp)
{
    return mcp ? mcp->version : NULL;
}

size_t pl_mcp_tool_count(const pl_mcp *mcp) { return mcp ? mcp->n_tools : 0; }

void pl_mcp_close(pl_mcp *m)
{
    if (!m)
        return;
    stop(m);
    pl__mcp_http_free(m->http);
    close_fd(&m->err_fd);
    pthread_mutex_destroy(&m->lock);
    for (size_t i = 0; m->tools && m->tools[i].name; i++)
        free(m->tools[i].name);
    free(m->tools);
    free_strv(m->argv);
    free_strv(m->env);
    free(m->buf);
    free(m->name);
    free(m);
}
