/*
 * runrec.h -- run records: a run's info and its state.  Their fields are
 * written down at the top of runrec.c.
 */
#ifndef PL_RUNREC_H
#define PL_RUNREC_H

#include "util.h"

/* Run records' format version 2 adds their checksum (see runrec.c). */
#define PL__RUNREC_VERSION 2u
/* A run state's format version 3 adds the heads of its open ledgers. */
#define PL__RUNSTATE_VERSION 3u
/* At most one open ledger per depth, the root's included. */
#define PL__ANCHORS_MAX (PL_MAX_DEPTH + 1)

/* An open ledger's head as a run state records it: the ledger (its
 * invocation path below the root as components), its last step's seq and
 * that step's hash. */
typedef struct pl__anchor {
    uint32_t comps[PL_MAX_DEPTH];
    unsigned depth;
    uint32_t seq;
    uint8_t hash[PL_HASH_LEN];
} pl__anchor;

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
    char *code;          /* the root policy's code identity, or NULL */
    int64_t deadline_ms; /* Unix ms past which the run fails; 0 = none */
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
    char *reason;          /* failed */
    char token[33];        /* suspended: resume token (hex) or "" */
    char *susp_path;       /* suspended: invocation path */
    uint32_t susp_seq;     /* suspended: the suspend step's seq; waiting: the
                          wait step's (in the ledger at susp_path) */
    int64_t wait_until_ms; /* waiting: wakes at this Unix ms; 0 = never
                              (an event only) */
    char *wait_event;      /* waiting for this event; NULL: a sleep */
    uint8_t *prompt;       /* suspended: msgpack map */
    size_t prompt_len;
    uint8_t *result; /* completed: msgpack map of the root's result */
    size_t result_len;
    bool has_head;             /* head: hash of the root ledger's last step, */
    uint8_t head[PL_HASH_LEN]; /* when written after it (not failed) */
    pl__anchor *open;          /* the open ledgers' heads when it was written */
    size_t n_open;             /* at most PL__ANCHORS_MAX */
    char *succ; /* superseded or continued: the run that goes on from it,
                   or NULL */
    char *pred; /* the run this one supersedes or continues, or NULL */
} pl__run_state;

/*
 * Run records are checksummed and bound to their run's id (runrec.c): a
 * decode checks the checksum of a version 2 record, and a changed byte or
 * a record of another run is PL_ECORRUPT naming @p run_id.
 */
PL__HIDDEN int pl__run_info_encode(pl__buf *out, const char *run_id,
                                   const pl__run_info *ri) PL__MUST_CHECK;
PL__HIDDEN int pl__run_info_decode(pl__run_info *out, const char *run_id,
                                   const uint8_t *data,
                                   size_t len) PL__MUST_CHECK;
PL__HIDDEN void pl__run_info_clear(pl__run_info *ri);

PL__HIDDEN int pl__run_state_encode(pl__buf *out, const char *run_id,
                                    const pl__run_state *st) PL__MUST_CHECK;
PL__HIDDEN int pl__run_state_decode(pl__run_state *out, const char *run_id,
                                    const uint8_t *data,
                                    size_t len) PL__MUST_CHECK;
PL__HIDDEN void pl__run_state_clear(pl__run_state *st);
/* Deep copy (strings and buffers duplicated). */
PL__HIDDEN int pl__run_state_copy(pl__run_state *dst,
                                  const pl__run_state *src) PL__MUST_CHECK;

/* An inbox record (siderec.c, INBOX RECORDS): an event (name, payload) or
 * a cancellation (reason). */
typedef struct pl__inbox_rec {
    char *name;       /* an event's name */
    uint8_t *payload; /* an event's payload, a msgpack map */
    size_t payload_len;
    char *reason; /* a cancellation's reason ("" allowed); NULL: an event */
    int64_t sent_us;
} pl__inbox_rec;

PL__HIDDEN int pl__inbox_encode(pl__buf *out, const char *run_id,
                                const pl__inbox_rec *ib) PL__MUST_CHECK;
PL__HIDDEN int pl__inbox_decode(pl__inbox_rec *out, const char *run_id,
                                const uint8_t *data, size_t len) PL__MUST_CHECK;
PL__HIDDEN void pl__inbox_clear(pl__inbox_rec *ib);
/* Whether an inbox record's key (its seq, 8 bytes big-endian) is one a
 * store gives: 1, 2, 3..., at most 2^53, since the `event` step records
 * it as a JSON number; another is a damaged key (PL_ECORRUPT), never an
 * event step that cannot be made. */
static inline bool pl__inbox_seq_ok(const uint8_t *key, size_t klen)
{
    uint64_t seq = klen == 8 ? pl__get_be64(key) : 0;
    return seq >= 1 && seq <= (uint64_t)1 << 53;
}
/* A copy of @p from in @p to (pl__inbox_clear() frees it). */
PL__HIDDEN int pl__inbox_copy(pl__inbox_rec *to,
                              const pl__inbox_rec *from) PL__MUST_CHECK;
/* Whether inbox record @p data, as pl__inbox_encode() made it here, is a
 * cancellation: its shape alone, not checked (a stored record's bytes are
 * decoded, checksum and all, with pl__inbox_decode()).  PL_EINVAL when it
 * is not a record that function makes. */
PL__HIDDEN int pl__inbox_is_cancel(const uint8_t *data, size_t len,
                                   bool *cancel) PL__MUST_CHECK;

/* A timer record (siderec.c, TIMER RECORDS): the run's id and due time. */
PL__HIDDEN int pl__timer_encode(pl__buf *out, const char *run_id,
                                int64_t due_us) PL__MUST_CHECK;
PL__HIDDEN int pl__timer_decode(int64_t *due_us, char id[PL_MAX_RUN_ID + 1],
                                const uint8_t *data, size_t len) PL__MUST_CHECK;

/*
 * A deleted run's tombstone (TOMBSTONES in siderec.c), stored under its id
 * for a while after its records and steps are gone.
 */
typedef struct pl__tomb {
    pl_run_status status; /* the final status it was deleted in */
    bool has_head;
    uint8_t head[PL_HASH_LEN]; /* its head, when it recorded one */
    int64_t created_us, deleted_us;
    int64_t expires_us; /* the tombstone is forgotten after this */
    char policy[PL_MAX_NAME + 1];
} pl__tomb;

PL__HIDDEN int pl__tomb_encode(pl__buf *out, const char *run_id,
                               const pl__tomb *t) PL__MUST_CHECK;
PL__HIDDEN int pl__tomb_decode(pl__tomb *out, const char *run_id,
                               const uint8_t *data, size_t len) PL__MUST_CHECK;

/* A deleted run whose steps are still to be removed (PURGE in siderec.c). */
PL__HIDDEN int pl__purge_encode(pl__buf *out, uint64_t num,
                                const char *run_id) PL__MUST_CHECK;
/* @p id has PL_MAX_RUN_ID + 1 bytes of room; the record must name @p num. */
PL__HIDDEN int pl__purge_decode(char *id, uint64_t num, const uint8_t *data,
                                size_t len) PL__MUST_CHECK;

/* Whether a run in @p status has ended for good (completed, failed or
 * continued). */
PL__HIDDEN bool pl__status_final(pl_run_status status);

#endif /* PL_RUNREC_H */
