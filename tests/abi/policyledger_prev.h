/*
 * policyledger_prev.h -- include/policyledger.h as code built against the
 * earlier versions of its structs saw it: the same ABI, with
 *
 *   pl_policy_def      version 1: no output_schema
 *   pl_engine_options  version 2: no host_id, no lease_ms
 *   pl_run_options     version 1: run_id and check
 *
 * and only the part of the API that old_plugin.c and old_host.c use, whose
 * function signatures are today's.  Never include it with policyledger.h:
 * the two declare the same names.  A struct here changes only to what one
 * of its versions really was.
 */
#ifndef POLICYLEDGER_PREV_H
#define POLICYLEDGER_PREV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define PL_ABI_VERSION 2

#define PL_OK 0
#define PL_EINVAL (-1)

const char *pl_errmsg(void);
const cJSON *pl_json_empty(void);

typedef struct pl_step pl_step;
typedef struct pl_steps pl_steps;
typedef struct pl_ctx pl_ctx;
typedef struct pl_engine pl_engine;
typedef struct pl_registry pl_registry;

const cJSON *pl_step_payload(const pl_step *step);
size_t pl_steps_count(const pl_steps *steps);
const pl_step *pl_steps_at(const pl_steps *steps, size_t i);
int pl_steps_add_text(pl_steps *steps, const char *actor, const char *text);
int pl_steps_add_result(pl_steps *steps, const cJSON *payload);
int pl_steps_add_error(pl_steps *steps, const char *code, const char *message);

#define PL_ACTION_VERSION 1

typedef struct pl_action {
    unsigned version;
    const char *policy;
    const cJSON *payload;
    const char *const *actions;
    size_t n_actions;
    const pl_steps *seed;
} pl_action;

#define PL_ACTION_INIT                                                         \
    {                                                                          \
        PL_ACTION_VERSION, NULL, NULL, NULL, 0, NULL                           \
    }

typedef int (*pl_policy_fn)(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                            void *user);

typedef enum pl_in_doubt {
    PL_IN_DOUBT_RERUN = 0,
    PL_IN_DOUBT_FAIL = 1,
    PL_IN_DOUBT_SUSPEND = 2
} pl_in_doubt;

#define PL_POLICY_DEF_VERSION 1

typedef struct pl_policy_def {
    unsigned version;
    const char *name;
    pl_policy_fn fn;
    void *user;
    const char *description;
    const char *input_schema;
    bool idempotent;
    pl_in_doubt in_doubt;
    const char *code_version;
} pl_policy_def;

#define PL_POLICY_DEF_INIT                                                     \
    {                                                                          \
        PL_POLICY_DEF_VERSION, NULL, NULL, NULL, NULL, NULL, true,             \
            PL_IN_DOUBT_RERUN, NULL                                            \
    }

int pl_registry_add(pl_registry *reg, const pl_policy_def *def);

int pl_ctx_invoke(cJSON **out, pl_ctx *ctx, const char *policy,
                  const cJSON *payload);
int pl_ctx_invokef(cJSON **out, pl_ctx *ctx, const char *policy,
                   const char *fmt, ...);

#if defined(__GNUC__) || defined(__clang__)
#define PL_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define PL_PLUGIN_EXPORT
#endif
PL_PLUGIN_EXPORT extern const unsigned pl_plugin_abi;
PL_PLUGIN_EXPORT int pl_plugin_init(pl_registry *reg);
#define PL_PLUGIN_DECLARE const unsigned pl_plugin_abi = PL_ABI_VERSION

/* ---- the host's side ---------------------------------------------------- */

typedef enum pl_run_status {
    PL_RUN_RUNNING = 1,
    PL_RUN_SUSPENDED = 2,
    PL_RUN_COMPLETED = 3,
    PL_RUN_FAILED = 4,
    PL_RUN_SUBMITTED = 5
} pl_run_status;

typedef enum pl_durability {
    PL_DURABILITY_SYNC = 0,
    PL_DURABILITY_GROUP = 1,
    PL_DURABILITY_PROCESS = 2
} pl_durability;

typedef struct pl_event pl_event;
typedef void (*pl_event_fn)(const pl_event *event, void *user);

#define PL_ENGINE_OPTIONS_VERSION 2

typedef struct pl_engine_options {
    unsigned version;
    pl_durability durability;
    size_t map_size;
    size_t map_size_max;
    unsigned max_readers;
    size_t max_payload;
    pl_event_fn on_event;
    void *event_user;
    bool read_only;
} pl_engine_options;

#define PL_ENGINE_OPTIONS_INIT                                                 \
    {                                                                          \
        PL_ENGINE_OPTIONS_VERSION, PL_DURABILITY_SYNC, 0, 0, 0, 0, NULL, NULL, \
            false                                                              \
    }

int pl_engine_open(pl_engine **out, const char *path,
                   const pl_registry *registry, const pl_engine_options *opts);
void pl_engine_close(pl_engine *engine);

#define PL_RUN_OPTIONS_VERSION 1

typedef struct pl_run_options {
    unsigned version;
    const char *run_id;
    bool check;
} pl_run_options;

#define PL_RUN_OPTIONS_INIT                                                    \
    {                                                                          \
        PL_RUN_OPTIONS_VERSION, NULL, false                                    \
    }

typedef struct pl_outcome {
    pl_run_status status;
    char *run_id;
    pl_steps *steps;
    char *resume_token;
    cJSON *prompt;
    char *suspended_path;
    int error;
    char *reason;
    uint64_t calls_served;
    uint64_t calls_executed;
    uint64_t steps_replayed;
    uint64_t steps_appended;
} pl_outcome;

void pl_outcome_free(pl_outcome *outcome);
int pl_run_start(pl_outcome **out, pl_engine *engine, const pl_action *root,
                 const pl_run_options *opts);
int pl_run_continue(pl_outcome **out, pl_engine *engine, const char *run_id,
                    const pl_run_options *opts);

#endif /* POLICYLEDGER_PREV_H */
