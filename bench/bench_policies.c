/*
 * bench_policies.c -- the policies the workloads run ("tool", the roots,
 * the agents), the registry and the engine they open.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- the policies under test ---------------------------------------------------- */

/* Tool: returns a ~100-byte JSON object derived from its input. */
int bench_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    /* W2 registers the tool with a kill point: die inside that call */
    if (user && cJSON_IsNumber(i) && i->valueint + 1 == *(const int *)user)
        raise(SIGKILL);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "i", cJSON_IsNumber(i) ? i->valuedouble : -1);
    cJSON_AddStringToObject(r, "status", "ok");
    cJSON_AddStringToObject(r, "message",
                            "the quick brown fox jumps over the lazy dog");
    cJSON *items = cJSON_AddArrayToObject(r, "items");
    for (int k = 1; k <= 3; k++)
        cJSON_AddItemToArray(items, cJSON_CreateNumber(k));
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Latencies of the calls a root makes, when measuring (W1). */
double *g_lat;
size_t g_nlat;
double g_first_exec; /* W2: when the tool first ran after restart */

turn_state g_turn = {-1, -1, 0, 0};

static void hand_over(void)
{
    double t0 = now_s();
    int n = g_turn.pending;
    char done;
    if (write(g_turn.out, &n, sizeof n) != (ssize_t)sizeof n ||
        read(g_turn.in, &done, 1) != 1) {
        fprintf(stderr, "pl-bench: W1: the floors' process is gone\n");
        _exit(1);
    }
    g_turn.pending = 0;
    g_turn.paused += now_s() - t0;
}

static int bench_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    int count = cJSON_IsNumber(n) ? n->valueint : 0;
    cJSON *p = cJSON_CreateObject();
    cJSON *iv = cJSON_AddNumberToObject(p, "i", 0);
    double sum = 0;
    for (int i = 0; i < count; i++) {
        cJSON_SetNumberValue(iv, i);
        pl_action call = {PL_ACTION_VERSION, "tool", p, NULL, 0, NULL};
        pl_step *res = NULL;
        double t0 = g_lat ? now_s() : 0;
        int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        if (st) {
            cJSON_Delete(p);
            return st;
        }
        if (g_lat && g_nlat < (size_t)count)
            g_lat[g_nlat++] = now_s() - t0;
        if (g_turn.out >= 0 && (++g_turn.pending == TURN || i + 1 == count))
            hand_over();
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                          "i");
        sum += cJSON_IsNumber(v) ? v->valuedouble : 0;
        pl_step_free(res);
    }
    cJSON_Delete(p);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "sum", sum);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* W5's agent: one turn.  Reads its whole ledger, as a model policy does to
 * build its conversation, and calls the tool until it has K results. */
static int bench_agent(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    /* each turn adds a call and its result; the last one is read */
    size_t n = pl_steps_count(l);
    int results = (int)(n / 2);
    bool read = !n || pl_step_payload(pl_steps_at(l, n - 1));
    if (results + 1 >= (cJSON_IsNumber(k) ? k->valueint : 1))
        return pl_steps_add_text(out, NULL, read ? "done" : "unread");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "i", results);
    st = pl_steps_add_call(out, "tool", p);
    cJSON_Delete(p);
    return st;
}

/* W5's root: the agent under loop + invoke_action. */
static int bench_agent_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                            void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const char *tools[] = {"tool"};
    pl_decorator decos[2];
    pl_decorator_loop(&decos[0], cJSON_IsNumber(k) ? (unsigned)k->valueint : 1);
    pl_decorator_invoke_action(&decos[1]);
    pl_action call = PL_ACTION_INIT;
    call.policy = "agent";
    call.payload = a->payload;
    call.actions = tools;
    call.n_actions = 1;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, decos, 2);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

int g_kill_at; /* W2 */

void w2_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_CALL_STARTED && g_first_exec == 0)
        g_first_exec = now_s();
}

pl_registry *make_registry(bool killer)
{
    pl_registry *reg;
    if (pl_registry_new(&reg))
        die("registry");
    if (pl_registry_add_fn(reg, "tool", bench_tool,
                           killer ? &g_kill_at : NULL) ||
        pl_registry_add_fn(reg, "root", bench_root, NULL) ||
        pl_registry_add_fn(reg, "agent", bench_agent, NULL) ||
        pl_registry_add_fn(reg, "agent_root", bench_agent_root, NULL))
        die("registry");
    return reg;
}

uint64_t g_commits;

void count_commits(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_COMMIT)
        g_commits++;
}

pl_engine *open_engine(const char *path, pl_registry *reg, pl_durability d,
                       pl_event_fn fn)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = d;
    o.on_event = fn;
    pl_engine *e;
    if (pl_engine_open(&e, path, reg, &o))
        die("open");
    return e;
}

int start_run(pl_engine *e, int n, const char *run_id)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n", n);
    pl_action root = {PL_ACTION_VERSION, "root", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = run_id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &root, &ro);
    cJSON_Delete(p);
    if (!st && o->status != PL_RUN_COMPLETED)
        st = o->error ? o->error : PL_EPOLICY;
    pl_outcome_free(o);
    return st;
}
