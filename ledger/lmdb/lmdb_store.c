/*
 * lmdb_store.c -- the store on LMDB: committing batches, reading ledgers
 * and runs.  The environment is lmdb_env.c's, the journal lmdb_journal.c's.
 *
 * LAYOUT: one LMDB environment (lmdb_env.c), seven named databases.
 *
 *   | database | key                           | value                      |
 *   |----------|-------------------------------|----------------------------|
 *   | meta     | "format"                      | u32 BE store format (1)    |
 *   |          | "identity"                    | "policyledger store"       |
 *   |          |                               | (lmdb_ident.c)             |
 *   |          | "next_run"                    | u64 BE next run number     |
 *   | runs     | run id (bytes)                | u64 BE run number, then    |
 *   |          |                               | its info map (runrec.c)    |
 *   | state    | u64 BE run number             | run state map (runrec.c)   |
 *   | steps    | u64 BE run number, u32 BE per | step record (record.c)     |
 *   |          | path component, u32 BE seq    |                            |
 *   | journal  | u64 BE sequence               | steps of group commits,    |
 *   |          |                               | not yet moved to `steps`   |
 *   |          |                               | (lmdb_journal.c)           |
 *   | writers  | u64 BE run number             | the process whose steps of |
 *   |          |                               | it are in the journal      |
 *   | held     | u64 BE run, u64 BE journal    | journaled steps that could |
 *   |          | sequence, u32 BE position     | not be moved: the run is   |
 *   |          |                               | stopped (lmdb_journal.c)   |
 *
 *   and `leases` (lmdb_lease.c), `tombs` and `purge` (deleted runs,
 *   lmdb_delete.c).
 *
 *   A step's key is its position in the run's tree (keys.c), so:
 *   - a whole call -- its action_call, everything the callee did, and its
 *     action_result -- is one contiguous key range, and the commit of an
 *     idempotent call writes one run of adjacent keys into one leaf page;
 *   - a run's steps, read in key order, are its execution tree in order;
 *   - one ledger is read by one cursor that steps over its calls' small
 *     subtrees and seeks past big ones (pl__lmdb_read).
 *   All runs are listed from `runs` without touching `steps`, in the byte
 *   order of their ids: creation order for the engine's UUIDv7 ids.
 */
#include "lmdb_int.h"
#include "share.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- commit -------------------------------------------------------------- */

/* Put one step in its place, refusing to change an existing one. */
int pl__lmdb_put_step(pl__lmdb_store *s, MDB_txn *txn, MDB_val *k,
                      const MDB_val *v, bool *append, uint64_t run, int *st)
{
    /* on MDB_KEYEXIST, LMDB points the value at the stored one: keep the
     * caller's (the journal move compares the two) */
    assert(k->mv_size >= 12 && k->mv_size <= PL__KEY_MAX); /* a step key */
    MDB_val data = *v;
    int rc = MDB_KEYEXIST;
    if (*append)
        rc = mdb_put(txn, s->steps, k, &data, MDB_APPEND);
    if (rc == MDB_KEYEXIST) {
        *append = false;
        data = *v;
        rc = mdb_put(txn, s->steps, k, &data, MDB_NOOVERWRITE);
    }
    if (rc == MDB_KEYEXIST)
        *st = pl__err(
            PL_EBUSY,
            "a step of run #%llu exists already at the position being appended: another process wrote to this run",
            (unsigned long long)run);
    return rc;
}

static int put_state(pl__lmdb_store *s, MDB_txn *txn, const pl__batch *bt)
{
    if (!bt->state.len)
        return 0;
    uint8_t key[8];
    pl__put_be64(key, bt->run);
    MDB_val k = {8, key}, v = {bt->state.len, bt->state.data};
    return mdb_put(txn, s->state, &k, &v, 0);
}

/*
 * Create the run a batch names: assign the next run number and store its
 * info and first state.  A taken id skips the batch (rc PL_EEXIST).
 */
static int create_run(pl__lmdb_store *s, MDB_txn *txn, pl__batch *bt, int *st)
{
    MDB_val k = {strlen(bt->create_id), (void *)bt->create_id}, v;
    int rc = pl__lmdb_get(s, txn, s->runs, &k, &v);
    if (!rc) {
        bt->rc = PL_EEXIST;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    bool taken; /* by a deleted run's tombstone (lmdb_delete.c) */
    if ((rc = pl__lmdb_tomb_taken(s, txn, bt->create_id, &taken, st)) || *st)
        return rc;
    if (taken) {
        bt->rc = PL_EEXIST;
        return 0;
    }
    MDB_val nk = {8, "next_run"};
    uint64_t num = 1;
    rc = pl__lmdb_get(s, txn, s->meta, &nk, &v);
    if (!rc && v.mv_size == 8)
        num = pl__get_be64(v.mv_data);
    else if (rc != MDB_NOTFOUND)
        return rc ? rc : MDB_CORRUPTED;
    /* a number already in use (a changed "next_run") would give the new
     * run another run's state and steps */
    uint8_t nkey[8];
    pl__put_be64(nkey, num);
    MDB_val sk = {8, nkey};
    if (num == 0 || num == UINT64_MAX ||
        (rc = pl__lmdb_get(s, txn, s->state, &sk, &v)) != MDB_NOTFOUND) {
        if (rc && num && num != UINT64_MAX)
            return rc;
        *st = pl__err(
            PL_ECORRUPT,
            "store '%s': the next run number, %llu, is taken or invalid (its \"next_run\" record changed)",
            s->path, (unsigned long long)num);
        return 0;
    }
    uint8_t next[8];
    pl__put_be64(next, num + 1);
    v.mv_size = 8;
    v.mv_data = next;
    if ((rc = mdb_put(txn, s->meta, &nk, &v, 0)))
        return rc;
    /* the runs value is the number followed by the info record */
    v.mv_size = 8 + bt->create_info->len;
    if ((rc = mdb_put(txn, s->runs, &k, &v, MDB_RESERVE)))
        return rc;
    pl__put_be64(v.mv_data, num);
    memcpy((uint8_t *)v.mv_data + 8, bt->create_info->data,
           bt->create_info->len);
    bt->run = num;
    return 0;
}

/* Create the successor of a run that ends continued (pl__batch.succ_id),
 * in the queue at its predecessor's place, with its priority and key
 * (@p pf; NULL: a new place, as a submitted run's). */
static int create_succ(pl__lmdb_store *s, MDB_txn *txn, const pl__batch *bt,
                       const pl__flow *pf, int *st)
{
    MDB_val k = {strlen(bt->succ_id), (void *)bt->succ_id};
    int rc = mdb_del(txn, s->tombs, &k, NULL); /* the id is taken over */
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    pl__batch sb = {.create_id = bt->succ_id,
                    .create_info = bt->succ_info,
                    .state = *bt->succ_state,
                    .lease_owner = ""};
    if ((rc = create_run(s, txn, &sb, st)) || *st)
        return rc;
    if (sb.rc) {
        *st = pl__err(PL_EEXIST,
                      "run '%s' exists already: it cannot be the successor "
                      "of the run continued as new; nothing was written",
                      bt->succ_id);
        return 0;
    }
    if ((rc = pl__lmdb_lease_batch(s, txn, &sb, st)) || *st)
        return rc;
    if (pf && ((rc = pl__lmdb_flow_drop(s, txn, sb.run, st)) || *st ||
               (rc = pl__lmdb_flow_add(s, txn, sb.run, pf, st)) || *st))
        return rc;
    return put_state(s, txn, &sb);
}

static int commit_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    commit_ctx *c = user;
    int rc;
    for (size_t b = 0; b < c->n; b++) {
        pl__batch *bt = c->batches[b];
        bt->rc = PL_OK;
        if (bt->create_id) {
            if ((rc = create_run(s, txn, bt, st)) || *st)
                return rc;
            /* a taken id skips the batch, but for its schedule write,
             * which goes either way (store.h, SCHEDULES) */
            if (bt->rc && ((rc = pl__lmdb_sched_batch(s, txn, bt, st)) || *st))
                return rc;
            if (bt->rc)
                continue;
        }
        /* a continued run's place in the queue, before its lease goes */
        pl__flow pf;
        bool has_pf = false;
        if (bt->succ_id &&
            ((rc = pl__lmdb_flow_pass(s, txn, bt->run, &pf, &has_pf, st)) ||
             *st))
            return rc;
        if ((rc = pl__lmdb_lease_batch(s, txn, bt, st)) || *st)
            return rc;
        if ((rc = pl__lmdb_time_batch(s, txn, bt, st)) || *st)
            return rc;
        const pl__kvs *l = &bt->steps;
        if (l->n && !c->journal &&
            ((rc = pl__lmdb_may_write(s, txn, bt->run, st)) || *st))
            return rc;
        /*
         * A run appends in key order, and the newest run's keys are the
         * largest: pl__lmdb_put_step() tries MDB_APPEND, which fills pages
         * instead of splitting them in half.  A key that is not at the end
         * is put the ordinary way (which still refuses an existing key), and
         * the batch stops trying.
         */
        bool append = true;
        for (size_t i = 0; !c->journal && i < l->n; i++) {
            MDB_val k = {l->e[i].klen, (void *)pl__kvs_key(l, i)};
            MDB_val v = {l->e[i].vlen, (void *)pl__kvs_val(l, i)};
            if ((rc = pl__lmdb_put_step(s, txn, &k, &v, &append, bt->run, st)))
                return rc;
        }
        if ((rc = put_state(s, txn, bt)) ||
            (rc = pl__lmdb_sched_batch(s, txn, bt, st)) || *st)
            return rc;
        if (bt->succ_id &&
            ((rc = create_succ(s, txn, bt, has_pf ? &pf : NULL, st)) || *st))
            return rc;
        /* an empty inbox holds no cancellation: the run's call boundaries
         * need not read it until its next commit (store.h) */
        bool empty = false;
        if (c->look && !bt->create_id &&
            (rc = pl__lmdb_inbox_empty(s, txn, bt->run, &empty)))
            return rc;
        bt->inbox_known = empty;
    }
    return c->journal ? pl__lmdb_journal_append(s, txn, c, st) : 0;
}

int pl__lmdb_commit_in(pl__lmdb_store *s, MDB_txn *txn, pl__batch *bt, int *st)
{
    pl__batch *one[1] = {bt};
    commit_ctx c = {one, 1, false, false};
    return commit_body(s, txn, &c, st);
}

int pl__lmdb_commit(pl__lmdb_store *s, pl__batch *const *batches, size_t n,
                    bool journal)
{
    assert(n > 0 && batches);
    commit_ctx c = {batches, n, journal, true};
    for (size_t b = 0; b < n; b++)
        batches[b]->inbox_known = batches[b]->inbox_cancel = false;
    int st = pl__lmdb_write(s, commit_body, &c);
    for (size_t b = 0; st && b < n; b++)
        batches[b]->inbox_known = false;
    return st;
}

/* ---- shared step values (share.c) ---------------------------------------- */

typedef struct share_get {
    pl__lmdb_store *s;
    MDB_txn *txn;
} share_get;

static int share_get_fn(const uint8_t *key, size_t klen, const uint8_t **val,
                        size_t *vlen, void *user)
{
    share_get *g = user;
    MDB_val k = {klen, (void *)key}, v;
    int rc = pl__lmdb_get(g->s, g->txn, g->s->steps, &k, &v);
    if (rc == MDB_NOTFOUND)
        return PL_ENOTFOUND;
    if (rc)
        return pl__lmdb_err(g->s, rc, "reading a shared step");
    *val = v.mv_data;
    *vlen = v.mv_size;
    return PL_OK;
}

/* The record a step value @p v of key @p k stands for: itself, or a
 * shared value put back together in @p buf (read in @p txn). */
static int as_record(pl__lmdb_store *s, MDB_txn *txn, const MDB_val *k,
                     MDB_val *v, pl__buf *buf)
{
    if (!pl__share_is(v->mv_data, v->mv_size))
        return PL_OK;
    share_get g = {s, txn};
    int st = pl__share_unpack(buf, k->mv_data, k->mv_size, v->mv_data,
                              v->mv_size, share_get_fn, &g, s->path);
    if (!st) {
        v->mv_data = buf->data;
        v->mv_size = buf->len;
    }
    return st;
}

/* ---- reading ------------------------------------------------------------- */

/* LMDB's default key order: bytes, then length. */
static int key_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/*
 * Name a key for a message: a step key as "run #N, step 0.c.t:seq", a run
 * id as itself (non-printable bytes as '?').
 */
static void key_name(char *out, size_t n, const pl__lmdb_store *s, MDB_dbi dbi,
                     const void *key, size_t klen)
{
    uint64_t run;
    uint32_t comps[PL_MAX_DEPTH], seq;
    unsigned depth;
    if (dbi == s->steps &&
        pl__key_parse(key, klen, &run, comps, &depth, &seq)) {
        size_t w = (size_t)snprintf(out, n, "run #%llu, step 0",
                                    (unsigned long long)run);
        for (unsigned i = 0; i < depth && w < n; i++)
            w += (size_t)snprintf(out + w, n - w, ".%u", comps[i]);
        if (w < n)
            snprintf(out + w, n - w, ":%u", seq);
        return;
    }
    const uint8_t *p = key;
    size_t w = 0;
    if (dbi == s->runs && n > 2)
        out[w++] = '\'';
    for (size_t i = 0; i < klen && w + 2 < n && i < PL_MAX_RUN_ID; i++)
        out[w++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    if (dbi == s->runs && w + 1 < n)
        out[w++] = '\'';
    out[w] = '\0';
}

/* A cursor that went back: @p key does not sort after @p prev. */
static int out_of_order(const pl__lmdb_store *s, MDB_dbi dbi,
                        const MDB_val *key, const void *prev, size_t prev_len,
                        const char *what)
{
    char a[160], b[160];
    key_name(a, sizeof a, s, dbi, key->mv_data, key->mv_size);
    key_name(b, sizeof b, s, dbi, prev, prev_len);
    return pl__err(
        PL_ECORRUPT,
        "store '%s': %s: the key of %s comes after %s but does not sort after it (a key changed)",
        s->path, what, a, b);
}

/* Where the cursor stands relative to step want of a ledger. */
typedef enum {
    AT_END,     /* past the ledger's end */
    AT_STEP,    /* on step want */
    AT_SUBTREE, /* inside the subtree of an earlier step */
    AT_GAP      /* past step want, which is missing */
} where_t;

static where_t classify(const MDB_val *k, const uint8_t *prefix, size_t plen,
                        uint32_t want)
{
    if (k->mv_size < plen + 4 || memcmp(k->mv_data, prefix, plen) != 0)
        return AT_END;
    uint32_t x = pl__get_be32((const uint8_t *)k->mv_data + plen);
    if (x < want)
        return AT_SUBTREE;
    if (x > want || k->mv_size != plen + 4)
        return AT_GAP;
    return AT_STEP;
}

/* Records of a subtree a ledger read steps through before it seeks past. */
#define WALK_MAX 8

int pl__lmdb_read(pl__lmdb_store *s, const uint8_t *prefix, size_t prefix_len,
                  uint32_t from_seq, size_t max_n, size_t max_bytes,
                  pl__kvs *out)
{
    /* the caller's ledger prefix: a run and at most PL_MAX_DEPTH + 1
     * components, so the key copied below has room for a seq */
    assert(prefix_len >= 8 && prefix_len + 4 <= PL__KEY_MAX);
    pl__kvs_reset(out);
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    int hrc = pl__lmdb_held(s, txn, pl__get_be64(prefix), &st);
    if (hrc || st) {
        pl__lmdb_txn_abort(s, txn);
        return st ? st : pl__lmdb_err(s, hrc, "reading a ledger");
    }
    uint8_t key[PL__KEY_MAX];
    memcpy(key, prefix, prefix_len);
    MDB_val k, v;
    uint32_t want = from_seq;
    size_t bytes = 0;
    int rc = mdb_cursor_open(txn, s->steps, &cur);
    bool seek = true;
    unsigned inside = 0;
    /* the cursor only moves forward: each key sorts after the last one
     * seen (kept in last), and a seek lands at or past its target */
    uint8_t last[PL__KEY_MAX];
    size_t last_len = 0;
    pl__buf whole = {0}; /* a shared value's record */
    while (!rc) {
        if (seek) {
            pl__put_be32(key + prefix_len, want);
            k.mv_size = prefix_len + 4;
            k.mv_data = key;
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
            if (!rc && key_cmp(k.mv_data, k.mv_size, key, prefix_len + 4) < 0) {
                st = out_of_order(s, s->steps, &k, key, prefix_len + 4,
                                  "reading a ledger");
                break;
            }
        } else {
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
        }
        if (rc)
            break;
        if (last_len && key_cmp(k.mv_data, k.mv_size, last, last_len) <= 0) {
            st = out_of_order(s, s->steps, &k, last, last_len,
                              "reading a ledger");
            break;
        }
        if (k.mv_size > sizeof last) {
            st = pl__err(PL_ECORRUPT, "store '%s': a step key of %zu bytes",
                         s->path, k.mv_size);
            break;
        }
        memcpy(last, k.mv_data, k.mv_size);
        last_len = k.mv_size;
        where_t where = classify(&k, prefix, prefix_len, want);
        if (where == AT_END)
            break;
        if (where == AT_SUBTREE && !seek) {
            /* inside the subtree of the last step (a call's callee): step
             * over a small one, which is cheaper than a seek; hop over a
             * big one */
            if (++inside >= WALK_MAX)
                seek = true;
            continue;
        }
        if (where != AT_STEP) { /* AT_GAP */
            st = pl__err(PL_ECORRUPT,
                         "store '%s': a ledger is missing its step %u", s->path,
                         want);
            break;
        }
        if ((st = as_record(s, txn, &k, &v, &whole)) ||
            (st = pl__kvs_begin(out, NULL, 0)) ||
            (st = pl__buf_append(&out->data, v.mv_data, v.mv_size)))
            break;
        pl__kvs_end(out);
        bytes += v.mv_size;
        if (++want == 0 || out->n >= max_n || bytes >= max_bytes)
            break;
        seek = false;
        inside = 0;
    }
    if (!st && rc && rc != MDB_NOTFOUND)
        st = pl__lmdb_err(s, rc, "reading a ledger");
    if (cur)
        mdb_cursor_close(cur);
    pl__lmdb_txn_abort(s, txn);
    pl__buf_free(&whole);
    return st;
}

/*
 * Copy up to @p max_n records of @p dbi whose keys start with @p prefix
 * (plen bytes, may be 0), from just after the key @p after (NULL: from the
 * first key with the prefix), in key order, and at most @p max_bytes of
 * keys and values but always the first (a step's shared value counted as
 * the record it stands for).
 *
 * Every key handed out sorts strictly after @p after and after the one
 * before it, or the read fails with PL_ECORRUPT naming both: a key that
 * changed in its page (a B-tree out of order) cannot make a caller that
 * pages on from the last key it got see a key twice, or loop.  The first
 * key past the prefix ends the list only if the key after it sorts after
 * it too (else a changed key hid the rest of the range).
 */
static int page(pl__lmdb_store *s, MDB_dbi dbi, const void *prefix, size_t plen,
                const void *after, size_t after_len, size_t max_n,
                size_t max_bytes, pl__kvs *out, const char *what)
{
    pl__kvs_reset(out);
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    int hrc = dbi == s->steps && plen >= 8
                  ? pl__lmdb_held(s, txn, pl__get_be64(prefix), &st)
                  : 0;
    if (hrc || st) {
        pl__lmdb_txn_abort(s, txn);
        return st ? st : pl__lmdb_err(s, hrc, what);
    }
    MDB_val k = {after ? after_len : plen, (void *)(after ? after : prefix)};
    MDB_val v;
    pl__buf whole = {0};      /* a shared value's record */
    const void *prev = after; /* the last key handed out, or after */
    size_t prev_len = after_len;
    size_t bytes = 0;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (!rc)
        rc = pl__lmdb_cursor_get(s, cur, &k, &v,
                                 k.mv_size ? MDB_SET_RANGE : MDB_FIRST);
    if (!rc && after && k.mv_size == after_len &&
        memcmp(k.mv_data, after, after_len) == 0)
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
    while (!rc && out->n < max_n) {
        if (prev && key_cmp(k.mv_data, k.mv_size, prev, prev_len) <= 0) {
            st = out_of_order(s, dbi, &k, prev, prev_len, what);
            break;
        }
        if (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0) {
            MDB_val past = k;
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
            if (!rc &&
                key_cmp(k.mv_data, k.mv_size, past.mv_data, past.mv_size) <= 0)
                st = out_of_order(s, dbi, &k, past.mv_data, past.mv_size, what);
            if (rc == MDB_NOTFOUND)
                rc = 0;
            break;
        }
        if (dbi == s->steps && (st = as_record(s, txn, &k, &v, &whole)))
            break;
        if (out->n && bytes + k.mv_size + v.mv_size > max_bytes)
            break; /* it starts the next page */
        if ((st = pl__kvs_add(out, k.mv_data, k.mv_size, v.mv_data, v.mv_size)))
            break;
        bytes += k.mv_size + v.mv_size;
        prev = k.mv_data;
        prev_len = k.mv_size;
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
    }
    if (!st && rc && rc != MDB_NOTFOUND)
        st = pl__lmdb_err(s, rc, what);
    if (cur)
        mdb_cursor_close(cur);
    pl__lmdb_txn_abort(s, txn);
    pl__buf_free(&whole);
    return st;
}

int pl__lmdb_scan(pl__lmdb_store *s, uint64_t run, const uint8_t *after,
                  size_t after_len, size_t max_n, size_t max_bytes,
                  pl__kvs *out)
{
    uint8_t prefix[8];
    pl__put_be64(prefix, run);
    return page(s, s->steps, prefix, 8, after, after_len, max_n, max_bytes, out,
                "scanning a run");
}

/* Steps one read transaction of pl__lmdb_each_step() hands out. */
#define EACH_MAX 1024

int pl__lmdb_each_step(pl__lmdb_store *s, uint64_t run, pl__step_fn fn,
                       void *user)
{
    uint8_t first[8], last[PL__KEY_MAX];
    size_t last_len = 0; /* the last key handed out; 0: none yet */
    pl__put_be64(first, run);
    bool more = true;
    int st = PL_OK;
    pl__buf whole = {0}; /* a shared value's record */
    while (more && !st) {
        MDB_txn *txn;
        MDB_cursor *cur = NULL;
        size_t seen, n = 0;
        if ((st = pl__lmdb_txn_begin(s, false, &txn, &seen)))
            break;
        MDB_val k = {last_len ? last_len : 8, last_len ? last : first}, v;
        int rc = pl__lmdb_held(s, txn, run, &st);
        if (!rc && !st)
            rc = mdb_cursor_open(txn, s->steps, &cur);
        if (!rc && !st)
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
        if (!rc && !st && last_len && k.mv_size == last_len &&
            memcmp(k.mv_data, last, last_len) == 0)
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
        more = false;
        /* strictly forward: after the last key handed out, and each key
         * after the one before (a changed key cannot make a re-seek visit
         * steps twice) */
        const void *prev = last_len ? last : NULL;
        size_t prev_len = last_len;
        while (!rc && !st && k.mv_size >= 8 &&
               memcmp(k.mv_data, first, 8) == 0) {
            if (prev && key_cmp(k.mv_data, k.mv_size, prev, prev_len) <= 0) {
                st = out_of_order(s, s->steps, &k, prev, prev_len,
                                  "reading a run's steps");
                break;
            }
            prev = k.mv_data;
            prev_len = k.mv_size;
            if ((st = as_record(s, txn, &k, &v, &whole)) ||
                (st = fn(k.mv_data, k.mv_size, v.mv_data, v.mv_size, user)))
                break;
            if (++n == EACH_MAX) { /* go on after it in a new transaction */
                if (k.mv_size > sizeof last) {
                    st = pl__err(
                        PL_ECORRUPT,
                        "store '%s': run #%llu has a step key of %zu bytes",
                        s->path, (unsigned long long)run, k.mv_size);
                    break;
                }
                memcpy(last, k.mv_data, k.mv_size);
                last_len = k.mv_size;
                more = true;
                break;
            }
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT);
        }
        if (!st && rc && rc != MDB_NOTFOUND)
            st = pl__lmdb_err(s, rc, "reading a run's steps");
        if (cur)
            mdb_cursor_close(cur);
        pl__lmdb_txn_abort(s, txn);
    }
    pl__buf_free(&whole);
    return st;
}

/* ---- runs ---------------------------------------------------------------- */

int pl__lmdb_run_find(pl__lmdb_store *s, const char *id, uint64_t *num,
                      pl__buf *info)
{
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = pl__lmdb_get(s, txn, s->runs, &k, &v);
    if (rc == MDB_NOTFOUND) {
        st = pl__err(PL_ENOTFOUND, "no run '%s' in store '%s'", id, s->path);
    } else if (rc) {
        st = pl__lmdb_err(s, rc, "reading a run");
    } else if (v.mv_size < 8) {
        st = pl__err(PL_ECORRUPT, "run '%s' has a malformed record", id);
    } else {
        *num = pl__get_be64(v.mv_data);
        if (info) {
            pl__buf_reset(info);
            st = pl__buf_append(info, (uint8_t *)v.mv_data + 8, v.mv_size - 8);
        }
    }
    pl__lmdb_txn_abort(s, txn);
    return st;
}

int pl__lmdb_state_get(pl__lmdb_store *s, uint64_t num, pl__buf *state)
{
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    uint8_t key[8];
    pl__put_be64(key, num);
    MDB_val k = {8, key}, v;
    int rc = pl__lmdb_get(s, txn, s->state, &k, &v);
    if (rc == MDB_NOTFOUND)
        st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                     (unsigned long long)num);
    else if (rc)
        st = pl__lmdb_err(s, rc, "reading a run state");
    else {
        pl__buf_reset(state);
        st = pl__buf_append(state, v.mv_data, v.mv_size);
    }
    pl__lmdb_txn_abort(s, txn);
    return st;
}

typedef struct update_ctx {
    uint64_t num;
    pl__state_fn fn;
    void *user;
    pl__buf state;
    pl__kvs extra;
} update_ctx;

static int update_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    update_ctx *c = user;
    uint8_t key[8];
    pl__put_be64(key, c->num);
    MDB_val k = {8, key}, v;
    /* the writer of journaled steps may have died: whoever claims the run
     * next settles the journal before it writes steps */
    int rc = pl__lmdb_held(s, txn, c->num, st);
    if (rc || *st)
        return rc;
    rc = pl__lmdb_get(s, txn, s->state, &k, &v);
    if (rc == MDB_NOTFOUND) {
        *st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                      (unsigned long long)c->num);
        return 0;
    }
    if (rc)
        return rc;
    pl__buf_reset(&c->state);
    pl__kvs_reset(&c->extra);
    if ((*st = pl__buf_append(&c->state, v.mv_data, v.mv_size)))
        return 0;
    if ((*st = c->fn(&c->state, &c->extra, c->user)))
        return 0;
    v.mv_size = c->state.len;
    v.mv_data = c->state.data;
    if ((rc = mdb_put(txn, s->state, &k, &v, 0)))
        return rc;
    for (size_t i = 0; i < c->extra.n; i++) {
        MDB_val ek = {c->extra.e[i].klen, (void *)pl__kvs_key(&c->extra, i)};
        MDB_val ev = {c->extra.e[i].vlen, (void *)pl__kvs_val(&c->extra, i)};
        rc = mdb_put(txn, s->steps, &ek, &ev, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) {
            *st = pl__err(
                PL_EBUSY,
                "a step exists already at the position being written");
            return 0;
        }
        if (rc)
            return rc;
    }
    return 0;
}

int pl__lmdb_state_update(pl__lmdb_store *s, uint64_t num, pl__state_fn fn,
                          void *user)
{
    update_ctx c = {.num = num, .fn = fn, .user = user};
    int st = pl__lmdb_write(s, update_body, &c);
    pl__buf_free(&c.state);
    pl__kvs_free(&c.extra);
    return st;
}

/*
 * Up to @p max_n runs in descending id order, from just before @p before
 * (NULL: from the last).  As page(), every id handed out sorts strictly
 * before @p before and the one before it, or the read fails with
 * PL_ECORRUPT naming both.
 */
static int runs_desc(pl__lmdb_store *s, const char *before, size_t max_n,
                     pl__kvs *out)
{
    pl__kvs_reset(out);
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    size_t blen = before ? strlen(before) : 0;
    MDB_val k = {blen, (void *)before}, v;
    const void *prev = before;
    size_t prev_len = blen;
    int rc = mdb_cursor_open(txn, s->runs, &cur);
    if (!rc && before) {
        /* the first id at or after before, then the one before it */
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND)
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_LAST);
        else if (!rc)
            rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_PREV);
    } else if (!rc) {
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_LAST);
    }
    while (!rc && out->n < max_n) {
        if (prev && key_cmp(k.mv_data, k.mv_size, prev, prev_len) >= 0) {
            char a[160], b[160];
            key_name(a, sizeof a, s, s->runs, k.mv_data, k.mv_size);
            key_name(b, sizeof b, s, s->runs, prev, prev_len);
            st = pl__err(PL_ECORRUPT,
                         "store '%s': listing runs newest first: the key of "
                         "%s comes before %s but does not sort before it (a "
                         "key changed)",
                         s->path, a, b);
            break;
        }
        if ((st = pl__kvs_add(out, k.mv_data, k.mv_size, v.mv_data, v.mv_size)))
            break;
        prev = k.mv_data;
        prev_len = k.mv_size;
        rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_PREV);
    }
    if (!st && rc && rc != MDB_NOTFOUND)
        st = pl__lmdb_err(s, rc, "listing runs");
    if (cur)
        mdb_cursor_close(cur);
    pl__lmdb_txn_abort(s, txn);
    return st;
}

int pl__lmdb_runs(pl__lmdb_store *s, const char *after, bool desc, size_t max_n,
                  pl__kvs *out)
{
    if (desc)
        return runs_desc(s, after, max_n, out);
    return page(s, s->runs, "", 0, after, after ? strlen(after) : 0, max_n,
                SIZE_MAX, out, "listing runs");
}
