/*
 * codec.h -- the on-disk encoding of steps and run records (msgpack).
 *
 * The formats are written down at the top of codec.c.
 */
#ifndef PL_CODEC_H
#define PL_CODEC_H

#include "util.h"

#define PL__FORMAT_VERSION 1u
/* Version 2 adds mirrors and folded callees (see codec.c). */
#define PL__FORMAT_V2 2u

/* A decoded view of one stored step record.  Borrows the record's bytes. */
typedef struct pl__rec {
    uint32_t seq;
    int64_t time_us;
    pl_step_type type;
    const char *actor; /* not NUL-terminated */
    size_t actor_len;
    const uint8_t *prev_hash; /* PL_HASH_LEN bytes */
    const char *code;         /* NULL when absent; not NUL-terminated */
    size_t code_len;
    bool has_link;            /* action_result: the callee ledger's head */
    uint32_t link_seq;        /* the action_call it answers */
    const uint8_t *link_hash; /* PL_HASH_LEN bytes; NULL when folded */
    /* A folded callee (version 2): its ledger is one step, not stored,
     * of type link_type; see codec.c. */
    bool link_folded;
    pl_step_type link_type;
    const uint8_t *payload; /* msgpack map */
    size_t payload_len;
    /* The payload is its caller's action_result's (a version 2 mirror):
     * payload is the stored nil, which no reader takes for a map, until
     * pl__rec_mirror() lends it the caller's. */
    bool mirrored;
} pl__rec;

/* What an action_result links to: the call it answers and the hash of the
 * last step of that call's callee ledger (or the run genesis if it has
 * none). */
typedef struct pl__link {
    uint32_t call_seq;
    uint8_t head[PL_HASH_LEN];
    pl_step_type folded; /* not 0: the callee's one step, of this type,
                            is folded into the action_result; no head */
} pl__link;

/*
 * Encode a step record into @p out (appended).  @p payload is an already
 * encoded, already checked msgpack map.
 */
PL__HIDDEN int pl__rec_encode(pl__buf *out, uint32_t seq, int64_t time_us,
                              pl_step_type type, const char *actor,
                              const uint8_t prev_hash[PL_HASH_LEN],
                              const char *code, const pl__link *link,
                              const uint8_t *payload,
                              size_t payload_len) PL__MUST_CHECK;

/*
 * Make the step record just encoded at the end of @p out (its header
 * @p header_len bytes, then its payload) a mirror of its caller's
 * action_result: the payload becomes nil and the version 2.
 */
PL__HIDDEN void pl__rec_make_mirror(pl__buf *out, size_t start,
                                    size_t header_len);

/*
 * Lend a mirrored record @p rec its payload from @p caller, the record of
 * its caller's action_result, once that is known to link to it.
 */
PL__HIDDEN void pl__rec_mirror(pl__rec *rec, const pl__rec *caller);

/*
 * Decode and check a stored step record.  Every byte is bounds-checked; the
 * payload is checked to be a JSON-compatible map within the limits.
 * Returns PL_OK, PL_ECORRUPT or PL_EVERSION (message says what is wrong).
 */
PL__HIDDEN int pl__rec_decode(pl__rec *out, const uint8_t *data,
                              size_t len) PL__MUST_CHECK;

/*
 * The same for the header only: the payload is located (the rest of the
 * record) but not walked; pl__rec_check() it before interpreting it.
 */
PL__HIDDEN int pl__rec_decode_lazy(pl__rec *out, const uint8_t *data,
                                   size_t len) PL__MUST_CHECK;

/* Check a decoded record's payload: a JSON-compatible map within the
 * limits.  Needed before its payload is decoded or handed out. */
PL__HIDDEN int pl__rec_check(const pl__rec *rec) PL__MUST_CHECK;

/*
 * Encode a JSON object as a msgpack map, appended to @p out.  NULL encodes
 * {}.  PL_EJSON for a non-object, non-finite number or raw item; PL_ELIMIT
 * past PL_MAX_JSON_DEPTH or @p max_bytes.
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
                                      const char *policy,
                                      const cJSON *payload,
                                      const char *const *actions,
                                      size_t n_actions,
                                      const char *seed_digest,
                                      size_t max_bytes);

/* Encode {key: obj}, obj a JSON object (NULL: {}).  Errors as above. */
PL__HIDDEN int pl__wrap_encode(pl__buf *out, const char *key, const cJSON *obj,
                               size_t max_bytes) PL__MUST_CHECK;

/* Encode {"name": name, "value": value}, value any JSON. */
PL__HIDDEN int pl__named_value_encode(pl__buf *out, const char *name,
                                      const cJSON *value,
                                      size_t max_bytes) PL__MUST_CHECK;

/*
 * Encode seed steps as an array of [type, actor, payload]: @p n steps whose
 * types, actors and already-encoded payloads are given by the callback.
 */
typedef void (*pl__seed_item_fn)(const void *steps, size_t i,
                                 pl_step_type *type, const char **actor,
                                 const uint8_t **mp, size_t *mp_len);
PL__HIDDEN int pl__seed_encode(pl__buf *out, const void *steps, size_t n,
                               pl__seed_item_fn item) PL__MUST_CHECK;

/* Encode any JSON value (used inside larger maps). */
PL__HIDDEN int pl__json_encode(pl__buf *out, const cJSON *v) PL__MUST_CHECK;

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
 * and measure the tree it decodes to.  PL_ECORRUPT or PL_ENOMEM.
 */
PL__HIDDEN int pl__payload_measure(const uint8_t *mp, size_t len,
                                   unsigned outer,
                                   pl__tree_size *ts) PL__MUST_CHECK;

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
 * pl__payload_check() does.  PL_ECORRUPT or PL_ENOMEM. */
PL__HIDDEN int pl__payload_decode(cJSON **out, const uint8_t *mp,
                                  size_t len) PL__MUST_CHECK;

/*
 * The same for a value that holds a policy's value @p outer containers deep
 * (see pl__step_wrapping()): the policy's value may nest PL_MAX_JSON_DEPTH
 * deep wherever the engine put it.
 */
PL__HIDDEN int pl__payload_decode_in(cJSON **out, const uint8_t *mp,
                                     size_t len,
                                     unsigned outer) PL__MUST_CHECK;

/*
 * Containers the engine puts around a policy's value in the payload of a
 * step of @p type: 1 for action_call {"policy", "payload"}, side_effect
 * {"name", "value"}, suspend {"prompt"} and resume {"answer"}; else 0.
 */
PL__HIDDEN unsigned pl__step_wrapping(pl_step_type type);

/*
 * Find the value of @p key in a checked msgpack map without decoding it.
 * Returns true and its bytes, or false.
 */
PL__HIDDEN bool pl__map_find(const uint8_t *mp, size_t len, const char *key,
                             const uint8_t **val, size_t *val_len);

/* The bytes of a checked msgpack str, or false if the value is not one. */
PL__HIDDEN bool pl__mp_str(const uint8_t *mp, size_t len, const char **s,
                           size_t *n);

/* Equality of two payloads as JSON (key order ignored). */
PL__HIDDEN bool pl__payload_equal(const uint8_t *a, size_t alen,
                                  const uint8_t *b, size_t blen);

/* Render a checked payload as compact JSON, cut to @p max chars ("..."). */
PL__HIDDEN char *pl__payload_text(const uint8_t *mp, size_t len, size_t max);

/* ---- run records ---------------------------------------------------------- */

/* The part of a run written once, when it starts. */
typedef struct pl__run_info {
    char *policy;
    uint8_t *payload; /* msgpack map */
    size_t payload_len;
    char **actions;
    size_t n_actions;
    uint8_t *seed; /* msgpack array of [type, actor, payload] or NULL */
    size_t seed_len;
    int64_t created_us;
} pl__run_info;

/* The part rewritten with every commit. */
typedef struct pl__run_state {
    pl_run_status status;
    uint64_t steps;
    int64_t updated_us;
    int64_t heartbeat_us;
    int64_t owner_pid;
    uint64_t owner_start; /* the owner process's start time (clock ticks) */
    char owner_host[256];
    uint32_t attempts;
    int error;
    char *reason;        /* failed */
    char token[33];      /* suspended: resume token (hex) or "" */
    char *susp_path;     /* suspended: invocation path */
    uint32_t susp_seq;   /* suspended: the suspend step's seq */
    uint8_t *prompt;     /* suspended: msgpack map */
    size_t prompt_len;
    uint8_t *result;     /* completed: msgpack map of the root's result */
    size_t result_len;
    bool has_head;       /* head: hash of the root ledger's last step, */
    uint8_t head[PL_HASH_LEN]; /* when written after it (not failed) */
} pl__run_state;

PL__HIDDEN int pl__run_info_encode(pl__buf *out, const pl__run_info *ri) PL__MUST_CHECK;
PL__HIDDEN int pl__run_info_decode(pl__run_info *out, const uint8_t *data,
                                   size_t len) PL__MUST_CHECK;
PL__HIDDEN void pl__run_info_clear(pl__run_info *ri);

PL__HIDDEN int pl__run_state_encode(pl__buf *out, const pl__run_state *st) PL__MUST_CHECK;
PL__HIDDEN int pl__run_state_decode(pl__run_state *out, const uint8_t *data,
                                    size_t len) PL__MUST_CHECK;
PL__HIDDEN void pl__run_state_clear(pl__run_state *st);
/* Deep copy (strings and buffers duplicated). */
PL__HIDDEN int pl__run_state_copy(pl__run_state *dst, const pl__run_state *src) PL__MUST_CHECK;

#endif /* PL_CODEC_H */
