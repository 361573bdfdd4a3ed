/*
 * support_rate.h -- what the tests of rate limits (test_rate.c,
 * test_rate_units.c) share (support_rate.c).
 */
#ifndef PL_TESTS_SUPPORT_RATE_H
#define PL_TESTS_SUPPORT_RATE_H

#include "support.h"

#include <sys/types.h>

/* The test's directory, made by rt_setup() (a suite's .init). */
extern char rt_dir[512];
void rt_setup(void);

/* How the decorators under test wait: for real, and noted in
 * "<rt_dir>/waiting" so that a test can kill the process in a wait (a
 * pl_sleep_fn). */
int rt_sleep(int64_t ms, void *user);

/* An engine on @p path in `process` mode with a short lease; fails the
 * test on error. */
pl_engine *rt_engine(const char *path, const pl_registry *reg);

/* In a forked child, which never asserts: start run @p id of @p policy
 * with @p payload_json on the store at @p path, and exit 0 when it
 * completed, else 1 (2: the engine did not open). */
void rt_child_run(const char *path, const pl_registry *reg, const char *policy,
                  const char *payload_json, const char *id);

/* Once child @p kid waits (rt_sleep() has noted it): SIGKILL it and reap
 * it. */
void rt_kill_in_wait(pid_t kid);

/* Continue run @p id once the killed process's lease has run out; fails
 * the test unless it completes. */
void rt_continue_to_end(pl_engine *e, const char *id);

#endif
