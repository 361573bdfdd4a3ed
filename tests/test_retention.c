/*
 * test_retention.c -- deleting runs (never one whose state moved on since
 * it was read), tombstones, pruning and the retention rule, on the store the suite runs on: LMDB, and PostgreSQL as
 * pg_test_retention (PL_TEST_STORE=postgresql, tests/CMakeLists.txt).
 *
 * The crash tests are real: a forked child prunes, the parent SIGKILLs it
 * part way, and every run must then be whole (it verifies, with the head
 * it had) or gone (with its tombstone), never half.  Nothing is timed:
 * every wait is for a condition, with a generous bound.
 */
#include "support.h"

#include "internal.h"

#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static pl_engine *open_with(const char *path, const pl_registry *reg,
                            uint64_t tombstone_ms, uint64_t retain_ms)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.tombstone_ms = tombstone_ms;
    o.retain_ms = retain_ms;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "open: %s",
                 pl_errmsg());
    return e;
}

static void done(pl_outcome *o, pl_run_status want)
{
    cr_assert_eq(o->status, want, "status %d, want %d", o->status, want);
    pl_outcome_free(o);
}

static uint64_t step_records(pl_engine *e)
{
    pl_store_stats s = PL_STORE_STATS_INIT;
    cr_assert_eq(pl_engine_stats(&s, e), PL_OK, "%s", pl_errmsg());
    return s.step_records;
}

static int start_as(pl_outcome **o, pl_engine *e, const char *policy,
                    const char *id, pl_if_exists how)
{
    cJSON *p = t_json("{\"n\": 2}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.if_exists = how;
    *o = NULL;
    int st = pl_run_start(o, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

/* Queue a run @p id of "echo" (a worker would execute it). */
static void submit_echo(pl_engine *e, const char *id)
{
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

/* ---- delete and tombstones ------------------------------------------------ */

Test(retention, delete_leaves_a_tombstone)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    done(t_start(e, "chain", "{\"n\": 3}", "gone-1"), PL_RUN_COMPLETED);
    done(t_start(e, "chain", "{\"n\": 2}", "kept-1"), PL_RUN_COMPLETED);
    uint8_t head[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, e, "gone-1"), PL_OK);
    uint64_t before = step_records(e);

    cr_assert_eq(pl_run_delete(e, "gone-1"), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "gone-1"), PL_ENOTFOUND);
    pl_steps *steps = NULL;
    cr_assert_eq(pl_run_ledger(&steps, e, "gone-1", "0"), PL_ENOTFOUND);
    cr_assert_lt(step_records(e), before, "its steps are gone");
    cr_assert_eq(pl_run_verify(e, "kept-1"), PL_OK, "the other is whole");

    pl_tombstone t = PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, "gone-1"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(t.status, PL_RUN_COMPLETED);
    cr_assert(t.has_head);
    cr_assert_eq(memcmp(t.head, head, PL_HASH_LEN), 0, "the head it had");
    cr_assert_str_eq(t.policy, "chain");
    cr_assert_eq(t.expires_us - t.deleted_us, 7LL * 24 * 3600 * 1000000,
                 "tombstone_ms 0 keeps the id 7 days");
    cr_assert_geq(t.deleted_us, t.created_us);

    /* deleting it again: it is gone */
    cr_assert_eq(pl_run_delete(e, "gone-1"), PL_ENOTFOUND);
    cr_assert_eq(pl_run_tombstone(&t, e, "kept-1"), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, refused_for_live_runs_and_bad_arguments)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    submit_echo(e, "queued-1");
    cr_assert_eq(pl_run_delete(e, "queued-1"), PL_ESTATE);
    cr_assert(strstr(pl_errmsg(), "submitted"), "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "queued-1"), PL_OK, "still there");
    pl_run_info_free(info);

    cr_assert_eq(pl_run_delete(e, "no-such-run"), PL_ENOTFOUND);
    cr_assert_eq(pl_run_delete(e, "bad id!"), PL_EINVAL);
    cr_assert_eq(pl_run_delete(NULL, "x"), PL_EINVAL);
    pl_tombstone t = PL_TOMBSTONE_INIT;
    t.version = 0;
    cr_assert_eq(pl_run_tombstone(&t, e, "x"), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "pl_tombstone"), "%s", pl_errmsg());

    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    po.statuses = 1u << PL_RUN_SUSPENDED;
    cr_assert_eq(pl_engine_prune(e, &po, NULL), PL_EINVAL);
    po.statuses = 0;
    po.batch = 5000;
    cr_assert_eq(pl_engine_prune(e, &po, NULL), PL_EINVAL);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, a_tombstoned_id_is_not_taken_again)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    done(t_start(e, "chain", "{\"n\": 2}", "order-7"), PL_RUN_COMPLETED);
    cr_assert_eq(pl_run_delete(e, "order-7"), PL_OK, "%s", pl_errmsg());
    int calls = t_calls.add;

    pl_outcome *o;
    cr_assert_eq(start_as(&o, e, "chain", "order-7", PL_IF_EXISTS_FAIL),
                 PL_EEXIST);
    cr_assert(strstr(pl_errmsg(), "was deleted on"), "%s", pl_errmsg());
    cr_assert_null(o);

    cr_assert_eq(start_as(&o, e, "chain", "order-7", PL_IF_EXISTS_OUTCOME),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert(o->reason && strstr(o->reason, "deleted on"));
    cr_assert_null(o->steps);
    pl_outcome_free(o);
    cr_assert_eq(start_as(&o, e, "chain", "order-7", PL_IF_EXISTS_CONTINUE),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(t_calls.add, calls, "nothing executed again");

    /* another root policy is not the run asked for */
    cr_assert_eq(start_as(&o, e, "echo", "order-7", PL_IF_EXISTS_OUTCOME),
                 PL_EEXIST);
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "order-7";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_EEXIST);
    cr_assert(strstr(pl_errmsg(), "was deleted on"), "%s", pl_errmsg());
    cJSON_Delete(p);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "order-7"), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, tombstones_expire)
{
    pl_registry *reg = t_registry();
    const char *path = t_store_path();
    pl_engine *e = open_with(path, reg, 1, 0); /* 1 ms */
    done(t_start(e, "fail", "{}", "short-1"), PL_RUN_FAILED);
    done(t_start(e, "fail", "{}", "short-2"), PL_RUN_FAILED);
    cr_assert_eq(pl_run_delete(e, "short-1"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_delete(e, "short-2"), PL_OK, "%s", pl_errmsg());
    pl_tombstone t = PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, "short-1"), PL_OK);
    cr_assert_eq(t.status, PL_RUN_FAILED);
    cr_assert_not(t.has_head, "a failed run records no head");
    nap_ms(5);
    /* expired: the id is free, and a start makes a new run */
    done(t_start(e, "echo", "{}", "short-1"), PL_RUN_COMPLETED);
    /* a prune removes the expired tombstone of the other */
    cr_assert_eq(pl_run_tombstone(&t, e, "short-2"), PL_OK);
    uint64_t n = 99;
    cr_assert_eq(pl_engine_prune(e, NULL, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(n, 1, "the new short-1 is completed: pruned");
    cr_assert_eq(pl_run_tombstone(&t, e, "short-2"), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A tombstone_ms too large to add to a clock in microseconds keeps the id
 * for good (near INT64_MAX / 1000 the expiry overflowed, before the
 * delete, and the id was free at once). */
Test(retention, a_huge_tombstone_ms_keeps_the_id)
{
    pl_registry *reg = t_registry();
    const uint64_t huge[] = {INT64_MAX / 2000, INT64_MAX / 1000 - 1,
                             INT64_MAX / 1000, UINT64_MAX};
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        pl_engine *e = open_with(t_store_path(), reg, huge[i], 0);
        char id[32];
        snprintf(id, sizeof id, "kept-%zu", i);
        done(t_start(e, "echo", "{}", id), PL_RUN_COMPLETED);
        cr_assert_eq(pl_run_delete(e, id), PL_OK, "%s", pl_errmsg());
        pl_outcome *o = NULL;
        cr_assert_eq(start_as(&o, e, "echo", id, PL_IF_EXISTS_FAIL), PL_EEXIST,
                     "%zu: the id is kept: %s", i, pl_errmsg());
        pl_engine_close(e);
    }
    pl_registry_free(reg);
}

/* ---- pruning --------------------------------------------------------------- */

typedef struct seen {
    int n, stop_at;
    char ids[64][64];
} seen;

static int note(const pl_run_info *info, void *user)
{
    seen *s = user;
    if (s->stop_at && s->n == s->stop_at)
        return PL_EIO;
    snprintf(s->ids[s->n++ % 64], 64, "%s", info->id);
    return 0;
}

static int count_runs(const pl_run_info *info, void *user)
{
    (void)info;
    ++*(int *)user;
    return 0;
}

static int runs_in(pl_engine *e)
{
    int n = 0;
    cr_assert_eq(pl_engine_runs(e, count_runs, &n), PL_OK, "%s", pl_errmsg());
    return n;
}

Test(retention, prune_chooses_by_status_and_age)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    char id[32];
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "ok-%02d", i);
        done(t_start(e, "chain", "{\"n\": 2}", id), PL_RUN_COMPLETED);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "bad-%02d", i);
        done(t_start(e, "fail", "{}", id), PL_RUN_FAILED);
    }
    submit_echo(e, "waiting-1");

    /* too young: nothing */
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    po.older_than_ms = 3600 * 1000;
    uint64_t n = 99;
    cr_assert_eq(pl_engine_prune(e, &po, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(n, 0);
    /* a dry run visits, deletes nothing */
    seen s = {0};
    po.older_than_ms = 0;
    po.dry_run = true;
    po.before = note;
    po.user = &s;
    cr_assert_eq(pl_engine_prune(e, &po, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(n, 13);
    cr_assert_eq(s.n, 13);
    cr_assert_eq(runs_in(e), 14);
    /* failed ones only */
    po.dry_run = false;
    po.before = NULL;
    po.statuses = 1u << PL_RUN_FAILED;
    cr_assert_eq(pl_engine_prune(e, &po, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(n, 3);
    cr_assert_eq(runs_in(e), 11);
    /* a visitor that fails stops the prune before that run; those before
     * it are deleted, in batches of 4 */
    memset(&s, 0, sizeof s);
    s.stop_at = 6;
    po.statuses = 0;
    po.batch = 4;
    po.before = note;
    cr_assert_eq(pl_engine_prune(e, &po, &n), PL_EIO);
    cr_assert_eq(n, 6, "deleted %llu", (unsigned long long)n);
    cr_assert_eq(runs_in(e), 5);
    /* the rest, and the queued run stays */
    cr_assert_eq(pl_engine_prune(e, NULL, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(n, 4);
    cr_assert_eq(runs_in(e), 1);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "waiting-1"), PL_OK);
    pl_run_info_free(info);
    cr_assert_eq(step_records(e), 0, "every step of the deleted runs gone");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, a_big_run_is_purged_in_bounded_transactions)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    /* two records a call: several purge transactions */
    done(t_start(e, "chain", "{\"n\": 2500}", "big-1"), PL_RUN_COMPLETED);
    cr_assert_gt(step_records(e), 4500, "%llu",
                 (unsigned long long)step_records(e));
    cr_assert_eq(pl_run_delete(e, "big-1"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(step_records(e), 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The workers' rules that delete here are of 1 ms, which a run is past a
 * millisecond after its last write: the clock is read (no sleep) until
 * run @p newest, the last written, is past it, so that a worker's first
 * prune finds every run past it, rather than its next, a second later. */
static void past_1_ms(pl_engine *e, const char *newest)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, newest), PL_OK, "%s", pl_errmsg());
    int64_t past = info->updated_us + 1000;
    pl_run_info_free(info);
    struct timespec ts;
    do {
        sched_yield();
        clock_gettime(CLOCK_REALTIME, &ts);
    } while ((int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 <= past);
}

typedef struct worker_arg {
    pl_engine *e;
    pl_worker_options wo;
    int rc;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *w = p;
    w->wo.poll_ms = 10;
    w->rc = pl_worker_run(w->e, &w->wo);
    return NULL;
}

static worker_arg worker_with(pl_engine *e, uint64_t retain_ms,
                              uint64_t retain_failed_ms)
{
    worker_arg w = {e, PL_WORKER_OPTIONS_INIT, -1};
    w.wo.retain_ms = retain_ms;
    w.wo.retain_failed_ms = retain_failed_ms;
    return w;
}

/* Run worker @p w until @p want runs are left (a bound of 30 s), and stop
 * it: its first prune has passed by then. */
static void work_until_left(worker_arg *w, int want)
{
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, worker_main, w), 0);
    int left = -1;
    for (int i = 0; i < 3000 && left != want; i++) {
        nap_ms(10);
        left = runs_in(w->e);
    }
    pl_worker_stop(w->e);
    pthread_join(th, NULL);
    cr_assert_eq(w->rc, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(left, want, "%d runs left, want %d", left, want);
}

/* The retention rule of the engine (or of the worker) applied by a worker:
 * ended runs go, a queued one is executed, then goes too. */
static void retained_by_worker(uint64_t engine_ms, uint64_t worker_ms)
{
    pl_registry *reg = t_registry();
    pl_engine *e = open_with(t_store_path(), reg, 0, engine_ms);
    done(t_start(e, "echo", "{}", "old-1"), PL_RUN_COMPLETED);
    done(t_start(e, "fail", "{}", "old-2"), PL_RUN_FAILED);
    past_1_ms(e, "old-2");
    worker_arg w = worker_with(e, worker_ms, 0);
    work_until_left(&w, 0);
    pl_tombstone t = PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, "old-2"), PL_OK);
    cr_assert_eq(t.status, PL_RUN_FAILED);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, the_engine_rule_applied_by_a_worker)
{
    retained_by_worker(1, 0);
}

Test(retention, the_worker_rule) { retained_by_worker(0, 1); }

Test(retention, a_worker_without_a_rule_deletes_nothing)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    done(t_start(e, "echo", "{}", "stay-1"), PL_RUN_COMPLETED);
    pl_worker_stop(e); /* asked before: it returns at once */
    worker_arg w = worker_with(e, 0, 0);
    worker_main(&w);
    cr_assert_eq(w.rc, PL_OK);
    cr_assert_eq(runs_in(e), 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a rule by outcome: failed and cancelled runs kept longer ------------ */

#define HOUR_MS (3600 * 1000)

/* A run of each outcome the rules part, past a rule of 1 ms: completed
 * "ok-N", failed "bad-N", cancelled "off-N". */
static void ended_runs(pl_engine *e, int n)
{
    char id[32];
    snprintf(id, sizeof id, "off-%d", n);
    submit_echo(e, id);
    cr_assert_eq(pl_run_cancel(e, id, "not wanted"), PL_OK, "%s", pl_errmsg());
    snprintf(id, sizeof id, "ok-%d", n);
    done(t_start(e, "echo", "{}", id), PL_RUN_COMPLETED);
    snprintf(id, sizeof id, "bad-%d", n);
    done(t_start(e, "fail", "{}", id), PL_RUN_FAILED);
    past_1_ms(e, id);
}

/* Is run @p id there (else: deleted, with a tombstone of @p was)? */
static bool kept(pl_engine *e, const char *id, pl_run_status was)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    pl_run_info_free(info);
    if (st == PL_OK)
        return true;
    cr_assert_eq(st, PL_ENOTFOUND, "%s: %s", id, pl_errmsg());
    pl_tombstone t = PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, id), PL_OK, "%s", id);
    cr_assert_eq(t.status, was, "%s was %d", id, t.status);
    return false;
}

Test(retention, failed_and_cancelled_runs_are_kept_longer)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    ended_runs(e, 1);
    /* completed: past 1 ms, gone; failed and cancelled: not an hour old */
    worker_arg w = worker_with(e, 1, HOUR_MS);
    work_until_left(&w, 2);
    cr_assert_not(kept(e, "ok-1", PL_RUN_COMPLETED));
    cr_assert(kept(e, "bad-1", PL_RUN_FAILED));
    cr_assert(kept(e, "off-1", PL_RUN_CANCELLED));
    /* past their own age they go; the completed rule, an hour now, keeps
     * a completed run that ended since */
    done(t_start(e, "echo", "{}", "ok-2"), PL_RUN_COMPLETED);
    w = worker_with(e, HOUR_MS, 1);
    work_until_left(&w, 1);
    cr_assert_not(kept(e, "bad-1", PL_RUN_FAILED));
    cr_assert_not(kept(e, "off-1", PL_RUN_CANCELLED));
    cr_assert(kept(e, "ok-2", PL_RUN_COMPLETED));
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, the_engine_rules_field_by_field)
{
    pl_registry *reg = t_registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.retain_failed_ms = HOUR_MS; /* retain_ms 0: the worker's */
    pl_engine *e = NULL;
    const char *path = t_store_path();
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    ended_runs(e, 1);
    worker_arg w = worker_with(e, 1, 0);
    work_until_left(&w, 2);
    cr_assert_not(kept(e, "ok-1", PL_RUN_COMPLETED));
    pl_engine_close(e);
    /* the failed runs' rule alone keeps completed runs for good */
    o.retain_failed_ms = 1;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    ended_runs(e, 2);
    w = worker_with(e, 0, 0);
    work_until_left(&w, 1);
    cr_assert_not(kept(e, "bad-1", PL_RUN_FAILED));
    cr_assert_not(kept(e, "off-2", PL_RUN_CANCELLED));
    cr_assert(kept(e, "ok-2", PL_RUN_COMPLETED));
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A caller built against version 2 has no retain_failed_ms: what lies
 * past retain_ms is not read, and its rule deletes every ended run. */
Test(retention, a_version_2_worker_prunes_every_outcome_alike)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    ended_runs(e, 1);
    worker_arg w = worker_with(e, 1, HOUR_MS);
    w.wo.version = 2;
    work_until_left(&w, 0);
    cr_assert_not(kept(e, "bad-1", PL_RUN_FAILED));
    cr_assert_not(kept(e, "off-1", PL_RUN_CANCELLED));
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(retention, a_rule_too_long_is_refused_naming_its_field)
{
    pl_registry *reg = t_registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.retain_failed_ms = PL_RETAIN_MS_MAX + 1;
    pl_engine *e = NULL;
    const char *path = t_store_path();
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "retain_failed_ms"), "%s", pl_errmsg());
    cr_assert_null(e);
    o.retain_failed_ms = PL_RETAIN_MS_MAX; /* the longest: taken */
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    done(t_start(e, "fail", "{}", "bad-1"), PL_RUN_FAILED);
    worker_arg w = worker_with(e, 1, PL_RETAIN_MS_MAX + 1);
    worker_main(&w);
    cr_assert_eq(w.rc, PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "retain_failed_ms"), "%s", pl_errmsg());
    w = worker_with(e, PL_RETAIN_MS_MAX + 1, 0);
    worker_main(&w);
    cr_assert_eq(w.rc, PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "retain_ms"), "%s", pl_errmsg());
    cr_assert(kept(e, "bad-1", PL_RUN_FAILED), "nothing was pruned");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the crash matrix ------------------------------------------------------- */

#define CRASH_RUNS 120

/*
 * A child prunes every run in batches of 3 (so many transactions), and is
 * killed after @p delay_us; then every run is whole (it verifies and has
 * its head) or gone (with a tombstone), and a prune finishes the job,
 * leaving no step behind.
 */
static void prune_killed_after(const char *path, pl_registry *reg, int delay_us,
                               uint8_t heads[][PL_HASH_LEN], int *gone_out)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(ready[0]);
        pl_engine *e = NULL;
        if (pl_engine_open(&e, path, reg, NULL))
            _exit(2);
        if (write(ready[1], "r", 1) != 1)
            _exit(3);
        pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
        po.batch = 3;
        uint64_t n;
        int st = pl_engine_prune(e, &po, &n);
        _exit(st ? 4 : 0);
    }
    close(ready[1]);
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the child opened its engine");
    close(ready[0]);
    if (delay_us) {
        struct timespec ts = {0, (long)delay_us * 1000L};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    kill(pid, SIGKILL);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0),
              "the child failed: %d", ws);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    int gone = 0;
    for (int i = 0; i < CRASH_RUNS; i++) {
        char id[32];
        snprintf(id, sizeof id, "crash-%03d", i);
        pl_run_info *info = NULL;
        int st = pl_run_get(&info, e, id);
        if (st == PL_ENOTFOUND) {
            pl_tombstone t = PL_TOMBSTONE_INIT;
            cr_assert_eq(pl_run_tombstone(&t, e, id), PL_OK,
                         "%s is gone without its tombstone", id);
            cr_assert_eq(memcmp(t.head, heads[i], PL_HASH_LEN), 0);
            gone++;
            continue;
        }
        cr_assert_eq(st, PL_OK, "%s: %s", id, pl_errmsg());
        pl_run_info_free(info);
        cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s is half: %s", id,
                     pl_errmsg());
        uint8_t head[PL_HASH_LEN];
        cr_assert_eq(pl_run_head(head, e, id), PL_OK);
        cr_assert_eq(memcmp(head, heads[i], PL_HASH_LEN), 0);
    }
    uint64_t n;
    cr_assert_eq(pl_engine_prune(e, NULL, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq((int)n, CRASH_RUNS - gone);
    cr_assert_eq(step_records(e), 0, "a purge cut off was finished");
    pl_engine_close(e);
    *gone_out = gone;
}

Test(retention, a_kill_during_a_prune_leaves_runs_whole_or_gone, .timeout = 300)
{
    pl_registry *reg = t_registry();
    static const int delays_us[] = {0,     1000,   5000,  20000,
                                    60000, 150000, 400000};
    int partial = 0;
    for (size_t k = 0; k < sizeof delays_us / sizeof *delays_us; k++) {
        const char *path = t_store_path();
        static uint8_t heads[CRASH_RUNS][PL_HASH_LEN];
        pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
        for (int i = 0; i < CRASH_RUNS; i++) {
            char id[32];
            snprintf(id, sizeof id, "crash-%03d", i);
            done(t_start(e, "chain", "{\"n\": 4}", id), PL_RUN_COMPLETED);
            cr_assert_eq(pl_run_head(heads[i], e, id), PL_OK);
        }
        pl_engine_close(e);
        int gone;
        prune_killed_after(path, reg, delays_us[k], heads, &gone);
        partial += gone > 0 && gone < CRASH_RUNS;
        cr_log_info("killed after %d us: %d of %d runs gone", delays_us[k],
                    gone, CRASH_RUNS);
    }
    cr_log_info("%d of the kills fell inside the prune", partial);
    pl_registry_free(reg);
}

/* ---- time: a cancelled run, its timer and its inbox ----------------------- */

static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *got = NULL;
    int st = pl_ctx_wait_event(&got, ctx, "go", 3600 * 1000);
    cJSON_Delete(got);
    return st ? st : pl_steps_add_result(out, pl_json_empty());
}

Test(retention, a_cancelled_run_is_deleted_with_its_timer_and_inbox)
{
    pl_registry *reg = t_registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "waiter";
    d.fn = waiter;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    pl_outcome *o = t_start(e, "waiter", "{}", "w-1");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_delete(e, "w-1"), PL_ESTATE, "a waiting run stays");
    cJSON *ev = t_json("{}");
    cr_assert_eq(pl_run_signal(NULL, e, "w-1", "other", ev), PL_OK);
    cJSON_Delete(ev);
    cr_assert_eq(pl_run_cancel(e, "w-1", "no longer needed"), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "w-1"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_CANCELLED);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_delete(e, "w-1"), PL_OK, "%s", pl_errmsg());
    pl_tombstone t = PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, "w-1"), PL_OK);
    cr_assert_eq(t.status, PL_RUN_CANCELLED);
    /* nothing of it is left for the timers to find */
    int64_t next = -1;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(next, 0, "no timer left");
    cr_assert_eq(step_records(e), 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The records in LMDB database @p db of the store at @p path. */
static size_t lmdb_entries(const char *path, const char *db)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat ms;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 24), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_RDONLY | MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0, "%s", db);
    cr_assert_eq(mdb_stat(txn, dbi, &ms), 0);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return ms.ms_entries;
}

/*
 * A queued run cancelled before any worker took it ends with its lease
 * and its place in the queue still there; deleting it removes them too
 * (on LMDB: its lease, its flow record and its queue and key entries).
 */
Test(retention, a_cancelled_queued_run_is_deleted_with_its_queue_place)
{
    pl_registry *reg = t_registry();
    const char *path = t_store_path();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cJSON *p = t_json("{\"n\": 1}");
    pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "q-1";
    ro.priority = 2;
    ro.concurrency_key = "tenant";
    ro.concurrency_limit = 1;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    cr_assert_eq(pl_run_cancel(e, "q-1", "not wanted"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_run_delete(e, "q-1"), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "q-1"), PL_ENOTFOUND);
    pl_engine_close(e);
    if (!t_on_pg()) {
        cr_assert_eq(lmdb_entries(path, "leases"), 0, "its lease is gone");
        cr_assert_eq(lmdb_entries(path, "flow"), 0, "its queue place is gone");
    }
    pl_registry_free(reg);
}

/* ---- what the header promises beside ---------------------------------------- */

static int asker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *ans = NULL;
    int st = pl_ctx_suspend(&ans, ctx, a->payload);
    cJSON_Delete(ans);
    return st ? st : pl_steps_add_result(out, pl_json_empty());
}

static int stop_with(const pl_run_info *info, void *user)
{
    (void)info;
    return *(int *)user;
}

/*
 * runs.h and the guide: a suspended run is never deleted (PL_ESTATE); a
 * tombstoned id is refused by pl_run_import() (PL_EEXIST) and the outcome
 * a start gets for it has no result (the empty object) and error 0; a
 * read-only engine deletes and prunes nothing (PL_ESTATE) but may do a dry
 * run; a visitor's value that is no pl_status stops a prune as PL_EINVAL.
 */
Test(retention, suspended_imported_read_only_and_visitor_refusals)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "asker", asker, NULL), PL_OK);
    const char *path = t_store_path();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "asker", "{\"q\": 1}", "asks-1");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_delete(e, "asks-1"), PL_ESTATE, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "suspended"), "%s", pl_errmsg());

    /* an export of a run, imported again after the run was deleted */
    done(t_start(e, "chain", "{\"n\": 2}", "kept-2"), PL_RUN_COMPLETED);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cr_assert_eq(pl_run_export(e, "kept-2", f), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(pl_run_delete(e, "kept-2"), PL_OK, "%s", pl_errmsg());
    f = fmemopen(buf, len, "r");
    cr_assert_not_null(f);
    char *id = NULL;
    cr_assert_eq(pl_run_import(&id, e, f, NULL), PL_EEXIST, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "was deleted on"), "%s", pl_errmsg());
    cr_assert_null(id);
    fclose(f);
    free(buf);
    cr_assert_eq(start_as(&o, e, "chain", "kept-2", PL_IF_EXISTS_OUTCOME),
                 PL_OK, "%s", pl_errmsg());
    const cJSON *r = pl_outcome_result(o);
    cr_assert(cJSON_IsObject(r) && r->child == NULL, "the empty object");
    cr_assert_eq(o->error, 0);
    pl_outcome_free(o);

    /* a read-only engine (LMDB: one engine per store and process) */
    done(t_start(e, "chain", "{\"n\": 2}", "kept-3"), PL_RUN_COMPLETED);
    pl_engine_close(e);
    pl_engine_options ro_opts = PL_ENGINE_OPTIONS_INIT;
    ro_opts.read_only = true;
    pl_engine *ro = NULL;
    cr_assert_eq(pl_engine_open(&ro, path, reg, &ro_opts), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_run_delete(ro, "kept-3"), PL_ESTATE, "%s", pl_errmsg());
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    uint64_t n = 99;
    cr_assert_eq(pl_engine_prune(ro, &po, &n), PL_ESTATE, "%s", pl_errmsg());
    po.dry_run = true;
    cr_assert_eq(pl_engine_prune(ro, &po, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(n, 1, "kept-3 would go");
    pl_engine_close(ro);
    e = t_engine(path, reg, PL_DURABILITY_SYNC);

    /* a visitor's value that is no status */
    int stop = 12345;
    po.dry_run = false;
    po.before = stop_with;
    po.user = &stop;
    cr_assert_eq(pl_engine_prune(e, &po, &n), PL_EINVAL);
    cr_assert_eq(n, 0);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "kept-3"), PL_OK, "not deleted");
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* design.md §7.9: the store deletes a run "only if its state record is
 * still the bytes read: a run that moved on meanwhile is left as it is".
 * A delete whose bytes read are not the state's now (one byte of them
 * changed, as by a write since) is PL_EBUSY and leaves the run whole, its
 * id its own; with the bytes as they are, the run goes. */
Test(retention, a_run_whose_state_moved_on_is_not_deleted)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    done(t_start(e, "chain", "{\"n\": 2}", "moved"), PL_RUN_COMPLETED);
    uint64_t num;
    pl__buf state = {0}, tomb = {0};
    cr_assert_eq(pl__store_run_find(e->store, "moved", &num, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl__store_state_get(e->store, num, &state), PL_OK, "%s",
                 pl_errmsg());
    pl__tomb t = {.status = PL_RUN_COMPLETED,
                  .created_us = 1,
                  .deleted_us = 2,
                  .expires_us = INT64_MAX / 2};
    snprintf(t.policy, sizeof t.policy, "chain");
    cr_assert_eq(pl__tomb_encode(&tomb, "moved", &t), PL_OK);
    uint8_t *was = malloc(state.len);
    cr_assert_not_null(was);
    memcpy(was, state.data, state.len);
    was[state.len / 2] ^= 1;
    pl__delete d = {"moved", num, was, state.len, &tomb, -1};
    cr_assert_eq(pl__store_delete(e->store, &d, 1), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(d.rc, PL_EBUSY);
    cr_expect_eq(pl_run_verify(e, "moved"), PL_OK, "whole: %s", pl_errmsg());
    pl_tombstone ts = PL_TOMBSTONE_INIT;
    cr_expect_eq(pl_run_tombstone(&ts, e, "moved"), PL_ENOTFOUND);

    pl__delete d2 = {"moved", num, state.data, state.len, &tomb, -1};
    cr_assert_eq(pl__store_delete(e->store, &d2, 1), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(d2.rc, PL_OK);
    pl_run_info *info = NULL;
    cr_expect_eq(pl_run_get(&info, e, "moved"), PL_ENOTFOUND);
    free(was);
    pl__buf_free(&state);
    pl__buf_free(&tomb);
    pl_engine_close(e);
    pl_registry_free(reg);
}
