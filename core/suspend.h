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

#endif /* PL_SUSPEND_H */
