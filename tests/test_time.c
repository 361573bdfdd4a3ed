/*
 * test_time.c -- durable timers, events, cancellation and deadlines
 * (core/replay/wait.c; the store's timers and inboxes, store.h).
 *
 * Runs on LMDB and, as pg_test_time, on PostgreSQL.  No test asserts a
 * duration: a test that needs a wait to be due waits for it with
 * pl_engine_wake() in a loop, however long the machine takes.
 * test_time_races.c: workers, races and edges; support_time.c: what they
 * share.
 */
#include "support_time.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    cr_expect_eq(t_calls.echo, 1, "a refused continue replayed the run");
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
    /* so does a wake time past 2^53 ms, which no JSON number holds
     * exactly: refused as such, never "out of memory" leaving the run to be
     * taken again and again */
    const char *past[][2] = {{"sleeper", "{\"ms\":9007199254740000}"},
                             {"waiter", "{\"name\":\"x\",\"timeout\":"
                                        "9007199254740000}"}};
    for (int i = 0; i < 2; i++) {
        o = t_start(e, past[i][0], past[i][1], i ? "far-w" : "far-s");
        cr_expect_eq(o->status, PL_RUN_FAILED, "%s: %s", past[i][0],
                     pl_run_status_name(o->status));
        cr_expect(o->reason && strstr(o->reason, "2^53"), "%s: %s", past[i][0],
                  o->reason ? o->reason : "(no reason)");
        pl_outcome_free(o);
    }
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

/* "A signal to an ended run (completed, failed, cancelled) is refused with
 * PL_ESTATE": the failed one (completed: above; cancelled: below). */
Test(time, a_failed_run_refuses_events_and_cancels)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "fail", NULL, "f1");
    cr_assert_eq(o->status, PL_RUN_FAILED, "%s", pl_run_status_name(o->status));
    pl_outcome_free(o);
    cJSON *p = t_json("{}");
    pl_outcome *out = NULL;
    cr_expect_eq(pl_run_signal(&out, e, "f1", "n", p), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "failed") != NULL, "%s", pl_errmsg());
    cr_expect_null(out);
    cJSON_Delete(p);
    cr_expect_eq(pl_run_cancel(e, "f1", "late"), PL_ESTATE);
    cr_expect_eq(status_of(e, "f1"), PL_RUN_FAILED);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The steps run @p id's root ledger holds, as compact JSON "type payload"
 * lines. */
static char *steps_text(pl_engine *e, const char *id)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    static char buf[4096];
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *st = pl_steps_at(l, i);
        char *t = t_text(pl_step_payload(st));
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s %s\n",
                               pl_step_type_name(pl_step_type_of(st)), t);
        free(t);
        cr_assert_lt(at, sizeof buf);
    }
    pl_steps_free(l);
    return buf;
}

/* The table of Time and events: what a wait_event records, the event
 * consumed {"name", "payload", "seq"} or {"name", "timeout": true}; a
 * cancellation's {"reason"}. */
Test(time, a_wait_records_the_steps_the_guide_shows)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *o = t_start(e, "waiter",
                            "{\"name\":\"go\",\"timeout\":"
                            "600000}",
                            "wr1");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    int64_t wake = o->wake_ms;
    pl_outcome_free(o);
    signal_ok(e, "wr1", "go", "{\"i\":1}");
    wake_until_done(e, "wr1");
    cr_assert_eq(status_of(e, "wr1"), PL_RUN_COMPLETED);
    char *got = steps_text(e, "wr1");
    /* now, the wait, the event, the result */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "wr1", "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 4, "%s", got);
    const cJSON *now = cJSON_GetObjectItem(pl_step_payload(pl_steps_at(l, 0)),
                                           "value");
    const cJSON *seq = cJSON_GetObjectItem(pl_step_payload(pl_steps_at(l, 2)),
                                           "seq");
    cr_assert(cJSON_IsNumber(now) && cJSON_IsNumber(seq), "%s", got);
    cr_expect_eq((int64_t)now->valuedouble + 600000, wake);
    char want[512];
    snprintf(want, sizeof want,
             "wait {\"event\":\"go\",\"until\":%lld}\n"
             "event {\"name\":\"go\",\"payload\":{\"i\":1},\"seq\":%d}\n",
             (long long)wake, seq->valueint);
    pl_steps_free(l);
    cr_expect(strstr(got, want), "want\n%sin\n%s", want, got);
    /* a timeout */
    o = t_start(e, "waiter", "{\"name\":\"go\",\"timeout\":1}", "wr2");
    pl_outcome_free(o);
    wake_until_done(e, "wr2");
    got = steps_text(e, "wr2");
    cr_expect(strstr(got, "event {\"name\":\"go\",\"timeout\":true}\n"), "%s",
              got);
    /* a cancellation seen at a call */
    o = t_start(e, "cancel_me", "{}", "wr3");
    pl_outcome_free(o);
    got = steps_text(e, "wr3");
    cr_expect(strstr(got, "cancel {\"reason\":\"customer asked\"}\n"), "%s",
              got);
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

/* A timeout of 0 takes only what is there: nothing, and the wait times
 * out at once, parking nothing; an event sent before (a submitted run's
 * inbox keeps it), and it is taken. */
Test(time, a_zero_timeout_takes_only_what_is_there)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    const char *json = "{\"name\":\"n\",\"timeout\":0}";
    pl_outcome *o = t_start(e, "waiter", json, "w0");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(o->status));
    char *r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"timeout\":true}");
    free(r);
    pl_outcome_free(o);
    cJSON *p = t_json(json);
    pl_action a = {PL_ACTION_VERSION, "waiter", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "w00";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    signal_ok(e, "w00", "n", "{\"early\":true}");
    cr_assert_eq(pl_run_continue(&o, e, "w00", NULL), PL_OK, "%s", pl_errmsg());
    r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"got\":[{\"early\":true}]}");
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
    uint8_t head[PL_HASH_LEN]; /* neither a waiting nor a cancelled run's */
    cr_expect_eq(pl_run_head(head, e, "c1"), PL_ESTATE);
    cr_assert_eq(pl_run_cancel(e, "c1", "no longer needed"), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(pl_run_head(head, e, "c1"), PL_ESTATE);
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

/* pl_run_start() with PL_IF_EXISTS_OUTCOME executes nothing and gives a
 * waiting run's recorded wait (where, until when, for what), as the
 * start that parked it did, and a cancelled run's reason, as its end
 * did. */
Test(time, an_outcome_asked_of_a_waiting_or_cancelled_run_is_as_recorded)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_outcome *parked = t_start(e, "waiter", "{\"name\":\"n\"}", "c7");
    cr_assert_eq(parked->status, PL_RUN_WAITING);
    cJSON *p = t_json("{\"name\":\"n\"}");
    pl_action a = {PL_ACTION_VERSION, "waiter", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "c7";
    ro.if_exists = PL_IF_EXISTS_OUTCOME;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_WAITING);
    cr_expect_str_eq(o->wait_event ? o->wait_event : "(null)", "n");
    cr_expect_eq(o->wake_ms, parked->wake_ms);
    cr_expect_str_eq(o->suspended_path ? o->suspended_path : "(null)",
                     parked->suspended_path);
    pl_outcome_free(o);
    pl_outcome_free(parked);
    cr_assert_eq(pl_run_cancel(e, "c7", "not needed"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(g_undo, 1);
    o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_CANCELLED);
    cr_expect_eq(o->error, PL_ECANCELLED);
    cr_expect_str_eq(o->reason ? o->reason : "(null)", "not needed");
    pl_outcome_free(o);
    cr_expect_eq(g_undo, 1, "an outcome executed the run again");
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void *worker_main(void *e)
{
    return (void *)(intptr_t)pl_worker_run(e, NULL);
}

/*
 * Run @p id of "saga" did part of its work ("book") and went back to the
 * queue, `running` with no live owner.  Cancelled, it does not end at
 * once: a worker takes it, replays "book" from its ledger, sees the
 * cancellation at its next call and compensates ("undo"), as a run
 * cancelled while it runs does; "echo", the rest, never runs.
 */
static void cancel_queued_saga(pl_engine *e, const char *id)
{
    pl_run_info *info = info_of(e, id);
    cr_assert_eq(info->status, PL_RUN_RUNNING, "%s",
                 pl_run_status_name(info->status));
    cr_assert(!info->owner_alive);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_cancel(e, id, "changed my mind"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(status_of(e, id), PL_RUN_RUNNING);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, worker_main, e), 0);
    for (int i = 0; i < 12000 && status_of(e, id) == PL_RUN_RUNNING; i++)
        nap_ms(5);
    pl_worker_stop(e);
    void *rc = NULL;
    cr_assert_eq(pthread_join(th, &rc), 0);
    cr_assert_eq((intptr_t)rc, PL_OK);
    info = info_of(e, id);
    cr_expect_eq(info->status, PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(info->status));
    cr_expect_str_eq(info->reason, "changed my mind");
    cr_expect_eq(info->error, PL_ECANCELLED);
    pl_run_info_free(info);
    cr_expect_eq(g_undo, 1, "the compensation ran once");
    cr_expect_eq(t_calls.echo, 0, "the rest of its work ran");
    /* book, its result, the cancel, undo, its result */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 5);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 1)), PL_STEP_ACTION_RESULT);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 2)), PL_STEP_CANCEL);
    cr_expect_str_eq(pl_step_actor(pl_steps_at(l, 3)), "saga");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
}

Test(time, a_run_handed_back_to_the_queue_compensates_when_cancelled)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_parking(reg);
    pl_action a = {PL_ACTION_VERSION, "saga", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "c5";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    atomic_store(&g_book_stops, 1); /* the worker stops after "book" */
    cr_assert_eq(pl_worker_run(e, NULL), PL_OK, "%s", pl_errmsg());
    atomic_store(&g_book_stops, 0);
    cr_assert_eq(g_booked, 1);
    cancel_queued_saga(e, "c5");
    cr_expect_eq(g_booked, 1, "served from the ledger, not booked again");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(time, a_run_whose_worker_died_compensates_when_cancelled)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) { /* dies in "saga" once "book" is durable */
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.lease_ms = 200;
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, path, reg, &eo))
            _exit(1);
        atomic_store(&g_saga_dies, 1);
        pl_action a = {
            PL_ACTION_VERSION, "saga", pl_json_empty(), NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c6";
        pl_outcome *o = NULL;
        pl_run_start(&o, ce, &a, &ro);
        _exit(2);
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child: %d", ws);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cancel_queued_saga(e, "c6");
    cr_expect_eq(g_booked, 0, "served from the ledger, not booked again");
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
    /* a queued run's relative deadline counts from its submission: its
     * time in the queue is spent from it */
    pl_action a = {PL_ACTION_VERSION, "chain", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "d2";
    ro.deadline_in_ms = 50;
    int64_t before = now_ms();
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    int64_t after = now_ms();
    info = info_of(e, "d2");
    cr_expect(info->deadline_ms >= before + 50 &&
                  info->deadline_ms <= after + 50,
              "deadline %lld, submitted in [%lld, %lld]",
              (long long)info->deadline_ms, (long long)before,
              (long long)after);
    int64_t deadline = info->deadline_ms;
    pl_run_info_free(info);
    while (now_ms() <= deadline)
        nap_ms(5);
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "d2", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EDEADLINE);
    pl_outcome_free(o);
    cr_expect_eq(t_calls.add, 0);
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

/* "dl_leaf": returns {"d": its pl_ctx_deadline()}. */
static int dl_leaf(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a, (void)u;
    return pl_steps_add_resultf(out, "{s:I}", "d", pl_ctx_deadline(ctx));
}

/* "dl_root": {"root": its deadline, "leaf": its callee's, "short": a
 * callee's under timeout(1000), "long": under timeout(10 h)}. */
static int dl_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a, (void)u;
    int64_t d[3] = {0, 0, 0};
    int64_t ms[3] = {0, 1000, 36000000};
    for (int i = 0; i < 3; i++) {
        pl_decorator t;
        int st = i ? pl_decorator_timeout(&t, ms[i]) : PL_OK;
        pl_action call = PL_ACTION_INIT;
        call.policy = "dl_leaf";
        call.payload = pl_json_empty();
        pl_step *r = NULL;
        if (!st)
            st = pl_ctx_call(&r, ctx, &call, i ? &t : NULL, i ? 1 : 0);
        if (st)
            return st;
        d[i] = (int64_t)cJSON_GetObjectItem(pl_step_payload(r), "d")
                   ->valuedouble;
        pl_step_free(r);
    }
    return pl_steps_add_resultf(out, "{s:I, s:I, s:I, s:I}", "root",
                                pl_ctx_deadline(ctx), "leaf", d[0], "short",
                                d[1], "long", d[2]);
}

static int64_t member(const pl_outcome *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItem(result_of(o), name);
    cr_assert(cJSON_IsNumber(v), "%s", name);
    return (int64_t)v->valuedouble;
}

/* pl_run_options: "the earlier of the two set counts", "Every invocation's
 * pl_ctx_deadline() starts with it"; the timeout decorator gives a callee
 * its own deadline, or the caller's when that is earlier; a replay sees
 * the same. */
Test(time, every_invocation_starts_with_the_runs_deadline)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "dl_leaf", dl_leaf, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "dl_root", dl_root, NULL), PL_OK);
    pl_engine *e = engine_parking(reg);
    int64_t hour = 3600000, t0 = now_ms();
    /* the absolute one is earlier */
    pl_outcome *o = start_with_deadline(e, "dl_root", "{}", "dl1", t0 + hour,
                                        2 * hour);
    int64_t t1 = now_ms();
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(member(o, "root"), t0 + hour);
    cr_expect_eq(member(o, "leaf"), t0 + hour);
    cr_expect_eq(member(o, "long"), t0 + hour, "the caller's is earlier");
    int64_t s = member(o, "short");
    cr_expect(s >= t0 + 1000 && s <= t1 + 1000, "%lld", (long long)s);
    pl_run_info *info = info_of(e, "dl1");
    cr_expect_eq(info->deadline_ms, t0 + hour);
    pl_run_info_free(info);
    pl_outcome_free(o);
    /* the relative one is earlier */
    t0 = now_ms();
    o = start_with_deadline(e, "dl_root", "{}", "dl2", t0 + 2 * hour, hour);
    t1 = now_ms();
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    int64_t d = member(o, "root");
    cr_expect(d >= t0 + hour && d <= t1 + hour, "%lld", (long long)d);
    cr_expect_eq(member(o, "leaf"), d);
    pl_outcome_free(o);
    info = info_of(e, "dl2");
    cr_expect_eq(info->deadline_ms, d);
    pl_run_info_free(info);
    /* replayed: the same deadlines, or it would diverge */
    cr_assert_eq(pl_run_continue(&o, e, "dl2", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(member(o, "root"), d);
    pl_outcome_free(o);
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
    /* a deadline past 2^53 ms (it would show as 1969, or inexact in JSON),
     * given or reached from now, by a start or a submit */
    int64_t far[][2] = {
        {INT64_MAX, 0}, {(INT64_C(1) << 53) + 1, 0}, {0, INT64_C(1) << 53}};
    for (int i = 0; i < 6; i++) {
        char *sid = NULL;
        ro.deadline_ms = far[i / 2][0];
        ro.deadline_in_ms = far[i / 2][1];
        cr_expect_eq(i % 2 ? pl_run_submit(&sid, e, &a, &ro)
                           : pl_run_start(&o, e, &a, &ro),
                     PL_EINVAL, "%d", i);
        cr_expect(strstr(pl_errmsg(), "2^53"), "%d: %s", i, pl_errmsg());
        free(sid);
    }
    ro.deadline_ms = 0;
    ro.deadline_in_ms = -1;
    /* version 1 options, without the deadline fields, still work */
    pl_run_options v1 = PL_RUN_OPTIONS_INIT;
    v1.version = 1;
    cr_expect_eq(pl_run_start(&o, e, &a, &v1), PL_OK, "%s", pl_errmsg());
    /* a deadline is the start's and the submit's: a continue given one,
     * which it would not apply, is refused and runs nothing */
    char id[PL_MAX_RUN_ID + 1];
    snprintf(id, sizeof id, "%s", o->run_id);
    pl_outcome_free(o);
    o = NULL;
    ro.deadline_in_ms = 0;
    ro.deadline_ms = now_ms() + 60000;
    cr_expect_eq(pl_run_continue(&o, e, id, &ro), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "deadline"), "%s", pl_errmsg());
    cr_expect_null(o);
    ro.deadline_ms = 0;
    ro.deadline_in_ms = 60000;
    cr_expect_eq(pl_run_continue(&o, e, id, &ro), PL_EINVAL);
    cr_expect_eq(t_calls.echo, 1, "a refused continue replayed the run");
    pl_engine_close(e);
    pl_registry_free(reg);
}
