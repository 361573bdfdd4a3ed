/*
 * sha256.c -- SHA-256 through OpenSSL's SHA256_* functions.
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

#include "sha256.h"

#include <stdlib.h>

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

int pl__sha256_parts(const void *const *part, const size_t *len, size_t n,
                     uint8_t out[PL_HASH_LEN])
{
    SHA256_CTX ctx;
    bool ok = SHA256_Init(&ctx);
    for (size_t i = 0; ok && i < n; i++)
        ok = SHA256_Update(&ctx, part[i], len[i]);
    return ok && SHA256_Final(out, &ctx) ? PL_OK : failed();
}

int pl__sha256(const void *p, size_t n, uint8_t out[PL_HASH_LEN])
{
    return pl__sha256_parts(&p, &n, 1, out);
}
