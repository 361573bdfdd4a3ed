/*
 * pg_delete.c -- deleted runs on PostgreSQL (DELETING in store.h): their
 * tombstones read and expired.  A delete itself is a commit's statement
 * (pg_commit.c), which removes a run's steps with its records in one
 * transaction: what is left to purge is the parked rows of runs an older
 * store deleted (pl__pg_purge()), and once, on a writable open, the rows
 * an older store left for runs that ended (pl__pg_parked_sweep()).  Rows
 * deleted are reclaimed
 * by the server's autovacuum, which keeps the tables' size flat under
 * steady churn.
 */
#include "pg_int.h"
#include "runrec.h"

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
    PGresult *r = sql ? pl__pg_last(s, c, PQsendQuery(c, sql)) : NULL;
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

/* Whether a run of @p status keeps its parked row: one that waits (its
 * wake needs its key), or executes (its next commit keeps or drops it). */
static bool keeps_parked(pl_run_status status)
{
    return status == PL_RUN_WAITING || status == PL_RUN_RUNNING ||
           status == PL_RUN_SUBMITTED;
}

/*
 * A commit that ends an execution without parking deletes its run's
 * parked row (pg_one.c, Q_WRITE); a store written before that holds the
 * rows of runs that ended then, which nothing else removes while the runs
 * are kept.  Once a store (the mark 'parked_swept' in meta), every parked
 * row's run is read, and the rows of runs that ended (or are suspended)
 * are deleted, each only while the run's state is still the one read.
 */
int pl__pg_parked_sweep(pl__pg_store *s, PGconn *c)
{
    const char *n = s->schema;
    char *sql = pl__asprintf("SELECT p.run, r.id, x.v FROM \"%s\".parked p "
                             "JOIN \"%s\".runs r ON r.num = p.run JOIN "
                             "\"%s\".state x ON x.run = p.run WHERE NOT "
                             "EXISTS (SELECT 1 FROM \"%s\".meta WHERE k = "
                             "'parked_swept')",
                             n, n, n, n);
    if (!sql)
        return pl__err(PL_ENOMEM, "out of memory");
    PGresult *r = pl__pg_exec(s, c, sql, 0, NULL, NULL);
    free(sql);
    int st = PQresultStatus(r) == PGRES_TUPLES_OK
                 ? PL_OK
                 : pl__pg_err(s, c, r, "reading the parked rows");
    pl__buf runs = {0}, states = {0};
    /* two arrays in text: the runs', "{1,2}", and their states' */
    size_t ended = 0;
    for (int i = 0; !st && i < PQntuples(r); i++) {
        char id[PL_MAX_RUN_ID + 1];
        int len = PQgetlength(r, i, 1);
        if (PQgetlength(r, i, 0) != 8 || len <= 0 || len > PL_MAX_RUN_ID)
            continue; /* malformed: not this sweep's to judge */
        memcpy(id, PQgetvalue(r, i, 1), (size_t)len);
        id[len] = '\0';
        pl__run_state rs;
        const uint8_t *v = (const uint8_t *)PQgetvalue(r, i, 2);
        size_t vlen = (size_t)PQgetlength(r, i, 2);
        if (pl__run_state_decode(&rs, id, v, vlen))
            continue; /* unreadable: left as it is */
        bool keep = keeps_parked(rs.status);
        pl__run_state_clear(&rs);
        if (keep)
            continue;
        char num[24];
        int nl = snprintf(num, sizeof num, "%s%llu", ended ? "," : "{",
                          (unsigned long long)pl__get_be64(
                              (const uint8_t *)PQgetvalue(r, i, 0)));
        st = pl__buf_append(&runs, num, (size_t)nl);
        /* a bytea in hex, quoted in the array: "\\x0a..." */
        const char *pre = ended ? ",\"\\\\x" : "{\"\\\\x";
        if (!st)
            st = pl__buf_append(&states, pre, strlen(pre));
        for (size_t j = 0; !st && j < vlen; j++) {
            char hx[3];
            snprintf(hx, sizeof hx, "%02x", v[j]);
            st = pl__buf_append(&states, hx, 2);
        }
        if (!st)
            st = pl__buf_append(&states, "\"", 1);
        ended++;
    }
    PQclear(r);
    if (!st && ended && !(st = pl__buf_append(&runs, "}", 2)))
        st = pl__buf_append(&states, "}", 2);
    if (!st) {
        /* the rows of runs whose state is still the one read, and the
         * mark, in one transaction */
        sql = pl__asprintf(
            "WITH d AS (DELETE FROM \"%s\".parked p USING unnest($1::bigint[], "
            "$2::bytea[]) AS u(run, v), \"%s\".state x WHERE p.run = u.run "
            "AND x.run = u.run AND x.v = u.v) INSERT INTO \"%s\".meta (k, v) "
            "VALUES ('parked_swept', 1) ON CONFLICT (k) DO NOTHING",
            n, n, n);
        const char *vals[2] = {ended ? (const char *)runs.data : "{}",
                               ended ? (const char *)states.data : "{}"};
        r = sql ? pl__pg_last(s, c,
                              PQsendQueryParams(c, sql, 2, NULL, vals, NULL,
                                                NULL, 0))
                : NULL;
        pl__pg_count(1, 1);
        if (!sql)
            st = pl__err(PL_ENOMEM, "out of memory");
        else if (PQresultStatus(r) != PGRES_COMMAND_OK)
            st = pl__pg_err(s, c, r, "removing the parked rows of runs ended");
        PQclear(r);
        free(sql);
    }
    pl__buf_free(&runs);
    pl__buf_free(&states);
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
