/*
 * ctx.c -- the context a policy holds: whether it is the running one, its
 * view of its own ledger, and what it can tell about itself.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "invocation.h"

/*
 * Is @p c the context of the invocation running now?  A callee's context
 * used after the callee returned, a caller's used inside a callee, or one
 * of another run (a run started inside a policy, another thread's) would
 * move a cursor that is not the running one: refuse it.  (A context used
 * after its run ended is freed memory, which no check can catch.)
 */
int pl__ctx_check(const pl_ctx *c, const char *fn)
{
    if (!c)
        return pl__err(PL_EINVAL, "%s: ctx is NULL", fn);
    if (c->run->cur != c || pl__running_run() != c->run)
        return pl__err(PL_EINVAL,
                       "%s: the context of '%s' at %s in run %s "
                       "is not the running invocation's: a "
                       "context is valid only while its own "
                       "policy runs, not after it returned, nor "
                       "inside a call it makes or another run",
                       fn, c->def->name, c->path, c->run->id);
    return PL_OK;
}

/* ---- reading the ledger ---------------------------------------------------------------------- */

/*
 * A policy's view of its ledger is read once and extended as it grows: each
 * call reads only the steps appended since the last (a loop's K turns read
 * K steps in all, not K^2/2).  Steps up to next_seq are durable in the
 * store or pending in the run's batch; the view keeps what it has read.
 */
int pl_ctx_ledger(const pl_steps **out, pl_ctx *c)
{
    if (out)
        *out = NULL;
    int st = pl__ctx_check(c, "pl_ctx_ledger");
    if (st)
        return st;
    if (!out)
        return pl__err(PL_EINVAL, "pl_ctx_ledger: out is NULL");
    pl__run *r = c->run;
    pl_steps *l = &c->view;
    assert(l->n <= c->next_seq); /* the view never runs ahead */
    uint32_t seq = (uint32_t)l->n;
    if (seq == c->next_seq) {
        *out = l;
        return PL_OK;
    }
    pl__kvs recs = {0};
    st = pl__store_settle(r->e->store); /* group commits' journal */
    /* durable steps first, from the store */
    while (!st && seq < c->next_seq) {
        st = pl__store_read(r->e->store, c->prefix, c->prefix_len, seq,
                            PL__AHEAD_N, PL__AHEAD_BYTES, &recs);
        if (st || !recs.n)
            break;
        for (size_t i = 0; !st && i < recs.n && seq < c->next_seq; i++) {
            pl__rec rec;
            st = pl__rec_decode_lazy(&rec, pl__kvs_val(&recs, i),
                                     recs.e[i].vlen);
            pl_step *s = NULL;
            if (!st)
                st = pl__step_from_rec(&rec, c->path, &s);
            if (!st && (st = pl__steps_push(l, s)))
                pl_step_free(s);
            seq++;
        }
    }
    /* then the ones not yet committed, from the pending batch */
    const pl__kvs *p = &r->batch.steps;
    for (size_t i = 0; !st && i < p->n && seq < c->next_seq; i++) {
        if (p->e[i].klen != c->prefix_len + 4 ||
            memcmp(pl__kvs_key(p, i), c->prefix, c->prefix_len) != 0)
            continue;
        pl__rec rec;
        st = pl__rec_decode_lazy(&rec, pl__kvs_val(p, i), p->e[i].vlen);
        if (st || rec.seq != seq)
            continue;
        pl_step *s = NULL;
        if (!(st = pl__step_from_rec(&rec, c->path, &s)) &&
            (st = pl__steps_push(l, s)))
            pl_step_free(s);
        seq++;
    }
    pl__kvs_free(&recs);
    if (!st && seq != c->next_seq)
        st = pl__err(PL_ECORRUPT,
                     "run %s: ledger %s has %u readable steps, "
                     "expected %u",
                     r->id, c->path, seq, c->next_seq);
    if (st) {
        pl_steps_clear(l); /* read it all again next time */
        return st;
    }
    *out = l;
    return PL_OK;
}

/* ---- accessors ------------------------------------------------------------------------------ */

const char *pl_ctx_run_id(const pl_ctx *c) { return c ? c->run->id : NULL; }
const char *pl_ctx_path(const pl_ctx *c) { return c ? c->path : NULL; }
const char *pl_ctx_policy(const pl_ctx *c) { return c ? c->def->name : NULL; }
/*
 * "RUN/PATH:SEQ" (the caller's path, the call's seq), or "RUN/0" for a
 * root; made on first use, and put together without printf(), since a
 * tool call asks for it every time (an MCP call sends it).
 */
const char *pl_ctx_idempotency_key(const pl_ctx *cc)
{
    pl_ctx *c = (pl_ctx *)cc;
    if (!c)
        return NULL;
    if (c->idem[0])
        return c->idem;
    size_t rn = strlen(c->run->id),
           pn = c->parent ? strlen(c->parent->path) : 0;
    if (NEVER(rn + 1 + pn + 1 + 10 >= sizeof c->idem)) { /* ids are bounded */
        snprintf(c->idem, sizeof c->idem, "%s/%s:%u", c->run->id,
                 c->parent ? c->parent->path : "", c->call_seq);
        return c->idem;
    }
    char *at = c->idem;
    memcpy(at, c->run->id, rn);
    at += rn;
    *at++ = '/';
    if (!c->parent) {
        *at++ = '0';
    } else {
        char num[10];
        size_t k = sizeof num;
        uint32_t v = c->call_seq;
        do
            num[--k] = (char)('0' + v % 10);
        while (v /= 10);
        memcpy(at, c->parent->path, pn);
        at += pn;
        *at++ = ':';
        memcpy(at, num + k, sizeof num - k);
        at += sizeof num - k;
    }
    *at = '\0';
    return c->idem;
}
/*
 * Replaying means a recorded step remains at the cursor.  The invocation
 * learns that its record ended only when it looks past the last recorded
 * step, so look: a caller that asks right after consuming that step (a
 * retry about to wait, say) is told the truth.  A read failure stops the
 * run, which the caller's next pl_ctx_* call reports.
 */
bool pl_ctx_replaying(const pl_ctx *cc)
{
    pl_ctx *c = (pl_ctx *)cc; /* the peek only reads ahead */
    if (!c)
        return false;
    if (c->run->check)
        return true; /* a check replay writes nothing, ever */
    if (!c->replaying || c->run->cur != c || c->run->stop)
        return c->replaying;
    const pl__rec *rec;
    if (pl__inv_peek(c, &rec))
        return true;
    return rec != NULL;
}
pl_engine *pl_ctx_engine(const pl_ctx *c) { return c ? c->run->e : NULL; }

/* ---- the cooperative deadline --------------------------------------------------------------- */

int64_t pl_ctx_deadline(const pl_ctx *c) { return c ? c->deadline_ms : 0; }

int pl_ctx_set_deadline(pl_ctx *c, int64_t unix_ms)
{
    int st = pl__ctx_check(c, "pl_ctx_set_deadline");
    if (st)
        return st;
    if (unix_ms < 0)
        return pl__err(PL_EINVAL,
                       "pl_ctx_set_deadline: a deadline is Unix "
                       "milliseconds, or 0 for none; got %lld",
                       (long long)unix_ms);
    c->deadline_ms = unix_ms;
    return PL_OK;
}
