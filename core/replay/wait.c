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
 * DELIVERIES (deliver.c) put events and cancellations in the inbox that
 * the waits and call boundaries here read.
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

/* A wait at the ledger's end of a run that has seen its cancellation (a
 * compensation's wait) ends at once, as the wait or call the cancellation
 * was seen at did: a `cancel` step of the same reason, PL_ECANCELLED.
 * Parked instead, the run would wait for good (an event that never comes)
 * where its cancellation was to end it, and a cancellation sent again
 * would find it cancelled already and leave it there. */
static int cancelled_wait(pl_ctx *c)
{
    pl__run *r = c->run;
    char *why = pl__strdup(r->cancel_reason ? r->cancel_reason : "");
    if (!why)
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    int st = cancel_here(c, why);
    free(why);
    return ride_keyed(r, st);
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

/* Wait on this thread for @p until_ms, a nap of NAP_MS at most, the wait
 * step durable first: the caller looks again after each (a cancellation,
 * the time, a worker's stop, which parks the run instead). */
static int wait_in_place(pl__run *r, int64_t until_ms)
{
    int st = pl__run_commit(r);
    if (st)
        return st;
    int64_t left = until_ms - pl__now_us() / 1000;
    int64_t nap = left < NAP_MS ? left : NAP_MS;
    struct timespec ts = {0, (long)nap * 1000000L};
    while (nap > 0 && nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    return PL_OK;
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
    if (r->cancelled)
        return cancelled_wait(c);
    for (bool napped = false;; napped = true) {
        /* a cancellation delivered while the sleep waits in place ends it,
         * as it ends a parked one: after a nap the inbox is read, not
         * taken as the last commit found it */
        inbox ib = {0};
        if (napped && (st = inbox_load_run(r, &ib))) {
            inbox_free(&ib);
            return pl__run_fail(r, st, "run %s: reading its inbox: %s", r->id,
                                pl_errmsg());
        }
        st = boundary_at_end(c, napped ? &ib : NULL);
        inbox_free(&ib);
        if (st)
            return ride_keyed(r, st);
        int64_t now = pl__now_us() / 1000;
        if (now >= until_ms)
            return ride_keyed(r, PL_OK);
        bool stopping = r->worker && pl__worker_stopping(r->e);
        if (until_ms - now > wait_in_place_ms(r->e) || stopping)
            return park(c, seq, until_ms, NULL);
        if ((st = wait_in_place(r, until_ms)))
            return st;
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
    if (unix_ms > PL__TIME_MAX_MS)
        return pl__err(PL_EINVAL,
                       "pl_ctx_sleep_until: %lld is past 2^53 ms, the latest "
                       "wake time",
                       (long long)unix_ms);
    return sleep_until(c, unix_ms);
}

int pl_ctx_sleep(pl_ctx *c, int64_t ms)
{
    int st = pl__ctx_check(c, "pl_ctx_sleep");
    if (st)
        return st;
    if (ms < 0 || ms > PL__TIME_MAX_MS)
        return pl__err(PL_EINVAL,
                       "pl_ctx_sleep: %lld ms is out of range (0 to 2^53)",
                       (long long)ms);
    int64_t now;
    if ((st = pl_ctx_now(&now, c)))
        return st;
    /* the recorded now decides: a replay refuses it alike */
    if (now > PL__TIME_MAX_MS - ms)
        return pl__err(PL_EINVAL,
                       "pl_ctx_sleep: %lld ms from now is past 2^53 ms, the "
                       "latest wake time",
                       (long long)ms);
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
    if (r->cancelled)
        return cancelled_wait(c);
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
        bool stopping = r->worker && pl__worker_stopping(r->e);
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
    if (timeout_ms < PL_WAIT_FOREVER || timeout_ms > PL__TIME_MAX_MS)
        return pl__err(PL_EINVAL,
                       "pl_ctx_wait_event: timeout %lld ms is out of range "
                       "(-1 to 2^53)",
                       (long long)timeout_ms);
    if (c->run->stop)
        return c->run->stop;
    int64_t until = 0;
    if (timeout_ms != PL_WAIT_FOREVER) {
        if ((st = pl_ctx_now(&until, c)))
            return st;
        /* the recorded now decides: a replay refuses it alike */
        if (until > PL__TIME_MAX_MS - timeout_ms)
            return pl__err(PL_EINVAL,
                           "pl_ctx_wait_event: a timeout of %lld ms from now "
                           "is past 2^53 ms, the latest wake time",
                           (long long)timeout_ms);
        until += timeout_ms;
        if (until <= 0)
            until = 1; /* 0 means no timeout */
    }
    return wait_event(c, name, until, out);
}
