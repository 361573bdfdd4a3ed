/*
 * support_llm_openai.h -- what the tests of the OpenAI-compatible LLM
 * policies (test_llm_openai*.c) share.
 */
#ifndef PL_TESTS_SUPPORT_LLM_OPENAI_H
#define PL_TESTS_SUPPORT_LLM_OPENAI_H

#include "llm_support.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A 200 whose message has @p text (may be NULL) and one tool call (name
 * NULL: none) with raw @p args. */
cJSON *answer(const char *text, const char *id, const char *name,
              const char *args);

cJSON *raw(const char *json);

/* {"responses": [...]} as text, taking the items over. */
char *script(int n, ...);

extern t_server g_srv;

void serve(char *script_text);

/* Options pointing at the server, with short timeouts and waits. */
pl_llm_options opts(void);

pl_engine *engine_for(pl_registry **reg, const pl_llm_options *o);

const cJSON *req(const cJSON *log, int i);

const cJSON *at(const cJSON *o, const char *key);

void expect_str(const char *got, const char *want);

void expect_has(const char *hay, const char *needle);

/* The agent's result, an error: its code and message. */
void expect_error(const pl_outcome *o, const char *code,
                  const char *in_message);

extern char g_events[1 << 16];

extern size_t g_events_len;

void on_event(const pl_event *ev, void *user);

#endif
