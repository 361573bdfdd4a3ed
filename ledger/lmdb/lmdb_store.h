/*
 * lmdb_store.h -- the store on LMDB (lmdb_env.c, lmdb_store.c,
 * lmdb_journal.c): the functions of store.h for a store named by a path.
 * store.c chooses between it and the PostgreSQL store; nothing else
 * includes this.
 */
#ifndef PL_LMDB_STORE_H
#define PL_LMDB_STORE_H

#include "store.h"

typedef struct pl__lmdb_store pl__lmdb_store;

PL__HIDDEN int pl__lmdb_open(pl__lmdb_store **out, const char *path,
                             const pl__store_options *opts) PL__MUST_CHECK;
PL__HIDDEN void pl__lmdb_close(pl__lmdb_store *s);
PL__HIDDEN const char *pl__lmdb_path(const pl__lmdb_store *s);
PL__HIDDEN int pl__lmdb_commit(pl__lmdb_store *s, pl__batch *const *batches,
                               size_t n, bool journal) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_settle(pl__lmdb_store *s) PL__MUST_CHECK;
PL__HIDDEN void pl__lmdb_maintain(pl__lmdb_store *s);
PL__HIDDEN int pl__lmdb_read(pl__lmdb_store *s, const uint8_t *prefix,
                             size_t prefix_len, uint32_t from_seq, size_t max_n,
                             size_t max_bytes, pl__kvs *out) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_scan(pl__lmdb_store *s, uint64_t run,
                             const uint8_t *after, size_t after_len,
                             size_t max_n, size_t max_bytes,
                             pl__kvs *out) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_each_step(pl__lmdb_store *s, uint64_t run,
                                  pl__step_fn fn, void *user) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_run_find(pl__lmdb_store *s, const char *id,
                                 uint64_t *num, pl__buf *info) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_state_get(pl__lmdb_store *s, uint64_t num,
                                  pl__buf *state) PL__MUST_CHECK;
/* A run's concurrency key as its wake would find it (store.h) */
PL__HIDDEN int pl__lmdb_key_now(pl__lmdb_store *s, uint64_t run, bool *keyed,
                                bool *room) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_state_update(pl__lmdb_store *s, uint64_t num,
                                     pl__state_fn fn,
                                     void *user) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_stats_get(pl__lmdb_store *s,
                                  pl__store_stats *out) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_mark(pl__lmdb_store *s, uint64_t *out) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_runs(pl__lmdb_store *s, const char *after, bool desc,
                             size_t max_n, pl__kvs *out) PL__MUST_CHECK;

/* leases (store.h) */
PL__HIDDEN int pl__lmdb_lease_acquire(pl__lmdb_store *s, uint64_t run,
                                      const char *run_id, const char *owner,
                                      int64_t lease_us, uint64_t steal_gen,
                                      bool wake, uint64_t *gen, bool *had,
                                      pl__lease *held) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_lease_next(pl__lmdb_store *s, const char *owner,
                                   int64_t lease_us, pl__lease *out,
                                   bool *damaged) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_lease_renew(pl__lmdb_store *s, const uint64_t *runs,
                                    const uint64_t *gens, size_t n,
                                    int64_t lease_us,
                                    bool *lost) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_lease_release(pl__lmdb_store *s, uint64_t run,
                                      uint64_t gen) PL__MUST_CHECK;
/* The same, the run's flow record dropped whatever it holds (a run failed
 * for its record's damage: lmdb_flow.c, DAMAGE). */
PL__HIDDEN int pl__lmdb_lease_purge(pl__lmdb_store *s, uint64_t run,
                                    uint64_t gen) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_scheds(pl__lmdb_store *s, pl__kvs *out) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_lease_get(pl__lmdb_store *s, uint64_t run,
                                  pl__lease *out) PL__MUST_CHECK;

PL__HIDDEN int pl__lmdb_delete(pl__lmdb_store *s, pl__delete *d,
                               size_t n) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_purge(pl__lmdb_store *s, size_t max_steps,
                              size_t *removed, bool *more) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_tomb_get(pl__lmdb_store *s, const char *id,
                                 pl__buf *rec) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_tombs_expire(pl__lmdb_store *s, int64_t now_us,
                                     size_t max, pl__buf *after,
                                     size_t *removed,
                                     bool *more) PL__MUST_CHECK;
/* timers and inboxes (store.h) */
PL__HIDDEN int pl__lmdb_timer_set(pl__lmdb_store *s, uint64_t run,
                                  const char *run_id,
                                  int64_t due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_take_due(pl__lmdb_store *s, const char *owner,
                                 int64_t lease_us, pl__take_fn fn, void *user,
                                 pl__lease *out, bool *taken,
                                 int64_t *next_due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_timer_get(pl__lmdb_store *s, uint64_t run,
                                  int64_t *due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_inbox_put(pl__lmdb_store *s, uint64_t run,
                                  const char *run_id, pl__inbox_check_fn check,
                                  void *user, const uint8_t *rec, size_t len,
                                  pl__inbox_take *take,
                                  uint64_t *seq) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_inbox_read(pl__lmdb_store *s, uint64_t run,
                                   pl__kvs *out) PL__MUST_CHECK;
/* rate budgets (lmdb_flow.c; store.h) */
PL__HIDDEN int pl__lmdb_rate_take(pl__lmdb_store *s, const char *resource,
                                  uint32_t limit, int64_t window_ms,
                                  bool *admitted, int64_t *at_ms,
                                  int64_t *retry_at_ms) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_rate_get(pl__lmdb_store *s, const char *resource,
                                 pl__rate_budget *out) PL__MUST_CHECK;

PL__HIDDEN int pl__lmdb_units(pl__lmdb_store *s, const pl__units_op *op,
                              pl__units_grant *out) PL__MUST_CHECK;
PL__HIDDEN int pl__lmdb_units_get(pl__lmdb_store *s, const char *resource,
                                  const char *unit,
                                  pl__unit_budget *out) PL__MUST_CHECK;

#endif /* PL_LMDB_STORE_H */
