/*
 * pg_conn.c -- the store on PostgreSQL, through libpq: errors,
 * connections, opening and closing, and the schema's layout (pg_setup.c
 * makes it, or finds it current; pg_uri.c reads the URI).  The other
 * files of ledger/pg/ are listed in pg_int.h.
 *
 * LAYOUT: the tables live in a schema of their own, created with them on
 * the first open (pg_setup.c).  Keys are bytea, which PostgreSQL orders
 * like memcmp (and a shorter key first), so the order is the LMDB store's:
 * keys.c's layout.
 *
 *   | table  | columns                          | holds                    |
 *   |--------|----------------------------------|--------------------------|
 *   | meta   | k text PK, v bigint              | ('format', 2), and the   |
 *   |        |                                  | identity ('identity',    |
 *   |        |                                  | IDENTITY: "policyld"),   |
 *   |        |                                  | the setup's digest       |
 *   |        |                                  | ('setup': pg_setup.c),   |
 *   |        |                                  | ('parked_swept', 1)      |
 *   | runs   | id bytea PK, num bigint UNIQUE,  | run id -> number, info   |
 *   |        | info bytea                       | record (runrec.c)        |
 *   | state  | run bigint PK, v bytea           | run state (runrec.c)     |
 *   | steps  | k bytea PK, v bytea, v1 bytea,   | step key (keys.c) ->     |
 *   |        | k2 bytea, v2 bytea               | step record (record.c);  |
 *   |        |                                  | a pair: v PAIR_MARK, v1  |
 *   |        |                                  | the first's record, k2,  |
 *   |        |                                  | v2 the second step (the  |
 *   |        |                                  | next key); else NULLs    |
 *   | tombs  | id bytea PK, expires bigint,     | a deleted run's id ->    |
 *   |        | v bytea                          | its tombstone (runrec.c) |
 *   |        |                                  | and when that expires    |
 *   |        |                                  | (pg_delete.c)            |
 *   | run_num (a sequence)                      | the next run number      |
 *
 *   A row of steps holds one step, or two that one commit wrote whose
 *   second key is the step right after the first (same ledger, seq + 1;
 *   a call's action_call and action_result): one heap tuple, one index
 *   entry.  Every read splits it into its steps (pg_read.c, PAIRS).
 *   Format 2 says the store may hold such rows; format 1 stores (single
 *   rows alone) are read as they are, and a writable open adds the
 *   columns and makes them 2, so that a library that reads format 1
 *   alone refuses them.  Any other format is refused (PL_EVERSION).  A
 *   schema that holds anything but a store (its identity, or, made before
 *   the identity and without one, its format and tables, to which a
 *   read-write open adds the identity) is another program's (or a damaged
 *   store): it is refused (PL_ECORRUPT), and nothing is created in it.
 *
 * COMMIT: a commit's batches are one transaction and one round trip:
 * a run's write (its fence, steps, state, timer and inbox consumption;
 * timers and inboxes: pg_time.c) is a prepared statement of the parts it
 * has, with scalars (pg_one.c), sent in libpq's pipeline mode after any
 * creations of runs, with one Sync at the end (pg_commit.c has the
 * statements, and how a new record type joins them); a group commit's
 * runs go as one statement of arrays, Q_WRITE, its plan kept generic.
 * Steps are inserted, never updated: an existing key (unique_violation)
 * fails the commit with PL_EBUSY, as on LMDB (a pair's second: pg_read.c,
 * PAIRS).
 * There is no journal: steps are in place at once.
 *
 * STATEMENTS: every statement on the hot path (commits, reads, leases, the
 * queue, renewals) is prepared on each connection when it opens, all in
 * one round trip, and run by name from then on (pg_int.h lists them); a
 * one-run commit's statement, the first time its shape is used on the
 * connection, in that commit's round trip (pg_one.c).
 *
 * DURABILITY: sync and group commit with synchronous_commit = on (group
 * relies on the server's own group commit of concurrent sessions, which
 * commit_delay and commit_siblings tune); process commits with
 * synchronous_commit = off: a commit is reported before its WAL is flushed,
 * so a crash of the server or its machine may lose the commits of the last
 * 3 x wal_writer_delay (600 ms by default); the database stays consistent,
 * and a crash of the engine's process loses nothing.
 *
 * CONNECTIONS: a call takes an idle connection, or opens one, and gives it
 * back when it is done, so calls on many threads run in parallel sessions.
 * A connection that broke is closed, with the idle ones (a server that
 * restarted broke them all), and the next call opens a new one: a call
 * that met the loss fails with PL_ESTORE, and whatever it had not
 * committed is rolled back by the server.  A child made by fork() never
 * uses its parent's connections (pg_fork.c).
 */
#include "pg_int.h"

#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic uint64_t g_round_trips, g_statements, g_connects, g_wait_ns,
    g_prepares;

void pl__pg_count_prepare(void)
{
    atomic_fetch_add_explicit(&g_prepares, 1, memory_order_relaxed);
}

void pl__pg_count_wait(uint64_t t0)
{
    atomic_fetch_add_explicit(&g_wait_ns, pl__mono_ns() - t0,
                              memory_order_relaxed);
}

void pl__pg_count(unsigned round_trips, unsigned statements)
{
    atomic_fetch_add_explicit(&g_round_trips, round_trips,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&g_statements, statements, memory_order_relaxed);
}

void pl__pg_counts_get(pl__pg_counts *out)
{
    out->round_trips = atomic_load_explicit(&g_round_trips,
                                            memory_order_relaxed);
    out->statements = atomic_load_explicit(&g_statements, memory_order_relaxed);
    out->connects = atomic_load_explicit(&g_connects, memory_order_relaxed);
    out->wait_ns = atomic_load_explicit(&g_wait_ns, memory_order_relaxed);
    out->prepares = atomic_load_explicit(&g_prepares, memory_order_relaxed);
}

int pl__pg_plans_get(pl__pg_store *s, uint64_t *custom, uint64_t *generic)
{
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    PGresult *r = pl__pg_exec(s, c,
                              "SELECT coalesce(sum(custom_plans), 0)::bigint, "
                              "coalesce(sum(generic_plans), 0)::bigint FROM "
                              "pg_prepared_statements",
                              0, NULL, NULL);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
        PQgetlength(r, 0, 0) != 8 || PQgetlength(r, 0, 1) != 8)
        st = pl__pg_err(s, c, r, "reading the plans");
    else {
        *custom = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        *generic = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 1));
    }
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}

bool pl__pg_is_uri(const char *path)
{
    return path && (strncmp(path, "postgresql://", 13) == 0 ||
                    strncmp(path, "postgres://", 11) == 0);
}

/* ---- errors -------------------------------------------------------------- */

static void quiet(void *user, const char *message)
{
    (void)user;
    (void)message;
}

/* A message of libpq's on one line: its trailing newline gone, each line
 * break inside it (with the tabs that indent a hint) one space, so that an
 * error is one line wherever it is printed. */
static void one_line(char *buf)
{
    size_t len = strlen(buf);
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
        buf[--len] = '\0';
    size_t w = 0;
    for (size_t r = 0; r < len;) {
        if (buf[r] != '\n') {
            buf[w++] = buf[r++];
            continue;
        }
        while (r < len && (buf[r] == '\n' || buf[r] == '\t' || buf[r] == ' '))
            r++;
        while (w && buf[w - 1] == ' ')
            w--;
        buf[w++] = ' ';
    }
    buf[w] = '\0';
}

const char *pl__pg_conn_msg(const PGconn *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s", c ? PQerrorMessage(c) : "out of memory");
    one_line(buf);
    return buf;
}

bool pl__pg_lost(const PGconn *c) { return PQstatus(c) != CONNECTION_OK; }

/* The status for a failed statement (or a NULL result). */
int pl__pg_err(const pl__pg_store *s, const PGconn *c, const PGresult *r,
               const char *what)
{
    char buf[512];
    if (pl__pg_stalled(c))
        return pl__err(PL_ESTORE,
                       "store '%s': %s: the server did not answer in %d ms "
                       "(answer_timeout_ms); the connection was dropped: "
                       "nothing of this call was committed unless it was "
                       "reported so, and the next call reconnects",
                       s->path, what, s->answer_ms);
    if (pl__pg_lost(c))
        return pl__err(PL_ESTORE,
                       "store '%s': %s: the connection to the server was "
                       "lost (%s); nothing of this call was committed "
                       "unless it was reported so, and the next call "
                       "reconnects",
                       s->path, what, pl__pg_conn_msg(c, buf, sizeof buf));
    const char *m = r ? PQresultErrorMessage(r) : "";
    snprintf(buf, sizeof buf, "%s", *m ? m : PQerrorMessage(c));
    one_line(buf);
    /* the causes a user can remove, as the LMDB store names them: the
     * server's disk is full (53100), the database or transaction is
     * read-only (25006), or the role may not write (42501) */
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int st = !code                                              ? PL_ESTORE
             : !strcmp(code, "53100")                           ? PL_ENOSPC
             : !strcmp(code, "25006") || !strcmp(code, "42501") ? PL_EACCES
             : !strcmp(code, PAIR_STATE)                        ? PL_ECORRUPT
                                                                : PL_ESTORE;
    return pl__err(st, "store '%s': %s: %s", s->path, what, buf);
}

bool pl__pg_unique_violation(const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return code && strcmp(code, "23505") == 0;
}

int pl__pg_read_only(const pl__pg_store *s)
{
    return pl__err(PL_ESTATE, "store '%s' is open read-only", s->path);
}

int pl__pg_busy(void)
{
    return pl__err(PL_EBUSY, "a step exists already at the position being "
                             "written: another process wrote to this run");
}

/* ---- connections --------------------------------------------------------- */

/*
 * Drop a connection a parent process made: PQfinish() would send the server
 * a Terminate on the socket the parent still uses, so the socket is first
 * pointed at /dev/null.
 */
static void conn_forget(PGconn *c)
{
    int fd = PQsocket(c);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0 && null >= 0)
        dup2(null, fd);
    if (null >= 0)
        close(null);
    PQfinish(c);
}

static int prepared_result(size_t i, PGresult *r, void *user)
{
    pl__pg_store *s = user;
    return PQresultStatus(r) == PGRES_COMMAND_OK
               ? PL_OK
               : pl__err(PL_ESTORE, "store '%s': preparing statement %zu: %s",
                         s->path, i, PQresultErrorMessage(r));
}

/* Prepare statements q[0 .. n_prepared) on @p c, named "pl<i>", in one
 * round trip. */
static int prepare(pl__pg_store *s, PGconn *c)
{
    if (!s->n_prepared)
        return PL_OK;
    if (PQenterPipelineMode(c) != 1)
        return pl__pg_err(s, c, NULL, "entering pipeline mode");
    for (int i = 0; i < s->n_prepared; i++) {
        char name[16];
        snprintf(name, sizeof name, "pl%d", i);
        if (!PQsendPrepare(c, name, s->q[i], 0, NULL))
            return pl__pg_err(s, c, NULL, "preparing statements");
    }
    return pl__pg_pipeline_finish(s, c, (size_t)s->n_prepared, prepared_result,
                                  s, "preparing statements");
}

static int conn_open(pl__pg_store *s, PGconn **out)
{
    char buf[512];
    atomic_fetch_add_explicit(&g_connects, 1, memory_order_relaxed);
    PGconn *c = PQconnectdb(s->conninfo);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        int st = pl__err(PL_ESTORE, "store '%s': cannot connect: %s", s->path,
                         pl__pg_conn_msg(c, buf, sizeof buf));
        PQfinish(c);
        return st;
    }
    PQsetNoticeProcessor(c, quiet, NULL);
    pl__pg_stall_forget(c);
    if (PQsetnonblocking(c, 1) != 0) { /* pg_wait.c */
        int st = pl__pg_err(s, c, NULL, "setting non-blocking mode");
        PQfinish(c);
        return st;
    }
    PGresult *r = pl__pg_last(
        s, c,
        PQsendQuery(c, s->read_only ? "SET default_transaction_read_only = on"
                       : s->nosync  ? "SET synchronous_commit = off"
                                    : "SET synchronous_commit = on"));
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        int st = pl__pg_err(s, c, r, "setting synchronous_commit");
        PQclear(r);
        PQfinish(c);
        return st;
    }
    PQclear(r);
    int st = prepare(s, c);
    if (st) {
        PQfinish(c);
        return st;
    }
    *out = c;
    return PL_OK;
}

/* Take an idle connection, or open one. */
int pl__pg_conn_get(pl__pg_store *s, PGconn **out)
{
    PGconn *c = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->pid != pl__pg_pid()) {
        while (s->n_idle)
            conn_forget(s->idle[--s->n_idle]);
        s->pid = pl__pg_pid();
    }
    if (s->n_idle)
        c = s->idle[--s->n_idle];
    pthread_mutex_unlock(&s->mu);
    int st = c ? PL_OK : conn_open(s, &c);
    if (!st && (st = pl__pg_conn_pairs(s, c)) != PL_OK) {
        PQfinish(c);
        c = NULL;
    }
    *out = c;
    return st;
}

/* Give a connection back: kept if it is sound and outside a transaction. */
void pl__pg_conn_put(pl__pg_store *s, PGconn *c)
{
    if (!c)
        return;
    bool keep = !pl__pg_lost(c) && PQtransactionStatus(c) == PQTRANS_IDLE &&
                PQpipelineStatus(c) == PQ_PIPELINE_OFF;
    pthread_mutex_lock(&s->mu);
    if (s->pid != pl__pg_pid()) {
        pthread_mutex_unlock(&s->mu);
        conn_forget(c);
        return;
    }
    /* a lost connection most often means a server restarted or gone: the
     * idle ones are lost too, so drop them, and the next call reconnects
     * instead of meeting another dead one */
    PGconn *drop[IDLE_MAX];
    size_t ndrop = 0;
    if (pl__pg_lost(c)) {
        memcpy(drop, s->idle, s->n_idle * sizeof *drop);
        ndrop = s->n_idle;
        s->n_idle = 0;
    } else if (keep && s->n_idle < IDLE_MAX) {
        s->idle[s->n_idle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (c)
        PQfinish(c);
    while (ndrop)
        PQfinish(drop[--ndrop]);
}

/* Run one statement with binary parameters and results. */
PGresult *pl__pg_exec(const pl__pg_store *s, PGconn *c, const char *sql, int n,
                      const char *const *vals, const int *lens)
{
    int fmts[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    pl__pg_count(1, 1);
    return pl__pg_last(s, c,
                       PQsendQueryParams(c, sql, n, NULL, vals, lens, fmts, 1));
}

/* Lease, timer and inbox statements answer in text (pg_lease.c and
 * pg_time.c parse it), the others binary. */
static int result_format(int which)
{
    return which >= Q_TEXT_FIRST && which <= Q_TEXT_LAST ? 0 : 1;
}

PGresult *pl__pg_exec_q(pl__pg_store *s, PGconn *c, int which, int n,
                        const char *const *vals, const int *lens,
                        const int *fmts)
{
    pl__pg_count(1, 1);
    uint64_t t0 = pl__mono_ns();
    PGresult *r;
    char name[16];
    const char *sql = pl__pg_q(s, c, which, name);
    if (!name[0])
        r = pl__pg_last(s, c,
                        PQsendQueryParams(c, sql, n, NULL, vals, lens, fmts,
                                          result_format(which)));
    else
        r = pl__pg_last(s, c,
                        PQsendQueryPrepared(c, name, n, vals, lens, fmts,
                                            result_format(which)));
    pl__pg_count_wait(t0);
    return r;
}

int pl__pg_send(pl__pg_store *s, PGconn *c, int which, int n,
                const char *const *vals, const int *lens, const int *fmts,
                const char *what)
{
    int ok;
    char name[16];
    const char *sql = pl__pg_q(s, c, which, name);
    if (!name[0])
        ok = PQsendQueryParams(c, sql, n, NULL, vals, lens, fmts,
                               result_format(which));
    else
        ok = PQsendQueryPrepared(c, name, n, vals, lens, fmts,
                                 result_format(which));
    return ok ? PL_OK : pl__pg_err(s, c, NULL, what);
}

static int pipeline_sync(pl__pg_store *s, PGconn *c, size_t n,
                         pl__pg_result_fn fn, void *user, const char *what)
{
    if (PQpipelineSync(c) != 1)
        return pl__pg_err(s, c, NULL, what);
    int st = PL_OK;
    for (size_t i = 0; i < n; i++) {
        PGresult *r = pl__pg_next(s, c);
        if (!r)
            return st ? st : pl__pg_err(s, c, NULL, what);
        /* after an error, the server skips the rest until the Sync */
        if (PQresultStatus(r) != PGRES_PIPELINE_ABORTED && !st)
            st = fn(i, r, user);
        PQclear(r);
        if (pl__pg_lost(c))
            return st ? st : pl__pg_err(s, c, NULL, what);
        if ((r = pl__pg_next(s, c))) { /* the NULL that ends each statement's */
            PQclear(r);
            return st ? st
                      : pl__err(PL_ESTORE, "store '%s': %s: out of step",
                                s->path, what);
        }
    }
    PGresult *r = pl__pg_next(s, c);
    ExecStatusType es = PQresultStatus(r);
    PQclear(r);
    if (es != PGRES_PIPELINE_SYNC)
        return st ? st : pl__pg_err(s, c, NULL, what);
    if (PQexitPipelineMode(c) != 1 && !st)
        st = pl__pg_err(s, c, NULL, what);
    return st;
}

int pl__pg_pipeline_finish(pl__pg_store *s, PGconn *c, size_t n,
                           pl__pg_result_fn fn, void *user, const char *what)
{
    pl__pg_count(1, (unsigned)n);
    uint64_t t0 = pl__mono_ns();
    int st = pipeline_sync(s, c, n, fn, user, what);
    pl__pg_count_wait(t0);
    return st;
}

int pl__pg_int_array(pl__buf *b, const uint64_t *v, size_t n)
{
    int st = pl__buf_append(b, "{", 1);
    for (size_t i = 0; !st && i < n; i++) {
        char x[24];
        int len = snprintf(x, sizeof x, "%s%llu", i ? "," : "",
                           (unsigned long long)v[i]);
        st = pl__buf_append(b, x, (size_t)len);
    }
    return st ? st : pl__buf_append(b, "}", 2);
}

/* Run a statement without parameters that returns no rows. */
int pl__pg_command(pl__pg_store *s, PGconn *c, const char *sql,
                   const char *what)
{
    pl__pg_count(1, 1);
    PGresult *r = pl__pg_last(s, c, PQsendQuery(c, sql));
    int st = PQresultStatus(r) == PGRES_COMMAND_OK ? PL_OK
                                                   : pl__pg_err(s, c, r, what);
    PQclear(r);
    return st;
}

/* ---- open / close -------------------------------------------------------- */

static int make_statements(pl__pg_store *s)
{
    const char *n = s->schema;
    s->q[Q_RUN_FIND] = pl__asprintf(
        "SELECT num, info FROM \"%s\".runs WHERE id = $1::bytea", n);
    s->q[Q_RUN_LOAD] = pl__pg_read_sql(s, Q_RUN_LOAD);
    s->q[Q_STATE_GET] = pl__asprintf(
        "SELECT v FROM \"%s\".state WHERE run = $1::bigint", n);
    s->q[Q_STATE_LOCK] = pl__asprintf(
        "SELECT v FROM \"%s\".state WHERE run = $1::bigint FOR UPDATE", n);
    /* an id an unexpired tombstone keeps is taken */
    s->q[Q_CREATE] = pl__asprintf(
        "WITH r AS (INSERT INTO \"%s\".runs (id, num, info) "
        "SELECT $1::bytea, nextval('\"%s\".run_num'), $2::bytea "
        "WHERE NOT EXISTS (SELECT 1 FROM \"%s\".tombs WHERE id = $1::bytea "
        "AND expires > " NOW_US ") "
        "ON CONFLICT (id) DO NOTHING RETURNING num), "
        "s AS (INSERT INTO \"%s\".state (run, v) SELECT num, $3::bytea "
        "FROM r WHERE length($3::bytea) > 0) SELECT num FROM r",
        n, n, n, n);
    for (int i = Q_READ; i <= Q_SCAN; i++) /* pg_read.c */
        s->q[i] = pl__pg_read_sql(s, i);
    s->q[Q_RUNS] = pl__asprintf(
        "SELECT id, int8send(num) || info FROM \"%s\".runs "
        "WHERE id > $1::bytea ORDER BY id LIMIT $2::bigint",
        n);
    /* an empty $1 is "from the last": no id is empty */
    s->q[Q_RUNS_DESC] = pl__asprintf(
        "SELECT id, int8send(num) || info FROM \"%s\".runs "
        "WHERE $1::bytea = ''::bytea OR id < $1::bytea "
        "ORDER BY id DESC LIMIT $2::bigint",
        n);
    /* $1 in text: "{3,17}" */
    s->q[Q_STATES] = pl__asprintf(
        "SELECT run, v FROM \"%s\".state WHERE run = ANY($1::bigint[])", n);
    s->q[Q_FORMAT] = pl__asprintf(
        "SELECT v FROM \"%s\".meta WHERE k = 'format'", n);
    /* what the schema holds: relations; our tables; the identity and the
     * format (only looked for when meta is ours: the subqueries are
     * planned only if the CASE reaches them) */
    s->q[Q_EXISTS] = pl__asprintf(
        "SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace ns ON "
        "ns.oid = c.relnamespace WHERE ns.nspname = '%s'), "
        "to_regclass('\"%s\".meta') IS NOT NULL AND "
        "to_regclass('\"%s\".runs') IS NOT NULL AND "
        "to_regclass('\"%s\".state') IS NOT NULL AND "
        "to_regclass('\"%s\".steps') IS NOT NULL",
        n, n, n, n, n);
    s->q[Q_STATS] = pl__pg_read_sql(s, Q_STATS);
    /* the server's WAL position: every commit moves it (also commits to
     * other schemas and databases of the server) */
    s->q[Q_MARK] = pl__strdup(
        "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
        "ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint");
    for (int i = Q_WRITE; i <= Q_GENERIC; i++) /* pg_one.c */
        if (pl__pg_write_sql(s, i, &s->q[i]))
            return PL_ENOMEM;
    /* deleting runs (pg_commit.c): each is deleted if its state is still
     * the one read and no live worker holds its lease (FOR UPDATE: a
     * concurrent change is waited for and looked at again); its steps,
     * records and lease go, its tombstone comes; the ids deleted return */
    s->q[Q_DELETE] = pl__asprintf(
        "WITH u AS (SELECT * FROM unnest($1::bytea[], $2::bigint[], "
        "$3::bytea[], $4::bytea[], $5::bigint[]) AS u(id, num, st, tomb, "
        "exp)), d AS (SELECT u.id, u.num, u.tomb, u.exp FROM u JOIN "
        "\"%s\".runs r ON r.id = u.id AND r.num = u.num JOIN \"%s\".state "
        "s ON s.run = u.num AND s.v = u.st WHERE NOT EXISTS (SELECT 1 FROM "
        "\"%s\".leases l WHERE l.run = u.num AND l.owner <> '' AND "
        "l.expires > " NOW_US ") FOR UPDATE OF r, s), "
        "k AS (DELETE FROM \"%s\".steps USING d WHERE steps.k >= "
        "int8send(d.num) AND steps.k < int8send(d.num + 1)), "
        "x AS (DELETE FROM \"%s\".runs USING d WHERE runs.id = d.id), "
        "y AS (DELETE FROM \"%s\".state USING d WHERE state.run = d.num), "
        "z AS (DELETE FROM \"%s\".leases USING d WHERE leases.run = "
        "d.num), ti AS (DELETE FROM \"%s\".timers USING d WHERE "
        "timers.run = d.num), ib AS (DELETE FROM \"%s\".inbox USING d "
        "WHERE inbox.run = d.num), pk AS (DELETE FROM \"%s\".parked USING d "
        "WHERE parked.run = d.num), t AS (INSERT INTO \"%s\".tombs (id, expires, v) SELECT "
        "id, exp, tomb FROM d WHERE length(tomb) > 0 ON CONFLICT (id) DO "
        "UPDATE SET expires = excluded.expires, v = excluded.v) "
        "SELECT id FROM d",
        n, n, n, n, n, n, n, n, n, n, n);
    /* a continued run's successor: it takes its id over from a tombstone;
     * a live run with that id fails the commit (unique_violation) */
    s->q[Q_CREATE_SUCC] = pl__asprintf(
        "WITH t AS (DELETE FROM \"%s\".tombs WHERE id = $1::bytea), "
        "r AS (INSERT INTO \"%s\".runs (id, num, info) VALUES ($1::bytea, "
        "nextval('\"%s\".run_num'), $2::bytea) RETURNING num), "
        "s AS (INSERT INTO \"%s\".state (run, v) SELECT num, $3::bytea "
        "FROM r) SELECT num FROM r",
        n, n, n, n);
    s->q[Q_TOMB_GET] = pl__asprintf(
        "SELECT v FROM \"%s\".tombs WHERE id = $1::bytea", n);
    s->q[Q_TOMBS_EXPIRE] = pl__asprintf(
        "WITH e AS (DELETE FROM \"%s\".tombs WHERE id IN (SELECT id FROM "
        "\"%s\".tombs WHERE expires <= $1::bigint LIMIT $2::bigint) "
        "RETURNING 1) SELECT count(*) FROM e",
        n, n);
    s->q[Q_BEGIN] = pl__strdup("BEGIN");
    s->q[Q_COMMIT] = pl__strdup("COMMIT");
    for (int i = L_ACQUIRE; i <= L_CREATE_FROM; i++)
        if (pl__pg_lease_sql(s, i, &s->q[i]))
            return PL_ENOMEM;
    for (int i = L_TAKE; i <= L_POLL; i++) /* and L_TAKE_DUES */
        if (pl__pg_lease_sql(s, i, &s->q[i]))
            return PL_ENOMEM;
    if (pl__pg_sched_sql(s, Q_SCHED, &s->q[Q_SCHED]) ||
        pl__pg_sched_sql(s, Q_SCHEDS, &s->q[Q_SCHEDS]))
        return PL_ENOMEM;
    for (int i = T_SET; i <= T_INBOX_READ; i++)
        if (pl__pg_time_sql(s, i, &s->q[i]))
            return PL_ENOMEM;
    if (pl__pg_write_sql(s, Q_INBOX_ADD, &s->q[Q_INBOX_ADD]))
        return PL_ENOMEM;
    for (int i = 0; i < Q_N; i++)
        if (!s->q[i])
            return pl__err(PL_ENOMEM, "out of memory");
    return PL_OK;
}

int pl__pg_open(pl__pg_store **out, const char *uri,
                const pl__store_options *opts)
{
    pl__pg_store *s = calloc(1, sizeof *s);
    if (!s)
        return pl__err(PL_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pl__pg_stores_add(s);
    s->pid = pl__pg_pid();
    s->nosync = opts && opts->nosync;
    s->read_only = opts && opts->read_only;
    s->no_create = opts && opts->no_create;
    PGconn *c = NULL;
    int st = pl__pg_uri_parse(s, uri); /* pg_uri.c */
    if (!st)
        st = make_statements(s);
    if (!st)
        st = pl__pg_conn_get(s, &c);
    if (!st)
        st = pl__pg_setup(s, c); /* pg_setup.c */
    /* the schema is there: prepare the statements on this connection and
     * every one opened from now on */
    if (!st) {
        s->n_prepared = s->read_only ? Q_PREPARED_RO : Q_PREPARED;
        st = prepare(s, c);
    }
    pl__pg_conn_put(s, c);
    if (st) {
        pl__pg_close(s);
        return st;
    }
    *out = s;
    return PL_OK;
}

void pl__pg_close(pl__pg_store *s)
{
    if (!s)
        return;
    pl__pg_stores_remove(s);
    bool mine = s->pid == pl__pg_pid();
    while (s->n_idle) {
        PGconn *c = s->idle[--s->n_idle];
        if (mine)
            PQfinish(c);
        else
            conn_forget(c);
    }
    for (int i = 0; i < Q_N; i++)
        free(s->q[i]);
    for (size_t i = 0; i < sizeof s->pair_q / sizeof *s->pair_q; i++)
        free(s->pair_q[i]);
    free(s->schema);
    free(s->conninfo);
    free(s->path);
    pl__pg_cache_free(s->cache);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
