/*
 * test_concurrency_procs.c -- another process against a run's owner
 * (docs/design.md §14; core/replay/runner.c run ownership): continuing a
 * run whose owner process is alive (and blocked) gets PL_EBUSY, and once the
 * owner is killed -9 it succeeds; of two processes recovering the same
 * crashed run at once, exactly one executes it, the other gets PL_EBUSY.
 * No assertion depends on timing.
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

/* ---- (e) another process, while the owner lives ------------------------------------------- */

Test(concurrency, other_process_busy_until_owner_dies)
{
    const char *store = t_store_path();
    pl_registry *reg = conc_registry();
    pl_engine_close(t_engine(store, reg, PL_DURABILITY_SYNC)); /* create */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t owner = fork();
    cr_assert_neq(owner, -1);
    if (owner == 0) {
        close(fds[0]);
        g_block_fd = fds[1];
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, NULL))
            _exit(10);
        cJSON *p = cJSON_Parse("{\"tool\": \"block\"}");
        pl_action a = {PL_ACTION_VERSION, "call_one", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "owned";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, &a, &ro); /* blocks in "block" */
        _exit(11);
    }
    close(fds[1]);
    char c;
    cr_assert_eq(read(fds[0], &c, 1), 1, "the owner never reached the tool");
    close(fds[0]);

    /* the owner is alive and blocked inside the run */
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "owned"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert(info->owner_alive);
    cr_assert_eq(info->owner_pid, (int64_t)owner);
    cr_assert_eq(info->attempts, 1);
    pl_run_info_free(info);
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "owned", NULL);
    cr_assert_eq(st, PL_EBUSY, "continuing a live owner's run: %s (%s)",
                 pl_status_name(st), pl_errmsg());
    cr_assert_null(o);
    cr_assert_eq(pl_run_get(&info, e, "owned"), PL_OK);
    cr_assert_eq(info->attempts, 1, "the refused continue changed nothing");
    cr_assert_eq(info->owner_pid, (int64_t)owner);
    pl_run_info_free(info);

    /* kill -9 the owner: now the run is crashed and can be finished */
    cr_assert_eq(kill(owner, SIGKILL), 0);
    int status = 0;
    while (waitpid(owner, &status, 0) == -1 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    cr_assert_eq(pl_run_get(&info, e, "owned"), PL_OK);
    cr_assert(!info->owner_alive);
    pl_run_info_free(info);
    st = pl_run_continue(&o, e, "owned", NULL);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, 1);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                      "text")
                         ->valuestring,
                     "unblocked");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "owned"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->attempts, 2);
    cr_assert_neq(info->owner_pid, (int64_t)owner);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "owned"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- two processes recovering the same crashed run ------------------------------------------ */

/* "pblock": reports on g_block_fd (this process's letter), then waits for
 * a byte (or EOF) on g_release_fd.  Without a pipe, it just returns. */
static int g_release_fd = -1;

static char g_letter = '?';

static int pblock(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    if (g_block_fd >= 0) {
        char c;
        if (write(g_block_fd, &g_letter, 1) != 1)
            return PL_EIO;
        if (read(g_release_fd, &c, 1) < 0)
            return PL_EIO;
    }
    return pl_steps_add_text(out, NULL, "released");
}

enum { RECOVER_DONE = 0, RECOVER_BUSY = 20 };

static int recover_child(const char *store, const pl_registry *reg, int go_fd)
{
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, reg, NULL))
        return 10;
    char c;
    if (read(go_fd, &c, 1) != 1)
        return 11;
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "contested", NULL);
    int code = st == PL_EBUSY                  ? RECOVER_BUSY
               : st                            ? 12
               : o->status == PL_RUN_COMPLETED ? RECOVER_DONE
                                               : 13;
    pl_outcome_free(o);
    pl_engine_close(e);
    return code;
}

static int exit_code(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(concurrency, two_processes_recover_one_crashed_run)
{
    const char *store = t_store_path();
    pl_registry *reg = conc_registry();
    pl_engine_close(t_engine(store, reg, PL_DURABILITY_SYNC)); /* create */

    /* a run whose owner is killed -9 inside its tool */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t owner = fork();
    cr_assert_neq(owner, -1);
    if (owner == 0) {
        close(fds[0]);
        g_block_fd = fds[1];
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, NULL))
            _exit(10);
        cJSON *p = cJSON_Parse("{\"tool\": \"block\"}");
        pl_action a = {PL_ACTION_VERSION, "call_one", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "contested";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, &a, &ro);
        _exit(11);
    }
    close(fds[1]);
    char c;
    cr_assert_eq(read(fds[0], &c, 1), 1);
    close(fds[0]);
    cr_assert_eq(kill(owner, SIGKILL), 0);
    cr_assert_eq(exit_code(owner), 128 + SIGKILL);

    /* Two recoverer processes at once.  In their registry the tool
     * "block" is pblock: it reports which process reached it, then waits
     * for the test to release it. */
    pl_registry *rreg = NULL;
    cr_assert_eq(pl_registry_new(&rreg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"call_one", call_one}, {"block", pblock}};
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(pl_registry_add_fn(rreg, defs[i].name, defs[i].fn, NULL),
                     PL_OK);
    }
    int report[2], release[2], go[2];
    cr_assert_eq(pipe(report), 0);
    cr_assert_eq(pipe(release), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t kid[2];
    fflush(NULL);
    for (int i = 0; i < 2; i++) {
        kid[i] = fork();
        cr_assert_neq(kid[i], -1);
        if (kid[i] == 0) {
            close(report[0]);
            close(release[1]);
            close(go[1]);
            g_block_fd = report[1];
            g_release_fd = release[0];
            g_letter = (char)('A' + i);
            _exit(recover_child(store, rreg, go[0]));
        }
    }
    close(report[1]);
    close(release[0]);
    close(go[0]);
    cr_assert_eq(write(go[1], "gg", 2), 2);
    close(go[1]);

    /* one recoverer reaches the tool and waits there ... */
    char who = 0;
    ssize_t got = read(report[0], &who, 1);
    int winner = who == 'A' ? 0 : who == 'B' ? 1 : -1;
    /* ... the other must give up with PL_EBUSY (if it entered the tool
     * too, it would block until the release below) */
    int loser_code = -1;
    if (winner >= 0) {
        pid_t lpid = kid[1 - winner];
        for (int tries = 0; tries < GUARD_SECONDS * 10; tries++) {
            int status = 0;
            pid_t w = waitpid(lpid, &status, WNOHANG);
            if (w == lpid) {
                loser_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                               : 128 + WTERMSIG(status);
                break;
            }
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    close(release[1]); /* EOF releases whoever waits in the tool */
    char extra;
    ssize_t more = read(report[0], &extra, 1);
    close(report[0]);
    int codes[2];
    for (int i = 0; i < 2; i++)
        codes[i] = winner >= 0 && i == 1 - winner && loser_code >= 0
                       ? loser_code
                       : exit_code(kid[i]);

    cr_assert_eq(got, 1, "no recoverer reached the tool");
    cr_assert_geq(winner, 0);
    cr_assert_eq(more, 0, "both recoverers executed the run's call");
    cr_assert_eq(codes[winner], RECOVER_DONE,
                 "the recoverer that ran it "
                 "exited with %d",
                 codes[winner]);
    cr_assert_eq(codes[1 - winner], RECOVER_BUSY,
                 "the other recoverer "
                 "exited with %d, not PL_EBUSY",
                 codes[1 - winner]);

    pl_engine *e = t_engine(store, rreg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "contested"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->attempts, 2, "the owner's and one recoverer's");
    cr_assert_eq(info->owner_pid, (int64_t)kid[winner]);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "contested"), PL_OK, "%s", pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "contested", "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 3, "call, result, the root's result");
    pl_steps_free(l);
    pl_engine_close(e);
    pl_registry_free(rreg);
    pl_registry_free(reg);
}
