/*
 * test_trace.c -- the JSON-lines trace (core/ext/trace.c) as a program
 * reads it: a run parked at a sleep and one suspended for a human say
 * which, and where (step_type, seq); a version point says the version the
 * run takes; a schedule's failure names the schedule; every line is JSON
 * text, UTF-8, whatever bytes an event's detail holds, its integers
 * digits whatever their size.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)out, (void)user;
    return pl_ctx_sleep(ctx, 3600000); /* parks: PL_ESUSPENDED */
}

static int asker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *prompt = t_json("{\"question\": \"ok?\"}"), *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, prompt); /* PL_ESUSPENDED */
    cJSON_Delete(prompt);
    cJSON_Delete(answer);
    return st ? st : pl_steps_add_text(out, "asker", "answered");
}

static int versioned(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    int v = 0;
    int st = pl_ctx_version(&v, ctx, "new-pricing", 1, 2);
    return st ? st : pl_steps_add_text(out, "versioned", "done");
}

/* Fails the run with a reason that is not UTF-8 (a byte string a policy
 * quoted, cut in the middle of a character). */
static int garbled(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)out, (void)user;
    return pl_errorf(PL_EPOLICY, "cannot parse 'caf\xc3' \xff\xfe end");
}

/* Run @p policy as run @p run (its status must be @p want) on an engine
 * whose events go to a trace; the trace's lines, parsed (caller frees). */
static cJSON *lines(const char *path);

static cJSON *trace_of(const char *policy, const char *run, pl_run_status want)
{
    pl_registry *reg = t_registry();
    static const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"sleeper", sleeper},
                {"asker", asker},
                {"versioned", versioned},
                {"garbled", garbled}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.jsonl", t_tmpdir(), run);
    pl_trace *t;
    cr_assert_eq(pl_trace_open(&t, path), PL_OK, "%s", pl_errmsg());
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = pl_trace_event;
    eo.event_user = t;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome *o = t_start(e, policy, "{}", run);
    cr_assert_eq(o->status, want, "%s: %d %s", run, o->status,
                 o->reason ? o->reason : "");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_assert_eq(pl_trace_close(t), PL_OK, "%s", pl_errmsg());
    return lines(path);
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The trace's lines, parsed, each checked to be UTF-8 (caller frees). */
static cJSON *lines(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    cJSON *all = cJSON_CreateArray();
    char buf[8192];
    while (fgets(buf, sizeof buf, f)) {
        cr_expect(t_utf8_ok(buf, strlen(buf)), "a line that is not UTF-8: %s",
                  buf);
        cJSON *o = cJSON_Parse(buf);
        cr_assert_not_null(o, "a line that is not JSON: %s", buf);
        cJSON_AddItemToArray(all, o);
    }
    fclose(f);
    return all;
}

/* The last line of @p event for @p run. */
static const cJSON *line_of(const cJSON *all, const char *run,
                            const char *event)
{
    const cJSON *found = NULL, *l;
    cJSON_ArrayForEach(l, all)
    {
        const char *id = str_of(l, "trace_id"), *ev = str_of(l, "event");
        if (id && !strcmp(id, run) && ev && !strcmp(ev, event))
            found = l;
    }
    cr_assert_not_null(found, "no %s line for %s", event, run);
    return found;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s in %s", k, t_text(o));
    return v->valuedouble;
}

/* A run parked at a sleep and one suspended for a human: the trace says
 * which step parked it and where (engine.h: "step_type ... path and seq
 * say where"), as the events do. */
Test(trace, a_suspended_run_says_where_and_why)
{
    cJSON *all = trace_of("sleeper", "nap", PL_RUN_WAITING);
    const cJSON *nap = line_of(all, "nap", "run_suspended");
    cr_expect_str_eq(str_of(nap, "step_type"), "wait", "%s", t_text(nap));
    cr_expect_eq(num(nap, "seq"), 1, "%s", t_text(nap)); /* now, then wait */
    cJSON_Delete(all);
    all = trace_of("asker", "ask", PL_RUN_SUSPENDED);
    const cJSON *ask = line_of(all, "ask", "run_suspended");
    cr_expect_str_eq(str_of(ask, "step_type"), "suspend", "%s", t_text(ask));
    cr_expect_eq(num(ask, "seq"), 0, "%s", t_text(ask));
    cJSON_Delete(all);
}

/* A version point's line carries the version the run takes, and its
 * marker's step (engine.h: PL_EVENT_VERSION). */
Test(trace, a_version_point_says_the_version)
{
    cJSON *all = trace_of("versioned", "ver", PL_RUN_COMPLETED);
    const cJSON *v = line_of(all, "ver", "version");
    cr_expect_str_eq(str_of(v, "detail"), "new-pricing");
    cr_expect_eq(num(v, "version"), 2, "%s", t_text(v));
    cr_expect_str_eq(str_of(v, "step_type"), "side_effect", "%s", t_text(v));
    cr_expect_eq(num(v, "seq"), 0, "%s", t_text(v));
    cJSON_Delete(all);
}

/* A detail that is not UTF-8 (a policy's reason holding any bytes) is
 * written as UTF-8: each byte that is not part of a character as U+FFFD,
 * as the export writes it; JSON text is UTF-8. */
Test(trace, a_detail_that_is_not_utf8_is_written_as_utf8)
{
    cJSON *all = trace_of("garbled", "garbled", PL_RUN_FAILED);
    const cJSON *f = line_of(all, "garbled", "run_failed");
    const char *d = str_of(f, "detail");
    cr_assert_not_null(d, "%s", t_text(f));
    cr_expect(strstr(d,
                     "cannot parse 'caf\xef\xbf\xbd' \xef\xbf\xbd\xef\xbf\xbd"
                     " end"),
              "%s", d);
    cJSON_Delete(all);
}

/* A schedule's failure names its schedule (pl_event.schedule), as the
 * event does: a program's own callback hands the trace its events. */
Test(trace, a_schedule_failed_line_names_the_schedule)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/sched.jsonl", t_tmpdir());
    pl_trace *t;
    cr_assert_eq(pl_trace_open(&t, path), PL_OK, "%s", pl_errmsg());
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = PL_EVENT_SCHEDULE_FAILED;
    ev.status = PL_EIO;
    ev.detail = "the store refused the firing";
    ev.schedule = "nightly";
    pl_trace_event(&ev, t);
    cr_assert_eq(pl_trace_close(t), PL_OK, "%s", pl_errmsg());
    cJSON *all = lines(path);
    const cJSON *l = line_of(all, "", "schedule_failed");
    cr_expect_str_eq(str_of(l, "schedule"), "nightly", "%s", t_text(l));
    cr_expect_str_eq(str_of(l, "status"), "PL_EIO");
    cJSON_Delete(all);
}

/* Every integer of a line is written as its digits, whatever its size: a
 * reader that takes integers would refuse 1e+15.  elapsed_ns and tokens
 * were written as cJSON writes a double, in exponent form from 10^15 on
 * (elapsed_ns of 1e15 is 11.6 days: a run that waited) and rounded past
 * 2^53. */
Test(trace, integers_are_written_as_digits_whatever_their_size)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/big.jsonl", t_tmpdir());
    pl_trace *t;
    cr_assert_eq(pl_trace_open(&t, path), PL_OK, "%s", pl_errmsg());
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = PL_EVENT_RUN_COMPLETED;
    ev.run_id = "big";
    ev.elapsed_ns = 1000000000000000; /* 10^15 */
    pl_trace_event(&ev, t);
    ev.kind = PL_EVENT_CALL_COMPLETED;
    ev.seq = UINT32_MAX;
    ev.elapsed_ns = UINT64_MAX;
    ev.tokens_in = UINT64_MAX - 1;
    ev.tokens_out = 9007199254740993; /* 2^53 + 1: no double */
    pl_trace_event(&ev, t);
    cr_assert_eq(pl_trace_close(t), PL_OK, "%s", pl_errmsg());
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_expect(strstr(text, "\"elapsed_ns\":1000000000000000}"), "%s", text);
    cr_expect(strstr(text, "\"seq\":4294967295,"), "%s", text);
    cr_expect(strstr(text, "\"elapsed_ns\":18446744073709551615,"), "%s", text);
    cr_expect(strstr(text, "\"input\":18446744073709551614,"), "%s", text);
    cr_expect(strstr(text, "\"output\":9007199254740993}"), "%s", text);
    cr_expect(!strstr(text, "e+"), "%s", text);
    cJSON *all = lines(path);
    cr_expect_eq(cJSON_GetArraySize(all), 2);
    cJSON_Delete(all);
}
