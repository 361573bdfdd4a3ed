/*
 * test_store_journal.c -- the LMDB store's group-commit journal: journaled
 * steps survive a crash, are moved in key order, and a conflicting,
 * unplaceable or malformed one is refused without losing the rest.
 */
#include "support.h"
#include "support_store.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the group-commit journal ------------------------------------------- */

/* Entries of one named database of a store file, read with raw LMDB. */
static size_t raw_entries(const char *path, const char *db)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat ms;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    mdb_env_set_mapsize(env, (size_t)1 << 30);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0, "no database %s", db);
    cr_assert_eq(mdb_stat(txn, dbi, &ms), 0);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return ms.ms_entries;
}

/* One of start_twins()' runs. */
typedef struct twin {
    const char *payload;
    const char *id;
    int st;
} twin;

static void twin_run(pl_engine *e, void *user)
{
    twin *t = user;
    cJSON *p = cJSON_Parse(t->payload);
    pl_action a = {PL_ACTION_VERSION, "bulk", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = t->id;
    pl_outcome *o = NULL;
    t->st = pl_run_start(&o, e, &a, &ro);
    if (!t->st && o->status != PL_RUN_COMPLETED)
        t->st = PL_EPOLICY;
    pl_outcome_free(o);
    cJSON_Delete(p);
}

typedef struct twins {
    pl_pool *pool;
    twin run[2];
} twins;

static void twins_submit(pl_engine *e, void *user)
{
    (void)e;
    twins *t = user;
    for (int i = 0; i < 2; i++)
        if (pl_pool_submit(t->pool, twin_run, &t->run[i]))
            t->run[i].st = PL_ENOMEM;
}

/*
 * Run "bulk" @p payload as @p id and as "<id>-twin" on a group-mode engine
 * so that every batch of both goes through the journal, which takes a
 * group of two or more (a lone batch goes straight to its place).  The
 * two are tasks of one pool thread, queued by a task so that the thread
 * admits both at once; it runs each until it waits for a commit, then
 * commits their batches as one group.  Returns the first failure.
 */
static int start_twins(pl_engine *e, const char *payload, const char *id)
{
    char twin_id[64];
    snprintf(twin_id, sizeof twin_id, "%s-twin", id);
    twins t = {NULL, {{payload, id, -1}, {payload, twin_id, -1}}};
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 1;
    int st = pl_pool_new(&t.pool, e, &po);
    if (!st)
        st = pl_pool_submit(t.pool, twins_submit, &t);
    if (!st)
        st = pl_pool_wait(t.pool);
    pl_pool_free(t.pool);
    return st ? st : t.run[0].st ? t.run[0].st : t.run[1].st;
}

/*
 * Run "bulk" {"n": 20} as @p run_id and its twin (start_twins) in group
 * mode in a child that is then SIGKILLed (no clean close), so the steps,
 * 61 of each run, stay in the journal.
 */
static void leave_in_journal(const char *path, const pl_registry *reg,
                             const char *run_id)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
        if (start_twins(e, "{\"n\": 20, \"size\": 100}", run_id))
            _exit(3);
        raise(SIGKILL);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child did not finish its run (status %d)", status);
    cr_assert_gt(raw_entries(path, "journal"), 1,
                 "the steps are still in the journal");
    cr_assert_eq(raw_entries(path, "steps"), 0, "and not yet in their places");
}

/* The run leave_in_journal() made reads, verifies and replays whole. */
static void expect_whole_journaled_run(const char *path, const pl_registry *reg,
                                       const char *run_id)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, run_id), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_eq(info->steps, 61, "20 calls of 3 steps and the result");
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, run_id), PL_OK, "%s", pl_errmsg());
    pl_steps *root = NULL;
    cr_assert_eq(pl_run_ledger(&root, e, run_id, "0"), PL_OK);
    cr_expect_eq(pl_steps_count(root), 41);
    pl_steps_free(root);
    int echoes = t_calls.echo;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, run_id, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(o->calls_served, 20);
    cr_expect_eq(t_calls.echo, echoes, "nothing executed again");
    pl_outcome_free(o);
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "journal"), 0, "reading moved them");
    /* 20 calls of 2 records (the echo's step is folded into its result)
     * and the result, for each run */
    cr_expect_eq(raw_entries(path, "steps"), 2 * 41, "its and its twin's");
}

/*
 * Group commits write steps to the journal first.  A process that dies
 * (SIGKILL, no clean close) leaves them there; another process, in another
 * durability mode, reads, verifies and replays them all the same.
 */
Test(store, journaled_steps_survive_a_crash_and_read_from_any_mode)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "journaled");
    expect_whole_journaled_run(path, reg, "journaled");
    pl_registry_free(reg);
}

/* A cursor on the journal of the store at @p path, in a write transaction
 * (LMDB C API); journal_cursor_done() commits it. */
static MDB_cursor *journal_cursor(const char *path, MDB_env **env,
                                  MDB_txn **txn)
{
    MDB_dbi dbi;
    MDB_cursor *cur;
    cr_assert_eq(mdb_env_create(env), 0);
    mdb_env_set_maxdbs(*env, 8);
    mdb_env_set_mapsize(*env, (size_t)1 << 30);
    cr_assert_eq(mdb_env_open(*env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(*env, NULL, 0, txn), 0);
    cr_assert_eq(mdb_dbi_open(*txn, "journal", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(*txn, dbi, &cur), 0);
    return cur;
}

static void journal_cursor_done(MDB_env *env, MDB_txn *txn, MDB_cursor *cur)
{
    mdb_cursor_close(cur);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/*
 * Moving the journal sorts its steps by run and journal position, which is
 * key order because a run appends in key order.  A journal whose records
 * are out of order (reversed here with the LMDB C API) is still moved in
 * key order, by the slower whole-key sort.
 */
Test(store, a_journal_out_of_key_order_is_moved_in_key_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "reversed");

    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *cur = journal_cursor(path, &env, &txn);
    MDB_val k, v;
    /* copy the records out, then write them back in reverse order */
    size_t n = 0;
    MDB_val vals[256];
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && n < 256;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        void *copy = malloc(v.mv_size);
        cr_assert_not_null(copy);
        memcpy(copy, v.mv_data, v.mv_size);
        vals[n].mv_size = v.mv_size;
        vals[n].mv_data = copy;
        n++;
    }
    size_t i = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && i < n;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++)
        cr_assert_eq(mdb_cursor_put(cur, &k, &vals[n - 1 - i], MDB_CURRENT), 0);
    cr_assert_eq(i, n);
    journal_cursor_done(env, txn, cur);
    for (size_t j = 0; j < n; j++)
        free(vals[j].mv_data);

    expect_whole_journaled_run(path, reg, "reversed");
    pl_registry_free(reg);
}

/* Reading run @p id fails with @p want (the journal cannot be moved), with
 * @p says in the message if given, and the journal keeps its @p journaled
 * records. */
static void journal_refused(const char *path, const pl_registry *reg,
                            const char *id, size_t journaled, int want,
                            const char *says)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    cr_assert_eq(st, want, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert(!says || strstr(pl_errmsg(), says), "%s", pl_errmsg());
    cr_assert_null(info);
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "journal"), journaled,
                 "the journal is still whole");
}

/*
 * A journaled step whose key holds another value in `steps` already (as if
 * another process had written it, or a build that did not look) cannot be
 * moved.  The move holds that run's journaled steps apart and moves all the
 * rest: the run is stopped, PL_EBUSY naming it, while its twin, journaled
 * in the same records, reads, verifies and replays whole, and a new run in
 * the same store works.
 */
Test(store, a_journaled_step_that_conflicts_stops_only_its_run)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "clash");

    raw r;
    raw_open(&r, path, false);
    uint8_t key[64];
    uint64_t num = raw_run_num(&r, "clash");
    size_t kl = step_key(key, num, NULL, 0, 0);
    static const uint8_t other[] = {0x80}; /* not the journaled record */
    raw_put_step(&r, key, kl, other, sizeof other);
    raw_close(&r);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "clash"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info); /* listed as it is */
    int st = pl_run_verify(e, "clash");
    cr_assert_eq(st, PL_EBUSY, "%s: %s", pl_status_name(st), pl_errmsg());
    char num_text[32];
    snprintf(num_text, sizeof num_text, "run #%llu", (unsigned long long)num);
    cr_assert(strstr(pl_errmsg(), "'clash'") && strstr(pl_errmsg(), num_text) &&
                  strstr(pl_errmsg(), "held apart"),
              "names the run and why: %s", pl_errmsg());
    pl_outcome *o = NULL;
    st = pl_run_continue(&o, e, "clash", NULL);
    cr_assert_eq(st, PL_EBUSY, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(o);

    /* the twin, journaled in the same records, is whole */
    cr_assert_eq(pl_run_verify(e, "clash-twin"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_continue(&o, e, "clash-twin", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* and a new run goes */
    o = t_start(e, "bulk", "{\"n\": 2, \"size\": 10}", "after");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(e, "after"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "journal"), 0, "the journal was moved");
    size_t held = raw_entries(path, "held");
    cr_expect_eq(held, 41, "clash's 41 step records (61 steps, 20 folded): %zu",
                 held);
    pl_registry_free(reg);
}

/* A batch of one step, @p val, at seq @p seq of run @p run's root ledger. */
static void one_step(pl__batch *b, uint64_t run, uint32_t seq, uint8_t val)
{
    uint8_t key[64];
    size_t kl = step_key(key, run, NULL, 0, seq);
    pl__kvs_reset(&b->steps);
    cr_assert_eq(pl__kvs_add(&b->steps, key, kl, &val, 1), PL_OK);
    b->run = run;
}

static pl__store *store_open(const char *path)
{
    pl__store *s = NULL;
    pl__store_options o = {0};
    o.nosync = true;
    cr_assert_eq(pl__store_open(&s, path, &o), PL_OK, "%s", pl_errmsg());
    return s;
}

/*
 * A group commit is refused, and nothing of it journaled, when a step of
 * it could not be moved into place later: its key is in place already, or
 * another process has steps of its run in the journal (two writers on one
 * run).  The caller learns it at once, never told the step is durable.
 */
Test(store, a_journaled_step_that_could_not_be_placed_is_refused_at_once)
{
    const char *path = t_store_path();
    pl__store *s = store_open(path);
    pl__batch a = {0}, b = {0};
    pl__batch *one[] = {&a}, *two[] = {&a, &b};
    one_step(&a, 7, 0, 1);
    cr_assert_eq(pl__store_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    /* run 7's step 0 again, another value, with run 8's first step */
    one_step(&a, 7, 0, 2);
    one_step(&b, 8, 0, 3);
    int st = pl__store_commit(s, two, 2, true);
    cr_assert_eq(st, PL_EBUSY, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "run #7") && strstr(pl_errmsg(), path), "%s",
              pl_errmsg());
    /* run 8 alone goes to the journal; this process is its writer */
    pl__batch *eight[] = {&b};
    cr_assert_eq(pl__store_commit(s, eight, 1, true), PL_OK, "%s", pl_errmsg());
    one_step(&b, 8, 1, 4);
    cr_assert_eq(pl__store_commit(s, eight, 1, true), PL_OK, "%s", pl_errmsg());
    pl__store_close(s);
    cr_assert_eq(raw_entries(path, "journal"), 2, "run 8's two commits");
    cr_assert_eq(raw_entries(path, "writers"), 1);

    /* another process is run 8's writer now (its record, by hand) */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "writers", 0, &dbi), 0);
    uint8_t rk[8] = {0, 0, 0, 0, 0, 0, 0, 8}, other[16] = {0xff};
    MDB_val k = {8, rk}, v = {16, other};
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    s = store_open(path);
    one_step(&b, 8, 2, 5);
    for (int journal = 0; journal < 2; journal++) {
        st = pl__store_commit(s, eight, 1, journal);
        cr_assert_eq(st, PL_EBUSY, "journal %d: %s: %s", journal,
                     pl_status_name(st), pl_errmsg());
        cr_assert(strstr(pl_errmsg(), "run #8") &&
                      strstr(pl_errmsg(), "another process"),
                  "%s", pl_errmsg());
    }
    /* another run is not concerned */
    one_step(&a, 9, 0, 6);
    cr_assert_eq(pl__store_commit(s, one, 1, true), PL_OK, "%s", pl_errmsg());
    /* once the journal is moved, the run's next writer may write */
    cr_assert_eq(pl__store_settle(s), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__store_commit(s, eight, 1, false), PL_OK, "%s",
                 pl_errmsg());
    pl__store_close(s);
    cr_assert_eq(raw_entries(path, "journal"), 0);
    cr_assert_eq(raw_entries(path, "steps"), 5, "7:0, 8:0-2, 9:0");
    pl__batch_free(&a);
    pl__batch_free(&b);
}

/* A journal record with a byte after its last step is malformed: reading
 * fails with PL_ECORRUPT, and the journal is kept as it is. */
Test(store, a_journal_record_with_stray_bytes_is_corrupt_and_kept)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "stray");
    size_t journaled = raw_entries(path, "journal");

    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *cur = journal_cursor(path, &env, &txn);
    MDB_val k, v;
    cr_assert_eq(mdb_cursor_get(cur, &k, &v, MDB_LAST), 0);
    uint8_t *longer = malloc(v.mv_size + 1);
    cr_assert_not_null(longer);
    memcpy(longer, v.mv_data, v.mv_size);
    longer[v.mv_size] = 0;
    MDB_val nv = {v.mv_size + 1, longer};
    cr_assert_eq(mdb_cursor_put(cur, &k, &nv, MDB_CURRENT), 0);
    journal_cursor_done(env, txn, cur);
    free(longer);

    journal_refused(path, reg, "stray", journaled, PL_ECORRUPT, "journal");
    pl_registry_free(reg);
}

/* A journal that fills is moved to its place in the middle of a run. */
Test(store, a_full_journal_is_moved_during_the_run)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    /* twice 60 calls of ~50 KB echoed: ~18 MB through the journal */
    cr_assert_eq(start_twins(e, "{\"n\": 60, \"size\": 50000}", "big"), PL_OK,
                 "%s", pl_errmsg());
    pl_engine_close(e);
    size_t moved = raw_entries(path, "steps");
    cr_expect_gt(moved, 0, "the journal was moved while the runs went on");
    cr_expect_lt(moved, 2 * 121, "and not all of it (the rest waits)");

    e = t_engine(path, reg, PL_DURABILITY_GROUP);
    cr_assert_eq(pl_run_verify(e, "big"), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "big"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->steps, 181);
    pl_run_info_free(info);
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "steps"), 2 * 121,
                 "181 steps in 121 "
                 "records: each echo's one step is folded into its result");
    pl_registry_free(reg);
}
