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
 * Regular expressions are POSIX extended (regcomp REG_EXTENDED), matched
 * anywhere in the string as ECMA-262 "test" does, after a translation
 * (schema_compile.c) that reads the pattern as ECMA-262 does: each class
 * ("[...]", \d \D \w \W \s \S, inside brackets too) becomes the set of
 * bytes it names, written as a POSIX bracket that names exactly that set
 * ("[a\-z]" is a, - and z; "[[:alpha:]]" is ECMA's class of "[:alph"
 * followed by "]"), an escaped character is itself ("\<" is "<", not
 * GNU's word start), a brace that is no quantifier is itself, and the
 * groups must balance.  Dialect differences: no lookaround, no lazy
 * quantifiers, no \p{...} classes, no backreferences (refused at compile
 * time: they make matching exponential), and matching is by byte (a "."
 * matches one byte of a multi-byte character).  Refused too, before
 * regcomp sees them: a quantifier with nothing to repeat (first, or after
 * another: "a++"), groups nested deeper than 64, and repetitions that copy
 * out to more than 1000 atoms (glibc copies a repeated group once per
 * repetition and once more for a "+": "a{1,32767}" or "(((a+)+)+)..." took
 * seconds and gigabytes in regcomp).  A pattern regcomp refuses makes the
 * schema PL_EINVAL at compile time, naming where.
 *
 * Bounds on hostile input: the schema nests at most PL_SCHEMA_MAX_DEPTH
 * JSON levels; evaluation recurses at most PL_SCHEMA_MAX_DEPTH schemas deep
 * (so a "$ref" cycle ends with PL_ELIMIT, never a stack overflow), and one
 * validation does at most PL_SCHEMA_MAX_WORK units of work (a schema
 * applied, a value compared, 64 bytes of a string matched), so nested
 * anyOf/oneOf references cannot blow up exponentially.
 */
#ifndef PL_SCHEMA_H
#define PL_SCHEMA_H

#include <regex.h>
#include <stdbool.h>

#include "ext.h"

/* ---- the side table: node address -> what compiling found --------------- */

typedef struct pl__schema_aux {
    const cJSON *node;   /* a schema, a "pattern" value, a "$ref" value */
    regex_t *re;         /* compiled pattern, or NULL */
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
