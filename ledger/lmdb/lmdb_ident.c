/*
 * lmdb_ident.c -- what a file must be before LMDB maps it, and what makes
 * an LMDB environment a policyledger store.
 *
 * THE FILE: LMDB maps the data file and trusts its two meta pages.  A file
 * cut short (a copy that stopped, a full disk) still has them, and they
 * name pages past the file's end: touching one is SIGBUS.  So the meta
 * pages are read here with pread() before LMDB is given the file, and a
 * file shorter than the newer meta page's last page is refused.  The meta
 * page, as lmdb.h's MDB_meta lays it out on a Z-byte size_t machine (8 on
 * 64-bit), after the page header (mp_pgno: Z, mp_pad: 2, mp_flags: 2,
 * mp_lower and mp_upper: 2 each):
 *
 *   | offset         | field                | here                        |
 *   |----------------|----------------------|-----------------------------|
 *   | H = Z + 8      | mm_magic (u32)       | 0xBEEFC0DE                  |
 *   | H + 4          | mm_version (u32)     | 1                           |
 *   | H + 8          | mm_address (ptr)     | -                           |
 *   | H + 8 + Z      | mm_mapsize           | -                           |
 *   | H + 8 + 2Z     | mm_dbs[0] (free DB)  | its md_pad is the page size |
 *   | ... + 4 + 2+2  | md_branch_pages..    | 5 words; md_root the last   |
 *   | H + 16 + 7Z    | mm_dbs[1] (main DB)  | md_root checked             |
 *   | H + 24 + 12Z   | mm_last_pg           | the last page in use        |
 *   | H + 24 + 13Z   | mm_txnid             | the newer meta page wins    |
 *
 * Each MDB_db is md_pad (u32), md_flags (u16), md_depth (u16), then five
 * words: md_branch_pages, md_leaf_pages, md_overflow_pages, md_entries,
 * md_root.  Meta page 0 is at offset 0, meta page 1 at the page size.
 *
 * THE IDENTITY: a store's `meta` database holds `identity` =
 * "policyledger store" (written when the store is created) beside `format`
 * = 1 (u32 BE).  An environment whose main database is empty is new; one
 * with the identity is a store; one without it but with `format` and the
 * databases runs, state, steps and journal is a store made before the
 * identity was written (a read-write open adds it); anything else belongs
 * to another program, and nothing is created in it.
 */
#include "lmdb_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MDB_MAGIC_VALUE 0xBEEFC0DEu
#define Z sizeof(size_t)
#define HDR (Z + 8)
#define OFF_MAGIC HDR
#define OFF_VERSION (HDR + 4)
#define OFF_PSIZE (HDR + 8 + 2 * Z)
#define OFF_FREE_ROOT (OFF_PSIZE + 8 + 4 * Z)
#define OFF_MAIN_ROOT (OFF_PSIZE + 8 + 5 * Z + 8 + 4 * Z)
#define OFF_LAST_PG (HDR + 24 + 12 * Z)
#define OFF_TXNID (HDR + 24 + 13 * Z)
#define META_LEN (OFF_TXNID + Z)
#define P_INVALID_PG (~(size_t)0)

const char pl__lmdb_identity[] = "policyledger store";

static uint32_t rd32(const uint8_t *p, size_t off)
{
    uint32_t v;
    memcpy(&v, p + off, sizeof v);
    return v;
}

static size_t rdz(const uint8_t *p, size_t off)
{
    size_t v;
    memcpy(&v, p + off, sizeof v);
    return v;
}

static bool read_at(int fd, uint8_t *buf, size_t n, off_t at)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, at + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* One look at @p file; @p seen: its size at the look. */
static int check_once(const char *path, const char *file, off_t *seen)
{
    *seen = -1;
    /* O_NONBLOCK: a FIFO's open would wait for a writer; it is refused
     * below, as anything but a regular file is */
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT
                   ? PL_OK
                   : pl__err(errno == EACCES || errno == EPERM ? PL_EACCES
                                                               : PL_ESTORE,
                             "store '%s': %s", path, strerror(errno));
    struct stat sb;
    uint8_t m[2][META_LEN];
    int st = PL_OK;
    if (fstat(fd, &sb)) {
        st = pl__err(PL_ESTORE, "store '%s': %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = pl__err(PL_ECORRUPT, "'%s' is not a policyledger store", path);
        goto done;
    }
    *seen = sb.st_size;
    if (sb.st_size == 0)
        goto done; /* LMDB writes a new environment into an empty file */
    if ((uint64_t)sb.st_size < META_LEN || !read_at(fd, m[0], META_LEN, 0) ||
        rd32(m[0], OFF_MAGIC) != MDB_MAGIC_VALUE) {
        st = pl__err(PL_ECORRUPT, "'%s' is not an LMDB store", path);
        goto done;
    }
    uint32_t psize = rd32(m[0], OFF_PSIZE);
    if (psize < 512 || psize > 65536 || (psize & (psize - 1))) {
        st = pl__err(PL_ECORRUPT, "store '%s': its meta page is damaged", path);
        goto done;
    }
    if ((uint64_t)sb.st_size < 2 * (uint64_t)psize ||
        !read_at(fd, m[1], META_LEN, (off_t)psize)) {
        st = pl__err(PL_ECORRUPT,
                     "store '%s' is truncated: %lld bytes, shorter than its "
                     "two meta pages of %u bytes; it was not opened",
                     path, (long long)sb.st_size, psize);
        goto done;
    }
    int newer = 0;
    for (int i = 0; i < 2; i++) {
        if (rd32(m[i], OFF_MAGIC) != MDB_MAGIC_VALUE ||
            rd32(m[i], OFF_VERSION) != 1) {
            st = pl__err(PL_ECORRUPT,
                         "store '%s': meta page %d is damaged or of another "
                         "LMDB version",
                         path, i);
            goto done;
        }
        if (rdz(m[i], OFF_TXNID) > rdz(m[newer], OFF_TXNID))
            newer = i;
    }
    size_t last = rdz(m[newer], OFF_LAST_PG);
    size_t roots[2] = {rdz(m[newer], OFF_FREE_ROOT),
                       rdz(m[newer], OFF_MAIN_ROOT)};
    uint64_t need = ((uint64_t)last + 1) * psize;
    if (last >= ((uint64_t)1 << 48) / psize || need > (uint64_t)sb.st_size) {
        st = pl__err(PL_ECORRUPT,
                     "store '%s' is truncated: %lld bytes, but its last page "
                     "(%zu) ends at byte %llu; it was not opened",
                     path, (long long)sb.st_size, last,
                     (unsigned long long)need);
        goto done;
    }
    for (int i = 0; i < 2; i++)
        if (roots[i] != P_INVALID_PG && roots[i] > last) {
            st = pl__err(PL_ECORRUPT,
                         "store '%s': its meta page names page %zu past its "
                         "last page %zu",
                         path, roots[i], last);
            goto done;
        }
done:
    close(fd);
    return st;
}

/*
 * A store another process is making, or committing to, grows while it is
 * looked at: its size read before a meta page its writer wrote after it
 * would read as truncated.  A file found short is looked at again while it
 * is still growing; one whose size stays is what it looked.
 */
int pl__lmdb_check_file(const char *path, const char *file)
{
    int st = PL_OK;
    for (int tries = 0; tries < 8; tries++) {
        off_t seen;
        st = check_once(path, file, &seen);
        struct stat sb;
        if (st != PL_ECORRUPT || seen < 0 || stat(file, &sb) ||
            sb.st_size == seen)
            break;
    }
    return st;
}

int pl__lmdb_identify(MDB_txn *txn, pl__lmdb_kind *kind)
{
    MDB_dbi main, meta, other;
    MDB_stat ms;
    int rc = mdb_dbi_open(txn, NULL, 0, &main);
    if (!rc)
        rc = mdb_stat(txn, main, &ms);
    if (rc)
        return rc;
    if (!ms.ms_entries) {
        *kind = PL__LMDB_EMPTY;
        return 0;
    }
    *kind = PL__LMDB_FOREIGN;
    rc = mdb_dbi_open(txn, "meta", 0, &meta);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
        return 0;
    if (rc)
        return rc;
    MDB_val k = {8, "identity"}, v;
    rc = mdb_get(txn, meta, &k, &v);
    if (!rc) {
        if (v.mv_size == sizeof pl__lmdb_identity - 1 &&
            !memcmp(v.mv_data, pl__lmdb_identity, v.mv_size))
            *kind = PL__LMDB_STORE;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    k.mv_size = 6;
    k.mv_data = "format";
    rc = mdb_get(txn, meta, &k, &v);
    if (rc == MDB_NOTFOUND || (!rc && v.mv_size != 4))
        return 0;
    if (rc)
        return rc;
    static const char *const names[] = {"runs", "state", "steps", "journal"};
    for (size_t i = 0; i < PL__ARRAY_LEN(names); i++) {
        rc = mdb_dbi_open(txn, names[i], 0, &other);
        if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
            return 0;
        if (rc)
            return rc;
    }
    *kind = PL__LMDB_OLD_STORE;
    return 0;
}

int pl__lmdb_refuse_kind(const char *path, pl__lmdb_kind kind, bool must_exist)
{
    if (kind == PL__LMDB_FOREIGN)
        return pl__err(PL_ECORRUPT,
                       "'%s' is an LMDB environment of another program, not "
                       "a policyledger store: nothing was written to it",
                       path);
    if (kind == PL__LMDB_EMPTY && must_exist)
        return pl__err(PL_ENOTFOUND,
                       "store '%s' does not exist (its file "
                       "holds no store)",
                       path);
    return PL_OK;
}

int pl__lmdb_probe(const char *path, bool dir, bool must_exist)
{
    MDB_env *env;
    MDB_txn *txn = NULL;
    pl__lmdb_kind kind = PL__LMDB_STORE;
    int rc = mdb_env_create(&env);
    if (rc)
        return pl__err(PL_ENOMEM, "store '%s': %s", path, mdb_strerror(rc));
    if (!(rc = mdb_env_set_maxdbs(env, 8)) &&
        !(rc = mdb_env_open(env, path,
                            MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS |
                                (dir ? 0 : MDB_NOSUBDIR),
                            0600)) &&
        !(rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)))
        rc = pl__lmdb_identify(txn, &kind);
    if (txn)
        mdb_txn_abort(txn);
    mdb_env_close(env);
    if (rc == MDB_INVALID || rc == EINVAL)
        return pl__err(PL_ECORRUPT, "'%s' is not an LMDB store", path);
    if (rc == MDB_VERSION_MISMATCH)
        return pl__err(PL_EVERSION, "store '%s': %s", path, mdb_strerror(rc));
    if (rc)
        return pl__err(PL_ESTORE, "store '%s': %s", path, mdb_strerror(rc));
    return pl__lmdb_refuse_kind(path, kind, must_exist);
}
