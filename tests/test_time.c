/*
 * test_time.c -- durable timers, events, cancellation and deadlines
 * (core/replay/wait.c; the store's timers and inboxes, store.h).
 *
 * Runs on LMDB and, as pg_test_time, on PostgreSQL.  No test asserts a
 * duration: a test that needs a wait to be due waits for it with
 * pl_engine_wake() in a loop, however long the machine takes.
 */
#include "support.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Policies                                                                 */
/* ------------------------------------------------------------------------ */

static atomic_int g_undo, g_inflight;

/* "sleeper": echo, sleep payload.ms, add; returns {"slept": true}. */
static int sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "echo", a->payload);
    if (st)
        return st;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    if ((st = pl_ctx_sleep(ctx, (int64_t)ms->valuedouble)))
        return st;
    cJSON *p = t_json("{\"a\":1,\"b\":2}");
    st = pl_ctx_invoke(NULL, ctx, "add", p);
    cJSON_Delete(p);
    return st ? st : pl_steps_add_resultf(out, "{s:b}", "slept", 1);
}

/* "undo": the compensating call; counts g_undo. */
static int undo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)a;
    (void)u;
    atomic_fetch_add(&g_undo, 1);
    return pl_steps_add_resultf(out, "{s:b}", "undone", 1);
}

/*
 * "waiter": waits for payload.name (timeout payload.timeout, absent:
 * forever) payload.times times (default 1); returns {"got": [payloads]}
 * or {"timeout": true}.  On cancellation calls "undo" and returns
 * PL_ECANCELLED.
 */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "name");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(a->payload, "timeout");
    const cJSON *times = cJSON_GetObjectItemCaseSensitive(a->payload, "times");
    int n = cJSON_IsNumber(times) ? times->valueint : 1;
    cJSON *got = cJSON_CreateArray();
    int st = PL_OK;
    for (int i = 0; i < n && !st; i++) {
        cJSON *p = NULL;
        st = pl_ctx_wait_event(&p, ctx, name->valuestring,
                               cJSON_IsNumber(to) ? (int64_t)to->valuedouble
                                                  : PL_WAIT_FOREVER);
        if (!st)
            cJSON_AddItemToArray(got, p);
    }
    if (st == PL_ETIMEDOUT) {
        cJSON_Delete(got);
        return pl_steps_add_resultf(out, "{s:b}", "timeout", 1);
    }
    if (st == PL_ECANCELLED) {
        cJSON_Delete(got);
        int ust = pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty());
        return ust ? ust : PL_ECANCELLED;
    }
    if (st) {
        cJSON_Delete(got);
        return st;
    }
    int rs = pl_steps_add_resultf(out, "{s:O}", "got", got);
    cJSON_Delete(got);
    return rs;
}

/* "cancel_me": its first execution cancels its own run from inside a call
 * ("inflight"), as another process would while the call runs. */
static int inflight(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    atomic_fetch_add(&g_inflight, 1);
    /* the root's run id: the context's idempotency key starts with it */
    char id[PL_MAX_RUN_ID + 1];
    snprintf(id, sizeof id, "%s", pl_ctx_run_id(ctx));
    int st = pl_run_cancel(pl_ctx_engine(ctx), id, "customer asked");
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:b}", "charged", 1);
}

static int cancel_me(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "inflight", pl_json_empty());
    if (st)
        return st;
    st = pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty());
    if (st == PL_ECANCELLED) {
        if ((st = pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty())))
            return st;
        return PL_ECANCELLED;
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "nested": calls "waiter" (which compensates and hands the cancellation
 * on), then notes what its call returned. */
static int nested(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "waiter", a->payload);
    if (st == PL_ECANCELLED)
        return pl_steps_add_resultf(out, "{s:b}", "saw_cancel", 1);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"sleeper", sleeper},     {"undo", undo},
                {"waiter", waiter},       {"inflight", inflight},
                {"cancel_me", cancel_me}, {"nested", nested}};
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static pl_engine *engine_parking(const pl_registry *reg)
{
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

static pl_run_info *info_of(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
    return info;
}

static pl_run_status status_of(pl_engine *e, const char *id)
{
    pl_run_info *info = info_of(e, id);
    pl_run_status s = info->status;
    pl_run_info_free(info);
    return s;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wake due runs until run @p id is no longer waiting. */
static void wake_until_done(pl_engine *e, const char *id)
{
    for (int i = 0; i < 60000 && status_of(e, id) == PL_RUN_WAITING; i++) {
        int64_t next = 0;
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
        if (status_of(e, id) != PL_RUN_WAITING)
            break;
        nap_ms(5);
    }
}

static const cJSON *result_of(const pl_outcome *o)
{
    return pl_outcome_result(o);
}

/* ------------------------------------------------------------------------ */
/* Durable timers                                                           */
/* ------------------------------------------------------------------------ */

Test(time, sleep_parks_the_run_and_wake_continues_it)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "sleeper", "{\"ms\":300}", "s1");
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s",
                 pl_run_status_name(o->status));
    cr_expect_null(o->wait_event);
    cr_expect_str_eq(o->suspended_path, "0");
    int64_t wake = o->wake_ms;
    cr_expect_gt(wake, 0);
    pl_outcome_free(o);

    pl_run_info *info = info_of(e, "s1");
    cr_expect_eq(info->status, PL_RUN_WAITING);
    cr_expect_eq(info->wake_ms, wake);
    cr_expect_null(info->wait_event);
    cr_expect_not(info->owner_alive, "a waiting run holds nothing");
    pl_run_info_free(info);

    /* the wait step holds the wake time, computed from the recorded now */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "s1", "0"), PL_OK);
    const pl_step *w = pl_steps_at(l, pl_steps_count(l) - 1);
    cr_assert_eq(pl_step_type_of(w), PL_STEP_WAIT);
    const pl_step *now = pl_steps_at(l, pl_steps_count(l) - 2);
    const cJSON *nv = cJSON_GetObjectItem(pl_step_payload(now), "value");
    cr_expect_eq((int64_t)nv->valuedouble + 300, wake);
    cr_expect_eq((int64_t)cJSON_GetObjectItem(pl_step_payload(w), "until")
                     ->valuedouble,
                 wake);
    pl_steps_free(l);

    wake_until_done(e, "s1");
    cr_expect_eq(status_of(e, "s1"), PL_RUN_COMPLETED);
    cr_expect_eq(t_calls.echo, 1, "the call before the sleep ran once");
    cr_expect_eq(t_calls.add, 1);
    cr_expect_geq(now_ms(), wake, "woken no sooner than its time");
    int64_t next = -1;
    cr_expect_eq(pl_engine_wake(e, &next), PL_OK);
    cr_expect_eq(next, 0, "no timer is left");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, continued_before_its_time_waits_for_the_same_time)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "sleeper", "{\"ms\":600000}", "s2");
    int64_t wake = o->wake_ms;
    pl_outcome_free(o);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(pl_run_continue(&o, e, "s2", NULL), PL_OK, "%s",
                     pl_errmsg());
        cr_expect_eq(o->status, PL_RUN_WAITING);
        cr_expect_eq(o->wake_ms, wake, "the replay never sleeps from zero");
        pl_outcome_free(o);
    }
    int64_t next = 0;
    cr_expect_eq(pl_engine_wake(e, &next), PL_OK);
    cr_expect_eq(next, wake, "the timer is due at the wake time");
    cr_expect_eq(status_of(e, "s2"), PL_RUN_WAITING, "not due: not woken");
    cr_expect_eq(t_calls.echo, 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, continued_after_its_time_goes_on_at_once)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "sleeper", "{\"ms\":300}", "s3");
    int64_t wake = o->wake_ms;
    pl_outcome_free(o);
    while (now_ms() <= wake)
        nap_ms(10);
    cr_assert_eq(pl_run_continue(&o, e, "s3", NULL), PL_OK);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_geq(o->calls_served, 1, "the call before the sleep is served");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_short_sleep_waits_in_place)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "sleeper", "{\"ms\":20}", "s4");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    /* replayed: the recorded sleep is over */
    cr_assert_eq(pl_run_continue(&o, e, "s4", NULL), PL_OK);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, bad_arguments_are_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    cr_expect_eq(pl_engine_wake(NULL, NULL), PL_EINVAL);
    cr_expect_eq(pl_engine_set_wait_in_place(e, -2), PL_EINVAL);
    cJSON *p = t_json("{}");
    cr_expect_eq(pl_run_signal(NULL, e, "nope", "x", p), PL_ENOTFOUND);
    cr_expect_eq(pl_run_signal(NULL, e, "bad id!", "x", p), PL_EINVAL);
    cr_expect_eq(pl_run_signal(NULL, e, "x", "", p), PL_EINVAL);
    cJSON *arr = cJSON_CreateArray();
    cr_expect_eq(pl_run_signal(NULL, e, "x", "n", arr), PL_EJSON);
    cJSON_Delete(arr);
    cr_expect_eq(pl_run_cancel(e, "nope", "r"), PL_ENOTFOUND);
    cr_expect_eq(pl_run_cancel(NULL, "nope", "r"), PL_EINVAL);
    cJSON_Delete(p);
    /* a negative sleep fails the run that asks for one */
    pl_outcome *o = t_start(e, "sleeper", "{\"ms\":-5}", "neg");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

static void signal_ok(pl_engine *e, const char *id, const char *name,
                      const char *json)
{
    cJSON *p = t_json(json);
    int st = pl_run_signal(NULL, e, id, name, p);
    cJSON_Delete(p);
    cr_assert_eq(st, PL_OK, "pl_run_signal: %s", pl_errmsg());
}

Test(time, a_waiting_run_is_woken_by_its_event)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "waiter", "{\"name\":\"approve\"}", "w1");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    cr_expect_str_eq(o->wait_event, "approve");
    cr_expect_eq(o->wake_ms, 0, "no timeout: no wake time");
    pl_outcome_free(o);
    pl_run_info *info = info_of(e, "w1");
    cr_expect_str_eq(info->wait_event, "approve");
    pl_run_info_free(info);
    /* another name does not end the wait */
    signal_ok(e, "w1", "other", "{\"x\":0}");
    int64_t next;
    cr_expect_eq(pl_engine_wake(e, &next), PL_OK);
    cr_expect_eq(status_of(e, "w1"), PL_RUN_WAITING);
    /* its own name does, continued in this thread on request */
    cJSON *p = t_json("{\"ok\":true}");
    cr_assert_eq(pl_run_signal(&o, e, "w1", "approve", p), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(p);
    cr_assert_not_null(o, "continued in the caller's thread");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    char *r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"got\":[{\"ok\":true}]}");
    free(r);
    pl_outcome_free(o);
    /* replayed, the same event; the consumed one is gone */
    cr_assert_eq(pl_run_continue(&o, e, "w1", NULL), PL_OK);
    r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"got\":[{\"ok\":true}]}");
    free(r);
    pl_outcome_free(o);
    /* an ended run refuses events */
    p = t_json("{}");
    cr_expect_eq(pl_run_signal(NULL, e, "w1", "approve", p), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "completed") != NULL, "%s", pl_errmsg());
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, an_event_sent_before_the_wait_is_buffered)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    cJSON *pl = t_json("{\"name\":\"n\",\"times\":2}");
    pl_action a = {PL_ACTION_VERSION, "waiter", pl, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "w2";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(pl);
    /* delivery order is consumption order, first wins */
    signal_ok(e, "w2", "n", "{\"i\":1}");
    signal_ok(e, "w2", "x", "{\"i\":0}");
    signal_ok(e, "w2", "n", "{\"i\":2}");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "w2", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    char *r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"got\":[{\"i\":1},{\"i\":2}]}");
    free(r);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_wait_times_out_and_the_timeout_is_recorded)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "waiter", "{\"name\":\"n\",\"timeout\":100}",
                            "w3");
    /* waiting; or, on a slow machine, timed out at once */
    cr_expect(o->status == PL_RUN_WAITING || o->status == PL_RUN_COMPLETED);
    pl_outcome_free(o);
    wake_until_done(e, "w3");
    cr_assert_eq(status_of(e, "w3"), PL_RUN_COMPLETED);
    /* an event sent now is refused, and the replay still times out */
    cJSON *p = t_json("{}");
    cr_expect_eq(pl_run_signal(NULL, e, "w3", "n", p), PL_ESTATE);
    cJSON_Delete(p);
    cr_assert_eq(pl_run_continue(&o, e, "w3", NULL), PL_OK);
    char *r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"timeout\":true}");
    free(r);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, an_event_delivered_before_the_timeout_is_looked_at_wins)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "waiter", "{\"name\":\"n\",\"timeout\":300}",
                            "w4");
    int64_t wake = o->wake_ms;
    bool waiting = o->status == PL_RUN_WAITING;
    pl_outcome_free(o);
    if (!waiting) { /* the machine took longer than the timeout to start */
        pl_engine_close(e);
        pl_registry_free(reg);
        cr_skip_test("the run timed out before it could wait");
    }
    while (now_ms() <= wake)
        nap_ms(10);
    /* the timeout has passed, but nothing looked: the event is there */
    signal_ok(e, "w4", "n", "{\"late\":true}");
    wake_until_done(e, "w4");
    cr_assert_eq(pl_run_continue(&o, e, "w4", NULL), PL_OK);
    char *r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"got\":[{\"late\":true}]}");
    free(r);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Cancellation                                                             */
/* ------------------------------------------------------------------------ */

Test(time, a_cancelled_waiting_run_compensates_and_ends_cancelled)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "waiter", "{\"name\":\"n\"}", "c1");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_cancel(e, "c1", "no longer needed"), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info *info = info_of(e, "c1");
    cr_expect_eq(info->status, PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(info->status));
    cr_expect_str_eq(info->reason, "no longer needed");
    cr_expect_eq(info->error, PL_ECANCELLED);
    pl_run_info_free(info);
    cr_expect_eq(g_undo, 1, "the compensating call ran once");
    cr_expect_eq(pl_run_verify(e, "c1"), PL_OK, "%s", pl_errmsg());
    /* final: continue refuses, a check replays it the same way */
    cr_expect_eq(pl_run_continue(&o, e, "c1", NULL), PL_ESTATE);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_assert_eq(pl_run_continue(&o, e, "c1", &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_CANCELLED);
    pl_outcome_free(o);
    cr_expect_eq(g_undo, 1);
    cr_expect_eq(pl_run_cancel(e, "c1", "again"), PL_ESTATE);
    cJSON *p = t_json("{}");
    cr_expect_eq(pl_run_signal(NULL, e, "c1", "n", p), PL_ESTATE);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_running_run_sees_the_cancel_at_its_next_call)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "cancel_me", "{}", "c2");
    cr_expect_eq(o->status, PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(o->status));
    cr_expect_str_eq(o->reason, "customer asked");
    pl_outcome_free(o);
    cr_expect_eq(g_inflight, 1, "the call in flight finished");
    cr_expect_eq(t_calls.echo, 0, "the next call did not run");
    cr_expect_eq(g_undo, 1);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "c2", "0"), PL_OK);
    /* call inflight, its result (recorded), the cancel, call undo, result */
    size_t n = pl_steps_count(l);
    int cancels = 0;
    for (size_t i = 0; i < n; i++)
        cancels += pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_CANCEL;
    cr_expect_eq(cancels, 1);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 1)), PL_STEP_ACTION_RESULT);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 2)), PL_STEP_CANCEL);
    pl_steps_free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_callee_hands_the_cancel_to_its_caller)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "nested", "{\"name\":\"n\"}", "c3");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    cr_expect_str_eq(o->suspended_path, "0.0");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_cancel(e, "c3", "stop"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "c3"), PL_RUN_CANCELLED);
    cr_expect_eq(g_undo, 1);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "c3", "0"), PL_OK);
    const pl_step *res = pl_steps_at(l, 1);
    cr_expect_str_eq(pl_step_error_code(res), PL_ERR_CANCELLED);
    pl_steps_free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_submitted_run_is_cancelled_at_once)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "c4";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK);
    cr_assert_eq(pl_run_cancel(e, "c4", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "c4"), PL_RUN_CANCELLED);
    /* a worker finds nothing to do */
    pl_worker_stop(e);
    cr_expect_eq(pl_worker_run(e, NULL), PL_OK);
    cr_expect_eq(t_calls.echo, 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Deadlines                                                                */
/* ------------------------------------------------------------------------ */

static pl_outcome *start_with_deadline(pl_engine *e, const char *policy,
                                       const char *json, const char *id,
                                       int64_t abs_ms, int64_t in_ms)
{
    cJSON *p = t_json(json);
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.deadline_ms = abs_ms;
    ro.deadline_in_ms = in_ms;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    return o;
}

Test(time, a_run_past_its_deadline_fails_at_its_next_call)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = start_with_deadline(e, "chain", "{}", "d1", 1, 0);
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EDEADLINE);
    cr_expect(strncmp(o->reason, "DeadlineExceeded", 16) == 0, "%s", o->reason);
    pl_outcome_free(o);
    cr_expect_eq(t_calls.add, 0);
    pl_run_info *info = info_of(e, "d1");
    cr_expect_eq(info->deadline_ms, 1);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_waiting_run_is_woken_at_its_deadline_to_end)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = start_with_deadline(e, "sleeper", "{\"ms\":600000}", "d2",
                                        0, 1000);
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    int64_t next = 0;
    cr_expect_eq(pl_engine_wake(e, &next), PL_OK);
    pl_run_info *info = info_of(e, "d2");
    cr_expect_leq(next, info->deadline_ms, "due at the deadline");
    pl_run_info_free(info);
    wake_until_done(e, "d2");
    info = info_of(e, "d2");
    cr_expect_eq(info->status, PL_RUN_FAILED);
    cr_expect_eq(info->error, PL_EDEADLINE);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_bad_deadline_is_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.deadline_in_ms = -1;
    pl_outcome *o = NULL;
    cr_expect_eq(pl_run_start(&o, e, &a, &ro), PL_EINVAL);
    /* version 1 options, without the deadline fields, still work */
    pl_run_options v1 = PL_RUN_OPTIONS_INIT;
    v1.version = 1;
    cr_expect_eq(pl_run_start(&o, e, &a, &v1), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Workers                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct worker_arg {
    pl_engine *e;
    int st;
} worker_arg;

static void *worker_main(void *arg)
{
    worker_arg *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = 3;
    o.poll_ms = 10;
    w->st = pl_worker_run(w->e, &o);
    return NULL;
}

Test(time, a_worker_wakes_every_sleeping_run_once, .timeout = 120)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    enum { N = 20 };
    for (int i = 0; i < N; i++) {
        char id[16], json[32];
        snprintf(id, sizeof id, "ws%d", i);
        snprintf(json, sizeof json, "{\"ms\":%d}", 50 + 10 * i);
        pl_outcome *o = t_start(e, "sleeper", json, id);
        cr_expect(o->status == PL_RUN_WAITING ||
                  o->status == PL_RUN_COMPLETED); /* a slow start */
        pl_outcome_free(o);
    }
    worker_arg w = {e, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, worker_main, &w), 0);
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "ws%d", i);
        while (status_of(e, id) == PL_RUN_WAITING ||
               status_of(e, id) == PL_RUN_RUNNING)
            nap_ms(10);
        pl_run_info *info = info_of(e, id);
        cr_expect_eq(info->status, PL_RUN_COMPLETED, "%s: %s %s", id,
                     pl_run_status_name(info->status),
                     info->reason ? info->reason : "");
        pl_run_info_free(info);
    }
    pl_worker_stop(e);
    pthread_join(th, NULL);
    cr_expect_eq(w.st, PL_OK);
    cr_expect_eq(t_calls.add, N, "each woke exactly once");
    cr_expect_eq(t_calls.echo, N);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Races                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct racer {
    pl_engine *e;
    const char *id;
    long delay_us;
    int st;
    bool stop;
} racer;

/* Send the event "n" to run r->id after r->delay_us. */
static void *signal_later(void *arg)
{
    racer *r = arg;
    struct timespec ts = {0, r->delay_us * 1000L};
    nanosleep(&ts, NULL);
    cJSON *p = t_json("{\"late\":true}");
    r->st = pl_run_signal(NULL, r->e, r->id, "n", p);
    cJSON_Delete(p);
    return NULL;
}

Test(time, a_timeout_racing_a_signal_ends_one_way_only, .timeout = 300)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    int timeouts = 0, events = 0;
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "race%d", i);
        pl_outcome *o = t_start(e, "waiter", "{\"name\":\"n\",\"timeout\":20}",
                                id);
        /* waiting; or, on a slow machine, timed out at once */
        cr_expect(o->status == PL_RUN_WAITING || o->status == PL_RUN_COMPLETED,
                  "%s", pl_run_status_name(o->status));
        pl_outcome_free(o);
        racer r = {e, id, (i * 2371) % 40000, 0, false};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, signal_later, &r), 0);
        wake_until_done(e, id);
        pthread_join(th, NULL);
        wake_until_done(e, id); /* a signal may have made it due again */
        cr_assert_eq(status_of(e, id), PL_RUN_COMPLETED);
        cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK);
        char *res = t_text(result_of(o));
        pl_outcome_free(o);
        if (!strcmp(res, "{\"timeout\":true}")) {
            timeouts++;
            /* the event came too late: refused, or left unconsumed */
            cr_expect(r.st == PL_OK || r.st == PL_ESTATE, "%s",
                      pl_status_name(r.st));
        } else {
            events++;
            cr_expect_str_eq(res, "{\"got\":[{\"late\":true}]}");
            cr_expect_eq(r.st, PL_OK, "a consumed event was delivered");
        }
        free(res);
        /* a check replay agrees with the record, whatever happened */
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.check = true;
        cr_expect_eq(pl_run_continue(&o, e, id, &ro), PL_OK, "%s", pl_errmsg());
        pl_outcome_free(o);
    }
    fprintf(stderr, "timeout vs signal: %d timeouts, %d events\n", timeouts,
            events);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Cancel run r->id after r->delay_us. */
static void *cancel_later(void *arg)
{
    racer *r = arg;
    struct timespec ts = {0, r->delay_us * 1000L};
    nanosleep(&ts, NULL);
    r->st = pl_run_cancel(r->e, r->id, "race");
    return NULL;
}

Test(time, a_cancel_racing_completion_ends_one_way_only, .timeout = 300)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    int cancelled = 0, completed = 0;
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "cr%d", i);
        cJSON *p = t_json("{\"n\":40}");
        pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        racer r = {e, id, (i * 997) % 8000, 0, false};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, cancel_later, &r), 0);
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, e, &a, &ro);
        pthread_join(th, NULL);
        cJSON_Delete(p);
        if (r.st == PL_ENOTFOUND) { /* before the run existed: again */
            pl_outcome_free(o);
            r.st = pl_run_cancel(e, id, "race");
            o = NULL;
            st = PL_OK;
        }
        cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
        pl_outcome_free(o);
        pl_run_info *info = info_of(e, id);
        if (info->status == PL_RUN_CANCELLED) {
            cancelled++;
            cr_expect_eq(r.st, PL_OK, "a cancelled run's cancel succeeded");
            cr_expect_str_eq(info->reason, "race");
        } else {
            completed++;
            cr_expect_eq(info->status, PL_RUN_COMPLETED);
            /* accepted too late to be seen, or refused: it had ended */
            cr_expect(r.st == PL_OK || r.st == PL_ESTATE, "%s",
                      pl_status_name(r.st));
        }
        pl_run_info_free(info);
        cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
    }
    fprintf(stderr, "cancel vs completion: %d cancelled, %d completed\n",
            cancelled, completed);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Edges                                                                    */
/* ------------------------------------------------------------------------ */

/* "fan": two "waiter" calls at once: a branch cannot wait. */
static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    pl_call_spec specs[2] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT};
    pl_action acts[2] = {PL_ACTION_INIT, PL_ACTION_INIT};
    for (int i = 0; i < 2; i++) {
        acts[i].policy = "waiter";
        acts[i].payload = a->payload;
        specs[i].action = &acts[i];
    }
    pl_step *res[2] = {NULL, NULL};
    int st = pl_ctx_call_all(res, ctx, specs, 2);
    pl_step_free(res[0]);
    pl_step_free(res[1]);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "past": sleeps until a time long gone, then calls "add". */
static int past(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    int st = pl_ctx_sleep_until(ctx, 1000);
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "add", "{s:i, s:i}", "a", 1, "b", 1);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

Test(time, a_call_of_a_fan_out_cannot_wait)
{
    pl_registry *reg = registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "fan";
    d.fn = fan;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "fan", "{\"name\":\"n\"}", "f1");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect(o->reason && strstr(o->reason, "cannot wait"), "%s", o->reason);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_sleep_until_a_time_gone_goes_on_at_once)
{
    pl_registry *reg = registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "past";
    d.fn = past;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "past", "{}", "p1");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_expect_eq(pl_run_continue(&o, e, "p1", &ro), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    cr_expect_eq(t_calls.add, 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}
