/*
 * pg_int.h -- what the files of the PostgreSQL store share: the store's
 * struct, its statements, and the helpers for errors and connections.
 *
 *   | file         | its job                                            |
 *   |--------------|----------------------------------------------------|
 *   | pg_conn.c    | errors, the connection pool, open/close            |
 *   | pg_uri.c     | the URI: checked, split, its password never shown  |
 *   | pg_setup.c   | the schema: made, upgraded, or found current       |
 *   | pg_fork.c    | the open stores across fork(), the process's id    |
 *   | pg_commit.c  | writing: commits and read-modify-write of a state  |
 *   | pg_one.c     | one run's write in a commit                        |
 *   | pg_read.c    | reading: ledgers, runs, states, statistics         |
 *   | pg_reopen.c  | a store open single that a writable open gave pairs |
 *   | pg_lease.c   | leases and the queue                               |
 *   | pg_sched.c   | schedules                                          |
 *   | pg_time.c    | timers and inboxes                                 |
 *   | pg_wake.c    | waiting runs whose timers are due, taken in batches |
 *   | pg_delete.c  | deleted runs: tombstones read and expired          |
 *   | pg_wait.c    | every answer waited for with a bound               |
 *
 * The store as a whole (its tables, commits, durability and connections)
 * is described at the top of pg_conn.c.  Nothing outside ledger/pg/
 * includes this.
 */
#ifndef PL_PG_INT_H
#define PL_PG_INT_H

#include "pg_store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

/* The store's format ('format' in meta): 2 since a row of steps may hold
 * a pair (pg_conn.c, LAYOUT); a store of format 1 (single rows alone) is
 * read as it is, and a writable open makes it 2. */
#define FORMAT 2
#define FORMAT_SINGLE 1
/* SQLSTATE of pl_pair_bad(): a row of steps whose second step is not the
 * one right after its first (PL_ECORRUPT). */
#define PAIR_STATE "PLPAR"
/* SQL: the value of a pair's row in column v, its first step's record in
 * v1 (pg_read.c, PAIRS): a step record's header of format version 255, so
 * that a library that reads format 1 alone and opened the store before a
 * writable open made it 2 fails the ledger with PL_EVERSION (record.c)
 * instead of reading a call without its result. */
#define PAIR_MARK "'\\x91ccff'::bytea"
/* Its bytes, as a read of (k, v) alone gives them (3 bytes). */
#define PAIR_MARK_BYTES "\x91\xcc\xff"
/* SQL: the seq of step key expression @p x (its last four bytes), a
 * bigint. */
#define SEQ_OF(x)                                                              \
    "(get_byte(" x ", length(" x ") - 4)::bigint * 16777216 + get_byte(" x     \
    ", length(" x ") - 3) * 65536 + get_byte(" x ", length(" x ") - 2) * "     \
    "256 + get_byte(" x ", length(" x ") - 1))"
#define IDENTITY 8101813454559079524LL /* "policyld", big-endian */
#define SCHEMA_DEFAULT "policyledger"
#define SCHEMA_MAX 63
#define IDLE_MAX 16
#define READ_MAX 1024 /* rows per SELECT */
/* The server's clock in Unix us: every lease's and timer's "now". */
#define NOW_US "(extract(epoch from clock_timestamp()) * 1000000)::bigint"
/* The same read once by a statement (an InitPlan): a bound an index scan
 * can use, where clock_timestamp() itself, volatile, is a filter tested
 * on every row the scan passes. */
#define NOW_ONCE "(SELECT " NOW_US ")"
/* Whether an owned lease has run out (a crashed worker's, or one handed
 * back): the first entry of leases_live (pg_flow.c), by the index alone;
 * NULL without owned leases.  Its one argument is the schema's format. */
#define LIVE_RUN_OUT(schema_fmt)                                               \
    "(SELECT min(m.expires) FROM \"" schema_fmt "\".leases m WHERE m.owner "   \
    "<> '') <= " NOW_ONCE
/* The live leases of concurrency key @p k, counted up to @p lim (enough
 * to say whether the key has room), those expiring after @p now (a bound
 * the index can use: NOW_ONCE, or a PL/pgSQL variable): SQL expressions
 * all.  By leases_key_live alone (pg_flow.c, KEYS), the key's owned
 * leases: its key a range of one value, the order the LIMIT reads in is
 * that index's and no other's, where by fkey = k the server, taking the
 * share of the key's queued runs among all rows for its share of the
 * owned ones, chose leases_live and read every live lease. */
#define KEY_LIVE(schema_fmt, k, lim, now)                                      \
    "(SELECT count(*) FROM (SELECT FROM \"" schema_fmt "\".leases o WHERE "    \
    "o.fkey >= " k " AND o.fkey <= " k                                         \
    " AND o.owner <> '' AND o.expires > " now                                  \
    " ORDER BY o.fkey, o.expires LIMIT greatest(" lim ", 0)) o)"

/* The sum of a concurrency key @p k and its limit @p lim (pg_flow.c, KEY
 * SUMS), and whether a row's, @p sum, is theirs: a row without a key, or
 * without a sum (an older store's), is read as it is.  SQL expressions
 * all, written out where they are read (a call of pl_key_sum(), an SQL
 * function, from PL/pgSQL is a query of its own each time). */
#define KEY_SUM(k, lim)                                                        \
    "sha256(convert_to('policyledger/key', 'UTF8') || '\\x00'::bytea || "      \
    "convert_to(" k ", 'UTF8') || '\\x00'::bytea || int4send(" lim "))"
#define KEY_OK(sum, k, lim)                                                    \
    "(" k " IS NULL OR " sum " IS NULL OR " sum " = " KEY_SUM(k, lim) ")"
/* The same of a parked row z, which a wake gives its key back from. */
#define PARKED_OK KEY_OK("z.ksum", "z.fkey", "z.flimit")

/* The concurrency key a wake finds for run @p r (pl_wake(), pg_flow.c,
 * TIMER KEYS): its parked row's, else its lease's; what a timer row keeps
 * in fkey.  @p r an SQL expression; two schemas. */
#define TIMER_KEY(schema_fmt, r)                                               \
    "coalesce((SELECT p.fkey FROM \"" schema_fmt                               \
    "\".parked p WHERE p.run = " r "), (SELECT l.fkey FROM \"" schema_fmt      \
    "\".leases l WHERE l.run = " r "))"
/* A timer's upsert, the row aliased @p x: an earlier due time kept
 * (store.h, TIMERS), the key the last write found. */
#define TIMER_UPSERT(x)                                                        \
    "ON CONFLICT (run) DO UPDATE SET due = least(excluded.due, " x ".due), "   \
    "id = CASE WHEN excluded.due < " x ".due THEN excluded.id ELSE " x         \
    ".id END, rec = CASE WHEN excluded.due < " x ".due THEN excluded.rec "     \
    "ELSE " x ".rec END, fkey = excluded.fkey WHERE excluded.due < " x         \
    ".due OR " x ".fkey IS DISTINCT FROM excluded.fkey"

/*
 * The statements (s->q[]), naming the schema, in three ranges: the first
 * prepared on every connection (pg_conn.c), then the lease statements
 * and the writes, prepared too unless the store is read-only (an older
 * store opened read-only may lack the leases table and its functions), then
 * those sent unprepared: rare, or transaction control.
 */
enum {
    Q_RUN_FIND,
    Q_RUN_LOAD, /* a run found, with its state (pg_read.c) */
    Q_STATE_GET,
    Q_STATE_LOCK,
    Q_READ,
    Q_SCAN,
    Q_RUNS,
    Q_RUNS_DESC,
    Q_STATES, /* the states of a page of runs (pg_read.c) */
    /* prepared unless read-only (lease statements: pg_lease.c) */
    L_ACQUIRE,
    L_GET,
    L_GETS, /* the leases of a page of runs */
    L_RENEW,
    L_RELEASE,
    L_RATE,      /* a rate budget's take (pg_flow.c) */
    L_RATE_GET,  /* a rate budget, read */
    L_UNITS,     /* a budget in units: a take or a correction */
    L_UNITS_GET, /* a budget in units, read */
    L_CREATE,
    L_MARK,        /* claimed runs' leases marked (LEASE MARKS, pg_lease.c) */
    L_CREATE_SUCC, /* a continued run's successor's lease (pg_commit.c) */
    L_CREATE_FROM, /* a fork's new run's lease, with another run's key */
    T_SET,         /* timers and inboxes: pg_time.c */
    T_NEXT,
    T_GET,
    T_INBOX_PUT,
    T_CANCEL_PUT, /* the same, of a cancellation */
    T_ACQUIRE,    /* a delivery's take of the lease */
    T_DROP,       /* a run's timer dropped */
    T_RIDE_LOCK,  /* a ride's statements, in one round trip (pg_time.c) */
    T_RIDE_PUT,
    T_RIDE_TAKE,
    T_INBOX_READ,
    L_TAKE,      /* a worker's take, with its run's records (pg_lease.c) */
    L_TAKE_DUES, /* the same, of waiting runs whose timers are due
                    (pg_wake.c) */
    L_TAKE_READ, /* L_TAKE's reads of its run again, in a snapshot of their
                    own (pg_lease.c, pl__pg_take_read(); and a wake's) */
    L_RUN_LOAD,  /* Q_RUN_LOAD, the run's key as a wake finds it, its inbox */
    L_READ_ROOT, /* Q_READ of a run's root ledger, the run by its id */
    L_POLL,      /* an idle worker's look at the queue and the timers */
    Q_CREATE,
    Q_WRITE,       /* a commit's fences, steps, states, timers and inbox
                consumptions (pg_commit.c) */
    Q_STEPS,       /* more steps */
    Q_GENERIC,     /* the plans kept generic until the transaction ends,
                      sent before Q_WRITE (pg_one.c) */
    Q_DELETE,      /* runs deleted, tombstones written (pg_commit.c) */
    Q_CREATE_SUCC, /* a continued run's successor (pg_commit.c) */
    /* unprepared */
    Q_BEGIN,
    Q_COMMIT,
    Q_FORMAT,
    Q_EXISTS,
    Q_STATS,
    Q_SCHED,  /* a commit's schedule write (pg_sched.c) */
    Q_SCHEDS, /* every schedule */
    Q_MARK,
    Q_TOMB_GET,
    Q_TOMBS_EXPIRE,
    Q_INBOX_ADD, /* an inbox record written as it is (an import's) */
    Q_N
};
#define Q_PREPARED_RO L_ACQUIRE /* those prepared on a read-only store */
#define Q_PREPARED Q_BEGIN      /* on a writable one */
#define Q_TEXT_FIRST L_ACQUIRE  /* those answering in text, not binary */
#define Q_TEXT_LAST T_INBOX_READ

/* answer_timeout_ms (pg_uri.c): the default, the most */
#define ANSWER_MS_DEFAULT 30000
#define ANSWER_MS_MAX 86400000

struct pl__pg_store {
    char *path;     /* as given, for messages */
    char *conninfo; /* the URI without schema= */
    char *schema;
    char *q[Q_N];   /* the statements, naming the schema */
    int n_prepared; /* q[0 .. n_prepared) are prepared on every
                          connection (0 until the schema is there) */
    int answer_ms;  /* how long a statement waits for its answer */
    bool nosync;
    bool read_only; /* every write fails with PL_ESTATE */
    bool no_create; /* a missing schema is PL_ENOTFOUND */
    /* steps has no pair columns (a format 1 store open read-only): its
     * statements read k and v alone; cleared, once, when a read meets a
     * pair's mark and the store is format 2 by then (pg_reopen.c) */
    _Atomic bool single;
    bool was_single; /* single at the open: pair_q[] may be made */
    /* the pair reads of a store that was single, made under mu before
     * single is cleared, freed at the close: Q_READ, Q_SCAN, Q_STATS */
    char *pair_q[3];
    pthread_mutex_t mu;
    pid_t pid; /* the process the idle connections belong to */
    PGconn *idle[IDLE_MAX];
    size_t n_idle;
    struct pl__pg_cache *cache; /* pg_cache.c; made when first needed */
    struct pl__pg_store *next;  /* the process's open stores (fork) */
};

/* Count @p round_trips waits for the server and @p statements sent
 * (pl__pg_counts_get()). */
PL__HIDDEN void pl__pg_count(unsigned round_trips, unsigned statements);
/* Count a statement prepared in a commit's pipeline (counted as a
 * statement sent too). */
PL__HIDDEN void pl__pg_count_prepare(void);
/* Count the time since @p t0 (pl__mono_ns()) as spent in round trips. */
PL__HIDDEN void pl__pg_count_wait(uint64_t t0);

/* ---- errors (pg_conn.c) -------------------------------------------------- */

/* Whether @p c is no longer connected. */
PL__HIDDEN bool pl__pg_lost(const PGconn *c);
/* The status for a failed statement (or a NULL result), its message set. */
PL__HIDDEN int pl__pg_err(const pl__pg_store *s, const PGconn *c,
                          const PGresult *r, const char *what);
PL__HIDDEN bool pl__pg_unique_violation(const PGresult *r);
/* PL_ESTATE: the store is open read-only. */
PL__HIDDEN int pl__pg_read_only(const pl__pg_store *s);
/* PL_EBUSY: a step exists already where one is being written. */
PL__HIDDEN int pl__pg_busy(void);

/* ---- fork() (pg_fork.c) --------------------------------------------------- */

/*
 * This process's id, as getpid() says, without a system call each time (a
 * worker asked twice a round trip, ~25 calls a run): read once, and again
 * in a child by a pthread_atfork() handler, which fork() runs before it
 * returns in the child.
 */
PL__HIDDEN pid_t pl__pg_pid(void);
/* Add open store @p s to the process's, whose locks a fork() takes and
 * gives back (its pool's, its kept runs'); remove it. */
PL__HIDDEN void pl__pg_stores_add(pl__pg_store *s);
PL__HIDDEN void pl__pg_stores_remove(pl__pg_store *s);

/* ---- connections (pg_conn.c) --------------------------------------------- */

/* Take an idle connection, or open one. */
PL__HIDDEN int pl__pg_conn_get(pl__pg_store *s, PGconn **out) PL__MUST_CHECK;
/* Give a connection back: kept if it is sound and outside a transaction. */
PL__HIDDEN void pl__pg_conn_put(pl__pg_store *s, PGconn *c);
/* Run one statement with binary parameters and results. */
PL__HIDDEN PGresult *pl__pg_exec(const pl__pg_store *s, PGconn *c,
                                 const char *sql, int n,
                                 const char *const *vals, const int *lens);
/*
 * Run statement @p which (Q_*, L_* or T_*): prepared, or unprepared past
 * s->n_prepared.  @p fmts NULL: every parameter is text.  Lease, timer and
 * inbox statements return text, the others binary.
 */
PL__HIDDEN PGresult *pl__pg_exec_q(pl__pg_store *s, PGconn *c, int which, int n,
                                   const char *const *vals, const int *lens,
                                   const int *fmts);
/* Send statement @p which in pipeline mode, as pl__pg_exec_q() runs it. */
PL__HIDDEN int pl__pg_send(pl__pg_store *s, PGconn *c, int which, int n,
                           const char *const *vals, const int *lens,
                           const int *fmts, const char *what) PL__MUST_CHECK;
/* The result of statement @p i of a pipeline (not of one the pipeline
 * skipped after an error): PL_OK, or a status with its message set. */
typedef int (*pl__pg_result_fn)(size_t i, PGresult *r, void *user);
/*
 * End a pipeline of @p n statements sent: send its Sync (one round trip
 * for them all), hand each statement's result to @p fn, read the Sync's,
 * and leave pipeline mode.  Returns the first failure (@p what names the
 * call in messages); a connection it cannot bring back out of pipeline
 * mode is left in it, and pl__pg_conn_put() drops it.
 */
PL__HIDDEN int pl__pg_pipeline_finish(pl__pg_store *s, PGconn *c, size_t n,
                                      pl__pg_result_fn fn, void *user,
                                      const char *what) PL__MUST_CHECK;
/* Append "{a,b,...}" of @p n numbers to @p b, NUL-terminated: an array
 * parameter in text. */
PL__HIDDEN int pl__pg_int_array(pl__buf *b, const uint64_t *v,
                                size_t n) PL__MUST_CHECK;
/* Run a statement without parameters that returns no rows. */
PL__HIDDEN int pl__pg_command(pl__pg_store *s, PGconn *c, const char *sql,
                              const char *what);

/* ---- answers (pg_wait.c) ------------------------------------------------ */

/* The next result of @p c (PQgetResult()), waited for at most
 * s->answer_ms; NULL also when the bound passed: @p c is then cut (lost,
 * and pl__pg_stalled()). */
PL__HIDDEN PGresult *pl__pg_next(const pl__pg_store *s, PGconn *c);
/* The last result of a statement sent (@p sent: what PQsend*() returned),
 * as PQexec() gives it, each waited for with pl__pg_next(); NULL when it
 * was not sent or the bound passed. */
PL__HIDDEN PGresult *pl__pg_last(const pl__pg_store *s, PGconn *c, int sent);
/* Whether this thread cut @p c at the bound. */
PL__HIDDEN bool pl__pg_stalled(const PGconn *c);
/* A new connection at @p c's address is not the one cut. */
PL__HIDDEN void pl__pg_stall_forget(const PGconn *c);

/* ---- leases (pg_lease.c) ------------------------------------------------- */

/* Format lease statement @p which (L_*) for the store's schema. */
PL__HIDDEN int pl__pg_lease_sql(const pl__pg_store *s, int which, char **out);
/* The SQL (caller owns; free(); NULL: out of memory) of the setup's part
 * that gives the leases their cancellation marks (after the inbox is
 * made: pg_lease.c); pg_setup.c runs it in its one transaction, as every
 * pl__pg_*_ddl(). */
PL__HIDDEN char *pl__pg_marks_ddl(const pl__pg_store *s);
/* The setup's part that makes the leases table and the fence functions
 * if they are not there. */
PL__HIDDEN char *pl__pg_lease_ddl(const pl__pg_store *s);
/* Run lease statement @p which with text parameters and text results. */
PL__HIDDEN int pl__pg_lease_exec(pl__pg_store *s, int which, int n,
                                 const char *const *vals, PGresult **out,
                                 const char *what);
/* A take's read of run @p run again (L_TAKE_READ, pg_lease.c), in the
 * take's transaction on @p c, which holds its lease: *out its one row, as
 * L_TAKE answers (caller owns; PQclear() it; NULL on a failure).  With
 * @p wake, a wake's: the run's timer and parked row deleted too.  The
 * lease gone: PL_ESTORE. */
PL__HIDDEN int pl__pg_take_read(pl__pg_store *s, PGconn *c, uint64_t run,
                                bool wake, PGresult **out) PL__MUST_CHECK;
/* BEGIN and statement @p which (text parameters), in one pipeline: one
 * round trip, the transaction left open; @p fn gets both results. */
PL__HIDDEN int pl__pg_begin_with(pl__pg_store *s, PGconn *c, int which, int n,
                                 const char *const *vals, pl__pg_result_fn fn,
                                 void *user, const char *what) PL__MUST_CHECK;
/* The status of a commit's failed statement: PL_EBUSY for a fence that
 * failed (the lease was taken over), else the server's error. */
PL__HIDDEN int pl__pg_lease_failed(pl__pg_store *s, PGconn *c,
                                   const PGresult *r);

/* ---- schedules (pg_sched.c) ---------------------------------------------- */

/* Format schedule statement @p which (Q_SCHED, Q_SCHEDS). */
PL__HIDDEN int pl__pg_sched_sql(const pl__pg_store *s, int which, char **out);
/* The setup's part that makes the schedules table if it is not there,
 * and pl_sched_room(), a put's count under the schedules' lock. */
PL__HIDDEN char *pl__pg_sched_ddl(const pl__pg_store *s);
/* The error of a commit's statement @p r as a schedule's refusal
 * (PL_ELIMIT: a new schedule past PL__SCHED_MAX), or PL_OK. */
PL__HIDDEN int pl__pg_sched_failed(const PGresult *r);
/* Send batch @p bt's schedule write (Q_SCHED) in a commit's pipeline. */
PL__HIDDEN int pl__pg_sched_send(pl__pg_store *s, PGconn *c,
                                 const pl__batch *bt) PL__MUST_CHECK;
/* Parse a whole decimal integer. */
PL__HIDDEN bool pl__pg_parse_i64(const char *p, int64_t *out);

/* ---- commits (pg_commit.c) ----------------------------------------------- */

/*
 * BEGIN a transaction and read the state of run @p num into @p state,
 * locked until the transaction ends, in one round trip.
 */
PL__HIDDEN int pl__pg_lock_state(pl__pg_store *s, PGconn *c, uint64_t num,
                                 pl__buf *state) PL__MUST_CHECK;
/* In that transaction: write run @p num's new state and @p extra's steps,
 * and COMMIT, in one round trip. */
PL__HIDDEN int pl__pg_put_state(pl__pg_store *s, PGconn *c, uint64_t num,
                                const pl__buf *state,
                                const pl__kvs *extra) PL__MUST_CHECK;
/* In that transaction: write @p batches (as a commit does, without
 * creating runs), drop run @p drop_timer's timer (0: none), and COMMIT,
 * in one round trip. */
PL__HIDDEN int pl__pg_put_batches(pl__pg_store *s, PGconn *c,
                                  pl__batch *const *batches, size_t n,
                                  uint64_t drop_timer) PL__MUST_CHECK;
/* In a pipeline under way: send batch @p bt's write as @p shape's
 * statement (pg_one.c; prepared already), and Q_STEPS for the steps past
 * its limits; *nsent counts the statements sent. */
PL__HIDDEN int pl__pg_one_write_send(pl__pg_store *s, PGconn *c,
                                     const pl__batch *bt, unsigned shape,
                                     size_t *nsent) PL__MUST_CHECK;
/* Format write statement @p which (Q_WRITE, Q_STEPS, Q_GENERIC,
 * Q_INBOX_ADD) for the store's schema (pg_one.c). */
PL__HIDDEN int pl__pg_write_sql(const pl__pg_store *s, int which, char **out);
/* Read statement @p which (Q_RUN_LOAD, L_RUN_LOAD, L_READ_ROOT, Q_READ,
 * Q_SCAN, Q_STATS) for the store's schema (NULL: out of memory). */
PL__HIDDEN char *pl__pg_read_sql(const pl__pg_store *s, int which);
/* SQL: the columns a row of steps alias @p t gives its steps from (k, v,
 * k2, v2; NULLs for the second in a store without pairs), and the steps
 * of rows alias @p r of those columns, as x(k, v): a JOIN clause, a row's
 * second key checked (pl_pair_bad()) and NULL when it has none (pg_read.c,
 * PAIRS).  NULL: out of memory. */
PL__HIDDEN char *pl__pg_pair_cols(const pl__pg_store *s, const char *t);
PL__HIDDEN char *pl__pg_pair_split(const pl__pg_store *s, const char *r);
/* A read of a store open single (@p which: Q_READ, Q_SCAN) met a value
 * equal to PAIR_MARK: read the format again, and if it is 2, make the
 * pair reads for the store (pg_reopen.c).  *@p again: whether the
 * store reads pairs now, so that the read, done again, splits them. */
PL__HIDDEN int pl__pg_reopen_pairs(pl__pg_store *s, bool *again) PL__MUST_CHECK;
/* Whether read @p r of statement @p which gives a value equal to the mark
 * in a store open single (Q_READ, Q_SCAN; false for any other). */
PL__HIDDEN bool pl__pg_meets_mark(const pl__pg_store *s, int which,
                                  const PGresult *r);
/* Statement @p which's text on connection @p c, and its name in @p name
 * (16 bytes) if it is prepared there ("" if not): pg_reopen.c. */
PL__HIDDEN const char *pl__pg_q(pl__pg_store *s, PGconn *c, int which,
                                char *name);
/* Prepare the pair reads on @p c, a connection of a store that was open
 * single, if the store reads pairs now and @p c lacks them (pg_reopen.c). */
PL__HIDDEN int pl__pg_conn_pairs(pl__pg_store *s, PGconn *c) PL__MUST_CHECK;
/* Read statement @p which (as pl__pg_read_sql()) of a store with pairs
 * (@p single false) or without (pg_read.c). */
PL__HIDDEN char *pl__pg_steps_sql(const pl__pg_store *s, int which,
                                  bool single);
/* The setup's part that gives a format 1 store its pair columns and
 * makes it format 2 (and pl_pair_bad()). */
PL__HIDDEN char *pl__pg_pairs_ddl(const pl__pg_store *s);
/* After the format is read: a read-only open of a format 1 store
 * (s->single) has its reads made without the pair columns. */
PL__HIDDEN int pl__pg_pairs_setup(pl__pg_store *s) PL__MUST_CHECK;
/* Remove, once a store, the parked rows an older store left for runs that
 * ended, on @p c (pg_delete.c). */
PL__HIDDEN int pl__pg_parked_sweep(pl__pg_store *s, PGconn *c) PL__MUST_CHECK;
/* After a failure in a transaction pl__pg_lock_state() began: roll it back
 * (the message kept).  Returns @p c, or NULL when it had to be closed. */
PL__HIDDEN PGconn *pl__pg_rollback(pl__pg_store *s, PGconn *c);

/* ---- the runs this process parked (pg_cache.c) -------------------------- */

typedef struct pl__pg_cache pl__pg_cache;
/* After pl__pg_commit() of @p batches returned @p st: keep the runs it
 * created, follow those kept, drop those it failed to write. */
PL__HIDDEN void pl__pg_cache_commit(pl__pg_store *s, pl__batch *const *batches,
                                    size_t n, int st);
/* After a delivery with @p take to run @p run (@p written: the ride went,
 * its commit written): keep following the run, or drop it. */
PL__HIDDEN void pl__pg_cache_ride(pl__pg_store *s, uint64_t run,
                                  const pl__inbox_take *take, bool written);
/* Forget run @p run (an inbox record delivered to it, a ride refused). */
PL__HIDDEN void pl__pg_cache_drop(pl__pg_store *s, uint64_t run);
/* Whether run @p run is kept: made by this store without a concurrency
 * key, which a run keeps for its life (false: not known). */
PL__HIDDEN bool pl__pg_cache_unkeyed(pl__pg_store *s, uint64_t run);
/* Parked run @p id as kept: its number, info, state and root ledger rows
 * (all of them, within a read's @p max_n rows and @p max_bytes), its inbox
 * empty; PL_ENOTFOUND when it is not kept so. */
PL__HIDDEN int pl__pg_cache_get(pl__pg_store *s, const char *id, size_t max_n,
                                size_t max_bytes, uint64_t *num, pl__buf *info,
                                pl__buf *state, pl__kvs *rows) PL__MUST_CHECK;
PL__HIDDEN void pl__pg_cache_free(pl__pg_cache *c);
/* Around fork() (pg_conn.c's handlers): @p c's lock taken before, and
 * given back after, in the parent and in the child (NULL: none). */
PL__HIDDEN void pl__pg_cache_lock(pl__pg_cache *c);
PL__HIDDEN void pl__pg_cache_unlock(pl__pg_cache *c);

/* ---- the write of one run (pg_one.c) ------------------------------------ */

/* The parts of a one-run write's statement (a shape: their bits). */
enum {
    ONE_FENCE = 1,     /* its lease's fence */
    ONE_DROP = 2,      /* the lease dropped */
    ONE_STEPS = 4,     /* steps */
    ONE_STATE = 8,     /* a state */
    ONE_TIMER = 16,    /* a timer */
    ONE_INBOX = 32,    /* an inbox record consumed */
    ONE_PARK = 64,     /* the run parks with its key */
    ONE_RIDE = 128,    /* a delivery riding the write (pg_time.c) */
    ONE_PAIR = 256,    /* two steps, as scalars (ONE_STEPS: as arrays) */
    ONE_UNKEYED = 512, /* with ONE_RIDE: the run has no concurrency key */
    ONE_GEN = 1024,    /* the fence by generation alone: no key */
    ONE_SHAPES = 2048
};
/* After a group's Q_WRITE: the leases of the runs it claims marked
 * (pg_one.c, L_MARK); *nsent counts the statement, if one is sent. */
PL__HIDDEN int pl__pg_marks_send(pl__pg_store *s, PGconn *c,
                                 pl__batch *const *batches, size_t n,
                                 size_t *nsent) PL__MUST_CHECK;
/* The shape of batch @p bt's write; @p timer: it writes its timer. */
PL__HIDDEN unsigned pl__pg_one_shape(const pl__batch *bt, bool timer);
/* How a commit's batches are written: the one batch that writes a run it
 * does not create as its shape's statement, or, when several do (a group
 * commit), all of them as Q_WRITE. */
typedef struct pl__pg_ones {
    bool group; /* Q_WRITE; false: one's statement, if one */
    size_t nprep;
    unsigned prep[1]; /* the shape to prepare first */
    pl__batch *one;   /* the batch that writes */
} pl__pg_ones;
/* Plan the write of @p batches on connection @p c into @p o. */
PL__HIDDEN int pl__pg_ones_plan(pl__pg_ones *o, PGconn *c,
                                pl__batch *const *batches,
                                size_t n) PL__MUST_CHECK;
/* Plan, into @p o, the preparation of @p shape alone (if @p c lacks it),
 * for a write its caller sends (pg_time.c's ride). */
PL__HIDDEN int pl__pg_ones_shape(pl__pg_ones *o, PGconn *c,
                                 unsigned shape) PL__MUST_CHECK;
/* Send the preparations of @p o's new shapes in a pipeline: first, so that
 * nothing before them can make the server skip them. */
PL__HIDDEN int pl__pg_ones_prepare(pl__pg_store *s, PGconn *c,
                                   const pl__pg_ones *o) PL__MUST_CHECK;
/* The result of preparation @p i: @p c remembers its shape if prepared. */
PL__HIDDEN int pl__pg_ones_prepared_result(pl__pg_store *s, PGconn *c,
                                           const pl__pg_ones *o, size_t i,
                                           const PGresult *r) PL__MUST_CHECK;
/* Send @p bt's write as @p shape's statement, the first of its steps in
 * @p keys and @p vals (binary bytea arrays; the rest goes as Q_STEPS), or
 * with ONE_PAIR its two steps from bt->steps (@p keys and @p vals NULL). */
PL__HIDDEN int pl__pg_one_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                               unsigned shape, const pl__buf *keys,
                               const pl__buf *vals) PL__MUST_CHECK;

/* ---- timers and inboxes (pg_time.c) -------------------------------------- */

/* Format timer or inbox statement @p which (T_*) for the store's schema. */
PL__HIDDEN int pl__pg_time_sql(const pl__pg_store *s, int which, char **out);
/* The setup's part that makes the timers and inbox tables and
 * pl_consumed() if they are not there (Q_WRITE uses them). */
PL__HIDDEN char *pl__pg_time_ddl(const pl__pg_store *s);
/* The status of a commit's failed statement when it consumed an inbox
 * record another execution consumed first (PL_EBUSY); PL_OK otherwise. */
PL__HIDDEN int pl__pg_time_failed(const PGresult *r);
/* Send batch @p bt's inbox records to write (pl__batch.inbox_add), each
 * its statement, in a commit's pipeline; *nsent counts them. */
PL__HIDDEN int pl__pg_inbox_add_send(pl__pg_store *s, PGconn *c,
                                     const pl__batch *bt,
                                     size_t *nsent) PL__MUST_CHECK;
/* ---- wakes (pg_wake.c) ------------------------------------------------------ */

/* Format L_TAKE_DUES for the store's schema. */
PL__HIDDEN int pl__pg_wake_sql(const pl__pg_store *s, char **out);
/* Parse an L_TAKE_DUES ledger column of run @p run (@p len bytes at @p p:
 * each row its key's length (4 bytes), its key, its value's length (4)
 * and its value) into @p out, as pl__pg_read() of the run's root ledger
 * from seq 0 with @p max_n and @p max_bytes would answer (pg_read.c). */
PL__HIDDEN int pl__pg_ledger_first(pl__pg_store *s, uint64_t run,
                                   const uint8_t *p, size_t len, size_t max_n,
                                   size_t max_bytes,
                                   pl__kvs *out) PL__MUST_CHECK;

/* ---- flow control (pg_flow.c) ------------------------------------------- */

/* Format statement @p which (L_RATE, L_RATE_GET) for the store's schema. */
PL__HIDDEN int pl__pg_flow_sql(const pl__pg_store *s, int which, char **out);
/* The setup's part that gives the leases table its flow columns, and
 * makes the rate budgets' table and the take function, if they are not
 * there (after pl__pg_lease_ddl()'s). */
PL__HIDDEN char *pl__pg_flow_ddl(const pl__pg_store *s);

/* ---- the URI (pg_uri.c) ------------------------------------------------- */

/* Read @p uri into @p s: its name for messages (path, the password
 * "***"), schema, answer_ms and what libpq connects with (conninfo),
 * each option checked as libpq would before it connects (PL_EINVAL). */
PL__HIDDEN int pl__pg_uri_parse(pl__pg_store *s,
                                const char *uri) PL__MUST_CHECK;
/* libpq's message for @p c, on one line, in @p buf. */
PL__HIDDEN const char *pl__pg_conn_msg(const PGconn *c, char *buf, size_t n);

/* ---- the schema (pg_setup.c) -------------------------------------------- */

/* Make the schema current on @p c, or check it is (SETUP in pg_setup.c):
 * what the schema holds, its format, its tables and functions; a
 * read-only or no_create open creates nothing. */
PL__HIDDEN int pl__pg_setup(pl__pg_store *s, PGconn *c) PL__MUST_CHECK;

#endif /* PL_PG_INT_H */
