/* What the tests of test_errors*.c share. */
#include "support_errors.h"

pl_engine *open_engine(const pl_registry *reg)
{
    return t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
}

void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

bool run_exists(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    pl_run_info_free(info);
    return st == PL_OK;
}

/* A JSON object {"s": "xxxx..."} of about @p n bytes. */
cJSON *big_object(size_t n)
{
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    memset(s, 'x', n);
    s[n] = '\0';
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "s", s);
    free(s);
    return o;
}

int g_call_status;

static int effect_ok(cJSON **out, void *user)
{
    (void)user;
    *out = cJSON_CreateObject();
    return PL_OK;
}

static int effect_big(cJSON **out, void *user)
{
    (void)user;
    *out = big_object(4 * MAX_PAYLOAD);
    return PL_OK;
}

static int noop_deco(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                     const pl_decorator *self, pl_next *next)
{
    (void)self;
    return pl_next_call(next, ctx, a, out);
}

/*
 * misuse: makes the call that payload.mode names and returns its status
 * (kept in g_call_status).
 */
static int misuse(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(a->payload, "mode");
    const char *mode = cJSON_IsString(m) ? m->valuestring : "";
    int st = PL_OK;
    if (strcmp(mode, "null_name") == 0) {
        pl_action call = {
            PL_ACTION_VERSION, NULL, pl_json_empty(), NULL, 0, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    } else if (strcmp(mode, "bad_name") == 0) {
        pl_action call = {
            PL_ACTION_VERSION, "bad\nname", pl_json_empty(), NULL, 0, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    } else if (strcmp(mode, "null_action") == 0) {
        st = pl_ctx_call(NULL, ctx, NULL, NULL, 0);
    } else if (strcmp(mode, "no_actions") == 0) {
        pl_action call = {
            PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 2, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    } else if (strcmp(mode, "bad_action_name") == 0) {
        const char *names[] = {"echo", ""};
        pl_action call = {
            PL_ACTION_VERSION, "echo", pl_json_empty(), names, 2, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    } else if (strcmp(mode, "no_decorators") == 0) {
        pl_action call = {
            PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 1);
    } else if (strcmp(mode, "decorator_without_fn") == 0) {
        pl_decorator d[2] = {{PL_DECORATOR_VERSION, noop_deco, "noop", 0, NULL},
                             {PL_DECORATOR_VERSION, NULL, "broken", 0, NULL}};
        pl_action call = {
            PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
        st = pl_ctx_call(NULL, ctx, &call, d, 2);
    } else if (strcmp(mode, "array_payload") == 0) {
        cJSON *arr = cJSON_CreateArray();
        pl_action call = {PL_ACTION_VERSION, "echo", arr, NULL, 0, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(arr);
    } else if (strcmp(mode, "big_call") == 0) {
        cJSON *big = big_object(4 * MAX_PAYLOAD);
        pl_action call = {PL_ACTION_VERSION, "echo", big, NULL, 0, NULL};
        st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(big);
    } else if (strcmp(mode, "big_result") == 0) {
        cJSON *big = big_object(4 * MAX_PAYLOAD);
        st = pl_steps_add_result(out, big);
        cJSON_Delete(big);
    } else if (strcmp(mode, "big_prompt") == 0) {
        cJSON *big = big_object(4 * MAX_PAYLOAD);
        cJSON *ans = NULL;
        st = pl_ctx_suspend(&ans, ctx, big);
        cJSON_Delete(big);
        cJSON_Delete(ans);
    } else if (strcmp(mode, "array_prompt") == 0) {
        cJSON *arr = cJSON_CreateArray();
        cJSON *ans = NULL;
        st = pl_ctx_suspend(&ans, ctx, arr);
        cJSON_Delete(arr);
        cJSON_Delete(ans);
    } else if (strcmp(mode, "big_effect") == 0) {
        cJSON *v = NULL;
        st = pl_ctx_side_effect(&v, ctx, "fetch", effect_big, NULL);
        cJSON_Delete(v);
    } else if (strcmp(mode, "wait") == 0) {
        cJSON *ans = NULL;
        st = pl_ctx_suspend(&ans, ctx, pl_json_empty());
        cJSON_Delete(ans);
    } else if (strcmp(mode, "big_emit") == 0) {
        cJSON *big = big_object(4 * MAX_PAYLOAD);
        st = pl_ctx_emit(ctx, out, PL_STEP_TEXT, NULL, big);
        cJSON_Delete(big);
    }
    g_call_status = st;
    if (st)
        return st;
    return pl_steps_add_text(out, NULL, "unreachable?");
}

/* deep: calls itself with left-1 until left is 0 (or forever, without). */
int g_max_depth_seen;

static int deep(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *p = pl_ctx_path(ctx);
    int depth = 0;
    for (; *p; p++)
        depth += *p == '.';
    if (depth > g_max_depth_seen)
        g_max_depth_seen = depth;
    const cJSON *left = cJSON_GetObjectItemCaseSensitive(a->payload, "left");
    if (cJSON_IsNumber(left) && left->valueint <= 0)
        return pl_steps_add_text(out, NULL, "bottom");
    cJSON *np = cJSON_CreateObject();
    if (cJSON_IsNumber(left))
        cJSON_AddNumberToObject(np, "left", left->valueint - 1);
    pl_action call = {PL_ACTION_VERSION, "deep", np, NULL, 0, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    cJSON_Delete(np);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

int g_null_status[N_NULLS];

static int nulls(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_action call = {
        PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    cJSON *v = NULL;
    int i = 0;
    g_null_status[i++] = pl_ctx_call(NULL, NULL, &call, NULL, 0);
    g_null_status[i++] = pl_ctx_ledger(NULL, ctx);
    g_null_status[i++] = pl_ctx_ledger(NULL, NULL);
    g_null_status[i++] = pl_ctx_now(NULL, ctx);
    g_null_status[i++] = pl_ctx_random(NULL, ctx);
    g_null_status[i++] = pl_ctx_uuid(NULL, ctx);
    g_null_status[i++] = pl_ctx_side_effect(&v, ctx, "x", NULL, NULL);
    g_null_status[i++] = pl_ctx_side_effect(&v, ctx, "", effect_ok, NULL);
    g_null_status[i++] = pl_ctx_side_effect(NULL, ctx, "x", effect_ok, NULL);
    g_null_status[i++] = pl_ctx_suspend(NULL, ctx, NULL);
    g_null_status[i++] = pl_ctx_emit(ctx, NULL, PL_STEP_TEXT, NULL, NULL);
    g_null_status[i++] = pl_ctx_emit(ctx, out, (pl_step_type)99, NULL, NULL);
    g_null_status[i++] = pl_ctx_emit(ctx, out, PL_STEP_TEXT, "bad\tactor",
                                     NULL);
    g_null_status[i++] = pl_next_call(NULL, ctx, &call, out);
    cJSON_Delete(v);
    /* none of that stopped the run: the context still works */
    int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    if (st)
        return st;
    return pl_steps_add_text(out, NULL, "survived");
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"misuse", misuse}, {"deep", deep}, {"nulls", nulls}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* Start misuse with @p mode; returns the failed outcome. */
pl_outcome *misuse_run(pl_engine *e, const char *mode, const char *id)
{
    char payload[128];
    snprintf(payload, sizeof payload, "{\"mode\": \"%s\"}", mode);
    g_call_status = 12345;
    return t_start(e, "misuse", payload, id);
}
