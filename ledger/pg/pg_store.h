/*
 * pg_store.h -- the store on PostgreSQL (ledger/pg/, its files listed in
 * pg_int.h): the functions of store.h for a store named by a postgresql://
 * or postgres:// URI.  store.c chooses between it and the LMDB store;
 * nothing else includes this.
 */
#ifndef PL_PG_STORE_H
#define PL_PG_STORE_H

#include "store.h"

typedef struct pl__pg_store pl__pg_store;

/* Whether @p path names a PostgreSQL store (a postgresql:// URI). */
PL__HIDDEN bool pl__pg_is_uri(const char *path);

PL__HIDDEN int pl__pg_open(pl__pg_store **out, const char *uri,
                           const pl__store_options *opts) PL__MUST_CHECK;
PL__HIDDEN void pl__pg_close(pl__pg_store *s);
PL__HIDDEN const char *pl__pg_path(const pl__pg_store *s);
PL__HIDDEN int pl__pg_commit(pl__pg_store *s, pl__batch *const *batches,
                             size_t n, bool journal) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_scheds(pl__pg_store *s, pl__kvs *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_settle(pl__pg_store *s) PL__MUST_CHECK;
PL__HIDDEN void pl__pg_maintain(pl__pg_store *s);
PL__HIDDEN int pl__pg_read(pl__pg_store *s, const uint8_t *prefix,
                           size_t prefix_len, uint32_t from_seq, size_t max_n,
                           size_t max_bytes, pl__kvs *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_scan(pl__pg_store *s, uint64_t run, const uint8_t *after,
                           size_t after_len, size_t max_n, size_t max_bytes,
                           pl__kvs *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_each_step(pl__pg_store *s, uint64_t run, pl__step_fn fn,
                                void *user) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_run_find(pl__pg_store *s, const char *id, uint64_t *num,
                               pl__buf *info) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_state_get(pl__pg_store *s, uint64_t num,
                                pl__buf *state) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_run_load(pl__pg_store *s, const char *id, uint64_t *num,
                               pl__buf *info, pl__buf *state,
                               pl__run_more *more) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_states_get(pl__pg_store *s, const uint64_t *nums,
                                 size_t n, pl__buf *states) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_state_update(pl__pg_store *s, uint64_t num,
                                   pl__state_fn fn, void *user) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_stats_get(pl__pg_store *s,
                                pl__store_stats *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_mark(pl__pg_store *s, uint64_t *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_runs(pl__pg_store *s, const char *after, bool desc,
                           size_t max_n, pl__kvs *out) PL__MUST_CHECK;

/* leases (store.h) */
PL__HIDDEN int pl__pg_lease_acquire(pl__pg_store *s, uint64_t run,
                                    const char *run_id, const char *owner,
                                    int64_t lease_us, uint64_t steal_gen,
                                    bool wake, uint64_t *gen, bool *had,
                                    pl__lease *held) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_take(pl__pg_store *s, const char *owner, int64_t lease_us,
                           pl__take_fn fn, void *user, pl__lease *out,
                           bool *taken) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_take_due(pl__pg_store *s, const char *owner,
                               int64_t lease_us, pl__take_fn fn, void *user,
                               pl__lease *out, bool *taken,
                               int64_t *next_due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_take_dues(pl__pg_store *s, const char *owner,
                                int64_t lease_us, size_t max, size_t ahead_n,
                                size_t ahead_bytes, pl__take_fn fn, void *user,
                                pl__dues *out,
                                int64_t *next_due_us) PL__MUST_CHECK;
/* When to look at the timers again (pg_time.c's next_due()). */
PL__HIDDEN int pl__pg_timer_next(pl__pg_store *s, int64_t again_us,
                                 int64_t *next_due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_poll(pl__pg_store *s, bool *queued, bool *due,
                           int64_t *next_due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_lease_renew(pl__pg_store *s, const uint64_t *runs,
                                  const uint64_t *gens, size_t n,
                                  int64_t lease_us, bool *lost) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_lease_release(pl__pg_store *s, uint64_t run,
                                    uint64_t gen) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_lease_get(pl__pg_store *s, uint64_t run,
                                pl__lease *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_delete(pl__pg_store *s, pl__delete *d,
                             size_t n) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_purge(pl__pg_store *s, size_t max_steps, size_t *removed,
                            bool *more) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_tomb_get(pl__pg_store *s, const char *id,
                               pl__buf *rec) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_tombs_expire(pl__pg_store *s, int64_t now_us, size_t max,
                                   pl__buf *after, size_t *removed,
                                   bool *more) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_leases_get(pl__pg_store *s, const uint64_t *runs,
                                 size_t n, pl__lease *out,
                                 bool *found) PL__MUST_CHECK;

/* timers and inboxes (store.h) */
PL__HIDDEN int pl__pg_timer_set(pl__pg_store *s, uint64_t run,
                                const char *run_id,
                                int64_t due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_timer_get(pl__pg_store *s, uint64_t run,
                                int64_t *due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_inbox_put(pl__pg_store *s, uint64_t run,
                                const char *run_id, pl__inbox_check_fn check,
                                void *user, const uint8_t *rec, size_t len,
                                pl__inbox_take *take,
                                uint64_t *seq) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_inbox_read(pl__pg_store *s, uint64_t run,
                                 pl__kvs *out) PL__MUST_CHECK;

/*
 * What this process's PostgreSQL stores have asked of their servers, all
 * stores together: round trips (each wait for the server's answers),
 * statements sent, connections opened (each a few round trips of its
 * own, not counted in round_trips), and the time spent in round trips,
 * from the first statement sent to the last answer read (the server's
 * work, the socket and libpq; the engine's own work is the rest).  For
 * the tests and pl-bench, which read what a commit costs; relaxed
 * atomics, so nearly free.
 */
typedef struct pl__pg_counts {
    uint64_t round_trips, statements, connects;
    uint64_t wait_ns;
    uint64_t prepares; /* the statements prepared in commits (a shape's
                          first on a connection, pg_one.c): in statements
                          too */
} pl__pg_counts;

PL__HIDDEN void pl__pg_counts_get(pl__pg_counts *out);

/* The plans the server made for the prepared statements of the connection
 * the store's next call takes: *custom for the values of one execution,
 * *generic kept for all (pg_prepared_statements).  For the tests and
 * pl-bench: a statement the server plans again on every execution costs
 * it more than the execution itself. */
PL__HIDDEN int pl__pg_plans_get(pl__pg_store *s, uint64_t *custom,
                                uint64_t *generic) PL__MUST_CHECK;

/* rate budgets (pg_flow.c; store.h) */
PL__HIDDEN int pl__pg_rate_take(pl__pg_store *s, const char *resource,
                                uint32_t limit, int64_t window_ms,
                                bool *admitted, int64_t *at_ms,
                                int64_t *retry_at_ms) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_rate_get(pl__pg_store *s, const char *resource,
                               pl__rate_budget *out) PL__MUST_CHECK;

PL__HIDDEN int pl__pg_units(pl__pg_store *s, const pl__units_op *op,
                            pl__units_grant *out) PL__MUST_CHECK;
PL__HIDDEN int pl__pg_units_get(pl__pg_store *s, const char *resource,
                                const char *unit,
                                pl__unit_budget *out) PL__MUST_CHECK;

#endif /* PL_PG_STORE_H */
