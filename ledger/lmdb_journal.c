/*
 * lmdb_journal.c -- the group commit journal of the LMDB store.
 *
 * JOURNAL (group commit): a group of concurrent runs' batches would dirty
 * one leaf page per run, and a disk pays for every scattered page it syncs.
 * So a group commit of two or more batches appends all its steps as one
 * record to `journal` (u64 BE sequence -> entries: u32 count, then per step
 * u16 key length, key, u32 value length, value): a few contiguous pages per
 * fsync.  (A lone batch is put in place: it dirties one leaf either way.)
 * Once the journal fills JOURNAL_MAX_PAGES pages, a transaction of its own
 * (pl__lmdb_maintain, which the group's leader runs after it has woken the
 * group) moves its steps, in key order, to `steps` and empties it, writing
 * each run's leaves once for many commits.  Readers never look in the
 * journal: the engine calls pl__lmdb_settle() (which does that move)
 * before reading steps that may be there.  So a run whose earlier steps
 * are journaled and later ones in place reads the same as any other: the
 * move puts each step at its own key.  Everything happens inside LMDB
 * transactions, so a crash leaves either the journal record or its moved
 * steps, never half of either.
 *
 * JOURNAL RECORD (the value under a u64 BE sequence number, from 1)
 *
 *   | bytes | field                                                     |
 *   |-------|-----------------------------------------------------------|
 *   | 4     | u32 BE: the number of steps that follow                   |
 *   | 2     | per step: u16 BE key length,                              |
 *   | klen  |   the step's key (keys.c),                                |
 *   | 4     |   u32 BE value length,                                    |
 *   | vlen  |   the step's record (record.c)                            |
 *
 *   Nothing may follow the last step.
 */
#include "lmdb_int.h"

#include <errno.h>
#include <stdlib.h>

/* The journal is moved to its place once it holds this many pages: the more
 * commits one move covers, the fewer times each run's leaf is written. */
#define JOURNAL_MAX_PAGES 2048

/* ---- moving the journal to its place ------------------------------------- */

typedef struct jstep {
    MDB_val k, v;
    uint64_t run; /* the key's first 8 bytes */
    size_t at;    /* position in the journal */
} jstep;

static int key_cmp(const MDB_val *x, const MDB_val *y)
{
    size_t n = x->mv_size < y->mv_size ? x->mv_size : y->mv_size;
    int c = memcmp(x->mv_data, y->mv_data, n);
    return c ? c : (x->mv_size > y->mv_size) - (x->mv_size < y->mv_size);
}

static int jstep_cmp_key(const void *a, const void *b)
{
    return key_cmp(&((const jstep *)a)->k, &((const jstep *)b)->k);
}

static int jstep_cmp_run(const void *a, const void *b)
{
    const jstep *x = a, *y = b;
    if (x->run != y->run)
        return x->run < y->run ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/*
 * Sort the journal's steps into key order.  A run appends its steps in key
 * order, so sorting by run and then journal position gives key order with
 * integer compares only; one pass checks that, and anything else (which
 * the engine does not write today) falls back to comparing whole keys.
 */
static void sort_steps(jstep *all, size_t n)
{
    qsort(all, n, sizeof *all, jstep_cmp_run);
    for (size_t i = 1; i < n; i++) {
        if (key_cmp(&all[i - 1].k, &all[i].k) >= 0) {
            qsort(all, n, sizeof *all, jstep_cmp_key);
            return;
        }
    }
}

/* Move every journal record to `steps`, in key order, and empty it. */
static int checkpoint_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    (void)user;
    MDB_cursor *cur;
    MDB_val k, v;
    jstep *all = NULL;
    size_t n = 0, cap = 0;
    /* LMDB's pointers into the journal's pages are valid only until the
     * next update: the records are copied out before any step is put */
    pl__buf copy = {0};
    size_t *ends = NULL, n_recs = 0, cap_recs = 0;
    int rc = mdb_cursor_open(txn, s->journal, &cur);
    if (rc)
        return rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        size_t *grown = pl__grow(ends, &cap_recs, n_recs, sizeof *grown, 16);
        if (!grown || pl__buf_append(&copy, v.mv_data, v.mv_size)) {
            free(grown ? grown : ends);
            ends = NULL;
            rc = ENOMEM;
            break;
        }
        ends = grown;
        ends[n_recs++] = copy.len;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    for (size_t j = 0; !rc && j < n_recs; j++) {
        size_t from = j ? ends[j - 1] : 0;
        const uint8_t *p = copy.data + from, *end = copy.data + ends[j];
        if (end - p < 4) {
            rc = MDB_CORRUPTED;
            break;
        }
        uint32_t count = pl__get_be32(p);
        p += 4;
        for (uint32_t i = 0; i < count; i++) {
            if (end - p < 2 ||
                (size_t)(end - p) < 2u + (p[0] << 8 | p[1]) + 4u) {
                rc = MDB_CORRUPTED;
                break;
            }
            size_t klen = (size_t)(p[0] << 8 | p[1]);
            const uint8_t *key = p + 2;
            size_t vlen = pl__get_be32(key + klen);
            const uint8_t *val = key + klen + 4;
            /* a step key: run (8), path components and seq (4 each) */
            if (klen < 12 || klen > PL__KEY_MAX || (klen - 8) % 4 ||
                (size_t)(end - val) < vlen) {
                rc = MDB_CORRUPTED;
                break;
            }
            jstep *a = pl__grow(all, &cap, n, sizeof *a, 256);
            if (!a) {
                rc = ENOMEM;
                break;
            }
            all = a;
            all[n] = (jstep){
                {klen, (void *)key}, {vlen, (void *)val}, pl__get_be64(key), n};
            n++;
            p = val + vlen;
        }
        if (!rc && p != end)
            rc = MDB_CORRUPTED; /* bytes after the last step */
        if (rc)
            break;
    }
    if (rc == MDB_CORRUPTED)
        *st = pl__err(PL_ECORRUPT,
                      "store '%s': a journal record is "
                      "malformed",
                      s->path);
    if (!rc && n) {
        sort_steps(all, n);
        bool append = true;
        for (size_t i = 0; !rc && i < n; i++) {
            rc = pl__lmdb_put_step(s, txn, &all[i].k, &all[i].v, &append,
                                   all[i].run, st);
            if (rc == MDB_KEYEXIST) {
                /* moved already?  Only an identical step is harmless. */
                MDB_val have;
                if (!mdb_get(txn, s->steps, &all[i].k, &have) &&
                    have.mv_size == all[i].v.mv_size &&
                    !memcmp(have.mv_data, all[i].v.mv_data, have.mv_size)) {
                    *st = PL_OK;
                    rc = 0;
                }
            }
        }
    }
    free(all);
    free(ends);
    pl__buf_free(&copy);
    if (!rc)
        rc = mdb_drop(txn, s->journal, 0);
    return rc;
}

/* ---- appending ----------------------------------------------------------- */

int pl__lmdb_journal_append(pl__lmdb_store *s, MDB_txn *txn,
                            const commit_ctx *c)
{
    size_t size = 4, count = 0;
    for (size_t b = 0; b < c->n; b++) {
        const pl__kvs *l = &c->batches[b]->steps;
        for (size_t i = 0; i < l->n; i++)
            size += 2 + l->e[i].klen + 4 + l->e[i].vlen;
        count += l->n;
    }
    if (count) {
        MDB_cursor *cur;
        MDB_val k, v;
        uint64_t seq = 1;
        int rc = mdb_cursor_open(txn, s->journal, &cur);
        if (rc)
            return rc;
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
        mdb_cursor_close(cur);
        if (!rc && k.mv_size == 8)
            seq = pl__get_be64(k.mv_data) + 1;
        else if (rc != MDB_NOTFOUND)
            return rc ? rc : MDB_CORRUPTED;
        uint8_t key[8];
        pl__put_be64(key, seq);
        k = (MDB_val){8, key};
        v = (MDB_val){size, NULL};
        if ((rc = mdb_put(txn, s->journal, &k, &v, MDB_APPEND | MDB_RESERVE)))
            return rc;
        uint8_t *p = v.mv_data;
        pl__put_be32(p, (uint32_t)count);
        p += 4;
        for (size_t b = 0; b < c->n; b++) {
            const pl__kvs *l = &c->batches[b]->steps;
            for (size_t i = 0; i < l->n; i++) {
                p[0] = (uint8_t)(l->e[i].klen >> 8);
                p[1] = (uint8_t)l->e[i].klen;
                memcpy(p + 2, pl__kvs_key(l, i), l->e[i].klen);
                p += 2 + l->e[i].klen;
                pl__put_be32(p, (uint32_t)l->e[i].vlen);
                memcpy(p + 4, pl__kvs_val(l, i), l->e[i].vlen);
                p += 4 + l->e[i].vlen;
            }
        }
    }
    MDB_stat ms;
    int rc = mdb_stat(txn, s->journal, &ms);
    if (!rc && ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages >=
                   JOURNAL_MAX_PAGES)
        atomic_store_explicit(&s->journal_full, true, memory_order_relaxed);
    return rc;
}

void pl__lmdb_maintain(pl__lmdb_store *s)
{
    if (atomic_load_explicit(&s->journal_full, memory_order_relaxed) &&
        pl__lmdb_settle(s) == PL_OK)
        atomic_store_explicit(&s->journal_full, false, memory_order_relaxed);
}

int pl__lmdb_settle(pl__lmdb_store *s)
{
    MDB_txn *txn;
    size_t seen;
    MDB_stat ms;
    if (s->read_only)
        return PL_OK; /* its writers move it */
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    int rc = mdb_stat(txn, s->journal, &ms);
    pl__lmdb_txn_abort(s, txn);
    if (rc)
        return pl__lmdb_err(s, rc, "reading the journal");
    return ms.ms_entries ? pl__lmdb_write(s, checkpoint_body, NULL) : PL_OK;
}
