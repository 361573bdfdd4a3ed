/*
 * test_pg_keys.c -- concurrency keys on PostgreSQL at scale (pg_flow.c,
 * KEYS; docs/design.md §14): a key's count reads its live leases alone
 * (leases_key_live), never its queued runs; a take past a full key's
 * queue skips it by the keys' heads and the queued runs without a key
 * (leases_key_queue, the queue by key), never walking it; and the
 * order that skip keeps: a key's runs in queue order, a key's head held
 * by another transaction passed over with its key, a crashed worker's
 * lease in its place; a take past 2,000 full keys, each checked once,
 * and a wake past 2,000 full keys' due timers;
 * a timer's key, which follows its run's whatever statement changed
 * it; and a key or limit damaged (KEY SUMS), which admits no run.
 * test_pg_plans.c: the statements' plans.
 */
#define _GNU_SOURCE /* memmem() */
#include "support.h"

#include "pg_int.h" /* the statements */
#include "pg_store.h"
#include "support_pg_plans.h"
#include "support_pg_store.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(pg_keys, .timeout = 240);

/* Queue in schema @p n: lease rows for runs @p from..@p to (ranked by
 * number), with key @p key ("" none) of limit @p lim, owned by @p owner
 * ("": queued) until an hour from now, or (owner "gone@h") run out. */
static void leases_of(PGconn *c, const char *n, int from, int to,
                      const char *key, int lim, const char *owner)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.leases (run, gen, owner, id, expires, qrank, "
             "fkey, flimit) SELECT i, CASE WHEN '%s' = '' THEN 0 ELSE 1 END, "
             "'%s', '', CASE WHEN '%s' = '' THEN 0 WHEN '%s' = 'gone@h' THEN "
             "1 ELSE (extract(epoch from clock_timestamp()) * 1e6)::bigint + "
             "3600000000 END, i, NULLIF('%s', ''), %d FROM generate_series(%d, "
             "%d) i",
             n, owner, owner, owner, owner, key, *key ? lim : 0, from, to);
    admin_sql(c, sql);
}

/* Lease rows @p from..@p to, as leases_of() makes them. */
typedef struct span {
    int from, to;
    const char *key;
    int lim;
    const char *owner;
} span;

/* Store schema @p n's @p runs runs and the @p count spans of leases
 * @p q. */
static void queue_of(PGconn *c, const char *n, int runs, const span *q,
                     size_t count)
{
    fill_runs(c, n, runs);
    for (size_t i = 0; i < count; i++)
        leases_of(c, n, q[i].from, q[i].to, q[i].key, q[i].lim, q[i].owner);
}

/* Whether @p text occurs in @p plan fewer than @p most times.  By
 * memmem() within the plan's length: strstr() from each match on, which
 * AddressSanitizer's interceptor follows with a strlen() of the rest,
 * took 17 s of a sanitized run for the 2,000 keys' plans (megabytes). */
static bool fewer_than(const pl__buf *plan, const char *text, int most)
{
    int k = 0;
    size_t n = strlen(text);
    const char *p = (const char *)plan->data, *end = p + plan->len;
    for (; k < most && (p = memmem(p, (size_t)(end - p), text, n)); p++)
        k++;
    return k < most;
}

/* Call @p sql (one value), in a transaction rolled back, its plans into
 * @p plan (explain_into()): the value is @p want, no statement read the
 * leases whole, and one read index @p index. */
static void call_uses(PGconn *c, pl__buf *plan, const char *sql,
                      const char *want, const char *index)
{
    pl__buf_reset(plan);
    admin_sql(c, "BEGIN");
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
                 PQresultErrorMessage(r));
    cr_expect(PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), want) == 0,
              "%s: %s, not %s", sql, PQntuples(r) ? PQgetvalue(r, 0, 0) : "",
              want);
    PQclear(r);
    admin_sql(c, "ROLLBACK");
    expect_no_seq_scan(plan);
    char *u = pl__asprintf("using %s", index);
    cr_assert(u);
    cr_expect(plan_has(plan, u), "%s: no %s:\n%s", sql, u,
              (const char *)plan->data);
    free(u);
}

/*
 * A key with 10,000 runs queued and one running, behind 1,000 runs
 * running without a key, then runs without a key and of a second key:
 * the take of the key's next run counts the key's live leases by
 * leases_key_live (not its queued runs, nor the 1,000 live leases); with
 * the key full, the take past its 10,000 queued runs reads the keys'
 * heads and the queue without a key by their indexes, in a few
 * statements, never walking the key's queue; a wake of the key's last
 * run looks for a run of it queued ahead by leases_key_queue, and a
 * key's room (pl_key_room()) is counted as a take counts.  No statement
 * reads the leases whole, with the plans of a connection's first calls
 * or the generic ones it keeps after.
 */
Test(pg_keys, a_keys_count_and_the_keyed_take_are_read_by_their_indexes)
{
    pl__pg_store *s = pg_store("t_kplan");
    PGconn *c = t_pg_admin();
    static const span q[] = {{1, 1000, "", 0, "w@h"},
                             {1001, 1001, "tenant", 2, "w@h"},
                             {1002, 11001, "tenant", 2, ""},
                             {11002, 11500, "other", 1, ""},
                             {11501, 12000, "", 0, ""}};
    queue_of(c, "t_kplan", 12000, q, sizeof q / sizeof *q);
    admin_sql(c, "ANALYZE t_kplan.runs, t_kplan.state, t_kplan.leases");
    pl__buf plan = {0};
    explain_into(c, &plan);
    call_uses(c, &plan, "SELECT run FROM t_kplan.pl_take('w9', 60000000)",
              "1002", "leases_key_live");

    /* the key full: the take passes its queue by the heads */
    admin_sql(c, "UPDATE t_kplan.leases SET owner = 'w@h', gen = 1, expires "
                 "= (extract(epoch from clock_timestamp()) * 1e6)::bigint + "
                 "3600000000 WHERE run = 1002");
    call_uses(c, &plan, "SELECT run FROM t_kplan.pl_take('w9', 60000000)",
              "11002", "leases_key_queue");
    cr_expect(plan_has(&plan, "Index Cond: ((fkey IS NULL) AND") &&
                  plan_has(&plan, "using leases_key_live"),
              "%s", (const char *)plan.data);
    /* a batch, the heads, the next batch, a count, the take: where a
     * walk of the key's queue ran 600 statements and more */
    cr_expect(fewer_than(&plan, "Query Text:", 16), "%s",
              (const char *)plan.data);

    /* a key's room, counted as a take counts */
    call_uses(c, &plan, "SELECT t_kplan.pl_key_room('tenant', 3)", "t",
              "leases_key_live");

    /* the wake of the key's last queued run: runs of its key ahead */
    admin_sql(c, "INSERT INTO t_kplan.timers (run, due, id, rec) VALUES "
                 "(11001, 0, 't', '\\x00')");
    call_uses(c, &plan, "SELECT count(*) FROM t_kplan.pl_wake(8)", "0",
              "leases_key_queue");

    /* the plans a connection keeps after its first few calls: the
     * generic ones read the same */
    admin_sql(c, "SET plan_cache_mode = force_generic_plan");
    call_uses(c, &plan, "SELECT run FROM t_kplan.pl_take('w9', 60000000)",
              "11002", "leases_key_queue");
    cr_expect(plan_has(&plan, "using leases_key_live") &&
                  fewer_than(&plan, "Query Text:", 16),
              "%s", (const char *)plan.data);
    call_uses(c, &plan, "SELECT t_kplan.pl_key_room('tenant', 3)", "t",
              "leases_key_live");
    call_uses(c, &plan, "SELECT count(*) FROM t_kplan.pl_wake(8)", "0",
              "leases_key_queue");
    plans_end(c, &plan, s);
}

/* The run store @p s's take takes (its lease kept), or with @p due a
 * wake of its due timers, or 0 if none (none it may start). */
static uint64_t took(pl__pg_store *s, bool due)
{
    pl__lease l = {0};
    bool taken = false;
    int64_t next = 0;
    int st = due ? pl__pg_take_due(s, "w3", 60000000, refuse_claim, NULL, &l,
                                   &taken, &next)
                 : pl__pg_take(s, "w2", 60000000, refuse_claim, NULL, &l,
                               &taken);
    if (!taken) {
        cr_expect_eq(st, PL_ENOTFOUND, "%s", pl_errmsg());
        return 0;
    }
    cr_expect_eq(st, PL_EBUSY, "%s", pl_errmsg());
    return l.run;
}

/*
 * Past a full key's 40 queued runs (more than a take reads at a time),
 * runs of two keys with room and runs without a key, ranked among more of
 * the full key's: each take takes the first the queue's order allows,
 * each key's runs in their order and no key past its limit; a place
 * freed goes to its key's first run queued.
 */
Test(pg_keys, a_take_past_a_full_keys_queue_takes_in_the_queues_order)
{
    pl__pg_store *s = pg_store("t_kfull");
    PGconn *c = t_pg_admin();
    static const span q[] = {
        {1, 1, "a", 1, "w@h"}, {2, 41, "a", 1, ""},  {42, 42, "b", 1, ""},
        {43, 43, "", 0, ""},   {44, 44, "c", 2, ""}, {45, 45, "b", 1, ""},
        {46, 47, "c", 2, ""},  {48, 48, "", 0, ""},  {49, 60, "a", 1, ""}};
    queue_of(c, "t_kfull", 60, q, sizeof q / sizeof *q);
    static const uint64_t order[] = {42, 43, 44, 46, 48, 0};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        cr_expect_eq(took(s, false), order[i], "take %zu", i);
    /* a's place freed: its first queued; then b's: its second */
    admin_sql(c, "DELETE FROM t_kfull.leases WHERE run = 1");
    cr_expect_eq(took(s, false), 2);
    admin_sql(c, "DELETE FROM t_kfull.leases WHERE run = 42");
    cr_expect_eq(took(s, false), 45);
    cr_expect_eq(took(s, false), 0);
    pl__pg_close(s);
    PQfinish(c);
}

/*
 * Past a full key's queue, a key's first run held by another transaction
 * (another take's head) is passed over with its key, so its second never
 * goes first; a crashed worker's lease of a key, run out, is taken in its
 * place in the queue's order, and its key then counts it.
 */
Test(pg_keys, a_take_past_a_full_keys_queue_keeps_held_and_crashed_runs)
{
    pl__pg_store *s = pg_store("t_kheld");
    PGconn *c = t_pg_admin();
    PGconn *o = t_pg_admin();
    static const span q[] = {{1, 1, "a", 1, "w@h"}, {2, 41, "a", 1, ""},
                             {42, 43, "b", 2, ""},  {44, 44, "d", 1, "gone@h"},
                             {45, 45, "", 0, ""},   {46, 46, "d", 1, ""}};
    queue_of(c, "t_kheld", 50, q, sizeof q / sizeof *q);
    admin_sql(o, "BEGIN");
    PGresult *r = PQexec(
        o, "SELECT 1 FROM t_kheld.leases WHERE run = 42 FOR UPDATE");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    PQclear(r);
    cr_expect_eq(took(s, false), 44); /* b passed over: 43 waits behind 42 */
    cr_expect_eq(took(s, false), 45);
    cr_expect_eq(took(s, false), 0); /* d's place is 44's; 46 waits */
    admin_sql(o, "COMMIT");
    cr_expect_eq(took(s, false), 42);
    cr_expect_eq(took(s, false), 43);
    cr_expect_eq(took(s, false), 0);
    PQfinish(o);
    pl__pg_close(s);
    PQfinish(c);
}

/*
 * Past the queued runs of 40 full keys (more keys than a take reads the
 * heads of at a time), each key's runs spread among the others': a key
 * with room ranked after them all, its name after theirs, goes first; then
 * the run without a key; then a key with room whose name is before
 * theirs; then none.
 */
Test(pg_keys, a_take_past_many_full_keys_reads_their_heads_in_turns)
{
    pl__pg_store *s = pg_store("t_kmany");
    PGconn *c = t_pg_admin();
    fill_runs(c, "t_kmany", 123);
    admin_sql(c, "INSERT INTO t_kmany.leases (run, gen, owner, id, expires, "
                 "qrank, fkey, flimit) SELECT i, CASE WHEN i <= 40 THEN 1 "
                 "ELSE 0 END, CASE WHEN i <= 40 THEN 'w@h' ELSE '' END, '', "
                 "CASE WHEN i <= 40 THEN (extract(epoch from "
                 "clock_timestamp()) * 1e6)::bigint + 3600000000 ELSE 0 END, "
                 "i, 'k' || lpad((i % 40)::text, 2, '0'), 1 FROM "
                 "generate_series(1, 120) i");
    static const span q[] = {{121, 121, "zz", 1, ""},
                             {122, 122, "", 0, ""},
                             {123, 123, "aa", 1, ""}};
    for (size_t i = 0; i < sizeof q / sizeof *q; i++)
        leases_of(c, "t_kmany", q[i].from, q[i].to, q[i].key, q[i].lim,
                  q[i].owner);
    cr_expect_eq(took(s, false), 121);
    cr_expect_eq(took(s, false), 122);
    cr_expect_eq(took(s, false), 123);
    cr_expect_eq(took(s, false), 0);
    pl__pg_close(s);
    PQfinish(c);
}

/*
 * Past 2,000 full keys (limit 1, one run running and one queued each,
 * their names in another order than their runs'), a key with room whose
 * one run is queued behind them all, then a run without a key: the take
 * takes the free key's run, a count a key and a few statements a batch
 * of keys (each key refused checked in a set, not against every key
 * refused before it), by the keys' indexes, with the plans of a
 * connection's first calls and the generic ones; then the run without a
 * key, then none; a place freed goes to its key's queued run.
 */
Test(pg_keys, a_take_past_2000_full_keys_takes_the_free_run_behind_them)
{
    pl__pg_store *s = pg_store("t_kwide");
    PGconn *c = t_pg_admin();
    fill_runs(c, "t_kwide", 4002);
    /* run i and run 2000 + i share key k(i * 7 mod 2000): their names
     * in another order than the queue's */
    admin_sql(c, "INSERT INTO t_kwide.leases (run, gen, owner, id, expires, "
                 "qrank, fkey, flimit) SELECT i, CASE WHEN i <= 2000 THEN 1 "
                 "ELSE 0 END, CASE WHEN i <= 2000 THEN 'w@h' ELSE '' END, '', "
                 "CASE WHEN i <= 2000 THEN (extract(epoch from "
                 "clock_timestamp()) * 1e6)::bigint + 3600000000 ELSE 0 END, "
                 "i, 'k' || lpad(((i % 2000) * 7 % 2000)::text, 4, '0'), 1 "
                 "FROM generate_series(1, 4000) i");
    leases_of(c, "t_kwide", 4001, 4001, "j", 1, "");
    leases_of(c, "t_kwide", 4002, 4002, "", 0, "");
    admin_sql(c, "ANALYZE t_kwide.runs, t_kwide.state, t_kwide.leases");
    pl__buf plan = {0};
    explain_into(c, &plan);
    call_uses(c, &plan, "SELECT run FROM t_kwide.pl_take('w9', 60000000)",
              "4001", "leases_key_queue");
    /* 2,000 counts and the batches' and heads' statements: 125 turns */
    cr_expect(plan_has(&plan, "using leases_key_live") &&
                  fewer_than(&plan, "Query Text:", 2000 + 2 * 130),
              "%.2000s", (const char *)plan.data);
    admin_sql(c, "SET plan_cache_mode = force_generic_plan");
    call_uses(c, &plan, "SELECT run FROM t_kwide.pl_take('w9', 60000000)",
              "4001", "leases_key_queue");
    cr_expect(plan_has(&plan, "using leases_key_live") &&
                  fewer_than(&plan, "Query Text:", 2000 + 2 * 130),
              "%.2000s", (const char *)plan.data);
    cr_expect_eq(took(s, false), 4001);
    cr_expect_eq(took(s, false), 4002);
    cr_expect_eq(took(s, false), 0);
    admin_sql(c, "DELETE FROM t_kwide.leases WHERE run = 1234");
    cr_expect_eq(took(s, false), 3234);
    cr_expect_eq(took(s, false), 0);
    plans_end(c, &plan, s);
}

/* ---- wakes: due timers past a full key's ---------------------------------- */

/* Runs @p from..@p to of schema @p n parked on timers due at their
 * numbers (long past), with key @p key ("": none) of limit @p lim, as a
 * parking commit leaves them (the timer keeps the run's key). */
static void parked_of(PGconn *c, const char *n, int from, int to,
                      const char *key, int lim)
{
    char sql[768];
    if (*key) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO %s.parked (run, fkey, flimit) SELECT i, '%s', "
                 "%d FROM generate_series(%d, %d) i",
                 n, key, lim, from, to);
        admin_sql(c, sql);
    }
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.timers (run, due, id, rec, fkey) SELECT i, i, "
             "'', '\\x00', NULLIF('%s', '') FROM generate_series(%d, %d) i",
             n, key, from, to);
    admin_sql(c, sql);
}

/*
 * 10,000 runs of a full key (limit 1, its place held) parked on due
 * timers, then one without a key and one of a key with room, 1,000 runs
 * running without a key: a wake
 * passes the full key's timers by the keys' heads and the timers without
 * a key (timers_key), in a few statements, never reading the key's
 * 10,000; with the plans of a connection's first calls and the generic
 * ones.
 */
Test(pg_keys, a_wake_past_a_full_keys_due_timers_reads_their_heads)
{
    pl__pg_store *s = pg_store("t_wplan");
    PGconn *c = t_pg_admin();
    /* the key's place held, and 1,000 runs running without a key */
    static const span q[] = {{1, 1, "tenant", 1, "w@h"},
                             {10004, 11003, "", 0, "w@h"}};
    queue_of(c, "t_wplan", 11003, q, 2);
    parked_of(c, "t_wplan", 2, 10001, "tenant", 1);
    parked_of(c, "t_wplan", 10002, 10002, "", 0);
    parked_of(c, "t_wplan", 10003, 10003, "other", 1);
    admin_sql(c, "ANALYZE t_wplan.timers, t_wplan.parked, t_wplan.leases");
    pl__buf plan = {0};
    explain_into(c, &plan);
    for (int generic = 0; generic < 2; generic++) {
        if (generic)
            admin_sql(c, "SET plan_cache_mode = force_generic_plan");
        call_uses(c, &plan,
                  "SELECT string_agg(run::text, ',') FROM t_wplan.pl_wake(8)",
                  "10002,10003", "timers_key");
        cr_expect(plan_has(&plan, "Index Cond: ((fkey IS NULL) AND"), "%s",
                  (const char *)plan.data);
        cr_expect_not(plan_has(&plan, "Seq Scan on timers"), "%s",
                      (const char *)plan.data);
        /* a batch, the keys, their heads, the timers without a key, the
         * key's count: where the walk read 625 batches */
        cr_expect(fewer_than(&plan, "Query Text:", 24), "%s",
                  (const char *)plan.data);
    }
    plans_end(c, &plan, s);
}

/*
 * Past a full key's 40 due timers (more than a wake reads at a time),
 * timers of two keys with room and without a key among more of the full
 * key's: one wake of eight takes them in due order, each key up to its
 * limit (a key's next timer read once its first is taken); wakes of one
 * take the same, one at a time; a place freed between two wakes goes to
 * its key's first due timer.
 */
Test(pg_keys, a_wake_past_a_full_keys_timers_takes_them_in_due_order)
{
    pl__pg_store *s = pg_store("t_wfull");
    PGconn *c = t_pg_admin();
    static const span q[] = {{1, 1, "a", 1, "w@h"}};
    queue_of(c, "t_wfull", 60, q, 1);
    static const span p[] = {{2, 41, "a", 1, ""},  {42, 42, "b", 1, ""},
                             {43, 43, "", 0, ""},  {44, 44, "c", 2, ""},
                             {45, 45, "b", 1, ""}, {46, 47, "c", 2, ""},
                             {48, 48, "", 0, ""},  {49, 60, "a", 1, ""}};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        parked_of(c, "t_wfull", p[i].from, p[i].to, p[i].key, p[i].lim);
    /* in one wake of eight, rolled back */
    pl__buf plan = {0};
    explain_into(c, &plan);
    call_uses(c, &plan,
              "SELECT string_agg(run::text, ',') FROM t_wfull.pl_wake(8)",
              "42,43,44,46,48", "timers_key");
    admin_sql(c, "SET auto_explain.log_min_duration = -1");
    static const uint64_t order[] = {42, 43, 44, 46, 48, 0};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        cr_expect_eq(took(s, true), order[i], "wake %zu", i);
    /* a's place freed: its first due; then b's: its second */
    admin_sql(c, "DELETE FROM t_wfull.leases WHERE run = 1");
    cr_expect_eq(took(s, true), 2);
    admin_sql(c, "DELETE FROM t_wfull.leases WHERE run = 42");
    cr_expect_eq(took(s, true), 45);
    cr_expect_eq(took(s, true), 0);
    pl__pg_close(s);
    PQfinish(c);
    pl__buf_free(&plan);
}

/*
 * Past the due timers of 40 full keys (more keys than a wake reads at a
 * time), each key's spread among the others': a key with room due after
 * them all, its name after theirs, is woken first; then the run without a
 * key; then a key with room whose name is before theirs; then none.  A
 * run executing (its lease live) whose timer is due is left, its key's
 * next due timer taken behind it.
 */
Test(pg_keys, a_wake_past_many_full_keys_reads_their_heads_in_turns)
{
    pl__pg_store *s = pg_store("t_wmany");
    PGconn *c = t_pg_admin();
    fill_runs(c, "t_wmany", 126);
    admin_sql(c, "INSERT INTO t_wmany.leases (run, gen, owner, id, expires, "
                 "qrank, fkey, flimit) SELECT i, 1, 'w@h', '', (extract(epoch "
                 "from clock_timestamp()) * 1e6)::bigint + 3600000000, i, "
                 "'k' || lpad((i % 40)::text, 2, '0'), 1 FROM "
                 "generate_series(1, 40) i");
    admin_sql(c, "INSERT INTO t_wmany.parked (run, fkey, flimit) SELECT i, "
                 "'k' || lpad((i % 40)::text, 2, '0'), 1 FROM "
                 "generate_series(41, 120) i");
    admin_sql(c, "INSERT INTO t_wmany.timers (run, due, id, rec, fkey) SELECT "
                 "i, i, '', '\\x00', 'k' || lpad((i % 40)::text, 2, '0') FROM "
                 "generate_series(41, 120) i");
    parked_of(c, "t_wmany", 121, 121, "zz", 2);
    parked_of(c, "t_wmany", 122, 122, "", 0);
    parked_of(c, "t_wmany", 123, 123, "aa", 1);
    /* zz's second, executing (its lease live: it parks again or ends),
     * then its third */
    static const span live[] = {{124, 124, "zz", 2, "w@h"}};
    leases_of(c, "t_wmany", live[0].from, live[0].to, live[0].key, live[0].lim,
              live[0].owner);
    parked_of(c, "t_wmany", 125, 125, "zz", 2);
    admin_sql(c, "UPDATE t_wmany.timers SET fkey = 'zz' WHERE run = 124");
    static const uint64_t order[] = {121, 122, 123, 0};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        cr_expect_eq(took(s, true), order[i], "wake %zu", i);
    /* zz's place: one live (124), one taken (121); 121's freed: 125 */
    admin_sql(c, "DELETE FROM t_wmany.leases WHERE run = 121");
    cr_expect_eq(took(s, true), 125);
    cr_expect_eq(took(s, true), 0);
    pl__pg_close(s);
    PQfinish(c);
}

/*
 * Past the due timers of 2,000 full keys (limit 1, one run running and
 * one parked on a due timer each, their names in another order than
 * their runs'), a key with room whose one run is due behind them all,
 * then a run without a key, and 40,000 runs waiting on timers not due:
 * the wake wakes the free key's run, a look and a count a
 * key and a few statements a batch of timers or keys (each key refused
 * checked in a set, not against every key refused before it), by the
 * timers' indexes, with the plans of a connection's first calls and the
 * generic ones; then the run without a key, then none; a place freed
 * goes to its key's due run.
 */
Test(pg_keys, a_wake_past_2000_full_keys_wakes_the_free_run_behind_them)
{
    pl__pg_store *s = pg_store("t_wwide");
    PGconn *c = t_pg_admin();
    fill_runs(c, "t_wwide", 44002);
    /* run i and run 2000 + i share key k(i * 7 mod 2000) */
    admin_sql(c, "INSERT INTO t_wwide.leases (run, gen, owner, id, expires, "
                 "qrank, fkey, flimit) SELECT i, 1, 'w@h', '', (extract(epoch "
                 "from clock_timestamp()) * 1e6)::bigint + 3600000000, i, "
                 "'k' || lpad(((i % 2000) * 7 % 2000)::text, 4, '0'), 1 FROM "
                 "generate_series(1, 2000) i");
    admin_sql(c, "INSERT INTO t_wwide.parked (run, fkey, flimit) SELECT i, "
                 "'k' || lpad(((i % 2000) * 7 % 2000)::text, 4, '0'), 1 FROM "
                 "generate_series(2001, 4000) i");
    admin_sql(c, "INSERT INTO t_wwide.timers (run, due, id, rec, fkey) SELECT "
                 "i, i, '', '\\x00', 'k' || lpad(((i % 2000) * 7 % "
                 "2000)::text, 4, '0') FROM generate_series(2001, 4000) i");
    parked_of(c, "t_wwide", 4001, 4001, "j", 1);
    parked_of(c, "t_wwide", 4002, 4002, "", 0);
    admin_sql(c, "INSERT INTO t_wwide.timers (run, due, id, rec) SELECT i, "
                 "9000000000000000, '', '\\x00' FROM generate_series(4003, "
                 "44002) i");
    admin_sql(c, "ANALYZE t_wwide.timers, t_wwide.parked, t_wwide.leases");
    pl__buf plan = {0};
    explain_into(c, &plan);
    for (int generic = 0; generic < 2; generic++) {
        if (generic)
            admin_sql(c, "SET plan_cache_mode = force_generic_plan");
        call_uses(c, &plan, "SELECT run FROM t_wwide.pl_wake(1)", "4001",
                  "timers_key");
        cr_expect_not(plan_has(&plan, "Seq Scan on timers"), "%.2000s",
                      strstr((const char *)plan.data, "Seq Scan on timers"));
        /* 2,000 keys' looks and counts, and the batches' and keys'
         * statements: 125 turns */
        cr_expect(plan_has(&plan, "using leases_key_live") &&
                      fewer_than(&plan, "Query Text:", 2 * 2001 + 2 * 130),
                  "%.2000s", (const char *)plan.data);
    }
    cr_expect_eq(took(s, true), 4001);
    cr_expect_eq(took(s, true), 4002);
    cr_expect_eq(took(s, true), 0);
    admin_sql(c, "DELETE FROM t_wwide.leases WHERE run = 1234");
    cr_expect_eq(took(s, true), 3234);
    cr_expect_eq(took(s, true), 0);
    plans_end(c, &plan, s);
}

/* Whether every timer of schema @p n keeps its run's key (TIMER_KEY:
 * its parked row's, else its lease's). */
static void timers_keep_keys(PGconn *c, const char *n, const char *after)
{
    char *sql = pl__asprintf(
        "SELECT count(*) FROM %s.timers t WHERE t.fkey IS DISTINCT FROM "
        "coalesce((SELECT p.fkey FROM %s.parked p WHERE p.run = t.run), "
        "(SELECT l.fkey FROM %s.leases l WHERE l.run = t.run))",
        n, n, n);
    cr_assert(sql);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "0",
                     "after %s: timers whose key "
                     "is not their run's",
                     after);
    PQclear(r);
    free(sql);
}

/*
 * A run's key changed without its timer written (its parked row gone or
 * of another key, a lease of a key made, a parked row made): the timer's
 * key follows, so past a full key's 40 due timers (a wake reads the
 * timers by key) a run that lost the full key, or has another, is woken,
 * and one that gained it waits with its key's.
 */
Test(pg_keys, a_timers_key_follows_its_runs_key)
{
    pl__pg_store *s = pg_store("t_wstale");
    PGconn *c = t_pg_admin();
    static const span q[] = {{1, 1, "a", 1, "w@h"}};
    queue_of(c, "t_wstale", 60, q, 1);
    parked_of(c, "t_wstale", 2, 44, "a", 1);
    parked_of(c, "t_wstale", 45, 45, "", 0);
    admin_sql(c, "DELETE FROM t_wstale.parked WHERE run = 42");
    timers_keep_keys(c, "t_wstale", "a parked row dropped");
    admin_sql(c, "UPDATE t_wstale.parked SET fkey = 'b' WHERE run = 43");
    timers_keep_keys(c, "t_wstale", "a parked row's key changed");
    admin_sql(c, "DELETE FROM t_wstale.parked WHERE run = 44");
    leases_of(c, "t_wstale", 44, 44, "c", 1, "");
    timers_keep_keys(c, "t_wstale", "a keyed lease made");
    admin_sql(c, "INSERT INTO t_wstale.parked VALUES (45, 'a', 1)");
    timers_keep_keys(c, "t_wstale", "a parked row made");
    /* queued with key a, a delivery made it due; its lease dropped by
     * the store's own statement (as after a claim refused) */
    leases_of(c, "t_wstale", 46, 46, "a", 1, "");
    parked_of(c, "t_wstale", 46, 46, "", 0);
    admin_sql(c, "UPDATE t_wstale.timers SET fkey = 'a' WHERE run = 46");
    cr_expect_eq(pl__pg_lease_release(s, 46, 0), PL_OK, "%s", pl_errmsg());
    timers_keep_keys(c, "t_wstale", "a lease released");
    static const uint64_t order[] = {42, 43, 44, 46, 0};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        cr_expect_eq(took(s, true), order[i], "wake %zu", i);
    timers_keep_keys(c, "t_wstale", "the wakes");
    admin_sql(c, "UPDATE t_wstale.leases SET fkey = NULL WHERE run = 44");
    admin_sql(c, "DELETE FROM t_wstale.leases WHERE run = 1");
    timers_keep_keys(c, "t_wstale", "a lease's key dropped, and a lease");
    cr_expect_eq(took(s, true), 2);
    pl__pg_close(s);
    PQfinish(c);
}

/* A take's claim of a run whose key the store found damaged: its ended
 * state ("\xdead") written with the lease dropped, as claim.c fails it;
 * any other refused (the lease alone is taken). */
static int fail_damaged_claim(const pl__taken *t, pl__buf *state, bool *drop,
                              void *user)
{
    (void)user;
    *drop = t->key_damaged;
    if (!t->key_damaged)
        return PL_EBUSY;
    pl__buf_reset(state);
    int st = pl__buf_append(state, "\xde\xad", 2);
    return st ? st
              : pl__err(PL_ECORRUPT, "run #%llu: its key is damaged",
                        (unsigned long long)t->lease.run);
}

/*
 * A key's limit raised or its name changed in a row past the server's
 * triggers (as the disk's damage would be; pg_flow.c, KEY SUMS) admits no
 * run past the limit: a queued run so damaged, taken by a take that
 * counted by what it read, is not executed: the take tells its claim so
 * (pl__taken.key_damaged), writes the ended state the claim answers and
 * drops its lease in its transaction (the run fails: claim.c), and the
 * next take goes on; a parked run's row so damaged is taken by a wake, the
 * same way, whether its key has room or not, and the next due woken.
 */
Test(pg_keys, a_damaged_key_admits_no_run_past_its_limit)
{
    pl__pg_store *s = pg_store("t_kdamage");
    PGconn *c = t_pg_admin();
    static const span q[] = {{1, 1, "a", 1, "w@h"},
                             {2, 2, "a", 1, ""},
                             {3, 3, "b", 1, ""},
                             {4, 4, "", 0, ""}};
    queue_of(c, "t_kdamage", 12, q, sizeof q / sizeof *q);
    parked_of(c, "t_kdamage", 10, 10, "a", 1);
    parked_of(c, "t_kdamage", 11, 11, "b", 1);
    admin_sql(c, "SET session_replication_role = replica");
    admin_sql(c, "UPDATE t_kdamage.leases SET flimit = 2 WHERE run = 2");
    admin_sql(c, "UPDATE t_kdamage.leases SET fkey = 'c' WHERE run = 3");
    admin_sql(c, "UPDATE t_kdamage.parked SET flimit = 9 WHERE run = 10");
    admin_sql(c, "SET session_replication_role = origin");
    for (uint64_t run = 2; run <= 3; run++) {
        pl__lease l = {0};
        bool taken = false;
        cr_expect_eq(pl__pg_take(s, "w2", 60000000, fail_damaged_claim, NULL,
                                 &l, &taken),
                     PL_ECORRUPT);
        cr_expect(taken && l.run == run, "took %llu, not %llu",
                  (unsigned long long)l.run, (unsigned long long)run);
        cr_expect(strstr(pl_errmsg(), "its key is damaged"), "%s", pl_errmsg());
    }
    PGresult *r = PQexec(
        c, "SELECT count(*) FROM t_kdamage.leases WHERE run IN (2, 3)");
    cr_expect(PQresultStatus(r) == PGRES_TUPLES_OK &&
                  strcmp(PQgetvalue(r, 0, 0), "0") == 0,
              "the damaged runs' leases were not dropped");
    PQclear(r);
    r = PQexec(c, "SELECT count(*) FROM t_kdamage.state WHERE run IN (2, 3) "
                  "AND v = '\\xdead'");
    cr_expect(PQresultStatus(r) == PGRES_TUPLES_OK &&
                  strcmp(PQgetvalue(r, 0, 0), "2") == 0,
              "the damaged runs' ended states were not written: %s",
              PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0)
                                                   : PQerrorMessage(c));
    PQclear(r);
    cr_expect_eq(took(s, false), 4);
    cr_expect_eq(took(s, false), 0);
    /* 10's key a is full: its damage, not its key, is what the wake
     * meets, and it is taken without a key to be failed, its ended state
     * written and its lease dropped in the wake's transaction */
    pl__lease l = {0};
    bool taken = false;
    int64_t next = 0;
    cr_expect_eq(pl__pg_take_due(s, "w3", 60000000, fail_damaged_claim, NULL,
                                 &l, &taken, &next),
                 PL_ECORRUPT, "%s", pl_errmsg());
    cr_expect(taken && l.run == 10, "woke %llu, not 10",
              (unsigned long long)l.run);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM t_kdamage.state WHERE "
                             "run = 10 AND v = '\\xdead'"),
                 1, "run 10's ended state was not written");
    cr_expect_eq(t_pg_number("SELECT (SELECT count(*) FROM t_kdamage.leases "
                             "WHERE run = 10) + (SELECT count(*) FROM "
                             "t_kdamage.parked WHERE run = 10)"),
                 0, "run 10's lease or parked row is left");
    admin_sql(c, "DELETE FROM t_kdamage.leases WHERE run = 1");
    cr_expect_eq(took(s, true), 11);
    cr_expect_eq(took(s, true), 0);
    pl__pg_close(s);
    PQfinish(c);
}
