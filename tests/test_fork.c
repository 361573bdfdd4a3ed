/*
 * test_fork.c -- pl_run_fork (core/ops/fork.c): a new run from a prefix of an
 * old run's root ledger.
 *
 * The root policy "outer" calls "chain" (whose callee ledger holds three
 * calls of its own and ends in a mirror of its result), then "echo" (a
 * folded one-step callee), so a fork re-chains steps of every shape.
 * Covers: a fork after a whole call (the call is served, the rest runs), a
 * fork between a call and its result (the call runs again), a fork at 0:0,
 * the old run untouched (head, verify, steps), the new run verifying on its
 * own, a generated id, and every refusal: bad step ids, missing steps and
 * runs, taken and bad new ids, a run this process is running.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int outer_runs;
static int fork_inside_status; /* what pl_run_fork said from inside a run */

static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    outer_runs++;
    cJSON *total = NULL, *echoed = NULL;
    int st = pl_ctx_invokef(&total, ctx, "chain", "{s:i}", "n", 3);
    if (!st)
        st = pl_ctx_invokef(&echoed, ctx, "echo", "{s:s}", "say", "hi");
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "chain", total, "echo",
                                  echoed);
    cJSON_Delete(total);
    cJSON_Delete(echoed);
    return st;
}

/* Calls echo, then asks a human. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_invokef(NULL, ctx, "echo", "{s:i}", "n", 1);
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "human", "{s:s}", "q", "ok?");
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

/* Tries to fork its own run while running it. */
static int self_forker(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)a;
    (void)user;
    char *id = NULL;
    fork_inside_status = pl_run_fork(&id, pl_ctx_engine(ctx),
                                     pl_ctx_run_id(ctx), "0:0", "inside");
    free(id);
    return pl_steps_add_resultf(out, "{s:i}", "status", fork_inside_status);
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "outer";
    d.fn = outer;
    d.code_version = "outer/1";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "ask", ask, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "self_forker", self_forker, NULL),
                 PL_OK);
    return reg;
}

static size_t ledger_len(pl_engine *e, const char *id, const char *path)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, id, path), PL_OK, "%s", pl_errmsg());
    size_t n = pl_steps_count(l);
    pl_steps_free(l);
    return n;
}

static pl_run_info *info_of(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
    return info;
}

typedef struct fixture {
    pl_registry *reg;
    pl_engine *e;
    uint8_t head[PL_HASH_LEN];
    uint64_t steps;
    char path[4200]; /* the store's */
} fixture;

/* A completed run "old" of outer. */
static void setup_old(fixture *f)
{
    f->reg = registry();
    snprintf(f->path, sizeof f->path, "%s", t_store_path());
    f->e = t_engine(f->path, f->reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(f->e, "outer", "{}", "old");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_head(f->head, f->e, "old"), PL_OK);
    pl_run_info *info = info_of(f->e, "old");
    f->steps = info->steps;
    pl_run_info_free(info);
    /* the root: call chain, its result, call echo, its result, outer's */
    cr_assert_eq(ledger_len(f->e, "old", "0"), 5);
    cr_assert_eq(t_calls.chain, 1);
}

static void teardown(fixture *f)
{
    pl_engine_close(f->e);
    pl_registry_free(f->reg);
    t_cleanup();
}

/* The old run is as it was: same head, same steps, and it verifies. */
static void old_untouched(fixture *f)
{
    uint8_t head[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, f->e, "old"), PL_OK);
    cr_assert_arr_eq(head, f->head, PL_HASH_LEN);
    cr_assert_eq(pl_run_verify(f->e, "old"), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = info_of(f->e, "old");
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, f->steps);
    pl_run_info_free(info);
}

static pl_outcome *continue_ok(pl_engine *e, const char *id)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, id, NULL);
    cr_assert_eq(st, PL_OK, "continue %s: %s", id, pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    return o;
}

Test(fork, after_a_whole_call_serves_it_and_runs_the_rest)
{
    fixture f;
    setup_old(&f);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, f.e, "old", "0:2", "new"), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_str_eq(id, "new");
    free(id);

    /* left running, nobody owns it, and what was copied verifies */
    pl_run_info *info = info_of(f.e, "new");
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert_not(info->owner_alive);
    cr_assert_str_eq(info->policy, "outer");
    pl_run_info_free(info);
    cr_assert_eq(ledger_len(f.e, "new", "0"), 2);
    cr_assert_eq(ledger_len(f.e, "new", "0.0"), ledger_len(f.e, "old", "0.0"));
    cr_assert_eq(pl_run_verify(f.e, "new"), PL_OK, "%s", pl_errmsg());

    pl_outcome *o = continue_ok(f.e, "new");
    cr_assert_eq(o->calls_served, 1);   /* chain */
    cr_assert_eq(o->calls_executed, 1); /* echo */
    cr_assert_eq(t_calls.chain, 1);     /* chain did not run again */
    cr_assert_eq(t_calls.echo, 2);
    char *got = t_text(pl_outcome_result(o));
    cr_assert_str_eq(got,
                     "{\"chain\":{\"total\":3},\"echo\":{\"say\":\"hi\"}}");
    free(got);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(f.e, "new"), PL_OK, "%s", pl_errmsg());

    /* the new run's hashes are its own */
    uint8_t head[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, f.e, "new"), PL_OK);
    cr_assert(memcmp(head, f.head, PL_HASH_LEN) != 0);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, f.e, "new", "0.0"), PL_OK);
    pl_steps *m = NULL;
    cr_assert_eq(pl_run_ledger(&m, f.e, "old", "0.0"), PL_OK);
    uint8_t a[PL_HASH_LEN], b[PL_HASH_LEN];
    cr_assert_eq(pl_step_prev_hash(a, pl_steps_at(l, 0)), PL_OK);
    cr_assert_eq(pl_step_prev_hash(b, pl_steps_at(m, 0)), PL_OK);
    cr_assert(memcmp(a, b, PL_HASH_LEN) != 0);
    pl_steps_free(l);
    pl_steps_free(m);
    old_untouched(&f);
    teardown(&f);
}

Test(fork, between_a_call_and_its_result_runs_the_call_again)
{
    fixture f;
    setup_old(&f);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, f.e, "old", "0:1", "cut"), PL_OK, "%s",
                 pl_errmsg());
    free(id);
    /* the call is copied, its callee's ledger (ending in a mirror) is not */
    cr_assert_eq(ledger_len(f.e, "cut", "0"), 1);
    cr_assert_eq(ledger_len(f.e, "cut", "0.0"), 0);
    cr_assert_eq(pl_run_verify(f.e, "cut"), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = continue_ok(f.e, "cut");
    cr_assert_eq(t_calls.chain, 2);
    cr_assert_eq(o->calls_served, 0);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(f.e, "cut"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(ledger_len(f.e, "cut", "0"), 5);
    old_untouched(&f);
    teardown(&f);
}

Test(fork, at_the_first_step_runs_the_root_afresh_under_a_new_id)
{
    fixture f;
    setup_old(&f);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, f.e, "old", "0:0", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(strlen(id), PL_UUID_LEN); /* a UUIDv7 */
    cr_assert_eq(ledger_len(f.e, id, "0"), 0);
    pl_outcome *o = continue_ok(f.e, id);
    cr_assert_eq(o->calls_served, 0);
    cr_assert_eq(o->calls_executed, 5); /* chain, its three adds, echo */
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(f.e, id), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(outer_runs, 2);
    free(id);
    old_untouched(&f);
    teardown(&f);
}

Test(fork, a_fork_of_a_fork_verifies)
{
    fixture f;
    setup_old(&f);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, f.e, "old", "0:2", "f1"), PL_OK);
    free(id);
    pl_outcome_free(continue_ok(f.e, "f1"));
    cr_assert_eq(pl_run_fork(&id, f.e, "f1", "0:4", "f2"), PL_OK, "%s",
                 pl_errmsg());
    free(id);
    cr_assert_eq(pl_run_verify(f.e, "f2"), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = continue_ok(f.e, "f2");
    cr_assert_eq(o->calls_served, 2);
    cr_assert_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(f.e, "f2"), PL_OK, "%s", pl_errmsg());
    teardown(&f);
}

Test(fork, refuses_what_it_cannot_fork)
{
    fixture f;
    setup_old(&f);
    char *id = (char *)"untouched";
    struct {
        const char *run, *at, *new_id;
        int want;
    } cases[] = {
        {"old", "0:5", "n1", PL_ENOTFOUND},  /* past the root's last step */
        {"old", "0:99", "n1", PL_ENOTFOUND}, /* far past it */
        {"nope", "0:0", "n1", PL_ENOTFOUND}, /* no such run */
        {"old", "0.0:1", "n1", PL_EINVAL},   /* not the root ledger */
        {"old", "0", "n1", PL_EINVAL},       /* not a step id */
        {"old", "0:", "n1", PL_EINVAL},      /* no seq */
        {"old", "0:1x", "n1", PL_EINVAL},    /* trailing garbage */
        {"old", "0:99999999999", "n1", PL_EINVAL}, /* past UINT32_MAX */
        {"old", "", "n1", PL_EINVAL},
        {"old", NULL, "n1", PL_EINVAL},
        {"old", "0:1", "bad id!", PL_EINVAL}, /* bad new id */
        {"old", "0:1", "old", PL_EEXIST},     /* new id taken */
        {"bad id!", "0:1", "n1", PL_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        id = (char *)"untouched";
        int st = pl_run_fork(&id, f.e, cases[i].run, cases[i].at,
                             cases[i].new_id);
        cr_assert_eq(st, cases[i].want, "case %zu: %s, want %s (%s)", i,
                     pl_status_name(st), pl_status_name(cases[i].want),
                     pl_errmsg());
        cr_assert_null(id, "case %zu", i);
        cr_assert_str_neq(pl_errmsg(), "", "case %zu", i);
    }
    cr_assert_eq(pl_run_fork(NULL, f.e, "old", "0:1", NULL), PL_EINVAL);
    cr_assert_eq(pl_run_fork(&id, NULL, "old", "0:1", NULL), PL_EINVAL);
    /* none of the refusals made a run */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, f.e, "n1"), PL_ENOTFOUND);
    old_untouched(&f);
    teardown(&f);
}

Test(fork, refuses_a_run_that_is_running_here)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "self_forker", "{}", "busy");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(fork_inside_status, PL_EBUSY);
    pl_outcome_free(o);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "inside"), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

Test(fork, a_suspended_run_forks_into_a_run_that_asks_again)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "ask", "{}", "asked");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, e, "asked", "0:2", "again"), PL_OK, "%s",
                 pl_errmsg());
    free(id);
    pl_outcome *f = NULL;
    cr_assert_eq(pl_run_continue(&f, e, "again", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(f->status, PL_RUN_SUSPENDED);
    cr_assert_eq(f->calls_served, 1); /* echo */
    cr_assert_eq(t_calls.echo, 1);
    cr_assert_str_neq(f->resume_token, o->resume_token);
    cJSON *answer = t_json("{\"yes\": true}");
    pl_outcome *done = NULL;
    cr_assert_eq(pl_run_resume(&done, e, "again", f->resume_token, answer),
                 PL_OK);
    cr_assert_eq(done->status, PL_RUN_COMPLETED);
    cr_assert_eq(pl_run_verify(e, "again"), PL_OK, "%s", pl_errmsg());
    /* the old run still waits for its own answer */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "asked"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_SUSPENDED);
    cr_assert_str_eq(info->resume_token, o->resume_token);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "asked"), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(answer);
    pl_outcome_free(done);
    pl_outcome_free(f);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

/* The run's deadline is the fork's (runs.h): recorded with the run, it
 * goes with the root action, as the seed does. */
Test(fork, a_fork_keeps_the_runs_deadline)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t deadline = (int64_t)ts.tv_sec * 1000 + 86400000;
    pl_action root = PL_ACTION_INIT;
    root.policy = "ask";
    root.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "due";
    ro.deadline_ms = deadline;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, e, "due", "0:0", "due-again"), PL_OK, "%s",
                 pl_errmsg());
    free(id);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "due-again"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->deadline_ms, deadline);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

/* The worker's thread: pl_worker_run() until pl_worker_stop(). */
/* A fork made where its root policy is not registered (a tool run without
 * the plugin) is left to a process that has it: a worker there takes it,
 * as it takes a run whose owner is gone, and it completes, its forked
 * prefix served from the ledger.  Made without a lease, it was a run no
 * worker ever took: only a pl_run_continue() naming it went on with it. */
Test(fork, a_fork_made_without_its_policy_is_taken_by_a_worker_with_it)
{
    fixture f;
    setup_old(&f);
    pl_engine_close(f.e);
    pl_registry *bare = t_registry(); /* no "outer" */
    pl_engine *e = t_engine(f.path, bare, PL_DURABILITY_PROCESS);
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, e, "old", "0:2", "new"), PL_OK, "%s",
                 pl_errmsg());
    free(id);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "new", NULL), PL_ENOTFOUND, "%s",
                 pl_errmsg());
    cr_assert_eq(status_of(e, "new"), PL_RUN_RUNNING);
    pl_engine_close(e);
    pl_registry_free(bare);
    f.e = t_engine(f.path, f.reg, PL_DURABILITY_PROCESS);
    t_worker w;
    t_worker_start(&w, f.e, 1);
    /* a bound, not a timing: the worker takes it at its first look */
    for (int i = 0; i < 6000 && status_of(f.e, "new") != PL_RUN_COMPLETED; i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    t_worker_stop(&w);
    cr_assert_eq(status_of(f.e, "new"), PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(status_of(f.e, "new")));
    /* chain served (not run again), echo and outer run once more */
    cr_assert_eq(t_calls.chain, 1);
    cr_assert_eq(t_calls.echo, 2);
    cr_assert_eq(outer_runs, 2); /* old, then new */
    cr_assert_eq(ledger_len(f.e, "new", "0"), 5);
    cr_assert_eq(pl_run_verify(f.e, "new"), PL_OK, "%s", pl_errmsg());
    old_untouched(&f);
    teardown(&f);
}
