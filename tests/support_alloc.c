/*
 * support_alloc.c -- the sweep of failing allocations (support_alloc.h).
 * Which allocation fails is counted here: t_alloc_fails(), which
 * support_wrap.c's wrappers ask.
 */
#define _GNU_SOURCE
#include "support_alloc.h"

#include <criterion/criterion.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"
#include "support_wrap.h"

/* atomic: a run's threads (a fan-out's, a heartbeat) allocate at once */
static _Atomic bool g_armed;  /* counting (and failing) */
static _Atomic long g_count;  /* allocations while armed */
static long g_fail_at;        /* this one fails; 0: none */
static _Atomic bool g_failed; /* the n-th has failed */

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

int t_paid[3];

int t_pay(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int n = -1;
    int st = pl_json_unpack(a->payload, "{s:i}", "n", &n);
    if (st || n < 0 || n > 2)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "bad n");
    t_paid[n]++;
    return pl_steps_add_resultf(out, "{s:i}", "receipt", 100 + n);
}

int t_world_open(t_world *w, const char *path, int (*add)(pl_registry *))
{
    int st = pl_registry_new(&w->reg);
    if (!st)
        st = add(w->reg);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    if (!st)
        st = pl_engine_open(&w->e, path, w->reg, &o);
    return st;
}

void t_world_close(t_world *w)
{
    pl_engine_close(w->e);
    pl_registry_free(w->reg);
    w->e = NULL;
    w->reg = NULL;
}

int t_run_status(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    int s = st ? -1 : (int)info->status;
    pl_run_info_free(info);
    return s;
}

static void *hook_malloc(size_t n) { return __wrap_malloc(n); }
static void hook_free(void *p) { __wrap_free(p); }

/*
 * Exit codes: 0 passed, 1 failed (a line on stderr says why).  With
 * @p fail_at 0, writes the number of allocations to @p report.
 */
static void child(const t_alloc_case *c, long fail_at, int report)
{
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    char path[4200];
    snprintf(path, sizeof path, "%s/store-%ld.db", t_tmpdir(), fail_at);

    t_alloc_live = 0;
    g_count = 0;
    g_fail_at = fail_at;
    g_armed = true;
    t_world w = {0};
    int st = c->scenario(&w, path);
    char msg[600];
    snprintf(msg, sizeof msg, "%s", st ? pl_errmsg() : "");
    t_world_close(&w);
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
        snprintf(why, sizeof why, "the scenario fails with nothing failing: %s",
                 msg);
    if (!why[0] && live != 0)
        snprintf(why, sizeof why,
                 "%ld allocations not freed after the failure (%s)", live,
                 msg[0] ? msg : "no error returned");
#ifdef PL_LSAN
    if (!why[0] && __lsan_do_recoverable_leak_check())
        snprintf(why, sizeof why, "LeakSanitizer found a leak (%s)", msg);
#endif
    if (!why[0] && !c->finish(path, why, sizeof why) && !why[0])
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

static int run_child(const t_alloc_case *c, long fail_at, int report)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        child(c, fail_at, report);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws)) {
        fprintf(stderr, "allocation %ld failing: killed by signal %d\n",
                fail_at, WTERMSIG(ws));
        return 1;
    }
    return WEXITSTATUS(ws);
}

void t_alloc_sweep(const t_alloc_case *c)
{
    long shard, shards;
    t_slice("PL_ALLOC_SHARD", &shard, &shards);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(run_child(c, 0, fds[1]), 0, "the scenario fails unprovoked");
    long total = 0;
    cr_assert_eq(read(fds[0], &total, sizeof total), (ssize_t)sizeof total);
    close(fds[0]);
    close(fds[1]);
    cr_assert_gt(total, 100, "the wrapper sees the scenario's allocations");
    printf("%s: %ld allocations; each fails in turn (slice %ld of %ld)\n",
           c->name, total, shard, shards);
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
            bad += run_child(c, n, -1) != 0;
            tried++;
        }
    cr_assert_gt(tried, 0, "the slice holds no allocation");
    cr_assert_eq(bad, 0, "%ld of %ld failing allocations mishandled (above)",
                 bad, tried);
}
