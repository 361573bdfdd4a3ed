/*
 * otel.c -- the OpenTelemetry exporter: engine events become spans, sent as
 * OTLP/HTTP JSON by a background thread over libcurl.
 *
 * The event path (pl_otel_event, on the thread running the call) does no
 * I/O: it opens a span in a table on CALL_STARTED / RUN_STARTED, and on the
 * matching end moves the finished span into a bounded queue (full: dropped
 * and counted).  An execution that stops with no end of the run
 * (PL_EVENT_RUN_STOPPED) ends its spans "stopped", with the status; a
 * run's start ends the spans an earlier execution of it left open
 * ("interrupted": its process died, say).  The thread wakes when a batch is full, a flush is asked
 * for, or flush_interval_ms passed, and POSTs one request per batch (its
 * body: otel_json.c).
 *
 * Times come from one monotonic clock set against the real clock when the
 * exporter opens, so a child's span always sits inside its parent's.  A
 * span whose start was not seen (a served call, a call that failed before
 * it ran) starts at its end minus the event's elapsed_ns.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger.h>

#include <curl/curl.h>

#include "ext.h"
#include "otel.h"

#define DEF_QUEUE 2048
#define DEF_BATCH 512
#define DEF_INTERVAL_MS 1000
#define DEF_TIMEOUT_MS 10000
#define DEF_SHUTDOWN_MS 5000
#define URL_MAX 4096

struct pl_otel {
    /* settings, fixed after open */
    char url[URL_MAX];
    char *service;
    struct curl_slist *headers;
    CURL *curl;
    size_t max_queue, max_batch;
    unsigned interval_ms, timeout_ms, shutdown_ms;
    int64_t base_real_ns, base_mono_ns;

    /* open spans (call and run starts), under open_lock */
    pthread_mutex_t open_lock;
    pl__otel_span *open;
    size_t n_open, cap_open;

    /* the queue and counters, under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;   /* the thread: work, a flush, or stop */
    pthread_cond_t idle;   /* flushers: a batch is done */
    pl__otel_span **queue; /* a ring of max_queue */
    size_t head, n;
    unsigned flushers;
    bool stop;
    pl_otel_counts c;
    char first_reason[160];
    _Atomic int64_t abort_at; /* mono ns past which a request stops; 0 */
    pthread_t thread;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* @p ms from now on CLOCK_MONOTONIC, which the exporter's waits are timed
 * on (pl_otel_open()): a wall clock set back must not stretch a span. */
static struct timespec deadline_ms(unsigned ms)
{
    int64_t ns = clock_ns(CLOCK_MONOTONIC) + (int64_t)ms * 1000000;
    return (struct timespec){(time_t)(ns / 1000000000),
                             (long)(ns % 1000000000)};
}

/* A copy of @p s; NULL for NULL or when out of memory. */
static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int64_t now_ns(const pl_otel *x)
{
    return x->base_real_ns + (mono_ns() - x->base_mono_ns);
}

static void span_clear(pl__otel_span *s)
{
    free(s->run_id);
    free(s->path);
    free(s->policy);
    free(s->detail);
    memset(s, 0, sizeof *s);
}

/* Why the first lost spans were lost (never a header value). */
static void note_loss(pl_otel *x, uint64_t k, const char *why)
{
    if (!x->c.dropped && !x->first_reason[0])
        snprintf(x->first_reason, sizeof x->first_reason, "%s", why);
    x->c.dropped += k;
}

/* ---- the event path ------------------------------------------------------ */

/* Hand a finished span to the queue; takes @p s's strings. */
static void enqueue(pl_otel *x, pl__otel_span *s)
{
    pl__otel_span *heap = malloc(sizeof *heap);
    pthread_mutex_lock(&x->lock);
    x->c.spans++;
    if (!heap || x->n == x->max_queue || x->stop) {
        note_loss(x, 1, heap ? "the queue was full" : "out of memory");
        pthread_mutex_unlock(&x->lock);
        free(heap);
        span_clear(s);
        return;
    }
    *heap = *s;
    memset(s, 0, sizeof *s);
    x->queue[(x->head + x->n) % x->max_queue] = heap;
    x->n++;
    if (x->n == 1 || x->n == x->max_batch)
        pthread_cond_signal(&x->wake);
    pthread_mutex_unlock(&x->lock);
}

static int open_add(pl_otel *x, const pl_event *ev, const char *path,
                    int64_t now)
{
    pl__otel_span s = {0};
    s.run_id = dup_or_null(ev->run_id);
    s.path = dup_or_null(path);
    s.policy = dup_or_null(ev->policy ? ev->policy : "");
    s.start_ns = now;
    s.step = ev->seq;
    s.is_call = ev->kind == PL_EVENT_CALL_STARTED;
    if (!s.run_id || !s.path || !s.policy)
        goto oom;
    pthread_mutex_lock(&x->open_lock);
    if (x->n_open == x->cap_open) {
        size_t cap = x->cap_open ? 2 * x->cap_open : 16;
        pl__otel_span *grown = realloc(x->open, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&x->open_lock);
            goto oom;
        }
        x->open = grown;
        x->cap_open = cap;
    }
    x->open[x->n_open++] = s;
    pthread_mutex_unlock(&x->open_lock);
    return 0;
oom:
    span_clear(&s);
    pthread_mutex_lock(&x->lock);
    x->c.spans++;
    note_loss(x, 1, "out of memory");
    pthread_mutex_unlock(&x->lock);
    return -1;
}

/* Take the open span of (@p run, @p path) into @p out; false if none. */
static bool open_take(pl_otel *x, const char *run, const char *path,
                      pl__otel_span *out)
{
    bool found = false;
    pthread_mutex_lock(&x->open_lock);
    for (size_t i = x->n_open; i-- > 0;) {
        pl__otel_span *s = &x->open[i];
        if (!strcmp(s->run_id, run) && !strcmp(s->path, path)) {
            *out = *s;
            x->open[i] = x->open[--x->n_open];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&x->open_lock);
    return found;
}

/* Take an open span of @p run (a call's only, with @p calls_only) into
 * @p out; false if none is left. */
static bool open_take_any(pl_otel *x, const char *run, bool calls_only,
                          pl__otel_span *out)
{
    bool found = false;
    pthread_mutex_lock(&x->open_lock);
    for (size_t i = x->n_open; i-- > 0;) {
        if ((x->open[i].is_call || !calls_only) &&
            !strcmp(x->open[i].run_id, run)) {
            *out = x->open[i];
            x->open[i] = x->open[--x->n_open];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&x->open_lock);
    return found;
}

/* End every open call span of @p run with the run's outcome. */
static void end_open_calls(pl_otel *x, const pl_event *ev, const char *outcome,
                           int64_t now)
{
    pl__otel_span s;
    while (open_take_any(x, ev->run_id, true, &s)) {
        s.end_ns = now;
        s.outcome = outcome;
        s.status = ev->kind == PL_EVENT_RUN_FAILED ||
                           ev->kind == PL_EVENT_LEASE_LOST
                       ? ev->status
                       : 0;
        enqueue(x, &s);
    }
}

/* Why spans end "interrupted" (see end_interrupted()). */
#define INTERRUPTED_WHY                                                        \
    "the execution stopped before the run ended, recording nothing (its "      \
    "process died, say); the run went on from its last durable step"

/*
 * A run starts an execution while spans of an earlier one are open: that
 * one stopped with no event at all (its process died before it could
 * say PL_EVENT_RUN_STOPPED, or the exporter was attached meanwhile) and
 * the run goes on in this one.  End those spans now, "interrupted", rather than keep them for
 * good or let this execution's end claim them as its own.
 */
static void end_interrupted(pl_otel *x, const char *run, int64_t now)
{
    pl__otel_span s;
    while (open_take_any(x, run, false, &s)) {
        s.end_ns = now < s.start_ns ? s.start_ns : now;
        s.outcome = "interrupted";
        s.detail = strdup(INTERRUPTED_WHY); /* NULL: left out */
        enqueue(x, &s);
    }
}

/* An execution stopped with no end of the run (PL_EVENT_RUN_STOPPED): its
 * open spans end "stopped", with its status and message. */
static void end_stopped(pl_otel *x, const pl_event *ev, int64_t now)
{
    pl__otel_span s;
    while (open_take_any(x, ev->run_id, false, &s)) {
        s.end_ns = now < s.start_ns ? s.start_ns : now;
        s.outcome = "stopped";
        s.status = ev->status;
        s.detail = dup_or_null(ev->detail); /* NULL: left out */
        enqueue(x, &s);
    }
}

static const char *outcome_of(pl_event_kind k)
{
    switch (k) {
    case PL_EVENT_CALL_SERVED: return "served";
    case PL_EVENT_CALL_COMPLETED:
    case PL_EVENT_RUN_COMPLETED: return "completed";
    case PL_EVENT_CALL_FAILED:
    case PL_EVENT_RUN_FAILED: return "failed";
    case PL_EVENT_RUN_SUSPENDED: return "suspended";
    case PL_EVENT_LEASE_LOST: return "lease_lost";
    default: return NULL;
    }
}

/* The end of a call or a run: finish its span and queue it. */
static void end_span(pl_otel *x, const pl_event *ev, const char *path,
                     int64_t now)
{
    pl__otel_span s;
    if (!open_take(x, ev->run_id, path, &s)) {
        memset(&s, 0, sizeof s);
        s.run_id = dup_or_null(ev->run_id);
        s.path = dup_or_null(path);
        s.policy = dup_or_null(ev->policy ? ev->policy : "");
        s.start_ns = now - (int64_t)ev->elapsed_ns;
        s.step = ev->seq;
        s.is_call = strcmp(path, "0") != 0;
        if (!s.run_id || !s.path || !s.policy) {
            span_clear(&s);
            pthread_mutex_lock(&x->lock);
            x->c.spans++;
            note_loss(x, 1, "out of memory");
            pthread_mutex_unlock(&x->lock);
            return;
        }
    }
    s.end_ns = now < s.start_ns ? s.start_ns : now;
    s.outcome = outcome_of(ev->kind);
    s.served = ev->kind == PL_EVENT_CALL_SERVED;
    s.status = ev->status;
    s.tokens_in = ev->tokens_in;
    s.tokens_out = ev->tokens_out;
    if (ev->detail &&
        (ev->kind == PL_EVENT_CALL_FAILED || ev->kind == PL_EVENT_RUN_FAILED ||
         ev->kind == PL_EVENT_LEASE_LOST))
        s.detail = dup_or_null(
            ev->detail); /* NULL when out of memory: left out */
    enqueue(x, &s);
}

void pl_otel_event(const pl_event *ev, void *user)
{
    pl_otel *x = user;
    if (!x || !ev || !ev->run_id)
        return;
    int64_t now = now_ns(x);
    char path[PATH_BUF];
    const char *callee = path;
    switch (ev->kind) {
    case PL_EVENT_CALL_STARTED:
    case PL_EVENT_CALL_SERVED:
    case PL_EVENT_CALL_COMPLETED:
    case PL_EVENT_CALL_FAILED:
        if (!ev->path || (size_t)snprintf(path, sizeof path, "%s.%u", ev->path,
                                          ev->seq) >= sizeof path)
            return; /* no path, or deeper than paths go */
        break;
    default: callee = "0"; break;
    }
    switch (ev->kind) {
    case PL_EVENT_RUN_STARTED:
        end_interrupted(x, ev->run_id, now);
        open_add(x, ev, callee, now);
        break;
    case PL_EVENT_CALL_STARTED: open_add(x, ev, callee, now); break;
    case PL_EVENT_CALL_SERVED:
    case PL_EVENT_CALL_COMPLETED:
    case PL_EVENT_CALL_FAILED: end_span(x, ev, callee, now); break;
    case PL_EVENT_RUN_SUSPENDED:
    case PL_EVENT_RUN_COMPLETED:
    case PL_EVENT_RUN_FAILED:
    case PL_EVENT_LEASE_LOST: /* the run went on in another worker */
        end_open_calls(x, ev, outcome_of(ev->kind), now);
        end_span(x, ev, "0", now);
        break;
    case PL_EVENT_RUN_STOPPED: end_stopped(x, ev, now); break;
    default: break;
    }
}

/* ---- the thread ---------------------------------------------------------- */

static size_t discard(char *p, size_t size, size_t n, void *user)
{
    (void)p;
    (void)user;
    return size * n;
}

static int progress(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                    curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    pl_otel *x = user;
    int64_t at = atomic_load(&x->abort_at);
    return at && mono_ns() > at; /* non-zero aborts */
}

/* POST one batch; @return NULL when the receiver took it, else why not. */
static const char *post(pl_otel *x, const char *body, char *why, size_t n)
{
    CURL *h = x->curl;
    curl_easy_reset(h);
    CURLcode rc;
    if ((rc = curl_easy_setopt(h, CURLOPT_URL, x->url)) ||
        (rc = curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers)) ||
        (rc = curl_easy_setopt(h, CURLOPT_POSTFIELDS, body)) ||
        (rc = curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L)) ||
        (rc = curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)x->timeout_ms)) ||
        (rc = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard)) ||
        (rc = curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L)) ||
        (rc = curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress)) ||
        (rc = curl_easy_setopt(h, CURLOPT_XFERINFODATA, x)) ||
        (rc = curl_easy_perform(h))) {
        snprintf(why, n, "the request failed: %s", curl_easy_strerror(rc));
        return why;
    }
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code > 299) {
        snprintf(why, n, "the receiver answered HTTP %ld", code);
        return why;
    }
    return NULL;
}

static void *exporter(void *arg)
{
    pl_otel *x = arg;
    pl__otel_span **batch = malloc(x->max_batch * sizeof *batch);
    pthread_mutex_lock(&x->lock);
    for (;;) {
        if (!x->n) {
            if (x->stop)
                break;
            pthread_cond_wait(&x->wake, &x->lock);
            continue;
        }
        if (!x->stop && !x->flushers && x->n < x->max_batch) {
            struct timespec dl = deadline_ms(x->interval_ms);
            int rc = 0;
            while (!x->stop && !x->flushers && x->n < x->max_batch &&
                   rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&x->wake, &x->lock, &dl);
        }
        int64_t at = atomic_load(&x->abort_at);
        size_t k = x->n < x->max_batch ? x->n : x->max_batch;
        if (!batch || (at && mono_ns() > at)) {
            /* no memory for a batch, or shutdown's time is up: drop */
            for (size_t i = 0; i < x->n; i++) {
                pl__otel_span *s = x->queue[(x->head + i) % x->max_queue];
                span_clear(s);
                free(s);
            }
            note_loss(x, x->n,
                      batch ? "the shutdown timeout passed" : "out of memory");
            x->head = x->n = 0;
            pthread_cond_broadcast(&x->idle);
            continue;
        }
        for (size_t i = 0; i < k; i++)
            batch[i] = x->queue[(x->head + i) % x->max_queue];
        x->head = (x->head + k) % x->max_queue;
        x->n -= k;
        x->c.requests++;
        pthread_mutex_unlock(&x->lock);

        char whybuf[160];
        char *body = pl__otel_body(x->service, batch, k);
        const char *why = body ? post(x, body, whybuf, sizeof whybuf)
                               : "out of memory encoding spans";
        free(body);
        for (size_t i = 0; i < k; i++) {
            span_clear(batch[i]);
            free(batch[i]);
        }

        pthread_mutex_lock(&x->lock);
        if (why) {
            x->c.failures++;
            note_loss(x, k, why);
        } else {
            x->c.sent += k;
        }
        pthread_cond_broadcast(&x->idle);
    }
    pthread_mutex_unlock(&x->lock);
    free(batch);
    return NULL;
}

/* ---- open, flush, close -------------------------------------------------- */

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Can a request go to @p u: a host, and a port 1..65535 when one is
 * given?  (libcurl's parser, the one that sends.) */
static bool sendable(const char *u)
{
    CURLU *h = curl_url();
    char *host = NULL, *port = NULL;
    bool ok = h && !curl_url_set(h, CURLUPART_URL, u, 0) &&
              !curl_url_get(h, CURLUPART_HOST, &host, 0) && host && *host;
    char *end = NULL;
    if (ok && !curl_url_get(h, CURLUPART_PORT, &port, 0)) /* or NO_PORT */
        ok = strtol(port, &end, 10) > 0 && !*end;
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(h);
    return ok;
}

static int set_url(pl_otel *x, const pl_otel_options *o)
{
    const char *base = o->endpoint, *exact = NULL;
    if (!base) {
        exact = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        base = exact ? NULL : env("OTEL_EXPORTER_OTLP_ENDPOINT");
    }
    const char *u = exact ? exact : base;
    if (!u)
        return pl_errorf(PL_ENOTFOUND,
                         "pl_otel_open: no endpoint: give one in the options "
                         "or set OTEL_EXPORTER_OTLP_ENDPOINT");
    if (strncmp(u, "http://", 7) && strncmp(u, "https://", 8))
        return pl_errorf(PL_EINVAL,
                         "pl_otel_open: the endpoint '%.200s' is not an "
                         "http:// or https:// URL",
                         u);
    if (!sendable(u))
        return pl_errorf(PL_EINVAL,
                         "pl_otel_open: the endpoint '%.200s' is not a URL a "
                         "request can go to: it needs a host, and a port "
                         "1 to 65535 if any",
                         u);
    size_t n = strlen(u);
    if (!exact)
        while (n && u[n - 1] == '/')
            n--;
    int w = snprintf(x->url, sizeof x->url, "%.*s%s", (int)n, u,
                     exact ? "" : "/v1/traces");
    if (w < 0 || (size_t)w >= sizeof x->url)
        return pl_errorf(PL_EINVAL, "pl_otel_open: the endpoint is too long");
    return PL_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "k=v,k2=v2" (values percent-decoded) into x->headers. */
static int set_headers(pl_otel *x, const char *spec)
{
    struct curl_slist *l = curl_slist_append(NULL,
                                             "Content-Type: application/json");
    if (!l)
        return pl_errorf(PL_ENOMEM, "pl_otel_open: out of memory");
    x->headers = l;
    if (!spec)
        return PL_OK;
    size_t len = strlen(spec);
    char *line = malloc(len + 3);
    if (!line)
        return pl_errorf(PL_ENOMEM, "pl_otel_open: out of memory");
    int st = PL_OK;
    unsigned index = 0;
    for (const char *p = spec; *p && !st;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        index++;
        const char *eq = memchr(p, '=', (size_t)(end - p));
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end) {
            p = *end ? end + 1 : end;
            continue; /* an empty member */
        }
        size_t kl = eq ? (size_t)(eq - p) : 0;
        while (kl && (p[kl - 1] == ' ' || p[kl - 1] == '\t'))
            kl--;
        bool key_ok = kl > 0;
        for (size_t i = 0; key_ok && i < kl; i++)
            key_ok = p[i] > ' ' && p[i] < 127 && p[i] != ':';
        if (!eq || !key_ok) {
            st = pl_errorf(PL_EINVAL,
                           "pl_otel_open: header %u of the OTLP headers is not "
                           "key=value",
                           index);
            break;
        }
        size_t o = 0;
        memcpy(line, p, kl);
        o = kl;
        line[o++] = ':';
        line[o++] = ' ';
        const char *v = eq + 1;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        for (; v < end; v++) {
            char ch = *v;
            if (ch == '%' && end - v >= 3 && hexval(v[1]) >= 0 &&
                hexval(v[2]) >= 0) {
                ch = (char)(hexval(v[1]) * 16 + hexval(v[2]));
                v += 2;
            }
            if (ch == '\r' || ch == '\n' || ch == '\0') {
                st = pl_errorf(PL_EINVAL,
                               "pl_otel_open: header %u of the OTLP headers "
                               "has a control character in its value",
                               index);
                break;
            }
            line[o++] = ch;
        }
        line[o] = '\0';
        if (!st) {
            struct curl_slist *g = curl_slist_append(x->headers, line);
            if (!g)
                st = pl_errorf(PL_ENOMEM, "pl_otel_open: out of memory");
            else
                x->headers = g;
        }
        p = *end ? end + 1 : end;
    }
    memset(line, 0, len + 3); /* a header value may be a secret */
    free(line);
    return st;
}

static void otel_free(pl_otel *x)
{
    for (size_t i = 0; i < x->n_open; i++)
        span_clear(&x->open[i]);
    free(x->open);
    for (size_t i = 0; i < x->n; i++) {
        pl__otel_span *s = x->queue[(x->head + i) % x->max_queue];
        span_clear(s);
        free(s);
    }
    free(x->queue);
    curl_slist_free_all(x->headers);
    if (x->curl)
        curl_easy_cleanup(x->curl);
    free(x->service);
    pthread_mutex_destroy(&x->open_lock);
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->wake);
    pthread_cond_destroy(&x->idle);
    free(x);
}

int pl_otel_open(pl_otel **out, const pl_otel_options *opts)
{
    if (out)
        *out = NULL;
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_otel_open: NULL out");
    PL__EXT_ONE_VERSION(PL_OTEL_OPTIONS);
    if (opts && PL__EXT_VERSION_OK(opts->version, pl_otel_options,
                                   PL_OTEL_OPTIONS, "pl_otel_open"))
        return PL_EINVAL;
    const pl_otel_options def = PL_OTEL_OPTIONS_INIT;
    const pl_otel_options *o = opts ? opts : &def;
    pl_otel *x = calloc(1, sizeof *x);
    if (!x)
        return pl_errorf(PL_ENOMEM, "pl_otel_open: out of memory");
    pthread_mutex_init(&x->open_lock, NULL);
    pthread_mutex_init(&x->lock, NULL);
    pthread_condattr_t ca; /* waits timed on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->wake, &ca);
    pthread_cond_init(&x->idle, &ca);
    pthread_condattr_destroy(&ca);
    x->max_queue = o->max_queue ? o->max_queue : DEF_QUEUE;
    x->max_batch = o->max_batch ? o->max_batch : DEF_BATCH;
    if (x->max_batch > x->max_queue)
        x->max_batch = x->max_queue;
    x->interval_ms = o->flush_interval_ms ? o->flush_interval_ms
                                          : DEF_INTERVAL_MS;
    x->timeout_ms = o->timeout_ms ? o->timeout_ms : DEF_TIMEOUT_MS;
    x->shutdown_ms = o->shutdown_timeout_ms ? o->shutdown_timeout_ms
                                            : DEF_SHUTDOWN_MS;
    const char *svc = o->service_name ? o->service_name
                                      : env("OTEL_SERVICE_NAME");
    int st = set_url(x, o);
    if (!st)
        st = set_headers(x, o->headers ? o->headers
                                       : env("OTEL_EXPORTER_OTLP_HEADERS"));
    if (!st && (!(x->service = dup_or_null(svc ? svc : "policyledger")) ||
                !(x->queue = calloc(x->max_queue, sizeof *x->queue))))
        st = pl_errorf(PL_ENOMEM, "pl_otel_open: out of memory");
    if (!st) {
        pthread_once(&curl_once, curl_init);
        if (curl_init_rc != CURLE_OK || !(x->curl = curl_easy_init()))
            st = pl_errorf(PL_EIO, "pl_otel_open: libcurl cannot start");
    }
    x->base_real_ns = clock_ns(CLOCK_REALTIME);
    x->base_mono_ns = mono_ns();
    if (!st && pthread_create(&x->thread, NULL, exporter, x))
        st = pl_errorf(PL_EIO, "pl_otel_open: cannot start the thread");
    if (st) {
        otel_free(x);
        return st;
    }
    *out = x;
    return PL_OK;
}

int pl_otel_stats(pl_otel_counts *out, const pl_otel *otel)
{
    if (!out || !otel)
        return pl_errorf(PL_EINVAL, "pl_otel_stats: NULL argument");
    PL__EXT_ONE_VERSION(PL_OTEL_COUNTS);
    if (PL__EXT_VERSION_OK(out->version, pl_otel_counts, PL_OTEL_COUNTS,
                           "pl_otel_stats"))
        return PL_EINVAL;
    pl_otel *x = (pl_otel *)otel; /* the lock; the counters stay as they are */
    pthread_mutex_lock(&x->lock);
    *out = x->c;
    pthread_mutex_unlock(&x->lock);
    out->version = PL_OTEL_COUNTS_VERSION;
    return PL_OK;
}

int pl_otel_flush(pl_otel *x, unsigned timeout_ms)
{
    if (!x)
        return pl_errorf(PL_EINVAL, "pl_otel_flush: NULL exporter");
    struct timespec dl = deadline_ms(timeout_ms);
    pthread_mutex_lock(&x->lock);
    uint64_t target = x->c.spans;
    x->flushers++;
    pthread_cond_signal(&x->wake);
    int rc = 0;
    while (x->c.sent + x->c.dropped < target && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&x->idle, &x->lock, &dl);
    bool done = x->c.sent + x->c.dropped >= target;
    uint64_t left = target - x->c.sent - x->c.dropped;
    x->flushers--;
    pthread_mutex_unlock(&x->lock);
    if (!done)
        return pl_errorf(PL_EBUSY,
                         "pl_otel_flush: %llu spans not sent after %u ms",
                         (unsigned long long)left, timeout_ms);
    return PL_OK;
}

int pl_otel_close(pl_otel *x)
{
    if (!x)
        return PL_OK;
    atomic_store(&x->abort_at, mono_ns() + (int64_t)x->shutdown_ms * 1000000);
    pthread_mutex_lock(&x->lock);
    x->stop = true;
    pthread_cond_broadcast(&x->wake);
    pthread_mutex_unlock(&x->lock);
    pthread_join(x->thread, NULL);
    /* spans a run left open (a run still going) are never sent */
    uint64_t dropped = x->c.dropped;
    char why[sizeof x->first_reason];
    memcpy(why, x->first_reason, sizeof why);
    otel_free(x);
    if (dropped)
        return pl_errorf(PL_EIO,
                         "pl_otel_close: %llu spans were not delivered (the "
                         "first: %s)",
                         (unsigned long long)dropped, why);
    return PL_OK;
}
