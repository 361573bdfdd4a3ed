/*
 * lmdb_delete.c -- deleting runs on the LMDB store (DELETING in store.h).
 *
 * LAYOUT: two databases beside those of lmdb_store.c, created on the first
 * writable open (a store made before them has no deleted runs).
 *
 *   | database | key               | value                                |
 *   |----------|-------------------|--------------------------------------|
 *   | tombs    | run id (bytes)    | tombstone record (runrec.c)          |
 *   | purge    | u64 BE run number | purge record (runrec.c): a deleted   |
 *   |          |                   | run whose steps are being removed    |
 *
 * A delete is one write transaction for all the runs it is given: their
 * `runs`, `state` and `leases` records go, and their places in the queue
 * (`flow`: lmdb_flow.c), timers and inboxes (lmdb_time.c); a tombstone and
 * a purge record come.  Their steps stay behind the purge record, unreachable (nothing
 * maps an id to that number any more, and numbers are never given again),
 * and pl__lmdb_purge() removes them a bounded number per transaction, so
 * no transaction holds LMDB's one writer lock for long.  A kill at any
 * instant leaves a run whole (before the delete's commit) or gone (after):
 * the next purge goes on where the last one stopped.  Pages freed are
 * reused by later writes (LMDB's free list), so a store whose runs are
 * pruned as fast as they come stops growing.
 *
 * A purge removes steps only under a number that has no state record: a
 * damaged purge key naming a live run stops the purge with PL_ECORRUPT,
 * removing nothing of it.
 */
#include "lmdb_int.h"
#include "runrec.h"

#include <stdio.h>
#include <stdlib.h>

int pl__lmdb_tombs_open(pl__lmdb_store *s, MDB_txn *txn, bool create)
{
    unsigned fl = create ? MDB_CREATE : 0;
    int rc = mdb_dbi_open(txn, "tombs", fl, &s->tombs);
    if (!rc)
        rc = mdb_dbi_open(txn, "purge", fl, &s->purge);
    if (rc == MDB_NOTFOUND && !create) {
        s->has_tombs = false; /* a read-only open of an older store */
        return 0;
    }
    s->has_tombs = !rc;
    return rc;
}

static int no_tombs(const pl__lmdb_store *s)
{
    return pl__err(PL_ESTATE, "store '%s' is open read-only", s->path);
}

int pl__lmdb_tomb_taken(pl__lmdb_store *s, MDB_txn *txn, const char *id,
                        bool *taken, int *st)
{
    *taken = false;
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = pl__lmdb_get(s, txn, s->tombs, &k, &v);
    if (rc)
        return rc == MDB_NOTFOUND ? 0 : rc;
    pl__tomb t;
    if ((*st = pl__tomb_decode(&t, id, v.mv_data, v.mv_size)))
        return 0;
    if (t.expires_us > pl__now_us()) {
        *taken = true;
        return 0;
    }
    return mdb_del(txn, s->tombs, &k, NULL);
}

/* ---- delete -------------------------------------------------------------- */

typedef struct delete_ctx {
    pl__delete *d;
    size_t n;
} delete_ctx;

/* Drop run @p num's timer (and its entry in `due`) and its inbox: what a
 * run that has ended may still have beside it (lmdb_time.c). */
static int drop_time(pl__lmdb_store *s, MDB_txn *txn, const uint8_t num[8],
                     int *st)
{
    if (!s->has_time)
        return 0;
    MDB_val k = {8, (void *)num}, v;
    int rc = pl__lmdb_get(s, txn, s->timers, &k, &v);
    if (!rc) {
        int64_t due;
        char id[PL_MAX_RUN_ID + 1];
        if ((*st = pl__timer_decode(&due, id, v.mv_data, v.mv_size)))
            return 0;
        uint8_t dk[16];
        pl__put_be64(dk, (uint64_t)due);
        memcpy(dk + 8, num, 8);
        MDB_val dkey = {16, dk};
        if ((rc = mdb_del(txn, s->due, &dkey, NULL)) && rc != MDB_NOTFOUND)
            return rc;
        if ((rc = mdb_del(txn, s->timers, &k, NULL)))
            return rc;
    } else if (rc != MDB_NOTFOUND) {
        return rc;
    }
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, s->inbox, &cur)))
        return rc;
    MDB_val ik = k;
    rc = pl__lmdb_cursor_get(s, cur, &ik, &v, MDB_SET_RANGE);
    while (!rc && ik.mv_size >= 8 && !memcmp(ik.mv_data, num, 8) &&
           !(rc = mdb_cursor_del(cur, 0)))
        rc = pl__lmdb_cursor_get(s, cur, &ik, &v, MDB_NEXT);
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Delete one run in @p txn, or set its rc and leave it. */
static int delete_one(pl__lmdb_store *s, MDB_txn *txn, pl__delete *d, int *st)
{
    d->rc = PL_OK;
    MDB_val k = {strlen(d->id), (void *)d->id}, v;
    int rc = pl__lmdb_get(s, txn, s->runs, &k, &v);
    if (rc == MDB_NOTFOUND ||
        (!rc && (v.mv_size < 8 || pl__get_be64(v.mv_data) != d->num))) {
        d->rc = PL_ENOTFOUND;
        return 0;
    }
    if (rc)
        return rc;
    uint8_t key[8];
    pl__put_be64(key, d->num);
    MDB_val nk = {8, key};
    rc = pl__lmdb_get(s, txn, s->state, &nk, &v);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (rc || v.mv_size != d->state_len ||
        memcmp(v.mv_data, d->state, d->state_len) != 0) {
        d->rc = PL_EBUSY; /* written since it was read */
        return 0;
    }
    /* steps of it held apart, or in the journal by another process */
    int hst = PL_OK;
    if ((rc = pl__lmdb_held(s, txn, d->num, &hst)) ||
        (!hst && (rc = pl__lmdb_may_write(s, txn, d->num, &hst))))
        return rc;
    bool busy = hst != PL_OK;
    if (!busy && (rc = pl__lmdb_lease_drop(s, txn, d->num, &busy, st)))
        return rc;
    if (*st)
        return 0;
    if (busy) {
        d->rc = PL_EBUSY;
        return 0;
    }
    pl__buf purge = {0};
    if ((*st = pl__purge_encode(&purge, d->num, d->id)))
        return 0;
    MDB_val pv = {purge.len, purge.data};
    if (!(rc = drop_time(s, txn, key, st)) && !*st &&
        !(rc = mdb_del(txn, s->runs, &k, NULL)) &&
        !(rc = mdb_del(txn, s->state, &nk, NULL)) &&
        !(rc = mdb_put(txn, s->purge, &nk, &pv, 0)) && d->tomb) {
        MDB_val tv = {d->tomb->len, d->tomb->data};
        rc = mdb_put(txn, s->tombs, &k, &tv, 0);
    }
    pl__buf_free(&purge);
    return rc;
}

static int delete_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    delete_ctx *c = user;
    for (size_t i = 0; i < c->n; i++) {
        int rc = delete_one(s, txn, &c->d[i], st);
        if (rc || *st)
            return rc;
    }
    return 0;
}

int pl__lmdb_delete(pl__lmdb_store *s, pl__delete *d, size_t n)
{
    if (!s->has_tombs)
        return no_tombs(s);
    delete_ctx c = {d, n};
    return pl__lmdb_write(s, delete_body, &c);
}

/* ---- purge --------------------------------------------------------------- */

typedef struct purge_ctx {
    size_t max, removed;
    bool more;
} purge_ctx;

/* Remove up to c->max steps of the deleted runs, first purge record first;
 * a run all of whose steps are gone loses its purge record. */
static int purge_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    purge_ctx *c = user;
    c->removed = 0;
    c->more = false;
    MDB_cursor *pc = NULL, *sc = NULL;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, s->purge, &pc);
    if (!rc)
        rc = mdb_cursor_open(txn, s->steps, &sc);
    if (!rc)
        rc = pl__lmdb_cursor_get(s, pc, &k, &v, MDB_FIRST);
    while (!rc && c->removed < c->max) {
        char id[PL_MAX_RUN_ID + 1];
        if (k.mv_size != 8) {
            *st = pl__err(PL_ECORRUPT,
                          "store '%s': a purge record has a key of %zu bytes",
                          s->path, k.mv_size);
            break;
        }
        uint8_t num[8];
        memcpy(num, k.mv_data, 8);
        uint64_t run = pl__get_be64(num);
        if ((*st = pl__purge_decode(id, run, v.mv_data, v.mv_size)))
            break;
        MDB_val nk = {8, num}, sv;
        if ((rc = pl__lmdb_get(s, txn, s->state, &nk, &sv)) != MDB_NOTFOUND) {
            if (!rc)
                *st = pl__err(
                    PL_ECORRUPT,
                    "store '%s': run #%llu is to be purged but has a state record: nothing of it is removed",
                    s->path, (unsigned long long)run);
            break;
        }
        MDB_val sk = nk;
        rc = pl__lmdb_cursor_get(s, sc, &sk, &sv, MDB_SET_RANGE);
        while (!rc && sk.mv_size >= 8 && memcmp(sk.mv_data, num, 8) == 0 &&
               c->removed < c->max) {
            if ((rc = mdb_cursor_del(sc, 0)))
                break;
            c->removed++;
            /* after a delete the cursor's next is the key that followed */
            rc = pl__lmdb_cursor_get(s, sc, &sk, &sv, MDB_NEXT);
        }
        bool rest = !rc && sk.mv_size >= 8 && memcmp(sk.mv_data, num, 8) == 0;
        if (rc && rc != MDB_NOTFOUND)
            break;
        if (rest) {
            c->more = true;
            rc = 0;
            break;
        }
        /* all its steps are gone: so is its purge record */
        if ((rc = mdb_del(txn, s->purge, &nk, NULL)))
            break;
        k = nk;
        rc = pl__lmdb_cursor_get(s, pc, &k, &v, MDB_SET_RANGE);
        if (!rc && c->removed >= c->max)
            c->more = true;
    }
    if (sc)
        mdb_cursor_close(sc);
    if (pc)
        mdb_cursor_close(pc);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int pl__lmdb_purge(pl__lmdb_store *s, size_t max_steps, size_t *removed,
                   bool *more)
{
    *removed = 0;
    *more = false;
    if (!s->has_tombs)
        return s->read_only ? no_tombs(s) : PL_OK;
    purge_ctx c = {max_steps ? max_steps : 1, 0, false};
    int st = pl__lmdb_write(s, purge_body, &c);
    if (!st) {
        *removed = c.removed;
        *more = c.more;
    }
    return st;
}

/* ---- tombstones ---------------------------------------------------------- */

int pl__lmdb_tomb_get(pl__lmdb_store *s, const char *id, pl__buf *rec)
{
    if (!s->has_tombs)
        return pl__err(PL_ENOTFOUND, "no tombstone of run '%s'", id);
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = pl__lmdb_get(s, txn, s->tombs, &k, &v);
    if (rc == MDB_NOTFOUND)
        st = pl__err(PL_ENOTFOUND, "no tombstone of run '%s'", id);
    else if (rc)
        st = pl__lmdb_err(s, rc, "reading a tombstone");
    else {
        pl__buf_reset(rec);
        st = pl__buf_append(rec, v.mv_data, v.mv_size);
    }
    pl__lmdb_txn_abort(s, txn);
    return st;
}

typedef struct expire_ctx {
    int64_t now;
    size_t max, removed;
    bool more;
    pl__buf *after; /* the last id looked at (len 0: none yet) */
} expire_ctx;

static int expire_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    expire_ctx *c = user;
    c->removed = 0;
    c->more = false;
    MDB_cursor *cur;
    MDB_val k, v;
    size_t seen = 0;
    int rc = mdb_cursor_open(txn, s->tombs, &cur);
    if (rc)
        return rc;
    /* tombstones are in id order, not expiry order: look at a bounded
     * number of them after the last one looked at, removing the expired
     * ones */
    k.mv_size = c->after->len;
    k.mv_data = c->after->data;
    rc = pl__lmdb_cursor_get(s, cur, &k, &v,
                             k.mv_size ? MDB_SET_RANGE : MDB_FIRST);
    if (!rc && k.mv_size == c->after->len &&
        memcmp(k.mv_data, c->after->data, k.mv_size) == 0)
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
    while (!rc && seen < c->max * 4 && c->removed < c->max) {
        char id[PL_MAX_RUN_ID + 1];
        pl__tomb t;
        seen++;
        if (!k.mv_size || k.mv_size > PL_MAX_RUN_ID) {
            *st = pl__err(PL_ECORRUPT,
                          "store '%s': a tombstone has a key of %zu bytes",
                          s->path, k.mv_size);
            break;
        }
        memcpy(id, k.mv_data, k.mv_size);
        id[k.mv_size] = '\0';
        if ((*st = pl__tomb_decode(&t, id, v.mv_data, v.mv_size)))
            break;
        pl__buf_reset(c->after);
        if ((*st = pl__buf_append(c->after, id, k.mv_size)))
            break;
        if (t.expires_us <= c->now && (rc = mdb_cursor_del(cur, 0)))
            break;
        c->removed += t.expires_us <= c->now;
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
    }
    c->more = !rc && !*st;
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int pl__lmdb_tombs_expire(pl__lmdb_store *s, int64_t now_us, size_t max,
                          pl__buf *after, size_t *removed, bool *more)
{
    *removed = 0;
    *more = false;
    if (!s->has_tombs)
        return s->read_only ? no_tombs(s) : PL_OK;
    expire_ctx c = {now_us, max ? max : 1, 0, false, after};
    int st = pl__lmdb_write(s, expire_body, &c);
    if (!st) {
        *removed = c.removed;
        *more = c.more;
    }
    return st;
}
