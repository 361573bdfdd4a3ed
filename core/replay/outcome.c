/*
 * outcome.c -- what a run's caller gets back: a new run's id, and the
 * outcome of an execution (freed here, its result read here).  The runner
 * (runner.c) fills outcomes in.
 */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "run.h"

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
 * run's prompt and token, a failed run's reason, or just the status of one
 * not ended.  Counters are 0: nothing ran.
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
    if (!st && rs->succ && !(o->successor = pl__strdup(rs->succ)))
        st = PL_ENOMEM;
    if (!st && rs->status == PL_RUN_FAILED) {
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
