/*
 * test_schema_keywords.c -- the JSON Schema keywords past draft 7
 * (core/ext/schema_*.c): minContains/maxContains with "contains", and the
 * keywords the validator does not implement (unevaluated*, dynamic and
 * recursive references, anchors, "$id" below the root), which compiling
 * refuses, naming the keyword and where, rather than ignore; and a known
 * keyword whose value has the wrong type, refused the same way.
 */
#include "support.h"

#include <string.h>

/* @p inst against @p schema: PL_OK or PL_EJSON, with e's keyword. */
static int run(const char *schema, const char *inst, pl_schema_error *e)
{
    pl_schema *s = NULL;
    cr_assert_eq(pl_schema_compile_text(&s, schema), PL_OK, "%s: %s", schema,
                 pl_errmsg());
    cJSON *i = cJSON_Parse(inst);
    cr_assert_not_null(i, "bad test JSON %s", inst);
    *e = (pl_schema_error)PL_SCHEMA_ERROR_INIT;
    int st = pl_schema_validate(e, s, i);
    cJSON_Delete(i);
    pl_schema_free(s);
    return st;
}

static void valid(const char *schema, const char *inst)
{
    pl_schema_error e;
    cr_expect_eq(run(schema, inst, &e), PL_OK, "%s against %s: %s %s", inst,
                 schema, e.keyword, e.message);
}

static void invalid(const char *schema, const char *inst, const char *kw)
{
    pl_schema_error e;
    cr_expect_eq(run(schema, inst, &e), PL_EJSON, "%s should fail %s", inst,
                 schema);
    cr_expect_str_eq(e.keyword, kw, "%s against %s: %s", inst, schema,
                     e.message);
}

/* Compiling @p schema is refused, PL_EINVAL, the message holding @p where
 * (a JSON pointer) and @p what. */
static void refused(const char *schema, const char *where, const char *what)
{
    pl_schema *s = (pl_schema *)1;
    cr_expect_eq(pl_schema_compile_text(&s, schema), PL_EINVAL, "%s: %s",
                 schema, pl_errmsg());
    cr_expect_null(s, "%s", schema);
    cr_expect(strstr(pl_errmsg(), where) != NULL, "%s: want %s in: %s", schema,
              where, pl_errmsg());
    cr_expect(strstr(pl_errmsg(), what) != NULL, "%s: want %s in: %s", schema,
              what, pl_errmsg());
}

/* The cases of the suite's draft 2020-12 minContains.json and
 * maxContains.json (not in Debian's package, which stops at draft 7). */
Test(schema_keywords, min_contains_and_max_contains)
{
    const char *min2 = "{\"contains\":{\"const\":1},\"minContains\":2}";
    invalid(min2, "[]", "minContains");
    invalid(min2, "[1]", "minContains");
    invalid(min2, "[2,1,2]", "minContains");
    valid(min2, "[1,1]");
    valid(min2, "[1,2,1,1]");
    /* minContains 0: "contains" holds with no match, even on [] */
    const char *min0 = "{\"contains\":{\"const\":1},\"minContains\":0}";
    valid(min0, "[]");
    valid(min0, "[2]");
    const char *max1 = "{\"contains\":{\"const\":1},\"maxContains\":1}";
    valid(max1, "[1]");
    valid(max1, "[1,2]");
    invalid(max1, "[1,1]", "maxContains");
    invalid(max1, "[]", "contains"); /* minContains is 1 by default */
    const char *both = "{\"contains\":{\"const\":1},\"minContains\":2,"
                       "\"maxContains\":3}";
    invalid(both, "[1]", "minContains");
    valid(both, "[1,1]");
    valid(both, "[1,2,1,1]");
    invalid(both, "[1,1,1,1]", "maxContains");
    /* minContains greater than maxContains: nothing passes */
    const char *crossed = "{\"contains\":{\"const\":1},\"minContains\":3,"
                          "\"maxContains\":1}";
    invalid(crossed, "[1,1,1]", "maxContains");
    invalid(crossed, "[1]", "minContains");
    /* minContains 0 with maxContains: at most that many, none allowed */
    const char *zero_max = "{\"contains\":{\"const\":1},\"minContains\":0,"
                           "\"maxContains\":1}";
    valid(zero_max, "[]");
    invalid(zero_max, "[1,1]", "maxContains");
    /* without "contains" both are ignored, as the draft says */
    valid("{\"minContains\":2,\"maxContains\":0}", "[1]");
    /* non-arrays are not checked */
    valid(min2, "{\"a\":1}");
    /* the values: non-negative integers (1.0 is one) */
    valid("{\"contains\":{\"const\":1},\"maxContains\":1.0}", "[1]");
    refused("{\"contains\":{},\"minContains\":-1}", "#/minContains",
            "non-negative integer");
    refused("{\"contains\":{},\"maxContains\":\"1\"}", "#/maxContains",
            "non-negative integer");
    refused("{\"contains\":{},\"maxContains\":1.5}", "#/maxContains",
            "non-negative integer");
}

/* A keyword the validator does not evaluate would let through what the
 * schema refuses: compiling refuses it, naming it and where it stands. */
Test(schema_keywords, unimplemented_keywords_are_refused)
{
    refused("{\"type\":\"object\",\"properties\":{\"a\":{}},"
            "\"unevaluatedProperties\":false}",
            "#/unevaluatedProperties", "unevaluatedProperties");
    refused("{\"properties\":{\"x\":{\"prefixItems\":[{}],"
            "\"unevaluatedItems\":false}}}",
            "#/properties/x/unevaluatedItems", "unevaluatedItems");
    refused("{\"$defs\":{\"n\":{\"$dynamicAnchor\":\"n\"}},"
            "\"$dynamicRef\":\"#n\"}",
            "#/", "$dynamicAnchor");
    refused("{\"items\":{\"$dynamicRef\":\"#n\"}}", "#/items/$dynamicRef",
            "$dynamicRef");
    refused("{\"$defs\":{\"a\":{\"$anchor\":\"a\"}}}", "#/$defs/a/$anchor",
            "$anchor");
    refused("{\"anyOf\":[{\"$recursiveRef\":\"#\"}]}",
            "#/anyOf/0/$recursiveRef", "$recursiveRef");
    refused("{\"$recursiveAnchor\":true}", "#/$recursiveAnchor",
            "$recursiveAnchor");
    /* "$id" below the root moves the base of the "$ref"s inside it */
    refused("{\"definitions\":{\"a\":{\"$id\":\"http://x.example/a\"}}}",
            "#/definitions/a/$id", "$id");
    /* at the root it names the document: "#" references are unchanged */
    valid("{\"$id\":\"http://x.example/s\",\"$schema\":"
          "\"https://json-schema.org/draft/2020-12/schema\","
          "\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"}},"
          "\"$defs\":{\"n\":{\"type\":\"integer\"}}}",
          "{\"a\":1}");
    /* an annotation unknown to the validator is still ignored, and a
     * property merely named like a keyword is a property */
    valid("{\"x-note\":{\"unevaluatedProperties\":false},\"title\":\"t\"}",
          "{\"b\":1}");
    valid("{\"properties\":{\"$anchor\":{\"type\":\"string\"},"
          "\"unevaluatedItems\":{}}}",
          "{\"$anchor\":\"a\",\"unevaluatedItems\":1}");
    invalid("{\"properties\":{\"$anchor\":{\"type\":\"string\"}}}",
            "{\"$anchor\":1}", "type");
}

/* A known keyword whose value has the wrong type is refused, never read
 * as absent. */
Test(schema_keywords, wrong_value_types_are_refused)
{
    /* the schema, where, and what the message says is expected */
    static const char *const cases[][3] = {
        {"{\"minLength\":\"3\"}", "#/minLength", "non-negative integer"},
        {"{\"maxItems\":true}", "#/maxItems", "non-negative integer"},
        {"{\"required\":\"a\"}", "#/required", "array of strings"},
        {"{\"enum\":1}", "#/enum", "array"},
        {"{\"type\":[\"string\",3]}", "#/type", "type name"},
        {"{\"type\":[]}", "#/type", "type name"},
        {"{\"exclusiveMinimum\":true}", "#/exclusiveMinimum", "number"},
        {"{\"uniqueItems\":\"yes\"}", "#/uniqueItems", "boolean"},
        {"{\"pattern\":1}", "#/pattern", "string"},
        {"{\"properties\":[]}", "#/properties", "object"},
        {"{\"patternProperties\":{\"a\":1}}", "#/patternProperties/a",
         "object or a boolean"},
        {"{\"additionalProperties\":\"no\"}", "#/additionalProperties",
         "object or a boolean"},
        {"{\"items\":1}", "#/items", "object or a boolean"},
        {"{\"contains\":null}", "#/contains", "object or a boolean"},
        {"{\"propertyNames\":[]}", "#/propertyNames", "object or a boolean"},
        {"{\"if\":1,\"then\":{}}", "#/if", "object or a boolean"},
        {"{\"dependentRequired\":{\"a\":{}}}", "#/dependentRequired/a",
         "array of strings"},
        {"{\"dependentSchemas\":{\"a\":[\"b\"]}}", "#/dependentSchemas/a",
         "object or a boolean"},
        {"{\"dependencies\":{\"a\":3}}", "#/dependencies/a",
         "array of strings"},
        {"{\"anyOf\":{}}", "#/anyOf", "array of schemas"},
        {"{\"$defs\":{\"a\":3}}", "#/$defs/a", "object or a boolean"},
        {"{\"$ref\":3}", "#/$ref", "string"},
        {"{\"maximum\":null}", "#/maximum", "number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused(cases[i][0], cases[i][1], cases[i][2]);
}

/* Beside "$ref", draft 7 ignores the other keywords; 2019-09 and 2020-12
 * apply them.  "$schema" at the root says which. */
Test(schema_keywords, ref_siblings_follow_the_declared_draft)
{
    const char *body = "\"$defs\":{\"o\":{\"type\":\"object\"}},"
                       "\"$ref\":\"#/$defs/o\",\"required\":[\"x\"]}";
    char s2020[256], s2019[256], s7[256], none[256];
    snprintf(s2020, sizeof s2020,
             "{\"$schema\":\"https://json-schema.org/draft/2020-12/"
             "schema\",%s",
             body);
    snprintf(s2019, sizeof s2019,
             "{\"$schema\":\"https://json-schema.org/draft/2019-09/"
             "schema#\",%s",
             body);
    snprintf(s7, sizeof s7,
             "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",%s",
             body);
    snprintf(none, sizeof none, "{%s", body);
    invalid(s2020, "{}", "required");
    invalid(s2020, "[]", "type");
    valid(s2020, "{\"x\":1}");
    invalid(s2019, "{}", "required");
    valid(s7, "{}");
    valid(none, "{}");
    invalid(none, "[]", "type");
    refused("{\"$schema\":7}", "#/$schema", "string");
}

/* Under draft 2020-12 a tuple is "prefixItems" and "items" is one schema,
 * the schema of the items past the prefix: an "items" array there is a
 * schema error, named, never read as a draft 7 tuple (which would check
 * [1, "a"] against [{"type":"integer"},{"type":"string"}] item by item
 * where the schema's author meant something the draft does not say).
 * Drafts 7 and 2019-09 keep "items" arrays as tuples. */
Test(schema_keywords, items_arrays_follow_the_declared_draft)
{
    const char *tuple = "\"items\":[{\"type\":\"integer\"},{\"type\":"
                        "\"string\"}]}";
    char s2020[256], s2020_after[256], s2019[256], s7[256];
    snprintf(s2020, sizeof s2020,
             "{\"$schema\":\"https://json-schema.org/draft/2020-12/"
             "schema\",%s",
             tuple);
    /* "$schema" after "items" in the object: the draft is still read first */
    snprintf(s2020_after, sizeof s2020_after,
             "{\"properties\":{\"t\":{%s},\"$schema\":"
             "\"https://json-schema.org/draft/2020-12/schema\"}",
             tuple);
    snprintf(s2019, sizeof s2019,
             "{\"$schema\":\"https://json-schema.org/draft/2019-09/"
             "schema\",%s",
             tuple);
    snprintf(s7, sizeof s7,
             "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",%s",
             tuple);
    refused(s2020, "#/items", "prefixItems");
    refused(s2020_after, "#/properties/t/items", "2020-12");
    valid(s2019, "[1,\"a\"]");
    invalid(s2019, "[\"a\",1]", "type");
    valid(s7, "[1,\"a\"]");
    invalid(s7, "[\"a\",1]", "type");
    /* no "$schema": draft 7, a tuple */
    invalid("{\"items\":[{\"type\":\"integer\"}]}", "[\"a\"]", "type");
    /* the 2020-12 way: prefixItems the tuple, items the rest */
    const char *pfx = "{\"$schema\":\"https://json-schema.org/draft/2020-12/"
                      "schema\",\"prefixItems\":[{\"type\":\"integer\"},"
                      "{\"type\":\"string\"}],\"items\":{\"type\":"
                      "\"boolean\"}}";
    valid(pfx, "[1,\"a\",true,false]");
    valid(pfx, "[1]");
    invalid(pfx, "[\"a\",1]", "type");
    invalid(pfx, "[1,\"a\",3]", "type");
    /* an items schema (not an array) stays what it is under 2020-12 */
    valid("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
          "\"items\":{\"type\":\"integer\"}}",
          "[1,2]");
    invalid("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
            "\"items\":{\"type\":\"integer\"}}",
            "[1,\"a\"]", "type");
}
