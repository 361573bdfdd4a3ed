/*
 * test_schema_regex.c -- the patterns of "pattern" and "patternProperties"
 * (core/ext/schema_regex.c): ECMA-262 syntax, matched without backtracking
 * over the string's characters (code points of its UTF-8), within the
 * program bound and the validation's work budget.
 */
#include "support.h"

#include <stdlib.h>
#include <string.h>

/* {"pattern": @p pattern}. */
static cJSON *with_pattern(const char *pattern)
{
    cJSON *sch = cJSON_CreateObject();
    cr_assert(sch && cJSON_AddStringToObject(sch, "pattern", pattern));
    return sch;
}

/* Compile @p sch (deleted here) into *s. */
static int compile_schema(pl_schema **s, cJSON *sch)
{
    int st = pl_schema_compile(s, sch);
    cJSON_Delete(sch);
    return st;
}

/* @p sch (deleted here, @p what in messages) on the string @p str: PL_OK,
 * PL_EJSON or PL_ELIMIT. */
static int schema_on(cJSON *sch, const char *what, const char *str)
{
    pl_schema *s = NULL;
    cr_assert_eq(compile_schema(&s, sch), PL_OK, "%s: %s", what, pl_errmsg());
    cJSON *inst = cJSON_CreateString(str);
    cr_assert_not_null(inst);
    int st = pl_schema_validate(NULL, s, inst);
    pl_schema_free(s);
    cJSON_Delete(inst);
    return st;
}

static int pattern_on(const char *pattern, const char *str)
{
    return schema_on(with_pattern(pattern), pattern, str);
}

/* A pattern refused when compiling, the message saying @p why. */
static void pattern_refused(const char *pattern, const char *why)
{
    pl_schema *s = NULL;
    cr_expect_eq(compile_schema(&s, with_pattern(pattern)), PL_EINVAL, "%s: %s",
                 pattern, pl_errmsg());
    cr_expect_null(s);
    cr_expect(strstr(pl_errmsg(), why) != NULL, "%s: want %s in: %s", pattern,
              why, pl_errmsg());
    pl_schema_free(s);
}

/* A compiled {"pattern": @p pattern} on each string of @p strs (NULL
 * ended): true when each matches as @p want says. */
static void each_on(const char *pattern, bool want, const char *const *strs)
{
    for (size_t i = 0; strs[i]; i++)
        cr_expect_eq(pattern_on(pattern, strs[i]), want ? PL_OK : PL_EJSON,
                     "\"%s\" on \"%s\": want %s (%s)", pattern, strs[i],
                     want ? "a match" : "none", pl_errmsg());
}

#define ON(pattern, want, ...)                                                 \
    each_on(pattern, want, (const char *const[]){__VA_ARGS__, NULL})

/* Escapes inside brackets, which POSIX brackets do not have, once passed
 * through as they were: "[a\-z]" became the range a-z, "[a\]b]" the class
 * [a] then "b]", "[\^a]" a negated class, and "\<" GNU's word start. */
Test(schema_regex, ecma_classes_mean_what_ecma_says)
{
    cr_expect_eq(pattern_on("^[a\\-z]$", "m"), PL_EJSON);
    cr_expect_eq(pattern_on("^[a\\-z]$", "-"), PL_OK);
    cr_expect_eq(pattern_on("^[a\\]b]$", "]"), PL_OK);
    cr_expect_eq(pattern_on("^[a\\]b]$", "b"), PL_OK);
    cr_expect_eq(pattern_on("^[\\^a]$", "^"), PL_OK);
    cr_expect_eq(pattern_on("^[\\^a]$", "b"), PL_EJSON);
    cr_expect_eq(pattern_on("^[\\^]$", "^"), PL_OK);
    cr_expect_eq(pattern_on("^[[:alpha:]]$", "a"), PL_EJSON); /* [ : a l p h */
    cr_expect_eq(pattern_on("^[[:alpha:]]$", ":]"), PL_OK);
    cr_expect_eq(pattern_on("^\\<a\\>$", "<a>"), PL_OK);
    cr_expect_eq(pattern_on("^[\\w\\-]+$", "a_b-c"), PL_OK);
    cr_expect_eq(pattern_on("^[^\\d]$", "5"), PL_EJSON);
    cr_expect_eq(pattern_on("^[\\D]$", "x"), PL_OK);
    cr_expect_eq(pattern_on("^[^]$", "\n"), PL_OK);
    cr_expect_eq(pattern_on("a{,2}", "a{,2}"), PL_OK); /* a brace itself */
    /* a ")" that closes no group could once reach past the pattern */
    pattern_refused("a)|(b", "closes no group");
    pattern_refused("(a", "not closed");
    cr_expect_eq(pattern_on("[]", "x"), PL_EJSON); /* no character */
    cr_expect_eq(pattern_on("a|[]", "a"), PL_OK);
    cr_expect_eq(pattern_on("^a.b$", "a\nb"), PL_EJSON); /* "." is no \n */
    pattern_refused("[z-a]", "out of order");
    pattern_refused("a\\", "backslash");
}

/* Repetitions are copied out ("a{3}" is "aaa"): once glibc's regcomp()
 * did it, and "a{1,32767}" or stacked "+"s took seconds and gigabytes (a
 * fuzzer's out-of-memory); now a bounded program, refused past it at once,
 * saying why. */
Test(schema_regex, patterns_that_copy_out_too_far_are_refused)
{
    pattern_refused("a{1,32767}", "more than 4000 instructions");
    pattern_refused("((a{1,100}){1,100}){1,100}",
                    "more than 4000 instructions");
    pattern_refused("a++++++++++++++++++++++++++++++++++++++++++", "repeat");
    pattern_refused(
        "((((((((((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)"
        "+)+)+",
        "more than 4000 instructions");
    pattern_refused("a{2,1}", "out of order");
    /* the bound is the program's, repetitions or not: a long pattern with
     * none is refused saying so, not blamed on repetitions it lacks */
    char lit[5001];
    memset(lit, 'a', 5000);
    lit[5000] = '\0';
    pattern_refused(lit, "compiles to more than 4000 instructions");
    cr_expect_null(strstr(pl_errmsg(), "repetitions copy out"), "%s",
                   pl_errmsg());
    lit[3000] = '\0';
    cr_expect_eq(pattern_on(lit, lit), PL_OK, "%s", pl_errmsg());
    char deep[200];
    memset(deep, '(', 65);
    deep[65] = 'a';
    memset(deep + 66, ')', 65);
    deep[131] = 0;
    pattern_refused(deep, "nest deeper");
    cr_expect_eq(pattern_on("^a{1,999}$", "aaa"), PL_OK);
    /* an empty group repeated, first in the pattern (once a null pointer
     * plus an offset, undefined behaviour) */
    cr_expect_eq(pattern_on("()*%", "%"), PL_OK);
    cr_expect_eq(pattern_on("^(){3}(|a)+$", ""), PL_OK);
}

/* What glibc's regexec() took seconds and gigabytes on (its cached states
 * multiply: "((a|b)*a.{30})*c" 54 s over 16 KB, "^.*(a.{100}c)" 15 s over
 * 100 KB): every thread of the program now runs in step over the string,
 * its work counted; past the budget, PL_ELIMIT naming the pattern. */
Test(schema_regex, matching_is_bounded_by_the_budget)
{
    size_t n = 256u << 10;
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = "ab"[(i * 2654435761u >> 7) & 1];
    s[n] = 0;
    cr_expect_eq(pattern_on("((a|b)*a.{30})*c", s), PL_EJSON, "%s",
                 pl_errmsg());
    cr_expect_eq(pattern_on("^.*(a.{100}c)", s), PL_EJSON, "%s", pl_errmsg());
    cr_expect_eq(pattern_on("(a|aa)*b", s), PL_OK); /* "ab" is in it */
    cr_expect_eq(pattern_on("(a|aa)*c", s), PL_EJSON);
    memset(s, 'a', n);
    cr_expect_eq(pattern_on(".{1,1000}c", s), PL_ELIMIT);
    cr_expect(strstr(pl_errmsg(), ".{1,1000}c") != NULL, "%s", pl_errmsg());
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Characters, not bytes: a pattern is ECMA-262 over the string's code      */
/* points, as JSON Schema means it                                          */
/* ------------------------------------------------------------------------ */

/* Once "." and the complements took one byte: "^.$" refused "é" (2 bytes)
 * and "^.{1,3}$" refused "日本語" (9). */
Test(schema_regex, dot_takes_one_code_point)
{
    ON("^.$", true, "é", "日", "😀", "x");
    ON("^.{1,3}$", true, "日本語", "é", "a😀b");
    ON("^.{3}$", true, "é€😀", "日本語");
    ON("^.{3}$", false, "é€", "日本語x", "éé");
    ON("^.{2}$", false, "é", "😀", "日");
    /* ECMA's line terminators are no "." (\n \r U+2028 U+2029) */
    ON("^a.b$", false, "a\nb", "a\rb", "a\u2028b", "a\u2029b");
    ON("^a.b$", true, "a\u2027b", "a\u202ab",
       "a\xc2\x85"
       "b");
    ON("^[^]$", true, "\u2028", "😀", "\n");
}

/* Once "[^a]" took a byte, "^[^x]+$" refused nothing it should have (each
 * byte of "ï" is no x) but "[^é]" took "è" apart and "^[^a]$" refused
 * "é": 2 bytes, two characters. */
Test(schema_regex, complements_take_one_code_point)
{
    ON("^[^x]+$", true, "naïve", "日本語");
    ON("^[^a]$", true, "é", "😀");
    ON("^[^é]$", true, "è", "e", "ã");
    ON("^[^é]$", false, "é", "ée");
    ON("^[^à-ÿ]+$", true, "abcĀ", "日本");
    ON("^[^à-ÿ]+$", false, "aéb", "ÿ");
    ON("^\\S$", true, "é", "😀");
    ON("^\\W$", true, "é", "日", "-");
    ON("^\\W$", false, "a", "_", "9");
    ON("^\\D$", true, "日", "٣"); /* \d is ASCII's digits alone */
    ON("^\\w$", false, "é", "日", "٣");
    /* ECMA's \s: Unicode's spaces and line terminators too */
    ON("^\\s$", true, " ", "\t", "\u00a0", "\u2003", "\u3000", "\ufeff",
       "\u2028");
    ON("^\\s$", false, "é", "\u200b", "x");
    ON("^\\S$", false, "\u00a0", "\u3000");
    ON("^[^\\s]$", true, "é");
    ON("^[\\S]$", false, "\u2003");
}

/* Once "é+" repeated its last byte ("é" is \xc3\xa9): "ééé" was refused
 * and "é\xa9\xa9" taken. */
Test(schema_regex, a_multibyte_character_is_one_atom)
{
    ON("^é+$", true, "é", "ééé");
    ON("^é{2}$", true, "éé");
    ON("^é{2}$", false, "é", "ééé");
    ON("^(é)?x$", true, "x", "éx");
    ON("^é?x$", true, "x", "éx");
    ON("^é?x$", false, "èx");
    ON("^日本{2}$", true, "日本本");
    ON("^日本{2}$", false, "日本日本");
    ON("^(日本){2}$", true, "日本日本");
    ON("^😀*$", true, "", "😀😀😀");
    ON("^😀*$", false, "😀😁");
    ON("^a|é$", true, "ab", "xé");
}

/* Once "[é]" was the class of its two bytes and "[à-ÿ]" the bytes \xc3,
 * \xa0-\xc3 and \xbf: "^[é]$" refused "é", "[à-ÿ]" took "Ā" apart. */
Test(schema_regex, class_members_and_ranges_are_code_points)
{
    ON("^[é]$", true, "é");
    ON("^[é]$", false, "ã", "è", "éé");
    ON("^[àé]+$", true, "éàé");
    ON("^[à-ÿ]+$", true, "éàÿ", "ñ");
    ON("^[à-ÿ]+$", false, "Ā", "ß", "a");
    ON("^[a-zà-ÿ]+$", true, "façade");
    ON("^[😀-😂]$", true, "😀", "😁", "😂");
    ON("^[😀-😂]$", false, "😃", "🙂");
    ON("^[\\u00e0-\\u00ff]+$", true, "éàÿ");
    ON("^[\\u00e0-\\u00ff]+$", false, "Ā");
    ON("^\\u00e9$", true, "é");
    ON("^\\u00E9\\x41$", true, "éA");
    ON("^[\\x41-\\x43]+$", true, "ABC");
    ON("^[\\x41-\\x43]+$", false, "D");
    ON("^\\é$", true, "é"); /* an identity escape */
    /* a surrogate pair's escapes are its code point; a lone surrogate is
     * none (no string holds one) */
    ON("^\\ud83d\\ude00$", true, "😀");
    ON("^[\\ud83d\\ude00-\\ud83d\\ude02]$", true, "😁");
    ON("^[\\ud800-\\udfff]", false, "😀", "\ud7ff", "\ue000");
    pattern_refused("[é-a]", "out of order");
    pattern_refused("\\u{1F600}", "\\u");
    pattern_refused("\\u00e", "\\u");
    pattern_refused("\\x4", "\\x");
    pattern_refused("[\\x4g]", "\\x");
}

/* {"maxLength": @p max} on the bytes @p str: PL_OK or PL_EJSON. */
static int max_length_on(int max, const char *str)
{
    cJSON *sch = cJSON_CreateObject();
    cr_assert(sch && cJSON_AddNumberToObject(sch, "maxLength", max));
    return schema_on(sch, "maxLength", str);
}

/* cJSON keeps a string's bytes as they came (cJSON_Parse does not check
 * UTF-8; cJSON_CreateString takes any), so a string may hold bytes that
 * are no UTF-8: each such byte is one character that nothing but itself
 * in the string's length counts, and no class, "." or "[^]" takes. */
Test(schema_regex, bytes_that_are_no_utf8_are_taken_by_no_class)
{
    cr_expect_eq(max_length_on(2, "\x80\x80\x80"), PL_EJSON,
                 "three bytes that are no UTF-8 are three characters");
    cr_expect_eq(max_length_on(1, "\xc3\xa9\xff"), PL_EJSON);
    cr_expect_eq(max_length_on(2, "\xc3\xa9\xff"), PL_OK);
    cr_expect_eq(max_length_on(2, "\xc3\xa9\xe6\x97\xa5"), PL_OK);
    cr_expect_eq(max_length_on(1, "\xe6\x97"), PL_EJSON);
    ON("^a.b$", false,
       "a\xff"
       "b",
       "a\x80"
       "b",
       "a\xc3"
       "b",
       "a\xed\xa0\x80"
       "b");
    ON("^a[^x]b$", false,
       "a\xff"
       "b",
       "a\xc0\xaf"
       "b");
    ON("^a[^]+b$", false,
       "a\xf4\x90\x80\x80"
       "b",
       "a\xe6\x97"
       "b");
    ON("^a\\Wb$", false,
       "a\xfe"
       "b");
    ON("^.*$", false, "\xe6\x97", "\xc3", "ok\x80");
    ON("a", true,
       "\xff"
       "a\xff",
       "\xc3"
       "a");
    ON("^\\xff$", false, "\xff"); /* \xff is U+00FF, "ÿ" */
    ON("^\\xff$", true, "ÿ");
    /* a sequence cut short is its lead byte, and what follows is read */
    ON("aé$", true,
       "\xc3"
       "aé",
       "\xe6\x97"
       "aé",
       "\xf0\x9f"
       "aé");
    pattern_refused("^\xc3$", "UTF-8"); /* a pattern must be UTF-8 */
    pattern_refused("[a-\xff]", "UTF-8");
}

/* @p n copies of the character @p ch, to free. */
static char *repeated(const char *ch, size_t n)
{
    size_t w = strlen(ch);
    char *s = malloc(w * n + 1);
    cr_assert_not_null(s);
    for (size_t i = 0; i < n; i++)
        memcpy(s + w * i, ch, w);
    s[w * n] = 0;
    return s;
}

/* A class of many ranges past ASCII is one instruction: repeated, it is
 * held to the program's bound; matched, to the work budget, PL_ELIMIT
 * naming the pattern, whatever the characters. */
Test(schema_regex, non_ascii_classes_keep_the_bounds)
{
    /* 60 ranges, each two code points of 2 to 4 bytes */
    char cls[1024] = "[^";
    static const unsigned bases[] = {0xe0, 0x100, 0x3b1, 0x4e00, 0x1f600};
    size_t at = 2;
    for (size_t k = 0; k < 60; k++) {
        unsigned lo = bases[k % 5] + (unsigned)(k / 5) * 4;
        for (unsigned c = lo; c <= lo + 1; c++) {
            if (c < 0x800) {
                cls[at++] = (char)(0xc0 | c >> 6);
            } else if (c < 0x10000) {
                cls[at++] = (char)(0xe0 | c >> 12);
                cls[at++] = (char)(0x80 | (c >> 6 & 0x3f));
            } else {
                cls[at++] = (char)(0xf0 | c >> 18);
                cls[at++] = (char)(0x80 | (c >> 12 & 0x3f));
                cls[at++] = (char)(0x80 | (c >> 6 & 0x3f));
            }
            cls[at++] = (char)(0x80 | (c & 0x3f));
            if (c == lo)
                cls[at++] = '-';
        }
    }
    cls[at++] = ']';
    cls[at] = 0;
    char pat[1100];
    snprintf(pat, sizeof pat, "%s{5000}", cls);
    pattern_refused(pat, "more than 4000 instructions");
    snprintf(pat, sizeof pat, "(%s{1,100}){1,100}", cls);
    pattern_refused(pat, "more than 4000 instructions");
    snprintf(pat, sizeof pat, "^%s{3}$", cls);
    ON(pat, true, "xyz", "日本語", "âæê");
    ON(pat, false, "àxy", "xyα", "一ab", "😀ab", "xy");
    /* 200,000 "ж" (2 bytes each): each position starts a thread the
     * 1000 copies carry on, past the budget */
    snprintf(pat, sizeof pat, "%s{1,1000}!", cls);
    char *s = repeated("ж", 200000);
    cr_expect_eq(pattern_on(pat, s), PL_ELIMIT, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "units of work matching the pattern \"[^") !=
                  NULL,
              "%s", pl_errmsg());
    /* short, it matches, or not, as any string */
    s[2 * 1000] = 0;
    cr_expect_eq(pattern_on(pat, s), PL_EJSON);
    memcpy(s + 2 * 1000, "!", 2);
    cr_expect_eq(pattern_on(pat, s), PL_OK);
    free(s);
}

/* A message quotes at most 80 bytes of a pattern: whole characters, and
 * none of a byte that is no UTF-8 (once "%.80s" cut "é" in two). */
Test(schema_regex, messages_quote_whole_characters)
{
    char pat[256], want[256];
    char *e50 = repeated("é", 50), *e40 = repeated("é", 40);
    char *e39 = repeated("é", 39), *e38 = repeated("é", 38);
    snprintf(pat, sizeof pat, "a%s(", e50);
    /* 1 + 39 * 2 = 79 bytes; one more character is 81 */
    snprintf(want, sizeof want, "pattern \"a%s\": a ( is not closed", e39);
    pattern_refused(pat, want);
    pattern_refused("ab\xff"
                    "c",
                    "pattern \"ab\": the pattern is not UTF-8");
    pattern_refused("ab\xc3", "pattern \"ab\": the pattern is not UTF-8");
    /* past the budget: 3 + 38 * 2 = 79 bytes quoted */
    snprintf(pat, sizeof pat, "(x|%s)?é{1,1000}!", e40);
    snprintf(want, sizeof want, "the pattern \"(x|%s\" (a long string", e38);
    char *s = repeated("é", 200000);
    cr_expect_eq(pattern_on(pat, s), PL_ELIMIT, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), want) != NULL, "want %s in: %s", want,
              pl_errmsg());
    free(s);
    free(e50);
    free(e40);
    free(e39);
    free(e38);
}
