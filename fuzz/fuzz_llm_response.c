/*
 * fuzz_llm_response.c -- a model's response body (policies/llm/response.c)
 * for each provider: the first byte picks the provider, the rest is the
 * body.  Whatever the body: a status (PL_EJSON with a message for a body
 * that is not an answer), never a crash; an answer that parses becomes
 * steps or a PL_EJSON naming what came back.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_llm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    pl__llm m;
    model_of(&m, data[0]);
    cJSON *answer = NULL;
    long in = 0, out = 0;
    int rc = pl__llm_parse_response(&answer, &in, &out, &m,
                                    (const char *)data + 1, size - 1);
    CHECK(rc == PL_OK || rc == PL_EJSON || rc == PL_ENOMEM);
    CHECK(rc == PL_OK || answer == NULL);
    if (rc != PL_OK)
        return 0;
    check_answer(&m, answer, in, out);
    cJSON_Delete(answer);
    return 0;
}
