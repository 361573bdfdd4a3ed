/*
 * sha256.h -- SHA-256 (OpenSSL), in one call or in parts.
 */
#ifndef PL_SHA256_H
#define PL_SHA256_H

#include "util.h"

/* A reusable digest context.  One per thread at a time. */
typedef struct pl__hasher pl__hasher;

PL__HIDDEN int pl__hasher_new(pl__hasher **out) PL__MUST_CHECK;
PL__HIDDEN void pl__hasher_free(pl__hasher *h);
/* Make @p dst's state @p src's: a digest of a prefix, saved to go on from. */
PL__HIDDEN void pl__hasher_copy(pl__hasher *dst, const pl__hasher *src);

/* SHA-256 in parts: init, any number of updates, final. */
PL__HIDDEN int pl__hash_init(pl__hasher *h) PL__MUST_CHECK;
PL__HIDDEN int pl__hash_update(pl__hasher *h, const void *p,
                               size_t n) PL__MUST_CHECK;
PL__HIDDEN int pl__hash_final(pl__hasher *h,
                              uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/*
 * SHA-256 of @p n bytes at @p p, in one call.  Not through EVP_Digest(),
 * whose implicit fetch of the algorithm costs more than hashing a few
 * kilobytes (see sha256.c).
 */
PL__HIDDEN int pl__sha256(const void *p, size_t n,
                          uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/* SHA-256 of @p n parts, one after the other (part i: @p len[i] bytes at
 * @p part[i]), in one call and no allocation. */
PL__HIDDEN int pl__sha256_parts(const void *const *part, const size_t *len,
                                size_t n,
                                uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

#endif /* PL_SHA256_H */
