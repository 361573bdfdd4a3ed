/*
 * test_store_damage.c -- damaged LMDB stores: a crashed run longer than one
 * read transaction counted whole, mirrors without their result and folded
 * results with a callee ledger (corrupt), changed and unreadable records
 * refused by continue, deleted steps, gaps near a ledger's end, a failed
 * run's vanished last step and unknown record versions found by verify;
 * a listing past damaged run records.
 */
#include "support.h"
#include "support_store.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void raw_del_step(raw *r, const uint8_t *key, size_t klen)
{
    MDB_val k = {klen, (void *)key};
    int rc = mdb_del(r->txn, r->steps, &k, NULL);
    cr_assert_eq(rc, 0, "del: %s", mdb_strerror(rc));
}

/* SIGKILL the process when the third call has its result. */
static void kill_at_third_result(const pl_event *ev, void *user)
{
    int *n = user;
    if (ev->kind == PL_EVENT_CALL_COMPLETED && ++*n == 3)
        raise(SIGKILL);
}

/* nest_then_raw()'s run, in a child killed when its third call has its
 * result (0:0..0:5 are durable); then open raw. */
static uint64_t nest_crashed_then_raw(const char *path, pl_registry *reg,
                                      const char *id, raw *r)
{
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 2}", "bystander");
    pl_engine_close(e);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int n = 0;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        o.on_event = kill_at_third_result;
        o.event_user = &n;
        pl_engine *ce;
        if (pl_engine_open(&ce, path, reg, &o))
            _exit(3);
        pl_outcome *out = NULL;
        cJSON *p = t_json("{\"depth\": 1, \"fanout\": 3}");
        pl_action a = {PL_ACTION_VERSION, "nest", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        (void)pl_run_start(&out, ce, &a, &ro);
        _exit(4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child did not die at the third result (status %d)", status);
    raw_open(r, path, false);
    return raw_run_num(r, id);
}

/* SIGKILL the process when its 550th call has its result. */
static void kill_at_550th_result(const pl_event *ev, void *user)
{
    int *n = user;
    if (ev->kind == PL_EVENT_CALL_COMPLETED && ++*n == 550)
        raise(SIGKILL);
}

/*
 * Continuing a crashed run counts its steps (its record holds them as of
 * its last heartbeat only), in read transactions of 1024 records at most:
 * a run of more records than that is counted whole, once, and its record
 * then agrees with its ledgers.
 */
Test(store, a_crashed_run_longer_than_a_read_is_counted_whole)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int n = 0;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        o.on_event = kill_at_550th_result;
        o.event_user = &n;
        pl_engine *ce;
        if (pl_engine_open(&ce, path, reg, &o))
            _exit(3);
        pl_outcome *out = NULL;
        cJSON *p = t_json("{\"n\": 600, \"size\": 8}");
        pl_action a = {PL_ACTION_VERSION, "bulk", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "long";
        (void)pl_run_start(&out, ce, &a, &ro);
        _exit(4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child did not die at the 550th result (status %d)", status);

    /* 550 calls of an action_call and an action_result each: 1100 records
     * at least, more than one read transaction counts */
    pl_engine *e = open_with(path, reg, 0, 0);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "long"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert_leq(info->steps, 3 * 550, "no more than were durable");
    pl_run_info_free(info);

    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "long", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "long"), PL_OK);
    cr_assert_eq(info->steps, 3 * 600 + 1,
                 "%llu steps: each call's two "
                 "root steps and the echo step folded into its result, "
                 "and the result",
                 (unsigned long long)info->steps);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "long"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A mirror whose caller's result is changed, missing or absent by design
 * (the root has no caller) is a clear error wherever it is read. */
Test(store, a_mirror_without_its_result_is_corrupt)
{
    pl_registry *reg = registry();
    for (int how = 0; how < 3; how++) {
        const char *path = t_store_path();
        char id[16];
        snprintf(id, sizeof id, "mirror-%d", how);
        raw r;
        uint64_t num = how == 1 ? nest_crashed_then_raw(path, reg, id, &r)
                                : nest_then_raw(path, reg, id, &r);
        uint32_t comps[1] = {2};
        uint8_t key[64];
        size_t n, kl;
        uint8_t *rec;
        const char *ledger = "0.2", *says;
        if (how == 0) { /* the mirror 0.2:1 changes */
            kl = step_key(key, num, comps, 1, 1);
            rec = raw_get_step(&r, key, kl, &n);
            cr_assert(rec[1] == PL__FORMAT_V2 && rec[n - 1] == 0xc0);
            cr_assert_eq(rec[3], 0xcf, "the time, as a uint 64");
            rec[11] ^= 1;
            raw_put_step(&r, key, kl, rec, n);
            free(rec);
            says = "does not link";
        } else if (how == 1) { /* the crashed run's root ends at 0:2 */
            for (uint32_t seq = 3; seq <= 5; seq++) {
                kl = step_key(key, num, NULL, 0, seq);
                raw_del_step(&r, key, kl);
            }
            uint32_t later[1] = {4}; /* and the third call's ledger */
            for (uint32_t seq = 0; seq <= 1; seq++) {
                kl = step_key(key, num, later, 1, seq);
                raw_del_step(&r, key, kl);
            }
            says = "records none";
        } else { /* the root's result 0:7 is made a mirror */
            ledger = "0";
            kl = step_key(key, num, NULL, 0, 7);
            rec = raw_get_step(&r, key, kl, &n);
            size_t off = payload_offset(rec, n);
            rec[1] = PL__FORMAT_V2;
            rec[off] = 0xc0;
            raw_put_step(&r, key, kl, rec, off + 1);
            free(rec);
            says = "root";
        }
        raw_close(&r);

        pl_engine *e = open_with(path, reg, 0, 0);
        cr_assert_eq(pl_run_verify(e, id), PL_ECORRUPT, "%s", id);
        cr_assert(strstr(pl_errmsg(), how == 2 ? "root" : "0.2") != NULL,
                  "%s: %s", id, pl_errmsg());
        pl_steps *l = NULL;
        cr_assert_eq(pl_run_ledger(&l, e, id, ledger), PL_ECORRUPT, "%s", id);
        cr_assert_null(l);
        cr_assert(strstr(pl_errmsg(), says) != NULL, "%s: %s", id, pl_errmsg());
        seen sn = {0};
        cr_assert_eq(pl_run_walk(e, id, collect, &sn), PL_ECORRUPT, "%s", id);
        cr_assert(strstr(pl_errmsg(), says) != NULL, "%s: %s", id, pl_errmsg());
        free(sn.got.v);
        if (how > 0) {
            /* replay meets the mirror: the callee runs again, or the root
             * compares its result; neither takes nil for a payload */
            pl_outcome *o = NULL;
            int st = pl_run_continue(&o, e, id, NULL);
            int err = st ? st : o->error;
            cr_assert(st != PL_OK || o->status == PL_RUN_FAILED, "%s", id);
            cr_assert_eq(err, PL_ECORRUPT, "%s: %s", id, pl_status_name(err));
            cr_assert(strstr(st ? pl_errmsg() : o->reason, "caller") != NULL,
                      "%s: %s", id, st ? pl_errmsg() : o->reason);
            pl_outcome_free(o);
        }
        bystander_fine(e);
        pl_engine_close(e);
    }
    pl_registry_free(reg);
}

/* A folded result whose callee ledger holds records after all: verify says
 * so. */
Test(store, a_folded_result_with_a_stored_callee_ledger_is_corrupt)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "refolded", &r);
    uint32_t comps[1] = {2};
    uint8_t key[64], ckey[64];
    size_t n, kl = step_key(key, num, NULL, 0, 0);
    size_t ckl = step_key(ckey, num, comps, 1, 0);
    cr_assert_not(raw_has_step(&r, ckey, ckl), "0.2:0 is folded into 0:3");
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    raw_put_step(&r, ckey, ckl, rec, n); /* any record will do */
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "refolded"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "0.2") != NULL, "%s", pl_errmsg());
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A recorded result whose value the policy ignores, changed in the store:
 * replay must not serve it as if nothing happened. */
Test(store, continue_refuses_a_changed_record)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 3}", "ignored");
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    uint64_t num = raw_run_num(&r, "ignored");
    /* 0:1 is the first call's result, {"depth": 0}: make it {"depth": 1} */
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 1), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    cr_assert_eq(rec[n - 1], 0x00);
    rec[n - 1] = 0x01;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "ignored"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "0:2") != NULL, "%s", pl_errmsg());

    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "ignored", NULL);
    cr_assert(st != PL_OK || o, "PL_OK without an outcome");
    int err = st ? st : o->error;
    const char *why = st ? pl_errmsg() : o->reason ? o->reason : "";
    /* non-fatal from here, so that the run's memory is still freed */
    cr_expect(st != PL_OK || o->status == PL_RUN_FAILED,
              "continue served a record whose hash chain is broken and "
              "completed the run as if nothing were wrong");
    cr_expect_eq(err, PL_ECORRUPT, "continue gave %s: %s", pl_status_name(err),
                 why);
    cr_expect(strstr(why, "0:1") != NULL || strstr(why, "0:2") != NULL,
              "the failure names the damaged step: %s", why);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, continue_fails_clearly_on_an_unreadable_record)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "garbled", &r);
    /* 0:3's payload map becomes the never-used byte 0xc1 */
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 3), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    rec[payload_offset(rec, n)] = 0xc1;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "garbled"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "garbled", "0"), PL_ECORRUPT);
    cr_assert_null(l);
    cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    seen sn = {0};
    cr_assert_eq(pl_run_walk(e, "garbled", collect, &sn), PL_ECORRUPT);
    /* 0:0, 0.0:0 (folded into 0:1), 0:1, 0:2, then the damaged 0:3, which
     * holds 0.2:0 too */
    cr_assert_eq(sn.got.n, 4, "the walk stops at the damaged result");
    cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    free(sn.got.v);

    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "garbled", NULL);
    if (st == PL_OK) {
        cr_assert_eq(o->status, PL_RUN_FAILED);
        cr_assert_eq(o->error, PL_ECORRUPT, "%s", pl_status_name(o->error));
        cr_assert(strstr(o->reason, "0:3") != NULL, "%s", o->reason);
    } else {
        cr_assert_eq(st, PL_ECORRUPT, "%s", pl_status_name(st));
        cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    }
    bool recorded = st == PL_OK;
    pl_outcome_free(o);
    /* a failure reported as an outcome is on record */
    pl_run_info *info;
    cr_assert_eq(pl_run_get(&info, e, "garbled"), PL_OK);
    if (recorded) {
        cr_assert_eq(info->status, PL_RUN_FAILED);
        cr_assert_eq(info->error, PL_ECORRUPT);
    }
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "garbled"), PL_ECORRUPT,
                 "nothing repaired or rewrote the damaged step");
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int count_steps(const pl_step *s, void *user)
{
    (void)s;
    ++*(int *)user;
    return 0;
}

Test(store, verify_detects_deleted_steps)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "holes", &r);
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 3); /* a result in the middle */
    raw_del_step(&r, key, kl);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "holes"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "holes") != NULL, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "step 3") != NULL,
              "names the missing "
              "step: %s",
              pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "holes", "0"), PL_ECORRUPT,
                 "a ledger with a gap is not read as if whole");
    cr_assert_null(l);
    /* nor walked or exported as if whole (an export the import then
     * refused, as if the export had been changed) */
    int n = 0;
    cr_assert_eq(pl_run_walk(e, "holes", count_steps, &n), PL_ECORRUPT,
                 "a walk passed over the missing step");
    cr_assert(strstr(pl_errmsg(), "missing step 3") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl_run_walk_from(e, "holes", "0:1", count_steps, &n),
                 PL_ECORRUPT);
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    cr_assert_eq(pl_run_export(e, "holes", f), PL_ECORRUPT,
                 "an export passed over the missing step");
    fclose(f);
    /* from past the gap there is none to see */
    cr_assert_eq(pl_run_walk_from(e, "holes", "0:4", count_steps, &n), PL_OK,
                 "%s", pl_errmsg());
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "holes", NULL);
    int err = st ? st : o->error;
    cr_assert(st != PL_OK || o->status == PL_RUN_FAILED);
    cr_assert_eq(err, PL_ECORRUPT, "%s", pl_status_name(err));
    pl_outcome_free(o);
    bystander_fine(e);
    pl_engine_close(e);

    /* the last step of a ledger: no gap, but fewer steps than recorded */
    raw_open(&r, path, false);
    uint64_t bnum = raw_run_num(&r, "bystander");
    kl = step_key(key, bnum, NULL, 0, 4); /* its root result */
    raw_del_step(&r, key, kl);
    raw_close(&r);
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "bystander"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "bystander") != NULL, "%s", pl_errmsg());
    pl_engine_close(e);

    /* a whole child ledger (a nest's: an add's is folded into its result) */
    e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 3}", "orphan");
    pl_engine_close(e);
    raw_open(&r, path, false);
    uint64_t onum = raw_run_num(&r, "orphan");
    uint32_t comps[1] = {2};
    for (uint32_t seq = 0; seq < 2; seq++) {
        kl = step_key(key, onum, comps, 1, seq);
        raw_del_step(&r, key, kl);
    }
    raw_close(&r);
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "orphan"), PL_ECORRUPT);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A step missing near the end of a ledger that no run record anchors (the
 * run failed), with only a few records after it: reading steps over small
 * subtrees, and must still tell a missing step from the ledger's end.
 */
/* Run "two_then_fail" as @p id, failed with its root ledger whole (0 call,
 * 1 result, 2 call, 3 result) and verified; then remove its step 0:@p seq
 * raw. */
static void failed_then_del(const char *path, pl_registry *reg, const char *id,
                            uint32_t seq)
{
    pl_engine *e = open_with(path, reg, 0, 0);
    pl_outcome *o = t_start(e, "two_then_fail", NULL, id);
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 4, "two calls, two results");
    pl_steps_free(l);
    cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    raw r;
    raw_open(&r, path, false);
    uint8_t key[64];
    size_t kl = step_key(key, raw_run_num(&r, id), NULL, 0, seq);
    raw_del_step(&r, key, kl);
    raw_close(&r);
}

Test(store, a_gap_near_the_end_of_a_ledger_is_not_its_end)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    /* the second call; its subtree stays */
    failed_then_del(path, reg, "short", 2);
    pl_engine *e = open_with(path, reg, 0, 0);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "short", "0"), PL_ECORRUPT,
                 "a ledger with a gap is not read as if it ended there");
    cr_assert_null(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, verify_reports_an_unknown_record_version)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "future", &r);
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 2), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    cr_assert_eq(rec[0], 0x97, "a 7-field header");
    cr_assert_eq(rec[1], 0x01, "format version 1");
    rec[1] = 0x03;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "future"), PL_EVERSION, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "0:2") != NULL, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "version") != NULL, "%s", pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "future", "0"), PL_EVERSION);
    seen sn = {0};
    cr_assert_eq(pl_run_walk(e, "future", collect, &sn), PL_EVERSION);
    free(sn.got.v);
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "future", NULL);
    int err = st ? st : o->error;
    cr_assert(st != PL_OK || o->status == PL_RUN_FAILED);
    cr_assert_eq(err, PL_EVERSION, "%s", pl_status_name(err));
    pl_outcome_free(o);
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A failed run's state anchors no ledger (design.md §8.7: its last
 * execution's unseen steps were dropped), but it counts its steps: a step
 * that vanished from its ledgers' ends is still found by verify.
 */
Test(store, a_failed_runs_vanished_last_step_is_found_by_its_count)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    failed_then_del(path, reg, "gone", 3); /* the root ledger's last step */
    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "gone"), PL_ECORRUPT, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "steps") != NULL, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A run parked in a callee (design.md §8.7, §12.1): its state anchors the
 * ledgers open where it waits, as a suspended run's does, so a change to
 * the callee's last step, its `wait`, is found by verify.
 */
Test(store, a_waiting_runs_open_callee_ledger_is_anchored)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    pl_outcome *o = t_start(e, "ask",
                            "{\"calls\": [[\"nap\", {\"ms\": 3600000}]]}",
                            "nap");
    cr_assert_eq(o->status, PL_RUN_WAITING, "%s", pl_errmsg());
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(e, "nap"), PL_OK, "%s", pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "nap", "0.0"), PL_OK, "%s", pl_errmsg());
    size_t n = pl_steps_count(l);
    cr_assert_eq(pl_step_type_of(pl_steps_at(l, n - 1)), PL_STEP_WAIT);
    pl_steps_free(l);
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    uint8_t key[64];
    uint32_t comp = 0;
    size_t kl = step_key(key, raw_run_num(&r, "nap"), &comp, 1,
                         (uint32_t)(n - 1)),
           len;
    uint8_t *rec = raw_get_step(&r, key, kl, &len);
    rec[len - 1] ^= 0x01; /* the wake time's last byte: another time */
    raw_put_step(&r, key, kl, rec, len);
    free(rec);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "nap"), PL_ECORRUPT,
                 "a waiting run's changed wait step went unnoticed");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a value's size past the file --------------------------------------- */

/* ---- a listing past damaged run records ---------------------------------- */

/* What a listing met: the runs visited, and those told as damaged, in
 * order ("!id"); the callback stops with stop_with at stop_id. */
typedef struct met {
    char seq[16][PL_MAX_RUN_ID + 2];
    size_t n;
    const char *stop_id;
    int stop_with;
} met;

static int met_run(const pl_run_info *ri, void *user)
{
    met *m = user;
    cr_assert_lt(m->n, 16);
    snprintf(m->seq[m->n++], sizeof m->seq[0], "%s", ri->id);
    return 0;
}

static int met_damaged(const char *id, int st, const char *why, void *user)
{
    met *m = user;
    cr_assert_lt(m->n, 16);
    cr_expect_eq(st, PL_ECORRUPT);
    char quoted[PL_MAX_RUN_ID + 3];
    snprintf(quoted, sizeof quoted, "'%s'", id);
    cr_expect(strstr(why, quoted), "%s: %s", id, why);
    snprintf(m->seq[m->n++], sizeof m->seq[0], "!%s", id);
    return m->stop_id && !strcmp(id, m->stop_id) ? m->stop_with : 0;
}

static void expect_met(const met *m, const char *const *want, size_t n)
{
    cr_assert_eq(m->n, n, "%zu met, not %zu", m->n, n);
    for (size_t i = 0; i < n; i++)
        cr_expect_str_eq(m->seq[i], want[i]);
}

/* A run record failing its checksum (b) and one too short to hold its run
 * number (d): a listing without pl_runs_options.damaged ends at the first
 * with PL_ECORRUPT naming it; with it, each is told and the others are
 * listed, either way; the callback's non-zero value stops the listing. */
Test(store, a_listing_goes_past_damaged_run_records_when_asked)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    static const char *const ids[] = {"a", "b", "c", "d", "e"};
    for (size_t i = 0; i < 5; i++)
        start_ok(e, "chain", "{\"n\": 1}", ids[i]);
    pl_engine_close(e);
    raw r;
    raw_open(&r, path, false);
    MDB_val k = {1, (void *)"b"}, v;
    cr_assert_eq(mdb_get(r.txn, r.runs, &k, &v), 0);
    uint8_t *copy = malloc(v.mv_size);
    cr_assert_not_null(copy);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 1] ^= 0x04;
    MDB_val nv = {v.mv_size, copy};
    cr_assert_eq(mdb_put(r.txn, r.runs, &k, &nv, 0), 0);
    free(copy);
    MDB_val dk = {1, (void *)"d"}, shortv = {3, (void *)"\1\2\3"};
    cr_assert_eq(mdb_put(r.txn, r.runs, &dk, &shortv, 0), 0);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    met m = {0};
    cr_assert_eq(pl_engine_runs(e, met_run, &m), PL_ECORRUPT);
    cr_expect(strstr(pl_errmsg(), "'b'"), "%s", pl_errmsg());
    expect_met(&m, (const char *const[]){"a"}, 1);
    /* a version 1 struct has no callback: the same */
    memset(&m, 0, sizeof m);
    pl_runs_options v1 = PL_RUNS_OPTIONS_INIT;
    v1.version = 1;
    v1.damaged = met_damaged; /* past its version: not read */
    cr_assert_eq(pl_engine_runs_from(e, &v1, met_run, &m), PL_ECORRUPT);
    expect_met(&m, (const char *const[]){"a"}, 1);

    pl_runs_options ro = PL_RUNS_OPTIONS_INIT;
    ro.damaged = met_damaged;
    memset(&m, 0, sizeof m);
    cr_assert_eq(pl_engine_runs_from(e, &ro, met_run, &m), PL_OK, "%s",
                 pl_errmsg());
    expect_met(&m, (const char *const[]){"a", "!b", "c", "!d", "e"}, 5);
    ro.reverse = true;
    memset(&m, 0, sizeof m);
    cr_assert_eq(pl_engine_runs_from(e, &ro, met_run, &m), PL_OK);
    expect_met(&m, (const char *const[]){"e", "!d", "c", "!b", "a"}, 5);
    ro.reverse = false;
    ro.after = "b";
    memset(&m, 0, sizeof m);
    cr_assert_eq(pl_engine_runs_from(e, &ro, met_run, &m), PL_OK);
    expect_met(&m, (const char *const[]){"c", "!d", "e"}, 3);
    ro.after = NULL;
    memset(&m, 0, sizeof m);
    m.stop_id = "d";
    m.stop_with = 7;
    cr_assert_eq(pl_engine_runs_from(e, &ro, met_run, &m), 7);
    expect_met(&m, (const char *const[]){"a", "!b", "c", "!d"}, 4);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * LMDB 0.9's pages carry no checksum, and a leaf node's data size (its
 * first four bytes, two little-endian halves, before its flags and key
 * size) is taken as it is.  Set, in the file, the size of the value of
 * @p key in @p db to @p size, as a flipped bit of that page would.
 */
static void damage_size(const char *path, const char *db, const void *key,
                        size_t klen, uint32_t size)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_stat ms;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 32), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_RDONLY | MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_env_stat(env, &ms), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(txn, dbi, &c), 0);
    MDB_val k = {klen, (void *)key}, v;
    cr_assert_eq(mdb_cursor_get(c, &k, &v, MDB_SET_KEY), 0, "no %s record", db);
    cr_assert_lt(v.mv_size, ms.ms_psize / 2, "a value inside its leaf page");
    /* the key, in the map: its page starts at the page boundary below it
     * and begins with its page number; the node's header is 8 bytes */
    uintptr_t at = (uintptr_t)k.mv_data;
    uintptr_t page = at & ~(uintptr_t)(ms.ms_psize - 1);
    uint64_t pgno;
    memcpy(&pgno, (const void *)page, sizeof pgno);
    off_t node = (off_t)(pgno * ms.ms_psize + (at - page)) - 8;
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    uint8_t dsz[4] = {(uint8_t)size, (uint8_t)(size >> 8),
                      (uint8_t)(size >> 16), (uint8_t)(size >> 24)};
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    cr_assert_eq(pwrite(fd, dsz, 4, node), 4);
    cr_assert_eq(close(fd), 0);
}

/* The store's records read as damaged, never a crash; the run's id named. */
static void expect_damaged(pl_engine *e, const char *id, bool step)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    if (step) { /* its record is whole: its ledger is not */
        cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
        pl_run_info_free(info);
        st = pl_run_verify(e, id);
    }
    cr_assert_eq(st, PL_ECORRUPT, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "damaged") != NULL, "%s", pl_errmsg());
    seen sn = {0};
    cr_assert_eq(pl_run_walk(e, id, collect, &sn), PL_ECORRUPT);
    free(sn.got.v);
    pl_outcome *o = NULL;
    st = pl_run_continue(&o, e, id, NULL);
    cr_assert(st == PL_ECORRUPT || (st == PL_OK && o->error == PL_ECORRUPT),
              "%s: %s", pl_status_name(st), pl_errmsg());
    pl_outcome_free(o);
}

/* A run, state or step value whose size runs past the map (SIGSEGV) or
 * past the file's end within it (SIGBUS) is a damaged store, reported. */
Test(store, a_value_size_past_the_file_is_damage_not_a_crash, .timeout = 120)
{
    static const uint32_t sizes[] = {0xfffffff0u, 32u << 20};
    pl_registry *reg = registry();
    for (int which = 0; which < 3; which++) {
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            char path[4300];
            snprintf(path, sizeof path, "%s/size-%d-%zu.db", t_tmpdir(), which,
                     i);
            raw r;
            uint64_t num = chain_then_raw(path, reg, "sized", &r);
            raw_close(&r);
            uint8_t key[64];
            size_t kl = 8;
            pl__put_be64(key, num);
            if (which == 0)
                damage_size(path, "runs", "sized", 5, sizes[i]);
            else if (which == 1)
                damage_size(path, "state", key, kl, sizes[i]);
            else
                damage_size(path, "steps", key, step_key(key, num, NULL, 0, 3),
                            sizes[i]);
            pl_engine *e = open_with(path, reg, 0, 0);
            expect_damaged(e, "sized", which == 2);
            bystander_fine(e);
            pl_engine_close(e);
        }
    }
    pl_registry_free(reg);
}

/* ---- a deadline past 2^53 ms --------------------------------------------- */

/* ledger-dump's output (stdout and stderr) for @p args on @p path; it must
 * exit 0. */
static const char *dump_out(const char *path, const char *args)
{
    char cmd[8800];
    snprintf(cmd, sizeof cmd, "'%s/tools/ledger-dump' '%s' %s 2>&1",
             PL_TEST_BIN_DIR, path, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s:\n%s", cmd, buf);
    return buf;
}

/* A deadline past 2^53 ms (an older version's, or damaged: the API refuses
 * one) is shown as its number, out of range, never as a date it is not
 * (its microseconds wrapped past int64 to 1969), and as its exact digits
 * in JSON. */
Test(store, a_deadline_past_2_53_ms_is_shown_as_its_number, .timeout = 120)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    (void)chain_then_raw(path, reg, "far", &r);
    MDB_val k = {3, "far"}, v;
    cr_assert_eq(mdb_get(r.txn, r.runs, &k, &v), 0);
    pl__run_info ri;
    cr_assert_eq(pl__run_info_decode(&ri, "far", (uint8_t *)v.mv_data + 8,
                                     v.mv_size - 8),
                 PL_OK);
    ri.deadline_ms = (INT64_C(1) << 60) + 1;
    pl__buf rec = {0}, info = {0};
    cr_assert_eq(pl__buf_append(&rec, v.mv_data, 8), PL_OK); /* its number */
    cr_assert_eq(pl__run_info_encode(&info, "far", &ri), PL_OK);
    cr_assert_eq(pl__buf_append(&rec, info.data, info.len), PL_OK);
    MDB_val nv = {rec.len, rec.data};
    cr_assert_eq(mdb_put(r.txn, r.runs, &k, &nv, 0), 0);
    raw_close(&r);
    pl__run_info_clear(&ri);
    pl__buf_free(&rec);
    pl__buf_free(&info);

    const char *out = dump_out(path, "--run far");
    cr_expect(strstr(out, "deadline 1152921504606846977 ms since 1970, out "
                          "of range\n") != NULL,
              "%s", out);
    cr_expect(strstr(out, "1969") == NULL, "a wrong date: %s", out);
    out = dump_out(path, "--run far --format json");
    cr_expect(strstr(out, "1152921504606846977") != NULL, "not exact: %s", out);
    pl_registry_free(reg);
}
