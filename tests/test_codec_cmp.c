/*
 * test_codec_cmp.c -- a recorded call compared with a new one without
 * encoding the new one (ledger/codec/payload_cmp.c): the same answer as
 * comparing the encodings, for every shape of call.
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
