/*
 * test_pg_restart.c -- the PostgreSQL store across a server crash: the
 * server is restarted in immediate mode (no shutdown checkpoint, crash
 * recovery on start) in the middle of a run.  The call that meets the lost
 * connection gets a clear error, nothing durable is lost, and the run
 * continues afterwards; so too for runs on four threads sharing the
 * engine's group commits, each caller getting a clear error or its result.
 * A binary of its own, so that the restart cuts no other test's sessions
 * (tests/pg_run.sh starts a server per binary).
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static char g_effects[512];
static bool g_restart;

/* The tests restart the one server of this binary, each in a process of
 * its own: they take turns, holding a lock on a file in the server's
 * socket directory (PL_TEST_PG_URI's host) until they end. */
static void take_the_server(void)
{
    const char *uri = getenv("PL_TEST_PG_URI");
    const char *host = uri ? strstr(uri, "host=") : NULL;
    cr_assert(host, "PL_TEST_PG_URI names no host: %s", uri ? uri : "");
    char path[512];
    snprintf(path, sizeof path, "%.*s/restart.lock",
             (int)strcspn(host + 5, "&"), host + 5);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(flock(fd, LOCK_EX), 0, "%s: %s", path, strerror(errno));
    /* held until the test's process ends */
} /* "step" 1 restarts the server before it returns */

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

/* The server taken (take_the_server()), the effects file named, and an
 * engine in @p mode on schema @p schema, its registry in *reg with the
 * policies @p one (a call) and @p many (the root that makes them) under
 * names[0] and names[1]. */
static pl_engine *restart_engine(pl_registry **reg, const char *schema,
                                 const char *const names[2], pl_policy_fn one,
                                 pl_policy_fn many, pl_durability mode)
{
    take_the_server();
    const char *base = getenv("PL_TEST_PG_URI");
    cr_assert(base && *base, "PL_TEST_PG_URI is not set: run this binary "
                             "through tests/pg_run.sh (ctest does)");
    char uri[1024];
    snprintf(uri, sizeof uri, "%s&schema=%s", base, schema);
    snprintf(g_effects, sizeof g_effects, "%s/effects", t_tmpdir());
    *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(*reg, names[0], one, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(*reg, names[1], many, NULL), PL_OK, "%s",
                 pl_errmsg());
    return t_engine(uri, *reg, mode);
}

Test(pg_restart, a_server_crash_mid_run_loses_nothing_durable)
{
    pl_registry *reg = NULL;
    static const char *const names[2] = {"step", "steps"};
    pl_engine *e = restart_engine(&reg, "t_restart", names, step, steps,
                                  PL_DURABILITY_SYNC);

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

/* ---- runs on threads ----------------------------------------------------- */

#define N_THREADS 4
#define N_CALLS 8
#define RESTART_AT 6 /* the server restarts inside the 6th call made */

static atomic_int g_made; /* calls of "tstep" made */
static pthread_mutex_t g_fx_mu = PTHREAD_MUTEX_INITIALIZER;

/* "tstep": appends its idempotency key to the effects file, naps 20 ms (so
 * that the runs' calls overlap), restarts the server in the RESTART_AT-th
 * call made, and returns {}. */
static int tstep(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pthread_mutex_lock(&g_fx_mu);
    FILE *f = fopen(g_effects, "a");
    if (f) {
        fprintf(f, "%s\n", pl_ctx_idempotency_key(ctx));
        fclose(f);
    }
    pthread_mutex_unlock(&g_fx_mu);
    if (!f)
        return pl_errorf(PL_EIO, "effects file: %s", strerror(errno));
    if (atomic_fetch_add(&g_made, 1) + 1 == RESTART_AT)
        t_pg_restart();
    struct timespec nap = {0, 20 * 1000000L};
    nanosleep(&nap, NULL);
    return pl_steps_add_result(out, pl_json_empty());
}

/* "tsteps": calls "tstep" N_CALLS times. */
static int tsteps(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    for (int i = 0; i < N_CALLS; i++) {
        pl_action call = {
            PL_ACTION_VERSION, "tstep", pl_json_empty(), NULL, 0, NULL};
        int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:i}", "n", N_CALLS);
}

typedef struct caller {
    pl_engine *e;
    char id[16];
    int st;         /* what pl_run_start() returned */
    int run_status; /* its outcome's, when PL_OK */
    int run_error;
    char msg[256];
} caller;

static void *start_one(void *arg)
{
    caller *c = arg;
    pl_action a = {PL_ACTION_VERSION, "tsteps", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = c->id;
    pl_outcome *o = NULL;
    c->st = pl_run_start(&o, c->e, &a, &ro);
    snprintf(c->msg, sizeof c->msg, "%s",
             o ? o->reason ? o->reason : "" : pl_errmsg());
    if (o) {
        c->run_status = o->status;
        c->run_error = o->error;
    }
    pl_outcome_free(o);
    return NULL;
}

Test(pg_restart, runs_on_threads_each_get_an_error_or_their_result)
{
    pl_registry *reg = NULL;
    static const char *const names[2] = {"tstep", "tsteps"};
    pl_engine *e = restart_engine(&reg, "t_threads", names, tstep, tsteps,
                                  PL_DURABILITY_GROUP);

    caller c[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].e = e;
        snprintf(c[i].id, sizeof c[i].id, "c-%d", i);
        cr_assert_eq(pthread_create(&th[i], NULL, start_one, &c[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        cr_assert_eq(pthread_join(th[i], NULL), 0);
    cr_assert_geq(atomic_load(&g_made), RESTART_AT, "the server restarted");

    /* each caller: its result, a failure saying the store failed, or
     * PL_ESTORE with a message */
    int cut = 0;
    for (int i = 0; i < N_THREADS; i++) {
        if (c[i].st == PL_OK && c[i].run_status == PL_RUN_COMPLETED)
            continue;
        cut++;
        if (c[i].st == PL_OK)
            cr_expect(c[i].run_status == PL_RUN_FAILED &&
                          c[i].run_error == PL_ESTORE,
                      "%s: status %d, error %s: %s", c[i].id, c[i].run_status,
                      pl_status_name(c[i].run_error), c[i].msg);
        else
            cr_expect_eq(c[i].st, PL_ESTORE, "%s: %s: %s", c[i].id,
                         pl_status_name(c[i].st), c[i].msg);
        cr_expect(c[i].msg[0], "%s: an error without a message", c[i].id);
    }
    cr_expect_geq(cut, 1, "the restart cut no run");

    /* the runs finish; each call made once, but the one each run was in
     * when the server went away */
    for (int i = 0; i < N_THREADS; i++) {
        pl_outcome *o = NULL;
        int st = pl_run_continue(&o, e, c[i].id, NULL);
        cr_assert_eq(st, PL_OK, "%s: %s: %s", c[i].id, pl_status_name(st),
                     pl_errmsg());
        cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s: %s", c[i].id, o->reason);
        pl_outcome_free(o);
        cr_expect_eq(pl_run_verify(e, c[i].id), PL_OK, "%s", pl_errmsg());
        int again = 0;
        for (int k = 0; k < N_CALLS; k++) {
            char key[64];
            snprintf(key, sizeof key, "%s/0:%d", c[i].id, 2 * k);
            int n = t_count_lines(g_effects, key);
            cr_expect(n == 1 || n == 2, "%s made %d times", key, n);
            again += n == 2;
        }
        cr_expect_leq(again, 1, "%s: %d calls made twice", c[i].id, again);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}
