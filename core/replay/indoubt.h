/*
 * indoubt.h -- recovering an in-doubt call (indoubt.c).
 */
#ifndef PL_INDOUBT_H
#define PL_INDOUBT_H

#include "internal.h"

/* Is @p rec the engine's suspension of an in-doubt call? */
PL__HIDDEN bool pl__is_engine_suspend(const pl__rec *rec);
/* The call at @p call_seq of @p c is in doubt: suspend for a decision, or
 * act on the recorded one. */
PL__HIDDEN int pl__in_doubt(pl_ctx *c, uint32_t call_seq, const pl_action *a,
                            const pl_policy_def *def, const pl_decorator *decos,
                            size_t n_decos, uint64_t t0,
                            pl_step **out) PL__MUST_CHECK;

#endif /* PL_INDOUBT_H */
