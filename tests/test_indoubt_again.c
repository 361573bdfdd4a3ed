/*
 * test_indoubt_again.c -- in-doubt calls (core/replay/indoubt.c), with the
 * "risky" tool and recovery of test_indoubt.c (support_indoubt.c): runs that
 * failed or suspended rather than crashed, or crashed after the call's result
 * was durable, get no in-doubt handling; a rerun decision that crashes is in
 * doubt again; a nested call in doubt.
 */
#include "support.h"
#include "support_indoubt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- runs that did not crash -------------------------------------------------------- */

Test(indoubt, failed_run_is_not_in_doubt)
{
    static const pl_in_doubt rules[] = {PL_IN_DOUBT_FAIL, PL_IN_DOUBT_SUSPEND};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        world w;
        world_init(&w);
        pl_registry *reg = doubt_registry(&w, false, rules[i]);
        pl_engine *e = t_engine(w.store, reg, PL_DURABILITY_SYNC);
        pl_outcome *o = t_start(e, "root", "{\"tool\": \"flaky\"}", RUN);
        cr_assert_eq(o->status, PL_RUN_FAILED);
        cr_assert_eq(o->error, PL_EPOLICY);
        pl_outcome_free(o);
        /* the call was durable before it ran, and has no result */
        cr_assert_eq(ledger_len(e, "0"), 1);
        expect_step(e, "0", 0, PL_STEP_ACTION_CALL, "root", NULL);
        cr_assert_eq(count_all_lines(&w), 1);

        o = continue_ok(e);
        cr_assert_eq(o->status, PL_RUN_COMPLETED,
                     "a failed run is retried, not treated as in doubt: %s %s",
                     pl_run_status_name(o->status), o->reason ? o->reason : "");
        expect_tool_result(o, "flaky");
        cr_assert_eq(o->calls_executed, 1);
        pl_outcome_free(o);
        cr_assert_eq(count_effects(&w, "flaky", RUN "/0:0"), 2);
        cr_assert_eq(ledger_len(e, "0"), 3, "no engine suspend step");
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

Test(indoubt, suspended_run_is_not_in_doubt)
{
    static const pl_in_doubt rules[] = {PL_IN_DOUBT_FAIL, PL_IN_DOUBT_SUSPEND};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        world w;
        world_init(&w);
        pl_registry *reg = doubt_registry(&w, false, rules[i]);
        pl_engine *e = t_engine(w.store, reg, PL_DURABILITY_SYNC);
        pl_outcome *s = t_start(e, "root", "{\"tool\": \"asker\"}", RUN);
        cr_assert_eq(s->status, PL_RUN_SUSPENDED);
        cr_assert_str_eq(s->suspended_path, "0.0");
        cr_assert_null(cJSON_GetObjectItemCaseSensitive(s->prompt, "in_doubt"));
        cr_assert_str_eq(str_of(s->prompt, "question"), "ship it?");
        cr_assert_eq(ledger_len(e, "0"), 1, "the call is open");
        cr_assert_eq(count_all_lines(&w), 0);

        pl_outcome *o = resume_ok(e, s, "{\"ok\": true}");
        cr_assert_eq(o->status, PL_RUN_COMPLETED,
                     "a resumed run's open call is not in doubt: %s %s",
                     pl_run_status_name(o->status), o->reason ? o->reason : "");
        const cJSON *r = pl_outcome_result(o);
        char *txt = t_text(r);
        cr_assert_str_eq(txt, "{\"answer\":{\"ok\":true}}");
        free(txt);
        pl_outcome_free(o);
        pl_outcome_free(s);
        cr_assert_eq(count_effects(&w, "asker", RUN "/0:0"), 1);
        cr_assert_eq(ledger_len(e, "0"), 3, "call, result, root's result");
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

/* A crash after the non-idempotent call's result was durable: served. */
Test(indoubt, durable_result_is_served_after_a_later_crash)
{
    world w;
    world_init(&w);
    pl_registry *reg = doubt_registry(&w, false, PL_IN_DOUBT_FAIL);
    cr_assert(first_time(w.marker), "risky will not kill itself");
    crash_run(&w, reg, PL_DURABILITY_SYNC,
              "{\"tool\": \"risky\", \"then\": \"killer\"}");
    pl_engine *e = t_engine(w.store, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(ledger_len(e, "0"), 2, "risky's call and result");
    cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 1);
    cr_assert_eq(count_effects(&w, "killer", RUN "/0:2"), 1);

    pl_outcome *o = continue_ok(e);
    expect_tool_result(o, "risky");
    cr_assert_eq(o->calls_served, 1, "risky served from the ledger");
    cr_assert_eq(o->calls_executed, 1, "killer re-run");
    pl_outcome_free(o);
    cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 1);
    cr_assert_eq(count_effects(&w, "killer", RUN "/0:2"), 2);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- in doubt again, nested ------------------------------------------------------------ */

/* Side effect; SIGKILL inside the body on its first two executions. */
static int risky2(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    const world *w = user;
    const char *key = pl_ctx_idempotency_key(ctx);
    char line[512];
    snprintf(line, sizeof line, "risky2 %s\n", key);
    if (append_line(w->effects, line))
        return PL_EIO;
    if (count_effects(w, "risky2", key) <= 2)
        raise(SIGKILL);
    return result_done(out, "risky2", key);
}

/* Idempotent: calls payload.tool and returns its result unchanged. */
static int wrapper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a->payload, "inner");
    pl_action call = {PL_ACTION_VERSION,
                      cJSON_IsString(t) ? t->valuestring : "risky",
                      pl_json_empty(),
                      NULL,
                      0,
                      NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static void add_extra(pl_registry *reg, world *w, pl_in_doubt rule)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "risky2";
    d.fn = risky2;
    d.user = w;
    d.idempotent = false;
    d.in_doubt = rule;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "wrapper", wrapper, w), PL_OK);
}

static int child_resume(const world *w, const pl_registry *reg,
                        const char *token, const char *answer)
{
    pl_engine *e = NULL;
    if (pl_engine_open(&e, w->store, reg, NULL))
        return 10;
    cJSON *a = cJSON_Parse(answer);
    pl_outcome *out = NULL;
    int st = pl_run_resume(&out, e, RUN, token, a);
    cJSON_Delete(a);
    pl_outcome_free(out);
    pl_engine_close(e);
    return st ? 11 : 3;
}

/*
 * The operator said "rerun", and the rerun died inside the tool too: the
 * call is in doubt again, so recovery must apply the rule again (suspend),
 * not execute the non-idempotent call a third time on its own.
 */
Test(indoubt, rerun_decision_that_crashes_is_in_doubt_again)
{
    world w;
    world_init(&w);
    pl_registry *reg = doubt_registry(&w, false, PL_IN_DOUBT_SUSPEND);
    add_extra(reg, &w, PL_IN_DOUBT_SUSPEND);
    crash_run(&w, reg, PL_DURABILITY_SYNC, "{\"tool\": \"risky2\"}");
    pl_engine *e = open_after_crash(&w, reg, false, "risky2");
    pl_outcome *s = continue_ok(e);
    cr_assert_eq(s->status, PL_RUN_SUSPENDED);
    char token[128];
    snprintf(token, sizeof token, "%s", s->resume_token);
    pl_outcome_free(s);
    pl_engine_close(e);

    /* the rerun, in a process that dies inside the tool again */
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0)
        _exit(child_resume(&w, reg, token, "{\"decision\": \"rerun\"}"));
    int status = 0;
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the rerun should have died inside the tool");
    cr_assert_eq(count_effects(&w, "risky2", RUN "/0:0"), 2);

    e = t_engine(w.store, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = continue_ok(e);
    cr_assert_eq(count_effects(&w, "risky2", RUN "/0:0"), 2,
                 "recovery executed the in-doubt non-idempotent call again "
                 "without applying its in_doubt rule (outcome %s)",
                 pl_run_status_name(o->status));
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "in doubt again: suspend");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o->prompt,
                                                            "in_doubt")));
    cr_assert_eq(o->calls_executed, 0);

    /* and the operator can decide again */
    pl_outcome *f = resume_ok(e, o, "{\"decision\": \"fail\"}");
    expect_in_doubt_result(f);
    pl_outcome_free(f);
    pl_outcome_free(o);
    cr_assert_eq(count_effects(&w, "risky2", RUN "/0:0"), 2);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A non-idempotent call nested under an idempotent one is in doubt too. */
Test(indoubt, nested_call_in_doubt)
{
    static const pl_in_doubt rules[] = {PL_IN_DOUBT_FAIL, PL_IN_DOUBT_SUSPEND};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        world w;
        world_init(&w);
        pl_registry *reg = doubt_registry(&w, false, rules[i]);
        add_extra(reg, &w, rules[i]);
        crash_run(&w, reg, PL_DURABILITY_SYNC, "{\"tool\": \"wrapper\"}");
        pl_engine *e = t_engine(w.store, reg, PL_DURABILITY_SYNC);
        /* risky's call was made durable, and with it the wrapper's */
        cr_assert_eq(ledger_len(e, "0"), 1);
        cr_assert_eq(ledger_len(e, "0.0"), 1);
        expect_step(e, "0.0", 0, PL_STEP_ACTION_CALL, "wrapper", NULL);
        cr_assert_eq(count_all_lines(&w), 1);

        pl_outcome *o = continue_ok(e);
        if (rules[i] == PL_IN_DOUBT_FAIL) {
            expect_in_doubt_result(o);
            expect_step(e, "0.0", 1, PL_STEP_ACTION_RESULT, "risky",
                        PL_ERR_IN_DOUBT);
        } else {
            cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s",
                         pl_run_status_name(o->status));
            cr_assert_str_eq(o->suspended_path, "0.0");
            cr_assert_str_eq(str_of(o->prompt, "call"), "0.0:0");
            cr_assert_str_eq(str_of(o->prompt, "policy"), "risky");
            pl_outcome *r = resume_ok(e, o, "{\"decision\": \"rerun\"}");
            cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s",
                         r->reason ? r->reason : "");
            cr_assert_str_eq(str_of(pl_outcome_result(r), "key"), RUN "/0.0:0");
            pl_outcome_free(r);
        }
        pl_outcome_free(o);
        cr_assert_eq(count_all_lines(&w), rules[i] == PL_IN_DOUBT_FAIL ? 1 : 2);
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}
