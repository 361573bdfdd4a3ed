/*
 * context.c -- calls, recorded helpers, suspension and the chain.
 */
#include <stdio.h>
#include <stdlib.h>

#include "commit.h"
#include "ctx.h"
#include "internal.h"
#include "invocation.h"
#include "path.h"
#include "run.h"
#include "suspend.h"

#define ENGINE_ACTOR "engine"

/* ---- calls ----------------------------------------------------------------------------- */

/* A result step for the caller: a copy of what the ledger now holds. */
static int make_result(pl_ctx *c, uint32_t seq, int64_t time_us,
                       const char *actor, const uint8_t *mp, size_t mp_len,
                       pl_step **out)
{
    if (!out)
        return PL_OK;
    pl_step *s = pl__step_new(PL_STEP_ACTION_RESULT, actor, strlen(actor), mp,
                              mp_len);
    if (!s || pl__step_place(s, c->path, seq, time_us)) {
        pl_step_free(s);
        return pl__run_fail(c->run, PL_ENOMEM, "out of memory");
    }
    *out = s;
    return PL_OK;
}

/*
 * Append the call's `action_result`, make it durable, report it, and hand a
 * copy to the caller.
 */
static int finish_call(pl_ctx *c, uint32_t call_seq, const char *callee,
                       const uint8_t *mp, size_t mp_len, const pl__link *link,
                       uint64_t t0, pl_step **out)
{
    pl__run *r = c->run;
    uint32_t seq = c->next_seq;
    bool replayed;
    int64_t time_us;
    int st = pl__inv_append(c, PL_STEP_ACTION_RESULT, callee, mp, mp_len, NULL,
                            link, &replayed, &time_us);
    if (!st)
        st = pl__run_commit(r);
    if (st)
        return st;
    if (r->e->on_event) {
        pl_step tmp = {.mp = (uint8_t *)mp, .mp_len = mp_len};
        bool err = pl_step_is_error(&tmp);
        const uint8_t *v;
        size_t vn;
        const char *code = NULL;
        size_t code_len = 0;
        if (err && pl__map_find(mp, mp_len, "code", &v, &vn))
            pl__mp_str(v, vn, &code, &code_len);
        char codebuf[64];
        snprintf(codebuf, sizeof codebuf, "%.*s", (int)code_len,
                 code ? code : "");
        pl__emit(r, err ? PL_EVENT_CALL_FAILED : PL_EVENT_CALL_COMPLETED,
                 c->path, call_seq, callee, PL_STEP_ACTION_RESULT, 0,
                 pl__ev_clock(r) - t0, err ? codebuf : NULL);
    }
    return make_result(c, seq, time_us, callee, mp, mp_len, out);
}

static int finish_error(pl_ctx *c, uint32_t call_seq, const char *callee,
                        const char *code, const char *message, uint64_t t0,
                        pl_step **out)
{
    pl__buf b = {0};
    int st = pl__error_payload(&b, code, message);
    if (st)
        st = pl__run_fail(c->run, st, "%s", pl_errmsg());
    else
        st = finish_call(c, call_seq, callee, b.data, b.len, NULL, t0, out);
    pl__buf_free(&b);
    return st;
}

/*
 * The callee's last step is the result its caller is about to record.  When
 * that step is still in the batch the caller's action_result will join,
 * store its payload once, in the action_result (see codec.c): fold a
 * callee whose ledger is that one step, by the callee, into the
 * action_result (*link says so), or make a longer ledger's last step a
 * mirror.  A mirror of a one-byte result ({}) is not worth it.
 */
static void store_result_once(pl_ctx *child, const pl_step *last,
                              pl__link *link)
{
    pl__run *r = child->run;
    pl__kvs *l = &r->batch.steps;
    if (!child->hash_pending || child->pending_at + 1 != l->n)
        return; /* the last step was recorded, committed, or hashed */
    pl__kv *e = &l->e[l->n - 1];
    uint8_t *val = l->data.data + e->voff;
    pl__rec rec;
    if (pl__rec_decode_lazy(&rec, val, e->vlen) || rec.mirrored ||
        rec.payload_len != last->mp_len ||
        memcmp(rec.payload, last->mp, last->mp_len) != 0)
        return; /* the ledger ends in another step */
    if (child->next_seq == 1 && !rec.code && !rec.has_link &&
        pl__rec_actor_is(&rec, child->def->name)) {
        link->folded = rec.type;
        l->data.len = e->koff;
        l->n--;
        child->hash_pending = false;
        r->folded++;
        return;
    }
    if (last->mp_len <= 1)
        return;
    size_t header_len = (size_t)(rec.payload - val);
    pl__rec_make_mirror(&l->data, e->voff, header_len);
    e->vlen = header_len + 1; /* still pending: pl__inv_head() hashes it */
}

/* Run the callee in a new invocation and append its result. */
static int execute(pl_ctx *c, uint32_t call_seq, bool call_replayed,
                   const pl_action *a, const pl_policy_def *def,
                   const pl_decorator *decos, size_t n_decos, uint64_t t0,
                   pl_step **out)
{
    pl__run *r = c->run;
    int st;
    if (!def->idempotent && (st = pl__run_commit(r)))
        return st; /* its action_call is durable before it runs */
    pl_ctx *child = NULL;
    if ((st = pl__inv_open(r, c, call_seq, call_replayed, def, &child)))
        return st;
    pl__emit(r, PL_EVENT_CALL_STARTED, c->path, call_seq, def->name,
             PL_STEP_ACTION_CALL, 0, 0, NULL);
    if ((st = pl__inv_append_seed(child, a->seed)))
        return st;
    pl_steps res = {.default_actor = def->name};
    pl_next next = {decos, n_decos, 0};
    pl__err_clear();
    st = pl_next_call(&next, child, a, &res);
    if (!st && r->stop)
        st = r->stop;
    if (!st)
        st = pl__inv_finish(child);
    r->cur = c; /* the child's context is stale from here on */
    if (st && !r->stop) {
        bool said = pl__errmsg_set();
        st = pl__run_fail(r, st, "run %s: a decorator around '%s' at %s "
                                 "returned %s%s%s", r->id, def->name,
                          child->path, pl_status_name(st), said ? ": " : "",
                          said ? pl_errmsg() : "");
    }
    if (st) {
        if (st != PL_ESUSPENDED)
            pl__emit(r, PL_EVENT_CALL_FAILED, c->path, call_seq, def->name,
                     PL_STEP_ACTION_CALL, st, pl__ev_clock(r) - t0, r->reason);
        for (size_t i = 0; i < res.n; i++)
            pl_step_free(res.v[i]);
        free(res.v);
        return st;
    }
    r->executed++;
    const pl_step *last = res.n ? res.v[res.n - 1] : NULL;
    pl__link link = {call_seq, {0}, 0};
    if (last)
        store_result_once(child, last, &link);
    st = link.folded ? PL_OK : pl__inv_head(child, link.head);
    if (!st)
        st = finish_call(c, call_seq, def->name,
                         last ? last->mp : (const uint8_t *)"\x80",
                         last ? last->mp_len : 1, &link, t0, out);
    for (size_t i = 0; i < res.n; i++)
        pl_step_free(res.v[i]);
    free(res.v);
    return st;
}

/* Record the engine's suspension of an in-doubt call. */
static int in_doubt_payload(pl__buf *b, pl_ctx *c, uint32_t call_seq,
                            const char *callee)
{
    char msg[1024];
    snprintf(msg, sizeof msg,
             "call %s:%u to '%s' was in flight when the run stopped; its "
             "effect is unknown. Resume with {\"decision\": \"rerun\"}, "
             "{\"decision\": \"fail\"}, or {\"decision\": \"result\", "
             "\"result\": {...}}.", c->path, call_seq, callee);
    char call_id[PL__PATH_MAX + 16];
    snprintf(call_id, sizeof call_id, "%s:%u", c->path, call_seq);
    cJSON *o = cJSON_CreateObject(), *p = cJSON_CreateObject();
    int st = PL_ENOMEM;
    if (o && p && cJSON_AddStringToObject(p, "message", msg) &&
        cJSON_AddBoolToObject(p, "in_doubt", 1) &&
        cJSON_AddStringToObject(p, "call", call_id) &&
        cJSON_AddStringToObject(p, "policy", callee) &&
        cJSON_AddItemToObject(o, "prompt", p)) {
        p = NULL;
        st = pl__payload_encode(b, o, 0);
    }
    cJSON_Delete(p);
    cJSON_Delete(o);
    return st;
}

/* The recorded action_result at the cursor answers the call: serve it. */
static int serve(pl_ctx *c, const pl__rec *rec, uint32_t call_seq,
                 const char *callee, uint64_t t0, pl_step **out)
{
    pl__run *r = c->run;
    uint32_t seq = c->next_seq;
    int st;
    if (!pl__rec_actor_is(rec, callee))
        return pl__run_fail(r, PL_ENONDET, "non-determinism in run %s: the "
                                           "result at %s:%u is from '%.*s', "
                                           "the call was to '%s'", r->id,
                            c->path, seq, (int)rec->actor_len, rec->actor,
                            callee);
    if (out && (st = pl__step_from_rec(rec, c->path, out)))
        return pl__run_fail(r, st, "run %s: the result at %s:%u: %s", r->id,
                            c->path, seq, pl_errmsg());
    if ((st = pl__inv_consume_checked(c))) {
        if (out) {
            pl_step_free(*out);
            *out = NULL;
        }
        return st;
    }
    r->served++;
    pl__emit(r, PL_EVENT_CALL_SERVED, c->path, call_seq, callee,
             PL_STEP_ACTION_RESULT, 0, pl__ev_clock(r) - t0, NULL);
    return PL_OK;
}

static bool is_engine_suspend(const pl__rec *rec)
{
    return rec->type == PL_STEP_SUSPEND && pl__rec_actor_is(rec, ENGINE_ACTOR);
}

/*
 * The call at @p call_seq is in doubt: the engine suspends the run, and the
 * suspend step (and the human's answer) follow the action_call in the
 * caller's ledger.  An answer "rerun" executes the call again; if that run
 * is cut short by another crash, the call is in doubt again and the engine
 * asks again.
 */
static int in_doubt(pl_ctx *c, uint32_t call_seq, const pl_action *a,
                    const pl_policy_def *def, const pl_decorator *decos,
                    size_t n_decos, uint64_t t0, pl_step **out)
{
    pl__run *r = c->run;
    for (;;) {
        pl__buf b = {0};
        int st = in_doubt_payload(&b, c, call_seq, a->policy);
        if (st) {
            pl__buf_free(&b);
            return pl__run_fail(r, st, "out of memory");
        }
        uint32_t seq = c->next_seq;
        bool replayed;
        st = pl__inv_append(c, PL_STEP_SUSPEND, ENGINE_ACTOR, b.data, b.len, NULL, NULL,
                            &replayed, NULL);
        if (st || !replayed) {
            if (!st) {
                const uint8_t *v;
                size_t vn;
                if (pl__map_find(b.data, b.len, "prompt", &v, &vn))
                    pl__suspend_here(c, seq, v, vn);
                st = r->stop;
            }
            pl__buf_free(&b);
            return st;
        }
        pl__buf_free(&b);
        const pl__rec *rec;
        if ((st = pl__inv_peek(c, &rec)))
            return st;
        if (!rec) {
            if (r->check)
                return pl__run_fail(r, PL_ECHECK, "check: run %s is suspended "
                                                  "at %s:%u", r->id, c->path,
                                    seq);
            pl__suspend_here(c, seq, NULL, 0); /* still waiting for an answer */
            return r->stop;
        }
        if (rec->type != PL_STEP_RESUME)
            return pl__run_fail(r, PL_ENONDET, "run %s: after the suspension "
                                               "at %s:%u the ledger records "
                                               "%s, not a resume", r->id,
                                c->path, seq, pl_step_type_name(rec->type));
        cJSON *answer = NULL;
        if ((st = pl__payload_decode_in(&answer, rec->payload,
                                        rec->payload_len,
                                        pl__step_wrapping(rec->type))))
            return pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
        if ((st = pl__inv_consume_checked(c))) {
            cJSON_Delete(answer);
            return st;
        }
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(answer, "answer");
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(ans, "decision");
        const char *d = cJSON_IsString(dec) ? dec->valuestring : "";
        if (strcmp(d, "result") == 0) {
            const cJSON *res = cJSON_GetObjectItemCaseSensitive(ans, "result");
            if (cJSON_IsObject(res)) {
                pl__buf rb = {0};
                st = pl__payload_encode(&rb, res, r->e->max_payload);
                if (!st)
                    st = finish_call(c, call_seq, a->policy, rb.data, rb.len,
                                     NULL,
                                     t0, out);
                else
                    st = pl__run_fail(r, st, "%s", pl_errmsg());
                pl__buf_free(&rb);
                cJSON_Delete(answer);
                return st;
            }
        }
        if (strcmp(d, "rerun") != 0) {
            bool fail = strcmp(d, "fail") == 0;
            cJSON_Delete(answer);
            return finish_error(c, call_seq, a->policy, PL_ERR_IN_DOUBT,
                                fail ? "the operator declared the in-doubt "
                                       "call failed"
                                     : "the answer to the in-doubt call had "
                                       "no valid decision (rerun, fail, "
                                       "result)",
                                t0, out);
        }
        cJSON_Delete(answer);
        /* rerun: what did the rerun leave behind?  (The answer was a recorded
         * step, so a record that ends here ended inside the rerun.) */
        if ((st = pl__inv_peek(c, &rec)))
            return st;
        if (rec && rec->type == PL_STEP_ACTION_RESULT)
            return serve(c, rec, call_seq, a->policy, t0, out);
        if (rec && is_engine_suspend(rec))
            continue; /* the rerun was in doubt too */
        if (rec)
            return pl__run_fail(r, PL_ENONDET, "non-determinism in run %s: "
                                               "after the rerun decision at "
                                               "%s:%u the ledger records %s",
                                r->id, c->path, seq + 1,
                                pl_step_type_name(rec->type));
        if (r->check)
            return pl__run_fail(r, PL_ECHECK, "check: run %s: the call at "
                                              "%s:%u to '%s' has no recorded "
                                              "result; replay would execute "
                                              "it", r->id, c->path, call_seq,
                                a->policy);
        if (r->crashed_before)
            continue; /* the rerun was in flight at a crash: ask again */
        return execute(c, call_seq, true, a, def, decos, n_decos, t0, out);
    }
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
    pl__run *r = c->run;
    uint64_t t0 = pl__ev_clock(r);
    if (call_replayed) {
        bool was_replaying = c->replaying;
        const pl__rec *rec;
        int st = pl__inv_peek(c, &rec);
        if (st)
            return st;
        if (rec && rec->type == PL_STEP_ACTION_RESULT)
            return serve(c, rec, call_seq, a->policy, t0, out);
        if (rec && is_engine_suspend(rec))
            return in_doubt(c, call_seq, a, def, decos, n_decos, t0, out);
        if (rec)
            return pl__run_fail(r, PL_ENONDET, "non-determinism in run %s: "
                                               "after the action_call at %s:%u"
                                               " the ledger records %s by "
                                               "'%.*s', not its result",
                                r->id, c->path, call_seq,
                                pl_step_type_name(rec->type),
                                (int)rec->actor_len, rec->actor);
        /* the record ends after the call: it was in flight at the stop */
        if (r->check)
            return pl__run_fail(r, PL_ECHECK, "check: run %s: the call at "
                                              "%s:%u to '%s' has no recorded "
                                              "result; replay would execute it",
                                r->id, c->path, call_seq, a->policy);
        if (was_replaying && def && !def->idempotent && r->crashed_before) {
            if (def->in_doubt == PL_IN_DOUBT_FAIL) {
                char msg[1024];
                snprintf(msg, sizeof msg, "call %s:%u to '%s' was in flight "
                                          "when run %s crashed; its effect is "
                                          "unknown", c->path, call_seq,
                         a->policy, r->id);
                return finish_error(c, call_seq, a->policy, PL_ERR_IN_DOUBT,
                                    msg, t0, out);
            }
            if (def->in_doubt == PL_IN_DOUBT_SUSPEND)
                return in_doubt(c, call_seq, a, def, decos, n_decos, t0, out);
        }
    }
    if (!def) {
        char msg[PL_MAX_NAME + 64];
        snprintf(msg, sizeof msg, "no policy named '%s' is registered",
                 a->policy);
        return finish_error(c, call_seq, a->policy, PL_ERR_NOT_FOUND, msg, t0,
                            out);
    }
    return execute(c, call_seq, call_replayed, a, def, decos, n_decos, t0,
                   out);
}

static int check_action(pl__run *r, pl_ctx *c, const pl_action *a)
{
    if (!a || a->version != PL_ACTION_VERSION)
        return pl__run_fail(r, PL_EINVAL, "run %s: policy '%s' at %s made a "
                                          "call with %s", r->id, c->def->name,
                            c->path, a ? "an action not made with "
                                         "PL_ACTION_INIT (wrong version)"
                                       : "no action: no valid policy name");
    if (!pl__name_ok(a->policy))
        return pl__run_fail(r, PL_EINVAL, "run %s: policy '%s' at %s made a "
                                          "call with no valid policy name",
                            r->id, c->def->name, c->path);
    if (!a->payload)
        return pl__run_fail(r, PL_EINVAL, "run %s: call to '%s' at %s: the "
                                          "payload is NULL (an empty payload "
                                          "is {}: pl_json_empty())",
                            r->id, a->policy, c->path);
    if (a->n_actions && !a->actions)
        return pl__run_fail(r, PL_EINVAL, "run %s: call to '%s' at %s: "
                                          "n_actions without actions",
                            r->id, a->policy, c->path);
    for (size_t i = 0; i < a->n_actions; i++)
        if (!pl__name_ok(a->actions[i]))
            return pl__run_fail(r, PL_EINVAL, "run %s: call to '%s' at %s: "
                                              "bad name in actions",
                                r->id, a->policy, c->path);
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

int pl_ctx_call(pl_step **out, pl_ctx *c, const pl_action *a, const pl_decorator *decos,
                size_t n_decos)
{
    if (out)
        *out = NULL;
    int st = pl__ctx_check(c, "pl_ctx_call");
    if (st)
        return st;
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    if ((st = check_action(r, c, a)))
        return st;
    if (n_decos && !decos)
        return pl__run_fail(r, PL_EINVAL, "run %s: call to '%s' at %s: "
                                          "n_decorators without decorators",
                            r->id, a->policy, c->path);
    for (size_t i = 0; i < n_decos; i++)
        if (decos[i].version != PL_DECORATOR_VERSION || !decos[i].fn)
            return pl__run_fail(r, PL_EINVAL, "run %s: call to '%s' at %s: "
                                              "decorator %zu has no function "
                                              "or is not PL_DECORATOR_INIT'd",
                                r->id, a->policy, c->path, i);
    const pl_policy_def *def = pl_registry_find(r->e->reg, a->policy);
    char seed_hex[2 * PL_HASH_LEN + 1];
    if (a->seed && a->seed->n && (st = seed_digest(r, a->seed, seed_hex)))
        return st;
    const char *seed = a->seed && a->seed->n ? seed_hex : NULL;
    const char *code = def ? def->code_version : NULL;
    uint32_t call_seq = c->next_seq;
    bool replayed = false;
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
        replayed = true;
        pl__inv_matched(c, c->def->name, code);
    } else {
        pl__buf_reset(&r->scratch);
        st = pl__call_payload_encode(&r->scratch, a->policy, a->payload,
                                     a->actions, a->n_actions, seed,
                                     r->e->max_payload);
        if (st)
            return pl__run_fail(r, st, "run %s: call to '%s' at %s: %s",
                                r->id, a->policy, c->path, pl_errmsg());
        st = pl__inv_append(c, PL_STEP_ACTION_CALL, c->def->name, r->scratch.data,
                            r->scratch.len, code, NULL, &replayed, NULL);
        if (st)
            return st;
    }
    return resolve_call(c, call_seq, replayed, a, def, decos, n_decos, out);
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
    if (st)
        return st;
    const cJSON *p = pl_step_payload(res);
    cJSON *copy = p ? cJSON_Duplicate(p, true) : NULL;
    if (!copy)
        st = pl__err(PL_ENOMEM, "out of memory copying the result of '%s'",
                     policy);
    else if (pl_step_is_error(res)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(p, "message");
        st = pl__err(PL_ERESULT, "call to '%s' at %s:%u returned %s: %s",
                     policy, c->path, pl_step_seq(res) - 1,
                     pl_step_error_code(res) ? pl_step_error_code(res)
                                             : "an error",
                     cJSON_IsString(m) ? m->valuestring : "(no message)");
    }
    pl_step_free(res);
    if (out)
        *out = copy;
    else
        cJSON_Delete(copy);
    return st;
}

int pl_ctx_call_step(pl_step **out, pl_ctx *c, const pl_step *call,
                     const pl_action *allowed)
{
    if (out)
        *out = NULL;
    int st = pl__ctx_check(c, "pl_ctx_call_step");
    if (st)
        return st;
    if (!out || !call || !allowed)
        return pl__err(PL_EINVAL, "pl_ctx_call_step: NULL argument");
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    const char *id = pl_step_id(call);
    size_t plen = strlen(c->path);
    if (call->type != PL_STEP_ACTION_CALL || !call->in_ledger ||
        strncmp(id, c->path, plen) != 0 || id[plen] != ':' ||
        call->seq >= c->next_seq)
        return pl__err(PL_EINVAL, "pl_ctx_call_step: step '%s' is not an "
                                  "action_call recorded in the ledger of %s",
                       id, c->path);
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
    if (!pl__name_ok(policy) || !has_payload)
        return finish_error(c, call->seq, callee, PL_ERR_INVALID_INPUT,
                            "malformed action_call: it needs {\"policy\": "
                            "name, \"payload\": {...}}", t0, out);
    bool ok = false;
    for (size_t i = 0; i < allowed->n_actions && !ok; i++)
        ok = strcmp(allowed->actions[i], policy) == 0;
    if (!ok) {
        char msg[PL_MAX_NAME + 80];
        snprintf(msg, sizeof msg, "'%s' is not among the actions this policy "
                                  "may invoke", policy);
        return finish_error(c, call->seq, policy, PL_ERR_NOT_ALLOWED, msg, t0,
                            out);
    }
    cJSON *payload = NULL;
    st = pl__payload_decode(&payload, pv, pn);
    if (st)
        return pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = payload;
    const pl_policy_def *def = pl_registry_find(r->e->reg, policy);
    st = resolve_call(c, call->seq, call->replayed, &a, def, NULL, 0, out);
    cJSON_Delete(payload);
    return st;
}
