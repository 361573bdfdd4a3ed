/*
 * test_crash.c -- the crash matrix: SIGKILL at every step boundary, then
 * recovery by replay (docs/design.md §3, §8; core/replay/commit.c SYNC
 * POINTS).
 *
 * The order workflow (examples/order: reserve_stock, charge_card, ship) runs
 * once, uncrashed, in its own store; an event callback records its boundary
 * sequence (each PL_EVENT_STEP_APPENDED and PL_EVENT_COMMIT is one boundary,
 * as order-demo --crash-after counts them).  From it we know K, and for each
 * call the boundary at which its callee's step was appended (its side effect
 * had happened) and the boundary of the commit that made its result durable.
 *
 * Then, for every k = 1..K, in a fresh store and effects file, a forked child
 * opens its own engine and starts the same run, SIGKILLing itself at boundary
 * k; the parent continues the run to completion and checks that
 *   (a) the ledgers equal the reference run's (id, type, actor, payload),
 *   (b) pl_run_verify passes (before and after recovery),
 *   (c) every tool's effect is in the effects file exactly once, except the
 *       one call in flight at k (effect done, result not durable), which may
 *       appear twice -- and charge_card, which dedupes by idempotency key,
 *       never does,
 *   (d) calls served + executed = 3, and served = the calls durable at k;
 * also that the crashed run is "running" with a dead owner, that a check
 * replay (pl_run_options.check) of it reports PL_ECHECK, and that a check
 * replay of the recovered run executes and writes nothing.
 * The matrix runs in each durability mode.  For each k it also kills the
 * RECOVERY run at each of the recovery's own boundaries (on PostgreSQL, in
 * group and process mode, at every third: recovery_crash_matrix()), then
 * recovers again; an uncrashed recovery of a copy of the store killed at k learns
 * those boundaries, and it is the one checked for k alone.  Another, in
 * test_crash_threads.c, kills a process running many orders on several
 * threads (group commit),
 * or as tasks of a pool (group and process mode: its threads share
 * commits), at a boundary of any of them, and recovers every run.
 */
#include "support.h"
#include "support_crash.h"

#include "order/order.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_ID "order-A-1001"

#define ORDER_ID "A-1001"

/* ---- recording boundaries --------------------------------------------------- */

/* Fill in effect_b, result_b and commit_b of every call from the
 * boundaries.  A call served from the ledger crosses none (all stay 0). */
static void analyse(recorder *r)
{
    for (int i = 0; i < r->n_calls; i++) {
        call_info *c = &r->calls[i];
        char child[32];
        snprintf(child, sizeof child, "0.%u", c->seq);
        c->effect_b = c->result_b = c->commit_b = 0;
        for (int k = 1; k <= r->n && k <= MAX_BOUNDARIES; k++) {
            const boundary *b = &r->b[k];
            if (!c->effect_b && b->kind == PL_EVENT_STEP_APPENDED &&
                strcmp(b->path, child) == 0)
                c->effect_b = k;
            else if (c->effect_b && !c->result_b &&
                     b->kind == PL_EVENT_STEP_APPENDED &&
                     strcmp(b->path, "0") == 0 &&
                     b->type == PL_STEP_ACTION_RESULT && b->seq > c->seq)
                c->result_b = k;
            else if (c->result_b && !c->commit_b && b->kind == PL_EVENT_COMMIT)
                c->commit_b = k;
        }
    }
}

/* The tool whose call is in flight at boundary k -- its effect done, its
 * result not yet durable -- or NULL.  Fails the test if there are two. */
static const char *in_flight(const recorder *r, int k)
{
    const char *tool = NULL;
    for (int i = 0; i < r->n_calls; i++) {
        const call_info *c = &r->calls[i];
        if (c->effect_b && c->effect_b <= k && k < c->commit_b) {
            cr_assert_null(tool,
                           "two calls in flight at boundary %d: %s and "
                           "%s",
                           k, tool, c->tool);
            tool = c->tool;
        }
    }
    return tool;
}

/* How many calls executed by this recording had a durable result at k. */
static int durable_by(const recorder *r, int k)
{
    int n = 0;
    for (int i = 0; i < r->n_calls; i++)
        n += r->calls[i].commit_b && r->calls[i].commit_b <= k;
    return n;
}

/* Is boundary k the commit that ends the run (its last boundary)? */
static bool ends_run(const recorder *r, int k)
{
    return k == r->n && r->b[k].kind == PL_EVENT_COMMIT;
}

static int served_in(const recorder *r)
{
    int n = 0;
    for (int i = 0; i < r->n_calls; i++)
        n += !r->calls[i].executed;
    return n;
}

/* ---- ledgers as rows ---------------------------------------------------------- */

static void walk_rows(pl_engine *e, rows *out)
{
    memset(out, 0, sizeof *out);
    int st = pl_run_walk(e, RUN_ID, collect_row, out);
    cr_assert_eq(st, PL_OK, "pl_run_walk: %s", pl_errmsg());
}

/* ---- the effects file --------------------------------------------------------- */

typedef struct effects {
    int count[N_TOOLS];
    int other;
    char key[N_TOOLS][192]; /* the idempotency key of the first line */
    bool key_differs[N_TOOLS];
} effects;

static void effects_read(const char *path, effects *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return; /* nothing happened yet */
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *sp = strchr(line, ' ');
        char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
        int t = -1;
        for (int i = 0; sp && i < N_TOOLS; i++)
            if ((size_t)(sp - line) == strlen(tool_names[i]) &&
                strncmp(line, tool_names[i], (size_t)(sp - line)) == 0)
                t = i;
        if (t < 0 || !sp2) {
            out->other++;
            continue;
        }
        char key[192];
        snprintf(key, sizeof key, "%.*s", (int)(sp2 - sp - 1), sp + 1);
        if (out->count[t]++ == 0)
            snprintf(out->key[t], sizeof out->key[t], "%s", key);
        else if (strcmp(out->key[t], key) != 0)
            out->key_differs[t] = true;
    }
    fclose(f);
}

/* ---- the reference run --------------------------------------------------------- */

typedef struct reference {
    recorder rec;
    rows ledgers;
    char *result;
    effects fx;
} reference;

static pl_engine *open_engine(const char *store, const pl_registry *reg,
                              pl_durability mode, recorder *rec)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = mode;
    o.on_event = on_event;
    o.event_user = rec;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, store, reg, &o);
    cr_assert_eq(st, PL_OK, "pl_engine_open(%s): %s", store, pl_errmsg());
    return e;
}

static char *result_text(const pl_outcome *o)
{
    return t_text(pl_outcome_result(o));
}

static void make_reference(const char *base, pl_durability mode, reference *ref)
{
    memset(ref, 0, sizeof *ref);
    char store[4200], fx[4200];
    t_store_in(store, sizeof store, base, "reference.db");
    snprintf(fx, sizeof fx, "%s/reference.effects", base);
    pl_registry *reg = order_registry(fx);
    pl_engine *e = open_engine(store, reg, mode, &ref->rec);
    cJSON *p = order_sample(ORDER_ID);
    pl_action a = {PL_ACTION_VERSION, "order", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = RUN_ID;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    cr_assert_eq(st, PL_OK, "reference run: %s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "reference run: %s",
                 o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, N_CALLS);
    cr_assert_eq(o->calls_served, 0);
    ref->result = result_text(o);
    pl_outcome_free(o);
    walk_rows(e, &ref->ledgers);
    cr_assert_eq(pl_run_verify(e, RUN_ID), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    effects_read(fx, &ref->fx);

    recorder *r = &ref->rec;
    cr_assert(!r->overflow);
    analyse(r);
    cr_assert_eq(r->n_calls, N_CALLS, "the order makes three calls");
    for (int i = 0; i < N_CALLS; i++) {
        const call_info *c = &r->calls[i];
        cr_assert_str_eq(c->tool, tool_names[i]);
        cr_assert(c->executed);
        cr_assert(c->effect_b > 0 && c->effect_b < c->result_b &&
                      c->result_b < c->commit_b,
                  "%s: effect at %d, result at %d, commit at %d", c->tool,
                  c->effect_b, c->result_b, c->commit_b);
        cr_assert_eq(ref->fx.count[i], 1, "reference: %s once", c->tool);
    }
    cr_assert_eq(ref->fx.other, 0);
}

/*
 * The sync points of commit.c make the order's boundaries, in every
 * durability mode:
 *
 *    1 append 0:0 call reserve_stock     9 commit  (charge_card durable)
 *    2 append 0.0:0 (effect done)       10 append 0:4 call ship
 *    3 append 0:1 result                11 append 0.4:0 (effect done)
 *    4 commit  (reserve_stock durable)  12 append 0:5 result
 *    5 append 0:2 call charge_card      13 commit  (ship durable)
 *    6 commit  (non-idempotent: call    14 append 0:6 the root's result
 *              durable before it runs)  15 commit  (the run's end)
 *    7 append 0.2:0 (effect done)
 *    8 append 0:3 result
 *
 * so the call in flight at each k (effect done, result not durable) is:
 */
#define K_ORDER 15

static const char *const in_flight_table[K_ORDER + 1] = {
    [2] = "reserve_stock", [3] = "reserve_stock", [7] = "charge_card",
    [8] = "charge_card",   [11] = "ship",         [12] = "ship",
};

/* ---- children ---------------------------------------------------------------- */

/* In a forked child: open an engine of its own, start (or continue) the
 * run, and die at boundary kill_at.  Returns an exit code if it did not. */
static int child_main(const char *store, const char *fx, pl_durability mode,
                      bool start, long kill_at)
{
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg) || order_register(reg, fx))
        return 10;
    static recorder rec;
    memset(&rec, 0, sizeof rec);
    rec.kill_at = kill_at;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = mode;
    o.on_event = on_event;
    o.event_user = &rec;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, reg, &o))
        return 11;
    pl_outcome *out = NULL;
    int st;
    if (start) {
        cJSON *p = order_sample(ORDER_ID);
        pl_action a = {PL_ACTION_VERSION, "order", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = RUN_ID;
        st = pl_run_start(&out, e, &a, &ro);
        cJSON_Delete(p);
    } else {
        st = pl_run_continue(&out, e, RUN_ID, NULL);
    }
    int code = st ? 12 : out->status == PL_RUN_COMPLETED ? 3 : 13;
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    return code;
}

/* Fork a child that runs the order and SIGKILLs itself at boundary
 * kill_at; assert that it died of SIGKILL. */
static void crash_child(const char *store, const char *fx, pl_durability mode,
                        bool start, long kill_at, const char *what)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0)
        _exit(child_main(store, fx, mode, start, kill_at));
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) == -1 && errno == EINTR)
        ;
    cr_assert_eq(w, pid, "waitpid: %s", strerror(errno));
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "%s: the child should have died of SIGKILL at boundary %ld, "
              "but %s %d",
              what, kill_at,
              WIFEXITED(status) ? "exited with" : "died of signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* ---- files ------------------------------------------------------------------ */

static void place_copy(const place *to, const place *from)
{
    t_store_copy(to->store, from->store);
    t_copy_file(from->fx, to->fx);
}

/* Make @p to a copy of @p from again: on LMDB a new copy of its files, on
 * PostgreSQL its tables refilled once made (the schema is not built again:
 * t_pg_refill()). */
static void place_refill(const place *to, const place *from)
{
    cr_assert(unlink(to->fx) == 0 || errno == ENOENT, "unlink %s", to->fx);
#if PL_WITH_POSTGRESQL
    if (t_on_pg()) {
        t_pg_refill(to->store, from->store);
        t_copy_file(from->fx, to->fx);
        return;
    }
#endif
    char lock[4400];
    snprintf(lock, sizeof lock, "%s-lock", to->store);
    cr_assert(unlink(to->store) == 0 || errno == ENOENT, "unlink %s",
              to->store);
    cr_assert(unlink(lock) == 0 || errno == ENOENT, "unlink %s", lock);
    place_copy(to, from);
}

/* ---- recovery and its checks ---------------------------------------------------- */

typedef struct expectation {
    const char *what;     /* for messages */
    const char *twice[2]; /* tools that may have run twice (in flight) */
    int served;           /* calls the final recovery serves */
    bool ended;           /* killed after the run's final commit */
} expectation;

/*
 * In @p p (a run killed at least once): check the crashed store, continue
 * the run to completion recording its boundaries into @p rec, and check
 * (a)-(d) against the reference.
 */
static void recover_and_check(const place *p, pl_durability mode,
                              const reference *ref, const expectation *x,
                              recorder *rec)
{
    recorder *live = calloc(1, sizeof *live);
    cr_assert_not_null(live);
    pl_registry *reg = order_registry(p->fx);
    pl_engine *e = open_engine(p->store, reg, mode, live);

    /* the crash left a consistent store and a run whose owner is dead */
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, RUN_ID), PL_OK, "%s: %s", x->what,
                 pl_errmsg());
    /* killed at the final commit, it is complete: continuing it replays */
    pl_run_status before = x->ended ? PL_RUN_COMPLETED : PL_RUN_RUNNING;
    cr_assert_eq(info->status, before, "%s: status %s", x->what,
                 pl_run_status_name(info->status));
    cr_assert(!info->owner_alive, "%s: the killed owner counts as alive",
              x->what);
    uint32_t attempts = info->attempts;
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, RUN_ID), PL_OK, "%s: crashed store: %s",
                 x->what, pl_errmsg());

    /* the deploy-safety check cannot finish it without executing */
    pl_run_options check = PL_RUN_OPTIONS_INIT;
    check.check = true;
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, RUN_ID, &check);
    cr_assert_eq(st, x->ended ? PL_OK : PL_ECHECK, "%s: check replay: %s (%s)",
                 x->what, pl_status_name(st), pl_errmsg());
    pl_outcome_free(o);
    o = NULL;

    memset(live, 0, sizeof *live); /* record the recovery alone */
    st = pl_run_continue(&o, e, RUN_ID, NULL);
    *rec = *live;
    cr_assert_eq(st, PL_OK, "%s: pl_run_continue: %s", x->what, pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s: recovery ended %s: %s",
                 x->what, pl_run_status_name(o->status),
                 o->reason ? o->reason : "");
    /* (d) the counters */
    cr_assert_eq(o->calls_served + o->calls_executed, N_CALLS,
                 "%s: served %llu + executed %llu", x->what,
                 (unsigned long long)o->calls_served,
                 (unsigned long long)o->calls_executed);
    cr_assert_eq(o->calls_served, (uint64_t)x->served,
                 "%s: served %llu calls, %d were durable", x->what,
                 (unsigned long long)o->calls_served, x->served);
    char *res = result_text(o);
    cr_assert_str_eq(res, ref->result, "%s: the order's result", x->what);
    free(res);
    pl_outcome_free(o);

    /* (a) the same ledgers as the uncrashed run */
    rows got;
    walk_rows(e, &got);
    expect_same_ledgers(&got, &ref->ledgers, x->what);
    rows_free(&got);

    /* (b) they verify, and the run record agrees */
    cr_assert_eq(pl_run_verify(e, RUN_ID), PL_OK, "%s: %s", x->what,
                 pl_errmsg());
    cr_assert_eq(pl_run_get(&info, e, RUN_ID), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, (uint64_t)ref->ledgers.n, "%s: steps", x->what);
    /* a completed run is final: continuing it replays and writes nothing */
    cr_assert_eq(info->attempts, x->ended ? attempts : attempts + 1,
                 "%s: attempts", x->what);
    pl_run_info_free(info);
    /* and replays without executing or writing anything */
    st = pl_run_continue(&o, e, RUN_ID, &check);
    cr_assert_eq(st, PL_OK, "%s: check replay of the recovered run: %s",
                 x->what, pl_errmsg());
    cr_assert_eq(o->calls_served, N_CALLS);
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->steps_appended, 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(live);

    /* (c) each effect once, the in-flight call's at most once more */
    effects fx;
    effects_read(p->fx, &fx);
    cr_assert_eq(fx.other, 0, "%s: unexpected lines in the effects file",
                 x->what);
    for (int t = 0; t < N_TOOLS; t++) {
        const char *tool = tool_names[t];
        int want = 1;
        for (int i = 0; i < 2; i++)
            if (x->twice[i] && strcmp(x->twice[i], tool) == 0 &&
                strcmp(tool, "charge_card") != 0)
                want++;
        cr_assert_eq(fx.count[t], want,
                     "%s: %s's effect appears %d times, expected %d "
                     "(in flight: %s, %s)",
                     x->what, tool, fx.count[t], want,
                     x->twice[0] ? x->twice[0] : "none",
                     x->twice[1] ? x->twice[1] : "none");
        cr_assert_str_eq(fx.key[t], ref->fx.key[t], "%s: %s's idempotency key",
                         x->what, tool);
        cr_assert(!fx.key_differs[t], "%s: %s ran under two keys", x->what,
                  tool);
    }
    cr_assert_eq(fx.count[1], 1, "%s: charge_card must never appear twice",
                 x->what);
}

/* ---- the matrices ----------------------------------------------------------------- */

/*
 * Kill the run at boundary k and recover it (an uncrashed recovery of a
 * copy of the crashed store, checked as (a)-(d) say: the case of k alone,
 * and where the recovery's boundaries come from), then kill its recovery at
 * each of those boundaries j, then recover again.
 */
static void recovery_crash_matrix(pl_durability mode)
{
    const char *base = t_tmpdir();
    reference *ref = calloc(1, sizeof *ref);
    recorder *first = calloc(1, sizeof *first);
    recorder *rec = calloc(1, sizeof *rec);
    cr_assert(ref && first && rec);
    make_reference(base, mode, ref);
    int K = ref->rec.n;
    int total = 0, stride = t_stride();
    /* On PostgreSQL the modes differ in synchronous_commit alone, which
     * decides what a crash of the server loses (docs/design.md §9); here
     * the engine's process is killed, never the server, and the group
     * commit's queue is the engine's on either store (the LMDB matrices
     * kill every recovery at each of its boundaries in every mode).  So
     * there sync kills every recovery at each boundary, and group and
     * process at every third, offset by k as under the sanitizers. */
    if (t_on_pg() && mode != PL_DURABILITY_SYNC && stride < 3)
        stride = 3;
    /* the copies of each crashed store: one place for the uncrashed
     * recovery, one for the killed ones, each copied into again before
     * each use */
    place probe, p;
    place_make(&probe, base, "probe");
    place_make(&p, base, "killed");

    for (int k = 1; k <= K; k++) {
        char name[64], what[128];
        const char *flight1 = in_flight(&ref->rec, k);
        int durable1 = durable_by(&ref->rec, k);

        place crashed;
        snprintf(name, sizeof name, "k%d", k);
        snprintf(what, sizeof what, "%s, killed at %d",
                 pl_durability_name(mode), k);
        place_make(&crashed, base, name);
        crash_child(crashed.store, crashed.fx, mode, true, k, what);

        /* an uncrashed recovery of a copy: the recovery's boundaries */
        place_refill(&probe, &crashed);
        expectation x1 = {
            what, {flight1, NULL}, durable1, ends_run(&ref->rec, k)};
        recover_and_check(&probe, mode, ref, &x1, first);
        cr_assert(!first->overflow);
        analyse(first);
        int K2 = first->n;
        if (ends_run(&ref->rec, k))
            cr_assert_eq(K2, 0,
                         "%s: replaying a completed run writes "
                         "nothing",
                         what);
        else
            cr_assert_gt(K2, 0,
                         "%s: the recovery appends at least the "
                         "root's result",
                         what);
        cr_assert_eq(served_in(first), durable1, "%s: served", what);

        for (int j = 1 + (k - 1) % stride; j <= K2; j += stride) {
            snprintf(what, sizeof what,
                     "%s, killed at %d, its recovery "
                     "killed at %d",
                     pl_durability_name(mode), k, j);
            place_refill(&p, &crashed);
            crash_child(p.store, p.fx, mode, false, j, what);
            expectation x = {what,
                             {flight1, in_flight(first, j)},
                             durable1 + durable_by(first, j),
                             ends_run(&ref->rec, k) || ends_run(first, j)};
            recover_and_check(&p, mode, ref, &x, rec);
            total++;
        }
        t_rmtree(crashed.dir);
    }
    t_rmtree(p.dir);
    t_rmtree(probe.dir);
    cr_assert_gt(total, K / stride,
                 "every recovery was killed at each boundary (every %d)",
                 stride);
    rows_free(&ref->ledgers);
    free(ref->result);
    free(ref);
    free(first);
    free(rec);
}

/* The boundaries and in-flight calls are as the table above states. */
Test(crash, boundary_table)
{
    static const pl_durability modes[] = {
        PL_DURABILITY_SYNC, PL_DURABILITY_GROUP, PL_DURABILITY_PROCESS};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        reference *ref = calloc(1, sizeof *ref);
        cr_assert_not_null(ref);
        make_reference(t_tmpdir(), modes[m], ref);
        cr_assert_eq(ref->rec.n, K_ORDER,
                     "%s: the order run crosses %d "
                     "boundaries",
                     pl_durability_name(modes[m]), ref->rec.n);
        for (int k = 1; k <= K_ORDER; k++) {
            const char *got = in_flight(&ref->rec, k);
            const char *want = in_flight_table[k];
            cr_assert_str_eq(got ? got : "(none)", want ? want : "(none)",
                             "%s: the call in flight at boundary %d",
                             pl_durability_name(modes[m]), k);
        }
        /* the calls durable at k: served by a recovery from k */
        cr_assert_eq(durable_by(&ref->rec, 3), 0);
        cr_assert_eq(durable_by(&ref->rec, 4), 1);
        cr_assert_eq(durable_by(&ref->rec, 8), 1);
        cr_assert_eq(durable_by(&ref->rec, 9), 2);
        cr_assert_eq(durable_by(&ref->rec, 13), 3);
        rows_free(&ref->ledgers);
        free(ref->result);
        free(ref);
    }
}

Test(crash, recovery_matrix_sync) { recovery_crash_matrix(PL_DURABILITY_SYNC); }

Test(crash, recovery_matrix_group)
{
    recovery_crash_matrix(PL_DURABILITY_GROUP);
}

Test(crash, recovery_matrix_process)
{
    recovery_crash_matrix(PL_DURABILITY_PROCESS);
}
