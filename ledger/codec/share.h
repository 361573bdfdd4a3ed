/*
 * share.h -- large strings stored once per run: a step record whose large
 * strings a step of the same run already holds is stored as a shared
 * value that refers to those bytes.  The format is written down at the top
 * of share.c.
 */
#ifndef PL_SHARE_H
#define PL_SHARE_H

#include "util.h"

/* Strings shorter than this are always stored where they are. */
#define PL__SHARE_MIN ((size_t)64 * 1024)
/* The strings a run remembers as places to refer to. */
#define PL__SHARE_KEEP 32

typedef struct pl__share_place {
    uint8_t sfx[4 * (PL_MAX_DEPTH + 1)]; /* the step's key after the run */
    uint8_t sfx_len;
    uint32_t off, len; /* the string's bytes in that step's stored value */
    uint8_t sha[PL_HASH_LEN];
} pl__share_place;

/* What a run wrote that later steps may refer to: the large strings of
 * its steps stored whole. */
typedef struct pl__share_table {
    pl__share_place at[PL__SHARE_KEEP];
    size_t n, next; /* next: the slot to reuse once full */
} pl__share_table;

/* Whether a stored step value is a shared value (else a plain record). */
static inline bool pl__share_is(const uint8_t *v, size_t n)
{
    return n >= 2 && v[0] == 0xc1;
}

/*
 * Store the step record @p rec (under @p key, of @p klen bytes) as a shared
 * value when a string of it at least PL__SHARE_MIN long is one @p t
 * remembers: the value is appended to @p out and *shared set.  Otherwise
 * nothing is appended, and @p t remembers the record's large strings.
 * PL_OK, or PL_ENOMEM.
 */
PL__HIDDEN int pl__share_pack(pl__buf *out, bool *shared, pl__share_table *t,
                              const uint8_t *key, size_t klen,
                              const uint8_t *rec, size_t rlen) PL__MUST_CHECK;

/* The stored value of the step whose key is @p key (@p klen bytes) of the
 * same run, borrowed until the next call: PL_OK, or PL_ENOTFOUND when
 * there is none, or another status with a message. */
typedef int (*pl__share_get_fn)(const uint8_t *key, size_t klen,
                                const uint8_t **val, size_t *vlen, void *user);

/*
 * The record a shared value @p v (of step @p key) stands for, into @p out
 * (reset first), each referred string read with @p get.  A value that is
 * not well formed, or refers to what is not there, is PL_ECORRUPT naming
 * the store @p where; a version this code does not know, PL_EVERSION.
 */
PL__HIDDEN int pl__share_unpack(pl__buf *out, const uint8_t *key, size_t klen,
                                const uint8_t *v, size_t n,
                                pl__share_get_fn get, void *user,
                                const char *where) PL__MUST_CHECK;

#endif /* PL_SHARE_H */
