/*
 * test_store.c -- the LMDB store (ledger/lmdb_*.c, keys.c) and the public
 * read API on it (core/ops/inspect.c), against real LMDB files in temporary
 * directories: ledger order and step ids, tree-order walks, run listing and
 * run records.  The store's other subjects are in test_store_*.c: the hash
 * chain (test_store_chain.c), damaged stores (test_store_damage.c), the
 * map's size (test_store_map.c), opening stores (test_store_open.c) and the
 * group-commit journal (test_store_journal.c).
 */
#include "support.h"
#include "support_store.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <errno.h>
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

/* ---- test policies ------------------------------------------------------- */

/* ---- expected ledgers ---------------------------------------------------- */

/* The steps of a "chain" run with n calls to "add", in tree order. */
static void chain_expect(wants *w, int n)
{
    uint32_t seq = 0;
    for (int i = 0; i < n; i++) {
        char child[32];
        snprintf(child, sizeof child, "0.%u", seq);
        want_add(w, "0", seq++, PL_STEP_ACTION_CALL);
        want_add(w, child, 0, PL_STEP_ACTION_RESULT);
        want_add(w, "0", seq++, PL_STEP_ACTION_RESULT);
    }
    want_add(w, "0", seq, PL_STEP_ACTION_RESULT);
}

/* ---- raw LMDB access ----------------------------------------------------- */

/* ---- ledgers and walks --------------------------------------------------- */

Test(store, ledgers_of_nested_invocations_in_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 3, \"fanout\": 3}", "nested");

    wants w = {0};
    nest_expect(&w, "0", 3, 3);
    cr_assert_eq(w.n, 158u, "13 inner invocations of 8 steps, 27 leaves of 2");
    expect_ledgers(e, "nested", &w, "nest");

    /* a closer look at a few steps */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0.2"), PL_OK);
    const pl_step *call = pl_steps_at(l, 2);
    cr_assert_str_eq(pl_step_id(call), "0.2:2");
    cr_assert_str_eq(pl_step_code(call), "nest-v1",
                     "an action_call records its callee's code");
    cJSON *want_call = t_json("{\"policy\": \"nest\", \"payload\": "
                              "{\"depth\": 1, \"fanout\": 3}}");
    cr_assert(cJSON_Compare(pl_step_payload(call), want_call, 1));
    cJSON_Delete(want_call);
    const pl_step *text = pl_steps_at(l, 6);
    cr_assert_null(pl_step_code(text));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(pl_step_payload(text),
                                                      "text")
                         ->valuestring,
                     "depth 2");
    uint8_t h[PL_HASH_LEN];
    cr_assert_eq(pl_step_prev_hash(h, text), PL_OK);
    pl_steps_free(l);

    /* the root's last step is its result */
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 8);
    const cJSON *res = pl_step_payload(pl_steps_at(l, 7));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(res, "depth")->valueint, 3);
    pl_steps_free(l);

    /* an invocation that does not exist has an empty ledger */
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0.1"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 0);
    pl_steps_free(l);
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0.0.0.0.0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 0);
    pl_steps_free(l);

    /* bad paths and runs */
    static const char *const bad[] = {"",     "1",           "0.",   "0..1",
                                      "0.a",  "00",          "0.1.", "x",
                                      "0.-1", "0.4294967295"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l = (pl_steps *)&w;
        cr_assert_eq(pl_run_ledger(&l, e, "nested", bad[i]), PL_EINVAL,
                     "path '%s'", bad[i]);
        cr_assert_null(l);
    }
    cr_assert_eq(pl_run_ledger(&l, e, "nested", NULL), PL_EINVAL);
    cr_assert_eq(pl_run_ledger(&l, e, "no-such-run", "0"), PL_ENOTFOUND);
    cr_assert_null(l);
    cr_assert_eq(pl_run_ledger(&l, e, "bad id!", "0"), PL_EINVAL);
    cr_assert_eq(pl_run_ledger(NULL, e, "nested", "0"), PL_EINVAL);

    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, long_ledgers_read_in_order_across_pages)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    /* 200 calls: a root ledger of 401 steps and 200 child ledgers whose
     * paths (0.0 ... 0.398) sort numerically, not as strings */
    start_ok(e, "chain", "{\"n\": 200}", "long");
    wants w = {0};
    chain_expect(&w, 200);
    expect_ledgers(e, "long", &w, NULL);
    expect_walk(e, "long", &w);

    pl_steps *l;
    cr_assert_eq(pl_run_ledger(&l, e, "long", "0"), PL_OK);
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        const char *want_actor = i % 2 && i < 400 ? "add" : "chain";
        cr_assert_str_eq(pl_step_actor(s), want_actor, "0:%zu", i);
    }
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(
        pl_step_payload(pl_steps_at(l, 400)), "total");
    cr_assert_eq(total->valuedouble, 19900.0, "sum of 0..199");
    pl_steps_free(l);
    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, walk_visits_every_step_in_tree_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 3, \"fanout\": 3}", "tree");
    /* a second run in the same store stays out of the first one's walk */
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 6}", "tree2");
    wants w = {0};
    nest_expect(&w, "0", 3, 3);
    expect_walk(e, "tree", &w);
    free(w.v);
    w = (wants){0};
    nest_expect(&w, "0", 1, 6);
    expect_walk(e, "tree2", &w);

    /* a visitor's non-zero return stops the walk and is returned */
    seen sn = {.stop_at = 5, .stop_with = 42};
    cr_assert_eq(pl_run_walk(e, "tree", collect, &sn), 42);
    cr_assert_eq(sn.got.n, 5, "the walk went on after the visitor stopped");
    free(sn.got.v);

    sn = (seen){0};
    cr_assert_eq(pl_run_walk(e, "missing", collect, &sn), PL_ENOTFOUND);
    cr_assert_eq(sn.got.n, 0);
    cr_assert_eq(pl_run_walk(e, "tree", NULL, NULL), PL_EINVAL);
    cr_assert_eq(pl_run_walk(NULL, "tree", collect, &sn), PL_EINVAL);
    cr_assert_eq(pl_run_walk(e, "", collect, &sn), PL_EINVAL);
    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, walk_from_starts_at_any_step)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 3, \"fanout\": 3}", "tree");
    start_ok(e, "chain", "{\"n\": 20}", "chain");
    const char *runs[] = {"tree", "chain"};
    for (size_t r = 0; r < 2; r++) {
        seen all = {0};
        cr_assert_eq(pl_run_walk_from(e, runs[r], NULL, collect, &all), PL_OK);
        cr_assert_gt(all.got.n, 20);
        /* from each step (stored, or folded into its caller's result):
         * that step and every one after it, in the same order */
        for (size_t k = 0; k < all.got.n; k++) {
            seen sn = {0};
            int st = pl_run_walk_from(e, runs[r], all.got.v[k].id, collect,
                                      &sn);
            cr_assert_eq(st, PL_OK, "from %s: %s", all.got.v[k].id,
                         pl_errmsg());
            cr_assert_eq(sn.got.n, all.got.n - k, "from %s", all.got.v[k].id);
            for (size_t i = 0; i < sn.got.n; i++)
                cr_assert_str_eq(sn.got.v[i].id, all.got.v[k + i].id,
                                 "from %s, step %zu", all.got.v[k].id, i);
            free(sn.got.v);
        }
        free(all.got.v);
    }
    /* a step not stored starts where it would sit */
    seen sn = {0};
    cr_assert_eq(pl_run_walk_from(e, "chain", "0.1:5", collect, &sn), PL_OK);
    cr_assert_str_eq(sn.got.v[0].id, "0:2", "after 0:1's subtree");
    free(sn.got.v);
    sn = (seen){0};
    cr_assert_eq(pl_run_walk_from(e, "chain", "0:9999", collect, &sn), PL_OK);
    cr_assert_eq(sn.got.n, 0, "past the end: nothing");
    sn = (seen){.stop_at = 2, .stop_with = 7};
    cr_assert_eq(pl_run_walk_from(e, "chain", "0:3", collect, &sn), 7);
    cr_assert_eq(sn.got.n, 2);
    free(sn.got.v);
    const char *bad[] = {"",     "0",    "x:1",          "0:", "0:1x",  "1:0",
                         "0.:1", "0:-1", "0:4294967295", ":3", "0..1:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sn = (seen){0};
        cr_assert_eq(pl_run_walk_from(e, "chain", bad[i], collect, &sn),
                     PL_EINVAL, "step id '%s'", bad[i]);
        cr_assert_eq(sn.got.n, 0);
    }
    cr_assert_eq(pl_run_walk_from(e, "missing", "0:0", collect, &sn),
                 PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- runs ---------------------------------------------------------------- */

Test(store, engine_runs_lists_every_run_in_id_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    enum { N = 300 }; /* more than one page of the listing */
    /* created in a scrambled order: the listing is by id */
    for (int k = 0; k < N; k++) {
        int i = (k * 7) % N;
        char id[16], payload[32];
        snprintf(id, sizeof id, "run-%03d", i);
        snprintf(payload, sizeof payload, "{\"i\": %d}", i);
        start_ok(e, "echo", payload, id);
    }
    pl_outcome *o = t_start(e, "fail", NULL, "run-x-fail");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    start_ok(e, "chain", "{\"n\": 4}", "run-x-chain");

    listed *l = calloc(1, sizeof *l);
    cr_assert_not_null(l);
    cr_assert_eq(pl_engine_runs(e, list_visit, l), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(l->n, N + 2);
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "run-%03d", i);
        cr_assert_str_eq(l->ids[i], id, "listing position %d", i);
        cr_assert_eq(l->status[i], PL_RUN_COMPLETED);
        cr_assert_eq(l->steps[i], 1, "an echo run has one step");
        cr_assert_str_eq(l->policy[i], "echo");
        cr_assert_eq(l->error[i], 0);
        cr_assert_not(l->has_reason[i]);
    }
    cr_assert_str_eq(l->ids[N], "run-x-chain");
    cr_assert_eq(l->status[N], PL_RUN_COMPLETED);
    cr_assert_eq(l->steps[N], walk_count(e, "run-x-chain"));
    cr_assert_eq(l->steps[N], 9 + 4);
    cr_assert_str_eq(l->policy[N], "chain");
    cr_assert_str_eq(l->ids[N + 1], "run-x-fail");
    cr_assert_eq(l->status[N + 1], PL_RUN_FAILED);
    cr_assert_eq(l->error[N + 1], PL_EPOLICY);
    cr_assert(l->has_reason[N + 1]);

    /* the visitor's stop value comes back, and nothing is visited after */
    memset(l, 0, sizeof *l);
    l->stop_at = 10;
    cr_assert_eq(pl_engine_runs(e, list_visit, l), 42);
    cr_assert_eq(l->n, 10);
    memset(l, 0, sizeof *l);
    l->stop_at = 260; /* on the second page */
    cr_assert_eq(pl_engine_runs(e, list_visit, l), 42);
    cr_assert_eq(l->n, 260);
    cr_assert_str_eq(l->ids[259], "run-259");

    cr_assert_eq(pl_engine_runs(e, NULL, l), PL_EINVAL);
    cr_assert_eq(pl_engine_runs(NULL, list_visit, l), PL_EINVAL);
    free(l);
    pl_engine_close(e);

    /* an empty store lists nothing */
    e = open_with(t_store_path(), reg, 0, 0);
    listed *none = calloc(1, sizeof *none);
    cr_assert_eq(pl_engine_runs(e, list_visit, none), PL_OK);
    cr_assert_eq(none->n, 0);
    free(none);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, run_get_reports_the_record)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 5}", "r1");

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(info->id, "r1");
    cr_assert_str_eq(info->policy, "chain");
    cJSON *want = t_json("{\"n\": 5}");
    cr_assert(cJSON_Compare(info->payload, want, 1));
    cJSON_Delete(want);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, walk_count(e, "r1"),
                 "the record's step count is what the store holds");
    cr_assert_eq(info->steps, 11 + 5);
    cr_assert_eq(info->attempts, 1);
    cr_assert_eq(info->owner_pid, (int64_t)getpid());
    cr_assert_not_null(info->owner_host);
    cr_assert_gt(strlen(info->owner_host), 0);
    cr_assert_not(info->owner_alive, "a finished run has no live owner");
    cr_assert_gt(info->created_us, 0);
    cr_assert_gt(info->updated_us, 0);
    cr_assert_gt(info->heartbeat_us, 0);
    cr_assert_eq(info->error, 0);
    cr_assert_null(info->reason);
    cr_assert_null(info->suspended_path);
    cr_assert_null(info->prompt);
    pl_run_info_free(info);

    /* continuing a completed run replays it: no more steps */
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "r1", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(o->calls_served, 5);
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->steps_appended, 0);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, 16);
    cr_assert_eq(info->steps, walk_count(e, "r1"));
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);

    /* a failed run records why; retrying it is another attempt */
    o = t_start(e, "fail", NULL, "r2");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r2"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_FAILED);
    cr_assert_eq(info->error, PL_EPOLICY);
    cr_assert_not_null(info->reason);
    cr_assert(strstr(info->reason, "fail") != NULL, "%s", info->reason);
    cr_assert_eq(info->steps, walk_count(e, "r2"));
    cr_assert_eq(info->attempts, 1);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_continue(&o, e, "r2", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r2"), PL_OK);
    cr_assert_eq(info->attempts, 2);
    cr_assert_eq(info->owner_pid, (int64_t)getpid());
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);

    /* while running, the run is its own live owner */
    o = t_start(e, "self_get", NULL, "r3");
    const cJSON *seen_inside = pl_outcome_result(o);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(seen_inside, "status")
                     ->valueint,
                 PL_RUN_RUNNING);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(seen_inside,
                                                            "alive")),
              "a run executing in this engine has a live owner");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(seen_inside, "pid")
                     ->valuedouble,
                 (double)getpid());
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r3"), PL_OK);
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);

    info = (pl_run_info *)&info;
    cr_assert_eq(pl_run_get(&info, e, "nope"), PL_ENOTFOUND);
    cr_assert_null(info);
    cr_assert(strstr(pl_errmsg(), "nope") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl_run_get(&info, e, "bad id"), PL_EINVAL);
    cr_assert_eq(pl_run_get(&info, e, ""), PL_EINVAL);
    cr_assert_eq(pl_run_get(NULL, e, "r1"), PL_EINVAL);
    cr_assert_eq(pl_run_get(&info, NULL, "r1"), PL_EINVAL);
    pl_run_info_free(NULL);
    pl_engine_close(e);

    /* the record outlives the engine */
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, 16);
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_get(&info, e, "r2"), PL_OK);
    cr_assert_eq(info->attempts, 2);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}
