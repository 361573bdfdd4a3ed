/*
 * pg_cache.c -- the runs this process parked, kept so that a signal that
 * continues one of them here need not read it first.
 *
 * A signal that continues a waiting run in the caller's thread (core's
 * RIDES) reads the run, its state, its inbox and its root ledger, replays
 * it, then writes the delivery with the run's next commit: two round
 * trips.  When this process wrote every step of the run's root ledger
 * and the state it parked with, it knows all of that already: the store
 * keeps it (a few runs, a few pages each) and the delivery's load is
 * answered from memory, the ride then one round trip.
 *
 * What is kept is checked where it counts, in the ride's transaction
 * (pg_time.c): the run's state is locked and compared with the one kept
 * (a run state holds its root ledger's step count and the hash of its
 * last step, so the same state is the same ledger), and the record must
 * get the seq the replay gave it, 1 here (a kept run's inbox is empty:
 * any record delivered since moves that seq).  A ride refused, for any
 * reason, drops the run, and the delivery goes the longer way, reading
 * the run as before.
 *
 * A run is kept from its creation by a commit of this store, while the
 * execution that created it writes it (the same lease generation, no
 * concurrency key), with its root ledger's rows as written; it serves
 * once it parks (a commit that drops its lease and parks it), and goes on
 * being kept when a ride of this store continues it.  Anything else
 * written to it here (another execution's commit, an inbox record
 * consumed, delivered or imported, a failed commit) drops it; what
 * another process writes, this one cannot see: the ride's checks refuse
 * it.  At most RUNS runs and BYTES bytes of rows; the oldest goes first.
 */
#include "pg_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUNS 64
#define BYTES ((size_t)4 << 20)
/* a run's rows: no more than a ride's first read (core's PL__AHEAD_N and
 * PL__AHEAD_BYTES) takes */
#define RUN_ROWS 64
#define RUN_BYTES ((size_t)256 << 10)

typedef struct kept {
    uint64_t num; /* 0: a free slot */
    char *id;
    uint64_t gen;  /* the execution's lease generation */
    bool parked;   /* its state is the parked run's: it serves */
    pl__buf info;  /* its info record */
    pl__buf state; /* its state record, as written last */
    pl__kvs rows;  /* its root ledger's rows (key, value), as written */
    uint64_t used; /* when last written or served (a tick) */
} kept;

struct pl__pg_cache {
    pthread_mutex_t mu;
    pid_t pid; /* the process whose runs these are */
    kept k[RUNS];
    size_t bytes; /* of rows */
    uint64_t tick;
};

/* @p s's cache, made the first time when @p make (NULL: none, or no
 * memory: nothing is kept, which is never wrong). */
static pl__pg_cache *cache_of(pl__pg_store *s, bool make)
{
    pthread_mutex_lock(&s->mu);
    pl__pg_cache *c = s->cache;
    if (!c && make && (c = calloc(1, sizeof *c))) {
        if (pthread_mutex_init(&c->mu, NULL)) {
            free(c);
            c = NULL;
        } else
            c->pid = pl__pg_pid();
        s->cache = c;
    }
    pthread_mutex_unlock(&s->mu);
    return c;
}

static void drop(pl__pg_cache *c, kept *k);

/* Lock @p c; a child that fork() made parked none of its runs: it
 * forgets them, as it forgets the pool's idle connections (pg_conn.c). */
static void lock(pl__pg_cache *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->pid == pl__pg_pid())
        return;
    for (size_t i = 0; i < RUNS; i++)
        if (c->k[i].num)
            drop(c, &c->k[i]);
    c->pid = pl__pg_pid();
}

void pl__pg_cache_lock(pl__pg_cache *c)
{
    if (c)
        pthread_mutex_lock(&c->mu);
}

void pl__pg_cache_unlock(pl__pg_cache *c)
{
    if (c)
        pthread_mutex_unlock(&c->mu);
}

static void drop(pl__pg_cache *c, kept *k)
{
    c->bytes -= k->rows.data.len;
    free(k->id);
    pl__buf_free(&k->info);
    pl__buf_free(&k->state);
    pl__kvs_free(&k->rows);
    *k = (kept){0};
}

static kept *find(pl__pg_cache *c, uint64_t num)
{
    for (size_t i = 0; num && i < RUNS; i++)
        if (c->k[i].num == num)
            return &c->k[i];
    return NULL;
}

/* A slot for a new run: a free one, or the oldest's. */
static kept *slot(pl__pg_cache *c)
{
    kept *old = &c->k[0];
    for (size_t i = 0; i < RUNS; i++) {
        if (!c->k[i].num)
            return &c->k[i];
        if (c->k[i].used < old->used)
            old = &c->k[i];
    }
    drop(c, old);
    return old;
}

/* Batch @p bt's root ledger rows and state onto @p k (@p created: the
 * batch that created it; @p del: the inbox record it may consume, 0:
 * none); false: @p k can no longer be kept. */
static bool apply(pl__pg_cache *c, kept *k, const pl__batch *bt, bool created,
                  uint64_t del)
{
    if (bt->inbox_add || bt->inbox_del != del ||
        (!created && bt->gen != k->gen))
        return false; /* its inbox, or another execution */
    uint8_t prefix[8];
    pl__put_be64(prefix, k->num);
    for (size_t i = 0; i < bt->steps.n; i++) {
        const uint8_t *key = pl__kvs_key(&bt->steps, i);
        size_t klen = bt->steps.e[i].klen;
        if (klen != 12 || memcmp(key, prefix, 8) != 0)
            continue; /* an invocation's ledger, not the root's */
        size_t n = k->rows.n;
        if (n && memcmp(pl__kvs_key(&k->rows, n - 1), key, 12) >= 0)
            return false; /* not in key order: not what a read gives */
        size_t before = k->rows.data.len;
        if (pl__kvs_add(&k->rows, key, klen, pl__kvs_val(&bt->steps, i),
                        bt->steps.e[i].vlen))
            return false;
        c->bytes += k->rows.data.len - before;
    }
    if (bt->state.len) {
        pl__buf_reset(&k->state);
        if (pl__buf_append(&k->state, bt->state.data, bt->state.len))
            return false;
    }
    if (bt->release && !bt->park)
        return false; /* its execution ended, not parked */
    k->parked = bt->release;
    k->used = ++c->tick;
    return k->state.len && k->rows.n <= RUN_ROWS &&
           k->rows.data.len <= RUN_BYTES && c->bytes <= BYTES;
}

/* Keep batch @p bt's new run (its creation: @p bt->run is its number). */
static void create(pl__pg_cache *c, const pl__batch *bt)
{
    if (bt->rc || bt->flow_key || bt->flow_from || !bt->create_info ||
        bt->succ_id)
        return;
    kept *k = slot(c);
    k->num = bt->run;
    k->gen = bt->lease_owner && *bt->lease_owner ? 1 : 0; /* L_CREATE's */
    k->id = pl__strdup(bt->create_id);
    if (!k->id ||
        pl__buf_append(&k->info, bt->create_info->data, bt->create_info->len))
        drop(c, k);
}

void pl__pg_cache_commit(pl__pg_store *s, pl__batch *const *batches, size_t n,
                         int st)
{
    bool creates = false;
    for (size_t b = 0; !st && b < n; b++)
        creates |= batches[b]->create_id && !batches[b]->rc;
    pl__pg_cache *c = cache_of(s, creates);
    if (!c)
        return;
    lock(c);
    for (size_t b = 0; b < n; b++) {
        const pl__batch *bt = batches[b];
        if (!st && bt->create_id)
            create(c, bt);
        kept *k = !bt->create_id || !bt->rc ? find(c, bt->run) : NULL;
        if (k && (st || (k->parked && !bt->create_id) ||
                  !apply(c, k, bt, bt->create_id != NULL, 0)))
            drop(c, k); /* failed, or written by another execution */
    }
    pthread_mutex_unlock(&c->mu);
}

void pl__pg_cache_ride(pl__pg_store *s, uint64_t run,
                       const pl__inbox_take *take, bool written)
{
    pl__pg_cache *c = cache_of(s, false);
    if (!c)
        return;
    lock(c);
    kept *k = find(c, run);
    bool keep = k && written && take && take->then && k->parked &&
                take->expect && take->expect->len == k->state.len &&
                memcmp(take->expect->data, k->state.data, k->state.len) == 0;
    if (keep && take->then->inbox_del == 1 && take->then_seq == 1) {
        /* the ride's commit consumed its record (the seq 1 of an empty
         * inbox): the inbox is empty again */
        k->gen = take->gen;
        k->parked = false;
        keep = apply(c, k, take->then, false, 1);
    } else
        keep = false;
    if (k && !keep)
        drop(c, k);
    pthread_mutex_unlock(&c->mu);
}

void pl__pg_cache_drop(pl__pg_store *s, uint64_t run)
{
    pl__pg_cache *c = cache_of(s, false);
    if (!c)
        return;
    lock(c);
    kept *k = find(c, run);
    if (k)
        drop(c, k);
    pthread_mutex_unlock(&c->mu);
}

bool pl__pg_cache_unkeyed(pl__pg_store *s, uint64_t run)
{
    pl__pg_cache *c = cache_of(s, false);
    if (!c)
        return false;
    lock(c);
    bool found = find(c, run) != NULL; /* create() keeps no keyed run */
    pthread_mutex_unlock(&c->mu);
    return found;
}

int pl__pg_cache_get(pl__pg_store *s, const char *id, size_t max_n,
                     size_t max_bytes, uint64_t *num, pl__buf *info,
                     pl__buf *state, pl__kvs *rows)
{
    pl__pg_cache *c = cache_of(s, false);
    if (!c)
        return PL_ENOTFOUND;
    int st = PL_ENOTFOUND;
    lock(c);
    for (size_t i = 0; i < RUNS; i++) {
        kept *k = &c->k[i];
        if (!k->num || !k->parked || strcmp(k->id, id) != 0)
            continue;
        /* all of its rows, as a read with these limits would give them
         * (L_READ_ROOT: a row while the values before it are under
         * max_bytes), or nothing */
        size_t before = 0;
        for (size_t r = 0; r + 1 < k->rows.n; r++)
            before += k->rows.e[r].vlen;
        if (k->rows.n > max_n || k->rows.n > READ_MAX ||
            (k->rows.n > 1 && before >= max_bytes))
            break;
        pl__buf_reset(info);
        pl__buf_reset(state);
        pl__kvs_reset(rows);
        st = pl__buf_append(info, k->info.data, k->info.len);
        if (!st)
            st = pl__buf_append(state, k->state.data, k->state.len);
        for (size_t r = 0; !st && r < k->rows.n; r++)
            st = pl__kvs_add(rows, pl__kvs_key(&k->rows, r), k->rows.e[r].klen,
                             pl__kvs_val(&k->rows, r), k->rows.e[r].vlen);
        *num = k->num;
        k->used = ++c->tick;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

void pl__pg_cache_free(pl__pg_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < RUNS; i++)
        if (c->k[i].num)
            drop(c, &c->k[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
