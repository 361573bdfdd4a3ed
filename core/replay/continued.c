/*
 * continued.c -- a run continued as new (pl_ctx_continue_as_new()).
 *
 * The root policy names its successor's payload and returns; the runner
 * ends the run as it completes one, with the status PL_RUN_CONTINUED, and
 * the final commit also creates the successor (pl__batch.succ_id): its
 * info record (the same root policy, actions and code identity, the new
 * payload) and its first state, `submitted` under a lease nobody holds, so
 * that any worker takes it.  The two runs' state records name each other
 * ("succ", "pred": runrec.c).  One transaction: a crash leaves the run
 * going (it replays to the same point and tries again) or continued with
 * its successor queued, never one without the other.
 *
 * Ids: "<id>~1" for a run "<id>", and "<base>~<n+1>" for "<base>~<n>", so
 * a chain's links sort by their base and count up.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ctx.h"
#include "retention.h"
#include "run.h"

int pl__successor_id(char *out, const char *id)
{
    const char *tilde = strrchr(id, '~');
    size_t base = strlen(id);
    unsigned long long n = 0;
    if (tilde && tilde[1]) {
        char *end;
        n = strtoull(tilde + 1, &end, 10);
        if (!*end && tilde[1] != '0' && n < 1000000000000ull)
            base = (size_t)(tilde - id);
        else
            n = 0;
    }
    int w = snprintf(out, PL_MAX_RUN_ID + 1, "%.*s~%llu", (int)base, id, n + 1);
    if (w < 0 || w > PL_MAX_RUN_ID)
        return pl__err(PL_ELIMIT,
                       "pl_ctx_continue_as_new: run '%s' cannot be "
                       "continued: its successor's id would be longer than "
                       "%d bytes",
                       id, PL_MAX_RUN_ID);
    return PL_OK;
}

int pl__chain_next_deleted(pl_engine *e, const char *id, char *next)
{
    char was[PL__ERRMSG_MAX]; /* the caller's message, kept when not found */
    snprintf(was, sizeof was, "%s", pl_errmsg());
    pl__tomb t;
    int st = pl__tomb_load(e, id, &t);
    if (st == PL_OK && t.status == PL_RUN_CONTINUED)
        return pl__successor_id(next, id);
    return st && st != PL_ENOTFOUND ? st : pl__err(PL_ENOTFOUND, "%s", was);
}

int pl_ctx_continue_as_new(pl_ctx *ctx, const cJSON *payload)
{
    int st = pl__ctx_check(ctx, "pl_ctx_continue_as_new");
    if (st)
        return st;
    pl__run *r = ctx->run;
    if (ctx->depth || r->branch)
        return pl__err(PL_EINVAL,
                       "pl_ctx_continue_as_new: only the root policy may "
                       "continue its run as new ('%s' at %s is not it)",
                       ctx->def->name, ctx->path);
    if (!cJSON_IsObject(payload))
        return pl__err(PL_EINVAL, "pl_ctx_continue_as_new: the payload must "
                                  "be a JSON object");
    if (r->cont.len)
        return pl__err(PL_ESTATE,
                       "pl_ctx_continue_as_new: run '%s' is "
                       "continued as new already",
                       r->id);
    if ((st = pl__successor_id(r->succ_id, r->id)) ||
        (st = pl__payload_encode(&r->cont, payload, r->e->max_payload))) {
        pl__buf_reset(&r->cont);
        return st;
    }
    return PL_OK;
}

int pl__run_continued(pl__run *r)
{
    pl__buf info = {0};
    pl__run_info ri = {0};
    uint64_t num;
    /* the successor's info: the run's own, with the new payload */
    int st = pl__store_run_find(r->e->store, r->id, &num, &info);
    if (!st)
        st = pl__run_info_decode(&ri, r->id, info.data, info.len);
    pl__buf_free(&info);
    if (st)
        return st;
    uint8_t *payload = ri.payload;
    size_t payload_len = ri.payload_len;
    uint8_t *seed = ri.seed;
    ri.payload = r->cont.data;
    ri.payload_len = r->cont.len;
    ri.seed = NULL;
    ri.seed_len = 0;
    ri.created_us = pl__now_us();
    pl__run_state ss = {.status = PL_RUN_SUBMITTED,
                        .updated_us = ri.created_us,
                        .heartbeat_us = ri.created_us,
                        .pred = r->id};
    pl__buf_reset(&r->succ_info);
    pl__buf_reset(&r->succ_state);
    st = pl__run_info_encode(&r->succ_info, r->succ_id, &ri);
    if (!st)
        st = pl__run_state_encode(&r->succ_state, r->succ_id, &ss);
    ri.payload = payload;
    ri.payload_len = payload_len;
    ri.seed = seed;
    pl__run_info_clear(&ri);
    free(r->state.succ);
    if (!st && !(r->state.succ = pl__strdup(r->succ_id)))
        st = pl__err(PL_ENOMEM, "out of memory");
    if (st)
        return st;
    r->state.status = PL_RUN_CONTINUED;
    r->batch.succ_id = r->succ_id;
    r->batch.succ_info = &r->succ_info;
    r->batch.succ_state = &r->succ_state;
    return PL_OK;
}
