/*
 * test_pg_open.c -- opening a PostgreSQL store that is there already takes
 * no lock its writers hold (tests/pg_run.sh starts the server).  Workers
 * open the store whenever they start; an open that took a table's share
 * or exclusive lock (CREATE INDEX IF NOT EXISTS, ALTER TABLE ... ADD
 * COLUMN IF NOT EXISTS take one before they look) waited for every
 * writer of that table and, holding the lock of the table before,
 * deadlocked with a signal's delivery (inbox, then timers) while workers
 * restarted: pl_run_signal() failed with "deadlock detected"
 * (test_workflow.c found it).
 *
 * A store made before the sums of what flow control reads (pg_flow.c,
 * BUDGET SUMS and KEY SUMS) gains them at its next writable open: the
 * columns, the triggers, and its keyed lease rows' sums at once (a budget
 * gets its sum at its next write); a row damaged then (past the triggers,
 * as the disk's damage would be) is refused, not read as it is.
 */
#include "support.h"

#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(pg_open, .fini = t_cleanup, .timeout = 120);

/* A writer's transaction: ROW EXCLUSIVE on every table of @p schema, the
 * lock an INSERT, UPDATE or DELETE takes, held until the caller ends it. */
static PGconn *writer(const char *schema)
{
    PGconn *c = t_pg_admin();
    PGresult *r = PQexec(c, "BEGIN");
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
    const char *v[1] = {schema};
    r = PQexecParams(c,
                     "SELECT tablename FROM pg_tables WHERE schemaname = $1 "
                     "ORDER BY tablename",
                     1, NULL, v, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    cr_assert_geq(PQntuples(r), 10, "%d tables", PQntuples(r));
    for (int i = 0; i < PQntuples(r); i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "LOCK TABLE \"%s\".\"%s\" IN ROW EXCLUSIVE MODE", schema,
                 PQgetvalue(r, i, 0));
        PGresult *l = PQexec(c, sql);
        cr_assert_eq(PQresultStatus(l), PGRES_COMMAND_OK, "%s",
                     PQerrorMessage(c));
        PQclear(l);
    }
    PQclear(r);
    return c;
}

/* Open @p store in a child whose every lock wait is refused at once,
 * while a writer holds ROW EXCLUSIVE on every table; @p what says which
 * open it is. */
static void open_beside_a_writer(const char *store, const pl_registry *reg,
                                 const char *what)
{
    PGconn *w = writer("t_open");
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        /* a lock it waits for is refused at once, and says which */
        alarm(60);
        if (setenv("PGOPTIONS", "-c lock_timeout=100", 1))
            _exit(10);
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, store, reg, NULL)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            _exit(11);
        }
        pl_engine_close(ce);
        _exit(0);
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "%s waited for a lock a writer held (exit %d, signal %d)", what,
              WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
              WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    PGresult *r = PQexec(w, "COMMIT");
    PQclear(r);
    PQfinish(w);
}

/* Both opens: of a store found current (pg_setup.c, CURRENT), and one
 * that runs the whole setup (its digest's row gone, as a store an older
 * library made has none). */
Test(pg_open, an_open_waits_for_no_writer)
{
    char *store = t_pg_store_uri("t_open");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    open_beside_a_writer(store, reg, "an open of a current store");
    PGconn *c = t_pg_admin();
    PGresult *r = PQexec(c, "DELETE FROM t_open.meta WHERE k = 'setup'");
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    cr_assert_str_eq(PQcmdTuples(r), "1");
    PQclear(r);
    open_beside_a_writer(store, reg, "an open that runs the setup");
    r = PQexec(c, "SELECT count(*) FROM t_open.meta WHERE k = 'setup'");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "1", "the setup did not run");
    PQclear(r);
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}

/* One value of @p sql on @p c ("" for NULL; the caller frees). */
static char *admin_value(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
                 PQerrorMessage(c));
    cr_assert_eq(PQntuples(r), 1, "%s: %d rows", sql, PQntuples(r));
    char *v = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    cr_assert_not_null(v);
    return v;
}

static void admin_do(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql,
                 PQerrorMessage(c));
    PQclear(r);
}

static void expect_value(PGconn *c, const char *sql, const char *want)
{
    char *v = admin_value(c, sql);
    cr_expect_str_eq(v, want, "%s", sql);
    free(v);
}

Test(pg_open, an_older_store_gains_the_flow_sums)
{
    char *store = t_pg_store_uri("t_sums");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "keyed";
    ro.concurrency_key = "k";
    ro.concurrency_limit = 2;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    bool ok;
    int64_t at, retry;
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "b", 5, 1LL << 40), PL_OK,
                 "%s", pl_errmsg());
    pl_engine_close(e);
    /* as a store made before the sums */
    PGconn *c = t_pg_admin();
    admin_do(c, "DROP TRIGGER rates_sum ON t_sums.rates; DROP TRIGGER "
                "units_sum ON t_sums.units; DROP TRIGGER leases_key_sum ON "
                "t_sums.leases; DROP TRIGGER parked_key_sum ON t_sums.parked; "
                "ALTER TABLE t_sums.rates DROP COLUMN sum; ALTER TABLE "
                "t_sums.units DROP COLUMN sum; ALTER TABLE t_sums.leases DROP "
                "COLUMN ksum; ALTER TABLE t_sums.parked DROP COLUMN ksum");

    e = t_engine(store, reg, PL_DURABILITY_SYNC);
    expect_value(c,
                 "SELECT count(*) FROM pg_trigger WHERE tgname IN "
                 "('rates_sum', 'units_sum', 'leases_key_sum', "
                 "'parked_key_sum') AND tgrelid::regclass::text LIKE "
                 "'t_sums.%'",
                 "4");
    const char *whole = "SELECT ksum = t_sums.pl_key_sum(fkey, flimit) FROM "
                        "t_sums.leases WHERE id = 'keyed'";
    expect_value(c, whole, "t");
    expect_value(c, "SELECT sum IS NULL FROM t_sums.rates", "t");
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, "b", 5, 1LL << 40), PL_OK,
                 "%s", pl_errmsg());
    cr_expect(ok);
    expect_value(c,
                 "SELECT sum = t_sums.pl_budget_sum('r', name, '', window_ms, "
                 "lim, start_ms, count) FROM t_sums.rates",
                 "t");
    /* damaged past the triggers: refused */
    admin_do(c, "SET session_replication_role = replica; UPDATE "
                "t_sums.leases SET flimit = 3 WHERE id = 'keyed'; UPDATE "
                "t_sums.rates SET count = 0; SET session_replication_role = "
                "origin");
    expect_value(c,
                 "SELECT t_sums.pl_key_damaged(run) FROM t_sums.leases WHERE "
                 "id = 'keyed'",
                 "t");
    cr_expect_eq(pl_rate_take(&ok, &at, &retry, e, "b", 5, 1LL << 40),
                 PL_ECORRUPT);
    /* and a write through the triggers sums the row again */
    admin_do(c, "UPDATE t_sums.leases SET flimit = 2 WHERE id = 'keyed'");
    expect_value(c, whole, "t");
    pl_engine_close(e);
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}

/* An open of @p store (t_pg_store_uri()'s, with @p extra added) must be
 * refused with @p want, before any store is made, its message holding
 * @p says. */
static void open_refused(const pl_registry *reg, const char *extra, int want,
                         const char *says)
{
    char *store = t_pg_store_uri("t_badopt");
    size_t n = strlen(store) + strlen(extra) + 1;
    char *uri = malloc(n);
    cr_assert_not_null(uri);
    snprintf(uri, n, "%s%s", store, extra);
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, uri, reg, NULL);
    cr_expect_eq(st, want, "%s: %s (%s)", extra, pl_status_name(st),
                 pl_errmsg());
    cr_expect_null(e, "%s", extra);
    cr_expect(strstr(pl_errmsg(), says) != NULL, "%s: %s", extra, pl_errmsg());
    pl_engine_close(e);
    free(uri);
    free(store);
}

/* answer_timeout_ms is 1 to 86,400,000 ms: 0 (which PostgreSQL's own
 * timeouts read as "no bound"), a sign, a unit, a number past the most
 * or past any integer, an empty value are the caller's error, named. */
Test(pg_open, a_bad_answer_timeout_is_the_callers_error)
{
    pl_registry *reg = t_registry();
    static const char *const bad[] = {"0",
                                      "00",
                                      "-1",
                                      "-1000",
                                      "+1000",
                                      "abc",
                                      "10s",
                                      "1e3",
                                      " 1000",
                                      "1000 ",
                                      "86400001",
                                      "4294967297",
                                      "99999999999999999999",
                                      "",
                                      "1.5",
                                      "0x10"};
    char extra[128];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(extra, sizeof extra, "&answer_timeout_ms=%s", bad[i]);
        open_refused(reg, extra, PL_EINVAL, "answer_timeout_ms");
    }
    open_refused(reg, "&answer_timeout_ms", PL_EINVAL, "answer_timeout_ms");
    cr_expect_eq(t_pg_number("SELECT count(*) FROM pg_namespace WHERE "
                             "nspname = 't_badopt'"),
                 0, "a refused open made the store");
    /* the most, and leading zeros, are read */
    static const char *const good[] = {"2000", "86400000", "0000030000"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char *store = t_pg_store_uri("t_goodopt");
        char uri[1024];
        snprintf(uri, sizeof uri, "%s&answer_timeout_ms=%s", store, good[i]);
        pl_engine *e = NULL;
        cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s: %s",
                     good[i], pl_errmsg());
        pl_engine_close(e);
        free(store);
    }
    pl_registry_free(reg);
}

/* A libpq option libpq refuses (a value it does not know, a parameter it
 * does not have) is the caller's error, PL_EINVAL with libpq's reason,
 * not a store that failed (PL_ESTORE), and nothing is made; a server
 * that is not there stays PL_ESTORE. */
Test(pg_open, a_bad_libpq_option_is_the_callers_error)
{
    pl_registry *reg = t_registry();
    open_refused(reg, "&sslmode=bogus", PL_EINVAL, "sslmode");
    open_refused(reg, "&sslmode=bogus", PL_EINVAL, "bogus");
    open_refused(reg, "&gssencmode=never", PL_EINVAL, "gssencmode");
    open_refused(reg, "&target_session_attrs=any-old", PL_EINVAL,
                 "target_session_attrs");
    open_refused(reg, "&no_such_option=1", PL_EINVAL, "no_such_option");
    open_refused(reg, "&port=5432,5433", PL_EINVAL, "port");
    /* as many hostaddr values as hosts, or libpq refuses them */
    open_refused(reg, "&hostaddr=127.0.0.1,127.0.0.2", PL_EINVAL, "hostaddr");
    open_refused(reg, "&service=pl_no_such_service", PL_EINVAL,
                 "pl_no_such_service");
    /* a valid option whose server is not there: the store failed */
    pl_engine *e = NULL;
    cr_expect_eq(pl_engine_open(&e,
                                "postgresql:///postgres?host=/nonexistent-dir"
                                "&sslmode=prefer",
                                reg, NULL),
                 PL_ESTORE, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "cannot connect") != NULL, "%s", pl_errmsg());
    cr_expect_eq(t_pg_number("SELECT count(*) FROM pg_namespace WHERE "
                             "nspname = 't_badopt'"),
                 0, "a refused open made the store");
    pl_registry_free(reg);
}
