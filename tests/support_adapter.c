/* The tool adapter tests' shared policies, sleep hook and effects file. */
#include "support_adapter.h"

static pl_decorator g_decos[4];

static size_t g_n_decos;

char g_fx[4400]; /* the effects file */

int g_sleeps; /* waits the sleep hook saw */

int64_t g_sleep_ms[64]; /* what each was asked to wait */

int g_kill_at_sleep; /* SIGKILL in this wait (1-based); 0 never */

int64_t g_seen_deadline; /* pl_ctx_deadline() flaky last saw */

int64_t g_nest_deadline; /* ... and "nest" */

int g_setdl_status; /* pl_ctx_set_deadline(-1) in "setdl" */

const cJSON *member(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

const char *str_member(const cJSON *o, const char *k)
{
    const cJSON *v = member(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

double num_member(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = member(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : 0;
}

static int hit(cJSON **out, void *user)
{
    (void)user;
    FILE *f = fopen(g_fx, "a");
    if (!f || fputc('x', f) == EOF || fclose(f) != 0)
        return PL_EIO;
    *out = cJSON_CreateNumber((double)file_size(g_fx));
    return *out ? PL_OK : PL_ENOMEM;
}

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void real_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/*
 * flaky: {"fail": F, "code": C, "retry_after_ms": R, "tokens": T,
 *         "sleep_ms": S, "past_deadline": true, "big": N}
 */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    g_seen_deadline = pl_ctx_deadline(ctx);
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    int attempt = 1;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        if (pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT)
            attempt++;
    cJSON *n = NULL;
    if ((st = pl_ctx_side_effect(&n, ctx, "hit", hit, NULL)))
        return st;
    cJSON_Delete(n);
    const cJSON *p = a->payload;
    int64_t sleep_ms = (int64_t)num_member(p, "sleep_ms", 0);
    if (sleep_ms > 0)
        real_sleep_ms(sleep_ms);
    if (cJSON_IsTrue(member(p, "past_deadline")) && g_seen_deadline) {
        while (real_ms() <= g_seen_deadline + 20)
            real_sleep_ms(10);
    }
    if (attempt <= (int)num_member(p, "fail", 0)) {
        const char *code = str_member(p, "code");
        cJSON *err = NULL;
        st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", 1, "code",
                          code ? code : PL_ERR_RETRYABLE_SERVER, "message",
                          "the server is busy");
        /* passed on as given, of any type: tools can be wrong */
        const char *const extra[] = {"retry_after_ms", "tokens"};
        for (size_t i = 0; !st && i < 2; i++)
            if (member(p, extra[i]))
                cJSON_AddItemToObject(err, extra[i],
                                      cJSON_Duplicate(member(p, extra[i]),
                                                      true));
        if (!st)
            st = pl_steps_add_result(out, err);
        cJSON_Delete(err);
        return st;
    }
    int big = (int)num_member(p, "big", 0);
    if (big > 0) {
        const char *unit = str_member(p, "unit");
        size_t ul = unit ? strlen(unit) : 1;
        char *data = malloc((size_t)big * ul + 1);
        cr_assert_not_null(data);
        for (int i = 0; i < big; i++)
            memcpy(data + (size_t)i * ul, unit ? unit : "x", ul);
        data[(size_t)big * ul] = '\0';
        st = pl_steps_add_resultf(out, "{s:s}", "data", data);
        free(data);
        return st;
    }
    return pl_steps_add_resultf(out, "{s:b, s:i}", "ok", 1, "attempt", attempt);
}

/* nest: calls flaky (no decorators) and notes its own deadline. */
static int nest(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    g_nest_deadline = pl_ctx_deadline(ctx);
    pl_step *res = NULL;
    pl_action c = PL_ACTION_INIT;
    c.policy = "flaky";
    c.payload = a->payload;
    int st = pl_ctx_call(&res, ctx, &c, NULL, 0);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* setdl: a negative deadline is refused; 0 removes it. */
static int setdl(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    g_setdl_status = pl_ctx_set_deadline(ctx, -1);
    int st = pl_ctx_set_deadline(ctx, 0);
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:I}", "deadline", pl_ctx_deadline(ctx));
}

/* caller: {"tool": name, "args": {...}} -> the tool's result, through
 * g_decos. */
static int caller(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *args = member(a->payload, "args");
    pl_action c = PL_ACTION_INIT;
    c.policy = str_member(a->payload, "tool");
    c.payload = cJSON_IsObject(args) ? args : pl_json_empty();
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &c, g_decos, g_n_decos);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static int sleep_hook(int64_t ms, void *user)
{
    (void)user;
    cr_assert_geq(ms, 0, "a wait of %lld ms", (long long)ms);
    if (g_sleeps < 64)
        g_sleep_ms[g_sleeps] = ms;
    g_sleeps++;
    if (g_kill_at_sleep && g_sleeps == g_kill_at_sleep)
        raise(SIGKILL);
    return PL_OK;
}

pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {
        {"caller", caller}, {"flaky", flaky}, {"nest", nest}, {"setdl", setdl}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

pl_engine *open_engine(const char *store, const pl_registry *reg,
                       pl_event_fn on_event, void *user)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = on_event;
    o.event_user = user;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

void fresh_fx(const char *dir)
{
    snprintf(g_fx, sizeof g_fx, "%s/effects", dir);
}

/* Run caller -> tool with @p args_json through the decorators given. */
pl_outcome *run_tool(pl_engine *e, const char *id, const char *tool,
                     const char *args_json)
{
    char payload[4096];
    snprintf(payload, sizeof payload, "{\"tool\": \"%s\", \"args\": %s}", tool,
             args_json);
    return t_start(e, "caller", payload, id);
}

void set_decos(size_t n, const pl_decorator *d)
{
    if (n)
        memcpy(g_decos, d, n * sizeof *d);
    g_n_decos = n;
}

pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, path), PL_OK, "%s", pl_errmsg());
    return l;
}

/* Side effects named @p name in a ledger. */
int count_effects(const pl_steps *l, const char *name)
{
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        const char *got = str_member(pl_step_payload(s), "name");
        if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT && got &&
            strcmp(got, name) == 0)
            n++;
    }
    return n;
}

int count_type(const pl_steps *l, pl_step_type type)
{
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        n += pl_step_type_of(pl_steps_at(l, i)) == type;
    return n;
}

void expect_code(const pl_outcome *o, const char *code)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "?");
    const char *got = str_member(pl_outcome_result(o), "code");
    cr_expect(got && strcmp(got, code) == 0, "expected %s, got %s", code,
              got ? got : "(no code)");
}

void expect_ok(const pl_outcome *o)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "?");
    cr_expect(cJSON_IsTrue(member(pl_outcome_result(o), "ok")), "result: %s",
              t_text(pl_outcome_result(o)));
}

void expect_msg(const char *needle)
{
    cr_expect(strstr(pl_errmsg(), needle) != NULL, "expected \"%s\" in: %s",
              needle, pl_errmsg());
}

/* Continue a completed run: the outcome must be the same, and nothing
 * executes, waits or touches the effects file. */
void expect_replay_still(pl_engine *e, const char *id, const pl_outcome *first)
{
    int sleeps = g_sleeps;
    long hits = file_size(g_fx);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    char *a = t_text(pl_outcome_result(o)),
         *b = t_text(pl_outcome_result(first));
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(g_sleeps, sleeps, "a replay waited");
    cr_expect_eq(file_size(g_fx), hits, "a replay executed an attempt");
    pl_outcome_free(o);
}

pl_retry_options retry_opts(unsigned attempts)
{
    pl_retry_options o = PL_RETRY_OPTIONS_INIT;
    o.max_attempts = attempts;
    o.sleep = sleep_hook;
    return o;
}
