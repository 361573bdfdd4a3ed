/*
 * hash.c -- SHA-256 through OpenSSL's EVP interface.
 *
 * The algorithm is fetched once per process; each hasher keeps its own
 * EVP_MD_CTX, set to SHA-256 once and re-initialised with a NULL type for
 * every digest.  Passing the algorithm each time costs half as much again
 * as the hash of a 200-byte step (and takes a reference on an object all
 * threads share).
 */
#include "hash.h"

#include <pthread.h>
#include <stdlib.h>

#include <openssl/evp.h>

struct pl__hasher {
    EVP_MD_CTX *ctx;
};

static EVP_MD *g_sha256;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fetch_sha256(void) { g_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL); }

/* Release the fetched algorithm when the library is unloaded. */
__attribute__((destructor)) static void free_sha256(void)
{
    EVP_MD_free(g_sha256);
    g_sha256 = NULL;
}

int pl__hash_setup(void)
{
    pthread_once(&g_once, fetch_sha256);
    return g_sha256 ? PL_OK : pl__err(PL_ENOMEM, "OpenSSL has no SHA-256");
}

int pl__hasher_new(pl__hasher **out)
{
    *out = NULL;
    int st = pl__hash_setup();
    if (st)
        return st;
    pl__hasher *h = calloc(1, sizeof *h);
    if (!h || !(h->ctx = EVP_MD_CTX_new()) ||
        EVP_DigestInit_ex2(h->ctx, g_sha256, NULL) != 1) {
        if (h)
            EVP_MD_CTX_free(h->ctx);
        free(h);
        return pl__err(PL_ENOMEM, "out of memory creating a hasher");
    }
    *out = h;
    return PL_OK;
}

void pl__hasher_free(pl__hasher *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

static int digest(pl__hasher *h, const void *a, size_t an, const void *b,
                  size_t bn, uint8_t out[PL_HASH_LEN])
{
    unsigned len = 0;
    if (EVP_DigestInit_ex2(h->ctx, NULL, NULL) != 1 ||
        EVP_DigestUpdate(h->ctx, a, an) != 1 ||
        EVP_DigestUpdate(h->ctx, b, bn) != 1 ||
        EVP_DigestFinal_ex(h->ctx, out, &len) != 1 || len != PL_HASH_LEN)
        return pl__err(PL_ENOMEM, "SHA-256 failed");
    return PL_OK;
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
    return EVP_DigestInit_ex2(h->ctx, NULL, NULL) == 1
               ? PL_OK
               : pl__err(PL_ENOMEM, "SHA-256 failed");
}

int pl__hash_update(pl__hasher *h, const void *p, size_t n)
{
    return EVP_DigestUpdate(h->ctx, p, n) == 1
               ? PL_OK
               : pl__err(PL_ENOMEM, "SHA-256 failed");
}

int pl__hash_final(pl__hasher *h, uint8_t out[PL_HASH_LEN])
{
    unsigned len = 0;
    return EVP_DigestFinal_ex(h->ctx, out, &len) == 1 && len == PL_HASH_LEN
               ? PL_OK
               : pl__err(PL_ENOMEM, "SHA-256 failed");
}
