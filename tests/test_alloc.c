/*
 * test_alloc.c -- failing allocations: the n-th allocation of a whole run
 * fails, for every n.
 *
 * This binary is linked with -Wl,--wrap for malloc, calloc, realloc and
 * free (tests/CMakeLists.txt), so every allocation the library's own code
 * makes goes through the wrappers (support_wrap.c), which ask
 * t_alloc_fails() below; cJSON's go through it too, by
 * cJSON_InitHooks.  (LMDB, OpenSSL and libc allocate inside their own
 * shared objects, out of its reach.)
 *
 * The scenario is one whole run: a registry, an engine on a new store, a
 * run that calls "pay" three times, reads the clock and asks a human
 * (suspends); the run's record read, the run resumed (a replay up to the
 * question, then it completes), continued again (a replay that executes
 * nothing), verified, walked, read and listed; then everything closed.  A first child counts its allocations, N.
 * Then for every n in 1..N a child runs it with the n-th allocation failing
 * (only that one): the call that meets it must return a status with a
 * message (PL_ENOMEM, or a clean error), never crash.  The child then
 * closes and frees everything, checks that what was allocated is freed
 * (the wrapper's count; LeakSanitizer too under the sanitizers), and with
 * allocation restored opens the store again and finishes the run: it
 * verifies, completes with the right result, and each payment was made
 * once (one may be made twice: the call in flight when its result could
 * not be made durable, which the engine re-runs by design).
 *
 * To look at one: PL_ALLOC_AT=n runs only the n-th, and PL_ALLOC_BT=1
 * prints where the failing allocation was made.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "support_alloc.h"

/* ---- the policies -------------------------------------------------------- */

static int flow(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int total = 0;
    for (int i = 0; i < 3; i++) {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, "pay", "{s:i}", "n", i);
        int receipt = 0;
        if (!st)
            st = pl_json_unpack(r, "{s:i}", "receipt", &receipt);
        cJSON_Delete(r);
        if (st)
            return st;
        total += receipt;
    }
    int64_t now = 0;
    int st = pl_ctx_now(&now, ctx);
    cJSON *answer = NULL;
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "approve", "{s:i}", "total", total);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:i, s:O}", "total", total, "answer",
                                  answer);
    cJSON_Delete(answer);
    return st;
}

/* ---- one child ----------------------------------------------------------- */

static int add_policies(pl_registry *reg)
{
    int st = pl_registry_add_fn(reg, "flow", flow, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "pay", t_pay, NULL);
    if (!st)
        st = pl_registry_add_human(reg, "approve");
    return st;
}

static int count_step(const pl_step *s, void *user)
{
    (void)s;
    (*(int *)user)++;
    return 0;
}

static int count_run(const pl_run_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

/* The scenario; stops at the first call that fails and returns its status. */
static int scenario(t_world *w, const char *path)
{
    int st = t_world_open(w, path, add_policies);
    if (st)
        return st;
    cJSON *p = NULL;
    if ((st = pl_json_pack(&p, "{}")))
        return st;
    pl_action a = {PL_ACTION_VERSION, "flow", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "r";
    pl_outcome *o = NULL;
    st = pl_run_start(&o, w->e, &a, &ro);
    cJSON_Delete(p);
    char token[64] = "";
    if (!st && o->status != PL_RUN_SUSPENDED)
        st = PL_ESTATE;
    if (!st)
        snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome_free(o);
    o = NULL;
    pl_run_info *info = NULL;
    if (!st && !(st = pl_run_get(&info, w->e, "r")) &&
        (!info->resume_token || strcmp(info->resume_token, token) != 0))
        st = PL_ESTATE;
    pl_run_info_free(info);
    cJSON *yes = NULL;
    if (!st)
        st = pl_json_pack(&yes, "{s:b}", "ok", 1);
    if (!st && !(st = pl_run_resume(&o, w->e, "r", token, yes)) &&
        o->status != PL_RUN_COMPLETED)
        st = PL_ESTATE;
    cJSON_Delete(yes);
    pl_outcome_free(o);
    o = NULL;
    if (!st && !(st = pl_run_continue(&o, w->e, "r", NULL)) &&
        o->status != PL_RUN_COMPLETED)
        st = PL_ESTATE;
    pl_outcome_free(o);
    int n = 0;
    if (!st)
        st = pl_run_verify(w->e, "r");
    if (!st)
        st = pl_run_walk(w->e, "r", count_step, &n);
    pl_steps *steps = NULL;
    if (!st)
        st = pl_run_ledger(&steps, w->e, "r", "0");
    pl_steps_free(steps);
    if (!st)
        st = pl_engine_runs(w->e, count_run, &n);
    return st;
}

/* With allocation restored: finish the run and check it. */
static bool finish(const char *path, char *why, size_t wn)
{
    t_world w = {0};
    int st = t_world_open(&w, path, add_policies);
    if (st) {
        snprintf(why, wn, "reopening: %s", pl_errmsg());
        t_world_close(&w);
        return false;
    }
    pl_outcome *o = NULL;
    char token[64] = "";
    for (int round = 0; round < 4 && !st; round++) {
        pl_outcome_free(o);
        o = NULL;
        if (token[0]) {
            cJSON *yes = cJSON_CreateObject();
            cJSON_AddTrueToObject(yes, "ok");
            st = pl_run_resume(&o, w.e, "r", token, yes);
            cJSON_Delete(yes);
        } else {
            pl_run_info *info = NULL;
            if (pl_run_get(&info, w.e, "r") == PL_OK && info->resume_token)
                snprintf(token, sizeof token, "%s", info->resume_token);
            pl_run_info_free(info);
            if (token[0])
                continue;
            st = pl_run_continue(&o, w.e, "r", NULL);
            if (st == PL_ENOTFOUND) { /* failed before the run was made */
                cJSON *p = cJSON_CreateObject();
                pl_action a = {PL_ACTION_VERSION, "flow", p, NULL, 0, NULL};
                pl_run_options ro = PL_RUN_OPTIONS_INIT;
                ro.run_id = "r";
                st = pl_run_start(&o, w.e, &a, &ro);
                cJSON_Delete(p);
            }
        }
        if (st || o->status != PL_RUN_SUSPENDED)
            break;
        snprintf(token, sizeof token, "%s", o->resume_token);
    }
    bool ok = false;
    const cJSON *res = NULL;
    if (st)
        snprintf(why, wn, "finishing the run: %s", pl_errmsg());
    else if (o->status != PL_RUN_COMPLETED)
        snprintf(why, wn, "the run ended %s: %s", pl_run_status_name(o->status),
                 o->reason ? o->reason : "(no reason)");
    else if (!(res = pl_step_payload(pl_steps_at(o->steps,
                                                 pl_steps_count(o->steps) -
                                                     1))) ||
             cJSON_GetObjectItemCaseSensitive(res, "total")->valueint != 303)
        snprintf(why, wn, "the run completed with a wrong result");
    else if ((st = pl_run_verify(w.e, "r")))
        snprintf(why, wn, "the store does not verify: %s", pl_errmsg());
    else {
        int twice = 0;
        ok = true;
        for (int i = 0; i < 3; i++) {
            if (t_paid[i] < 1 || t_paid[i] > 2)
                ok = false;
            twice += t_paid[i] == 2;
        }
        if (!ok || twice > 1)
            snprintf(why, wn, "payments made %d, %d, %d times", t_paid[0],
                     t_paid[1], t_paid[2]);
        ok = ok && twice <= 1;
    }
    pl_outcome_free(o);
    t_world_close(&w);
    return ok;
}

/* PL_ALLOC_SHARD="k/N" takes the allocations n with n % N == k alone: the
 * suite runs the sweep as N tests (test_alloc_k), each a slice of it. */
Test(alloc, every_allocation_of_a_run_fails_in_turn, .timeout = 900)
{
    t_alloc_case c = {"alloc: a whole run", scenario, finish};
    t_alloc_sweep(&c);
}
