/*
 * record.c -- the step record: what a step is, as stored.
 *
 * STEP RECORD (the value stored under a step key, see keys.c)
 *
 *   A record is two msgpack values back to back: a 7-element header array
 *   and the payload map.  Nothing may follow the payload.
 *
 *   | field | msgpack type | meaning                                        |
 *   |-------|--------------|------------------------------------------------|
 *   | 0     | uint         | format version: 1, or 2 (below)                |
 *   | 1     | uint (u32)   | seq: position in its ledger, from 0            |
 *   | 2     | int          | time the step was first appended, Unix us      |
 *   | 3     | uint         | step type (pl_step_type, 1..10)                |
 *   | 4     | str          | actor, 1..PL_MAX_NAME bytes                    |
 *   | 5     | bin (32)     | hash of the previous step of the ledger:       |
 *   |       |              | SHA-256(its key || its record); step 0 holds   |
 *   |       |              | the run's genesis hash (see hash.h)            |
 *   | 6     | str or nil   | code identity (action_call steps)              |
 *   | 7     | [uint, bin]  | optional, action_result of an executed call:   |
 *   |       |              | [seq of the action_call it answers, hash of    |
 *   |       |              | the callee ledger's last step (genesis if it   |
 *   |       |              | has none)] -- the link that anchors the        |
 *   |       |              | callee's chain in its caller's                 |
 *   | then  | map          | payload: a JSON object (nil in a mirror)       |
 *
 *   The header has 7 fields, or 8 with the link.  Hashes make a tree: each
 *   step is covered by its successor's field 5, a callee ledger's last step
 *   by its caller's link, and the root ledger's last step by the run
 *   state's "head" (see the run state below).
 *
 *   VERSION 2 is laid out as version 1 and adds two shapes, so that a
 *   call's result is stored once, in its caller's action_result, not also
 *   in the step of the callee that returned it:
 *
 *   - A FOLDED CALLEE: when the callee's ledger is that one step, by the
 *     callee, it is not stored at all.  The action_result's link is then
 *     [seq of the action_call, type of the callee's step]: the callee's
 *     ledger is one step of that type, by this record's actor, at this
 *     record's time, after the run's genesis hash, with this record's
 *     payload.  Readers show it as stored; nothing else anchors it, since
 *     the action_result's own hash covers everything it is made of.
 *   - A MIRROR: the last step of a longer callee ledger, whose payload is
 *     the one its caller's action_result records.  Its payload is nil; a
 *     reader takes the payload of the caller's action_result (the first
 *     step after the call but for an in-doubt call's suspensions and
 *     resumptions), after checking that its link holds the mirror's hash.
 *
 *   The engine writes both only in the same commit as that action_result,
 *   so neither stands without the other.
 *
 *   Version rule: a reader accepts only versions it knows and fails every
 *   other one with PL_EVERSION; a format change bumps the version, and old
 *   versions stay readable.
 *
 * READING
 *
 *   Stored bytes are untrusted, and read with the checked reader
 *   (mp_read.c).  Replay reads records with pl__rec_decode_lazy(), which
 *   checks the header only.  It compares a recorded call with the new one
 *   without encoding it (payload_cmp.c), and other payloads with freshly
 *   encoded bytes; equal bytes need no check, and anything else is checked
 *   with pl__rec_check() before it is interpreted.
 */
#include "record.h"

#include "mp.h"

#include <stdint.h>

/* ---- writing ------------------------------------------------------------- */

int pl__rec_encode_head(pl__buf *out, uint32_t seq, int64_t time_us,
                        pl_step_type type, const char *actor,
                        const uint8_t prev_hash[PL_HASH_LEN], const char *code,
                        const pl__link *link)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_array(&pk, link ? 8 : 7);
    rc = rc ? rc
            : msgpack_pack_uint32(&pk, link && link->folded
                                           ? PL__FORMAT_V2
                                           : PL__FORMAT_VERSION);
    rc = rc ? rc : msgpack_pack_uint32(&pk, seq);
    rc = rc ? rc : msgpack_pack_int64(&pk, time_us);
    rc = rc ? rc : msgpack_pack_uint32(&pk, (uint32_t)type);
    rc = rc ? rc : pack_cstr(&pk, actor);
    rc = rc ? rc : msgpack_pack_bin_with_body(&pk, prev_hash, PL_HASH_LEN);
    if (!rc)
        rc = code ? pack_cstr(&pk, code) : msgpack_pack_nil(&pk);
    if (!rc && link) {
        rc = msgpack_pack_array(&pk, 2);
        rc = rc ? rc : msgpack_pack_uint32(&pk, link->call_seq);
        if (!rc)
            rc = link->folded
                     ? msgpack_pack_uint32(&pk, (uint32_t)link->folded)
                     : msgpack_pack_bin_with_body(&pk, link->head, PL_HASH_LEN);
    }
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a step");
    }
    return PL_OK;
}

int pl__rec_encode(pl__buf *out, uint32_t seq, int64_t time_us,
                   pl_step_type type, const char *actor,
                   const uint8_t prev_hash[PL_HASH_LEN], const char *code,
                   const pl__link *link, const uint8_t *payload,
                   size_t payload_len)
{
    size_t start = out->len;
    int rc = pl__rec_encode_head(out, seq, time_us, type, actor, prev_hash,
                                 code, link);
    if (!rc && pl__buf_append(out, payload, payload_len)) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a step");
    }
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

bool pl__actor_ok(const uint8_t *p, size_t n)
{
    if (n == 0 || n > PL_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f)
            return false;
    return true;
}

int pl__rec_decode_lazy(pl__rec *out, const uint8_t *data, size_t len)
{
    if (!data || !len) /* an empty value (LMDB may give no pointer) */
        return pl__err(PL_ECORRUPT, "step record is empty");
    rd r = {data, data + len};
    head h;
    uint64_t version, seq, type;
    const uint8_t *s;
    size_t n;

    if (rd_head(&r, &h) || h.t != T_ARRAY || h.u < 1)
        return pl__err(PL_ECORRUPT,
                       "step record does not start with a header array");
    if (rd_uint(&r, &version))
        return pl__err(PL_ECORRUPT, "step record has no format version");
    if (version != PL__FORMAT_VERSION && version != PL__FORMAT_V2)
        return pl__err(
            PL_EVERSION,
            "step record has format version %llu; this build reads versions %u and %u",
            (unsigned long long)version, PL__FORMAT_VERSION, PL__FORMAT_V2);
    if (h.u != 7 && h.u != 8)
        return pl__err(PL_ECORRUPT,
                       "step header has %llu fields, expected 7 or 8",
                       (unsigned long long)h.u);
    if (rd_uint(&r, &seq) || seq > UINT32_MAX)
        return pl__err(PL_ECORRUPT, "step record has a bad sequence number");
    out->seq = (uint32_t)seq;
    if (rd_int(&r, &out->time_us))
        return pl__err(PL_ECORRUPT, "step record has a bad time");
    if (rd_uint(&r, &type) || type < PL_STEP_TEXT || type > PL_STEP_CANCEL)
        return pl__err(PL_ECORRUPT, "step record has an unknown step type");
    out->type = (pl_step_type)type;
    if (rd_bytes(&r, T_STR, &s, &n) || !pl__actor_ok(s, n))
        return pl__err(PL_ECORRUPT, "step record has a bad actor");
    out->actor = (const char *)s;
    out->actor_len = n;
    if (rd_bytes(&r, T_BIN, &s, &n) || n != PL_HASH_LEN)
        return pl__err(PL_ECORRUPT, "step record has a bad previous-step hash");
    out->prev_hash = s;
    if (rd_left(&r) && *r.p == 0xc0) {
        r.p++;
        out->code = NULL;
        out->code_len = 0;
    } else {
        if (rd_bytes(&r, T_STR, &s, &n) || n > 4096)
            return pl__err(PL_ECORRUPT, "step record has a bad code identity");
        out->code = (const char *)s;
        out->code_len = n;
    }
    out->has_link = h.u == 8;
    out->link_folded = false;
    out->link_hash = NULL;
    if (out->has_link) {
        head lh;
        uint64_t cs, ft;
        if (rd_head(&r, &lh) || lh.t != T_ARRAY || lh.u != 2 ||
            rd_uint(&r, &cs) || cs > UINT32_MAX ||
            out->type != PL_STEP_ACTION_RESULT || !rd_left(&r))
            return pl__err(PL_ECORRUPT, "step record has a bad link");
        out->link_seq = (uint32_t)cs;
        if (*r.p <= 0x7f) { /* a positive fixint: a folded callee's type */
            if (version != PL__FORMAT_V2 || rd_uint(&r, &ft) ||
                ft < PL_STEP_TEXT || ft > PL_STEP_CANCEL)
                return pl__err(PL_ECORRUPT,
                               "step record has a bad folded link");
            out->link_folded = true;
            out->link_type = (pl_step_type)ft;
        } else if (rd_bytes(&r, T_BIN, &s, &n) || n != PL_HASH_LEN) {
            return pl__err(PL_ECORRUPT, "step record has a bad link");
        } else {
            out->link_hash = s;
        }
    }
    out->payload = r.p;
    out->payload_len = rd_left(&r);
    out->mirrored = out->payload_len == 1 && *r.p == 0xc0;
    if (out->mirrored) {
        if (version != PL__FORMAT_V2 || out->link_folded)
            return pl__err(
                PL_ECORRUPT,
                "step record %llu: only a version %u record may hold its caller's result",
                (unsigned long long)seq, PL__FORMAT_V2);
        return PL_OK;
    }
    if (!out->payload_len ||
        !((*r.p >= 0x80 && *r.p <= 0x8f) || *r.p == 0xde || *r.p == 0xdf))
        return pl__err(PL_ECORRUPT,
                       "step record %llu: the payload is not a map",
                       (unsigned long long)seq);
    return PL_OK;
}

void pl__rec_make_mirror(pl__buf *out, size_t start, size_t header_len)
{
    /* the header starts with a fixarray and a fixint version */
    out->data[start + 1] = PL__FORMAT_V2;
    out->len = start + header_len;
    out->data[out->len++] = 0xc0; /* the payload it replaces was longer */
}

void pl__rec_mirror(pl__rec *rec, const pl__rec *caller)
{
    rec->payload = caller->payload;
    rec->payload_len = caller->payload_len;
    rec->mirrored = false;
}

int pl__rec_check(const pl__rec *rec)
{
    if (rec->mirrored)
        return pl__err(
            PL_ECORRUPT,
            "step record %u holds its caller's result, which was not read with it",
            rec->seq);
    int rc = pl__payload_walk(NULL, rec->payload, rec->payload_len, true,
                              pl__step_wrapping(rec->type));
    if (rc)
        return pl__err(rc, "step record %u: %s", rec->seq, pl_errmsg());
    return PL_OK;
}

int pl__rec_decode(pl__rec *out, const uint8_t *data, size_t len)
{
    int rc = pl__rec_decode_lazy(out, data, len);
    return rc ? rc : pl__rec_check(out);
}

unsigned pl__rec_steps(const uint8_t *data, size_t len)
{
    /* a record, and the callee step folded into it: only a version 2
     * record can hold one */
    pl__rec rec;
    return 1 + (len > 1 && data[1] == PL__FORMAT_V2 &&
                !pl__rec_decode_lazy(&rec, data, len) && rec.link_folded);
}

unsigned pl__step_wrapping(pl_step_type type)
{
    return type == PL_STEP_ACTION_CALL || type == PL_STEP_SIDE_EFFECT ||
           type == PL_STEP_SUSPEND || type == PL_STEP_RESUME ||
           type == PL_STEP_EVENT;
}

/* ---- seed steps (a run's info holds them: runrec.c) ------------------------ */

int pl__seed_encode(pl__buf *out, const void *steps, size_t n,
                    pl__seed_item_fn item)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_array(&pk, n);
    for (size_t i = 0; !rc && i < n; i++) {
        pl_step_type type;
        const char *actor;
        const uint8_t *mp;
        size_t mp_len;
        item(steps, i, &type, &actor, &mp, &mp_len);
        rc = msgpack_pack_array(&pk, 3);
        rc = rc ? rc : msgpack_pack_uint32(&pk, (uint32_t)type);
        rc = rc ? rc : pack_cstr(&pk, actor);
        rc = rc ? rc : (pl__buf_append(out, mp, mp_len) ? -1 : 0);
    }
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding seed steps");
    }
    return PL_OK;
}
