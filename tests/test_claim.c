/*
 * test_claim.c -- the claim of a run for an execution (core/replay/claim.c)
 * against a run that ends between the moment pl_run_continue() reads it and
 * the moment it claims it: the claim sees what the store holds then.
 *
 * The window is made, not waited for: this binary is linked with
 * -Wl,--wrap=pl__store_lease_acquire (tests/CMakeLists.txt), and with
 * g_then set the wrapper runs it once just before the lease is taken, in
 * the continuing thread, after the run was read.  On both stores
 * (pg_test_claim).
 */
#include "support.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the window ---------------------------------------------------------- */

static void (*g_then)(void);

int __real_pl__store_lease_acquire(void *s, uint64_t run, const char *run_id,
                                   const char *owner, int64_t lease_us,
                                   uint64_t steal_gen, bool wake, uint64_t *gen,
                                   bool *had, void *held);
int __wrap_pl__store_lease_acquire(void *s, uint64_t run, const char *run_id,
                                   const char *owner, int64_t lease_us,
                                   uint64_t steal_gen, bool wake, uint64_t *gen,
                                   bool *had, void *held);

int __wrap_pl__store_lease_acquire(void *s, uint64_t run, const char *run_id,
                                   const char *owner, int64_t lease_us,
                                   uint64_t steal_gen, bool wake, uint64_t *gen,
                                   bool *had, void *held)
{
    void (*then)(void) = g_then;
    g_then = NULL; /* once, and not for the leases it takes itself */
    if (then)
        then();
    return __real_pl__store_lease_acquire(s, run, run_id, owner, lease_us,
                                          steal_gen, wake, gen, had, held);
}

/* ---- policies ------------------------------------------------------------ */

static bool g_v2;
static int g_runs; /* executions of "quick"'s body */

/* "quick": returns at once, making no call (so no call boundary sees a
 * cancellation); with g_v2 it calls "echo" first. */
static int quick(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    g_runs++;
    int st = g_v2 ? pl_ctx_invokef(NULL, ctx, "echo", "{}") : PL_OK;
    return st ? st : pl_steps_add_resultf(out, "{s:b}", "done", 1);
}

/* "failing": fails, so that it may be continued again (or upgraded). */
static int failing(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)out;
    (void)user;
    int st = pl_ctx_invokef(NULL, ctx, "echo", "{}");
    return st ? st : pl_errorf(PL_EPOLICY, "not today");
}

static pl_engine *g_e;

static void cancel_it(void)
{
    cr_assert_eq(pl_run_cancel(g_e, "c1", "not wanted"), PL_OK, "%s",
                 pl_errmsg());
}

/* Another process, forked before this one opens the store: told by a
 * byte on g_go, it continues run "q1" to its end on an engine of its own,
 * and answers with a byte on g_done, '0' when the run completed. */
static int g_go[2], g_done[2];

static void other_process(const char *path)
{
    cr_assert_eq(pipe(g_go), 0);
    cr_assert_eq(pipe(g_done), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid > 0)
        return;
    char c;
    if (read(g_go[0], &c, 1) != 1)
        _exit(2);
    pl_registry *reg = t_registry();
    int ok = pl_registry_add_fn(reg, "quick", quick, NULL) == PL_OK;
    pl_engine *e = NULL;
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    pl_outcome *o = NULL;
    ok = ok && pl_engine_open(&e, path, reg, &eo) == PL_OK &&
         pl_run_continue(&o, e, "q1", NULL) == PL_OK &&
         o->status == PL_RUN_COMPLETED;
    if (!ok)
        fprintf(stderr, "the other process: %s\n", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    c = ok ? '0' : '1';
    _exit(write(g_done[1], &c, 1) == 1 ? 0 : 3);
}

static void continue_elsewhere(void)
{
    char c = 'g';
    cr_assert_eq(write(g_go[1], &c, 1), 1);
    cr_assert_eq(read(g_done[0], &c, 1), 1, "the other process ended");
    cr_assert_eq(c, '0', "the other process did not complete the run");
}

static void upgrade_it(void)
{
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, g_e, "f1", "0:0", "f1-up"), PL_OK, "%s",
                 pl_errmsg());
    free(nid);
}

static pl_engine *engine(const char *path, pl_registry **reg)
{
    *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(*reg, "quick", quick, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(*reg, "failing", failing, NULL), PL_OK);
    g_e = t_engine(path, *reg, PL_DURABILITY_SYNC);
    return g_e;
}

TestSuite(claim, .fini = t_cleanup, .timeout = 120);

/* Queue run @p id of "quick", and continue it with @p then run in the
 * window; what the continue returned. */
static int continue_queued(pl_outcome **o, pl_engine *e, const char *id,
                           void (*then)(void))
{
    pl_action root = PL_ACTION_INIT;
    root.policy = "quick";
    root.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    g_runs = 0;
    g_then = then;
    int st = pl_run_continue(o, e, id, NULL);
    cr_expect_null(g_then, "the continue took no lease");
    return st;
}

/*
 * A queued run cancelled while pl_run_continue() takes it ends cancelled,
 * its policy not run: the claim made it `running` again, and the run, whose
 * policy makes no call, completed.
 */
Test(claim, a_run_cancelled_before_its_claim_stays_cancelled)
{
    pl_registry *reg;
    pl_engine *e = engine(t_store_path(), &reg);
    pl_outcome *o = NULL;
    int st = continue_queued(&o, e, "c1", cancel_it);
    cr_expect_eq(st, PL_ESTATE, "continued: %s (%s)", pl_status_name(st),
                 o ? pl_run_status_name(o->status) : pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "cancelled"), "%s", pl_errmsg());
    pl_outcome_free(o);
    cr_expect_eq(g_runs, 0, "the cancelled run's policy ran");
    cr_expect_eq(status_of(e, "c1"), PL_RUN_CANCELLED);
    cr_expect_eq(pl_run_verify(e, "c1"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A failed run upgraded while pl_run_continue() retries it stays
 * superseded, its successor the one run that goes on: the claim made it
 * `running`, and it failed again under the code that cannot replay it, no
 * longer final, to be upgraded a second time.
 */
Test(claim, a_run_superseded_before_its_claim_stays_superseded)
{
    pl_registry *reg;
    pl_engine *e = engine(t_store_path(), &reg);
    pl_outcome *o = t_start(e, "failing", "{}", "f1");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    o = NULL;
    g_then = upgrade_it;
    int st = pl_run_continue(&o, e, "f1", NULL);
    cr_expect_null(g_then, "the continue took no lease");
    cr_expect_eq(st, PL_ESTATE, "continued: %s (%s)", pl_status_name(st),
                 o ? pl_run_status_name(o->status) : pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "superseded"), "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "f1"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ri->status, PL_RUN_SUPERSEDED, "the old run is %s",
                 pl_run_status_name(ri->status));
    cr_expect_str_eq(ri->successor, "f1-up");
    pl_run_info_free(ri);
    char *nid = NULL;
    cr_expect_eq(pl_run_upgrade(&nid, e, "f1", "0:0", NULL), PL_ESTATE,
                 "a second successor was made");
    free(nid);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A run that completes while pl_run_continue() takes it is not claimed
 * again: the continue says another thread ran it (PL_EBUSY), writing
 * nothing, and a continue after it replays it, as for any completed run
 * (the other process is another engine: this one's own threads are kept
 * apart before the lease is asked).
 * The claim made the completed run `running`, one attempt more, and ran
 * it again.
 */
Test(claim, a_run_completed_before_its_claim_is_left_completed)
{
    char path[4200];
    snprintf(path, sizeof path, "%s", t_store_path());
    other_process(path); /* before this process opens the store */
    pl_registry *reg;
    pl_engine *e = engine(path, &reg);
    pl_outcome *o = NULL;
    int st = continue_queued(&o, e, "q1", continue_elsewhere);
    cr_expect_eq(g_runs, 0, "the completed run was executed again here");
    cr_expect_eq(st, PL_EBUSY, "continued: %s (%s)", pl_status_name(st),
                 o ? pl_run_status_name(o->status) : pl_errmsg());
    pl_outcome_free(o);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "q1"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ri->status, PL_RUN_COMPLETED);
    cr_expect_eq(ri->attempts, 1);
    pl_run_info_free(ri);
    cr_assert_eq(pl_run_continue(&o, e, "q1", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "q1"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}
