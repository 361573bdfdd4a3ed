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
#include "invocation.h"
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
    } else if (st->status == PL_RUN_CANCELLED ||
               st->status == PL_RUN_SUPERSEDED) {
        /* ended for good since the caller read it (pl_run_cancel() of a
         * queued run, pl_run_upgrade()): what pl_run_continue() says of
         * such a run, nothing written */
        rc = pl__err(PL_ESTATE,
                     "run '%s' is %s%s%s%s: it ended while it was being "
                     "taken",
                     c->id, pl_run_status_name(st->status),
                     st->succ ? " by run '" : "", st->succ ? st->succ : "",
                     st->succ ? "'" : "");
    } else if (st->status == PL_RUN_COMPLETED ||
               st->status == PL_RUN_CONTINUED) {
        /* another process ran it to its end meanwhile: final, it is
         * replayed (writing nothing) by a continue that reads it so */
        rc = pl__err(PL_EBUSY,
                     "run '%s' was run to its end (%s) by another process "
                     "while it was being taken: continue it again to "
                     "replay it",
                     c->id, pl_run_status_name(st->status));
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

/* A run taken that can never run (docs/design.md §14): its concurrency
 * key or limit found damaged by the store (pl__taken.key_damaged), since
 * its key's limit can no longer be kept, or its root record unreadable.
 * Never executed, it fails with @p status and @p why (naming the run),
 * its state in @p state, written by the store with its lease dropped in
 * the take's transaction; its ledger is untouched.  A run already ended,
 * suspended or cancelled is left as it is (PL_ESTATE, a stale lease). */
static int fail_unexecuted(const pl__taken *t, pl__buf *state, take_ctx *x,
                           int status, const char *why)
{
    const char *id = t->lease.id;
    pl__run_state rs;
    pl__buf_reset(state);
    int st = pl__run_state_decode(&rs, id, t->state, t->state_len);
    if (st)
        return pl__err(st, "run '%s': %s", id, pl_errmsg());
    x->before = rs.status;
    if (rs.status != PL_RUN_RUNNING && rs.status != PL_RUN_SUBMITTED &&
        rs.status != PL_RUN_WAITING) {
        pl__run_state_clear(&rs);
        return pl__err(PL_ESTATE, "run '%s' is %s: nothing to execute", id,
                       pl_run_status_name(rs.status));
    }
    rs.status = PL_RUN_FAILED;
    rs.error = status;
    rs.has_head = false;
    free(rs.reason);
    rs.reason = pl__strdup(why);
    free(rs.wait_event);
    rs.wait_event = NULL;
    rs.wait_until_ms = 0;
    pl__set_owner(x->e, &rs);
    if (!rs.reason)
        st = pl__err(PL_ENOMEM, "out of memory");
    pl__buf_reset(state);
    if (!st)
        st = pl__run_state_encode(state, id, &rs);
    pl__run_state_clear(&rs);
    if (st) {
        pl__buf_reset(state);
        return st;
    }
    return pl__err(status, "%s", why);
}

/* fail_unexecuted()'s verdict on the lease: dropped when the run failed
 * (its state in @p state) or had ended already; on a failure of memory
 * or of its state record it waits. */
static int failed_unexecuted(int st, pl__buf *state, bool *drop)
{
    *drop = ((st == PL_ECORRUPT || st == PL_EVERSION) && state->len) ||
            st == PL_ESTATE;
    if (!*drop || st == PL_ESTATE)
        pl__buf_reset(state);
    return st;
}

/* The run taken (pl__take_fn): the checks continue_run() makes of a run
 * leased from the queue, on its state as locked, and its claim.  @p user
 * is the takes' contexts, one a run of the batch (pl__taken.index). */
static int take_fn(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    take_ctx *x = (take_ctx *)user + t->index;
    const char *id = t->lease.id;
    int st = PL_OK;
    char why[PL__ERRMSG_MAX];
    if (t->key_damaged) {
        snprintf(why, sizeof why,
                 "run '%s' (#%llu): the record of its concurrency key and "
                 "limit is damaged (its checksum is not its own): failed "
                 "unexecuted, its key's limit being no longer known",
                 id, (unsigned long long)t->lease.run);
        st = fail_unexecuted(t, state, x, PL_ECORRUPT, why);
        return failed_unexecuted(st, state, drop);
    }
    if (!x->decoded &&
        !(st = pl__root_decode(&x->ra, id, t->info, t->info_len)))
        x->decoded = true;
    if (st == PL_ECORRUPT || st == PL_EVERSION) {
        /* no take would ever read it: failed once, not taken again at
         * each expiry of its lease */
        snprintf(why, sizeof why,
                 "run '%s' (#%llu): its root record cannot be read (%s): "
                 "failed unexecuted",
                 id, (unsigned long long)t->lease.run, pl_errmsg());
        st = fail_unexecuted(t, state, x, st, why);
        return failed_unexecuted(st, state, drop);
    }
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
    /* PL_ESTATE: ended, suspended or cancelled, a stale lease; a state
     * record that cannot be read: set aside, its lease dropped, never
     * taken again (it is reported once, here, and by pl_run_verify()) */
    *drop = st == PL_ESTATE || st == PL_ECORRUPT || st == PL_EVERSION;
    if (st)
        pl__buf_reset(state); /* nothing written with the lease dropped */
    if (!st && !x->engine_claim &&
        !(st = pl__engine_claim(x->e, t->lease.run, id)))
        x->engine_claim = t->lease.run;
    x->known = t->known;
    x->no_steps = t->known && t->no_steps;
    x->inbox_cancel = t->inbox_cancel;
    return st;
}

/* What a take left in @p x, released. */
static void take_clear(take_ctx *x)
{
    if (x->engine_claim)
        pl__engine_release(x->e, x->engine_claim);
    x->engine_claim = 0;
    pl__run_state_clear(&x->state);
    pl__root_clear(&x->ra);
}

/* Execute run @p lease->id, taken and claimed into @p x, its root ledger's
 * first read in @p first (or NULL). */
static int execute_taken(pl_outcome **out, take_ctx *x, const pl__lease *lease,
                         pl__kvs *first, atomic_bool *lost)
{
    pl_engine *e = x->e;
    pl__run *r = NULL;
    uint64_t num = lease->run;
    int st = pl__run_new(e, lease->id, &r);
    if (st)
        goto done; /* claimed: the lease runs out, another worker goes on */
    r->num = num;
    r->root_code = x->ra.info.code; /* the run takes it over */
    x->ra.info.code = NULL;
    r->deadline_ms = x->ra.info.deadline_ms;
    r->state = x->state;
    memset(&x->state, 0, sizeof x->state);
    r->batch.gen = lease->gen;
    r->batch.nokey_gen = 0; /* a key is not known of: the fence asks */
    r->worker = true;
    r->first_read = first;
    /* the store said, with the claim, whether a cancellation waits */
    r->batch.inbox_known = x->known;
    r->batch.inbox_cancel = x->inbox_cancel;
    if ((st = pl__engine_lease(e, num, lease->gen, &r->lease_lost)))
        goto done;                 /* claimed: the lease runs out */
    if (lost && atomic_load(lost)) /* taken over while it waited its turn */
        atomic_store(&r->lease_lost, true);
    r->state_written_us = pl__now_us();
    r->crashed_before = x->before == PL_RUN_RUNNING;
    /* a crashed run's step count is as of its last heartbeat; steps that
     * cannot be read fail the run, unexecuted, rather than leave it to be
     * taken again at each expiry of its lease */
    if (r->crashed_before && !x->no_steps &&
        (st = pl__count_steps(e, num, &r->state.steps))) {
        if (st != PL_ECORRUPT && st != PL_EVERSION)
            goto done;
        st = pl__run_fail(r, st, "run %s: its steps cannot be read: %s", r->id,
                          pl_errmsg());
    }
    st = pl__run_execute(r, x->def, &x->ra.action, !x->no_steps, out);
done:
    take_clear(x);
    pl__run_free(r);
    return st;
}

int pl__run_take_next(pl_outcome **out, pl_engine *e, pl__lease *lease,
                      bool *taken)
{
    *out = NULL;
    take_ctx x = {.e = e};
    int st = pl__store_take(e->store, e->worker, e->lease_us, take_fn, &x,
                            lease, taken);
    if (st || !*taken) {
        take_clear(&x);
        return st;
    }
    return execute_taken(out, &x, lease, NULL, NULL);
}

/* ---- wakes, in batches -------------------------------------------------------- */

struct pl__woken {
    pl_engine *e;
    pl__dues d;                     /* the batch taken */
    take_ctx x[PL__DUES_MAX];       /* each run's take */
    atomic_bool lost[PL__DUES_MAX]; /* a renewal found its lease taken over
                                       while it waited its turn */
    size_t next;                    /* the next to execute */
};

int pl__woken_new(pl__woken **out, pl_engine *e)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return pl__err(PL_ENOMEM, "out of memory");
    (*out)->e = e;
    return PL_OK;
}

bool pl__woken_pending(const pl__woken *w) { return w->next < w->d.n; }

bool pl__woken_spent(const pl__woken *w)
{
    return w->d.n && w->next == w->d.n && w->d.n < PL__DUES_MAX;
}

/* The batch's rest dropped: each run not executed yet handed back to the
 * queue, claimed (another worker takes it, as a crashed one). */
static void woken_drop(pl__woken *w)
{
    pl_engine *e = w->e;
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    for (size_t i = w->next; i < w->d.n; i++) {
        bool lost;
        take_clear(&w->x[i]); /* no longer renewed here, then handed back */
        if (!w->d.st[i] && pl__store_lease_renew(e->store, &w->d.lease[i].run,
                                                 &w->d.lease[i].gen, 1,
                                                 PL__HAND_BACK_US, &lost)) {
            /* it expires on its own */
        }
    }
    pl__errmsg_restore(saved);
    for (size_t i = 0; i < PL__DUES_MAX; i++) {
        take_clear(&w->x[i]);
        pl__kvs_free(&w->d.ledger[i]);
    }
    w->d.n = w->next = 0;
}

void pl__woken_free(pl__woken *w)
{
    if (!w)
        return;
    woken_drop(w);
    free(w);
}

/* A batch of due runs taken into @p w (its previous one all executed). */
static int woken_take(pl__woken *w, int64_t *next_due_us)
{
    pl_engine *e = w->e;
    woken_drop(w);
    for (size_t i = 0; i < PL__DUES_MAX; i++) {
        w->x[i] = (take_ctx){.e = e};
        atomic_store(&w->lost[i], false);
    }
    int st = pl__store_take_dues(e->store, e->worker, e->lease_us, PL__DUES_MAX,
                                 PL__AHEAD_N, PL__AHEAD_BYTES, take_fn, w->x,
                                 &w->d, next_due_us);
    if (st) { /* nothing taken: the claims fn made are undone */
        w->d.n = 0;
        for (size_t i = 0; i < PL__DUES_MAX; i++)
            take_clear(&w->x[i]);
        return st;
    }
    /* those waiting their turn: their leases renewed meanwhile */
    for (size_t i = 1; i < w->d.n; i++)
        if (!w->d.st[i] &&
            (w->d.st[i] = pl__engine_lease(e, w->d.lease[i].run,
                                           w->d.lease[i].gen, &w->lost[i])))
            pl__errmsg_save(w->d.msg[i]);
    return PL_OK;
}

/*
 * A due run this process cannot execute (its root policy not registered
 * here; or recorded by newer code): its timer, deleted by the take, is set
 * again, due in @p in_us, so that a process that can wakes it then,
 * whether it runs workers or pl_engine_wake() (which takes no expired
 * lease of the queue).
 */
static void due_again(pl_engine *e, const pl__lease *lease, int64_t in_us)
{
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    if (pl__store_timer_set(e->store, lease->run, lease->id,
                            pl__now_us() + in_us)) {
        /* the lease runs out all the same: a worker's queue takes it */
    }
    pl__errmsg_restore(saved);
}

int pl__run_take_due(pl_outcome **out, pl__woken *w, pl__lease *lease,
                     bool *taken, int64_t *next_due_us)
{
    *out = NULL;
    *taken = false;
    *next_due_us = 0;
    if (!pl__woken_pending(w)) {
        int st = woken_take(w, next_due_us);
        if (st)
            return st;
    }
    size_t i = w->next++;
    *lease = w->d.lease[i];
    *taken = true;
    if (w->d.st[i]) { /* refused: the lease alone taken, or dropped */
        if (w->x[i].decoded && !w->x[i].def)
            due_again(w->e, lease, w->e->lease_us); /* once it runs out */
        take_clear(&w->x[i]);
        pl__errmsg_restore(w->d.msg[i]);
        return w->d.st[i];
    }
    return execute_taken(out, &w->x[i], lease,
                         w->d.ledger_read[i] ? &w->d.ledger[i] : NULL,
                         &w->lost[i]);
}

/* pl_engine_wake(): every run due taken and executed here, as a worker's
 * wake is. */
#define NEWER_AGAIN_US 1000000
int pl_engine_wake(pl_engine *e, int64_t *next_due_ms)
{
    if (next_due_ms)
        *next_due_ms = 0;
    if (!e)
        return pl__err(PL_EINVAL, "pl_engine_wake: engine is NULL");
    int sst = pl__engine_writable(e, "pl_engine_wake");
    if (sst)
        return sst;
    int64_t tick = 0; /* the schedules' next (schedule.c) */
    /* a schedule that fails (a damaged record, a payload over the limit)
     * fails at every call: the waiting runs are woken all the same, its
     * failure, the first, is said as a worker says it (an event naming the
     * schedule), and returned unless waking the runs failed too, whose
     * failure then goes first: a caller tells the two apart */
    char sched[PL_MAX_NAME + 1], sched_run[PL_MAX_RUN_ID + 1];
    int fault = pl__schedules_wake(e, &tick, sched, sched_run);
    char fault_msg[PL__ERRMSG_MAX];
    if (fault) {
        pl__errmsg_save(fault_msg);
        pl__emit_engine(e, PL_EVENT_SCHEDULE_FAILED, fault, fault_msg, sched,
                        sched_run);
    }
    bool sched_fault = fault != PL_OK;
    pl__woken *w;
    if ((sst = pl__woken_new(&w, e)))
        return sst;
    bool taking_fault = false; /* the store failed a take or a run */
    for (;;) {
        /* due timers, their leases, their runs' records and claims in one
         * transaction (claim.c), then each run's execution here, in turn:
         * a batch's runs are all executed, whatever fails meanwhile */
        pl__lease lease;
        int64_t next = 0;
        bool taken = false;
        pl_outcome *o = NULL;
        if (taking_fault && !pl__woken_pending(w))
            break;
        int st = pl__run_take_due(&o, w, &lease, &taken, &next);
        pl_outcome_free(o);
        /* a run newer code recorded: back to the queue at once, for a
         * worker running that code (worker.c hands it back the same way),
         * and its timer due again a little later, for a process of that
         * code without workers */
        if (taken && st == PL_ENEWERCODE) {
            pl__run_hand_back(e, lease.run, lease.gen, PL__HAND_BACK_US);
            due_again(e, &lease, NEWER_AGAIN_US);
        }
        if (!taken && (st == PL_ENOTFOUND || st == PL_EBUSY)) {
            /* none due; or one not taken now (next: soon) */
            next = next ? (next + 999) / 1000 : 0;
            if (next_due_ms)
                *next_due_ms = tick && (!next || tick < next) ? tick : next;
            pl__err_clear();
            break;
        }
        bool store = st == PL_ESTORE || st == PL_ENOMEM || st == PL_EMAPFULL ||
                     st == PL_ENOSPC || st == PL_EACCES || st == PL_EIO;
        if ((!taken || store) && !taking_fault) {
            taking_fault = true;
            if (!fault || sched_fault) {
                fault = st;
                sched_fault = false;
                pl__errmsg_save(fault_msg);
            }
        }
        if (!taken)
            break;
        /* else not executable here, ended, or taken over: the next */
    }
    pl__woken_free(w);
    if (fault)
        pl__errmsg_restore(fault_msg);
    return fault;
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
        r->batch.nokey_gen = 0; /* the take may have given it a key */
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
