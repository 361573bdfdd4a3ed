/*
 * keys.c -- step keys: where each step of a run sits in the store.
 *
 * STEP KEY
 *
 *   | bytes     | field                                                  |
 *   |-----------|--------------------------------------------------------|
 *   | 0..7      | run number, u64 big-endian (the store assigns it when  |
 *   |           | the run is created; see store.h)                       |
 *   | 8..       | the invocation path's components after its root "0",   |
 *   |           | u32 big-endian each: none for the root ledger, c for   |
 *   |           | the ledger 0.c, c and t for 0.c.t, ... (at most        |
 *   |           | PL_MAX_DEPTH)                                          |
 *   | last 4    | seq: the step's position in its ledger, u32 big-endian |
 *
 *   A key is 12 + 4 * depth bytes, at most PL__KEY_MAX.  A ledger's prefix
 *   is its key without the seq: the steps of one ledger are the keys of its
 *   prefix and one more component.
 *
 *   A step's key is its position in the run's tree.  The callee of the
 *   action_call at root step c has the ledger 0.c, whose steps run|c|t sort
 *   right after run|c (the action_call) and before run|c+1 (its
 *   action_result).  So a whole call -- its action_call, everything the
 *   callee did, and its action_result -- is one contiguous key range; a
 *   run's keys, in order, are its execution tree in order; a run's writes
 *   append at one place; and a ledger is read by hopping over the subtrees
 *   of its calls.
 *
 *   The layout is the store's format 1 (its "format" meta record; the
 *   PostgreSQL store's format 2 has it too, and only keeps two steps of a
 *   commit in a row: ledger/pg/pg_read.c, PAIRS); a change to it is a new
 *   store format.
 */
#include "keys.h"

size_t pl__ledger_prefix(uint8_t *out, uint64_t run, const uint32_t *comps,
                         unsigned depth)
{
    assert(depth <= PL_MAX_DEPTH + 1 && (depth == 0 || comps));
    pl__put_be64(out, run);
    for (unsigned i = 0; i < depth; i++)
        pl__put_be32(out + 8 + 4 * i, comps[i]);
    return 8 + 4 * (size_t)depth;
}

bool pl__key_parse(const uint8_t *key, size_t len, uint64_t *run,
                   uint32_t *comps, unsigned *depth, uint32_t *seq)
{
    if (len < 12 || (len - 8) % 4 != 0 || len > PL__KEY_MAX)
        return false;
    *run = pl__get_be64(key);
    unsigned d = (unsigned)((len - 8) / 4 - 1);
    assert(d <= PL_MAX_DEPTH + 1); /* len <= PL__KEY_MAX */
    for (unsigned i = 0; i < d; i++)
        comps[i] = pl__get_be32(key + 8 + 4 * i);
    *depth = d;
    *seq = pl__get_be32(key + len - 4);
    return true;
}
