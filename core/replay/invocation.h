/*
 * invocation.h -- an invocation's ledger and its cursor (invocation.c).
 */
#ifndef PL_INVOCATION_H
#define PL_INVOCATION_H

#include "internal.h"

/* One read of a ledger takes at most this many steps, or bytes. */
#define PL__AHEAD_N 64
#define PL__AHEAD_BYTES ((size_t)256 << 10)

/* Open the invocation that the action_call at @p call_seq of @p parent
 * (NULL: the root) makes, and make it the running one (r->cur). */
PL__HIDDEN int pl__inv_open(pl__run *r, pl_ctx *parent, uint32_t call_seq,
                            bool replaying, const pl_policy_def *def,
                            pl_ctx **out) PL__MUST_CHECK;
/* The recorded step at the cursor, or NULL past the recorded end. */
PL__HIDDEN int pl__inv_peek(pl_ctx *c, const pl__rec **out) PL__MUST_CHECK;
/* Consume the peeked step, whose payload goes to policy code uncompared. */
PL__HIDDEN int pl__inv_consume_checked(pl_ctx *c) PL__MUST_CHECK;
/* Consume the peeked step, which matched the one appended. */
PL__HIDDEN void pl__inv_matched(pl_ctx *c, const char *actor, const char *code);
/* Append a step: compare it with the recorded one, or write it. */
PL__HIDDEN int pl__inv_append(pl_ctx *c, pl_step_type type, const char *actor,
                              const uint8_t *mp, size_t mp_len,
                              const char *code, const pl__link *link,
                              bool *replayed, int64_t *time_us) PL__MUST_CHECK;
/* Writes a step's payload, a msgpack map, at the end of @p out. */
typedef int (*pl__payload_writer)(pl__buf *out, void *user);
/* Append a step past the recorded end, its payload written by @p w straight
 * into its record in the batch (no copy of it made first).  A failure of
 * @p w is returned as it is, the run not failed by it. */
PL__HIDDEN int pl__inv_append_written(pl_ctx *c, pl_step_type type,
                                      const char *actor, pl__payload_writer w,
                                      void *user) PL__MUST_CHECK;
/* Append the seed steps that open a new ledger. */
PL__HIDDEN int pl__inv_append_seed(pl_ctx *c,
                                   const pl_steps *seed) PL__MUST_CHECK;
/* The recorded step @p rec stands where the result of the action_call at
 * @p call_seq to @p callee belongs: non-determinism, failing the run with
 * the message every divergence has (both steps, the code behind each). */
PL__HIDDEN int pl__inv_nondet_result(pl_ctx *c, const pl__rec *rec,
                                     const char *callee,
                                     uint32_t call_seq) PL__MUST_CHECK;
/* The invocation ends: it must have used up its recorded steps. */
PL__HIDDEN int pl__inv_finish(pl_ctx *c) PL__MUST_CHECK;
/* The hash of the invocation's last step, once it is live. */
PL__HIDDEN int pl__inv_head(pl_ctx *c, uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;

/* Was the record @p rec appended by @p actor? */
static inline bool pl__rec_actor_is(const pl__rec *rec, const char *actor)
{
    size_t n = strlen(actor);
    return rec->actor_len == n && memcmp(rec->actor, actor, n) == 0;
}

#endif /* PL_INVOCATION_H */
