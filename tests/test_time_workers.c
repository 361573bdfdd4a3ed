/*
 * test_time_workers.c -- timers fire exactly once with three worker
 * processes killed at random (SIGKILL) and started again.
 *
 * RUNS runs each sleep a random 0.5..2 s (parked: a sleep over by the
 * time its step is durable, as a very short one can be on a busy machine,
 * would not park), then call "fire", which
 * appends "<run id>" to an effects file.  "fire" is not idempotent and its
 * in-doubt rule is to fail: a call in flight when its worker was killed is
 * never made again, its result becomes an "InDoubt" error.  So the effects
 * file proves it: every run's line is there at most once, and exactly once
 * for every run whose "fire" has a real result; no timer was taken twice,
 * whichever worker died when.  Runs on LMDB and (pg_test_time_workers) on
 * PostgreSQL.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 30
#define WORKERS 3

static char g_fx[4300];

static int fire(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int fd = open(g_fx, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0)
        return pl_steps_add_error(out, "IO", "cannot open the effects file");
    char line[200];
    int n = snprintf(line, sizeof line, "%s\n", pl_ctx_run_id(ctx));
    ssize_t w = write(fd, line, (size_t)n);
    close(fd);
    (void)w;
    return pl_steps_add_resultf(out, "{s:b}", "fired", 1);
}

static int nap_then_fire(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    (void)user;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    int st = pl_ctx_sleep(ctx, (int64_t)ms->valuedouble);
    if (!st)
        st = pl_ctx_invoke(NULL, ctx, "fire", pl_json_empty());
    if (st == PL_ERESULT) /* in doubt: it may or may not have fired */
        st = pl_steps_add_resultf(out, "{s:b}", "in_doubt", 1);
    else if (!st)
        st = pl_steps_add_resultf(out, "{s:b}", "fired", 1);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def f = PL_POLICY_DEF_INIT;
    f.name = "fire";
    f.fn = fire;
    f.idempotent = false;
    f.in_doubt = PL_IN_DOUBT_FAIL;
    cr_assert_eq(pl_registry_add(reg, &f), PL_OK);
    pl_policy_def n = PL_POLICY_DEF_INIT;
    n.name = "nap_then_fire";
    n.fn = nap_then_fire;
    cr_assert_eq(pl_registry_add(reg, &n), PL_OK);
    return reg;
}

static pl_engine *open_engine(const char *store, const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_SYNC;
    o.lease_ms = 600;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

/* A worker process of two threads, its leases of @p lease_ms. */
static pid_t spawn_worker(const char *store, const pl_registry *reg,
                          unsigned lease_ms)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_SYNC;
        o.lease_ms = lease_ms;
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, &o))
            _exit(10);
        pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
        wo.concurrency = 2;
        wo.poll_ms = 10;
        (void)pl_worker_run(e, &wo);
        _exit(0);
    }
    return pid;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int lines_of(const char *id) { return t_count_lines(g_fx, id); }

static bool all_ended_of(pl_engine *e, const char *prefix, int runs)
{
    for (int i = 0; i < runs; i++) {
        char id[16];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, id), PL_OK, "%s", pl_errmsg());
        bool ended = ri->status == PL_RUN_COMPLETED;
        cr_assert(ri->status != PL_RUN_FAILED, "%s failed: %s", id, ri->reason);
        pl_run_info_free(ri);
        if (!ended)
            return false;
    }
    return true;
}

static bool all_ended(pl_engine *e) { return all_ended_of(e, "t", RUNS); }

Test(time_workers, timers_fire_once_with_workers_killed_at_random,
     .timeout = 600)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    char store[4300];
    t_store_in(store, sizeof store, dir, "timers.db");
    snprintf(g_fx, sizeof g_fx, "%s/effects", dir);
    pl_engine *e = open_engine(store, reg);
    unsigned seed = (unsigned)time(NULL);
    fprintf(stderr, "time_workers: seed %u\n", seed);
    srand(seed);
    for (int i = 0; i < RUNS; i++) {
        char id[16], json[32];
        snprintf(id, sizeof id, "t%d", i);
        snprintf(json, sizeof json, "{\"ms\":%d}", 500 + rand() % 1500);
        pl_outcome *o = t_start(e, "nap_then_fire", json, id);
        cr_assert_eq(o->status, PL_RUN_WAITING);
        pl_outcome_free(o);
    }
    pid_t w[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        w[i] = spawn_worker(store, reg, 600);
    int kills = 0;
    for (int round = 0; round < 6000 && !all_ended(e); round++) {
        nap_ms(20 + rand() % 200);
        if (kills < 12) {
            int k = rand() % WORKERS;
            kill(w[k], SIGKILL);
            while (waitpid(w[k], NULL, 0) == -1 && errno == EINTR)
                ;
            kills++;
            w[k] = spawn_worker(store, reg, 600);
        }
    }
    for (int i = 0; i < WORKERS; i++) {
        kill(w[i], SIGKILL);
        while (waitpid(w[i], NULL, 0) == -1 && errno == EINTR)
            ;
    }
    cr_assert(all_ended(e), "every run ended");
    int fired = 0, in_doubt = 0;
    for (int i = 0; i < RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "t%d", i);
        pl_outcome *o = NULL;
        cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK);
        bool doubt = cJSON_IsTrue(cJSON_GetObjectItem(pl_outcome_result(o),
                                                      "in_doubt"));
        pl_outcome_free(o);
        int n = lines_of(id);
        cr_expect_leq(n, 1, "%s fired %d times", id, n);
        if (!doubt)
            cr_expect_eq(n, 1, "%s fired %d times", id, n);
        fired += !doubt;
        in_doubt += doubt;
        cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
    }
    fprintf(stderr,
            "time_workers: %d runs, %d worker kills: %d fired once, %d in "
            "doubt (killed in the call), none twice\n",
            RUNS, kills, fired, in_doubt);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a worker killed with a batch of wakes in hand -------------------------- */

#define BATCH_RUNS 12

/* "fire" in the worker that dies: the process is killed in the call,
 * before its effect. */
static int fire_and_die(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                        void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    kill(getpid(), SIGKILL);
    return PL_OK;
}

/*
 * Twelve runs due at once; one worker thread takes a batch of them (on
 * PostgreSQL eight: their timers, leases and claims in one transaction;
 * on LMDB one) and is killed (SIGKILL) in the first one's call, the other
 * runs of its batch claimed and waiting their turn.  Another worker then
 * finishes every run: the batch's from the queue once their leases have
 * run out, as crashed runs, the rest by their timers.  Every run ends,
 * each fired exactly once, but for the one in flight at the kill, which
 * fired once or, its call recorded as made, is in doubt and not fired
 * ("fire" is not idempotent): no run lost, none woken twice.
 */
Test(time_workers, a_worker_killed_mid_batch_loses_no_run, .timeout = 600)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    char store[4300];
    t_store_in(store, sizeof store, dir, "batch.db");
    snprintf(g_fx, sizeof g_fx, "%s/effects", dir);
    pl_engine *e = open_engine(store, reg);
    for (int i = 0; i < BATCH_RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        pl_outcome *o = t_start(e, "nap_then_fire", "{\"ms\":300}", id);
        cr_assert_eq(o->status, PL_RUN_WAITING);
        pl_outcome_free(o);
    }
    nap_ms(400); /* all due */
    fflush(NULL);
    pid_t k = fork();
    cr_assert_neq(k, -1);
    if (k == 0) {
        pl_registry *dying = NULL;
        if (pl_registry_new(&dying) ||
            pl_registry_add_fn(dying, "fire", fire_and_die, NULL))
            _exit(10);
        pl_policy_def n = PL_POLICY_DEF_INIT;
        n.name = "nap_then_fire";
        n.fn = nap_then_fire;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_SYNC;
        o.lease_ms = 600;
        pl_engine *we = NULL;
        if (pl_registry_add(dying, &n) || pl_engine_open(&we, store, dying, &o))
            _exit(11);
        pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
        wo.poll_ms = 10;
        (void)pl_worker_run(we, &wo);
        _exit(12); /* never: killed in its first call */
    }
    int ws = 0;
    while (waitpid(k, &ws, 0) == -1 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
              "the worker was not killed in its call (status %d)", ws);
    /* the runs it had claimed: its batch */
    int claimed = 0;
    for (int i = 0; i < BATCH_RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, id), PL_OK, "%s", pl_errmsg());
        claimed += ri->status == PL_RUN_RUNNING;
        pl_run_info_free(ri);
    }
    cr_expect_eq(claimed, t_on_pg() ? 8 : 1,
                 "the killed worker held %d claimed runs", claimed);
    /* the killed worker's leases run out; this one's must not while a
     * thread stalls in a call (its sibling would take the run, and fire
     * it again) */
    pid_t w = spawn_worker(store, reg, 30000);
    for (int round = 0; round < 3000 && !all_ended_of(e, "b", BATCH_RUNS);
         round++)
        nap_ms(20);
    kill(w, SIGKILL);
    while (waitpid(w, NULL, 0) == -1 && errno == EINTR)
        ;
    cr_assert(all_ended_of(e, "b", BATCH_RUNS), "every run ended");
    int in_doubt = 0;
    for (int i = 0; i < BATCH_RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        pl_outcome *o = NULL;
        cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK);
        bool doubt = cJSON_IsTrue(cJSON_GetObjectItem(pl_outcome_result(o),
                                                      "in_doubt"));
        pl_outcome_free(o);
        in_doubt += doubt;
        cr_expect_eq(lines_of(id), doubt ? 0 : 1, "%s fired %d times", id,
                     lines_of(id));
        cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
    }
    cr_expect_leq(in_doubt, 1, "%d runs in doubt", in_doubt);
    pl_engine_close(e);
    pl_registry_free(reg);
}
