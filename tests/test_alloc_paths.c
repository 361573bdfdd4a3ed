/*
 * test_alloc_paths.c -- failing allocations on the paths test_alloc.c's
 * run does not take: a run waiting for an event and signalled, forked,
 * cancelled while it waits, exported and imported under another id, and
 * deleted.
 *
 * Linked as test_alloc is (-Wl,--wrap, support_wrap.c): the n-th
 * allocation fails, for every n, each in a child of its own.  The call
 * that meets it must return a status with a message, leave nothing
 * allocated, and with allocation restored the store finishes: the waiting
 * run completes with the event's value, every run left verifies, the fork
 * ends cancelled, the import exports as the original does, and each
 * payment was made once (one may be made twice: the call in flight).
 * PL_ALLOC_AT=n runs one n; PL_ALLOC_BT=1 prints where it fails.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "support_alloc.h"
#include "support_wrap.h"

/* pay(0), wait for "go", pay(1); the result carries the event's v. */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invokef(&r, ctx, "pay", "{s:i}", "n", 0);
    cJSON_Delete(r);
    r = NULL;
    cJSON *ev = NULL;
    if (!st)
        st = pl_ctx_wait_event(&ev, ctx, "go", PL_WAIT_FOREVER);
    int v = 0;
    if (!st)
        st = pl_json_unpack(ev, "{s:i}", "v", &v);
    cJSON_Delete(ev);
    if (!st)
        st = pl_ctx_invokef(&r, ctx, "pay", "{s:i}", "n", 1);
    cJSON_Delete(r);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:i}", "v", v);
    return st;
}

static int add_policies(pl_registry *reg)
{
    int st = pl_registry_add_fn(reg, "waiter", waiter, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "pay", t_pay, NULL);
    return st;
}

static int start_w(pl_engine *e, pl_outcome **o)
{
    cJSON *p = NULL;
    int st = pl_json_pack(&p, "{}");
    pl_action a = {PL_ACTION_VERSION, "waiter", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "w";
    if (!st)
        st = pl_run_start(o, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

/* The id of run @p id's root step of type `wait`, into @p out. */
static int wait_step(pl_engine *e, const char *id, char *out, size_t n)
{
    pl_steps *steps = NULL;
    int st = pl_run_ledger(&steps, e, id, "0");
    for (size_t i = 0; !st && i < pl_steps_count(steps); i++)
        if (pl_step_type_of(pl_steps_at(steps, i)) == PL_STEP_WAIT)
            snprintf(out, n, "%s", pl_step_id(pl_steps_at(steps, i)));
    pl_steps_free(steps);
    return st ? st : out[0] ? PL_OK : PL_ESTATE;
}

/* Run @p id exported into a string (caller frees), or NULL. */
static char *exported(pl_engine *e, const char *id, int *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        *st = PL_ESTATE;
        return NULL;
    }
    *st = pl_run_export(e, id, f);
    fclose(f);
    if (*st) {
        __real_free(buf); /* open_memstream's, made in libc */
        buf = NULL;
    }
    return buf;
}

static int import_w(pl_engine *e)
{
    int st;
    char *text = exported(e, "w", &st);
    if (st)
        return st;
    FILE *in = fmemopen(text, strlen(text), "r");
    char *id = NULL;
    st = in ? pl_run_import(&id, e, in, "i") : PL_ESTATE;
    if (in)
        fclose(in);
    free(id);
    __real_free(text);
    return st;
}

/* The scenario; stops at the first call that fails. */
static int scenario(t_world *w, const char *path)
{
    int st = t_world_open(w, path, add_policies);
    if (st)
        return st;
    pl_outcome *o = NULL;
    if (!(st = start_w(w->e, &o)) && o->status != PL_RUN_WAITING)
        st = PL_ESTATE;
    pl_outcome_free(o);
    o = NULL;
    char at[64] = "";
    char *fid = NULL;
    if (!st)
        st = wait_step(w->e, "w", at, sizeof at);
    if (!st)
        st = pl_run_fork(&fid, w->e, "w", at, "f");
    free(fid);
    if (!st && !(st = pl_run_continue(&o, w->e, "f", NULL)) &&
        o->status != PL_RUN_WAITING)
        st = PL_ESTATE;
    pl_outcome_free(o);
    o = NULL;
    if (!st)
        st = pl_run_cancel(w->e, "f", "not wanted");
    cJSON *go = NULL;
    if (!st)
        st = pl_json_pack(&go, "{s:i}", "v", 7);
    if (!st && !(st = pl_run_signal(&o, w->e, "w", "go", go)) &&
        (!o || o->status != PL_RUN_COMPLETED))
        st = PL_ESTATE;
    cJSON_Delete(go);
    pl_outcome_free(o);
    if (!st)
        st = import_w(w->e);
    if (!st)
        st = pl_run_verify(w->e, "i");
    if (!st)
        st = pl_run_delete(w->e, "i");
    return st;
}

/* With allocation restored: finish what the scenario began, check it. */
static bool finish(const char *path, char *why, size_t wn)
{
    t_world w = {0};
    int st = t_world_open(&w, path, add_policies);
    pl_outcome *o = NULL;
    if (!st && t_run_status(w.e, "w") < 0)
        st = start_w(w.e, &o);
    pl_outcome_free(o);
    o = NULL;
    if (!st && t_run_status(w.e, "w") == PL_RUN_RUNNING)
        st = pl_run_continue(&o, w.e, "w", NULL);
    pl_outcome_free(o);
    o = NULL;
    if (!st && t_run_status(w.e, "f") == PL_RUN_RUNNING)
        st = pl_run_continue(&o, w.e, "f", NULL);
    pl_outcome_free(o);
    o = NULL;
    if (!st && t_run_status(w.e, "f") == PL_RUN_WAITING)
        st = pl_run_cancel(w.e, "f", "not wanted");
    if (!st && t_run_status(w.e, "w") == PL_RUN_WAITING) {
        cJSON *go = cJSON_CreateObject();
        cJSON_AddNumberToObject(go, "v", 7);
        st = pl_run_signal(&o, w.e, "w", "go", go);
        cJSON_Delete(go);
        pl_outcome_free(o);
        o = NULL;
    }
    if (st) {
        snprintf(why, wn, "finishing: %s", pl_errmsg());
        t_world_close(&w);
        return false;
    }
    bool ok = false;
    int sf = t_run_status(w.e, "f"), si = t_run_status(w.e, "i");
    if ((st = pl_run_continue(&o, w.e, "w", NULL)) ||
        o->status != PL_RUN_COMPLETED)
        snprintf(why, wn, "run w did not complete: %s",
                 st ? pl_errmsg() : pl_run_status_name(o->status));
    else if (cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "v")
                 ->valueint != 7)
        snprintf(why, wn, "run w completed with a wrong result");
    else if ((st = pl_run_verify(w.e, "w")))
        snprintf(why, wn, "run w does not verify: %s", pl_errmsg());
    else if (sf >= 0 && sf != PL_RUN_CANCELLED && sf != PL_RUN_FAILED)
        snprintf(why, wn, "the fork ended %s", pl_run_status_name(sf));
    else if (sf >= 0 && (st = pl_run_verify(w.e, "f")))
        snprintf(why, wn, "the fork does not verify: %s", pl_errmsg());
    else if (si >= 0 && (st = pl_run_verify(w.e, "i")))
        snprintf(why, wn, "the import does not verify: %s", pl_errmsg());
    else if (t_paid[0] < 1 || t_paid[0] > 2 || t_paid[1] < 1 || t_paid[1] > 2 ||
             t_paid[0] + t_paid[1] > 3)
        snprintf(why, wn, "payments made %d, %d times", t_paid[0], t_paid[1]);
    else
        ok = true;
    pl_outcome_free(o);
    t_world_close(&w);
    return ok;
}

Test(alloc_paths, every_allocation_of_signal_fork_cancel_import_fails,
     .timeout = 900)
{
    t_alloc_case c = {"alloc_paths", scenario, finish};
    t_alloc_sweep(&c);
}
