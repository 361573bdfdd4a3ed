/*
 * test_worker_stop.c -- pl_worker_stop() and the workers it stops, on the
 * store the suite runs on: LMDB, and PostgreSQL as pg_test_worker_stop
 * (PL_TEST_STORE=postgresql, tests/CMakeLists.txt).
 *
 * Nothing is timed: every wait is for a condition, with a generous bound.
 */
#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define S_BOUND_MS 60000 /* the longest any condition is waited for */

static void s_nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* "gate": says it is in, then waits until the test opens it.  "two":
 * calls gate, then echo. */
static atomic_int g_in, g_open;
static pl_engine *g_engine;
static atomic_int g_completed;

static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    atomic_store(&g_in, 1);
    while (!atomic_load(&g_open))
        s_nap(5);
    return pl_steps_add_resultf(out, "{}");
}

static int call_one(pl_ctx *ctx, const char *policy)
{
    cJSON *p = t_json("{}"), *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, policy, p);
    cJSON_Delete(p);
    cJSON_Delete(r);
    return st;
}

static int two(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_one(ctx, "gate");
    if (!st)
        st = call_one(ctx, "echo");
    return st ? st : pl_steps_add_resultf(out, "{s:s}", "done", "yes");
}

/* A run that completes although its worker was asked to stop: the test
 * has failed; the worker is stopped again so that it returns. */
static void on_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_RUN_COMPLETED) {
        atomic_store(&g_completed, 1);
        pl_worker_stop(g_engine);
    }
}

typedef struct s_worker {
    pthread_t th;
    pl_engine *e;
    uint64_t completed, skipped;
    atomic_int done;
    int rc;
} s_worker;

static void *s_worker_main(void *arg)
{
    s_worker *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.poll_ms = 10;
    o.completed = &w->completed;
    o.skipped = &w->skipped;
    w->rc = pl_worker_run(w->e, &o);
    atomic_store(&w->done, 1);
    return NULL;
}

static void s_worker_start(s_worker *w, pl_engine *e)
{
    memset(w, 0, sizeof *w);
    w->e = e;
    cr_assert_eq(pthread_create(&w->th, NULL, s_worker_main, w), 0);
}

static void s_await(atomic_int *flag, const char *what)
{
    for (int ms = 0; !atomic_load(flag); ms += 5) {
        cr_assert_lt(ms, S_BOUND_MS, "waited too long for %s", what);
        s_nap(5);
    }
}

TestSuite(worker_stop, .fini = t_cleanup, .timeout = 120);

/*
 * pl_worker_stop() asks every pl_worker_run() on the engine to stop.  Two
 * workers run on one engine: B executes a run in its first call, A is
 * idle.  A stop: A returns at once; B, once its call is done, must stop
 * the run before its next call and return too, the stop not taken back
 * by A's return (which consumed it for every worker: B then executed the
 * next call, completed the run and went on taking runs).
 */
Test(worker_stop, a_stop_stops_every_worker_of_the_engine)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "two", two, NULL), PL_OK);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = on_event;
    cr_assert_eq(pl_engine_open(&g_engine, t_store_path(), reg, &eo), PL_OK,
                 "%s", pl_errmsg());
    pl_action root = PL_ACTION_INIT;
    root.policy = "two";
    root.payload = t_json("{}");
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "r";
    cr_assert_eq(pl_run_submit(NULL, g_engine, &root, &ro), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);

    static s_worker a, b;
    s_worker_start(&b, g_engine);
    s_await(&g_in, "worker B to be in the run's first call");
    s_worker_start(&a, g_engine);
    pl_worker_stop(g_engine);
    cr_assert_eq(pthread_join(a.th, NULL), 0);
    cr_expect_eq(a.rc, PL_OK, "%s", pl_errmsg());
    atomic_store(&g_open, 1); /* B's call ends after A returned */
    cr_assert_eq(pthread_join(b.th, NULL), 0);
    cr_expect_eq(b.rc, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(atomic_load(&t_calls.echo), 0,
                 "worker B executed the run's next call after the stop");
    cr_expect_not(atomic_load(&g_completed),
                  "worker B completed the run after the stop");
    cr_expect_eq(b.completed, 0);
    cr_expect_eq(b.skipped, 1, "the run handed back is counted as such");
    /* handed back: another worker finishes it */
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, g_engine, "r", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    pl_engine_close(g_engine);
    pl_registry_free(reg);
}

/* Submit run @p id of "echo" and wait until it has completed, or @p w has
 * returned: whether it completed. */
static bool s_ran(pl_engine *e, const char *id, s_worker *w)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = "echo";
    root.payload = t_json("{}");
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);
    for (int ms = 0; ms < S_BOUND_MS; ms += 5) {
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, id), PL_OK, "%s", pl_errmsg());
        bool done = ri->status == PL_RUN_COMPLETED;
        pl_run_info_free(ri);
        if (done)
            return true;
        if (atomic_load(&w->done))
            return false;
        s_nap(5);
    }
    cr_assert_fail("run %s neither ran nor did its worker return", id);
    return false;
}

/* This process's address space now, in bytes (/proc/self/statm). */
static rlim_t s_vm_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    unsigned long pages = 0;
    cr_assert_eq(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    return (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE);
}

/*
 * A worker's own failure stops that worker alone: worker B cannot start
 * its second thread (the address space is limited, so that a thread's
 * stack cannot be mapped) and returns PL_ENOMEM, saying so; worker A, on
 * the same engine, goes on taking runs.  The failure set the engine's
 * stop, which every worker looks at: A returned too, PL_OK, and nothing
 * took the engine's runs until a worker was started again.
 */
Test(worker_stop, a_workers_own_failure_stops_that_worker_alone)
{
    if (T_SANITIZED) /* the sanitizers map memory of their own */
        cr_skip_test("the address space is the sanitizers' own");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    static s_worker a;
    s_worker_start(&a, e);
    cr_assert(s_ran(e, "before", &a), "worker A does not run: %d (%s)", a.rc,
              pl_errmsg());

    struct rlimit was, tight;
    cr_assert_eq(getrlimit(RLIMIT_AS, &was), 0);
    tight = was;
    tight.rlim_cur = s_vm_bytes() + ((rlim_t)4 << 20); /* no 8 MiB stack */
    cr_assert_eq(setrlimit(RLIMIT_AS, &tight), 0, "%s", strerror(errno));
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = 2;
    o.poll_ms = 10;
    int st = pl_worker_run(e, &o);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", pl_errmsg());
    cr_assert_eq(setrlimit(RLIMIT_AS, &was), 0, "%s", strerror(errno));
    cr_expect_eq(st, PL_ENOMEM, "worker B: %s (%s)", msg, pl_status_name(st));
    cr_expect(strstr(msg, "cannot start a thread"), "%s", msg);

    cr_expect(s_ran(e, "after", &a),
              "worker A stopped with worker B's failure (it returned %d)",
              a.rc);
    cr_expect_not(atomic_load(&a.done), "worker A returned");
    pl_worker_stop(e);
    cr_assert_eq(pthread_join(a.th, NULL), 0);
    cr_expect_eq(a.rc, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(a.completed, 2, "worker A ran both runs");
    pl_engine_close(e);
    pl_registry_free(reg);
}
