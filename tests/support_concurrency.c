/* What the tests of test_concurrency*.c share. */
#include "support_concurrency.h"

atomic_int inc_calls;

/* "inc": {"a": x, "b": y} -> {"sum": x + y} */
static int inc(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    atomic_fetch_add(&inc_calls, 1);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a->payload, "a");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(a->payload, "b");
    if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "a, b numbers");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "sum", x->valuedouble + y->valuedouble);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "tchain": calls "inc" payload.n times: total = 0 + 1 + ... + (n-1). */
static int tchain(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    int count = cJSON_IsNumber(n) ? n->valueint : 3;
    double total = 0;
    for (int i = 0; i < count; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "a", i);
        cJSON_AddNumberToObject(p, "b", total);
        pl_action call = {PL_ACTION_VERSION, "inc", p, NULL, 0, NULL};
        pl_step *res = NULL;
        int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(res), "sum");
        if (!cJSON_IsNumber(sum)) {
            pl_step_free(res);
            return PL_EPOLICY;
        }
        total = sum->valuedouble;
        pl_step_free(res);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "total", total);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "gate": blocks until the test releases it; the first call after
 * g_gate.fail_next is set fails the run instead. */
struct gate_state g_gate = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false, false};

static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    pthread_mutex_lock(&g_gate.mu);
    if (g_gate.fail_next) {
        g_gate.fail_next = false;
        pthread_mutex_unlock(&g_gate.mu);
        return PL_EPOLICY;
    }
    g_gate.entered++;
    pthread_cond_broadcast(&g_gate.cv);
    while (!g_gate.released)
        pthread_cond_wait(&g_gate.cv, &g_gate.mu);
    pthread_mutex_unlock(&g_gate.mu);
    return pl_steps_add_text(out, NULL, "passed");
}

/* "block": in the owner process, reports on a pipe and blocks forever. */
int g_block_fd = -1;

static int block(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    if (g_block_fd >= 0) {
        if (write(g_block_fd, "b", 1) != 1)
            return PL_EIO;
        for (;;)
            pause();
    }
    return pl_steps_add_text(out, NULL, "unblocked");
}

/* "call_one": calls payload.tool once and returns its result. */
int call_one(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a->payload, "tool");
    pl_action call = {PL_ACTION_VERSION,
                      cJSON_IsString(t) ? t->valuestring : "gate",
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

/* The support policies ("chain", "add", ...) plus the ones above. */
pl_registry *conc_registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"inc", inc},
                {"tchain", tchain},
                {"gate", gate},
                {"block", block},
                {"call_one", call_one}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}
