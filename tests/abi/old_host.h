/*
 * old_host.h -- what old_host.c (built against policyledger_prev.h) offers
 * a test built against today's header: only opaque handles and plain types
 * cross between them.
 */
#ifndef PL_TEST_OLD_HOST_H
#define PL_TEST_OLD_HOST_H

#include <stdint.h>

struct pl_engine;
struct pl_registry;

/* pl_engine_open() with version 2 options (durability "process"). */
int old_host_open(struct pl_engine **out, const char *path,
                  const struct pl_registry *reg);

/* pl_run_start() of @p policy with version 1 run options; *result is the
 * completed run's result as JSON text (free()), else NULL. */
int old_host_run(char **result, struct pl_engine *e, const char *policy,
                 const char *payload, const char *run_id);

/* pl_run_continue() in check mode, with version 1 run options: the result
 * as above, and how many callees ran (none: all were served). */
int old_host_check(char **result, uint64_t *executed, struct pl_engine *e,
                   const char *run_id);

#endif
