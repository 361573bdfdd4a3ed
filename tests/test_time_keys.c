/*
 * test_time_keys.c -- a waiting run with a concurrency key, signalled or
 * cancelled while another run of its key holds the key's only place: the
 * delivery is durable at once, and the run stays waiting with it until
 * the key has room; then a worker or pl_engine_wake() takes it, as a
 * timer's wake does.  Never two runs of the key executing at once.
 *
 * A run queued with a key that a delivery made due is woken only as the
 * first of its key's queue.
 *
 * Runs on LMDB and, as pg_test_time_keys, on PostgreSQL.  No test asserts
 * a duration: every wait is for a condition, with a generous bound.
 */
#include "support_flip.h"
#include "support_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_BOUND_MS 60000 /* the longest any condition is waited for */

/* Runs of key "k" executing their policies now, and the most at once. */
static atomic_int g_live, g_most;
/* "holder" holds its place until g_release. */
static atomic_int g_holding, g_release;
/* The payloads' "n" of the keyed waiters that got their event, in the
 * order they went on. */
#define K_ORDER_MAX 64
static atomic_int g_order[K_ORDER_MAX], g_norder;

static void k_enter(void)
{
    int n = atomic_fetch_add(&g_live, 1) + 1;
    for (int m = atomic_load(&g_most); n > m;)
        if (atomic_compare_exchange_weak(&g_most, &m, n))
            break;
}

static void k_leave(void) { atomic_fetch_sub(&g_live, 1); }

/* "holder": executes, holding its key's place, until g_release. */
static int holder(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)a;
    (void)u;
    k_enter();
    atomic_store(&g_holding, 1);
    for (int ms = 0; !atomic_load(&g_release) && ms < K_BOUND_MS; ms += 2)
        nap_ms(2);
    k_leave();
    return pl_steps_add_resultf(out, "{}");
}

/* "keyed-waiter": waits for "go"; past its wait (the event, or a
 * cancellation and its compensating call "undo") it executes, counted. */
static int keyed_waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    if (st && st != PL_ECANCELLED)
        return st; /* parked (PL_ESUSPENDED), or stopped */
    /* a run without a key says so in its event: not counted */
    bool keyed = !cJSON_IsTrue(cJSON_GetObjectItem(p, "free"));
    if (keyed)
        k_enter();
    const cJSON *n = cJSON_GetObjectItem(p, "n");
    int at = atomic_fetch_add(&g_norder, 1);
    if (!st && cJSON_IsNumber(n) && at < K_ORDER_MAX)
        atomic_store(&g_order[at], n->valueint);
    int rs = st ? pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty())
                : pl_steps_add_resultf(out, "{s:O}", "got", p);
    if (keyed)
        k_leave();
    cJSON_Delete(p);
    return rs ? rs : st;
}

/* "hand-waiter": waits for "go", then executes, counted, holding its
 * key's place until g_hand_release (g_hand once it holds it). */
static atomic_int g_hand, g_hand_release;

static int hand_waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    if (st)
        return st;
    k_enter();
    atomic_store(&g_hand, 1);
    for (int ms = 0; !atomic_load(&g_hand_release) && ms < K_BOUND_MS; ms += 2)
        nap_ms(2);
    k_leave();
    return pl_steps_add_resultf(out, "{}");
}

static pl_registry *k_registry(void)
{
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "hand-waiter", hand_waiter, NULL),
                 PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "holder", holder, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "keyed-waiter", keyed_waiter, NULL),
                 PL_OK);
    return reg;
}

static void k_submit(pl_engine *e, const char *policy, const char *id)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = "k";
    ro.concurrency_limit = 1;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s: %s", id,
                 pl_errmsg());
}

/* Run @p id of key "k" parked waiting for "go" (on an engine that parks
 * every wait). */
static void k_park_as(pl_engine *e, const char *policy, const char *id)
{
    k_submit(e, policy, id);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
}

static void k_park(pl_engine *e, const char *id)
{
    k_park_as(e, "keyed-waiter", id);
}

/* Run "a" signalled "go" with {"n": @p n}: the delivery accepted, and
 * "a" not continued in the caller's thread (@p why: what holds it). */
static void k_signal_held(pl_engine *e, int n, const char *why)
{
    cJSON *p = cJSON_CreateObject();
    cr_assert(p && cJSON_AddNumberToObject(p, "n", n));
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, "a", "go", p), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    cr_expect_null(o, "run a was continued %s (%s)", why,
                   o ? pl_run_status_name(o->status) : "");
    pl_outcome_free(o);
}

static void k_await_holding(void)
{
    for (int ms = 0; !atomic_load(&g_holding); ms += 2) {
        cr_assert_lt(ms, K_BOUND_MS, "the holder never started");
        nap_ms(2);
    }
}

static void k_await_status(pl_engine *e, const char *id, pl_run_status want)
{
    for (int ms = 0; status_of(e, id) != want; ms += 5) {
        cr_assert_lt(ms, K_BOUND_MS, "run %s is %s, never %s", id,
                     pl_run_status_name(status_of(e, id)),
                     pl_run_status_name(want));
        nap_ms(5);
    }
}

/* The key's place held by "holder" (run "b") in a worker while "a"
 * waits. */
typedef struct k_worker {
    pthread_t th;
    pl_engine *e;
    int rc;
} k_worker;

static void *k_worker_main(void *arg)
{
    k_worker *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = 2; /* a thread free for "a", were the key not full */
    o.poll_ms = 5;
    w->rc = pl_worker_run(w->e, &o);
    return NULL;
}

/* The worker stopped, and never two runs of key "k" executed at once. */
static void k_worker_end(k_worker *w)
{
    pl_worker_stop(w->e);
    cr_assert_eq(pthread_join(w->th, NULL), 0);
    cr_expect_eq(w->rc, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(atomic_load(&g_most), 1,
                 "%d runs of key k (limit 1) executed at once",
                 atomic_load(&g_most));
}

TestSuite(time_keys, .fini = t_cleanup, .timeout = 120);

/*
 * "a" is signalled while "b" holds key "k" (limit 1): the signal is
 * accepted and the event durable, but "a" is not continued in the
 * caller's thread (out stays NULL) and no wake takes it while the key is
 * full; once "b" has ended, the worker takes "a", which consumes the event.
 */
Test(time_keys, a_signal_waits_for_the_key)
{
    pl_registry *reg = k_registry();
    pl_engine *e = engine_parking(reg);
    k_park(e, "a");
    k_submit(e, "holder", "b");
    k_worker w = {.e = e};
    cr_assert_eq(pthread_create(&w.th, NULL, k_worker_main, &w), 0);
    k_await_holding();
    k_signal_held(e, 7, "while its key was full");
    cr_expect_eq(status_of(e, "a"), PL_RUN_WAITING, "a is %s",
                 pl_run_status_name(status_of(e, "a")));
    /* a second signal meanwhile is delivered too, and waits as well */
    pl_outcome *o = NULL;
    cJSON *p = t_json("{\"n\": 8}");
    cr_assert_eq(pl_run_signal(&o, e, "a", "later", p), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(p);
    cr_expect_null(o);
    pl_outcome_free(o);
    cr_expect_eq(status_of(e, "a"), PL_RUN_WAITING);
    atomic_store(&g_release, 1);
    k_await_status(e, "b", PL_RUN_COMPLETED);
    k_await_status(e, "a", PL_RUN_COMPLETED);
    k_worker_end(&w);
    /* the event delivered while the key was full is the one consumed */
    cr_assert_eq(pl_run_continue(&o, e, "a", NULL), PL_OK, "%s", pl_errmsg());
    cJSON *want = t_json("{\"got\": {\"n\": 7}}");
    cr_expect(cJSON_Compare(result_of(o), want, true), "a's result: %s",
              t_text(result_of(o)));
    cJSON_Delete(want);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A run continued in a thread of its own: whether it completed. */
typedef struct k_cont {
    pthread_t th;
    pl_engine *e;
    const char *id;
    bool ok;
} k_cont;

static void *k_cont_main(void *arg)
{
    k_cont *c = arg;
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, c->e, c->id, NULL);
    c->ok = !st && o && o->status == PL_RUN_COMPLETED;
    pl_outcome_free(o);
    return NULL;
}

static void k_cont_start(k_cont *c, pl_engine *e, const char *id)
{
    *c = (k_cont){.e = e, .id = id};
    cr_assert_eq(pthread_create(&c->th, NULL, k_cont_main, c), 0);
}

static void k_cont_end(k_cont *c)
{
    cr_assert_eq(pthread_join(c->th, NULL), 0);
    cr_expect(c->ok, "run %s did not complete", c->id);
}

/* "holder" (run "b") holding key "k"'s place in a thread of @p c. */
static void k_hold(k_cont *c, pl_engine *e)
{
    k_submit(e, "holder", "b");
    k_cont_start(c, e, "b");
    k_await_holding();
}

/*
 * "a" is cancelled while "b" holds key "k": the cancellation is durable,
 * and "a", whose policy sees it at its wait and makes a compensating call,
 * waits for the key as a signalled run does; pl_engine_wake() takes
 * nothing while the key is full, and ends "a" cancelled once "b" has
 * ended.
 */
Test(time_keys, a_cancellation_waits_for_the_key)
{
    pl_registry *reg = k_registry();
    pl_engine *e = engine_parking(reg);
    k_park(e, "a");
    k_cont b;
    k_hold(&b, e);
    cr_assert_eq(pl_run_cancel(e, "a", "stop"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "a"), PL_RUN_WAITING, "a is %s",
                 pl_run_status_name(status_of(e, "a")));
    int64_t next = 0;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "a"), PL_RUN_WAITING,
                 "a woken while its key was full: %s",
                 pl_run_status_name(status_of(e, "a")));
    cr_expect_gt(next, 0, "a's wake is not due again");
    atomic_store(&g_release, 1);
    k_cont_end(&b);
    /* b's place is free: the wake takes a (its lease may take a moment to
     * be seen as free on a busy host: waited for, bounded) */
    for (int ms = 0; status_of(e, "a") == PL_RUN_WAITING; ms += 5) {
        cr_assert_lt(ms, K_BOUND_MS, "a was never woken");
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
        if (status_of(e, "a") == PL_RUN_WAITING)
            nap_ms(5);
    }
    cr_expect_eq(status_of(e, "a"), PL_RUN_CANCELLED, "a is %s",
                 pl_run_status_name(status_of(e, "a")));
    cr_expect_eq(atomic_load(&g_undo), 1, "undo ran %d times",
                 atomic_load(&g_undo));
    cr_expect_eq(atomic_load(&g_most), 1,
                 "%d runs of key k (limit 1) executed at once",
                 atomic_load(&g_most));
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Run "free", without a key, parked waiting for "go"; then "holder" (run
 * "b") holding key "k"'s place in a thread of @p b. */
static void k_free_and_hold(k_cont *b, pl_engine *e)
{
    pl_outcome *o = t_start(e, "keyed-waiter", "{}", "free");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    k_hold(b, e);
}

/* Without a key, a signalled waiting run goes on in the caller's thread as
 * before, while another run executes. */
Test(time_keys, a_run_without_a_key_goes_on_at_once)
{
    pl_registry *reg = k_registry();
    pl_engine *e = engine_parking(reg);
    k_cont b;
    k_free_and_hold(&b, e);
    cJSON *p = t_json("{\"n\": 1}");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, "free", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(p);
    cr_assert_not_null(o, "the run without a key was not continued");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    atomic_store(&g_release, 1);
    k_cont_end(&b);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * "q1", queued with key "k" behind "q0" and signalled before it ever ran
 * (the signal makes its timer due), is not woken ahead of "q0":
 * pl_engine_wake() leaves it while "q0" is first in the key's queue, and
 * takes it once "q0" has run.  Before, a wake gave it the key's place as
 * soon as the key had room, ahead of the run queued first.
 */
Test(time_keys, a_queued_run_is_woken_only_as_its_keys_first)
{
    pl_registry *reg = k_registry();
    pl_engine *e = engine_parking(reg);
    atomic_store(&g_release, 1); /* "holder" returns at once */
    k_submit(e, "holder", "q0");
    k_submit(e, "keyed-waiter", "q1");
    cJSON *p = t_json("{\"n\": 1}");
    cr_assert_eq(pl_run_signal(NULL, e, "q1", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(p);
    int64_t next = 0;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "q1"), PL_RUN_SUBMITTED,
                 "q1 was woken ahead of q0: %s",
                 pl_run_status_name(status_of(e, "q1")));
    cr_expect_eq(status_of(e, "q0"), PL_RUN_SUBMITTED);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "q0", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "q1"), PL_RUN_COMPLETED, "q1 is %s",
                 pl_run_status_name(status_of(e, "q1")));
    cr_expect_eq(atomic_load(&g_most), 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * Twenty runs of key "k" (limit 1) parked and signalled while "holder"
 * holds the key's place, then a run without a key signalled after them:
 * a wake passes the twenty due runs of the full key (more than a take's
 * batch) and wakes the run without a key behind them, and none of the
 * twenty.  Once the key frees, each wake gives its place to the next of
 * the twenty in the order their timers fell due, the key's place freed
 * between two wakes, never two at once, none left.
 */
#define K_FULL_DUE 20
Test(time_keys, a_wake_passes_a_full_keys_due_runs)
{
    pl_registry *reg = k_registry();
    pl_engine *e = engine_parking(reg);
    char id[K_FULL_DUE][16];
    for (int i = 0; i < K_FULL_DUE; i++) {
        snprintf(id[i], sizeof id[i], "w%02d", i);
        k_park(e, id[i]);
    }
    k_cont b;
    k_free_and_hold(&b, e);
    char pay[48];
    for (int i = 0; i <= K_FULL_DUE; i++) {
        snprintf(pay, sizeof pay, "{\"n\": %d, \"free\": %s}", i,
                 i < K_FULL_DUE ? "false" : "true");
        cJSON *p = t_json(pay);
        cr_assert_eq(pl_run_signal(NULL, e, i < K_FULL_DUE ? id[i] : "free",
                                   "go", p),
                     PL_OK, "%s", pl_errmsg());
        cJSON_Delete(p);
    }
    int64_t next = 0;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "free"), PL_RUN_COMPLETED,
                 "the run without a key behind %d due runs of a full key "
                 "was not woken: %s",
                 K_FULL_DUE, pl_run_status_name(status_of(e, "free")));
    for (int i = 0; i < K_FULL_DUE; i++)
        cr_expect_eq(status_of(e, id[i]), PL_RUN_WAITING,
                     "%s woken while its key was full: %s", id[i],
                     pl_run_status_name(status_of(e, id[i])));
    cr_expect_gt(next, 0, "the full key's runs are not due again");
    atomic_store(&g_release, 1);
    k_cont_end(&b);
    for (int i = 0; i < K_FULL_DUE; i++)
        for (int ms = 0; status_of(e, id[i]) == PL_RUN_WAITING; ms += 5) {
            cr_assert_lt(ms, K_BOUND_MS, "%s was never woken", id[i]);
            cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
            if (status_of(e, id[i]) == PL_RUN_WAITING)
                nap_ms(5);
        }
    for (int i = 0; i < K_FULL_DUE; i++)
        cr_expect_eq(status_of(e, id[i]), PL_RUN_COMPLETED, "%s is %s", id[i],
                     pl_run_status_name(status_of(e, id[i])));
    cr_assert_eq(atomic_load(&g_norder), K_FULL_DUE + 1);
    cr_expect_eq(atomic_load(&g_order[0]), K_FULL_DUE,
                 "the run without a key went on after %d",
                 atomic_load(&g_order[0]));
    for (int i = 0; i < K_FULL_DUE; i++)
        cr_expect_eq(atomic_load(&g_order[i + 1]), i,
                     "the key's place %d went to w%02d", i,
                     atomic_load(&g_order[i + 1]));
    cr_expect_eq(atomic_load(&g_most), 1,
                 "%d runs of key k (limit 1) executed at once",
                 atomic_load(&g_most));
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Run @p id's concurrency key damaged where its store keeps it parked (its
 * record's checksum no longer its own), the engine closed: LMDB, a bit of
 * its flow record; PostgreSQL, its parked row's limit raised past the
 * triggers that sum it. */
static void k_damage_key(const char *path, const char *id)
{
#if PL_WITH_POSTGRESQL
    if (t_on_pg()) {
        const char *n = t_pg_schema(path);
        char sql[1024];
        snprintf(sql, sizeof sql,
                 "SET session_replication_role = replica; UPDATE \"%s\".parked "
                 "SET flimit = flimit + 8 WHERE run = (SELECT num FROM "
                 "\"%s\".runs WHERE id = convert_to('%s', 'UTF8')); SELECT "
                 "count(*) FROM \"%s\".parked p WHERE p.ksum IS DISTINCT FROM "
                 "\"%s\".pl_key_sum(p.fkey, p.flimit)",
                 n, n, id, n, n);
        cr_assert_eq(t_pg_number(sql), 1, "run %s's key was not damaged", id);
        return;
    }
#endif
    uint8_t key[9] = {'r'};
    cr_assert_geq(t_flip_lmdb_get(path, "runs", (const uint8_t *)id, strlen(id),
                                  key + 1, 8),
                  8);
    size_t bits = t_flip_lmdb_get(path, "flow", key, sizeof key, NULL, 0) * 8;
    t_flip_lmdb(path, "flow", key, sizeof key, bits / 2, false);
}

/*
 * A run parked with key "k" whose key's record is damaged: its key and
 * limit are no longer known, so it must never execute, nor wait unseen.
 * A delivery to it is accepted and durable (it does not continue it); a
 * continuation by hand is refused (PL_ECORRUPT) and leaves it waiting; the
 * wake that meets it fails it (PL_ECORRUPT, with a reason naming the
 * key's record and the run), its wait never passed; the other run of its
 * key goes on.
 */
Test(time_keys, a_parked_run_whose_key_is_damaged_fails_when_met)
{
    pl_registry *reg = k_registry();
    char path[4200];
    snprintf(path, sizeof path, "%s", t_store_path());
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    k_park(e, "a");
    k_park(e, "c");
    pl_engine_close(e);
    k_damage_key(path, "a");
    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    k_signal_held(e, 1, "past its damaged key");
    /* continued by hand, it is refused as clearly, and left waiting */
    pl_outcome *o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "a", NULL), PL_ECORRUPT,
                 "a continued by hand past its damaged key: %s", pl_errmsg());
    pl_outcome_free(o);
    o = NULL;
    cr_expect_eq(status_of(e, "a"), PL_RUN_WAITING);
    int last = PL_OK;
    for (int i = 0; i < 1000 && status_of(e, "a") == PL_RUN_WAITING; i++) {
        int64_t next = 0;
        last = pl_engine_wake(e, &next);
        cr_assert(last == PL_OK || last == PL_ECORRUPT, "%d: %s", last,
                  pl_errmsg());
        if (status_of(e, "a") == PL_RUN_WAITING)
            nap_ms(5);
    }
    pl_run_info *info = info_of(e, "a");
    cr_expect_eq(info->status, PL_RUN_FAILED, "a is %s",
                 pl_run_status_name(info->status));
    cr_expect_eq(info->error, PL_ECORRUPT);
    cr_expect(info->reason && strstr(info->reason, "concurrency key") &&
                  strstr(info->reason, "'a'"),
              "a's reason: %s", info->reason ? info->reason : "(none)");
    pl_run_info_free(info);
    /* the other run of the key goes on, at once */
    cJSON *p = t_json("{\"n\": 2}");
    cr_assert_eq(pl_run_signal(&o, e, "c", "go", p), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    cr_assert_not_null(o, "run c was not continued");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "c is %s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    cr_expect_eq(status_of(e, "a"), PL_RUN_FAILED);
    /* only c got past its wait; never two of the key at once */
    cr_expect_eq(atomic_load(&g_norder), 1, "%d runs got past their wait",
                 atomic_load(&g_norder));
    cr_expect_eq(atomic_load(&g_most), 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A waiting run of key "k" (limit 1), its event delivered while "b" held
 * the key's place, continued by hand once "b" has ended: an operator's
 * override, it executes at once, and counts against its key while it runs
 * (docs/guide.md, Flow control), so a worker takes no other run of the
 * key ("c", queued) before it has ended.  On PostgreSQL the lease that
 * pl_run_continue() took lacked the key its parked row held, and the
 * worker took "c" beside it.
 */
Test(time_keys, a_waiting_run_continued_by_hand_counts_against_its_key)
{
    pl_registry *reg = k_registry();
    pl_engine *e = engine_parking(reg);
    k_park_as(e, "hand-waiter", "a");
    k_cont b, a;
    k_hold(&b, e);
    k_signal_held(e, 1, "while its key was full");
    atomic_store(&g_release, 1);
    k_cont_end(&b);
    k_submit(e, "holder", "c");
    k_cont_start(&a, e, "a");
    for (int ms = 0; !atomic_load(&g_hand); ms += 2) {
        cr_assert_lt(ms, K_BOUND_MS, "a never went past its wait");
        nap_ms(2);
    }
    k_worker w = {.e = e};
    cr_assert_eq(pthread_create(&w.th, NULL, k_worker_main, &w), 0);
    /* the worker looks at the queue every 5 ms: a hundred looks and more
     * while a holds the key's place (fewer on a loaded host: never a
     * false failure) */
    for (int i = 0; i < 100; i++) {
        cr_expect_eq(status_of(e, "c"), PL_RUN_SUBMITTED,
                     "c was taken while a, continued by hand, held k: %s",
                     pl_run_status_name(status_of(e, "c")));
        nap_ms(5);
    }
    atomic_store(&g_hand_release, 1);
    k_cont_end(&a);
    k_await_status(e, "c", PL_RUN_COMPLETED);
    k_worker_end(&w);
    pl_engine_close(e);
    pl_registry_free(reg);
}
