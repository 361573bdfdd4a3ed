/*
 * hash.h -- SHA-256 for the ledgers' hash chains (OpenSSL).
 */
#ifndef PL_HASH_H
#define PL_HASH_H

#include "util.h"

/* A reusable digest context.  One per thread at a time. */
typedef struct pl__hasher pl__hasher;

PL__HIDDEN int pl__hasher_new(pl__hasher **out) PL__MUST_CHECK;
PL__HIDDEN void pl__hasher_free(pl__hasher *h);
/* Make @p dst's state @p src's: a digest of a prefix, saved to go on from. */
PL__HIDDEN void pl__hasher_copy(pl__hasher *dst, const pl__hasher *src);

/*
 * The hash of a stored step: SHA-256 of its key (which names its run,
 * invocation and position) followed by its record.  The next step of the
 * same ledger stores it, so a step that changes, moves or goes missing
 * breaks the chain.
 */
PL__HIDDEN int pl__step_hash(pl__hasher *h, const uint8_t *key, size_t klen,
                             const uint8_t *rec, size_t rlen,
                             uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/*
 * The link stored in step 0 of every ledger of a run: SHA-256 of
 * "policyledger/run" NUL <run id>.
 */
PL__HIDDEN int pl__genesis_hash(pl__hasher *h, const char *run_id,
                                uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/*
 * The checksum of a run record (runrec.c): SHA-256 of "policyledger/runrec"
 * NUL, @p kind ('i' info, 's' state), the run's id, NUL, and the record's
 * bytes before its checksum field.  One call, no hasher to keep.
 */
PL__HIDDEN int pl__runrec_sum(char kind, const char *run_id, const uint8_t *rec,
                              size_t len,
                              uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/* SHA-256 in parts: init, any number of updates, final. */
PL__HIDDEN int pl__hash_init(pl__hasher *h) PL__MUST_CHECK;
PL__HIDDEN int pl__hash_update(pl__hasher *h, const void *p,
                               size_t n) PL__MUST_CHECK;
PL__HIDDEN int pl__hash_final(pl__hasher *h,
                              uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/*
 * SHA-256 of @p n bytes at @p p, in one call.  Not through EVP_Digest(),
 * whose implicit fetch of the algorithm costs more than hashing a few
 * kilobytes (see hash.c).
 */
PL__HIDDEN int pl__sha256(const void *p, size_t n,
                          uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

#endif /* PL_HASH_H */
