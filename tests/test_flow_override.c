/*
 * test_flow_override.c -- what the guide's "Flow control" promises of a
 * queued run continued by hand: "The limit binds what workers take;
 * pl_run_continue() of a queued run executes it at once (an operator's
 * override) and counts against the key while it runs"; and of the queue's
 * order, why nothing starves: a run is passed only by runs queued before
 * it or within its priority difference's worth of minutes after it.  On
 * the store the suite runs on: LMDB, and PostgreSQL as
 * pg_test_flow_override.
 * Nothing is timed: every wait is for a condition, with a generous bound.
 */
#include "support.h"

#include "flowrec.h"

#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define O_BOUND_MS 120000 /* the longest any condition is waited for */

TestSuite(flow_override, .fini = t_cleanup, .timeout = 300);

/* The runs' gates: "in" once a run's policy started, "block" holds it. */
enum { A1, A2, B1, N_RUNS };
static atomic_int g_in[N_RUNS], g_block[N_RUNS];

static void nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* "gate": {"n": index}: marks itself in, waits while it is blocked. */
static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    atomic_store(&g_in[n], 1);
    while (atomic_load(&g_block[n]))
        nap(5);
    return pl_steps_add_resultf(out, "{}");
}

/* Queue run @p id of @p policy, payload {"n": @p n}, with @p key (limit 1)
 * and priority @p prio. */
static void submit_as(pl_engine *e, const char *policy, const char *id, int n,
                      const char *key, int prio)
{
    char json[32];
    snprintf(json, sizeof json, "{\"n\": %d}", n);
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = t_json(json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.priority = prio;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? 1 : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);
}

static void submit(pl_engine *e, const char *id, int n, const char *key)
{
    submit_as(e, "gate", id, n, key, 0);
}

static void await_status(pl_engine *e, const char *id, pl_run_status want)
{
    for (int ms = 0; status_of(e, id) != want; ms += 10) {
        cr_assert_lt(ms, O_BOUND_MS, "run %s never became %s", id,
                     pl_run_status_name(want));
        nap(10);
    }
}

typedef struct thread_arg {
    pl_engine *e;
    const char *id;
    int rc;
    pl_run_status status;
} thread_arg;

static void *continue_main(void *p)
{
    thread_arg *t = p;
    pl_outcome *o = NULL;
    t->rc = pl_run_continue(&o, t->e, t->id, NULL);
    t->status = o ? o->status : (pl_run_status)0;
    pl_outcome_free(o);
    return NULL;
}

static void *worker_main(void *p)
{
    thread_arg *t = p;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.concurrency = 2;
    wo.poll_ms = 10;
    t->rc = pl_worker_run(t->e, &wo);
    return NULL;
}

/*
 * a1 and a2 share key "k" (limit 1), a1 queued first.  a2, continued by
 * hand, runs at once, ahead of a1; while it runs, a worker with a free
 * thread takes b1 (no key, queued after a1) but not a1; once a2 ends, a1
 * runs.
 */
Test(flow_override, a_continued_queued_run_goes_at_once_and_holds_its_key)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    submit(e, "a1", A1, "k");
    submit(e, "a2", A2, "k");
    atomic_store(&g_block[A2], 1);

    thread_arg by_hand = {e, "a2", -1, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, continue_main, &by_hand), 0);
    for (int ms = 0; !atomic_load(&g_in[A2]); ms += 5) {
        cr_assert_lt(ms, O_BOUND_MS, "a2 never started");
        nap(5);
    }
    cr_assert_eq(status_of(e, "a1"), PL_RUN_SUBMITTED, "a1 stays queued");

    submit(e, "b1", B1, NULL);
    thread_arg worker = {e, NULL, -1, 0};
    pthread_t wth;
    cr_assert_eq(pthread_create(&wth, NULL, worker_main, &worker), 0);
    await_status(e, "b1", PL_RUN_COMPLETED); /* the worker passed a1 */
    cr_assert_not(atomic_load(&g_in[A1]), "a1 started while a2 held key k");
    cr_assert_eq(status_of(e, "a1"), PL_RUN_SUBMITTED);

    atomic_store(&g_block[A2], 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(by_hand.rc, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(by_hand.status, PL_RUN_COMPLETED);
    await_status(e, "a1", PL_RUN_COMPLETED);
    pl_worker_stop(e);
    cr_assert_eq(pthread_join(wth, NULL), 0);
    cr_assert_eq(worker.rc, PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the queue's order ages: nothing starves ---------------------------- */

/* "seen": records the order the runs executed in (payload.n). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_seen[8], g_n_seen;

static int seen(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    pthread_mutex_lock(&g_mu);
    if (g_n_seen < 8)
        g_seen[g_n_seen++] = n;
    pthread_mutex_unlock(&g_mu);
    return pl_steps_add_resultf(out, "{}");
}

/* LMDB: the queued run of priority @p prio (the only one) as if it had
 * been queued @p us earlier: its flow record's rank and its place in the
 * queue's index moved back, written as the store writes them (lmdb_flow.c,
 * LAYOUT).  The store is closed meanwhile. */
static void lmdb_queued_earlier(const char *path, int prio, int64_t us)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "flow", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
    uint8_t kr[9] = {'r'};
    MDB_val k = {1, kr}, v;
    uint64_t run = 0;
    pl__flow f;
    bool found = false;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
         !rc && k.mv_size == 9 && ((uint8_t *)k.mv_data)[0] == 'r';
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        run = 0;
        for (int i = 1; i < 9; i++)
            run = run << 8 | ((uint8_t *)k.mv_data)[i];
        cr_assert_eq(pl__flow_decode(&f, run, v.mv_data, v.mv_size), PL_OK);
        if ((found = f.priority == prio))
            break;
    }
    mdb_cursor_close(cur);
    cr_assert(found, "no queued run of priority %d", prio);
    uint8_t kq[17] = {'q'};
    for (int i = 0; i < 8; i++)
        kq[9 + i] = (uint8_t)(run >> (56 - 8 * i));
    for (int pass = 0; pass < 2; pass++) {
        uint64_t r = (uint64_t)f.rank_us + ((uint64_t)1 << 63);
        for (int i = 0; i < 8; i++)
            kq[1 + i] = (uint8_t)(r >> (56 - 8 * i));
        MDB_val q = {17, kq}, none = {0, ""};
        if (pass == 0) {
            cr_assert_eq(mdb_del(txn, dbi, &q, NULL), 0, "no queue entry");
            f.rank_us -= us;
        } else {
            cr_assert_eq(mdb_put(txn, dbi, &q, &none, 0), 0);
        }
    }
    pl__buf rec = {0};
    cr_assert_eq(pl__flow_encode(&rec, run, &f), PL_OK);
    memcpy(kr + 1, kq + 9, 8);
    MDB_val r = {9, kr}, rv = {rec.len, rec.data};
    cr_assert_eq(mdb_put(txn, dbi, &r, &rv, 0), 0);
    pl__buf_free(&rec);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* Run @p id, queued, as if it had been queued @p us earlier (PostgreSQL:
 * its lease row's rank; LMDB: by its priority @p prio). */
static void queued_earlier(const char *path, const char *id, int prio,
                           int64_t us)
{
    if (!t_on_pg()) {
        lmdb_queued_earlier(path, prio, us);
        return;
    }
#if PL_WITH_POSTGRESQL
    const char *sc = t_pg_schema(path);
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE \"%s\".leases SET qrank = qrank - %lld WHERE run = "
             "(SELECT num FROM \"%s\".runs WHERE id = convert_to('%s', "
             "'UTF8')) AND owner = '' RETURNING 1",
             sc, (long long)us, sc, id);
    cr_assert_eq(t_pg_number(sql), 1);
#else
    (void)id;
#endif
}

/*
 * One minute of waiting is worth a level (PL_PRIORITY_STEP_MS): "old"
 * (priority -1, queued ten minutes ago) goes before "high" (priority 5,
 * queued now), which goes before "mid" (priority 1, queued three minutes
 * ago: 4 minutes' worth against high's 5), then "now" (priority 0).  By
 * priority alone old would go last.
 */
Test(flow_override, a_run_queued_long_ago_goes_before_a_higher_priority)
{
    const int64_t min = (int64_t)PL_PRIORITY_STEP_MS * 1000;
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "seen", seen, NULL), PL_OK);
    const char *path = t_store_path();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    submit_as(e, "seen", "old", 0, NULL, -1);
    submit_as(e, "seen", "high", 1, NULL, 5);
    submit_as(e, "seen", "mid", 2, NULL, 1);
    submit_as(e, "seen", "now", 3, NULL, 0);
    if (!t_on_pg())
        pl_engine_close(e);
    queued_earlier(path, "old", -1, 10 * min);
    queued_earlier(path, "mid", 1, 3 * min);
    if (!t_on_pg())
        e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    t_worker w;
    t_worker_start(&w, e, 1); /* one at a time: the order is the queue's */
    for (int ms = 0;; ms += 5) {
        pthread_mutex_lock(&g_mu);
        int n = g_n_seen;
        pthread_mutex_unlock(&g_mu);
        if (n == 4)
            break;
        cr_assert_lt(ms, O_BOUND_MS, "%d of 4 runs executed", n);
        nap(5);
    }
    t_worker_stop(&w);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(g_seen[i], i, "run %d went %dth: %d %d %d %d", g_seen[i],
                     i + 1, g_seen[0], g_seen[1], g_seen[2], g_seen[3]);
    pl_engine_close(e);
    pl_registry_free(reg);
}
