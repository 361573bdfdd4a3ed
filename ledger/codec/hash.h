/*
 * hash.h -- the ledgers' hash chains and the run records' checksums, on
 * SHA-256 (sha256.h).
 */
#ifndef PL_HASH_H
#define PL_HASH_H

#include "sha256.h"

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

#endif /* PL_HASH_H */
