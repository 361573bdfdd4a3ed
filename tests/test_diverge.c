/*
 * test_diverge.c -- a replay that differs from its ledger, as events
 * (core/replay/diverge.c): PL_EVENT_DIVERGED and PL_EVENT_CODE_CHANGED carry a
 * pl_replay_diff with both steps and both code identities.  Also the
 * resume token in a suspended run's record (pl_run_info.resume_token).
 *
 * The policies change behaviour with a global "variant", standing in for a
 * new build; their code identities come from the registry, so a test
 * registers the "new code" under other code_versions.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int variant; /* 0: as recorded; else the changed code */

/* What a listener saw, copied out of the events. */
typedef struct seen {
    int diverged, code_changed;
    char step_id[64], path[64];
    uint32_t seq;
    pl_step_type rec_type, new_type;
    char rec_actor[64], new_actor[64];
    char rec_payload[512], new_payload[512];
    char rec_code[128], new_code[128];
    char cc_rec[128], cc_new[128], cc_step[64];
} seen;

static void copy(char *dst, size_t n, const char *s)
{
    snprintf(dst, n, "%s", s ? s : "(null)");
}

static void on_event(const pl_event *ev, void *user)
{
    seen *s = user;
    const pl_replay_diff *d = ev->diff;
    if (ev->kind == PL_EVENT_DIVERGED) {
        cr_assert_not_null(d);
        s->diverged++;
        copy(s->step_id, sizeof s->step_id, d->step_id);
        copy(s->path, sizeof s->path, ev->path);
        s->seq = ev->seq;
        s->rec_type = d->recorded_type;
        s->new_type = d->new_type;
        copy(s->rec_actor, sizeof s->rec_actor, d->recorded_actor);
        copy(s->new_actor, sizeof s->new_actor, d->new_actor);
        copy(s->rec_payload, sizeof s->rec_payload, d->recorded_payload);
        copy(s->new_payload, sizeof s->new_payload, d->new_payload);
        copy(s->rec_code, sizeof s->rec_code, d->recorded_code);
        copy(s->new_code, sizeof s->new_code, d->new_code);
    } else if (ev->kind == PL_EVENT_CODE_CHANGED) {
        cr_assert_not_null(d);
        cr_assert_not_null(ev->detail);
        s->code_changed++;
        copy(s->cc_rec, sizeof s->cc_rec, d->recorded_code);
        copy(s->cc_new, sizeof s->cc_new, d->new_code);
        copy(s->cc_step, sizeof s->cc_step, d->step_id);
    } else {
        cr_assert_null(d, "event %s carries a diff",
                       pl_event_kind_name(ev->kind));
    }
}

/* root: calls "add" with a variant-dependent payload, then says "done". */
static int root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = pl_ctx_invokef(NULL, ctx, "add", "{s:i, s:i}", "a", 1, "b",
                            variant == 1 ? 5 : 2);
    if (!st && variant != 4) /* variant 4 ends before its text */
        st = pl_steps_add_text(out, NULL, variant == 2 ? "changed" : "done");
    return st;
}

static int seven(cJSON **out, void *user)
{
    (void)user;
    *out = cJSON_CreateNumber(7);
    return *out ? PL_OK : PL_ENOMEM;
}

/* inner: records a side effect (durable at once), then fails its first
 * try; under variant 3 it asks for another side effect. */
static int inner(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, variant == 3 ? "second" : "first",
                                seven, NULL);
    cJSON_Delete(v);
    if (st)
        return st;
    if (variant == 0)
        return PL_EPOLICY;
    return pl_steps_add_resultf(out, "{s:b}", "ok", 1);
}

static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, "inner", pl_json_empty());
    if (!st)
        st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* fan: calls "add" twice at once; variant 5 once, variant 6 three times. */
static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    size_t n = variant == 5 ? 1 : variant == 6 ? 3 : 2;
    cJSON *p[3];
    pl_action act[3];
    pl_call_spec specs[3];
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(pl_json_pack(&p[i], "{s:i, s:i}", "a", (int)i, "b", 10),
                     PL_OK);
        act[i] = (pl_action)PL_ACTION_INIT;
        act[i].policy = "add";
        act[i].payload = p[i];
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &act[i];
    }
    int st = pl_ctx_call_all(NULL, ctx, specs, n);
    for (size_t i = 0; i < n; i++)
        cJSON_Delete(p[i]);
    if (!st)
        st = pl_steps_add_text(out, NULL, "joined");
    return st;
}

static pl_registry *registry(const char *code)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    const char *names[] = {"root", "inner", "outer", "fan", "add"};
    pl_policy_fn fns[] = {root, inner, outer, fan, NULL};
    for (size_t i = 0; i < 4; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = names[i];
        d.fn = fns[i];
        d.code_version = code;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    }
    /* "add" from the shared test registry, under this code */
    pl_registry *t = t_registry();
    pl_policy_def d = *pl_registry_find(t, "add");
    d.code_version = code;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    pl_registry_free(t);
    return reg;
}

static pl_engine *engine(const char *path, const pl_registry *reg, seen *s)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = on_event;
    o.event_user = s;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

/* Record run @p id of @p policy under code "v1". */
static void record(const char *path, const char *policy, const char *id)
{
    seen s = {0};
    pl_registry *reg = registry("v1");
    pl_engine *e = engine(path, reg, &s);
    pl_outcome *o = t_start(e, policy, "{}", id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(s.diverged, 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Continue (or check) run @p id under code @p code; return the status. */
static int continue_under(const char *path, const char *code, const char *id,
                          bool check, seen *s)
{
    pl_registry *reg = registry(code);
    pl_engine *e = engine(path, reg, s);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = check;
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, id, &ro);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    return st;
}

/* Check run @p id under code @p code; return the check's status. */
static int check_under(const char *path, const char *code, const char *id,
                       seen *s)
{
    return continue_under(path, code, id, true, s);
}

Test(diverge, a_changed_call_names_both_steps_and_both_codes)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    variant = 1;
    seen s = {0};
    cr_assert_eq(check_under(path, "v2", "r", &s), PL_ENONDET);
    cr_assert_eq(s.diverged, 1);
    cr_assert_str_eq(s.step_id, "0:0");
    cr_assert_str_eq(s.path, "0");
    cr_assert_eq(s.seq, 0);
    cr_assert_eq(s.rec_type, PL_STEP_ACTION_CALL);
    cr_assert_eq(s.new_type, PL_STEP_ACTION_CALL);
    cr_assert_str_eq(s.rec_actor, "root");
    cr_assert_str_eq(s.new_actor, "root");
    cr_assert_str_eq(s.rec_payload,
                     "{\"policy\":\"add\",\"payload\":{\"a\":1,\"b\":2}}");
    cr_assert_str_eq(s.new_payload,
                     "{\"policy\":\"add\",\"payload\":{\"a\":1,\"b\":5}}");
    cr_assert_str_eq(s.rec_code, "v1"); /* the call's callee, as recorded */
    cr_assert_str_eq(s.new_code, "v2");
    t_cleanup();
}

Test(diverge, a_changed_root_step_names_the_root_code_from_the_run_record)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    variant = 2;
    seen s = {0};
    cr_assert_eq(check_under(path, "v2", "r", &s), PL_ENONDET);
    cr_assert_eq(s.diverged, 1);
    cr_assert_eq(s.code_changed, 1); /* the call to add replayed the same */
    cr_assert_str_eq(s.cc_step, "0:0");
    cr_assert_str_eq(s.cc_rec, "v1");
    cr_assert_str_eq(s.cc_new, "v2");
    cr_assert_str_eq(s.step_id, "0:2");
    cr_assert_eq(s.rec_type, PL_STEP_TEXT);
    cr_assert_str_eq(s.rec_payload, "{\"text\":\"done\"}");
    cr_assert_str_eq(s.new_payload, "{\"text\":\"changed\"}");
    cr_assert_str_eq(s.rec_code, "v1"); /* "code" in the run's record */
    cr_assert_str_eq(s.new_code, "v2");
    t_cleanup();
}

Test(diverge, a_changed_callee_step_names_the_code_its_caller_recorded)
{
    const char *path = t_store_path();
    pl_registry *reg = registry("v1");
    seen s = {0};
    pl_engine *e = engine(path, reg, &s);
    pl_outcome *o = t_start(e, "outer", "{}", "r");
    cr_assert_eq(o->status, PL_RUN_FAILED); /* inner's side effect stays */
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);

    /* retried under new code, inner replays its own ledger and differs */
    variant = 3;
    reg = registry("v2");
    e = engine(path, reg, &s);
    cr_assert_eq(pl_run_continue(&o, e, "r", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_assert_eq(o->error, PL_ENONDET);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_assert_eq(s.diverged, 1);
    cr_assert_str_eq(s.step_id, "0.0:0");
    cr_assert_str_eq(s.path, "0.0");
    cr_assert_eq(s.rec_type, PL_STEP_SIDE_EFFECT);
    cr_assert_eq(s.new_type, PL_STEP_SIDE_EFFECT);
    cr_assert_str_eq(s.rec_actor, "inner");
    cr_assert_str_eq(s.new_actor, "inner");
    cr_assert_str_eq(s.rec_payload, "{\"name\":\"first\",\"value\":7}");
    cr_assert_str_eq(s.new_payload, "(null)"); /* the engine's own ask */
    cr_assert_str_eq(s.rec_code, "v1"); /* outer's action_call names it */
    cr_assert_str_eq(s.new_code, "v2");
    t_cleanup();
}

Test(diverge, a_policy_that_ends_early_has_no_new_step)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    variant = 4;
    seen s = {0};
    cr_assert_eq(check_under(path, "v1", "r", &s), PL_ENONDET);
    cr_assert_eq(s.diverged, 1);
    cr_assert_str_eq(s.step_id, "0:2");
    cr_assert_eq(s.rec_type, PL_STEP_TEXT);
    cr_assert_eq(s.new_type, 0);
    cr_assert_str_eq(s.new_actor, "(null)");
    cr_assert_str_eq(s.rec_code, "v1");
    cr_assert_eq(s.code_changed, 0); /* same code */
    t_cleanup();
}

/* Determinism rules: a policy that now makes fewer calls at once than it
 * recorded diverges where its result would go, and the message names the
 * position and both steps, with the code behind each, as for any other
 * divergence, continued or checked. */
Test(diverge, a_fanout_with_fewer_calls_names_both_steps_and_codes)
{
    const char *path = t_store_path();
    record(path, "fan", "f");
    variant = 5;
    for (int check = 0; check < 2; check++) {
        seen s = {0};
        /* a completed run: continued too, it returns the divergence */
        int st = continue_under(path, "v2", "f", check, &s);
        const char *msg = pl_errmsg();
        cr_assert_eq(st, PL_ENONDET, "%s", msg);
        cr_expect_eq(s.diverged, 1);
        cr_expect_str_eq(s.step_id, "0:1");
        cr_expect(strstr(msg, "run f, invocation 0, step 1 (id 0:1)"), "%s",
                  msg);
        cr_expect(strstr(msg, "action_call by 'fan' "
                              "{\"policy\":\"add\",\"payload\":{\"a\":1,"
                              "\"b\":10}} (code v1)"),
                  "%s", msg);
        cr_expect(strstr(msg, "now appends action_result by 'add' (the "
                              "result of the action_call at 0:0) (code v2)"),
                  "%s", msg);
    }
    t_cleanup();
}

/* ... and one that now makes more calls diverges at its first extra call. */
Test(diverge, a_fanout_with_more_calls_names_both_steps_and_codes)
{
    const char *path = t_store_path();
    record(path, "fan", "f");
    variant = 6;
    seen s = {0};
    cr_assert_eq(check_under(path, "v2", "f", &s), PL_ENONDET, "%s",
                 pl_errmsg());
    cr_expect_str_eq(s.step_id, "0:2");
    cr_expect(strstr(pl_errmsg(), "step 2 (id 0:2): the ledger records "
                                  "action_result by 'add'"),
              "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "(code v2)"), "%s", pl_errmsg());
    t_cleanup();
}

Test(diverge, unchanged_code_replays_without_either_event)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    seen s = {0};
    cr_assert_eq(check_under(path, "v1", "r", &s), PL_OK);
    cr_assert_eq(s.diverged, 0);
    cr_assert_eq(s.code_changed, 0);
    t_cleanup();
}

/* The message of a divergence at a step the policy appends itself (not a
 * call), or at its end, names the code behind each side as a call's does:
 * the recorded invocation's and the one loaded now. */
Test(diverge, a_changed_or_missing_own_step_names_both_codes_in_its_message)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    for (int v = 2; v <= 4; v += 2) { /* 2: another text; 4: no text */
        variant = v;
        seen s = {0};
        cr_assert_eq(check_under(path, "v2", "r", &s), PL_ENONDET);
        const char *msg = pl_errmsg();
        cr_expect(strstr(msg, "run r, invocation 0, step 2 (id 0:2)"), "%s",
                  msg);
        cr_expect(strstr(msg, "text by 'root' {\"text\":\"done\"} (code v1)"),
                  "%s", msg);
        cr_expect(strstr(msg, v == 2 ? "{\"text\":\"changed\"} (code v2)"
                                     : "the policy now ends there (code v2)"),
                  "%s", msg);
    }
    t_cleanup();
}

Test(diverge, without_a_listener_the_message_still_names_both_codes)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    variant = 1;
    pl_registry *reg = registry("v2");
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "r", &ro), PL_ENONDET);
    cr_assert_null(o);
    cr_assert(strstr(pl_errmsg(), "code v1") && strstr(pl_errmsg(), "code v2"),
              "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

/* Deploying changes: "A failed run that fails again returns the status
 * that failed it" from a check, which writes nothing: "inner" as the root
 * replays its side effect and fails again.  "outer" failed inside its
 * call to "inner", which has no result: the check would execute it, so
 * PL_ECHECK. */
Test(diverge, a_check_of_a_run_that_fails_again_returns_its_failure)
{
    const char *path = t_store_path();
    seen s = {0};
    pl_registry *reg = registry("v1");
    pl_engine *e = engine(path, reg, &s);
    const char *roots[2] = {"inner", "outer"};
    for (int i = 0; i < 2; i++) {
        pl_outcome *o = t_start(e, roots[i], "{}", roots[i]);
        cr_assert_eq(o->status, PL_RUN_FAILED);
        cr_assert_eq(o->error, PL_EPOLICY, "%s", o->reason);
        pl_outcome_free(o);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_expect_eq(check_under(path, "v2", "inner", &s), PL_EPOLICY, "%s",
                 pl_errmsg());
    cr_expect_eq(check_under(path, "v2", "outer", &s), PL_ECHECK, "%s",
                 pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "replay would execute it"), "%s",
              pl_errmsg());
    cr_expect_eq(s.diverged, 0);
    reg = registry("v1");
    e = engine(path, reg, &s);
    for (int i = 0; i < 2; i++) {
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, roots[i]), PL_OK);
        cr_expect_eq(ri->status, PL_RUN_FAILED);
        cr_expect_eq(ri->attempts, 1, "the check wrote nothing");
        pl_run_info_free(ri);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

/* Deploying changes: "A removed root policy makes its runs PL_ENOTFOUND"
 * (continued or checked), and leaves them as they were. */
Test(diverge, a_removed_root_policy_is_enotfound)
{
    const char *path = t_store_path();
    record(path, "root", "r");
    pl_registry *reg = t_registry(); /* "add", but no "root" */
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "r", NULL), PL_ENOTFOUND);
    cr_expect(strstr(pl_errmsg(), "root"), "%s", pl_errmsg());
    cr_expect_null(o);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_expect_eq(pl_run_continue(&o, e, "r", &ro), PL_ENOTFOUND);
    cr_expect_null(o);
    cr_expect_eq(status_of(e, "r"), PL_RUN_COMPLETED);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

/* "asks": calls "add", then "human" (it suspends), and returns the
 * second call's result, an error result too. */
static int asks(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    int st = pl_ctx_invokef(NULL, ctx, "add", "{s:i, s:i}", "a", 1, "b", 2);
    pl_action call = PL_ACTION_INIT;
    call.policy = "human";
    call.payload = pl_json_empty();
    pl_step *r = NULL;
    if (!st)
        st = pl_ctx_call(&r, ctx, &call, NULL, 0);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(r));
    pl_step_free(r);
    return st;
}

/* Deploying changes: "A removed callee is not needed where its results
 * are recorded, but a call to it that still has to run (one that a run
 * was suspended ... inside) gets a recorded NotFound error result." */
Test(diverge, a_removed_callee_is_served_or_not_found)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "asks", asks, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "asks", "{}", "q");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char token[128];
    snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    /* the new code has no "human", and "add" is gone too */
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "asks", asks, NULL), PL_OK);
    e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    cJSON *yes = t_json("{\"ok\": true}");
    cr_assert_eq(pl_run_resume(&o, e, "q", token, yes), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(yes);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    const cJSON *code = cJSON_GetObjectItem(pl_outcome_result(o), "code");
    cr_expect_str_eq(cJSON_GetStringValue(code), "NotFound");
    cr_expect_eq(o->calls_served, 1, "add, recorded, was served");
    pl_outcome_free(o);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "q", "0"), PL_OK);
    cr_expect(pl_step_is_error(pl_steps_at(l, 3)), "the NotFound recorded");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "q"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

Test(diverge, a_suspended_run_records_its_resume_token)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "human", "{\"q\": 1}", "h");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "h"), PL_OK);
    cr_assert_not_null(info->resume_token);
    cr_assert_str_eq(info->resume_token, o->resume_token);
    cJSON *answer = t_json("{\"a\": 2}");
    pl_outcome *done = NULL;
    cr_assert_eq(pl_run_resume(&done, e, "h", info->resume_token, answer),
                 PL_OK);
    cr_assert_eq(done->status, PL_RUN_COMPLETED);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_get(&info, e, "h"), PL_OK);
    cr_assert_null(info->resume_token); /* completed: nothing to resume */
    pl_run_info_free(info);
    cJSON_Delete(answer);
    pl_outcome_free(done);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}
