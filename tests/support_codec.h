/*
 * support_codec.h -- what the tests of the records (test_codec*.c) share:
 * building msgpack bytes, decoding and JSON helpers.
 */
#ifndef PL_TESTS_SUPPORT_CODEC_H
#define PL_TESTS_SUPPORT_CODEC_H

#include "support.h"

#include "codec.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* What a step record is built from; rec_build() writes it field by field,
 * so a test can make any one field wrong. */
typedef struct spec {
    uint32_t nfields; /* the header array's count */
    uint64_t version;
    uint32_t seq;
    int64_t time_us;
    uint64_t type;
    const char *actor;
    size_t actor_len;
    size_t hash_len;
    const char *code; /* NULL: nil */
    size_t code_len;
    const uint8_t *payload;
    size_t payload_len;
} spec;

void put(pl__buf *b, const void *p, size_t n);

void put_u8(pl__buf *b, uint8_t v);

void put_be(pl__buf *b, uint64_t v, size_t n);

void mp_nil(pl__buf *b);

void mp_uint(pl__buf *b, uint64_t v);

void mp_int(pl__buf *b, int64_t v);

void mp_str(pl__buf *b, const char *s, size_t n);

void mp_cstr(pl__buf *b, const char *s);

void mp_bin(pl__buf *b, const void *p, size_t n);

void mp_array(pl__buf *b, uint32_t n);

void mp_map(pl__buf *b, uint32_t n);

void mp_f64(pl__buf *b, double d);

/* Encode a JSON text as a payload (no size limit), expecting success. */
void payload_of(pl__buf *b, const char *json);

extern const uint8_t empty_map[];

extern uint8_t hash_bytes[64];

spec spec_default(void);

void rec_build(pl__buf *b, const spec *s);

extern const char sentinel[];

void set_sentinel(void);

/* A heap copy of exactly n bytes, so that ASan sees any over-read. */
uint8_t *exact_copy(const uint8_t *p, size_t n);

/* Check a payload as stored bytes: pl__payload_check and pl__payload_decode
 * agree, and a step record carrying it decodes the same way. */
void expect_payload(const uint8_t *p, size_t n, int want, const char *what);

/* Encode, check, decode; the caller frees the result. */
/* Every container's children are linked as cJSON links them: the first
 * child's prev is the last, the last's next is NULL, prev mirrors next. */
void expect_cjson_links(const cJSON *v);

/* Decode @p mp into a block of exactly the measured size (so that a
 * sanitizer sees any write past it) and check it against the owned tree
 * pl__payload_decode() gives. */
void expect_block_tree(const uint8_t *mp, size_t len, const cJSON *want);

/* {"a": [[...[1]...]]}: one object and @p levels - 1 arrays. */
cJSON *nest_arrays(int levels, bool scalar);

/* {"a": [[...]]}: a map and @p levels - 1 arrays of one element, built as
 * stored bytes; the deepest array holds a scalar or nothing. */
void stored_nest(pl__buf *b, int levels, bool scalar);

/*
 * Replay reads a record's header with pl__rec_decode_lazy() and checks the
 * payload with pl__rec_check() only when it interprets it: together they
 * must judge every buffer as pl__rec_decode() does.
 */
void lazy_agrees(const uint8_t *c, size_t n, int full, unsigned long iter);

extern uint64_t rng_state;

uint64_t rng(void);

size_t below(size_t n);

extern const uint8_t interesting[37]; /* noise bytes, msgpack type codes */

/* Turn @p in into a mutated copy in @p out. */
void mutate(pl__buf *out, const pl__buf *in, const pl__buf *other);

void fuzz_one(const uint8_t *p, size_t n, unsigned long iter);

#endif
