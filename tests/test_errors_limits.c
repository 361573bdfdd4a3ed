/*
 * test_errors_limits.c -- the limits of the public API give clear errors,
 * never a crash: payloads over pl_engine_options.max_payload (root, call,
 * result and the others), nesting deeper than PL_MAX_DEPTH, and bad
 * pl_steps_add() input, each with pl_errmsg() naming the problem.
 */
#include "support.h"
#include "support_errors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_engine *open_limited(const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.max_payload = MAX_PAYLOAD;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, t_store_path(), reg, &o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    return e;
}

/* ------------------------------------------------------------------------ */

/* Limits                                                                   */
/* ------------------------------------------------------------------------ */

Test(errors, root_payload_over_max_payload_is_elimit)
{
    pl_registry *reg = registry();
    pl_engine *e = open_limited(reg);
    cJSON *big = big_object(4 * MAX_PAYLOAD);
    pl_action a = {PL_ACTION_VERSION, "echo", big, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "big-root";
    pl_outcome *o = NULL;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_ELIMIT, "limit");
    expect_has(pl_errmsg(), "1024");
    cr_expect_null(o);
    cr_expect(!run_exists(e, "big-root"));
    cr_expect_eq(t_calls.echo, 0);
    cJSON_Delete(big);

    /* just under the limit is fine */
    cJSON *ok = big_object(MAX_PAYLOAD - 16);
    a.payload = ok;
    ro.run_id = "ok-root";
    cr_expect_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cJSON_Delete(ok);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, call_payload_over_max_payload_fails_with_elimit)
{
    pl_registry *reg = registry();
    pl_engine *e = open_limited(reg);
    pl_outcome *o = misuse_run(e, "big_call", "big-call");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ELIMIT, "%s", pl_status_name(o->error));
    cr_expect_eq(g_call_status, PL_ELIMIT);
    expect_has(o->reason, "big-call");
    expect_has(o->reason, "'echo'");
    expect_has(o->reason, "exceeds the limit of 1024 bytes");
    cr_expect_eq(t_calls.echo, 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, result_over_max_payload_fails_with_elimit)
{
    pl_registry *reg = registry();
    pl_engine *e = open_limited(reg);
    pl_outcome *o = misuse_run(e, "big_result", "big-result");
    cr_expect_eq(o->status, PL_RUN_FAILED,
                 "a %d-byte result was accepted under max_payload=%d",
                 4 * MAX_PAYLOAD, MAX_PAYLOAD);
    cr_expect_eq(o->error, PL_ELIMIT, "%s", pl_status_name(o->error));
    expect_has(o->reason, "big-result");
    expect_has(o->reason, "limit");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, other_payloads_over_max_payload)
{
    pl_registry *reg = registry();
    pl_engine *e = open_limited(reg);

    /* a suspend prompt */
    pl_outcome *o = misuse_run(e, "big_prompt", "big-prompt");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ELIMIT, "%s", pl_status_name(o->error));
    expect_has(o->reason, "limit");
    pl_outcome_free(o);

    /* a side effect's value */
    o = misuse_run(e, "big_effect", "big-effect");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ELIMIT, "%s", pl_status_name(o->error));
    expect_has(o->reason, "'fetch'");
    pl_outcome_free(o);

    /* an emitted step: pl_ctx_emit reports it, the policy decides */
    o = misuse_run(e, "big_emit", "big-emit");
    cr_expect_eq(g_call_status, PL_ELIMIT, "%s", pl_status_name(g_call_status));
    cr_expect_eq(o->status, PL_RUN_FAILED);
    expect_has(o->reason, "PL_ELIMIT");
    pl_outcome_free(o);

    /* a resume answer: refused, the run stays suspended */
    o = misuse_run(e, "wait", "big-answer");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason);
    cJSON *big = big_object(4 * MAX_PAYLOAD);
    pl_outcome *o2 = NULL;
    EXPECT_ERR(pl_run_resume(&o2, e, "big-answer", o->resume_token, big),
               PL_ELIMIT, "limit");
    cr_expect_null(o2);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "big-answer"), PL_OK);
    cr_expect_eq(info->status, PL_RUN_SUSPENDED);
    pl_run_info_free(info);
    cJSON_Delete(big);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, nesting_deeper_than_max_depth_fails_with_elimit)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    char payload[64];

    /* exactly PL_MAX_DEPTH levels below the root is allowed */
    snprintf(payload, sizeof payload, "{\"left\": %d}", PL_MAX_DEPTH);
    pl_outcome *o = t_start(e, "deep", payload, "deep-ok");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_eq(g_max_depth_seen, PL_MAX_DEPTH);
    cr_expect_eq(pl_run_verify(e, "deep-ok"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);

    /* one more is refused */
    snprintf(payload, sizeof payload, "{\"left\": %d}", PL_MAX_DEPTH + 1);
    o = t_start(e, "deep", payload, "deep-over");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ELIMIT, "%s", pl_status_name(o->error));
    expect_has(o->reason, "deep-over");
    expect_has(o->reason, "deeper than 32");
    pl_outcome_free(o);

    /* unbounded recursion stops at the limit too */
    g_max_depth_seen = 0;
    o = t_start(e, "deep", NULL, "deep-forever");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ELIMIT);
    cr_expect_eq(g_max_depth_seen, PL_MAX_DEPTH);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* Step lists                                                               */
/* ------------------------------------------------------------------------ */

Test(errors, steps_add_rejects_bad_input)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_steps_new(&l), PL_OK);
    cJSON *obj = t_json("{\"k\": 1}");

    EXPECT_ERR(pl_steps_add(l, (pl_step_type)0, "a", obj), PL_EINVAL, "type");
    EXPECT_ERR(pl_steps_add(l, (pl_step_type)8, "a", obj), PL_EINVAL, "type");
    EXPECT_ERR(pl_steps_add(l, (pl_step_type)-1, "a", obj), PL_EINVAL, "type");
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, NULL, obj), PL_EINVAL, "actor");
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "", obj), PL_EINVAL, "actor");
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "bad\nactor", obj), PL_EINVAL,
               "actor");
    char long_actor[PL_MAX_NAME + 2];
    memset(long_actor, 'a', sizeof long_actor - 1);
    long_actor[sizeof long_actor - 1] = '\0';
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, long_actor, obj), PL_EINVAL,
               "actor");

    cJSON *arr = cJSON_CreateArray();
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "a", arr), PL_EJSON, "object");
    cJSON *num = cJSON_CreateNumber(3);
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "a", num), PL_EJSON, "object");
    cJSON *nan = cJSON_CreateObject();
    cJSON_AddItemToObject(nan, "x", cJSON_CreateNumber(NAN));
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "a", nan), PL_EJSON, "finite");
    cJSON *deepest = cJSON_CreateObject(), *cur = deepest;
    for (int i = 0; i < PL_MAX_JSON_DEPTH + 5; i++) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddItemToObject(cur, "d", next);
        cur = next;
    }
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "a", deepest), PL_ELIMIT, "deep");
    EXPECT_ERR(pl_steps_add(NULL, PL_STEP_TEXT, "a", obj), PL_EINVAL, "NULL");

    EXPECT_ERR(pl_steps_add_text(l, "a", NULL), PL_EINVAL, "text");
    EXPECT_ERR(pl_steps_add_text(l, NULL, "hi"), PL_EINVAL, "actor");
    EXPECT_ERR(pl_steps_add_call(l, NULL, obj), PL_EINVAL, "policy");
    EXPECT_ERR(pl_steps_add_call(l, "", obj), PL_EINVAL, "policy");
    EXPECT_ERR(pl_steps_add_call(NULL, "echo", obj), PL_EINVAL, "policy");
    EXPECT_ERR(pl_steps_add_error(l, NULL, "m"), PL_EINVAL, "code");
    EXPECT_ERR(pl_steps_add_error(l, "", "m"), PL_EINVAL, "code");
    EXPECT_ERR(pl_steps_add_result(l, obj), PL_EINVAL, "actor");
    cr_expect_eq(pl_steps_count(l), 0, "no refused step was added");

    /* a NULL payload is refused, never recorded as {} */
    EXPECT_ERR(pl_steps_add(l, PL_STEP_TEXT, "a", NULL), PL_EINVAL, "NULL");
    EXPECT_ERR(pl_steps_add_result(l, NULL), PL_EINVAL, "NULL");
    EXPECT_ERR(pl_steps_add_call(l, "echo", NULL), PL_EINVAL, "NULL");
    cr_expect_eq(pl_steps_count(l), 0, "no refused step was added");

    /* valid input still works */
    cr_expect_eq(pl_steps_add(l, PL_STEP_TEXT, "a", pl_json_empty()), PL_OK);
    cr_expect_eq(pl_steps_add(l, PL_STEP_SIDE_EFFECT, "a", obj), PL_OK);
    cr_assert_eq(pl_steps_count(l), 2);
    cr_expect_eq(cJSON_GetArraySize(pl_step_payload(pl_steps_at(l, 0))), 0);
    cr_expect_str_eq(pl_step_id(pl_steps_at(l, 0)), "", "not in a ledger");
    uint8_t h[PL_HASH_LEN];
    EXPECT_ERR(pl_step_prev_hash(h, pl_steps_at(l, 0)), PL_ENOTFOUND, "ledger");
    cJSON_Delete(obj);
    cJSON_Delete(arr);
    cJSON_Delete(num);
    cJSON_Delete(nan);
    cJSON_Delete(deepest);
    pl_steps_free(l);
}

Test(errors, steps_add_call_rejects_non_object_payload)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_steps_new(&l), PL_OK);
    cJSON *arr = cJSON_CreateArray();
    /* the payload is checked before anything is added */
    EXPECT_ERR(pl_steps_add_call(l, "echo", arr), PL_EJSON, "object");
    cr_expect_eq(pl_steps_count(l), 0);
    cJSON_Delete(arr);
    pl_steps_free(l);
}
