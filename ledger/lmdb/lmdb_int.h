/*
 * lmdb_int.h -- what the files of the LMDB store share: the store itself,
 * its transactions and its error mapping (lmdb_env.c), putting a step in
 * its place (lmdb_store.c) and appending to the journal (lmdb_journal.c).
 * Nothing outside them includes this.
 */
#ifndef PL_LMDB_INT_H
#define PL_LMDB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include <lmdb.h>

#include "lmdb_store.h"

struct pl__lmdb_store {
    MDB_env *env;
    MDB_dbi meta, runs, state, steps, journal;
    MDB_dbi writers, held;    /* the journal's writer per run; runs stopped */
    bool has_held;            /* both exist (a read-only open of an older
                              store may lack them) */
    uint8_t writer[16];       /* this process: pid, start time (u64 BE each) */
    pthread_rwlock_t resize;  /* shared: any txn; exclusive: set_mapsize */
    atomic_bool journal_full; /* the journal is due to be moved */
    size_t map_size;
    size_t map_size_max;
    dev_t dev;
    ino_t ino;
    char *path;
    /* the zeroed tail (TAIL, lmdb_env.c), touched under LMDB's writer lock only */
    bool tail;      /* keep one: the store syncs and writing it works */
    int fd;         /* the data file, opened apart from LMDB's own */
    off_t psize;    /* LMDB's page size */
    off_t file_end; /* the file's size when last seen */
    bool read_only; /* opened with MDB_RDONLY: no write transaction */

    /* run leases (lmdb_lease.c): open unless read-only on an older store */
    MDB_dbi leases;
    bool has_leases;

    /* schedules (lmdb_sched.c): the same */
    MDB_dbi schedules;
    bool has_schedules;
    /* deleted runs (lmdb_delete.c): tombstones and steps to remove; open
     * unless read-only on an older store */
    MDB_dbi tombs, purge;
    bool has_tombs;
    /* timers and inboxes (lmdb_time.c): open unless read-only on an older
     * store */
    MDB_dbi timers, due, inbox;
    bool has_time;
    /* the queue's order, keys and rate budgets (lmdb_flow.c): open unless
     * read-only on an older store */
    MDB_dbi flow;
    bool has_flow;
    /* the map's bounds (lmdb_bounds.c): the file's offset 0 in it, its
     * end; 0 while unknown.  Changed under the resize lock held alone. */
    uintptr_t map_lo, map_hi;
};

/* ---- lmdb_ident.c ---------------------------------------------------------- */

/* What an environment holds (see lmdb_ident.c). */
typedef enum pl__lmdb_kind {
    PL__LMDB_EMPTY,     /* nothing: a new environment */
    PL__LMDB_STORE,     /* a store, with its identity */
    PL__LMDB_OLD_STORE, /* a store made before the identity was written */
    PL__LMDB_FOREIGN    /* another program's */
} pl__lmdb_kind;

/* The value of the `identity` record in a store's `meta` database. */
PL__HIDDEN extern const char pl__lmdb_identity[];

/* Refuse a data file LMDB must not map: not LMDB, damaged meta pages, or
 * shorter than its last page.  PL_OK for a missing or empty file. */
PL__HIDDEN int pl__lmdb_check_file(const char *path,
                                   const char *file) PL__MUST_CHECK;

/* What the environment of @p txn holds; an LMDB code. */
PL__HIDDEN int pl__lmdb_identify(MDB_txn *txn, pl__lmdb_kind *kind);

/* PL_ECORRUPT for another program's environment, PL_ENOTFOUND for an
 * empty one when @p must_exist; else PL_OK. */
PL__HIDDEN int pl__lmdb_refuse_kind(const char *path, pl__lmdb_kind kind,
                                    bool must_exist);

/* Identify the environment at @p path without its lock file (for one that
 * has none: no process has it open), creating nothing; then as
 * pl__lmdb_refuse_kind(). */
PL__HIDDEN int pl__lmdb_probe(const char *path, bool dir,
                              bool must_exist) PL__MUST_CHECK;

/* ---- lmdb_bounds.c ------------------------------------------------------- */

/* mdb_get() and mdb_cursor_get(), but MDB_CORRUPTED for a key or value
 * that runs past the data file (a damaged size): the store reads through
 * these alone. */
PL__HIDDEN int pl__lmdb_get(pl__lmdb_store *s, MDB_txn *txn, MDB_dbi dbi,
                            MDB_val *k, MDB_val *v);
PL__HIDDEN int pl__lmdb_cursor_get(pl__lmdb_store *s, MDB_cursor *c, MDB_val *k,
                                   MDB_val *v, MDB_cursor_op op);
/* Learn where the map is, at open and after each resize, with the resize
 * lock held alone (or no other thread yet). */
PL__HIDDEN void pl__lmdb_map_learn(pl__lmdb_store *s);

/* ---- lmdb_env.c ---------------------------------------------------------- */

/* Set a message for LMDB's code @p rc met doing @p what, and return the
 * status it maps to: LMDB's codes are mapped here only. */
PL__HIDDEN int pl__lmdb_err(const pl__lmdb_store *s, int rc, const char *what);

/*
 * Begin a transaction holding the resize lock shared.  On success the caller
 * must end it with pl__lmdb_txn_abort() (a read), or it is a write that
 * pl__lmdb_write() runs.  *map_seen is the map size it began with.
 */
PL__HIDDEN int pl__lmdb_txn_begin(pl__lmdb_store *s, bool write, MDB_txn **txn,
                                  size_t *map_seen) PL__MUST_CHECK;
PL__HIDDEN void pl__lmdb_txn_abort(pl__lmdb_store *s, MDB_txn *txn);

/*
 * Run @p body in a write transaction, retrying after growing the map when it
 * fills.  body returns an LMDB code (0 = commit) or, with *st set, a status.
 */
typedef int (*write_body)(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st);
PL__HIDDEN int pl__lmdb_write(pl__lmdb_store *s, write_body body,
                              void *user) PL__MUST_CHECK;

/* ---- lmdb_store.c -------------------------------------------------------- */

/* A commit: its batches, and whether their steps go to the journal. */
typedef struct commit_ctx {
    pl__batch *const *batches;
    size_t n;
    bool journal;
    bool look; /* answer each batch's inbox_known (store.h) */
} commit_ctx;

/* Write batch @p bt in @p txn, as a commit without the journal does. */
PL__HIDDEN int pl__lmdb_commit_in(pl__lmdb_store *s, MDB_txn *txn,
                                  pl__batch *bt, int *st);

/* Put one step in its place, refusing to change an existing one. */
PL__HIDDEN int pl__lmdb_put_step(pl__lmdb_store *s, MDB_txn *txn, MDB_val *k,
                                 const MDB_val *v, bool *append, uint64_t run,
                                 int *st);

/* ---- lmdb_journal.c ------------------------------------------------------ */

/* Append the steps of the batches of @p c to the journal as one record,
 * and note when the journal is due to be moved.  A step that could not be
 * moved into place later (see CONFLICTS in lmdb_journal.c) sets *st. */
PL__HIDDEN int pl__lmdb_journal_append(pl__lmdb_store *s, MDB_txn *txn,
                                       const commit_ctx *c, int *st);
/* May this process write steps of run @p run in place?  Not when the
 * run's steps are held apart, or another process has some in the journal
 * (*st set, PL_EBUSY). */
PL__HIDDEN int pl__lmdb_may_write(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                                  int *st);
/* Is run @p run stopped, its conflicting steps held apart?  Sets *st
 * (PL_EBUSY, naming the run) when it is. */
PL__HIDDEN int pl__lmdb_held(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                             int *st);

/* ---- lmdb_lease.c -------------------------------------------------------- */

/* Open the `leases` database in the store's opening transaction, creating
 * it when @p create; read-only, a store without one has no leases. */
PL__HIDDEN int pl__lmdb_lease_open(pl__lmdb_store *s, MDB_txn *txn,
                                   bool create);

/* A commit's lease work for batch @p bt, in its transaction: the lease of
 * a run it creates, the fence check of its generation, the drop of a
 * finished execution's lease.  An LMDB code, or *st set. */
PL__HIDDEN int pl__lmdb_lease_batch(pl__lmdb_store *s, MDB_txn *txn,
                                    const pl__batch *bt, int *st);

/* The lease of run @p run, which is being deleted, and its place in the
 * queue: dropped, unless a live holder executes it (*busy). */
PL__HIDDEN int pl__lmdb_lease_drop(pl__lmdb_store *s, MDB_txn *txn,
                                   uint64_t run, bool *busy, int *st);
/* Run @p run's lease in @p txn (MDB_NOTFOUND: none; *st: malformed). */
PL__HIDDEN int pl__lmdb_lease_peek(pl__lmdb_store *s, MDB_txn *txn,
                                   uint64_t run, pl__lease *out, int *st);
/* Take run @p run's lease for @p owner in @p txn, whoever held it (the
 * caller checked), with the next generation; the new lease in @p out. */
PL__HIDDEN int pl__lmdb_lease_take(pl__lmdb_store *s, MDB_txn *txn,
                                   uint64_t run, const char *run_id,
                                   const char *owner, int64_t lease_us,
                                   pl__lease *out, int *st);

/* ---- lmdb_sched.c -------------------------------------------------------- */

/* Open the `schedules` database, as pl__lmdb_lease_open() the leases. */
PL__HIDDEN int pl__lmdb_sched_open(pl__lmdb_store *s, MDB_txn *txn,
                                   bool create);

/* A commit's schedule write for batch @p bt, in its transaction (an LMDB
 * code; *st PL_ELIMIT: a new schedule past PL__SCHED_MAX). */
PL__HIDDEN int pl__lmdb_sched_batch(pl__lmdb_store *s, MDB_txn *txn,
                                    const pl__batch *bt, int *st);

/* ---- lmdb_delete.c ------------------------------------------------------- */

/* Open the `tombs` and `purge` databases in the opening transaction. */
PL__HIDDEN int pl__lmdb_tombs_open(pl__lmdb_store *s, MDB_txn *txn,
                                   bool create);

/* May a new run take id @p id?  Not while an unexpired tombstone keeps it
 * (*taken); an expired one is removed. */
PL__HIDDEN int pl__lmdb_tomb_taken(pl__lmdb_store *s, MDB_txn *txn,
                                   const char *id, bool *taken, int *st);

/* ---- lmdb_time.c --------------------------------------------------------- */

/* Open the timers, their index and the inboxes in the store's opening
 * transaction, creating them when @p create. */
PL__HIDDEN int pl__lmdb_time_open(pl__lmdb_store *s, MDB_txn *txn, bool create);
/* A commit's timer and inbox work for batch @p bt, in its transaction. */
PL__HIDDEN int pl__lmdb_time_batch(pl__lmdb_store *s, MDB_txn *txn,
                                   const pl__batch *bt, int *st);
/* Whether run @p run's inbox holds no record, as @p txn sees it. */
PL__HIDDEN int pl__lmdb_inbox_empty(pl__lmdb_store *s, MDB_txn *txn,
                                    uint64_t run, bool *empty);
/* What a run's lease is, for the queue (lmdb_flow.c). */
typedef enum pl__lease_state {
    PL__LEASE_NONE,   /* the run has none */
    PL__LEASE_LIVE,   /* held and not expired */
    PL__LEASE_EXPIRED /* queued, or its holder stopped renewing it */
} pl__lease_state;
PL__HIDDEN int pl__lmdb_lease_state(pl__lmdb_store *s, MDB_txn *txn,
                                    uint64_t run, pl__lease_state *out,
                                    int *st);

/* ---- lmdb_flow.c ----------------------------------------------------------- */

/* Open the `flow` database in the opening transaction, creating it when
 * @p create (and then indexing the leases of an older store). */
PL__HIDDEN int pl__lmdb_flow_open(pl__lmdb_store *s, MDB_txn *txn, bool create);
/* Record run @p run's flow, made with its lease. */
PL__HIDDEN int pl__lmdb_flow_add(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                                 const pl__flow *f, int *st);
/* Drop run @p run's flow, with its lease (none: nothing). */
PL__HIDDEN int pl__lmdb_flow_drop(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                                  int *st);
/* Run @p from's flow, for the successor of a run continued as new and
 * the new run of a fork or an upgrade: *has false when it has none. */
PL__HIDDEN int pl__lmdb_flow_pass(pl__lmdb_store *s, MDB_txn *txn,
                                  uint64_t from, pl__flow *out, bool *has,
                                  int *st);
/* Whether run @p run has a flow record. */
PL__HIDDEN bool pl__lmdb_flow_has(pl__lmdb_store *s, MDB_txn *txn,
                                  uint64_t run);
/* Whether run @p run counts under a concurrency key. */
PL__HIDDEN bool pl__lmdb_flow_keyed(pl__lmdb_store *s, MDB_txn *txn,
                                    uint64_t run);
/* Run @p run parks: its lease goes; a run with a key keeps its flow record
 * (its key and limit) for its wake, without a place in the queue. */
PL__HIDDEN int pl__lmdb_flow_park(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                                  int *st);
/* Whether run @p run, parked, may be woken now: its key, if it has one,
 * has fewer than its limit of live leases. */
PL__HIDDEN int pl__lmdb_flow_room(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                                  bool *room, int *st);
/* Whether run @p run, due to wake, is not behind a run of its key in the
 * queue: a run queued with a key (its lease ran out, or it never ran, and
 * a delivery made its timer due) is woken only as the first of its key's
 * queue, in the queue's order (rank, then run), as a take would take it. */
PL__HIDDEN int pl__lmdb_flow_first(pl__lmdb_store *s, MDB_txn *txn,
                                   uint64_t run, bool *first, int *st);
/* A lease made now for run @p run, which had none: its place in the queue,
 * a parked run's kept record again. */
PL__HIDDEN int pl__lmdb_flow_made(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                                  int *st);
/* Run @p run's flow record and its entries dropped, whatever the record
 * holds: found by the run's number (a damaged record's; lmdb_flow.c,
 * DAMAGE). */
PL__HIDDEN int pl__lmdb_flow_purge(pl__lmdb_store *s, MDB_txn *txn,
                                   uint64_t run);
/* The run a worker may take now, in the queue's order (FLOW in store.h):
 * *out = 0 when none.  A run whose flow record is damaged is taken in its
 * place with *damaged: it is not executed but failed (lmdb_flow.c). */
PL__HIDDEN int pl__lmdb_flow_pick(pl__lmdb_store *s, MDB_txn *txn,
                                  uint64_t *out, bool *damaged, int *st);

#endif /* PL_LMDB_INT_H */
