/*
 * llm_support.h -- what the LLM policy tests share: the loopback model
 * server (tests/llm_server.py), an agent, and a tool with a side effect.
 */
#ifndef PL_TEST_LLM_SUPPORT_H
#define PL_TEST_LLM_SUPPORT_H

#include <sys/types.h>

#include <policyledger_llm.h>

#include "support.h"

typedef struct t_server {
    pid_t pid;
    int port;
    char log[4200];
    char base[64]; /* "http://127.0.0.1:PORT/v1" */
} t_server;

/* Start the server on a script ({"responses": [...]}, see llm_server.py). */
void t_server_start(t_server *s, const char *script_json);
/* Stop it (also done at exit). */
void t_server_stop(t_server *s);
/* The requests it received, a JSON array of log entries (caller frees). */
cJSON *t_server_log(const t_server *s);
/* How many requests it received. */
int t_server_requests(const t_server *s);

/* Into @p out, the model URL for @p protocol's loopback server @p s:
 * @p url, or for "ollama" (whose URL names its server)
 * ollama://127.0.0.1:PORT/m; and every provider's key set.  Returns the
 * base URL for the options: @p s's, NULL for Ollama. */
const char *t_model_on(char *out, size_t n, const t_server *s,
                       const char *protocol, const char *url);

/* Write @p text to a new file @p name in a fresh temporary directory. */
const char *t_write_file(const char *name, const char *text);
/* The whole file, NUL-terminated (caller frees), and its length. */
char *t_read_file(const char *path, size_t *len);

/* The responses the scripted model at @p script played: the lines of its
 * counter file, SCRIPT.served (0 when there is none). */
uint64_t t_scripted_served(const char *script);

/*
 * A registry with t_registry()'s policies and:
 *   "llm"    an LLM policy on @p model_url with @p opts and the system
 *            prompt "You are terse."
 *   "agent"  {"text", "actions": [...], "max_turns": n (default 6)}: calls
 *            "llm" with payload {"text"} and those actions under loop and
 *            invoke_action; its result is the llm call's result.
 *            "max_tokens": n adds budget(max_tokens = n) between them.
 *   "effect" {"note": s} -> {"ok": true, "key": idempotency key}; appends
 *            "<idempotency key>\n" to t_effects_path when that is set
 *            (described, with an input schema).
 */
pl_registry *t_llm_registry(const char *model_url, const pl_llm_options *opts);
/* As t_llm_registry(), the model's system prompt @p system_prompt. */
pl_registry *t_llm_registry_prompt(const char *model_url,
                                   const char *system_prompt,
                                   const pl_llm_options *opts);
extern char t_effects_path[4400];

/* Run the agent on @p text with @p actions_json, e.g. "[\"add\"]". */
pl_outcome *t_agent(pl_engine *e, const char *text, const char *actions_json,
                    const char *run_id);

/* A string member of a JSON object, or NULL. */
const char *t_str(const cJSON *o, const char *key);

/* 255 'x's, to pad a message (cut it with "%.Ns"). */
const char *t_pad(void);

/* An on_delta that counts the deltas of each kind in t_delta_kinds
 * (zero it before a run). */
extern int t_delta_kinds[4];
void t_count_delta(const pl_llm_delta *d, void *user);

#endif
