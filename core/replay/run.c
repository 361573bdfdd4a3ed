/*
 * run.c -- a run in execution (pl__run): created for one execution of a
 * run, failed at most once, freed with its invocations.
 *
 * The run is the state every layer below the runner shares: the pending
 * batch, the hasher, the invocation at each depth and the one running now
 * (r->cur), and r->stop.  r->stop is 0 while the execution goes on; the
 * first failure (or PL_ESUSPENDED) sets it and it never changes back, so
 * every layer that finds it set returns it without doing anything more.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "run.h"

int pl__run_new(pl_engine *e, const char *id, pl__run **out)
{
    pl__run *r = calloc(1, sizeof *r);
    if (!r)
        return pl__err(PL_ENOMEM, "out of memory starting a run");
    r->e = e;
    snprintf(r->id, sizeof r->id, "%s", id);
    int st = pl__hasher_new(&r->hasher);
    if (!st && (st = pl__genesis_hash(r->hasher, r->id, r->genesis)))
        pl__hasher_free(r->hasher);
    if (st) {
        free(r);
        return st;
    }
    *out = r;
    return PL_OK;
}

static void free_invs(pl__run *r)
{
    for (size_t i = 0; i < PL__ARRAY_LEN(r->inv); i++) {
        if (r->inv[i]) {
            pl__kvs_free(&r->inv[i]->ahead);
            pl__buf_free(&r->inv[i]->last_rec);
            pl_steps_clear(&r->inv[i]->view);
            free(r->inv[i]->view.v);
            free(r->inv[i]->resolved);
            free(r->inv[i]);
            r->inv[i] = NULL;
        }
    }
}

void pl__run_free(pl__run *r)
{
    if (!r)
        return;
    free_invs(r);
    pl__batch_free(&r->batch);
    free(r->share);
    pl__buf_free(&r->scratch);
    pl__buf_free(&r->prompt);
    pl__buf_free(&r->cont);
    pl__buf_free(&r->succ_info);
    pl__buf_free(&r->succ_state);
    pl__hasher_free(r->hasher);
    pl__run_state_clear(&r->state);
    free(r->reason);
    free(r->root_code);
    free(r->cancel_reason);
    free(r->wait_event);
    free(r);
}

int pl__run_fail(pl__run *r, int status, const char *fmt, ...)
{
    assert(status < 0); /* a failure, never PL_OK: stop 0 means going */
    if (r->stop)
        return r->stop; /* the first failure is the one recorded */
    va_list ap;
    va_start(ap, fmt);
    pl__verr(status, fmt, ap);
    va_end(ap);
    r->stop = status;
    r->reason = pl__errmsg_dup();
    return status;
}
