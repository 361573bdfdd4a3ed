/*
 * schema.h -- the JSON Schema validator (draft 7), compiled once, run many
 * times: schema_compile.c compiles, schema_eval.c validates.
 *
 * A compiled schema is a private copy of the schema's JSON plus a side
 * table, keyed by node address, holding what compiling worked out once: the
 * program of every "pattern" and "patternProperties" key, and the target
 * of every "$ref".  Validation walks the schema JSON with that table.
 *
 * Keywords (draft 7 semantics; unknown keywords are ignored, as the draft
 * says):
 *
 *   any       type enum const allOf anyOf oneOf not if/then/else $ref
 *             definitions $defs (reference targets)
 *   numbers   multipleOf maximum exclusiveMaximum minimum exclusiveMinimum
 *   strings   maxLength minLength (code points) pattern
 *   arrays    items (a schema, or an array: a tuple, but for a root
 *             "$schema" naming 2020-12, where it is refused) additionalItems
 *             prefixItems (2020-12: when present, "items" applies past the
 *             prefix) maxItems minItems uniqueItems contains
 *             minContains maxContains (2020-12: with "contains", how many
 *             items match; minContains 0 takes an array with none)
 *   objects   maxProperties minProperties required properties
 *             patternProperties additionalProperties propertyNames
 *             dependencies dependentRequired dependentSchemas
 *
 * "$ref" is "#" or "#/json/pointer" into the same document (percent- and
 * ~-escapes decoded); as in draft 7 its sibling keywords are ignored,
 * unless the root's "$schema" names draft 2019-09 or 2020-12, where they
 * apply.  No remote references, no "format" assertions.
 *
 * Refused at compile time (PL_EINVAL naming the keyword and where), since
 * ignoring them would pass what the schema refuses: unevaluatedProperties
 * unevaluatedItems $dynamicRef $dynamicAnchor $recursiveRef
 * $recursiveAnchor $anchor, and "$id" below the root (it would move the
 * base its "$ref"s resolve against); a known keyword whose value has the
 * wrong type; a "type" array that is empty.
 *
 * Patterns are ECMA-262 syntax, compiled and matched here
 * (schema_regex.c), anywhere in the string as ECMA-262 "test" does: every
 * thread of the compiled program runs in step over the string (no
 * backtracking), so a match costs at most the string's length times the
 * program's, counted in the validation's work.
 *
 * Characters are code points, as JSON Schema means a string's characters
 * (and most validators take them): the pattern and the string are read as
 * UTF-8, so "." takes one character of 1 to 4 bytes ("^.{1,3}$" takes
 * "日本語"), a multi-byte character is one atom ("é+", "é{2}"), classes
 * and ranges hold code points ("[à-ÿ]", "[^é]"), and U+1F600 is one
 * character where ECMA-262 without the u flag would see two UTF-16 units.
 * Escapes are ECMA-262's without the u flag (JSON Schema patterns have no
 * flags): \d and \w are ASCII's digits and word characters; \s is ECMA's
 * WhiteSpace and LineTerminator (\t \n \v \f \r, space, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF); \D \W
 * \S and "[^...]" are every other code point; "." is any but the line
 * terminators \n \r U+2028 U+2029; \xHH and \uHHHH are that code point,
 * and a surrogate pair's two \u escapes the one code point they encode (a
 * lone surrogate matches nothing: no string holds one); any other escaped
 * character is itself; a brace that is no quantifier is itself.
 *
 * A string's bytes are not checked as UTF-8 before (cJSON keeps what it is
 * given), so a byte that begins no well-formed UTF-8 sequence (a stray
 * continuation byte, a sequence cut short, an overlong form, a surrogate,
 * past U+10FFFF) is read as one character, PL__RX_BAD, that no class, "."
 * or "[^]" takes: "^.*$" refuses such a string, an unanchored "a" still
 * finds the "a" beside it, and a bad byte never helps a match.  minLength
 * and maxLength count such a byte as one character (pl__utf8_next reads
 * for both).
 *
 * Dialect differences: no lookaround, no lazy quantifiers, no \p{...}
 * classes, no backreferences, no \b \c \k, no \u{...} (it needs the u
 * flag: \x takes 2 hex digits, \u 4), refused at compile time.  Refused
 * too: a pattern that is not UTF-8, unbalanced groups, a quantifier with
 * nothing to repeat (first, or after another: "a++"), groups nested
 * deeper than PL__RX_MAX_NEST, and a program longer than
 * PL__RX_MAX_PROGRAM once repetitions are copied out ("a{1,5000}", or a
 * pattern of 5000 characters; a class is one instruction however many
 * ranges it holds).  A refused
 * pattern makes the schema PL_EINVAL at compile time, naming where.
 *
 * Bounds on hostile input: the schema nests at most PL_SCHEMA_MAX_DEPTH
 * JSON levels; evaluation recurses at most PL_SCHEMA_MAX_DEPTH schemas deep
 * (so a "$ref" cycle ends with PL_ELIMIT, never a stack overflow), and one
 * validation does at most PL_SCHEMA_MAX_WORK units of work (a schema
 * applied, a value compared, 16 steps of a pattern's match, 16 members
 * scanned to look a name up), so nested
 * anyOf/oneOf references cannot blow up exponentially.
 */
#ifndef PL_SCHEMA_H
#define PL_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ext.h"

/* ---- patterns (schema_regex.c) ------------------------------------------ */

/* Bounds on a pattern: its program (repetitions copied out: "a{3}" is three
 * "a"s) and its groups' nesting. */
#define PL__RX_MAX_PROGRAM 4000
#define PL__RX_MAX_NEST 64

typedef struct pl__rx pl__rx;

/* What a byte that begins no well-formed UTF-8 sequence reads as: a
 * character of its own that no class takes. */
#define PL__RX_BAD 0x110000u

/* The character at @p s (not its end): its code point in *cp, its length
 * in bytes returned.  Well-formed is Unicode's: shortest form, no
 * surrogates, at most U+10FFFF; else the first byte alone is a character,
 * PL__RX_BAD, and the next begins after it. */
static inline size_t pl__utf8_next(const char *s, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t c = p[0], min;
    size_t n;
    *cp = c;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, c &= 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, c &= 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, c &= 0x07, min = 0x10000;
    else
        n = 0, min = 0;
    for (size_t k = 1; k < n; k++) { /* a NUL ends it: no continuation */
        if ((p[k] & 0xC0) != 0x80) {
            n = 0;
            break;
        }
        c = c << 6 | (p[k] & 0x3F);
    }
    if (!n || c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        *cp = PL__RX_BAD;
        return 1;
    }
    *cp = c;
    return n;
}

/* How many bytes of @p s to quote in a message: at most @p max, ending
 * before a character cut short or a byte that is no UTF-8. */
static inline int pl__utf8_cut(const char *s, int max)
{
    int n = 0;
    while (s[n]) {
        uint32_t c;
        int w = (int)pl__utf8_next(s + n, &c);
        if (c == PL__RX_BAD || n + w > max)
            break;
        n += w;
    }
    return n;
}

/* Compile an ECMA-262 pattern; NULL with *bad saying why it is refused, or
 * NULL with *bad NULL when out of memory. */
PL__EXT_HIDDEN pl__rx *pl__rx_compile(const char *pattern, const char **bad);
PL__EXT_HIDDEN void pl__rx_free(pl__rx *rx);

/* Does @p rx match anywhere in @p str?  1 yes, 0 no, -1 when the work it
 * takes passes *budget (units of 16 steps of a thread), -2 out of memory.
 * What it took is taken from *budget. */
PL__EXT_HIDDEN int pl__rx_match(const pl__rx *rx, const char *str,
                                uint64_t *budget);

/* ---- the side table: node address -> what compiling found --------------- */

typedef struct pl__schema_aux {
    const cJSON *node;   /* a schema, a "pattern" value, a "$ref" value */
    pl__rx *re;          /* compiled pattern, or NULL */
    const cJSON *target; /* the schema a "$ref" names, or NULL */
    bool checked;        /* a schema node compiled already */
} pl__schema_aux;

struct pl_schema {
    cJSON *root;
    pl__schema_aux
        *slots; /* open addressing, power of two, at most half full */
    size_t n_slots, n;
    bool ref_siblings; /* "$schema" 2019-09 or 2020-12: beside "$ref", the
                        * other keywords apply too */
    bool draft2020;    /* "$schema" 2020-12: "items" is never a tuple */
};

/* The side table's entry for @p node, or NULL. */
PL__EXT_HIDDEN pl__schema_aux *pl__schema_aux_find(const pl_schema *s,
                                                   const cJSON *node);

#endif /* PL_SCHEMA_H */
