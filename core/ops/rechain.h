/*
 * rechain.h -- copying a run's steps under another run number and id, their
 * hashes made anew, and its inbox under another id (rechain.c).  A forked
 * run and an imported one are written through it.
 */
#ifndef PL_RECHAIN_H
#define PL_RECHAIN_H

#include "internal.h"

typedef struct pl__rechain_child {
    uint32_t comp;
    uint8_t head[PL_HASH_LEN];
} pl__rechain_child;

/* The ledger open at one depth of the walk. */
typedef struct pl__rechain_level {
    bool open;
    uint32_t comps[PL_MAX_DEPTH];
    uint8_t prev[PL_HASH_LEN];   /* the new hash of its last step */
    pl__rechain_child *children; /* its callee ledgers, closed so far */
    size_t n_children, cap_children;
} pl__rechain_level;

typedef struct pl__rechain {
    pl__hasher *hasher;
    uint8_t genesis[PL_HASH_LEN]; /* the new run's */
    pl__rechain_level lv[PL_MAX_DEPTH + 1];
    uint64_t steps; /* steps copied, folded callees counted */
} pl__rechain;

/* Start a walk for the run @p new_id.  Free it with pl__rechain_free(),
 * also after a failure. */
PL__HIDDEN int pl__rechain_init(pl__rechain *w,
                                const char *new_id) PL__MUST_CHECK;
PL__HIDDEN void pl__rechain_free(pl__rechain *w);

/*
 * Append the step (@p key, @p val) of the old run to @p out under run number
 * @p num, its previous-step hash and its action_result link made anew (see
 * rechain.c).  Steps are given in key order.  The new step's hash goes to
 * @p hash when it is not NULL.
 */
PL__HIDDEN int pl__rechain_step(pl__rechain *w, uint64_t num,
                                const uint8_t *key, size_t klen,
                                const uint8_t *val, size_t vlen, pl__kvs *out,
                                uint8_t hash[PL_HASH_LEN]) PL__MUST_CHECK;

/* The new hash of the last step of the root ledger (the run's head), or
 * false when none was copied. */
PL__HIDDEN bool pl__rechain_head(const pl__rechain *w,
                                 uint8_t out[PL_HASH_LEN]);

/*
 * The inbox records @p in of run @p from_id (keys their seqs, values the
 * records, as pl__store_inbox_read() gives them), those past seq @p after,
 * bound to run @p to_id, appended to @p out under the same seqs.  *last
 * (when @p last is not NULL) is the last seq appended.  PL_ECORRUPT for a
 * key that is no seq or a record that does not decode.
 */
PL__HIDDEN int pl__rechain_inbox(const pl__kvs *in, const char *from_id,
                                 const char *to_id, uint64_t after,
                                 pl__kvs *out, uint64_t *last) PL__MUST_CHECK;

#endif /* PL_RECHAIN_H */
