/*
 * test_json.c -- building and reading JSON from a format (core/ext/json.c).
 *
 * Covers: every letter in both directions, nested objects and arrays, the
 * ignored separators, pack's '?' and '*' modifiers, unpack's optional keys
 * and strict '!', a round trip; every error -- a malformed format
 * (unknown letters, unbalanced braces, trailing characters), a too deep
 * format, NULL arguments, non-finite and too large numbers, missing keys
 * and items, wrong types, integers that are not integral or do not fit,
 * extra keys and items under '!' -- with its status and a message that
 * names the failing value's path; that 'o' arguments and 'O' copies are
 * freed on failure (the sanitizer build finds any leak); and
 * pl_steps_add_resultf() inside a policy; pl_json_print()'s exact numbers.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

/* The status must be @p want and pl_errmsg() must contain @p what. */
#define EXPECT_ERR(call, want, what)                                           \
    do {                                                                       \
        int st_ = (call);                                                      \
        cr_expect_eq(st_, (want), "%s: got %s, expected %s (%s)", #call,       \
                     pl_status_name(st_), pl_status_name(want), pl_errmsg());  \
        expect_has(pl_errmsg(), (what));                                       \
    } while (0)

/* The status must be @p want and pl_errmsg() exactly @p msg. */
#define EXPECT_MSG(call, want, msg)                                            \
    do {                                                                       \
        int st_ = (call);                                                      \
        cr_expect_eq(st_, (want), "%s: got %s, expected %s (%s)", #call,       \
                     pl_status_name(st_), pl_status_name(want), pl_errmsg());  \
        cr_expect_str_eq(pl_errmsg(), (msg));                                  \
    } while (0)

/* @p v printed compactly must be @p text; frees v. */
static void expect_json(cJSON *v, const char *text)
{
    cr_assert_not_null(v);
    char *got = t_text(v);
    cr_expect_str_eq(got, text);
    free(got);
    cJSON_Delete(v);
}

/* A pointer the failing calls must set back to NULL. */
static cJSON *const NOT_NULL = (cJSON *)&t_calls;

/* "[[[...i...]]]": @p depth brackets around one 'i'. */
static char *nested_format(int depth)
{
    char *f = malloc((size_t)depth * 2 + 2);
    cr_assert_not_null(f);
    memset(f, '[', (size_t)depth);
    f[depth] = 'i';
    memset(f + depth + 1, ']', (size_t)depth);
    f[2 * depth + 1] = '\0';
    return f;
}

/* ------------------------------------------------------------------------ */
/* Pack                                                                     */
/* ------------------------------------------------------------------------ */

Test(json, pack_every_letter_alone)
{
    cJSON *v = NULL;
    cr_assert_eq(pl_json_pack(&v, "s", "hi"), PL_OK, "%s", pl_errmsg());
    expect_json(v, "\"hi\"");
    cr_assert_eq(pl_json_pack(&v, "n"), PL_OK);
    expect_json(v, "null");
    cr_assert_eq(pl_json_pack(&v, "b", 1), PL_OK);
    expect_json(v, "true");
    cr_assert_eq(pl_json_pack(&v, "b", 0), PL_OK);
    expect_json(v, "false");
    cr_assert_eq(pl_json_pack(&v, "i", -42), PL_OK);
    expect_json(v, "-42");
    /* (cJSON prints numbers this large in 15 digits: compare the value) */
    cr_assert_eq(pl_json_pack(&v, "I", (int64_t)1 << 53), PL_OK);
    cr_expect(cJSON_IsNumber(v) && v->valuedouble == 0x1p53);
    cJSON_Delete(v);
    cr_assert_eq(pl_json_pack(&v, "I", -((int64_t)1 << 53)), PL_OK);
    cr_expect(cJSON_IsNumber(v) && v->valuedouble == -0x1p53);
    cJSON_Delete(v);
    cr_assert_eq(pl_json_pack(&v, "f", 1.5), PL_OK);
    expect_json(v, "1.5");
    cr_assert_eq(pl_json_pack(&v, "{}"), PL_OK);
    expect_json(v, "{}");
    cr_assert_eq(pl_json_pack(&v, "[]"), PL_OK);
    expect_json(v, "[]");

    cJSON *taken = t_json("{\"k\": [1]}");
    cr_assert_eq(pl_json_pack(&v, "o", taken), PL_OK);
    cr_expect_eq(v, taken, "'o' returns its argument itself");
    expect_json(v, "{\"k\":[1]}");

    cJSON *kept = t_json("{\"k\": [1]}");
    cr_assert_eq(pl_json_pack(&v, "O", kept), PL_OK);
    cr_expect_neq(v, kept, "'O' returns a copy");
    expect_json(v, "{\"k\":[1]}");
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(kept, "k"));
    cJSON_Delete(kept);
}

Test(json, pack_nested_objects_and_arrays)
{
    cJSON *inner = t_json("{\"x\": 1}");
    cJSON *taken = cJSON_CreateString("mine");
    cJSON *v = NULL;
    int st = pl_json_pack(&v,
                          "{s:s, s:{s:i, s:[b, n, f, I]}, s:[[], {}],"
                          " s:O, s:o}",
                          "name", "ada", "inner", "n", 7, "list", 1, 2.25,
                          (int64_t)-3, "empty", "copy", inner, "took", taken);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    expect_json(v, "{\"name\":\"ada\",\"inner\":{\"n\":7,\"list\":"
                   "[true,null,2.25,-3]},\"empty\":[[],{}],\"copy\":"
                   "{\"x\":1},\"took\":\"mine\"}");
    cJSON_Delete(inner);
}

Test(json, pack_ignores_whitespace_colons_and_commas)
{
    cJSON *a = NULL, *b = NULL;
    cr_assert_eq(pl_json_pack(&a, "{sisi}", "a", 1, "b", 2), PL_OK);
    cr_assert_eq(pl_json_pack(&b, " { s : i ,\n\ts : i } ", "a", 1, "b", 2),
                 PL_OK);
    cr_expect(cJSON_Compare(a, b, true));
    expect_json(a, "{\"a\":1,\"b\":2}");
    cJSON_Delete(b);
}

Test(json, pack_question_mark_gives_null)
{
    cJSON *v = NULL;
    int st = pl_json_pack(&v, "{s:s?, s:s?, s:o?, s:O?}", "a", NULL, "b", "x",
                          "c", (cJSON *)NULL, "d", (const cJSON *)NULL);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    expect_json(v, "{\"a\":null,\"b\":\"x\",\"c\":null,\"d\":null}");
    cr_assert_eq(pl_json_pack(&v, "s?", NULL), PL_OK);
    expect_json(v, "null");
}

Test(json, pack_star_omits_the_value)
{
    cJSON *v = NULL;
    cJSON *one = cJSON_CreateNumber(1);
    int st = pl_json_pack(&v, "{s:s*, s:i, s:o*, s:O*, s:s*, s:o*}", "gone",
                          NULL, "kept", 1, "gone2", (cJSON *)NULL, "gone3",
                          (const cJSON *)NULL, "here", "yes", "one", one);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    expect_json(v, "{\"kept\":1,\"here\":\"yes\",\"one\":1}");

    st = pl_json_pack(&v, "[s*, i, s*, s*]", NULL, 5, "a", NULL);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    expect_json(v, "[5,\"a\"]");
}

Test(json, pack_repeated_key_keeps_the_last_value)
{
    cJSON *v = NULL;
    cr_assert_eq(pl_json_pack(&v, "{s:i, s:i, s:i}", "a", 1, "b", 2, "a", 3),
                 PL_OK);
    expect_json(v, "{\"a\":3,\"b\":2}");
}

Test(json, pack_nests_to_the_depth_limit)
{
    char *f = nested_format(PL_MAX_JSON_DEPTH);
    cJSON *v = NULL;
    cr_assert_eq(pl_json_pack(&v, f, 1), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(v);
    free(f);

    f = nested_format(PL_MAX_JSON_DEPTH + 1);
    v = NOT_NULL;
    EXPECT_ERR(pl_json_pack(&v, f, 1), PL_ELIMIT, "PL_MAX_JSON_DEPTH");
    expect_has(pl_errmsg(), "pack: format \"[[[");
    cr_expect_null(v);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Pack errors                                                              */
/* ------------------------------------------------------------------------ */

Test(json, pack_rejects_malformed_formats)
{
    cJSON *v = NOT_NULL;
    EXPECT_MSG(pl_json_pack(&v, "{s:x}", "a"), PL_EINVAL,
               "pack: format \"{s:x}\", offset 3: expected a value, got 'x'");
    cr_expect_null(v);
    EXPECT_ERR(pl_json_pack(&v, "{s:i", "a", 1), PL_EINVAL, "unclosed '{'");
    EXPECT_ERR(pl_json_pack(&v, "[i", 1), PL_EINVAL, "unclosed '['");
    EXPECT_ERR(pl_json_pack(&v, "[i}", 1), PL_EINVAL,
               "'}' does not close the '['");
    EXPECT_ERR(pl_json_pack(&v, "{s:i]", "a", 1), PL_EINVAL,
               "']' does not close the '{'");
    EXPECT_ERR(pl_json_pack(&v, "{s:i}}", "a", 1), PL_EINVAL,
               "offset 5: '}' after the value");
    EXPECT_ERR(pl_json_pack(&v, "i i", 1, 2), PL_EINVAL, "'i' after the value");
    EXPECT_ERR(pl_json_pack(&v, "", 0), PL_EINVAL,
               "expected a value, got the end");
    EXPECT_ERR(pl_json_pack(&v, "{i:i}", 1, 2), PL_EINVAL,
               "expected a key ('s') or '}', got 'i'");
    EXPECT_ERR(pl_json_pack(&v, "{s?:i}", "a", 1), PL_EINVAL,
               "expected a value, got '?'");
    EXPECT_ERR(pl_json_pack(&v, "s*", "a"), PL_EINVAL,
               "'*' is only allowed inside an object or array");
    EXPECT_ERR(pl_json_pack(&v, "[i!]", 1), PL_EINVAL,
               "expected a value, got '!'");
    EXPECT_ERR(pl_json_pack(&v, "F", 1.0), PL_EINVAL,
               "expected a value, got 'F'");
    EXPECT_ERR(pl_json_pack(&v, "\x01", 1), PL_EINVAL, "got 0x01");
    cr_expect_null(v);
}

Test(json, pack_rejects_null_out_and_fmt)
{
    EXPECT_MSG(pl_json_pack(NULL, "i", 1), PL_EINVAL, "pack: out is NULL");
    cJSON *v = NOT_NULL;
    EXPECT_MSG(pl_json_pack(&v, NULL), PL_EINVAL, "pack: fmt is NULL");
    cr_expect_null(v);
}

Test(json, pack_null_out_still_frees_o_arguments)
{
    cJSON *taken = t_json("{\"big\": [1, 2, 3]}");
    EXPECT_ERR(pl_json_pack(NULL, "{s:o}", "a", taken), PL_EINVAL,
               "out is NULL");
    /* the sanitizer build fails this test if taken leaked */
}

Test(json, pack_null_string_names_its_key)
{
    cJSON *v = NOT_NULL;
    EXPECT_MSG(pl_json_pack(&v, "{s:s}", "a", NULL), PL_EINVAL,
               "pack: $.a: NULL argument for 's' (use 's?' for null)");
    cr_expect_null(v);
    EXPECT_MSG(pl_json_pack(&v, "s", NULL), PL_EINVAL,
               "pack: $: NULL argument for 's' (use 's?' for null)");
    EXPECT_MSG(pl_json_pack(&v, "[i, o]", 1, (cJSON *)NULL), PL_EINVAL,
               "pack: $[1]: NULL argument for 'o' (use 'o?' for null)");
    EXPECT_MSG(pl_json_pack(&v, "{s:[i, {s:O}]}", "x", 1, "y",
                            (const cJSON *)NULL),
               PL_EINVAL,
               "pack: $.x[1].y: NULL argument for 'O' (use 'O?' for null)");
    EXPECT_MSG(pl_json_pack(&v, "{s:{s:i}}", "a", NULL, 1), PL_EINVAL,
               "pack: $.a: a key is NULL");
    cr_expect_null(v);
}

Test(json, pack_non_finite_number_is_ejson)
{
    cJSON *v = NOT_NULL;
    EXPECT_MSG(pl_json_pack(&v, "{s:f}", "a", (double)INFINITY), PL_EJSON,
               "pack: $.a: non-finite number (inf)");
    cr_expect_null(v);
    EXPECT_MSG(pl_json_pack(&v, "[f, f]", 1.0, (double)-INFINITY), PL_EJSON,
               "pack: $[1]: non-finite number (-inf)");
    EXPECT_ERR(pl_json_pack(&v, "{s:{s:[f]}}", "a", "b", (double)NAN), PL_EJSON,
               "pack: $.a.b[0]: non-finite number");
    expect_has(pl_errmsg(), "nan");
    cr_expect_null(v);
}

Test(json, pack_int64_past_2_pow_53_is_ejson)
{
    cJSON *v = NOT_NULL;
    EXPECT_ERR(pl_json_pack(&v, "{s:I}", "n", ((int64_t)1 << 53) + 1), PL_EJSON,
               "pack: $.n: integer 9007199254740993 is past 2^53");
    cr_expect_null(v);
    EXPECT_ERR(pl_json_pack(&v, "I", INT64_MIN), PL_EJSON,
               "pack: $: integer -9223372036854775808");
}

Test(json, pack_frees_o_arguments_on_failure)
{
    /* 'o' before the failure: already in the object that is freed */
    cJSON *before = t_json("{\"a\": [1, 2, {\"b\": \"c\"}]}");
    cJSON *v = NOT_NULL;
    EXPECT_ERR(pl_json_pack(&v, "{s:o, s:f}", "x", before, "y",
                            (double)INFINITY),
               PL_EJSON, "$.y");
    cr_expect_null(v);

    /* 'o' after the failure: read and freed without being used */
    cJSON *after = t_json("[\"after\"]");
    cJSON *after2 = t_json("{\"k\": null}");
    EXPECT_ERR(pl_json_pack(&v, "{s:s, s:[o, {s:o}], s:o*}", "x", NULL, "y",
                            after, "z", after2, "w", (cJSON *)NULL),
               PL_EINVAL, "pack: $.x: NULL argument for 's'");
    cr_expect_null(v);

    /* the first failure is the one reported */
    cJSON *third = cJSON_CreateTrue();
    EXPECT_MSG(pl_json_pack(&v, "[f, s, o]", (double)NAN, NULL, third),
               PL_EJSON, "pack: $[0]: non-finite number (nan)");
    expect_has(pl_errmsg(), "$[0]");

    /* a key that is NULL: its 'o' value is freed too */
    cJSON *orphan = cJSON_CreateString("orphan");
    EXPECT_ERR(pl_json_pack(&v, "{s:o}", NULL, orphan), PL_EINVAL,
               "a key is NULL");
    /* the sanitizer build fails this test if any of them leaked */
}

/* ------------------------------------------------------------------------ */
/* Unpack                                                                   */
/* ------------------------------------------------------------------------ */

Test(json, unpack_every_letter)
{
    cJSON *j = t_json("{\"s\": \"x\", \"n\": null, \"t\": true, \"u\": false,"
                      " \"i\": -7, \"I\": 9007199254740992, \"f\": 1.5,"
                      " \"g\": 3, \"o\": {\"k\": 1}, \"O\": [1, 2]}");
    const char *s = NULL;
    bool t = false, u = true;
    int i = 0;
    int64_t big = 0;
    double f = 0, g = 0;
    const cJSON *o = NULL;
    cJSON *copy = NULL;
    int st = pl_json_unpack(j,
                            "{s:s, s:n, s:b, s:b, s:i, s:I, s:f, s:f, "
                            "s:o, s:O}",
                            "s", &s, "n", "t", &t, "u", &u, "i", &i, "I", &big,
                            "f", &f, "g", &g, "o", &o, "O", &copy);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(s, "x");
    cr_expect_eq(s, cJSON_GetObjectItemCaseSensitive(j, "s")->valuestring,
                 "'s' is borrowed");
    cr_expect(t);
    cr_expect(!u);
    cr_expect_eq(i, -7);
    cr_expect_eq(big, (int64_t)1 << 53);
    cr_expect_eq(f, 1.5);
    cr_expect_eq(g, 3.0);
    cr_expect_eq(o, cJSON_GetObjectItemCaseSensitive(j, "o"),
                 "'o' is borrowed");
    cr_assert_not_null(copy);
    cr_expect_neq(copy, cJSON_GetObjectItemCaseSensitive(j, "O"),
                  "'O' is a copy");
    expect_json(copy, "[1,2]");
    cJSON_Delete(j);
}

Test(json, unpack_top_level_values)
{
    cJSON *j = t_json("[42, \"s\", 2.5, false, null]");
    int i = 0;
    const char *s = NULL;
    double f = 0;
    bool b = true;
    cr_assert_eq(pl_json_unpack(cJSON_GetArrayItem(j, 0), "i", &i), PL_OK);
    cr_expect_eq(i, 42);
    cr_assert_eq(pl_json_unpack(cJSON_GetArrayItem(j, 1), "s", &s), PL_OK);
    cr_expect_str_eq(s, "s");
    cr_assert_eq(pl_json_unpack(cJSON_GetArrayItem(j, 2), "f", &f), PL_OK);
    cr_expect_eq(f, 2.5);
    cr_assert_eq(pl_json_unpack(cJSON_GetArrayItem(j, 3), "b", &b), PL_OK);
    cr_expect(!b);
    cr_assert_eq(pl_json_unpack(cJSON_GetArrayItem(j, 4), "n"), PL_OK);
    cJSON_Delete(j);
}

Test(json, unpack_nested_objects_and_arrays)
{
    cJSON *j = t_json("{\"items\": [{\"name\": \"a\", \"n\": 1},"
                      " {\"name\": \"b\", \"n\": 2}],"
                      " \"meta\": {\"page\": {\"no\": 3}}, \"m\": [[1], []]}");
    const char *a = NULL, *b = NULL;
    int n1 = 0, n2 = 0, no = 0, one = 0;
    int st = pl_json_unpack(j,
                            "{s:[{s:s, s:i}, {s:s, s:i}], "
                            "s:{s:{s:i}}, s:[[i], []]}",
                            "items", "name", &a, "n", &n1, "name", &b, "n", &n2,
                            "meta", "page", "no", &no, "m", &one);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(a, "a");
    cr_expect_str_eq(b, "b");
    cr_expect_eq(n1, 1);
    cr_expect_eq(n2, 2);
    cr_expect_eq(no, 3);
    cr_expect_eq(one, 1);
    cJSON_Delete(j);
}

Test(json, unpack_ignores_what_the_format_does_not_read)
{
    cJSON *j = t_json("{\"a\": 1, \"extra\": true, \"arr\": [1, 2, 3]}");
    int a = 0, first = 0;
    cr_assert_eq(pl_json_unpack(j, "{s:i, s:[i]}", "a", &a, "arr", &first),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(a, 1);
    cr_expect_eq(first, 1);
    cr_assert_eq(pl_json_unpack(j, "{s:i, s:[i*]*}", "a", &a, "arr", &first),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_json_unpack(j, "{}"), PL_OK);
    cJSON_Delete(j);
}

Test(json, unpack_optional_keys)
{
    cJSON *j = t_json("{\"here\": 5, \"after\": \"z\"}");
    int here = 0, gone = 99, deep = 98;
    const char *after = NULL, *deep_s = "unchanged";
    cJSON *copy = NOT_NULL;
    int st = pl_json_unpack(j, "{s?i, s?i, s?{s:i, s:[s, O]}, s:s}", "here",
                            &here, "gone", &gone, "nested", "deep", &deep,
                            "list", &deep_s, &copy, "after", &after);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(here, 5);
    cr_expect_eq(gone, 99, "a missing optional key leaves its variable");
    cr_expect_eq(deep, 98);
    cr_expect_str_eq(deep_s, "unchanged");
    cr_expect_eq(copy, NOT_NULL);
    cr_expect_str_eq(after, "z",
                     "the arguments after a missing optional "
                     "key are read in order");

    /* optional but present with the wrong type is still an error */
    EXPECT_MSG(pl_json_unpack(j, "{s?s}", "here", &after), PL_EJSON,
               "unpack: $.here: expected a string, got a number");
    cJSON_Delete(j);
}

Test(json, unpack_strict_objects)
{
    cJSON *j = t_json("{\"a\": 1, \"b\": {\"c\": 2, \"d\": 3}}");
    int a = 0, c = 0, d = 0;
    cr_assert_eq(pl_json_unpack(j, "{s:i, s:{s:i, s:i !} !}", "a", &a, "b", "c",
                                &c, "d", &d),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(d, 3);
    /* an optional key that is missing does not make another key extra */
    cr_assert_eq(pl_json_unpack(j, "{s:i, s?i, s:o !}", "a", &a, "zz", &c, "b",
                                &(const cJSON *){NULL}),
                 PL_OK, "%s", pl_errmsg());

    EXPECT_MSG(pl_json_unpack(j, "{s:i !}", "a", &a), PL_EJSON,
               "unpack: $.b: unexpected key (the format is strict: '!')");
    EXPECT_MSG(pl_json_unpack(j, "{s:i, s:{s:i !}}", "a", &a, "b", "c", &c),
               PL_EJSON,
               "unpack: $.b.d: unexpected key (the format is strict: '!')");
    /* strictness is per object: the inner one is not strict here */
    cr_expect_eq(pl_json_unpack(j, "{s:i, s:{s:i} !}", "a", &a, "b", "c", &c),
                 PL_OK, "%s", pl_errmsg());
    cJSON_Delete(j);
}

Test(json, unpack_strict_arrays)
{
    cJSON *j = t_json("[1, 2, 3]");
    int x = 0, y = 0, z = 0;
    cr_assert_eq(pl_json_unpack(j, "[i, i, i !]", &x, &y, &z), PL_OK);
    cr_expect_eq(z, 3);
    EXPECT_MSG(pl_json_unpack(j, "[i, i !]", &x, &y), PL_EJSON,
               "unpack: $: expected 2 items, got 3 (the format is strict: "
               "'!')");
    cJSON *k = t_json("{\"l\": [1, 2]}");
    EXPECT_MSG(pl_json_unpack(k, "{s:[i!]}", "l", &x), PL_EJSON,
               "unpack: $.l: expected 1 item, got 2 (the format is strict: "
               "'!')");
    cJSON_Delete(k);
    cJSON_Delete(j);
}

Test(json, unpack_keys_are_case_sensitive)
{
    cJSON *j = t_json("{\"Name\": \"a\"}");
    const char *s = NULL;
    EXPECT_MSG(pl_json_unpack(j, "{s:s}", "name", &s), PL_EJSON,
               "unpack: $.name: missing key");
    cr_expect_null(s);
    cJSON_Delete(j);
}

Test(json, round_trip)
{
    cJSON *extra = t_json("{\"deep\": [true]}");
    cJSON *v = NULL;
    const char *fmt = "{s:s, s:i, s:I, s:f, s:b, s:n, s:[i, i], "
                      "s:{s:s}, s:O}";
    int st = pl_json_pack(&v, fmt, "name", "ada", "i", -123456, "I",
                          (int64_t)-9007199254740991, "f", 0.1, "b", 1, "n",
                          "pair", 3, 4, "obj", "k", "v", "extra", extra);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());

    const char *name = NULL, *k = NULL;
    int i = 0, p0 = 0, p1 = 0;
    int64_t big = 0;
    double f = 0;
    bool b = false;
    cJSON *back = NULL;
    st = pl_json_unpack(v, fmt, "name", &name, "i", &i, "I", &big, "f", &f, "b",
                        &b, "n", "pair", &p0, &p1, "obj", "k", &k, "extra",
                        &back);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(name, "ada");
    cr_expect_eq(i, -123456);
    cr_expect_eq(big, (int64_t)-9007199254740991);
    cr_expect_eq(f, 0.1);
    cr_expect(b);
    cr_expect_eq(p0, 3);
    cr_expect_eq(p1, 4);
    cr_expect_str_eq(k, "v");
    cr_expect(cJSON_Compare(back, extra, true));
    cJSON_Delete(back);
    cJSON_Delete(extra);
    cJSON_Delete(v);
}

/* ------------------------------------------------------------------------ */
/* Unpack errors                                                            */
/* ------------------------------------------------------------------------ */

Test(json, unpack_missing_key_names_the_path)
{
    cJSON *j = t_json("{\"items\": [{\"name\": \"a\"}, {\"name\": \"b\"},"
                      " {\"nom\": \"c\"}]}");
    const char *a, *b, *c;
    EXPECT_MSG(pl_json_unpack(j, "{s:[{s:s}, {s:s}, {s:s}]}", "items", "name",
                              &a, "name", &b, "name", &c),
               PL_EJSON, "unpack: $.items[2].name: missing key");
    cJSON_Delete(j);
}

Test(json, unpack_missing_item)
{
    cJSON *j = t_json("{\"xy\": [1]}");
    int x = 0, y = 0;
    EXPECT_MSG(pl_json_unpack(j, "{s:[i, i]}", "xy", &x, &y), PL_EJSON,
               "unpack: $.xy[1]: missing item (the array has 1)");
    cr_expect_eq(x, 1, "values read before the failure are set");
    cJSON_Delete(j);
}

Test(json, unpack_wrong_types)
{
    cJSON *j = t_json("{\"sum\": \"x\", \"flag\": 1, \"obj\": [], "
                      "\"arr\": {}, \"nil\": 0, \"str\": null, "
                      "\"odd key\": true, \"q\\\"\": 1}");
    double d;
    bool b;
    const char *s;
    int i;
    EXPECT_MSG(pl_json_unpack(j, "{s:f}", "sum", &d), PL_EJSON,
               "unpack: $.sum: expected a number, got a string");
    EXPECT_MSG(pl_json_unpack(j, "{s:i}", "sum", &i), PL_EJSON,
               "unpack: $.sum: expected a number, got a string");
    EXPECT_MSG(pl_json_unpack(j, "{s:I}", "str", &(int64_t){0}), PL_EJSON,
               "unpack: $.str: expected a number, got null");
    EXPECT_MSG(pl_json_unpack(j, "{s:b}", "flag", &b), PL_EJSON,
               "unpack: $.flag: expected a boolean, got a number");
    EXPECT_MSG(pl_json_unpack(j, "{s:{}}", "obj"), PL_EJSON,
               "unpack: $.obj: expected an object, got an array");
    EXPECT_MSG(pl_json_unpack(j, "{s:[]}", "arr"), PL_EJSON,
               "unpack: $.arr: expected an array, got an object");
    EXPECT_MSG(pl_json_unpack(j, "{s:n}", "nil"), PL_EJSON,
               "unpack: $.nil: expected null, got a number");
    EXPECT_MSG(pl_json_unpack(j, "{s:s}", "str", &s), PL_EJSON,
               "unpack: $.str: expected a string, got null");
    EXPECT_MSG(pl_json_unpack(j, "{s:s}", "odd key", &s), PL_EJSON,
               "unpack: $[\"odd key\"]: expected a string, got a boolean");
    EXPECT_MSG(pl_json_unpack(j, "{s:s}", "q\"", &s), PL_EJSON,
               "unpack: $[\"q\\\"\"]: expected a string, got a number");
    EXPECT_MSG(pl_json_unpack(j, "[]"), PL_EJSON,
               "unpack: $: expected an array, got an object");
    cJSON_Delete(j);
}

Test(json, unpack_long_paths_are_cut_short)
{
    char key[2000];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    cJSON *j = cJSON_CreateObject();
    cr_assert_not_null(cJSON_AddStringToObject(j, key, "x"));
    int i;
    EXPECT_ERR(pl_json_unpack(j, "{s:i}", key, &i), PL_EJSON,
               "kkk...: expected a number, got a string");
    expect_has(pl_errmsg(), "unpack: $.kkk");
    cr_expect_lt(strlen(pl_errmsg()), 1024);
    cJSON_Delete(j);
}

Test(json, unpack_integers_must_be_integral_and_fit)
{
    cJSON *j = t_json("{\"half\": 1.5, \"big\": 3000000000, "
                      "\"min\": -2147483648, \"max\": 2147483647, "
                      "\"low\": -2147483649, \"e53\": 9007199254740992, "
                      "\"past\": 9007199254740994, \"huge\": 1e300}");
    int i = 0;
    int64_t I = 0;
    EXPECT_MSG(pl_json_unpack(j, "{s:i}", "half", &i), PL_EJSON,
               "unpack: $.half: expected an integer, got 1.5");
    EXPECT_MSG(pl_json_unpack(j, "{s:I}", "half", &I), PL_EJSON,
               "unpack: $.half: expected an integer, got 1.5");
    EXPECT_MSG(pl_json_unpack(j, "{s:i}", "big", &i), PL_EJSON,
               "unpack: $.big: expected an integer that fits in int, "
               "got 3000000000");
    EXPECT_MSG(pl_json_unpack(j, "{s:i}", "low", &i), PL_EJSON,
               "unpack: $.low: expected an integer that fits in int, "
               "got -2147483649");
    cr_assert_eq(pl_json_unpack(j, "{s:i}", "min", &i), PL_OK);
    cr_expect_eq(i, INT32_MIN);
    cr_assert_eq(pl_json_unpack(j, "{s:i}", "max", &i), PL_OK);
    cr_expect_eq(i, INT32_MAX);
    cr_assert_eq(pl_json_unpack(j, "{s:I}", "big", &I), PL_OK);
    cr_expect_eq(I, 3000000000);
    cr_assert_eq(pl_json_unpack(j, "{s:I}", "e53", &I), PL_OK);
    cr_expect_eq(I, (int64_t)1 << 53);
    EXPECT_MSG(pl_json_unpack(j, "{s:I}", "past", &I), PL_EJSON,
               "unpack: $.past: expected an integer of at most 2^53 in "
               "magnitude, got 9007199254740994");
    EXPECT_MSG(pl_json_unpack(j, "{s:I}", "huge", &I), PL_EJSON,
               "unpack: $.huge: expected an integer of at most 2^53 in "
               "magnitude, got 1e+300");
    cJSON_Delete(j);

    /* numbers built in memory may be non-finite */
    cJSON *nan = cJSON_CreateNumber(NAN);
    EXPECT_ERR(pl_json_unpack(nan, "i", &i), PL_EJSON,
               "unpack: $: expected an integer, got");
    cJSON_Delete(nan);
}

Test(json, unpack_rejects_null_arguments)
{
    cJSON *j = t_json("{\"a\": 1}");
    int i;
    EXPECT_MSG(pl_json_unpack(NULL, "i", &i), PL_EINVAL,
               "unpack: json is NULL");
    EXPECT_MSG(pl_json_unpack(j, NULL), PL_EINVAL, "unpack: fmt is NULL");
    EXPECT_MSG(pl_json_unpack(j, "{s:i}", "a", (int *)NULL), PL_EINVAL,
               "unpack: $.a: NULL pointer argument for 'i'");
    EXPECT_MSG(pl_json_unpack(j, "{s:i}", NULL, &i), PL_EINVAL,
               "unpack: $: a key is NULL");
    /* pointers are checked even where nothing is stored */
    EXPECT_MSG(pl_json_unpack(j, "{s?s}", "gone", (const char **)NULL),
               PL_EINVAL, "unpack: $.gone: NULL pointer argument for 's'");
    cJSON_Delete(j);
}

Test(json, unpack_rejects_malformed_formats)
{
    cJSON *j = t_json("{\"a\": [1]}");
    int i;
    EXPECT_MSG(pl_json_unpack(j, "{s:x}", "a", &i), PL_EINVAL,
               "unpack: format \"{s:x}\", offset 3: expected a value, "
               "got 'x'");
    EXPECT_ERR(pl_json_unpack(j, "{s:[i}", "a", &i), PL_EINVAL,
               "'}' does not close the '['");
    EXPECT_ERR(pl_json_unpack(j, "{s:[i]", "a", &i), PL_EINVAL, "unclosed '{'");
    EXPECT_ERR(pl_json_unpack(j, "{s:[i]}]", "a", &i), PL_EINVAL,
               "']' after the value");
    EXPECT_ERR(pl_json_unpack(j, "{s:i ! s:i}", "a", &i, "b", &i), PL_EINVAL,
               "expected '}' after '!', got 's'");
    EXPECT_ERR(pl_json_unpack(j, "{s:s?}", "a", &i), PL_EINVAL,
               "expected a key ('s') or '}', got '?'");
    EXPECT_ERR(pl_json_unpack(j, "!", &i), PL_EINVAL,
               "expected a value, got '!'");
    /* the format is checked before the value: the mismatch is not seen */
    EXPECT_ERR(pl_json_unpack(j, "[i] x", &i), PL_EINVAL,
               "'x' after the value");

    char *f = nested_format(PL_MAX_JSON_DEPTH + 1);
    EXPECT_ERR(pl_json_unpack(j, f, &i), PL_ELIMIT, "PL_MAX_JSON_DEPTH");
    free(f);
    cJSON_Delete(j);
}

Test(json, unpack_frees_copies_on_failure)
{
    cJSON *j = t_json("{\"a\": {\"x\": [1, 2]}, \"b\": [\"y\"], \"c\": 1}");
    cJSON *a = NULL, *b = NULL;
    const char *c = NULL;
    EXPECT_MSG(pl_json_unpack(j, "{s:O, s:O, s:s}", "a", &a, "b", &b, "c", &c),
               PL_EJSON, "unpack: $.c: expected a string, got a number");
    cr_expect_null(a, "a copy is freed and its variable cleared");
    cr_expect_null(b);
    /* the sanitizer build fails this test if a copy leaked */

    /* one variable given twice: each copy is freed once */
    EXPECT_ERR(pl_json_unpack(j, "{s:O, s:O, s:s}", "a", &a, "b", &a, "c", &c),
               PL_EJSON, "$.c");
    cr_expect_null(a);
    cJSON_Delete(j);
}

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

static int packs_its_result(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                            void *user)
{
    (void)ctx;
    (void)user;
    int x = 0;
    int st = pl_json_unpack(action->payload, "{s:i}", "x", &x);
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:i, s:s, s:[b, n]}", "twice", 2 * x,
                                "by", "packer", "list", 1);
}

static int packs_an_array(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                          void *user)
{
    (void)ctx;
    (void)action;
    (void)user;
    int st = pl_steps_add_resultf(out, "[i]", 1);
    cr_expect_eq(st, PL_EJSON, "%s", pl_errmsg());
    return st;
}

Test(json, steps_add_resultf_appends_the_packed_object)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "packer", packs_its_result, NULL),
                 PL_OK, "%s", pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);

    pl_outcome *o = t_start(e, "packer", "{\"x\": 21}", NULL);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    size_t n = pl_steps_count(o->steps);
    cr_assert_gt(n, 0);
    const pl_step *last = pl_steps_at(o->steps, n - 1);
    cr_expect_eq(pl_step_type_of(last), PL_STEP_ACTION_RESULT);
    cr_expect_str_eq(pl_step_actor(last), "packer");
    char *text = t_text(pl_step_payload(last));
    cr_expect_str_eq(text, "{\"twice\":42,\"by\":\"packer\","
                           "\"list\":[true,null]}");
    free(text);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(json, steps_add_resultf_needs_an_object)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_steps_new(&l), PL_OK);
    EXPECT_MSG(pl_steps_add_resultf(l, "[i]", 1), PL_EJSON,
               "pl_steps_add_resultf: format \"[i]\" builds an array; a "
               "result must be an object");
    EXPECT_ERR(pl_steps_add_resultf(l, "s", "x"), PL_EJSON,
               "builds a "
               "string");
    /* the taken value goes with the array that is not a result */
    cJSON *taken = t_json("{\"k\": [1, 2]}");
    EXPECT_ERR(pl_steps_add_resultf(l, "[o]", taken), PL_EJSON,
               "builds an array");
    /* pack's own errors come through unchanged */
    EXPECT_MSG(pl_steps_add_resultf(l, "{s:s}", "a", NULL), PL_EINVAL,
               "pack: $.a: NULL argument for 's' (use 's?' for null)");
    EXPECT_ERR(pl_steps_add_resultf(l, "{s:x}", "a"), PL_EINVAL, "offset 3");
    cr_expect_eq(pl_steps_count(l), 0);
    pl_steps_free(l);

    /* inside a policy too: the failure fails the run */
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "arrayer", packs_an_array, NULL),
                 PL_OK, "%s", pl_errmsg());
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "arrayer", NULL, NULL);
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY);
    expect_has(o->reason, "PL_EJSON");
    expect_has(o->reason, "builds an array; a result must be an object");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Pack twice, then unpack twice, from one va_list: each call reads its
 * own copy, so the list is whole for the next. */
static int pack_twice(cJSON **a, cJSON **b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = pl_json_vpack(a, fmt, ap);
    if (!st)
        st = pl_json_vpack(b, fmt, ap);
    va_end(ap);
    return st;
}

static int unpack_twice(const cJSON *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = pl_json_vunpack(v, fmt, ap);
    if (!st)
        st = pl_json_vunpack(v, fmt, ap);
    va_end(ap);
    return st;
}

Test(json, a_va_list_is_read_through_a_copy)
{
    cJSON *a = NULL, *b = NULL;
    cr_assert_eq(pack_twice(&a, &b, "{s:i, s:s, s:f}", "n", 7, "s", "x", "f",
                            2.5),
                 PL_OK, "%s", pl_errmsg());
    cr_expect(cJSON_Compare(a, b, true), "the second pack read the same");
    int n = 0;
    const char *s = NULL;
    double f = 0;
    cr_assert_eq(unpack_twice(a, "{s:i, s:s, s:f}", "n", &n, "s", &s, "f", &f),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(n, 7);
    cr_expect_str_eq(s, "x");
    cr_expect_eq(f, 2.5);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* pl_json_print(): the numbers cJSON prints as others (15 digits that
 * read back within its tolerance) are printed exactly, wherever they sit,
 * and every other tree prints as cJSON prints it. */
Test(json, print_reads_back_every_number_as_itself)
{
    cJSON *v = cJSON_CreateObject();
    cr_assert_not_null(v);
    cJSON_AddNumberToObject(v, "big", 9007199254740991.0);
    cJSON_AddItemToObjectCS(v, "sum", cJSON_CreateNumber(0.1 + 0.2));
    cJSON *a = cJSON_AddArrayToObject(v, "list");
    cJSON_AddItemToArray(a, cJSON_CreateNumber(-9007199254740991.0));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(42));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(0.5));
    cJSON_AddStringToObject(v, "s", "x");
    char *text = pl_json_print(v, false);
    cr_assert_str_eq(text, "{\"big\":9007199254740991,"
                           "\"sum\":0.30000000000000004,"
                           "\"list\":[-9007199254740991,42,0.5],\"s\":\"x\"}");
    cJSON *back = cJSON_Parse(text);
    cr_assert_not_null(back);
    cr_assert(cJSON_Compare(v, back, true), "read back: another tree");
    cJSON_free(text);
    cJSON_Delete(back);
    /* cJSON's own print of the same tree, for the record */
    char *theirs = cJSON_PrintUnformatted(v);
    cr_assert_not_null(strstr(theirs, "9.00719925474099e+15"));
    cJSON_free(theirs);
    /* formatted: cJSON's layout, the digits exact */
    text = pl_json_print(v, true);
    cr_assert_not_null(strstr(text, "\"big\":\t9007199254740991,\n"));
    cJSON_free(text);
    /* the tree printed is not changed */
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(v, "big")));
    cJSON_Delete(v);

    /* a number alone, and trees cJSON already prints exactly */
    cJSON *n = cJSON_CreateNumber(9007199254740991.0);
    text = pl_json_print(n, false);
    cr_assert_str_eq(text, "9007199254740991");
    cJSON_free(text);
    cJSON_Delete(n);
    const char *same[] = {"{\"a\":[1,2.5,-3,1e+300,null,true,\"\\u0001\"]}",
                          "12345678901234", "[]", "{}"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        cJSON *t = cJSON_Parse(same[i]);
        cr_assert_not_null(t, "%s", same[i]);
        char *mine = pl_json_print(t, false), *its = cJSON_PrintUnformatted(t);
        cr_assert_str_eq(mine, its);
        cJSON_free(mine);
        cJSON_free(its);
        cJSON_Delete(t);
    }
    cr_assert_null(pl_json_print(NULL, false));
}
