/*
 * payload.h -- payloads, the JSON objects of steps and runs, as msgpack:
 * written by mp_write.c (the mapping is at its top), read by the checked
 * reader in mp_read.c, compared by payload_cmp.c.
 */
#ifndef PL_PAYLOAD_H
#define PL_PAYLOAD_H

#include "util.h"

/*
 * The most memory the cJSON tree of one decoded payload may take.  A stored
 * byte can cost a 64-byte node, so without a bound a crafted stored payload
 * would make a reader allocate 64 times its size.  Every payload within the
 * default max_payload (16 MiB) fits; a bigger tree is PL_ELIMIT on both
 * sides: a writer refuses the payload, and a reader refuses a stored one
 * (which no writer made) before it allocates anything.
 */
#define PL__TREE_MAX ((size_t)2 << 30)

/* ---- writing (mp_write.c) ------------------------------------------------ */

/*
 * Encode a JSON object as a msgpack map, appended to @p out.  NULL encodes
 * {}.  PL_EJSON for a non-object, non-finite number or raw item; PL_ELIMIT
 * past PL_MAX_JSON_DEPTH, @p max_bytes or PL__TREE_MAX.
 */
PL__HIDDEN int pl__payload_encode(pl__buf *out, const cJSON *obj,
                                  size_t max_bytes) PL__MUST_CHECK;

/*
 * Encode an `action_call` payload {"policy": policy, "payload": payload},
 * with "actions": [...] when n_actions > 0 and "seed": <hex digest> when
 * @p seed_digest is not NULL.  Errors as pl__payload_encode().
 */
PL__HIDDEN int pl__call_payload_encode(pl__buf *out, const char *policy,
                                       const cJSON *payload,
                                       const char *const *actions,
                                       size_t n_actions,
                                       const char *seed_digest,
                                       size_t max_bytes) PL__MUST_CHECK;

/* Encode {key: obj}, obj a JSON object (NULL: {}).  Errors as above. */
PL__HIDDEN int pl__wrap_encode(pl__buf *out, const char *key, const cJSON *obj,
                               size_t max_bytes) PL__MUST_CHECK;

/* Encode {"name": name, "value": value}, value any JSON. */
PL__HIDDEN int pl__named_value_encode(pl__buf *out, const char *name,
                                      const cJSON *value,
                                      size_t max_bytes) PL__MUST_CHECK;

/* Encode any JSON value (used inside larger maps). */
PL__HIDDEN int pl__json_encode(pl__buf *out, const cJSON *v) PL__MUST_CHECK;

/* ---- reading (mp_read.c) ------------------------------------------------- */

/*
 * Check that @p len bytes are exactly one JSON-compatible msgpack value
 * (map keys are strings, no bin/ext, no NUL in strings, nesting within
 * PL_MAX_JSON_DEPTH).  @p want_map requires a map.
 */
PL__HIDDEN int pl__payload_check(const uint8_t *mp, size_t len,
                                 bool want_map) PL__MUST_CHECK;

/* The cJSON tree a payload decodes to. */
typedef struct pl__tree_size {
    size_t nodes; /* values, one cJSON node each */
    size_t text;  /* bytes of the strings and keys, with their NULs */
    size_t bytes; /* the block that holds them, nodes first */
} pl__tree_size;

/*
 * Check a payload as pl__payload_check() does, for a value that holds a
 * policy's value @p outer containers deep (see pl__payload_decode_in()),
 * and measure the tree it decodes to.  PL_ECORRUPT, PL_ELIMIT (a tree
 * larger than PL__TREE_MAX) or PL_ENOMEM.
 */
PL__HIDDEN int pl__payload_measure(pl__tree_size *ts, const uint8_t *mp,
                                   size_t len, unsigned outer) PL__MUST_CHECK;

/*
 * Build the tree of a payload pl__payload_measure() accepted in @p block,
 * ts->bytes long and aligned for a cJSON.  The tree's nodes and strings
 * all live in the block: it is read-only, and freeing the block frees it
 * (never cJSON_Delete()).  NULL only if the bytes are not the ones
 * measured.
 */
PL__HIDDEN cJSON *pl__payload_build(const uint8_t *mp, size_t len,
                                    const pl__tree_size *ts, void *block);

/* Decode a msgpack value into a new cJSON the caller owns, checking it as
 * pl__payload_check() does.  PL_ECORRUPT, PL_ELIMIT or PL_ENOMEM. */
PL__HIDDEN int pl__payload_decode(cJSON **out, const uint8_t *mp,
                                  size_t len) PL__MUST_CHECK;

/* The same, calling @p release (@p user) as soon as the bytes are read,
 * success or not, before the tree the caller owns is made: a large value
 * is never in memory three times, its bytes and two trees. */
PL__HIDDEN int pl__payload_decode_release(cJSON **out, const uint8_t *mp,
                                          size_t len, void (*release)(void *),
                                          void *user) PL__MUST_CHECK;

/*
 * The same for a value that holds a policy's value @p outer containers deep
 * (see pl__step_wrapping()): the policy's value may nest PL_MAX_JSON_DEPTH
 * deep wherever the engine put it.
 */
PL__HIDDEN int pl__payload_decode_in(cJSON **out, const uint8_t *mp, size_t len,
                                     unsigned outer) PL__MUST_CHECK;

/*
 * Find the value of @p key in a checked msgpack map without decoding it.
 * Returns true and its bytes, or false.
 */
PL__HIDDEN bool pl__map_find(const uint8_t *mp, size_t len, const char *key,
                             const uint8_t **val, size_t *val_len);

/* The bytes of a checked msgpack str, or false if the value is not one. */
PL__HIDDEN bool pl__mp_str(const uint8_t *mp, size_t len, const char **s,
                           size_t *n);

/* A checked msgpack integer that is not negative, or false if the value is
 * none. */
PL__HIDDEN bool pl__mp_uint(const uint8_t *mp, size_t len, uint64_t *v);

/* Render a checked payload as compact JSON, cut to @p max chars ("..."). */
PL__HIDDEN char *pl__payload_text(const uint8_t *mp, size_t len, size_t max);

/* ---- comparing (payload_cmp.c) ------------------------------------------- */

/*
 * Do the recorded bytes @p mp of an action_call's payload hold this call:
 * as pl__payload_equal() would find them against its encoding, and with
 * members in the same order?  Reads the bytes with every check
 * pl__payload_check() makes, and allocates nothing, so that replay need
 * not encode a call it finds recorded.  False when they differ, and for
 * anything pl__call_payload_encode() would refuse: the caller then encodes
 * the call and compares the bytes the slow way.
 */
PL__HIDDEN bool pl__call_payload_same(const uint8_t *mp, size_t len,
                                      const char *policy, const cJSON *payload,
                                      const char *const *actions,
                                      size_t n_actions, const char *seed_digest,
                                      size_t max_bytes);

/* Equality of two payloads as JSON (key order ignored). */
PL__HIDDEN bool pl__payload_equal(const uint8_t *a, size_t alen,
                                  const uint8_t *b, size_t blen);

#endif /* PL_PAYLOAD_H */
