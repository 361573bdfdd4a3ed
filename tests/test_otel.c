/*
 * test_otel.c -- the OpenTelemetry exporter (core/ext/otel.c) against a
 * loopback receiver this test starts (tests/llm_server.py, which logs every
 * request body).
 *
 * Covers: the OTLP/HTTP JSON shape, span names and attributes, parent ids
 * that form the call tree, one trace id per run, timing order (start <=
 * end, a child inside its parent), an error result, a suspend and resume
 * (the same ids), a crash and its replay (served calls marked), concurrent
 * runs, a lease lost (the spans end); a receiver that fails, hangs or is
 * down never blocks or fails a run and its spans are counted as dropped;
 * bad options; the endpoint and headers from the environment.
 */
#include "support_otel.h"

#include <netinet/in.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- policies ------------------------------------------------------------ */

static int call_simple(pl_ctx *ctx, const char *policy, const char *payload)
{
    cJSON *p = t_json(payload);
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    int st = pl_ctx_call(NULL, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    return st == PL_ERESULT ? PL_OK : st; /* an error result is data */
}

/* outer: chain (which calls add twice), oops (an error result), echo. */
static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_simple(ctx, "chain", "{\"n\": 2}");
    if (!st)
        st = call_simple(ctx, "oops", "{}");
    if (!st)
        st = call_simple(ctx, "echo", "{\"x\": 1}");
    return st ? st : pl_steps_add_text(out, "outer", "done");
}

/* approve: suspends for a human; its result is the answer. */
static int approve(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *prompt = t_json("{\"question\": \"ok?\"}");
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, prompt);
    cJSON_Delete(prompt);
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

/* asker: echo, approve (suspends), add. */
static int asker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_simple(ctx, "echo", "{}");
    if (!st)
        st = call_simple(ctx, "approve", "{}");
    if (!st)
        st = call_simple(ctx, "add", "{\"a\": 1, \"b\": 2}");
    return st ? st : pl_steps_add_text(out, "asker", "done");
}

/* die: kills its process while g_die is set (the first execution). */
static volatile int g_die;
static int die(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    if (g_die)
        raise(SIGKILL);
    return pl_steps_add_text(out, "die", "survived");
}

/* crashy: echo, then die. */
static int crashy(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = call_simple(ctx, "echo", "{}");
    if (!st)
        st = call_simple(ctx, "die", "{}");
    return st ? st : pl_steps_add_text(out, "crashy", "done");
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    static const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"outer", outer},
                {"approve", approve},
                {"asker", asker},
                {"die", die},
                {"crashy", crashy}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* ---- the engine ----------------------------------------------------------- */

static pl_engine *engine_with(const char *path, const pl_registry *reg,
                              pl_otel *x)
{
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = x ? pl_otel_event : NULL;
    eo.event_user = x;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &eo);
    cr_assert_eq(st, PL_OK, "pl_engine_open: %s", pl_errmsg());
    return e;
}

static pl_outcome *start(pl_engine *e, const char *policy, const char *id)
{
    pl_outcome *o = t_start(e, policy, "{}", id);
    cr_assert_not_null(o);
    return o;
}

static unsigned long long ns(const cJSON *sp, const char *key)
{
    const char *t = t_str(sp, key);
    cr_assert_not_null(t, "span without %s", key);
    char *end;
    unsigned long long v = strtoull(t, &end, 10);
    cr_assert(*t && !*end, "%s is not a decimal string: %s", key, t);
    return v;
}

static void hex_of(char *out, const char *run, const char *path, size_t n)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    char buf[512];
    size_t len = strlen(run);
    memcpy(buf, run, len);
    if (path) {
        buf[len++] = '\0';
        memcpy(buf + len, path, strlen(path));
        len += strlen(path);
    }
    SHA256((const unsigned char *)buf, len, md);
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/*
 * Check every span of @p run in @p spans: the derived trace and span ids,
 * the parent is the caller's span, kind, times in order and inside the
 * parent's.  @return how many spans the run has.
 */
static int check_tree(const cJSON *spans, const char *run)
{
    char trace[33], root_id[17];
    hex_of(trace, run, NULL, 16);
    hex_of(root_id, run, "0", 8);
    int n = 0;
    const cJSON *sp;
    cJSON_ArrayForEach(sp, spans)
    {
        const char *r = ot_attr_s(sp, "policyledger.run_id");
        if (!r || strcmp(r, run))
            continue;
        n++;
        const char *path = ot_attr_s(sp, "policyledger.path");
        cr_assert_not_null(path);
        cr_expect_str_eq(t_str(sp, "traceId"), trace, "one trace per run");
        char id[17];
        hex_of(id, run, path, 8);
        cr_expect_str_eq(t_str(sp, "spanId"), id, "span id of %s", path);
        cr_expect_eq(cJSON_GetObjectItemCaseSensitive(sp, "kind")->valueint, 1);
        cr_expect_leq(ns(sp, "startTimeUnixNano"), ns(sp, "endTimeUnixNano"),
                      "span %s ends before it starts", path);
        const char *dot = strrchr(path, '.');
        if (!dot) {
            cr_expect_null(cJSON_GetObjectItemCaseSensitive(sp, "parentSpanId"),
                           "the run's span is the root");
            cr_expect_null(ot_attr(sp, "policyledger.served"));
            continue;
        }
        char ppath[256];
        snprintf(ppath, sizeof ppath, "%.*s", (int)(dot - path), path);
        char pid[17];
        hex_of(pid, run, ppath, 8);
        cr_expect_str_eq(t_str(sp, "parentSpanId"), pid,
                         "the parent of %s is %s's span", path, ppath);
        cr_expect_not_null(ot_attr(sp, "policyledger.served"));
        cr_expect_not_null(t_str(ot_attr(sp, "policyledger.step"), "intValue"));
        /* inside its parent, when the parent executed in the same batch of
         * events (a served call's parent may be the run of another process) */
        const cJSON *parent = ot_span_at(spans, run, ppath);
        cr_assert_not_null(parent, "no span for %s, the parent of %s", ppath,
                           path);
        if (ns(sp, "startTimeUnixNano") >= ns(parent, "startTimeUnixNano")) {
            cr_expect_leq(ns(sp, "endTimeUnixNano"),
                          ns(parent, "endTimeUnixNano"),
                          "%s ends after its parent", path);
        }
    }
    return n;
}

TestSuite(otel, .fini = t_cleanup);

/* ---- the spans of a run ---------------------------------------------------- */

Test(otel, nested_calls_and_an_error_result)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = registry();
    pl_engine *e = engine_with(t_store_path(), reg, x);
    pl_outcome *o = start(e, "outer", "run-nested");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    ot_flush(x);
    pl_otel_counts c = PL_OTEL_COUNTS_INIT;
    cr_assert_eq(pl_otel_stats(&c, x), PL_OK);
    cr_expect_eq(c.spans, 6); /* run, chain, add, add, oops, echo */
    cr_expect_eq(c.sent, 6);
    cr_expect_eq(c.dropped, 0);

    cJSON *spans = ot_spans(&s);
    cr_expect_eq(check_tree(spans, "run-nested"), 6);
    static const struct {
        const char *path, *name, *outcome;
    } want[] = {{"0", "run outer", "completed"}, {"0.0", "chain", "completed"},
                {"0.0.0", "add", "completed"},   {"0.0.2", "add", "completed"},
                {"0.2", "oops", "failed"},       {"0.4", "echo", "completed"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cJSON *sp = ot_span_at(spans, "run-nested", want[i].path);
        cr_assert_not_null(sp, "no span at %s", want[i].path);
        cr_expect_str_eq(t_str(sp, "name"), want[i].name);
        cr_expect_str_eq(ot_attr_s(sp, "policyledger.outcome"), want[i].outcome,
                         "outcome at %s", want[i].path);
        const cJSON *served = ot_attr(sp, "policyledger.served");
        if (served)
            cr_expect(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
                          served, "boolValue")),
                      "executed, not served");
    }
    const cJSON *add = ot_span_at(spans, "run-nested", "0.0.2");
    cr_expect_str_eq(ot_attr_s(add, "policyledger.policy"), "add");
    cr_expect_str_eq(t_str(ot_attr(add, "policyledger.step"), "intValue"), "2");
    const cJSON *bad = ot_span_at(spans, "run-nested", "0.2");
    cr_expect_str_eq(ot_attr_s(bad, "policyledger.error_code"), "ToolBug");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(bad, "status");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(status, "code")->valueint, 2);
    cr_expect_str_eq(t_str(status, "message"), "ToolBug");
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(ot_span_at(spans,
                                                                  "run-nested",
                                                                  "0.4"),
                                                       "status");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(ok, "code")->valueint, 0);
    cJSON_Delete(spans);

    /* continuing the completed run replays it: every call served, the same
     * ids, marked */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, e, "run-nested", NULL), PL_OK);
    cr_expect_eq(again->calls_executed, 0);
    pl_outcome_free(again);
    ot_flush(x);
    spans = ot_spans(&s);
    /* the run and its three calls, served: chain's own calls are not
     * replayed */
    cr_expect_eq(check_tree(spans, "run-nested"), 6 + 4);
    const cJSON *served = ot_span_at(spans, "run-nested", "0.0");
    cr_expect_str_eq(ot_attr_s(served, "policyledger.outcome"), "served");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        ot_attr(served, "policyledger.served"), "boolValue")));
    cJSON_Delete(spans);

    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK, "%s", pl_errmsg());
    pl_registry_free(reg);
}

Test(otel, a_failed_run)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = registry();
    pl_engine *e = engine_with(t_store_path(), reg, x);
    pl_outcome *o = start(e, "fail", "run-fail");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    cr_expect_eq(check_tree(spans, "run-fail"), 1);
    const cJSON *root = ot_span_at(spans, "run-fail", "0");
    cr_assert_not_null(root);
    cr_expect_str_eq(ot_attr_s(root, "policyledger.outcome"), "failed");
    cr_expect_str_eq(ot_attr_s(root, "policyledger.status"), "PL_EPOLICY");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(root, "status");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(status, "code")->valueint, 2);
    cJSON_Delete(spans);
    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK);
    pl_registry_free(reg);
}

/* A run whose lease this worker lost (it stalled) stops here: its spans
 * end, the run's and the call's it was in, not left open for good. */
Test(otel, a_lease_lost_ends_the_runs_spans)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_event ev = {.kind = PL_EVENT_RUN_STARTED,
                   .run_id = "run-lapsed",
                   .path = "0",
                   .policy = "outer"};
    pl_otel_event(&ev, x);
    ev.kind = PL_EVENT_CALL_STARTED;
    ev.seq = 1;
    ev.policy = "inner";
    pl_otel_event(&ev, x);
    pl_event lost = {.kind = PL_EVENT_LEASE_LOST,
                     .run_id = "run-lapsed",
                     .path = "0",
                     .status = PL_EBUSY,
                     .detail = "this worker's lease was taken over"};
    pl_otel_event(&lost, x);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    cr_assert_eq(cJSON_GetArraySize(spans), 2);
    const char *paths[] = {"0", "0.1"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *sp = ot_span_at(spans, "run-lapsed", paths[i]);
        cr_assert_not_null(sp, "%s", paths[i]);
        cr_expect_str_eq(ot_attr_s(sp, "policyledger.outcome"), "lease_lost");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(sp, "status");
        cr_expect_eq(cJSON_GetObjectItemCaseSensitive(st, "code")->valueint, 2,
                     "%s", paths[i]);
    }
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-lapsed", "0"),
                               "policyledger.status"),
                     "PL_EBUSY");
    cJSON_Delete(spans);
    cr_expect_eq(pl_otel_close(x), PL_OK);
}

Test(otel, suspend_and_resume_continue_the_trace)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = registry();
    pl_engine *e = engine_with(t_store_path(), reg, x);
    pl_outcome *o = start(e, "asker", "run-ask");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    cr_expect_eq(check_tree(spans, "run-ask"), 3); /* run, echo, approve */
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-ask", "0"),
                               "policyledger.outcome"),
                     "suspended");
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-ask", "0.2"),
                               "policyledger.outcome"),
                     "suspended", "the waiting call ends with the run");
    char *first_id = t_text(cJSON_GetObjectItemCaseSensitive(
        ot_span_at(spans, "run-ask", "0.2"), "spanId"));
    cJSON_Delete(spans);

    cJSON *answer = t_json("{\"approved\": true}");
    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "run-ask", token, answer), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(answer);
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    free(token);
    ot_flush(x);
    spans = ot_spans(&s);
    cr_expect_eq(check_tree(spans, "run-ask"), 3 + 4);
    const cJSON *again = ot_span_at(spans, "run-ask", "0.2");
    char *second_id = t_text(cJSON_GetObjectItemCaseSensitive(again, "spanId"));
    cr_expect_str_eq(second_id, first_id, "the resumed call keeps its id");
    cr_expect_str_eq(ot_attr_s(again, "policyledger.outcome"), "completed");
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-ask", "0.0"),
                               "policyledger.outcome"),
                     "served");
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-ask", "0.4"),
                               "policyledger"
                               ".policy"),
                     "add");
    free(first_id);
    free(second_id);
    cJSON_Delete(spans);
    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK);
    pl_registry_free(reg);
}

Test(otel, a_crash_and_its_replay)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) { /* dies of SIGKILL inside "die" */
        g_die = 1;
        pl_otel *x = ot_exporter(ot_endpoint(&s));
        pl_engine *e = engine_with(path, reg, x);
        pl_outcome *o = t_start(e, "crashy", "{}", "run-crash");
        (void)o;
        _exit(3);
    }
    int wst;
    cr_assert_eq(waitpid(pid, &wst, 0), pid);
    cr_assert(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL,
              "the child did not die of SIGKILL");

    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_engine *e = engine_with(path, reg, x);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "run-crash", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(o->calls_served, 1);
    pl_outcome_free(o);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    check_tree(spans, "run-crash");
    const cJSON *echo = ot_span_at(spans, "run-crash", "0.0");
    cr_assert_not_null(echo);
    cr_expect_str_eq(ot_attr_s(echo, "policyledger.outcome"), "served");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        ot_attr(echo, "policyledger.served"), "boolValue")));
    const cJSON *d = ot_span_at(spans, "run-crash", "0.2");
    cr_assert_not_null(d);
    cr_expect_str_eq(ot_attr_s(d, "policyledger.outcome"), "completed");
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-crash", "0"),
                               "policyledger.outcome"),
                     "completed");
    cJSON_Delete(spans);
    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK);
    pl_registry_free(reg);
}

/* ---- many threads ------------------------------------------------------------ */

typedef struct worker {
    pl_engine *e;
    char id[32];
} worker;

static void *run_outer(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 5; i++) {
        char id[48];
        snprintf(id, sizeof id, "%s-%d", w->id, i);
        pl_outcome *o = t_start(w->e, "outer", "{}", id);
        cr_expect_eq(o->status, PL_RUN_COMPLETED);
        pl_outcome_free(o);
    }
    return NULL;
}

Test(otel, concurrent_runs_share_one_exporter)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_GROUP;
    eo.on_event = pl_otel_event;
    eo.event_user = x;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &eo), PL_OK);
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i].e = e;
        snprintf(w[i].id, sizeof w[i].id, "t%d", i);
        cr_assert_eq(pthread_create(&th[i], NULL, run_outer, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            char id[48];
            snprintf(id, sizeof id, "t%d-%d", i, j);
            cr_expect_eq(check_tree(spans, id), 6, "run %s", id);
        }
    cJSON_Delete(spans);
    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK);
    pl_registry_free(reg);
}

/* A check that stops where the record ends (PL_ECHECK, no event of the
 * run's end) left its spans open until the run next executed on the
 * exporter, never sent if none did: they end with it, "stopped". */
Test(otel, a_check_that_stops_at_the_records_end_ends_its_spans)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = registry();
    pl_engine *e = engine_with(t_store_path(), reg, x);
    pl_outcome *o = start(e, "asker", "run-chk");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "run-chk", &ro), PL_ECHECK, "%s",
                 pl_errmsg());
    cr_assert_null(o);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    /* the suspension's 3; the check's run, echo served (approve's call,
     * to execute, is where it stopped) */
    cr_expect_eq(check_tree(spans, "run-chk"), 3 + 2, "the check's not sent");
    cr_expect_str_eq(ot_attr_s(ot_span_at(spans, "run-chk", "0.0"),
                               "policyledger.outcome"),
                     "served");
    const cJSON *root = ot_span_at(spans, "run-chk", "0");
    cr_assert_not_null(root);
    cr_expect_str_eq(ot_attr_s(root, "policyledger.outcome"), "stopped");
    cr_expect_str_eq(ot_attr_s(root, "policyledger.status"), "PL_ECHECK");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(root, "status");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(status, "code")->valueint, 0,
                 "a check at its record's end is no error");
    cJSON_Delete(spans);
    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK);
    pl_registry_free(reg);
}

/* ---- receivers that do not receive ------------------------------------------ */

/* Run "outer" with @p x attached; the run completes whatever the receiver
 * does. */
static void run_outer_with(pl_otel *x, const char *id)
{
    pl_registry *reg = registry();
    pl_engine *e = engine_with(t_store_path(), reg, x);
    pl_outcome *o = start(e, "outer", id);
    cr_expect_eq(o->status, PL_RUN_COMPLETED,
                 "the run does not depend on "
                 "the receiver");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(otel, a_receiver_that_fails)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 500, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    run_outer_with(x, "run-500");
    ot_flush(x);
    pl_otel_counts c = PL_OTEL_COUNTS_INIT;
    cr_assert_eq(pl_otel_stats(&c, x), PL_OK);
    cr_expect_eq(c.spans, 6);
    cr_expect_eq(c.sent, 0);
    cr_expect_eq(c.dropped, 6);
    cr_expect_geq(c.failures, 1);
    cr_expect_eq(c.failures, c.requests);
    cr_expect_geq(t_server_requests(&s), 1, "it did try");
    cr_expect_eq(pl_otel_close(x), PL_EIO);
    cr_expect(strstr(pl_errmsg(), "6 spans") && strstr(pl_errmsg(), "HTTP 500"),
              "%s", pl_errmsg());
}

Test(otel, a_receiver_that_hangs)
{
    t_server s;
    ot_receiver(&s, "{\"hang\": 60}");
    pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
    oo.endpoint = ot_endpoint(&s);
    oo.flush_interval_ms = 10;
    oo.shutdown_timeout_ms = 200;
    pl_otel *x = NULL;
    cr_assert_eq(pl_otel_open(&x, &oo), PL_OK);
    run_outer_with(x, "run-hang");
    cr_expect_eq(pl_otel_flush(x, 50), PL_EBUSY, "still waiting at 50 ms");
    /* the request is in flight and hangs: close cuts it off */
    cr_expect_eq(pl_otel_close(x), PL_EIO);
    cr_expect(strstr(pl_errmsg(), "6 spans"), "%s", pl_errmsg());
}

Test(otel, a_receiver_that_is_down)
{
    /* a port nobody listens on: bound, then closed */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    pl_otel *x = ot_exporter(url);
    run_outer_with(x, "run-down");
    ot_flush(x);
    pl_otel_counts c = PL_OTEL_COUNTS_INIT;
    cr_assert_eq(pl_otel_stats(&c, x), PL_OK);
    cr_expect_eq(c.dropped, 6);
    cr_expect_eq(c.sent, 0);
    cr_expect_eq(pl_otel_close(x), PL_EIO);
    cr_expect(strstr(pl_errmsg(), "request failed"), "%s", pl_errmsg());
}

Test(otel, a_full_queue_drops_and_counts)
{
    t_server s;
    ot_receiver(&s, "{\"hang\": 60}");
    pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
    oo.endpoint = ot_endpoint(&s);
    oo.max_queue = 1;
    oo.timeout_ms = 100;
    pl_otel *x = NULL;
    cr_assert_eq(pl_otel_open(&x, &oo), PL_OK);
    run_outer_with(x, "run-full");
    ot_flush(x);
    pl_otel_counts c = PL_OTEL_COUNTS_INIT;
    cr_assert_eq(pl_otel_stats(&c, x), PL_OK);
    cr_expect_eq(c.spans, 6);
    cr_expect_eq(c.sent, 0);
    cr_expect_eq(c.dropped, 6);
    cr_expect_eq(pl_otel_close(x), PL_EIO);
}

/* ---- options and the environment --------------------------------------------- */

Test(otel, bad_options)
{
    pl_otel *x = (pl_otel *)1;
    pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_HEADERS");
    cr_expect_eq(pl_otel_open(&x, &oo), PL_ENOTFOUND);
    cr_expect_null(x);
    cr_expect_eq(pl_otel_open(&x, NULL), PL_ENOTFOUND);
    cr_expect_eq(pl_otel_open(NULL, &oo), PL_EINVAL);
    oo.endpoint = "ftp://127.0.0.1:1";
    cr_expect_eq(pl_otel_open(&x, &oo), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "http"), "%s", pl_errmsg());
    oo.endpoint = "http://127.0.0.1:1";
    oo.headers = "api-key=SECRET-VALUE,broken";
    cr_expect_eq(pl_otel_open(&x, &oo), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "header 2"), "%s", pl_errmsg());
    cr_expect_null(strstr(pl_errmsg(), "SECRET"), "a header value leaked");
    oo.headers = "=value";
    cr_expect_eq(pl_otel_open(&x, &oo), PL_EINVAL);
    oo.headers = "k=a%0Ab";
    cr_expect_eq(pl_otel_open(&x, &oo), PL_EINVAL);
    cr_expect_null(strstr(pl_errmsg(), "a%0Ab"));
    oo.headers = NULL;
    oo.version = 99;
    cr_expect_eq(pl_otel_open(&x, &oo), PL_EINVAL);
    cr_expect_null(x);
    cr_expect_eq(pl_otel_close(NULL), PL_OK);
    cr_expect_eq(pl_otel_flush(NULL, 1), PL_EINVAL);
    pl_otel_counts c = PL_OTEL_COUNTS_INIT;
    cr_expect_eq(pl_otel_stats(&c, NULL), PL_EINVAL);
    pl_otel_event(NULL, NULL); /* nothing to do, no crash */
}

Test(otel, endpoint_and_headers_from_the_environment)
{
    t_server s;
    setenv("PL_TEST_EXPECT_KEY", "sekrit token", 1);
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    char url[96];
    snprintf(url, sizeof url, "%s/", ot_endpoint(&s));
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
    setenv("OTEL_EXPORTER_OTLP_HEADERS",
           "x-other=1, Authorization = Bearer%20sekrit%20token", 1);
    setenv("OTEL_SERVICE_NAME", "orders", 1);
    pl_otel *x = NULL;
    cr_assert_eq(pl_otel_open(&x, NULL), PL_OK, "%s", pl_errmsg());
    run_outer_with(x, "run-env");
    ot_flush(x);
    cJSON *log = t_server_log(&s);
    cr_assert_geq(cJSON_GetArraySize(log), 1);
    const cJSON *req = cJSON_GetArrayItem(log, 0);
    cr_expect_str_eq(t_str(req, "path"), "/v1/traces");
    cr_expect_str_eq(t_str(req, "auth"), "bearer");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req,
                                                            "auth_matches")),
              "the header from the environment was sent, decoded");
    const cJSON *svc = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                                       cJSON_GetObjectItemCaseSensitive(req,
                                                                        "body"),
                                       "resourceSpans"),
                                   0),
                "resource"),
            "attributes"),
        0);
    cr_expect_str_eq(t_str(cJSON_GetObjectItemCaseSensitive(svc, "value"),
                           "stringValue"),
                     "orders");
    cJSON_Delete(log);
    cr_expect_eq(pl_otel_close(x), PL_OK);

    /* the traces endpoint is used as it is */
    char exact[128];
    snprintf(exact, sizeof exact, "%s/custom/traces", ot_endpoint(&s));
    setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", exact, 1);
    cr_assert_eq(pl_otel_open(&x, NULL), PL_OK, "%s", pl_errmsg());
    run_outer_with(x, "run-env2");
    ot_flush(x);
    log = t_server_log(&s);
    const cJSON *last = cJSON_GetArrayItem(log, cJSON_GetArraySize(log) - 1);
    cr_expect_str_eq(t_str(last, "path"), "/custom/traces");
    cJSON_Delete(log);
    cr_expect_eq(pl_otel_close(x), PL_OK);
}

/* ---- model tokens ---------------------------------------------------------- */

typedef struct both {
    pl_otel *x;
    pl_trace *t;
} both;

static void to_both(const pl_event *ev, void *user)
{
    both *b = user;
    pl_otel_event(ev, b->x);
    pl_trace_event(ev, b->t);
}

/* The trace line of the llm call's end (path "0", seq 0) of run @p run. */
static cJSON *llm_call_line(const char *trace_path, const char *run)
{
    char *text = t_read_file(trace_path, NULL);
    cr_assert_not_null(text);
    cJSON *found = NULL;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(l);
        cr_assert_not_null(o, "a trace line that is not JSON: %s", l);
        const char *ev = t_str(o, "event"), *id = t_str(o, "trace_id");
        const char *path = t_str(o, "path");
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "seq");
        if (id && !strcmp(id, run) && path && !strcmp(path, "0") && ev &&
            strstr(ev, "call_") && strcmp(ev, "call_started") &&
            cJSON_IsNumber(seq) && seq->valueint == 0) {
            cJSON_Delete(found);
            found = o;
        } else {
            cJSON_Delete(o);
        }
    }
    free(text);
    return found;
}

/*
 * An LLM agent on the scripted model (three model calls: 11 + 3, 30 + 9,
 * 50 + 4 tokens): the llm call's span carries the call's usage as
 * gen_ai.usage.*, its tools' spans and the run's none; the trace line of
 * the call's end has "tokens".  Under budget(max_tokens = 50) the call's
 * result is the budget's error, which carries no tokens: nor does its span.
 */
Test(otel, an_llm_calls_span_carries_its_model_tokens)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    both b = {ot_exporter(ot_endpoint(&s)), NULL};
    const char *trace = t_write_file("trace.jsonl", "");
    cr_assert_eq(pl_trace_open(&b.t, trace), PL_OK, "%s", pl_errmsg());
    const char *script = t_write_file(
        "script.json",
        "{\"responses\": ["
        " {\"text\": \"Noting.\", \"tool_calls\": [{\"id\": \"n1\", \"name\": "
        "\"effect\", \"arguments\": {\"note\": \"first\"}}],"
        "  \"usage\": {\"input\": 11, \"output\": 3}},"
        " {\"tool_calls\": [{\"id\": \"n2\", \"name\": \"effect\", "
        "\"arguments\": {\"note\": \"second\"}}, {\"name\": \"add\", "
        "\"arguments\": {\"a\": 2, \"b\": 5}}],"
        "  \"usage\": {\"input\": 30, \"output\": 9}},"
        " {\"text\": \"Done: 7.\", \"usage\": {\"input\": 50, \"output\": 4}}"
        "]}");
    char url[4400];
    snprintf(url, sizeof url, "scripted://%s", script);
    pl_registry *reg = t_llm_registry(url, NULL);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = to_both;
    eo.event_user = &b;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome *o = t_agent(e, "note twice", "[\"effect\", \"add\"]", "tok");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    pl_outcome_free(o);
    o = t_start(e, "agent",
                "{\"text\": \"note twice\", \"actions\": [\"effect\", "
                "\"add\"], \"max_tokens\": 50}",
                "tok-budget");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(t_str(pl_outcome_result(o), "code"),
                     PL_ERR_BUDGET_EXCEEDED);
    pl_outcome_free(o);
    ot_flush(b.x);

    cJSON *spans = ot_spans(&s);
    cr_expect_eq(check_tree(spans, "tok"), 5); /* run, llm, 3 tools */
    const cJSON *llm = ot_span_at(spans, "tok", "0.0");
    cr_assert_not_null(llm);
    cr_expect_str_eq(t_str(llm, "name"), "llm");
    cr_expect_str_eq(t_str(ot_attr(llm, "gen_ai.usage.input_tokens"),
                           "intValue"),
                     "91");
    cr_expect_str_eq(t_str(ot_attr(llm, "gen_ai.usage.output_tokens"),
                           "intValue"),
                     "16");
    const char *others[] = {"0", "0.0.2", "0.0.5", "0.0.6"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        const cJSON *sp = ot_span_at(spans, "tok", others[i]);
        cr_assert_not_null(sp, "no span at %s", others[i]);
        cr_expect_null(ot_attr(sp, "gen_ai.usage.input_tokens"), "at %s",
                       others[i]);
    }
    const cJSON *spent = ot_span_at(spans, "tok-budget", "0.0");
    cr_assert_not_null(spent);
    cr_expect_null(ot_attr(spent, "gen_ai.usage.input_tokens"));
    cJSON_Delete(spans);

    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(b.x), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_trace_close(b.t), PL_OK, "%s", pl_errmsg());
    cJSON *line = llm_call_line(trace, "tok");
    cr_assert_not_null(line, "no trace line for the llm call's end");
    cr_expect_str_eq(t_str(line, "event"), "call_completed");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(line, "tokens");
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tok, "input")) &&
                  cJSON_GetObjectItemCaseSensitive(tok, "input")->valueint ==
                      91 &&
                  cJSON_GetObjectItemCaseSensitive(tok, "output")->valueint ==
                      16,
              "tokens on the call's trace line");
    cJSON_Delete(line);
    line = llm_call_line(trace, "tok-budget");
    cr_assert_not_null(line);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(line, "tokens"));
    cJSON_Delete(line);
    pl_registry_free(reg);
}
