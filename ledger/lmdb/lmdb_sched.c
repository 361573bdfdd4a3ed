/*
 * lmdb_sched.c -- schedules on the LMDB store (see SCHEDULES in store.h).
 *
 * LAYOUT: the `schedules` database, created on the first writable open (a
 * store made before it simply has none).
 *
 *   | key                  | value                                        |
 *   |----------------------|----------------------------------------------|
 *   | the schedule's name  | its record (ledger/codec/schedrec.c)         |
 *
 * A schedule is written by a commit (pl__batch.sched_*), in the commit's
 * one write transaction; a new one only while the database holds fewer
 * than PL__SCHED_MAX, counted in that transaction (LMDB's one writer at a
 * time makes the count and the put one step for every process).
 */
#include "lmdb_int.h"

#include <stdlib.h>

int pl__lmdb_sched_open(pl__lmdb_store *s, MDB_txn *txn, bool create)
{
    int rc = mdb_dbi_open(txn, "schedules", create ? MDB_CREATE : 0,
                          &s->schedules);
    if (rc == MDB_NOTFOUND && !create) {
        s->has_schedules = false; /* a read-only open of an older store */
        return 0;
    }
    s->has_schedules = !rc;
    return rc;
}

int pl__lmdb_sched_batch(pl__lmdb_store *s, MDB_txn *txn, const pl__batch *bt,
                         int *st)
{
    if (!bt->sched_name)
        return 0;
    MDB_val k = {strlen(bt->sched_name), (void *)bt->sched_name}, v;
    if (!bt->sched_rec) {
        int rc = mdb_del(txn, s->schedules, &k, NULL);
        return rc == MDB_NOTFOUND ? 0 : rc;
    }
    int rc = pl__lmdb_get(s, txn, s->schedules, &k, &v);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    bool found = !rc,
         over = found && bt->sched_expect &&
                v.mv_size == bt->sched_expect->len &&
                memcmp(v.mv_data, bt->sched_expect->data, v.mv_size) == 0;
    if (bt->sched_strict && (bt->sched_expect ? !over : found)) {
        *st = pl__err(PL_EBUSY, PL__SCHED_CHANGED_MSG, bt->sched_name);
        return 0;
    }
    /* only over the record read: another writer's change stands */
    if (bt->sched_expect && !over)
        return 0;
    /* a new schedule past the most a store keeps would make it read as
     * damaged (pl__lmdb_scheds()) */
    MDB_stat ms;
    if (!found && !(rc = mdb_stat(txn, s->schedules, &ms)) &&
        ms.ms_entries >= PL__SCHED_MAX) {
        *st = pl__err(PL_ELIMIT, PL__SCHED_FULL_MSG, bt->sched_name,
                      PL__SCHED_MAX);
        return 0;
    }
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    v.mv_size = bt->sched_rec->len;
    v.mv_data = bt->sched_rec->data;
    return mdb_put(txn, s->schedules, &k, &v, 0);
}

int pl__lmdb_scheds(pl__lmdb_store *s, pl__kvs *out)
{
    pl__kvs_reset(out);
    if (!s->has_schedules)
        return PL_OK;
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->schedules, &cur);
    if (!rc) {
        MDB_val k, v;
        for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_FIRST); !rc && !st;
             rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
            if (out->n == PL__SCHED_MAX) {
                st = pl__err(PL_ECORRUPT,
                             "store '%s' holds more than %d schedules", s->path,
                             PL__SCHED_MAX);
                break;
            }
            st = pl__kvs_add(out, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
        }
        mdb_cursor_close(cur);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    if (rc && !st)
        st = pl__lmdb_err(s, rc, "reading the schedules");
    pl__lmdb_txn_abort(s, txn);
    return st;
}
