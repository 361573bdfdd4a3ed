/*
 * test_workers.c -- the queue, the workers and run leases (many processes,
 * one host), on the store the suite runs on: LMDB, and PostgreSQL as
 * pg_test_workers (PL_TEST_STORE=postgresql, tests/CMakeLists.txt).
 *
 * Processes are real (fork, SIGKILL, SIGSTOP), leases short (300 ms), and
 * nothing is timed: every wait is for a condition, with a generous bound.
 */
#include "support.h"

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define W_LEASE_MS 300u
#define W_BOUND_MS 60000 /* the longest any condition is waited for */

/* A new, empty store for the test: a file, or a schema of its own. */
static const char *w_store(void) { return t_store_path(); }

/* ---- helpers ------------------------------------------------------------ */

static void w_nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static char w_dir[512]; /* marker files of the policies below */

static void w_marker_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", w_dir, name);
}

static void w_touch(const char *name)
{
    char p[600];
    w_marker_path(p, sizeof p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

static bool w_exists(const char *name)
{
    char p[600];
    w_marker_path(p, sizeof p, name);
    return access(p, F_OK) == 0;
}

static void w_remove(const char *name)
{
    char p[600];
    w_marker_path(p, sizeof p, name);
    unlink(p);
}

/* Wait until @p name exists; fails the test past the bound. */
static void w_await(const char *name)
{
    for (int ms = 0; !w_exists(name); ms += 10) {
        cr_assert_lt(ms, W_BOUND_MS, "waited too long for '%s'", name);
        w_nap(10);
    }
}

/*
 * "nap": touches the marker "in", sleeps payload.ms, touches "out" and
 * returns {}.  "gate": touches "in" and waits while "block" exists.
 * "slow": calls nap {ms} and then add.  "fenced": calls add, gate, add.
 */
static int nap(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    w_touch("in");
    w_nap(cJSON_IsNumber(ms) ? ms->valueint : 0);
    w_touch("out");
    return pl_steps_add_resultf(out, "{}");
}

static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    w_touch("in");
    while (w_exists("block"))
        w_nap(10);
    return pl_steps_add_resultf(out, "{}");
}

static int call_simple(pl_ctx *ctx, const char *policy, const char *json)
{
    cJSON *p = t_json(json), *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, policy, p);
    cJSON_Delete(p);
    cJSON_Delete(r);
    return st;
}

static int slow(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, "nap", a->payload);
    cJSON_Delete(r);
    if (!st)
        st = call_simple(ctx, "add", "{\"a\": 1, \"b\": 2}");
    return st ? st : pl_steps_add_resultf(out, "{s:s}", "done", "yes");
}

static int fenced(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_simple(ctx, "add", "{\"a\": 1, \"b\": 1}");
    if (!st)
        st = call_simple(ctx, "gate", "{}");
    if (!st)
        st = call_simple(ctx, "add", "{\"a\": 2, \"b\": 2}");
    return st ? st : pl_steps_add_resultf(out, "{s:s}", "done", "yes");
}

/* fenced's first two calls, then two adds at once; with {"fan_gate": 1},
 * an add, then fenced and an add at once */
static int fanned(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    bool fan_gate = cJSON_GetObjectItemCaseSensitive(a->payload, "fan_gate");
    int st = call_simple(ctx, "add", "{\"a\": 1, \"b\": 1}");
    if (!st && !fan_gate)
        st = call_simple(ctx, "gate", "{}");
    pl_action adds[2] = {PL_ACTION_INIT, PL_ACTION_INIT};
    pl_call_spec specs[2] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT};
    pl_step *res[2] = {NULL, NULL};
    cJSON *pay[2] = {t_json("{\"a\": 3, \"b\": 3}"),
                     t_json("{\"a\": 2, \"b\": 2}")};
    for (int i = 0; i < 2; i++) {
        adds[i].policy = i == 0 && fan_gate ? "fenced" : "add";
        adds[i].payload = pay[i];
        specs[i].action = &adds[i];
    }
    if (!st)
        st = pl_ctx_call_all(res, ctx, specs, 2);
    for (int i = 0; i < 2; i++) {
        pl_step_free(res[i]);
        cJSON_Delete(pay[i]);
    }
    return st ? st : pl_steps_add_resultf(out, "{s:s}", "done", "yes");
}

static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *prompt = t_json("{\"q\": \"ok?\"}"), *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, prompt);
    cJSON_Delete(prompt);
    if (st)
        return st;
    st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static pl_registry *w_registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"nap", nap},       {"gate", gate},     {"slow", slow},
                {"fenced", fenced}, {"fanned", fanned}, {"ask", ask}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* An engine on @p path with host id @p host and a lease of @p lease_ms. */
static pl_engine *w_engine_lease(const char *path, const pl_registry *reg,
                                 const char *host, unsigned lease_ms)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.host_id = host;
    o.lease_ms = lease_ms;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

/* An engine with the tests' short lease. */
static pl_engine *w_engine(const char *path, const pl_registry *reg,
                           const char *host)
{
    return w_engine_lease(path, reg, host, W_LEASE_MS);
}

static void w_setup(void) { snprintf(w_dir, sizeof w_dir, "%s", t_tmpdir()); }

static void w_submit(pl_engine *e, const char *policy, const char *json,
                     const char *id)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = t_json(json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    char *got = NULL;
    cr_assert_eq(pl_run_submit(&got, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(got, id);
    free(got);
    cJSON_Delete((cJSON *)root.payload);
}

/* A worker on its own thread, stopped by w_worker_stop(). */
typedef struct w_worker {
    pthread_t th;
    pl_engine *e;
    unsigned concurrency;
    uint64_t completed, suspended, failed, skipped;
    int rc;
} w_worker;

static void *w_worker_main(void *arg)
{
    w_worker *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = w->concurrency;
    o.poll_ms = 20;
    o.completed = &w->completed;
    o.suspended = &w->suspended;
    o.failed = &w->failed;
    o.skipped = &w->skipped;
    w->rc = pl_worker_run(w->e, &o);
    return NULL;
}

static void w_worker_start(w_worker *w, pl_engine *e, unsigned concurrency)
{
    memset(w, 0, sizeof *w);
    w->e = e;
    w->concurrency = concurrency;
    cr_assert_eq(pthread_create(&w->th, NULL, w_worker_main, w), 0);
}

static void w_worker_stop(w_worker *w)
{
    pl_worker_stop(w->e);
    cr_assert_eq(pthread_join(w->th, NULL), 0);
    cr_assert_eq(w->rc, PL_OK, "%s", pl_errmsg());
}

/* Wait until run @p id has status @p want. */
static void w_await_status(pl_engine *e, const char *id, pl_run_status want)
{
    for (int ms = 0; status_of(e, id) != want; ms += 10) {
        cr_assert_lt(ms, W_BOUND_MS, "run %s never became %s", id,
                     pl_run_status_name(want));
        w_nap(10);
    }
}

TestSuite(workers, .init = w_setup, .fini = t_cleanup, .timeout = 300);

/* ---- the queue ---------------------------------------------------------- */

Test(workers, submitted_runs_wait_and_a_worker_drains_them)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    /* a lease no stall outlasts: a thread of the worker that stalled past
     * a short one could have its run taken by a sibling, and a call in
     * flight made again (that is a_stalled_worker_is_fenced_off's) */
    pl_engine *e = w_engine_lease(path, reg, "host-a", 30000);
    char id[32];
    for (int i = 0; i < 12; i++) {
        snprintf(id, sizeof id, "q-%02d", i);
        w_submit(e, "chain", "{\"n\": 3}", id);
    }
    /* submitted: recorded, not executed */
    cr_assert_eq(t_calls.add, 0);
    cr_assert_eq(t_calls.chain, 0);
    cr_assert_eq(status_of(e, "q-00"), PL_RUN_SUBMITTED);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "q-03"), PL_OK);
    cr_assert_str_eq(info->policy, "chain");
    cr_assert_eq(info->steps, 0);
    pl_run_info_free(info);

    w_worker w;
    w_worker_start(&w, e, 3);
    for (int i = 0; i < 12; i++) {
        snprintf(id, sizeof id, "q-%02d", i);
        w_await_status(e, id, PL_RUN_COMPLETED);
    }
    w_worker_stop(&w);
    cr_assert_eq(w.completed, 12);
    cr_assert_eq(w.failed + w.suspended + w.skipped, 0);
    /* each run executed once: 12 x 3 adds, no more */
    cr_assert_eq(t_calls.chain, 12);
    cr_assert_eq(t_calls.add, 36);
    for (int i = 0; i < 12; i++) {
        snprintf(id, sizeof id, "q-%02d", i);
        cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(workers, a_submitted_run_can_be_continued_directly)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    w_submit(e, "chain", "{\"n\": 2}", "direct");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "direct", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(t_calls.add, 2);
    /* its lease went with its end: a worker finds nothing to take */
    w_worker w;
    w_worker_start(&w, e, 1);
    w_nap(100);
    w_worker_stop(&w);
    cr_assert_eq(w.completed + w.skipped, 0);
    cr_assert_eq(t_calls.add, 2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(workers, suspended_runs_are_not_taken_and_resume_normally)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    w_submit(e, "ask", "{}", "asker");
    w_worker w;
    w_worker_start(&w, e, 2);
    w_await_status(e, "asker", PL_RUN_SUSPENDED);
    w_worker_stop(&w);
    cr_assert_eq(w.suspended, 1);
    /* a suspended run holds no lease: no worker takes it again */
    pl__lease l;
    uint64_t num = 1; /* the store's first run */
    cr_assert_eq(pl__store_lease_get(e->store, num, &l), PL_ENOTFOUND);
    w_worker_start(&w, e, 2);
    w_nap(100);
    w_worker_stop(&w);
    cr_assert_eq(w.suspended + w.completed + w.skipped, 0);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "asker"), PL_OK);
    cJSON *answer = t_json("{\"yes\": true}");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "asker", info->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cJSON_Delete(answer);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(workers, submit_and_worker_refuse_bad_arguments)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    pl_action root = PL_ACTION_INIT;
    root.policy = "chain";
    root.payload = t_json("{}");
    char *id = NULL;
    cr_assert_eq(pl_run_submit(NULL, e, &root, NULL), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "out is NULL"), "%s", pl_errmsg());
    cr_assert_eq(pl_run_submit(&id, NULL, &root, NULL), PL_EINVAL);
    cr_assert_eq(pl_run_submit(&id, e, NULL, NULL), PL_EINVAL);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.version = 99;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    ro = (pl_run_options)PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    ro.check = false;
    ro.run_id = "bad id!";
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    root.policy = "nobody";
    cr_assert_eq(pl_run_submit(&id, e, &root, NULL), PL_ENOTFOUND);
    root.policy = "chain";
    ro.run_id = "twice";
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_OK);
    free(id);
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EEXIST);
    cr_assert_null(id);
    cJSON_Delete((cJSON *)root.payload);

    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.version = 7;
    cr_assert_eq(pl_worker_run(e, &wo), PL_EINVAL);
    wo = (pl_worker_options)PL_WORKER_OPTIONS_INIT;
    wo.concurrency = 1000;
    cr_assert_eq(pl_worker_run(e, &wo), PL_EINVAL);
    cr_assert_eq(pl_worker_run(NULL, NULL), PL_EINVAL);
    pl_worker_stop(NULL); /* nothing */
    /* a stop asked before the worker starts makes it return at once */
    pl_worker_stop(e);
    cr_assert_eq(pl_worker_run(e, NULL), PL_OK);
    pl_engine_close(e);

    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.lease_ms = 50;
    cr_assert_eq(pl_engine_open(&e, path, reg, &eo), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "lease_ms"), "%s", pl_errmsg());
    eo.lease_ms = 0;
    /* a host id names a lease's holder in the store and in the tools'
     * text and JSON: empty, longer than 255 bytes, not UTF-8 (which a
     * PostgreSQL store's text refused at every take, read as the store
     * lost) or with a control character (a line of its own in
     * ledger-dump) is refused at open */
    char longer[300];
    memset(longer, 'h', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    static const char *const bad_hosts[] = {"", "\xff\xfe", "host\nFAKE",
                                            "tab\there", "del\x7f"};
    for (size_t i = 0; i <= sizeof bad_hosts / sizeof *bad_hosts; i++) {
        eo.host_id = i < sizeof bad_hosts / sizeof *bad_hosts ? bad_hosts[i]
                                                              : longer;
        e = NULL;
        cr_assert_eq(pl_engine_open(&e, path, reg, &eo), PL_EINVAL,
                     "host id %zu", i);
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), "host id"), "%s", pl_errmsg());
    }
    /* UTF-8, spaces and @ are fine: the queued run taken under it names it */
    eo.host_id = "h\xc3\xb4te-1 (b@y)";
    cr_assert_eq(pl_engine_open(&e, path, reg, &eo), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "twice", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "twice"), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(ri->owner_host, eo.host_id);
    pl_run_info_free(ri);
    pl_engine_close(e);
    /* a version 2 struct ends before host_id and lease_ms: not read */
    eo.version = 2;
    eo.lease_ms = 5;
    cr_assert_eq(pl_engine_open(&e, path, reg, &eo), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- leases between processes ------------------------------------------- */

/* A take's claim (pl__store_take()): the state written as it was. */
static int w_claim(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    (void)drop;
    (void)user;
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

/* Takes of the store's one queued run by @p n processes at once. */
Test(workers, a_queued_run_is_taken_exactly_once)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    w_submit(e, "chain", "{}", "once");
    pl_engine_close(e); /* children open their own */
    enum { N = 6 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            char host[16];
            snprintf(host, sizeof host, "host-%d", i);
            pl_engine *ce = w_engine(path, reg, host);
            while (!w_exists("start"))
                w_nap(5);
            pl__lease l;
            bool taken = false;
            int st = pl__store_take(ce->store, host, 60000000, w_claim, NULL,
                                    &l, &taken);
            if (!st && (!taken || strcmp(l.id, "once") != 0))
                _exit(3);
            _exit(st == PL_OK ? 0 : st == PL_ENOTFOUND ? 1 : 2);
        }
    }
    w_touch("start");
    int took = 0, none = 0;
    for (int i = 0; i < N; i++) {
        int status;
        cr_assert_eq(waitpid(kids[i], &status, 0), kids[i]);
        cr_assert(WIFEXITED(status), "a claimer died");
        took += WEXITSTATUS(status) == 0;
        none += WEXITSTATUS(status) == 1;
    }
    cr_assert_eq(took, 1, "%d processes took the same run", took);
    cr_assert_eq(none, N - 1);
    pl_registry_free(reg);
}

/*
 * A call that blocks three leases long keeps its run: the engine renews
 * the lease meanwhile, and another host's claims all fail.  The lease is
 * a second here, so that a loaded machine's scheduling delays (a renewal
 * is due every third of a lease) cannot cost the run its lease.
 */
Test(workers, a_call_longer_than_the_lease_keeps_its_run)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    pl_engine_close(e); /* creates the store */
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        /* a lease long enough that a loaded machine (a sanitizer build
         * sharing two cores) still renews it in time: renewal comes every
         * third of it */
        pl_engine *ce = w_engine_lease(path, reg, "host-a", 2000);
        pl_action root = PL_ACTION_INIT;
        root.policy = "slow";
        root.payload = t_json("{\"ms\": 6000}"); /* 3 leases */
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "long";
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, ce, &root, &ro);
        _exit(st || o->status != PL_RUN_COMPLETED ? 1 : 0);
    }
    w_await("in");
    e = w_engine(path, reg, "host-b");
    /* another host sees the run's owner alive while its call blocks */
    pl_run_info *info = NULL;
    bool blocking = !w_exists("out");
    cr_assert_eq(pl_run_get(&info, e, "long"), PL_OK, "%s", pl_errmsg());
    if (blocking && info->status == PL_RUN_RUNNING)
        cr_assert(info->owner_alive, "a blocked call's owner shows dead");
    pl_run_info_free(info);
    int tries = 0;
    for (;;) {
        bool call_over = w_exists("out"); /* before the attempt */
        pl_outcome *o = NULL;
        int st = pl_run_continue(&o, e, "long", NULL);
        /* the call may also end during the attempt, and host-a complete
         * the run before host-b reads it: then host-b ran nothing */
        bool done_meanwhile = !st && o && o->status == PL_RUN_COMPLETED &&
                              o->calls_executed == 0 && w_exists("out");
        if (call_over || done_meanwhile) {
            pl_outcome_free(o);
            break;
        }
        cr_assert_eq(st, PL_EBUSY,
                     "host-b took a run whose call still "
                     "blocks: %s",
                     pl_errmsg());
        cr_assert(strstr(pl_errmsg(), "host-a"), "%s", pl_errmsg());
        tries++;
        w_nap(20);
    }
    cr_assert_gt(tries, 0);
    int status;
    cr_assert_eq(waitpid(kid, &status, 0), kid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the run's own process did not complete it");
    cr_assert_eq(status_of(e, "long"), PL_RUN_COMPLETED);
    cr_assert_eq(pl_run_verify(e, "long"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A worker SIGKILLed in a call: its lease expires, and another host's
 * worker takes the run and finishes it.
 */
Test(workers, a_dead_workers_run_is_taken_after_its_lease_expires)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    w_submit(e, "fenced", "{}", "orphan");
    pl_engine_close(e);
    w_touch("block");
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        pl_engine *ce = w_engine(path, reg, "host-a");
        cr_assert_eq(pl_worker_run(ce, NULL), PL_OK);
        _exit(0);
    }
    w_await("in"); /* in the gate: one add is durable */
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    w_remove("block");
    e = w_engine(path, reg, "host-b");
    cr_assert_eq(status_of(e, "orphan"), PL_RUN_RUNNING);
    /* once its lease expires, the run shows its owner gone */
    for (int ms = 0;; ms += 10) {
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, "orphan"), PL_OK);
        bool alive = info->owner_alive;
        pl_run_info_free(info);
        if (!alive)
            break;
        cr_assert_lt(ms, W_BOUND_MS, "a dead worker's run shows it alive");
        w_nap(10);
    }
    /* and may be forked, as a run whose owner is gone (its last write is
     * recent, but its lease says the owner is dead) */
    char *forked = NULL;
    cr_assert_eq(pl_run_fork(&forked, e, "orphan", "0:0", "orphan-copy"), PL_OK,
                 "%s", pl_errmsg());
    free(forked);
    w_worker w;
    w_worker_start(&w, e, 1);
    /* the worker takes both: the fork is in the queue too */
    w_await_status(e, "orphan", PL_RUN_COMPLETED);
    w_await_status(e, "orphan-copy", PL_RUN_COMPLETED);
    w_worker_stop(&w);
    cr_assert_eq(w.completed, 2);
    /* the orphan's first add was served from the ledger: its second ran
     * here, and the fork's two (forked at its first step) */
    cr_assert_eq(t_calls.add, 3);
    cr_assert_eq(pl_run_verify(e, "orphan"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The stalled worker's PL_EVENT_LEASE_LOST events: how many, the last's
 * status and run. */
static int g_lost, g_lost_status;
static char g_lost_run[PL_MAX_RUN_ID + 1];

static void count_lease_lost(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_LEASE_LOST)
        return;
    g_lost++;
    g_lost_status = ev->status;
    snprintf(g_lost_run, sizeof g_lost_run, "%s", ev->run_id ? ev->run_id : "");
}

/*
 * Run @p policy ({} or @p payload) as "contested" in a child process on
 * host-a, and stop it (SIGSTOP) once it is in the gate, outside its writes
 * (else @p e, the test's engine, could not write): its pid; its
 * pl_run_start()'s status, lease-lost events and message come down
 * @p fds[0] (stalled_says()).
 */
static pid_t stall_in_gate(pl_engine *e, const char *path,
                           const pl_registry *reg, const char *policy,
                           const char *payload, int *fds)
{
    w_touch("block");
    cr_assert_eq(pipe(fds), 0);
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        close(fds[0]);
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.host_id = "host-a";
        eo.lease_ms = W_LEASE_MS;
        eo.on_event = count_lease_lost;
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, path, reg, &eo))
            _exit(3);
        pl_action root = PL_ACTION_INIT;
        root.policy = policy;
        root.payload = t_json(payload);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "contested";
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, ce, &root, &ro);
        char msg[600];
        int n = snprintf(msg, sizeof msg, "%d %d %d %s %s", st, g_lost,
                         g_lost_status, g_lost_run[0] ? g_lost_run : "-",
                         pl_errmsg());
        if (write(fds[1], msg, (size_t)n) != n)
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    w_await("in");
    t_stop_outside_writes(kid, e);
    w_remove("block"); /* this host's gate must not wait */
    return kid;
}

/* Wake the stalled child @p kid: it must stop with PL_EBUSY, saying once
 * that it lost the run's lease. */
static void stalled_says(pid_t kid, int fd)
{
    kill(kid, SIGCONT);
    int status;
    cr_assert_eq(waitpid(kid, &status, 0), kid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char msg[600] = {0};
    cr_assert_gt(read(fd, msg, sizeof msg - 1), 0);
    close(fd);
    int kst = 0, lost = 0, lost_st = 0;
    char lost_run[PL_MAX_RUN_ID + 1] = "";
    cr_assert_eq(sscanf(msg, "%d %d %d %128s", &kst, &lost, &lost_st, lost_run),
                 4, "%s", msg);
    cr_assert_eq(kst, PL_EBUSY, "the stalled worker: %s", msg);
    cr_assert(strstr(msg, "lease") && strstr(msg, "taken over"), "%s", msg);
    cr_assert_eq(lost, 1, "PL_EVENT_LEASE_LOST %d times: %s", lost, msg);
    cr_assert_eq(lost_st, PL_EBUSY, "%s", msg);
    cr_assert_str_eq(lost_run, "contested");
}

/* A digest of every step of run @p id. */
static uint64_t w_run_digest(pl_engine *e, const char *id)
{
    uint64_t h = 1469598103934665603ULL;
    cr_assert_eq(pl_run_walk(e, id, t_visit_mix_step, &h), PL_OK, "%s",
                 pl_errmsg());
    return h;
}

/* Continue run @p id to its end once its lease has run out. */
static void continue_when_free(pl_engine *e, const char *id)
{
    pl_outcome *o = NULL;
    int st;
    for (int ms = 0; (st = pl_run_continue(&o, e, id, NULL)) == PL_EBUSY;
         ms += 20) {
        cr_assert_lt(ms, W_BOUND_MS, "%s: its lease never ran out", id);
        w_nap(20);
    }
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
}

/*
 * Fencing: a worker that stalls (SIGSTOP) longer than its lease loses the
 * run to another; when it wakes, its next commit fails with PL_EBUSY and
 * writes nothing into the run the other finished, and PL_EVENT_LEASE_LOST
 * says so, once.
 */
Test(workers, a_stalled_worker_is_fenced_off)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-b");
    int fds[2];
    pid_t kid = stall_in_gate(e, path, reg, "fenced", "{}", fds);
    /* wait for the stalled worker's lease to expire, then take the run */
    continue_when_free(e, "contested");
    pl_run_info *before = NULL;
    cr_assert_eq(pl_run_get(&before, e, "contested"), PL_OK);
    uint64_t steps = w_run_digest(e, "contested");
    /* wake the stalled worker: it leaves the gate and tries to go on */
    stalled_says(kid, fds[0]);
    /* nothing of its was written: the run is as host-b left it */
    pl_run_info *after = NULL;
    cr_assert_eq(pl_run_get(&after, e, "contested"), PL_OK);
    cr_assert_eq(after->status, PL_RUN_COMPLETED);
    cr_assert_eq(after->steps, before->steps);
    cr_assert_eq(after->updated_us, before->updated_us);
    cr_assert_eq(w_run_digest(e, "contested"), steps);
    pl_run_info_free(before);
    pl_run_info_free(after);
    cr_assert_eq(pl_run_verify(e, "contested"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * The same with the stall in a fan-out's branch (in its callee's second
 * call), whose commit is the first the worker makes once it wakes: another took the run's lease meanwhile
 * (and has not gone on yet), so that commit is refused too, and the run's
 * ledger is as the take left it; the taker then finishes the run.
 */
Test(workers, a_stalled_fan_out_branch_is_fenced_off)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-b");
    int fds[2];
    pid_t kid = stall_in_gate(e, path, reg, "fanned", "{\"fan_gate\": 1}", fds);
    pl__lease l;
    bool taken = false;
    for (int ms = 0; !taken; ms += 20) {
        cr_assert_lt(ms, W_BOUND_MS, "the stalled lease never expired");
        w_nap(20);
        int st = pl__store_take(e->store, "host-b", W_LEASE_MS * 1000, w_claim,
                                NULL, &l, &taken);
        cr_assert(st == PL_OK || st == PL_ENOTFOUND, "%s", pl_errmsg());
    }
    cr_assert_str_eq(l.id, "contested");
    uint64_t steps = w_run_digest(e, "contested");
    stalled_says(kid, fds[0]);
    cr_assert_eq(w_run_digest(e, "contested"), steps,
                 "the stalled worker's branch wrote into the run");
    /* the take's lease runs out; this engine goes on from the record */
    continue_when_free(e, "contested");
    cr_assert_eq(pl_run_verify(e, "contested"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A stopping worker lets the call under way finish, stops the run before
 * its next call and hands it back to the queue; the next worker goes on.
 * @p policy: an add, the gate, then @p adds_after more adds (fenced: one
 * call; fanned: a fan-out of two, none of which may start after the stop).
 */
static void stop_between_calls(const char *policy, int adds_after)
{
    const char *path = w_store();
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(path, reg, "host-a");
    w_submit(e, policy, "{}", "handed");
    w_touch("block");
    w_worker w;
    w_worker_start(&w, e, 1);
    w_await("in"); /* in the gate, the first add durable */
    pl_worker_stop(e);
    w_remove("block"); /* the gate call finishes */
    cr_assert_eq(pthread_join(w.th, NULL), 0);
    cr_assert_eq(w.rc, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(w.skipped, 1);
    cr_assert_eq(w.completed, 0);
    cr_assert_eq(t_calls.add, 1, "%s: a call after the stop ran", policy);
    cr_assert_eq(status_of(e, "handed"), PL_RUN_RUNNING);
    pl__lease l;
    cr_assert_eq(pl__store_lease_get(e->store, 1, &l), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_leq(l.expires_in_us, 0, "the run was not handed back");
    /* the next worker goes on from the durable calls */
    w_worker_start(&w, e, 1);
    w_await_status(e, "handed", PL_RUN_COMPLETED);
    w_worker_stop(&w);
    cr_assert_eq(w.completed, 1);
    cr_assert_eq(t_calls.add, 1 + adds_after);
    cr_assert_eq(pl_run_verify(e, "handed"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(workers, a_stopping_worker_hands_its_run_back_between_calls)
{
    stop_between_calls("fenced", 1);
}

Test(workers, a_stopping_worker_starts_no_fan_out)
{
    stop_between_calls("fanned", 2);
}
