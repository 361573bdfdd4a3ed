/*
 * codec.c -- msgpack encoding of steps and run records.
 *
 * STEP RECORD (the value stored under a step key, see store_lmdb.c)
 *
 *   A record is two msgpack values back to back: a 7-element header array
 *   and the payload map.  Nothing may follow the payload.
 *
 *   | field | msgpack type | meaning                                        |
 *   |-------|--------------|------------------------------------------------|
 *   | 0     | uint         | format version: 1, or 2 (below)                |
 *   | 1     | uint (u32)   | seq: position in its ledger, from 0            |
 *   | 2     | int          | time the step was first appended, Unix us      |
 *   | 3     | uint         | step type (pl_step_type, 1..7)                 |
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
 * PAYLOAD
 *
 *   JSON maps onto msgpack one to one: object -> map with str keys, array ->
 *   array, string -> str, number -> int when integral and within int64, else
 *   float64, true/false -> bool, null -> nil.  Objects keep their key order,
 *   so equal cJSON trees encode to equal bytes; replay compares bytes first
 *   and falls back to an order-insensitive comparison.
 *
 * SAFETY
 *
 *   Stored bytes are untrusted.  msgpack-c writes them; they are read back
 *   by walk(), a reader of our own that checks every length against the
 *   bytes that remain (so a forged count cannot make it allocate
 *   gigabytes), bounds nesting, allows only JSON-compatible types, and
 *   counts the cJSON tree the bytes decode to.  build() then makes that
 *   tree in one block of memory, nodes and strings together: a served
 *   result costs one allocation, not one per value.
 *   Replay reads records with pl__rec_decode_lazy(), which checks the
 *   header only.  It compares a recorded call with the new one by walking
 *   the recorded bytes against the cJSON call (pl__call_payload_same(),
 *   which checks as it goes), and other payloads with freshly encoded
 *   bytes; equal bytes need no check, and anything else is checked with
 *   pl__rec_check() before it is interpreted.
 *
 * RUN RECORDS are msgpack maps with short keys; readers ignore keys they do
 * not know, so fields can be added without a version bump.  Their fields are
 * listed at pl__run_info_encode() and pl__run_state_encode().
 */
#include "codec.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <msgpack.h>

/* ---- writing ------------------------------------------------------------- */

/* msgpack-c's writer: called for every few bytes, so the common case is
 * inline. */
static int buf_write(void *data, const char *p, size_t n)
{
    pl__buf *b = data;
    if (n > b->cap - b->len && pl__buf_reserve(b, n))
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void packer_init(msgpack_packer *pk, pl__buf *out)
{
    msgpack_packer_init(pk, out, buf_write);
}

static int pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str_with_body(pk, s, n);
}

/*
 * Nesting depth counts containers: the payload object is level 1, and no
 * array or object may be deeper than PL_MAX_JSON_DEPTH.  The reader below
 * counts the same way.
 */
static int pack_json(msgpack_packer *pk, const cJSON *v, unsigned depth)
{
    int type = v->type & 0xff;
    if ((type == cJSON_Array || type == cJSON_Object) &&
        depth > PL_MAX_JSON_DEPTH)
        return pl__err(PL_ELIMIT, "payload nests deeper than %d levels",
                       PL_MAX_JSON_DEPTH);
    int rc = 0;
    switch (v->type & 0xff) {
    case cJSON_NULL:
        rc = msgpack_pack_nil(pk);
        break;
    case cJSON_False:
        rc = msgpack_pack_false(pk);
        break;
    case cJSON_True:
        rc = msgpack_pack_true(pk);
        break;
    case cJSON_Number: {
        double d = v->valuedouble;
        if (!isfinite(d))
            return pl__err(PL_EJSON, "payload holds a non-finite number");
        if (d == trunc(d) && d >= -9223372036854775808.0 &&
            d < 9223372036854775808.0)
            rc = msgpack_pack_int64(pk, (int64_t)d);
        else
            rc = msgpack_pack_double(pk, d);
        break;
    }
    case cJSON_String:
        if (!v->valuestring)
            return pl__err(PL_EJSON, "payload string without a value");
        rc = pack_cstr(pk, v->valuestring);
        break;
    case cJSON_Array: {
        size_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next)
            n++;
        rc = msgpack_pack_array(pk, n);
        for (const cJSON *c = v->child; c && !rc; c = c->next) {
            int st = pack_json(pk, c, depth + 1);
            if (st)
                return st;
        }
        break;
    }
    case cJSON_Object: {
        size_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next)
            n++;
        rc = msgpack_pack_map(pk, n);
        for (const cJSON *c = v->child; c && !rc; c = c->next) {
            if (!c->string)
                return pl__err(PL_EJSON, "payload object member without a "
                                         "name");
            rc = pack_cstr(pk, c->string);
            if (rc)
                break;
            int st = pack_json(pk, c, depth + 1);
            if (st)
                return st;
        }
        break;
    }
    default:
        return pl__err(PL_EJSON, "payload holds a value JSON cannot express "
                                 "(raw or invalid cJSON item)");
    }
    return rc ? pl__err(PL_ENOMEM, "out of memory encoding a payload") : PL_OK;
}

int pl__json_encode(pl__buf *out, const cJSON *v)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    return pack_json(&pk, v, 1);
}

int pl__payload_encode(pl__buf *out, const cJSON *obj, size_t max_bytes)
{
    size_t start = out->len;
    if (!obj)
        return pl__buf_append(out, "\x80", 1); /* {} */
    if (!cJSON_IsObject(obj))
        return pl__err(PL_EJSON, "payload must be a JSON object");
    int rc = pl__json_encode(out, obj);
    if (rc) {
        out->len = start;
        return rc;
    }
    if (max_bytes && out->len - start > max_bytes) {
        size_t n = out->len - start;
        out->len = start;
        return pl__err(PL_ELIMIT, "payload of %zu bytes exceeds the limit of "
                                  "%zu bytes", n, max_bytes);
    }
    return PL_OK;
}

int pl__call_payload_encode(pl__buf *out, const char *policy,
                            const cJSON *payload, const char *const *actions,
                            size_t n_actions, const char *seed_digest,
                            size_t max_bytes)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_map(&pk, 2 + (n_actions > 0) + (seed_digest != NULL));
    rc = rc ? rc : pack_cstr(&pk, "policy");
    rc = rc ? rc : pack_cstr(&pk, policy);
    rc = rc ? rc : pack_cstr(&pk, "payload");
    if (rc)
        goto oom;
    int st = pl__payload_encode(out, payload, max_bytes);
    if (st) {
        out->len = start;
        return st;
    }
    if (n_actions) {
        rc = pack_cstr(&pk, "actions");
        rc = rc ? rc : msgpack_pack_array(&pk, n_actions);
        for (size_t i = 0; !rc && i < n_actions; i++)
            rc = pack_cstr(&pk, actions[i]);
        if (rc)
            goto oom;
    }
    if (seed_digest && (pack_cstr(&pk, "seed") || pack_cstr(&pk, seed_digest)))
        goto oom;
    return PL_OK;
oom:
    out->len = start;
    return pl__err(PL_ENOMEM, "out of memory encoding a call");
}

int pl__wrap_encode(pl__buf *out, const char *key, const cJSON *obj,
                    size_t max_bytes)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    if (msgpack_pack_map(&pk, 1) || pack_cstr(&pk, key)) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a payload");
    }
    int st = pl__payload_encode(out, obj, max_bytes);
    if (st)
        out->len = start;
    return st;
}

int pl__named_value_encode(pl__buf *out, const char *name, const cJSON *value,
                           size_t max_bytes)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_map(&pk, 2);
    rc = rc ? rc : pack_cstr(&pk, "name");
    rc = rc ? rc : pack_cstr(&pk, name);
    rc = rc ? rc : pack_cstr(&pk, "value");
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a payload");
    }
    int st = pack_json(&pk, value, 1);
    if (!st && max_bytes && out->len - start > max_bytes)
        st = pl__err(PL_ELIMIT, "side effect value of %zu bytes exceeds the "
                                "limit of %zu bytes", out->len - start,
                     max_bytes);
    if (st)
        out->len = start;
    return st;
}

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

int pl__rec_encode(pl__buf *out, uint32_t seq, int64_t time_us,
                   pl_step_type type, const char *actor,
                   const uint8_t prev_hash[PL_HASH_LEN], const char *code,
                   const pl__link *link, const uint8_t *payload,
                   size_t payload_len)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_array(&pk, link ? 8 : 7);
    rc = rc ? rc : msgpack_pack_uint32(&pk, link && link->folded
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
                     : msgpack_pack_bin_with_body(&pk, link->head,
                                                  PL_HASH_LEN);
    }
    if (rc || pl__buf_append(out, payload, payload_len)) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a step");
    }
    return PL_OK;
}

/* ---- reading: a bounds-checked msgpack reader ----------------------------- */

typedef struct rd {
    const uint8_t *p;
    const uint8_t *end;
} rd;

enum { MODE_ANY = 0, MODE_JSON = 1 };

static size_t rd_left(const rd *r) { return (size_t)(r->end - r->p); }

/* A big-endian integer of n = 0, 1, 2, 4 or 8 bytes (msgpack's sizes),
 * written out so that the compiler makes each a load and a byte swap. */
static uint64_t rd_be(const uint8_t *p, size_t n)
{
    switch (n) {
    case 1:
        return p[0];
    case 2:
        return (uint64_t)p[0] << 8 | p[1];
    case 4:
        return (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 |
               (uint64_t)p[2] << 8 | p[3];
    case 8:
        return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 |
               (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
               (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
               (uint64_t)p[6] << 8 | p[7];
    default:
        return 0;
    }
}

/*
 * Read one value's head: its first byte and, for sized types, the size
 * that follows.  Advances past the head only.
 */
typedef enum {
    T_NIL, T_BOOL, T_UINT, T_INT, T_F32, T_F64, T_STR, T_BIN, T_EXT,
    T_ARRAY, T_MAP
} mtype;

typedef struct head {
    mtype t;
    uint64_t u; /* uint value, element count, or byte length */
    int64_t i;  /* int value */
    double d;
    bool b;
} head;

static int rd_head_long(rd *r, head *h, uint8_t c);

static inline int rd_head(rd *r, head *h)
{
    if (!rd_left(r))
        return PL_ECORRUPT;
    uint8_t c = *r->p++;
    if (c <= 0x7f) {
        h->t = T_UINT, h->u = c;
        return PL_OK;
    }
    if (c <= 0x8f) {
        h->t = T_MAP, h->u = c & 0x0f;
        return PL_OK;
    }
    if (c <= 0x9f) {
        h->t = T_ARRAY, h->u = c & 0x0f;
        return PL_OK;
    }
    if (c <= 0xbf) {
        h->t = T_STR, h->u = c & 0x1f;
        return PL_OK;
    }
    return rd_head_long(r, h, c);
}

/* The heads that are not one byte of type and small size. */
static int rd_head_long(rd *r, head *h, uint8_t c)
{
    size_t need = 0;
    if (c >= 0xe0) {
        h->t = T_INT, h->i = (int8_t)c;
        return PL_OK;
    }
    switch (c) {
    case 0xc0: h->t = T_NIL; return PL_OK;
    case 0xc2: h->t = T_BOOL, h->b = false; return PL_OK;
    case 0xc3: h->t = T_BOOL, h->b = true; return PL_OK;
    case 0xc4: h->t = T_BIN, need = 1; break;
    case 0xc5: h->t = T_BIN, need = 2; break;
    case 0xc6: h->t = T_BIN, need = 4; break;
    case 0xc7: h->t = T_EXT, need = 1; break;
    case 0xc8: h->t = T_EXT, need = 2; break;
    case 0xc9: h->t = T_EXT, need = 4; break;
    case 0xca: h->t = T_F32, need = 4; break;
    case 0xcb: h->t = T_F64, need = 8; break;
    case 0xcc: h->t = T_UINT, need = 1; break;
    case 0xcd: h->t = T_UINT, need = 2; break;
    case 0xce: h->t = T_UINT, need = 4; break;
    case 0xcf: h->t = T_UINT, need = 8; break;
    case 0xd0: h->t = T_INT, need = 1; break;
    case 0xd1: h->t = T_INT, need = 2; break;
    case 0xd2: h->t = T_INT, need = 4; break;
    case 0xd3: h->t = T_INT, need = 8; break;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        h->t = T_EXT, need = 0;
        h->u = 1u << (c - 0xd4);
        if (rd_left(r) < 1)
            return PL_ECORRUPT;
        r->p++; /* ext type byte; data follows */
        return PL_OK;
    case 0xd9: h->t = T_STR, need = 1; break;
    case 0xda: h->t = T_STR, need = 2; break;
    case 0xdb: h->t = T_STR, need = 4; break;
    case 0xdc: h->t = T_ARRAY, need = 2; break;
    case 0xdd: h->t = T_ARRAY, need = 4; break;
    case 0xde: h->t = T_MAP, need = 2; break;
    case 0xdf: h->t = T_MAP, need = 4; break;
    default:
        return PL_ECORRUPT; /* 0xc1: never used */
    }
    if (rd_left(r) < need)
        return PL_ECORRUPT;
    uint64_t v = rd_be(r->p, need);
    r->p += need;
    switch (h->t) {
    case T_UINT:
        h->u = v;
        break;
    case T_INT:
        if (need == 1)
            h->i = (int8_t)v;
        else if (need == 2)
            h->i = (int16_t)v;
        else if (need == 4)
            h->i = (int32_t)v;
        else
            h->i = (int64_t)v;
        break;
    case T_F32: {
        uint32_t bits = (uint32_t)v;
        float f;
        memcpy(&f, &bits, sizeof f);
        h->d = f;
        break;
    }
    case T_F64:
        memcpy(&h->d, &v, sizeof h->d);
        break;
    case T_EXT:
        h->u = v;
        if (rd_left(r) < 1)
            return PL_ECORRUPT;
        r->p++; /* type byte */
        break;
    default:
        h->u = v;
        break;
    }
    return PL_OK;
}

/*
 * Walk one value, checking every length against the bytes that remain and,
 * in MODE_JSON, the JSON rules; with @p ts, count the tree it decodes to
 * (MODE_JSON only).  @p depth is the value's level if it is a container
 * (as in pack_json).  PL_ECORRUPT, no message.
 */
static int walk(rd *r, int depth, int mode, pl__tree_size *ts)
{
    head h;
    if (rd_head(r, &h))
        return PL_ECORRUPT;
    if (ts)
        ts->nodes++;
    switch (h.t) {
    case T_NIL: case T_BOOL: case T_UINT: case T_INT:
        return PL_OK;
    case T_F32: case T_F64:
        return mode == MODE_JSON && !isfinite(h.d) ? PL_ECORRUPT : PL_OK;
    case T_STR:
        if (h.u > rd_left(r) ||
            (mode == MODE_JSON && memchr(r->p, 0, (size_t)h.u)))
            return PL_ECORRUPT;
        if (ts)
            ts->text += (size_t)h.u + 1;
        r->p += h.u;
        return PL_OK;
    case T_BIN: case T_EXT:
        if (mode == MODE_JSON || h.u > rd_left(r))
            return PL_ECORRUPT;
        r->p += h.u;
        return PL_OK;
    case T_ARRAY:
    case T_MAP:
        break;
    }
    bool map = h.t == T_MAP;
    /* every element takes at least a byte, every member two */
    if (depth > PL_MAX_JSON_DEPTH || h.u > rd_left(r) / (map ? 2 : 1))
        return PL_ECORRUPT;
    for (uint64_t i = 0; i < h.u; i++) {
        if (map && mode == MODE_JSON) { /* keys must be strings */
            head kh;
            if (rd_head(r, &kh) || kh.t != T_STR || kh.u > rd_left(r) ||
                memchr(r->p, 0, (size_t)kh.u))
                return PL_ECORRUPT;
            if (ts)
                ts->text += (size_t)kh.u + 1;
            r->p += kh.u;
        } else if (map && walk(r, depth + 1, mode, NULL)) {
            return PL_ECORRUPT;
        }
        if (walk(r, depth + 1, mode, ts))
            return PL_ECORRUPT;
    }
    return PL_OK;
}

/* Walk a whole payload that holds a policy's value @p outer containers
 * deep; the errors carry a message. */
static int walk_payload(const uint8_t *mp, size_t len, bool want_map,
                        unsigned outer, pl__tree_size *ts)
{
    rd r = {mp, mp + len};
    if (!len)
        return pl__err(PL_ECORRUPT, "empty payload");
    if (want_map && !((mp[0] >= 0x80 && mp[0] <= 0x8f) || mp[0] == 0xde ||
                      mp[0] == 0xdf))
        return pl__err(PL_ECORRUPT, "payload is not a map");
    if (walk(&r, 1 - (int)outer, MODE_JSON, ts))
        return pl__err(PL_ECORRUPT, "malformed or truncated payload, or one "
                                    "nested deeper than %d levels",
                       PL_MAX_JSON_DEPTH);
    if (r.p != r.end)
        return pl__err(PL_ECORRUPT, "%zu stray bytes after the payload",
                       rd_left(&r));
    return PL_OK;
}

int pl__payload_measure(const uint8_t *mp, size_t len, unsigned outer,
                        pl__tree_size *ts)
{
    *ts = (pl__tree_size){0, 0, 0};
    int st = walk_payload(mp, len, false, outer, ts);
    if (st)
        return st;
    /* both are at most a few times len, so only a 32-bit size_t can
     * overflow */
    if (ts->nodes > (SIZE_MAX - ts->text) / sizeof(cJSON))
        return pl__err(PL_ENOMEM, "a payload of %zu bytes is too big to "
                                  "decode here", len);
    ts->bytes = ts->nodes * sizeof(cJSON) + ts->text;
    return PL_OK;
}

/* Where pl__payload_build() puts the next node and the next string. */
typedef struct tree_at {
    cJSON *node, *node_end;
    char *text, *text_end;
} tree_at;

static char *tree_text(tree_at *t, const uint8_t *p, size_t n)
{
    if ((size_t)(t->text_end - t->text) <= n)
        return NULL;
    char *s = t->text;
    memcpy(s, p, n);
    s[n] = '\0';
    t->text += n + 1;
    return s;
}

/* cJSON_CreateNumber's two fields: valueint saturates. */
static void tree_number(cJSON *v, double d)
{
    v->type = cJSON_Number;
    v->valuedouble = d;
    v->valueint = d >= INT_MAX ? INT_MAX : d <= (double)INT_MIN ? INT_MIN
                                                                : (int)d;
}

/*
 * Build one value, from bytes walk() accepted as JSON and counted, into
 * @p t.  The nodes are linked as cJSON links them: a container's first
 * child's prev is its last.  NULL only if the bytes or the block are not
 * the ones measured.
 */
static cJSON *build(rd *r, tree_at *t)
{
    head h;
    if (t->node == t->node_end || rd_head(r, &h))
        return NULL;
    cJSON *v = t->node++;
    memset(v, 0, sizeof *v);
    switch (h.t) {
    case T_NIL: v->type = cJSON_NULL; return v;
    case T_BOOL: v->type = h.b ? cJSON_True : cJSON_False; return v;
    case T_UINT: tree_number(v, (double)h.u); return v;
    case T_INT: tree_number(v, (double)h.i); return v;
    case T_F32: case T_F64: tree_number(v, h.d); return v;
    case T_STR:
        if (h.u > rd_left(r) ||
            !(v->valuestring = tree_text(t, r->p, (size_t)h.u)))
            return NULL;
        v->type = cJSON_String;
        r->p += h.u;
        return v;
    case T_ARRAY: case T_MAP:
        break;
    default:
        return NULL;
    }
    bool map = h.t == T_MAP;
    v->type = map ? cJSON_Object : cJSON_Array;
    cJSON *last = NULL;
    for (uint64_t i = 0; i < h.u; i++) {
        char *key = NULL;
        if (map) {
            head kh;
            if (rd_head(r, &kh) || kh.t != T_STR || kh.u > rd_left(r) ||
                !(key = tree_text(t, r->p, (size_t)kh.u)))
                return NULL;
            r->p += kh.u;
        }
        cJSON *item = build(r, t);
        if (!item)
            return NULL;
        item->string = key;
        if (last) {
            last->next = item;
            item->prev = last;
        } else {
            v->child = item;
        }
        last = item;
    }
    if (last)
        v->child->prev = last;
    return v;
}

cJSON *pl__payload_build(const uint8_t *mp, size_t len,
                         const pl__tree_size *ts, void *block)
{
    tree_at t = {block, (cJSON *)block + ts->nodes, NULL,
                 (char *)block + ts->bytes};
    t.text = (char *)t.node_end;
    rd r = {mp, mp + len};
    cJSON *root = build(&r, &t);
    return root && r.p == r.end ? root : NULL;
}

int pl__payload_check(const uint8_t *mp, size_t len, bool want_map)
{
    return walk_payload(mp, len, want_map, 0, NULL);
}

int pl__payload_decode(cJSON **out, const uint8_t *mp, size_t len)
{
    return pl__payload_decode_in(out, mp, len, 0);
}

/* Decode into one new block: *out is the tree in it, read-only. */
static int decode_block(const uint8_t *mp, size_t len, unsigned outer,
                        void **block, const cJSON **out)
{
    pl__tree_size ts;
    *block = NULL;
    int st = pl__payload_measure(mp, len, outer, &ts);
    if (st)
        return st;
    if (!(*block = malloc(ts.bytes)))
        return pl__err(PL_ENOMEM, "out of memory decoding a payload");
    if (!(*out = pl__payload_build(mp, len, &ts, *block))) {
        free(*block);
        *block = NULL;
        return pl__err(PL_ECORRUPT, "a payload changed while decoding it");
    }
    return PL_OK;
}

int pl__payload_decode_in(cJSON **out, const uint8_t *mp, size_t len,
                          unsigned outer)
{
    void *block;
    const cJSON *root;
    *out = NULL;
    int st = decode_block(mp, len, outer, &block, &root);
    if (st)
        return st;
    /* a tree the caller owns is one cJSON_Delete() can free */
    *out = cJSON_Duplicate(root, true);
    free(block);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory decoding a "
                                             "payload");
}

unsigned pl__step_wrapping(pl_step_type type)
{
    return type == PL_STEP_ACTION_CALL || type == PL_STEP_SIDE_EFFECT ||
           type == PL_STEP_SUSPEND || type == PL_STEP_RESUME;
}

static inline int rd_uint(rd *r, uint64_t *v)
{
    head h;
    if (rd_head(r, &h))
        return PL_ECORRUPT;
    if (h.t == T_UINT) {
        *v = h.u;
        return PL_OK;
    }
    if (h.t == T_INT && h.i >= 0) {
        *v = (uint64_t)h.i;
        return PL_OK;
    }
    return PL_ECORRUPT;
}

static inline int rd_int(rd *r, int64_t *v)
{
    head h;
    if (rd_head(r, &h))
        return PL_ECORRUPT;
    if (h.t == T_INT) {
        *v = h.i;
        return PL_OK;
    }
    if (h.t == T_UINT && h.u <= INT64_MAX) {
        *v = (int64_t)h.u;
        return PL_OK;
    }
    return PL_ECORRUPT;
}

/* A str or bin, by type; *p points into the record. */
static inline int rd_bytes(rd *r, mtype want, const uint8_t **p, size_t *n)
{
    head h;
    if (rd_head(r, &h) || h.t != want || h.u > rd_left(r))
        return PL_ECORRUPT;
    *p = r->p;
    *n = (size_t)h.u;
    r->p += h.u;
    return PL_OK;
}

static bool actor_ok(const uint8_t *p, size_t n)
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
    rd r = {data, data + len};
    head h;
    uint64_t version, seq, type;
    const uint8_t *s;
    size_t n;

    if (rd_head(&r, &h) || h.t != T_ARRAY || h.u < 1)
        return pl__err(PL_ECORRUPT, "step record does not start with a "
                                    "header array");
    if (rd_uint(&r, &version))
        return pl__err(PL_ECORRUPT, "step record has no format version");
    if (version != PL__FORMAT_VERSION && version != PL__FORMAT_V2)
        return pl__err(PL_EVERSION, "step record has format version %llu; "
                                    "this build reads versions %u and %u",
                       (unsigned long long)version, PL__FORMAT_VERSION,
                       PL__FORMAT_V2);
    if (h.u != 7 && h.u != 8)
        return pl__err(PL_ECORRUPT, "step header has %llu fields, expected 7 "
                                    "or 8", (unsigned long long)h.u);
    if (rd_uint(&r, &seq) || seq > UINT32_MAX)
        return pl__err(PL_ECORRUPT, "step record has a bad sequence number");
    out->seq = (uint32_t)seq;
    if (rd_int(&r, &out->time_us))
        return pl__err(PL_ECORRUPT, "step record has a bad time");
    if (rd_uint(&r, &type) || type < PL_STEP_TEXT || type > PL_STEP_ERROR)
        return pl__err(PL_ECORRUPT, "step record has an unknown step type");
    out->type = (pl_step_type)type;
    if (rd_bytes(&r, T_STR, &s, &n) || !actor_ok(s, n))
        return pl__err(PL_ECORRUPT, "step record has a bad actor");
    out->actor = (const char *)s;
    out->actor_len = n;
    if (rd_bytes(&r, T_BIN, &s, &n) || n != PL_HASH_LEN)
        return pl__err(PL_ECORRUPT, "step record has a bad previous-step "
                                    "hash");
    out->prev_hash = s;
    if (rd_left(&r) && *r.p == 0xc0) {
        r.p++;
        out->code = NULL;
        out->code_len = 0;
    } else {
        if (rd_bytes(&r, T_STR, &s, &n) || n > 4096)
            return pl__err(PL_ECORRUPT, "step record has a bad code "
                                        "identity");
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
                ft < PL_STEP_TEXT || ft > PL_STEP_ERROR)
                return pl__err(PL_ECORRUPT, "step record has a bad folded "
                                            "link");
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
            return pl__err(PL_ECORRUPT, "step record %llu: only a version "
                                        "%u record may hold its caller's "
                                        "result", (unsigned long long)seq,
                           PL__FORMAT_V2);
        return PL_OK;
    }
    if (!out->payload_len || !((*r.p >= 0x80 && *r.p <= 0x8f) ||
                               *r.p == 0xde || *r.p == 0xdf))
        return pl__err(PL_ECORRUPT, "step record %llu: the payload is not a "
                                    "map", (unsigned long long)seq);
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
        return pl__err(PL_ECORRUPT, "step record %u holds its caller's "
                                    "result, which was not read with it",
                       rec->seq);
    int rc = walk_payload(rec->payload, rec->payload_len, true,
                          pl__step_wrapping(rec->type), NULL);
    if (rc)
        return pl__err(rc, "step record %u: %s", rec->seq, pl_errmsg());
    return PL_OK;
}

int pl__rec_decode(pl__rec *out, const uint8_t *data, size_t len)
{
    int rc = pl__rec_decode_lazy(out, data, len);
    return rc ? rc : pl__rec_check(out);
}

bool pl__map_find(const uint8_t *mp, size_t len, const char *key,
                  const uint8_t **val, size_t *val_len)
{
    rd r = {mp, mp + len};
    head h;
    size_t klen = strlen(key);
    if (rd_head(&r, &h) || h.t != T_MAP)
        return false;
    for (uint64_t i = 0; i < h.u; i++) {
        const uint8_t *k;
        size_t kn;
        if (rd_bytes(&r, T_STR, &k, &kn))
            return false;
        const uint8_t *v = r.p;
        if (walk(&r, 1, MODE_ANY, NULL))
            return false;
        if (kn == klen && memcmp(k, key, kn) == 0) {
            *val = v;
            *val_len = (size_t)(r.p - v);
            return true;
        }
    }
    return false;
}

bool pl__mp_str(const uint8_t *mp, size_t len, const char **s, size_t *n)
{
    rd r = {mp, mp + len};
    const uint8_t *p;
    if (rd_bytes(&r, T_STR, &p, n))
        return false;
    *s = (const char *)p;
    return true;
}

typedef struct member {
    const cJSON *c;
    size_t at; /* position in its object: equal keys keep their order */
} member;

static int member_cmp(const void *x, const void *y)
{
    const member *a = x, *b = y;
    int c = strcmp(a->c->string, b->c->string);
    return c ? c : (a->at > b->at) - (a->at < b->at);
}

/* The @p n members of @p obj sorted by key; NULL when out of memory. */
static member *sorted_members(const cJSON *obj, size_t n)
{
    member *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next, i++)
        v[i] = (member){c, i};
    qsort(v, n, sizeof *v, member_cmp);
    return v;
}

/*
 * Equal JSON values, objects compared without regard to key order.  Each
 * pair of subtrees is compared once (cJSON_Compare compares every object's
 * members from both sides, which doubles the work at every level).
 */
static bool json_equal(const cJSON *a, const cJSON *b)
{
    int t = a->type & 0xff;
    if (t != (b->type & 0xff))
        return false;
    switch (t) {
    case cJSON_False: case cJSON_True: case cJSON_NULL:
        return true;
    case cJSON_Number:
        return a->valuedouble == b->valuedouble;
    case cJSON_String:
        return strcmp(a->valuestring, b->valuestring) == 0;
    case cJSON_Array: {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!json_equal(x, y))
                return false;
        return !x && !y;
    }
    case cJSON_Object: {
        size_t n = 0, m = 0;
        bool same_order = true;
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next, n++, m++)
            same_order = same_order && strcmp(x->string, y->string) == 0;
        for (; x; x = x->next)
            n++;
        for (; y; y = y->next)
            m++;
        if (n != m)
            return false;
        if (same_order) {
            for (x = a->child, y = b->child; x; x = x->next, y = y->next)
                if (!json_equal(x, y))
                    return false;
            return true;
        }
        member *va = sorted_members(a, n), *vb = sorted_members(b, n);
        bool eq = va && vb; /* out of memory: not shown equal */
        for (size_t i = 0; eq && i < n; i++)
            eq = strcmp(va[i].c->string, vb[i].c->string) == 0 &&
                 json_equal(va[i].c, vb[i].c);
        free(va);
        free(vb);
        return eq;
    }
    default:
        return false; /* nothing else comes out of walk() */
    }
}

bool pl__payload_equal(const uint8_t *a, size_t alen, const uint8_t *b,
                       size_t blen)
{
    if (alen == blen && memcmp(a, b, alen) == 0)
        return true;
    void *ba = NULL, *bb = NULL;
    const cJSON *ja, *jb;
    bool eq = !decode_block(a, alen, 1, &ba, &ja) &&
              !decode_block(b, blen, 1, &bb, &jb) && json_equal(ja, jb);
    free(ba);
    free(bb);
    return eq;
}

/* ---- comparing a recorded call with a new one, without encoding it -------- */

/* The str of @p n bytes at the reader is @p s, all of it.  Names and most
 * values are short: a loop over them costs less than two calls. */
static bool same_str(rd *r, uint64_t n, const char *s)
{
    if (!s || n > rd_left(r))
        return false;
    if (n > 32) {
        if (strnlen(s, (size_t)n + 1) != n || memcmp(r->p, s, (size_t)n))
            return false;
    } else {
        for (size_t i = 0; i < n; i++) /* stops at the NUL of a shorter s */
            if (!s[i] || (uint8_t)s[i] != r->p[i])
                return false;
        if (s[n])
            return false;
    }
    r->p += n;
    return true;
}

static bool same_key(rd *r, const char *key)
{
    head h;
    return !rd_head(r, &h) && h.t == T_STR && same_str(r, h.u, key);
}

/*
 * Is the recorded value at the reader @p v, member for member in the same
 * order, as json_equal() would find the two?  False also for whatever
 * pack_json() refuses (non-finite numbers, raw items, too deep), so that
 * the caller's slow path reports it.
 */
static bool same_json(rd *r, const cJSON *v, unsigned depth)
{
    head h;
    if (rd_head(r, &h))
        return false;
    switch (v->type & 0xff) {
    case cJSON_NULL:
        return h.t == T_NIL;
    case cJSON_False:
    case cJSON_True:
        return h.t == T_BOOL && h.b == ((v->type & 0xff) == cJSON_True);
    case cJSON_Number: {
        double d = v->valuedouble;
        return isfinite(d) && ((h.t == T_UINT && (double)h.u == d) ||
                               (h.t == T_INT && (double)h.i == d) ||
                               ((h.t == T_F32 || h.t == T_F64) && h.d == d));
    }
    case cJSON_String:
        return h.t == T_STR && same_str(r, h.u, v->valuestring);
    case cJSON_Array:
    case cJSON_Object: {
        bool obj = (v->type & 0xff) == cJSON_Object;
        if (depth > PL_MAX_JSON_DEPTH || h.t != (obj ? T_MAP : T_ARRAY))
            return false;
        uint64_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next, n++)
            if (n == h.u || (obj && !same_key(r, c->string)) ||
                !same_json(r, c, depth + 1))
                return false;
        return n == h.u;
    }
    default:
        return false;
    }
}

bool pl__call_payload_same(const uint8_t *mp, size_t len, const char *policy,
                           const cJSON *payload, const char *const *actions,
                           size_t n_actions, const char *seed_digest,
                           size_t max_bytes)
{
    rd r = {mp, mp + len};
    head h;
    if (rd_head(&r, &h) || h.t != T_MAP ||
        h.u != 2u + (n_actions > 0) + (seed_digest != NULL) ||
        !same_key(&r, "policy") || !same_key(&r, policy) ||
        !same_key(&r, "payload"))
        return false;
    const uint8_t *at = r.p;
    if (payload ? !cJSON_IsObject(payload) || !same_json(&r, payload, 1)
                : rd_head(&r, &h) || h.t != T_MAP || h.u != 0)
        return false;
    if (max_bytes && (size_t)(r.p - at) > max_bytes)
        return false;
    if (n_actions) {
        if (!same_key(&r, "actions") || rd_head(&r, &h) || h.t != T_ARRAY ||
            h.u != n_actions)
            return false;
        for (size_t i = 0; i < n_actions; i++)
            if (!same_key(&r, actions[i]))
                return false;
    }
    if (seed_digest && (!same_key(&r, "seed") || !same_key(&r, seed_digest)))
        return false;
    return r.p == r.end;
}

char *pl__payload_text(const uint8_t *mp, size_t len, size_t max)
{
    cJSON *j = NULL;
    if (pl__payload_decode_in(&j, mp, len, 1))
        return pl__strdup("<undecodable payload>");
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        return NULL;
    char *out;
    size_t n = strlen(s);
    if (max >= 4 && n > max) {
        out = pl__asprintf("%.*s...", (int)(max - 3), s);
    } else {
        out = pl__strdup(s);
    }
    cJSON_free(s);
    return out;
}

/* ---- run records ---------------------------------------------------------- */

static int pack_key(msgpack_packer *pk, const char *k)
{
    return pack_cstr(pk, k);
}

/*
 * Run info map: v (uint, 1), policy (str), payload (map), actions ([str]),
 * seed (array of [type, actor, payload], or absent), created (int, us).
 */
int pl__run_info_encode(pl__buf *out, const pl__run_info *ri)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    int rc = msgpack_pack_map(&pk, ri->seed ? 6 : 5);
    rc = rc ? rc : pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, PL__FORMAT_VERSION);
    rc = rc ? rc : pack_key(&pk, "policy");
    rc = rc ? rc : pack_cstr(&pk, ri->policy);
    rc = rc ? rc : pack_key(&pk, "payload");
    rc = rc ? rc : (pl__buf_append(out, ri->payload, ri->payload_len) ? -1 : 0);
    rc = rc ? rc : pack_key(&pk, "actions");
    rc = rc ? rc : msgpack_pack_array(&pk, ri->n_actions);
    for (size_t i = 0; !rc && i < ri->n_actions; i++)
        rc = pack_cstr(&pk, ri->actions[i]);
    if (!rc && ri->seed) {
        rc = pack_key(&pk, "seed");
        rc = rc ? rc : (pl__buf_append(out, ri->seed, ri->seed_len) ? -1 : 0);
    }
    rc = rc ? rc : pack_key(&pk, "created");
    rc = rc ? rc : msgpack_pack_int64(&pk, ri->created_us);
    return rc ? pl__err(PL_ENOMEM, "out of memory encoding a run record")
              : PL_OK;
}

static bool key_is(const uint8_t *k, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(k, want, n) == 0;
}

static char *dup_bytes(const uint8_t *p, size_t n)
{
    return pl__strndup((const char *)p, n);
}

static uint8_t *dup_mem(const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* A record's "v" field: PL_OK for the version this build reads. */
static int read_version(rd *r, const char *what)
{
    uint64_t u;
    if (rd_uint(r, &u))
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    if (u != PL__FORMAT_VERSION)
        return pl__err(PL_EVERSION, "%s has format version %llu", what,
                       (unsigned long long)u);
    return PL_OK;
}

/*
 * A run record holds a policy's value up to RECORD_OUTER containers deep (a
 * seed step's payload: the record, its seed list, the seed entry), so the
 * structural walks of a record start that many levels above a payload's
 * level 1; each payload is then checked at its own depth.
 */
#define RECORD_OUTER 3

/* Start reading a record map: check it whole, then position on its pairs. */
static int map_begin(rd *r, const uint8_t *data, size_t len, uint64_t *n,
                     const char *what)
{
    rd chk = {data, data + len};
    head h;
    if (walk(&chk, 1 - RECORD_OUTER, MODE_ANY, NULL) || chk.p != chk.end)
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    r->p = data;
    r->end = data + len;
    if (rd_head(r, &h) || h.t != T_MAP)
        return pl__err(PL_ECORRUPT, "%s is not a map", what);
    *n = h.u;
    return PL_OK;
}

/* The extent of the value at r (already checked). */
static void value_span(rd *r, const uint8_t **v, size_t *n)
{
    *v = r->p;
    (void)walk(r, 2 - RECORD_OUTER, MODE_ANY, NULL);
    *n = (size_t)(r->p - *v);
}

int pl__run_info_decode(pl__run_info *out, const uint8_t *data, size_t len)
{
    memset(out, 0, sizeof *out);
    rd r;
    uint64_t n;
    int rc = map_begin(&r, data, len, &n, "run record");
    if (rc)
        return rc;
    bool have_v = false;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (key_is(k, kn, "v")) {
            if ((rc = read_version(&r, "run record"))) {
                pl__run_info_clear(out);
                return rc;
            }
            have_v = true;
        } else if (key_is(k, kn, "policy")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || !actor_ok(v, vn))
                goto bad;
            free(out->policy);
            if (!(out->policy = dup_bytes(v, vn)))
                goto oom;
        } else if (key_is(k, kn, "payload")) {
            value_span(&r, &v, &vn);
            if (pl__payload_check(v, vn, true))
                goto bad;
            free(out->payload);
            if (!(out->payload = dup_mem(v, vn)))
                goto oom;
            out->payload_len = vn;
        } else if (key_is(k, kn, "actions")) {
            head h;
            if (rd_head(&r, &h) || h.t != T_ARRAY || out->actions)
                goto bad;
            out->actions = calloc(h.u ? h.u : 1, sizeof *out->actions);
            if (!out->actions)
                goto oom;
            for (uint64_t j = 0; j < h.u; j++) {
                if (rd_bytes(&r, T_STR, &v, &vn) || !actor_ok(v, vn))
                    goto bad;
                if (!(out->actions[j] = dup_bytes(v, vn)))
                    goto oom;
                out->n_actions++;
            }
        } else if (key_is(k, kn, "seed")) {
            value_span(&r, &v, &vn);
            free(out->seed);
            if (!(out->seed = dup_mem(v, vn)))
                goto oom;
            out->seed_len = vn;
        } else if (key_is(k, kn, "created")) {
            if (rd_int(&r, &out->created_us))
                goto bad;
        } else {
            value_span(&r, &v, &vn); /* a newer field: skip */
        }
    }
    if (!have_v || !out->policy || !out->payload)
        goto bad;
    return PL_OK;
bad:
    pl__run_info_clear(out);
    return pl__err(PL_ECORRUPT, "run record is malformed");
oom:
    pl__run_info_clear(out);
    return pl__err(PL_ENOMEM, "out of memory reading a run record");
}

void pl__run_info_clear(pl__run_info *ri)
{
    free(ri->policy);
    free(ri->payload);
    for (size_t i = 0; i < ri->n_actions; i++)
        free(ri->actions[i]);
    free(ri->actions);
    free(ri->seed);
    memset(ri, 0, sizeof *ri);
}

/*
 * Run state map: v, status, steps, updated, heartbeat, pid, pstart, host,
 * attempts, error, and when set: reason (str), token (str), spath (str),
 * sseq (uint), prompt (map), result (map), head (bin 32: the hash of the
 * root ledger's last step, written with it).
 */
int pl__run_state_encode(pl__buf *out, const pl__run_state *st)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t n = 10 + (st->reason != NULL) + (st->token[0] != 0) +
               (st->susp_path != NULL) * 2 + (st->prompt != NULL) +
               (st->result != NULL) + st->has_head;
    int rc = msgpack_pack_map(&pk, n);
    rc = rc ? rc : pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, PL__FORMAT_VERSION);
    rc = rc ? rc : pack_key(&pk, "status");
    rc = rc ? rc : msgpack_pack_uint32(&pk, (uint32_t)st->status);
    rc = rc ? rc : pack_key(&pk, "steps");
    rc = rc ? rc : msgpack_pack_uint64(&pk, st->steps);
    rc = rc ? rc : pack_key(&pk, "updated");
    rc = rc ? rc : msgpack_pack_int64(&pk, st->updated_us);
    rc = rc ? rc : pack_key(&pk, "heartbeat");
    rc = rc ? rc : msgpack_pack_int64(&pk, st->heartbeat_us);
    rc = rc ? rc : pack_key(&pk, "pid");
    rc = rc ? rc : msgpack_pack_int64(&pk, st->owner_pid);
    rc = rc ? rc : pack_key(&pk, "pstart");
    rc = rc ? rc : msgpack_pack_uint64(&pk, st->owner_start);
    rc = rc ? rc : pack_key(&pk, "host");
    rc = rc ? rc : pack_cstr(&pk, st->owner_host);
    rc = rc ? rc : pack_key(&pk, "attempts");
    rc = rc ? rc : msgpack_pack_uint32(&pk, st->attempts);
    rc = rc ? rc : pack_key(&pk, "error");
    rc = rc ? rc : msgpack_pack_int32(&pk, st->error);
    if (!rc && st->reason) {
        rc = pack_key(&pk, "reason");
        rc = rc ? rc : pack_cstr(&pk, st->reason);
    }
    if (!rc && st->token[0]) {
        rc = pack_key(&pk, "token");
        rc = rc ? rc : pack_cstr(&pk, st->token);
    }
    if (!rc && st->susp_path) {
        rc = pack_key(&pk, "spath");
        rc = rc ? rc : pack_cstr(&pk, st->susp_path);
        rc = rc ? rc : pack_key(&pk, "sseq");
        rc = rc ? rc : msgpack_pack_uint32(&pk, st->susp_seq);
    }
    if (!rc && st->prompt) {
        rc = pack_key(&pk, "prompt");
        rc = rc ? rc : (pl__buf_append(out, st->prompt, st->prompt_len) ? -1 : 0);
    }
    if (!rc && st->result) {
        rc = pack_key(&pk, "result");
        rc = rc ? rc : (pl__buf_append(out, st->result, st->result_len) ? -1 : 0);
    }
    if (!rc && st->has_head) {
        rc = pack_key(&pk, "head");
        rc = rc ? rc : msgpack_pack_bin_with_body(&pk, st->head, PL_HASH_LEN);
    }
    return rc ? pl__err(PL_ENOMEM, "out of memory encoding a run state")
              : PL_OK;
}

int pl__run_state_decode(pl__run_state *out, const uint8_t *data, size_t len)
{
    memset(out, 0, sizeof *out);
    rd r;
    uint64_t n, u;
    int64_t i64;
    int rc = map_begin(&r, data, len, &n, "run state");
    if (rc)
        return rc;
    bool have_v = false;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (key_is(k, kn, "v")) {
            if ((rc = read_version(&r, "run state"))) {
                pl__run_state_clear(out);
                return rc;
            }
            have_v = true;
        } else if (key_is(k, kn, "status")) {
            if (rd_uint(&r, &u) || u < PL_RUN_RUNNING || u > PL_RUN_FAILED)
                goto bad;
            out->status = (pl_run_status)u;
        } else if (key_is(k, kn, "steps")) {
            if (rd_uint(&r, &out->steps))
                goto bad;
        } else if (key_is(k, kn, "updated")) {
            if (rd_int(&r, &out->updated_us))
                goto bad;
        } else if (key_is(k, kn, "heartbeat")) {
            if (rd_int(&r, &out->heartbeat_us))
                goto bad;
        } else if (key_is(k, kn, "pid")) {
            if (rd_int(&r, &out->owner_pid))
                goto bad;
        } else if (key_is(k, kn, "pstart")) {
            if (rd_uint(&r, &out->owner_start))
                goto bad;
        } else if (key_is(k, kn, "host")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn >= sizeof out->owner_host)
                goto bad;
            memcpy(out->owner_host, v, vn);
            out->owner_host[vn] = '\0';
        } else if (key_is(k, kn, "attempts")) {
            if (rd_uint(&r, &u) || u > UINT32_MAX)
                goto bad;
            out->attempts = (uint32_t)u;
        } else if (key_is(k, kn, "error")) {
            if (rd_int(&r, &i64) || i64 < -10000 || i64 > 0)
                goto bad;
            out->error = (int)i64;
        } else if (key_is(k, kn, "reason")) {
            if (rd_bytes(&r, T_STR, &v, &vn))
                goto bad;
            free(out->reason);
            if (!(out->reason = dup_bytes(v, vn)))
                goto oom;
        } else if (key_is(k, kn, "token")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn >= sizeof out->token)
                goto bad;
            memcpy(out->token, v, vn);
            out->token[vn] = '\0';
        } else if (key_is(k, kn, "spath")) {
            if (rd_bytes(&r, T_STR, &v, &vn))
                goto bad;
            free(out->susp_path);
            if (!(out->susp_path = dup_bytes(v, vn)))
                goto oom;
        } else if (key_is(k, kn, "sseq")) {
            if (rd_uint(&r, &u) || u > UINT32_MAX)
                goto bad;
            out->susp_seq = (uint32_t)u;
        } else if (key_is(k, kn, "head")) {
            if (rd_bytes(&r, T_BIN, &v, &vn) || vn != PL_HASH_LEN)
                goto bad;
            memcpy(out->head, v, PL_HASH_LEN);
            out->has_head = true;
        } else if (key_is(k, kn, "prompt") || key_is(k, kn, "result")) {
            bool prompt = key_is(k, kn, "prompt");
            value_span(&r, &v, &vn);
            if (pl__payload_check(v, vn, true))
                goto bad;
            uint8_t **dst = prompt ? &out->prompt : &out->result;
            free(*dst);
            if (!(*dst = dup_mem(v, vn)))
                goto oom;
            *(prompt ? &out->prompt_len : &out->result_len) = vn;
        } else {
            value_span(&r, &v, &vn);
        }
    }
    if (!have_v || !out->status)
        goto bad;
    return PL_OK;
bad:
    pl__run_state_clear(out);
    return pl__err(PL_ECORRUPT, "run state is malformed");
oom:
    pl__run_state_clear(out);
    return pl__err(PL_ENOMEM, "out of memory reading a run state");
}

void pl__run_state_clear(pl__run_state *st)
{
    free(st->reason);
    free(st->susp_path);
    free(st->prompt);
    free(st->result);
    memset(st, 0, sizeof *st);
}

int pl__run_state_copy(pl__run_state *dst, const pl__run_state *src)
{
    *dst = *src;
    dst->reason = NULL;
    dst->susp_path = NULL;
    dst->prompt = NULL;
    dst->result = NULL;
    if ((src->reason && !(dst->reason = pl__strdup(src->reason))) ||
        (src->susp_path && !(dst->susp_path = pl__strdup(src->susp_path))) ||
        (src->prompt && !(dst->prompt = dup_mem(src->prompt,
                                                src->prompt_len))) ||
        (src->result && !(dst->result = dup_mem(src->result,
                                                src->result_len)))) {
        pl__run_state_clear(dst);
        return pl__err(PL_ENOMEM, "out of memory copying a run state");
    }
    return PL_OK;
}
