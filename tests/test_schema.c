/*
 * test_schema.c -- the JSON Schema validator (core/ext/schema_*.c) against the
 * official JSON-Schema-Test-Suite (Debian package json-schema-test-suite,
 * draft 7 files, read at run time), plus its bounds on hostile input and
 * its errors.
 *
 * Every test of every file of a keyword we claim must pass, except the
 * cases in the skip list below, each with its reason.  A skip that no
 * longer exists in the suite, or that now passes, fails the test too, so
 * the list cannot rot.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PL_SCHEMA_SUITE_DIR
#define PL_SCHEMA_SUITE_DIR "/usr/share/json-schema-test-suite/tests/draft7"
#endif

/* The suite's files for the keywords we claim (docs/guide.md lists them). */
static const char *const suite_files[] = {
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "boolean_schema",
    "const",
    "contains",
    "default",
    "dependencies",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "if-then-else",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "propertyNames",
    "ref",
    "required",
    "type",
    "uniqueItems",
    "optional/bignum",
    "optional/zeroTerminatedFloats",
    "optional/ecmascript-regex",
};

/*
 * Cases we do not claim, by file, group description and (NULL: every test
 * of the group) test description.
 */
typedef struct skip {
    const char *file, *group, *test, *reason;
    int seen, failed;
} skip;

static skip skips[] = {
    {"ref", "remote ref, containing refs itself", NULL,
     "remote reference (the draft 7 meta-schema by URL)", 0, 0},
    {"ref", "Recursive references between schemas", NULL,
     "\"$id\" below the root is refused (base URIs are not resolved)", 0, 0},
    {"optional/ecmascript-regex", "ECMA 262 regex non-compliance", NULL,
     "\"format\" is not asserted", 0, 0},
};

static skip *find_skip(const char *file, const char *group, const char *test)
{
    for (size_t i = 0; i < sizeof skips / sizeof skips[0]; i++)
        if (!strcmp(skips[i].file, file) && !strcmp(skips[i].group, group) &&
            (!skips[i].test || !strcmp(skips[i].test, test)))
            return &skips[i];
    return NULL;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f,
                       "cannot open %s (install json-schema-test-suite: "
                       "scripts/deps.sh --test)",
                       path);
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = 0;
    return buf;
}

Test(schema, official_suite_draft7)
{
    int pass = 0, skipped = 0, failed = 0, total = 0;
    for (size_t fi = 0; fi < sizeof suite_files / sizeof suite_files[0]; fi++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.json", PL_SCHEMA_SUITE_DIR,
                 suite_files[fi]);
        char *text = slurp(path);
        cJSON *groups = cJSON_Parse(text);
        free(text);
        cr_assert(cJSON_IsArray(groups), "%s is not a JSON array", path);
        const cJSON *g;
        cJSON_ArrayForEach(g, groups)
        {
            const char *gdesc =
                cJSON_GetObjectItemCaseSensitive(g, "description")->valuestring;
            const cJSON *sch = cJSON_GetObjectItemCaseSensitive(g, "schema");
            pl_schema *s = NULL;
            int cst = pl_schema_compile(&s, sch);
            char cmsg[512];
            snprintf(cmsg, sizeof cmsg, "%s", pl_errmsg());
            const cJSON *t;
            cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(g, "tests"))
            {
                const char *tdesc = cJSON_GetObjectItemCaseSensitive(
                                        t, "description")
                                        ->valuestring;
                bool want = cJSON_IsTrue(
                    cJSON_GetObjectItemCaseSensitive(t, "valid"));
                const cJSON *data = cJSON_GetObjectItemCaseSensitive(t, "data");
                total++;
                bool ok;
                char why[600];
                if (cst) {
                    ok = false;
                    snprintf(why, sizeof why, "schema refused: %s", cmsg);
                } else {
                    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
                    int vst = pl_schema_validate(&e, s, data);
                    ok = (vst == PL_OK) == want &&
                         (vst == PL_OK || vst == PL_EJSON);
                    snprintf(why, sizeof why, "got %s (%s %s: %s)",
                             pl_status_name(vst), e.path, e.keyword, e.message);
                }
                skip *sk = find_skip(suite_files[fi], gdesc, tdesc);
                if (sk) {
                    sk->seen++;
                    skipped++;
                    if (ok)
                        pass++; /* counted, but not required */
                    else
                        sk->failed++;
                    continue;
                }
                if (ok) {
                    pass++;
                } else {
                    failed++;
                    cr_log_error("%s.json: \"%s\" / \"%s\": expected %s, %s",
                                 suite_files[fi], gdesc, tdesc,
                                 want ? "valid" : "invalid", why);
                }
            }
            pl_schema_free(s);
        }
        cJSON_Delete(groups);
    }
    for (size_t i = 0; i < sizeof skips / sizeof skips[0]; i++)
        cr_expect(skips[i].seen > 0,
                  "skip list: %s.json \"%s\" is not in the suite any more",
                  skips[i].file, skips[i].group);
    for (size_t i = 0; i < sizeof skips / sizeof skips[0]; i++)
        cr_expect(skips[i].failed > 0,
                  "skip list: %s.json \"%s\" passes now: take it off "
                  "the list",
                  skips[i].file, skips[i].group);
    printf("JSON-Schema-Test-Suite draft7: %d of %d tests pass; %d failed; "
           "%d in the skip list\n",
           pass, total, failed, skipped);
    fflush(stdout);
    cr_expect_eq(failed, 0, "%d suite tests failed", failed);
}

/* ------------------------------------------------------------------------ */
/* Errors: where and why                                                    */
/* ------------------------------------------------------------------------ */

static pl_schema *compile(const char *text)
{
    pl_schema *s = NULL;
    int st = pl_schema_compile_text(&s, text);
    cr_assert_eq(st, PL_OK, "compile %s: %s", text, pl_errmsg());
    return s;
}

/* Validate @p inst_text; return the status, filling *e. */
static int check(pl_schema_error *e, const pl_schema *s, const char *inst_text)
{
    cJSON *inst = cJSON_Parse(inst_text);
    cr_assert_not_null(inst, "bad test JSON %s", inst_text);
    int st = pl_schema_validate(e, s, inst);
    cJSON_Delete(inst);
    return st;
}

static void expect_fail(const char *schema, const char *inst, const char *path,
                        const char *keyword)
{
    pl_schema *s = compile(schema);
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_expect_eq(check(&e, s, inst), PL_EJSON, "%s should fail %s", inst,
                 schema);
    cr_expect_str_eq(e.path, path, "%s against %s", inst, schema);
    cr_expect_str_eq(e.keyword, keyword, "%s against %s", inst, schema);
    cr_expect(e.message[0] != 0);
    pl_schema_free(s);
}

static void expect_pass(const char *schema, const char *inst)
{
    pl_schema *s = compile(schema);
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_expect_eq(check(&e, s, inst), PL_OK, "%s against %s: %s %s %s", inst,
                 schema, e.path, e.keyword, e.message);
    cr_expect_str_eq(e.keyword, "");
    pl_schema_free(s);
}

Test(schema, first_error_names_path_keyword_and_reason)
{
    const char *sch = "{\"type\":\"object\",\"properties\":{\"items\":{"
                      "\"type\":\"array\",\"items\":{\"type\":\"object\","
                      "\"required\":[\"name\"]}}}}";
    pl_schema *s = compile(sch);
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_assert_eq(check(&e, s, "{\"items\":[{\"name\":1},{}]}"), PL_EJSON);
    cr_expect_str_eq(e.path, "/items/1");
    cr_expect_str_eq(e.keyword, "required");
    cr_expect(strstr(e.message, "\"name\"") != NULL, "%s", e.message);
    cr_expect(strstr(pl_errmsg(), "/items/1") != NULL, "%s", pl_errmsg());
    /* a NULL out is allowed; the message still says it */
    cJSON *bad = cJSON_Parse("[]");
    cr_expect_eq(pl_schema_validate(NULL, s, bad), PL_EJSON);
    cr_expect(strstr(pl_errmsg(), "type") != NULL, "%s", pl_errmsg());
    cJSON_Delete(bad);
    pl_schema_free(s);

    /* JSON pointer escapes in the path */
    expect_fail("{\"properties\":{\"a/b~c\":{\"type\":\"string\"}}}",
                "{\"a/b~c\":1}", "/a~1b~0c", "type");
    expect_fail("false", "1", "", "false");
    expect_fail("{\"anyOf\":[{\"type\":\"string\"},{\"minimum\":3}]}", "1", "",
                "anyOf");
    expect_fail("{\"oneOf\":[{\"minimum\":0},{\"maximum\":3}]}", "1", "",
                "oneOf");
    expect_fail("{\"not\":{\"type\":\"integer\"}}", "1", "", "not");
    expect_fail("{\"if\":{\"minimum\":3},\"then\":{\"multipleOf\":2}}", "5", "",
                "multipleOf");
    expect_fail("{\"items\":{\"uniqueItems\":true}}",
                "[[1],[1,{\"a\":1},"
                "{\"a\":1.0}]]",
                "/1", "uniqueItems");
    expect_fail("{\"patternProperties\":{\"^x_\":{\"type\":\"null\"}}}",
                "{\"x_1\":null,\"x_2\":0}", "/x_2", "type");
    expect_fail("{\"propertyNames\":{\"maxLength\":2}}", "{\"abc\":1}", "/abc",
                "propertyNames");
    expect_fail("{\"contains\":{\"const\":{\"k\":[1,2]}}}", "[{\"k\":[2,1]}]",
                "", "contains");
}

Test(schema, strings_count_code_points)
{
    /* "é€😀": 3 code points in 9 bytes */
    const char *three = "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"";
    expect_pass("{\"maxLength\":3,\"minLength\":3}", three);
    expect_fail("{\"maxLength\":2}", three, "", "maxLength");
    expect_fail("{\"minLength\":4}", three, "", "minLength");
}

Test(schema, ecma_escapes_are_translated)
{
    expect_pass("{\"pattern\":\"^\\\\d{3}-\\\\w+$\"}", "\"123-ab_c\"");
    expect_fail("{\"pattern\":\"^\\\\d{3}$\"}", "\"12a\"", "", "pattern");
    expect_pass("{\"pattern\":\"^[\\\\d.]+\\\\s\\\\S$\"}", "\"1.5 x\"");
    expect_pass("{\"pattern\":\"a\\\\.b\"}", "\"xa.by\"");
    expect_fail("{\"pattern\":\"a\\\\.b\"}", "\"axb\"", "", "pattern");
}

Test(schema, keywords_from_2020_12)
{
    const char *tuple = "{\"prefixItems\":[{\"type\":\"string\"},"
                        "{\"type\":\"number\"}],\"items\":false}";
    expect_pass(tuple, "[\"a\",1]");
    expect_pass(tuple, "[\"a\"]");
    expect_fail(tuple, "[\"a\",\"b\"]", "/1", "type");
    expect_fail(tuple, "[\"a\",1,null]", "/2", "false");
    const char *dep = "{\"dependentRequired\":{\"card\":[\"cvv\"]},"
                      "\"dependentSchemas\":{\"cvv\":{\"required\":"
                      "[\"card\"]}}}";
    expect_pass(dep, "{\"card\":1,\"cvv\":2}");
    expect_pass(dep, "{}");
    expect_fail(dep, "{\"card\":1}", "", "dependentRequired");
    expect_fail(dep, "{\"cvv\":1}", "", "required");
    const char *defs = "{\"$defs\":{\"pos\":{\"type\":\"integer\","
                       "\"exclusiveMinimum\":0}},\"properties\":{\"n\":"
                       "{\"$ref\":\"#/$defs/pos\"}}}";
    expect_pass(defs, "{\"n\":1}");
    expect_fail(defs, "{\"n\":0}", "/n", "exclusiveMinimum");
}

/* ------------------------------------------------------------------------ */
/* Schemas that are not schemas                                             */
/* ------------------------------------------------------------------------ */

static void expect_refused(const char *text, int status, const char *where)
{
    pl_schema *s = (pl_schema *)1;
    cr_expect_eq(pl_schema_compile_text(&s, text), status, "%s: %s", text,
                 pl_errmsg());
    cr_expect_null(s);
    if (where)
        cr_expect(strstr(pl_errmsg(), where) != NULL, "%s: want %s in: %s",
                  text, where, pl_errmsg());
}

Test(schema, bad_schemas_are_refused_naming_where)
{
    expect_refused("{\"minimum\":\"x\"}", PL_EINVAL, "#/minimum");
    expect_refused("{\"properties\":{\"a\":{\"maxLength\":-1}}}", PL_EINVAL,
                   "#/properties/a/maxLength");
    expect_refused("{\"items\":[{\"type\":\"strng\"}]}", PL_EINVAL,
                   "#/items/0/type");
    expect_refused("{\"allOf\":[]}", PL_EINVAL, "#/allOf");
    expect_refused("{\"not\":3}", PL_EINVAL, "#/not");
    expect_refused("{\"multipleOf\":0}", PL_EINVAL, "#/multipleOf");
    expect_refused("{\"required\":[1]}", PL_EINVAL, "#/required");
    expect_refused("{\"$ref\":\"http://example.com/s.json\"}", PL_EINVAL,
                   "#/$ref");
    expect_refused("{\"$ref\":\"#/definitions/nope\"}", PL_EINVAL,
                   "#/definitions/nope");
    expect_refused("{\"$ref\":\"#/definitions/%zz\"}", PL_EINVAL, "#/$ref");
    expect_refused("{\"definitions\":{\"n\":1},\"$ref\":\"#/definitions/n\"}",
                   PL_EINVAL, "#/definitions/n");
    expect_refused("{\"pattern\":\"(?=a)b\"}", PL_EINVAL, "lookaround");
    expect_refused("{\"pattern\":\"(a)\\\\1\"}", PL_EINVAL, "backreference");
    expect_refused("{\"pattern\":\"a+?\"}", PL_EINVAL, "lazy");
    expect_refused("{\"pattern\":\"[a\"}", PL_EINVAL, "#/pattern");
    expect_refused("{\"patternProperties\":{\"(\":{}}}", PL_EINVAL,
                   "#/patternProperties/(");
    expect_refused("{\"type\":", PL_EJSON, "not valid JSON");
    /* cJSON would cut the string at its NUL: "a" would be the constant */
    expect_refused("{\"const\":\"a\\u0000b\"}", PL_EJSON,
                   "the string at '/const' holds \\u0000 (at byte 11)");
    expect_refused("[]", PL_EJSON, "object or a boolean");
    expect_refused("3", PL_EJSON, NULL);

    pl_schema *s = NULL;
    cr_expect_eq(pl_schema_compile(NULL, pl_json_empty()), PL_EINVAL);
    cr_expect_eq(pl_schema_compile(&s, NULL), PL_EINVAL);
    cr_expect_eq(pl_schema_compile_text(&s, NULL), PL_EINVAL);
    s = compile("true");
    cr_expect_eq(pl_schema_validate(NULL, s, NULL), PL_EINVAL);
    cr_expect_eq(pl_schema_validate(NULL, NULL, pl_json_empty()), PL_EINVAL);
    pl_schema_free(s);
    pl_schema_free(NULL);
}

/* ------------------------------------------------------------------------ */
/* Hostile schemas and instances: bounded, never a crash                    */
/* ------------------------------------------------------------------------ */

/* {"items": {"items": ... {}}} nested @p n deep */
static char *nested_items(int n)
{
    size_t cap = (size_t)n * 12 + 8, len = 0;
    char *t = malloc(cap);
    cr_assert_not_null(t);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(t + len, cap - len, "{\"items\":");
    len += (size_t)snprintf(t + len, cap - len, "{}");
    for (int i = 0; i < n; i++)
        t[len++] = '}';
    t[len] = 0;
    return t;
}

Test(schema, deep_schemas_hit_the_depth_limit)
{
    char *ok = nested_items(PL_SCHEMA_MAX_DEPTH / 2 - 2);
    pl_schema *s = compile(ok);
    pl_schema_free(s);
    free(ok);
    char *deep = nested_items(PL_SCHEMA_MAX_DEPTH + 10);
    expect_refused(deep, PL_ELIMIT, "deeper");
    free(deep);
    /* a deep tree built in memory, past cJSON's parse limit */
    cJSON *root = cJSON_CreateObject(), *cur = root;
    for (int i = 0; i < 5000; i++) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddItemToObject(cur, "not", next);
        cur = next;
    }
    s = (pl_schema *)1;
    cr_expect_eq(pl_schema_compile(&s, root), PL_ELIMIT, "%s", pl_errmsg());
    cr_expect_null(s);
    cJSON_Delete(root);
}

Test(schema, ref_cycles_end_at_the_bound)
{
    pl_schema *s = compile("{\"$ref\":\"#\"}");
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_expect_eq(check(&e, s, "1"), PL_ELIMIT);
    cr_expect(strstr(pl_errmsg(), "deeper") != NULL, "%s", pl_errmsg());
    pl_schema_free(s);
    s = compile("{\"definitions\":{\"a\":{\"$ref\":\"#/definitions/b\"},"
                "\"b\":{\"not\":{\"$ref\":\"#/definitions/a\"}}},"
                "\"$ref\":\"#/definitions/a\"}");
    cr_expect_eq(check(&e, s, "{}"), PL_ELIMIT);
    pl_schema_free(s);
    /* a legitimate recursive schema over a finite instance is fine */
    s = compile("{\"type\":\"object\",\"properties\":{\"next\":"
                "{\"$ref\":\"#\"}},\"required\":[\"v\"]}");
    cr_expect_eq(check(&e, s, "{\"v\":1,\"next\":{\"v\":2,\"next\":{}}}"),
                 PL_EJSON);
    cr_expect_str_eq(e.path, "/next/next");
    cr_expect_eq(check(&e, s, "{\"v\":1,\"next\":{\"v\":2}}"), PL_OK);
    pl_schema_free(s);
}

Test(schema, exponential_schemas_hit_the_work_bound)
{
    /* d0 = anyOf[d1, d1], ..., d39 = false: 2^40 paths without a bound */
    char text[8192];
    size_t len = (size_t)snprintf(text, sizeof text, "{\"definitions\":{");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "\"d%d\":{\"anyOf\":[{\"$ref\":"
                                "\"#/definitions/d%d\"},{\"$ref\":"
                                "\"#/definitions/d%d\"}]},",
                                i, i + 1, i + 1);
    snprintf(text + len, sizeof text - len,
             "\"d40\":false},\"$ref\":\"#/definitions/d0\"}");
    pl_schema *s = compile(text);
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_expect_eq(check(&e, s, "1"), PL_ELIMIT);
    cr_expect(strstr(pl_errmsg(), "work") != NULL, "%s", pl_errmsg());
    pl_schema_free(s);
}

Test(schema, huge_numbers_and_long_strings)
{
    expect_pass("{\"type\":\"number\",\"maximum\":1e308}", "1e308");
    expect_fail("{\"type\":\"integer\",\"maximum\":1e300}", "1e308", "",
                "maximum");
    expect_fail("{\"multipleOf\":0.123456789}", "1e308", "", "multipleOf");
    expect_pass("{\"multipleOf\":0.01}", "0.07");
    expect_pass("{\"type\":\"integer\"}", "1e300");
    /* a number past double's range parses to infinity: not an integer,
     * not finite, and nothing crashes */
    cJSON *inf = cJSON_CreateNumber(HUGE_VAL);
    pl_schema *s = compile("{\"type\":\"integer\"}");
    cr_expect_eq(pl_schema_validate(NULL, s, inf), PL_EJSON);
    pl_schema_free(s);
    s = compile("{\"multipleOf\":3,\"maximum\":10}");
    cr_expect_eq(pl_schema_validate(NULL, s, inf), PL_EJSON);
    pl_schema_free(s);
    cJSON_Delete(inf);

    size_t n = 4u << 20; /* 4 MiB */
    char *big = malloc(n + 1);
    cr_assert_not_null(big);
    memset(big, 'a', n);
    big[n] = 0;
    cJSON *str = cJSON_CreateString(big);
    free(big);
    s = compile("{\"maxLength\":10,\"pattern\":\"b\"}");
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_expect_eq(pl_schema_validate(&e, s, str), PL_EJSON);
    cr_expect_str_eq(e.keyword, "maxLength");
    pl_schema_free(s);
    s = compile("{\"pattern\":\"^a*$\",\"minLength\":4194304}");
    cr_expect_eq(pl_schema_validate(&e, s, str), PL_OK, "%s", e.message);
    pl_schema_free(s);
    cJSON_Delete(str);
}

/* A keyword is looked up among its schema's members, a property among
 * "properties", a required name among the instance's members: each a scan.
 * Once uncounted, a schema of 100,000 members applied to each of 100,000
 * items took hours; "properties" of 50,000 names against as many members
 * seconds.  Now the scans are work, and past the budget PL_ELIMIT. */
Test(schema, lookups_are_counted_as_work)
{
    cJSON *wide = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cr_assert(wide && arr);
    char name[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(name, sizeof name, "k%d", i);
        cr_assert(cJSON_AddTrueToObject(wide, name));
        cr_assert(cJSON_AddItemToArray(arr, cJSON_CreateNumber(i)));
    }
    cJSON *sch = cJSON_CreateObject();
    cr_assert(sch && cJSON_AddItemToObject(sch, "items", wide));
    pl_schema *s = NULL;
    cr_assert_eq(pl_schema_compile(&s, sch), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_schema_validate(NULL, s, arr), PL_ELIMIT);
    pl_schema_free(s);
    cJSON_Delete(sch);
    cJSON_Delete(arr);

    cJSON *props = cJSON_CreateObject(), *inst = cJSON_CreateObject();
    cr_assert(props && inst);
    for (int i = 0; i < 50000; i++) {
        snprintf(name, sizeof name, "p%d", i);
        cr_assert(cJSON_AddTrueToObject(props, name));
        cr_assert(cJSON_AddNumberToObject(inst, name, i));
    }
    sch = cJSON_CreateObject();
    cr_assert(sch && cJSON_AddItemToObject(sch, "properties", props));
    cr_assert_eq(pl_schema_compile(&s, sch), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_schema_validate(NULL, s, inst), PL_ELIMIT);
    pl_schema_free(s);
    cJSON_Delete(sch);
    /* a few properties over the same many members: within the bound */
    cr_assert_eq(pl_schema_compile_text(
                     &s, "{\"properties\":{\"p1\":{\"type\":\"number\"}},"
                         "\"required\":[\"p1\",\"p49999\"]}"),
                 PL_OK);
    cr_expect_eq(pl_schema_validate(NULL, s, inst), PL_OK, "%s", pl_errmsg());
    pl_schema_free(s);
    cJSON_Delete(inst);
}

/* Beside "prefixItems", "items" is the schema of the items past the
 * prefix (2020-12): an array there was applied as a schema, one that
 * takes anything, so [1,2] passed "items":[false]. */
Test(schema, an_items_array_beside_prefix_items_is_refused)
{
    expect_refused("{\"prefixItems\":[true],\"items\":[false]}", PL_EINVAL,
                   "#/items");
    expect_fail("{\"prefixItems\":[true],\"items\":false}", "[1,2]", "/1",
                "false");
}

Test(schema, large_and_deep_instances_are_bounded)
{
    /* an instance nested deeper than the bound, against a recursive schema */
    cJSON *root = cJSON_CreateArray(), *cur = root;
    for (int i = 0; i < 10000; i++) {
        cJSON *next = cJSON_CreateArray();
        cJSON_AddItemToArray(cur, next);
        cur = next;
    }
    pl_schema *s = compile("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}");
    cr_expect_eq(pl_schema_validate(NULL, s, root), PL_ELIMIT);
    pl_schema_free(s);
    /* two deep equal items compared by uniqueItems */
    cJSON *pair = cJSON_CreateArray();
    cJSON_AddItemToArray(pair, root);
    cJSON_AddItemToArray(pair, cJSON_Duplicate(root, 1));
    s = compile("{\"uniqueItems\":true}");
    cr_expect_eq(pl_schema_validate(NULL, s, pair), PL_ELIMIT);
    cJSON_Delete(pair);
    /* 2000 distinct items: 2 million comparisons, within the bound */
    cJSON *many = cJSON_CreateArray();
    for (int i = 0; i < 2000; i++)
        cJSON_AddItemToArray(many, cJSON_CreateNumber(i));
    cr_expect_eq(pl_schema_validate(NULL, s, many), PL_OK, "%s", pl_errmsg());
    cJSON_AddItemToArray(many, cJSON_CreateNumber(7));
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_expect_eq(pl_schema_validate(&e, s, many), PL_EJSON);
    cr_expect(strstr(e.message, "7 and 2000") != NULL, "%s", e.message);
    cJSON_Delete(many);
    pl_schema_free(s);
}

/* Whether @p s is well-formed UTF-8 (no overlong forms, no surrogates). */
static bool utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned n = *p < 0x80                 ? 0
                     : *p >= 0xc2 && *p < 0xe0 ? 1
                     : *p >= 0xe0 && *p < 0xf0 ? 2
                     : *p >= 0xf0 && *p < 0xf5 ? 3
                                               : 9;
        if (n == 9)
            return false;
        uint32_t c = n ? *p & (0x3f >> n) : *p;
        for (unsigned k = 1; k <= n; k++) {
            if ((p[k] & 0xc0) != 0x80)
                return false;
            c = c << 6 | (p[k] & 0x3f);
        }
        if ((n == 2 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) ||
            (n == 3 && (c < 0x10000 || c > 0x10ffff)))
            return false;
        p += n + 1;
    }
    return true;
}

/* A name or a value quoted in a message is cut at a character, never in
 * one: the message stays UTF-8 whatever the instance holds. */
Test(schema, messages_cut_names_at_characters)
{
    char name[160] = "a"; /* "a", then 60 of U+00E9: byte 80 is inside one */
    for (size_t i = 0; i < 60; i++)
        memcpy(name + 1 + 2 * i, "\xc3\xa9", 3);
    char sch[512], inst[3][512];
    snprintf(sch, sizeof sch,
             "{\"required\":[\"%s\"],\"additionalProperties\":false,"
             "\"properties\":{\"%s\":{\"const\":1}}}",
             name, name);
    snprintf(inst[0], sizeof inst[0], "{}");
    snprintf(inst[1], sizeof inst[1], "{\"%s\":1,\"b%s\":2}", name, name);
    snprintf(inst[2], sizeof inst[2], "{\"%s\":\"%s\"}", name, name);
    pl_schema *s = compile(sch);
    for (size_t i = 0; i < 3; i++) {
        pl_schema_error e = PL_SCHEMA_ERROR_INIT;
        cr_assert_eq(check(&e, s, inst[i]), PL_EJSON, "case %zu", i);
        cr_expect(utf8_ok(e.message), "case %zu: %s", i, e.message);
        cr_expect(utf8_ok(pl_errmsg()), "case %zu: %s", i, pl_errmsg());
        cr_expect(strstr(e.message, "a\xc3\xa9") != NULL, "%s", e.message);
    }
    pl_schema_free(s);
}

/* A path longer than pl_schema_error.path holds is cut, a prefix of the
 * pointer, NUL-terminated. */
Test(schema, a_long_path_is_cut_short)
{
    char key[301], sch[400], inst[400], want[302];
    memset(key, 'k', 300);
    key[300] = '\0';
    snprintf(sch, sizeof sch, "{\"properties\":{\"%s\":{\"type\":\"string\"}}}",
             key);
    snprintf(inst, sizeof inst, "{\"%s\":1}", key);
    snprintf(want, sizeof want, "/%s", key);
    pl_schema *s = compile(sch);
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    cr_assert_eq(check(&e, s, inst), PL_EJSON);
    size_t n = strlen(e.path);
    cr_expect_lt(n, PL_SCHEMA_PATH_MAX);
    cr_expect_gt(n, 200, "cut near the end, not emptied: %s", e.path);
    cr_expect_eq(strncmp(e.path, want, n), 0, "a prefix: %s", e.path);
    cr_expect_str_eq(e.keyword, "type");
    pl_schema_free(s);
}
