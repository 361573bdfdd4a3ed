/*
 * claim.c -- claiming a run for an execution: its state record made
 * `running`, owned by this process (in the store's transaction, or, for a
 * delivery riding the run's next commit, in memory first: run.h, RIDES).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit.h"
#include "run.h"

void pl__run_set_owner(pl_engine *e, pl__run_state *st)
{
    st->owner_pid = e->pid;
    st->owner_start = e->pstart;
    snprintf(st->owner_host, sizeof st->owner_host, "%s", e->host);
    st->updated_us = st->heartbeat_us = pl__now_us();
}

int pl__claim_fn(pl__buf *state, pl__kvs *extra, void *user)
{
    pl__claim *c = user;
    if (c->expect && (c->expect->len != state->len ||
                      memcmp(c->expect->data, state->data, state->len) != 0))
        return pl__err(PL_EBUSY, "run '%s' changed since it was read", c->id);
    pl__run_state st;
    int rc = pl__run_state_decode(&st, c->id, state->data, state->len);
    if (rc)
        return pl__err(rc, "run '%s': %s", c->id, pl_errmsg());
    c->before = st.status;
    if (c->waiting && st.status != PL_RUN_WAITING) {
        rc = pl__err(PL_ESTATE, "run '%s' is %s, not waiting", c->id,
                     pl_run_status_name(st.status));
    } else if (c->resume) {
        if (st.status != PL_RUN_SUSPENDED)
            rc = pl__err(PL_ESTATE, "run '%s' is %s, not suspended", c->id,
                         pl_run_status_name(st.status));
        else if (!c->token || strcmp(c->token, st.token) != 0)
            rc = pl__err(PL_ETOKEN, "wrong resume token for run '%s'", c->id);
        for (size_t i = 0; !rc && i < c->steps->n; i++)
            rc = pl__kvs_add(extra, pl__kvs_key(c->steps, i),
                             c->steps->e[i].klen, pl__kvs_val(c->steps, i),
                             c->steps->e[i].vlen);
    } else if (st.status == PL_RUN_SUSPENDED) {
        rc = pl__err(PL_ESTATE,
                     "run '%s' is suspended at %s: resume it with "
                     "its token",
                     c->id, st.susp_path ? st.susp_path : "?");
    } else if (c->worker && st.status != PL_RUN_RUNNING &&
               st.status != PL_RUN_SUBMITTED && st.status != PL_RUN_WAITING) {
        rc = pl__err(PL_ESTATE, "run '%s' is %s: nothing to execute", c->id,
                     pl_run_status_name(st.status));
    } else if (st.status == PL_RUN_RUNNING && !c->leased &&
               pl__owner_alive(c->e, &st)) {
        rc = pl__err(PL_EBUSY,
                     "run '%s' is running in process %lld on %s "
                     "(last write %.1f s ago)",
                     c->id, (long long)st.owner_pid, st.owner_host,
                     (double)(pl__now_us() - st.heartbeat_us) / 1e6);
    }
    if (rc) {
        pl__run_state_clear(&st);
        return rc;
    }
    st.status = PL_RUN_RUNNING;
    st.attempts++;
    st.error = 0;
    st.has_head = false; /* rewritten when this execution ends */
    free(st.reason);
    st.reason = NULL;
    st.token[0] = '\0';
    free(st.susp_path);
    st.susp_path = NULL;
    free(st.prompt);
    st.prompt = NULL;
    st.prompt_len = 0;
    st.wait_until_ms = 0;
    free(st.wait_event);
    st.wait_event = NULL;
    free(st.result);
    st.result = NULL;
    st.result_len = 0;
    st.steps += c->steps ? c->steps->n : 0;
    pl__run_set_owner(c->e, &st);
    pl__buf_reset(state);
    rc = pl__run_state_encode(state, c->id, &st);
    pl__run_state_clear(c->out); /* a store may call this more than once */
    if (!rc)
        rc = pl__run_state_copy(c->out, &st);
    pl__run_state_clear(&st);
    return rc;
}

/* Claim run @p r, whose state as read is @p sb, in memory only, for the
 * delivery @p dv to ride its next commit (run.h, RIDES), into @p ride. */
int pl__run_ride_begin(pl__run *r, pl__delivery *dv, const pl__buf *sb,
                       pl__ride *ride)
{
    pl__claim cc = {.e = r->e,
                    .id = r->id,
                    .leased = true,
                    .waiting = true,
                    .out = &r->state};
    pl__kvs extra = {0};
    ride->dv = dv;
    int st = pl__buf_append(&ride->expect, sb->data, sb->len);
    if (!st)
        st = pl__inbox_encode(&ride->rec, r->id, dv->rec);
    pl__buf claimed = {0};
    if (!st)
        st = pl__buf_append(&claimed, sb->data, sb->len);
    if (!st)
        st = pl__claim_fn(&claimed, &extra, &cc);
    pl__buf_free(&claimed);
    pl__kvs_free(&extra);
    if (st)
        return st;
    r->ride = ride;
    r->state_written_us = 0; /* the claimed state goes with the commit */
    return PL_OK;
}

int pl__run_ride(pl__run *r)
{
    pl__ride *ride = r->ride;
    pl_engine *e = r->e;
    r->ride = NULL; /* one try */
    pl__run_state claimed = {0};
    pl__claim cc = {.e = e,
                    .id = r->id,
                    .leased = true,
                    .waiting = true,
                    .expect = &ride->expect,
                    .out = &claimed};
    /* a successor's creation is a commit's own (PostgreSQL): the delivery
     * takes the run, then that commit follows */
    bool alone = r->batch.succ_id != NULL;
    pl__inbox_take take = {e->worker,
                           e->lease_us,
                           pl__claim_fn,
                           &cc,
                           false,
                           0,
                           alone ? NULL : &r->batch,
                           ride->seq};
    ride->dv->tried = true;
    int st = ride->dv->fn(e, &take, ride->dv->user);
    pl__run_state_clear(&claimed);
    if (!st && take.taken) {
        r->batch.gen = take.gen;
        st = pl__engine_lease(e, r->num, take.gen, &r->lease_lost);
        return st || !alone ? st : pl__commit(e, &r->batch);
    }
    /* nothing of this execution was written: it stops, writing nothing */
    atomic_store(&r->lease_lost, true);
    return st ? st
              : pl__err(PL_EBUSY,
                        "run %s changed before the delivery could take it "
                        "(it goes on elsewhere)",
                        r->id);
}
