/*
 * pg_setup.c -- the PostgreSQL store's schema (its tables: LAYOUT in
 * pg_conn.c) made, upgraded, or found current.
 *
 * SETUP: what an open makes is the DDL of every file of the store, in this
 * order: the schema and its core tables (below), the pairs (pg_read.c),
 * the leases (pg_lease.c), the schedules (pg_sched.c), the timers and
 * inboxes (pg_time.c), the leases' marks (pg_lease.c), the flow
 * (pg_flow.c).  Each part is idempotent (CREATE ... IF NOT EXISTS, a
 * column or index made only when the catalogue lacks it, CREATE OR
 * REPLACE FUNCTION), and a writable open runs them all as one transaction
 * under the store's advisory lock, so processes opening a new schema at
 * once make it once, and the whole is one commit.
 *
 * CURRENT: the setup, as its last statement, records in meta a digest the
 * server computes (DIGEST below):
 *
 *   | meta row | v                                                   |
 *   |----------|-----------------------------------------------------|
 *   | 'setup'  | the first 64 bits of md5(ID || CATALOGUE), a bigint |
 *
 *   ID         the hex SHA-256 of this build's setup SQL for the schema
 *              (the DDL above, in order), so that a build whose setup
 *              differs in any byte has another ID, with no constant to
 *              remember to raise;
 *   CATALOGUE  what the schema holds now, read from the catalogue: the
 *              name and row version (xmin) of every row of pg_proc,
 *              pg_class, pg_attribute, pg_attrdef, pg_trigger and
 *              pg_constraint that belongs to the schema, sorted bytewise.
 *              Any DDL on the schema (a function replaced, even by the
 *              same body, a trigger, index or column made or dropped)
 *              writes new row versions, and changes it; the rows' texts
 *              are not read (deparsing them cost an open more than the
 *              round trip).
 *
 * Every writable open first asks, in one SELECT (one round trip,
 * nothing written): is the identity ours, the format 2, the parked rows
 * swept (pl__pg_parked_sweep()), and the 'setup' row equal to the digest
 * computed now with this build's ID?  Yes: the schema is what this
 * build's setup makes, and nothing else is run.  A read-only open, which
 * makes nothing, asks the identity and the format alone.  Anything else
 * (no row, another value, a table missing, an error) runs the whole open
 * as before: the schema identified (identify()), the setup's transaction
 * (a writable open), the format read and checked, the sweep; the setup
 * records the digest again.  So:
 *
 *   - a store an older library made (or one with a format 1 to upgrade)
 *     was recorded with another ID, or none: its setup runs;
 *   - an older library that opens the store after this one and replaces
 *     a function with its own body, or makes a trigger, index or column,
 *     changes the catalogue without knowing the row: the digest computed
 *     now differs from the one recorded, and this build's next open runs
 *     its setup again (each build's opens do so while both run: the
 *     deploy's whole time, as before this check);
 *   - a damaged row differs from the digest computed now (to equal it,
 *     the damage would have to write exactly the 64 bits it replaced, or
 *     those of a catalogue changed since): its open runs the setup, which
 *     writes it again;
 *   - another program's schema, or a newer format, is never current (the
 *     identity, the format): the whole open refuses it as before.
 *
 * A format the setup does not know is refused inside its transaction
 * (FORMAT_STATE), so nothing of this build is made in a newer store; the
 * format's read after it says which error (PL_EVERSION, PL_ECORRUPT).
 */
#include "pg_int.h"
#include "sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SQLSTATE of the setup's refusal of a format it does not know. */
#define FORMAT_STATE "PLFMT"

/* SQL: the digest of what the schema holds (CURRENT above), a bigint; %s:
 * the ID (64 hex digits), then the schema's name.  Each catalogue row is
 * named by its oid (a column by its table's and its number) and its row
 * version, xmin: every DDL statement writes new versions of the rows it
 * changes (CREATE OR REPLACE FUNCTION of the same body too), and a
 * VACUUM's freezing keeps xmin as it was. */
#define DIGEST                                                                 \
    "(SELECT ('x' || substr(md5('%s' || coalesce((SELECT string_agg(x, ',' "   \
    "ORDER BY x COLLATE \"C\") FROM ("                                         \
    "SELECT 'p' || p.oid::text || ':' || p.xmin::text AS x FROM pg_proc p "    \
    "WHERE p.pronamespace = ns.oid "                                           \
    "UNION ALL SELECT 'c' || c.oid::text || ':' || c.xmin::text FROM "         \
    "pg_class c WHERE c.relnamespace = ns.oid "                                \
    "UNION ALL SELECT 'a' || a.attrelid::text || '.' || a.attnum::text || "    \
    "':' || a.xmin::text FROM pg_class c JOIN pg_attribute a ON a.attrelid = " \
    "c.oid AND a.attnum > 0 WHERE c.relnamespace = ns.oid "                    \
    "UNION ALL SELECT 'd' || d.oid::text || ':' || d.xmin::text FROM "         \
    "pg_class c JOIN pg_attrdef d ON d.adrelid = c.oid WHERE c.relnamespace "  \
    "= ns.oid "                                                                \
    "UNION ALL SELECT 't' || t.oid::text || ':' || t.xmin::text FROM "         \
    "pg_class c JOIN pg_trigger t ON t.tgrelid = c.oid WHERE c.relnamespace "  \
    "= ns.oid "                                                                \
    "UNION ALL SELECT 'k' || k.oid::text || ':' || k.xmin::text FROM "         \
    "pg_constraint k WHERE k.connamespace = ns.oid) q), '')), 1, "             \
    "16))::bit(64)::bigint FROM pg_namespace ns WHERE ns.nspname = '%s')"

/* The DDL of the schema and its core tables (LAYOUT in pg_conn.c), then
 * the format's check (FORMAT_STATE). */
static char *core_ddl(const pl__pg_store *s)
{
    const char *n = s->schema;
    return pl__asprintf(
        "CREATE SCHEMA IF NOT EXISTS \"%s\";"
        "CREATE TABLE IF NOT EXISTS \"%s\".meta (k text PRIMARY KEY, "
        "v bigint NOT NULL);"
        "CREATE TABLE IF NOT EXISTS \"%s\".runs (id bytea PRIMARY KEY, "
        "num bigint NOT NULL UNIQUE, info bytea NOT NULL);"
        "CREATE TABLE IF NOT EXISTS \"%s\".state (run bigint PRIMARY KEY, "
        "v bytea NOT NULL);"
        /* a row holds a step, or a pair of the steps one commit wrote
         * whose second key is the one right after its first (v1, k2, v2:
         * pg_read.c, PAIRS); a store made before has them added */
        "CREATE TABLE IF NOT EXISTS \"%s\".steps (k bytea PRIMARY KEY, "
        "v bytea NOT NULL, v1 bytea, k2 bytea, v2 bytea);"
        "CREATE TABLE IF NOT EXISTS \"%s\".tombs (id bytea PRIMARY KEY, "
        "expires bigint NOT NULL, v bytea NOT NULL);"
        "DO $d$ BEGIN IF to_regclass('\"%s\".tombs_expires') IS NULL THEN "
        "CREATE INDEX tombs_expires ON \"%s\".tombs (expires); END IF; END $d$;"
        "CREATE SEQUENCE IF NOT EXISTS \"%s\".run_num;"
        "INSERT INTO \"%s\".meta (k, v) SELECT 'format', %d WHERE NOT EXISTS "
        "(SELECT 1 FROM \"%s\".meta WHERE k = 'format') AND NOT EXISTS "
        "(SELECT 1 FROM \"%s\".runs);"
        "INSERT INTO \"%s\".meta (k, v) VALUES ('identity', %lld) "
        "ON CONFLICT (k) DO NOTHING;"
        "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM \"%s\".meta WHERE k = "
        "'format' AND v IN (%d, %d)) THEN RAISE EXCEPTION 'the store''s "
        "format is not one this build reads' USING ERRCODE = '" FORMAT_STATE
        "'; END IF; END $d$;",
        n, n, n, n, n, n, n, n, n, n, FORMAT, n, n, n, IDENTITY, n,
        FORMAT_SINGLE, FORMAT);
}

/* This build's setup SQL for the schema into @p out (caller owns; free()),
 * and its ID (CURRENT above) into @p id. */
static int setup_sql(const pl__pg_store *s, char **out,
                     char id[2 * PL_HASH_LEN + 1])
{
    typedef char *(*ddl_fn)(const pl__pg_store *s);
    static const ddl_fn parts[] = {
        core_ddl,        pl__pg_pairs_ddl, pl__pg_lease_ddl, pl__pg_sched_ddl,
        pl__pg_time_ddl, pl__pg_marks_ddl, pl__pg_flow_ddl};
    pl__buf b = {0};
    int st = PL_OK;
    for (size_t i = 0; !st && i < sizeof parts / sizeof *parts; i++) {
        char *part = parts[i](s);
        st = part ? pl__buf_append(&b, part, strlen(part)) : PL_ENOMEM;
        free(part);
    }
    uint8_t h[PL_HASH_LEN];
    if (!st)
        st = pl__sha256(b.data, b.len, h);
    if (!st)
        st = pl__buf_append(&b, "", 1);
    if (st) {
        pl__buf_free(&b);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    pl__hex(id, h, sizeof h);
    *out = (char *)b.data;
    return PL_OK;
}

/* Whether the schema is current (CURRENT above), in one SELECT: false
 * for anything but a yes, an error included.  A read-only open: whether
 * the store is ours, of format 2, and has the tables every store has (a
 * table gone is a damaged store, which identify() then says). */
static bool current(pl__pg_store *s, PGconn *c, const char *id)
{
    const char *n = s->schema;
    char *sql =
        s->read_only
            ? pl__asprintf("SELECT coalesce((SELECT v FROM \"%s\".meta WHERE "
                           "k = 'identity') = %lld AND (SELECT v FROM "
                           "\"%s\".meta WHERE k = 'format') = %d AND "
                           "to_regclass('\"%s\".runs') IS NOT NULL AND "
                           "to_regclass('\"%s\".state') IS NOT NULL AND "
                           "to_regclass('\"%s\".steps') IS NOT NULL, false)",
                           n, IDENTITY, n, FORMAT, n, n, n)
            : pl__asprintf(
                  "SELECT coalesce((SELECT v FROM \"%s\".meta WHERE k = "
                  "'identity') = %lld AND (SELECT v FROM \"%s\".meta WHERE k "
                  "= 'format') = %d AND EXISTS (SELECT FROM \"%s\".meta WHERE "
                  "k = 'parked_swept') AND (SELECT v FROM \"%s\".meta WHERE k "
                  "= 'setup') = " DIGEST ", false)",
                  n, IDENTITY, n, FORMAT, n, n, id, n);
    if (!sql)
        return false;
    pl__pg_count(1, 1);
    PGresult *r = pl__pg_last(s, c, PQsendQuery(c, sql));
    free(sql);
    bool yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
               PQnfields(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return yes;
}

/* What the schema holds (see LAYOUT in pg_conn.c), before anything is
 * created in it: PL_ECORRUPT for another program's, PL_ENOTFOUND for none
 * when it must exist. */
static int identify(pl__pg_store *s, PGconn *c, bool must_exist)
{
    PGresult *r = pl__pg_exec(s, c, s->q[Q_EXISTS], 0, NULL, NULL);
    int st = PL_OK;
    bool empty = false, tables = false;
    /* results come in binary: a bigint, a bool */
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
        PQgetlength(r, 0, 0) != 8 || PQgetlength(r, 0, 1) != 1)
        st = pl__pg_err(s, c, r, "looking for the schema");
    else {
        empty = !pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        tables = *PQgetvalue(r, 0, 1) != 0;
    }
    PQclear(r);
    if (st || empty)
        return st ? st
               : must_exist
                   ? pl__err(PL_ENOTFOUND,
                             "store '%s' does not exist (no schema %s)",
                             s->path, s->schema)
                   : PL_OK;
    bool marked = false;
    if (tables) {
        char *sql = pl__asprintf(
            "SELECT coalesce((SELECT v = %lld FROM \"%s\".meta WHERE k = "
            "'identity'), EXISTS (SELECT 1 FROM \"%s\".meta WHERE k = "
            "'format'))",
            IDENTITY, s->schema, s->schema);
        if (!sql)
            return pl__err(PL_ENOMEM, "out of memory");
        r = pl__pg_exec(s, c, sql, 0, NULL, NULL);
        free(sql);
        /* a meta table of another shape is another program's */
        marked = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
                 PQgetlength(r, 0, 0) == 1 && *PQgetvalue(r, 0, 0) != 0;
        PQclear(r);
    }
    if (!marked)
        return pl__err(PL_ECORRUPT,
                       "schema %s of '%s' holds another program's tables "
                       "(or a damaged store: its identity, or one of its "
                       "tables, gone), not a policyledger store: nothing "
                       "was created in it",
                       s->schema, s->path);
    return PL_OK;
}

/* Read and check the format. */
static int check_format(pl__pg_store *s, PGconn *c)
{
    int st = PL_OK;
    PGresult *r = pl__pg_exec(s, c, s->q[Q_FORMAT], 0, NULL, NULL);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pl__pg_err(s, c, r, "reading the format");
    else if (PQntuples(r) != 1)
        st = pl__err(PL_ECORRUPT, "store '%s' holds runs but no format record",
                     s->path);
    else if (PQgetlength(r, 0, 0) != 8)
        st = pl__err(PL_ECORRUPT, "store '%s' has a malformed format record",
                     s->path);
    else {
        uint64_t f = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        if (f != FORMAT && f != FORMAT_SINGLE)
            st = pl__err(PL_EVERSION,
                         "store '%s' has format %lld; this build reads "
                         "formats %d and %d",
                         s->path, (long long)f, FORMAT_SINGLE, FORMAT);
        s->single = s->was_single = f == FORMAT_SINGLE && s->read_only;
    }
    PQclear(r);
    return st;
}

/* Run the setup's one transaction (SETUP above): @p ddl, then the digest
 * recorded with @p id.  A format it does not know: rolled back, and the
 * format's read says which error. */
static int run_setup(pl__pg_store *s, PGconn *c, const char *ddl,
                     const char *id)
{
    const char *n = s->schema;
    char *sql = pl__asprintf(
        "BEGIN;"
        "SELECT pg_advisory_xact_lock(hashtext('policyledger store %s'));"
        "%s"
        "INSERT INTO \"%s\".meta (k, v) SELECT 'setup', " DIGEST
        " ON CONFLICT (k) DO UPDATE SET v = excluded.v;"
        "COMMIT",
        n, ddl, n, id, n);
    if (!sql)
        return pl__err(PL_ENOMEM, "out of memory");
    pl__pg_count(1, 1);
    PGresult *r = pl__pg_last(s, c, PQsendQuery(c, sql));
    free(sql);
    int st = PL_OK;
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        bool format = code && strcmp(code, FORMAT_STATE) == 0;
        st = pl__pg_err(s, c, r, "making the schema");
        PQclear(r);
        r = NULL;
        /* the statements after the error were not run: the transaction
         * BEGIN opened is left failed */
        if (PQtransactionStatus(c) == PQTRANS_INERROR)
            r = pl__pg_last(s, c, PQsendQuery(c, "ROLLBACK"));
        if (format && PQresultStatus(r) == PGRES_COMMAND_OK) {
            int fst = check_format(s, c);
            st = fst ? fst : st;
        }
    }
    PQclear(r);
    return st;
}

int pl__pg_setup(pl__pg_store *s, PGconn *c)
{
    char *ddl = NULL, id[2 * PL_HASH_LEN + 1];
    int st = setup_sql(s, &ddl, id);
    if (st || current(s, c, id)) {
        free(ddl);
        return st;
    }
    st = identify(s, c, s->read_only || s->no_create);
    if (!st && !s->read_only)
        st = run_setup(s, c, ddl, id);
    free(ddl);
    if (!st)
        st = check_format(s, c);
    if (!st)
        st = pl__pg_pairs_setup(s);
    if (!st && !s->read_only)
        st = pl__pg_parked_sweep(s, c); /* the parked rows of runs ended */
    return st;
}
