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

static pid_t spawn_worker(const char *store, const pl_registry *reg)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_SYNC;
        o.lease_ms = 600;
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

static int lines_of(const char *id)
{
    FILE *f = fopen(g_fx, "r");
    if (!f)
        return 0;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        n += !strcmp(line, id);
    }
    fclose(f);
    return n;
}

static bool all_ended(pl_engine *e)
{
    for (int i = 0; i < RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "t%d", i);
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
        w[i] = spawn_worker(store, reg);
    int kills = 0;
    for (int round = 0; round < 6000 && !all_ended(e); round++) {
        nap_ms(20 + rand() % 200);
        if (kills < 12) {
            int k = rand() % WORKERS;
            kill(w[k], SIGKILL);
            while (waitpid(w[k], NULL, 0) == -1 && errno == EINTR)
                ;
            kills++;
            w[k] = spawn_worker(store, reg);
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
