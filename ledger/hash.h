/*
 * hash.h -- SHA-256 for the ledgers' hash chains (OpenSSL EVP).
 */
#ifndef PL_HASH_H
#define PL_HASH_H

#include "util.h"

/* A reusable digest context.  One per thread at a time. */
typedef struct pl__hasher pl__hasher;

PL__HIDDEN int pl__hasher_new(pl__hasher **out) PL__MUST_CHECK;
PL__HIDDEN void pl__hasher_free(pl__hasher *h);

/* SHA-256 of @p n bytes.  PL_OK or PL_ENOMEM (OpenSSL failure). */
PL__HIDDEN int pl__sha256(pl__hasher *h, const void *p, size_t n,
                          uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/*
 * The link stored in step 0 of a ledger: SHA-256 of
 * "policyledger/ledger\0" <run id> "\0" <invocation path>, so that a ledger
 * moved to another run or invocation no longer verifies.
 */
PL__HIDDEN int pl__genesis_hash(pl__hasher *h, const char *run_id,
                                const char *path,
                                uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

#endif /* PL_HASH_H */
