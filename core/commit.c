/*
 * commit.c -- making a run's pending steps durable, with its state record.
 *
 * SYNC POINTS.  The pending batch is committed, as one transaction, before a
 * result reaches code that could act on it: when a call returns its
 * `action_result`, after a side effect's value is recorded, before a
 * non-idempotent callee runs (its `action_call` must be durable first), and
 * when the run ends.  An idempotent call therefore costs one commit holding
 * its `action_call`, the callee's steps and its `action_result`.  That is
 * safe because nothing in the batch has been seen outside the process: if
 * the process dies first, the whole call is simply executed again, which is
 * what being idempotent permits.
 *
 * A commit first hashes the steps whose hash is still pending (an
 * invocation's head may be an entry of the batch it empties), then writes
 * the batch, and the run's state record when the heartbeat is due or the
 * execution ends.  A run in check mode never gets here: it only compares.
 */
#include <assert.h>

#include "commit.h"
#include "invocation.h"
#include "run.h"

/* Hash the steps still pending in the batch, before it is emptied; a
 * batch already dropped (a failed run) leaves nothing to hash. */
static int settle_hashes(pl__run *r)
{
    for (size_t d = 0; d < PL__ARRAY_LEN(r->inv) && r->inv[d]; d++) {
        pl_ctx *c = r->inv[d];
        if (!c->hash_pending)
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

int pl__run_write(pl__run *r, bool final)
{
    assert(!r->check); /* check mode compares; it has nothing to write */
    int rc = settle_hashes(r);
    if (rc)
        return rc;
    if (atomic_load(&r->lease_lost))
        return pl__err(PL_EBUSY,
                       "run %s: this worker's lease was taken over by "
                       "another worker (this process stalled longer than "
                       "the lease); nothing more is written",
                       r->id);
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
     * always at the end */
    if (final || now - r->state_written_us >= PL__HEARTBEAT_US) {
        st->updated_us = st->heartbeat_us = now;
        rc = pl__run_state_encode(&r->batch.state, r->id, st);
    }
    if (!rc)
        rc = pl__commit(r->e, &r->batch);
    if (rc) {
        st->steps -= n;
        return rc;
    }
    if (r->batch.state.len)
        r->state_written_us = now;
    pl__kvs_reset(&r->batch.steps);
    r->folded = 0;
    pl__emit(r, PL_EVENT_COMMIT, NULL, (uint32_t)n, NULL, 0, 0,
             pl__ev_clock(r) - t0, NULL);
    return PL_OK;
}

int pl__run_commit(pl__run *r)
{
    if (!r->batch.steps.n && !r->folded)
        return PL_OK;
    int rc = pl__run_write(r, false);
    return rc ? pl__run_fail(r, rc, "run %s: commit failed: %s", r->id,
                             pl_errmsg())
              : PL_OK;
}

int pl__run_head(pl__run *r, uint8_t out[PL_HASH_LEN])
{
    return r->inv[0] ? pl__inv_head(r->inv[0], out)
                     : pl__err(PL_EINVAL, "the run has no root invocation");
}
