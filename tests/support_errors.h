/*
 * support_errors.h -- what the tests of test_errors*.c share.
 */
#ifndef PL_TESTS_SUPPORT_ERRORS_H
#define PL_TESTS_SUPPORT_ERRORS_H

#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PAYLOAD 1024

/* The status must be @p want and pl_errmsg() must name @p what. */
#define EXPECT_ERR(call, want, what)                                           \
    do {                                                                       \
        int st_ = (call);                                                      \
        cr_expect_eq(st_, (want), "%s: got %s, expected %s (%s)", #call,       \
                     pl_status_name(st_), pl_status_name(want), pl_errmsg());  \
        cr_expect(strcmp(pl_errmsg(), "no error") != 0 && *pl_errmsg(),        \
                  "%s: no message", #call);                                    \
        expect_has(pl_errmsg(), (what));                                       \
    } while (0)

/* nulls: calls context functions with NULL arguments; none may crash. */
#define N_NULLS 14

pl_engine *open_engine(const pl_registry *reg);

void expect_has(const char *hay, const char *needle);

bool run_exists(pl_engine *e, const char *id);

/* A JSON object {"s": "xxxx..."} of about @p n bytes. */
cJSON *big_object(size_t n);

extern int g_call_status;

extern int g_max_depth_seen;

extern int g_null_status[N_NULLS];

pl_registry *registry(void);

/* Start misuse with @p mode; returns the failed outcome. */
pl_outcome *misuse_run(pl_engine *e, const char *mode, const char *id);

#endif
