/*
 * test_crash_threads.c -- the third crash matrix (docs/design.md §3, §8): a
 * process running many orders on several threads (group commit), or as
 * tasks of a pool (group and process mode: its threads share commits), is
 * killed at a boundary of any of them, and every run is recovered and
 * checked as test_crash.c checks one (support_crash.c).
 */
#include "support.h"
#include "support_crash.h"

#include "order/order.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- many runs on many threads, group commit, one kill ------------------------------ */

#define GC_THREADS 4

#define GC_RUNS 2 /* per thread */

typedef struct gc_child {
    pl_engine *e;
    int thread;
} gc_child;

static atomic_long gc_boundaries;

static long gc_kill_at;

static void gc_on_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    if (atomic_fetch_add(&gc_boundaries, 1) + 1 == gc_kill_at)
        raise(SIGKILL);
}

static void gc_run_id(char *out, size_t n, int thread, int j)
{
    snprintf(out, n, "order-T%d-%d", thread, j);
}

/* Start order (thread, j): pl_run_start()'s status and outcome. */
static int gc_order(pl_engine *e, int thread, int j, pl_outcome **out)
{
    char id[64], order[32];
    gc_run_id(id, sizeof id, thread, j);
    snprintf(order, sizeof order, "T%d-%d", thread, j);
    cJSON *p = order_sample(order);
    pl_action a = {PL_ACTION_VERSION, "order", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    int st = pl_run_start(out, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

static void *gc_thread(void *arg)
{
    gc_child *c = arg;
    for (int j = 0; j < GC_RUNS; j++) {
        pl_outcome *o = NULL;
        gc_order(c->e, c->thread, j, &o);
        pl_outcome_free(o);
    }
    return NULL;
}

/* A pool task: one order, (thread, j) packed in @p user. */
static void gc_task(pl_engine *e, void *user)
{
    int k = (int)(intptr_t)user;
    pl_outcome *o = NULL;
    gc_order(e, k / GC_RUNS, k % GC_RUNS, &o);
    pl_outcome_free(o);
}

/* In a forked child: run every order on GC_THREADS threads of one engine,
 * or as tasks of a pool; die at the kill_at-th boundary of any of
 * them. */
static int gc_child_main(const char *store, const char *fx, long kill_at,
                         pl_durability mode, bool pool)
{
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg) || order_register(reg, fx))
        return 10;
    gc_kill_at = kill_at;
    atomic_store(&gc_boundaries, 0);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = mode;
    o.on_event = gc_on_event;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, reg, &o))
        return 11;
    if (pool) {
        pl_pool *p = NULL;
        if (pl_pool_new(&p, e, NULL))
            return 12;
        for (int k = 0; k < GC_THREADS * GC_RUNS; k++)
            if (pl_pool_submit(p, gc_task, (void *)(intptr_t)k))
                return 12;
        pl_pool_free(p);
        pl_engine_close(e);
        pl_registry_free(reg);
        return 3;
    }
    gc_child c[GC_THREADS];
    pthread_t th[GC_THREADS];
    for (int i = 0; i < GC_THREADS; i++) {
        c[i] = (gc_child){e, i};
        if (pthread_create(&th[i], NULL, gc_thread, &c[i]))
            return 12;
    }
    for (int i = 0; i < GC_THREADS; i++)
        pthread_join(th[i], NULL);
    pl_engine_close(e);
    pl_registry_free(reg);
    return 3;
}

typedef struct gc_ref {
    rows ledgers[GC_THREADS][GC_RUNS];
} gc_ref;

static int gc_count_lines(const char *path, const char *tool, const char *run)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[1024], prefix[256];
    snprintf(prefix, sizeof prefix, "%s %s/", tool, run);
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

/*
 * Run every order at once (threads, or a pool's tasks, in @p mode), killed
 * at points spread over the whole execution; each time, recover every run
 * and compare its ledgers with an uncrashed reference.
 */
static void gc_matrix(pl_durability mode, bool pool)
{
    const char *base = t_tmpdir();
    gc_ref *ref = calloc(1, sizeof *ref);
    cr_assert_not_null(ref);

    /* the reference: every order, one after the other, uncrashed */
    place rp;
    place_make(&rp, base, "reference");
    pl_registry *reg = order_registry(rp.fx);
    pl_engine *e = t_engine(rp.store, reg, PL_DURABILITY_SYNC);
    long total_boundaries = 0;
    for (int i = 0; i < GC_THREADS; i++) {
        for (int j = 0; j < GC_RUNS; j++) {
            char id[64];
            gc_run_id(id, sizeof id, i, j);
            pl_outcome *o = NULL;
            cr_assert_eq(gc_order(e, i, j, &o), PL_OK);
            cr_assert_eq(o->status, PL_RUN_COMPLETED);
            total_boundaries += (long)o->steps_appended;
            pl_outcome_free(o);
            cr_assert_eq(pl_run_walk(e, id, collect_row, &ref->ledgers[i][j]),
                         PL_OK);
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);

    /* kill points spread over the whole concurrent execution (steps
     * appended alone already count that many boundaries) */
    const long kills[] = {1,
                          5,
                          total_boundaries / 8,
                          total_boundaries / 4,
                          total_boundaries / 2,
                          total_boundaries - 3};
    for (size_t n = 0; n < sizeof kills / sizeof kills[0]; n++) {
        char name[32], what[96];
        snprintf(name, sizeof name, "kill%zu", n);
        snprintf(what, sizeof what, "%s, %s, killed at boundary %ld",
                 pl_durability_name(mode), pool ? "pool" : "threads", kills[n]);
        place p;
        place_make(&p, base, name);
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0)
            _exit(gc_child_main(p.store, p.fx, kills[n], mode, pool));
        int status = 0;
        while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
            ;
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "%s: the child was not killed (status %d)", what, status);

        /* recover every run (or start the ones the kill prevented) */
        reg = order_registry(p.fx);
        e = t_engine(p.store, reg, mode);
        for (int i = 0; i < GC_THREADS; i++) {
            for (int j = 0; j < GC_RUNS; j++) {
                char id[64];
                gc_run_id(id, sizeof id, i, j);
                pl_outcome *o = NULL;
                int st = pl_run_continue(&o, e, id, NULL);
                if (st == PL_ENOTFOUND)
                    st = gc_order(e, i, j, &o);
                /* On PostgreSQL the killed child's last transaction may
                 * still commit after the kill (the server finishes it):
                 * a run not found a moment ago can exist now. */
                if (st == PL_EEXIST)
                    st = pl_run_continue(&o, e, id, NULL);
                cr_assert_eq(st, PL_OK, "%s: %s: %s", what, id, pl_errmsg());
                cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s: %s: %s", what,
                             id, o->reason ? o->reason : "");
                cr_assert_eq(o->calls_served + o->calls_executed, N_CALLS);
                pl_outcome_free(o);
                rows got = {0};
                cr_assert_eq(pl_run_walk(e, id, collect_row, &got), PL_OK);
                char label[192];
                snprintf(label, sizeof label, "%s: %s", what, id);
                expect_same_ledgers(&got, &ref->ledgers[i][j], label);
                rows_free(&got);
                cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s: %s", label,
                             pl_errmsg());
                /* each effect at least once, at most once more (in flight
                 * at the kill); the charge exactly once */
                for (int t = 0; t < N_TOOLS; t++) {
                    int c = gc_count_lines(p.fx, tool_names[t], id);
                    cr_assert(c >= 1 && c <= 2, "%s: %s ran %d times", label,
                              tool_names[t], c);
                }
                cr_assert_eq(gc_count_lines(p.fx, "charge_card", id), 1,
                             "%s: charge_card", label);
            }
        }
        pl_engine_close(e);
        pl_registry_free(reg);
        t_rmtree(p.dir);
    }
    for (int i = 0; i < GC_THREADS; i++)
        for (int j = 0; j < GC_RUNS; j++)
            rows_free(&ref->ledgers[i][j]);
    free(ref);
}

Test(crash, group_commit_threads_killed_anywhere)
{
    gc_matrix(PL_DURABILITY_GROUP, false);
}

Test(crash, pool_in_group_mode_killed_anywhere)
{
    gc_matrix(PL_DURABILITY_GROUP, true);
}

Test(crash, pool_in_process_mode_killed_anywhere)
{
    gc_matrix(PL_DURABILITY_PROCESS, true);
}
