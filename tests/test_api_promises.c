/*
 * test_api_promises.c -- what the public headers promise, call by call,
 * at the edges the other tests leave: each test calls a function as its
 * header says and checks exactly what that header promises.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(api_promises, .timeout = 120, .fini = t_cleanup);

/* ---- pl_ctx_side_effect(): a function that returns what is no status ---- */

static int returns_one(cJSON **out, void *user)
{
    (void)user;
    *out = NULL;
    return 1; /* "non-zero: failed", as much C code says */
}

static int side_effect_one(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                           void *user)
{
    (void)a;
    (void)out;
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, "probe", returns_one, NULL);
    *(int *)user = st;
    cr_assert_null(v, "NULL on failure");
    return st;
}

/* pl_side_effect_fn: "PL_OK, or a status that fails the run"; 1 is no
 * status, and failed the run by an assertion (a crash) */
Test(api_promises, a_side_effect_returning_no_status_fails_the_run)
{
    pl_registry *reg = t_registry();
    int seen = 0;
    cr_assert_eq(pl_registry_add_fn(reg, "se_one", side_effect_one, &seen),
                 PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    int st = t_try_start(&o, e, "se_one", "{}", "r");
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_assert_str_neq(pl_status_name(o->error), "PL_UNKNOWN",
                      "error %d is no pl_status", o->error);
    cr_assert_eq(o->error, PL_EPOLICY);
    cr_assert_eq(seen, PL_EPOLICY);
    cr_assert(strstr(o->reason, "'probe'") &&
                  strstr(o->reason, "returned 1, which is no pl_status"),
              "%s", o->reason);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
