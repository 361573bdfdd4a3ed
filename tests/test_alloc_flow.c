/*
 * test_alloc_flow.c -- failing allocations on the paths of the queue and
 * of long-lived runs that test_alloc.c and test_alloc_paths.c leave: a
 * run submitted with a priority and a concurrency key, executed from the
 * queue, fanning out three calls at once (pl_ctx_call_all()) and
 * continuing as new; its successor executed; the runs listed a page at a
 * time both ways, pruned, and their tombstones read.
 *
 * Linked as test_alloc is (-Wl,--wrap, support_wrap.c): the n-th
 * allocation fails, for every n, each in a child of its own.  The call
 * that meets it must return a status with a message, leave nothing
 * allocated, and with allocation restored the store finishes: the chain
 * ends completed, each run left verifies, and each payment was made once
 * (twice at most: a call in flight).
 * PL_ALLOC_AT=n runs one n; PL_ALLOC_BT=1 prints where it fails.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "support_alloc.h"
#include "support_wrap.h"

/* {"left": L}: with L > 0, pay 0, 1 and 2 at once and continue as new
 * with {"left": L - 1}; the result is {"left": L}. */
static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int left = 0;
    int st = pl_json_unpack(a->payload, "{s:i}", "left", &left);
    if (!st && left > 0) {
        cJSON *p[3] = {NULL, NULL, NULL};
        pl_action act[3];
        pl_call_spec specs[3] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT,
                                 PL_CALL_SPEC_INIT};
        for (int i = 0; i < 3; i++) {
            if (!st)
                st = pl_json_pack(&p[i], "{s:i}", "n", i);
            act[i] = (pl_action){PL_ACTION_VERSION, "pay", p[i], NULL, 0, NULL};
            specs[i].action = &act[i];
        }
        pl_step *res[3] = {NULL, NULL, NULL};
        if (!st)
            st = pl_ctx_call_all(res, ctx, specs, 3);
        for (int i = 0; i < 3; i++) {
            if (!st)
                pl_step_free(res[i]);
            cJSON_Delete(p[i]);
        }
        cJSON *next = NULL;
        if (!st)
            st = pl_json_pack(&next, "{s:i}", "left", left - 1);
        if (!st)
            st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
    }
    if (!st)
        st = pl_steps_add_resultf(out, "{s:i}", "left", left);
    return st;
}

static int add_policies(pl_registry *reg)
{
    int st = pl_registry_add_fn(reg, "fan", fan, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "pay", t_pay, NULL);
    return st;
}

static int submit_s(pl_engine *e)
{
    cJSON *p = NULL;
    int st = pl_json_pack(&p, "{s:i}", "left", 1);
    pl_action a = {PL_ACTION_VERSION, "fan", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "s";
    ro.priority = 5;
    ro.concurrency_key = "tenant-1";
    ro.concurrency_limit = 1;
    if (!st)
        st = pl_run_submit(NULL, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

static int count_run(const pl_run_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

/* A state the scenario should not reach, said on stderr: PL_ESTATE. */
static int wrong(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return PL_ESTATE;
}

/* Continue run @p id, which must end @p want. */
static int continue_to(pl_engine *e, const char *id, pl_run_status want)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, id, NULL);
    if (!st && o->status != want)
        st = wrong("run %s ended %s", id, pl_run_status_name(o->status));
    pl_outcome_free(o);
    return st;
}

/* The scenario; stops at the first call that fails. */
static int scenario(t_world *w, const char *path)
{
    int st = t_world_open(w, path, add_policies);
    if (!st)
        st = submit_s(w->e);
    if (!st)
        st = continue_to(w->e, "s", PL_RUN_CONTINUED);
    if (!st)
        st = continue_to(w->e, "s~1", PL_RUN_COMPLETED);
    int n = 0;
    pl_runs_options lo = PL_RUNS_OPTIONS_INIT;
    lo.reverse = true;
    lo.after = "t";
    if (!st)
        st = pl_engine_runs_from(w->e, &lo, count_run, &n);
    if (!st && n != 2)
        st = wrong("%d runs listed, not 2", n);
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    po.statuses = 1u << PL_RUN_CONTINUED;
    uint64_t deleted = 0;
    if (!st)
        st = pl_engine_prune(w->e, &po, &deleted);
    if (!st && deleted != 1)
        st = wrong("%llu runs pruned, not 1", (unsigned long long)deleted);
    pl_tombstone t = PL_TOMBSTONE_INIT;
    if (!st)
        st = pl_run_tombstone(&t, w->e, "s");
    return st;
}

/* With allocation restored: finish what the scenario began, check it. */
static bool finish(const char *path, char *why, size_t wn)
{
    t_world w = {0};
    pl_tombstone t = PL_TOMBSTONE_INIT;
    int st = t_world_open(&w, path, add_policies);
    bool deleted = !st && pl_run_tombstone(&t, w.e, "s") == PL_OK;
    if (!st && !deleted && t_run_status(w.e, "s") < 0)
        st = submit_s(w.e);
    int s = st || deleted ? -1 : t_run_status(w.e, "s");
    if (!st && (s == PL_RUN_SUBMITTED || s == PL_RUN_RUNNING))
        st = continue_to(w.e, "s", PL_RUN_CONTINUED);
    if (!st && t_run_status(w.e, "s~1") != PL_RUN_COMPLETED)
        st = continue_to(w.e, "s~1", PL_RUN_COMPLETED);
    if (st) {
        snprintf(why, wn, "finishing: %s", pl_errmsg());
        t_world_close(&w);
        return false;
    }
    bool ok = false;
    if (!deleted && t_run_status(w.e, "s") != PL_RUN_CONTINUED)
        snprintf(why, wn, "run s is %s, not continued",
                 pl_run_status_name((pl_run_status)t_run_status(w.e, "s")));
    else if (!deleted && (st = pl_run_verify(w.e, "s")))
        snprintf(why, wn, "run s does not verify: %s", pl_errmsg());
    else if ((st = pl_run_verify(w.e, "s~1")))
        snprintf(why, wn, "run s~1 does not verify: %s", pl_errmsg());
    else if (t_paid[0] < 1 || t_paid[1] < 1 || t_paid[2] < 1 || t_paid[0] > 2 ||
             t_paid[1] > 2 || t_paid[2] > 2)
        snprintf(why, wn, "payments made %d, %d, %d times", t_paid[0],
                 t_paid[1], t_paid[2]);
    else
        ok = true;
    t_world_close(&w);
    return ok;
}

Test(alloc_flow, every_allocation_of_a_queued_chain_fails, .timeout = 900)
{
    t_alloc_case c = {"alloc_flow", scenario, finish};
    t_alloc_sweep(&c);
}
