/*
 * fuzz_llm.h -- what the model harnesses share: the checks on an answer
 * parsed from a provider's response, streamed or not.
 */
#ifndef PL_FUZZ_LLM_H
#define PL_FUZZ_LLM_H

#include <string.h>

#include "internal.h"
#include "llm.h"
#include "fuzz.h"

/* The model named "model" of the provider @p pick chooses (of the four
 * HTTP ones). */
static inline void model_of(pl__llm *m, uint8_t pick)
{
    static const pl__llm_provider providers[] = {
        PL__LLM_OPENAI, PL__LLM_ANTHROPIC, PL__LLM_OLLAMA, PL__LLM_GEMINI};
    memset(m, 0, sizeof *m);
    m->name = (char *)"model";
    m->url.provider = providers[pick % 4];
}

/* An answer that parsed (with its tokens) becomes steps or a PL_EJSON
 * naming what came back, with the turn's tokens on its last step as
 * llm.c gives them. */
static inline void check_answer(const pl__llm *m, const cJSON *answer, long in,
                                long out)
{
    CHECK(answer != NULL);
    CHECK(in >= 0 && out >= 0);
    const char *names[] = {"search", "calc"};
    cJSON *payload = cJSON_CreateObject();
    pl_action action = {PL_ACTION_VERSION, "model", payload, names, 2, NULL};
    pl_steps *steps = NULL;
    CHECK(pl_steps_new(&steps) == PL_OK);
    steps->default_actor = "model"; /* as the engine gives a policy's */
    char *why = NULL;
    cJSON *tok = NULL;
    if (pl_json_pack(&tok, "{s:f, s:f, s:f}", "tokens",
                     (double)in + (double)out, "tokens_in", (double)in,
                     "tokens_out", (double)out)) {
        tok = NULL; /* out of memory: the steps without them */
    }
    int rc = pl__llm_answer_steps(steps, &why, m, answer, &action, NULL, 0, 1,
                                  tok);
    CHECK(rc == PL_OK || rc == PL_EJSON || rc == PL_ENOMEM || rc == PL_ELIMIT);
    cJSON_Delete(tok);
    free(why);
    pl_steps_free(steps);
    cJSON_Delete(payload);
}

#endif
