/*
 * http_get.c -- the "http_get" tool: a GET over libcurl, only to allowed
 * URLs, redirects followed here (not by libcurl) so that each one is
 * checked against the allowlist again.
 *
 * HTTP outcome          error-as-data code
 *   2xx                 (a result: url, status, content_type, body, ...)
 *   401                 Unauthorized
 *   403                 Forbidden
 *   404, 410            NotFound
 *   429                 RateLimited (the message carries Retry-After)
 *   5xx                 RetryableServer
 *   other 4xx, 1xx/3xx  InvalidInput
 *   timeout             Timeout
 *   connection failed   RetryableServer
 *   URL not allowed     Forbidden (the first URL, or a redirect)
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "tools.h"

#define MAX_URL 8192

typedef struct body {
    char *data;
    size_t len, cap; /* cap: the tool's limit, data has cap + 1 bytes */
    bool truncated;
} body;

static size_t on_data(char *p, size_t size, size_t n, void *user)
{
    body *b = user;
    size_t got = size * n;
    size_t room = b->cap - b->len;
    if (got > room) {
        memcpy(b->data + b->len, p, room);
        b->len += room;
        b->truncated = true;
        return 0; /* stop the transfer: CURLE_WRITE_ERROR, expected */
    }
    memcpy(b->data + b->len, p, got);
    b->len += got;
    return got;
}

/* A parsed URL's parts, and whether the allowlist admits it. */
typedef struct url_parts {
    char *scheme, *host, *path;
    long port;
} url_parts;

static void parts_free(url_parts *u)
{
    curl_free(u->scheme);
    curl_free(u->host);
    curl_free(u->path);
    memset(u, 0, sizeof *u);
}

/*
 * Parse @p url and check it against the allowlist.  *code is NULL when it
 * is allowed, else the error-as-data code, with the message set.  Returns
 * PL_OK, or PL_ENOMEM.
 */
static int check_url(const char **out_code, url_parts *u, const pl_tools *t,
                     const char *url, bool redirect)
{
    memset(u, 0, sizeof *u);
    *out_code = NULL;
    const char *what = redirect ? "redirect to" : "URL";
    size_t len = strlen(url);
    if (len > MAX_URL) {
        pl__err(PL_EINVAL, "%s of %zu bytes is longer than %d", what, len,
                MAX_URL);
        *out_code = PL_ERR_INVALID_INPUT;
        return PL_OK;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] < 0x20 || url[i] == 0x7f) {
            pl__err(PL_EINVAL, "%s holds a control byte at offset %zu", what,
                    i);
            *out_code = PL_ERR_INVALID_INPUT;
            return PL_OK;
        }
    CURLU *h = curl_url();
    if (!h)
        return pl__err(PL_ENOMEM, "http_get: out of memory");
    const char *code = NULL;
    char *port = NULL;
    if (curl_url_set(h, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) !=
            CURLUE_OK ||
        curl_url_get(h, CURLUPART_SCHEME, &u->scheme, 0) != CURLUE_OK) {
        pl__err(PL_EINVAL, "%s '%s' is not a valid URL", what, url);
        code = PL_ERR_INVALID_INPUT;
        goto done;
    }
    if (strcmp(u->scheme, "file") == 0) {
        if (curl_url_get(h, CURLUPART_PATH, &u->path, 0) != CURLUE_OK) {
            pl__err(PL_EINVAL, "%s '%s' has no path", what, url);
            code = PL_ERR_INVALID_INPUT;
            goto done;
        }
        char *host = NULL;
        curl_url_get(h, CURLUPART_HOST, &host, 0);
        bool local = !host || !*host || strcasecmp(host, "localhost") == 0;
        curl_free(host);
        bool allowed = false;
        for (size_t i = 0; i < t->n_allow; i++)
            allowed = allowed || t->allow[i].file;
        if (redirect || !local || !allowed || !t->sb) {
            pl__err(PL_EFORBIDDEN, "%s '%s' is not allowed%s", what, url,
                    redirect ? " (no redirect leads to a file)" : "");
            code = PL_ERR_FORBIDDEN;
        }
        goto done;
    }
    if (curl_url_get(h, CURLUPART_HOST, &u->host, 0) != CURLUE_OK ||
        curl_url_get(h, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) !=
            CURLUE_OK) {
        pl__err(PL_EINVAL, "%s '%s' has no host", what, url);
        code = PL_ERR_INVALID_INPUT;
        goto done;
    }
    u->port = strtol(port, NULL, 10);
    for (size_t i = 0; i < t->n_allow; i++) {
        const pl__allow *a = &t->allow[i];
        if (!a->file && strcmp(a->scheme, u->scheme) == 0 &&
            strcasecmp(a->host, u->host) == 0 &&
            (a->port < 0 || a->port == u->port))
            goto done; /* allowed */
    }
    pl__err(PL_EFORBIDDEN,
            "%s '%s' is not allowed (%s://%s:%ld is not in "
            "the allowlist)",
            what, url, u->scheme, u->host, u->port);
    code = PL_ERR_FORBIDDEN;
done:
    curl_free(port);
    curl_url_cleanup(h);
    *out_code = code;
    return PL_OK;
}

/* A file:// URL: read it through the sandbox. */
static int get_file(pl_steps *out, const pl_tools *t, const char *url,
                    const url_parts *u)
{
    int len = 0;
    char *path = curl_easy_unescape(NULL, u->path, 0, &len);
    if (!path)
        return pl__err(PL_ENOMEM, "http_get: out of memory");
    char *data = NULL;
    size_t n = 0;
    bool truncated = false;
    const char *code = NULL;
    int st = pl__read_text(&data, &n, &truncated, &code, t->sb, path,
                           (size_t)len, t->max_body_bytes);
    curl_free(path);
    if (st == PL_ENOMEM)
        return st;
    if (st)
        return pl_steps_add_error(out, code, pl_errmsg());
    char note[128];
    snprintf(note, sizeof note,
             "the body is larger than %zu bytes: this is its first %zu",
             t->max_body_bytes, n);
    st = pl_steps_add_resultf(out, "{s:s, s:i, s:n, s:s, s:I, s:b, s:s*}",
                              "url", url, "status", 200, "content_type", "body",
                              data, "bytes", (int64_t)n, "truncated", truncated,
                              "note", truncated ? note : NULL);
    free(data);
    return st;
}

/* The error for an HTTP status that is not 2xx. */
static int http_error(pl_steps *out, CURL *h, const char *url, long status)
{
    char msg[512];
    const char *code = PL_ERR_INVALID_INPUT;
    if (status == 401)
        code = PL_ERR_UNAUTHORIZED;
    else if (status == 403)
        code = PL_ERR_FORBIDDEN;
    else if (status == 404 || status == 410)
        code = PL_ERR_NOT_FOUND;
    else if (status == 429)
        code = PL_ERR_RATE_LIMITED;
    else if (status >= 500 && status <= 599)
        code = PL_ERR_RETRYABLE_SERVER;
    struct curl_header *ra = NULL;
    if (status == 429 && curl_easy_header(h, "Retry-After", 0, CURLH_HEADER, -1,
                                          &ra) == CURLHE_OK)
        snprintf(msg, sizeof msg, "GET %.400s: HTTP %ld; Retry-After: %.40s",
                 url, status, ra->value);
    else
        snprintf(msg, sizeof msg, "GET %.400s: HTTP %ld", url, status);
    return pl_steps_add_error(out, code, msg);
}

/* The error for a transfer that failed. */
static int transfer_error(pl_steps *out, const char *url, CURLcode rc,
                          const char *detail)
{
    const char *code = PL_ERR_RETRYABLE_SERVER;
    if (rc == CURLE_OPERATION_TIMEDOUT)
        code = PL_ERR_TIMEOUT;
    else if (rc == CURLE_COULDNT_RESOLVE_HOST)
        code = PL_ERR_NOT_FOUND;
    else if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL)
        code = PL_ERR_INVALID_INPUT;
    char msg[600];
    snprintf(msg, sizeof msg, "GET %.400s: %s%s%.150s", url,
             curl_easy_strerror(rc), *detail ? ": " : "", detail);
    return pl_steps_add_error(out, code, msg);
}

static int get_http(pl_steps *out, const pl_tools *t, pl_ctx *ctx,
                    const char *first)
{
    int st = PL_OK;
    CURL *h = curl_easy_init();
    struct curl_slist *headers = NULL;
    char *url = pl__strdup(first);
    char *key = pl__asprintf("Idempotency-Key: %s",
                             pl_ctx_idempotency_key(ctx));
    body b = {malloc(t->max_body_bytes + 1), 0, t->max_body_bytes, false};
    char errbuf[CURL_ERROR_SIZE];
    if (!h || !url || !key || !b.data) {
        st = pl__err(PL_ENOMEM, "http_get: out of memory");
        goto done;
    }
    struct curl_slist *hl = curl_slist_append(NULL, key);
    if (!hl) {
        st = pl__err(PL_ENOMEM, "http_get: out of memory");
        goto done;
    }
    headers = hl;
    /* timeout_ms is the whole request's, its redirects included */
    int64_t start = (int64_t)(pl__mono_ns() / 1000000);
    int64_t end = t->timeout_ms > INT64_MAX - start ? INT64_MAX
                                                    : start + t->timeout_ms;
    for (int hops = 0;; hops++) {
        /* each request is cut at the call's deadline when that comes
         * first (pl_ctx_deadline(): the recorded clock, Unix ms) */
        long timeout_ms = t->timeout_ms;
        bool by_deadline = false, by_end = false;
        int64_t rest = end - (int64_t)(pl__mono_ns() / 1000000);
        if (hops > 0 && rest < timeout_ms) {
            timeout_ms = rest > 0 ? (long)rest : 1;
            by_end = true;
        }
        int64_t deadline = pl_ctx_deadline(ctx);
        if (deadline) {
            int64_t left = deadline - pl__now_us() / 1000;
            if (left <= 0) {
                char msg[600];
                snprintf(msg, sizeof msg,
                         "GET %.400s was not sent: the call's deadline has "
                         "passed",
                         url);
                st = pl_steps_add_error(out, PL_ERR_TIMEOUT, msg);
                goto done;
            }
            if (left < timeout_ms) {
                timeout_ms = (long)left;
                by_deadline = true;
            }
        }
        b.len = 0;
        b.truncated = false;
        errbuf[0] = '\0';
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROXY, ""); /* no proxy from the env */
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, t->connect_timeout_ms);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_USERAGENT, "policyledger-http_get/1");
        CURLcode rc = curl_easy_perform(h);
        if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && b.truncated)) {
            if (rc == CURLE_OPERATION_TIMEDOUT && by_deadline)
                snprintf(errbuf, sizeof errbuf,
                         "cut at the call's deadline, %ld ms after it was "
                         "sent",
                         timeout_ms);
            else if (rc == CURLE_OPERATION_TIMEDOUT && by_end)
                snprintf(errbuf, sizeof errbuf,
                         "cut at the timeout of %ld ms, after %d "
                         "redirect%s",
                         t->timeout_ms, hops, hops == 1 ? "" : "s");
            st = transfer_error(out, url, rc, errbuf);
            goto done;
        }
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        char *next = NULL;
        curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &next);
        if (status >= 300 && status < 400 && next) {
            if (hops >= t->max_redirects) {
                char msg[600];
                snprintf(msg, sizeof msg, "GET %.400s: more than %d redirects",
                         first, t->max_redirects);
                st = pl_steps_add_error(out, PL_ERR_INVALID_INPUT, msg);
                goto done;
            }
            url_parts u;
            const char *code = NULL;
            st = check_url(&code, &u, t, next, true);
            parts_free(&u);
            if (st)
                goto done;
            if (code) {
                st = pl_steps_add_error(out, code, pl_errmsg());
                goto done;
            }
            char *copy = pl__strdup(next);
            if (!copy) {
                st = pl__err(PL_ENOMEM, "http_get: out of memory");
                goto done;
            }
            free(url);
            url = copy;
            continue;
        }
        if (status < 200 || status > 299) {
            st = http_error(out, h, url, status);
            goto done;
        }
        size_t bad = 0;
        long long keep = pl__text_len(b.data, b.len, b.truncated, &bad);
        if (keep < 0) {
            char msg[600];
            snprintf(msg, sizeof msg,
                     "GET %.400s: the body is not UTF-8 text (byte at offset "
                     "%zu)",
                     url, bad);
            st = pl_steps_add_error(out, PL_ERR_INVALID_INPUT, msg);
            goto done;
        }
        b.data[keep] = '\0';
        char *ctype = NULL;
        curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
        char note[128];
        snprintf(note, sizeof note,
                 "the body is larger than %zu bytes: this is its first %lld",
                 t->max_body_bytes, keep);
        st = pl_steps_add_resultf(out, "{s:s, s:i, s:s?, s:s, s:I, s:b, s:s*}",
                                  "url", url, "status", (int)status,
                                  "content_type", ctype, "body", b.data,
                                  "bytes", (int64_t)keep, "truncated",
                                  b.truncated, "note",
                                  b.truncated ? note : NULL);
        goto done;
    }
done:
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    free(b.data);
    free(key);
    free(url);
    return st;
}

int pl__tool_http_get(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                      void *user)
{
    const pl_tools *t = user;
    const char *url = NULL;
    if (pl_json_unpack(action->payload, "{s:s !}", "url", &url))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    url_parts u;
    const char *code = NULL;
    int st = check_url(&code, &u, t, url, false);
    if (st)
        ;
    else if (code)
        st = pl_steps_add_error(out, code, pl_errmsg());
    else if (strcmp(u.scheme, "file") == 0)
        st = get_file(out, t, url, &u);
    else
        st = get_http(out, t, ctx, url);
    parts_free(&u);
    return st;
}
