/*
 * pg_delete.c -- deleted runs on PostgreSQL (DELETING in store.h): their
 * tombstones read and expired.  A delete itself is a commit's statement
 * (pg_commit.c), which removes a run's steps with its records in one
 * transaction: what is left to purge is the parked rows of runs an older
 * store deleted (pl__pg_purge()).  Rows deleted are reclaimed
 * by the server's autovacuum, which keeps the tables' size flat under
 * steady churn.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A delete leaves no steps to purge.  What a purge removes here is the
 * parked rows (pg_flow.c) of runs gone: a run's row goes with its delete
 * and when its execution ends, but a store written before that holds
 * rows of runs deleted since, at most @p max_steps of them a call.
 */
int pl__pg_purge(pl__pg_store *s, size_t max_steps, size_t *removed, bool *more)
{
    *removed = 0;
    *more = false;
    if (s->read_only)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    char *sql = pl__asprintf(
        "DELETE FROM \"%s\".parked WHERE run IN (SELECT p.run FROM "
        "\"%s\".parked p WHERE NOT EXISTS (SELECT 1 FROM \"%s\".runs r "
        "WHERE r.num = p.run) LIMIT %zu)",
        s->schema, s->schema, s->schema, max_steps ? max_steps : 1);
    PGresult *r = sql ? PQexec(c, sql) : NULL;
    if (!sql)
        st = pl__err(PL_ENOMEM, "out of memory");
    else if (PQresultStatus(r) != PGRES_COMMAND_OK)
        st = pl__pg_err(s, c, r, "removing the parked rows of runs gone");
    else {
        *removed = (size_t)strtoull(PQcmdTuples(r), NULL, 10);
        *more = *removed == (max_steps ? max_steps : 1);
    }
    PQclear(r);
    free(sql);
    pl__pg_conn_put(s, c);
    return st;
}

/* A store made before tombstones, opened read-only, has no tombs table
 * (SQLSTATE 42P01, undefined_table): it has no deleted runs. */
static bool no_table(const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return code && strcmp(code, "42P01") == 0;
}

int pl__pg_tomb_get(pl__pg_store *s, const char *id, pl__buf *rec)
{
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    const char *vals[1] = {id};
    int lens[1] = {(int)strlen(id)}, fmts[1] = {1};
    PGresult *r = pl__pg_exec_q(s, c, Q_TOMB_GET, 1, vals, lens, fmts);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = no_table(r) ? PL_ENOTFOUND
                         : pl__pg_err(s, c, r, "reading a tombstone");
    else if (PQntuples(r) == 0)
        st = PL_ENOTFOUND;
    else {
        pl__buf_reset(rec);
        st = pl__buf_append(rec, PQgetvalue(r, 0, 0),
                            (size_t)PQgetlength(r, 0, 0));
    }
    if (st == PL_ENOTFOUND)
        pl__err(PL_ENOTFOUND, "no tombstone of run '%s'", id);
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}

/* The tombs table is indexed by expiry: @p after is not needed. */
int pl__pg_tombs_expire(pl__pg_store *s, int64_t now_us, size_t max,
                        pl__buf *after, size_t *removed, bool *more)
{
    (void)after;
    *removed = 0;
    *more = false;
    if (s->read_only)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    uint8_t now[8], lim[8];
    pl__put_be64(now, (uint64_t)now_us);
    pl__put_be64(lim, max ? max : 1);
    const char *vals[2] = {(const char *)now, (const char *)lim};
    int lens[2] = {8, 8}, fmts[2] = {1, 1};
    PGresult *r = pl__pg_exec_q(s, c, Q_TOMBS_EXPIRE, 2, vals, lens, fmts);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
        PQgetlength(r, 0, 0) != 8)
        st = pl__pg_err(s, c, r, "expiring tombstones");
    else {
        *removed = (size_t)pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        *more = *removed == (max ? max : 1);
    }
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}
