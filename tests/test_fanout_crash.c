/*
 * test_fanout_crash.c -- pl_ctx_call_all's crash matrix (core/replay/fanout.c):
 * a fan-out of 4 SIGKILLed at every step boundary, then continued, with the
 * policies of test_fanout.c (support_fanout.c).
 */
#include "support.h"
#include "support_fanout.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the crash matrix -------------------------------------------------------- */

static atomic_long boundaries;

static long kill_at;

static void on_boundary(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    long k = atomic_fetch_add(&boundaries, 1) + 1;
    if (kill_at > 0 && k == kill_at)
        raise(SIGKILL);
}

static pl_engine *crash_engine(const char *store, const pl_registry *reg)
{
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = on_boundary;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, store, reg, &eo);
    if (st)
        return NULL;
    return e;
}

/* Start the fan-out, counting boundaries; SIGKILL at @p at (0: never). */
static int run_fan(const char *store, const pl_registry *reg, const char *p,
                   long at)
{
    kill_at = at;
    atomic_store(&boundaries, 0);
    pl_engine *e = crash_engine(store, reg);
    if (!e)
        return 1;
    pl_outcome *o;
    int st = t_try_start(&o, e, "fan", p, "crash");
    int rc = st || o->status != PL_RUN_COMPLETED ? 2 : 0;
    pl_outcome_free(o);
    pl_engine_close(e);
    return rc;
}

/* Every step of the run's ledgers, as text, for comparison. */
static char *ledgers_text(pl_engine *e)
{
    static const char *const paths[] = {"0", "0.0", "0.1", "0.2", "0.3"};
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        pl_steps *l = ledger(e, "crash", paths[i]);
        for (size_t j = 0; j < pl_steps_count(l); j++) {
            const pl_step *s = pl_steps_at(l, j);
            char *t = t_text(pl_step_payload(s));
            int n = snprintf(out + len, cap - len, "%s %s %s %s\n",
                             pl_step_id(s),
                             pl_step_type_name(pl_step_type_of(s)),
                             pl_step_actor(s), t);
            free(t);
            cr_assert(n > 0 && (size_t)n < cap - len);
            len += (size_t)n;
        }
        pl_steps_free(l);
    }
    return out;
}

Test(fanout, crash_matrix_at_every_boundary, .timeout = 300)
{
    pl_registry *reg = registry();
    int ms[4] = {30, 0, 20, 10};
    char *p = sleepers_payload(ms, 4);
    /* the reference: uncrashed */
    const char *ref_store = t_store_path();
    use_effects();
    cr_assert_eq(run_fan(ref_store, reg, p, 0), 0, "%s", pl_errmsg());
    long K = atomic_load(&boundaries);
    cr_assert_gt(K, 10, "boundaries: %ld", K);
    pl_engine *e = t_engine(ref_store, reg, PL_DURABILITY_PROCESS);
    char *want = ledgers_text(e);
    pl_engine_close(e);

    cr_log_info("fan-out crash matrix: %ld boundaries", K);
    int partial = 0, repeated = 0;
    for (long k = 1; k <= K; k++) {
        const char *store = t_store_path();
        use_effects();
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0)
            _exit(run_fan(store, reg, p, k));
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "boundary %ld: the child should die of SIGKILL (status "
                  "%d)",
                  k, status);
        /* what the crash left: the results durable in the root's ledger */
        e = t_engine(store, reg, PL_DURABILITY_PROCESS);
        int durable[4] = {0};
        pl_steps *l = NULL;
        if (pl_run_ledger(&l, e, "crash", "0") == PL_OK) {
            for (size_t j = 0; j < pl_steps_count(l); j++) {
                const pl_step *s = pl_steps_at(l, j);
                int id = get_int(pl_step_payload(s), "id", -1);
                if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT && id >= 0 &&
                    id < 4)
                    durable[id] = 1;
            }
            pl_steps_free(l);
        }
        int before[4];
        count_effects(before, 4);
        partial += durable[0] && !durable[3];
        for (int i = 0; i < 4; i++)
            cr_expect(!durable[i] || before[i] == 1,
                      "boundary %ld: call %d is durable, its effect is "
                      "there once (%d)",
                      k, i, before[i]);
        pl_run_info *info = NULL;
        bool started = pl_run_get(&info, e, "crash") == PL_OK;
        pl_run_info_free(info);
        pl_outcome *o = NULL;
        if (started) {
            cr_expect_eq(pl_run_verify(e, "crash"), PL_OK,
                         "boundary %ld: the crashed run verifies: %s", k,
                         pl_errmsg());
            cr_assert_eq(pl_run_continue(&o, e, "crash", NULL), PL_OK,
                         "boundary %ld: %s", k, pl_errmsg());
        } else { /* killed before the run's record was written */
            cr_assert_eq(t_try_start(&o, e, "fan", p, "crash"), PL_OK, "%s",
                         pl_errmsg());
        }
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "boundary %ld: %s", k,
                     o->reason ? o->reason : "");
        expect_json(pl_outcome_result(o), want4);
        pl_outcome_free(o);
        cr_expect_eq(pl_run_verify(e, "crash"), PL_OK,
                     "boundary %ld: the recovered run verifies: %s", k,
                     pl_errmsg());
        char *got = ledgers_text(e);
        cr_expect_str_eq(got, want, "boundary %ld: the ledgers differ", k);
        free(got);
        int after[4];
        count_effects(after, 4);
        for (int i = 0; i < 4; i++) {
            if (durable[i])
                cr_expect_eq(after[i], 1,
                             "boundary %ld: call %d was durable; its effect "
                             "happened %d times",
                             k, i, after[i]);
            repeated += after[i] == 2;
            if (!durable[i])
                cr_expect(after[i] >= 1 && after[i] <= before[i] + 1 &&
                              after[i] <= 2,
                          "boundary %ld: call %d in flight: effect %d "
                          "times (%d before recovery)",
                          k, i, after[i], before[i]);
        }
        pl_engine_close(e);
    }
    /* the matrix saw crashes between the results, and calls in flight */
    cr_expect_gt(partial, 0, "no crash fell between two results");
    cr_expect_gt(repeated, 0, "no crash fell inside a call");
    free(want);
    free(p);
    pl_registry_free(reg);
}
