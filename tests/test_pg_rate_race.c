/*
 * test_pg_rate_race.c -- a rate limit's take on the PostgreSQL store
 * (pg_flow.c) that waits for the budget's row while another session moves
 * the budget on to a later window: it is charged to that window, and the
 * time it records says so, against a real server that tests/pg_run.sh
 * starts for this binary.
 */
#include "support.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define WINDOW_MS 600000 /* the test stays in one window of the clock */
#define LIMIT 4

static void r_setup(void)
{
    cr_assert_eq(setenv("PL_TEST_STORE", "postgresql", 1), 0);
}

TestSuite(pg_rate_race, .init = r_setup, .fini = t_cleanup, .timeout = 120);

typedef struct take {
    pl_engine *e;
    int st;
    bool admitted;
    int64_t at_ms, retry_at_ms;
} take;

static void *taker(void *arg)
{
    take *t = arg;
    t->st = pl_rate_take(&t->admitted, &t->at_ms, &t->retry_at_ms, t->e, "api",
                         LIMIT, WINDOW_MS);
    return NULL;
}

static PGresult *r_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    cr_assert(es == PGRES_TUPLES_OK || es == PGRES_COMMAND_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    return r;
}

Test(pg_rate_race, a_take_that_waited_records_the_window_it_was_charged_to)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    take first = {e, 0, false, 0, 0};
    taker(&first);
    cr_assert_eq(first.st, PL_OK, "%s", pl_errmsg());
    cr_assert(first.admitted);
    int64_t w0 = first.at_ms - first.at_ms % WINDOW_MS;

    /* another session holds the budget's row ... */
    PGconn *c = t_pg_admin();
    char sql[512];
    snprintf(sql, sizeof sql,
             "BEGIN; SELECT count FROM \"%s\".rates WHERE name = 'api' FOR "
             "UPDATE",
             t_pg_schema(path));
    PQclear(r_exec(c, sql));
    /* ... while a take reads the clock and waits for it */
    take t = {e, -1, false, 0, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, taker, &t), 0);
    bool waiting = false;
    for (int i = 0; !waiting && i < 3000; i++) {
        PGresult *r = r_exec(c, "SELECT count(*) > 0 FROM pg_locks WHERE "
                                "NOT granted");
        waiting = PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        struct timespec nap = {0, 10000000L};
        if (!waiting)
            nanosleep(&nap, NULL);
    }
    cr_assert(waiting, "the take never waited for the budget's row");
    /* the other session moves the budget on to the next window, as a
     * process whose clock had passed into it would */
    snprintf(sql, sizeof sql,
             "UPDATE \"%s\".rates SET start_ms = start_ms + %d, count = 0 "
             "WHERE name = 'api'; COMMIT",
             t_pg_schema(path), WINDOW_MS);
    PQclear(r_exec(c, sql));
    pthread_join(th, NULL);
    PQfinish(c);

    cr_assert_eq(t.st, PL_OK, "%s", pl_errmsg());
    cr_assert(t.admitted, "the later window had room");
    cr_expect_eq(t.at_ms - t.at_ms % WINDOW_MS, w0 + WINDOW_MS,
                 "admitted at %lld, in the window of %lld, but charged to "
                 "the one of %lld",
                 (long long)t.at_ms, (long long)(t.at_ms - t.at_ms % WINDOW_MS),
                 (long long)(w0 + WINDOW_MS));
    pl_engine_close(e);
    pl_registry_free(reg);
}
