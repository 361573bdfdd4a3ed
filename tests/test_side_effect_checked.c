/*
 * test_side_effect_checked.c -- pl_ctx_side_effect_checked() (core/
 * recorded.c): a recorded value served on replay only when it still fits
 * the call, a divergence otherwise; and its argument checks.  And
 * pl_ctx_capture(): a recorded value that rides the next commit (none of
 * its own), served on replay, produced again after a crash that lost it.
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* ---- pl_ctx_capture() ---- */

static int g_commits, g_captured, g_effected;
static int g_effect_commits, g_capture_commits, g_bad_capture; /* the last */
static const char *g_by = "parent"; /* who produces the values */
static bool g_die;                  /* the forked child: die after both */
static bool g_fail;                 /* fail the run after both */

static int capture_value(cJSON **out, void *user)
{
    (void)user;
    g_captured++;
    return pl_json_pack(out, "{s:s}", "by", g_by);
}

static int effect_value(cJSON **out, void *user)
{
    (void)user;
    g_effected++;
    return pl_json_pack(out, "{s:s}", "by", g_by);
}

static void count_commits(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_COMMIT)
        g_commits++;
}

/* A side effect, then a capture: both values in the result; the commits
 * each made, and the argument checks, in the globals. */
static int probe(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *eff = NULL, *cap = NULL, *bad = NULL;
    int before = g_commits;
    int st = pl_ctx_side_effect(&eff, ctx, "effect", effect_value, NULL);
    g_effect_commits = g_commits - before;
    before = g_commits;
    if (!st)
        st = pl_ctx_capture(&cap, ctx, "capture", capture_value, NULL);
    g_capture_commits = g_commits - before;
    if (g_die)
        raise(SIGKILL); /* both appended, the capture not yet durable */
    if (g_fail) {
        cJSON_Delete(eff);
        cJSON_Delete(cap);
        return PL_EIO; /* a failure records its reason, not the capture */
    }
    g_bad_capture = (pl_ctx_capture(&bad, ctx, "x", NULL, NULL) == PL_EINVAL) +
                    (pl_ctx_capture(&bad, ctx, "", capture_value, NULL) ==
                     PL_EINVAL) +
                    (pl_ctx_capture(NULL, ctx, "x", capture_value, NULL) ==
                     PL_EINVAL) +
                    (pl_ctx_capture(&bad, NULL, "x", capture_value, NULL) ==
                     PL_EINVAL) +
                    !bad;
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "effect", eff, "capture",
                                  cap);
    cJSON_Delete(eff);
    cJSON_Delete(cap);
    return st;
}

static pl_engine *capture_engine(const char *path, pl_registry **reg)
{
    *reg = t_registry();
    if (pl_registry_add_fn(*reg, "probe", probe, NULL))
        return NULL;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = count_commits;
    pl_engine *e = NULL;
    return pl_engine_open(&e, path, *reg, &o) ? NULL : e;
}

static const char *by(const cJSON *result, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(result, key);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(v, "by");
    return cJSON_IsString(b) ? b->valuestring : "";
}

Test(capture, rides_the_next_commit_and_is_served_on_replay)
{
    const char *path = t_store_path();
    pl_registry *reg;
    pl_engine *e = capture_engine(path, &reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    g_captured = g_effected = 0;
    pl_outcome *o = t_start(e, "probe", "{}", "r");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    const cJSON *r = pl_outcome_result(o);
    cr_expect_eq(g_effect_commits, 1, "a side effect commits");
    cr_expect_eq(g_capture_commits, 0, "a capture does not");
    cr_expect_str_eq(by(r, "capture"), "parent");
    cr_expect_eq(g_bad_capture, 5, "bad arguments are PL_EINVAL, no value");
    cr_expect_eq(g_captured, 1);
    pl_outcome_free(o);

    /* the capture is a side_effect step, named, with its value */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "r", "0"), PL_OK, "%s", pl_errmsg());
    const pl_step *s = pl_steps_at(l, 1);
    cr_assert_not_null(s);
    cr_expect_eq(pl_step_type_of(s), PL_STEP_SIDE_EFFECT);
    char *text = cJSON_PrintUnformatted(pl_step_payload(s));
    cr_expect_str_eq(text, "{\"name\":\"capture\",\"value\":{\"by\":"
                           "\"parent\"}}");
    free(text);
    pl_steps_free(l);

    /* replayed: served, fn not called */
    g_by = "replay";
    cr_assert_eq(pl_run_continue(&o, e, "r", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(by(pl_outcome_result(o), "capture"), "parent");
    cr_expect_eq(g_captured, 1);
    pl_outcome_free(o);
    g_by = "parent";
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Continue run @p id of probe: its side effect (by @p effect_by) is
 * served, its capture produced again (by "parent"). */
static void continues_with_a_new_capture(pl_engine *e, const char *id,
                                         const char *effect_by)
{
    g_by = "parent";
    g_captured = g_effected = 0;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(by(pl_outcome_result(o), "effect"), effect_by);
    cr_expect_str_eq(by(pl_outcome_result(o), "capture"), "parent");
    cr_expect_eq(g_effected, 0, "the side effect is served");
    cr_expect_eq(g_captured, 1, "the capture is produced again");
    pl_outcome_free(o);
}

Test(capture, a_capture_lost_in_a_crash_is_produced_again)
{
    const char *path = t_store_path();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_by = "child";
        g_die = true;
        pl_registry *reg;
        pl_engine *e = capture_engine(path, &reg);
        if (!e)
            _exit(11);
        cJSON *p = t_json("{}");
        pl_action a = {PL_ACTION_VERSION, "probe", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "k";
        pl_outcome *out = NULL;
        int st = pl_run_start(&out, e, &a, &ro);
        _exit(st ? 12 : 3); /* it should have died before this */
    }
    t_expect_killed(pid, "after its capture");

    /* the side effect was durable and is served; the capture, which only
     * the commit after it would have made durable, is produced again */
    pl_registry *reg;
    pl_engine *e = capture_engine(path, &reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    continues_with_a_new_capture(e, "k", "child");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(capture, a_capture_before_the_run_fails_is_produced_again)
{
    const char *path = t_store_path();
    pl_registry *reg;
    pl_engine *e = capture_engine(path, &reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    g_captured = g_effected = 0;
    g_by = "failed";
    g_fail = true;
    pl_outcome *o = t_start(e, "probe", "{}", "f");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);

    /* the side effect was durable and is served; the capture went with
     * the steps the failed execution dropped, and is produced again */
    g_fail = false;
    continues_with_a_new_capture(e, "f", "failed");
    pl_engine_close(e);
    pl_registry_free(reg);
}
