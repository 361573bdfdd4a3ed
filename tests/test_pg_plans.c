/*
 * test_pg_plans.c -- the plans the PostgreSQL server keeps for a commit's
 * statements, on a store of thousands of runs whose tables have their
 * statistics (tests/pg_run.sh starts the server): a call's statement, a
 * group's, and what each reads by index; a call's two steps, which its
 * statement sends as values, not arrays; its answer, one column after its
 * checks; and its fence, by generation alone when the lease is known to
 * have no key.  test_pg.c: the store's functions and round trips.
 */
#include "support.h"

#include "pg_int.h" /* the statements */
#include "pg_store.h"
#include "support_pg_plans.h"
#include "support_pg_store.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the plan the server keeps -------------------------------------------- */

/* A call's commit: steps @p from and @p from + 1 of @p run, under its
 * lease's fence of generation @p gen, and @p state if not NULL. */
static int call_commit(pl__pg_store *s, uint64_t run, uint64_t gen,
                       uint32_t from, const char *state)
{
    pl__batch w = {0};
    w.run = run;
    w.gen = gen;
    if (state)
        cr_assert_eq(pl__buf_append(&w.state, state, strlen(state)), PL_OK);
    uint8_t key[12];
    for (uint32_t i = from; i < from + 2; i++) {
        step_key(key, run, i);
        cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"x", 1), PL_OK);
    }
    pl__batch *one[1] = {&w};
    int st = pl__pg_commit(s, one, 1, false);
    pl__kvs_free(&w.steps);
    pl__buf_free(&w.state);
    return st;
}

/* Give store schema @p n 2,000 runs of 10 steps, a lease each, and its
 * tables their statistics: a store a generic plan must serve well. */
static void fill_large(PGconn *c, const char *n)
{
    char sql[512];
    fill_runs(c, n, 2000);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.leases (run, gen, owner, id, expires) SELECT "
             "num, 1, '', '', 0 FROM %s.runs",
             n, n);
    admin_sql(c, sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.steps SELECT int8send(num) || int4send(j), "
             "'\\x00' FROM %s.runs, generate_series(0, 9) j",
             n, n);
    admin_sql(c, sql);
    snprintf(sql, sizeof sql, "ANALYZE %s.runs, %s.state, %s.leases, %s.steps",
             n, n, n, n);
    admin_sql(c, sql);
}

/*
 * A call's commit on a store of thousands of runs whose tables have their
 * statistics: the server keeps one plan for the commit's statement after
 * its first few, where it used to plan it again for every commit (which
 * cost it more than running it); and the statement writes only what the
 * commit has: steps under a fence touch neither the parked runs, the
 * timers, the inbox's records consumed nor the states.
 */
Test(pg, a_call_commit_keeps_its_plan_on_a_large_store)
{
    pl__pg_store *s = pg_store("t_plan");
    PGconn *c = t_pg_admin();
    fill_large(c, "t_plan");
    uint64_t run = leased_run(s, "plan-a");
    uint64_t custom0, generic0, custom, generic;
    cr_assert_eq(pl__pg_plans_get(s, &custom0, &generic0), PL_OK, "%s",
                 pl_errmsg());
    for (uint32_t i = 0; i < 40; i++)
        cr_assert_eq(call_commit(s, run, 1, 2 * i, NULL), PL_OK, "%s",
                     pl_errmsg());
    cr_assert_eq(pl__pg_plans_get(s, &custom, &generic), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_leq(custom - custom0, 5, "%llu of 40 commits planned alone",
                  (unsigned long long)(custom - custom0));
    cr_expect_geq(generic - generic0, 35);
    cr_expect_eq(steps_of(s, run), 80);

    pl__pg_close(s);
    PQfinish(c);
}

/*
 * A commit's statement is prepared on a connection the first time a commit
 * of its shape goes through it, in the commit's own round trip; a commit
 * that fails then (its fence lost, a step that exists) keeps nothing, and
 * the next commit of that shape on the same connection goes through.
 */
Test(pg, a_shape_prepared_by_a_failed_commit_serves_the_next)
{
    pl__pg_store *s = pg_store("t_shape");
    uint64_t run = leased_run(s, "shape-a");
    pl__pg_counts c0 = counts();
    /* steps and a state under a fence of a generation the lease never had:
     * one round trip, its statement prepared in it, nothing written */
    cr_expect_eq(call_commit(s, run, 7, 0, "s1"), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "taken over by w1") != NULL, "%s",
              pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 2, "its preparation, and it");
    cr_expect_eq(steps_of(s, run), 0);
    pl__buf got = {0};
    cr_assert_eq(pl__pg_state_get(s, run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "s0", 2) == 0);
    /* the same shape again, the right generation: one statement */
    c0 = counts();
    cr_expect_eq(call_commit(s, run, 1, 0, "s2"), PL_OK, "%s", pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 1);
    cr_expect_eq(c1.connects, c0.connects, "the same connection");
    cr_expect_eq(steps_of(s, run), 2);
    cr_assert_eq(pl__pg_state_get(s, run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "s2", 2) == 0);
    /* a step that exists (the row's first: a writer appends where a
     * commit began, pg_read.c, PAIRS): the same shape fails whole, and
     * serves again */
    cr_expect_eq(call_commit(s, run, 1, 0, "s3"), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "exists already") != NULL, "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, run), 2);
    cr_expect_eq(call_commit(s, run, 1, 2, "s4"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, run), 4);
    cr_assert_eq(pl__pg_state_get(s, run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "s4", 2) == 0);
    pl__buf_free(&got);
    pl__pg_close(s);
}

/*
 * A group commit (a commit of several runs' calls) on the same large
 * store: one statement of arrays for every run, whose plan stays the
 * generic one (set for the group's transaction: the server, left to
 * itself, planned it again on every commit once the tables had their
 * statistics), reading the store by index; a lone call's commit after it,
 * on the same connection, still gets the server's own choice; and a fence
 * that fails still fails the whole group.
 */
Test(pg, a_group_commit_keeps_its_plans_on_a_large_store)
{
    pl__pg_store *s = pg_store("t_gplan");
    PGconn *c = t_pg_admin();
    fill_large(c, "t_gplan");
    uint64_t runs[3] = {leased_run(s, "gplan-a"), leased_run(s, "gplan-b"),
                        leased_run(s, "gplan-c")};
    pl__batch w[3];
    memset(w, 0, sizeof w);
    pl__batch *group[3] = {&w[2], &w[0], &w[1]}; /* not in run order */
    uint8_t key[12];
    uint64_t custom0, generic0, custom, generic;
    cr_assert_eq(pl__pg_plans_get(s, &custom0, &generic0), PL_OK, "%s",
                 pl_errmsg());
    pl__pg_counts c0 = counts();
    for (uint32_t i = 0; i < 40; i++) {
        for (int r = 0; r < 3; r++) {
            w[r].run = runs[r];
            w[r].gen = 1;
            pl__kvs_reset(&w[r].steps);
            for (uint32_t j = 2 * i; j < 2 * i + 2; j++) {
                step_key(key, runs[r], j);
                cr_assert_eq(pl__kvs_add(&w[r].steps, key, 12, key, 12), PL_OK);
            }
        }
        pl__buf_reset(&w[1].state); /* b's state every other commit */
        if (i % 2)
            cr_assert_eq(pl__buf_append(&w[1].state, "sb", 2), PL_OK);
        cr_assert_eq(pl__pg_commit(s, group, 3, false), PL_OK, "%s",
                     pl_errmsg());
    }
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 40, "a round trip a group");
    cr_expect_eq(c1.statements - c0.statements, 80,
                 "Q_GENERIC and Q_WRITE a group");
    /* the generic plan reads the store by index */
    char *sql = NULL;
    cr_assert_eq(pl__pg_write_sql(s, Q_WRITE, &sql), PL_OK);
    char *q = pl__asprintf("PREPARE gw AS %s", sql);
    cr_assert(q);
    admin_sql(c, q);
    free(q);
    free(sql);
    admin_sql(c, "SET plan_cache_mode = force_generic_plan");
    PGresult *res = PQexec(
        c, "EXPLAIN (COSTS OFF) EXECUTE gw('{1,2}', "
           "'{1,1}', "
           "'{f,f}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
           "'{}', '{}', '{1,2}', '{}')");
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(res));
    bool seq_scan = false;
    for (int i = 0; i < PQntuples(res); i++)
        seq_scan |= strstr(PQgetvalue(res, i, 0), "Seq Scan") != NULL;
    cr_expect_not(seq_scan, "no sequential scan in the group's plan");
    PQclear(res);

    cr_assert_eq(pl__pg_plans_get(s, &custom, &generic), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(custom, custom0, "%llu of 40 groups planned alone",
                 (unsigned long long)(custom - custom0));
    cr_expect_geq(generic - generic0, 80);
    for (int r = 0; r < 3; r++)
        cr_expect_eq(steps_of(s, runs[r]), 80);

    /* a lone call's commit on that connection: its own shape, planned as
     * the server chooses (the setting ended with the group's transaction):
     * for its values, the first time */
    cr_assert_eq(pl__pg_plans_get(s, &custom0, &generic0), PL_OK, "%s",
                 pl_errmsg());
    c0 = counts();
    pl__batch *lone[1] = {&w[0]};
    pl__kvs_reset(&w[0].steps);
    step_key(key, runs[0], 80);
    cr_assert_eq(pl__kvs_add(&w[0].steps, key, 12, key, 12), PL_OK);
    cr_assert_eq(pl__pg_commit(s, lone, 1, false), PL_OK, "%s", pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.connects, c0.connects, "the same connection");
    cr_assert_eq(pl__pg_plans_get(s, &custom, &generic), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(custom - custom0, 1, "%llu custom plans",
                 (unsigned long long)(custom - custom0));
    cr_expect_eq(generic, generic0);

    /* a fence that fails fails the group: nothing of it is written */
    for (int r = 0; r < 3; r++) {
        pl__kvs_reset(&w[r].steps);
        step_key(key, runs[r], 81);
        cr_assert_eq(pl__kvs_add(&w[r].steps, key, 12, key, 12), PL_OK);
    }
    w[2].gen = 9;
    cr_expect_eq(pl__pg_commit(s, group, 3, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "taken over by w1") != NULL, "%s",
              pl_errmsg());
    cr_expect_eq(steps_of(s, runs[0]), 81);
    for (int r = 1; r < 3; r++)
        cr_expect_eq(steps_of(s, runs[r]), 80);
    for (int r = 0; r < 3; r++) {
        pl__kvs_free(&w[r].steps);
        pl__buf_free(&w[r].state);
    }
    pl__pg_close(s);
    PQfinish(c);
}

/*
 * A group whose run's execution ends (its lease dropped) before another
 * batch of the same run: that batch's fence must not meet the dropped
 * lease, so the group goes as one statement that fences every run before
 * it drops any lease.  Both batches are written, the lease dropped, the
 * last state kept.
 */
Test(pg, a_group_that_drops_a_lease_then_writes_its_run)
{
    pl__pg_store *s = pg_store("t_gdrop");
    uint64_t run = leased_run(s, "gdrop-a");
    pl__batch a = {0}, b = {0};
    a.run = b.run = run;
    a.gen = b.gen = 1;
    a.release = true;
    uint8_t key[12];
    step_key(key, run, 0);
    cr_assert_eq(pl__kvs_add(&a.steps, key, 12, key, 12), PL_OK);
    step_key(key, run, 1);
    cr_assert_eq(pl__kvs_add(&b.steps, key, 12, key, 12), PL_OK);
    cr_assert_eq(pl__buf_append(&a.state, "sa", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&b.state, "sb", 2), PL_OK);
    pl__batch *group[2] = {&a, &b};
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__pg_commit(s, group, 2, false), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 2, "Q_GENERIC, Q_WRITE");
    cr_expect_eq(steps_of(s, run), 2);
    pl__lease l;
    cr_expect_eq(pl__pg_lease_get(s, run, &l), PL_ENOTFOUND);
    pl__buf got = {0};
    cr_assert_eq(pl__pg_state_get(s, run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sb", 2) == 0);
    pl__buf_free(&got);
    pl__batch_free(&a);
    pl__batch_free(&b);
    pl__pg_close(s);
}

/* A call's commit of steps @p from and @p from + 1 of @p run under
 * generation @p gen's fence (its batch's nokey_gen @p nokey_gen),
 * consuming inbox record @p seq (0: none): what it returns, and in
 * @p cancel whether it saw a cancellation. */
static int call_answer(pl__pg_store *s, uint64_t run, uint64_t gen,
                       uint64_t nokey_gen, uint32_t from, uint64_t seq,
                       bool *cancel)
{
    pl__batch w = {0};
    w.run = run;
    w.gen = gen;
    w.nokey_gen = nokey_gen;
    w.inbox_del = seq;
    two_steps(&w, run, from);
    pl__batch *one[1] = {&w};
    int st = pl__pg_commit(s, one, 1, false);
    if (st == PL_OK)
        cr_expect(w.inbox_known);
    *cancel = w.inbox_known && w.inbox_cancel;
    pl__batch_free(&w);
    return st;
}

/* A call's commit of steps @p from and @p from + 1 of @p run under its
 * lease's fence (generation 1): whether it saw a cancellation waiting. */
static bool commit_sees_cancel(pl__pg_store *s, uint64_t run, uint32_t from)
{
    bool cancel;
    cr_assert_eq(call_answer(s, run, 1, 0, from, 0, &cancel), PL_OK, "%s",
                 pl_errmsg());
    return cancel;
}

/* The statement of a call's commit that the store's connection in schema
 * @p n last ran, prepared by hand on @p c as callc. */
static void prepare_last_call(PGconn *c, const char *n)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT query FROM pg_stat_activity WHERE query LIKE "
             "'WITH k AS %%\"%s\".steps%%'",
             n);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQntuples(r), 1, "%s", PQresultErrorMessage(r));
    size_t qn = strlen(PQgetvalue(r, 0, 0)) + 128;
    char *q = malloc(qn);
    cr_assert(q);
    snprintf(q, qn,
             "PREPARE callc(int8, int8, bytea, bytea, bytea, bytea) AS %s",
             PQgetvalue(r, 0, 0));
    PQclear(r);
    admin_sql(c, q);
    free(q);
}

/* A cancellation delivered to @p run of schema @p n as the store delivers
 * one (pg_time.c, INBOX_PUT): its inbox record at @p seq, and its lease's
 * mark. */
static void deliver_cancel(PGconn *c, const char *n, uint64_t run, uint64_t seq)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "WITH i AS (INSERT INTO %s.inbox (run, seq, rec, cancel) VALUES "
             "(%llu, %llu, '\\x00', true)) UPDATE %s.leases SET cancel = "
             "true WHERE run = %llu",
             n, (unsigned long long)run, (unsigned long long)seq, n,
             (unsigned long long)run);
    admin_sql(c, sql);
}

/*
 * A call's commit reads no inbox: whether a cancellation waits is its
 * lease row's mark, which its fence reads anyway (LEASE MARKS, pg_time.c).
 * The signals waiting in the inbox (here 1,000 of the run's) cost it
 * nothing; the index of the cancellations alone, which commits without a
 * fence still look by, is made again when a store lacks it; and a
 * cancellation delivered is seen by the next commit.
 */
Test(pg, a_call_commit_reads_no_inbox)
{
    char *uri = t_pg_store_uri("t_cancel");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t run = leased_run(s, "cancel-a");
    PGconn *c = t_pg_admin();
    admin_sql(c, "DROP INDEX IF EXISTS t_cancel.inbox_cancel"); /* older */
    pl__pg_close(s);
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    PGresult *r = PQexec(c, "SELECT 1 FROM pg_indexes WHERE schemaname = "
                            "'t_cancel' AND indexname = 'inbox_cancel'");
    cr_expect_eq(PQntuples(r), 1, "the index made again on open");
    PQclear(r);

    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO t_cancel.inbox (run, seq, rec) SELECT %llu, g, "
             "'\\x00' FROM generate_series(1, 1000) g",
             (unsigned long long)run);
    admin_sql(c, sql);
    admin_sql(c, "ANALYZE t_cancel.inbox");
    cr_expect_not(commit_sees_cancel(s, run, 0));
    /* the plan the server keeps for that statement, as the store's
     * connection last ran it */
    prepare_last_call(c, "t_cancel");
    admin_sql(c, "SET plan_cache_mode = force_generic_plan");
    snprintf(sql, sizeof sql,
             "EXPLAIN (COSTS OFF) EXECUTE callc(%llu, 1, '\\x01', '\\x02', "
             "'\\x03', '\\x04')",
             (unsigned long long)run);
    r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    bool inbox = false, lease = false, seq_scan = false; /* a plan's row */
    for (int i = 0; i < PQntuples(r); i++) {
        inbox |= strstr(PQgetvalue(r, i, 0), "inbox") != NULL;
        lease |= strstr(PQgetvalue(r, i, 0), "leases_pkey") != NULL;
        seq_scan |= strstr(PQgetvalue(r, i, 0), "Seq Scan") != NULL;
    }
    PQclear(r);
    cr_expect_not(inbox, "the inbox not read");
    cr_expect(lease, "the lease row read by its key");
    cr_expect_not(seq_scan, "no sequential scan");
    deliver_cancel(c, "t_cancel", run, 1001);
    cr_expect(commit_sees_cancel(s, run, 2), "a cancellation waits");
    cr_expect_eq(steps_of(s, run), 4);
    pl__pg_close(s);
    PQfinish(c);
    free(uri);
}

/* ---- a call's answer ------------------------------------------------------- */

/* Whether the statement the store's connection in schema @p n last ran
 * has @p text in it. */
static bool last_commit_has(PGconn *c, const char *n, const char *text)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT strpos(query, '%s') > 0 FROM pg_stat_activity WHERE "
             "query LIKE '%%\"%s\".steps%%' AND pid <> pg_backend_pid()",
             text, n);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQntuples(r), 1, "%s", PQresultErrorMessage(r));
    bool has = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return has;
}

/*
 * A call's statement answers in one column, the run's number when a
 * cancellation waits, where Q_WRITE has the checks' two columns besides.
 * Its checks still come first: with a cancellation waiting, a fence lost
 * fails the commit with the fence's error, and an inbox record gone with
 * PL_EBUSY, each before a step is written; with its fence held, the commit
 * sees the cancellation.
 */
Test(pg, a_call_commit_answers_in_one_column)
{
    pl__pg_store *s = pg_store("t_answer");
    uint64_t run = leased_run(s, "answer-a");
    PGconn *c = t_pg_admin();
    char sql[512];
    deliver_cancel(c, "t_answer", run, 1);

    bool cancel = true;
    cr_expect_eq(call_answer(s, run, 2, 0, 0, 0, &cancel), PL_EBUSY,
                 "a generation the lease no longer has");
    cr_expect(strstr(pl_errmsg(), "taken over by w1") != NULL, "%s",
              pl_errmsg());
    cr_expect_not(cancel);
    cr_expect_eq(steps_of(s, run), 0);
    cr_expect_eq(call_answer(s, run, 1, 0, 0, 9, &cancel), PL_EBUSY,
                 "inbox record 9 is not there");
    cr_expect_eq(steps_of(s, run), 0);
    cr_expect_eq(call_answer(s, run, 1, 0, 0, 0, &cancel), PL_OK, "%s",
                 pl_errmsg());
    cr_expect(cancel, "the cancellation seen");

    /* the statement the store's connection last ran, run by hand */
    prepare_last_call(c, "t_answer");
    cr_expect_eq(steps_of(s, run), 2);
    snprintf(sql, sizeof sql,
             "EXECUTE callc(%llu, 1, '\\x01', '\\x02', '\\x03', "
             "'\\x04')",
             (unsigned long long)run);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    cr_expect_eq(PQnfields(r), 1, "one column");
    char want[24];
    snprintf(want, sizeof want, "%llu", (unsigned long long)run);
    cr_expect_str_eq(PQgetvalue(r, 0, 0), want, "the run: a cancellation");
    PQclear(r);
    pl__pg_close(s);
    PQfinish(c);
}

/*
 * A lease whose generation the engine knows to have no concurrency key (a
 * run it made without one) is fenced by its generation alone: the
 * statement leaves out the test of whether a keyed lease ran out, which
 * such a lease passes whatever the time.  A generation gone still fails,
 * and a keyed lease that ran out fails its holder's commit as before.
 */
Test(pg, a_lease_known_to_have_no_key_is_fenced_by_its_generation)
{
    pl__pg_store *s = pg_store("t_nokey");
    PGconn *c = t_pg_admin();
    uint64_t run = leased_run(s, "nokey-a");
    uint64_t keyed = leased_keyed_run(s, "nokey-b", "tenant");
    admin_sql(c, "UPDATE t_nokey.leases SET expires = 0"); /* both run out */
    bool cancel;
    cr_expect_eq(call_answer(s, run, 1, 1, 0, 0, &cancel), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_not(last_commit_has(c, "t_nokey", "expires"), "no clock");
    cr_expect_eq(call_answer(s, run, 1, 0, 2, 0, &cancel), PL_OK, "%s",
                 pl_errmsg());
    cr_expect(last_commit_has(c, "t_nokey", "expires"), "not known: asked");
    cr_expect_eq(call_answer(s, run, 2, 2, 4, 0, &cancel), PL_EBUSY,
                 "generation 2");
    cr_expect(strstr(pl_errmsg(), "taken over by w1") != NULL, "%s",
              pl_errmsg());
    cr_expect_eq(steps_of(s, run), 4);

    cr_expect_eq(call_answer(s, keyed, 1, 0, 0, 0, &cancel), PL_EBUSY,
                 "ran out");
    cr_expect(strstr(pl_errmsg(), "ran out") != NULL, "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, keyed), 0);
    pl__pg_close(s);
    PQfinish(c);
}

/* ---- a call's two steps as values ------------------------------------------ */

/* A commit under @p run's fence (generation 1) of @p n steps from seq
 * @p from, step i's value @p vals[i] of @p lens[i] bytes; then the run's
 * steps read back from the store must be all of them, byte for byte.
 * Whether the commit's statement inserted them as values (seen by @p c). */
static bool commit_and_read_back(pl__pg_store *s, PGconn *c, uint64_t run,
                                 uint32_t from, size_t n,
                                 const uint8_t *const *vals, const size_t *lens)
{
    pl__batch w = {0};
    w.run = run;
    w.gen = 1;
    uint8_t key[12];
    for (size_t i = 0; i < n; i++) {
        step_key(key, run, from + (uint32_t)i);
        cr_assert_eq(pl__kvs_add(&w.steps, key, 12, vals[i], lens[i]), PL_OK);
    }
    pl__batch *one[1] = {&w};
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c1.prepares - (c0.statements - c0.prepares), 1,
                 "one statement");
    bool values = last_commit_has(c, "t_pair",
                                  "steps (k, v, v1, k2, v2) VALUES");
    pl__kvs got = {0};
    step_key(key, run, from - 1); /* the scan's rows come after it */
    cr_assert_eq(pl__pg_scan(s, run, from ? key : NULL, from ? 12 : 0, 100,
                             (size_t)64 << 20, &got),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(got.n, n);
    for (size_t i = 0; i < n; i++) {
        step_key(key, run, from + (uint32_t)i);
        cr_expect(got.e[i].klen == 12 &&
                      memcmp(pl__kvs_key(&got, i), key, 12) == 0,
                  "step %zu's key", i);
        cr_expect_eq(got.e[i].vlen, lens[i], "step %zu", i);
        cr_expect(lens[i] == 0 ||
                      memcmp(pl__kvs_val(&got, i), vals[i], lens[i]) == 0,
                  "step %zu's value", i);
    }
    pl__kvs_free(&got);
    pl__batch_free(&w);
    return values;
}

/*
 * A call's commit writes two steps, its action_call and action_result: as
 * one row of values (the pair), where any other number of steps (or a
 * pair too large for it) goes as arrays, a row each.  Either way the steps
 * read back are the ones written, an empty value empty (not NULL) and
 * bytes past a NUL kept.
 */
Test(pg, a_call_commit_writes_its_two_steps_as_values)
{
    pl__pg_store *s = pg_store("t_pair");
    PGconn *c = t_pg_admin();
    uint64_t run = leased_run(s, "pair-a");

    const uint8_t nul[] = {'a', 0, 'b'};
    const uint8_t *pair[2] = {(const uint8_t *)"", nul};
    size_t pair_lens[2] = {0, sizeof nul};
    cr_expect(commit_and_read_back(s, c, run, 0, 2, pair, pair_lens),
              "a pair as values");

    const uint8_t *three[3] = {(const uint8_t *)"x", (const uint8_t *)"",
                               (const uint8_t *)"zz"};
    size_t three_lens[3] = {1, 0, 2};
    cr_expect_not(commit_and_read_back(s, c, run, 2, 3, three, three_lens),
                  "three as arrays");

    /* two values of 600 kB: past what goes as values, the arrays again */
    size_t big = 600 * 1000;
    uint8_t *a = malloc(big), *b = malloc(big);
    cr_assert(a && b);
    for (size_t i = 0; i < big; i++) {
        a[i] = (uint8_t)(i * 7);
        b[i] = (uint8_t)(i * 13 + 1);
    }
    const uint8_t *bigs[2] = {a, b};
    size_t big_lens[2] = {big, big};
    cr_expect_not(commit_and_read_back(s, c, run, 5, 2, bigs, big_lens),
                  "a large pair");
    free(a);
    free(b);

    /* and a pair once more, on the connection that has both shapes */
    cr_expect(commit_and_read_back(s, c, run, 7, 2, pair, pair_lens));
    cr_expect_eq(steps_of(s, run), 9);
    /* rows: the pairs one each, the rest one a step */
    PGresult *r = PQexec(c, "SELECT count(*), count(k2), count(v2), "
                            "count(v1) FROM t_pair.steps WHERE v1 IS NULL OR "
                            "v = '\\x91ccff'::bytea");
    cr_assert_eq(PQntuples(r), 1, "%s", PQresultErrorMessage(r));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "7");
    cr_expect_str_eq(PQgetvalue(r, 0, 1), "2");
    cr_expect_str_eq(PQgetvalue(r, 0, 2), "2");
    cr_expect_str_eq(PQgetvalue(r, 0, 3), "2",
                     "a pair's first in v1, its v "
                     "the mark");
    PQclear(r);
    pl__pg_close(s);
    PQfinish(c);
}

/* ---- the queue and the live leases, indexed apart --------------------------- */

/* Give store schema @p n a busy fleet: 10,000 runs running (their leases
 * live, ranked before the rest), 10,000 queued after them (a tenth with
 * a key) and 50 whose owned leases ran out (a crashed worker's), its
 * tables analyzed, then the running leases renewed. */
static void fill_fleet(PGconn *c, const char *n)
{
    char sql[1024];
    fill_runs(c, n, 20050);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.leases (run, gen, owner, id, expires, qrank, "
             "fkey, flimit) SELECT num, CASE WHEN num > 10000 AND num <= "
             "20000 THEN 0 ELSE 1 END, CASE WHEN num <= 10000 THEN 'w@h' "
             "WHEN num <= 20000 THEN '' ELSE 'gone@h' END, '', CASE WHEN num "
             "<= 10000 THEN (extract(epoch from clock_timestamp()) * "
             "1e6)::bigint + 3600000000 WHEN num <= 20000 THEN 0 ELSE 1 END, "
             "num, CASE WHEN num %% 10 = 0 THEN 'k' || num %% 7 END, CASE "
             "WHEN num %% 10 = 0 THEN 2 ELSE 0 END FROM %s.runs",
             n, n);
    admin_sql(c, sql);
    snprintf(sql, sizeof sql, "ANALYZE %s.runs, %s.state, %s.leases", n, n, n);
    admin_sql(c, sql);
    /* the running leases renewed three times since, no vacuum between:
     * where the server would read the table whole rather than an index */
    snprintf(sql, sizeof sql,
             "ALTER TABLE %s.leases SET (autovacuum_enabled = false)", n);
    admin_sql(c, sql);
    snprintf(sql, sizeof sql,
             "UPDATE %s.leases SET expires = expires + 1 WHERE owner = 'w@h'",
             n);
    for (int i = 0; i < 3; i++)
        admin_sql(c, sql);
}

/*
 * The queue and the live leases indexed apart: a take reads the queue's
 * head by leases_queue (the queued runs alone) and the owned leases run
 * out by leases_live, never passing the 10,000 running runs ahead; the
 * keyed take (pl_take()) walks the same two indexes; an idle worker's
 * look reads each at its first entry; and every other statement that
 * reads the leases (renewals, reads, the timers' takes, a run's load
 * with its key's count, by leases_key_live) still does so by index.  A
 * queued run's lease row has the primary key, the queue's and the queue
 * by key; an owned one the primary key and the live leases' (and, with a
 * key, its key's live leases'): the whole table's indexes, and
 * leases_fkey, are gone.  test_pg_keys.c: a key's count and the keyed
 * take at scale.
 */
Test(pg, the_queue_and_the_live_leases_are_read_by_their_indexes)
{
    pl__pg_store *s = pg_store("t_fleet");
    PGconn *c = t_pg_admin();
    fill_fleet(c, "t_fleet");
    pl__buf plan = {0};
    lease_indexes(c, "t_fleet", &plan); /* five, and no other */
    const char *v = (const char *)plan.data;
    int n = 0;
    for (const char *p = v; (p = strchr(p, '|')); p++)
        n++;
    cr_expect(n == 4 && strstr(v, "leases_key_live:") == v &&
                  strstr(v, "|leases_key_queue:") &&
                  strstr(v, "|leases_live:") && strstr(v, "|leases_pkey:") &&
                  strstr(v, "|leases_queue:"),
              "%s", v);
    admin_sql(c, "SET plan_cache_mode = force_generic_plan");
    static const struct {
        int which;
        const char *args, *uses[2];
    } st[] = {
        {L_TAKE, "('w9', 60000000)", {"leases_queue", "leases_live"}},
        {L_POLL, "", {"leases_queue", "leases_live"}},
        {L_RENEW, "('{1,2}', '{1,1}', 60000000)", {"leases_pkey", NULL}},
        {L_GETS, "('{1,2}')", {"leases_pkey", NULL}},
        {L_TAKE_DUES, "('w9', 60000000, 8, 100, 1000000)", {NULL, NULL}},
        {L_RUN_LOAD, "('\\x00')", {"leases_key_live", NULL}},
    };
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
        plan_of(c, s, st[i].which, st[i].args, &plan);
        cr_expect_not(plan_has(&plan, "Seq Scan on leases"),
                      "statement %d reads the leases whole:\n%s", st[i].which,
                      (const char *)plan.data);
        for (int j = 0; j < 2; j++)
            cr_expect(!st[i].uses[j] || plan_has(&plan, st[i].uses[j]),
                      "statement %d does not use %s:\n%s", st[i].which,
                      st[i].uses[j], (const char *)plan.data);
    }
    /* pl_take()'s walk, as the server runs it (auto_explain's plans of
     * its statements, sent as notices), in a transaction rolled back: the
     * queue's head, run 10,001, taken past the running runs */
    explain_into(c, &plan);
    admin_sql(c, "BEGIN");
    PGresult *r = PQexec(c, "SELECT run FROM t_fleet.pl_take('w9', 60000000)");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "10001");
    PQclear(r);
    admin_sql(c, "ROLLBACK");
    expect_no_seq_scan(&plan);
    cr_expect(plan_has(&plan, "leases_queue") && plan_has(&plan, "leases_live"),
              "%s", (const char *)plan.data);
    plans_end(c, &plan, s);
}

/*
 * A store made before the queue and the live leases were indexed apart
 * (leases_qrank and leases_expires, each of the whole table), and before
 * the keys' live leases and queues were (leases_fkey, of every keyed
 * row), is converted when it is opened to write: the new made, the old
 * dropped, under the store's lock, and its queue taken in order after it.
 */
Test(pg, an_old_stores_lease_indexes_are_converted_at_open)
{
    char *uri = t_pg_store_uri("t_oldidx");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t run = leased_run(s, "old-a");
    pl__pg_close(s);
    PGconn *c = t_pg_admin();
    admin_sql(c, "DROP INDEX t_oldidx.leases_queue, t_oldidx.leases_live");
    admin_sql(c, "CREATE INDEX leases_expires ON t_oldidx.leases (expires)");
    admin_sql(c, "CREATE INDEX leases_qrank ON t_oldidx.leases (qrank, run)");
    admin_sql(c, "DROP INDEX t_oldidx.leases_key_live, "
                 "t_oldidx.leases_key_queue");
    admin_sql(c, "CREATE INDEX leases_fkey ON t_oldidx.leases (fkey) WHERE "
                 "fkey IS NOT NULL");
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    pl__buf idx = {0};
    lease_indexes(c, "t_oldidx", &idx);
    const char *v = (const char *)idx.data;
    cr_expect(strstr(v, "leases_queue:") && strstr(v, "leases_live:"), "%s", v);
    cr_expect(strstr(v, "(qrank, run) WHERE (owner = ''::text)") &&
                  strstr(v, "(expires) WHERE (owner <> ''::text)"),
              "%s", v);
    cr_expect(!strstr(v, "leases_qrank") && !strstr(v, "leases_expires"), "%s",
              v);
    cr_expect(strstr(v, "leases_key_live:") && strstr(v, "leases_key_queue:") &&
                  !strstr(v, "leases_fkey"),
              "%s", v);
    pl__buf_free(&idx);
    /* the run, its lease dropped to the queue by hand, is taken */
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE t_oldidx.leases SET owner = '', gen = 0, expires = 0 "
             "WHERE run = %llu",
             (unsigned long long)run);
    admin_sql(c, sql);
    pl__lease l;
    bool taken = false;
    int st = pl__pg_take(s, "w2", 60000000, refuse_claim, NULL, &l, &taken);
    cr_expect_eq(st, PL_EBUSY, "%s", pl_errmsg());
    cr_expect(taken);
    cr_expect_eq(l.run, run);
    cr_expect_str_eq(l.owner, "w2");
    pl__pg_close(s);
    PQfinish(c);
    free(uri);
}

/*
 * A store made before the timers kept their runs' keys (no timers.fkey,
 * no timers_key) gains both when it is opened to write, each timer's key
 * filled from its run's parked row or lease, under the store's lock; and
 * a wake then passes the due timers of a full key to the run behind them.
 */
Test(pg, an_old_stores_timers_gain_their_keys_at_open)
{
    char *uri = t_pg_store_uri("t_oldtim");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    pl__pg_close(s);
    PGconn *c = t_pg_admin();
    admin_sql(c, "DROP INDEX t_oldtim.timers_key");
    admin_sql(c, "ALTER TABLE t_oldtim.timers DROP COLUMN fkey");
    /* nor the triggers that keep it */
    admin_sql(c, "DROP FUNCTION t_oldtim.pl_timer_key() CASCADE");
    fill_runs(c, "t_oldtim", 40);
    /* run 1 holds key a's one place; 2..30 parked with a, due; 31 due
     * without a key; 32 queued with key b, a delivery made it due */
    admin_sql(c, "INSERT INTO t_oldtim.leases (run, gen, owner, id, expires, "
                 "qrank, fkey, flimit) VALUES (1, 1, 'w@h', '', (extract("
                 "epoch from clock_timestamp()) * 1e6)::bigint + 3600000000, "
                 "1, 'a', 1), (32, 0, '', '', 0, 32, 'b', 1)");
    admin_sql(c, "INSERT INTO t_oldtim.parked SELECT i, 'a', 1 FROM "
                 "generate_series(2, 30) i");
    admin_sql(c, "INSERT INTO t_oldtim.timers (run, due, id, rec) SELECT i, "
                 "i, '', '\\x00' FROM generate_series(2, 32) i");
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    PGresult *r = PQexec(
        c, "SELECT count(*) FILTER (WHERE fkey = 'a'), count(*) FILTER "
           "(WHERE fkey IS NULL), string_agg(fkey, ',') FILTER (WHERE run = "
           "32), (SELECT indexdef FROM pg_indexes WHERE schemaname = "
           "'t_oldtim' AND indexname = 'timers_key'), (SELECT count(*) FROM "
           "pg_trigger g JOIN pg_proc f ON f.oid = g.tgfoid WHERE f.proname = "
           "'pl_timer_key' AND f.pronamespace = 't_oldtim'::regnamespace) "
           "FROM t_oldtim.timers");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "29");
    cr_expect_str_eq(PQgetvalue(r, 0, 1), "1");
    cr_expect_str_eq(PQgetvalue(r, 0, 2), "b");
    cr_expect(strstr(PQgetvalue(r, 0, 3), "(fkey, due, run)"), "%s",
              PQgetvalue(r, 0, 3));
    cr_expect_str_eq(PQgetvalue(r, 0, 4), "4"); /* leases 3, parked 1 */
    PQclear(r);
    /* past key a's 29 due timers (more than a batch): 31, then 32 */
    for (uint64_t want = 31; want <= 33; want++) {
        pl__lease l = {0};
        bool taken = false;
        int64_t next = 0;
        int st = pl__pg_take_due(s, "w2", 60000000, refuse_claim, NULL, &l,
                                 &taken, &next);
        cr_expect_eq(taken, want < 33, "wake of #%llu: %s",
                     (unsigned long long)want, pl_errmsg());
        cr_expect(!taken || l.run == want, "woke #%llu, not #%llu",
                  (unsigned long long)l.run, (unsigned long long)want);
        cr_expect_eq(st, taken ? PL_EBUSY : PL_ENOTFOUND, "%s", pl_errmsg());
    }
    pl__pg_close(s);
    PQfinish(c);
    free(uri);
}
