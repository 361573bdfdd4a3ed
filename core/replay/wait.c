/*
 * wait.c -- time and the outside world: durable sleeps, waits for events,
 * cancellation and the run's deadline.
 *
 * TIME.  Every wait is a `wait` step in the waiting invocation's ledger,
 * whose wake time comes from the recorded clock (pl_ctx_now()):
 *
 *   seq     type     actor          payload
 *   n       wait     the policy     {"until": ms}                (a sleep)
 *   n       wait     the policy     {"event": name, "until": ms} (0: none)
 *   n + 1   event    "engine"       {"name", "payload", "seq"} or
 *                                   {"name", "timeout": true}
 *   n + 1   cancel   "engine"       {"reason": text}
 *
 * A sleep needs no step after its `wait`: once the ledger goes on past it,
 * it is over, and at the ledger's end it is over when the clock says so.
 * A wait for an event ends with the `event` step that records what ended
 * it, so a replay returns the same event or the same timeout.  A `cancel`
 * step records the cancellation where the run saw it, at a call boundary
 * or in a wait.
 *
 * A wait that cannot end yet parks the run: the run stops as a suspension
 * does (PL_ESUSPENDED unwinds every caller) and runner.c records it
 * `waiting`, with its wake time and the event it waits for, and sets its
 * timer in the same commit (store.h, TIMERS).  Nothing of it stays in
 * memory.  A worker (or pl_engine_wake()) takes the timer when it is due,
 * once across all processes, and continues the run, whose replay reaches
 * the wait again.  A wait no longer than the engine's wait-in-place time
 * waits on its thread instead, its `wait` step durable first.
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "commit.h"
#include "ctx.h"
#include "diverge.h"
#include "invocation.h"
#include "run.h"
#include "wait.h"

#define ENGINE_ACTOR "engine"
#define WAIT_IN_PLACE_DEFAULT_MS 1000
#define NAP_MS 50 /* the longest nap of a wait in place */

/* ---- reading and writing the steps -------------------------------------- */

static int encode_json(pl__run *r, pl__buf *b, cJSON *j)
{
    if (!j)
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    int st = pl__payload_encode(b, j, r->e->max_payload);
    cJSON_Delete(j);
    if (st)
        return pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
    return PL_OK;
}

/* Append (or compare with the record) a step by the engine or the policy. */
static int append_json(pl_ctx *c, pl_step_type type, const char *actor,
                       cJSON *j)
{
    pl__run *r = c->run;
    pl__buf b = {0};
    bool replayed;
    int st = encode_json(r, &b, j);
    if (!st)
        st = pl__inv_append(c, type, actor, b.data, b.len, NULL, NULL,
                            &replayed, NULL);
    pl__buf_free(&b);
    return st;
}

/* The recorded step @p rec decoded, or a failure of the run. */
static int rec_json(pl_ctx *c, const pl__rec *rec, cJSON **out)
{
    int st = pl__payload_decode_in(out, rec->payload, rec->payload_len, 1);
    if (st)
        return pl__run_fail(c->run, st, "run %s, invocation %s: %s", c->run->id,
                            c->path, pl_errmsg());
    return PL_OK;
}

static int not_expected(pl_ctx *c, const pl__rec *rec, pl_step_type want,
                        const char *what)
{
    pl__run *r = c->run;
    pl__diverged(c, rec, want, ENGINE_ACTOR, NULL, 0, NULL);
    return pl__run_fail(r, PL_ENONDET,
                        "non-determinism in run %s, invocation %s, step %u: "
                        "the ledger records %s by '%.*s' where %s belongs",
                        r->id, c->path, c->next_seq,
                        pl_step_type_name(rec->type), (int)rec->actor_len,
                        rec->actor, what);
}

/* A recorded `cancel` step at the cursor: the run is cancelled. */
static int take_cancel_step(pl_ctx *c, const pl__rec *rec)
{
    pl__run *r = c->run;
    cJSON *j = NULL;
    int st = rec_json(c, rec, &j);
    if (st)
        return st;
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(j, "reason");
    if (!cJSON_IsString(why) || !pl__rec_actor_is(rec, ENGINE_ACTOR)) {
        cJSON_Delete(j);
        return pl__run_fail(r, PL_ECORRUPT,
                            "run %s, invocation %s: a recorded cancel "
                            "step has the wrong shape",
                            r->id, c->path);
    }
    free(r->cancel_reason);
    r->cancel_reason = pl__strdup(why->valuestring);
    cJSON_Delete(j);
    if (!r->cancel_reason)
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    r->cancelled = true;
    if ((st = pl__inv_consume_checked(c)))
        return st;
    return pl__err(PL_ECANCELLED, "run %s is cancelled: %s", r->id,
                   r->cancel_reason);
}

/* ---- the inbox ------------------------------------------------------------ */

/* The run's inbox, decoded: records in delivery order, with their seqs. */
typedef struct inbox {
    pl__kvs raw;
    pl__inbox_rec *v;
    size_t n;
} inbox;

static void inbox_free(inbox *ib)
{
    for (size_t i = 0; i < ib->n; i++)
        pl__inbox_clear(&ib->v[i]);
    free(ib->v);
    pl__kvs_free(&ib->raw);
    memset(ib, 0, sizeof *ib);
}

/* Decode @p ib->raw; its last record is @p last, if given (a ride's). */
static int inbox_decode(inbox *ib, const char *id, const pl__inbox_rec *last)
{
    int st;
    if (ib->raw.n && !(ib->v = calloc(ib->raw.n, sizeof *ib->v)))
        return pl__err(PL_ENOMEM, "out of memory");
    for (; ib->n < ib->raw.n; ib->n++) {
        size_t i = ib->n;
        if (!pl__inbox_seq_ok(pl__kvs_key(&ib->raw, i), ib->raw.e[i].klen))
            return pl__err(PL_ECORRUPT, "run '%s': an inbox key is malformed",
                           id);
        if ((st = last && i + 1 == ib->raw.n
                      ? pl__inbox_copy(&ib->v[i], last)
                      : pl__inbox_decode(&ib->v[i], id,
                                         pl__kvs_val(&ib->raw, i),
                                         ib->raw.e[i].vlen)))
            return st;
    }
    return PL_OK;
}

static uint64_t inbox_seq(const inbox *ib, size_t i)
{
    return pl__get_be64(pl__kvs_key(&ib->raw, i));
}

/* The cancellation in the inbox, if any: its index, or -1. */
static long inbox_cancel(const inbox *ib)
{
    for (size_t i = 0; i < ib->n; i++)
        if (ib->v[i].reason)
            return (long)i;
    return -1;
}

/* Run @p r's inbox; with a delivery riding its next commit (run.h, RIDES),
 * that delivery's record last, at the seq the store is to give it (one
 * past the last), as the replay sees it the first time it looks. */
static int inbox_load_run(pl__run *r, inbox *ib)
{
    memset(ib, 0, sizeof *ib);
    pl__ride *ride = r->ride;
    const pl__kvs *read = ride ? ride->inbox : NULL; /* read with the run */
    int st = read ? PL_OK : pl__store_inbox_read(r->e->store, r->num, &ib->raw);
    for (size_t i = 0; read && !st && i < read->n; i++)
        st = pl__kvs_add(&ib->raw, pl__kvs_key(read, i), read->e[i].klen,
                         pl__kvs_val(read, i), read->e[i].vlen);
    if (!st && ride) {
        size_t n = ib->raw.n;
        if (!ride->seq)
            ride->seq = n && ib->raw.e[n - 1].klen == 8
                            ? pl__get_be64(pl__kvs_key(&ib->raw, n - 1)) + 1
                            : 1;
        uint8_t key[8];
        pl__put_be64(key, ride->seq);
        st = pl__kvs_add(&ib->raw, key, 8, NULL, 0); /* the store encodes it */
    }
    if (!st)
        st = inbox_decode(ib, r->id, ride ? ride->dv->rec : NULL);
    if (!st && ride) {
        /* until the ride's commit the inbox is this one: a record
         * delivered meanwhile takes the seq the ride counts on, and the
         * execution writes nothing (pl__run_ride() forgets this) */
        r->batch.inbox_known = true;
        r->batch.inbox_cancel = inbox_cancel(ib) >= 0;
    }
    return st;
}

/* ---- call boundaries ------------------------------------------------------ */

/*
 * Record the cancellation @p reason at the cursor of @p c: the run is
 * cancelled from here on.  Returns PL_ECANCELLED.  The step is written by
 * the run's next commit (its end, or a compensating call's): until then
 * the cancellation stays in the inbox, where a replay after a crash finds
 * it at the same place again.
 */
static int cancel_here(pl_ctx *c, const char *reason)
{
    pl__run *r = c->run;
    cJSON *j = NULL;
    if (pl_json_pack(&j, "{s:s}", "reason", reason))
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    int st = append_json(c, PL_STEP_CANCEL, ENGINE_ACTOR, j);
    if (st)
        return st;
    free(r->cancel_reason);
    if (!(r->cancel_reason = pl__strdup(reason)))
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    r->cancelled = true;
    return pl__err(PL_ECANCELLED, "run %s is cancelled: %s", r->id, reason);
}

static int deadline_passed(pl__run *r)
{
    return pl__run_fail(r, PL_EDEADLINE,
                        PL_ERR_DEADLINE_EXCEEDED
                        ": run %s passed its deadline (%lld, Unix ms)",
                        r->id, (long long)r->deadline_ms);
}

/*
 * At the ledger's end of @p c: has the run a cancellation to see (it is
 * recorded here, PL_ECANCELLED) or passed its deadline (the run fails)?
 * @p ib, when given, is the inbox already read; else it is read, unless
 * the store answered with the run's last commit (pl__batch.inbox_known).
 */
static int boundary_at_end(pl_ctx *c, const inbox *ib)
{
    pl__run *r = c->run;
    if (r->check || r->cancelled)
        return PL_OK;
    if (r->deadline_ms && pl__now_us() / 1000 >= r->deadline_ms)
        return deadline_passed(r);
    /* the store said, with the run's last commit, that no cancellation
     * waits: one that came since is seen after its next */
    if (!ib && r->batch.inbox_known && !r->batch.inbox_cancel)
        return PL_OK;
    inbox own;
    int st = PL_OK;
    if (!ib) {
        if ((st = inbox_load_run(r, &own))) {
            inbox_free(&own);
            return pl__run_fail(r, st, "run %s: reading its inbox: %s", r->id,
                                pl_errmsg());
        }
        ib = &own;
    }
    long k = inbox_cancel(ib);
    if (k >= 0)
        st = cancel_here(c, ib->v[k].reason);
    if (ib == &own)
        inbox_free(&own);
    return st;
}

int pl__wait_boundary(pl_ctx *c)
{
    pl__run *r = c->run;
    if (r->branch)
        return PL_OK; /* its run's thread looks, at the fan-out's calls */
    const pl__rec *rec;
    int st = pl__inv_peek(c, &rec);
    if (st)
        return st;
    if (rec) /* replaying: a recorded cancellation is seen again here */
        return rec->type == PL_STEP_CANCEL ? take_cancel_step(c, rec) : PL_OK;
    return boundary_at_end(c, NULL);
}

/* A wait at the ledger's end over with @p st: a ride of a run with a
 * concurrency key (run.h, RIDES) takes the run now, before its policy goes
 * on past the wait, so that it goes on only with a place under its key. */
static int ride_keyed(pl__run *r, int st)
{
    if (!r->ride || !r->ride->keyed ||
        (st && st != PL_ECANCELLED && st != PL_ETIMEDOUT))
        return st;
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    int wst = pl__run_write(r, false);
    if (wst)
        return pl__run_fail(r, wst, "run %s: commit failed: %s", r->id,
                            pl_errmsg());
    pl__errmsg_restore(saved);
    return st;
}

/* ---- parking ----------------------------------------------------------------- */

static int64_t wait_in_place_ms(const pl_engine *e)
{
    long long v = atomic_load(&((pl_engine *)e)->wait_in_place_ms);
    return v < 0 ? WAIT_IN_PLACE_DEFAULT_MS : (int64_t)v;
}

/* Stop the run to park it at the wait step @p seq of @p c. */
static int park(pl_ctx *c, uint32_t seq, int64_t until_ms, const char *event)
{
    pl__run *r = c->run;
    snprintf(r->susp_path, sizeof r->susp_path, "%s", c->path);
    r->susp_seq = seq;
    r->wait_until_ms = until_ms;
    free(r->wait_event);
    r->wait_event = NULL;
    if (event && !(r->wait_event = pl__strdup(event)))
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    r->parked = true;
    r->stop = PL_ESUSPENDED;
    return pl__err(PL_ESUSPENDED, "run %s waits at %s:%u", r->id, c->path, seq);
}

/* Wait on this thread until @p until_ms, the wait step durable first; a
 * worker's stop ends the wait early (the caller then parks the run).  A
 * cancellation is seen when the wait ends. */
static int wait_in_place(pl__run *r, int64_t until_ms)
{
    int st = pl__run_commit(r);
    if (st)
        return st;
    for (;;) {
        int64_t left = until_ms - pl__now_us() / 1000;
        if (left <= 0)
            return PL_OK;
        if (r->worker && atomic_load(&r->e->worker_stop))
            return PL_OK; /* the caller parks it instead */
        int64_t nap = left < NAP_MS ? left : NAP_MS;
        struct timespec ts = {0, (long)nap * 1000000L};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
}

/* ---- sleeping ----------------------------------------------------------------- */

/* Append (or replay) the wait step @p j at *seq; *rec is the recorded step
 * after it, NULL at the ledger's end. */
static int wait_step(pl_ctx *c, cJSON *j, uint32_t *seq, const pl__rec **rec)
{
    *seq = c->next_seq;
    *rec = NULL;
    if (!j)
        return pl__run_fail(c->run, PL_ENOMEM, "out of memory");
    int st = append_json(c, PL_STEP_WAIT, c->def->name, j);
    return st ? st : pl__inv_peek(c, rec);
}

/* A wait on a fan-out's branch thread could not park its run. */
static int no_branch(pl__run *r, const char *fn)
{
    return pl__err(PL_EINVAL,
                   "%s: run %s: a call made by pl_ctx_call_all() cannot "
                   "wait: wait before or after the fan-out",
                   fn, r->id);
}

static int sleep_until(pl_ctx *c, int64_t until_ms)
{
    pl__run *r = c->run;
    if (r->branch)
        return no_branch(r, "pl_ctx_sleep");
    cJSON *j = NULL;
    uint32_t seq;
    const pl__rec *rec;
    int st = wait_step(c,
                       pl_json_pack(&j, "{s:I}", "until", until_ms) ? NULL : j,
                       &seq, &rec);
    if (st)
        return st;
    if (rec) /* the ledger goes on: the sleep is over */
        return rec->type == PL_STEP_CANCEL ? take_cancel_step(c, rec) : PL_OK;
    if (r->check)
        return pl__run_fail(r, PL_ECHECK,
                            "check: run %s waits at %s:%u until %lld", r->id,
                            c->path, seq, (long long)until_ms);
    for (;;) {
        if ((st = boundary_at_end(c, NULL)))
            return ride_keyed(r, st);
        int64_t now = pl__now_us() / 1000;
        if (now >= until_ms)
            return ride_keyed(r, PL_OK);
        bool stopping = r->worker && atomic_load(&r->e->worker_stop);
        if (until_ms - now > wait_in_place_ms(r->e) || stopping)
            return park(c, seq, until_ms, NULL);
        if ((st = wait_in_place(r, until_ms)))
            return st;
        if (pl__now_us() / 1000 < until_ms)
            return park(c, seq, until_ms, NULL); /* a stop came */
    }
}

int pl_ctx_sleep_until(pl_ctx *c, int64_t unix_ms)
{
    int st = pl__ctx_check(c, "pl_ctx_sleep_until");
    if (st)
        return st;
    if (c->run->stop)
        return c->run->stop;
    if (unix_ms < 0)
        return pl__err(PL_EINVAL, "pl_ctx_sleep_until: a negative time");
    return sleep_until(c, unix_ms);
}

int pl_ctx_sleep(pl_ctx *c, int64_t ms)
{
    int st = pl__ctx_check(c, "pl_ctx_sleep");
    if (st)
        return st;
    if (ms < 0 || ms > INT64_MAX / 4)
        return pl__err(PL_EINVAL, "pl_ctx_sleep: %lld ms is out of range",
                       (long long)ms);
    int64_t now;
    if ((st = pl_ctx_now(&now, c)))
        return st;
    return sleep_until(c, now + ms);
}

/* ---- waiting for events ------------------------------------------------------- */

/* The recorded `event` step @p rec ends the wait for @p name. */
static int take_event_step(pl_ctx *c, const pl__rec *rec, const char *name,
                           cJSON **out)
{
    pl__run *r = c->run;
    if (rec->type == PL_STEP_CANCEL)
        return take_cancel_step(c, rec);
    if (rec->type != PL_STEP_EVENT)
        return not_expected(c, rec, PL_STEP_EVENT, "what ended a wait");
    cJSON *j = NULL;
    int st = rec_json(c, rec, &j);
    if (st)
        return st;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "payload");
    bool timeout = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "timeout"));
    if (!cJSON_IsString(n) || strcmp(n->valuestring, name) != 0 ||
        (!timeout && !cJSON_IsObject(p))) {
        cJSON_Delete(j);
        pl__diverged(c, rec, PL_STEP_EVENT, ENGINE_ACTOR, NULL, 0, NULL);
        return pl__run_fail(r, PL_ENONDET,
                            "non-determinism in run %s, invocation %s, step "
                            "%u: the recorded event is not one named '%s'",
                            r->id, c->path, c->next_seq, name);
    }
    if (!timeout) {
        *out = cJSON_DetachItemFromObjectCaseSensitive(j, "payload");
    }
    cJSON_Delete(j);
    if ((st = pl__inv_consume_checked(c))) {
        cJSON_Delete(*out);
        *out = NULL;
        return st;
    }
    if (timeout)
        return pl__err(PL_ETIMEDOUT,
                       "run %s: the wait for '%s' at %s timed out", r->id, name,
                       c->path);
    return PL_OK;
}

/* Consume inbox record @p i, an event named @p name: record it, with the
 * record's removal, both written by the run's next commit. */
static int consume_event(pl_ctx *c, const inbox *ib, size_t i, const char *name,
                         cJSON **out)
{
    pl__run *r = c->run;
    cJSON *payload = NULL;
    /* a batch drops one inbox record: one consumed already is written
     * first */
    int st = r->batch.inbox_del ? pl__run_commit(r) : PL_OK;
    if (st)
        return st;
    st = pl__payload_decode(&payload, ib->v[i].payload, ib->v[i].payload_len);
    if (st)
        return pl__run_fail(r, st, "run %s: an event's payload: %s", r->id,
                            pl_errmsg());
    cJSON *j = NULL;
    if (pl_json_pack(&j, "{s:s, s:O, s:I}", "name", name, "payload", payload,
                     "seq", (int64_t)inbox_seq(ib, i))) {
        cJSON_Delete(payload);
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    }
    if ((st = append_json(c, PL_STEP_EVENT, ENGINE_ACTOR, j))) {
        cJSON_Delete(payload);
        return st;
    }
    r->batch.inbox_del = inbox_seq(ib, i);
    *out = payload;
    return PL_OK;
}

static int wait_event(pl_ctx *c, const char *name, int64_t until_ms,
                      cJSON **out)
{
    pl__run *r = c->run;
    if (r->branch)
        return no_branch(r, "pl_ctx_wait_event");
    cJSON *j = NULL;
    uint32_t seq;
    const pl__rec *rec;
    int st = wait_step(c,
                       pl_json_pack(&j, "{s:s, s:I}", "event", name, "until",
                                    until_ms)
                           ? NULL
                           : j,
                       &seq, &rec);
    if (st)
        return st;
    if (rec)
        return take_event_step(c, rec, name, out);
    if (r->check)
        return pl__run_fail(r, PL_ECHECK,
                            "check: run %s waits at %s:%u for '%s'", r->id,
                            c->path, seq, name);
    for (;;) {
        inbox ib;
        if ((st = inbox_load_run(r, &ib))) {
            inbox_free(&ib);
            return pl__run_fail(r, st, "run %s: reading its inbox: %s", r->id,
                                pl_errmsg());
        }
        /* a cancellation first, then the first event of the name: what
         * was delivered before the deadline looked wins over the timeout */
        st = boundary_at_end(c, &ib);
        bool found = false;
        for (size_t i = 0; !st && !found && i < ib.n; i++) {
            /* one consumed by this execution, its removal not yet
             * written, is passed over */
            if (ib.v[i].name && strcmp(ib.v[i].name, name) == 0 &&
                inbox_seq(&ib, i) != r->batch.inbox_del) {
                found = true;
                st = consume_event(c, &ib, i, name, out);
            }
        }
        inbox_free(&ib);
        if (st || found)
            return ride_keyed(r, st);
        int64_t now = pl__now_us() / 1000;
        if (until_ms && now >= until_ms) {
            cJSON *t = NULL;
            if (pl_json_pack(&t, "{s:s, s:b}", "name", name, "timeout", 1))
                return pl__run_fail(r, PL_ENOMEM, "out of memory");
            if ((st = append_json(c, PL_STEP_EVENT, ENGINE_ACTOR, t)))
                return st;
            st = pl__err(PL_ETIMEDOUT,
                         "run %s: the wait for '%s' at %s timed out", r->id,
                         name, c->path);
            return ride_keyed(r, st);
        }
        bool stopping = r->worker && atomic_load(&r->e->worker_stop);
        int64_t place = wait_in_place_ms(r->e);
        if (!until_ms || until_ms - now > place || stopping || !place)
            return park(c, seq, until_ms, name);
        /* a short timeout: look again after a nap */
        if ((st = pl__run_commit(r)))
            return st;
        int64_t nap = until_ms - now < NAP_MS ? until_ms - now : NAP_MS;
        struct timespec ts = {0, (long)nap * 1000000L};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
}

int pl_ctx_wait_event(cJSON **out, pl_ctx *c, const char *name,
                      int64_t timeout_ms)
{
    if (out)
        *out = NULL;
    int st = pl__ctx_check(c, "pl_ctx_wait_event");
    if (st)
        return st;
    if (!out || !pl__name_ok(name))
        return pl__err(PL_EINVAL, "pl_ctx_wait_event: out and a valid event "
                                  "name are required");
    if (timeout_ms < PL_WAIT_FOREVER || timeout_ms > INT64_MAX / 4)
        return pl__err(PL_EINVAL,
                       "pl_ctx_wait_event: timeout %lld ms is out of range",
                       (long long)timeout_ms);
    if (c->run->stop)
        return c->run->stop;
    int64_t until = 0;
    if (timeout_ms != PL_WAIT_FOREVER) {
        if ((st = pl_ctx_now(&until, c)))
            return st;
        until += timeout_ms;
        if (until <= 0)
            until = 1; /* 0 means no timeout */
    }
    return wait_event(c, name, until, out);
}

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
