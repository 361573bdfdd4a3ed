/*
 * fanout.c -- pl_ctx_call_all: several calls at once (docs/design.md §13).
 *
 * The caller's ledger, for n calls made at its step k:
 *
 *   seq          type           actor    payload
 *   k + i        action_call    caller   calls[i]            (i = 0..n-1)
 *   k + n + i    action_result  callee   the result of call i
 *
 * Only the caller's thread appends to the caller's ledger, in that order.
 * The results recorded are served first, in order; the calls after them
 * whose fate is to execute run as BRANCHES, each on one of a few threads
 * started here.  A branch is a pl__run of its own (r->branch): the same run
 * id and number, its own batch, hasher and invocations, its running
 * invocation a snapshot of the caller's context (which the caller's thread
 * goes on changing, so no branch reads the live one).  Its callee opens at
 * the caller's path and the call's seq, exactly where pl_ctx_call() would
 * open it, so its ledger is the same either way.  A branch commits its own
 * steps (never the run's state); the caller's thread then appends each
 * result as soon as every result before it is appended, and commits it.
 *
 * A branch that suspends commits its suspension step; the caller copies the
 * run's suspension from the first one in argument order, after every
 * branch has ended.  A branch that fails passes its failure on the same
 * way, ahead of any suspension.
 */
#include <assert.h>
#include <stdlib.h>

#include "call.h"
#include "callee.h"
#include "commit.h"
#include "ctx.h"
#include "indoubt.h"
#include "invocation.h"
#include "run.h"
#include "wait.h"

#define FANOUT_THREADS 16

typedef struct branch {
    const pl_action *a; /* &action */
    pl_action action;   /* the call's action at the current version */
    const pl_policy_def *def;
    const pl_decorator *decos;
    size_t n_decos;
    void *decos_owned; /* decos, when a copy of an older version's */
    uint32_t call_seq;
    bool call_replayed;
    pl__fate fate;
    uint64_t t0;
    /* set by the branch's thread, read once done */
    pl__run *run;
    int st;
    pl_steps res;
    pl__link link;
    bool done;
} branch;

typedef struct fanout {
    pl_ctx *caller; /* the snapshot a branch's callee opens under */
    pl__run *parent;
    branch *b;
    size_t n;
    size_t next; /* the next branch a thread takes */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a branch is done */
} fanout;

/* Run branch @p b on this thread: its callee, then a commit of its steps. */
static void run_branch(fanout *f, branch *b)
{
    pl__run *p = f->parent;
    pl__run *r = NULL;
    int st = pl__run_new(p->e, p->id, &r);
    if (st) {
        b->st = st;
        return;
    }
    r->num = p->num;
    r->branch = true;
    r->owner = p;
    /* its commits carry the run's fence: a branch of a worker that stalled
     * past its lease must write nothing once another has the run */
    r->batch.gen = p->batch.gen;
    r->batch.nokey_gen = p->batch.nokey_gen;
    r->crashed_before = p->crashed_before;
    r->cur = f->caller;
    b->run = r;
    const void *outer = pl__running_run(); /* the caller's, on its thread */
    pl__set_running_run(r);
    st = pl__callee_run(r, f->caller, b->call_seq, b->call_replayed, b->a,
                        b->def, b->decos, b->n_decos, b->t0, false, &b->res,
                        &b->link);
    pl__set_running_run(outer);
    if ((!st || st == PL_ESUSPENDED) && r->batch.steps.n) {
        /* its steps, or its suspension, are durable before the caller
         * goes on: the caller's result or the run's token names them */
        int rc = pl__run_write(r, false);
        if (rc) {
            if (!st)
                pl__callee_free_steps(&b->res);
            r->stop = 0; /* the commit's failure is the one to report */
            st = pl__run_fail(r, rc, "run %s: commit failed: %s", r->id,
                              pl_errmsg());
        }
    }
    b->st = st;
}

/* A branch thread: take branches until none is left. */
static void *branch_thread(void *arg)
{
    fanout *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->next < f->n && f->b[f->next].fate != PL__FATE_EXECUTE)
            f->next++;
        if (f->next >= f->n)
            break;
        branch *b = &f->b[f->next++];
        pthread_mutex_unlock(&f->mu);
        pl__err_clear();
        run_branch(f, b);
        pthread_mutex_lock(&f->mu);
        b->done = true;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void wait_branch(fanout *f, const branch *b)
{
    pthread_mutex_lock(&f->mu);
    while (!b->done)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

/* The branch's counts and steps become the run's. */
static void merge_branch(pl__run *r, branch *b)
{
    pl__run *br = b->run;
    if (!br)
        return;
    r->served += br->served;
    r->executed += br->executed;
    r->replayed += br->replayed;
    r->appended += br->appended;
    r->state.steps += br->state.steps;
    r->folded += br->folded; /* a folded callee: stored with its result */
    br->served = br->executed = br->replayed = br->appended = 0;
    br->state.steps = br->folded = 0;
}

/* The first failed branch fails the run; else the first suspended one
 * suspends it. */
static int pass_on_stop(pl__run *r, fanout *f, size_t from)
{
    for (size_t i = from; i < f->n; i++) {
        branch *b = &f->b[i];
        if (b->fate == PL__FATE_EXECUTE && b->st && b->st != PL_ESUSPENDED)
            return pl__run_fail(r, b->st, "%s",
                                b->run && b->run->reason ? b->run->reason
                                                         : pl_strerror(b->st));
    }
    for (size_t i = from; i < f->n; i++) {
        branch *b = &f->b[i];
        if (b->fate != PL__FATE_EXECUTE || b->st != PL_ESUSPENDED)
            continue;
        pl__run *br = b->run;
        memcpy(r->token, br->token, sizeof r->token);
        memcpy(r->susp_path, br->susp_path, sizeof r->susp_path);
        r->susp_seq = br->susp_seq;
        pl__buf_reset(&r->prompt);
        if (br->prompt.len &&
            pl__buf_append(&r->prompt, br->prompt.data, br->prompt.len))
            return pl__run_fail(r, PL_ENOMEM, "out of memory");
        r->stop = PL_ESUSPENDED;
        return pl__err(PL_ESUSPENDED, "run %s suspended at %s:%u", r->id,
                       r->susp_path, r->susp_seq);
    }
    return PL_OK;
}

/* Check the arguments, and read each call into its branch at the current
 * versions; PL_OK or the run's failure. */
static int check_specs(pl__run *r, pl_ctx *c, const pl_call_spec *in, size_t n,
                       branch *b)
{
    const void *current;
    void *owned;
    int st = pl__struct_array_in(&current, &owned, in, n, &pl__call_spec_layout,
                                 "pl_ctx_call_all");
    if (st)
        return pl__run_fail(r, st, "run %s: policy '%s' at %s: %s", r->id,
                            c->def->name, c->path, pl_errmsg());
    const pl_call_spec *calls = current;
    for (size_t i = 0; !st && i < n; i++) {
        b[i].a = &b[i].action;
        b[i].decos = calls[i].decorators;
        b[i].n_decos = calls[i].n_decorators;
        if (!(st = pl__call_check_action(r, c, calls[i].action, &b[i].action)))
            st = pl__call_check_decos(r, c, b[i].action.policy, &b[i].decos,
                                      b[i].n_decos, &b[i].decos_owned);
    }
    free(owned);
    return st;
}

/* Start up to FANOUT_THREADS threads for the branches to execute; with
 * none to be had, this thread runs them all. */
static size_t start_threads(fanout *f, pthread_t *th, size_t n_exec)
{
    size_t n_th = n_exec < FANOUT_THREADS ? n_exec : FANOUT_THREADS;
    size_t started = 0;
    while (started < n_th &&
           pthread_create(&th[started], NULL, branch_thread, f) == 0)
        started++;
    if (!started)
        branch_thread(f);
    return started;
}

/* Append the results from @p from on, in order, as they come. */
static int append_results(pl_ctx *c, fanout *f, size_t from, pl_step **out)
{
    pl__run *r = c->run;
    for (size_t i = from; i < f->n; i++) {
        branch *b = &f->b[i];
        pl_step **o = out ? &out[i] : NULL;
        int st;
        if (b->fate != PL__FATE_EXECUTE) {
            if (b->fate == PL__FATE_IN_DOUBT_ASK) /* asks after the others */
                for (size_t j = i + 1; j < f->n; j++)
                    if (f->b[j].fate == PL__FATE_EXECUTE)
                        wait_branch(f, &f->b[j]);
            if ((st = pl__call_settle(c, b->call_seq, b->fate, b->a, b->def,
                                      b->decos, b->n_decos, b->t0, o)))
                return st;
            continue;
        }
        wait_branch(f, b);
        if (b->st)
            return b->st; /* passed on once every branch has ended */
        merge_branch(r, b);
        st = pl__callee_finish_step(c, b->call_seq, b->def->name,
                                    b->res.n ? b->res.v[b->res.n - 1] : NULL,
                                    &b->link, b->t0, o);
        pl__callee_free_steps(&b->res);
        if (st)
            return st;
    }
    return PL_OK;
}

/* Serve the recorded results from the first; *from is the first call with
 * none. */
static int serve_recorded(pl_ctx *c, branch *b, size_t n, size_t *from,
                          pl_step **out)
{
    size_t i = 0;
    for (; i < n && b[i].call_replayed; i++) {
        const pl__rec *rec;
        int st = pl__inv_peek(c, &rec);
        if (st)
            return st;
        if (!rec)
            break;
        pl_step **o = out ? &out[i] : NULL;
        if (rec->type == PL_STEP_ACTION_RESULT)
            st = pl__callee_serve(c, rec, b[i].call_seq, b[i].a->policy,
                                  b[i].t0, o);
        else if (pl__is_engine_suspend(rec))
            st = pl__in_doubt(c, b[i].call_seq, b[i].a, b[i].def, b[i].decos,
                              b[i].n_decos, b[i].t0, o);
        else
            st = pl__inv_nondet_result(c, rec, b[i].a->policy, b[i].call_seq);
        if (st)
            return st;
    }
    *from = i;
    return PL_OK;
}

static int call_all(pl_step **out, pl_ctx *c, size_t n, fanout *f)
{
    pl__run *r = c->run;
    branch *b = f->b;
    int st;
    for (size_t i = 0; i < n; i++) {
        b[i].def = pl_registry_find(r->e->reg, b[i].a->policy);
        b[i].t0 = pl__ev_clock(r);
        if ((st = pl__call_append(c, b[i].a, b[i].def, &b[i].call_seq,
                                  &b[i].call_replayed)))
            return st;
    }
    size_t from;
    if ((st = serve_recorded(c, b, n, &from, out)) || from == n)
        return st;
    size_t n_exec = 0;
    for (size_t i = from; i < n; i++) {
        if ((st = pl__call_fate(c, b[i].call_seq, b[i].call_replayed, b[i].a,
                                b[i].def, &b[i].fate)))
            return st;
        n_exec += b[i].fate == PL__FATE_EXECUTE;
    }
    if (!n_exec)
        return append_results(c, f, from, out);
    /* every action_call is durable before any callee runs: a callee's
     * ledger never exists without the call that made it */
    if ((st = pl__run_commit(r)))
        return st;
    /* the branches open under a snapshot of the caller: its path, depth
     * and deadline, which the caller's thread does not change meanwhile */
    pl_ctx *snap = malloc(sizeof *snap);
    if (!snap)
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    *snap = *c;
    f->caller = snap;
    f->parent = r;
    f->next = from;
    pthread_t th[FANOUT_THREADS];
    size_t n_th = start_threads(f, th, n_exec);
    st = append_results(c, f, from, out);
    for (size_t i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    free(snap);
    if (st && !r->stop)
        st = pass_on_stop(r, f, from);
    return st;
}

int pl_ctx_call_all(pl_step **out, pl_ctx *c, const pl_call_spec *calls,
                    size_t n)
{
    if (out)
        for (size_t i = 0; i < n && i < PL_CALL_ALL_MAX; i++)
            out[i] = NULL;
    int st = pl__ctx_check(c, "pl_ctx_call_all");
    if (st)
        return st;
    if (!calls || !n)
        return pl__err(PL_EINVAL, "pl_ctx_call_all: %s",
                       calls ? "zero calls" : "calls is NULL");
    if (n > PL_CALL_ALL_MAX)
        return pl__err(PL_ELIMIT,
                       "pl_ctx_call_all: %zu calls; at most %d at once", n,
                       PL_CALL_ALL_MAX);
    pl__run *r = c->run;
    if ((st = pl__call_may_start(r)) || (st = pl__wait_boundary(c)))
        return st;
    /* a delivery riding the run's next commit (run.h, RIDES) takes the run
     * before any branch writes */
    if (r->ride && (st = pl__run_write(r, false)))
        return pl__run_fail(r, st, "run %s: commit failed: %s", r->id,
                            pl_errmsg());
    /* the results are read for PL_ERESULT even when the caller drops them */
    pl_step **res = out ? out : calloc(n, sizeof *res);
    fanout f = {.n = n};
    f.b = res ? calloc(n, sizeof *f.b) : NULL;
    if (!f.b) {
        if (res != out)
            free(res);
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    }
    if ((st = check_specs(r, c, calls, n, f.b)))
        goto done;
    if (pthread_mutex_init(&f.mu, NULL)) {
        st = pl__run_fail(r, PL_ENOMEM, "pl_ctx_call_all: no mutex");
        goto done;
    }
    if (pthread_cond_init(&f.cv, NULL)) {
        pthread_mutex_destroy(&f.mu);
        st = pl__run_fail(r, PL_ENOMEM, "pl_ctx_call_all: no condition");
        goto done;
    }
    st = call_all(res, c, n, &f);
    for (size_t i = 0; i < n; i++) {
        if (f.b[i].run) /* a callee folded into a result never appended */
            f.b[i].run->folded = 0;
        merge_branch(r, &f.b[i]);
        pl__callee_free_steps(&f.b[i].res);
        pl__run_free(f.b[i].run);
    }
    pthread_cond_destroy(&f.cv);
    pthread_mutex_destroy(&f.mu);
    /* the first error result; calls k..k+n-1 have results k+n..k+2n-1 */
    for (size_t i = 0; i < n && !st; i++)
        st = pl__call_status(c, pl_step_seq(res[i]) - (uint32_t)n,
                             f.b[i].action.policy, res[i]);
done:
    for (size_t i = 0; i < n; i++)
        free(f.b[i].decos_owned);
    free(f.b);
    for (size_t i = 0; i < n && (res != out || (st && st != PL_ERESULT)); i++) {
        pl_step_free(res[i]);
        res[i] = NULL;
    }
    if (res != out)
        free(res);
    return st;
}
