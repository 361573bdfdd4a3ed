/*
 * test_rate_units.c -- budgets in units (tokens) shared through the store
 * (pl_rate_take_units(), pl_rate_settle_units(), pl_decorator_rate_limit()
 * with a budget), on the store the suite runs on: LMDB, and PostgreSQL as
 * pg_test_rate_units (tests/CMakeLists.txt).
 *
 * Nothing is timed: what a window admitted is added up from the store's
 * times and the usage the runs recorded.
 */
#include "llm_support.h"
#include "support_rate.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define U_BUDGET 100     /* tokens a window */
#define U_WINDOW_MS 1000 /* wide: three calls fill it on a busy machine */
#define U_EST 30         /* each call's max_tokens */
/* A window no test outlives: 2^40 ms, about 35 years. */
#define U_LONG ((int64_t)1 << 40)

TestSuite(rate_units, .init = rt_setup, .fini = t_cleanup, .timeout = 300);

static pl_rate_limit_options u_opts; /* "metered" */
static pl_rate_limit_options u_long; /* "metered_long": one long window */
static pl_rate_limit_options u_fn;   /* "metered_fn": estimate and usage
                                        functions */
/* "metered_v1": options as a caller built against version 1 made them,
 * followed by bytes it never wrote */
static struct {
    pl_rate_limit_options v1;
    char junk[64];
} u_old;

/* "model": a model's stand-in; its result's "tokens" is the payload's
 * "use", as it is (absent: none). */
static int model(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    cJSON *r = cJSON_CreateObject();
    const cJSON *use = cJSON_GetObjectItemCaseSensitive(a->payload, "use");
    if (!r ||
        (use && !cJSON_AddItemToObject(r, "tokens", cJSON_Duplicate(use, 1)))) {
        cJSON_Delete(r);
        return PL_ENOMEM;
    }
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "metered" and the others: a call of "model" for each payload of
 * payload.calls, through a rate_limit with the options @p user points
 * to; an error result is the call's data, not a failure. */
static int metered(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(a->payload, "calls");
    pl_decorator d;
    int st = pl_decorator_rate_limit(&d, user);
    const cJSON *p;
    cJSON_ArrayForEach(p, calls)
    {
        if (st)
            break;
        pl_action call = PL_ACTION_INIT;
        call.policy = "model";
        call.payload = p;
        pl_step *res = NULL;
        st = pl_ctx_call(&res, ctx, &call, &d, 1);
        if (st == PL_ERESULT)
            st = PL_OK;
        pl_step_free(res);
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* u_fn's estimate: the payload's "guess" (any integer, as it is). */
static int u_estimate(int64_t *out, const pl_action *a, void *user)
{
    (void)user;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(a->payload, "guess");
    *out = cJSON_IsNumber(g) ? (int64_t)g->valuedouble : 0;
    return PL_OK;
}

/* u_fn's usage: the result's "tokens" as an integer, as it is; -1 when it
 * has none. */
static int u_usage(int64_t *out, const pl_steps *res, void *user)
{
    (void)user;
    *out = -1;
    for (size_t i = 0; i < pl_steps_count(res); i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(
            pl_step_payload(pl_steps_at(res, i)), "tokens");
        if (cJSON_IsNumber(t))
            *out = (int64_t)t->valuedouble;
    }
    return PL_OK;
}

static pl_registry *u_registry(void)
{
    u_opts = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    u_opts.resource = "llm";
    u_opts.budget = U_BUDGET;
    u_opts.window_ms = U_WINDOW_MS;
    u_opts.sleep = rt_sleep;
    u_long = u_opts;
    u_long.resource = "llm-long";
    u_long.budget = 1000;
    u_long.window_ms = U_LONG;
    u_fn = u_long;
    u_fn.resource = "llm-fn";
    u_fn.estimate = u_estimate;
    u_fn.usage = u_usage;
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "model", model, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "metered", metered, &u_opts), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "metered_long", metered, &u_long),
                 PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "metered_fn", metered, &u_fn), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "metered_v1", metered, &u_old.v1),
                 PL_OK);
    return reg;
}

/* What a run recorded: its takes and its usage records, in order. */
enum { U_MAX = 64 };
typedef struct u_rec {
    size_t takes, denied, refused, usages;
    int64_t start[U_MAX], est[U_MAX];                     /* admitted takes */
    int64_t ustart[U_MAX], charged[U_MAX], actual[U_MAX]; /* -1: null */
    char note[U_MAX][200], why[U_MAX][300];
} u_rec;

static int64_t u_num(const cJSON *v, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, name);
    cr_assert(cJSON_IsNumber(n), "no number \"%s\"", name);
    return (int64_t)n->valuedouble;
}

static int u_visit(const pl_step *s, void *user)
{
    u_rec *c = user;
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT)
        return 0;
    if (strcmp(name->valuestring, "rate_limit") == 0) {
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(v, "refused");
        if (cJSON_IsString(why)) {
            cr_assert_lt(c->refused, U_MAX);
            snprintf(c->why[c->refused++], 300, "%s", why->valuestring);
        } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v,
                                                                 "admitted"))) {
            cr_assert_lt(c->takes, U_MAX);
            c->start[c->takes] = u_num(v, "window_start_ms");
            c->est[c->takes++] = u_num(v, "estimate");
        } else {
            u_num(v, "until_ms");
            c->denied++;
        }
    } else if (strcmp(name->valuestring, "rate_limit_usage") == 0) {
        cr_assert_lt(c->usages, U_MAX);
        size_t i = c->usages++;
        c->ustart[i] = u_num(v, "window_start_ms");
        c->charged[i] = u_num(v, "charged");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "actual");
        cr_assert(cJSON_IsNumber(a) || cJSON_IsNull(a));
        c->actual[i] = cJSON_IsNumber(a) ? (int64_t)a->valuedouble : -1;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "note");
        snprintf(c->note[i], 200, "%s",
                 cJSON_IsString(n) ? n->valuestring : "");
    }
    return 0;
}

static void u_read(pl_engine *e, const char *id, u_rec *c)
{
    cr_assert_eq(pl_run_walk(e, id, u_visit, c), PL_OK, "%s", pl_errmsg());
}

static void u_run(pl_engine *e, const char *policy, const char *json,
                  const char *id)
{
    pl_outcome *o = t_start(e, policy, json, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
}

static uint64_t u_used(pl_engine *e, const char *resource)
{
    pl__unit_budget b;
    cr_assert_eq(pl__store_units_get(e->store, resource, "tokens", &b), PL_OK,
                 "%s", pl_errmsg());
    return b.used;
}

Test(rate_units, bad_arguments_are_refused)
{
    pl_registry *reg = u_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    pl_rate_grant g = PL_RATE_GRANT_INIT;
    cr_assert_eq(pl_rate_take_units(NULL, e, "x", "tokens", 10, 10, 1),
                 PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, NULL, "x", "tokens", 10, 10, 1),
                 PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, e, "", "tokens", 10, 10, 1), PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, e, "\xff", "tokens", 10, 10, 1),
                 PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "UTF-8"), "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "Tokens", 10, 10, 1),
                 PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "not a name"), "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "", 10, 10, 1), PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "a:b", 10, 10, 1), PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "tokens", 0, 10, 1), PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "tokens", PL_RATE_MAX_UNITS + 1,
                                    10, 1),
                 PL_EINVAL);
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "tokens", 10, 0, 1), PL_EINVAL);
    /* larger than the whole budget: never admissible, said at once */
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "tokens", 10, 10, 11),
                 PL_ELIMIT);
    cr_assert(strstr(pl_errmsg(), "whole budget"), "%s", pl_errmsg());
    cr_assert_eq(pl_rate_settle_units(&g, e, "x", "tokens", 10, 10, 0, 1,
                                      PL_RATE_MAX_UNITS + 1),
                 PL_EINVAL);
    g.version = 0;
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "tokens", 10, 10, 1),
                 PL_EINVAL);
    g.version = PL_RATE_GRANT_VERSION + 1;
    cr_assert_eq(pl_rate_take_units(&g, e, "x", "tokens", 10, 10, 1),
                 PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "pl_rate_grant"), "%s", pl_errmsg());
    cr_assert_eq(pl__store_units_get(e->store, "x", "tokens",
                                     &(pl__unit_budget){0}),
                 PL_ENOTFOUND);

    pl_decorator d;
    pl_rate_limit_options o = PL_RATE_LIMIT_OPTIONS_INIT;
    o.resource = "r";
    o.budget = 100;
    o.limit = 5;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "not both"), "%s", pl_errmsg());
    o.limit = 0;
    o.unit = "Tokens!";
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    o.unit = NULL;
    o.estimate_member = "";
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    o.estimate_member = NULL;
    o.budget = PL_RATE_MAX_UNITS + 1;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    o.budget = 0;
    o.limit = 3;
    o.unit = "tokens"; /* a unit with no budget in units */
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "set budget"), "%s", pl_errmsg());
    o.unit = NULL;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_OK, "%s", pl_errmsg());
    o.limit = 0;
    o.budget = 100;
    cr_assert_eq(pl_decorator_rate_limit(&d, &o), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Options made against version 1 (its fields alone) are read as version 1:
 * a budget of calls, whatever lies past them. */
Test(rate_units, version_1_options_count_calls)
{
    pl_registry *reg = u_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    memset(&u_old, 0x5a, sizeof u_old);
    u_old.v1.version = 1;
    u_old.v1.resource = "old";
    u_old.v1.limit = 2;
    u_old.v1.window_ms = U_LONG;
    u_old.v1.sleep = rt_sleep;
    u_old.v1.sleep_user = NULL;
    pl_decorator d;
    cr_assert_eq(pl_decorator_rate_limit(&d, &u_old.v1), PL_OK, "%s",
                 pl_errmsg());
    u_run(e, "metered_v1", "{\"calls\": [{\"use\": 5}, {\"use\": 5}]}", "v1");
    pl__rate_budget b;
    cr_assert_eq(pl__store_rate_get(e->store, "old", &b), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(b.count, 2);
    cr_assert_eq(b.limit, 2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The store's rule: estimates charged while they fit; corrections within
 * the window both ways; after it, an extra charge only. */
Test(rate_units, a_window_admits_its_budget_and_is_corrected)
{
    pl_registry *reg = u_registry();
    const char *path = t_store_path();
    pl_engine *e = rt_engine(path, reg);
    pl_rate_grant g = PL_RATE_GRANT_INIT;
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 100, U_LONG, 60),
                 PL_OK, "%s", pl_errmsg());
    cr_assert(g.admitted);
    cr_assert_eq(g.used, 60);
    cr_assert_eq(g.window_start_ms, g.at_ms - g.at_ms % U_LONG);
    int64_t w = g.window_start_ms;
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 100, U_LONG, 41),
                 PL_OK);
    cr_assert(!g.admitted);
    cr_assert_eq(g.used, 60);
    cr_assert_eq(g.retry_at_ms, w + U_LONG);
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 100, U_LONG, 40),
                 PL_OK);
    cr_assert(g.admitted);
    cr_assert_eq(g.used, 100);
    /* another unit is another budget */
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "requests", 1, U_LONG, 1),
                 PL_OK);
    cr_assert(g.admitted);
    /* a call charged 60 used 20: 40 back */
    cr_assert_eq(pl_rate_settle_units(&g, e, "api", "tokens", 100, U_LONG, w,
                                      60, 20),
                 PL_OK, "%s", pl_errmsg());
    cr_assert(g.admitted);
    cr_assert_eq(g.used, 60);
    cr_assert_eq(u_used(e, "api"), 60);
    /* one charged 40 used 90: the window ends over its budget */
    cr_assert_eq(pl_rate_settle_units(&g, e, "api", "tokens", 100, U_LONG, w,
                                      40, 90),
                 PL_OK);
    cr_assert_eq(g.used, 110);
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 100, U_LONG, 0),
                 PL_OK);
    cr_assert(!g.admitted, "an over-spent window admits nothing more");
    /* a correction of a window gone: a refund is dropped, an extra charge
     * goes to the current window */
    cr_assert_eq(pl_rate_settle_units(&g, e, "api", "tokens", 100, U_LONG,
                                      w - U_LONG, 50, 0),
                 PL_OK);
    cr_assert(!g.admitted);
    cr_assert_eq(g.used, 110);
    cr_assert_eq(pl_rate_settle_units(&g, e, "api", "tokens", 100, U_LONG,
                                      w - U_LONG, 0, 5),
                 PL_OK);
    cr_assert(g.admitted);
    cr_assert_eq(u_used(e, "api"), 115);
    /* never below 0 */
    cr_assert_eq(pl_rate_settle_units(&g, e, "api", "tokens", 100, U_LONG, w,
                                      100, 0),
                 PL_OK);
    cr_assert_eq(pl_rate_settle_units(&g, e, "api", "tokens", 100, U_LONG, w,
                                      100, 0),
                 PL_OK);
    cr_assert_eq(g.used, 0);
    /* the budget is the last one given, in the same window; another
     * window length starts a new window */
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 100, U_LONG, 90),
                 PL_OK);
    cr_assert(g.admitted);
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 200, U_LONG, 50),
                 PL_OK);
    cr_assert(g.admitted, "140 of a budget of 200");
    cr_assert_eq(g.used, 140);
    cr_assert_eq(g.window_start_ms, w);
    cr_assert_eq(pl_rate_take_units(&g, e, "api", "tokens", 200, 2 * U_LONG,
                                    10),
                 PL_OK);
    cr_assert(g.admitted);
    cr_assert_eq(g.used, 10);
    cr_assert_eq(g.window_start_ms, g.at_ms - g.at_ms % (2 * U_LONG));
    pl_engine_close(e);

    /* a read-only engine keeps no budget */
    pl_engine_options ro = PL_ENGINE_OPTIONS_INIT;
    ro.read_only = true;
    pl_engine *r = NULL;
    cr_assert_eq(pl_engine_open(&r, path, reg, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_rate_take_units(&g, r, "api", "tokens", 100, U_LONG, 1),
                 PL_ESTATE);
    pl_engine_close(r);
    pl_registry_free(reg);
}

/*
 * A call charged its estimate and then what it used: more than the
 * estimate is charged in full, less gives the rest back; a call larger
 * than the whole budget is an error result at once, charging nothing.
 * The run replays without charging again.
 */
Test(rate_units, calls_are_charged_what_they_used)
{
    pl_registry *reg = u_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    u_run(e, "metered_long",
          "{\"calls\": [{\"max_tokens\": 30, \"use\": 80}, "
          "{\"max_tokens\": 30, \"use\": 10}, "
          "{\"max_tokens\": 1001, \"use\": 1}, "
          "{\"max_tokens\": 0, \"use\": 5}]}",
          "charged");
    u_rec c = {0};
    u_read(e, "charged", &c);
    cr_assert_eq(c.takes, 3);
    cr_assert_eq(c.usages, 3);
    cr_assert_eq(c.refused, 1);
    cr_assert(strstr(c.why[0], "1001 tokens is more than the whole budget"),
              "%s", c.why[0]);
    cr_assert_eq(c.charged[0], 80);
    cr_assert_eq(c.actual[0], 80);
    cr_assert_eq(c.charged[1], 10);
    cr_assert_eq(c.charged[2], 5);
    cr_assert_eq(u_used(e, "llm-long"), 95);
    /* the refused call's error result, and its model never ran */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "charged"), PL_OK);
    pl_run_info_free(info);

    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "charged", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    cr_assert_eq(u_used(e, "llm-long"), 95, "a replay charged again");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Usage that is not a count is charged the estimate, with a note saying
 * why; an estimate that is not one is an error result; the budget is what
 * the estimates and the sound usage add up to. */
Test(rate_units, hostile_usage_and_estimates)
{
    pl_registry *reg = u_registry();
    pl_engine *e = rt_engine(t_store_path(), reg);
    u_run(e, "metered_long",
          "{\"calls\": [{\"max_tokens\": 20, \"use\": -5}, "
          "{\"max_tokens\": 20, \"use\": \"12\"}, "
          "{\"max_tokens\": 20, \"use\": 1e300}, "
          "{\"max_tokens\": 20, \"use\": 1.5}, "
          "{\"max_tokens\": 20}, "
          "{\"max_tokens\": 20, \"use\": 7}, "
          "{\"use\": 3}, {\"max_tokens\": -1}, {\"max_tokens\": 2.5}, "
          "{\"max_tokens\": \"20\"}, {\"max_tokens\": 1e300}]}",
          "hostile");
    u_rec c = {0};
    u_read(e, "hostile", &c);
    cr_assert_eq(c.usages, 6);
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(c.actual[i], -1, "call %zu", i);
        cr_assert_eq(c.charged[i], 20, "call %zu", i);
        cr_assert(strstr(c.note[i], "the estimate stands"), "call %zu: %s", i,
                  c.note[i]);
    }
    cr_assert(strstr(c.note[4], "reports no tokens"), "%s", c.note[4]);
    cr_assert_eq(c.charged[5], 7);
    cr_assert_eq(c.note[5][0], '\0');
    cr_assert_eq(c.refused, 5);
    cr_assert(strstr(c.why[0], "has no \"max_tokens\""), "%s", c.why[0]);
    for (size_t i = 1; i < 5; i++)
        cr_assert(strstr(c.why[i], "not a whole number"), "%s", c.why[i]);
    cr_assert_eq(u_used(e, "llm-long"), 5 * 20 + 7);

    /* the functions' answers, held to the same bounds */
    u_run(e, "metered_fn",
          "{\"calls\": [{\"guess\": -3}, {\"guess\": 1e18}, "
          "{\"guess\": 50, \"use\": -7}, {\"guess\": 50, \"use\": 1e18}, "
          "{\"guess\": 50}, {\"guess\": 50, \"use\": 60}]}",
          "functions");
    u_rec f = {0};
    u_read(e, "functions", &f);
    cr_assert_eq(f.refused, 2);
    cr_assert(strstr(f.why[0], "-3 tokens: not 0 to 2^53"), "%s", f.why[0]);
    cr_assert_eq(f.usages, 4);
    cr_assert_eq(f.charged[0], 50);
    cr_assert(strstr(f.note[0], "not 0 to 2^53"), "%s", f.note[0]);
    cr_assert_eq(f.charged[1], 50);
    cr_assert(strstr(f.note[2], "reports no tokens"), "%s", f.note[2]);
    cr_assert_eq(f.charged[3], 60);
    cr_assert_eq(u_used(e, "llm-fn"), 50 + 50 + 50 + 60);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Window by window: the units the calls admitted in it were charged in
 * the end, as the runs recorded them, stay within the budget.  (Their
 * estimates may add up to more: a call that used less than its estimate
 * gave the rest back, for another call in the same window.) */
static void u_check_windows(const u_rec *c, int64_t *most)
{
    for (size_t i = 0; i < c->usages; i++) {
        int64_t charged = 0;
        for (size_t j = 0; j < c->usages; j++)
            charged += c->ustart[j] == c->ustart[i] ? c->charged[j] : 0;
        cr_assert_leq(charged, U_BUDGET,
                      "%lld tokens charged in the window at %lld",
                      (long long)charged, (long long)c->ustart[i]);
        *most = charged > *most ? charged : *most;
    }
    /* every usage record is of a take admitted in its window */
    for (size_t i = 0; i < c->usages; i++) {
        bool taken = false;
        for (size_t j = 0; j < c->takes; j++)
            taken = taken || c->start[j] == c->ustart[i];
        cr_assert(taken, "a usage record of a window with no admission");
    }
}

/* Three processes share one budget of tokens: no window admits more than
 * the budget, whoever asked. */
Test(rate_units, processes_share_one_budget)
{
    pl_registry *reg = u_registry();
    const char *path = t_store_path();
    pl_engine *e = rt_engine(path, reg);
    pl_engine_close(e);
    enum { P = 3, N = 5 };
    pid_t kids[P];
    for (int i = 0; i < P; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            char id[24], json[512];
            snprintf(id, sizeof id, "proc-%d", i);
            int n = snprintf(json, sizeof json, "{\"calls\": [");
            for (int k = 0; k < N; k++) /* each uses 10 to 30 */
                n += snprintf(json + n, sizeof json - (size_t)n,
                              "%s{\"max_tokens\": %d, \"use\": %d}",
                              k ? ", " : "", U_EST, 10 + (i + k) % 3 * 10);
            snprintf(json + n, sizeof json - (size_t)n, "]}");
            rt_child_run(path, reg, "metered", json, id);
        }
    }
    for (int i = 0; i < P; i++) {
        int status;
        cr_assert_eq(waitpid(kids[i], &status, 0), kids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    e = rt_engine(path, reg);
    u_rec all = {0};
    for (int i = 0; i < P; i++) {
        char id[24];
        snprintf(id, sizeof id, "proc-%d", i);
        u_read(e, id, &all);
    }
    cr_assert_eq(all.takes, P * N);
    cr_assert_eq(all.usages, P * N);
    int64_t most = 0;
    u_check_windows(&all, &most);
    cr_log_info("rate_units: %zu admitted, %zu waits, at most %lld tokens in "
                "a window",
                all.takes, all.denied, (long long)most);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A process killed while it waits for tokens: the wait was recorded; the
 * run, continued, waits what is left, takes again and completes, each
 * call charged once. */
Test(rate_units, a_wait_survives_a_kill)
{
    pl_registry *reg = u_registry();
    const char *path = t_store_path();
    pl_engine *e = rt_engine(path, reg);
    pl_engine_close(e);
    const char *json = "{\"calls\": [{\"max_tokens\": 40, \"use\": 40}, "
                       "{\"max_tokens\": 40, \"use\": 40}, "
                       "{\"max_tokens\": 40, \"use\": 40}, "
                       "{\"max_tokens\": 40, \"use\": 40}, "
                       "{\"max_tokens\": 40, \"use\": 40}, "
                       "{\"max_tokens\": 40, \"use\": 40}]}";
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0)
        rt_child_run(path, reg, "metered", json, "killed");
    rt_kill_in_wait(kid);
    e = rt_engine(path, reg);
    u_rec before = {0};
    u_read(e, "killed", &before);
    cr_assert_geq(before.denied, 1,
                  "the wait was not recorded before it "
                  "began");
    rt_continue_to_end(e, "killed");
    u_rec c = {0};
    u_read(e, "killed", &c);
    cr_assert_eq(c.takes, 6);
    cr_assert_eq(c.usages, 6);
    cr_assert_geq(c.denied, before.denied);
    int64_t most = 0;
    u_check_windows(&c, &most);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static pl_rate_limit_options u_llm;

static int u_fifty(int64_t *out, const pl_action *a, void *user)
{
    (void)a;
    (void)user;
    *out = 50;
    return PL_OK;
}

/* "ask": the scripted model in a loop of turns, each turn through a budget
 * of tokens: [loop, rate_limit, invoke_action]. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_decorator d[3];
    int st = pl_decorator_loop(&d[0], 4);
    if (!st)
        st = pl_decorator_rate_limit(&d[1], &u_llm);
    if (!st)
        st = pl_decorator_invoke_action(&d[2]);
    cJSON *p = cJSON_Parse("{\"text\": \"note it\"}");
    const char *names[] = {"effect"};
    pl_action call = PL_ACTION_INIT;
    call.policy = "llm";
    call.payload = p;
    call.actions = names;
    call.n_actions = 1;
    pl_step *res = NULL;
    if (!st)
        st = pl_ctx_call(&res, ctx, &call, d, 3);
    cJSON_Delete(p);
    pl_step_free(res);
    return st && st != PL_ERESULT ? st : pl_steps_add_resultf(out, "{}");
}

/* An LLM policy's turns are charged the input + output tokens its model
 * calls report, as pl_llm_run_tokens() counts them. */
Test(rate_units, an_llm_turn_is_charged_its_usage)
{
    char url[4300];
    snprintf(url, sizeof url, "scripted://%s",
             t_write_file("script.json",
                          "{\"responses\": ["
                          " {\"tool_calls\": [{\"id\": \"n1\", \"name\": "
                          "\"effect\", \"arguments\": {\"note\": \"a\"}}],"
                          "  \"usage\": {\"input\": 11, \"output\": 3}},"
                          " {\"text\": \"Done.\", \"usage\": {\"input\": 30, "
                          "\"output\": 9}}]}"));
    pl_registry *reg = t_llm_registry(url, NULL);
    u_llm = (pl_rate_limit_options)PL_RATE_LIMIT_OPTIONS_INIT;
    u_llm.resource = "llm-turns";
    u_llm.budget = 1000;
    u_llm.window_ms = U_LONG;
    u_llm.estimate = u_fifty;
    cr_assert_eq(pl_registry_add_fn(reg, "ask", ask, NULL), PL_OK);
    pl_engine *e = rt_engine(t_store_path(), reg);
    u_run(e, "ask", "{}", "turns");
    u_rec c = {0};
    u_read(e, "turns", &c);
    cr_assert_eq(c.takes, 2);
    cr_assert_eq(c.usages, 2);
    cr_assert_eq(c.actual[0], 14);
    cr_assert_eq(c.actual[1], 39);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, e, "turns"), PL_OK);
    cr_assert_eq(tok.input + tok.output, 53);
    cr_assert_eq(u_used(e, "llm-turns"), 53);
    pl_engine_close(e);
    pl_registry_free(reg);
}
