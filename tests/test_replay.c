/*
 * test_replay.c -- replay by comparison (docs/design.md §3;
 * core/replay/invocation.c, core/replay/call.c and core/replay/runner.c).
 *
 * Covers: a finished run continued executes nothing and returns the same
 * result; step ids derive from position; a policy that behaves differently on
 * replay fails the run with PL_ENONDET naming the run, invocation, position
 * and both steps, keeps failing until the code is fixed, then completes;
 * code identity changes are reported as events; check mode writes nothing;
 * recorded helpers (now/random/uuid/side_effect) replay their values; the
 * invocation's own ledger (pl_ctx_ledger) and seeds; idempotency keys; a
 * failing policy, an unregistered callee and an error-as-data tool result.
 */
#include "support.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static pl_engine *open_engine(const char *path, const pl_registry *reg)
{
    return t_engine(path, reg, PL_DURABILITY_PROCESS);
}

static pl_outcome *cont(pl_engine *e, const char *id)
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
static char *diverge(pl_engine *e, const char *id)
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

static pl_run_info *get_info(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    cr_assert_eq(st, PL_OK, "pl_run_get(%s): %s", id, pl_errmsg());
    return info;
}

static pl_steps *ledger(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    int st = pl_run_ledger(&l, e, id, path);
    cr_assert_eq(st, PL_OK, "pl_run_ledger(%s, %s): %s", id, path, pl_errmsg());
    return l;
}

/* Compact text of the outcome's result; caller frees. */
static char *result_text(const pl_outcome *o)
{
    return t_text(pl_outcome_result(o));
}

static void expect_str(const char *got, const char *want)
{
    cr_expect(got && strcmp(got, want) == 0, "expected \"%s\", got \"%s\"",
              want, got ? got : "(null)");
}

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

static int call_json(pl_ctx *ctx, const char *policy, const char *json,
                     pl_step **res)
{
    cJSON *p = cJSON_Parse(json ? json : "{}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    int st = pl_ctx_call(res, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    return st == PL_ERESULT ? PL_OK : st; /* an error result is data */
}

/* ------------------------------------------------------------------------ */
/* Test policies                                                            */
/* ------------------------------------------------------------------------ */

/* drift: calls g_tool with {"v": g_value}; returns the callee's result. */
static int g_value = 1;
static const char *g_tool = "echo";

static bool g_reorder; /* build the payload's members in reverse order */

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
static bool g_gate_closed;
static int g_gate_runs;

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

/* tool / callv: for code identity. */
static int g_tool_runs;

static int tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    g_tool_runs++;
    return pl_steps_add_result(out, a->payload);
}

static int callv(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_step *res = NULL;
    int st = call_json(ctx, "tool", "{\"n\": 7}", &res);
    if (st)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* helpers: every recorded helper; what each execution saw is kept. */
typedef struct seen_helpers {
    int64_t now;
    uint64_t rnd;
    char uuid[PL_UUID_LEN + 1];
    char fetched[64];
} seen_helpers;

static seen_helpers g_seen[4];
static int g_helper_runs;
static int g_effect_calls;
static const char *g_effect_name = "fetch";

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

/* reader: reads its ledger before and after two calls. */
#define SNAP_MAX 8
typedef struct snap {
    size_t n;
    char ids[SNAP_MAX][32];
    pl_step_type types[SNAP_MAX];
    char actors[SNAP_MAX][32];
} snap;

static snap g_snaps[8];
static int g_nsnaps;

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
static const char *g_seed_text = "hello";

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
static char g_root_keys[4][256];
static int g_nroot_keys;
static char g_keys[4][256];
static char g_key_paths[4][64];
static int g_nkeys;

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
static int g_talk = 2;
static bool g_talk_result = true;

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
static cJSON *deepest(void)
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

static pl_registry *registry(void)
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

/* ------------------------------------------------------------------------ */
/* Finished runs replay without executing                                   */
/* ------------------------------------------------------------------------ */

Test(replay, completed_run_continued_executes_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "chain", "{\"n\": 3}", "r1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(o1->calls_executed, 3);
    cr_assert_eq(o1->calls_served, 0);
    cr_assert_eq(t_calls.add, 3);
    cr_assert_eq(t_calls.chain, 1);

    pl_outcome *o2 = cont(e, "r1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(o2->calls_served, 3, "every call is served from the ledger");
    cr_expect_eq(o2->calls_executed, 0, "no callee runs on replay");
    cr_expect_eq(o2->steps_appended, 0, "replay writes no step");
    cr_expect_eq(o2->steps_replayed, 7, "3 calls, 3 results, 1 root result");
    cr_expect_eq(t_calls.add, 3, "add was not executed again");
    /* the root policy is re-executed (replay is re-execution), its callees
     * are not */
    cr_expect_eq(t_calls.chain, 2);

    char *r1 = result_text(o1), *r2 = result_text(o2);
    cr_expect_str_eq(r2, r1, "the same result");
    cr_expect_str_eq(r1, "{\"total\":3}");
    cr_expect_str_eq(pl_step_id(pl_steps_at(o2->steps, 0)),
                     pl_step_id(pl_steps_at(o1->steps, 0)));
    free(r1);
    free(r2);

    /* and a third time, still nothing executes */
    pl_outcome *o3 = cont(e, "r1");
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(o3->calls_served, 3);
    cr_expect_eq(t_calls.add, 3);
    pl_run_info *info = get_info(e, "r1");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_eq(info->steps, 10, "7 root steps + 3 callee results");
    cr_expect_eq(info->attempts, 1,
                 "replaying a completed run writes "
                 "nothing, not even an attempt");
    cr_expect_eq(pl_run_verify(e, "r1"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct id_list {
    size_t n;
    char ids[32][32];
    pl_step_type types[32];
    int64_t times[32];
} id_list;

static void collect_ids(pl_engine *e, const char *run, const char *path,
                        id_list *out)
{
    pl_steps *l = ledger(e, run, path);
    memset(out, 0, sizeof *out);
    out->n = pl_steps_count(l);
    cr_assert_leq(out->n, 32);
    for (size_t i = 0; i < out->n; i++) {
        const pl_step *s = pl_steps_at(l, i);
        snprintf(out->ids[i], sizeof out->ids[i], "%s", pl_step_id(s));
        out->types[i] = pl_step_type_of(s);
        out->times[i] = pl_step_time_us(s);
        cr_expect_eq(pl_step_seq(s), (uint32_t)i);
    }
    pl_steps_free(l);
}

Test(replay, step_ids_derive_from_position)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "chain", "{\"n\": 3}", "ids-a");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);

    id_list root, again;
    collect_ids(e, "ids-a", "0", &root);
    cr_assert_eq(root.n, 7);
    for (size_t i = 0; i < root.n; i++) {
        char want[32];
        snprintf(want, sizeof want, "0:%zu", i);
        cr_expect_str_eq(root.ids[i], want);
        pl_step_type t = i == 6         ? PL_STEP_ACTION_RESULT
                         : (i % 2 == 0) ? PL_STEP_ACTION_CALL
                                        : PL_STEP_ACTION_RESULT;
        cr_expect_eq(root.types[i], t, "step %zu", i);
    }
    /* each callee's invocation is named by the position of its call */
    const char *kids[] = {"0.0", "0.2", "0.4"};
    for (size_t k = 0; k < 3; k++) {
        id_list kid;
        collect_ids(e, "ids-a", kids[k], &kid);
        cr_expect_eq(kid.n, 1, "%s", kids[k]);
        char want[32];
        snprintf(want, sizeof want, "%s:0", kids[k]);
        cr_expect_str_eq(kid.ids[0], want);
    }
    id_list none;
    collect_ids(e, "ids-a", "0.1", &none);
    cr_expect_eq(none.n, 0, "no call at position 1");

    /* the outcome's result step has its place in the root ledger */
    const pl_step *last = pl_steps_at(o1->steps, pl_steps_count(o1->steps) - 1);
    cr_expect_str_eq(pl_step_id(last), "0:6");

    /* replay reproduces the same ids, and rewrites nothing */
    pl_outcome *o2 = cont(e, "ids-a");
    const pl_step *last2 = pl_steps_at(o2->steps,
                                       pl_steps_count(o2->steps) - 1);
    cr_expect_str_eq(pl_step_id(last2), "0:6");
    cr_expect_eq(pl_step_seq(last2), 6);
    collect_ids(e, "ids-a", "0", &again);
    cr_assert_eq(again.n, root.n);
    for (size_t i = 0; i < root.n; i++) {
        cr_expect_str_eq(again.ids[i], root.ids[i]);
        cr_expect_eq(again.times[i], root.times[i], "step %zu unchanged", i);
    }

    /* another run of the same program gets the same ids */
    pl_outcome *o3 = t_start(e, "chain", "{\"n\": 3}", "ids-b");
    id_list other;
    collect_ids(e, "ids-b", "0", &other);
    cr_assert_eq(other.n, root.n);
    for (size_t i = 0; i < root.n; i++)
        cr_expect_str_eq(other.ids[i], root.ids[i]);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Non-determinism                                                          */
/* ------------------------------------------------------------------------ */

Test(replay, divergent_payload_fails_with_enondet_until_fixed)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_value = 1;
    pl_outcome *o1 = t_start(e, "drift", NULL, "nd-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(t_calls.echo, 1);
    char *want = result_text(o1);

    g_value = 2; /* the "deploy" changes what the policy sends */
    for (int attempt = 0; attempt < 2; attempt++) {
        char *reason = diverge(e, "nd-1");
        expect_has(reason, "nd-1");          /* the run */
        expect_has(reason, "invocation 0,"); /* the invocation */
        expect_has(reason, "step 0");        /* the position */
        expect_has(reason, "0:0");           /* the step id */
        expect_has(reason, "action_call");
        /* both steps: the recorded one and the new one */
        expect_has(reason, "{\"policy\":\"echo\",\"payload\":{\"v\":1}}");
        expect_has(reason, "{\"policy\":\"echo\",\"payload\":{\"v\":2}}");
        cr_expect_eq(t_calls.echo, 1, "nothing executed on a divergence");
        free(reason);
    }

    g_value = 1; /* the code is fixed */
    pl_outcome *o3 = cont(e, "nd-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(o3->calls_served, 1);
    cr_expect_eq(t_calls.echo, 1);
    char *got = result_text(o3);
    cr_expect_str_eq(got, want);
    pl_run_info *info = get_info(e, "nd-1");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_null(info->reason);
    cr_expect_eq(info->error, 0);
    cr_expect_eq(pl_run_verify(e, "nd-1"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info);
    free(want);
    free(got);
    pl_outcome_free(o1);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* JSON objects are unordered: a call whose members come in another order
 * is the same call. */
Test(replay, a_call_with_its_members_reordered_replays)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_tool = "add";
    g_value = 3;
    pl_outcome *o1 = t_start(e, "drift", NULL, "nd-order");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    g_reorder = true;
    pl_outcome *o2 = cont(e, "nd-order");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(o2->calls_executed, 0);
    cr_expect_eq(o2->calls_served, 1);
    /* a reordered call that also changed is still a divergence */
    g_value = 4;
    char *reason = diverge(e, "nd-order");
    expect_has(reason, "action_call");
    free(reason);
    g_reorder = false;
    g_tool = "echo";
    g_value = 1;
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, calling_a_different_tool_is_nondeterminism)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_tool = "echo";
    pl_outcome *o1 = t_start(e, "drift", NULL, "nd-tool");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    g_tool = "add";
    char *reason = diverge(e, "nd-tool");
    expect_has(reason, "nd-tool");
    expect_has(reason, "\"policy\":\"echo\"");
    expect_has(reason, "\"policy\":\"add\"");
    cr_expect_eq(t_calls.add, 0, "the new tool never ran");
    g_tool = "echo";
    free(reason);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, divergence_in_a_nested_invocation_names_its_path)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_value = 1;
    g_gate_closed = true;
    /* outer -> drift_gate (0.0) -> echo (0.0.0), gate (0.0.2) fails */
    pl_outcome *o1 = t_start(e, "outer", NULL, "nd-nested");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    cr_assert_eq(o1->error, PL_EPOLICY, "%s", o1->reason);
    cr_assert_eq(t_calls.echo, 1);

    /* the nested invocation replays (its call has no result) and diverges */
    g_gate_closed = false;
    g_value = 5;
    pl_outcome *o2 = cont(e, "nd-nested");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    cr_expect_eq(o2->error, PL_ENONDET, "%s", o2->reason);
    expect_has(o2->reason, "nd-nested");
    expect_has(o2->reason, "invocation 0.0,");
    expect_has(o2->reason, "0.0:0");
    expect_has(o2->reason, "{\"v\":1}");
    expect_has(o2->reason, "{\"v\":5}");
    cr_expect_eq(t_calls.echo, 1);

    /* fixed: the echo call is served, the gate runs, the run completes */
    g_value = 1;
    int gate_before = g_gate_runs;
    pl_outcome *o3 = cont(e, "nd-nested");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(t_calls.echo, 1, "the recorded echo result was served");
    cr_expect_eq(g_gate_runs, gate_before + 1);
    cr_expect_eq(o3->calls_served, 1);
    cr_expect_eq(o3->calls_executed, 2, "gate and drift_gate");
    cr_expect_eq(pl_run_verify(e, "nd-nested"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, appending_fewer_steps_than_recorded_is_nondeterminism)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_talk = 2;
    g_talk_result = true;
    pl_outcome *o1 = t_start(e, "talky", NULL, "nd-short");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    cr_assert_eq(pl_steps_count(o1->steps), 3);
    expect_str(cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o1), "text")
                   ->valuestring,
               "final");

    /* the new code stops early: its steps are a strict prefix of the
     * record, so no single comparison fails -- but the recorded "final"
     * step is never reached and the result would change */
    g_talk_result = false;
    char *reason = diverge(e, "nd-short");
    expect_has(reason, "nd-short");
    expect_has(reason, "step 2");
    expect_has(reason, "\"final\"");
    g_talk_result = true;
    free(reason);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Code identity                                                            */
/* ------------------------------------------------------------------------ */

typedef struct code_events {
    int n_changed;
    char detail[512];
    char path[64];
    uint32_t seq;
    char policy[64];
} code_events;

static void on_code_event(const pl_event *ev, void *user)
{
    code_events *ce = user;
    if (ev->kind != PL_EVENT_CODE_CHANGED)
        return;
    ce->n_changed++;
    snprintf(ce->detail, sizeof ce->detail, "%s", ev->detail ? ev->detail : "");
    snprintf(ce->path, sizeof ce->path, "%s", ev->path ? ev->path : "");
    snprintf(ce->policy, sizeof ce->policy, "%s", ev->policy ? ev->policy : "");
    ce->seq = ev->seq;
}

static pl_registry *versioned_registry(const char *version)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "tool";
    d.fn = tool;
    d.code_version = version;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "callv", callv, NULL), PL_OK);
    return reg;
}

static pl_engine *engine_with_events(const char *path, const pl_registry *reg,
                                     pl_event_fn fn, void *user)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = fn;
    o.event_user = user;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

Test(replay, code_change_passes_and_is_reported)
{
    char path[4300];
    snprintf(path, sizeof path, "%s", t_store_path());
    code_events ce = {0};
    pl_registry *v1 = versioned_registry("tool-v1");
    pl_engine *e = engine_with_events(path, v1, on_code_event, &ce);
    pl_outcome *o1 = t_start(e, "callv", NULL, "code-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    cr_expect_eq(ce.n_changed, 0);
    pl_steps *l = ledger(e, "code-1", "0");
    cr_assert_geq(pl_steps_count(l), 1);
    expect_str(pl_step_code(pl_steps_at(l, 0)), "tool-v1");
    pl_steps_free(l);

    /* same code: replay reports nothing */
    pl_outcome *o2 = cont(e, "code-1");
    cr_expect_eq(ce.n_changed, 0);
    pl_engine_close(e);

    /* a deploy: the same policy under a new code version */
    pl_registry *v2 = versioned_registry("tool-v2");
    e = engine_with_events(path, v2, on_code_event, &ce);
    pl_outcome *o3 = cont(e, "code-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(o3->calls_executed, 0);
    cr_expect_eq(o3->calls_served, 1);
    cr_expect_eq(g_tool_runs, 1);
    cr_expect_eq(ce.n_changed, 1, "one code change, at the call");
    expect_has(ce.detail, "tool-v1");
    expect_has(ce.detail, "tool-v2");
    expect_has(ce.detail, "0:0");
    cr_expect_str_eq(ce.path, "0");
    cr_expect_eq(ce.seq, 0);
    char *a = result_text(o1), *b = result_text(o3);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    /* the record keeps the code that ran it */
    l = ledger(e, "code-1", "0");
    expect_str(pl_step_code(pl_steps_at(l, 0)), "tool-v1");
    pl_steps_free(l);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(v1);
    pl_registry_free(v2);
}

/* ------------------------------------------------------------------------ */
/* Check mode                                                               */
/* ------------------------------------------------------------------------ */

Test(replay, check_mode_on_a_completed_run_writes_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "chain", "{\"n\": 4}", "chk-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    pl_run_info *before = get_info(e, "chk-1");

    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o2 = NULL;
    int st = pl_run_continue(&o2, e, "chk-1", &ro);
    cr_assert_eq(st, PL_OK, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_not_null(o2);
    cr_expect_eq(o2->status, PL_RUN_COMPLETED);
    cr_expect_eq(o2->calls_executed, 0);
    cr_expect_eq(o2->calls_served, 4);
    cr_expect_eq(o2->steps_appended, 0);
    cr_expect_eq(t_calls.add, 4, "nothing executed");
    char *a = result_text(o1), *b = result_text(o2);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);

    pl_run_info *after = get_info(e, "chk-1");
    cr_expect_eq(after->status, before->status);
    cr_expect_eq(after->steps, before->steps, "no step written");
    cr_expect_eq(after->attempts, before->attempts, "no execution recorded");
    cr_expect_eq(after->updated_us, before->updated_us, "record untouched");
    cr_expect_eq(after->heartbeat_us, before->heartbeat_us);
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, check_mode_reports_divergence_and_touches_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_value = 1;
    pl_outcome *o1 = t_start(e, "drift", NULL, "chk-nd");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    pl_run_info *before = get_info(e, "chk-nd");

    g_value = 3;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    static pl_outcome dummy;
    pl_outcome *o2 = &dummy; /* must be reset to NULL */
    int st = pl_run_continue(&o2, e, "chk-nd", &ro);
    cr_expect_eq(st, PL_ENONDET, "%s", pl_status_name(st));
    cr_expect_null(o2);
    expect_has(pl_errmsg(), "chk-nd");
    expect_has(pl_errmsg(), "{\"v\":3}");

    pl_run_info *after = get_info(e, "chk-nd");
    cr_expect_eq(after->status, PL_RUN_COMPLETED, "still completed");
    cr_expect_eq(after->error, 0);
    cr_expect_null(after->reason);
    cr_expect_eq(after->attempts, before->attempts);
    cr_expect_eq(after->steps, before->steps);
    cr_expect_eq(after->updated_us, before->updated_us);
    cr_expect_eq(t_calls.echo, 1);
    g_value = 1;
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, check_mode_on_an_unfinished_run_is_echeck)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_gate_closed = true;
    pl_outcome *o1 = t_start(e, "outer", NULL, "chk-open");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    pl_run_info *before = get_info(e, "chk-open");
    g_gate_closed = false;
    int gate_runs = g_gate_runs;

    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o2 = NULL;
    int st = pl_run_continue(&o2, e, "chk-open", &ro);
    cr_expect_eq(st, PL_ECHECK, "%s", pl_status_name(st));
    cr_expect_null(o2);
    expect_has(pl_errmsg(), "chk-open");
    cr_expect_eq(g_gate_runs, gate_runs, "check mode executes nothing");
    pl_run_info *after = get_info(e, "chk-open");
    cr_expect_eq(after->status, PL_RUN_FAILED);
    cr_expect_eq(after->attempts, before->attempts);
    cr_expect_eq(after->steps, before->steps);
    cr_expect_str_eq(after->reason, before->reason);
    pl_run_info_free(before);
    pl_run_info_free(after);
    pl_outcome_free(o1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Recorded helpers                                                         */
/* ------------------------------------------------------------------------ */

Test(replay, recorded_helpers_return_the_same_values)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "helpers", NULL, "help-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(g_effect_calls, 1);
    pl_outcome *o2 = cont(e, "help-1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    pl_outcome *o3 = cont(e, "help-1");
    cr_assert_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_assert_eq(g_helper_runs, 3, "the root re-executes on every replay");
    cr_expect_eq(g_effect_calls, 1, "the side effect ran once");

    cr_expect_gt(g_seen[0].now, 1600000000000LL,
                 "a Unix time in ms, after 2020");
    cr_expect_eq(strlen(g_seen[0].uuid), PL_UUID_LEN);
    cr_expect_eq(g_seen[0].uuid[14], '4', "a version 4 UUID");
    for (int i = 1; i < 3; i++) {
        cr_expect_eq(g_seen[i].now, g_seen[0].now, "now, replay %d", i);
        cr_expect_eq(g_seen[i].rnd, g_seen[0].rnd, "random, replay %d", i);
        cr_expect_str_eq(g_seen[i].uuid, g_seen[0].uuid);
        cr_expect_str_eq(g_seen[i].fetched, g_seen[0].fetched);
    }
    cr_expect_str_eq(g_seen[0].fetched,
                     "{\"body\":\"external data\",\"call\":1}");
    char *a = result_text(o1), *b = result_text(o3);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);

    /* a new run records new values */
    pl_outcome *o4 = t_start(e, "helpers", NULL, "help-2");
    cr_expect_eq(g_effect_calls, 2);
    cr_expect_neq(g_seen[3].rnd, g_seen[0].rnd, "fresh randomness");
    cr_expect_str_neq(g_seen[3].uuid, g_seen[0].uuid);

    /* the values are side_effect steps of the invocation's own ledger */
    pl_steps *l = ledger(e, "help-1", "0");
    cr_assert_eq(pl_steps_count(l), 5);
    const char *names[] = {"now", "random", "uuid", "fetch"};
    for (size_t i = 0; i < 4; i++) {
        const pl_step *s = pl_steps_at(l, i);
        cr_expect_eq(pl_step_type_of(s), PL_STEP_SIDE_EFFECT);
        cr_expect_str_eq(pl_step_actor(s), "helpers");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                          "name");
        cr_expect(cJSON_IsString(n) && strcmp(n->valuestring, names[i]) == 0,
                  "side effect %zu is named %s", i, names[i]);
    }
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 4)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_outcome_free(o4);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, renamed_side_effect_is_nondeterminism)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_effect_name = "fetch";
    pl_outcome *o1 = t_start(e, "helpers", NULL, "se-name");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    g_effect_name = "download";
    char *reason = diverge(e, "se-name");
    expect_has(reason, "se-name");
    expect_has(reason, "\"fetch\"");
    expect_has(reason, "'download'");
    expect_has(reason, "step 3");
    free(reason);
    cr_expect_eq(g_effect_calls, 1, "the renamed side effect never ran");
    g_effect_name = "fetch";
    pl_outcome *o3 = cont(e, "se-name");
    cr_expect_eq(o3->status, PL_RUN_COMPLETED, "%s", o3->reason);
    cr_expect_eq(g_effect_calls, 1);
    pl_outcome_free(o1);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* The invocation's own ledger                                              */
/* ------------------------------------------------------------------------ */

static void expect_reader_snaps(const snap *first, const snap *second)
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

Test(replay, ctx_ledger_shows_the_invocations_own_steps)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o1 = t_start(e, "reader", NULL, "led-1");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    cr_assert_eq(g_nsnaps, 2);
    expect_reader_snaps(&g_snaps[0], &g_snaps[1]);

    /* on replay the ledger reads the same at the same points */
    pl_outcome *o2 = cont(e, "led-1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_assert_eq(g_nsnaps, 4);
    expect_reader_snaps(&g_snaps[2], &g_snaps[3]);
    cr_expect_eq(t_calls.echo, 2);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, sub_policy_ledger_is_empty_or_seeded)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "seeder", NULL, "seed-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_assert_eq(g_nsnaps, 2);
    cr_expect_eq(g_snaps[0].n, 0,
                 "no seed: an empty ledger, not the "
                 "caller's");
    cr_assert_eq(g_snaps[1].n, 2, "the seed steps open the ledger");
    cr_expect_str_eq(g_snaps[1].ids[0], "0.2:0");
    cr_expect_str_eq(g_snaps[1].ids[1], "0.2:1");
    cr_expect_eq(g_snaps[1].types[0], PL_STEP_TEXT);
    cr_expect_str_eq(g_snaps[1].actors[0], "system");
    cr_expect_str_eq(g_snaps[1].actors[1], "user");
    char *r = result_text(o);
    cr_expect_str_eq(r, "{\"n\":2,\"path\":\"0.2\"}");
    free(r);

    /* the seed is durable in the callee's ledger, before its result */
    pl_steps *l = ledger(e, "seed-1", "0.2");
    cr_assert_eq(pl_steps_count(l), 3);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(
        pl_step_payload(pl_steps_at(l, 1)), "text");
    cr_expect(cJSON_IsString(t) && strcmp(t->valuestring, "hello") == 0);
    cr_expect_eq(pl_step_type_of(pl_steps_at(l, 2)), PL_STEP_ACTION_RESULT);
    pl_steps_free(l);
    l = ledger(e, "seed-1", "0.0");
    cr_expect_eq(pl_steps_count(l), 1, "only the unseeded callee's result");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "seed-1"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, root_seed_opens_the_root_ledger)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_steps *seed = NULL;
    cr_assert_eq(pl_steps_new(&seed), PL_OK);
    cr_assert_eq(pl_steps_add_text(seed, "user", "hello"), PL_OK);
    pl_action a = {PL_ACTION_VERSION, "peek", pl_json_empty(), NULL, 0, seed};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "seed-root";
    pl_outcome *o1 = NULL;
    cr_assert_eq(pl_run_start(&o1, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_steps_free(seed); /* borrowed: the run keeps its own copy */
    cr_assert_eq(o1->status, PL_RUN_COMPLETED, "%s", o1->reason);
    char *r1 = result_text(o1);
    cr_expect_str_eq(r1, "{\"n\":1,\"path\":\"0\"}");
    expect_str(g_snaps[0].ids[0], "0:0");
    expect_str(g_snaps[0].actors[0], "user");

    /* continuing replays the stored seed */
    pl_outcome *o2 = cont(e, "seed-root");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    char *r2 = result_text(o2);
    cr_expect_str_eq(r2, r1);
    cr_expect_eq(o2->steps_appended, 0);
    pl_steps *l = ledger(e, "seed-root", "0");
    cr_expect_eq(pl_steps_count(l), 2, "the seed step and the result");
    pl_steps_free(l);
    free(r1);
    free(r2);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Values at the deepest nesting a payload may have stay readable wherever
 * the engine stores them: started, resumed, verified, read and replayed. */
Test(replay, values_at_the_depth_limit_read_back_inside_every_record)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_steps *seed = NULL;
    cJSON *v = deepest();
    cr_assert_eq(pl_steps_new(&seed), PL_OK);
    cr_assert_eq(pl_steps_add(seed, PL_STEP_TEXT, "user", v), PL_OK, "%s",
                 pl_errmsg());
    pl_action a = {PL_ACTION_VERSION, "deep", pl_json_empty(), NULL, 0, seed};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "deep";
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_steps_free(seed);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason ? o->reason : "");
    char *want = t_text(v), *got = t_text(o->prompt);
    cr_expect_str_eq(got, want, "the prompt reads back");
    free(got);
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);

    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "deep", token, v), PL_OK, "%s",
                 pl_errmsg());
    free(token);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    got = t_text(pl_outcome_result(o));
    cr_expect_str_eq(got, want, "the answer came back");
    free(got);
    free(want);
    pl_outcome_free(o);

    cr_assert_eq(pl_run_verify(e, "deep"), PL_OK, "%s", pl_errmsg());
    pl_steps *l = ledger(e, "deep", "0");
    cr_expect_gt(pl_steps_count(l), 5);
    pl_steps_free(l);
    int echoes = t_calls.echo;
    o = cont(e, "deep");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(t_calls.echo, echoes, "nothing ran again");
    pl_outcome_free(o);
    cJSON_Delete(v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, seed_is_compared_on_replay)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    cJSON *answer = t_json("{\"go\": true}");

    /* unchanged seed: the callee replays it and goes on */
    g_seed_text = "hello";
    pl_outcome *o1 = t_start(e, "seeded_wait", NULL, "seed-ok");
    cr_assert_eq(o1->status, PL_RUN_SUSPENDED, "%s", o1->reason);
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_resume(&o2, e, "seed-ok", o1->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    char *r = result_text(o2);
    cr_expect_str_eq(r, "{\"seen\":1,\"answer\":{\"go\":true}}");
    free(r);

    /* changed seed: the action_call records a digest of its seed, so the
     * call itself differs, before the callee replays anything */
    pl_outcome *o3 = t_start(e, "seeded_wait", NULL, "seed-nd");
    cr_assert_eq(o3->status, PL_RUN_SUSPENDED);
    g_seed_text = "goodbye";
    pl_outcome *o4 = NULL;
    cr_assert_eq(pl_run_resume(&o4, e, "seed-nd", o3->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o4->status, PL_RUN_FAILED);
    cr_expect_eq(o4->error, PL_ENONDET);
    expect_has(o4->reason, "seed-nd");
    expect_has(o4->reason, "invocation 0,");
    expect_has(o4->reason, "0:0");
    expect_has(o4->reason, "\"seed\":");

    /* and a completed run whose seeded call is served from the ledger
     * (its callee never runs) still notices a changed seed */
    g_seed_text = "hello";
    pl_outcome *o5 = t_start(e, "seeded_wait", NULL, "seed-served");
    pl_outcome *o6 = NULL;
    cr_assert_eq(pl_run_resume(&o6, e, "seed-served", o5->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o6->status, PL_RUN_COMPLETED, "%s", o6->reason);
    g_seed_text = "goodbye";
    char *reason = diverge(e, "seed-served");
    expect_has(reason, "0:0");
    expect_has(reason, "\"seed\":");
    free(reason);
    g_seed_text = "hello";
    pl_outcome_free(o5);
    pl_outcome_free(o6);
    cJSON_Delete(answer);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_outcome_free(o4);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Idempotency keys                                                         */
/* ------------------------------------------------------------------------ */

Test(replay, idempotency_key_is_stable_across_replays)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_gate_closed = true; /* keyed fails the first execution after running */
    pl_outcome *o1 = t_start(e, "keyed_root", NULL, "idem-1");
    cr_assert_eq(o1->status, PL_RUN_FAILED);
    cr_assert_eq(g_nkeys, 1);
    cr_expect_str_eq(g_root_keys[0], "idem-1/0");
    cr_expect_str_eq(g_keys[0], "idem-1/0:2", "<run id>/<caller path>:<seq>");
    cr_expect_str_eq(g_key_paths[0], "0.2");

    g_gate_closed = false; /* the in-flight call runs again, same key */
    pl_outcome *o2 = cont(e, "idem-1");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_assert_eq(g_nkeys, 2);
    cr_expect_str_eq(g_keys[1], g_keys[0]);
    cr_expect_str_eq(g_root_keys[1], g_root_keys[0]);

    /* a completed replay serves keyed; the root's key is still the same */
    pl_outcome *o3 = cont(e, "idem-1");
    cr_expect_eq(g_nkeys, 2);
    cr_expect_str_eq(g_root_keys[2], "idem-1/0");
    cr_expect_eq(t_calls.echo, 1);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Failures and errors as data                                              */
/* ------------------------------------------------------------------------ */

Test(replay, failing_policy_fails_the_run_with_epolicy)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "fail", NULL, "fail-root");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY);
    expect_has(o->reason, "'fail'");
    expect_has(o->reason, "fail-root");
    cr_expect_null(o->steps);
    pl_run_info *info = get_info(e, "fail-root");
    cr_expect_eq(info->status, PL_RUN_FAILED);
    cr_expect_eq(info->error, PL_EPOLICY);
    cr_expect_str_eq(info->reason, o->reason);
    pl_run_info_free(info);

    /* as a callee: the run fails (not an error result) naming the callee */
    pl_outcome *o2 = t_start(e, "probe", "{\"call\": \"fail\"}", "fail-callee");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    cr_expect_eq(o2->error, PL_EPOLICY);
    expect_has(o2->reason, "'fail'");
    expect_has(o2->reason, "0.0");

    /* replaying a failed run fails the same way */
    pl_outcome *o3 = cont(e, "fail-callee");
    cr_expect_eq(o3->status, PL_RUN_FAILED);
    cr_expect_eq(o3->error, PL_EPOLICY);
    expect_has(o3->reason, "'fail'");
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_outcome_free(o3);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

Test(replay, failure_reason_is_clean_and_not_stale)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    /* an unrelated earlier failure on this thread */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "unrelated-ghost"), PL_ENOTFOUND);
    expect_has(pl_errmsg(), "unrelated-ghost");

    /* "fail" returns PL_EPOLICY without any message of its own: the
     * recorded reason must say so once, and must neither blame the
     * unrelated lookup nor repeat itself */
    pl_outcome *o = t_start(e, "fail", NULL, "stale-1");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    expect_has(o->reason, "policy 'fail' at 0 returned PL_EPOLICY");
    cr_expect_eq(count_of(o->reason, "policy 'fail'"), 1,
                 "the reason repeats itself: %s", o->reason);
    cr_expect(strstr(o->reason, "unrelated-ghost") == NULL &&
                  strstr(o->reason, ".db") == NULL,
              "the reason carries a stale, unrelated message: %s", o->reason);

    /* a second failure on the same thread: no trace of the first */
    pl_outcome *o2 = t_start(e, "probe", "{\"call\": \"fail\"}", "stale-2");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    expect_has(o2->reason, "stale-2");
    expect_has(o2->reason, "policy 'fail' at 0.0 returned PL_EPOLICY");
    cr_expect(strstr(o2->reason, "stale-1") == NULL,
              "the reason of run stale-2 names run stale-1: %s", o2->reason);
    cr_expect_eq(count_of(o2->reason, "policy 'fail'"), 1,
                 "the reason repeats itself: %s", o2->reason);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, unregistered_callee_gives_a_notfound_result)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "probe",
                            "{\"call\": \"nosuch\", \"with\": {\"x\": 1}}",
                            "nf-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "not a failed run: %s",
                 o->reason);
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "is_error")));
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(r, "code");
    cr_expect(cJSON_IsString(code) &&
              strcmp(code->valuestring, PL_ERR_NOT_FOUND) == 0);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(r, "got");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(got, "message");
    cr_expect(cJSON_IsString(msg) && strstr(msg->valuestring, "nosuch"),
              "the message names the missing policy");

    /* the error result is recorded in the caller's ledger */
    pl_steps *l = ledger(e, "nf-1", "0");
    cr_assert_geq(pl_steps_count(l), 2);
    const pl_step *res = pl_steps_at(l, 1);
    cr_expect_eq(pl_step_type_of(res), PL_STEP_ACTION_RESULT);
    cr_expect(pl_step_is_error(res));
    expect_str(pl_step_error_code(res), PL_ERR_NOT_FOUND);
    cr_expect_str_eq(pl_step_actor(res), "nosuch");
    pl_steps_free(l);

    /* and served on replay */
    pl_outcome *o2 = cont(e, "nf-1");
    cr_expect_eq(o2->status, PL_RUN_COMPLETED);
    cr_expect_eq(o2->calls_served, 1);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(replay, error_as_data_reaches_the_caller)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "probe", "{\"call\": \"oops\"}", "oops-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "is_error")));
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(r, "code");
    cr_expect(cJSON_IsString(code) &&
              strcmp(code->valuestring, PL_ERR_TOOL_BUG) == 0);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(r, "got");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(got, "error")));
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(got, "message");
    cr_expect(cJSON_IsString(msg) &&
              strcmp(msg->valuestring, "something broke") == 0);
    const cJSON *actor = cJSON_GetObjectItemCaseSensitive(r, "actor");
    cr_expect(cJSON_IsString(actor) && strcmp(actor->valuestring, "oops") == 0);
    pl_run_info *info = get_info(e, "oops-1");
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    pl_run_info_free(info);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
