/*
 * lmdb_bounds.c -- every key and value LMDB hands the store is checked to
 * lie inside the data file before a byte of it is read.
 *
 * LMDB 0.9's pages carry no checksum, and a leaf node's key and data sizes
 * are taken as they are: a flipped bit in a data size makes a value run
 * past the pages in use, past the file's end (touching that is SIGBUS) or
 * past the map (SIGSEGV).  So the store reads through pl__lmdb_get() and
 * pl__lmdb_cursor_get(), never mdb_get() and mdb_cursor_get(): a key or
 * value in the map that ends past the last page in use (the newest meta
 * page's), and past the file's end too, is MDB_CORRUPTED, which
 * pl__lmdb_err() reports as a damaged store.  One that ends inside the
 * file is read; the record's own checks (its checksum, its decoder's
 * bounds) find what is wrong with it.
 *
 * The map's bounds come from /proc/self/maps (base/platform.c), learnt
 * when the store opens and again after each resize (which may move the
 * map), under the resize lock held exclusively, so that every transaction,
 * holding it shared, reads them unchanged.  Until they are known, or when
 * they cannot be, nothing is checked.  A key or value outside the map is
 * in a page a write transaction copied into memory to change it: not
 * checked either (its sizes were not changed by the transaction, and a
 * damaged one is met again, in the map, by the next read).
 */
#include "lmdb_int.h"

#include "platform.h"

#include <sys/stat.h>

void pl__lmdb_map_learn(pl__lmdb_store *s)
{
    s->map_lo = s->map_hi = 0;
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn))
        return;
    /* the main database's first key (a database's name): in the map */
    MDB_dbi main;
    MDB_cursor *c;
    MDB_val k, v;
    if (!mdb_dbi_open(txn, NULL, 0, &main) && !mdb_cursor_open(txn, main, &c)) {
        if (!mdb_cursor_get(c, &k, &v, MDB_FIRST) &&
            !pl__file_mapping(k.mv_data, &s->map_lo, &s->map_hi))
            s->map_lo = s->map_hi = 0;
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
}

/* Whether @p x, in the map, ends by @p end (or is not in the map). */
static bool ends_by(const pl__lmdb_store *s, const MDB_val *x, uintptr_t end)
{
    uintptr_t p = (uintptr_t)x->mv_data;
    if (p < s->map_lo || p >= s->map_hi)
        return true;
    return p <= end && x->mv_size <= end - p;
}

/* @p rc, or MDB_CORRUPTED when @p k or @p v runs past the file. */
static int bounded(pl__lmdb_store *s, int rc, const MDB_val *k,
                   const MDB_val *v)
{
    if (rc || !s->map_lo)
        return rc;
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info))
        return rc;
    uintptr_t used = (uintptr_t)(info.me_last_pgno + 1) * (uintptr_t)s->psize;
    uintptr_t end = used < s->map_hi - s->map_lo ? s->map_lo + used : s->map_hi;
    if ((!k || ends_by(s, k, end)) && ends_by(s, v, end))
        return rc;
    /* past the pages in use: still in the file (a page a write spilled
     * there, the zeroed tail) is read, and checked by its record */
    int fd;
    struct stat sb;
    if (mdb_env_get_fd(s->env, &fd) || fstat(fd, &sb))
        return MDB_CORRUPTED;
    uintptr_t file = (uintptr_t)sb.st_size;
    end = file < s->map_hi - s->map_lo ? s->map_lo + file : s->map_hi;
    return (!k || ends_by(s, k, end)) && ends_by(s, v, end) ? rc
                                                            : MDB_CORRUPTED;
}

int pl__lmdb_get(pl__lmdb_store *s, MDB_txn *txn, MDB_dbi dbi, MDB_val *k,
                 MDB_val *v)
{
    return bounded(s, mdb_get(txn, dbi, k, v), NULL, v);
}

int pl__lmdb_cursor_get(pl__lmdb_store *s, MDB_cursor *c, MDB_val *k,
                        MDB_val *v, MDB_cursor_op op)
{
    return bounded(s, mdb_cursor_get(c, k, v, op), k, v);
}
