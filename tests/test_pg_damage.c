/*
 * test_pg_damage.c -- rows of the PostgreSQL store edited behind its back
 * (with SQL, as psql would), read through the run operations the guide
 * says work on both stores: each damage is reported, never read as if
 * the run were whole.  test_pg_stepflip.c flips bits of every column;
 * test_store_damage.c does the same as here to LMDB records.
 */
#include "support.h"
#include "support_pg_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

TestSuite(pg_damage, .fini = t_cleanup, .timeout = 120);

static int count_steps(const pl_step *s, void *user)
{
    (void)s;
    ++*(int *)user;
    return 0;
}

/*
 * A completed "chain" of three calls whose second call's row (its
 * action_call and action_result, steps 0:2 and 0:3) is deleted: a walk
 * and an export, which read the run's steps in key order, must say that
 * steps are missing, as pl_run_ledger() and pl_run_verify() do, where
 * they went from step 0:1 to 0:4 and said PL_OK (an export the import
 * then refused as changed).  A walk from past the gap sees none.
 */
Test(pg_damage, a_gap_in_a_ledger_ends_a_walk_and_an_export)
{
    char *uri = t_pg_store_uri("d_gap");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 3}", "holes"));
    pl_engine_close(e);
    pg_admin_exec("DELETE FROM d_gap.steps WHERE k = int8send((SELECT num "
                  "FROM d_gap.runs WHERE id = 'holes'::bytea)) || "
                  "'\\x00000002'::bytea");
    e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_verify(e, "holes"), PL_ECORRUPT, "the row is gone");
    int n = 0;
    cr_expect_eq(pl_run_walk(e, "holes", count_steps, &n), PL_ECORRUPT,
                 "a walk passed over the missing steps");
    cr_expect(strstr(pl_errmsg(), "missing step 2") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_run_walk_from(e, "holes", "0:1", count_steps, &n),
                 PL_ECORRUPT);
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    cr_expect_eq(pl_run_export(e, "holes", f), PL_ECORRUPT,
                 "an export passed over the missing steps");
    fclose(f);
    n = 0;
    cr_expect_eq(pl_run_walk_from(e, "holes", "0:4", count_steps, &n), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(n, 4, "0:4, the callee folded into 0:5, 0:5 and 0:6: %d", n);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * A store missing one of its tables (dropped with SQL) is a damaged store:
 * PL_ECORRUPT whether opened for writing or read-only, as the header
 * says, and nothing is created in it.  A read-only open asked only for
 * the identity and the format: it went on to prepare its statements and
 * failed with PL_ESTORE, a store that did not answer, naming SQL.
 */
Test(pg_damage, a_store_missing_a_table_is_corrupt_read_only_too)
{
    static const char *const tables[] = {"runs", "state", "steps"};
    pl_registry *reg = t_registry();
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        char schema[32], sql[160];
        snprintf(schema, sizeof schema, "d_table_%s", tables[i]);
        char *uri = t_pg_store_uri(schema);
        pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
        pl_outcome_free(t_start(e, "echo", "{}", "r"));
        pl_engine_close(e);
        snprintf(sql, sizeof sql, "DROP TABLE %s.%s", schema, tables[i]);
        pg_admin_exec(sql);
        for (int ro = 0; ro < 2; ro++) {
            pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
            o.read_only = ro;
            e = NULL;
            cr_expect_eq(pl_engine_open(&e, uri, reg, &o), PL_ECORRUPT,
                         "%s dropped, %s: %s", tables[i],
                         ro ? "read-only" : "writable", pl_errmsg());
            cr_expect_null(e);
            pl_engine_close(e);
        }
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM pg_tables WHERE schemaname = '%s' "
                 "AND tablename = '%s'",
                 schema, tables[i]);
        cr_expect_eq(t_pg_number(sql), 0, "nothing was created");
        free(uri);
    }
    pl_registry_free(reg);
}

/* A worker on a thread, its counts kept (t_worker keeps none). */
typedef struct counted {
    pl_engine *e;
    uint64_t completed, failed, skipped;
    int rc;
} counted;

static void *counted_main(void *arg)
{
    counted *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.poll_ms = 10;
    o.completed = &w->completed;
    o.failed = &w->failed;
    o.skipped = &w->skipped;
    w->rc = pl_worker_run(w->e, &o);
    return NULL;
}

/* Queue run "dq" in store @p schema (leases of 100 ms), damage it with
 * @p damage, and let a worker run for 30 of its leases' lengths: it must
 * take the run once, count it not executed once, and drop its lease, so
 * that no worker takes it again at each expiry. */
static void damaged_queued(const char *schema, const char *damage)
{
    char *uri = t_pg_store_uri(schema);
    pl_registry *reg = t_registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.lease_ms = 100;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, &eo), PL_OK, "%s", pl_errmsg());
    cJSON *p = t_json("{\"n\": 3}");
    pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "dq";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    pg_admin_exec(damage);
    counted w = {.e = e};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, counted_main, &w), 0);
    struct timespec leases = {3, 0}; /* 30 leases of 100 ms */
    nanosleep(&leases, NULL);
    pl_worker_stop(e);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_expect_eq(w.rc, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(w.skipped, 1, "%s: taken %llu times", schema,
                 (unsigned long long)w.skipped);
    cr_expect_eq(w.completed, 0);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.leases WHERE id = 'dq'",
             schema);
    cr_expect_eq(t_pg_number(sql), 0, "%s: its lease is still there", schema);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * A queued run that cannot be read (its root record, or its state
 * record, damaged) is taken once and set aside, reported once: a worker
 * took it again at each expiry of its lease, for ever, and counted it
 * not executed each time.  Its root record damaged, its state is written
 * failed (PL_ECORRUPT, its reason naming it); its state damaged, it keeps
 * it, for pl_run_verify() and ledger-dump to report.
 */
Test(pg_damage, a_damaged_queued_run_is_taken_once)
{
    damaged_queued("d_info",
                   "UPDATE d_info.runs SET info = '\\xdeadbeef'::bytea "
                   "WHERE id = 'dq'::bytea; CREATE TABLE d_info.before AS "
                   "SELECT run, v FROM d_info.state");
    cr_expect_eq(t_pg_number("SELECT count(*) FROM d_info.state s JOIN "
                             "d_info.before b USING (run) WHERE s.v <> b.v"),
                 1, "its state was not written failed");
    damaged_queued("d_state",
                   "UPDATE d_state.state SET v = '\\xdeadbeef'::bytea "
                   "WHERE run = (SELECT num FROM d_state.runs WHERE id = "
                   "'dq'::bytea)");
}
