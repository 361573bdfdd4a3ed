/*
 * mcp_http.c -- the Streamable HTTP transport of MCP, over libcurl.
 *
 * Every message is one POST of its JSON to the endpoint, with
 *     Content-Type: application/json
 *     Accept: application/json, text/event-stream
 *     Mcp-Session-Id: <the id initialize's answer gave>   (once given)
 *     MCP-Protocol-Version: <the version negotiated>      (once known)
 *     Authorization: Bearer <$token_env>                  (when set)
 * The answer to a request is the body (application/json), or one event of
 * an event stream (text/event-stream: "data:" lines, events ended by a
 * blank line), read until the message with the request's id: the
 * transfer stops there.  A notification is answered 202 with no body.
 * Bodies are kept up to max_msg bytes (per event on a stream), as
 * decoded: gzip and the other encodings libcurl knows are asked for.  The
 * token is read from the environment at each request and goes into that
 * request's header only; redirects are never followed, so it never goes
 * to another host (a 3xx is an error naming where it pointed).
 *
 * A server is not trusted: the session id is taken from the answer to
 * initialize alone (1..PL__MCP_SESSION_MAX visible ASCII characters, as
 * the spec has it; another is an error), and one that changes or goes
 * missing in later answers is not followed.  A session the client leaves
 * (the server answered 404 to it, or an error stopped it: a new one is
 * begun) or closes is ended with a DELETE of it, best effort and in
 * bounded time, carrying the token and the protocol version as every
 * request does: a server that refuses it (405) or fails changes nothing.
 * A status that is not 2xx is
 * a T_ code the call reads as the error taxonomy (mcp.h), with the
 * server's Retry-After kept for a 429 or 5xx, and the message of a
 * JSON-RPC error in its body quoted.
 *
 * The sockets libcurl opens are opened and closed by us (its open and
 * close socket callbacks), so that a child made by fork() knows the ones
 * its copy of the handle shares with the parent: it turns them to
 * /dev/null before libcurl lets them go (pl__mcp_http_forsake()), since
 * closing a TLS connection reads what the server sent (bytes of the
 * parent's answer) and writes a close_notify, which would end the
 * parent's connection.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "llm.h" /* pl__llm_retry_after() */
#include "mcp.h"

/* The most sockets libcurl holds open at once for one handle: its
 * connections kept (at most 5, its default), and the tries of a connect. */
#define PL__MCP_SOCKS 16

struct pl__mcp_http {
    char *url;
    char *token_env;
    size_t max_msg;
    CURL *c;
    int socks[PL__MCP_SOCKS]; /* the sockets it holds open (fork) */
    size_t n_socks;
    char session[PL__MCP_SESSION_MAX + 1]; /* "" until initialize gives one */
    char version[16];    /* the protocol version the last request named */
    bool list_changed;   /* a stream brought notifications/tools/list_changed */
    long retry_after_ms; /* the last answer's Retry-After; -1: none */
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static curl_socket_t open_socket(void *user, curlsocktype purpose,
                                 struct curl_sockaddr *a)
{
    pl__mcp_http *h = user;
    (void)purpose;
    if (h->n_socks == PL__MCP_SOCKS)
        return CURL_SOCKET_BAD;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd >= 0)
        h->socks[h->n_socks++] = fd;
    return fd >= 0 ? fd : CURL_SOCKET_BAD;
}

static int close_socket(void *user, curl_socket_t fd)
{
    pl__mcp_http *h = user;
    for (size_t i = 0; i < h->n_socks; i++)
        if (h->socks[i] == fd) {
            h->socks[i] = h->socks[--h->n_socks];
            break;
        }
    return close(fd);
}

/* The options of every exchange, set again after each curl_easy_reset(). */
static void base_options(pl__mcp_http *h, struct curl_slist *hd,
                         long timeout_ms)
{
    CURL *c = h->c;
    curl_easy_setopt(c, CURLOPT_URL, h->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    /* the bearer token is a header of ours: a redirect followed would
     * carry it to wherever the server points, so none is */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, h);
    curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
    curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, h);
}

const char *pl__mcp_http_url_bad(const char *url)
{
    /* libcurl reads "http:///mcp" as the host "mcp": a host is what comes
     * right after "//" */
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    if (!*host || strchr("/?#:@", *host))
        return "no host";
    pthread_once(&g_once, curl_init);
    CURLU *u = curl_url();
    if (!u)
        return "out of memory";
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
    curl_url_cleanup(u);
    return rc == CURLUE_OK ? NULL : curl_url_strerror(rc);
}

pl__mcp_http *pl__mcp_http_new(const char *url, const char *token_env,
                               size_t max_msg)
{
    pthread_once(&g_once, curl_init);
    pl__mcp_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->max_msg = max_msg;
    h->retry_after_ms = -1;
    h->url = pl__strdup(url);
    h->token_env = token_env ? pl__strdup(token_env) : NULL;
    h->c = curl_easy_init();
    if (!h->url || (token_env && !h->token_env) || !h->c) {
        pl__mcp_http_free(h);
        return NULL;
    }
    return h;
}

/* One exchange's state, for the callbacks. */
typedef struct exchange {
    pl__mcp_http *h;
    int64_t id;    /* the answer looked for; 0 for none */
    bool stream;   /* text/event-stream */
    pl__buf body;  /* JSON body, or the stream's unread part */
    cJSON *answer; /* found */
    bool too_big;
    bool nomem;     /* a message could not be read for want of memory */
    char ctype[64]; /* the Content-Type, cut */
    char session[PL__MCP_SESSION_MAX + 1]; /* as given, if valid */
    bool session_bad;     /* one given that is not 1..MAX visible ASCII */
    size_t header_bytes;  /* of every response, 1xx ones too */
    bool headers_too_big; /* past PL__MCP_HEADERS_MAX: the transfer ends */
} exchange;

/* The most header bytes read of one exchange. */
#define PL__MCP_HEADERS_MAX ((size_t)256 << 10)

/* 1..PL__MCP_SESSION_MAX characters, each visible ASCII (0x21..0x7E). */
static bool session_ok(const char *v, size_t k)
{
    if (!k || k > PL__MCP_SESSION_MAX)
        return false;
    for (size_t i = 0; i < k; i++)
        if (v[i] < 0x21 || v[i] > 0x7e)
            return false;
    return true;
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    exchange *x = user;
    size_t len = size * n;
    static const char sid[] = "mcp-session-id:";
    static const char ct[] = "content-type:";
    if ((x->header_bytes += len) > PL__MCP_HEADERS_MAX) {
        x->headers_too_big = true;
        return 0; /* ends the transfer */
    }
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        /* a response begins (after a 1xx, another): its own headers */
        x->session[0] = x->ctype[0] = '\0';
        x->session_bad = x->stream = false;
    } else if (len > sizeof sid - 1 &&
               strncasecmp(p, sid, sizeof sid - 1) == 0) {
        const char *v = p + sizeof sid - 1;
        size_t k = len - (sizeof sid - 1);
        while (k && (*v == ' ' || *v == '\t'))
            v++, k--;
        if (k && v[k - 1] == '\n')
            k--;
        if (k && v[k - 1] == '\r')
            k--;
        while (k && (v[k - 1] == ' ' || v[k - 1] == '\t'))
            k--;
        if (session_ok(v, k)) {
            memcpy(x->session, v, k);
            x->session[k] = '\0';
        } else {
            x->session_bad = true;
        }
    } else if (len > sizeof ct - 1 && strncasecmp(p, ct, sizeof ct - 1) == 0) {
        const char *v = p + sizeof ct - 1;
        size_t k = len - (sizeof ct - 1);
        while (k && *v == ' ')
            v++, k--;
        x->stream = k >= 17 && strncasecmp(v, "text/event-stream", 17) == 0;
        size_t c = 0;
        while (c < k && c < sizeof x->ctype - 1 && v[c] >= 0x20 && v[c] < 0x7f)
            c++;
        memcpy(x->ctype, v, c);
        x->ctype[c] = '\0';
    }
    return len;
}

/* A message of the stream or body: keep it if it answers x->id. */
static void take(exchange *x, char *text, size_t len)
{
    cJSON *v = NULL;
    if (pl__mcp_parse(&v, text, len) == PL_ENOMEM)
        x->nomem = true;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(v, "method");
    if (!x->answer && cJSON_IsNumber(id) && x->id &&
        id->valuedouble == (double)x->id && !method) {
        x->answer = v;
        return;
    }
    if (cJSON_IsString(method) &&
        strcmp(method->valuestring, "notifications/tools/list_changed") == 0)
        x->h->list_changed = true;
    cJSON_Delete(v);
}

/* Read the complete events of the stream's buffer. */
static void read_events(exchange *x)
{
    for (;;) {
        char *b = (char *)x->body.data;
        size_t n = x->body.len;
        size_t end = 0, skip = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            if (b[i] == '\n' && b[i + 1] == '\n') {
                end = i, skip = 2;
                break;
            }
            if (i + 3 < n && memcmp(b + i, "\r\n\r\n", 4) == 0) {
                end = i, skip = 4;
                break;
            }
        }
        if (!skip)
            return;
        /* the event's data: its "data:" lines joined */
        pl__buf data = {0};
        bool cut = false;
        for (size_t i = 0; i < end;) {
            size_t k = i;
            while (k < end && b[k] != '\n')
                k++;
            size_t e = k > i && b[k - 1] == '\r' ? k - 1 : k;
            if (e - i >= 5 && memcmp(b + i, "data:", 5) == 0) {
                size_t s = i + 5 + (e > i + 5 && b[i + 5] == ' ');
                if ((data.len && pl__buf_append(&data, "\n", 1)) ||
                    pl__buf_append(&data, b + s, e - s)) {
                    x->nomem = cut = true;
                    break;
                }
            }
            i = k + 1;
        }
        if (data.len && !cut)
            take(x, (char *)data.data, data.len);
        pl__buf_free(&data);
        memmove(b, b + end + skip, n - end - skip);
        x->body.len = n - end - skip;
        if (x->answer)
            return;
    }
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    exchange *x = user;
    size_t len = size * n;
    if (x->body.len + len > x->h->max_msg + 4) {
        x->too_big = true;
        return 0;
    }
    if (pl__buf_append(&x->body, p, len)) {
        x->nomem = true;
        return 0;
    }
    if (x->stream) {
        read_events(x);
        if (x->answer)
            return 0; /* the answer came: stop reading */
    }
    return len;
}

/* After the transfer: a JSON body's answer (a stream's came as read). */
static void body_answer(exchange *x)
{
    if (x->id && !x->answer && !x->stream && x->body.len)
        take(x, (char *)x->body.data, x->body.len);
}

cJSON *pl__mcp_http_read(pl__mcp_http *h, int64_t id, bool stream,
                         const char *const *pieces, const size_t *lens,
                         size_t n, bool *too_big)
{
    exchange x = {.h = h, .id = id, .stream = stream};
    for (size_t i = 0; i < n; i++)
        if (on_body((char *)pieces[i], 1, lens[i], &x) != lens[i])
            break;
    if (!x.too_big)
        body_answer(&x);
    *too_big = x.too_big;
    pl__buf_free(&x.body);
    return x.answer;
}

/* The message of a JSON-RPC error in a body that is not 2xx, if any. */
static const char *error_message(const exchange *x, cJSON **hold)
{
    *hold = NULL;
    if (!x->stream && x->body.len) /* not one cut at a NUL */
        pl_json_parse(hold, (const char *)x->body.data, x->body.len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(*hold, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    return cJSON_IsString(m) ? m->valuestring : NULL;
}

/* A status that is not 2xx as a T_ code, @p why saying what it was. */
static int status_error(pl__mcp_http *h, const exchange *x, long status,
                        bool sent_session, char *why, size_t n)
{
    struct curl_header *ra = NULL;
    bool wait = status == 429 || (status >= 500 && status <= 599);
    char after[80] = "";
    if (wait && curl_easy_header(h->c, "Retry-After", 0, CURLH_HEADER, -1,
                                 &ra) == CURLHE_OK) {
        long ms = -1;
        if (pl__llm_retry_after(&ms, ra->value, pl__now_us() / 1000) == PL_OK)
            h->retry_after_ms = ms;
        snprintf(after, sizeof after, "; Retry-After: %.40s", ra->value);
    }
    cJSON *hold = NULL;
    const char *msg = error_message(x, &hold);
    char said[240] = "";
    if (msg)
        snprintf(said, sizeof said, ": %.200s", msg);
    const char *what = "";
    int t = T_BAD;
    if (status == 401) {
        what = " (the server refused the credentials)";
        t = T_AUTH;
    } else if (status == 403) {
        what = " (forbidden)";
        t = T_FORBIDDEN;
    } else if (status == 404 && sent_session) {
        /* kept, to be ended with a DELETE when a new one begins */
        what = " (the session ended)";
        t = T_EXPIRED;
    } else if (status == 404) {
        what = " (no MCP endpoint at the URL)";
        t = T_NOTFOUND;
    } else if (status == 429) {
        what = " (too many requests)";
        t = T_RATE;
    } else if (status >= 500 && status <= 599) {
        t = T_DEAD;
    } else if (status == 400 || status == 422) {
        what = " (the server refused the request)";
        t = T_INVALID;
    } else if (status >= 300 && status <= 399) {
        char *to = NULL;
        curl_easy_getinfo(h->c, CURLINFO_REDIRECT_URL, &to);
        snprintf(why, n, "HTTP %ld: a redirect to %.200s, not followed%s",
                 status, to ? to : "(nowhere)", said);
        cJSON_Delete(hold);
        return T_BAD;
    }
    snprintf(why, n, "HTTP %ld%s%s%s", status, what, after, said);
    cJSON_Delete(hold);
    return t;
}

/* A 2xx that did not bring the answer of a request. */
static int no_answer(const exchange *x, long status, char *why, size_t n)
{
    if (x->stream) {
        snprintf(why, n,
                 "HTTP %ld: the event stream ended without the answer "
                 "(%zu bytes after its last event)",
                 status, x->body.len);
        return T_DEAD;
    }
    snprintf(why, n,
             "HTTP %ld: the body (%zu bytes, Content-Type %s) is not the "
             "answer",
             status, x->body.len, x->ctype[0] ? x->ctype : "none");
    return T_BAD;
}

int pl__mcp_http_post(pl__mcp_http *h, const char *body, size_t len, int64_t id,
                      const char *version, int64_t timeout_ms, cJSON **answer,
                      char *why, size_t n)
{
    *answer = NULL;
    h->retry_after_ms = -1;
    if (timeout_ms <= 0) {
        snprintf(why, n, "no answer in time");
        return T_TIMEOUT;
    }
    if (!h->c && !(h->c = curl_easy_init())) { /* after a fork, none made */
        snprintf(why, n, "libcurl cannot start");
        return T_NOMEM;
    }
    struct curl_slist *hd = NULL;
    char line[PL__MCP_SESSION_MAX + 64];
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, "Accept: application/json, text/event-stream");
    bool sent_session = h->session[0] != '\0';
    if (sent_session) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", h->session);
        hd = curl_slist_append(hd, line);
    }
    if (version && *version) {
        snprintf(line, sizeof line, "MCP-Protocol-Version: %s", version);
        hd = curl_slist_append(hd, line);
        snprintf(h->version, sizeof h->version, "%s", version);
    }
    const char *token = h->token_env ? getenv(h->token_env) : NULL;
    char *auth = token ? pl__asprintf("Authorization: Bearer %s", token) : NULL;
    if (auth)
        hd = curl_slist_append(hd, auth);
    exchange x = {.h = h, .id = id};
    char err[CURL_ERROR_SIZE] = "";
    CURL *c = h->c;
    curl_easy_reset(c);
    base_options(h, hd, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* all it decodes */
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    bool ok = status >= 200 && status <= 299;
    int t = T_OK;
    if (x.too_big) {
        snprintf(why, n,
                 "the server sent a message longer than %zu bytes "
                 "(max_message_bytes)",
                 h->max_msg);
        t = T_TOOBIG;
    } else if (x.nomem && !x.answer) {
        snprintf(why, n, "out of memory reading the server's answer");
        t = T_NOMEM;
    } else if (x.headers_too_big) {
        snprintf(why, n, "the server sent more than %zu bytes of headers",
                 PL__MCP_HEADERS_MAX);
        t = T_BAD;
    } else if (!x.answer && rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(why, n, "no answer in time");
        t = T_TIMEOUT;
    } else if (!x.answer && rc == CURLE_BAD_CONTENT_ENCODING) {
        snprintf(why, n, "HTTP %ld: a body that does not decode: %s", status,
                 err[0] ? err : curl_easy_strerror(rc));
        t = T_BAD;
    } else if (!x.answer && rc == CURLE_OUT_OF_MEMORY) {
        /* what libcurl says of a header line past its CURL_MAX_HTTP_HEADER
         * (100 KiB) too */
        snprintf(why, n,
                 "libcurl: %s (a header line past its limit, or out of "
                 "memory)",
                 err[0] ? err : curl_easy_strerror(rc));
        t = T_BAD;
    } else if (!x.answer && rc != CURLE_OK) {
        snprintf(why, n, "%s", err[0] ? err : curl_easy_strerror(rc));
        t = T_DEAD;
    } else if (!ok) {
        t = status_error(h, &x, status, sent_session, why, n);
    } else if (x.session_bad && !sent_session) {
        snprintf(why, n,
                 "HTTP %ld: the server gave an Mcp-Session-Id that is not "
                 "1..%d visible ASCII characters",
                 status, PL__MCP_SESSION_MAX);
        t = T_BAD;
    } else {
        /* taken from initialize's answer alone: another later is not
         * followed, nor is one that goes missing */
        if (!sent_session && x.session[0])
            memcpy(h->session, x.session, sizeof h->session);
        if (id)
            body_answer(&x);
        if (id && !x.answer && x.nomem) {
            snprintf(why, n, "out of memory reading the server's answer");
            t = T_NOMEM;
        } else if (id && !x.answer) {
            t = no_answer(&x, status, why, n);
        }
    }
    if (t == T_OK)
        *answer = x.answer;
    else
        cJSON_Delete(x.answer);
    pl__buf_free(&x.body);
    return t;
}

long pl__mcp_http_retry_after(const pl__mcp_http *h)
{
    return h->retry_after_ms;
}

bool pl__mcp_http_list_changed(pl__mcp_http *h)
{
    bool changed = h->list_changed;
    h->list_changed = false;
    return changed;
}

static size_t discard(char *p, size_t size, size_t n, void *user)
{
    (void)p, (void)user;
    return size * n;
}

/* End the session: a DELETE of it, at most @p timeout_ms (none when
 * <= 0), whatever it answers; then it is forgotten. */
static void end_session(pl__mcp_http *h, long timeout_ms)
{
    if (h->c && h->session[0] && timeout_ms > 0) {
        char line[PL__MCP_SESSION_MAX + 32];
        struct curl_slist *hd = NULL;
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", h->session);
        hd = curl_slist_append(hd, line);
        if (h->version[0]) {
            snprintf(line, sizeof line, "MCP-Protocol-Version: %s", h->version);
            hd = curl_slist_append(hd, line);
        }
        /* a server that asks for the token asks for it to end a session
         * too */
        const char *token = h->token_env ? getenv(h->token_env) : NULL;
        char *auth = token ? pl__asprintf("Authorization: Bearer %s", token)
                           : NULL;
        if (auth)
            hd = curl_slist_append(hd, auth);
        CURL *c = h->c;
        curl_easy_reset(c);
        base_options(h, hd, timeout_ms);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
        /* whatever the answer says (a 405: sessions end at the server's
         * will), it is not ours to read, nor to print */
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_perform(c);
        curl_slist_free_all(hd);
        if (auth) {
            memset(auth, 0, strlen(auth));
            free(auth);
        }
    }
    h->session[0] = '\0';
}

void pl__mcp_http_forget(pl__mcp_http *h, int64_t timeout_ms)
{
    end_session(h, (long)(timeout_ms < 1000 ? timeout_ms : 1000));
}

void pl__mcp_http_forsake(pl__mcp_http *h)
{
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
        for (size_t i = 0; i < h->n_socks; i++)
            dup2(null, h->socks[i]);
        close(null);
        if (h->c)
            curl_easy_cleanup(h->c); /* closes them (close_socket()) */
    } else {
        /* the handle is left, rather than let go on the parent's
         * sockets: only this process's copies of them are closed */
        for (size_t i = 0; i < h->n_socks; i++)
            close(h->socks[i]);
    }
    h->n_socks = 0;
    h->c = curl_easy_init(); /* NULL: the next request tries again */
    h->session[0] = h->version[0] = '\0';
    h->list_changed = false;
    h->retry_after_ms = -1;
}

void pl__mcp_http_free(pl__mcp_http *h)
{
    if (!h)
        return;
    end_session(h, 2000);
    if (h->c)
        curl_easy_cleanup(h->c);
    free(h->url);
    free(h->token_env);
    free(h);
}
