/*
 * schema.c -- a JSON Schema validator (draft 7), compiled once, run many
 * times.
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
 * anywhere in the string as ECMA-262 "test" does, after a translation of
 * the escapes ECMA-262 has and POSIX lacks: \d \D \w \W \s \S (outside and,
 * for \d \w \s, inside brackets).  Dialect differences: no lookaround, no
 * lazy quantifiers, no \p{...} classes, no backreferences (refused at
 * compile time: they make matching exponential), and matching is by byte
 * (a "." matches one byte of a multi-byte character).  A pattern regcomp
 * refuses makes the schema PL_EINVAL at compile time, naming where.
 *
 * Bounds on hostile input: the schema nests at most PL_SCHEMA_MAX_DEPTH
 * JSON levels; evaluation recurses at most PL_SCHEMA_MAX_DEPTH schemas deep
 * (so a "$ref" cycle ends with PL_ELIMIT, never a stack overflow), and one
 * validation does at most PL_SCHEMA_MAX_WORK units of work (a schema
 * applied, a value compared, 64 bytes of a string matched), so nested
 * anyOf/oneOf references cannot blow up exponentially.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* ---- the side table: node address -> what compiling found --------------- */

typedef struct aux {
    const cJSON *node;   /* a schema, a "pattern" value, a "$ref" value */
    regex_t *re;         /* compiled pattern, or NULL */
    const cJSON *target; /* the schema a "$ref" names, or NULL */
    bool checked;        /* a schema node compiled already */
} aux;

struct pl_schema {
    cJSON *root;
    aux *slots; /* open addressing, power of two, at most half full */
    size_t n_slots, n;
};

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static aux *aux_find(const pl_schema *s, const cJSON *node)
{
    if (!s->n_slots)
        return NULL;
    size_t mask = s->n_slots - 1;
    for (size_t i = ptr_hash(node) & mask;; i = (i + 1) & mask) {
        if (!s->slots[i].node)
            return NULL;
        if (s->slots[i].node == node)
            return &s->slots[i];
    }
}

/* The entry for @p node, added empty if new; NULL when out of memory. */
static aux *aux_get(pl_schema *s, const cJSON *node, bool *added)
{
    *added = false;
    aux *a = aux_find(s, node);
    if (a)
        return a;
    if ((s->n + 1) * 2 > s->n_slots) {
        size_t ns = s->n_slots ? s->n_slots * 2 : 64;
        aux *slots = calloc(ns, sizeof *slots);
        if (!slots)
            return NULL;
        for (size_t i = 0; i < s->n_slots; i++) {
            if (!s->slots[i].node)
                continue;
            size_t j = ptr_hash(s->slots[i].node) & (ns - 1);
            while (slots[j].node)
                j = (j + 1) & (ns - 1);
            slots[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = slots;
        s->n_slots = ns;
    }
    size_t mask = s->n_slots - 1;
    size_t i = ptr_hash(node) & mask;
    while (s->slots[i].node)
        i = (i + 1) & mask;
    s->slots[i].node = node;
    s->n++;
    *added = true;
    return &s->slots[i];
}

void pl_schema_free(pl_schema *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].re) {
            regfree(s->slots[i].re);
            free(s->slots[i].re);
        }
    free(s->slots);
    cJSON_Delete(s->root);
    free(s);
}

/* ---- compiling ----------------------------------------------------------- */

/* Where in the schema compiling is, for messages: "#/properties/a". */
typedef struct where {
    const struct where *up;
    const char *key; /* NULL: idx */
    size_t idx;
} where;

static void where_render(char *buf, size_t cap, const where *w)
{
    const where *chain[PL_SCHEMA_MAX_DEPTH * 2 + 8];
    size_t n = 0;
    for (; w && n < PL__ARRAY_LEN(chain); w = w->up)
        chain[n++] = w;
    size_t len = (size_t)snprintf(buf, cap, "#");
    while (n-- > 0 && len < cap) {
        if (chain[n]->key)
            len += (size_t)snprintf(buf + len, cap - len, "/%s", chain[n]->key);
        else
            len += (size_t)snprintf(buf + len, cap - len, "/%zu",
                                    chain[n]->idx);
    }
}

static int schema_err(int st, const where *w, const char *fmt, ...)
    PL__PRINTF(3, 4);

static int schema_err(int st, const where *w, const char *fmt, ...)
{
    char at[256], what[256];
    where_render(at, sizeof at, w);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pl__err(st, "JSON Schema at %s: %s", at, what);
}

/* Translate an ECMA-262 pattern's escapes to POSIX ERE.  NULL on OOM; sets
 * *bad for a construct that POSIX cannot express safely. */
static char *ecma_to_posix(const char *src, const char **bad)
{
    pl__buf b = {0};
    bool in_class = false;
    int st = 0;
    *bad = NULL;
    for (const char *p = src; *p && !st && !*bad; p++) {
        const char *rep = NULL;
        char one[2] = {*p, 0}, esc[3] = {'\\', 0, 0};
        if (*p == '\\' && p[1]) {
            char c = *++p;
            switch (c) {
            case 'd': rep = in_class ? "0-9" : "[0-9]"; break;
            case 'w': rep = in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]"; break;
            case 's': rep = in_class ? "[:space:]" : "[[:space:]]"; break;
            case 'D': rep = in_class ? NULL : "[^0-9]"; break;
            case 'W': rep = in_class ? NULL : "[^A-Za-z0-9_]"; break;
            case 'S': rep = in_class ? NULL : "[^[:space:]]"; break;
            case 'n': rep = "\n"; break;
            case 't': rep = "\t"; break;
            case 'r': rep = "\r"; break;
            default:
                if (c >= '1' && c <= '9') {
                    *bad = "backreferences are not supported";
                    continue;
                }
                if (c == 'p' || c == 'P' || c == 'u' || c == 'x' || c == 'b' ||
                    c == 'B') {
                    *bad = "\\p, \\u, \\x and \\b escapes are not supported";
                    continue;
                }
                break;
            }
            if (!rep && in_class && (c == 'D' || c == 'W' || c == 'S')) {
                *bad = "negated class escapes inside brackets are not "
                       "supported";
                continue;
            }
            if (!rep) {
                /* an escaped character: itself, escaped outside brackets */
                esc[1] = c;
                one[0] = c;
                rep = in_class ? one : esc;
            }
        } else if (*p == '(' && p[1] == '?') {
            *bad = "lookaround and (?...) groups are not supported";
            continue;
        } else if ((*p == '*' || *p == '+' || *p == '?' || *p == '}') &&
                   p[1] == '?' && !in_class) {
            *bad = "lazy quantifiers are not supported";
            continue;
        } else if (*p == '[' && !in_class) {
            in_class = true;
            st = pl__buf_append(&b, p, 1);
            if (!st && p[1] == '^')
                st = pl__buf_append(&b, ++p, 1);
            if (!st && p[1] == ']') /* a literal ] first in the class */
                st = pl__buf_append(&b, ++p, 1);
            continue;
        } else if (*p == ']' && in_class) {
            in_class = false;
        }
        if (!rep)
            rep = one;
        st = pl__buf_append(&b, rep, strlen(rep));
    }
    if (!st && !*bad)
        st = pl__buf_append(&b, "", 1);
    if (st || *bad) {
        pl__buf_free(&b);
        return st ? NULL : (char *)"";
    }
    return (char *)b.data;
}

static int compile_regex(pl_schema *s, const cJSON *node, const char *pattern,
                         const where *w)
{
    const char *bad = NULL;
    char *posix = ecma_to_posix(pattern, &bad);
    if (bad)
        return schema_err(PL_EINVAL, w, "pattern \"%.80s\": %s", pattern, bad);
    if (!posix)
        return pl__err(PL_ENOMEM, "out of memory compiling a JSON Schema");
    regex_t *re = malloc(sizeof *re);
    int rc = re ? regcomp(re, posix, REG_EXTENDED | REG_NOSUB) : REG_ESPACE;
    free(posix);
    if (rc) {
        char why[128] = "out of memory";
        if (re)
            regerror(rc, re, why, sizeof why);
        free(re);
        return rc == REG_ESPACE
                   ? pl__err(PL_ENOMEM, "out of memory compiling a pattern")
                   : schema_err(PL_EINVAL, w, "pattern \"%.80s\": %s", pattern,
                                why);
    }
    bool added;
    aux *a = aux_get(s, node, &added);
    if (!a) {
        regfree(re);
        free(re);
        return pl__err(PL_ENOMEM, "out of memory compiling a JSON Schema");
    }
    if (a->re) { /* compiled already (a schema reached twice) */
        regfree(re);
        free(re);
        return PL_OK;
    }
    a->re = re;
    return PL_OK;
}

/* Decode one JSON pointer token (percent- then ~-escapes) into buf. */
static bool pointer_token(char *buf, size_t cap, const char *p, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '%') {
            if (i + 2 >= n)
                return false;
            char hex[3] = {p[i + 1], p[i + 2], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end || v <= 0)
                return false;
            c = (char)v;
            i += 2;
        }
        if (len + 2 > cap)
            return false;
        buf[len++] = c;
    }
    buf[len] = 0;
    /* ~1 -> /, ~0 -> ~ */
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (buf[i] == '~') {
            if (buf[i + 1] == '1')
                buf[o++] = '/';
            else if (buf[i + 1] == '0')
                buf[o++] = '~';
            else
                return false;
            i++;
        } else {
            buf[o++] = buf[i];
        }
    }
    buf[o] = 0;
    return true;
}

static const cJSON *resolve_ref(const cJSON *root, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const cJSON *node = root;
    const char *p = ref + 1;
    if (!*p)
        return root;
    if (*p != '/')
        return NULL;
    while (*p == '/' && node) {
        p++;
        size_t n = strcspn(p, "/");
        char tok[512];
        if (!pointer_token(tok, sizeof tok, p, n))
            return NULL;
        if (cJSON_IsArray(node)) {
            char *end;
            errno = 0;
            unsigned long idx = strtoul(tok, &end, 10);
            if (!*tok || *end || errno || (tok[0] == '0' && tok[1]))
                return NULL;
            node = idx > INT32_MAX ? NULL : cJSON_GetArrayItem(node, (int)idx);
        } else if (cJSON_IsObject(node)) {
            node = cJSON_GetObjectItemCaseSensitive(node, tok);
        } else {
            return NULL;
        }
        p += n;
    }
    return node;
}

static int compile_node(pl_schema *s, const cJSON *node, const where *w,
                        unsigned depth);

static bool is_schema(const cJSON *v)
{
    return cJSON_IsObject(v) || cJSON_IsBool(v);
}

static int sub(pl_schema *s, const cJSON *v, const where *w, const char *key,
               unsigned depth)
{
    where here = {w, key, 0};
    return compile_node(s, v, &here, depth + 1);
}

static int schema_array(pl_schema *s, const cJSON *v, const where *w,
                        const char *key, unsigned depth, bool nonempty)
{
    where here = {w, key, 0};
    if (!cJSON_IsArray(v) || (nonempty && !v->child))
        return schema_err(PL_EINVAL, &here, "expected %sarray of schemas",
                          nonempty ? "a non-empty " : "an ");
    size_t i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        where at = {&here, NULL, i};
        int st = compile_node(s, it, &at, depth + 1);
        if (st)
            return st;
    }
    return PL_OK;
}

static int schema_map(pl_schema *s, const cJSON *v, const where *w,
                      const char *key, unsigned depth, bool regex_keys)
{
    where here = {w, key, 0};
    if (!cJSON_IsObject(v))
        return schema_err(PL_EINVAL, &here, "expected an object of schemas");
    for (const cJSON *it = v->child; it; it = it->next) {
        where at = {&here, it->string, 0};
        int st = regex_keys ? compile_regex(s, it, it->string, &at) : 0;
        if (!st)
            st = compile_node(s, it, &at, depth + 1);
        if (st)
            return st;
    }
    return PL_OK;
}

static bool is_count(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 &&
           v->valuedouble <= 9007199254740992.0 &&
           floor(v->valuedouble) == v->valuedouble;
}

static bool is_string_array(const cJSON *v)
{
    if (!cJSON_IsArray(v))
        return false;
    for (const cJSON *it = v->child; it; it = it->next)
        if (!cJSON_IsString(it))
            return false;
    return true;
}

static const char *const type_names[] = {"null",   "boolean", "object", "array",
                                         "number", "string",  "integer"};

static bool type_name_ok(const cJSON *v)
{
    if (!cJSON_IsString(v))
        return false;
    for (size_t i = 0; i < PL__ARRAY_LEN(type_names); i++)
        if (strcmp(v->valuestring, type_names[i]) == 0)
            return true;
    return false;
}

static int json_depth_ok(const cJSON *v, unsigned depth)
{
    if (depth > PL_SCHEMA_MAX_DEPTH)
        return false;
    for (const cJSON *it = v->child; it; it = it->next)
        if ((cJSON_IsArray(it) || cJSON_IsObject(it)) &&
            !json_depth_ok(it, depth + 1))
            return false;
    return true;
}

static int compile_node(pl_schema *s, const cJSON *node, const where *w,
                        unsigned depth)
{
    if (cJSON_IsBool(node))
        return PL_OK;
    if (!cJSON_IsObject(node))
        return schema_err(PL_EINVAL, w,
                          "a schema must be an object or a boolean");
    if (depth > PL_SCHEMA_MAX_DEPTH)
        return schema_err(PL_ELIMIT, w, "schemas nest deeper than %d",
                          PL_SCHEMA_MAX_DEPTH);
    bool added;
    aux *self = aux_get(s, node, &added);
    if (!self)
        return pl__err(PL_ENOMEM, "out of memory compiling a JSON Schema");
    if (self->checked)
        return PL_OK; /* reached before, through a $ref */
    self->checked = true;

    int st = PL_OK;
    for (const cJSON *kw = node->child; kw && !st; kw = kw->next) {
        const char *k = kw->string;
        where at = {w, k, 0};
        if (!strcmp(k, "type")) {
            bool ok = type_name_ok(kw);
            if (cJSON_IsArray(kw)) {
                ok = true;
                for (const cJSON *t = kw->child; t; t = t->next)
                    ok = ok && type_name_ok(t);
            }
            if (!ok)
                st = schema_err(PL_EINVAL, &at,
                                "expected a type name or an array of them "
                                "(null, boolean, object, array, number, "
                                "string, integer)");
        } else if (!strcmp(k, "enum")) {
            if (!cJSON_IsArray(kw))
                st = schema_err(PL_EINVAL, &at, "expected an array");
        } else if (!strcmp(k, "multipleOf")) {
            if (!cJSON_IsNumber(kw) || !(kw->valuedouble > 0) ||
                !isfinite(kw->valuedouble))
                st = schema_err(PL_EINVAL, &at,
                                "expected a number greater than 0");
        } else if (!strcmp(k, "maximum") || !strcmp(k, "minimum") ||
                   !strcmp(k, "exclusiveMaximum") ||
                   !strcmp(k, "exclusiveMinimum")) {
            if (!cJSON_IsNumber(kw) || !isfinite(kw->valuedouble))
                st = schema_err(PL_EINVAL, &at, "expected a number");
        } else if (!strcmp(k, "maxLength") || !strcmp(k, "minLength") ||
                   !strcmp(k, "maxItems") || !strcmp(k, "minItems") ||
                   !strcmp(k, "maxProperties") || !strcmp(k, "minProperties")) {
            if (!is_count(kw))
                st = schema_err(PL_EINVAL, &at,
                                "expected a non-negative integer");
        } else if (!strcmp(k, "pattern")) {
            st = cJSON_IsString(kw)
                     ? compile_regex(s, kw, kw->valuestring, &at)
                     : schema_err(PL_EINVAL, &at, "expected a string");
        } else if (!strcmp(k, "uniqueItems")) {
            if (!cJSON_IsBool(kw))
                st = schema_err(PL_EINVAL, &at, "expected a boolean");
        } else if (!strcmp(k, "items")) {
            st = cJSON_IsArray(kw) ? schema_array(s, kw, w, k, depth, false)
                                   : sub(s, kw, w, k, depth);
        } else if (!strcmp(k, "prefixItems")) {
            st = schema_array(s, kw, w, k, depth, false);
        } else if (!strcmp(k, "additionalItems") || !strcmp(k, "contains") ||
                   !strcmp(k, "additionalProperties") ||
                   !strcmp(k, "propertyNames") || !strcmp(k, "not") ||
                   !strcmp(k, "if") || !strcmp(k, "then") ||
                   !strcmp(k, "else")) {
            st = sub(s, kw, w, k, depth);
        } else if (!strcmp(k, "required")) {
            if (!is_string_array(kw))
                st = schema_err(PL_EINVAL, &at, "expected an array of strings");
        } else if (!strcmp(k, "properties") || !strcmp(k, "definitions") ||
                   !strcmp(k, "$defs") || !strcmp(k, "dependentSchemas")) {
            st = schema_map(s, kw, w, k, depth, false);
        } else if (!strcmp(k, "patternProperties")) {
            st = schema_map(s, kw, w, k, depth, true);
        } else if (!strcmp(k, "dependencies") ||
                   !strcmp(k, "dependentRequired")) {
            bool schemas = !strcmp(k, "dependencies");
            if (!cJSON_IsObject(kw))
                st = schema_err(PL_EINVAL, &at, "expected an object");
            for (const cJSON *d = kw->child; d && !st; d = d->next) {
                where dat = {&at, d->string, 0};
                if (is_string_array(d))
                    continue;
                st = schemas && is_schema(d)
                         ? compile_node(s, d, &dat, depth + 1)
                         : schema_err(PL_EINVAL, &dat,
                                      "expected an array of strings%s",
                                      schemas ? " or a schema" : "");
            }
        } else if (!strcmp(k, "allOf") || !strcmp(k, "anyOf") ||
                   !strcmp(k, "oneOf")) {
            st = schema_array(s, kw, w, k, depth, true);
        } else if (!strcmp(k, "$ref")) {
            if (!cJSON_IsString(kw)) {
                st = schema_err(PL_EINVAL, &at, "expected a string");
                break;
            }
            const cJSON *t = resolve_ref(s->root, kw->valuestring);
            if (!t) {
                st = schema_err(PL_EINVAL, &at,
                                "\"%.120s\" does not name a schema in this "
                                "document (only \"#\" and \"#/pointer\" "
                                "references are supported)",
                                kw->valuestring);
                break;
            }
            bool fresh;
            aux *a = aux_get(s, kw, &fresh);
            if (!a)
                return pl__err(PL_ENOMEM,
                               "out of memory compiling a JSON Schema");
            a->target = t;
            where tat = {NULL, kw->valuestring + 2, 0};
            st = compile_node(s, t, kw->valuestring[1] ? &tat : NULL,
                              depth + 1);
            if (!st && !cJSON_IsObject(t) && !cJSON_IsBool(t))
                st = schema_err(PL_EINVAL, &at, "\"%.120s\" is not a schema",
                                kw->valuestring);
        }
    }
    return st;
}

int pl_schema_compile(pl_schema **out, const cJSON *schema)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_schema_compile: out is NULL");
    *out = NULL;
    if (!schema)
        return pl__err(PL_EINVAL, "pl_schema_compile: schema is NULL");
    if (!is_schema(schema))
        return pl__err(PL_EJSON, "JSON Schema at #: a schema must be an "
                                 "object or a boolean");
    if (!json_depth_ok(schema, 1))
        return pl__err(PL_ELIMIT, "JSON Schema nests deeper than %d levels",
                       PL_SCHEMA_MAX_DEPTH);
    pl_schema *s = calloc(1, sizeof *s);
    if (!s || !(s->root = cJSON_Duplicate(schema, true))) {
        free(s);
        return pl__err(PL_ENOMEM, "out of memory compiling a JSON Schema");
    }
    int st = compile_node(s, s->root, NULL, 0);
    if (st) {
        pl_schema_free(s);
        return st;
    }
    *out = s;
    return PL_OK;
}

int pl_schema_compile_text(pl_schema **out, const char *text)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_schema_compile_text: out is NULL");
    *out = NULL;
    if (!text)
        return pl__err(PL_EINVAL, "pl_schema_compile_text: text is NULL");
    cJSON *json = cJSON_ParseWithOpts(text, NULL, true);
    if (!json)
        return pl__err(PL_EJSON,
                       "JSON Schema is not valid JSON (near byte "
                       "%td)",
                       cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0);
    int st = pl_schema_compile(out, json);
    cJSON_Delete(json);
    return st;
}

/* ---- validating ---------------------------------------------------------- */

/* Where in the instance validation is: a JSON pointer, built on demand. */
typedef struct ipath {
    const struct ipath *up;
    const char *key; /* NULL: idx */
    size_t idx;
} ipath;

typedef struct vctx {
    const pl_schema *s;
    pl_schema_error *err;
    unsigned quiet; /* >0 inside anyOf, oneOf, not, if, contains */
    bool have;      /* err holds the first error */
    uint64_t work;
    unsigned depth;
    int status; /* PL_ELIMIT once a bound is hit */
} vctx;

static void ipath_render(char *buf, size_t cap, const ipath *p)
{
    const ipath *chain[PL_SCHEMA_MAX_DEPTH * 2 + 8];
    size_t n = 0;
    for (; p && n < PL__ARRAY_LEN(chain); p = p->up)
        chain[n++] = p;
    size_t len = 0;
    buf[0] = 0;
    while (n-- > 0 && len + 1 < cap) {
        const ipath *c = chain[n];
        if (!c->key) {
            len += (size_t)snprintf(buf + len, cap - len, "/%zu", c->idx);
            continue;
        }
        buf[len++] = '/';
        for (const char *k = c->key; *k && len + 3 < cap; k++) {
            if (*k == '~' || *k == '/') {
                buf[len++] = '~';
                buf[len++] = *k == '~' ? '0' : '1';
            } else {
                buf[len++] = *k;
            }
        }
        buf[len] = 0;
    }
    if (len >= cap)
        buf[cap - 1] = 0;
}

static int fail(vctx *v, const ipath *at, const char *kw, const char *fmt, ...)
    PL__PRINTF(4, 5);

static int fail(vctx *v, const ipath *at, const char *kw, const char *fmt, ...)
{
    if (v->quiet || v->have)
        return 1;
    v->have = true;
    if (!v->err)
        return 1;
    ipath_render(v->err->path, sizeof v->err->path, at);
    snprintf(v->err->keyword, sizeof v->err->keyword, "%s", kw);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->err->message, sizeof v->err->message, fmt, ap);
    va_end(ap);
    return 1;
}

static bool spend(vctx *v, uint64_t units)
{
    v->work += units;
    if (v->work <= PL_SCHEMA_MAX_WORK)
        return true;
    if (!v->status)
        v->status = pl__err(PL_ELIMIT,
                            "JSON Schema validation gave up after %llu "
                            "units of work (nested anyOf/oneOf or a large "
                            "instance)",
                            (unsigned long long)PL_SCHEMA_MAX_WORK);
    return false;
}

static const char *type_of(const cJSON *i)
{
    if (cJSON_IsNull(i))
        return "null";
    if (cJSON_IsBool(i))
        return "boolean";
    if (cJSON_IsObject(i))
        return "object";
    if (cJSON_IsArray(i))
        return "array";
    if (cJSON_IsString(i))
        return "string";
    if (cJSON_IsNumber(i))
        return "number";
    return "invalid";
}

static bool is_integer(const cJSON *i)
{
    return cJSON_IsNumber(i) && isfinite(i->valuedouble) &&
           floor(i->valuedouble) == i->valuedouble;
}

static bool type_is(const cJSON *i, const char *t)
{
    if (!strcmp(t, "integer"))
        return is_integer(i);
    return !strcmp(t, type_of(i));
}

static size_t count(const cJSON *v)
{
    size_t n = 0;
    for (const cJSON *it = v->child; it; it = it->next)
        n++;
    return n;
}

/* 1 equal, 0 not, -1 a bound was hit. */
static int equal(vctx *v, const cJSON *a, const cJSON *b, unsigned depth)
{
    if (depth > PL_SCHEMA_MAX_DEPTH * 4 || !spend(v, 1)) {
        if (!v->status)
            v->status = pl__err(PL_ELIMIT, "JSON Schema: values compared "
                                           "nest too deep");
        return -1;
    }
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return a->valuedouble == b->valuedouble;
    if ((a->type & 0xFF) != (b->type & 0xFF))
        return 0;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsArray(a)) {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next) {
            int e = equal(v, x, y, depth + 1);
            if (e != 1)
                return e;
        }
        return !x && !y;
    }
    if (cJSON_IsObject(a)) {
        if (count(a) != count(b))
            return 0;
        for (const cJSON *x = a->child; x; x = x->next) {
            if (!spend(v, count(b) / 16 + 1))
                return -1;
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y)
                return 0;
            int e = equal(v, x, y, depth + 1);
            if (e != 1)
                return e;
        }
        return 1;
    }
    return 1; /* null, true, false */
}

static size_t code_points(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool regex_match(vctx *v, const cJSON *node, const char *str)
{
    aux *a = aux_find(v->s, node);
    assert(a && a->re); /* compiled with the schema */
    if (!spend(v, strlen(str) / 64 + 1))
        return true; /* the bound reports it */
    return regexec(a->re, str, 0, NULL, 0) == 0;
}

static void describe(char *buf, size_t cap, const cJSON *i)
{
    if (cJSON_IsNumber(i))
        snprintf(buf, cap, "%.17g", i->valuedouble);
    else if (cJSON_IsString(i))
        snprintf(buf, cap, "\"%.40s%s\"", i->valuestring,
                 strlen(i->valuestring) > 40 ? "..." : "");
    else
        snprintf(buf, cap, "%s", type_of(i));
}

static int eval(vctx *v, const cJSON *schema, const cJSON *inst,
                const ipath *at);

/* eval, quietly: 1 when valid, 0 when not, -1 on a bound. */
static int test(vctx *v, const cJSON *schema, const cJSON *inst,
                const ipath *at)
{
    v->quiet++;
    int r = eval(v, schema, inst, at);
    v->quiet--;
    return r < 0 ? -1 : r == 0;
}

static int eval_numbers(vctx *v, const cJSON *schema, const cJSON *inst,
                        const ipath *at)
{
    double x = inst->valuedouble;
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "multipleOf"))) {
        double q = x / k->valuedouble;
        if (!isfinite(q) || fabs(q - nearbyint(q)) > 1e-9 * fmax(1, fabs(q)))
            return fail(v, at, "multipleOf", "%.17g is not a multiple of %.17g",
                        x, k->valuedouble);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "maximum")) &&
        x > k->valuedouble)
        return fail(v, at, "maximum", "%.17g is greater than the maximum %.17g",
                    x, k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "exclusiveMaximum")) &&
        x >= k->valuedouble)
        return fail(v, at, "exclusiveMaximum", "%.17g is not less than %.17g",
                    x, k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "minimum")) &&
        x < k->valuedouble)
        return fail(v, at, "minimum", "%.17g is less than the minimum %.17g", x,
                    k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "exclusiveMinimum")) &&
        x <= k->valuedouble)
        return fail(v, at, "exclusiveMinimum",
                    "%.17g is not greater than %.17g", x, k->valuedouble);
    return 0;
}

static int eval_string(vctx *v, const cJSON *schema, const cJSON *inst,
                       const ipath *at)
{
    const char *str = inst->valuestring;
    const cJSON *k;
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(schema, "maxLength");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(schema, "minLength");
    if (mx || mn) {
        if (!spend(v, strlen(str) / 64 + 1))
            return -1;
        double n = (double)code_points(str);
        if (mx && n > mx->valuedouble)
            return fail(v, at, "maxLength",
                        "a string of %.0f characters is longer than "
                        "maxLength %.0f",
                        n, mx->valuedouble);
        if (mn && n < mn->valuedouble)
            return fail(v, at, "minLength",
                        "a string of %.0f characters is shorter than "
                        "minLength %.0f",
                        n, mn->valuedouble);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "pattern")) &&
        !regex_match(v, k, str))
        return v->status ? -1
                         : fail(v, at, "pattern",
                                "the string does not match the pattern "
                                "\"%.80s\"",
                                k->valuestring);
    return v->status ? -1 : 0;
}

static int eval_array(vctx *v, const cJSON *schema, const cJSON *inst,
                      const ipath *at)
{
    const cJSON *k;
    double n = (double)count(inst);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "maxItems")) &&
        n > k->valuedouble)
        return fail(v, at, "maxItems", "%.0f items, more than maxItems %.0f", n,
                    k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "minItems")) &&
        n < k->valuedouble)
        return fail(v, at, "minItems", "%.0f items, fewer than minItems %.0f",
                    n, k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "uniqueItems")) &&
        cJSON_IsTrue(k)) {
        size_t i = 0;
        for (const cJSON *a = inst->child; a; a = a->next, i++) {
            size_t j = i + 1;
            for (const cJSON *b = a->next; b; b = b->next, j++) {
                int e = equal(v, a, b, 0);
                if (e < 0)
                    return -1;
                if (e)
                    return fail(v, at, "uniqueItems",
                                "items %zu and %zu are equal", i, j);
            }
        }
    }
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(schema,
                                                           "prefixItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
    const cJSON *rest = NULL;
    if (prefix) {
        rest = items;
    } else if (cJSON_IsArray(items)) {
        prefix = items;
        rest = cJSON_GetObjectItemCaseSensitive(schema, "additionalItems");
    } else {
        rest = items;
    }
    const cJSON *ps = prefix ? prefix->child : NULL;
    size_t i = 0;
    for (const cJSON *it = inst->child; it; it = it->next, i++) {
        const cJSON *sch = ps ? ps : rest;
        if (ps)
            ps = ps->next;
        if (!sch)
            continue;
        ipath here = {at, NULL, i};
        int r = eval(v, sch, it, &here);
        if (r)
            return r;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "contains"))) {
        bool found = false;
        i = 0;
        for (const cJSON *it = inst->child; it && !found; it = it->next, i++) {
            ipath here = {at, NULL, i};
            int r = test(v, k, it, &here);
            if (r < 0)
                return -1;
            found = r;
        }
        if (!found)
            return fail(v, at, "contains",
                        "no item matches the \"contains\" schema");
    }
    return 0;
}

static bool required_ok(const cJSON *inst, const cJSON *names,
                        const char **missing)
{
    for (const cJSON *r = names->child; r; r = r->next)
        if (!cJSON_GetObjectItemCaseSensitive(inst, r->valuestring)) {
            *missing = r->valuestring;
            return false;
        }
    return true;
}

static int eval_object(vctx *v, const cJSON *schema, const cJSON *inst,
                       const ipath *at)
{
    const cJSON *k;
    const char *missing;
    double n = (double)count(inst);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "maxProperties")) &&
        n > k->valuedouble)
        return fail(v, at, "maxProperties",
                    "%.0f properties, more than maxProperties %.0f", n,
                    k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "minProperties")) &&
        n < k->valuedouble)
        return fail(v, at, "minProperties",
                    "%.0f properties, fewer than minProperties %.0f", n,
                    k->valuedouble);
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "required")) &&
        !required_ok(inst, k, &missing))
        return fail(v, at, "required",
                    "the required property \"%.80s\" is missing", missing);
    const char *dep_kws[] = {"dependencies", "dependentRequired",
                             "dependentSchemas"};
    for (size_t d = 0; d < PL__ARRAY_LEN(dep_kws); d++) {
        if (!(k = cJSON_GetObjectItemCaseSensitive(schema, dep_kws[d])))
            continue;
        for (const cJSON *dep = k->child; dep; dep = dep->next) {
            if (!cJSON_GetObjectItemCaseSensitive(inst, dep->string))
                continue;
            if (cJSON_IsArray(dep)) {
                if (!required_ok(inst, dep, &missing))
                    return fail(v, at, dep_kws[d],
                                "\"%.80s\" is present, so \"%.80s\" is "
                                "required",
                                dep->string, missing);
                continue;
            }
            int r = eval(v, dep, inst, at);
            if (r)
                return r;
        }
    }
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *pprops = cJSON_GetObjectItemCaseSensitive(schema,
                                                           "patternProperties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(
        schema, "additionalProperties");
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(schema,
                                                          "propertyNames");
    if (!props && !pprops && !addl && !names)
        return 0;
    for (const cJSON *m = inst->child; m; m = m->next) {
        ipath here = {at, m->string, 0};
        bool matched = false;
        int r = 0;
        if (names) {
            cJSON key = {0};
            key.type = cJSON_String;
            key.valuestring = m->string;
            if ((r = test(v, names, &key, &here)) < 0)
                return -1;
            if (!r)
                return fail(v, &here, "propertyNames",
                            "the property name \"%.80s\" is not allowed",
                            m->string);
        }
        const cJSON *p = props ? cJSON_GetObjectItemCaseSensitive(props,
                                                                  m->string)
                               : NULL;
        if (p) {
            matched = true;
            if ((r = eval(v, p, m, &here)))
                return r;
        }
        for (const cJSON *pp = pprops ? pprops->child : NULL; pp;
             pp = pp->next) {
            if (!regex_match(v, pp, m->string)) {
                if (v->status)
                    return -1;
                continue;
            }
            matched = true;
            if ((r = eval(v, pp, m, &here)))
                return r;
        }
        if (!matched && addl) {
            if (cJSON_IsFalse(addl))
                return fail(v, &here, "additionalProperties",
                            "the property \"%.80s\" is not allowed", m->string);
            if ((r = eval(v, addl, m, &here)))
                return r;
        }
    }
    return 0;
}

/* 0 valid, 1 invalid (first error recorded unless quiet), -1 a bound. */
static int eval(vctx *v, const cJSON *schema, const cJSON *inst,
                const ipath *at)
{
    if (v->status)
        return -1;
    if (cJSON_IsBool(schema))
        return cJSON_IsTrue(schema)
                   ? 0
                   : fail(v, at, "false", "no value is allowed here");
    if (v->depth >= PL_SCHEMA_MAX_DEPTH) {
        v->status = pl__err(PL_ELIMIT,
                            "JSON Schema validation went deeper than %d "
                            "schemas (a $ref cycle?)",
                            PL_SCHEMA_MAX_DEPTH);
        return -1;
    }
    if (!spend(v, 1))
        return -1;
    v->depth++;
    int r = 0;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(schema, "$ref");
    if (k) {
        aux *a = aux_find(v->s, k);
        assert(a && a->target); /* resolved when compiled */
        r = eval(v, a->target, inst, at);
        goto done;
    }
    char got[64];
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "type"))) {
        bool ok = false;
        if (cJSON_IsString(k))
            ok = type_is(inst, k->valuestring);
        for (const cJSON *t = cJSON_IsArray(k) ? k->child : NULL; t && !ok;
             t = t->next)
            ok = type_is(inst, t->valuestring);
        if (!ok) {
            char want[96] = "";
            if (cJSON_IsString(k))
                snprintf(want, sizeof want, "%s", k->valuestring);
            else
                snprintf(want, sizeof want, "one of the listed types");
            r = fail(v, at, "type", "expected %s, got %s", want, type_of(inst));
            goto done;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "enum"))) {
        bool found = false;
        for (const cJSON *e = k->child; e && !found; e = e->next) {
            int q = equal(v, e, inst, 0);
            if (q < 0) {
                r = -1;
                goto done;
            }
            found = q;
        }
        if (!found) {
            describe(got, sizeof got, inst);
            r = fail(v, at, "enum", "%s is not one of the allowed values", got);
            goto done;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "const"))) {
        int q = equal(v, k, inst, 0);
        if (q <= 0) {
            describe(got, sizeof got, inst);
            r = q < 0
                    ? -1
                    : fail(v, at, "const", "%s is not the required value", got);
            goto done;
        }
    }
    if (cJSON_IsNumber(inst))
        r = eval_numbers(v, schema, inst, at);
    else if (cJSON_IsString(inst))
        r = eval_string(v, schema, inst, at);
    else if (cJSON_IsArray(inst))
        r = eval_array(v, schema, inst, at);
    else if (cJSON_IsObject(inst))
        r = eval_object(v, schema, inst, at);
    if (r)
        goto done;

    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "allOf")))
        for (const cJSON *s = k->child; s && !r; s = s->next)
            r = eval(v, s, inst, at);
    if (r)
        goto done;
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"))) {
        int any = 0;
        for (const cJSON *s = k->child; s && !any; s = s->next)
            if ((any = test(v, s, inst, at)) < 0) {
                r = -1;
                goto done;
            }
        if (!any) {
            r = fail(v, at, "anyOf",
                     "the value matches none of the anyOf "
                     "schemas");
            goto done;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "oneOf"))) {
        size_t n = 0, i = 0, first = 0;
        for (const cJSON *s = k->child; s && n < 2; s = s->next, i++) {
            int t = test(v, s, inst, at);
            if (t < 0) {
                r = -1;
                goto done;
            }
            if (t && n++ == 0)
                first = i;
        }
        if (n != 1) {
            r = n ? fail(v, at, "oneOf",
                         "the value matches oneOf schemas %zu and %zu, not "
                         "exactly one",
                         first, i - 1)
                  : fail(v, at, "oneOf",
                         "the value matches none of the oneOf schemas");
            goto done;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "not"))) {
        int t = test(v, k, inst, at);
        if (t) {
            r = t < 0 ? -1
                      : fail(v, at, "not",
                             "the value matches the \"not\" schema");
            goto done;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "if"))) {
        const cJSON *then = cJSON_GetObjectItemCaseSensitive(schema, "then");
        const cJSON *els = cJSON_GetObjectItemCaseSensitive(schema, "else");
        if (then || els) {
            int t = test(v, k, inst, at);
            if (t < 0) {
                r = -1;
                goto done;
            }
            const cJSON *branch = t ? then : els;
            if (branch)
                r = eval(v, branch, inst, at);
        }
    }
done:
    v->depth--;
    return r;
}

int pl_schema_validate(pl_schema_error *out, const pl_schema *schema,
                       const cJSON *instance)
{
    if (out && pl__struct_version_ok(out->version, &pl__schema_error_layout,
                                     "pl_schema_validate"))
        return PL_EINVAL;
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    if (out)
        pl__struct_out(out, &e, &pl__schema_error_layout);
    if (!schema || !instance)
        return pl__err(PL_EINVAL, "pl_schema_validate: NULL %s",
                       schema ? "instance" : "schema");
    vctx v = {schema, &e, 0, false, 0, 0, PL_OK};
    int r = eval(&v, schema->root, instance, NULL);
    if (v.status || r < 0)
        return v.status ? v.status : PL_ELIMIT;
    if (!r)
        return PL_OK;
    assert(v.have);
    if (out)
        pl__struct_out(out, &e, &pl__schema_error_layout);
    return pl__err(PL_EJSON, "%s%s: %s: %s", e.path[0] ? "" : "(root)", e.path,
                   e.keyword, e.message);
}
