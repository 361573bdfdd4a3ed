/*
 * test_indoubt.c -- in-doubt calls (docs/design.md §5;
 * pl_policy_def.idempotent and .in_doubt in policyledger.h;
 * core/replay/call.c resolve_call, core/replay/indoubt.c).
 *
 * A non-idempotent tool ("risky") appends a line to an effects file and, on
 * its first execution only (a marker file remembers it across the process
 * restart), SIGKILLs its own process inside its body, after the side
 * effect.  The root calls it once and returns its result unchanged.  A
 * forked child runs the run and dies; the parent recovers it and checks what
 * each rule does:
 *   PL_IN_DOUBT_RERUN    the call executes again (two lines) and completes;
 *   PL_IN_DOUBT_FAIL     it does not execute; its result is an "InDoubt"
 *                        error result, which the root passes through;
 *   PL_IN_DOUBT_SUSPEND  the run suspends with a prompt {"in_doubt": true,
 *                        "call": ..., "policy": ...}; resuming with
 *                        {"decision": "rerun" | "fail" | "result"} decides.
 * Also: a non-idempotent call's action_call is durable before the callee
 * runs, while nothing of an idempotent call is; an idempotent tool killed in
 * its body is simply re-run; and runs that failed or suspended (rather than
 * crashed) with a call open, or that crashed after the call's result was
 * durable, get no in-doubt handling.
 */
#include "support.h"

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

#define RUN "doubt-1"

/* ---- the outside world ------------------------------------------------------ */

typedef struct world {
    char store[4300];
    char effects[4300];
    char marker[4300];      /* exists once "risky" has died once */
    char kill_marker[4300]; /* the same for "killer" */
} world;

static void world_init(world *w)
{
    const char *dir = t_tmpdir();
    t_store_in(w->store, sizeof w->store, dir, "store.db");
    snprintf(w->effects, sizeof w->effects, "%s/effects", dir);
    snprintf(w->marker, sizeof w->marker, "%s/risky.died", dir);
    snprintf(w->kill_marker, sizeof w->kill_marker, "%s/killer.died", dir);
}

static int append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        return -1;
    size_t n = strlen(line);
    ssize_t w = write(fd, line, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Create @p path; true if this call created it (first time). */
static bool first_time(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* Lines in the effects file that start with "<tool> <key>\n". */
static int count_effects(const world *w, const char *tool, const char *key)
{
    FILE *f = fopen(w->effects, "r");
    if (!f)
        return 0;
    char line[1024], want[512];
    snprintf(want, sizeof want, "%s %s\n", tool, key);
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strcmp(line, want) == 0;
    fclose(f);
    return n;
}

static int count_all_lines(const world *w)
{
    FILE *f = fopen(w->effects, "r");
    if (!f)
        return 0;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

/* ---- policies ----------------------------------------------------------------- */

static int result_done(pl_steps *out, const char *tool, const char *key)
{
    cJSON *r = cJSON_CreateObject();
    if (!r || !cJSON_AddBoolToObject(r, "done", 1) ||
        !cJSON_AddStringToObject(r, "by", tool) ||
        !cJSON_AddStringToObject(r, "key", key)) {
        cJSON_Delete(r);
        return PL_ENOMEM;
    }
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Side effect, then (first execution only) SIGKILL inside the body. */
static int risky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    const world *w = user;
    const char *key = pl_ctx_idempotency_key(ctx);
    char line[512];
    snprintf(line, sizeof line, "risky %s\n", key);
    if (append_line(w->effects, line))
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                  "cannot write the effect");
    if (first_time(w->marker))
        raise(SIGKILL);
    return result_done(out, "risky", key);
}

/* Side effect, then (first execution only) fail the run: not a crash. */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    const world *w = user;
    const char *key = pl_ctx_idempotency_key(ctx);
    char line[512];
    snprintf(line, sizeof line, "flaky %s\n", key);
    if (append_line(w->effects, line))
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                  "cannot write the effect");
    if (first_time(w->marker))
        return PL_EPOLICY;
    return result_done(out, "flaky", key);
}

/* Ask a human first; act on the answer. */
static int asker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    const world *w = user;
    cJSON *prompt = cJSON_CreateObject(), *answer = NULL;
    cJSON_AddStringToObject(prompt, "question", "ship it?");
    int st = pl_ctx_suspend(&answer, ctx, prompt);
    cJSON_Delete(prompt);
    if (st)
        return st;
    char line[512];
    snprintf(line, sizeof line, "asker %s\n", pl_ctx_idempotency_key(ctx));
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "answer", answer);
    st = append_line(w->effects, line) ? PL_EIO : pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Idempotent, and SIGKILLs itself on its first execution. */
static int killer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    const world *w = user;
    char line[512];
    snprintf(line, sizeof line, "killer %s\n", pl_ctx_idempotency_key(ctx));
    if (append_line(w->effects, line))
        return PL_EIO;
    if (first_time(w->kill_marker))
        raise(SIGKILL);
    return result_done(out, "killer", pl_ctx_idempotency_key(ctx));
}

/* Call payload.tool (default "risky") and return its result unchanged;
 * with payload.then, call that tool afterwards. */
static int root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a->payload, "tool");
    const cJSON *then = cJSON_GetObjectItemCaseSensitive(a->payload, "then");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "amount", 42);
    pl_action call = {PL_ACTION_VERSION,
                      cJSON_IsString(t) ? t->valuestring : "risky",
                      p,
                      NULL,
                      0,
                      NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    if (st == PL_ERESULT) /* an InDoubt error is the result to check */
        st = PL_OK;
    if (!st && cJSON_IsString(then)) {
        pl_step *res2 = NULL;
        pl_action call2 = {
            PL_ACTION_VERSION, then->valuestring, p, NULL, 0, NULL};
        st = pl_ctx_call(&res2, ctx, &call2, NULL, 0);
        if (st == PL_ERESULT)
            st = PL_OK;
        pl_step_free(res2);
    }
    cJSON_Delete(p);
    if (!st)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static pl_registry *doubt_registry(world *w, bool idempotent, pl_in_doubt rule)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
        bool idempotent;
    } defs[] = {{"root", root, true},
                {"risky", risky, idempotent},
                {"flaky", flaky, idempotent},
                {"asker", asker, idempotent},
                {"killer", killer, true}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.user = w;
        d.idempotent = defs[i].idempotent;
        d.in_doubt = rule;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* ---- running, crashing --------------------------------------------------------- */

static int child_start(const world *w, const pl_registry *reg,
                       pl_durability mode, const char *payload)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = mode;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, w->store, reg, &o))
        return 10;
    cJSON *p = cJSON_Parse(payload);
    pl_action a = {PL_ACTION_VERSION, "root", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = RUN;
    pl_outcome *out = NULL;
    int st = pl_run_start(&out, e, &a, &ro);
    cJSON_Delete(p);
    pl_outcome_free(out);
    pl_engine_close(e);
    return st ? 11 : 3;
}

/* Start the run in a forked child, which must die of SIGKILL. */
static void crash_run(const world *w, const pl_registry *reg,
                      pl_durability mode, const char *payload)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0)
        _exit(child_start(w, reg, mode, payload));
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) == -1 && errno == EINTR)
        ;
    cr_assert_eq(got, pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the run should have been killed inside its tool, but the "
              "child %s %d",
              WIFEXITED(status) ? "exited with" : "died of",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static size_t ledger_len(pl_engine *e, const char *path)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, RUN, path), PL_OK, "%s", pl_errmsg());
    size_t n = pl_steps_count(l);
    pl_steps_free(l);
    return n;
}

/* The type and actor of step @p i of ledger @p path, and its error code. */
static void expect_step(pl_engine *e, const char *path, size_t i,
                        pl_step_type type, const char *actor,
                        const char *error_code)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, RUN, path), PL_OK, "%s", pl_errmsg());
    const pl_step *s = pl_steps_at(l, i);
    cr_assert_not_null(s, "ledger %s has no step %zu", path, i);
    cr_assert_eq(pl_step_type_of(s), type, "step %s: %s, expected %s",
                 pl_step_id(s), pl_step_type_name(pl_step_type_of(s)),
                 pl_step_type_name(type));
    cr_assert_str_eq(pl_step_actor(s), actor, "step %s's actor", pl_step_id(s));
    const char *code = pl_step_error_code(s);
    if (error_code)
        cr_assert(code && strcmp(code, error_code) == 0,
                  "step %s: error code %s, expected %s", pl_step_id(s),
                  code ? code : "(none)", error_code);
    else
        cr_assert_null(code, "step %s is an error result (%s)", pl_step_id(s),
                       code);
    pl_steps_free(l);
}

/*
 * After the kill inside the tool: what is durable.  A non-idempotent call's
 * action_call was made durable before the tool ran; an idempotent call has
 * nothing durable until its result.
 */
static pl_engine *open_after_crash(const world *w, const pl_registry *reg,
                                   bool idempotent, const char *tool)
{
    pl_engine *e = t_engine(w->store, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, RUN), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert(!info->owner_alive, "the killed process counts as alive");
    pl_run_info_free(info);
    if (idempotent) {
        cr_assert_eq(ledger_len(e, "0"), 0,
                     "nothing of an idempotent call "
                     "is durable before its result");
    } else {
        cr_assert_eq(ledger_len(e, "0"), 1, "the action_call (only)");
        expect_step(e, "0", 0, PL_STEP_ACTION_CALL, "root", NULL);
        pl_steps *l = NULL;
        cr_assert_eq(pl_run_ledger(&l, e, RUN, "0"), PL_OK);
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(pl_steps_at(l, 0)), "policy");
        cr_assert(cJSON_IsString(pol) && strcmp(pol->valuestring, tool) == 0,
                  "the durable action_call names %s", tool);
        cr_assert_str_eq(pl_step_id(pl_steps_at(l, 0)), "0:0");
        pl_steps_free(l);
    }
    cr_assert_eq(ledger_len(e, "0.0"), 0, "the tool died before returning");
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(count_all_lines(w), 1, "the effect happened once");
    return e;
}

static const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The outcome completed and its result is the tool's own, not an error. */
static void expect_tool_result(const pl_outcome *o, const char *tool)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "status %s: %s",
                 pl_run_status_name(o->status), o->reason ? o->reason : "");
    const cJSON *r = pl_outcome_result(o);
    char *txt = t_text(r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "done")),
              "the tool's own result, not %s", txt);
    cr_assert_str_eq(str_of(r, "by"), tool);
    cr_assert_str_eq(str_of(r, "key"), RUN "/0:0", "%s", txt);
    free(txt);
}

/* The outcome completed and its result is an "InDoubt" error. */
static void expect_in_doubt_result(const pl_outcome *o)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "status %s: %s",
                 pl_run_status_name(o->status), o->reason ? o->reason : "");
    const cJSON *r = pl_outcome_result(o);
    char *txt = t_text(r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")),
              "an error result, not %s", txt);
    cr_assert_str_eq(str_of(r, "code"), PL_ERR_IN_DOUBT, "%s", txt);
    free(txt);
}

static pl_outcome *continue_ok(pl_engine *e)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, RUN, NULL);
    cr_assert_eq(st, PL_OK, "pl_run_continue: %s", pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

/* Crash "risky" under @p rule and recover once. */
static pl_outcome *crash_and_recover(world *w, pl_registry **reg_out,
                                     pl_engine **e_out, bool idempotent,
                                     pl_in_doubt rule, pl_durability mode)
{
    world_init(w);
    pl_registry *reg = doubt_registry(w, idempotent, rule);
    crash_run(w, reg, mode, "{}");
    cr_assert(file_exists(w->marker));
    pl_engine *e = open_after_crash(w, reg, idempotent, "risky");
    pl_outcome *o = continue_ok(e);
    *reg_out = reg;
    *e_out = e;
    return o;
}

/* ---- the rules ------------------------------------------------------------------- */

Test(indoubt, rerun_executes_again)
{
    static const pl_durability modes[] = {
        PL_DURABILITY_SYNC, PL_DURABILITY_GROUP, PL_DURABILITY_PROCESS};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        world w;
        pl_registry *reg;
        pl_engine *e;
        pl_outcome *o = crash_and_recover(&w, &reg, &e, false,
                                          PL_IN_DOUBT_RERUN, modes[m]);
        expect_tool_result(o, "risky");
        cr_assert_eq(o->calls_executed, 1);
        cr_assert_eq(o->calls_served, 0);
        pl_outcome_free(o);
        cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 2,
                     "%s: executed twice, under one key",
                     pl_durability_name(modes[m]));
        cr_assert_eq(count_all_lines(&w), 2);
        /* call, result, the root's result: no suspend, no error */
        cr_assert_eq(ledger_len(e, "0"), 3);
        expect_step(e, "0", 1, PL_STEP_ACTION_RESULT, "risky", NULL);
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

Test(indoubt, fail_gives_in_doubt_error)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *o = crash_and_recover(&w, &reg, &e, false, PL_IN_DOUBT_FAIL,
                                      PL_DURABILITY_SYNC);
    expect_in_doubt_result(o);
    cr_assert_eq(o->calls_executed, 0, "the in-doubt call is not executed");
    pl_outcome_free(o);
    cr_assert_eq(count_all_lines(&w), 1, "no second execution");
    expect_step(e, "0", 0, PL_STEP_ACTION_CALL, "root", NULL);
    expect_step(e, "0", 1, PL_STEP_ACTION_RESULT, "risky", PL_ERR_IN_DOUBT);
    expect_step(e, "0", 2, PL_STEP_ACTION_RESULT, "root", PL_ERR_IN_DOUBT);
    cr_assert_eq(ledger_len(e, "0"), 3);
    cr_assert_eq(ledger_len(e, "0.0"), 0);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());

    /* the decision is recorded: replaying the run serves it */
    o = continue_ok(e);
    expect_in_doubt_result(o);
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->calls_served, 1);
    pl_outcome_free(o);
    cr_assert_eq(count_all_lines(&w), 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Crash under PL_IN_DOUBT_SUSPEND: the run suspends for a human. */
static pl_outcome *suspended_in_doubt(world *w, pl_registry **reg,
                                      pl_engine **e)
{
    pl_outcome *o = crash_and_recover(w, reg, e, false, PL_IN_DOUBT_SUSPEND,
                                      PL_DURABILITY_SYNC);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "status %s: %s",
                 pl_run_status_name(o->status), o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_not_null(o->resume_token);
    cr_assert_str_eq(o->suspended_path, "0");
    cr_assert_not_null(o->prompt);
    char *txt = t_text(o->prompt);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o->prompt,
                                                            "in_doubt")),
              "prompt %s", txt);
    cr_assert_str_eq(str_of(o->prompt, "call"), "0:0", "prompt %s", txt);
    cr_assert_str_eq(str_of(o->prompt, "policy"), "risky", "prompt %s", txt);
    free(txt);
    cr_assert_eq(count_all_lines(w), 1, "suspending executes nothing");
    /* the engine's suspend follows the open call */
    cr_assert_eq(ledger_len(*e, "0"), 2);
    expect_step(*e, "0", 1, PL_STEP_SUSPEND, "engine", NULL);

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, *e, RUN), PL_OK);
    cr_assert_eq(info->status, PL_RUN_SUSPENDED);
    cr_assert_not_null(info->prompt);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(info->prompt,
                                                            "in_doubt")));
    pl_run_info_free(info);

    /* it waits: continuing is refused, a wrong token too */
    pl_outcome *none = NULL;
    cr_assert_eq(pl_run_continue(&none, *e, RUN, NULL), PL_ESTATE);
    cr_assert_null(none);
    cJSON *ans = t_json("{\"decision\": \"rerun\"}");
    cr_assert_eq(pl_run_resume(&none, *e, RUN, "not-the-token", ans),
                 PL_ETOKEN);
    cr_assert_null(none);
    cJSON_Delete(ans);
    cr_assert_eq(count_all_lines(w), 1);
    return o;
}

static pl_outcome *resume_ok(pl_engine *e, const pl_outcome *susp,
                             const char *answer)
{
    cJSON *a = t_json(answer);
    pl_outcome *o = NULL;
    int st = pl_run_resume(&o, e, RUN, susp->resume_token, a);
    cJSON_Delete(a);
    cr_assert_eq(st, PL_OK, "pl_run_resume: %s", pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

Test(indoubt, suspend_then_rerun)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    pl_outcome *o = resume_ok(e, s, "{\"decision\": \"rerun\"}");
    expect_tool_result(o, "risky");
    cr_assert_eq(o->calls_executed, 1);
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 2,
                 "the rerun executed it again");
    /* call, engine suspend, human resume, result, root's result */
    cr_assert_eq(ledger_len(e, "0"), 5);
    expect_step(e, "0", 2, PL_STEP_RESUME, "human", NULL);
    expect_step(e, "0", 3, PL_STEP_ACTION_RESULT, "risky", NULL);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(indoubt, suspend_then_fail)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    pl_outcome *o = resume_ok(e, s, "{\"decision\": \"fail\"}");
    expect_in_doubt_result(o);
    cr_assert_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_all_lines(&w), 1, "not executed again");
    expect_step(e, "0", 3, PL_STEP_ACTION_RESULT, "risky", PL_ERR_IN_DOUBT);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(indoubt, suspend_then_result)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    pl_outcome *o = resume_ok(e, s,
                              "{\"decision\": \"result\", \"result\": "
                              "{\"done\": true, \"by\": \"operator\", "
                              "\"ref\": \"ch_123\"}}");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, 0);
    char *got = t_text(pl_outcome_result(o));
    cr_assert_str_eq(got, "{\"done\":true,\"by\":\"operator\",\"ref\":"
                          "\"ch_123\"}");
    free(got);
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_all_lines(&w), 1, "not executed again");
    /* the object is the call's recorded result */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, RUN, "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 5);
    const pl_step *r = pl_steps_at(l, 3);
    cr_assert_eq(pl_step_type_of(r), PL_STEP_ACTION_RESULT);
    cr_assert_str_eq(pl_step_actor(r), "risky");
    cr_assert_str_eq(str_of(pl_step_payload(r), "ref"), "ch_123");
    pl_steps_free(l);
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* An answer without a valid decision never executes the call. */
Test(indoubt, suspend_bad_decision_does_not_execute)
{
    world w;
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *s = suspended_in_doubt(&w, &reg, &e);
    cJSON *a = t_json("{\"decision\": \"maybe\"}");
    pl_outcome *o = NULL;
    int st = pl_run_resume(&o, e, RUN, s->resume_token, a);
    cJSON_Delete(a);
    if (st == PL_OK) {
        cr_assert_eq(o->calls_executed, 0);
        if (o->status == PL_RUN_COMPLETED)
            cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                          pl_outcome_result(o), "error")),
                      "an unclear answer must not become a success");
    }
    pl_outcome_free(o);
    pl_outcome_free(s);
    cr_assert_eq(count_all_lines(&w), 1, "not executed again");
    cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- durability of the call, idempotent tools ------------------------------------- */

Test(indoubt, call_durability_before_the_callee_runs)
{
    /* non-idempotent: open_after_crash checks the durable action_call */
    world w1;
    world_init(&w1);
    pl_registry *reg = doubt_registry(&w1, false, PL_IN_DOUBT_FAIL);
    crash_run(&w1, reg, PL_DURABILITY_SYNC, "{}");
    pl_engine *e = open_after_crash(&w1, reg, false, "risky");
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, RUN), PL_OK);
    cr_assert_geq(info->attempts, 1);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);

    /* idempotent, killed at the same point: nothing of the call */
    world w2;
    world_init(&w2);
    reg = doubt_registry(&w2, true, PL_IN_DOUBT_FAIL);
    crash_run(&w2, reg, PL_DURABILITY_SYNC, "{}");
    e = open_after_crash(&w2, reg, true, "risky");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(indoubt, idempotent_tool_is_rerun_without_in_doubt_handling)
{
    /* its in_doubt rule says suspend, but applies to non-idempotent tools */
    static const pl_in_doubt rules[] = {PL_IN_DOUBT_SUSPEND, PL_IN_DOUBT_FAIL};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        world w;
        pl_registry *reg;
        pl_engine *e;
        pl_outcome *o = crash_and_recover(&w, &reg, &e, true, rules[i],
                                          PL_DURABILITY_SYNC);
        expect_tool_result(o, "risky");
        cr_assert_eq(o->calls_executed, 1);
        pl_outcome_free(o);
        cr_assert_eq(count_effects(&w, "risky", RUN "/0:0"), 2);
        cr_assert_eq(ledger_len(e, "0"), 3, "call, result, root's result");
        cr_assert_eq(pl_run_verify(e, RUN), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_registry_free(reg);
    }
}

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
