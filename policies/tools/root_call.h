/*
 * root_call.h -- a tool that is not idempotent, run as a run's root,
 * calls itself (root_call.c): run_command and the MCP tools.
 */
#ifndef PL_ROOT_CALL_H
#define PL_ROOT_CALL_H

#include <stdbool.h>

#include "policyledger.h"
#include "util.h"

/*
 * When @p ctx is a run's root invocation (path "0") that has recorded
 * nothing yet, or recorded a call of its own policy first: call the
 * policy with @p a's payload, as a policy would, add the call's
 * action_result (an error result too) to @p out and set *called.  Else
 * leave *called false and do nothing: the policy runs as usual (not the
 * root; a run recorded before this rule).
 * @return PL_OK; the statuses of pl_run_ledger() and pl_ctx_call() that
 *         stop the run (not PL_ERESULT); PL_ENOMEM.
 */
PL__HIDDEN int pl__root_call(bool *called, pl_ctx *ctx, const pl_action *a,
                             pl_steps *out);

#endif
