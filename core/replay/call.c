/*
 * call.c -- calling a sub-policy: pl_ctx_call, pl_ctx_invoke and
 * pl_ctx_call_step(_with).
 *
 * A call appends its `action_call` (compared or written, like any step; its
 * payload is pl__call_payload_encode()'s, ledger/codec/record.c).  The step after it then
 * decides how the call resolves:
 *
 *   after the action_call       the call
 *   an action_result            is served: nothing executes (callee.c)
 *   the engine's suspend        was in doubt: act on the decision (indoubt.c)
 *   nothing (the record ends)   is executed (callee.c); but in check mode
 *                               it is PL_ECHECK, a policy not registered
 *                               gets a NotFound error result, and a call
 *                               in flight at a crash whose policy is not
 *                               idempotent gets its in-doubt rule
 *   anything else               non-determinism
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "call.h"
#include "callee.h"
#include "ctx.h"
#include "indoubt.h"
#include "invocation.h"
#include "run.h"
#include "wait.h"

/*
 * The record ends after the action_call at @p call_seq (or it was just
 * written): what becomes of the call.  PL_OK with *fate set, or the run's
 * failure (check mode: it would execute).
 */
int pl__call_fate(pl_ctx *c, uint32_t call_seq, bool call_replayed,
                  const pl_action *a, const pl_policy_def *def, pl__fate *fate)
{
    pl__run *r = c->run;
    *fate = PL__FATE_EXECUTE;
    if (call_replayed && r->check)
        return pl__run_fail(r, PL_ECHECK,
                            "check: run %s: the call at "
                            "%s:%u to '%s' has no recorded "
                            "result; replay would execute it",
                            r->id, c->path, call_seq, a->policy);
    if (call_replayed && def && !def->idempotent && r->crashed_before) {
        if (def->in_doubt == PL_IN_DOUBT_FAIL)
            *fate = PL__FATE_IN_DOUBT_FAIL;
        else if (def->in_doubt == PL_IN_DOUBT_SUSPEND)
            *fate = PL__FATE_IN_DOUBT_ASK;
    }
    if (!def)
        *fate = PL__FATE_NOT_FOUND;
    return PL_OK;
}

/* End the call at @p call_seq as @p fate says (anything but execute). */
int pl__call_settle(pl_ctx *c, uint32_t call_seq, pl__fate fate,
                    const pl_action *a, const pl_policy_def *def,
                    const pl_decorator *decos, size_t n_decos, uint64_t t0,
                    pl_step **out)
{
    assert(fate != PL__FATE_EXECUTE);
    if (fate == PL__FATE_IN_DOUBT_ASK)
        return pl__in_doubt(c, call_seq, a, def, decos, n_decos, t0, out);
    char msg[1024];
    if (fate == PL__FATE_IN_DOUBT_FAIL) {
        snprintf(msg, sizeof msg,
                 "call %s:%u to '%s' was in flight "
                 "when run %s crashed; its effect is "
                 "unknown",
                 c->path, call_seq, a->policy, c->run->id);
        return pl__callee_finish_error(c, call_seq, a->policy, PL_ERR_IN_DOUBT,
                                       msg, t0, out);
    }
    snprintf(msg, sizeof msg, "no policy named '%s' is registered", a->policy);
    return pl__callee_finish_error(c, call_seq, a->policy, PL_ERR_NOT_FOUND,
                                   msg, t0, out);
}

/*
 * After the action_call at @p call_seq: serve its recorded result, handle an
 * in-doubt call, or execute it.
 */
static int resolve_call(pl_ctx *c, uint32_t call_seq, bool call_replayed,
                        const pl_action *a, const pl_policy_def *def,
                        const pl_decorator *decos, size_t n_decos,
                        pl_step **out)
{
    uint64_t t0 = pl__ev_clock(c->run);
    if (call_replayed) {
        const pl__rec *rec;
        int st = pl__inv_peek(c, &rec);
        if (st)
            return st;
        if (rec && rec->type == PL_STEP_ACTION_RESULT)
            return pl__callee_serve(c, rec, call_seq, a->policy, t0, out);
        if (rec && pl__is_engine_suspend(rec))
            return pl__in_doubt(c, call_seq, a, def, decos, n_decos, t0, out);
        if (rec)
            return pl__inv_nondet_result(c, rec, a->policy, call_seq);
        /* the record ends after the call: it was in flight at the stop */
    }
    pl__fate fate;
    int st = pl__call_fate(c, call_seq, call_replayed, a, def, &fate);
    if (st)
        return st;
    if (fate != PL__FATE_EXECUTE)
        return pl__call_settle(c, call_seq, fate, a, def, decos, n_decos, t0,
                               out);
    return pl__callee_execute(c, call_seq, call_replayed, a, def, decos,
                              n_decos, t0, out);
}

int pl__call_check_action(pl__run *r, pl_ctx *c, const pl_action *in,
                          pl_action *a)
{
    if (!in)
        return pl__run_fail(r, PL_EINVAL,
                            "run %s: policy '%s' at %s made a call with no "
                            "action: no valid policy name",
                            r->id, c->def->name, c->path);
    if (pl__struct_in(a, in, &pl__action_layout, "pl_ctx_call"))
        return pl__run_fail(r, PL_EINVAL, "run %s: policy '%s' at %s: %s",
                            r->id, c->def->name, c->path, pl_errmsg());
    if (!pl__name_ok(a->policy))
        return pl__run_fail(r, PL_EINVAL,
                            "run %s: policy '%s' at %s made a "
                            "call with no valid policy name",
                            r->id, c->def->name, c->path);
    if (!a->payload)
        return pl__run_fail(r, PL_EINVAL,
                            "run %s: call to '%s' at %s: the "
                            "payload is NULL (an empty payload "
                            "is {}: pl_json_empty())",
                            r->id, a->policy, c->path);
    if (a->n_actions && !a->actions)
        return pl__run_fail(r, PL_EINVAL,
                            "run %s: call to '%s' at %s: "
                            "n_actions without actions",
                            r->id, a->policy, c->path);
    for (size_t i = 0; i < a->n_actions; i++)
        if (!pl__name_ok(a->actions[i]))
            return pl__run_fail(r, PL_EINVAL,
                                "run %s: call to '%s' at %s: "
                                "bad name in actions",
                                r->id, a->policy, c->path);
    return PL_OK;
}

/* A call's decorator list: each made with PL_DECORATOR_INIT and a function. */
int pl__call_check_decos(pl__run *r, pl_ctx *c, const char *policy,
                         const pl_decorator **decos, size_t n_decos,
                         void **owned)
{
    *owned = NULL;
    if (n_decos && !*decos)
        return pl__run_fail(r, PL_EINVAL,
                            "run %s: call to '%s' at %s: "
                            "n_decorators without decorators",
                            r->id, policy, c->path);
    const void *current;
    int st = pl__struct_array_in(&current, owned, *decos, n_decos,
                                 &pl__decorator_layout, "decorators");
    if (st)
        return pl__run_fail(r, st, "run %s: call to '%s' at %s: %s", r->id,
                            policy, c->path, pl_errmsg());
    *decos = current;
    for (size_t i = 0; i < n_decos; i++)
        if (!(*decos)[i].fn) {
            free(*owned);
            *owned = NULL;
            return pl__run_fail(r, PL_EINVAL,
                                "run %s: call to '%s' at %s: "
                                "decorator %zu has no function",
                                r->id, policy, c->path, i);
        }
    return PL_OK;
}

/*
 * A call records a digest of its seed steps, so that a call served from the
 * ledger (whose callee does not run, so its seed is not compared) still
 * notices a changed seed.
 */
static int seed_digest(pl__run *r, const pl_steps *seed, char hex[])
{
    uint8_t d[PL_HASH_LEN];
    int st = pl__hash_init(r->hasher);
    for (size_t i = 0; !st && i < seed->n; i++) {
        const pl_step *s = seed->v[i];
        uint8_t type = (uint8_t)s->type;
        if (!(st = pl__hash_update(r->hasher, &type, 1)) &&
            !(st = pl__hash_update(r->hasher, s->actor, strlen(s->actor) + 1)))
            st = pl__hash_update(r->hasher, s->mp, s->mp_len);
    }
    if (!st)
        st = pl__hash_final(r->hasher, d);
    if (st)
        return pl__run_fail(r, st, "%s", pl_errmsg());
    pl__hex(hex, d, sizeof d);
    return PL_OK;
}

/*
 * Append the action_call of @p a (to @p def, NULL when not registered):
 * compared with the recorded one, or written.  *call_seq is its place,
 * *replayed whether it was recorded.
 */
int pl__call_append(pl_ctx *c, const pl_action *a, const pl_policy_def *def,
                    uint32_t *call_seq, bool *replayed)
{
    pl__run *r = c->run;
    int st;
    char seed_hex[2 * PL_HASH_LEN + 1];
    if (a->seed && a->seed->n && (st = seed_digest(r, a->seed, seed_hex)))
        return st;
    const char *seed = a->seed && a->seed->n ? seed_hex : NULL;
    const char *code = def ? def->code_version : NULL;
    *call_seq = c->next_seq;
    *replayed = false;
    /* a call found recorded needs no encoding; anything else is appended,
     * which compares it the thorough way or writes it */
    const pl__rec *rec;
    if ((st = pl__inv_peek(c, &rec)))
        return st;
    if (rec && rec->type == PL_STEP_ACTION_CALL &&
        pl__rec_actor_is(rec, c->def->name) &&
        pl__call_payload_same(rec->payload, rec->payload_len, a->policy,
                              a->payload, a->actions, a->n_actions, seed,
                              r->e->max_payload)) {
        *replayed = true;
        pl__inv_matched(c, c->def->name, code);
        return PL_OK;
    }
    pl__buf_reset(&r->scratch);
    st = pl__call_payload_encode(&r->scratch, a->policy, a->payload, a->actions,
                                 a->n_actions, seed, r->e->max_payload);
    if (st)
        return pl__run_fail(r, st, "run %s: call to '%s' at %s: %s", r->id,
                            a->policy, c->path, pl_errmsg());
    return pl__inv_append(c, PL_STEP_ACTION_CALL, c->def->name, r->scratch.data,
                          r->scratch.len, code, NULL, replayed, NULL);
}

int pl__call_may_start(pl__run *r)
{
    if (r->stop)
        return r->stop;
    if (r->worker && pl__worker_stopping(r->e)) /* worker.c */
        return pl__run_fail(r, PL_EBUSY,
                            "run %s: the worker is stopping: the run goes "
                            "back to the queue after its last call",
                            r->id);
    return PL_OK;
}

/*
 * The rule every call function keeps (the header's overview): a result that
 * is error-as-data is PL_ERESULT, handed out all the same, with a message
 * that names the call; the run goes on.
 */
int pl__call_status(const pl_ctx *c, uint32_t call_seq, const char *policy,
                    const pl_step *res)
{
    if (!pl_step_is_error(res))
        return PL_OK;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                      "message");
    const char *code = pl_step_error_code(res);
    return pl__err(PL_ERESULT, "run %s: call to '%s' at %s:%u returned %s: %s",
                   c->run->id, policy ? policy : "?", c->path, call_seq,
                   code ? code : "an error",
                   cJSON_IsString(m) ? m->valuestring : "(no message)");
}

/* The callee saw the run's cancellation and handed it on in @p res: the
 * run is cancelled (with the callee's reason, if it had none yet). */
static int callee_cancelled(pl__run *r, const pl_step *res)
{
    if (!r->cancelled) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                          "message");
        free(r->cancel_reason);
        r->cancel_reason = pl__strdup(cJSON_IsString(m) ? m->valuestring : "");
        r->cancelled = true;
    }
    return pl__err(PL_ECANCELLED, "run %s is cancelled: %s", r->id,
                   r->cancel_reason ? r->cancel_reason : "");
}

int pl_ctx_call(pl_step **out, pl_ctx *c, const pl_action *in,
                const pl_decorator *decos, size_t n_decos)
{
    if (out)
        *out = NULL;
    int st = pl__ctx_check(c, "pl_ctx_call");
    if (st)
        return st;
    pl__run *r = c->run;
    if ((st = pl__call_may_start(r)) || (st = pl__wait_boundary(c)))
        return st;
    pl_action act;
    if ((st = pl__call_check_action(r, c, in, &act)))
        return st;
    void *owned;
    if ((st = pl__call_check_decos(r, c, act.policy, &decos, n_decos, &owned)))
        return st;
    const pl_policy_def *def = pl_registry_find(r->e->reg, act.policy);
    uint32_t call_seq;
    bool replayed;
    if (!(st = pl__call_append(c, &act, def, &call_seq, &replayed))) {
        assert(call_seq + 1 == c->next_seq); /* the cursor is past the call */
        pl_step *res = NULL;
        st = resolve_call(c, call_seq, replayed, &act, def, decos, n_decos,
                          &res);
        const char *code = !st && res ? pl_step_error_code(res) : NULL;
        if (code && strcmp(code, PL_ERR_CANCELLED) == 0)
            st = callee_cancelled(r, res);
        else if (!st)
            st = pl__call_status(c, call_seq, act.policy, res);
        if (out)
            *out = res;
        else
            pl_step_free(res);
    }
    free(owned);
    return st;
}

int pl_ctx_invoke(cJSON **out, pl_ctx *c, const char *policy,
                  const cJSON *payload)
{
    if (out)
        *out = NULL;
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = payload;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, c, &a, NULL, 0);
    if (st && st != PL_ERESULT) {
        pl_step_free(res); /* e.g. a callee's cancellation result */
        return st;
    }
    const cJSON *p = pl_step_payload(res);
    cJSON *copy = p ? cJSON_Duplicate(p, true) : NULL;
    if (!copy)
        st = pl__err(PL_ENOMEM, "out of memory copying the result of '%s'",
                     policy);
    pl_step_free(res);
    if (out)
        *out = copy;
    else
        cJSON_Delete(copy);
    return st;
}

/*
 * The decorators wrap the callee exactly as pl_ctx_call()'s do: they are
 * passed to the same resolve_call(), so a served result skips them, an
 * executed call runs them in the callee's invocation (whose ledger records
 * what they emit), and an in-doubt call re-run under its rule runs them
 * again.  A call refused before that (malformed, not allowed, not found)
 * never reaches them.
 */
static int call_step_with(const char *api, pl_step **out, pl_ctx *c,
                          const pl_step *call, const pl_action *allowed,
                          const pl_decorator *decos, size_t n_decos)
{
    int st = pl__ctx_check(c, api);
    if (st)
        return st;
    if (!out || !call || !allowed)
        return pl__err(PL_EINVAL, "%s: NULL argument", api);
    pl_action allow;
    if (pl__struct_in(&allow, allowed, &pl__action_layout, api))
        return PL_EINVAL;
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    const char *id = pl_step_id(call);
    size_t plen = strlen(c->path);
    if (call->type != PL_STEP_ACTION_CALL || !call->in_ledger ||
        strncmp(id, c->path, plen) != 0 || id[plen] != ':' ||
        call->seq >= c->next_seq)
        return pl__err(PL_EINVAL,
                       "%s: step '%s' is not an "
                       "action_call recorded in the ledger of %s",
                       api, id, c->path);
    /* a second result would run the callee again, and the replay, which
     * serves the first, would find the record's second one unexplained */
    if (pl__callee_resolved(c, call->seq))
        return pl__err(PL_EINVAL,
                       "%s: the call '%s' has its result already: a "
                       "call is resolved once",
                       api, id);
    uint64_t t0 = pl__ev_clock(r);
    const uint8_t *v, *pv;
    size_t vn, pn;
    const char *name = NULL;
    size_t name_len = 0;
    char policy[PL_MAX_NAME + 1] = "";
    if (pl__map_find(call->mp, call->mp_len, "policy", &v, &vn) &&
        pl__mp_str(v, vn, &name, &name_len) && name_len > 0 &&
        name_len <= PL_MAX_NAME) {
        memcpy(policy, name, name_len);
        policy[name_len] = '\0';
    }
    bool has_payload = pl__map_find(call->mp, call->mp_len, "payload", &pv,
                                    &pn) &&
                       ((pv[0] >= 0x80 && pv[0] <= 0x8f) || pv[0] == 0xde ||
                        pv[0] == 0xdf);
    const char *callee = pl__name_ok(policy) ? policy : "unknown";
    void *owned;
    if ((st = pl__call_check_decos(r, c, callee, &decos, n_decos, &owned)))
        return st;
    bool ok = false;
    for (size_t i = 0; i < allow.n_actions && !ok; i++)
        ok = strcmp(allow.actions[i], policy) == 0;
    cJSON *payload = NULL;
    if (!pl__name_ok(policy) || !has_payload)
        st = pl__callee_finish_error(c, call->seq, callee, PL_ERR_INVALID_INPUT,
                                     "malformed action_call: it needs "
                                     "{\"policy\": name, \"payload\": "
                                     "{...}}",
                                     t0, out);
    else if (!ok) {
        char msg[PL_MAX_NAME + 80];
        snprintf(msg, sizeof msg,
                 "'%s' is not among the actions this policy "
                 "may invoke",
                 policy);
        st = pl__callee_finish_error(c, call->seq, policy, PL_ERR_NOT_ALLOWED,
                                     msg, t0, out);
    } else if ((st = pl__payload_decode(&payload, pv, pn)))
        st = pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
    else {
        pl_action a = PL_ACTION_INIT;
        a.policy = policy;
        a.payload = payload;
        const pl_policy_def *def = pl_registry_find(r->e->reg, policy);
        st = resolve_call(c, call->seq, call->replayed, &a, def, decos, n_decos,
                          out);
    }
    cJSON_Delete(payload);
    free(owned);
    return st;
}

static int call_step(const char *api, pl_step **out, pl_ctx *c,
                     const pl_step *call, const pl_action *allowed,
                     const pl_decorator *decos, size_t n_decos)
{
    if (out)
        *out = NULL;
    int st = call_step_with(api, out, c, call, allowed, decos, n_decos);
    if (st || !pl_step_is_error(*out))
        return st;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(pl_step_payload(call),
                                                         "policy");
    return pl__call_status(c, call->seq,
                           cJSON_IsString(name) ? name->valuestring : NULL,
                           *out);
}

int pl_ctx_call_step(pl_step **out, pl_ctx *c, const pl_step *call,
                     const pl_action *allowed)
{
    return call_step("pl_ctx_call_step", out, c, call, allowed, NULL, 0);
}

int pl_ctx_call_step_with(pl_step **out, pl_ctx *c, const pl_step *call,
                          const pl_action *allowed, const pl_decorator *decos,
                          size_t n_decos)
{
    return call_step("pl_ctx_call_step_with", out, c, call, allowed, decos,
                     n_decos);
}
