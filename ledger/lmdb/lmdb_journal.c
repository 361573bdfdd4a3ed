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
 *
 * CONFLICTS.  A step is journaled only if it can be moved into place later:
 * a run has one writer, so the append refuses (PL_EBUSY, the caller told
 * nothing is durable) a step whose key is in `steps` already, and a batch
 * of a run that another process has steps of in the journal; `writers`
 * (u64 BE run number -> the writer's pid and start time, u64 BE each)
 * names each run's journal writer until the journal is moved, and a write
 * in place is refused the same way while another writer's steps of its run
 * wait in the journal.  A journal that still cannot be moved (written by an
 * older build, or changed) stops only the runs it concerns: their
 * journaled steps go to `held` (u64 BE run, u64 BE journal sequence, u32
 * BE position -> the step's entry as in the journal record), every other
 * step is moved, and reading, continuing or writing a held run is PL_EBUSY
 * naming it.  A whole record that does not parse is still PL_ECORRUPT for
 * the store, since it names no run.
 */
#include "lmdb_int.h"

#include <errno.h>
#include <stdlib.h>

/* The journal is moved to its place once it holds this many pages: the more
 * commits one move covers, the fewer times each run's leaf is written. */
#define JOURNAL_MAX_PAGES 2048

/* ---- moving the journal to its place ------------------------------------- */

static int key_cmp(const MDB_val *x, const MDB_val *y)
{
    size_t n = x->mv_size < y->mv_size ? x->mv_size : y->mv_size;
    int c = memcmp(x->mv_data, y->mv_data, n);
    return c ? c : (x->mv_size > y->mv_size) - (x->mv_size < y->mv_size);
}

typedef struct jstep {
    MDB_val k, v;
    uint64_t run;  /* the key's first 8 bytes */
    size_t at;     /* position in the journal */
    uint64_t jseq; /* its journal record */
    uint32_t idx;  /* its position in that record */
} jstep;

/* A move of the journal, and whether it must look for conflicts first. */
typedef struct move_ctx {
    bool careful;  /* find the runs whose steps conflict, and hold them */
    bool conflict; /* a move that was not careful met one */
} move_ctx;

static bool same_val(const MDB_val *a, const MDB_val *b)
{
    return a->mv_size == b->mv_size &&
           !memcmp(a->mv_data, b->mv_data, a->mv_size);
}

/* ---- held runs and the journal's writers --------------------------------- */

int pl__lmdb_held(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    MDB_stat ms;
    if (!s->has_held)
        return 0;
    int rc = mdb_stat(txn, s->held, &ms);
    if (rc || !ms.ms_entries)
        return rc;
    uint8_t key[8];
    pl__put_be64(key, run);
    MDB_cursor *cur;
    MDB_val k = {8, key}, v;
    if ((rc = mdb_cursor_open(txn, s->held, &cur)))
        return rc;
    rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
    bool held = !rc && k.mv_size >= 8 && !memcmp(k.mv_data, key, 8);
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (held)
        *st = pl__err(
            PL_EBUSY,
            "store '%s': run #%llu is stopped: steps of it that a group commit journaled conflict with steps in place (two writers on one run) and are held apart; its other steps, and every other run, are unaffected",
            s->path, (unsigned long long)run);
    return 0;
}

/* *mine: this process is the run's journal writer already. */
static int check_writer(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                        bool *mine, int *st)
{
    *mine = false;
    int rc = pl__lmdb_held(s, txn, run, st);
    if (rc || *st || !s->has_held)
        return rc;
    MDB_stat ms;
    if ((rc = mdb_stat(txn, s->writers, &ms)) || !ms.ms_entries)
        return rc;
    uint8_t key[8];
    pl__put_be64(key, run);
    MDB_val k = {8, key}, v;
    rc = pl__lmdb_get(s, txn, s->writers, &k, &v);
    if (rc)
        return rc == MDB_NOTFOUND ? 0 : rc;
    MDB_val me = {sizeof s->writer, s->writer};
    if (!(*mine = same_val(&v, &me)))
        *st = pl__err(
            PL_EBUSY,
            "store '%s': run #%llu: another process has steps of this run in the group-commit journal (two writers on one run); nothing of this commit was written",
            s->path, (unsigned long long)run);
    return 0;
}

int pl__lmdb_may_write(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    bool mine;
    return check_writer(s, txn, run, &mine, st);
}

/* Keep a step of a held run apart, under its journal position. */
static int hold_step(pl__lmdb_store *s, MDB_txn *txn, const jstep *j)
{
    uint8_t key[20];
    memcpy(key, j->k.mv_data, 8);
    pl__put_be64(key + 8, j->jseq);
    pl__put_be32(key + 16, j->idx);
    MDB_val k = {sizeof key, key},
            v = {2 + j->k.mv_size + 4 + j->v.mv_size, NULL};
    int rc = mdb_put(txn, s->held, &k, &v, MDB_RESERVE);
    if (rc)
        return rc;
    uint8_t *p = v.mv_data;
    p[0] = (uint8_t)(j->k.mv_size >> 8);
    p[1] = (uint8_t)j->k.mv_size;
    memcpy(p + 2, j->k.mv_data, j->k.mv_size);
    pl__put_be32(p + 2 + j->k.mv_size, (uint32_t)j->v.mv_size);
    memcpy(p + 6 + j->k.mv_size, j->v.mv_data, j->v.mv_size);
    return 0;
}

/*
 * The runs of the sorted steps @p all whose steps cannot be moved: a key
 * in place with another value, or journaled twice with two.  Runs come out
 * in order, each once.
 */
static int find_conflicts(pl__lmdb_store *s, MDB_txn *txn, const jstep *all,
                          size_t n, uint64_t **runs, size_t *n_runs)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
        bool bad;
        if (i && !key_cmp(&all[i - 1].k, &all[i].k)) {
            bad = !same_val(&all[i - 1].v, &all[i].v);
        } else {
            MDB_val have;
            int rc = pl__lmdb_get(s, txn, s->steps, (MDB_val *)&all[i].k,
                                  &have);
            if (rc && rc != MDB_NOTFOUND)
                return rc;
            bad = !rc && !same_val(&have, &all[i].v);
        }
        if (!bad || (*n_runs && (*runs)[*n_runs - 1] == all[i].run))
            continue;
        uint64_t *grown = pl__grow(*runs, &cap, *n_runs, sizeof *grown, 8);
        if (!grown)
            return ENOMEM;
        *runs = grown;
        (*runs)[(*n_runs)++] = all[i].run;
    }
    return 0;
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
    move_ctx *m = user;
    MDB_cursor *cur;
    MDB_val k, v;
    jstep *all = NULL;
    size_t n = 0, cap = 0;
    uint64_t *held = NULL, *jseqs = NULL;
    size_t n_held = 0, cap_seqs = 0;
    /* LMDB's pointers into the journal's pages are valid only until the
     * next update: the records are copied out before any step is put */
    pl__buf copy = {0};
    size_t *ends = NULL, n_recs = 0, cap_recs = 0;
    int rc = mdb_cursor_open(txn, s->journal, &cur);
    if (rc)
        return rc;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_FIRST); !rc;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        size_t *grown = pl__grow(ends, &cap_recs, n_recs, sizeof *grown, 16);
        if (grown)
            ends = grown;
        size_t cap_before = cap_seqs;
        uint64_t *seqs = pl__grow(jseqs, &cap_seqs, n_recs, sizeof *seqs, 16);
        if (seqs)
            jseqs = seqs;
        else
            cap_seqs = cap_before;
        if (!grown || !seqs || pl__buf_append(&copy, v.mv_data, v.mv_size)) {
            rc = ENOMEM;
            break;
        }
        jseqs[n_recs] = k.mv_size == 8 ? pl__get_be64(k.mv_data) : 0;
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
            all[n] = (jstep){{klen, (void *)key},
                             {vlen, (void *)val},
                             pl__get_be64(key),
                             n,
                             jseqs[j],
                             i};
            n++;
            p = val + vlen;
        }
        if (!rc && p != end)
            rc = MDB_CORRUPTED; /* bytes after the last step */
        if (rc)
            break;
    }
    if (rc == MDB_CORRUPTED)
        *st = pl__err(PL_ECORRUPT, "store '%s': a journal record is malformed",
                      s->path);
    if (!rc && n) {
        sort_steps(all, n);
        if (m->careful)
            rc = find_conflicts(s, txn, all, n, &held, &n_held);
        bool append = true;
        size_t h = 0; /* held[h] is the next held run, in key order */
        for (size_t i = 0; !rc && !*st && i < n; i++) {
            while (h < n_held && held[h] < all[i].run)
                h++;
            if (h < n_held && held[h] == all[i].run) {
                rc = hold_step(s, txn, &all[i]);
                continue;
            }
            rc = pl__lmdb_put_step(s, txn, &all[i].k, &all[i].v, &append,
                                   all[i].run, st);
            if (rc == MDB_KEYEXIST) {
                /* moved already?  Only an identical step is harmless. */
                MDB_val have;
                *st = PL_OK;
                if (!pl__lmdb_get(s, txn, s->steps, &all[i].k, &have) &&
                    same_val(&have, &all[i].v)) {
                    rc = 0;
                } else if (!m->careful) {
                    m->conflict = true; /* abort; a careful move follows */
                } else if (NEVER(m->careful)) {
                    /* find_conflicts() held its run */
                    rc = 0;
                    *st = pl__err(
                        PL_ECORRUPT,
                        "store '%s': a journaled step of run #%llu cannot be moved",
                        s->path, (unsigned long long)all[i].run);
                }
            }
        }
    }
    free(all);
    free(ends);
    free(jseqs);
    free(held);
    pl__buf_free(&copy);
    if (rc == ENOMEM)
        *st = pl__err(PL_ENOMEM, "out of memory moving the journal");
    if (!rc && !*st)
        rc = mdb_drop(txn, s->journal, 0);
    if (!rc && !*st)
        rc = mdb_drop(txn, s->writers, 0);
    return rc;
}

/* ---- appending ----------------------------------------------------------- */

/*
 * Can the steps of batch @p bt be moved into place later (CONFLICTS above)?
 * Records this process as its run's journal writer.
 */
static int may_journal(pl__lmdb_store *s, MDB_txn *txn, const pl__batch *bt,
                       int *st)
{
    const pl__kvs *l = &bt->steps;
    bool mine;
    int rc = check_writer(s, txn, bt->run, &mine, st);
    if (rc || *st)
        return rc;
    for (size_t i = 0; i < l->n; i++) {
        MDB_val k = {l->e[i].klen, (void *)pl__kvs_key(l, i)}, have;
        rc = pl__lmdb_get(s, txn, s->steps, &k, &have);
        if (!rc) {
            *st = pl__err(
                PL_EBUSY,
                "store '%s': run #%llu: a step exists already at the position being appended (another process wrote to this run); nothing of this commit was written",
                s->path, (unsigned long long)bt->run);
            return 0;
        }
        if (rc != MDB_NOTFOUND)
            return rc;
    }
    if (mine)
        return 0;
    uint8_t key[8];
    pl__put_be64(key, bt->run);
    MDB_val k = {8, key}, v = {sizeof s->writer, s->writer};
    return mdb_put(txn, s->writers, &k, &v, 0);
}

int pl__lmdb_journal_append(pl__lmdb_store *s, MDB_txn *txn,
                            const commit_ctx *c, int *st)
{
    size_t size = 4, count = 0;
    for (size_t b = 0; b < c->n; b++) {
        const pl__kvs *l = &c->batches[b]->steps;
        if (l->n && c->batches[b]->rc == PL_OK) {
            int rc = may_journal(s, txn, c->batches[b], st);
            if (rc || *st)
                return rc;
        }
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
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_LAST);
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
    if (!ms.ms_entries)
        return PL_OK;
    move_ctx m = {false, false};
    st = pl__lmdb_write(s, checkpoint_body, &m);
    if (m.conflict) {
        /* nothing was written: again, holding the runs it concerns apart */
        m.careful = true;
        m.conflict = false;
        st = pl__lmdb_write(s, checkpoint_body, &m);
    }
    return st;
}
