/*
 * callee.c -- the callee's side of a call: serve its recorded result, or
 * execute it in an invocation of its own.  Either way the call ends with
 * its `action_result` appended to the caller's ledger and committed (a sync
 * point, commit.c), and the caller gets a copy.
 *
 * An executed call's action_result links the hash of its callee's last
 * step, so a run's ledgers form one tree of hashes (docs/design.md §8.7).
 * While the callee's last step is still pending in the batch the result
 * joins, its payload is stored once: folded into the action_result, or
 * the last step made a mirror of it (store_result_once(), ledger/codec/record.c).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "callee.h"
#include "commit.h"
#include "diverge.h"
#include "invocation.h"
#include "run.h"

/* A result step for the caller: a copy of what the ledger now holds, or
 * the bytes of @p from (the step whose payload it is) when it shares
 * them. */
static int make_result(pl_ctx *c, uint32_t seq, int64_t time_us,
                       const char *actor, const uint8_t *mp, size_t mp_len,
                       const pl_step *from, pl_step **out)
{
    if (!out)
        return PL_OK;
    pl_step *s = from ? pl__step_like(PL_STEP_ACTION_RESULT, actor, from)
                      : pl__step_new(PL_STEP_ACTION_RESULT, actor,
                                     strlen(actor), mp, mp_len);
    if (!s || pl__step_place(s, c->path, seq, time_us)) {
        pl_step_free(s);
        return pl__run_fail(c->run, PL_ENOMEM, "out of memory");
    }
    *out = s;
    return PL_OK;
}

/* Note that the call at @p call_seq has its result (pl__callee_resolved()). */
static int mark_resolved(pl_ctx *c, uint32_t call_seq)
{
    size_t at = call_seq / 8;
    if (at >= c->resolved_cap) {
        size_t cap = c->resolved_cap ? c->resolved_cap : 16;
        while (cap <= at)
            cap *= 2;
        uint8_t *p = realloc(c->resolved, cap);
        if (!p)
            return pl__run_fail(c->run, PL_ENOMEM, "out of memory");
        memset(p + c->resolved_cap, 0, cap - c->resolved_cap);
        c->resolved = p;
        c->resolved_cap = cap;
    }
    c->resolved[at] |= (uint8_t)(1u << (call_seq % 8));
    return PL_OK;
}

bool pl__callee_resolved(const pl_ctx *c, uint32_t call_seq)
{
    size_t at = call_seq / 8;
    return at < c->resolved_cap &&
           (c->resolved[at] & (1u << (call_seq % 8))) != 0;
}

/*
 * Append the call's `action_result`, make it durable, report it, and hand a
 * copy to the caller (of @p from's bytes, when not NULL: the step whose
 * payload @p mp is).
 */
static int finish(pl_ctx *c, uint32_t call_seq, const char *callee,
                  const uint8_t *mp, size_t mp_len, const pl_step *from,
                  const pl__link *link, uint64_t t0, pl_step **out)
{
    pl__run *r = c->run;
    uint32_t seq = c->next_seq;
    bool replayed;
    int64_t time_us;
    assert(call_seq < seq); /* the action_call is in the ledger already */
    int st = pl__inv_append(c, PL_STEP_ACTION_RESULT, callee, mp, mp_len, NULL,
                            link, &replayed, &time_us);
    if (!st)
        st = mark_resolved(c, call_seq);
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
        /* a model's usage (policyledger_llm.h): one lookup for a result
         * without it */
        uint64_t tin = 0, tout = 0;
        if (pl__map_find(mp, mp_len, "tokens_in", &v, &vn) &&
            pl__mp_uint(v, vn, &tin) &&
            !(pl__map_find(mp, mp_len, "tokens_out", &v, &vn) &&
              pl__mp_uint(v, vn, &tout)))
            tin = 0; /* both or neither */
        pl__emit_call_end(r,
                          err ? PL_EVENT_CALL_FAILED : PL_EVENT_CALL_COMPLETED,
                          c->path, call_seq, callee, pl__ev_clock(r) - t0,
                          err ? codebuf : NULL, tin, tout);
    }
    return make_result(c, seq, time_us, callee, mp, mp_len, from, out);
}

int pl__callee_finish(pl_ctx *c, uint32_t call_seq, const char *callee,
                      const uint8_t *mp, size_t mp_len, const pl__link *link,
                      uint64_t t0, pl_step **out)
{
    return finish(c, call_seq, callee, mp, mp_len, NULL, link, t0, out);
}

int pl__callee_finish_step(pl_ctx *c, uint32_t call_seq, const char *callee,
                           const pl_step *last, const pl__link *link,
                           uint64_t t0, pl_step **out)
{
    if (!last)
        return finish(c, call_seq, callee, (const uint8_t *)"\x80", 1, NULL,
                      link, t0, out);
    return finish(c, call_seq, callee, last->mp, last->mp_len, last, link, t0,
                  out);
}

int pl__callee_finish_error(pl_ctx *c, uint32_t call_seq, const char *callee,
                            const char *code, const char *message, uint64_t t0,
                            pl_step **out)
{
    pl__buf b = {0};
    int st = pl__error_payload(&b, code, message);
    if (st)
        st = pl__run_fail(c->run, st, "%s", pl_errmsg());
    else
        st = pl__callee_finish(c, call_seq, callee, b.data, b.len, NULL, t0,
                               out);
    pl__buf_free(&b);
    return st;
}

/*
 * The callee's last step is the result its caller is about to record.  When
 * that step is still in the batch the caller's action_result will join,
 * store its payload once, in the action_result (see ledger/codec/record.c): fold a
 * callee whose ledger is that one step, by the callee, into the
 * action_result (*link says so), or make a longer ledger's last step a
 * mirror.  A mirror of a one-byte result ({}) is not worth it.  A mirror
 * is read from the step after the call (ledger/codec/record.c), so none is made
 * when the result will not be that step (@p adjacent false):
 * pl_ctx_call_step() answers calls recorded earlier, with other calls of
 * the same turn between a call and its result.
 */
static void store_result_once(pl_ctx *child, const pl_step *last,
                              pl__link *link, bool adjacent)
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
    if (last->mp_len <= 1 || !adjacent)
        return;
    size_t header_len = (size_t)(rec.payload - val);
    pl__rec_make_mirror(&l->data, e->voff, header_len);
    e->vlen = header_len + 1; /* still pending: pl__inv_head() hashes it */
}

/*
 * Run the callee in a new invocation of run @p r, whose running invocation
 * must be @p c: c's own run, or a fan-out's branch (fanout.c), whose
 * callee runs on a thread of its own with its own batch while @p c's run
 * waits.  On success *res holds the steps it returned (caller frees them
 * with free_steps()) and *link its ledger's link; the result is not yet
 * appended.
 */
int pl__callee_run(pl__run *r, pl_ctx *c, uint32_t call_seq, bool call_replayed,
                   const pl_action *a, const pl_policy_def *def,
                   const pl_decorator *decos, size_t n_decos, uint64_t t0,
                   bool adjacent, pl_steps *res, pl__link *link)
{
    int st;
    if (!def->idempotent && (st = pl__run_commit_state(r)))
        return st; /* its action_call is durable before it runs */
    pl_ctx *child = NULL;
    if ((st = pl__inv_open(r, c, call_seq, call_replayed, def, &child)))
        return st;
    pl__emit(r, PL_EVENT_CALL_STARTED, c->path, call_seq, def->name,
             PL_STEP_ACTION_CALL, 0, 0, NULL);
    if ((st = pl__inv_append_seed(child, a->seed))) {
        r->cur = c; /* the caller is running again */
        return st;
    }
    *res = (pl_steps){.default_actor = def->name};
    pl_next next = {decos, n_decos, 0};
    pl__err_clear();
    st = pl_next_call(&next, child, a, res);
    if (!st && r->stop)
        st = r->stop;
    if (st == PL_ECANCELLED && r->cancelled && !r->stop) {
        /* the callee handed the run's cancellation on: its result says so,
         * and its caller's call returns PL_ECANCELLED (call.c) */
        pl__callee_free_steps(res);
        *res = (pl_steps){.default_actor = def->name};
        st = pl_steps_add_error(res, PL_ERR_CANCELLED,
                                r->cancel_reason ? r->cancel_reason : "");
        if (st)
            st = pl__run_fail(r, st, "out of memory");
    }
    if (!st)
        st = pl__inv_finish(child);
    /* every call the child made gave the child back its turn, unless the
     * run stopped on the way */
    assert(r->cur == child || r->stop);
    r->cur = c; /* the child's context is stale from here on */
    pl_steps_clear(&child->view); /* nothing reads it again: free it now */
    if (st && !r->stop && !pl__status_failure(st)) {
        st = pl__run_fail(r, PL_EPOLICY,
                          "run %s: a decorator around '%s' at %s returned "
                          "%d, which is no pl_status",
                          r->id, def->name, child->path, st);
    } else if (st && !r->stop) {
        bool said = pl__errmsg_set();
        st = pl__run_fail(r, st,
                          "run %s: a decorator around '%s' at %s "
                          "returned %s%s%s",
                          r->id, def->name, child->path, pl_status_name(st),
                          said ? ": " : "", said ? pl_errmsg() : "");
    }
    if (st) {
        if (st != PL_ESUSPENDED)
            pl__emit(r, PL_EVENT_CALL_FAILED, c->path, call_seq, def->name,
                     PL_STEP_ACTION_CALL, st, pl__ev_clock(r) - t0, r->reason);
        pl__callee_free_steps(res);
        return st;
    }
    r->executed++;
    const pl_step *last = res->n ? res->v[res->n - 1] : NULL;
    *link = (pl__link){call_seq, {0}, 0};
    if (last)
        store_result_once(child, last, link, adjacent);
    st = link->folded ? PL_OK : pl__inv_head(child, link->head);
    if (st)
        pl__callee_free_steps(res);
    return st;
}

void pl__callee_free_steps(pl_steps *res)
{
    for (size_t i = 0; i < res->n; i++)
        pl_step_free(res->v[i]);
    free(res->v);
    *res = (pl_steps){0};
}

/* Run the callee in a new invocation and append its result. */
int pl__callee_execute(pl_ctx *c, uint32_t call_seq, bool call_replayed,
                       const pl_action *a, const pl_policy_def *def,
                       const pl_decorator *decos, size_t n_decos, uint64_t t0,
                       pl_step **out)
{
    pl_steps res;
    pl__link link;
    int st = pl__callee_run(c->run, c, call_seq, call_replayed, a, def, decos,
                            n_decos, t0, c->next_seq == call_seq + 1, &res,
                            &link);
    if (st)
        return st;
    st = pl__callee_finish_step(c, call_seq, def->name,
                                res.n ? res.v[res.n - 1] : NULL, &link, t0,
                                out);
    pl__callee_free_steps(&res);
    return st;
}

/* The recorded action_result at the cursor answers the call: serve it. */
int pl__callee_serve(pl_ctx *c, const pl__rec *rec, uint32_t call_seq,
                     const char *callee, uint64_t t0, pl_step **out)
{
    pl__run *r = c->run;
    uint32_t seq = c->next_seq;
    int st;
    assert(c->peeked && rec == &c->rec); /* the result at the cursor */
    if (!pl__rec_actor_is(rec, callee)) {
        pl__diverged(c, rec, PL_STEP_ACTION_RESULT, callee, NULL, 0, NULL);
        return pl__run_fail(r, PL_ENONDET,
                            "non-determinism in run %s: the "
                            "result at %s:%u is from '%.*s', "
                            "the call was to '%s'",
                            r->id, c->path, seq, (int)rec->actor_len,
                            rec->actor, callee);
    }
    if (out && (st = pl__step_from_rec(rec, c->path, out)))
        return pl__run_fail(r, st, "run %s: the result at %s:%u: %s", r->id,
                            c->path, seq, pl_errmsg());
    if ((st = pl__inv_consume_checked(c)) ||
        (st = mark_resolved(c, call_seq))) {
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
