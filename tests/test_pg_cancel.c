/*
 * test_pg_cancel.c -- a cancellation on PostgreSQL is answered by a
 * call's commit from its lease row's mark (LEASE MARKS, ledger/pg/
 * pg_lease.c), not from a look in the inbox: every way a lease is made or
 * taken meets every way a cancellation is delivered on the run's state
 * row, so none misses the other.  The store's own calls first, each
 * order of a delivery and a take; then the engine's runs: a cancellation
 * seen by a running run at its next call, in a ride, and racing a ride or
 * a wake in a loop; and a store made before the marks.  test_time*.c
 * (as pg_test_time*) have the rest of what a cancellation does.
 */
#include "support.h"

#include "internal.h"
#include "pg_store.h"
#include "runrec.h"
#include "support_pg_store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(pg_cancel, .fini = t_cleanup, .timeout = 240);

#define LEASE_US (600 * 1000000LL)

/* ---- the store's calls ----------------------------------------------------- */

static int open_check(const uint8_t *state, size_t len, void *user)
{
    (void)state;
    (void)len;
    (void)user;
    return PL_OK;
}

/* Deliver a cancellation of run @p run ("id") as pl_run_cancel() does:
 * its status (asserting nothing: a thread of the test's may call it). */
static int deliver_st(pl__pg_store *s, uint64_t run, const char *id)
{
    pl__buf rec = {0};
    pl__inbox_rec ca = {.reason = "stop", .sent_us = pl__now_us()};
    uint64_t seq = 0;
    int st = pl__inbox_encode(&rec, id, &ca);
    if (!st)
        st = pl__pg_inbox_put(s, run, id, open_check, NULL, rec.data, rec.len,
                              NULL, &seq);
    pl__buf_free(&rec);
    return st;
}

static void deliver(pl__pg_store *s, uint64_t run, const char *id)
{
    cr_assert_eq(deliver_st(s, run, id), PL_OK, "%s", pl_errmsg());
}

/* Run @p sql on @p c, expecting @p want; the rows it answers. */
static int admin_exec(PGconn *c, const char *sql, ExecStatusType want)
{
    PGresult *r = PQexec(c, sql);
    cr_expect_eq(PQresultStatus(r), want, "%s: %s", sql,
                 PQresultErrorMessage(r));
    int n = PQntuples(r);
    PQclear(r);
    return n;
}

/* A commit of run @p run under generation @p gen's fence, of steps @p from
 * and @p from + 1 (and @p release: the lease dropped, a state written):
 * whether it saw a cancellation waiting. */
static bool commit_sees(pl__pg_store *s, uint64_t run, uint64_t gen,
                        uint32_t from, bool release)
{
    pl__batch w = {0};
    w.run = run;
    w.gen = gen;
    w.release = release;
    two_steps(&w, run, from);
    if (release)
        cr_assert_eq(pl__buf_append(&w.state, "parked", 6), PL_OK);
    pl__batch *one[1] = {&w};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_assert(w.inbox_known);
    bool seen = w.inbox_cancel;
    pl__batch_free(&w);
    return seen;
}

/* A run "id" that parked: its lease (generation 1) dropped, no row left. */
static uint64_t parked_run(pl__pg_store *s, const char *id)
{
    uint64_t run = leased_run(s, id);
    cr_assert_not(commit_sees(s, run, 1, 0, true));
    pl__lease l;
    cr_assert_eq(pl__pg_lease_get(s, run, &l), PL_ENOTFOUND);
    pl__err_clear();
    return run;
}

/* A claim (pl__state_fn): the state written "claimed". */
static int claim_as_is(pl__buf *state, pl__kvs *extra, void *user)
{
    (void)extra;
    (void)user;
    return pl__buf_append(state, "claimed", 7);
}

typedef struct taking {
    pl__pg_store *s;
    uint64_t run;
    const char *id;
    bool deliver_then; /* deliver from another thread during the take */
    pthread_t th;
    bool started;
    int st; /* the delivery's */
} taking;

static void *deliver_main(void *arg)
{
    taking *t = arg;
    t->st = deliver_st(t->s, t->run, t->id);
    return NULL;
}

/* A take's claim (pl__take_fn): the state as it was; with deliver_then, a
 * delivery started meanwhile, which waits for the take's state lock. */
static int take_claim(const pl__taken *tk, pl__buf *state, bool *drop,
                      void *user)
{
    (void)drop;
    taking *t = user;
    if (t->deliver_then && !t->started) {
        cr_assert_eq(pthread_create(&t->th, NULL, deliver_main, t), 0);
        t->started = true;
    }
    pl__buf_reset(state);
    return pl__buf_append(state, tk->state, tk->state_len);
}

/* A batch's claims (pl__take_fn, @p user an array of takings): each
 * state as it was. */
static int batch_claim(const pl__taken *tk, pl__buf *state, bool *drop,
                       void *user)
{
    return take_claim(tk, state, drop, (taking *)user + tk->index);
}

/* pl_run_continue()'s take of parked run @p run ("id") and its claim
 * (L_ACQUIRE, then the state's update), a cancellation delivered between
 * them when @p between: the generation taken. */
static uint64_t continued(pl__pg_store *s, uint64_t run, const char *id,
                          bool between)
{
    uint64_t gen = 0;
    bool had = false;
    pl__lease held;
    cr_assert_eq(pl__pg_lease_acquire(s, run, id, "w2", LEASE_US, 0, false,
                                      &gen, &had, &held),
                 PL_OK, "%s", pl_errmsg());
    if (between)
        deliver(s, run, id);
    cr_assert_eq(pl__pg_state_update(s, run, claim_as_is, NULL), PL_OK, "%s",
                 pl_errmsg());
    return gen;
}

/* A wake's take and claim of parked run @p run ("id"), its timer due, a
 * cancellation delivered from another thread during the take when
 * @p during (it waits for the take's lock of the run's state): the
 * generation taken. */
static uint64_t woken(pl__pg_store *s, uint64_t run, const char *id,
                      bool during)
{
    taking t = {s, run, id, during, 0, false, PL_OK};
    pl__lease l;
    bool taken = false;
    int64_t next = 0;
    cr_assert_eq(pl__pg_take_due(s, "w2", LEASE_US, take_claim, &t, &l, &taken,
                                 &next),
                 PL_OK, "%s", pl_errmsg());
    cr_assert(taken && t.started == during);
    cr_assert_eq(l.run, run);
    if (during) {
        pthread_join(t.th, NULL);
        cr_assert_eq(t.st, PL_OK, "%s", pl_status_name(t.st));
    }
    return l.gen;
}

/* In schema @p schema, two parked runs each taken once, by
 * pl_run_continue()'s take and claim, then by a wake's, a cancellation
 * delivered before each take or, @p between, during it: the first commit
 * under each lease must see the cancellation. */
static void each_take_sees(const char *schema, bool between)
{
    char *uri = t_pg_store_uri(schema);
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t run = parked_run(s, "take-a");
    if (!between)
        deliver(s, run, "take-a");
    uint64_t gen = continued(s, run, "take-a", between);
    cr_expect(commit_sees(s, run, gen, 2, false), "%s: the continue", schema);
    run = parked_run(s, "take-b");
    if (!between)
        deliver(s, run, "take-b"); /* its timer due, as a delivery makes it */
    else
        cr_assert_eq(pl__pg_timer_set(s, run, "take-b", pl__now_us()), PL_OK,
                     "%s", pl_errmsg());
    gen = woken(s, run, "take-b", between);
    cr_expect(commit_sees(s, run, gen, 2, false), "%s: the wake", schema);
    pl__pg_close(s);
    free(uri);
}

/*
 * (a) A cancellation delivered before a take: delivered to a parked run,
 * whose lease row is gone, so the delivery marks none; the lease each
 * take then makes is marked by the take's claim, a statement after the
 * run's state's lock, and the run's first commit under it sees the
 * cancellation: pl_run_continue()'s take and claim, and a wake's (the due
 * timer the delivery set).
 */
Test(pg_cancel, a_cancellation_before_a_take_is_seen_by_the_first_commit)
{
    each_take_sees("t_before", false);
}

/*
 * (b) A cancellation delivered between a take and its claim: after
 * pl_run_continue()'s lease is taken (a row made anew, unmarked), the
 * delivery marks it; during a wake's take, whose transaction holds the
 * run's state, the delivery waits for it and then marks the lease the
 * wake made.  Either way the run's next commit sees the cancellation.
 */
Test(pg_cancel, a_cancellation_between_take_and_claim_is_seen)
{
    each_take_sees("t_between", true);
}

/* A wake's take of several runs claims them all in one statement of
 * arrays (Q_WRITE), which marks no lease: L_MARK, after it, marks each
 * whose inbox holds a cancellation, and each run's first commit sees its
 * own, or none. */
Test(pg_cancel, a_wake_of_several_runs_marks_each_lease)
{
    char *uri = t_pg_store_uri("t_batch");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t a = parked_run(s, "batch-a"), b = parked_run(s, "batch-b");
    uint64_t quiet = parked_run(s, "batch-c");
    deliver(s, a, "batch-a");
    deliver(s, b, "batch-b");
    cr_assert_eq(pl__pg_timer_set(s, quiet, "batch-c", pl__now_us()), PL_OK,
                 "%s", pl_errmsg());
    pl__dues *d = calloc(1, sizeof *d);
    cr_assert(d);
    taking t[3] = {{0}};
    int64_t next = 0;
    cr_assert_eq(pl__pg_take_dues(s, "w2", LEASE_US, 3, 0, 0, batch_claim, t, d,
                                  &next),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(d->n, 3);
    for (size_t i = 0; i < d->n; i++) {
        cr_assert_eq(d->st[i], PL_OK, "%s", d->msg[i]);
        bool seen = commit_sees(s, d->lease[i].run, d->lease[i].gen, 2, false);
        cr_expect_eq(seen, d->lease[i].run != quiet, "run #%llu",
                     (unsigned long long)d->lease[i].run);
    }
    free(d);
    pl__pg_close(s);
    free(uri);
}

/* (c) A cancellation delivered while the run holds its lease: its next
 * commit sees it, and every one after (the mark stays). */
Test(pg_cancel, a_cancellation_while_running_is_seen_at_the_next_commit)
{
    char *uri = t_pg_store_uri("t_running");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t run = leased_run(s, "running-a");
    cr_expect_not(commit_sees(s, run, 1, 0, false));
    deliver(s, run, "running-a");
    cr_expect(commit_sees(s, run, 1, 2, false));
    cr_expect(commit_sees(s, run, 1, 4, false));
    pl__pg_close(s);
    free(uri);
}

/*
 * A cancellation delivered while the run's commit holds its lease (its
 * fence's lock) and wants its state after: the delivery holds the state
 * and wants the lease to mark it.  It gives way (its wait for the lease is
 * bounded) and delivers again once the commit is through, where a
 * deadlock would fail one of them; the next commit sees the cancellation.
 */
Test(pg_cancel, a_cancellation_gives_way_to_a_commit_holding_the_lease)
{
    char *uri = t_pg_store_uri("t_giveway");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t run = leased_run(s, "giveway-a");
    PGconn *c = t_pg_admin();
    char sql[256];
    admin_exec(c, "BEGIN", PGRES_COMMAND_OK);
    snprintf(sql, sizeof sql,
             "SELECT 1 FROM t_giveway.leases WHERE run = %llu AND gen = 1 "
             "FOR UPDATE",
             (unsigned long long)run); /* the commit's fence */
    cr_assert_eq(admin_exec(c, sql, PGRES_TUPLES_OK), 1);
    taking t = {s, run, "giveway-a", false, 0, false, PL_OK};
    cr_assert_eq(pthread_create(&t.th, NULL, deliver_main, &t), 0);
    nanosleep(&(struct timespec){0, 20000000L}, NULL);
    snprintf(sql, sizeof sql,
             "UPDATE t_giveway.state SET v = v WHERE run = %llu",
             (unsigned long long)run);
    admin_exec(c, sql, PGRES_COMMAND_OK); /* its state, after its fence */
    admin_exec(c, "COMMIT", PGRES_COMMAND_OK);
    pthread_join(t.th, NULL);
    cr_expect_eq(t.st, PL_OK, "%s", pl_status_name(t.st));
    cr_expect(commit_sees(s, run, 1, 0, false));
    pl__pg_close(s);
    PQfinish(c);
    free(uri);
}

/* ---- the engine's runs ----------------------------------------------------- */

#define LOOP_MAX 3000 /* calls before a run that missed its cancel ends */

static atomic_int g_loops;

/* a "sleep" spinner's sleep: longer than a stall between its record and
 * the look that parks it (c_park()) */
#define NAP_MS 200

/* "spinner": waits for "go" (payload "sleep": sleeps NAP_MS instead), then
 * calls "echo" until it is cancelled, LOOP_MAX times at most; payload
 * "self": cancels its own run after its third call, as another process
 * would while it runs. */
static int spinner(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    const cJSON *how = cJSON_GetObjectItem(a->payload, "how");
    const char *h = cJSON_IsString(how) ? how->valuestring : "";
    int st;
    if (strcmp(h, "sleep") == 0)
        st = pl_ctx_sleep(ctx, NAP_MS);
    else {
        cJSON *p = NULL;
        st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
        cJSON_Delete(p);
    }
    for (int i = 0; !st && i < LOOP_MAX; i++) {
        atomic_fetch_add(&g_loops, 1);
        if (i == 3 && strcmp(h, "self") == 0) {
            char id[PL_MAX_RUN_ID + 1];
            snprintf(id, sizeof id, "%s", pl_ctx_run_id(ctx));
            if ((st = pl_run_cancel(pl_ctx_engine(ctx), id, "self")))
                return st;
        }
        st = pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty());
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static pl_engine *c_engine(const char *schema, pl_registry **reg)
{
    char *uri = t_pg_store_uri(schema);
    *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(*reg, "spinner", spinner, NULL), PL_OK);
    pl_engine *e = t_engine(uri, *reg, PL_DURABILITY_SYNC);
    free(uri);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

/* Start "spinner" as @p id, its payload's "how" @p how: it parks. */
static void c_park(pl_engine *e, const char *id, const char *how)
{
    char json[64];
    snprintf(json, sizeof json, "{\"how\": \"%s\"}", how);
    pl_outcome *o = t_start(e, "spinner", json, id);
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
}

/*
 * (d) A parked run that a signal rides, cancelled while it runs in the
 * signaller's thread: the lease the ride took is marked by the delivery,
 * and the run's next call sees it (its fourth or fifth: the one after the
 * commit that followed the delivery).
 */
Test(pg_cancel, a_ridden_run_sees_its_cancellation_at_its_next_call)
{
    pl_registry *reg;
    pl_engine *e = c_engine("t_ride", &reg);
    c_park(e, "ride-a", "self");
    atomic_store(&g_loops, 0);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, "ride-a", "go", pl_json_empty()), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_CANCELLED, "%s",
                 pl_run_status_name(o->status));
    pl_outcome_free(o);
    cr_expect_leq(atomic_load(&g_loops), 6, "seen %d calls in",
                  atomic_load(&g_loops));
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct racer {
    pl_engine *e;
    const char *id;
    int delay_us;
    int st;
} racer;

static void *cancel_main(void *arg)
{
    racer *r = arg;
    struct timespec ts = {0, (long)r->delay_us * 1000L};
    nanosleep(&ts, NULL);
    r->st = pl_run_cancel(r->e, r->id, "raced");
    return NULL;
}

/*
 * (e) A cancellation racing the take of a parked run, many times: a
 * signal's ride, or a wake (pl_engine_wake()) of a run whose sleep
 * comes due, in one thread, the cancellation in another, up to a
 * millisecond apart either way.  Whichever goes first, and whether the
 * cancellation lands before the take, during it or while the run calls
 * on, the run ends cancelled: never after its LOOP_MAX calls.
 */
Test(pg_cancel, a_cancellation_racing_a_take_is_never_missed)
{
    pl_registry *reg;
    pl_engine *e = c_engine("t_race", &reg);
    enum { N = 24 };
    for (int i = 0; i < N; i++) {
        char id[32];
        bool wake = i % 2;
        snprintf(id, sizeof id, "race-%d", i);
        c_park(e, id, wake ? "sleep" : "go");
        /* a wake's cancellation comes about when the sleep is due */
        int delay = (i * 137) % 900 + (wake ? NAP_MS * 1000 - 450 : 0);
        racer r = {e, id, delay, PL_OK};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, cancel_main, &r), 0);
        if (wake) {
            for (int k = 0; k < 5000 && status_of(e, id) == PL_RUN_WAITING; k++)
                cr_assert_eq(pl_engine_wake(e, NULL), PL_OK, "%s", pl_errmsg());
        } else {
            pl_outcome *o = NULL;
            int st = pl_run_signal(&o, e, id, "go", pl_json_empty());
            cr_expect(st == PL_OK || st == PL_ESTATE, "%s: %s", id,
                      pl_errmsg());
            pl_outcome_free(o);
        }
        pthread_join(th, NULL);
        cr_expect_eq(r.st, PL_OK, "%s: %s", id, pl_status_name(r.st));
        /* a cancellation delivered to a run this engine executes: the
         * run's thread ends it */
        for (int k = 0; k < 2000 && (status_of(e, id) == PL_RUN_RUNNING ||
                                     status_of(e, id) == PL_RUN_WAITING);
             k++) {
            cr_assert_eq(pl_engine_wake(e, NULL), PL_OK, "%s", pl_errmsg());
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        cr_expect_eq(status_of(e, id), PL_RUN_CANCELLED, "%s (%s): %s", id,
                     wake ? "wake" : "ride",
                     pl_run_status_name(status_of(e, id)));
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a store made before the marks ------------------------------------------ */

/*
 * A store made before the leases had their mark (its lease rows without
 * the column, a cancellation waiting in a running run's inbox) gains it
 * when it is opened, each lease marked as its inbox says: the run's next
 * commit sees the cancellation, and one delivered after is seen too.
 */
Test(pg_cancel, a_store_made_before_the_marks_opens_and_cancels)
{
    char *uri = t_pg_store_uri("t_older");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    uint64_t run = leased_run(s, "older-a");
    uint64_t quiet = leased_run(s, "older-b");
    pl__pg_close(s);
    PGconn *c = t_pg_admin();
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO t_older.inbox (run, seq, rec, cancel) VALUES "
             "(%llu, 1, '\\x00', true)",
             (unsigned long long)run);
    admin_exec(c, sql, PGRES_COMMAND_OK);
    admin_exec(c, "ALTER TABLE t_older.leases DROP COLUMN cancel",
               PGRES_COMMAND_OK);

    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    cr_expect(commit_sees(s, run, 1, 0, false), "marked on open");
    cr_expect_not(commit_sees(s, quiet, 1, 0, false));
    deliver(s, quiet, "older-b");
    cr_expect(commit_sees(s, quiet, 1, 2, false));
    pl__pg_close(s);
    PQfinish(c);
    free(uri);
}
