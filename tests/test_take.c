/*
 * test_take.c -- a worker's take (pl__store_take(), TAKE in store.h): the
 * next expired lease, its run read and claimed, in one transaction; and
 * what a claim that refuses leaves: the lease kept unclaimed, or dropped;
 * a keyed lease that ran out, which fences its holder though untaken; and
 * a timer, which keeps its earlier due time.
 * On the store the suite runs on: LMDB, and PostgreSQL as pg_test_take.
 * The take's round trips on PostgreSQL are test_pg_worker.c's.
 */
#include "support.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What a take's claim saw, and what it answers. */
typedef struct seen {
    int calls;
    char id[PL_MAX_RUN_ID + 1];
    pl_run_status status;
    size_t info_len;
    int refuse; /* PL_OK: claim, writing the state as it was */
    bool drop;
} seen;

static int claim(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    seen *s = user;
    s->calls++;
    snprintf(s->id, sizeof s->id, "%s", t->lease.id);
    s->info_len = t->info_len;
    pl__run_state rs;
    int st = pl__run_state_decode(&rs, t->lease.id, t->state, t->state_len);
    if (st)
        return st;
    s->status = rs.status;
    pl__run_state_clear(&rs);
    if (s->refuse) {
        *drop = s->drop;
        return pl__err(s->refuse, "refused by the test");
    }
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

static pl_engine *k_engine(const char *path, const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.host_id = "host-t";
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

/* Submit run @p id of "echo", under concurrency key @p key (limit 1) when
 * @p key is not NULL. */
static void k_submit_keyed(pl_engine *e, const char *id, const char *key)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = "echo";
    root.payload = t_json("{\"x\": 1}");
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? 1 : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete((cJSON *)root.payload);
}

static void k_submit(pl_engine *e, const char *id)
{
    k_submit_keyed(e, id, NULL);
}

/* pl__store_take() for @p owner, its claim noting into @p s. */
static int k_take(pl_engine *e, const char *owner, seen *s, pl__lease *l,
                  bool *taken)
{
    return pl__store_take(e->store, owner, 60000000, claim, s, l, taken);
}

/* Run @p run's lease is held by @p owner, generation @p gen, live. */
static void k_held(pl_engine *e, uint64_t run, const char *owner, uint64_t gen)
{
    pl__lease held;
    cr_assert_eq(pl__store_lease_get(e->store, run, &held), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_str_eq(held.owner, owner);
    cr_expect_eq(held.gen, gen);
    cr_expect_gt(held.expires_in_us, 0);
}

TestSuite(take, .fini = t_cleanup, .timeout = 60);

Test(take, an_empty_queue_is_enotfound_and_takes_nothing)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    seen s = {0};
    pl__lease l;
    bool taken = true;
    cr_expect_eq(k_take(e, "w1", &s, &l, &taken), PL_ENOTFOUND);
    cr_expect_not(taken);
    cr_expect_eq(s.calls, 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The claim gets the run's info and state; its answer is written with the
 * lease, this worker's, which nobody else takes. */
Test(take, the_run_taken_is_claimed_with_its_lease)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    k_submit(e, "one");
    seen s = {0};
    pl__lease l;
    bool taken = false;
    cr_assert_eq(k_take(e, "w1", &s, &l, &taken), PL_OK, "%s", pl_errmsg());
    cr_expect(taken);
    cr_expect_geq(s.calls, 1);
    cr_expect_str_eq(s.id, "one");
    cr_expect_eq(s.status, PL_RUN_SUBMITTED);
    cr_expect_gt(s.info_len, 0);
    cr_expect_str_eq(l.id, "one");
    cr_expect_str_eq(l.owner, "w1");
    cr_expect_eq(l.gen, 1);
    k_held(e, l.run, "w1", 1);
    /* held: another worker finds nothing to take */
    seen s2 = {0};
    cr_expect_eq(k_take(e, "w2", &s2, &l, &taken), PL_ENOTFOUND);
    cr_expect_not(taken);
    cr_expect_eq(s2.calls, 0);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A claim that refuses (a run this worker cannot execute) leaves the lease
 * taken but the run unclaimed: it is not taken again until the lease runs
 * out, and its state is as it was. */
Test(take, a_refused_claim_keeps_the_lease_and_the_state)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    k_submit(e, "kept");
    seen s = {.refuse = PL_ENOTFOUND};
    pl__lease l;
    bool taken = false;
    cr_expect_eq(k_take(e, "w1", &s, &l, &taken), PL_ENOTFOUND);
    cr_expect(taken, "a refused claim took no lease");
    cr_expect(strstr(pl_errmsg(), "refused by the test") != NULL, "%s",
              pl_errmsg());
    cr_expect_str_eq(l.owner, "w1");
    k_held(e, l.run, "w1", l.gen);
    cr_expect_eq(status_of(e, "kept"), PL_RUN_SUBMITTED);
    seen s2 = {0};
    cr_expect_eq(k_take(e, "w2", &s2, &l, &taken), PL_ENOTFOUND);
    cr_expect_not(taken);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A claim that finds nothing to execute drops the lease with the take. */
Test(take, a_claim_with_nothing_to_execute_drops_the_lease)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    k_submit(e, "stale");
    seen s = {.refuse = PL_ESTATE, .drop = true};
    pl__lease l;
    bool taken = false;
    cr_expect_eq(k_take(e, "w1", &s, &l, &taken), PL_ESTATE);
    cr_expect(taken);
    pl__lease held;
    cr_expect_eq(pl__store_lease_get(e->store, l.run, &held), PL_ENOTFOUND);
    cr_expect_eq(status_of(e, "stale"), PL_RUN_SUBMITTED);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The queue's order holds through takes: the first submitted first. */
Test(take, takes_follow_the_queue)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    const char *ids[] = {"q1", "q2", "q3"};
    for (int i = 0; i < 3; i++)
        k_submit(e, ids[i]);
    for (int i = 0; i < 3; i++) {
        seen s = {0};
        pl__lease l;
        bool taken = false;
        cr_assert_eq(k_take(e, "w1", &s, &l, &taken), PL_OK, "%s", pl_errmsg());
        cr_expect_str_eq(l.id, ids[i]);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* "dies": the process ends in it, the run's lease held. */
static int dies(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    _exit(0);
}

/* Wait until run @p run's lease has expired. */
static void k_expired(pl_engine *e, uint64_t run)
{
    for (int i = 0;; i++) {
        pl__lease l;
        cr_assert_eq(pl__store_lease_get(e->store, run, &l), PL_OK, "%s",
                     pl_errmsg());
        if (l.expires_in_us <= 0)
            return;
        cr_assert_lt(i, 6000, "the lease never expired");
        struct timespec nap = {0, 10000000L};
        nanosleep(&nap, NULL);
    }
}

/* A crashed run keeps its rank (time.h, the queue's order): a queued run
 * whose worker died, taken again before the runs queued after it; and a
 * run pl_run_start() began that crashed, ranked when its lease was made,
 * after the runs queued before it and before those queued after. */
Test(take, a_crashed_run_keeps_its_rank)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "dies", dies, NULL), PL_OK);
    pl_engine *e = k_engine(path, reg);
    k_submit(e, "q1");
    k_submit(e, "q2");
    seen s = {0};
    pl__lease l;
    bool taken = false;
    /* q1's worker dies: its lease lasts 1 us */
    cr_assert_eq(pl__store_take(e->store, "w1", 1, claim, &s, &l, &taken),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(l.id, "q1");
    k_expired(e, l.run);
    pl_engine_close(e);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) { /* starts run "c" and dies in it */
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.lease_ms = 100;
        pl_engine *ce = NULL;
        pl_outcome *out = NULL;
        pl_action root = PL_ACTION_INIT;
        root.policy = "dies";
        root.payload = pl_json_empty();
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c";
        if (!pl_engine_open(&ce, path, reg, &o))
            pl_run_start(&out, ce, &root, &ro);
        _exit(1);
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child: %d", ws);
    e = k_engine(path, reg);
    k_submit(e, "q3");
    k_expired(e, 3); /* c's */
    const char *order[] = {"q1", "q2", "c", "q3"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(k_take(e, "w2", &s, &l, &taken), PL_OK, "%s", pl_errmsg());
        cr_expect_str_eq(l.id, order[i], "take %d", i);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a due run's take ------------------------------------------------------- */

/* "napper": sleeps until payload.until (Unix ms), then completes. */
static int napper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(a->payload, "until");
    int st = pl_ctx_sleep_until(ctx, (int64_t)u->valuedouble);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* A run of "napper" parked, then due: its id in @p id (16 bytes).  It
 * sleeps 20 ms, and longer on a host so slow that it was due before it
 * parked (then it completed: another is started). */
static void k_napping(pl_engine *e, char *id)
{
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    for (long ms = 20;; ms *= 4) {
        cr_assert_lt(ms, 100000, "no run could park on this host");
        snprintf(id, 16, "nap-%ld", ms);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        char payload[64];
        snprintf(payload, sizeof payload, "{\"until\": %lld}",
                 (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 + ms);
        pl_outcome *o = t_start(e, "napper", payload, id);
        pl_run_status st = o->status;
        pl_outcome_free(o);
        if (st != PL_RUN_WAITING)
            continue;
        struct timespec nap = {(ms + 50) / 1000, (ms + 50) % 1000 * 1000000L};
        nanosleep(&nap, NULL);
        return;
    }
}

/* pl__store_take_due() for @p owner, its claim noting into @p s. */
static int k_take_due(pl_engine *e, const char *owner, seen *s, pl__lease *l,
                      bool *taken, int64_t *next)
{
    return pl__store_take_due(e->store, owner, 60000000, claim, s, l, taken,
                              next);
}

/* A due timer's take: the claim gets the waiting run's info and state,
 * the lease is this worker's, the timer is gone; nothing else is due. */
Test(take, a_due_run_is_taken_with_its_timer)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    pl_engine *e = k_engine(t_store_path(), reg);
    char id[16];
    k_napping(e, id);
    seen s = {0};
    pl__lease l;
    bool taken = false;
    int64_t next = -1;
    cr_assert_eq(k_take_due(e, "w1", &s, &l, &taken, &next), PL_OK, "%s",
                 pl_errmsg());
    cr_expect(taken);
    cr_expect_str_eq(s.id, id);
    cr_expect_eq(s.status, PL_RUN_WAITING);
    cr_expect_gt(s.info_len, 0);
    cr_expect_str_eq(l.owner, "w1");
    k_held(e, l.run, "w1", l.gen);
    int64_t due;
    cr_expect_eq(pl__store_timer_get(e->store, l.run, &due), PL_ENOTFOUND);
    seen s2 = {0};
    cr_expect_eq(k_take_due(e, "w2", &s2, &l, &taken, &next), PL_ENOTFOUND);
    cr_expect_not(taken);
    cr_expect_eq(s2.calls, 0);
    cr_expect_eq(next, 0, "a timer is left, due at %lld", (long long)next);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A claim that refuses, saying to drop the lease (a stale wake: the run
 * ended meanwhile), leaves neither the lease nor the timer. */
Test(take, a_refused_due_claim_can_drop_the_lease)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    pl_engine *e = k_engine(t_store_path(), reg);
    char id[16];
    k_napping(e, id);
    seen s = {.refuse = PL_ESTATE, .drop = true};
    pl__lease l;
    bool taken = false;
    int64_t next = -1;
    cr_expect_eq(k_take_due(e, "w1", &s, &l, &taken, &next), PL_ESTATE);
    cr_expect(taken);
    pl__lease held;
    cr_expect_eq(pl__store_lease_get(e->store, l.run, &held), PL_ENOTFOUND);
    int64_t due;
    cr_expect_eq(pl__store_timer_get(e->store, l.run, &due), PL_ENOTFOUND);
    cr_expect_eq(status_of(e, id), PL_RUN_WAITING);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* pl_engine_wake() takes, claims and executes the due run: on LMDB two
 * write transactions, the take with the claim and the run's end (the
 * timer's take and the claim were two of their own). */
Test(take, a_wake_is_one_transaction_before_the_run_goes_on)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "napper", napper, NULL), PL_OK);
    pl_engine *e = k_engine(t_store_path(), reg);
    char id[16];
    k_napping(e, id);
    uint64_t m0 = 0, m1 = 0;
    cr_assert_eq(pl_engine_change_mark(&m0, e), PL_OK);
    int64_t next = -1;
    cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_change_mark(&m1, e), PL_OK);
    cr_expect_eq(status_of(e, id), PL_RUN_COMPLETED);
    cr_expect_eq(next, 0);
    if (!t_on_pg()) /* PostgreSQL's mark is its WAL position, no count */
        cr_expect_eq(m1 - m0, 2, "write transactions of a wake: %llu",
                     (unsigned long long)(m1 - m0));
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Commit @p b with one step more, seq @p seq of its run's root ledger. */
static int k_commit_step(pl_engine *e, pl__batch *b, uint32_t seq)
{
    uint8_t key[12];
    pl__put_be64(key, b->run);
    pl__put_be32(key + 8, seq);
    cr_assert_eq(pl__kvs_add(&b->steps, key, sizeof key, (uint8_t *)"x", 1),
                 PL_OK);
    pl__batch *one[1] = {b};
    int st = pl__store_commit(e->store, one, 1, false);
    pl__kvs_free(&b->steps);
    return st;
}

/* A commit of one step (seq @p seq of the root ledger) to @p l's run under
 * its lease's fence. */
static int k_fenced_commit(pl_engine *e, const pl__lease *l, uint32_t seq)
{
    pl__batch b = {0};
    b.run = l->run;
    b.gen = l->gen;
    return k_commit_step(e, &b, seq);
}

/*
 * design.md §14, flow control: "A keyed lease that ran out fails its
 * holder's fence and renewal even if nobody took it" (its key's place may
 * have gone to another run), where a lease without a key that ran out,
 * taken by nobody, is fenced by its generation alone and renewed.
 */
Test(take, a_keyed_lease_that_ran_out_fences_its_holder_though_untaken)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    k_submit_keyed(e, "plain", NULL);
    k_submit_keyed(e, "keyed", "tenant");
    pl__lease l[2];
    for (int i = 0; i < 2; i++) {
        seen s = {0};
        bool taken = false;
        cr_assert_eq(k_take(e, "w1", &s, &l[i], &taken), PL_OK, "%s",
                     pl_errmsg());
        cr_assert(taken);
    }
    cr_assert_str_eq(l[0].id, "plain");
    cr_assert_str_eq(l[1].id, "keyed");
    /* both leases run out, their holder alive, nobody taking them */
    uint64_t runs[2] = {l[0].run, l[1].run}, gens[2] = {l[0].gen, l[1].gen};
    bool lost[2] = {true, true};
    cr_assert_eq(pl__store_lease_renew(e->store, runs, gens, 2, 1, lost), PL_OK,
                 "%s", pl_errmsg());
    cr_assert(!lost[0] && !lost[1], "both live when renewed");
    k_expired(e, l[0].run);
    k_expired(e, l[1].run);

    cr_expect_eq(k_fenced_commit(e, &l[0], 0), PL_OK, "no key: %s",
                 pl_errmsg());
    cr_expect_eq(k_fenced_commit(e, &l[1], 0), PL_EBUSY, "keyed");
    cr_expect(strstr(pl_errmsg(), "ran out") != NULL, "%s", pl_errmsg());
    lost[0] = lost[1] = false;
    cr_assert_eq(pl__store_lease_renew(e->store, runs, gens, 2, 60000000, lost),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_not(lost[0], "a lease without a key is renewed");
    cr_expect(lost[1], "a keyed lease that ran out is lost");
    /* nobody took it: the holder is fenced by the key's rule alone */
    pl__lease held;
    cr_assert_eq(pl__store_lease_get(e->store, l[1].run, &held), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(held.gen, l[1].gen);
    cr_expect_str_eq(held.owner, "w1");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* design.md §12.1: "Setting a timer keeps an earlier due time, so a wake
 * asked for is never pushed back": set, or carried by a commit, a later
 * due time leaves the timer as it is; an earlier one moves it. */
Test(take, a_timer_keeps_its_earlier_due_time)
{
    pl_registry *reg = t_registry();
    pl_engine *e = k_engine(t_store_path(), reg);
    k_submit(e, "timed");
    uint64_t run;
    cr_assert_eq(pl__store_run_find(e->store, "timed", &run, NULL), PL_OK, "%s",
                 pl_errmsg());
    int64_t t0 = pl__now_us() + 3600 * 1000000LL, due = 0;
    cr_assert_eq(pl__store_timer_set(e->store, run, "timed", t0), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl__store_timer_set(e->store, run, "timed", t0 + 1000), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(pl__store_timer_get(e->store, run, &due), PL_OK);
    cr_expect_eq(due, t0, "a later set is not taken");

    pl__batch b = {0};
    b.run = run;
    b.timer_us = t0 + 2000;
    b.timer_id = "timed";
    cr_assert_eq(k_commit_step(e, &b, 0), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__store_timer_get(e->store, run, &due), PL_OK);
    cr_expect_eq(due, t0, "a commit's later timer is not taken");

    cr_assert_eq(pl__store_timer_set(e->store, run, "timed", t0 - 1000), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(pl__store_timer_get(e->store, run, &due), PL_OK);
    cr_expect_eq(due, t0 - 1000, "an earlier one is");
    pl_engine_close(e);
    pl_registry_free(reg);
}
