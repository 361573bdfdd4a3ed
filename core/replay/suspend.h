/*
 * suspend.h -- suspending a run (suspend.c).
 */
#ifndef PL_SUSPEND_H
#define PL_SUSPEND_H

#include "internal.h"

/* Stop the run, suspended at step @p seq of @p c's ledger (just appended),
 * with @p prompt (NULL: none) for whoever answers; failing that, fail it.
 * The run's stop status says which. */
PL__HIDDEN void pl__suspend_here(pl_ctx *c, uint32_t seq, const uint8_t *prompt,
                                 size_t prompt_len);

/* After the suspend step at @p seq: the recorded `resume` that answers it
 * in *rec (not yet consumed).  With none recorded yet, the run suspends
 * again (or, in check mode, fails with PL_ECHECK) and its stop status is
 * returned; another step there is PL_ENONDET. */
PL__HIDDEN int pl__suspend_answer(pl_ctx *c, uint32_t seq,
                                  const pl__rec **rec) PL__MUST_CHECK;

/*
 * The `resume` step that answers suspended run @p r with @p answer, in
 * @p out: it follows the suspend step in the suspended invocation's
 * ledger.  The token is checked here and again by the claim, inside the
 * write, so two resumers cannot both succeed (runner.c).
 */
PL__HIDDEN int pl__suspend_resume_step(pl__run *r, const char *token,
                                       const cJSON *answer,
                                       pl__kvs *out) PL__MUST_CHECK;

#endif /* PL_SUSPEND_H */
