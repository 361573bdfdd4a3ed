/*
 * test_pg.c -- the PostgreSQL store (ledger/pg/), against a real
 * server that tests/pg_run.sh starts for this binary (PL_TEST_PG_URI).  Each
 * test works in a schema of its own.  Covers the store's functions directly
 * (run creation and numbering, steps refused twice, ledger reads with a gap,
 * scans, state updates, listing), and its round trips: one a commit, timers
 * and consumptions in the commit, one more a call.  test_pg_plans.c: the
 * plans the server keeps for a commit's statements; test_pg_engine.c: the
 * engine on it.
 */
#include "support.h"

#include "pg_store.h"
#include "runrec.h"
#include "support_pg_store.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the store's functions ----------------------------------------------- */

Test(pg, store_functions)
{
    char *uri = t_pg_store_uri("t_store");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(pl__pg_path(s), uri);

    /* two creations in one commit get two numbers; a taken id is skipped */
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);
    pl__batch a = {0}, b = {0};
    a.create_id = "run-a";
    a.create_info = &info;
    cr_assert_eq(pl__buf_append(&a.state, "sa", 2), PL_OK);
    b.create_id = "run-b";
    b.create_info = &info;
    cr_assert_eq(pl__buf_append(&b.state, "sb", 2), PL_OK);
    pl__batch *both[2] = {&a, &b};
    cr_assert_eq(pl__pg_commit(s, both, 2, false), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(a.rc, PL_OK);
    cr_expect_eq(b.rc, PL_OK);
    cr_expect_neq(a.run, b.run);
    pl__batch *again[1] = {&b};
    uint64_t b_num = b.run;
    cr_assert_eq(pl__pg_commit(s, again, 1, true), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(b.rc, PL_EEXIST);

    uint64_t num = 0;
    pl__buf got = {0};
    cr_assert_eq(pl__pg_run_find(s, "run-b", &num, &got), PL_OK);
    cr_expect_eq(num, b_num);
    cr_expect(got.len == 4 && memcmp(got.data, "info", 4) == 0);
    cr_expect_eq(pl__pg_run_find(s, "run-x", &num, NULL), PL_ENOTFOUND);
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sa", 2) == 0);
    cr_expect_eq(pl__pg_state_get(s, 999999, &got), PL_ECORRUPT);

    /* steps 0..2 of run a's root ledger, and a step of a callee of step 0 */
    pl__batch w = {0};
    w.run = a.run;
    uint8_t key[16];
    for (uint32_t i = 0; i < 3; i++) {
        step_key(key, a.run, i);
        char v[8];
        snprintf(v, sizeof v, "v%u", i);
        cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)v, 2), PL_OK);
    }
    step_key(key, a.run, 0);
    pl__put_be32(key + 12, 0);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 16, (uint8_t *)"c0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&w.state, "s2", 2), PL_OK);
    pl__batch *one[1] = {&w};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK);
    cr_expect(got.len == 2 && memcmp(got.data, "s2", 2) == 0);

    /* the same steps again: PL_EBUSY, and nothing of that commit is kept */
    pl__buf_reset(&w.state);
    cr_assert_eq(pl__buf_append(&w.state, "s3", 2), PL_OK);
    cr_expect_eq(pl__pg_commit(s, one, 1, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "exists already") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK);
    cr_expect(got.len == 2 && memcmp(got.data, "s2", 2) == 0);

    /* the root ledger reads 0, 1, 2 (not the callee's step) */
    pl__kvs out = {0};
    uint8_t prefix[8];
    pl__put_be64(prefix, a.run);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 0, 100, 1 << 20, &out), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(out.n, 3);
    cr_expect(memcmp(pl__kvs_val(&out, 2), "v2", 2) == 0);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 1, 1, 1 << 20, &out), PL_OK);
    cr_assert_eq(out.n, 1, "at most max_n");
    cr_expect(memcmp(pl__kvs_val(&out, 0), "v1", 2) == 0);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 3, 100, 1 << 20, &out), PL_OK);
    cr_expect_eq(out.n, 0, "past the end");

    /* a gap is corruption: write step 5 of a ledger that has no 4 */
    pl__kvs_reset(&w.steps);
    pl__buf_reset(&w.state);
    step_key(key, a.run, 5);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"v5", 2), PL_OK);
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl__pg_read(s, prefix, 8, 4, 100, 1 << 20, &out), PL_ECORRUPT);
    cr_expect(strstr(pl_errmsg(), "missing its step 4") != NULL, "%s",
              pl_errmsg());

    /* a scan returns every step of the run in key order, keys kept */
    cr_assert_eq(pl__pg_scan(s, a.run, NULL, 0, 100, SIZE_MAX, &out), PL_OK);
    cr_assert_eq(out.n, 5);
    cr_expect_eq(out.e[1].klen, 16, "the callee's step sorts after step 0");
    cr_assert_eq(pl__pg_scan(s, a.run, pl__kvs_key(&out, 1), 16, 2, SIZE_MAX,
                             &out),
                 PL_OK);
    cr_assert_eq(out.n, 2);
    cr_expect(memcmp(pl__kvs_val(&out, 0), "v1", 2) == 0);
    pl__kvs_free(&out);
    pl__kvs_free(&w.steps);
    pl__buf_free(&w.state);
    pl__batch_free(&a);
    pl__batch_free(&b);
    pl__buf_free(&info);
    pl__buf_free(&got);
    pl__pg_close(s);
    free(uri);
}

/* A run longer than one page of pl__pg_each_step(), many INSERTs long. */
Test(pg, store_many_steps)
{
    pl__pg_store *s = pg_store("t_many");
    pl__batch w = {0};
    w.run = 7;
    uint8_t key[12];
    for (uint32_t i = 0; i < 2500; i++) {
        step_key(key, 7, i);
        cr_assert_eq(pl__kvs_add(&w.steps, key, 12, key, 12), PL_OK);
    }
    pl__batch *one[1] = {&w};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    int n = 0;
    cr_assert_eq(pl__pg_each_step(s, 7, count_step, &n), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(n, 2500);
    pl__kvs out = {0};
    uint8_t prefix[8];
    pl__put_be64(prefix, 7);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 0, SIZE_MAX, SIZE_MAX, &out), PL_OK);
    cr_expect_eq(out.n, 1024, "one read returns a bounded number of steps");
    pl__kvs_free(&out);
    pl__batch_free(&w);
    pl__pg_close(s);
}

/* ---- round trips ---------------------------------------------------------- */

static int set_state(pl__buf *state, pl__kvs *extra, void *user)
{
    (void)extra;
    pl__buf_reset(state);
    return pl__buf_append(state, user, strlen(user));
}

/*
 * A commit is one round trip, however many runs (a group commit), steps
 * (more than one statement's worth) and leases it carries; a fence that
 * fails, or a step that exists, fails the whole commit and keeps nothing
 * of it; a state's read-modify-write is two round trips, a lease's take
 * one.
 */
Test(pg, a_commit_is_one_round_trip)
{
    pl__pg_store *s = pg_store("t_rtrip");
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);

    /* two leased creations */
    pl__batch a = {0}, b = {0};
    a.create_id = "rt-a";
    b.create_id = "rt-b";
    a.create_info = b.create_info = &info;
    a.lease_owner = b.lease_owner = "w1";
    a.lease_us = b.lease_us = 60 * 1000000LL;
    cr_assert_eq(pl__buf_append(&a.state, "s0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&b.state, "s0", 2), PL_OK);
    pl__batch *both[2] = {&a, &b};
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__pg_commit(s, both, 2, false), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.connects, c0.connects, "the open's connection is reused");
    cr_expect_eq(c1.statements - c0.statements, 4, "2 creations, 2 leases");

    /* a group of both runs: 2,500 steps of a (three statements' worth) and
     * one of b, both states, both fences, b's execution ending */
    pl__batch wa = {0}, wb = {0};
    wa.run = a.run;
    wb.run = b.run;
    wa.gen = wb.gen = 1;
    wb.release = true;
    uint8_t key[12];
    for (uint32_t i = 0; i < 2500; i++) {
        step_key(key, a.run, i);
        cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    }
    step_key(key, b.run, 0);
    cr_assert_eq(pl__kvs_add(&wb.steps, key, 12, (uint8_t *)"b0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&wa.state, "sa", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&wb.state, "sb", 2), PL_OK);
    pl__batch *group[2] = {&wa, &wb};
    c0 = counts();
    cr_assert_eq(pl__pg_commit(s, group, 2, false), PL_OK, "%s", pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 4,
                 "the plans kept generic, one statement for the group, "
                 "1,000 steps a statement");
    cr_expect_eq(c1.prepares, c0.prepares, "prepared when connected");
    cr_expect_eq(steps_of(s, a.run), 2500);
    cr_expect_eq(steps_of(s, b.run), 1);
    pl__buf got = {0};
    cr_assert_eq(pl__pg_state_get(s, b.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sb", 2) == 0);
    pl__lease l;
    cr_expect_eq(pl__pg_lease_get(s, b.run, &l), PL_ENOTFOUND,
                 "b's execution ended: its lease is dropped");
    cr_assert_eq(pl__pg_lease_get(s, a.run, &l), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(l.gen, 1);

    /* a fence of a lease taken over fails the group: nothing of it stays,
     * the other run's steps and state neither, and the lease it would
     * have dropped is kept */
    pl__kvs_reset(&wa.steps);
    pl__kvs_reset(&wb.steps);
    step_key(key, a.run, 2500);
    cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    step_key(key, b.run, 1);
    cr_assert_eq(pl__kvs_add(&wb.steps, key, 12, key, 12), PL_OK);
    wb.gen = 0; /* b unleased now; a's fence names a generation gone */
    wb.release = false;
    wa.gen = 7;
    wa.release = true;
    pl__buf_reset(&wb.state);
    cr_assert_eq(pl__buf_append(&wb.state, "sX", 2), PL_OK);
    pl__batch *stale[2] = {&wb, &wa};
    c0 = counts();
    cr_expect_eq(pl__pg_commit(s, stale, 2, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "taken over by w1") != NULL, "%s",
              pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(steps_of(s, a.run), 2500);
    cr_expect_eq(steps_of(s, b.run), 1);
    cr_assert_eq(pl__pg_state_get(s, b.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sb", 2) == 0);
    cr_assert_eq(pl__pg_lease_get(s, a.run, &l), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(l.gen, 1, "the lease a failed commit would drop is kept");

    /* a step that exists, in the last statement of three: the same */
    wa.gen = 1;
    pl__kvs_reset(&wa.steps);
    for (uint32_t i = 2500; i < 4500; i++) {
        step_key(key, a.run, i);
        cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    }
    step_key(key, a.run, 0); /* there since the group */
    cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    cr_expect_eq(pl__pg_commit(s, stale, 2, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "exists already") != NULL, "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, a.run), 2500);
    cr_expect_eq(steps_of(s, b.run), 1);
    cr_assert_eq(pl__pg_lease_get(s, a.run, &l), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(l.gen, 1, "the lease is as it was");

    /* the connection came through both failures usable */
    c0 = counts();
    cr_assert_eq(pl__pg_state_update(s, a.run, set_state, "su"), PL_OK, "%s",
                 pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.connects, c0.connects);
    cr_expect_eq(c1.round_trips - c0.round_trips, 2,
                 "a read-modify-write is two round trips");
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "su", 2) == 0);
    /* a failing one keeps nothing */
    cr_expect_eq(pl__pg_state_update(s, 999999, set_state, "sv"), PL_ECORRUPT);
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "su", 2) == 0);

    pl__kvs_free(&wa.steps);
    pl__kvs_free(&wb.steps);
    pl__buf_free(&wa.state);
    pl__buf_free(&wb.state);
    pl__batch_free(&a);
    pl__batch_free(&b);
    pl__buf_free(&info);
    pl__buf_free(&got);
    pl__pg_close(s);
}

/* A take's claim that keeps the run's state, noting in *user whether a
 * cancellation waits. */
static int claim_kept(const pl__taken *t, pl__buf *state, bool *drop,
                      void *user)
{
    *drop = false;
    *(bool *)user = t->inbox_cancel;
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

static int inbox_open(const uint8_t *state, size_t len, void *user)
{
    (void)state;
    (void)len;
    return user ? pl__err(PL_ESTATE, "%s", (const char *)user) : PL_OK;
}

/*
 * Timers and inbox consumptions go in a commit's one statement: a parking
 * commit with its steps, state, timer and a consumed event is one round
 * trip; a timer keeps an earlier due time, also when two batches of one
 * run set it in one group; an event consumed already fails the whole
 * commit with PL_EBUSY and keeps nothing of it.  A delivery is two round
 * trips (the state locked, then the record, the timer and COMMIT), and one
 * its check refuses leaves nothing.
 */
Test(pg, timers_and_consumptions_go_in_the_commit)
{
    pl__pg_store *s = pg_store("t_time");
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);
    pl__batch a = {0};
    a.create_id = "tm-a";
    a.create_info = &info;
    cr_assert_eq(pl__buf_append(&a.state, "s0", 2), PL_OK);
    pl__batch *one[1] = {&a};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());

    /* a delivery: two round trips; its record is seq 1, its timer due */
    uint64_t seq = 0;
    pl__buf ev = {0};
    pl__inbox_rec er = {
        .name = "go", .payload = (uint8_t *)"\x80", .payload_len = 1};
    cr_assert_eq(pl__inbox_encode(&ev, "tm-a", &er), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__pg_inbox_put(s, a.run, "tm-a", inbox_open, NULL, ev.data,
                                  ev.len, NULL, &seq),
                 PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 2);
    cr_expect_eq(seq, 1);
    int64_t due = 0, now = pl__now_us();
    cr_assert_eq(pl__pg_timer_get(s, a.run, &due), PL_OK, "%s", pl_errmsg());
    cr_expect(due > 0 && due <= now, "due at the delivery: %lld",
              (long long)due);
    /* one its check refuses leaves nothing, and the connection usable */
    cr_expect_eq(pl__pg_inbox_put(s, a.run, "tm-a", inbox_open, "ended",
                                  ev.data, ev.len, NULL, &seq),
                 PL_ESTATE);
    cr_expect_str_eq(pl_errmsg(), "ended");
    pl__kvs ib = {0};
    cr_assert_eq(pl__pg_inbox_read(s, a.run, &ib), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ib.n, 1);

    /* a parking commit consuming the event: one round trip, one statement;
     * its later due time does not push back the one the delivery set */
    pl__batch w = {0};
    w.run = a.run;
    uint8_t key[12];
    step_key(key, a.run, 0);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"w0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&w.state, "sw", 2), PL_OK);
    w.timer_us = now + 3600 * 1000000LL;
    w.timer_id = "tm-a";
    w.inbox_del = 1;
    one[0] = &w;
    c0 = counts();
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 2,
                 "one, and its preparation on this connection (the first "
                 "commit of its shape)");
    cr_assert_eq(pl__pg_inbox_read(s, a.run, &ib), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ib.n, 0, "consumed with the commit");
    int64_t kept = 0;
    cr_assert_eq(pl__pg_timer_get(s, a.run, &kept), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(kept, due, "the earlier due time is kept");
    cr_expect_eq(steps_of(s, a.run), 1);
    cr_expect(w.inbox_known && !w.inbox_cancel,
              "the commit says no cancellation waits");

    /* two batches of the run in one group set its timer earlier: one row,
     * the earliest */
    pl__batch g1 = {0}, g2 = {0};
    g1.run = g2.run = a.run;
    g1.timer_id = g2.timer_id = "tm-a";
    g1.timer_us = due - 2000;
    g2.timer_us = due - 5000;
    pl__batch *group[2] = {&g1, &g2};
    cr_assert_eq(pl__pg_commit(s, group, 2, false), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_timer_get(s, a.run, &kept), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(kept, due - 5000);

    /* an event consumed already: the whole commit fails, nothing stays */
    pl__kvs_reset(&w.steps);
    step_key(key, a.run, 1);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"w1", 2), PL_OK);
    pl__buf_reset(&w.state);
    cr_assert_eq(pl__buf_append(&w.state, "sx", 2), PL_OK);
    w.timer_us = due - 9000;
    one[0] = &w;
    cr_expect_eq(pl__pg_commit(s, one, 1, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "consumed by another execution") != NULL,
              "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, a.run), 1);
    pl__buf got = {0};
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sw", 2) == 0);
    cr_assert_eq(pl__pg_timer_get(s, a.run, &kept), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(kept, due - 5000, "the timer is as it was");

    /* a cancellation delivered: the next commit of the run says so */
    pl__inbox_rec cr = {.reason = "stop"};
    pl__buf_reset(&ev);
    cr_assert_eq(pl__inbox_encode(&ev, "tm-a", &cr), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_inbox_put(s, a.run, "tm-a", inbox_open, NULL, ev.data,
                                  ev.len, NULL, &seq),
                 PL_OK, "%s", pl_errmsg());
    pl__batch k = {0};
    k.run = a.run;
    cr_assert_eq(pl__buf_append(&k.state, "sk", 2), PL_OK);
    one[0] = &k;
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_expect(k.inbox_known && k.inbox_cancel);
    pl__buf_free(&k.state);

    /* the due timer is taken once, with the run's lease, and the claim is
     * told of the cancellation */
    pl__lease l;
    int64_t next = -1;
    bool taken = false, cancel = false;
    cr_assert_eq(pl__pg_take_due(s, "w1", 60 * 1000000LL, claim_kept, &cancel,
                                 &l, &taken, &next),
                 PL_OK, "%s", pl_errmsg());
    cr_expect(taken);
    cr_expect(cancel, "the claim was not told of the cancellation");
    cr_expect_eq(l.run, a.run);
    cr_expect_str_eq(l.id, "tm-a");
    cr_expect_str_eq(l.owner, "w1");
    cr_expect_eq(pl__pg_take_due(s, "w2", 60 * 1000000LL, claim_kept, &cancel,
                                 &l, &taken, &next),
                 PL_ENOTFOUND);
    cr_expect_not(taken);
    cr_expect_eq(next, 0, "no timer is left");
    cr_expect_eq(pl__pg_timer_get(s, a.run, &kept), PL_ENOTFOUND);

    pl__kvs_free(&ib);
    pl__kvs_free(&w.steps);
    pl__buf_free(&w.state);
    pl__buf_free(&got);
    pl__buf_free(&ev);
    pl__batch_free(&a);
    pl__buf_free(&info);
    pl__pg_close(s);
}

/* Through the engine: every call more is one round trip more (its commit). */
Test(pg, a_call_is_one_round_trip)
{
    char *uri = t_pg_store_uri("t_rtcall");
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl__pg_counts c[3];
    c[0] = counts();
    pl_outcome *o = t_start(e, "chain", "{\"n\": 10}", "rt-10");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    c[1] = counts();
    o = t_start(e, "chain", "{\"n\": 30}", "rt-30");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    c[2] = counts();
    uint64_t ten = c[1].round_trips - c[0].round_trips,
             thirty = c[2].round_trips - c[1].round_trips;
    cr_expect_eq(c[2].connects, c[0].connects);
    cr_expect_eq(thirty - ten, 20, "%llu round trips for 10 calls, %llu for 30",
                 (unsigned long long)ten, (unsigned long long)thirty);
    /* less the commits' shapes prepared (a state written once a second
     * makes one shape more, in the run that first has it) */
    cr_expect_eq(c[2].statements - c[2].prepares -
                     (c[1].statements - c[1].prepares) -
                     (c[1].statements - c[1].prepares -
                      (c[0].statements - c[0].prepares)),
                 20, "one statement a call");
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}
