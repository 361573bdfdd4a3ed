/*
 * test_fork_keys.c -- a fork's and an upgrade's new run keep the old run's
 * concurrency key and limit (core/ops/fork.c; FLOW in ledger/store.h), on
 * the store the suite runs on: LMDB, and PostgreSQL as pg_test_fork_keys.
 *
 * Run "b" of key "k" (limit 1) parks in a wait, keeping its key; run "a"
 * of the key holds it, executing in a worker thread; "b" is upgraded (or
 * forked) at 0:0, its new run queued.  While "a" holds the key the new run
 * is not taken: a run of another key queued after it passes it on the
 * worker's free thread.  Once "a" ends, the new run is taken and
 * completes.  A key that cannot be read (LMDB: its record damaged) is
 * refused, nothing written, never taken for no key.  Nothing is timed:
 * every wait is for a condition, with a generous bound.
 */
#include "support.h"

#include <errno.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define K_BOUND_MS 120000 /* the longest any condition is waited for */

TestSuite(fork_keys, .fini = t_cleanup, .timeout = 300);

enum { RUN_A, RUN_B, RUN_C, N_RUNS };
static atomic_int g_in[N_RUNS], g_block[N_RUNS];
/* the code "b" first ran under: it waits; the code loaded since does not */
static atomic_int g_waits = 1;

static void nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static int tick(cJSON **out, void *user)
{
    (void)user;
    return pl_json_pack(out, "{s:b}", "ticked", 1);
}

/* "gate" {"n": i}: a side effect (root step 0:0); then, while g_waits,
 * a wait for an hour (parked); else marks itself in and waits while it
 * is blocked. */
static int gate(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    cJSON *v = NULL;
    int st = pl_ctx_side_effect(&v, ctx, "tick", tick, NULL);
    cJSON_Delete(v);
    if (!st && atomic_load(&g_waits)) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        st = pl_ctx_sleep_until(ctx, (int64_t)now.tv_sec * 1000 + 3600000);
    }
    if (st)
        return st;
    atomic_store(&g_in[n], 1);
    while (atomic_load(&g_block[n]))
        nap(5);
    return pl_steps_add_resultf(out, "{}");
}

static void submit(pl_engine *e, const char *id, int n, const char *key)
{
    char json[32];
    snprintf(json, sizeof json, "{\"n\": %d}", n);
    pl_action root = PL_ACTION_INIT;
    root.policy = "gate";
    root.payload = t_json(json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = key;
    ro.concurrency_limit = 1;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s: %s", id,
                 pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);
}

static void await_status(pl_engine *e, const char *id, pl_run_status want)
{
    for (int ms = 0; status_of(e, id) != want; ms += 10) {
        cr_assert_lt(ms, K_BOUND_MS, "run %s never became %s", id,
                     pl_run_status_name(want));
        nap(10);
    }
}

/* The scenario above, the new run made by @p upgrade or a fork. */
static void new_run_waits_for_the_key(bool upgrade)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK); /* waits park */
    /* "b" parks in its wait with key "k": it holds no place, keeps the key */
    submit(e, "b", RUN_B, "k");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "b", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    atomic_store(&g_waits, 0); /* the new code: no wait */
    /* "a" holds the key, executing */
    atomic_store(&g_block[RUN_A], 1);
    submit(e, "a", RUN_A, "k");
    t_worker w;
    t_worker_start(&w, e, 2);
    for (int ms = 0; !atomic_load(&g_in[RUN_A]); ms += 10) {
        cr_assert_lt(ms, K_BOUND_MS, "run a never ran");
        nap(10);
    }
    char *id = NULL;
    int st = upgrade ? pl_run_upgrade(&id, e, "b", "0:0", "b2")
                     : pl_run_fork(&id, e, "b", "0:0", "b2");
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(id, "b2");
    free(id);
    cr_assert_eq(status_of(e, "b"),
                 upgrade ? PL_RUN_SUPERSEDED : PL_RUN_WAITING);
    /* queued after b2, of another key: the free thread takes it past b2 */
    submit(e, "c", RUN_C, "other");
    await_status(e, "c", PL_RUN_COMPLETED);
    cr_assert_not(atomic_load(&g_in[RUN_B]),
                  "b2 was taken while run a held its key 'k' (limit 1)");
    cr_assert_eq(status_of(e, "b2"), PL_RUN_RUNNING);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "b2"), PL_OK, "%s", pl_errmsg());
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);
    /* "a" ends: the key's place is b2's */
    atomic_store(&g_block[RUN_A], 0);
    await_status(e, "a", PL_RUN_COMPLETED);
    await_status(e, "b2", PL_RUN_COMPLETED);
    cr_assert(atomic_load(&g_in[RUN_B]));
    t_worker_stop(&w);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(fork_keys, an_upgrades_successor_waits_for_the_old_runs_key)
{
    new_run_waits_for_the_key(true);
}

Test(fork_keys, a_fork_waits_for_the_old_runs_key)
{
    new_run_waits_for_the_key(false);
}

/*
 * LMDB: the old run's flow record (its key and limit) fails its checksum:
 * a fork or an upgrade cannot know the key, so it is refused
 * (PL_ECORRUPT), and nothing is written: no new run, the old one as it
 * was.  (On PostgreSQL the key is copied with its sum, and the new run's
 * take fails it, as the original's would: docs/design.md §14.)
 */
Test(fork_keys, an_unreadable_key_refuses_the_fork)
{
    t_lmdb_only("a damaged flow record of an LMDB file");
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "gate", gate, NULL), PL_OK);
    const char *path = t_store_path();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    submit(e, "b", RUN_B, "k");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "b", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    pl_engine_close(e);
    /* a byte of its parked flow record changed, as a damaged disk would */
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
    MDB_val k = {1, "r"}, v;
    cr_assert_eq(mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE), 0);
    cr_assert(k.mv_size == 9 && *(const char *)k.mv_data == 'r');
    uint8_t rec[256], key[9];
    cr_assert_leq(v.mv_size, sizeof rec);
    memcpy(key, k.mv_data, 9);
    memcpy(rec, v.mv_data, v.mv_size);
    rec[v.mv_size / 2] ^= 0x01;
    mdb_cursor_close(cur);
    k = (MDB_val){9, key};
    v.mv_data = rec;
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, e, "b", "0:0", "b2"), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "queue record"), "%s", pl_errmsg());
    cr_assert_null(id);
    cr_assert_eq(pl_run_upgrade(&id, e, "b", "0:0", "b3"), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(id);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "b2"), PL_ENOTFOUND);
    cr_assert_eq(pl_run_get(&info, e, "b3"), PL_ENOTFOUND);
    cr_assert_eq(status_of(e, "b"), PL_RUN_WAITING);
    pl_engine_close(e);
    pl_registry_free(reg);
}
