/*
 * test_pg_wake.c -- a timer's wake of a run with a concurrency key on the
 * PostgreSQL store (pg_wake.c's L_TAKE_DUES), against
 * a real server that tests/pg_run.sh starts for this binary (pl_wake(),
 * pg_flow.c): a wake takes a key's parked runs in their due order (ties:
 * the run's number) and only while the key has room, and a queued run of
 * a key that a delivery made due only as its key's first, with room; with
 * two worker processes waking and taking at once, never two runs of a key
 * limited to one execute at once, and each key's runs start in their
 * order; and a wake never takes over a lease another took meanwhile.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include "support.h"

#include "internal.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define W_BOUND_MS 60000 /* the longest any condition is waited for */

TestSuite(pg_wake, .fini = t_cleanup, .timeout = 240);

static void w_nap(long ms)
{
    struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
    nanosleep(&ts, NULL);
}

static long long w_now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* ---- what the runs did, shared by the worker processes ------------------ */

#define W_RUNS 12 /* a round's runs */

typedef struct w_shared {
    atomic_int live, most; /* of the round's key, executing; the most */
    atomic_int started;
    int order[W_RUNS * 4]; /* the runs' numbers as they started */
} w_shared;

static w_shared *g_w;

/* "one": {"i": I[, "until": ms][, "wait": true]}: sleeps until "until"
 * (parked meanwhile), or waits for the event "go"; then, its key's place
 * held, notes its start and executes a few ms. */
static int one(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    const cJSON *until = cJSON_GetObjectItemCaseSensitive(a->payload, "until");
    const cJSON *wait = cJSON_GetObjectItemCaseSensitive(a->payload, "wait");
    int st = PL_OK;
    if (cJSON_IsNumber(until))
        st = pl_ctx_sleep_until(ctx, (int64_t)until->valuedouble);
    cJSON *ev = NULL;
    if (!st && cJSON_IsTrue(wait))
        st = pl_ctx_wait_event(&ev, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(ev);
    if (st)
        return st; /* parked */
    if (g_w) {
        int n = atomic_fetch_add(&g_w->live, 1) + 1;
        for (int m = atomic_load(&g_w->most); n > m;)
            if (atomic_compare_exchange_weak(&g_w->most, &m, n))
                break;
        int at = atomic_fetch_add(&g_w->started, 1);
        if (at < W_RUNS * 4)
            g_w->order[at] = i->valueint;
        w_nap(3);
        atomic_fetch_sub(&g_w->live, 1);
    }
    return pl_steps_add_resultf(out, "{}");
}

static pl_registry *w_registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "one", one, NULL), PL_OK);
    return reg;
}

static pl_engine *w_engine(const char *uri, const pl_registry *reg)
{
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK); /* waits park */
    return e;
}

/* Execute queued run @p id here: it parks. */
static void w_park(pl_engine *e, const char *id)
{
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s did not park: %s", id,
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
}

/* Run @p id of "one" with payload @p json, key @p key (limit 1; NULL:
 * none): queued,
 * and with @p start executed here, where it parks. */
static void w_run(pl_engine *e, const char *id, const char *json,
                  const char *key, bool start)
{
    pl_action a = PL_ACTION_INIT;
    a.policy = "one";
    a.payload = t_json(json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? 1 : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cJSON_Delete((cJSON *)a.payload);
    if (start)
        w_park(e, id);
}

static void w_signal(pl_engine *e, const char *id)
{
    cJSON *p = t_json("{}");
    cr_assert_eq(pl_run_signal(NULL, e, id, "go", p), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cJSON_Delete(p);
}

/* ---- takes and wakes, one at a time --------------------------------------- */

/* A claim that writes the state as it was. */
static int as_is(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    (void)drop;
    (void)user;
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

/* A wake of one due timer on @p e: the run taken, or "" for none; its
 * lease in @p l. */
static void wake_one(pl_engine *e, pl__lease *l, char *id, size_t n)
{
    bool taken = false;
    int64_t next = 0;
    int st = pl__store_take_due(e->store, "w1", 60000000, as_is, NULL, l,
                                &taken, &next);
    cr_assert(st == PL_OK || st == PL_ENOTFOUND, "%s", pl_errmsg());
    snprintf(id, n, "%s", taken ? l->id : "");
}

/* A take from the queue on @p e: the run taken, or "" for none; its lease
 * in @p l. */
static void take_one(pl_engine *e, pl__lease *l, char *id, size_t n)
{
    bool taken = false;
    int st = pl__store_take(e->store, "w1", 60000000, as_is, NULL, l, &taken);
    cr_assert(st == PL_OK || st == PL_ENOTFOUND, "%s", pl_errmsg());
    snprintf(id, n, "%s", taken ? l->id : "");
}

/* The live leases of concurrency key @p key in schema @p schema. */
static long live_of_key(const char *schema, const char *key)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s.leases WHERE fkey = '%s' AND owner <> "
             "'' AND expires > (extract(epoch from clock_timestamp()) * "
             "1000000)::bigint",
             schema, key);
    return (long)t_pg_number(sql);
}

/*
 * A run queued with a key that a delivery made due (a signal sent before
 * its first execution; as a run whose worker died) is woken only as the
 * first of its key's queue and while the key has room: not while q-000
 * is ahead of it, nor while q-000 executes; once q-000's place frees, it
 * is.  A wake that took it at once gave it the key's place ahead of q-000
 * (and then its second place, beside q-000).
 */
Test(pg_wake, a_queued_keyed_run_is_woken_as_its_keys_first)
{
    char *uri = t_pg_store_uri("t_wq");
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(uri, reg);
    w_run(e, "q-000", "{\"i\": 0}", "k", false);
    w_run(e, "q-001", "{\"i\": 1, \"wait\": true}", "k", false);
    w_signal(e, "q-001");
    int64_t due = 0;
    uint64_t num = 0;
    cr_assert_eq(pl__store_run_find(e->store, "q-001", &num, NULL), PL_OK);
    cr_assert_eq(pl__store_timer_get(e->store, num, &due), PL_OK,
                 "the signal made no timer due: %s", pl_errmsg());
    char id[PL_MAX_RUN_ID + 1];
    pl__lease l0, l1;
    wake_one(e, &l1, id, sizeof id);
    cr_expect_str_eq(id, "", "a wake took %s ahead of q-000", id);
    take_one(e, &l0, id, sizeof id);
    cr_assert_str_eq(id, "q-000");
    wake_one(e, &l1, id, sizeof id);
    cr_expect_str_eq(id, "", "a wake took %s while q-000 held the key", id);
    cr_expect_eq(live_of_key("t_wq", "k"), 1);
    take_one(e, &l1, id, sizeof id);
    cr_expect_str_eq(id, "", "the key's one place was given twice");
    cr_assert_eq(pl__store_lease_release(e->store, l0.run, l0.gen), PL_OK);
    wake_one(e, &l1, id, sizeof id);
    cr_expect_str_eq(id, "q-001", "the key's first run, with room: %s", id);
    take_one(e, &l0, id, sizeof id);
    cr_expect_str_eq(id, "", "%s taken beside q-001", id);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* A wake on another thread: whether it took a run, and its status. */
typedef struct wake_arg {
    pl_engine *e;
    pl__lease l;
    bool taken;
    int st;
} wake_arg;

static void *wake_thread(void *p)
{
    wake_arg *w = p;
    int64_t next = 0;
    w->st = pl__store_take_due(w->e->store, "w1", 60000000, as_is, NULL, &w->l,
                               &w->taken, &next);
    return NULL;
}

/*
 * A queued run without a key that a delivery made due is taken from the
 * queue (here by hand: another worker's take, its transaction open) while
 * a wake of its timer goes: the wake waits for that take and then leaves
 * its live lease alone and its timer due.  Before, the wake's lease
 * statement took over whatever lease it met (a generation more, its own
 * owner): the run executed twice, once under each.
 */
Test(pg_wake, a_wake_leaves_a_lease_taken_meanwhile_to_its_taker)
{
    char *uri = t_pg_store_uri("t_wl");
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(uri, reg);
    w_run(e, "l-000", "{\"i\": 0, \"wait\": true}", NULL, false);
    w_signal(e, "l-000");
    uint64_t num = 0;
    int64_t due = 0;
    cr_assert_eq(pl__store_run_find(e->store, "l-000", &num, NULL), PL_OK);
    cr_assert_eq(pl__store_timer_get(e->store, num, &due), PL_OK,
                 "the signal made no timer due: %s", pl_errmsg());
    PGconn *c = t_pg_admin();
    char sql[300];
    snprintf(sql, sizeof sql,
             "BEGIN; UPDATE t_wl.leases SET gen = gen + 1, owner = 'other', "
             "expires = (extract(epoch from clock_timestamp()) * 1000000)"
             "::bigint + 60000000 WHERE run = %llu",
             (unsigned long long)num);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    cr_assert_str_eq(PQcmdTuples(r), "1");
    PQclear(r);
    wake_arg w = {.e = e};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, wake_thread, &w), 0);
    w_nap(300); /* the wake most likely waits for the take by now; if not,
                 * it finds the lease live: the same outcome */
    r = PQexec(c, "COMMIT");
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_expect(w.st == PL_OK || w.st == PL_ENOTFOUND, "the wake: %s",
              pl_errmsg());
    cr_expect(!w.taken, "a wake took over %s's live lease", w.l.id);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM t_wl.leases WHERE run = %llu AND owner "
             "= 'other' AND gen = 1",
             (unsigned long long)num);
    cr_expect_eq(t_pg_number(sql), 1, "the taker's lease was changed");
    cr_expect_eq(pl__store_timer_get(e->store, num, &due), PL_OK,
                 "the run's timer went with a wake that took nothing");
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * Runs @p ids of key "k" (limit 1), submitted in that order, sleeping
 * until @p due_ms after now, parked in the order @p parked; once both are
 * due, wakes take @p want[0], then nothing (the key is full), then, its
 * place freed, @p want[1].
 */
static void wakes_of_two_parked(const char *schema, const char *const ids[2],
                                const long due_ms[2], const int parked[2],
                                const char *const want[2])
{
    char *uri = t_pg_store_uri(schema);
    pl_registry *reg = w_registry();
    pl_engine *e = w_engine(uri, reg);
    long long t0 = w_now_ms(), last = 0;
    for (int i = 0; i < 2; i++) {
        char json[96];
        snprintf(json, sizeof json, "{\"i\": %d, \"until\": %lld}", i,
                 t0 + due_ms[i]);
        w_run(e, ids[i], json, "k", false);
        last = due_ms[i] > last ? due_ms[i] : last;
    }
    for (int i = 0; i < 2; i++)
        w_park(e, ids[parked[i]]);
    while (w_now_ms() < t0 + last + 100)
        w_nap(20);
    char id[PL_MAX_RUN_ID + 1];
    pl__lease l0, l1;
    wake_one(e, &l0, id, sizeof id);
    cr_expect_str_eq(id, want[0], "a wake took %s first", id);
    wake_one(e, &l1, id, sizeof id);
    cr_expect_str_eq(id, "", "a wake took %s while the key was full", id);
    cr_assert_eq(pl__store_lease_release(e->store, l0.run, l0.gen), PL_OK);
    wake_one(e, &l1, id, sizeof id);
    cr_expect_str_eq(id, want[1]);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * Two runs of a key limited to one, parked on timers due in the other
 * order than they parked in (p-late parked first, due last): the key's
 * place goes to p-early first, whose timer is due first.
 */
Test(pg_wake, a_wake_takes_a_keys_parked_runs_in_due_order)
{
    static const char *const ids[2] = {"p-late", "p-early"};
    static const long due[2] = {1200, 600};
    static const int parked[2] = {0, 1};
    static const char *const want[2] = {"p-early", "p-late"};
    wakes_of_two_parked("t_wdue", ids, due, parked, want);
}

/*
 * Two runs of a key limited to one, parked on timers due at the same time
 * (both sleep until the same ms), p-b first: the key's place goes to p-a,
 * numbered first, as the take's order says.  With the timers read by an
 * index on due alone, ties came in the rows' physical order, and p-b took
 * the key's place.
 */
Test(pg_wake, a_wake_breaks_a_tie_of_a_keys_timers_by_run)
{
    static const char *const ids[2] = {"p-a", "p-b"};
    static const long due[2] = {600, 600};
    static const int parked[2] = {1, 0};
    static const char *const want[2] = {"p-a", "p-b"};
    wakes_of_two_parked("t_wtie", ids, due, parked, want);
}

/* ---- two worker processes ------------------------------------------------- */

#define W_ROUNDS 4
#define W_PARKED 4 /* a round's runs parked on timers, due in this order */

static void w_worker(const char *uri, const pl_registry *reg)
{
    pl_engine *e = NULL;
    if (pl_engine_open(&e, uri, reg, NULL) != PL_OK ||
        pl_engine_set_wait_in_place(e, 0) != PL_OK) {
        fprintf(stderr, "worker: %s\n", pl_errmsg());
        _exit(3); /* a child never asserts */
    }
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = 2;
    o.poll_ms = 10;
    _exit(pl_worker_run(e, &o) == PL_OK ? 0 : 1);
}

/* Whether the runs of the round's @p kind ('p' parked, 'q' queued),
 * numbered @p from to @p to, started once each, in their order. */
static void w_expect_order(int round, int from, int to, const char *kind)
{
    int last = -1, seen = 0;
    int n = atomic_load(&g_w->started);
    for (int i = 0; i < n && i < W_RUNS * 4; i++) {
        int v = g_w->order[i];
        if (v < from || v >= to)
            continue;
        cr_expect_gt(v, last, "round %d: %s run %d started after run %d", round,
                     kind, v, last);
        last = v;
        seen++;
    }
    cr_expect_eq(seen, to - from, "round %d: %d %s runs started, not %d", round,
                 seen, kind, to - from);
}

/*
 * Each round: a key limited to one; four runs of it parked on timers due
 * in order, then eight queued, every other one sent the event it waits
 * for (its timer due at once); then two worker processes (two threads
 * each), which take from the queue and wake due timers at once against
 * the one server.  Never two of the key's runs execute at once, the
 * parked runs start in their due order and the queued ones in the
 * queue's.  A wake that took a queued run sent its event gave it a
 * second place of the key (the first round saw two at once), or its
 * place ahead of the key's earlier runs.
 */
Test(pg_wake, two_workers_wake_and_take_a_key_in_its_order)
{
    char *uri = t_pg_store_uri("t_wtwo");
    pl_registry *reg = w_registry();
    g_w = mmap(NULL, sizeof *g_w, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(g_w, MAP_FAILED);
    for (int round = 0; round < W_ROUNDS; round++) {
        memset(g_w, 0, sizeof *g_w);
        pl_engine *e = w_engine(uri, reg);
        char key[16], id[32], json[96];
        snprintf(key, sizeof key, "k%d", round);
        long long t0 = w_now_ms();
        for (int i = 0; i < W_RUNS; i++) {
            snprintf(id, sizeof id, "r%d-%02d", round, i);
            if (i < W_PARKED)
                snprintf(json, sizeof json, "{\"i\": %d, \"until\": %lld}", i,
                         t0 + 1000 + 10 * i);
            else
                snprintf(json, sizeof json, "{\"i\": %d, \"wait\": %s}", i,
                         i % 2 ? "true" : "false");
            w_run(e, id, json, key, i < W_PARKED);
            if (i >= W_PARKED && i % 2)
                w_signal(e, id);
        }
        while (w_now_ms() < t0 + 1000 + 10 * W_PARKED)
            w_nap(10);
        pid_t kids[2];
        for (int k = 0; k < 2; k++) {
            kids[k] = fork();
            cr_assert_geq(kids[k], 0);
            if (kids[k] == 0)
                w_worker(uri, reg);
        }
        for (int i = 0; i < W_RUNS; i++) {
            snprintf(id, sizeof id, "r%d-%02d", round, i);
            for (int ms = 0; status_of(e, id) != PL_RUN_COMPLETED; ms += 10) {
                cr_assert_lt(ms, W_BOUND_MS, "round %d: %s is %s", round, id,
                             pl_run_status_name(status_of(e, id)));
                w_nap(10);
            }
        }
        for (int k = 0; k < 2; k++) {
            kill(kids[k], SIGKILL);
            waitpid(kids[k], NULL, 0);
        }
        pl_engine_close(e);
        cr_expect_leq(atomic_load(&g_w->most), 1,
                      "round %d: %d runs of a key limited to one at once",
                      round, atomic_load(&g_w->most));
        w_expect_order(round, 0, W_PARKED, "parked");
        w_expect_order(round, W_PARKED, W_RUNS, "queued");
    }
    munmap(g_w, sizeof *g_w);
    g_w = NULL;
    pl_registry_free(reg);
    free(uri);
}
