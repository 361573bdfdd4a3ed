/*
 * test_concurrency.c -- many writers at once (docs/design.md §9 durability
 * modes and group commit, §7.6 several processes on one store;
 * core/engine/engine.c group commit and the active set;
 * core/replay/runner.c run ownership).
 *
 *   (a) two processes, each with its own engine on the SAME store file, run
 *       their own runs at the same time: every run completes, verifies and
 *       holds exactly the steps it should;
 *   (b) one engine shared by 8 threads, each running its own runs (and then
 *       replaying them while the others still write), in each durability
 *       mode: every step present, in order, verified, nothing re-executed;
 *   (c) group commit under stress: 16 threads x many calls; every ledger
 *       complete and in order, and exactly one commit per call and per
 *       run's end;
 *   (d) two threads running the SAME run at once: exactly one executes, the
 *       other gets PL_EBUSY (a tool blocked on a condition variable makes
 *       the timing deterministic);
 *   (e) another process continuing a run whose owner process is alive (and
 *       blocked) gets PL_EBUSY; once the owner is killed -9, it succeeds;
 *       and of two processes recovering the same crashed run at once,
 *       exactly one executes it, the other gets PL_EBUSY.
 *
 * No assertion depends on timing; waits have generous deadlock guards only.
 *
 * (e) is in test_concurrency_procs.c.
 */
#include "support.h"
#include "support_concurrency.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- thread-safe policies ------------------------------------------------------ */

/* ---- checking a chain run ------------------------------------------------------- */

static double triangle(int n) { return (double)n * (n - 1) / 2; }

static const cJSON *field(const pl_step *s, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(pl_step_payload(s), name);
}

/*
 * pl_run_walk visits in tree order.  Whatever the interleaving of ledgers,
 * each ledger's steps come gapless and in sequence, and a callee's ledger
 * only after the caller's action_call that made it.
 */
#define WALK_MAX_LEDGERS 128

typedef struct walk_check {
    struct {
        char path[64];
        long last_seq;
    } led[WALK_MAX_LEDGERS];
    int n_led;
    size_t n;
    bool order_ok;
    char bad[160];
} walk_check;

static int walk_find(walk_check *w, const char *path)
{
    for (int i = 0; i < w->n_led; i++)
        if (strcmp(w->led[i].path, path) == 0)
            return i;
    return -1;
}

static void walk_bad(walk_check *w, const char *id, const char *why)
{
    if (w->order_ok)
        snprintf(w->bad, sizeof w->bad, "step %s: %s", id, why);
    w->order_ok = false;
}

static int walk_visit(const pl_step *s, void *user)
{
    walk_check *w = user;
    const char *id = pl_step_id(s);
    const char *colon = strrchr(id, ':');
    w->n++;
    if (!colon || colon - id >= 64) {
        walk_bad(w, id, "malformed id");
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "%.*s", (int)(colon - id), id);
    long seq = (long)pl_step_seq(s);
    int i = walk_find(w, path);
    if (i < 0) {
        if (w->n_led == WALK_MAX_LEDGERS) {
            walk_bad(w, id, "too many ledgers");
            return 0;
        }
        /* a new ledger: its parent's action_call was visited already */
        const char *dot = strrchr(path, '.');
        if (dot) {
            char parent[64];
            snprintf(parent, sizeof parent, "%.*s", (int)(dot - path), path);
            int p = walk_find(w, parent);
            char *end;
            long call = strtol(dot + 1, &end, 10);
            if (p < 0 || w->led[p].last_seq < call)
                walk_bad(w, id, "ledger before the call that made it");
        }
        i = w->n_led++;
        snprintf(w->led[i].path, sizeof w->led[i].path, "%s", path);
        w->led[i].last_seq = -1;
    }
    if (seq != w->led[i].last_seq + 1)
        walk_bad(w, id, "out of sequence in its ledger");
    w->led[i].last_seq = seq;
    return 0;
}

/*
 * A completed chain run of n calls to @p tool made by @p root: the root
 * ledger is call/result pairs in order with the right sums, then the root's
 * result; each callee ledger holds its one result; 3n+1 steps in all; the
 * record agrees and the hash chains verify.
 */
static void check_chain_run(pl_engine *e, const char *run_id, int n,
                            const char *root, const char *tool)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, run_id), PL_OK, "%s: %s", run_id,
                 pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_COMPLETED, "%s: %s (%s)", run_id,
                 pl_run_status_name(info->status),
                 info->reason ? info->reason : "");
    cr_assert_eq(info->steps, (uint64_t)(3 * n + 1), "%s: %llu steps", run_id,
                 (unsigned long long)info->steps);
    cr_assert_leq(info->attempts, 2, "%s: started, maybe replayed once",
                  run_id);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, run_id), PL_OK, "%s: %s", run_id,
                 pl_errmsg());

    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, run_id, "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), (size_t)(2 * n + 1), "%s: root ledger",
                 run_id);
    double total = 0;
    for (int i = 0; i < n; i++) {
        const pl_step *c = pl_steps_at(l, (size_t)(2 * i));
        const pl_step *r = pl_steps_at(l, (size_t)(2 * i + 1));
        cr_assert_eq(pl_step_seq(c), (uint32_t)(2 * i));
        cr_assert_eq(pl_step_type_of(c), PL_STEP_ACTION_CALL, "%s %s", run_id,
                     pl_step_id(c));
        const cJSON *args = field(c, "payload");
        const cJSON *ai = cJSON_GetObjectItemCaseSensitive(args, "a");
        cr_assert(cJSON_IsNumber(ai) && ai->valueint == i,
                  "%s %s: the calls are in order", run_id, pl_step_id(c));
        cr_assert_eq(pl_step_type_of(r), PL_STEP_ACTION_RESULT);
        cr_assert_str_eq(pl_step_actor(r), tool);
        total += i;
        const cJSON *sum = field(r, "sum");
        cr_assert(cJSON_IsNumber(sum) && sum->valuedouble == total,
                  "%s %s: sum", run_id, pl_step_id(r));
    }
    const pl_step *last = pl_steps_at(l, (size_t)(2 * n));
    cr_assert_str_eq(pl_step_actor(last), root);
    const cJSON *t = field(last, "total");
    cr_assert(cJSON_IsNumber(t) && t->valuedouble == triangle(n), "%s: total",
              run_id);
    pl_steps_free(l);

    for (int i = 0; i < n; i++) {
        char path[32];
        snprintf(path, sizeof path, "0.%d", 2 * i);
        cr_assert_eq(pl_run_ledger(&l, e, run_id, path), PL_OK);
        cr_assert_eq(pl_steps_count(l), 1, "%s: ledger %s", run_id, path);
        cr_assert_eq(pl_step_type_of(pl_steps_at(l, 0)), PL_STEP_ACTION_RESULT);
        pl_steps_free(l);
    }

    walk_check *w = calloc(1, sizeof *w);
    cr_assert_not_null(w);
    w->order_ok = true;
    cr_assert_eq(pl_run_walk(e, run_id, walk_visit, w), PL_OK);
    cr_assert_eq(w->n, (size_t)(3 * n + 1), "%s: walk", run_id);
    cr_assert_eq(w->n_led, n + 1, "%s: ledgers", run_id);
    cr_assert(w->order_ok, "%s: out of order: %s", run_id, w->bad);
    free(w);
}

typedef struct count_ctx {
    int n;
} count_ctx;

static int count_run(const pl_run_info *info, void *user)
{
    (void)info;
    ((count_ctx *)user)->n++;
    return 0;
}

static int count_runs(pl_engine *e)
{
    count_ctx c = {0};
    cr_assert_eq(pl_engine_runs(e, count_run, &c), PL_OK);
    return c.n;
}

/* ---- (a) two processes, one store ---------------------------------------------------- */

#define PROC_RUNS 20

#define PROC_N 20

/* In a forked child: its own engine; signal ready, wait for go, run. */
static int proc_child(const char *store, const pl_registry *reg, int who,
                      int ready_fd, int go_fd)
{
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, reg, NULL))
        return 10;
    char c = 'r';
    if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 1)
        return 11;
    int code = 0;
    for (int j = 0; j < PROC_RUNS && !code; j++) {
        char id[32], payload[32];
        snprintf(id, sizeof id, "p%d-r%02d", who, j);
        snprintf(payload, sizeof payload, "{\"n\": %d}", PROC_N);
        cJSON *p = cJSON_Parse(payload);
        pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, e, &a, &ro);
        cJSON_Delete(p);
        if (st)
            code = 12;
        else if (o->status != PL_RUN_COMPLETED)
            code = 13;
        else if (o->calls_executed != PROC_N)
            code = 14;
        pl_outcome_free(o);
    }
    pl_engine_close(e);
    return code;
}

static void wait_exit_ok(pid_t pid, const char *who)
{
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) == -1 && errno == EINTR)
        ;
    cr_assert_eq(got, pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s %s %d", who,
              WIFEXITED(status) ? "exited with" : "died of",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

Test(concurrency, two_processes_one_store)
{
    const char *store = t_store_path();
    pl_registry *reg = conc_registry();
    pl_engine_close(t_engine(store, reg, PL_DURABILITY_SYNC)); /* create */

    int ready[2], go[2];
    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t kids[2];
    fflush(NULL);
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        cr_assert_neq(kids[i], -1, "fork: %s", strerror(errno));
        if (kids[i] == 0) {
            close(ready[0]);
            close(go[1]);
            _exit(proc_child(store, reg, i, ready[1], go[0]));
        }
    }
    close(ready[1]);
    close(go[0]);
    char buf[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(read(ready[0], buf, 1), 1, "a child did not start");
    cr_assert_eq(write(go[1], "gg", 2), 2); /* both start at once */
    close(go[1]);
    close(ready[0]);
    wait_exit_ok(kids[0], "process 0");
    wait_exit_ok(kids[1], "process 1");

    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(count_runs(e), 2 * PROC_RUNS);
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < PROC_RUNS; j++) {
            char id[32];
            snprintf(id, sizeof id, "p%d-r%02d", i, j);
            check_chain_run(e, id, PROC_N, "chain", "add");
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- (b), (c) threads on one engine --------------------------------------------------- */

typedef struct events {
    atomic_long commits, appended, completed, failed;
} events;

static void count_event(const pl_event *ev, void *user)
{
    events *c = user;
    switch (ev->kind) {
    case PL_EVENT_COMMIT: atomic_fetch_add(&c->commits, 1); break;
    case PL_EVENT_STEP_APPENDED: atomic_fetch_add(&c->appended, 1); break;
    case PL_EVENT_CALL_COMPLETED: atomic_fetch_add(&c->completed, 1); break;
    case PL_EVENT_CALL_FAILED:
    case PL_EVENT_RUN_FAILED: atomic_fetch_add(&c->failed, 1); break;
    default: break;
    }
}

typedef struct worker {
    pthread_t th;
    pl_engine *e;
    pthread_barrier_t *start;
    const char *prefix;
    int id, runs, n;
    int failures;
    char msg[256];
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int j = 0; j < w->runs; j++) {
        char id[64], payload[32];
        snprintf(id, sizeof id, "%s-t%02d-r%02d", w->prefix, w->id, j);
        snprintf(payload, sizeof payload, "{\"n\": %d}", w->n);
        cJSON *p = cJSON_Parse(payload);
        pl_action a = {PL_ACTION_VERSION, "tchain", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, w->e, &a, &ro);
        cJSON_Delete(p);
        if (st || o->status != PL_RUN_COMPLETED ||
            o->calls_executed != (uint64_t)w->n) {
            if (!w->failures++)
                snprintf(w->msg, sizeof w->msg, "%s: %s %s", id,
                         pl_status_name(st),
                         st ? pl_errmsg()
                            : (o->reason ? o->reason : "bad counters"));
        }
        pl_outcome_free(o);
    }
    /* replay them while the other threads still write: nothing executes */
    for (int j = 0; j < w->runs; j++) {
        char id[64];
        snprintf(id, sizeof id, "%s-t%02d-r%02d", w->prefix, w->id, j);
        pl_outcome *o = NULL;
        int st = pl_run_continue(&o, w->e, id, NULL);
        if (st || o->status != PL_RUN_COMPLETED ||
            o->calls_served != (uint64_t)w->n || o->calls_executed != 0 ||
            o->steps_appended != 0) {
            if (!w->failures++)
                snprintf(w->msg, sizeof w->msg, "replaying %s: %s %s", id,
                         pl_status_name(st),
                         st ? pl_errmsg()
                            : (o->reason ? o->reason : "bad counters"));
        }
        pl_outcome_free(o);
    }
    return NULL;
}

/* Run @p threads workers, @p runs runs each, of n calls; check all. */
static void threads_run(pl_durability mode, int threads, int runs, int n,
                        const char *prefix, events *ev)
{
    pl_registry *reg = conc_registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = mode;
    o.on_event = count_event;
    o.event_user = ev;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &o), PL_OK, "%s",
                 pl_errmsg());
    worker *ws = calloc((size_t)threads, sizeof *ws);
    cr_assert_not_null(ws);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    atomic_store(&inc_calls, 0);
    for (int i = 0; i < threads; i++) {
        ws[i] = (worker){.e = e,
                         .start = &start,
                         .prefix = prefix,
                         .id = i,
                         .runs = runs,
                         .n = n};
        cr_assert_eq(pthread_create(&ws[i].th, NULL, worker_main, &ws[i]), 0);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(ws[i].th, NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < threads; i++)
        cr_assert_eq(ws[i].failures, 0, "%s: thread %d: %s",
                     pl_durability_name(mode), i, ws[i].msg);
    cr_assert_eq(atomic_load(&inc_calls), threads * runs * n,
                 "every call executed exactly once");

    cr_assert_eq(count_runs(e), threads * runs);
    for (int i = 0; i < threads; i++) {
        for (int j = 0; j < runs; j++) {
            char id[64];
            snprintf(id, sizeof id, "%s-t%02d-r%02d", prefix, i, j);
            check_chain_run(e, id, n, "tchain", "inc");
        }
    }
    free(ws);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void threads_mode(pl_durability mode)
{
    events ev = {0};
    const int threads = 8, runs = 4, n = 15;
    threads_run(mode, threads, runs, n, pl_durability_name(mode), &ev);
    long calls = threads * runs * n;
    cr_assert_eq(atomic_load(&ev.completed), calls);
    cr_assert_eq(atomic_load(&ev.appended), (long)threads * runs * (3 * n + 1));
    cr_assert_eq(atomic_load(&ev.failed), 0);
}

Test(concurrency, threads_one_engine_sync) { threads_mode(PL_DURABILITY_SYNC); }

Test(concurrency, threads_one_engine_group)
{
    threads_mode(PL_DURABILITY_GROUP);
}

Test(concurrency, threads_one_engine_process)
{
    threads_mode(PL_DURABILITY_PROCESS);
}

Test(concurrency, group_commit_stress)
{
    events ev = {0};
    const int threads = 16, runs = 3, n = 25;
    threads_run(PL_DURABILITY_GROUP, threads, runs, n, "grp", &ev);
    long calls = (long)threads * runs * n, nruns = threads * runs;
    cr_assert_eq(atomic_load(&ev.completed), calls);
    cr_assert_eq(atomic_load(&ev.appended), (long)threads * runs * (3 * n + 1),
                 "every step appended once");
    cr_assert_eq(atomic_load(&ev.failed), 0);
    /* Each call is one commit, and each run's end one more; replaying a
     * completed run writes nothing.  How many of them the group merges
     * into one LMDB transaction depends on timing here (test_pool.c shows
     * the merging deterministically). */
    cr_assert_eq(atomic_load(&ev.commits), calls + nruns,
                 "%ld commits for %ld calls in %ld runs",
                 atomic_load(&ev.commits), calls, nruns);
}

/* ---- (d) the same run in two threads ------------------------------------------------------ */

typedef struct racer {
    pthread_t th;
    pl_engine *e;
    const char *run_id;
    int rc;
    pl_outcome *out;
    char msg[256];
} racer;

static void *racer_main(void *arg)
{
    racer *r = arg;
    r->rc = pl_run_continue(&r->out, r->e, r->run_id, NULL);
    if (r->rc)
        snprintf(r->msg, sizeof r->msg, "%s", pl_errmsg());
    pthread_mutex_lock(&g_gate.mu);
    g_gate.done++;
    pthread_cond_broadcast(&g_gate.cv);
    pthread_mutex_unlock(&g_gate.mu);
    return NULL;
}

/* Wait (deadlock guard only) until the gate was entered and one racer
 * returned; false if the guard expired. */
static bool wait_one_in_one_out(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GUARD_SECONDS;
    int rc = 0;
    pthread_mutex_lock(&g_gate.mu);
    while (rc == 0 && (g_gate.entered < 1 || g_gate.done < 1))
        rc = pthread_cond_timedwait(&g_gate.cv, &g_gate.mu, &until);
    bool ok = g_gate.entered >= 1 && g_gate.done >= 1;
    pthread_mutex_unlock(&g_gate.mu);
    return ok;
}

Test(concurrency, same_run_two_threads)
{
    pl_registry *reg = conc_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    for (int round = 0; round < 3; round++) {
        char id[32];
        snprintf(id, sizeof id, "same-%d", round);
        /* a failed run, so both threads may continue it */
        pthread_mutex_lock(&g_gate.mu);
        g_gate.fail_next = true;
        g_gate.entered = g_gate.done = 0;
        g_gate.released = false;
        pthread_mutex_unlock(&g_gate.mu);
        pl_outcome *o = t_start(e, "call_one", "{\"tool\": \"gate\"}", id);
        cr_assert_eq(o->status, PL_RUN_FAILED);
        pl_outcome_free(o);

        racer r[2] = {{.e = e, .run_id = id}, {.e = e, .run_id = id}};
        for (int i = 0; i < 2; i++)
            cr_assert_eq(pthread_create(&r[i].th, NULL, racer_main, &r[i]), 0);
        bool ok = wait_one_in_one_out();

        /* one thread holds the run inside the gate */
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK);
        bool running = info->status == PL_RUN_RUNNING && info->owner_alive;
        pl_run_info_free(info);
        /* starting the same id again is refused while it runs */
        pl_outcome *dup = NULL;
        pl_action a = {
            PL_ACTION_VERSION, "call_one", pl_json_empty(), NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        int dup_rc = pl_run_start(&dup, e, &a, &ro);

        pthread_mutex_lock(&g_gate.mu);
        g_gate.released = true;
        pthread_cond_broadcast(&g_gate.cv);
        pthread_mutex_unlock(&g_gate.mu);
        for (int i = 0; i < 2; i++)
            pthread_join(r[i].th, NULL);

        cr_assert(ok, "deadlock guard: nobody entered the gate or returned");
        cr_assert(running, "the run is running, its owner alive");
        cr_assert_eq(dup_rc, PL_EEXIST, "starting a taken run id");
        cr_assert_null(dup);
        cr_assert_eq(g_gate.entered, 1, "exactly one execution");
        int winner = r[0].rc == PL_OK ? 0 : 1, loser = 1 - winner;
        cr_assert_eq(r[winner].rc, PL_OK, "%s", r[winner].msg);
        cr_assert_eq(r[loser].rc, PL_EBUSY, "the other: %s (%s)",
                     pl_status_name(r[loser].rc), r[loser].msg);
        cr_assert_null(r[loser].out);
        cr_assert_eq(r[winner].out->status, PL_RUN_COMPLETED);
        cr_assert_eq(r[winner].out->calls_executed, 1);
        pl_outcome_free(r[winner].out);
        cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK);
        cr_assert_eq(info->status, PL_RUN_COMPLETED);
        cr_assert_eq(info->attempts, 2, "one failed start, one continue");
        pl_run_info_free(info);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}
