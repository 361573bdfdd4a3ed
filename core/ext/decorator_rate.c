/*
 * decorator_rate.c -- rate_limit: calls to a named resource within a
 * budget the store keeps for every process (pl_rate_take()).
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be.
 *
 * Before the inner chain runs, the decorator takes budget; each take is a
 * recorded side effect, so the ledger of a call that had to wait reads
 *
 *   step                     value
 *   side_effect "rate_limit" {"admitted": false, "at_ms", "delay_ms",
 *                             "until_ms", ...}   then the wait
 *   side_effect "rate_limit" {"admitted": true, "at_ms", ...}
 *   ... the inner chain's steps ...
 *
 * and the wait itself is the engine's durable sleep (pl_ctx_sleep_until():
 * a `wait` step; a short one on the thread, a long one parks the run and
 * frees its worker), or, with options' own sleep function (or in a call of
 * a pl_ctx_call_all() fan-out, which cannot park), a wait in place.  A
 * replay serves every take and waits for none.  A run that crashed in a
 * wait finds the denial recorded, waits what is left of it (until_ms on
 * this host's clock) and takes again: budget is counted once per recorded
 * admission, except for a crash between the store's count and the record
 * of it, which leaves that call's budget spent (never more calls than the
 * budget allows, at worst one fewer).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <policyledger.h>

#include "ext.h"

static int read_options(pl_rate_limit_options *o,
                        const pl_rate_limit_options *in, const char *fn)
{
    PL__EXT_ONE_VERSION(PL_RATE_LIMIT_OPTIONS);
    *o = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    if (!in)
        return pl_errorf(PL_EINVAL, "%s: no options given", fn);
    if (PL__EXT_VERSION_OK(in->version, pl_rate_limit_options,
                           PL_RATE_LIMIT_OPTIONS, fn))
        return PL_EINVAL;
    *o = *in;
    if (!o->resource || !*o->resource || strlen(o->resource) > PL_MAX_FLOW_KEY)
        return pl_errorf(PL_EINVAL,
                         "%s: the resource must be named (1 to %d bytes)", fn,
                         PL_MAX_FLOW_KEY);
    if (o->limit == 0)
        return pl_errorf(PL_EINVAL, "%s: limit is 0: give 1 call or more", fn);
    if (o->window_ms < 1)
        return pl_errorf(PL_EINVAL, "%s: window_ms %lld is not a window", fn,
                         (long long)o->window_ms);
    return PL_OK;
}

typedef struct take_ctx {
    pl_engine *e;
    const pl_rate_limit_options *o;
} take_ctx;

/* The side effect: one take of the budget, as a value to record. */
static int take(cJSON **out, void *user)
{
    take_ctx *t = user;
    bool admitted;
    int64_t at, retry_at;
    int st = pl_rate_take(&admitted, &at, &retry_at, t->e, t->o->resource,
                          t->o->limit, t->o->window_ms);
    if (st)
        return st;
    if (admitted)
        return pl_json_pack(out, "{s:s, s:b, s:I, s:I, s:I}", "resource",
                            t->o->resource, "admitted", 1, "at_ms", at,
                            "window_ms", t->o->window_ms, "limit",
                            (int64_t)t->o->limit);
    /* the store's clock says how long; this host's clock waits it */
    int64_t delay = retry_at > at ? retry_at - at : 0;
    return pl_json_pack(out, "{s:s, s:b, s:I, s:I, s:I, s:I, s:I}", "resource",
                        t->o->resource, "admitted", 0, "at_ms", at, "window_ms",
                        t->o->window_ms, "limit", (int64_t)t->o->limit,
                        "delay_ms", delay, "until_ms",
                        pl__ext_now_ms() + delay);
}

static int add_timeout(pl_ctx *ctx, pl_steps *out, const char *resource)
{
    char msg[PL_MAX_FLOW_KEY + 100];
    snprintf(msg, sizeof msg,
             "rate_limit: waiting for the budget of '%s' would pass the "
             "deadline",
             resource);
    cJSON *err = NULL;
    int st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code",
                          PL_ERR_TIMEOUT, "message", msg);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "rate_limit", err);
    cJSON_Delete(err);
    return st;
}

/* A recorded number in [0, 2^53], or -1. */
static double number(const cJSON *v, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, name);
    return cJSON_IsNumber(n) && n->valuedouble >= 0 &&
                   n->valuedouble <= 9007199254740992.0
               ? n->valuedouble
               : -1;
}

static int rate_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                   const pl_decorator *self, pl_next *next)
{
    pl_rate_limit_options o;
    int st = read_options(&o, self->user, "rate_limit");
    if (st)
        return st;
    take_ctx t = {pl_ctx_engine(ctx), &o};
    for (;;) {
        cJSON *got = NULL;
        if ((st = pl_ctx_side_effect(&got, ctx, "rate_limit", take, &t)))
            return st;
        const cJSON *adm = cJSON_GetObjectItemCaseSensitive(got, "admitted");
        double until = number(got, "until_ms");
        if (!cJSON_IsBool(adm) || (!cJSON_IsTrue(adm) && until < 0)) {
            cJSON_Delete(got);
            return pl_errorf(PL_ECORRUPT,
                             "rate_limit: the recorded take at %s is "
                             "malformed",
                             pl_ctx_path(ctx));
        }
        cJSON_Delete(got);
        if (cJSON_IsTrue(adm))
            break;
        int64_t deadline = pl_ctx_deadline(ctx);
        if (deadline && (int64_t)until > deadline)
            return add_timeout(ctx, out, o.resource);
        if (!o.sleep) {
            /* the engine's durable sleep: a short one on this thread, a
             * long one parks the run (PL_ESUSPENDED climbs to the policy,
             * which returns it) and frees its worker; a call of a
             * pl_ctx_call_all() fan-out cannot park (PL_EINVAL): it waits
             * here */
            st = pl_ctx_sleep_until(ctx, (int64_t)until);
            if (st != PL_EINVAL) {
                if (st)
                    return st;
                continue;
            }
            st = PL_OK;
        }
        if (!pl_ctx_replaying(ctx)) {
            int64_t left = (int64_t)until - pl__ext_now_ms();
            if (left > 0 &&
                (st = (o.sleep ? o.sleep : pl__ext_sleep)(left, o.sleep_user)))
                return st;
            st = PL_OK;
        }
    }
    return pl_next_call(next, ctx, action, out);
}

int pl_decorator_rate_limit(pl_decorator *out,
                            const pl_rate_limit_options *opts)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_rate_limit: out is NULL");
    pl_rate_limit_options o;
    int st = read_options(&o, opts, "pl_decorator_rate_limit");
    if (st)
        return st;
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = rate_fn;
    d.name = "rate_limit";
    d.user = (void *)opts;
    *out = d;
    return PL_OK;
}
