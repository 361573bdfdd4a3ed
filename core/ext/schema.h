/*
 * schema.h -- the JSON Schema validator (draft 7), compiled once, run many
 * times: schema_compile.c compiles, schema_eval.c validates.
 *
 * A compiled schema is a private copy of the schema's JSON plus a side
 * table, keyed by node address, holding what compiling worked out once: the
 * POSIX regex of every "pattern" and "patternProperties" key, and the target
 * of every "$ref".  Validation walks the schema JSON with that table.
 *
 * Keywords (draft 7 semantics; unknown keywords are ignored, as the draft
 * says):
 *
 *   any       type enum const allOf anyOf oneOf not if/then/else $ref
 *             definitions $defs (reference targets)
 *   numbers   multipleOf maximum exclusiveMaximum minimum exclusiveMinimum
 *   strings   maxLength minLength (code points) pattern
 *   arrays    items (a schema, or an array: a tuple) additionalItems
 *             prefixItems (2020-12: when present, "items" applies past the
 *             prefix) maxItems minItems uniqueItems contains
 *   objects   maxProperties minProperties required properties
 *             patternProperties additionalProperties propertyNames
 *             dependencies dependentRequired dependentSchemas
 *
 * "$ref" is "#" or "#/json/pointer" into the same document (percent- and
 * ~-escapes decoded); as in draft 7 its sibling keywords are ignored.  No
 * "$id" resolution, no remote references, no "format" assertions.
 *
 * Patterns are ECMA-262 syntax, compiled and matched here
 * (schema_regex.c), anywhere in the string as ECMA-262 "test" does: every
 * thread of the compiled program runs in step over the string (no
 * backtracking), so a match costs at most the string's length times the
 * program's, counted in the validation's work.  Classes ("[...]", \d \D
 * \w \W \s \S, inside brackets too) are sets of bytes; an escaped
 * character is itself; a brace that is no quantifier is itself; "." is any
 * byte but \n and \r.  Dialect differences: no lookaround, no lazy
 * quantifiers, no \p{...} classes, no backreferences, no \b \u \x \c
 * (refused at compile time), and matching is by byte (a "." matches one
 * byte of a multi-byte character).  Refused too: unbalanced groups, a
 * quantifier with nothing to repeat (first, or after another: "a++"),
 * groups nested deeper than PL__RX_MAX_NEST, and a program longer than
 * PL__RX_MAX_PROGRAM once repetitions are copied out ("a{1,5000}").  A
 * refused pattern makes the schema PL_EINVAL at compile time, naming where.
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
#include <stdint.h>

#include "ext.h"

/* ---- patterns (schema_regex.c) ------------------------------------------ */

/* Bounds on a pattern: its program (repetitions copied out: "a{3}" is three
 * "a"s) and its groups' nesting. */
#define PL__RX_MAX_PROGRAM 4000
#define PL__RX_MAX_NEST 64

typedef struct pl__rx pl__rx;

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
};

/* The side table's entry for @p node, or NULL. */
PL__EXT_HIDDEN pl__schema_aux *pl__schema_aux_find(const pl_schema *s,
                                                   const cJSON *node);

#endif /* PL_SCHEMA_H */
