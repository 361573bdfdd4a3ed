/*
 * bench_mcp.c -- pl-bench's mcp workload: a recorded MCP tool call
 * against a bare JSON-RPC round trip to the same server.
 *
 *   mcp            the reference server-everything over stdio (from npm,
 *                  installed into the build tree by tests/npm_setup.sh;
 *                  skipped, saying so, without it), its "echo" tool, one
 *                  copy of the server, registered with pl_mcp_register()
 *                  and spoken to both ways, in turn:
 *                  - bare: one tools/call, its params a cJSON tree, sent
 *                    and its answer read over the handle's own connection
 *                    (pl__mcp_rpc(): the request written, one send(), the
 *                    answer recv()ed and parsed), nothing recorded;
 *                  - engine: a recorded call of its echo in a run, process
 *                    durability (action_call, the mcp.tools capture, the
 *                    exchange, the result, the commit).
 *                  A run of a policy does both in rounds: MCP_ROUND bare
 *                  round trips back to back, then MCP_ROUND recorded
 *                  calls, each side's round led by one more call that is
 *                  not timed (the first after the other side's work, and
 *                  a run's first recorded call, which records the whole
 *                  tool list).  Each timed call timed on its own, and
 *                  this thread's CPU time read around a round's timed
 *                  calls.  The figure is the
 *                  ratio of the medians (the goal: at most 1.2).  Then,
 *                  after MCP_WARM more calls of each (untimed, in turn),
 *                  the same again: node's compiler has made the server
 *                  about 3x faster by then, so the engine's time per call
 *                  shows as a larger share.  Both phases report the
 *                  engine's time added to a call (the difference of the
 *                  medians), both figures again round by round (medians
 *                  over the rounds of a round's own), and the client's
 *                  CPU time a call on either side.  One server for both sides: its compiler warms
 *                  with both, so neither side meets a server warmer than
 *                  the other's (two copies warmed apart and swung the
 *                  ratio 1.0x-1.7x from run to run); the client's thread
 *                  and the server's main thread share one CPU
 *                  (pin_pair()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <policyledger_mcp.h>

#include "bench.h"
#include "mcp_int.h" /* pl__mcp_rpc(): the bare round trip */

#define EVERYTHING                                                             \
    PL_BENCH_NPM_DIR "/node_modules/@modelcontextprotocol/"                    \
                     "server-everything/dist/index.js"
#define MCP_CALLS 1000 /* timed, of each */
#define MCP_CALLS_QUICK 200
#define MCP_RUNS 20   /* a phase's runs */
#define MCP_ROUND 10  /* timed calls of a side in a row */
#define MCP_WARM 5000 /* calls of each between the two phases */

typedef struct mcp_phase {
    double bare_us, engine_us; /* medians of one call */
    double bare_p90_us, engine_p90_us;
    double cpu_us[2]; /* this thread's CPU time a call: bare, engine */
    double round_ratio, round_added_us; /* medians over the rounds of a
                                           round's engine / bare medians, and
                                           their difference */
} mcp_phase;

typedef struct mcp_res {
    mcp_phase first; /* the server's first calls */
    mcp_phase warm;  /* after MCP_WARM more of each */
} mcp_res;

/* What the runs of a phase time: each side's calls (us) and CPU time. */
typedef struct mcp_times {
    pl_mcp *m;    /* the server's handle */
    double *t[2]; /* bare, engine; NULL: not timed */
    int n[2];
    double cpu_s[2];
} mcp_times;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One echo as a bare JSON-RPC round trip over the handle's connection. */
static void bare_echo(pl_mcp *m)
{
    cJSON *p = NULL, *r = NULL, *e = NULL;
    char why[256];
    pl_json_pack(&p, "{s:s, s:{s:s}}", "name", "echo", "arguments", "message",
                 "bench");
    pthread_mutex_lock(&m->lock);
    int t = pl__mcp_rpc(m, "tools/call", p, pl__mcp_mono_ms() + 10000, &r, &e,
                        why, sizeof why);
    pthread_mutex_unlock(&m->lock);
    if (t != T_OK || !cJSON_GetObjectItemCaseSensitive(r, "content")) {
        fprintf(stderr, "pl-bench: mcp: bare: %s\n",
                t != T_OK ? why : "no content");
        _exit(1);
    }
    cJSON_Delete(r);
    cJSON_Delete(e);
}

/* Side @p k's call (0: bare, 1: recorded); its time into @p tm when
 * @p timed and the phase is timed. */
static int one_call(mcp_times *tm, int k, bool timed, pl_ctx *ctx,
                    const cJSON *args)
{
    double t0 = now_s();
    cJSON *r = NULL;
    int st = PL_OK;
    if (k == 0)
        bare_echo(tm->m);
    else
        st = pl_ctx_invoke(&r, ctx, "ev.echo", args);
    double t1 = now_s();
    cJSON_Delete(r);
    if (timed && tm->t[k])
        tm->t[k][tm->n[k]++] = (t1 - t0) * 1e6;
    return st;
}

/* {"n": N}: N timed calls of each side, in rounds that take turns, each
 * side's round led by a call not timed; this thread's CPU time read
 * before and after a round's timed calls. */
static int mcp_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    mcp_times *tm = u;
    int n = (int)cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valuedouble;
    cJSON *args = NULL;
    int st = pl_json_pack(&args, "{s:s}", "message", "bench");
    for (int done = 0; !st && done < n; done += MCP_ROUND) {
        int round = n - done < MCP_ROUND ? n - done : MCP_ROUND;
        for (int k = 0; !st && k < 2; k++) {
            st = one_call(tm, k, false, ctx, args);
            double c0 = cpu_s();
            for (int i = 0; !st && i < round; i++)
                st = one_call(tm, k, true, ctx, args);
            if (tm->t[k])
                tm->cpu_s[k] += cpu_s() - c0;
        }
    }
    cJSON_Delete(args);
    return st ? st : pl_steps_add_resultf(out, "{s:i}", "calls", n);
}

static void engine_run(pl_engine *e, int n, int k)
{
    char id[32];
    snprintf(id, sizeof id, "mcp-%d", k);
    cJSON *p = NULL;
    pl_json_pack(&p, "{s:i}", "n", n);
    pl_action root = PL_ACTION_INIT;
    root.policy = "mcp_root";
    root.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    if (pl_run_start(&o, e, &root, &ro) || o->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "pl-bench: mcp: run %s: %s\n", id,
                o && o->reason ? o->reason : pl_errmsg());
        _exit(1);
    }
    pl_outcome_free(o);
    cJSON_Delete(p);
}

/* MCP_RUNS runs of @p per_run calls of each side, every call timed; their
 * medians, p90s and CPU time a call. */
static void timed_phase(mcp_times *tm, pl_engine *e, int per_run, double *bt,
                        double *et, int *run, mcp_phase *ph)
{
    memset(tm->n, 0, sizeof tm->n);
    memset(tm->cpu_s, 0, sizeof tm->cpu_s);
    tm->t[0] = bt;
    tm->t[1] = et;
    for (int k = 0; k < MCP_RUNS; k++)
        engine_run(e, per_run, (*run)++);
    tm->t[0] = tm->t[1] = NULL;
    for (int i = 0; i < 2; i++)
        ph->cpu_us[i] = tm->n[i] ? tm->cpu_s[i] / tm->n[i] * 1e6 : 0;
    /* round by round: the two sides' calls of a round are neighbours in
     * time, so the host's and the server's drift cancel in their ratio */
    int rounds = tm->n[0] / MCP_ROUND;
    double *rr = calloc((size_t)rounds * 2 + 1, sizeof *rr), *ra = rr + rounds;
    if (!rr)
        die("mcp: out of memory");
    for (int k = 0; k < rounds; k++) {
        double b[MCP_ROUND], x[MCP_ROUND];
        memcpy(b, bt + k * MCP_ROUND, sizeof b);
        memcpy(x, et + k * MCP_ROUND, sizeof x);
        double mb = percentile(b, MCP_ROUND, 0.5);
        double me = percentile(x, MCP_ROUND, 0.5);
        rr[k] = me / mb;
        ra[k] = me - mb;
    }
    ph->round_ratio = percentile(rr, (size_t)rounds, 0.5);
    ph->round_added_us = percentile(ra, (size_t)rounds, 0.5);
    free(rr);
    ph->bare_us = percentile(bt, (size_t)tm->n[0], 0.5);
    ph->bare_p90_us = percentile(bt, (size_t)tm->n[0], 0.9);
    ph->engine_us = percentile(et, (size_t)tm->n[1], 0.5);
    ph->engine_p90_us = percentile(et, (size_t)tm->n[1], 0.9);
}

/*
 * This thread and the server's main thread (@p server: its id is the
 * process's) on one CPU, the server's other threads (its compiler's, its
 * collector's, started already) left where they were: each request's
 * wake-up hands the CPU over, as it mostly does unpinned.  Unpinned, a
 * phase now and then ran with the server woken on the other CPU: both
 * sides' round trips 3x slower for the whole phase.
 */
static void pin_pair(pid_t server)
{
    int cpu = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu >= 0 ? cpu : 0, &one);
    if (sched_setaffinity(0, sizeof one, &one) ||
        sched_setaffinity(server, sizeof one, &one))
        say("  (not pinned to one CPU: %s)\n", strerror(errno));
}

static void mcp_child(const void *varg, void *vres)
{
    int calls = *(const int *)varg, per_run = calls / MCP_RUNS;
    mcp_res *r = vres;
    char path[1100], errlog[1200];
    path_in(path, sizeof path, "mcp.db");
    remove_store(path);
    snprintf(errlog, sizeof errlog, "%s.stderr", path);
    static mcp_times tm;
    pl_registry *reg = NULL;
    pl_mcp_options mo = PL_MCP_OPTIONS_INIT;
    mo.stderr_path = errlog;
    if (pl_registry_new(&reg) ||
        pl_registry_add_fn(reg, "mcp_root", mcp_root, &tm) ||
        pl_mcp_register(&tm.m, reg, "ev", "stdio:node " EVERYTHING " stdio",
                        &mo))
        die("mcp: registry");
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    pin_pair(tm.m->pid);
    double *bt = calloc((size_t)calls, sizeof *bt);
    double *et = calloc((size_t)calls, sizeof *et);
    if (!bt || !et)
        die("mcp: out of memory");
    /* a warm-up run, then the timed ones */
    int run = 0;
    engine_run(e, per_run, run++);
    timed_phase(&tm, e, per_run, bt, et, &run, &r->first);
    /* the server's compiler warm: as many calls of each, untimed */
    for (int done = 0; done < MCP_WARM; done += MCP_WARM / 10)
        engine_run(e, MCP_WARM / 10, run++);
    timed_phase(&tm, e, per_run, bt, et, &run, &r->warm);
    free(bt);
    free(et);
    pl_engine_close(e);
    pl_mcp_close(tm.m);
    pl_registry_free(reg);
    remove_store(path);
    unlink(errlog);
}

/* A phase's figures into @p o, each key prefixed with @p prefix. */
static void phase_json(cJSON *o, const char *prefix, const mcp_phase *ph)
{
    const struct {
        const char *key;
        double v;
    } f[] = {
        {"engine_call_us", ph->engine_us},
        {"engine_call_p90_us", ph->engine_p90_us},
        {"bare_call_us", ph->bare_us},
        {"bare_call_p90_us", ph->bare_p90_us},
        {"added_us", ph->engine_us - ph->bare_us},
        {"engine_cpu_us", ph->cpu_us[1]},
        {"bare_cpu_us", ph->cpu_us[0]},
        {"ratio", ph->engine_us / ph->bare_us},
        {"round_ratio", ph->round_ratio},
        {"round_added_us", ph->round_added_us},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        char k[64];
        snprintf(k, sizeof k, "%s%s", prefix, f[i].key);
        jnum(o, k, f[i].v);
    }
}

int report_mcp(bool quick)
{
    int calls = quick ? MCP_CALLS_QUICK : MCP_CALLS;
    say("\nmcp: a recorded MCP tool call (server-everything's echo over "
        "stdio, process\n  mode) vs a bare JSON-RPC round trip to the same "
        "server process, in rounds\n  of %d that take turns; %d of each\n",
        MCP_ROUND, calls);
    if (access(EVERYTHING, R_OK) != 0) {
        say("  skipped: %s is not installed (the suite's mcp_setup, "
            "tests/npm_setup.sh, installs it)\n",
            EVERYTHING);
        cJSON_AddStringToObject(g_json, "mcp", "skipped: no server-everything");
        return 0;
    }
    mcp_res r;
    if (in_child(mcp_child, &calls, &r, sizeof r)) {
        say("  failed\n");
        return 1;
    }
    say("  %-22s %12s %12s %12s\n", "", "median us", "p90 us", "ratio");
    cJSON *o = cJSON_AddObjectToObject(g_json, "mcp");
    jnum(o, "calls", calls);
    jnum(o, "warm_after", MCP_WARM);
    const mcp_phase *ph[2] = {&r.first, &r.warm};
    const char *names[2] = {"first calls", "warm server"};
    const char *keys[2] = {"", "warm_"};
    for (int i = 0; i < 2; i++) {
        double ratio = ph[i]->engine_us / ph[i]->bare_us;
        say("  %-22s %12.1f %12.1f %11.2fx\n", names[i], ph[i]->engine_us,
            ph[i]->engine_p90_us, ratio);
        say("  %-22s %12.1f %12.1f\n", "  bare", ph[i]->bare_us,
            ph[i]->bare_p90_us);
        say("  %-22s %12.1f\n", "  the engine adds",
            ph[i]->engine_us - ph[i]->bare_us);
        say("  %-22s %12.1f %25.2fx\n", "  round by round",
            ph[i]->round_added_us, ph[i]->round_ratio);
        say("  %-22s %12.1f %12s %12.1f\n", "  client CPU: engine",
            ph[i]->cpu_us[1], "bare", ph[i]->cpu_us[0]);
        phase_json(o, keys[i], ph[i]);
    }
    add_goal("mcp process: recorded call / bare JSON-RPC",
             r.first.engine_us / r.first.bare_us, "x", true, 1.2);
    return 0;
}
