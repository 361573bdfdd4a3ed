/*
 * test_upgrade.c -- pl_run_upgrade (core/ops/fork.c): a run that new code
 * cannot replay is forked before its first divergence and ends
 * `superseded`, the two runs linked both ways, in one transaction.
 *
 * The policy "order" calls "pay", asks a human, then calls "ship"; with
 * g_v2 it calls "fraud" first, so a run recorded by the first code
 * diverges at its first step.  Covers: the links, the old run final
 * (continue, resume and a second upgrade refused, a check replay still
 * allowed), the new run verifying and finishing under the new code, a
 * failed run upgraded, every refusal (leaving the old run untouched and
 * its lease free), and a child killed (SIGKILL) at a random instant of an
 * upgrade, many times: the old run is untouched or superseded with its
 * successor whole, never half; what was delivered to the old run and not
 * consumed, also during the upgrade, goes to the successor; a copy that
 * outlasts a lease (an upgrade's, an import's) keeps its leases from a
 * worker polling meanwhile.  On both stores (pg_test_upgrade).
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static bool g_v2;
static atomic_int g_pays, g_ships;

/* The store's inbox read as the library calls it (ledger/store.h; this
 * binary is linked with -Wl,--wrap=pl__store_inbox_read, its types passed
 * through untouched).  With g_late_e set, the event "approve" {"late":
 * true} is sent to run g_late_run just after the read, once: an event
 * that reaches a run an upgrade has read and not yet superseded. */
static pl_engine *g_late_e;
static const char *g_late_run;
static int g_late_st = -1;

int __real_pl__store_inbox_read(void *s, uint64_t run, void *out);
int __wrap_pl__store_inbox_read(void *s, uint64_t run, void *out);

int __wrap_pl__store_inbox_read(void *s, uint64_t run, void *out)
{
    int st = __real_pl__store_inbox_read(s, run, out);
    pl_engine *e = g_late_e;
    if (e) {
        g_late_e = NULL;
        cJSON *late = t_json("{\"late\": true}");
        g_late_st = pl_run_signal(NULL, e, g_late_run, "approve", late);
        cJSON_Delete(late);
    }
    return st;
}

/* The copy's steps rechained as the library calls it (linked with
 * -Wl,--wrap=pl__rechain_step too, its types passed through untouched).
 * With g_copy_ms set, the first of a run other than g_copy_not (an
 * import's source, whose steps it checks first) waits that long, once: a
 * copy that lasts longer than the leases it holds. */
static atomic_int g_copy_ms;
static uint64_t g_copy_not;

int __real_pl__rechain_step(void *w, uint64_t num, const uint8_t *key,
                            size_t klen, const uint8_t *val, size_t vlen,
                            void *out, uint8_t *hash);
int __wrap_pl__rechain_step(void *w, uint64_t num, const uint8_t *key,
                            size_t klen, const uint8_t *val, size_t vlen,
                            void *out, uint8_t *hash);

int __wrap_pl__rechain_step(void *w, uint64_t num, const uint8_t *key,
                            size_t klen, const uint8_t *val, size_t vlen,
                            void *out, uint8_t *hash)
{
    int ms = num != g_copy_not ? atomic_exchange(&g_copy_ms, 0) : 0;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (ms && nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    return __real_pl__rechain_step(w, num, key, klen, val, vlen, out, hash);
}

static int pay(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    g_pays++;
    return pl_steps_add_result(out, a->payload);
}

static int ship(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    g_ships++;
    return pl_steps_add_result(out, a->payload);
}

static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *answer = NULL, *shipped = NULL;
    int st = g_v2 ? pl_ctx_invokef(NULL, ctx, "echo", "{s:s}", "fraud", "no")
                  : PL_OK;
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "pay", "{s:i}", "cents", 4200);
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "human", "{s:s}", "q", "ship?");
    if (!st)
        st = pl_ctx_invokef(&shipped, ctx, "ship", "{s:O}", "answer", answer);
    if (!st)
        st = pl_steps_add_result(out, shipped);
    cJSON_Delete(answer);
    cJSON_Delete(shipped);
    return st;
}

/* "renew": pays, then goes on as a new run of {} (which pays and ends). */
static int renew(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int st = pl_ctx_invokef(NULL, ctx, "pay", "{s:i}", "cents", 100);
    if (!st && cJSON_GetObjectItemCaseSensitive(a->payload, "again"))
        return pl_ctx_continue_as_new(ctx, pl_json_empty());
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "approval": pays, waits for the event "approve", and returns its
 * payload; with g_v2 it calls "echo" first, as "order" does. */
static int approval(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *ev = NULL;
    int st = g_v2 ? pl_ctx_invokef(NULL, ctx, "echo", "{s:s}", "fraud", "no")
                  : PL_OK;
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "pay", "{s:i}", "cents", 900);
    if (!st)
        st = pl_ctx_wait_event(&ev, ctx, "approve", PL_WAIT_FOREVER);
    if (!st)
        st = pl_steps_add_result(out, ev);
    cJSON_Delete(ev);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "order", order, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "pay", pay, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "ship", ship, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "renew", renew, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "approval", approval, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    return reg;
}

/* Start a run of the first code, suspended at its question. */
static void start_waiting(pl_engine *e, const char *id)
{
    g_v2 = false;
    pl_outcome *o = t_start(e, "order", "{}", id);
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason);
    pl_outcome_free(o);
}

static pl_run_info *info_of(pl_engine *e, const char *id)
{
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, id), PL_OK, "%s: %s", id, pl_errmsg());
    return ri;
}

Test(upgrade, the_old_run_is_superseded_and_the_new_goes_on)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    start_waiting(e, "o1");
    pl_run_info *ri = info_of(e, "o1");
    char token[64];
    snprintf(token, sizeof token, "%s", ri->resume_token);
    pl_run_info_free(ri);

    /* the new code diverges at 0:0: the whole root is re-run */
    g_v2 = true;
    pl_outcome *o = NULL;
    pl_run_options check = PL_RUN_OPTIONS_INIT;
    check.check = true;
    cr_assert_eq(pl_run_continue(&o, e, "o1", &check), PL_ENONDET);
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, e, "o1", "0:0", "o1-v2"), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_str_eq(nid, "o1-v2");
    free(nid);

    ri = info_of(e, "o1");
    cr_expect_eq(ri->status, PL_RUN_SUPERSEDED);
    cr_expect_str_eq(pl_run_status_name(ri->status), "superseded");
    cr_expect_str_eq(ri->successor, "o1-v2");
    cr_expect_null(ri->predecessor);
    cr_expect_null(ri->resume_token);
    pl_run_info_free(ri);
    ri = info_of(e, "o1-v2");
    cr_expect_eq(ri->status, PL_RUN_RUNNING);
    cr_expect_str_eq(ri->predecessor, "o1");
    cr_expect_null(ri->successor);
    cr_expect_eq(ri->steps, 0);
    pl_run_info_free(ri);
    cr_expect_eq(pl_run_verify(e, "o1"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_run_verify(e, "o1-v2"), PL_OK, "%s", pl_errmsg());

    /* the old run is final */
    cr_expect_eq(pl_run_continue(&o, e, "o1", NULL), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "superseded by run 'o1-v2'"), "%s",
              pl_errmsg());
    cJSON *yes = t_json("{\"ok\": true}");
    cr_expect_eq(pl_run_resume(&o, e, "o1", token, yes), PL_ESTATE);
    cr_expect_eq(pl_run_upgrade(&nid, e, "o1", "0:0", NULL), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "superseded by run 'o1-v2' already"), "%s",
              pl_errmsg());
    cr_expect_null(nid);
    /* an event or a cancellation is refused, naming where to send it */
    cr_expect_eq(pl_run_signal(&o, e, "o1", "go", yes), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "superseded by run 'o1-v2'"), "%s",
              pl_errmsg());
    cr_expect_eq(pl_run_cancel(e, "o1", "stop"), PL_ESTATE);

    /* the new run goes on under the new code, and its predecessor link
     * outlives every state it writes */
    cr_assert_eq(pl_run_continue(&o, e, "o1-v2", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char t2[64];
    snprintf(t2, sizeof t2, "%s", o->resume_token);
    pl_outcome_free(o);
    g_ships = 0;
    cr_assert_eq(pl_run_resume(&o, e, "o1-v2", t2, yes), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(g_ships, 1);
    pl_outcome_free(o);
    cJSON_Delete(yes);
    ri = info_of(e, "o1-v2");
    cr_expect_eq(ri->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(ri->predecessor, "o1");
    pl_run_info_free(ri);
    cr_expect_eq(pl_run_verify(e, "o1-v2"), PL_OK, "%s", pl_errmsg());
    /* a superseded run has ended: it may be deleted, its tombstone says
     * how it ended (runs.h, Retention) */
    cr_expect_eq(pl_run_delete(e, "o1"), PL_OK, "%s", pl_errmsg());
    pl_tombstone tomb = PL_TOMBSTONE_INIT;
    cr_expect_eq(pl_run_tombstone(&tomb, e, "o1"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(tomb.status, PL_RUN_SUPERSEDED);
    cr_expect_eq(status_of(e, "o1-v2"), PL_RUN_COMPLETED);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(upgrade, a_cut_after_served_calls_keeps_them)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    start_waiting(e, "o2");
    /* keep pay's call and result (0:0, 0:1); the question is asked anew */
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, e, "o2", "0:2", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(nid);
    g_pays = 0;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, nid, NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_SUSPENDED);
    cr_expect_eq(o->calls_served, 1);
    cr_expect_eq(g_pays, 0, "a call before the cut ran again");
    pl_outcome_free(o);
    pl_run_info *ri = info_of(e, "o2");
    cr_expect_str_eq(ri->successor, nid);
    pl_run_info_free(ri);
    free(nid);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(upgrade, a_failed_run_can_be_upgraded)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    start_waiting(e, "o3");
    pl_run_info *ri = info_of(e, "o3");
    char token[64];
    snprintf(token, sizeof token, "%s", ri->resume_token);
    pl_run_info_free(ri);
    /* answered under the new code: it diverges and is failed */
    g_v2 = true;
    cJSON *yes = t_json("{}");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "o3", token, yes), PL_OK);
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_ENONDET);
    pl_outcome_free(o);
    cJSON_Delete(yes);
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, e, "o3", "0:0", "o3b"), PL_OK, "%s",
                 pl_errmsg());
    free(nid);
    ri = info_of(e, "o3");
    cr_expect_eq(ri->status, PL_RUN_SUPERSEDED);
    cr_expect_null(ri->reason);
    pl_run_info_free(ri);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* An engine with waits that park, and run @p id of "approval" under the
 * first code, waiting for its event. */
static pl_engine *start_approval(pl_registry *reg, const char *id)
{
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    g_v2 = false;
    pl_outcome *o = t_start(e, "approval", "{}", id);
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s", o->reason);
    pl_outcome_free(o);
    return e;
}

/* Upgrade run @p id to @p new_id under the new code, cut at 0:0, and
 * continue the successor: it completes with the event's payload, which
 * has @p member true. */
static void upgrade_to_the_event(pl_engine *e, const char *id,
                                 const char *new_id, const char *member)
{
    g_v2 = true;
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, e, id, "0:0", new_id), PL_OK, "%s",
                 pl_errmsg());
    free(nid);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, new_id, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "the successor is %s",
                 pl_run_status_name(o->status));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                      member);
    cr_expect(cJSON_IsTrue(v), "the successor's result is not the event's");
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, new_id), PL_OK, "%s", pl_errmsg());
}

/*
 * An event delivered to a waiting run and not yet consumed when the run is
 * upgraded is its successor's: the successor's wait takes it.  It stayed
 * in the superseded run's inbox, and the successor waited for good for an
 * approval that had been given.
 */
Test(upgrade, the_old_runs_inbox_goes_to_its_successor)
{
    pl_registry *reg = registry();
    pl_engine *e = start_approval(reg, "a1");
    /* delivered only: nothing continues the run before the deploy */
    cJSON *yes = t_json("{\"ok\": true}");
    cr_assert_eq(pl_run_signal(NULL, e, "a1", "approve", yes), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(yes);
    upgrade_to_the_event(e, "a1", "a1-v2", "ok");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* One that reaches the old run after the upgrade read its inbox, before
 * the run is superseded, goes to the successor too. */
Test(upgrade, an_event_sent_during_the_upgrade_goes_to_its_successor)
{
    pl_registry *reg = registry();
    pl_engine *e = start_approval(reg, "a2");
    g_late_run = "a2";
    g_late_e = e;
    upgrade_to_the_event(e, "a2", "a2-v2", "late");
    cr_expect_null(g_late_e, "the upgrade read no inbox");
    cr_expect_eq(g_late_st, PL_OK, "the late event was not delivered");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(upgrade, refusals_leave_the_old_run_untouched)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    start_waiting(e, "o4");
    pl_run_info *ri = NULL;
    pl_outcome *o = t_start(e, "echo", "{}", "taken");
    pl_outcome_free(o);
    char *nid = (char *)"x";
    cr_expect_eq(pl_run_upgrade(NULL, e, "o4", "0:0", NULL), PL_EINVAL);
    cr_expect_eq(pl_run_upgrade(&nid, NULL, "o4", "0:0", NULL), PL_EINVAL);
    cr_expect_null(nid);
    cr_expect_eq(pl_run_upgrade(&nid, e, "bad id", "0:0", NULL), PL_EINVAL);
    cr_expect_eq(pl_run_upgrade(&nid, e, "o4", "0:0", "bad id"), PL_EINVAL);
    cr_expect_eq(pl_run_upgrade(&nid, e, "o4", "0.1:0", NULL), PL_EINVAL);
    cr_expect_eq(pl_run_upgrade(&nid, e, "o4", "0:99", NULL), PL_ENOTFOUND);
    cr_expect_eq(pl_run_upgrade(&nid, e, "nope", "0:0", NULL), PL_ENOTFOUND);
    /* a new id taken, by a run or by a deleted run's tombstone: refused
     * before anything is written (the old run's lease not taken), the
     * tombstone's refusal saying when the run was deleted */
    o = t_start(e, "echo", "{}", "gone");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_delete(e, "gone"), PL_OK, "%s", pl_errmsg());
    uint64_t mark, mark_after;
    cr_assert_eq(pl_engine_change_mark(&mark, e), PL_OK);
    cr_expect_eq(pl_run_upgrade(&nid, e, "o4", "0:0", "taken"), PL_EEXIST);
    cr_expect(strstr(pl_errmsg(), "'taken' exists already"), "%s", pl_errmsg());
    cr_expect_eq(pl_run_upgrade(&nid, e, "o4", "0:0", "gone"), PL_EEXIST);
    cr_expect(strstr(pl_errmsg(), "'gone' was deleted on"), "%s", pl_errmsg());
    cr_expect_eq(pl_run_fork(&nid, e, "o4", "0:0", "gone"), PL_EEXIST);
    cr_expect(strstr(pl_errmsg(), "'gone' was deleted on"), "%s", pl_errmsg());
    cr_assert_eq(pl_engine_change_mark(&mark_after, e), PL_OK);
    /* PostgreSQL's mark is the server's WAL, which the file's other tests
     * move: there test_deploy.py hashes the schema's rows instead */
    cr_expect(t_on_pg() || mark_after == mark,
              "a refused upgrade wrote to the store");
    /* a completed run is final */
    cr_expect_eq(pl_run_upgrade(&nid, e, "taken", "0:0", NULL), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), "is completed"), "%s", pl_errmsg());
    cr_expect_null(nid);
    /* so is a run continued as new: its successor goes on, and a second
     * one would run its work twice */
    o = t_start(e, "renew", "{\"again\":true}", "renewed");
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    char succ[PL_MAX_RUN_ID + 1];
    snprintf(succ, sizeof succ, "%s", o->successor);
    pl_outcome_free(o);
    nid = (char *)"x";
    cr_expect_eq(pl_run_upgrade(&nid, e, "renewed", "0:1", NULL), PL_ESTATE);
    cr_expect(strstr(pl_errmsg(), succ), "%s", pl_errmsg());
    cr_expect_null(nid);
    uint8_t head[PL_HASH_LEN]; /* a continued run records its head */
    cr_expect_eq(pl_run_head(head, e, "renewed"), PL_OK, "%s", pl_errmsg());
    ri = info_of(e, "renewed");
    cr_expect_eq(ri->status, PL_RUN_CONTINUED);
    cr_expect_str_eq(ri->successor, succ);
    pl_run_info_free(ri);

    /* o4 is as it was, and its lease is free: it is answered and finishes */
    ri = info_of(e, "o4");
    cr_expect_eq(ri->status, PL_RUN_SUSPENDED);
    cr_expect_null(ri->successor);
    cJSON *yes = t_json("{}");
    cr_assert_eq(pl_run_resume(&o, e, "o4", ri->resume_token, yes), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    cJSON_Delete(yes);
    pl_run_info_free(ri);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* What one killed upgrade left: 0 old untouched, 1 superseded. */
static int check_after_kill(pl_engine *e, const char *old, const char *succ)
{
    pl_run_info *ri = info_of(e, old);
    int outcome = ri->status == PL_RUN_SUPERSEDED;
    if (outcome) {
        cr_assert_str_eq(ri->successor, succ);
        pl_run_info *ni = info_of(e, succ);
        cr_assert_eq(ni->status, PL_RUN_RUNNING);
        cr_assert_str_eq(ni->predecessor, old);
        cr_assert_eq(ni->steps, 3); /* pay: its call, folded callee, result */
        pl_run_info_free(ni);
        cr_assert_eq(pl_run_verify(e, succ), PL_OK, "%s", pl_errmsg());
    } else {
        cr_assert_eq(ri->status, PL_RUN_SUSPENDED, "old run left %s",
                     pl_run_status_name(ri->status));
        cr_assert_null(ri->successor);
        /* a successor begun and cut short says so, and links nothing */
        pl_run_info *ni = NULL;
        int st = pl_run_get(&ni, e, succ);
        cr_assert(st == PL_ENOTFOUND || st == PL_OK, "%s", pl_errmsg());
        if (!st) {
            cr_assert_eq(ni->status, PL_RUN_FAILED);
            cr_assert(strstr(ni->reason, "did not complete"), "%s", ni->reason);
            cr_assert_null(ni->predecessor);
        }
        pl_run_info_free(ni);
    }
    cr_assert_eq(pl_run_verify(e, old), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(ri);
    return outcome;
}

/* Wait until run @p id of @p e is suspended (a worker ran it to its
 * question). */
static void await_suspended(pl_engine *e, const char *id)
{
    for (int ms = 0; status_of(e, id) != PL_RUN_SUSPENDED; ms += 10) {
        cr_assert_lt(ms, 60000, "%s: the worker never ran it", id);
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
}

/* Leases shorter than a copy (COPY_MS), renewed every third of theirs: a
 * stall of two thirds of a lease (a loaded host's) is not taken for a
 * lost holder. */
#define SHORT_LEASE_MS 1000
#define COPY_MS 3000

/* An engine whose leases last SHORT_LEASE_MS, with run "o1" at its
 * question. */
static pl_engine *waiting_on_short_leases(const pl_registry *reg)
{
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_SYNC;
    eo.lease_ms = SHORT_LEASE_MS;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    start_waiting(e, "o1");
    return e;
}

/*
 * A copy that lasts longer than a lease (3 s against 1 s) keeps both
 * leases it holds, renewed as an executing run's are: a worker of the
 * same store polling meanwhile takes neither the old run nor the new, and
 * the upgrade completes; the worker then takes the successor, handed to
 * the queue, and runs it to its question.
 */
Test(upgrade, a_copy_longer_than_a_lease_keeps_its_leases)
{
    pl_registry *reg = registry();
    pl_engine *e = waiting_on_short_leases(reg);
    t_worker w;
    t_worker_start(&w, e, 1);
    atomic_store(&g_copy_ms, COPY_MS);
    char *nid = NULL;
    cr_assert_eq(pl_run_upgrade(&nid, e, "o1", "0:2", "o1-v2"), PL_OK, "%s",
                 pl_errmsg());
    free(nid);
    cr_assert_eq(atomic_load(&g_copy_ms), 0, "the copy did not wait");
    await_suspended(e, "o1-v2");
    t_worker_stop(&w);
    cr_expect_eq(status_of(e, "o1"), PL_RUN_SUPERSEDED);
    cr_expect_eq(g_pays, 1, "the copied payment ran again");
    cr_expect_eq(pl_run_verify(e, "o1"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_run_verify(e, "o1-v2"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The same for an import of a running run (a fork's, exported), whose
 * copy is made under the lease of its new run. */
Test(upgrade, an_import_longer_than_a_lease_keeps_its_lease)
{
    pl_registry *reg = registry();
    pl_engine *e = waiting_on_short_leases(reg);
    char *id = NULL, *text = NULL;
    cr_assert_eq(pl_run_fork(&id, e, "o1", "0:2", "f1"), PL_OK, "%s",
                 pl_errmsg());
    free(id);
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(pl_run_export(e, "f1", f), PL_OK, "%s", pl_errmsg());
    fclose(f);
    const char *number = strstr(text, "\"run_number\":");
    cr_assert_not_null(number, "%s", text);
    g_copy_not = strtoull(number + strlen("\"run_number\":"), NULL, 10);
    t_worker w;
    t_worker_start(&w, e, 1);
    atomic_store(&g_copy_ms, COPY_MS);
    f = fmemopen(text, len, "r");
    cr_assert_eq(pl_run_import(&id, e, f, "f1-copy"), PL_OK, "%s", pl_errmsg());
    fclose(f);
    free(id);
    free(text);
    cr_assert_eq(atomic_load(&g_copy_ms), 0, "the copy did not wait");
    await_suspended(e, "f1-copy");
    await_suspended(e, "f1");
    t_worker_stop(&w);
    cr_expect_eq(pl_run_verify(e, "f1-copy"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(upgrade, a_kill_at_any_instant_leaves_old_or_both_never_half,
     .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    int superseded = 0, untouched = 0;
    unsigned seed = (unsigned)getpid();
    for (int round = 0; round < 24; round++) {
        char old[32], succ[32];
        snprintf(old, sizeof old, "k%d", round);
        snprintf(succ, sizeof succ, "k%d-up", round);
        pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
        start_waiting(e, old);
        pl_engine_close(e);

        int ready[2];
        cr_assert_eq(pipe(ready), 0);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            close(ready[0]);
            pl_engine *ce = NULL;
            pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
            if (pl_engine_open(&ce, path, reg, &eo))
                _exit(3);
            char *nid = NULL;
            if (write(ready[1], "r", 1) != 1)
                _exit(4);
            int st = pl_run_upgrade(&nid, ce, old, "0:2", succ);
            _exit(st ? 5 : 0); /* no close: as if killed after the commit */
        }
        close(ready[1]);
        char c;
        cr_assert_eq(read(ready[0], &c, 1), 1, "the child did not start");
        close(ready[0]);
        /* anywhere from at once to after the upgrade has ended */
        struct timespec ts = {0, (long)(rand_r(&seed) % 12000) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int ws;
        while (waitpid(pid, &ws, 0) == -1 && errno == EINTR)
            ;
        cr_assert(WIFSIGNALED(ws) || WEXITSTATUS(ws) == 0,
                  "the child failed: %d", WEXITSTATUS(ws));

        e = t_engine(path, reg, PL_DURABILITY_SYNC);
        if (check_after_kill(e, old, succ))
            superseded++;
        else
            untouched++;
        pl_engine_close(e);
    }
    cr_log_info("killed upgrades: %d superseded, %d untouched", superseded,
                untouched);
    pl_registry_free(reg);
}
