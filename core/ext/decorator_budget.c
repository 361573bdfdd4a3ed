/*
 * decorator_budget.c -- budget: steps, wall-clock time and model tokens.
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be.
 *
 * Before each pass through the inner chain the decorator reads the clock
 * (pl_ctx_now(), a recorded step) and measures the invocation's ledger:
 *
 *   measure   what is counted
 *   steps     the steps of the ledger, the clock reading included
 *   wall_ms   recorded now - the time of the ledger's first step
 *   tokens    the sum of the top-level numbers "tokens" in step payloads
 *
 * Every measure comes from the ledger, so a replay measures, and decides,
 * the same.  A spent budget records an error step "BudgetExceeded" and the
 * pass does not run.
 */
#include <stdio.h>

#include <policyledger.h>

#include "ext.h"

/* Read @p in into @p b, at the current version, and check it: PL_OK, or
 * PL_EINVAL with a message that starts with @p fn. */
static int read_limits(pl_budget *b, const pl_budget *in, const char *fn)
{
    PL__EXT_ONE_VERSION(PL_BUDGET);
    *b = (pl_budget)PL_BUDGET_INIT;
    if (!in)
        return pl_errorf(PL_EINVAL, "%s: no limits given", fn);
    if (PL__EXT_VERSION_OK(in->version, pl_budget, PL_BUDGET, fn))
        return PL_EINVAL;
    *b = *in;
    if (b->max_wall_ms < 0)
        return pl_errorf(PL_EINVAL, "%s: max_wall_ms is negative", fn);
    if (!b->max_steps && !b->max_wall_ms && !b->max_tokens)
        return pl_errorf(PL_EINVAL,
                         "%s: no limit is set: give max_steps, max_wall_ms "
                         "or max_tokens",
                         fn);
    return PL_OK;
}

/* Why the budget is spent (into @p msg), or false while it is not. */
static bool spent(const pl_budget *b, const pl_steps *l, int64_t now, char *msg,
                  size_t cap)
{
    size_t n = pl_steps_count(l);
    double tokens = 0;
    for (size_t i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(pl_steps_at(l, i)), "tokens");
        if (cJSON_IsNumber(t) && t->valuedouble > 0)
            tokens += t->valuedouble;
    }
    int64_t first_ms = n ? pl_step_time_us(pl_steps_at(l, 0)) / 1000 : now;
    /* saturated: recorded clocks come from outside */
    int64_t wall = first_ms < 0 && now > INT64_MAX + first_ms ? INT64_MAX
                   : first_ms > 0 && now < INT64_MIN + first_ms
                       ? INT64_MIN
                       : now - first_ms;
    if (b->max_steps && n >= b->max_steps) {
        snprintf(msg, cap, "budget: %zu steps used, the limit is %llu", n,
                 (unsigned long long)b->max_steps);
        return true;
    }
    if (b->max_wall_ms && wall >= b->max_wall_ms) {
        snprintf(msg, cap, "budget: %lld ms used, the limit is %lld ms",
                 (long long)wall, (long long)b->max_wall_ms);
        return true;
    }
    if (b->max_tokens && tokens >= (double)b->max_tokens) {
        snprintf(msg, cap, "budget: %.0f tokens used, the limit is %llu",
                 tokens, (unsigned long long)b->max_tokens);
        return true;
    }
    return false;
}

static int budget_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                     const pl_decorator *self, pl_next *next)
{
    pl_budget current;
    int st = read_limits(&current, self->user, "budget");
    if (st)
        return st;
    const pl_budget *b = &current;
    int64_t now;
    const pl_steps *l = NULL;
    st = pl_ctx_now(&now, ctx);
    if (!st)
        st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    char msg[200];
    if (!spent(b, l, now, msg, sizeof msg))
        return pl_next_call(next, ctx, action, out);
    cJSON *err = NULL;
    st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code",
                      PL_ERR_BUDGET_EXCEEDED, "message", msg);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "budget", err);
    cJSON_Delete(err);
    return st;
}

int pl_decorator_budget(pl_decorator *out, const pl_budget *limits)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_budget: out is NULL");
    pl_budget current;
    int st = read_limits(&current, limits, "pl_decorator_budget");
    if (st)
        return st;
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = budget_fn;
    d.name = "budget";
    d.user = (void *)limits;
    *out = d;
    return PL_OK;
}
