/*
 * test_pg_worker.c -- what a worker asks of a PostgreSQL server to execute
 * a queued run, counted (pl__pg_counts_get()): the round trips from the
 * worker's start to the run's completion, so that they cannot grow back
 * unseen.  A count, never a timing.  The guarantees themselves (exactly
 * once across processes, leases, fencing, keys, timers, cancellation) are
 * test_workers.c's, test_flow.c's and test_time*.c's, run on this store as
 * pg_test_*.
 */
#include "support.h"

#include "internal.h"
#include "pg_store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- a worker that stops at its first completed run ----------------------- */

typedef struct counted {
    pl_engine *e;
    pl__pg_counts at_end; /* when the run completed */
    int completed;
} counted;

static void on_event(const pl_event *ev, void *user)
{
    counted *c = user;
    if (ev->kind != PL_EVENT_RUN_COMPLETED)
        return;
    if (c->completed++ == 0)
        pl__pg_counts_get(&c->at_end);
    pl_worker_stop(c->e);
}

/*
 * Submit run @p id of "chain" with @p calls calls, then drain it with a
 * worker of a fresh engine; returns the round trips from the worker's
 * start to the run's completion (the completion's commit included).
 */
static uint64_t drain_one(const char *schema, const char *id, int calls)
{
    char *uri = t_pg_store_uri(schema);
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    char payload[32];
    snprintf(payload, sizeof payload, "{\"n\": %d}", calls);
    cJSON *p = t_json(payload);
    pl_action root = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    pl_engine_close(e);

    counted c = {0};
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.on_event = on_event;
    o.event_user = &c;
    cr_assert_eq(pl_engine_open(&c.e, uri, reg, &o), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c0;
    pl__pg_counts_get(&c0);
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    cr_assert_eq(pl_worker_run(c.e, &wo), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(c.completed, 1);

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, c.e, id), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_eq(info->attempts, 1);
    pl_run_info_free(info);
    pl_engine_close(c.e);
    pl_registry_free(reg);
    free(uri);
    return c.at_end.round_trips - c0.round_trips;
}

TestSuite(pg_worker, .fini = t_cleanup, .timeout = 120);

/*
 * A queued run of one call, from the worker's start to its completion:
 * the worker's first look at the schedules (1: once a second, not a
 * run's) and at the queue (1: an_idle_look_is_one_round_trip), then the
 * run's 4: its take (the lease, the run's info and state
 * read, whether it has steps or a cancellation waiting: BEGIN and one
 * statement), its claim (the state written, COMMIT), its call, and its end
 * (the state, the lease dropped with its concurrency key's place).  No read
 * of a ledger or an inbox: the take said the run has no step and no
 * cancellation.
 */
Test(pg_worker, a_queued_run_of_one_call_is_four_round_trips)
{
    uint64_t n = drain_one("t_rt_one", "one-call", 1);
    cr_expect_eq(n, 1 + 1 + 4, "%llu round trips for a queued run of one call",
                 (unsigned long long)n);
}

/* Each call more is one round trip more, and nothing else. */
Test(pg_worker, each_call_more_is_one_round_trip)
{
    uint64_t n = drain_one("t_rt_ten", "ten-calls", 10);
    cr_expect_eq(n, 1 + 1 + 4 + 9,
                 "%llu round trips for a queued run of ten calls",
                 (unsigned long long)n);
}

/* ---- the take ------------------------------------------------------------ */

static void admin(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    cr_assert(es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
}

typedef struct told {
    int calls;
    bool known, no_steps, inbox_cancel;
} told;

/* A take's claim that notes what the store said, and writes the state as
 * it was. */
static int note(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    (void)drop;
    told *x = user;
    x->calls++;
    x->known = t->known;
    x->no_steps = t->no_steps;
    x->inbox_cancel = t->inbox_cancel;
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

/* An engine on @p uri with run @p id of "echo" queued. */
static pl_engine *queued(const char *uri, const pl_registry *reg,
                         const char *id)
{
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    cJSON *p = t_json("{}");
    pl_action root = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    return e;
}

/* pl__store_take() for "w1", its claim noting into @p x. */
static int take(pl_engine *e, told *x, pl__lease *l, bool *taken)
{
    return pl__store_take(e->store, "w1", 60000000, note, x, l, taken);
}

/* The take says whether the run has steps and a cancellation waiting: a
 * run never executed has neither; one that ran (here: completed, then
 * queued again behind the engine's back, a cancellation in its inbox) has
 * both. */
Test(pg_worker, the_take_says_whether_a_run_has_steps_and_a_cancellation)
{
    char *uri = t_pg_store_uri("t_told");
    pl_registry *reg = t_registry();
    pl_engine *e = queued(uri, reg, "fresh");
    told x = {0};
    pl__lease l;
    bool taken = false;
    cr_assert_eq(take(e, &x, &l, &taken), PL_OK, "%s", pl_errmsg());
    cr_expect(x.known && x.no_steps && !x.inbox_cancel);

    pl_outcome_free(t_start(e, "echo", "{}", "ran"));
    PGconn *c = t_pg_admin();
    admin(c, "INSERT INTO t_told.leases (run, gen, owner, id, expires, "
             "qrank, flimit) SELECT num, 7, '', 'ran', 0, 0, 0 FROM "
             "t_told.runs WHERE id = convert_to('ran', 'UTF8')");
    admin(c, "INSERT INTO t_told.inbox (run, seq, rec, cancel) SELECT num, "
             "1, '\\x00', true FROM t_told.runs WHERE id = "
             "convert_to('ran', 'UTF8')");
    PQfinish(c);
    x = (told){0};
    cr_assert_eq(take(e, &x, &l, &taken), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(l.id, "ran");
    cr_expect_eq(l.gen, 8);
    cr_expect(x.known && !x.no_steps && x.inbox_cancel);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* A run whose state another transaction holds locked (a delivery, a
 * deletion: they lock the state before the lease, the take the lease
 * first) is passed over, never waited for: the take is rolled back, the
 * run stays queued, and the next take gets it. */
Test(pg_worker, a_take_passes_over_a_state_another_transaction_holds)
{
    char *uri = t_pg_store_uri("t_held");
    pl_registry *reg = t_registry();
    pl_engine *e = queued(uri, reg, "held");
    PGconn *c = t_pg_admin();
    admin(c, "BEGIN");
    admin(c, "SELECT v FROM t_held.state FOR UPDATE");
    told x = {0};
    pl__lease l;
    bool taken = true;
    cr_expect_eq(take(e, &x, &l, &taken), PL_EBUSY);
    cr_expect_not(taken);
    cr_expect_eq(x.calls, 0);
    cr_expect(strstr(pl_errmsg(), "taken next time") != NULL, "%s",
              pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "held"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_SUBMITTED);
    pl_run_info_free(info);
    admin(c, "COMMIT");
    PQfinish(c);
    cr_assert_eq(take(e, &x, &l, &taken), PL_OK, "%s", pl_errmsg());
    cr_expect(taken);
    cr_expect_str_eq(l.id, "held");
    cr_expect_eq(l.gen, 1, "the rolled-back take left generation %llu",
                 (unsigned long long)l.gen);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* Submit @p n runs of "echo" to @p e, ids @p prefix-NN, with concurrency
 * key @p key (NULL: none), limit 1. */
static void submit_n(pl_engine *e, const char *prefix, int n, const char *key)
{
    cJSON *p = t_json("{}");
    pl_action root = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    for (int i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%03d", prefix, i);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        ro.concurrency_key = key;
        ro.concurrency_limit = key ? 1 : 0;
        cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s",
                     pl_errmsg());
    }
    cJSON_Delete(p);
}

/* A take from @p e: run @p id at generation @p gen, its claim called once
 * (NULL: nothing taken). */
static void takes_next(pl_engine *e, const char *id, uint64_t gen)
{
    told x = {0};
    pl__lease l;
    bool taken = false;
    if (!id) {
        cr_expect_eq(take(e, &x, &l, &taken), PL_ENOTFOUND, "%s", pl_errmsg());
        cr_expect_not(taken, "took %s", l.id);
        cr_expect_eq(x.calls, 0);
        return;
    }
    cr_assert_eq(take(e, &x, &l, &taken), PL_OK, "%s: %s", id, pl_errmsg());
    cr_expect(taken);
    cr_expect_str_eq(l.id, id);
    cr_expect_eq(l.gen, gen, "%s: generation %llu", id,
                 (unsigned long long)l.gen);
    cr_expect_eq(x.calls, 1);
}

/* @p n takes from @p e get the runs @p want in that order, each at its
 * lease's first generation; then nothing is left to take. */
static void takes_in_order(pl_engine *e, const char *const *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        takes_next(e, want[i], 1);
    takes_next(e, NULL, 0);
}

/* Runs of "echo" to submit: @p n of them, ids @p prefix-NN, with
 * concurrency key @p key (NULL: none), limit 1. */
typedef struct queued_n {
    const char *prefix;
    int n;
    const char *key;
} queued_n;

/* A store @p schema with the @p nq queues @p q submitted in that order and
 * the lease of run @p held (NULL: none) locked by another transaction:
 * takes get @p during, in order, then nothing; once it commits, @p after. */
static void takes_beside_a_held_lease(const char *schema, const queued_n *q,
                                      size_t nq, const char *held,
                                      const char *const *during, size_t n,
                                      const char *const *after, size_t m)
{
    char *uri = t_pg_store_uri(schema);
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    for (size_t i = 0; i < nq; i++)
        submit_n(e, q[i].prefix, q[i].n, q[i].key);
    PGconn *c = NULL;
    if (held) {
        char sql[300];
        snprintf(sql, sizeof sql,
                 "SELECT l.run FROM %s.leases l JOIN %s.runs r ON r.num = "
                 "l.run WHERE r.id = convert_to('%s', 'UTF8') FOR UPDATE OF l",
                 schema, schema, held);
        c = t_pg_admin();
        admin(c, "BEGIN");
        admin(c, sql);
    }
    takes_in_order(e, during, n);
    if (c) {
        admin(c, "COMMIT");
        PQfinish(c);
        takes_in_order(e, after, m);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* A store @p schema with the @p nq queues @p q submitted in that order,
 * from which takes get @p want, in order, then nothing. */
static void takes_from(const char *schema, const queued_n *q, size_t nq,
                       const char *const *want, size_t n)
{
    takes_beside_a_held_lease(schema, q, nq, NULL, want, n, NULL, 0);
}

/* The take reads the queue a few leases at a time, in its order, and goes
 * on past a batch it could take nothing from: here 40 runs of a key whose
 * one place the first holds, then two runs without a key (then the key's
 * place is held: nothing more to take). */
Test(pg_worker, a_take_goes_on_past_a_full_key_in_the_queues_order)
{
    static const queued_n q[] = {{"keyed", 40, "k"}, {"free", 2, NULL}};
    static const char *const want[] = {"keyed-000", "free-000", "free-001"};
    takes_from("t_walk", q, 2, want, 3);
}

/* Runs with and without a key, taken in the queue's order: a head without
 * a key is taken by the take's plain statement, a head with one by
 * pl_take() (its key's place counted), and a head whose key is full (k-001
 * at the end) is passed over as before. */
Test(pg_worker, a_take_keeps_the_queues_order_with_and_without_keys)
{
    static const queued_n q[] = {{"a", 1, NULL}, {"k", 2, "k"}, {"b", 1, NULL}};
    static const char *const want[] = {"a-000", "k-000", "b-000"};
    takes_from("t_mixed", q, 3, want, 3);
}

/* A queued lease another transaction holds locked (a commit's fence, a
 * delivery) is skipped, never waited for: the take gets the next run in
 * the queue, and the held one once it is free. */
Test(pg_worker, a_take_skips_a_lease_another_transaction_holds)
{
    static const queued_n q[] = {{"q", 2, NULL}};
    static const char *const next[] = {"q-001"}, *const held[] = {"q-000"};
    takes_beside_a_held_lease("t_skip", q, 1, "q-000", next, 1, held, 1);
}

/* A queued lease with a key that another transaction holds locked (another
 * worker's take, which locked it as its head and has not yet taken its
 * key's advisory lock) is passed over with its key: the key's later runs
 * wait behind it, never go first.  A take that passed over the held lease
 * alone got the key's lock first and took k's second run, its first left
 * to wait behind it for as long as that one ran.  Once free, k-000 is
 * taken, and k-001 waits for k's one place. */
Test(pg_worker, a_take_passes_over_a_held_keyed_lease_with_its_key)
{
    static const queued_n q[] = {{"k", 2, "k"}, {"free", 1, NULL}};
    static const char *const other[] = {"free-000"}, *const first[] = {"k-000"};
    takes_beside_a_held_lease("t_hkey", q, 2, "k-000", other, 1, first, 1);
}

/* A take reads the queue's first leases by index, never the whole queue:
 * five takes from a queue of 1,000, planned with the table's statistics,
 * read no lease row by a sequential scan (the server's statistics of the
 * table, flushed when the engine's connections close; on a much smaller
 * table the server may rightly scan it whole to find a row).  A take that
 * sorted the whole queue read every queued row each time. */
Test(pg_worker, a_take_reads_the_head_of_the_queue_not_all_of_it)
{
    char *uri = t_pg_store_uri("t_head");
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    submit_n(e, "q", 1000, NULL);
    PGconn *c = t_pg_admin();
    admin(c, "ANALYZE t_head.leases"); /* planned with statistics */
    told x = {0};
    pl__lease l;
    bool taken = false;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(take(e, &x, &l, &taken), PL_OK, "%s", pl_errmsg());
        cr_expect(taken);
    }
    pl_engine_close(e);
    /* the engine's backends flush their statistics as they exit */
    long long upd = 0, seq = -1;
    for (int i = 0; i < 200 && upd < 5; i++) {
        PGresult *r = PQexec(c, "SELECT n_tup_upd, seq_tup_read FROM "
                                "pg_stat_user_tables WHERE relid = "
                                "'t_head.leases'::regclass");
        cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                     PQresultErrorMessage(r));
        upd = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        seq = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        PQclear(r);
        if (upd < 5) {
            struct timespec ts = {0, 25000000};
            nanosleep(&ts, NULL);
        }
    }
    PQfinish(c);
    cr_assert_geq(upd, 5, "the takes' statistics never arrived");
    cr_expect_lt(seq, 1000, "five takes read %lld lease rows sequentially",
                 seq);
    pl_registry_free(reg);
    free(uri);
}

/*
 * 2,000 runs running ahead of the queue (their leases live, held by
 * another worker, ranked before every queued run; one of them holds key
 * k's one place), and among the queued runs two whose worker crashed
 * (owned leases run out): takes get the runs in the queue's order, each
 * crashed run in its place, before the runs queued after it; k's runs
 * wait while k's place is held and come in order once it frees.  The
 * queued runs and the live leases are indexed apart, so the take does
 * not pass the running runs (test_pg_plans.c has the plans).
 */
Test(pg_worker, a_take_past_many_running_runs_keeps_the_queues_order)
{
    char *uri = t_pg_store_uri("t_fleet");
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    submit_n(e, "crashed", 1, NULL);
    submit_n(e, "q", 2, NULL);
    submit_n(e, "k", 2, "k");
    submit_n(e, "dead", 1, NULL);
    submit_n(e, "late", 1, NULL);
    PGconn *c = t_pg_admin();
    admin(c, "INSERT INTO t_fleet.runs (id, num, info) SELECT convert_to("
             "'busy-' || i, 'UTF8'), nextval('t_fleet.run_num'), '\\x00' "
             "FROM generate_series(1, 2000) i");
    admin(c, "INSERT INTO t_fleet.state SELECT r.num, '\\x00' FROM "
             "t_fleet.runs r WHERE NOT EXISTS (SELECT 1 FROM t_fleet.state "
             "s WHERE s.run = r.num)");
    admin(c, "INSERT INTO t_fleet.leases (run, gen, owner, id, expires, "
             "qrank, fkey, flimit) SELECT r.num, 1, 'other@host', "
             "convert_from(r.id, 'UTF8'), (extract(epoch from "
             "clock_timestamp()) * 1e6)::bigint + 3600000000, r.num - 100000, "
             "CASE WHEN r.id = convert_to('busy-7', 'UTF8') THEN 'k' END, "
             "CASE WHEN r.id = convert_to('busy-7', 'UTF8') THEN 1 ELSE 0 "
             "END FROM t_fleet.runs r WHERE NOT EXISTS (SELECT 1 FROM "
             "t_fleet.leases l WHERE l.run = r.num)");
    admin(c, "UPDATE t_fleet.leases SET owner = 'gone@host', gen = 1, "
             "expires = 1 WHERE id IN ('crashed-000', 'dead-000')");
    admin(c, "ANALYZE t_fleet.leases");
    takes_next(e, "crashed-000", 2);
    takes_next(e, "q-000", 1);
    takes_next(e, "q-001", 1);
    takes_next(e, "dead-000", 2); /* k-000 and k-001 wait for k's place */
    takes_next(e, "late-000", 1);
    takes_next(e, NULL, 0);
    admin(c, "DELETE FROM t_fleet.leases WHERE id = 'busy-7'"); /* k frees */
    takes_next(e, "k-000", 1);
    takes_next(e, NULL, 0); /* k-001 waits for k-000 */
    PQfinish(c);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* ---- a wake ---------------------------------------------------------------- */

/* "napper": sleeps until payload.until (Unix ms), then completes. */
static int napper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(a->payload, "until");
    int st = pl_ctx_sleep_until(ctx, (int64_t)u->valuedouble);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/*
 * A waiting run whose timer is due, woken by pl_engine_wake(), from the
 * wake's start to the run's completion: the schedules' look (1), the
 * run's take (the timer, the lease with its key, the run's info and state
 * read, whether a cancellation waits, its root ledger's first records:
 * BEGIN and one statement) and its claim (the state written, COMMIT), 2,
 * and its end, 1: no look at its inbox (the take said no cancellation
 * waits), no read of its ledger (read with the take, and short of its
 * limits: its end).  The timer's take and the run's continue, each a
 * transaction of its own, were 9: the timer 1, the run found and its
 * state read 2, the claim 2, the ledger 2, the inbox 1, the end 1; then
 * 4, the ledger read alone.
 */
Test(pg_worker, a_woken_run_is_three_round_trips)
{
    char *uri = t_pg_store_uri("t_rt_wake");
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    counted c = {0};
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.on_event = on_event;
    o.event_user = &c;
    cr_assert_eq(pl_engine_open(&c.e, uri, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(c.e, 0), PL_OK);
    /* it sleeps 50 ms, longer on a host so slow that it was due before it
     * parked (then it completed: another is started) */
    char id[16];
    for (long ms = 50;; ms *= 4) {
        cr_assert_lt(ms, 100000, "no run could park on this host");
        snprintf(id, sizeof id, "nap-%ld", ms);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        char payload[64];
        snprintf(payload, sizeof payload, "{\"until\": %lld}",
                 (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 + ms);
        cJSON *p = t_json(payload);
        pl_action root = {PL_ACTION_VERSION, "napper", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        ro.concurrency_key = "k";
        ro.concurrency_limit = 1;
        cr_assert_eq(pl_run_submit(NULL, c.e, &root, &ro), PL_OK, "%s",
                     pl_errmsg());
        cJSON_Delete(p);
        pl_outcome *out = NULL;
        cr_assert_eq(pl_run_continue(&out, c.e, id, NULL), PL_OK, "%s",
                     pl_errmsg());
        pl_run_status st = out->status;
        pl_outcome_free(out);
        if (st != PL_RUN_WAITING)
            continue;
        struct timespec nap = {(ms + 50) / 1000, (ms + 50) % 1000 * 1000000L};
        nanosleep(&nap, NULL); /* past its wake time */
        break;
    }
    c.completed = 0;
    pl__pg_counts c0;
    pl__pg_counts_get(&c0);
    int64_t next = -1;
    cr_assert_eq(pl_engine_wake(c.e, &next), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(c.completed, 1, "the run was not woken");
    cr_expect_eq(next, 0, "a timer is left");
    uint64_t n = c.at_end.round_trips - c0.round_trips;
    cr_expect_eq(n, 1 + 3, "%llu round trips for a woken run",
                 (unsigned long long)n);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, c.e, id), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    pl_run_info_free(info);
    pl_engine_close(c.e);
    pl_registry_free(reg);
    free(uri);
}

/* Park run @p id of "napper", sleeping until @p until_ms (Unix ms);
 * false when it did not park (the host so slow that it was due first). */
static bool park_napper(pl_engine *e, const char *id, long long until_ms)
{
    char payload[64];
    snprintf(payload, sizeof payload, "{\"until\": %lld}", until_ms);
    cJSON *p = t_json(payload);
    pl_action root = {PL_ACTION_VERSION, "napper", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *out = NULL;
    cr_assert_eq(pl_run_start(&out, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    bool parked = out->status == PL_RUN_WAITING;
    pl_outcome_free(out);
    return parked;
}

typedef struct all_done {
    pl__pg_counts at_last; /* when the last run completed */
    int completed;
} all_done;

static void on_each(const pl_event *ev, void *user)
{
    all_done *c = user;
    if (ev->kind != PL_EVENT_RUN_COMPLETED)
        return;
    c->completed++;
    pl__pg_counts_get(&c->at_last);
}

/*
 * Waiting runs due together are taken in batches: for a batch, BEGIN and
 * one statement (the timers, the leases, the runs' records and ledgers),
 * then the claims and COMMIT; then each run's end, one round trip each.
 * Ten runs due, from pl_engine_wake()'s start to the last completion: the
 * schedules' look (1), two batches (8 and 2: 2 each) and ten ends, 15;
 * each run woken once.
 */
Test(pg_worker, woken_runs_are_taken_in_batches)
{
    char *uri = t_pg_store_uri("t_rt_batch");
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    all_done c = {0};
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.on_event = on_each;
    o.event_user = &c;
    pl_engine *e;
    cr_assert_eq(pl_engine_open(&e, uri, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    enum { N = 10 };
    long ms = 200;
    for (;; ms *= 4) { /* all parked, or again with longer naps */
        cr_assert_lt(ms, 100000, "no runs could park on this host");
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        long long t0 = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        bool all = true;
        for (int i = 0; i < N && all; i++) {
            char id[32];
            snprintf(id, sizeof id, "batch-%ld-%d", ms, i);
            all = park_napper(e, id, t0 + ms + i); /* due in this order */
        }
        if (all)
            break;
    }
    struct timespec nap = {(ms + 50) / 1000, (ms + 50) % 1000 * 1000000L};
    nanosleep(&nap, NULL); /* all due */
    c.completed = 0;
    pl__pg_counts c0;
    pl__pg_counts_get(&c0);
    int64_t next = -1;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(c.completed, N, "%d runs woken", c.completed);
    cr_expect_eq(next, 0, "a timer is left");
    uint64_t n = c.at_last.round_trips - c0.round_trips;
    cr_expect_eq(n, 1 + 2 + 2 + N, "%llu round trips for %d woken runs",
                 (unsigned long long)n, N);
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "batch-%ld-%d", ms, i);
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
        cr_expect_eq(info->status, PL_RUN_COMPLETED, "%s", id);
        cr_expect_eq(info->attempts, 2, "%s: woken more than once", id);
        pl_run_info_free(info);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/*
 * A run started that parks at once (a sleep): its creation (the run, its
 * state and lease: one pipeline), then its parking commit (its steps, its
 * timer, the lease dropped), 2 round trips; no look at its inbox, empty
 * when the run was made (it was 3).
 */
Test(pg_worker, a_run_started_that_parks_is_two_round_trips)
{
    char *uri = t_pg_store_uri("t_rt_park");
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    pl_engine *e;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long t0 = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    cr_assert(park_napper(e, "park-0", t0 + 3600000)); /* connections made */
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    cr_assert(park_napper(e, "park-1", t0 + 3600000), "it did not park");
    pl__pg_counts_get(&c1);
    cr_expect_eq(c1.round_trips - c0.round_trips, 2,
                 "%llu round trips to start a run that parks",
                 (unsigned long long)(c1.round_trips - c0.round_trips));
    /* a cancellation finds it parked, and ends it */
    cr_assert_eq(pl_run_cancel(e, "park-1", "stop"), PL_OK, "%s", pl_errmsg());
    int64_t next = 0;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "park-1"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_CANCELLED);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* ---- an idle worker's look ------------------------------------------------ */

static pl__pg_counts counts(void)
{
    pl__pg_counts c;
    pl__pg_counts_get(&c);
    return c;
}

/* pl__store_poll() on @p e, in one round trip, taking nothing. */
static void look(pl_engine *e, bool *queued, bool *due, int64_t *next)
{
    bool known = false;
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__store_poll(e->store, &known, queued, due, next), PL_OK,
                 "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect(known);
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
}

/*
 * What an idle worker asks before it takes: whether a lease has run out
 * (a queued or crashed run), whether a timer is due, and when the next
 * is due, in one round trip, without taking anything.
 */
Test(pg_worker, a_look_says_what_a_take_may_find)
{
    char *uri = t_pg_store_uri("t_look");
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    bool queued = true, due = true;
    int64_t next = 1;
    look(e, &queued, &due, &next);
    cr_expect(!queued && !due && next == 0, "an empty store");

    PGconn *c = t_pg_admin();
    admin(c, "INSERT INTO t_look.leases (run, gen, owner, id, expires, "
             "qrank, flimit) VALUES (77, 3, 'w9', 'r77', 0, 0, 0)");
    look(e, &queued, &due, &next);
    cr_expect(queued && !due && next == 0, "a lease run out");
    admin(c, "UPDATE t_look.leases SET expires = 9000000000000000");
    look(e, &queued, &due, &next);
    cr_expect(!queued, "a lease held");
    admin(c, "INSERT INTO t_look.timers (run, due, id, rec) VALUES (77, "
             "8000000000000000, 'r77', '\\x00')");
    look(e, &queued, &due, &next);
    cr_expect(!queued && !due && next == 8000000000000000LL,
              "a timer due later: %lld", (long long)next);
    admin(c, "UPDATE t_look.timers SET due = 5");
    look(e, &queued, &due, &next);
    cr_expect(!queued && due && next == 5, "a timer due");
    /* nothing was taken */
    PGresult *r = PQexec(c, "SELECT gen, owner FROM t_look.leases WHERE run = "
                            "77 AND EXISTS (SELECT 1 FROM t_look.timers)");
    cr_assert_eq(PQntuples(r), 1, "%s", PQresultErrorMessage(r));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "3");
    cr_expect_str_eq(PQgetvalue(r, 0, 1), "w9");
    PQclear(r);
    PQfinish(c);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

static void *run_worker(void *arg)
{
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 600000; /* one look, then a wait the stop ends */
    return (void *)(intptr_t)pl_worker_run(arg, &wo);
}

/*
 * An idle worker's look at an empty store is one round trip (with its
 * first look at the schedules, once a second), where a take that found
 * nothing and a look at the timers were four: the take, its rollback,
 * the timers' take, the next timer read.
 */
Test(pg_worker, an_idle_look_is_one_round_trip)
{
    char *uri = t_pg_store_uri("t_idle");
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, NULL), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c0 = counts();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, run_worker, e), 0);
    /* until it has looked (a wait, bounded, not a measurement) */
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 30000 && counts().round_trips - c0.round_trips < 2; i++)
        nanosleep(&ms, NULL);
    pl_worker_stop(e);
    void *rc;
    cr_assert_eq(pthread_join(t, &rc), 0);
    cr_expect_eq((intptr_t)rc, PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1 + 1,
                 "%llu round trips for the schedules and one idle look",
                 (unsigned long long)(c1.round_trips - c0.round_trips));
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* The store's events: how many of each, and those out of turn (a loss
 * while lost, a return while not). */
static _Atomic int g_lost, g_back, g_lost_st, g_out_of_turn;

static void on_store_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STORE_LOST && !ev->run_id && ev->detail) {
        atomic_store(&g_lost_st, ev->status);
        if (atomic_fetch_add(&g_lost, 1) != atomic_load(&g_back))
            atomic_fetch_add(&g_out_of_turn, 1);
    } else if (ev->kind == PL_EVENT_STORE_BACK && ev->detail &&
               strstr(ev->detail, "after")) {
        if (atomic_fetch_add(&g_back, 1) + 1 != atomic_load(&g_lost))
            atomic_fetch_add(&g_out_of_turn, 1);
    }
}

static void *store_worker(void *e)
{
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.poll_ms = 10;
    return (void *)(intptr_t)pl_worker_run(e, &o);
}

/* The server drops the engine's sessions under an idle worker: the
 * worker's next look fails, PL_EVENT_STORE_LOST says so (the cause, its
 * status, no run id), once until PL_EVENT_STORE_BACK says it answers
 * again (engine.h; a session dropped after that one answered is another
 * outage); then it goes on, a run submitted meanwhile done. */
Test(pg_worker, a_store_lost_and_back_is_reported_once_each)
{
    char *uri = t_pg_store_uri("t_lost");
    pl_registry *reg = t_registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = on_store_event;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, reg, &eo), PL_OK, "%s", pl_errmsg());
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, store_worker, e), 0);
    PGconn *admin = t_pg_admin();
    for (int i = 0; i < 12000 && !atomic_load(&g_back); i++) {
        if (!atomic_load(&g_lost))
            PQclear(PQexec(admin, "SELECT pg_terminate_backend(pid) FROM "
                                  "pg_stat_activity WHERE application_name "
                                  "= 't_lost'"));
        struct timespec nap = {0, 5000000L};
        nanosleep(&nap, NULL);
    }
    PQfinish(admin);
    pl_action a = {PL_ACTION_VERSION, "echo", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "after";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    for (int i = 0; i < 12000 && status_of(e, "after") != PL_RUN_COMPLETED;
         i++) {
        struct timespec nap = {0, 5000000L};
        nanosleep(&nap, NULL);
    }
    pl_worker_stop(e);
    void *rc = NULL;
    cr_assert_eq(pthread_join(th, &rc), 0);
    cr_expect_eq((intptr_t)rc, PL_OK);
    cr_expect_geq(atomic_load(&g_lost), 1);
    cr_expect_eq(atomic_load(&g_lost_st), PL_ESTORE);
    cr_expect_eq(atomic_load(&g_back), atomic_load(&g_lost));
    cr_expect_eq(atomic_load(&g_out_of_turn), 0);
    cr_expect_eq(status_of(e, "after"), PL_RUN_COMPLETED);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}
