/*
 * lmdb_time.c -- timers and inboxes on the LMDB store (see TIMERS and
 * INBOXES in store.h).
 *
 * LAYOUT: three databases beside the others, created on the first writable
 * open (a store made before them simply has no timers and no inboxes).
 *
 *   | database | key                         | value                      |
 *   |----------|-----------------------------|----------------------------|
 *   | timers   | u64 BE run number           | the timer record (runrec.c)|
 *   | due      | i64 BE due (Unix us), u64 BE| empty: the timers by due   |
 *   |          | run number                  | time                       |
 *   | inbox    | u64 BE run, u64 BE seq      | the inbox record (runrec.c)|
 *
 * `due` is an index of `timers`: a take reads the earliest entry and checks
 * it against the timer record, whose checksum covers the due time; an entry
 * that disagrees is stale and dropped.  One writer at a time: a take is one
 * write transaction, so a timer is taken exactly once.
 */
#include "lmdb_int.h"
#include "runrec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl__lmdb_time_open(pl__lmdb_store *s, MDB_txn *txn, bool create)
{
    unsigned f = create ? MDB_CREATE : 0;
    int rc = mdb_dbi_open(txn, "timers", f, &s->timers);
    if (!rc)
        rc = mdb_dbi_open(txn, "due", f, &s->due);
    if (!rc)
        rc = mdb_dbi_open(txn, "inbox", f, &s->inbox);
    if (rc == MDB_NOTFOUND && !create) {
        s->has_time = false; /* a read-only open of an older store */
        return 0;
    }
    s->has_time = !rc;
    return rc;
}

static int no_time(const pl__lmdb_store *s, bool write)
{
    if (write)
        return pl__err(PL_ESTATE,
                       "store '%s' is open read-only: no timer or "
                       "inbox can be written",
                       s->path);
    return PL_ENOTFOUND;
}

/* Read run @p run's timer in @p txn: MDB_NOTFOUND when it has none. */
static int timer_get(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                     int64_t *due, char id[PL_MAX_RUN_ID + 1], int *st)
{
    uint8_t key[8];
    pl__put_be64(key, run);
    MDB_val k = {8, key}, v;
    int rc = pl__lmdb_get(s, txn, s->timers, &k, &v);
    if (!rc && (*st = pl__timer_decode(due, id, v.mv_data, v.mv_size)))
        *st = pl__err(*st, "store '%s', the timer of run #%llu: %s", s->path,
                      (unsigned long long)run, pl_errmsg());
    return rc;
}

static void due_key(uint8_t out[16], int64_t due, uint64_t run)
{
    pl__put_be64(out, (uint64_t)due);
    pl__put_be64(out + 8, run);
}

static int timer_del(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int64_t due)
{
    uint8_t key[8], dk[16];
    pl__put_be64(key, run);
    due_key(dk, due, run);
    MDB_val k = {8, key}, d = {16, dk};
    int rc = mdb_del(txn, s->timers, &k, NULL);
    if (!rc || rc == MDB_NOTFOUND)
        rc = mdb_del(txn, s->due, &d, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Set run @p run's timer in @p txn, keeping an earlier one. */
static int timer_put(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                     const char *id, int64_t due, int *st)
{
    int64_t old;
    char oid[PL_MAX_RUN_ID + 1];
    int rc = timer_get(s, txn, run, &old, oid, st);
    if ((rc && rc != MDB_NOTFOUND) || *st) /* a malformed timer is reported */
        return rc == MDB_NOTFOUND ? 0 : rc;
    if (!rc && old <= due)
        return 0;
    if (!rc && (rc = timer_del(s, txn, run, old)))
        return rc;
    pl__buf b = {0};
    if ((*st = pl__timer_encode(&b, id, due)))
        return 0;
    uint8_t key[8], dk[16];
    pl__put_be64(key, run);
    due_key(dk, due, run);
    MDB_val k = {8, key}, v = {b.len, b.data}, d = {16, dk}, e = {0, ""};
    rc = mdb_put(txn, s->timers, &k, &v, 0);
    if (!rc)
        rc = mdb_put(txn, s->due, &d, &e, 0);
    pl__buf_free(&b);
    return rc;
}

int pl__lmdb_time_batch(pl__lmdb_store *s, MDB_txn *txn, const pl__batch *bt,
                        int *st)
{
    if (!bt->timer_us && !bt->inbox_del && !bt->inbox_add)
        return 0;
    if (!s->has_time) {
        *st = no_time(s, true);
        return 0;
    }
    int rc = 0;
    if (bt->timer_us &&
        ((rc = timer_put(s, txn, bt->run, bt->timer_id, bt->timer_us, st)) ||
         *st))
        return rc;
    for (size_t i = 0; bt->inbox_add && i < bt->inbox_add->n; i++) {
        const pl__kvs *a = bt->inbox_add;
        uint8_t key[16];
        pl__put_be64(key, bt->run);
        if (ALWAYS(a->e[i].klen == 8))
            memcpy(key + 8, pl__kvs_key(a, i), 8);
        MDB_val k = {16, key}, v = {a->e[i].vlen, (void *)pl__kvs_val(a, i)};
        rc = mdb_put(txn, s->inbox, &k, &v, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) {
            *st = pl__err(PL_EBUSY,
                          "run #%llu: an inbox record is there "
                          "already at the seq being written",
                          (unsigned long long)bt->run);
            return 0;
        }
        if (rc)
            return rc;
    }
    if (bt->inbox_del) {
        uint8_t key[16];
        pl__put_be64(key, bt->run);
        pl__put_be64(key + 8, bt->inbox_del);
        MDB_val k = {16, key};
        rc = mdb_del(txn, s->inbox, &k, NULL);
        if (rc == MDB_NOTFOUND) {
            *st = pl__err(PL_EBUSY,
                          "run #%llu: its inbox record %llu was consumed "
                          "by another execution",
                          (unsigned long long)bt->run,
                          (unsigned long long)bt->inbox_del);
            return 0;
        }
    }
    return rc;
}

typedef struct set_ctx {
    uint64_t run;
    const char *id;
    int64_t due;
} set_ctx;

static int set_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    set_ctx *c = user;
    return timer_put(s, txn, c->run, c->id, c->due, st);
}

int pl__lmdb_timer_set(pl__lmdb_store *s, uint64_t run, const char *run_id,
                       int64_t due_us)
{
    if (!s->has_time)
        return no_time(s, true);
    set_ctx c = {run, run_id, due_us};
    return pl__lmdb_write(s, set_body, &c);
}

int pl__lmdb_timer_get(pl__lmdb_store *s, uint64_t run, int64_t *due_us)
{
    if (!s->has_time)
        return pl__err(PL_ENOTFOUND, "store '%s' holds no timers", s->path);
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    char id[PL_MAX_RUN_ID + 1];
    int rc = timer_get(s, txn, run, due_us, id, &st);
    if (rc == MDB_NOTFOUND)
        st = pl__err(PL_ENOTFOUND, "run #%llu has no timer",
                     (unsigned long long)run);
    else if (rc)
        st = pl__lmdb_err(s, rc, "reading a timer");
    pl__lmdb_txn_abort(s, txn);
    return st;
}

/* The earliest timer's due time (0: none), in a read transaction: an idle
 * worker looks often, and must not take the writer's lock to find nothing.
 * The index entry is checked against its timer record. */
static int earliest(pl__lmdb_store *s, int64_t *due)
{
    MDB_txn *txn;
    size_t seen;
    *due = 0;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, s->due, &cur);
    if (!rc) {
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_FIRST);
        if (!rc && k.mv_size == 16) {
            *due = (int64_t)pl__get_be64(k.mv_data);
            int64_t tdue;
            char id[PL_MAX_RUN_ID + 1];
            uint64_t run = pl__get_be64((const uint8_t *)k.mv_data + 8);
            rc = timer_get(s, txn, run, &tdue, id, &st);
            if (rc == MDB_NOTFOUND || (!rc && !st && tdue != *due))
                rc = 0; /* stale: the take drops it */
        } else if (!rc) {
            st = pl__err(PL_ECORRUPT, "store '%s': a timer key is malformed",
                         s->path);
        }
        mdb_cursor_close(cur);
    }
    if (rc && rc != MDB_NOTFOUND && !st)
        st = pl__lmdb_err(s, rc, "reading the timers");
    pl__lmdb_txn_abort(s, txn);
    return st;
}

#define TAKE_MAX 64    /* due timers a take reads at a time */
#define REFUSED_MAX 32 /* keys a take remembers as refused */
/* When a due timer waits for its key's room: how soon to look again. */
#define LOOK_AGAIN_US 50000

typedef struct take_ctx {
    const char *owner;
    int64_t lease_us;
    pl__lease *out;
    size_t max, n;
    int64_t next;
    bool blocked; /* a due timer's key was full */
    bool damaged; /* the run taken last has a damaged flow record: taken,
                     for its claim to fail it (lmdb_flow.c, DAMAGE) */
} take_ctx;

/* The keys a take refused (full, or a run of the key queued ahead): their
 * later due timers are passed over for the rest of the take, so that the
 * key's places go in due order; past REFUSED_MAX a key is counted again. */
typedef struct refused {
    char key[REFUSED_MAX][PL__FLOW_KEY_MAX + 1];
    size_t n;
} refused;

static bool was_refused(const refused *r, const char *key)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->key[i], key) == 0)
            return true;
    return false;
}

/* Take the timer at index entry (@p due, @p run) and its run's lease into
 * c->out[c->n] (a stale entry is dropped instead). */
static int take_one(pl__lmdb_store *s, MDB_txn *txn, take_ctx *c, refused *ref,
                    int64_t due, uint64_t run, int *st)
{
    int64_t tdue;
    char id[PL_MAX_RUN_ID + 1];
    int rc = timer_get(s, txn, run, &tdue, id, st);
    if (rc == MDB_NOTFOUND || (!rc && !*st && tdue != due)) {
        /* a stale index entry: drop it, and look again next time */
        uint8_t dk[16];
        due_key(dk, due, run);
        MDB_val d = {16, dk};
        c->next = pl__now_us();
        rc = mdb_del(txn, s->due, &d, NULL);
        return rc == MDB_NOTFOUND ? 0 : rc;
    }
    if (rc || *st)
        return rc;
    pl__flow f;
    bool keyed;
    rc = pl__lmdb_flow_pass(s, txn, run, &f, &keyed, st);
    if (!rc && *st == PL_ECORRUPT) { /* its key and limit unknown */
        *st = 0;
        if ((rc = timer_del(s, txn, run, due)))
            return rc;
        rc = pl__lmdb_lease_take(s, txn, run, id, c->owner, c->lease_us,
                                 &c->out[c->n], st);
        /* the lease made, its place not (the record refused): the claim
         * fails the run, and its release drops the record */
        if (!rc && *st == PL_ECORRUPT)
            *st = 0;
        if (!rc && !*st) {
            c->damaged = true;
            c->n++;
        }
        return rc;
    }
    if (rc || *st)
        return rc;
    keyed = keyed && *f.key;
    if (keyed && was_refused(ref, f.key)) {
        c->blocked = true;
        return 0;
    }
    /* a run parked with a key: only while the key has room (counting the
     * runs this take woke before it); else it stays due */
    bool room, first = true;
    if ((rc = pl__lmdb_flow_room(s, txn, run, &room, st)) || *st)
        return rc;
    /* a run queued with a key: only as its key's first (FLOW in store.h) */
    if (room && ((rc = pl__lmdb_flow_first(s, txn, run, &first, st)) || *st))
        return rc;
    if (!room || !first) {
        c->blocked = true;
        if (keyed && ref->n < REFUSED_MAX)
            snprintf(ref->key[ref->n++], sizeof ref->key[0], "%s", f.key);
        return 0;
    }
    if ((rc = timer_del(s, txn, run, due)))
        return rc;
    rc = pl__lmdb_lease_take(s, txn, run, id, c->owner, c->lease_us,
                             &c->out[c->n], st);
    if (!rc && !*st)
        c->n++;
    return rc;
}

/* Up to TAKE_MAX due entries after (*due, *run) (all from the first with
 * *past false) whose runs are not executing, into @p dues and @p runs
 * (*found); *more: the due index may hold more due entries past them. */
static int due_batch(pl__lmdb_store *s, MDB_txn *txn, take_ctx *c, int64_t now,
                     bool *past, int64_t *due, uint64_t *run,
                     int64_t dues[TAKE_MAX], uint64_t runs[TAKE_MAX],
                     size_t *found, bool *more, int *st)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->due, &cur);
    if (rc)
        return rc;
    uint8_t at[16];
    due_key(at, *due, *run);
    MDB_val k = {16, at}, v;
    *found = 0;
    *more = false;
    rc = pl__lmdb_cursor_get(s, cur, &k, &v, *past ? MDB_SET_RANGE : MDB_FIRST);
    if (!rc && *past && k.mv_size == 16 && memcmp(k.mv_data, at, 16) == 0)
        rc = pl__lmdb_cursor_get(s, cur, &k, &v,
                                 MDB_NEXT); /* the last one read */
    for (; !rc; rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 16) {
            *st = pl__err(PL_ECORRUPT, "store '%s': a timer key is malformed",
                          s->path);
            break;
        }
        int64_t d = (int64_t)pl__get_be64(k.mv_data);
        uint64_t r = pl__get_be64((const uint8_t *)k.mv_data + 8);
        if (d > now) {
            if (!c->next || d < c->next)
                c->next = d;
            break;
        }
        if (*found == TAKE_MAX) {
            *more = true;
            break;
        }
        *past = true;
        *due = d;
        *run = r;
        pl__lease l;
        int lst = 0;
        int lrc = pl__lmdb_lease_peek(s, txn, r, &l, &lst);
        if (lrc && lrc != MDB_NOTFOUND) {
            rc = lrc;
            break;
        }
        if (!lrc && !lst && l.expires_in_us > 0)
            continue; /* executing: it parks again or ends */
        dues[*found] = d;
        runs[(*found)++] = r;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* The due timers in due order, TAKE_MAX at a time, till c->max are taken
 * or none is left due: a due timer its key refuses is passed over, and
 * the walk goes on past it (past any number of them: a run that may wake
 * behind a full key's due runs is woken). */
static int take_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    take_ctx *c = user;
    int64_t now = pl__now_us();
    c->n = 0;
    c->damaged = false;
    c->next = 0;
    refused *ref = malloc(sizeof *ref);
    if (!ref) {
        *st = pl__err(PL_ENOMEM, "out of memory");
        return 0;
    }
    ref->n = 0;
    /* the due entries to take, found first: the cursor is not used across
     * the writes */
    int64_t dues[TAKE_MAX], at_due = 0;
    uint64_t runs[TAKE_MAX], at_run = 0;
    size_t found;
    bool past = false, more = true;
    int rc = 0;
    while (!rc && !*st && more && c->n < c->max) {
        rc = due_batch(s, txn, c, now, &past, &at_due, &at_run, dues, runs,
                       &found, &more, st);
        for (size_t i = 0; !rc && !*st && i < found && c->n < c->max; i++)
            rc = take_one(s, txn, c, ref, dues[i], runs[i], st);
    }
    free(ref);
    /* due, but its key full: look again soon, not at once */
    if (c->blocked && !c->n && (!c->next || c->next > now + LOOK_AGAIN_US))
        c->next = now + LOOK_AGAIN_US;
    return rc;
}

/* PL_OK when a timer is due, else PL_ENOTFOUND with *next_due_us when the
 * first will be (0: none); read without the writer's lock. */
static int any_due(pl__lmdb_store *s, int64_t *next_due_us)
{
    if (!s->has_time)
        return PL_ENOTFOUND;
    int64_t first;
    int st = earliest(s, &first);
    if (st)
        return st;
    if (!first || first > pl__now_us()) {
        *next_due_us = first;
        return PL_ENOTFOUND;
    }
    return PL_OK;
}

/* ---- a due run taken and claimed ------------------------------------------- */

typedef struct due_ctx {
    take_ctx t; /* of one timer */
    pl__take_fn fn;
    void *user;
    int fst;   /* fn's refusal: the timer and lease taken */
    bool drop; /* and the lease to drop */
} due_ctx;

/* In one write transaction: the earliest due timer whose run may wake
 * (take_body()), its lease, the run's info and state read and @c fn's
 * claim written; or, @c fn refusing, the lease alone. */
static int due_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    due_ctx *c = user;
    c->fst = PL_OK;
    c->drop = false;
    int rc = take_body(s, txn, &c->t, st);
    if (rc || *st || !c->t.n)
        return rc; /* stale entries dropped are written */
    pl__lease *l = &c->t.out[0];
    MDB_val k = {strlen(l->id), l->id}, v;
    if ((rc = pl__lmdb_get(s, txn, s->runs, &k, &v)) && rc != MDB_NOTFOUND)
        return rc;
    /* a run not there, or without a state: the timer is taken all the
     * same (else it would be due again at once, for ever) */
    if (rc || v.mv_size < 8 || pl__get_be64(v.mv_data) != l->run) {
        c->fst = pl__err(PL_ECORRUPT,
                         "the timer of run #%llu names run '%s', which is "
                         "not that run",
                         (unsigned long long)l->run, l->id);
        return 0;
    }
    pl__taken t = {.lease = *l,
                   .info = (const uint8_t *)v.mv_data + 8,
                   .info_len = v.mv_size - 8,
                   .key_damaged = c->t.damaged};
    uint8_t key[8];
    pl__put_be64(key, l->run);
    MDB_val sk = {8, key}, sv;
    if ((rc = pl__lmdb_held(s, txn, l->run, st)) || *st)
        return rc;
    if ((rc = pl__lmdb_get(s, txn, s->state, &sk, &sv)) == MDB_NOTFOUND) {
        c->fst = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                         (unsigned long long)l->run);
        return 0;
    }
    if (rc)
        return rc;
    t.state = sv.mv_data;
    t.state_len = sv.mv_size;
    pl__buf claimed = {0};
    c->fst = c->fn(&t, &claimed, &c->drop, c->user);
    /* claimed, or refused with the run's ended state (key_damaged) */
    if (!c->fst || (c->drop && claimed.len)) {
        sv = (MDB_val){claimed.len, claimed.data};
        rc = mdb_put(txn, s->state, &sk, &sv, 0);
    }
    pl__buf_free(&claimed);
    return rc;
}

int pl__lmdb_take_due(pl__lmdb_store *s, const char *owner, int64_t lease_us,
                      pl__take_fn fn, void *user, pl__lease *out, bool *taken,
                      int64_t *next_due_us)
{
    *taken = false;
    *next_due_us = 0;
    int st = any_due(s, next_due_us);
    if (st)
        return st;
    /* a run's steps may still be in the journal of a group commit */
    if ((st = pl__lmdb_settle(s)))
        return st;
    due_ctx c = {
        {owner, lease_us, out, 1, 0, 0, false, false}, fn, user, PL_OK, false};
    st = pl__lmdb_write(s, due_body, &c);
    if (!st && !c.t.n) {
        *next_due_us = c.t.next;
        return PL_ENOTFOUND;
    }
    *taken = !st;
    if (!st && c.fst && c.drop) { /* as store.c's take: then dropped */
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        if ((c.t.damaged ? pl__lmdb_lease_purge
                         : pl__lmdb_lease_release)(s, out->run, out->gen)) {
            /* it expires on its own */
        }
        pl__errmsg_restore(saved);
    }
    return st ? st : c.fst;
}

typedef struct put_ctx {
    uint64_t run;
    const char *id;
    pl__inbox_check_fn check;
    void *user;
    const uint8_t *rec;
    size_t len;
    pl__inbox_take *take;
    pl__buf state; /* with take: the state as found, then as claimed */
    uint64_t seq;
    bool claimed; /* the state found is the one take claimed already */
} put_ctx;

/* Whether @p t claimed @p v already (pl__inbox_take.claimed). */
static bool claimed_as(const pl__inbox_take *t, const MDB_val *v)
{
    return t && t->claimed && t->expect && t->then && t->then->state.len &&
           t->expect->len == v->mv_size &&
           memcmp(t->expect->data, v->mv_data, v->mv_size) == 0;
}

/* With the delivery, take the run's lease and claim its state (see
 * pl__inbox_take): unless another owner's live lease is there, the run is
 * held apart (lmdb_journal.c), the claim refuses, or the run's next commit
 * goes with it and the record's seq is not the one the run saw.  That
 * commit is then written here too. */
static int take_claim(pl__lmdb_store *s, MDB_txn *txn, put_ctx *c, int *st)
{
    pl__inbox_take *t = c->take;
    if (t->then_seq && t->then_seq != c->seq)
        return 0; /* another delivery came first: the delivery alone */
    pl__lease l;
    int lst = 0;
    int rc = pl__lmdb_lease_peek(s, txn, c->run, &l, &lst);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (!rc && (lst || (l.expires_in_us > 0 && *l.owner &&
                        strcmp(l.owner, t->owner) != 0)))
        return 0; /* another's (or malformed): the plain path reports it */
    bool live = !rc && l.expires_in_us > 0;
    if ((rc = pl__lmdb_held(s, txn, c->run, &lst)) || lst)
        return rc;
    bool room = true; /* a run parked with a key: its wake waits for room */
    if (!live && (rc = pl__lmdb_flow_room(s, txn, c->run, &room, st)))
        return rc;
    if (!live && *st == PL_ECORRUPT) {
        /* its record damaged (lmdb_flow.c, DAMAGE): the delivery alone,
         * its timer due, and the wake that meets it fails it */
        *st = 0;
        return 0;
    }
    if (*st || !room)
        return 0;
    if (!c->claimed) { /* else the next commit writes the state */
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        pl__kvs extra = {0};
        int cst = t->claim(&c->state, &extra, t->user);
        bool none = extra.n == 0;
        pl__kvs_free(&extra);
        pl__errmsg_restore(saved);
        if (cst || NEVER(!none))
            return 0; /* refused: the delivery alone */
        uint8_t key[8];
        pl__put_be64(key, c->run);
        MDB_val k = {8, key}, v = {c->state.len, c->state.data};
        if ((rc = mdb_put(txn, s->state, &k, &v, 0)))
            return rc;
    }
    pl__lease got;
    rc = pl__lmdb_lease_take(s, txn, c->run, c->id, t->owner, t->lease_us, &got,
                             st);
    if (rc || *st)
        return rc;
    if (t->then) {
        t->then->gen = got.gen;
        if ((rc = pl__lmdb_commit_in(s, txn, t->then, st)) || *st)
            return rc;
        /* it ends the execution: the timer made due goes */
        int64_t due;
        char id[PL_MAX_RUN_ID + 1];
        if (t->then->release && !t->then->timer_us &&
            !(rc = timer_get(s, txn, c->run, &due, id, st)) && !*st)
            rc = timer_del(s, txn, c->run, due);
        if (rc == MDB_NOTFOUND)
            rc = 0;
        if (rc || *st)
            return rc;
    }
    t->taken = true;
    t->gen = got.gen;
    return 0;
}

static int put_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    put_ctx *c = user;
    uint8_t key[16];
    pl__put_be64(key, c->run);
    MDB_val k = {8, key}, v;
    int rc = pl__lmdb_get(s, txn, s->state, &k, &v);
    if (rc == MDB_NOTFOUND) {
        *st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                      (unsigned long long)c->run);
        return 0;
    }
    if (rc)
        return rc;
    c->claimed = claimed_as(c->take, &v);
    if (!c->claimed && (*st = c->check(v.mv_data, v.mv_size, c->user)))
        return 0;
    if (c->take)
        c->take->taken = false;
    if (c->take && !c->claimed) { /* copied now: a write may move its page */
        pl__buf_reset(&c->state);
        if ((*st = pl__buf_append(&c->state, v.mv_data, v.mv_size)))
            return 0;
    }
    /* the next seq: one past the run's last inbox record */
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, s->inbox, &cur)))
        return rc;
    pl__put_be64(key + 8, UINT64_MAX);
    k.mv_size = 16;
    c->seq = 1;
    rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND)
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_LAST);
    else if (!rc)
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_PREV);
    if (!rc && k.mv_size == 16 && pl__get_be64(k.mv_data) == c->run)
        c->seq = pl__get_be64((const uint8_t *)k.mv_data + 8) + 1;
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    pl__put_be64(key, c->run);
    pl__put_be64(key + 8, c->seq);
    k = (MDB_val){16, key};
    v = (MDB_val){c->len, (void *)c->rec};
    if ((rc = mdb_put(txn, s->inbox, &k, &v, MDB_NOOVERWRITE)))
        return rc;
    /* due now even when taken: should the taker die, the run is woken
     * once its lease has run out */
    if ((rc = timer_put(s, txn, c->run, c->id, pl__now_us(), st)) || *st ||
        !c->take)
        return rc;
    return take_claim(s, txn, c, st);
}

int pl__lmdb_inbox_put(pl__lmdb_store *s, uint64_t run, const char *run_id,
                       pl__inbox_check_fn check, void *user, const uint8_t *rec,
                       size_t len, pl__inbox_take *take, uint64_t *seq)
{
    if (!s->has_time)
        return no_time(s, true);
    if (take && !s->has_leases)
        take = NULL; /* a read-only store: the write fails anyway */
    put_ctx c = {run, run_id, check, user, rec, len, take, {0}, 0, false};
    int st = pl__lmdb_write(s, put_body, &c);
    pl__buf_free(&c.state);
    if (st && take)
        take->taken = false;
    if (!st)
        *seq = c.seq;
    return st;
}

/* Run @p run's inbox records in @p txn: whether it has any (*any), and
 * with @p out, each of them added there (keys their seqs).  An LMDB code;
 * *st set when @p out cannot take one. */
static int inbox_walk(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                      pl__kvs *out, bool *any, int *st)
{
    *any = false;
    MDB_cursor *cur;
    uint8_t key[16];
    pl__put_be64(key, run);
    pl__put_be64(key + 8, 0);
    MDB_val k = {16, key}, v;
    int rc = mdb_cursor_open(txn, s->inbox, &cur);
    if (rc)
        return rc;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE); !rc && !*st;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 16 || pl__get_be64(k.mv_data) != run)
            break;
        *any = true;
        if (!out)
            break;
        *st = pl__kvs_add(out, (const uint8_t *)k.mv_data + 8, 8, v.mv_data,
                          v.mv_size);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int pl__lmdb_inbox_empty(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                         bool *empty)
{
    bool any = false;
    int st = PL_OK;
    int rc = s->has_time ? inbox_walk(s, txn, run, NULL, &any, &st) : 0;
    *empty = !any;
    return rc;
}

int pl__lmdb_inbox_read(pl__lmdb_store *s, uint64_t run, pl__kvs *out)
{
    pl__kvs_reset(out);
    if (!s->has_time)
        return PL_OK;
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    bool any;
    int rc = inbox_walk(s, txn, run, out, &any, &st);
    if (rc && !st)
        st = pl__lmdb_err(s, rc, "reading an inbox");
    pl__lmdb_txn_abort(s, txn);
    return st;
}
