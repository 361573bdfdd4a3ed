/* The replay tests' shared policies and the helpers that run and read them. */
#include "support_replay.h"

pl_engine *open_engine(const char *path, const pl_registry *reg)
{
    return t_engine(path, reg, PL_DURABILITY_PROCESS);
}

pl_outcome *cont(pl_engine *e, const char *id)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, id, NULL);
    cr_assert_eq(st, PL_OK, "pl_run_continue(%s): %s: %s", id,
                 pl_status_name(st), pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

/*
 * Continue a completed run whose code now diverges: a completed run is final,
 * so the replay writes nothing and returns PL_ENONDET.  Returns a copy of the
 * message (caller frees) after checking the run record is untouched.
 */
char *diverge(pl_engine *e, const char *id)
{
    pl_run_info *before = NULL;
    cr_assert_eq(pl_run_get(&before, e, id), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, id, NULL);
    cr_assert_eq(st, PL_ENONDET, "pl_run_continue(%s): %s: %s", id,
                 pl_status_name(st), pl_errmsg());
    cr_assert_null(o, "no outcome for a divergent replay of a completed run");
    char *msg = strdup(pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_COMPLETED, "the record is untouched");
    cr_expect_null(info->reason);
    cr_expect_eq(info->attempts, before->attempts);
    cr_expect_eq(info->updated_us, before->updated_us);
    cr_expect_eq(info->steps, before->steps);
    pl_run_info_free(info);
    pl_run_info_free(before);
    return msg;
}

pl_run_info *get_info(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    cr_assert_eq(st, PL_OK, "pl_run_get(%s): %s", id, pl_errmsg());
    return info;
}

pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, e, id, path);
    cr_assert_eq(st, PL_OK, "pl_run_ledger(%s, %s): %s", id, path, pl_errmsg());
    return l;
}

/* Compact text of the outcome's result; caller frees. */
char *result_text(const pl_outcome *o) { return t_text(pl_outcome_result(o)); }

void expect_str(const char *got, const char *want)
{
    cr_expect(got && strcmp(got, want) == 0, "expected \"%s\", got \"%s\"",
              want, got ? got : "(null)");
}

void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

int call_json(pl_ctx *ctx, const char *policy, const char *json, pl_step **res)
{
    cJSON *p = cJSON_Parse(json ? json : "{}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    int st = pl_ctx_call(res, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    return st == PL_ERESULT ? PL_OK : st; /* an error result is data */
}

/* drift: calls g_tool with {"v": g_value}; returns the callee's result. */
int g_value = 1;

const char *g_tool = "echo";

bool g_reorder; /* build the payload's members in reverse order */

static int drift(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = cJSON_CreateObject();
    if (!g_reorder)
        cJSON_AddNumberToObject(p, "v", g_value);
    if (strcmp(g_tool, "add") == 0) {
        cJSON_AddNumberToObject(p, g_reorder ? "b" : "a",
                                g_reorder ? 1 : g_value);
        cJSON_AddNumberToObject(p, g_reorder ? "a" : "b",
                                g_reorder ? g_value : 1);
    }
    if (g_reorder)
        cJSON_AddNumberToObject(p, "v", g_value);
    pl_action call = {PL_ACTION_VERSION, g_tool, p, NULL, 0, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    cJSON_Delete(p);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* gate: fails the run (PL_EPOLICY) while g_gate_closed; counts runs. */
bool g_gate_closed;

int g_gate_runs;

static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    g_gate_runs++;
    if (g_gate_closed)
        return PL_EPOLICY;
    return pl_steps_add_text(out, NULL, "open");
}

/* drift_gate: calls echo {"v": g_value}, then gate; returns {"ok": true}. */
static int drift_gate(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)a;
    (void)user;
    char buf[64];
    snprintf(buf, sizeof buf, "{\"v\": %d}", g_value);
    int st = call_json(ctx, "echo", buf, NULL);
    if (!st)
        st = call_json(ctx, "gate", NULL, NULL);
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddTrueToObject(r, "ok");
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* outer: calls drift_gate; returns its result. */
static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_step *res = NULL;
    int st = call_json(ctx, "drift_gate", NULL, &res);
    if (st)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

seen_helpers g_seen[4];

int g_helper_runs;

int g_effect_calls;

const char *g_effect_name = "fetch";

static int effect_fn(cJSON **out, void *user)
{
    int *calls = user;
    (*calls)++;
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "body", "external data");
    cJSON_AddNumberToObject(v, "call", *calls);
    *out = v;
    return PL_OK;
}

static int helpers(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    seen_helpers *s = &g_seen[g_helper_runs < 3 ? g_helper_runs : 3];
    g_helper_runs++;
    cJSON *fetched = NULL;
    int st = pl_ctx_now(&s->now, ctx);
    if (!st)
        st = pl_ctx_random(&s->rnd, ctx);
    if (!st)
        st = pl_ctx_uuid(s->uuid, ctx);
    if (!st)
        st = pl_ctx_side_effect(&fetched, ctx, g_effect_name, effect_fn,
                                &g_effect_calls);
    if (st)
        return st;
    char *ft = cJSON_PrintUnformatted(fetched);
    snprintf(s->fetched, sizeof s->fetched, "%s", ft ? ft : "");
    free(ft);
    char rnd[32];
    snprintf(rnd, sizeof rnd, "%016" PRIx64, s->rnd);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "now", (double)s->now);
    cJSON_AddStringToObject(r, "random", rnd);
    cJSON_AddStringToObject(r, "uuid", s->uuid);
    cJSON_AddItemToObject(r, "fetched", fetched);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

snap g_snaps[8];

int g_nsnaps;

static int take_snap(pl_ctx *ctx)
{
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    snap *s = &g_snaps[g_nsnaps < 7 ? g_nsnaps : 7];
    g_nsnaps++;
    memset(s, 0, sizeof *s);
    s->n = pl_steps_count(l);
    for (size_t i = 0; i < s->n && i < SNAP_MAX; i++) {
        const pl_step *x = pl_steps_at(l, i);
        snprintf(s->ids[i], sizeof s->ids[i], "%s", pl_step_id(x));
        s->types[i] = pl_step_type_of(x);
        snprintf(s->actors[i], sizeof s->actors[i], "%s", pl_step_actor(x));
    }
    return PL_OK;
}

static int reader(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = take_snap(ctx);
    if (!st)
        st = call_json(ctx, "echo", "{\"i\": 0}", NULL);
    if (!st)
        st = call_json(ctx, "echo", "{\"i\": 1}", NULL);
    if (!st)
        st = take_snap(ctx);
    if (st)
        return st;
    return pl_steps_add_text(out, NULL, "read");
}

/* peek: a sub-policy that reports its own ledger. */
static int peek(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = take_snap(ctx);
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "n", (double)g_snaps[g_nsnaps - 1].n);
    cJSON_AddStringToObject(r, "path", pl_ctx_path(ctx));
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* seeder: calls peek without a seed, then with two seed steps. */
static int seeder(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_json(ctx, "peek", NULL, NULL);
    if (st)
        return st;
    pl_steps *seed = NULL;
    st = pl_steps_new(&seed);
    if (!st)
        st = pl_steps_add_text(seed, "system", "you are a helper");
    if (!st)
        st = pl_steps_add_text(seed, "user", "hello");
    pl_step *res = NULL;
    if (!st) {
        pl_action call = {
            PL_ACTION_VERSION, "peek", pl_json_empty(), NULL, 0, seed};
        st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    }
    pl_steps_free(seed);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* peek_wait: reports its ledger, then waits for a human. */
static int peek_wait(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = take_snap(ctx);
    if (st)
        return st;
    cJSON *prompt = cJSON_CreateObject();
    cJSON_AddStringToObject(prompt, "q", "go on?");
    cJSON *ans = NULL;
    st = pl_ctx_suspend(&ans, ctx, prompt);
    cJSON_Delete(prompt);
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "seen", (double)g_snaps[g_nsnaps - 1].n);
    cJSON_AddItemToObject(r, "answer", ans);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* seeded_wait: calls peek_wait with a seed whose text is g_seed_text. */
const char *g_seed_text = "hello";

static int seeded_wait(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)a;
    (void)user;
    pl_steps *seed = NULL;
    int st = pl_steps_new(&seed);
    if (!st)
        st = pl_steps_add_text(seed, "user", g_seed_text);
    pl_step *res = NULL;
    if (!st) {
        pl_action call = {
            PL_ACTION_VERSION, "peek_wait", pl_json_empty(), NULL, 0, seed};
        st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    }
    pl_steps_free(seed);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* keyed_root / keyed: idempotency keys, as seen by each execution. */
char g_root_keys[4][256];

static int g_nroot_keys;

char g_keys[4][256];

char g_key_paths[4][64];

int g_nkeys;

static int keyed(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int i = g_nkeys < 3 ? g_nkeys : 3;
    g_nkeys++;
    snprintf(g_keys[i], sizeof g_keys[i], "%s", pl_ctx_idempotency_key(ctx));
    snprintf(g_key_paths[i], sizeof g_key_paths[i], "%s", pl_ctx_path(ctx));
    if (g_gate_closed)
        return PL_EPOLICY;
    return pl_steps_add_text(out, NULL, "charged");
}

static int keyed_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)a;
    (void)user;
    int i = g_nroot_keys < 3 ? g_nroot_keys : 3;
    g_nroot_keys++;
    snprintf(g_root_keys[i], sizeof g_root_keys[i], "%s",
             pl_ctx_idempotency_key(ctx));
    int st = call_json(ctx, "echo", "{\"first\": true}", NULL);
    if (!st)
        st = call_json(ctx, "keyed", "{\"amount\": 10}", NULL);
    if (st)
        return st;
    return pl_steps_add_text(out, NULL, "paid");
}

/* probe: calls payload.call with payload.with; reports what came back. */
static int probe(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "call");
    const cJSON *with = cJSON_GetObjectItemCaseSensitive(a->payload, "with");
    pl_action call = {PL_ACTION_VERSION,
                      cJSON_IsString(name) ? name->valuestring : "echo",
                      cJSON_IsObject(with) ? with : pl_json_empty(),
                      NULL,
                      0,
                      NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    if (st && st != PL_ERESULT)
        return st;
    cr_assert_eq(st == PL_ERESULT, pl_step_is_error(res),
                 "PL_ERESULT exactly for an error result");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "is_error", pl_step_is_error(res));
    const char *code = pl_step_error_code(res);
    if (code)
        cJSON_AddStringToObject(r, "code", code);
    cJSON_AddStringToObject(r, "actor", pl_step_actor(res));
    cJSON_AddItemToObject(r, "got", cJSON_Duplicate(pl_step_payload(res), 1));
    pl_step_free(res);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* talky: returns g_talk texts, then (if g_talk_result) a result. */
int g_talk = 2;

bool g_talk_result = true;

static int talky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    int st = PL_OK;
    for (int i = 0; !st && i < g_talk; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "line %d", i);
        st = pl_steps_add_text(out, NULL, buf);
    }
    if (!st && g_talk_result)
        st = pl_steps_add_text(out, NULL, "final");
    return st;
}

/*
 * "deep": every place a policy's value goes inside an engine record, at the
 * deepest nesting a payload may have (PL_MAX_JSON_DEPTH containers): the
 * input of a call to "echo" (inside the call's record), a side effect's
 * value (inside its record), a suspend prompt and its answer (inside theirs).
 * Returns the answer.  Its seed step (see the test) sits inside the run's
 * record as well.
 */
cJSON *deepest(void)
{
    cJSON *root = cJSON_CreateObject(), *at = root;
    for (int level = 2; level <= PL_MAX_JSON_DEPTH; level++)
        at = cJSON_AddObjectToObject(at, "d");
    cJSON_AddNumberToObject(at, "bottom", 1);
    return root;
}

static int make_deepest(cJSON **out, void *user)
{
    (void)user;
    *out = deepest();
    return PL_OK;
}

static int deep(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *v = deepest();
    pl_action call = {PL_ACTION_VERSION, "echo", v, NULL, 0, NULL};
    int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    cJSON *effect = NULL, *answer = NULL;
    if (!st)
        st = pl_ctx_side_effect(&effect, ctx, "deepest", make_deepest, NULL);
    if (!st)
        st = pl_ctx_suspend(&answer, ctx, v);
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(v);
    cJSON_Delete(effect);
    cJSON_Delete(answer);
    return st;
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "drift", drift, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "drift_gate", drift_gate, NULL),
                 PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "outer", outer, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "helpers", helpers, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "reader", reader, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "peek", peek, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "seeder", seeder, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "peek_wait", peek_wait, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "seeded_wait", seeded_wait, NULL),
                 PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "keyed", keyed, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "keyed_root", keyed_root, NULL),
                 PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "probe", probe, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "talky", talky, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "deep", deep, NULL), PL_OK);
    return reg;
}

void expect_reader_snaps(const snap *first, const snap *second)
{
    cr_expect_eq(first->n, 0, "a fresh invocation starts empty");
    cr_assert_eq(second->n, 4);
    const pl_step_type types[] = {PL_STEP_ACTION_CALL, PL_STEP_ACTION_RESULT,
                                  PL_STEP_ACTION_CALL, PL_STEP_ACTION_RESULT};
    const char *actors[] = {"reader", "echo", "reader", "echo"};
    for (size_t i = 0; i < 4; i++) {
        char want[16];
        snprintf(want, sizeof want, "0:%zu", i);
        cr_expect_str_eq(second->ids[i], want);
        cr_expect_eq(second->types[i], types[i], "step %zu", i);
        cr_expect_str_eq(second->actors[i], actors[i]);
    }
}
