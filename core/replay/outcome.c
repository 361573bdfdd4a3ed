/*
 * outcome.c -- what a run's caller gets back: a new run's id, and the
 * outcome of an execution (freed here, its result read here).  The runner
 * (runner.c) fills outcomes in; the ends of a run cancelled or parked at a
 * wait (wait.c) are recorded here.
 */
#include <stdio.h>
#include <stdlib.h>

#include "commit.h"
#include "internal.h"
#include "run.h"
#include "wait.h"

/* ---- run ids -------------------------------------------------------------------- */

/* A UUIDv7: 48 bits of Unix milliseconds, then random bits. */
int pl__new_run_id(char out[PL_UUID_LEN + 1])
{
    uint8_t b[16];
    int st = pl__random(b, sizeof b);
    if (st)
        return st;
    uint64_t ms = (uint64_t)(pl__now_us() / 1000);
    for (int i = 0; i < 6; i++)
        b[i] = (uint8_t)(ms >> (40 - 8 * i));
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x70);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    char hex[33];
    pl__hex(hex, b, sizeof b);
    snprintf(out, PL_UUID_LEN + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8,
             hex + 12, hex + 16, hex + 20);
    return PL_OK;
}

/* ---- outcomes ------------------------------------------------------------------------ */

void pl_outcome_free(pl_outcome *o)
{
    if (!o)
        return;
    free(o->run_id);
    pl_steps_free(o->steps);
    free(o->resume_token);
    cJSON_Delete(o->prompt);
    free(o->suspended_path);
    free(o->reason);
    free(o->successor);
    free(o->wait_event);
    free(o);
}

const cJSON *pl_outcome_result(const pl_outcome *o)
{
    size_t n = o && (o->status == PL_RUN_COMPLETED ||
                     o->status == PL_RUN_CONTINUED)
                   ? pl_steps_count(o->steps)
                   : 0;
    const cJSON *p = n ? pl_step_payload(pl_steps_at(o->steps, n - 1)) : NULL;
    return p ? p : pl_json_empty();
}

/* A new outcome of run @p r with @p status (a completed run continued as
 * new is continued); NULL when out of memory. */
pl_outcome *pl__outcome_new(pl__run *r, pl_run_status status)
{
    pl_outcome *o = calloc(1, sizeof *o);
    if (status == PL_RUN_COMPLETED && r->cont.len)
        status = PL_RUN_CONTINUED;
    if (!o || !(o->run_id = pl__strdup(r->id)) ||
        (status == PL_RUN_CONTINUED &&
         !(o->successor = pl__strdup(r->succ_id)))) {
        pl_outcome_free(o);
        pl__err(PL_ENOMEM, "out of memory");
        return NULL;
    }
    o->status = status;
    o->calls_served = r->served;
    o->calls_executed = r->executed;
    o->steps_replayed = r->replayed;
    o->steps_appended = r->appended;
    return o;
}

/*
 * The outcome a run's state record holds, executing nothing: a suspended
 * run's prompt and token, a waiting run's wait, a failed or cancelled
 * run's reason, a successor, or just the status of one not ended.
 * Counters are 0: nothing ran.
 */
int pl__recorded_outcome(pl_outcome **out, const char *id,
                         const pl__run_state *rs)
{
    pl_outcome *o = calloc(1, sizeof *o);
    int st = o && (o->run_id = pl__strdup(id)) ? PL_OK : PL_ENOMEM;
    if (o)
        o->status = rs->status;
    if (!st && rs->status == PL_RUN_SUSPENDED) {
        if (!(o->resume_token = pl__strdup(rs->token)) ||
            !(o->suspended_path = pl__strdup(rs->susp_path ? rs->susp_path
                                                           : "")))
            st = PL_ENOMEM;
        else if (rs->prompt_len)
            st = pl__payload_decode(&o->prompt, rs->prompt, rs->prompt_len);
    }
    if (!st && rs->status == PL_RUN_WAITING) { /* as pl__end_waiting() */
        o->wake_ms = rs->wait_until_ms;
        if (!(o->suspended_path = pl__strdup(rs->susp_path ? rs->susp_path
                                                           : "")) ||
            (rs->wait_event && !(o->wait_event = pl__strdup(rs->wait_event))))
            st = PL_ENOMEM;
    }
    if (!st && rs->succ && !(o->successor = pl__strdup(rs->succ)))
        st = PL_ENOMEM;
    if (!st && (rs->status == PL_RUN_FAILED ||
                rs->status == PL_RUN_CANCELLED)) { /* pl__end_cancelled() */
        o->error = rs->error;
        if (!(o->reason = pl__strdup(rs->reason ? rs->reason
                                                : pl_strerror(rs->error))))
            st = PL_ENOMEM;
    }
    if (st) {
        pl_outcome_free(o);
        return st == PL_ENOMEM ? pl__err(st, "out of memory") : st;
    }
    *out = o;
    return PL_OK;
}

/* ---- the end of a run cancelled or parked (runner.c) ---------------------- */

/* The run's root returned after its cancellation was seen: it ends
 * cancelled, with the steps it made since (compensating calls). */
int pl__end_cancelled(pl__run *r, const pl_policy_def *def, uint64_t t0,
                      pl_outcome **out)
{
    pl__run_state *rs = &r->state;
    const char *why = r->cancel_reason ? r->cancel_reason : "";
    if (!r->check) { /* a check replay writes nothing */
        rs->status = PL_RUN_CANCELLED;
        rs->error = PL_ECANCELLED;
        free(rs->reason);
        if (!(rs->reason = pl__strdup(why)))
            return pl__err(PL_ENOMEM, "out of memory");
        int st = pl__run_head(r, rs->head);
        if (st)
            return st;
        rs->has_head = true;
        if ((st = pl__run_write(r, true)))
            return st;
        pl__emit(r, PL_EVENT_RUN_FAILED, "0", 0, def->name, 0, PL_ECANCELLED,
                 pl__ev_clock(r) - t0, why);
    }
    pl_outcome *o = pl__outcome_new(r, PL_RUN_CANCELLED);
    if (!o || !(o->reason = pl__strdup(why))) {
        pl_outcome_free(o);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    o->error = PL_ECANCELLED;
    *out = o;
    return PL_OK;
}

/* The run parked at a wait (wait.c): record it waiting, with its timer. */
int pl__end_waiting(pl__run *r, const pl_policy_def *def, uint64_t t0,
                    pl_outcome **out)
{
    pl__run_state *rs = &r->state;
    rs->status = PL_RUN_WAITING;
    int st = pl__run_head(r, rs->head);
    if (st)
        return st;
    rs->has_head = true;
    free(rs->susp_path);
    free(rs->wait_event);
    rs->wait_event = NULL;
    rs->susp_path = pl__strdup(r->susp_path);
    rs->susp_seq = r->susp_seq;
    rs->wait_until_ms = r->wait_until_ms;
    if (!rs->susp_path ||
        (r->wait_event && !(rs->wait_event = pl__strdup(r->wait_event))))
        return pl__err(PL_ENOMEM, "out of memory");
    /* woken at its time, or at its deadline to end */
    int64_t due = r->wait_until_ms;
    if (r->deadline_ms && (!due || r->deadline_ms < due))
        due = r->deadline_ms;
    r->batch.timer_us = due > 0 ? due * 1000 : 0;
    r->batch.timer_id = r->id;
    r->batch.park = true;
    st = pl__run_write(r, true);
    r->batch.timer_us = 0;
    r->batch.park = false;
    if (st)
        return st;
    pl__emit(r, PL_EVENT_RUN_SUSPENDED, r->susp_path, r->susp_seq, def->name,
             PL_STEP_WAIT, 0, pl__ev_clock(r) - t0, r->wait_event);
    pl_outcome *o = pl__outcome_new(r, PL_RUN_WAITING);
    if (!o || !(o->suspended_path = pl__strdup(r->susp_path)) ||
        (r->wait_event && !(o->wait_event = pl__strdup(r->wait_event)))) {
        pl_outcome_free(o);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    o->wake_ms = r->wait_until_ms;
    *out = o;
    return PL_OK;
}
