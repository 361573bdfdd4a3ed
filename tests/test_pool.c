/*
 * test_pool.c -- many runs on a few threads (core/engine/pool.c, and the batched
 * commits it makes in core/engine/engine.c).
 *
 *   (a) in group and process mode, runs on a 2-thread pool all complete and
 *       verify, more runs are in flight at once than there are threads, no
 *       task leaves its thread, and the runs share store transactions (on
 *       LMDB the store's transaction count, on PostgreSQL the transactions
 *       that wrote its rows, is far below the number of commits the runs
 *       made);
 *   (b) in sync mode every commit stays a transaction of its own; pool
 *       threads and plain threads share group commits;
 *   (c) a task keeps its own pl_errmsg() while other tasks run on its
 *       thread, and a failing task fails alone, with its own message;
 *   (d) a batch too big for the map fails alone on a pool too;
 *   (e) tasks may queue tasks, and pl_pool_wait() waits for those; runs
 *       suspend and resume as tasks;
 *   (f) bad options and misuse get PL_EINVAL, never a hang; when no task
 *       stack can be mapped, tasks still run, on the thread's own stack;
 *   (g) tasks start in the order queued; a task that overflows its stack
 *       dies of SIGSEGV, as a thread would.
 *
 * Crashes of a pool (SIGKILL mid-commit, then recovery) are in test_crash.c.
 * Tasks run on the pool's threads, where Criterion's assertions cannot be
 * used: they record what they saw, and the test asserts afterwards.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_RUNS 40
#define N_ADDS 12

typedef struct job {
    char id[32];
    int n;          /* chain length */
    int status;     /* pl_run_start's */
    int run_status; /* the outcome's */
    double total;
    char msg[256];    /* pl_errmsg() after a failure */
    pthread_t thread; /* where the task started ... */
    bool moved;       /* ... and whether it ever ran anywhere else */
} job;

/* Start run @p id of @p policy with @p payload (JSON text). */
static int start(pl_engine *e, const char *policy, const char *payload,
                 const char *id, pl_outcome **out)
{
    cJSON *p = cJSON_Parse(payload);
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    int st = pl_run_start(out, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

static atomic_int in_flight, max_in_flight;
static atomic_uint commits; /* run-level commits (events) */

static void count_commits(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_COMMIT)
        atomic_fetch_add(&commits, 1);
}

static void note_flight(int delta)
{
    int now = atomic_fetch_add(&in_flight, delta) + delta;
    int max = atomic_load(&max_in_flight);
    while (now > max &&
           !atomic_compare_exchange_weak(&max_in_flight, &max, now))
        ;
}

/* Task: start a "chain" run of job->n additions. */
static void run_chain(pl_engine *e, void *user)
{
    job *j = user;
    j->thread = pthread_self();
    note_flight(1);
    char payload[64];
    snprintf(payload, sizeof payload, "{\"n\": %d}", j->n);
    pl_outcome *o = NULL;
    j->status = start(e, "chain", payload, j->id, &o);
    j->moved = !pthread_equal(j->thread, pthread_self());
    if (j->status) {
        snprintf(j->msg, sizeof j->msg, "%s", pl_errmsg());
    } else {
        j->run_status = o->status;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                          "total");
        j->total = cJSON_IsNumber(t) ? t->valuedouble : -1;
    }
    pl_outcome_free(o);
    note_flight(-1);
}

static pl_engine *open_counted(const char *path, const pl_registry *reg,
                               pl_durability mode)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = mode;
    o.on_event = count_commits;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

/* The test policies and one more, @p name. */
static pl_registry *registry_with(const char *name, pl_policy_fn fn)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, name, fn, NULL), PL_OK, "%s",
                 pl_errmsg());
    return reg;
}

static pl_pool *pool_of(pl_engine *e, unsigned threads, unsigned per)
{
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = threads;
    po.tasks_per_thread = per;
    pl_pool *p = NULL;
    cr_assert_eq(pl_pool_new(&p, e, &po), PL_OK, "%s", pl_errmsg());
    return p;
}

#if PL_WITH_POSTGRESQL
/* PostgreSQL: the transactions that wrote the run and step rows there. */
static size_t pg_txns(const char *path)
{
    const char *schema = t_pg_schema(path);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(DISTINCT x) FROM (SELECT xmin::text AS x FROM "
             "\"%s\".steps UNION ALL SELECT xmin::text FROM \"%s\".runs) t",
             schema, schema);
    return (size_t)t_pg_number(sql);
}
#endif

/* The transactions the store committed (the engine is closed): on LMDB all
 * ever committed, on PostgreSQL those that wrote the rows there. */
static size_t store_txns(const char *path)
{
#if PL_WITH_POSTGRESQL
    if (t_on_pg())
        return pg_txns(path);
#endif
    MDB_env *env;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY, 0600), 0);
    MDB_envinfo info;
    cr_assert_eq(mdb_env_info(env, &info), 0);
    mdb_env_close(env);
    return info.me_last_txnid;
}

/* Run N_RUNS chains on a 2-thread pool; returns the LMDB transactions the
 * runs took.  Every run completed, verified and stayed on its thread. */
static size_t run_many(pl_durability mode, unsigned per_thread)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = open_counted(path, reg, mode);
    pl_engine_close(e);
    size_t txns_before = store_txns(path);
    e = open_counted(path, reg, mode);
    pl_pool *pool = pool_of(e, 2, per_thread);
    job *jobs = calloc(N_RUNS, sizeof *jobs);
    cr_assert_not_null(jobs);
    for (int i = 0; i < N_RUNS; i++) {
        snprintf(jobs[i].id, sizeof jobs[i].id, "pool-%d", i);
        jobs[i].n = N_ADDS;
        cr_assert_eq(pl_pool_submit(pool, run_chain, &jobs[i]), PL_OK);
    }
    cr_assert_eq(pl_pool_wait(pool), PL_OK);
    pl_pool_free(pool);

    pthread_t seen[2];
    int n_seen = 0;
    for (int i = 0; i < N_RUNS; i++) {
        job *j = &jobs[i];
        cr_assert_eq(j->status, PL_OK, "%s: %s", j->id, j->msg);
        cr_assert_eq(j->run_status, PL_RUN_COMPLETED, "%s", j->id);
        /* chain's calls add 0 + 1 + ... + (n - 1): see support.c */
        cr_assert_eq(j->total, N_ADDS * (N_ADDS - 1) / 2, "%s: %g", j->id,
                     j->total);
        cr_assert_eq(pl_run_verify(e, j->id), PL_OK, "%s: %s", j->id,
                     pl_errmsg());
        cr_assert_not(j->moved, "%s changed threads", j->id);
        bool known = false;
        for (int k = 0; k < n_seen; k++)
            known |= pthread_equal(seen[k], j->thread) != 0;
        if (!known) {
            cr_assert_lt(n_seen, 2, "tasks ran on more than 2 threads");
            seen[n_seen++] = j->thread;
        }
    }
    free(jobs);
    pl_engine_close(e);
    pl_registry_free(reg);
    return store_txns(path) - txns_before;
}

/* 20 runs on a pool in @p mode: more in flight than threads, and far fewer
 * transactions than commits. */
static void expect_shared_transactions(pl_durability mode)
{
    atomic_store(&commits, 0);
    size_t txns = run_many(mode, 20);
    cr_assert_gt(atomic_load(&max_in_flight), 2,
                 "only %d runs were ever in flight at once",
                 atomic_load(&max_in_flight));
    unsigned pool_commits = atomic_load(&commits);
    cr_assert_lt(txns, pool_commits / 2, "%zu transactions for %u commits",
                 txns, pool_commits);
}

Test(pool, group_mode_runs_share_commits_on_two_threads)
{
    expect_shared_transactions(PL_DURABILITY_GROUP);
}

Test(pool, process_mode_runs_share_transactions)
{
    expect_shared_transactions(PL_DURABILITY_PROCESS);
}

Test(pool, sync_mode_commits_stay_each_callers_own)
{
    atomic_store(&commits, 0);
    size_t txns = run_many(PL_DURABILITY_SYNC, 8);
    cr_assert_geq(txns, atomic_load(&commits),
                  "%zu transactions for %u "
                  "commits",
                  txns, atomic_load(&commits));
}

/* A plain thread running its share of jobs, one after the other. */
typedef struct plain {
    pl_engine *e;
    job *jobs;
    int n;
} plain;

static void *run_plain(void *arg)
{
    plain *t = arg;
    for (int i = 0; i < t->n; i++)
        run_chain(t->e, &t->jobs[i]);
    return NULL;
}

Test(pool, pool_threads_and_plain_threads_share_the_group_commits)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    enum { POOLED = 24, THREADS = 4, EACH = 3 };
    job *jobs = calloc(POOLED + THREADS * EACH, sizeof *jobs);
    cr_assert_not_null(jobs);
    for (int i = 0; i < POOLED + THREADS * EACH; i++) {
        snprintf(jobs[i].id, sizeof jobs[i].id, "mixed-%d", i);
        jobs[i].n = N_ADDS;
    }
    pl_pool *pool = pool_of(e, 2, 8);
    for (int i = 0; i < POOLED; i++)
        cr_assert_eq(pl_pool_submit(pool, run_chain, &jobs[i]), PL_OK);
    pthread_t th[THREADS];
    plain args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (plain){e, &jobs[POOLED + t * EACH], EACH};
        cr_assert_eq(pthread_create(&th[t], NULL, run_plain, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    pl_pool_free(pool);
    for (int i = 0; i < POOLED + THREADS * EACH; i++) {
        cr_assert_eq(jobs[i].status, PL_OK, "%s: %s", jobs[i].id, jobs[i].msg);
        cr_assert_eq(jobs[i].run_status, PL_RUN_COMPLETED, "%s", jobs[i].id);
        cr_assert_eq(jobs[i].total, N_ADDS * (N_ADDS - 1) / 2, "%s",
                     jobs[i].id);
        cr_assert_eq(pl_run_verify(e, jobs[i].id), PL_OK, "%s: %s", jobs[i].id,
                     pl_errmsg());
    }
    free(jobs);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- suspend and resume as tasks ------------------------------------------------- */

/* "ask": adds, asks "approve" (a human), adds again; returns the answer. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *args = cJSON_Parse("{\"a\": 1, \"b\": 2}");
    cJSON *q = cJSON_Parse("{\"question\": \"ship?\"}");
    pl_action add = {PL_ACTION_VERSION, "add", args, NULL, 0, NULL},
              approve = {PL_ACTION_VERSION, "approve", q, NULL, 0, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(NULL, ctx, &add, NULL, 0);
    if (!st)
        st = pl_ctx_call(&res, ctx, &approve, NULL, 0);
    if (!st)
        st = pl_ctx_call(NULL, ctx, &add, NULL, 0);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    cJSON_Delete(args);
    cJSON_Delete(q);
    return st;
}

typedef struct ask_job {
    char id[32];
    int status;
    int run_status;
    char token[128];
    double answer;
} ask_job;

static void start_ask(pl_engine *e, void *user)
{
    ask_job *j = user;
    pl_outcome *o = NULL;
    j->status = start(e, "ask", "{}", j->id, &o);
    if (!j->status) {
        j->run_status = o->status;
        if (o->resume_token)
            snprintf(j->token, sizeof j->token, "%s", o->resume_token);
    }
    pl_outcome_free(o);
}

static void resume_ask(pl_engine *e, void *user)
{
    ask_job *j = user;
    char text[64], *end;
    errno = 0;
    long n = strtol(j->id + 4, &end, 10); /* "ask-NN" */
    if (errno || end == j->id + 4 || *end) {
        j->status = PL_EINVAL; /* not an id the test made: it fails */
        return;
    }
    snprintf(text, sizeof text, "{\"yes\": %ld}", n);
    cJSON *answer = cJSON_Parse(text);
    pl_outcome *o = NULL;
    j->status = pl_run_resume(&o, e, j->id, j->token, answer);
    cJSON_Delete(answer);
    if (!j->status) {
        j->run_status = o->status;
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                          "yes");
        j->answer = cJSON_IsNumber(y) ? y->valuedouble : -1;
    }
    pl_outcome_free(o);
}

Test(pool, runs_suspend_and_resume_as_tasks)
{
    const char *path = t_store_path();
    pl_registry *reg = registry_with("ask", ask);
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    pl_pool *pool = pool_of(e, 2, 8);
    enum { N = 20 };
    ask_job jobs[N];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        snprintf(jobs[i].id, sizeof jobs[i].id, "ask-%02d", i);
        cr_assert_eq(pl_pool_submit(pool, start_ask, &jobs[i]), PL_OK);
    }
    cr_assert_eq(pl_pool_wait(pool), PL_OK);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(jobs[i].status, PL_OK, "%s", jobs[i].id);
        cr_assert_eq(jobs[i].run_status, PL_RUN_SUSPENDED, "%s", jobs[i].id);
        cr_assert_neq(jobs[i].token[0], '\0');
        cr_assert_eq(pl_pool_submit(pool, resume_ask, &jobs[i]), PL_OK);
    }
    pl_pool_free(pool);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(jobs[i].status, PL_OK, "%s", jobs[i].id);
        cr_assert_eq(jobs[i].run_status, PL_RUN_COMPLETED, "%s", jobs[i].id);
        cr_assert_eq(jobs[i].answer, i, "%s", jobs[i].id);
        cr_assert_eq(pl_run_verify(e, jobs[i].id), PL_OK, "%s", pl_errmsg());
    }
    /* "add" ran twice per run: before the question and after the answer */
    cr_assert_eq(atomic_load(&t_calls.add), 2 * N);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- errors stay with their task ----------------------------------------------- */

/*
 * "keeper": fails a call of its own (an unknown durability name naming the
 * run), then calls a policy that is not registered: no policy code runs,
 * but the error result is committed, and other tasks run on this thread
 * meanwhile.  Returns whether pl_errmsg() is that call's PL_ERESULT
 * message, naming its own run.
 */
static int keeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *tag = cJSON_GetObjectItemCaseSensitive(a->payload, "tag");
    char name[64];
    snprintf(name, sizeof name, "bogus-%s",
             cJSON_IsString(tag) ? tag->valuestring : "?");
    pl_durability d;
    if (pl_durability_parse(&d, name) != PL_EINVAL)
        return pl_steps_add_error(out, "Test", "parse did not fail");
    cJSON *args = cJSON_CreateObject();
    pl_action add = {PL_ACTION_VERSION, "no-such-policy", args, NULL, 0, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &add, NULL, 0);
    cJSON_Delete(args);
    pl_step_free(res);
    if (st != PL_ERESULT)
        return st ? st : pl_errorf(PL_EPOLICY, "no NotFound error result");
    /* PL_ERESULT's message names the run: this task's own */
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "kept",
                          cJSON_IsString(tag) &&
                              strstr(pl_errmsg(), tag->valuestring) &&
                              strstr(pl_errmsg(), "NotFound"));
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

typedef struct keep_job {
    char id[32];
    int status;
    bool kept;
    char msg[256];
} keep_job;

static void run_keeper(pl_engine *e, void *user)
{
    keep_job *j = user;
    char payload[64];
    snprintf(payload, sizeof payload, "{\"tag\": \"%s\"}", j->id);
    pl_outcome *o = NULL;
    j->status = start(e, "keeper", payload, j->id, &o);
    snprintf(j->msg, sizeof j->msg, "%s", pl_errmsg());
    if (!j->status && o->status == PL_RUN_COMPLETED) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                          "kept");
        j->kept = cJSON_IsTrue(k);
    }
    pl_outcome_free(o);
}

Test(pool, a_task_keeps_its_own_error_message)
{
    const char *path = t_store_path();
    pl_registry *reg = registry_with("keeper", keeper);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    /* one thread: every task shares it */
    pl_pool *pool = pool_of(e, 1, 16);
    keep_job jobs[16];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 16; i++) {
        snprintf(jobs[i].id, sizeof jobs[i].id, "keep-%03d", i);
        cr_assert_eq(pl_pool_submit(pool, run_keeper, &jobs[i]), PL_OK);
    }
    /* and a second round whose runs exist already: each fails alone,
     * with a message naming its own run */
    keep_job again[16];
    memset(again, 0, sizeof again);
    cr_assert_eq(pl_pool_wait(pool), PL_OK);
    for (int i = 0; i < 16; i++) {
        snprintf(again[i].id, sizeof again[i].id, "keep-%03d",
                 i % 2 ? i : 100 + i);
        cr_assert_eq(pl_pool_submit(pool, run_keeper, &again[i]), PL_OK);
    }
    pl_pool_free(pool);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(jobs[i].status, PL_OK, "%s: %s", jobs[i].id, jobs[i].msg);
        cr_assert(jobs[i].kept, "%s lost its message", jobs[i].id);
        if (i % 2) {
            cr_assert_eq(again[i].status, PL_EEXIST, "%s", again[i].id);
            /* ids are all the same length: none is in another */
            cr_assert(strstr(again[i].msg, again[i].id), "%s got \"%s\"",
                      again[i].id, again[i].msg);
        } else {
            cr_assert_eq(again[i].status, PL_OK, "%s: %s", again[i].id,
                         again[i].msg);
            cr_assert(again[i].kept);
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a batch too big for the map ------------------------------------------------ */

/* "big": returns a result of payload.kb kilobytes */
static int big(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int kb = cJSON_GetObjectItemCaseSensitive(a->payload, "kb")->valueint;
    size_t n = (size_t)kb * 1024;
    char *s = malloc(n + 1);
    if (!s)
        return PL_ENOMEM;
    memset(s, 'x', n);
    s[n] = '\0';
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "blob", s);
    free(s);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

typedef struct big_job {
    char id[32];
    int kb;
    int status;
    int run_status;
    int error;
} big_job;

static void run_big(pl_engine *e, void *user)
{
    big_job *j = user;
    char payload[64];
    snprintf(payload, sizeof payload, "{\"kb\": %d}", j->kb);
    pl_outcome *o = NULL;
    j->status = start(e, "big", payload, j->id, &o);
    if (!j->status) {
        j->run_status = o->status;
        j->error = o->error;
    }
    pl_outcome_free(o);
}

Test(pool, a_batch_too_big_for_the_map_fails_alone)
{
    t_lmdb_only("the map size is LMDB's");
    const char *path = t_store_path();
    pl_registry *reg = registry_with("big", big);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_GROUP;
    o.map_size = (size_t)1 << 20;
    o.map_size_max = (size_t)1 << 20;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    pl_pool *pool = pool_of(e, 1, 16);
    big_job jobs[12];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 12; i++) {
        snprintf(jobs[i].id, sizeof jobs[i].id, "big-%d", i);
        jobs[i].kb = i % 4 == 3 ? 2048 : 1;
        cr_assert_eq(pl_pool_submit(pool, run_big, &jobs[i]), PL_OK);
    }
    pl_pool_free(pool);
    for (int i = 0; i < 12; i++) {
        big_job *j = &jobs[i];
        if (j->kb > 1) { /* failed, and said why */
            cr_assert(j->status == PL_EMAPFULL ||
                          (j->status == PL_OK && j->error == PL_EMAPFULL),
                      "%s: status %d, error %d", j->id, j->status, j->error);
        } else {
            cr_assert_eq(j->status, PL_OK, "%s", j->id);
            cr_assert_eq(j->run_status, PL_RUN_COMPLETED, "%s", j->id);
            cr_assert_eq(pl_run_verify(e, j->id), PL_OK, "%s: %s", j->id,
                         pl_errmsg());
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- tasks that queue tasks ------------------------------------------------------- */

typedef struct fan {
    pl_pool *pool;
    atomic_int ran;
} fan;

static fan g_fan;

/* Each task queues two more, until depth 5: 1 + 2 + ... + 32 = 63 tasks. */
static void fan_task(pl_engine *e, void *user)
{
    (void)e;
    int depth = (int)(intptr_t)user;
    atomic_fetch_add(&g_fan.ran, 1);
    if (depth < 5)
        for (int i = 0; i < 2; i++)
            if (pl_pool_submit(g_fan.pool, fan_task,
                               (void *)(intptr_t)(depth + 1)))
                return;
}

Test(pool, tasks_may_queue_tasks_and_wait_covers_them)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    g_fan.pool = pool_of(e, 2, 4);
    cr_assert_eq(pl_pool_submit(g_fan.pool, fan_task, (void *)(intptr_t)0),
                 PL_OK);
    cr_assert_eq(pl_pool_wait(g_fan.pool), PL_OK);
    cr_assert_eq(atomic_load(&g_fan.ran), 63);
    pl_pool_free(g_fan.pool);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- no stack to be had ------------------------------------------------------------ */

Test(pool, tasks_run_on_the_thread_when_no_stack_can_be_mapped)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.stack_size = (size_t)1 << 46; /* 64 TiB: no mapping that large */
    pl_pool *pool = NULL;
    cr_assert_eq(pl_pool_new(&pool, e, &po), PL_OK, "%s", pl_errmsg());
    job jobs[6];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 6; i++) {
        snprintf(jobs[i].id, sizeof jobs[i].id, "nostack-%d", i);
        jobs[i].n = 3;
        cr_assert_eq(pl_pool_submit(pool, run_chain, &jobs[i]), PL_OK);
    }
    pl_pool_free(pool);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(jobs[i].status, PL_OK, "%s: %s", jobs[i].id, jobs[i].msg);
        cr_assert_eq(jobs[i].run_status, PL_RUN_COMPLETED);
        cr_assert_eq(jobs[i].total, 3);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- misuse ------------------------------------------------------------------------ */

static atomic_int waited_in_task = 1;

static void wait_in_task(pl_engine *e, void *user)
{
    (void)e;
    atomic_store(&waited_in_task, pl_pool_wait(user));
    pl_pool_free(user); /* does nothing from a task */
}

static void nothing(pl_engine *e, void *user)
{
    (void)e;
    (void)user;
}

Test(pool, bad_options_and_misuse_are_refused)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    pl_pool *p = NULL;
    pl_pool_options o = PL_POOL_OPTIONS_INIT;
    cr_assert_eq(pl_pool_new(NULL, e, &o), PL_EINVAL);
    cr_assert_eq(pl_pool_new(&p, NULL, &o), PL_EINVAL);
    cr_assert_null(p);
    o.version = 99;
    cr_assert_eq(pl_pool_new(&p, e, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "version"), "%s", pl_errmsg());
    o = (pl_pool_options)PL_POOL_OPTIONS_INIT;
    o.tasks_per_thread = 257;
    cr_assert_eq(pl_pool_new(&p, e, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "257"), "%s", pl_errmsg());
    o = (pl_pool_options)PL_POOL_OPTIONS_INIT;
    o.stack_size = 4096;
    cr_assert_eq(pl_pool_new(&p, e, &o), PL_EINVAL);
    o = (pl_pool_options)PL_POOL_OPTIONS_INIT;
    o.threads = 100000;
    cr_assert_eq(pl_pool_new(&p, e, &o), PL_EINVAL);
    cr_assert_null(p);

    cr_assert_eq(pl_pool_submit(NULL, nothing, NULL), PL_EINVAL);
    cr_assert_eq(pl_pool_wait(NULL), PL_EINVAL);
    pl_pool_free(NULL);

    cr_assert_eq(pl_pool_new(&p, e, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_pool_submit(p, NULL, NULL), PL_EINVAL);
    cr_assert_eq(pl_pool_submit(p, wait_in_task, p), PL_OK);
    cr_assert_eq(pl_pool_wait(p), PL_OK);
    cr_assert_eq(atomic_load(&waited_in_task), PL_EINVAL);
    /* an idle pool's wait returns at once, and it stops cleanly */
    cr_assert_eq(pl_pool_wait(p), PL_OK);
    pl_pool_free(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- order and the stack's guard ------------------------------------------------- */

static int g_started[24];
static atomic_int g_n_started;

static void note_start(pl_engine *e, void *user)
{
    (void)e;
    int i = atomic_fetch_add(&g_n_started, 1);
    if (i < 24)
        g_started[i] = (int)(intptr_t)user;
}

Test(pool, tasks_start_in_the_order_queued)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    pl_pool *p = pool_of(e, 1, 4);
    for (int i = 0; i < 24; i++)
        cr_assert_eq(pl_pool_submit(p, note_start, (void *)(intptr_t)i), PL_OK);
    cr_assert_eq(pl_pool_wait(p), PL_OK);
    cr_assert_eq(atomic_load(&g_n_started), 24);
    for (int i = 0; i < 24; i++)
        cr_expect_eq(g_started[i], i, "start %d was task %d", i, g_started[i]);
    pl_pool_free(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Frames of 4 KiB each, far more of them than a 64 KiB stack holds. */
static int deep(int n)
{
    volatile char pad[4096];
    pad[0] = (char)n;
    pad[sizeof pad - 1] = pad[0];
    return n > 0 ? deep(n - 1) + pad[sizeof pad - 1] : 0;
}

static atomic_int g_deep;

static void overflow(pl_engine *e, void *user)
{
    (void)e;
    (void)user;
    atomic_store(&g_deep, deep(1 << 20));
}

Test(pool, a_task_that_overflows_its_stack_dies_of_sigsegv)
{
    const char *path = t_store_path();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* a sanitizer reports the overflow, which is the test's to judge */
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, 2) < 0)
            _exit(10);
        pl_registry *reg = NULL;
        pl_engine *e = NULL;
        if (pl_registry_new(&reg) || pl_engine_open(&e, path, reg, NULL))
            _exit(11);
        pl_pool_options po = PL_POOL_OPTIONS_INIT;
        po.threads = 1;
        po.stack_size = 64 << 10;
        pl_pool *p = NULL;
        if (pl_pool_new(&p, e, &po) || pl_pool_submit(p, overflow, NULL) ||
            pl_pool_wait(p))
            _exit(12);
        _exit(3); /* it should have died before this */
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    if (T_SANITIZED) /* the sanitizer's handler ends it, reporting */
        cr_expect(WIFSIGNALED(status) ||
                      (WIFEXITED(status) && WEXITSTATUS(status) >= 1 &&
                       WEXITSTATUS(status) != 3 && WEXITSTATUS(status) < 10),
                  "status %#x", status);
    else
        cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                  "status %#x", status);
}
