/*
 * decorators.c -- loop(max_turns) and invoke_action (with decorators for
 * each call it makes, or without); the real clock and sleep that the
 * decorators that wait share.
 *
 * Both are written with the public API alone (include/policyledger.h), as
 * any user's decorator would be: what these do, a user can do.  (Only the
 * check of a decorator list's version is the library's own, util.h's.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <policyledger.h>

#include "ext.h"

/* Does the turn @p l want another: an action_call step, or a text step
 * asking for one ({"again": true}, an LLM policy's re-prompt)?  A model's
 * long answer is never decoded to tell. */
static bool has_calls(const pl_steps *l)
{
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_ACTION_CALL ||
            (pl_step_type_of(s) == PL_STEP_TEXT && pl_step_flag(s, "again")))
            return true;
    }
    return false;
}

/*
 * Run the inner chain while its turn returned action_call steps (or asked
 * for another turn).  The steps
 * of the last turn are the decorator's output; running out of turns adds a
 * recorded BudgetExceeded error, which becomes the call's result.
 */
static int loop_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                   const pl_decorator *self, pl_next *next)
{
    pl_steps *turn = NULL;
    uint64_t max = self->arg;
    int st = pl_steps_new(&turn);
    bool calls = true;
    for (uint64_t i = 0; !st && i < max && calls; i++) {
        pl_steps_clear(turn);
        if (!(st = pl_next_call(next, ctx, action, turn)))
            calls = has_calls(turn);
    }
    if (!st)
        st = pl_steps_move(out, turn);
    pl_steps_free(turn);
    if (st || !calls)
        return st;

    char msg[160];
    if (max == 0)
        snprintf(msg, sizeof msg, "loop: max_turns is 0, so no turn ran");
    else
        snprintf(msg, sizeof msg,
                 "loop: the policy still called actions (or asked "
                 "for another turn) after max_turns=%llu turns",
                 (unsigned long long)max);
    cJSON *err = cJSON_CreateObject();
    if (!err || !cJSON_AddTrueToObject(err, "error") ||
        !cJSON_AddStringToObject(err, "code", PL_ERR_BUDGET_EXCEEDED) ||
        !cJSON_AddStringToObject(err, "message", msg)) {
        cJSON_Delete(err);
        return PL_ENOMEM;
    }
    st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "loop", err);
    cJSON_Delete(err);
    return st;
}

int pl_decorator_loop(pl_decorator *out, unsigned max_turns)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_loop: out is NULL");
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = loop_fn;
    d.name = "loop";
    d.arg = max_turns;
    *out = d;
    return PL_OK;
}

/*
 * Execute every action_call the inner chain returned, appending each
 * result to the ledger and to the output.
 */
static int invoke_action_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                            const pl_decorator *self, pl_next *next)
{
    /* pl_decorator_invoke_action_with(): the per-call list and its length */
    const pl_decorator *per_call = self->user;
    size_t n_per_call = per_call ? (size_t)self->arg : 0;
    pl_steps *turn = NULL, *results = NULL;
    int st = pl_steps_new(&turn);
    if (!st)
        st = pl_steps_new(&results);
    if (!st)
        st = pl_next_call(next, ctx, action, turn);
    for (size_t i = 0; !st && i < pl_steps_count(turn); i++) {
        const pl_step *call = pl_steps_at(turn, i);
        if (pl_step_type_of(call) != PL_STEP_ACTION_CALL)
            continue;
        pl_step *result = NULL;
        st = pl_ctx_call_step_with(&result, ctx, call, action, per_call,
                                   n_per_call);
        if (!st || st == PL_ERESULT) /* an error result is the turn's data */
            st = pl_steps_push(results, result);
    }
    if (!st)
        st = pl_steps_move(out, turn);
    if (!st)
        st = pl_steps_move(out, results);
    pl_steps_free(turn);
    pl_steps_free(results);
    return st;
}

int pl_decorator_invoke_action(pl_decorator *out)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_invoke_action: out is NULL");
    return pl_decorator_invoke_action_with(out, NULL, 0);
}

int pl__ext_decorators_ok(const pl_decorator *list, size_t n, const char *fn)
{
    PL__EXT_ONE_VERSION(PL_DECORATOR);
    if (n && !list)
        return pl_errorf(PL_EINVAL, "%s: %zu decorators but the list is NULL",
                         fn, n);
    for (size_t i = 0; i < n; i++) {
        if (list[i].version != list[0].version)
            return pl_errorf(PL_EINVAL,
                             "%s: pl_decorator %zu has version %u, the first "
                             "has %u: an array's elements are of one version",
                             fn, i, list[i].version, list[0].version);
        if (PL__EXT_VERSION_OK(list[i].version, pl_decorator, PL_DECORATOR, fn))
            return PL_EINVAL;
        if (!list[i].fn)
            return pl_errorf(PL_EINVAL, "%s: decorator %zu has no function", fn,
                             i);
    }
    return PL_OK;
}

int pl_decorator_invoke_action_with(pl_decorator *out,
                                    const pl_decorator *per_call, size_t n)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_invoke_action_with: out is "
                                    "NULL");
    int st = pl__ext_decorators_ok(per_call, n,
                                   "pl_decorator_invoke_action_with");
    if (st)
        return st;
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = invoke_action_fn;
    d.name = "invoke_action";
    d.user = n ? (void *)per_call : NULL;
    d.arg = n;
    *out = d;
    return PL_OK;
}

int64_t pl__ext_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int pl__ext_sleep(int64_t ms, void *user)
{
    (void)user;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    return PL_OK;
}
