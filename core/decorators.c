/*
 * decorators.c -- loop(max_turns) and invoke_action.
 *
 * Both work only through the public decorator interface plus the engine's
 * call machinery, so user decorators can do everything these do.
 */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

static void steps_clear(pl_steps *l)
{
    for (size_t i = 0; i < l->n; i++)
        pl_step_free(l->v[i]);
    l->n = 0;
}

static bool has_calls(const pl_steps *l, size_t from)
{
    for (size_t i = from; i < l->n; i++)
        if (l->v[i]->type == PL_STEP_ACTION_CALL)
            return true;
    return false;
}

/*
 * Run the inner chain while its turn returned action_call steps.  The steps
 * of the last turn are the decorator's output; running out of turns adds a
 * recorded BudgetExceeded error, which becomes the call's result.
 */
static int loop_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                   const pl_decorator *self, pl_next *next)
{
    pl_steps turn = {.default_actor = out->default_actor};
    uint64_t max = self->arg;
    int st = PL_OK;
    bool calls = true;
    for (uint64_t i = 0; i < max && calls; i++) {
        steps_clear(&turn);
        if ((st = pl_next_call(next, ctx, action, &turn)))
            break;
        calls = has_calls(&turn, 0);
    }
    for (size_t i = 0; !st && i < turn.n; i++) {
        if ((st = pl__steps_push(out, turn.v[i])))
            break;
        turn.v[i] = NULL;
    }
    for (size_t i = 0; i < turn.n; i++)
        pl_step_free(turn.v[i]);
    free(turn.v);
    if (st || !calls)
        return st;

    char msg[160];
    if (max == 0)
        snprintf(msg, sizeof msg, "loop: max_turns is 0, so no turn ran");
    else
        snprintf(msg, sizeof msg, "loop: the policy still called actions "
                                  "after max_turns=%llu turns",
                 (unsigned long long)max);
    cJSON *err = cJSON_CreateObject();
    if (!err || !cJSON_AddTrueToObject(err, "error") ||
        !cJSON_AddStringToObject(err, "code", PL_ERR_BUDGET_EXCEEDED) ||
        !cJSON_AddStringToObject(err, "message", msg)) {
        cJSON_Delete(err);
        return pl__run_fail(ctx->run, PL_ENOMEM, "out of memory");
    }
    st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "loop", err);
    cJSON_Delete(err);
    return st;
}

pl_decorator pl_loop(unsigned max_turns)
{
    pl_decorator d = {loop_fn, "loop", max_turns, NULL};
    return d;
}

/*
 * Execute every action_call the inner chain returned, appending each
 * result to the ledger and to the output.
 */
static int invoke_action_fn(pl_ctx *ctx, const pl_action *action,
                            pl_steps *out, const pl_decorator *self,
                            pl_next *next)
{
    (void)self;
    size_t first = out->n;
    int st = pl_next_call(next, ctx, action, out);
    if (st)
        return st;
    size_t end = out->n;
    for (size_t i = first; i < end; i++) {
        const pl_step *call = out->v[i];
        if (call->type != PL_STEP_ACTION_CALL)
            continue;
        pl_step *result;
        if ((st = pl__call_step(ctx, call, action, &result)))
            return st;
        if ((st = pl__steps_push(out, result))) {
            pl_step_free(result);
            return pl__run_fail(ctx->run, st, "out of memory");
        }
    }
    return PL_OK;
}

pl_decorator pl_invoke_action(void)
{
    pl_decorator d = {invoke_action_fn, "invoke_action", 0, NULL};
    return d;
}
