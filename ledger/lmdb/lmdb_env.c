/*
 * lmdb_env.c -- the store's LMDB environment: opening and closing it, one
 * per file per process; its transactions, the map's growth, and the zeroed
 * tail of its data file; and the mapping of LMDB's errors.
 *
 * DURABILITY: sync mode commits with LMDB's full fsync of data and meta page;
 * process mode opens with MDB_NOSYNC (the OS page cache holds the commit, so
 * a crashed process loses nothing, a crashed machine may).
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
#include "lmdb_int.h"

#include "platform.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAP_SIZE ((size_t)64 << 20)

/* ---- one store per file per process -------------------------------------- */

typedef struct open_entry {
    dev_t dev;
    ino_t ino;
    struct open_entry *next;
} open_entry;

static pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
static open_entry *g_open;

/*
 * A child that fork() makes holds none of its parent's stores: LMDB's
 * environments do not survive fork(), so the child must open its own, and
 * never touch the ones it inherited.  So it forgets them, and the list's
 * lock, held across the fork, is in a known state in both processes.
 */
static pthread_once_t g_open_once = PTHREAD_ONCE_INIT;

static void open_fork_prepare(void) { pthread_mutex_lock(&g_open_mu); }

static void open_fork_parent(void) { pthread_mutex_unlock(&g_open_mu); }

static void open_fork_child(void)
{
    while (g_open) {
        open_entry *e = g_open;
        g_open = e->next;
        free(e);
    }
    pthread_mutex_unlock(&g_open_mu);
}

static void open_once(void)
{
    pthread_atfork(open_fork_prepare, open_fork_parent, open_fork_child);
}

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

/* ---- errors -------------------------------------------------------------- */

/* Below this many bytes free, a file system is full for a store: LMDB
 * writes pages of a few kB, many at a time. */
#define FULL_BELOW ((uint64_t)1 << 20)

/*
 * Why a write failed with the file-system error @p rc, when the cause is
 * one a user can remove: a full file system, a quota, the process's file
 * size limit (RLIMIT_FSIZE), a read-only file system, no permission.  LMDB
 * reports a short write as EIO, as a failing disk would, so for EIO the
 * free space and the file size limit are looked at.  Returns the status
 * (PL_ENOSPC, PL_EACCES, or 0 when no such cause is known) and the cause
 * in @p why.
 */
static int fs_cause(const pl__lmdb_store *s, int rc, char *why, size_t n)
{
    struct rlimit rl;
    struct statvfs vs;
    int fd;
    struct stat sb;
    switch (rc) {
    case ENOSPC:
        snprintf(why, n, "no space left on device (ENOSPC)");
        return PL_ENOSPC;
    case EDQUOT:
        snprintf(why, n, "the disk quota is exceeded (EDQUOT)");
        return PL_ENOSPC;
    case EROFS:
        snprintf(why, n, "the file system is read-only (EROFS)");
        return PL_EACCES;
    case EACCES:
    case EPERM:
        snprintf(why, n, "permission denied (%s)",
                 rc == EACCES ? "EACCES" : "EPERM");
        return PL_EACCES;
    case EFBIG:
    case EIO: break;
    default: return 0;
    }
    if (s && s->env && !getrlimit(RLIMIT_FSIZE, &rl) &&
        rl.rlim_cur != RLIM_INFINITY && !mdb_env_get_fd(s->env, &fd) &&
        !fstat(fd, &sb) && (uint64_t)sb.st_size + FULL_BELOW >= rl.rlim_cur) {
        snprintf(
            why, n,
            "the data file reached the process's file size limit (RLIMIT_FSIZE, %llu bytes; EFBIG)",
            (unsigned long long)rl.rlim_cur);
        return PL_ENOSPC;
    }
    if (s && !statvfs(s->path, &vs) &&
        (uint64_t)vs.f_bavail * vs.f_frsize < FULL_BELOW) {
        snprintf(
            why, n,
            "no space left on device (ENOSPC: %llu bytes free; LMDB saw %s)",
            (unsigned long long)vs.f_bavail * vs.f_frsize,
            rc == EIO ? "a short write" : "EFBIG");
        return PL_ENOSPC;
    }
    if (rc == EFBIG) {
        snprintf(why, n, "the file is too large (EFBIG)");
        return PL_ENOSPC;
    }
    return 0;
}

int pl__lmdb_err(const pl__lmdb_store *s, int rc, const char *what)
{
    char why[192];
    int st = fs_cause(s, rc, why, sizeof why);
    if (st)
        return pl__err(st, "store '%s': %s: %s; nothing durable was lost",
                       s ? s->path : "?", what, why);
    st = PL_ESTORE;
    if (rc == MDB_MAP_FULL)
        st = PL_EMAPFULL;
    else if (rc == ENOMEM)
        st = PL_ENOMEM;
    else if (rc == MDB_CORRUPTED || rc == MDB_INVALID ||
             rc == MDB_INCOMPATIBLE || rc == MDB_BAD_VALSIZE)
        st = PL_ECORRUPT;
    else if (rc == MDB_VERSION_MISMATCH)
        st = PL_EVERSION;
    if (rc == MDB_CORRUPTED) /* LMDB's pages, or a size past the file */
        return pl__err(st, "store '%s' is damaged: %s: %s", s ? s->path : "?",
                       what, mdb_strerror(rc));
    return pl__err(st, "store '%s': %s: %s", s ? s->path : "?", what,
                   mdb_strerror(rc));
}

/* ---- transactions and growth --------------------------------------------- */

static void resize_lock_shared(pl__lmdb_store *s)
{
    pthread_rwlock_rdlock(&s->resize);
}
static void resize_unlock(pl__lmdb_store *s)
{
    pthread_rwlock_unlock(&s->resize);
}

/* Adopt a map size grown by another process.  Called with no lock held. */
static int adopt_map_size(pl__lmdb_store *s)
{
    pthread_rwlock_wrlock(&s->resize);
    int rc = mdb_env_set_mapsize(s->env, 0);
    MDB_envinfo info;
    if (!rc && !(rc = mdb_env_info(s->env, &info)))
        s->map_size = info.me_mapsize;
    pl__lmdb_map_learn(s); /* the map may have moved */
    pthread_rwlock_unlock(&s->resize);
    return rc ? pl__lmdb_err(s, rc, "adopting the map size") : PL_OK;
}

/* Grow the map after MDB_MAP_FULL was seen at size @p seen. */
static int grow(pl__lmdb_store *s, size_t seen)
{
    int st = PL_OK;
    pthread_rwlock_wrlock(&s->resize);
    if (s->map_size == seen) { /* nobody grew it meanwhile */
        size_t next = seen > SIZE_MAX / 2 ? SIZE_MAX : seen * 2;
        if (s->map_size_max && next > s->map_size_max)
            next = s->map_size_max;
        if (next <= seen) {
            st = pl__err(
                PL_EMAPFULL,
                "store '%s' is full at %zu bytes and may not grow past map_size_max (%zu bytes); nothing written was lost",
                s->path, seen, s->map_size_max);
        } else {
            int rc = mdb_env_set_mapsize(s->env, next);
            if (rc)
                st = pl__err(
                    PL_EMAPFULL,
                    "store '%s' is full at %zu bytes and cannot grow to %zu: %s; nothing written was lost",
                    s->path, seen, next, mdb_strerror(rc));
            else
                s->map_size = next;
            pl__lmdb_map_learn(s); /* the map may have moved */
        }
    }
    pthread_rwlock_unlock(&s->resize);
    return st;
}

int pl__lmdb_txn_begin(pl__lmdb_store *s, bool write, MDB_txn **txn,
                       size_t *map_seen)
{
    for (;;) {
        resize_lock_shared(s);
        *map_seen = s->map_size;
        int rc = mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, txn);
        if (!rc)
            return PL_OK;
        resize_unlock(s);
        if (rc != MDB_MAP_RESIZED)
            return pl__lmdb_err(s, rc,
                                write ? "beginning a write"
                                      : "beginning a read");
        int st = adopt_map_size(s);
        if (st)
            return st;
    }
}

void pl__lmdb_txn_abort(pl__lmdb_store *s, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    resize_unlock(s);
}

static int txn_commit(pl__lmdb_store *s, MDB_txn *txn)
{
    int rc = mdb_txn_commit(txn);
    resize_unlock(s);
    return rc;
}

/* ---- the zeroed tail ----------------------------------------------------- */

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
static void keep_tail(pl__lmdb_store *s)
{
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info))
        return; /* no tail this time; the commit goes on */
    off_t used = ((off_t)info.me_last_pgno + 1) * s->psize;
    off_t tail = used / 8 < TAIL_MIN   ? TAIL_MIN
                 : used / 8 > TAIL_MAX ? TAIL_MAX
                                       : used / 8;
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

/* Run @p body in a write transaction: see lmdb_int.h. */
int pl__lmdb_write(pl__lmdb_store *s, write_body body, void *user)
{
    if (s->read_only)
        return pl__err(PL_ESTATE, "store '%s' is open read-only", s->path);
    for (;;) {
        MDB_txn *txn;
        size_t seen;
        int st = pl__lmdb_txn_begin(s, true, &txn, &seen);
        if (st)
            return st;
        if (s->tail)
            keep_tail(s);
        st = PL_OK;
        int rc = body(s, txn, user, &st);
        if (rc || st) {
            pl__lmdb_txn_abort(s, txn);
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
        return rc ? pl__lmdb_err(s, rc, "writing") : PL_OK;
    }
}

/* ---- open / close -------------------------------------------------------- */

typedef struct open_ctx {
    bool must_exist;
} open_ctx;

/* A read-write open: create what a new store needs, or add what an older
 * store lacks; never anything in another program's environment. */
static int open_body(pl__lmdb_store *s, MDB_txn *txn, void *user, int *st)
{
    const open_ctx *oc = user;
    pl__lmdb_kind kind;
    int rc = pl__lmdb_identify(txn, &kind);
    if (rc) {
        *st = pl__lmdb_err(s, rc, "reading the environment");
        return rc;
    }
    if ((*st = pl__lmdb_refuse_kind(s->path, kind, oc->must_exist)))
        return 0;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) ||
        (rc = mdb_dbi_open(txn, "runs", MDB_CREATE, &s->runs)) ||
        (rc = mdb_dbi_open(txn, "state", MDB_CREATE, &s->state)) ||
        (rc = mdb_dbi_open(txn, "steps", MDB_CREATE, &s->steps)) ||
        (rc = mdb_dbi_open(txn, "journal", MDB_CREATE, &s->journal)) ||
        (rc = mdb_dbi_open(txn, "writers", MDB_CREATE, &s->writers)) ||
        (rc = mdb_dbi_open(txn, "held", MDB_CREATE, &s->held)) ||
        (rc = pl__lmdb_lease_open(s, txn, true)) ||
        (rc = pl__lmdb_sched_open(s, txn, true)) ||
        (rc = pl__lmdb_time_open(s, txn, true)) ||
        (rc = pl__lmdb_flow_open(s, txn, true)) ||
        (rc = pl__lmdb_tombs_open(s, txn, true))) {
        /* a first map too small for the databases: grown (the writer's
         * loop, on MDB_MAP_FULL with no status), as any write's */
        if (rc != MDB_MAP_FULL)
            *st =
                rc == MDB_INCOMPATIBLE
                    ? pl__err(
                          PL_ECORRUPT,
                          "'%s' is an LMDB store but not a policyledger store",
                          s->path)
                    : pl__lmdb_err(s, rc, "opening databases");
        return rc;
    }
    if (kind != PL__LMDB_STORE) {
        MDB_val ik = {8, "identity"};
        MDB_val iv = {strlen(pl__lmdb_identity), (void *)pl__lmdb_identity};
        if ((rc = mdb_put(txn, s->meta, &ik, &iv, 0)))
            return rc;
    }
    s->has_held = true;
    MDB_val k = {6, "format"}, v;
    rc = pl__lmdb_get(s, txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        MDB_stat ms;
        if ((rc = mdb_stat(txn, s->steps, &ms)))
            return rc;
        size_t nsteps = ms.ms_entries;
        if ((rc = mdb_stat(txn, s->runs, &ms)))
            return rc;
        if (nsteps || ms.ms_entries) {
            *st = pl__err(PL_ECORRUPT,
                          "store '%s' holds runs but no format record",
                          s->path);
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
        *st = pl__err(PL_EVERSION,
                      "store '%s' has format %u; this build reads format 1",
                      s->path, fmt);
    return 0;
}

/* Refuse another program's environment before anything is written. */
static int identify_read(pl__lmdb_store *s, bool must_exist)
{
    MDB_txn *txn;
    size_t seen;
    pl__lmdb_kind kind;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    int rc = pl__lmdb_identify(txn, &kind);
    pl__lmdb_txn_abort(s, txn);
    if (rc)
        return pl__lmdb_err(s, rc, "reading the environment");
    return pl__lmdb_refuse_kind(s->path, kind, must_exist);
}

/* A read-only open: the databases must be there already. */
static int open_read_only(pl__lmdb_store *s)
{
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    const char *names[] = {"meta", "runs", "state", "steps", "journal"};
    MDB_dbi *dbis[] = {&s->meta, &s->runs, &s->state, &s->steps, &s->journal};
    pl__lmdb_kind kind;
    int rc = pl__lmdb_identify(txn, &kind);
    if (!rc && (kind == PL__LMDB_FOREIGN || kind == PL__LMDB_EMPTY)) {
        pl__lmdb_txn_abort(s, txn);
        return pl__lmdb_refuse_kind(s->path, kind, true);
    }
    for (size_t i = 0; !rc && i < PL__ARRAY_LEN(names); i++)
        rc = mdb_dbi_open(txn, names[i], 0, dbis[i]);
    /* stores of older builds have no held runs to look for */
    s->has_held = !rc && !mdb_dbi_open(txn, "writers", 0, &s->writers) &&
                  !mdb_dbi_open(txn, "held", 0, &s->held);
    if (!rc)
        rc = pl__lmdb_lease_open(s, txn, false);
    if (!rc)
        rc = pl__lmdb_sched_open(s, txn, false);
    if (!rc)
        rc = pl__lmdb_time_open(s, txn, false);
    if (!rc)
        rc = pl__lmdb_flow_open(s, txn, false);
    if (!rc)
        rc = pl__lmdb_tombs_open(s, txn, false);
    MDB_val k = {6, "format"}, v;
    if (!rc)
        rc = pl__lmdb_get(s, txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
        st = pl__err(PL_ECORRUPT, "'%s' is not a policyledger store", s->path);
    else if (rc)
        st = pl__lmdb_err(s, rc, "opening databases");
    else if (v.mv_size != 4)
        st = pl__err(PL_ECORRUPT, "store '%s' has a malformed format record",
                     s->path);
    else if (pl__get_be32(v.mv_data) != 1)
        st = pl__err(PL_EVERSION,
                     "store '%s' has format %u; this build reads format 1",
                     s->path, pl__get_be32(v.mv_data));
    if (st) {
        pl__lmdb_txn_abort(s, txn);
        return st;
    }
    /* handles opened in a read transaction outlive it only by a commit */
    rc = txn_commit(s, txn);
    return rc ? pl__lmdb_err(s, rc, "opening databases") : PL_OK;
}

/* The last committed transaction's id: every write, by any process, moves
 * it (it is read from the shared lock file, not the map). */
int pl__lmdb_mark(pl__lmdb_store *s, uint64_t *out)
{
    MDB_envinfo info;
    int rc = mdb_env_info(s->env, &info);
    if (rc)
        return pl__lmdb_err(s, rc, "reading the last transaction");
    *out = (uint64_t)info.me_last_txnid;
    return PL_OK;
}

int pl__lmdb_stats_get(pl__lmdb_store *s, pl__store_stats *out)
{
    memset(out, 0, sizeof *out);
    MDB_txn *txn;
    size_t seen;
    int st = pl__lmdb_txn_begin(s, false, &txn, &seen);
    if (st)
        return st;
    MDB_envinfo info;
    MDB_stat ms;
    int rc = mdb_env_info(s->env, &info);
    if (!rc) {
        out->map_bytes = info.me_mapsize;
        out->page_size = (uint64_t)s->psize;
        out->used_pages = (uint64_t)info.me_last_pgno + 1;
        rc = mdb_stat(txn, s->runs, &ms);
    }
    if (!rc) {
        out->runs = ms.ms_entries;
        rc = mdb_stat(txn, s->steps, &ms);
    }
    if (!rc)
        out->step_records = ms.ms_entries;
    /* the free list: database 0, each record a list of page numbers */
    MDB_cursor *c = NULL;
    if (!rc)
        rc = mdb_cursor_open(txn, 0, &c);
    MDB_val k, v;
    for (int op = MDB_FIRST; !rc; op = MDB_NEXT) {
        rc = pl__lmdb_cursor_get(s, c, &k, &v, op);
        if (!rc && v.mv_size >= sizeof(size_t)) {
            /* a list of page numbers led by its length, bounded by the
             * record's size in case the length is damaged */
            size_t n;
            memcpy(&n, v.mv_data, sizeof n);
            size_t room = v.mv_size / sizeof(size_t) - 1;
            out->free_pages += n < room ? n : room;
        }
    }
    if (rc == MDB_NOTFOUND)
        rc = 0;
    mdb_cursor_close(c);
    pl__lmdb_txn_abort(s, txn);
    if (rc)
        return pl__lmdb_err(s, rc, "reading statistics");
    struct stat sb;
    char file[4096];
    snprintf(file, sizeof file, "%s", s->path);
    if (stat(s->path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(file, sizeof file, "%s/data.mdb", s->path);
    if (stat(file, &sb) == 0)
        out->file_bytes = (uint64_t)sb.st_size;
    return PL_OK;
}

static void data_file(char *out, size_t n, const char *path, bool dir)
{
    snprintf(out, n, dir ? "%s/data.mdb" : "%s", path);
}

/*
 * Nothing is mapped, and no lock file made, before the data file is known
 * to be whole, and to be a store if it holds anything.
 */
static int check_before_map(const char *path, const char *file,
                            const char *lock, bool dir, bool must_exist)
{
    struct stat sb;
    if (must_exist && stat(file, &sb) != 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? pl__err(PL_ENOTFOUND, "store '%s' does not exist", path)
                   : pl__err(errno == EACCES || errno == EPERM ? PL_EACCES
                                                               : PL_ESTORE,
                             "store '%s': %s", path, strerror(errno));
    if (must_exist && !S_ISREG(sb.st_mode))
        return pl__err(PL_ECORRUPT, "'%s' is not a policyledger store", path);
    if (must_exist && sb.st_size == 0)
        return pl__err(PL_ECORRUPT, "'%s' is an empty file, not a store", path);
    int st = pl__lmdb_check_file(path, file);
    if (st)
        return st;
    if (stat(file, &sb) == 0 && sb.st_size > 0 && stat(lock, &sb) != 0 &&
        errno == ENOENT)
        return pl__lmdb_probe(path, dir, must_exist);
    return PL_OK;
}

/*
 * A file refused as empty, short or not LMDB may be a store another
 * process is making: LMDB's first opener holds byte 0 of the lock file
 * exclusively while it writes the meta pages.  Wait (at most CREATOR_WAIT_MS)
 * for such a holder to let go; true if the file has a lock file, so that it
 * is worth looking at again: the maker may have finished, and even closed,
 * between the look that refused it and this one.  Only looked at when this
 * process has no store of that file open: closing a descriptor of the lock
 * file would drop the locks LMDB holds on it here.
 */
#define CREATOR_WAIT_MS 5000

/* Whether the directory that holds the file @p path is there. */
static bool dir_exists(const char *path)
{
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash)
        return true;          /* the working directory */
    slash[slash == d] = '\0'; /* "/x.db": "/" */
    struct stat sb;
    return stat(d, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool creator_settled(const char *file, const char *lock)
{
    struct stat sb;
    pthread_once(&g_open_once, open_once);
    pthread_mutex_lock(&g_open_mu);
    bool mine = stat(file, &sb) == 0 && open_find(sb.st_dev, sb.st_ino);
    int fd = mine ? -1 : open(lock, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    for (int ms = 0; fd >= 0 && ms < CREATOR_WAIT_MS; ms++) {
        struct flock fl = {
            .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        if (fcntl(fd, F_GETLK, &fl) || fl.l_type == F_UNLCK)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    bool again = fd >= 0;
    if (fd >= 0)
        close(fd);
    pthread_mutex_unlock(&g_open_mu);
    return again;
}

int pl__lmdb_open(pl__lmdb_store **out, const char *path,
                  const pl__store_options *opts)
{
    *out = NULL;
    struct stat sb;
    bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char file[4096];
    if (strlen(path) + 10 > sizeof file)
        return pl__err(PL_EINVAL, "store path is too long");
    data_file(file, sizeof file, path, dir);
    bool must_exist = opts->read_only || opts->no_create;
    char lock[4096 + 16];
    snprintf(lock, sizeof lock, dir ? "%s/lock.mdb" : "%s-lock", path);
    int st = check_before_map(path, file, lock, dir, must_exist);
    if (st == PL_ECORRUPT && creator_settled(file, lock)) {
        pl__err_clear();
        st = check_before_map(path, file, lock, dir, must_exist);
    }
    if (st)
        return st;

    pl__lmdb_store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = pl__strdup(path))) {
        free(s);
        return pl__err(PL_ENOMEM, "out of memory opening a store");
    }
    s->fd = -1;
    uint64_t pstart = 0;
    bool zombie;
    int64_t pid = (int64_t)getpid();
    if (!pl__proc_stat(pid, &pstart, &zombie))
        pstart = 0;
    pl__put_be64(s->writer, (uint64_t)pid);
    pl__put_be64(s->writer + 8, pstart);
    pl__rwlock_init_writer_first(&s->resize);
    s->map_size = opts->map_size ? opts->map_size : DEFAULT_MAP_SIZE;
    s->map_size_max = opts->map_size_max;
    if (s->map_size_max && s->map_size > s->map_size_max)
        s->map_size = s->map_size_max;

    int rc;
    pthread_once(&g_open_once, open_once);
    pthread_mutex_lock(&g_open_mu);
    if (stat(file, &sb) == 0 && open_find(sb.st_dev, sb.st_ino)) {
        pthread_mutex_unlock(&g_open_mu);
        st = pl__err(PL_EBUSY, "store '%s' is open already in this process",
                     path);
        goto fail;
    }
    if ((rc = mdb_env_create(&s->env))) {
        pthread_mutex_unlock(&g_open_mu);
        st = pl__lmdb_err(s, rc, "creating the environment");
        goto fail;
    }
    if ((rc = mdb_env_set_maxdbs(s->env, 16)) ||
        (rc = mdb_env_set_mapsize(s->env, s->map_size)) ||
        (opts->max_readers &&
         (rc = mdb_env_set_maxreaders(s->env, opts->max_readers)))) {
        pthread_mutex_unlock(&g_open_mu);
        st = pl__lmdb_err(s, rc, "configuring the environment");
        goto fail;
    }
    s->read_only = opts->read_only;
    unsigned flags = MDB_NOTLS | (opts->nosync ? MDB_NOSYNC : 0) |
                     (dir ? 0 : MDB_NOSUBDIR) |
                     (opts->read_only ? MDB_RDONLY : 0);
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
        if (rc == MDB_INVALID || (opts->read_only && rc == EINVAL))
            st = pl__err(PL_ECORRUPT, "'%s' is not an LMDB store", path);
        else if (rc == ENOENT && !dir_exists(path))
            st = pl__err(PL_EINVAL, "store '%s': its directory does not exist",
                         path);
        else if (rc == ENOENT) /* a directory no file is made in (/proc) */
            st = pl__err(PL_EINVAL,
                         "store '%s': no file can be made in its directory",
                         path);
        else if (rc == ENOMEM) /* the map is the address space it takes */
            st = pl__err(PL_ENOMEM,
                         "store '%s': its map of %zu bytes (map_size) "
                         "cannot be mapped: %s; a smaller map_size grows "
                         "as the store needs",
                         path, s->map_size, strerror(rc));
        else
            st = pl__lmdb_err(s, rc, "opening");
        goto fail;
    }
    {
        MDB_envinfo info;
        if ((rc = mdb_env_info(s->env, &info))) {
            st = pl__lmdb_err(s, rc, "reading the environment");
            goto fail;
        }
        s->map_size = info.me_mapsize; /* may be larger than asked */
        MDB_stat ms;
        if ((rc = mdb_env_stat(s->env, &ms))) {
            st = pl__lmdb_err(s, rc, "reading the environment");
            goto fail;
        }
        s->psize = ms.ms_psize;
        /* its own file description, so that its fdatasync never takes
         * a write error that LMDB's next one must report */
        if (!opts->nosync && !opts->read_only)
            s->fd = open(file, O_WRONLY | O_CLOEXEC);
    }
    /* no tail is written until the store is known to be one */
    if (!opts->read_only && (st = identify_read(s, must_exist)))
        goto fail;
    s->tail = s->fd >= 0;
    open_ctx oc = {must_exist};
    if ((st = opts->read_only ? open_read_only(s)
                              : pl__lmdb_write(s, open_body, &oc)))
        goto fail;
    pl__lmdb_map_learn(s);
    *out = s;
    return PL_OK;
fail:
    pl__lmdb_close(s);
    return st;
}

void pl__lmdb_close(pl__lmdb_store *s)
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

const char *pl__lmdb_path(const pl__lmdb_store *s) { return s->path; }
