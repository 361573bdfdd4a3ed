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

static int query_once(pl__pg_store *s, int which, int nparams,
                      const char *const *vals, const int *lens, PGresult **out,
                      const char *what);

/* Run a query that returns rows of (key, value) or (value) into @p out;
 * once more if it read a pair's mark in a store that reads pairs since. */
static int query(pl__pg_store *s, int which, int nparams,
                 const char *const *vals, const int *lens, PGresult **out,
                 const char *what)
{
    int st = query_once(s, which, nparams, vals, lens, out, what);
    bool again = false;
    if (!st && pl__pg_meets_mark(s, which, *out) &&
        !(st = pl__pg_reopen_pairs(s, &again)) && again) {
        PQclear(*out);
        st = query_once(s, which, nparams, vals, lens, out, what);
    }
    if (st) {
        PQclear(*out);
        *out = NULL;
    }
    return st;
}

static int query_once(pl__pg_store *s, int which, int nparams,
                      const char *const *vals, const int *lens, PGresult **out,
                      const char *what)
{
    *out = NULL;
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    int fmts[5] = {1, 1, 1, 1, 1};
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

/* Q_READ's $5 for a read from key @p k (@p klen bytes): the key before it
 * in its ledger, whose row may hold it (PAIRS), into @p out; its length,
 * 0 (none: '') for a ledger's first step or a key too short for a seq. */
static int key_before(const uint8_t *k, size_t klen, uint8_t *out)
{
    if (klen < 12 || klen > PL__KEY_MAX || !pl__get_be32(k + klen - 4))
        return 0;
    memcpy(out, k, klen);
    pl__put_be32(out + klen - 4, pl__get_be32(k + klen - 4) - 1);
    return (int)klen;
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
    uint8_t lim[8], before[PL__KEY_MAX];
    pl__put_be64(lim, 1);
    const char *vals[5] = {(const char *)key, (const char *)key,
                           (const char *)lim, (const char *)lim,
                           (const char *)before};
    int lens[5] = {(int)klen, (int)klen, 8, 8, key_before(key, klen, before)};
    int st = query(g->s, Q_READ, 5, vals, lens, &g->r, "reading a shared step");
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

/* Row (@p k, @p v) of a ledger's read into @p out, as a record: it must be
 * step *want of the ledger whose keys are @p prefix_len bytes long before
 * the seq.  *more: whether the read goes on past it (@p max_n, @p
 * max_bytes with *bytes so far). */
static int read_row(pl__pg_store *s, const uint8_t *k, size_t klen,
                    const uint8_t *v, size_t vlen, size_t prefix_len,
                    uint32_t *want, size_t max_n, size_t max_bytes,
                    size_t *bytes, pl__buf *whole, pl__kvs *out, bool *more)
{
    *more = false;
    if (klen < prefix_len + 4 || pl__get_be32(k + prefix_len) != *want)
        return pl__err(PL_ECORRUPT,
                       "store '%s': a ledger is missing its step %u", s->path,
                       *want);
    int st = as_record(s, k, klen, &v, &vlen, whole);
    if (!st)
        st = pl__kvs_begin(out, NULL, 0);
    if (!st)
        st = pl__buf_append(&out->data, v, vlen);
    if (st)
        return st;
    pl__kvs_end(out);
    *bytes += vlen;
    *more = ++*want != 0 && out->n < max_n && *bytes < max_bytes;
    return PL_OK;
}

int pl__pg_read(pl__pg_store *s, const uint8_t *prefix, size_t prefix_len,
                uint32_t from_seq, size_t max_n, size_t max_bytes, pl__kvs *out)
{
    pl__kvs_reset(out);
    uint8_t lo[PL__KEY_MAX], hi[PL__KEY_MAX], lim[8], blim[8],
        before[PL__KEY_MAX];
    memcpy(lo, prefix, prefix_len);
    memcpy(hi, prefix, prefix_len);
    pl__put_be32(lo + prefix_len, from_seq);
    pl__put_be32(hi + prefix_len, UINT32_MAX);
    pl__put_be64(lim, max_n < READ_MAX ? (max_n ? max_n : 1) : READ_MAX);
    pl__put_be64(blim, max_bytes > INT64_MAX ? INT64_MAX : max_bytes);
    const char *vals[5] = {(const char *)lo, (const char *)hi,
                           (const char *)lim, (const char *)blim,
                           (const char *)before};
    int lens[5] = {(int)prefix_len + 4, (int)prefix_len + 4, 8, 8,
                   key_before(lo, prefix_len + 4, before)};
    PGresult *r = NULL;
    int st = query(s, Q_READ, 5, vals, lens, &r, "reading a ledger");
    if (st)
        return st;
    uint32_t want = from_seq;
    size_t bytes = 0;
    pl__buf whole = {0}; /* a shared value's record */
    bool more = true;
    for (int i = 0; !st && more && i < PQntuples(r); i++)
        st = read_row(s, (const uint8_t *)PQgetvalue(r, i, 0),
                      (size_t)PQgetlength(r, i, 0),
                      (const uint8_t *)PQgetvalue(r, i, 1),
                      (size_t)PQgetlength(r, i, 1), prefix_len, &want, max_n,
                      max_bytes, &bytes, &whole, out, &more);
    PQclear(r);
    pl__buf_free(&whole);
    return st;
}

/* Whether row @p i of a scan's @p r has a key past row i - 1's (a key
 * read twice is a row's second equal to another row's key: PAIRS). */
static int scan_order(pl__pg_store *s, PGresult *r, int i)
{
    if (!i)
        return PL_OK;
    size_t a = (size_t)PQgetlength(r, i - 1, 0),
           b = (size_t)PQgetlength(r, i, 0);
    int c = memcmp(PQgetvalue(r, i - 1, 0), PQgetvalue(r, i, 0), a < b ? a : b);
    if (c < 0 || (!c && a < b))
        return PL_OK;
    return pl__err(PL_ECORRUPT, "store '%s': a run's steps hold a key twice",
                   s->path);
}

/* Copy rows of (key, step value) to @p out, as records, while they hold
 * at most @p max_bytes of keys and records (the first always); @p steps: a
 * scan's, whose keys must increase. */
static int rows_to_kvs(pl__pg_store *s, PGresult *r, size_t max_bytes,
                       bool steps, pl__kvs *out)
{
    int st = PL_OK;
    size_t bytes = 0;
    pl__buf whole = {0}; /* a shared value's record */
    for (int i = 0; !st && i < PQntuples(r); i++) {
        const uint8_t *k = (const uint8_t *)PQgetvalue(r, i, 0);
        size_t klen = (size_t)PQgetlength(r, i, 0);
        const uint8_t *v = (const uint8_t *)PQgetvalue(r, i, 1);
        size_t vlen = (size_t)PQgetlength(r, i, 1);
        st = steps ? scan_order(s, r, i) : PL_OK;
        if (!st)
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
        st = rows_to_kvs(s, r, max_bytes, true, out);
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
            st = scan_order(s, r, i);
            if (!st)
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

/* ---- PAIRS ----------------------------------------------------------------
 *
 * A row of steps holds its step (k, v), or a pair: two steps one commit
 * wrote, the second's key the one right after the first's (the same
 * ledger, seq + 1), one heap tuple and one index entry where they were two
 * (a call's action_call and action_result: pg_one.c, ONE_PAIR).  A pair's
 * row holds its first step's record in v1 and its second in (k2, v2); its
 * v holds PAIR_MARK, a record header of a format no version reads, so a
 * process of an older library that opened the store while it was format
 * 1, and still runs when a writable open made it 2, fails such a ledger
 * with PL_EVERSION: it never reads a call without its result, which it
 * would take for a call in flight at a crash and run again (a process of
 * this library open so reads the format again: pg_reopen.c).  Every read
 * splits a row into its steps: the rows of the key
 * range, and the row before it, whose second may be the range's first
 * step (a read from, or a scan after, the first of a pair); then the
 * steps in key order with the read's limits.  A row's second is checked
 * as it is split: a key that is not the next of its row's first (another
 * ledger's, an earlier one, one past a gap), a second half missing, or a
 * first whose v is not PAIR_MARK or whose v1 is missing (or a v1 in a
 * row without a second)
 * raises pl_pair_bad() (SQLSTATE PAIR_STATE, PL_ECORRUPT); a second equal
 * to another row's key reads as a step twice, which the readers refuse
 * (read_row(): each seq once, in order; the scans: keys increasing).
 *
 * The primary key holds a row's first key alone, and still refuses every
 * write at a taken position that a writer can make: a writer appends
 * where a ledger ended in what it read, committed commits only, and a
 * commit's first step in a ledger starts a row (a pair is two steps of
 * one commit), so a position a stale writer takes again is a row's first
 * key (PL_EBUSY, as before).  Only a writer that saw half a commit could
 * write a pair's second again; it is not probed for (with a probe of the
 * key in a call's statement, the server's work a call grew by half:
 * bench/README.md), and a read would report the key twice.
 */

static char *pair_cols(bool single, const char *t)
{
    return single
               ? pl__asprintf(
                     "%s.k, %s.v, NULL::bytea, NULL::bytea, NULL::bytea", t, t)
               : pl__asprintf("%s.k, %s.v, %s.v1, %s.k2, %s.v2", t, t, t, t, t);
}

char *pl__pg_pair_cols(const pl__pg_store *s, const char *t)
{
    return pair_cols(s->single, t);
}

/* Without pair columns, a row whose v is the mark gives as its second the
 * next key, valued the mark too: a read from, or a scan after, the first
 * of a pair a writable open wrote meets the mark (pg_reopen.c). */
static char *pair_split(const pl__pg_store *s, bool single, const char *r)
{
    if (single)
        return pl__asprintf(
            "CROSS JOIN LATERAL (VALUES (%s.k, %s.v), (CASE WHEN %s.v = " PAIR_MARK
            " AND length(%s.k) >= 12 THEN substr(%s.k, 1, "
            "length(%s.k) - 4) || substr(int8send(" SEQ_OF(
                "%s.k") " + 1), "
                        "5, 4) END, CASE WHEN %s.v = " PAIR_MARK
                        " THEN " PAIR_MARK " END)) x(k, v)",
            r, r, r, r, r, r, r, r, r, r, r, r, r, r, r);
    char k[16], k2[16];
    snprintf(k, sizeof k, "%s.k", r);
    snprintf(k2, sizeof k2, "%s.k2", r);
    return pl__asprintf(
        "CROSS JOIN LATERAL (VALUES (%s.k, CASE WHEN %s.k2 IS NULL AND %s.v1 "
        "IS NULL THEN %s.v WHEN %s.k2 IS NOT NULL AND %s.v1 IS NOT NULL AND "
        "%s.v = " PAIR_MARK " THEN %s.v1 ELSE \"%s\".pl_pair_bad(%s.k) END), "
        "(CASE WHEN %s.k2 IS NULL "
        "AND %s.v2 IS NULL THEN NULL WHEN %s.k2 IS NULL OR %s.v2 IS NULL OR "
        "length(%s.k2) <> length(%s.k) OR length(%s.k) < 12 OR substr(%s.k2, "
        "1, length(%s.k) - 4) <> substr(%s.k, 1, length(%s.k) - 4) THEN "
        "\"%s\".pl_pair_bad(%s.k) WHEN " SEQ_OF("%s") " = " SEQ_OF(
            "%s") " + 1 THEN %s.k2 ELSE \"%s\".pl_pair_bad(%s.k) END, %s.v2)) "
                  "x(k, v)",
        r, r, r, r, r, r, r, r, s->schema, r, /* the first step */
        r, r, r, r, r, r, r, r, r, r, r, s->schema, r, k2, k2, k2, k2, k2, k2,
        k2, k2, k, k, k, k, k, k, k, k, r, s->schema, r, r);
}

char *pl__pg_pair_split(const pl__pg_store *s, const char *r)
{
    return pair_split(s, s->single, r);
}

/* A read of steps (Q_READ, Q_SCAN, Q_STATS, L_READ_ROOT) for the store's
 * schema, its rows split (PAIRS).  The byte limits and the answers are
 * those of single rows' reads: Q_READ, the steps of a ledger from $1 to
 * $2 (keys as long as $1), $3 at most, those that start before $4 bytes
 * of values (the server adds up their lengths, which a TOASTed value's
 * header gives, and sends no more), $5 the key before $1 (its row may
 * hold $1; '' for none); Q_SCAN, after key $1 up to $2, $3 at most and
 * $4 bytes of keys and values but always the first, and whether a step
 * follows each (the plain query reads one step more to say it for the
 * last), the row before $1 looked for in $1's run alone; L_READ_ROOT, Q_READ of a run's root ledger from seq 0, the run
 * by its id $1, $2 and $3 its limits. */
char *pl__pg_steps_sql(const pl__pg_store *s, int which, bool single)
{
    const char *n = s->schema;
    if (which == Q_STATS) /* one statement: one snapshot */
        return pl__asprintf(
            "SELECT current_setting('block_size')::bigint, (SELECT "
            "coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE "
            "ns.nspname = '%s' AND c.relkind IN ('r', 'S'))::bigint, (SELECT "
            "count(*) FROM \"%s\".runs), (SELECT count(*) + count(%s) FROM "
            "\"%s\".steps)",
            n, n, single ? "NULL::bytea" : "k2", n);
    char *t = pair_cols(single, "t"), *x = pair_split(s, single, "r"), *q;
    if (!t || !x)
        q = NULL;
    else if (which == Q_READ)
        q = pl__asprintf(
            "SELECT k, v FROM (SELECT k, v, sum(length(v)) OVER w - length(v) "
            "AS before FROM (SELECT x.k, x.v FROM (SELECT %s FROM \"%s\".steps "
            "t WHERE t.k = $5::bytea UNION ALL (SELECT %s FROM \"%s\".steps t "
            "WHERE t.k >= $1::bytea AND t.k <= $2::bytea AND length(t.k) = "
            "length($1::bytea) ORDER BY t.k LIMIT $3::bigint)) r(k, v, v1, k2, v2) "
            "%s WHERE x.k >= $1::bytea AND x.k <= $2::bytea AND length(x.k) = "
            "length($1::bytea) ORDER BY x.k LIMIT $3::bigint) s "
            "WINDOW w AS (ORDER BY k ROWS UNBOUNDED PRECEDING)) p "
            "WHERE before = 0 OR before < $4::bigint ORDER BY k",
            t, n, t, n, x);
    else if (which == Q_SCAN)
        q = pl__asprintf(
            "SELECT k, v, more FROM (SELECT k, v, row_number() OVER w AS i, "
            "sum(length(k) + length(v)) OVER w AS upto, "
            "length(k) + length(v) AS len, lead(k) OVER w IS NOT NULL AS more "
            "FROM (SELECT x.k, x.v FROM ((SELECT %s FROM \"%s\".steps t WHERE "
            "t.k <= $1::bytea AND t.k >= substr($1::bytea, 1, 8) ORDER BY "
            "t.k DESC LIMIT 1) UNION ALL (SELECT %s "
            "FROM \"%s\".steps t WHERE t.k > $1::bytea AND t.k <= $2::bytea "
            "ORDER BY t.k LIMIT $3::bigint + 1)) r(k, v, v1, k2, v2) %s WHERE "
            "x.k > $1::bytea AND x.k <= $2::bytea ORDER BY x.k LIMIT "
            "$3::bigint + 1) s "
            "WINDOW w AS (ORDER BY k ROWS UNBOUNDED PRECEDING)) p "
            "WHERE i <= $3::bigint AND (upto <= $4::bigint OR upto = len) "
            "ORDER BY k",
            t, n, t, n, x);
    else /* L_READ_ROOT: a valid second is in the ledger's range */
        q = pl__asprintf(
            "SELECT k, v FROM (SELECT k, v, sum(length(v)) OVER w - "
            "length(v) AS before FROM (SELECT x.k, x.v FROM (SELECT %s FROM "
            "\"%s\".runs u JOIN \"%s\".steps t ON t.k >= int8send(u.num) || "
            "'\\x00000000'::bytea AND t.k <= int8send(u.num) || "
            "'\\xffffffff'::bytea AND length(t.k) = 12 WHERE u.id = $1::bytea "
            "ORDER BY t.k LIMIT $2::bigint) r(k, v, v1, k2, v2) %s WHERE x.k IS "
            "NOT NULL ORDER BY x.k LIMIT $2::bigint) s WINDOW w AS (ORDER BY "
            "k ROWS UNBOUNDED PRECEDING)) p WHERE before = 0 OR before < "
            "$3::bigint ORDER BY k",
            t, n, n, x);
    free(t);
    free(x);
    return q;
}

/* A read-only open of a format 1 store: its reads without pair columns. */
static int remake_reads(pl__pg_store *s)
{
    static const int which[] = {Q_READ, Q_SCAN, Q_STATS, L_READ_ROOT};
    for (size_t i = 0; i < sizeof which / sizeof *which; i++) {
        free(s->q[which[i]]);
        if (!(s->q[which[i]] = pl__pg_steps_sql(s, which[i], s->single)))
            return pl__err(PL_ENOMEM, "out of memory");
    }
    return PL_OK;
}

int pl__pg_pairs_setup(pl__pg_store *s)
{
    /* s->single: a format 1 store's reads */
    return s->read_only && s->single ? remake_reads(s) : PL_OK;
}

char *pl__pg_pairs_ddl(const pl__pg_store *s)
{
    const char *n = s->schema;
    return pl__asprintf(
        "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute WHERE "
        "attrelid = '\"%s\".steps'::regclass AND attname = 'v1' AND NOT "
        "attisdropped) THEN ALTER TABLE \"%s\".steps ADD COLUMN IF NOT "
        "EXISTS v1 bytea, ADD COLUMN IF NOT EXISTS k2 bytea, ADD COLUMN IF "
        "NOT EXISTS v2 bytea; END IF; END $d$;"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_pair_bad(k bytea) RETURNS "
        "bytea LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'the row of "
        "steps at key %% holds a second step that is not the one right "
        "after its first', k USING ERRCODE = '" PAIR_STATE "'; END $f$;"
        "UPDATE \"%s\".meta SET v = %d WHERE k = 'format' AND v = %d;",
        n, n, n, n, FORMAT, FORMAT_SINGLE);
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

/* L_RUN_LOAD's count of the parked run's key (pg_int.h); one schema */
#define LOAD_LIVE KEY_LIVE("%s", "p.fkey", "p.flimit", NOW_ONCE)
#define LOAD_KEY_OK KEY_OK("p.ksum", "p.fkey", "p.flimit")

char *pl__pg_read_sql(const pl__pg_store *s, int which)
{
    const char *n = s->schema;
    if (which == Q_RUN_LOAD) /* a run found, with its state */
        return pl__asprintf("SELECT r.num, r.info, s.v FROM \"%s\".runs r "
                            "LEFT JOIN \"%s\".state s ON s.run = r.num WHERE "
                            "r.id = $1::bytea",
                            n, n);
    if (which != L_RUN_LOAD) /* L_READ_ROOT, Q_READ, Q_SCAN, Q_STATS */
        return pl__pg_steps_sql(s, which, s->single);
    /* L_RUN_LOAD: the same, whether the run is parked with a key and
     * whether the key has room now, counted as pl_key_room() counts (no
     * lock: a take counts again; a damaged row has none: pg_flow.c, KEY
     * SUMS), and its inbox in one value: each record its seq (8 bytes),
     * its length (4) and its bytes, in seq order */
    return pl__asprintf(
        "SELECT r.num, r.info, s.v, p.fkey IS NOT NULL, p.fkey IS NULL OR "
        "(" LOAD_KEY_OK " AND " LOAD_LIVE " < p.flimit), (SELECT "
        "string_agg(int8send(i.seq) || int4send(length(i.rec)) || i.rec, "
        "''::bytea ORDER BY i.seq) FROM \"%s\".inbox i WHERE i.run = r.num) "
        "FROM \"%s\".runs r LEFT JOIN \"%s\".state s ON s.run = r.num LEFT "
        "JOIN \"%s\".parked p ON p.run = r.num WHERE r.id = $1::bytea",
        n, n, n, n, n);
}

/* L_RUN_LOAD's columns past Q_RUN_LOAD's, in binary, into @p more. */
static int run_more(pl__pg_store *s, PGresult *r, pl__run_more *more)
{
    /* booleans: one byte each */
    more->keyed = PQgetlength(r, 0, 3) == 1 && *PQgetvalue(r, 0, 3);
    more->room = PQgetlength(r, 0, 4) != 1 || *PQgetvalue(r, 0, 4);
    const uint8_t *p = (const uint8_t *)PQgetvalue(r, 0, 5);
    size_t left = PQgetisnull(r, 0, 5) ? 0 : (size_t)PQgetlength(r, 0, 5);
    int st = PL_OK;
    while (!st && left) {
        size_t len = left >= 12 ? pl__get_be32(p + 8) : 0;
        if (left < 12 || len > left - 12)
            return pl__err(PL_ECORRUPT,
                           "store '%s': an inbox read is malformed", s->path);
        st = pl__kvs_add(&more->inbox, p, 8, p + 12, len);
        p += 12 + len;
        left -= 12 + len;
    }
    return st;
}

/* A run's load and its root ledger's first read, in one pipeline. */
typedef struct load_ctx {
    pl__pg_store *s;
    PGconn *c;
    PGresult *run; /* L_RUN_LOAD's, kept */
    pl__kvs rows;  /* L_READ_ROOT's (key, value) rows */
} load_ctx;

static int load_result(size_t i, PGresult *r, void *user)
{
    load_ctx *x = user;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return pl__pg_err(x->s, x->c, r, "reading a run");
    if (!i) { /* kept: the pipeline clears the one it hands over */
        x->run = PQcopyResult(r, PG_COPYRES_ATTRS | PG_COPYRES_TUPLES);
        return x->run ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
    }
    int st = PL_OK;
    for (int k = 0; !st && k < PQntuples(r); k++)
        st = pl__kvs_add(&x->rows, (const uint8_t *)PQgetvalue(r, k, 0),
                         (size_t)PQgetlength(r, k, 0),
                         (const uint8_t *)PQgetvalue(r, k, 1),
                         (size_t)PQgetlength(r, k, 1));
    return st;
}

/* A run's root ledger rows (key, value) @p rows, read with @p n and
 * more->ledger_bytes, into more->ledger as records, as pl__pg_read() makes
 * them (a shared value may read more, on another connection). */
static int ledger_rows(pl__pg_store *s, const pl__kvs *rows, size_t n,
                       pl__run_more *more)
{
    uint32_t want = 0;
    size_t bytes = 0;
    pl__buf whole = {0};
    bool go = true;
    int st = PL_OK;
    for (size_t i = 0; !st && go && i < rows->n; i++)
        st = read_row(s, pl__kvs_key(rows, i), rows->e[i].klen,
                      pl__kvs_val(rows, i), rows->e[i].vlen, 8, &want, n,
                      more->ledger_bytes, &bytes, &whole, &more->ledger, &go);
    pl__buf_free(&whole);
    more->ledger_read = !st;
    return st;
}

/* L_RUN_LOAD and L_READ_ROOT in one round trip: the run's row in *out,
 * its root ledger's first records in more->ledger. */
static int load_with_ledger(pl__pg_store *s, const char *id, pl__run_more *more,
                            PGresult **out)
{
    *out = NULL;
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    uint8_t lim[8], blim[8];
    size_t n = more->ledger_n < READ_MAX ? more->ledger_n : READ_MAX;
    pl__put_be64(lim, n);
    pl__put_be64(blim, more->ledger_bytes > INT64_MAX ? INT64_MAX
                                                      : more->ledger_bytes);
    const char *vals[3] = {id, (const char *)lim, (const char *)blim};
    int lens[3] = {(int)strlen(id), 8, 8}, fmts[3] = {1, 1, 1};
    load_ctx x = {.s = s, .c = c};
    if (PQenterPipelineMode(c) != 1)
        st = pl__pg_err(s, c, NULL, "entering pipeline mode");
    if (!st)
        st = pl__pg_send(s, c, L_RUN_LOAD, 1, vals, lens, fmts,
                         "reading a run");
    if (!st)
        st = pl__pg_send(s, c, L_READ_ROOT, 3, vals, lens, fmts,
                         "reading a ledger");
    if (!st)
        st = pl__pg_pipeline_finish(s, c, 2, load_result, &x, "reading a run");
    pl__pg_conn_put(s, c);
    if (!st)
        st = ledger_rows(s, &x.rows, n, more);
    pl__kvs_free(&x.rows);
    if (st)
        PQclear(x.run);
    else
        *out = x.run;
    return st;
}

int pl__pg_ledger_first(pl__pg_store *s, uint64_t run, const uint8_t *p,
                        size_t len, size_t max_n, size_t max_bytes,
                        pl__kvs *out)
{
    pl__kvs_reset(out);
    uint32_t want = 0;
    size_t bytes = 0;
    pl__buf whole = {0};
    bool go = true;
    int st = PL_OK;
    while (!st && go && len) {
        size_t klen = len >= 4 ? pl__get_be32(p) : 0;
        size_t vlen = len >= 8 + klen && klen <= len - 8
                          ? pl__get_be32(p + 4 + klen)
                          : 0;
        if (len < 8 || klen > len - 8 || vlen > len - 8 - klen || klen < 8 ||
            pl__get_be64(p + 4) != run)
            st = pl__err(PL_ECORRUPT,
                         "store '%s': run #%llu's ledger read is malformed",
                         s->path, (unsigned long long)run);
        else
            st = read_row(s, p + 4, klen, p + 8 + klen, vlen, 8, &want, max_n,
                          max_bytes, &bytes, &whole, out, &go);
        p += 8 + klen + vlen;
        len -= len < 8 + klen + vlen ? len : 8 + klen + vlen;
    }
    pl__buf_free(&whole);
    return st;
}

int pl__pg_run_load(pl__pg_store *s, const char *id, uint64_t *num,
                    pl__buf *info, pl__buf *state, pl__run_more *more)
{
    const char *vals[1] = {id};
    int lens[1] = {(int)strlen(id)};
    PGresult *r = NULL;
    bool ro = s->read_only; /* L_RUN_LOAD is not prepared there */
    if (more && !ro && more->ledger_n) {
        /* a run this process parked: as it was kept (pg_cache.c), its
         * inbox empty; the ride checks it is still so */
        size_t n = more->ledger_n < READ_MAX ? more->ledger_n : READ_MAX;
        pl__kvs rows = {0};
        int cst = pl__pg_cache_get(s, id, n, more->ledger_bytes, num, info,
                                   state, &rows);
        if (!cst)
            cst = ledger_rows(s, &rows, n, more);
        pl__kvs_free(&rows);
        if (!cst)
            return PL_OK;
        if (cst != PL_ENOTFOUND) { /* not as kept: read as before */
            pl__pg_cache_drop(s, *num);
            pl__err_clear();
            pl__kvs_reset(&more->ledger);
            more->ledger_read = false;
        }
    }
    int st = more && !ro && more->ledger_n
                 ? load_with_ledger(s, id, more, &r)
                 : query(s, more && !ro ? L_RUN_LOAD : Q_RUN_LOAD, 1, vals,
                         lens, &r, "reading a run");
    if (st)
        return st;
    pl__buf_reset(info);
    pl__buf_reset(state);
    if (PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "no run '%s' in store '%s'", id, s->path);
    else if (PQgetlength(r, 0, 0) != 8)
        st = pl__err(PL_ECORRUPT, "run '%s' has a malformed record", id);
    else if (PQgetisnull(r, 0, 2))
        st = pl__err(PL_ECORRUPT, "run '%s' has no state record", id);
    else {
        *num = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        st = pl__buf_append(info, PQgetvalue(r, 0, 1),
                            (size_t)PQgetlength(r, 0, 1));
        if (!st)
            st = pl__buf_append(state, PQgetvalue(r, 0, 2),
                                (size_t)PQgetlength(r, 0, 2));
        if (!st && more && !ro)
            st = run_more(s, r, more);
    }
    PQclear(r);
    if (!st && more && ro) /* the inbox alone, as it is read otherwise */
        st = pl__pg_inbox_read(s, *num, &more->inbox);
    return st;
}

const char *pl__pg_path(const pl__pg_store *s) { return s->path; }

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
        st = rows_to_kvs(s, r, SIZE_MAX, false, out);
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
