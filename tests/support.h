/*
 * support.h -- what the tests share: temporary stores, engines, and a few
 * policies with counters that prove what ran.
 *
 * Criterion runs every test in its own process, so the counters start at
 * zero in each test.
 */
#ifndef PL_TEST_SUPPORT_H
#define PL_TEST_SUPPORT_H

#include <criterion/criterion.h>
#include <policyledger.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A new empty directory under $TMPDIR (or /tmp); removed by t_cleanup(). */
const char *t_tmpdir(void);
/* A store path inside a fresh temporary directory ("<dir>/store.db"). */
const char *t_store_path(void);
/* Remove every temporary directory this process made. */
void t_cleanup(void);
/* Remove a directory tree. */
void t_rmtree(const char *path);

/* A registry with the test policies below. */
pl_registry *t_registry(void);
/* Open an engine; fails the test on error. */
pl_engine *t_engine(const char *path, const pl_registry *reg,
                    pl_durability durability);

/*
 * Test policies:
 *   "echo"    returns its payload as the result; counts t_calls.echo.
 *   "add"     {"a": x, "b": y} -> {"sum": x+y}; counts t_calls.add.
 *   "fail"    returns PL_EPOLICY (an unrecoverable failure).
 *   "oops"    returns an error-as-data result with code "ToolBug".
 *   "chain"   calls "add" payload.n times (default 3), summing; returns
 *             {"total": ...}.
 */
typedef struct t_counters { /* atomic: policies may run on many threads */
    atomic_int echo, add, chain;
} t_counters;
extern t_counters t_calls;

/* A JSON object from text; fails the test on bad JSON. */
cJSON *t_json(const char *text);
/* Compact text of a JSON value (caller frees). */
char *t_text(const cJSON *v);
/* Start a run of @p policy with @p payload_json, expecting PL_OK. */
pl_outcome *t_start(pl_engine *e, const char *policy, const char *payload_json,
                    const char *run_id);
/* The outcome's result payload (its last step), borrowed. */
const cJSON *t_result(const pl_outcome *o);

#endif
