/*
 * indoubt.c -- a call that was in flight when its run stopped, recovered by
 * asking a human (docs/design.md §5).
 *
 * A non-idempotent call whose action_call is durable but whose result is not
 * may or may not have had its effect.  Its policy's rule says what recovery
 * does: run it again, fail it with InDoubt (call.c), or suspend the run
 * until someone decides (here).  The decision follows the action_call in
 * the caller's ledger:
 *
 *   seq    type           actor      payload
 *   k      action_call    caller     the call
 *   k+1    suspend        "engine"   {"prompt": {"message": ..., "in_doubt":
 *                                    true, "call": "<path>:<k>", "policy"}}
 *   k+2    resume         "human"    {"answer": {"decision": "rerun" |
 *                                    "fail" | "result", "result": {...}}}
 *   k+3    action_result  callee     "result": the answer's result;
 *                                    "fail" or no valid decision: an
 *                                    InDoubt error; "rerun": the rerun's
 *   k+3    suspend        "engine"   a rerun that was in flight at a crash
 *                                    too: asked again, as from k+1
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "callee.h"
#include "indoubt.h"
#include "diverge.h"
#include "invocation.h"
#include "run.h"
#include "suspend.h"

#define ENGINE_ACTOR "engine"

/* Record the engine's suspension of an in-doubt call. */
static int in_doubt_payload(pl__buf *b, pl_ctx *c, uint32_t call_seq,
                            const char *callee)
{
    char msg[1024];
    snprintf(msg, sizeof msg,
             "call %s:%u to '%s' was in flight when the run stopped; its "
             "effect is unknown. Resume with {\"decision\": \"rerun\"}, "
             "{\"decision\": \"fail\"}, or {\"decision\": \"result\", "
             "\"result\": {...}}.",
             c->path, call_seq, callee);
    char call_id[PL__PATH_MAX + 16];
    snprintf(call_id, sizeof call_id, "%s:%u", c->path, call_seq);
    cJSON *o = cJSON_CreateObject(), *p = cJSON_CreateObject();
    int st = PL_ENOMEM;
    if (o && p && cJSON_AddStringToObject(p, "message", msg) &&
        cJSON_AddBoolToObject(p, "in_doubt", 1) &&
        cJSON_AddStringToObject(p, "call", call_id) &&
        cJSON_AddStringToObject(p, "policy", callee) &&
        cJSON_AddItemToObject(o, "prompt", p)) {
        p = NULL;
        st = pl__payload_encode(b, o, 0);
    }
    cJSON_Delete(p);
    cJSON_Delete(o);
    return st;
}

bool pl__is_engine_suspend(const pl__rec *rec)
{
    return rec->type == PL_STEP_SUSPEND && pl__rec_actor_is(rec, ENGINE_ACTOR);
}

/*
 * The call at @p call_seq is in doubt: the engine suspends the run, and the
 * suspend step (and the human's answer) follow the action_call in the
 * caller's ledger.  An answer "rerun" executes the call again; if that run
 * is cut short by another crash, the call is in doubt again and the engine
 * asks again.
 */
int pl__in_doubt(pl_ctx *c, uint32_t call_seq, const pl_action *a,
                 const pl_policy_def *def, const pl_decorator *decos,
                 size_t n_decos, uint64_t t0, pl_step **out)
{
    pl__run *r = c->run;
    assert(call_seq < c->next_seq); /* the action_call is in the ledger */
    for (;;) {
        pl__buf b = {0};
        int st = in_doubt_payload(&b, c, call_seq, a->policy);
        if (st) {
            pl__buf_free(&b);
            return pl__run_fail(r, st, "out of memory");
        }
        uint32_t seq = c->next_seq;
        bool replayed;
        st = pl__inv_append(c, PL_STEP_SUSPEND, ENGINE_ACTOR, b.data, b.len,
                            NULL, NULL, &replayed, NULL);
        if (st || !replayed) {
            if (!st) {
                const uint8_t *v;
                size_t vn;
                if (pl__map_find(b.data, b.len, "prompt", &v, &vn))
                    pl__suspend_here(c, seq, v, vn);
                st = r->stop;
            }
            pl__buf_free(&b);
            return st;
        }
        pl__buf_free(&b);
        const pl__rec *rec;
        if ((st = pl__suspend_answer(c, seq, &rec)))
            return st;
        cJSON *answer = NULL;
        if ((st = pl__payload_decode_in(&answer, rec->payload, rec->payload_len,
                                        pl__step_wrapping(rec->type))))
            return pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
        if ((st = pl__inv_consume_checked(c))) {
            cJSON_Delete(answer);
            return st;
        }
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(answer, "answer");
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(ans, "decision");
        const char *d = cJSON_IsString(dec) ? dec->valuestring : "";
        if (strcmp(d, "result") == 0) {
            const cJSON *res = cJSON_GetObjectItemCaseSensitive(ans, "result");
            if (cJSON_IsObject(res)) {
                pl__buf rb = {0};
                st = pl__payload_encode(&rb, res, r->e->max_payload);
                if (!st)
                    st = pl__callee_finish(c, call_seq, a->policy, rb.data,
                                           rb.len, NULL, t0, out);
                else
                    st = pl__run_fail(r, st, "%s", pl_errmsg());
                pl__buf_free(&rb);
                cJSON_Delete(answer);
                return st;
            }
        }
        if (strcmp(d, "rerun") != 0) {
            bool fail = strcmp(d, "fail") == 0;
            cJSON_Delete(answer);
            return pl__callee_finish_error(
                c, call_seq, a->policy, PL_ERR_IN_DOUBT,
                fail ? "the operator declared the in-doubt call failed"
                     : "the answer to the in-doubt call had no valid "
                       "decision (rerun, fail, result)",
                t0, out);
        }
        cJSON_Delete(answer);
        /* rerun: what did the rerun leave behind?  (The answer was a recorded
         * step, so a record that ends here ended inside the rerun.) */
        if ((st = pl__inv_peek(c, &rec)))
            return st;
        if (rec && rec->type == PL_STEP_ACTION_RESULT)
            return pl__callee_serve(c, rec, call_seq, a->policy, t0, out);
        if (rec && pl__is_engine_suspend(rec))
            continue; /* the rerun was in doubt too */
        if (rec)
            pl__diverged(c, rec, PL_STEP_ACTION_RESULT, a->policy, NULL, 0,
                         NULL);
        if (rec)
            return pl__run_fail(r, PL_ENONDET,
                                "non-determinism in run %s: "
                                "after the rerun decision at "
                                "%s:%u the ledger records %s",
                                r->id, c->path, seq + 1,
                                pl_step_type_name(rec->type));
        if (r->check)
            return pl__run_fail(r, PL_ECHECK,
                                "check: run %s: the call at "
                                "%s:%u to '%s' has no recorded "
                                "result; replay would execute "
                                "it",
                                r->id, c->path, call_seq, a->policy);
        if (r->crashed_before)
            continue; /* the rerun was in flight at a crash: ask again */
        return pl__callee_execute(c, call_seq, true, a, def, decos, n_decos, t0,
                                  out);
    }
}
