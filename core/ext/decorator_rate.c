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
 *
 * A budget in units (options' budget: tokens a minute) charges a call its
 * estimate at the take, then corrects the charge by what the call used,
 * once its inner chain has returned:
 *
 *   side_effect "rate_limit"       {"admitted": true, "estimate",
 *                                   "window_start_ms", "used", ...}
 *   ... the inner chain's steps ...
 *   side_effect "rate_limit_usage" {"estimate", "actual", "charged", ...}
 *
 * An extra charge is made inside the side effect (a crash before its
 * record makes it again), a refund after the record (a crash before it
 * drops it): a crash leaves a budget charged more, never less.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <policyledger.h>

#include "ext.h"
#include "schema.h"

/* The bytes of version 1 of the options: up to sleep_user. */
#define V1_BYTES (offsetof(pl_rate_limit_options, sleep_user) + sizeof(void *))

#define MAX_UNITS 9007199254740992.0 /* PL_RATE_MAX_UNITS, as a double */

/* A resource's name: 1..PL_MAX_FLOW_KEY bytes of well-formed UTF-8 with
 * no control characters, as pl_rate_take() takes them (known here, at the
 * decorator's making, not at its first call). */
static bool resource_ok(const char *r)
{
    size_t n = r ? strlen(r) : 0;
    if (n < 1 || n > PL_MAX_FLOW_KEY)
        return false;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += pl__utf8_next(r + i, &c);
        if (c < 0x20 || c == 0x7f || c == PL__RX_BAD)
            return false;
    }
    return true;
}

/* A unit's name: 1..PL_MAX_RATE_UNIT of [a-z0-9_]. */
static bool unit_ok(const char *u)
{
    size_t n = strlen(u);
    if (n < 1 || n > PL_MAX_RATE_UNIT)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((u[i] >= 'a' && u[i] <= 'z') || (u[i] >= '0' && u[i] <= '9') ||
              u[i] == '_'))
            return false;
    return true;
}

static int read_options(pl_rate_limit_options *o,
                        const pl_rate_limit_options *in, const char *fn)
{
    _Static_assert(PL_RATE_LIMIT_OPTIONS_VERSION == 2,
                   "PL_RATE_LIMIT_OPTIONS_VERSION grew: read the older "
                   "versions' bytes as base/versioned.c's table has them");
    *o = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    if (!in)
        return pl_errorf(PL_EINVAL, "%s: no options given", fn);
    if (PL__EXT_VERSION_OK(in->version, pl_rate_limit_options,
                           PL_RATE_LIMIT_OPTIONS, fn))
        return PL_EINVAL;
    memcpy(o, in, in->version == 1 ? V1_BYTES : sizeof *o);
    o->version = PL_RATE_LIMIT_OPTIONS_VERSION;
    if (!resource_ok(o->resource))
        return pl_errorf(PL_EINVAL,
                         "%s: the resource must be named (1 to %d bytes of "
                         "UTF-8 with no control characters)",
                         fn, PL_MAX_FLOW_KEY);
    /* pl_rate_take()'s and pl_rate_take_units()'s bounds alike */
    if (o->window_ms < 1)
        return pl_errorf(PL_EINVAL, "%s: window_ms %lld is not a window", fn,
                         (long long)o->window_ms);
    if ((uint64_t)o->window_ms > PL_RATE_MAX_UNITS)
        return pl_errorf(PL_EINVAL, "%s: window_ms %lld is more than 2^53", fn,
                         (long long)o->window_ms);
    if (!o->budget) {
        if (o->unit || o->estimate_member || o->estimate || o->usage)
            return pl_errorf(PL_EINVAL,
                             "%s: unit, estimate_member, estimate and usage "
                             "are for a budget in units: set budget",
                             fn);
        if (o->limit == 0)
            return pl_errorf(PL_EINVAL, "%s: limit is 0: give 1 call or more",
                             fn);
        return PL_OK;
    }
    if (o->limit)
        return pl_errorf(PL_EINVAL,
                         "%s: give limit (calls) or budget (units), not both",
                         fn);
    if (o->budget > PL_RATE_MAX_UNITS)
        return pl_errorf(PL_EINVAL, "%s: budget %llu is more than 2^53", fn,
                         (unsigned long long)o->budget);
    if (!o->unit)
        o->unit = "tokens";
    if (!unit_ok(o->unit))
        return pl_errorf(PL_EINVAL,
                         "%s: unit '%.40s' is not a name: 1 to %d of a-z, 0-9 "
                         "and _",
                         fn, o->unit, PL_MAX_RATE_UNIT);
    if (!o->estimate_member)
        o->estimate_member = "max_tokens";
    if (!*o->estimate_member || strlen(o->estimate_member) > 128)
        return pl_errorf(PL_EINVAL,
                         "%s: estimate_member is 1 to 128 bytes: a member of "
                         "the payload",
                         fn);
    return PL_OK;
}

typedef struct take_ctx {
    pl_engine *e;
    const pl_rate_limit_options *o;
    const pl_action *action; /* the call: its estimate */
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

/* A whole number of units, 0..2^53 (a JSON number's double). */
static bool whole(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 &&
           v->valuedouble <= MAX_UNITS &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
}

/* The call's estimate into *est, or -1 with why in @p why. */
static int estimate_of(int64_t *est, const take_ctx *t, char *why, size_t cap)
{
    const pl_rate_limit_options *o = t->o;
    *est = -1;
    if (o->estimate) {
        int64_t v = -1;
        int st = o->estimate(&v, t->action, o->estimate_user);
        if (st)
            return st;
        if (v < 0 || (uint64_t)v > PL_RATE_MAX_UNITS)
            snprintf(why, cap,
                     "rate_limit: the estimate of '%s' is %lld %s: not 0 to "
                     "2^53",
                     o->resource, (long long)v, o->unit);
        else
            *est = v;
        return PL_OK;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(t->action->payload,
                                                      o->estimate_member);
    if (!m)
        snprintf(why, cap,
                 "rate_limit: the call's payload has no \"%s\" to estimate "
                 "its %s by (give it, or set estimate_member or estimate)",
                 o->estimate_member, o->unit);
    else if (!whole(m))
        snprintf(why, cap,
                 "rate_limit: the call's \"%s\" is not a whole number of %s "
                 "from 0 to 2^53",
                 o->estimate_member, o->unit);
    else
        *est = (int64_t)m->valuedouble;
    return PL_OK;
}

/* The side effect of a budget in units: a take of the call's estimate. */
static int take_units(cJSON **out, void *user)
{
    take_ctx *t = user;
    const pl_rate_limit_options *o = t->o;
    char why[PL_MAX_FLOW_KEY + 300];
    int64_t est;
    int st = estimate_of(&est, t, why, sizeof why);
    if (st)
        return st;
    if (est >= 0 && (uint64_t)est > o->budget)
        snprintf(why, sizeof why,
                 "rate_limit: the call's estimate of %lld %s is more than the "
                 "whole budget of '%s' (%llu %s per %lld ms): it could never "
                 "be admitted",
                 (long long)est, o->unit, o->resource,
                 (unsigned long long)o->budget, o->unit,
                 (long long)o->window_ms);
    if (est < 0 || (uint64_t)est > o->budget)
        return pl_json_pack(out, "{s:s, s:s, s:b, s:s}", "resource",
                            o->resource, "unit", o->unit, "admitted", 0,
                            "refused", why);
    pl_rate_grant g = PL_RATE_GRANT_INIT;
    if ((st = pl_rate_take_units(&g, t->e, o->resource, o->unit, o->budget,
                                 o->window_ms, (uint64_t)est)))
        return st;
    if ((st = pl_json_pack(out, "{s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I}",
                           "resource", o->resource, "unit", o->unit, "admitted",
                           g.admitted, "at_ms", g.at_ms, "window_ms",
                           o->window_ms, "budget", (int64_t)o->budget,
                           "estimate", est, "window_start_ms",
                           g.window_start_ms, "used", (int64_t)g.used)))
        return st;
    if (g.admitted)
        return PL_OK;
    int64_t delay = g.retry_at_ms > g.at_ms ? g.retry_at_ms - g.at_ms : 0;
    if (!cJSON_AddNumberToObject(*out, "delay_ms", (double)delay) ||
        !cJSON_AddNumberToObject(*out, "until_ms",
                                 (double)(pl__ext_now_ms() + delay)))
        return pl_errorf(PL_ENOMEM, "out of memory");
    return PL_OK;
}

/* What a call used, by options' usage or its steps' "tokens": *act, or -1
 * with why the estimate stands in @p note. */
static int usage_of(int64_t *act, const pl_steps *res,
                    const pl_rate_limit_options *o, char *note, size_t cap)
{
    *act = -1;
    if (o->usage) {
        int64_t v = -1;
        int st = o->usage(&v, res, o->usage_user);
        if (st)
            return st;
        if (v == -1)
            snprintf(note, cap,
                     "the result reports no %s: the estimate "
                     "stands",
                     o->unit);
        else if (v < 0 || (uint64_t)v > PL_RATE_MAX_UNITS)
            snprintf(note, cap,
                     "the result's use of %lld %s is not 0 to 2^53: the "
                     "estimate stands",
                     (long long)v, o->unit);
        else
            *act = v;
        return PL_OK;
    }
    double sum = 0;
    bool found = false;
    for (size_t i = 0; i < pl_steps_count(res); i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(pl_steps_at(res, i)), "tokens");
        if (!t)
            continue;
        if (!whole(t)) {
            snprintf(note, cap,
                     "the result's \"tokens\" is not a whole number from 0 "
                     "to 2^53: the estimate stands");
            return PL_OK;
        }
        found = true;
        sum += t->valuedouble; /* exact: each and the sum below 2^53 */
        if (sum > MAX_UNITS) {
            snprintf(note, cap,
                     "the result's \"tokens\" add up past 2^53: the estimate "
                     "stands");
            return PL_OK;
        }
    }
    if (!found)
        snprintf(note, cap,
                 "the result reports no tokens: the estimate "
                 "stands");
    else
        *act = (int64_t)sum;
    return PL_OK;
}

typedef struct settle_ctx {
    pl_engine *e;
    const pl_rate_limit_options *o;
    int64_t start, est, act, charged;
    const char *note;
    bool executed; /* the side effect ran: not served from the ledger */
} settle_ctx;

/* The side effect after the call: an extra charge made, then recorded. */
static int settle(cJSON **out, void *user)
{
    settle_ctx *c = user;
    const pl_rate_limit_options *o = c->o;
    c->executed = true;
    pl_rate_grant g = PL_RATE_GRANT_INIT;
    int st = c->charged > c->est
                 ? pl_rate_settle_units(&g, c->e, o->resource, o->unit,
                                        o->budget, o->window_ms, c->start,
                                        (uint64_t)c->est, (uint64_t)c->charged)
                 : PL_OK;
    if (!st)
        st = pl_json_pack(out, "{s:s, s:s, s:I, s:I, s:I}", "resource",
                          o->resource, "unit", o->unit, "window_start_ms",
                          c->start, "estimate", c->est, "charged", c->charged);
    if (st)
        return st;
    if (!(c->act >= 0 ? cJSON_AddNumberToObject(*out, "actual", (double)c->act)
                      : cJSON_AddNullToObject(*out, "actual")) ||
        (c->note && !cJSON_AddStringToObject(*out, "note", c->note)))
        return pl_errorf(PL_ENOMEM, "out of memory");
    return PL_OK;
}

/* After the inner chain returned @p res: charge the call what it used. */
static int charge_actual(pl_ctx *ctx, const pl_rate_limit_options *o,
                         int64_t start, int64_t est, const pl_steps *res)
{
    char note[200];
    settle_ctx c = {pl_ctx_engine(ctx), o, start, est, -1, est, NULL, false};
    int st = usage_of(&c.act, res, o, note, sizeof note);
    if (st)
        return st;
    if (c.act >= 0)
        c.charged = c.act;
    else
        c.note = note;
    cJSON *got = NULL;
    if ((st = pl_ctx_side_effect(&got, ctx, "rate_limit_usage", settle, &c)))
        return st;
    cJSON_Delete(got);
    if (!c.executed || c.charged >= c.est)
        return PL_OK;
    /* a refund, once recorded: a crash before it leaves the charge */
    pl_rate_grant g = PL_RATE_GRANT_INIT;
    return pl_rate_settle_units(&g, c.e, o->resource, o->unit, o->budget,
                                o->window_ms, start, (uint64_t)est,
                                (uint64_t)c.charged);
}

static int add_refused(pl_ctx *ctx, pl_steps *out, const char *why)
{
    cJSON *err = NULL;
    int st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code",
                          PL_ERR_INVALID_INPUT, "message", why);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "rate_limit", err);
    cJSON_Delete(err);
    return st;
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
    take_ctx t = {pl_ctx_engine(ctx), &o, action};
    int64_t est = 0, start = 0;
    for (;;) {
        cJSON *got = NULL;
        if ((st = pl_ctx_side_effect(&got, ctx, "rate_limit",
                                     o.budget ? take_units : take, &t)))
            return st;
        const cJSON *adm = cJSON_GetObjectItemCaseSensitive(got, "admitted");
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(got, "refused");
        double until = number(got, "until_ms");
        double e = number(got, "estimate"), w = number(got, "window_start_ms");
        bool units_ok = !o.budget || cJSON_IsString(why) || (e >= 0 && w >= 0);
        if (!cJSON_IsBool(adm) || !units_ok ||
            (!cJSON_IsTrue(adm) && until < 0 && !cJSON_IsString(why))) {
            cJSON_Delete(got);
            return pl_errorf(PL_ECORRUPT,
                             "rate_limit: the recorded take at %s is "
                             "malformed",
                             pl_ctx_path(ctx));
        }
        if (o.budget && cJSON_IsString(why)) {
            st = add_refused(ctx, out, why->valuestring);
            cJSON_Delete(got);
            return st;
        }
        est = (int64_t)e;
        start = (int64_t)w;
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
    if (!o.budget)
        return pl_next_call(next, ctx, action, out);
    /* the steps of this pass alone: a caller's list may hold others */
    pl_steps *res = NULL;
    if ((st = pl_steps_new(&res)))
        return st;
    st = pl_next_call(next, ctx, action, res);
    if (!st)
        st = charge_actual(ctx, &o, start, est, res);
    int mv = pl_steps_move(out, res);
    pl_steps_free(res);
    return st ? st : mv;
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
