/*
 * record.h -- the step record, the value stored under a step key.  Its
 * layout and the format versions are written down at the top of record.c.
 */
#ifndef PL_RECORD_H
#define PL_RECORD_H

#include "util.h"

#define PL__FORMAT_VERSION 1u
/* Version 2 adds mirrors and folded callees (see record.c). */
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
     * of type link_type; see record.c. */
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
 * Encode a step record's header into @p out (appended): its payload, a
 * msgpack map, is to follow.
 */
PL__HIDDEN int pl__rec_encode_head(pl__buf *out, uint32_t seq, int64_t time_us,
                                   pl_step_type type, const char *actor,
                                   const uint8_t prev_hash[PL_HASH_LEN],
                                   const char *code,
                                   const pl__link *link) PL__MUST_CHECK;

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
 * Containers the engine puts around a policy's value in the payload of a
 * step of @p type: 1 for action_call {"policy", "payload"}, side_effect
 * {"name", "value"}, suspend {"prompt"} and resume {"answer"}; else 0.
 */
PL__HIDDEN unsigned pl__step_wrapping(pl_step_type type);

/*
 * How many steps the stored record @p data stands for: 2 for an
 * action_result that holds its callee's one step folded (version 2), else
 * 1, also for a record that cannot be read (reading it says why).
 */
PL__HIDDEN unsigned pl__rec_steps(const uint8_t *data, size_t len);

/* A valid actor or policy name of @p n bytes, not NUL-terminated: as
 * pl__name_ok(). */
PL__HIDDEN bool pl__actor_ok(const uint8_t *p, size_t n);

/*
 * Encode seed steps, which a run's info holds (runrec.c), as an array of
 * [type, actor, payload]: @p n steps whose types, actors and
 * already-encoded payloads are given by the callback.
 */
typedef void (*pl__seed_item_fn)(const void *steps, size_t i,
                                 pl_step_type *type, const char **actor,
                                 const uint8_t **mp, size_t *mp_len);
PL__HIDDEN int pl__seed_encode(pl__buf *out, const void *steps, size_t n,
                               pl__seed_item_fn item) PL__MUST_CHECK;

#endif /* PL_RECORD_H */
