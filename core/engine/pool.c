/*
 * pool.c -- many runs on a few threads.
 *
 * A worker thread carries up to tasks_per_thread tasks, each on a stack of
 * its own (a ucontext).  It runs every runnable task until the task ends or
 * asks for a commit of the pool's engine; then it commits all the waiting
 * tasks' batches at once, and resumes them.  In group mode that is one
 * writer in the engine's group commit, so other threads' tasks (and plain
 * threads) join the same groups; in process mode, one transaction.  Either
 * way a thread's tasks share a commit, and the only switch per call is a
 * user-space context switch: a task that waits switches straight to the
 * next runnable one.  In sync mode a commit is the caller's own: it blocks
 * the thread.
 *
 *   worker loop:  admit queued tasks -> resume each runnable task once ->
 *                 group-commit the batches of the tasks now waiting -> ...
 *
 * Every live task is either runnable or waiting for the next commit: the
 * commit is the only place a task gives up its thread.
 *
 * Stacks are mmap'd with a guard page below them, and kept for the next
 * task once a task ends.  Under AddressSanitizer every switch is announced
 * to it, so it knows which stack is live.  The stacks and the switches are
 * platform.c's fibers.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

#define MAX_THREADS 1024
#define DEFAULT_PER_THREAD 64
#define DEFAULT_STACK ((size_t)1 << 20)
#define MIN_STACK ((size_t)64 << 10)

typedef struct task {
    pl_pool_task_fn fn;
    void *user;
    struct task *next;
} task;

typedef struct worker worker;

typedef struct fiber {
    pl__fiber ctx; /* its stack, and where it stands */
    pl_pool_task_fn fn;
    void *user;
    bool done;
    int rc;                      /* its last commit */
    char msg[512];               /* ... and why it failed */
    char errmsg[PL__ERRMSG_MAX]; /* pl_errmsg() while it waited */
    struct fiber *next_free;
} fiber;

struct worker {
    pl_pool *pool;
    pthread_t thread;
    bool started;
    pl__fiber sched; /* the thread's own stack: the loop */
    fiber *cur;      /* the task running, or NULL */
    fiber *free;     /* ended tasks' fibers, stacks kept */
    size_t live;     /* tasks begun and not ended */
    fiber **run;     /* runnable, in order ... */
    size_t n_run;
    size_t run_i;       /* ... and the one running in this round */
    fiber **wait;       /* waiting for the next commit ... */
    pl__gc_item *items; /* ... with these batches */
    size_t n_wait;
};

struct pl_pool {
    pl_engine *e;
    unsigned n_workers;
    unsigned per_thread;
    size_t stack_size;
    size_t page;
    pthread_mutex_t mu;
    pthread_cond_t work; /* a task was queued, or the pool closes */
    pthread_cond_t idle; /* pending reached 0 */
    task *head, *tail;
    size_t queued;
    size_t pending; /* queued or running */
    bool closing;
    worker *workers;
};

static _Thread_local worker *tl_worker;

/* ---- fibers ----------------------------------------------------------------------- */

/*
 * The context to switch to once the running task waits or ends: the next
 * runnable task of this round, or at the end of the round the thread's own
 * loop.  Sets w->cur.
 */
static pl__fiber *next_context(worker *w)
{
    if (++w->run_i < w->n_run) {
        fiber *g = w->run[w->run_i];
        w->cur = g;
        return &g->ctx;
    }
    w->cur = NULL;
    return &w->sched;
}

static void fiber_main(void)
{
    worker *w = tl_worker;
    fiber *f = w->cur;
    pl__fiber_started();
    pl__err_clear();
    f->fn(w->pool->e, f->user);
    f->done = true;
    pl__fiber_exit(next_context(w));
}

static void fiber_unmap(fiber *f)
{
    pl__fiber_destroy(&f->ctx);
    free(f);
}

/* A new fiber with a stack of its own, or NULL when out of memory. */
static fiber *fiber_new(const pl_pool *p)
{
    fiber *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (!pl__fiber_init(&f->ctx, p->page, p->stack_size)) {
        fiber_unmap(f);
        return NULL;
    }
    return f;
}

/* A fiber ready to run @p fn, or NULL when out of memory. */
static fiber *fiber_get(worker *w, pl_pool_task_fn fn, void *user)
{
    fiber *f = w->free;
    if (f)
        w->free = f->next_free;
    else if (!(f = fiber_new(w->pool)))
        return NULL;
    if (!pl__fiber_prepare(&f->ctx, fiber_main)) {
        f->next_free = w->free;
        w->free = f;
        return NULL;
    }
    f->fn = fn;
    f->user = user;
    f->done = false;
    return f;
}

static void task_ended(pl_pool *p)
{
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0)
        pthread_cond_broadcast(&p->idle);
    pthread_mutex_unlock(&p->mu);
}

/*
 * Run every runnable task until it ends or waits for a commit.  Each task
 * that stops switches straight to the next one (one context switch per
 * task, not two); the last comes back here.
 */
static void run_round(worker *w)
{
    if (!w->n_run)
        return;
    w->run_i = 0;
    fiber *f = w->run[0];
    w->cur = f;
    pl__fiber_switch(&w->sched, &f->ctx);
    w->cur = NULL;
    for (size_t i = 0; i < w->n_run; i++) {
        fiber *g = w->run[i];
        if (g->done) {
            g->next_free = w->free;
            w->free = g;
            w->live--;
            task_ended(w->pool);
        }
    }
    w->n_run = 0;
}

/* In a pool's task on @p e's pool thread: commit @p b with the thread's
 * other waiting tasks, running them meanwhile.  Returns false (and does
 * nothing) anywhere else. */
static bool pool_commit(pl_engine *e, pl__batch *b, int *rc)
{
    worker *w = tl_worker;
    if (!w || !w->cur || w->pool->e != e)
        return false;
    fiber *f = w->cur;
    w->items[w->n_wait] = (pl__gc_item){.batch = b};
    w->wait[w->n_wait++] = f;
    pl__errmsg_save(f->errmsg);
    const void *running = pl__running_run();
    pl__fiber_switch(&f->ctx, next_context(w));
    pl__set_running_run(running);
    pl__errmsg_restore(f->errmsg);
    *rc = f->rc ? pl__err(f->rc, "%s", f->msg) : PL_OK;
    return true;
}

int pl__commit(pl_engine *e, pl__batch *b)
{
    int rc;
    if (e->durability != PL_DURABILITY_SYNC && pool_commit(e, b, &rc))
        return rc;
    return pl__engine_commit(e, b);
}

/* ---- workers ---------------------------------------------------------------------- */

/* Make the waiting tasks' batches durable and make those tasks runnable. */
static void commit_waiting(worker *w)
{
    pl__engine_commit_many(w->pool->e, w->items, w->n_wait);
    for (size_t i = 0; i < w->n_wait; i++) {
        fiber *f = w->wait[i];
        f->rc = w->items[i].rc;
        if (f->rc)
            memcpy(f->msg, w->items[i].msg, sizeof f->msg);
    }
    fiber **t = w->run;
    w->run = w->wait;
    w->wait = t;
    w->n_run = w->n_wait;
    w->n_wait = 0;
}

/*
 * Take queued tasks, at most a fair share of the queue while other workers
 * may take the rest.  Returns false when the worker should stop.
 */
static bool admit(worker *w)
{
    pl_pool *p = w->pool;
    task *got = NULL, **end = &got;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        size_t room = p->per_thread - w->live;
        if (room && p->head) {
            size_t share = (p->queued + p->n_workers - 1) / p->n_workers;
            size_t take = share < room ? share : room;
            for (size_t i = 0; i < take; i++) {
                task *t = p->head;
                p->head = t->next;
                t->next = NULL;
                *end = t;
                end = &t->next;
            }
            if (!p->head)
                p->tail = NULL;
            p->queued -= take;
            break;
        }
        if (w->live)
            break;
        if (p->closing) {
            pthread_mutex_unlock(&p->mu);
            return false;
        }
        pthread_cond_wait(&p->work, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);

    while (got) {
        task *t = got;
        got = t->next;
        fiber *f = fiber_get(w, t->fn, t->user);
        if (f) {
            w->live++;
            w->run[w->n_run++] = f;
        } else { /* no stack to be had: run it on this one, commits block */
            t->fn(p->e, t->user);
            task_ended(p);
        }
        free(t);
    }
    return true;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    tl_worker = w;
    pl__fiber_init_thread(&w->sched);
    while (admit(w)) {
        run_round(w);
        if (w->n_wait)
            commit_waiting(w);
    }
    return NULL;
}

/* ---- the pool --------------------------------------------------------------------- */

static void pool_destroy(pl_pool *p)
{
    for (unsigned i = 0; p->workers && i < p->n_workers; i++) {
        worker *w = &p->workers[i];
        while (w->free) {
            fiber *f = w->free;
            w->free = f->next_free;
            fiber_unmap(f);
        }
        free(w->run);
        free(w->wait);
        free(w->items);
    }
    free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    free(p);
}

/* Stop the workers: they finish every task first. */
static void pool_stop(pl_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->closing = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_workers; i++)
        if (p->workers[i].started)
            pthread_join(p->workers[i].thread, NULL);
}

int pl_pool_new(pl_pool **out, pl_engine *engine, const pl_pool_options *opts)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_pool_new: out is NULL");
    *out = NULL;
    if (!engine)
        return pl__err(PL_EINVAL, "pl_pool_new: engine is NULL");
    pl_pool_options o;
    if (pl__struct_in(&o, opts, &pl__pool_options_layout, "pl_pool_new"))
        return PL_EINVAL;
    opts = &o;
    /* one per CPU, and at least two: one can run tasks while one commits */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = opts->threads        ? opts->threads
                       : ncpu > MAX_THREADS ? MAX_THREADS
                       : ncpu > 2           ? (unsigned)ncpu
                                            : 2;
    unsigned per = opts->tasks_per_thread ? opts->tasks_per_thread
                                          : DEFAULT_PER_THREAD;
    size_t stack = opts->stack_size ? opts->stack_size : DEFAULT_STACK;
    if (threads > MAX_THREADS)
        return pl__err(PL_EINVAL, "pl_pool_new: %u threads (at most %d)",
                       threads, MAX_THREADS);
    if (per > PL__GROUP_MAX)
        return pl__err(PL_EINVAL,
                       "pl_pool_new: %u tasks per thread (at most "
                       "%d)",
                       per, PL__GROUP_MAX);
    if (stack < MIN_STACK)
        return pl__err(PL_EINVAL,
                       "pl_pool_new: stack of %zu bytes (at least "
                       "%zu)",
                       stack, MIN_STACK);
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (stack > SIZE_MAX / 2)
        return pl__err(PL_EINVAL, "pl_pool_new: stack of %zu bytes", stack);
    stack = (stack + pg - 1) / pg * pg;

    pl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return pl__err(PL_ENOMEM, "out of memory starting a pool");
    p->e = engine;
    p->n_workers = threads;
    p->per_thread = per;
    p->stack_size = stack;
    p->page = pg;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    p->workers = calloc(threads, sizeof *p->workers);
    if (!p->workers) {
        pool_destroy(p);
        return pl__err(PL_ENOMEM, "out of memory starting a pool");
    }
    for (unsigned i = 0; i < threads; i++) {
        worker *w = &p->workers[i];
        w->pool = p;
        w->run = calloc(per, sizeof *w->run);
        w->wait = calloc(per, sizeof *w->wait);
        w->items = calloc(per, sizeof *w->items);
        if (!w->run || !w->wait || !w->items ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pool_stop(p);
            pool_destroy(p);
            return pl__err(PL_ENOMEM, "cannot start pool thread %u of %u",
                           i + 1, threads);
        }
        w->started = true;
    }
    *out = p;
    return PL_OK;
}

int pl_pool_submit(pl_pool *pool, pl_pool_task_fn fn, void *user)
{
    if (!pool || !fn)
        return pl__err(PL_EINVAL, "pl_pool_submit: %s is NULL",
                       pool ? "fn" : "pool");
    task *t = malloc(sizeof *t);
    if (!t)
        return pl__err(PL_ENOMEM, "out of memory queueing a task");
    *t = (task){fn, user, NULL};
    pthread_mutex_lock(&pool->mu);
    if (pool->tail)
        pool->tail->next = t;
    else
        pool->head = t;
    pool->tail = t;
    pool->queued++;
    pool->pending++;
    pthread_cond_signal(&pool->work);
    pthread_mutex_unlock(&pool->mu);
    return PL_OK;
}

int pl_pool_wait(pl_pool *pool)
{
    if (!pool)
        return pl__err(PL_EINVAL, "pl_pool_wait: pool is NULL");
    if (tl_worker)
        return pl__err(PL_EINVAL, "pl_pool_wait: called from a pool's task, "
                                  "which cannot wait for tasks");
    pthread_mutex_lock(&pool->mu);
    while (pool->pending)
        pthread_cond_wait(&pool->idle, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    return PL_OK;
}

void pl_pool_free(pl_pool *pool)
{
    if (!pool || tl_worker) /* a task cannot stop its own thread */
        return;
    pool_stop(pool);
    pool_destroy(pool);
}
