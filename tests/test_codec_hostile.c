/*
 * test_codec_hostile.c -- decoding hostile bytes as step records and
 * payloads: every truncation, unknown versions, malformed headers, non-JSON
 * msgpack, forged counts, nesting bombs, and a deterministic fuzz loop give
 * PL_ECORRUPT or PL_EVERSION with a message, never a crash, an over-read or
 * a leak.
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

static void mp_f32(pl__buf *b, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    put_u8(b, 0xca);
    put_be(b, bits, 4);
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

/* A buffer of msgpack-ish noise. */
static void noise(pl__buf *out)
{
    pl__buf_reset(out);
    size_t n = below(48);
    for (size_t i = 0; i < n; i++)
        put_u8(out, below(2) ? interesting[below(sizeof interesting)]
                             : (uint8_t)rng());
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
