/*
 * test_codec.c -- the msgpack step records and payloads
 * (ledger/codec/record.c and the payloads of mp_write.c and mp_read.c),
 * through their internal header codec.h: step records of every type
 * round-trip field by field; JSON payloads of every kind round-trip through
 * cJSON with their key order; the payload limits (non-objects, non-finite
 * numbers, nesting depth, size) hold at and past the limit.  The records'
 * other subjects are in test_codec_*.c: hostile bytes and a fuzz loop
 * (test_codec_hostile.c), a recorded call compared without encoding
 * (test_codec_cmp.c), and run, inbox and timer records (test_codec_run.c).
 */
#include "support.h"
#include "support_codec.h"

#include "codec.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- building bytes ------------------------------------------------------ */

/* ---- decoding helpers ---------------------------------------------------- */

/* ---- JSON helpers -------------------------------------------------------- */

static cJSON *roundtrip(const cJSON *in)
{
    pl__buf b = {0};
    int st = pl__payload_encode(&b, in, 0);
    cr_assert_eq(st, PL_OK, "encode: %s", pl_errmsg());
    cr_assert_eq(pl__payload_check(b.data, b.len, true), PL_OK, "check: %s",
                 pl_errmsg());
    cJSON *out = NULL;
    st = pl__payload_decode(&out, b.data, b.len);
    cr_assert_eq(st, PL_OK, "decode: %s", pl_errmsg());
    cr_assert_not_null(out);
    expect_cjson_links(out);
    expect_block_tree(b.data, b.len, out);
    pl__buf_free(&b);
    return out;
}

/* Round-trip @p json: equal as JSON, and printed the same (key order). */
static void expect_roundtrip_text(const char *json)
{
    cJSON *in = t_json(json);
    cJSON *out = roundtrip(in);
    cr_assert(cJSON_Compare(in, out, 1), "%s changed in a round trip", json);
    char *a = t_text(in), *b = t_text(out);
    cr_assert_str_eq(b, a, "key order or values changed");
    cJSON_free(a);
    cJSON_free(b);
    cJSON_Delete(in);
    cJSON_Delete(out);
}

/* {"k": {"k": ... }} with @p levels objects in all (the outermost counts);
 * the innermost holds {"leaf": 1} when @p scalar, else is empty. */
static cJSON *nest_objects(int levels, bool scalar)
{
    cJSON *inner = cJSON_CreateObject();
    cr_assert_not_null(inner);
    if (scalar)
        cJSON_AddNumberToObject(inner, "leaf", 1);
    for (int i = 1; i < levels; i++) {
        cJSON *o = cJSON_CreateObject();
        cr_assert_not_null(o);
        cJSON_AddItemToObject(o, "k", inner);
        inner = o;
    }
    return inner;
}

/* ---- step records: round trips ------------------------------------------- */

Test(codec, step_record_roundtrip_every_type)
{
    static const char *const payloads[] = {
        "{\"text\": \"hello\"}",
        "{\"policy\": \"add\", \"payload\": {\"a\": 1, \"b\": 2}}",
        "{\"sum\": 3}",
        "{\"prompt\": {\"question\": \"ok?\"}}",
        "{\"answer\": {\"yes\": true}}",
        "{\"name\": \"now\", \"value\": 1700000000000}",
        "{\"error\": true, \"code\": \"ToolBug\", \"message\": \"x\"}",
    };
    uint8_t prev[PL_HASH_LEN];
    for (size_t i = 0; i < sizeof prev; i++)
        prev[i] = (uint8_t)(0xff - i);
    for (int type = PL_STEP_TEXT; type <= PL_STEP_ERROR; type++) {
        for (int with_code = 0; with_code < 2; with_code++) {
            pl__buf payload = {0}, rec = {0};
            payload_of(&payload, payloads[type - 1]);
            uint32_t seq = (uint32_t)(type * 1000 + with_code);
            int64_t t = 1700000000000000 + type;
            const char *code = with_code ? "build-1.2.3" : NULL;
            /* something in front: the encoder appends */
            put(&rec, "xyz", 3);
            int st = pl__rec_encode(&rec, seq, t, (pl_step_type)type,
                                    "actor-name", prev, code, NULL,
                                    payload.data, payload.len);
            cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
            cr_assert_eq(memcmp(rec.data, "xyz", 3), 0, "prefix overwritten");

            pl__rec r;
            memset(&r, 0xa5, sizeof r);
            st = pl__rec_decode(&r, rec.data + 3, rec.len - 3);
            cr_assert_eq(st, PL_OK, "type %d: %s", type, pl_errmsg());
            cr_assert_eq(r.seq, seq);
            cr_assert_eq(r.time_us, t);
            cr_assert_eq(r.type, (pl_step_type)type);
            cr_assert_eq(r.actor_len, strlen("actor-name"));
            cr_assert_eq(memcmp(r.actor, "actor-name", r.actor_len), 0);
            cr_assert_eq(memcmp(r.prev_hash, prev, PL_HASH_LEN), 0);
            if (with_code) {
                cr_assert_not_null(r.code);
                cr_assert_eq(r.code_len, strlen(code));
                cr_assert_eq(memcmp(r.code, code, r.code_len), 0);
            } else {
                cr_assert_null(r.code, "an absent code decodes as NULL");
                cr_assert_eq(r.code_len, 0);
            }
            cr_assert_eq(r.payload_len, payload.len);
            cr_assert_eq(memcmp(r.payload, payload.data, payload.len), 0,
                         "payload bytes differ");
            /* the view borrows the record's bytes */
            cr_assert(r.payload >= rec.data &&
                      r.payload + r.payload_len == rec.data + rec.len);
            cJSON *j = NULL;
            cr_assert_eq(pl__payload_decode(&j, r.payload, r.payload_len),
                         PL_OK);
            cJSON *want = t_json(payloads[type - 1]);
            cr_assert(cJSON_Compare(j, want, 1));
            cJSON_Delete(j);
            cJSON_Delete(want);
            pl__buf_free(&payload);
            pl__buf_free(&rec);
        }
    }
}

Test(codec, step_record_field_extremes)
{
    char actor[PL_MAX_NAME + 1];
    memset(actor, 'a', PL_MAX_NAME);
    actor[PL_MAX_NAME] = '\0';
    char code[4097];
    memset(code, 'c', 4096);
    code[4096] = '\0';
    static const struct {
        uint32_t seq;
        int64_t t;
        size_t actor_len;
        size_t code_len;
    } cases[] = {
        {0, 0, 1, 0},         {UINT32_MAX, INT64_MAX, PL_MAX_NAME, 4096},
        {1, INT64_MIN, 2, 1}, {127, -1, 31, 31},
        {128, -33, 32, 32},   {65536, 1, 200, 256},
    };
    uint8_t prev[PL_HASH_LEN] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[PL_MAX_NAME + 1], c[4097];
        memcpy(a, actor, cases[i].actor_len);
        a[cases[i].actor_len] = '\0';
        memcpy(c, code, cases[i].code_len);
        c[cases[i].code_len] = '\0';
        pl__buf rec = {0};
        cr_assert_eq(pl__rec_encode(&rec, cases[i].seq, cases[i].t,
                                    PL_STEP_SIDE_EFFECT, a, prev, c, NULL,
                                    empty_map, 1),
                     PL_OK);
        pl__rec r;
        cr_assert_eq(pl__rec_decode(&r, rec.data, rec.len), PL_OK,
                     "case %zu: %s", i, pl_errmsg());
        cr_assert_eq(r.seq, cases[i].seq);
        cr_assert_eq(r.time_us, cases[i].t);
        cr_assert_eq(r.actor_len, cases[i].actor_len);
        cr_assert_not_null(r.code, "an empty code is present, not absent");
        cr_assert_eq(r.code_len, cases[i].code_len);
        cr_assert_eq(r.payload_len, 1);
        pl__buf_free(&rec);
    }
}

/* ---- payloads: round trips ----------------------------------------------- */

Test(codec, payload_roundtrip_scalars_and_structure)
{
    expect_roundtrip_text("{}");
    expect_roundtrip_text("{\"n\": null, \"t\": true, \"f\": false}");
    expect_roundtrip_text("{\"s\": \"\", \"u\": \"h\\u00e9llo w\\u00f6rld "
                          "\\u2713 \\ud834\\udd1e \\u65e5\\u672c\"}");
    expect_roundtrip_text("{\"e\": {}, \"ea\": [], \"a\": [1, [2, [3, {}]], "
                          "{\"b\": {\"c\": []}}], \"o\": {\"x\": {\"y\": "
                          "{\"z\": [null, true, false, \"s\", 1.5]}}}}");
    expect_roundtrip_text("{\"\": \"empty key\", \"k\": [[], [[]], {}]}");
    expect_roundtrip_text("{\"f\": [0.5, -1.25, 3.141592653589793, 1e-300, "
                          "1.7976931348623157e308, 5e-324, -2.5e-8, 1e300]}");
}

Test(codec, payload_roundtrip_integers)
{
    static const double ints[] = {
        0,
        1,
        -1,
        31,
        127,
        128,
        -32,
        -33,
        -128,
        -129,
        255,
        256,
        32767,
        -32768,
        65535,
        65536,
        -2147483648.0,
        2147483647.0,
        4294967295.0,
        4294967296.0,
        1e15,
        -1e15,
        9007199254740991.0, /* 2^53 - 1 */
        9007199254740992.0, /* 2^53 */
        -9007199254740991.0,
        -9007199254740992.0,
        9007199254740994.0,     /* 2^53 + 2: exact in a double */
        -9223372036854775808.0, /* INT64_MIN */
        9223372036854775808.0,  /* 2^63: past int64, a float */
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        cJSON *in = cJSON_CreateObject();
        cJSON_AddNumberToObject(in, "v", ints[i]);
        cJSON *arr = cJSON_AddArrayToObject(in, "a");
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(ints[i]));
        cJSON *out = roundtrip(in);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(out, "v");
        cr_assert(cJSON_IsNumber(v));
        cr_assert(v->valuedouble == ints[i], "%.17g came back as %.17g",
                  ints[i], v->valuedouble);
        const cJSON *a0 = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(out, "a"), 0);
        cr_assert(cJSON_IsNumber(a0) && a0->valuedouble == ints[i]);
        cr_assert_eq(v->valueint, cJSON_GetObjectItem(in, "v")->valueint,
                     "valueint of %.17g is not cJSON's", ints[i]);
        cJSON_Delete(in);
        cJSON_Delete(out);
    }
}

Test(codec, payload_integral_numbers_are_msgpack_ints)
{
    /* the table: number -> int when integral and within int64, else float64 */
    pl__buf b = {0};
    payload_of(&b, "{\"a\": 2.0}");
    static const uint8_t two[] = {0x81, 0xa1, 'a', 0x02};
    cr_assert_eq(b.len, sizeof two);
    cr_assert_eq(memcmp(b.data, two, sizeof two), 0);
    pl__buf_reset(&b);
    payload_of(&b, "{\"a\": -1}");
    static const uint8_t neg[] = {0x81, 0xa1, 'a', 0xff};
    cr_assert_eq(b.len, sizeof neg);
    cr_assert_eq(memcmp(b.data, neg, sizeof neg), 0);
    pl__buf_reset(&b);
    payload_of(&b, "{\"a\": 0.5}");
    cr_assert_eq(b.len, 3 + 9);
    cr_assert_eq(b.data[3], 0xcb, "a fraction is a float64");
    pl__buf_free(&b);
}

Test(codec, payload_roundtrip_size_boundaries)
{
    /* msgpack changes header form at these lengths and counts */
    static const size_t lens[] = {0, 31, 32, 255, 256, 65535, 65536, 70000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char *s = malloc(lens[i] + 1);
        cr_assert_not_null(s);
        for (size_t k = 0; k < lens[i]; k++)
            s[k] = (char)('a' + k % 26);
        s[lens[i]] = '\0';
        cJSON *in = cJSON_CreateObject();
        cJSON_AddStringToObject(in, "s", s);
        if (lens[i]) /* a key of the same length */
            cJSON_AddNumberToObject(in, s, (double)lens[i]);
        cJSON *out = roundtrip(in);
        cr_assert(cJSON_Compare(in, out, 1), "string of %zu bytes", lens[i]);
        cJSON_Delete(in);
        cJSON_Delete(out);
        free(s);
    }
    static const int counts[] = {0, 15, 16, 65535, 65536};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        cJSON *in = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(in, "arr");
        cJSON *map = cJSON_AddObjectToObject(in, "map");
        for (int k = 0; k < counts[i]; k++) {
            char key[32];
            snprintf(key, sizeof key, "k%d", k);
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(k));
            cJSON_AddNumberToObject(map, key, -k);
        }
        cJSON *out = roundtrip(in);
        /* printed text compares values and order in linear time (an object
         * compare is quadratic) */
        char *a = t_text(in), *b = t_text(out);
        cr_assert_str_eq(b, a, "%d elements", counts[i]);
        cJSON_free(a);
        cJSON_free(b);
        cJSON_Delete(in);
        cJSON_Delete(out);
    }
}

Test(codec, payload_keeps_key_order)
{
    cJSON *in = t_json("{\"z\": 1, \"a\": 2, \"m\": {\"y\": 1, \"b\": 2, "
                       "\"x\": 3}, \"b\": 4}");
    cJSON *out = roundtrip(in);
    static const char *const order[] = {"z", "a", "m", "b"};
    const cJSON *c = out->child;
    for (size_t i = 0; i < 4; i++, c = c->next) {
        cr_assert_not_null(c);
        cr_assert_str_eq(c->string, order[i]);
    }
    cr_assert_null(c);
    static const char *const inner[] = {"y", "b", "x"};
    c = cJSON_GetObjectItemCaseSensitive(out, "m")->child;
    for (size_t i = 0; i < 3; i++, c = c->next)
        cr_assert_str_eq(c->string, inner[i]);
    /* equal trees encode to equal bytes */
    pl__buf a = {0}, b = {0};
    cr_assert_eq(pl__payload_encode(&a, in, 0), PL_OK);
    cr_assert_eq(pl__payload_encode(&b, out, 0), PL_OK);
    cr_assert_eq(a.len, b.len);
    cr_assert_eq(memcmp(a.data, b.data, a.len), 0);
    pl__buf_free(&a);
    pl__buf_free(&b);
    cJSON_Delete(in);
    cJSON_Delete(out);
}

Test(codec, payload_null_is_empty_object)
{
    pl__buf b = {0};
    cr_assert_eq(pl__payload_encode(&b, NULL, 0), PL_OK);
    cr_assert_eq(b.len, 1);
    cr_assert_eq(b.data[0], 0x80);
    pl__buf_free(&b);
}

static bool equal_json(const char *x, const char *y)
{
    pl__buf a = {0}, b = {0};
    payload_of(&a, x);
    payload_of(&b, y);
    bool eq = pl__payload_equal(a.data, a.len, b.data, b.len);
    cr_assert_eq(pl__payload_equal(b.data, b.len, a.data, a.len), eq,
                 "equality is not symmetric");
    pl__buf_free(&a);
    pl__buf_free(&b);
    return eq;
}

Test(codec, payload_equal_ignores_key_order_only)
{
    cr_assert(equal_json("{\"a\": 1, \"b\": 2}", "{\"b\": 2, \"a\": 1}"));
    cr_assert(equal_json("{\"o\": {\"x\": [1, {\"p\": 1, \"q\": 2}], "
                         "\"y\": null}, \"s\": \"t\"}",
                         "{\"s\": \"t\", \"o\": {\"y\": null, \"x\": [1, "
                         "{\"q\": 2, \"p\": 1}]}}"));
    cr_assert(equal_json("{}", "{}"));
    cr_assert(equal_json("{\"a\": 2.0}", "{\"a\": 2}"));

    cr_assert_not(equal_json("{\"a\": 1}", "{\"a\": 2}"));
    cr_assert_not(equal_json("{\"a\": 1}", "{\"a\": 1.5}"));
    cr_assert_not(equal_json("{\"a\": 1}", "{\"A\": 1}"));
    cr_assert_not(equal_json("{\"a\": 1}", "{\"a\": 1, \"b\": 2}"));
    cr_assert_not(equal_json("{\"a\": 1, \"b\": 2}", "{\"a\": 1}"));
    cr_assert_not(equal_json("{\"a\": [1, 2]}", "{\"a\": [2, 1]}"));
    cr_assert_not(equal_json("{\"a\": [1]}", "{\"a\": [1, 1]}"));
    cr_assert_not(equal_json("{\"a\": \"1\"}", "{\"a\": 1}"));
    cr_assert_not(equal_json("{\"a\": null}", "{\"a\": false}"));
    cr_assert_not(equal_json("{\"a\": true}", "{\"a\": false}"));
    cr_assert_not(equal_json("{\"a\": {}}", "{\"a\": []}"));
    cr_assert_not(equal_json("{\"a\": \"x\"}", "{\"a\": \"x \"}"));
    cr_assert_not(equal_json("{\"o\": {\"x\": 1, \"y\": 2}}",
                             "{\"o\": {\"y\": 2, \"x\": 3}}"));

    /* undecodable bytes are equal to nothing, and do not crash */
    static const uint8_t bad[] = {0x81, 0xa1, 'a', 0xc1};
    pl__buf a = {0};
    payload_of(&a, "{\"a\": 1}");
    cr_assert_not(pl__payload_equal(a.data, a.len, bad, sizeof bad));
    cr_assert_not(pl__payload_equal(bad, sizeof bad, a.data, a.len));
    pl__buf_free(&a);
}

/* {"b": 1, "a": {...}} (or "a" first) nested @p levels deep. */
static void nest_two_keys(pl__buf *b, int levels, bool a_first)
{
    cJSON *root = cJSON_CreateObject(), *at = root;
    for (int i = 1; i <= levels; i++) {
        if (!a_first)
            cJSON_AddNumberToObject(at, "b", i);
        cJSON *next = i < levels ? cJSON_AddObjectToObject(at, "a")
                                 : cJSON_AddNullToObject(at, "a");
        if (a_first)
            cJSON_AddNumberToObject(at, "b", i);
        at = next;
    }
    cr_assert_eq(pl__payload_encode(b, root, 0), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(root);
}

/*
 * Key order differs at every level of a payload at the depth limit: each
 * pair of subtrees is compared once.  (Comparing each object's members from
 * both sides, as cJSON_Compare does, takes 2^30 steps here.)
 */
Test(codec, payload_equal_is_linear_in_deep_reordered_payloads, .timeout = 300)
{
    pl__buf x = {0}, y = {0}, z = {0};
    nest_two_keys(&x, PL_MAX_JSON_DEPTH, true);
    nest_two_keys(&y, PL_MAX_JSON_DEPTH, false);
    cr_assert(pl__payload_equal(x.data, x.len, y.data, y.len));
    nest_two_keys(&z, PL_MAX_JSON_DEPTH - 1, false);
    cr_assert_not(pl__payload_equal(x.data, x.len, z.data, z.len));
    pl__buf_free(&x);
    pl__buf_free(&y);
    pl__buf_free(&z);

    /* duplicate keys pair up in order */
    cr_assert(equal_json("{\"k\": 1, \"z\": 0, \"k\": 2}",
                         "{\"z\": 0, \"k\": 1, \"k\": 2}"));
    cr_assert_not(equal_json("{\"k\": 1, \"z\": 0, \"k\": 1}",
                             "{\"z\": 0, \"k\": 1, \"k\": 2}"));
}

/* ---- payloads: what may not be encoded ----------------------------------- */

/* Encode @p v after some bytes already in the buffer; expect @p want and,
 * on failure, the buffer as it was. */
static void expect_encode(const cJSON *v, size_t max, int want,
                          const char *what)
{
    pl__buf b = {0};
    put(&b, "keep", 4);
    set_sentinel();
    int st = pl__payload_encode(&b, v, max);
    /* non-fatal: the caller's trees are still freed when this fails */
    cr_expect_eq(st, want, "%s: pl__payload_encode gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    if (st == want && want) {
        cr_assert_eq(b.len, 4, "%s: a failed encode left bytes behind", what);
        cr_assert(strcmp(pl_errmsg(), sentinel) != 0, "%s: no message", what);
    }
    cr_assert_eq(memcmp(b.data, "keep", 4), 0);
    pl__buf_free(&b);
}

Test(codec, payload_must_be_an_object)
{
    static const char *const texts[] = {"[]",   "[1, 2]", "\"s\"", "1",
                                        "true", "false",  "null"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        cJSON *j = cJSON_Parse(texts[i]);
        cr_assert_not_null(j);
        expect_encode(j, 0, PL_EJSON, texts[i]);
        /* the wrappers insist on an object as well */
        pl__buf b = {0};
        cr_assert_eq(pl__wrap_encode(&b, "prompt", j, 0), PL_EJSON);
        cr_assert_eq(b.len, 0);
        cr_assert_eq(pl__call_payload_encode(&b, "p", j, NULL, 0, NULL, 0),
                     PL_EJSON);
        cr_assert_eq(b.len, 0);
        pl__buf_free(&b);
        cJSON_Delete(j);
    }
    cJSON *raw = cJSON_CreateObject();
    cJSON_AddRawToObject(raw, "r", "{\"x\": 1}");
    expect_encode(raw, 0, PL_EJSON, "raw item");
    cJSON_Delete(raw);
}

Test(codec, payload_rejects_non_finite_numbers)
{
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        cJSON *top = cJSON_CreateObject();
        cJSON_AddNumberToObject(top, "x", bad[i]);
        expect_encode(top, 0, PL_EJSON, "top-level member");
        cJSON_Delete(top);

        cJSON *deep = t_json("{\"a\": {\"b\": [1, 2]}}");
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(deep, "a"), "b");
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(bad[i]));
        expect_encode(deep, 0, PL_EJSON, "nested in an array");

        pl__buf b = {0};
        cr_assert_eq(pl__call_payload_encode(&b, "p", deep, NULL, 0, NULL, 0),
                     PL_EJSON);
        cr_assert_eq(b.len, 0);
        cJSON *n = cJSON_CreateNumber(bad[i]);
        cr_assert_eq(pl__named_value_encode(&b, "now", n, 0), PL_EJSON);
        cr_assert_eq(b.len, 0);
        cr_assert_eq(pl__json_encode(&b, n), PL_EJSON);
        cJSON_Delete(n);
        pl__buf_free(&b);
        cJSON_Delete(deep);
    }
}

Test(codec, payload_depth_limit)
{
    /* depth counts containers, the outermost object being 1 (as cJSON's own
     * nesting limit counts); scalars inside the deepest one add nothing */
    for (int scalar = 0; scalar < 2; scalar++) {
        cJSON *at = nest_objects(PL_MAX_JSON_DEPTH, scalar);
        expect_encode(at, 0, PL_OK,
                      scalar ? "objects at the limit, with a "
                               "scalar"
                             : "objects at the limit");
        cJSON *past = nest_objects(PL_MAX_JSON_DEPTH + 1, scalar);
        expect_encode(past, 0, PL_ELIMIT, "objects one past the limit");
        cJSON_Delete(at);
        cJSON_Delete(past);

        at = nest_arrays(PL_MAX_JSON_DEPTH, scalar);
        expect_encode(at, 0, PL_OK,
                      scalar ? "arrays at the limit, with a "
                               "scalar"
                             : "arrays at the limit");
        past = nest_arrays(PL_MAX_JSON_DEPTH + 1, scalar);
        expect_encode(past, 0, PL_ELIMIT, "arrays one past the limit");
        cJSON_Delete(at);
        cJSON_Delete(past);
    }
    cJSON *far = nest_objects(5000, true);
    expect_encode(far, 0, PL_ELIMIT, "5000 levels");
    cJSON_Delete(far);
}

Test(codec, stored_payload_at_the_depth_limit_decodes)
{
    for (int scalar = 0; scalar < 2; scalar++) {
        pl__buf b = {0};
        stored_nest(&b, PL_MAX_JSON_DEPTH, scalar);
        expect_payload(b.data, b.len, PL_OK,
                       scalar ? "30 levels, a scalar inside"
                              : "30 levels, the deepest empty");
        pl__buf_free(&b);
    }
}

Test(codec, stored_payload_deeper_than_the_limit_is_corrupt)
{
    /* a stored payload nests at most PL_MAX_JSON_DEPTH containers deep, as
     * the encoder allows; one level more is not a payload this format can
     * hold, whether or not its deepest container is empty */
    for (int scalar = 0; scalar < 2; scalar++) {
        pl__buf b = {0};
        stored_nest(&b, PL_MAX_JSON_DEPTH + 1, scalar);
        expect_payload(b.data, b.len, PL_ECORRUPT,
                       scalar ? "31 levels, a scalar inside"
                              : "31 levels, the deepest empty");
        pl__buf_free(&b);
    }
}

Test(codec, payload_size_limit)
{
    cJSON *j = t_json("{\"text\": \"0123456789abcdef\", \"n\": [1, 2, 3]}");
    pl__buf b = {0};
    cr_assert_eq(pl__payload_encode(&b, j, 0), PL_OK);
    size_t size = b.len;
    pl__buf_free(&b);

    expect_encode(j, size, PL_OK, "exactly at the limit");
    expect_encode(j, size + 1, PL_OK, "under the limit");
    expect_encode(j, size - 1, PL_ELIMIT, "one byte over the limit");
    expect_encode(j, 1, PL_ELIMIT, "far over the limit");
    cr_assert(strstr(pl_errmsg(), "limit") != NULL, "%s", pl_errmsg());

    /* the wrappers apply the limit to the payload they wrap */
    cr_assert_eq(pl__wrap_encode(&b, "prompt", j, size), PL_OK);
    pl__buf_reset(&b);
    cr_assert_eq(pl__wrap_encode(&b, "prompt", j, size - 1), PL_ELIMIT);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(pl__call_payload_encode(&b, "p", j, NULL, 0, NULL, size),
                 PL_OK);
    pl__buf_reset(&b);
    cr_assert_eq(pl__call_payload_encode(&b, "p", j, NULL, 0, NULL, size - 1),
                 PL_ELIMIT);
    cr_assert_eq(b.len, 0);

    /* a named value is limited as a whole */
    cr_assert_eq(pl__named_value_encode(&b, "v", j, 0), PL_OK);
    size_t nsize = b.len;
    pl__buf_reset(&b);
    cr_assert_eq(pl__named_value_encode(&b, "v", j, nsize), PL_OK);
    pl__buf_reset(&b);
    cr_assert_eq(pl__named_value_encode(&b, "v", j, nsize - 1), PL_ELIMIT);
    cr_assert_eq(b.len, 0);
    pl__buf_free(&b);
    cJSON_Delete(j);
}

Test(codec, wrappers_encode_their_documented_shapes)
{
    cJSON *p = t_json("{\"a\": 1}");
    const char *const actions[] = {"x", "y"};
    pl__buf b = {0};
    cr_assert_eq(pl__call_payload_encode(&b, "add", p, actions, 2, "0a1b", 0),
                 PL_OK);
    cJSON *got = NULL;
    cr_assert_eq(pl__payload_decode(&got, b.data, b.len), PL_OK);
    cJSON *want = t_json("{\"policy\": \"add\", \"payload\": {\"a\": 1}, "
                         "\"actions\": [\"x\", \"y\"], \"seed\": \"0a1b\"}");
    cr_assert(cJSON_Compare(got, want, 1));
    cJSON_Delete(got);
    cJSON_Delete(want);

    pl__buf_reset(&b);
    cr_assert_eq(pl__call_payload_encode(&b, "add", NULL, NULL, 0, NULL, 0),
                 PL_OK);
    cr_assert_eq(pl__payload_decode(&got, b.data, b.len), PL_OK);
    want = t_json("{\"policy\": \"add\", \"payload\": {}}");
    cr_assert(cJSON_Compare(got, want, 1));
    cJSON_Delete(got);
    cJSON_Delete(want);

    pl__buf_reset(&b);
    cr_assert_eq(pl__wrap_encode(&b, "answer", p, 0), PL_OK);
    const uint8_t *v;
    size_t vn;
    cr_assert(pl__map_find(b.data, b.len, "answer", &v, &vn));
    cr_assert_not(pl__map_find(b.data, b.len, "answe", &v, &vn));
    cr_assert_not(pl__map_find(b.data, b.len, "prompt", &v, &vn));

    pl__buf_reset(&b);
    cJSON *val = cJSON_CreateString("hello");
    cr_assert_eq(pl__named_value_encode(&b, "uuid", val, 0), PL_OK);
    const char *s;
    size_t n;
    cr_assert(pl__map_find(b.data, b.len, "value", &v, &vn));
    cr_assert(pl__mp_str(v, vn, &s, &n));
    cr_assert_eq(n, 5);
    cr_assert_eq(memcmp(s, "hello", 5), 0);
    cr_assert(pl__map_find(b.data, b.len, "name", &v, &vn));
    cr_assert(pl__mp_str(v, vn, &s, &n));
    cr_assert_eq(memcmp(s, "uuid", 4), 0);
    cJSON_Delete(val);

    char *text = pl__payload_text(b.data, b.len, 0);
    cr_assert_str_eq(text, "{\"name\":\"uuid\",\"value\":\"hello\"}");
    free(text);
    text = pl__payload_text(b.data, b.len, 10);
    cr_assert_str_eq(text, "{\"name\"...", "cut to 10 characters");
    free(text);
    pl__buf_free(&b);
    cJSON_Delete(p);
}
