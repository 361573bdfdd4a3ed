/*
 * commit.c -- making a run's pending steps durable, with its state record.
 *
 * SYNC POINTS.  The pending batch is committed, as one transaction, before a
 * result reaches code that could act on it: when a call returns its
 * `action_result`, after a side effect's value is recorded (not a
 * capture's: pl_ctx_capture()), before a non-idempotent callee runs (its
 * `action_call` must be durable first), and when the run ends.  An
 * idempotent call therefore costs one commit holding its `action_call`,
 * the callee's steps and its `action_result`.  That is safe because
 * nothing in the batch has been seen outside the process: if the process
 * dies first, the whole call is simply executed again, which is what being
 * idempotent permits.
 *
 * A commit first hashes the steps whose hash is still pending (an
 * invocation's head may be an entry of the batch it empties), then writes
 * the batch, and the run's state record when the heartbeat is due, before a
 * call that is not idempotent runs, or when the execution ends.  A run in
 * check mode never gets here: it only compares.
 *
 * ANCHORS.  Each state record written holds the heads of the ledgers open
 * at that moment (runrec.c, OPEN LEDGERS): while the run goes, the running
 * invocation and its callers; when it suspends or parks at a wait, the
 * suspended (or waiting) one and its callers.  So the newest steps of a
 * suspended or waiting run, and of a run that dies inside a call that is
 * not idempotent, are hashed by a checked record;
 * those a crash leaves after the last state record (at most one heartbeat
 * of steps) are anchored by nothing until the run continues.  A completed
 * run's head covers every ledger, and a failed run records none.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "commit.h"
#include "invocation.h"
#include "run.h"

/* Hash the steps still pending in the batch, before it is emptied; a
 * batch already dropped (a failed run) leaves nothing to hash. */
static int settle_hashes(pl__run *r)
{
    for (size_t d = 0; d < PL__ARRAY_LEN(r->inv); d++) {
        pl_ctx *c = r->inv[d];
        if (!c || !c->hash_pending) /* a fan-out branch starts deeper */
            continue;
        if (c->pending_at >= r->batch.steps.n) {
            c->hash_pending = false;
            continue;
        }
        uint8_t h[PL_HASH_LEN];
        int st = pl__inv_head(c, h);
        if (st)
            return st;
    }
    return PL_OK;
}

/* The heads of the open ledgers (ANCHORS above) into the run's state. */
static int set_anchors(pl__run *r, bool final)
{
    pl__run_state *st = &r->state;
    pl_ctx *chain[PL__ANCHORS_MAX];
    size_t n = 0;
    st->n_open = 0; /* every entry is recomputed: the ledgers open now */
    if (!final) {
        for (pl_ctx *c = r->cur; c && n < PL__ARRAY_LEN(chain); c = c->parent)
            chain[n++] = c;
    } else if (st->status == PL_RUN_SUSPENDED || st->status == PL_RUN_WAITING) {
        /* unwound: the invocations of the suspended (or parked) path are
         * still those at its depths, as nothing opened after the run
         * stopped */
        unsigned depth = 0;
        for (const char *p = r->susp_path; *p; p++)
            depth += *p == '.';
        for (unsigned d = 0; depth < PL__ARRAY_LEN(r->inv) && d <= depth; d++)
            chain[n++] = r->inv[depth - d];
    }
    free(st->open); /* a decoded state's array holds only its own */
    st->open = NULL;
    if (n && !(st->open = calloc(n, sizeof *st->open)))
        return pl__err(PL_ENOMEM, "out of memory");
    while (n-- > 0) { /* root first */
        pl_ctx *c = chain[n];
        if (!c || c->replaying || c->next_seq == 0)
            continue; /* nothing of its own durable, or not yet known */
        pl__anchor *a = &st->open[st->n_open];
        int rc = pl__inv_head(c, a->hash);
        if (rc)
            return rc;
        memcpy(a->comps, c->comps, c->depth * sizeof *c->comps);
        a->depth = c->depth;
        a->seq = c->next_seq - 1;
        st->n_open++;
    }
    return PL_OK;
}

/*
 * Store large strings once (ledger/codec/share.c): a step with a string a
 * step of this execution stored whole is written as a shared value that
 * refers to it, appended to the batch's data in place of the record.  The
 * steps' hashes are already those of their records.
 */
static int share_steps(pl__run *r)
{
    pl__kvs *l = &r->batch.steps;
    pl__buf v = {0};
    int st = PL_OK;
    for (size_t i = 0; !st && i < l->n; i++) {
        if (l->e[i].vlen < PL__SHARE_MIN)
            continue;
        if (!r->share && !(r->share = calloc(1, sizeof *r->share)))
            return pl__err(PL_ENOMEM, "out of memory");
        bool shared = false;
        pl__buf_reset(&v);
        st = pl__share_pack(&v, &shared, r->share, pl__kvs_key(l, i),
                            l->e[i].klen, pl__kvs_val(l, i), l->e[i].vlen);
        if (st || !shared)
            continue;
        size_t at = l->data.len;
        if (!(st = pl__buf_append(&l->data, v.data, v.len))) {
            l->e[i].voff = at;
            l->e[i].vlen = v.len;
        }
    }
    pl__buf_free(&v);
    return st;
}

int pl__run_lease_lost(pl__run *r, int rc)
{
    atomic_store(&r->lease_lost, true);
    if (r->owner)
        atomic_store(&r->owner->lease_lost, true);
    if (!r->lease_told && !r->branch) {
        r->lease_told = true;
        pl__emit(r, PL_EVENT_LEASE_LOST, "0", 0, NULL, 0, rc, 0, pl_errmsg());
    }
    return rc;
}

static int write_batch(pl__run *r, bool final, bool with_state, bool keep)
{
    assert(!r->check); /* check mode compares; it has nothing to write */
    int rc = settle_hashes(r);
    if (!rc)
        rc = share_steps(r);
    if (rc)
        return rc;
    if (atomic_load(&r->lease_lost) ||
        (r->owner && atomic_load(&r->owner->lease_lost)))
        return pl__run_lease_lost(
            r, pl__err(PL_EBUSY,
                       "run %s: this worker's lease was taken over by "
                       "another worker (this process stalled longer than "
                       "the lease); nothing more is written",
                       r->id));
    uint64_t t0 = pl__ev_clock(r);
    pl__run_state *st = &r->state;
    uint64_t n = r->batch.steps.n + r->folded;
    int64_t now = pl__now_us();
    st->steps += n;
    r->batch.run = r->num;
    r->batch.release = final; /* the execution ends: drop its lease */
    pl__buf_reset(&r->batch.state);
    /* the state record is the heartbeat: rewrite it at most once a second,
     * not with every commit (it would cost a B-tree page per fsync), and
     * always at the end; a fan-out branch leaves it to its run's thread */
    if (!r->branch && (final || with_state ||
                       now - r->state_written_us >= PL__HEARTBEAT_US)) {
        st->updated_us = st->heartbeat_us = now;
        rc = set_anchors(r, final);
        if (!rc)
            rc = pl__run_state_encode(&r->batch.state, r->id, st);
    }
    if (!rc) /* the first commit of a run a delivery claims carries it */
        rc = r->ride ? pl__run_ride(r) : pl__commit(r->e, &r->batch);
    r->batch.inbox_del = 0; /* consumed with this commit, or never */
    /* the fence held no more (a delivery's commit that could not take
     * the run is not a lease lost: it held none) */
    if (rc == PL_EBUSY && r->batch.gen && !r->ride)
        rc = pl__run_lease_lost(r, rc);
    if (rc) {
        st->steps -= n;
        if (r->share) /* what it remembers of this batch is not stored */
            memset(r->share, 0, sizeof *r->share);
        return rc;
    }
    if (r->batch.state.len)
        r->state_written_us = now;
    /* a large step's bytes are not kept for the next batch (but for the
     * caller that reads them back first: pl__run_commit_keep()) */
    if (keep)
        pl__kvs_reset(&r->batch.steps);
    else
        pl__kvs_trim(&r->batch.steps, PL__SHARE_MIN);
    r->folded = 0;
    pl__emit(r, PL_EVENT_COMMIT, NULL, (uint32_t)n, NULL, 0, 0,
             pl__ev_clock(r) - t0, NULL);
    return PL_OK;
}

int pl__run_write(pl__run *r, bool final)
{
    return write_batch(r, final, false, false);
}

static int commit(pl__run *r, bool with_state, bool keep)
{
    if (!r->batch.steps.n && !r->folded)
        return PL_OK;
    int rc = write_batch(r, false, with_state, keep);
    return rc ? pl__run_fail(r, rc, "run %s: commit failed: %s", r->id,
                             pl_errmsg())
              : PL_OK;
}

int pl__run_commit(pl__run *r) { return commit(r, false, false); }

int pl__run_commit_state(pl__run *r) { return commit(r, true, false); }

int pl__run_commit_keep(pl__run *r) { return commit(r, false, true); }

void pl__run_batch_trim(pl__run *r)
{
    pl__kvs_trim(&r->batch.steps, PL__SHARE_MIN);
}

int pl__run_head(pl__run *r, uint8_t out[PL_HASH_LEN])
{
    return r->inv[0] ? pl__inv_head(r->inv[0], out)
                     : pl__err(PL_EINVAL, "the run has no root invocation");
}
