/* What the tests of test_indoubt*.c share. */
#include "support_indoubt.h"

void world_init(world *w)
{
    const char *dir = t_tmpdir();
    t_store_in(w->store, sizeof w->store, dir, "store.db");
    snprintf(w->effects, sizeof w->effects, "%s/effects", dir);
    snprintf(w->marker, sizeof w->marker, "%s/risky.died", dir);
    snprintf(w->kill_marker, sizeof w->kill_marker, "%s/killer.died", dir);
}

int append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        return -1;
    size_t n = strlen(line);
    ssize_t w = write(fd, line, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/* Create @p path; true if this call created it (first time). */
bool first_time(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* Lines in the effects file that start with "<tool> <key>\n". */
int count_effects(const world *w, const char *tool, const char *key)
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

int count_all_lines(const world *w)
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

int result_done(pl_steps *out, const char *tool, const char *key)
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

pl_registry *doubt_registry(world *w, bool idempotent, pl_in_doubt rule)
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
void crash_run(const world *w, const pl_registry *reg, pl_durability mode,
               const char *payload)
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

size_t ledger_len(pl_engine *e, const char *path)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, RUN, path), PL_OK, "%s", pl_errmsg());
    size_t n = pl_steps_count(l);
    pl_steps_free(l);
    return n;
}

/* The type and actor of step @p i of ledger @p path, and its error code. */
void expect_step(pl_engine *e, const char *path, size_t i, pl_step_type type,
                 const char *actor, const char *error_code)
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
pl_engine *open_after_crash(const world *w, const pl_registry *reg,
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

const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The outcome completed and its result is the tool's own, not an error. */
void expect_tool_result(const pl_outcome *o, const char *tool)
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
void expect_in_doubt_result(const pl_outcome *o)
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

pl_outcome *continue_ok(pl_engine *e)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, RUN, NULL);
    cr_assert_eq(st, PL_OK, "pl_run_continue: %s", pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

pl_outcome *resume_ok(pl_engine *e, const pl_outcome *susp, const char *answer)
{
    cJSON *a = t_json(answer);
    pl_outcome *o = NULL;
    int st = pl_run_resume(&o, e, RUN, susp->resume_token, a);
    cJSON_Delete(a);
    cr_assert_eq(st, PL_OK, "pl_run_resume: %s", pl_errmsg());
    cr_assert_not_null(o);
    return o;
}
