/*
 * recorded.c -- values from the outside world, recorded once: the clock,
 * randomness, uuids, and a user's side effects (docs/design.md §3).
 *
 * The first execution produces the value and appends it as a `side_effect`
 * step; every replay reads the recorded value back instead of producing it
 * again.  A user's side effect is made durable before its value is
 * returned (a sync point), since it may have acted outside the process; a
 * captured value (pl_ctx_capture()), which did not, rides the next commit
 * as the clock does.
 *
 * Each is one step, {"name": name, "value": value}, by the policy:
 *
 *   name          value
 *   "now"         Unix time in milliseconds, a number
 *   "random"      64 random bits, 16 lowercase hex digits
 *   "uuid"        a random (version 4) uuid, "xxxxxxxx-xxxx-4xxx-..."
 *   a user's      what the user's function returned, any JSON value
 *                 (a side effect or a capture: the same step)
 *
 * A recorded value of the wrong shape is PL_ECORRUPT, not a new value.
 */
#include <stdio.h>
#include <stdlib.h>

#include "commit.h"
#include "ctx.h"
#include "diverge.h"
#include "invocation.h"
#include "platform.h"
#include "run.h"

typedef int (*produce_fn)(cJSON **out, void *user);

/* A side effect's step, {"name", "value"}, written into its record; where
 * its payload lies in the batch's bytes. */
typedef struct named {
    const char *name;
    const cJSON *value;
    size_t max_bytes;
    size_t at, end;
} named;

static void trim_batch(void *run) { pl__run_batch_trim(run); }

static int write_named(pl__buf *out, void *user)
{
    named *n = user;
    n->at = out->len;
    int st = pl__named_value_encode(out, n->name, n->value, n->max_bytes);
    n->end = out->len;
    return st;
}

/*
 * Record a value once: on replay return the recorded one, if @p match (when
 * given) accepts it.  @p durable makes it durable before returning (for
 * values that came from the outside world).  @p api is the function the
 * policy called, which a refusal names (@p name is the value's label).
 */
static int recorded_checked(pl_ctx *c, const char *api, const char *name,
                            produce_fn fn, void *user,
                            const pl_side_effect_match *match, bool durable,
                            cJSON **out)
{
    *out = NULL;
    int st = pl__ctx_check(c, api);
    if (st)
        return st;
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    const pl__rec *rec;
    st = pl__inv_peek(c, &rec);
    if (st)
        return st;
    if (rec) {
        const uint8_t *v, *vv;
        size_t vn, vvn;
        const char *got;
        size_t got_len;
        bool same = rec->type == PL_STEP_SIDE_EFFECT &&
                    pl__rec_actor_is(rec, c->def->name) &&
                    pl__map_find(rec->payload, rec->payload_len, "name", &v,
                                 &vn) &&
                    pl__mp_str(v, vn, &got, &got_len) &&
                    got_len == strlen(name) &&
                    memcmp(got, name, got_len) == 0 &&
                    pl__map_find(rec->payload, rec->payload_len, "value", &vv,
                                 &vvn);
        if (!same) {
            pl__diverged(c, rec, PL_STEP_SIDE_EFFECT, c->def->name, NULL, 0,
                         NULL);
            char *was = pl__payload_text(rec->payload, rec->payload_len, 200);
            st = pl__run_fail(r, PL_ENONDET,
                              "non-determinism in run %s, "
                              "invocation %s, step %u: the "
                              "ledger records %s by '%.*s' %s; "
                              "the policy now asks for the "
                              "side effect '%s'",
                              r->id, c->path, c->next_seq,
                              pl_step_type_name(rec->type), (int)rec->actor_len,
                              rec->actor, was ? was : "?", name);
            free(was);
            return st;
        }
        if ((st = pl__payload_decode(out, vv, vvn)))
            return pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
        char why[256] = "";
        if (match && !match->fn(*out, why, sizeof why, match->user)) {
            why[sizeof why - 1] = '\0';
            cJSON *now = NULL;
            char *now_text = NULL;
            if (!pl_json_pack(&now, "{s:s, s:s}", "name", name, "mismatch",
                              why))
                now_text = cJSON_PrintUnformatted(now);
            cJSON_Delete(now);
            pl__diverged_text(c, rec, PL_STEP_SIDE_EFFECT, c->def->name,
                              now_text, why);
            free(now_text);
            cJSON_Delete(*out);
            *out = NULL;
            return pl__run_fail(r, PL_ENONDET,
                                "non-determinism in run %s, invocation %s, "
                                "step %u: the recorded side effect '%s' does "
                                "not fit this call: %s",
                                r->id, c->path, c->next_seq, name, why);
        }
        if ((st = pl__inv_consume_checked(c))) {
            cJSON_Delete(*out);
            *out = NULL;
        }
        return st;
    }
    if (r->check)
        return pl__run_fail(r, PL_ECHECK,
                            "check: run %s, invocation %s: the "
                            "record ends before the side effect "
                            "'%s'",
                            r->id, c->path, name);
    cJSON *value = NULL;
    pl__err_clear();
    st = fn(&value, user);
    if (st && !pl__status_failure(st)) { /* the run records one that is */
        cJSON_Delete(value);
        return pl__run_fail(r, PL_EPOLICY,
                            "run %s: side effect '%s' at %s failed: it "
                            "returned %d, which is no pl_status",
                            r->id, name, c->path, st);
    }
    if (st || !value) {
        cJSON_Delete(value);
        const char *why = !st                ? "it produced no value"
                          : pl__errmsg_set() ? pl_errmsg()
                                             : pl_status_name(st);
        return pl__run_fail(r, st ? st : PL_EPOLICY,
                            "run %s: side effect "
                            "'%s' at %s failed: %s",
                            r->id, name, c->path, why);
    }
    named n = {name, value, r->e->max_payload, 0, 0};
    st = pl__inv_append_written(c, PL_STEP_SIDE_EFFECT, c->def->name,
                                write_named, &n);
    if (st && !r->stop)
        st = pl__run_fail(r, st, "run %s: side effect '%s': %s", r->id, name,
                          pl_errmsg());
    if (st || !durable) {
        if (st)
            cJSON_Delete(value);
        else
            *out = value;
        return st;
    }
    /* the value, durable, is what the record holds: the caller gets it
     * back from there, so that the record and the commit's copy of it
     * are never in memory beside the value made (a model's long answer
     * would be there three times) */
    cJSON_Delete(value);
    if (n.end - n.at >= PL__LARGE_FREE)
        pl__heap_release();
    if ((st = pl__run_commit_keep(r)))
        return st;
    const uint8_t *p = r->batch.steps.data.data + n.at;
    const uint8_t *v;
    size_t vn;
    if (NEVER(!pl__map_find(p, n.end - n.at, "value", &v, &vn))) {
        pl__run_batch_trim(r);
        return pl__run_fail(r, PL_ECORRUPT,
                            "run %s: the side effect '%s' recorded has no "
                            "value",
                            r->id, name);
    }
    /* the batch's bytes go as soon as they are read */
    st = pl__payload_decode_release(out, v, vn, trim_batch, r);
    return st ? pl__run_fail(r, st, "run %s: side effect '%s': %s", r->id, name,
                             pl_errmsg())
              : PL_OK;
}

static int recorded(pl_ctx *c, const char *api, const char *name, produce_fn fn,
                    void *user, bool durable, cJSON **out)
{
    return recorded_checked(c, api, name, fn, user, NULL, durable, out);
}

static int produce_now(cJSON **out, void *user)
{
    (void)user;
    *out = cJSON_CreateNumber((double)(pl__now_us() / 1000));
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

static int produce_random(cJSON **out, void *user)
{
    (void)user;
    uint8_t b[8];
    char hex[17];
    int st = pl__random(b, sizeof b);
    if (st)
        return st;
    pl__hex(hex, b, sizeof b);
    *out = cJSON_CreateString(hex);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

static int produce_uuid(cJSON **out, void *user)
{
    (void)user;
    uint8_t b[16];
    int st = pl__random(b, sizeof b);
    if (st)
        return st;
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    char hex[33], s[PL_UUID_LEN + 1];
    pl__hex(hex, b, sizeof b);
    snprintf(s, sizeof s, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12,
             hex + 16, hex + 20);
    *out = cJSON_CreateString(s);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

static int bad_record(pl_ctx *c, const char *what)
{
    return pl__run_fail(c->run, PL_ECORRUPT,
                        "run %s, invocation %s: the "
                        "recorded %s has the wrong shape",
                        c->run->id, c->path, what);
}

int pl_ctx_now(int64_t *out, pl_ctx *c)
{
    if (out)
        *out = 0;
    if (!c || !out)
        return pl__err(PL_EINVAL, "pl_ctx_now: NULL %s", !out ? "out" : "ctx");
    cJSON *v;
    int st = recorded(c, "pl_ctx_now", "now", produce_now, NULL, false, &v);
    if (st)
        return st;
    /* a stored value beyond int64's range would make the cast undefined */
    bool ok = cJSON_IsNumber(v) && v->valuedouble >= -9.2e18 &&
              v->valuedouble <= 9.2e18;
    if (ok)
        *out = (int64_t)v->valuedouble;
    cJSON_Delete(v);
    return ok ? PL_OK : bad_record(c, "time");
}

int pl_ctx_random(uint64_t *out, pl_ctx *c)
{
    if (out)
        *out = 0;
    if (!c || !out)
        return pl__err(PL_EINVAL, "pl_ctx_random: NULL %s",
                       !out ? "out" : "ctx");
    cJSON *v;
    int st = recorded(c, "pl_ctx_random", "random", produce_random, NULL, false,
                      &v);
    if (st)
        return st;
    bool ok = cJSON_IsString(v) && strlen(v->valuestring) == 16;
    uint64_t x = 0;
    for (int i = 0; ok && i < 16; i++) {
        char ch = v->valuestring[i];
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                         : -1;
        ok = d >= 0;
        x = x << 4 | (uint64_t)(d & 15);
    }
    cJSON_Delete(v);
    if (!ok)
        return bad_record(c, "random value");
    *out = x;
    return PL_OK;
}

int pl_ctx_uuid(char out[PL_UUID_LEN + 1], pl_ctx *c)
{
    if (out)
        out[0] = '\0';
    if (!c || !out)
        return pl__err(PL_EINVAL, "pl_ctx_uuid: NULL %s", !out ? "out" : "ctx");
    cJSON *v;
    int st = recorded(c, "pl_ctx_uuid", "uuid", produce_uuid, NULL, false, &v);
    if (st)
        return st;
    bool ok = cJSON_IsString(v) && strlen(v->valuestring) == PL_UUID_LEN;
    if (ok)
        memcpy(out, v->valuestring, PL_UUID_LEN + 1);
    cJSON_Delete(v);
    return ok ? PL_OK : bad_record(c, "uuid");
}

typedef struct user_effect {
    pl_side_effect_fn fn;
    void *user;
} user_effect;

static int produce_user(cJSON **out, void *user)
{
    user_effect *u = user;
    return u->fn(out, u->user);
}

int pl_ctx_side_effect(cJSON **out, pl_ctx *c, const char *name,
                       pl_side_effect_fn fn, void *user)
{
    if (out)
        *out = NULL;
    if (!c || !fn || !out || !pl__name_ok(name))
        return pl__err(PL_EINVAL, "pl_ctx_side_effect: ctx, a valid name, fn "
                                  "and out are required");
    user_effect u = {fn, user};
    return recorded(c, "pl_ctx_side_effect", name, produce_user, &u, true, out);
}

int pl_ctx_capture(cJSON **out, pl_ctx *c, const char *name,
                   pl_side_effect_fn fn, void *user)
{
    if (out)
        *out = NULL;
    if (!c || !fn || !out || !pl__name_ok(name))
        return pl__err(PL_EINVAL, "pl_ctx_capture: ctx, a valid name, fn and "
                                  "out are required");
    user_effect u = {fn, user};
    return recorded(c, "pl_ctx_capture", name, produce_user, &u, false, out);
}

int pl_ctx_side_effect_checked(cJSON **out, pl_ctx *c, const char *name,
                               pl_side_effect_fn fn,
                               const pl_side_effect_match *match, void *user)
{
    if (out)
        *out = NULL;
    pl_side_effect_match m;
    if (match && pl__struct_in(&m, match, &pl__side_effect_match_layout,
                               "pl_ctx_side_effect_checked"))
        return PL_EINVAL;
    if (!c || !fn || !out || !pl__name_ok(name) || !match || !m.fn)
        return pl__err(PL_EINVAL, "pl_ctx_side_effect_checked: ctx, a valid "
                                  "name, fn, match with its fn and out are "
                                  "required");
    user_effect u = {fn, user};
    return recorded_checked(c, "pl_ctx_side_effect_checked", name, produce_user,
                            &u, &m, true, out);
}
