/*
 * test_otel_cut.c -- the OpenTelemetry exporter (core/ext/otel.c) when an
 * execution stops with no end event: a store that refuses a commit (here
 * the process's file size limit, RLIMIT_FSIZE, standing in for a full
 * disk) leaves the run as it was, and the engine reports neither the
 * call's nor the run's end, but that the execution stopped
 * (PL_EVENT_RUN_STOPPED).  The spans that execution opened end then, as
 * "stopped" with the store's status (status ERROR), never as the next
 * execution's outcome, and are not kept open until the run executes
 * again (they were, ended "interrupted" only then: never, if it did not).
 */
#include "support_otel.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define N_CALLS 400
#define PAD 4096

static char g_pad[PAD + 1]; /* PAD bytes of 'x', set by the test */

/* keep: its input is its result, so each call commits twice its pad */
static int keep(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    return pl_steps_add_result(out, a->payload);
}

/* fill: N_CALLS calls of keep, each of PAD bytes */
static int fill(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    int st = PL_OK;
    for (int i = 0; !st && i < N_CALLS; i++) {
        cJSON *res = NULL;
        st = pl_ctx_invokef(&res, ctx, "keep", "{s:i, s:s}", "i", i, "pad",
                            g_pad);
        cJSON_Delete(res);
    }
    return st ? st : pl_steps_add_text(out, "fill", "full");
}

static unsigned long long start_ns(const cJSON *sp)
{
    return strtoull(t_str(sp, "startTimeUnixNano"), NULL, 10);
}

TestSuite(otel_cut, .fini = t_cleanup);

Test(otel_cut, an_execution_the_store_cut_off_ends_its_spans_interrupted,
     .timeout = 300)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = t_registry();
    memset(g_pad, 'x', PAD);
    cr_assert_eq(pl_registry_add_fn(reg, "keep", keep, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "fill", fill, NULL), PL_OK);
    const char *path = t_store_path();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = pl_otel_event;
    eo.event_user = x;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &eo), PL_OK, "%s", pl_errmsg());

    /* the data file may not grow: a commit in the middle fails */
    struct stat sb;
    struct rlimit old, lim;
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    cJSON *p = cJSON_CreateObject();
    pl_action a = {PL_ACTION_VERSION, "fill", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "cut";
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    cr_assert_eq(st, PL_ENOSPC, "%s: %s", pl_status_name(st), pl_errmsg());
    pl_outcome_free(o);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    int before = cJSON_GetArraySize(spans);
    const cJSON *cut = ot_span_at(spans, "cut", "0");
    cr_assert_not_null(cut, "the stopped execution's run span, sent");
    cr_expect_str_eq(ot_attr_s(cut, "policyledger.outcome"), "stopped");
    cr_expect_str_eq(ot_attr_s(cut, "policyledger.status"), "PL_ENOSPC");
    cJSON_Delete(spans);

    /* the limit lifted, the run goes on to its end */
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "cut", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    ot_flush(x);
    spans = ot_spans(&s);

    /* the first execution's run span and the call it was in ended
     * stopped; every span that says completed is the second's */
    const cJSON *run2 = NULL, *sp;
    int stopped = 0, runs = 0;
    cJSON_ArrayForEach(sp, spans)
    {
        const char *outcome = ot_attr_s(sp, "policyledger.outcome");
        if (!strcmp(ot_attr_s(sp, "policyledger.path"), "0")) {
            runs++;
            if (!strcmp(outcome, "completed"))
                run2 = sp;
        }
        cr_expect_str_neq(outcome, "interrupted", "ended only later");
        if (!strcmp(outcome, "stopped")) {
            stopped++;
            const cJSON *status = cJSON_GetObjectItemCaseSensitive(sp,
                                                                   "status");
            cr_expect_eq(
                cJSON_GetObjectItemCaseSensitive(status, "code")->valueint, 2,
                "a span a store's failure stopped is an error");
        }
    }
    cr_assert_not_null(run2, "the second execution's run span");
    cr_expect_eq(runs, 2, "a run span for each execution");
    cr_expect_eq(stopped, 2, "the first execution's run and its call");
    /* a call executed in both: completed once, by the second */
    cJSON_ArrayForEach(sp, spans)
    {
        const char *at = ot_attr_s(sp, "policyledger.path");
        if (strcmp(ot_attr_s(sp, "policyledger.outcome"), "completed"))
            continue;
        int same = 0;
        const cJSON *other;
        cJSON_ArrayForEach(other, spans)
        {
            same += !strcmp(ot_attr_s(other, "policyledger.path"), at) &&
                    !strcmp(ot_attr_s(other, "policyledger.outcome"),
                            "completed");
        }
        cr_expect_eq(same, 1, "%d spans of %s say completed", same, at);
        if (same == 1 && strcmp(at, "0"))
            continue;
        cr_expect_geq(start_ns(sp), start_ns(run2),
                      "the span of %s says completed but started in the "
                      "first execution",
                      at);
    }
    cr_expect_gt(cJSON_GetArraySize(spans), before);
    cJSON_Delete(spans);
    pl_engine_close(e);
    cr_expect_eq(pl_otel_close(x), PL_OK, "%s", pl_errmsg());
    pl_registry_free(reg);
}
