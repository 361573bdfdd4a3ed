/*
 * test_workflow.c -- the features together, with workers killed: the order
 * workflow of support_workflow.h (a version point, a payment signal waited
 * for under a durable timer, cancellation with a compensating call, a
 * fan-out of three tools one of which is rate limited, a child invocation,
 * continue-as-new) run by two worker processes on one store, the orders
 * under one concurrency key, a schedule starting more, each worker
 * SIGKILLed at every stride-th step boundary of its life (a step appended
 * or a commit: learnt from its engine's events) and started again.  Then:
 * every run ended as a run never killed ends; no call whose result is in
 * a ledger ran twice (only one in flight at a kill, or in a worker that
 * stalled longer than its lease, PL_EVENT_LEASE_LOST, may have); no call is
 * missing; the key's limit held at every instant the tools were inside a
 * call; the rate limit held in every window; each payment was delivered
 * once; the cancelled orders are cancelled; a retention rule, its process
 * killed midway and run again, deleted exactly what it names; ledger-dump
 * --verify and ledger-replay --check pass on the store.  On LMDB, and on
 * PostgreSQL as pg_test_workflow.
 */
#include "support.h"
#include "support_workflow.h"
#include "support_workflow_fx.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ORDERS 12
#define WORKERS 2
#define LEASE_MS 300
#define KEY "warehouse"
#define KEY_LIMIT 2
#define SCHEDULE "restock"
/* What the scripted model answers, the invoice's note. */
#define NOTE "Thank you for your order."
/* Each worker dies at its kill_at-th step boundary: 1 + (j * 11) % (2 *
 * STRIDE) for its j-th life, so STRIDE apart on average, until MAX_KILLS. */
#define STRIDE 6
#define MAX_KILLS 90
#define MAX_LIVES (MAX_KILLS + 3 * WORKERS + 8)
/* At this kill, version 2 is deployed (deploy()). */
#define UPGRADE_AT 12

/* order n: n % 4 == 0 paid, two rounds; 1 paid, one round; 2 not paid in
 * time (expired); 3 cancelled while it waits for a payment that never
 * comes. */
enum { PAID2, PAID1, EXPIRED, CANCELLED };
static int kind_of(int n) { return n % 4; }
static int amount_of(int n) { return 10 * n + 5; }
static int rounds_of(int n) { return kind_of(n) == PAID2 ? 2 : 1; }

static char g_fx[4300];
static char g_kills[4300];
static char g_lapses[4300]; /* a lapse (support_workflow_fx.h) a line */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- a worker that kills itself at a boundary --------------------------- */

static long g_kill_at;
static atomic_long g_boundary;

static void on_boundary(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_LEASE_LOST || ev->kind == PL_EVENT_RUN_STOPPED) {
        /* a loaded host's stall, or a run left for newer code */
        FILE *f = fopen(g_lapses, "a");
        if (f) {
            fprintf(f, "%ld %s %s %s %.120s\n", (long)getpid(), ev->run_id,
                    ev->kind == PL_EVENT_LEASE_LOST ? "lease_lost" : "stopped",
                    pl_status_name(ev->status), ev->detail ? ev->detail : "-");
            fclose(f);
        }
        return;
    }
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    long k = atomic_fetch_add(&g_boundary, 1) + 1;
    if (!g_kill_at || k != g_kill_at)
        return;
    FILE *f = fopen(g_kills, "a");
    if (f) {
        if (ev->kind == PL_EVENT_COMMIT)
            fprintf(f, "%ld commit\n", (long)getpid());
        else
            fprintf(f, "%ld %s %s\n", (long)getpid(),
                    pl_step_type_name(ev->step_type),
                    ev->policy ? ev->policy : "-");
        fclose(f);
    }
    kill(getpid(), SIGKILL);
}

static pid_t spawn_worker(const char *store, long kill_at)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid)
        return pid;
    g_kill_at = kill_at;
    atomic_store(&g_boundary, 0);
    pl_registry *reg = NULL;
    pl_mcp *mcp = NULL; /* stopped with the process */
    if (pl_registry_new(&reg) || workflow_register(reg) ||
        workflow_register_mcp(&mcp, reg))
        _exit(10);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_SYNC;
    o.lease_ms = LEASE_MS;
    o.on_event = on_boundary;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, reg, &o))
        _exit(11);
    if (pl_engine_set_wait_in_place(e, 0))
        _exit(12);
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.concurrency = 2;
    wo.poll_ms = 10;
    _exit(pl_worker_run(e, &wo) ? 13 : 14); /* never stopped: killed */
}

/* The boundary a worker's next life dies at (0: never, after MAX_KILLS). */
static long next_kill(int *lives, int kills)
{
    return kills < MAX_KILLS ? 1 + ((long)(*lives)++ * 11) % (2 * STRIDE) : 0;
}

/* The new code: version 2 of "invoice-child", deployed as an operator
 * would, every worker killed at once (wherever it is) and started again
 * with it.  The runs recorded by version 1 go on with its branch. */
static void deploy(pid_t *w, death *d, int *nd, const char *store, int *lives,
                   int kills)
{
    cr_assert_eq(setenv("WORKFLOW_VERSION", "2", 1), 0);
    for (int i = 0; i < WORKERS; i++) {
        kill(w[i], SIGKILL);
        while (waitpid(w[i], NULL, 0) == -1 && errno == EINTR)
            ;
        cr_assert_lt(*nd, MAX_LIVES);
        d[(*nd)++] = (death){(long)w[i], now_ns(), true};
        w[i] = spawn_worker(store, next_kill(lives, kills));
    }
}

/* ---- the store's side ----------------------------------------------------- */

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static void submit_order(pl_engine *e, int n)
{
    cJSON *p = NULL;
    int timeout = kind_of(n) == EXPIRED     ? 300
                  : kind_of(n) == CANCELLED ? -1
                                            : 60000;
    cr_assert_eq(pl_json_pack(&p, "{s:i, s:i, s:i}", "n", n, "rounds",
                              rounds_of(n), "timeout", timeout),
                 PL_OK);
    char id[32];
    snprintf(id, sizeof id, "order-%d", n);
    pl_action root = PL_ACTION_INIT;
    root.policy = "order";
    root.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.priority = n % 3 - 1;
    ro.concurrency_key = KEY;
    ro.concurrency_limit = KEY_LIMIT;
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

static void put_schedule(pl_engine *e)
{
    cJSON *p = NULL;
    cr_assert_eq(pl_json_pack(&p, "{s:i, s:i, s:i}", "n", 100, "rounds", 1,
                              "paid", 7),
                 PL_OK);
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = SCHEDULE;
    s.cron = "* * * * *";
    s.policy = "order";
    s.payload = p;
    s.overlap = PL_OVERLAP_ALLOW;
    s.catch_up = PL_CATCH_UP_ALL;
    s.catch_up_max = 2;
    s.start_ms = now_ns() / 1000000 - 150000; /* two ticks or three missed */
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

/* The id of the last link of @p id's chain (caller frees); the links
 * before it must be continued, and there must be @p links of them. */
static char *tail_of(pl_engine *e, const char *id, int *links)
{
    char *cur = strdup(id);
    cr_assert(cur);
    *links = 1;
    for (;;) {
        pl_run_info *ri = NULL;
        cr_assert_eq(pl_run_get(&ri, e, cur), PL_OK, "%s: %s", cur,
                     pl_errmsg());
        cr_assert(ri->status != PL_RUN_FAILED, "%s failed: %s", cur,
                  ri->reason);
        if (ri->status != PL_RUN_CONTINUED) {
            pl_run_info_free(ri);
            return cur;
        }
        cr_assert(ri->successor, "%s continued without a successor", cur);
        char *next = strdup(ri->successor);
        cr_assert(next);
        pl_run_info_free(ri);
        free(cur);
        cur = next;
        ++*links;
    }
}

static bool ended(pl_run_status s)
{
    return s == PL_RUN_COMPLETED || s == PL_RUN_CANCELLED ||
           s == PL_RUN_FAILED || s == PL_RUN_CONTINUED;
}

typedef struct run_list {
    char ids[64][PL_MAX_RUN_ID + 1];
    pl_run_status status[64];
    int n;
} run_list;

/* Visitor: the schedule's runs. */
static int visit_scheduled(const pl_run_info *info, void *user)
{
    run_list *l = user;
    if (strncmp(info->id, SCHEDULE "@", strlen(SCHEDULE) + 1) || l->n >= 64)
        return 0;
    snprintf(l->ids[l->n], sizeof l->ids[l->n], "%s", info->id);
    l->status[l->n++] = info->status;
    return 0;
}

/* Every order's chain ended, and the schedule's runs (*sched of them). */
static bool all_ended(pl_engine *e, int *sched)
{
    for (int n = 0; n < ORDERS; n++) {
        char id[32];
        snprintf(id, sizeof id, "order-%d", n);
        int links;
        char *tail = tail_of(e, id, &links);
        pl_run_status s = status_of(e, tail);
        free(tail);
        if (!ended(s))
            return false;
    }
    run_list l = {.n = 0};
    cr_assert_eq(pl_engine_runs(e, visit_scheduled, &l), PL_OK, "%s",
                 pl_errmsg());
    *sched = l.n;
    for (int i = 0; i < l.n; i++) {
        cr_assert_neq(l.status[i], PL_RUN_FAILED, "%s failed", l.ids[i]);
        if (!ended(l.status[i]))
            return false;
    }
    return true;
}

/* ---- the runs' ends -------------------------------------------------------- */

/* The result a run of @p n that is never killed gets (NULL: cancelled). */
static cJSON *expected_result(int n)
{
    cJSON *r = NULL;
    if (n == 100)
        cr_assert_eq(pl_json_pack(&r, "{s:i, s:s, s:i, s:i, s:b, s:s}", "order",
                                  100, "status", "done", "paid", 7, "rounds", 1,
                                  "dup", 0, "note", NOTE),
                     PL_OK);
    else if (kind_of(n) == EXPIRED)
        cr_assert_eq(pl_json_pack(&r, "{s:i, s:s}", "order", n, "status",
                                  "expired"),
                     PL_OK);
    else if (kind_of(n) != CANCELLED)
        cr_assert_eq(pl_json_pack(&r, "{s:i, s:s, s:i, s:i, s:b, s:s}", "order",
                                  n, "status", "done", "paid", amount_of(n),
                                  "rounds", rounds_of(n), "dup", 0, "note",
                                  NOTE),
                     PL_OK);
    return r;
}

/* Check a chain's last run: its status and result. */
static void check_end(pl_engine *e, const char *tail, int n)
{
    cJSON *want = expected_result(n);
    pl_run_status s = status_of(e, tail);
    if (!want) {
        cr_expect_eq(s, PL_RUN_CANCELLED, "%s: status %d, not cancelled", tail,
                     (int)s);
        return;
    }
    cr_assert_eq(s, PL_RUN_COMPLETED, "%s: status %d", tail, (int)s);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, tail, NULL), PL_OK, "%s: %s", tail,
                 pl_errmsg());
    cr_assert_eq(o->calls_executed, 0, "%s: its replay executed calls", tail);
    char *got = t_text(pl_outcome_result(o));
    char *exp = t_text(want);
    cr_expect(cJSON_Compare(pl_outcome_result(o), want, true),
              "%s ended %s, a run never killed ends %s", tail, got, exp);
    free(got);
    free(exp);
    pl_outcome_free(o);
    cJSON_Delete(want);
}

/* ---- retention -------------------------------------------------------------- */

typedef struct doomed {
    char ids[128][PL_MAX_RUN_ID + 1];
    int n;
} doomed;

#define RETAIN_STATUSES ((1u << PL_RUN_CONTINUED) | (1u << PL_RUN_CANCELLED))

static int visit_doomed(const pl_run_info *info, void *user)
{
    doomed *d = user;
    if (!(RETAIN_STATUSES & (1u << info->status)))
        return 0;
    cr_assert_lt(d->n, 128);
    snprintf(d->ids[d->n++], sizeof d->ids[0], "%s", info->id);
    return 0;
}

static int kill_at_second(const pl_run_info *info, void *user)
{
    (void)info;
    int *seen = user;
    if (++*seen == 2)
        kill(getpid(), SIGKILL);
    return 0;
}

static void prune(pl_engine *e, uint64_t *deleted)
{
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    po.statuses = RETAIN_STATUSES;
    po.batch = 1;
    cr_assert_eq(pl_engine_prune(e, &po, deleted), PL_OK, "%s", pl_errmsg());
}

/* ---- the tools of a shell ---------------------------------------------------- */

static int run_tool(const char *out, const char *const argv[])
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        FILE *f = freopen(out, "w", stdout);
        if (!f || dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) == -1 && errno == EINTR)
        ;
    cr_assert(WIFEXITED(ws), "%s died of signal %d", argv[0], WTERMSIG(ws));
    return WEXITSTATUS(ws);
}

/* The lines of file @p path (0 when there is none). */
static long lines_of(const char *path)
{
    FILE *f = fopen(path, "r");
    long n = 0;
    int c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert(f);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ---- the test ------------------------------------------------------------------ */

Test(workflow, orders_with_workers_killed_at_every_stride_th_boundary,
     .timeout = 600)
{
    const char *dir = t_tmpdir();
    char store[4300], out[4300];
    t_store_in(store, sizeof store, dir, "orders.db");
    snprintf(g_fx, sizeof g_fx, "%s/effects", dir);
    snprintf(g_kills, sizeof g_kills, "%s/kills", dir);
    snprintf(g_lapses, sizeof g_lapses, "%s/lapses", dir);
    snprintf(out, sizeof out, "%s/tool.out", dir);
    cr_assert_eq(setenv("WORKFLOW_FX", g_fx, 1), 0);
    char script[4300], served[4400];
    snprintf(script, sizeof script, "%s/model.json", dir);
    snprintf(served, sizeof served, "%s.served", script);
    FILE *sf = fopen(script, "w");
    cr_assert(sf);
    fprintf(sf, "{\"responses\": [{\"text\": \"" NOTE "\"}]}\n");
    cr_assert_eq(fclose(sf), 0);
    cr_assert_eq(setenv("WORKFLOW_SCRIPT", script, 1), 0);
    char mcp_dir[4300], mcp_log[4400], spec[9000], mcp_arg[9100];
    snprintf(mcp_dir, sizeof mcp_dir, "%s/mcp", dir);
    snprintf(mcp_log, sizeof mcp_log, "%s/log", mcp_dir);
    cr_assert_eq(mkdir(mcp_dir, 0700), 0);
    snprintf(spec, sizeof spec,
             "stdio:python3 " PL_TEST_SRC_DIR "/mcp_fake_server.py ok %s",
             mcp_dir);
    snprintf(mcp_arg, sizeof mcp_arg, WORKFLOW_MCP_NAME "=%s", spec);
    cr_assert_eq(setenv("WORKFLOW_MCP", spec, 1), 0);
    cr_assert_eq(unsetenv("WORKFLOW_VERSION"), 0);
    /* calls long enough for the runs of the key to meet in them */
    cr_assert_eq(setenv("WORKFLOW_TOOL_MS", "40", 1), 0);
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(workflow_register(reg), PL_OK, "%s", pl_errmsg());
    pl_mcp *mcp = NULL;
    cr_assert_eq(workflow_register_mcp(&mcp, reg), PL_OK, "%s", pl_errmsg());
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_SYNC;
    o.lease_ms = LEASE_MS;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    for (int n = 0; n < ORDERS; n++)
        submit_order(e, n);
    put_schedule(e);

    pid_t w[WORKERS];
    death d[MAX_LIVES];
    int nd = 0, lives = 0, kills = 0;
    for (int i = 0; i < WORKERS; i++)
        w[i] = spawn_worker(store, next_kill(&lives, 0));
    bool schedule_on = true, done = false, cancelled[ORDERS] = {false};
    int sched = 0;
    long long t0 = now_ns();
    for (int iter = 0; !done; iter++) {
        nap_ms(20);
        /* a bound that tells a hang from a slow host: the runs end in
         * 60 to 180 s on a busy 2-CPU host (a PostgreSQL server and
         * other suites beside them), well before the test's 600 s */
        cr_assert_lt(now_ns() - t0, 420000000000LL,
                     "the runs did not end in 420 s");
        for (int i = 0; i < WORKERS; i++) {
            int ws = 0;
            pid_t r = waitpid(w[i], &ws, WNOHANG);
            if (r != w[i])
                continue;
            cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
                      "a worker exited %d", WEXITSTATUS(ws));
            cr_assert_lt(nd, MAX_LIVES);
            d[nd++] = (death){(long)w[i], now_ns(), true};
            kills++;
            w[i] = spawn_worker(store, next_kill(&lives, kills));
            if (kills == UPGRADE_AT)
                deploy(w, d, &nd, store, &lives, kills);
        }
        bool sent_all = true;
        for (int n = 0; n < ORDERS; n++) {
            char id[32];
            snprintf(id, sizeof id, "order-%d", n);
            int when = 3 + 4 * n;
            if (kind_of(n) == CANCELLED && n != 3) {
                /* the others once they wait: continued here, or by a
                 * worker once the key has room */
                if (cancelled[n])
                    continue;
                if (status_of(e, id) != PL_RUN_WAITING) {
                    sent_all = false;
                    continue;
                }
                cancelled[n] = true;
                when = iter;
            }
            sent_all = sent_all && iter > when;
            if (iter != when)
                continue;
            if (kind_of(n) == CANCELLED) {
                cr_assert_eq(pl_run_cancel(e, id, "the customer cancelled"),
                             PL_OK, "%s: %s", id, pl_errmsg());
            } else if (kind_of(n) != EXPIRED) {
                cJSON *p = NULL;
                cr_assert_eq(pl_json_pack(&p, "{s:i}", "amount", amount_of(n)),
                             PL_OK);
                cr_assert_eq(pl_run_signal(NULL, e, id, "payment", p), PL_OK,
                             "%s: %s", id, pl_errmsg());
                cJSON_Delete(p);
            }
        }
        done = all_ended(e, &sched) && sent_all && sched >= 2;
        if (schedule_on && sched >= 2) {
            cr_assert_eq(pl_schedule_delete(e, SCHEDULE), PL_OK, "%s",
                         pl_errmsg());
            schedule_on = false;
            done = false; /* look once more: a tick may have fired */
        }
    }
    for (int i = 0; i < WORKERS; i++) {
        kill(w[i], SIGKILL);
        while (waitpid(w[i], NULL, 0) == -1 && errno == EINTR)
            ;
        d[nd++] = (death){(long)w[i], now_ns(), false};
    }
    double secs = (double)(now_ns() - t0) / 1e9;

    /* every run ended as a run never killed ends */
    doomed all = {.n = 0};
    int expect_keys = 0;
    for (int n = 0; n < ORDERS; n++) {
        char id[32];
        snprintf(id, sizeof id, "order-%d", n);
        int links;
        char *tail = tail_of(e, id, &links);
        cr_expect_eq(links, kind_of(n) <= PAID1 ? rounds_of(n) : 1,
                     "%s: %d links", id, links);
        check_end(e, tail, n);
        free(tail);
        expect_keys += kind_of(n) <= PAID1 ? 4 * rounds_of(n) : 1;
    }
    run_list sl = {.n = 0};
    cr_assert_eq(pl_engine_runs(e, visit_scheduled, &sl), PL_OK);
    for (int i = 0; i < sl.n; i++)
        check_end(e, sl.ids[i], 100);
    expect_keys += 4 * sl.n;

    /* every run verifies; the rate limit held in every window */
    walk *wk = calloc(1, sizeof *wk);
    cr_assert(wk);
    wk->e = e;
    doomed *runs = calloc(1, sizeof *runs);
    cr_assert(runs);
    cr_assert_eq(pl_engine_runs(e, visit_doomed, runs), PL_OK);
    for (int n = 0; n < ORDERS; n++) {
        char id[32];
        snprintf(id, sizeof id, "order-%d", n);
        for (int r = 0; r < rounds_of(n); r++) {
            char link[48];
            if (r)
                snprintf(link, sizeof link, "%s~%d", id, r);
            else
                snprintf(link, sizeof link, "%s", id);
            if (kind_of(n) > PAID1 && r)
                break;
            snprintf(all.ids[all.n++], sizeof all.ids[0], "%s", link);
        }
    }
    for (int i = 0; i < sl.n; i++)
        snprintf(all.ids[all.n++], sizeof all.ids[0], "%s", sl.ids[i]);
    for (int i = 0; i < all.n; i++) {
        cr_expect_eq(pl_run_verify(e, all.ids[i]), PL_OK, "%s: %s", all.ids[i],
                     pl_errmsg());
        wk->run = all.ids[i];
        wk->version = 0;
        wk->reserved = wk->invoiced_first = false;
        wk->steps = 0;
        cr_assert_eq(pl_run_walk(e, all.ids[i], wf_visit_step, wk), PL_OK,
                     "%s: %s", all.ids[i], pl_errmsg());
        /* each run took the branch its version point recorded */
        cr_expect(wk->version || !wk->steps, "%s: no version recorded",
                  all.ids[i]); /* none: cancelled before it started */
        if (wk->reserved) {
            cr_expect_eq(wk->invoiced_first, wk->version == 2,
                         "%s: version %d, invoiced %s the fan-out", all.ids[i],
                         wk->version, wk->invoiced_first ? "before" : "after");
            wk->runs_of[wk->version]++;
        }
    }
    cr_expect_leq(wk->worst, WORKFLOW_RATE_LIMIT,
                  "%d charges admitted in one window of %d ms", wk->worst,
                  WORKFLOW_RATE_WINDOW_MS);

    /* the effects: none lost, none twice but a call in flight at a kill */
    static lapse lp[256];
    int nl = 0;
    FILE *lf = fopen(g_lapses, "r");
    char lline[600];
    while (lf && nl < 256 && fgets(lline, sizeof lline, lf)) {
        int at = 0;
        if (sscanf(lline, "%ld %128s %n", &lp[nl].pid, lp[nl].run, &at) < 2)
            continue;
        snprintf(lp[nl].why, sizeof lp[nl].why, "%.*s",
                 (int)strcspn(lline + at, "\n"), lline + at);
        fprintf(stderr, "workflow: lapse: %ld %s %s\n", lp[nl].pid, lp[nl].run,
                lp[nl].why);
        nl++;
    }
    if (lf)
        fclose(lf);
    effects fx = {0};
    fx_read(&fx, g_fx, d, nd, lp, nl);
    int keys = 0, repeated = 0;
    for (size_t i = 0; i < fx.nx; i++) {
        size_t last = i;
        bool first = true;
        for (size_t j = 0; j < fx.nx; j++) {
            if (strcmp(fx.x[j].key, fx.x[i].key))
                continue;
            first = first && j >= i;
            last = j;
        }
        if (!first)
            continue;
        keys++;
        for (size_t j = i; j < last; j++) {
            if (strcmp(fx.x[j].key, fx.x[i].key))
                continue;
            repeated++;
            char run[PL_MAX_RUN_ID + 1];
            snprintf(run, sizeof run, "%.*s", (int)strcspn(fx.x[j].key, "/"),
                     fx.x[j].key);
            cr_expect(fx_died_mid(d, nd, fx.x[j].pid) ||
                          fx_lapsed(lp, nl, fx.x[j].pid, run),
                      "%s (%s) ran again after process %ld ran it, which "
                      "was not killed, kept its lease and did not stop",
                      fx.x[i].key, fx.x[i].tool, fx.x[j].pid);
        }
        /* the call's result in its caller's ledger is the last
         * execution's: none ran after its result was recorded */
        long long rec = wf_result_us(e, fx.x[last].key) * 1000LL;
        long long st = fx_started_ns(g_fx, fx.x[last].key, fx.x[last].pid);
        cr_expect_geq(rec + 100000000LL, st,
                      "%s: its result was recorded %lld ms before its "
                      "last execution began",
                      fx.x[last].key, (st - rec) / 1000000);
    }
    cr_expect_eq(keys, wk->tool_calls, "%d calls made, the ledgers hold %d",
                 keys, wk->tool_calls);
    cr_expect(keys <= expect_keys && keys >= expect_keys - ORDERS / 4,
              "%d calls made, the runs make %d (and a release for each "
              "order cancelled once it waited)",
              keys, expect_keys);

    /* the key's limit held whenever a tool was inside a call */
    int most = fx_most_inside(&fx);
    cr_expect_leq(most, KEY_LIMIT, "%d runs of the key inside calls at once",
                  most);
    cr_expect_geq(most, 1);

    /* retention: continued and cancelled runs, its process killed midway */
    uint64_t deleted = 0, before_kill = 0;
    fflush(NULL);
    pid_t pr = fork();
    cr_assert_neq(pr, -1);
    if (pr == 0) {
        pl_engine *pe = NULL;
        if (pl_engine_open(&pe, store, reg, &o))
            _exit(10);
        int seen = 0;
        pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
        po.statuses = RETAIN_STATUSES;
        po.batch = 1;
        po.before = kill_at_second;
        po.user = &seen;
        (void)pl_engine_prune(pe, &po, NULL);
        _exit(11);
    }
    t_expect_killed(pr, "at the second run it would delete");
    doomed *left = calloc(1, sizeof *left);
    cr_assert(left);
    cr_assert_eq(pl_engine_runs(e, visit_doomed, left), PL_OK);
    before_kill = (uint64_t)(runs->n - left->n);
    cr_expect_eq(before_kill, 1, "the killed prune deleted %llu runs",
                 (unsigned long long)before_kill);
    prune(e, &deleted);
    cr_expect_eq(deleted + before_kill, (uint64_t)runs->n,
                 "retention deleted %llu of the %d runs its rule names",
                 (unsigned long long)(deleted + before_kill), runs->n);
    for (int i = 0; i < runs->n; i++) {
        pl_run_info *ri = NULL;
        cr_expect_eq(pl_run_get(&ri, e, runs->ids[i]), PL_ENOTFOUND,
                     "%s is still there", runs->ids[i]);
        pl_run_info_free(ri);
        pl_tombstone tb = PL_TOMBSTONE_INIT;
        cr_expect_eq(pl_run_tombstone(&tb, e, runs->ids[i]), PL_OK, "%s: %s",
                     runs->ids[i], pl_errmsg());
        cr_expect(RETAIN_STATUSES & (1u << tb.status), "%s: tombstone of %d",
                  runs->ids[i], (int)tb.status);
    }
    int kept = 0;
    for (int i = 0; i < all.n; i++) {
        bool gone = false;
        for (int k = 0; k < runs->n; k++)
            gone = gone || !strcmp(all.ids[i], runs->ids[k]);
        if (gone)
            continue;
        kept++;
        cr_expect_eq(status_of(e, all.ids[i]), PL_RUN_COMPLETED, "%s",
                     all.ids[i]);
    }
    cr_expect_eq(kept + runs->n, all.n);

    /* the operator's tools agree */
    const char *dump[] = {PL_TEST_BIN_DIR "/tools/ledger-dump", store,
                          "--verify", NULL};
    long model_calls = lines_of(served);
    /* each note asked once, but one in flight at a kill (a worker runs
     * two at most) */
    cr_expect(model_calls >= wk->notes &&
                  model_calls <= wk->notes + 2 * (kills + WORKERS),
              "%ld model answers for %d notes, %d kills", model_calls,
              wk->notes, kills);
    int x = run_tool(out, dump);
    cr_expect_eq(x, 0, "ledger-dump --verify exited %d:\n%s", x, slurp(out));
    int crm_keys, crm_calls, crm_checked;
    fx_mcp_calls(mcp_log, &crm_keys, &crm_calls);
    const char *replay[] = {PL_TEST_BIN_DIR "/tools/ledger-replay",
                            store,
                            "--plugin",
                            WORKFLOW_PLUGIN,
                            "--mcp",
                            mcp_arg,
                            "--check",
                            NULL};
    x = run_tool(out, replay);
    cr_expect_eq(x, 0, "ledger-replay --check exited %d:\n%s", x, slurp(out));
    cr_expect_eq(lines_of(served), model_calls,
                 "ledger-replay --check asked the model again");
    int unused;
    fx_mcp_calls(mcp_log, &unused, &crm_checked);
    cr_expect_eq(crm_checked, crm_calls,
                 "ledger-replay --check called the MCP tool again");
    /* the MCP tool: each call made, once but in flight at a kill */
    cr_expect_eq(crm_keys, wk->crm,
                 "the MCP server heard %d calls, the "
                 "ledgers hold %d",
                 crm_keys, wk->crm);
    cr_expect_leq(crm_calls - crm_keys, 2 * (kills + WORKERS),
                  "%d MCP calls made again, %d kills", crm_calls - crm_keys,
                  kills);

    /* where the kills struck: the boundaries by kind */
    char where[32][64];
    int times[32], n_where = 0;
    FILE *kf = fopen(g_kills, "r");
    char line[256];
    while (kf && fgets(line, sizeof line, kf)) {
        line[strcspn(line, "\n")] = '\0';
        const char *kind = line + strcspn(line, " ");
        kind += *kind == ' ';
        int k = 0;
        while (k < n_where && strcmp(where[k], kind))
            k++;
        if (k == n_where && n_where < 32) {
            snprintf(where[k], sizeof where[k], "%s", kind);
            times[n_where++] = 0;
        }
        if (k < n_where)
            times[k]++;
    }
    if (kf)
        fclose(kf);
    fprintf(stderr,
            "workflow (%s): %d orders, %d scheduled runs, %.1f s, %d kills; "
            "at a boundary:",
            t_on_pg() ? "postgresql" : "lmdb", ORDERS, sl.n, secs, kills);
    for (int k = 0; k < n_where; k++)
        fprintf(stderr, "%s %s %d", k ? "," : "", where[k], times[k]);
    fprintf(stderr, "\n");
    fprintf(stderr,
            "workflow: %d calls, %d run again after a kill, a lease lost "
            "or a stop (%d); at most "
            "%d runs of the key in calls at once; at most %d charges a "
            "window (%d takes, %d refused); %d runs pruned; runs by version: "
            "%d v1, %d v2; %ld model answers; %d MCP calls (%d keys)\n",
            keys, repeated, nl, most, wk->worst, wk->takes, wk->refused,
            runs->n, wk->runs_of[1], wk->runs_of[2], model_calls, crm_calls,
            crm_keys);
    free(fx.x);
    free(fx.ev);
    free(wk);
    free(runs);
    free(left);
    pl_engine_close(e);
    pl_mcp_close(mcp);
    pl_registry_free(reg);
}
