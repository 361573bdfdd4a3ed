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
 *     PL_EINVAL for a NULL or stale context and for an argument refused
 *     before any call is made (pl_ctx_call_step()'s step that is no call,
 *     pl_ctx_call_all()'s NULL or zero calls, and PL_ELIMIT for too many,
 *     pl_ctx_invokef()'s format).  An action that cannot be called (no
 *     valid policy name, a NULL payload or one that is not an object, a
 *     wrong version, bad decorators) stops the run: it is the policy's
 *     bug, recorded as the run's reason.
 *   - The other pl_ctx_* functions refuse a bad argument (PL_EINVAL, said
 *     in pl_errmsg()) without touching the run, except where their
 *     comment says the run stops.
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
 *   names (policies, actors, events, side effects) are 1..PL_MAX_NAME bytes
 *   of UTF-8 without a C0 control character or DEL (0x01-0x1f, 0x7f; the
 *   tools escape C1 ones when they print a name); invocations nest at
 *   most PL_MAX_DEPTH deep; run ids are 1..PL_MAX_RUN_ID bytes of
 *   [A-Za-z0-9._:@~-] ("@" is what a schedule's tick puts in its runs'
 *   ids, "~" what pl_ctx_continue_as_new() appends).
 *
 * THE MANUAL'S PARTS
 *
 *   #include <policyledger.h> is the one include a program writes; this
 *   header holds the overview above, the versions and limits, and includes
 *   the rest of the manual, by topic, from include/policyledger/:
 *
 *     status.h      status codes (PL_OK, PL_E...) and the codes of errors as
 *                   data
 *     steps.h       steps and step lists, actions, policies and the registry,
 *                   plugins
 *     engine.h      events, and the engine: its options, opening, closing,
 *                   statistics
 *     runs.h        runs: starting, continuing, resuming, reading and listing
 *                   them, their ledgers, verifying and forking them; export
 *                   and import; deleting and pruning them (tombstones)
 *     time.h        time and events (sleeps, timers, signals, cancellation),
 *                   the queue and its workers, schedules
 *     context.h     the pool (many runs on a few threads), and the context:
 *                   what a running policy uses (calls, fan-out, side effects,
 *                   suspension, versions)
 *     decorators.h  decorators: retry, timeout, budget, rate limits,
 *                   pagination, observation, caps, validation
 *     observe.h     traces, and the OpenTelemetry exporter
 *     json.h        building and reading JSON in one call, and JSON Schema
 *     tools.h       the sandbox (paths under a directory, commands from an
 *                   allowlist), tools for models, built-in policies
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

/** @return the library's version string, PL_VERSION_STRING of the header
 *  it was built with ("2.0.0"). */
const char *pl_version(void);

/* The manual goes on in these headers, by topic, in this order: */
#include "policyledger/status.h"
#include "policyledger/steps.h"
#include "policyledger/engine.h"
#include "policyledger/runs.h"
#include "policyledger/time.h"
#include "policyledger/context.h"
#include "policyledger/decorators.h"
#include "policyledger/observe.h"
#include "policyledger/json.h"
#include "policyledger/tools.h"

#ifdef __cplusplus
}
#endif

/* clang-format on */

#endif /* POLICYLEDGER_H */
