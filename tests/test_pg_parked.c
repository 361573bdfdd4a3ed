/*
 * test_pg_parked.c -- the PostgreSQL store's parked rows (pg_flow.c: the
 * concurrency key of a run parked in a wait, kept for its wake), against a
 * real server that tests/pg_run.sh starts for this binary: a run's row goes
 * when the run ends, however it ends (cancelled while parked, failed while
 * parked), and with the run when it is deleted; a prune sweeps the rows of
 * runs gone (an older store's leftovers); a run still waiting keeps its
 * row.
 */
#include "support.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char p_dir[512];

/* Every store of this binary is a schema on the server (t_store_path()). */
static void p_setup(void)
{
    cr_assert_eq(setenv("PL_TEST_STORE", "postgresql", 1), 0);
    snprintf(p_dir, sizeof p_dir, "%s", t_tmpdir());
}

TestSuite(pg_parked, .init = p_setup, .fini = t_cleanup, .timeout = 120);

/* "sleeper": waits an hour (parking its run), then completes; fails at
 * once while "<dir>/fail" exists. */
static int sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    char p[600];
    snprintf(p, sizeof p, "%s/fail", p_dir);
    if (access(p, F_OK) == 0)
        return pl_errorf(PL_EPOLICY, "told to fail");
    int64_t now;
    int st = pl_ctx_now(&now, ctx);
    if (!st)
        st = pl_ctx_sleep_until(ctx, now + 3600 * 1000);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* The result of @p sql (one number, or -1), on the store's schema: each
 * "%s" in it is the schema. */
static long p_sql(const char *path, const char *sql)
{
    char q[2048];
    const char *schema = t_pg_schema(path);
    size_t n = 0;
    for (const char *c = sql; *c && n + strlen(schema) + 2 < sizeof q; c++) {
        if (c[0] == '%' && c[1] == 's') {
            n += (size_t)snprintf(q + n, sizeof q - n, "%s", schema);
            c++;
        } else {
            q[n++] = *c;
        }
    }
    q[n] = '\0';
    PGconn *c = t_pg_admin();
    PGresult *r = PQexec(c, q);
    ExecStatusType es = PQresultStatus(r);
    cr_assert(es == PGRES_TUPLES_OK || es == PGRES_COMMAND_OK, "%s: %s", q,
              PQresultErrorMessage(r));
    long v = es == PGRES_TUPLES_OK && PQntuples(r) == 1
                 ? strtol(PQgetvalue(r, 0, 0), NULL, 10)
                 : -1;
    PQclear(r);
    PQfinish(c);
    return v;
}

/* Whether run @p id has a parked row. */
static bool p_parked(const char *path, const char *id)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM \"%%s\".parked p JOIN \"%%s\".runs r ON "
             "r.num = p.run WHERE r.id = convert_to('%s', 'UTF8')",
             id);
    return p_sql(path, sql) > 0;
}

/* Submit "sleeper" as @p id under key "k" and execute it: it parks. */
static void p_park(pl_engine *e, const char *path, const char *id)
{
    pl_action a = PL_ACTION_INIT;
    a.policy = "sleeper";
    a.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = "k";
    ro.concurrency_limit = 8;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    cr_assert(p_parked(path, id), "%s parked with no row kept", id);
}

Test(pg_parked, a_run_that_ends_while_parked_leaves_no_row)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "sleeper", sleeper, NULL), PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    p_park(e, path, "cancelled");
    p_park(e, path, "failed");
    p_park(e, path, "waits");

    /* cancelled while parked */
    cr_assert_eq(pl_run_cancel(e, "cancelled", "stop"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(status_of(e, "cancelled"), PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(status_of(e, "cancelled")));
    cr_assert_not(p_parked(path, "cancelled"), "a cancelled run's row stayed");

    /* failed while parked (continued, its policy fails) */
    char p[600];
    snprintf(p, sizeof p, "%s/fail", p_dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fclose(f);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "failed", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    cr_assert_eq(unlink(p), 0);
    cr_assert_not(p_parked(path, "failed"), "a failed run's row stayed");

    /* the run still waiting keeps its key for its wake */
    cr_assert(p_parked(path, "waits"));
    cr_assert_eq(status_of(e, "waits"), PL_RUN_WAITING);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A store written before its ended runs' rows were dropped: a deleted
 * run's row goes with it, and a prune sweeps the rows of runs gone. */
Test(pg_parked, delete_and_prune_remove_rows_left_behind)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "sleeper", sleeper, NULL), PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    p_park(e, path, "deleted");
    p_park(e, path, "waits");
    cr_assert_eq(pl_run_cancel(e, "deleted", "stop"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(status_of(e, "deleted"), PL_RUN_CANCELLED);
    /* rows as an older store left them: the ended run's, and one of a run
     * deleted long ago (a number no run has) */
    p_sql(path, "INSERT INTO \"%s\".parked (run, fkey, flimit) SELECT num, "
                "'k', 8 FROM \"%s\".runs WHERE id = convert_to('deleted', "
                "'UTF8') ON CONFLICT DO NOTHING");
    cr_assert(p_parked(path, "deleted"));
    p_sql(path, "INSERT INTO \"%s\".parked (run, fkey, flimit) VALUES "
                "(987654321, 'k', 8)");
    cr_assert_eq(pl_run_delete(e, "deleted"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(p_sql(path, "SELECT count(*) FROM \"%s\".parked p WHERE NOT "
                             "EXISTS (SELECT 1 FROM \"%s\".runs r WHERE "
                             "r.num = p.run) AND p.run <> 987654321"),
                 0, "the deleted run's row stayed");
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    uint64_t n = 0;
    cr_assert_eq(pl_engine_prune(e, &po, &n), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(p_sql(path, "SELECT count(*) FROM \"%s\".parked p WHERE NOT "
                             "EXISTS (SELECT 1 FROM \"%s\".runs r WHERE "
                             "r.num = p.run)"),
                 0, "a prune left the rows of runs gone");
    cr_assert(p_parked(path, "waits"), "a prune took a waiting run's row");
    cr_assert_eq(status_of(e, "waits"), PL_RUN_WAITING);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A store written before an ended execution dropped its run's parked row:
 * the next writable open removes the rows of runs that ended, once (a
 * mark in meta says so), and keeps a waiting run's. */
Test(pg_parked, an_open_removes_the_rows_of_runs_that_ended)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "sleeper", sleeper, NULL), PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    p_park(e, path, "ended");
    p_park(e, path, "waits");
    cr_assert_eq(pl_run_cancel(e, "ended", "stop"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(status_of(e, "ended"), PL_RUN_CANCELLED);
    pl_engine_close(e);
    cr_assert_eq(p_sql(path, "SELECT count(*) FROM \"%s\".meta WHERE k = "
                             "'parked_swept'"),
                 1, "a new store is not marked swept");
    /* as an older store left it: the ended run's row, and no mark */
    p_sql(path, "INSERT INTO \"%s\".parked (run, fkey, flimit) SELECT num, "
                "'k', 8 FROM \"%s\".runs WHERE id = convert_to('ended', "
                "'UTF8')");
    p_sql(path, "DELETE FROM \"%s\".meta WHERE k = 'parked_swept'");
    cr_assert(p_parked(path, "ended"));
    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_expect_not(p_parked(path, "ended"), "an ended run's row stayed");
    cr_expect(p_parked(path, "waits"), "a waiting run's row went");
    cr_expect_eq(status_of(e, "waits"), PL_RUN_WAITING);
    cr_expect_eq(p_sql(path, "SELECT count(*) FROM \"%s\".meta WHERE k = "
                             "'parked_swept'"),
                 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}
