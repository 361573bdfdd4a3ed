/*
 * deliver.c -- an event or a cancellation for a run, from any process:
 * pl_run_signal() and pl_run_cancel() (wait.c reads what they deliver).
 *
 * DELIVERIES.  pl_run_signal() and pl_run_cancel() put a record in the
 * run's inbox and make its timer due now, in one transaction that refuses
 * an ended run (store.h, INBOXES); pl_run_signal() continuing a waiting run
 * in its thread takes the run's lease, claims it and writes the run's next
 * commit in that transaction too (run.h, RIDES): the replay sees the
 * record in the inbox before it is stored.  A wait consumes the first
 * event of its name in delivery order: its `event` step and the record's
 * removal are one commit, the run's next one.  No sync of its own is
 * needed: until that commit the record stays in the inbox, where a replay
 * after a crash finds it first again, and nothing outside the run sees the
 * consumption before it (a call that is not idempotent commits its
 * `action_call`, with it, before it runs).  A cancellation stays in the
 * inbox; its `cancel` step, written the same way by the run's next commit,
 * is what the run goes by.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "claim.h"
#include "commit.h"
#include "ctx.h"
#include "export.h"
#include "retention.h"
#include "run.h"
#include "wait.h"

/* ---- delivering ---------------------------------------------------------------- */

typedef struct deliver_ctx {
    const char *id;
    const char *what;
    pl_run_status status;         /* found */
    char succ[PL_MAX_RUN_ID + 1]; /* continued as new: its successor */
    const char *from; /* passed on from this link, its predecessor (not so
                       * for a copy imported under another id) */
} deliver_ctx;

static int deliver_check(const uint8_t *state, size_t len, void *user)
{
    deliver_ctx *d = user;
    pl__run_state st;
    int rc = pl__run_state_decode(&st, d->id, state, len);
    if (rc)
        return rc;
    d->status = st.status;
    if (d->from && (!st.pred || strcmp(st.pred, d->from))) /* a copy's */
        rc = pl__err(PL_ESTATE,
                     "run '%s' continued as new, but its successor '%s' goes "
                     "on from '%s' (a copy of that run?): %s is refused",
                     d->from, d->id, st.pred ? st.pred : "no run", d->what);
    else if (st.status == PL_RUN_SUPERSEDED)
        rc = pl__err(PL_ESTATE,
                     "run '%s' was superseded by run '%s': %s is refused "
                     "(send it to that run)",
                     d->id, st.succ, d->what);
    if (!rc && st.status == PL_RUN_CONTINUED && st.succ)
        snprintf(d->succ, sizeof d->succ, "%s", st.succ);
    pl__run_state_clear(&st);
    if (rc)
        return rc;
    if (d->status == PL_RUN_CONTINUED)
        return pl__err(PL_ESTATE, "run '%s' continued as new as '%s'", d->id,
                       d->succ);
    if (pl__status_final(d->status)) /* completed, failed, cancelled */
        return pl__err(PL_ESTATE, "run '%s' has ended (%s): %s is refused",
                       d->id, pl_run_status_name(d->status), d->what);
    return PL_OK;
}

/*
 * Link @p to of a chain, which @p from continued as, is not found: when
 * its tombstone says it ended (completed, failed, cancelled, superseded),
 * the chain has ended, PL_ESTATE as before its delete; else PL_ENOTFOUND,
 * its message kept.
 */
static int link_gone(pl_engine *e, const char *from, const char *to,
                     const char *what)
{
    char was[PL__ERRMSG_MAX];
    snprintf(was, sizeof was, "%s", pl_errmsg());
    pl__tomb t;
    int st = pl__tomb_load(e, to, &t);
    if (st)
        return st == PL_ENOTFOUND ? pl__err(PL_ENOTFOUND, "%s", was) : st;
    char del[40];
    pl__export_time_iso(del, sizeof del, t.deleted_us);
    return pl__err(PL_ESTATE,
                   "run '%s' continued as new as '%s', which has ended (%s) "
                   "and was deleted on %s: %s is refused",
                   from, to, pl_run_status_name(t.status), del, what);
}

/*
 * Deliver @p ib to run @p id (its number in *num when nonzero, as the
 * caller read it), or, when it has continued as new
 * (pl_ctx_continue_as_new()), to the link of its chain that goes on: the
 * id it went to in @p to (PL_MAX_RUN_ID + 1 bytes).
 */
static int deliver(pl_engine *e, const char *id, const pl__inbox_rec *ib,
                   const char *what, pl__inbox_take *take, uint64_t *num,
                   pl_run_status *found, char *to)
{
    int st;
    bool known = *num != 0;
    char from[PL_MAX_RUN_ID + 1] = ""; /* the link it was passed on from */
    snprintf(to, PL_MAX_RUN_ID + 1, "%s", id);
    for (unsigned hops = 0;; hops++) {
        pl__buf rec = {0};
        deliver_ctx d = {to, what, 0, "", from[0] ? from : NULL};
        st = known ? PL_OK : pl__store_run_find(e->store, to, num, NULL);
        /* deleted after it continued as new: on to its successor */
        if (st == PL_ENOTFOUND && hops < 1000000 &&
            (st = pl__chain_next_deleted(e, to, d.succ)) == PL_OK)
            st = PL_ESTATE;
        else if (st == PL_ENOTFOUND && from[0]) /* the chain's end, deleted */
            st = link_gone(e, from, to, what);
        if (!st) /* bound to the run it goes to */
            st = pl__inbox_encode(&rec, to, ib);
        uint64_t seq;
        if (!st)
            st = pl__store_inbox_put(e->store, *num, to, deliver_check, &d,
                                     rec.data, rec.len, take, &seq);
        pl__buf_free(&rec);
        *found = d.status;
        if (known && st == PL_ECORRUPT) {
            /* no state: the run read was deleted since; found again */
            known = false;
            pl__err_clear();
            continue;
        }
        known = false;
        if (st != PL_ESTATE || !d.succ[0] || hops >= 1000000)
            return st;
        pl__err_clear();
        memcpy(from, to, sizeof from);
        snprintf(to, PL_MAX_RUN_ID + 1, "%s", d.succ);
        take = NULL; /* the lease and the claim were for the run found first */
    }
}

/* An event's delivery, for pl__run_continue_delivered(). */
typedef struct signal_ctx {
    const char *id, *what;
    const pl__inbox_rec *ib;
    pl_run_status found;
    bool delivered;
    const pl__delivery *dv; /* its delivery: the run's number read */
} signal_ctx;

static int signal_fn(pl_engine *e, pl__inbox_take *take, void *user)
{
    signal_ctx *s = user;
    uint64_t num = take ? s->dv->num : 0;
    char to[PL_MAX_RUN_ID + 1];
    int st = deliver(e, s->id, s->ib, s->what, take, &num, &s->found, to);
    s->delivered = !st;
    return st;
}

int pl_run_signal(pl_outcome **out, pl_engine *e, const char *run_id,
                  const char *name, const cJSON *payload)
{
    if (out)
        *out = NULL;
    if (!e || !pl__run_id_ok(run_id) || !pl__name_ok(name) || !payload)
        return pl__err(PL_EINVAL, "pl_run_signal: an engine, a valid run id, "
                                  "a valid event name and a payload are "
                                  "required");
    if (!cJSON_IsObject(payload))
        return pl__err(PL_EJSON, "pl_run_signal: the payload must be a JSON "
                                 "object");
    pl__buf p = {0};
    int st = pl__payload_encode(&p, payload, e->max_payload);
    if (st) {
        pl__buf_free(&p);
        return st;
    }
    pl__inbox_rec ib = {.name = (char *)name,
                        .payload = p.data,
                        .payload_len = p.len,
                        .sent_us = pl__now_us()};
    uint64_t num;
    pl_run_status found;
    char what[PL_MAX_NAME + 32];
    snprintf(what, sizeof what, "the event '%s'", name);
    if (out) {
        /* a waiting run goes on here, the delivery riding its next commit
         * (run.h, RIDES) */
        pl__delivery dv = {signal_fn, NULL, &ib, false, 0};
        signal_ctx sc = {run_id, what, &ib, 0, false, &dv};
        dv.user = &sc;
        st = pl__run_continue_delivered(out, e, run_id, &dv);
        if (sc.delivered) {
            pl__buf_free(&p);
            if (st == PL_EBUSY && !*out) {
                /* the delivery alone: continued as its wake would, refused
                 * if another process has it or its key is full */
                pl__err_clear();
                st = pl__run_continue_woken(out, e, run_id);
                /* delivered; newer code, or another process, goes on */
                if (st == PL_EBUSY || st == PL_ESTATE || st == PL_ENEWERCODE) {
                    pl_outcome_free(*out);
                    *out = NULL;
                    pl__err_clear();
                    return PL_OK;
                }
            }
            return st;
        }
        /* not tried, or nothing was written: deliver alone */
        pl_outcome_free(*out);
        *out = NULL;
        pl__err_clear();
    }
    char to[PL_MAX_RUN_ID + 1]; /* run_id, or the link its chain is at */
    st = deliver(e, run_id, &ib, what, NULL, &num, &found, to);
    pl__buf_free(&p);
    if (st || !out || found != PL_RUN_WAITING)
        return st;
    /* continue it here, as its wake would; else (another was quicker, its
     * key is full, its policy is not here) delivered, left to its timer */
    st = pl__run_continue_woken(out, e, to);
    if (st == PL_EBUSY || st == PL_ENEWERCODE || st == PL_ENOTFOUND) {
        pl__err_clear();
        return PL_OK;
    }
    return st;
}

/* A suspended or queued run ends cancelled at once (cancel_now_fn). */
typedef struct cancel_now_ctx {
    const char *id, *reason;
    bool done;
} cancel_now_ctx;

static int cancel_now_fn(pl__buf *state, pl__kvs *extra, void *user)
{
    (void)extra;
    cancel_now_ctx *c = user;
    pl__run_state st;
    int rc = pl__run_state_decode(&st, c->id, state->data, state->len);
    if (rc)
        return rc;
    if (st.status == PL_RUN_SUSPENDED || st.status == PL_RUN_SUBMITTED) {
        st.status = PL_RUN_CANCELLED;
        st.error = PL_ECANCELLED;
        free(st.reason);
        st.reason = pl__strdup(c->reason);
        st.token[0] = '\0';
        free(st.susp_path); /* no longer waits for an answer */
        st.susp_path = NULL;
        free(st.prompt);
        st.prompt = NULL;
        st.prompt_len = 0;
        st.updated_us = pl__now_us();
        pl__buf_reset(state);
        rc = st.reason ? pl__run_state_encode(state, c->id, &st)
                       : pl__err(PL_ENOMEM, "out of memory");
        c->done = !rc;
    }
    pl__run_state_clear(&st);
    return rc;
}

int pl_run_cancel(pl_engine *e, const char *run_id, const char *reason)
{
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_cancel: an engine and a valid run "
                                  "id are required");
    if (!reason)
        reason = "";
    if (strlen(reason) > 4096)
        return pl__err(PL_EINVAL, "pl_run_cancel: the reason is longer than "
                                  "4096 bytes");
    pl__inbox_rec ib = {.reason = (char *)reason, .sent_us = pl__now_us()};
    /* a waiting run whose policies are here ends here, the delivery riding
     * its next commit (run.h, RIDES): with no compensating call, its
     * cancellation, its end, its timer's removal and its lease are one
     * transaction */
    pl__delivery dv = {signal_fn, NULL, &ib, false, 0};
    signal_ctx sc = {run_id, "a cancellation", &ib, 0, false, &dv};
    dv.user = &sc;
    pl_outcome *o = NULL;
    int st = pl__run_continue_delivered(&o, e, run_id, &dv);
    pl_outcome_free(o);
    o = NULL;
    if (sc.delivered && st == PL_EBUSY) {
        /* the delivery alone: the store would not let it take the run (it
         * changed, or another process is quicker): continued as a delivery
         * alone would be, refused again if another process has it */
        pl__err_clear();
        st = pl__run_continue_woken(&o, e, run_id);
        pl_outcome_free(o);
    }
    if (sc.delivered) {
        if (st && st != PL_EBUSY && st != PL_ESTATE && st != PL_ENOTFOUND)
            return st;
        pl__err_clear();
        return PL_OK;
    }
    pl__err_clear();
    uint64_t num;
    pl_run_status found;
    char to[PL_MAX_RUN_ID + 1]; /* run_id, or the link its chain is at */
    st = deliver(e, run_id, &ib, "a cancellation", NULL, &num, &found, to);
    if (st)
        return st;
    if (found == PL_RUN_SUSPENDED || found == PL_RUN_SUBMITTED) {
        /* nothing of its policies runs until then: it ends now */
        cancel_now_ctx cc = {to, reason, false};
        return pl__store_state_update(e->store, num, cancel_now_fn, &cc);
    }
    /* a running run sees the cancellation at its next call boundary */
    if (found == PL_RUN_WAITING) {
        /* its wait returns PL_ECANCELLED to its policy, here if this
         * engine has its policies and its concurrency key, if it has one,
         * has room; else in the worker its timer wakes */
        o = NULL;
        int cst = pl__run_continue_woken(&o, e, to);
        pl_outcome_free(o);
        if (cst && cst != PL_ENOTFOUND && cst != PL_EBUSY && cst != PL_ESTATE)
            return cst;
        pl__err_clear();
    }
    return PL_OK;
}
