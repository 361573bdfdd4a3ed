/*
 * test_codec.c -- the msgpack step and run records (ledger/codec/record.c,
 * runrec.c, and the payloads of mp_write.c, mp_read.c and payload_cmp.c),
 * through their internal header codec.h: step records of every type round-trip field by field;
 * JSON payloads of every kind round-trip through cJSON with their key order;
 * the payload limits (non-objects, non-finite numbers, nesting depth, size)
 * hold at and past the limit; and decoding hostile bytes -- every truncation,
 * unknown versions, malformed headers, non-JSON msgpack, forged counts,
 * nesting bombs, and a deterministic fuzz loop -- gives PL_ECORRUPT or
 * PL_EVERSION with a message, never a crash, an over-read or a leak.  Run
 * records (info and state) round-trip and reject malformed input the same
 * way.
 */
#include "support.h"

#include "codec.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- building bytes ------------------------------------------------------ */

static void put(pl__buf *b, const void *p, size_t n)
{
    cr_assert_eq(pl__buf_append(b, p, n), PL_OK, "out of memory in a test");
}

static void put_u8(pl__buf *b, uint8_t v) { put(b, &v, 1); }

static void put_be(pl__buf *b, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_u8(b, (uint8_t)(v >> (8 * (n - 1 - i))));
}

static void mp_nil(pl__buf *b) { put_u8(b, 0xc0); }

static void mp_uint(pl__buf *b, uint64_t v)
{
    if (v <= 0x7f) {
        put_u8(b, (uint8_t)v);
    } else if (v <= 0xff) {
        put_u8(b, 0xcc);
        put_be(b, v, 1);
    } else if (v <= 0xffff) {
        put_u8(b, 0xcd);
        put_be(b, v, 2);
    } else if (v <= 0xffffffffu) {
        put_u8(b, 0xce);
        put_be(b, v, 4);
    } else {
        put_u8(b, 0xcf);
        put_be(b, v, 8);
    }
}

static void mp_int(pl__buf *b, int64_t v)
{
    if (v >= 0) {
        mp_uint(b, (uint64_t)v);
    } else if (v >= -32) {
        put_u8(b, (uint8_t)(int8_t)v);
    } else {
        put_u8(b, 0xd3);
        put_be(b, (uint64_t)v, 8);
    }
}

static void mp_str(pl__buf *b, const char *s, size_t n)
{
    if (n <= 31) {
        put_u8(b, (uint8_t)(0xa0 | n));
    } else if (n <= 0xff) {
        put_u8(b, 0xd9);
        put_be(b, n, 1);
    } else if (n <= 0xffff) {
        put_u8(b, 0xda);
        put_be(b, n, 2);
    } else {
        put_u8(b, 0xdb);
        put_be(b, n, 4);
    }
    put(b, s, n);
}

static void mp_cstr(pl__buf *b, const char *s) { mp_str(b, s, strlen(s)); }

static void mp_bin(pl__buf *b, const void *p, size_t n)
{
    put_u8(b, 0xc4);
    put_be(b, n, 1);
    put(b, p, n);
}

static void mp_array(pl__buf *b, uint32_t n)
{
    if (n <= 15) {
        put_u8(b, (uint8_t)(0x90 | n));
    } else if (n <= 0xffff) {
        put_u8(b, 0xdc);
        put_be(b, n, 2);
    } else {
        put_u8(b, 0xdd);
        put_be(b, n, 4);
    }
}

static void mp_map(pl__buf *b, uint32_t n)
{
    if (n <= 15) {
        put_u8(b, (uint8_t)(0x80 | n));
    } else if (n <= 0xffff) {
        put_u8(b, 0xde);
        put_be(b, n, 2);
    } else {
        put_u8(b, 0xdf);
        put_be(b, n, 4);
    }
}

static void mp_f64(pl__buf *b, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    put_u8(b, 0xcb);
    put_be(b, bits, 8);
}

static void mp_f32(pl__buf *b, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    put_u8(b, 0xca);
    put_be(b, bits, 4);
}

/* Encode a JSON text as a payload (no size limit), expecting success. */
static void payload_of(pl__buf *b, const char *json)
{
    cJSON *j = t_json(json);
    int st = pl__payload_encode(b, j, 0);
    cJSON_Delete(j);
    cr_assert_eq(st, PL_OK, "encoding %s: %s", json, pl_errmsg());
}

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

static const uint8_t empty_map[] = {0x80};

static uint8_t hash_bytes[64];

static spec spec_default(void)
{
    for (size_t i = 0; i < sizeof hash_bytes; i++)
        hash_bytes[i] = (uint8_t)(i * 7 + 3);
    spec s = {7,
              PL__FORMAT_VERSION,
              5,
              1700000000000000,
              PL_STEP_TEXT,
              "model",
              5,
              PL_HASH_LEN,
              NULL,
              0,
              empty_map,
              1};
    return s;
}

static void rec_build(pl__buf *b, const spec *s)
{
    mp_array(b, s->nfields);
    mp_uint(b, s->version);
    mp_uint(b, s->seq);
    mp_int(b, s->time_us);
    mp_uint(b, s->type);
    mp_str(b, s->actor, s->actor_len);
    mp_bin(b, hash_bytes, s->hash_len);
    if (s->code)
        mp_str(b, s->code, s->code_len);
    else
        mp_nil(b);
    put(b, s->payload, s->payload_len);
}

/* ---- decoding helpers ---------------------------------------------------- */

static const char sentinel[] = "sentinel message set by the test";

static void set_sentinel(void)
{
    /* any failing pl_ call sets the thread's message; make it recognisable */
    (void)pl__err(PL_EINVAL, "%s", sentinel);
}

/* A heap copy of exactly n bytes, so that ASan sees any over-read. */
static uint8_t *exact_copy(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    cr_assert_not_null(c);
    if (n)
        memcpy(c, p, n);
    return c;
}

/* Decode @p n bytes as a step record, expecting @p want and, on failure, a
 * message that names a step record. */
static void expect_rec(const uint8_t *p, size_t n, int want, const char *what)
{
    uint8_t *c = exact_copy(p, n);
    pl__rec rec;
    set_sentinel();
    int st = pl__rec_decode(&rec, c, n);
    cr_assert_eq(st, want, "%s: pl__rec_decode gave %s, expected %s (%s)", what,
                 pl_status_name(st), pl_status_name(want), pl_errmsg());
    if (want != PL_OK) {
        cr_assert(strcmp(pl_errmsg(), sentinel) != 0 && pl_errmsg()[0],
                  "%s: no message for the failure", what);
        cr_assert(strstr(pl_errmsg(), "step") != NULL,
                  "%s: the message does not say a step is at fault: %s", what,
                  pl_errmsg());
    }
    free(c);
}

static void expect_spec(const spec *s, int want, const char *what)
{
    pl__buf b = {0};
    rec_build(&b, s);
    expect_rec(b.data, b.len, want, what);
    pl__buf_free(&b);
}

/* Check a payload as stored bytes: pl__payload_check and pl__payload_decode
 * agree, and a step record carrying it decodes the same way. */
static void expect_payload(const uint8_t *p, size_t n, int want,
                           const char *what)
{
    uint8_t *c = exact_copy(p, n);
    set_sentinel();
    int st = pl__payload_check(c, n, true);
    /* non-fatal: the caller's buffers are still freed when this fails */
    cr_expect_eq(st, want, "%s: pl__payload_check gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    if (st == want && want)
        cr_assert(strcmp(pl_errmsg(), sentinel) != 0, "%s: no message", what);
    cJSON *j = NULL;
    st = pl__payload_decode(&j, c, n);
    cr_expect_eq(st, want, "%s: pl__payload_decode gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    if (st)
        cr_assert_null(j, "%s: a failed decode returned a value", what);
    else
        cr_assert(cJSON_IsObject(j), "%s: decoded payload is not an object",
                  what);
    cJSON_Delete(j);
    free(c);

    spec s = spec_default();
    s.payload = p;
    s.payload_len = n;
    pl__buf b = {0};
    rec_build(&b, &s);
    c = exact_copy(b.data, b.len);
    pl__rec r;
    st = pl__rec_decode(&r, c, b.len);
    cr_expect_eq(st, want, "%s: pl__rec_decode gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    free(c);
    pl__buf_free(&b);
}

/* ---- JSON helpers -------------------------------------------------------- */

/* Encode, check, decode; the caller frees the result. */
/* Every container's children are linked as cJSON links them: the first
 * child's prev is the last, the last's next is NULL, prev mirrors next. */
static void expect_cjson_links(const cJSON *v)
{
    const cJSON *first = v->child;
    if (!first)
        return;
    const cJSON *c = first, *last = NULL;
    for (; c; last = c, c = c->next) {
        if (last)
            cr_assert_eq(c->prev, last, "prev does not mirror next");
        cr_assert_eq(c->string != NULL, cJSON_IsObject(v),
                     "members have keys, array items do not");
        expect_cjson_links(c);
    }
    cr_assert_eq(first->prev, last, "the first child's prev is not the last");
}

/* Node by node the same (cJSON_Compare() is not: with a key twice in an
 * object it compares only the first). */
static void expect_same_tree(const cJSON *a, const cJSON *b)
{
    cr_assert_eq(a->type, b->type);
    cr_assert_eq(a->string != NULL, b->string != NULL);
    if (a->string)
        cr_assert_str_eq(a->string, b->string);
    cr_assert_eq(a->valuestring != NULL, b->valuestring != NULL);
    if (a->valuestring)
        cr_assert_str_eq(a->valuestring, b->valuestring);
    cr_assert(a->valuedouble == b->valuedouble);
    cr_assert_eq(a->valueint, b->valueint);
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        expect_same_tree(x, y);
    cr_assert(!x && !y, "a different number of children");
}

/* Decode @p mp into a block of exactly the measured size (so that a
 * sanitizer sees any write past it) and check it against the owned tree
 * pl__payload_decode() gives. */
static void expect_block_tree(const uint8_t *mp, size_t len, const cJSON *want)
{
    pl__tree_size ts;
    cr_assert_eq(pl__payload_measure(&ts, mp, len, 0), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(ts.bytes, ts.nodes * sizeof(cJSON) + ts.text);
    void *block = malloc(ts.bytes);
    cr_assert_not_null(block);
    cJSON *t = pl__payload_build(mp, len, &ts, block);
    cr_assert_not_null(t, "a measured payload did not build");
    expect_same_tree(t, want);
    expect_cjson_links(t);
    char *a = t_text(t), *b = t_text(want);
    cr_assert_str_eq(a, b, "the block tree prints differently");
    cJSON_free(a);
    cJSON_free(b);
    free(block);
}

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

/* {"a": [[...[1]...]]}: one object and @p levels - 1 arrays. */
static cJSON *nest_arrays(int levels, bool scalar)
{
    cJSON *inner = cJSON_CreateArray();
    cr_assert_not_null(inner);
    if (scalar)
        cJSON_AddItemToArray(inner, cJSON_CreateNumber(1));
    for (int i = 2; i < levels; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, inner);
        inner = a;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "a", inner);
    return o;
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

/* {"a": [[...]]}: a map and @p levels - 1 arrays of one element, built as
 * stored bytes; the deepest array holds a scalar or nothing. */
static void stored_nest(pl__buf *b, int levels, bool scalar)
{
    mp_map(b, 1);
    mp_cstr(b, "a");
    for (int i = 1; i < levels; i++)
        mp_array(b, 1);
    if (scalar)
        mp_uint(b, 1);
    else
        b->data[b->len - 1] = 0x90; /* the deepest array is empty */
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

/*
 * Replay reads a record's header with pl__rec_decode_lazy() and checks the
 * payload with pl__rec_check() only when it interprets it: together they
 * must judge every buffer as pl__rec_decode() does.
 */
static void lazy_agrees(const uint8_t *c, size_t n, int full,
                        unsigned long iter)
{
    pl__rec lz;
    int st = pl__rec_decode_lazy(&lz, c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__rec_decode_lazy returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK) {
        cr_assert(lz.payload >= c && lz.payload + lz.payload_len == c + n);
        st = pl__rec_check(&lz);
    }
    cr_assert_eq(st, full,
                 "iteration %lu: the lazy path says %s, the full "
                 "decode %s",
                 iter, pl_status_name(st), pl_status_name(full));
}

/* ---- hostile bytes: step records ----------------------------------------- */

/* A few valid records of different shapes, for truncation and fuzzing. */
static size_t valid_records(pl__buf *out, size_t max)
{
    static const char *const payloads[] = {
        "{}",
        "{\"text\": \"hello, world\"}",
        "{\"policy\": \"add\", \"payload\": {\"a\": 1, \"b\": -2.5}, "
        "\"actions\": [\"x\", \"y\"]}",
        "{\"error\": true, \"code\": \"ToolBug\", \"message\": \"it broke\", "
        "\"n\": [null, true, false, 1e300, -9007199254740992, {\"d\": {}}]}",
        "{\"s\": \"h\\u00e9llo \\u2713\", \"big\": 4294967296, "
        "\"neg\": -70000}",
    };
    size_t n = 0;
    uint8_t prev[PL_HASH_LEN];
    for (size_t i = 0; i < sizeof prev; i++)
        prev[i] = (uint8_t)(i * 13);
    for (size_t i = 0; i < sizeof payloads / sizeof payloads[0] && n < max;
         i++) {
        pl__buf p = {0};
        payload_of(&p, payloads[i]);
        out[n] = (pl__buf){0};
        cr_assert_eq(pl__rec_encode(&out[n], (uint32_t)(i * 1000), 1700000000,
                                    (pl_step_type)(1 + i % 7), "policy-x", prev,
                                    i % 2 ? "v1.2" : NULL, NULL, p.data, p.len),
                     PL_OK);
        n++;
        pl__buf_free(&p);
    }
    /* a longer one: strings past 255 bytes, a key past 255 bytes */
    if (n < max) {
        cJSON *j = cJSON_CreateObject();
        char s[600];
        memset(s, 'q', sizeof s - 1);
        s[sizeof s - 1] = '\0';
        cJSON_AddStringToObject(j, "long", s);
        cJSON_AddNumberToObject(j, s + 200, 7);
        pl__buf p = {0};
        cr_assert_eq(pl__payload_encode(&p, j, 0), PL_OK);
        out[n] = (pl__buf){0};
        cr_assert_eq(pl__rec_encode(&out[n], 7, -5, PL_STEP_ACTION_RESULT, "a",
                                    prev, "code", NULL, p.data, p.len),
                     PL_OK);
        n++;
        pl__buf_free(&p);
        cJSON_Delete(j);
    }
    return n;
}

Test(codec, every_truncation_is_corrupt)
{
    pl__buf recs[8];
    size_t n = valid_records(recs, 8);
    cr_assert_geq(n, 6);
    for (size_t r = 0; r < n; r++) {
        expect_rec(recs[r].data, recs[r].len, PL_OK, "the whole record");
        for (size_t len = 0; len < recs[r].len; len++) {
            char what[128];
            snprintf(what, sizeof what, "record %zu cut to %zu of %zu bytes", r,
                     len, recs[r].len);
            expect_rec(recs[r].data, len, PL_ECORRUPT, what);
            uint8_t *c = exact_copy(recs[r].data, len);
            lazy_agrees(c, len, PL_ECORRUPT, (unsigned long)len);
            free(c);
        }
        pl__buf_free(&recs[r]);
    }
}

Test(codec, unknown_format_version)
{
    spec s = spec_default();
    s.version = 3;
    expect_spec(&s, PL_EVERSION, "version 3");
    cr_assert(strstr(pl_errmsg(), "version 3") != NULL, "%s", pl_errmsg());
    s.version = 0;
    expect_spec(&s, PL_EVERSION, "version 0");
    s.version = UINT64_MAX;
    expect_spec(&s, PL_EVERSION, "version 2^64-1");

    /* a newer version may lay out the rest differently: the version alone
     * decides */
    pl__buf b = {0};
    mp_array(&b, 3);
    mp_uint(&b, 3);
    mp_cstr(&b, "a future field");
    put_u8(&b, 0xc1);
    expect_rec(b.data, b.len, PL_EVERSION, "a version 3 with another layout");
    pl__buf_reset(&b);
    mp_array(&b, 1);
    mp_uint(&b, 9);
    expect_rec(b.data, b.len, PL_EVERSION, "a bare version 9");

    /* a version that is not an unsigned integer is not a version */
    pl__buf_reset(&b);
    mp_array(&b, 7);
    mp_cstr(&b, "1");
    expect_rec(b.data, b.len, PL_ECORRUPT, "version as a string");
    pl__buf_reset(&b);
    mp_array(&b, 7);
    mp_int(&b, -1);
    expect_rec(b.data, b.len, PL_ECORRUPT, "negative version");
    pl__buf_free(&b);
}

/*
 * A mirror (version 2) is a record whose payload its caller's action_result
 * holds: its payload is exactly nil, and nothing reads it as a payload
 * until pl__rec_mirror() lends it the caller's.
 */
Test(codec, mirror_records)
{
    static const uint8_t nil[] = {0xc0};
    static const uint8_t answer[] = {0x81, 0xa1, 'x', 0x07}; /* {"x": 7} */
    spec s = spec_default();
    s.version = PL__FORMAT_V2;
    s.payload = nil;
    s.payload_len = 1;
    pl__buf b = {0};
    rec_build(&b, &s);
    uint8_t *c = exact_copy(b.data, b.len);
    pl__rec rec;
    cr_assert_eq(pl__rec_decode_lazy(&rec, c, b.len), PL_OK, "%s", pl_errmsg());
    cr_assert(rec.mirrored);
    cr_assert_eq(rec.seq, 5);
    cr_assert_eq(rec.payload_len, 1, "the payload is the stored nil");
    set_sentinel();
    cr_assert_eq(pl__rec_check(&rec), PL_ECORRUPT,
                 "a mirror alone is no "
                 "payload");
    cr_assert(strstr(pl_errmsg(), "caller") != NULL, "%s", pl_errmsg());
    expect_rec(b.data, b.len, PL_ECORRUPT, "a mirror read as a whole record");
    pl_step *step = (pl_step *)1;
    cr_assert_eq(pl__step_from_rec(&rec, "0.1", &step), PL_ECORRUPT);
    cr_assert_null(step);

    /* lent its caller's payload, it reads as that */
    spec cs = spec_default();
    cs.payload = answer;
    cs.payload_len = sizeof answer;
    pl__buf cb = {0};
    rec_build(&cb, &cs);
    pl__rec caller;
    cr_assert_eq(pl__rec_decode(&caller, cb.data, cb.len), PL_OK);
    pl__rec_mirror(&rec, &caller);
    cr_assert_not(rec.mirrored);
    cr_assert_eq(pl__rec_check(&rec), PL_OK);
    cr_assert_eq(pl__step_from_rec(&rec, "0.1", &step), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_step_seq(step), 5, "the mirror's own place");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(pl_step_payload(step),
                                                      "x");
    cr_assert(cJSON_IsNumber(x) && x->valueint == 7);
    pl_step_free(step);
    free(c);
    pl__buf_free(&cb);

    /* a version 2 record's payload is a map or nil, nothing else */
    s.payload = empty_map;
    s.payload_len = 1;
    expect_spec(&s, PL_OK, "a version 2 record with a map");
    static const struct {
        const uint8_t *p;
        size_t n;
        const char *what;
    } bad[] = {
        {(const uint8_t *)"\xc0\xc0", 2, "nil and a trailing byte"},
        {(const uint8_t *)"", 0, "nothing"},
        {(const uint8_t *)"\xc2", 1, "false"},
    };
    for (size_t i = 0; i < PL__ARRAY_LEN(bad); i++) {
        s.payload = bad[i].p;
        s.payload_len = bad[i].n;
        pl__buf_reset(&b);
        rec_build(&b, &s);
        c = exact_copy(b.data, b.len);
        set_sentinel();
        cr_assert_eq(pl__rec_decode_lazy(&rec, c, b.len), PL_ECORRUPT, "%s",
                     bad[i].what);
        cr_assert(strstr(pl_errmsg(), "payload") != NULL, "%s", pl_errmsg());
        free(c);
    }
    /* and a version 1 record cannot say nil */
    s = spec_default();
    s.payload = nil;
    s.payload_len = 1;
    expect_spec(&s, PL_ECORRUPT, "a version 1 record with a nil payload");

    /* pl__rec_make_mirror() turns an encoded record into its mirror */
    pl__buf_reset(&b);
    put(&b, (const uint8_t *)"xyz", 3); /* records follow others in a batch */
    uint8_t prev[PL_HASH_LEN] = {1};
    pl__link link = {3, {9}, 0};
    cr_assert_eq(pl__rec_encode(&b, 4, 1700000000000001, PL_STEP_ACTION_RESULT,
                                "tool", prev, "v1", &link, answer,
                                sizeof answer),
                 PL_OK);
    pl__rec full;
    cr_assert_eq(pl__rec_decode(&full, b.data + 3, b.len - 3), PL_OK);
    size_t header_len = (size_t)(full.payload - (b.data + 3));
    pl__rec_make_mirror(&b, 3, header_len);
    cr_assert_eq(b.len, 3 + header_len + 1);
    cr_assert_eq(memcmp(b.data, "xyz", 3), 0);
    cr_assert_eq(pl__rec_decode_lazy(&rec, b.data + 3, b.len - 3), PL_OK);
    cr_assert(rec.mirrored);
    cr_assert(rec.seq == 4 && rec.time_us == 1700000000000001 &&
              rec.type == PL_STEP_ACTION_RESULT && rec.has_link &&
              rec.link_seq == 3 && rec.code_len == 2);
    pl__buf_free(&b);
}

/*
 * A folded callee (version 2): the action_result's link names the type of
 * the callee's one step instead of a hash of its ledger.
 */
Test(codec, folded_links)
{
    static const uint8_t answer[] = {0x81, 0xa1, 'x', 0x07}; /* {"x": 7} */
    uint8_t prev[PL_HASH_LEN] = {1};
    pl__link link = {3, {0}, PL_STEP_TEXT};
    pl__buf b = {0};
    cr_assert_eq(pl__rec_encode(&b, 4, 1700000000000001, PL_STEP_ACTION_RESULT,
                                "tool", prev, NULL, &link, answer,
                                sizeof answer),
                 PL_OK);
    cr_assert_eq(b.data[1], PL__FORMAT_V2, "a folded link makes version 2");
    pl__rec rec;
    cr_assert_eq(pl__rec_decode(&rec, b.data, b.len), PL_OK, "%s", pl_errmsg());
    cr_assert(rec.has_link && rec.link_folded && rec.link_seq == 3 &&
              rec.link_type == PL_STEP_TEXT && rec.link_hash == NULL);
    cr_assert_eq(rec.payload_len, sizeof answer);

    /* the same link with a hash is version 1, as before */
    link.folded = 0;
    memset(link.head, 9, PL_HASH_LEN);
    pl__buf_reset(&b);
    cr_assert_eq(pl__rec_encode(&b, 4, 1700000000000001, PL_STEP_ACTION_RESULT,
                                "tool", prev, NULL, &link, answer,
                                sizeof answer),
                 PL_OK);
    cr_assert_eq(b.data[1], PL__FORMAT_VERSION);
    cr_assert_eq(pl__rec_decode(&rec, b.data, b.len), PL_OK);
    cr_assert(rec.has_link && !rec.link_folded && rec.link_hash != NULL);

    /* a step type where the hash goes: only in version 2, only 1..7, and
     * never on a mirror */
    spec s = spec_default();
    s.nfields = 8;
    s.type = PL_STEP_ACTION_RESULT;
    static const struct {
        uint64_t version, type;
        bool nil_payload;
        int want;
        const char *what;
    } cases[] = {
        {2, 1, false, PL_OK, "version 2, text"},
        {2, 7, false, PL_OK, "version 2, the last type"},
        {1, 1, false, PL_ECORRUPT, "version 1"},
        {2, 0, false, PL_ECORRUPT, "type 0"},
        {2, 11, false, PL_ECORRUPT, "type 11"},
        {2, 1, true, PL_ECORRUPT, "a folded mirror"},
    };
    for (size_t i = 0; i < PL__ARRAY_LEN(cases); i++) {
        pl__buf_reset(&b);
        mp_array(&b, 8);
        mp_uint(&b, cases[i].version);
        mp_uint(&b, s.seq);
        mp_int(&b, s.time_us);
        mp_uint(&b, s.type);
        mp_str(&b, s.actor, s.actor_len);
        mp_bin(&b, hash_bytes, PL_HASH_LEN);
        mp_nil(&b);
        mp_array(&b, 2);
        mp_uint(&b, 3);
        mp_uint(&b, cases[i].type);
        if (cases[i].nil_payload)
            mp_nil(&b);
        else
            put(&b, answer, sizeof answer);
        uint8_t *c = exact_copy(b.data, b.len);
        set_sentinel();
        int st = pl__rec_decode_lazy(&rec, c, b.len);
        cr_assert_eq(st, cases[i].want, "%s: %s", cases[i].what, pl_errmsg());
        free(c);
    }
    pl__buf_free(&b);
}

Test(codec, malformed_headers)
{
    spec s = spec_default();
    expect_spec(&s, PL_OK, "the default record");

    s = spec_default();
    s.nfields = 6;
    expect_spec(&s, PL_ECORRUPT, "6 header fields");
    cr_assert(strstr(pl_errmsg(), "field") != NULL, "%s", pl_errmsg());
    s.nfields = 8;
    expect_spec(&s, PL_ECORRUPT, "8 header fields");
    s.nfields = 0;
    expect_spec(&s, PL_ECORRUPT, "0 header fields");

    static const uint64_t bad_types[] = {0, 11, 12, 255, 1ull << 40};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        s = spec_default();
        s.type = bad_types[i];
        expect_spec(&s, PL_ECORRUPT, "unknown step type");
    }
    for (uint64_t t = PL_STEP_TEXT; t <= PL_STEP_ERROR; t++) {
        s = spec_default();
        s.type = t;
        expect_spec(&s, PL_OK, "known step type");
    }

    char name[PL_MAX_NAME + 2];
    memset(name, 'n', sizeof name);
    s = spec_default();
    s.actor = name;
    s.actor_len = 0;
    expect_spec(&s, PL_ECORRUPT, "empty actor");
    s.actor_len = PL_MAX_NAME + 1;
    expect_spec(&s, PL_ECORRUPT, "actor of 256 bytes");
    s.actor_len = PL_MAX_NAME;
    expect_spec(&s, PL_OK, "actor of 255 bytes");
    static const char *const ctl[] = {"a\nb", "tab\t", "\x1f", "del\x7f",
                                      "nul\0x"};
    static const size_t ctl_len[] = {3, 4, 1, 4, 5};
    for (size_t i = 0; i < 5; i++) {
        s = spec_default();
        s.actor = ctl[i];
        s.actor_len = ctl_len[i];
        expect_spec(&s, PL_ECORRUPT, "actor with a control character");
    }
    s = spec_default();
    s.actor = "h\xc3\xa9";
    s.actor_len = 3;
    expect_spec(&s, PL_OK, "a UTF-8 actor");

    static const size_t hash_lens[] = {0, 1, 31, 33, 64};
    for (size_t i = 0; i < 5; i++) {
        s = spec_default();
        s.hash_len = hash_lens[i];
        expect_spec(&s, PL_ECORRUPT, "wrong hash length");
    }

    char code[4098];
    memset(code, 'c', sizeof code);
    s = spec_default();
    s.code = code;
    s.code_len = 4096;
    expect_spec(&s, PL_OK, "code of 4096 bytes");
    s.code_len = 4097;
    expect_spec(&s, PL_ECORRUPT, "code of 4097 bytes");

    /* fields of the wrong msgpack type */
    pl__buf b = {0};
    uint8_t h[PL_HASH_LEN] = {0};
    for (int which = 0; which < 6; which++) {
        pl__buf_reset(&b);
        mp_array(&b, 7);
        mp_uint(&b, 1);
        if (which == 0)
            mp_cstr(&b, "5"); /* seq */
        else
            mp_uint(&b, 5);
        if (which == 1)
            mp_cstr(&b, "t"); /* time */
        else
            mp_int(&b, 10);
        if (which == 2)
            mp_int(&b, -1); /* type */
        else
            mp_uint(&b, 1);
        if (which == 3)
            mp_bin(&b, "act", 3); /* actor */
        else
            mp_cstr(&b, "act");
        if (which == 4)
            mp_str(&b, (const char *)h, sizeof h); /* hash */
        else
            mp_bin(&b, h, sizeof h);
        if (which == 5)
            mp_uint(&b, 3); /* code */
        else
            mp_nil(&b);
        put_u8(&b, 0x80);
        expect_rec(b.data, b.len, PL_ECORRUPT, "a field of the wrong type");
    }
    /* seq past u32; time past int64 */
    pl__buf_reset(&b);
    mp_array(&b, 7);
    mp_uint(&b, 1);
    mp_uint(&b, (uint64_t)UINT32_MAX + 1);
    expect_rec(b.data, b.len, PL_ECORRUPT, "seq past 2^32");
    pl__buf_reset(&b);
    mp_array(&b, 7);
    mp_uint(&b, 1);
    mp_uint(&b, 1);
    mp_uint(&b, (uint64_t)INT64_MAX + 1);
    expect_rec(b.data, b.len, PL_ECORRUPT, "time past int64");
    /* not an array at all */
    static const uint8_t not_array[][3] = {
        {0x80}, {0xc0}, {0x01}, {0xa1, 'x'}, {0xc1}};
    for (size_t i = 0; i < 5; i++)
        expect_rec(not_array[i], 1 + (i == 3), PL_ECORRUPT,
                   "a header that is not an array");
    pl__buf_free(&b);
}

Test(codec, malformed_payloads)
{
    spec s = spec_default();
    pl__buf b = {0};

    /* nothing after the header */
    s.payload_len = 0;
    expect_spec(&s, PL_ECORRUPT, "no payload");
    /* bytes after the payload */
    static const uint8_t trailing[] = {0x80, 0x00};
    s.payload = trailing;
    s.payload_len = 2;
    expect_spec(&s, PL_ECORRUPT, "a byte after the payload");
    static const uint8_t two_maps[] = {0x80, 0x80};
    s.payload = two_maps;
    expect_spec(&s, PL_ECORRUPT, "two payload maps");
    pl__buf_reset(&b);
    payload_of(&b, "{\"a\": [1, 2, {\"b\": \"c\"}]}");
    put(&b, "\xc0", 1);
    expect_payload(b.data, b.len, PL_ECORRUPT, "nil after the payload");

    /* payloads that are not maps */
    static const uint8_t not_maps[] = {0x90, 0xa0, 0xc0, 0x01, 0xc3};
    for (size_t i = 0; i < sizeof not_maps; i++) {
        set_sentinel();
        cr_assert_eq(pl__payload_check(&not_maps[i], 1, true), PL_ECORRUPT);
        cr_assert(strstr(pl_errmsg(), "not a map") != NULL, "%s", pl_errmsg());
        s = spec_default();
        s.payload = &not_maps[i];
        s.payload_len = 1;
        expect_spec(&s, PL_ECORRUPT, "a payload that is not a map");
    }

    /* keys that are not strings, at the top and nested */
    static const uint8_t int_key[] = {0x81, 0x01, 0x02};
    expect_payload(int_key, sizeof int_key, PL_ECORRUPT, "an integer key");
    static const uint8_t nil_key[] = {0x81, 0xc0, 0x02};
    expect_payload(nil_key, sizeof nil_key, PL_ECORRUPT, "a nil key");
    static const uint8_t map_key[] = {0x81, 0x80, 0x02};
    expect_payload(map_key, sizeof map_key, PL_ECORRUPT, "a map key");
    static const uint8_t bin_key[] = {0x81, 0xc4, 0x01, 'k', 0x02};
    expect_payload(bin_key, sizeof bin_key, PL_ECORRUPT, "a bin key");
    static const uint8_t nested_key[] = {0x81, 0xa1, 'a', 0x91,
                                         0x81, 0x05, 0x06};
    expect_payload(nested_key, sizeof nested_key, PL_ECORRUPT,
                   "an integer key in a nested map");

    /* bin and ext values */
    static const uint8_t bins[][8] = {
        {0x81, 0xa1, 'a', 0xc4, 0x01, 0x00},
        {0x81, 0xa1, 'a', 0xc5, 0x00, 0x01, 0x00},
        {0x81, 0xa1, 'a', 0xc6, 0x00, 0x00, 0x00, 0x00},
        {0x81, 0xa1, 'a', 0xd4, 0x01, 0x00},
        {0x81, 0xa1, 'a', 0xd5, 0x01, 0x00, 0x00},
        {0x81, 0xa1, 'a', 0xc7, 0x01, 0x01, 0x00},
        {0x81, 0xa1, 'a', 0x91, 0xc4, 0x00},
    };
    static const size_t bin_len[] = {6, 7, 8, 6, 7, 7, 6};
    for (size_t i = 0; i < 7; i++)
        expect_payload(bins[i], bin_len[i], PL_ECORRUPT, "a bin or ext value");

    /* strings holding NUL: values, keys, nested */
    static const uint8_t nul_val[] = {0x81, 0xa1, 'a', 0xa3, 'x', 0, 'y'};
    expect_payload(nul_val, sizeof nul_val, PL_ECORRUPT, "NUL in a value");
    static const uint8_t nul_key[] = {0x81, 0xa2, 'a', 0, 0x01};
    expect_payload(nul_key, sizeof nul_key, PL_ECORRUPT, "NUL in a key");
    static const uint8_t nul_deep[] = {0x81, 0xa1, 'a', 0x92, 0x01, 0xa1, 0};
    expect_payload(nul_deep, sizeof nul_deep, PL_ECORRUPT,
                   "NUL in a string in an array");

    /* non-finite floats */
    const double nf[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        pl__buf_reset(&b);
        mp_map(&b, 1);
        mp_cstr(&b, "f");
        mp_f64(&b, nf[i]);
        expect_payload(b.data, b.len, PL_ECORRUPT, "a non-finite float64");
        pl__buf_reset(&b);
        mp_map(&b, 1);
        mp_cstr(&b, "f");
        mp_f32(&b, (float)nf[i]);
        expect_payload(b.data, b.len, PL_ECORRUPT, "a non-finite float32");
    }
    /* 0xc1 is never used */
    static const uint8_t never[] = {0x81, 0xa1, 'a', 0xc1};
    expect_payload(never, sizeof never, PL_ECORRUPT, "the unused byte 0xc1");

    /* what JSON can hold but the encoder never writes still reads */
    pl__buf_reset(&b);
    mp_map(&b, 3);
    mp_cstr(&b, "f32");
    mp_f32(&b, 1.5f);
    mp_cstr(&b, "u64");
    put_u8(&b, 0xcf);
    put_be(&b, UINT64_MAX, 8);
    mp_cstr(&b, "i8");
    put_u8(&b, 0xd0);
    put_u8(&b, 0x80);
    expect_payload(b.data, b.len, PL_OK, "float32, uint64, int8 forms");
    cJSON *j = NULL;
    cr_assert_eq(pl__payload_decode(&j, b.data, b.len), PL_OK);
    cr_assert(cJSON_GetObjectItemCaseSensitive(j, "f32")->valuedouble == 1.5);
    cr_assert(cJSON_GetObjectItemCaseSensitive(j, "u64")->valuedouble ==
              18446744073709551615.0);
    cr_assert(cJSON_GetObjectItemCaseSensitive(j, "i8")->valuedouble == -128);
    cJSON_Delete(j);
    pl__buf_free(&b);
}

/*
 * Outside the sanitizers, cap this process's address space so that an
 * attempt to allocate what a forged count asks for fails (and would show up
 * as PL_ENOMEM instead of PL_ECORRUPT).  ASan needs its huge shadow mapping,
 * so there the allocator's own limits have to do.
 */
static void cap_address_space(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return;
#else
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return;
    unsigned long pages = 0;
    int got = fscanf(f, "%lu", &pages);
    fclose(f);
    if (got != 1)
        return;
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_AS, &rl), 0);
    rlim_t cap = (rlim_t)pages * 4096u + ((rlim_t)256 << 20);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < cap)
        return;
    rl.rlim_cur = cap;
    cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
#endif
}

Test(codec, forged_counts_are_rejected_without_allocating)
{
    cap_address_space();
    static const uint32_t counts[] = {0xffffffffu,
                                      0x7fffffffu,
                                      0x10000000u,
                                      0x01000000u,
                                      0x00100000u,
                                      0x10000u,
                                      3};
    pl__buf b = {0};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        for (int kind = 0; kind < 6; kind++) {
            pl__buf_reset(&b);
            mp_map(&b, 1);
            mp_cstr(&b, "a");
            static const uint8_t heads[] = {0xdd, 0xdf, 0xdb, 0xc6, 0xc9, 0xdd};
            uint8_t head = heads[kind];
            if (kind == 5) { /* a forged count one level down */
                mp_array(&b, 1);
            }
            put_u8(&b, head);
            put_be(&b, counts[i], 4);
            if (kind == 4)
                put_u8(&b, 1);      /* ext type */
            put(&b, "\x01\x02", 2); /* far fewer bytes than promised */
            char what[128];
            snprintf(what, sizeof what, "count 0x%x, header 0x%02x", counts[i],
                     head);
            expect_payload(b.data, b.len, PL_ECORRUPT, what);
        }
        /* the payload map itself, and the record header */
        pl__buf_reset(&b);
        put_u8(&b, 0xdf);
        put_be(&b, counts[i], 4);
        put(&b,
            "\xa1"
            "a"
            "\x01",
            3);
        expect_payload(b.data, b.len, PL_ECORRUPT, "forged map count");
        pl__buf_reset(&b);
        put_u8(&b, 0xdd);
        put_be(&b, counts[i], 4);
        mp_uint(&b, 1);
        expect_rec(b.data, b.len, PL_ECORRUPT, "forged header count");
    }
    pl__buf_free(&b);
}

/* @p depth nested containers of one element each, as a payload member. */
static void bomb(pl__buf *b, size_t depth, bool maps)
{
    mp_map(b, 1);
    mp_cstr(b, "bomb");
    for (size_t i = 0; i < depth; i++) {
        if (maps) {
            mp_map(b, 1);
            mp_cstr(b, "k");
        } else {
            mp_array(b, 1);
        }
    }
    mp_nil(b);
}

Test(codec, nesting_bombs)
{
    static const size_t depths[] = {PL_MAX_JSON_DEPTH + 5, 1000, 100000};
    pl__buf b = {0};
    for (size_t i = 0; i < 3; i++) {
        for (int maps = 0; maps < 2; maps++) {
            pl__buf_reset(&b);
            bomb(&b, depths[i], maps);
            expect_payload(b.data, b.len, PL_ECORRUPT, "a nesting bomb");
            cr_assert_not(pl__payload_equal(b.data, b.len, b.data + 1,
                                            b.len - 1));
            const uint8_t *v;
            size_t vn;
            cr_assert_not(pl__map_find(b.data, b.len, "bomb", &v, &vn),
                          "map_find walked into a bomb");
            char *text = pl__payload_text(b.data, b.len, 100);
            cr_assert_not_null(text);
            free(text);
        }
        /* a bomb where the actor belongs */
        pl__buf_reset(&b);
        mp_array(&b, 7);
        mp_uint(&b, 1);
        mp_uint(&b, 0);
        mp_int(&b, 0);
        mp_uint(&b, 1);
        for (size_t k = 0; k < depths[i]; k++)
            mp_array(&b, 1);
        mp_nil(&b);
        expect_rec(b.data, b.len, PL_ECORRUPT, "a bomb in the header");
    }
    /* truncated: the bomb's promise of more levels is never kept */
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "a");
    for (int k = 0; k < 100000; k++)
        mp_array(&b, 15);
    expect_payload(b.data, b.len, PL_ECORRUPT, "a wide unfinished bomb");
    pl__buf_free(&b);
}

/* ---- fuzzing ------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
    /* xorshift64*: fixed seed, the same buffers on every run */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static size_t below(size_t n) { return n ? (size_t)(rng() % n) : 0; }

static const uint8_t interesting[] = {
    0x00, 0x01, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0,
    0xa1, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
    0xca, 0xcb, 0xcc, 0xcf, 0xd0, 0xd3, 0xd4, 0xd8, 0xd9, 0xda,
    0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff};

/* Turn @p in into a mutated copy in @p out. */
static void mutate(pl__buf *out, const pl__buf *in, const pl__buf *other)
{
    pl__buf_reset(out);
    put(out, in->data, in->len);
    int rounds = 1 + (int)below(4);
    for (int r = 0; r < rounds; r++) {
        size_t n = out->len;
        switch (below(8)) {
        case 0: /* bit flip */
        case 1:
            if (n)
                out->data[below(n)] ^= (uint8_t)(1u << below(8));
            break;
        case 2: /* an interesting byte */
            if (n)
                out->data[below(n)] = interesting[below(sizeof interesting)];
            break;
        case 3: /* a random byte */
            if (n)
                out->data[below(n)] = (uint8_t)rng();
            break;
        case 4: /* truncate */ out->len = below(n + 1); break;
        case 5: { /* delete a run of bytes */
            if (!n)
                break;
            size_t at = below(n), k = 1 + below(8);
            if (k > n - at)
                k = n - at;
            memmove(out->data + at, out->data + at + k, n - at - k);
            out->len -= k;
            break;
        }
        case 6: { /* insert bytes */
            size_t at = below(n + 1), k = 1 + below(8);
            uint8_t ins[8];
            for (size_t i = 0; i < k; i++)
                ins[i] = below(2) ? interesting[below(sizeof interesting)]
                                  : (uint8_t)rng();
            cr_assert_eq(pl__buf_reserve(out, k), PL_OK);
            memmove(out->data + at + k, out->data + at, n - at);
            memcpy(out->data + at, ins, k);
            out->len += k;
            break;
        }
        default: { /* splice in the tail of another record */
            size_t at = below(n + 1), from = below(other->len + 1);
            out->len = at;
            put(out, other->data + from, other->len - from);
            break;
        }
        }
    }
}

/* A buffer of msgpack-ish noise. */
static void noise(pl__buf *out)
{
    pl__buf_reset(out);
    size_t n = below(48);
    for (size_t i = 0; i < n; i++)
        put_u8(out, below(2) ? interesting[below(sizeof interesting)]
                             : (uint8_t)rng());
}

/* Whatever decoded must be usable: the payload decodes, its text renders. */
static void use_rec(const pl__rec *r, const uint8_t *base, size_t len)
{
    cr_assert(r->type >= PL_STEP_TEXT && r->type <= PL_STEP_CANCEL);
    cr_assert(r->actor_len >= 1 && r->actor_len <= PL_MAX_NAME);
    cr_assert(r->payload >= base && r->payload + r->payload_len == base + len);
    cr_assert((const uint8_t *)r->actor >= base &&
              (const uint8_t *)r->actor + r->actor_len <= base + len);
    cr_assert(r->prev_hash >= base && r->prev_hash + PL_HASH_LEN <= base + len);
    cJSON *j = NULL;
    int st = pl__payload_decode(&j, r->payload, r->payload_len);
    cr_assert_eq(st, PL_OK,
                 "a record that decodes has a payload that does "
                 "not: %s",
                 pl_errmsg());
    cr_assert(cJSON_IsObject(j));
    cJSON_Delete(j);
    char *text = pl__payload_text(r->payload, r->payload_len, 64);
    cr_assert_not_null(text);
    free(text);
    const uint8_t *v;
    size_t vn;
    (void)pl__map_find(r->payload, r->payload_len, "text", &v, &vn);
}

static void fuzz_one(const uint8_t *p, size_t n, unsigned long iter)
{
    uint8_t *c = exact_copy(p, n);
    pl__rec r;
    int st = pl__rec_decode(&r, c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__rec_decode returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK)
        use_rec(&r, c, n);
    lazy_agrees(c, n, st, iter);

    /* the bare-payload readers on the same bytes */
    st = pl__payload_check(c, n, false);
    cr_assert(st == PL_OK || st == PL_ECORRUPT, "iteration %lu: check gave %s",
              iter, pl_status_name(st));
    cJSON *j = NULL;
    int dst = pl__payload_decode(&j, c, n);
    cr_assert_eq(dst, st, "iteration %lu: check said %s, decode said %s", iter,
                 pl_status_name(st), pl_status_name(dst));
    if (j)
        expect_block_tree(c, n, j);
    cJSON_Delete(j);
    (void)pl__payload_equal(c, n, c, n);

    /* and the run record readers */
    pl__run_info ri;
    st = pl__run_info_decode(&ri, "r", c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__run_info_decode returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK)
        pl__run_info_clear(&ri);
    pl__run_state rs;
    st = pl__run_state_decode(&rs, "r", c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__run_state_decode returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK)
        pl__run_state_clear(&rs);
    free(c);
}

Test(codec, fuzz_step_records, .timeout = 300)
{
    rng_state = 0x9e3779b97f4a7c15ull;
    pl__buf recs[8];
    size_t n = valid_records(recs, 8);
    pl__buf m = {0};
    unsigned long ok = 0;
    for (unsigned long i = 0; i < 200000; i++) {
        if (i % 10 == 9) {
            noise(&m);
        } else {
            mutate(&m, &recs[below(n)], &recs[below(n)]);
        }
        pl__rec r;
        uint8_t *c = exact_copy(m.data, m.len);
        ok += pl__rec_decode(&r, c, m.len) == PL_OK;
        free(c);
        fuzz_one(m.data, m.len, i);
    }
    /* the mutations are not all fatal: some records still decode */
    cr_assert_gt(ok, 100, "only %lu mutated records decoded", ok);
    for (size_t i = 0; i < n; i++)
        pl__buf_free(&recs[i]);
    pl__buf_free(&m);
}

/* ---- a recorded call compared without encoding the new one -------------- */

static const char *const call_actions[] = {"lookup", "refund"};
static const char call_seed[] = "9f86d081884c7d659a2feaa0c55ad015";

/* Encode a call to "tool" with @p payload and, by @p shape's bits, actions
 * (1) and a seed digest (2). */
static void call_of(pl__buf *b, const cJSON *payload, int shape)
{
    pl__buf_reset(b);
    cr_assert_eq(pl__call_payload_encode(b, "tool", payload, call_actions,
                                         shape & 1 ? 2 : 0,
                                         shape & 2 ? call_seed : NULL, 0),
                 PL_OK, "%s", pl_errmsg());
}

static bool call_same(const pl__buf *b, const cJSON *payload, int shape)
{
    return pl__call_payload_same(b->data, b->len, "tool", payload, call_actions,
                                 shape & 1 ? 2 : 0,
                                 shape & 2 ? call_seed : NULL, 0);
}

static const char *const call_payloads[] = {
    "{}",
    "{\"i\": 0}",
    "{\"n\": null, \"t\": true, \"f\": false, \"s\": \"\"}",
    "{\"u\": \"h\\u00e9llo \\u2713 \\ud834\\udd1e\", \"long\": \"the quick "
    "brown fox jumps over the lazy dog, twice: the quick brown fox\"}",
    "{\"ints\": [0, 1, -1, 127, 128, -32, -33, 255, 256, 65535, 65536, "
    "-2147483648, 4294967296, 9007199254740992, -9223372036854775808]}",
    "{\"f\": [0.5, -1.25, 1e300, 5e-324, 9223372036854775808.0]}",
    "{\"e\": {}, \"ea\": [], \"a\": [1, [2, [3, {}]], {\"b\": {\"c\": []}}]}",
    "{\"\": \"empty key\", \"k\": [[], [[]], {}]}",
};

Test(codec, call_payload_same_accepts_its_own_encoding)
{
    pl__buf b = {0};
    for (int shape = 0; shape < 4; shape++) {
        for (size_t i = 0; i < PL__ARRAY_LEN(call_payloads); i++) {
            cJSON *j = t_json(call_payloads[i]);
            call_of(&b, j, shape);
            cr_assert(call_same(&b, j, shape), "%s (shape %d)",
                      call_payloads[i], shape);
            cJSON_Delete(j);
        }
        call_of(&b, NULL, shape); /* no payload is {} */
        cr_assert(call_same(&b, NULL, shape));
        cJSON *empty = cJSON_CreateObject();
        cr_assert(call_same(&b, empty, shape));
        cJSON_Delete(empty);
    }
    pl__buf_free(&b);
}

/* same() may say "not the same" where equal() says equal (the caller then
 * compares the slow way), never the reverse. */
static void expect_same_implies_equal(const char *rec, const char *now,
                                      bool want_same)
{
    cJSON *x = t_json(rec), *y = t_json(now);
    pl__buf bx = {0}, by = {0};
    for (int shape = 0; shape < 4; shape++) {
        call_of(&bx, x, shape);
        call_of(&by, y, shape);
        bool same = call_same(&bx, y, shape);
        cr_assert_eq(same, want_same, "%s recorded, %s now: same %d", rec, now,
                     same);
        if (same)
            cr_assert(pl__payload_equal(bx.data, bx.len, by.data, by.len));
    }
    pl__buf_free(&bx);
    pl__buf_free(&by);
    cJSON_Delete(x);
    cJSON_Delete(y);
}

Test(codec, call_payload_same_is_never_looser_than_equal)
{
    expect_same_implies_equal("{\"a\": 2.0}", "{\"a\": 2}", true);
    expect_same_implies_equal("{\"a\": 1}", "{\"a\": 2}", false);
    expect_same_implies_equal("{\"a\": 1}", "{\"a\": 1.5}", false);
    expect_same_implies_equal("{\"a\": 1.5}", "{\"a\": 1.25}", false);
    expect_same_implies_equal("{\"a\": -1}", "{\"a\": 18446744073709551615}",
                              false);
    expect_same_implies_equal("{\"a\": 1}", "{\"A\": 1}", false);
    expect_same_implies_equal("{\"a\": 1}", "{\"a\": 1, \"b\": 2}", false);
    expect_same_implies_equal("{\"a\": 1, \"b\": 2}", "{\"a\": 1}", false);
    expect_same_implies_equal("{\"a\": [1, 2]}", "{\"a\": [2, 1]}", false);
    expect_same_implies_equal("{\"a\": [1]}", "{\"a\": [1, 1]}", false);
    expect_same_implies_equal("{\"a\": [1, 1]}", "{\"a\": [1]}", false);
    expect_same_implies_equal("{\"a\": \"1\"}", "{\"a\": 1}", false);
    expect_same_implies_equal("{\"a\": null}", "{\"a\": false}", false);
    expect_same_implies_equal("{\"a\": true}", "{\"a\": false}", false);
    expect_same_implies_equal("{\"a\": true}", "{\"a\": 1}", false);
    expect_same_implies_equal("{\"a\": {}}", "{\"a\": []}", false);
    expect_same_implies_equal("{\"a\": \"x\"}", "{\"a\": \"x \"}", false);
    expect_same_implies_equal("{\"a\": \"x \"}", "{\"a\": \"x\"}", false);
    expect_same_implies_equal("{\"a\": \"\"}", "{\"a\": \"x\"}", false);
    /* a long string: the other comparison */
    expect_same_implies_equal("{\"a\": \"0123456789012345678901234567890123"
                              "456789\"}",
                              "{\"a\": \"012345678901234567890"
                              "1234567890123456789\"}",
                              true);
    expect_same_implies_equal("{\"a\": \"0123456789012345678901234567890123"
                              "456789\"}",
                              "{\"a\": \"012345678901234567890"
                              "123456789012345678X\"}",
                              false);
    expect_same_implies_equal("{\"a\": \"0123456789012345678901234567890123"
                              "456789\"}",
                              "{\"a\": \"012345678901234567890"
                              "12345678901234567\"}",
                              false);
    /* equal in another order: not the same here, equal the slow way */
    expect_same_implies_equal("{\"a\": 1, \"b\": 2}", "{\"b\": 2, \"a\": 1}",
                              false);

    /* the call around the payload */
    cJSON *j = t_json("{\"i\": 1}");
    pl__buf b = {0};
    call_of(&b, j, 3);
    cr_assert(pl__call_payload_same(b.data, b.len, "tool", j, call_actions, 2,
                                    call_seed, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool2", j, call_actions,
                                        2, call_seed, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "too", j, call_actions,
                                        2, call_seed, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", j, call_actions,
                                        1, call_seed, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", j,
                                        call_actions + 1, 1, call_seed, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", j, call_actions,
                                        2, NULL, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", j, call_actions,
                                        2, "9f86", 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", j, NULL, 0,
                                        call_seed, 0));
    cr_assert_not(pl__call_payload_same(b.data, b.len - 1, "tool", j,
                                        call_actions, 2, call_seed, 0));
    /* over the payload limit ({"i": 1} is 4 bytes): the slow way gives the
     * error */
    cr_assert(pl__call_payload_same(b.data, b.len, "tool", j, call_actions, 2,
                                    call_seed, 4));
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", j, call_actions,
                                        2, call_seed, 3));
    cJSON_Delete(j);

    /* what encoding refuses is never the same */
    j = t_json("{\"a\": 1}");
    call_of(&b, j, 0);
    cJSON_SetNumberValue(cJSON_GetObjectItem(j, "a"), INFINITY);
    cr_assert_not(call_same(&b, j, 0));
    cJSON_Delete(j);
    cJSON *arr = cJSON_CreateArray(); /* a payload that is not an object */
    cr_assert_not(pl__call_payload_same(b.data, b.len, "tool", arr, NULL, 0,
                                        NULL, 0));
    cJSON_Delete(arr);
    /* at the depth limit the same; past it (where encoding refuses), not */
    for (int levels = PL_MAX_JSON_DEPTH; levels <= PL_MAX_JSON_DEPTH + 1;
         levels++) {
        pl__buf_reset(&b);
        mp_map(&b, 2);
        mp_cstr(&b, "policy");
        mp_cstr(&b, "tool");
        mp_cstr(&b, "payload");
        stored_nest(&b, levels, true);
        j = nest_arrays(levels, true);
        cr_assert_eq(call_same(&b, j, 0), levels <= PL_MAX_JSON_DEPTH,
                     "%d levels", levels);
        cJSON_Delete(j);
    }
    pl__buf_free(&b);
}

/* Mutated records of a call are the same as the call only where the slow
 * comparison finds them equal, and only if they are well-formed. */
Test(codec, fuzz_call_payload_same, .timeout = 300)
{
    rng_state = 0x2545f4914f6cdd1dull;
    pl__buf recs[PL__ARRAY_LEN(call_payloads)], m = {0};
    cJSON *js[PL__ARRAY_LEN(call_payloads)];
    size_t n = PL__ARRAY_LEN(call_payloads);
    for (size_t i = 0; i < n; i++) {
        memset(&recs[i], 0, sizeof recs[i]);
        js[i] = t_json(call_payloads[i]);
        call_of(&recs[i], js[i], (int)(i % 4));
    }
    unsigned long same = 0;
    for (unsigned long it = 0; it < 200000; it++) {
        size_t i = below(n);
        mutate(&m, &recs[i], &recs[below(n)]);
        uint8_t *c = exact_copy(m.data, m.len);
        if (call_same(&(pl__buf){c, m.len, m.len}, js[i], (int)(i % 4))) {
            same++;
            cr_assert_eq(pl__payload_check(c, m.len, true), PL_OK,
                         "iteration %lu: same, but malformed", it);
            cr_assert(pl__payload_equal(c, m.len, recs[i].data, recs[i].len),
                      "iteration %lu: same, but not equal", it);
        }
        free(c);
    }
    /* some mutations leave the call as it was (an integer re-encoded
     * wider, a byte flipped back) */
    cr_assert_gt(same, 0);
    for (size_t i = 0; i < n; i++) {
        pl__buf_free(&recs[i]);
        cJSON_Delete(js[i]);
    }
    pl__buf_free(&m);
}

/* ---- run records --------------------------------------------------------- */

static void info_sample(pl__run_info *ri, pl__buf *payload, pl__buf *seed,
                        char **actions, bool with_seed)
{
    memset(ri, 0, sizeof *ri);
    payload_of(payload, "{\"order\": 42, \"items\": [\"a\", \"b\"]}");
    cJSON *s = t_json("[[1, \"user\", {\"text\": \"hi\"}], "
                      "[6, \"engine\", {\"name\": \"now\", \"value\": 5}]]");
    cr_assert_eq(pl__json_encode(seed, s), PL_OK);
    cJSON_Delete(s);
    ri->policy = "root-policy";
    ri->payload = payload->data;
    ri->payload_len = payload->len;
    ri->actions = actions;
    ri->n_actions = actions ? 3 : 0;
    ri->seed = with_seed ? seed->data : NULL;
    ri->seed_len = with_seed ? seed->len : 0;
    ri->created_us = 1712345678901234;
}

Test(codec, run_info_roundtrip)
{
    char a0[] = "search", a1[] = "fetch", a2[] = "h\xc3\xa9";
    char *actions[] = {a0, a1, a2};
    for (int variant = 0; variant < 4; variant++) {
        bool with_seed = variant & 1, with_actions = variant & 2;
        pl__buf payload = {0}, seed = {0}, enc = {0};
        pl__run_info ri;
        info_sample(&ri, &payload, &seed, with_actions ? actions : NULL,
                    with_seed);
        cr_assert_eq(pl__run_info_encode(&enc, "r", &ri), PL_OK);
        pl__run_info got;
        int st = pl__run_info_decode(&got, "r", enc.data, enc.len);
        cr_assert_eq(st, PL_OK, "variant %d: %s", variant, pl_errmsg());
        cr_assert_str_eq(got.policy, "root-policy");
        cr_assert_eq(got.payload_len, payload.len);
        cr_assert_eq(memcmp(got.payload, payload.data, payload.len), 0);
        cr_assert_eq(got.n_actions, with_actions ? 3u : 0u);
        for (size_t i = 0; i < got.n_actions; i++)
            cr_assert_str_eq(got.actions[i], actions[i]);
        if (with_seed) {
            cr_assert_not_null(got.seed);
            cr_assert_eq(got.seed_len, seed.len);
            cr_assert_eq(memcmp(got.seed, seed.data, seed.len), 0);
        } else {
            cr_assert_null(got.seed, "no seed decodes as NULL");
            cr_assert_eq(got.seed_len, 0);
        }
        cr_assert_eq(got.created_us, 1712345678901234);
        pl__run_info_clear(&got);
        cr_assert_null(got.policy, "clear leaves the record empty");
        pl__buf_free(&payload);
        pl__buf_free(&seed);
        pl__buf_free(&enc);
    }
}

/* A run info map built by hand: which field to spoil, and how. */
enum {
    SPOIL_NONE,
    SPOIL_NO_V,
    SPOIL_V2,
    SPOIL_NO_POLICY,
    SPOIL_NO_PAYLOAD,
    SPOIL_POLICY_EMPTY,
    SPOIL_POLICY_CTL,
    SPOIL_POLICY_LONG,
    SPOIL_POLICY_INT,
    SPOIL_PAYLOAD_ARRAY,
    SPOIL_PAYLOAD_BIN,
    SPOIL_ACTIONS_MAP,
    SPOIL_ACTION_INT,
    SPOIL_ACTION_EMPTY,
    SPOIL_ACTIONS_TWICE,
    SPOIL_CREATED_STR,
    SPOIL_INT_KEY,
    SPOIL_UNKNOWN_KEY,
    SPOIL_TRAILING,
    SPOIL_COUNT
};

static void info_build(pl__buf *b, int spoil)
{
    char longname[PL_MAX_NAME + 1];
    memset(longname, 'p', sizeof longname);
    uint32_t n = 5 - (spoil == SPOIL_NO_V) - (spoil == SPOIL_NO_POLICY) -
                 (spoil == SPOIL_NO_PAYLOAD) + (spoil == SPOIL_ACTIONS_TWICE) +
                 (spoil == SPOIL_INT_KEY) + (spoil == SPOIL_UNKNOWN_KEY);
    mp_map(b, n);
    if (spoil == SPOIL_UNKNOWN_KEY) { /* a field from a newer writer */
        mp_cstr(b, "future");
        mp_map(b, 2);
        mp_cstr(b, "x");
        mp_bin(b, "\x00\x01", 2);
        mp_cstr(b, "y");
        mp_array(b, 2);
        mp_nil(b);
        mp_f64(b, NAN);
    }
    if (spoil != SPOIL_NO_V) {
        mp_cstr(b, "v");
        mp_uint(b, spoil == SPOIL_V2 ? 3 : 1);
    }
    if (spoil != SPOIL_NO_POLICY) {
        mp_cstr(b, "policy");
        if (spoil == SPOIL_POLICY_EMPTY)
            mp_str(b, "", 0);
        else if (spoil == SPOIL_POLICY_CTL)
            mp_cstr(b, "bad\nname");
        else if (spoil == SPOIL_POLICY_LONG)
            mp_str(b, longname, sizeof longname);
        else if (spoil == SPOIL_POLICY_INT)
            mp_uint(b, 7);
        else
            mp_cstr(b, "root");
    }
    if (spoil != SPOIL_NO_PAYLOAD) {
        mp_cstr(b, "payload");
        if (spoil == SPOIL_PAYLOAD_ARRAY) {
            mp_array(b, 0);
        } else if (spoil == SPOIL_PAYLOAD_BIN) {
            mp_map(b, 1);
            mp_cstr(b, "b");
            mp_bin(b, "x", 1);
        } else {
            mp_map(b, 1);
            mp_cstr(b, "k");
            mp_uint(b, 1);
        }
    }
    for (int twice = 0; twice < 1 + (spoil == SPOIL_ACTIONS_TWICE); twice++) {
        mp_cstr(b, "actions");
        if (spoil == SPOIL_ACTIONS_MAP) {
            mp_map(b, 0);
        } else {
            mp_array(b, 2);
            mp_cstr(b, "a");
            if (spoil == SPOIL_ACTION_INT)
                mp_uint(b, 1);
            else if (spoil == SPOIL_ACTION_EMPTY)
                mp_str(b, "", 0);
            else
                mp_cstr(b, "b");
        }
    }
    mp_cstr(b, "created");
    if (spoil == SPOIL_CREATED_STR)
        mp_cstr(b, "yesterday");
    else
        mp_int(b, 123);
    if (spoil == SPOIL_INT_KEY) {
        mp_uint(b, 1);
        mp_uint(b, 2);
    }
    if (spoil == SPOIL_TRAILING)
        mp_nil(b);
}

Test(codec, run_info_rejects_malformed)
{
    pl__buf b = {0};
    for (int spoil = 0; spoil < SPOIL_COUNT; spoil++) {
        pl__buf_reset(&b);
        info_build(&b, spoil);
        int want = spoil == SPOIL_NONE || spoil == SPOIL_UNKNOWN_KEY ? PL_OK
                   : spoil == SPOIL_V2 ? PL_EVERSION
                                       : PL_ECORRUPT;
        uint8_t *c = exact_copy(b.data, b.len);
        pl__run_info ri;
        set_sentinel();
        int st = pl__run_info_decode(&ri, "r", c, b.len);
        cr_assert_eq(st, want, "spoil %d: %s (%s)", spoil, pl_status_name(st),
                     pl_errmsg());
        if (st == PL_OK) {
            cr_assert_str_eq(ri.policy, "root");
            cr_assert_eq(ri.n_actions, 2);
            cr_assert_eq(ri.created_us, 123);
            pl__run_info_clear(&ri);
        } else {
            cr_assert(strcmp(pl_errmsg(), sentinel) != 0,
                      "spoil %d: no "
                      "message",
                      spoil);
            cr_assert_null(ri.policy,
                           "spoil %d: a failed decode left "
                           "memory behind",
                           spoil);
        }
        free(c);
    }
    /* every truncation of a good record */
    pl__buf_reset(&b);
    info_build(&b, SPOIL_NONE);
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *c = exact_copy(b.data, len);
        pl__run_info ri;
        cr_assert_eq(pl__run_info_decode(&ri, "r", c, len), PL_ECORRUPT,
                     "cut to %zu bytes", len);
        free(c);
    }
    /* not a map; forged counts; a bomb in an unknown field */
    static const uint8_t not_map[] = {0x92, 0xa1, 'v', 0x01};
    pl__run_info ri;
    cr_assert_eq(pl__run_info_decode(&ri, "r", not_map, sizeof not_map),
                 PL_ECORRUPT);
    pl__buf_reset(&b);
    put_u8(&b, 0xdf);
    put_be(&b, 0xffffffffu, 4);
    mp_cstr(&b, "v");
    mp_uint(&b, 1);
    cr_assert_eq(pl__run_info_decode(&ri, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "actions");
    put_u8(&b, 0xdd);
    put_be(&b, 0xffffffffu, 4);
    cr_assert_eq(pl__run_info_decode(&ri, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "zz");
    for (int i = 0; i < 100000; i++)
        mp_array(&b, 1);
    mp_nil(&b);
    cr_assert_eq(pl__run_info_decode(&ri, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_free(&b);
}

static void state_full(pl__run_state *st, bool optional)
{
    memset(st, 0, sizeof *st);
    st->status = optional ? PL_RUN_SUSPENDED : PL_RUN_COMPLETED;
    st->steps = 1234567890123ull;
    st->updated_us = 1712345678901234;
    st->heartbeat_us = 1712345678905678;
    st->owner_pid = 4242;
    st->owner_start = 99887766;
    snprintf(st->owner_host, sizeof st->owner_host, "host.example");
    st->attempts = 7;
    st->error = optional ? PL_EPOLICY : 0;
    if (optional) {
        st->reason = strdup("policy 'x' failed: because");
        snprintf(st->token, sizeof st->token, "%s",
                 "0123456789abcdef0123456789abcdef");
        st->susp_path = strdup("0.3.5");
        st->susp_seq = 17;
        pl__buf b = {0};
        payload_of(&b, "{\"question\": \"approve?\"}");
        st->prompt = b.data;
        st->prompt_len = b.len;
        pl__buf r = {0};
        payload_of(&r, "{\"sum\": 3}");
        st->result = r.data;
        st->result_len = r.len;
        st->open = calloc(2, sizeof *st->open);
        cr_assert_not_null(st->open);
        st->n_open = 2;
        st->open[0].seq = 4; /* the root */
        memset(st->open[0].hash, 0xab, PL_HASH_LEN);
        st->open[1].depth = 2; /* 0.3.5 */
        st->open[1].comps[0] = 3;
        st->open[1].comps[1] = 5;
        st->open[1].seq = 16;
        memset(st->open[1].hash, 0xcd, PL_HASH_LEN);
    }
}

static void state_same(const pl__run_state *a, const pl__run_state *b)
{
    cr_assert_eq(a->status, b->status);
    cr_assert_eq(a->steps, b->steps);
    cr_assert_eq(a->updated_us, b->updated_us);
    cr_assert_eq(a->heartbeat_us, b->heartbeat_us);
    cr_assert_eq(a->owner_pid, b->owner_pid);
    cr_assert_eq(a->owner_start, b->owner_start);
    cr_assert_str_eq(a->owner_host, b->owner_host);
    cr_assert_eq(a->attempts, b->attempts);
    cr_assert_eq(a->error, b->error);
    cr_assert_str_eq(a->token, b->token);
    cr_assert_eq(a->susp_seq, b->susp_seq);
    cr_assert_eq(!a->reason, !b->reason);
    if (a->reason)
        cr_assert_str_eq(a->reason, b->reason);
    cr_assert_eq(!a->susp_path, !b->susp_path);
    if (a->susp_path)
        cr_assert_str_eq(a->susp_path, b->susp_path);
    cr_assert_eq(a->prompt_len, b->prompt_len);
    cr_assert_eq(!a->prompt, !b->prompt);
    if (a->prompt)
        cr_assert_eq(memcmp(a->prompt, b->prompt, a->prompt_len), 0);
    cr_assert_eq(a->result_len, b->result_len);
    cr_assert_eq(!a->result, !b->result);
    if (a->result)
        cr_assert_eq(memcmp(a->result, b->result, a->result_len), 0);
    cr_assert_eq(a->n_open, b->n_open);
    for (size_t i = 0; i < a->n_open; i++) {
        cr_assert_eq(a->open[i].depth, b->open[i].depth);
        cr_assert_eq(a->open[i].seq, b->open[i].seq);
        cr_assert_eq(memcmp(a->open[i].comps, b->open[i].comps,
                            a->open[i].depth * sizeof a->open[i].comps[0]),
                     0);
        cr_assert_eq(memcmp(a->open[i].hash, b->open[i].hash, PL_HASH_LEN), 0);
    }
}

Test(codec, run_state_roundtrip)
{
    for (int optional = 0; optional < 2; optional++) {
        pl__run_state st, got, copy;
        state_full(&st, optional);
        pl__buf enc = {0};
        cr_assert_eq(pl__run_state_encode(&enc, "r", &st), PL_OK);
        int rc = pl__run_state_decode(&got, "r", enc.data, enc.len);
        cr_assert_eq(rc, PL_OK, "%s", pl_errmsg());
        state_same(&st, &got);
        if (!optional) {
            cr_assert_null(got.reason);
            cr_assert_null(got.susp_path);
            cr_assert_null(got.prompt);
            cr_assert_null(got.result);
            cr_assert_str_eq(got.token, "");
        }
        cr_assert_eq(pl__run_state_copy(&copy, &got), PL_OK);
        state_same(&st, &copy);
        if (optional)
            cr_assert(copy.reason != got.reason && copy.prompt != got.prompt,
                      "the copy is deep");
        pl__run_state_clear(&copy);
        pl__run_state_clear(&got);
        pl__run_state_clear(&st);
        pl__buf_free(&enc);
    }
}

/* A run state map by hand with one field replaced (NULL value: left out). */
static void state_build(pl__buf *b, const char *key, const uint8_t *val,
                        size_t val_len, bool drop)
{
    static const char *const keys[] = {"v",       "status",    "steps",
                                       "updated", "heartbeat", "pid",
                                       "host",    "attempts",  "error"};
    uint32_t n = 9 - (drop ? 1 : 0);
    bool extra = true;
    for (size_t i = 0; i < 9; i++)
        if (!strcmp(keys[i], key))
            extra = false;
    if (extra && !drop)
        n++;
    mp_map(b, n);
    for (size_t i = 0; i < 9; i++) {
        bool hit = !strcmp(keys[i], key);
        if (hit && drop)
            continue;
        mp_cstr(b, keys[i]);
        if (hit) {
            put(b, val, val_len);
            continue;
        }
        switch (i) {
        case 0: mp_uint(b, 1); break;
        case 1: mp_uint(b, PL_RUN_FAILED); break;
        case 6: mp_cstr(b, "h"); break;
        case 8: mp_int(b, PL_EPOLICY); break;
        default: mp_uint(b, 5); break;
        }
    }
    if (extra && !drop) {
        mp_cstr(b, key);
        put(b, val, val_len);
    }
}

Test(codec, run_state_rejects_malformed)
{
    static const struct {
        const char *key;
        const char *val; /* raw msgpack */
        size_t len;
        bool drop;
        int want;
    } cases[] = {
        {"zz", "\xc0", 1, false, PL_OK},      /* unknown: skipped */
        {"v", "\x04", 1, false, PL_EVERSION}, /* 3 is the newest */
        {"v", "", 0, true, PL_ECORRUPT},      /* no version */
        {"v",
         "\xa1"
         "1",
         2, false, PL_ECORRUPT},
        {"status", "", 0, true, PL_ECORRUPT}, /* no status */
        {"status", "\x00", 1, false, PL_ECORRUPT},
        {"status", "\x08", 1, false, PL_ECORRUPT},
        {"status", "\xff", 1, false, PL_ECORRUPT},
        {"steps", "\xff", 1, false, PL_ECORRUPT}, /* negative */
        {"attempts", "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 9, false,
         PL_ECORRUPT},                                    /* past u32 */
        {"error", "\x01", 1, false, PL_ECORRUPT},         /* positive */
        {"error", "\xd1\xd8\xf0", 3, false, PL_OK},       /* -10000 */
        {"error", "\xd1\xd8\xef", 3, false, PL_ECORRUPT}, /* -10001 */
        {"host", "\x01", 1, false, PL_ECORRUPT},
        {"token",
         "\xd9\x21"
         "012345678901234567890123456789012",
         35, false, PL_ECORRUPT}, /* 33 chars */
        {"token",
         "\xa2"
         "ab",
         3, false, PL_OK},
        {"reason", "\x01", 1, false, PL_ECORRUPT},
        {"spath", "\xc0", 1, false, PL_ECORRUPT},
        {"sseq",
         "\xa1"
         "x",
         2, false, PL_ECORRUPT},
        {"prompt", "\x90", 1, false, PL_ECORRUPT}, /* not a map */
        {"prompt", "\x81\x01\x02", 3, false, PL_ECORRUPT},
        {"result",
         "\x81\xa1"
         "b\xc4\x00",
         5, false, PL_ECORRUPT},
        {"result",
         "\x81\xa1"
         "b\x01",
         4, false, PL_OK},
        {"updated", "\xa0", 1, false, PL_ECORRUPT},
    };
    pl__buf b = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl__buf_reset(&b);
        state_build(&b, cases[i].key, (const uint8_t *)cases[i].val,
                    cases[i].len, cases[i].drop);
        uint8_t *c = exact_copy(b.data, b.len);
        pl__run_state st;
        set_sentinel();
        int rc = pl__run_state_decode(&st, "r", c, b.len);
        cr_assert_eq(rc, cases[i].want, "case %zu (%s): %s (%s)", i,
                     cases[i].key, pl_status_name(rc), pl_errmsg());
        if (rc == PL_OK) {
            cr_assert_eq(st.status, PL_RUN_FAILED);
            if (strcmp(cases[i].key, "error") != 0)
                cr_assert_eq(st.error, PL_EPOLICY);
            pl__run_state_clear(&st);
        } else {
            cr_assert(strcmp(pl_errmsg(), sentinel) != 0,
                      "case %zu: no "
                      "message",
                      i);
            cr_assert_null(st.reason);
            cr_assert_null(st.prompt);
        }
        free(c);
    }
    /* every truncation of a good, full state */
    pl__run_state full;
    state_full(&full, true);
    pl__buf_reset(&b);
    cr_assert_eq(pl__run_state_encode(&b, "r", &full), PL_OK);
    pl__run_state_clear(&full);
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *c = exact_copy(b.data, len);
        pl__run_state st;
        cr_assert_eq(pl__run_state_decode(&st, "r", c, len), PL_ECORRUPT,
                     "cut to %zu bytes", len);
        free(c);
    }
    /* trailing bytes after the map */
    put_u8(&b, 0xc0);
    pl__run_state st;
    cr_assert_eq(pl__run_state_decode(&st, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_free(&b);
}

/*
 * A checksummed run state of format @p v by hand: "v", "status" and, when
 * @p key is not NULL, @p key with the raw value @p val, then "sum".
 */
static void state_v(pl__buf *b, unsigned v, const char *key, const pl__buf *val)
{
    mp_map(b, 3 + (key != NULL));
    mp_cstr(b, "v");
    mp_uint(b, v);
    mp_cstr(b, "status");
    mp_uint(b, PL_RUN_RUNNING);
    if (key) {
        mp_cstr(b, key);
        put(b, val->data, val->len);
    }
    uint8_t sum[PL_HASH_LEN];
    cr_assert_eq(pl__runrec_sum('s', "r", b->data, b->len, sum), PL_OK);
    mp_cstr(b, "sum");
    put_u8(b, 0xc4);
    put_u8(b, PL_HASH_LEN);
    put(b, sum, PL_HASH_LEN);
}

/* One "open" entry: [[comps...], seq, bin of hash_len bytes]. */
static void open_entry(pl__buf *b, unsigned depth, uint64_t seq,
                       size_t hash_len)
{
    put_u8(b, 0x93);
    mp_array(b, depth);
    for (unsigned d = 0; d < depth; d++)
        mp_uint(b, d);
    mp_uint(b, seq);
    put_u8(b, 0xc4);
    put_u8(b, (uint8_t)hash_len);
    for (size_t i = 0; i < hash_len; i++)
        put_u8(b, 0x5a);
}

Test(codec, run_state_open_ledgers_are_checked)
{
    static const struct {
        unsigned v, n, depth;
        uint64_t seq;
        size_t hash_len;
        int want;
    } cases[] = {
        {3, 1, 2, 7, PL_HASH_LEN, PL_OK},
        {3, PL_MAX_DEPTH + 1, PL_MAX_DEPTH, 7, PL_HASH_LEN, PL_OK},
        {3, 0, 0, 0, PL_HASH_LEN, PL_ECORRUPT},                /* empty */
        {3, PL_MAX_DEPTH + 2, 1, 0, PL_HASH_LEN, PL_ECORRUPT}, /* too many */
        {3, 1, PL_MAX_DEPTH + 1, 0, PL_HASH_LEN, PL_ECORRUPT}, /* too deep */
        {3, 1, 1, 1ull << 32, PL_HASH_LEN, PL_ECORRUPT},       /* past u32 */
        {3, 1, 1, 0, PL_HASH_LEN - 1, PL_ECORRUPT},            /* short */
        {2, 1, 1, 0, PL_HASH_LEN, PL_ECORRUPT}, /* not in format 2 */
    };
    pl__buf val = {0}, b = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl__buf_reset(&val);
        pl__buf_reset(&b);
        mp_array(&val, cases[i].n);
        for (unsigned j = 0; j < cases[i].n; j++)
            open_entry(&val, cases[i].depth, cases[i].seq, cases[i].hash_len);
        state_v(&b, cases[i].v, "open", &val);
        uint8_t *c = exact_copy(b.data, b.len);
        pl__run_state st;
        int rc = pl__run_state_decode(&st, "r", c, b.len);
        cr_assert_eq(rc, cases[i].want, "case %zu: %s (%s)", i,
                     pl_status_name(rc), pl_errmsg());
        if (!rc) {
            cr_assert_eq(st.n_open, cases[i].n);
            cr_assert_eq(st.open[0].depth, cases[i].depth);
            cr_assert_eq(st.open[0].seq, cases[i].seq);
        }
        pl__run_state_clear(&st);
        free(c);
    }
    /* format 2 without open ledgers stays readable; 4 is not */
    for (unsigned v = 2; v <= 4; v++) {
        pl__buf_reset(&b);
        state_v(&b, v, NULL, NULL);
        pl__run_state st;
        int rc = pl__run_state_decode(&st, "r", b.data, b.len);
        cr_assert_eq(rc, v == 4 ? PL_EVERSION : PL_OK, "v %u: %s", v,
                     pl_errmsg());
        pl__run_state_clear(&st);
    }
    pl__buf_free(&val);
    pl__buf_free(&b);
}

Test(codec, fuzz_run_records, .timeout = 300)
{
    rng_state = 0x2545f4914f6cdd1dull;
    pl__buf seeds[3] = {{0}, {0}, {0}};
    pl__buf payload = {0}, seedarr = {0};
    char a0[] = "search";
    char *actions[] = {a0, a0, a0};
    pl__run_info ri;
    info_sample(&ri, &payload, &seedarr, actions, true);
    cr_assert_eq(pl__run_info_encode(&seeds[0], "r", &ri), PL_OK);
    pl__run_state st;
    state_full(&st, true);
    cr_assert_eq(pl__run_state_encode(&seeds[1], "r", &st), PL_OK);
    pl__run_state_clear(&st);
    state_full(&st, false);
    cr_assert_eq(pl__run_state_encode(&seeds[2], "r", &st), PL_OK);
    pl__run_state_clear(&st);

    pl__buf m = {0};
    for (unsigned long i = 0; i < 60000; i++) {
        mutate(&m, &seeds[below(3)], &seeds[below(3)]);
        fuzz_one(m.data, m.len, i);
    }
    for (int i = 0; i < 3; i++)
        pl__buf_free(&seeds[i]);
    pl__buf_free(&payload);
    pl__buf_free(&seedarr);
    pl__buf_free(&m);
}

/*
 * A stored payload of one-byte values decodes to a 64-byte cJSON node per
 * byte: past PL__TREE_MAX the reader refuses it (PL_ELIMIT) before it
 * allocates anything, and a smaller one still decodes.
 */
Test(codec, a_payload_that_would_decode_too_big_is_refused)
{
    size_t n = PL__TREE_MAX / sizeof(cJSON) + 1000; /* {"a": [0, 0, ...]} */
    pl__buf b = {0};
    mp_map(&b, 1);
    mp_cstr(&b, "a");
    put_u8(&b, 0xdd);
    for (int i = 3; i >= 0; i--)
        put_u8(&b, (uint8_t)(n >> (8 * i)));
    uint8_t *zeros = calloc(n, 1);
    cr_assert_not_null(zeros);
    put(&b, zeros, n);
    free(zeros);
    cJSON *j = NULL;
    int st = pl__payload_decode(&j, b.data, b.len);
    cr_assert_eq(st, PL_ELIMIT, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(j);
    cr_assert(strstr(pl_errmsg(), "would decode to"), "%s", pl_errmsg());
    pl__tree_size ts;
    cr_assert_eq(pl__payload_measure(&ts, b.data, b.len, 0), PL_ELIMIT);

    /* the same shape, 100000 values: decodes */
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "a");
    mp_array(&b, 100000);
    for (int i = 0; i < 100000; i++)
        put_u8(&b, 0);
    cr_assert_eq(pl__payload_decode(&j, b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "a")), 100000);
    cJSON_Delete(j);
    pl__buf_free(&b);
}

/* ---- inbox and timer records (runrec.c) ------------------------------------ */

static void read_seed(const char *name, pl__buf *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/../fuzz/corpus/fuzz_run_record/%s",
             PL_TEST_SRC_DIR, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    pl__buf_reset(out);
    cr_assert_eq(pl__buf_append(out, buf, n), PL_OK);
}

Test(codec, inbox_and_timer_records_round_trip_and_are_bound_to_their_run)
{
    uint8_t pay[] = {0x81, 0xa2, 'b', 'y', 0xa3, 'b', 'o', 'b'};
    pl__inbox_rec ev = {.name = "approved",
                        .payload = pay,
                        .payload_len = sizeof pay,
                        .sent_us = 123};
    pl__buf b = {0};
    cr_assert_eq(pl__inbox_encode(&b, "run-1", &ev), PL_OK);
    pl__inbox_rec back;
    cr_assert_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK);
    cr_expect_str_eq(back.name, "approved");
    cr_expect_null(back.reason);
    cr_expect_eq(back.sent_us, 123);
    cr_expect_eq(back.payload_len, sizeof pay);
    pl__inbox_clear(&back);
    set_sentinel();
    cr_expect_eq(pl__inbox_decode(&back, "run-2", b.data, b.len), PL_ECORRUPT);
    cr_expect(strstr(pl_errmsg(), "run-2") != NULL, "%s", pl_errmsg());
    for (size_t i = 0; i < b.len; i++) { /* every byte matters */
        b.data[i] ^= 0x01;
        int st = pl__inbox_decode(&back, "run-1", b.data, b.len);
        cr_expect(st == PL_ECORRUPT || st == PL_EVERSION, "byte %zu: %s", i,
                  pl_status_name(st));
        if (!st)
            pl__inbox_clear(&back);
        b.data[i] ^= 0x01;
    }
    pl__inbox_rec ca = {.reason = "", .sent_us = 5};
    pl__buf_reset(&b);
    cr_assert_eq(pl__inbox_encode(&b, "run-1", &ca), PL_OK);
    cr_assert_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK);
    cr_expect_str_eq(back.reason, "");
    cr_expect_null(back.name);
    pl__inbox_clear(&back);

    int64_t due;
    char id[PL_MAX_RUN_ID + 1];
    pl__buf_reset(&b);
    cr_assert_eq(pl__timer_encode(&b, "run-1", 987654321), PL_OK);
    cr_assert_eq(pl__timer_decode(&due, id, b.data, b.len), PL_OK);
    cr_expect_eq(due, 987654321);
    cr_expect_str_eq(id, "run-1");
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x10;
        int st = pl__timer_decode(&due, id, b.data, b.len);
        cr_expect(st == PL_ECORRUPT || st == PL_EVERSION, "byte %zu: %s", i,
                  pl_status_name(st));
        b.data[i] ^= 0x10;
    }
    cr_expect_eq(pl__timer_decode(&due, id, b.data, 3), PL_ECORRUPT);
    cr_expect_eq(pl__timer_decode(&due, id, NULL, 0), PL_ECORRUPT);

    /* the fuzz corpus's seeds are real records */
    read_seed("seed-inbox-event", &b);
    cr_expect_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    pl__inbox_clear(&back);
    read_seed("seed-inbox-cancel", &b);
    cr_expect_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    pl__inbox_clear(&back);
    read_seed("seed-timer", &b);
    cr_expect_eq(pl__timer_decode(&due, id, b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    read_seed("seed-state-waiting", &b);
    pl__run_state st;
    cr_assert_eq(pl__run_state_decode(&st, "run-1", b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(st.status, PL_RUN_WAITING);
    cr_expect_str_eq(st.wait_event, "approved");
    cr_expect_eq(st.wait_until_ms, 1764300000000);
    pl__run_state_clear(&st);
    pl__buf_free(&b);
}
