/*
 * support_replay.h -- what the replay tests (test_replay*.c) share: their
 * policies and the helpers that run and read them.
 */
#ifndef PL_TESTS_SUPPORT_REPLAY_H
#define PL_TESTS_SUPPORT_REPLAY_H

#include "support.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* helpers: every recorded helper; what each execution saw is kept. */
typedef struct seen_helpers {
    int64_t now;
    uint64_t rnd;
    char uuid[PL_UUID_LEN + 1];
    char fetched[64];
} seen_helpers;

/* reader: reads its ledger before and after two calls. */
#define SNAP_MAX 8

typedef struct snap {
    size_t n;
    char ids[SNAP_MAX][32];
    pl_step_type types[SNAP_MAX];
    char actors[SNAP_MAX][32];
} snap;

pl_engine *open_engine(const char *path, const pl_registry *reg);

pl_outcome *cont(pl_engine *e, const char *id);

/*
 * Continue a completed run whose code now diverges: a completed run is final,
 * so the replay writes nothing and returns PL_ENONDET.  Returns a copy of the
 * message (caller frees) after checking the run record is untouched.
 */
char *diverge(pl_engine *e, const char *id);

pl_run_info *get_info(pl_engine *e, const char *id);

pl_steps *ledger(pl_engine *e, const char *id, const char *path);

/* Compact text of the outcome's result; caller frees. */
char *result_text(const pl_outcome *o);

void expect_str(const char *got, const char *want);

void expect_has(const char *hay, const char *needle);

int call_json(pl_ctx *ctx, const char *policy, const char *json, pl_step **res);

extern int g_value;

extern const char *g_tool;

extern bool g_reorder; /* build the payload's members in reverse order */

extern bool g_gate_closed;

extern int g_gate_runs;

extern seen_helpers g_seen[4];

extern int g_helper_runs;

extern int g_effect_calls;

extern const char *g_effect_name;

extern snap g_snaps[8];

extern int g_nsnaps;

extern const char *g_seed_text;

extern char g_root_keys[4][256];

extern char g_keys[4][256];

extern char g_key_paths[4][64];

extern int g_nkeys;

extern int g_talk;

extern bool g_talk_result;

/*
 * "deep": every place a policy's value goes inside an engine record, at the
 * deepest nesting a payload may have (PL_MAX_JSON_DEPTH containers): the
 * input of a call to "echo" (inside the call's record), a side effect's
 * value (inside its record), a suspend prompt and its answer (inside theirs).
 * Returns the answer.  Its seed step (see the test) sits inside the run's
 * record as well.
 */
cJSON *deepest(void);

pl_registry *registry(void);

void expect_reader_snaps(const snap *first, const snap *second);

#endif
