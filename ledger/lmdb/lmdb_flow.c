/*
 * lmdb_flow.c -- flow control on the LMDB store (FLOW in store.h): the
 * queue's order, concurrency keys and rate budgets.
 *
 * LAYOUT: the `flow` database, beside `leases`, created on the first
 * writable open (an older store gains it, its leases indexed then).  Its
 * keys start with a byte that says what they are:
 *
 *   | key                                  | value                        |
 *   |--------------------------------------|------------------------------|
 *   | 'r', u64 BE run                      | the run's flow record        |
 *   |                                      | (flowrec.c): rank, priority, |
 *   |                                      | key, limit; checksummed      |
 *   | 'q', u64 BE rank + 2^63, u64 BE run  | empty: the queue, in order   |
 *   | 'k', u8 key length, key, u64 BE run  | empty: the runs of each key  |
 *   | 'b', the resource's name             | a rate budget (flowrec.c)    |
 *   | 'u', u8 name length, the name, the   | a budget in units            |
 *   | unit                                 | (flowrec.c)                  |
 *
 * The 'r', 'q' and 'k' entries of a run exist exactly while it has a
 * lease: made with it and dropped with it, in the same transaction; but a
 * run with a key that parks (a wait) keeps its 'r' entry, and with it its
 * key, until a wake gives it a lease again: a wake takes it only while
 * its key has room (pl__lmdb_flow_room()), and its 'q' and 'k' entries
 * come back with the lease.
 *
 * DAMAGE: a run's record that fails its checksum (or does not decode)
 * leaves its key and limit unknown, so the run must never execute (it
 * could go past its key's limit), nor stop the others.  A take reaches
 * it in its place in the queue (its 'q' entry is whole) and takes it
 * with pl__taken.key_damaged: its claim fails it (PL_ECORRUPT, with a
 * reason, core/replay/claim.c) and its lease is dropped, and with it the
 * record and the entries it had, found by the run's number
 * (pl__lmdb_flow_purge()) since its rank and key are not known
 * (docs/design.md §14).  Any other drop of a damaged record refuses.
 */
#include "lmdb_int.h"

#include <stdio.h>
#include <stdlib.h>

#define FULL_MAX 32 /* keys a take remembers as full */

int pl__lmdb_flow_open(pl__lmdb_store *s, MDB_txn *txn, bool create)
{
    int rc = mdb_dbi_open(txn, "flow", create ? MDB_CREATE : 0, &s->flow);
    if (rc == MDB_NOTFOUND && !create) {
        s->has_flow = false; /* a read-only open of an older store */
        return 0;
    }
    s->has_flow = !rc;
    if (rc || !create || !s->has_leases)
        return rc;
    /* an older store's leases, indexed as they come: rank now */
    MDB_stat fst;
    if ((rc = mdb_stat(txn, s->flow, &fst)) || fst.ms_entries)
        return rc;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, s->leases, &cur)))
        return rc;
    MDB_val k, v;
    pl__flow f = {.rank_us = pl__now_us()};
    int st = 0;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_FIRST); !rc;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT))
        if (k.mv_size == 8 &&
            ((rc = pl__lmdb_flow_add(s, txn, pl__get_be64(k.mv_data), &f,
                                     &st)) ||
             st))
            break;
    mdb_cursor_close(cur);
    if (st)
        return MDB_CORRUPTED; /* out of memory: the open fails */
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static size_t key_k(uint8_t *out, const char *key, uint64_t run)
{
    size_t n = strlen(key);
    out[0] = 'k';
    out[1] = (uint8_t)n;
    memcpy(out + 2, key, n);
    pl__put_be64(out + 2 + n, run);
    return n + 10;
}

static void key_q(uint8_t out[17], int64_t rank, uint64_t run)
{
    out[0] = 'q';
    pl__put_be64(out + 1, (uint64_t)rank ^ ((uint64_t)1 << 63));
    pl__put_be64(out + 9, run);
}

static void key_r(uint8_t out[9], uint64_t run)
{
    out[0] = 'r';
    pl__put_be64(out + 1, run);
}

int pl__lmdb_flow_add(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                      const pl__flow *f, int *st)
{
    if (!s->has_flow)
        return 0;
    pl__buf rec = {0};
    if ((*st = pl__flow_encode(&rec, run, f)))
        return 0;
    uint8_t kr[9], kq[17], kk[PL__FLOW_KEY_MAX + 10];
    key_r(kr, run);
    key_q(kq, f->rank_us, run);
    MDB_val r = {9, kr}, q = {17, kq}, none = {0, ""}, v = {rec.len, rec.data};
    int rc = mdb_put(txn, s->flow, &r, &v, 0);
    if (!rc)
        rc = mdb_put(txn, s->flow, &q, &none, 0);
    if (!rc && *f->key) {
        MDB_val kv = {key_k(kk, f->key, run), kk};
        rc = mdb_put(txn, s->flow, &kv, &none, 0);
    }
    pl__buf_free(&rec);
    return rc;
}

/* Run @p run's flow record: MDB_NOTFOUND when it has none. */
static int flow_get(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                    pl__flow *out, int *st)
{
    if (!s->has_flow)
        return MDB_NOTFOUND;
    uint8_t kr[9];
    key_r(kr, run);
    MDB_val k = {9, kr}, v;
    int rc = pl__lmdb_get(s, txn, s->flow, &k, &v);
    if (!rc)
        *st = pl__flow_decode(out, run, v.mv_data, v.mv_size);
    return rc;
}

/* Drop run @p run's flow (@p f): its record too unless @p keep. */
static int unplace(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                   const pl__flow *f, bool keep)
{
    uint8_t kr[9], kq[17], kk[PL__FLOW_KEY_MAX + 10];
    key_r(kr, run);
    key_q(kq, f->rank_us, run);
    MDB_val r = {9, kr}, q = {17, kq};
    int rc = keep ? 0 : mdb_del(txn, s->flow, &r, NULL);
    if (!rc || rc == MDB_NOTFOUND)
        rc = mdb_del(txn, s->flow, &q, NULL);
    if ((!rc || rc == MDB_NOTFOUND) && *f->key) {
        MDB_val kv = {key_k(kk, f->key, run), kk};
        rc = mdb_del(txn, s->flow, &kv, NULL);
    }
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Delete every entry of run @p run with first byte @p kind and @p len
 * bytes (0: any length) ending in the run's number: a damaged record's
 * entries, whose rank and key are not known.  A walk of all such entries:
 * for damage alone. */
static int purge_kind(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                      uint8_t kind, size_t len)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->flow, &cur);
    if (rc)
        return rc;
    MDB_val k = {1, &kind}, v;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
         !rc && k.mv_size >= 9 && *(const uint8_t *)k.mv_data == kind;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT))
        if ((!len || k.mv_size == len) &&
            pl__get_be64((const uint8_t *)k.mv_data + k.mv_size - 8) == run &&
            (rc = mdb_cursor_del(cur, 0)))
            break;
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int pl__lmdb_flow_purge(pl__lmdb_store *s, MDB_txn *txn, uint64_t run)
{
    if (!s->has_flow)
        return 0;
    uint8_t kr[9];
    key_r(kr, run);
    MDB_val r = {9, kr};
    int rc = mdb_del(txn, s->flow, &r, NULL);
    if (!rc || rc == MDB_NOTFOUND)
        rc = purge_kind(s, txn, run, 'q', 17);
    return rc ? rc : purge_kind(s, txn, run, 'k', 0);
}

/* Drop run @p run's flow; a parking run with a key (@p park) keeps its
 * record.  A damaged record refuses (PL_ECORRUPT): only the end of the
 * run failed for it drops it (pl__lmdb_flow_purge()). */
static int drop_flow(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, bool park,
                     int *st)
{
    if (!s->has_flow)
        return 0;
    pl__flow f;
    int rc = flow_get(s, txn, run, &f, st);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc || *st)
        return rc;
    return unplace(s, txn, run, &f, park && *f.key);
}

int pl__lmdb_flow_drop(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    return drop_flow(s, txn, run, false, st);
}

int pl__lmdb_flow_pass(pl__lmdb_store *s, MDB_txn *txn, uint64_t from,
                       pl__flow *out, bool *has, int *st)
{
    int rc = flow_get(s, txn, from, out, st);
    *has = !rc && !*st;
    return rc == MDB_NOTFOUND ? 0 : rc;
}

bool pl__lmdb_flow_has(pl__lmdb_store *s, MDB_txn *txn, uint64_t run)
{
    uint8_t kr[9];
    key_r(kr, run);
    MDB_val k = {9, kr}, v;
    return s->has_flow && pl__lmdb_get(s, txn, s->flow, &k, &v) == 0;
}

bool pl__lmdb_flow_keyed(pl__lmdb_store *s, MDB_txn *txn, uint64_t run)
{
    pl__flow f;
    int st = 0;
    int rc = flow_get(s, txn, run, &f, &st);
    /* a damaged record counts as keyed: the careful answer */
    return rc == MDB_NOTFOUND ? false : rc || st || *f.key;
}

/* ---- taking: the queue's order and the keys' limits ---------------------- */

typedef struct walk {
    char full[FULL_MAX][PL__FLOW_KEY_MAX + 1]; /* keys found at their limit */
    size_t n_full;
} walk;

static bool known_full(const walk *w, const char *key)
{
    for (size_t i = 0; i < w->n_full; i++)
        if (strcmp(w->full[i], key) == 0)
            return true;
    return false;
}

/* Whether key @p f->key has room for one more live run. */
static int key_room(pl__lmdb_store *s, MDB_txn *txn, walk *w, const pl__flow *f,
                    bool *room, int *st)
{
    *room = false;
    if (known_full(w, f->key))
        return 0;
    uint8_t kk[PL__FLOW_KEY_MAX + 10];
    size_t plen = key_k(kk, f->key, 0) - 8;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->flow, &cur);
    if (rc)
        return rc;
    MDB_val k = {plen, kk}, v;
    uint32_t live = 0;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
         !rc && live < f->limit && k.mv_size == plen + 8 &&
         memcmp(k.mv_data, kk, plen) == 0;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        pl__lease_state ls;
        uint64_t run = pl__get_be64((const uint8_t *)k.mv_data + plen);
        if ((rc = pl__lmdb_lease_state(s, txn, run, &ls, st)) || *st)
            break;
        live += ls == PL__LEASE_LIVE;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    *room = !*st && live < f->limit;
    if (!*st && !*room && w->n_full < FULL_MAX)
        snprintf(w->full[w->n_full++], sizeof w->full[0], "%s", f->key);
    return 0;
}

int pl__lmdb_flow_pick(pl__lmdb_store *s, MDB_txn *txn, uint64_t *out,
                       bool *damaged, int *st)
{
    *out = 0;
    *damaged = false;
    if (!s->has_flow)
        return 0;
    walk *w = malloc(sizeof *w);
    if (!w) {
        *st = pl__err(PL_ENOMEM, "out of memory");
        return 0;
    }
    w->n_full = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->flow, &cur);
    if (rc) {
        free(w);
        return rc;
    }
    MDB_val k = {1, "q"}, v;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
         !rc && k.mv_size == 17 && *(const uint8_t *)k.mv_data == 'q';
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        uint64_t run = pl__get_be64((const uint8_t *)k.mv_data + 9);
        pl__lease_state ls;
        if ((rc = pl__lmdb_lease_state(s, txn, run, &ls, st)) || *st)
            break;
        if (ls != PL__LEASE_EXPIRED)
            continue; /* executing; or gone (dropped with it, never) */
        pl__flow f = {0};
        rc = flow_get(s, txn, run, &f, st);
        if (rc == MDB_NOTFOUND)
            f.key[0] = '\0'; /* its record gone: no key to wait for */
        else if (!rc && *st == PL_ECORRUPT) {
            /* damaged: its key and limit unknown, it must not run, nor
             * stop the queue behind it: taken in its place, to be failed
             * (DAMAGE above) */
            *st = 0;
            *out = run;
            *damaged = true;
            break;
        } else if (rc || *st)
            break;
        rc = 0;
        bool room = true;
        if (*f.key && ((rc = key_room(s, txn, w, &f, &room, st)) || *st))
            break;
        if (room) {
            *out = run;
            break;
        }
    }
    mdb_cursor_close(cur);
    free(w);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* ---- parking and waking ---------------------------------------------------- */

int pl__lmdb_flow_park(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    return drop_flow(s, txn, run, true, st);
}

int pl__lmdb_flow_room(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                       bool *room, int *st)
{
    *room = true;
    pl__flow f;
    int rc = s->has_flow ? flow_get(s, txn, run, &f, st) : MDB_NOTFOUND;
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc || *st || !*f.key)
        return rc;
    walk *w = malloc(sizeof *w);
    if (!w) {
        *st = pl__err(PL_ENOMEM, "out of memory");
        return 0;
    }
    w->n_full = 0;
    rc = key_room(s, txn, w, &f, room, st);
    free(w);
    return rc;
}

int pl__lmdb_flow_first(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                        bool *first, int *st)
{
    *first = true;
    pl__flow f;
    pl__lease_state ls;
    int rc = s->has_flow ? flow_get(s, txn, run, &f, st) : MDB_NOTFOUND;
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc || *st || !*f.key)
        return rc;
    if ((rc = pl__lmdb_lease_state(s, txn, run, &ls, st)) || *st ||
        ls != PL__LEASE_EXPIRED)
        return rc; /* parked: no place in the queue to keep */
    uint8_t kk[PL__FLOW_KEY_MAX + 10];
    size_t plen = key_k(kk, f.key, 0) - 8;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, s->flow, &cur)))
        return rc;
    MDB_val k = {plen, kk}, v;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_SET_RANGE);
         !rc && *first && k.mv_size == plen + 8 &&
         memcmp(k.mv_data, kk, plen) == 0;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        uint64_t other = pl__get_be64((const uint8_t *)k.mv_data + plen);
        pl__flow o;
        if (other == run)
            continue;
        if ((rc = pl__lmdb_lease_state(s, txn, other, &ls, st)) || *st)
            break;
        if (ls != PL__LEASE_EXPIRED)
            continue;
        if ((rc = flow_get(s, txn, other, &o, st)) == MDB_NOTFOUND) {
            rc = 0;
            continue;
        }
        if (rc || *st)
            break;
        *first = !(o.rank_us < f.rank_us ||
                   (o.rank_us == f.rank_us && other < run));
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int pl__lmdb_key_now(pl__lmdb_store *s, uint64_t run, bool *keyed, bool *room)
{
    *keyed = false;
    *room = true;
    if (!s->has_flow || !s->has_leases)
        return PL_OK;
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    *keyed = pl__lmdb_flow_keyed(s, txn, run);
    int rc = *keyed ? pl__lmdb_flow_room(s, txn, run, room, &st) : 0;
    if (!rc && st == PL_ECORRUPT) { /* damaged (DAMAGE above): no room; */
        *room = false;              /* the wake that meets it fails it */
        st = PL_OK;
    }
    if (rc && !st)
        st = pl__lmdb_err(s, rc, "reading a concurrency key");
    pl__lmdb_txn_abort(s, txn);
    return st;
}

int pl__lmdb_flow_made(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    if (!s->has_flow)
        return 0;
    pl__flow f = {.rank_us = pl__now_us()};
    int rc = flow_get(s, txn, run, &f, st);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    /* a fresh place, or a parked run's kept one again */
    return *st ? 0 : pl__lmdb_flow_add(s, txn, run, &f, st);
}

/* ---- rate budgets --------------------------------------------------------- */

typedef struct rate_ctx {
    const char *resource;
    uint32_t limit;
    int64_t window_ms;
    bool *admitted;
    int64_t *at_ms, *retry_at_ms;
} rate_ctx;

static size_t key_b(uint8_t *out, const char *resource)
{
    size_t n = strlen(resource);
    out[0] = 'b';
    memcpy(out + 1, resource, n);
    return n + 1;
}

static int rate_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    rate_ctx *c = user;
    uint8_t kb[PL__FLOW_KEY_MAX + 1];
    MDB_val k = {key_b(kb, c->resource), kb}, v;
    pl__rate_budget b = {0};
    int rc = pl__lmdb_get(s, txn, s->flow, &k, &v);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (!rc && (*st = pl__rate_decode(&b, c->resource, v.mv_data, v.mv_size)))
        return 0;
    *c->at_ms = pl__now_us() / 1000;
    *c->retry_at_ms = 0;
    *c->admitted = pl__rate_admit(&b, c->window_ms, c->limit, *c->at_ms,
                                  c->retry_at_ms);
    if (!*c->admitted)
        return 0; /* nothing changed: the transaction writes nothing */
    pl__buf rec = {0};
    if ((*st = pl__rate_encode(&rec, c->resource, &b)))
        return 0;
    v = (MDB_val){rec.len, rec.data};
    rc = mdb_put(txn, s->flow, &k, &v, 0);
    pl__buf_free(&rec);
    return rc;
}

int pl__lmdb_rate_take(pl__lmdb_store *s, const char *resource, uint32_t limit,
                       int64_t window_ms, bool *admitted, int64_t *at_ms,
                       int64_t *retry_at_ms)
{
    if (s->read_only || !s->has_flow)
        return pl__err(PL_ESTATE,
                       "store '%s' is open read-only: it keeps no rate "
                       "budget",
                       s->path);
    rate_ctx c = {resource, limit, window_ms, admitted, at_ms, retry_at_ms};
    return pl__lmdb_write(s, rate_body, &c);
}

/* Read flow key @p k in a read transaction and hand its value to
 * @p decode; @p none (a message) when there is none. */
typedef int (*decode_fn)(const MDB_val *v, void *user);

static int flow_read(pl__lmdb_store *s, MDB_val *k, decode_fn decode,
                     void *user, const char *none)
{
    if (!s->has_flow)
        return pl__err(PL_ENOTFOUND, "store '%s' holds no rate budgets",
                       s->path);
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_val v;
    int rc = pl__lmdb_get(s, txn, s->flow, k, &v);
    if (rc == MDB_NOTFOUND)
        st = pl__err(PL_ENOTFOUND, "%s", none);
    else if (rc)
        st = pl__lmdb_err(s, rc, "reading a rate budget");
    else
        st = decode(&v, user);
    pl__lmdb_txn_abort(s, txn);
    return st;
}

typedef struct rate_read {
    const char *resource, *unit;
    void *out;
} rate_read;

static int rate_decode(const MDB_val *v, void *user)
{
    rate_read *r = user;
    return pl__rate_decode(r->out, r->resource, v->mv_data, v->mv_size);
}

int pl__lmdb_rate_get(pl__lmdb_store *s, const char *resource,
                      pl__rate_budget *out)
{
    uint8_t kb[PL__FLOW_KEY_MAX + 1];
    MDB_val k = {key_b(kb, resource), kb};
    char none[PL__FLOW_KEY_MAX + 64];
    snprintf(none, sizeof none, "rate limit '%s' has no budget yet", resource);
    rate_read r = {resource, NULL, out};
    return flow_read(s, &k, rate_decode, &r, none);
}

/* ---- budgets in units ------------------------------------------------------ */

static size_t key_u(uint8_t *out, const char *resource, const char *unit)
{
    size_t n = strlen(resource), m = strlen(unit);
    out[0] = 'u';
    out[1] = (uint8_t)n;
    memcpy(out + 2, resource, n);
    memcpy(out + 2 + n, unit, m);
    return n + m + 2;
}

typedef struct units_ctx {
    const pl__units_op *op;
    pl__units_grant *out;
} units_ctx;

static int units_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    units_ctx *c = user;
    const pl__units_op *op = c->op;
    uint8_t ku[PL__FLOW_KEY_MAX + PL_MAX_RATE_UNIT + 2];
    MDB_val k = {key_u(ku, op->resource, op->unit), ku}, v;
    pl__unit_budget b = {0};
    int rc = pl__lmdb_get(s, txn, s->flow, &k, &v);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (!rc && (*st = pl__units_decode(&b, op->resource, op->unit, v.mv_data,
                                       v.mv_size)))
        return 0;
    int64_t now = pl__now_us() / 1000;
    bool changed = op->settle
                       ? pl__units_settle(&b, op->window_ms, op->limit,
                                          op->start_ms, op->delta, now, c->out)
                       : pl__units_admit(&b, op->window_ms, op->limit,
                                         op->amount, now, c->out);
    if (!changed)
        return 0; /* nothing changed: the transaction writes nothing */
    pl__buf rec = {0};
    if ((*st = pl__units_encode(&rec, op->resource, op->unit, &b)))
        return 0;
    v = (MDB_val){rec.len, rec.data};
    rc = mdb_put(txn, s->flow, &k, &v, 0);
    pl__buf_free(&rec);
    return rc;
}

int pl__lmdb_units(pl__lmdb_store *s, const pl__units_op *op,
                   pl__units_grant *out)
{
    if (s->read_only || !s->has_flow)
        return pl__err(PL_ESTATE,
                       "store '%s' is open read-only: it keeps no rate "
                       "budget",
                       s->path);
    units_ctx c = {op, out};
    return pl__lmdb_write(s, units_body, &c);
}

static int units_decode(const MDB_val *v, void *user)
{
    rate_read *r = user;
    return pl__units_decode(r->out, r->resource, r->unit, v->mv_data,
                            v->mv_size);
}

int pl__lmdb_units_get(pl__lmdb_store *s, const char *resource,
                       const char *unit, pl__unit_budget *out)
{
    uint8_t ku[PL__FLOW_KEY_MAX + PL_MAX_RATE_UNIT + 2];
    MDB_val k = {key_u(ku, resource, unit), ku};
    char none[PL__FLOW_KEY_MAX + PL_MAX_RATE_UNIT + 64];
    snprintf(none, sizeof none, "rate limit '%s' has no %s budget yet",
             resource, unit);
    rate_read r = {resource, unit, out};
    return flow_read(s, &k, units_decode, &r, none);
}
