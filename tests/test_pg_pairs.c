/*
 * test_pg_pairs.c -- a row of steps that holds two (ledger/pg/pg_read.c,
 * PAIRS) on PostgreSQL (tests/pg_run.sh starts the server): every read
 * splits it into the steps a row each would have given (a ledger's read
 * from, or up to, a pair's second; a scan whose cursor is a pair's
 * first; the limits; the counts), a store of the format before pairs
 * opens read-only as it is and read-write gains them, a read-only open
 * made before that goes on reading the pairs (stores and engines, on two
 * threads), and a pair that is not two steps in a row is reported as
 * corruption, never read as steps.
 */
#include "support.h"

#include "pg_int.h"
#include "pg_store.h"
#include "record.h"
#include "support_pg_store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(pg_pairs, .fini = t_cleanup, .timeout = 120);

/* Run @p run's step key @p seq of its root ledger, or with @p child of the
 * ledger 0.@p parent (a 16-byte key); its length. */
static size_t key_of(uint8_t *key, uint64_t run, uint32_t seq, bool child,
                     uint32_t parent)
{
    pl__put_be64(key, run);
    if (!child) {
        pl__put_be32(key + 8, seq);
        return 12;
    }
    pl__put_be32(key + 8, parent);
    pl__put_be32(key + 12, seq);
    return 16;
}

/* Commit under @p run's fence (generation 1) the @p n steps of a ledger
 * from @p from (the root's, or 0.@p parent's), valued "v<seq>" ("c<seq>"
 * in the child). */
static void commit_steps(pl__pg_store *s, uint64_t run, uint32_t from, size_t n,
                         bool child, uint32_t parent)
{
    pl__batch w = {0};
    w.run = run;
    w.gen = 1;
    uint8_t key[16];
    for (size_t i = 0; i < n; i++) {
        uint32_t seq = from + (uint32_t)i;
        size_t klen = key_of(key, run, seq, child, parent);
        char v[16];
        int vl = snprintf(v, sizeof v, "%c%u", child ? 'c' : 'v', seq);
        cr_assert_eq(pl__kvs_add(&w.steps, key, klen, (uint8_t *)v, (size_t)vl),
                     PL_OK);
    }
    pl__batch *one[1] = {&w};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    pl__batch_free(&w);
}

/* Run a statement of the test's own (the store's tables behind its back). */
static void admin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void admin(const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    pg_admin_exec(sql);
}

/* Whether @p got holds the values @p want ("v0 v1 ..."), in order. */
static void expect_values(const pl__kvs *got, const char *want)
{
    char all[256] = "";
    size_t at = 0;
    for (size_t i = 0; i < got->n && at < sizeof all - 1; i++) {
        int w = snprintf(all + at, sizeof all - at, "%s%.*s", i ? " " : "",
                         (int)got->e[i].vlen,
                         (const char *)pl__kvs_val(got, i));
        at += w > 0 ? (size_t)w : 0;
    }
    cr_expect_str_eq(all, want);
}

/* Run @p run's root ledger from @p from, @p n and @p bytes at most. */
static void expect_read(pl__pg_store *s, uint64_t run, uint32_t from, size_t n,
                        size_t bytes, const char *want)
{
    uint8_t prefix[8];
    pl__put_be64(prefix, run);
    pl__kvs got = {0};
    cr_assert_eq(pl__pg_read(s, prefix, 8, from, n, bytes, &got), PL_OK, "%s",
                 pl_errmsg());
    expect_values(&got, want);
    pl__kvs_free(&got);
}

/* A scan of @p run after key (@p after, @p alen; NULL: from its first). */
static void expect_scan(pl__pg_store *s, uint64_t run, const uint8_t *after,
                        size_t alen, size_t n, const char *want)
{
    pl__kvs got = {0};
    cr_assert_eq(pl__pg_scan(s, run, after, alen, n, SIZE_MAX, &got), PL_OK,
                 "%s", pl_errmsg());
    expect_values(&got, want);
    pl__kvs_free(&got);
}

/* The steps store @p s counts. */
static uint64_t step_records(pl__pg_store *s)
{
    pl__store_stats st;
    cr_assert_eq(pl__pg_stats_get(s, &st), PL_OK, "%s", pl_errmsg());
    return st.step_records;
}

/*
 * A run of pairs (0-1, 2-3, 5-6), a step alone (4) and a pair in a
 * callee's ledger (0.6: 0-1), which sorts between 6 and the root's next:
 * five rows, nine steps, read as nine rows would be.
 */
Test(pg_pairs, a_row_of_two_reads_as_two_steps)
{
    pl__pg_store *s = pg_store("t_pairs");
    uint64_t run = leased_run(s, "pairs");
    commit_steps(s, run, 0, 2, false, 0);
    commit_steps(s, run, 2, 2, false, 0);
    commit_steps(s, run, 4, 1, false, 0);
    commit_steps(s, run, 5, 2, false, 0);
    commit_steps(s, run, 0, 2, true, 6);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM t_pairs.steps"), 5);
    cr_expect_eq(t_pg_number("SELECT count(k2) FROM t_pairs.steps"), 4);
    cr_expect_eq(step_records(s), 9);
    cr_expect_eq(steps_of(s, run), 9);

    /* a ledger's reads: from a pair's first or second, up to either */
    expect_read(s, run, 0, 100, 1 << 20, "v0 v1 v2 v3 v4 v5 v6");
    expect_read(s, run, 1, 100, 1 << 20, "v1 v2 v3 v4 v5 v6");
    expect_read(s, run, 3, 2, 1 << 20, "v3 v4");
    expect_read(s, run, 2, 1, 1 << 20, "v2");
    expect_read(s, run, 6, 100, 1 << 20, "v6");
    expect_read(s, run, 7, 100, 1 << 20, "");
    /* the byte limit: a step while the values before it are under it */
    expect_read(s, run, 0, 100, 2, "v0");
    expect_read(s, run, 0, 100, 3, "v0 v1");
    expect_read(s, run, 1, 100, 5, "v1 v2 v3");
    /* the callee's ledger, from its pair's second */
    uint8_t prefix[12], key[16];
    key_of(prefix, run, 6, false, 0);
    pl__kvs got = {0};
    cr_assert_eq(pl__pg_read(s, prefix, 12, 1, 100, 1 << 20, &got), PL_OK, "%s",
                 pl_errmsg());
    expect_values(&got, "c1");
    cr_assert_eq(pl__pg_read(s, prefix, 12, 0, 100, 1 << 20, &got), PL_OK);
    expect_values(&got, "c0 c1");
    pl__kvs_free(&got);

    /* scans in key order: after a pair's first its second comes */
    expect_scan(s, run, NULL, 0, 100, "v0 v1 v2 v3 v4 v5 v6 c0 c1");
    expect_scan(s, run, key, key_of(key, run, 0, false, 0), 2, "v1 v2");
    expect_scan(s, run, key, key_of(key, run, 1, false, 0), 2, "v2 v3");
    expect_scan(s, run, key, key_of(key, run, 2, false, 0), 1, "v3");
    expect_scan(s, run, key, key_of(key, run, 5, false, 0), 100, "v6 c0 c1");
    expect_scan(s, run, key, key_of(key, run, 6, false, 0), 100, "c0 c1");
    expect_scan(s, run, key, key_of(key, run, 0, true, 6), 100, "c1");
    expect_scan(s, run, key, key_of(key, run, 1, true, 6), 100, "");

    /* a run made after it scans from its own first step */
    uint64_t next = leased_run(s, "pairs-next");
    commit_steps(s, next, 0, 2, false, 0);
    expect_scan(s, next, NULL, 0, 100, "v0 v1");
    expect_read(s, next, 1, 100, 1 << 20, "v1");
    cr_expect_eq(step_records(s), 11);
    pl__pg_close(s);
}

/*
 * A store of format 1 (single rows alone, no pair columns: as the library
 * before pairs made it) opens read-only as it is, and read-write gains the
 * columns and format 2, which a library of format 1 alone refuses; its
 * runs read as before and go on, their next commits in pairs.
 */
Test(pg_pairs, a_store_of_single_rows_opens_and_goes_on)
{
    pl__pg_store *s = pg_store("t_single");
    uint64_t run = leased_run(s, "single");
    pl__pg_close(s);
    /* the old store: its table as it was, its rows as it wrote them */
    admin("ALTER TABLE t_single.steps DROP COLUMN v1, DROP COLUMN k2, "
          "DROP COLUMN v2;"
          "DROP FUNCTION t_single.pl_pair_bad(bytea);"
          "UPDATE t_single.meta SET v = 1 WHERE k = 'format';"
          "INSERT INTO t_single.steps (k, v) SELECT int8send(%llu) || "
          "int4send(j), convert_to('v' || j, 'UTF8') FROM generate_series(0, "
          "2) j",
          (unsigned long long)run);

    char *uri = t_pg_store_uri("t_single");
    pl__store_options ro = {.read_only = true};
    cr_assert_eq(pl__pg_open(&s, uri, &ro), PL_OK, "%s", pl_errmsg());
    expect_read(s, run, 0, 100, 1 << 20, "v0 v1 v2");
    expect_read(s, run, 1, 1, 1 << 20, "v1");
    expect_scan(s, run, NULL, 0, 100, "v0 v1 v2");
    cr_expect_eq(steps_of(s, run), 3);
    cr_expect_eq(step_records(s), 3);
    pl__pg_close(s);
    cr_expect_eq(t_pg_number("SELECT v FROM t_single.meta WHERE k = "
                             "'format'"),
                 1, "a read-only open changes nothing");

    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(t_pg_number("SELECT v FROM t_single.meta WHERE k = "
                             "'format'"),
                 FORMAT);
    expect_read(s, run, 0, 100, 1 << 20, "v0 v1 v2");
    commit_steps(s, run, 3, 2, false, 0);
    commit_steps(s, run, 5, 1, false, 0);
    expect_read(s, run, 0, 100, 1 << 20, "v0 v1 v2 v3 v4 v5");
    expect_read(s, run, 4, 100, 1 << 20, "v4 v5");
    expect_scan(s, run, NULL, 0, 100, "v0 v1 v2 v3 v4 v5");
    cr_expect_eq(t_pg_number("SELECT count(*) FROM t_single.steps"), 5);
    cr_expect_eq(step_records(s), 6);
    pl__pg_close(s);
    cr_assert_eq(pl__pg_open(&s, uri, &ro), PL_OK, "%s", pl_errmsg());
    expect_scan(s, run, NULL, 0, 100, "v0 v1 v2 v3 v4 v5");
    pl__pg_close(s);

    /* a format this build does not know is refused */
    admin("UPDATE t_single.meta SET v = %d WHERE k = 'format'", FORMAT + 1);
    cr_expect_eq(pl__pg_open(&s, uri, &ro), PL_EVERSION);
    cr_expect_eq(pl__pg_open(&s, uri, NULL), PL_EVERSION);
    free(uri);
}

/* Run #pl.run's key of root step @p seq (a bytea literal's bytes). */
#define RK(seq)                                                                \
    "(int8send(current_setting('pl.run')::bigint) || '\\x" seq "'::bytea)"

/* The corruptions of a pair row (run #pl.run's, at its step 2: 2-3), each
 * an UPDATE of that row or a row more. */
static const char *const g_corrupt[] = {
    /* another run's key */
    "UPDATE t_badpair.steps SET k2 = int8send(current_setting('pl.run')::"
    "bigint + 100) || '\\x00000003'::bytea WHERE k = " RK("00000002"),
    /* an earlier key */
    "UPDATE t_badpair.steps SET k2 = " RK("00000001") " WHERE k = " RK(
        "00000002"),
    /* a gap */
    "UPDATE t_badpair.steps SET k2 = " RK("00000004") " WHERE k = " RK(
        "00000002"),
    /* its own first */
    "UPDATE t_badpair.steps SET k2 = k WHERE k = " RK("00000002"),
    /* the next seq, in another ledger */
    "UPDATE t_badpair.steps SET k = " RK("0000000200000000") ", k2 = " RK(
        "0000000300000001") " WHERE k = " RK("00000002"),
    /* a key equal to a row's of its own */
    "INSERT INTO t_badpair.steps (k, v) VALUES (" RK("00000003") ", 'x')",
    /* a second key without its value */
    "UPDATE t_badpair.steps SET v2 = NULL WHERE k = " RK("00000002"),
    /* a second value without its key */
    "UPDATE t_badpair.steps SET k2 = NULL WHERE k = " RK("00000002"),
    /* the first's record missing */
    "UPDATE t_badpair.steps SET v1 = NULL WHERE k = " RK("00000002"),
    /* a first record where the mark is (a row read as a single and a pair) */
    "UPDATE t_badpair.steps SET v = v1 WHERE k = " RK("00000002"),
    /* a first record of a pair in a row without a second */
    "UPDATE t_badpair.steps SET v1 = v WHERE k = " RK("00000004"),
};

/* Each corruption, in a run of its own (0-1, 2-3, 4): its ledger's read,
 * its scan and its steps one by one fail with PL_ECORRUPT; a run made
 * after it reads as it is. */
Test(pg_pairs, a_pair_that_is_not_two_steps_in_a_row_is_corruption)
{
    pl__pg_store *s = pg_store("t_badpair");
    size_t n = sizeof g_corrupt / sizeof *g_corrupt;
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "bad-%zu", i);
        uint64_t run = leased_run(s, id);
        commit_steps(s, run, 0, 2, false, 0);
        commit_steps(s, run, 2, 2, false, 0);
        commit_steps(s, run, 4, 1, false, 0);
        admin("SET pl.run = '%llu'; %s", (unsigned long long)run, g_corrupt[i]);
        snprintf(id, sizeof id, "good-%zu", i);
        uint64_t good = leased_run(s, id);
        commit_steps(s, good, 0, 2, false, 0);

        uint8_t prefix[8];
        pl__put_be64(prefix, run);
        pl__kvs got = {0};
        int st = pl__pg_read(s, prefix, 8, 0, 100, 1 << 20, &got);
        cr_expect_eq(st, PL_ECORRUPT, "case %zu: the ledger read %s (%zu)", i,
                     pl_status_name(st), got.n);
        st = pl__pg_scan(s, run, NULL, 0, 100, SIZE_MAX, &got);
        cr_expect_eq(st, PL_ECORRUPT, "case %zu: the scan %s (%zu)", i,
                     pl_status_name(st), got.n);
        int count = 0;
        st = pl__pg_each_step(s, run, count_step, &count);
        cr_expect_eq(st, PL_ECORRUPT, "case %zu: its steps %s", i,
                     pl_status_name(st));
        expect_scan(s, good, NULL, 0, 100, "v0 v1");
        expect_read(s, good, 0, 100, 1 << 20, "v0 v1");
        pl__kvs_free(&got);
    }
    pl__pg_close(s);
}

/*
 * A process of a library that reads format 1 alone, which opened the store
 * before a writable open made it 2, reads a row's (k, v) alone: what a
 * read-only open of a format 1 store reads here.  A pair's v is its mark,
 * which no version of the step record's decoder takes for a step: that
 * process fails the ledger with PL_EVERSION, and never reads the call
 * without its result (which it would take for a call in flight at a
 * crash, and run again).
 */
Test(pg_pairs, an_older_reader_fails_a_pair_and_never_reads_half)
{
    pl__pg_store *s = pg_store("t_older");
    uint64_t run = leased_run(s, "older");
    commit_steps(s, run, 0, 1, false, 0);
    commit_steps(s, run, 1, 2, false, 0);
    pl__pg_close(s);
    admin("UPDATE t_older.meta SET v = 1 WHERE k = 'format'");
    char *uri = t_pg_store_uri("t_older");
    pl__store_options ro = {.read_only = true};
    cr_assert_eq(pl__pg_open(&s, uri, &ro), PL_OK, "%s", pl_errmsg());
    free(uri);
    uint8_t prefix[8];
    pl__put_be64(prefix, run);
    pl__kvs got = {0};
    cr_assert_eq(pl__pg_read(s, prefix, 8, 0, 100, 1 << 20, &got), PL_OK, "%s",
                 pl_errmsg());
    /* the pair's row: its mark, which this build gives its second too
     * (pg_reopen.c), and reads as it is while the store says format 1 */
    cr_assert_eq(got.n, 3, "the single step and the pair's row: %zu", got.n);
    cr_expect_eq(got.e[0].vlen, 2);
    pl__rec rec;
    for (size_t i = 1; i < 3; i++) {
        cr_expect_eq(pl__rec_decode(&rec, pl__kvs_val(&got, i), got.e[i].vlen),
                     PL_EVERSION, "the pair's v decoded: %s", pl_errmsg());
        cr_expect(strstr(pl_errmsg(), "format version 255"), "%s", pl_errmsg());
    }
    pl__kvs_free(&got);
    pl__pg_close(s);
}

/* Make schema @p n a store of format 1 as the library before pairs left
 * it: each pair's row two rows, no pair columns, no pl_pair_bad(). */
static void unpair(const char *n)
{
    admin("INSERT INTO %s.steps (k, v) SELECT k2, v2 FROM %s.steps WHERE k2 "
          "IS NOT NULL;"
          "UPDATE %s.steps SET v = v1 WHERE v1 IS NOT NULL;"
          "ALTER TABLE %s.steps DROP COLUMN v1, DROP COLUMN k2, DROP COLUMN "
          "v2;"
          "DROP FUNCTION %s.pl_pair_bad(bytea);"
          "UPDATE %s.meta SET v = 1 WHERE k = 'format'",
          n, n, n, n, n, n);
}

/*
 * Stores open read-only while the store was format 1, then a writable
 * open makes it 2 and writes pairs (3-4, 6-7): each read of steps of each
 * of them, the first since, meets a pair's mark, reads the format again
 * and reads the pairs from then on: a ledger's read, one from a pair's
 * second, a scan after a pair's first, the steps one by one.
 */
Test(pg_pairs, a_read_only_open_goes_on_when_a_writer_gives_pairs)
{
    pl__pg_store *s = pg_store("t_reopen");
    uint64_t run = leased_run(s, "reopen");
    commit_steps(s, run, 0, 3, false, 0);
    pl__pg_close(s);
    unpair("t_reopen");
    cr_assert_eq(t_pg_number("SELECT count(*) FROM t_reopen.steps"), 3);

    char *uri = t_pg_store_uri("t_reopen");
    pl__store_options ro = {.read_only = true};
    pl__pg_store *r[4];
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(pl__pg_open(&r[i], uri, &ro), PL_OK, "%s", pl_errmsg());
        expect_read(r[i], run, 0, 100, 1 << 20, "v0 v1 v2");
    }
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    commit_steps(s, run, 3, 2, false, 0);
    commit_steps(s, run, 5, 1, false, 0);
    commit_steps(s, run, 6, 2, false, 0);
    cr_assert_eq(t_pg_number("SELECT count(k2) FROM t_reopen.steps"), 2);
    pl__pg_close(s);

    uint8_t key[16];
    expect_read(r[0], run, 0, 100, 1 << 20, "v0 v1 v2 v3 v4 v5 v6 v7");
    expect_read(r[1], run, 4, 100, 1 << 20, "v4 v5 v6 v7");
    expect_scan(r[2], run, key, key_of(key, run, 3, false, 0), 100,
                "v4 v5 v6 v7");
    cr_expect_eq(steps_of(r[3], run), 8);
    for (size_t i = 0; i < 4; i++) {
        expect_read(r[i], run, 6, 1, 1 << 20, "v6");
        expect_scan(r[i], run, NULL, 0, 100, "v0 v1 v2 v3 v4 v5 v6 v7");
        cr_expect_eq(step_records(r[i]), 8);
        pl__pg_close(r[i]);
    }
    free(uri);
}

typedef struct reader {
    pl_engine *e;
    pthread_barrier_t *go;
    int st; /* the first failure's status */
    char msg[256];
} reader;

/* Verify run "new" and read its root ledger, a few times: the first
 * failure into r->st (a thread of its own: no cr_assert). */
static void *read_new(void *user)
{
    reader *r = user;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < 5 && !r->st; i++) {
        pl_steps *steps = NULL;
        int st = pl_run_verify(r->e, "new");
        if (!st)
            st = pl_run_ledger(&steps, r->e, "new", "0");
        if (!st && pl_steps_count(steps) < 6)
            st = PL_ECORRUPT;
        if (st) {
            r->st = st;
            snprintf(r->msg, sizeof r->msg, "%s", pl_errmsg());
        }
        pl_steps_free(steps);
    }
    return NULL;
}

/*
 * Read-only engines opened on a store of format 1 (a ledger-web that runs
 * on) read a run a writable engine wrote in pairs after it made the store
 * 2: one verifies it, another reads it on two threads at once.
 */
Test(pg_pairs, a_read_only_engine_reads_the_pairs_of_a_later_writer)
{
    char *uri = t_pg_store_uri("t_reeng");
    pl_registry *reg = t_registry();
    pl_engine *w = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(w, "chain", "{\"n\": 2}", "old"));
    pl_engine_close(w);
    unpair("t_reeng");

    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.read_only = true;
    pl_engine *ro = NULL, *ro2 = NULL;
    cr_assert_eq(pl_engine_open(&ro, uri, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_open(&ro2, uri, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_run_verify(ro, "old"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_run_verify(ro2, "old"), PL_OK, "%s", pl_errmsg());

    w = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome *out = t_start(w, "chain", "{\"n\": 3}", "new");
    cr_assert_eq(out->status, PL_RUN_COMPLETED, "%s", out->reason);
    pl_outcome_free(out);
    pl_engine_close(w);
    cr_assert_gt(t_pg_number("SELECT count(k2) FROM t_reeng.steps"), 0);

    cr_expect_eq(pl_run_verify(ro, "new"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(ro, "new"), PL_RUN_COMPLETED);
    cr_expect_eq(pl_run_verify(ro, "old"), PL_OK, "%s", pl_errmsg());

    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    reader r[2] = {{.e = ro2, .go = &go}, {.e = ro2, .go = &go}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, read_new, &r[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(r[i].st, PL_OK, "thread %d: %s: %s", i,
                     pl_status_name(r[i].st), r[i].msg);
    }
    pthread_barrier_destroy(&go);
    pl_engine_close(ro);
    pl_engine_close(ro2);
    pl_registry_free(reg);
    free(uri);
}
