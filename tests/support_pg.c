/*
 * support_pg.c -- the test helpers of the PostgreSQL store (built with
 * PL_WITH_POSTGRESQL alone).
 */
#include "support.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PGresult *pg_exec(PGconn *c, const char *sql, ExecStatusType want)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), want, "%s: %s", sql,
                 PQresultErrorMessage(r));
    return r;
}

/* Run @p sql (statements, the last of which returns rows or none). */
static void pg_run(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    cr_assert(es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
}

long long t_pg_number(const char *sql)
{
    PGconn *c = t_pg_admin();
    PGresult *r = pg_exec(c, sql, PGRES_TUPLES_OK);
    cr_assert(PQntuples(r) >= 1 && PQnfields(r) >= 1, "%s: no number", sql);
    long long n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return n;
}

PGresult *t_pg_params(PGconn *c, const char *q, int n, const char *const *v,
                      const int *len, const int *fmt, int want)
{
    PGresult *r = PQexecParams(c, q, n, NULL, v, len, fmt, 1);
    cr_assert_eq((int)PQresultStatus(r), want, "%s: %s", q,
                 PQresultErrorMessage(r));
    return r;
}

const char *t_pg_schema(const char *store)
{
    const char *s = strstr(store, "&schema=");
    cr_assert_not_null(s, "not a test store on PostgreSQL: %s", store);
    return s + 8;
}

char *t_pg_store_uri(const char *schema)
{
    const char *base = t_pg_server();
    size_t n = strlen(base) + 2 * strlen(schema) + 64;
    char *uri = malloc(n);
    cr_assert_not_null(uri);
    snprintf(uri, n, "%s&schema=%s&application_name=%s", base, schema, schema);
    return uri;
}

PGconn *t_pg_admin(void)
{
    PGconn *c = PQconnectdb(t_pg_server());
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

void t_pg_restart(void)
{
    const char *cmd = getenv("PL_TEST_PG_RESTART");
    cr_assert(cmd && *cmd, "PL_TEST_PG_RESTART is not set: run this binary "
                           "through tests/pg_run.sh (ctest does)");
    char line[1024];
    snprintf(line, sizeof line, "%s >/dev/null 2>&1", cmd);
    cr_assert_eq(system(line), 0, "restarting the server failed: %s", cmd);
}

/* Every table and sequence of the schema in @p from, with their rows and
 * values, into the schema in @p to (which must not exist yet). */
void t_pg_copy(const char *to, const char *from)
{
    const char *fs = t_pg_schema(from), *ts = t_pg_schema(to);
    PGconn *c = t_pg_admin();
    char sql[1024];
    snprintf(sql, sizeof sql, "CREATE SCHEMA \"%s\"", ts);
    PQclear(pg_exec(c, sql, PGRES_COMMAND_OK));
    snprintf(sql, sizeof sql,
             "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace "
             "n ON n.oid = c.relnamespace WHERE n.nspname = '%s' AND "
             "c.relkind IN ('r', 'S') ORDER BY c.relkind DESC",
             fs);
    PGresult *rel = pg_exec(c, sql, PGRES_TUPLES_OK);
    for (int i = 0; i < PQntuples(rel); i++) {
        const char *name = PQgetvalue(rel, i, 0);
        if (*PQgetvalue(rel, i, 1) == 'S')
            snprintf(sql, sizeof sql,
                     "CREATE SEQUENCE \"%s\".\"%s\"; SELECT setval('\"%s\"."
                     "\"%s\"', last_value, is_called) FROM \"%s\".\"%s\"",
                     ts, name, ts, name, fs, name);
        else
            snprintf(sql, sizeof sql,
                     "CREATE TABLE \"%s\".\"%s\" (LIKE \"%s\".\"%s\" "
                     "INCLUDING ALL); INSERT INTO \"%s\".\"%s\" SELECT * "
                     "FROM \"%s\".\"%s\"",
                     ts, name, fs, name, ts, name, fs, name);
        pg_run(c, sql);
    }
    PQclear(rel);
    PQfinish(c);
}

void t_pg_refill(const char *to, const char *from)
{
    const char *fs = t_pg_schema(from), *ts = t_pg_schema(to);
    PGconn *c = t_pg_admin();
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT c.relname, c.relkind, EXISTS (SELECT 1 FROM pg_class f "
             "JOIN pg_namespace fn ON fn.oid = f.relnamespace WHERE "
             "fn.nspname = '%s' AND f.relname = c.relname) FROM pg_class c "
             "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname "
             "= '%s' AND c.relkind IN ('r', 'S')",
             fs, ts);
    PGresult *rel = pg_exec(c, sql, PGRES_TUPLES_OK);
    if (PQntuples(rel) == 0) { /* not made yet: a copy */
        PQclear(rel);
        PQfinish(c);
        t_pg_copy(to, from);
        return;
    }
    /* one transaction, one round trip: every table emptied and refilled,
     * every sequence set back */
    size_t cap = 64, len = 0;
    char *all = malloc(cap);
    cr_assert_not_null(all);
    len = (size_t)snprintf(all, cap, "BEGIN;");
    for (int i = 0; i < PQntuples(rel); i++) {
        const char *name = PQgetvalue(rel, i, 0);
        bool in_from = *PQgetvalue(rel, i, 2) == 't';
        if (*PQgetvalue(rel, i, 1) == 'S') {
            cr_assert(in_from, "sequence %s.%s is not in %s", ts, name, fs);
            snprintf(sql, sizeof sql,
                     "SELECT setval('\"%s\".\"%s\"', last_value, is_called) "
                     "FROM \"%s\".\"%s\";",
                     ts, name, fs, name);
        } else if (in_from) {
            snprintf(sql, sizeof sql,
                     "DELETE FROM \"%s\".\"%s\"; INSERT INTO \"%s\".\"%s\" "
                     "SELECT * FROM \"%s\".\"%s\";",
                     ts, name, ts, name, fs, name);
        } else {
            snprintf(sql, sizeof sql, "DELETE FROM \"%s\".\"%s\";", ts, name);
        }
        size_t n = strlen(sql);
        if (len + n + 8 > cap) {
            cap = 2 * (len + n + 8);
            all = realloc(all, cap);
            cr_assert_not_null(all);
        }
        memcpy(all + len, sql, n + 1);
        len += n;
    }
    memcpy(all + len, "COMMIT;", 8);
    PQclear(rel);
    pg_run(c, all);
    free(all);
    PQfinish(c);
}
