/*
 * test_replay_ctx.c -- what a policy sees under replay (core/replay/): the
 * invocation's own ledger (pl_ctx_ledger) and seeds, values at the depth
 * limit, seeds compared on replay, idempotency keys; a failing policy, an
 * unregistered callee and an error-as-data tool result.
 */
#include "support.h"
#include "support_replay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(replay, ctx_ledger_shows_the_invocations_own_steps)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "reader", NULL, "led-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(g_nsnaps, 2);
    expect_reader_snaps(&g_snaps[0], &g_snaps[1]);

    /* on replay the ledger reads the same at the same points */
    pl_outcome *o2 = cont(e, "led-1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_assert_eq(g_nsnaps, 4);
    expect_reader_snaps(&g_snaps[2], &g_snaps[3]);
    cr_expect_eq(t_calls.echo, 2);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, sub_policy_ledger_is_empty_or_seeded)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "seeder", NULL, "seed-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_assert_eq(g_nsnaps, 2);
    cr_expect_eq(g_snaps[0].n, 0,
                 "no seed: an empty ledger, not the "
                 "caller's");
    cr_assert_eq(g_snaps[1].n, 2, "the seed steps open the ledger");
    cr_expect_str_eq(g_snaps[1].ids[0], "0.2:0");
    cr_expect_str_eq(g_snaps[1].ids[1], "0.2:1");
    cr_expect_eq(g_snaps[1].types[0], PL_STEP_TEXT);
    cr_expect_str_eq(g_snaps[1].actors[0], "system");
    cr_expect_str_eq(g_snaps[1].actors[1], "user");
    char *r = result_text(o);
    cr_expect_str_eq(r, "{\"n\":2,\"path\":\"0.2\"}");
    free(r);

    /* the seed is durable in the callee's ledger, before its result */
    pl_steps *l = ledger(e, "seed-1", "0.2");
    cr_assert_eq(pl_steps_count(l), 3);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(
        pl_step_payload(pl_steps_at(l, 1)), "text");
    cr_expect(cJSON_IsString(t) && strcmp(t->valuestring, "hello") == 0);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 2)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    l = ledger(e, "seed-1", "0.0");
    cr_expect_eq(pl_steps_count(l), 1, "only the unseeded callee's result");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "seed-1"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, root_seed_opens_the_root_ledger)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_steps *seed = NULL;
    cr_assert_eq(pl_steps_new(&seed), PL_OK);
    cr_assert_eq(pl_steps_add_text(seed, "user", "hello"), PL_OK);
    pl_action a = {PL_ACTION_VERSION, "peek", pl_json_empty(), NULL, 0, seed};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "seed-root";
    pl_outcome *o1 = NULL;
    cr_assert_eq(pl_run_start(&o1, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_steps_free(seed); /* borrowed: the run keeps its own copy */
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    char *r1 = result_text(o1);
    cr_expect_str_eq(r1, "{\"n\":1,\"path\":\"0\"}");
    expect_str(g_snaps[0].ids[0], "0:0");
    expect_str(g_snaps[0].actors[0], "user");

    /* continuing replays the stored seed */
    pl_outcome *o2 = cont(e, "seed-root");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    char *r2 = result_text(o2);
    cr_expect_str_eq(r2, r1);
    cr_expect_eq(o2->steps_appended, 0);
    pl_steps *l = ledger(e, "seed-root", "0");
    cr_expect_eq(pl_steps_count(l), 2, "the seed step and the result");
    pl_steps_free(l);
    free(r1);
    free(r2);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Values at the deepest nesting a payload may have stay readable wherever
 * the engine stores them: started, resumed, verified, read and replayed. */
Test(replay, values_at_the_depth_limit_read_back_inside_every_record)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_steps *seed = NULL;
    cJSON *v = deepest();
    cr_assert_eq(pl_steps_new(&seed), PL_OK);
    cr_assert_eq(pl_steps_add(seed, PL_STEP_TEXT, "user", v), PL_OK, "%s",
                 pl_errmsg());
    pl_action a = {PL_ACTION_VERSION, "deep", pl_json_empty(), NULL, 0, seed};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "deep";
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_steps_free(seed);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason ? o->reason : "");
    char *want = t_text(v), *got = t_text(o->prompt);
    cr_expect_str_eq(got, want, "the prompt reads back");
    free(got);
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);

    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "deep", token, v), PL_OK, "%s",
                 pl_errmsg());
    free(token);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    got = t_text(pl_outcome_result(o));
    cr_expect_str_eq(got, want, "the answer came back");
    free(got);
    free(want);
    pl_outcome_free(o);

    cr_assert_eq(pl_run_verify(e, "deep"), PL_OK, "%s", pl_errmsg());
    pl_steps *l = ledger(e, "deep", "0");
    cr_expect_gt(pl_steps_count(l), 5);
    pl_steps_free(l);
    int echoes = t_calls.echo;
    o = cont(e, "deep");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(t_calls.echo, echoes, "nothing ran again");
    pl_outcome_free(o);
    cJSON_Delete(v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, seed_is_compared_on_replay)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    cJSON *answer = t_json("{\"go\": true}");

    /* unchanged seed: the callee replays it and goes on */
    g_seed_text = "hello";
    pl_outcome *o1 = t_start(e, "seeded_wait", NULL, "seed-ok");
    cr_assert_eq(o1->status, PL_RUN_SUSPENDED, "%s", o1->reason);
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_resume(&o2, e, "seed-ok", o1->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    char *r = result_text(o2);
    cr_expect_str_eq(r, "{\"seen\":1,\"answer\":{\"go\":true}}");
    free(r);

    /* changed seed: the action_call records a digest of its seed, so the
     * call itself differs, before the callee replays anything */
    pl_outcome *o3 = t_start(e, "seeded_wait", NULL, "seed-nd");
    cr_assert_eq(o3->status, PL_RUN_SUSPENDED);
    g_seed_text = "goodbye";
    pl_outcome *o4 = NULL;
    cr_assert_eq(pl_run_resume(&o4, e, "seed-nd", o3->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o4->status, PL_RUN_FAILED);
    cr_expect_eq(o4->error, PL_ENONDET);
    expect_has(o4->reason, "seed-nd");
    expect_has(o4->reason, "invocation 0,");
    expect_has(o4->reason, "0:0");
    expect_has(o4->reason, "\"seed\":");

    /* and a completed run whose seeded call is served from the ledger
     * (its callee never runs) still notices a changed seed */
    g_seed_text = "hello";
    pl_outcome *o5 = t_start(e, "seeded_wait", NULL, "seed-served");
    pl_outcome *o6 = NULL;
    cr_assert_eq(pl_run_resume(&o6, e, "seed-served", o5->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o6->status, PL_RUN_COMPLETED, "%s", o6->reason);
    g_seed_text = "goodbye";
    char *reason = diverge(e, "seed-served");
    expect_has(reason, "0:0");
    expect_has(reason, "\"seed\":");
    free(reason);
    g_seed_text = "hello";
    pl_outcome_free(o5);
    pl_outcome_free(o6);
    cJSON_Delete(answer);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_outcome_free(o4);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

Test(replay, idempotency_key_is_stable_across_replays)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_gate_closed = true; /* keyed fails the first execution after running */
    pl_outcome *o1 = t_start(e, "keyed_root", NULL, "idem-1");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    cr_assert_eq(g_nkeys, 1);
    cr_expect_str_eq(g_root_keys[0], "idem-1/0");
    cr_expect_str_eq(g_keys[0], "idem-1/0:2", "<run id>/<caller path>:<seq>");
    cr_expect_str_eq(g_key_paths[0], "0.2");

    g_gate_closed = false; /* the in-flight call runs again, same key */
    pl_outcome *o2 = cont(e, "idem-1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_assert_eq(g_nkeys, 2);
    cr_expect_str_eq(g_keys[1], g_keys[0]);
    cr_expect_str_eq(g_root_keys[1], g_root_keys[0]);

    /* a completed replay serves keyed; the root's key is still the same */
    pl_outcome *o3 = cont(e, "idem-1");
    cr_expect_eq(g_nkeys, 2);
    cr_expect_str_eq(g_root_keys[2], "idem-1/0");
    cr_expect_eq(t_calls.echo, 1);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* pl_ctx_replaying() at the start of each execution and after its one
 * side effect (durable when it returns); the first execution fails after
 * recording it. */
static bool g_seen_replaying[3][2];
static int g_replaying_runs;
static bool g_replaying_fails;

/* A side effect's value: the string "bad". */
static int bad_value(cJSON **out, void *user)
{
    (void)user;
    *out = cJSON_CreateString("bad");
    return *out ? PL_OK : PL_ENOMEM;
}

static int replaying_policy(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                            void *user)
{
    (void)action;
    (void)user;
    int i = g_replaying_runs++;
    cr_assert_lt(i, 3);
    g_seen_replaying[i][0] = pl_ctx_replaying(ctx);
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, "value", bad_value, NULL);
    cJSON_Delete(v);
    if (st)
        return st;
    g_seen_replaying[i][1] = pl_ctx_replaying(ctx);
    if (g_replaying_fails)
        return PL_EIO;
    return pl_steps_add_text(out, NULL, "done");
}

Test(replay, replaying_is_a_recorded_step_at_the_cursor_or_a_check)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "replaying", replaying_policy, NULL),
                 PL_OK);
    pl_engine *e = open_engine(t_store_path(), reg);
    g_replaying_fails = true;
    pl_outcome *o1 = t_start(e, "replaying", NULL, "replaying-1");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    cr_expect(!g_seen_replaying[0][0], "a new ledger has nothing recorded");
    cr_expect(!g_seen_replaying[0][1], "nor after its first append");
    pl_steps *l = ledger(e, "replaying-1", "0");
    cr_assert_eq(pl_steps_count(l), 1, "the side effect is recorded");
    pl_steps_free(l);

    /* a check replay: true past the record's end too, since it writes
     * nothing */
    pl_run_options check = PL_RUN_OPTIONS_INIT;
    check.check = true;
    pl_outcome *o2 = NULL;
    pl_run_continue(&o2, e, "replaying-1", &check);
    cr_assert_eq(g_replaying_runs, 2);
    cr_expect(g_seen_replaying[1][0]);
    cr_expect(g_seen_replaying[1][1], "past the record, in a check replay");

    /* continued: the recorded value is at the cursor, then the record ends */
    g_replaying_fails = false;
    pl_outcome *o3 = cont(e, "replaying-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_assert_eq(g_replaying_runs, 3);
    cr_expect(g_seen_replaying[2][0], "the value is recorded at the cursor");
    cr_expect(!g_seen_replaying[2][1], "past the record, appends are real");
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* "shapes": the first execution records a user's side effect named "now",
 * "random" or "uuid" (payload "name") whose value is the string "bad";
 * every later one reads that name back with the recorded helper. */
static int g_shape_runs, g_shape_st;

static int shapes(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                  void *user)
{
    (void)user;
    const char *name = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(action->payload, "name"));
    if (!name)
        return PL_EINVAL;
    int st;
    if (g_shape_runs++ == 0) {
        cJSON *v = NULL;
        st = pl_ctx_side_effect(&v, ctx, name, bad_value, NULL);
        cJSON_Delete(v);
        return st ? st : PL_EIO; /* fail: the next execution replays it */
    }
    int64_t now;
    uint64_t rnd;
    char uuid[PL_UUID_LEN + 1];
    st = strcmp(name, "now") == 0      ? pl_ctx_now(&now, ctx)
         : strcmp(name, "random") == 0 ? pl_ctx_random(&rnd, ctx)
                                       : pl_ctx_uuid(uuid, ctx);
    g_shape_st = st;
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

Test(replay, a_recorded_value_of_the_wrong_shape_is_ecorrupt)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "shapes", shapes, NULL), PL_OK);
    pl_engine *e = open_engine(t_store_path(), reg);
    static const char *const names[] = {"now", "random", "uuid"};
    for (size_t i = 0; i < 3; i++) {
        char payload[64], id[32];
        snprintf(payload, sizeof payload, "{\"name\": \"%s\"}", names[i]);
        snprintf(id, sizeof id, "shape-%s", names[i]);
        g_shape_runs = 0;
        g_shape_st = 0;
        pl_outcome *o = t_start(e, "shapes", payload, id);
        cr_assert_eq(o->status, PL_RUN_FAILED);
        pl_outcome_free(o);
        o = cont(e, id);
        cr_expect_eq(g_shape_st, PL_ECORRUPT, "%s", names[i]);
        cr_expect_eq(o->status, PL_RUN_FAILED);
        cr_expect_eq(o->error, PL_ECORRUPT, "%s", names[i]);
        expect_has(o->reason, "wrong shape");
        pl_outcome_free(o);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

Test(replay, failing_policy_fails_the_run_with_epolicy)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "fail", NULL, "fail-root");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY);
    expect_has(o->reason, "'fail'");
    expect_has(o->reason, "fail-root");
    cr_expect_null(o->steps);
    pl_run_info *info = get_info(e, "fail-root");
    cr_expect_eq(info->status, PL_RUN_FAILED);
    cr_expect_eq(info->error, PL_EPOLICY);
    cr_expect_str_eq(info->reason, o->reason);
    pl_run_info_free(info);

    /* as a callee: the run fails (not an error result) naming the callee */
    pl_outcome *o2 = t_start(e, "probe", "{\"call\": \"fail\"}", "fail-callee");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    cr_expect_eq(o2->error, PL_EPOLICY);
    expect_has(o2->reason, "'fail'");
    expect_has(o2->reason, "0.0");

    /* replaying a failed run fails the same way */
    pl_outcome *o3 = cont(e, "fail-callee");
    cr_expect_eq(o3->status, PL_RUN_FAILED);
    cr_expect_eq(o3->error, PL_EPOLICY);
    expect_has(o3->reason, "'fail'");
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

Test(replay, failure_reason_is_clean_and_not_stale)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    /* an unrelated earlier failure on this thread */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "unrelated-ghost"), PL_ENOTFOUND);
    expect_has(pl_errmsg(), "unrelated-ghost");

    /* "fail" returns PL_EPOLICY without any message of its own: the
     * recorded reason must say so once, and must neither blame the
     * unrelated lookup nor repeat itself */
    pl_outcome *o = t_start(e, "fail", NULL, "stale-1");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    expect_has(o->reason, "policy 'fail' at 0 returned PL_EPOLICY");
    cr_expect_eq(count_of(o->reason, "policy 'fail'"), 1,
                 "the reason repeats itself: %s", o->reason);
    cr_expect(strstr(o->reason, "unrelated-ghost") == NULL &&
                  strstr(o->reason, ".db") == NULL,
              "the reason carries a stale, unrelated message: %s", o->reason);

    /* a second failure on the same thread: no trace of the first */
    pl_outcome *o2 = t_start(e, "probe", "{\"call\": \"fail\"}", "stale-2");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    expect_has(o2->reason, "stale-2");
    expect_has(o2->reason, "policy 'fail' at 0.0 returned PL_EPOLICY");
    cr_expect(strstr(o2->reason, "stale-1") == NULL,
              "the reason of run stale-2 names run stale-1: %s", o2->reason);
    cr_expect_eq(count_of(o2->reason, "policy 'fail'"), 1,
                 "the reason repeats itself: %s", o2->reason);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, unregistered_callee_gives_a_notfound_result)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "probe",
                            "{\"call\": \"nosuch\", \"with\": {\"x\": 1}}",
                            "nf-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "not a failed run: %s",
                 o->reason);
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "is_error")));
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(r, "code");
    cr_expect(cJSON_IsString(code) &&
              strcmp(code->valuestring, PL_ERR_NOT_FOUND) == 0);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(r, "got");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(got, "message");
    cr_expect(cJSON_IsString(msg) && strstr(msg->valuestring, "nosuch"),
              "the message names the missing policy");

    /* the error result is recorded in the caller's ledger */
    pl_steps *l = ledger(e, "nf-1", "0");
    cr_assert_geq(pl_steps_count(l), 2);
    const pl_step *res = pl_steps_at(l, 1);
    cr_expect_eq(pl_step_type_of(res), PL_STEP_ACTION_RESULT);
    cr_expect(pl_step_is_error(res));
    expect_str(pl_step_error_code(res), PL_ERR_NOT_FOUND);
    cr_expect_str_eq(pl_step_actor(res), "nosuch");
    pl_steps_free(l);

    /* and served on replay */
    pl_outcome *o2 = cont(e, "nf-1");
    cr_expect_eq(o2->status, PL_RUN_COMPLETED);
    cr_expect_eq(o2->calls_served, 1);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, error_as_data_reaches_the_caller)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "probe", "{\"call\": \"oops\"}", "oops-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "is_error")));
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(r, "code");
    cr_expect(cJSON_IsString(code) &&
              strcmp(code->valuestring, PL_ERR_TOOL_BUG) == 0);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(r, "got");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(got, "error")));
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(got, "message");
    cr_expect(cJSON_IsString(msg) &&
              strcmp(msg->valuestring, "something broke") == 0);
    const cJSON *actor = cJSON_GetObjectItemCaseSensitive(r, "actor");
    cr_expect(cJSON_IsString(actor) && strcmp(actor->valuestring, "oops") == 0);
    pl_run_info *info = get_info(e, "oops-1");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    pl_run_info_free(info);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
