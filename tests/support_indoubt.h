/*
 * support_indoubt.h -- what the tests of test_indoubt*.c share.
 */
#ifndef PL_TESTS_SUPPORT_INDOUBT_H
#define PL_TESTS_SUPPORT_INDOUBT_H

#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN "doubt-1"

typedef struct world {
    char store[4300];
    char effects[4300];
    char marker[4300];      /* exists once "risky" has died once */
    char kill_marker[4300]; /* the same for "killer" */
} world;

void world_init(world *w);

int append_line(const char *path, const char *line);

/* Create @p path; true if this call created it (first time). */
bool first_time(const char *path);

/* Lines in the effects file that start with "<tool> <key>\n". */
int count_effects(const world *w, const char *tool, const char *key);

int count_all_lines(const world *w);

int result_done(pl_steps *out, const char *tool, const char *key);

pl_registry *doubt_registry(world *w, bool idempotent, pl_in_doubt rule);

/* Start the run in a forked child, which must die of SIGKILL. */
void crash_run(const world *w, const pl_registry *reg, pl_durability mode,
               const char *payload);

size_t ledger_len(pl_engine *e, const char *path);

/* The type and actor of step @p i of ledger @p path, and its error code. */
void expect_step(pl_engine *e, const char *path, size_t i, pl_step_type type,
                 const char *actor, const char *error_code);

/*
 * After the kill inside the tool: what is durable.  A non-idempotent call's
 * action_call was made durable before the tool ran; an idempotent call has
 * nothing durable until its result.
 */
pl_engine *open_after_crash(const world *w, const pl_registry *reg,
                            bool idempotent, const char *tool);

const char *str_of(const cJSON *o, const char *name);

/* The outcome completed and its result is the tool's own, not an error. */
void expect_tool_result(const pl_outcome *o, const char *tool);

/* The outcome completed and its result is an "InDoubt" error. */
void expect_in_doubt_result(const pl_outcome *o);

pl_outcome *continue_ok(pl_engine *e);

pl_outcome *resume_ok(pl_engine *e, const pl_outcome *susp, const char *answer);

#endif
