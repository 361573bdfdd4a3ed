/*
 * policyledger/decorators.h -- decorators: retry, timeout, budget, rate limits, pagination,
 * observation, caps, validation.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_DECORATORS_H
#define POLICYLEDGER_DECORATORS_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/decorators.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Decorators                                                               */
/* ------------------------------------------------------------------------ */

/** The rest of a decorator chain, ending in the policy.  Opaque. */
typedef struct pl_next pl_next;

/**
 * A decorator wraps the rest of the chain: it may run @p next any number of
 * times (pl_next_call()), change the action, and add steps (pl_ctx_emit()).
 * Steps the policy returns are recorded by the chain's end.  Returns
 * PL_OK, or a pl_status (pl_next_call()'s, unchanged, or one of its own)
 * that fails the call's run; a value that is no pl_status (1, say) fails
 * it with PL_EPOLICY.
 */
typedef int (*pl_decorator_fn)(pl_ctx *ctx, const pl_action *action,
                               pl_steps *out, const pl_decorator *self,
                               pl_next *next);

#define PL_DECORATOR_VERSION 1

/** A decorator in a call's list.  Initialise with PL_DECORATOR_INIT. */
struct pl_decorator {
    unsigned version;  /**< PL_DECORATOR_VERSION */
    pl_decorator_fn fn;
    const char *name;  /**< for messages */
    uint64_t arg;      /**< the decorator's own parameter */
    void *user;        /**< the decorator's own data, borrowed */
};

#define PL_DECORATOR_INIT { PL_DECORATOR_VERSION, NULL, NULL, 0, NULL }

/**
 * Run the rest of the chain.  Steps it returns are added to @p out.
 * @return the inner status.
 */
int pl_next_call(pl_next *next, pl_ctx *ctx, const pl_action *action,
                 pl_steps *out);

/**
 * loop(max_turns): run the inner chain again while its last turn returned
 * `action_call` steps, or a `text` step whose payload has "again": true (a
 * turn asking for another: an LLM policy's re-prompt), at most
 * @p max_turns times.  All turns share the
 * invocation's ledger.  Running out of turns appends an `error` step with
 * code "BudgetExceeded", which becomes the call's result (at once when
 * @p max_turns is 0: no turn runs).
 * @param[out] out the decorator.
 * @return PL_OK; PL_EINVAL (NULL @p out).
 */
int pl_decorator_loop(pl_decorator *out, unsigned max_turns);

/**
 * invoke_action: for every `action_call` the inner chain returned, call that
 * policy and append its `action_result`.  A name outside action->actions
 * gives a "NotAllowed" error result, an unregistered one "NotFound", a
 * malformed call "InvalidInput": never a call.  Error results are the
 * turn's data: the decorator passes them on and goes on.
 * @param[out] out the decorator.
 * @return PL_OK; PL_EINVAL (NULL @p out).
 */
int pl_decorator_invoke_action(pl_decorator *out);

/**
 * invoke_action with decorators on each call it makes: every tool call of
 * the inner chain goes through pl_ctx_call_step_with() wrapped by
 * @p per_call, outermost first.  This is where a model's tool calls get
 * validate (its arguments checked against the tool's input_schema: an
 * invalid one becomes an "InvalidInput" result the model reads, and the
 * tool does not run), retry, timeout, budget and cap:
 *
 *     pl_decorator per[3], d[2];
 *     pl_decorator_validate(&per[0], cache);
 *     pl_decorator_retry(&per[1], NULL);
 *     pl_decorator_cap(&per[2], 16 * 1024);
 *     pl_decorator_loop(&d[0], 20);
 *     pl_decorator_invoke_action_with(&d[1], per, 3);
 *     pl_ctx_call(&res, ctx, &agent, d, 2);
 *
 * @param[out] out the decorator.
 * @param per_call borrowed: the list (and what
 *        its decorators point to) must outlive every call made with the
 *        decorator.  NULL when @p n is 0 (then it is invoke_action).
 * @return PL_OK; PL_EINVAL (NULL @p out, @p n without a list, a decorator
 *         in it not made with PL_DECORATOR_INIT or without a function).
 */
int pl_decorator_invoke_action_with(pl_decorator *out,
                                    const pl_decorator *per_call, size_t n);

/*
 * The tool adapter: retry, timeout, budget, cap, paginate and observe.
 * Each is written with this header alone, as a user's decorator would be,
 * and composes in a call's decorator list, outermost first (paginate ends
 * its list: see pl_decorator_paginate()):
 *
 *     pl_decorator d[3];
 *     pl_decorator_timeout(&d[0], 30000);        // 30 s for all attempts
 *     pl_decorator_retry(&d[1], &retry_opts);    // up to N attempts
 *     pl_decorator_cap(&d[2], 64 * 1024);        // results over 64 KiB
 *     pl_ctx_call(&res, ctx, &action, d, 3);
 *
 * A creation function checks its configuration and returns PL_EINVAL
 * (with a message) for a bad one; a decorator whose fields were changed
 * by hand afterwards is checked again when first used, and a bad one then
 * fails the run with PL_EINVAL.  Options passed by pointer are borrowed:
 * they must outlive every call made with the decorator.
 */

/** Waits for @p ms milliseconds (0 or more); a non-zero status fails the
 *  run.  NULL in options means a real sleep. */
typedef int (*pl_sleep_fn)(int64_t ms, void *user);

#define PL_RETRY_OPTIONS_VERSION 1

/** retry's options.  Initialise with PL_RETRY_OPTIONS_INIT. */
typedef struct pl_retry_options {
    unsigned version;         /**< PL_RETRY_OPTIONS_VERSION */
    unsigned max_attempts;    /**< attempts in all, at least 1; default 3 */
    uint32_t base_ms;         /**< least backoff; default 100 */
    uint32_t max_backoff_ms;  /**< most backoff, >= base_ms; default 10000 */
    uint32_t max_retry_after_ms; /**< the longest retry_after_ms a tool may
                                      ask for; a longer one ends the
                                      retries; default 60000 */
    const char *const *codes; /**< error codes to retry; NULL: Timeout,
                                   RetryableServer and RateLimited */
    size_t n_codes;           /**< entries in codes */
    pl_sleep_fn sleep;        /**< how to wait; NULL: a real sleep */
    void *sleep_user;         /**< passed to sleep */
} pl_retry_options;

#define PL_RETRY_OPTIONS_INIT                                                  \
    { PL_RETRY_OPTIONS_VERSION, 3, 100, 10000, 60000, NULL, 0, NULL, NULL }

/**
 * retry: run the inner chain again while its result is an error whose code
 * is retryable, at most opts->max_attempts times in all.
 *
 * Every attempt runs in the call's own invocation, so every attempt's
 * result is a step of its ledger.  Between attempts it waits a
 * decorrelated-jitter backoff, min(max_backoff_ms, uniform(base_ms,
 * 3 * previous)), drawn with pl_ctx_random(), or longer when the error
 * result has a number "retry_after_ms" (the tool's Retry-After; one over
 * opts->max_retry_after_ms returns that error result at once).  The wait
 * is recorded (a durable side effect "retry.backoff" with {"attempt",
 * "delay_ms", "until_ms"}) before it starts, so a replay serves it and
 * never waits, and a run that crashed mid-wait waits only what is left of
 * it (until_ms on the real clock) and goes on with the attempts that
 * remain.  A backoff that would pass the deadline (pl_ctx_deadline()) is
 * not waited: the call ends with a recorded "Timeout" error.
 * Running out of attempts returns the last attempt's error result.
 *
 * @param[out] out the decorator.
 * @param opts NULL for defaults; borrowed (see above).
 * @return PL_OK; PL_EINVAL (NULL @p out, wrong version, max_attempts 0,
 *         max_backoff_ms < base_ms, n_codes without codes, a NULL or empty
 *         code).
 */
int pl_decorator_retry(pl_decorator *out, const pl_retry_options *opts);

/**
 * timeout(ms): give the inner chain a deadline of @p ms milliseconds from
 * now (pl_ctx_now()), or the caller's deadline if that is earlier; see
 * pl_ctx_deadline() for what a deadline does and does not do.  The callee
 * is not interrupted: when it returns past the deadline (by the recorded
 * clock) its result is replaced by a recorded "Timeout" error step, which
 * becomes the call's result.  The steps it returned stay in its ledger.
 * @return PL_OK; PL_EINVAL (NULL @p out, @p ms zero or negative, or over
 *         2^62).
 */
int pl_decorator_timeout(pl_decorator *out, int64_t ms);

#define PL_BUDGET_VERSION 1

/** budget's limits; 0 means no limit on that measure.  Initialise with
 *  PL_BUDGET_INIT. */
typedef struct pl_budget {
    unsigned version;    /**< PL_BUDGET_VERSION */
    uint64_t max_steps;  /**< steps in the invocation's ledger */
    int64_t max_wall_ms; /**< since the invocation's first step */
    uint64_t max_tokens; /**< model tokens its steps record */
} pl_budget;

#define PL_BUDGET_INIT { PL_BUDGET_VERSION, 0, 0, 0 }

/**
 * budget: before each pass through the inner chain, check the invocation
 * the call runs in against @p limits; once one is spent the pass does not
 * run and a recorded "BudgetExceeded" error step (naming the measure)
 * becomes the call's result.
 *
 * The measures are read from the invocation's ledger, so a replay decides
 * the same: steps are its steps (every attempt of a retry, every turn of a
 * loop, every result); wall-clock time runs from its first step to now by
 * the recorded clock; tokens are the sum of the numbers "tokens" that its
 * steps' payloads carry at the top level (the hook for model policies:
 * record a step's usage as "tokens": n, and the budget counts it).
 *
 * Model tokens: an LLM policy (policyledger_llm.h) ends each turn with a
 * step carrying "tokens": the input + output tokens of that turn's model
 * call, once per call, so [loop, budget, invoke_action] around an LLM
 * policy counts every model call (re-prompts included) turn by turn, and
 * the turn that finds max_tokens spent does not ask the model.  The same
 * step carries "tokens_in" and "tokens_out", the policy's input and output
 * tokens so far (not summed here).  Model calls recorded before steps
 * carried "tokens" count nothing, so their runs replay as they ran.
 *
 * Put it inside the decorators that repeat the chain, so every repetition
 * is checked: [retry, budget] checks each attempt, [loop, budget,
 * invoke_action] each turn.  On the call that runs a whole agent it
 * bounds the run's work.
 * @param limits borrowed (see above).
 * @return PL_OK; PL_EINVAL (NULL argument, wrong version, no limit set, a
 *         negative max_wall_ms).
 */
int pl_decorator_budget(pl_decorator *out, const pl_budget *limits);

/**
 * cap(max_bytes): when the inner chain's result (its last step) is larger
 * than @p max_bytes as compact JSON text, the call's result becomes a
 * recorded `action_result`
 *     {"truncated": true, "original_bytes": n, "max_bytes": max_bytes,
 *      "note": "...", "preview": "<the start of the JSON text>"}
 * with the preview cut, on a UTF-8 boundary, so the whole replacement fits
 * in @p max_bytes (a cap smaller than the note itself gets an empty
 * preview).  An error result stays an error: its replacement, of the same
 * step type, also has "error": true, its "code" and a "message" saying it
 * was truncated, so the caller (and a retry outside cap) still sees the
 * call fail with that code.  Never a silent cut: the full result stays in
 * the callee's ledger.
 * @return PL_OK; PL_EINVAL (NULL @p out, @p max_bytes 0).
 */
int pl_decorator_cap(pl_decorator *out, size_t max_bytes);

/**
 * Take one call's worth of the budget of rate limit @p resource: at most
 * @p limit calls per fixed window of @p window_ms, the windows aligned on
 * multiples of window_ms since the epoch by the store's clock (LMDB: this
 * host's; PostgreSQL: the server's).  The budget is a record in the store,
 * read and counted in one transaction, so every process and host sharing
 * the store shares it.  Fixed windows: a window admits at most @p limit,
 * so any stretch of time admits at most limit per window plus one window's
 * worth (a burst on either side of a boundary).  The record remembers the
 * last window and limit given; another window length or limit starts a new
 * window.
 * @param[out] out_admitted true when the call may go now (counted).
 * @param[out] out_at_ms the store's clock (Unix ms) at the take.
 * @param[out] out_retry_at_ms when not admitted: when the next window
 *        starts, by the store's clock (else 0).
 * @return PL_OK; PL_EINVAL (NULL argument, a name that is empty, longer
 *         than PL_MAX_FLOW_KEY or not UTF-8 with no control characters,
 *         limit 0, window_ms not 1..2^53); PL_ESTATE (a
 *         read-only engine); PL_ECORRUPT (the budget record is damaged);
 *         PL_ESTORE.
 */
int pl_rate_take(bool *out_admitted, int64_t *out_at_ms,
                 int64_t *out_retry_at_ms, pl_engine *engine,
                 const char *resource, uint32_t limit, int64_t window_ms);

/** The largest budget in units, and the largest charge: 2^53. */
#define PL_RATE_MAX_UNITS ((uint64_t)1 << 53)

/** The longest unit name of a budget in units, in bytes. */
#define PL_MAX_RATE_UNIT 32

#define PL_RATE_GRANT_VERSION 1

/** What pl_rate_take_units() and pl_rate_settle_units() answer.
 *  Initialise with PL_RATE_GRANT_INIT. */
typedef struct pl_rate_grant {
    unsigned version;        /**< PL_RATE_GRANT_VERSION */
    bool admitted;           /**< a take: the units are charged; a settle:
                                  the correction applied */
    int64_t at_ms;           /**< the store's clock (Unix ms) */
    int64_t window_start_ms; /**< the window charged, or the current one */
    int64_t retry_at_ms;     /**< a take not admitted: when the next window
                                  starts, by the store's clock; else 0 */
    uint64_t used;           /**< units charged in that window, after */
} pl_rate_grant;

#define PL_RATE_GRANT_INIT { PL_RATE_GRANT_VERSION, false, 0, 0, 0, 0 }

/**
 * Take @p amount units (tokens, or any unit a call reports) of the budget
 * of @p resource in @p unit: at most @p budget units charged per fixed
 * window of @p window_ms, aligned as pl_rate_take()'s, by the store's
 * clock.  Admitted when the units already charged in the window plus
 * @p amount stay within @p budget; else nothing is charged and
 * out->retry_at_ms says when the next window starts.  A budget is a record
 * in the store (one per resource and unit, apart from pl_rate_take()'s
 * call budgets), read and charged in one transaction, shared by every
 * process and host on the store.  Another window length starts a new
 * window; the budget is the last one given.
 * @param amount the units to charge now (an estimate): 0..@p budget; a
 *        call larger than the whole budget could never be admitted.
 * @return PL_OK; PL_EINVAL (NULL argument, a wrong version, a name that is
 *         empty, longer than PL_MAX_FLOW_KEY or not UTF-8 with no control
 *         characters, a unit that is not 1 to
 *         PL_MAX_RATE_UNIT of [a-z0-9_], budget 0 or above
 *         PL_RATE_MAX_UNITS, window_ms not 1..2^53); PL_ELIMIT (@p amount is
 *         more than @p budget); PL_ESTATE (a read-only engine); PL_ECORRUPT
 *         (the budget record is damaged); PL_ESTORE.
 */
int pl_rate_take_units(pl_rate_grant *out, pl_engine *engine,
                       const char *resource, const char *unit,
                       uint64_t budget, int64_t window_ms, uint64_t amount);

/**
 * Correct a take: the call charged @p charged units in the window that
 * starts at @p window_start_ms and used @p actual.  While that window
 * lasts the budget is corrected both ways (never below 0: a window may end
 * over its budget when calls used more than they were charged, and then
 * admits nothing more).  Once it has ended, an extra charge goes to the
 * current window and a refund is dropped (the window it would free is
 * gone).  out->admitted says whether the correction applied; out->used is
 * the window's units after it.
 * @return as pl_rate_take_units(), but for PL_ELIMIT: @p charged and
 *         @p actual are each 0..PL_RATE_MAX_UNITS, and a negative
 *         @p window_start_ms is no window's (PL_EINVAL).
 */
int pl_rate_settle_units(pl_rate_grant *out, pl_engine *engine,
                         const char *resource, const char *unit,
                         uint64_t budget, int64_t window_ms,
                         int64_t window_start_ms, uint64_t charged,
                         uint64_t actual);

/**
 * How a budget in units estimates a call before it runs: *out_units, the
 * units the call will use at most (0..PL_RATE_MAX_UNITS).
 * @return PL_OK, or a status that fails the run.
 */
typedef int (*pl_rate_estimate_fn)(int64_t *out_units,
                                   const pl_action *action, void *user);

/**
 * How a budget in units reads a call's actual use from its result, the
 * steps the inner chain returned: *out_units, or -1 when the result
 * reports none (the estimate stands).
 * @return PL_OK, or a status that fails the run.
 */
typedef int (*pl_rate_usage_fn)(int64_t *out_units, const pl_steps *result,
                                void *user);

#define PL_RATE_LIMIT_OPTIONS_VERSION 2

/** rate_limit's options.  Initialise with PL_RATE_LIMIT_OPTIONS_INIT. */
typedef struct pl_rate_limit_options {
    unsigned version;     /**< PL_RATE_LIMIT_OPTIONS_VERSION */
    const char *resource; /**< the budget's name, shared by every process:
                               1..PL_MAX_FLOW_KEY bytes of UTF-8 with no
                               control characters; required */
    uint32_t limit;       /**< calls per window, 1 or more; required
                               unless budget is set (then 0) */
    int64_t window_ms;    /**< the window, 1 ms to 2^53; default 1000 */
    pl_sleep_fn sleep;    /**< how to wait; NULL: the engine's durable
                               sleep, pl_ctx_sleep_until() */
    void *sleep_user;     /**< passed to sleep */
    /* version 2: a budget in units, not calls */
    uint64_t budget;      /**< units per window, 1..PL_RATE_MAX_UNITS;
                               0: the budget counts calls (limit) */
    const char *unit;     /**< the units' name, 1..PL_MAX_RATE_UNIT of
                               [a-z0-9_]; NULL: "tokens" */
    const char *estimate_member; /**< the payload's member that holds a
                               call's estimate; NULL: "max_tokens" */
    pl_rate_estimate_fn estimate; /**< the estimate instead, from the
                               action; NULL: estimate_member */
    void *estimate_user;  /**< passed to estimate */
    pl_rate_usage_fn usage; /**< a call's actual use from its result;
                               NULL: the sum of the top-level "tokens" of
                               the steps it returned (an LLM call's input +
                               output tokens, policyledger_llm.h) */
    void *usage_user;     /**< passed to usage */
} pl_rate_limit_options;

#define PL_RATE_LIMIT_OPTIONS_INIT                                             \
    { PL_RATE_LIMIT_OPTIONS_VERSION, NULL, 0, 1000, NULL, NULL,                \
      0, NULL, NULL, NULL, NULL, NULL, NULL }

/**
 * rate_limit: before the inner chain runs, take a call's worth of the
 * shared budget opts->resource (pl_rate_take()); while the budget is spent,
 * wait for the next window and take again.  Waiting is not a failure.
 * Every take is recorded, before any wait, as a durable side effect
 * "rate_limit" with {"resource", "admitted", "at_ms" (the store's clock),
 * "window_ms", "limit"} and, when not admitted, "delay_ms" and "until_ms"
 * (this host's clock).  The wait is pl_ctx_sleep_until(until_ms): a `wait`
 * step, on the thread when short (pl_engine_set_wait_in_place()), else the
 * run parks (PL_ESUSPENDED: the policy returns it) and its worker is free
 * until a worker wakes it; in a call of a pl_ctx_call_all() fan-out, which
 * cannot park, and with opts->sleep, it waits in place.  A replay serves
 * the takes and waits and neither takes nor waits, and a run that crashed
 * mid-wait waits only what is left of it and takes again.  A wait that
 * would pass the deadline (pl_ctx_deadline()) is not waited: the call ends
 * with a recorded "Timeout" error.
 *
 * A budget in units (opts->budget, e.g. a provider's tokens per minute)
 * charges each call twice, through pl_rate_take_units() and
 * pl_rate_settle_units():
 *   - Before the call, its estimate: opts->estimate's answer, else the
 *     payload's member opts->estimate_member ("max_tokens": what an LLM
 *     request may use at most), a whole number 0..PL_RATE_MAX_UNITS.  A
 *     call that cannot fit in what is left of the window waits as above; a
 *     call whose estimate is more than the whole budget, or with no
 *     estimate (the member missing, not a whole number, negative or above
 *     PL_RATE_MAX_UNITS; the function's answer outside 0..2^53), is not
 *     made: it ends at once with a recorded "InvalidInput" error saying
 *     why.  The take is recorded as above with
 *     "unit", "budget", "estimate", "window_start_ms" and "used" (the
 *     window's units charged) in place of "limit"; a refused one as
 *     {"resource", "unit", "admitted": false, "refused": why}.
 *   - After the call returns, its actual use: opts->usage's answer, else
 *     the sum of the top-level "tokens" of the steps the inner chain
 *     returned (what pl_decorator_budget() counts).  The call is charged
 *     that instead of its estimate, more or less, and the correction is
 *     recorded as a side effect "rate_limit_usage" {"resource", "unit",
 *     "window_start_ms", "estimate", "actual", "charged"}.  A result that
 *     reports no use ("actual": null), or a use that is not a whole number
 *     0..PL_RATE_MAX_UNITS (negative, fractional, huge, not a number), is
 *     charged its estimate, and the record's "note" says why: the
 *     documented fallback, never a wrong budget.
 *   A crash can only leave a budget charged more than it should be, never
 *   less: an extra charge is applied, then recorded (a crash in between
 *   applies it again when the run continues); a refund is recorded, then
 *   applied (a crash in between drops it).  Over a window, the units
 *   charged stay within the budget but for calls that used more than
 *   their estimate (each is charged what it used, so the window admits
 *   nothing more).
 *
 * Put it where each repetition should count: [retry, rate_limit] takes
 * budget for every attempt; around invoke_action's per-call list, every
 * tool call; [loop, rate_limit] around an LLM policy, every turn.
 * @param opts borrowed (see above).
 * @return PL_OK; PL_EINVAL (NULL argument, wrong version, no resource or a
 *         name longer than PL_MAX_FLOW_KEY or not UTF-8 with no control
 *         characters, limit 0 without a budget, a
 *         limit with one, a budget above PL_RATE_MAX_UNITS, a unit or
 *         estimate_member that is not a name, window_ms below 1 or
 *         above 2^53).
 */
int pl_decorator_rate_limit(pl_decorator *out,
                            const pl_rate_limit_options *opts);

#define PL_PAGINATE_OPTIONS_VERSION 1

/** paginate's options.  Initialise with PL_PAGINATE_OPTIONS_INIT. */
typedef struct pl_paginate_options {
    unsigned version;   /**< PL_PAGINATE_OPTIONS_VERSION */
    /** JSON pointer (RFC 6901) to the continuation in a page's result:
     *  "/next_token", "/next_page", "/cursor/next", ...  A missing member,
     *  null, false or "" means no more pages.  Default "/next_token". */
    const char *next;
    /** JSON pointer to where the continuation goes in the next request's
     *  payload (objects on the way are made); NULL: the same as next. */
    const char *param;
    /** JSON pointer to the array of items in a page's result, which the
     *  merged result concatenates; NULL: each page's result is kept whole
     *  in "results". */
    const char *items;
    unsigned max_pages; /**< pages read at most; 0 = 100 */
    size_t max_bytes;   /**< merged items' compact JSON bytes; 0 = 512000 */
    /** decorators on each page's call, outermost first (validate, retry,
     *  timeout per page); may be NULL.  Borrowed. */
    const pl_decorator *per_page;
    size_t n_per_page;
} pl_paginate_options;

#define PL_PAGINATE_OPTIONS_INIT                                               \
    { PL_PAGINATE_OPTIONS_VERSION, "/next_token", NULL, NULL, 0, 0, NULL, 0 }

/**
 * paginate: read every page of a tool whose result carries a continuation.
 * The decorator ends its chain: each page is a call of its own,
 * pl_ctx_call() of the same policy wrapped by opts->per_page, in the
 * call's invocation (decorators after paginate in a list never run: give
 * them to it as per_page).  The first page is asked with the call's
 * payload, each later one with the continuation the page before returned
 * put at opts->param.  Every page's result is recorded where it was read,
 * so a replay serves each, and a run that crashed after page 7 reads only
 * page 8 onwards.
 *
 * A first page that is an error result, has no continuation, or whose
 * items are not an array is the call's result as it is: paginate may wrap
 * every tool of a model.  Otherwise pages are read until one has no
 * continuation, opts->max_pages were read, or the merged items reach
 * opts->max_bytes (the first page is always merged; a later one that
 * would pass the cap is read but not merged), and the call's result is a
 * recorded `action_result` by "paginate": the first page's result without
 * its continuation, its items array holding every merged page's items in
 * order (with no items pointer: {"results": [each page's result]}), and
 *     "pagination": {"pages": read, "merged": n, "complete": bool,
 *                    "stopped": why, "bytes": merged bytes,
 *                    "max_pages", "max_bytes",
 *                    "next": the continuation of the first page not
 *                            merged, "note": "incomplete: ...",
 *                    "error": a failed page's error result, or the
 *                             error that stopped the reading}
 * where "stopped" is "end" (complete: no continuation left), "page_limit",
 * "byte_cap", "error" (a later page's result was an error, or the
 * continuation has no place at opts->param in the request: an
 * "InvalidInput" error; the pages before it are merged), "malformed_page"
 * (a later page's items are not an array) or "repeated_continuation" (a
 * page returned a continuation that asked for a page of this call
 * already, its own or an earlier one's: a tool paging in a loop, A -> B
 * -> A; the first page's is the one the call's payload holds at
 * opts->param, if any; "error" is a "ToolBug" error naming the
 * continuation and the page it asked for).  "next", "note" and "error"
 * are there only when they apply.  Never a silent cut: every page read is in the ledger whole.
 * @param[out] out the decorator.
 * @param opts NULL for defaults; borrowed (see above).
 * @return PL_OK; PL_EINVAL (NULL @p out, wrong version, a pointer that is
 *         not "/..." or badly escaped, n_per_page without per_page, a
 *         per-page decorator not made with PL_DECORATOR_INIT).
 */
int pl_decorator_paginate(pl_decorator *out, const pl_paginate_options *opts);

/**
 * A normaliser: make @p *out, a new JSON object (the engine frees it), the
 * observation a model is shown for a tool's raw result.  It runs in the
 * call's invocation and may call policies through @p ctx (a cheap model
 * that summarises a long page): those calls are recorded as any call is.
 * It must be deterministic given its arguments and what its calls return.
 * @param action the tool's call (its policy and payload).
 * @param raw the tool's result, never an error result; borrowed.
 * @return PL_OK; the status of a pl_ctx_* call that failed (return it
 *         unchanged); any other non-zero value fails the run.
 */
typedef int (*pl_normalize_fn)(cJSON **out, pl_ctx *ctx,
                               const pl_action *action, const cJSON *raw,
                               void *user);

#define PL_OBSERVE_OPTIONS_VERSION 1

/** observe's options.  Initialise with PL_OBSERVE_OPTIONS_INIT. */
typedef struct pl_observe_options {
    unsigned version;          /**< PL_OBSERVE_OPTIONS_VERSION */
    pl_normalize_fn fn;        /**< NULL: pl_observation_default() */
    void *user;                /**< passed to fn */
    const char *const *tools;  /**< the policies it observes; NULL: all */
    size_t n_tools;            /**< entries in tools */
    /** The built-in normaliser only: a policy (an LLM policy, say) asked
     *  for the summary of a raw result longer than summarize_over bytes,
     *  with {"text": an instruction and the raw JSON, cut at 32 KiB}; the
     *  "text" of its result becomes the summary.  NULL: none. */
    const char *summarizer;
    size_t summarize_over;     /**< 0 = 2048 */
} pl_observe_options;

#define PL_OBSERVE_OPTIONS_INIT                                                \
    { PL_OBSERVE_OPTIONS_VERSION, NULL, NULL, NULL, 0, NULL, 0 }

/**
 * observe: turn a tool's raw result into the observation a model sees.
 * For a call of one of opts->tools, it runs the rest of the chain, and
 * when the result (its last step) is not an error result, calls the
 * normaliser and records an `action_result` by "observe":
 *     {"observation": {...the normaliser's object...}, "raw": {...}}
 * which becomes the call's result.  The raw result stays where the chain
 * recorded it too, so `ledger-dump` shows what the tool returned and what
 * the model was shown; an LLM policy (policyledger_llm.h) sends the
 * observation, not the raw result, as the tool's answer.  Error results
 * and calls of other policies pass unchanged.
 *
 * The built-in normaliser's observation (pl_observation_default()):
 *     {"summary": "one sentence", "key_facts": {"name": "value", ...},
 *      "affordances": ["next_page", ...]}
 *
 * The raw result is recorded in the call's invocation, and becomes durable
 * with the next commit there: a normaliser that calls policies makes it
 * durable with its first call's result.  A crash before then executes the
 * whole call again, the tool included; one after it replays the inner
 * chain, the tool's policy running again and its result compared with the
 * recorded one.  So over a tool whose result is not the same on every run
 * (an HTTP page), put paginate inside observe, [observe, paginate]:
 * paginate makes the tool's result a call of its own, durable when it
 * returns, which the replay serves.
 * @param opts NULL for defaults; borrowed.
 * @return PL_OK; PL_EINVAL (NULL @p out, wrong version, n_tools without
 *         tools, a NULL or empty tool name, an empty summarizer name).
 */
int pl_decorator_observe(pl_decorator *out, const pl_observe_options *opts);

/**
 * The built-in observation of a tool's result @p raw (an object) for the
 * policy @p tool:
 *   summary      "'TOOL' returned N fields: a, b, c", with what its
 *                "pagination" says (pages read, complete or why not) and a
 *                "truncated" flag's note;
 *   key_facts    every top-level member but "pagination", as a string:
 *                scalars as their text (cut at 200 bytes, "..." after),
 *                arrays as "N items", objects as "N fields"; at most 24;
 *   affordances  "next_page" (pagination stopped with a "next"),
 *                "read_more" (a member "truncated": true), "refine_query"
 *                (an array of items with 20 or more of them).
 * Deterministic: the same raw result gives the same observation.
 * @param[out] out caller owns; free with cJSON_Delete().
 * @return PL_OK; PL_EINVAL (NULL argument); PL_ENOMEM.
 */
int pl_observation_default(cJSON **out, const char *tool, const cJSON *raw);

/* clang-format on */

#endif /* POLICYLEDGER_DECORATORS_H */
