/*
 * store.c -- the store's two backends behind store.h: a postgresql:// or
 * postgres:// URI opens the PostgreSQL store (ledger/pg/), anything else
 * the LMDB store (lmdb_*.c).  Each function hands its call to the backend
 * the store was opened with; neither backend knows of the other.  Built
 * without PostgreSQL (PL_WITH_POSTGRESQL 0), a URI is refused at open and
 * every store is LMDB.
 */
#include "lmdb_store.h"
#if PL_WITH_POSTGRESQL
#include "pg_store.h"
#endif

#include <stdlib.h>

struct pl__store {
    pl__lmdb_store *lmdb; /* exactly one of the two */
#if PL_WITH_POSTGRESQL
    pl__pg_store *pg;
#endif
};

/* Call the backend's function @p fn: pl__pg_fn or pl__lmdb_fn (CALL0: with
 * no argument but the store). */
#if PL_WITH_POSTGRESQL
#define CALL(s, fn, ...)                                                       \
    ((s)->pg ? pl__pg_##fn((s)->pg, __VA_ARGS__)                               \
             : pl__lmdb_##fn((s)->lmdb, __VA_ARGS__))
#define CALL0(s, fn) ((s)->pg ? pl__pg_##fn((s)->pg) : pl__lmdb_##fn((s)->lmdb))
#else
#define CALL(s, fn, ...) pl__lmdb_##fn((s)->lmdb, __VA_ARGS__)
#define CALL0(s, fn) pl__lmdb_##fn((s)->lmdb)
#endif

static bool is_pg_uri(const char *path)
{
    return path && (strncmp(path, "postgresql://", 13) == 0 ||
                    strncmp(path, "postgres://", 11) == 0);
}

int pl__store_open(pl__store **out, const char *path,
                   const pl__store_options *opts)
{
#if !PL_WITH_POSTGRESQL
    if (is_pg_uri(path))
        return pl__err(
            PL_EINVAL,
            "cannot open '%.200s': policyledger was built without PostgreSQL support (PL_WITH_POSTGRESQL=OFF)",
            path);
#endif
    pl__store *s = calloc(1, sizeof *s);
    if (!s)
        return pl__err(PL_ENOMEM, "out of memory");
    int st;
#if PL_WITH_POSTGRESQL
    if (is_pg_uri(path))
        st = pl__pg_open(&s->pg, path, opts);
    else
#endif
        st = pl__lmdb_open(&s->lmdb, path, opts);
    if (st) {
        free(s);
        return st;
    }
    *out = s;
    return PL_OK;
}

void pl__store_close(pl__store *s)
{
    if (!s)
        return;
    CALL0(s, close);
    free(s);
}

const char *pl__store_path(const pl__store *s) { return CALL0(s, path); }

int pl__store_stats_get(pl__store *s, pl__store_stats *out)
{
    return CALL(s, stats_get, out);
}

int pl__store_mark(pl__store *s, uint64_t *out) { return CALL(s, mark, out); }

int pl__store_commit(pl__store *s, pl__batch *const *batches, size_t n,
                     bool journal)
{
    return CALL(s, commit, batches, n, journal);
}

int pl__store_settle(pl__store *s) { return CALL0(s, settle); }

void pl__store_maintain(pl__store *s) { CALL0(s, maintain); }

int pl__store_read(pl__store *s, const uint8_t *prefix, size_t prefix_len,
                   uint32_t from_seq, size_t max_n, size_t max_bytes,
                   pl__kvs *out)
{
    return CALL(s, read, prefix, prefix_len, from_seq, max_n, max_bytes, out);
}

int pl__store_scan(pl__store *s, uint64_t run, const uint8_t *after,
                   size_t after_len, size_t max_n, size_t max_bytes,
                   pl__kvs *out)
{
    return CALL(s, scan, run, after, after_len, max_n, max_bytes, out);
}

int pl__store_each_step(pl__store *s, uint64_t run, pl__step_fn fn, void *user)
{
    return CALL(s, each_step, run, fn, user);
}

int pl__store_run_find(pl__store *s, const char *id, uint64_t *num,
                       pl__buf *info)
{
    return CALL(s, run_find, id, num, info);
}

int pl__store_run_load(pl__store *s, const char *id, uint64_t *num,
                       pl__buf *info, pl__buf *state, pl__run_more *more)
{
    if (more) {
        more->keyed = false;
        more->room = true;
        more->ledger_read = false;
        pl__kvs_reset(&more->inbox);
        pl__kvs_reset(&more->ledger);
    }
#if PL_WITH_POSTGRESQL
    if (s->pg)
        return pl__pg_run_load(s->pg, id, num, info, state, more);
#endif
    int st = pl__lmdb_run_find(s->lmdb, id, num, info);
    if (!st)
        st = pl__lmdb_state_get(s->lmdb, *num, state);
    if (!st && more)
        st = pl__lmdb_key_now(s->lmdb, *num, &more->keyed, &more->room);
    return st || !more ? st : pl__lmdb_inbox_read(s->lmdb, *num, &more->inbox);
}

int pl__store_state_get(pl__store *s, uint64_t num, pl__buf *state)
{
    return CALL(s, state_get, num, state);
}

int pl__store_states_get(pl__store *s, const uint64_t *nums, size_t n,
                         pl__buf *states)
{
#if PL_WITH_POSTGRESQL
    if (s->pg)
        return pl__pg_states_get(s->pg, nums, n, states);
#endif
    int st = PL_OK; /* LMDB: a read each, in memory */
    for (size_t i = 0; !st && i < n; i++)
        st = pl__lmdb_state_get(s->lmdb, nums[i], &states[i]);
    return st;
}

int pl__store_state_update(pl__store *s, uint64_t num, pl__state_fn fn,
                           void *user)
{
    return CALL(s, state_update, num, fn, user);
}

int pl__store_runs(pl__store *s, const char *after, bool desc, size_t max_n,
                   pl__kvs *out)
{
    return CALL(s, runs, after, desc, max_n, out);
}

/* ---- leases ---------------------------------------------------------------- */

int pl__store_lease_acquire(pl__store *s, uint64_t run, const char *run_id,
                            const char *owner, int64_t lease_us,
                            uint64_t steal_gen, bool wake, uint64_t *gen,
                            bool *had, pl__lease *held)
{
    return CALL(s, lease_acquire, run, run_id, owner, lease_us, steal_gen, wake,
                gen, had, held);
}

/* A take's claim on LMDB, in the state's read-modify-write. */
typedef struct take_ctx {
    pl__taken t;
    pl__take_fn fn;
    void *user;
    bool drop;
    int ended;                /* fn's refusal with an ended state */
    char msg[PL__ERRMSG_MAX]; /* and its message */
} take_ctx;

static int take_claim(pl__buf *state, pl__kvs *extra, void *user)
{
    take_ctx *x = user;
    (void)extra;
    x->t.state = state->data;
    x->t.state_len = state->len;
    x->drop = false;
    x->ended = PL_OK;
    pl__buf claimed = {0};
    int st = x->fn(&x->t, &claimed, &x->drop, x->user);
    x->t.state = NULL;
    if (st && x->drop && claimed.len) {
        /* refused with the run's ended state (pl__taken.key_damaged):
         * written, then the lease dropped */
        x->ended = st;
        pl__errmsg_save(x->msg);
        st = PL_OK;
    }
    if (!st) {
        pl__buf_free(state);
        *state = claimed; /* taken over */
    } else
        pl__buf_free(&claimed);
    return st;
}

int pl__store_take(pl__store *s, const char *owner, int64_t lease_us,
                   pl__take_fn fn, void *user, pl__lease *out, bool *taken)
{
    *taken = false;
#if PL_WITH_POSTGRESQL
    if (s->pg)
        return pl__pg_take(s->pg, owner, lease_us, fn, user, out, taken);
#endif
    /* LMDB: the lease's transaction, then the claim's; every read is in
     * memory */
    bool damaged = false;
    int st = pl__lmdb_lease_next(s->lmdb, owner, lease_us, out, &damaged);
    if (st)
        return st;
    *taken = true;
    take_ctx x = {
        .t = {.lease = *out, .key_damaged = damaged}, .fn = fn, .user = user};
    pl__buf info = {0};
    uint64_t num = 0;
    /* the run's steps may still be in the journal of a group commit */
    if (!(st = pl__lmdb_settle(s->lmdb)))
        st = pl__lmdb_run_find(s->lmdb, out->id, &num, &info);
    if (!st && num != out->run)
        st = pl__err(PL_ECORRUPT,
                     "the lease of run #%llu names run '%s', which is "
                     "run #%llu",
                     (unsigned long long)out->run, out->id,
                     (unsigned long long)num);
    x.t.info = info.data;
    x.t.info_len = info.len;
    if (!st)
        st = pl__lmdb_state_update(s->lmdb, num, take_claim, &x);
    pl__buf_free(&info);
    if (!st && x.ended) {
        pl__errmsg_restore(x.msg);
        st = x.ended;
    }
    if (st && x.drop) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        if ((damaged ? pl__lmdb_lease_purge
                     : pl__lmdb_lease_release)(s->lmdb, out->run, out->gen)) {
            /* it expires on its own */
        }
        pl__errmsg_restore(saved);
    }
    return st;
}

int pl__store_take_due(pl__store *s, const char *owner, int64_t lease_us,
                       pl__take_fn fn, void *user, pl__lease *out, bool *taken,
                       int64_t *next_due_us)
{
    return CALL(s, take_due, owner, lease_us, fn, user, out, taken,
                next_due_us);
}

int pl__store_take_dues(pl__store *s, const char *owner, int64_t lease_us,
                        size_t max, size_t ahead_n, size_t ahead_bytes,
                        pl__take_fn fn, void *user, pl__dues *out,
                        int64_t *next_due_us)
{
    out->n = 0;
    if (max > PL__DUES_MAX)
        max = PL__DUES_MAX;
#if PL_WITH_POSTGRESQL
    if (s->pg)
        return pl__pg_take_dues(s->pg, owner, lease_us, max, ahead_n,
                                ahead_bytes, fn, user, out, next_due_us);
#endif
    (void)ahead_n;
    (void)ahead_bytes;
    /* LMDB: one, its records read in memory */
    bool taken = false;
    int st = pl__lmdb_take_due(s->lmdb, owner, lease_us, fn, user,
                               &out->lease[0], &taken, next_due_us);
    if (!taken)
        return st;
    out->n = 1;
    out->st[0] = st;
    out->ledger_read[0] = false;
    pl__kvs_reset(&out->ledger[0]);
    if (st)
        pl__errmsg_save(out->msg[0]);
    return PL_OK;
}

int pl__store_lease_renew(pl__store *s, const uint64_t *runs,
                          const uint64_t *gens, size_t n, int64_t lease_us,
                          bool *lost)
{
    return CALL(s, lease_renew, runs, gens, n, lease_us, lost);
}

int pl__store_lease_release(pl__store *s, uint64_t run, uint64_t gen)
{
    return CALL(s, lease_release, run, gen);
}

int pl__store_lease_get(pl__store *s, uint64_t run, pl__lease *out)
{
    return CALL(s, lease_get, run, out);
}

int pl__store_leases_get(pl__store *s, const uint64_t *runs, size_t n,
                         pl__lease *out, bool *found)
{
#if PL_WITH_POSTGRESQL
    if (s->pg)
        return pl__pg_leases_get(s->pg, runs, n, out, found);
#endif
    int st = PL_OK;
    for (size_t i = 0; !st && i < n; i++) {
        st = pl__lmdb_lease_get(s->lmdb, runs[i], &out[i]);
        found[i] = st == PL_OK;
        if (st == PL_ENOTFOUND)
            st = PL_OK;
    }
    return st;
}

/* ---- deleting runs ---------------------------------------------------------- */

int pl__store_delete(pl__store *s, pl__delete *d, size_t n)
{
    return CALL(s, delete, d, n);
}

int pl__store_purge(pl__store *s, size_t max_steps, size_t *removed, bool *more)
{
    return CALL(s, purge, max_steps, removed, more);
}

int pl__store_tomb_get(pl__store *s, const char *id, pl__buf *rec)
{
    return CALL(s, tomb_get, id, rec);
}

int pl__store_tombs_expire(pl__store *s, int64_t now_us, size_t max,
                           pl__buf *after, size_t *removed, bool *more)
{
    return CALL(s, tombs_expire, now_us, max, after, removed, more);
}

/* ---- schedules -------------------------------------------------------------- */

int pl__store_scheds(pl__store *s, pl__kvs *out)
{
    return CALL(s, scheds, out);
}

/* ---- time and events -------------------------------------------------------- */

int pl__store_timer_set(pl__store *s, uint64_t run, const char *run_id,
                        int64_t due_us)
{
    return CALL(s, timer_set, run, run_id, due_us);
}

int pl__store_poll(pl__store *s, bool *known, bool *queued, bool *due,
                   int64_t *next_due_us)
{
    *known = *queued = *due = false;
    *next_due_us = 0;
#if PL_WITH_POSTGRESQL
    if (s->pg) {
        *known = true;
        return pl__pg_poll(s->pg, queued, due, next_due_us);
    }
#endif
    (void)s;
    return PL_OK;
}

int pl__store_timer_get(pl__store *s, uint64_t run, int64_t *due_us)
{
    return CALL(s, timer_get, run, due_us);
}

int pl__store_inbox_put(pl__store *s, uint64_t run, const char *run_id,
                        pl__inbox_check_fn check, void *user,
                        const uint8_t *rec, size_t len, pl__inbox_take *take,
                        uint64_t *seq)
{
    return CALL(s, inbox_put, run, run_id, check, user, rec, len, take, seq);
}

int pl__store_inbox_read(pl__store *s, uint64_t run, pl__kvs *out)
{
    return CALL(s, inbox_read, run, out);
}

/* ---- flow control ---------------------------------------------------------- */

int pl__store_rate_take(pl__store *s, const char *resource, uint32_t limit,
                        int64_t window_ms, bool *admitted, int64_t *at_ms,
                        int64_t *retry_at_ms)
{
    return CALL(s, rate_take, resource, limit, window_ms, admitted, at_ms,
                retry_at_ms);
}

int pl__store_rate_get(pl__store *s, const char *resource, pl__rate_budget *out)
{
    return CALL(s, rate_get, resource, out);
}

int pl__store_units(pl__store *s, const pl__units_op *op, pl__units_grant *out)
{
    return CALL(s, units, op, out);
}

int pl__store_units_get(pl__store *s, const char *resource, const char *unit,
                        pl__unit_budget *out)
{
    return CALL(s, units_get, resource, unit, out);
}
