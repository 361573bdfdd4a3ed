/*
 * support_pg_plans.h -- what test_pg_plans.c and test_pg_keys.c share:
 * the plans the server keeps for the store's statements, and those it
 * runs inside the store's functions (auto_explain's, as notices).
 */
#ifndef PL_SUPPORT_PG_PLANS_H
#define PL_SUPPORT_PG_PLANS_H

#include "support.h"

#include "pg_int.h" /* the statements */
#include "pg_store.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void admin_sql(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql,
                 PQresultErrorMessage(r));
    PQclear(r);
}

/* The indexes of schema @p n's leases table, "name:definition|..." in
 * name order, into @p out. */
static inline void lease_indexes(PGconn *c, const char *n, pl__buf *out)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT string_agg(indexname || ':' || indexdef, '|' ORDER BY "
             "indexname) FROM pg_indexes WHERE schemaname = '%s' AND "
             "tablename = 'leases'",
             n);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    pl__buf_reset(out);
    cr_assert_eq(pl__buf_append(out, PQgetvalue(r, 0, 0),
                                strlen(PQgetvalue(r, 0, 0)) + 1),
                 PL_OK);
    PQclear(r);
}

/* The notices a connection gets: auto_explain's plans. */
static inline void keep_notice(void *user, const char *message)
{
    pl__buf *b = user;
    cr_assert_eq(pl__buf_append(b, message, strlen(message)), PL_OK);
}

/* From now on the plans of every statement connection @p c runs, nested
 * ones too (a function's), with their rows and buffers, into @p plan (its
 * notices, appended). */
static inline void explain_into(PGconn *c, pl__buf *plan)
{
    PQsetNoticeProcessor(c, keep_notice, plan);
    pl__buf_reset(plan);
    admin_sql(c, "LOAD 'auto_explain'");
    admin_sql(c, "SET auto_explain.log_min_duration = 0");
    admin_sql(c, "SET auto_explain.log_nested_statements = on");
    admin_sql(c, "SET auto_explain.log_analyze = on");
    admin_sql(c, "SET auto_explain.log_buffers = on");
    admin_sql(c, "SET auto_explain.log_level = notice");
    admin_sql(c, "SET client_min_messages = notice");
}

/* The generic plan of statement @p which of store @p s (of pg_int.h's
 * lease statements) with arguments @p args, into @p plan. */
static inline void plan_of(PGconn *c, pl__pg_store *s, int which,
                           const char *args, pl__buf *plan)
{
    char *sql = NULL;
    cr_assert_eq(pl__pg_lease_sql(s, which, &sql), PL_OK);
    char *q = pl__asprintf("PREPARE st%d AS %s", which, sql);
    cr_assert(q);
    admin_sql(c, q);
    free(q);
    free(sql);
    q = pl__asprintf("EXPLAIN (COSTS OFF) EXECUTE st%d%s", which, args);
    cr_assert(q);
    PGresult *r = PQexec(c, q);
    free(q);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    pl__buf_reset(plan);
    for (int i = 0; i < PQntuples(r); i++) {
        const char *line = PQgetvalue(r, i, 0);
        cr_assert_eq(pl__buf_append(plan, line, strlen(line)), PL_OK);
        cr_assert_eq(pl__buf_append(plan, "\n", 2), PL_OK);
        plan->len--; /* NUL-terminated, the NUL not counted */
    }
    PQclear(r);
}

/* Whether @p plan (NUL-terminated) has @p text. */
static inline bool plan_has(const pl__buf *plan, const char *text)
{
    return plan->len && strstr((const char *)plan->data, text) != NULL;
}

/* The notices explain_into() kept in @p plan, NUL-terminated, read no
 * lease table whole. */
static inline void expect_no_seq_scan(pl__buf *plan)
{
    cr_assert_eq(pl__buf_append(plan, "", 1), PL_OK);
    cr_expect_not(plan_has(plan, "Seq Scan on leases"), "%s",
                  (const char *)plan->data);
}

/* The end of explain_into()'s plans on connection @p c, and of the test
 * of store @p s: both closed. */
static inline void plans_end(PGconn *c, pl__buf *plan, pl__pg_store *s)
{
    PQsetNoticeProcessor(c, NULL, NULL);
    pl__buf_free(plan);
    pl__pg_close(s);
    PQfinish(c);
}

/* Give store schema @p n @p count runs, each with a state. */
static inline void fill_runs(PGconn *c, const char *n, int count)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.runs SELECT int8send(i), nextval('%s.run_num'), "
             "'\\x00' FROM generate_series(1, %d) i",
             n, n, count);
    admin_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.state SELECT num, '\\x00' FROM %s.runs", n, n);
    admin_sql(c, sql);
}

/* A take's claim refused: the lease alone is taken. */
static inline int refuse_claim(const pl__taken *t, pl__buf *state, bool *drop,
                               void *user)
{
    (void)t;
    (void)state;
    (void)user;
    *drop = false;
    return PL_EBUSY;
}

#endif
