/*
 * test_pg_ride.c -- a signal or a cancellation that continues a waiting
 * run in the caller's thread on PostgreSQL, counted: the delivery rides
 * the run's next commit (core/replay/run.h, RIDES), so the signal is one
 * write transaction until the run parks or ends again, whether or not the
 * run has a concurrency key; the write transactions are the server's
 * transaction ids (every writing transaction takes one), the round trips
 * the library's own count (pl__pg_counts_get()).  Counts, never timings.
 * What a ride guarantees (a crash at any instant, races) is
 * test_time_crash.c's, run on this store as pg_test_time_crash.
 */
#include "support.h"

#include "internal.h"
#include "pg_store.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(pg_ride, .fini = t_cleanup, .timeout = 120);

/* "waiter": waits for "go", then completes; a cancellation ends it. */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* The server's next transaction id: each writing transaction takes one. */
static uint64_t next_xid(PGconn *c)
{
    PGresult *r = PQexec(c, "SELECT txid_snapshot_xmax("
                            "txid_current_snapshot())");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    uint64_t v = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* An engine on a schema of its own, with "waiter". */
static pl_engine *r_engine(const char *schema, pl_registry **reg)
{
    char *uri = t_pg_store_uri(schema);
    *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(*reg, "waiter", waiter, NULL), PL_OK);
    pl_engine *e = t_engine(uri, *reg, PL_DURABILITY_SYNC);
    free(uri);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

/* Submit "waiter" as @p id, under @p key (NULL: none) with @p limit, and
 * execute it: it parks. */
static void r_park(pl_engine *e, const char *id, const char *key,
                   unsigned limit)
{
    pl_action a = PL_ACTION_INIT;
    a.policy = "waiter";
    a.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? limit : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
}

/* What a signal or cancellation cost: write transactions, round trips. */
typedef struct cost {
    uint64_t txns, round_trips;
} cost;

typedef struct meter {
    PGconn *c;
    uint64_t x0;
    pl__pg_counts c0;
} meter;

static void m_begin(meter *m)
{
    m->x0 = next_xid(m->c);
    pl__pg_counts_get(&m->c0);
}

static cost m_end(meter *m)
{
    pl__pg_counts c1;
    pl__pg_counts_get(&c1);
    cost k = {next_xid(m->c) - m->x0, c1.round_trips - m->c0.round_trips};
    return k;
}

/* Signal run @p id "go", continuing it here: it completes. */
static cost r_signal(pl_engine *e, meter *m, const char *id)
{
    cJSON *p = cJSON_CreateObject();
    pl_outcome *o = NULL;
    m_begin(m);
    cr_assert_eq(pl_run_signal(&o, e, id, "go", p), PL_OK, "%s", pl_errmsg());
    cost k = m_end(m);
    cJSON_Delete(p);
    cr_assert_not_null(o, "%s: not continued here", id);
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s: %s", id,
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    return k;
}

static cost r_cancel(pl_engine *e, meter *m, const char *id)
{
    m_begin(m);
    cr_assert_eq(pl_run_cancel(e, id, "stop"), PL_OK, "%s", pl_errmsg());
    cost k = m_end(m);
    cr_expect_eq(status_of(e, id), PL_RUN_CANCELLED, "%s: %s", id,
                 pl_run_status_name(status_of(e, id)));
    return k;
}

/* What "peek" saw: the concurrency key and limit of run g_peek's lease,
 * as the server has it while the run executes ("/0" for none, "?" not
 * looked). */
static char g_key[64] = "?";
static const char *g_peek = "a";

/* "peek" (not idempotent: its `action_call` is durable before it runs, in
 * the ride's transaction): reads its run's lease row. */
static int peek(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    PGconn *c = t_pg_admin();
    const char *v[1] = {g_peek};
    PGresult *r = PQexecParams(c,
                               "SELECT coalesce(l.fkey, '') || '/' || "
                               "l.flimit FROM t_ride_back.leases l JOIN "
                               "t_ride_back.runs u ON u.num = l.run WHERE "
                               "u.id = convert_to($1, 'UTF8')",
                               1, NULL, v, NULL, NULL, 0);
    snprintf(g_key, sizeof g_key, "%s",
             PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                 ? PQgetvalue(r, 0, 0)
                 : "no lease");
    PQclear(r);
    PQfinish(c);
    return pl_steps_add_resultf(out, "{}");
}

/* "waiter-peek": waits for "go", then calls "peek". */
static int waiter_peek(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "peek", "{}");
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* Signal "waiter-peek" run @p id "go" with @p p: it completes, and its
 * lease had key and limit @p want while it executed. */
static void go_and_peek(pl_engine *e, const char *id, cJSON *p,
                        const char *want)
{
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, id, "go", p), PL_OK, "%s", pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_str_eq(g_key, want,
                     "%s: the executing run's lease had key and limit '%s'", id,
                     g_key);
}

/*
 * The lease a keyed run takes with the ride has its key back: while the
 * run executes it counts against the key, as after a worker's wake (a
 * continue by hand, which is what a refused ride came to, leased it with
 * no key).  A run that parks again keeps its key for its wake.  A run
 * started here without a key (kept by the store: its ride leaves the
 * parked table alone) executes under a lease without one.
 */
static void the_ride_gives_the_lease_its_key_back(void)
{
    pl_registry *reg;
    pl_engine *e = r_engine("t_ride_back", &reg);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "peek";
    d.fn = peek;
    d.idempotent = false;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "waiter-peek", waiter_peek, NULL),
                 PL_OK);
    pl_action a = PL_ACTION_INIT;
    a.policy = "waiter-peek";
    a.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "a";
    ro.concurrency_key = "one";
    ro.concurrency_limit = 1;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "a", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cJSON *p = cJSON_CreateObject();
    /* "other" does not end the wait: the run parks again, keeping its key */
    cr_assert_eq(pl_run_signal(&o, e, "a", "other", p), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    PGconn *c = t_pg_admin();
    PGresult *r = PQexec(c, "SELECT count(*) FROM t_ride_back.parked WHERE "
                            "fkey = 'one' AND flimit = 1");
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "1", "the parked run lost its key");
    PQclear(r);
    PQfinish(c);
    go_and_peek(e, "a", p, "one/1");
    ro = (pl_run_options)PL_RUN_OPTIONS_INIT;
    ro.run_id = g_peek = "b";
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    go_and_peek(e, "b", p, "/0");
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* "noop" returns {}; "waiter-call" waits for "go", then calls "noop" and
 * returns the event's payload: its first commit after the wait (the
 * `event` step and the call's `action_call`) goes on holding the lease. */
static int noop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_resultf(out, "{}");
}

static int waiter_call(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "noop", "{}");
    if (!st)
        st = pl_steps_add_result(out, p);
    cJSON_Delete(p);
    return st;
}

/* r_engine() with "noop" and "waiter-call" too. */
static pl_engine *r_engine_call(const char *schema, pl_registry **reg)
{
    pl_engine *e = r_engine(schema, reg);
    cr_assert_eq(pl_registry_add_fn(*reg, "noop", noop, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(*reg, "waiter-call", waiter_call, NULL),
                 PL_OK);
    return e;
}

/* "waiter-call" as @p id, started by @p e: it parks. */
static void r_start(pl_engine *e, const char *id)
{
    pl_action a = PL_ACTION_INIT;
    a.policy = "waiter-call";
    a.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
}

/* Rows of @p sql's one value, as a number. */
static long r_count(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
                 PQresultErrorMessage(r));
    long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

/*
 * A ride whose commit consumes its record and goes on holding the lease
 * writes the consumption alone (the `event` step): the record itself is
 * never inserted into the inbox, which a trigger on the inbox table
 * counts.  A delivery that no wait consumes (the run parks again) and a
 * delivery alone (not continued here) are written, as before.  (Run by
 * the test below, after its counts.)
 */
static void a_ride_whose_run_goes_on_writes_no_inbox_record(void)
{
    pl_registry *reg;
    pl_engine *e = r_engine_call("t_ride_fold", &reg);
    PGconn *c = t_pg_admin();
    PGresult *r = PQexec(
        c, "CREATE TABLE t_ride_fold.ins (seq bigint);"
           "CREATE FUNCTION t_ride_fold.ins_fn() RETURNS trigger LANGUAGE "
           "plpgsql AS $f$ BEGIN INSERT INTO t_ride_fold.ins VALUES "
           "(NEW.seq); RETURN NULL; END $f$;"
           "CREATE TRIGGER ins AFTER INSERT ON t_ride_fold.inbox FOR EACH ROW "
           "EXECUTE FUNCTION t_ride_fold.ins_fn()");
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s",
                 PQresultErrorMessage(r));
    PQclear(r);
    const char *ids[3] = {"fold", "again", "alone"};
    for (int i = 0; i < 3; i++)
        r_start(e, ids[i]);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "v", 7);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, "fold", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(o->status));
    const cJSON *res = pl_outcome_result(o);
    cJSON *v = res ? cJSON_GetObjectItem(res, "v") : NULL;
    cr_expect(cJSON_IsNumber(v) && v->valuedouble == 7,
              "the event's payload was not the one consumed");
    pl_outcome_free(o);
    cr_expect_eq(r_count(c, "SELECT count(*) FROM t_ride_fold.ins"), 0,
                 "the record the ride's commit consumes was inserted");
    /* its ledger replays: the consumption is recorded */
    cr_assert_eq(pl_run_continue(&o, e, "fold", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* "other": no wait consumes it: written, and kept */
    cr_assert_eq(pl_run_signal(&o, e, "again", "other", p), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cr_expect_eq(r_count(c, "SELECT count(*) FROM t_ride_fold.ins"), 1);
    cr_expect_eq(r_count(c, "SELECT count(*) FROM t_ride_fold.inbox i JOIN "
                            "t_ride_fold.runs u ON u.num = i.run WHERE u.id "
                            "= convert_to('again', 'UTF8')"),
                 1, "the record no wait consumed is not in the inbox");
    /* then "go" rides, and consumes its own record alone */
    cr_assert_eq(pl_run_signal(&o, e, "again", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(r_count(c, "SELECT count(*) FROM t_ride_fold.ins"), 1);
    /* a delivery alone is written */
    cr_assert_eq(pl_run_signal(NULL, e, "alone", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(r_count(c, "SELECT count(*) FROM t_ride_fold.ins"), 2);
    cJSON_Delete(p);
    PQfinish(c);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Signal @p id "go" with {"v": @p v} from @p e, continuing it here; its
 * round trips in *rt; the status it ends in, and its result's "v" in *got
 * (-1: none). */
static pl_run_status r_go(pl_engine *e, const char *id, int v, uint64_t *rt,
                          int *got)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "v", v);
    pl_outcome *o = NULL;
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    cr_assert_eq(pl_run_signal(&o, e, id, "go", p), PL_OK, "%s: %s", id,
                 pl_errmsg());
    pl__pg_counts_get(&c1);
    cJSON_Delete(p);
    if (rt)
        *rt = c1.round_trips - c0.round_trips;
    cr_assert_not_null(o, "%s: not continued here", id);
    const cJSON *res = pl_outcome_result(o);
    cJSON *x = res ? cJSON_GetObjectItem(res, "v") : NULL;
    *got = cJSON_IsNumber(x) ? (int)x->valuedouble : -1;
    pl_run_status st = o->status;
    pl_outcome_free(o);
    return st;
}

/*
 * A run parked by this process is kept by its store (pg_cache.c): a signal
 * continuing it here reads nothing first, one round trip to its next step
 * and one more to its end, where a run another process parked takes one
 * more (its read).  What another process does meanwhile is seen: an event
 * it delivered is consumed first, a ride it took (the run parked again) or
 * a cancellation is not missed.  (Run by the test below, after its
 * counts.)
 */
static void a_run_parked_here_is_signalled_in_one_round_trip(void)
{
    pl_registry *ra, *rb;
    pl_engine *a = r_engine("t_ride_kept", &ra);
    pl_engine *b = r_engine("t_ride_kept", &rb);
    pl_registry *regs[2] = {ra, rb};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(pl_registry_add_fn(regs[i], "noop", noop, NULL), PL_OK);
        cr_assert_eq(pl_registry_add_fn(regs[i], "waiter-call", waiter_call,
                                        NULL),
                     PL_OK);
    }
    uint64_t here, there;
    int got;
    r_start(a, "mine");
    r_start(b, "theirs");
    cr_expect_eq(r_go(a, "mine", 1, &here, &got), PL_RUN_COMPLETED);
    cr_expect_eq(got, 1);
    cr_expect_eq(r_go(a, "theirs", 1, &there, &got), PL_RUN_COMPLETED);
    cr_expect_eq(got, 1);
    cr_expect_eq(here, 2, "a run parked here: %llu round trips",
                 (unsigned long long)here);
    cr_expect_eq(there, 3, "a run parked elsewhere: %llu round trips",
                 (unsigned long long)there);
    /* an event delivered by another process first is consumed first */
    r_start(a, "first");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "v", 5);
    cr_assert_eq(pl_run_signal(NULL, b, "first", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(r_go(a, "first", 6, NULL, &got), PL_RUN_COMPLETED);
    cr_expect_eq(got, 5, "consumed the event sent second (v %d)", got);
    /* a ride of another process's: the run parked again, another state */
    r_start(a, "moved");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, b, "moved", "other", p), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cr_expect_eq(r_go(a, "moved", 7, NULL, &got), PL_RUN_COMPLETED);
    cr_expect_eq(got, 7);
    /* cancelled by another process: the signal is refused */
    r_start(a, "gone");
    cr_assert_eq(pl_run_cancel(b, "gone", "stop"), PL_OK, "%s", pl_errmsg());
    o = NULL;
    cr_expect_eq(pl_run_signal(&o, a, "gone", "go", p), PL_ESTATE, "%s",
                 pl_errmsg());
    cr_expect_null(o);
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(ra);
    pl_registry_free(rb);
}

/*
 * A delivery makes its run's timer due now (a worker then continues it if
 * the ride fails); a ride that goes on to end the run leaves no timer
 * behind, as no ended run keeps one: every run of @p schema has ended,
 * and none has a timer row (a stale due one would be taken and dropped by
 * a worker's wake, a take for nothing).
 */
static void no_ended_run_keeps_a_timer(PGconn *c, const char *schema)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".runs", schema);
    cr_assert_gt(r_count(c, sql), 0, "schema %s has no run", schema);
    snprintf(sql, sizeof sql, "SELECT id FROM \"%s\".timers", schema);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
                 PQresultErrorMessage(r));
    pl_registry *reg;
    pl_engine *e = r_engine(schema, &reg);
    for (int i = 0; i < PQntuples(r); i++) {
        pl_run_status st = status_of(e, PQgetvalue(r, i, 0));
        cr_expect(st == PL_RUN_WAITING,
                  "schema %s: run '%s' is %s and keeps a timer", schema,
                  PQgetvalue(r, i, 0), pl_run_status_name(st));
    }
    PQclear(r);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Run @p id's lease row in @p schema made by hand: held by @p owner until
 * @p expires (Unix us). */
static void r_lease_row(PGconn *c, const char *schema, const char *id,
                        const char *owner, const char *expires)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.leases (run, gen, owner, id, expires) SELECT "
             "num, 4, '%s', '%s', %s FROM %s.runs WHERE id = convert_to('%s', "
             "'UTF8')",
             schema, owner, id, expires, schema, id);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s",
                 PQresultErrorMessage(r));
    PQclear(r);
}

/*
 * A parked run has no lease row: the ride inserts one.  When a row is
 * there after all (another process took the run a moment before: here
 * made by hand), the insert fails on the lease's key and the ride is
 * refused as by its checks, the longer way taken in the same call: the
 * event is delivered alone, the run left
 * to the lease's holder (no outcome here), and a continue once that lease
 * is gone consumes the event.  A row whose lease ran out (its holder
 * died) does not stop the signal: the longer way takes that lease and
 * continues the run here.  (Run by the test below, after its counts.)
 */
static void a_ride_meets_a_lease_row_already_there(void)
{
    pl_registry *reg;
    pl_engine *e = r_engine_call("t_ride_row", &reg);
    PGconn *c = t_pg_admin();
    r_start(e, "held"); /* its ride's commit goes on holding the lease */
    r_start(e, "dead");
    r_lease_row(c, "t_ride_row", "held", "other@host",
                "(extract(epoch from clock_timestamp()) * 1e6)::bigint + "
                "600000000");
    r_lease_row(c, "t_ride_row", "dead", "gone@host", "1");
    cJSON *p = cJSON_CreateObject();
    pl_outcome *o = NULL;
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    cr_assert_eq(pl_run_signal(&o, e, "held", "go", p), PL_OK, "%s",
                 pl_errmsg());
    pl__pg_counts_get(&c1);
    /* refused as by its checks, the delivery goes the longer way in the
     * same call: 7 round trips; a failure the store took for another
     * (PL_EBUSY from the whole delivery) was retried from the engine: 9 */
    cr_expect_leq(c1.round_trips - c0.round_trips, 7, "%llu round trips",
                  (unsigned long long)(c1.round_trips - c0.round_trips));
    cr_expect_null(o, "continued here past another's lease");
    pl_outcome_free(o);
    cr_expect_eq(status_of(e, "held"), PL_RUN_WAITING);
    cr_expect_eq(r_count(c, "SELECT count(*) FROM t_ride_row.inbox i JOIN "
                            "t_ride_row.runs r ON r.num = i.run WHERE r.id = "
                            "convert_to('held', 'UTF8')"),
                 1, "the event delivered alone");
    PQclear(PQexec(c, "DELETE FROM t_ride_row.leases WHERE owner = "
                      "'other@host'"));
    cr_assert_eq(pl_run_continue(&o, e, "held", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, "dead", "go", p), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o, "a lease run out kept the run from the signal");
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    cJSON_Delete(p);
    PQfinish(c);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A waiting run with a concurrency key, signalled and cancelled, takes the
 * ride as one without a key does, but with the step that ends its wait
 * (the `event`, the `cancel`), before its policy goes on past the wait:
 * two write transactions each (the delivery, the lease, the claim and
 * that step; the run's end) and one round trip more, where a run without
 * a key takes one (the delivery, the lease, the claim and the run's end).
 * A store that refused the ride for a run parked with a key made four (the
 * delivery alone, then the lease, the claim and the end of a continue).
 * One test, so that no other writes to the server meanwhile (the binary's
 * tests run in parallel), autovacuum off (its ANALYZE writes too).
 */
Test(pg_ride, a_keyed_waiting_run_takes_the_ride)
{
    pl_registry *reg;
    pl_engine *e = r_engine("t_ride_key", &reg);
    meter m = {t_pg_admin(), 0, {0}};
    PGresult *r = PQexec(m.c, "ALTER SYSTEM SET autovacuum = off");
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s",
                 PQresultErrorMessage(r));
    PQclear(r);
    PQclear(PQexec(m.c, "SELECT pg_reload_conf()"));
    r_park(e, "plain-s", NULL, 0);
    r_park(e, "plain-c", NULL, 0);
    r_park(e, "keyed-s", "k", 2);
    r_park(e, "keyed-c", "k", 2);
    cost ps = r_signal(e, &m, "plain-s");
    cost ks = r_signal(e, &m, "keyed-s");
    cost pc = r_cancel(e, &m, "plain-c");
    cost kc = r_cancel(e, &m, "keyed-c");
    cr_expect_eq(ps.txns, 1, "a signal: %llu write transactions",
                 (unsigned long long)ps.txns);
    cr_expect_eq(ks.txns, 2, "a keyed run's signal: %llu write transactions",
                 (unsigned long long)ks.txns);
    cr_expect_eq(pc.txns, 1, "a cancellation: %llu write transactions",
                 (unsigned long long)pc.txns);
    cr_expect_eq(kc.txns, 2,
                 "a keyed run's cancellation: %llu write transactions",
                 (unsigned long long)kc.txns);
    cr_expect_eq(ks.round_trips, ps.round_trips + 1,
                 "a keyed run's signal: %llu round trips, %llu without a key",
                 (unsigned long long)ks.round_trips,
                 (unsigned long long)ps.round_trips);
    cr_expect_eq(kc.round_trips, pc.round_trips + 1,
                 "a keyed run's cancellation: %llu round trips, %llu without "
                 "a key",
                 (unsigned long long)kc.round_trips,
                 (unsigned long long)pc.round_trips);
    PQfinish(m.c);
    pl_engine_close(e);
    pl_registry_free(reg);
    the_ride_gives_the_lease_its_key_back();
    a_ride_whose_run_goes_on_writes_no_inbox_record();
    a_run_parked_here_is_signalled_in_one_round_trip();
    a_ride_meets_a_lease_row_already_there();
    /* every run those made has ended, by a signal or a cancellation that
     * continued it in the caller's thread */
    PGconn *c = t_pg_admin();
    no_ended_run_keeps_a_timer(c, "t_ride_key");
    no_ended_run_keeps_a_timer(c, "t_ride_kept");
    no_ended_run_keeps_a_timer(c, "t_ride_fold");
    no_ended_run_keeps_a_timer(c, "t_ride_row");
    PQfinish(c);
}
