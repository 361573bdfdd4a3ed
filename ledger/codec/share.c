/*
 * share.c -- large strings stored once per run.
 *
 * A model's long answer is a string in several steps of its run: the
 * recorded exchange, the result of the call that asked it, its caller's
 * own result.  A step record with a string of at least PL__SHARE_MIN bytes
 * that a step of the same run already holds whole is stored as a SHARED
 * VALUE instead, which refers to those bytes:
 *
 *   | bytes | meaning                                                    |
 *   |-------|------------------------------------------------------------|
 *   | 0     | 0xc1 (a byte msgpack never uses: no record starts with it) |
 *   | 1     | version: 1                                                 |
 *   | then  | pieces, to the end, each one of:                           |
 *   |       | 0x00, u32 n, n bytes: the record's next n bytes            |
 *   |       | 0x01, u8 k, k bytes: a step key after its run number (its  |
 *   |       | path's components and seq, k a multiple of 4), u32 off,    |
 *   |       | u32 n: bytes off..off+n of that step's stored value, a     |
 *   |       | record of the same run stored whole                        |
 *
 * (integers big-endian).  The record is the pieces' bytes in order, and is
 * what every reader sees: the stores put the pieces back together as they
 * read (lmdb_store.c, pg_read.c), so hashes, comparisons, exports and
 * checks see the record byte for byte.  The hash chain covers the record,
 * so a referred step that changed is caught by the chain of the step that
 * refers to it too.
 *
 * The engine keeps, per execution of a run, the places of the large
 * strings it stored whole (pl__share_table, the last PL__SHARE_KEEP), and
 * shares only with those: a step is shared with steps of its own run
 * written before it or in the same commit, never across runs, and what
 * copies a run (fork, import) stores records whole.
 */
#include "share.h"

#include "keys.h"
#include "mp.h"
#include "sha256.h"

#include <stdlib.h>

#define SHARE_V1 1
#define PIECE_BYTES 0x00
#define PIECE_REF 0x01
/* A record put back together is at most this long. */
#define SHARE_MAX ((size_t)1 << 30)

/* ---- writing ------------------------------------------------------------- */

typedef struct span {
    size_t off, len;
} span;

/* The large strings of the payload at @p p (n bytes), record offsets from
 * @p base, into s[] (at most @p max); how many. */
static size_t large_strings(span *s, size_t max, const uint8_t *base,
                            const uint8_t *p, size_t n)
{
    rd r = {p, p + n};
    uint64_t pending = 1;
    size_t k = 0;
    while (pending-- > 0) {
        head h;
        if (rd_head(&r, &h))
            return k;
        if (h.t == T_MAP || h.t == T_ARRAY) {
            uint64_t more = h.t == T_MAP ? 2 * h.u : h.u;
            if (more > rd_left(&r))
                return k; /* not a record this engine encoded */
            pending += more;
        } else if (h.t == T_STR || h.t == T_BIN || h.t == T_EXT) {
            if (h.u > rd_left(&r))
                return k;
            if (h.t == T_STR && h.u >= PL__SHARE_MIN && h.u <= UINT32_MAX &&
                k < max)
                s[k++] = (span){(size_t)(r.p - base), (size_t)h.u};
            r.p += h.u;
        }
    }
    return k;
}

static const pl__share_place *find(const pl__share_table *t, uint32_t len,
                                   const uint8_t sha[PL_HASH_LEN])
{
    for (size_t i = 0; i < t->n; i++)
        if (t->at[i].len == len && memcmp(t->at[i].sha, sha, PL_HASH_LEN) == 0)
            return &t->at[i];
    return NULL;
}

static int put_u32(pl__buf *out, uint32_t v)
{
    uint8_t b[4];
    pl__put_be32(b, v);
    return pl__buf_append(out, b, 4);
}

/* The record's next @p n bytes as a piece (none when n is 0). */
static int put_bytes(pl__buf *out, const uint8_t *p, size_t n)
{
    if (!n)
        return PL_OK;
    uint8_t tag = PIECE_BYTES;
    int st = pl__buf_append(out, &tag, 1);
    if (!st)
        st = put_u32(out, (uint32_t)n);
    return st ? st : pl__buf_append(out, p, n);
}

static int put_ref(pl__buf *out, const pl__share_place *at)
{
    uint8_t tag[2] = {PIECE_REF, at->sfx_len};
    int st = pl__buf_append(out, tag, 2);
    if (!st)
        st = pl__buf_append(out, at->sfx, at->sfx_len);
    if (!st)
        st = put_u32(out, at->off);
    return st ? st : put_u32(out, at->len);
}

int pl__share_pack(pl__buf *out, bool *shared, pl__share_table *t,
                   const uint8_t *key, size_t klen, const uint8_t *rec,
                   size_t rlen)
{
    *shared = false;
    if (rlen < PL__SHARE_MIN || rlen > UINT32_MAX || pl__share_is(rec, rlen) ||
        klen < 12 || klen - 8 > sizeof t->at[0].sfx)
        return PL_OK;
    /* the payload: the record after its header array */
    rd r = {rec, rec + rlen};
    head h;
    if (rd_head(&r, &h) || h.t != T_ARRAY)
        return PL_OK;
    for (uint64_t i = 0; i < h.u; i++) { /* the header: small values */
        head f;
        if (rd_head(&r, &f))
            return PL_OK;
        if ((f.t == T_STR || f.t == T_BIN) && f.u <= rd_left(&r))
            r.p += f.u;
        else if (f.t == T_ARRAY && f.u == 2) /* the link: [uint, bin|uint] */
            h.u += 2;
        else if (f.t == T_STR || f.t == T_BIN || f.t == T_ARRAY ||
                 f.t == T_MAP || f.t == T_EXT)
            return PL_OK;
    }
    span s[PL__SHARE_KEEP];
    size_t n = large_strings(s, PL__SHARE_KEEP, rec, r.p, rd_left(&r));
    const pl__share_place *to[PL__SHARE_KEEP];
    uint8_t sha[PL__SHARE_KEEP][PL_HASH_LEN];
    size_t refs = 0;
    for (size_t i = 0; i < n; i++) {
        int st = pl__sha256(rec + s[i].off, s[i].len, sha[i]);
        if (st)
            return st;
        to[i] = find(t, (uint32_t)s[i].len, sha[i]);
        refs += to[i] != NULL;
    }
    if (!refs) { /* stored whole: later steps may refer to it */
        for (size_t i = 0; i < n; i++) {
            pl__share_place
                *at = &t->at[t->n < PL__SHARE_KEEP ? t->n++ : t->next++];
            t->next %= PL__SHARE_KEEP;
            memcpy(at->sfx, key + 8, klen - 8);
            at->sfx_len = (uint8_t)(klen - 8);
            at->off = (uint32_t)s[i].off;
            at->len = (uint32_t)s[i].len;
            memcpy(at->sha, sha[i], PL_HASH_LEN);
        }
        return PL_OK;
    }
    size_t start = out->len, from = 0;
    uint8_t magic[2] = {0xc1, SHARE_V1};
    int st = pl__buf_append(out, magic, 2);
    for (size_t i = 0; !st && i < n; i++) {
        if (!to[i])
            continue;
        st = put_bytes(out, rec + from, s[i].off - from);
        if (!st)
            st = put_ref(out, to[i]);
        from = s[i].off + s[i].len;
    }
    if (!st)
        st = put_bytes(out, rec + from, rlen - from);
    if (st) {
        out->len = start;
        return st;
    }
    *shared = true;
    return PL_OK;
}

/* ---- reading ------------------------------------------------------------- */

static bool take(const uint8_t **p, const uint8_t *end, size_t n,
                 const uint8_t **at)
{
    if ((size_t)(end - *p) < n)
        return false;
    *at = *p;
    *p += n;
    return true;
}

int pl__share_unpack(pl__buf *out, const uint8_t *key, size_t klen,
                     const uint8_t *v, size_t n, pl__share_get_fn get,
                     void *user, const char *where)
{
    pl__buf_reset(out);
    if (!pl__share_is(v, n) || klen < 8 || klen > PL__KEY_MAX)
        return pl__err(PL_ECORRUPT,
                       "store '%s': a shared step value is "
                       "malformed",
                       where);
    if (v[1] != SHARE_V1)
        return pl__err(PL_EVERSION,
                       "store '%s': a shared step value of version %u, which "
                       "this code does not know",
                       where, (unsigned)v[1]);
    const uint8_t *p = v + 2, *end = v + n, *at;
    while (p < end) {
        uint8_t tag = *p++;
        if (tag == PIECE_BYTES) {
            if (!take(&p, end, 4, &at))
                break;
            uint32_t len = pl__get_be32(at);
            if (!len || !take(&p, end, len, &at))
                break;
            if (out->len + len > SHARE_MAX)
                break;
            int st = pl__buf_append(out, at, len);
            if (st)
                return st;
            continue;
        }
        if (tag != PIECE_REF || !take(&p, end, 1, &at))
            break;
        size_t sl = *at;
        const uint8_t *sfx;
        if (!sl || sl % 4 || 8 + sl > PL__KEY_MAX || !take(&p, end, sl, &sfx) ||
            !take(&p, end, 8, &at))
            break;
        uint32_t off = pl__get_be32(at), len = pl__get_be32(at + 4);
        uint8_t k[PL__KEY_MAX];
        memcpy(k, key, 8);
        memcpy(k + 8, sfx, sl);
        const uint8_t *tv = NULL;
        size_t tn = 0;
        int st = get(k, 8 + sl, &tv, &tn, user);
        if (st == PL_ENOTFOUND)
            return pl__err(PL_ECORRUPT,
                           "store '%s': a shared step value refers to a step "
                           "that is not there",
                           where);
        if (st)
            return st;
        if (pl__share_is(tv, tn) || off > tn || len > tn - off || !len ||
            out->len + len > SHARE_MAX)
            return pl__err(PL_ECORRUPT,
                           "store '%s': a shared step value refers to bytes "
                           "its step does not hold",
                           where);
        if ((st = pl__buf_append(out, tv + off, len)))
            return st;
    }
    if (p != end || !out->len)
        return pl__err(PL_ECORRUPT,
                       "store '%s': a shared step value is malformed", where);
    return PL_OK;
}
