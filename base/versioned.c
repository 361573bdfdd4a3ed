/*
 * versioned.c -- every version of every versioned public struct, and the
 * one rule that reads them (the header's VERSIONS AND THE ABI).
 *
 * A struct's table lists, for each version v from 1, the bytes a caller
 * built against version v has: its fields up to the last of that version
 * (END()), and sizeof for the current version.  When a field is appended:
 * raise the struct's PL_*_VERSION, make the current entry END(type, the
 * last field before it), and add sizeof(type) for the new version; a
 * table with fewer entries than the version does not compile.
 *
 * An array of an older version is as the compiler laid it out then: each
 * element its bytes rounded up to the struct's alignment.  So a struct
 * passed in arrays (pl_decorator, pl_call_spec) never gains a field more
 * strictly aligned than the ones it has.
 */
#include <assert.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>

#include "policyledger_llm.h"
#include "policyledger_mcp.h"
#include "util.h"

/* The bytes of a struct up to the end of @p field. */
#define END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* clang-format off */
#define LAYOUT(var, type, NAME, ...)                                           \
    static const size_t var##_sizes[] = {__VA_ARGS__};                         \
    static const type var##_init = NAME##_INIT;                                \
    _Static_assert(PL__ARRAY_LEN(var##_sizes) == NAME##_VERSION,               \
                   #type ": one size per version, 1.." #NAME "_VERSION");      \
    const pl__layout pl__##var##_layout = {                                    \
        #type, #NAME "_INIT", NAME##_VERSION, var##_sizes, alignof(type),      \
        &var##_init}
/* clang-format on */

LAYOUT(action, pl_action, PL_ACTION, sizeof(pl_action));
LAYOUT(policy_def, pl_policy_def, PL_POLICY_DEF,
       END(pl_policy_def, code_version), sizeof(pl_policy_def));
LAYOUT(engine_options, pl_engine_options, PL_ENGINE_OPTIONS,
       END(pl_engine_options, event_user), END(pl_engine_options, read_only),
       END(pl_engine_options, lease_ms), END(pl_engine_options, no_create),
       END(pl_engine_options, tombstone_ms), sizeof(pl_engine_options));
LAYOUT(store_stats, pl_store_stats, PL_STORE_STATS, sizeof(pl_store_stats));
LAYOUT(runs_options, pl_runs_options, PL_RUNS_OPTIONS,
       END(pl_runs_options, reverse), sizeof(pl_runs_options));
LAYOUT(run_options, pl_run_options, PL_RUN_OPTIONS, END(pl_run_options, check),
       END(pl_run_options, if_exists), END(pl_run_options, deadline_in_ms),
       sizeof(pl_run_options));
LAYOUT(worker_options, pl_worker_options, PL_WORKER_OPTIONS,
       END(pl_worker_options, skipped), END(pl_worker_options, retain_ms),
       END(pl_worker_options, retain_failed_ms), sizeof(pl_worker_options));
LAYOUT(schedule, pl_schedule, PL_SCHEDULE, END(pl_schedule, start_ms),
       sizeof(pl_schedule));
LAYOUT(tombstone, pl_tombstone, PL_TOMBSTONE, sizeof(pl_tombstone));
LAYOUT(prune_options, pl_prune_options, PL_PRUNE_OPTIONS,
       END(pl_prune_options, user), sizeof(pl_prune_options));
LAYOUT(pool_options, pl_pool_options, PL_POOL_OPTIONS, sizeof(pl_pool_options));
LAYOUT(call_spec, pl_call_spec, PL_CALL_SPEC, sizeof(pl_call_spec));
LAYOUT(decorator, pl_decorator, PL_DECORATOR, sizeof(pl_decorator));
LAYOUT(side_effect_match, pl_side_effect_match, PL_SIDE_EFFECT_MATCH,
       sizeof(pl_side_effect_match));
LAYOUT(retry_options, pl_retry_options, PL_RETRY_OPTIONS,
       sizeof(pl_retry_options));
LAYOUT(budget, pl_budget, PL_BUDGET, sizeof(pl_budget));
LAYOUT(rate_limit_options, pl_rate_limit_options, PL_RATE_LIMIT_OPTIONS,
       END(pl_rate_limit_options, sleep_user), sizeof(pl_rate_limit_options));
LAYOUT(rate_grant, pl_rate_grant, PL_RATE_GRANT, sizeof(pl_rate_grant));
LAYOUT(paginate_options, pl_paginate_options, PL_PAGINATE_OPTIONS,
       sizeof(pl_paginate_options));
LAYOUT(observe_options, pl_observe_options, PL_OBSERVE_OPTIONS,
       sizeof(pl_observe_options));
LAYOUT(otel_options, pl_otel_options, PL_OTEL_OPTIONS, sizeof(pl_otel_options));
LAYOUT(otel_counts, pl_otel_counts, PL_OTEL_COUNTS, sizeof(pl_otel_counts));
LAYOUT(sandbox_options, pl_sandbox_options, PL_SANDBOX_OPTIONS,
       END(pl_sandbox_options, walk_only), sizeof(pl_sandbox_options));
LAYOUT(tools_options, pl_tools_options, PL_TOOLS_OPTIONS,
       END(pl_tools_options, max_redirects), sizeof(pl_tools_options));
LAYOUT(schema_error, pl_schema_error, PL_SCHEMA_ERROR, sizeof(pl_schema_error));
LAYOUT(llm_options, pl_llm_options, PL_LLM_OPTIONS,
       END(pl_llm_options, tool_errors),
       END(pl_llm_options, max_tool_result_bytes), sizeof(pl_llm_options));
LAYOUT(llm_tokens, pl_llm_tokens, PL_LLM_TOKENS, sizeof(pl_llm_tokens));
LAYOUT(mcp_options, pl_mcp_options, PL_MCP_OPTIONS,
       END(pl_mcp_options, token_env), sizeof(pl_mcp_options));

/* ---- the rule ------------------------------------------------------------- */

int pl__struct_version_ok(unsigned version, const pl__layout *l, const char *fn)
{
    if (version >= 1 && version <= l->current)
        return PL_OK;
    if (version == 0)
        return pl__err(PL_EINVAL, "%s: %s version 0: it was not made with %s",
                       fn, l->name, l->init);
    return pl__err(PL_EINVAL,
                   "%s: %s version %u is newer than this library's (it "
                   "takes 1..%u): built against a newer header",
                   fn, l->name, version, l->current);
}

static unsigned version_of(const void *s)
{
    unsigned v;
    memcpy(&v, s, sizeof v);
    return v;
}

int pl__struct_in(void *out, const void *in, const pl__layout *l,
                  const char *fn)
{
    size_t full = l->sizes[l->current - 1];
    memcpy(out, l->defaults, full);
    if (!in)
        return PL_OK;
    unsigned v = version_of(in);
    int st = pl__struct_version_ok(v, l, fn);
    if (st)
        return st;
    memcpy(out, in, l->sizes[v - 1]);
    memcpy(out, &l->current, sizeof l->current);
    return PL_OK;
}

void pl__struct_out(void *out, const void *full, const pl__layout *l)
{
    unsigned v = version_of(out);
    assert(v >= 1 && v <= l->current);
    size_t n = l->sizes[v - 1];
    memcpy((char *)out + sizeof v, (const char *)full + sizeof v, n - sizeof v);
}

int pl__struct_array_in(const void **out, void **owned, const void *in,
                        size_t n, const pl__layout *l, const char *fn)
{
    *out = in;
    *owned = NULL;
    if (!n || !in)
        return PL_OK;
    unsigned v = version_of(in);
    int st = pl__struct_version_ok(v, l, fn);
    if (st)
        return st;
    size_t full = l->sizes[l->current - 1];
    size_t stride = (l->sizes[v - 1] + l->align - 1) / l->align * l->align;
    for (size_t i = 1; i < n; i++)
        if (version_of((const char *)in + i * stride) != v)
            return pl__err(PL_EINVAL,
                           "%s: %s %zu has version %u, the first has %u: "
                           "an array's elements are of one version",
                           fn, l->name, i,
                           version_of((const char *)in + i * stride), v);
    if (v == l->current)
        return PL_OK;
    char *copy = malloc(n * full);
    if (!copy)
        return pl__err(PL_ENOMEM, "%s: out of memory", fn);
    for (size_t i = 0; i < n; i++) {
        memcpy(copy + i * full, l->defaults, full);
        memcpy(copy + i * full, (const char *)in + i * stride, l->sizes[v - 1]);
        memcpy(copy + i * full, &l->current, sizeof l->current);
    }
    *out = copy;
    *owned = copy;
    return PL_OK;
}

int pl__decorators_ok(const pl_decorator *list, size_t n, const char *fn)
{
    if (n && !list)
        return pl__err(PL_EINVAL, "%s: %zu decorators but the list is NULL", fn,
                       n);
    const void *current;
    void *owned;
    int st = pl__struct_array_in(&current, &owned, list, n,
                                 &pl__decorator_layout, fn);
    if (st)
        return st;
    const pl_decorator *d = current;
    size_t i = 0;
    while (i < n && d[i].fn)
        i++;
    free(owned);
    if (i < n)
        return pl__err(PL_EINVAL, "%s: decorator %zu has no function", fn, i);
    return PL_OK;
}
