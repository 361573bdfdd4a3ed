/*
 * pg_store.c -- the store on PostgreSQL, through libpq.
 *
 * URI: postgresql://[user[:password]@][host][:port][/dbname][?param=value&...]
 * (or postgres://), as libpq reads it, plus one parameter of our own:
 * `schema=NAME` ([a-z_][a-z0-9_]*, at most 63 bytes; default `policyledger`),
 * which is taken out before libpq sees the URI.
 *
 * LAYOUT: the tables live in a schema of their own, created with them on
 * the first open.  Keys are bytea, which PostgreSQL orders like memcmp (and
 * a shorter key first), so the order is the LMDB store's: keys.c's layout.
 *
 *   | table  | columns                          | holds                    |
 *   |--------|----------------------------------|--------------------------|
 *   | meta   | k text PK, v bigint              | ('format', 1), and the   |
 *   |        |                                  | identity ('identity',    |
 *   |        |                                  | IDENTITY: "policyld")    |
 *   | runs   | id bytea PK, num bigint UNIQUE,  | run id -> number, info   |
 *   |        | info bytea                       | record (runrec.c)        |
 *   | state  | run bigint PK, v bytea           | run state (runrec.c)     |
 *   | steps  | k bytea PK, v bytea              | step key (keys.c) ->     |
 *   |        |                                  | step record (record.c)   |
 *   | run_num (a sequence)                      | the next run number      |
 *
 *   A database whose `format` row is not 1 is refused (PL_EVERSION).  A
 *   schema that holds anything but a store (its identity, or for a store
 *   made before the identity was written its format and tables, to which
 *   a read-write open adds the identity) is another program's: it is
 *   refused (PL_ECORRUPT), and nothing is created in it.
 *
 * COMMIT: a commit's batches are one transaction: its statements (a run's
 * creation, multi-row INSERTs of steps, the state's upsert) are sent in
 * libpq's pipeline mode with one Sync at the end, so they run as one
 * implicit transaction that costs one round trip.  Steps are inserted, never
 * updated: an existing key (unique_violation) fails the commit with
 * PL_EBUSY, as on LMDB.  There is no journal: steps are in place at once.
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
 * uses its parent's connections.
 */
#include "pg_store.h"
#include "runrec.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FORMAT 1
#define IDENTITY 8101813454559079524LL /* "policyld", big-endian */
#define SCHEMA_DEFAULT "policyledger"
#define SCHEMA_MAX 63
#define IDLE_MAX 16
#define ROWS_MAX 1000 /* rows per INSERT of steps */
#define READ_MAX 1024 /* rows per SELECT */

enum {
    Q_RUN_FIND,
    Q_STATE_GET,
    Q_STATE_LOCK,
    Q_STATE_PUT,
    Q_CREATE,
    Q_READ,
    Q_SCAN,
    Q_RUNS,
    Q_FORMAT,
    Q_EXISTS,
    Q_STATS,
    Q_N
};

/* The lease statements (lease_sql()). */
enum { L_ACQUIRE, L_GET, L_NEXT, L_RENEW, L_RELEASE, L_FENCE, L_CREATE, L_N };

/* The timer and inbox statements (time_sql()). */
enum {
    T_SET,
    T_TAKE,
    T_NEXT,
    T_GET,
    T_INBOX_DEL,
    T_INBOX_PUT,
    T_INBOX_READ,
    T_N
};

struct pl__pg_store {
    char *path;     /* as given, for messages */
    char *conninfo; /* the URI without schema= */
    char *schema;
    char *q[Q_N];    /* the statements, naming the schema */
    char *lq[L_N];   /* the lease statements, likewise */
    char *tq[T_N];   /* the timer and inbox statements, likewise */
    char *steps_sql; /* "INSERT INTO schema.steps (k, v) VALUES" */
    bool nosync;
    bool read_only; /* every write fails with PL_ESTATE */
    bool no_create; /* a missing schema is PL_ENOTFOUND */
    pthread_mutex_t mu;
    pid_t pid; /* the process the idle connections belong to */
    PGconn *idle[IDLE_MAX];
    size_t n_idle;
};

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

/* libpq's message for @p c, without its trailing newline. */
static const char *conn_msg(const PGconn *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s", c ? PQerrorMessage(c) : "out of memory");
    size_t len = strlen(buf);
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
        buf[--len] = '\0';
    return buf;
}

static bool lost(const PGconn *c) { return PQstatus(c) != CONNECTION_OK; }

/* The status for a failed statement (or a NULL result). */
static int pg_err(const pl__pg_store *s, const PGconn *c, const PGresult *r,
                  const char *what)
{
    char buf[512];
    if (lost(c))
        return pl__err(PL_ESTORE,
                       "store '%s': %s: the connection to the server was "
                       "lost (%s); nothing of this call was committed "
                       "unless it was reported so, and the next call "
                       "reconnects",
                       s->path, what, conn_msg(c, buf, sizeof buf));
    const char *m = r ? PQresultErrorMessage(r) : "";
    snprintf(buf, sizeof buf, "%s", *m ? m : PQerrorMessage(c));
    size_t len = strlen(buf);
    while (len && buf[len - 1] == '\n')
        buf[--len] = '\0';
    /* the causes a user can remove, as the LMDB store names them: the
     * server's disk is full (53100), the database or transaction is
     * read-only (25006), or the role may not write (42501) */
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int st = !code                                              ? PL_ESTORE
             : !strcmp(code, "53100")                           ? PL_ENOSPC
             : !strcmp(code, "25006") || !strcmp(code, "42501") ? PL_EACCES
                                                                : PL_ESTORE;
    return pl__err(st, "store '%s': %s: %s", s->path, what, buf);
}

static bool is_unique_violation(const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return code && strcmp(code, "23505") == 0;
}

static int read_only(const pl__pg_store *s)
{
    return pl__err(PL_ESTATE, "store '%s' is open read-only", s->path);
}

static int busy(void)
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

static int conn_open(pl__pg_store *s, PGconn **out)
{
    char buf[512];
    PGconn *c = PQconnectdb(s->conninfo);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        int st = pl__err(PL_ESTORE, "store '%s': cannot connect: %s", s->path,
                         conn_msg(c, buf, sizeof buf));
        PQfinish(c);
        return st;
    }
    PQsetNoticeProcessor(c, quiet, NULL);
    PGresult *r = PQexec(c, s->read_only
                                ? "SET default_transaction_read_only = on"
                            : s->nosync ? "SET synchronous_commit = off"
                                        : "SET synchronous_commit = on");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        int st = pg_err(s, c, r, "setting synchronous_commit");
        PQclear(r);
        PQfinish(c);
        return st;
    }
    PQclear(r);
    *out = c;
    return PL_OK;
}

/* Take an idle connection, or open one. */
static int conn_get(pl__pg_store *s, PGconn **out)
{
    PGconn *c = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->pid != getpid()) {
        while (s->n_idle)
            conn_forget(s->idle[--s->n_idle]);
        s->pid = getpid();
    }
    if (s->n_idle)
        c = s->idle[--s->n_idle];
    pthread_mutex_unlock(&s->mu);
    if (c) {
        *out = c;
        return PL_OK;
    }
    return conn_open(s, out);
}

/* Give a connection back: kept if it is sound and outside a transaction. */
static void conn_put(pl__pg_store *s, PGconn *c)
{
    if (!c)
        return;
    bool keep = !lost(c) && PQtransactionStatus(c) == PQTRANS_IDLE &&
                PQpipelineStatus(c) == PQ_PIPELINE_OFF;
    pthread_mutex_lock(&s->mu);
    if (s->pid != getpid()) {
        pthread_mutex_unlock(&s->mu);
        conn_forget(c);
        return;
    }
    /* a lost connection most often means a server restarted or gone: the
     * idle ones are lost too, so drop them, and the next call reconnects
     * instead of meeting another dead one */
    PGconn *drop[IDLE_MAX];
    size_t ndrop = 0;
    if (lost(c)) {
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
static PGresult *exec(PGconn *c, const char *sql, int n,
                      const char *const *vals, const int *lens)
{
    int fmts[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    return PQexecParams(c, sql, n, NULL, vals, lens, fmts, 1);
}

/* Run a statement without parameters that returns no rows. */
static int command(pl__pg_store *s, PGconn *c, const char *sql,
                   const char *what)
{
    PGresult *r = PQexec(c, sql);
    int st = PQresultStatus(r) == PGRES_COMMAND_OK ? PL_OK
                                                   : pg_err(s, c, r, what);
    PQclear(r);
    return st;
}

/* ---- open / close -------------------------------------------------------- */

static bool schema_ok(const char *p, size_t n)
{
    if (n == 0 || n > SCHEMA_MAX || (p[0] >= '0' && p[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
              p[i] == '_'))
            return false;
    return true;
}

/* The URI for messages: its password, if any, shown as "***". */
static char *masked(const char *uri)
{
    const char *user = strstr(uri, "://");
    user = user ? user + 3 : uri;
    size_t hostpart = strcspn(user, "/?");
    const char *at = memchr(user, '@', hostpart);
    const char *colon = at ? memchr(user, ':', (size_t)(at - user)) : NULL;
    if (!colon)
        return pl__strdup(uri);
    return pl__asprintf("%.*s***%s", (int)(colon + 1 - uri), uri, at);
}

/*
 * Split schema=NAME off the URI's query string, and give libpq a
 * connect_timeout unless the URI has one: a host that does not answer
 * fails the call instead of hanging it.
 */
static int parse_uri(pl__pg_store *s, const char *uri)
{
    const char *q = strchr(uri, '?');
    pl__buf ci = {0};
    const char *schema = SCHEMA_DEFAULT;
    size_t schema_len = strlen(SCHEMA_DEFAULT);
    int st = pl__buf_append(&ci, uri, q ? (size_t)(q - uri) : strlen(uri));
    char sep = '?';
    for (const char *p = q ? q + 1 : NULL; !st && p && *p;) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= 7 && memcmp(p, "schema=", 7) == 0) {
            schema = p + 7;
            schema_len = len - 7;
            if (!schema_ok(schema, schema_len))
                st = pl__err(PL_EINVAL,
                             "store '%s': schema must be 1 to %d of a-z, 0-9 "
                             "and _, not starting with a digit",
                             uri, SCHEMA_MAX);
        } else if (len) {
            if (!(st = pl__buf_append(&ci, &sep, 1)))
                st = pl__buf_append(&ci, p, len);
            sep = '&';
        }
        p = end ? end + 1 : NULL;
    }
    if (!st && !strstr(uri, "connect_timeout="))
        st = pl__buf_append(&ci,
                            sep == '?' ? "?connect_timeout=30"
                                       : "&connect_timeout=30",
                            19);
    if (!st)
        st = pl__buf_append(&ci, "", 1);
    if (!st && !(s->schema = pl__strndup(schema, schema_len)))
        st = PL_ENOMEM;
    if (!st) {
        s->conninfo = (char *)ci.data;
        return PL_OK;
    }
    pl__buf_free(&ci);
    return st ? st : pl__err(PL_ENOMEM, "out of memory");
}

static int lease_sql(const pl__pg_store *s, int which, char **out);
static int time_sql(const pl__pg_store *s, int which, char **out);

static int make_statements(pl__pg_store *s)
{
    const char *n = s->schema;
    s->q[Q_RUN_FIND] = pl__asprintf(
        "SELECT num, info FROM \"%s\".runs WHERE id = $1::bytea", n);
    s->q[Q_STATE_GET] = pl__asprintf(
        "SELECT v FROM \"%s\".state WHERE run = $1::bigint", n);
    s->q[Q_STATE_LOCK] = pl__asprintf(
        "SELECT v FROM \"%s\".state WHERE run = $1::bigint FOR UPDATE", n);
    s->q[Q_STATE_PUT] = pl__asprintf(
        "INSERT INTO \"%s\".state (run, v) VALUES ($1::bigint, $2::bytea) "
        "ON CONFLICT (run) DO UPDATE SET v = excluded.v",
        n);
    s->q[Q_CREATE] = pl__asprintf(
        "WITH r AS (INSERT INTO \"%s\".runs (id, num, info) "
        "VALUES ($1::bytea, nextval('\"%s\".run_num'), $2::bytea) "
        "ON CONFLICT (id) DO NOTHING RETURNING num), "
        "s AS (INSERT INTO \"%s\".state (run, v) SELECT num, $3::bytea "
        "FROM r WHERE length($3::bytea) > 0) SELECT num FROM r",
        n, n, n);
    s->q[Q_READ] = pl__asprintf(
        "SELECT k, v FROM \"%s\".steps WHERE k >= $1::bytea AND "
        "k <= $2::bytea AND length(k) = length($1::bytea) ORDER BY k "
        "LIMIT $3::bigint",
        n);
    s->q[Q_SCAN] = pl__asprintf(
        "SELECT k, v FROM \"%s\".steps WHERE k > $1::bytea AND "
        "k <= $2::bytea ORDER BY k LIMIT $3::bigint",
        n);
    s->q[Q_RUNS] = pl__asprintf(
        "SELECT id, int8send(num) || info FROM \"%s\".runs "
        "WHERE id > $1::bytea ORDER BY id LIMIT $2::bigint",
        n);
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
    /* one statement: one snapshot */
    s->q[Q_STATS] = pl__asprintf(
        "SELECT current_setting('block_size')::bigint, (SELECT "
        "coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = "
        "'%s' AND c.relkind IN ('r', 'S'))::bigint, (SELECT count(*) FROM "
        "\"%s\".runs), (SELECT count(*) FROM \"%s\".steps)",
        n, n, n);
    s->steps_sql = pl__asprintf("INSERT INTO \"%s\".steps (k, v) VALUES", n);
    for (int i = 0; i < Q_N; i++)
        if (!s->q[i])
            return pl__err(PL_ENOMEM, "out of memory");
    for (int i = 0; i < L_N; i++)
        if (lease_sql(s, i, &s->lq[i]))
            return PL_ENOMEM;
    for (int i = 0; i < T_N; i++)
        if (time_sql(s, i, &s->tq[i]))
            return PL_ENOMEM;
    return s->steps_sql ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

/* What the schema holds (see LAYOUT), before anything is created in it:
 * PL_ECORRUPT for another program's, PL_ENOTFOUND for none when it must
 * exist. */
static int identify(pl__pg_store *s, PGconn *c, bool must_exist)
{
    PGresult *r = exec(c, s->q[Q_EXISTS], 0, NULL, NULL);
    int st = PL_OK;
    bool empty = false, tables = false;
    /* results come in binary: a bigint, a bool */
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
        PQgetlength(r, 0, 0) != 8 || PQgetlength(r, 0, 1) != 1)
        st = pg_err(s, c, r, "looking for the schema");
    else {
        empty = !pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        tables = *PQgetvalue(r, 0, 1) != 0;
    }
    PQclear(r);
    if (st || empty)
        return st ? st
               : must_exist
                   ? pl__err(PL_ENOTFOUND,
                             "store '%s' does not exist (no schema %s)",
                             s->path, s->schema)
                   : PL_OK;
    bool marked = false;
    if (tables) {
        char *sql = pl__asprintf(
            "SELECT EXISTS (SELECT 1 FROM \"%s\".meta WHERE k = 'identity' "
            "AND v = %lld) OR EXISTS (SELECT 1 FROM \"%s\".meta WHERE k = "
            "'format')",
            s->schema, IDENTITY, s->schema);
        if (!sql)
            return pl__err(PL_ENOMEM, "out of memory");
        r = exec(c, sql, 0, NULL, NULL);
        free(sql);
        /* a meta table of another shape is another program's */
        marked = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
                 PQgetlength(r, 0, 0) == 1 && *PQgetvalue(r, 0, 0) != 0;
        PQclear(r);
    }
    if (!marked)
        return pl__err(PL_ECORRUPT,
                       "schema %s of '%s' holds another program's tables, "
                       "not a policyledger store: nothing was created in it",
                       s->schema, s->path);
    return PL_OK;
}

/* Create the schema if it is not there (unless read-only), and check its
 * format. */
static int setup(pl__pg_store *s, PGconn *c)
{
    const char *n = s->schema;
    char *sql = pl__asprintf(
        "BEGIN;"
        "SELECT pg_advisory_xact_lock(hashtext('policyledger store %s'));"
        "CREATE SCHEMA IF NOT EXISTS \"%s\";"
        "CREATE TABLE IF NOT EXISTS \"%s\".meta (k text PRIMARY KEY, "
        "v bigint NOT NULL);"
        "CREATE TABLE IF NOT EXISTS \"%s\".runs (id bytea PRIMARY KEY, "
        "num bigint NOT NULL UNIQUE, info bytea NOT NULL);"
        "CREATE TABLE IF NOT EXISTS \"%s\".state (run bigint PRIMARY KEY, "
        "v bytea NOT NULL);"
        "CREATE TABLE IF NOT EXISTS \"%s\".steps (k bytea PRIMARY KEY, "
        "v bytea NOT NULL);"
        "CREATE SEQUENCE IF NOT EXISTS \"%s\".run_num;"
        "INSERT INTO \"%s\".meta (k, v) SELECT 'format', %d WHERE NOT EXISTS "
        "(SELECT 1 FROM \"%s\".meta WHERE k = 'format') AND NOT EXISTS "
        "(SELECT 1 FROM \"%s\".runs);"
        "INSERT INTO \"%s\".meta (k, v) VALUES ('identity', %lld) "
        "ON CONFLICT (k) DO NOTHING;"
        "COMMIT",
        n, n, n, n, n, n, n, n, FORMAT, n, n, n, IDENTITY);
    if (!sql)
        return pl__err(PL_ENOMEM, "out of memory");
    int st = identify(s, c, s->read_only || s->no_create);
    if (!st && !s->read_only)
        st = command(s, c, sql, "creating the schema");
    free(sql);
    if (st)
        return st;
    PGresult *r = exec(c, s->q[Q_FORMAT], 0, NULL, NULL);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pg_err(s, c, r, "reading the format");
    else if (PQntuples(r) != 1)
        st = pl__err(PL_ECORRUPT, "store '%s' holds runs but no format record",
                     s->path);
    else if (PQgetlength(r, 0, 0) != 8)
        st = pl__err(PL_ECORRUPT, "store '%s' has a malformed format record",
                     s->path);
    else {
        uint64_t f = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        if (f != FORMAT)
            st = pl__err(PL_EVERSION,
                         "store '%s' has format %lld; this build reads "
                         "format %d",
                         s->path, (long long)f, FORMAT);
    }
    PQclear(r);
    return st;
}

/* the leases table (see LEASES at the end of this file) */
static int pg_lease_setup(pl__pg_store *s, PGconn *c);
/* the timers and inboxes (see TIMERS at the end of this file) */
static int pg_time_setup(pl__pg_store *s, PGconn *c);

int pl__pg_open(pl__pg_store **out, const char *uri,
                const pl__store_options *opts)
{
    pl__pg_store *s = calloc(1, sizeof *s);
    if (!s)
        return pl__err(PL_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->pid = getpid();
    s->nosync = opts && opts->nosync;
    s->read_only = opts && opts->read_only;
    s->no_create = opts && opts->no_create;
    PGconn *c = NULL;
    int st = (s->path = masked(uri)) ? PL_OK
                                     : pl__err(PL_ENOMEM, "out of memory");
    if (!st)
        st = parse_uri(s, uri);
    if (!st)
        st = make_statements(s);
    if (!st)
        st = conn_get(s, &c);
    if (!st)
        st = setup(s, c);
    if (!st && !s->read_only)
        st = pg_lease_setup(s, c);
    if (!st && !s->read_only)
        st = pg_time_setup(s, c);
    conn_put(s, c);
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
    bool mine = s->pid == getpid();
    while (s->n_idle) {
        PGconn *c = s->idle[--s->n_idle];
        if (mine)
            PQfinish(c);
        else
            conn_forget(c);
    }
    for (int i = 0; i < Q_N; i++)
        free(s->q[i]);
    for (int i = 0; i < L_N; i++)
        free(s->lq[i]);
    for (int i = 0; i < T_N; i++)
        free(s->tq[i]);
    free(s->steps_sql);
    free(s->schema);
    free(s->conninfo);
    free(s->path);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *pl__pg_path(const pl__pg_store *s) { return s->path; }

/* ---- commit -------------------------------------------------------------- */

/* What a statement sent in the pipeline was. */
typedef enum {
    SENT_CREATE,
    SENT_STEPS,
    SENT_STATE,
    SENT_LEASE,
    SENT_TIMER,
    SENT_INBOX
} sent_kind;

/* the commit's lease statements (see LEASES at the end of this file) */
static int pg_lease_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                         bool *sent_any);
static int pg_lease_failed(pl__pg_store *s, PGconn *c, const PGresult *r);
/* the commit's timer and inbox statements (see TIMERS at the end) */
static int pg_time_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                        bool *timer, bool *inbox);

typedef struct sent {
    sent_kind kind;
    pl__batch *batch;
} sent;

typedef struct params {
    const char **vals;
    int *lens, *fmts;
    size_t cap;
} params;

static int params_room(params *p, size_t n)
{
    if (n <= p->cap)
        return PL_OK;
    const char **v = realloc(p->vals, n * sizeof *v);
    if (v)
        p->vals = v;
    int *l = v ? realloc(p->lens, n * sizeof *l) : NULL;
    if (l)
        p->lens = l;
    int *f = l ? realloc(p->fmts, n * sizeof *f) : NULL;
    if (!f)
        return pl__err(PL_ENOMEM, "out of memory");
    p->fmts = f;
    for (size_t i = p->cap; i < n; i++)
        f[i] = 1;
    p->cap = n;
    return PL_OK;
}

static void params_free(params *p)
{
    free(p->vals);
    free(p->lens);
    free(p->fmts);
}

/*
 * Build the multi-row INSERT of steps [from, from + n) of @p l into @p sql
 * and @p p.  Called in pipeline mode (send) or not.
 */
static int steps_insert(const pl__pg_store *s, const pl__kvs *l, size_t from,
                        size_t n, pl__buf *sql, params *p)
{
    pl__buf_reset(sql);
    int st = params_room(p, 2 * n);
    if (!st)
        st = pl__buf_append(sql, s->steps_sql, strlen(s->steps_sql));
    for (size_t i = 0; !st && i < n; i++) {
        char row[48];
        int len = snprintf(row, sizeof row, "%s($%zu::bytea,$%zu::bytea)",
                           i ? "," : " ", 2 * i + 1, 2 * i + 2);
        st = pl__buf_append(sql, row, (size_t)len);
        const pl__kv *e = &l->e[from + i];
        p->vals[2 * i] = (const char *)pl__kvs_key(l, from + i);
        p->lens[2 * i] = (int)e->klen;
        p->vals[2 * i + 1] = (const char *)pl__kvs_val(l, from + i);
        p->lens[2 * i + 1] = (int)e->vlen;
    }
    return st ? st : pl__buf_append(sql, "", 1);
}

/* Send the statements of the commit; *nsent is how many were sent. */
static int commit_send(pl__pg_store *s, PGconn *c, pl__batch *const *batches,
                       size_t n, sent **out, size_t *nsent)
{
    sent *q = NULL;
    size_t nq = 0, cap = 0;
    pl__buf sql = {0};
    params p = {0};
    int st = PL_OK;
    for (size_t b = 0; !st && b < n; b++) {
        pl__batch *bt = batches[b];
        bt->rc = PL_OK;
        size_t want = nq + 5 + (bt->steps.n + ROWS_MAX - 1) / ROWS_MAX;
        sent *g = pl__grow(q, &cap, want, sizeof *q, 16);
        if (!g) {
            st = pl__err(PL_ENOMEM, "out of memory");
            break;
        }
        q = g;
        if (bt->create_id) {
            if (bt->steps.n) {
                st = pl__err(PL_EINVAL,
                             "store '%s': a batch that creates a "
                             "run carries no steps",
                             s->path);
                break;
            }
            const char *vals[3] = {bt->create_id,
                                   (const char *)bt->create_info->data,
                                   (const char *)bt->state.data};
            int lens[3] = {(int)strlen(bt->create_id),
                           (int)bt->create_info->len, (int)bt->state.len};
            int fmts[3] = {1, 1, 1};
            if (!PQsendQueryParams(c, s->q[Q_CREATE], 3, NULL, vals, lens, fmts,
                                   1)) {
                st = pg_err(s, c, NULL, "sending a run's creation");
                break;
            }
            q[nq++] = (sent){SENT_CREATE, bt};
        }
        bool leased;
        if ((st = pg_lease_send(s, c, bt, &leased)))
            break;
        if (leased)
            q[nq++] = (sent){SENT_LEASE, bt};
        if (bt->create_id)
            continue;
        for (size_t i = 0; !st && i < bt->steps.n; i += ROWS_MAX) {
            size_t k = bt->steps.n - i < ROWS_MAX ? bt->steps.n - i : ROWS_MAX;
            if ((st = steps_insert(s, &bt->steps, i, k, &sql, &p)))
                break;
            if (!PQsendQueryParams(c, (const char *)sql.data, (int)(2 * k),
                                   NULL, p.vals, p.lens, p.fmts, 1))
                st = pg_err(s, c, NULL, "sending steps");
            else
                q[nq++] = (sent){SENT_STEPS, bt};
        }
        bool timer, inbox;
        if (!st && !(st = pg_time_send(s, c, bt, &timer, &inbox))) {
            if (timer)
                q[nq++] = (sent){SENT_TIMER, bt};
            if (inbox)
                q[nq++] = (sent){SENT_INBOX, bt};
        }
        if (!st && bt->state.len) {
            uint8_t run[8];
            pl__put_be64(run, bt->run);
            const char *vals[2] = {(const char *)run,
                                   (const char *)bt->state.data};
            int lens[2] = {8, (int)bt->state.len}, fmts[2] = {1, 1};
            if (!PQsendQueryParams(c, s->q[Q_STATE_PUT], 2, NULL, vals, lens,
                                   fmts, 1))
                st = pg_err(s, c, NULL, "sending a run state");
            else
                q[nq++] = (sent){SENT_STATE, bt};
        }
    }
    pl__buf_free(&sql);
    params_free(&p);
    *out = q;
    *nsent = nq;
    return st;
}

/* Read the results of the commit's statements and of its Sync. */
static int commit_results(pl__pg_store *s, PGconn *c, const sent *q, size_t nq)
{
    int st = PL_OK;
    for (size_t i = 0; i < nq; i++) {
        PGresult *r = PQgetResult(c);
        if (!r)
            return st ? st : pg_err(s, c, NULL, "committing");
        ExecStatusType es = PQresultStatus(r);
        if (es == PGRES_TUPLES_OK && q[i].kind == SENT_CREATE) {
            pl__batch *bt = q[i].batch;
            if (PQntuples(r) == 0)
                bt->rc = PL_EEXIST;
            else if (PQgetlength(r, 0, 0) == 8)
                bt->run = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
            else if (!st)
                st = pl__err(PL_ECORRUPT,
                             "store '%s': a run number is "
                             "malformed",
                             s->path);
        } else if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK &&
                   es != PGRES_PIPELINE_ABORTED && !st) {
            st = q[i].kind == SENT_STEPS && is_unique_violation(r) ? busy()
                 : q[i].kind == SENT_LEASE ? pg_lease_failed(s, c, r)
                 : q[i].kind == SENT_INBOX
                     ? pl__err(PL_EBUSY,
                               "run #%llu: an inbox record it consumes was "
                               "consumed by another execution",
                               (unsigned long long)q[i].batch->run)
                     : pg_err(s, c, r, "committing");
        }
        PQclear(r);
        if (lost(c))
            return st ? st : pg_err(s, c, NULL, "committing");
        if ((r = PQgetResult(c))) { /* the NULL that ends each statement's */
            PQclear(r);
            return st ? st : pg_err(s, c, NULL, "committing: out of step");
        }
    }
    PGresult *r = PQgetResult(c);
    ExecStatusType es = PQresultStatus(r);
    PQclear(r);
    if (es != PGRES_PIPELINE_SYNC && !st)
        st = pg_err(s, c, NULL, "committing");
    return st;
}

int pl__pg_commit(pl__pg_store *s, pl__batch *const *batches, size_t n,
                  bool journal)
{
    (void)journal; /* no journal: steps go to their place at once */
    if (s->read_only)
        return read_only(s);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    sent *q = NULL;
    size_t nq = 0;
    if (PQenterPipelineMode(c) != 1) {
        st = pg_err(s, c, NULL, "entering pipeline mode");
        goto done;
    }
    st = commit_send(s, c, batches, n, &q, &nq);
    /* the Sync ends the implicit transaction: commits it, or rolls back
     * everything after an error; after a failed send nothing is synced,
     * and the connection is dropped, which rolls it back too */
    if (!st && PQpipelineSync(c) != 1)
        st = pg_err(s, c, NULL, "committing");
    if (!st)
        st = commit_results(s, c, q, nq);
    if (!lost(c) && PQpipelineStatus(c) != PQ_PIPELINE_OFF &&
        PQexitPipelineMode(c) != 1) {
        PQfinish(c); /* left in a state no other call can use */
        c = NULL;
    }
done:
    free(q);
    conn_put(s, c);
    return st;
}

int pl__pg_settle(pl__pg_store *s)
{
    (void)s;
    return PL_OK;
}

void pl__pg_maintain(pl__pg_store *s) { (void)s; }

/* ---- reading ------------------------------------------------------------- */

/* Run a query that returns rows of (key, value) or (value) into @p out. */
static int query(pl__pg_store *s, const char *sql, int nparams,
                 const char *const *vals, const int *lens, PGresult **out,
                 const char *what)
{
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    PGresult *r = exec(c, sql, nparams, vals, lens);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        st = pg_err(s, c, r, what);
        PQclear(r);
        r = NULL;
    }
    conn_put(s, c);
    *out = r;
    return st;
}

int pl__pg_read(pl__pg_store *s, const uint8_t *prefix, size_t prefix_len,
                uint32_t from_seq, size_t max_n, size_t max_bytes, pl__kvs *out)
{
    pl__kvs_reset(out);
    uint8_t lo[PL__KEY_MAX], hi[PL__KEY_MAX], lim[8];
    memcpy(lo, prefix, prefix_len);
    memcpy(hi, prefix, prefix_len);
    pl__put_be32(lo + prefix_len, from_seq);
    pl__put_be32(hi + prefix_len, UINT32_MAX);
    pl__put_be64(lim, max_n < READ_MAX ? (max_n ? max_n : 1) : READ_MAX);
    const char *vals[3] = {(const char *)lo, (const char *)hi,
                           (const char *)lim};
    int lens[3] = {(int)prefix_len + 4, (int)prefix_len + 4, 8};
    PGresult *r = NULL;
    int st = query(s, s->q[Q_READ], 3, vals, lens, &r, "reading a ledger");
    if (st)
        return st;
    uint32_t want = from_seq;
    size_t bytes = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        const uint8_t *k = (const uint8_t *)PQgetvalue(r, i, 0);
        if (pl__get_be32(k + prefix_len) != want) {
            st = pl__err(PL_ECORRUPT,
                         "store '%s': a ledger is missing its step %u", s->path,
                         want);
            break;
        }
        int vlen = PQgetlength(r, i, 1);
        if ((st = pl__kvs_begin(out, NULL, 0)) ||
            (st = pl__buf_append(&out->data, PQgetvalue(r, i, 1),
                                 (size_t)vlen)))
            break;
        pl__kvs_end(out);
        bytes += (size_t)vlen;
        if (++want == 0 || out->n >= max_n || bytes >= max_bytes)
            break;
    }
    PQclear(r);
    return st;
}

/* Copy rows of (key, value) to @p out. */
static int rows_to_kvs(PGresult *r, pl__kvs *out)
{
    int st = PL_OK;
    for (int i = 0; !st && i < PQntuples(r); i++)
        st = pl__kvs_add(out, (const uint8_t *)PQgetvalue(r, i, 0),
                         (size_t)PQgetlength(r, i, 0),
                         (const uint8_t *)PQgetvalue(r, i, 1),
                         (size_t)PQgetlength(r, i, 1));
    return st;
}

static int scan(pl__pg_store *s, uint64_t run, const uint8_t *after,
                size_t after_len, size_t max_n, PGresult **out)
{
    uint8_t first[8], hi[PL__KEY_MAX], lim[8];
    pl__put_be64(first, run);
    memcpy(hi, first, 8);
    memset(hi + 8, 0xff, sizeof hi - 8);
    pl__put_be64(lim, max_n > INT64_MAX ? INT64_MAX : max_n);
    const char *vals[3] = {(const char *)(after ? after : first),
                           (const char *)hi, (const char *)lim};
    int lens[3] = {after ? (int)after_len : 8, (int)sizeof hi, 8};
    return query(s, s->q[Q_SCAN], 3, vals, lens, out, "scanning a run");
}

int pl__pg_scan(pl__pg_store *s, uint64_t run, const uint8_t *after,
                size_t after_len, size_t max_n, pl__kvs *out)
{
    pl__kvs_reset(out);
    if (after && after_len > PL__KEY_MAX)
        return pl__err(PL_EINVAL, "store '%s': a step key of %zu bytes",
                       s->path, after_len);
    PGresult *r = NULL;
    int st = scan(s, run, after, after_len, max_n, &r);
    if (!st)
        st = rows_to_kvs(r, out);
    PQclear(r);
    return st;
}

int pl__pg_each_step(pl__pg_store *s, uint64_t run, pl__step_fn fn, void *user)
{
    uint8_t last[PL__KEY_MAX];
    size_t last_len = 0;
    for (;;) {
        PGresult *r = NULL;
        int st = scan(s, run, last_len ? last : NULL, last_len, READ_MAX, &r);
        if (st)
            return st;
        int n = PQntuples(r);
        for (int i = 0; !st && i < n; i++) {
            size_t klen = (size_t)PQgetlength(r, i, 0);
            const uint8_t *k = (const uint8_t *)PQgetvalue(r, i, 0);
            st = fn(k, klen, (const uint8_t *)PQgetvalue(r, i, 1),
                    (size_t)PQgetlength(r, i, 1), user);
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
        PQclear(r);
        if (st || n < READ_MAX)
            return st;
    }
}

/* ---- runs ---------------------------------------------------------------- */

int pl__pg_run_find(pl__pg_store *s, const char *id, uint64_t *num,
                    pl__buf *info)
{
    const char *vals[1] = {id};
    int lens[1] = {(int)strlen(id)};
    PGresult *r = NULL;
    int st = query(s, s->q[Q_RUN_FIND], 1, vals, lens, &r, "reading a run");
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
    int st = query(s, s->q[Q_STATE_GET], 1, vals, lens, &r,
                   "reading a run state");
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

/* The body of pl__pg_state_update(), inside its transaction. */
static int update_body(pl__pg_store *s, PGconn *c, uint64_t num,
                       pl__state_fn fn, void *user, pl__buf *state,
                       pl__kvs *extra)
{
    uint8_t key[8];
    pl__put_be64(key, num);
    const char *vals[2] = {(const char *)key, NULL};
    int lens[2] = {8, 0};
    PGresult *r = exec(c, s->q[Q_STATE_LOCK], 1, vals, lens);
    int st = PL_OK;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pg_err(s, c, r, "reading a run state");
    else if (PQntuples(r) == 0)
        st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                     (unsigned long long)num);
    else
        st = pl__buf_append(state, PQgetvalue(r, 0, 0),
                            (size_t)PQgetlength(r, 0, 0));
    PQclear(r);
    if (st || (st = fn(state, extra, user)))
        return st;
    vals[1] = (const char *)state->data;
    lens[1] = (int)state->len;
    r = exec(c, s->q[Q_STATE_PUT], 2, vals, lens);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        st = pg_err(s, c, r, "writing a run state");
    PQclear(r);
    pl__buf sql = {0};
    params p = {0};
    for (size_t i = 0; !st && i < extra->n; i += ROWS_MAX) {
        size_t k = extra->n - i < ROWS_MAX ? extra->n - i : ROWS_MAX;
        if ((st = steps_insert(s, extra, i, k, &sql, &p)))
            break;
        r = PQexecParams(c, (const char *)sql.data, (int)(2 * k), NULL, p.vals,
                         p.lens, p.fmts, 1);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            st = is_unique_violation(r) ? busy()
                                        : pg_err(s, c, r, "writing steps");
        PQclear(r);
    }
    pl__buf_free(&sql);
    params_free(&p);
    return st;
}

int pl__pg_state_update(pl__pg_store *s, uint64_t num, pl__state_fn fn,
                        void *user)
{
    if (s->read_only)
        return read_only(s);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    pl__buf state = {0};
    pl__kvs extra = {0};
    st = command(s, c, "BEGIN", "beginning a transaction");
    if (!st)
        st = update_body(s, c, num, fn, user, &state, &extra);
    if (!st)
        st = command(s, c, "COMMIT", "committing");
    else if (!lost(c)) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        if (command(s, c, "ROLLBACK", "rolling back")) {
            PQfinish(c);
            c = NULL;
        }
        pl__errmsg_restore(saved);
    }
    conn_put(s, c);
    pl__buf_free(&state);
    pl__kvs_free(&extra);
    return st;
}

int pl__pg_runs(pl__pg_store *s, const char *after, size_t max_n, pl__kvs *out)
{
    pl__kvs_reset(out);
    uint8_t lim[8];
    pl__put_be64(lim, max_n > INT64_MAX ? INT64_MAX : max_n);
    const char *vals[2] = {after ? after : "", (const char *)lim};
    int lens[2] = {after ? (int)strlen(after) : 0, 8};
    PGresult *r = NULL;
    int st = query(s, s->q[Q_RUNS], 2, vals, lens, &r, "listing runs");
    if (!st)
        st = rows_to_kvs(r, out);
    PQclear(r);
    return st;
}

/* ---- statistics ---------------------------------------------------------- */

/*
 * PostgreSQL has no map and no free list of ours: file_bytes and map_bytes
 * are the schema's tables with their indexes and TOAST, used_pages that
 * in the server's pages, free_pages 0.
 */
int pl__pg_stats_get(pl__pg_store *s, pl__store_stats *out)
{
    memset(out, 0, sizeof *out);
    PGresult *r = NULL;
    int st = query(s, s->q[Q_STATS], 0, NULL, NULL, &r, "reading statistics");
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

/* ---- leases -------------------------------------------------------------- */

/*
 * LEASES (store.h) on PostgreSQL: one more table and one function in the
 * store's schema, made on every writable open (an older store gains them).
 *
 *   | leases | run bigint PK, gen bigint, owner text, id text,          |
 *   |        | expires bigint (Unix us by the server's clock)          |
 *   | pl_fence(run, gen, drop) | raises SQLSTATE PLOWN unless run's lease |
 *   |        | has generation gen (locking its row); drops it if drop   |
 *
 * Every expiry is the server's clock_timestamp(): hosts need not agree on
 * the time.  A worker takes a queued or expired lease with one UPDATE whose
 * row comes from SELECT ... FOR UPDATE SKIP LOCKED, so two workers never
 * take the same row and neither waits for the other.  A commit's fence
 * locks the lease row until the commit ends, so a take waits for it and
 * then finds the generation it must increment.
 */
#define NOW_US "(extract(epoch from clock_timestamp()) * 1000000)::bigint"
#define FENCE_STATE "PLOWN"

static int lease_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    switch (which) {
    case L_ACQUIRE:
        *out = pl__asprintf(
            "INSERT INTO \"%s\".leases AS l (run, gen, owner, id, expires) "
            "VALUES ($1::bigint, 1, $2, $3, " NOW_US " + $4::bigint) "
            "ON CONFLICT (run) DO UPDATE SET gen = l.gen + 1, owner = "
            "excluded.owner, id = excluded.id, expires = excluded.expires "
            "WHERE l.expires <= " NOW_US " OR l.owner = excluded.owner OR "
            "l.gen = $5::bigint RETURNING gen, (xmax <> 0)::int",
            n);
        break;
    case L_GET:
        *out = pl__asprintf("SELECT run, gen, expires - " NOW_US ", owner, id "
                            "FROM \"%s\".leases WHERE run = $1::bigint",
                            n);
        break;
    case L_NEXT:
        *out = pl__asprintf(
            "UPDATE \"%s\".leases l SET gen = l.gen + 1, owner = $1, "
            "expires = " NOW_US " + $2::bigint WHERE l.run = (SELECT run "
            "FROM \"%s\".leases WHERE expires <= " NOW_US " ORDER BY "
            "expires, run LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING l.run, "
            "l.gen, l.expires - " NOW_US ", l.owner, l.id",
            n, n);
        break;
    case L_RENEW:
        /* rows a commit has locked (its fence) are skipped, not waited
         * for: renewed next time, never a deadlock with a group commit */
        *out = pl__asprintf(
            "WITH mine AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) "
            "AS u(run, gen)), locked AS (SELECT l.run FROM \"%s\".leases l "
            "JOIN mine ON l.run = mine.run AND l.gen = mine.gen ORDER BY "
            "l.run FOR UPDATE OF l SKIP LOCKED), upd AS (UPDATE \"%s\".leases "
            "l SET expires = " NOW_US " + $3::bigint FROM locked WHERE "
            "l.run = locked.run RETURNING l.run) SELECT mine.run FROM mine "
            "WHERE NOT EXISTS (SELECT 1 FROM \"%s\".leases l WHERE l.run = "
            "mine.run AND l.gen = mine.gen)",
            n, n, n);
        break;
    case L_RELEASE:
        *out = pl__asprintf("DELETE FROM \"%s\".leases WHERE run = $1::bigint "
                            "AND gen = $2::bigint",
                            n);
        break;
    case L_FENCE:
        *out = pl__asprintf("SELECT \"%s\".pl_fence($1::bigint, $2::bigint, "
                            "$3::boolean)",
                            n);
        break;
    default: /* L_CREATE: after the run's creation, in its transaction */
        *out = pl__asprintf(
            "INSERT INTO \"%s\".leases (run, gen, owner, id, expires) SELECT "
            "num, CASE WHEN $2 = '' THEN 0 ELSE 1 END, $2, $1, CASE WHEN $2 "
            "= '' THEN 0 ELSE " NOW_US " + $3::bigint END FROM \"%s\".runs "
            "WHERE id = convert_to($1, 'UTF8') AND num = "
            "currval('\"%s\".run_num')",
            n, n, n);
        break;
    }
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

/* Make the leases table and the fence function if they are not there. */
static int pg_lease_setup(pl__pg_store *s, PGconn *c)
{
    const char *n = s->schema;
    char *sql = pl__asprintf(
        "BEGIN;"
        "SELECT pg_advisory_xact_lock(hashtext('policyledger store %s'));"
        "CREATE TABLE IF NOT EXISTS \"%s\".leases (run bigint PRIMARY KEY, "
        "gen bigint NOT NULL, owner text NOT NULL, id text NOT NULL, "
        "expires bigint NOT NULL);"
        "CREATE INDEX IF NOT EXISTS leases_expires ON \"%s\".leases "
        "(expires);"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_fence(r bigint, g bigint, "
        "dropit boolean) RETURNS void LANGUAGE plpgsql AS $f$ "
        "DECLARE holder text; BEGIN "
        "PERFORM 1 FROM \"%s\".leases WHERE run = r AND gen = g FOR UPDATE; "
        "IF NOT FOUND THEN "
        "SELECT owner INTO holder FROM \"%s\".leases WHERE run = r; "
        "RAISE EXCEPTION 'run #%%: this worker''s lease (generation %%) was "
        "taken over by %%; nothing more is written', r, g, "
        "CASE WHEN holder IS NULL THEN 'nobody (it was dropped)' WHEN "
        "holder = '' THEN 'the queue' ELSE holder END "
        "USING ERRCODE = '" FENCE_STATE "'; END IF; "
        "IF dropit THEN DELETE FROM \"%s\".leases WHERE run = r; END IF; "
        "END $f$;"
        "COMMIT",
        n, n, n, n, n, n, n);
    if (!sql)
        return pl__err(PL_ENOMEM, "out of memory");
    int st = command(s, c, sql, "creating the leases table");
    free(sql);
    return st;
}

/* Run a lease statement with text parameters and text results. */
static int lease_exec(pl__pg_store *s, int which, int n,
                      const char *const *vals, PGresult **out, const char *what)
{
    *out = NULL;
    if (s->read_only && which != L_GET)
        return read_only(s);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    PGresult *r = PQexecParams(c, s->lq[which], n, NULL, vals, NULL, NULL, 0);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK) {
        st = pg_err(s, c, r, what);
        PQclear(r);
        r = NULL;
    }
    conn_put(s, c);
    *out = r;
    return st;
}

static bool parse_i64(const char *p, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p || *end)
        return false;
    *out = v;
    return true;
}

/* Row @p i of (run, gen, expires_in, owner, id) into @p out. */
static int lease_row(const pl__pg_store *s, PGresult *r, int i, pl__lease *out)
{
    int64_t run, gen, in;
    const char *owner = PQgetvalue(r, i, 3), *id = PQgetvalue(r, i, 4);
    if (PQnfields(r) != 5 || !parse_i64(PQgetvalue(r, i, 0), &run) ||
        !parse_i64(PQgetvalue(r, i, 1), &gen) ||
        !parse_i64(PQgetvalue(r, i, 2), &in) ||
        strlen(owner) >= sizeof out->owner || strlen(id) >= sizeof out->id)
        return pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                       s->path);
    out->run = (uint64_t)run;
    out->gen = (uint64_t)gen;
    out->expires_in_us = in;
    snprintf(out->owner, sizeof out->owner, "%s", owner);
    snprintf(out->id, sizeof out->id, "%s", id);
    return PL_OK;
}

int pl__pg_lease_get(pl__pg_store *s, uint64_t run, pl__lease *out)
{
    char a[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    const char *vals[1] = {a};
    PGresult *r;
    int st = lease_exec(s, L_GET, 1, vals, &r, "reading a lease");
    if (!st && PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "run #%llu holds no lease",
                     (unsigned long long)run);
    else if (!st)
        st = lease_row(s, r, 0, out);
    PQclear(r);
    return st;
}

int pl__pg_lease_acquire(pl__pg_store *s, uint64_t run, const char *run_id,
                         const char *owner, int64_t lease_us,
                         uint64_t steal_gen, uint64_t *gen, bool *had,
                         pl__lease *held)
{
    char a[24], d[24], g[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    snprintf(g, sizeof g, "%llu", (unsigned long long)steal_gen);
    const char *vals[5] = {a, owner, run_id, d, g};
    PGresult *r;
    int st = lease_exec(s, L_ACQUIRE, 5, vals, &r, "taking a lease");
    if (st)
        return st;
    int64_t v = 0, x = 0;
    if (PQntuples(r) == 1) {
        if (!parse_i64(PQgetvalue(r, 0, 0), &v) ||
            !parse_i64(PQgetvalue(r, 0, 1), &x))
            st = pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                         s->path);
        *gen = (uint64_t)v;
        *had = x != 0;
        PQclear(r);
        return st;
    }
    PQclear(r);
    /* held by another: say by whom (it may have gone meanwhile) */
    st = pl__pg_lease_get(s, run, held);
    if (st == PL_ENOTFOUND)
        snprintf(held->owner, sizeof held->owner, "another worker");
    return pl__err(PL_EBUSY, "run #%llu is leased to %s",
                   (unsigned long long)run, held->owner);
}

int pl__pg_lease_next(pl__pg_store *s, const char *owner, int64_t lease_us,
                      pl__lease *out)
{
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    const char *vals[2] = {owner, d};
    PGresult *r;
    int st = lease_exec(s, L_NEXT, 2, vals, &r, "taking a queued run");
    if (st)
        return st;
    st = PQntuples(r) == 0 ? PL_ENOTFOUND : lease_row(s, r, 0, out);
    PQclear(r);
    return st;
}

/* Append "{a,b,...}" of @p n numbers to @p b, NUL-terminated. */
static int int_array(pl__buf *b, const uint64_t *v, size_t n)
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

int pl__pg_lease_renew(pl__pg_store *s, const uint64_t *runs,
                       const uint64_t *gens, size_t n, int64_t lease_us,
                       bool *lost)
{
    if (!n)
        return PL_OK;
    pl__buf ra = {0}, ga = {0};
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    int st = int_array(&ra, runs, n);
    if (!st)
        st = int_array(&ga, gens, n);
    PGresult *r = NULL;
    if (!st) {
        const char *vals[3] = {(const char *)ra.data, (const char *)ga.data, d};
        st = lease_exec(s, L_RENEW, 3, vals, &r, "renewing leases");
    }
    /* the rows returned are the leases no longer held */
    for (size_t i = 0; !st && i < n; i++) {
        lost[i] = false;
        for (int j = 0; j < PQntuples(r); j++) {
            int64_t v;
            if (parse_i64(PQgetvalue(r, j, 0), &v) && (uint64_t)v == runs[i])
                lost[i] = true;
        }
    }
    PQclear(r);
    pl__buf_free(&ra);
    pl__buf_free(&ga);
    return st;
}

int pl__pg_lease_release(pl__pg_store *s, uint64_t run, uint64_t gen)
{
    char a[24], g[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    snprintf(g, sizeof g, "%llu", (unsigned long long)gen);
    const char *vals[2] = {a, g};
    PGresult *r;
    int st = lease_exec(s, L_RELEASE, 2, vals, &r, "dropping a lease");
    PQclear(r);
    return st;
}

/*
 * A commit's lease statements for batch @p bt, sent in its pipeline: the
 * lease of a run it creates (after the creation), or the fence of its
 * generation (which also drops the lease of a finished execution).
 * *sent_fence says whether a fence was sent; nothing sent is not an error.
 */
static int pg_lease_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                         bool *sent_any)
{
    *sent_any = false;
    if (!(bt->create_id && bt->lease_owner) && !bt->gen)
        return PL_OK;
    int which = bt->gen ? L_FENCE : L_CREATE;
    int st = PL_OK;
    char a[24], b[24];
    const char *vals[3];
    if (which == L_FENCE) {
        snprintf(a, sizeof a, "%llu", (unsigned long long)bt->run);
        snprintf(b, sizeof b, "%llu", (unsigned long long)bt->gen);
        vals[0] = a;
        vals[1] = b;
        vals[2] = bt->release ? "true" : "false";
    } else {
        snprintf(a, sizeof a, "%lld", (long long)bt->lease_us);
        vals[0] = bt->create_id;
        vals[1] = bt->lease_owner;
        vals[2] = a;
    }
    if (!PQsendQueryParams(c, s->lq[which], 3, NULL, vals, NULL, NULL, 0))
        st = pg_err(s, c, NULL, "sending a lease");
    else
        *sent_any = true;
    return st;
}

/* The status of a failed lease statement of a commit. */
static int pg_lease_failed(pl__pg_store *s, PGconn *c, const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!code || strcmp(code, FENCE_STATE) != 0)
        return pg_err(s, c, r, "committing");
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    return pl__err(PL_EBUSY, "%s",
                   m ? m
                     : "this worker's lease was taken "
                       "over");
}

/* ---- timers and inboxes -------------------------------------------------- */

/*
 * TIMERS and INBOXES (store.h) on PostgreSQL: two more tables in the
 * store's schema, made on every writable open (an older store gains them).
 *
 *   | timers | run bigint PK, due bigint (Unix us, indexed), id text,   |
 *   |        | rec bytea (the timer record, runrec.c)                   |
 *   | inbox  | run bigint, seq bigint, rec bytea (the inbox record);    |
 *   |        | PK (run, seq)                                            |
 *
 * A take is one statement: the earliest due timer whose run holds no live
 * lease, locked with FOR UPDATE SKIP LOCKED, deleted, and the run's lease
 * taken for the worker, so two workers never take the same timer and
 * neither waits for the other.  A delivery locks the run's state row (as a
 * claim does) and then writes, so it never slips between a run's look at
 * its inbox and its parking: the parking commit, which writes the state,
 * waits for it and keeps the earlier due time it set.  A consumption is
 * a DELETE in the consuming commit's transaction that fails the whole
 * commit (a division by zero) when the record is gone.
 *
 * Due times are written on the writing host's clock (a wake time from the
 * recorded clock, a delivery's "now") and compared with the server's: a
 * host whose clock runs ahead of the server's has its wakes that much late.
 */
static int time_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    switch (which) {
    case T_SET:
        *out = pl__asprintf(
            "INSERT INTO \"%s\".timers AS t (run, due, id, rec) VALUES "
            "($1::bigint, $2::bigint, $3, $4::bytea) ON CONFLICT (run) DO "
            "UPDATE SET due = excluded.due, id = excluded.id, rec = "
            "excluded.rec WHERE excluded.due < t.due",
            n);
        break;
    case T_TAKE:
        *out = pl__asprintf(
            "WITH t AS (SELECT tm.run, tm.due, tm.id, tm.rec FROM \"%s\".timers "
            "tm WHERE tm.due <= " NOW_US " AND NOT EXISTS (SELECT 1 FROM "
            "\"%s\".leases l WHERE l.run = tm.run AND l.expires > " NOW_US
            ") ORDER BY tm.due, tm.run LIMIT 1 FOR UPDATE OF tm SKIP LOCKED), "
            "d AS (DELETE FROM \"%s\".timers x USING t WHERE x.run = t.run "
            "RETURNING t.run, t.due, t.id, t.rec), "
            "l AS (INSERT INTO \"%s\".leases AS y (run, gen, owner, id, "
            "expires) SELECT run, 1, $1, id, " NOW_US " + $2::bigint FROM d "
            "ON CONFLICT (run) DO UPDATE SET gen = y.gen + 1, owner = "
            "excluded.owner, id = excluded.id, expires = excluded.expires "
            "RETURNING y.run, y.gen) "
            "SELECT d.run, l.gen, d.due, d.rec FROM d JOIN l ON l.run = d.run",
            n, n, n, n);
        break;
    case T_NEXT:
        *out = pl__asprintf("SELECT min(due) FROM \"%s\".timers", n);
        break;
    case T_GET:
        *out = pl__asprintf("SELECT due, rec FROM \"%s\".timers WHERE run = "
                            "$1::bigint",
                            n);
        break;
    case T_INBOX_DEL:
        *out = pl__asprintf(
            "WITH d AS (DELETE FROM \"%s\".inbox WHERE run = $1::bigint AND "
            "seq = $2::bigint RETURNING 1) SELECT 1 / (SELECT count(*) FROM "
            "d)::int",
            n);
        break;
    case T_INBOX_PUT:
        *out = pl__asprintf(
            "INSERT INTO \"%s\".inbox (run, seq, rec) SELECT $1::bigint, "
            "coalesce(max(seq), 0) + 1, $2::bytea FROM \"%s\".inbox WHERE "
            "run = $1::bigint RETURNING seq",
            n, n);
        break;
    default: /* T_INBOX_READ */
        *out = pl__asprintf("SELECT seq, rec FROM \"%s\".inbox WHERE run = "
                            "$1::bigint ORDER BY seq",
                            n);
        break;
    }
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

static int pg_time_setup(pl__pg_store *s, PGconn *c)
{
    const char *n = s->schema;
    char *sql = pl__asprintf(
        "BEGIN;"
        "SELECT pg_advisory_xact_lock(hashtext('policyledger store %s'));"
        "CREATE TABLE IF NOT EXISTS \"%s\".timers (run bigint PRIMARY KEY, "
        "due bigint NOT NULL, id text NOT NULL, rec bytea NOT NULL);"
        "CREATE INDEX IF NOT EXISTS timers_due ON \"%s\".timers (due);"
        "CREATE TABLE IF NOT EXISTS \"%s\".inbox (run bigint NOT NULL, "
        "seq bigint NOT NULL, rec bytea NOT NULL, PRIMARY KEY (run, seq));"
        "COMMIT",
        n, n, n, n);
    if (!sql)
        return pl__err(PL_ENOMEM, "out of memory");
    int st = command(s, c, sql, "creating the timers and inbox tables");
    free(sql);
    return st;
}

/* Send the timer statement of a batch into @p c (a pipeline or not), with
 * the text of its numbers in @p a, @p b. */
static int timer_send(pl__pg_store *s, PGconn *c, uint64_t run, const char *id,
                      int64_t due, pl__buf *rec)
{
    char a[24], b[24];
    int st = pl__timer_encode(rec, id, due);
    if (st)
        return st;
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    snprintf(b, sizeof b, "%lld", (long long)due);
    const char *vals[4] = {a, b, id, (const char *)rec->data};
    int lens[4] = {0, 0, 0, (int)rec->len}, fmts[4] = {0, 0, 0, 1};
    if (!PQsendQueryParams(c, s->tq[T_SET], 4, NULL, vals, lens, fmts, 0))
        return pg_err(s, c, NULL, "sending a timer");
    return PL_OK;
}

static int pg_time_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                        bool *timer, bool *inbox)
{
    *timer = *inbox = false;
    if (bt->timer_us) {
        pl__buf rec = {0};
        int st = timer_send(s, c, bt->run, bt->timer_id, bt->timer_us, &rec);
        pl__buf_free(&rec);
        if (st)
            return st;
        *timer = true;
    }
    if (bt->inbox_del) {
        char a[24], b[24];
        snprintf(a, sizeof a, "%llu", (unsigned long long)bt->run);
        snprintf(b, sizeof b, "%llu", (unsigned long long)bt->inbox_del);
        const char *vals[2] = {a, b};
        if (!PQsendQueryParams(c, s->tq[T_INBOX_DEL], 2, NULL, vals, NULL, NULL,
                               0))
            return pg_err(s, c, NULL, "sending an inbox consumption");
        *inbox = true;
    }
    return PL_OK;
}

/* Run a timer or inbox statement outside a pipeline. */
static int time_exec(pl__pg_store *s, PGconn *c, int which, int n,
                     const char *const *vals, const int *lens, const int *fmts,
                     PGresult **out, const char *what)
{
    PGresult *r = PQexecParams(c, s->tq[which], n, NULL, vals, lens, fmts, 0);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK) {
        int st = pg_err(s, c, r, what);
        PQclear(r);
        *out = NULL;
        return st;
    }
    *out = r;
    return PL_OK;
}

int pl__pg_timer_set(pl__pg_store *s, uint64_t run, const char *run_id,
                     int64_t due_us)
{
    if (s->read_only)
        return read_only(s);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    pl__buf rec = {0};
    st = pl__timer_encode(&rec, run_id, due_us);
    if (!st) {
        char a[24], b[24];
        snprintf(a, sizeof a, "%llu", (unsigned long long)run);
        snprintf(b, sizeof b, "%lld", (long long)due_us);
        const char *vals[4] = {a, b, run_id, (const char *)rec.data};
        int lens[4] = {0, 0, 0, (int)rec.len}, fmts[4] = {0, 0, 0, 1};
        PGresult *r;
        st = time_exec(s, c, T_SET, 4, vals, lens, fmts, &r, "setting a timer");
        PQclear(r);
    }
    pl__buf_free(&rec);
    conn_put(s, c);
    return st;
}

int pl__pg_timer_take(pl__pg_store *s, const char *owner, int64_t lease_us,
                      pl__lease *out, int64_t *next_due_us)
{
    *next_due_us = 0;
    if (s->read_only)
        return read_only(s);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    const char *vals[2] = {owner, d};
    PGresult *r;
    st = time_exec(s, c, T_TAKE, 2, vals, NULL, NULL, &r, "taking a timer");
    if (!st && PQntuples(r) == 0) {
        PQclear(r);
        st = time_exec(s, c, T_NEXT, 0, NULL, NULL, NULL, &r,
                       "reading the timers");
        int64_t due = 0;
        /* due times are written on the writers' clocks (TIMERS above) */
        if (!st && !PQgetisnull(r, 0, 0) &&
            parse_i64(PQgetvalue(r, 0, 0), &due))
            *next_due_us = due;
        if (!st)
            st = PL_ENOTFOUND;
    } else if (!st) {
        int64_t run, gen, due, tdue;
        char id[PL_MAX_RUN_ID + 1];
        unsigned char *rec = NULL;
        size_t rec_len = 0;
        if (!parse_i64(PQgetvalue(r, 0, 0), &run) ||
            !parse_i64(PQgetvalue(r, 0, 1), &gen) ||
            !parse_i64(PQgetvalue(r, 0, 2), &due) ||
            !(rec = PQunescapeBytea((const unsigned char *)PQgetvalue(r, 0, 3),
                                    &rec_len)) ||
            pl__timer_decode(&tdue, id, rec, rec_len) || tdue != due) {
            st = pl__err(PL_ECORRUPT,
                         "store '%s': the timer of run #%s is malformed or "
                         "does not match its checksum",
                         s->path, PQgetvalue(r, 0, 0));
        } else {
            out->run = (uint64_t)run;
            out->gen = (uint64_t)gen;
            out->expires_in_us = lease_us;
            snprintf(out->owner, sizeof out->owner, "%s", owner);
            snprintf(out->id, sizeof out->id, "%s", id);
        }
        PQfreemem(rec);
    }
    PQclear(r);
    conn_put(s, c);
    return st;
}

int pl__pg_timer_get(pl__pg_store *s, uint64_t run, int64_t *due_us)
{
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    char a[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    const char *vals[1] = {a};
    PGresult *r;
    st = time_exec(s, c, T_GET, 1, vals, NULL, NULL, &r, "reading a timer");
    if (!st && PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "run #%llu has no timer",
                     (unsigned long long)run);
    else if (!st && !parse_i64(PQgetvalue(r, 0, 0), due_us))
        st = pl__err(PL_ECORRUPT, "store '%s': a timer is malformed", s->path);
    PQclear(r);
    conn_put(s, c);
    return st;
}

int pl__pg_inbox_put(pl__pg_store *s, uint64_t run, const char *run_id,
                     pl__inbox_check_fn check, void *user, const uint8_t *rec,
                     size_t len, uint64_t *seq)
{
    if (s->read_only)
        return read_only(s);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    st = command(s, c, "BEGIN", "beginning a transaction");
    PGresult *r = NULL;
    if (!st) {
        uint8_t key[8];
        pl__put_be64(key, run);
        const char *vals[1] = {(const char *)key};
        int lens[1] = {8};
        r = exec(c, s->q[Q_STATE_LOCK], 1, vals, lens);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            st = pg_err(s, c, r, "reading a run state");
        else if (PQntuples(r) == 0)
            st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                         (unsigned long long)run);
        else
            st = check((const uint8_t *)PQgetvalue(r, 0, 0),
                       (size_t)PQgetlength(r, 0, 0), user);
        PQclear(r);
        r = NULL;
    }
    if (!st) {
        char a[24];
        snprintf(a, sizeof a, "%llu", (unsigned long long)run);
        const char *vals[2] = {a, (const char *)rec};
        int lens[2] = {0, (int)len}, fmts[2] = {0, 1};
        int64_t v;
        st = time_exec(s, c, T_INBOX_PUT, 2, vals, lens, fmts, &r,
                       "delivering to an inbox");
        if (!st && (PQntuples(r) != 1 || !parse_i64(PQgetvalue(r, 0, 0), &v)))
            st = pl__err(PL_ECORRUPT, "store '%s': an inbox seq is malformed",
                         s->path);
        else if (!st)
            *seq = (uint64_t)v;
        PQclear(r);
    }
    if (!st) {
        /* due now, on this host's clock: a wake is asked for */
        pl__buf tr = {0};
        st = timer_send(s, c, run, run_id, pl__now_us(), &tr);
        pl__buf_free(&tr);
        if (!st) {
            r = PQgetResult(c);
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                st = pg_err(s, c, r, "setting a timer");
            PQclear(r);
            while ((r = PQgetResult(c)))
                PQclear(r);
        }
    }
    if (!st)
        st = command(s, c, "COMMIT", "committing");
    else if (!lost(c)) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        if (command(s, c, "ROLLBACK", "rolling back")) {
            PQfinish(c);
            c = NULL;
        }
        pl__errmsg_restore(saved);
    }
    conn_put(s, c);
    return st;
}

int pl__pg_inbox_read(pl__pg_store *s, uint64_t run, pl__kvs *out)
{
    pl__kvs_reset(out);
    PGconn *c;
    int st = conn_get(s, &c);
    if (st)
        return st;
    char a[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    const char *vals[1] = {a};
    PGresult *r;
    st = time_exec(s, c, T_INBOX_READ, 1, vals, NULL, NULL, &r,
                   "reading an inbox");
    for (int i = 0; !st && i < PQntuples(r); i++) {
        int64_t seq;
        size_t n = 0;
        unsigned char *rec = PQunescapeBytea((const unsigned char *)
                                                 PQgetvalue(r, i, 1),
                                             &n);
        uint8_t key[8];
        if (!rec || !parse_i64(PQgetvalue(r, i, 0), &seq))
            st = pl__err(rec ? PL_ECORRUPT : PL_ENOMEM,
                         "store '%s': reading an inbox record", s->path);
        else {
            pl__put_be64(key, (uint64_t)seq);
            st = pl__kvs_add(out, key, 8, rec, n);
        }
        PQfreemem(rec);
    }
    PQclear(r);
    conn_put(s, c);
    return st;
}
