/*
 * test_events.c -- the engine's event callback (docs/design.md §18;
 * pl__emit() in core/engine/engine.c, its call sites in core/replay/invocation.c,
 * commit.c, callee.c and runner.c).
 *
 * A recorder copies every event (kind, run id, path, seq, policy, step type,
 * status, detail) while the callback runs -- the pointers are borrowed only
 * for the callback -- and the tests assert the exact sequences: a two-hop
 * run started and then continued (served from the ledger), an error-as-data
 * tool, a failed run, a suspended and resumed run.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The recorder                                                             */
/* ------------------------------------------------------------------------ */

#define MAX_EVENTS 256

typedef struct rec_event {
    pl_event_kind kind;
    char run_id[PL_MAX_RUN_ID + 1];
    bool has_path, has_policy, has_detail;
    char path[64];
    uint32_t seq;
    char policy[PL_MAX_NAME + 1];
    pl_step_type type;
    int status;
    char detail[1024];
} rec_event;

typedef struct recorder {
    rec_event ev[MAX_EVENTS];
    size_t n;
    size_t dropped;
    int bad_user; /* callbacks that got another user pointer */
} recorder;

static recorder g_rec;

/* Copy every string now: the event's pointers die with the callback. */
static void on_event(const pl_event *ev, void *user)
{
    if (user != &g_rec) {
        g_rec.bad_user++;
        return;
    }
    if (g_rec.n == MAX_EVENTS) {
        g_rec.dropped++;
        return;
    }
    rec_event *r = &g_rec.ev[g_rec.n++];
    memset(r, 0, sizeof *r);
    r->kind = ev->kind;
    snprintf(r->run_id, sizeof r->run_id, "%s", ev->run_id ? ev->run_id : "");
    r->has_path = ev->path != NULL;
    snprintf(r->path, sizeof r->path, "%s", ev->path ? ev->path : "");
    r->seq = ev->seq;
    r->has_policy = ev->policy != NULL;
    snprintf(r->policy, sizeof r->policy, "%s", ev->policy ? ev->policy : "");
    r->type = ev->step_type;
    r->status = ev->status;
    r->has_detail = ev->detail != NULL;
    snprintf(r->detail, sizeof r->detail, "%s", ev->detail ? ev->detail : "");
}

static void rec_reset(void) { memset(&g_rec, 0, sizeof g_rec); }

static pl_engine *open_engine(const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = on_event;
    o.event_user = &g_rec;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, t_store_path(), reg, &o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    return e;
}

/* One expected event; NULL path/policy: the event must carry none. */
typedef struct want_event {
    pl_event_kind kind;
    const char *path;
    uint32_t seq;
    const char *policy;
    pl_step_type type;
} want_event;

#define RUN(kind, pol)                                                         \
    {                                                                          \
        PL_EVENT_##kind, "0", 0, pol, 0                                        \
    }
#define APPENDED(path, seq, actor, type)                                       \
    {                                                                          \
        PL_EVENT_STEP_APPENDED, path, seq, actor, PL_STEP_##type               \
    }
#define REPLAYED(path, seq, actor, type)                                       \
    {                                                                          \
        PL_EVENT_STEP_REPLAYED, path, seq, actor, PL_STEP_##type               \
    }
#define CALL(kind, path, seq, callee, type)                                    \
    {                                                                          \
        PL_EVENT_##kind, path, seq, callee, PL_STEP_##type                     \
    }
#define COMMIT                                                                 \
    {                                                                          \
        PL_EVENT_COMMIT, NULL, 0, NULL, 0                                      \
    }

static const char *kind_name(pl_event_kind k)
{
    const char *n = pl_event_kind_name(k);
    return n ? n : "?";
}

/* A readable dump of what was recorded, for failure messages. */
static void dump(char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < g_rec.n && len < cap; i++) {
        const rec_event *r = &g_rec.ev[i];
        len += (size_t)snprintf(buf + len, cap - len, "\n  %2zu %-15s %s:%u %s",
                                i, kind_name(r->kind), r->path, r->seq,
                                r->policy);
    }
}

static void expect_sequence(const char *run_id, const want_event *want,
                            size_t n_want)
{
    static char all[16384];
    dump(all, sizeof all);
    cr_expect_eq(g_rec.dropped, 0);
    cr_expect_eq(g_rec.bad_user, 0, "event_user is passed to every callback");
    cr_expect_eq(g_rec.n, n_want, "%zu events, expected %zu:%s", g_rec.n,
                 n_want, all);
    size_t n = g_rec.n < n_want ? g_rec.n : n_want;
    for (size_t i = 0; i < n; i++) {
        const rec_event *r = &g_rec.ev[i];
        const want_event *w = &want[i];
        cr_assert_eq(r->kind, w->kind, "event %zu is %s, expected %s:%s", i,
                     kind_name(r->kind), kind_name(w->kind), all);
        cr_expect_str_eq(r->run_id, run_id, "event %zu", i);
        if (w->path) {
            cr_expect(r->has_path && strcmp(r->path, w->path) == 0,
                      "event %zu (%s): path '%s', expected '%s'", i,
                      kind_name(r->kind), r->path, w->path);
            cr_expect_eq(r->seq, w->seq, "event %zu (%s): seq %u, expected %u",
                         i, kind_name(r->kind), r->seq, w->seq);
        }
        if (w->policy)
            cr_expect(r->has_policy && strcmp(r->policy, w->policy) == 0,
                      "event %zu (%s): policy '%s', expected '%s'", i,
                      kind_name(r->kind), r->policy, w->policy);
        if (w->type)
            cr_expect_eq(r->type, w->type,
                         "event %zu (%s): step type %d, "
                         "expected %d",
                         i, kind_name(r->kind), (int)r->type, (int)w->type);
    }
}

static size_t count_kind(pl_event_kind k)
{
    size_t n = 0;
    for (size_t i = 0; i < g_rec.n; i++)
        n += g_rec.ev[i].kind == k;
    return n;
}

static const rec_event *find_kind(pl_event_kind k)
{
    for (size_t i = 0; i < g_rec.n; i++)
        if (g_rec.ev[i].kind == k)
            return &g_rec.ev[i];
    return NULL;
}

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

/* ------------------------------------------------------------------------ */
/* Test policies                                                            */
/* ------------------------------------------------------------------------ */

static int call_json(pl_ctx *ctx, const char *policy, const char *json)
{
    cJSON *p = cJSON_Parse(json ? json : "{}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    int st = pl_ctx_call(NULL, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    return st == PL_ERESULT ? PL_OK : st; /* an error result is data */
}

/* twohop: echo, then add, then {"done": true}. */
static int twohop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_json(ctx, "echo", "{\"x\": 1}");
    if (!st)
        st = call_json(ctx, "add", "{\"a\": 1, \"b\": 2}");
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddTrueToObject(r, "done");
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* one: calls payload.call and returns a text. */
static int one(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "call");
    int st = call_json(ctx, cJSON_IsString(name) ? name->valuestring : "echo",
                       NULL);
    if (st)
        return st;
    return pl_steps_add_text(out, NULL, "after");
}

/* human: suspends; returns the answer. */
static int human(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *ans = NULL;
    int st = pl_ctx_suspend(&ans, ctx, a->payload);
    if (st)
        return st;
    st = pl_steps_add_result(out, ans);
    cJSON_Delete(ans);
    return st;
}

/* waits: waits for event "go"; cancelled, returns PL_ECANCELLED. */
static int waits(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *ev = NULL;
    int st = pl_ctx_wait_event(&ev, ctx, "go", PL_WAIT_FOREVER);
    if (st)
        return st;
    st = pl_steps_add_result(out, ev);
    cJSON_Delete(ev);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {
        {"twohop", twohop}, {"one", one}, {"human", human}, {"waits", waits}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

Test(events, two_hop_run_emits_the_documented_sequence)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    rec_reset();
    pl_outcome *o = t_start(e, "twohop", NULL, "ev-2hop");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);

    const want_event want[] = {
        RUN(RUN_STARTED, "twohop"),
        /* echo */
        APPENDED("0", 0, "twohop", ACTION_CALL),
        CALL(CALL_STARTED, "0", 0, "echo", ACTION_CALL),
        APPENDED("0.0", 0, "echo", ACTION_RESULT),
        APPENDED("0", 1, "echo", ACTION_RESULT),
        COMMIT,
        CALL(CALL_COMPLETED, "0", 0, "echo", ACTION_RESULT),
        /* add */
        APPENDED("0", 2, "twohop", ACTION_CALL),
        CALL(CALL_STARTED, "0", 2, "add", ACTION_CALL),
        APPENDED("0.2", 0, "add", ACTION_RESULT),
        APPENDED("0", 3, "add", ACTION_RESULT),
        COMMIT,
        CALL(CALL_COMPLETED, "0", 2, "add", ACTION_RESULT),
        /* the root's result */
        APPENDED("0", 4, "twohop", ACTION_RESULT),
        COMMIT,
        RUN(RUN_COMPLETED, "twohop"),
    };
    expect_sequence("ev-2hop", want, sizeof want / sizeof want[0]);
    /* commits carry no invocation; failures and details are absent */
    for (size_t i = 0; i < g_rec.n; i++) {
        const rec_event *r = &g_rec.ev[i];
        if (r->kind == PL_EVENT_COMMIT)
            cr_expect(!r->has_path && !r->has_policy, "commit %zu", i);
        cr_expect_eq(r->status, 0, "event %zu", i);
        cr_expect(!r->has_detail, "event %zu (%s) has detail '%s'", i,
                  kind_name(r->kind), r->detail);
    }
    cr_expect_eq(count_kind(PL_EVENT_STEP_APPENDED), o->steps_appended);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(events, continued_run_is_served_and_appends_nothing)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    pl_outcome *o1 = t_start(e, "twohop", NULL, "ev-cont");
    cr_assert_eq(o1->status, PL_RUN_COMPLETED);
    rec_reset();
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_continue(&o2, e, "ev-cont", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o2->status, PL_RUN_COMPLETED);

    /* a completed run is final: its replay writes nothing, not even its
     * record, so there is no commit */
    const want_event want[] = {
        RUN(RUN_STARTED, "twohop"),
        REPLAYED("0", 0, "twohop", ACTION_CALL),
        REPLAYED("0", 1, "echo", ACTION_RESULT),
        CALL(CALL_SERVED, "0", 0, "echo", ACTION_RESULT),
        REPLAYED("0", 2, "twohop", ACTION_CALL),
        REPLAYED("0", 3, "add", ACTION_RESULT),
        CALL(CALL_SERVED, "0", 2, "add", ACTION_RESULT),
        REPLAYED("0", 4, "twohop", ACTION_RESULT),
        RUN(RUN_COMPLETED, "twohop"),
    };
    expect_sequence("ev-cont", want, sizeof want / sizeof want[0]);
    cr_expect_eq(count_kind(PL_EVENT_COMMIT), 0);
    cr_expect_eq(count_kind(PL_EVENT_STEP_APPENDED), 0);
    cr_expect_eq(count_kind(PL_EVENT_CALL_STARTED), 0);
    cr_expect_eq(count_kind(PL_EVENT_CALL_COMPLETED), 0);
    cr_expect_eq(count_kind(PL_EVENT_CALL_SERVED), o2->calls_served);
    cr_expect_eq(count_kind(PL_EVENT_STEP_REPLAYED), o2->steps_replayed);
    pl_outcome_free(o1);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(events, error_result_is_call_failed_with_its_code)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    rec_reset();
    pl_outcome *o = t_start(e, "one", "{\"call\": \"oops\"}", "ev-oops");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "an error result is data: %s",
                 o->reason);
    const want_event want[] = {
        RUN(RUN_STARTED, "one"),
        APPENDED("0", 0, "one", ACTION_CALL),
        CALL(CALL_STARTED, "0", 0, "oops", ACTION_CALL),
        APPENDED("0.0", 0, "oops", ACTION_RESULT),
        APPENDED("0", 1, "oops", ACTION_RESULT),
        COMMIT,
        CALL(CALL_FAILED, "0", 0, "oops", ACTION_RESULT),
        APPENDED("0", 2, "one", TEXT),
        COMMIT,
        RUN(RUN_COMPLETED, "one"),
    };
    expect_sequence("ev-oops", want, sizeof want / sizeof want[0]);
    const rec_event *f = find_kind(PL_EVENT_CALL_FAILED);
    cr_assert_not_null(f);
    cr_expect_eq(f->status, 0, "an error result, not a failed run");
    cr_expect(f->has_detail);
    cr_expect_str_eq(f->detail, PL_ERR_TOOL_BUG);
    cr_expect_eq(count_kind(PL_EVENT_CALL_COMPLETED), 0);

    /* an unregistered callee: an error result too, with no call started */
    rec_reset();
    pl_outcome *o2 = t_start(e, "one", "{\"call\": \"ghost\"}", "ev-ghost");
    cr_assert_eq(o2->status, PL_RUN_COMPLETED);
    cr_expect_eq(count_kind(PL_EVENT_CALL_STARTED), 0);
    f = find_kind(PL_EVENT_CALL_FAILED);
    cr_assert_not_null(f);
    cr_expect_str_eq(f->detail, PL_ERR_NOT_FOUND);
    cr_expect_str_eq(f->policy, "ghost");
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(events, failed_run_reports_call_failed_and_run_failed)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    rec_reset();
    pl_outcome *o = t_start(e, "one", "{\"call\": \"fail\"}", "ev-fail");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_assert_not_null(o->reason);
    const want_event want[] = {
        RUN(RUN_STARTED, "one"),
        APPENDED("0", 0, "one", ACTION_CALL),
        CALL(CALL_STARTED, "0", 0, "fail", ACTION_CALL),
        CALL(CALL_FAILED, "0", 0, "fail", ACTION_CALL),
        COMMIT, /* the failed run's record */
        RUN(RUN_FAILED, "one"),
    };
    expect_sequence("ev-fail", want, sizeof want / sizeof want[0]);
    const rec_event *cf = find_kind(PL_EVENT_CALL_FAILED);
    cr_assert_not_null(cf);
    cr_expect_eq(cf->status, PL_EPOLICY);
    expect_has(cf->detail, "'fail'");
    const rec_event *rf = find_kind(PL_EVENT_RUN_FAILED);
    cr_assert_not_null(rf);
    cr_expect_eq(rf->status, PL_EPOLICY);
    cr_expect(rf->has_detail);
    cr_expect_str_eq(rf->detail, o->reason, "the reason is the detail");
    cr_expect_eq(count_kind(PL_EVENT_RUN_COMPLETED), 0);

    /* a failing root: no call at all */
    rec_reset();
    pl_outcome *o2 = t_start(e, "fail", NULL, "ev-fail-root");
    cr_assert_eq(o2->status, PL_RUN_FAILED);
    cr_assert_gt(g_rec.n, 0);
    const rec_event *last = &g_rec.ev[g_rec.n - 1];
    cr_expect_eq(last->kind, PL_EVENT_RUN_FAILED);
    cr_expect_str_eq(last->detail, o2->reason);
    cr_expect_str_eq(last->policy, "fail");
    cr_expect_eq(count_kind(PL_EVENT_CALL_FAILED), 0);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(events, suspension_reports_run_suspended)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    rec_reset();
    pl_outcome *o = t_start(e, "one", "{\"call\": \"human\"}", "ev-susp");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason);
    const want_event want[] = {
        RUN(RUN_STARTED, "one"),
        APPENDED("0", 0, "one", ACTION_CALL),
        CALL(CALL_STARTED, "0", 0, "human", ACTION_CALL),
        APPENDED("0.0", 0, "human", SUSPEND),
        COMMIT,
        {PL_EVENT_RUN_SUSPENDED, "0.0", 0, "one", PL_STEP_SUSPEND},
    };
    expect_sequence("ev-susp", want, sizeof want / sizeof want[0]);
    cr_expect_eq(count_kind(PL_EVENT_CALL_FAILED), 0,
                 "a suspension is not a failure");

    /* resuming: the suspend step replays, the answer was written by the
     * resume itself, and the run completes */
    rec_reset();
    cJSON *ans = t_json("{\"ok\": true}");
    pl_outcome *o2 = NULL;
    cr_assert_eq(pl_run_resume(&o2, e, "ev-susp", o->resume_token, ans), PL_OK,
                 "%s", pl_errmsg());
    cJSON_Delete(ans);
    cr_assert_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    const want_event want2[] = {
        RUN(RUN_STARTED, "one"),
        REPLAYED("0", 0, "one", ACTION_CALL),
        CALL(CALL_STARTED, "0", 0, "human", ACTION_CALL),
        REPLAYED("0.0", 0, "human", SUSPEND),
        REPLAYED("0.0", 1, "human", RESUME),
        APPENDED("0.0", 2, "human", ACTION_RESULT),
        APPENDED("0", 1, "human", ACTION_RESULT),
        COMMIT,
        CALL(CALL_COMPLETED, "0", 0, "human", ACTION_RESULT),
        APPENDED("0", 2, "one", TEXT),
        COMMIT,
        RUN(RUN_COMPLETED, "one"),
    };
    expect_sequence("ev-susp", want2, sizeof want2 / sizeof want2[0]);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(events, step_events_match_the_ledger)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    rec_reset();
    pl_outcome *o = t_start(e, "chain", "{\"n\": 4}", "ev-ledger");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    /* every appended step is in the store at the place its event named */
    size_t checked = 0;
    for (size_t i = 0; i < g_rec.n; i++) {
        const rec_event *r = &g_rec.ev[i];
        if (r->kind != PL_EVENT_STEP_APPENDED)
            continue;
        pl_steps *l = NULL;
        cr_assert_eq(pl_run_ledger(&l, e, "ev-ledger", r->path), PL_OK);
        const pl_step *s = pl_steps_at(l, r->seq);
        cr_expect_not_null(s, "no step %s:%u", r->path, r->seq);
        if (s) {
            cr_expect_eq(pl_step_type_of(s), r->type);
            cr_expect_str_eq(pl_step_actor(s), r->policy);
            checked++;
        }
        pl_steps_free(l);
    }
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "ev-ledger"), PL_OK);
    cr_expect_eq(checked, info->steps, "one event per durable step");
    /* and every step became durable after a commit event */
    cr_assert_gt(g_rec.n, 1);
    size_t last_appended = 0, last_commit = 0;
    for (size_t i = 0; i < g_rec.n; i++) {
        if (g_rec.ev[i].kind == PL_EVENT_STEP_APPENDED)
            last_appended = i;
        if (g_rec.ev[i].kind == PL_EVENT_COMMIT)
            last_commit = i;
    }
    cr_expect_gt(last_commit, last_appended);
    cr_expect_eq(g_rec.ev[g_rec.n - 1].kind, PL_EVENT_RUN_COMPLETED);
    pl_run_info_free(info);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(events, no_callback_no_events)
{
    /* an engine without a callback runs the same program fine */
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    rec_reset();
    pl_outcome *o = t_start(e, "twohop", NULL, "ev-none");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(g_rec.n, 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A run that parks reports PL_EVENT_RUN_SUSPENDED at its `wait` step, the
 * event waited for in detail; one that ends cancelled, PL_EVENT_RUN_FAILED
 * with PL_ECANCELLED and the reason (engine.h). */
Test(events, a_wait_and_a_cancellation_report_their_ends)
{
    pl_registry *reg = registry();
    pl_engine *e = open_engine(reg);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    rec_reset();
    pl_outcome *o = t_start(e, "waits", "{}", "ev-wait");
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s", o->reason);
    pl_outcome_free(o);
    cr_assert_gt(g_rec.n, 0);
    const rec_event *last = &g_rec.ev[g_rec.n - 1];
    cr_expect_eq(last->kind, PL_EVENT_RUN_SUSPENDED, "%s",
                 kind_name(last->kind));
    cr_expect_eq(last->type, PL_STEP_WAIT);
    cr_expect_str_eq(last->path, "0");
    cr_expect_str_eq(last->detail, "go");
    rec_reset();
    cr_assert_eq(pl_run_cancel(e, "ev-wait", "enough"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_gt(g_rec.n, 0);
    last = &g_rec.ev[g_rec.n - 1];
    cr_expect_eq(last->kind, PL_EVENT_RUN_FAILED, "%s", kind_name(last->kind));
    cr_expect_eq(last->status, PL_ECANCELLED);
    cr_expect_str_eq(last->detail, "enough");
    cr_expect_str_eq(last->run_id, "ev-wait");
    cr_expect_eq(count_kind(PL_EVENT_RUN_COMPLETED), 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}
