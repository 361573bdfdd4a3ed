/*
 * support_crash.h -- what the crash matrices (test_crash*.c) share: the
 * recording of boundaries, ledgers as rows, the effects file, the
 * reference run, children, and recovery with its checks.
 */
#ifndef PL_TESTS_SUPPORT_CRASH_H
#define PL_TESTS_SUPPORT_CRASH_H

#include "support.h"

#include "order/order.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_BOUNDARIES 128

#define MAX_CALLS 8

#define N_TOOLS 3

#define N_CALLS 3

typedef struct boundary {
    pl_event_kind kind;
    char path[32]; /* STEP_APPENDED: the ledger */
    uint32_t seq;
    pl_step_type type;
} boundary;

/* A call made by the root, and where its life crossed the boundaries. */
typedef struct call_info {
    char tool[32];
    uint32_t seq;  /* position of its action_call in the root ledger */
    bool executed; /* CALL_STARTED (else CALL_SERVED) */
    int effect_b;  /* the callee's first step appended: its effect is done */
    int result_b;  /* its action_result appended to the root ledger */
    int commit_b;  /* the commit that made that result durable */
} call_info;

typedef struct recorder {
    long kill_at; /* SIGKILL at this boundary; 0 = never */
    int n;        /* boundaries so far */
    bool overflow;
    boundary b[MAX_BOUNDARIES + 1]; /* 1-based */
    int n_calls;
    call_info calls[MAX_CALLS];
} recorder;

typedef struct step_row {
    char *id;
    pl_step_type type;
    char *actor;
    char *payload;
} step_row;

typedef struct rows {
    step_row *v;
    size_t n, cap;
} rows;

typedef struct place {
    char dir[4200];
    char store[4300];
    char fx[4300];
} place;

extern const char *const tool_names[N_TOOLS];

void on_event(const pl_event *ev, void *user);

int collect_row(const pl_step *s, void *user);

void rows_free(rows *l);

void expect_same_ledgers(const rows *got, const rows *want, const char *what);

pl_registry *order_registry(const char *effects_path);

void place_make(place *p, const char *base, const char *name);

#endif
