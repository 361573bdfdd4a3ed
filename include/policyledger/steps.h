/*
 * policyledger/steps.h -- steps and step lists, actions, policies and the registry, plugins.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_STEPS_H
#define POLICYLEDGER_STEPS_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/steps.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

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

/**
 * @return true when the step's payload has a top-level member @p name whose
 *         value is true (JSON `true`); false otherwise, and for a NULL step
 *         or name.  Read from the step's encoded payload without decoding
 *         it, so a large payload costs no decoded copy.
 */
bool pl_step_flag(const pl_step *step, const char *name);

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
    const char *name;         /**< 1..PL_MAX_NAME bytes of UTF-8, no
                                   C0 control character or DEL */
    pl_policy_fn fn;          /**< the policy */
    void *user;               /**< passed to fn */
    const char *description;  /**< for tool catalogs; may be NULL */
    const char *input_schema; /**< JSON Schema text (an object) or NULL */
    /**
     * true (default): re-running the policy after a crash is harmless, so its
     * call is made durable together with its result.  false: its
     * `action_call` is made durable before it runs, and after a crash inside
     * it, @ref in_doubt decides.  That is a call's: a policy run as a
     * run's root has no `action_call`, and an execution after a crash
     * runs it again whole; a root that must not run twice calls the
     * policy (run_command and the MCP tools, run as a root, call
     * themselves so).
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
 * A C++ plugin catches every exception in its policies and its entry
 * point, returning a status: one that escapes into this C library ends
 * the process (std::terminate()), its run left as a crash leaves it.
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
 * A plugin's entry point: register the plugin's policies in @p reg (at
 * least one: a plugin that registers none is refused, PL_EPLUGIN).
 * @return PL_OK, or a negative pl_status (with a message through the
 *         registry's own errors, or just the status) to refuse loading.
 */
typedef int (*pl_plugin_init_fn)(pl_registry *reg);

/**
 * Load a plugin and register its policies in @p reg: all of them, or (on
 * any failure) none, leaving @p reg exactly as it was.
 *
 * The shared object stays loaded until @p reg is freed, which releases
 * the data its policies own (pl_registry_add_owned(): the release may be
 * the plugin's own function) before it unloads it.  Every policy it
 * registers without a code_version gets the plugin's code identity:
 * "build-id:<hex>" from its GNU build-id note, or "sha256:<hex>" of the
 * file's bytes when it has none.  So a run's action_calls say which build
 * recorded them (pl_step_code()).
 *
 * @return PL_OK; PL_ENOTFOUND (no such file); PL_EPLUGIN (not a loadable
 *         shared object, or no PL_PLUGIN_ENTRY or PL_PLUGIN_ABI_SYMBOL, or
 *         an entry point that registered no policy, or it would use
 *         another copy of this library than the caller's: a host linked
 *         with the static library); PL_EVERSION (built for
 *         another ABI version: the message names the plugin and both
 *         versions); PL_EEXIST (a policy
 *         name is registered already); the entry point's own status when
 *         it fails (PL_EPLUGIN if that is not a pl_status); PL_EINVAL;
 *         PL_ENOMEM.  pl_errmsg() names the file and the problem.
 */
int pl_plugin_load(pl_registry *reg, const char *path);

/* clang-format on */

#endif /* POLICYLEDGER_STEPS_H */
