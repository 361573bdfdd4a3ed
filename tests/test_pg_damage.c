/*
 * test_pg_damage.c -- rows of the PostgreSQL store edited behind its back
 * (with SQL, as psql would), read through the run operations the guide
 * says work on both stores: each damage is reported, never read as if
 * the run were whole; and what a worker or a verify makes of a queued
 * run damaged, or without its lease (and a worker of one whole that its
 * take's statement began too early to see).  test_pg_stepflip.c flips
 * bits of every column; test_store_damage.c does the same as here to
 * LMDB records.
 */
#include "support.h"
#include "support_pg_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>

TestSuite(pg_damage, .fini = t_cleanup, .timeout = 120);

static int count_steps(const pl_step *s, void *user)
{
    (void)s;
    ++*(int *)user;
    return 0;
}

/*
 * A completed "chain" of three calls whose second call's row (its
 * action_call and action_result, steps 0:2 and 0:3) is deleted: a walk
 * and an export, which read the run's steps in key order, must say that
 * steps are missing, as pl_run_ledger() and pl_run_verify() do, where
 * they went from step 0:1 to 0:4 and said PL_OK (an export the import
 * then refused as changed).  A walk from past the gap sees none.
 */
Test(pg_damage, a_gap_in_a_ledger_ends_a_walk_and_an_export)
{
    char *uri = t_pg_store_uri("d_gap");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 3}", "holes"));
    pl_engine_close(e);
    pg_admin_exec("DELETE FROM d_gap.steps WHERE k = int8send((SELECT num "
                  "FROM d_gap.runs WHERE id = 'holes'::bytea)) || "
                  "'\\x00000002'::bytea");
    e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_verify(e, "holes"), PL_ECORRUPT, "the row is gone");
    int n = 0;
    cr_expect_eq(pl_run_walk(e, "holes", count_steps, &n), PL_ECORRUPT,
                 "a walk passed over the missing steps");
    cr_expect(strstr(pl_errmsg(), "missing step 2") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_run_walk_from(e, "holes", "0:1", count_steps, &n),
                 PL_ECORRUPT);
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    cr_expect_eq(pl_run_export(e, "holes", f), PL_ECORRUPT,
                 "an export passed over the missing steps");
    fclose(f);
    n = 0;
    cr_expect_eq(pl_run_walk_from(e, "holes", "0:4", count_steps, &n), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(n, 4, "0:4, the callee folded into 0:5, 0:5 and 0:6: %d", n);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * A store missing one of its tables (dropped with SQL) is a damaged store:
 * PL_ECORRUPT whether opened for writing or read-only, as the header
 * says, and nothing is created in it.  A read-only open asked only for
 * the identity and the format: it went on to prepare its statements and
 * failed with PL_ESTORE, a store that did not answer, naming SQL.
 */
Test(pg_damage, a_store_missing_a_table_is_corrupt_read_only_too)
{
    static const char *const tables[] = {"runs", "state", "steps"};
    pl_registry *reg = t_registry();
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        char schema[32], sql[160];
        snprintf(schema, sizeof schema, "d_table_%s", tables[i]);
        char *uri = t_pg_store_uri(schema);
        pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
        pl_outcome_free(t_start(e, "echo", "{}", "r"));
        pl_engine_close(e);
        snprintf(sql, sizeof sql, "DROP TABLE %s.%s", schema, tables[i]);
        pg_admin_exec(sql);
        for (int ro = 0; ro < 2; ro++) {
            pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
            o.read_only = ro;
            e = NULL;
            cr_expect_eq(pl_engine_open(&e, uri, reg, &o), PL_ECORRUPT,
                         "%s dropped, %s: %s", tables[i],
                         ro ? "read-only" : "writable", pl_errmsg());
            cr_expect_null(e);
            pl_engine_close(e);
        }
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM pg_tables WHERE schemaname = '%s' "
                 "AND tablename = '%s'",
                 schema, tables[i]);
        cr_expect_eq(t_pg_number(sql), 0, "nothing was created");
        free(uri);
    }
    pl_registry_free(reg);
}

/* A worker on a thread, its counts kept (t_worker keeps none). */
typedef struct counted {
    pl_engine *e;
    uint64_t completed, failed, skipped;
    int rc;
} counted;

static void *counted_main(void *arg)
{
    counted *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.poll_ms = 10;
    o.completed = &w->completed;
    o.failed = &w->failed;
    o.skipped = &w->skipped;
    w->rc = pl_worker_run(w->e, &o);
    return NULL;
}

/* Queue run "dq" in store @p schema (leases of 100 ms), damage it with
 * @p damage, and let a worker run until it dropped the run's lease, then
 * for 30 of its leases' lengths: it must
 * take the run once, count it not executed once, and drop its lease, so
 * that no worker takes it again at each expiry. */
static void damaged_queued(const char *schema, const char *damage)
{
    char *uri = t_pg_store_uri(schema);
    pl_registry *reg = t_registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.lease_ms = 100;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, &eo), PL_OK, "%s", pl_errmsg());
    cJSON *p = t_json("{\"n\": 3}");
    pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "dq";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    pg_admin_exec(damage);
    counted w = {.e = e};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, counted_main, &w), 0);
    /* its take, however long a loaded host makes the worker's start: the
     * lease dropped (60 s at most), then 30 leases of 100 ms to take it
     * again in */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.leases WHERE id = 'dq'",
             schema);
    for (int ms = 0; t_pg_number(sql) != 0; ms += 10) {
        cr_assert_lt(ms, 60000, "%s: the run's lease was never dropped",
                     schema);
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    struct timespec leases = {3, 0};
    nanosleep(&leases, NULL);
    pl_worker_stop(e);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_expect_eq(w.rc, PL_OK, "%s", pl_errmsg());
    cr_expect_eq(w.skipped, 1, "%s: taken %llu times", schema,
                 (unsigned long long)w.skipped);
    cr_expect_eq(w.completed, 0);
    cr_expect_eq(t_pg_number(sql), 0, "%s: its lease is still there", schema);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * A queued run that cannot be read (its root record, or its state
 * record, damaged) is taken once and set aside, reported once: a worker
 * took it again at each expiry of its lease, for ever, and counted it
 * not executed each time.  Its root record damaged, its state is written
 * failed (PL_ECORRUPT, its reason naming it); its state damaged, it keeps
 * it, for pl_run_verify() and ledger-dump to report.
 */
Test(pg_damage, a_damaged_queued_run_is_taken_once)
{
    damaged_queued("d_info",
                   "UPDATE d_info.runs SET info = '\\xdeadbeef'::bytea "
                   "WHERE id = 'dq'::bytea; CREATE TABLE d_info.before AS "
                   "SELECT run, v FROM d_info.state");
    cr_expect_eq(t_pg_number("SELECT count(*) FROM d_info.state s JOIN "
                             "d_info.before b USING (run) WHERE s.v <> b.v"),
                 1, "its state was not written failed");
    damaged_queued("d_state",
                   "UPDATE d_state.state SET v = '\\xdeadbeef'::bytea "
                   "WHERE run = (SELECT num FROM d_state.runs WHERE id = "
                   "'dq'::bytea)");
}

/* ---- a run queued while a take reads ------------------------------------- */

/* A take by "w2" on a thread of its own, its claim writing the state as it
 * was. */
typedef struct taking {
    pl__pg_store *s;
    pl__lease l;
    bool taken, no_steps; /* what its claim was told */
    int rc, calls;
    char msg[PL__ERRMSG_MAX];
} taking;

static int claim_as_is(const pl__taken *t, pl__buf *state, bool *drop,
                       void *user)
{
    (void)drop;
    ((taking *)user)->calls++;
    ((taking *)user)->no_steps = t->no_steps;
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

/* @p sql on the admin connection @p c, which keeps its session's locks */
static void on_admin(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
                 PQresultErrorMessage(r));
    PQclear(r);
}

/*
 * A gate made by @p sql, whose gated statement waits for the advisory
 * lock 7, and @p main(@p arg) on thread *th, let run till it waits there
 * (@p what: what it is, for the test's message): the connection returned
 * holds the lock (gate_open() lets it through).
 */
static PGconn *gated(const char *sql, void *(*main)(void *), void *arg,
                     pthread_t *th, const char *what)
{
    pg_admin_exec(sql);
    PGconn *c = t_pg_admin();
    on_admin(c, "SELECT pg_advisory_lock(7)");
    cr_assert_eq(pthread_create(th, NULL, main, arg), 0);
    long long waiting = 0;
    for (int i = 0; i < 2400 && !waiting; i++) {
        waiting = t_pg_number("SELECT count(*) FROM pg_locks WHERE locktype "
                              "= 'advisory' AND objid = 7 AND NOT granted");
        if (!waiting) {
            struct timespec ts = {0, 25000000};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert(waiting, "%s never reached the gate", what);
    return c;
}

/* The gate of gated() on @p c opened, and thread @p th joined. */
static void gate_open(PGconn *c, pthread_t th)
{
    on_admin(c, "SELECT pg_advisory_unlock(7)");
    cr_assert_eq(pthread_join(th, NULL), 0);
    PQfinish(c);
}

static void *take_main(void *arg)
{
    taking *x = arg;
    x->rc = pl__pg_take(x->s, "w2", 60000000, claim_as_is, x, &x->l, &x->taken);
    pl__errmsg_save(x->msg);
    return NULL;
}

/*
 * A run queued while a take's statement runs: the statement reads the
 * run's records as of its start, pl_take() (the walk past a full key's
 * head) the newest, so it can take a run whose records the statement does
 * not see.  Here the take waits, its statement begun, on a lock the test
 * holds (a trigger on the leases, of the take's statement alone), while
 * run "late" is queued behind k's head, k's one place held.  The take
 * must get "late" whole: it said the run had no info record, and dropped
 * its lease as a damaged run's, so that no worker ever took it (a worker
 * test's run queued behind a full key never completed).
 */
Test(pg_damage, a_run_queued_during_a_take_is_taken_whole)
{
    pl__pg_store *s = pg_store("d_late"), *s2 = pg_store("d_late");
    leased_keyed_run(s, "k-held", "k");
    made_run(s, "k-next", "", "k");
    taking x = {.s = s};
    pthread_t th;
    PGconn *c = gated(
        "CREATE FUNCTION d_late.gate() RETURNS trigger LANGUAGE plpgsql AS "
        "$f$ BEGIN IF current_query() LIKE '%pl_take(%' THEN PERFORM "
        "pg_advisory_lock(7); PERFORM pg_advisory_unlock(7); END IF; RETURN "
        "NULL; END $f$; CREATE TRIGGER gate BEFORE UPDATE ON d_late.leases "
        "FOR EACH STATEMENT EXECUTE FUNCTION d_late.gate()",
        take_main, &x, &th, "the take");
    made_run(s2, "late", "", NULL);
    gate_open(c, th);
    cr_expect_eq(x.rc, PL_OK, "%s", x.msg);
    cr_expect(x.taken);
    cr_expect_str_eq(x.l.id, "late");
    cr_expect_eq(x.calls, 1);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM d_late.leases WHERE id = "
                             "'late' AND owner = 'w2'"),
                 1, "its lease is gone");
    pl__pg_close(s2);
    pl__pg_close(s);
}

/*
 * A run whose lease ran out, its worker slow but alive: the worker's
 * writes are fenced by a take, not by the clock (the run has no key), so
 * its first steps may commit while a take's statement runs, after the
 * statement's start, before the take locks the lease.  The statement
 * reads the run as of its start: it said the run had no steps, and the
 * execution started from its first call again (the recorded calls made
 * twice, the first new step refused as a duplicate key).  Here the take
 * waits at the gate, its statement begun, while the worker's steps
 * commit; the take must be told the run has steps.
 */
Test(pg_damage, a_run_written_during_a_take_is_taken_whole)
{
    pl__pg_store *s = pg_store("d_slow"), *s2 = pg_store("d_slow");
    uint64_t run = leased_run(s, "slow");
    pg_admin_exec("UPDATE d_slow.leases SET expires = 1 WHERE id = 'slow'");
    taking x = {.s = s};
    pthread_t th;
    PGconn *c = gated(
        "CREATE FUNCTION d_slow.gate() RETURNS trigger LANGUAGE plpgsql AS "
        "$f$ BEGIN IF current_query() LIKE '%pl_take(%' THEN PERFORM "
        "pg_advisory_lock(7); PERFORM pg_advisory_unlock(7); END IF; RETURN "
        "NULL; END $f$; CREATE TRIGGER gate BEFORE UPDATE ON d_slow.leases "
        "FOR EACH STATEMENT EXECUTE FUNCTION d_slow.gate()",
        take_main, &x, &th, "the take");
    pl__batch b = {0}; /* the slow worker's first commit */
    b.run = run;
    b.gen = 1;
    two_steps(&b, run, 0);
    pl__batch *one[1] = {&b};
    cr_assert_eq(pl__pg_commit(s2, one, 1, false), PL_OK, "%s", pl_errmsg());
    pl__batch_free(&b);
    gate_open(c, th);
    cr_expect_eq(x.rc, PL_OK, "%s", x.msg);
    cr_expect(x.taken);
    cr_expect_str_eq(x.l.id, "slow");
    cr_expect_eq(x.l.gen, 2u);
    cr_expect_eq(x.calls, 1);
    cr_expect(!x.no_steps, "the take said the run had no steps");
    pl__pg_close(s2);
    pl__pg_close(s);
}

/* ledger-dump --verify of @p store: its exit status, its output in @p out
 * (@p n bytes at most). */
static int dump_verify(const char *store, char *out, size_t n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "'" PL_TEST_BIN_DIR "/tools/ledger-dump' '%s' --verify 2>&1",
             store);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = '\0';
    int ws = pclose(p);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/*
 * A queued run whose lease row is deleted (by hand, or a store restored
 * from a partial dump) is taken by no worker, ever: pl_run_verify() and
 * ledger-dump --verify, which said the store was whole, name it; a queued
 * run with its lease is whole.  Continued by hand, as the message says,
 * it runs to its end and the store is whole again.
 */
Test(pg_damage, a_queued_run_without_its_lease_is_reported)
{
    char *uri = t_pg_store_uri("d_lease");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "orphan";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    ro.run_id = "queued";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    cr_assert_eq(pl_run_verify(e, "orphan"), PL_OK, "%s", pl_errmsg());
    pg_admin_exec("DELETE FROM d_lease.leases WHERE id = 'orphan'");

    cr_expect_eq(pl_run_verify(e, "orphan"), PL_ECORRUPT, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "'orphan'") &&
                  strstr(pl_errmsg(), "no lease"),
              "%s", pl_errmsg());
    cr_expect_eq(pl_run_verify(e, "queued"), PL_OK, "%s", pl_errmsg());
    static char out[16384];
    int code = dump_verify(uri, out, sizeof out);
    cr_expect_neq(code, 0, "ledger-dump --verify said the store is whole:\n%s",
                  out);
    cr_expect(strstr(out, "FAULT run orphan") && strstr(out, "no lease"), "%s",
              out);
    cr_expect(strstr(out, "ok    run queued") != NULL, "%s", out);

    pl_outcome *o = NULL;
    cr_expect_eq(pl_run_continue(&o, e, "orphan", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect(o && o->status == PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "orphan"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* ---- a run made waiting while a wake reads -------------------------------- */

/* A wake by "w2" on a thread of its own: what its claims were told of
 * each run (by id), each claim writing the state as it was. */
typedef struct waking {
    pl__pg_store *s;
    pl__dues d;
    int rc, calls;
    char msg[PL__ERRMSG_MAX];
    struct {
        char id[PL_MAX_RUN_ID + 1], state[8];
        bool no_steps;
    } seen[4];
} waking;

static int claim_seen(const pl__taken *t, pl__buf *state, bool *drop,
                      void *user)
{
    (void)drop;
    waking *x = user;
    int i = x->calls++;
    if (i < 4) {
        snprintf(x->seen[i].id, sizeof x->seen[i].id, "%s", t->lease.id);
        snprintf(x->seen[i].state, sizeof x->seen[i].state, "%.*s",
                 (int)t->state_len, (const char *)t->state);
        x->seen[i].no_steps = t->no_steps;
    }
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

static void *wake_main(void *arg)
{
    waking *x = arg;
    int64_t next = 0;
    x->rc = pl__pg_take_dues(x->s, "w2", 60000000, 4, 16, 1 << 20, claim_seen,
                             x, &x->d, &next);
    pl__errmsg_save(x->msg);
    return NULL;
}

/* Run @p run of store @p s parks, as its execution's last commit does
 * (its lease, generation 1, dropped; state "s1"), with its steps 1 and 2
 * when @p steps, and its timer due @p due_us (0: the one it has kept). */
static void parks(pl__pg_store *s, uint64_t run, const char *id, bool steps,
                  int64_t due_us)
{
    pl__batch b = {0};
    b.run = run;
    b.gen = 1;
    b.release = true;
    b.park = true;
    b.timer_us = due_us;
    b.timer_id = id;
    cr_assert_eq(pl__buf_append(&b.state, "s1", 2), PL_OK);
    if (steps)
        two_steps(&b, run, 1);
    pl__batch *one[1] = {&b};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    pl__batch_free(&b);
}

/*
 * Runs made waiting while a wake's statement runs: the statement reads
 * their records as of its start, pl_wake() (its choice of the due
 * timers) the newest, so it can take a run whose records the statement
 * does not see.  Here the wake waits, its statement begun, at a gate
 * (pl_wake() is called through a function of the test's that first waits
 * for a lock the test holds), while two executing runs park: "signalled", whose timer a delivery made
 * due while it executed, writes its first steps as it parks; "sleeps"
 * parks on a new timer due now.  The wake must take both whole.  It took
 * "signalled" told it had no steps, its ledger's first records read as
 * none (its execution would have started again from its first call, and
 * made its recorded calls again); and "sleeps" under a lease nobody knew
 * of, its timer, which the statement did not see, left, and the run not
 * answered: nothing executed it until that lease ran out (w2's, as the
 * last check finds it now, with w2 told of it).
 */
Test(pg_damage, a_run_parked_during_a_wake_is_taken_whole)
{
    pl__pg_store *s = pg_store("d_park"), *s2 = pg_store("d_park");
    uint64_t sig = made_run(s, "signalled", "w1", NULL);
    uint64_t sleeps = made_run(s, "sleeps", "w1", NULL);
    int64_t now = pl__now_us();
    cr_assert_eq(pl__pg_timer_set(s, sig, "signalled", now - 2000000), PL_OK,
                 "%s", pl_errmsg());
    waking x = {.s = s};
    pthread_t th;
    PGconn *c = gated(
        "ALTER FUNCTION d_park.pl_wake(integer) RENAME TO held; CREATE "
        "FUNCTION d_park.pl_wake(most integer) RETURNS TABLE (run bigint, "
        "due bigint, id text, rec bytea, fkey text, flimit integer) LANGUAGE "
        "plpgsql AS $f$ BEGIN PERFORM pg_advisory_lock(7); PERFORM "
        "pg_advisory_unlock(7); RETURN QUERY SELECT * FROM d_park.held(most); "
        "END $f$",
        wake_main, &x, &th, "the wake");
    parks(s2, sig, "signalled", true, 0);
    parks(s2, sleeps, "sleeps", false, now - 1000000);
    gate_open(c, th);
    cr_assert_eq(x.rc, PL_OK, "status %d: %s", x.rc, x.msg);
    cr_expect_eq(x.d.n, 2, "the wake took %zu runs", x.d.n);
    cr_expect_eq(x.calls, 2, "%d claims", x.calls);
    for (size_t i = 0; i < x.d.n && i < 2; i++) {
        const char *want = i ? "sleeps" : "signalled";
        cr_expect_str_eq(x.d.lease[i].id, want);
        cr_expect_eq(x.d.st[i], PL_OK, "%s", x.d.msg[i]);
        cr_expect_str_eq(x.seen[i].id, want);
        cr_expect_str_eq(x.seen[i].state, "s1", "%s's state as it parked",
                         want);
        cr_expect(!x.d.ledger_read[i] || x.d.ledger[i].n == (i ? 0u : 2u),
                  "%s's ledger read as %zu records", want, x.d.ledger[i].n);
        pl__kvs_free(&x.d.ledger[i]);
    }
    cr_expect(!x.seen[0].no_steps, "signalled was said to have no steps");
    cr_expect(x.seen[1].no_steps);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM d_park.timers"), 0,
                 "a timer taken is left");
    cr_expect_eq(t_pg_number("SELECT count(*) FROM d_park.parked"), 0);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM d_park.leases WHERE "
                             "owner = 'w2'"),
                 2);
    pl__pg_close(s2);
    pl__pg_close(s);
}
