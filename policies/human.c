/*
 * human.c -- a human in the loop, as a policy.
 *
 * The policy suspends its run with its payload as the prompt; when the run
 * is resumed, the answer becomes its result.  Replay brings a resumed run
 * back to the same call, which then returns the recorded answer.
 */
#include "policyledger.h"

static int human(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                 void *user)
{
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, action->payload);
    if (st)
        return st; /* PL_ESUSPENDED: the run waits for the answer */
    st = pl_steps_add(out, PL_STEP_ACTION_RESULT, NULL, answer);
    cJSON_Delete(answer);
    return st;
}

int pl_registry_add_human(pl_registry *reg, const char *name)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = human;
    d.description = "Ask a human: the run waits until it is resumed with an "
                    "answer, which becomes the result.";
    d.code_version = "policyledger/human/1";
    return pl_registry_add(reg, &d);
}
