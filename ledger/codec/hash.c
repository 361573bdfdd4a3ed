/*
 * hash.c -- SHA-256 through OpenSSL's SHA256_* functions.
 *
 * Every appended or served step is hashed, so a digest's fixed cost is
 * paid three times per live call.  OpenSSL 3.0's EVP interface frees and
 * allocates its provider context on every re-initialisation and looks up
 * an engine for the algorithm: ~130 ns of a ~440 ns digest of a 200-byte
 * step.  The SHA256_* functions, deprecated in 3.0 in favour of EVP but
 * present in every 3.x, run the same assembly on a plain struct: no
 * allocation, no lookup, and no provider to load at start-up (~1.7 ms).
 */
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_*: see above */

#include "hash.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#if defined(OPENSSL_NO_DEPRECATED_3_0)
#error "policyledger needs OpenSSL's SHA256_* functions: this OpenSSL has none"
#endif

struct pl__hasher {
    SHA256_CTX ctx;
};

int pl__hasher_new(pl__hasher **out)
{
    *out = malloc(sizeof **out);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory creating a hasher");
}

void pl__hasher_free(pl__hasher *h) { free(h); }

void pl__hasher_copy(pl__hasher *dst, const pl__hasher *src) { *dst = *src; }

static int failed(void) { return pl__err(PL_ENOMEM, "SHA-256 failed"); }

static int digest(pl__hasher *h, const void *a, size_t an, const void *b,
                  size_t bn, uint8_t out[PL_HASH_LEN])
{
    return SHA256_Init(&h->ctx) && SHA256_Update(&h->ctx, a, an) &&
                   SHA256_Update(&h->ctx, b, bn) && SHA256_Final(out, &h->ctx)
               ? PL_OK
               : failed();
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

int pl__hash_init(pl__hasher *h)
{
    return SHA256_Init(&h->ctx) ? PL_OK : failed();
}

int pl__hash_update(pl__hasher *h, const void *p, size_t n)
{
    return SHA256_Update(&h->ctx, p, n) ? PL_OK : failed();
}

int pl__hash_final(pl__hasher *h, uint8_t out[PL_HASH_LEN])
{
    return SHA256_Final(out, &h->ctx) ? PL_OK : failed();
}

int pl__runrec_sum(char kind, const char *run_id, const uint8_t *rec,
                   size_t len, uint8_t out[PL_HASH_LEN])
{
    static const char tag[] = "policyledger/runrec";
    SHA256_CTX ctx;
    uint8_t k = (uint8_t)kind;
    return SHA256_Init(&ctx) && SHA256_Update(&ctx, tag, sizeof tag) &&
                   SHA256_Update(&ctx, &k, 1) &&
                   SHA256_Update(&ctx, run_id, strlen(run_id) + 1) &&
                   SHA256_Update(&ctx, rec, len) && SHA256_Final(out, &ctx)
               ? PL_OK
               : failed();
}

int pl__sha256(const void *p, size_t n, uint8_t out[PL_HASH_LEN])
{
    SHA256_CTX ctx;
    return SHA256_Init(&ctx) && SHA256_Update(&ctx, p, n) &&
                   SHA256_Final(out, &ctx)
               ? PL_OK
               : failed();
}
