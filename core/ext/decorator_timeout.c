/*
 * decorator_timeout.c -- timeout(ms): a cooperative deadline.
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be.
 *
 * C cannot stop a running function.  So the deadline is handed to the
 * callee (pl_ctx_deadline(), inherited by every call it makes), the
 * library's waits honour it, and when the callee returns past it, by the
 * recorded clock, its result is replaced: the decorator records, in order,
 *
 *   step                  from
 *   side_effect "now"     pl_ctx_now(): the start, deadline = now + ms
 *   ... the inner chain's steps ...
 *   side_effect "now"     pl_ctx_now(): the end
 *   error "Timeout"       only when the end is past the deadline
 *
 * Both clock readings are recorded, so a replay decides the same.
 */
#include <stdio.h>

#include <policyledger.h>

/* The longest timeout, 2^62 ms as the header says (INT64_MAX / 2 is one
 * less); the deadline it makes saturates, never overflows. */
#define MAX_MS ((uint64_t)1 << 62)

/* a - b, saturated: recorded clocks come from outside */
static int64_t sat_sub(int64_t a, int64_t b)
{
    if (b < 0 && a > INT64_MAX + b)
        return INT64_MAX;
    if (b > 0 && a < INT64_MIN + b)
        return INT64_MIN;
    return a - b;
}

static int timeout_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                      const pl_decorator *self, pl_next *next)
{
    if (self->arg == 0 || self->arg > MAX_MS)
        return pl_errorf(PL_EINVAL,
                         "timeout: %llu ms is not a timeout (1 ms or "
                         "more, and not absurdly large)",
                         (unsigned long long)self->arg);
    int64_t ms = (int64_t)self->arg;
    int64_t start, end = 0;
    int st = pl_ctx_now(&start, ctx);
    if (st)
        return st;
    int64_t prev = pl_ctx_deadline(ctx);
    int64_t deadline = start > INT64_MAX - ms ? INT64_MAX : start + ms;
    if (prev && prev < deadline)
        deadline = prev;
    if ((st = pl_ctx_set_deadline(ctx, deadline)))
        return st;
    pl_steps *turn = NULL;
    if (!(st = pl_steps_new(&turn)))
        st = pl_next_call(next, ctx, action, turn);
    /* the caller's deadline again (after a failure the run has stopped,
     * and its context with it) */
    if (!st)
        st = pl_ctx_set_deadline(ctx, prev);
    if (!st)
        st = pl_ctx_now(&end, ctx);
    if (!st)
        st = pl_steps_move(out, turn);
    pl_steps_free(turn);
    if (st || end <= deadline)
        return st;
    char msg[200];
    snprintf(msg, sizeof msg,
             "timeout: '%s' returned %lld ms past its deadline (%lld ms "
             "after it started)",
             action->policy, (long long)sat_sub(end, deadline),
             (long long)sat_sub(deadline, start));
    cJSON *err = NULL;
    st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code",
                      PL_ERR_TIMEOUT, "message", msg);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "timeout", err);
    cJSON_Delete(err);
    return st;
}

int pl_decorator_timeout(pl_decorator *out, int64_t ms)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_timeout: out is NULL");
    /* the bound timeout_fn() holds a recorded decorator to */
    if (ms <= 0 || (uint64_t)ms > MAX_MS)
        return pl_errorf(PL_EINVAL,
                         "pl_decorator_timeout: %lld ms is not a "
                         "timeout: give 1 ms to 2^62",
                         (long long)ms);
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = timeout_fn;
    d.name = "timeout";
    d.arg = (uint64_t)ms;
    *out = d;
    return PL_OK;
}
