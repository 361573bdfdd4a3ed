/*
 * test_flow_override.c -- what the guide's "Flow control" promises of a
 * queued run continued by hand: "The limit binds what workers take;
 * pl_run_continue() of a queued run executes it at once (an operator's
 * override) and counts against the key while it runs."  On the store the
 * suite runs on: LMDB, and PostgreSQL as pg_test_flow_override.
 * Nothing is timed: every wait is for a condition, with a generous bound.
 */
#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define O_BOUND_MS 120000 /* the longest any condition is waited for */

TestSuite(flow_override, .fini = t_cleanup, .timeout = 300);

/* The runs' gates: "in" once a run's policy started, "block" holds it. */
enum { A1, A2, B1, N_RUNS };
static atomic_int g_in[N_RUNS], g_block[N_RUNS];

static void nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* "gate": {"n": index}: marks itself in, waits while it is blocked. */
static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    atomic_store(&g_in[n], 1);
    while (atomic_load(&g_block[n]))
        nap(5);
    return pl_steps_add_resultf(out, "{}");
}

static void submit(pl_engine *e, const char *id, int n, const char *key)
{
    char json[32];
    snprintf(json, sizeof json, "{\"n\": %d}", n);
    pl_action root = PL_ACTION_INIT;
    root.policy = "gate";
    root.payload = t_json(json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? 1 : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);
}

static void await_status(pl_engine *e, const char *id, pl_run_status want)
{
    for (int ms = 0; status_of(e, id) != want; ms += 10) {
        cr_assert_lt(ms, O_BOUND_MS, "run %s never became %s", id,
                     pl_run_status_name(want));
        nap(10);
    }
}

typedef struct thread_arg {
    pl_engine *e;
    const char *id;
    int rc;
    pl_run_status status;
} thread_arg;

static void *continue_main(void *p)
{
    thread_arg *t = p;
    pl_outcome *o = NULL;
    t->rc = pl_run_continue(&o, t->e, t->id, NULL);
    t->status = o ? o->status : (pl_run_status)0;
    pl_outcome_free(o);
    return NULL;
}

static void *worker_main(void *p)
{
    thread_arg *t = p;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.concurrency = 2;
    wo.poll_ms = 10;
    t->rc = pl_worker_run(t->e, &wo);
    return NULL;
}

/*
 * a1 and a2 share key "k" (limit 1), a1 queued first.  a2, continued by
 * hand, runs at once, ahead of a1; while it runs, a worker with a free
 * thread takes b1 (no key, queued after a1) but not a1; once a2 ends, a1
 * runs.
 */
Test(flow_override, a_continued_queued_run_goes_at_once_and_holds_its_key)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    submit(e, "a1", A1, "k");
    submit(e, "a2", A2, "k");
    atomic_store(&g_block[A2], 1);

    thread_arg by_hand = {e, "a2", -1, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, continue_main, &by_hand), 0);
    for (int ms = 0; !atomic_load(&g_in[A2]); ms += 5) {
        cr_assert_lt(ms, O_BOUND_MS, "a2 never started");
        nap(5);
    }
    cr_assert_eq(status_of(e, "a1"), PL_RUN_SUBMITTED, "a1 stays queued");

    submit(e, "b1", B1, NULL);
    thread_arg worker = {e, NULL, -1, 0};
    pthread_t wth;
    cr_assert_eq(pthread_create(&wth, NULL, worker_main, &worker), 0);
    await_status(e, "b1", PL_RUN_COMPLETED); /* the worker passed a1 */
    cr_assert_not(atomic_load(&g_in[A1]), "a1 started while a2 held key k");
    cr_assert_eq(status_of(e, "a1"), PL_RUN_SUBMITTED);

    atomic_store(&g_block[A2], 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(by_hand.rc, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(by_hand.status, PL_RUN_COMPLETED);
    await_status(e, "a1", PL_RUN_COMPLETED);
    pl_worker_stop(e);
    cr_assert_eq(pthread_join(wth, NULL), 0);
    cr_assert_eq(worker.rc, PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}
