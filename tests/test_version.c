/*
 * test_version.c -- pl_ctx_version() (core/replay/version.c): a new run
 * records the newest version, a replay takes what its run recorded (or
 * the default where the run predates the change), and a version the code
 * no longer supports fails the run at once with PL_ECODEVERSION; one that
 * newer code recorded is left as it was for that code (PL_ENEWERCODE),
 * by pl_run_continue() and by a worker (a rolling deploy).  On both stores
 * (pg_test_version).
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The code the "flow" policy stands for: 0 = before the change (no version
 * point); else a point "pay-v2" with these bounds, and "b" before it when
 * g_two. */
static int g_code, g_min, g_max = 1;
static bool g_two, g_suspend, g_suspend_late;
/* after the point, when the run's payload says "late": "sleep", a sleep
 * (500 ms: long enough to park on a loaded host);
 * "wait", a wait for event "go", whose payload's "x" the result carries */

static int flow(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *late = cJSON_GetObjectItemCaseSensitive(a->payload, "late");
    const char *lt = cJSON_IsString(late) ? late->valuestring : "";
    cJSON *r = NULL;
    int st = pl_ctx_invokef(&r, ctx, "echo", "{s:i}", "step", 1);
    cJSON_Delete(r);
    if (st)
        return st;
    if (g_suspend) {
        cJSON *answer = NULL, *prompt = t_json("{\"q\": \"go on?\"}");
        st = pl_ctx_suspend(&answer, ctx, prompt);
        cJSON_Delete(prompt);
        cJSON_Delete(answer);
        if (st)
            return st;
    }
    int vb = PL_VERSION_DEFAULT, v = PL_VERSION_DEFAULT;
    if (g_code && g_two && (st = pl_ctx_version(&vb, ctx, "b", 0, 3)))
        return st;
    if (g_code && (st = pl_ctx_version(&v, ctx, "pay-v2", g_min, g_max)))
        return st;
    if (g_suspend_late) {
        cJSON *answer = NULL, *prompt = t_json("{\"q\": \"ship?\"}");
        st = pl_ctx_suspend(&answer, ctx, prompt);
        cJSON_Delete(prompt);
        cJSON_Delete(answer);
        if (st)
            return st;
    }
    if (!strcmp(lt, "sleep") && (st = pl_ctx_sleep(ctx, 500)))
        return st;
    int x = 0;
    if (!strcmp(lt, "wait")) {
        cJSON *ev = NULL;
        if ((st = pl_ctx_wait_event(&ev, ctx, "go", PL_WAIT_FOREVER)))
            return st;
        const cJSON *xv = cJSON_GetObjectItemCaseSensitive(ev, "x");
        x = cJSON_IsNumber(xv) ? xv->valueint : -1;
        cJSON_Delete(ev);
    }
    st = pl_ctx_invokef(&r, ctx, "echo", "{s:i}", "v", v);
    cJSON_Delete(r);
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:i, s:i, s:i}", "v", v, "b", vb, "x",
                                x);
}

/* A policy that checks the argument rules. */
static int bad_args(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int v = 7, n = 0;
    n += pl_ctx_version(NULL, ctx, "x", 0, 1) == PL_EINVAL;
    n += pl_ctx_version(&v, NULL, "x", 0, 1) == PL_EINVAL && v == 0;
    v = 7;
    n += pl_ctx_version(&v, ctx, NULL, 0, 1) == PL_EINVAL && v == 0;
    n += pl_ctx_version(&v, ctx, "", 0, 1) == PL_EINVAL;
    n += pl_ctx_version(&v, ctx, "bad\nid", 0, 1) == PL_EINVAL;
    n += pl_ctx_version(&v, ctx, "x", 2, 1) == PL_EINVAL;
    n += pl_ctx_version(&v, ctx, "x", -1, 1) == PL_EINVAL;
    n += pl_ctx_version(&v, ctx, "x", 0, 0) == PL_EINVAL;
    /* nothing was recorded by any of them, and the run goes on */
    int st = pl_ctx_version(&v, ctx, "x", 0, 2);
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:i, s:i}", "refused", n, "v", v);
}

typedef struct seen {
    int versions, diverged, recorded, defaulted, newer, completed;
    int last_version;
    char change[64];
} seen;

/* A worker under test stops when it has met a run newer code recorded
 * twice (g_stop_on == 1), or has completed g_stop_on - 1 runs (2 and up). */
static pl_engine *g_engine;
static int g_stop_on;

static void on_event(const pl_event *ev, void *user)
{
    seen *s = user;
    if (ev->kind == PL_EVENT_DIVERGED)
        s->diverged++;
    if (ev->kind == PL_EVENT_RUN_COMPLETED && ++s->completed && g_stop_on > 1 &&
        s->completed == g_stop_on - 1)
        pl_worker_stop(g_engine);
    if (ev->kind != PL_EVENT_VERSION)
        return;
    if (ev->status == PL_ENEWERCODE && ++s->newer == 2 && g_stop_on == 1)
        pl_worker_stop(g_engine);
    s->versions++;
    s->last_version = ev->version;
    if (ev->step_type == PL_STEP_SIDE_EFFECT)
        s->recorded++;
    else
        s->defaulted++;
    snprintf(s->change, sizeof s->change, "%s", ev->detail ? ev->detail : "");
}

static pl_registry *g_reg;
static unsigned g_lease_ms; /* 0: the default */

static pl_engine *open_engine(seen *s)
{
    g_reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(g_reg, "flow", flow, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(g_reg, "bad_args", bad_args, NULL), PL_OK);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.lease_ms = g_lease_ms;
    o.on_event = on_event;
    o.event_user = s;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), g_reg, &o), PL_OK, "%s",
                 pl_errmsg());
    g_engine = e;
    return e;
}

static void close_engine(pl_engine *e)
{
    pl_engine_close(e);
    pl_registry_free(g_reg);
    g_code = 0;
    g_min = 0;
    g_max = 1;
    g_two = g_suspend = g_suspend_late = false;
    g_lease_ms = 0;
}

static int result_int(const pl_outcome *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), k);
    cr_assert(cJSON_IsNumber(v), "no %s in the result", k);
    return v->valueint;
}

Test(version, a_new_run_records_the_newest_and_replays_it)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    g_code = 1;
    g_max = 3;
    pl_outcome *o = t_start(e, "flow", "{}", "new");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(result_int(o, "v"), 3);
    cr_expect_eq(s.recorded, 1);
    cr_expect_eq(s.last_version, 3);
    cr_expect_str_eq(s.change, "pay-v2");
    pl_outcome_free(o);

    /* the marker is a side_effect step of the root, between the calls */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "new", "0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 6); /* 2 calls, marker, result */
    const pl_step *m = pl_steps_at(l, 2);
    cr_expect_eq(pl_step_type_of(m), PL_STEP_SIDE_EFFECT);
    cr_expect_str_eq(pl_step_actor(m), "flow");
    char *text = t_text(pl_step_payload(m));
    cr_expect_str_eq(text, "{\"name\":\"version\",\"change\":\"pay-v2\","
                           "\"version\":3}");
    free(text);
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "new"), PL_OK, "%s", pl_errmsg());

    /* a replay takes the recorded version, even under code that now knows
     * a newer one */
    g_max = 4;
    memset(&s, 0, sizeof s);
    cr_assert_eq(pl_run_continue(&o, e, "new", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(result_int(o, "v"), 3);
    cr_expect_eq(o->steps_appended, 0);
    cr_expect_eq(s.recorded, 1);
    cr_expect_eq(s.last_version, 3);
    cr_expect_eq(s.diverged, 0);
    pl_outcome_free(o);
    close_engine(e);
}

Test(version, a_run_recorded_before_the_change_takes_the_default)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    pl_outcome *o = t_start(e, "flow", "{}", "old");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(result_int(o, "v"), PL_VERSION_DEFAULT);
    pl_outcome_free(o);

    /* the new code replays it on its old branch, consuming nothing */
    g_code = 1;
    cr_assert_eq(pl_run_continue(&o, e, "old", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(result_int(o, "v"), PL_VERSION_DEFAULT);
    cr_expect_eq(s.defaulted, 1);
    cr_expect_eq(s.recorded, 0);
    cr_expect_eq(s.diverged, 0);
    pl_outcome_free(o);

    /* a check replay too, writing nothing */
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_assert_eq(pl_run_continue(&o, e, "old", &ro), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);

    /* code that dropped the old branch: a clear failure naming the change,
     * at the point, not a divergence further on */
    g_min = 1;
    memset(&s, 0, sizeof s);
    o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "old", &ro), PL_ECODEVERSION);
    cr_expect(strstr(pl_errmsg(), "before change 'pay-v2'") &&
                  strstr(pl_errmsg(), "versions 1 to 1"),
              "%s", pl_errmsg());
    cr_expect_eq(s.diverged, 0);
    cr_expect_null(o);
    close_engine(e);
}

Test(version, a_point_past_the_record_takes_the_newest_and_bounds_hold)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    g_suspend = true;
    pl_outcome *o = t_start(e, "flow", "{}", "waiting");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char token[64];
    snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome_free(o);

    /* resumed under code that supports only version 2: the version point
     * lies past its record, so it records 2 and takes the new branch */
    g_code = 1;
    g_min = 2;
    g_max = 2;
    cJSON *yes = t_json("{\"ok\": true}");
    cr_assert_eq(pl_run_resume(&o, e, "waiting", token, yes), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(yes);
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(result_int(o, "v"), 2);
    cr_expect_eq(s.recorded, 1);
    pl_outcome_free(o);

    /* the run that recorded 2, replayed by code supporting 3..4 only */
    g_min = 3;
    g_max = 4;
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_continue(&o2, e, "waiting", NULL), PL_ECODEVERSION);
    cr_expect(strstr(pl_errmsg(), "change 'pay-v2' was recorded at version 2"),
              "%s", pl_errmsg());
    cr_expect_null(o2);

    /* a version above what the code knows: newer code recorded it */
    g_min = 0;
    g_max = 1;
    cr_assert_eq(pl_run_continue(&o2, e, "waiting", NULL), PL_ENEWERCODE);
    cr_expect(strstr(pl_errmsg(), "recorded at version 2, by newer code; this "
                                  "code supports versions 0 to 1"),
              "%s", pl_errmsg());
    cr_expect_null(o2);
    close_engine(e);
}

/* Start run @p id, which records version g_max of "pay-v2" and then waits
 * for a human; its resume token in @p token. */
static void start_past_the_point(pl_engine *e, const char *id, char *token,
                                 size_t n)
{
    g_code = 1;
    g_suspend_late = true;
    pl_outcome *o = t_start(e, "flow", "{}", id);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason);
    snprintf(token, n, "%s", o->resume_token);
    pl_outcome_free(o);
}

Test(version, a_live_run_is_failed_with_the_change_in_its_reason)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    /* a run that records version 1 and then waits for a human */
    char token[64];
    start_past_the_point(e, "live", token, sizeof token);
    pl_outcome *o = NULL;

    /* answered under code that supports version 2 only */
    g_min = g_max = 2;
    cJSON *yes = t_json("{}");
    cr_assert_eq(pl_run_resume(&o, e, "live", token, yes), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(yes);
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ECODEVERSION);
    cr_expect(strstr(o->reason, "change 'pay-v2' was recorded at version 1"),
              "%s", o->reason);
    pl_outcome_free(o);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "live"), PL_OK);
    cr_expect_eq(info->status, PL_RUN_FAILED);
    cr_expect_eq(info->error, PL_ECODEVERSION);
    cr_expect(strstr(info->reason, "pay-v2"), "%s", info->reason);
    pl_run_info_free(info);
    cr_expect_eq(s.diverged, 0);

    /* code that supports it again finishes the run from its ledger */
    g_min = 0;
    g_max = 2;
    cr_assert_eq(pl_run_continue(&o, e, "live", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(result_int(o, "v"), 1);
    pl_outcome_free(o);
    close_engine(e);
}

Test(version, points_of_two_changes_each_find_their_own)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    g_code = 1;
    pl_outcome *o = t_start(e, "flow", "{}", "one");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* code that adds a point "b" before "pay-v2": the run predates "b" and
     * still finds its "pay-v2" marker at the same position */
    g_two = true;
    memset(&s, 0, sizeof s);
    cr_assert_eq(pl_run_continue(&o, e, "one", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(result_int(o, "b"), PL_VERSION_DEFAULT);
    cr_expect_eq(result_int(o, "v"), 1);
    cr_expect_eq(s.defaulted, 1);
    cr_expect_eq(s.recorded, 1);
    cr_expect_eq(s.diverged, 0);
    pl_outcome_free(o);

    /* a new run records both markers, in order */
    o = t_start(e, "flow", "{}", "two");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(result_int(o, "b"), 3);
    pl_outcome_free(o);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "two", "0"), PL_OK);
    cr_expect_eq(pl_steps_count(l), 7);
    pl_steps_free(l);

    /* code that removed a point whose marker is recorded diverges at the
     * marker: the documented reason to keep the call */
    g_code = 0;
    g_two = false;
    memset(&s, 0, sizeof s);
    o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "two", NULL), PL_ENONDET);
    cr_expect_eq(s.diverged, 1);
    close_engine(e);
}

Test(version, a_check_replay_stops_where_the_record_ends)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    g_suspend = true;
    pl_outcome *o = t_start(e, "flow", "{}", "c");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    g_code = 1;
    g_suspend = false;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    o = NULL;
    /* the suspend step is at the point's position: the run predates it */
    cr_expect_eq(pl_run_continue(&o, e, "c", &ro), PL_ENONDET);
    g_suspend = true;
    cr_expect_eq(pl_run_continue(&o, e, "c", &ro), PL_ECHECK);
    cr_expect_null(o);
    close_engine(e);
}

Test(version, bad_arguments_are_refused_and_record_nothing)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    pl_outcome *o = t_start(e, "bad_args", "{}", "args");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(result_int(o, "refused"), 8);
    cr_expect_eq(result_int(o, "v"), 2);
    cr_expect_eq(s.recorded, 1);
    pl_outcome_free(o);
    int v = 5;
    cr_expect_eq(pl_ctx_version(&v, NULL, "x", 0, 1), PL_EINVAL);
    cr_expect_eq(v, PL_VERSION_DEFAULT);
    cr_expect_str_eq(pl_strerror(PL_ECODEVERSION),
                     "run recorded by a code version this code does not "
                     "support");
    cr_expect_str_eq(pl_status_name(PL_ECODEVERSION), "PL_ECODEVERSION");
    cr_expect_str_eq(pl_strerror(PL_ENEWERCODE),
                     "run recorded by newer code; left for it");
    cr_expect_str_eq(pl_status_name(PL_ENEWERCODE), "PL_ENEWERCODE");
    cr_expect_str_eq(pl_event_kind_name(PL_EVENT_VERSION), "version");
    close_engine(e);
}

/* The run's root ledger, as text, one step a line. */
static char *root_ledger(pl_engine *e, const char *id)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    size_t n = pl_steps_count(l), len = 0;
    char *all = calloc(1, 1);
    cr_assert_not_null(all);
    for (size_t i = 0; i < n; i++) {
        const pl_step *st = pl_steps_at(l, i);
        char *text = t_text(pl_step_payload(st));
        size_t add = strlen(text) + 48;
        all = realloc(all, len + add);
        cr_assert_not_null(all);
        len += (size_t)snprintf(all + len, add, "%s %s\n",
                                pl_step_type_name(pl_step_type_of(st)), text);
        free(text);
    }
    pl_steps_free(l);
    return all;
}

/* A worker of the newer code (version 2) runs until it has completed
 * @p n runs, none failed. */
static void newer_worker_completes(pl_engine *e, seen *s, int n)
{
    uint64_t done = 0, failed = 0;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 5;
    wo.completed = &done;
    wo.failed = &failed;
    g_max = 2;
    g_stop_on = n + 1;
    s->completed = 0;
    cr_assert_eq(pl_worker_run(e, &wo), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(done, (uint64_t)n);
    cr_expect_eq(failed, 0);
}

Test(version, older_code_leaves_a_run_newer_code_recorded)
{
    seen s = {0};
    pl_engine *e = open_engine(&s);
    /* "new" code records version 2, then waits for a human */
    g_max = 2;
    char token[64];
    start_past_the_point(e, "rolling", token, sizeof token);
    pl_outcome *o = NULL;
    char *before = root_ledger(e, "rolling");

    /* "old" code: a check replay says so, writing nothing */
    g_max = 1;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "rolling", &ro), PL_ENEWERCODE);
    cr_expect(strstr(pl_errmsg(), "change 'pay-v2' was recorded at version 2"),
              "%s", pl_errmsg());
    cr_expect_null(o);
    cr_expect_eq(s.newer, 1);

    /* the human answers while old code runs here: the answer is kept, and
     * the run, not failed, goes to the queue for newer code */
    cJSON *yes = t_json("{}");
    cr_assert_eq(pl_run_resume(&o, e, "rolling", token, yes), PL_ENEWERCODE);
    cJSON_Delete(yes);
    cr_expect_null(o);
    pl_run_status now = status_of(e, "rolling");
    cr_expect(now == PL_RUN_RUNNING, "%s", pl_run_status_name(now));
    free(before);
    before = root_ledger(e, "rolling");

    /* continued directly by old code: left as it was */
    cr_expect_eq(pl_run_continue(&o, e, "rolling", NULL), PL_ENEWERCODE);
    cr_expect_null(o);
    cr_expect_eq(status_of(e, "rolling"), PL_RUN_RUNNING);
    char *after = root_ledger(e, "rolling");
    cr_expect_str_eq(after, before);
    free(after);

    /* an old worker takes it from the queue and hands it back, not
     * failed; it comes back to it once its hold has run out (no newer
     * worker took it meanwhile): the run is never lost */
    uint64_t done = 0, skipped = 0, failed = 0;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 5;
    wo.completed = &done;
    wo.skipped = &skipped;
    wo.failed = &failed;
    g_stop_on = 1;
    s.newer = 0;
    cr_assert_eq(pl_worker_run(e, &wo), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(s.newer, 2);
    cr_expect_eq(done, 0);
    cr_expect_eq(failed, 0);
    cr_expect_eq(skipped, 2);
    now = status_of(e, "rolling");
    cr_expect(now == PL_RUN_RUNNING, "%s", pl_run_status_name(now));
    after = root_ledger(e, "rolling");
    cr_expect_str_eq(after, before);
    free(after);
    free(before);

    /* a new worker takes it and completes it on the version it recorded */
    newer_worker_completes(e, &s, 1);
    cr_expect_eq(status_of(e, "rolling"), PL_RUN_COMPLETED);
    cr_assert_eq(pl_run_continue(&o, e, "rolling", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(result_int(o, "v"), 2);
    pl_outcome_free(o);
    cr_expect_eq(s.diverged, 0);
    g_stop_on = 0;
    close_engine(e);
}

/* A run newer code recorded, parked on a timer and on an event: older
 * code's wake and signal leave it as it was (not failed, nothing
 * recorded, the event kept), and hand it back at once: newer code
 * completes it without waiting for a lease to run out (an hour here: a
 * run kept leased would hang the test), here by its pl_engine_wake()
 * alone (a worker's take of such a run: the test above). */
Test(version, a_wake_or_a_signal_meeting_older_code_waits_for_newer)
{
    seen s = {0};
    g_lease_ms = 3600000;
    pl_engine *e = open_engine(&s);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    g_code = 1;
    g_max = 2;
    pl_outcome *o = t_start(e, "flow", "{\"late\": \"sleep\"}", "sleeper");
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s", o->reason);
    pl_outcome_free(o);
    o = t_start(e, "flow", "{\"late\": \"wait\"}", "listener");
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s", o->reason);
    pl_outcome_free(o);
    char *sleeper = root_ledger(e, "sleeper");
    char *listener = root_ledger(e, "listener");

    /* older code: the sleeper's timer comes due and is woken */
    g_max = 1;
    s.newer = 0;
    int64_t next = 0;
    for (int i = 0; i < 5000 && !s.newer; i++) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    }
    cr_expect_geq(s.newer, 1);
    pl_run_status now = status_of(e, "sleeper");
    cr_expect(now == PL_RUN_WAITING || now == PL_RUN_RUNNING, "%s",
              pl_run_status_name(now));
    char *after = root_ledger(e, "sleeper");
    cr_expect_str_eq(after, sleeper);
    free(after);

    /* older code: the event is sent and delivered; the run is left */
    cJSON *go = t_json("{\"x\": 7}");
    o = NULL;
    int st = pl_run_signal(&o, e, "listener", "go", go);
    cJSON_Delete(go);
    cr_expect(st == PL_OK || st == PL_ENEWERCODE, "%s: %s", pl_status_name(st),
              pl_errmsg());
    cr_expect_null(o);
    now = status_of(e, "listener");
    cr_expect(now == PL_RUN_WAITING || now == PL_RUN_RUNNING, "%s",
              pl_run_status_name(now));
    after = root_ledger(e, "listener");
    cr_expect_str_eq(after, listener);
    free(after);
    free(sleeper);
    free(listener);

    /* newer code, even without workers: its wake finds both due (the
     * sleeper's timer again within a second, the listener's at its
     * event) and completes them, the event consumed once */
    g_max = 2;
    for (int i = 0; i < 3000 && (status_of(e, "sleeper") != PL_RUN_COMPLETED ||
                                 status_of(e, "listener") != PL_RUN_COMPLETED);
         i++) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    }
    cr_expect_eq(status_of(e, "sleeper"), PL_RUN_COMPLETED);
    cr_expect_eq(status_of(e, "listener"), PL_RUN_COMPLETED);
    cr_assert_eq(pl_run_continue(&o, e, "listener", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(result_int(o, "v"), 2);
    cr_expect_eq(result_int(o, "x"), 7);
    pl_outcome_free(o);
    cr_expect_eq(s.diverged, 0);
    g_stop_on = 0;
    close_engine(e);
}
