/*
 * support_concurrency.h -- what the tests of test_concurrency*.c share.
 */
#ifndef PL_TESTS_SUPPORT_CONCURRENCY_H
#define PL_TESTS_SUPPORT_CONCURRENCY_H

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GUARD_SECONDS 60 /* deadlock guard, never a timing expectation */

extern atomic_int inc_calls;

extern struct gate_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered;
    int done;
    bool released;
    bool fail_next;
} g_gate;

extern int g_block_fd;

/* "call_one": calls payload.tool once and returns its result. */
int call_one(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user);

/* The support policies ("chain", "add", ...) plus the ones above. */
pl_registry *conc_registry(void);

#endif
