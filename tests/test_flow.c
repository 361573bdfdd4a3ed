/*
 * test_flow.c -- the queue's flow control: priority and concurrency keys,
 * on the store the suite runs on: LMDB, and PostgreSQL as pg_test_flow
 * (PL_TEST_STORE=postgresql, tests/CMakeLists.txt).
 *
 * Processes are real (fork, SIGKILL), killed workers' leases short
 * (300 ms; the others' long enough that no stall of a loaded host outlasts
 * them), and nothing is timed: every wait is for a condition, with a generous bound; the key
 * limits are checked from the times the runs recorded in their ledgers.
 */
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define F_LEASE_MS 300u
/* The leases of the workers no test kills: their tests assert that a run
 * holds its key's place (or its run) while it runs, which a lease run out
 * (a worker stalled past 300 ms on a loaded host) gives up, as it must */
#define F_HELD_LEASE_MS 10000u
#define F_BOUND_MS 120000 /* the longest any condition is waited for */

static char f_dir[256]; /* markers and the effects of the policies below */

static void f_nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static void f_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", f_dir, name);
}

static bool f_exists(const char *name)
{
    char p[1024];
    f_path(p, sizeof p, name);
    return access(p, F_OK) == 0;
}

static void f_touch(const char *name)
{
    char p[1024];
    f_path(p, sizeof p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

/* ---- policies ------------------------------------------------------------ */

/* The order the runs of "order" executed in (one process: the test's). */
static pthread_mutex_t f_mu = PTHREAD_MUTEX_INITIALIZER;
static int f_seen[256], f_n_seen;

static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    pthread_mutex_lock(&f_mu);
    if (f_n_seen < 256)
        f_seen[f_n_seen++] = n ? n->valueint : -1;
    pthread_mutex_unlock(&f_mu);
    return pl_steps_add_resultf(out, "{}");
}

/* "gate": touches "<name>.in" and waits while "<name>.block" exists. */
static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "name");
    char in[200], block[200];
    snprintf(in, sizeof in, "%s.in", name->valuestring);
    snprintf(block, sizeof block, "%s.block", name->valuestring);
    f_touch(in);
    while (f_exists(block))
        f_nap(5);
    return pl_steps_add_resultf(out, "{}");
}

/* The side effect "tick": this process, the execution of its policy that
 * ticked (@p user: an int; -1 without), and the time. */
static int tick_value(cJSON **out, void *user)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double us = (double)ts.tv_sec * 1e6 + (double)(ts.tv_nsec / 1000);
    return pl_json_pack(out, "{s:f, s:i, s:i}", "t", us, "pid", (int)getpid(),
                        "x", user ? *(const int *)user : -1);
}

/* The executions of "keyed" this process has begun (tick_value()'s "x"). */
static atomic_int g_keyed_runs;

/*
 * "effect": the outside world's side of a call, idempotent by the call's
 * idempotency key as a real service would be: every execution appends a
 * line to effects.log; the first with its key also creates done/<run>.
 */
static int effect(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(a->payload, "run");
    char p[1024], line[300];
    f_path(p, sizeof p, "effects.log");
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return pl_errorf(PL_EIO, "effects.log: %s", strerror(errno));
    int len = snprintf(line, sizeof line, "%s %s\n", run->valuestring,
                       pl_ctx_idempotency_key(ctx));
    bool ok = write(fd, line, (size_t)len) == len;
    close(fd);
    snprintf(p, sizeof p, "%s/done/%s", f_dir, run->valuestring);
    fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    if (!ok)
        return pl_errorf(PL_EIO, "effects.log: a short write");
    return pl_steps_add_resultf(out, "{}");
}

/* "keyed": three ticks a few ms apart around a call of "effect". */
static int keyed(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int x = atomic_fetch_add(&g_keyed_runs, 1), st = PL_OK;
    for (int i = 0; !st && i < 3; i++) {
        cJSON *v = NULL;
        st = pl_ctx_side_effect(&v, ctx, "tick", tick_value, &x);
        cJSON_Delete(v);
        if (!st && i == 1) {
            cJSON *r = NULL, *p = cJSON_CreateObject();
            cJSON_AddItemToObject(
                p, "run",
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a->payload,
                                                                 "run"),
                                1));
            st = pl_ctx_invoke(&r, ctx, "effect", p);
            cJSON_Delete(p);
            cJSON_Delete(r);
        }
        if (!st && i < 2)
            f_nap(2);
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "napper": waits until payload.until (parked meanwhile), then, between a
 * tick "woke" and a tick "done", touches "<run>.in", appends its run to
 * napped.log and waits while "hold" exists. */
static int napper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *until = cJSON_GetObjectItemCaseSensitive(a->payload, "until");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(a->payload, "run");
    int st = pl_ctx_sleep_until(ctx, (int64_t)until->valuedouble);
    for (int i = 0; !st && i < 2; i++) {
        cJSON *v = NULL;
        st = pl_ctx_side_effect(&v, ctx, i ? "done" : "woke", tick_value, NULL);
        cJSON_Delete(v);
        if (st || i)
            break;
        char in[200], p[1024], line[100];
        snprintf(in, sizeof in, "%s.in", run->valuestring);
        f_touch(in);
        f_path(p, sizeof p, "napped.log");
        int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        int len = snprintf(line, sizeof line, "%s\n", run->valuestring);
        bool ok = fd >= 0 && write(fd, line, (size_t)len) == len;
        if (fd >= 0)
            close(fd);
        if (!ok)
            return pl_errorf(PL_EIO, "napped.log: %s", strerror(errno));
        while (f_exists("hold"))
            f_nap(5);
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "relay": {"left": L, "then": P, ...}: while L > 0, continues as new
 * with L - 1; the last link calls P with its payload. */
static int relay(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *left = cJSON_GetObjectItemCaseSensitive(a->payload, "left");
    int st;
    if (left->valueint > 0) {
        cJSON *next = cJSON_Duplicate(a->payload, 1);
        cJSON_SetNumberValue(cJSON_GetObjectItem(next, "left"),
                             left->valueint - 1);
        st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        return st ? st : pl_steps_add_resultf(out, "{}");
    }
    const cJSON *then = cJSON_GetObjectItemCaseSensitive(a->payload, "then");
    cJSON *r = NULL;
    st = pl_ctx_invoke(&r, ctx, then->valuestring, a->payload);
    cJSON_Delete(r);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static pl_registry *f_registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "relay", relay, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "order", order, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "keyed", keyed, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "effect";
    d.fn = effect;
    d.idempotent = false; /* rerun in doubt: its key makes that safe */
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    return reg;
}

static pl_engine *f_engine(const char *path, const pl_registry *reg,
                           const char *host)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.host_id = host;
    o.lease_ms = F_HELD_LEASE_MS;
    o.durability = PL_DURABILITY_PROCESS; /* processes are killed, not hosts */
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

/* The engine of a forked worker, its leases of @p lease_ms: a child process
 * never asserts (Criterion's runner knows only its own children), it exits
 * 3 instead. */
static pl_engine *f_child_engine(const char *path, const pl_registry *reg,
                                 const char *host, unsigned lease_ms)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.host_id = host;
    o.lease_ms = lease_ms;
    o.durability = PL_DURABILITY_PROCESS;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, path, reg, &o) != PL_OK) {
        fprintf(stderr, "%s: %s\n", host, pl_errmsg());
        _exit(3);
    }
    return e;
}

static void f_submit(pl_engine *e, const char *policy, const char *json,
                     const char *id, int priority, const char *key,
                     unsigned limit)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = t_json(json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.priority = priority;
    ro.concurrency_key = key;
    ro.concurrency_limit = limit;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);
}

static void f_await_status(pl_engine *e, const char *id, pl_run_status want)
{
    for (int ms = 0; status_of(e, id) != want; ms += 10) {
        cr_assert_lt(ms, F_BOUND_MS, "run %s never became %s", id,
                     pl_run_status_name(want));
        f_nap(10);
    }
}

static void f_setup(void)
{
    snprintf(f_dir, sizeof f_dir, "%s", t_tmpdir());
    char p[1024];
    f_path(p, sizeof p, "done");
    cr_assert_eq(mkdir(p, 0700), 0);
}

TestSuite(flow, .init = f_setup, .fini = t_cleanup, .timeout = 300);

/* ---- options ------------------------------------------------------------- */

Test(flow, options_out_of_range_are_refused)
{
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(t_store_path(), reg, "host-a");
    pl_action root = PL_ACTION_INIT;
    root.policy = "order";
    root.payload = t_json("{}");
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    char *id = NULL;
    ro.priority = PL_PRIORITY_MAX + 1;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "priority"), "%s", pl_errmsg());
    ro.priority = -PL_PRIORITY_MAX - 1;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    ro.priority = 0;
    ro.concurrency_key = "tenant";
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "concurrency_limit"), "%s", pl_errmsg());
    ro.concurrency_key = "";
    ro.concurrency_limit = 1;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    char long_key[PL_MAX_FLOW_KEY + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    ro.concurrency_key = long_key;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    /* a key is text, on both stores (PostgreSQL keeps it as text: bytes
     * that are not UTF-8 failed the submit there as a store error) */
    static const char *const bad_keys[] = {"\xff\xfe", "a\nb", "\x7f"};
    for (size_t i = 0; i < sizeof bad_keys / sizeof *bad_keys; i++) {
        ro.concurrency_key = bad_keys[i];
        cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL, "key %zu",
                     i);
        cr_assert(strstr(pl_errmsg(), "UTF-8"), "%s", pl_errmsg());
    }
    ro.concurrency_key = "t\xc3\xa9nant 7";
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    free(id);
    id = NULL;
    ro.concurrency_key = NULL;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "concurrency_key"), "%s", pl_errmsg());
    /* pl_run_start executes at once: no queue to order */
    ro = (pl_run_options)PL_RUN_OPTIONS_INIT;
    ro.priority = 3;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &root, &ro), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "pl_run_submit only"), "%s", pl_errmsg());
    cr_assert_null(o);
    /* a version 2 struct ends before them: not read */
    ro.version = 2;
    ro.concurrency_limit = 77;
    cr_assert_eq(pl_run_submit(&id, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    free(id);
    cJSON_Delete((cJSON *)root.payload);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- priority ------------------------------------------------------------ */

Test(flow, priorities_drain_in_order)
{
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(t_store_path(), reg, "host-a");
    enum { N = 40 };
    static const int prios[] = {0, 5, -2, 1, 1, 0, 5, -2};
    int prio_of[N];
    for (int i = 0; i < N; i++) {
        char id[24], json[48];
        snprintf(id, sizeof id, "p-%02d", i);
        snprintf(json, sizeof json, "{\"n\": %d}", i);
        prio_of[i] = prios[(i * 3) % 8];
        f_submit(e, "order", json, id, prio_of[i], NULL, 0);
    }
    t_worker w;
    t_worker_start(&w, e, 1); /* one at a time: the order is the queue's */
    for (int ms = 0;; ms += 10) {
        pthread_mutex_lock(&f_mu);
        int n = f_n_seen;
        pthread_mutex_unlock(&f_mu);
        if (n == N)
            break;
        cr_assert_lt(ms, F_BOUND_MS, "%d of %d runs executed", n, N);
        f_nap(10);
    }
    t_worker_stop(&w);
    /* higher priority first; first in, first out within a priority */
    for (int i = 1; i < N; i++) {
        int a = f_seen[i - 1], b = f_seen[i];
        cr_assert(prio_of[a] > prio_of[b] ||
                      (prio_of[a] == prio_of[b] && a < b),
                  "run %d (priority %d) went before run %d (priority %d)", a,
                  prio_of[a], b, prio_of[b]);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- concurrency keys in one process ------------------------------------- */

/*
 * A run waiting for its key holds no worker and blocks no other key: with
 * key "a" at its limit of 1 (its run held in a gate), the second "a" run
 * stays queued while every "b" run passes it on the same worker threads.
 */
Test(flow, a_run_waiting_for_its_key_holds_no_worker)
{
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(t_store_path(), reg, "host-a");
    f_touch("a1.block");
    f_submit(e, "gate", "{\"name\": \"a1\"}", "a1", 0, "a", 1);
    f_submit(e, "gate", "{\"name\": \"a2\"}", "a2", 0, "a", 1);
    for (int i = 0; i < 6; i++) {
        char id[24], json[64];
        snprintf(id, sizeof id, "b%d", i);
        snprintf(json, sizeof json, "{\"name\": \"%s\"}", id);
        f_submit(e, "gate", json, id, 0, "b", 2);
    }
    t_worker w;
    t_worker_start(&w, e, 2);
    for (int i = 0; i < 6; i++) {
        char id[24];
        snprintf(id, sizeof id, "b%d", i);
        f_await_status(e, id, PL_RUN_COMPLETED);
    }
    cr_assert(f_exists("a1.in"));
    cr_assert_not(f_exists("a2.in"), "a2 started while a1 held key a");
    cr_assert_eq(status_of(e, "a2"), PL_RUN_SUBMITTED);
    char p[1024];
    f_path(p, sizeof p, "a1.block");
    unlink(p);
    f_await_status(e, "a2", PL_RUN_COMPLETED);
    t_worker_stop(&w);
    cr_assert_eq(status_of(e, "a1"), PL_RUN_COMPLETED);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- runs continued as new ------------------------------------------------- */

/*
 * A run continued as new keeps its place in the queue, its priority and
 * its concurrency key: its successor is queued where it was.  Run "p"
 * (priority 5) is continued here while "z" (priority 3, queued after it)
 * waits: the successor "p~1" still goes first.
 */
Test(flow, a_continued_run_keeps_its_place)
{
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(t_store_path(), reg, "host-a");
    f_submit(e, "relay", "{\"left\": 1, \"then\": \"order\", \"n\": 1}", "p", 5,
             NULL, 0);
    f_submit(e, "order", "{\"n\": 2}", "z", 3, NULL, 0);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "p", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    cr_assert_eq(status_of(e, "p~1"), PL_RUN_SUBMITTED);
    f_n_seen = 0;
    t_worker w;
    t_worker_start(&w, e, 1);
    f_await_status(e, "z", PL_RUN_COMPLETED);
    f_await_status(e, "p~1", PL_RUN_COMPLETED);
    t_worker_stop(&w);
    cr_assert_eq(f_n_seen, 2);
    cr_assert_eq(f_seen[0], 1, "p~1 went first (it kept p's place)");
    cr_assert_eq(f_seen[1], 2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * The successor of a keyed run counts under its key: while "c~1" (keyed
 * "a", limit 1, its predecessor's) holds the key in a gate, the next "a"
 * run stays queued and a "b" run passes it.
 */
Test(flow, a_continued_run_keeps_its_key)
{
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(t_store_path(), reg, "host-a");
    f_touch("c.block");
    f_submit(e, "relay", "{\"left\": 1, \"then\": \"gate\", \"name\": \"c\"}",
             "c", 0, "a", 1);
    t_worker w;
    t_worker_start(&w, e, 2);
    for (int ms = 0; !f_exists("c.in"); ms += 10) {
        cr_assert_lt(ms, F_BOUND_MS, "c~1 never ran");
        f_nap(10);
    }
    cr_assert_eq(status_of(e, "c"), PL_RUN_CONTINUED);
    f_submit(e, "gate", "{\"name\": \"a2\"}", "a2", 0, "a", 1);
    f_submit(e, "gate", "{\"name\": \"b1\"}", "b1", 0, "b", 1);
    f_await_status(e, "b1", PL_RUN_COMPLETED);
    cr_assert_not(f_exists("a2.in"), "a2 started while c~1 held key a");
    cr_assert_eq(status_of(e, "a2"), PL_RUN_SUBMITTED);
    char p[1024];
    f_path(p, sizeof p, "c.block");
    unlink(p);
    f_await_status(e, "a2", PL_RUN_COMPLETED);
    f_await_status(e, "c~1", PL_RUN_COMPLETED);
    t_worker_stop(&w);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- an older store -------------------------------------------------------- */

/*
 * A store made before the queue had an order (no `flow` database, its
 * queued runs' leases alone) gains one at its first writable open, its
 * leases indexed: the queued run is taken as before.
 */
Test(flow, an_older_store_gains_its_queue_order)
{
    t_lmdb_only("the upgrade of an LMDB file");
    pl_registry *reg = f_registry();
    const char *path = t_store_path();
    pl_engine *e = f_engine(path, reg, "host-a");
    f_submit(e, "order", "{\"n\": 7}", "old-queued", 0, NULL, 0);
    pl_engine_close(e);
    /* as an older build left it: no flow database */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "flow", 0, &dbi), 0);
    cr_assert_eq(mdb_drop(txn, dbi, 1), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    /* read-only, it stays as it is and reads */
    pl_engine_options ro = PL_ENGINE_OPTIONS_INIT;
    ro.read_only = true;
    cr_assert_eq(pl_engine_open(&e, path, reg, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(status_of(e, "old-queued"), PL_RUN_SUBMITTED);
    pl_engine_close(e);
    e = f_engine(path, reg, "host-a");
    t_worker w;
    t_worker_start(&w, e, 1);
    f_await_status(e, "old-queued", PL_RUN_COMPLETED);
    t_worker_stop(&w);
    cr_assert_eq(f_n_seen, 1);
    cr_assert_eq(f_seen[0], 7);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- many processes, killed -------------------------------------------- */

#define K_RUNS 1000
#define K_KEYS 10
#define K_LIMIT 2
#define K_PROCS 3
#define K_THREADS 4 /* per process: 12 threads for 20 places, keys first */

static void k_worker(const char *path, const pl_registry *reg, int i)
{
    char host[24];
    snprintf(host, sizeof host, "host-%d", i);
    pl_engine *e = f_child_engine(path, reg, host, F_LEASE_MS);
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = K_THREADS;
    o.poll_ms = 10;
    _exit(pl_worker_run(e, &o) == PL_OK ? 0 : 1);
}

static pid_t k_spawn(const char *path, const pl_registry *reg, int i)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        k_worker(path, reg, i);
    return pid;
}

static int k_done_count(void)
{
    char p[1024];
    f_path(p, sizeof p, "done");
    DIR *d = opendir(p);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* One execution of a run: from its first tick to its last, by one
 * execution of its policy in one process.  A process can execute a run
 * twice: its lease ran out while the process stalled (its next commit
 * refused), and one of its threads took the run again. */
typedef struct k_span {
    double from, to;
    int key;
} k_span;

/* Executions of a run by the process that had executed it just before
 * (k_spans()). */
static int k_again;

/* The spans of run @p id (key @p key) from its ledger, into @p out. */
static size_t k_spans(pl_engine *e, const char *id, int key, k_span *out,
                      size_t cap)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    size_t n = 0;
    int last_pid = 0, last_x = -1;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT)
            continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                          "value");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "t");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(v, "pid");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "x");
        cr_assert(cJSON_IsNumber(t) && cJSON_IsNumber(pid) && cJSON_IsNumber(x),
                  "run %s", id);
        if (pid->valueint != last_pid || x->valueint != last_x) {
            cr_assert_lt(n, cap);
            k_again += n && pid->valueint == last_pid;
            out[n++] = (k_span){t->valuedouble, t->valuedouble, key};
            last_pid = pid->valueint;
            last_x = x->valueint;
        } else {
            out[n - 1].to = t->valuedouble;
        }
    }
    pl_steps_free(l);
    return n;
}

static int k_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * 1,000 queued runs, ten keys limited to two each, three worker processes
 * SIGKILLed at random and started again, or stopped past their lease and
 * let go on: at no time do more than two runs of a key execute (by the
 * times their ledgers recorded, an execution's ticks told apart from the
 * next one's of the same process), every run completes, and the effects
 * log, deduplicated by idempotency key as its service does, holds each
 * run once; a line more only for a call cut short by a kill or a stall.
 */
Test(flow, keys_hold_across_killed_workers)
{
    const char *path = t_store_path();
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(path, reg, "host-submit");
    /* each key's runs together: without the limit, the workers would take
     * one key's runs all at once */
    for (int i = 0; i < K_RUNS; i++) {
        char id[24], json[64], key[24];
        snprintf(id, sizeof id, "k-%04d", i);
        snprintf(json, sizeof json, "{\"run\": \"%s\"}", id);
        snprintf(key, sizeof key, "key%d", i / (K_RUNS / K_KEYS));
        f_submit(e, "keyed", json, id, 0, key, K_LIMIT);
    }
    pid_t kids[K_PROCS];
    for (int i = 0; i < K_PROCS; i++)
        kids[i] = k_spawn(path, reg, i);
    unsigned seed = (unsigned)getpid();
    int kills = 0, stalls = 0;
    for (int ms = 0; k_done_count() < K_RUNS; ms += 10) {
        cr_assert_lt(ms, F_BOUND_MS, "%d of %d effects", k_done_count(),
                     K_RUNS);
        if (kills < 8 && rand_r(&seed) % 15 == 0) {
            int i = rand_r(&seed) % K_PROCS;
            kill(kids[i], SIGKILL);
            cr_assert_eq(waitpid(kids[i], NULL, 0), kids[i]);
            kids[i] = k_spawn(path, reg, i);
            kills++;
        } else if (stalls < 4 && rand_r(&seed) % 15 == 0) {
            /* stopped past its lease: its runs' leases run out, its
             * next commits are refused, and it takes runs again */
            int i = rand_r(&seed) % K_PROCS;
            kill(kids[i], SIGSTOP);
            f_nap(2 * F_LEASE_MS);
            kill(kids[i], SIGCONT);
            stalls++;
        }
        f_nap(10);
    }
    for (int i = 0; i < K_RUNS; i++) {
        char id[24];
        snprintf(id, sizeof id, "k-%04d", i);
        f_await_status(e, id, PL_RUN_COMPLETED);
    }
    for (int i = 0; i < K_PROCS; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    /* the spans of every execution, by key */
    size_t cap = K_RUNS * 4, n = 0;
    k_span *spans = calloc(cap, sizeof *spans);
    for (int i = 0; i < K_RUNS; i++) {
        char id[24];
        snprintf(id, sizeof id, "k-%04d", i);
        n += k_spans(e, id, i / (K_RUNS / K_KEYS), spans + n, cap - n);
    }
    int most = 0;
    for (int k = 0; k < K_KEYS; k++) {
        /* the most spans of key k open at once: a sweep over its starts */
        double *at = calloc(n, sizeof *at);
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (spans[i].key == k)
                at[m++] = spans[i].from;
        qsort(at, m, sizeof *at, k_cmp);
        for (size_t i = 0; i < m; i++) {
            int open = 0;
            for (size_t j = 0; j < n; j++)
                open += spans[j].key == k && spans[j].from <= at[i] &&
                        spans[j].to >= at[i];
            cr_assert_leq(open, K_LIMIT,
                          "key%d: %d runs executing at once at %.0f us", k,
                          open, at[i]);
            if (open > most)
                most = open;
        }
        free(at);
    }
    free(spans);
    /* each run's effect once by its key; a repeat only for a kill */
    char p[1024];
    f_path(p, sizeof p, "effects.log");
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    int lines = 0;
    char line[300];
    while (fgets(line, sizeof line, f))
        lines++;
    fclose(f);
    cr_assert_eq(k_done_count(), K_RUNS);
    cr_assert_geq(lines, K_RUNS);
    cr_assert_leq(lines - K_RUNS, (kills + stalls) * K_THREADS,
                  "%d effects repeated for %d kills and %d stalls",
                  lines - K_RUNS, kills, stalls);
    cr_log_info("keys: %d kills, %d stalls, %d repeated effects, at most %d "
                "of a key at once, %d runs executed again by the process "
                "that lost them",
                kills, stalls, lines - K_RUNS, most, k_again);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- woken runs ---------------------------------------------------------- */

/* The time recorded by run @p id's side effect @p name (us). */
static double w_tick(pl_engine *e, const char *id, const char *name)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    double t = -1;
    int seen = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        const cJSON *p = pl_step_payload(s);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(p, "name");
        if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT || !cJSON_IsString(n) ||
            strcmp(n->valuestring, name) != 0)
            continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
        t = cJSON_GetObjectItemCaseSensitive(v, "t")->valuedouble;
        seen++;
    }
    pl_steps_free(l);
    cr_assert_eq(seen, 1, "run %s recorded '%s' %d times", id, name, seen);
    return t;
}

static void w_worker(const char *path, const pl_registry *reg, int i)
{
    char host[24];
    snprintf(host, sizeof host, "host-%d", i);
    /* no lease runs out here: a worker stalled past a short one (a loaded
     * host) lets the other take its run over and execute its woken part
     * again, as it should, which this test would count as a repeat */
    pl_engine *e = f_child_engine(path, reg, host, F_HELD_LEASE_MS);
    if (pl_engine_set_wait_in_place(e, 0)) /* every wait parks */
        _exit(2);
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = 2;
    o.poll_ms = 10;
    _exit(pl_worker_run(e, &o) == PL_OK ? 0 : 1);
}

/*
 * Two runs of a key limited to one, parked on timers due at the same time,
 * and two worker processes to wake them: the second stays due while the
 * first executes (their recorded times never overlap), then runs; each
 * executes its woken part once.
 */
Test(flow, a_woken_run_keeps_to_its_key)
{
    const char *path = t_store_path();
    pl_registry *reg = f_registry();
    pl_engine *e = f_engine(path, reg, "host-submit");
    f_touch("hold");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    /* far enough ahead that both have parked by then (else one runs on
     * without parking, and holds the key as any run does) */
    long long until = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 +
                      1500;
    const char *ids[2] = {"nap-a", "nap-b"};
    for (int i = 0; i < 2; i++) {
        char json[96];
        snprintf(json, sizeof json, "{\"run\": \"%s\", \"until\": %lld}",
                 ids[i], until);
        f_submit(e, "napper", json, ids[i], 0, "one", 1);
    }
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0)
            w_worker(path, reg, i);
    }
    /* one is woken and holds the key; the other has every chance to be
     * woken too (both workers look every 10 ms) before the key frees */
    for (int ms = 0; !f_exists("nap-a.in") && !f_exists("nap-b.in"); ms += 10) {
        cr_assert_lt(ms, F_BOUND_MS, "no run was woken");
        f_nap(10);
    }
    f_nap(1000);
    char p[1024];
    f_path(p, sizeof p, "hold");
    cr_assert_eq(unlink(p), 0);
    for (int i = 0; i < 2; i++)
        f_await_status(e, ids[i], PL_RUN_COMPLETED);
    for (int i = 0; i < 2; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    double woke[2], done[2];
    for (int i = 0; i < 2; i++) {
        woke[i] = w_tick(e, ids[i], "woke");
        done[i] = w_tick(e, ids[i], "done");
        cr_assert_leq(woke[i], done[i]);
    }
    cr_assert(done[0] < woke[1] || done[1] < woke[0],
              "both runs of key 'one' executed at once: %.0f..%.0f and "
              "%.0f..%.0f us",
              woke[0], done[0], woke[1], done[1]);
    /* each woken part once */
    f_path(p, sizeof p, "napped.log");
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    int n[2] = {0, 0};
    char line[100];
    while (fgets(line, sizeof line, f))
        for (int i = 0; i < 2; i++)
            n[i] += strncmp(line, ids[i], strlen(ids[i])) == 0;
    fclose(f);
    cr_assert(n[0] == 1 && n[1] == 1, "woken parts: %d and %d", n[0], n[1]);
    pl_engine_close(e);
    pl_registry_free(reg);
}
