/*
 * test_api_promises.c -- what the public headers promise, call by call,
 * at the edges the other tests leave: each test calls a function as its
 * header says and checks exactly what that header promises.
 */
#define _DEFAULT_SOURCE /* usleep() */
#include "support.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

TestSuite(api_promises, .timeout = 120, .fini = t_cleanup);

/* A run of @p fn (registered as "probe", given @p user) on a new store: it
 * must reach an outcome, and fail with PL_EPOLICY and a reason holding
 * @p what and @p why. */
static void fails_with_epolicy(pl_policy_fn fn, void *user, const char *what,
                               const char *why)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "probe", fn, user), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    cr_assert_eq(t_try_start(&o, e, "probe", "{}", "r"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_assert_eq(o->error, PL_EPOLICY, "error %d (%s)", o->error,
                 pl_status_name(o->error));
    cr_assert(strstr(o->reason, what) && strstr(o->reason, why), "%s",
              o->reason);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- user code that returns what is no status --------------------------- */

/* pl_side_effect_fn: "PL_OK, or a status that fails the run"; 1 is none,
 * and failed the run by pl__run_fail()'s assertion (a crash). */
static int returns_one(cJSON **out, void *user)
{
    (void)user;
    *out = NULL;
    return 1; /* "non-zero: failed", as much C code says */
}

static int side_effect_one(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                           void *user)
{
    (void)a;
    (void)out;
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, "probe", returns_one, NULL);
    *(int *)user = st;
    cr_assert_null(v, "NULL on failure");
    return st;
}

Test(api_promises, a_side_effect_returning_no_status_fails_the_run)
{
    int seen = 0;
    fails_with_epolicy(side_effect_one, &seen, "side effect 'probe'",
                       "returned 1, which is no pl_status");
    cr_assert_eq(seen, PL_EPOLICY);
}

/* A decorator's 1 hit the same assertion. */
static int deco_one(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                    const pl_decorator *self, pl_next *next)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)self;
    (void)next;
    return 1;
}

static int calls_through_deco(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                              void *user)
{
    (void)a;
    (void)out;
    pl_action call = PL_ACTION_INIT;
    call.policy = "echo";
    call.payload = pl_json_empty();
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = deco_one;
    d.name = "one";
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, &d, 1);
    *(int *)user = st;
    cr_assert_null(res);
    return st;
}

Test(api_promises, a_decorator_returning_no_status_fails_the_run)
{
    int seen = 0;
    fails_with_epolicy(calls_through_deco, &seen, "a decorator around 'echo'",
                       "returned 1, which is no pl_status");
    cr_assert_eq(seen, PL_EPOLICY);
}

/* ---- pl_engine_prune(): a visitor's value that is no pl_status ---------- */

static int stop_with(const pl_run_info *info, void *user)
{
    (void)info;
    return *(int *)user;
}

/* pl_prune_fn: "any other value stops the prune before that run is
 * deleted, and is returned (PL_EINVAL if it is no pl_status)": -500 is
 * none, and was returned as it was. */
Test(api_promises, a_prune_visitor_value_that_is_no_status_is_einval)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome_free(t_start(e, "echo", "{}", "done"));
    int values[] = {-500, -29, 7, PL_EBUSY};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
        po.before = stop_with;
        po.user = &values[i];
        uint64_t deleted = 99;
        int st = pl_engine_prune(e, &po, &deleted);
        int want = values[i] == PL_EBUSY ? PL_EBUSY : PL_EINVAL;
        cr_assert_eq(st, want, "visitor %d: %d (%s)", values[i], st,
                     pl_errmsg());
        cr_assert_eq(deleted, 0);
        cr_assert_eq(status_of(e, "done"), PL_RUN_COMPLETED);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* pl_export_fn: a value that stops the export is returned, PL_EINVAL for
 * one that is no pl_status (the same check as the prune's). */
static int line_stop_with(cJSON *line, void *user)
{
    (void)line;
    return *(int *)user;
}

Test(api_promises, an_export_visitor_value_that_is_no_status_is_einval)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome_free(t_start(e, "echo", "{}", "done"));
    int values[] = {-500, -29, 7, PL_EBUSY};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        int st = pl_run_export_each(e, "done", line_stop_with, &values[i]);
        int want = values[i] == PL_EBUSY ? PL_EBUSY : PL_EINVAL;
        cr_assert_eq(st, want, "visitor %d: %d (%s)", values[i], st,
                     pl_errmsg());
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- pl_run_fork(): a step past the root ledger's end ------------------- */

/* "PL_ENOTFOUND (no such run, or its root ledger has no such step)": a
 * step id near UINT32_MAX asked for a table of that many entries (4 GiB)
 * before the step was looked for, so with the address space bounded the
 * fork said PL_ENOMEM.  The bound is the process's own (each test is a
 * process of its own); AddressSanitizer's shadow memory does not fit it. */
Test(api_promises, a_fork_at_a_step_far_past_the_end_is_enotfound)
{
    if (T_SANITIZED)
        cr_skip_test("AddressSanitizer reserves more than the bound");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 2}", "src"));
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert(f && fscanf(f, "%ld", &pages) == 1);
    fclose(f);
    struct rlimit was;
    cr_assert_eq(getrlimit(RLIMIT_AS, &was), 0);
    struct rlimit bound = was;
    bound.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) +
                     ((rlim_t)1 << 30);
    cr_assert_eq(setrlimit(RLIMIT_AS, &bound), 0);
    const char *far[] = {"0:4294967294", "0:4000000000", "0:9"};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
        char *id = (char *)"unset";
        int st = pl_run_fork(&id, e, "src", far[i], NULL);
        cr_assert_eq(st, PL_ENOTFOUND, "%s: %s (%s)", far[i],
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(id);
        cr_assert(strstr(pl_errmsg(), far[i]), "%s", pl_errmsg());
    }
    cr_assert_eq(setrlimit(RLIMIT_AS, &was), 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- pl_run_import(): a submitted run ------------------------------------ */

/* A run exported while queued (`submitted`, never taken) was imported
 * `submitted` with no place in the queue: pl_run_submit()'s "the first
 * worker to take the lease executes it" never came true, and nothing said
 * so.  Imported, it is queued, and a worker executes it. */
Test(api_promises, an_imported_submitted_run_is_taken_by_a_worker)
{
    pl_registry *reg = t_registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_action root = PL_ACTION_INIT;
    root.policy = "echo";
    cJSON *payload = t_json("{\"x\": 1}");
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "queued";
    cr_assert_eq(pl_run_submit(NULL, a, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(payload);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cr_assert_eq(pl_run_export(a, "queued", out), PL_OK, "%s", pl_errmsg());
    fclose(out);
    FILE *in = fmemopen(text, len, "r");
    char *id = NULL;
    cr_assert_eq(pl_run_import(&id, b, in, NULL), PL_OK, "%s", pl_errmsg());
    fclose(in);
    cr_assert_str_eq(id, "queued");
    free(id);
    free(text);
    cr_assert_eq(status_of(b, "queued"), PL_RUN_SUBMITTED);
    cr_assert_eq(pl_run_verify(b, "queued"), PL_OK, "%s", pl_errmsg());
    /* a worker takes it: bounded by a minute, never a timing assertion */
    t_worker w;
    t_worker_start(&w, b, 1);
    for (int i = 0; i < 6000 && status_of(b, "queued") != PL_RUN_COMPLETED; i++)
        usleep(10000);
    t_worker_stop(&w);
    cr_assert_eq(status_of(b, "queued"), PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(status_of(b, "queued")));
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, b, "queued", NULL), PL_OK, "%s",
                 pl_errmsg());
    char *got = t_text(pl_outcome_result(o));
    cr_assert_str_eq(got, "{\"x\":1}");
    free(got);
    pl_outcome_free(o);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
}

/* ---- pl_run_head(): which runs record a head ----------------------------- */

/* "PL_ESTATE (only a completed, continued or suspended run records its
 * head ...)": the refusal's message left the continued run out, telling
 * its reader that a continued run has no head to ask for. */
Test(api_promises, a_head_refused_names_every_status_that_has_one)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome_free(t_start(e, "fail", "{}", "failed"));
    uint8_t head[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, e, "failed"), PL_ESTATE);
    cr_assert(strstr(pl_errmsg(), "is failed") &&
                  strstr(pl_errmsg(), "completed, continued or suspended"),
              "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* pl_run_info.suspended_path and .prompt: "suspended: ...; else NULL".  A
 * suspended run cancelled (it ends at once, runs.h and time.h) still gave
 * both, as if it waited for an answer. */
Test(api_promises, a_cancelled_suspended_run_has_no_prompt)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    cr_assert_eq(t_try_start(&o, e, "human", "{\"q\": \"ship?\"}", "h"), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_cancel(e, "h", "no longer wanted"), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "h"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ri->status, PL_RUN_CANCELLED);
    cr_expect_str_eq(ri->reason, "no longer wanted");
    cr_expect_null(ri->suspended_path, "suspended_path '%s'",
                   ri->suspended_path);
    cr_expect_null(ri->prompt, "a cancelled run has a prompt");
    cr_expect_null(ri->resume_token);
    pl_run_info_free(ri);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* engine.h: max_readers above PL_MAX_READERS is PL_EINVAL, naming it, on
 * either store, and nothing is created; the bound itself opens.  UINT_MAX
 * made LMDB a lock file of 256 GiB (sparse), and a store that opened. */
Test(api_promises, max_readers_past_its_bound_is_einval)
{
    pl_registry *reg = t_registry();
    const char *path = t_store_path();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    pl_engine *e = NULL;
    static const unsigned bad[] = {PL_MAX_READERS + 1, UINT_MAX};
    for (size_t i = 0; i < 2; i++) {
        o.max_readers = bad[i];
        int st = pl_engine_open(&e, path, reg, &o);
        cr_assert_eq(st, PL_EINVAL, "max_readers %u: %s: %s", bad[i],
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(e);
        cr_expect(strstr(pl_errmsg(), "max_readers") &&
                      strstr(pl_errmsg(), "PL_MAX_READERS"),
                  "%s", pl_errmsg());
        if (!t_on_pg())
            cr_expect_neq(access(path, F_OK), 0, "a refused open created it");
    }
    o.max_readers = PL_MAX_READERS;
    o.durability = PL_DURABILITY_PROCESS;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(t_start(e, "echo", "{\"x\": 1}", "readers"));
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* engine.h: map_size, map_size_max and max_readers are LMDB's.  A
 * PostgreSQL store ignores them (a map of 8 KiB that may not grow, which
 * no LMDB store fits in, and one reader slot), and refuses, as LMDB does,
 * a value their rules refuse. */
Test(api_promises, lmdb_sizes_are_ignored_by_postgresql_bad_ones_refused)
{
    pl_registry *reg = t_registry();
    const char *path = t_store_path();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.map_size = 8192;
    o.map_size_max = 8192;
    o.max_readers = 1;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &o);
    if (!t_on_pg()) {
        cr_expect_neq(st, PL_OK, "an 8 KiB map that may not grow");
    } else {
        cr_assert_eq(st, PL_OK, "%s: %s", pl_status_name(st), pl_errmsg());
        pl_outcome_free(t_start(e, "echo", "{\"x\": 1}", "ignored"));
        pl_engine_close(e);
        e = NULL;
    }
    o.map_size = 16384; /* above map_size_max */
    cr_expect_eq(pl_engine_open(&e, path, reg, &o), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "map_size_max"), "%s", pl_errmsg());
    cr_expect_null(e);
    pl_registry_free(reg);
}
