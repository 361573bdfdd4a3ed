/*
 * root_call.c -- a tool that is not idempotent, run as a run's root,
 * calls itself.
 *
 * The in-doubt rule (docs/design.md §5) keys on a call's action_call,
 * made durable before its callee runs, in the caller's ledger.  A run's
 * root has no caller: every execution after a crash runs it again whole,
 * so a tool run as the root would do what it does (run a program, send
 * a request) a second time.  So such a tool, run as the root, calls
 * itself as a policy would, and its result is that call's:
 *
 *   root ledger "0"     the seed steps, action_call (policy: itself,
 *                       payload: the root's), then the engine's in-doubt
 *                       steps if any (suspend, resume), action_result
 *   the callee's        what the tool records, its result
 *
 * and a crash while the call is in flight gets the tool's in-doubt rule,
 * as any call does.  A run recorded before this rule (its root ledger the
 * tool's own steps) replays as it was recorded: the root calls itself
 * only when it has recorded nothing yet or recorded such a call first.
 */
#include "root_call.h"

#include <string.h>

/* Whether the root's record, after its seed, begins with a call of its
 * own policy, or holds nothing yet (not replaying). */
static int begins_with_call(bool *yes, pl_ctx *ctx, const pl_action *a)
{
    *yes = true;
    if (!pl_ctx_replaying(ctx))
        return PL_OK;
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, pl_ctx_engine(ctx), pl_ctx_run_id(ctx), "0");
    const pl_step *s = st ? NULL : pl_steps_at(l, pl_steps_count(a->seed));
    const char *callee = s && pl_step_type_of(s) == PL_STEP_ACTION_CALL
                             ? cJSON_GetStringValue(
                                   cJSON_GetObjectItemCaseSensitive(
                                       pl_step_payload(s), "policy"))
                             : NULL;
    *yes = !st && callee && strcmp(callee, pl_ctx_policy(ctx)) == 0;
    pl_steps_free(l);
    return st;
}

int pl__root_call(bool *called, pl_ctx *ctx, const pl_action *a, pl_steps *out)
{
    *called = false;
    if (strcmp(pl_ctx_path(ctx), "0") != 0)
        return PL_OK;
    bool yes;
    int st = begins_with_call(&yes, ctx, a);
    if (st || !yes)
        return st;
    *called = true;
    pl_action call = PL_ACTION_INIT;
    call.policy = pl_ctx_policy(ctx);
    call.payload = a->payload;
    pl_step *res = NULL;
    st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    if (st == PL_ERESULT) /* an error result is the run's result */
        st = PL_OK;
    if (st) {
        pl_step_free(res);
        return st;
    }
    return pl_steps_push(out, res);
}
