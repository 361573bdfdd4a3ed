/*
 * test_schema.c -- the JSON Schema validator (core/schema.c) against the
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PL_SCHEMA_SUITE_DIR
#define PL_SCHEMA_SUITE_DIR "/usr/share/json-schema-test-suite/tests/draft7"
#endif

/* The suite's files for the keywords we claim (README lists them). */
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
     "\"$id\" base URIs are not resolved", 0, 0},
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
                    pl_schema_error e;
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
