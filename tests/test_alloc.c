/*
 * test_alloc.c -- failing allocations: the n-th allocation of a whole run
 * fails, for every n.
 *
 * This binary is linked with -Wl,--wrap for malloc, calloc, realloc and
 * free (tests/CMakeLists.txt), so every allocation the library's own code
 * makes goes through the wrappers (support_wrap.c), which ask
 * t_alloc_fails() below; cJSON's go through it too, by
 * cJSON_InitHooks.  (LMDB, OpenSSL and libc allocate inside their own
 * shared objects, out of its reach.)
 *
 * The scenario is one whole run: a registry, an engine on a new store, a
 * run that calls "pay" three times, reads the clock and asks a human
 * (suspends); the run's record read, the run resumed (a replay up to the
 * question, then it completes), continued again (a replay that executes
 * nothing), verified, walked, read and listed; then everything closed.  A first child counts its allocations, N.
 * Then for every n in 1..N a child runs it with the n-th allocation failing
 * (only that one): the call that meets it must return a status with a
 * message (PL_ENOMEM, or a clean error), never crash.  The child then
 * closes and frees everything, checks that what was allocated is freed
 * (the wrapper's count; LeakSanitizer too under the sanitizers), and with
 * allocation restored opens the store again and finishes the run: it
 * verifies, completes with the right result, and each payment was made
 * once (one may be made twice: the call in flight when its result could
 * not be made durable, which the engine re-runs by design).
 *
 * To look at one: PL_ALLOC_AT=n runs only the n-th, and PL_ALLOC_BT=1
 * prints where the failing allocation was made.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"
#include "support_wrap.h"

/* ---- which allocation fails (support_wrap.c's wrappers ask) -------------- */

static bool g_armed;   /* counting (and failing) */
static long g_count;   /* allocations while armed */
static long g_fail_at; /* this one fails; 0: none */
static bool g_failed;  /* the n-th has failed */

bool t_alloc_fails(void)
{
    if (!g_armed)
        return false;
    if (++g_count != g_fail_at)
        return false;
    g_failed = true;
    if (getenv("PL_ALLOC_BT")) { /* where it fails, to look at it */
        void *frames[64];
        backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    }
    return true;
}

/* ---- the policies -------------------------------------------------------- */

static int g_paid[3]; /* payments made, by number */

static int pay(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int n = -1;
    int st = pl_json_unpack(a->payload, "{s:i}", "n", &n);
    if (st || n < 0 || n > 2)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "bad n");
    g_paid[n]++;
    return pl_steps_add_resultf(out, "{s:i}", "receipt", 100 + n);
}

static int flow(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int total = 0;
    for (int i = 0; i < 3; i++) {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, "pay", "{s:i}", "n", i);
        int receipt = 0;
        if (!st)
            st = pl_json_unpack(r, "{s:i}", "receipt", &receipt);
        cJSON_Delete(r);
        if (st)
            return st;
        total += receipt;
    }
    int64_t now = 0;
    int st = pl_ctx_now(&now, ctx);
    cJSON *answer = NULL;
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "approve", "{s:i}", "total", total);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:i, s:O}", "total", total, "answer",
                                  answer);
    cJSON_Delete(answer);
    return st;
}

/* ---- one child ----------------------------------------------------------- */

typedef struct world {
    pl_registry *reg;
    pl_engine *e;
} world;

static void world_close(world *w)
{
    pl_engine_close(w->e);
    pl_registry_free(w->reg);
    w->e = NULL;
    w->reg = NULL;
}

static int world_open(world *w, const char *path)
{
    int st = pl_registry_new(&w->reg);
    if (!st)
        st = pl_registry_add_fn(w->reg, "flow", flow, NULL);
    if (!st)
        st = pl_registry_add_fn(w->reg, "pay", pay, NULL);
    if (!st)
        st = pl_registry_add_human(w->reg, "approve");
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    if (!st)
        st = pl_engine_open(&w->e, path, w->reg, &o);
    return st;
}

static int count_step(const pl_step *s, void *user)
{
    (void)s;
    (*(int *)user)++;
    return 0;
}

static int count_run(const pl_run_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

/* The scenario; stops at the first call that fails and returns its status. */
static int scenario(world *w, const char *path)
{
    int st = world_open(w, path);
    if (st)
        return st;
    cJSON *p = NULL;
    if ((st = pl_json_pack(&p, "{}")))
        return st;
    pl_action a = {PL_ACTION_VERSION, "flow", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "r";
    pl_outcome *o = NULL;
    st = pl_run_start(&o, w->e, &a, &ro);
    cJSON_Delete(p);
    char token[64] = "";
    if (!st && o->status != PL_RUN_SUSPENDED)
        st = PL_ESTATE;
    if (!st)
        snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome_free(o);
    o = NULL;
    pl_run_info *info = NULL;
    if (!st && !(st = pl_run_get(&info, w->e, "r")) &&
        (!info->resume_token || strcmp(info->resume_token, token) != 0))
        st = PL_ESTATE;
    pl_run_info_free(info);
    cJSON *yes = NULL;
    if (!st)
        st = pl_json_pack(&yes, "{s:b}", "ok", 1);
    if (!st && !(st = pl_run_resume(&o, w->e, "r", token, yes)) &&
        o->status != PL_RUN_COMPLETED)
        st = PL_ESTATE;
    cJSON_Delete(yes);
    pl_outcome_free(o);
    o = NULL;
    if (!st && !(st = pl_run_continue(&o, w->e, "r", NULL)) &&
        o->status != PL_RUN_COMPLETED)
        st = PL_ESTATE;
    pl_outcome_free(o);
    int n = 0;
    if (!st)
        st = pl_run_verify(w->e, "r");
    if (!st)
        st = pl_run_walk(w->e, "r", count_step, &n);
    pl_steps *steps = NULL;
    if (!st)
        st = pl_run_ledger(&steps, w->e, "r", "0");
    pl_steps_free(steps);
    if (!st)
        st = pl_engine_runs(w->e, count_run, &n);
    return st;
}

/* With allocation restored: finish the run and check it. */
static bool finish(const char *path, char *why, size_t wn)
{
    world w = {0};
    int st = world_open(&w, path);
    if (st) {
        snprintf(why, wn, "reopening: %s", pl_errmsg());
        world_close(&w);
        return false;
    }
    pl_outcome *o = NULL;
    char token[64] = "";
    for (int round = 0; round < 4 && !st; round++) {
        pl_outcome_free(o);
        o = NULL;
        if (token[0]) {
            cJSON *yes = cJSON_CreateObject();
            cJSON_AddTrueToObject(yes, "ok");
            st = pl_run_resume(&o, w.e, "r", token, yes);
            cJSON_Delete(yes);
        } else {
            pl_run_info *info = NULL;
            if (pl_run_get(&info, w.e, "r") == PL_OK && info->resume_token)
                snprintf(token, sizeof token, "%s", info->resume_token);
            pl_run_info_free(info);
            if (token[0])
                continue;
            st = pl_run_continue(&o, w.e, "r", NULL);
            if (st == PL_ENOTFOUND) { /* failed before the run was made */
                cJSON *p = cJSON_CreateObject();
                pl_action a = {PL_ACTION_VERSION, "flow", p, NULL, 0, NULL};
                pl_run_options ro = PL_RUN_OPTIONS_INIT;
                ro.run_id = "r";
                st = pl_run_start(&o, w.e, &a, &ro);
                cJSON_Delete(p);
            }
        }
        if (st || o->status != PL_RUN_SUSPENDED)
            break;
        snprintf(token, sizeof token, "%s", o->resume_token);
    }
    bool ok = false;
    const cJSON *res = NULL;
    if (st)
        snprintf(why, wn, "finishing the run: %s", pl_errmsg());
    else if (o->status != PL_RUN_COMPLETED)
        snprintf(why, wn, "the run ended %s: %s", pl_run_status_name(o->status),
                 o->reason ? o->reason : "(no reason)");
    else if (!(res = pl_step_payload(pl_steps_at(o->steps,
                                                 pl_steps_count(o->steps) -
                                                     1))) ||
             cJSON_GetObjectItemCaseSensitive(res, "total")->valueint != 303)
        snprintf(why, wn, "the run completed with a wrong result");
    else if ((st = pl_run_verify(w.e, "r")))
        snprintf(why, wn, "the store does not verify: %s", pl_errmsg());
    else {
        int twice = 0;
        ok = true;
        for (int i = 0; i < 3; i++) {
            if (g_paid[i] < 1 || g_paid[i] > 2)
                ok = false;
            twice += g_paid[i] == 2;
        }
        if (!ok || twice > 1)
            snprintf(why, wn, "payments made %d, %d, %d times", g_paid[0],
                     g_paid[1], g_paid[2]);
        ok = ok && twice <= 1;
    }
    pl_outcome_free(o);
    world_close(&w);
    return ok;
}

static void *hook_malloc(size_t n) { return __wrap_malloc(n); }
static void hook_free(void *p) { __wrap_free(p); }

/*
 * Exit codes: 0 passed, 1 failed (a line on stderr says why).  With
 * @p fail_at 0, writes the number of allocations to @p report.
 */
static void child(long fail_at, int report)
{
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    char path[4200];
    snprintf(path, sizeof path, "%s/store-%ld.db", t_tmpdir(), fail_at);

    world w = {0};
    t_alloc_live = 0;
    g_count = 0;
    g_fail_at = fail_at;
    g_armed = true;
    int st = scenario(&w, path);
    char msg[600];
    snprintf(msg, sizeof msg, "%s", st ? pl_errmsg() : "");
    world_close(&w);
    g_armed = false;
    long live = t_alloc_live;

    char why[800] = "";
    if (st && (st >= 0 || !pl_strerror(st) || !msg[0] ||
               strcmp(msg, "no error") == 0))
        snprintf(why, sizeof why, "status %d with no clear message ('%s')", st,
                 msg);
    else if (st == PL_ESTATE)
        snprintf(why, sizeof why, "the run reached a wrong state: %s", msg);
    else if (fail_at && !g_failed)
        why[0] = '\0'; /* fewer allocations this time: nothing failed */
    else if (!fail_at && st)
        snprintf(why, sizeof why,
                 "the scenario fails with nothing failing: "
                 "%s",
                 msg);
    if (!why[0] && live != 0)
        snprintf(why, sizeof why,
                 "%ld allocations not freed after the failure (%s)", live,
                 msg[0] ? msg : "no error returned");
#ifdef PL_LSAN
    if (!why[0] && __lsan_do_recoverable_leak_check())
        snprintf(why, sizeof why, "LeakSanitizer found a leak (%s)", msg);
#endif
    if (!why[0] && !finish(path, why, sizeof why) && !why[0])
        snprintf(why, sizeof why, "finishing the run failed");
    if (report >= 0) {
        long n = g_count;
        if (write(report, &n, sizeof n) != (ssize_t)sizeof n)
            why[0] = why[0] ? why[0] : 'w';
    }
    t_cleanup();
    if (why[0]) {
        fprintf(stderr, "allocation %ld failing: %s\n", fail_at, why);
        _exit(1);
    }
    _exit(0);
}

static int run_child(long fail_at, int report)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        child(fail_at, report);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws)) {
        fprintf(stderr, "allocation %ld failing: killed by signal %d\n",
                fail_at, WTERMSIG(ws));
        return 1;
    }
    return WEXITSTATUS(ws);
}

/* PL_ALLOC_SHARD="k/N" takes the allocations n with n % N == k alone: the
 * suite runs the sweep as N tests (test_alloc_k), each a slice of it. */
Test(alloc, every_allocation_of_a_run_fails_in_turn, .timeout = 900)
{
    long shard, shards;
    t_slice("PL_ALLOC_SHARD", &shard, &shards);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(run_child(0, fds[1]), 0, "the scenario fails unprovoked");
    long total = 0;
    cr_assert_eq(read(fds[0], &total, sizeof total), (ssize_t)sizeof total);
    close(fds[0]);
    close(fds[1]);
    cr_assert_gt(total, 100, "the wrapper sees the run's allocations");
    printf("alloc: a whole run makes %ld allocations; each fails in turn "
           "(slice %ld of %ld)\n",
           total, shard, shards);
    fflush(stdout);
    long bad = 0, tried = 0, from = 1;
    const char *at = getenv("PL_ALLOC_AT"); /* one n alone, to look at it */
    if (at && *at) {
        from = total = strtol(at, NULL, 10);
        shards = 1;
        shard = 0;
    }
    for (long n = from; n <= total; n++)
        if (n % shards == shard) {
            bad += run_child(n, -1) != 0;
            tried++;
        }
    cr_assert_gt(tried, 0, "the slice holds no allocation");
    cr_assert_eq(bad, 0, "%ld of %ld failing allocations mishandled (above)",
                 bad, tried);
}
