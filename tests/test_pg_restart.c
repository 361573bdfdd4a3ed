/*
 * test_pg_restart.c -- the PostgreSQL store across a server crash: the
 * server is restarted in immediate mode (no shutdown checkpoint, crash
 * recovery on start) in the middle of a run.  The call that meets the lost
 * connection gets a clear error, nothing durable is lost, and the run
 * continues afterwards.  A binary of its own, so that the restart cuts no
 * other test's sessions (tests/pg_run.sh starts a server per binary).
 */
#include "support.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_effects[512];
static bool g_restart; /* "step" 1 restarts the server before it returns */

/* "step" {"i": i}: appends "i\n" to the effects file; returns {"i": i}. */
static int step(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int i = cJSON_GetObjectItemCaseSensitive(a->payload, "i")->valueint;
    FILE *f = fopen(g_effects, "a");
    if (!f)
        return pl_errorf(PL_EIO, "effects file: %s", strerror(errno));
    fprintf(f, "%d\n", i);
    fclose(f);
    if (i == 1 && g_restart) {
        g_restart = false;
        t_pg_restart();
    }
    return pl_steps_add_resultf(out, "{s:i}", "i", i);
}

/* "steps": calls "step" for i = 0..3. */
static int steps(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    for (int i = 0; i < 4; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "i", i);
        pl_action call = {PL_ACTION_VERSION, "step", p, NULL, 0, NULL};
        int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:i}", "n", 4);
}

Test(pg_restart, a_server_crash_mid_run_loses_nothing_durable)
{
    const char *base = getenv("PL_TEST_PG_URI");
    cr_assert(base && *base, "PL_TEST_PG_URI is not set: run this binary "
                             "through tests/pg_run.sh (ctest does)");
    char uri[1024];
    snprintf(uri, sizeof uri, "%s&schema=t_restart", base);
    snprintf(g_effects, sizeof g_effects, "%s/effects", t_tmpdir());
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "step", step, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "steps", steps, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);

    g_restart = true;
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "steps", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "restarted";
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    cr_assert(!g_restart, "the server was restarted");
    if (st == PL_OK) { /* it ran, and failed with a recorded reason */
        cr_expect_eq(o->status, PL_RUN_FAILED);
        cr_expect_eq(o->error, PL_ESTORE, "%s", o->reason);
        pl_outcome_free(o);
    } else {
        cr_expect_eq(st, PL_ESTORE, "%s: %s", pl_status_name(st), pl_errmsg());
        cr_expect(strstr(pl_errmsg(), "connection") != NULL, "%s", pl_errmsg());
    }

    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "restarted", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(o->calls_served, 1, "step 0 was durable");
    pl_outcome_free(o);
    FILE *f = fopen(g_effects, "r");
    cr_assert_not_null(f);
    char fx[64] = {0};
    size_t n = fread(fx, 1, sizeof fx - 1, f);
    fclose(f);
    fx[n] = '\0';
    cr_expect_str_eq(fx, "0\n1\n1\n2\n3\n",
                     "step 1 was in flight; no other ran twice");
    cr_expect_eq(pl_run_verify(e, "restarted"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}
