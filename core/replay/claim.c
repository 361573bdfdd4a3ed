/*
 * claim.c -- a run claimed for an execution: its state's claim (the state
 * record made `running`, owned by this process), and a worker's take of a
 * queued or crashed run with that claim in the same store transaction.
 *
 * A worker's take (pl__run_take_next()) is one store call,
 * pl__store_take(): the lease, the run's info and state read, the checks
 * pl_run_continue() makes and the claim, in one transaction (on
 * PostgreSQL two round trips and one WAL flush, where a take, a find, a
 * read and a claim of their own were five round trips and two flushes).
 * So is a wake (pl__run_take_due(): the worker's and pl_engine_wake()'s),
 * pl__store_take_due(): the due timer taken with the lease, then the same
 * (where the timer's take and a continue of the run were four round trips
 * and two flushes, LMDB's two write transactions, now one).
 * The store says too whether the run has any step and whether a
 * cancellation waits in its inbox: a run that never ran starts live,
 * reading no ledger, and its first call boundary reads no inbox.
 *
 * A delivery to a waiting run that continues it here rides the run's next
 * commit (run.h, RIDES): the run is claimed in memory first
 * (pl__run_ride_begin()), and the delivery, its lease and the claim are
 * written with that commit (pl__run_ride()).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "claim.h"
#include "commit.h"
#include "run.h"

void pl__set_owner(pl_engine *e, pl__run_state *st)
{
    st->owner_pid = e->pid;
    st->owner_start = e->pstart;
    snprintf(st->owner_host, sizeof st->owner_host, "%s", e->host);
    st->updated_us = st->heartbeat_us = pl__now_us();
}

/* The claim's checks and changes (pl__claim_fn) on the decoded state
 * @p st: refused, or @p st made `running` for this process. */
static int claim_state(pl__claim_ctx *c, pl__run_state *st, pl__kvs *extra)
{
    int rc = PL_OK;
    c->before = st->status;
    if (c->waiting && st->status != PL_RUN_WAITING) {
        rc = pl__err(PL_ESTATE, "run '%s' is %s, not waiting", c->id,
                     pl_run_status_name(st->status));
    } else if (c->resume) {
        if (st->status != PL_RUN_SUSPENDED)
            rc = pl__err(PL_ESTATE, "run '%s' is %s, not suspended", c->id,
                         pl_run_status_name(st->status));
        else if (!c->token || strcmp(c->token, st->token) != 0)
            rc = pl__err(PL_ETOKEN, "wrong resume token for run '%s'", c->id);
        for (size_t i = 0; !rc && i < c->steps->n; i++)
            rc = pl__kvs_add(extra, pl__kvs_key(c->steps, i),
                             c->steps->e[i].klen, pl__kvs_val(c->steps, i),
                             c->steps->e[i].vlen);
    } else if (st->status == PL_RUN_SUSPENDED) {
        rc = pl__err(PL_ESTATE,
                     "run '%s' is suspended at %s: resume it with "
                     "its token",
                     c->id, st->susp_path ? st->susp_path : "?");
    } else if (c->worker && st->status != PL_RUN_RUNNING &&
               st->status != PL_RUN_SUBMITTED && st->status != PL_RUN_WAITING) {
        rc = pl__err(PL_ESTATE, "run '%s' is %s: nothing to execute", c->id,
                     pl_run_status_name(st->status));
    } else if (st->status == PL_RUN_RUNNING && !c->leased &&
               pl__owner_alive(c->e, st)) {
        rc = pl__err(PL_EBUSY,
                     "run '%s' is running in process %lld on %s "
                     "(last write %.1f s ago)",
                     c->id, (long long)st->owner_pid, st->owner_host,
                     (double)(pl__now_us() - st->heartbeat_us) / 1e6);
    }
    if (rc)
        return rc;
    st->status = PL_RUN_RUNNING;
    st->attempts++;
    st->error = 0;
    st->has_head = false; /* rewritten when this execution ends */
    free(st->reason);
    st->reason = NULL;
    st->token[0] = '\0';
    free(st->susp_path);
    st->susp_path = NULL;
    free(st->prompt);
    st->prompt = NULL;
    st->prompt_len = 0;
    st->wait_until_ms = 0;
    free(st->wait_event);
    st->wait_event = NULL;
    free(st->result);
    st->result = NULL;
    st->result_len = 0;
    st->steps += c->steps ? c->steps->n : 0;
    pl__set_owner(c->e, st);
    return PL_OK;
}

int pl__claim_fn(pl__buf *state, pl__kvs *extra, void *user)
{
    pl__claim_ctx *c = user;
    if (c->expect && (c->expect->len != state->len ||
                      memcmp(c->expect->data, state->data, state->len) != 0))
        return pl__err(PL_EBUSY, "run '%s' changed since it was read", c->id);
    pl__run_state st;
    int rc = pl__run_state_decode(&st, c->id, state->data, state->len);
    if (rc)
        return pl__err(rc, "run '%s': %s", c->id, pl_errmsg());
    if (!(rc = claim_state(c, &st, extra))) {
        pl__buf_reset(state);
        rc = pl__run_state_encode(state, c->id, &st);
        pl__run_state_clear(c->out); /* a store may call this more than once */
        if (!rc)
            rc = pl__run_state_copy(c->out, &st);
    }
    pl__run_state_clear(&st);
    return rc;
}

/* One step record of a run being counted (pl__store_each_step()). */
static int count_record(const uint8_t *key, size_t klen, const uint8_t *val,
                        size_t vlen, void *user)
{
    (void)key;
    (void)klen;
    *(uint64_t *)user += pl__rec_steps(val, vlen);
    return PL_OK;
}

int pl__count_steps(pl_engine *e, uint64_t num, uint64_t *out)
{
    *out = 0;
    return pl__store_each_step(e->store, num, count_record, out);
}

/* ---- a worker's take ------------------------------------------------------- */

typedef struct take_ctx {
    pl_engine *e;
    pl__root_action ra;
    bool decoded;
    const pl_policy_def *def;
    pl__run_state state; /* as claimed */
    pl_run_status before;
    uint64_t engine_claim; /* the run claimed in this engine, or 0 */
    bool known, no_steps, inbox_cancel;
} take_ctx;

/* The run taken (pl__take_fn): the checks continue_run() makes of a run
 * leased from the queue, on its state as locked, and its claim. */
static int take_fn(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    take_ctx *x = user;
    const char *id = t->lease.id;
    int st = PL_OK;
    if (!x->decoded &&
        !(st = pl__root_decode(&x->ra, id, t->info, t->info_len)))
        x->decoded = true;
    if (st)
        return st;
    x->def = pl_registry_find(x->e->reg, x->ra.action.policy);
    if (!x->def) /* another worker may: the lease runs out here */
        return pl__err(PL_ENOTFOUND,
                       "run '%s' has root policy '%s', which is not "
                       "registered",
                       id, x->ra.action.policy);
    pl__claim_ctx cc = {
        .e = x->e, .id = id, .leased = true, .worker = true, .out = &x->state};
    pl__kvs none = {0};
    pl__buf_reset(state);
    st = pl__buf_append(state, t->state, t->state_len);
    if (!st)
        st = pl__claim_fn(state, &none, &cc);
    pl__kvs_free(&none);
    x->before = cc.before;
    /* PL_ESTATE: ended, suspended or cancelled, a stale lease */
    *drop = st == PL_ESTATE;
    if (!st && !x->engine_claim &&
        !(st = pl__engine_claim(x->e, t->lease.run, id)))
        x->engine_claim = t->lease.run;
    x->known = t->known;
    x->no_steps = t->known && t->no_steps;
    x->inbox_cancel = t->inbox_cancel;
    return st;
}

/* A take from the queue, or (@p next_due non-NULL) of a due timer's
 * run, and its execution. */
static int take_run(pl_outcome **out, pl_engine *e, pl__lease *lease,
                    bool *taken, int64_t *next_due)
{
    *out = NULL;
    take_ctx x = {.e = e};
    pl__run *r = NULL;
    int st = next_due ? pl__store_take_due(e->store, e->worker, e->lease_us,
                                           take_fn, &x, lease, taken, next_due)
                      : pl__store_take(e->store, e->worker, e->lease_us,
                                       take_fn, &x, lease, taken);
    if (st || !*taken)
        goto done;
    uint64_t num = lease->run;
    if ((st = pl__run_new(e, lease->id, &r)))
        goto done; /* claimed: the lease runs out, another worker goes on */
    r->num = num;
    r->root_code = x.ra.info.code; /* the run takes it over */
    x.ra.info.code = NULL;
    r->deadline_ms = x.ra.info.deadline_ms;
    r->state = x.state;
    memset(&x.state, 0, sizeof x.state);
    r->batch.gen = lease->gen;
    r->worker = true;
    /* the store said, with the claim, whether a cancellation waits */
    r->batch.inbox_known = x.known;
    r->batch.inbox_cancel = x.inbox_cancel;
    if ((st = pl__engine_lease(e, num, lease->gen, &r->lease_lost)))
        goto done; /* claimed: the lease runs out */
    r->state_written_us = pl__now_us();
    r->crashed_before = x.before == PL_RUN_RUNNING;
    /* a crashed run's step count is as of its last heartbeat */
    if (r->crashed_before && !x.no_steps &&
        (st = pl__count_steps(e, num, &r->state.steps)))
        goto done;
    st = pl__run_execute(r, x.def, &x.ra.action, !x.no_steps, out);
done:
    if (x.engine_claim)
        pl__engine_release(e, x.engine_claim);
    pl__run_free(r);
    pl__run_state_clear(&x.state);
    pl__root_clear(&x.ra);
    return st;
}

int pl__run_take_next(pl_outcome **out, pl_engine *e, pl__lease *lease,
                      bool *taken)
{
    return take_run(out, e, lease, taken, NULL);
}

int pl__run_take_due(pl_outcome **out, pl_engine *e, pl__lease *lease,
                     bool *taken, int64_t *next_due_us)
{
    return take_run(out, e, lease, taken, next_due_us);
}

/* pl_engine_wake(): every run due taken and executed here, as a worker's
 * wake is. */
int pl_engine_wake(pl_engine *e, int64_t *next_due_ms)
{
    if (next_due_ms)
        *next_due_ms = 0;
    if (!e)
        return pl__err(PL_EINVAL, "pl_engine_wake: engine is NULL");
    int64_t tick = 0; /* the schedules' next (schedule.c) */
    int sst = pl__schedules_wake(e, &tick);
    if (sst)
        return sst;
    for (;;) {
        /* the timer, the lease, the run's records and its claim in one
         * transaction (claim.c), then its execution here */
        pl__lease lease;
        int64_t next = 0;
        bool taken = false;
        pl_outcome *o = NULL;
        int st = pl__run_take_due(&o, e, &lease, &taken, &next);
        pl_outcome_free(o);
        if (!taken && (st == PL_ENOTFOUND || st == PL_EBUSY)) {
            /* none due; or one whose state another transaction held a
             * moment (next: soon) */
            next = next ? (next + 999) / 1000 : 0;
            if (next_due_ms)
                *next_due_ms = tick && (!next || tick < next) ? tick : next;
            pl__err_clear();
            return PL_OK;
        }
        if (!taken)
            return st;
        if (st == PL_ENOTFOUND || st == PL_ESTATE || st == PL_EBUSY)
            continue; /* not executable here, ended, or taken over */
        if (st == PL_ESTORE || st == PL_ENOMEM || st == PL_EMAPFULL ||
            st == PL_ENOSPC || st == PL_EACCES || st == PL_EIO)
            return st;
    }
}

/* Claim run @p r, whose state as read is @p sb (decoded in r->state), in
 * memory only, for the delivery @p dv to ride its next commit (run.h,
 * RIDES), into @p ride. */
int pl__run_ride_begin(pl__run *r, pl__delivery *dv, const pl__buf *sb,
                       pl__ride *ride)
{
    pl__claim_ctx cc = {
        .e = r->e, .id = r->id, .leased = true, .waiting = true};
    ride->dv = dv;
    int st = pl__buf_append(&ride->expect, sb->data, sb->len);
    if (!st) /* no extra records: not a resume */
        st = claim_state(&cc, &r->state, NULL);
    if (st)
        return st;
    r->ride = ride;
    r->state_written_us = 0; /* the claimed state goes with the commit */
    return PL_OK;
}

int pl__run_ride(pl__run *r)
{
    pl__ride *ride = r->ride;
    pl_engine *e = r->e;
    r->ride = NULL; /* one try */
    pl__run_state claimed = {0};
    pl__claim_ctx cc = {.e = e,
                        .id = r->id,
                        .leased = true,
                        .waiting = true,
                        .expect = &ride->expect,
                        .out = &claimed};
    /* a successor's creation is a commit's own (PostgreSQL): the delivery
     * takes the run, then that commit follows */
    bool alone = r->batch.succ_id != NULL;
    pl__inbox_take take = {e->worker,
                           e->lease_us,
                           pl__claim_fn,
                           &cc,
                           false,
                           0,
                           alone ? NULL : &r->batch,
                           ride->seq,
                           &ride->expect,
                           true};
    ride->dv->tried = true;
    ride->dv->num = r->num;
    /* what the replay knew of the inbox held until this commit: the store
     * may say again (PostgreSQL) */
    r->batch.inbox_known = false;
    int st = ride->dv->fn(e, &take, ride->dv->user);
    pl__run_state_clear(&claimed);
    if (!st && take.taken) {
        r->batch.gen = take.gen;
        st = pl__engine_lease(e, r->num, take.gen, &r->lease_lost);
        return st || !alone ? st : pl__commit(e, &r->batch);
    }
    /* nothing of this execution was written: it stops, writing nothing */
    atomic_store(&r->lease_lost, true);
    return st ? st
              : pl__err(PL_EBUSY,
                        "run %s changed before the delivery could take it "
                        "(it goes on elsewhere)",
                        r->id);
}
