/*
 * store_lmdb.c -- the store on LMDB.
 *
 * LAYOUT: one LMDB environment, four named databases.
 *
 *   | database | key                           | value                      |
 *   |----------|-------------------------------|----------------------------|
 *   | meta     | "format"                      | u32 BE store format (1)    |
 *   |          | "next_run"                    | u64 BE next run number     |
 *   | runs     | run id (bytes)                | u64 BE run number, then    |
 *   |          |                               | its info map (runrec.c)    |
 *   | state    | u64 BE run number             | run state map (runrec.c)   |
 *   | steps    | u64 BE run number, u32 BE per | step record (record.c)     |
 *   |          | path component, u32 BE seq    |                            |
 *
 *   A step's key is its position in the run's tree.  The callee of the
 *   action_call at root step c has the ledger 0.c, whose steps run|c|t sort
 *   between run|c (the action_call) and run|c+1 (its action_result).  So:
 *   - a whole call -- its action_call, everything the callee did, and its
 *     action_result -- is one contiguous key range, and the commit of an
 *     idempotent call writes one run of adjacent keys into one leaf page;
 *   - a run's steps, read in key order, are its execution tree in order;
 *   - one ledger is read by one cursor that steps over its calls' small
 *     subtrees and seeks past big ones (pl__store_read).
 *   All runs are listed from `runs` without touching `steps`.  Run ids made
 *   by the engine are UUIDv7, so `runs` lists them oldest first.
 *
 * DURABILITY: sync mode commits with LMDB's full fsync of data and meta page;
 * process mode opens with MDB_NOSYNC (the OS page cache holds the commit, so
 * a crashed process loses nothing, a crashed machine may).
 *
 * JOURNAL (group commit): a group of concurrent runs' batches would dirty
 * one leaf page per run, and a disk pays for every scattered page it syncs.
 * So a group commit of two or more batches appends all its steps as one
 * record to `journal` (u64 BE sequence -> entries: u32 count, then per step
 * u16 key length, key, u32 value length, value): a few contiguous pages per
 * fsync.  (A lone batch is put in place: it dirties one leaf either way.)
 * Once the journal fills JOURNAL_MAX_PAGES pages, a transaction of its own
 * (pl__store_maintain, which the group's leader runs after it has woken the
 * group) moves its steps, in key order, to `steps` and empties it, writing
 * each run's leaves once for many commits.  Readers never look in the
 * journal: the engine calls pl__store_settle() (which does that move)
 * before reading steps that may be there.  So a run whose earlier steps
 * are journaled and later ones in place reads the same as any other: the
 * move puts each step at its own key.  Everything happens inside LMDB
 * transactions, so a crash leaves either the journal record or its moved
 * steps, never half of either.
 *
 * TAIL: a synced commit that makes the data file longer has the file system
 * log the file's new size and blocks along with the data: on ext4 that
 * flush cost 270 us where one that rewrites blocks already in the file cost
 * 120 us, and a run's commits lengthen the file every ~15 calls.  So a
 * store that syncs keeps the file written with zeros past LMDB's last page
 * (LMDB reads nothing past it, and looks at the file's size only to copy
 * it): when less than half of a tail of TAIL_MIN, or an eighth of the
 * pages in use, is left, keep_tail() writes and syncs a whole one at the
 * start of the next write transaction (1-3 ms, every few hundred kB the
 * store grows).  It writes under LMDB's writer lock and past the file's end
 * only, so it never touches a page another writer wrote; and through a file
 * description of its own, so that a write error its fdatasync meets is
 * still reported to LMDB's next one.  If it fails (a full disk, say), it
 * cuts the file back and the store stops keeping a tail.
 *
 * GROWTH: when a write meets MDB_MAP_FULL the transaction is aborted (nothing
 * written is lost) and the map is doubled, up to map_size_max, under an
 * exclusive lock: LMDB may only resize while this process has no
 * transaction open, so every transaction holds the lock shared.  A map
 * resized by another process (MDB_MAP_RESIZED) is adopted the same way.
 * Read transactions are short (a bounded batch of records is copied out), so
 * replay never pins old pages or blocks growth for long.
 */
#include "platform.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#define DEFAULT_MAP_SIZE ((size_t)64 << 20)

struct pl__store {
    MDB_env *env;
    MDB_dbi meta, runs, state, steps, journal;
    pthread_rwlock_t resize; /* shared: any txn; exclusive: set_mapsize */
    atomic_bool journal_full; /* the journal is due to be moved */
    size_t map_size;
    size_t map_size_max;
    dev_t dev;
    ino_t ino;
    char *path;
    /* the zeroed tail (see TAIL), touched under LMDB's writer lock only */
    bool tail;      /* keep one: the store syncs and writing it works */
    int fd;         /* the data file, opened apart from LMDB's own */
    off_t psize;    /* LMDB's page size */
    off_t file_end; /* the file's size when last seen */
};

/* ---- one store per file per process ---------------------------------------- */

typedef struct open_entry {
    dev_t dev;
    ino_t ino;
    struct open_entry *next;
} open_entry;

static pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
static open_entry *g_open;

static bool open_find(dev_t dev, ino_t ino)
{
    for (open_entry *e = g_open; e; e = e->next)
        if (e->dev == dev && e->ino == ino)
            return true;
    return false;
}

static void open_remove(dev_t dev, ino_t ino)
{
    for (open_entry **pp = &g_open; *pp; pp = &(*pp)->next) {
        if ((*pp)->dev == dev && (*pp)->ino == ino) {
            open_entry *e = *pp;
            *pp = e->next;
            free(e);
            return;
        }
    }
}

/* ---- errors ------------------------------------------------------------------- */

static int lmdb_err(const pl__store *s, int rc, const char *what)
{
    int st = PL_ESTORE;
    if (rc == MDB_MAP_FULL)
        st = PL_EMAPFULL;
    else if (rc == ENOMEM)
        st = PL_ENOMEM;
    else if (rc == MDB_CORRUPTED || rc == MDB_INVALID || rc == MDB_INCOMPATIBLE
             || rc == MDB_BAD_VALSIZE)
        st = PL_ECORRUPT;
    else if (rc == MDB_VERSION_MISMATCH)
        st = PL_EVERSION;
    return pl__err(st, "store '%s': %s: %s", s ? s->path : "?", what,
                   mdb_strerror(rc));
}

/* ---- keys and lists --------------------------------------------------------------- */

size_t pl__ledger_prefix(uint8_t *out, uint64_t run, const uint32_t *comps,
                         unsigned depth)
{
    pl__put_be64(out, run);
    for (unsigned i = 0; i < depth; i++)
        pl__put_be32(out + 8 + 4 * i, comps[i]);
    return 8 + 4 * (size_t)depth;
}

bool pl__key_parse(const uint8_t *key, size_t len, uint64_t *run,
                   uint32_t *comps, unsigned *depth, uint32_t *seq)
{
    if (len < 12 || (len - 8) % 4 != 0 || len > PL__KEY_MAX)
        return false;
    *run = pl__get_be64(key);
    unsigned d = (unsigned)((len - 8) / 4 - 1);
    for (unsigned i = 0; i < d; i++)
        comps[i] = pl__get_be32(key + 8 + 4 * i);
    *depth = d;
    *seq = pl__get_be32(key + len - 4);
    return true;
}

int pl__kvs_begin(pl__kvs *l, const uint8_t *key, size_t klen)
{
    pl__kv *grown = pl__grow(l->e, &l->cap, l->n, sizeof *grown, 16);
    if (!grown)
        return pl__err(PL_ENOMEM, "out of memory growing a batch");
    l->e = grown;
    pl__kv *e = &l->e[l->n];
    e->koff = l->data.len;
    e->klen = klen;
    int rc = pl__buf_append(&l->data, key, klen);
    if (rc)
        return rc;
    e->voff = l->data.len;
    e->vlen = 0;
    return PL_OK;
}

void pl__kvs_end(pl__kvs *l)
{
    pl__kv *e = &l->e[l->n];
    e->vlen = l->data.len - e->voff;
    l->n++;
}

void pl__kvs_cancel(pl__kvs *l) { l->data.len = l->e[l->n].koff; }

int pl__kvs_add(pl__kvs *l, const uint8_t *key, size_t klen,
                const uint8_t *val, size_t vlen)
{
    int rc = pl__kvs_begin(l, key, klen);
    if (!rc)
        rc = pl__buf_append(&l->data, val, vlen);
    if (rc) {
        if (l->n < l->cap)
            pl__kvs_cancel(l);
        return rc;
    }
    pl__kvs_end(l);
    return PL_OK;
}

void pl__kvs_reset(pl__kvs *l)
{
    l->data.len = 0;
    l->n = 0;
}

void pl__kvs_free(pl__kvs *l)
{
    pl__buf_free(&l->data);
    free(l->e);
    memset(l, 0, sizeof *l);
}

void pl__batch_free(pl__batch *b)
{
    pl__kvs_free(&b->steps);
    pl__buf_free(&b->state);
}

/* ---- transactions and growth ---------------------------------------------------- */

static void resize_lock_shared(pl__store *s) { pthread_rwlock_rdlock(&s->resize); }
static void resize_unlock(pl__store *s) { pthread_rwlock_unlock(&s->resize); }

/* Adopt a map size grown by another process.  Called with no lock held. */
static int adopt_map_size(pl__store *s)
{
    pthread_rwlock_wrlock(&s->resize);
    int rc = mdb_env_set_mapsize(s->env, 0);
    if (!rc) {
        MDB_envinfo info;
        mdb_env_info(s->env, &info);
        s->map_size = info.me_mapsize;
    }
    pthread_rwlock_unlock(&s->resize);
    return rc ? lmdb_err(s, rc, "adopting the map size") : PL_OK;
}

/* Grow the map after MDB_MAP_FULL was seen at size @p seen. */
static int grow(pl__store *s, size_t seen)
{
    int st = PL_OK;
    pthread_rwlock_wrlock(&s->resize);
    if (s->map_size == seen) { /* nobody grew it meanwhile */
        size_t next = seen > SIZE_MAX / 2 ? SIZE_MAX : seen * 2;
        if (s->map_size_max && next > s->map_size_max)
            next = s->map_size_max;
        if (next <= seen) {
            st = pl__err(PL_EMAPFULL, "store '%s' is full at %zu bytes and "
                                      "may not grow past map_size_max (%zu "
                                      "bytes); nothing written was lost",
                         s->path, seen, s->map_size_max);
        } else {
            int rc = mdb_env_set_mapsize(s->env, next);
            if (rc)
                st = pl__err(PL_EMAPFULL, "store '%s' is full at %zu bytes and "
                                          "cannot grow to %zu: %s; nothing "
                                          "written was lost",
                             s->path, seen, next, mdb_strerror(rc));
            else
                s->map_size = next;
        }
    }
    pthread_rwlock_unlock(&s->resize);
    return st;
}

/*
 * Begin a transaction holding the resize lock shared.  On success the caller
 * must end it with txn_end().
 */
static int txn_begin(pl__store *s, bool write, MDB_txn **txn, size_t *map_seen)
{
    for (;;) {
        resize_lock_shared(s);
        *map_seen = s->map_size;
        int rc = mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, txn);
        if (!rc)
            return PL_OK;
        resize_unlock(s);
        if (rc != MDB_MAP_RESIZED)
            return lmdb_err(s, rc, write ? "beginning a write"
                                         : "beginning a read");
        int st = adopt_map_size(s);
        if (st)
            return st;
    }
}

static void txn_abort(pl__store *s, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    resize_unlock(s);
}

static int txn_commit(pl__store *s, MDB_txn *txn)
{
    int rc = mdb_txn_commit(txn);
    resize_unlock(s);
    return rc;
}

/* ---- the zeroed tail ------------------------------------------------------------- */

#define TAIL_MIN ((off_t)1 << 20)
#define TAIL_MAX ((off_t)64 << 20)

static int write_zeros(int fd, off_t from, off_t to)
{
    static const uint8_t zeros[64 << 10];
    while (from < to) {
        size_t n = to - from < (off_t)sizeof zeros ? (size_t)(to - from)
                                                   : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, from);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        from += w;
    }
    return fdatasync(fd);
}

/* Called in a write transaction, which holds LMDB's writer lock. */
static void keep_tail(pl__store *s)
{
    MDB_envinfo info;
    mdb_env_info(s->env, &info);
    off_t used = ((off_t)info.me_last_pgno + 1) * s->psize;
    off_t tail = used / 8 < TAIL_MIN ? TAIL_MIN
                 : used / 8 > TAIL_MAX ? TAIL_MAX : used / 8;
    off_t map = (off_t)s->map_size;
    off_t low = used + tail / 2 < map ? used + tail / 2 : map;
    off_t want = used + tail < map ? used + tail : map;
    if (low <= s->file_end)
        return;
    struct stat sb;
    if (fstat(s->fd, &sb)) {
        s->tail = false;
        return;
    }
    s->file_end = sb.st_size;
    if (low <= s->file_end) /* another process wrote one */
        return;
    if (write_zeros(s->fd, s->file_end, want)) {
        s->tail = false;
        if (ftruncate(s->fd, s->file_end)) {
            /* a partial tail is zeros past LMDB's end: harmless */
        }
        return;
    }
    s->file_end = want;
}

/*
 * Run @p body in a write transaction, retrying after growing the map when it
 * fills.  body returns an LMDB code (0 = commit) or, with *st set, a status.
 */
typedef int (*write_body)(pl__store *s, MDB_txn *txn, void *user, int *st);

static int write_txn(pl__store *s, write_body body, void *user)
{
    for (;;) {
        MDB_txn *txn;
        size_t seen;
        int st = txn_begin(s, true, &txn, &seen);
        if (st)
            return st;
        if (s->tail)
            keep_tail(s);
        st = PL_OK;
        int rc = body(s, txn, user, &st);
        if (rc || st) {
            txn_abort(s, txn);
        } else {
            rc = txn_commit(s, txn);
        }
        if (st)
            return st;
        if (rc == MDB_MAP_FULL) {
            st = grow(s, seen);
            if (st)
                return st;
            continue;
        }
        if (rc == MDB_MAP_RESIZED) {
            st = adopt_map_size(s);
            if (st)
                return st;
            continue;
        }
        return rc ? lmdb_err(s, rc, "writing") : PL_OK;
    }
}

/* ---- open / close --------------------------------------------------------------- */

typedef struct open_ctx {
    bool fresh;
} open_ctx;

static int open_body(pl__store *s, MDB_txn *txn, void *user, int *st)
{
    (void)user;
    int rc;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) ||
        (rc = mdb_dbi_open(txn, "runs", MDB_CREATE, &s->runs)) ||
        (rc = mdb_dbi_open(txn, "state", MDB_CREATE, &s->state)) ||
        (rc = mdb_dbi_open(txn, "steps", MDB_CREATE, &s->steps)) ||
        (rc = mdb_dbi_open(txn, "journal", MDB_CREATE, &s->journal))) {
        *st = rc == MDB_INCOMPATIBLE
                  ? pl__err(PL_ECORRUPT, "'%s' is an LMDB store but not a "
                                         "policyledger store", s->path)
                  : lmdb_err(s, rc, "opening databases");
        return rc;
    }
    MDB_val k = {6, "format"}, v;
    rc = mdb_get(txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        MDB_stat ms;
        mdb_stat(txn, s->steps, &ms);
        size_t nsteps = ms.ms_entries;
        mdb_stat(txn, s->runs, &ms);
        if (nsteps || ms.ms_entries) {
            *st = pl__err(PL_ECORRUPT, "store '%s' holds runs but no format "
                                       "record", s->path);
            return 0;
        }
        uint8_t fmt[4];
        pl__put_be32(fmt, 1);
        v.mv_size = 4;
        v.mv_data = fmt;
        return mdb_put(txn, s->meta, &k, &v, 0);
    }
    if (rc)
        return rc;
    if (v.mv_size != 4) {
        *st = pl__err(PL_ECORRUPT, "store '%s' has a malformed format record",
                      s->path);
        return 0;
    }
    uint32_t fmt = pl__get_be32(v.mv_data);
    if (fmt != 1)
        *st = pl__err(PL_EVERSION, "store '%s' has format %u; this build "
                                   "reads format 1", s->path, fmt);
    return 0;
}

static void data_file(char *out, size_t n, const char *path, bool dir)
{
    snprintf(out, n, dir ? "%s/data.mdb" : "%s", path);
}

int pl__store_open(pl__store **out, const char *path,
                   const pl__store_options *opts)
{
    *out = NULL;
    struct stat sb;
    bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char file[4096];
    if (strlen(path) + 10 > sizeof file)
        return pl__err(PL_EINVAL, "store path is too long");
    data_file(file, sizeof file, path, dir);

    pl__store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = pl__strdup(path))) {
        free(s);
        return pl__err(PL_ENOMEM, "out of memory opening a store");
    }
    s->fd = -1;
    pl__rwlock_init_writer_first(&s->resize);
    s->map_size = opts->map_size ? opts->map_size : DEFAULT_MAP_SIZE;
    s->map_size_max = opts->map_size_max;
    if (s->map_size_max && s->map_size > s->map_size_max)
        s->map_size = s->map_size_max;

    int st = PL_OK, rc;
    pthread_mutex_lock(&g_open_mu);
    if (stat(file, &sb) == 0 && open_find(sb.st_dev, sb.st_ino)) {
        pthread_mutex_unlock(&g_open_mu);
        st = pl__err(PL_EBUSY, "store '%s' is open already in this process",
                     path);
        goto fail;
    }
    if ((rc = mdb_env_create(&s->env))) {
        pthread_mutex_unlock(&g_open_mu);
        st = lmdb_err(s, rc, "creating the environment");
        goto fail;
    }
    mdb_env_set_maxdbs(s->env, 8);
    mdb_env_set_mapsize(s->env, s->map_size);
    if (opts->max_readers)
        mdb_env_set_maxreaders(s->env, opts->max_readers);
    unsigned flags = MDB_NOTLS | (opts->nosync ? MDB_NOSYNC : 0) |
                     (dir ? 0 : MDB_NOSUBDIR);
    rc = mdb_env_open(s->env, path, flags, 0600);
    if (!rc && stat(file, &sb) == 0) {
        open_entry *e = malloc(sizeof *e);
        if (e) {
            e->dev = s->dev = sb.st_dev;
            e->ino = s->ino = sb.st_ino;
            e->next = g_open;
            g_open = e;
        } else {
            rc = ENOMEM;
        }
    } else if (!rc) {
        rc = errno;
    }
    pthread_mutex_unlock(&g_open_mu);
    if (rc) {
        if (rc == MDB_INVALID)
            st = pl__err(PL_ECORRUPT, "'%s' is not an LMDB store", path);
        else if (rc == ENOENT)
            st = pl__err(PL_EINVAL, "store '%s': its directory does not exist",
                         path);
        else
            st = lmdb_err(s, rc, "opening");
        goto fail;
    }
    {
        MDB_envinfo info;
        mdb_env_info(s->env, &info);
        s->map_size = info.me_mapsize; /* may be larger than asked */
        MDB_stat ms;
        mdb_env_stat(s->env, &ms);
        s->psize = ms.ms_psize;
        /* its own file description, so that its fdatasync never takes
         * a write error that LMDB's next one must report */
        if (!opts->nosync)
            s->fd = open(file, O_WRONLY | O_CLOEXEC);
        s->tail = s->fd >= 0;
    }
    if ((st = write_txn(s, open_body, NULL)))
        goto fail;
    *out = s;
    return PL_OK;
fail:
    pl__store_close(s);
    return st;
}

void pl__store_close(pl__store *s)
{
    if (!s)
        return;
    if (s->env) {
        pthread_mutex_lock(&g_open_mu);
        mdb_env_close(s->env);
        if (s->ino)
            open_remove(s->dev, s->ino);
        pthread_mutex_unlock(&g_open_mu);
    }
    if (s->fd >= 0)
        close(s->fd);
    pthread_rwlock_destroy(&s->resize);
    free(s->path);
    free(s);
}

const char *pl__store_path(const pl__store *s) { return s->path; }

/* ---- commit ---------------------------------------------------------------------- */

/* The journal is moved to its place once it holds this many pages: the more
 * commits one move covers, the fewer times each run's leaf is written. */
#define JOURNAL_MAX_PAGES 2048

typedef struct commit_ctx {
    pl__batch *const *batches;
    size_t n;
    bool journal;
} commit_ctx;

/* Put one step in its place, refusing to change an existing one. */
static int put_step(pl__store *s, MDB_txn *txn, MDB_val *k, const MDB_val *v,
                    bool *append, uint64_t run, int *st)
{
    /* on MDB_KEYEXIST, LMDB points the value at the stored one: keep the
     * caller's (the journal move compares the two) */
    MDB_val data = *v;
    int rc = MDB_KEYEXIST;
    if (*append)
        rc = mdb_put(txn, s->steps, k, &data, MDB_APPEND);
    if (rc == MDB_KEYEXIST) {
        *append = false;
        data = *v;
        rc = mdb_put(txn, s->steps, k, &data, MDB_NOOVERWRITE);
    }
    if (rc == MDB_KEYEXIST)
        *st = pl__err(PL_EBUSY, "a step of run #%llu exists already at the "
                                "position being appended: another process "
                                "wrote to this run",
                      (unsigned long long)run);
    return rc;
}

static int put_state(pl__store *s, MDB_txn *txn, const pl__batch *bt)
{
    if (!bt->state.len)
        return 0;
    uint8_t key[8];
    pl__put_be64(key, bt->run);
    MDB_val k = {8, key}, v = {bt->state.len, bt->state.data};
    return mdb_put(txn, s->state, &k, &v, 0);
}

typedef struct jstep {
    MDB_val k, v;
    uint64_t run; /* the key's first 8 bytes */
    size_t at;    /* position in the journal */
} jstep;

static int key_cmp(const MDB_val *x, const MDB_val *y)
{
    size_t n = x->mv_size < y->mv_size ? x->mv_size : y->mv_size;
    int c = memcmp(x->mv_data, y->mv_data, n);
    return c ? c : (x->mv_size > y->mv_size) - (x->mv_size < y->mv_size);
}

static int jstep_cmp_key(const void *a, const void *b)
{
    return key_cmp(&((const jstep *)a)->k, &((const jstep *)b)->k);
}

static int jstep_cmp_run(const void *a, const void *b)
{
    const jstep *x = a, *y = b;
    if (x->run != y->run)
        return x->run < y->run ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/*
 * Sort the journal's steps into key order.  A run appends its steps in key
 * order, so sorting by run and then journal position gives key order with
 * integer compares only; one pass checks that, and anything else (which
 * the engine does not write today) falls back to comparing whole keys.
 */
static void sort_steps(jstep *all, size_t n)
{
    qsort(all, n, sizeof *all, jstep_cmp_run);
    for (size_t i = 1; i < n; i++) {
        if (key_cmp(&all[i - 1].k, &all[i].k) >= 0) {
            qsort(all, n, sizeof *all, jstep_cmp_key);
            return;
        }
    }
}

/* Move every journal record to `steps`, in key order, and empty it. */
static int checkpoint_body(pl__store *s, MDB_txn *txn, void *user, int *st)
{
    (void)user;
    MDB_cursor *cur;
    MDB_val k, v;
    jstep *all = NULL;
    size_t n = 0, cap = 0;
    int rc = mdb_cursor_open(txn, s->journal, &cur);
    if (rc)
        return rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        const uint8_t *p = v.mv_data, *end = p + v.mv_size;
        if (end - p < 4) {
            rc = MDB_CORRUPTED;
            break;
        }
        uint32_t count = pl__get_be32(p);
        p += 4;
        for (uint32_t i = 0; i < count; i++) {
            if (end - p < 2 ||
                (size_t)(end - p) < 2u + (p[0] << 8 | p[1]) + 4u) {
                rc = MDB_CORRUPTED;
                break;
            }
            size_t klen = (size_t)(p[0] << 8 | p[1]);
            const uint8_t *key = p + 2;
            size_t vlen = pl__get_be32(key + klen);
            const uint8_t *val = key + klen + 4;
            /* a step key: run (8), path components and seq (4 each) */
            if (klen < 12 || klen > PL__KEY_MAX || (klen - 8) % 4 ||
                (size_t)(end - val) < vlen) {
                rc = MDB_CORRUPTED;
                break;
            }
            jstep *a = pl__grow(all, &cap, n, sizeof *a, 256);
            if (!a) {
                rc = ENOMEM;
                break;
            }
            all = a;
            all[n] = (jstep){{klen, (void *)key}, {vlen, (void *)val},
                             pl__get_be64(key), n};
            n++;
            p = val + vlen;
        }
        if (!rc && p != end)
            rc = MDB_CORRUPTED; /* bytes after the last step */
        if (rc)
            break;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    if (rc == MDB_CORRUPTED)
        *st = pl__err(PL_ECORRUPT, "store '%s': a journal record is "
                                   "malformed", s->path);
    if (!rc && n) {
        sort_steps(all, n);
        bool append = true;
        for (size_t i = 0; !rc && i < n; i++) {
            rc = put_step(s, txn, &all[i].k, &all[i].v, &append, all[i].run,
                          st);
            if (rc == MDB_KEYEXIST) {
                /* moved already?  Only an identical step is harmless. */
                MDB_val have;
                if (!mdb_get(txn, s->steps, &all[i].k, &have) &&
                    have.mv_size == all[i].v.mv_size &&
                    !memcmp(have.mv_data, all[i].v.mv_data, have.mv_size)) {
                    *st = PL_OK;
                    rc = 0;
                }
            }
        }
    }
    free(all);
    if (!rc)
        rc = mdb_drop(txn, s->journal, 0);
    return rc;
}

static int journal_append(pl__store *s, MDB_txn *txn, const commit_ctx *c)
{
    size_t size = 4, count = 0;
    for (size_t b = 0; b < c->n; b++) {
        const pl__kvs *l = &c->batches[b]->steps;
        for (size_t i = 0; i < l->n; i++)
            size += 2 + l->e[i].klen + 4 + l->e[i].vlen;
        count += l->n;
    }
    if (count) {
        MDB_cursor *cur;
        MDB_val k, v;
        uint64_t seq = 1;
        int rc = mdb_cursor_open(txn, s->journal, &cur);
        if (rc)
            return rc;
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
        mdb_cursor_close(cur);
        if (!rc && k.mv_size == 8)
            seq = pl__get_be64(k.mv_data) + 1;
        else if (rc != MDB_NOTFOUND)
            return rc ? rc : MDB_CORRUPTED;
        uint8_t key[8];
        pl__put_be64(key, seq);
        k = (MDB_val){8, key};
        v = (MDB_val){size, NULL};
        if ((rc = mdb_put(txn, s->journal, &k, &v,
                          MDB_APPEND | MDB_RESERVE)))
            return rc;
        uint8_t *p = v.mv_data;
        pl__put_be32(p, (uint32_t)count);
        p += 4;
        for (size_t b = 0; b < c->n; b++) {
            const pl__kvs *l = &c->batches[b]->steps;
            for (size_t i = 0; i < l->n; i++) {
                p[0] = (uint8_t)(l->e[i].klen >> 8);
                p[1] = (uint8_t)l->e[i].klen;
                memcpy(p + 2, pl__kvs_key(l, i), l->e[i].klen);
                p += 2 + l->e[i].klen;
                pl__put_be32(p, (uint32_t)l->e[i].vlen);
                memcpy(p + 4, pl__kvs_val(l, i), l->e[i].vlen);
                p += 4 + l->e[i].vlen;
            }
        }
    }
    MDB_stat ms;
    int rc = mdb_stat(txn, s->journal, &ms);
    if (!rc && ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages >=
                   JOURNAL_MAX_PAGES)
        atomic_store_explicit(&s->journal_full, true, memory_order_relaxed);
    return rc;
}

/*
 * Create the run a batch names: assign the next run number and store its
 * info and first state.  A taken id skips the batch (rc PL_EEXIST).
 */
static int create_run(pl__store *s, MDB_txn *txn, pl__batch *bt)
{
    MDB_val k = {strlen(bt->create_id), (void *)bt->create_id}, v;
    int rc = mdb_get(txn, s->runs, &k, &v);
    if (!rc) {
        bt->rc = PL_EEXIST;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    MDB_val nk = {8, "next_run"};
    uint64_t num = 1;
    rc = mdb_get(txn, s->meta, &nk, &v);
    if (!rc && v.mv_size == 8)
        num = pl__get_be64(v.mv_data);
    else if (rc != MDB_NOTFOUND)
        return rc ? rc : MDB_CORRUPTED;
    uint8_t next[8];
    pl__put_be64(next, num + 1);
    v.mv_size = 8;
    v.mv_data = next;
    if ((rc = mdb_put(txn, s->meta, &nk, &v, 0)))
        return rc;
    /* the runs value is the number followed by the info record */
    v.mv_size = 8 + bt->create_info->len;
    if ((rc = mdb_put(txn, s->runs, &k, &v, MDB_RESERVE)))
        return rc;
    pl__put_be64(v.mv_data, num);
    memcpy((uint8_t *)v.mv_data + 8, bt->create_info->data,
           bt->create_info->len);
    bt->run = num;
    return 0;
}

static int commit_body(pl__store *s, MDB_txn *txn, void *user, int *st)
{
    commit_ctx *c = user;
    int rc;
    for (size_t b = 0; b < c->n; b++) {
        pl__batch *bt = c->batches[b];
        bt->rc = PL_OK;
        if (bt->create_id) {
            if ((rc = create_run(s, txn, bt)))
                return rc;
            if (bt->rc)
                continue; /* a taken id skips the batch */
        }
        const pl__kvs *l = &bt->steps;
        /*
         * A run appends in key order, and the newest run's keys are the
         * largest: put_step() tries MDB_APPEND, which fills pages instead
         * of splitting them in half.  A key that is not at the end is put
         * the ordinary way (which still refuses an existing key), and the
         * batch stops trying.
         */
        bool append = true;
        for (size_t i = 0; !c->journal && i < l->n; i++) {
            MDB_val k = {l->e[i].klen, (void *)pl__kvs_key(l, i)};
            MDB_val v = {l->e[i].vlen, (void *)pl__kvs_val(l, i)};
            if ((rc = put_step(s, txn, &k, &v, &append, bt->run, st)))
                return rc;
        }
        if ((rc = put_state(s, txn, bt)))
            return rc;
    }
    return c->journal ? journal_append(s, txn, c) : 0;
}

int pl__store_commit(pl__store *s, pl__batch *const *batches, size_t n,
                     bool journal)
{
    commit_ctx c = {batches, n, journal};
    return write_txn(s, commit_body, &c);
}

void pl__store_maintain(pl__store *s)
{
    if (atomic_load_explicit(&s->journal_full, memory_order_relaxed) &&
        pl__store_settle(s) == PL_OK)
        atomic_store_explicit(&s->journal_full, false, memory_order_relaxed);
}

int pl__store_settle(pl__store *s)
{
    MDB_txn *txn;
    size_t seen;
    MDB_stat ms;
    int st = txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    int rc = mdb_stat(txn, s->journal, &ms);
    txn_abort(s, txn);
    if (rc)
        return lmdb_err(s, rc, "reading the journal");
    return ms.ms_entries ? write_txn(s, checkpoint_body, NULL) : PL_OK;
}

/* ---- reading ------------------------------------------------------------------------ */

/* Where the cursor stands relative to step want of a ledger. */
typedef enum {
    AT_END,     /* past the ledger's end */
    AT_STEP,    /* on step want */
    AT_SUBTREE, /* inside the subtree of an earlier step */
    AT_GAP      /* past step want, which is missing */
} where_t;

static where_t classify(const MDB_val *k, const uint8_t *prefix, size_t plen,
                        uint32_t want)
{
    if (k->mv_size < plen + 4 || memcmp(k->mv_data, prefix, plen) != 0)
        return AT_END;
    uint32_t x = pl__get_be32((const uint8_t *)k->mv_data + plen);
    if (x < want)
        return AT_SUBTREE;
    if (x > want || k->mv_size != plen + 4)
        return AT_GAP;
    return AT_STEP;
}

/* Records of a subtree a ledger read steps through before it seeks past. */
#define WALK_MAX 8

int pl__store_read(pl__store *s, const uint8_t *prefix, size_t prefix_len,
                   uint32_t from_seq, size_t max_n, size_t max_bytes,
                   pl__kvs *out)
{
    pl__kvs_reset(out);
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    size_t seen;
    int st = txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    uint8_t key[PL__KEY_MAX];
    memcpy(key, prefix, prefix_len);
    MDB_val k, v;
    uint32_t want = from_seq;
    size_t bytes = 0;
    int rc = mdb_cursor_open(txn, s->steps, &cur);
    bool seek = true;
    unsigned inside = 0;
    while (!rc) {
        if (seek) {
            pl__put_be32(key + prefix_len, want);
            k.mv_size = prefix_len + 4;
            k.mv_data = key;
            rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        } else {
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        if (rc)
            break;
        where_t where = classify(&k, prefix, prefix_len, want);
        if (where == AT_END)
            break;
        if (where == AT_SUBTREE && !seek) {
            /* inside the subtree of the last step (a call's callee): step
             * over a small one, which is cheaper than a seek; hop over a
             * big one */
            if (++inside >= WALK_MAX)
                seek = true;
            continue;
        }
        if (where != AT_STEP) { /* AT_GAP */
            st = pl__err(PL_ECORRUPT, "store '%s': a ledger is missing its "
                                      "step %u", s->path, want);
            break;
        }
        if ((st = pl__kvs_begin(out, NULL, 0)) ||
            (st = pl__buf_append(&out->data, v.mv_data, v.mv_size)))
            break;
        pl__kvs_end(out);
        bytes += v.mv_size;
        if (++want == 0 || out->n >= max_n || bytes >= max_bytes)
            break;
        seek = false;
        inside = 0;
    }
    if (!st && rc && rc != MDB_NOTFOUND)
        st = lmdb_err(s, rc, "reading a ledger");
    if (cur)
        mdb_cursor_close(cur);
    txn_abort(s, txn);
    return st;
}

/*
 * Copy up to @p max_n records of @p dbi whose keys start with @p prefix
 * (plen bytes, may be 0), from just after the key @p after (NULL: from the
 * first key with the prefix), in key order.
 */
static int page(pl__store *s, MDB_dbi dbi, const void *prefix, size_t plen,
                const void *after, size_t after_len, size_t max_n,
                pl__kvs *out, const char *what)
{
    pl__kvs_reset(out);
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    size_t seen;
    int st = txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_val k = {after ? after_len : plen, (void *)(after ? after : prefix)};
    MDB_val v;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (!rc)
        rc = mdb_cursor_get(cur, &k, &v, k.mv_size ? MDB_SET_RANGE : MDB_FIRST);
    if (!rc && after && k.mv_size == after_len &&
        memcmp(k.mv_data, after, after_len) == 0)
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    while (!rc && out->n < max_n) {
        if (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0)
            break;
        if ((st = pl__kvs_add(out, k.mv_data, k.mv_size, v.mv_data,
                              v.mv_size)))
            break;
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (!st && rc && rc != MDB_NOTFOUND)
        st = lmdb_err(s, rc, what);
    if (cur)
        mdb_cursor_close(cur);
    txn_abort(s, txn);
    return st;
}

int pl__store_scan(pl__store *s, uint64_t run, const uint8_t *after,
                   size_t after_len, size_t max_n, pl__kvs *out)
{
    uint8_t prefix[8];
    pl__put_be64(prefix, run);
    return page(s, s->steps, prefix, 8, after, after_len, max_n, out,
                "scanning a run");
}

/* Steps one read transaction of pl__store_each_step() hands out. */
#define EACH_MAX 1024

int pl__store_each_step(pl__store *s, uint64_t run, pl__step_fn fn,
                        void *user)
{
    uint8_t first[8], last[PL__KEY_MAX];
    size_t last_len = 0; /* the last key handed out; 0: none yet */
    pl__put_be64(first, run);
    bool more = true;
    int st = PL_OK;
    while (more && !st) {
        MDB_txn *txn;
        MDB_cursor *cur = NULL;
        size_t seen, n = 0;
        if ((st = txn_begin(s, false, &txn, &seen)))
            return st;
        MDB_val k = {last_len ? last_len : 8, last_len ? last : first}, v;
        int rc = mdb_cursor_open(txn, s->steps, &cur);
        if (!rc)
            rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (!rc && last_len && k.mv_size == last_len &&
            memcmp(k.mv_data, last, last_len) == 0)
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        more = false;
        while (!rc && k.mv_size >= 8 && memcmp(k.mv_data, first, 8) == 0) {
            if ((st = fn(k.mv_data, k.mv_size, v.mv_data, v.mv_size, user)))
                break;
            if (++n == EACH_MAX) { /* go on after it in a new transaction */
                if (k.mv_size > sizeof last) {
                    st = pl__err(PL_ECORRUPT, "store '%s': run #%llu has a "
                                              "step key of %zu bytes",
                                 s->path, (unsigned long long)run,
                                 k.mv_size);
                    break;
                }
                memcpy(last, k.mv_data, k.mv_size);
                last_len = k.mv_size;
                more = true;
                break;
            }
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        if (!st && rc && rc != MDB_NOTFOUND)
            st = lmdb_err(s, rc, "reading a run's steps");
        if (cur)
            mdb_cursor_close(cur);
        txn_abort(s, txn);
    }
    return st;
}

/* ---- runs ---------------------------------------------------------------------------- */

int pl__store_run_find(pl__store *s, const char *id, uint64_t *num,
                       pl__buf *info)
{
    MDB_txn *txn;
    size_t seen;
    int st = txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = mdb_get(txn, s->runs, &k, &v);
    if (rc == MDB_NOTFOUND) {
        st = pl__err(PL_ENOTFOUND, "no run '%s' in store '%s'", id, s->path);
    } else if (rc) {
        st = lmdb_err(s, rc, "reading a run");
    } else if (v.mv_size < 8) {
        st = pl__err(PL_ECORRUPT, "run '%s' has a malformed record", id);
    } else {
        *num = pl__get_be64(v.mv_data);
        if (info) {
            pl__buf_reset(info);
            st = pl__buf_append(info, (uint8_t *)v.mv_data + 8,
                                v.mv_size - 8);
        }
    }
    txn_abort(s, txn);
    return st;
}

int pl__store_state_get(pl__store *s, uint64_t num, pl__buf *state)
{
    MDB_txn *txn;
    size_t seen;
    int st = txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    uint8_t key[8];
    pl__put_be64(key, num);
    MDB_val k = {8, key}, v;
    int rc = mdb_get(txn, s->state, &k, &v);
    if (rc == MDB_NOTFOUND)
        st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                     (unsigned long long)num);
    else if (rc)
        st = lmdb_err(s, rc, "reading a run state");
    else {
        pl__buf_reset(state);
        st = pl__buf_append(state, v.mv_data, v.mv_size);
    }
    txn_abort(s, txn);
    return st;
}

typedef struct update_ctx {
    uint64_t num;
    pl__state_fn fn;
    void *user;
    pl__buf state;
    pl__kvs extra;
} update_ctx;

static int update_body(pl__store *s, MDB_txn *txn, void *user, int *st)
{
    update_ctx *c = user;
    uint8_t key[8];
    pl__put_be64(key, c->num);
    MDB_val k = {8, key}, v;
    int rc = mdb_get(txn, s->state, &k, &v);
    if (rc == MDB_NOTFOUND) {
        *st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                      (unsigned long long)c->num);
        return 0;
    }
    if (rc)
        return rc;
    pl__buf_reset(&c->state);
    pl__kvs_reset(&c->extra);
    if ((*st = pl__buf_append(&c->state, v.mv_data, v.mv_size)))
        return 0;
    if ((*st = c->fn(&c->state, &c->extra, c->user)))
        return 0;
    v.mv_size = c->state.len;
    v.mv_data = c->state.data;
    if ((rc = mdb_put(txn, s->state, &k, &v, 0)))
        return rc;
    for (size_t i = 0; i < c->extra.n; i++) {
        MDB_val ek = {c->extra.e[i].klen, (void *)pl__kvs_key(&c->extra, i)};
        MDB_val ev = {c->extra.e[i].vlen, (void *)pl__kvs_val(&c->extra, i)};
        rc = mdb_put(txn, s->steps, &ek, &ev, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) {
            *st = pl__err(PL_EBUSY, "a step exists already at the position "
                                    "being written");
            return 0;
        }
        if (rc)
            return rc;
    }
    return 0;
}

int pl__store_state_update(pl__store *s, uint64_t num, pl__state_fn fn,
                           void *user)
{
    update_ctx c = {.num = num, .fn = fn, .user = user};
    int st = write_txn(s, update_body, &c);
    pl__buf_free(&c.state);
    pl__kvs_free(&c.extra);
    return st;
}

int pl__store_runs(pl__store *s, const char *after, size_t max_n, pl__kvs *out)
{
    return page(s, s->runs, "", 0, after, after ? strlen(after) : 0, max_n,
                out, "listing runs");
}
