/*
 * bench_mcp.c -- pl-bench's mcp workload: a recorded MCP tool call
 * against a bare JSON-RPC round trip to the same server.
 *
 *   mcp            the reference server-everything over stdio (from npm,
 *                  installed into the build tree by tests/npm_setup.sh;
 *                  skipped, saying so, without it), its "echo" tool:
 *                  - bare: a minimal client in this process, the server a
 *                    child on a pipe pair, one tools/call written and its
 *                    answer read (cJSON both ways), as many times;
 *                  - engine: pl_mcp_register() on another copy of the
 *                    server, and a run of a policy that calls its echo that
 *                    many times, each a recorded call (action_call, the
 *                    mcp.tools capture, the result), process
 *                    durability.
 *                  Each call timed on its own, the two interleaved in
 *                  batches; the figure is the ratio of the medians (the
 *                  goal: at most 1.2).  Then, after MCP_WARM more calls of
 *                  each (untimed, interleaved), the same again: node's
 *                  compiler has made the server about 3x faster by then,
 *                  so the engine's time per call shows as a larger
 *                  share.  Both phases report the engine's time added to
 *                  a call (the difference of the medians), which does not
 *                  depend on the server's speed, and this process's CPU
 *                  time a call on either side (a batch's calls but its
 *                  first, which records the whole tool list), which a
 *                  busy host's other processes hardly change.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <policyledger_mcp.h>

#include "bench.h"

#define EVERYTHING                                                             \
    PL_BENCH_NPM_DIR "/node_modules/@modelcontextprotocol/"                    \
                     "server-everything/dist/index.js"
#define MCP_CALLS 1000 /* of each, in MCP_BATCHES batches */
#define MCP_CALLS_QUICK 200
#define MCP_BATCHES 20
#define MCP_WARM 5000 /* calls of each between the two phases */

typedef struct mcp_phase {
    double bare_us, engine_us; /* medians of one call */
    double bare_p90_us, engine_p90_us;
    double cpu_us[2]; /* this process's CPU time a call: bare, engine */
} mcp_phase;

typedef struct mcp_res {
    mcp_phase first; /* the servers' first calls */
    mcp_phase warm;  /* after MCP_WARM more of each */
} mcp_res;

/* ---- the bare client ---- */

typedef struct bare {
    pid_t pid;
    FILE *in, *out; /* the server's standard input, output */
    long next_id;
    char *line;
    size_t cap;
} bare;

static void bare_start(bare *b)
{
    int to[2], from[2];
    if (pipe(to) || pipe(from))
        die("mcp: pipe");
    fflush(NULL);
    b->pid = fork();
    if (b->pid < 0)
        die("mcp: fork");
    if (b->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        close(to[1]);
        close(from[0]);
        execlp("node", "node", EVERYTHING, "stdio", (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    b->in = fdopen(to[1], "w");
    b->out = fdopen(from[0], "r");
    if (!b->in || !b->out)
        die("mcp: fdopen");
}

/* Send a message; with @p id, read until its answer (skipping the
 * server's notifications) and return its "result" (caller frees). */
static cJSON *bare_send(bare *b, cJSON *msg, long id)
{
    char *text = cJSON_PrintUnformatted(msg);
    if (!text || fprintf(b->in, "%s\n", text) < 0 || fflush(b->in))
        die("mcp: bare write");
    free(text);
    while (id && getline(&b->line, &b->cap, b->out) > 0) {
        cJSON *in = cJSON_Parse(b->line);
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(in, "id");
        if (cJSON_IsNumber(got) && got->valuedouble == (double)id) {
            cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(in, "result");
            cJSON_Delete(in);
            if (!r)
                die("mcp: bare: an error answer");
            return r;
        }
        cJSON_Delete(in);
    }
    if (id)
        die("mcp: bare: the server closed its output");
    return NULL;
}

static cJSON *request(bare *b, const char *method, cJSON *params, long *id)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    *id = ++b->next_id;
    cJSON_AddNumberToObject(m, "id", (double)*id);
    cJSON_AddStringToObject(m, "method", method);
    cJSON_AddItemToObject(m, "params", params);
    return m;
}

static void bare_handshake(bare *b)
{
    long id;
    cJSON *p = NULL;
    pl_json_pack(&p, "{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion",
                 PL_MCP_PROTOCOL_VERSION, "capabilities", "clientInfo", "name",
                 "bench", "version", "1");
    cJSON *m = request(b, "initialize", p, &id);
    cJSON_Delete(bare_send(b, m, id));
    cJSON_Delete(m);
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddStringToObject(m, "method", "notifications/initialized");
    bare_send(b, m, 0);
    cJSON_Delete(m);
}

/* One echo through the bare client. */
static void bare_echo(bare *b)
{
    long id;
    cJSON *p = NULL;
    pl_json_pack(&p, "{s:s, s:{s:s}}", "name", "echo", "arguments", "message",
                 "bench");
    cJSON *m = request(b, "tools/call", p, &id);
    cJSON *r = bare_send(b, m, id);
    if (!cJSON_GetObjectItemCaseSensitive(r, "content"))
        die("mcp: bare: no content");
    cJSON_Delete(r);
    cJSON_Delete(m);
}

static void bare_stop(bare *b)
{
    fclose(b->in);
    fclose(b->out);
    kill(b->pid, SIGTERM);
    waitpid(b->pid, NULL, 0);
    free(b->line);
}

/* ---- the engine ---- */

static double *g_times; /* each recorded call's time, us */
static int g_n;
/* CPU time of this thread in the calls after each batch's first (that one
 * records the whole tool list), and how many: read between calls, so
 * outside every call's own time */
static double g_cpu_s[2];
static int g_cpu_n[2];

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* {"n": N}: N calls of ev.echo, each timed. */
static int mcp_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    int n = (int)cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valuedouble;
    cJSON *args = NULL;
    int st = pl_json_pack(&args, "{s:s}", "message", "bench");
    double c0 = 0;
    for (int i = 0; !st && i < n; i++) {
        cJSON *r = NULL;
        if (i == 1)
            c0 = cpu_s();
        double t0 = now_s();
        st = pl_ctx_invoke(&r, ctx, "ev.echo", args);
        if (g_times)
            g_times[g_n++] = (now_s() - t0) * 1e6;
        cJSON_Delete(r);
    }
    if (g_times && n > 1) {
        g_cpu_s[1] += cpu_s() - c0;
        g_cpu_n[1] += n - 1;
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

/* MCP_BATCHES batches of @p batch calls of each, interleaved, every call
 * timed (@p bt and g_times hold them); their medians and p90s. */
static void timed_phase(bare *b, pl_engine *e, int batch, double *bt, int *run,
                        mcp_phase *ph)
{
    int nb = 0;
    g_n = 0;
    memset(g_cpu_s, 0, sizeof g_cpu_s);
    memset(g_cpu_n, 0, sizeof g_cpu_n);
    for (int k = 0; k < MCP_BATCHES; k++) {
        double c0 = 0;
        for (int i = 0; i < batch; i++) {
            if (i == 1)
                c0 = cpu_s();
            double t0 = now_s();
            bare_echo(b);
            bt[nb++] = (now_s() - t0) * 1e6;
        }
        if (batch > 1) {
            g_cpu_s[0] += cpu_s() - c0;
            g_cpu_n[0] += batch - 1;
        }
        engine_run(e, batch, (*run)++);
    }
    for (int i = 0; i < 2; i++)
        ph->cpu_us[i] = g_cpu_n[i] ? g_cpu_s[i] / g_cpu_n[i] * 1e6 : 0;
    ph->bare_us = percentile(bt, (size_t)nb, 0.5);
    ph->bare_p90_us = percentile(bt, (size_t)nb, 0.9);
    ph->engine_us = percentile(g_times, (size_t)g_n, 0.5);
    ph->engine_p90_us = percentile(g_times, (size_t)g_n, 0.9);
}

static void mcp_child(const void *varg, void *vres)
{
    int calls = *(const int *)varg, batch = calls / MCP_BATCHES;
    mcp_res *r = vres;
    char path[1100], errlog[1200];
    path_in(path, sizeof path, "mcp.db");
    remove_store(path);
    snprintf(errlog, sizeof errlog, "%s.stderr", path);
    pl_registry *reg = NULL;
    pl_mcp *m = NULL;
    pl_mcp_options mo = PL_MCP_OPTIONS_INIT;
    mo.stderr_path = errlog;
    if (pl_registry_new(&reg) ||
        pl_registry_add_fn(reg, "mcp_root", mcp_root, NULL) ||
        pl_mcp_register(&m, reg, "ev", "stdio:node " EVERYTHING " stdio", &mo))
        die("mcp: registry");
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    bare b = {0};
    bare_start(&b);
    bare_handshake(&b);
    double *bt = calloc((size_t)calls, sizeof *bt);
    g_times = calloc((size_t)calls, sizeof *g_times);
    if (!bt || !g_times)
        die("mcp: out of memory");
    /* a warm-up of each, then the batches, interleaved */
    for (int i = 0; i < batch; i++)
        bare_echo(&b);
    double *keep = g_times;
    g_times = NULL;
    engine_run(e, batch, 0);
    g_times = keep;
    int run = 1;
    timed_phase(&b, e, batch, bt, &run, &r->first);
    /* both servers' compilers warm: as many calls of each, untimed */
    g_times = NULL;
    for (int done = 0; done < MCP_WARM; done += MCP_WARM / 10) {
        for (int i = 0; i < MCP_WARM / 10; i++)
            bare_echo(&b);
        engine_run(e, MCP_WARM / 10, run++);
    }
    g_times = keep;
    timed_phase(&b, e, batch, bt, &run, &r->warm);
    free(bt);
    free(g_times);
    g_times = NULL;
    bare_stop(&b);
    pl_engine_close(e);
    pl_mcp_close(m);
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
        "server; %d of each\n",
        calls);
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
        say("  %-22s %12.1f %12s %12.1f\n", "  client CPU: engine",
            ph[i]->cpu_us[1], "bare", ph[i]->cpu_us[0]);
        phase_json(o, keys[i], ph[i]);
    }
    add_goal("mcp process: recorded call / bare JSON-RPC",
             r.first.engine_us / r.first.bare_us, "x", true, 1.2);
    return 0;
}
