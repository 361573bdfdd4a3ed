/*
 * lmdb_lease.c -- run leases on the LMDB store (see LEASES in store.h).
 *
 * LAYOUT: the `leases` database, beside the seven of lmdb_store.c, created
 * on the first writable open (a store made before it simply has no leases).
 *
 *   | key              | value                                            |
 *   |------------------|--------------------------------------------------|
 *   | u64 BE run number| u64 BE generation, i64 BE expiry (Unix us, this  |
 *   |                  | host's clock), u16 BE owner length, the owner    |
 *   |                  | (worker id; "" while queued), the run id (rest)  |
 *
 * Beside each lease, its place in the queue (lmdb_flow.c), made and
 * dropped with it.
 *
 * LMDB has one writer at a time: a take, a renewal and a commit's fence
 * check are each one write transaction, so two workers can never both take
 * the same expired lease, and a commit sees the generation as it is.
 */
#include "lmdb_int.h"

#include <stdio.h>
#include <stdlib.h>

#define HEAD 18 /* generation, expiry, owner length */

int pl__lmdb_lease_open(pl__lmdb_store *s, MDB_txn *txn, bool create)
{
    int rc = mdb_dbi_open(txn, "leases", create ? MDB_CREATE : 0, &s->leases);
    if (rc == MDB_NOTFOUND && !create) {
        s->has_leases = false; /* a read-only open of an older store */
        return 0;
    }
    s->has_leases = !rc;
    return rc;
}

static int no_leases(const pl__lmdb_store *s)
{
    return pl__err(PL_ESTATE, "store '%s' is open read-only: it takes no lease",
                   s->path);
}

/* Decode a lease row; PL_ECORRUPT when it is malformed. */
static int decode(const pl__lmdb_store *s, uint64_t run, const MDB_val *v,
                  pl__lease *out)
{
    const uint8_t *p = v->mv_data;
    size_t olen = v->mv_size >= HEAD ? (size_t)p[16] << 8 | p[17] : 0;
    if (v->mv_size < HEAD || olen >= sizeof out->owner ||
        v->mv_size - HEAD - olen > PL_MAX_RUN_ID)
        return pl__err(PL_ECORRUPT,
                       "store '%s': the lease of run #%llu is malformed",
                       s->path, (unsigned long long)run);
    size_t ilen = v->mv_size - HEAD - olen;
    out->run = run;
    out->gen = pl__get_be64(p);
    out->expires_in_us = (int64_t)pl__get_be64(p + 8) - pl__now_us();
    memcpy(out->owner, p + HEAD, olen);
    out->owner[olen] = '\0';
    memcpy(out->id, p + HEAD + olen, ilen);
    out->id[ilen] = '\0';
    return PL_OK;
}

static int64_t expiry(const pl__lease *l)
{
    return l->expires_in_us + pl__now_us();
}

/* Write a lease row for run @p run. */
static int put(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, uint64_t gen,
               int64_t expires, const char *owner, const char *id)
{
    size_t olen = strlen(owner), ilen = strlen(id);
    uint8_t key[8];
    pl__put_be64(key, run);
    MDB_val k = {8, key}, v = {HEAD + olen + ilen, NULL};
    int rc = mdb_put(txn, s->leases, &k, &v, MDB_RESERVE);
    if (rc)
        return rc;
    uint8_t *p = v.mv_data;
    pl__put_be64(p, gen);
    pl__put_be64(p + 8, (uint64_t)expires);
    p[16] = (uint8_t)(olen >> 8);
    p[17] = (uint8_t)olen;
    memcpy(p + HEAD, owner, olen);
    memcpy(p + HEAD + olen, id, ilen);
    return 0;
}

/* Read run @p run's lease in @p txn: MDB_NOTFOUND when it has none. */
static int get(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, pl__lease *out,
               int *st)
{
    uint8_t key[8];
    pl__put_be64(key, run);
    MDB_val k = {8, key}, v;
    int rc = pl__lmdb_get(s, txn, s->leases, &k, &v);
    if (!rc)
        *st = decode(s, run, &v, out);
    return rc;
}

/* Drop run @p run's lease, and its place in the queue with it. */
static int drop(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    uint8_t key[8];
    pl__put_be64(key, run);
    MDB_val k = {8, key};
    int rc = mdb_del(txn, s->leases, &k, NULL);
    return rc ? rc : pl__lmdb_flow_drop(s, txn, run, st);
}

/* A lease made now for a run that had none: its place in the queue. */
static int made(pl__lmdb_store *s, MDB_txn *txn, uint64_t run, int *st)
{
    return pl__lmdb_flow_made(s, txn, run, st);
}

int pl__lmdb_lease_state(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                         pl__lease_state *out, int *st)
{
    pl__lease l;
    int rc = get(s, txn, run, &l, st);
    *out = rc                                ? PL__LEASE_NONE
           : l.expires_in_us > 0 && *l.owner ? PL__LEASE_LIVE
                                             : PL__LEASE_EXPIRED;
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/*
 * Whether lease @p l ran out while its run counts under a concurrency key:
 * its place may have gone to another run of the key, so its holder must
 * not go on, even though nobody took the lease itself.
 */
static bool lapsed(pl__lmdb_store *s, MDB_txn *txn, const pl__lease *l)
{
    return l->expires_in_us <= 0 && pl__lmdb_flow_keyed(s, txn, l->run);
}

/* ---- in a commit's transaction ------------------------------------------- */

int pl__lmdb_lease_batch(pl__lmdb_store *s, MDB_txn *txn, const pl__batch *bt,
                         int *st)
{
    if (bt->create_id && bt->lease_owner) {
        bool queued = !*bt->lease_owner;
        int64_t now = pl__now_us();
        int rc = put(s, txn, bt->run, queued ? 0 : 1,
                     queued ? 0 : now + bt->lease_us, bt->lease_owner,
                     bt->create_id);
        pl__flow f = {.rank_us = pl__flow_rank(now, bt->priority),
                      .priority = bt->priority,
                      .limit = bt->flow_key ? bt->flow_limit : 0};
        if (bt->flow_key)
            snprintf(f.key, sizeof f.key, "%s", bt->flow_key);
        /* another run's key and limit (a fork's, an upgrade's): a damaged
         * record is refused, *st, never read as no key */
        pl__flow from;
        bool has = false;
        if (!rc && bt->flow_from &&
            ((rc = pl__lmdb_flow_pass(s, txn, bt->flow_from, &from, &has,
                                      st)) ||
             *st))
            return rc;
        if (has) {
            memcpy(f.key, from.key, sizeof f.key);
            f.limit = from.limit;
        }
        return rc ? rc : pl__lmdb_flow_add(s, txn, bt->run, &f, st);
    }
    if (!bt->gen)
        return 0;
    pl__lease l;
    int rc = get(s, txn, bt->run, &l, st);
    if (!rc && !*st && l.gen == bt->gen && lapsed(s, txn, &l)) {
        *st = pl__err(
            PL_EBUSY,
            "run #%llu: this worker's lease (generation %llu) ran out, and its concurrency key's place may have gone to another run; nothing more is written",
            (unsigned long long)bt->run, (unsigned long long)bt->gen);
        return 0;
    }
    if (rc == MDB_NOTFOUND || (!rc && !*st && l.gen != bt->gen)) {
        *st = pl__err(
            PL_EBUSY,
            "run #%llu: this worker's lease (generation %llu) was taken over by %s; nothing more is written",
            (unsigned long long)bt->run, (unsigned long long)bt->gen,
            rc         ? "nobody (it was dropped)"
            : *l.owner ? l.owner
                       : "the queue");
        return 0;
    }
    if (rc || *st || !bt->release)
        return rc;
    if (!bt->park)
        return drop(s, txn, bt->run, st);
    uint8_t key[8];
    pl__put_be64(key, bt->run);
    MDB_val k = {8, key};
    rc = mdb_del(txn, s->leases, &k, NULL);
    return rc ? rc : pl__lmdb_flow_park(s, txn, bt->run, st);
}

/* ---- taking, renewing, dropping ------------------------------------------ */

typedef struct acquire_ctx {
    uint64_t run;
    const char *run_id, *owner;
    int64_t lease_us;
    uint64_t steal_gen;
    bool wake;
    uint64_t *gen;
    bool *had;
    pl__lease *held;
} acquire_ctx;

static int acquire_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    acquire_ctx *c = user;
    pl__lease l;
    int rc = get(s, txn, c->run, &l, st);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (*st)
        return 0;
    *c->had = !rc;
    if (!rc && l.expires_in_us > 0 && strcmp(l.owner, c->owner) != 0 &&
        !(c->steal_gen && l.gen == c->steal_gen)) {
        *c->held = l;
        *st = pl__err(PL_EBUSY, "run #%llu is leased to %s",
                      (unsigned long long)c->run, l.owner);
        return 0;
    }
    bool room = true; /* as a wake: a run parked with a key, while it has
                       * room (its place back with the lease, made()) */
    int frc = c->wake ? pl__lmdb_flow_room(s, txn, c->run, &room, st) : 0;
    if (!frc && *st == PL_ECORRUPT) { /* its record damaged: left to the */
        *st = 0;                      /* wake that fails it (lmdb_flow.c, */
        room = false;                 /* DAMAGE) */
    }
    if (frc || *st)
        return frc;
    if (!room) {
        memset(c->held, 0, sizeof *c->held);
        *st = pl__err(PL_EBUSY, "run #%llu waits for its concurrency key",
                      (unsigned long long)c->run);
        return 0;
    }
    *c->gen = rc ? 1 : l.gen + 1;
    int prc = put(s, txn, c->run, *c->gen, pl__now_us() + c->lease_us, c->owner,
                  c->run_id);
    return prc || !rc ? prc : made(s, txn, c->run, st);
}

int pl__lmdb_lease_acquire(pl__lmdb_store *s, uint64_t run, const char *run_id,
                           const char *owner, int64_t lease_us,
                           uint64_t steal_gen, bool wake, uint64_t *gen,
                           bool *had, pl__lease *held)
{
    if (!s->has_leases)
        return no_leases(s);
    acquire_ctx c = {run,  run_id, owner, lease_us, steal_gen,
                     wake, gen,    had,   held};
    return pl__lmdb_write(s, acquire_body, &c);
}

typedef struct next_ctx {
    const char *owner;
    int64_t lease_us;
    pl__lease *out;
    bool found;
    bool damaged; /* the run's flow record (pl__lmdb_flow_pick()) */
} next_ctx;

/* An expired lease that has no place in the queue (made by a path that
 * does not index it): given one, rank now, and taken. */
static int unindexed(pl__lmdb_store *s, MDB_txn *txn, next_ctx *c, int *st)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, s->leases, &cur);
    if (rc)
        return rc;
    MDB_val k, v;
    for (rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_FIRST); !rc;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8) {
            *st = pl__err(PL_ECORRUPT, "store '%s': a lease key is malformed",
                          s->path);
            break;
        }
        uint64_t run = pl__get_be64(k.mv_data);
        if ((*st = decode(s, run, &v, c->out)))
            break;
        if (c->out->expires_in_us <= 0 && !pl__lmdb_flow_has(s, txn, run)) {
            c->found = true;
            break;
        }
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    return c->found && s->has_flow ? made(s, txn, c->out->run, st) : 0;
}

static int next_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    next_ctx *c = user;
    c->found = c->damaged = false;
    uint64_t run;
    int rc = pl__lmdb_flow_pick(s, txn, &run, &c->damaged, st);
    if (rc || *st)
        return rc;
    if (run) {
        rc = get(s, txn, run, c->out, st);
        if (rc || *st)
            return rc;
        c->found = true;
    } else if ((rc = unindexed(s, txn, c, st)) || *st || !c->found) {
        return rc;
    }
    pl__lease *l = c->out;
    l->gen++;
    snprintf(l->owner, sizeof l->owner, "%s", c->owner);
    l->expires_in_us = c->lease_us;
    return put(s, txn, l->run, l->gen, expiry(l), l->owner, l->id);
}

/* Whether any lease is expired, in a read transaction: an idle worker
 * looks often, and must not take the writer's lock to find nothing. */
static int any_expired(pl__lmdb_store *s, bool *found)
{
    MDB_txn *txn;
    size_t seen;
    *found = false;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int64_t now = pl__now_us();
    int rc = mdb_cursor_open(txn, s->leases, &cur);
    if (rc)
        cur = NULL;
    for (rc = rc ? rc : pl__lmdb_cursor_get(s, cur, &k, &v, MDB_FIRST); !rc;
         rc = pl__lmdb_cursor_get(s, cur, &k, &v, MDB_NEXT)) {
        /* a malformed row counts as expired: the write reports it */
        if (v.mv_size < HEAD ||
            (int64_t)pl__get_be64((const uint8_t *)v.mv_data + 8) <= now) {
            *found = true;
            break;
        }
    }
    if (rc && rc != MDB_NOTFOUND)
        st = pl__lmdb_err(s, rc, "reading the leases");
    if (cur)
        mdb_cursor_close(cur);
    pl__lmdb_txn_abort(s, txn);
    return st;
}

int pl__lmdb_lease_next(pl__lmdb_store *s, const char *owner, int64_t lease_us,
                        pl__lease *out, bool *damaged)
{
    *damaged = false;
    if (!s->has_leases)
        return no_leases(s);
    bool found;
    int rc = any_expired(s, &found);
    if (rc || !found)
        return rc ? rc : PL_ENOTFOUND;
    next_ctx c = {owner, lease_us, out, false, false};
    int st = pl__lmdb_write(s, next_body, &c);
    if (!st && !c.found)
        return PL_ENOTFOUND;
    *damaged = !st && c.damaged;
    return st;
}

typedef struct renew_ctx {
    const uint64_t *runs, *gens;
    size_t n;
    int64_t lease_us;
    bool *lost;
} renew_ctx;

static int renew_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    renew_ctx *c = user;
    for (size_t i = 0; i < c->n; i++) {
        pl__lease l;
        int rc = get(s, txn, c->runs[i], &l, st);
        if (rc && rc != MDB_NOTFOUND)
            return rc;
        if (*st)
            return 0;
        c->lost[i] = rc || l.gen != c->gens[i] || lapsed(s, txn, &l);
        if (!c->lost[i] &&
            (rc = put(s, txn, l.run, l.gen, pl__now_us() + c->lease_us, l.owner,
                      l.id)))
            return rc;
    }
    return 0;
}

int pl__lmdb_lease_renew(pl__lmdb_store *s, const uint64_t *runs,
                         const uint64_t *gens, size_t n, int64_t lease_us,
                         bool *lost)
{
    if (!s->has_leases)
        return no_leases(s);
    renew_ctx c = {runs, gens, n, lease_us, lost};
    return n ? pl__lmdb_write(s, renew_body, &c) : PL_OK;
}

typedef struct release_ctx {
    uint64_t run, gen;
    bool damaged;
} release_ctx;

static int release_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    release_ctx *c = user;
    pl__lease l;
    int rc = get(s, txn, c->run, &l, st);
    if (rc == MDB_NOTFOUND || *st || (!rc && l.gen != c->gen))
        return rc == MDB_NOTFOUND ? 0 : rc;
    if (rc || !c->damaged)
        return rc ? rc : drop(s, txn, c->run, st);
    uint8_t key[8];
    pl__put_be64(key, c->run);
    MDB_val k = {8, key};
    rc = mdb_del(txn, s->leases, &k, NULL);
    return rc ? rc : pl__lmdb_flow_purge(s, txn, c->run);
}

static int release(pl__lmdb_store *s, uint64_t run, uint64_t gen, bool damaged)
{
    if (!s->has_leases)
        return no_leases(s);
    release_ctx c = {run, gen, damaged};
    return pl__lmdb_write(s, release_body, &c);
}

int pl__lmdb_lease_release(pl__lmdb_store *s, uint64_t run, uint64_t gen)
{
    return release(s, run, gen, false);
}

int pl__lmdb_lease_purge(pl__lmdb_store *s, uint64_t run, uint64_t gen)
{
    return release(s, run, gen, true);
}

int pl__lmdb_lease_get(pl__lmdb_store *s, uint64_t run, pl__lease *out)
{
    if (!s->has_leases)
        return pl__err(PL_ENOTFOUND, "store '%s' holds no leases", s->path);
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    int rc = get(s, txn, run, out, &st);
    if (rc == MDB_NOTFOUND)
        st = pl__err(PL_ENOTFOUND, "run #%llu holds no lease",
                     (unsigned long long)run);
    else if (rc)
        st = pl__lmdb_err(s, rc, "reading a lease");
    pl__lmdb_txn_abort(s, txn);
    return st;
}

/* ---- a deleted run's lease ------------------------------------------------ */

int pl__lmdb_lease_drop(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                        bool *busy, int *st)
{
    *busy = false;
    if (!s->has_leases)
        return 0;
    pl__lease l;
    int rc = get(s, txn, run, &l, st);
    if (rc == MDB_NOTFOUND)
        return pl__lmdb_flow_drop(s, txn, run, st);
    if (rc || *st)
        return rc;
    if (*l.owner && l.expires_in_us > 0) { /* executing (a replay) */
        *busy = true;
        return 0;
    }
    return drop(s, txn, run, st); /* and its place in the queue */
}

/* ---- for the timers (lmdb_time.c) ---------------------------------------- */

int pl__lmdb_lease_peek(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                        pl__lease *out, int *st)
{
    if (!s->has_leases)
        return MDB_NOTFOUND;
    return get(s, txn, run, out, st);
}

int pl__lmdb_lease_take(pl__lmdb_store *s, MDB_txn *txn, uint64_t run,
                        const char *run_id, const char *owner, int64_t lease_us,
                        pl__lease *out, int *st)
{
    pl__lease l;
    int rc = get(s, txn, run, &l, st);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    uint64_t gen = !rc && !*st ? l.gen + 1 : 1;
    *st = 0;
    out->run = run;
    out->gen = gen;
    out->expires_in_us = lease_us;
    snprintf(out->owner, sizeof out->owner, "%s", owner);
    snprintf(out->id, sizeof out->id, "%s", run_id);
    int prc = put(s, txn, run, gen, pl__now_us() + lease_us, owner, run_id);
    /* a woken run's lease is new: its place in the queue with it */
    return prc || gen != 1 ? prc : made(s, txn, run, st);
}
