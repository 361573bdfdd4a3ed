/*
 * transport.c -- one model call, with retries inside it: HTTP through
 * libcurl, or the scripted model (scripted.c); the recorded exchange.
 *
 * Retries: 408, 409, 429, 5xx and transport errors (no connection, a
 * dropped one, a timeout) are tried again up to max_attempts, as the
 * official SDKs do, waiting by decorrelated jitter (each wait drawn between
 * the base and three times the last wait, at most backoff_max_ms), or as
 * long as the server asks: retry-after-ms, else Retry-After (seconds or an
 * HTTP date; a date past is no wait), never past total_timeout_ms; a retry
 * not made says why in the message.  Any other 4xx is final at once.  The API key goes in
 * a header and nowhere else: a provider's error text that quotes it is
 * redacted before it becomes part of a message.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#if PL_WITH_CURL
#include <curl/curl.h>
#endif

#include "sha256.h"
#include "attempt.h"
#include "llm.h"
#include "platform.h"

#define DEF_CONNECT_MS 10000u
#define DEF_TIMEOUT_MS 120000u
#define DEF_TOTAL_MS 300000u
#define DEF_BASE_MS 250u
#define DEF_MAX_MS 20000u
#define DEF_MAX_BODY ((size_t)8 << 20)
#define STREAM_LINGER_NS 200000000u /* a transfer past its stream's end */

#if PL_WITH_CURL
static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }
#endif

/*
 * The policy's kept handle.  A libcurl handle keeps its connections open
 * between requests, so reusing one saves a handle's setup and a TCP (and
 * TLS) handshake per model call.  Calls of the policy on other threads at
 * the same time take a handle of their own for that request.
 */
struct pl__llm_conn {
    pthread_mutex_t mu;
#if PL_WITH_CURL
    CURL *c; /* NULL until the first request */
#endif
    pid_t owner; /* the process whose connection it is */
};

struct pl__llm_conn *pl__llm_conn_new(void)
{
    struct pl__llm_conn *k = calloc(1, sizeof *k);
    if (k && pthread_mutex_init(&k->mu, NULL)) {
        free(k);
        return NULL;
    }
    if (k)
        k->owner = getpid();
    return k;
}

void pl__llm_conn_free(struct pl__llm_conn *k)
{
    if (!k)
        return;
#if PL_WITH_CURL
    if (k->c && k->owner == getpid()) /* a fork()ed child leaves it */
        curl_easy_cleanup(k->c);
#endif
    pthread_mutex_destroy(&k->mu);
    free(k);
}

#if PL_WITH_CURL
/* A handle for one request: the kept one if no other thread holds it
 * (*kept set), else a new one.  A child made by fork() never uses its
 * parent's: the connection's socket is shared with the parent.  NULL: out
 * of memory. */
static CURL *handle_take(const pl__llm *m, bool *kept)
{
    struct pl__llm_conn *k = m->conn;
    *kept = false;
    if (k && k->owner == getpid() && pthread_mutex_trylock(&k->mu) == 0) {
        if (!k->c)
            k->c = curl_easy_init();
        if (k->c) {
            *kept = true;
            return k->c;
        }
        pthread_mutex_unlock(&k->mu);
    }
    return curl_easy_init();
}

/* Give back what handle_take() gave.  The kept handle's options are reset
 * (they point at this request's buffers), its open connection stays; after
 * a transport error it is dropped, so the next request starts afresh. */
static void handle_give(const pl__llm *m, CURL *c, bool kept, bool failed)
{
    if (!c)
        return;
    if (!kept) {
        curl_easy_cleanup(c);
        return;
    }
    struct pl__llm_conn *k = m->conn;
    if (failed) {
        curl_easy_cleanup(c);
        k->c = NULL;
    } else {
        curl_easy_reset(c);
    }
    pthread_mutex_unlock(&k->mu);
}

#endif /* PL_WITH_CURL */

typedef pl__llm_attempt attempt;

void pl__llm_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

void pl__llm_attempt_clear(attempt *a)
{
    free(a->message);
    cJSON_Delete(a->answer);
    memset(a, 0, sizeof *a);
    a->retry_after_ms = -1;
}

#if PL_WITH_CURL
static long rand_between(long lo, long hi)
{
    uint64_t r = 0;
    if (hi <= lo || pl__random(&r, sizeof r))
        return lo;
    return lo + (long)(r % (uint64_t)(hi - lo + 1));
}

#endif /* PL_WITH_CURL */

const char *pl__llm_status_code(long status)
{
    switch (status) {
    case 401: return PL_ERR_UNAUTHORIZED;
    case 403: return PL_ERR_FORBIDDEN;
    case 404: return PL_ERR_NOT_FOUND;
    case 408: return PL_ERR_TIMEOUT;
    case 429: return PL_ERR_RATE_LIMITED;
    case 409: return PL_ERR_RETRYABLE_SERVER;
    default:
        return status >= 500 ? PL_ERR_RETRYABLE_SERVER : PL_ERR_INVALID_INPUT;
    }
}

bool pl__llm_status_retryable(long status)
{
    return status == 408 || status == 409 || status == 429 || status >= 500;
}

void pl__llm_gave_up(attempt *a, const char *fmt, unsigned attempts, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, attempts);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    char *msg = pl__asprintf("%s (not tried again after %u attempt%s: %s)",
                             a->message ? a->message : "model call failed",
                             attempts, attempts == 1 ? "" : "s", why);
    if (msg) {
        free(a->message);
        a->message = msg;
    }
}

#if PL_WITH_CURL
static unsigned or_default(unsigned v, unsigned d) { return v ? v : d; }

/* What differs between the HTTP providers. */
typedef struct provider {
    const char *base;     /* default base URL */
    const char *base_env; /* the variable that overrides it, or NULL */
    const char *path;     /* the endpoint under the base */
    const char *key_env;  /* the key's default variable, or NULL */
    const char *key_hdr;  /* "Authorization: Bearer " or "x-api-key: " */
} provider;

static const provider *provider_of(const pl__llm *m)
{
    static const provider openai = {"https://api.openai.com/v1",
                                    "OPENAI_BASE_URL", "/chat/completions",
                                    "OPENAI_API_KEY", "Authorization: Bearer "};
    static const provider anthropic = {"https://api.anthropic.com/v1",
                                       "ANTHROPIC_BASE_URL", "/messages",
                                       "ANTHROPIC_API_KEY", "x-api-key: "};
    static const provider ollama = {"http://127.0.0.1:11434", NULL, "/api/chat",
                                    NULL, "Authorization: Bearer "};
    static const provider gemini = {
        "https://generativelanguage.googleapis.com/v1beta", "GEMINI_BASE_URL",
        NULL, "GEMINI_API_KEY", "x-goog-api-key: "};
    return m->url.provider == PL__LLM_GEMINI      ? &gemini
           : m->url.provider == PL__LLM_ANTHROPIC ? &anthropic
           : m->url.provider == PL__LLM_OLLAMA    ? &ollama
                                                  : &openai;
}

/* ------------------------------------------------------------------------ */
/* HTTP                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct sink {
    pl__buf body;
    size_t cap;
    bool over;
    long retry_after_ms;     /* Retry-After; -1: none */
    long retry_after_ms_hdr; /* retry-after-ms, which wins; -1: none */
    pl__llm_stream *stream;  /* streaming: the stream, else NULL */
    CURL *c;
    int mode;          /* streaming: 0 not yet known, 1 a stream, 2 a body */
    uint64_t ended_ns; /* streaming: when the stream's last event came */
} sink;

/* A streamed request's response is read as a stream when it is a success
 * and not a JSON body (an error's body, or a server that does not stream,
 * is read whole). */
static int body_mode(CURL *c)
{
    long status = 0;
    char *type = NULL;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type);
    return status >= 200 && status < 300 &&
                   !(type && strncasecmp(type, "application/json", 16) == 0)
               ? 1
               : 2;
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    sink *s = user;
    size_t len = size * n;
    if (s->stream && !s->mode)
        s->mode = body_mode(s->c);
    if (s->mode == 1)
        return pl__llm_stream_feed(s->stream, p, len) ? 0 : len;
    if (s->body.len + len > s->cap) {
        s->over = true;
        return 0; /* fails the transfer with CURLE_WRITE_ERROR */
    }
    return pl__buf_append(&s->body, p, len) ? 0 : len;
}

/* A stream whose last event came is the whole answer: a transfer that
 * lingers past it (a server that holds the connection open) is left. */
static int on_progress(void *user, curl_off_t a, curl_off_t b, curl_off_t c,
                       curl_off_t d)
{
    sink *s = user;
    (void)a, (void)b, (void)c, (void)d;
    if (!s->ended_ns && s->mode == 1 && pl__llm_stream_done(s->stream))
        s->ended_ns = pl__mono_ns();
    return s->ended_ns && pl__mono_ns() - s->ended_ns > STREAM_LINGER_NS;
}

/* A Retry-After the server sent that is neither form is left aside: the
 * backoff's own waits apply, as if it had sent none. */
/* retry-after-ms (OpenAI's and Anthropic's): milliseconds, whole or not;
 * -1 for anything else. */
static long retry_after_ms_value(const char *v)
{
    char *end;
    errno = 0;
    double ms = strtod(v, &end);
    while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
        end++;
    if (errno || end == v || *end || !(ms >= 0))
        return -1;
    return ms > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS : (long)ms;
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    sink *s = user;
    size_t len = size * n;
    static const char ms_name[] = "retry-after-ms:";
    if (len > sizeof ms_name - 1 &&
        strncasecmp(p, ms_name, sizeof ms_name - 1) == 0) {
        char v[64];
        size_t vl = len - (sizeof ms_name - 1);
        if (vl < sizeof v) {
            memcpy(v, p + sizeof ms_name - 1, vl);
            v[vl] = '\0';
            s->retry_after_ms_hdr = retry_after_ms_value(v);
        }
        return len;
    }
    static const char name[] = "retry-after:";
    if (len > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
        char v[64];
        size_t vl = len - (sizeof name - 1);
        if (vl < sizeof v) {
            memcpy(v, p + sizeof name - 1, vl);
            v[vl] = '\0';
            long ms;
            if (pl__llm_retry_after(&ms, v, pl__now_us() / 1000) == PL_OK)
                s->retry_after_ms = ms;
        }
    }
    return len;
}

/* The provider's error text from a body, redacted, short. */
static char *error_text(const char *body, size_t len, const char *key)
{
    /* a body cJSON would cut at a NUL is quoted as it is */
    cJSON *r = NULL;
    pl_json_parse(&r, body, len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "error");
    const cJSON *msg = cJSON_IsObject(e)
                           ? cJSON_GetObjectItemCaseSensitive(e, "message")
                           : e;
    char *t = cJSON_IsString(msg)
                  ? pl__llm_quote(msg->valuestring, strlen(msg->valuestring),
                                  200, key)
                  : pl__llm_quote(body, len, 120, key);
    cJSON_Delete(r);
    return t;
}

static void http_attempt(attempt *a, const pl__llm *m, const char *url,
                         const char *key, const char *body, long timeout_ms,
                         pl__llm_deltas *deltas)
{
    sink s = {.cap = m->o.max_response_bytes ? m->o.max_response_bytes
                                             : DEF_MAX_BODY,
              .retry_after_ms = -1,
              .retry_after_ms_hdr = -1};
    if (deltas && !(s.stream = pl__llm_stream_new(m, deltas, s.cap, key))) {
        a->error_code = (char *)PL_ERR_RETRYABLE_SERVER;
        a->message = pl__strdup("cannot set up the stream (out of memory)");
        return;
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *h = curl_slist_append(NULL,
                                             "Content-Type: application/json");
    char *auth = key && *key
                     ? pl__asprintf("%s%s", provider_of(m)->key_hdr, key)
                     : NULL;
    struct curl_slist *h2 = h && auth ? curl_slist_append(h, auth) : h;
    if (h2 && m->url.provider == PL__LLM_ANTHROPIC)
        h2 = curl_slist_append(h2, "anthropic-version: 2023-06-01");
    bool kept = false, failed = true;
    CURL *c = handle_take(m, &kept);
    if (!c || !h2) {
        a->error_code = (char *)PL_ERR_RETRYABLE_SERVER;
        a->message = pl__strdup("cannot set up the HTTP request (out of "
                                "memory)");
        goto done;
    }
    h = h2;
    s.c = c;
    unsigned conn = or_default(m->o.connect_timeout_ms, DEF_CONNECT_MS);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)conn);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (s.stream) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    CURLcode rc = curl_easy_perform(c);
    const char *why = NULL;
    int sf = s.mode == 1 ? pl__llm_stream_failed(s.stream, &why) : 0;
    if (s.mode == 1 && !sf && pl__llm_stream_done(s.stream))
        rc = CURLE_OK; /* what came after the stream's end is not read */
    if (sf) {          /* not the protocol's or too large; or an error event */
        a->retryable = sf == PL__LLM_STREAM_ERROR;
        a->error_code = (char *)(a->retryable ? PL_ERR_RETRYABLE_SERVER
                                              : PL_ERR_INVALID_INPUT);
        a->message = pl__llm_redact(pl__strdup(why), key);
        goto done;
    }
    if (s.over) {
        a->error_code = (char *)PL_ERR_INVALID_INPUT;
        a->message = pl__asprintf("the model's response body is larger than "
                                  "max_response_bytes (%zu bytes)",
                                  s.cap);
        goto done;
    }
    if (rc != CURLE_OK) {
        a->retryable = true;
        a->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        a->error_code = (char *)(a->timed_out ? PL_ERR_TIMEOUT
                                              : PL_ERR_RETRYABLE_SERVER);
        a->message = pl__llm_redact(pl__asprintf("transport error: %s",
                                                 *errbuf
                                                     ? errbuf
                                                     : curl_easy_strerror(rc)),
                                    key);
        goto done;
    }
    failed = false;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
    a->retry_after_ms = s.retry_after_ms_hdr >= 0 ? s.retry_after_ms_hdr
                                                  : s.retry_after_ms;
    if (a->status >= 200 && a->status < 300 && s.mode == 1) {
        if (pl__llm_stream_end(s.stream, &a->answer, &a->in_tokens,
                               &a->out_tokens)) {
            sf = pl__llm_stream_failed(s.stream, &why);
            a->retryable = sf == PL__LLM_STREAM_ERROR;
            a->error_code = (char *)(a->retryable ? PL_ERR_RETRYABLE_SERVER
                                                  : PL_ERR_INVALID_INPUT);
            a->message = pl__llm_redact(pl__strdup(why), key);
        }
        goto done;
    }
    if (a->status >= 200 && a->status < 300) {
        if (pl__llm_parse_response(&a->answer, &a->in_tokens, &a->out_tokens, m,
                                   s.body.data ? (char *)s.body.data : "",
                                   s.body.len)) {
            a->error_code = (char *)PL_ERR_INVALID_INPUT;
            a->message = pl__llm_redact(pl__strdup(pl_errmsg()), key);
        } else if (deltas) { /* a whole body: its answer in one piece */
            pl__llm_delta_whole(deltas, a->answer, false);
        }
        goto done;
    }
    a->retryable = pl__llm_status_retryable(a->status);
    a->error_code = (char *)pl__llm_status_code(a->status);
    char *etext = error_text((char *)s.body.data, s.body.len, key);
    a->message = pl__asprintf("HTTP %ld from the model's server: %s", a->status,
                              etext ? etext : "");
    free(etext);
done:
    handle_give(m, c, kept, failed);
    curl_slist_free_all(h);
    free(auth);
    pl__buf_free(&s.body);
    pl__llm_stream_free(s.stream);
}

/* The body as sent for a stream: the request with the provider's stream
 * flag (the request's digest is the body's without it).  NULL: out of
 * memory. */
static char *stream_body(const pl__llm *m, const char *body)
{
    size_t n = strlen(body);
    switch (m->url.provider) {
    case PL__LLM_GEMINI: /* the endpoint streams */ return pl__strdup(body);
    case PL__LLM_OLLAMA: {
        long at = pl__llm_member_at(body, n, "stream");
        if (at >= 0 && strncmp(body + at, "false", 5) == 0)
            return pl__asprintf("%.*strue%s", (int)at, body, body + at + 5);
        return pl__asprintf("{\"stream\":true,%s", body + 1);
    }
    case PL__LLM_ANTHROPIC:
        return pl__asprintf("{\"stream\":true,%s", body + 1);
    default:
        return pl__asprintf("{\"stream\":true,\"stream_options\":"
                            "{\"include_usage\":true},%s",
                            body + 1);
    }
}

static int http_exchange(attempt *a, unsigned *attempts, const pl__llm *m,
                         const char *body, int64_t deadline_ms,
                         pl__llm_deltas *deltas)
{
    pthread_once(&g_curl_once, curl_init);
    const provider *pv = provider_of(m);
    const char *base = m->o.base_url ? m->o.base_url : m->url.base_url;
    const char *env_base = pv->base_env ? getenv(pv->base_env) : NULL;
    if (!base)
        base = env_base;
    if (!base || !*base)
        base = pv->base;
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    char *url = pv->path ? pl__asprintf("%.*s%s", (int)bl, base, pv->path)
                : deltas ? pl__asprintf("%.*s/models/%s:streamGenerateContent"
                                        "?alt=sse",
                                        (int)bl, base, m->url.model)
                         : pl__asprintf("%.*s/models/%s:generateContent",
                                        (int)bl, base, m->url.model);
    char *wire = deltas ? stream_body(m, body) : NULL;
    if (!url || (deltas && !wire)) {
        free(url);
        free(wire);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    const char *var = m->api_key_env ? m->api_key_env : pv->key_env;
    const char *key = var ? getenv(var) : NULL;
    if ((!key || !*key) && var && !m->url.base_url && !m->o.base_url &&
        !(env_base && *env_base)) {
        free(url);
        free(wire);
        return pl__err(PL_EINVAL,
                       "LLM policy '%s': no API key: set %s in the "
                       "environment",
                       m->name, var);
    }
    unsigned max = or_default(m->o.max_attempts, PL__LLM_DEF_ATTEMPTS);
    unsigned per = or_default(m->o.timeout_ms, DEF_TIMEOUT_MS);
    long base_ms = or_default(m->o.backoff_base_ms, DEF_BASE_MS);
    long cap_ms = or_default(m->o.backoff_max_ms, DEF_MAX_MS);
    uint64_t total_ns = (uint64_t)or_default(m->o.total_timeout_ms,
                                             DEF_TOTAL_MS) *
                        1000000u;
    /* the call's deadline, when it comes first, bounds the whole call as
     * total_timeout_ms does; one already past asks nothing */
    bool by_deadline = false;
    if (deadline_ms) {
        int64_t left = deadline_ms - pl__now_us() / 1000;
        if (left <= 0) {
            free(url);
            free(wire);
            a->error_code = (char *)PL_ERR_TIMEOUT;
            a->message = pl__strdup("the call's deadline has passed: the "
                                    "model was not asked");
            return a->message ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
        }
        if ((uint64_t)left * 1000000u < total_ns) {
            total_ns = (uint64_t)left * 1000000u;
            by_deadline = true;
        }
    }
    uint64_t t0 = pl__mono_ns();
    long wait = base_ms;
    for (unsigned i = 0;; i++) {
        uint64_t used = pl__mono_ns() - t0;
        long left_ms = used >= total_ns ? 0
                                        : (long)((total_ns - used) / 1000000);
        pl__llm_attempt_clear(a);
        *attempts = i + 1;
        http_attempt(a, m, url, key, wire ? wire : body,
                     left_ms < (long)per ? (left_ms > 0 ? left_ms : 1)
                                         : (long)per,
                     deltas);
        if (!a->answer && deltas && deltas->sent) /* what came is void */
            pl__llm_delta_send(deltas, PL_LLM_DELTA_RESTARTED, "", 0, NULL, 0,
                               false);
        if (!a->retryable)
            break;
        if (i + 1 >= max) {
            pl__llm_gave_up(a, "no attempt was left (max_attempts %u)", i + 1,
                            max);
            break;
        }
        wait = rand_between(base_ms, wait * 3);
        if (wait > cap_ms)
            wait = cap_ms;
        /* the server's word, when it gave one, over the backoff's */
        long pause = a->retry_after_ms >= 0 ? a->retry_after_ms : wait;
        used = pl__mono_ns() - t0;
        if (used + (uint64_t)pause * 1000000u >= total_ns) {
            /* no time left for another attempt */
            long left = used >= total_ns ? 0
                                         : (long)((total_ns - used) / 1000000u);
            char why[160];
            snprintf(why, sizeof why,
                     "the wait of %ld ms%s is past the %ld ms left of "
                     "%s",
                     pause,
                     a->retry_after_ms >= 0 ? " the server asked for" : "",
                     left,
                     by_deadline ? "the call's deadline" : "total_timeout_ms");
            pl__llm_gave_up(a, "%s", i + 1, why);
            break;
        }
        pl__llm_sleep_ms(pause);
    }
    free(url);
    free(wire);
    return PL_OK;
}

#endif /* PL_WITH_CURL */

/* ------------------------------------------------------------------------ */
/* The recorded exchange                                                    */
/* ------------------------------------------------------------------------ */

int pl__llm_exchange(cJSON **out, const pl__llm *m, const char *body,
                     size_t len, const char *hex, long script_pos,
                     int64_t deadline_ms, pl__llm_deltas *deltas)
{
    *out = NULL;
    attempt a;
    memset(&a, 0, sizeof a);
    a.retry_after_ms = -1;
    unsigned attempts = 0;
    long pos = script_pos;
#if PL_WITH_CURL
    int st = m->url.provider == PL__LLM_SCRIPTED
                 ? pl__llm_scripted_exchange(&a, &attempts, &pos, m, body,
                                             deadline_ms, deltas)
                 : http_exchange(&a, &attempts, m, body, deadline_ms, deltas);
#else /* pl_llm_register() takes scripted:// models alone */
    int st = pl__llm_scripted_exchange(&a, &attempts, &pos, m, body,
                                       deadline_ms, deltas);
#endif
    cJSON *v = NULL;
    bool answered = a.answer != NULL;
    if (!st && answered) { /* the answer moves into the value, not copied */
        cJSON *answer = a.answer;
        a.answer = NULL;
        st = pl_json_pack(&v, "{s:s, s:I, s:i, s:i, s:{s:I, s:I}, s:o}",
                          "request_sha256", hex, "request_bytes", (int64_t)len,
                          "attempts", (int)attempts, "status", (int)a.status,
                          "usage", "input", (int64_t)a.in_tokens, "output",
                          (int64_t)a.out_tokens, "answer", answer);
    } else if (!st)
        st = pl_json_pack(&v,
                          "{s:s, s:I, s:i, s:i, s:{s:I, s:I}, s:{s:s, s:s}}",
                          "request_sha256", hex, "request_bytes", (int64_t)len,
                          "attempts", (int)attempts, "status", (int)a.status,
                          "usage", "input", (int64_t)0, "output", (int64_t)0,
                          "error", "code",
                          a.error_code ? a.error_code : PL_ERR_INVALID_INPUT,
                          "message",
                          a.message ? a.message : "model call failed");
    /* "tokens" (input + output) also says the turn's last step carries
     * its tokens (llm.c, turn_tokens()); exchanges recorded without it
     * make the steps they made before */
    if (!st && !cJSON_AddNumberToObject(v, "tokens",
                                        answered ? (double)a.in_tokens +
                                                       (double)a.out_tokens
                                                 : 0))
        st = pl__err(PL_ENOMEM, "out of memory");
    if (!st && m->url.provider == PL__LLM_SCRIPTED &&
        !cJSON_AddNumberToObject(v, "script_next", (double)pos))
        st = pl__err(PL_ENOMEM, "out of memory");
    pl__llm_attempt_clear(&a);
    if (st) {
        cJSON_Delete(v);
        return st;
    }
    *out = v;
    return PL_OK;
}
