/*
 * hash.c -- the hash chain's digests and the run records' checksums.
 */
#include "hash.h"

#include <string.h>

/* SHA-256 of @p a then @p b. */
static int digest(pl__hasher *h, const void *a, size_t an, const void *b,
                  size_t bn, uint8_t out[PL_HASH_LEN])
{
    int st = pl__hash_init(h);
    if (!st)
        st = pl__hash_update(h, a, an);
    if (!st)
        st = pl__hash_update(h, b, bn);
    if (!st)
        st = pl__hash_final(h, out);
    return st;
}

int pl__step_hash(pl__hasher *h, const uint8_t *key, size_t klen,
                  const uint8_t *rec, size_t rlen, uint8_t out[PL_HASH_LEN])
{
    return digest(h, key, klen, rec, rlen, out);
}

int pl__genesis_hash(pl__hasher *h, const char *run_id,
                     uint8_t out[PL_HASH_LEN])
{
    static const char tag[] = "policyledger/run";
    return digest(h, tag, sizeof tag, run_id, strlen(run_id), out);
}

int pl__runrec_sum(char kind, const char *run_id, const uint8_t *rec,
                   size_t len, uint8_t out[PL_HASH_LEN])
{
    static const char tag[] = "policyledger/runrec";
    uint8_t k = (uint8_t)kind;
    const void *part[] = {tag, &k, run_id, rec};
    size_t lens[] = {sizeof tag, 1, strlen(run_id) + 1, len};
    return pl__sha256_parts(part, lens, 4, out);
}
