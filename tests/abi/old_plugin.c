/*
 * old_plugin.c -- a plugin built against the earlier struct versions
 * (policyledger_prev.h), loaded by today's library.
 *
 *   old_add   {"a", "b"} -> {"sum": a + b}
 *   old_sum   calls old_add with its payload, returns {"total": sum}
 *
 * Its version 1 pl_policy_def is followed in memory by what a version 2
 * def would read as output_schema (a schema every result fails): the
 * library must read no further than version 1's last field.
 */
#include "policyledger_prev.h"

PL_PLUGIN_DECLARE;

static int add(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a->payload, "a");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(a->payload, "b");
    if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y))
        return pl_steps_add_error(out, "InvalidInput", "a and b are numbers");
    cJSON *r = cJSON_CreateObject();
    if (!r ||
        !cJSON_AddNumberToObject(r, "sum", x->valuedouble + y->valuedouble)) {
        cJSON_Delete(r);
        return -2; /* PL_ENOMEM */
    }
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int sum(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, "old_add", a->payload);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "sum");
    cJSON *total = NULL;
    if (!st && cJSON_IsNumber(s)) {
        total = cJSON_CreateObject();
        if (!total || !cJSON_AddNumberToObject(total, "total", s->valuedouble))
            st = -2;
    }
    if (!st)
        st = total ? pl_steps_add_result(out, total)
                   : pl_steps_add_error(out, "ToolBug", "no sum");
    cJSON_Delete(total);
    cJSON_Delete(r);
    return st;
}

/* A version 1 def, and after it what version 2 reads as output_schema. */
struct def_and_after {
    pl_policy_def def;
    const char *after;
};

static int add_one(pl_registry *reg, const char *name, pl_policy_fn fn,
                   const char *description)
{
    struct def_and_after d = {PL_POLICY_DEF_INIT, "{\"type\": \"string\"}"};
    d.def.name = name;
    d.def.fn = fn;
    d.def.description = description;
    return pl_registry_add(reg, &d.def);
}

int pl_plugin_init(pl_registry *reg)
{
    int st = add_one(reg, "old_add", add, "Adds a and b.");
    if (!st)
        st = add_one(reg, "old_sum", sum, "Calls old_add.");
    return st;
}
