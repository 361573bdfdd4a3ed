/*
 * policyledger.h -- durable execution for C programs and LLM agents: every
 * call recorded in a ledger, a crashed run finished by replaying it.
 *
 * This header is the manual.  Read the overview and caveats first; every
 * function below lists what it returns, who owns what, and its thread rules.
 *
 * OVERVIEW
 *
 *   A *policy* is a C function registered by name in a *registry*.  The engine
 *   runs a policy as one *invocation* with its own append-only *ledger* of
 *   immutable *steps*, stored in LMDB or PostgreSQL.  Through its *context* a
 *   policy calls other policies (each call appends an `action_call` step, runs
 *   the callee in a new invocation, and appends an `action_result` step),
 *   reads its ledger, and uses recorded helpers for anything
 *   non-deterministic (clock, randomness, external I/O).
 *
 *   A *run* is one top-level execution.  A run that crashed, failed or was
 *   suspended is continued by running it again: every append is compared with
 *   the step already recorded at that position, recorded results are returned
 *   without executing anything, and past the end of the record appends become
 *   real, durable writes (the one rule of replay).
 *
 * GUARANTEES (as this code keeps them)
 *
 *   - A result that has been appended is never executed again for that run;
 *     replay returns it.  Side effects can repeat only when a process dies
 *     between executing a call and making its result durable; tools close
 *     that window with pl_ctx_idempotency_key().
 *   - Steps never change once durable.  No code path rewrites or deletes a
 *     step of a run.
 *   - Durability per engine: PL_DURABILITY_SYNC (default) makes every result
 *     durable on stable storage before the caller sees it; PL_DURABILITY_GROUP
 *     gives the same guarantee with concurrent runs sharing one commit;
 *     PL_DURABILITY_PROCESS skips fsync (survives a crashed process, not a
 *     crashed machine).
 *   - Every step stores the SHA-256 of its predecessor in the same ledger;
 *     pl_run_verify() checks every chain.
 *
 * CAVEATS
 *
 *   - Policies must be deterministic given their action and their ledger.
 *     Clock, randomness, HTTP and anything else that can change go through
 *     the context (a sub-policy call or a recorded helper).
 *   - Never open the same store twice in one process (pl_engine_open()
 *     refuses with PL_EBUSY), and never use an engine across fork(): a forked
 *     child opens its own.
 *   - An engine is thread-safe across runs: many threads may run different
 *     runs on one engine at once.  A context (pl_ctx) belongs to the thread
 *     running its run and must not be used after its policy returns.
 *   - A registry must not change while an engine that uses it runs.
 *   - Strings and cJSON values passed in are borrowed (copied if kept) unless
 *     a function says it takes ownership.  Returned memory says who frees it.
 *   - Error messages: every failing call sets a one-line message for the
 *     calling thread, read with pl_errmsg().
 *   - Calls (pl_ctx_call(), pl_ctx_call_step(), pl_ctx_call_step_with(),
 *     pl_ctx_call_all(), pl_ctx_invoke(), pl_ctx_invokef()) share one rule:
 *     a callee's error-as-data result returns PL_ERESULT, with the result
 *     handed out as on PL_OK and the run still going (handle it, or return
 *     PL_ERESULT from the policy to fail the run with that error as its
 *     reason); any other non-zero status has stopped the run, except
 *     PL_EINVAL for a stale context or an argument refused before the call.
 *   - Decorator constructors all read `int pl_decorator_X(pl_decorator *out,
 *     ...)`: PL_OK, or PL_EINVAL (with a message) for a NULL out or a bad
 *     configuration.
 *
 * VERSIONS AND THE ABI
 *
 *   Every struct a caller allocates and passes in or out has an `unsigned
 *   version` first field and an _INIT macro (PL_RUN_OPTIONS_INIT,
 *   PL_SCHEMA_ERROR_INIT, ...): declare it with the macro and set fields by
 *   name.  The rule for all of them:
 *
 *   - A struct only grows: fields are appended, never removed, reordered or
 *     retyped, and each append raises its PL_<STRUCT>_VERSION by one.
 *   - The library accepts every version from 1 to the one in this header.
 *     A struct passed in is read up to the last field of its own version;
 *     the fields it does not have take their _INIT values.  A struct filled
 *     in (pl_schema_error, pl_otel_counts, pl_store_stats, pl_llm_tokens)
 *     gets only the fields of its version; its version is left as it is.
 *   - Version 0 (a struct not made with its _INIT) and a version newer than
 *     the library's are refused with PL_EINVAL; pl_errmsg() names the
 *     function, the struct, its version and the versions this library
 *     takes.  In an array (decorators, call specs) every element has the
 *     first element's version.
 *
 *   So code built against an older header keeps working with a newer
 *   library of the same ABI, without a rebuild.  Structs the library hands
 *   to a callback (pl_action, pl_event, pl_replay_diff, pl_run_info) also
 *   only grow at their end: a callback reads the fields its header knows.
 *
 *   PL_ABI_VERSION changes only when a function's signature or the meaning
 *   of an existing field changes; it is the shared library's SONAME major.
 *   A plugin records the ABI it was built for (PL_PLUGIN_DECLARE), and
 *   pl_plugin_load() refuses one built for another.
 *
 *   A host that loads plugins links the shared library (libpolicyledger.so),
 *   never the static one: a plugin links the shared library, and a static
 *   host would run a second copy of it beside its own, with its own state
 *   (errors, registries, engines).  pl_plugin_load() refuses a plugin that
 *   would bind to another copy than the host's, with PL_EPLUGIN.
 *
 * LIMITS
 *
 *   Payloads are JSON objects of at most pl_engine_options.max_payload bytes
 *   encoded (16 MiB by default) nested at most PL_MAX_JSON_DEPTH deep;
 *   names (policies, actors) are 1..PL_MAX_NAME bytes; invocations nest at
 *   most PL_MAX_DEPTH deep; run ids are 1..PL_MAX_RUN_ID bytes of
 *   [A-Za-z0-9._:@~-] ("@" is what a schedule's tick puts in its runs'
 *   ids, "~" what pl_ctx_continue_as_new() appends).
 */
#ifndef POLICYLEDGER_H
#define POLICYLEDGER_H

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versions and limits                                                      */
/* ------------------------------------------------------------------------ */

#define PL_VERSION_MAJOR 2
#define PL_VERSION_MINOR 0
#define PL_VERSION_PATCH 0
#define PL_VERSION_STRING "2.0.0"

/**
 * The binary interface: the shared library's SONAME major
 * (libpolicyledger.so.2), which is PL_VERSION_MAJOR.  See VERSIONS AND THE
 * ABI above: a struct that grows does not change it.
 */
#define PL_ABI_VERSION 2

#define PL_MAX_DEPTH 32      /**< deepest invocation nesting below the root */
#define PL_MAX_NAME 255      /**< longest policy or actor name, in bytes */
#define PL_MAX_RUN_ID 128    /**< longest run id, in bytes */
#define PL_MAX_JSON_DEPTH 30 /**< most nested arrays/objects in a payload,
                                  counting the payload object itself */
#define PL_UUID_LEN 36       /**< length of a UUID string, without its NUL */
#define PL_HASH_LEN 32       /**< bytes in a step hash (SHA-256) */

/** @return the library's version string, e.g. "0.1.0". */
const char *pl_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/*
 * Every function that can fail returns int: PL_OK (0) or a negative
 * pl_status.  Codes are append-only: a code is never renumbered or removed.
 *
 * A store's own failures: PL_ENOSPC when its file system is full, a quota
 * or the process's file size limit (RLIMIT_FSIZE) is reached, PL_EACCES
 * when it is read-only (EROFS) or not permitted (EACCES, EPERM), PL_EMAPFULL
 * when it may not grow past map_size_max, PL_ESTORE for anything else (a
 * failing disk's EIO, say); each message names the cause and the store's
 * path.  None loses anything durable: a run that met one continues with
 * pl_run_continue() once the cause is gone.
 */
#define PL_STATUS_MAP(X)                                                       \
    X(OK, 0, "success")                                                        \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of memory")                                             \
    X(ESTORE, -3, "store failure")                                             \
    X(EMAPFULL, -4, "store is full and cannot grow")                           \
    X(ECORRUPT, -5, "corrupted or malformed stored data")                      \
    X(EVERSION, -6, "unknown format version")                                  \
    X(ENOTFOUND, -7, "not found")                                              \
    X(EEXIST, -8, "already exists")                                            \
    X(ENONDET, -9, "non-determinism: replay diverged from the ledger")         \
    X(ESUSPENDED, -10, "run suspended")                                        \
    X(ESTATE, -11, "run is not in a state that allows this")                   \
    X(ETOKEN, -12, "wrong resume token")                                       \
    X(EBUSY, -13, "in use by another owner")                                   \
    X(EPOLICY, -14, "policy failed")                                           \
    X(ELIMIT, -15, "limit exceeded")                                           \
    X(EJSON, -16, "malformed JSON or payload is not a JSON object")            \
    X(EIO, -17, "I/O error")                                                   \
    X(ECHECK, -18, "check mode: replay would have to execute")               \
    X(ERESULT, -19, "the called policy returned an error result")            \
    X(EPLUGIN, -20, "plugin cannot be loaded")                                 \
    X(EFORBIDDEN, -21, "refused by the sandbox")                               \
    X(ENOSPC, -22, "no space left for the store")                              \
    X(EACCES, -23, "store is read-only or not accessible")                    \
    X(ECANCELLED, -24, "run cancelled")                                        \
    X(ETIMEDOUT, -25, "wait timed out")                                        \
    X(EDEADLINE, -26, "run deadline exceeded")                                 \
    X(ECODEVERSION, -27, "run recorded by a code version this code does not support")

typedef enum pl_status {
#define PL__STATUS_ENUM(name, value, text) PL_##name = value,
    PL_STATUS_MAP(PL__STATUS_ENUM)
#undef PL__STATUS_ENUM
} pl_status;

/** @return a static description of @p status ("unknown status" if none). */
const char *pl_strerror(int status);

/** @return the status's symbolic name, e.g. "PL_ENONDET". */
const char *pl_status_name(int status);

/**
 * @return the calling thread's message for the last failure of any pl_
 *         function: what failed and where (run, invocation, step).  Never
 *         NULL; borrowed, valid until the thread's next failing pl_ call.
 */
const char *pl_errmsg(void);

/**
 * Set the calling thread's message (read with pl_errmsg()) from a printf
 * format, and return @p status: for user policies and decorators,
 * `return pl_errorf(PL_EINVAL, "bad limit %d", n);`.  The message may
 * quote pl_errmsg() itself.  A NULL @p fmt sets the status's name.
 * @return @p status.
 */
int pl_errorf(int status, const char *fmt, ...);

/* ------------------------------------------------------------------------ */
/* Error-as-data codes                                                      */
/* ------------------------------------------------------------------------ */

/*
 * A recoverable failure of a tool or sub-policy is not a status: it is an
 * `action_result` whose payload is
 *     {"error": true, "code": "<code>", "message": "..."}
 * so that the calling policy (an LLM, say) can decide what to do.
 */
#define PL_ERR_INVALID_INPUT "InvalidInput"
#define PL_ERR_TIMEOUT "Timeout"
#define PL_ERR_RETRYABLE_SERVER "RetryableServer"
#define PL_ERR_RATE_LIMITED "RateLimited"
#define PL_ERR_OUTPUT_SCHEMA_MISMATCH "OutputSchemaMismatch"
#define PL_ERR_NO_RESULTS "NoResults"
#define PL_ERR_TOOL_BUG "ToolBug"
#define PL_ERR_UNAUTHORIZED "Unauthorized"
#define PL_ERR_FORBIDDEN "Forbidden"
#define PL_ERR_NOT_FOUND "NotFound"
#define PL_ERR_NOT_ALLOWED "NotAllowed"
#define PL_ERR_BUDGET_EXCEEDED "BudgetExceeded"
#define PL_ERR_IN_DOUBT "InDoubt"
#define PL_ERR_CANCELLED "Cancelled"
#define PL_ERR_DEADLINE_EXCEEDED "DeadlineExceeded"

/* ------------------------------------------------------------------------ */
/* Steps                                                                    */
/* ------------------------------------------------------------------------ */

/** Step types.  Stored on disk: values never change. */
typedef enum pl_step_type {
    PL_STEP_TEXT = 1,          /**< {"text": "..."} from a user, model, ... */
    PL_STEP_ACTION_CALL = 2,   /**< {"policy": name, "payload": {...}} */
    PL_STEP_ACTION_RESULT = 3, /**< what the called policy returned */
    PL_STEP_SUSPEND = 4,       /**< {"prompt": {...}}: waiting for a human */
    PL_STEP_RESUME = 5,        /**< {"answer": {...}}: the human's answer */
    PL_STEP_SIDE_EFFECT = 6,   /**< {"name": ..., "value": ...}: recorded helper */
    PL_STEP_ERROR = 7,         /**< {"error": true, "code", "message"} */
    PL_STEP_WAIT = 8,   /**< {"until": ms} (a sleep) or {"event": name,
                             "until": ms or 0} (a wait for an event) */
    PL_STEP_EVENT = 9,  /**< what ended a wait for an event:
                             {"name", "payload", "seq"} or {"name",
                             "timeout": true} */
    PL_STEP_CANCEL = 10 /**< {"reason": text}: the run's cancellation, seen
                             at this call boundary */
} pl_step_type;

/** @return "text", "action_call", ... or NULL for an unknown type. */
const char *pl_step_type_name(pl_step_type type);

/**
 * Parse a step type name.
 * @return PL_OK, or PL_EINVAL for an unknown name.
 */
int pl_step_type_parse(pl_step_type *out, const char *name);

/** One immutable step.  Opaque. */
typedef struct pl_step pl_step;

/** An ordered list of steps.  Opaque. */
typedef struct pl_steps pl_steps;

/*
 * The step accessors below are NULL-safe: a NULL step gives 0, NULL, ""
 * or false, as each says, and never crashes.
 */

/** @return the step's type; 0 (no type) for a NULL step. */
pl_step_type pl_step_type_of(const pl_step *step);

/** @return the step's actor; borrowed, valid until the step is freed.  NULL
 *  for a NULL step. */
const char *pl_step_actor(const pl_step *step);

/**
 * @return the step's payload, a JSON object; borrowed, valid until the step
 *         is freed, and read-only: its nodes share one allocation with the
 *         step, so never pass it to cJSON_Delete() or any cJSON function
 *         that changes or detaches an item (cJSON_Duplicate() it for a
 *         copy of your own).  Decoded on first use; NULL only for a NULL
 *         step or when out of memory.
 */
const cJSON *pl_step_payload(const pl_step *step);

/**
 * @return the step's id, "<invocation path>:<seq>" (e.g. "0.3:1"), or "" for
 *         a step that is not in a ledger yet (or a NULL step).  Borrowed.
 *         Ids derive from position, so a replay reproduces them.
 */
const char *pl_step_id(const pl_step *step);

/** @return the step's sequence number in its ledger (0-based); 0 for NULL. */
uint32_t pl_step_seq(const pl_step *step);

/** @return when the step was first appended (Unix microseconds), or 0 (and
 *  for a NULL step). */
int64_t pl_step_time_us(const pl_step *step);

/**
 * @return for an `action_call`, the code identity of the callee when it was
 *         recorded (a policy's code_version or a plugin's build id), or NULL
 *         (and for a NULL step).  Borrowed.
 */
const char *pl_step_code(const pl_step *step);

/** @return true when the step's payload is an error-as-data object; false
 *  for a NULL step. */
bool pl_step_is_error(const pl_step *step);

/** @return the error code of an error-as-data step, or NULL (and for a NULL
 *  step).  Borrowed. */
const char *pl_step_error_code(const pl_step *step);

/**
 * Copy the step's stored hash chain link: the SHA-256 of the previous step
 * of the same ledger (its key and record); for step 0, the run's genesis
 * hash (SHA-256 of "policyledger/run" NUL <run id>).
 * @return PL_OK; PL_ENOTFOUND for a step that is not in a ledger; PL_EINVAL
 *         for a NULL argument.
 */
int pl_step_prev_hash(uint8_t out[PL_HASH_LEN], const pl_step *step);

/**
 * Copy the step's own hash: SHA-256 of its key (run, invocation, position)
 * and its stored record, the value the next step of its ledger stores as
 * its prev hash (and a call's action_result as its link).
 * @return PL_OK; PL_ENOTFOUND for a step not read from a store (made by a
 *         policy) or not stored on its own (a one-step callee ledger folded
 *         into its caller's action_result, see pl_run_walk()); PL_EINVAL
 *         for a NULL argument.
 */
int pl_step_hash(uint8_t out[PL_HASH_LEN], const pl_step *step);

/** Free a step.  NULL does nothing. */
void pl_step_free(pl_step *step);

/**
 * Create an empty step list.
 * @param[out] out caller owns; free with pl_steps_free().
 * @return PL_OK or PL_ENOMEM.
 */
int pl_steps_new(pl_steps **out);

/** Free a step list and its steps.  NULL does nothing. */
void pl_steps_free(pl_steps *steps);

/** Free every step of a list, leaving it empty.  NULL does nothing. */
void pl_steps_clear(pl_steps *steps);

/**
 * Move every step of @p src to the end of @p dst, in order, leaving @p src
 * empty: all or nothing.  For decorators that collect a turn's steps in a
 * list of their own.
 * @return PL_OK; PL_EINVAL (NULL or the same list twice); PL_ENOMEM (both
 *         lists unchanged).
 */
int pl_steps_move(pl_steps *dst, pl_steps *src);

/**
 * Append a step to a list, taking ownership of it (on failure too: it is
 * freed).  For a step from pl_ctx_call() or pl_ctx_call_step().
 * @return PL_OK; PL_EINVAL (NULL argument); PL_ENOMEM.
 */
int pl_steps_push(pl_steps *steps, pl_step *step);

/** @return the number of steps in the list; 0 for a NULL list. */
size_t pl_steps_count(const pl_steps *steps);

/** @return step @p i (borrowed, valid until the list is freed), or NULL. */
const pl_step *pl_steps_at(const pl_steps *steps, size_t i);

/**
 * Append a step to a list.  The payload is encoded at once, so it stays
 * borrowed: the caller keeps and frees it.
 * @param type    the step's type.
 * @param actor   who produced the step; NULL means the list's default actor
 *                (for the list a policy fills, the policy's name).
 * @param payload a JSON object, never NULL (a NULL could be a failed
 *                cJSON_CreateObject(), so it is refused rather than
 *                recorded as {}; an empty payload is pl_json_empty()).
 * @return PL_OK; PL_EINVAL (NULL list or payload, bad type or actor, no
 *         default actor; wait, event and cancel are the engine's own
 *         types); PL_EJSON
 *         (payload not an object, or holds a non-finite number); PL_ELIMIT
 *         (payload too large or too deep); PL_ENOMEM.
 */
int pl_steps_add(pl_steps *steps, pl_step_type type, const char *actor,
                 const cJSON *payload);

/** Append a `text` step {"text": text}.  Errors as pl_steps_add(). */
int pl_steps_add_text(pl_steps *steps, const char *actor, const char *text);

/**
 * Append an `action_result` step: the usual way for a tool to return its
 * result.  Errors as pl_steps_add().
 */
int pl_steps_add_result(pl_steps *steps, const cJSON *payload);

/**
 * Append an `action_call` step {"policy": policy, "payload": payload} for the
 * pl_decorator_invoke_action() decorator to execute.  Errors as pl_steps_add().
 */
int pl_steps_add_call(pl_steps *steps, const char *policy,
                      const cJSON *payload);

/**
 * Append an error-as-data `action_result`
 * {"error": true, "code": code, "message": message}.
 * @param code one of the PL_ERR_* codes (or another short name).
 * Errors as pl_steps_add().
 */
int pl_steps_add_error(pl_steps *steps, const char *code, const char *message);

/* ------------------------------------------------------------------------ */
/* Actions, policies, registry                                              */
/* ------------------------------------------------------------------------ */

typedef struct pl_ctx pl_ctx;
typedef struct pl_engine pl_engine;
typedef struct pl_registry pl_registry;
typedef struct pl_decorator pl_decorator;

#define PL_ACTION_VERSION 1

/**
 * What is passed into a policy: the edge of the graph.  Initialise with
 * PL_ACTION_INIT and set fields by name (VERSIONS AND THE ABI above).
 * Every pointer is borrowed for the call.
 */
typedef struct pl_action {
    unsigned version;            /**< PL_ACTION_VERSION */
    const char *policy;          /**< the policy to run */
    const cJSON *payload;        /**< a JSON object, never NULL: an empty
                                      payload is {} (pl_json_empty()) */
    const char *const *actions;  /**< names the policy may have invoked */
    size_t n_actions;            /**< entries in actions */
    const pl_steps *seed;        /**< optional steps that open the ledger */
} pl_action;

#define PL_ACTION_INIT { PL_ACTION_VERSION, NULL, NULL, NULL, 0, NULL }

/**
 * @return a read-only empty JSON object {}, for an action or step that has
 *         nothing to carry.  Static: never free or change it.
 */
const cJSON *pl_json_empty(void);

/**
 * A policy.  It reads action->payload and its ledger (pl_ctx_ledger()), may
 * call other policies through @p ctx, and adds the steps it returns to
 * @p out (the last one is the result its caller sees; none means {}).
 * @return PL_OK; or, unchanged, the status of a pl_ctx_* call that failed
 *         (PL_ESUSPENDED above all: a suspended run unwinds every caller);
 *         any other non-zero value fails the run with a recorded reason.
 *         Recoverable failures are error-as-data: pl_steps_add_error().
 */
typedef int (*pl_policy_fn)(pl_ctx *ctx, const pl_action *action,
                            pl_steps *out, void *user);

/** What recovery does with a non-idempotent call that was in flight. */
typedef enum pl_in_doubt {
    PL_IN_DOUBT_RERUN = 0,  /**< run it again (it must make that safe) */
    PL_IN_DOUBT_FAIL = 1,   /**< result becomes an "InDoubt" error */
    PL_IN_DOUBT_SUSPEND = 2 /**< suspend the run for a human to decide */
} pl_in_doubt;

/** Version 2 appended output_schema. */
#define PL_POLICY_DEF_VERSION 2

/** A policy's registration.  Initialise with PL_POLICY_DEF_INIT. */
typedef struct pl_policy_def {
    unsigned version;         /**< PL_POLICY_DEF_VERSION */
    const char *name;         /**< 1..PL_MAX_NAME bytes, no control chars */
    pl_policy_fn fn;          /**< the policy */
    void *user;               /**< passed to fn */
    const char *description;  /**< for tool catalogs; may be NULL */
    const char *input_schema; /**< JSON Schema text (an object) or NULL */
    /**
     * true (default): re-running the policy after a crash is harmless, so its
     * call is made durable together with its result.  false: its
     * `action_call` is made durable before it runs, and after a crash inside
     * it, @ref in_doubt decides.
     */
    bool idempotent;
    pl_in_doubt in_doubt;     /**< used when !idempotent */
    const char *code_version; /**< code identity recorded in action_call */
    /** JSON Schema text (an object) the policy's result must match, or
     *  NULL; checked by pl_decorator_validate().  Since version 2. */
    const char *output_schema;
} pl_policy_def;

#define PL_POLICY_DEF_INIT                                                     \
    { PL_POLICY_DEF_VERSION, NULL, NULL, NULL, NULL, NULL, true,               \
      PL_IN_DOUBT_RERUN, NULL, NULL }

/**
 * Create an empty registry.
 * @param[out] out caller owns; free with pl_registry_free().
 * @return PL_OK or PL_ENOMEM.
 */
int pl_registry_new(pl_registry **out);

/** Free a registry.  NULL does nothing. */
void pl_registry_free(pl_registry *reg);

/**
 * Register a policy.  Strings are copied.  input_schema and output_schema
 * are compiled (pl_schema_compile_text()) to refuse a bad schema here
 * rather than at a call.
 * @return PL_OK; PL_EEXIST (name taken); PL_EINVAL (bad name, NULL fn, wrong
 *         def version, a schema keyword with a bad value: the message names
 *         the schema and where in it); PL_EJSON (input_schema or
 *         output_schema is not a JSON object); PL_ELIMIT (a schema nests
 *         too deep); PL_ENOMEM.
 */
int pl_registry_add(pl_registry *reg, const pl_policy_def *def);

/**
 * Register a policy whose data (@p def->user) the registry owns: when the
 * registry is freed, after its policies, it calls @p release(def->user).
 * For a policy made at run time with data of its own (an LLM policy, a
 * plugin's).  On failure nothing is registered and @p release is not
 * called: the caller still owns def->user.
 * @return as pl_registry_add(); PL_EINVAL also for a NULL @p release.
 */
int pl_registry_add_owned(pl_registry *reg, const pl_policy_def *def,
                          void (*release)(void *user));

/**
 * Register @p fn as policy @p name, passing it @p user, every other field
 * at its PL_POLICY_DEF_INIT default (idempotent, no description, no
 * schema): the common case in one call.  For metadata, fill a
 * pl_policy_def and use pl_registry_add().
 *
 *     pl_registry_add_fn(reg, "add", add, NULL);
 *
 * @return as pl_registry_add().
 */
int pl_registry_add_fn(pl_registry *reg, const char *name, pl_policy_fn fn,
                       void *user);

/**
 * @return the registration of @p name (borrowed, valid until the registry is
 *         freed), or NULL.  Its strings are the registry's copies.
 */
const pl_policy_def *pl_registry_find(const pl_registry *reg,
                                      const char *name);

/** @return the number of registered policies. */
size_t pl_registry_count(const pl_registry *reg);

/** @return registration @p i in registration order, or NULL.  Borrowed. */
const pl_policy_def *pl_registry_at(const pl_registry *reg, size_t i);

/* ------------------------------------------------------------------------ */
/* Plugins                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A plugin is a shared object that registers policies.  It defines two
 * symbols, which this header declares with C linkage and default
 * visibility (so a plugin may be C++, and may be built with
 * -fvisibility=hidden):
 *
 *     #include <policyledger.h>
 *     PL_PLUGIN_DECLARE;                    // the ABI it was built for
 *     int pl_plugin_init(pl_registry *reg)  // its entry point
 *     {
 *         return pl_registry_add_fn(reg, "charge", charge, NULL);
 *     }
 *
 * Build it with `cc -shared -fPIC` (or c++) and link it against the shared
 * libpolicyledger.  The program that loads it must link the shared library
 * too: see VERSIONS AND THE ABI above.
 */

/** The name of a plugin's entry point, a pl_plugin_init_fn. */
#define PL_PLUGIN_ENTRY "pl_plugin_init"

/** The name of the constant that declares a plugin's ABI version. */
#define PL_PLUGIN_ABI_SYMBOL "pl_plugin_abi"

/** Default visibility for a plugin's two symbols (nothing where the
 *  compiler has no visibility attribute). */
#if defined(__GNUC__) || defined(__clang__)
#define PL_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define PL_PLUGIN_EXPORT
#endif

/** A plugin's ABI version, which PL_PLUGIN_DECLARE defines. */
PL_PLUGIN_EXPORT extern const unsigned pl_plugin_abi;

/** A plugin's entry point, which the plugin defines: see
 *  pl_plugin_init_fn. */
PL_PLUGIN_EXPORT int pl_plugin_init(pl_registry *reg);

/** Put once, at file scope, in every plugin. */
#define PL_PLUGIN_DECLARE const unsigned pl_plugin_abi = PL_ABI_VERSION

/**
 * A plugin's entry point: register the plugin's policies in @p reg.
 * @return PL_OK, or a negative pl_status (with a message through the
 *         registry's own errors, or just the status) to refuse loading.
 */
typedef int (*pl_plugin_init_fn)(pl_registry *reg);

/**
 * Load a plugin and register its policies in @p reg: all of them, or (on
 * any failure) none, leaving @p reg exactly as it was.
 *
 * The shared object stays loaded until @p reg is freed.  Every policy it
 * registers without a code_version gets the plugin's code identity:
 * "build-id:<hex>" from its GNU build-id note, or "sha256:<hex>" of the
 * file's bytes when it has none.  So a run's action_calls say which build
 * recorded them (pl_step_code()).
 *
 * @return PL_OK; PL_ENOTFOUND (no such file); PL_EPLUGIN (not a loadable
 *         shared object, or no PL_PLUGIN_ENTRY or PL_PLUGIN_ABI_SYMBOL, or
 *         it would use another copy of this library than the caller's: a
 *         host linked with the static library); PL_EVERSION (built for
 *         another ABI version: the message names the plugin and both
 *         versions); PL_EEXIST (a policy
 *         name is registered already); the entry point's own status when
 *         it fails (PL_EPLUGIN if that is not a pl_status); PL_EINVAL;
 *         PL_ENOMEM.  pl_errmsg() names the file and the problem.
 */
int pl_plugin_load(pl_registry *reg, const char *path);

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum pl_event_kind {
    PL_EVENT_RUN_STARTED = 1,    /**< a run starts or continues */
    PL_EVENT_CALL_STARTED = 2,   /**< a call is about to execute its callee */
    PL_EVENT_CALL_SERVED = 3,    /**< a call's result came from the ledger */
    PL_EVENT_CALL_COMPLETED = 4, /**< a call executed and has its result */
    PL_EVENT_CALL_FAILED = 5,    /**< a call ended in an error result or
                                      failed the run (status says which) */
    PL_EVENT_STEP_APPENDED = 6,  /**< a new step was appended (not yet
                                      durable: see PL_EVENT_COMMIT) */
    PL_EVENT_STEP_REPLAYED = 7,  /**< an append matched the recorded step */
    PL_EVENT_COMMIT = 8,         /**< appended steps became durable; seq is
                                      how many */
    PL_EVENT_CODE_CHANGED = 9,   /**< a replayed call was recorded by other
                                      code (detail and diff name both) */
    PL_EVENT_RUN_SUSPENDED = 10,
    PL_EVENT_RUN_COMPLETED = 11,
    PL_EVENT_RUN_FAILED = 12,
    PL_EVENT_DIVERGED = 13,      /**< a replayed step differs from the one
                                      recorded (diff says how); the run
                                      stops with PL_ENONDET */
    PL_EVENT_STORE_LOST = 14,    /**< pl_worker_run(): the store stopped
                                      answering; detail is the cause, status
                                      the pl_status; no run_id.  Once per
                                      outage */
    PL_EVENT_STORE_BACK = 15,    /**< pl_worker_run(): the store answers
                                      again (detail says after how long);
                                      the runs the outage cut off are taken
                                      back at once, their leases being the
                                      worker's own */
    PL_EVENT_SCHEDULE_FAILED = 16, /**< pl_worker_run(): firing the
                                       schedules failed (status and detail
                                       say why; no run_id); it tries again
                                       a second later */
    PL_EVENT_VERSION = 17        /**< a pl_ctx_version() point: detail is
                                      the change id, version the version
                                      the run takes; step_type is
                                      PL_STEP_SIDE_EFFECT when its marker
                                      is recorded (seq: the marker), 0 when
                                      the run was recorded before the
                                      change (PL_VERSION_DEFAULT); status
                                      PL_ECODEVERSION when this code does
                                      not support that version (the run
                                      stops there) */
} pl_event_kind;

/** @return "run_started", "call_served", ... or NULL. */
const char *pl_event_kind_name(pl_event_kind kind);

/**
 * A recorded step set beside what replay produced in its place, for
 * PL_EVENT_DIVERGED (the first difference of a run) and
 * PL_EVENT_CODE_CHANGED (a call that replays the same under other code).
 *
 * The code identities say which code stands behind the step: the step's own
 * for an `action_call` (its callee's code_version or plugin build id), else
 * that of the invocation that appended it (named by its caller's
 * `action_call`, or for the root by the run's record).  recorded_code is
 * what the ledger names, NULL when it names none; new_code what the
 * registry has now, NULL when it has none.
 */
typedef struct pl_replay_diff {
    const char *step_id;          /**< "<path>:<seq>" of the position */
    pl_step_type recorded_type;   /**< the recorded step */
    const char *recorded_actor;
    const char *recorded_payload; /**< compact JSON, cut to about 200
                                       bytes ("..."); NULL if unreadable */
    const char *recorded_code;
    pl_step_type new_type;        /**< the new step; 0 when the policy
                                       ended there and appended none */
    const char *new_actor;        /**< NULL when new_type is 0 */
    const char *new_payload;      /**< as recorded_payload; NULL when the
                                       engine expected a step of its own
                                       (a call's result, a resume) */
    const char *new_code;
} pl_replay_diff;

/** One transition.  Every pointer is borrowed for the callback's duration. */
typedef struct pl_event {
    pl_event_kind kind;
    const char *run_id;
    const char *path;       /**< invocation path ("0" is the root) */
    uint32_t seq;           /**< step events: the step; call events: the
                                 action_call's position in the caller */
    const char *policy;     /**< call events: the callee; step events: the
                                 actor; run events: the root policy */
    pl_step_type step_type; /**< step events */
    int status;             /**< failures: the pl_status (0 for an error
                                 result) */
    uint64_t elapsed_ns;    /**< call and run ends, commits */
    const char *detail;     /**< a reason, an error code, or NULL */
    const pl_replay_diff *diff; /**< PL_EVENT_DIVERGED and
                                     PL_EVENT_CODE_CHANGED; else NULL */
    uint64_t tokens_in;  /**< PL_EVENT_CALL_COMPLETED and _FAILED of an
                              executed call whose result carries the
                              numbers "tokens_in" and "tokens_out" (an
                              LLM policy's usage, policyledger_llm.h):
                              the model's input tokens; else 0 */
    uint64_t tokens_out; /**< likewise, the output tokens */
    int version;         /**< PL_EVENT_VERSION: the version; else 0 */
} pl_event;

/**
 * Event callback.  Called synchronously on the thread running the run (and
 * on a fan-out's threads, concurrently: pl_ctx_call_all()); it must not
 * call back into the engine for the same run.
 */
typedef void (*pl_event_fn)(const pl_event *event, void *user);

/* ------------------------------------------------------------------------ */
/* Engine                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum pl_durability {
    PL_DURABILITY_SYNC = 0,   /**< fsync per commit (default) */
    PL_DURABILITY_GROUP = 1,  /**< concurrent runs share commits and fsyncs */
    PL_DURABILITY_PROCESS = 2 /**< no fsync: survives process crashes only */
} pl_durability;

/** @return "sync", "group", "process" or NULL. */
const char *pl_durability_name(pl_durability d);

/** Parse "sync", "group" or "process".  @return PL_OK or PL_EINVAL. */
int pl_durability_parse(pl_durability *out, const char *name);

/* Version 2 appended read_only, version 3 host_id and lease_ms, version 4
 * no_create, version 5 retain_ms and tombstone_ms. */
#define PL_ENGINE_OPTIONS_VERSION 5

/** Engine options.  Initialise with PL_ENGINE_OPTIONS_INIT. */
typedef struct pl_engine_options {
    unsigned version;          /**< PL_ENGINE_OPTIONS_VERSION */
    pl_durability durability;  /**< default PL_DURABILITY_SYNC */
    size_t map_size;           /**< initial map size; 0 = 64 MiB */
    size_t map_size_max;       /**< growth limit; 0 = no limit */
    unsigned max_readers;      /**< LMDB reader slots; 0 = 126 */
    size_t max_payload;        /**< largest encoded payload; 0 = 16 MiB;
                                    at most 1 GiB (more is PL_EINVAL) */
    pl_event_fn on_event;      /**< may be NULL */
    void *event_user;          /**< passed to on_event */
    /**
     * Since version 2.  Open an existing store for reading only: never
     * create one (a missing path is PL_ENOTFOUND, a file that is not a
     * store PL_ECORRUPT), never write, never take a run's ownership.  Works
     * while another process writes the store.  Starting, continuing or
     * resuming a run fails with PL_ESTATE.  Steps a writer has committed in
     * PL_DURABILITY_GROUP but not yet moved from its journal are not seen
     * until the writer (or any writable engine) moves them.
     */
    bool read_only;
    /**
     * Since version 3.  This engine's host in its worker id (host id, pid
     * and process start time), which names the holder of every run lease
     * it takes: NULL = the PL_WORKER_HOST environment variable, else the
     * host name.  Engines on different machines sharing a PostgreSQL store
     * need distinct host ids; at most 255 bytes.
     */
    const char *host_id;
    /**
     * Since version 3.  How long a run's lease lasts, in milliseconds: 0 =
     * 30000.  The engine renews its leases every lease_ms / 3 from a thread
     * of its own, also while a call blocks; a run whose lease has expired
     * (its worker died or stopped renewing) may be taken by any worker.
     * At least 100.
     */
    unsigned lease_ms;
    /**
     * Since version 4.  Open an existing store only, for writing: never
     * create one.  A missing file, directory or PostgreSQL schema is
     * PL_ENOTFOUND, an empty file PL_ECORRUPT, and nothing is created.
     * false (the default) creates the store when it is missing.
     */
    bool no_create;
    /**
     * Since version 5.  The retention rule: runs that have ended (completed,
     * failed, cancelled, continued) whose last write is at least this many
     * milliseconds old are deleted by the
     * engine's workers (pl_worker_run(), see pl_worker_options.retain_ms),
     * leaving tombstones.  0 (the default) keeps every run.
     */
    uint64_t retain_ms;
    /**
     * Since version 5.  How long a deleted run's tombstone keeps its id,
     * in milliseconds: 0 = 7 days.
     */
    uint64_t tombstone_ms;
} pl_engine_options;

#define PL_ENGINE_OPTIONS_INIT                                                 \
    { PL_ENGINE_OPTIONS_VERSION, PL_DURABILITY_SYNC, 0, 0, 0, 0, NULL, NULL,   \
      false, NULL, 0, false, 0, 0 }

/**
 * Open (creating if needed) a store and an engine on it.
 * @param[out] out      caller owns; close with pl_engine_close().
 * @param path          an existing directory (LMDB's data.mdb and lock.mdb
 *                      go inside), or a file path (the data file; the lock
 *                      file is PATH-lock); or a postgresql:// (postgres://)
 *                      connection URI, which opens a PostgreSQL store in
 *                      the schema its `schema=NAME` parameter names
 *                      (default "policyledger"), creating it if needed.
 *                      A library built without PostgreSQL
 *                      (PL_WITH_POSTGRESQL=OFF) refuses such a URI with
 *                      PL_EINVAL, saying so.
 * @param registry      borrowed: must outlive the engine and not change
 *                      while the engine runs.
 * @param opts          NULL for defaults.
 * @return PL_OK; PL_EINVAL (also max_payload over 1 GiB); PL_EBUSY (this
 *         process has the store open already); PL_EVERSION (store written
 *         by an unknown format); PL_ECORRUPT (not a policyledger store:
 *         another program's file, LMDB environment or schema, in which
 *         nothing is created; or a store file shorter than LMDB's record
 *         of its last page, which is never mapped); PL_ENOTFOUND (no
 *         store there, with no_create or read_only);
 *         PL_EACCES (the store cannot be written: a read-only file
 *         system or no permission; open it with read_only to read it);
 *         PL_ENOSPC; PL_ESTORE; PL_ENOMEM.
 */
int pl_engine_open(pl_engine **out, const char *path,
                   const pl_registry *registry,
                   const pl_engine_options *opts);

/**
 * Close an engine.  No run may be executing on it, and every pool on it
 * must have been freed.  NULL does nothing.
 */
void pl_engine_close(pl_engine *engine);

/** @return the engine's registry (borrowed). */
const pl_registry *pl_engine_registry(const pl_engine *engine);

/** @return the engine's durability mode. */
pl_durability pl_engine_durability(const pl_engine *engine);

#define PL_STORE_STATS_VERSION 1

/** A store's size and contents, from pl_engine_stats().  Initialise with
 *  PL_STORE_STATS_INIT. */
typedef struct pl_store_stats {
    unsigned version;     /**< PL_STORE_STATS_VERSION */
    uint64_t file_bytes;  /**< the data file's size on disk */
    uint64_t map_bytes;   /**< the store's current map size */
    uint64_t page_size;   /**< bytes per page */
    uint64_t used_pages;  /**< pages in use, free ones included */
    uint64_t free_pages;  /**< pages freed and awaiting reuse */
    uint64_t runs;        /**< run records */
    uint64_t step_records; /**< stored step records (folded steps and
                                steps still in the journal not counted) */
} pl_store_stats;

#define PL_STORE_STATS_INIT { PL_STORE_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0 }

/**
 * Read a store's statistics, in one read transaction.
 * @param[out] out made with PL_STORE_STATS_INIT.
 * @return PL_OK; PL_EINVAL (NULL argument or unknown version); PL_ESTORE.
 */
int pl_engine_stats(pl_store_stats *out, pl_engine *engine);

/**
 * A number that moves whenever the store may have changed, read in one
 * cheap step, for a program that polls a store others write (a viewer):
 * while it stays the same, nothing was committed.  LMDB: the last write
 * transaction's id, moved by every process's writes; PostgreSQL: the
 * server's WAL position, which writes to other schemas and databases of
 * the server move too.  Only equality means anything.
 * @return PL_OK; PL_EINVAL (NULL argument); PL_ESTORE.
 */
int pl_engine_change_mark(uint64_t *out, pl_engine *engine);

/* ------------------------------------------------------------------------ */
/* Runs                                                                     */
/* ------------------------------------------------------------------------ */

/** Run status.  Stored on disk: values never change. */
typedef enum pl_run_status {
    PL_RUN_RUNNING = 1,   /**< executing now, or its owner crashed */
    PL_RUN_SUSPENDED = 2, /**< waiting for pl_run_resume() */
    PL_RUN_COMPLETED = 3,
    PL_RUN_FAILED = 4,    /**< failed with a recorded reason */
    PL_RUN_SUBMITTED = 5, /**< queued by pl_run_submit(), not yet taken */
    PL_RUN_WAITING = 6,   /**< parked: sleeping, or waiting for an event
                               (see Time and events) */
    PL_RUN_CANCELLED = 7, /**< ended by pl_run_cancel(), with its reason */
    PL_RUN_SUPERSEDED = 8, /**< final: replaced by a successor that goes on
                                with newer code (pl_run_upgrade()) */
    PL_RUN_CONTINUED = 9   /**< final: ended by pl_ctx_continue_as_new(); its
                                successor goes on (pl_run_info.successor) */
} pl_run_status;

/** @return "running", "suspended", "completed", "failed", "submitted",
 *  "waiting", "cancelled", "superseded", "continued" or NULL. */
const char *pl_run_status_name(pl_run_status status);

/**
 * What pl_run_start() does when pl_run_options.run_id names a run that
 * exists already.  In every mode but PL_IF_EXISTS_FAIL the existing run's
 * root must be the policy and payload asked for: another root is PL_EEXIST.
 */
typedef enum pl_if_exists {
    /** PL_EEXIST, and no outcome (the default). */
    PL_IF_EXISTS_FAIL = 0,
    /** Continue it as pl_run_continue() does (finish a crashed run, retry a
     *  failed one, replay a completed one; PL_EBUSY while another owner runs
     *  it); a suspended run gives its suspended outcome, as recorded. */
    PL_IF_EXISTS_CONTINUE = 1,
    /** Execute nothing new: a completed run gives the outcome
     *  pl_run_continue() gives (a replay that writes nothing); a suspended or
     *  failed one its recorded outcome; one not ended (running, its owner
     *  alive or dead, or submitted) an outcome whose status says so
     *  (PL_RUN_RUNNING or PL_RUN_SUBMITTED) and that holds nothing else:
     *  pl_run_continue() finishes it. */
    PL_IF_EXISTS_OUTCOME = 2
} pl_if_exists;

/**
 * Version 2 appended if_exists, version 3 the deadline, version 4 priority
 * and the concurrency key; an older struct (built before them) is still
 * accepted, read with what it lacks at its default.
 */
#define PL_RUN_OPTIONS_VERSION 4

/** pl_run_options.priority: from -PL_PRIORITY_MAX to PL_PRIORITY_MAX. */
#define PL_PRIORITY_MAX 1000
/** What one level of priority is worth in the queue: a run of priority p
 *  is ordered as if it had been submitted p times this much earlier (see
 *  pl_worker_run(), the queue's order). */
#define PL_PRIORITY_STEP_MS 60000
/** The longest concurrency key and rate-limit resource name, in bytes. */
#define PL_MAX_FLOW_KEY 128

/** Options for starting or continuing a run.  Use PL_RUN_OPTIONS_INIT. */
typedef struct pl_run_options {
    unsigned version;   /**< PL_RUN_OPTIONS_VERSION */
    const char *run_id; /**< start: the new run's id; NULL = a new UUIDv7 */
    /**
     * continue only: replay the recorded ledgers with every result served
     * from them and write nothing.  The first step that would be appended or
     * executed ends the replay with PL_ECHECK; a divergence with PL_ENONDET.
     * The run's record is not touched.
     */
    bool check;
    /** pl_run_start() only: what to do when run_id exists (elsewhere only
     *  PL_IF_EXISTS_FAIL is accepted).  Since version 2. */
    pl_if_exists if_exists;
    /**
     * start and submit only (since version 3): the run's deadline, recorded
     * with the run.  Past it the run fails with PL_EDEADLINE, its reason
     * beginning "DeadlineExceeded", at its next call boundary or wait; a
     * waiting run is woken for it.  deadline_ms is absolute (Unix ms),
     * deadline_in_ms relative to the start; the earlier of the two set
     * counts; 0 = none.  Every invocation's pl_ctx_deadline() starts
     * with it.
     */
    int64_t deadline_ms;
    int64_t deadline_in_ms;
    /** pl_run_submit() only (since version 4): the run's priority in the
     *  queue, higher first; 0 by default.  See pl_worker_run(). */
    int priority;
    /**
     * pl_run_submit() only (since version 4): the run's concurrency key, 1
     * to PL_MAX_FLOW_KEY bytes of text (NULL: none).  Workers, in every
     * process and on every host sharing the store, execute at most
     * concurrency_limit runs with the same key at once; a run over the
     * limit waits in the queue, holding no worker.  One customer's runs
     * one at a time: the customer's id as key, limit 1.
     */
    const char *concurrency_key;
    /** With concurrency_key: 1 or more (required); without it: 0. */
    unsigned concurrency_limit;
} pl_run_options;

#define PL_RUN_OPTIONS_INIT                                                    \
    { PL_RUN_OPTIONS_VERSION, NULL, false, PL_IF_EXISTS_FAIL, 0, 0, 0, NULL, 0 }

/** What a run execution ended in.  Free with pl_outcome_free(). */
typedef struct pl_outcome {
    pl_run_status status;
    char *run_id;
    /** completed: the steps the root policy returned (last = result:
     *  pl_outcome_result()). */
    pl_steps *steps;
    /** suspended: pass to pl_run_resume(). */
    char *resume_token;
    /** suspended: the prompt the suspending policy gave. */
    cJSON *prompt;
    /** suspended: the path of the suspended invocation. */
    char *suspended_path;
    /** failed: the pl_status and the recorded reason. */
    int error;
    char *reason;
    /** counters for this execution */
    uint64_t calls_served;   /**< results returned from the ledger */
    uint64_t calls_executed; /**< callees that ran */
    uint64_t steps_replayed; /**< appends that matched the record */
    uint64_t steps_appended; /**< new steps written */
    /** waiting: when it wakes (Unix ms; 0 = only for its event), and the
     *  event it waits for (NULL: a sleep); suspended_path says where. */
    int64_t wake_ms;
    char *wait_event;
    /** continued: the id of its successor, which goes on from it */
    char *successor;
} pl_outcome;

/** Free an outcome.  NULL does nothing. */
void pl_outcome_free(pl_outcome *outcome);

/**
 * The result of a completed run: the payload of the last step its root
 * policy returned.
 * @return never NULL: borrowed from @p outcome, valid until
 *         pl_outcome_free(), read-only (as pl_step_payload()).  A NULL
 *         outcome, one not completed or a root that returned no steps gives
 *         the static empty object pl_json_empty() (so does running out of
 *         memory decoding the payload).
 */
const cJSON *pl_outcome_result(const pl_outcome *outcome);

/**
 * Start a new run of @p root.
 *
 * Two channels, never to be confused: the returned status says whether the
 * engine could run the run at all; a run that ran and failed returns PL_OK
 * with (*out)->status == PL_RUN_FAILED and the recorded reason in
 * (*out)->reason.  Check both:
 *
 *     int st = pl_run_start(&outcome, engine, &root, NULL);
 *     if (st)                                     // nothing ran
 *         fprintf(stderr, "%s\n", pl_errmsg());
 *     else if (outcome->status == PL_RUN_FAILED)  // it ran, and failed
 *         fprintf(stderr, "%s\n", outcome->reason);
 *
 * @param[out] out caller owns; free with pl_outcome_free().
 * @param root made with PL_ACTION_INIT; its payload must not be NULL.
 * @return PL_OK when the run reached an outcome (completed, suspended, or
 *         failed with a recorded reason: see (*out)->status); otherwise no
 *         outcome and: PL_EINVAL (bad action or options); PL_EEXIST (run id
 *         taken, and opts->if_exists is PL_IF_EXISTS_FAIL or that run has
 *         another root; otherwise what opts->if_exists says, with the
 *         statuses of pl_run_continue()); PL_ENOTFOUND (root policy not
 *         registered); PL_EJSON;
 *         PL_ELIMIT (root payload larger than max_payload);
 *         PL_ESTORE / PL_EMAPFULL / PL_ENOSPC / PL_EACCES (the store
 *         failed; nothing durable was lost, and pl_run_continue() goes on
 *         once the cause is gone); PL_EBUSY (this process stalled longer
 *         than the run's lease and another worker took the run over:
 *         nothing more was written, see pl_engine_options.lease_ms);
 *         PL_ENOMEM.
 */
int pl_run_start(pl_outcome **out, pl_engine *engine, const pl_action *root,
                 const pl_run_options *opts);

/**
 * Continue a run: replay it from its ledgers and go on from where it
 * stopped.  Finishes a crashed run and retries a failed one.  A completed
 * run is final: it is replayed as with opts->check, writing nothing, and
 * gives the same outcome (or PL_ENONDET / PL_ECHECK when today's code no
 * longer replays it).
 * @return as pl_run_start(), plus PL_ENOTFOUND (no such run), PL_EBUSY
 *         (another live process or thread is running it: another worker
 *         holds its lease), PL_ESTATE (it is suspended: use
 *         pl_run_resume(); or superseded: continue its successor,
 *         pl_run_info.successor).  With opts->check, PL_ECHECK and
 *         PL_ENONDET are returned as such (and *out is NULL).
 */
int pl_run_continue(pl_outcome **out, pl_engine *engine, const char *run_id,
                    const pl_run_options *opts);

/**
 * Resume a suspended run: record @p answer as the answer to its suspension
 * and continue it.
 * @param answer a JSON object, never NULL; borrowed.
 * @return as pl_run_continue(), plus PL_ESTATE (the run is not suspended)
 *         and PL_ETOKEN (wrong token).
 */
int pl_run_resume(pl_outcome **out, pl_engine *engine, const char *run_id, const char *token,
                  const cJSON *answer);

/**
 * A run's record, as pl_run_get() and pl_engine_runs() report it.  Every
 * pointer in it (strings and cJSON values) belongs to the record: valid
 * until pl_run_info_free() (for pl_engine_runs(), until the visitor
 * returns), read-only.
 */
typedef struct pl_run_info {
    const char *id;
    const char *policy;       /**< root policy */
    const cJSON *payload;     /**< root payload */
    pl_run_status status;
    uint64_t steps;           /**< durable steps in all its ledgers.
                                   For a run still running (or whose
                                   owner died running it), the count its
                                   state record held at heartbeat_us: the
                                   owner rewrites that at most once a
                                   second, so steps made durable since are
                                   not in it.  No step is read to count
                                   them. */
    int64_t created_us;       /**< Unix microseconds */
    int64_t updated_us;
    int64_t heartbeat_us;     /**< last time its owner wrote */
    int64_t owner_pid;        /**< last process to run it */
    const char *owner_host;
    bool owner_alive;         /**< that process still runs it: it holds
                                   the run's lease, unexpired (and, on this
                                   host, its process lives) */
    uint32_t attempts;        /**< executions so far */
    int error;                /**< failed: the pl_status */
    const char *reason;       /**< failed: why; else NULL */
    const char *suspended_path; /**< suspended: where; else NULL */
    const cJSON *prompt;      /**< suspended: the prompt; else NULL */
    const char *resume_token; /**< suspended: the token pl_run_resume()
                                   takes; else NULL.  Anyone who can read
                                   the store can read it. */
    int64_t wake_ms;          /**< waiting: wakes at (Unix ms); 0 = only
                                   for its event */
    const char *wait_event;   /**< waiting: for this event; NULL: a sleep
                                   (suspended_path says where) */
    int64_t deadline_ms;      /**< the run's deadline (Unix ms), 0 = none */
    const char *code;         /**< the root policy's code identity when the
                                   run started (its code_version or plugin
                                   build id), or NULL */
    const char *successor;    /**< superseded or continued: the run that
                                   goes on from it (pl_run_upgrade(),
                                   pl_ctx_continue_as_new()); else NULL */
    const char *predecessor;  /**< the run this one supersedes or
                                   continues, or NULL */
} pl_run_info;

/**
 * Read one run's record.
 * @param[out] out caller owns; free with pl_run_info_free().
 * @return PL_OK; PL_ENOTFOUND; PL_ECORRUPT (also: a run or state record
 *         that fails its checksum, or is another run's); PL_EVERSION (a
 *         record written by an unknown format); PL_ESTORE; PL_ENOMEM.
 */
int pl_run_get(pl_run_info **out, pl_engine *engine, const char *run_id);

/** Free a run record.  NULL does nothing. */
void pl_run_info_free(pl_run_info *info);

/** Visitor for pl_engine_runs(): return non-zero to stop (that value is
 *  returned by pl_engine_runs()). */
typedef int (*pl_run_visit_fn)(const pl_run_info *info, void *user);

/**
 * Visit every run's record, without reading its steps, in the byte order
 * of the run ids (as memcmp(), a shorter id before the longer ones it
 * begins).  For the ids the engine makes (UUIDv7, which begin with the wall
 * clock's milliseconds) that is creation order, to the millisecond; ids
 * given in pl_run_options.run_id sort by their bytes among them.  A running
 * run's steps are counted as of its last heartbeat (see pl_run_info.steps).
 * Each id listed sorts after the one before: a stored id out of that order
 * (a changed key) ends the listing with PL_ECORRUPT naming the run after
 * which it stands, so no run is visited twice.
 * @return PL_OK, the visitor's non-zero value, or an error as pl_run_get().
 */
int pl_engine_runs(pl_engine *engine, pl_run_visit_fn visit, void *user);

#define PL_RUNS_OPTIONS_VERSION 1

/** Where pl_engine_runs_from() starts and which way it goes.  Initialise
 *  with PL_RUNS_OPTIONS_INIT. */
typedef struct pl_runs_options {
    unsigned version;  /**< PL_RUNS_OPTIONS_VERSION */
    const char *after; /**< the cursor: start just past this id, in the
                            listing's order (it need not be a stored run);
                            NULL or "" = from the start */
    bool reverse;      /**< descending byte order of the ids: for the ids
                            the engine makes, newest first */
} pl_runs_options;

#define PL_RUNS_OPTIONS_INIT { PL_RUNS_OPTIONS_VERSION, NULL, false }

/**
 * pl_engine_runs() from a cursor, either way: every run whose id sorts
 * after opts->after (with opts->reverse, before it, newest first), until
 * the visitor stops.  A page of N runs costs N records read, wherever it
 * starts: the store seeks to the cursor by key.  To page, stop after N
 * runs and pass the last id visited as the next page's after.
 * @param opts NULL = pl_engine_runs().
 * @return as pl_engine_runs(); PL_EINVAL (an unknown version, an after
 *         longer than PL_MAX_RUN_ID).
 */
int pl_engine_runs_from(pl_engine *engine, const pl_runs_options *opts,
                        pl_run_visit_fn visit, void *user);

/**
 * Read one invocation's ledger.
 * @param path an invocation path: "0" (the root), "0.3", ...
 * @param[out] out caller owns; free with pl_steps_free().  Empty if the
 *        invocation has no steps.
 * @return PL_OK; PL_ENOTFOUND (no such run); PL_EINVAL (bad path);
 *         PL_ECORRUPT (also: the run's records fail their checksums, a
 *         step is missing, or a step key is out of order, named in
 *         pl_errmsg()); PL_EVERSION; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_ledger(pl_steps **out, pl_engine *engine, const char *run_id, const char *path);

/** Visitor for pl_run_walk(): return non-zero to stop.  @p step borrowed. */
typedef int (*pl_step_visit_fn)(const pl_step *step, void *user);

/**
 * Visit every step of every ledger of a run, in tree order: an invocation's
 * steps, each followed by the ledgers of the calls it made.  Each step key
 * sorts after the one before: a key out of order (a changed key) ends the
 * walk with PL_ECORRUPT naming the run and the steps, and no step is
 * visited twice.
 * @return PL_OK, the visitor's non-zero value, or an error as pl_run_ledger().
 */
int pl_run_walk(pl_engine *engine, const char *run_id, pl_step_visit_fn visit,
                void *user);

/**
 * Verify a run: its run and state records match their checksums, every
 * stored step decodes, every ledger is gapless and hangs
 * off the action_call that created it, every step's stored predecessor hash
 * matches, every executed call's action_result names its callee ledger's
 * last step, and (for a completed or suspended run) the run's record names
 * the root ledger's last step.  So no step of a completed run can change
 * or vanish unnoticed; of a suspended run, none but the last step of each
 * ledger below the root still waiting for its call's result (the suspend
 * step, for one); of other runs, none but the last of the root ledger and
 * of each ledger whose call has no result yet.
 * @return PL_OK; PL_ECORRUPT or PL_EVERSION naming the first fault in
 *         pl_errmsg(); PL_ENOTFOUND; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_verify(pl_engine *engine, const char *run_id);

/**
 * Export a run's head: the SHA-256 of its root ledger's last step, which
 * anchors every step of the run (see pl_run_verify()).  The hashes are
 * unkeyed: they detect corruption and accidental change, not a writer who
 * rewrites every hash.  To detect that too, keep the head somewhere the
 * store's writers cannot change (a log, a signed record) and later check
 * that pl_run_verify() passes and pl_run_head() still gives the same bytes.
 * @return PL_OK; PL_ESTATE (the run is running or failed: only a completed
 *         or suspended run records its head); PL_ENOTFOUND; PL_EINVAL;
 *         PL_ECORRUPT; PL_EVERSION; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_head(uint8_t out[PL_HASH_LEN], pl_engine *engine,
                const char *run_id);

/**
 * Fork a run: make a new run whose ledgers are @p run_id's up to, not
 * including, step @p at_step_id of its root ledger.  The new run holds the
 * root steps before that step and the whole callee ledger of every call
 * among them that was answered before it (a call whose result falls at or
 * after the cut is copied without its callee's steps, so the new run runs
 * it again).  Steps keep their records (times, payloads, code identities);
 * their hashes are made anew, chained from the new run's own genesis hash,
 * so pl_run_verify() checks the new run on its own.  The old run is only
 * read.
 *
 * The new run has the old one's root policy, payload, actions and seed, and
 * is left `running` with no owner: continue it with pl_run_continue() (a
 * recovery tool's "finish every run whose owner is gone" finishes it too),
 * and it replays the copied steps and goes on with the code loaded now.  A
 * call at the cut whose `action_call` was copied without a result counts as
 * in flight at a crash: its policy's in-doubt rule applies.
 *
 * The new run is written by two commits: should the process die between
 * them, it is left `failed` with a reason saying the fork did not complete.
 *
 * @param[out] out_new_id the new run's id; caller owns, free with free().
 * @param at_step_id a step of the root ledger, "0:<seq>"; "0:0" forks
 *        before the first step (the same root action, run afresh).
 * @param new_id the new run's id, or NULL for a new UUIDv7.
 * @return PL_OK; PL_EINVAL (NULL argument, a bad run id, a step id that is
 *         not "0:<seq>"); PL_ENOTFOUND (no such run, or its root ledger has
 *         no such step); PL_EBUSY (the run is running in a live process);
 *         PL_EEXIST (@p new_id is taken); PL_ECORRUPT; PL_EVERSION;
 *         PL_ESTORE; PL_EMAPFULL; PL_ENOMEM.
 */
int pl_run_fork(char **out_new_id, pl_engine *engine, const char *run_id,
                const char *at_step_id, const char *new_id);

/**
 * Upgrade a run that new code cannot replay (a "stranded" run): fork it as
 * pl_run_fork() does, at @p at_step_id (the root step before which its
 * replay first differs: `ledger-replay --upgrade` finds it), and end
 * @p run_id with the final status PL_RUN_SUPERSEDED.  The old run's
 * record names its successor (pl_run_info.successor) and the new run's
 * names it (pl_run_info.predecessor).  The new run is left `running` with
 * no owner: continue it with pl_run_continue(), under the new code.
 *
 * Side effects: every call the old run recorded at or after the cut ran
 * once already; the new run makes again those that the new code makes
 * again, under its own run id (so with other idempotency keys).  List
 * them before upgrading (`ledger-replay --upgrade ID --dry-run`).
 *
 * The new run's steps, the old run's end and both links are written by
 * one transaction, which also drops the old run's lease (taken before it
 * is read, so that nobody runs or resumes it meanwhile): a crash leaves
 * the old run untouched, or superseded with its successor complete.  (A
 * crash before that commit may leave the new run `failed`, its reason
 * saying the upgrade did not complete, and the old run as it was.)
 *
 * @return as pl_run_fork(), plus PL_ESTATE (the run is completed or
 *         cancelled, which are final, or superseded already) and PL_EBUSY also when another
 *         worker holds the run's lease.
 */
int pl_run_upgrade(char **out_new_id, pl_engine *engine, const char *run_id,
                   const char *at_step_id, const char *new_id);

/* ------------------------------------------------------------------------ */
/* Time and events                                                          */
/* ------------------------------------------------------------------------ */

/*
 * A run can wait: sleep (pl_ctx_sleep()), wait for a named event that
 * anyone sends it (pl_ctx_wait_event(), pl_run_signal()), and be cancelled
 * (pl_run_cancel()) or pass its deadline (pl_run_options.deadline_ms).
 *
 * DETERMINISM.  A wait's wake time is computed from the recorded clock and
 * recorded in a `wait` step, so a replay never waits from zero: a run that
 * crashed or was stopped during a sleep wakes at the original time, and a
 * run continued after it goes on at once.  What ended a wait for an event
 * is recorded in an `event` step (the event, or the timeout), and a seen
 * cancellation in a `cancel` step: a replay returns the same, whatever the
 * clock or the inbox say by then.  Only a wait at the end of a ledger looks
 * at the clock and the inbox.
 *
 * PARKING.  A wait that cannot end yet parks the run: its policy gets
 * PL_ESUSPENDED (return it, as for pl_ctx_suspend(); every caller unwinds),
 * and the run is recorded `waiting` (pl_run_info.wake_ms, .wait_event),
 * holding no thread and no memory, with a timer in the store.  A worker
 * (pl_worker_run()) takes due timers exactly once across processes and
 * hosts and continues the runs; an embedder without workers calls
 * pl_engine_wake().  A wait shorter than the engine's wait-in-place time
 * (pl_engine_set_wait_in_place(), 1 s by default) waits on its thread,
 * its `wait` step durable first.
 *
 * EVENTS are buffered: one sent before the run waits for it waits in the
 * run's inbox.  A wait takes the first event of its name in delivery
 * order and consumes it (first wins: with several events of a name, each
 * wait takes the next; events of other names stay for the waits that ask
 * for them).  An event delivered by the time the wait looks wins over the
 * wait's timeout.
 *
 * CANCELLATION is seen at a call boundary (pl_ctx_call() and friends,
 * pl_ctx_call_all()) at the end of a ledger, and in a wait: that call or
 * wait returns PL_ECANCELLED and the run is cancelled from then on.  The
 * policy may go on to make compensating calls (a saga), recorded and
 * replayed as any call; whatever it returns, the run then ends
 * `cancelled` with the reason.  A call in flight when the cancellation
 * arrives finishes, and its result is recorded.  A callee that returns
 * PL_ECANCELLED gives its caller a "Cancelled" error result and
 * PL_ECANCELLED from the call, so a cancellation climbs to the root
 * unless a policy handles it.  Calls already running in a
 * pl_ctx_call_all() fan-out finish; the fan-out's caller sees the
 * cancellation at its next call.
 *
 * CLOCKS.  Wake times are Unix ms on this host's clock, due times on the
 * store's: on PostgreSQL, hosts whose clocks differ from the server's wake
 * runs that much late (or early, in which case the run parks again).
 */

#define PL_WAIT_FOREVER (-1) /**< pl_ctx_wait_event(): no timeout */

/**
 * Sleep @p ms milliseconds of the recorded clock (see Time and events).
 * @return PL_OK once the time has come; PL_ESUSPENDED (the run parks:
 *         return it from the policy); PL_ECANCELLED (the run was
 *         cancelled meanwhile); PL_EINVAL (a negative or huge @p ms, a
 *         stale context, a call of a pl_ctx_call_all() fan-out); the
 *         run-stopping statuses of pl_ctx_call(), PL_EDEADLINE among them.
 */
int pl_ctx_sleep(pl_ctx *ctx, int64_t ms);

/** As pl_ctx_sleep(), until the Unix time @p unix_ms (a time past goes on
 *  at once; the time is compared on replay). */
int pl_ctx_sleep_until(pl_ctx *ctx, int64_t unix_ms);

/**
 * Wait for the next event named @p name sent to this run with
 * pl_run_signal(), and consume it.
 * @param[out] out_payload the event's payload, a JSON object; caller owns,
 *             free with cJSON_Delete().
 * @param timeout_ms how long to wait, on the recorded clock;
 *        PL_WAIT_FOREVER for no timeout, 0 to take only what is there.
 * @return PL_OK; PL_ETIMEDOUT (recorded: a replay times out here too; the
 *         run goes on); PL_ESUSPENDED (the run parks: return it);
 *         PL_ECANCELLED; PL_EINVAL; the run-stopping statuses of
 *         pl_ctx_call().
 */
int pl_ctx_wait_event(cJSON **out_payload, pl_ctx *ctx, const char *name,
                      int64_t timeout_ms);

/**
 * Send the event @p name with @p payload to run @p run_id, from any
 * process: it is durable in the run's inbox when this returns, and a run
 * waiting for it is woken.  A run continued as new
 * (pl_ctx_continue_as_new()) passes it on: it goes to the link of the
 * chain that is going on (as does a pl_run_cancel()).
 * @param[out] out NULL: deliver only (a worker, or pl_engine_wake(),
 *             continues a waiting run).  Else, when the run was waiting,
 *             it is continued here, in the caller's thread, as
 *             pl_run_continue() would, and *out is its outcome (NULL when
 *             the run was not waiting, or another process took it first).
 * @param payload a JSON object; borrowed.
 * @return PL_OK; PL_ESTATE (the run has ended: completed, failed or
 *         cancelled; nothing is delivered); PL_ENOTFOUND; PL_EINVAL;
 *         PL_EJSON; PL_ELIMIT; the store's errors; with @p out, those of
 *         pl_run_continue().
 */
int pl_run_signal(pl_outcome **out, pl_engine *engine, const char *run_id,
                  const char *name, const cJSON *payload);

/**
 * Cancel run @p run_id, from any process; the request is durable when
 * this returns.  A running run sees it at its next call boundary (see
 * Time and events; on PostgreSQL, one that arrives after a call's result
 * was committed is seen at the boundary after the next commit); a
 * waiting run is continued at once, here when its
 * root policy is registered in @p engine (else by the worker its timer
 * wakes), and its wait returns PL_ECANCELLED; a suspended or submitted
 * run, whose policies are not running, ends `cancelled` at once.  A run
 * that ends before its next call boundary ends as it would have: its
 * status says whether the cancellation was seen.
 * @param reason recorded with the run ("" when NULL), at most 4096 bytes.
 * @return PL_OK; PL_ESTATE (the run has ended); PL_ENOTFOUND; PL_EINVAL;
 *         the store's errors.
 */
int pl_run_cancel(pl_engine *engine, const char *run_id, const char *reason);

/**
 * Continue, in the caller's thread, every waiting run whose timer is due
 * (each taken exactly once, as a worker takes it), and report when the
 * next is due: the loop of an embedder without pl_worker_run() is
 * `pl_engine_wake(e, &next); sleep until next (or an event); repeat`.
 * The schedules' ticks due now are fired first (pl_schedule_fire(), on
 * this host's clock) and the runs they start executed here too.
 * @param[out] next_due_ms when the next timer or schedule tick is due
 *             (Unix ms; 0: none); may be NULL.
 * @return PL_OK; PL_ESTATE (a read-only engine); the first failure of a
 *         schedule (see pl_schedule_fire()); the store's errors.
 */
int pl_engine_wake(pl_engine *engine, int64_t *next_due_ms);

/**
 * Waits of at most @p ms wait on their thread instead of parking the run
 * (0: every wait parks; -1: the default, 1000).
 * @return PL_OK; PL_EINVAL.
 */
int pl_engine_set_wait_in_place(pl_engine *engine, int64_t ms);

/* ------------------------------------------------------------------------ */
/* The queue and workers                                                    */
/* ------------------------------------------------------------------------ */

/**
 * Record a run of @p root to be executed later by a worker
 * (pl_worker_run(), in this process or any other sharing the store),
 * without executing it.  The run is created `submitted`, with a lease
 * nobody holds, in one commit; the first worker to take the lease executes
 * it.  pl_run_continue() executes a submitted run at once, as a worker
 * would.
 * @param[out] out the run's id; caller owns, free with free().  May be
 *        NULL when opts->run_id names it.
 * @param root and @p opts as for pl_run_start(); the root policy must be
 *        registered here too (its code identity is recorded).
 * @return PL_OK; PL_EINVAL; PL_EEXIST (run id taken); PL_ENOTFOUND (root
 *         policy not registered); PL_EJSON; PL_ELIMIT; PL_ESTATE (a
 *         read-only engine); PL_ESTORE / PL_EMAPFULL; PL_ENOMEM.
 */
int pl_run_submit(char **out, pl_engine *engine, const pl_action *root,
                  const pl_run_options *opts);

/* Version 2 appended retain_ms. */
#define PL_WORKER_OPTIONS_VERSION 2

/** Worker options.  Initialise with PL_WORKER_OPTIONS_INIT. */
typedef struct pl_worker_options {
    unsigned version;     /**< PL_WORKER_OPTIONS_VERSION */
    unsigned concurrency; /**< runs executed at once, each on a thread of
                               its own; 0 = 1, at most 256 */
    unsigned poll_ms;     /**< how long an idle worker waits before it
                               looks for work again; 0 = 100 */
    /** Counters, written when pl_worker_run() returns (may be NULL):
     *  executions that ended completed, suspended (or waiting) and failed
     *  (or cancelled), and runs
     *  taken but not finished here (handed back at a stop, taken over, or
     *  not executable: a policy not registered here, a store failure). */
    uint64_t *completed, *suspended, *failed, *skipped;
    /**
     * Since version 2.  The retention rule this worker applies: about
     * every retain_ms / 10 (at least a second, at most a minute) one of
     * its threads deletes the runs that have ended whose last write is at
     * least retain_ms old, as pl_engine_prune() does.  0 = the
     * engine's pl_engine_options.retain_ms (0 there too: none).
     */
    uint64_t retain_ms;
} pl_worker_options;

#define PL_WORKER_OPTIONS_INIT                                                 \
    { PL_WORKER_OPTIONS_VERSION, 0, 0, NULL, NULL, NULL, NULL, 0 }

/**
 * Execute queued and crashed runs until pl_worker_stop().  Each of
 * opts->concurrency threads takes a run whose lease is free or expired (a
 * submitted run, or a run whose worker died: one conditional update, so
 * exactly one worker takes it), executes it as pl_run_continue() would,
 * and takes the next; with no such run it takes a waiting run whose timer
 * is due (see Time and events), and with nothing to take it waits
 * opts->poll_ms (less when a timer is due sooner).  Suspended runs are
 * never taken: they wait for pl_run_resume().
 *
 * THE QUEUE'S ORDER.  Every queued or crashed run has a rank: the time it
 * was queued (by the store's clock; a run started by pl_run_start() that
 * crashed: when its lease was made) less its priority times
 * PL_PRIORITY_STEP_MS.  A worker takes the run of least rank (ties: the
 * run made first) among those it may start: a run with a concurrency key
 * may start only while fewer than its limit of runs with that key are
 * live (executing under a lease that has not expired).  So:
 *   - higher priority first, first in first out within a priority;
 *   - no starvation: a run is passed only by runs queued before it or
 *     within its priority difference's worth of time after it
 *     (PL_PRIORITY_STEP_MS a level), so every run waits a bounded time
 *     behind the work that was there or came soon after;
 *   - a run waiting for its key holds no worker and blocks no run of
 *     another key; within a key, the runs start in rank order;
 *   - a crashed run keeps its rank: it is taken again before the runs
 *     queued after it.
 * The limit binds runs taken from the queue; pl_run_continue() of a queued
 * run executes it at once (an operator's override), and counts.  A run
 * that parks (a durable sleep, a wait for an event) leaves the queue while
 * it waits: woken by its timer, it is executed without waiting for its
 * key.
 *
 * While it executes a run the engine renews the run's lease (see
 * pl_engine_options.lease_ms); a worker whose lease was taken over anyway
 * (it stalled longer than the lease) stops that run at its next commit
 * with PL_EBUSY, writing nothing into it.
 *
 * @note Same API on both stores: LMDB (many processes on one host) and
 *       PostgreSQL (many hosts); give each host its own
 *       pl_engine_options.host_id.
 * @param opts NULL for defaults.
 * @return PL_OK once stopped: the calls under way have finished and their
 *         runs have stopped before their next call, handed back to the
 *         queue (durable up to that call) for another worker to go on with;
 *         PL_EINVAL (bad options); PL_ESTATE (a read-only engine);
 *         PL_ENOMEM (or threads could not be started).
 */
int pl_worker_run(pl_engine *engine, const pl_worker_options *opts);

/**
 * Ask every pl_worker_run() on @p engine to stop: they take no more runs,
 * let the calls under way finish, hand their runs back to the queue before
 * their next call, and return.  Async-signal-safe (it
 * sets a flag), so it may be called from a SIGTERM or SIGINT handler.  The
 * request is consumed when pl_worker_run() returns; a stop asked before it
 * starts makes it return at once.  NULL does nothing.
 */
void pl_worker_stop(pl_engine *engine);

/* ------------------------------------------------------------------------ */
/* Schedules                                                                */
/* ------------------------------------------------------------------------ */

/*
 * A schedule starts a run of a root action at every tick of a cron
 * expression, in UTC or a named time zone.  It lives in the store, so every
 * process and host sharing the store sees it; the workers (pl_worker_run())
 * fire it, and an embedder without workers calls pl_schedule_fire().
 *
 * CRON.  Five fields: minute (0-59), hour (0-23), day of month (1-31),
 * month (1-12 or JAN-DEC), day of week (0-7 or SUN-SAT; 0 and 7 are
 * Sunday).  A field is a list (a,b), ranges (a-b), steps (x/n, where x is
 * '*', a range, or a value a meaning a to the field's maximum) and '*';
 * names in any case; or the whole expression @yearly, @annually, @monthly,
 * @weekly, @daily, @hourly.  When both day fields are restricted (neither
 * is a bare '*'), a day matches when either does, as in classic cron.
 * Minute resolution: no seconds field.  An expression that can never fire
 * ("0 0 30 2 *") is refused.
 *
 * TIME ZONES.  "UTC", or a tz database name ("Europe/London") read from
 * the system's /usr/share/zoneinfo (Debian's tzdata).  Where the zone's
 * clock jumps forward, a time it skips fires at the same distance after
 * the jump (02:30 on the day New York skips 02:00-03:00 fires at 03:30
 * EDT) when the hour field names hours, and not at all when the hour
 * field is '*'; where the clock goes back, a repeated time fires once, at
 * its first occurrence, when the hour field names hours, and at both when
 * it is '*'.  This is the behaviour of classic cron and of the npm package
 * cron-parser, which the suite checks the parser against.
 *
 * TICKS AND RUNS.  A tick starts one run with the id "<name>@<tick>", the
 * tick in UTC to the minute ("nightly@2026-11-28T02:00Z"), submitted to the
 * queue (pl_run_submit()) for a worker to execute.  However many processes
 * or hosts fire at once, each tick's run is created once: the id is the
 * same for all and the store creates an id once.
 *
 * CATCH-UP.  Ticks pass unfired while nothing fires the schedule (no
 * worker ran).  When firing resumes, PL_CATCH_UP_SKIP starts none of the
 * missed ticks (only a tick less than a minute old, the one on time);
 * PL_CATCH_UP_LATEST starts the latest missed tick alone;
 * PL_CATCH_UP_ALL starts each missed tick, the last catch_up_max of them,
 * in order.  The others are skipped for good.
 *
 * OVERLAP.  PL_OVERLAP_SKIP skips a tick while the schedule's previous run
 * is still live (submitted, running or suspended); PL_OVERLAP_ALLOW starts
 * it anyway.
 *
 * A process fires only the schedules whose root policy it has registered
 * (the run records the policy's code identity); the others wait for a
 * process that has it.
 */

/** What a tick does while the schedule's previous run is live. */
typedef enum pl_schedule_overlap {
    PL_OVERLAP_SKIP = 0, /**< skip the tick (the default) */
    PL_OVERLAP_ALLOW = 1 /**< start it anyway */
} pl_schedule_overlap;

/** Which missed ticks start when firing resumes after a pause. */
typedef enum pl_schedule_catch_up {
    PL_CATCH_UP_SKIP = 0,   /**< none (the default) */
    PL_CATCH_UP_LATEST = 1, /**< the latest, once */
    PL_CATCH_UP_ALL = 2     /**< each, the last catch_up_max of them */
} pl_schedule_catch_up;

#define PL_SCHEDULE_VERSION 1

/** A schedule's definition.  Initialise with PL_SCHEDULE_INIT. */
typedef struct pl_schedule {
    unsigned version;     /**< PL_SCHEDULE_VERSION */
    const char *name;     /**< 1..100 bytes of [A-Za-z0-9._-] */
    const char *cron;     /**< the cron expression (above) */
    const char *zone;     /**< "UTC" or a tz database name; NULL = UTC */
    const char *policy;   /**< the root action of each run */
    const cJSON *payload; /**< its payload, a JSON object of at most 64 KiB
                               as text; NULL = {}; borrowed */
    pl_schedule_overlap overlap;
    pl_schedule_catch_up catch_up;
    unsigned catch_up_max; /**< PL_CATCH_UP_ALL: 1..1000 */
    /** The ticks after this Unix time (ms) are due; 0 = from now.  A time
     *  in the past makes the ticks since then missed ones (catch-up). */
    int64_t start_ms;
} pl_schedule;

#define PL_SCHEDULE_INIT                                                       \
    { PL_SCHEDULE_VERSION, NULL, NULL, NULL, NULL, NULL, PL_OVERLAP_SKIP,      \
      PL_CATCH_UP_SKIP, 0, 0 }

/**
 * Create schedule @p schedule->name, or replace the schedule of that name
 * (its ticks then count from start_ms, or from now; the run it started
 * last is kept, for the overlap rule).  Durable when this returns.
 * @return PL_OK; PL_EINVAL (a bad name, expression, zone, policy name or
 *         rule: the message says which and why; nothing is written);
 *         PL_EJSON (a payload that is not an object); PL_ELIMIT (a payload
 *         over 64 KiB); PL_ESTATE (a read-only engine); the store's errors;
 *         PL_ENOMEM.
 */
int pl_schedule_put(pl_engine *engine, const pl_schedule *schedule);

/**
 * Delete schedule @p name.  The runs it started stay.
 * @return PL_OK; PL_ENOTFOUND; PL_EINVAL; PL_ESTATE; the store's errors.
 */
int pl_schedule_delete(pl_engine *engine, const char *name);

/**
 * Every schedule, in name order, as a JSON array of objects: "name",
 * "cron", "zone", "policy", "payload", "overlap" ("skip", "allow"),
 * "catch_up" ("skip", "latest", "all"), "catch_up_max", "created_ms",
 * "cursor_ms" (the ticks up to it are handled), "due_ms" (the first tick
 * after the cursor: at or before @p now_ms, ticks are waiting to fire),
 * "next_ms" (the first tick after @p now_ms and the cursor) and
 * "last_run" (the id of the run it started last, or "").
 * @param[out] out caller owns; free with cJSON_Delete().
 * @return PL_OK; PL_EINVAL; PL_ECORRUPT (a damaged schedule record: the
 *         message names it); PL_EVERSION; the store's errors; PL_ENOMEM.
 */
int pl_schedule_list(cJSON **out, pl_engine *engine, int64_t now_ms);

/**
 * Fire the schedules' ticks due at @p now_ms (Unix ms): for each schedule
 * whose policy is registered here, the ticks since it last fired, by its
 * catch-up and overlap rules.  pl_worker_run() calls it about once a
 * second; an embedder without workers calls it itself, and sleeps until
 * *next_ms.  Any number of processes may call it at once (each tick's run
 * is created once).  @p now_ms is the caller's: the clock, or in a test a
 * chosen time.
 * @param[out] started the runs this call created (may be NULL).
 * @param[out] next_ms the earliest next tick of all schedules, 0 when
 *        there is none (may be NULL).
 * @return PL_OK; PL_EINVAL; PL_ESTATE (a read-only engine); the first
 *         failure of a schedule (a damaged record, PL_ECORRUPT, naming it:
 *         the other schedules are fired all the same); the store's errors.
 */
int pl_schedule_fire(pl_engine *engine, int64_t now_ms, size_t *started,
                     int64_t *next_ms);

/**
 * The first tick of cron expression @p cron in zone @p zone strictly after
 * @p after_ms (Unix ms, from 0 to the year 9000), by the rules above; no
 * engine needed.  Thread-safe (no setenv(), no localtime()).
 * @param zone "UTC", a tz database name, or NULL for UTC.
 * @return PL_OK; PL_EINVAL (a bad expression or zone, a time out of range:
 *         the message says which and why); PL_ENOMEM.
 */
int pl_cron_next(int64_t *out_ms, const char *cron, const char *zone,
                 int64_t after_ms);

/**
 * Export a run as JSON lines to @p out: a first line describing the run
 * ({"kind":"run","format":1,"run":id,"run_number":N,"policy",...,"status",
 * "created_us","records":R,"head","info","state"}: its two run records as
 * stored, in hex), then one line per step in key order (the run's tree in
 * order) with run, path, seq, id, actor, type, payload, time, time_us,
 * code, hash and prev_hash, and either "record" (the stored step record,
 * hex) or "derived":true (a folded callee's step, which has no record of
 * its own).  The format is written down at the top of core/ops/export.c.
 * The export is complete: pl_run_import() makes the run again from it.
 * A run being written meanwhile may fail with PL_EBUSY: export it once it
 * stops.  The store is only read (a read-only engine will do).
 * @return PL_OK; PL_EINVAL; PL_ENOTFOUND; PL_EBUSY; PL_EIO (writing to
 *         @p out failed); PL_ECORRUPT; PL_EVERSION; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_export(pl_engine *engine, const char *run_id, FILE *out);

/**
 * The lines of pl_run_export(), handed to a visitor instead of printed.
 * @p line is borrowed for the call; the visitor may add fields to it (an
 * import ignores fields it does not know).  It returns 0 to go on; a
 * negative pl_status, or any other value, stops the export, which returns
 * that status (PL_EINVAL for a value that is none).
 */
typedef int (*pl_export_fn)(cJSON *line, void *user);
int pl_run_export_each(pl_engine *engine, const char *run_id,
                       pl_export_fn visit, void *user);

/**
 * Import a run exported by pl_run_export() from @p in into this engine's
 * store, as run @p new_id (NULL: the exported run's id).  Every line is
 * parsed and bound-checked, and every step's hash is recomputed from its
 * key in the exporting store and its record and checked against the
 * exported hash, its chain (previous-step hashes, step 0 against the run's
 * genesis hash, action_result links against their callee ledgers' last
 * steps), and its human fields; the first fault refuses the import, naming
 * the line and the step, and nothing is written.  Then the run is written
 * under the number this store gives it, its hashes made anew as
 * pl_run_fork() makes them, with its records restored: root policy,
 * payload, actions, seed, creation time, and status (completed, suspended
 * with its prompt and token, failed with its reason, cancelled with its
 * reason, waiting with its timer (due at its wake time or deadline, as
 * the wait set it), or running with no owner, for pl_run_continue() to
 * finish).  pl_run_verify() passes on it.  What waits in a run's inbox
 * (events not yet consumed, a cancellation not yet seen) is not part of
 * the run's ledger: it is neither exported nor imported.
 *
 * Writing takes two commits (the store numbers a run when it creates it):
 * should the process die between them, the run is left `failed` with a
 * reason saying the import did not complete, and its id stays taken.
 *
 * With a NULL @p engine the export is only checked, as above, and
 * nothing is opened or written: PL_OK means it would import (unless its
 * id is taken), *out_run_id the id it would take.  A tool checks an
 * export this way before it creates a store for it.
 *
 * @param[out] out_run_id the imported run's id; caller owns, free with
 *        free().  NULL on failure.
 * @return PL_OK; PL_EINVAL (NULL argument, bad @p new_id); PL_EJSON (a
 *         malformed line, a missing or mistyped field, a truncated line);
 *         PL_ECORRUPT (a record that does not decode, a hash or chain that
 *         does not match, lines out of key order, a duplicate or missing
 *         step: the export was changed); PL_EVERSION (another export
 *         format); PL_ELIMIT (a line longer than 64 MiB); PL_EEXIST (the
 *         run id is taken); PL_EIO; PL_ESTATE (a read-only engine);
 *         PL_ESTORE; PL_EMAPFULL; PL_ENOMEM.
 */
int pl_run_import(char **out_run_id, pl_engine *engine, FILE *in,
                  const char *new_id);

/* ------------------------------------------------------------------------ */
/* Retention: deleting runs, tombstones, pruning                            */
/* ------------------------------------------------------------------------ */

/*
 * A run that has ended for good (completed, failed, cancelled,
 * superseded, or continued: see pl_ctx_continue_as_new()) may be deleted:
 * its
 * records and every step go, in one transaction, so a crash at any instant
 * leaves it whole or gone, never half.  Its id keeps a TOMBSTONE (id, final
 * status, head, root policy, creation and deletion times) for
 * pl_engine_options.tombstone_ms, so that the id is not taken again by
 * mistake while callers may still retry a start with it:
 *
 *   - pl_run_start() with that id and PL_IF_EXISTS_FAIL, and pl_run_submit()
 *     and pl_run_import(), fail with PL_EEXIST, pl_errmsg() saying when the
 *     run was deleted;
 *   - pl_run_start() with PL_IF_EXISTS_OUTCOME or PL_IF_EXISTS_CONTINUE
 *     executes nothing and gives an outcome whose status is the recorded
 *     final status, with no steps, no result (pl_outcome_result() gives
 *     the empty object), error 0 and a reason saying "deleted on <time>";
 *   - pl_run_get(), pl_run_ledger() and the others give PL_ENOTFOUND;
 *     pl_run_tombstone() reads the tombstone.
 *
 * Once the tombstone has expired the id is free: a start makes a new run.
 * Expired tombstones are removed by pl_engine_prune().
 */

/**
 * Delete a run that has ended (completed, failed, cancelled, superseded
 * or continued), leaving its tombstone.
 * @return PL_OK; PL_EINVAL; PL_ENOTFOUND (no such run); PL_ESTATE (the run
 *         has not ended: running, suspended, submitted or waiting, which is
 *         never deleted); PL_EBUSY (it changed while being deleted, or a worker
 *         is replaying it: try again); PL_ECORRUPT; PL_ESTORE; PL_ENOMEM.
 *         A read-only engine gives PL_ESTATE.
 */
int pl_run_delete(pl_engine *engine, const char *run_id);

#define PL_TOMBSTONE_VERSION 1

/** A deleted run's tombstone, from pl_run_tombstone().  Initialise with
 *  PL_TOMBSTONE_INIT. */
typedef struct pl_tombstone {
    unsigned version;          /**< PL_TOMBSTONE_VERSION */
    pl_run_status status;      /**< its final status */
    bool has_head;             /**< head holds its head (pl_run_head()) */
    uint8_t head[PL_HASH_LEN];
    int64_t created_us;        /**< when it started, Unix microseconds */
    int64_t deleted_us;        /**< when it was deleted */
    int64_t expires_us;        /**< when the tombstone is forgotten */
    char policy[PL_MAX_NAME + 1]; /**< its root policy */
} pl_tombstone;

#define PL_TOMBSTONE_INIT { PL_TOMBSTONE_VERSION, (pl_run_status)0, false, {0}, 0, 0, 0, {0} }

/**
 * Read a deleted run's tombstone (also one that has expired but is not yet
 * removed: compare expires_us with the clock).
 * @return PL_OK; PL_EINVAL; PL_ENOTFOUND (no tombstone of that id: never
 *         deleted, or the tombstone is removed); PL_ECORRUPT (it fails its
 *         checksum); PL_ESTORE; PL_ENOMEM.
 */
int pl_run_tombstone(pl_tombstone *out, pl_engine *engine, const char *run_id);

/** Called by pl_engine_prune() for each run before it is deleted (@p info
 *  borrowed for the call): 0 to go on; any other value stops the prune
 *  before that run is deleted, and is returned (PL_EINVAL if it is no
 *  pl_status). */
typedef int (*pl_prune_fn)(const pl_run_info *info, void *user);

#define PL_PRUNE_OPTIONS_VERSION 1

/** What pl_engine_prune() deletes.  Initialise with PL_PRUNE_OPTIONS_INIT. */
typedef struct pl_prune_options {
    unsigned version;        /**< PL_PRUNE_OPTIONS_VERSION */
    /** Runs that ended (their last write, pl_run_info.updated_us) at least
     *  this long ago; 0 = whenever they ended. */
    uint64_t older_than_ms;
    /** Which final statuses: a bit (1u << status) for each; 0 = every
     *  final one (completed, failed, cancelled, superseded, continued).  A
     *  status that is not final (running, suspended, submitted, waiting)
     *  is PL_EINVAL: such runs are never deleted. */
    unsigned statuses;
    /** Runs deleted per transaction; 0 = 64, at most 1024. */
    unsigned batch;
    /** Delete nothing: visit (and count) what would be deleted. */
    bool dry_run;
    /** Called for each run before it is deleted (an archive's export,
     *  say); NULL = none. */
    pl_prune_fn before;
    void *user;              /**< passed to before */
} pl_prune_options;

#define PL_PRUNE_OPTIONS_INIT { PL_PRUNE_OPTIONS_VERSION, 0, 0, 0, false, NULL, NULL }

/**
 * Delete the runs @p opts chooses, leaving their tombstones, in
 * transactions of opts->batch runs each, so no transaction blocks the
 * store's other writers for long; and remove expired tombstones.  Runs
 * are chosen in one pass over the run records (pl_engine_runs()), each
 * checked again as it is deleted: a run that changed meanwhile is left.
 * A crash or kill at any instant leaves each run whole or gone.
 * @param[out] deleted the runs deleted (dry run: that would be); may be
 *        NULL.
 * @return PL_OK; PL_EINVAL; a status opts->before returned; PL_ESTATE (a
 *         read-only engine, unless dry_run); PL_ECORRUPT; PL_ESTORE;
 *         PL_ENOMEM.  Runs deleted before a failure stay deleted.
 */
int pl_engine_prune(pl_engine *engine, const pl_prune_options *opts,
                    uint64_t *deleted);

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
    unsigned threads;         /**< worker threads; 0 = one per CPU, at
                                   least 2 */
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
 *  a task.  NULL does nothing. */
void pl_pool_free(pl_pool *pool);

/* ------------------------------------------------------------------------ */
/* Context: what a running policy uses                                      */
/* ------------------------------------------------------------------------ */

/*
 * Every pl_ctx_* function below takes the context its policy (or decorator)
 * was given, while that policy runs.  A context used after its policy
 * returned, or a caller's context used inside a call it made, is refused
 * with PL_EINVAL (and a message) without touching the run.  A context used
 * after its run ended is freed memory: never keep one.
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
 *         holding them); PL_EINVAL for a step that is not such a call.
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
 * @return PL_OK, or a status that fails the run.
 */
typedef int (*pl_side_effect_fn)(cJSON **out_value, void *user);

/**
 * Run @p fn once and record its value: on replay the recorded value is
 * returned and fn is not called.  The value is durable before this returns.
 * @param name a short label, compared on replay.
 * @param[out] out_value caller owns; free with cJSON_Delete().
 * @return PL_OK; fn's status; the run-stopping statuses of pl_ctx_call().
 */
int pl_ctx_side_effect(cJSON **out_value, pl_ctx *ctx, const char *name, pl_side_effect_fn fn,
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
 *         is NULL.
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
 * A run whose version is below @p min_supported (or above
 * @p max_supported) fails at once with PL_ECODEVERSION, its message naming
 * the change, the version recorded and the versions this code supports;
 * raise min_supported once no live run needs an old branch
 * (`ledger-replay --check` lists who needs which), then delete that
 * branch.  Keep the call itself, with min_supported == max_supported:
 * removing it makes the recorded markers diverge.
 *
 * Points are matched by position, like every step; each change id is
 * named once per invocation it guards.
 *
 * @param[out] out_version the version to follow (PL_VERSION_DEFAULT on any
 *        failure).
 * @param change_id 1..PL_MAX_NAME bytes, no control characters.
 * @param min_supported PL_VERSION_DEFAULT (0) or more, at most
 *        @p max_supported.
 * @param max_supported the newest version, at least 1.
 * @return PL_OK; PL_EINVAL (a NULL or stale argument, a bad change id or
 *         versions); PL_ECODEVERSION (the run has stopped, failed); PL_ECHECK
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
 * @param[out] out_answer caller owns; free with cJSON_Delete().
 * @return PL_OK; PL_ESUSPENDED; the run-stopping statuses of pl_ctx_call().
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
 * (pl_run_signal()) once it has continued reach its successor; those it
 * had received and not consumed stay with it.
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
 * retry decorator's backoff) never wait past it; and the timeout decorator
 * replaces the result of a callee that returned past it with a recorded
 * "Timeout" error.  Nothing is interrupted.
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

/* ------------------------------------------------------------------------ */
/* Decorators                                                               */
/* ------------------------------------------------------------------------ */

/** The rest of a decorator chain, ending in the policy.  Opaque. */
typedef struct pl_next pl_next;

/**
 * A decorator wraps the rest of the chain: it may run @p next any number of
 * times (pl_next_call()), change the action, and add steps (pl_ctx_emit()).
 * Steps the policy returns are recorded by the chain's end.
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
 * code "BudgetExceeded", which becomes the call's result.
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
 * @return PL_OK; PL_EINVAL (NULL @p out, @p ms zero or negative).
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
 * preview).  Never a silent cut: the full result stays in the callee's
 * ledger.
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
 * @return PL_OK; PL_EINVAL (NULL argument, a name that is empty or longer
 *         than PL_MAX_FLOW_KEY, limit 0, window_ms below 1); PL_ESTATE (a
 *         read-only engine); PL_ECORRUPT (the budget record is damaged);
 *         PL_ESTORE.
 */
int pl_rate_take(bool *out_admitted, int64_t *out_at_ms,
                 int64_t *out_retry_at_ms, pl_engine *engine,
                 const char *resource, uint32_t limit, int64_t window_ms);

#define PL_RATE_LIMIT_OPTIONS_VERSION 1

/** rate_limit's options.  Initialise with PL_RATE_LIMIT_OPTIONS_INIT. */
typedef struct pl_rate_limit_options {
    unsigned version;     /**< PL_RATE_LIMIT_OPTIONS_VERSION */
    const char *resource; /**< the budget's name, shared by every process:
                               1..PL_MAX_FLOW_KEY bytes; required */
    uint32_t limit;       /**< calls per window, 1 or more; required */
    int64_t window_ms;    /**< the window, 1 ms or more; default 1000 */
    pl_sleep_fn sleep;    /**< how to wait; NULL: the engine's durable
                               sleep, pl_ctx_sleep_until() */
    void *sleep_user;     /**< passed to sleep */
} pl_rate_limit_options;

#define PL_RATE_LIMIT_OPTIONS_INIT                                             \
    { PL_RATE_LIMIT_OPTIONS_VERSION, NULL, 0, 1000, NULL, NULL }

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
 * Put it where each repetition should count: [retry, rate_limit] takes
 * budget for every attempt; around invoke_action's per-call list, every
 * tool call.
 * @param opts borrowed (see above).
 * @return PL_OK; PL_EINVAL (NULL argument, wrong version, no resource or a
 *         name longer than PL_MAX_FLOW_KEY, limit 0, window_ms below 1).
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
 *                    "error": a failed page's error result}
 * where "stopped" is "end" (complete: no continuation left), "page_limit",
 * "byte_cap", "error" (a later page's result was an error: the pages
 * before it are merged), "malformed_page" (a later page's items are not an
 * array) or "repeated_continuation" (a page returned the continuation
 * that asked for it).  "next", "note" and "error" are there only when they
 * apply.  Never a silent cut: every page read is in the ledger whole.
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
 * A normaliser that calls policies makes the raw result durable before its
 * first call; a crash after it replays the inner chain.  So over a tool
 * whose result is not the same on every run (an HTTP page), put paginate
 * inside observe, [observe, paginate]: paginate makes the tool's result a
 * recorded call that the replay serves.
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

/* ------------------------------------------------------------------------ */
/* Traces                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * A JSON-lines trace: one line per engine event, written and flushed as it
 * happens.  Each line is an object with the fields that apply:
 *
 *   ts_us       when it was written, Unix microseconds (always)
 *   trace_id    the run id (always)
 *   event       pl_event_kind_name(), e.g. "call_completed" (always)
 *   path        the invocation path ("0" is the root)
 *   seq         step events: the step; call events: the action_call's
 *               position; commit: how many steps became durable
 *   policy      call events: the callee; step events: the actor; run
 *               events: the root policy
 *   step_type   step events: "action_call", ...
 *   outcome     call and run ends: "served", "completed", "failed",
 *               "suspended"
 *   status      a failure's pl_status name, e.g. "PL_EPOLICY"
 *   detail      an error code or reason
 *   elapsed_ns  call and run ends, commits
 *   tokens      a call's end that carries a model's tokens
 *               (pl_event.tokens_in / tokens_out): {"input", "output"}
 *
 * Install it as the engine's event callback:
 *
 *     pl_trace *t;
 *     pl_trace_open(&t, "run.jsonl");
 *     opts.on_event = pl_trace_event;
 *     opts.event_user = t;
 *
 * A program with an event callback of its own keeps it and calls
 * pl_trace_event(event, t) from it.  Lines from concurrent runs never mix.
 */
typedef struct pl_trace pl_trace;

/**
 * Open a trace file for appending (created if missing).
 * @param[out] out caller owns; close with pl_trace_close() after the last
 *             engine using it has closed.
 * @return PL_OK; PL_EINVAL (NULL argument); PL_EIO (cannot open it:
 *         pl_errmsg() says why); PL_ENOMEM.
 */
int pl_trace_open(pl_trace **out, const char *path);

/**
 * Write one event as a line: a pl_event_fn whose user is the pl_trace.
 * A line that cannot be written is counted, never reported here (an event
 * callback returns nothing): pl_trace_close() reports it.
 */
void pl_trace_event(const pl_event *event, void *trace);

/**
 * Close a trace.  NULL does nothing.
 * @return PL_OK; PL_EIO when any line could not be written or the file
 *         could not be closed (pl_errmsg() says how many and why).
 */
int pl_trace_close(pl_trace *trace);

/* ------------------------------------------------------------------------ */
/* OpenTelemetry                                                            */
/* ------------------------------------------------------------------------ */

/*
 * An OpenTelemetry exporter on the event callback: a span per run and per
 * call, sent as OTLP/HTTP JSON (POST .../v1/traces) by a background thread.
 *
 *   span      name         parent               span id
 *   the run   "run " root  none (the root)      of (run id, "0")
 *   a call    the callee   the caller's span    of (run id, callee's path)
 *
 * Ids are derived, never random: the trace id is the first 16 bytes of
 * SHA-256 of the run id, a span id the first 8 of SHA-256 of "run id NUL
 * path".  So every execution of a run (a replay after a crash, a resume)
 * sends its spans in the same trace under the same ids, and a served call
 * (a result the ledger returned) carries the id of the execution that
 * recorded it.  Attributes (all spans): policyledger.run_id,
 * policyledger.path, policyledger.policy, policyledger.outcome
 * ("completed", "failed", "served", "suspended"); calls add
 * policyledger.step (the action_call's position in the caller) and
 * policyledger.served (true for a served call); a failure adds
 * policyledger.status (the pl_status name) or policyledger.error_code (an
 * error result's code) and the span's status is ERROR with the detail as
 * its message.  Spans still open when a run suspends or fails end with it.
 * An executed call whose end event carries a model's tokens (an LLM
 * policy's result: pl_event.tokens_in / tokens_out) adds
 * gen_ai.usage.input_tokens and gen_ai.usage.output_tokens.
 *
 * Attach it like pl_trace (the event callback, with the exporter as user):
 *
 *     pl_otel *x;
 *     pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
 *     oo.endpoint = "http://127.0.0.1:4318";
 *     pl_otel_open(&x, &oo);
 *     opts.on_event = pl_otel_event;
 *     opts.event_user = x;
 *
 * @note The event path never waits on the network: a finished span goes to
 * a bounded queue (a full queue drops it and counts it), and the thread
 * sends batches.  A receiver that fails, hangs or is down never blocks a
 * call or fails a run; its spans are counted as dropped.  Safe from many
 * threads at once (concurrent runs, fan-out).  No exporter attached costs
 * nothing.
 */
typedef struct pl_otel pl_otel;

#define PL_OTEL_OPTIONS_VERSION 1

/** Exporter options.  Initialise with PL_OTEL_OPTIONS_INIT. */
typedef struct pl_otel_options {
    unsigned version;     /**< PL_OTEL_OPTIONS_VERSION */
    /**
     * The OTLP/HTTP base URL; spans go to ENDPOINT/v1/traces.  NULL: the
     * environment's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is),
     * else OTEL_EXPORTER_OTLP_ENDPOINT (plus /v1/traces).
     */
    const char *endpoint;
    /**
     * Extra request headers, "key=value,key2=value2" (values may be
     * percent-encoded).  NULL: OTEL_EXPORTER_OTLP_HEADERS.  Their values
     * never appear in a message.
     */
    const char *headers;
    /** The resource's service.name; NULL: OTEL_SERVICE_NAME, else
     *  "policyledger". */
    const char *service_name;
    size_t max_queue;             /**< spans waiting; 0 = 2048 */
    size_t max_batch;             /**< spans per request; 0 = 512 */
    unsigned flush_interval_ms;   /**< longest wait to send; 0 = 1000 */
    unsigned timeout_ms;          /**< per request; 0 = 10000 */
    unsigned shutdown_timeout_ms; /**< pl_otel_close()'s flush; 0 = 5000 */
} pl_otel_options;

#define PL_OTEL_OPTIONS_INIT                                                   \
    { PL_OTEL_OPTIONS_VERSION, NULL, NULL, NULL, 0, 0, 0, 0, 0 }

#define PL_OTEL_COUNTS_VERSION 1

/** What an exporter did so far (pl_otel_stats()).  Initialise with
 *  PL_OTEL_COUNTS_INIT. */
typedef struct pl_otel_counts {
    unsigned version;  /**< PL_OTEL_COUNTS_VERSION */
    uint64_t spans;    /**< finished spans handed to the queue */
    uint64_t sent;     /**< spans the receiver accepted (HTTP 2xx) */
    uint64_t dropped;  /**< spans lost: queue full, a request that failed
                            or timed out, or left at shutdown */
    uint64_t requests; /**< HTTP requests made */
    uint64_t failures; /**< requests that failed */
} pl_otel_counts;

#define PL_OTEL_COUNTS_INIT { PL_OTEL_COUNTS_VERSION, 0, 0, 0, 0, 0 }

/**
 * Open an exporter and start its thread.
 * @param[out] out caller owns; close with pl_otel_close() after the last
 *             engine using it has closed.
 * @param opts NULL for defaults (the endpoint from the environment).
 * @return PL_OK; PL_ENOTFOUND (no endpoint: none given, none in the
 *         environment); PL_EINVAL (NULL @p out, a bad version, an endpoint
 *         that is not http:// or https://, a header without '=');
 *         PL_ENOMEM; PL_EIO (libcurl or the thread could not start; or
 *         a library built without libcurl, PL_WITH_CURL=OFF, saying so).
 */
int pl_otel_open(pl_otel **out, const pl_otel_options *opts);

/** Take one event: a pl_event_fn whose user is the pl_otel. */
void pl_otel_event(const pl_event *event, void *otel);

/** Copy the exporter's counters into @p out, made with PL_OTEL_COUNTS_INIT.
 *  @return PL_OK; PL_EINVAL (NULL, a bad version). */
int pl_otel_stats(pl_otel_counts *out, const pl_otel *otel);

/**
 * Wait until every span queued so far has been sent (or dropped), at most
 * @p timeout_ms.  Never needed for correctness: pl_otel_close() flushes.
 * @return PL_OK; PL_EINVAL (NULL); PL_EBUSY (spans still waiting when the
 *         time ran out).
 */
int pl_otel_flush(pl_otel *otel, unsigned timeout_ms);

/**
 * Send what is queued (waiting at most shutdown_timeout_ms: a request in
 * flight past it is cut off), stop the thread and free the exporter.
 * NULL does nothing.
 * @return PL_OK; PL_EIO when spans were dropped over the exporter's life
 *         (pl_errmsg() says how many and the first reason, never a header
 *         value).
 */
int pl_otel_close(pl_otel *otel);

/*
 * validate: JSON Schema checks of a callee's input and result, written with
 * this header alone too (core/ext/validate.c; the validator is in the "JSON
 * Schema" section below).
 */

/** Compiled schemas of the policies pl_decorator_validate() checks.  Opaque;
 *  thread-safe. */
typedef struct pl_schema_cache pl_schema_cache;

/**
 * Create a cache of compiled schemas, keyed by policy name: each policy's
 * schemas are compiled at its first validated call, never again.  Use one
 * cache with one registry (a policy's schemas are taken to stay as they
 * were registered).
 * @param[out] out caller owns; free with pl_schema_cache_free() after every
 *             run that uses it has ended.
 * @return PL_OK; PL_EINVAL (NULL out); PL_ENOMEM.
 */
int pl_schema_cache_new(pl_schema_cache **out);

/** Free a schema cache.  NULL does nothing. */
void pl_schema_cache_free(pl_schema_cache *cache);

/**
 * validate: check the callee's input (action->payload) against its
 * registered input_schema before it runs, and its result (the last step it
 * returns, {} if none) against its output_schema.  An invalid input is an
 * `error` step {"error": true, "code": "InvalidInput", "message", "path",
 * "keyword"} and the callee does NOT run; a result that does not match is
 * followed by such a step with code "OutputSchemaMismatch", which becomes
 * the call's result.  "path" is a JSON pointer into the payload or result
 * ("" for the whole), "keyword" the schema keyword that failed.  An
 * error-as-data result is passed on unchecked.  A policy without schemas is
 * called as is.  Both steps are recorded, so a replay serves them as it
 * serves any result.
 * @param cache borrowed; holds the compiled schemas (see
 *        pl_schema_cache_new()); must outlive every call using the
 *        decorator.
 * @return PL_OK; PL_EINVAL (NULL @p out or @p cache).
 * @note A value too costly to check (PL_ELIMIT, see PL_SCHEMA_MAX_WORK)
 *       fails the run with that status and pl_errmsg()'s reason.
 */
int pl_decorator_validate(pl_decorator *out, pl_schema_cache *cache);

/* ------------------------------------------------------------------------ */
/* Building and reading JSON                                                */
/* ------------------------------------------------------------------------ */

/*
 * Build or read a small JSON value in one call, from a format string in the
 * manner of jansson's json_pack() and json_unpack().  A format describes one
 * value; whitespace, ':' and ',' are ignored, so "{s:i, s:[ss]}" and
 * "{si s[ss]}" are the same format.
 *
 *   letter  pack: argument           unpack: argument         unpack accepts
 *   {...}   (none): an object        (none)                   an object
 *   [...]   (none): an array         (none)                   an array
 *   s       const char *, copied     const char **, borrowed  a string
 *   n       (none): null             (none)                   null
 *   b       int, non-zero is true    bool *                   true or false
 *   i       int                      int *                    an integral
 *                                                             number that
 *                                                             fits in int
 *   I       int64_t, |v| <= 2^53     int64_t *                an integral
 *                                                             number,
 *                                                             |v| <= 2^53
 *   f       double, finite           double *                 any number
 *   o       cJSON *, taken over      const cJSON **, borrowed any value
 *   O       const cJSON *, copied    cJSON **, a copy: free   any value
 *                                    it with cJSON_Delete()
 *
 * Inside {...} each member is a key, the letter 's' whose argument is the
 * key (a const char *, never NULL), then the key's value: pack "{s:i}" takes
 * ("n", 42), unpack "{s:i}" takes ("n", &n).  The items of [...] are
 * positional.
 * Arguments are read as the types above, so pass exactly those: 1.0, not 1,
 * for 'f'; (int64_t)1 for 'I'.
 *
 * Pack only:
 *   s? o? O?  a NULL argument builds null.
 *   s* o* O*  a NULL argument builds nothing: the array has no such item,
 *             the object no such member.  Only inside {...} or [...].
 *   A key given twice keeps its last value.
 *
 * Unpack only:
 *   {s?...}   the key is optional: when it is missing, the value's arguments
 *             are read but nothing is stored, so its variables keep what
 *             they held.  Present with the wrong type, it is an error.
 *   !         right before } or ]: strict, the object may have no key, the
 *             array no item, that the format does not read.  Without it
 *             (or with '*' there) those are ignored.
 *   Keys match case-sensitively; of two members with one key, the first.
 *
 * A format nests at most PL_MAX_JSON_DEPTH objects and arrays deep.
 *
 * Every failure sets a one-line message (pl_errmsg()) naming the failing
 * value by its path, from "$" (the whole value) through ".key", ["odd key"]
 * and "[index]", and what was expected or wrong:
 *   unpack: $.items[2].name: missing key
 *   unpack: $.sum: expected a number, got a string
 *   pack: $.a: non-finite number (inf)
 * A malformed format names the offset of the fault instead:
 *   pack: format "{s:x}", offset 3: expected a value, got 'x'
 */

/**
 * Build a JSON value from a format and the arguments after it (see above):
 * `pl_json_pack(&v, "{s:s, s:[ii]}", "name", name, "xy", x, y)`.
 * @param[out] out the value; caller owns, free with cJSON_Delete().  NULL
 *             on failure.
 * @param fmt  the format of one value.
 * @return PL_OK; PL_EINVAL (NULL @p out or @p fmt, a malformed format, a
 *         NULL key, a NULL argument for 's', 'o' or 'O' without '?' or
 *         '*'); PL_ELIMIT (the format nests deeper than PL_MAX_JSON_DEPTH);
 *         PL_EJSON (an 'f' argument that is not finite, an 'I' argument
 *         past 2^53 in magnitude); PL_ENOMEM.
 * @note Every 'o' argument is taken over, on failure as on success: a failed
 *       call frees them (a NULL @p out included), and nothing else leaks.
 *       Only a NULL, malformed or too deep @p fmt is found before any
 *       argument is read; then the caller still owns its 'o' arguments.
 */
int pl_json_pack(cJSON **out, const char *fmt, ...);

/**
 * pl_json_pack() with a va_list.  @p ap is read through a copy, so the
 * caller may use it again; va_end() it as usual.
 */
int pl_json_vpack(cJSON **out, const char *fmt, va_list ap);

/**
 * Read a JSON value against a format, storing what it reads into the
 * variables the arguments after the format point to (see above):
 * `pl_json_unpack(v, "{s:s, s?i !}", "name", &name, "age", &age)`.
 * @param json the value to read; borrowed.  The strings ('s') and values
 *             ('o') stored are borrowed from it: valid as long as it is,
 *             and unchanged.
 * @param fmt  the format of one value.
 * @return PL_OK; PL_EINVAL (NULL @p json or @p fmt, a malformed format, a
 *         NULL key or NULL pointer argument); PL_ELIMIT (the format nests
 *         deeper than PL_MAX_JSON_DEPTH); PL_EJSON (@p json does not match
 *         the format: a missing key or item, a value of another type, a
 *         number that is not integral or does not fit for 'i' or 'I', a key
 *         or item more than a strict format reads); PL_ENOMEM (copying for
 *         'O').
 * @note On failure the variables may be partly set: those of values read
 *       before the failing one.  The copies 'O' made are freed on failure
 *       and their variables set back to NULL, so the caller owns copies
 *       only after PL_OK.
 */
int pl_json_unpack(const cJSON *json, const char *fmt, ...);

/**
 * pl_json_unpack() with a va_list.  @p ap is read through a copy, so the
 * caller may use it again; va_end() it as usual.
 */
int pl_json_vunpack(const cJSON *json, const char *fmt, va_list ap);

/**
 * Build an object with pl_json_pack() and append it to @p steps as an
 * `action_result` (pl_steps_add_result()):
 * `pl_steps_add_resultf(out, "{s:i}", "sum", a + b)`.
 * @return as pl_json_pack() and pl_steps_add(); PL_EJSON also when the
 *         format builds something other than an object (e.g. "[i]").
 * @note 'o' arguments are taken over as by pl_json_pack(), also when
 *       appending fails.
 */
int pl_steps_add_resultf(pl_steps *steps, const char *fmt, ...);

/**
 * pl_ctx_invoke() with a payload packed from @p fmt and its arguments, as
 * pl_json_pack() does: `pl_ctx_invokef(&r, ctx, "add", "{s:f, s:f}",
 * "a", 1.0, "b", 2.0)`.
 * @return as pl_json_pack() (the format or an argument is bad: nothing was
 *         called and the run goes on), PL_EJSON also when the format builds
 *         something other than an object; otherwise as pl_ctx_invoke().
 * @note 'o' arguments are taken over as by pl_json_pack().
 */
int pl_ctx_invokef(cJSON **out, pl_ctx *ctx, const char *policy,
                   const char *fmt, ...);

/* ------------------------------------------------------------------------ */
/* Sandbox: paths under a directory, commands from an allowlist             */
/* ------------------------------------------------------------------------ */

/*
 * A sandbox confines what a tool may touch to one working directory (held
 * open as a directory descriptor from pl_sandbox_new() on) and a list of
 * programs.  The rules, as the code keeps them:
 *
 *   - A path is relative to the directory, or absolute and inside it (its
 *     canonical path, pl_sandbox_root(), followed by '/' or nothing).
 *   - ".." may go up only as far as the directory itself.
 *   - A symlink is followed only when its target is relative and stays
 *     inside; an absolute target, or one that climbs out, is refused.  At
 *     most 40 symlinks are followed per path.
 *   - A path is 1..4095 bytes, each component at most 255, with no NUL and
 *     no control byte (0x01-0x1f, 0x7f).
 *   - pl_sandbox_open_file() never follows a symlink it has not checked:
 *     it opens with openat2(2) and RESOLVE_BENEATH where the kernel has it
 *     (and no seccomp filter refuses it), and otherwise walks the path one
 *     component at a time with openat(O_NOFOLLOW), reading each symlink
 *     itself.  So a symlink swapped in after pl_sandbox_resolve() and
 *     before the open is refused by the open.
 *   - Hard links and mounts inside the directory are not seen as exits:
 *     whoever can make them there reaches those files anyway.
 *   - A command is an argument vector, never a shell line: its program
 *     (argv[0]) must be one of the allowed names exactly (no path, no '/'),
 *     and no argument may hold a control byte.  Allowing a shell allows
 *     everything it can run.
 *
 * Refusals are PL_EFORBIDDEN with a message naming the path or program and
 * the rule it broke.  A sandbox is read-only after pl_sandbox_new(): threads
 * may share it.
 */

/** A working directory and a command allowlist.  Opaque. */
typedef struct pl_sandbox pl_sandbox;

/** Version 2 appended path_commands; a version 1 struct is still taken. */
#define PL_SANDBOX_OPTIONS_VERSION 2

/** Sandbox options.  Initialise with PL_SANDBOX_OPTIONS_INIT. */
typedef struct pl_sandbox_options {
    unsigned version;             /**< PL_SANDBOX_OPTIONS_VERSION */
    const char *const *commands;  /**< program names allowed; may be NULL */
    size_t n_commands;            /**< entries in commands */
    /** true: never use openat2(2), always walk paths component by
        component (the fallback for kernels without it). */
    bool walk_only;
    /** Since version 2: programs allowed too, whose arguments are paths
     *  that must stay under the root (see pl_sandbox_check_command()):
     *  "cat", "ls", "wc", ...  May be NULL. */
    const char *const *path_commands;
    size_t n_path_commands;       /**< entries in path_commands */
} pl_sandbox_options;

#define PL_SANDBOX_OPTIONS_INIT                                                \
    { PL_SANDBOX_OPTIONS_VERSION, NULL, 0, false, NULL, 0 }

/**
 * Create a sandbox on the directory @p root (which must exist), with the
 * command allowlist of @p opts.
 * @param[out] out caller owns; free with pl_sandbox_free().
 * @param opts NULL for defaults (no command allowed).
 * @return PL_OK; PL_EINVAL (NULL argument, wrong options version, an empty
 *         command name or one with '/' or a control byte); PL_ENOTFOUND
 *         (no such directory); PL_EIO (not a directory, or it cannot be
 *         opened); PL_ENOMEM.
 */
int pl_sandbox_new(pl_sandbox **out, const char *root,
                   const pl_sandbox_options *opts);

/** Free a sandbox (and close its directory).  NULL does nothing. */
void pl_sandbox_free(pl_sandbox *sb);

/** @return the directory's canonical absolute path (borrowed, valid until
 *          pl_sandbox_free()). */
const char *pl_sandbox_root(const pl_sandbox *sb);

/**
 * Resolve a path under the sandbox, following the symlinks it meets (by
 * the rules above), and give its canonical form relative to the root.
 * Every component but the last must exist; the last may not (a file to be
 * created), and is then given as it is named.  A check, not a capability:
 * open with pl_sandbox_open_file(), which checks again as it opens.
 * @param[out] out the relative path ("." for the root itself, else
 *             "dir/file", no "." or ".." or symlink in it); caller owns,
 *             free with free().
 * @param path @p len bytes (a C string's strlen(); a NUL inside is refused).
 * @return PL_OK; PL_EFORBIDDEN (outside the sandbox: an absolute path
 *         elsewhere, ".." above the root, a symlink that leaves it or is
 *         absolute); PL_EINVAL (NULL argument, empty path, NUL or control
 *         byte); PL_ELIMIT (path or component too long, too many
 *         symlinks); PL_ENOTFOUND (a missing directory on the way, or a
 *         component on the way that is a file); PL_EIO; PL_ENOMEM.
 */
int pl_sandbox_resolve(char **out, const pl_sandbox *sb, const char *path,
                       size_t len);

/**
 * Open a file under the sandbox, as openat(2) would with @p flags and
 * @p mode, never leaving it (see the rules above).  O_CLOEXEC is always
 * added.  With O_NOFOLLOW in @p flags a symlink as the last component is
 * refused (PL_EFORBIDDEN) instead of followed.
 * @param[out] out_fd the new descriptor; caller owns, close() it.  -1 on
 *             failure.
 * @param flags open(2) flags (O_RDONLY, O_WRONLY | O_CREAT, ...).
 * @param mode the mode of a file O_CREAT makes.
 * @return as pl_sandbox_resolve(), plus PL_ENOTFOUND (no such file), PL_EIO
 *         (the open failed otherwise: permission, a directory opened for
 *         writing, ...; the message says which).
 */
int pl_sandbox_open_file(int *out_fd, const pl_sandbox *sb, const char *path,
                         size_t len, int flags, unsigned mode);

/**
 * Check a command against the allowlist: argv[0] must be an allowed
 * program name exactly, and no argument may hold a control byte.  Nothing
 * is run; a command that passes is to be run with execvp()-like calls,
 * never through a shell.
 *
 * For a program of path_commands, its path arguments must stay under the
 * root: every argument that does not start with '-' ("-" alone is standard
 * input), every argument after "--", and the value of "--name=value".
 * Relative ones are taken from the root.  A path is refused when it is
 * absolute and elsewhere, when its ".." climb above the root as written
 * (even through parts that do not exist yet: a program may make them), or
 * when a symlink on its way leaves the root (pl_sandbox_resolve()); a
 * missing part is left for the program to meet.  A short option with a
 * '/' in its attached value ("-f/etc/x") is refused: give the path as an
 * argument of its own.  This checks the arguments as given: it does not
 * confine what the program then opens.
 * @param argv @p argc C strings, argc >= 1.
 * @return PL_OK; PL_EFORBIDDEN (program not allowed, or given as a path; a
 *         path argument outside the root); PL_EINVAL (NULL argument, argc
 *         0, an empty program name, a control byte in an argument);
 *         PL_ELIMIT (a path argument too long).
 */
int pl_sandbox_check_command(const pl_sandbox *sb, const char *const *argv,
                             size_t argc);

/**
 * pl_sandbox_check_command() for a command run in the directory @p cwd
 * under the root (a path pl_sandbox_resolve() gave, or NULL for the root):
 * relative path arguments are taken from it.
 * @return as pl_sandbox_check_command().
 */
int pl_sandbox_check_command_in(const pl_sandbox *sb, const char *cwd,
                                const char *const *argv, size_t argc);

/* ------------------------------------------------------------------------ */
/* Tools for models: calculator, read_file, http_get, run_command          */
/* ------------------------------------------------------------------------ */

/*
 * Three tool policies, each registered with a description and an input
 * JSON Schema so that a model sees them as tool definitions.  Every failure
 * a caller can cause or meet is an error-as-data result, never a status:
 *
 *   calculator  {"expression": "2 * (3 + 4) ^ 2"} -> {"result": 98}
 *               + - * / % ^ (right-associative, above unary minus),
 *               parentheses, unary minus and plus, decimals with an
 *               optional exponent.  InvalidInput: bad syntax (with the
 *               offset), division or remainder by zero, a result that
 *               overflows to inf or is not a number, more than
 *               PL_TOOLS_MAX_EXPRESSION bytes, nesting deeper than
 *               PL_TOOLS_MAX_NESTING.
 *   read_file   {"path": "notes/a.txt"} -> {"path": "notes/a.txt",
 *               "content": "...", "bytes": N, "truncated": false}
 *               A UTF-8 text file under the sandbox directory (rules of
 *               pl_sandbox_open_file()).  Past max_file_bytes the content
 *               is cut there (at a character boundary), "truncated" is
 *               true and "note" says so.  NotFound; Forbidden (an escape);
 *               InvalidInput (a bad path, a directory, a binary file).
 *   http_get    {"url": "http://127.0.0.1:8080/x"} -> {"url": final URL,
 *               "status": 200, "content_type": "...", "body": "...",
 *               "bytes": N, "truncated": false}
 *               A GET over libcurl, only to allowed URLs (below), each
 *               redirect checked again, at most max_redirects of them, and
 *               never to a file:// URL; no proxy (the environment's
 *               http_proxy is ignored); it sends the call's idempotency key
 *               (pl_ctx_idempotency_key()) as Idempotency-Key.  A
 *               body past max_body_bytes is cut as read_file's is.  404
 *               NotFound, 401 Unauthorized, 403 Forbidden, 429 RateLimited
 *               (the message carries Retry-After), 5xx RetryableServer,
 *               other 4xx InvalidInput; a timeout Timeout; a refused
 *               connection RetryableServer; a URL or redirect outside the
 *               allowlist Forbidden.  file:// URLs read through the
 *               sandbox, as read_file does.
 *
 *   run_command {"argv": ["ls", "-l", "notes"], "cwd": "sub",
 *               "stdin": "text", "timeout_ms": 5000}
 *               -> {"exit_code": 0, "signal": null, "timed_out": false,
 *                   "stdout": "...", "stderr": "...", "stdout_bytes": N,
 *                   "stderr_bytes": N, "truncated": false}
 *               One program, run as an argument vector, never through a
 *               shell, only when the sandbox allows it
 *               (pl_sandbox_check_command_in(): argv[0] one of commands
 *               or path_commands, and for the latter every path argument
 *               under the root: "..", absolute paths and symlinks that
 *               leave it are refused), before anything runs.  It runs in
 *               its own process group, in the directory cwd under the
 *               root (default the root), with only the environment
 *               variables the options allow, standard input the given
 *               "stdin" or /dev/null, every other descriptor closed, and
 *               is killed (SIGKILL) with it if the engine's process dies.
 *               Its output is read until every process of the group has
 *               closed it and the program has ended, at most the timeout
 *               (the least of "timeout_ms", command_timeout_ms and the
 *               call's deadline, pl_ctx_deadline()); then, or at the
 *               timeout, the whole group is killed, so nothing it started
 *               outlives the call (but a process that left the group).
 *               Each of stdout and stderr is kept up to max_output_bytes
 *               (the rest is read and counted, not kept: memory stays
 *               bounded); "truncated" and a "note" say so; bytes that are
 *               not UTF-8 become U+FFFD.  A program that exits non-zero or
 *               dies of a signal is a result ("exit_code" null and
 *               "signal": "SIGSEGV"), for the caller to read.  Forbidden
 *               (the sandbox refused it: the message says why);
 *               InvalidInput (bad arguments, a cwd that is not a
 *               directory); NotFound (no such program on the allowed
 *               PATH, or no such cwd); Timeout (killed at the timeout:
 *               the error result carries every field above, with the
 *               output read until then).  Registered only with a root and
 *               allowed commands.
 *
 * The first three are registered idempotent: none changes anything outside
 * itself (the calculator is pure, read_file reads, a GET is safe by HTTP's
 * rules), so re-running one after a crash is harmless.  run_command is
 * not (command_idempotent false by default): its action_call is durable
 * before the program starts, and a crash while it runs gives its call the
 * in-doubt rule (command_in_doubt, by default PL_IN_DOUBT_FAIL: an
 * "InDoubt" error result), never a second run.  Results are recorded like
 * any call's: replay serves them and does not run the tool.
 */

#define PL_TOOLS_MAX_EXPRESSION 4096 /**< longest calculator input, bytes */
#define PL_TOOLS_MAX_NESTING 64      /**< deepest parentheses and unary
                                          operators in an expression */

/** The tools' shared settings.  Opaque. */
typedef struct pl_tools pl_tools;

/** Version 2 appended the run_command fields; a version 1 struct is still
 *  taken (no run_command). */
#define PL_TOOLS_OPTIONS_VERSION 2

/** Tool options.  Initialise with PL_TOOLS_OPTIONS_INIT. */
typedef struct pl_tools_options {
    unsigned version;          /**< PL_TOOLS_OPTIONS_VERSION */
    /** The sandbox directory of read_file and of file:// URLs.  NULL:
        read_file is not registered and no file:// URL is allowed. */
    const char *root;
    /** read_file's cap; 0 = 1 MiB, at most 1 GiB.  A result must fit
        the engine's max_payload (16 MiB by default), so keep the caps
        below it. */
    size_t max_file_bytes;
    /**
     * Allowed URL prefixes as "scheme://host" or "scheme://host:port"
     * (scheme http or https; host compared without case) or "file://".
     * NULL (n_allow 0): "file://" (with a root) and loopback http only,
     * "http://127.0.0.1", "http://localhost", "http://[::1]".
     */
    const char *const *allow;
    size_t n_allow;            /**< entries in allow */
    long connect_timeout_ms;   /**< 0 = 5000 */
    long timeout_ms;           /**< whole request; 0 = 30000 */
    size_t max_body_bytes;     /**< http_get's cap; as max_file_bytes */
    int max_redirects;         /**< redirects followed; -1 = 5, 0 = none */
    /* Since version 2: run_command, registered when root is set and a
     * program is allowed (the sandbox's commands and path_commands). */
    const char *const *commands;      /**< programs run_command may run */
    size_t n_commands;
    const char *const *path_commands; /**< ... whose arguments are paths
                                           under the root */
    size_t n_path_commands;
    /** Environment variables a command gets from the engine's process, by
     *  name; NULL (n_env 0): PATH, LANG, LC_ALL, TZ.  Every other variable
     *  is left out. */
    const char *const *env;
    size_t n_env;
    long command_timeout_ms;   /**< the longest a command runs; 0 = 10000 */
    size_t max_output_bytes;   /**< kept of each of stdout and stderr;
                                    0 = 64 KiB, at most 16 MiB */
    bool command_idempotent;   /**< default false (see above) */
    pl_in_doubt command_in_doubt; /**< default PL_IN_DOUBT_FAIL */
} pl_tools_options;

#define PL_TOOLS_OPTIONS_INIT                                                  \
    { PL_TOOLS_OPTIONS_VERSION, NULL, 0, NULL, 0, 0, 0, 0, -1, NULL, 0, NULL, \
      0, NULL, 0, 0, 0, false, PL_IN_DOUBT_FAIL }

/**
 * Check the options and make the tools' settings (opening the sandbox).
 * @param[out] out caller owns; free with pl_tools_free() after every engine
 *             whose registry holds the tools is closed.
 * @param opts NULL for defaults.
 * @return PL_OK; PL_EINVAL (wrong version, a malformed allow entry, a
 *         negative timeout, max_redirects below -1, a cap past 1 GiB);
 *         the errors of
 *         pl_sandbox_new() for root; PL_EIO (libcurl cannot be
 *         initialised); PL_ENOMEM.
 * @note Calls curl_global_init() (and pl_tools_free() its cleanup): with
 *       libcurl before 7.84, call it before other threads use libcurl.
 */
int pl_tools_new(pl_tools **out, const pl_tools_options *opts);

/** Free the tools' settings.  NULL does nothing. */
void pl_tools_free(pl_tools *tools);

/**
 * Register "calculator", "http_get" and, with a root, "read_file" (and,
 * with allowed commands, "run_command") in @p reg.  A library built
 * without libcurl (PL_WITH_CURL=OFF) has no "http_get": pl_tools_new()
 * refuses an http:// or https:// allow entry there, saying so.  Every name
 * is checked first, so PL_EEXIST registers none.
 * @param tools borrowed: must outlive every engine using @p reg.
 * @return PL_OK; PL_EINVAL (NULL argument); PL_EEXIST (a name is taken);
 *         PL_ENOMEM.
 */
int pl_tools_register(pl_registry *reg, const pl_tools *tools);

/* JSON Schema                                                              */
/* ------------------------------------------------------------------------ */

/*
 * A JSON Schema validator with draft 7 semantics, checked against the
 * official JSON-Schema-Test-Suite (README lists the keywords and the pass
 * count).  Keywords: type enum const multipleOf maximum exclusiveMaximum
 * minimum exclusiveMinimum maxLength minLength (in code points) pattern
 * items additionalItems maxItems minItems uniqueItems contains
 * maxProperties minProperties required properties patternProperties
 * additionalProperties propertyNames dependencies allOf anyOf oneOf not
 * if/then/else, boolean schemas, "$ref" to "#" or "#/json/pointer" in the
 * same document (definitions, $defs, ...), and from draft 2020-12
 * prefixItems (when present, "items" applies past the prefix),
 * dependentRequired and dependentSchemas.  Unknown keywords are ignored;
 * "format" is not asserted; "$id", anchors and remote references are not
 * resolved (a "$ref" elsewhere is refused when compiling).
 *
 * "pattern" and "patternProperties" use POSIX extended regular expressions
 * (<regex.h>), unanchored, after translating ECMA-262's \d \w \s \D \W
 * \S.  Refused when compiling: lookaround, lazy quantifiers,
 * backreferences, \p{..}, \u and \b escapes.  Matching is by byte.
 *
 * Bounds: a schema nests at most PL_SCHEMA_MAX_DEPTH JSON levels;
 * validation applies schemas at most PL_SCHEMA_MAX_DEPTH deep (a "$ref"
 * cycle ends there) and does at most PL_SCHEMA_MAX_WORK units of work
 * (a schema applied, a value compared, 64 bytes matched): PL_ELIMIT past
 * either.  Numbers are compared as doubles.
 */

#define PL_SCHEMA_MAX_DEPTH 128        /**< see above */
#define PL_SCHEMA_MAX_WORK 10000000ULL /**< see above */
#define PL_SCHEMA_PATH_MAX 256         /**< pl_schema_error.path, NUL included */

/** A compiled JSON Schema.  Opaque; immutable, so thread-safe to share. */
typedef struct pl_schema pl_schema;

#define PL_SCHEMA_ERROR_VERSION 1

/** The first reason an instance does not match a schema.  Initialise with
 *  PL_SCHEMA_ERROR_INIT. */
typedef struct pl_schema_error {
    unsigned version;              /**< PL_SCHEMA_ERROR_VERSION */
    char path[PL_SCHEMA_PATH_MAX]; /**< JSON pointer to the failing value in
                                        the instance, "" for the whole;
                                        truncated if longer */
    char keyword[32];              /**< the keyword that failed, e.g.
                                        "required"; "false" for a false
                                        schema */
    char message[256];             /**< what failed, in words */
} pl_schema_error;

#define PL_SCHEMA_ERROR_INIT { PL_SCHEMA_ERROR_VERSION, "", "", "" }

/**
 * Compile a schema.  @p schema is copied.
 * @param[out] out caller owns; free with pl_schema_free().  NULL on failure.
 * @return PL_OK; PL_EINVAL (NULL argument, a keyword with a bad value, an
 *         unsupported or unresolvable "$ref", a pattern POSIX regex cannot
 *         take: the message names where, e.g. "JSON Schema at
 *         #/properties/a/minimum: expected a number"); PL_EJSON (@p schema
 *         is neither an object nor a boolean); PL_ELIMIT (nests deeper than
 *         PL_SCHEMA_MAX_DEPTH); PL_ENOMEM.
 */
int pl_schema_compile(pl_schema **out, const cJSON *schema);

/** pl_schema_compile() from JSON text.  @return as pl_schema_compile(), and
 *  PL_EJSON for text that is not JSON. */
int pl_schema_compile_text(pl_schema **out, const char *text);

/**
 * Validate @p instance against @p schema.
 * @param[out] out made with PL_SCHEMA_ERROR_INIT: the first error when the
 *             instance does not match; empty strings otherwise.  May be
 *             NULL.
 * @return PL_OK (it matches); PL_EJSON (it does not: *out says where and why,
 *         and so does pl_errmsg()); PL_ELIMIT (a bound above was hit, no
 *         verdict); PL_EINVAL (NULL schema or instance, a bad version of
 *         @p out).
 */
int pl_schema_validate(pl_schema_error *out, const pl_schema *schema,
                       const cJSON *instance);

/** Free a compiled schema.  NULL does nothing. */
void pl_schema_free(pl_schema *schema);

/* ------------------------------------------------------------------------ */
/* Built-in policies                                                        */
/* ------------------------------------------------------------------------ */

/**
 * Register a human-in-the-loop policy under @p name.  A call to it suspends
 * the run with the call's payload as the prompt (the outcome carries it and
 * a resume token); pl_run_resume() with an answer (a JSON object) continues
 * the run, and the call returns that answer as its result.
 * @return as pl_registry_add().
 */
int pl_registry_add_human(pl_registry *reg, const char *name);

#ifdef __cplusplus
}
#endif

/* clang-format on */

#endif /* POLICYLEDGER_H */
