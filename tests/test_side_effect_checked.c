/*
 * test_side_effect_checked.c -- pl_ctx_side_effect_checked() (core/
 * recorded.c): a recorded value served on replay only when it still fits
 * the call, a divergence otherwise; and its argument checks.
 */
#include "support.h"

#include <stdio.h>
#include <string.h>

/* What the policy asks for now (stands in for a request it builds), and
 * how often its side effect ran. */
static const char *g_key = "a";
static int g_produced, g_bad_args;

static int produce(cJSON **out, void *user)
{
    (void)user;
    g_produced++;
    return pl_json_pack(out, "{s:s, s:i}", "key", g_key, "n", g_produced);
}

static bool same_key(const cJSON *recorded, char *why, size_t why_size,
                     void *user)
{
    const char *want = user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(recorded, "key");
    if (cJSON_IsString(k) && strcmp(k->valuestring, want) == 0)
        return true;
    snprintf(why, why_size, "recorded for key '%s', asked for '%s'",
             cJSON_IsString(k) ? k->valuestring : "?", want);
    return false;
}

static int fetch(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *v = NULL;
    pl_side_effect_match no_fn = PL_SIDE_EFFECT_MATCH_INIT;
    /* the argument checks, before the real call */
    if (pl_ctx_side_effect_checked(&v, ctx, "fetch", produce, NULL, NULL) ==
            PL_EINVAL &&
        pl_ctx_side_effect_checked(&v, ctx, "fetch", produce, &no_fn, NULL) ==
            PL_EINVAL &&
        !v)
        g_bad_args++;
    pl_side_effect_match m = PL_SIDE_EFFECT_MATCH_INIT;
    m.fn = same_key;
    m.user = (void *)g_key;
    int st = pl_ctx_side_effect_checked(&v, ctx, "fetch", produce, &m, NULL);
    if (st)
        return st;
    st = pl_steps_add_result(out, v);
    cJSON_Delete(v);
    return st;
}

typedef struct seen {
    int diverged;
    char payload[300], detail[300];
} seen;

static void on_event(const pl_event *ev, void *user)
{
    seen *s = user;
    if (ev->kind != PL_EVENT_DIVERGED)
        return;
    s->diverged++;
    snprintf(s->payload, sizeof s->payload, "%s",
             ev->diff && ev->diff->new_payload ? ev->diff->new_payload : "");
    snprintf(s->detail, sizeof s->detail, "%s", ev->detail ? ev->detail : "");
}

static pl_engine *engine(const char *path, pl_registry **reg, seen *s)
{
    *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(*reg, "fetch", fetch, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = on_event;
    o.event_user = s;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, *reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

Test(side_effect_checked, a_fitting_value_is_served_and_a_misfit_diverges)
{
    const char *path = t_store_path();
    seen s = {0};
    pl_registry *reg;
    pl_engine *e = engine(path, &reg, &s);
    g_key = "a";
    pl_outcome *o = t_start(e, "fetch", "{}", "r");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(g_produced, 1);
    cr_expect_eq(g_bad_args, 1, "NULL match and a match without fn refused");
    pl_outcome_free(o);

    /* the same call: the recorded value is served, the effect not run */
    cr_assert_eq(pl_run_continue(&o, e, "r", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(g_produced, 1);
    cr_expect_eq(s.diverged, 0);
    pl_outcome_free(o);

    /* another call at the same place: a divergence, never the old value */
    g_key = "b";
    o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "r", NULL), PL_ENONDET);
    cr_expect_null(o);
    cr_expect_eq(g_produced, 1);
    cr_expect_eq(s.diverged, 1);
    cr_expect(strstr(s.payload, "\"mismatch\""), "%s", s.payload);
    cr_expect(strstr(s.detail, "recorded for key 'a', asked for 'b'"), "%s",
              s.detail);
    cr_expect(strstr(pl_errmsg(), "does not fit this call"), "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    g_key = "a";
}
