/*
 * stress_threads -- the engine under threads, as a plain program, so that
 * ThreadSanitizer can run it (Criterion's runner cannot run under it).
 *
 *   stress_threads DIR
 *
 * On one engine per durability mode, at once:
 *   - plain threads, each running runs of its own (group commit's futex
 *     protocol in group mode);
 *   - a pl_pool, whose tasks run runs on fibers and whose threads commit
 *     many tasks' batches at once; some tasks queue more tasks;
 *   - fan-outs (pl_ctx_call_all) on both, whose callees call on threads of
 *     their own and commit beside everyone else.
 * Afterwards every run must have completed with every call executed once,
 * and pl_run_verify() must pass on every run.  Exit status 0, or 1 with
 * the first failure on stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <policyledger.h>

#define THREADS 4
#define RUNS_PER_THREAD 3
#define POOL_RUNS 48
#define CALLS 40
#define FAN 8       /* calls in a fan-out ... */
#define FAN_SUB 2   /* ... each making this many tool calls */
#define POOL_FANS 4 /* pool tasks that also run a fan-out */

static atomic_int g_failures;
static atomic_long g_tool_calls;

static void fail(const char *what, const char *run_id, const char *why)
{
    if (atomic_fetch_add(&g_failures, 1) == 0)
        fprintf(stderr, "stress_threads: %s %s: %s\n", what, run_id,
                why ? why : "");
}

static int tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    atomic_fetch_add(&g_tool_calls, 1);
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "twice",
                            cJSON_IsNumber(i) ? 2 * i->valuedouble : -1);
    int st = r ? pl_steps_add_result(out, r) : PL_ENOMEM;
    cJSON_Delete(r);
    return st;
}

/* Calls the tool CALLS times and checks every answer. */
static int root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = cJSON_CreateObject();
    cJSON *iv = cJSON_AddNumberToObject(p, "i", 0);
    int st = iv ? PL_OK : PL_ENOMEM;
    for (int i = 0; !st && i < CALLS; i++) {
        cJSON_SetNumberValue(iv, i);
        pl_action call = {PL_ACTION_VERSION, "tool", p, NULL, 0, NULL};
        pl_step *res = NULL;
        if ((st = pl_ctx_call(&res, ctx, &call, NULL, 0)))
            break;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                          "twice");
        if (!cJSON_IsNumber(t) || t->valuedouble != 2.0 * i)
            st = PL_EPOLICY;
        pl_step_free(res);
    }
    cJSON_Delete(p);
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

/* A fan-out's callee: FAN_SUB tool calls. */
static int mid(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    int st = PL_OK;
    for (int j = 0; !st && j < FAN_SUB; j++) {
        cJSON *twice = NULL;
        st = pl_ctx_invoke(&twice, ctx, "tool", a->payload);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(twice, "twice");
        if (!st && (!cJSON_IsNumber(t) || t->valuedouble != 2 * k->valuedouble))
            st = PL_EPOLICY;
        cJSON_Delete(twice);
    }
    return st ? st : pl_steps_add_result(out, a->payload);
}

/* FAN calls to mid at once; checks every result is its own call's. */
static int fanroot(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p[FAN];
    pl_action acts[FAN];
    pl_call_spec specs[FAN];
    pl_step *res[FAN];
    for (int i = 0; i < FAN; i++) {
        p[i] = cJSON_CreateObject();
        cJSON_AddNumberToObject(p[i], "i", i);
        acts[i] = (pl_action)PL_ACTION_INIT;
        acts[i].policy = "mid";
        acts[i].payload = p[i];
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &acts[i];
    }
    int st = pl_ctx_call_all(res, ctx, specs, FAN);
    for (int i = 0; i < FAN; i++) {
        if (!st && !cJSON_Compare(pl_step_payload(res[i]), p[i], true))
            st = PL_EPOLICY;
        pl_step_free(res[i]); /* NULL when the fan-out failed */
        cJSON_Delete(p[i]);
    }
    return st ? st : pl_steps_add_text(out, NULL, "fanned");
}

/* Run @p policy as run @p id: it must complete, having executed @p calls
 * calls once each. */
static void run_as(pl_engine *e, const char *policy, const char *id,
                   uint64_t calls)
{
    pl_action a = {PL_ACTION_VERSION, policy, pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    if (st)
        fail("starting run", id, pl_errmsg());
    else if (o->status != PL_RUN_COMPLETED)
        fail("run", id, o->reason);
    else if (o->calls_executed != calls)
        fail("run", id, "did not execute every call once");
    pl_outcome_free(o);
}

static void run_one(pl_engine *e, const char *id)
{
    run_as(e, "root", id, CALLS);
}

/* A fan-out run, verified at once (verify_all() knows only the others). */
static void run_fan(pl_engine *e, const char *id)
{
    run_as(e, "fanroot", id, FAN * (1 + FAN_SUB));
    if (pl_run_verify(e, id))
        fail("verifying run", id, pl_errmsg());
}

typedef struct job {
    pl_engine *e;
    pl_pool *pool; /* for tasks that queue another */
    char id[32];
    struct job *then; /* queued by this job's task when it ends */
    bool fan;         /* the task runs a fan-out too */
} job;

static void *thread_main(void *arg)
{
    job *j = arg;
    for (int k = 0; k < RUNS_PER_THREAD; k++) {
        char id[48];
        snprintf(id, sizeof id, "%s-%d", j->id, k);
        run_one(j->e, id);
    }
    char id[48];
    snprintf(id, sizeof id, "%s-fan", j->id);
    run_fan(j->e, id);
    return NULL;
}

static void task_main(pl_engine *e, void *user)
{
    job *j = user;
    run_one(e, j->id);
    if (j->fan) {
        char id[48];
        snprintf(id, sizeof id, "%s-fan", j->id);
        run_fan(e, id);
    }
    if (j->then && pl_pool_submit(j->pool, task_main, j->then))
        fail("queueing a task after", j->id, pl_errmsg());
}

static void verify_all(pl_engine *e, const job *jobs, size_t n, bool threads)
{
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < (threads ? RUNS_PER_THREAD : 1); k++) {
            char id[48];
            if (threads)
                snprintf(id, sizeof id, "%s-%d", jobs[i].id, k);
            else
                snprintf(id, sizeof id, "%s", jobs[i].id);
            if (pl_run_verify(e, id))
                fail("verifying run", id, pl_errmsg());
        }
    }
}

static void stress(const char *dir, pl_registry *reg, pl_durability mode)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.db", dir, pl_durability_name(mode));
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = mode;
    pl_engine *e;
    if (pl_engine_open(&e, path, reg, &eo)) {
        fail("opening", path, pl_errmsg());
        return;
    }
    pl_pool *pool;
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 2;
    po.tasks_per_thread = 16;
    if (pl_pool_new(&pool, e, &po)) {
        fail("starting a pool on", path, pl_errmsg());
        pl_engine_close(e);
        return;
    }
    job tasks[POOL_RUNS], threads[THREADS];
    for (int i = 0; i < POOL_RUNS; i++) {
        tasks[i] = (job){e, pool, "", NULL, i < POOL_FANS};
        snprintf(tasks[i].id, sizeof tasks[i].id, "task-%d", i);
    }
    /* the last quarter is queued by tasks of the first quarter */
    for (int i = 0; i < POOL_RUNS / 4; i++)
        tasks[i].then = &tasks[POOL_RUNS - POOL_RUNS / 4 + i];
    for (int i = 0; i < POOL_RUNS - POOL_RUNS / 4; i++)
        if (pl_pool_submit(pool, task_main, &tasks[i]))
            fail("queueing", tasks[i].id, pl_errmsg());
    pthread_t th[THREADS];
    bool started[THREADS];
    for (int i = 0; i < THREADS; i++) {
        threads[i] = (job){e, NULL, "", NULL, false};
        snprintf(threads[i].id, sizeof threads[i].id, "thread-%d", i);
        started[i] = !pthread_create(&th[i], NULL, thread_main, &threads[i]);
        if (!started[i])
            fail("starting", threads[i].id, "pthread_create failed");
    }
    for (int i = 0; i < THREADS; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    if (pl_pool_wait(pool))
        fail("waiting for", "the pool", pl_errmsg());
    pl_pool_free(pool);
    verify_all(e, tasks, POOL_RUNS, false);
    verify_all(e, threads, THREADS, true);
    pl_engine_close(e);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: stress_threads DIR\n");
        return 2;
    }
    char dir[1024];
    if (strlen(argv[1]) > 900) {
        fprintf(stderr, "stress_threads: the directory's path is too long\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s/stress_threads.XXXXXX", argv[1]);
    if (!mkdtemp(dir)) {
        perror("stress_threads: mkdtemp");
        return 1;
    }
    pl_registry *reg;
    if (pl_registry_new(&reg))
        return 1;
    if (pl_registry_add_fn(reg, "tool", tool, NULL) ||
        pl_registry_add_fn(reg, "root", root, NULL) ||
        pl_registry_add_fn(reg, "mid", mid, NULL) ||
        pl_registry_add_fn(reg, "fanroot", fanroot, NULL)) {
        fprintf(stderr, "stress_threads: %s\n", pl_errmsg());
        return 1;
    }
    static const pl_durability modes[] = {
        PL_DURABILITY_GROUP, PL_DURABILITY_PROCESS, PL_DURABILITY_SYNC};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
        stress(dir, reg, modes[m]);
    pl_registry_free(reg);
    long want = (long)(sizeof modes / sizeof *modes) *
                ((POOL_RUNS + THREADS * RUNS_PER_THREAD) * CALLS +
                 (POOL_FANS + THREADS) * FAN * FAN_SUB);
    if (atomic_load(&g_tool_calls) != want)
        fail("counting", "tool calls", "a call ran twice or not at all");
    /* the stores go; a failure leaves them for a look */
    if (!atomic_load(&g_failures)) {
        for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
            char path[1100];
            snprintf(path, sizeof path, "%s/%s.db", dir,
                     pl_durability_name(modes[m]));
            unlink(path);
            snprintf(path, sizeof path, "%s/%s.db-lock", dir,
                     pl_durability_name(modes[m]));
            unlink(path);
        }
        rmdir(dir);
    }
    return atomic_load(&g_failures) ? 1 : 0;
}
