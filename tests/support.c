/*
 * support.c -- shared test helpers.
 */
#define _XOPEN_SOURCE 700
#include "support.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

t_counters t_calls;

static char *dirs[64];
static int n_dirs;

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void t_rmtree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void t_cleanup(void)
{
    for (int i = 0; i < n_dirs; i++) {
        t_rmtree(dirs[i]);
        free(dirs[i]);
    }
    n_dirs = 0;
}

const char *t_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/pltest.XXXXXX",
             base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d, "mkdtemp failed");
    cr_assert(n_dirs < 64);
    dirs[n_dirs] = strdup(d);
    if (n_dirs == 0)
        atexit(t_cleanup);
    return dirs[n_dirs++];
}

const char *t_store_path(void)
{
    static char path[4200];
    snprintf(path, sizeof path, "%s/store.db", t_tmpdir());
    return path;
}

cJSON *t_json(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "bad JSON in a test: %s", text);
    return j;
}

char *t_text(const cJSON *v) { return cJSON_PrintUnformatted(v); }

static int echo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    t_calls.echo++;
    return pl_steps_add_result(out, a->payload);
}

static int add(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    t_calls.add++;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a->payload, "a");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(a->payload, "b");
    if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "a and b must be "
                                  "numbers");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "sum", x->valuedouble + y->valuedouble);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int fail(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    return PL_EPOLICY;
}

static int oops(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_error(out, PL_ERR_TOOL_BUG, "something broke");
}

static int chain(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    t_calls.chain++;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    int count = cJSON_IsNumber(n) ? n->valueint : 3;
    double total = 0;
    for (int i = 0; i < count; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "a", i);
        cJSON_AddNumberToObject(p, "b", total);
        pl_action call = {PL_ACTION_VERSION, "add", p, NULL, 0, NULL};
        pl_step *res = NULL;
        int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
        total = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res), "sum")
                    ->valuedouble;
        pl_step_free(res);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "total", total);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

pl_registry *t_registry(void)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"echo", echo},
                {"add", add},
                {"fail", fail},
                {"oops", oops},
                {"chain", chain}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

pl_engine *t_engine(const char *path, const pl_registry *reg,
                    pl_durability durability)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = durability;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &o);
    cr_assert_eq(st, PL_OK, "pl_engine_open(%s): %s", path, pl_errmsg());
    return e;
}

pl_outcome *t_start(pl_engine *e, const char *policy, const char *payload_json,
                    const char *run_id)
{
    cJSON *p = t_json(payload_json ? payload_json : "{}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = run_id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    cr_assert_eq(st, PL_OK, "pl_run_start(%s): %s", policy, pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

const cJSON *t_result(const pl_outcome *o)
{
    size_t n = pl_steps_count(o->steps);
    cr_assert_gt(n, 0, "the outcome has no steps");
    return pl_step_payload(pl_steps_at(o->steps, n - 1));
}
