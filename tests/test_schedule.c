/*
 * test_schedule.c -- schedules (core/engine/schedule.c), on the store the
 * suite runs on: LMDB, and PostgreSQL as pg_test_schedule.
 *
 * Time is the caller's: pl_schedule_fire() takes "now", so a schedule is
 * put with a start in the past and fired at chosen times, and five ticks
 * missed take no real minutes.  Nothing is timed; the worker and the
 * processes are waited for by condition, with a generous bound.
 */
#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIN_MS 60000LL
/* 2026-01-01T00:00Z: the ticks of "* * * * *" after it are T0 + k min */
#define T0 1767225600000LL
#define BOUND_MS 60000

static pl_registry *s_reg; /* the open engine's */

static pl_engine *s_engine(const char *path)
{
    s_reg = t_registry();
    return t_engine(path, s_reg, PL_DURABILITY_SYNC);
}

static void s_close(pl_engine *e)
{
    pl_engine_close(e);
    pl_registry_free(s_reg);
    s_reg = NULL;
}

static void put(pl_engine *e, const char *name, const char *cron,
                pl_schedule_catch_up cu, unsigned max, pl_schedule_overlap ov,
                int64_t start)
{
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = name;
    s.cron = cron;
    s.policy = "echo";
    cJSON *p = t_json("{\"from\":\"schedule\"}");
    s.payload = p;
    s.catch_up = cu;
    s.catch_up_max = max;
    s.overlap = ov;
    s.start_ms = start;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

/* Schedule @p name: @p policy every minute from T0, the default rules. */
static void put_every_minute(pl_engine *e, const char *name, const char *policy)
{
    pl_schedule sc = PL_SCHEDULE_INIT;
    sc.name = name;
    sc.cron = "* * * * *";
    sc.policy = policy;
    sc.start_ms = T0;
    cr_assert_eq(pl_schedule_put(e, &sc), PL_OK, "%s", pl_errmsg());
}

static size_t fire(pl_engine *e, int64_t now)
{
    size_t n = 99;
    int64_t next = 0;
    cr_assert_eq(pl_schedule_fire(e, now, &n, &next), PL_OK, "%s", pl_errmsg());
    cr_assert_gt(next, now, "the next tick is after now");
    return n;
}

/* Does run "<name>@" tick k (T0 + k * every minutes) exist? */
static bool tick_run(pl_engine *e, const char *name, int k, int every)
{
    char id[160];
    time_t secs = (time_t)((T0 + k * every * MIN_MS) / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(id, sizeof id, "%s@%04d-%02d-%02dT%02d:%02dZ", name,
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min);
    pl_run_info *ri = NULL;
    int st = pl_run_get(&ri, e, id);
    if (st == PL_OK) {
        cr_assert_str_eq(ri->policy, "echo");
        pl_run_info_free(ri);
        return true;
    }
    cr_assert_eq(st, PL_ENOTFOUND, "%s: %s", id, pl_errmsg());
    return false;
}

/* The ticks 1..n, @p every minutes apart, that have a run, as a string of
 * 0 and 1. */
static const char *ticks_every(pl_engine *e, const char *name, int n, int every)
{
    static char out[64];
    for (int k = 1; k <= n; k++)
        out[k - 1] = tick_run(e, name, k, every) ? '1' : '0';
    out[n] = '\0';
    return out;
}

static const char *ticks(pl_engine *e, const char *name, int n)
{
    return ticks_every(e, name, n, 1);
}

/* A worker stopped across five ticks (every two minutes) resumes 90 s
 * after the fifth: what each catch-up rule starts, then the next tick on
 * time. */
Test(schedule, catch_up_rules)
{
    pl_engine *e = s_engine(t_store_path());
    const char *every2 = "*/2 * * * *";
    put(e, "skip", every2, PL_CATCH_UP_SKIP, 0, PL_OVERLAP_ALLOW, T0);
    put(e, "latest", every2, PL_CATCH_UP_LATEST, 0, PL_OVERLAP_ALLOW, T0);
    put(e, "all3", every2, PL_CATCH_UP_ALL, 3, PL_OVERLAP_ALLOW, T0);
    put(e, "all10", every2, PL_CATCH_UP_ALL, 10, PL_OVERLAP_ALLOW, T0);
    cr_expect_eq(fire(e, T0 + 90000), 0, "no tick yet");
    cr_expect_eq(fire(e, T0 + 10 * MIN_MS + 90000), 0 + 1 + 3 + 5);
    cr_expect_str_eq(ticks_every(e, "skip", 6, 2), "000000");
    cr_expect_str_eq(ticks_every(e, "latest", 6, 2), "000010");
    cr_expect_str_eq(ticks_every(e, "all3", 6, 2), "001110");
    cr_expect_str_eq(ticks_every(e, "all10", 6, 2), "111110");
    /* fired again at the same time: nothing more */
    cr_expect_eq(fire(e, T0 + 10 * MIN_MS + 90000), 0);
    /* the sixth tick, on time, starts under every rule */
    cr_expect_eq(fire(e, T0 + 12 * MIN_MS + 1000), 4);
    cr_expect_str_eq(ticks_every(e, "skip", 6, 2), "000001");
    cr_expect_str_eq(ticks_every(e, "latest", 6, 2), "000011");
    cr_expect_str_eq(ticks_every(e, "all3", 6, 2), "001111");
    cr_expect_str_eq(ticks_every(e, "all10", 6, 2), "111111");
    s_close(e);
}

/* After a pause of years (more ticks missed than a fire walks in one go),
 * the rules still start the latest ticks alone, the one fire finding them
 * without walking every missed tick. */
Test(schedule, catch_up_after_years_starts_the_latest_ticks)
{
    pl_engine *e = s_engine(t_store_path());
    int64_t years = T0 - 3 * 365 * 1440 * MIN_MS;
    put(e, "skip", "* * * * *", PL_CATCH_UP_SKIP, 0, PL_OVERLAP_ALLOW, years);
    put(e, "latest", "* * * * *", PL_CATCH_UP_LATEST, 0, PL_OVERLAP_ALLOW,
        years);
    put(e, "all3", "* * * * *", PL_CATCH_UP_ALL, 3, PL_OVERLAP_ALLOW, years);
    cr_expect_eq(fire(e, T0 + 30000), 1 + 1 + 3, "no older tick started");
    cr_expect(tick_run(e, "skip", 0, 1));
    cr_expect(tick_run(e, "latest", 0, 1));
    for (int k = -2; k <= 0; k++)
        cr_expect(tick_run(e, "all3", k, 1), "all3's tick %d", k);
    cr_expect_eq(fire(e, T0 + 30000), 0, "the cursor is on the last tick");
    s_close(e);
}

/* PL_CATCH_UP_SKIP starts a tick that is less than a minute late. */
Test(schedule, skip_keeps_the_tick_on_time)
{
    pl_engine *e = s_engine(t_store_path());
    put(e, "s", "* * * * *", PL_CATCH_UP_SKIP, 0, PL_OVERLAP_ALLOW, T0);
    cr_expect_eq(fire(e, T0 + 5 * MIN_MS + 30000), 1);
    cr_expect_str_eq(ticks(e, "s", 5), "00001");
    s_close(e);
}

/* "A process fires only schedules whose root policy it has registered;
 * the others wait for one that has it": fired where "echo" is unknown,
 * nothing starts and the ticks stay due, for the process that has it. */
Test(schedule, fired_only_where_its_policy_is_registered)
{
    const char *path = t_store_path();
    pl_registry *bare = NULL;
    cr_assert_eq(pl_registry_new(&bare), PL_OK);
    pl_engine *e = t_engine(path, bare, PL_DURABILITY_SYNC);
    put(e, "elsewhere", "* * * * *", PL_CATCH_UP_ALL, 10, PL_OVERLAP_ALLOW, T0);
    cr_expect_eq(fire(e, T0 + 3 * MIN_MS + 30000), 0);
    cr_expect_str_eq(ticks(e, "elsewhere", 4), "0000");
    pl_engine_close(e);
    pl_registry_free(bare);
    e = s_engine(path);
    cr_expect_eq(fire(e, T0 + 3 * MIN_MS + 30000), 3);
    cr_expect_str_eq(ticks(e, "elsewhere", 4), "1110");
    s_close(e);
}

Test(schedule, overlap_rules)
{
    pl_engine *e = s_engine(t_store_path());
    put(e, "one", "* * * * *", PL_CATCH_UP_ALL, 5, PL_OVERLAP_SKIP, T0);
    put(e, "any", "* * * * *", PL_CATCH_UP_ALL, 5, PL_OVERLAP_ALLOW, T0);
    cr_expect_eq(fire(e, T0 + 5 * MIN_MS + 1000), 1 + 5);
    /* the first run is still submitted: the other four are skipped */
    cr_expect_str_eq(ticks(e, "one", 5), "10000");
    cr_expect_str_eq(ticks(e, "any", 5), "11111");
    cr_expect_eq(fire(e, T0 + 6 * MIN_MS + 1000), 1, "'one' still live");
    /* once it has run, the next tick starts */
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "one@2026-01-01T00:01Z", NULL), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(
        cJSON_GetStringValue(cJSON_GetObjectItem(pl_outcome_result(o), "from")),
        "schedule");
    pl_outcome_free(o);
    cr_expect_eq(fire(e, T0 + 7 * MIN_MS + 1000), 2);
    cr_expect_str_eq(ticks(e, "one", 7), "1000001");
    s_close(e);
}

/* "hop": continues as new once ({} -> {"next": true}), then completes. */
static int hop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    if (!cJSON_GetObjectItem(a->payload, "next")) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddTrueToObject(next, "next");
        int st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    return pl_steps_add_result(out, pl_json_empty());
}

/* A run that continued as new is live for the overlap rule while its
 * successor is, also once it is deleted: the tick is skipped until the
 * chain ends. */
Test(schedule, overlap_follows_a_chain)
{
    pl_engine *e = s_engine(t_store_path());
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "hop";
    d.fn = hop;
    cr_assert_eq(pl_registry_add(s_reg, &d), PL_OK, "%s", pl_errmsg());
    put_every_minute(e, "hop", "hop");
    cr_assert_eq(fire(e, T0 + MIN_MS + 1000), 1);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "hop@2026-01-01T00:01Z", NULL), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "hop@2026-01-01T00:01Z"), PL_OK);
    cr_assert_not_null(ri->successor);
    char succ[PL_MAX_RUN_ID + 1];
    snprintf(succ, sizeof succ, "%s", ri->successor);
    pl_run_info_free(ri);
    /* the successor is queued: the chain goes on, the tick is skipped */
    cr_expect_eq(fire(e, T0 + 2 * MIN_MS + 1000), 0, "the chain is live");
    /* so too once the continued link is pruned (final, as guide.md's
     * Long-lived runs says): its tombstone leads on to the successor */
    cr_assert_eq(pl_run_delete(e, "hop@2026-01-01T00:01Z"), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(fire(e, T0 + 3 * MIN_MS + 1000), 0, "pruned, still live");
    cr_assert_eq(pl_run_continue(&o, e, succ, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(fire(e, T0 + 4 * MIN_MS + 1000), 1, "the chain has ended");
    s_close(e);
}

/* "ask": suspends, then returns the answer. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_suspend(&answer, ctx, pl_json_empty());
    if (st)
        return st;
    st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

/* A run superseded by an upgrade is final: for the overlap rule the chain
 * goes on in its successor, live while that is, and once the successor has
 * ended the next tick starts. */
Test(schedule, overlap_follows_an_upgrade)
{
    pl_engine *e = s_engine(t_store_path());
    cr_assert_eq(pl_registry_add_fn(s_reg, "ask", ask, NULL), PL_OK);
    put_every_minute(e, "up", "ask");
    cr_assert_eq(fire(e, T0 + MIN_MS + 1000), 1);
    const char *first = "up@2026-01-01T00:01Z";
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, first, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, e, first, "0:0", "up-v2"), PL_OK, "%s",
                 pl_errmsg());
    free(nid);
    cr_assert_eq(status_of(e, first), PL_RUN_SUPERSEDED);
    /* the successor is live: the tick is skipped */
    cr_expect_eq(fire(e, T0 + 2 * MIN_MS + 1000), 0, "the successor is live");
    cr_assert_eq(pl_run_continue(&o, e, "up-v2", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char *token = strdup(o->resume_token);
    pl_outcome_free(o);
    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "up-v2", token, pl_json_empty()), PL_OK,
                 "%s", pl_errmsg());
    free(token);
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(fire(e, T0 + 3 * MIN_MS + 1000), 1, "the successor ended");
    s_close(e);
}

/* Nothing refused writes anything; each refusal says why. */
Test(schedule, refused)
{
    pl_engine *e = s_engine(t_store_path());
    struct {
        const char *name, *cron, *zone, *policy, *payload;
        pl_schedule_catch_up cu;
        unsigned max;
        int st;
        const char *words;
    } bad[] = {
        {"", "* * * * *", NULL, "echo", NULL, 0, 0, PL_EINVAL, "name"},
        {"a b", "* * * * *", NULL, "echo", NULL, 0, 0, PL_EINVAL, "name"},
        {"a@b", "* * * * *", NULL, "echo", NULL, 0, 0, PL_EINVAL, "name"},
        {"x", "* * *", NULL, "echo", NULL, 0, 0, PL_EINVAL, "3 fields"},
        {"x", "61 * * * *", NULL, "echo", NULL, 0, 0, PL_EINVAL,
         "minute field"},
        {"x", "0 0 31 2 *", NULL, "echo", NULL, 0, 0, PL_EINVAL, "never fires"},
        {"x", "* * * * *", "Mars/Base", "echo", NULL, 0, 0, PL_EINVAL,
         "not found"},
        {"x", "* * * * *", "../../etc/passwd", "echo", NULL, 0, 0, PL_EINVAL,
         "not a tz database name"},
        {"x", "* * * * *", NULL, "", NULL, 0, 0, PL_EINVAL, "root policy"},
        {"x", "* * * * *", NULL, "echo", "[1]", 0, 0, PL_EJSON, "object"},
        {"x", "* * * * *", NULL, "echo", NULL, PL_CATCH_UP_ALL, 0, PL_EINVAL,
         "1..1000"},
        {"x", "* * * * *", NULL, "echo", NULL, PL_CATCH_UP_ALL, 1001, PL_EINVAL,
         "1..1000"},
        {"x", "* * * * *", NULL, "echo", NULL, 7, 0, PL_EINVAL,
         "catch-up rule"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_schedule s = PL_SCHEDULE_INIT;
        s.name = bad[i].name;
        s.cron = bad[i].cron;
        s.zone = bad[i].zone;
        s.policy = bad[i].policy;
        cJSON *p = bad[i].payload ? cJSON_Parse(bad[i].payload) : NULL;
        s.payload = p;
        s.catch_up = bad[i].cu;
        s.catch_up_max = bad[i].max;
        cr_expect_eq(pl_schedule_put(e, &s), bad[i].st, "case %zu", i);
        cr_expect(strstr(pl_errmsg(), bad[i].words), "case %zu: '%s'", i,
                  pl_errmsg());
        cJSON_Delete(p);
    }
    pl_schedule s = PL_SCHEDULE_INIT;
    s.version = 99;
    cr_expect_eq(pl_schedule_put(e, &s), PL_EINVAL);
    cr_expect_eq(pl_schedule_put(e, NULL), PL_EINVAL);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK);
    cr_expect_eq(cJSON_GetArraySize(list), 0, "nothing was written");
    cJSON_Delete(list);
    cr_expect_eq(pl_schedule_delete(e, "nope"), PL_ENOTFOUND);
    cr_expect_eq(pl_schedule_delete(e, "../x"), PL_EINVAL);
    cr_expect_eq(pl_schedule_fire(e, -1, NULL, NULL), PL_EINVAL);
    s_close(e);
}

Test(schedule, list_replace_delete)
{
    pl_engine *e = s_engine(t_store_path());
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = "nightly";
    s.cron = "30 2 * * *";
    s.zone = "America/New_York";
    s.policy = "echo";
    s.start_ms = 1772928000000LL; /* 2026-03-08T00:00Z */
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, s.start_ms), PL_OK);
    cr_assert_eq(cJSON_GetArraySize(list), 1);
    cJSON *o = cJSON_GetArrayItem(list, 0);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")),
                     "nightly");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, "zone")),
                     "America/New_York");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, "catch_up")),
                     "skip");
    /* 02:30 does not exist that day: 03:30 EDT, 07:30Z */
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "next_ms")),
                 1772955000000.0);
    cJSON_Delete(list);
    /* put again: replaced */
    s.cron = "0 12 * * *";
    s.zone = NULL;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_schedule_list(&list, e, s.start_ms), PL_OK);
    cr_assert_eq(cJSON_GetArraySize(list), 1);
    o = cJSON_GetArrayItem(list, 0);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, "zone")),
                     "UTC");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "next_ms")),
                 1772971200000.0);
    cJSON_Delete(list);
    cr_assert_eq(pl_schedule_delete(e, "nightly"), PL_OK);
    cr_assert_eq(pl_schedule_list(&list, e, s.start_ms), PL_OK);
    cr_expect_eq(cJSON_GetArraySize(list), 0);
    cJSON_Delete(list);
    s_close(e);
}

/* The number @p key of the one schedule listed at @p now, or its string
 * in @p str (64 bytes). */
static double listed(pl_engine *e, int64_t now, const char *key, char *str)
{
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, now), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(cJSON_GetArraySize(list), 1);
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), key);
    cr_assert_not_null(v, "no %s", key);
    double n = cJSON_GetNumberValue(v);
    if (str)
        snprintf(str, 64, "%s", cJSON_GetStringValue(v));
    cJSON_Delete(list);
    return n;
}

/* Replaced, a schedule keeps the run it started last for its overlap
 * rule, and its ticks count from the new start; the list says where it
 * stands (cursor, due, last run); deleted, the runs it started stay. */
Test(schedule, a_replaced_schedule_keeps_its_last_run)
{
    pl_engine *e = s_engine(t_store_path());
    put(e, "one", "* * * * *", PL_CATCH_UP_ALL, 5, PL_OVERLAP_SKIP, T0);
    char last[64];
    listed(e, T0, "last_run", last);
    cr_expect_str_eq(last, "");
    cr_expect_eq(listed(e, T0, "due_ms", NULL), (double)(T0 + MIN_MS));
    cr_expect_eq(fire(e, T0 + MIN_MS + 1000), 1);
    listed(e, T0 + MIN_MS + 1000, "last_run", last);
    cr_expect_str_eq(last, "one@2026-01-01T00:01Z");
    cr_expect_geq(listed(e, T0 + MIN_MS + 1000, "cursor_ms", NULL),
                  (double)(T0 + MIN_MS));
    cr_expect_eq(listed(e, T0 + MIN_MS + 1000, "next_ms", NULL),
                 (double)(T0 + 2 * MIN_MS));
    /* replaced from minute 3 on: its first run, still submitted, is live */
    put(e, "one", "* * * * *", PL_CATCH_UP_ALL, 5, PL_OVERLAP_SKIP,
        T0 + 3 * MIN_MS);
    listed(e, T0 + 3 * MIN_MS, "last_run", last);
    cr_expect_str_eq(last, "one@2026-01-01T00:01Z");
    cr_expect_eq(fire(e, T0 + 5 * MIN_MS + 1000), 0, "the live run was lost");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "one@2026-01-01T00:01Z", NULL), PL_OK,
                 "%s", pl_errmsg());
    pl_outcome_free(o);
    cr_expect_eq(fire(e, T0 + 6 * MIN_MS + 1000), 1);
    cr_expect_str_eq(ticks(e, "one", 6), "100001", "ticks 2-5 ran");
    cr_assert_eq(pl_schedule_delete(e, "one"), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(ticks(e, "one", 6), "100001");
    cr_expect_eq(pl_schedule_delete(e, "one"), PL_ENOTFOUND);
    s_close(e);
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Four processes fire the same ten minutes at once, each at its own pace:
 * every tick has one run, and the runs they say they created add up to ten. */
Test(schedule, exactly_once_across_processes)
{
    const char *path = t_store_path();
    pl_engine *e = s_engine(path);
    put(e, "many", "* * * * *", PL_CATCH_UP_ALL, 100, PL_OVERLAP_ALLOW, T0);
    s_close(e);
    enum { KIDS = 4 };
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t kids[KIDS];
    for (int k = 0; k < KIDS; k++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            pl_engine *ce = NULL;
            pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
            pl_registry *reg = t_registry();
            int st = pl_engine_open(&ce, path, reg, &eo);
            unsigned long total = 0;
            /* child k steps by (k + 1) * 7 s up to ten minutes */
            for (int64_t t = T0; !st && t <= T0 + 10 * MIN_MS + 1000;
                 t += (k + 1) * 7000) {
                size_t n = 0;
                st = pl_schedule_fire(ce, t, &n, NULL);
                total += n;
            }
            if (!st) {
                size_t n = 0;
                st = pl_schedule_fire(ce, T0 + 10 * MIN_MS + 1000, &n, NULL);
                total += n;
            }
            pl_engine_close(ce);
            pl_registry_free(reg);
            char line[64];
            int len = snprintf(line, sizeof line, "%d %lu\n", st, total);
            if (write(fds[1], line, (size_t)len) != len)
                _exit(3);
            _exit(0);
        }
        kids[k] = pid;
    }
    close(fds[1]);
    /* a child stuck is killed and named, not waited for until the suite's
     * timeout */
    int64_t t0 = mono_ms();
    for (int k = 0; k < KIDS; k++) {
        int ws;
        pid_t got;
        while ((got = waitpid(kids[k], &ws, WNOHANG)) == 0 &&
               mono_ms() - t0 < BOUND_MS) {
            struct timespec nap = {0, 10000000L};
            nanosleep(&nap, NULL);
        }
        if (got == 0)
            for (int j = k; j < KIDS; j++)
                kill(kids[j], SIGKILL);
        cr_assert_eq(got, kids[k], "child %d still firing after %d ms", k,
                     BOUND_MS);
        cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
    char buf[512] = "";
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    cr_assert_gt(got, 0);
    buf[got] = '\0';
    close(fds[0]);
    unsigned long sum = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        int st;
        unsigned long n;
        cr_assert_eq(sscanf(line, "%d %lu", &st, &n), 2);
        cr_expect_eq(st, PL_OK);
        sum += n;
    }
    cr_expect_eq(sum, 10, "each of ten ticks created once, not %lu", sum);
    e = s_engine(path);
    cr_expect_str_eq(ticks(e, "many", 11), "11111111110");
    s_close(e);
}

/* The worker's thread records what pl_worker_run() returned: an assertion
 * belongs to the test's own thread. */
static _Atomic int worker_st = -1;
static char worker_msg[256];
static unsigned worker_poll_ms = 10; /* run_worker()'s */
static void *run_worker(void *arg)
{
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = worker_poll_ms;
    int st = pl_worker_run(arg, &wo);
    if (st)
        snprintf(worker_msg, sizeof worker_msg, "%s", pl_errmsg());
    atomic_store(&worker_st, st);
    return NULL;
}

static int completed;
static int count_completed(const pl_run_info *ri, void *user)
{
    (void)user;
    if (strncmp(ri->id, "w@", 2) == 0 && ri->status == PL_RUN_COMPLETED)
        completed++;
    return 0;
}

/* pl_worker_run() fires schedules, and its runs execute. */
Test(schedule, worker_fires)
{
    pl_engine *e = s_engine(t_store_path());
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    /* three ticks missed, at least: start four minutes back */
    put(e, "w", "* * * * *", PL_CATCH_UP_ALL, 3, PL_OVERLAP_ALLOW,
        now_ms - 4 * MIN_MS);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_worker, e), 0);
    /* bounded by the clock, not by turns: a turn's listing can take long
     * on a loaded machine */
    int64_t t0 = mono_ms();
    while (completed < 3) {
        int wst = atomic_load(&worker_st);
        cr_assert_eq(wst, -1, "the worker stopped (%d): %s", wst, worker_msg);
        cr_assert_lt(mono_ms() - t0, BOUND_MS,
                     "the worker completed %d of 3 runs in %d ms", completed,
                     BOUND_MS);
        struct timespec nap = {0, 10000000L};
        nanosleep(&nap, NULL);
        completed = 0;
        cr_assert_eq(pl_engine_runs(e, count_completed, NULL), PL_OK);
    }
    pl_worker_stop(e);
    pthread_join(th, NULL);
    cr_expect_eq(atomic_load(&worker_st), PL_OK, "the worker: %s", worker_msg);
    cr_expect_geq(atomic_load(&t_calls.echo), 3);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, now_ms), PL_OK);
    const char *last = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "last_run"));
    cr_expect(last && strncmp(last, "w@", 2) == 0, "last run '%s'", last);
    cJSON_Delete(list);
    s_close(e);
}

/* "pl_worker_run() fires the schedules about once a second, and at their
 * next tick", whatever its poll_ms: a worker that looks for runs once an
 * hour, idle, fires a schedule put meanwhile all the same (left to its
 * poll, a tick would pass its minute of grace and, under
 * PL_CATCH_UP_SKIP, never start). */
Test(schedule, a_worker_with_a_long_poll_fires_on_time)
{
    pl_engine *e = s_engine(t_store_path());
    pl_action root = PL_ACTION_INIT;
    root.policy = "echo";
    root.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "first";
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    worker_poll_ms = 3600000;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_worker, e), 0);
    /* it took the queued run: idle now, its next poll an hour away */
    int64_t t0 = mono_ms();
    while (status_of(e, "first") != PL_RUN_COMPLETED) {
        cr_assert_lt(mono_ms() - t0, BOUND_MS, "the worker ran no run");
        struct timespec nap = {0, 10000000L};
        nanosleep(&nap, NULL);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    put(e, "w", "* * * * *", PL_CATCH_UP_LATEST, 0, PL_OVERLAP_ALLOW,
        now_ms - 3 * MIN_MS);
    t0 = mono_ms();
    completed = 0;
    while (completed < 1) {
        cr_assert_lt(mono_ms() - t0, BOUND_MS,
                     "a worker polling once an hour fired no tick in %d ms",
                     BOUND_MS);
        struct timespec nap = {0, 10000000L};
        nanosleep(&nap, NULL);
        cr_assert_eq(pl_engine_runs(e, count_completed, NULL), PL_OK);
    }
    pl_worker_stop(e);
    pthread_join(th, NULL);
    cr_expect_eq(atomic_load(&worker_st), PL_OK, "the worker: %s", worker_msg);
    s_close(e);
}

/* An embedder without workers: pl_engine_wake() fires the due ticks and
 * executes their runs in the caller's thread, and says when the next is. */
Test(schedule, engine_wake_fires_and_runs)
{
    pl_engine *e = s_engine(t_store_path());
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    put(e, "w", "* * * * *", PL_CATCH_UP_ALL, 2, PL_OVERLAP_ALLOW,
        now_ms - 5 * MIN_MS);
    int64_t next = 0;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    completed = 0;
    cr_assert_eq(pl_engine_runs(e, count_completed, NULL), PL_OK);
    cr_expect_eq(completed, 2, "the last two missed ticks ran here");
    cr_expect_eq(atomic_load(&t_calls.echo), 2);
    cr_expect_gt(next, now_ms, "the next tick");
    cr_expect_leq(next, now_ms + 2 * MIN_MS);
    s_close(e);
}

static _Atomic int sched_failed, sched_failed_st;

static void on_sched_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_SCHEDULE_FAILED)
        return;
    atomic_store(&sched_failed_st, ev->status);
    if (ev->run_id == NULL && ev->detail && strstr(ev->detail, "payload"))
        atomic_fetch_add(&sched_failed, 1);
}

/* Put "big" in the store at @p path, due every minute from two minutes ago
 * (its latest tick due), its payload of 2 KiB put by an engine that takes
 * it (max_payload by default) but over the max_payload of 1 KiB of the
 * engine that fires it: each firing there fails.  Now, in ms. */
static int64_t put_big_schedule(const char *path)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    pl_schedule sc = PL_SCHEDULE_INIT;
    sc.name = "big";
    sc.cron = "* * * * *";
    sc.policy = "echo";
    sc.catch_up = PL_CATCH_UP_LATEST;
    sc.start_ms = now_ms - 2 * MIN_MS;
    char text[2048];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "s", text);
    sc.payload = p;
    cr_assert_eq(pl_schedule_put(e, &sc), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
    return now_ms;
}

/* A worker whose firing fails says so (PL_EVENT_SCHEDULE_FAILED, with the
 * status and why, no run id), and the tick stays due, to be tried again:
 * here the schedule's payload is over the engine's max_payload. */
Test(schedule, a_worker_reports_a_failed_firing)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.max_payload = 1024;
    o.on_event = on_sched_event;
    const char *path = t_store_path();
    int64_t now_ms = put_big_schedule(path);
    s_reg = t_registry();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, s_reg, &o), PL_OK, "%s", pl_errmsg());
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_worker, e), 0);
    for (int i = 0; i < 12000 && !atomic_load(&sched_failed); i++) {
        struct timespec nap = {0, 5000000L};
        nanosleep(&nap, NULL);
    }
    pl_worker_stop(e);
    pthread_join(th, NULL);
    cr_expect_eq(atomic_load(&worker_st), PL_OK, "the worker: %s", worker_msg);
    cr_assert_geq(atomic_load(&sched_failed), 1);
    cr_expect_eq(atomic_load(&sched_failed_st), PL_ELIMIT);
    /* nothing started, the tick still due */
    cr_expect_eq(pl_schedule_fire(e, now_ms, NULL, NULL), PL_ELIMIT);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, now_ms), PL_OK, "%s", pl_errmsg());
    const cJSON *one = cJSON_GetArrayItem(list, 0);
    cr_expect_leq(cJSON_GetNumberValue(cJSON_GetObjectItem(one, "due_ms")),
                  (double)now_ms);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(one, "last_run")),
                     "");
    cJSON_Delete(list);
    s_close(e);
}

/* "nap": sleeps payload.ms, then returns {} (a waiting run's policy). */
static int nap(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    int st = pl_ctx_sleep(ctx, (int64_t)cJSON_GetNumberValue(ms));
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* A schedule whose firing fails every time (its payload over the engine's
 * max_payload) stops no waiting run: pl_engine_wake() still continues the
 * runs due, says when the next is due, and reports the failure. */
Test(schedule, a_failing_schedule_leaves_engine_wake_to_wake_the_runs)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.max_payload = 1024;
    s_reg = t_registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "nap";
    d.fn = nap;
    cr_assert_eq(pl_registry_add(s_reg, &d), PL_OK, "%s", pl_errmsg());
    const char *path = t_store_path();
    put_big_schedule(path);
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, s_reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    /* long enough that the run parks before it is due on a loaded host
     * (a run due by the time it would park goes on in place) */
    pl_outcome *out = t_start(e, "nap", "{\"ms\":300}", "napper");
    cr_assert_eq(out->status, PL_RUN_WAITING);
    pl_outcome_free(out);
    int st = PL_OK;
    int64_t next = 0;
    for (int i = 0; i < 12000 && status_of(e, "napper") == PL_RUN_WAITING;
         i++) {
        st = pl_engine_wake(e, &next);
        struct timespec nap_ts = {0, 5000000L};
        nanosleep(&nap_ts, NULL);
    }
    cr_expect_eq(st, PL_ELIMIT, "the schedule's failure: %s",
                 pl_status_name(st));
    cr_expect_eq(status_of(e, "napper"), PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(status_of(e, "napper")));
    cr_expect_gt(next, 0, "the next tick is said");
    s_close(e);
}

/* "cancel_next": the first of a wake's tick runs cancels the next one, as
 * another process would between the ticks' firing and that run's turn. */
static char next_id[PL_MAX_RUN_ID + 1];
static int find_next(const pl_run_info *ri, void *user)
{
    (void)user;
    if (strncmp(ri->id, "c@", 2) == 0 && ri->status == PL_RUN_SUBMITTED)
        snprintf(next_id, sizeof next_id, "%s", ri->id);
    return 0;
}

static int cancel_next(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    pl_engine *e = pl_ctx_engine(ctx);
    int st = *next_id ? PL_OK : pl_engine_runs(e, find_next, NULL);
    if (!st && *next_id)
        st = pl_run_cancel(e, next_id, "cancelled before its turn");
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static char failed_sched[64], failed_run[PL_MAX_RUN_ID + 1], failed_why[512];
static void on_failed(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_SCHEDULE_FAILED || *failed_why)
        return;
    snprintf(failed_sched, sizeof failed_sched, "%s",
             ev->schedule ? ev->schedule : "(null)");
    snprintf(failed_run, sizeof failed_run, "%s",
             ev->run_id ? ev->run_id : "(null)");
    snprintf(failed_why, sizeof failed_why, "%s", ev->detail);
}

/* A tick's run that pl_engine_wake() cannot execute after firing it (it
 * was cancelled meanwhile) is a failure of its schedule: the event names
 * the schedule and the run, as a failed firing names its schedule. */
Test(schedule, a_ticks_run_wake_cannot_execute_names_its_schedule)
{
    s_reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(s_reg, "cancel_next", cancel_next, NULL),
                 PL_OK);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.on_event = on_failed;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), s_reg, &o), PL_OK, "%s",
                 pl_errmsg());
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = "c";
    s.cron = "* * * * *";
    s.policy = "cancel_next";
    s.catch_up = PL_CATCH_UP_ALL;
    s.catch_up_max = 2;
    s.overlap = PL_OVERLAP_ALLOW;
    s.start_ms = (int64_t)now.tv_sec * 1000 - 5 * MIN_MS;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    int64_t next = 0;
    cr_expect_eq(pl_engine_wake(e, &next), PL_ESTATE, "%s", pl_errmsg());
    cr_assert_neq(*next_id, '\0', "the second tick's run was cancelled");
    cr_expect_eq(status_of(e, next_id), PL_RUN_CANCELLED);
    cr_expect_str_eq(failed_sched, "c");
    cr_expect_str_eq(failed_run, next_id);
    char want[PL_MAX_RUN_ID + 64];
    snprintf(want, sizeof want, "schedule 'c': run '%s' is cancelled", next_id);
    cr_expect(strncmp(failed_why, want, strlen(want)) == 0, "'%s'", failed_why);
    cr_expect_gt(next, 0, "the next tick is said");
    s_close(e);
}
