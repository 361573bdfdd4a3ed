/*
 * support_fanout.h -- what the tests of test_fanout*.c share.
 */
#ifndef PL_TESTS_SUPPORT_FANOUT_H
#define PL_TESTS_SUPPORT_FANOUT_H

#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLS 8

extern atomic_int sleeper_runs, flaky_runs, later_runs;

int get_int(const cJSON *o, const char *k, int dflt);

extern bool g_die_in_charge;

pl_registry *registry(void);

void use_effects(void);

/* How many times each id is in the effects file. */
void count_effects(int *counts, int n);

/* {"calls": [sleeper i sleeping ms[i]...]} */
char *sleepers_payload(const int *ms, int n);

pl_steps *ledger(pl_engine *e, const char *id, const char *path);

void expect_json(const cJSON *got, const char *want_json);

extern const char *const want4;

#endif
