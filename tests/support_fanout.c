/* What the tests of test_fanout*.c share. */
#include "support_fanout.h"

static char effects_path[4096];

atomic_int sleeper_runs, flaky_runs, later_runs;

int get_int(const cJSON *o, const char *k, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

static void add_effect(int id)
{
    if (!effects_path[0])
        return;
    int fd = open(effects_path, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0)
        return;
    char line[32];
    int n = snprintf(line, sizeof line, "%d\n", id);
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static int sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    int ms = get_int(a->payload, "ms", 0);
    int id = get_int(a->payload, "id", -1);
    atomic_fetch_add(&sleeper_runs, 1);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    add_effect(id);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "id", id);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* The first attempt fails with a retryable error, the second succeeds. */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)user;
    if (atomic_fetch_add(&flaky_runs, 1) == 0)
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER, "try again");
    cJSON *r = t_json("{\"ok\": true}");
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *prompt = t_json("{\"question\": \"go?\"}");
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, prompt);
    cJSON_Delete(prompt);
    if (st)
        return st;
    st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static int count_later(cJSON **out, void *user)
{
    (void)user;
    atomic_fetch_add(&later_runs, 1);
    *out = t_json("{\"done\": true}");
    return PL_OK;
}

/* Its effect goes through the context: recorded once. */
static int later(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, "later", count_later, NULL);
    if (st)
        return st;
    st = pl_steps_add_result(out, v);
    cJSON_Delete(v);
    return st;
}

/* Dies (SIGKILL) while g_die_in_charge is set: in flight at a crash. */
bool g_die_in_charge;

static int charge(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    add_effect(9);
    if (g_die_in_charge)
        raise(SIGKILL);
    return pl_steps_add_result(out, a->payload);
}

static int no_sleep(int64_t ms, void *user)
{
    (void)ms, (void)user;
    return PL_OK;
}

static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(a->payload, "calls");
    int n = cJSON_GetArraySize(calls);
    cr_assert(n > 0 && n <= MAX_CALLS);
    pl_action acts[MAX_CALLS];
    pl_call_spec specs[MAX_CALLS];
    pl_decorator retry[MAX_CALLS];
    pl_retry_options ro = PL_RETRY_OPTIONS_INIT;
    ro.base_ms = 1;
    ro.max_backoff_ms = 2;
    ro.sleep = no_sleep;
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(calls, i);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "policy");
        const cJSON *pl = cJSON_GetObjectItemCaseSensitive(c, "payload");
        acts[i] = (pl_action)PL_ACTION_INIT;
        acts[i].policy = p->valuestring;
        acts[i].payload = pl ? pl : pl_json_empty();
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &acts[i];
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "retry"))) {
            cr_assert_eq(pl_decorator_retry(&retry[i], &ro), PL_OK);
            specs[i].decorators = &retry[i];
            specs[i].n_decorators = 1;
        }
    }
    pl_step *res[MAX_CALLS];
    int st = pl_ctx_call_all(res, ctx, specs, (size_t)n);
    if (st && st != PL_ERESULT) { /* error results are data here */
        for (int i = 0; i < n; i++)
            cr_assert_null(res[i], "no results on failure");
        return st;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "results");
    bool errors = false;
    for (int i = 0; i < n; i++)
        errors = errors || pl_step_is_error(res[i]);
    cr_assert_eq(st == PL_ERESULT, errors,
                 "PL_ERESULT exactly when a "
                 "result is an error");
    for (int i = 0; i < n; i++) {
        cr_assert_not_null(res[i]);
        cJSON_AddItemToArray(arr,
                             cJSON_Duplicate(pl_step_payload(res[i]), true));
        pl_step_free(res[i]);
    }
    st = pl_steps_add_result(out, o);
    cJSON_Delete(o);
    return st;
}

/* Bad arguments, one per payload "case". */
static int badargs(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *which = cJSON_GetObjectItemCaseSensitive(a->payload, "case")
                            ->valuestring;
    pl_action act = PL_ACTION_INIT;
    act.policy = "echo";
    act.payload = pl_json_empty();
    pl_call_spec spec = PL_CALL_SPEC_INIT;
    spec.action = &act;
    pl_step *res[2] = {NULL, NULL};
    int st;
    if (strcmp(which, "zero") == 0) {
        st = pl_ctx_call_all(res, ctx, &spec, 0);
        cr_expect_eq(st, PL_EINVAL);
        cr_expect(strstr(pl_errmsg(), "zero calls"), "%s", pl_errmsg());
        st = pl_ctx_call_all(res, ctx, NULL, 1);
        cr_expect_eq(st, PL_EINVAL);
        st = pl_ctx_call_all(NULL, ctx, &spec, PL_CALL_ALL_MAX + 1);
        cr_expect_eq(st, PL_ELIMIT);
        /* none of these stopped the run: a real fan-out still works */
        st = pl_ctx_call_all(res, ctx, &spec, 1);
        cr_expect_eq(st, PL_OK, "%s", pl_errmsg());
        pl_step_free(res[0]);
        return st ? st : pl_steps_add_text(out, NULL, "ok");
    }
    if (strcmp(which, "null_policy") == 0)
        act.policy = NULL;
    else if (strcmp(which, "no_init") == 0)
        spec.version = 0;
    else if (strcmp(which, "null_action") == 0)
        spec.action = NULL;
    st = pl_ctx_call_all(res, ctx, &spec, 1);
    cr_expect_null(res[0]);
    return st;
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"fan", fan}, {"sleeper", sleeper}, {"flaky", flaky},
                {"ask", ask}, {"later", later},     {"badargs", badargs}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    /* not idempotent: after a crash inside, its in-doubt rule decides */
    static const struct {
        const char *name;
        pl_in_doubt rule;
    } charges[] = {{"charge_fail", PL_IN_DOUBT_FAIL},
                   {"charge_ask", PL_IN_DOUBT_SUSPEND}};
    for (size_t i = 0; i < 2; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = charges[i].name;
        d.fn = charge;
        d.idempotent = false;
        d.in_doubt = charges[i].rule;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

void use_effects(void)
{
    snprintf(effects_path, sizeof effects_path, "%s/effects", t_tmpdir());
}

/* How many times each id is in the effects file. */
void count_effects(int *counts, int n)
{
    memset(counts, 0, (size_t)n * sizeof *counts);
    FILE *f = fopen(effects_path, "r");
    if (!f)
        return;
    int id;
    while (fscanf(f, "%d", &id) == 1)
        if (id >= 0 && id < n)
            counts[id]++;
    fclose(f);
}

/* {"calls": [sleeper i sleeping ms[i]...]} */
char *sleepers_payload(const int *ms, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *calls = cJSON_AddArrayToObject(o, "calls");
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "policy", "sleeper");
        cJSON *p = cJSON_AddObjectToObject(c, "payload");
        cJSON_AddNumberToObject(p, "id", i);
        cJSON_AddNumberToObject(p, "ms", ms[i]);
        cJSON_AddItemToArray(calls, c);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, e, id, path);
    cr_assert_eq(st, PL_OK, "pl_run_ledger(%s): %s", path, pl_errmsg());
    return l;
}

void expect_json(const cJSON *got, const char *want_json)
{
    cJSON *want = t_json(want_json);
    char *g = got ? t_text(got) : NULL;
    cr_expect(got && cJSON_Compare(got, want, true), "expected %s, got %s",
              want_json, g ? g : "(null)");
    free(g);
    cJSON_Delete(want);
}

const char *const want4 =
    "{\"results\": [{\"id\": 0}, {\"id\": 1}, {\"id\": 2}, {\"id\": 3}]}";
