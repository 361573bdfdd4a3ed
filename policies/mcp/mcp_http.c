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
 * Bodies are kept up to max_msg bytes (per event on a stream).  The token
 * is read from the environment at each request and goes into that
 * request's header only.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "mcp.h"

struct pl__mcp_http {
    char *url;
    char *token_env;
    size_t max_msg;
    CURL *c;
    char session[256]; /* "" until the server gives one */
    bool list_changed; /* a stream brought notifications/tools/list_changed */
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

pl__mcp_http *pl__mcp_http_new(const char *url, const char *token_env,
                               size_t max_msg)
{
    pthread_once(&g_once, curl_init);
    pl__mcp_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->max_msg = max_msg;
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
    char session[256];
} exchange;

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    exchange *x = user;
    size_t len = size * n;
    static const char sid[] = "mcp-session-id:";
    static const char ct[] = "content-type:";
    if (len > sizeof sid - 1 && strncasecmp(p, sid, sizeof sid - 1) == 0) {
        const char *v = p + sizeof sid - 1;
        size_t k = len - (sizeof sid - 1);
        while (k && (*v == ' ' || *v == '\t'))
            v++, k--;
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' '))
            k--;
        if (k < sizeof x->session) {
            memcpy(x->session, v, k);
            x->session[k] = '\0';
        }
    } else if (len > sizeof ct - 1 && strncasecmp(p, ct, sizeof ct - 1) == 0) {
        const char *v = p + sizeof ct - 1;
        while (*v == ' ')
            v++;
        x->stream = strncasecmp(v, "text/event-stream", 17) == 0;
    }
    return len;
}

/* A message of the stream or body: keep it if it answers x->id. */
static void take(exchange *x, const char *text, size_t len)
{
    cJSON *v = cJSON_ParseWithLength(text, len);
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
        for (size_t i = 0; i < end;) {
            size_t k = i;
            while (k < end && b[k] != '\n')
                k++;
            size_t e = k > i && b[k - 1] == '\r' ? k - 1 : k;
            if (e - i >= 5 && memcmp(b + i, "data:", 5) == 0) {
                size_t s = i + 5 + (e > i + 5 && b[i + 5] == ' ');
                if ((data.len && pl__buf_append(&data, "\n", 1)) ||
                    pl__buf_append(&data, b + s, e - s))
                    break;
            }
            i = k + 1;
        }
        if (data.len)
            take(x, (const char *)data.data, data.len);
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
    if (pl__buf_append(&x->body, p, len))
        return 0;
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
        take(x, (const char *)x->body.data, x->body.len);
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

int pl__mcp_http_post(pl__mcp_http *h, const char *body, size_t len, int64_t id,
                      const char *version, int64_t timeout_ms, cJSON **answer,
                      char *why, size_t n)
{
    *answer = NULL;
    if (timeout_ms <= 0) {
        snprintf(why, n, "no answer in time");
        return T_TIMEOUT;
    }
    struct curl_slist *hd = NULL;
    char line[512];
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, "Accept: application/json, text/event-stream");
    if (h->session[0]) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", h->session);
        hd = curl_slist_append(hd, line);
    }
    if (version && *version) {
        snprintf(line, sizeof line, "MCP-Protocol-Version: %s", version);
        hd = curl_slist_append(hd, line);
    }
    const char *token = h->token_env ? getenv(h->token_env) : NULL;
    char *auth = token ? pl__asprintf("Authorization: Bearer %s", token) : NULL;
    if (auth)
        hd = curl_slist_append(hd, auth);
    exchange x = {.h = h, .id = id};
    char err[CURL_ERROR_SIZE] = "";
    CURL *c = h->c;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, h->url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    if (x.session[0])
        snprintf(h->session, sizeof h->session, "%s", x.session);
    int t = T_OK;
    if (x.answer) {
        *answer = x.answer; /* a stream stopped once it came */
    } else if (x.too_big) {
        snprintf(why, n,
                 "the server sent a message longer than %zu bytes "
                 "(max_message_bytes)",
                 h->max_msg);
        t = T_TOOBIG;
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(why, n, "no answer in time");
        t = T_TIMEOUT;
    } else if (rc != CURLE_OK) {
        snprintf(why, n, "%s", err[0] ? err : curl_easy_strerror(rc));
        t = T_DEAD;
    } else if (status == 401 || status == 403) {
        snprintf(why, n, "HTTP %ld: the server refused the credentials",
                 status);
        t = T_AUTH;
    } else if (status == 404 && h->session[0]) {
        snprintf(why, n, "HTTP 404: the session ended");
        h->session[0] = '\0';
        t = T_DEAD;
    } else if (status < 200 || status > 299) {
        snprintf(why, n, "HTTP %ld", status);
        t = T_DEAD;
    } else if (id) {
        body_answer(&x);
        if (x.answer) {
            *answer = x.answer;
        } else {
            snprintf(why, n, "HTTP %ld without the answer", status);
            t = T_DEAD;
        }
    }
    pl__buf_free(&x.body);
    return t;
}

void pl__mcp_http_forget(pl__mcp_http *h) { h->session[0] = '\0'; }

bool pl__mcp_http_list_changed(pl__mcp_http *h)
{
    bool changed = h->list_changed;
    h->list_changed = false;
    return changed;
}

void pl__mcp_http_free(pl__mcp_http *h)
{
    if (!h)
        return;
    if (h->c && h->session[0]) {
        char line[300];
        struct curl_slist *hd = NULL;
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", h->session);
        hd = curl_slist_append(hd, line);
        curl_easy_reset(h->c);
        curl_easy_setopt(h->c, CURLOPT_URL, h->url);
        curl_easy_setopt(h->c, CURLOPT_CUSTOMREQUEST, "DELETE");
        curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h->c, CURLOPT_TIMEOUT_MS, 2000L);
        curl_easy_setopt(h->c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h->c, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(h->c, CURLOPT_NOBODY, 1L);
        curl_easy_perform(h->c);
        curl_slist_free_all(hd);
    }
    if (h->c)
        curl_easy_cleanup(h->c);
    free(h->url);
    free(h->token_env);
    free(h);
}
