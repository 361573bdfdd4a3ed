/*
 * callee.h -- the callee's side of a call (callee.c).
 */
#ifndef PL_CALLEE_H
#define PL_CALLEE_H

#include "internal.h"

/* Run the callee @p def of the action_call at @p call_seq of @p c in a new
 * invocation, through @p decos, and append its result.  @p t0 is when the
 * call began (pl__ev_clock()). */
PL__HIDDEN int pl__callee_execute(pl_ctx *c, uint32_t call_seq,
                                  bool call_replayed, const pl_action *a,
                                  const pl_policy_def *def,
                                  const pl_decorator *decos, size_t n_decos,
                                  uint64_t t0, pl_step **out) PL__MUST_CHECK;
/* Run the callee @p def of the action_call at @p call_seq of @p c in a new
 * invocation of run @p r (c's run, or a fan-out branch whose running
 * invocation is @p c), through @p decos, without appending its result: on
 * PL_OK *res holds the steps it returned (free them with
 * pl__callee_free_steps()) and *link what its action_result links.
 * @p adjacent: the result will be the step right after the call. */
PL__HIDDEN int pl__callee_run(pl__run *r, pl_ctx *c, uint32_t call_seq,
                              bool call_replayed, const pl_action *a,
                              const pl_policy_def *def,
                              const pl_decorator *decos, size_t n_decos,
                              uint64_t t0, bool adjacent, pl_steps *res,
                              pl__link *link) PL__MUST_CHECK;
PL__HIDDEN void pl__callee_free_steps(pl_steps *res);
/* Has the action_call at @p call_seq of @p c its result in the ledger
 * (appended or served in this execution)? */
PL__HIDDEN bool pl__callee_resolved(const pl_ctx *c, uint32_t call_seq);
/* The recorded action_result @p rec at the cursor answers the call: hand
 * it to the caller. */
PL__HIDDEN int pl__callee_serve(pl_ctx *c, const pl__rec *rec,
                                uint32_t call_seq, const char *callee,
                                uint64_t t0, pl_step **out) PL__MUST_CHECK;
/* End the call at @p call_seq with the result @p mp from @p callee: append
 * it, make it durable, report it, and hand a copy to the caller (when @p out
 * is not NULL). */
PL__HIDDEN int pl__callee_finish(pl_ctx *c, uint32_t call_seq,
                                 const char *callee, const uint8_t *mp,
                                 size_t mp_len, const pl__link *link,
                                 uint64_t t0, pl_step **out) PL__MUST_CHECK;
/* The same with the callee's last step @p last as the result (NULL: {}),
 * whose bytes the caller's copy shares when they are a large payload's. */
PL__HIDDEN int pl__callee_finish_step(pl_ctx *c, uint32_t call_seq,
                                      const char *callee, const pl_step *last,
                                      const pl__link *link, uint64_t t0,
                                      pl_step **out) PL__MUST_CHECK;
/* End the call with an error result {"error": true, "code": code,
 * "message": message} that the engine gives in the callee's name. */
PL__HIDDEN int pl__callee_finish_error(pl_ctx *c, uint32_t call_seq,
                                       const char *callee, const char *code,
                                       const char *message, uint64_t t0,
                                       pl_step **out) PL__MUST_CHECK;

#endif /* PL_CALLEE_H */
