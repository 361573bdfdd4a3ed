/*
 * schema_compile.c -- compiling a JSON Schema (schema.h): its side table,
 * its patterns compiled (schema_regex.c), its "$ref"s resolved, its
 * keywords checked.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

pl__schema_aux *pl__schema_aux_find(const pl_schema *s, const cJSON *node)
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
static pl__schema_aux *aux_get(pl_schema *s, const cJSON *node, bool *added)
{
    *added = false;
    pl__schema_aux *a = pl__schema_aux_find(s, node);
    if (a)
        return a;
    if ((s->n + 1) * 2 > s->n_slots) {
        size_t ns = s->n_slots ? s->n_slots * 2 : 64;
        pl__schema_aux *slots = calloc(ns, sizeof *slots);
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
        pl__rx_free(s->slots[i].re);
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
    for (; w && n < PL__EXT_ARRAY_LEN(chain); w = w->up)
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
    PL__EXT_PRINTF(3, 4);

static int schema_err(int st, const where *w, const char *fmt, ...)
{
    char at[256], what[256];
    where_render(at, sizeof at, w);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pl_errorf(st, "JSON Schema at %s: %s", at, what);
}

static int compile_regex(pl_schema *s, const cJSON *node, const char *pattern,
                         const where *w)
{
    const char *bad = NULL;
    pl__rx *re = pl__rx_compile(pattern, &bad);
    if (!re)
        return bad ? schema_err(PL_EINVAL, w, "pattern \"%.*s\": %s",
                                pl__utf8_cut(pattern, 80), pattern, bad)
                   : pl_errorf(PL_ENOMEM, "out of memory compiling a pattern");
    bool added;
    pl__schema_aux *a = aux_get(s, node, &added);
    if (!a || a->re) { /* out of memory, or compiled already (reached twice) */
        pl__rx_free(re);
        return a ? PL_OK
                 : pl_errorf(PL_ENOMEM,
                             "out of memory compiling a JSON Schema");
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
    for (size_t i = 0; i < PL__EXT_ARRAY_LEN(type_names); i++)
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

/* Keywords of drafts 2019-09 and 2020-12 that change what a schema takes
 * and that the validator does not evaluate: ignoring one would pass what
 * the schema refuses, so compiling refuses the schema instead. */
static const char *const refused_keywords[][2] = {
    {"unevaluatedProperties", "the properties other keywords evaluated are "
                              "not tracked"},
    {"unevaluatedItems", "the items other keywords evaluated are not "
                         "tracked"},
    {"$dynamicRef", "dynamic references are not resolved"},
    {"$dynamicAnchor", "dynamic references are not resolved"},
    {"$recursiveRef", "recursive references are not resolved"},
    {"$recursiveAnchor", "recursive references are not resolved"},
    {"$anchor", "anchors are not resolved: \"$ref\" takes \"#\" or "
                "\"#/json/pointer\""},
    {"$id", "below the root it would move the base of the \"$ref\"s in it; "
            "only the root's is allowed"},
};

static bool refused_keyword(const char *k)
{
    /* "$id" is refused below the root only: the caller checks */
    for (size_t i = 0; i + 1 < PL__EXT_ARRAY_LEN(refused_keywords); i++)
        if (!strcmp(k, refused_keywords[i][0]))
            return true;
    return false;
}

static const char *refused_why(const char *k)
{
    for (size_t i = 0; i < PL__EXT_ARRAY_LEN(refused_keywords); i++)
        if (!strcmp(k, refused_keywords[i][0]))
            return refused_keywords[i][1];
    return "";
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
    pl__schema_aux *self = aux_get(s, node, &added);
    if (!self)
        return pl_errorf(PL_ENOMEM, "out of memory compiling a JSON Schema");
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
                ok = kw->child != NULL; /* [] would take nothing */
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
        } else if (!strcmp(k, "$schema")) {
            /* the root's was read before compiling (declared_draft()) */
            if (!cJSON_IsString(kw))
                st = schema_err(PL_EINVAL, &at, "expected a string");
        } else if (refused_keyword(k) || (w && !strcmp(k, "$id"))) {
            st = schema_err(PL_EINVAL, &at,
                            "\"%s\" is not supported (%s); the schema is "
                            "refused rather than validated without it",
                            k, refused_why(k));
        } else if (!strcmp(k, "maxLength") || !strcmp(k, "minLength") ||
                   !strcmp(k, "minContains") || !strcmp(k, "maxContains") ||
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
            /* beside prefixItems (2020-12) "items" is the schema of the
             * rest: an array there was read as a schema that takes all */
            if (cJSON_IsArray(kw) &&
                cJSON_GetObjectItemCaseSensitive(node, "prefixItems"))
                st = schema_err(PL_EINVAL, &at,
                                "beside \"prefixItems\", expected a schema");
            else if (cJSON_IsArray(kw) && s->draft2020)
                /* 2020-12 has no "items" tuple: reading one as draft 7
                 * does would check what the schema does not say */
                st = schema_err(PL_EINVAL, &at,
                                "under draft 2020-12 (the root's \"$schema\") "
                                "\"items\" is one schema, for the items past "
                                "\"prefixItems\": a tuple is \"prefixItems\"");
            else
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
                                "\"%.*s\" does not name a schema in this "
                                "document (only \"#\" and \"#/pointer\" "
                                "references are supported)",
                                pl__utf8_cut(kw->valuestring, 120),
                                kw->valuestring);
                break;
            }
            bool fresh;
            pl__schema_aux *a = aux_get(s, kw, &fresh);
            if (!a)
                return pl_errorf(PL_ENOMEM,
                                 "out of memory compiling a JSON Schema");
            a->target = t;
            where tat = {NULL, kw->valuestring + 2, 0};
            st = compile_node(s, t, kw->valuestring[1] ? &tat : NULL,
                              depth + 1);
            if (!st && !cJSON_IsObject(t) && !cJSON_IsBool(t))
                st = schema_err(PL_EINVAL, &at, "\"%.*s\" is not a schema",
                                pl__utf8_cut(kw->valuestring, 120),
                                kw->valuestring);
        }
    }
    return st;
}

/* The draft the root's "$schema" names, read before any keyword is
 * compiled: it changes what some mean wherever they stand (a "$schema"
 * below the root is not read, as before). */
static void declared_draft(pl_schema *s)
{
    const cJSON *d = cJSON_IsObject(s->root)
                         ? cJSON_GetObjectItemCaseSensitive(s->root, "$schema")
                         : NULL;
    if (!cJSON_IsString(d))
        return;
    s->draft2020 = strstr(d->valuestring, "/draft/2020-12/") != NULL;
    s->ref_siblings = s->draft2020 ||
                      strstr(d->valuestring, "/draft/2019-09/") != NULL;
}

int pl_schema_compile(pl_schema **out, const cJSON *schema)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_schema_compile: out is NULL");
    *out = NULL;
    if (!schema)
        return pl_errorf(PL_EINVAL, "pl_schema_compile: schema is NULL");
    if (!is_schema(schema))
        return pl_errorf(PL_EJSON, "JSON Schema at #: a schema must be an "
                                   "object or a boolean");
    if (!json_depth_ok(schema, 1))
        return pl_errorf(PL_ELIMIT, "JSON Schema nests deeper than %d levels",
                         PL_SCHEMA_MAX_DEPTH);
    pl_schema *s = calloc(1, sizeof *s);
    if (!s || !(s->root = cJSON_Duplicate(schema, true))) {
        free(s);
        return pl_errorf(PL_ENOMEM, "out of memory compiling a JSON Schema");
    }
    declared_draft(s);
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
        return pl_errorf(PL_EINVAL, "pl_schema_compile_text: out is NULL");
    *out = NULL;
    if (!text)
        return pl_errorf(PL_EINVAL, "pl_schema_compile_text: text is NULL");
    /* pl_json_parse(): where it fails is the text's own, not cJSON's
     * global error pointer, which another thread's parse moves; a string
     * cJSON would cut at a NUL is refused */
    cJSON *json = NULL;
    int st = pl_json_parse(&json, text, strlen(text));
    if (st == PL_EJSON)
        return pl_errorf(PL_EJSON, "JSON Schema is not valid JSON: %s",
                         pl_errmsg());
    if (st)
        return st;
    st = pl_schema_compile(out, json);
    cJSON_Delete(json);
    return st;
}
