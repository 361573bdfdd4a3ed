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

#include "internal.h"
#include "llm.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const pl__llm_provider providers[] = {
        PL__LLM_OPENAI, PL__LLM_ANTHROPIC, PL__LLM_OLLAMA, PL__LLM_GEMINI};
    if (size < 1)
        return 0;
    pl__llm m;
    memset(&m, 0, sizeof m);
    m.name = (char *)"model";
    m.url.provider = providers[data[0] % 4];
    cJSON *answer = NULL;
    long in = 0, out = 0;
    int rc = pl__llm_parse_response(&answer, &in, &out, &m,
                                    (const char *)data + 1, size - 1);
    CHECK(rc == PL_OK || rc == PL_EJSON || rc == PL_ENOMEM);
    CHECK(rc == PL_OK || answer == NULL);
    if (rc != PL_OK)
        return 0;
    CHECK(in >= 0 && out >= 0);
    const char *names[] = {"search", "calc"};
    cJSON *payload = cJSON_CreateObject();
    pl_action action = {PL_ACTION_VERSION, "model", payload, names, 2, NULL};
    pl_steps *steps = NULL;
    CHECK(pl_steps_new(&steps) == PL_OK);
    steps->default_actor = "model"; /* as the engine gives a policy's */
    char *why = NULL;
    /* the turn's tokens, as llm.c gives them, on the turn's last step */
    cJSON *tok = NULL;
    if (pl_json_pack(&tok, "{s:f, s:f, s:f}", "tokens",
                     (double)in + (double)out, "tokens_in", (double)in,
                     "tokens_out", (double)out)) {
        tok = NULL; /* out of memory: the steps without them */
    }
    rc = pl__llm_answer_steps(steps, &why, &m, answer, &action, NULL, 0, 1,
                              tok);
    CHECK(rc == PL_OK || rc == PL_EJSON || rc == PL_ENOMEM || rc == PL_ELIMIT);
    cJSON_Delete(tok);
    free(why);
    pl_steps_free(steps);
    cJSON_Delete(payload);
    cJSON_Delete(answer);
    return 0;
}
