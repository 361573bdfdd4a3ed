/*
 * trace.c -- the JSON-lines trace writer: one line per engine event.
 *
 * Written with the public API alone (include/policyledger.h): it is an
 * event callback like any program's.  The line's members, in order (those
 * that do not apply are left out):
 *
 *   member       from pl_event          present
 *   ts_us        the real clock         always
 *   trace_id     run_id                 always
 *   event        pl_event_kind_name()   always
 *   path         path                   when set
 *   seq          seq                    step, call and commit events;
 *                                       run_suspended; a version point
 *                                       whose marker is recorded
 *   policy       policy                 when set
 *   step_type    step_type              step events; run_suspended
 *                                       ("suspend" or "wait"); a version
 *                                       point whose marker is recorded
 *   outcome      kind                   call and run ends
 *   status       pl_status_name()       when status is not 0
 *   detail       detail                 when set
 *   elapsed_ns   elapsed_ns             call and run ends, commits
 *   tokens       {"input": tokens_in,   call ends whose result carries a
 *                 "output": tokens_out}  model's tokens
 *   version      version                version points
 *   schedule     schedule               when set (schedule_failed)
 *
 * Every line is UTF-8, as JSON text is: a byte of a string (a detail, a
 * policy's reason) that is not part of well-formed UTF-8 is written as
 * U+FFFD.  Every integer is written as its digits (add_digits()), never
 * as cJSON writes a double (1e+15).  A mutex keeps lines of concurrent runs whole; each line is
 * flushed.  A
 * reader gone from a FIFO costs the lines, counted, not the process
 * (SIGPIPE).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

#include "ext.h"

struct pl_trace {
    FILE *f;
    pthread_mutex_t lock;
    unsigned long failed; /* lines not written */
    int first_errno;      /* why the first one was not */
};

int pl_trace_open(pl_trace **out, const char *path)
{
    if (out)
        *out = NULL;
    if (!out || !path)
        return pl_errorf(PL_EINVAL, "pl_trace_open: NULL %s",
                         !out ? "out" : "path");
    pl_trace *t = calloc(1, sizeof *t);
    if (!t)
        return pl_errorf(PL_ENOMEM, "pl_trace_open: out of memory");
    /* O_NONBLOCK: a FIFO no process reads fails the open at once (ENXIO)
     * where it would wait for a reader for ever; cleared once open, so that
     * a line waits for a slow reader rather than being lost */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK,
                  0666);
    int fl = fd < 0 ? -1 : fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) ||
        !(t->f = fdopen(fd, "a"))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        free(t);
        if (e == ENXIO)
            return pl_errorf(PL_EIO,
                             "pl_trace_open: cannot open '%s': it is a FIFO "
                             "no process reads",
                             path);
        return pl_errorf(PL_EIO, "pl_trace_open: cannot open '%s': %s", path,
                         strerror(e));
    }
    if (pthread_mutex_init(&t->lock, NULL)) {
        fclose(t->f);
        free(t);
        return pl_errorf(PL_ENOMEM, "pl_trace_open: cannot make a mutex");
    }
    *out = t;
    return PL_OK;
}

static bool is_step(pl_event_kind k)
{
    return k == PL_EVENT_STEP_APPENDED || k == PL_EVENT_STEP_REPLAYED ||
           k == PL_EVENT_CODE_CHANGED;
}

static bool is_call(pl_event_kind k)
{
    return k >= PL_EVENT_CALL_STARTED && k <= PL_EVENT_CALL_FAILED;
}

static const char *outcome(pl_event_kind k)
{
    switch (k) {
    case PL_EVENT_CALL_SERVED: return "served";
    case PL_EVENT_CALL_COMPLETED:
    case PL_EVENT_RUN_COMPLETED: return "completed";
    case PL_EVENT_CALL_FAILED:
    case PL_EVENT_RUN_FAILED: return "failed";
    case PL_EVENT_RUN_SUSPENDED: return "suspended";
    case PL_EVENT_RUN_STOPPED: return "stopped";
    default: return NULL;
    }
}

/* Does @p ev name a step (its type, and its place in seq)?  Step events;
 * a run parked (at a suspend or a wait); a version point whose marker is
 * recorded. */
static bool names_step(const pl_event *ev)
{
    return is_step(ev->kind) || ev->kind == PL_EVENT_RUN_SUSPENDED ||
           (ev->kind == PL_EVENT_VERSION && ev->step_type);
}

static bool has_elapsed(pl_event_kind k)
{
    return outcome(k) != NULL || k == PL_EVENT_COMMIT;
}

/* Add @p v to @p o as @p key, written as its digits: cJSON writes every
 * number as a double, in exponent form from 10^15 on (1e+15) and rounded
 * past 2^53, which a reader of integers refuses. */
static bool add_digits(cJSON *o, const char *key, uint64_t v)
{
    char text[24];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    return cJSON_AddRawToObject(o, key, text) != NULL;
}

/* The line for @p ev, or NULL when out of memory.  Its integers are
 * written as their digits, whatever their size (add_digits()). */
static char *line(const pl_event *ev)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    pl_event_kind k = ev->kind;
    const char *name = pl_event_kind_name(k);
    const char *step = names_step(ev) ? pl_step_type_name(ev->step_type) : NULL;
    bool seq = names_step(ev) || is_call(k) || k == PL_EVENT_COMMIT;
    cJSON *o = NULL;
    /* a member whose value is NULL is left out ("s*"); numbers apart */
    if (pl_json_pack(&o, "{s:I, s:s, s:s, s:s*, s:s*, s:s*, s:s*, s:s*, s:s*}",
                     "ts_us", now_us, "trace_id", ev->run_id ? ev->run_id : "",
                     "event", name ? name : "unknown", "path", ev->path,
                     "policy", ev->policy, "step_type", step, "outcome",
                     outcome(k), "detail", ev->detail, "schedule",
                     ev->schedule))
        return NULL;
    /* cJSON prints a 16-digit number in exponent form when that reads back
     * the same (1.79554459164534e+15): write the digits */
    char us[24];
    snprintf(us, sizeof us, "%lld", (long long)now_us);
    cJSON *raw = cJSON_CreateRaw(us);
    bool ok = raw && cJSON_ReplaceItemInObjectCaseSensitive(o, "ts_us", raw);
    if (!ok)
        cJSON_Delete(raw);
    if (ok && seq)
        ok = add_digits(o, "seq", ev->seq);
    if (ok && ev->status)
        ok = cJSON_AddStringToObject(o, "status", pl_status_name(ev->status)) !=
             NULL;
    if (ok && has_elapsed(k))
        ok = add_digits(o, "elapsed_ns", ev->elapsed_ns);
    if (ok && k == PL_EVENT_VERSION)
        ok = cJSON_AddNumberToObject(o, "version", ev->version) != NULL;
    if (ok && (ev->tokens_in || ev->tokens_out)) {
        cJSON *tok = cJSON_AddObjectToObject(o, "tokens");
        ok = tok && add_digits(tok, "input", ev->tokens_in) &&
             add_digits(tok, "output", ev->tokens_out);
    }
    /* UTF-8 whatever bytes a detail or a name holds: JSON text is */
    char *text = ok ? pl__json_print_utf8(o) : NULL;
    cJSON_Delete(o);
    return text;
}

/*
 * A FIFO (or pipe) whose reader went away makes a write fail with EPIPE
 * and raises SIGPIPE, whose default ends the process: a trace must cost
 * a line, never the program.  The calling thread blocks SIGPIPE around its
 * writes, and takes back the one a failed write raised (unless one was
 * pending already, which stays for the program).
 */
typedef struct pipe_guard {
    sigset_t old;
    bool was_pending;
} pipe_guard;

static void pipe_guard_begin(pipe_guard *g)
{
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &g->old);
    g->was_pending = !sigpending(&pending) && sigismember(&pending, SIGPIPE);
}

/* @p e: the errno of the writes (kept for the caller). */
static void pipe_guard_end(const pipe_guard *g, int e)
{
    if (e == EPIPE && !g->was_pending) {
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        const struct timespec now = {0, 0};
        while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
    errno = e;
}

void pl_trace_event(const pl_event *ev, void *user)
{
    pl_trace *t = user;
    if (!t || !ev)
        return;
    char *text = line(ev);
    pthread_mutex_lock(&t->lock);
    pipe_guard g;
    pipe_guard_begin(&g);
    errno = 0;
    bool ok = text && fputs(text, t->f) >= 0 && fputc('\n', t->f) != EOF &&
              fflush(t->f) == 0;
    pipe_guard_end(&g, errno);
    if (!ok && t->failed++ == 0)
        t->first_errno = text ? errno : ENOMEM;
    pthread_mutex_unlock(&t->lock);
    free(text);
}

int pl_trace_close(pl_trace *t)
{
    if (!t)
        return PL_OK;
    int st = PL_OK;
    pipe_guard g;
    pipe_guard_begin(&g);
    errno = 0;
    int closed = fclose(t->f);
    pipe_guard_end(&g, errno);
    if (t->failed)
        st = pl_errorf(PL_EIO,
                       "pl_trace_close: %lu trace lines could not "
                       "be written (the first: %s)",
                       t->failed, strerror(t->first_errno));
    else if (closed)
        st = pl_errorf(PL_EIO, "pl_trace_close: closing the trace: %s",
                       strerror(errno));
    pthread_mutex_destroy(&t->lock);
    free(t);
    return st;
}
