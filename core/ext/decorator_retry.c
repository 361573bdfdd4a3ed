/*
 * decorator_retry.c -- retry: bounded attempts with recorded backoff.
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be.
 *
 * Every attempt runs the inner chain in the call's own invocation, so its
 * steps and its result are in the ledger.  Between two attempts the
 * invocation records, in this order:
 *
 *   step                              from
 *   side_effect "random"              pl_ctx_random(): the jitter
 *   side_effect "now"                 pl_ctx_now(): when the wait starts
 *   side_effect "retry.backoff"       {"attempt": k, "delay_ms": d,
 *                                      "until_ms": now + d}, made durable
 *                                      (with the attempt's result) before
 *                                      the wait
 *
 * and then waits only when nothing is recorded after the backoff: a replay
 * that finds the next attempt recorded goes straight on, and a run that
 * crashed during the wait waits what is left of it, until_ms on the real
 * clock (never less than 0).  The wait itself is not a step: the sleep
 * hook in the options sees every wait that happens.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <policyledger.h>

#include "ext.h"

static const char *const default_codes[] = {
    PL_ERR_TIMEOUT, PL_ERR_RETRYABLE_SERVER, PL_ERR_RATE_LIMITED};

/* A message for a bad configuration, or NULL when it is good. */
static const char *check_options(const pl_retry_options *o)
{
    if (o->max_attempts == 0)
        return "max_attempts is 0: at least one attempt is needed";
    if (o->max_backoff_ms < o->base_ms)
        return "max_backoff_ms is less than base_ms";
    if (o->n_codes && !o->codes)
        return "n_codes without codes";
    for (size_t i = 0; i < o->n_codes; i++)
        if (!o->codes[i] || !o->codes[i][0])
            return "a retryable code is NULL or empty";
    return NULL;
}

/* Read @p in (NULL: the defaults) into @p o, at the current version, and
 * check it: PL_OK, or PL_EINVAL with a message that starts with @p fn. */
static int read_options(pl_retry_options *o, const pl_retry_options *in,
                        const char *fn)
{
    PL__EXT_ONE_VERSION(PL_RETRY_OPTIONS);
    const pl_retry_options def = PL_RETRY_OPTIONS_INIT;
    if (in &&
        PL__EXT_VERSION_OK(in->version, pl_retry_options, PL_RETRY_OPTIONS, fn))
        return PL_EINVAL;
    *o = in ? *in : def;
    const char *bad = check_options(o);
    return bad ? pl_errorf(PL_EINVAL, "%s: %s", fn, bad) : PL_OK;
}

static bool retryable(const pl_retry_options *o, const char *code)
{
    const char *const *codes = o->codes ? o->codes : default_codes;
    size_t n = o->codes ? o->n_codes : sizeof default_codes / sizeof *codes;
    for (size_t i = 0; code && i < n; i++)
        if (strcmp(codes[i], code) == 0)
            return true;
    return false;
}

static int add_error(pl_ctx *ctx, pl_steps *out, const char *code,
                     const char *msg)
{
    cJSON *err = NULL;
    int st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code", code,
                          "message", msg);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "retry", err);
    cJSON_Delete(err);
    return st;
}

/* The side effect that records a wait: its value was made by the caller. */
static int give_value(cJSON **out, void *user)
{
    *out = cJSON_Duplicate(user, true);
    return *out ? PL_OK : pl_errorf(PL_ENOMEM, "retry: out of memory");
}

/* The tool's own wait, when its error result asks for one, or -1. */
static double retry_after(const pl_step *last)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_step_payload(last),
                                                      "retry_after_ms");
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? v->valuedouble : -1;
}

/*
 * Record the wait after attempt @p attempt and wait it, unless the ledger
 * already records what came after it.  *out_timeout is set when the wait
 * would pass the deadline: then nothing is recorded or waited.
 */
static int backoff(pl_ctx *ctx, const pl_retry_options *o, unsigned attempt,
                   const pl_step *last, uint64_t *prev, bool *out_timeout)
{
    *out_timeout = false;
    uint64_t r;
    int64_t now;
    int st = pl_ctx_random(&r, ctx);
    if (!st)
        st = pl_ctx_now(&now, ctx);
    if (st)
        return st;
    /* decorrelated jitter: uniform in [base, 3 * previous], capped */
    uint64_t lo = o->base_ms, hi = *prev * 3;
    if (hi < lo)
        hi = lo;
    uint64_t delay = lo + r % (hi - lo + 1);
    if (delay > o->max_backoff_ms)
        delay = o->max_backoff_ms;
    *prev = delay;
    double after = retry_after(last); /* at most max_retry_after_ms */
    if (after > (double)delay)
        delay = (uint64_t)after;
    /* a recorded clock far from today is refused by pl_json_pack() below
     * (|until_ms| <= 2^53), never an overflow here */
    int64_t until = now > INT64_MAX - (int64_t)delay ? INT64_MAX
                                                     : now + (int64_t)delay;
    int64_t deadline = pl_ctx_deadline(ctx);
    if (deadline && until > deadline) {
        *out_timeout = true;
        return PL_OK;
    }
    cJSON *v = NULL, *got = NULL;
    st = pl_json_pack(&v, "{s:i, s:I, s:I}", "attempt", (int)attempt,
                      "delay_ms", (int64_t)delay, "until_ms", until);
    if (!st)
        st = pl_ctx_side_effect(&got, ctx, "retry.backoff", give_value, v);
    cJSON_Delete(v);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(got, "until_ms");
    if (!st && !(cJSON_IsNumber(u) && u->valuedouble >= 0 &&
                 u->valuedouble <= 9007199254740992.0))
        st = pl_errorf(PL_ECORRUPT,
                       "retry: the recorded backoff at %s "
                       "has no until_ms in range",
                       pl_ctx_path(ctx));
    if (!st && !pl_ctx_replaying(ctx)) {
        int64_t left = (int64_t)u->valuedouble - pl__ext_now_ms();
        if (left < 0)
            left = 0;
        st = (o->sleep ? o->sleep : pl__ext_sleep)(left, o->sleep_user);
    }
    cJSON_Delete(got);
    return st;
}

static int retry_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                    const pl_decorator *self, pl_next *next)
{
    pl_retry_options current;
    int st = read_options(&current, self->user, "retry");
    if (st)
        return st;
    const pl_retry_options *o = &current;
    pl_steps *turn = NULL;
    st = pl_steps_new(&turn);
    uint64_t prev = o->base_ms;
    for (unsigned attempt = 1; !st; attempt++) {
        pl_steps_clear(turn);
        if ((st = pl_next_call(next, ctx, action, turn)))
            break;
        size_t n = pl_steps_count(turn);
        const pl_step *last = n ? pl_steps_at(turn, n - 1) : NULL;
        if (!last || !pl_step_is_error(last) ||
            !retryable(o, pl_step_error_code(last)) ||
            attempt >= o->max_attempts ||
            retry_after(last) > (double)o->max_retry_after_ms)
            break;
        bool timeout;
        if ((st = backoff(ctx, o, attempt, last, &prev, &timeout)))
            break;
        if (timeout) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "retry: attempt %u failed with %s and the backoff "
                     "before the next would pass the deadline",
                     attempt, pl_step_error_code(last));
            if (!(st = pl_steps_move(out, turn)))
                st = add_error(ctx, out, PL_ERR_TIMEOUT, msg);
            pl_steps_free(turn);
            return st;
        }
    }
    if (!st)
        st = pl_steps_move(out, turn);
    pl_steps_free(turn);
    return st;
}

int pl_decorator_retry(pl_decorator *out, const pl_retry_options *opts)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_retry: out is NULL");
    pl_retry_options current;
    int st = read_options(&current, opts, "pl_decorator_retry");
    if (st)
        return st;
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = retry_fn;
    d.name = "retry";
    d.user = (void *)opts;
    *out = d;
    return PL_OK;
}
