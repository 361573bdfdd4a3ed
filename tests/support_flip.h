/*
 * support_flip.h -- what the tests that damage a store and then drive it
 * share (test_pg_queueflip.c, test_pg_liveflip.c, test_pg_rideflip.c): a
 * policy that counts its effects in a file and the count, a file read
 * whole, a forked child waited for with a bound, and an LMDB store's
 * record damaged through LMDB, as a damaged disk would hand it over.
 */
#ifndef PL_SUPPORT_FLIP_H
#define PL_SUPPORT_FLIP_H

#include "support.h"

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* "eff": appends its payload's "k" as a line to the file @p user names
 * (a char *); returns {"k": k}. */
int t_flip_eff(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user);
/* Append the line @p k to the file @p path: PL_OK or PL_EIO. */
int t_flip_count(const char *path, const char *k);
/* How many lines of the file @p path are @p k (none: 0). */
int t_flip_counted(const char *path, const char *k);
/* The file @p path, at most 4,096 bytes of it (the test fails on a
 * longer one); the caller frees. */
char *t_flip_slurp(const char *path, size_t *len);
/* Wait for the child @p kid, @p ms at most (then it is killed and the
 * test fails, as when a signal ended it): its exit status.  @p what names
 * the child in the messages. */
int t_flip_wait(pid_t kid, int ms, const char *what);
/* pl_run_submit() of @p policy as run @p id, its payload {"id": id},
 * with @p priority and, with @p key, that concurrency key (limit 1). */
void t_flip_submit(pl_engine *e, const char *id, const char *policy,
                   int priority, const char *key);
/* Write the file @p path, @p len bytes of @p data. */
void t_flip_put(const char *path, const char *data, size_t len);

/*
 * A worker drains a store in a forked child: pl_worker_run() with
 * @p concurrency threads, polling every 10 ms, its lease of @p lease_ms
 * renewed every third of it (t_flip_drain(): T_FLIP_DRAIN_LEASE_MS, so
 * that a stall of a loaded host's does not lose it and make a call in
 * flight again; the tests of leases taken over give T_FLIP_LEASE_MS,
 * 150 ms renewed every 50 ms), waits never in place, stopped once nothing
 * happened for
 * @p idle_ms (an event of the engine's, or t_flip_alive() in the child)
 * or T_FLIP_BOUND_MS after its first event.  Before its first event the
 * bound is @p start_ms: a loaded host's worker may take longer than an
 * idle spell to open the store and take a run, and a test that needs the
 * runs taken gives it more.  t_flip_drain_start() gives the child's pid,
 * t_flip_drain_end() its exit status (30 s at most), one of T_DRAIN_*;
 * t_flip_drain() both (@p start_ms = @p idle_ms).
 */
#define T_FLIP_BOUND_MS 10000
#define T_FLIP_LEASE_MS 150
#define T_FLIP_DRAIN_LEASE_MS 3000
enum {
    T_DRAIN_OK = 0,       /* drained, stopped */
    T_DRAIN_OPEN = 10,    /* the engine or worker could not start */
    T_DRAIN_REFUSED = 11, /* the open said PL_ECORRUPT or PL_EVERSION */
    T_DRAIN_BUSY = 12,    /* still busy after T_FLIP_BOUND_MS */
    T_DRAIN_RUN = 13      /* pl_worker_run() failed */
};
pid_t t_flip_drain_start(const char *path, const pl_registry *reg, int idle_ms,
                         int start_ms, unsigned concurrency, unsigned lease_ms);
int t_flip_drain_end(pid_t kid);
int t_flip_drain(const char *path, const pl_registry *reg, int idle_ms,
                 unsigned concurrency);
/* In a drain's child: something happened (the drain is not idle). */
void t_flip_alive(void);

/* LMDB: the store at @p path opened, a transaction of @p flags begun in
 * *@p txn and its database @p db in *@p dbi (the test fails on an error);
 * close with mdb_txn_abort() or commit, then mdb_env_close(). */
MDB_env *t_flip_lmdb_open(const char *path, const char *db, unsigned flags,
                          MDB_txn **txn, MDB_dbi *dbi);
/* LMDB: the value of @p key in the database @p db of the store at @p path
 * (the test fails if it has none): its size, and its first @p cap bytes
 * in @p out (NULL: none). */
size_t t_flip_lmdb_get(const char *path, const char *db, const uint8_t *key,
                       size_t klen, uint8_t *out, size_t cap);
/* LMDB: bit @p bit of that record's value flipped (wrapped round its
 * size), or with @p in_key of its key (the record moved there), written
 * back through LMDB: the store may be open in another process. */
void t_flip_lmdb(const char *path, const char *db, const uint8_t *key,
                 size_t klen, size_t bit, bool in_key);

#endif
