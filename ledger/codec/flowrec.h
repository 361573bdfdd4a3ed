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

/* The most a unit budget's window counts: charges past it saturate. */
#define PL__UNITS_USED_MAX ((uint64_t)1 << 62)

/* A budget in units (tokens): units charged in its current fixed window.
 * Estimates are charged when a call is admitted; a call's correction
 * (pl__units_settle()) may leave a window over its limit. */
typedef struct pl__unit_budget {
    int64_t window_ms; /* the window's length */
    uint64_t limit;    /* units admitted per window, 1..PL_RATE_MAX_UNITS */
    int64_t start_ms;  /* the current window's start (Unix ms, store clock) */
    uint64_t used;     /* units charged in it, 0..PL__UNITS_USED_MAX */
} pl__unit_budget;

/* What a take of units answers (pl_rate_grant's fields, store.h). */
typedef struct pl__units_grant {
    bool admitted;       /* take: charged; settle: the correction applied */
    int64_t at_ms;       /* the store's clock */
    int64_t start_ms;    /* the window charged, or the current one */
    int64_t retry_at_ms; /* a take not admitted: the next window's start */
    uint64_t used;       /* units charged in that window, after */
} pl__units_grant;

/* A take of units, or a correction of one: what the store is asked. */
typedef struct pl__units_op {
    const char *resource, *unit;
    uint64_t limit;
    int64_t window_ms;
    bool settle;             /* false: take amount; true: correct by delta */
    uint64_t amount;         /* a take's units */
    int64_t start_ms, delta; /* a correction: the window charged, and the
                                units to add (negative: give back) */
} pl__units_op;

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

/* A unit budget: bound to its resource and unit as the rate budget is to
 * its resource ("<unit>:<resource>": a unit holds no ':'). */
PL__HIDDEN int pl__units_encode(pl__buf *out, const char *resource,
                                const char *unit,
                                const pl__unit_budget *b) PL__MUST_CHECK;
PL__HIDDEN int pl__units_decode(pl__unit_budget *out, const char *resource,
                                const char *unit, const uint8_t *data,
                                size_t len) PL__MUST_CHECK;

/*
 * Charge @p amount units at @p now_ms against budget @p b (fixed windows
 * as pl__rate_admit()'s): admitted when the window's units charged plus
 * @p amount stay within @p limit.  A budget of another window length
 * starts afresh; the limit is the last one given.  *g says what happened.
 * Returns whether @p b changed.
 */
PL__HIDDEN bool pl__units_admit(pl__unit_budget *b, int64_t window_ms,
                                uint64_t limit, uint64_t amount, int64_t now_ms,
                                pl__units_grant *g);

/*
 * Correct a charge made in the window starting @p start_ms by @p delta
 * units (actual use less the estimate charged): in that window, while it
 * lasts, both ways (never below 0); once it has ended, an extra charge
 * goes to the current window and a refund is dropped.  Returns whether
 * @p b changed.
 */
PL__HIDDEN bool pl__units_settle(pl__unit_budget *b, int64_t window_ms,
                                 uint64_t limit, int64_t start_ms,
                                 int64_t delta, int64_t now_ms,
                                 pl__units_grant *g);

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
