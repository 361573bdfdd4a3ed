/*
 * test_adapter.c -- the tool adapter's retry decorator (core/decorator_*.c),
 * also killed at every boundary and in every wait.  Its other decorators
 * (timeout, budget, cap), the cooperative deadline (pl_ctx_deadline()) and
 * the JSON-lines trace writer (core/ext/trace.c) are in
 * test_adapter_limits.c.
 *
 * A root policy "caller" calls the tool named in its payload through the
 * decorators the test put in g_decos, and returns the tool's result.  The
 * tool "flaky" fails its first payload.fail attempts (it counts its
 * attempts from its own ledger, so it is deterministic) with an error
 * result of payload.code, and each attempt does its outside-world work in
 * a recorded side effect "hit" that appends a byte to an effects file: the
 * file's size is how many attempts really executed, in any process.
 *
 * Waits go through a sleep hook that counts them and never sleeps (and can
 * SIGKILL the process in the middle of one): no test depends on time.
 */
#include "support.h"
#include "support_adapter.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */

/* Policies and hooks                                                       */
/* ------------------------------------------------------------------------ */

static long g_kill_at_boundary; /* SIGKILL at this boundary; 0 never */

static long g_boundaries; /* step appends and commits seen */

static void kill_at_boundary(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    g_boundaries++;
    if (g_kill_at_boundary && g_boundaries == g_kill_at_boundary)
        raise(SIGKILL);
}

/* ------------------------------------------------------------------------ */

/* retry                                                                    */
/* ------------------------------------------------------------------------ */

Test(retry, retries_until_success_and_replay_never_waits, .fini = t_cleanup)
{
    const char *store = t_store_path();
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(5);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(store, reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "r1", "flaky", "{\"fail\": 2}");
    expect_ok(o);
    cr_expect_eq(num_member(pl_outcome_result(o), "attempt", 0), 3);
    cr_expect_eq(file_size(g_fx), 3, "three attempts executed");
    cr_expect_eq(g_sleeps, 2, "one wait between two attempts");
    pl_steps *l = ledger(e, "r1", "0.0");
    cr_expect_eq(count_effects(l, "retry.backoff"), 2);
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 3,
                 "every attempt's result is in the ledger");
    /* each recorded wait lies within the bounds */
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        const char *name = str_member(p, "name");
        if (!name || strcmp(name, "retry.backoff") != 0)
            continue;
        double delay = num_member(member(p, "value"), "delay_ms", -1);
        cr_expect(delay >= 100 && delay <= 10000, "delay %g", delay);
    }
    pl_steps_free(l);
    expect_replay_still(e, "r1", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, exhaustion_returns_the_last_error, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "r", "flaky", "{\"fail\": 10}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    cr_expect_eq(file_size(g_fx), 3, "exactly max_attempts attempts");
    cr_expect_eq(g_sleeps, 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, only_retryable_codes_and_custom_ones, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(4);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "a", "flaky",
                             "{\"fail\": 2, \"code\": \"ToolBug\"}");
    expect_code(o, PL_ERR_TOOL_BUG);
    cr_expect_eq(file_size(g_fx), 1, "ToolBug is not retried by default");
    cr_expect_eq(g_sleeps, 0);
    pl_outcome_free(o);
    const char *const defaults[] = {"RateLimited", "Timeout"};
    for (size_t i = 0; i < 2; i++) {
        char args[128], id[16];
        snprintf(args, sizeof args, "{\"fail\": 1, \"code\": \"%s\"}",
                 defaults[i]);
        snprintf(id, sizeof id, "d%zu", i);
        o = run_tool(e, id, "flaky", args);
        expect_ok(o);
        pl_outcome_free(o);
    }
    /* the codes are configurable */
    static const char *const codes[] = {"ToolBug"};
    ro.codes = codes;
    ro.n_codes = 1;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    o = run_tool(e, "b", "flaky", "{\"fail\": 2, \"code\": \"ToolBug\"}");
    expect_ok(o);
    pl_outcome_free(o);
    o = run_tool(e, "c", "flaky", "{\"fail\": 2}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER); /* no longer in the list */
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, honours_retry_after_and_bounds_the_jitter, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    ro.base_ms = 10;
    ro.max_backoff_ms = 50;
    ro.max_retry_after_ms = 600000;
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "ra", "flaky",
                             "{\"fail\": 2, \"retry_after_ms\": 600000}");
    expect_ok(o);
    pl_steps *l = ledger(e, "ra", "0.0");
    int seen = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        const char *name = str_member(p, "name");
        if (!name || strcmp(name, "retry.backoff") != 0)
            continue;
        cr_expect_eq(num_member(member(p, "value"), "delay_ms", -1), 600000,
                     "retry_after_ms wins over the backoff");
        seen++;
    }
    cr_expect_eq(seen, 2);
    pl_steps_free(l);
    /* the hook was asked to wait what is left of 600 s: more than 0 */
    cr_expect_eq(g_sleeps, 2);
    cr_expect(g_sleep_ms[0] > 0 && g_sleep_ms[0] <= 600000);
    pl_outcome_free(o);

    /* a tool asking for more than max_retry_after_ms: no retry */
    int sleeps = g_sleeps;
    long hits = file_size(g_fx);
    o = run_tool(e, "long", "flaky",
                 "{\"fail\": 2, \"retry_after_ms\": 600001}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    cr_expect_eq(g_sleeps, sleeps);
    cr_expect_eq(file_size(g_fx), hits + 1);
    pl_outcome_free(o);

    /* a wrong retry_after_ms (negative, not a number) is ignored; an
     * enormous one ends the retries */
    const char *const wrong[] = {"-5", "\"soon\"", "null", "[1]"};
    for (size_t i = 0; i < 4; i++) {
        char args[128], id[16];
        snprintf(args, sizeof args, "{\"fail\": 1, \"retry_after_ms\": %s}",
                 wrong[i]);
        snprintf(id, sizeof id, "w%zu", i);
        o = run_tool(e, id, "flaky", args);
        expect_ok(o);
        pl_outcome_free(o);
    }
    o = run_tool(e, "huge", "flaky",
                 "{\"fail\": 1, \"retry_after_ms\": 1e300}");
    expect_code(o, PL_ERR_RETRYABLE_SERVER);
    pl_outcome_free(o);

    /* many attempts: every delay within [base, min(max, 3 * previous)] */
    ro.max_attempts = 12;
    o = run_tool(e, "j", "flaky", "{\"fail\": 11}");
    expect_ok(o);
    l = ledger(e, "j", "0.0");
    double prev = ro.base_ms;
    seen = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, i));
        const char *name = str_member(p, "name");
        if (!name || strcmp(name, "retry.backoff") != 0)
            continue;
        double delay = num_member(member(p, "value"), "delay_ms", -1);
        double hi = prev * 3 < ro.max_backoff_ms ? prev * 3 : ro.max_backoff_ms;
        cr_expect(delay >= ro.base_ms && delay <= hi,
                  "delay %g outside [%u, %g]", delay, ro.base_ms, hi);
        cr_expect_eq(num_member(member(p, "value"), "attempt", -1), seen + 1);
        prev = delay;
        seen++;
    }
    cr_expect_eq(seen, 11);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, a_backoff_past_the_deadline_is_a_timeout, .fini = t_cleanup)
{
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(5);
    ro.base_ms = 3600 * 1000;
    ro.max_backoff_ms = 3600 * 1000;
    pl_decorator d[2];
    cr_assert_eq(pl_decorator_timeout(&d[0], 60 * 1000), PL_OK);
    cr_assert_eq(pl_decorator_retry(&d[1], &ro), PL_OK);
    set_decos(2, d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *o = run_tool(e, "t", "flaky", "{\"fail\": 3}");
    expect_code(o, PL_ERR_TIMEOUT);
    cr_expect_eq(g_sleeps, 0, "no wait past the deadline");
    cr_expect_eq(file_size(g_fx), 1);
    cr_expect_gt(g_seen_deadline, 0, "the callee saw the deadline");
    expect_replay_still(e, "t", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retry, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    pl_retry_options o = PL_RETRY_OPTIONS_INIT;
    cr_expect_eq(pl_decorator_retry(&d, NULL), PL_OK, "defaults are good");
    cr_expect_eq(pl_decorator_retry(NULL, &o), PL_EINVAL);
    o.max_attempts = 0;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("max_attempts is 0");
    o = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    o.base_ms = 500;
    o.max_backoff_ms = 100;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("max_backoff_ms");
    o = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    o.n_codes = 2;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("n_codes without codes");
    static const char *const codes[] = {"Timeout", ""};
    o.codes = codes;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("NULL or empty");
    o = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    o.version = 99;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("pl_retry_options version 99 is newer");
    o.version = 0;
    cr_expect_eq(pl_decorator_retry(&d, &o), PL_EINVAL);
    expect_msg("not made with PL_RETRY_OPTIONS_INIT");

    /* changed after creation: refused at first use, failing the run */
    fresh_fx(t_tmpdir());
    static pl_retry_options ro;
    ro = retry_opts(3);
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    ro.max_attempts = 0;
    set_decos(1, &d);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg, NULL, NULL);
    pl_outcome *out = run_tool(e, "bad", "flaky", "{}");
    cr_expect_eq(out->status, PL_RUN_FAILED);
    cr_expect_eq(out->error, PL_EINVAL);
    cr_expect(out->reason && strstr(out->reason, "max_attempts is 0"), "%s",
              out->reason ? out->reason : "(null)");
    cr_expect_eq(file_size(g_fx), 0, "nothing ran");
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* retry across crashes                                                     */
/* ------------------------------------------------------------------------ */

/* In a forked child: start run "c" and die at the planned point. */
static void crash_child(const char *store)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_boundaries = 0;
        pl_registry *reg = registry();
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        o.on_event = kill_at_boundary;
        pl_engine *e = NULL;
        if (pl_engine_open(&e, store, reg, &o))
            _exit(11);
        cJSON *p = t_json("{\"tool\": \"flaky\", \"args\": {\"fail\": 3}}");
        pl_action a = {PL_ACTION_VERSION, "caller", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c";
        pl_outcome *out = NULL;
        int st = pl_run_start(&out, e, &a, &ro);
        _exit(st ? 12 : 3); /* it should have died before this */
    }
    char when[64];
    snprintf(when, sizeof when, "(boundary %ld, wait %d)", g_kill_at_boundary,
             g_kill_at_sleep);
    t_expect_killed(pid, when);
}

/* The shape of a ledger: its steps' types, actors and side effect names. */
static char *shape(const pl_steps *l)
{
    size_t cap = 64 + pl_steps_count(l) * 64, len = 0;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    s[0] = '\0';
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *st = pl_steps_at(l, i);
        const char *name = str_member(pl_step_payload(st), "name");
        len += (size_t)snprintf(s + len, cap - len, "%s/%s/%s ",
                                pl_step_type_name(pl_step_type_of(st)),
                                pl_step_actor(st), name ? name : "-");
    }
    return s;
}

typedef struct crash_state {
    int backoffs;      /* durable backoff records */
    bool tail_backoff; /* the ledger ends in one: the crash was mid-wait */
    int attempts;      /* attempts whose outside work is durable */
} crash_state;

static crash_state state_at_crash(const char *store, const pl_registry *reg)
{
    crash_state cs = {0, false, 0};
    pl_engine *e = open_engine(store, reg, NULL, NULL);
    pl_steps *l = NULL;
    if (pl_run_ledger(&l, e, "c", "0.0") == PL_OK) {
        cs.backoffs = count_effects(l, "retry.backoff");
        cs.attempts = count_effects(l, "hit");
        size_t n = pl_steps_count(l);
        const char *name = n ? str_member(pl_step_payload(pl_steps_at(l,
                                                                      n - 1)),
                                          "name")
                             : NULL;
        cs.tail_backoff = name && strcmp(name, "retry.backoff") == 0;
    }
    pl_steps_free(l);
    pl_engine_close(e);
    return cs;
}

/* Continue run "c" and check the crash invariants against @p ref. */
static void recover_and_check(const char *store, const pl_registry *reg,
                              const char *ref, crash_state cs)
{
    g_sleeps = 0;
    long hits_before = file_size(g_fx);
    pl_engine *e = open_engine(store, reg, NULL, NULL);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "c", NULL), PL_OK, "%s", pl_errmsg());
    expect_ok(o);
    cr_expect_eq(num_member(pl_outcome_result(o), "attempt", 0), 4);
    pl_steps *l = ledger(e, "c", "0.0");
    char *got = shape(l);
    cr_expect_str_eq(got, ref,
                     "the recovered ledger differs from an "
                     "uncrashed run's");
    free(got);
    /* every bound holds: 4 attempts, 3 waits in all */
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 4);
    cr_expect_eq(count_effects(l, "retry.backoff"), 3);
    pl_steps_free(l);
    /* nothing finished repeats: attempts durable at the crash are not
     * executed again; only one in flight (effect done, not durable) may */
    long executed_after = file_size(g_fx) - hits_before;
    cr_expect_eq(executed_after, 4 - cs.attempts,
                 "recovery executed %ld attempts, %d were durable",
                 executed_after, cs.attempts);
    cr_expect(hits_before - cs.attempts == 0 || hits_before - cs.attempts == 1,
              "%ld attempts ran before the crash, %d are durable", hits_before,
              cs.attempts);
    /* the waits: none for a backoff already followed by an attempt; the
     * rest of one the crash interrupted; each new one */
    int want = 3 - cs.backoffs + (cs.tail_backoff ? 1 : 0);
    cr_expect_eq(g_sleeps, want,
                 "recovery waited %d times; %d backoffs were durable%s",
                 g_sleeps, cs.backoffs,
                 cs.tail_backoff ? ", the last one interrupted" : "");
    cr_expect_eq(pl_run_verify(e, "c"), PL_OK, "%s", pl_errmsg());
    expect_replay_still(e, "c", o);
    pl_outcome_free(o);
    pl_engine_close(e);
}

static char *reference_shape(const pl_registry *reg, long *boundaries)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", t_tmpdir());
    char store[4400];
    t_store_in(store, sizeof store, dir, "ref.db");
    fresh_fx(dir);
    g_boundaries = 0;
    pl_engine *e = open_engine(store, reg, kill_at_boundary, NULL);
    pl_outcome *o = run_tool(e, "c", "flaky", "{\"fail\": 3}");
    expect_ok(o);
    *boundaries = g_boundaries;
    pl_steps *l = ledger(e, "c", "0.0");
    char *s = shape(l);
    pl_steps_free(l);
    pl_outcome_free(o);
    pl_engine_close(e);
    return s;
}

Test(retry_crash, kill_at_every_boundary, .fini = t_cleanup)
{
    static pl_retry_options ro;
    ro = retry_opts(5);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    long k_max = 0;
    char *ref = reference_shape(reg, &k_max);
    cr_assert_gt(k_max, 10);
    int mid_wait = 0; /* boundaries at which a wait was recorded, not done */
    for (long k = 1; k <= k_max; k++) {
        char dir[4200], store[4400];
        snprintf(dir, sizeof dir, "%s", t_tmpdir());
        t_store_in(store, sizeof store, dir, "store.db");
        fresh_fx(dir);
        g_kill_at_boundary = k;
        g_kill_at_sleep = 0;
        crash_child(store);
        g_kill_at_boundary = 0;
        crash_state cs = state_at_crash(store, reg);
        mid_wait += cs.tail_backoff;
        recover_and_check(store, reg, ref, cs);
    }
    /* two per wait: its commit, and the next attempt's first append (lost
     * with the crash) */
    cr_expect_eq(mid_wait, 6, "%d boundaries left a wait the last durable step",
                 mid_wait);
    free(ref);
    pl_registry_free(reg);
}

Test(retry_crash, kill_in_every_wait, .fini = t_cleanup)
{
    static pl_retry_options ro;
    ro = retry_opts(5);
    pl_decorator d;
    cr_assert_eq(pl_decorator_retry(&d, &ro), PL_OK);
    set_decos(1, &d);
    pl_registry *reg = registry();
    long k_max = 0;
    char *ref = reference_shape(reg, &k_max);
    for (int w = 1; w <= 3; w++) {
        char dir[4200], store[4400];
        snprintf(dir, sizeof dir, "%s", t_tmpdir());
        t_store_in(store, sizeof store, dir, "store.db");
        fresh_fx(dir);
        g_sleeps = 0;
        g_kill_at_sleep = w;
        crash_child(store);
        g_kill_at_sleep = 0;
        crash_state cs = state_at_crash(store, reg);
        cr_expect(cs.tail_backoff,
                  "wait %d: the backoff is durable before "
                  "the wait",
                  w);
        cr_expect_eq(cs.backoffs, w);
        cr_expect_eq(cs.attempts, w,
                     "every attempt before the wait is "
                     "durable");
        pl_engine *e = open_engine(store, reg, NULL, NULL);
        pl_steps *l = ledger(e, "c", "0.0");
        cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), w,
                     "so is its result");
        pl_steps_free(l);
        /* a check replay stops where the record ends, without waiting */
        g_sleeps = 0;
        pl_run_options check = PL_RUN_OPTIONS_INIT;
        check.check = true;
        pl_outcome *o = NULL;
        cr_expect_eq(pl_run_continue(&o, e, "c", &check), PL_ECHECK, "%s",
                     pl_errmsg());
        cr_expect_null(o);
        cr_expect_eq(g_sleeps, 0, "a check replay waited");
        pl_engine_close(e);
        cr_expect_eq(file_size(g_fx), w);
        recover_and_check(store, reg, ref, cs);
        cr_expect_eq(file_size(g_fx), 4, "no attempt ran twice");
    }
    free(ref);
    pl_registry_free(reg);
}
