/*
 * flowrec.h -- flow control's stored records: a queued run's flow (its
 * place in the queue and its concurrency key) and a rate limit's budget.
 * Their fields are written down at the top of flowrec.c.
 */
#ifndef PL_FLOWREC_H
#define PL_FLOWREC_H

#include "util.h"

/* The longest concurrency key and rate-limit resource name, in bytes. */
#define PL__FLOW_KEY_MAX PL_MAX_FLOW_KEY

/* A run's flow: where it sits in the queue and the key it counts under. */
typedef struct pl__flow {
    int64_t rank_us; /* the queue's order: its submission time (Unix us)
                        less its priority's worth (PL_PRIORITY_STEP_MS) */
    int32_t priority;
    uint32_t limit; /* with a key: at most this many live at once */
    char key[PL__FLOW_KEY_MAX + 1]; /* "" = none */
} pl__flow;

/* The rank of a run whose lease is made at @p now_us with @p priority. */
static inline int64_t pl__flow_rank(int64_t now_us, int32_t priority)
{
    return now_us - (int64_t)priority * PL_PRIORITY_STEP_MS * 1000;
}

/* A rate limit's budget: calls admitted in its current fixed window. */
typedef struct pl__rate_budget {
    int64_t window_ms; /* the window's length */
    uint32_t limit;    /* calls admitted per window */
    int64_t start_ms;  /* the current window's start (Unix ms, store clock) */
    uint32_t count;    /* calls admitted in it so far */
} pl__rate_budget;

/*
 * Both records are checksummed and bound to what they describe (the run's
 * number; the resource's name): a changed byte, or a record moved to
 * another key, is PL_ECORRUPT with a message naming it.
 */
PL__HIDDEN int pl__flow_encode(pl__buf *out, uint64_t run,
                               const pl__flow *f) PL__MUST_CHECK;
PL__HIDDEN int pl__flow_decode(pl__flow *out, uint64_t run, const uint8_t *data,
                               size_t len) PL__MUST_CHECK;

PL__HIDDEN int pl__rate_encode(pl__buf *out, const char *resource,
                               const pl__rate_budget *b) PL__MUST_CHECK;
PL__HIDDEN int pl__rate_decode(pl__rate_budget *out, const char *resource,
                               const uint8_t *data, size_t len) PL__MUST_CHECK;

/*
 * Admit one call at @p now_ms against budget @p b (fixed windows of
 * b->window_ms aligned on multiples of it since the epoch): true, with the
 * budget counted, when the window now has room; else false, and
 * *retry_at_ms is when the next window starts.  A budget of another window
 * length or limit starts afresh.
 */
PL__HIDDEN bool pl__rate_admit(pl__rate_budget *b, int64_t window_ms,
                               uint32_t limit, int64_t now_ms,
                               int64_t *retry_at_ms);

#endif /* PL_FLOWREC_H */
