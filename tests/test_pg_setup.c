/*
 * test_pg_setup.c -- an open of a PostgreSQL store whose schema is current
 * runs none of the setup's DDL, and one whose schema is not runs it all
 * (ledger/pg/pg_setup.c, CURRENT), against a real server tests/pg_run.sh
 * starts.
 *
 * What the server wrote is read from its catalogue: the setup's CREATE OR
 * REPLACE FUNCTION gives every function of the schema a new row version
 * (a new xmin), and its record of the digest a new version of meta's
 * 'setup' row, even when nothing in them changed; an open that ran no
 * setup leaves every xmin as it was.
 */
#include "support.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(pg_setup, .fini = t_cleanup, .timeout = 240);

/* @p sql with each "%s" in it the schema @p schema, into @p q. */
static void fill(char *q, size_t n, const char *schema, const char *sql)
{
    size_t w = 0;
    for (const char *p = sql; *p; p++) {
        const char *add = p[0] == '%' && p[1] == 's' ? schema : NULL;
        size_t len = add ? strlen(add) : 1;
        cr_assert_lt(w + len, n, "query too long: %s", sql);
        memcpy(q + w, add ? add : p, len);
        w += len;
        p += add != NULL;
    }
    q[w] = '\0';
}

/* One value of @p sql (each %s in it the schema) on @p c, as text (the
 * caller frees; "" for NULL). */
static char *value(PGconn *c, const char *schema, const char *sql)
{
    char q[4096];
    fill(q, sizeof q, schema, sql);
    PGresult *r = PQexec(c, q);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", q,
                 PQerrorMessage(c));
    cr_assert_eq(PQntuples(r), 1, "%s: %d rows", q, PQntuples(r));
    char *v = strdup(PQgetvalue(r, 0, 0));
    cr_assert_not_null(v);
    PQclear(r);
    return v;
}

/* Run @p sql (each %s in it the schema), which returns no rows. */
static void run(PGconn *c, const char *schema, const char *sql)
{
    char q[4096];
    fill(q, sizeof q, schema, sql);
    PGresult *r = PQexec(c, q);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", q,
                 PQerrorMessage(c));
    PQclear(r);
}

/* The row versions of what a setup writes: every function of the schema
 * (its xmin) and every row of its meta table. */
static char *versions(PGconn *c, const char *schema)
{
    return value(c, schema,
                 "SELECT (SELECT string_agg(p.proname || ':' || p.xmin::text, "
                 "',' ORDER BY p.proname, p.oid) FROM pg_proc p JOIN "
                 "pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = "
                 "'%s') || ' | ' || (SELECT string_agg(k || ':' || v || ':' "
                 "|| xmin::text, ',' ORDER BY k) FROM \"%s\".meta)");
}

/* The body of function @p fn of the schema. */
static char *body(PGconn *c, const char *schema, const char *fn)
{
    char q[512];
    snprintf(q, sizeof q,
             "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = "
             "p.pronamespace WHERE n.nspname = '%%s' AND p.proname = '%s'",
             fn);
    return value(c, schema, q);
}

/* The store @p name, made and closed; its URI (free it). */
static char *made(const char *name, const pl_registry *reg)
{
    char *store = t_pg_store_uri(name);
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    return store;
}

/* Open @p store writable, submit a run of "echo" and have a worker take
 * it (the worker's take is pl_take(), a function of the setup) and
 * complete it. */
static void a_run_completes(const char *store, const pl_registry *reg,
                            const char *id)
{
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    cJSON *p = t_json("{\"x\": 1}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    t_worker w;
    t_worker_start(&w, e, 1);
    pl_run_status status = PL_RUN_SUBMITTED;
    for (int i = 0; i < 6000 && status != PL_RUN_COMPLETED; i++) {
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
        status = info->status;
        pl_run_info_free(info);
        struct timespec ts = {0, 10 * 1000 * 1000};
        if (status != PL_RUN_COMPLETED)
            nanosleep(&ts, NULL);
    }
    t_worker_stop(&w);
    cr_assert_eq(status, PL_RUN_COMPLETED, "run %s is %s", id,
                 pl_run_status_name(status));
    pl_engine_close(e);
}

Test(pg_setup, an_open_of_a_current_store_runs_no_setup)
{
    pl_registry *reg = t_registry();
    char *store = made("t_cur", reg);
    PGconn *c = t_pg_admin();
    char *before = versions(c, "t_cur");
    cr_assert(strstr(before, "setup:"), "no digest recorded: %s", before);
    for (int i = 0; i < 3; i++) {
        pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
        pl_engine_close(e);
    }
    char *after = versions(c, "t_cur");
    cr_expect_str_eq(after, before, "an open of a current store wrote");
    free(after);
    /* the probe sees a setup: with the digest's row gone, the next open
     * runs one, and every function gets a new version */
    run(c, "t_cur", "DELETE FROM \"%s\".meta WHERE k = 'setup'");
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    after = versions(c, "t_cur");
    cr_expect_str_neq(after, before, "the setup left no trace");
    char *again = versions(c, "t_cur");
    e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    free(after);
    after = versions(c, "t_cur");
    cr_expect_str_eq(after, again, "the setup ran twice");
    a_run_completes(store, reg, "cur-1");
    free(again);
    free(after);
    free(before);
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}

/* An older library, which knows nothing of the digest, opened the store
 * after this one and made it its own way: each change is seen at the next
 * open, whose setup makes the schema this build's again. */
Test(pg_setup, what_older_code_changed_is_set_up_again)
{
    pl_registry *reg = t_registry();
    char *store = made("t_old", reg);
    PGconn *c = t_pg_admin();
    char *ours = body(c, "t_old", "pl_take");
    static const char *const older[] = {
        /* a function's body replaced by an older one */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_take(who text, dur bigint) "
        "RETURNS TABLE (run bigint, gen bigint, expires_in bigint, owner "
        "text, id text) LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION "
        "'an older take'; END $f$",
        /* the triggers an older store lacks */
        "DROP TRIGGER units_sum ON \"%s\".units; DROP TRIGGER rates_sum ON "
        "\"%s\".rates",
        /* the columns an older store lacks, and the triggers that fill them */
        "DROP TRIGGER units_sum ON \"%s\".units; DROP TRIGGER rates_sum ON "
        "\"%s\".rates; ALTER TABLE \"%s\".rates DROP COLUMN sum; ALTER "
        "TABLE \"%s\".units DROP COLUMN sum",
        /* an index an older store lacks */
        "DROP INDEX \"%s\".leases_key_live",
        /* a function dropped */
        "DROP FUNCTION \"%s\".pl_ride(boolean, text)",
    };
    for (size_t i = 0; i < sizeof older / sizeof *older; i++) {
        run(c, "t_old", older[i]);
        pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
        pl_engine_close(e);
        char *now = body(c, "t_old", "pl_take");
        cr_expect_str_eq(now, ours, "change %zu: pl_take() not set up again",
                         i);
        free(now);
        char *got = value(c, "t_old",
                          "SELECT (SELECT count(*) FROM pg_trigger WHERE "
                          "tgname IN ('units_sum', 'rates_sum') AND "
                          "tgrelid::regclass::text LIKE '%s.' || '%' ) || ' ' "
                          "|| (to_regclass('\"%s\".leases_key_live') IS "
                          "NOT NULL)::text || ' ' || EXISTS (SELECT FROM "
                          "pg_attribute WHERE attrelid = "
                          "'\"%s\".rates'::regclass AND attname = 'sum' "
                          "AND NOT attisdropped)::text || ' ' || "
                          "(to_regprocedure('\"%s\".pl_ride(boolean, "
                          "text)') IS NOT NULL)::text");
        cr_expect_str_eq(got, "2 true true true",
                         "change %zu: not set up again", i);
        free(got);
        char id[16];
        snprintf(id, sizeof id, "old-%zu", i);
        a_run_completes(store, reg, id);
    }
    free(ours);
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}

/* Damage the store @p store as @p damage says (SQL, each %s the schema),
 * with pl_take() replaced as an older library would if @p older; then
 * open it: the open works and runs the setup, which leaves the schema as
 * it makes it (pl_take()'s body is @p take), and current (the next open
 * writes nothing). */
static void damaged_open(PGconn *c, const char *schema, const char *store,
                         const pl_registry *reg, const char *take,
                         const char *damage, bool older, const char *what)
{
    run(c, schema, damage);
    if (older)
        run(c, schema,
            "CREATE OR REPLACE FUNCTION \"%s\".pl_take(who text, dur bigint) "
            "RETURNS TABLE (run bigint, gen bigint, expires_in bigint, owner "
            "text, id text) LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION "
            "'an older take'; END $f$");
    char *before = versions(c, schema);
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    char *after = versions(c, schema);
    cr_assert_str_neq(after, before, "%s: no setup ran", what);
    char *now = body(c, schema, "pl_take");
    cr_assert_str_eq(now, take, "%s: pl_take() is not this build's", what);
    e = t_engine(store, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    char *again = versions(c, schema);
    cr_assert_str_eq(again, after, "%s: the schema was not current after",
                     what);
    free(now);
    free(before);
    free(after);
    free(again);
}

/* Every bit of the digest's row flipped, one at a time (its value's 64,
 * and its key's, where the key is still text), every other one with
 * pl_take() replaced as an older library would: each open works, runs the
 * setup (the row is not the digest computed now), and leaves the schema
 * as the setup makes it, and current. */
Test(pg_setup, a_damaged_digest_row_runs_the_setup)
{
    pl_registry *reg = t_registry();
    char *store = made("t_flip", reg);
    PGconn *c = t_pg_admin();
    char *take = body(c, "t_flip", "pl_take");
    for (int bit = 0; bit < 64; bit++) {
        char q[256], what[64];
        snprintf(q, sizeof q,
                 "UPDATE \"%%s\".meta SET v = v # (1::bigint << %d) WHERE k "
                 "= 'setup'",
                 bit);
        snprintf(what, sizeof what, "bit %d of the value", bit);
        damaged_open(c, "t_flip", store, reg, take, q, bit % 2, what);
    }
    /* the key: "setup" with a bit flipped is another row, which no open
     * reads; the setup writes 'setup' again */
    for (int bit = 0; bit < 5 * 8; bit++) {
        if (bit % 8 == 7)
            continue; /* not ASCII: not UTF-8 alone, the server refuses it */
        char key[6] = "setup", q[256], what[64];
        key[bit / 8] = (char)(key[bit / 8] ^ (1 << (bit % 8)));
        snprintf(q, sizeof q,
                 "DELETE FROM \"%%s\".meta WHERE k NOT IN ('setup', "
                 "'format', 'identity', 'parked_swept'); UPDATE \"%%s\".meta "
                 "SET k = '%s' WHERE k = 'setup'",
                 key);
        snprintf(what, sizeof what, "bit %d of the key", bit);
        damaged_open(c, "t_flip", store, reg, take, q, bit % 2, what);
    }
    a_run_completes(store, reg, "flip-1");
    free(take);
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}

/* A read-only open writes nothing: of a current store, and of one whose
 * digest differs (an older library's), which it reads as it is. */
Test(pg_setup, a_read_only_open_writes_nothing)
{
    pl_registry *reg = t_registry();
    char *store = made("t_ro", reg);
    a_run_completes(store, reg, "ro-1");
    PGconn *c = t_pg_admin();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.read_only = true;
    for (int older = 0; older < 2; older++) {
        if (older)
            run(c, "t_ro",
                "UPDATE \"%s\".meta SET v = v # 1 WHERE k = 'setup'");
        char *before = versions(c, "t_ro");
        pl_engine *e = NULL;
        cr_assert_eq(pl_engine_open(&e, store, reg, &o), PL_OK, "%s",
                     pl_errmsg());
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, "ro-1"), PL_OK, "%s", pl_errmsg());
        cr_expect_eq(info->status, PL_RUN_COMPLETED);
        pl_run_info_free(info);
        pl_engine_close(e);
        char *after = versions(c, "t_ro");
        cr_expect_str_eq(after, before, "a read-only open wrote (older %d)",
                         older);
        free(before);
        free(after);
    }
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}

/* A store of a newer format is refused (PL_EVERSION) before anything of
 * this build is made in it: a function it lacks stays missing. */
Test(pg_setup, a_newer_format_gets_nothing_of_this_build)
{
    pl_registry *reg = t_registry();
    char *store = made("t_newer", reg);
    PGconn *c = t_pg_admin();
    run(c, "t_newer",
        "UPDATE \"%s\".meta SET v = 99 WHERE k = 'format'; DROP FUNCTION "
        "\"%s\".pl_ride(boolean, text)");
    char *before = versions(c, "t_newer");
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, NULL), PL_EVERSION, "%s",
                 pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "format 99"), "%s", pl_errmsg());
    char *after = versions(c, "t_newer");
    cr_expect_str_eq(after, before, "the refused open wrote");
    free(before);
    free(after);
    PQfinish(c);
    pl_registry_free(reg);
    free(store);
}
