/*
 * fuzz_schema.c -- JSON Schemas (core/ext/schema_compile.c, schema_eval.c)
 * as a hostile MCP server hands them over (a tool's inputSchema) and the
 * instances they are applied to.  The input is the schema's JSON text, a
 * NUL byte, and the instance's JSON text (no NUL: the schema is applied to
 * itself).  Both are parsed as the engine parses outside JSON
 * (pl_json_parse()).
 * Whatever the bytes: compiling returns a status and a message, the same
 * from the text as from the parsed JSON; a compiled schema validates to a
 * status (PL_OK, PL_EJSON naming the keyword and saying why, PL_ELIMIT),
 * the same each time; the "true" schema takes any instance; never a crash,
 * a leak, undefined behaviour or unbounded time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static int validate(const pl_schema *s, const cJSON *inst, pl_schema_error *err)
{
    *err = (pl_schema_error)PL_SCHEMA_ERROR_INIT;
    int st = pl_schema_validate(err, s, inst);
    CHECK(st == PL_OK || st == PL_EJSON || st == PL_ELIMIT || st == PL_ENOMEM);
    if (st == PL_EJSON)
        CHECK(err->keyword[0] && err->message[0] && *pl_errmsg());
    if (st == PL_ELIMIT)
        CHECK(*pl_errmsg());
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t slen = nul ? (size_t)(nul - text) : size;
    cJSON *schema = NULL, *inst = NULL;
    if (pl_json_parse(&schema, text, slen))
        return 0;
    if (nul ? pl_json_parse(&inst, nul + 1, size - slen - 1)
            : !(inst = cJSON_Duplicate(schema, true))) {
        cJSON_Delete(schema);
        return 0;
    }
    pl_schema *s = NULL;
    int st = pl_schema_compile(&s, schema);
    CHECK(st == PL_OK || st == PL_EINVAL || st == PL_EJSON || st == PL_ELIMIT ||
          st == PL_ENOMEM);
    CHECK((st == PL_OK) == (s != NULL));
    CHECK(st == PL_OK || *pl_errmsg());
    /* the same from the text (what pl_schema_compile_text parses) */
    char *again_text = cJSON_PrintUnformatted(schema);
    if (again_text) {
        pl_schema *t = NULL;
        int st2 = pl_schema_compile_text(&t, again_text);
        CHECK(st2 == st || st2 == PL_ENOMEM || st == PL_ENOMEM);
        pl_schema_free(t);
        free(again_text);
    }
    if (s) {
        pl_schema_error e1, e2;
        int v1 = validate(s, inst, &e1);
        int v2 = validate(s, inst, &e2);
        CHECK(v1 == v2 || v1 == PL_ENOMEM || v2 == PL_ENOMEM);
        if (v1 == PL_EJSON && v2 == PL_EJSON)
            CHECK(!strcmp(e1.path, e2.path) &&
                  !strcmp(e1.keyword, e2.keyword) &&
                  !strcmp(e1.message, e2.message));
        /* the schema as the instance too (a server's schema is JSON) */
        validate(s, schema, &e1);
        pl_schema_free(s);
    }
    pl_schema *yes = NULL;
    cJSON *t = cJSON_CreateTrue();
    CHECK(t && pl_schema_compile(&yes, t) == PL_OK);
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    CHECK(pl_schema_validate(&e, yes, inst) == PL_OK);
    pl_schema_free(yes);
    cJSON_Delete(t);
    cJSON_Delete(inst);
    cJSON_Delete(schema);
    return 0;
}
