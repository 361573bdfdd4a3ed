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

Test(pg_open, an_open_waits_for_no_writer)
{
    char *store = t_pg_store_uri("t_open");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
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
              "the open waited for a lock a writer held (exit %d, signal "
              "%d)",
              WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
              WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    PGresult *r = PQexec(w, "COMMIT");
    PQclear(r);
    PQfinish(w);
    pl_registry_free(reg);
    free(store);
}
