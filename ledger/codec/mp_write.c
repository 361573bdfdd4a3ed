/*
 * mp_write.c -- the msgpack writer: payloads, and the calls, wrappers and
 * named values made of them, written with msgpack-c.
 *
 * PAYLOAD
 *
 *   JSON maps onto msgpack one to one: object -> map with str keys, array ->
 *   array, string -> str, number -> int when integral and within int64, else
 *   float64, true/false -> bool, null -> nil.  Objects keep their key order,
 *   so equal cJSON trees encode to equal bytes; replay compares bytes first
 *   and falls back to an order-insensitive comparison (payload_cmp.c).
 *   mp_read.c reads the bytes back.
 */
#include "mp.h"

#include <math.h>
#include <stdint.h>

/* ---- JSON as msgpack ----------------------------------------------------- */

/*
 * Nesting depth counts containers: the payload object is level 1, and no
 * array or object may be deeper than PL_MAX_JSON_DEPTH.  The reader below
 * counts the same way.
 */
int pl__pack_json(msgpack_packer *pk, const cJSON *v, unsigned depth)
{
    int type = v->type & 0xff;
    if ((type == cJSON_Array || type == cJSON_Object) &&
        depth > PL_MAX_JSON_DEPTH)
        return pl__err(PL_ELIMIT, "payload nests deeper than %d levels",
                       PL_MAX_JSON_DEPTH);
    int rc = 0;
    switch (v->type & 0xff) {
    case cJSON_NULL: rc = msgpack_pack_nil(pk); break;
    case cJSON_False: rc = msgpack_pack_false(pk); break;
    case cJSON_True: rc = msgpack_pack_true(pk); break;
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
            int st = pl__pack_json(pk, c, depth + 1);
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
                return pl__err(PL_EJSON,
                               "payload object member without a name");
            rc = pack_cstr(pk, c->string);
            if (rc)
                break;
            int st = pl__pack_json(pk, c, depth + 1);
            if (st)
                return st;
        }
        break;
    }
    default:
        return pl__err(
            PL_EJSON,
            "payload holds a value JSON cannot express (raw or invalid cJSON item)");
    }
    return rc ? pl__err(PL_ENOMEM, "out of memory encoding a payload") : PL_OK;
}

int pl__json_encode(pl__buf *out, const cJSON *v)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    return pl__pack_json(&pk, v, 1);
}

/*
 * The value just encoded at @p start of @p out, holding a policy's value
 * @p outer containers deep, decodes within PL__TREE_MAX (see payload.h).  A value decodes to at most one node per byte, so only
 * a big one needs measuring.
 */
static int tree_fits(const pl__buf *out, size_t start, unsigned outer)
{
    pl__tree_size ts;
    size_t n = out->len - start;
    if (n <= PL__TREE_MAX / (sizeof(cJSON) + 1))
        return PL_OK;
    return pl__payload_measure(&ts, out->data + start, n, outer);
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
        return pl__err(PL_ELIMIT,
                       "payload of %zu bytes exceeds the limit of %zu bytes", n,
                       max_bytes);
    }
    if ((rc = tree_fits(out, start, 0)))
        out->len = start;
    return rc;
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
    int st = pl__pack_json(&pk, value, 1);
    if (!st && max_bytes && out->len - start > max_bytes)
        st = pl__err(
            PL_ELIMIT,
            "side effect value of %zu bytes exceeds the limit of %zu bytes",
            out->len - start, max_bytes);
    if (!st)
        st = tree_fits(out, start, 1);
    if (st)
        out->len = start;
    return st;
}
