/*
 * diverge.h -- describing a replay that differs from its ledger (diverge.c).
 */
#ifndef PL_DIVERGE_H
#define PL_DIVERGE_H

#include "internal.h"

/*
 * The recorded step @p rec at the cursor of @p c and the step replay
 * produced there differ: emit PL_EVENT_DIVERGED with both (a listener is
 * told before the run fails with PL_ENONDET).  @p type 0 means the policy
 * appended nothing there; a NULL @p mp that the engine expected a step of
 * its own.  @p code is the new step's code identity (an action_call's).
 */
PL__HIDDEN void pl__diverged(pl_ctx *c, const pl__rec *rec, pl_step_type type,
                             const char *actor, const uint8_t *mp,
                             size_t mp_len, const char *code);

/* As pl__diverged(), the new step described by @p now_text (JSON), the
 * difference by @p detail (the event's detail). */
PL__HIDDEN void pl__diverged_text(pl_ctx *c, const pl__rec *rec,
                                  pl_step_type type, const char *actor,
                                  const char *now_text, const char *detail);

/* The code identity behind the recorded step @p rec of invocation @p c:
 * an action_call's own (its callee's), else its invocation's, as the
 * events give it; NULL when none is known.  Caller frees. */
PL__HIDDEN char *pl__recorded_code(pl_ctx *c, const pl__rec *rec);

/* The recorded call @p rec at the cursor replays the same under the code
 * @p code: emit PL_EVENT_CODE_CHANGED when the recorded code differs. */
PL__HIDDEN void pl__code_changed(pl_ctx *c, const pl__rec *rec,
                                 const char *actor, const char *code);

#endif /* PL_DIVERGE_H */
