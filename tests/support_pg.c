/*
 * support_pg.c -- the test helpers of the PostgreSQL store (built with
 * PL_WITH_POSTGRESQL alone).
 */
#include "support.h"
#include "support_pgflip.h"

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
        } else if (in_from && strcmp(name, "meta") == 0) {
            /* but the copy's own 'setup' row, once it has one */
            snprintf(sql, sizeof sql,
                     "DELETE FROM \"%s\".meta WHERE k <> 'setup'; INSERT INTO "
                     "\"%s\".meta SELECT * FROM \"%s\".meta f WHERE f.k <> "
                     "'setup' OR NOT EXISTS (SELECT FROM \"%s\".meta WHERE k "
                     "= 'setup');",
                     ts, ts, fs, ts);
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

/* ---- the columns a bit-flip sweep damages (support_pgflip.h) ---- */

/* Table @p name of @p schema, from the catalogue: false if there is none. */
bool t_pg_find_table(PGconn *c, const char *schema, const char *name,
                     t_pg_table *t)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    const char *v[2] = {schema, name};
    PGresult *r = PQexecParams(
        c,
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
        "a.atttypid IN ('bytea'::regtype, 'int8'::regtype), "
        "EXISTS (SELECT FROM pg_index i WHERE i.indrelid = a.attrelid AND "
        "i.indisprimary AND a.attnum = ANY (i.indkey)) "
        "FROM pg_attribute a JOIN pg_class k ON k.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = k.relnamespace "
        "WHERE n.nspname = $1 AND k.relname = $2 AND k.relkind = 'r' AND "
        "a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        2, NULL, v, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    cr_assert_lt(PQntuples(r), T_PG_COLS_MAX);
    for (int i = 0; i < PQntuples(r); i++) {
        int k = t->n++;
        snprintf(t->col[k], sizeof t->col[k], "%s", PQgetvalue(r, i, 0));
        snprintf(t->type[k], sizeof t->type[k], "%s", PQgetvalue(r, i, 1));
        if (*PQgetvalue(r, i, 2) == 't')
            t->flip[t->n_flip++] = k;
        if (*PQgetvalue(r, i, 3) == 't')
            t->key[t->n_key++] = k;
    }
    PQclear(r);
    if (t->n)
        cr_assert_gt(t->n_key, 0, "table %s has no primary key", name);
    return t->n > 0;
}

/* Every row of table @p t in @p schema, its columns in binary. */
PGresult *t_pg_rows_of(PGconn *c, const char *schema, const t_pg_table *t)
{
    char q[1024];
    size_t w = (size_t)snprintf(q, sizeof q, "SELECT ");
    for (int i = 0; i < t->n; i++)
        w += (size_t)snprintf(q + w, sizeof q - w, "%s\"%s\"", i ? ", " : "",
                              t->col[i]);
    snprintf(q + w, sizeof q - w, " FROM \"%s\".\"%s\" ORDER BY 1", schema,
             t->name);
    return t_pg_params(c, q, 0, NULL, NULL, NULL, PGRES_TUPLES_OK);
}

/* Set column @p col of the row of @p t in @p schema whose key columns hold
 * @p keyv (binary values, @p keylen long) to @p val: 1 done, 0 refused
 * by the table (a unique key taken). */
int t_pg_set_col(PGconn *c, const char *schema, const t_pg_table *t, int col,
                 const uint8_t *val, size_t len, const char *const *keyv,
                 const int *keylen)
{
    char q[1024];
    size_t w = (size_t)snprintf(q, sizeof q,
                                "UPDATE \"%s\".\"%s\" SET \"%s\" = $1::%s "
                                "WHERE ",
                                schema, t->name, t->col[col], t->type[col]);
    const char *v[T_PG_COLS_MAX + 1] = {(const char *)val};
    int lens[T_PG_COLS_MAX + 1] = {(int)len}, fmts[T_PG_COLS_MAX + 1] = {1};
    for (int i = 0; i < t->n_key; i++) {
        int k = t->key[i];
        w += (size_t)snprintf(q + w, sizeof q - w, "%s\"%s\" = $%d::%s",
                              i ? " AND " : "", t->col[k], i + 2, t->type[k]);
        v[i + 1] = keyv[i];
        lens[i + 1] = keylen[i];
        fmts[i + 1] = 1;
    }
    PGresult *r = PQexecParams(c, q, t->n_key + 1, NULL, v, lens, fmts, 1);
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    int done = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!done)
        cr_assert(code && strcmp(code, "23505") == 0, "%s: %s", q,
                  PQresultErrorMessage(r));
    else
        cr_assert_str_eq(PQcmdTuples(r), "1", "%s: not one row", q);
    PQclear(r);
    return done;
}
