/*
 * keys.h -- a step's key: its run, its invocation path and its seq, laid
 * out so that a run reads back in execution order.  The layout is written
 * down at the top of keys.c.  It is the same whatever the store's backend.
 */
#ifndef PL_KEYS_H
#define PL_KEYS_H

#include "util.h"

/* The longest ledger prefix (run and path) and the longest step key. */
#define PL__PREFIX_MAX (8 + 4 * PL_MAX_DEPTH)
#define PL__KEY_MAX (PL__PREFIX_MAX + 4)

/*
 * Write the prefix of the ledger at path comps[0..depth) of run @p run (the
 * root ledger: depth 0) to @p out, which has PL__PREFIX_MAX bytes of room.
 * Returns its length; a step's key is the prefix and its seq.
 */
PL__HIDDEN size_t pl__ledger_prefix(uint8_t *out, uint64_t run,
                                    const uint32_t *comps, unsigned depth);

/*
 * Split a step key.  Returns false unless it is well-formed; on success the
 * path components go to comps[0..*depth).
 */
PL__HIDDEN bool pl__key_parse(const uint8_t *key, size_t len, uint64_t *run,
                              uint32_t *comps, unsigned *depth, uint32_t *seq);

#endif /* PL_KEYS_H */
