/*
 * test_errors.c -- bad input to the public API never crashes and gives clear
 * errors (docs/design.md §10 and §19; the argument checks of
 * core/replay/runner.c, the pl_ctx_* functions in core/replay/call.c,
 * chain.c, ctx.c, recorded.c and suspend.c, and core/replay/step.c,
 * core/engine/engine.c and core/ops/inspect.c).
 *
 * Covers: NULL out-parameters and NULL engines, invalid run ids, wrong
 * option versions, bad root actions (non-object payload, unregistered
 * policy), duplicate and unknown run ids, invalid calls from inside a policy
 * (which fail the run with a recorded reason), payloads over
 * pl_engine_options.max_payload, nesting deeper than PL_MAX_DEPTH, bad
 * pl_steps_add() input, and that pl_errmsg() names the specific problem
 * after each failure.
 *
 * Payloads over max_payload, nesting deeper than PL_MAX_DEPTH and bad
 * pl_steps_add() input are in test_errors_limits.c.
 */
#include "support.h"
#include "support_errors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */

/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* Test policies                                                            */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* Out-parameters, engines, run ids, options                                */
/* ------------------------------------------------------------------------ */

Test(errors, null_out_parameters)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    EXPECT_ERR(pl_engine_open(NULL, path, reg, NULL), PL_EINVAL, "out");
    EXPECT_ERR(pl_registry_new(NULL), PL_EINVAL, "out");
    EXPECT_ERR(pl_steps_new(NULL), PL_EINVAL, "out");
    pl_engine *e = open_engine(reg);
    pl_outcome *done = t_start(e, "echo", NULL, "there");
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    EXPECT_ERR(pl_run_start(NULL, e, &a, NULL), PL_EINVAL, "out");
    EXPECT_ERR(pl_run_continue(NULL, e, "there", NULL), PL_EINVAL, "out");
    EXPECT_ERR(pl_run_resume(NULL, e, "there", "t", NULL), PL_EINVAL, "out");
    EXPECT_ERR(pl_run_get(NULL, e, "there"), PL_EINVAL, "out");
    EXPECT_ERR(pl_run_ledger(NULL, e, "there", "0"), PL_EINVAL, "out");
    EXPECT_ERR(pl_run_walk(e, "there", NULL, NULL), PL_EINVAL, "visitor");
    EXPECT_ERR(pl_engine_runs(e, NULL, NULL), PL_EINVAL, "visitor");
    /* nothing was started by the refused calls */
    cr_expect_eq(t_calls.echo, 1);
    /* freeing NULL does nothing */
    pl_outcome_free(NULL);
    pl_run_info_free(NULL);
    pl_steps_free(NULL);
    pl_step_free(NULL);
    pl_engine_close(NULL);
    pl_registry_free(NULL);
    cr_expect_eq(pl_steps_count(NULL), 0);
    cr_expect_null(pl_steps_at(NULL, 0));
    pl_outcome_free(done);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, step_type_parse_null_out)
{
    /* an out-parameter like every other; must not crash */
    EXPECT_ERR(pl_step_type_parse(NULL, "text"), PL_EINVAL, "out");
    pl_step_type t;
    EXPECT_ERR(pl_step_type_parse(&t, NULL), PL_EINVAL, "step type");
}

Test(errors, durability_parse_null_out)
{
    EXPECT_ERR(pl_durability_parse(NULL, "sync"), PL_EINVAL, "out");
    pl_durability d;
    EXPECT_ERR(pl_durability_parse(&d, NULL), PL_EINVAL, "durability");
}

Test(errors, null_engine)
{
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    void *junk = &a; /* out-parameters must be reset to NULL */
    pl_outcome *o = junk;
    EXPECT_ERR(pl_run_start(&o, NULL, &a, NULL), PL_EINVAL, "engine");
    cr_expect_null(o);
    o = junk;
    EXPECT_ERR(pl_run_continue(&o, NULL, "r", NULL), PL_EINVAL, "engine");
    cr_expect_null(o);
    o = junk;
    EXPECT_ERR(pl_run_resume(&o, NULL, "r", "t", NULL), PL_EINVAL, "engine");
    cr_expect_null(o);
    pl_run_info *info = junk;
    EXPECT_ERR(pl_run_get(&info, NULL, "r"), PL_EINVAL, "engine");
    cr_expect_null(info);
    pl_steps *l = junk;
    EXPECT_ERR(pl_run_ledger(&l, NULL, "r", "0"), PL_EINVAL, "engine");
    cr_expect_null(l);
    EXPECT_ERR(pl_run_verify(NULL, "r"), PL_EINVAL, "engine");
}

static int count_visit(const pl_step *s, void *user)
{
    (void)s;
    (*(int *)user)++;
    return 0;
}

Test(errors, invalid_run_ids)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    char too_long[PL_MAX_RUN_ID + 2];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    const char *bad[] = {"",          too_long,    "has space",   "a/b",
                         "tab\there", "new\nline", "caf\xc3\xa9", "semi;colon",
                         "q?"};
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = bad[i];
        pl_outcome *o = NULL;
        EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "run id");
        cr_expect_null(o);
        EXPECT_ERR(pl_run_continue(&o, e, bad[i], NULL), PL_EINVAL, "run id");
        EXPECT_ERR(pl_run_resume(&o, e, bad[i], "t", NULL), PL_EINVAL,
                   "run id");
        pl_run_info *info = NULL;
        EXPECT_ERR(pl_run_get(&info, e, bad[i]), PL_EINVAL, "run id");
        pl_steps *l = NULL;
        EXPECT_ERR(pl_run_ledger(&l, e, bad[i], "0"), PL_EINVAL, "run id");
        EXPECT_ERR(pl_run_verify(e, bad[i]), PL_EINVAL, "run id");
        int n = 0;
        EXPECT_ERR(pl_run_walk(e, bad[i], count_visit, &n), PL_EINVAL,
                   "run id");
        cr_expect_eq(n, 0);
    }
    /* NULL ids where an id is required */
    pl_outcome *o = NULL;
    EXPECT_ERR(pl_run_continue(&o, e, NULL, NULL), PL_EINVAL, "run id");
    pl_run_info *info = NULL;
    EXPECT_ERR(pl_run_get(&info, e, NULL), PL_EINVAL, "run id");
    cr_expect_eq(t_calls.echo, 0, "nothing ran");

    /* the edges of the valid set are accepted */
    too_long[PL_MAX_RUN_ID] = '\0';
    pl_outcome *o1 = t_start(e, "echo", NULL, too_long);
    cr_expect_eq(o1->status, PL_RUN_COMPLETED);
    pl_outcome *o2 = t_start(e, "echo", NULL, "A-z_0.9:x");
    cr_expect_eq(o2->status, PL_RUN_COMPLETED);
    pl_outcome *o3 = t_start(e, "echo", NULL, NULL);
    cr_expect_eq(strlen(o3->run_id), PL_UUID_LEN, "a generated UUIDv7");
    cr_expect_eq(o3->run_id[14], '7');
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, wrong_option_versions)
{
    pl_registry *reg = registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    void *junk = reg; /* the out-parameter must be reset to NULL */
    pl_engine *bad = junk;
    eo.version = 0;
    EXPECT_ERR(pl_engine_open(&bad, t_store_path(), reg, &eo), PL_EINVAL,
               "version");
    cr_expect_null(bad);
    eo.version = PL_ENGINE_OPTIONS_VERSION + 1;
    EXPECT_ERR(pl_engine_open(&bad, t_store_path(), reg, &eo), PL_EINVAL,
               "version");
    eo.version = PL_ENGINE_OPTIONS_VERSION;
    eo.durability = (pl_durability)7;
    EXPECT_ERR(pl_engine_open(&bad, t_store_path(), reg, &eo), PL_EINVAL,
               "durability");
    cr_expect_null(bad);

    pl_engine *e = open_engine(reg);
    pl_outcome *done = t_start(e, "echo", NULL, "opt-1");
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    pl_outcome *o = NULL;
    ro.version = 0;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "version");
    EXPECT_ERR(pl_run_continue(&o, e, "opt-1", &ro), PL_EINVAL, "version");
    ro.version = PL_RUN_OPTIONS_VERSION + 1;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "version");
    EXPECT_ERR(pl_run_continue(&o, e, "opt-1", &ro), PL_EINVAL, "version");
    cr_expect_null(o);
    /* check is for continue only */
    ro.version = PL_RUN_OPTIONS_VERSION;
    ro.check = true;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "check");
    cr_expect_eq(t_calls.echo, 1);

    /* a policy definition of another version */
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "later";
    d.fn = NULL;
    d.version = PL_POLICY_DEF_VERSION + 1;
    EXPECT_ERR(pl_registry_add(reg, &d), PL_EINVAL, "version");
    pl_outcome_free(done);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, engine_open_bad_paths)
{
    pl_registry *reg = registry();
    pl_engine *e = NULL;
    EXPECT_ERR(pl_engine_open(&e, NULL, reg, NULL), PL_EINVAL, "path");
    EXPECT_ERR(pl_engine_open(&e, "", reg, NULL), PL_EINVAL, "path");
    EXPECT_ERR(pl_engine_open(&e, t_store_path(), NULL, NULL), PL_EINVAL,
               "registry");
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/store.db", t_tmpdir());
    int st = pl_engine_open(&e, missing, reg, NULL);
    cr_expect_neq(st, PL_OK);
    cr_expect_null(e);
    expect_has(pl_errmsg(), "no/such/dir");
    pl_registry_free(reg);
}

/* An LMDB environment may be open once in a process: a second open is
 * PL_EBUSY.  A PostgreSQL store may be opened by many engines of one
 * process, each seeing the other's runs. */
Test(errors, engine_open_twice_in_one_process)
{
    pl_registry *reg = registry();
    pl_engine *e = NULL;
    char path[4300];
    snprintf(path, sizeof path, "%s", t_store_path());
    pl_engine *e1 = t_engine(path, reg, PL_DURABILITY_SYNC);
    if (!t_on_pg()) {
        EXPECT_ERR(pl_engine_open(&e, path, reg, NULL), PL_EBUSY, "open");
        cr_expect_null(e);
    } else {
        cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_OK, "%s",
                     pl_errmsg());
        pl_outcome *o = t_start(e1, "echo", "{\"n\": 1}", "twice-1");
        cr_expect_eq(o->status, PL_RUN_COMPLETED);
        pl_outcome_free(o);
        cr_expect_eq(status_of(e, "twice-1"), PL_RUN_COMPLETED);
        pl_engine_close(e);
    }
    pl_engine_close(e1);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* Root actions and run ids                                                 */
/* ------------------------------------------------------------------------ */

Test(errors, bad_root_actions_create_no_run)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "root-bad";
    pl_outcome *o = NULL;

    EXPECT_ERR(pl_run_start(&o, e, NULL, &ro), PL_EINVAL, "policy");
    pl_action a = {PL_ACTION_VERSION, NULL, pl_json_empty(), NULL, 0, NULL};
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "policy");
    a.policy = "";
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "policy");

    a.policy = "echo";
    cJSON *arr = cJSON_CreateArray();
    a.payload = arr;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EJSON, "object");
    cJSON *str = cJSON_CreateString("text");
    a.payload = str;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EJSON, "object");
    a.payload = NULL; /* never {}: it may be a failed cJSON_CreateObject() */
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "NULL");
    a.payload = pl_json_empty();
    a.version = 0; /* not made with PL_ACTION_INIT */
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "PL_ACTION_INIT");
    a.version = PL_ACTION_VERSION;

    a.policy = "nosuch";
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_ENOTFOUND, "'nosuch'");

    a.policy = "echo";
    a.n_actions = 1;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "actions");
    const char *names[] = {"add", "bad\x01name"};
    a.actions = names;
    a.n_actions = 2;
    EXPECT_ERR(pl_run_start(&o, e, &a, &ro), PL_EINVAL, "actions");

    cr_expect_null(o);
    cr_expect(!run_exists(e, "root-bad"), "a refused start leaves no run");
    cr_expect_eq(t_calls.echo, 0);
    cJSON_Delete(arr);
    cJSON_Delete(str);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, duplicate_run_id_is_eexist)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o1 = t_start(e, "echo", "{\"first\": 1}", "dup");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    pl_action a = {PL_ACTION_VERSION, "add", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "dup";
    pl_outcome *o2 = NULL;
    EXPECT_ERR(pl_run_start(&o2, e, &a, &ro), PL_EEXIST, "dup");
    cr_expect_null(o2);
    cr_expect_eq(t_calls.add, 0, "the second start ran nothing");
    /* the first run is intact */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "dup"), PL_OK);
    cr_expect_str_eq(info->policy, "echo");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_eq(info->attempts, 1);
    cr_expect_eq(pl_run_verify(e, "dup"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, unknown_runs_are_enotfound)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = NULL;
    EXPECT_ERR(pl_run_continue(&o, e, "ghost-run", NULL), PL_ENOTFOUND,
               "ghost-run");
    cr_expect_null(o);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    EXPECT_ERR(pl_run_continue(&o, e, "ghost-run", &ro), PL_ENOTFOUND,
               "ghost-run");
    EXPECT_ERR(pl_run_resume(&o, e, "ghost-run", "tok", pl_json_empty()),
               PL_ENOTFOUND, "ghost-run");
    EXPECT_ERR(pl_run_resume(&o, e, "ghost-run", "tok", NULL), PL_EINVAL,
               "answer");
    pl_run_info *info = NULL;
    EXPECT_ERR(pl_run_get(&info, e, "ghost-run"), PL_ENOTFOUND, "ghost-run");
    pl_steps *l = NULL;
    EXPECT_ERR(pl_run_ledger(&l, e, "ghost-run", "0"), PL_ENOTFOUND,
               "ghost-run");
    EXPECT_ERR(pl_run_verify(e, "ghost-run"), PL_ENOTFOUND, "ghost-run");
    int n = 0;
    EXPECT_ERR(pl_run_walk(e, "ghost-run", count_visit, &n), PL_ENOTFOUND,
               "ghost-run");
    cr_expect(!run_exists(e, "ghost-run"), "lookups create nothing");

    /* bad invocation paths of an existing run */
    pl_outcome *done = t_start(e, "echo", NULL, "real");
    const char *paths[] = {NULL,  "",   "1",    "0.",           "0..1",
                           "0.a", "00", "0.1x", "0.99999999999"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        EXPECT_ERR(pl_run_ledger(&l, e, "real", paths[i]), PL_EINVAL, "path");
    /* a resume without a token */
    EXPECT_ERR(pl_run_resume(&o, e, "real", NULL, NULL), PL_EINVAL, "token");
    pl_outcome_free(done);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */

/* Invalid calls from inside a policy                                       */
/* ------------------------------------------------------------------------ */

Test(errors, invalid_call_from_a_policy_fails_the_run)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    const struct {
        const char *mode;
        int status;
        const char *phrase;
    } cases[] = {
        {"null_name", PL_EINVAL, "no valid policy name"},
        {"bad_name", PL_EINVAL, "no valid policy name"},
        {"null_action", PL_EINVAL, "no valid policy name"},
        {"no_actions", PL_EINVAL, "n_actions without actions"},
        {"bad_action_name", PL_EINVAL, "bad name in actions"},
        {"no_decorators", PL_EINVAL, "without decorators"},
        {"decorator_without_fn", PL_EINVAL, "decorator 1 has no function"},
        {"array_payload", PL_EJSON, "object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char id[64];
        snprintf(id, sizeof id, "misuse-%zu", i);
        pl_outcome *o = misuse_run(e, cases[i].mode, id);
        cr_expect_eq(o->status, PL_RUN_FAILED, "%s", cases[i].mode);
        cr_expect_eq(o->error, cases[i].status, "%s: %s", cases[i].mode,
                     pl_status_name(o->error));
        cr_expect_eq(g_call_status, cases[i].status,
                     "%s: pl_ctx_call returned %s", cases[i].mode,
                     pl_status_name(g_call_status));
        expect_has(o->reason, id);
        expect_has(o->reason, cases[i].phrase);
        expect_has(pl_errmsg(), cases[i].phrase);
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK);
        cr_expect_eq(info->status, PL_RUN_FAILED);
        cr_expect_eq(info->error, cases[i].status);
        pl_run_info_free(info);
        pl_outcome_free(o);
    }
    cr_expect_eq(t_calls.echo, 0, "no bad call reached its callee");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, context_functions_reject_null_arguments)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = t_start(e, "nulls", NULL, "nulls-1");
    cr_expect_eq(o->status, PL_RUN_COMPLETED,
                 "argument errors do not stop the run: %s",
                 o->reason ? o->reason : "");
    for (int i = 0; i < N_NULLS; i++)
        cr_expect_eq(g_null_status[i], PL_EINVAL, "check %d: %s", i,
                     pl_status_name(g_null_status[i]));
    cr_expect_eq(t_calls.echo, 1, "the valid call afterwards ran");
    cr_expect_eq(pl_run_verify(e, "nulls-1"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(errors, non_object_suspend_prompt_fails_the_run)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o = misuse_run(e, "array_prompt", "prompt-arr");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EJSON);
    expect_has(o->reason, "prompt must be an object");
    expect_has(o->reason, "'misuse'");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
