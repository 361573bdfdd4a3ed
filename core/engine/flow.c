/*
 * flow.c -- flow control: a queued run's priority and concurrency key, as
 * run options give them (the queue's order itself is the store's: FLOW in
 * ledger/store.h), and rate limits' budgets, kept in the store
 * (pl_rate_take(); in units, pl_rate_take_units() and
 * pl_rate_settle_units()): what the rate_limit decorator
 * (core/ext/decorator_rate.c) takes from.
 */
#include "internal.h"

/* A rate budget's resource is text, as a concurrency key is: the message
 * (the function's name, PL_MAX_FLOW_KEY) when it is not. */
#define RESOURCE_RULE                                                          \
    "%s: a resource's name is 1 to %d bytes of UTF-8 with no control "         \
    "characters"

int pl__flow_options_ok(const pl_run_options *dst, const char *fn, bool submit)
{
    if (!submit &&
        (dst->priority || dst->concurrency_key || dst->concurrency_limit))
        return pl__err(PL_EINVAL,
                       "%s: priority and concurrency keys apply to "
                       "pl_run_submit only",
                       fn);
    if (dst->priority < -PL_PRIORITY_MAX || dst->priority > PL_PRIORITY_MAX)
        return pl__err(PL_EINVAL, "%s: priority %d is outside -%d..%d", fn,
                       dst->priority, PL_PRIORITY_MAX, PL_PRIORITY_MAX);
    const char *k = dst->concurrency_key;
    if (k && !pl__text_ok(k, PL_MAX_FLOW_KEY))
        return pl__err(PL_EINVAL,
                       "%s: a concurrency key is 1 to %d bytes of UTF-8 with "
                       "no control characters",
                       fn, PL_MAX_FLOW_KEY);
    if (k && !dst->concurrency_limit)
        return pl__err(PL_EINVAL,
                       "%s: concurrency key '%s' needs a concurrency_limit of "
                       "1 or more",
                       fn, k);
    if (!k && dst->concurrency_limit)
        return pl__err(PL_EINVAL,
                       "%s: a concurrency_limit needs a concurrency_key", fn);
    if (dst->concurrency_limit > INT32_MAX)
        return pl__err(PL_EINVAL, "%s: concurrency_limit %u is too large", fn,
                       dst->concurrency_limit);
    return PL_OK;
}

int pl_rate_take(bool *out_admitted, int64_t *out_at_ms,
                 int64_t *out_retry_at_ms, pl_engine *e, const char *resource,
                 uint32_t limit, int64_t window_ms)
{
    if (!out_admitted || !out_at_ms || !out_retry_at_ms || !e || !resource)
        return pl__err(PL_EINVAL, "pl_rate_take: NULL %s",
                       !out_admitted      ? "out_admitted"
                       : !out_at_ms       ? "out_at_ms"
                       : !out_retry_at_ms ? "out_retry_at_ms"
                       : !e               ? "engine"
                                          : "resource");
    *out_admitted = false;
    *out_at_ms = *out_retry_at_ms = 0;
    if (!pl__text_ok(resource, PL_MAX_FLOW_KEY))
        return pl__err(PL_EINVAL, RESOURCE_RULE, "pl_rate_take",
                       PL_MAX_FLOW_KEY);
    if (limit == 0)
        return pl__err(PL_EINVAL, "pl_rate_take: limit is 0");
    /* the store adds a window to a window's start: bounded as the units'
     * windows are, a sum that cannot overflow */
    if (window_ms < 1 || (uint64_t)window_ms > PL_RATE_MAX_UNITS)
        return pl__err(PL_EINVAL,
                       "pl_rate_take: window_ms %lld is not a "
                       "window (1 ms to 2^53)",
                       (long long)window_ms);
    return pl__store_rate_take(e->store, resource, limit, window_ms,
                               out_admitted, out_at_ms, out_retry_at_ms);
}

/* ---- budgets in units ------------------------------------------------------ */

/* The arguments every units call checks. */
static int units_args_ok(const pl_rate_grant *out, const pl_engine *e,
                         const char *resource, const char *unit,
                         uint64_t budget, int64_t window_ms, const char *fn)
{
    if (!out || !e || !resource || !unit)
        return pl__err(PL_EINVAL, "%s: NULL %s", fn,
                       !out        ? "out"
                       : !e        ? "engine"
                       : !resource ? "resource"
                                   : "unit");
    if (pl__struct_version_ok(out->version, &pl__rate_grant_layout, fn))
        return PL_EINVAL;
    size_t m = strlen(unit);
    if (!pl__text_ok(resource, PL_MAX_FLOW_KEY))
        return pl__err(PL_EINVAL, RESOURCE_RULE, fn, PL_MAX_FLOW_KEY);
    bool name = m >= 1 && m <= PL_MAX_RATE_UNIT;
    for (size_t i = 0; name && i < m; i++)
        name = (unit[i] >= 'a' && unit[i] <= 'z') ||
               (unit[i] >= '0' && unit[i] <= '9') || unit[i] == '_';
    if (!name)
        return pl__err(PL_EINVAL,
                       "%s: unit '%.40s' is not a name: 1 to %d of a-z, 0-9 "
                       "and _",
                       fn, unit, PL_MAX_RATE_UNIT);
    if (budget == 0 || budget > PL_RATE_MAX_UNITS)
        return pl__err(PL_EINVAL, "%s: a budget is 1 to 2^53 %s, not %llu", fn,
                       unit, (unsigned long long)budget);
    if (window_ms < 1 || (uint64_t)window_ms > PL_RATE_MAX_UNITS)
        return pl__err(PL_EINVAL,
                       "%s: window_ms %lld is not a window (1 ms to 2^53)", fn,
                       (long long)window_ms);
    return PL_OK;
}

static void grant_out(pl_rate_grant *out, const pl__units_grant *g)
{
    pl_rate_grant full = PL_RATE_GRANT_INIT;
    full.admitted = g->admitted;
    full.at_ms = g->at_ms;
    full.window_start_ms = g->start_ms;
    full.retry_at_ms = g->retry_at_ms;
    full.used = g->used;
    pl__struct_out(out, &full, &pl__rate_grant_layout);
}

/* Ask the store for @p op once the arguments are checked. */
static int units_call(pl_rate_grant *out, pl_engine *e, pl__units_op *op,
                      const char *fn)
{
    int st = units_args_ok(out, e, op->resource, op->unit, op->limit,
                           op->window_ms, fn);
    if (st)
        return st;
    pl__units_grant g = {0};
    grant_out(out, &g);
    if (!op->settle && op->amount > op->limit)
        return pl__err(PL_ELIMIT,
                       "%s: %llu %s is more than the whole budget of '%s' "
                       "(%llu %s per %lld ms): it could never be admitted",
                       fn, (unsigned long long)op->amount, op->unit,
                       op->resource, (unsigned long long)op->limit, op->unit,
                       (long long)op->window_ms);
    if ((st = pl__store_units(e->store, op, &g)))
        return st;
    grant_out(out, &g);
    return PL_OK;
}

int pl_rate_take_units(pl_rate_grant *out, pl_engine *e, const char *resource,
                       const char *unit, uint64_t budget, int64_t window_ms,
                       uint64_t amount)
{
    pl__units_op op = {.resource = resource,
                       .unit = unit,
                       .limit = budget,
                       .window_ms = window_ms,
                       .amount = amount};
    return units_call(out, e, &op, "pl_rate_take_units");
}

int pl_rate_settle_units(pl_rate_grant *out, pl_engine *e, const char *resource,
                         const char *unit, uint64_t budget, int64_t window_ms,
                         int64_t window_start_ms, uint64_t charged,
                         uint64_t actual)
{
    if (window_start_ms < 0)
        return pl__err(PL_EINVAL,
                       "pl_rate_settle_units: window_start_ms %lld is not "
                       "a window's start",
                       (long long)window_start_ms);
    if (charged > PL_RATE_MAX_UNITS || actual > PL_RATE_MAX_UNITS)
        return pl__err(PL_EINVAL,
                       "pl_rate_settle_units: %llu charged, %llu used: each "
                       "is 0 to 2^53",
                       (unsigned long long)charged, (unsigned long long)actual);
    pl__units_op op = {.resource = resource,
                       .unit = unit,
                       .limit = budget,
                       .window_ms = window_ms,
                       .settle = true,
                       .start_ms = window_start_ms,
                       .delta = (int64_t)actual - (int64_t)charged};
    return units_call(out, e, &op, "pl_rate_settle_units");
}
