/*
 * test_start.c -- pl_run_start() on a run id that exists already:
 * pl_run_options.if_exists in each of its modes on a completed, suspended,
 * crashed (running, its owner killed) and failed run, and a submitted one;
 * a root other than the recorded one; and the options' versions (a version
 * 1 struct, built before if_exists, is still read).
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- policies ------------------------------------------------------------ */

static atomic_int g_runs; /* root policy executions in this process */
static bool g_fail;       /* "adder" fails while this is set */
static bool g_crash;      /* "adder" kills its process when set */

/* adder: adds 1 and 2 and returns the sum; fails (a run-stopping status)
 * while g_fail is set, and kills its process after the call when g_crash
 * is. */
static int adder(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    atomic_fetch_add(&g_runs, 1);
    if (g_fail)
        return pl_errorf(PL_EPOLICY, "adder: told to fail");
    cJSON *r = NULL;
    int st = pl_ctx_invokef(&r, ctx, "add", "{s:i, s:i}", "a", 1, "b", 2);
    if (!st && g_crash)
        raise(SIGKILL);
    if (!st)
        st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* asker: suspends with {"q": "ok?"}; returns the answer. */
static int asker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    atomic_fetch_add(&g_runs, 1);
    cJSON *q = t_json("{\"q\": \"ok?\"}");
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, q);
    cJSON_Delete(q);
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "adder", adder, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "asker", asker, NULL), PL_OK);
    return reg;
}

/* pl_run_start(@p policy, {"n": 1}) as run @p id with @p how; *out set. */
static int start(pl_outcome **out, pl_engine *e, const char *policy,
                 const char *id, pl_if_exists how)
{
    cJSON *p = t_json("{\"n\": 1}");
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.if_exists = how;
    *out = NULL;
    int st = pl_run_start(out, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

static double sum_of(const pl_outcome *o)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                      "sum");
    return cJSON_IsNumber(s) ? s->valuedouble : -1;
}

/* ---- a completed run ----------------------------------------------------- */

Test(start, a_completed_run_in_each_mode)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    cr_assert_eq(start(&o, e, "adder", "done", PL_IF_EXISTS_FAIL), PL_OK);
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(sum_of(o), 3);
    pl_outcome_free(o);
    cr_assert_eq(t_calls.add, 1);

    /* FAIL (the default): PL_EEXIST and no outcome */
    cr_expect_eq(start(&o, e, "adder", "done", PL_IF_EXISTS_FAIL), PL_EEXIST);
    cr_expect_null(o);
    cr_expect(strstr(pl_errmsg(), "'done' exists already"), "%s", pl_errmsg());

    /* CONTINUE and OUTCOME: the same outcome, nothing executed again */
    const pl_if_exists modes[] = {PL_IF_EXISTS_CONTINUE, PL_IF_EXISTS_OUTCOME};
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(start(&o, e, "adder", "done", modes[i]), PL_OK, "%s",
                     pl_errmsg());
        cr_expect_eq(o->status, PL_RUN_COMPLETED);
        cr_expect_str_eq(o->run_id, "done");
        cr_expect_eq(sum_of(o), 3, "the recorded result");
        cr_expect_eq(o->calls_executed, 0);
        cr_expect_eq(o->calls_served, 1);
        cr_expect_eq(o->steps_appended, 0, "nothing written");
        pl_outcome_free(o);
    }
    cr_expect_eq(t_calls.add, 1, "add ran once in all");
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "done"), PL_OK);
    cr_expect_eq(info->attempts, 1, "no new attempt");
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(start, another_root_under_the_same_id_is_refused_in_every_mode)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    cr_assert_eq(start(&o, e, "adder", "mine", PL_IF_EXISTS_FAIL), PL_OK);
    pl_outcome_free(o);
    for (int how = PL_IF_EXISTS_CONTINUE; how <= PL_IF_EXISTS_OUTCOME; how++) {
        /* another policy */
        cr_expect_eq(start(&o, e, "asker", "mine", (pl_if_exists)how),
                     PL_EEXIST);
        cr_expect_null(o);
        cr_expect(strstr(pl_errmsg(), "another root") &&
                      strstr(pl_errmsg(), "'adder'"),
                  "%s", pl_errmsg());
        /* the same policy, another payload */
        pl_action a = PL_ACTION_INIT;
        a.policy = "adder";
        a.payload = pl_json_empty();
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "mine";
        ro.if_exists = (pl_if_exists)how;
        cr_expect_eq(pl_run_start(&o, e, &a, &ro), PL_EEXIST);
        cr_expect_null(o);
    }
    cr_expect_eq(g_runs, 1, "nothing ran again");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a suspended run ----------------------------------------------------- */

Test(start, a_suspended_run_gives_its_recorded_suspension)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *s = NULL, *o = NULL;
    cr_assert_eq(start(&s, e, "asker", "ask", PL_IF_EXISTS_FAIL), PL_OK);
    cr_assert_eq(s->status, PL_RUN_SUSPENDED);
    cr_expect_eq(start(&o, e, "asker", "ask", PL_IF_EXISTS_FAIL), PL_EEXIST);

    const pl_if_exists modes[] = {PL_IF_EXISTS_CONTINUE, PL_IF_EXISTS_OUTCOME};
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(start(&o, e, "asker", "ask", modes[i]), PL_OK, "%s",
                     pl_errmsg());
        cr_expect_eq(o->status, PL_RUN_SUSPENDED);
        cr_expect_str_eq(o->run_id, "ask");
        cr_expect_str_eq(o->resume_token, s->resume_token);
        cr_expect_str_eq(o->suspended_path, s->suspended_path);
        cr_expect(cJSON_Compare(o->prompt, s->prompt, true), "the prompt");
        cr_expect_eq(o->calls_executed, 0);
        cr_expect_eq(pl_outcome_result(o), pl_json_empty(), "no result");
        pl_outcome_free(o);
    }
    cr_expect_eq(g_runs, 1, "the policy did not run again");

    /* the token it gave resumes the run */
    cJSON *yes = t_json("{\"ok\": true}");
    cr_assert_eq(pl_run_resume(&o, e, "ask", s->resume_token, yes), PL_OK);
    cJSON_Delete(yes);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect(cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "ok")));
    pl_outcome_free(o);
    pl_outcome_free(s);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a failed run -------------------------------------------------------- */

Test(start, a_failed_run_is_retried_by_continue_and_reported_by_outcome)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = NULL;
    g_fail = true;
    cr_assert_eq(start(&o, e, "adder", "fl", PL_IF_EXISTS_FAIL), PL_OK);
    cr_assert_eq(o->status, PL_RUN_FAILED);
    char *reason = strdup(o->reason);
    cr_assert_not_null(reason);
    pl_outcome_free(o);
    cr_expect_eq(start(&o, e, "adder", "fl", PL_IF_EXISTS_FAIL), PL_EEXIST);

    /* OUTCOME: the recorded failure, executing nothing */
    cr_assert_eq(start(&o, e, "adder", "fl", PL_IF_EXISTS_OUTCOME), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY);
    cr_expect_str_eq(o->reason, reason);
    cr_expect_eq(pl_outcome_result(o), pl_json_empty());
    pl_outcome_free(o);
    cr_expect_eq(g_runs, 1, "not retried");

    /* CONTINUE: retried, as pl_run_continue() does */
    g_fail = false;
    cr_assert_eq(start(&o, e, "adder", "fl", PL_IF_EXISTS_CONTINUE), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(sum_of(o), 3);
    pl_outcome_free(o);
    cr_expect_eq(g_runs, 2);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "fl"), PL_OK);
    cr_expect_eq(info->attempts, 2);
    pl_run_info_free(info);
    free(reason);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a crashed run ------------------------------------------------------- */

/* In a child process with an engine of its own: start "adder", which
 * dies of SIGKILL (g_crash) after its call to add is durable. */
static void crash_in_child(const char *path)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_crash = true;
        pl_registry *reg = registry();
        pl_engine *e = NULL;
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_SYNC;
        if (pl_engine_open(&e, path, reg, &eo))
            _exit(3);
        pl_outcome *o = NULL;
        start(&o, e, "adder", "cr", PL_IF_EXISTS_FAIL);
        _exit(4); /* not reached: the policy kills the process */
    }
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) == -1 && errno == EINTR)
        ;
    cr_assert_eq(w, pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child should have died of SIGKILL (status %d)", status);
}

Test(start, a_crashed_run_is_finished_by_continue_and_reported_by_outcome)
{
    const char *path = t_store_path();
    crash_in_child(path);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "cr"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert(!info->owner_alive, "its owner is dead");
    pl_run_info_free(info);

    /* FAIL: PL_EEXIST */
    pl_outcome *o = NULL;
    cr_expect_eq(start(&o, e, "adder", "cr", PL_IF_EXISTS_FAIL), PL_EEXIST);
    cr_expect_null(o);

    /* OUTCOME: "running", and nothing else: nothing executed or written */
    cr_assert_eq(start(&o, e, "adder", "cr", PL_IF_EXISTS_OUTCOME), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_RUNNING);
    cr_expect_str_eq(o->run_id, "cr");
    cr_expect_null(o->steps);
    cr_expect_null(o->reason);
    cr_expect_null(o->resume_token);
    cr_expect_eq(pl_outcome_result(o), pl_json_empty());
    pl_outcome_free(o);
    cr_expect_eq(g_runs, 0, "the policy did not run here");
    cr_assert_eq(pl_run_get(&info, e, "cr"), PL_OK);
    cr_expect_eq(info->status, PL_RUN_RUNNING, "still as the crash left it");
    cr_expect_eq(info->attempts, 1);
    pl_run_info_free(info);

    /* CONTINUE: finished from its ledger, add served, not run again */
    cr_assert_eq(start(&o, e, "adder", "cr", PL_IF_EXISTS_CONTINUE), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(sum_of(o), 3);
    cr_expect_eq(o->calls_served, 1);
    cr_expect_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    cr_expect_eq(t_calls.add, 0, "add ran in the child only");
    cr_expect_eq(pl_run_verify(e, "cr"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a submitted run ----------------------------------------------------- */

Test(start, a_submitted_run_is_reported_as_such)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    cJSON *p = t_json("{\"n\": 1}");
    pl_action a = PL_ACTION_INIT;
    a.policy = "adder";
    a.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "queued";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    ro.if_exists = PL_IF_EXISTS_OUTCOME;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_SUBMITTED);
    pl_outcome_free(o);
    cr_expect_eq(g_runs, 0);
    /* submit itself takes no if_exists */
    cr_expect_eq(pl_run_submit(NULL, e, &a, &ro), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "pl_run_start only"), "%s", pl_errmsg());
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- options' versions --------------------------------------------------- */

/* pl_run_options as version 1 laid it out, before if_exists. */
typedef struct run_options_v1 {
    unsigned version;
    const char *run_id;
    bool check;
} run_options_v1;

Test(start, a_version_1_options_struct_is_read_without_if_exists)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    cJSON *p = t_json("{\"n\": 1}");
    pl_action a = PL_ACTION_INIT;
    a.policy = "adder";
    a.payload = p;
    /* a heap block of exactly the old size: reading past it is a bug
     * AddressSanitizer reports */
    run_options_v1 *v1 = malloc(sizeof *v1);
    cr_assert_not_null(v1);
    *v1 = (run_options_v1){1, "old", false};
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, (const pl_run_options *)v1), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_str_eq(o->run_id, "old", "its run_id is read");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* if_exists takes its default: PL_EEXIST */
    cr_expect_eq(pl_run_start(&o, e, &a, (const pl_run_options *)v1),
                 PL_EEXIST);
    /* its check is read by pl_run_continue() */
    v1->check = true;
    cr_assert_eq(pl_run_continue(&o, e, "old", (const pl_run_options *)v1),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->steps_appended, 0);
    pl_outcome_free(o);
    cr_expect_eq(g_runs, 2, "started, then checked");
    free(v1);

    /* another version, an unknown mode, if_exists where it does not apply */
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    cr_expect_eq(ro.version, PL_RUN_OPTIONS_VERSION);
    ro.version = PL_RUN_OPTIONS_VERSION + 1;
    cr_expect_eq(pl_run_start(&o, e, &a, &ro), PL_EINVAL);
    char newer[32];
    snprintf(newer, sizeof newer, "version %d", PL_RUN_OPTIONS_VERSION + 1);
    cr_expect(strstr(pl_errmsg(), newer), "%s", pl_errmsg());
    ro = (pl_run_options)PL_RUN_OPTIONS_INIT;
    ro.if_exists = (pl_if_exists)7;
    cr_expect_eq(pl_run_start(&o, e, &a, &ro), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "if_exists"), "%s", pl_errmsg());
    ro.if_exists = PL_IF_EXISTS_CONTINUE;
    cr_expect_eq(pl_run_continue(&o, e, "old", &ro), PL_EINVAL);
    cr_expect_null(o);
    /* a new id with if_exists set is just a start */
    ro.run_id = "new";
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}
