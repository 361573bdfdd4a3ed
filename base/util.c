/*
 * util.c -- buffers, errors, strings and clocks.
 */
#include "util.h"

#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- buffers ------------------------------------------------------------- */

int pl__buf_reserve(pl__buf *b, size_t more)
{
    if (more <= b->cap - b->len)
        return PL_OK;
    if (more > SIZE_MAX / 2 - b->len)
        return pl__err(PL_ENOMEM, "buffer of %zu bytes is too large",
                       b->len + more);
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < more)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return pl__err(PL_ENOMEM,
                       "out of memory growing a buffer to %zu "
                       "bytes",
                       cap);
    b->data = p;
    b->cap = cap;
    return PL_OK;
}

int pl__buf_append(pl__buf *b, const void *p, size_t n)
{
    int rc = pl__buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return PL_OK;
}

void *pl__grow(void *items, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return items;
    size_t next = *cap ? *cap * 2 : first;
    if (next < *cap || next > SIZE_MAX / size)
        return NULL;
    void *p = realloc(items, next * size);
    if (p)
        *cap = next;
    return p;
}

void pl__free_sized(void *p, size_t size)
{
    free(p);
    if (p && size >= PL__LARGE_FREE)
        pl__heap_release();
}

void pl__buf_free(pl__buf *b)
{
    pl__free_sized(b->data, b->cap);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- status table and messages ------------------------------------------ */

const char *pl_strerror(int status)
{
    switch (status) {
#define PL__STATUS_TEXT(name, value, text)                                     \
    case value: return text;
        PL_STATUS_MAP(PL__STATUS_TEXT)
#undef PL__STATUS_TEXT
    }
    return "unknown status";
}

const char *pl_status_name(int status)
{
    switch (status) {
#define PL__STATUS_NAME(name, value, text)                                     \
    case value: return "PL_" #name;
        PL_STATUS_MAP(PL__STATUS_NAME)
#undef PL__STATUS_NAME
    }
    return "PL_UNKNOWN";
}

bool pl__status_failure(int status)
{
    return status < 0 && strcmp(pl_status_name(status), "PL_UNKNOWN") != 0;
}

const char *pl_version(void) { return PL_VERSION_STRING; }

static _Thread_local char tl_msg[PL__ERRMSG_MAX];

const char *pl_errmsg(void) { return tl_msg[0] ? tl_msg : "no error"; }

bool pl__errmsg_set(void) { return tl_msg[0] != '\0'; }

void pl__err_clear(void) { tl_msg[0] = '\0'; }

int pl__verr(int status, const char *fmt, va_list ap)
{
    /* format apart: the arguments may include pl_errmsg() itself */
    char tmp[sizeof tl_msg];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(tl_msg, tmp, sizeof tl_msg);
    return status;
}

int pl__err(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pl__verr(status, fmt, ap);
    va_end(ap);
    return status;
}

int pl__err_run(int status, const char *run_id)
{
    size_t n = strlen(run_id);
    if (!strncmp(tl_msg, "run '", 5) && !strncmp(tl_msg + 5, run_id, n) &&
        !strncmp(tl_msg + 5 + n, "': ", 3))
        return status;
    return pl__err(status, "run '%s': %s", run_id, pl_errmsg());
}

int pl_errorf(int status, const char *fmt, ...)
{
    if (!fmt)
        return pl__err(status, "%s", pl_status_name(status));
    va_list ap;
    va_start(ap, fmt);
    pl__verr(status, fmt, ap);
    va_end(ap);
    return status;
}

char *pl__errmsg_dup(void) { return pl__strdup(pl_errmsg()); }

void pl__errmsg_save(char out[PL__ERRMSG_MAX])
{
    memcpy(out, tl_msg, strlen(tl_msg) + 1);
}

void pl__errmsg_restore(const char saved[PL__ERRMSG_MAX])
{
    memcpy(tl_msg, saved, strlen(saved) + 1);
}

static _Thread_local const void *tl_running_run;

const void *pl__running_run(void) { return tl_running_run; }

void pl__set_running_run(const void *run) { tl_running_run = run; }

/* ---- strings ------------------------------------------------------------- */

char *pl__strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *pl__strdup(const char *s) { return s ? pl__strndup(s, strlen(s)) : NULL; }

char *pl__asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = malloc((size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

/* The length of the well-formed UTF-8 sequence at @p p (shortest form, no
 * surrogates, at most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t n = p[0] >= 0xC2 && p[0] <= 0xDF   ? 2
               : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
               : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
                                              : 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) ||
        (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] > 0x8F))
        return 0;
    return n;
}

bool pl__text_ok(const char *s, size_t max)
{
    if (!s || !*s)
        return false;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    while (p[n]) {
        if (p[n] < 0x20 || p[n] == 0x7f)
            return false;
        size_t k = utf8_len(p + n);
        if (!k)
            return false;
        n += k;
        if (n > max)
            return false;
    }
    return true;
}

char *pl__utf8_fixed(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), o = 0;
    char *out = malloc(3 * len + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_len(p + i);
        if (k) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

bool pl__name_ok(const char *s) { return pl__text_ok(s, PL_MAX_NAME); }

bool pl__run_id_ok(const char *s)
{
    if (!s || !*s)
        return false;
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
                  c == ':' || c == '@' || c == '~';
        if (!ok || n >= PL_MAX_RUN_ID)
            return false;
    }
    return true;
}

/* ---- time ---------------------------------------------------------------- */

int64_t pl__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

uint64_t pl__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int pl__cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int err = pthread_condattr_init(&a);
    if (err)
        return err;
    err = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (!err)
        err = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return err;
}

struct timespec pl__mono_deadline(int64_t us)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (us % 1000000) * 1000;
    ts.tv_sec += (time_t)(us / 1000000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

void pl__hex(char *out, const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}
