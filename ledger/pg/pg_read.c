/*
 * pg_read.c -- reading the store on PostgreSQL: ledgers, runs, states
 * and statistics.
 */
#include "pg_int.h"
#include "share.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- reading ------------------------------------------------------------- */

/* Run a query that returns rows of (key, value) or (value) into @p out. */
static int query(pl__pg_store *s, int which, int nparams,
                 const char *const *vals, const int *lens, PGresult **out,
                 const char *what)
{
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    int fmts[4] = {1, 1, 1, 1};
    PGresult *r = pl__pg_exec_q(s, c, which, nparams, vals, lens, fmts);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        st = pl__pg_err(s, c, r, what);
        PQclear(r);
        r = NULL;
    }
    pl__pg_conn_put(s, c);
    *out = r;
    return st;
}

/* ---- shared step values (share.c) ---------------------------------------- */

typedef struct share_get {
    pl__pg_store *s;
    PGresult *r; /* the last step read */
} share_get;

static int share_get_fn(const uint8_t *key, size_t klen, const uint8_t **val,
                        size_t *vlen, void *user)
{
    share_get *g = user;
    PQclear(g->r);
    g->r = NULL;
    uint8_t lim[8];
    pl__put_be64(lim, 1);
    const char *vals[4] = {(const char *)key, (const char *)key,
                           (const char *)lim, (const char *)lim};
    int lens[4] = {(int)klen, (int)klen, 8, 8};
    int st = query(g->s, Q_READ, 4, vals, lens, &g->r, "reading a shared step");
    if (st)
        return st;
    if (PQntuples(g->r) < 1)
        return PL_ENOTFOUND;
    *val = (const uint8_t *)PQgetvalue(g->r, 0, 1);
    *vlen = (size_t)PQgetlength(g->r, 0, 1);
    return PL_OK;
}

/* The record a step value (*v, *vlen) of key @p k stands for: itself, or a
 * shared value put back together in @p buf. */
static int as_record(pl__pg_store *s, const uint8_t *k, size_t klen,
                     const uint8_t **v, size_t *vlen, pl__buf *buf)
{
    if (!pl__share_is(*v, *vlen))
        return PL_OK;
    share_get g = {s, NULL};
    int st = pl__share_unpack(buf, k, klen, *v, *vlen, share_get_fn, &g,
                              s->path);
    PQclear(g.r);
    if (!st) {
        *v = buf->data;
        *vlen = buf->len;
    }
    return st;
}

int pl__pg_read(pl__pg_store *s, const uint8_t *prefix, size_t prefix_len,
                uint32_t from_seq, size_t max_n, size_t max_bytes, pl__kvs *out)
{
    pl__kvs_reset(out);
    uint8_t lo[PL__KEY_MAX], hi[PL__KEY_MAX], lim[8], blim[8];
    memcpy(lo, prefix, prefix_len);
    memcpy(hi, prefix, prefix_len);
    pl__put_be32(lo + prefix_len, from_seq);
    pl__put_be32(hi + prefix_len, UINT32_MAX);
    pl__put_be64(lim, max_n < READ_MAX ? (max_n ? max_n : 1) : READ_MAX);
    pl__put_be64(blim, max_bytes > INT64_MAX ? INT64_MAX : max_bytes);
    const char *vals[4] = {(const char *)lo, (const char *)hi,
                           (const char *)lim, (const char *)blim};
    int lens[4] = {(int)prefix_len + 4, (int)prefix_len + 4, 8, 8};
    PGresult *r = NULL;
    int st = query(s, Q_READ, 4, vals, lens, &r, "reading a ledger");
    if (st)
        return st;
    uint32_t want = from_seq;
    size_t bytes = 0;
    pl__buf whole = {0}; /* a shared value's record */
    for (int i = 0; i < PQntuples(r); i++) {
        const uint8_t *k = (const uint8_t *)PQgetvalue(r, i, 0);
        if (pl__get_be32(k + prefix_len) != want) {
            st = pl__err(PL_ECORRUPT,
                         "store '%s': a ledger is missing its step %u", s->path,
                         want);
            break;
        }
        size_t vlen = (size_t)PQgetlength(r, i, 1);
        const uint8_t *v = (const uint8_t *)PQgetvalue(r, i, 1);
        if ((st = as_record(s, k, (size_t)PQgetlength(r, i, 0), &v, &vlen,
                            &whole)) ||
            (st = pl__kvs_begin(out, NULL, 0)) ||
            (st = pl__buf_append(&out->data, v, vlen)))
            break;
        pl__kvs_end(out);
        bytes += vlen;
        if (++want == 0 || out->n >= max_n || bytes >= max_bytes)
            break;
    }
    PQclear(r);
    pl__buf_free(&whole);
    return st;
}

/* Copy rows of (key, step value) to @p out, as records, while they hold
 * at most @p max_bytes of keys and records (the first always). */
static int rows_to_kvs(pl__pg_store *s, PGresult *r, size_t max_bytes,
                       pl__kvs *out)
{
    int st = PL_OK;
    size_t bytes = 0;
    pl__buf whole = {0}; /* a shared value's record */
    for (int i = 0; !st && i < PQntuples(r); i++) {
        const uint8_t *k = (const uint8_t *)PQgetvalue(r, i, 0);
        size_t klen = (size_t)PQgetlength(r, i, 0);
        const uint8_t *v = (const uint8_t *)PQgetvalue(r, i, 1);
        size_t vlen = (size_t)PQgetlength(r, i, 1);
        st = as_record(s, k, klen, &v, &vlen, &whole);
        if (!st && out->n && bytes + klen + vlen > max_bytes)
            break; /* a shared value, larger than stored: the next page's */
        if (!st)
            st = pl__kvs_add(out, k, klen, v, vlen);
        bytes += klen + vlen;
    }
    pl__buf_free(&whole);
    return st;
}

/* Rows (key, step value, more) of run @p run after key @p after, at most
 * @p max_n and @p max_bytes of keys and stored values (the first always);
 * more: whether a step of the run follows the row. */
static int scan(pl__pg_store *s, uint64_t run, const uint8_t *after,
                size_t after_len, size_t max_n, size_t max_bytes,
                PGresult **out)
{
    uint8_t first[8], hi[PL__KEY_MAX], lim[8], blim[8];
    pl__put_be64(first, run);
    memcpy(hi, first, 8);
    memset(hi + 8, 0xff, sizeof hi - 8);
    pl__put_be64(lim, max_n >= INT64_MAX ? INT64_MAX - 1 : max_n); /* $3 + 1 */
    pl__put_be64(blim, max_bytes > INT64_MAX ? INT64_MAX : max_bytes);
    const char *vals[4] = {(const char *)(after ? after : first),
                           (const char *)hi, (const char *)lim,
                           (const char *)blim};
    int lens[4] = {after ? (int)after_len : 8, (int)sizeof hi, 8, 8};
    return query(s, Q_SCAN, 4, vals, lens, out, "scanning a run");
}

int pl__pg_scan(pl__pg_store *s, uint64_t run, const uint8_t *after,
                size_t after_len, size_t max_n, size_t max_bytes, pl__kvs *out)
{
    pl__kvs_reset(out);
    if (after && after_len > PL__KEY_MAX)
        return pl__err(PL_EINVAL, "store '%s': a step key of %zu bytes",
                       s->path, after_len);
    PGresult *r = NULL;
    int st = scan(s, run, after, after_len, max_n, max_bytes, &r);
    if (!st)
        st = rows_to_kvs(s, r, max_bytes, out);
    PQclear(r);
    return st;
}

/* Bytes of keys and stored values a page of pl__pg_each_step() holds (one
 * larger step alone). */
#define EACH_BYTES ((size_t)4 << 20)

int pl__pg_each_step(pl__pg_store *s, uint64_t run, pl__step_fn fn, void *user)
{
    uint8_t last[PL__KEY_MAX];
    size_t last_len = 0;
    pl__buf whole = {0}; /* a shared value's record */
    for (;;) {
        PGresult *r = NULL;
        int st = scan(s, run, last_len ? last : NULL, last_len, READ_MAX,
                      EACH_BYTES, &r);
        if (st) {
            pl__buf_free(&whole);
            return st;
        }
        int n = PQntuples(r);
        for (int i = 0; !st && i < n; i++) {
            size_t klen = (size_t)PQgetlength(r, i, 0);
            const uint8_t *k = (const uint8_t *)PQgetvalue(r, i, 0);
            const uint8_t *v = (const uint8_t *)PQgetvalue(r, i, 1);
            size_t vlen = (size_t)PQgetlength(r, i, 1);
            st = as_record(s, k, klen, &v, &vlen, &whole);
            if (!st)
                st = fn(k, klen, v, vlen, user);
            if (!st && i == n - 1) {
                if (klen > sizeof last)
                    st = pl__err(PL_ECORRUPT,
                                 "store '%s': run #%llu has a step key of "
                                 "%zu bytes",
                                 s->path, (unsigned long long)run, klen);
                else {
                    memcpy(last, k, klen);
                    last_len = klen;
                }
            }
        }
        /* the last row says whether a step follows it */
        bool more = n > 0 && PQgetlength(r, n - 1, 2) == 1 &&
                    *PQgetvalue(r, n - 1, 2) != 0;
        PQclear(r);
        if (st || !more) {
            pl__buf_free(&whole);
            return st;
        }
    }
}

/* ---- runs ---------------------------------------------------------------- */

int pl__pg_run_find(pl__pg_store *s, const char *id, uint64_t *num,
                    pl__buf *info)
{
    const char *vals[1] = {id};
    int lens[1] = {(int)strlen(id)};
    PGresult *r = NULL;
    int st = query(s, Q_RUN_FIND, 1, vals, lens, &r, "reading a run");
    if (st)
        return st;
    if (PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "no run '%s' in store '%s'", id, s->path);
    else if (PQgetlength(r, 0, 0) != 8)
        st = pl__err(PL_ECORRUPT, "run '%s' has a malformed record", id);
    else {
        *num = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        if (info) {
            pl__buf_reset(info);
            st = pl__buf_append(info, PQgetvalue(r, 0, 1),
                                (size_t)PQgetlength(r, 0, 1));
        }
    }
    PQclear(r);
    return st;
}

int pl__pg_state_get(pl__pg_store *s, uint64_t num, pl__buf *state)
{
    uint8_t key[8];
    pl__put_be64(key, num);
    const char *vals[1] = {(const char *)key};
    int lens[1] = {8};
    PGresult *r = NULL;
    int st = query(s, Q_STATE_GET, 1, vals, lens, &r, "reading a run state");
    if (st)
        return st;
    if (PQntuples(r) == 0)
        st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                     (unsigned long long)num);
    else {
        pl__buf_reset(state);
        st = pl__buf_append(state, PQgetvalue(r, 0, 0),
                            (size_t)PQgetlength(r, 0, 0));
    }
    PQclear(r);
    return st;
}

int pl__pg_runs(pl__pg_store *s, const char *after, bool desc, size_t max_n,
                pl__kvs *out)
{
    pl__kvs_reset(out);
    uint8_t lim[8];
    pl__put_be64(lim, max_n > INT64_MAX ? INT64_MAX : max_n);
    const char *vals[2] = {after ? after : "", (const char *)lim};
    int lens[2] = {after ? (int)strlen(after) : 0, 8};
    PGresult *r = NULL;
    int st = query(s, desc ? Q_RUNS_DESC : Q_RUNS, 2, vals, lens, &r,
                   "listing runs");
    if (!st)
        st = rows_to_kvs(s, r, SIZE_MAX, out);
    PQclear(r);
    return st;
}

int pl__pg_states_get(pl__pg_store *s, const uint64_t *nums, size_t n,
                      pl__buf *states)
{
    for (size_t i = 0; i < n; i++)
        pl__buf_reset(&states[i]);
    if (!n)
        return PL_OK;
    pl__buf a = {0};
    int st = pl__pg_int_array(&a, nums, n);
    PGresult *r = NULL;
    if (!st) {
        const char *vals[1] = {(const char *)a.data};
        int lens[1] = {0}, fmts[1] = {0}; /* the array in text */
        PGconn *c;
        if (!(st = pl__pg_conn_get(s, &c))) {
            r = pl__pg_exec_q(s, c, Q_STATES, 1, vals, lens, fmts);
            if (PQresultStatus(r) != PGRES_TUPLES_OK)
                st = pl__pg_err(s, c, r, "reading run states");
            pl__pg_conn_put(s, c);
        }
    }
    bool *seen = st ? NULL : calloc(n, sizeof *seen);
    if (!st && !seen)
        st = pl__err(PL_ENOMEM, "out of memory");
    for (int j = 0; !st && j < PQntuples(r); j++) {
        if (PQgetlength(r, j, 0) != 8) {
            st = pl__err(PL_ECORRUPT, "store '%s': a run number is malformed",
                         s->path);
            break;
        }
        uint64_t num = pl__get_be64((const uint8_t *)PQgetvalue(r, j, 0));
        for (size_t i = 0; !st && i < n; i++)
            if (nums[i] == num && !seen[i]) {
                seen[i] = true;
                st = pl__buf_append(&states[i], PQgetvalue(r, j, 1),
                                    (size_t)PQgetlength(r, j, 1));
            }
    }
    for (size_t i = 0; !st && i < n; i++)
        if (!seen[i])
            st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                         (unsigned long long)nums[i]);
    free(seen);
    PQclear(r);
    pl__buf_free(&a);
    return st;
}

/* ---- statistics ---------------------------------------------------------- */

int pl__pg_mark(pl__pg_store *s, uint64_t *out)
{
    PGresult *r = NULL;
    int st = query(s, Q_MARK, 0, NULL, NULL, &r, "reading the WAL position");
    if (st)
        return st;
    if (PQntuples(r) != 1 || PQgetlength(r, 0, 0) != 8)
        st = pl__err(PL_ESTORE, "store '%s': malformed WAL position", s->path);
    else
        *out = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
    PQclear(r);
    return st;
}

/*
 * PostgreSQL has no map and no free list of ours: file_bytes and map_bytes
 * are the schema's tables with their indexes and TOAST, used_pages that
 * in the server's pages, free_pages 0.
 */
int pl__pg_stats_get(pl__pg_store *s, pl__store_stats *out)
{
    memset(out, 0, sizeof *out);
    PGresult *r = NULL;
    int st = query(s, Q_STATS, 0, NULL, NULL, &r, "reading statistics");
    if (st)
        return st;
    uint64_t v[4];
    for (int i = 0; i < 4; i++) {
        if (PQgetlength(r, 0, i) != 8) {
            PQclear(r);
            return pl__err(PL_ESTORE, "store '%s': malformed statistics",
                           s->path);
        }
        v[i] = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, i));
    }
    PQclear(r);
    out->page_size = v[0];
    out->file_bytes = out->map_bytes = v[1];
    out->used_pages = v[0] ? (v[1] + v[0] - 1) / v[0] : 0;
    out->runs = v[2];
    out->step_records = v[3];
    return PL_OK;
}
