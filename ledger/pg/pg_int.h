/*
 * pg_int.h -- what the files of the PostgreSQL store share: the store's
 * struct, its statements, and the helpers for errors and connections.
 *
 *   | file         | its job                                            |
 *   |--------------|----------------------------------------------------|
 *   | pg_conn.c    | errors, the connection pool, the URI, open/close   |
 *   |              | and the schema                                     |
 *   | pg_commit.c  | writing: commits and read-modify-write of a state  |
 *   | pg_read.c    | reading: ledgers, runs, states, statistics         |
 *   | pg_lease.c   | leases and the queue                               |
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
#include <sys/types.h>

#define FORMAT 1
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

struct pl__pg_store {
    char *path;     /* as given, for messages */
    char *conninfo; /* the URI without schema= */
    char *schema;
    char *q[Q_N];    /* the statements, naming the schema */
    char *lq[L_N];   /* the lease statements, likewise */
    char *steps_sql; /* "INSERT INTO schema.steps (k, v) VALUES" */
    bool nosync;
    bool read_only; /* every write fails with PL_ESTATE */
    pthread_mutex_t mu;
    pid_t pid; /* the process the idle connections belong to */
    PGconn *idle[IDLE_MAX];
    size_t n_idle;
};

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

/* ---- connections (pg_conn.c) --------------------------------------------- */

/* Take an idle connection, or open one. */
PL__HIDDEN int pl__pg_conn_get(pl__pg_store *s, PGconn **out) PL__MUST_CHECK;
/* Give a connection back: kept if it is sound and outside a transaction. */
PL__HIDDEN void pl__pg_conn_put(pl__pg_store *s, PGconn *c);
/* Run one statement with binary parameters and results. */
PL__HIDDEN PGresult *pl__pg_exec(PGconn *c, const char *sql, int n,
                                 const char *const *vals, const int *lens);
/* Run a statement without parameters that returns no rows. */
PL__HIDDEN int pl__pg_command(pl__pg_store *s, PGconn *c, const char *sql,
                              const char *what);

/* ---- leases (pg_lease.c) ------------------------------------------------- */

/* Format lease statement @p which (L_*) for the store's schema. */
PL__HIDDEN int pl__pg_lease_sql(const pl__pg_store *s, int which, char **out);
/* Make the leases table and the fence function if they are not there. */
PL__HIDDEN int pl__pg_lease_setup(pl__pg_store *s, PGconn *c);
/* Send batch @p bt's lease statement in a commit's pipeline, if it has one:
 * *sent_any says whether it did. */
PL__HIDDEN int pl__pg_lease_send(pl__pg_store *s, PGconn *c,
                                 const pl__batch *bt, bool *sent_any);
/* The status of a commit's failed lease statement. */
PL__HIDDEN int pl__pg_lease_failed(pl__pg_store *s, PGconn *c,
                                   const PGresult *r);

#endif /* PL_PG_INT_H */
