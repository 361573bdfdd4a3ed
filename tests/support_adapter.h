/*
 * support_adapter.h -- what the tests of the tool adapter (test_adapter*.c)
 * share: the "caller" and "flaky" policies, the decorators under test,
 * the counting sleep hook and the effects file.
 */
#ifndef PL_TESTS_SUPPORT_ADAPTER_H
#define PL_TESTS_SUPPORT_ADAPTER_H

#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char g_fx[4400]; /* the effects file */

extern int g_sleeps; /* waits the sleep hook saw */

extern int64_t g_sleep_ms[64]; /* what each was asked to wait */

extern int g_kill_at_sleep; /* SIGKILL in this wait (1-based); 0 never */

extern int64_t g_seen_deadline; /* pl_ctx_deadline() flaky last saw */

extern int64_t g_nest_deadline; /* ... and "nest" */

extern int g_setdl_status; /* pl_ctx_set_deadline(-1) in "setdl" */

const cJSON *member(const cJSON *o, const char *k);

const char *str_member(const cJSON *o, const char *k);

double num_member(const cJSON *o, const char *k, double dflt);

long file_size(const char *path);

pl_registry *registry(void);

pl_engine *open_engine(const char *store, const pl_registry *reg,
                       pl_event_fn on_event, void *user);

void fresh_fx(const char *dir);

/* Run caller -> tool with @p args_json through the decorators given. */
pl_outcome *run_tool(pl_engine *e, const char *id, const char *tool,
                     const char *args_json);

void set_decos(size_t n, const pl_decorator *d);

pl_steps *ledger(pl_engine *e, const char *id, const char *path);

/* Side effects named @p name in a ledger. */
int count_effects(const pl_steps *l, const char *name);

int count_type(const pl_steps *l, pl_step_type type);

void expect_code(const pl_outcome *o, const char *code);

void expect_ok(const pl_outcome *o);

void expect_msg(const char *needle);

/* Continue a completed run: the outcome must be the same, and nothing
 * executes, waits or touches the effects file. */
void expect_replay_still(pl_engine *e, const char *id, const pl_outcome *first);

pl_retry_options retry_opts(unsigned attempts);

#endif
