/*
 * policyledger/context.h -- the pool (many runs on a few threads), and the context: what a
 * running policy uses (calls, fan-out, side effects, suspension, versions).
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_CONTEXT_H
#define POLICYLEDGER_CONTEXT_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/context.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Pool: many runs on a few threads                                         */
/* ------------------------------------------------------------------------ */

/**
 * A pool runs tasks on a few worker threads, many tasks per thread at once.
 * Each task has a stack of its own.  When a task commits to the pool's
 * engine in PL_DURABILITY_GROUP or PL_DURABILITY_PROCESS, its thread runs
 * the thread's other tasks meanwhile, then makes all of their batches
 * durable at once (one writer in the group commit; one transaction in
 * process mode), and only then does each task go on: one OS thread carries
 * many runs, with no thread switch per call, and each caller still returns
 * only once its steps are as durable as the mode promises.  In sync mode,
 * and on any other engine, a task's commits are its own and block its
 * thread.
 *
 * A task stays on one thread from start to end.  Its thread runs other
 * tasks only while the task is inside an engine call, so thread-local data
 * holds between engine calls, and pl_errmsg() always reports the task's own
 * last error.  A task that blocks (sleeps, waits for a network reply) holds
 * up the other tasks on its thread.  A task that overflows its stack hits
 * a guard page (SIGSEGV), as a thread would.
 */
typedef struct pl_pool pl_pool;

/** A task: runs once on a worker, with the pool's engine. */
typedef void (*pl_pool_task_fn)(pl_engine *engine, void *user);

#define PL_POOL_OPTIONS_VERSION 1

/** Pool options.  Initialise with PL_POOL_OPTIONS_INIT. */
typedef struct pl_pool_options {
    unsigned version;         /**< PL_POOL_OPTIONS_VERSION */
    unsigned threads;         /**< worker threads, at most 1024; 0 = one
                                   per CPU, from 2 to 1024 */
    unsigned tasks_per_thread; /**< tasks a thread carries at once, at most
                                    256; 0 = 64 */
    size_t stack_size;        /**< each task's stack; 0 = 1 MiB, at least
                                   64 KiB */
} pl_pool_options;

#define PL_POOL_OPTIONS_INIT { PL_POOL_OPTIONS_VERSION, 0, 0, 0 }

/**
 * Start a pool of worker threads on @p engine.
 * @param[out] out caller owns; free with pl_pool_free() before closing the
 *        engine.
 * @param opts NULL for defaults.
 * @return PL_OK; PL_EINVAL (bad options); PL_ENOMEM (or threads could not
 *         be started).
 */
int pl_pool_new(pl_pool **out, pl_engine *engine, const pl_pool_options *opts);

/**
 * Queue a task.  Tasks start in the order queued.  @p user is borrowed until
 * the task has run.  May be called from any thread, tasks included.
 * @return PL_OK; PL_EINVAL (NULL pool or fn); PL_ENOMEM.
 */
int pl_pool_submit(pl_pool *pool, pl_pool_task_fn fn, void *user);

/**
 * Wait until every task queued so far, and every task they queued, has run.
 * @return PL_OK; PL_EINVAL (NULL pool, or called from a pool's task, which
 *         would wait for itself).
 */
int pl_pool_wait(pl_pool *pool);

/** Wait for every task, then stop the workers and free the pool.  Not from
 *  a task: there it does nothing (a task cannot stop its own thread).
 *  NULL does nothing. */
void pl_pool_free(pl_pool *pool);

/* ------------------------------------------------------------------------ */
/* Context: what a running policy uses                                      */
/* ------------------------------------------------------------------------ */

/*
 * Every pl_ctx_* function below takes the context its policy (or decorator)
 * was given, while that policy runs.  A context used after its policy
 * returned, a caller's context used inside a call it made, or a context
 * used inside another run (one a policy started, or one on another thread)
 * is refused with PL_EINVAL (and a message) without touching the run.  A
 * context used after its run ended is freed memory: never keep one.
 */

/**
 * Call a policy.  Appends `action_call` to this invocation's ledger; if the
 * ledger already records this call's result, returns it without executing;
 * otherwise runs the callee (wrapped by @p decorators, outermost first) in a
 * new invocation whose ledger starts with action->seed, appends the
 * `action_result`, makes it durable, and returns it.
 *
 * A callee that is not registered gives a "NotFound" error result, not a
 * status.
 *
 * @param[out] out_result the `action_result` step; caller owns, free with
 *             pl_step_free().  May be NULL to discard it.
 * @param action made with PL_ACTION_INIT; its payload must not be NULL.
 * @return PL_OK; PL_ERESULT (the result is error-as-data, "NotFound" for
 *         an unregistered callee, and *out_result holds it; the run goes
 *         on: see the overview); PL_ESUSPENDED (return it from the
 *         policy); PL_ENONDET; PL_ECHECK;
 *         PL_EINVAL / PL_EJSON / PL_ELIMIT (bad action, NULL payload, wrong
 *         action or decorator version, a stale context); PL_ESTORE;
 *         PL_ENOMEM; or the status that failed the run.  On any error but
 *         PL_ERESULT and a stale context the run has stopped: return the
 *         status from the policy.
 */
int pl_ctx_call(pl_step **out_result, pl_ctx *ctx, const pl_action *action,
                const pl_decorator *decorators, size_t n_decorators);

/**
 * The short form of pl_ctx_call() for the common case: call @p policy with
 * @p payload, no decorators, and get the result's payload.
 * @param[out] out the result payload, a JSON object: caller owns, free with
 *             cJSON_Delete().  NULL on failure but PL_ERESULT.  May be NULL
 *             to discard it.
 * @param payload a JSON object, borrowed; never NULL (pl_json_empty()).
 * @return as pl_ctx_call(): on PL_ERESULT *out holds the error object
 *         ({"error": true, "code", "message"}) and pl_errmsg() describes it.
 */
int pl_ctx_invoke(cJSON **out, pl_ctx *ctx, const char *policy,
                  const cJSON *payload);

/**
 * Call the policy named in an `action_call` step of this invocation's
 * ledger (one the inner chain returned to a decorator) and append its
 * `action_result`: what pl_decorator_invoke_action() does for each call.
 * The name must be in @p allowed->actions ("NotAllowed" error result) and
 * registered ("NotFound"); a malformed call is an "InvalidInput" error
 * result: never a call.
 * @param[out] out the `action_result`; caller owns, free with
 *             pl_step_free().
 * @param call an `action_call` step already recorded in this invocation's
 *             ledger; borrowed.
 * @param allowed the invocation's action (whose actions are allowed).
 * @return as pl_ctx_call() (PL_ERESULT for those error results too, *out
 *         holding them); PL_EINVAL (the run goes on) for a step that is
 *         not such a call, or a call that has its result already (made by
 *         pl_ctx_call(), or resolved here before): a call is resolved once.
 */
int pl_ctx_call_step(pl_step **out, pl_ctx *ctx, const pl_step *call,
                     const pl_action *allowed);

/**
 * pl_ctx_call_step() with @p decorators wrapping the callee, outermost
 * first, exactly as pl_ctx_call() applies its own: a result recorded in
 * the ledger is served without running them; an executed call runs them in
 * the callee's invocation, whose ledger records every step they emit (a
 * validate refusal, each retry attempt and backoff, a cap's replacement),
 * so a replay serves the same result.  A call refused before it would run
 * (malformed, NotAllowed, NotFound) never reaches them.  What
 * pl_decorator_invoke_action_with() does for each call.
 * @param decorators borrowed; NULL when @p n_decorators is 0.
 * @return as pl_ctx_call_step(); PL_EINVAL (stopping the run, as
 *         pl_ctx_call() does) for a decorator not made with
 *         PL_DECORATOR_INIT or without a function.
 */
int pl_ctx_call_step_with(pl_step **out, pl_ctx *ctx, const pl_step *call,
                          const pl_action *allowed,
                          const pl_decorator *decorators,
                          size_t n_decorators);

/* ---- fan-out -------------------------------------------------------- */

#define PL_CALL_SPEC_VERSION 1

/**
 * One call of pl_ctx_call_all(): what pl_ctx_call() takes for one call.
 * Initialise with PL_CALL_SPEC_INIT and set fields by name.
 */
typedef struct pl_call_spec {
    unsigned version;                /**< PL_CALL_SPEC_VERSION */
    const pl_action *action;         /**< made with PL_ACTION_INIT */
    const pl_decorator *decorators;  /**< outermost first; may be NULL */
    size_t n_decorators;
} pl_call_spec;

#define PL_CALL_SPEC_INIT { PL_CALL_SPEC_VERSION, NULL, NULL, 0 }

/** The most calls one pl_ctx_call_all() takes. */
#define PL_CALL_ALL_MAX 1024

/**
 * Several calls at once (fan-out / join).  Appends the `action_call` of
 * every call to this invocation's ledger, in argument order; runs the
 * callees that have no recorded result concurrently, each in its own
 * invocation wrapped by its own decorators; then appends their
 * `action_result`s in argument order, so the ledger, and every replay of
 * it, is the same whichever callee finished first:
 *
 *     k .. k+n-1     action_call   calls[0] .. calls[n-1]
 *     k+n .. k+2n-1  action_result results[0] .. results[n-1]
 *
 * Each call behaves as pl_ctx_call() would, on its own: a recorded result
 * is served without running anything; an unregistered policy gives a
 * "NotFound" error result; a callee's error-as-data result is that call's
 * result and does not affect the others.
 *
 * Threads.  The callees run on threads the engine starts for this call
 * (at most 16; more calls queue on them), also when the run is a task of a
 * pl_pool, whose thread waits meanwhile.  A callee's context, and every
 * context under it, is used by the callee's thread only; the caller's
 * ledger is appended by the caller's thread only.  The engine's event
 * callback is called from those threads too, concurrently.  When this
 * returns, every thread it started has ended.
 *
 * Durability.  All the `action_call`s are durable before any callee runs.
 * A callee's own steps are made durable on its thread as it goes.  Results
 * become durable in argument order, each as soon as it and every result
 * before it are known.  A call whose result is durable is never executed
 * again; after a crash the others are continued: a callee whose ledger is
 * complete replays it (its recorded steps are compared, its calls served),
 * one cut short continues, and the in-doubt rules of a non-idempotent
 * policy apply to every call without a durable result, exactly as to a
 * single call in flight.
 *
 * Suspension and failure.  When a callee suspends (pl_ctx_suspend(), or
 * an in-doubt call asks), the fan-out waits for the other callees, appends
 * the results before the suspended call's, and returns PL_ESUSPENDED; the
 * resumed run replays to here, serves what is recorded and continues the
 * rest.  Calls after it whose callees finished replay their ledgers then.
 * When a callee fails the run (a store error, non-determinism), the
 * fan-out waits for all the others to stop and returns that status: the
 * first, in argument order.
 *
 * @param[out] out_results an array of @p n_calls: the `action_result` of
 *             each call, in argument order; caller owns each, free with
 *             pl_step_free().  All NULL on failure but PL_ERESULT.  May be
 *             NULL to discard them.
 * @param calls @p n_calls call specs, borrowed until this returns.
 * @param n_calls 1 .. PL_CALL_ALL_MAX.
 * @return as pl_ctx_call(): PL_ERESULT when one result or more is
 *         error-as-data (pl_step_is_error() says which; every result is
 *         handed out); PL_EINVAL (without stopping the run) for NULL
 *         @p calls or zero calls, PL_ELIMIT for more than
 *         PL_CALL_ALL_MAX; PL_EINVAL (stopping the run) for a spec not made
 *         with PL_CALL_SPEC_INIT, or a bad action or decorator in one.
 */
int pl_ctx_call_all(pl_step **out_results, pl_ctx *ctx,
                    const pl_call_spec *calls, size_t n_calls);

/**
 * This invocation's whole ledger as it stands (recorded and new steps).
 * The list is read once and extended as the ledger grows, so a policy that
 * reads it every turn pays for each step once.
 * @param[out] out borrowed: valid until this invocation's policy returns;
 *             never free or change it.  A later call may append to the
 *             same list; steps already in it stay where they are.
 * @return PL_OK; PL_EINVAL (NULL out, stale context); PL_ECORRUPT;
 *         PL_ESTORE; PL_ENOMEM.
 */
int pl_ctx_ledger(const pl_steps **out, pl_ctx *ctx);

/**
 * Record a step in this invocation's ledger (compared on replay) and add it
 * to @p out.  For decorators that contribute steps of their own.
 * @param actor NULL for the invocation's policy.
 * @param payload a JSON object, never NULL; borrowed.
 * @return as pl_steps_add(), plus the run-stopping statuses of pl_ctx_call().
 */
int pl_ctx_emit(pl_ctx *ctx, pl_steps *out, pl_step_type type,
                const char *actor, const cJSON *payload);

/**
 * Recorded wall clock: Unix milliseconds, the same on every replay.
 * @return PL_OK; PL_EINVAL (NULL argument, stale context); PL_ENONDET (the
 *         ledger records another step here); PL_ECORRUPT (the recorded
 *         value has the wrong shape or range); PL_ECHECK; PL_ESTORE;
 *         PL_ENOMEM; or the status that stopped the run.
 */
int pl_ctx_now(int64_t *out_unix_ms, pl_ctx *ctx);

/**
 * Recorded randomness: 64 random bits, the same on every replay.
 * @return as pl_ctx_now(), plus PL_EIO (the system's random source failed).
 */
int pl_ctx_random(uint64_t *out, pl_ctx *ctx);

/**
 * Recorded UUID (version 4), the same on every replay; @p out gets
 * PL_UUID_LEN characters and a NUL.
 * @return as pl_ctx_random().
 */
int pl_ctx_uuid(char out[PL_UUID_LEN + 1], pl_ctx *ctx);

/**
 * A side effect's function: produce a value (any JSON).
 * @param[out] out_value a new cJSON the engine takes ownership of.
 * @return PL_OK, or a status that fails the run (a value that is no
 *         pl_status, 1 say, fails it with PL_EPOLICY).
 */
typedef int (*pl_side_effect_fn)(cJSON **out_value, void *user);

/**
 * Run @p fn once and record its value: on replay the recorded value is
 * returned and fn is not called.  The value is durable before this returns,
 * and is the recorded one the first time too (read back from the record,
 * as a replay reads it).
 * @param name a short label, compared on replay.
 * @param[out] out_value caller owns; free with cJSON_Delete().  NULL on
 *             failure.
 * @return PL_OK; fn's status (PL_EPOLICY for one that is no pl_status);
 *         PL_EINVAL (a NULL @p out_value or @p fn, a
 *         @p name not 1..PL_MAX_NAME bytes of UTF-8 without a C0
 *         control character or DEL, a stale context: refused, the run
 *         goes on); the run-stopping statuses of pl_ctx_call().
 */
int pl_ctx_side_effect(cJSON **out_value, pl_ctx *ctx, const char *name, pl_side_effect_fn fn,
                       void *user);

/**
 * As pl_ctx_side_effect(), for a value @p fn reads without acting outside
 * the process (what a connection knows of its server, a configuration
 * loaded at start): recorded once as the same `side_effect` step, and on
 * replay the recorded value is returned and fn is not called; but the
 * value is not made durable before this returns: it goes with the
 * invocation's next commit, as pl_ctx_now()'s does.  A crash before that
 * commit loses it with the steps around it, and so does the run's
 * failure (a failed execution records its reason and drops the steps
 * appended since its last commit): the execution that follows calls fn
 * again.  A call that records nothing else that needs a commit of its own
 * then costs one commit fewer.
 * @param[out] out_value the value fn produced, as recorded; caller owns;
 *             free with cJSON_Delete().
 * @return as pl_ctx_side_effect().
 */
int pl_ctx_capture(cJSON **out_value, pl_ctx *ctx, const char *name, pl_side_effect_fn fn,
                   void *user);

/**
 * Whether a recorded side effect's value still fits the call replaying it
 * (for pl_ctx_side_effect_checked()).  Return true when it does; else
 * false, with a short description of the difference written into @p why
 * (@p why_size bytes, NUL-terminated; no allocation).
 * @param recorded_value borrowed for the call.
 */
typedef bool (*pl_side_effect_match_fn)(const cJSON *recorded_value, char *why,
                                        size_t why_size, void *user);

#define PL_SIDE_EFFECT_MATCH_VERSION 1

/** The match of pl_ctx_side_effect_checked(): its function and user.
 *  Initialise with PL_SIDE_EFFECT_MATCH_INIT. */
typedef struct pl_side_effect_match {
    unsigned version;           /**< PL_SIDE_EFFECT_MATCH_VERSION */
    pl_side_effect_match_fn fn;
    void *user;
} pl_side_effect_match;

#define PL_SIDE_EFFECT_MATCH_INIT { PL_SIDE_EFFECT_MATCH_VERSION, NULL, NULL }

/**
 * As pl_ctx_side_effect(), and on replay @p match is asked whether the
 * recorded value fits this call (say the value records a digest of the
 * request that produced it).  A value that does not fit is a divergence,
 * like a step that differs: PL_EVENT_DIVERGED (its diff's new_payload
 * {"name": name, "mismatch": why}, its detail why), and the run fails with
 * PL_ENONDET.  On the first execution @p match is not called.
 * @param user passed to @p fn; @p match carries its own.
 * @return as pl_ctx_side_effect(); PL_EINVAL also when @p match or its fn
 *         is NULL, or @p match has a wrong version (the run goes on).
 */
int pl_ctx_side_effect_checked(cJSON **out_value, pl_ctx *ctx, const char *name,
                               pl_side_effect_fn fn,
                               const pl_side_effect_match *match, void *user);

/**
 * The version a run takes at a version point: what a run recorded before
 * the point existed gets (Temporal's DEFAULT_VERSION, DBOS's unpatched).
 */
#define PL_VERSION_DEFAULT 0

/**
 * A code version inside a policy, so that code can change while runs
 * recorded by the old code are still live:
 *
 *     int v;
 *     int st = pl_ctx_version(&v, ctx, "express-shipping",
 *                             PL_VERSION_DEFAULT, 1);
 *     if (st) return st;
 *     if (v >= 1) ... the new way ... else ... the old way ...
 *
 * A run that reaches this point for the first time records @p max_supported
 * here, in a marker step (`side_effect` {"name": "version", "change",
 * "version"}), and gets it.  A replay gets what the run recorded: the
 * marker's version when the step at this position is this change's marker;
 * PL_VERSION_DEFAULT when it is any other step (the run was recorded
 * before the change, and nothing is consumed).  So every run takes the
 * branch it was recorded with, and new runs take the newest.
 *
 * A run whose version is below @p min_supported fails at once with
 * PL_ECODEVERSION, its message naming the change, the version recorded and
 * the versions this code supports;
 * raise min_supported once no live run needs an old branch
 * (`ledger-replay --check` lists who needs which), then delete that
 * branch.  Keep the call itself, with min_supported == max_supported:
 * removing it makes the recorded markers diverge.
 *
 * A recorded version above @p max_supported means newer code recorded the
 * run (a rolling deploy: old and new workers on one queue).  The run is
 * not failed: the execution stops writing nothing, the run goes back to
 * the queue as it was, for a worker of the newer code, and the call that
 * continued it (pl_run_continue(), pl_run_resume(), a worker's take)
 * returns PL_ENEWERCODE; a worker does not take it again for a while
 * (100 ms, doubled for each such run in a row, to 4 s).
 *
 * Points are matched by position, like every step; each change id is
 * named once per invocation it guards.
 *
 * @param[out] out_version the version to follow (PL_VERSION_DEFAULT on any
 *        failure).
 * @param change_id 1..PL_MAX_NAME bytes of UTF-8, no C0 control character
 *        or DEL.
 * @param min_supported PL_VERSION_DEFAULT (0) or more, at most
 *        @p max_supported.
 * @param max_supported the newest version, at least 1.
 * @return PL_OK; PL_EINVAL (a NULL or stale argument, a bad change id or
 *         versions); PL_ECODEVERSION (the run has stopped, failed);
 *         PL_ENEWERCODE (the run has stopped, left for newer code); PL_ECHECK
 *         (a check replay reached the point past its record); the
 *         run-stopping statuses of pl_ctx_call().  A PL_EVENT_VERSION event
 *         reports each point a run passes.
 */
int pl_ctx_version(int *out_version, pl_ctx *ctx, const char *change_id,
                   int min_supported, int max_supported);

/**
 * Suspend the run for a human.  The first time, records a `suspend` step with
 * @p prompt and returns PL_ESUSPENDED: return it from the policy, and every
 * caller unwinds.  After pl_run_resume(), the replay reaches this call again
 * and it returns PL_OK with the answer.
 * @param prompt a JSON object, never NULL; borrowed.
 * @param[out] out_answer caller owns; free with cJSON_Delete().  NULL
 *             unless PL_OK.
 * @return PL_OK; PL_ESUSPENDED; PL_EINVAL (a NULL @p prompt, a stale
 *         context: refused, the run goes on); PL_EJSON (a @p prompt that
 *         is not an object: the run stops); the run-stopping statuses of
 *         pl_ctx_call().
 */
int pl_ctx_suspend(cJSON **out_answer, pl_ctx *ctx, const cJSON *prompt);

/**
 * Continue the run as a new one, so that a run that lives for months (a
 * polling loop, a chat agent) keeps each ledger bounded.  Called by the
 * root policy, which then returns as it would to complete: the run ends
 * with the final status PL_RUN_CONTINUED (its result recorded as a
 * completed run's), and in the same transaction its successor is created
 * with the same root policy and @p payload, queued as pl_run_submit()
 * queues a run, for a worker (or pl_run_continue()) to execute: at the
 * run's own place in the queue, with its priority and concurrency key
 * (pl_run_options), so a chain is ordered and limited as one run.  The
 * successor's id is the run's with "~1" appended, then "~2" and so on (a
 * run "chat~7" continues as "chat~8"); each run names the other
 * (pl_run_info.successor and .predecessor, pl_outcome.successor), and
 * `ledger-dump --run ID --chain` lists the chain.  A replay of the run
 * (pl_run_continue(), which replays a continued run as it does a completed
 * one) gives the same outcome and writes nothing.  Events sent to the run
 * (pl_run_signal()) once it has continued reach its successor, also once
 * the run is deleted, while its tombstone lasts; those it had received and
 * not consumed stay with it.
 *
 * Each link is a run of its own: replaying or recovering the newest link
 * costs what its own ledger costs, however long the chain behind it.
 * Deleting and pruning treat a continued run as ended.
 * @param payload a JSON object, never NULL; borrowed.
 * @return PL_OK; PL_EINVAL (not the root policy's context, or a NULL or
 *         non-object payload); PL_ESTATE (called already in this
 *         execution); PL_ELIMIT (the successor's id would be longer than
 *         PL_MAX_RUN_ID, or the payload larger than max_payload);
 *         PL_ENOMEM.
 */
int pl_ctx_continue_as_new(pl_ctx *ctx, const cJSON *payload);

/*
 * The accessors below give NULL (false, 0) for a NULL context; unlike the
 * calls, they do not tell a stale context: read them while the policy runs.
 */

/** @return the run id (borrowed, valid while the policy runs). */
const char *pl_ctx_run_id(const pl_ctx *ctx);

/** @return this invocation's path, "0" for the root (borrowed). */
const char *pl_ctx_path(const pl_ctx *ctx);

/** @return the name of the policy this invocation runs (borrowed). */
const char *pl_ctx_policy(const pl_ctx *ctx);

/**
 * @return a key that is the same for this call on every replay and unique in
 *         the store: "<run id>/<step id of the action_call>".  Pass it to
 *         external services so a repeated side effect is recognised.  The
 *         root invocation's key is "<run id>/0".  Borrowed.
 */
const char *pl_ctx_idempotency_key(const pl_ctx *ctx);

/** @return true while a recorded step remains at this invocation's cursor
 *          (what it appends next is compared, not written), and always in
 *          a check replay (pl_run_options.check), which writes nothing.
 *          For logs and waits only: a policy must not record anything
 *          different on replay. */
bool pl_ctx_replaying(const pl_ctx *ctx);

/**
 * The invocation's deadline, Unix milliseconds on the recorded clock
 * (pl_ctx_now()), or 0 for none.  A call's callee starts with its caller's
 * deadline; the timeout decorator sets one.
 *
 * C cannot stop a running function, so a deadline is cooperative: the
 * callee reads it and gives up in time; the library's own waits (the
 * retry decorator's backoff) never wait past it, and its blocking calls
 * (http_get, run_command, an LLM policy's model call, an MCP tool's call)
 * are cut at it with a "Timeout" error result; and the timeout decorator
 * replaces the result of a callee that returned past it with a recorded
 * "Timeout" error.  Nothing is interrupted.  A run's own waits,
 * pl_ctx_sleep() and pl_ctx_wait_event(), wait what they are given, which
 * is recorded: to bound one by the deadline, give it the time left
 * (pl_ctx_deadline() - pl_ctx_now(), both recorded, so a replay gives the
 * same).
 */
int64_t pl_ctx_deadline(const pl_ctx *ctx);

/**
 * Set this invocation's deadline (0 removes it) for the rest of its chain
 * and every call it makes from here.  A decorator that sets one puts the
 * previous one back when its inner chain returns, as the timeout decorator
 * does.  Not recorded: derive it from recorded values (pl_ctx_now()) so a
 * replay sets the same one.
 * @return PL_OK; PL_EINVAL (negative @p unix_ms, a stale context).
 */
int pl_ctx_set_deadline(pl_ctx *ctx, int64_t unix_ms);

/** @return the engine running this context. */
pl_engine *pl_ctx_engine(const pl_ctx *ctx);

/* clang-format on */

#endif /* POLICYLEDGER_CONTEXT_H */
