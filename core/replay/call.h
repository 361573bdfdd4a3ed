/*
 * call.h -- the caller's side of a call, shared by call.c and fanout.c.
 */
#ifndef PL_CALL_H
#define PL_CALL_H

#include "internal.h"

/* What becomes of a call whose ledger records no result after it. */
typedef enum pl__fate {
    PL__FATE_EXECUTE,       /* run the callee */
    PL__FATE_NOT_FOUND,     /* a NotFound error result */
    PL__FATE_IN_DOUBT_FAIL, /* in flight at a crash: an InDoubt error */
    PL__FATE_IN_DOUBT_ASK   /* in flight at a crash: suspend to ask */
} pl__fate;

/* Whether a run may start a call now: PL_OK, the status that stopped the
 * run, or PL_EBUSY failing it when its worker is stopping (worker.c hands
 * the run back to the queue). */
PL__HIDDEN int pl__call_may_start(pl__run *r) PL__MUST_CHECK;
/* The call rule: PL_ERESULT (with a message naming the call, at @p call_seq
 * of @p c's ledger) for an error-as-data result @p res, else PL_OK.  NULL is
 * PL_OK. */
PL__HIDDEN int pl__call_status(const pl_ctx *c, uint32_t call_seq,
                               const char *policy, const pl_step *res);
/* A call's action @p in, read into @p a (of the current version): one of
 * pl_action's versions, a valid name, a payload, valid actions.  Otherwise
 * PL_EINVAL, failing the run. */
PL__HIDDEN int pl__call_check_action(pl__run *r, pl_ctx *c, const pl_action *in,
                                     pl_action *a) PL__MUST_CHECK;
/* A call's decorator list: one of pl_decorator's versions, each with a
 * function.  *decos becomes the list at the current version; *owned, when
 * not NULL, is a copy that the caller frees once the call is over. */
PL__HIDDEN int pl__call_check_decos(pl__run *r, pl_ctx *c, const char *policy,
                                    const pl_decorator **decos, size_t n_decos,
                                    void **owned) PL__MUST_CHECK;
/* Append the action_call of @p a (to @p def; NULL: not registered) at the
 * cursor of @p c: *call_seq is its place, *replayed whether the ledger
 * recorded it. */
PL__HIDDEN int pl__call_append(pl_ctx *c, const pl_action *a,
                               const pl_policy_def *def, uint32_t *call_seq,
                               bool *replayed) PL__MUST_CHECK;
/* The record ends after the call at @p call_seq: its fate. */
PL__HIDDEN int pl__call_fate(pl_ctx *c, uint32_t call_seq, bool call_replayed,
                             const pl_action *a, const pl_policy_def *def,
                             pl__fate *fate) PL__MUST_CHECK;
/* End the call as @p fate (not PL__FATE_EXECUTE) says, appending its result
 * (or the in-doubt suspension) at the cursor. */
PL__HIDDEN int pl__call_settle(pl_ctx *c, uint32_t call_seq, pl__fate fate,
                               const pl_action *a, const pl_policy_def *def,
                               const pl_decorator *decos, size_t n_decos,
                               uint64_t t0, pl_step **out) PL__MUST_CHECK;

#endif /* PL_CALL_H */
