/*
 * test_json_parse.c -- pl_json_parse (core/ext/json_parse.c): JSON text
 * from outside parsed whole or refused.
 *
 * Covers: a text parsed as cJSON parses it, a text that is not JSON, one
 * with more after its value, a length that stops before the text's NUL;
 * a string or a key holding the escape \u0000 or a raw NUL byte, refused
 * with the JSON pointer of the string and its byte, at the top, in arrays,
 * in nested objects, after escaped quotes and backslashes; "\\u0000" (an
 * escaped backslash and the text u0000) taken as the text it is; NULL
 * arguments; cJSON's allocations failing (PL_ENOMEM, never "not JSON"),
 * and text close to JSON that cJSON refuses (PL_EJSON, never PL_ENOMEM);
 * an object with a name twice (escaped alike or not, among few or many
 * names), refused by its pointer.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

/* Parse @p text (its strlen, or @p len when not 0): it must be refused
 * with PL_EJSON and a message holding @p what. */
static void refused(const char *text, size_t len, const char *what)
{
    cJSON *v = (cJSON *)1;
    int st = pl_json_parse(&v, text, len ? len : strlen(text));
    cr_expect_eq(st, PL_EJSON, "%s: %s (%s)", text, pl_status_name(st),
                 pl_errmsg());
    cr_expect_null(v, "%s: out is set on failure", text);
    expect_has(pl_errmsg(), what);
}

Test(json_parse, a_json_text_is_parsed_as_cjson_parses_it)
{
    const char *text = " {\"a\": [1, \"x\\\"y\", {\"b\": null}], \"c\": "
                       "\"\\u00e9\\\\\"} \n";
    cJSON *v = NULL;
    cr_assert_eq(pl_json_parse(&v, text, strlen(text)), PL_OK, "%s",
                 pl_errmsg());
    cJSON *want = cJSON_Parse(text);
    cr_expect(cJSON_Compare(v, want, true));
    cJSON_Delete(want);
    cJSON_Delete(v);
    /* the length bounds the text: nothing is read past it */
    const char buf[] = {'[', '1', ']', 'x'};
    cr_assert_eq(pl_json_parse(&v, buf, 3), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(cJSON_GetArraySize(v), 1);
    cJSON_Delete(v);
}

Test(json_parse, text_that_is_not_one_value_is_refused)
{
    refused("", 0, "not JSON");
    refused("{\"a\": ", 0, "not JSON (at byte");
    refused("{} {}", 0, "more follows it (at byte 3 of 5)");
    refused("{\"a\": 1}x", 0, "more follows it");
    refused("{\"a\": 1}\0", 9, "more follows it (at byte 8");
    refused("[1,\0 2]", 7, "a NUL byte outside any string (at byte 3)");
}

Test(json_parse, a_string_holding_u0000_is_refused_by_its_pointer)
{
    refused("\"ab\\u0000cd\"", 0, "the string at '' holds \\u0000 (at byte 3)");
    refused("{\"choices\": [{\"message\": {\"content\": \"ok\\u0000rm -rf "
            "/\"}}]}",
            0, "the string at '/choices/0/message/content' holds \\u0000");
    refused("[1, \"a\", [true, \"\\\"q\\\\\\u0000\"]]", 0,
            "the string at '/2/1' holds \\u0000 (at byte 22)");
    refused("{\"a\": {\"x\": 1, \"b/c~\": \"\\u0000\"}}", 0,
            "the string at '/a/b~1c~0' holds");
    refused("{\"a\": 1, \"b\": \"z\\u0000\"}", 0, "the string at '/b'");
    /* the rest of the string would be lost: the message says so */
    refused("[\"\\u0000\"]", 0, "the rest of it would be lost");
}

Test(json_parse, a_key_holding_u0000_is_refused)
{
    refused("{\"ok\": 1, \"sec\\u0000ret\": 2}", 0,
            "a key of the object at '' holds \\u0000 (at byte 14)");
    refused("{\"a\": [{\"k\\u0000\": 1}]}", 0,
            "a key of the object at '/a/0' holds");
}

Test(json_parse, an_object_with_a_name_twice_is_refused_by_its_pointer)
{
    /* cJSON reads the first "amount", JavaScript and Python the last */
    refused("{\"amount\": 1, \"to\": \"a\", \"amount\": 1000}", 0,
            "the object at '' has the name 'amount' twice");
    refused("{\"a\": [0, {\"x\": 1, \"x\": 2}]}", 0,
            "the object at '/a/1' has the name 'x' twice");
    /* the same name escaped another way is the same name */
    refused("{\"k/~\": {\"b\": 1, \"\\u0062\": 2}}", 0,
            "the object at '/k~1~0' has the name 'b' twice");
    /* past 16 names they are sorted: the pair is found where it is */
    char big[2048] = "{";
    for (int i = 0; i < 40; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "\"n%d\": %d, ",
                 i, i);
    char distinct[2048];
    snprintf(distinct, sizeof distinct, "%.*s}", (int)strlen(big) - 2, big);
    snprintf(big + strlen(big), sizeof big - strlen(big), "\"n7\": 0}");
    refused(big, 0, "the object at '' has the name 'n7' twice");
    /* distinct names, and the same name in two objects, are taken */
    const char *ok[] = {distinct, "[{\"a\": 1}, {\"a\": 2}]",
                        "{\"a\": {\"a\": {\"a\": 1}}}", "{\"a\": 1, \"A\": 2}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cJSON *v = NULL;
        cr_expect_eq(pl_json_parse(&v, ok[i], strlen(ok[i])), PL_OK, "%s: %s",
                     ok[i], pl_errmsg());
        cJSON_Delete(v);
    }
}

Test(json_parse, a_raw_nul_byte_in_a_string_is_refused)
{
    const char text[] = "{\"t\": \"ab\0cd\"}";
    refused(text, sizeof text - 1,
            "the string at '/t' holds a NUL byte (at "
            "byte 9)");
}

Test(json_parse, an_escaped_backslash_before_u0000_is_text)
{
    const char *text = "{\"t\": \"\\\\u0000 is text\"}";
    cJSON *v = NULL;
    cr_assert_eq(pl_json_parse(&v, text, strlen(text)), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(v, "t")->valuestring,
                     "\\u0000 is text");
    cJSON_Delete(v);
    /* other escapes of small code points are kept */
    text = "[\"\\u0001\\u0010\"]";
    cr_assert_eq(pl_json_parse(&v, text, strlen(text)), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(strlen(cJSON_GetArrayItem(v, 0)->valuestring), 2);
    cJSON_Delete(v);
}

Test(json_parse, null_arguments_are_refused)
{
    cJSON *v = NULL;
    cr_expect_eq(pl_json_parse(NULL, "{}", 2), PL_EINVAL);
    expect_has(pl_errmsg(), "out is NULL");
    cr_expect_eq(pl_json_parse(&v, NULL, 0), PL_EINVAL);
    expect_has(pl_errmsg(), "text is NULL");
}

/* cJSON's allocations through these hooks: the k-th fails (0: none). */
static long g_fail_at, g_count;

static void *failing_malloc(size_t n)
{
    return ++g_count == g_fail_at ? NULL : malloc(n);
}

/* JSON text that cJSON cannot read for want of memory is PL_ENOMEM, as
 * any failing allocation is, whichever of its allocations fails: not
 * PL_EJSON, "not JSON", for which a caller takes text of the sender's
 * (an MCP server's answer was read as one that is not JSON, a ToolBug).
 * Every construct: objects, arrays, escapes, a surrogate pair, numbers,
 * literals, the deepest nesting cJSON reads whole. */
Test(json_parse, json_cjson_cannot_allocate_for_is_out_of_memory)
{
    static char deep[2 * 999 + 1];
    memset(deep, '[', 999);
    memset(deep + 999, ']', 999);
    const char *texts[] = {
        " {\"a\": [1, -0.5e+3, 1E2, 0, true, false, null, {}, [ ]], "
        "\"k\\u00e9\": \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\ud83d\\ude00\", "
        "\"n\": {\"o\": \"\"}} ",
        "\"a string\"",
        "12",
        "[]",
        "{ }",
        deep};
    cJSON_Hooks hooks = {failing_malloc, free};
    cJSON_InitHooks(&hooks);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const char *t = texts[i];
        cJSON *v = NULL;
        g_count = g_fail_at = 0;
        cr_assert_eq(pl_json_parse(&v, t, strlen(t)), PL_OK, "%.60s: %s", t,
                     pl_errmsg());
        cJSON_Delete(v);
        long total = g_count;
        cr_assert_gt(total, 0);
        for (long k = 1; k <= total; k++) {
            g_count = 0;
            g_fail_at = k;
            v = (cJSON *)1;
            int st = pl_json_parse(&v, t, strlen(t));
            cr_expect_eq(st, PL_ENOMEM,
                         "%.60s, allocation %ld failing: %s (%s)", t, k,
                         pl_status_name(st), pl_errmsg());
            cr_expect_null(v);
        }
    }
    cJSON_InitHooks(NULL);
}

/* Text cJSON refuses is PL_EJSON, never taken for memory running out,
 * whatever is close to JSON in it: what cJSON refuses of RFC 8259 (a
 * lone surrogate escaped, nesting past its limit) too. */
Test(json_parse, text_cjson_refuses_is_never_out_of_memory)
{
    static char deep[2 * 1001 + 1];
    memset(deep, '[', 1001);
    memset(deep + 1001, ']', 1001);
    const char *texts[] = {"-",
                           "+1",
                           ".5",
                           "1e",
                           "1e+",
                           "[1,]",
                           "[1 2]",
                           "{\"a\"}",
                           "{\"a\" 1}",
                           "{\"a\": 1,}",
                           "{1: 2}",
                           "tru",
                           "nul",
                           "\"abc",
                           "\"\\x\"",
                           "\"\\u12\"",
                           "\"\\ud800\"",
                           "\"\\udc00\"",
                           "\"\\ud800\\u0041\"",
                           "[",
                           "]",
                           "{",
                           "  ",
                           deep};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        refused(texts[i], 0, "");
}
