/*
 * schema_eval.c -- validating a value against a compiled JSON Schema
 * (schema.h), within the bounds on depth and work the header describes.
 */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

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
    for (; p && n < PL__EXT_ARRAY_LEN(chain); p = p->up)
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
    PL__EXT_PRINTF(4, 5);

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
        v->status = pl_errorf(PL_ELIMIT,
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
            v->status = pl_errorf(PL_ELIMIT, "JSON Schema: values compared "
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

/* The characters of @p s as patterns read them (schema.h): a byte that is
 * no UTF-8 is one. */
static size_t code_points(const char *s)
{
    size_t n = 0;
    uint32_t c;
    while (*s) {
        s += (unsigned char)*s < 0x80 ? 1 : pl__utf8_next(s, &c);
        n++;
    }
    return n;
}

/* Does the pattern at @p node match @p str?  The match's work is taken
 * from the budget; past it (or out of memory) v->status says so. */
static bool regex_match(vctx *v, const cJSON *node, const char *str)
{
    pl__schema_aux *a = pl__schema_aux_find(v->s, node);
    assert(a && a->re); /* compiled with the schema */
    if (!spend(v, 1))
        return true; /* the bound reports it */
    uint64_t left = PL_SCHEMA_MAX_WORK - v->work;
    int r = pl__rx_match(a->re, str, &left);
    v->work = PL_SCHEMA_MAX_WORK - left;
    if (r == -2 && !v->status)
        v->status = pl_errorf(PL_ENOMEM, "out of memory matching a pattern");
    const char *pattern = cJSON_IsString(node) ? node->valuestring
                                               : node->string;
    if (r == -1 && !v->status)
        v->status = pl_errorf(PL_ELIMIT,
                              "JSON Schema validation gave up after %llu "
                              "units of work matching the pattern "
                              "\"%.*s\" (a long string, a large pattern)",
                              (unsigned long long)PL_SCHEMA_MAX_WORK,
                              pl__utf8_cut(pattern, 80), pattern);
    return r != 0;
}

static void describe(char *buf, size_t cap, const cJSON *i)
{
    if (cJSON_IsNumber(i))
        snprintf(buf, cap, "%.17g", i->valuedouble);
    else if (cJSON_IsString(i))
        snprintf(buf, cap, "\"%.*s%s\"", pl__utf8_cut(i->valuestring, 40),
                 i->valuestring, strlen(i->valuestring) > 40 ? "..." : "");
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
        return v->status
                   ? -1
                   : fail(v, at, "pattern",
                          "the string does not match the pattern "
                          "\"%.*s\"",
                          pl__utf8_cut(k->valuestring, 80), k->valuestring);
    return v->status ? -1 : 0;
}

static int eval_array(vctx *v, const cJSON *schema, const cJSON *inst,
                      const ipath *at)
{
    const cJSON *k;
    size_t len = count(inst);
    double n = (double)len;
    if (!spend(v, len / 64))
        return -1;
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
        /* 2020-12: at least minContains matches (1 unless given; 0 takes
         * an array with none), at most maxContains; the count stops once
         * it settles the answer */
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(schema,
                                                           "minContains");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(schema,
                                                           "maxContains");
        double want = mn ? mn->valuedouble : 1, found = 0;
        i = 0;
        for (const cJSON *it = inst->child; it; it = it->next, i++) {
            if (found >= want && (!mx || found > mx->valuedouble))
                break;
            ipath here = {at, NULL, i};
            int r = test(v, k, it, &here);
            if (r < 0)
                return -1;
            found += r;
        }
        if (found < want)
            return mn ? fail(v, at, "minContains",
                             "%.0f items match the \"contains\" schema, "
                             "fewer than minContains %.0f",
                             found, want)
                      : fail(v, at, "contains",
                             "no item matches the \"contains\" schema");
        if (mx && found > mx->valuedouble)
            return fail(v, at, "maxContains",
                        "more than maxContains %.0f items match the "
                        "\"contains\" schema",
                        mx->valuedouble);
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
    size_t members = count(inst), lookup = members / 16 + 1;
    double n = (double)members;
    if (!spend(v, members / 64))
        return -1;
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
    /* each name required, and each dependency, is looked up among the
     * instance's members */
    if ((k = cJSON_GetObjectItemCaseSensitive(schema, "required")) &&
        !spend(v, count(k) * lookup))
        return -1;
    if (k && !required_ok(inst, k, &missing))
        return fail(v, at, "required",
                    "the required property \"%.*s\" is missing",
                    pl__utf8_cut(missing, 80), missing);
    const char *dep_kws[] = {"dependencies", "dependentRequired",
                             "dependentSchemas"};
    for (size_t d = 0; d < PL__EXT_ARRAY_LEN(dep_kws); d++) {
        if (!(k = cJSON_GetObjectItemCaseSensitive(schema, dep_kws[d])))
            continue;
        for (const cJSON *dep = k->child; dep; dep = dep->next) {
            if (!spend(v, (cJSON_IsArray(dep) ? count(dep) + 1 : 1) * lookup))
                return -1;
            if (!cJSON_GetObjectItemCaseSensitive(inst, dep->string))
                continue;
            if (cJSON_IsArray(dep)) {
                if (!required_ok(inst, dep, &missing))
                    return fail(v, at, dep_kws[d],
                                "\"%.*s\" is present, so \"%.*s\" is "
                                "required",
                                pl__utf8_cut(dep->string, 80), dep->string,
                                pl__utf8_cut(missing, 80), missing);
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
    /* each member is looked up among "properties" */
    size_t per_member = props ? count(props) / 16 + 1 : 1;
    for (const cJSON *m = inst->child; m; m = m->next) {
        if (!spend(v, per_member))
            return -1;
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
                            "the property name \"%.*s\" is not allowed",
                            pl__utf8_cut(m->string, 80), m->string);
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
                            "the property \"%.*s\" is not allowed",
                            pl__utf8_cut(m->string, 80), m->string);
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
        v->status = pl_errorf(PL_ELIMIT,
                              "JSON Schema validation went deeper than %d "
                              "schemas (a $ref cycle?)",
                              PL_SCHEMA_MAX_DEPTH);
        return -1;
    }
    /* each of some 30 keywords is looked up among the schema's members:
     * a unit covers a small schema's, a large one's cost 2 a member */
    size_t keys = count(schema);
    if (!spend(v, keys <= 8 ? 1 : 2 * (uint64_t)keys))
        return -1;
    v->depth++;
    int r = 0;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(schema, "$ref");
    if (k) {
        pl__schema_aux *a = pl__schema_aux_find(v->s, k);
        assert(a && a->target); /* resolved when compiled */
        r = eval(v, a->target, inst, at);
        if (r || !v->s->ref_siblings) /* draft 7: its siblings ignored */
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
    PL__EXT_ONE_VERSION(PL_SCHEMA_ERROR);
    if (out && PL__EXT_VERSION_OK(out->version, pl_schema_error,
                                  PL_SCHEMA_ERROR, "pl_schema_validate"))
        return PL_EINVAL;
    if (out)
        *out = (pl_schema_error)PL_SCHEMA_ERROR_INIT;
    if (!schema || !instance)
        return pl_errorf(PL_EINVAL, "pl_schema_validate: NULL %s",
                         schema ? "instance" : "schema");
    pl_schema_error scratch = PL_SCHEMA_ERROR_INIT;
    vctx v = {schema, out ? out : &scratch, 0, false, 0, 0, PL_OK};
    int r = eval(&v, schema->root, instance, NULL);
    if (v.status || r < 0)
        return v.status ? v.status : PL_ELIMIT;
    if (!r)
        return PL_OK;
    assert(v.have);
    return pl_errorf(PL_EJSON, "%s%s: %s: %s", v.err->path[0] ? "" : "(root)",
                     v.err->path, v.err->keyword, v.err->message);
}
