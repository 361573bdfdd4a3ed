/*
 * test_adapter_limits.c -- the tool adapter's timeout, budget and cap
 * decorators (core/decorator_*.c), their composition, the cooperative
 * deadline (pl_ctx_deadline()) and the JSON-lines trace writer
 * (core/ext/trace.c), with the policies and sleep hook of test_adapter.c
 * (support_adapter.c): no test depends on time.
 */
#include "support.h"
#include "support_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */

/* timeout and the deadline                                                 */
/* ------------------------------------------------------------------------ */

Test(timeout, in_time_passes_the_result_and_carries_the_deadline,
     .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_decorator d;
    cr_assert_eq(pl_decorator_timeout(&d, 3600 * 1000), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "t", "nest", "{}");
    expect_ok(o);
    cr_expect_gt(g_nest_deadline, 0);
    cr_expect_eq(g_seen_deadline, g_nest_deadline,
                 "a callee starts with its caller's deadline");
    pl_steps *l = ledger(e, "t", "0.0");
    cr_expect_eq(count_type(l, PL_STEP_ERROR), 0);
    cr_expect_eq(count_effects(l, "now"), 2, "start and end are recorded");
    pl_steps_free(l);
    pl_outcome_free(o);
    /* without a timeout there is no deadline */
    set_decos(0, NULL);
    o = run_tool(e, "n", "nest", "{}");
    expect_ok(o);
    cr_expect_eq(g_nest_deadline, 0);
    cr_expect_eq(g_seen_deadline, 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(timeout, a_late_result_becomes_a_recorded_timeout, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_decorator d;
    cr_assert_eq(pl_decorator_timeout(&d, 30), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* flaky waits until 20 ms past the deadline it was given */
    pl_outcome *o = run_tool(e, "late", "flaky", "{\"past_deadline\": true}");
    expect_code(o, PL_ERR_TIMEOUT);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"),
                     "past its deadline"));
    pl_steps *l = ledger(e, "late", "0.0");
    /* the callee's own result stays in its ledger, the error after it */
    size_t n = pl_steps_count(l);
    cr_assert_geq(n, 2);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, n - 1)), PL_STEP_ERROR);
    cr_expect_str_eq(pl_step_actor(pl_steps_at(l, n - 1)), "timeout");
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 1);
    pl_steps_free(l);
    expect_replay_still(e, "late", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(timeout, per_attempt_inside_retry, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_timeout(&d[1], 30), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* every attempt is late: Timeout is retryable, so all three run */
    pl_outcome *o = run_tool(e, "pa", "flaky", "{\"past_deadline\": true}");
    expect_code(o, PL_ERR_TIMEOUT);
    cr_expect_eq(file_size(g_fx), 3);
    cr_expect_eq(g_sleeps, 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(timeout, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    cr_expect_eq(pl_decorator_timeout(&d, 0), PL_EINVAL);
    expect_msg("not a timeout");
    cr_expect_eq(pl_decorator_timeout(&d, -5), PL_EINVAL);
    expect_msg("-5 ms");
    cr_expect_eq(pl_decorator_timeout(NULL, 5), PL_EINVAL);
    /* a hand-made one with arg 0: refused at first use */
    cr_assert_eq(pl_decorator_timeout(&d, 5), PL_OK);
    d.arg = 0;
    set_decos(1, &d);
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "b", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    pl_outcome_free(o);
    /* pl_ctx_set_deadline refuses a negative deadline; 0 removes it */
    set_decos(0, NULL);
    cr_assert_eq(pl_decorator_timeout(&d, 1000), PL_OK);
    set_decos(1, &d);
    o = run_tool(e, "s", "setdl", "{}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(g_setdl_status, PL_EINVAL);
    cr_expect_eq(num_member(pl_outcome_result(o), "deadline", -1), 0);
    pl_outcome_free(o);
    /* the header's bound, 2^62, is a timeout: made, and run */
    const int64_t most = (int64_t)1 << 62;
    cr_expect_eq(pl_decorator_timeout(&d, most + 1), PL_EINVAL);
    expect_msg("2^62");
    cr_assert_eq(pl_decorator_timeout(&d, most), PL_OK, "%s", pl_errmsg());
    set_decos(1, &d);
    o = run_tool(e, "most", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_expect_eq(pl_ctx_deadline(NULL), 0);
}

/* waiter: waits for the event "go" with no timeout of its own. */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    return st ? st : pl_steps_add_resultf(out, "{s:b}", "ok", 1);
}

/* A run's own wait waits what it is given, not up to the call's deadline
 * (context.h): the run parks past it, and the callee that returns late
 * gets the recorded Timeout. */
Test(timeout, a_wait_is_not_cut_at_the_deadline, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_decorator d;
    cr_assert_eq(pl_decorator_timeout(&d, 30), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "waiter", waiter, NULL), PL_OK);
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "w", "waiter", "{}");
    cr_expect_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    struct timespec ts = {0, 100 * 1000 * 1000}; /* past the deadline */
    nanosleep(&ts, NULL);
    cJSON *go = cJSON_CreateObject();
    o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, "w", "go", go), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(go);
    cr_assert_not_null(o);
    expect_code(o, PL_ERR_TIMEOUT);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* budget                                                                   */
/* ------------------------------------------------------------------------ */

Test(budget, steps_bound_the_retries, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(50);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_steps = 20;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[1], &b), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "s", "flaky", "{\"fail\": 1000}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"), "steps"));
    /* per attempt: budget's clock, the hit, the result, then random, now
     * and the backoff: 6 steps; the 4th attempt's check sees 18 + 1 */
    long hits = file_size(g_fx);
    cr_expect(hits >= 1 && hits < 50,
              "retries count against the budget: "
              "%ld attempts",
              hits);
    pl_steps *l = ledger(e, "s", "0.0");
    /* the budget stops the chain once the ledger holds max_steps steps */
    cr_expect_leq(pl_steps_count(l), b.max_steps + 6);
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), hits);
    pl_steps_free(l);
    expect_replay_still(e, "s", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, tokens_recorded_by_steps_count, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(50);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_tokens = 100;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[1], &b), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* 40 tokens an attempt: after three, 120 >= 100 */
    pl_outcome *o = run_tool(e, "t", "flaky",
                             "{\"fail\": 1000, \"tokens\": 40}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"), "120 tokens"),
              "%s", str_member(pl_outcome_result(o), "message"));
    cr_expect_eq(file_size(g_fx), 3);
    expect_replay_still(e, "t", o);
    pl_outcome_free(o);
    /* tokens that are not a positive number count nothing */
    o = run_tool(e, "t2", "flaky", "{\"fail\": 3, \"tokens\": -40}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "t3", "flaky", "{\"fail\": 3, \"tokens\": \"many\"}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "t4", "flaky", "{\"fail\": 3, \"tokens\": 1e300}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, wall_clock, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(50);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_wall_ms = 5;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[1], &b), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* each attempt takes 10 ms of real time: the second is refused */
    pl_outcome *o = run_tool(e, "w", "flaky",
                             "{\"fail\": 1000, \"sleep_ms\": 10}");
    expect_code(o, PL_ERR_BUDGET_EXCEEDED);
    cr_expect(strstr(str_member(pl_outcome_result(o), "message"), " ms used"));
    cr_expect_eq(file_size(g_fx), 1);
    expect_replay_still(e, "w", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, within_it_nothing_changes, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_budget b = PL_BUDGET_INIT;
    b.max_steps = 100;
    b.max_wall_ms = 3600 * 1000;
    b.max_tokens = 1000;
    pl_decorator d;
    cr_assert_eq(pl_decorator_budget(&d, &b), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "ok", "flaky", "{}");
    expect_ok(o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(budget, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    pl_budget b = PL_BUDGET_INIT;
    cr_expect_eq(pl_decorator_budget(&d, &b), PL_EINVAL);
    expect_msg("no limit is set");
    cr_expect_eq(pl_decorator_budget(&d, NULL), PL_EINVAL);
    cr_expect_eq(pl_decorator_budget(NULL, &b), PL_EINVAL);
    b.max_wall_ms = -1;
    cr_expect_eq(pl_decorator_budget(&d, &b), PL_EINVAL);
    expect_msg("negative");
    b = (pl_budget)PL_BUDGET_INIT;
    b.max_steps = 3;
    b.version = 7;
    cr_expect_eq(pl_decorator_budget(&d, &b), PL_EINVAL);
    expect_msg("pl_budget version 7 is newer");
    /* emptied after creation: refused at first use */
    static pl_budget lim = PL_BUDGET_INIT;
    lim.max_steps = 5;
    cr_assert_eq(pl_decorator_budget(&d, &lim), PL_OK);
    lim.max_steps = 0;
    set_decos(1, &d);
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "b", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    cr_expect(o->reason && strstr(o->reason, "no limit is set"));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* cap                                                                      */
/* ------------------------------------------------------------------------ */

/* Run flaky with a big result under cap(@p cap) and return the outcome. */
static pl_outcome *capped(pl_engine *e, const char *id, size_t cap,
                          const char *args)
{
    pl_decorator d;
    cr_assert_eq(pl_decorator_cap(&d, cap), PL_OK);
    set_decos(1, &d);
    return run_tool(e, id, "flaky", args);
}

static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80             ? 0
                : (*p & 0xe0) == 0xc0 ? 1
                : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 ? 3
                                      : -1;
        if (n < 0)
            return false;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return false;
    }
    return true;
}

Test(cap, over_the_cap_is_truncated_with_a_note, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = capped(e, "big", 200, "{\"big\": 1000}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    const cJSON *r = pl_outcome_result(o);
    char *text = t_text(r);
    cr_expect_leq(strlen(text), 200, "the replacement fits: %s", text);
    free(text);
    cr_expect(cJSON_IsTrue(member(r, "truncated")));
    cr_expect_eq(num_member(r, "original_bytes", 0), 1000 + 11);
    cr_expect_eq(num_member(r, "max_bytes", 0), 200);
    cr_expect(strstr(str_member(r, "note"), "truncated"));
    const char *preview = str_member(r, "preview");
    cr_assert_not_null(preview);
    cr_expect_gt(strlen(preview), 20);
    cr_expect_eq(strncmp(preview, "{\"data\":\"xxxx", 13), 0, "%s", preview);
    /* the full result stays in the callee's ledger */
    pl_steps *l = ledger(e, "big", "0.0");
    const pl_step *last = pl_steps_at(l, pl_steps_count(l) - 1);
    cr_expect_str_eq(pl_step_actor(last), "cap");
    const pl_step *full = pl_steps_at(l, pl_steps_count(l) - 2);
    cr_expect_eq(strlen(str_member(pl_step_payload(full), "data")), 1000);
    pl_steps_free(l);
    expect_replay_still(e, "big", o);
    pl_outcome_free(o);

    /* within the cap: untouched */
    o = capped(e, "small", 2000, "{\"big\": 1000}");
    cr_expect_eq(strlen(str_member(pl_outcome_result(o), "data")), 1000);
    cr_expect_null(member(pl_outcome_result(o), "truncated"));
    pl_outcome_free(o);
    /* exactly at the cap: untouched */
    o = capped(e, "edge", 1011, "{\"big\": 1000}");
    cr_expect_null(member(pl_outcome_result(o), "truncated"));
    pl_outcome_free(o);
    o = capped(e, "over", 1010, "{\"big\": 1000}");
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "truncated")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(cap, utf8_and_escapes_are_cut_cleanly, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    /* two-byte characters, and quotes that escaping doubles */
    const char *const units[] = {"\xc3\xa9", "\\\"", "\xe2\x82\xac!"};
    for (size_t u = 0; u < 3; u++) {
        for (size_t cap = 180; cap < 192; cap++) {
            char args[128], id[32];
            snprintf(args, sizeof args, "{\"big\": 300, \"unit\": \"%s\"}",
                     units[u]);
            snprintf(id, sizeof id, "u%zu-%zu", u, cap);
            pl_outcome *o = capped(e, id, cap, args);
            cr_assert_eq(o->status, PL_RUN_COMPLETED);
            const cJSON *r = pl_outcome_result(o);
            char *text = t_text(r);
            cr_expect_leq(strlen(text), cap, "%s", text);
            free(text);
            const char *preview = str_member(r, "preview");
            cr_assert_not_null(preview);
            cr_expect(valid_utf8(preview), "cap %zu: a cut character", cap);
            pl_outcome_free(o);
        }
    }
    /* a cap smaller than the note: an empty preview, and a note */
    pl_outcome *o = capped(e, "tiny", 10, "{\"big\": 100}");
    cr_expect_str_eq(str_member(pl_outcome_result(o), "preview"), "");
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "truncated")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* An error result over the cap stays an error of its code: a caller, or a
 * retry outside cap, that asks whether the call failed is told it did. */
Test(cap, an_error_result_over_the_cap_stays_an_error, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    char big[600], args[800];
    memset(big, 'x', 500);
    big[500] = '\0';
    snprintf(args, sizeof args, "{\"fail\": 1, \"tokens\": \"%s\"}", big);
    pl_outcome *o = capped(e, "err", 300, args);
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(member(r, "error")));
    cr_expect(cJSON_IsTrue(member(r, "truncated")));
    cr_expect(strstr(str_member(r, "note"), "truncated"));
    char *text = t_text(r);
    cr_expect_leq(strlen(text), 300, "the replacement fits: %s", text);
    free(text);
    pl_steps *l = ledger(e, "err", "0.0");
    const pl_step *last = pl_steps_at(l, pl_steps_count(l) - 1);
    cr_expect(pl_step_is_error(last));
    cr_expect_str_eq(pl_step_actor(last), "cap");
    pl_steps_free(l);
    expect_replay_still(e, "err", o);
    pl_outcome_free(o);
    /* [retry, cap]: the capped error is retried, the second attempt's
     * result comes back */
    static pl_retry_options ro;
    ro = retry_opts(2);
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_retry(&d[0], &ro), PL_OK);
    cr_assert_eq(pl_decorator_cap(&d[1], 300), PL_OK);
    set_decos(2, d);
    long hits = file_size(g_fx);
    o = run_tool(e, "again", "flaky", args);
    expect_ok(o);
    cr_expect_eq(file_size(g_fx) - hits, 2, "two attempts");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(cap, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    cr_expect_eq(pl_decorator_cap(&d, 0), PL_EINVAL);
    expect_msg("cap of 0");
    cr_expect_eq(pl_decorator_cap(NULL, 10), PL_EINVAL);
    cr_assert_eq(pl_decorator_cap(&d, 10), PL_OK);
    d.arg = 0;
    set_decos(1, &d);
    fresh_fx(t_tmpdir());
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "b", "flaky", "{}");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    cr_expect_eq(file_size(g_fx), 0, "nothing ran");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* all of them together                                                     */
/* ------------------------------------------------------------------------ */

Test(adapter, the_decorators_compose, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(4);
    static pl_budget b = PL_BUDGET_INIT;
    b.max_steps = 200;
    pl_decorator d[4];
    cr_assert_eq(pl_decorator_timeout(&d[0], 3600 * 1000), PL_OK);
    cr_assert_eq(pl_decorator_retry(&d[1], &ro), PL_OK);
    cr_assert_eq(pl_decorator_budget(&d[2], &b), PL_OK);
    cr_assert_eq(pl_decorator_cap(&d[3], 100), PL_OK);
    set_decos(4, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "all", "flaky", "{\"fail\": 2, \"big\": 500}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "truncated")));
    cr_expect_eq(file_size(g_fx), 3);
    cr_expect_eq(g_sleeps, 2);
    expect_replay_still(e, "all", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(adapter, errorf_sets_the_message)
{
    cr_expect_eq(pl_errorf(PL_EIO, "disk %d is gone", 3), PL_EIO);
    cr_expect_str_eq(pl_errmsg(), "disk 3 is gone");
    cr_expect_eq(pl_errorf(PL_ELIMIT, NULL), PL_ELIMIT);
    cr_expect_str_eq(pl_errmsg(), "PL_ELIMIT");
}

/* ------------------------------------------------------------------------ */

/* traces                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct forward {
    pl_trace *trace;
    long events;
    long kinds[16];
} forward;

/* A program's own callback that also writes the trace. */
static void count_and_trace(const pl_event *ev, void *user)
{
    forward *f = user;
    f->events++;
    if ((unsigned)ev->kind < 16)
        f->kinds[ev->kind]++;
    pl_trace_event(ev, f->trace);
}

static const char *const known_events[] = {
    "run_started",  "call_started",  "call_served",   "call_completed",
    "call_failed",  "step_appended", "step_replayed", "commit",
    "code_changed", "run_suspended", "run_completed", "run_failed"};

Test(trace, one_parsable_line_per_event, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    char path[4400];
    snprintf(path, sizeof path, "%s/trace.jsonl", t_tmpdir());
    forward f = {0};
    cr_assert_eq(pl_trace_open(&f.trace, path), PL_OK, "%s", pl_errmsg());
    static pl_retry_options ro;
    ro = retry_opts(3);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, count_and_trace, &f);
    pl_outcome *o = run_tool(e, "tr", "flaky", "{\"fail\": 1}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "tf", "flaky", "{\"fail\": 5, \"code\": \"ToolBug\"}");
    pl_outcome_free(o);
    pl_engine_close(e);
    cr_assert_eq(pl_trace_close(f.trace), PL_OK, "%s", pl_errmsg());
    pl_registry_free(reg);

    FILE *in = fopen(path, "r");
    cr_assert_not_null(in);
    char buf[8192];
    long lines = 0, completed_calls = 0, failed_calls = 0, appended = 0;
    const char *first_event = NULL;
    char last_event[64] = "";
    while (fgets(buf, sizeof buf, in)) {
        size_t len = strlen(buf);
        cr_assert(len > 0 && buf[len - 1] == '\n', "a line is whole");
        cJSON *l = cJSON_Parse(buf);
        cr_assert_not_null(l, "line %ld is not JSON: %s", lines + 1, buf);
        lines++;
        cr_expect(cJSON_IsNumber(member(l, "ts_us")) &&
                      member(l, "ts_us")->valuedouble > 1.5e15,
                  "ts_us: %s", buf);
        const char *id = str_member(l, "trace_id");
        cr_expect(id && (strcmp(id, "tr") == 0 || strcmp(id, "tf") == 0),
                  "trace_id: %s", buf);
        const char *ev = str_member(l, "event");
        cr_assert_not_null(ev);
        bool known = false;
        for (size_t i = 0; i < 12; i++)
            known = known || strcmp(ev, known_events[i]) == 0;
        cr_expect(known, "unknown event %s", ev);
        if (!first_event)
            first_event = strcmp(ev, "run_started") == 0 ? "run_started"
                                                         : "other";
        snprintf(last_event, sizeof last_event, "%s", ev);
        if (strcmp(ev, "step_appended") == 0) {
            appended++;
            cr_expect_not_null(str_member(l, "step_type"), "%s", buf);
            cr_expect_not_null(str_member(l, "path"), "%s", buf);
            cr_expect_not_null(str_member(l, "policy"), "%s", buf);
            cr_expect(cJSON_IsNumber(member(l, "seq")), "%s", buf);
            cr_expect_null(member(l, "outcome"));
            cr_expect_null(member(l, "elapsed_ns"));
        }
        if (strcmp(ev, "call_completed") == 0) {
            completed_calls++;
            cr_expect_str_eq(str_member(l, "path"), "0");
            cr_expect_str_eq(str_member(l, "policy"), "flaky");
            cr_expect_str_eq(str_member(l, "outcome"), "completed");
            cr_expect_eq(num_member(l, "seq", -1), 0);
            cr_expect(cJSON_IsNumber(member(l, "elapsed_ns")), "%s", buf);
            cr_expect_null(member(l, "status"));
        }
        if (strcmp(ev, "call_failed") == 0) {
            failed_calls++;
            cr_expect_str_eq(str_member(l, "outcome"), "failed");
            cr_expect_str_eq(str_member(l, "detail"), "ToolBug");
            cr_expect_str_eq(str_member(l, "trace_id"), "tf");
        }
        if (strcmp(ev, "run_completed") == 0) {
            cr_expect_str_eq(str_member(l, "policy"), "caller");
            cr_expect_str_eq(str_member(l, "outcome"), "completed");
        }
        if (strcmp(ev, "commit") == 0)
            cr_expect_gt(num_member(l, "seq", 0), 0, "%s", buf);
        cJSON_Delete(l);
    }
    fclose(in);
    cr_expect_eq(lines, f.events, "one line per event");
    cr_expect_eq(appended, f.kinds[PL_EVENT_STEP_APPENDED]);
    cr_expect_eq(completed_calls, 1);
    cr_expect_eq(failed_calls, 1);
    cr_expect_str_eq(first_event, "run_started");
    cr_expect_str_eq(last_event, "run_completed");
}

Test(trace, open_and_close_errors, .fini = t_cleanup)
{
    pl_trace *t = (pl_trace *)&t;
    cr_expect_eq(pl_trace_open(&t, NULL), PL_EINVAL);
    cr_expect_null(t);
    cr_expect_eq(pl_trace_open(NULL, "x"), PL_EINVAL);
    char path[4400];
    snprintf(path, sizeof path, "%s/no/such/dir/trace.jsonl", t_tmpdir());
    cr_expect_eq(pl_trace_open(&t, path), PL_EIO);
    expect_msg("cannot open");
    cr_expect_eq(pl_trace_close(NULL), PL_OK);
    pl_trace_event(NULL, NULL); /* nothing to write to: nothing happens */
    /* a line that cannot be written is reported at close */
    if (access("/dev/full", W_OK) == 0) {
        cr_assert_eq(pl_trace_open(&t, "/dev/full"), PL_OK);
        pl_event ev = {.kind = PL_EVENT_RUN_STARTED,
                       .run_id = "r",
                       .path = "0",
                       .policy = "caller"};
        pl_trace_event(&ev, t);
        cr_expect_eq(pl_trace_close(t), PL_EIO);
        expect_msg("could not be written");
    }
}

/* A FIFO as the trace: one no process reads is refused at once, never
 * waited on for a reader; one a reader holds open gets the lines. */
Test(trace, a_fifo_no_one_reads_is_refused_not_waited_on, .timeout = 60,
     .fini = t_cleanup)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/trace.fifo", t_tmpdir());
    cr_assert_eq(mkfifo(path, 0600), 0, "%s", strerror(errno));
    pl_trace *t = (pl_trace *)&t;
    cr_assert_eq(pl_trace_open(&t, path), PL_EIO);
    cr_expect_null(t);
    expect_msg("no process reads");
    cr_expect(strstr(pl_errmsg(), path) != NULL, "names it: %s", pl_errmsg());

    int rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(rd, 0, "%s", strerror(errno));
    cr_assert_eq(pl_trace_open(&t, path), PL_OK, "%s", pl_errmsg());
    pl_event ev = {.kind = PL_EVENT_RUN_STARTED,
                   .run_id = "fifo",
                   .path = "0",
                   .policy = "caller"};
    pl_trace_event(&ev, t);
    cr_assert_eq(pl_trace_close(t), PL_OK, "%s", pl_errmsg());
    char buf[512];
    ssize_t n = read(rd, buf, sizeof buf - 1);
    cr_assert_gt(n, 0, "%s", strerror(errno));
    buf[n] = '\0';
    close(rd);
    cJSON *l = cJSON_Parse(buf);
    cr_assert_not_null(l, "not one JSON line: %s", buf);
    cr_expect_str_eq(str_member(l, "trace_id"), "fifo");
    cr_expect_str_eq(str_member(l, "event"), "run_started");
    cJSON_Delete(l);
}

/* A FIFO whose reader went away: the lines after it are counted as not
 * written, and pl_trace_close() says so; the process is not ended by
 * SIGPIPE (a tool with --trace on a `head -n 1` was, mid-run). */
Test(trace, a_fifo_whose_reader_left_costs_lines_not_the_process, .timeout = 60,
     .fini = t_cleanup)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/gone.fifo", t_tmpdir());
    cr_assert_eq(mkfifo(path, 0600), 0, "%s", strerror(errno));
    int rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(rd, 0, "%s", strerror(errno));
    pl_trace *t = NULL;
    cr_assert_eq(pl_trace_open(&t, path), PL_OK, "%s", pl_errmsg());
    pl_event ev = {.kind = PL_EVENT_RUN_STARTED,
                   .run_id = "gone",
                   .path = "0",
                   .policy = "caller"};
    pl_trace_event(&ev, t);
    close(rd); /* the reader leaves */
    ev.kind = PL_EVENT_RUN_COMPLETED;
    pl_trace_event(&ev, t);
    pl_trace_event(&ev, t);
    sigset_t pending;
    cr_assert_eq(sigpending(&pending), 0);
    cr_expect_not(sigismember(&pending, SIGPIPE), "no SIGPIPE left pending");
    cr_assert_eq(pl_trace_close(t), PL_EIO);
    expect_msg("2 trace lines could not be written");
    expect_msg(strerror(EPIPE));
}

/* A writer of 250 lines: call ends of run "w<k>", failed and with tokens. */
static void *trace_writer(void *trace)
{
    static const char *const ids[] = {"w0", "w1", "w2", "w3"};
    static atomic_int next;
    const char *id = ids[atomic_fetch_add(&next, 1) % 4];
    for (unsigned i = 0; i < 250; i++) {
        pl_event ev = {.kind = i % 2 ? PL_EVENT_CALL_FAILED
                                     : PL_EVENT_CALL_COMPLETED,
                       .run_id = id,
                       .path = "0",
                       .seq = i,
                       .policy = "model",
                       .status = i % 2 ? PL_EPOLICY : 0,
                       .elapsed_ns = 1000 + i,
                       .tokens_in = i % 2 ? 0 : 3,
                       .tokens_out = i % 2 ? 0 : 2};
        pl_trace_event(&ev, trace);
    }
    return NULL;
}

/* A trace opened again appends to its file; lines of threads writing at
 * once never mix, and each has its status by name and its tokens; an
 * event of no run has the trace id "". */
Test(trace, appends_and_concurrent_lines_never_mix, .fini = t_cleanup)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/trace.jsonl", t_tmpdir());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_gt(fputs("{\"before\": true}\n", f), 0);
    cr_assert_eq(fclose(f), 0);
    pl_trace *t = NULL;
    cr_assert_eq(pl_trace_open(&t, path), PL_OK, "%s", pl_errmsg());
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, trace_writer, t), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_join(th[i], NULL), 0);
    /* a worker's event of no run */
    pl_event lost = {
        .kind = PL_EVENT_STORE_LOST, .status = PL_ESTORE, .detail = "down"};
    pl_trace_event(&lost, t);
    cr_assert_eq(pl_trace_close(t), PL_OK, "%s", pl_errmsg());

    FILE *in = fopen(path, "r");
    cr_assert_not_null(in);
    char buf[1024];
    cr_assert_not_null(fgets(buf, sizeof buf, in));
    cr_expect_str_eq(buf, "{\"before\": true}\n", "the file is appended to");
    long lines = 0, per[4] = {0};
    while (fgets(buf, sizeof buf, in)) {
        cJSON *l = cJSON_Parse(buf);
        cr_assert_not_null(l, "line %ld is not one JSON line: %s", lines, buf);
        lines++;
        const char *id = str_member(l, "trace_id");
        if (lines == 1001) {
            cr_expect_str_eq(id, "", "no run: %s", buf);
            cr_expect_str_eq(str_member(l, "event"), "store_lost");
            cr_expect_str_eq(str_member(l, "status"), "PL_ESTORE");
            cJSON_Delete(l);
            continue;
        }
        cr_assert(id && id[0] == 'w' && id[1] >= '0' && id[1] <= '3', "%s",
                  buf);
        per[id[1] - '0']++;
        double seq = num_member(l, "seq", -1);
        bool failed = (long)seq % 2 == 1;
        cr_expect_str_eq(str_member(l, "event"),
                         failed ? "call_failed" : "call_completed");
        cr_expect_str_eq(str_member(l, "outcome"),
                         failed ? "failed" : "completed");
        cr_expect_eq(num_member(l, "elapsed_ns", -1), 1000 + seq);
        if (failed) {
            cr_expect_str_eq(str_member(l, "status"), "PL_EPOLICY");
            cr_expect_null(member(l, "tokens"), "%s", buf);
        } else {
            cr_expect_null(member(l, "status"), "%s", buf);
            cr_expect_eq(num_member(member(l, "tokens"), "input", -1), 3);
            cr_expect_eq(num_member(member(l, "tokens"), "output", -1), 2);
        }
        cJSON_Delete(l);
    }
    fclose(in);
    cr_expect_eq(lines, 1001);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(per[i], 250, "writer %d", i);
}

/* An OpenTelemetry endpoint no request can reach is refused when the
 * exporter opens, not a warning of spans lost at the end (without
 * libcurl, every endpoint is refused so). */
Test(otel_open, an_endpoint_no_request_can_reach_is_refused)
{
    const char *const bad[] = {"https://",         "http://:4318",
                               "http://h:99999",   "http://127.0.0.1:0",
                               "http://h:43x18",   "http://local host:1",
                               "ftp://127.0.0.1:1"};
    pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pl_otel *x = (pl_otel *)1;
        oo.endpoint = bad[i];
        cr_expect_eq(pl_otel_open(&x, &oo), PL_WITH_CURL ? PL_EINVAL : PL_EIO,
                     "%s", bad[i]);
        cr_expect_null(x, "%s", bad[i]);
        if (PL_WITH_CURL)
            cr_expect(strstr(pl_errmsg(), "endpoint"), "%s", pl_errmsg());
    }
}
