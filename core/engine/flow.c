/*
 * flow.c -- flow control: a queued run's priority and concurrency key, as
 * run options give them (the queue's order itself is the store's: FLOW in
 * ledger/store.h), and rate limits' budgets, kept in the store
 * (pl_rate_take()): what the rate_limit decorator
 * (core/ext/decorator_rate.c) takes from.
 */
#include "internal.h"

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
    if (k && (!*k || strlen(k) > PL_MAX_FLOW_KEY))
        return pl__err(PL_EINVAL,
                       "%s: a concurrency key is 1 to %d bytes of text", fn,
                       PL_MAX_FLOW_KEY);
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
        return pl__err(PL_EINVAL, "pl_rate_take: NULL argument");
    *out_admitted = false;
    *out_at_ms = *out_retry_at_ms = 0;
    size_t n = strlen(resource);
    if (n == 0 || n > PL_MAX_FLOW_KEY)
        return pl__err(PL_EINVAL,
                       "pl_rate_take: a resource's name is 1 to %d bytes",
                       PL_MAX_FLOW_KEY);
    if (limit == 0)
        return pl__err(PL_EINVAL, "pl_rate_take: limit is 0");
    if (window_ms < 1)
        return pl__err(PL_EINVAL,
                       "pl_rate_take: window_ms %lld is not a "
                       "window",
                       (long long)window_ms);
    return pl__store_rate_take(e->store, resource, limit, window_ms,
                               out_admitted, out_at_ms, out_retry_at_ms);
}
