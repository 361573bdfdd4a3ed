/*
 * llm_plugin.c -- a plugin that registers an LLM policy, "p_model", on the
 * scripted model at $PL_TEST_LLM_SCRIPT: the policy's data must outlive the
 * plugin's scratch registry.
 */
#include <stdio.h>
#include <stdlib.h>

#include <policyledger_llm.h>

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg);

int pl_plugin_init(pl_registry *reg)
{
    const char *script = getenv("PL_TEST_LLM_SCRIPT");
    char url[4200];
    snprintf(url, sizeof url, "scripted://%s", script ? script : "none.json");
    return pl_llm_register(reg, "p_model", url, "From a plugin.", NULL);
}
