/*
 * policyledger/json.h -- building and reading JSON in one call, and JSON Schema.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_JSON_H
#define POLICYLEDGER_JSON_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/json.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Building and reading JSON                                                */
/* ------------------------------------------------------------------------ */

/*
 * Build or read a small JSON value in one call, from a format string in the
 * manner of jansson's json_pack() and json_unpack().  A format describes one
 * value; whitespace, ':' and ',' are ignored, so "{s:i, s:[ss]}" and
 * "{si s[ss]}" are the same format.
 *
 *   letter  pack: argument           unpack: argument         unpack accepts
 *   {...}   (none): an object        (none)                   an object
 *   [...]   (none): an array         (none)                   an array
 *   s       const char *, copied     const char **, borrowed  a string
 *   n       (none): null             (none)                   null
 *   b       int, non-zero is true    bool *                   true or false
 *   i       int                      int *                    an integral
 *                                                             number that
 *                                                             fits in int
 *   I       int64_t, |v| <= 2^53     int64_t *                an integral
 *                                                             number,
 *                                                             |v| <= 2^53
 *   f       double, finite           double *                 any number
 *   o       cJSON *, taken over      const cJSON **, borrowed any value
 *   O       const cJSON *, copied    cJSON **, a copy: free   any value
 *                                    it with cJSON_Delete()
 *
 * Inside {...} each member is a key, the letter 's' whose argument is the
 * key (a const char *, never NULL), then the key's value: pack "{s:i}" takes
 * ("n", 42), unpack "{s:i}" takes ("n", &n).  The items of [...] are
 * positional.
 * Arguments are read as the types above, so pass exactly those: 1.0, not 1,
 * for 'f'; (int64_t)1 for 'I'.
 *
 * Pack only:
 *   s? o? O?  a NULL argument builds null.
 *   s* o* O*  a NULL argument builds nothing: the array has no such item,
 *             the object no such member.  Only inside {...} or [...].
 *   A key given twice keeps its last value.
 *
 * Unpack only:
 *   {s?...}   the key is optional: when it is missing, the value's arguments
 *             are read but nothing is stored, so its variables keep what
 *             they held.  Present with the wrong type, it is an error.
 *   !         right before } or ]: strict, the object may have no key, the
 *             array no item, that the format does not read.  Without it
 *             (or with '*' there) those are ignored.
 *   Keys match case-sensitively; of two members with one key, the first.
 *
 * A format nests at most PL_MAX_JSON_DEPTH objects and arrays deep.
 *
 * Every failure sets a one-line message (pl_errmsg()) naming the failing
 * value by its path, from "$" (the whole value) through ".key", ["odd key"]
 * and "[index]", and what was expected or wrong:
 *   unpack: $.items[2].name: missing key
 *   unpack: $.sum: expected a number, got a string
 *   pack: $.a: non-finite number (inf)
 * A malformed format names the offset of the fault instead:
 *   pack: format "{s:x}", offset 3: expected a value, got 'x'
 */

/**
 * Build a JSON value from a format and the arguments after it (see above):
 * `pl_json_pack(&v, "{s:s, s:[ii]}", "name", name, "xy", x, y)`.
 * @param[out] out the value; caller owns, free with cJSON_Delete().  NULL
 *             on failure.
 * @param fmt  the format of one value.
 * @return PL_OK; PL_EINVAL (NULL @p out or @p fmt, a malformed format, a
 *         NULL key, a NULL argument for 's', 'o' or 'O' without '?' or
 *         '*'); PL_ELIMIT (the format nests deeper than PL_MAX_JSON_DEPTH);
 *         PL_EJSON (an 'f' argument that is not finite, an 'I' argument
 *         past 2^53 in magnitude); PL_ENOMEM.
 * @note Every 'o' argument is taken over, on failure as on success: a failed
 *       call frees them (a NULL @p out included), and nothing else leaks.
 *       Only a NULL, malformed or too deep @p fmt is found before any
 *       argument is read; then the caller still owns its 'o' arguments.
 */
int pl_json_pack(cJSON **out, const char *fmt, ...);

/**
 * pl_json_pack() with a va_list.  @p ap is read through a copy, so the
 * caller may use it again; va_end() it as usual.
 */
int pl_json_vpack(cJSON **out, const char *fmt, va_list ap);

/**
 * Read a JSON value against a format, storing what it reads into the
 * variables the arguments after the format point to (see above):
 * `pl_json_unpack(v, "{s:s, s?i !}", "name", &name, "age", &age)`.
 * @param json the value to read; borrowed.  The strings ('s') and values
 *             ('o') stored are borrowed from it: valid as long as it is,
 *             and unchanged.
 * @param fmt  the format of one value.
 * @return PL_OK; PL_EINVAL (NULL @p json or @p fmt, a malformed format, a
 *         NULL key or NULL pointer argument); PL_ELIMIT (the format nests
 *         deeper than PL_MAX_JSON_DEPTH); PL_EJSON (@p json does not match
 *         the format: a missing key or item, a value of another type, a
 *         number that is not integral or does not fit for 'i' or 'I', a key
 *         or item more than a strict format reads); PL_ENOMEM (copying for
 *         'O').
 * @note On failure the variables may be partly set: those of values read
 *       before the failing one.  The copies 'O' made are freed on failure
 *       and their variables set back to NULL, so the caller owns copies
 *       only after PL_OK.
 */
int pl_json_unpack(const cJSON *json, const char *fmt, ...);

/**
 * pl_json_unpack() with a va_list.  @p ap is read through a copy, so the
 * caller may use it again; va_end() it as usual.
 */
int pl_json_vunpack(const cJSON *json, const char *fmt, va_list ap);

/**
 * Build an object with pl_json_pack() and append it to @p steps as an
 * `action_result` (pl_steps_add_result()):
 * `pl_steps_add_resultf(out, "{s:i}", "sum", a + b)`.
 * @return as pl_json_pack() and pl_steps_add(); PL_EJSON also when the
 *         format builds something other than an object (e.g. "[i]").
 * @note 'o' arguments are taken over as by pl_json_pack(), also when
 *       appending fails.
 */
int pl_steps_add_resultf(pl_steps *steps, const char *fmt, ...);

/**
 * pl_ctx_invoke() with a payload packed from @p fmt and its arguments, as
 * pl_json_pack() does: `pl_ctx_invokef(&r, ctx, "add", "{s:f, s:f}",
 * "a", 1.0, "b", 2.0)`.
 * @return as pl_json_pack() (the format or an argument is bad: nothing was
 *         called and the run goes on), PL_EJSON also when the format builds
 *         something other than an object; otherwise as pl_ctx_invoke().
 * @note 'o' arguments are taken over as by pl_json_pack().
 */
int pl_ctx_invokef(cJSON **out, pl_ctx *ctx, const char *policy,
                   const char *fmt, ...);

/**
 * cJSON_Print() (@p formatted) or cJSON_PrintUnformatted() whose numbers
 * read back as the values they print.  cJSON prints 15 significant digits
 * whenever they read back within a relative 2^-52 of the number, so
 * 9007199254740991 prints as 9.00719925474099e+15 and 0.1 + 0.2 as 0.3:
 * other numbers.  Here such a number is printed with 17 digits
 * (9007199254740991, 0.30000000000000004); every other byte is cJSON's.
 * The tools, and the MCP policies' requests, print with it.
 * @return the text; caller owns, free with cJSON_free().  NULL when
 *         @p json is NULL or memory ran out.
 */
char *pl_json_print(const cJSON *json, bool formatted);

/**
 * Parse @p len bytes of JSON text into @p out as cJSON_ParseWithLength()
 * does, refusing what cJSON would take and silently change.  cJSON's
 * strings are C strings: a string holding the escape \u0000 (or a raw NUL
 * byte) would end there, the rest of it lost, and the value read as if
 * whole.  Such a string is refused, the message naming it by its JSON
 * pointer ('/choices/0/message/content') and its byte; so is a key
 * holding one.  So is an object with a name twice (cJSON reads the first,
 * most readers the last), named by its pointer too.  Nothing may follow
 * the value but white space.  The
 * library reads every JSON text that comes from outside with it: models'
 * answers, MCP servers' messages, imported runs, the tools' payloads,
 * ledger-web's request bodies.
 * @param[out] out  the value; caller owns, free with cJSON_Delete().  NULL
 *                  on failure.
 * @param[in] text  @p len bytes, which need not end in a NUL
 * @return PL_OK; PL_EJSON (not one JSON value, a string or key holding
 *         a NUL, or a name twice: the message says which and where, without a prefix, for
 *         the caller to add what the text was); PL_ENOMEM (cJSON's
 *         allocations too: JSON text cJSON could not read for want of
 *         memory is never PL_EJSON); PL_EINVAL (a NULL argument).
 */
int pl_json_parse(cJSON **out, const char *text, size_t len);

/* ------------------------------------------------------------------------ */
/* JSON Schema                                                              */
/* ------------------------------------------------------------------------ */

/*
 * A JSON Schema validator with draft 7 semantics, checked against the
 * official JSON-Schema-Test-Suite (docs/guide.md gives the pass count and
 * the files run).  Keywords: type enum const multipleOf maximum exclusiveMaximum
 * minimum exclusiveMinimum maxLength minLength (in code points) pattern
 * items additionalItems maxItems minItems uniqueItems contains
 * maxProperties minProperties required properties patternProperties
 * additionalProperties propertyNames dependencies allOf anyOf oneOf not
 * if/then/else, boolean schemas, "$ref" to "#" or "#/json/pointer" in the
 * same document (definitions, $defs, ...; as in draft 7 a "$ref" ignores
 * its siblings, unless the root's "$schema" names draft 2019-09 or
 * 2020-12, where they apply), and from draft 2020-12 prefixItems (when
 * present, "items" applies past the prefix), dependentRequired,
 * dependentSchemas, minContains and maxContains.  An unknown keyword is an
 * annotation and ignored (title, default, x-...); "format" is not
 * asserted.  Refused when compiling, rather than ignored, since ignoring
 * them would let through what the schema refuses: unevaluatedProperties,
 * unevaluatedItems, $dynamicRef, $dynamicAnchor, $recursiveRef,
 * $recursiveAnchor, $anchor, "$id" anywhere but the root, a "$ref" that is
 * not "#..." (remote references), a known keyword whose value has the
 * wrong type, and an "items" array (draft 7's tuple) beside "prefixItems"
 * or under a root "$schema" naming draft 2020-12, where "items" is one
 * schema and a tuple is "prefixItems".
 *
 * "pattern" and "patternProperties" are ECMA-262 regular expressions,
 * unanchored, matched without backtracking (in time linear in the
 * string's length, within the work bound below), over the string's
 * characters (code points of its UTF-8: "." takes a character of two to
 * four bytes whole; a byte that is not UTF-8 is a character no class
 * takes).  Refused when
 * compiling: lookaround, lazy quantifiers, backreferences, \p{..}, \c, \k,
 * \b and \u{..} escapes, a pattern that is not UTF-8, unbalanced groups, a
 * quantifier with nothing to repeat ("a++"), groups nested deeper than
 * 64, and a pattern that compiles to more than 4000 instructions (a
 * character or class is one, a repetition copies out what it repeats:
 * "a{1,5000}", or 5000 characters).
 *
 * Bounds: a schema nests at most PL_SCHEMA_MAX_DEPTH JSON levels;
 * validation applies schemas at most PL_SCHEMA_MAX_DEPTH deep (a "$ref"
 * cycle ends there) and does at most PL_SCHEMA_MAX_WORK units of work
 * (a schema applied, a value compared, 16 steps of a pattern's match,
 * 16 members scanned to look a name up): PL_ELIMIT past either.  Numbers are compared as doubles.
 */

#define PL_SCHEMA_MAX_DEPTH 128        /**< see above */
#define PL_SCHEMA_MAX_WORK 10000000ULL /**< see above */
#define PL_SCHEMA_PATH_MAX 256         /**< pl_schema_error.path, NUL included */

/** A compiled JSON Schema.  Opaque; immutable, so thread-safe to share. */
typedef struct pl_schema pl_schema;

#define PL_SCHEMA_ERROR_VERSION 1

/** The first reason an instance does not match a schema.  Initialise with
 *  PL_SCHEMA_ERROR_INIT. */
typedef struct pl_schema_error {
    unsigned version;              /**< PL_SCHEMA_ERROR_VERSION */
    char path[PL_SCHEMA_PATH_MAX]; /**< JSON pointer to the failing value in
                                        the instance, "" for the whole;
                                        truncated if longer */
    char keyword[32];              /**< the keyword that failed, e.g.
                                        "required"; "false" for a false
                                        schema */
    char message[256];             /**< what failed, in words */
} pl_schema_error;

#define PL_SCHEMA_ERROR_INIT { PL_SCHEMA_ERROR_VERSION, "", "", "" }

/**
 * Compile a schema.  @p schema is copied.
 * @param[out] out caller owns; free with pl_schema_free().  NULL on failure.
 * @return PL_OK; PL_EINVAL (NULL argument, a keyword with a bad value, a
 *         keyword refused (above), an unsupported or unresolvable "$ref",
 *         a pattern refused (above):
 *         the message names where, e.g. "JSON Schema at
 *         #/properties/a/minimum: expected a number"); PL_EJSON (@p schema
 *         is neither an object nor a boolean); PL_ELIMIT (nests deeper than
 *         PL_SCHEMA_MAX_DEPTH); PL_ENOMEM.
 */
int pl_schema_compile(pl_schema **out, const cJSON *schema);

/** pl_schema_compile() from JSON text.  @return as pl_schema_compile(), and
 *  PL_EJSON for text that is not JSON. */
int pl_schema_compile_text(pl_schema **out, const char *text);

/**
 * Validate @p instance against @p schema.
 * @param[out] out made with PL_SCHEMA_ERROR_INIT: the first error when the
 *             instance does not match; empty strings otherwise.  May be
 *             NULL.
 * @return PL_OK (it matches); PL_EJSON (it does not: *out says where and why,
 *         and so does pl_errmsg()); PL_ELIMIT (a bound above was hit, no
 *         verdict); PL_EINVAL (NULL schema or instance, a bad version of
 *         @p out).
 */
int pl_schema_validate(pl_schema_error *out, const pl_schema *schema,
                       const cJSON *instance);

/** Free a compiled schema.  NULL does nothing. */
void pl_schema_free(pl_schema *schema);

/* clang-format on */

#endif /* POLICYLEDGER_JSON_H */
