/*
 * test_time_crash.c -- the crash matrix of time and events: SIGKILL at
 * every step boundary around a sleep, a wait for an event, a cancellation
 * and the compensating call after it, then recovery.
 *
 * The saga "trip": call "book", sleep (parked), wait for "confirm"
 * (parked), call "pay", wait for "ship" (parked); the run is cancelled
 * there, and the wait's PL_ECANCELLED makes it call "refund" and end
 * `cancelled`.  Each tool appends a line to an effects file.  A driver
 * takes the run from start to end: it wakes the sleep when due, sends
 * "confirm" when the run waits for it, cancels it when it waits for
 * "ship".  The reference runs the driver once; then for every boundary k
 * (each PL_EVENT_STEP_APPENDED and PL_EVENT_COMMIT, as test_crash.c counts
 * them) a forked child runs the driver and SIGKILLs itself at k, and the
 * parent runs the driver again from whatever the store holds.  The
 * recovered run must end `cancelled` with the reason, with the reference's
 * ledger shape (ids, types, actors), pass pl_run_verify(), and every
 * tool's effect must be in the file once, but for the one call in flight
 * at the kill, which may be there twice.
 *
 * Then the one transaction a signal (and a cancellation) makes when it
 * continues a waiting run in the caller's thread, the delivery riding the
 * run's next commit: its count of write transactions, a delivery racing
 * it, and a SIGKILL at every boundary of the signal and of the
 * cancellation: the event is consumed once, or, killed before that one
 * transaction, was never accepted and is sent again.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_ID "trip-1"
#define REASON "the traveller cancelled"

static char g_fx[4300]; /* the effects file */
static long g_kill_at;  /* 0: never */
static long g_seen;

static void effect(const char *what)
{
    int fd = open(g_fx, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0)
        return;
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", what);
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static int tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    effect(user);
    return pl_steps_add_resultf(out, "{s:s}", "done", (const char *)user);
}

static int trip(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_invoke(NULL, ctx, "book", pl_json_empty());
    if (!st)
        st = pl_ctx_sleep(ctx, 30);
    if (!st)
        st = pl_ctx_wait_event(&p, ctx, "confirm", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    p = NULL;
    if (!st)
        st = pl_ctx_invoke(NULL, ctx, "pay", pl_json_empty());
    if (!st)
        st = pl_ctx_wait_event(&p, ctx, "ship", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    if (st == PL_ECANCELLED) {
        if ((st = pl_ctx_invoke(NULL, ctx, "refund", pl_json_empty())))
            return st;
        return PL_ECANCELLED;
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "go": wait for "go", call "pay", end. */
static int go(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    if (!st)
        st = pl_ctx_invoke(NULL, ctx, "pay", pl_json_empty());
    return st ? st : pl_steps_add_resultf(out, "{s:b}", "paid", 1);
}

static void on_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    if (++g_seen == g_kill_at)
        kill(getpid(), SIGKILL);
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    static const char *const tools[] = {"book", "pay", "refund"};
    for (size_t i = 0; i < 3; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = tools[i];
        d.fn = tool;
        d.user = (void *)tools[i];
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    }
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "trip";
    d.fn = trip;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    d.name = "go";
    d.fn = go;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    return reg;
}

static pl_engine *open_engine(const char *store, const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_SYNC;
    o.on_event = on_event;
    o.lease_ms = 1000; /* a killed run's lease runs out soon */
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, reg, &o) ||
        pl_engine_set_wait_in_place(e, 0)) {
        pl_engine_close(e);
        return NULL;
    }
    return e;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * Take the run from wherever it is to its end; PL_OK once it has ended.
 * Every step is one the store decides: a killed process's run is taken
 * over once its lease has run out.
 */
static int drive(pl_engine *e)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, RUN_ID, NULL); /* also: no such run */
    if (st == PL_ENOTFOUND) {
        pl_action a = {
            PL_ACTION_VERSION, "trip", pl_json_empty(), NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = RUN_ID;
        st = pl_run_start(&o, e, &a, &ro);
    }
    pl_outcome_free(o);
    for (int guard = 0; guard < 100000; guard++) {
        pl_run_info *ri = NULL;
        if ((st = pl_run_get(&ri, e, RUN_ID)))
            return st;
        pl_run_status s = ri->status;
        char ev[32] = "";
        if (ri->wait_event)
            snprintf(ev, sizeof ev, "%s", ri->wait_event);
        pl_run_info_free(ri);
        o = NULL;
        if (s == PL_RUN_CANCELLED || s == PL_RUN_COMPLETED ||
            s == PL_RUN_FAILED)
            return PL_OK;
        if (s == PL_RUN_RUNNING) { /* a killed owner's: once its lease ends */
            st = pl_run_continue(&o, e, RUN_ID, NULL);
            if (st == PL_EBUSY)
                nap_ms(20);
            else if (st)
                return st;
        } else if (!strcmp(ev, "confirm")) {
            cJSON *p = cJSON_CreateObject();
            st = pl_run_signal(&o, e, RUN_ID, "confirm", p);
            cJSON_Delete(p);
            if (st && st != PL_EBUSY)
                return st;
        } else if (!strcmp(ev, "ship")) {
            if ((st = pl_run_cancel(e, RUN_ID, REASON)) && st != PL_ESTATE)
                return st;
        } else { /* the sleep */
            int64_t next = 0;
            if ((st = pl_engine_wake(e, &next)))
                return st;
            nap_ms(5);
        }
        pl_outcome_free(o);
    }
    return PL_ELIMIT;
}

typedef struct shape {
    char **ids;
    size_t n;
} shape;

static int collect(const pl_step *s, void *user)
{
    shape *sh = user;
    char line[256];
    snprintf(line, sizeof line, "%s %s %s", pl_step_id(s),
             pl_step_type_name(pl_step_type_of(s)), pl_step_actor(s));
    sh->ids = realloc(sh->ids, (sh->n + 1) * sizeof *sh->ids);
    sh->ids[sh->n++] = strdup(line);
    return 0;
}

static void shape_of(pl_engine *e, shape *sh)
{
    memset(sh, 0, sizeof *sh);
    cr_assert_eq(pl_run_walk(e, RUN_ID, collect, sh), PL_OK, "%s", pl_errmsg());
}

static void shape_free(shape *sh)
{
    for (size_t i = 0; i < sh->n; i++)
        free(sh->ids[i]);
    free(sh->ids);
}

static int count_effect(const char *what) { return t_count_lines(g_fx, what); }

static void fresh(char *store, size_t n, const char *name)
{
    const char *dir = t_tmpdir();
    t_store_in(store, n, dir, name);
    snprintf(g_fx, sizeof g_fx, "%s/%s.fx", dir, name);
}

Test(time_crash, killed_at_every_boundary_around_sleep_wait_and_cancel,
     .timeout = 600)
{
    pl_registry *reg = registry();
    char store[4300];
    fresh(store, sizeof store, "ref");
    pl_engine *e = open_engine(store, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    g_seen = 0;
    cr_assert_eq(drive(e), PL_OK, "%s", pl_errmsg());
    long k_max = g_seen;
    shape ref;
    shape_of(e, &ref);
    pl_engine_close(e);
    cr_assert_gt(k_max, 10);
    fprintf(stderr, "time crash matrix: %ld boundaries\n", k_max);
    cr_assert_eq(count_effect("refund"), 1);

    for (long k = 1; k <= k_max; k++) {
        char name[32];
        snprintf(name, sizeof name, "k%ld", k);
        fresh(store, sizeof store, name);
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            g_kill_at = k;
            g_seen = 0;
            pl_engine *ce = open_engine(store, reg);
            int st = ce ? drive(ce) : PL_ESTORE;
            _exit(st ? 12 : 3);
        }
        int ws = 0;
        while (waitpid(pid, &ws, 0) == -1 && errno == EINTR)
            ;
        cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
                  "k=%ld: the child was to die at its boundary (status %#x)", k,
                  ws);
        g_kill_at = 0;
        e = open_engine(store, reg);
        cr_assert_not_null(e, "%s", pl_errmsg());
        cr_assert_eq(drive(e), PL_OK, "k=%ld: %s", k, pl_errmsg());
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, RUN_ID), PL_OK);
        cr_expect_eq(ri->status, PL_RUN_CANCELLED, "k=%ld: %s", k,
                     pl_run_status_name(ri->status));
        cr_expect_str_eq(ri->reason, REASON, "k=%ld", k);
        pl_run_info_free(ri);
        cr_expect_eq(pl_run_verify(e, RUN_ID), PL_OK, "k=%ld: %s", k,
                     pl_errmsg());
        shape got;
        shape_of(e, &got);
        cr_expect_eq(got.n, ref.n, "k=%ld: %zu steps, the reference %zu", k,
                     got.n, ref.n);
        for (size_t i = 0; i < got.n && i < ref.n; i++)
            cr_expect_str_eq(got.ids[i], ref.ids[i], "k=%ld, step %zu", k, i);
        shape_free(&got);
        int twice = 0;
        static const char *const tools[] = {"book", "pay", "refund"};
        for (size_t i = 0; i < 3; i++) {
            int n = count_effect(tools[i]);
            cr_expect(n == 1 || n == 2, "k=%ld: %s %d times", k, tools[i], n);
            twice += n == 2;
        }
        cr_expect_leq(twice, 1, "k=%ld: at most the call in flight repeats", k);
        pl_engine_close(e);
    }
    shape_free(&ref);
    pl_registry_free(reg);
}

/* Runs made by start_go() have the concurrency key "k" (limit 1). */
static bool g_keyed;

static pl_outcome *start_go(pl_engine *e, const char *id)
{
    pl_action a = {PL_ACTION_VERSION, "go", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.concurrency_key = g_keyed ? "k" : NULL;
    ro.concurrency_limit = g_keyed ? 1 : 0;
    pl_outcome *o = NULL;
    if (g_keyed) /* a key is a submitted run's */
        cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    int st = g_keyed ? pl_run_continue(&o, e, id, NULL)
                     : pl_run_start(&o, e, &a, &ro);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    return o;
}

/* The `event` steps of run @p id (pl_run_walk()). */
static int count_event(const pl_step *s, void *user)
{
    *(int *)user += pl_step_type_of(s) == PL_STEP_EVENT;
    return 0;
}

static int events_of(pl_engine *e, const char *id)
{
    int n = 0;
    cr_assert_eq(pl_run_walk(e, id, count_event, &n), PL_OK, "%s", pl_errmsg());
    return n;
}

/* Signal "go" to run @p id, continuing it here: PL_OK and its outcome. */
static int signal_go(pl_engine *e, const char *id, pl_outcome **o)
{
    cJSON *p = cJSON_CreateObject();
    int st = pl_run_signal(o, e, id, "go", p);
    cJSON_Delete(p);
    return st;
}

/* Wake run @p id until it has completed (a killed owner's lease runs out
 * first); its status. */
static pl_run_status wake_until_done(pl_engine *e, const char *id)
{
    pl_run_status s = PL_RUN_RUNNING;
    for (int i = 0; i < 2000 && s != PL_RUN_COMPLETED; i++) {
        int64_t next = 0;
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(pl_run_get(&ri, e, id), PL_OK);
        s = ri->status;
        pl_run_info_free(ri);
        if (s != PL_RUN_COMPLETED)
            nap_ms(5);
    }
    return s;
}

/*
 * pl_run_signal() continuing a waiting run in its thread writes the
 * delivery, the lease, the claim and the run's next commit (the `event`
 * step and the call's `action_call`) in one transaction: on LMDB the
 * signal is two write transactions in all, each one sync (that one, and
 * the call's result with the run's end).
 */
Test(time_crash, a_signal_and_the_runs_next_commit_are_one_transaction)
{
    pl_registry *reg = registry();
    char store[4300];
    fresh(store, sizeof store, "take");
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_SYNC;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &eo), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    pl_outcome_free(start_go(e, "take-1"));
    uint64_t m0 = 0, m1 = 0;
    cr_assert_eq(pl_engine_change_mark(&m0, e), PL_OK);
    pl_outcome *o = NULL;
    cr_assert_eq(signal_go(e, "take-1", &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_change_mark(&m1, e), PL_OK);
    cr_assert_not_null(o, "continued in the caller's thread");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    if (!t_on_pg()) /* PostgreSQL's mark is its WAL position, no count */
        cr_expect_eq(m1 - m0, 2, "write transactions of the signal: %llu",
                     (unsigned long long)(m1 - m0));
    cr_expect_eq(count_effect("pay"), 1);
    cr_expect_eq(events_of(e, "take-1"), 1);
    cr_expect_eq(pl_run_verify(e, "take-1"), PL_OK, "%s", pl_errmsg());
    /* a signal to a run that waits for another name is delivered with the
     * run replayed to its wait and parked again, in one transaction */
    pl_outcome_free(start_go(e, "take-2"));
    cr_assert_eq(pl_engine_change_mark(&m0, e), PL_OK);
    cJSON *p = cJSON_CreateObject();
    cr_assert_eq(pl_run_signal(&o, e, "take-2", "other", p), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(p);
    cr_assert_eq(pl_engine_change_mark(&m1, e), PL_OK);
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    if (!t_on_pg())
        cr_expect_eq(m1 - m0, 1, "write transactions: %llu",
                     (unsigned long long)(m1 - m0));
    /* the event waits in the inbox for a wait of its name: the run, sent
     * "go" now, takes that one and goes on */
    cr_assert_eq(signal_go(e, "take-2", &o), PL_OK, "%s", pl_errmsg());
    cr_assert_not_null(o);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(count_effect("pay"), 2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A second signal sent while the first one's execution has not committed
 * yet (from the event hook, at the first step the run appends). */
static pl_engine *g_race_engine;
static int g_race_rc = -1;

static void race_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_STEP_APPENDED || g_race_rc != -1)
        return;
    cJSON *p = cJSON_CreateObject();
    g_race_rc = pl_run_signal(NULL, g_race_engine, "race-1", "go", p);
    cJSON_Delete(p);
}

/*
 * Another delivery comes between the run's look at its inbox and its
 * commit: the event the execution consumed is no longer the first of its
 * name, so the delivery does not take the run (LMDB: the delivery alone is
 * written; PostgreSQL: nothing, then the delivery alone).  Both events are
 * kept; the run, woken, takes the first, once.
 */
Test(time_crash, a_delivery_between_the_look_and_the_commit_wins)
{
    pl_registry *reg = registry();
    char store[4300];
    fresh(store, sizeof store, "race");
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_SYNC;
    eo.on_event = race_event;
    g_race_rc = 0; /* not yet */
    cr_assert_eq(pl_engine_open(&g_race_engine, store, reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    pl_engine *e = g_race_engine;
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    pl_outcome_free(start_go(e, "race-1"));
    g_race_rc = -1; /* the next step appended sends one */
    pl_outcome *o = NULL;
    cr_assert_eq(signal_go(e, "race-1", &o), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(g_race_rc, PL_OK, "the racing signal");
    if (o) /* continued after delivering alone (PostgreSQL) */
        cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_expect_eq(wake_until_done(e, "race-1"), PL_RUN_COMPLETED);
    /* "pay" is idempotent: the execution that lost may have made it */
    int pays = count_effect("pay");
    cr_expect(pays == 1 || pays == 2, "pay %d times", pays);
    cr_expect_eq(events_of(e, "race-1"), 1);
    cr_expect_eq(pl_run_verify(e, "race-1"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* What a child does to a waiting run "go" (it exits 3 when it succeeds). */
typedef enum { DO_SIGNAL, DO_CANCEL } kill_act;

/*
 * Start run @p id waiting for "go", then fork a child that does @p act to
 * it and SIGKILLs itself at boundary @p k; the store reopened, and the
 * run's status in *status.
 */
static pl_engine *killed_at(const char *store, const pl_registry *reg,
                            const char *id, kill_act act, long k,
                            pl_run_status *status)
{
    pl_engine *e = open_engine(store, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_outcome_free(start_go(e, id));
    pl_engine_close(e);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_engine *ce = open_engine(store, reg);
        g_seen = 0;
        g_kill_at = k;
        pl_outcome *co = NULL;
        int st = !ce                ? PL_ESTORE
                 : act == DO_CANCEL ? pl_run_cancel(ce, id, REASON)
                                    : signal_go(ce, id, &co);
        bool done = !st && (act == DO_CANCEL ||
                            (co && co->status == PL_RUN_COMPLETED));
        _exit(done ? 3 : 12);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) == -1 && errno == EINTR)
        ;
    bool killed = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
    cr_assert(killed || (WIFEXITED(ws) && WEXITSTATUS(ws) == 3),
              "k=%ld: status %#x", k, ws);
    e = open_engine(store, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, id), PL_OK, "%s", pl_errmsg());
    *status = ri->status;
    pl_run_info_free(ri);
    return e;
}

/*
 * The process that signals is killed at each step boundary of the signal
 * (each step appended, each commit): before the commit that carries the
 * delivery nothing is written (pl_run_signal() had not returned: the
 * signal was not accepted, and the sender sends it again); from that
 * commit on the event is delivered and consumed, and the run, once the
 * dead process's lease has run out, is woken by the timer the delivery
 * made due and goes on.  Either way the run completes with one `event`
 * step, the call made once (twice at most when it was in flight).
 */
static void signal_killed_at_every_boundary(const char *name)
{
    pl_registry *reg = registry();
    char store[4300];
    fresh(store, sizeof store, name);
    /* the reference: how many boundaries a signal crosses */
    pl_engine *e = open_engine(store, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_outcome_free(start_go(e, "ref"));
    long b0 = g_seen;
    pl_outcome *o = NULL;
    cr_assert_eq(signal_go(e, "ref", &o), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    long bounds = g_seen - b0;
    cr_assert_geq(bounds, 3, "%ld boundaries", bounds);
    pl_engine_close(e);
    for (long k = 1; k <= bounds + 1; k++) {
        char id[32];
        snprintf(id, sizeof id, "sig-%ld", k);
        remove(g_fx);
        pl_run_status s;
        e = killed_at(store, reg, id, DO_SIGNAL, k, &s);
        if (s == PL_RUN_WAITING) { /* not accepted: nothing was written */
            /* (the idempotent call may have run: it runs again) */
            cr_expect_leq(count_effect("pay"), 1, "k=%ld", k);
            cr_expect_eq(events_of(e, id), 0, "k=%ld", k);
            cr_assert_eq(signal_go(e, id, &o), PL_OK, "k=%ld: %s", k,
                         pl_errmsg());
            pl_outcome_free(o);
        }
        cr_expect_eq(wake_until_done(e, id), PL_RUN_COMPLETED, "k=%ld", k);
        int pays = count_effect("pay");
        cr_expect(pays == 1 || pays == 2, "k=%ld: pay %d times", k, pays);
        cr_expect_eq(events_of(e, id), 1, "k=%ld: consumed once", k);
        cr_expect_eq(pl_run_verify(e, id), PL_OK, "k=%ld: %s", k, pl_errmsg());
        pl_engine_close(e);
    }
    g_kill_at = 0;
    pl_registry_free(reg);
}

Test(time_crash, a_signal_killed_at_every_boundary)
{
    signal_killed_at_every_boundary("sigkill");
}

/* The same with a concurrency key: its ride takes the run with the
 * `event` step, a commit before the call's (runner.c, wait.c). */
Test(time_crash, a_keyed_signal_killed_at_every_boundary)
{
    g_keyed = true;
    signal_killed_at_every_boundary("sigkey");
}

/* The `cancel` steps of run @p id (pl_run_walk()). */
static int count_cancel(const pl_step *s, void *user)
{
    *(int *)user += pl_step_type_of(s) == PL_STEP_CANCEL;
    return 0;
}

static int cancels_of(pl_engine *e, const char *id)
{
    int n = 0;
    cr_assert_eq(pl_run_walk(e, id, count_cancel, &n), PL_OK, "%s",
                 pl_errmsg());
    return n;
}

/* Run @p id ended `cancelled` with REASON, one `cancel` step, no timer
 * left, nothing paid, its ledger verified. */
static void expect_cancelled(pl_engine *e, const char *id, long k)
{
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, id), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ri->status, PL_RUN_CANCELLED, "k=%ld: %s", k,
                 pl_run_status_name(ri->status));
    cr_expect_str_eq(ri->reason ? ri->reason : "", REASON, "k=%ld", k);
    pl_run_info_free(ri);
    cr_expect_eq(cancels_of(e, id), 1, "k=%ld", k);
    cr_expect_eq(count_effect("pay"), 0, "k=%ld", k);
    cr_expect_eq(pl_run_verify(e, id), PL_OK, "k=%ld: %s", k, pl_errmsg());
    int64_t next = -1;
    cr_expect_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(next, 0, "k=%ld: no timer is left", k);
}

/*
 * A waiting run cancelled where its policies are registered ends at once:
 * the cancellation's record, the `cancel` step, the run's end, the removal
 * of its timer and of its lease are one transaction (one sync).
 */
Test(time_crash, cancelling_a_waiting_run_is_one_transaction)
{
    pl_registry *reg = registry();
    char store[4300];
    fresh(store, sizeof store, "cancel1");
    pl_engine *e = open_engine(store, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_outcome_free(start_go(e, "cancel-1"));
    uint64_t m0 = 0, m1 = 0;
    cr_assert_eq(pl_engine_change_mark(&m0, e), PL_OK);
    cr_assert_eq(pl_run_cancel(e, "cancel-1", REASON), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_engine_change_mark(&m1, e), PL_OK);
    if (!t_on_pg()) /* PostgreSQL's mark is its WAL position, no count */
        cr_expect_eq(m1 - m0, 1,
                     "write transactions of the cancellation: "
                     "%llu",
                     (unsigned long long)(m1 - m0));
    expect_cancelled(e, "cancel-1", 0);
    /* ended: a second cancellation, and a signal, are refused */
    cr_expect_eq(pl_run_cancel(e, "cancel-1", REASON), PL_ESTATE);
    pl_outcome *o = NULL;
    cr_expect_eq(signal_go(e, "cancel-1", &o), PL_ESTATE);
    cr_expect_null(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * The process that cancels a waiting run is killed at each boundary of
 * the cancellation: before its one transaction nothing is written (the
 * run still waits, and the cancellation, never accepted, is sent again);
 * after it the run has ended.  Either way it ends `cancelled` once.
 */
Test(time_crash, a_cancellation_killed_at_every_boundary)
{
    pl_registry *reg = registry();
    char store[4300];
    fresh(store, sizeof store, "cancelk");
    pl_engine *e = open_engine(store, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_outcome_free(start_go(e, "ref"));
    long b0 = g_seen;
    cr_assert_eq(pl_run_cancel(e, "ref", REASON), PL_OK, "%s", pl_errmsg());
    long bounds = g_seen - b0;
    cr_assert_geq(bounds, 2, "%ld boundaries", bounds);
    pl_engine_close(e);
    for (long k = 1; k <= bounds + 1; k++) {
        char id[32];
        snprintf(id, sizeof id, "cancel-%ld", k);
        pl_run_status s;
        e = killed_at(store, reg, id, DO_CANCEL, k, &s);
        cr_expect(s == PL_RUN_WAITING || s == PL_RUN_CANCELLED, "k=%ld: %s", k,
                  pl_run_status_name(s));
        if (s == PL_RUN_WAITING) { /* not accepted: nothing was written */
            cr_expect_eq(cancels_of(e, id), 0, "k=%ld", k);
            cr_assert_eq(pl_run_cancel(e, id, REASON), PL_OK, "k=%ld: %s", k,
                         pl_errmsg());
        }
        expect_cancelled(e, id, k);
        pl_engine_close(e);
    }
    g_kill_at = 0;
    pl_registry_free(reg);
}
