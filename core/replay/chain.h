/*
 * chain.h -- the decorator chain and the root invocation (chain.c).
 */
#ifndef PL_CHAIN_H
#define PL_CHAIN_H

#include "internal.h"

/* Execute the root invocation; the returned steps go to @p out. */
PL__HIDDEN int pl__run_root(pl__run *r, const pl_policy_def *def,
                            const pl_action *root, bool replaying,
                            pl_steps *out);

#endif /* PL_CHAIN_H */
