/*
 * json_calls.c -- pl_steps_add_resultf and pl_ctx_invokef: a result, or a
 * call's payload, built with pl_json_pack()'s format.
 */
#include <stdarg.h>

#include "ext.h"

int pl_steps_add_resultf(pl_steps *steps, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cJSON *v;
    int rc = pl_json_vpack(&v, fmt, ap);
    va_end(ap);
    if (rc)
        return rc;
    if (!cJSON_IsObject(v))
        rc = pl_errorf(PL_EJSON,
                       "pl_steps_add_resultf: format \"%s\" builds "
                       "%s; a result must be an object",
                       fmt, pl__json_type_name(v));
    else
        rc = pl_steps_add_result(steps, v);
    cJSON_Delete(v);
    return rc;
}

int pl_ctx_invokef(cJSON **out, pl_ctx *ctx, const char *policy,
                   const char *fmt, ...)
{
    if (out)
        *out = NULL;
    va_list ap;
    va_start(ap, fmt);
    cJSON *payload;
    int rc = pl_json_vpack(&payload, fmt, ap);
    va_end(ap);
    if (rc)
        return rc;
    if (!cJSON_IsObject(payload))
        rc = pl_errorf(PL_EJSON,
                       "pl_ctx_invokef: format \"%s\" builds %s; a "
                       "payload must be an object",
                       fmt, pl__json_type_name(payload));
    else
        rc = pl_ctx_invoke(out, ctx, policy, payload);
    cJSON_Delete(payload);
    return rc;
}
