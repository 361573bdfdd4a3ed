/*
 * support.h -- what the tests share: temporary stores, engines, and a few
 * policies with counters that prove what ran.
 *
 * Criterion runs every test in its own process, so the counters start at
 * zero in each test.
 */
#ifndef PL_TEST_SUPPORT_H
#define PL_TEST_SUPPORT_H

#include <criterion/criterion.h>
#include <policyledger.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* 1 in a build with AddressSanitizer, where each call costs several times
 * more and the sweeps take fewer points; else 0. */
#if defined(__SANITIZE_ADDRESS__)
#define T_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_SANITIZED 1
#endif
#endif
#ifndef T_SANITIZED
#define T_SANITIZED 0
#endif

/* A new empty directory under $TMPDIR (or /tmp); removed by t_cleanup(). */
const char *t_tmpdir(void);
/* The slice of a long sweep this process takes, from the environment
 * variable @p var, "k/N": the items i with i % N == k (the suite runs such a
 * sweep as N tests); unset, the whole sweep (0/1).  Anything else fails. */
void t_slice(const char *var, long *k, long *n);
/* PL_TEST_STRIDE (1 unless set; the sanitizer builds set it): a nested
 * crash matrix kills at every stride-th inner boundary (offset by the
 * outer one, so that across the outer loop every inner one is struck). */
int t_stride(void);
/* The file @p path that tests/npm_setup.sh installs from npm (fixture
 * @p setup): missing, the test is skipped, saying why; with PL_NPM_REQUIRED=1,
 * where nothing may skip, it fails. */
void t_need_npm(const char *path, const char *setup);
/* A new store's path: "<a fresh temporary directory>/store.db" on LMDB, a
 * new schema's URI on PostgreSQL (see t_on_pg()). */
const char *t_store_path(void);
/*
 * The backend the tests run on.  PL_TEST_STORE=postgresql: the PostgreSQL
 * server tests/pg_run.sh started (its URI in PL_TEST_PG_URI), each store a
 * schema of its own; unset or "lmdb": LMDB files in temporary directories.
 */
bool t_on_pg(void);
/* Has process @p pid ended (gone, or a zombie nobody reaped)? */
bool t_proc_gone(long pid);
/* Wait (at most a minute: never a timing assertion) for @p pid to end;
 * whether it did. */
bool t_proc_ends(long pid);
/* A new store's path: "<dir>/<name>" on LMDB, a new schema's URI on
 * PostgreSQL (@p dir and @p name unused). */
void t_store_in(char *out, size_t n, const char *dir, const char *name);
/* Copy the store at @p from to the new store path @p to (its file on LMDB,
 * its tables on PostgreSQL); a missing LMDB file copies nothing. */
void t_store_copy(const char *to, const char *from);
/* PostgreSQL: the schema of the store @p store (a t_store_in() path), and
 * a plain connection to the server (close with PQfinish()). */
const char *t_pg_schema(const char *store);
/* The server's URI (PL_TEST_PG_URI, which pg_run.sh sets). */
const char *t_pg_server(void);
/* The server's URI with schema=@p schema and application_name=@p schema
 * (free it); support_pg.c. */
char *t_pg_store_uri(const char *schema);
struct pg_conn *t_pg_admin(void);
/* PQexecParams() on @p c with binary results; its result, whose status
 * must be @p want (an ExecStatusType); support_pg.c. */
struct pg_result *t_pg_params(struct pg_conn *c, const char *q, int n,
                              const char *const *v, const int *len,
                              const int *fmt, int want);
/* The number in the first column of the first row @p sql answers, on a
 * connection of its own (the test fails on an error); support_pg.c. */
long long t_pg_number(const char *sql);
/* Restart the server as a crash would (immediate mode: no shutdown
 * checkpoint, crash recovery on start; PL_TEST_PG_RESTART, which
 * pg_run.sh sets); support_pg.c. */
void t_pg_restart(void);
/* Copy the store's tables (see t_store_copy()); support_pg.c. */
void t_pg_copy(const char *to, const char *from);
/* Make the store @p to hold @p from's rows and sequence values: when @p to
 * was made (a t_pg_copy() of a store of the same tables, used since), its
 * tables emptied and refilled in one transaction, without building its
 * schema again, but for meta's 'setup' row, which keeps @p to's own (the
 * digest of its catalogue, pg_setup.c: @p from's would make @p to's next
 * open run the whole setup again, a transaction of DDL that costs the
 * server ~50 ms, where a store found current costs one SELECT); else a
 * t_pg_copy(); support_pg.c. */
void t_pg_refill(const char *to, const char *from);
/* Copy a file (a missing @p from copies nothing). */
void t_copy_file(const char *from, const char *to);
/* How many lines of the file at @p path are @p line (a missing file: 0). */
int t_count_lines(const char *path, const char *line);
/* Skip the test in a build without libcurl (PL_WITH_CURL=OFF): it speaks
 * HTTP. */
#define t_needs_curl()                                                         \
    do {                                                                       \
        if (!PL_WITH_CURL)                                                     \
            cr_skip_test("needs libcurl: built with PL_WITH_CURL=OFF");        \
    } while (0)
/* Skip the test on PostgreSQL: it is about LMDB, for the reason @p why. */
void t_lmdb_only(const char *why);
/* Remove every temporary directory this process made. */
void t_cleanup(void);
/* Remove a directory tree. */
void t_rmtree(const char *path);
/* Wait for the forked child @p pid and assert that it died of SIGKILL;
 * the failure says @p when (where it should have died) and how it ended. */
void t_expect_killed(int pid, const char *when);
/* Stop the forked child @p pid (SIGSTOP) outside every write of its to
 * @p e's store: stopped inside one (its lease renewer writes every third
 * of a lease), it would hold the store's writers, the test's too, for as
 * long as it stays stopped.  A write of the test's in a thread shows it:
 * one not done in 3 s lets @p pid go on a moment, and it is stopped again.
 * @p pid must not finish meanwhile (wait in a gate). */
void t_stop_outside_writes(int pid, pl_engine *e);

/* A worker (pl_worker_run(), polling every 10 ms) on a thread of the
 * test's process: t_worker_start() starts it with @p concurrency threads;
 * t_worker_stop() stops it and asserts it returned PL_OK. */
typedef struct t_worker {
    pthread_t th;
    pl_engine *e;
    unsigned concurrency;
    int rc;
} t_worker;
void t_worker_start(t_worker *w, pl_engine *e, unsigned concurrency);
void t_worker_stop(t_worker *w);

/* A registry with the test policies below. */
pl_registry *t_registry(void);
/* Open an engine; fails the test on error. */
pl_engine *t_engine(const char *path, const pl_registry *reg,
                    pl_durability durability);

/*
 * Test policies:
 *   "echo"    returns its payload as the result; counts t_calls.echo.
 *   "add"     {"a": x, "b": y} -> {"sum": x+y}; counts t_calls.add.
 *   "fail"    returns PL_EPOLICY (an unrecoverable failure).
 *   "oops"    returns an error-as-data result with code "ToolBug".
 *   "chain"   calls "add" payload.n times (default 3), summing; returns
 *             {"total": ...}.
 */
typedef struct t_counters { /* atomic: policies may run on many threads */
    atomic_int echo, add, chain;
} t_counters;
extern t_counters t_calls;

/* FNV-1a digests of what calls give back (bytes, text, JSON's compact
 * text), for comparing a damaged store's answers with a sound one's. */
void t_mix(uint64_t *h, const void *p, size_t n);
void t_mix_str(uint64_t *h, const char *s);
void t_mix_json(uint64_t *h, const cJSON *j);
/* ... of a run's record (all but owner_alive, which moves with the clock),
 * and of a step (the bit-flip tests' digests). */
void t_mix_run(uint64_t *h, const pl_run_info *info);
void t_mix_step(uint64_t *h, const pl_step *s);
/* The same as visitors (pl_engine_runs(), pl_run_walk()): @p h a uint64_t
 * digest. */
int t_visit_mix_run(const pl_run_info *info, void *h);
int t_visit_mix_step(const pl_step *s, void *h);

/* A JSON object from text; fails the test on bad JSON. */
cJSON *t_json(const char *text);
/* Compact text of a JSON value (caller frees). */
char *t_text(const cJSON *v);
/* Are the @p n bytes at @p s well-formed UTF-8 (shortest forms, no
 * surrogates, at most U+10FFFF)? */
bool t_utf8_ok(const char *s, size_t n);
/* Run @p id's status as stored (the test fails if it cannot be read). */
pl_run_status status_of(pl_engine *e, const char *id);
/* Start run @p id of @p policy with the payload @p json: pl_run_start()'s
 * status (no test assertion: forked children, threads and pool tasks use
 * it too). */
int t_try_start(pl_outcome **o, pl_engine *e, const char *policy,
                const char *json, const char *id);
/* Start a run of @p policy with @p payload_json, expecting PL_OK. */
pl_outcome *t_start(pl_engine *e, const char *policy, const char *payload_json,
                    const char *run_id);

#endif
