/*
 * test_time_races.c -- durable timers, events and cancellation under
 * workers and races: a worker wakes every sleeping run once, a timeout
 * racing a signal and a cancel racing completion each end one way only;
 * and the edges: a call of a fan-out cannot wait, a sleep until a time
 * gone goes on at once, a fan-out cancelled while its calls run, a wait
 * after the cancellation.  test_time.c has the rest; what they share is in
 * support_time.c.
 *
 * Runs on LMDB and, as pg_test_time_races, on PostgreSQL.  No test
 * asserts a duration.
 */
#include "support_time.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Workers                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct worker_arg {
    pl_engine *e;
    int st;
    uint64_t completed, suspended, failed, skipped; /* its counters */
} worker_arg;

static void *worker_main(void *arg)
{
    worker_arg *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = 3;
    o.poll_ms = 10;
    o.completed = &w->completed;
    o.suspended = &w->suspended;
    o.failed = &w->failed;
    o.skipped = &w->skipped;
    w->st = pl_worker_run(w->e, &o);
    return NULL;
}

Test(time, a_worker_wakes_every_sleeping_run_once, .timeout = 300)
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
    worker_arg w = {.e = e};
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

/* Cancel run r->id once its last step is a wait (durable before a wait in
 * place waits). */
static void *cancel_at_wait(void *arg)
{
    racer *r = arg;
    for (bool waits = false; !waits; nap_ms(1)) {
        pl_steps *l = NULL;
        if (pl_run_ledger(&l, r->e, r->id, "0") == PL_OK && pl_steps_count(l))
            waits = pl_step_type_of(pl_steps_at(l, pl_steps_count(l) - 1)) ==
                    PL_STEP_WAIT;
        pl_steps_free(l);
    }
    r->st = pl_run_cancel(r->e, r->id, "stop");
    return NULL;
}

/* A sleep waiting in place ends at a cancellation, as a parked one does:
 * its wait returns PL_ECANCELLED and the call after it never runs. */
Test(time, a_sleep_in_place_ends_at_a_cancellation)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 3600000), PL_OK);
    racer r = {e, "inplace", 0, 0, false};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, cancel_at_wait, &r), 0);
    pl_outcome *o = t_start(e, "sleeper", "{\"ms\":20000}", "inplace");
    pthread_join(th, NULL);
    cr_expect_eq(r.st, PL_OK, "%s", pl_status_name(r.st));
    cr_expect_eq(o->status, PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(o->status));
    cr_expect_str_eq(o->reason ? o->reason : "", "stop");
    cr_expect_eq(t_calls.add, 0, "the call after the sleep ran");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "inplace"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A compensation that waits (for an event that never comes, or an hour)
 * would park a run its cancellation was to end at once, as `waiting`, and
 * every later cancellation would find it cancelled and leave it there:
 * past its cancellation, a wait returns PL_ECANCELLED at once. */
Test(time, a_wait_after_the_cancellation_ends_at_once)
{
    const char *then[2] = {"wait", "sleep"};
    for (int k = 0; k < 2; k++) {
        pl_registry *reg = registry();
        pl_engine *e = engine_parking(reg);
        char id[32], payload[64];
        snprintf(id, sizeof id, "comp-%s", then[k]);
        snprintf(payload, sizeof payload, "{\"then\":\"%s\"}", then[k]);
        atomic_store(&g_undo, 0);
        atomic_store(&g_comp_wait, 1);
        pl_outcome *o = t_start(e, "undo_waits", payload, id);
        cr_assert_eq(o->status, PL_RUN_WAITING);
        pl_outcome_free(o);
        cr_assert_eq(pl_run_cancel(e, id, "stop"), PL_OK, "%s", pl_errmsg());
        cr_expect_eq(atomic_load(&g_comp_wait), PL_ECANCELLED,
                     "%s: the compensation's wait returned %s", then[k],
                     pl_status_name(atomic_load(&g_comp_wait)));
        cr_expect_eq(status_of(e, id), PL_RUN_CANCELLED, "%s: %s", then[k],
                     pl_run_status_name(status_of(e, id)));
        cr_expect_eq(atomic_load(&g_undo), 1);
        cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
        /* the replay returns the same, executing nothing */
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.check = true;
        cr_assert_eq(pl_run_continue(&o, e, id, &ro), PL_OK, "%s", pl_errmsg());
        cr_expect_eq(o->status, PL_RUN_CANCELLED);
        pl_outcome_free(o);
        cr_expect_eq(atomic_load(&g_undo), 1);
        cr_expect_eq(pl_run_cancel(e, id, "again"), PL_ESTATE);
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

/* "fan": two calls at once of payload.policy ("waiter" when absent), with
 * the payload: a branch cannot wait. */
static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(a->payload, "policy");
    pl_call_spec specs[2] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT};
    pl_action acts[2] = {PL_ACTION_INIT, PL_ACTION_INIT};
    for (int i = 0; i < 2; i++) {
        acts[i].policy = cJSON_IsString(p) ? p->valuestring : "waiter";
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
    /* a sleep, however short (waiting in place is refused too), and a
     * wait in a callee of a branch's callee */
    cr_assert_eq(pl_engine_set_wait_in_place(e, -1), PL_OK);
    o = t_start(e, "fan", "{\"policy\":\"sleeper\",\"ms\":1}", "f2");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect(o->reason && strstr(o->reason, "cannot wait"), "%s", o->reason);
    pl_outcome_free(o);
    o = t_start(e, "fan", "{\"policy\":\"nested\",\"name\":\"n\"}", "f3");
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

/* "cancel_fan": a fan-out of "inflight" (which cancels the run while it
 * runs) and "echo"; then, with payload.after, a second fan-out, else a
 * call of "add"; the call that sees the cancellation compensates with
 * "undo" and hands PL_ECANCELLED on. */
static int cancel_fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    const char *names[2] = {"inflight", "echo"};
    pl_call_spec specs[2] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT};
    pl_action acts[2] = {PL_ACTION_INIT, PL_ACTION_INIT};
    for (int i = 0; i < 2; i++) {
        acts[i].policy = names[i];
        acts[i].payload = pl_json_empty();
        specs[i].action = &acts[i];
    }
    pl_step *res[2] = {NULL, NULL};
    int st = pl_ctx_call_all(res, ctx, specs, 2);
    pl_step_free(res[0]);
    pl_step_free(res[1]);
    if (!st) {
        acts[1].policy = "add";
        if (cJSON_IsTrue(cJSON_GetObjectItem(a->payload, "after")))
            st = pl_ctx_call_all(res, ctx, specs + 1, 1);
        else
            st = pl_ctx_call(res, ctx, &acts[1], NULL, 0);
        cr_expect_null(res[0]);
    }
    if (st == PL_ECANCELLED) {
        if ((st = pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty())))
            return st;
        return PL_ECANCELLED;
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* Time and events: calls already running in a fan-out when the cancel
 * arrives finish, their results recorded, and the fan-out's caller sees
 * the cancellation at its next call, a pl_ctx_call() or a
 * pl_ctx_call_all(), which returns PL_ECANCELLED without executing. */
Test(time, a_fan_out_finishes_and_its_caller_sees_the_cancel_next)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "cancel_fan", cancel_fan, NULL),
                 PL_OK);
    pl_engine *e = engine_parking(reg);
    const char *payloads[2] = {"{}", "{\"after\": true}"};
    const char *ids[2] = {"cf1", "cf2"};
    for (int i = 0; i < 2; i++) {
        pl_outcome *o = t_start(e, "cancel_fan", payloads[i], ids[i]);
        cr_expect_eq(o->status, PL_RUN_CANCELLED, "%s: %s", ids[i],
                     pl_run_status_name(o->status));
        cr_expect_str_eq(o->reason, "customer asked");
        pl_outcome_free(o);
        cr_expect_eq(g_inflight, i + 1, "the call in flight finished");
        cr_expect_eq(t_calls.echo, i + 1, "the other call finished");
        cr_expect_eq(t_calls.add, 0, "the call after the fan-out never ran");
        cr_expect_eq(g_undo, i + 1, "compensated once");
        pl_steps *l = NULL;
        cr_assert_eq(pl_run_ledger(&l, e, ids[i], "0"), PL_OK);
        /* the fan-out's calls and results, the cancel, undo's call and
         * result */
        cr_assert_eq(pl_steps_count(l), 7);
        for (size_t k = 0; k < 4; k++)
            cr_expect_eq(pl_step_type_of(pl_steps_at(l, k)),
                         k < 2 ? PL_STEP_ACTION_CALL : PL_STEP_ACTION_RESULT);
        cr_expect_eq(pl_step_type_of(pl_steps_at(l, 4)), PL_STEP_CANCEL);
        pl_steps_free(l);
        cr_expect_eq(pl_run_verify(e, ids[i]), PL_OK, "%s", pl_errmsg());
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Start run @p id of "waiter" (for event "n"), parked. */
static void park_waiter(pl_engine *e, const char *id)
{
    pl_outcome *o = t_start(e, "waiter", "{\"name\":\"n\"}", id);
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
}

/*
 * A process whose registry lacks a waiting run's root policy delivers to
 * it but cannot continue it: its signal with an outcome wanted still
 * returns PL_OK (the event is delivered, *out NULL), and its
 * pl_engine_wake() leaves the runs' timers to a process that has the
 * policy, which continues them: the event taken, the cancellation
 * compensated.
 */
Test(time, a_process_without_the_policy_leaves_the_run_to_one_with_it)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    park_waiter(e, "f1");
    park_waiter(e, "f2");
    pl_engine_close(e);

    pl_registry *other = t_registry(); /* no "waiter" */
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.lease_ms = 100;
    cr_assert_eq(pl_engine_open(&e, path, other, &eo), PL_OK, "%s",
                 pl_errmsg());
    cJSON *p = t_json("{\"v\":1}");
    pl_outcome *o = (pl_outcome *)&eo; /* set to NULL by the call */
    int st = pl_run_signal(&o, e, "f1", "n", p);
    cr_expect_eq(st, PL_OK, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect_null(o);
    cJSON_Delete(p);
    cr_assert_eq(pl_run_cancel(e, "f2", "elsewhere"), PL_OK, "%s", pl_errmsg());
    int64_t next = 0;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "f1"), PL_RUN_WAITING);
    cr_expect_eq(status_of(e, "f2"), PL_RUN_WAITING);
    pl_engine_close(e);
    pl_registry_free(other);

    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    wake_until_done(e, "f1");
    wake_until_done(e, "f2");
    cr_assert_eq(pl_run_continue(&o, e, "f1", NULL), PL_OK, "%s", pl_errmsg());
    char *r = t_text(result_of(o));
    cr_expect_str_eq(r, "{\"got\":[{\"v\":1}]}");
    free(r);
    pl_outcome_free(o);
    pl_run_info *info = info_of(e, "f2");
    cr_expect_eq(info->status, PL_RUN_CANCELLED);
    cr_expect_str_eq(info->reason, "elsewhere");
    pl_run_info_free(info);
    cr_expect_eq(g_undo, 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* "extra": completes; registered only where its run is submitted. */
static int extra(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)a;
    (void)u;
    return pl_steps_add_resultf(out, "{}");
}

static void submit(pl_engine *e, const char *policy, const char *id)
{
    pl_action a = {PL_ACTION_VERSION, policy, NULL, NULL, 0, NULL};
    cJSON *p = t_json("{\"name\":\"n\"}");
    a.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

/* The worker's counters (time.h): an execution that completed, one that
 * parked (suspended or waiting), one that failed and one that ended
 * cancelled (failed), and a run taken but not executable here (skipped). */
Test(time, the_worker_counts_each_end)
{
    const char *path = t_store_path();
    pl_registry *full = registry();
    cr_assert_eq(pl_registry_add_fn(full, "extra", extra, NULL), PL_OK);
    pl_engine *e = t_engine(path, full, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    park_waiter(e, "cw");
    submit(e, "extra", "u"); /* first in the queue */
    submit(e, "echo", "ok");
    submit(e, "fail", "bad");
    submit(e, "waiter", "wt");
    pl_engine_close(e);
    pl_registry *plain = t_registry(); /* no "waiter": a delivery alone */
    e = t_engine(path, plain, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_cancel(e, "cw", "stop"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(plain);
    pl_registry *reg = registry(); /* no "extra" */
    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    worker_arg c = {.e = e};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, worker_main, &c), 0);
    const char *ids[] = {"ok", "bad", "wt", "cw"};
    const pl_run_status want[] = {PL_RUN_COMPLETED, PL_RUN_FAILED,
                                  PL_RUN_WAITING, PL_RUN_CANCELLED};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 12000 && status_of(e, ids[i]) != want[i]; k++)
            nap_ms(5);
    pl_worker_stop(e);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(c.st, PL_OK, "%s", pl_errmsg());
    for (int i = 0; i < 4; i++)
        cr_expect_eq(status_of(e, ids[i]), want[i], "%s", ids[i]);
    cr_expect_eq(status_of(e, "u"), PL_RUN_SUBMITTED);
    cr_expect_eq(c.completed, 1);
    cr_expect_eq(c.suspended, 1);
    cr_expect_eq(c.failed, 2);
    cr_expect_eq(c.skipped, 1);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_registry_free(full);
}
