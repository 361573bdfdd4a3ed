/*
 * pg_sched.c -- schedules on the PostgreSQL store (see SCHEDULES in
 * store.h).
 *
 * LAYOUT: the `schedules` table, made on a writable open when missing:
 *
 *   | column | type   | what                                        |
 *   |--------|--------|---------------------------------------------|
 *   | name   | text   | the schedule's name (primary key)           |
 *   | rec    | bytea  | its record (ledger/codec/schedrec.c)        |
 *
 * A schedule is written by a commit (pl__batch.sched_*): pg_commit.c sends
 * Q_SCHED in the commit's pipeline, before its Sync, so the write is part
 * of the commit's one transaction and one round trip.  The statement
 * puts, deletes, or replaces only over the record the writer read ($4 =
 * 'p', 'd' or 'c'); a replacement that finds another record changes
 * nothing, without an error.  A strict write ($4 = 's', sched_strict)
 * goes through pl_sched_swap(), which locks the row (or, for a new one,
 * the schedules' count) and writes only over the record read ($3; empty:
 * none), else raises SQLSTATE PLSCC (PL_EBUSY), rolling the commit back.
 *
 * THE MOST A STORE KEEPS.  A put of a new schedule goes through
 * pl_sched_room(), which takes the schedules' transaction-scoped advisory
 * lock and only then counts them: a new one past PL__SCHED_MAX raises
 * SQLSTATE PLSCH (PL_ELIMIT), rolling the commit back.  Under READ
 * COMMITTED (the connections' isolation) each query of a plpgsql function
 * reads a snapshot of its own, taken after the lock is held, so two puts
 * at once are counted one after the other: the second waits for the
 * first to commit and counts its schedule too.
 */
#include "pg_int.h"

#include <stdlib.h>
#include <string.h>

/* SQLSTATE of a new schedule past PL__SCHED_MAX (pl_sched_room()). */
#define FULL_STATE "PLSCH"
/* SQLSTATE of a strict write that found another record (pl_sched_swap()). */
#define CHANGED_STATE "PLSCC"

int pl__pg_sched_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    if (which == Q_SCHED)
        *out = pl__asprintf(
            "WITH d AS (DELETE FROM \"%s\".schedules WHERE $4::text = 'd' "
            "AND name = $1::text), p AS (INSERT INTO \"%s\".schedules "
            "(name, rec) SELECT $1::text, $2::bytea WHERE CASE WHEN $4::text "
            "= 'p' THEN \"%s\".pl_sched_room($1::text) WHEN $4::text = 's' "
            "THEN \"%s\".pl_sched_swap($1::text, $2::bytea, $3::bytea) "
            "ELSE false END "
            "ON CONFLICT (name) DO UPDATE SET rec = excluded.rec) "
            "UPDATE \"%s\".schedules SET rec = $2::bytea WHERE $4::text = "
            "'c' AND name = $1::text AND rec = $3::bytea",
            n, n, n, n, n);
    else
        *out = pl__asprintf("SELECT name, rec FROM \"%s\".schedules ORDER BY "
                            "name LIMIT %d",
                            n, PL__SCHED_MAX + 1);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

char *pl__pg_sched_ddl(const pl__pg_store *s)
{
    /* under the store's lock, as the other tables: processes opening a
     * new schema at once create it once */
    const char *n = s->schema;
    return pl__asprintf(
        "CREATE TABLE IF NOT EXISTS \"%s\".schedules (name text PRIMARY KEY, "
        "rec bytea NOT NULL);"
        /* a put's room (THE MOST A STORE KEEPS above) */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_sched_room(nm text) RETURNS "
        "boolean LANGUAGE plpgsql AS $f$ DECLARE n bigint; BEGIN "
        "PERFORM pg_advisory_xact_lock(hashtext('policyledger schedules %s')); "
        "IF EXISTS (SELECT FROM \"%s\".schedules WHERE name = nm) THEN "
        "RETURN true; END IF; "
        "SELECT count(*) INTO n FROM \"%s\".schedules; "
        "IF n >= %d THEN RAISE EXCEPTION 'schedule ''%%'': the store holds %% "
        "schedules, the most it keeps: delete one first', nm, %d USING "
        "ERRCODE = '" FULL_STATE "'; END IF; RETURN true; END $f$;"
        /* a strict write (pg_sched.c's head); false: the INSERT it is the
         * condition of inserts nothing, the write is done */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_sched_swap(nm text, r bytea, "
        "ex bytea) RETURNS boolean LANGUAGE plpgsql AS $f$ DECLARE cur bytea; "
        "ok boolean; BEGIN SELECT rec INTO cur FROM \"%s\".schedules WHERE "
        "name = nm FOR UPDATE; "
        "ok := CASE WHEN length(ex) = 0 THEN NOT FOUND ELSE cur IS NOT "
        "DISTINCT FROM ex END; "
        "IF ok AND length(ex) = 0 THEN PERFORM \"%s\".pl_sched_room(nm); "
        "INSERT INTO \"%s\".schedules (name, rec) VALUES (nm, r) ON "
        "CONFLICT (name) DO NOTHING; ok := FOUND; "
        "ELSIF ok THEN UPDATE \"%s\".schedules SET rec = r WHERE name = nm; "
        "END IF; "
        "IF NOT ok THEN RAISE EXCEPTION 'schedule ''%%'' changed while it was "
        "being written: read it again', nm USING ERRCODE = '" CHANGED_STATE
        "'; "
        "END IF; RETURN false; END $f$;",
        n, n, n, n, n, PL__SCHED_MAX, PL__SCHED_MAX, n, n, n, n, n);
}

int pl__pg_sched_failed(const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (code && strcmp(code, CHANGED_STATE) == 0) {
        const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        return pl__err(PL_EBUSY, "%s",
                       m ? m : "a schedule changed while it was written");
    }
    if (!code || strcmp(code, FULL_STATE) != 0)
        return PL_OK;
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    return pl__err(PL_ELIMIT, "%s",
                   m ? m : "a new schedule past the most a store keeps");
}

int pl__pg_sched_send(pl__pg_store *s, PGconn *c, const pl__batch *bt)
{
    const pl__buf *rec = bt->sched_rec, *expect = bt->sched_expect;
    const char *op = !rec ? "d" : bt->sched_strict ? "s" : expect ? "c" : "p";
    const char *vals[4] = {bt->sched_name, rec ? (const char *)rec->data : "",
                           expect ? (const char *)expect->data : "", op};
    int lens[4] = {(int)strlen(bt->sched_name), rec ? (int)rec->len : 0,
                   expect ? (int)expect->len : 0, 1};
    int fmts[4] = {1, 1, 1, 1};
    return pl__pg_send(s, c, Q_SCHED, 4, vals, lens, fmts,
                       "writing a schedule");
}

int pl__pg_scheds(pl__pg_store *s, pl__kvs *out)
{
    pl__kvs_reset(out);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    int fmts[1] = {1};
    PGresult *r = pl__pg_exec_q(s, c, Q_SCHEDS, 0, NULL, NULL, fmts);
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        /* a read-only open of a store made before schedules: none */
        if (!(s->read_only && state && strcmp(state, "42P01") == 0))
            st = pl__pg_err(s, c, r, "reading the schedules");
    } else if (PQntuples(r) > PL__SCHED_MAX) {
        st = pl__err(PL_ECORRUPT, "store '%s' holds more than %d schedules",
                     s->path, PL__SCHED_MAX);
    } else {
        for (int i = 0; !st && i < PQntuples(r); i++)
            st = pl__kvs_add(out, (const uint8_t *)PQgetvalue(r, i, 0),
                             (size_t)PQgetlength(r, i, 0),
                             (const uint8_t *)PQgetvalue(r, i, 1),
                             (size_t)PQgetlength(r, i, 1));
    }
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}
