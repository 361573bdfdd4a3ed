/*
 * test_schedule_flow.c -- a schedule's run options (pl_schedule version
 * 2): each tick's run submitted with the schedule's priority, concurrency
 * key and deadline after its tick, on the store the suite runs on: LMDB,
 * and PostgreSQL as pg_test_schedule_flow.
 *
 * Time is the caller's, as in test_schedule.c: schedules start in the past
 * and are fired at chosen times.  The worker runs in this process, so the
 * policies below count the runs of a key executing at once; every wait is
 * for a condition, with a generous bound, and nothing is timed.
 */
#define _GNU_SOURCE /* memmem */
#include "support.h"

#include "internal.h"
#include "mp.h"
#include "record.h"
#include "schedrec.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIN_MS 60000LL
/* 2100-01-01T00:00Z: the ticks of "* * * * *" after it are T0 + k min.  In
 * the future, so that a worker, which fires the schedules at the clock's
 * time, finds none of their ticks due: those of the chosen times are
 * fired by the tests alone. */
#define T0 4102444800000LL
#define BOUND_MS 60000 /* under the suite's timeout: a failure says which */

static char g_dir[256]; /* the gates' markers */

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static void marker(char *out, size_t n, const char *id, const char *what)
{
    snprintf(out, n, "%s/%s.%s", g_dir, id, what);
}

static bool marked(const char *id, const char *what)
{
    char p[1024];
    marker(p, sizeof p, id, what);
    return access(p, F_OK) == 0;
}

static void mark(const char *id, const char *what)
{
    char p[1024];
    marker(p, sizeof p, id, what);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "%s: %s", p, strerror(errno));
    close(fd);
}

static void unmark(const char *id, const char *what)
{
    char p[1024];
    marker(p, sizeof p, id, what);
    cr_assert_eq(unlink(p), 0, "%s: %s", p, strerror(errno));
}

/* ---- policies ------------------------------------------------------------ */

/* "gate" (every run of it under one key): counts the runs executing at
 * once, touches "<run>.in", and waits while "<run>.block" exists. */
static atomic_int g_running, g_most;

static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    const char *id = pl_ctx_run_id(ctx);
    int now = atomic_fetch_add(&g_running, 1) + 1;
    for (int most = atomic_load(&g_most);
         now > most && !atomic_compare_exchange_weak(&g_most, &most, now);)
        ;
    char p[1024];
    marker(p, sizeof p, id, "in");
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    while (marked(id, "block"))
        nap_ms(5);
    atomic_fetch_sub(&g_running, 1);
    return fd < 0 ? pl_errorf(PL_EIO, "%s: %s", p, strerror(errno))
                  : pl_steps_add_resultf(out, "{}");
}

/* "order": the order its runs executed in (by id). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_seen[8][PL_MAX_RUN_ID + 1];
static int g_n_seen;

static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    pthread_mutex_lock(&g_mu);
    if (g_n_seen < 8)
        snprintf(g_seen[g_n_seen++], PL_MAX_RUN_ID + 1, "%s",
                 pl_ctx_run_id(ctx));
    pthread_mutex_unlock(&g_mu);
    return pl_steps_add_resultf(out, "{}");
}

static pl_registry *g_reg;

static pl_engine *open_engine(void)
{
    g_reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(g_reg, "gate", gate, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(g_reg, "order", order, NULL), PL_OK);
    return t_engine(t_store_path(), g_reg, PL_DURABILITY_SYNC);
}

static void close_engine(pl_engine *e)
{
    pl_engine_close(e);
    pl_registry_free(g_reg);
    g_reg = NULL;
}

static void g_setup(void) { snprintf(g_dir, sizeof g_dir, "%s", t_tmpdir()); }

TestSuite(schedule_flow, .init = g_setup, .fini = t_cleanup, .timeout = 120);

/* ---- helpers ------------------------------------------------------------- */

/* Every minute from T0, @p policy, with the run options given. */
static pl_schedule every_minute(const char *name, const char *policy)
{
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = name;
    s.cron = "* * * * *";
    s.policy = policy;
    s.start_ms = T0;
    return s;
}

static void put(pl_engine *e, const pl_schedule *s)
{
    cr_assert_eq(pl_schedule_put(e, s), PL_OK, "%s", pl_errmsg());
}

static size_t fire(pl_engine *e, int64_t now)
{
    size_t n = 99;
    cr_assert_eq(pl_schedule_fire(e, now, &n, NULL), PL_OK, "%s", pl_errmsg());
    return n;
}

static void submit(pl_engine *e, const char *policy, const char *id,
                   int priority, const char *key, int64_t deadline_ms)
{
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = pl_json_empty();
    pl_run_options o = PL_RUN_OPTIONS_INIT;
    o.run_id = id;
    o.priority = priority;
    o.concurrency_key = key;
    o.concurrency_limit = key ? 1 : 0;
    o.deadline_ms = deadline_ms;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &o), PL_OK, "%s: %s", id,
                 pl_errmsg());
}

static void await(pl_engine *e, const char *id, const char *what)
{
    for (int ms = 0;
         what ? !marked(id, what) : status_of(e, id) != PL_RUN_COMPLETED;
         ms += 5) {
        cr_assert_lt(ms, BOUND_MS, "run %s never %s", id,
                     what ? "started" : "completed");
        nap_ms(5);
    }
}

static const cJSON *field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert_not_null(v, "no field %s", k);
    return v;
}

/* ---- the options, stored and applied ------------------------------------- */

/* The options are listed, and each tick's run (catch-up included) has the
 * deadline its tick gives it. */
Test(schedule_flow, a_ticks_run_has_the_options)
{
    pl_engine *e = open_engine();
    pl_schedule s = every_minute("export", "echo");
    s.overlap = PL_OVERLAP_ALLOW;
    s.catch_up = PL_CATCH_UP_ALL;
    s.catch_up_max = 2;
    s.priority = -7;
    s.concurrency_key = "warehouse";
    s.concurrency_limit = 3;
    s.deadline_in_ms = 90 * MIN_MS;
    put(e, &s);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK, "%s", pl_errmsg());
    const cJSON *o = cJSON_GetArrayItem(list, 0);
    cr_expect_eq(field(o, "priority")->valuedouble, -7);
    cr_expect_str_eq(field(o, "concurrency_key")->valuestring, "warehouse");
    cr_expect_eq(field(o, "concurrency_limit")->valuedouble, 3);
    cr_expect_eq(field(o, "deadline_in_ms")->valuedouble, 90.0 * MIN_MS);
    cJSON_Delete(list);
    cr_assert_eq(fire(e, T0 + 2 * MIN_MS + 1000), 2);
    const char *ids[] = {"export@2100-01-01T00:01Z",
                         "export@2100-01-01T00:02Z"};
    for (int k = 0; k < 2; k++) {
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, ids[k]), PL_OK, "%s", pl_errmsg());
        cr_expect_eq(ri->status, PL_RUN_SUBMITTED);
        cr_expect_eq(ri->deadline_ms, T0 + (k + 1) * MIN_MS + 90 * MIN_MS,
                     "%s: its tick plus 90 min", ids[k]);
        pl_run_info_free(ri);
    }
    /* put again without them: the next ticks' runs have none */
    s = every_minute("export", "echo");
    s.start_ms = T0 + 2 * MIN_MS;
    put(e, &s);
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK);
    o = cJSON_GetArrayItem(list, 0);
    cr_expect_eq(field(o, "priority")->valuedouble, 0);
    cr_expect_str_eq(field(o, "concurrency_key")->valuestring, "");
    cr_expect_eq(field(o, "concurrency_limit")->valuedouble, 0);
    cr_expect_eq(field(o, "deadline_in_ms")->valuedouble, 0);
    cJSON_Delete(list);
    /* overlap skip now: the last run is live (queued) */
    cr_expect_eq(fire(e, T0 + 3 * MIN_MS + 1000), 0);
    close_engine(e);
}

/* The largest deadline a schedule takes gives its ticks' runs the latest
 * deadline a run may have (2^53 ms), not a refused firing. */
Test(schedule_flow, the_largest_deadline_is_the_latest_a_run_has)
{
    pl_engine *e = open_engine();
    pl_schedule s = every_minute("far", "echo");
    s.deadline_in_ms = INT64_MAX / 4;
    put(e, &s);
    cr_assert_eq(fire(e, T0 + MIN_MS + 1000), 1);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "far@2100-01-01T00:01Z"), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(ri->deadline_ms, INT64_C(1) << 53);
    pl_run_info_free(ri);
    close_engine(e);
}

/*
 * One key, limit 1, shared by a submitted run ("ondemand"), every tick of
 * "nightly" (overlap allowed) and "skipper" (overlap skip).  While the
 * submitted run holds the key the ticks' runs wait in the queue and a run
 * of no key passes them; while a tick's run holds it, a submitted run of
 * the key waits; "skipper"'s next tick is skipped while its run waits for
 * the key; and at no time do two runs of the key execute at once.
 */
Test(schedule_flow, a_key_is_shared_by_ticks_and_submitted_runs)
{
    pl_engine *e = open_engine();
    const char *n1 = "nightly@2100-01-01T00:01Z",
               *n2 = "nightly@2100-01-01T00:02Z",
               *n3 = "nightly@2100-01-01T00:03Z",
               *sk = "skipper@2100-01-01T00:02Z";
    const char *blocked[] = {"ondemand", n1, n2, n3, sk};
    for (size_t i = 0; i < 5; i++)
        mark(blocked[i], "block");
    pl_schedule s = every_minute("nightly", "gate");
    s.overlap = PL_OVERLAP_ALLOW;
    s.catch_up = PL_CATCH_UP_ALL;
    s.catch_up_max = 5;
    s.concurrency_key = "warehouse";
    s.concurrency_limit = 1;
    put(e, &s);
    s.name = "skipper";
    s.overlap = PL_OVERLAP_SKIP;
    s.catch_up = PL_CATCH_UP_LATEST;
    s.catch_up_max = 0;
    put(e, &s);
    submit(e, "gate", "ondemand", 0, "warehouse", 0);
    t_worker w;
    t_worker_start(&w, e, 3);
    await(e, "ondemand", "in");
    /* nightly's ticks 1 and 2, skipper's latest (2) */
    cr_assert_eq(fire(e, T0 + 2 * MIN_MS + 1000), 3);
    submit(e, "echo", "probe1", 0, NULL, 0);
    await(e, "probe1", NULL);
    cr_assert(!marked(n1, "in") && !marked(n2, "in") && !marked(sk, "in"),
              "a tick's run started while a submitted run held its key");
    cr_assert_eq(status_of(e, n1), PL_RUN_SUBMITTED);
    /* skipper's run waits for the key: live, its next tick skipped */
    cr_assert_eq(fire(e, T0 + 3 * MIN_MS + 1000), 1, "nightly's tick 3 only");
    pl_run_info *ri = NULL;
    cr_expect_eq(pl_run_get(&ri, e, "skipper@2100-01-01T00:03Z"), PL_ENOTFOUND);
    /* the submitted run ends: the first tick's run takes the key */
    unmark("ondemand", "block");
    await(e, n1, "in");
    submit(e, "gate", "ondemand2", 0, "warehouse", 0);
    submit(e, "echo", "probe2", 0, NULL, 0);
    await(e, "probe2", NULL);
    cr_assert(!marked("ondemand2", "in") && !marked(n2, "in"),
              "a run started while a tick's run held its key");
    cr_assert_eq(status_of(e, "ondemand2"), PL_RUN_SUBMITTED);
    for (size_t i = 1; i < 5; i++)
        unmark(blocked[i], "block");
    const char *all[] = {"ondemand", n1, n2, n3, sk, "ondemand2"};
    for (size_t i = 0; i < 6; i++)
        await(e, all[i], NULL);
    t_worker_stop(&w);
    cr_expect_eq(atomic_load(&g_most), 1, "%d runs of the key at once",
                 atomic_load(&g_most));
    close_engine(e);
}

/* With one worker thread, the runs queued before it starts are taken by
 * priority: the high tick's, the submitted run's (0), the low tick's, though
 * the low one was queued first. */
Test(schedule_flow, a_low_priority_ticks_run_is_taken_after_a_higher_one)
{
    pl_engine *e = open_engine();
    pl_schedule s = every_minute("a-low", "order");
    s.priority = -3;
    put(e, &s);
    s.name = "b-high";
    s.priority = 3;
    put(e, &s);
    cr_assert_eq(fire(e, T0 + MIN_MS + 1000), 2);
    submit(e, "order", "plain", 0, NULL, 0);
    t_worker w;
    t_worker_start(&w, e, 1);
    await(e, "a-low@2100-01-01T00:01Z", NULL);
    t_worker_stop(&w);
    cr_assert_eq(g_n_seen, 3);
    cr_expect_str_eq(g_seen[0], "b-high@2100-01-01T00:01Z");
    cr_expect_str_eq(g_seen[1], "plain");
    cr_expect_str_eq(g_seen[2], "a-low@2100-01-01T00:01Z");
    close_engine(e);
}

/* A tick's deadline passed ends its run as a submitted run's does: failed,
 * PL_EDEADLINE, "DeadlineExceeded", at its first call; a deadline not
 * passed lets it complete. */
Test(schedule_flow, a_passed_deadline_ends_the_run_as_a_submitted_ones)
{
    pl_engine *e = open_engine();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    pl_schedule s = every_minute("late", "chain");
    s.start_ms = now - 3 * MIN_MS;
    s.catch_up = PL_CATCH_UP_LATEST;
    s.deadline_in_ms = 1;
    put(e, &s);
    s.name = "ample";
    s.deadline_in_ms = 24 * 60 * MIN_MS;
    put(e, &s);
    int64_t tick = now / MIN_MS * MIN_MS;
    cr_assert_eq(fire(e, now), 2);
    char late[160], ample[160];
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, now), PL_OK);
    snprintf(ample, sizeof ample, "%s",
             field(cJSON_GetArrayItem(list, 0), "last_run")->valuestring);
    snprintf(late, sizeof late, "%s",
             field(cJSON_GetArrayItem(list, 1), "last_run")->valuestring);
    cJSON_Delete(list);
    submit(e, "chain", "sub", 0, NULL, tick + 1);
    pl_outcome *o[2] = {NULL, NULL};
    const char *ids[2] = {late, "sub"};
    for (int i = 0; i < 2; i++) {
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, ids[i]), PL_OK, "%s", pl_errmsg());
        cr_expect_eq(ri->deadline_ms, tick + 1, "%s", ids[i]);
        pl_run_info_free(ri);
        cr_assert_eq(pl_run_continue(&o[i], e, ids[i], NULL), PL_OK, "%s",
                     pl_errmsg());
        cr_expect_eq(o[i]->status, PL_RUN_FAILED, "%s", ids[i]);
        cr_expect_eq(o[i]->error, PL_EDEADLINE, "%s", ids[i]);
        cr_expect(o[i]->reason &&
                      strncmp(o[i]->reason, "DeadlineExceeded", 16) == 0,
                  "%s: %s", ids[i], o[i]->reason);
    }
    /* the same end, but for the run's id */
    const char *tail[2];
    for (int i = 0; i < 2; i++)
        cr_assert_not_null(tail[i] = strstr(o[i]->reason, " passed its"), "%s",
                           o[i]->reason);
    cr_expect_str_eq(tail[0], tail[1]);
    pl_outcome_free(o[0]);
    pl_outcome_free(o[1]);
    cr_expect_eq(atomic_load(&t_calls.add), 0, "no call made");
    pl_outcome *ok = NULL;
    cr_assert_eq(pl_run_continue(&ok, e, ample, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(ok->status, PL_RUN_COMPLETED, "%s", ok->reason);
    pl_outcome_free(ok);
    close_engine(e);
}

/* ---- refusals ------------------------------------------------------------ */

/* Each bad option is refused with pl_run_submit()'s error and message (after
 * the schedule's name instead of the function's), naming the field; nothing
 * is written. */
Test(schedule_flow, bad_options_are_refused_naming_the_field)
{
    pl_engine *e = open_engine();
    char long_key[PL_MAX_FLOW_KEY + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    struct {
        int priority;
        const char *key;
        unsigned limit;
        const char *words;
    } bad[] = {
        {PL_PRIORITY_MAX + 1, NULL, 0, "priority 1001 is outside"},
        {-PL_PRIORITY_MAX - 1, NULL, 0, "priority -1001 is outside"},
        {0, "k", 0, "needs a concurrency_limit"},
        {0, NULL, 2, "a concurrency_limit needs a concurrency_key"},
        {0, "", 1, "a concurrency key is 1 to"},
        {0, long_key, 1, "a concurrency key is 1 to"},
        {0, "k", (unsigned)INT32_MAX + 1, "concurrency_limit"},
    };
    pl_action a = PL_ACTION_INIT;
    a.policy = "echo";
    a.payload = pl_json_empty();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_schedule s = every_minute("x", "echo");
        s.priority = bad[i].priority;
        s.concurrency_key = bad[i].key;
        s.concurrency_limit = bad[i].limit;
        cr_expect_eq(pl_schedule_put(e, &s), PL_EINVAL, "case %zu", i);
        char got[512];
        snprintf(got, sizeof got, "%s", pl_errmsg());
        cr_expect(strncmp(got, "schedule 'x': ", 14) == 0 &&
                      strstr(got, bad[i].words),
                  "case %zu: '%s'", i, got);
        pl_run_options o = PL_RUN_OPTIONS_INIT;
        o.run_id = "refused";
        o.priority = bad[i].priority;
        o.concurrency_key = bad[i].key;
        o.concurrency_limit = bad[i].limit;
        cr_expect_eq(pl_run_submit(NULL, e, &a, &o), PL_EINVAL);
        const char *want = pl_errmsg();
        cr_expect(strncmp(want, "pl_run_submit: ", 15) == 0 &&
                      strcmp(want + 15, got + 14) == 0,
                  "case %zu: '%s' and '%s'", i, got, want);
    }
    pl_schedule s = every_minute("x", "echo");
    s.deadline_in_ms = -1;
    cr_expect_eq(pl_schedule_put(e, &s), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "deadline_in_ms -1"), "%s", pl_errmsg());
    s.deadline_in_ms = INT64_MAX;
    cr_expect_eq(pl_schedule_put(e, &s), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "a negative or huge deadline"), "%s",
              pl_errmsg());
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK);
    cr_expect_eq(cJSON_GetArraySize(list), 0, "nothing was written");
    cJSON_Delete(list);
    close_engine(e);
}

/* ---- older callers, older records ---------------------------------------- */

/* A version 1 struct ends before the options: what lies after it is not
 * read, and its ticks' runs have none. */
Test(schedule_flow, a_version_1_struct_is_read_without_them)
{
    pl_engine *e = open_engine();
    pl_schedule s = every_minute("v1", "echo");
    s.version = 1;
    s.priority = 5000; /* out of range: would be refused if read */
    s.concurrency_key = "";
    s.deadline_in_ms = -1;
    put(e, &s);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK);
    const cJSON *o = cJSON_GetArrayItem(list, 0);
    cr_expect_eq(field(o, "priority")->valuedouble, 0);
    cr_expect_str_eq(field(o, "concurrency_key")->valuestring, "");
    cr_expect_eq(field(o, "deadline_in_ms")->valuedouble, 0);
    cJSON_Delete(list);
    cr_assert_eq(fire(e, T0 + MIN_MS + 1000), 1);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "v1@2100-01-01T00:01Z"), PL_OK);
    cr_expect_eq(ri->deadline_ms, 0);
    pl_run_info_free(ri);
    close_engine(e);
}

/* A schedule record as the builds before the options wrote it (the
 * format's twelve keys, schedrec.c) but of format version @p version, with
 * @p n_extra pairs of msgpack, packed in @p extra, after "last", and its
 * checksum. */
static void old_record(pl__buf *out, const char *name, unsigned version,
                       size_t n_extra, const pl__buf *extra)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    cr_assert_eq(msgpack_pack_map(&pk, (uint32_t)(12 + n_extra)), 0);
    const char *strs[][2] = {{"cron", "* * * * *"},
                             {"zone", "UTC"},
                             {"policy", "echo"},
                             {"payload", "{\"from\":\"old\"}"}};
    cr_assert_eq(pack_cstr(&pk, "v") || msgpack_pack_uint32(&pk, version), 0);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(pack_cstr(&pk, strs[i][0]) || pack_cstr(&pk, strs[i][1]),
                     0);
    cr_assert_eq(pack_cstr(&pk, "overlap") || msgpack_pack_uint32(&pk, 1) ||
                     pack_cstr(&pk, "catchup") || msgpack_pack_uint32(&pk, 2) ||
                     pack_cstr(&pk, "max") || msgpack_pack_uint32(&pk, 3) ||
                     pack_cstr(&pk, "created") || msgpack_pack_int64(&pk, T0) ||
                     pack_cstr(&pk, "cursor") || msgpack_pack_int64(&pk, T0) ||
                     pack_cstr(&pk, "last") || pack_cstr(&pk, ""),
                 0);
    if (n_extra)
        cr_assert_eq(pl__buf_append(out, extra->data, extra->len), PL_OK);
    uint8_t sum[PL_HASH_LEN];
    cr_assert_eq(pl__runrec_sum('c', name, out->data, out->len, sum), PL_OK);
    cr_assert_eq(pack_cstr(&pk, "sum") ||
                     msgpack_pack_bin_with_body(&pk, sum, PL_HASH_LEN),
                 0);
}

/* Write schedule record @p rec as the store's commit writes one. */
static void store_record(pl_engine *e, const char *name, const pl__buf *rec)
{
    pl__batch b;
    memset(&b, 0, sizeof b);
    b.sched_name = name;
    b.sched_rec = rec;
    pl__batch *bp = &b;
    cr_assert_eq(pl__store_commit(e->store, &bp, 1, false), PL_OK, "%s",
                 pl_errmsg());
}

/* An old record reads as before (no options: encoded again, the same
 * bytes) and fires; a record of this build with options is version 2, and
 * one with a damaged option, or one out of range, or options in the wrong
 * version under a right checksum, is PL_ECORRUPT naming the schedule; a
 * later version is PL_EVERSION. */
Test(schedule_flow, an_old_record_reads_as_before_and_a_damaged_one_is_refused)
{
    pl_engine *e = open_engine();
    pl__buf rec = {0};
    old_record(&rec, "old", 1, 0, NULL);
    pl__sched_rec r;
    cr_assert_eq(pl__sched_rec_decode(&r, "old", rec.data, rec.len), PL_OK,
                 "%s", pl_errmsg());
    cr_expect(r.priority == 0 && r.flow_key == NULL && r.flow_limit == 0 &&
              r.deadline_in_ms == 0);
    pl__buf again = {0};
    cr_assert_eq(pl__sched_rec_encode(&again, "old", &r), PL_OK);
    cr_expect(again.len == rec.len && !memcmp(again.data, rec.data, rec.len),
              "without options, the record is the old format's bytes");
    pl__buf_free(&again);
    pl__sched_rec_clear(&r);
    store_record(e, "old", &rec);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK, "%s", pl_errmsg());
    const cJSON *o = cJSON_GetArrayItem(list, 0);
    cr_expect_str_eq(field(o, "overlap")->valuestring, "allow");
    cr_expect_eq(field(o, "catch_up_max")->valuedouble, 3);
    cr_expect_eq(field(o, "priority")->valuedouble, 0);
    cr_expect_str_eq(field(o, "concurrency_key")->valuestring, "");
    cJSON_Delete(list);
    cr_expect_eq(fire(e, T0 + 2 * MIN_MS + 1000), 2);
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "old@2100-01-01T00:02Z"), PL_OK);
    cr_expect_eq(ri->deadline_ms, 0);
    pl_run_info_free(ri);
    pl__buf_free(&rec);

    /* a record of this build: each option's bytes damaged */
    pl_schedule s = every_minute("new", "echo");
    s.priority = 4;
    s.concurrency_key = "kk";
    s.concurrency_limit = 2;
    s.deadline_in_ms = 1000;
    put(e, &s);
    pl__kvs all = {0};
    cr_assert_eq(pl__store_scheds(e->store, &all), PL_OK);
    cr_assert_eq(all.n, 2);
    const uint8_t *v = pl__kvs_val(&all, 0);
    size_t vn = all.e[0].vlen;
    cr_assert_eq(pl__sched_rec_decode(&r, "new", v, vn), PL_OK);
    cr_expect(memmem(v, vn, "\xa1v\x02", 3), "version 2");
    cr_expect(r.priority == 4 && !strcmp(r.flow_key, "kk") &&
              r.flow_limit == 2 && r.deadline_in_ms == 1000);
    pl__sched_rec_clear(&r);
    const char *keys[] = {"prio", "key", "limit", "deadline"};
    for (size_t k = 0; k < 4; k++) {
        const uint8_t *at = memmem(v, vn, keys[k], strlen(keys[k]));
        cr_assert_not_null(at, "%s", keys[k]);
        pl__buf bad = {0};
        cr_assert_eq(pl__buf_append(&bad, v, vn), PL_OK);
        bad.data[(size_t)(at - v) + strlen(keys[k])] ^= 0x01; /* its value */
        store_record(e, "new", &bad);
        cr_expect_eq(pl_schedule_list(&list, e, T0), PL_ECORRUPT, "%s",
                     keys[k]);
        cr_expect(strstr(pl_errmsg(), "schedule 'new'"), "%s", pl_errmsg());
        pl__buf_free(&bad);
    }
    pl__kvs_free(&all);
    /* right checksums, wrong values */
    pl__buf extra[6] = {{0}};
    msgpack_packer pk;
    packer_init(&pk, &extra[0]); /* priority out of range */
    cr_assert_eq(pack_cstr(&pk, "prio") || msgpack_pack_int32(&pk, 5000), 0);
    packer_init(&pk, &extra[1]); /* a key without its limit */
    cr_assert_eq(pack_cstr(&pk, "key") || pack_cstr(&pk, "kk"), 0);
    packer_init(&pk, &extra[2]); /* a limit of 0 */
    cr_assert_eq(pack_cstr(&pk, "key") || pack_cstr(&pk, "kk") ||
                     pack_cstr(&pk, "limit") || msgpack_pack_uint32(&pk, 0),
                 0);
    packer_init(&pk, &extra[3]); /* a negative deadline */
    cr_assert_eq(pack_cstr(&pk, "deadline") || msgpack_pack_int64(&pk, -5), 0);
    packer_init(&pk, &extra[4]); /* a right priority, in version 1 or 3 */
    cr_assert_eq(pack_cstr(&pk, "prio") || msgpack_pack_int32(&pk, 3), 0);
    struct {
        unsigned version;
        size_t pairs, extra;
        int st;
        const char *words;
    } cases[] = {
        {2, 1, 0, PL_ECORRUPT, "malformed"},
        {2, 1, 1, PL_ECORRUPT, "malformed"},
        {2, 2, 2, PL_ECORRUPT, "malformed"},
        {2, 1, 3, PL_ECORRUPT, "malformed"},
        {1, 1, 4, PL_ECORRUPT, "malformed"},
        {2, 0, 5, PL_ECORRUPT, "malformed"},
        {3, 1, 4, PL_EVERSION, "format version 3"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        old_record(&rec, "new", cases[k].version, cases[k].pairs,
                   &extra[cases[k].extra]);
        store_record(e, "new", &rec);
        cr_expect_eq(pl_schedule_list(&list, e, T0), cases[k].st, "case %zu",
                     k);
        cr_expect(strstr(pl_errmsg(), "schedule 'new'") &&
                      strstr(pl_errmsg(), cases[k].words),
                  "case %zu: %s", k, pl_errmsg());
        cr_expect_eq(pl_schedule_fire(e, T0 + 3 * MIN_MS, NULL, NULL),
                     cases[k].st, "case %zu", k);
        pl__buf_free(&rec);
    }
    for (size_t k = 0; k < 6; k++)
        pl__buf_free(&extra[k]);
    close_engine(e);
}
