/*
 * bench_w5.c -- W5, agent turns: in the engine, and over HTTP against
 * the loopback model server (model_server.c), next to a bare loop.
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

/* ---- W5: agent turns -------------------------------------------------------------- */

typedef struct w5_res {
    double us_per_turn;
} w5_res;

static void w5_child(const void *varg, void *vres)
{
    const int *turns = varg;
    w5_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w5.db");
    remove_store(path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "turns", *turns);
    pl_action root = PL_ACTION_INIT;
    root.policy = "agent_root";
    root.payload = p;
    pl_outcome *o = NULL;
    double t0 = now_s();
    if (pl_run_start(&o, e, &root, NULL) || o->status != PL_RUN_COMPLETED ||
        o->calls_executed != (uint64_t)*turns)
        die("W5 run");
    r->us_per_turn = (now_s() - t0) * 1e6 / *turns;
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
}

/* ---- W5 over HTTP: an agent against a loopback model server ------------------------ */

typedef struct pl_buf_like {
    char *data;
    size_t len, cap;
} pl_buf_like;

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    pl_buf_like *b = user;
    size_t len = size * n;
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *g = realloc(b->data, cap);
        if (!g)
            return 0;
        b->data = g;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, len);
    b->len += len;
    b->data[b->len] = '\0';
    return len;
}

/* The bare loop: the same K + 1 requests with libcurl and cJSON alone, on
 * one keep-alive handle, the conversation kept in memory; each turn runs
 * the tool's work (the same ~100 B result) and sends it back. */
static double bare_loop(int turns)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions",
             g_srv.port);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: "
                                                   "application/json");
    pl_buf_like b = {0};
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", "bench");
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", "{\"turns\":1}");
    cJSON_AddItemToArray(msgs, u);
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{"
                               "\"name\":\"tool\",\"parameters\":{\"type\":"
                               "\"object\"}}}]");
    cJSON_AddItemToObject(req, "tools", tools);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    atomic_store(&g_srv.tools, turns);
    double t0 = now_s();
    for (int t = 0; t <= turns; t++) {
        char *body = cJSON_PrintUnformatted(req);
        b.len = 0;
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(c) != CURLE_OK)
            die("W5 bare loop");
        free(body);
        cJSON *r = cJSON_Parse(b.data);
        cJSON *m = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "choices"),
                               0),
            "message");
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        cJSON *call = cJSON_GetArrayItem(calls, 0);
        if (!call) {
            cJSON_Delete(r);
            break;
        }
        cJSON *args = cJSON_Parse(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(call, "function"), "arguments")
                ->valuestring);
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(args, "i");
        cJSON *res = cJSON_CreateObject();
        cJSON_AddNumberToObject(res, "i",
                                cJSON_IsNumber(i) ? i->valuedouble : -1);
        cJSON_AddStringToObject(res, "status", "ok");
        cJSON_AddStringToObject(res, "message",
                                "the quick brown fox jumps over the lazy dog");
        cJSON *items = cJSON_AddArrayToObject(res, "items");
        for (int k = 1; k <= 3; k++)
            cJSON_AddItemToArray(items, cJSON_CreateNumber(k));
        char *out = cJSON_PrintUnformatted(res);
        cJSON *tm = cJSON_CreateObject();
        cJSON_AddStringToObject(tm, "role", "tool");
        cJSON_AddStringToObject(tm, "tool_call_id",
                                cJSON_GetObjectItemCaseSensitive(call, "id")
                                    ->valuestring);
        cJSON_AddStringToObject(tm, "content", out);
        cJSON_DetachItemViaPointer(
            r, cJSON_GetObjectItemCaseSensitive(
                   cJSON_GetArrayItem(
                       cJSON_GetObjectItemCaseSensitive(r, "choices"), 0),
                   "message"));
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddItemToArray(msgs, tm);
        free(out);
        cJSON_Delete(res);
        cJSON_Delete(args);
        cJSON_Delete(r);
    }
    double dt = now_s() - t0;
    cJSON_Delete(req);
    free(b.data);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return dt;
}

/* The engine's agent: "model" (the LLM policy against the loopback
 * server) under loop(K + 1) + invoke_action with the tool. */
static int bench_llm_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                          void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const char *tools[] = {"tool"};
    pl_decorator decos[2];
    pl_decorator_loop(&decos[0],
                      cJSON_IsNumber(k) ? (unsigned)k->valueint + 1 : 1);
    pl_decorator_invoke_action(&decos[1]);
    pl_action call = PL_ACTION_INIT;
    call.policy = "model";
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

typedef struct w5h_arg {
    int turns;
    pl_durability mode;
} w5h_arg;

typedef struct w5h_res {
    double engine_us, bare_us; /* per turn */
    double commits;            /* per turn */
    double floor_us;           /* one synced commit of the W1 floor */
    double replay_us;          /* per replayed turn, the agent's loop */
    double replay_wall_us;     /* the same on the wall clock */
    double replay_total_us;    /* the whole continue, per turn */
    long replay_requests;      /* requests the replay made */
    double bytes;              /* store pages in use per turn */
} w5h_res;

static pl_registry *w5h_registry(void)
{
    pl_registry *reg = make_registry(false);
    char url[96];
    snprintf(url, sizeof url, "openai+http://127.0.0.1:%d/v1#bench",
             g_srv.port);
    if (pl_llm_register(reg, "model", url, NULL, NULL) ||
        pl_registry_add_fn(reg, "llm_root", bench_llm_root, NULL))
        die("W5 registry");
    return reg;
}

/* The process that dies: when the model's final answer is appended, its
 * exchange is durable and the call's result is not. */
static void w5h_die_at_answer(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STEP_APPENDED && ev->step_type == PL_STEP_TEXT &&
        ev->policy && strcmp(ev->policy, "model") == 0)
        _exit(0);
}

/* The replay's clocks at its first and last replayed step of the agent:
 * the wall clock, and the replaying thread's CPU time (what the replay
 * costs, whatever else the host runs meanwhile). */
static double g_replay_first, g_replay_last, g_replay_cpu0, g_replay_cpu1;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void w5h_replayed(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STEP_REPLAYED && strcmp(ev->path, "0.0") == 0) {
        g_replay_last = now_s();
        g_replay_cpu1 = thread_cpu_s();
        if (g_replay_first == 0) {
            g_replay_first = g_replay_last;
            g_replay_cpu0 = g_replay_cpu1;
        }
    }
}

/* Run "agent-r" in a child process that dies at the model's final answer,
 * so that finishing it replays the model's loop turn by turn. */
static void w5h_crashed_run(const char *path, const w5h_arg *a,
                            const pl_action *root)
{
    pid_t self = getpid(), pid = fork();
    if (pid < 0)
        die("W5 fork");
    if (pid == 0) {
        child_bind(self);
        pl_registry *reg = w5h_registry();
        pl_engine *e = open_engine(path, reg, a->mode, w5h_die_at_answer);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "agent-r";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, root, &ro);
        _exit(3); /* it should have died before its end */
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        die("W5 crashed run");
}

static void w5h_child(const void *varg, void *vres)
{
    const w5h_arg *a = varg;
    w5h_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w5h.db");
    remove_store(path);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    srv_start();
    pl_registry *reg = w5h_registry();
    /* the bare loop first, then the engine */
    r->bare_us = bare_loop(a->turns) * 1e6 / a->turns;
    g_commits = 0;
    pl_engine *e = open_engine(path, reg, a->mode, count_commits);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "turns", a->turns);
    pl_action root = PL_ACTION_INIT;
    root.policy = "llm_root";
    root.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "agent";
    pl_outcome *o = NULL;
    atomic_store(&g_srv.tools, a->turns);
    double t0 = now_s();
    if (pl_run_start(&o, e, &root, &ro) || o->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "pl-bench: W5: %s\n",
                o && o->reason ? o->reason : pl_errmsg());
        die("W5 agent run");
    }
    r->engine_us = (now_s() - t0) * 1e6 / a->turns;
    r->commits = (double)g_commits / a->turns;
    pl_outcome_free(o);
    pl_engine_close(e);
    /* the store as the run left it, before the replay's run adds to it */
    MDB_env *env = raw_env(path, PL_DURABILITY_PROCESS);
    MDB_envinfo info;
    MDB_stat ms;
    mdb_env_info(env, &info);
    mdb_env_stat(env, &ms);
    r->bytes = (double)(info.me_last_pgno + 1) * ms.ms_psize / a->turns;
    mdb_env_close(env);
    pl_registry_free(reg); /* closes its connection: the server serves one */

    /* the replay: the same agent, crashed at its final answer, finished;
     * every turn's exchange and tool call is served from the ledger */
    atomic_store(&g_srv.tools, a->turns);
    w5h_crashed_run(path, a, &root);
    reg = w5h_registry();
    e = open_engine(path, reg, a->mode, w5h_replayed);
    long before = atomic_load(&g_srv.requests);
    g_replay_first = g_replay_last = 0;
    t0 = now_s();
    if (pl_run_continue(&o, e, "agent-r", NULL) ||
        o->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "pl-bench: W5 replay: %s\n",
                o && o->reason ? o->reason : pl_errmsg());
        die("W5 replay");
    }
    r->replay_total_us = (now_s() - t0) * 1e6 / (a->turns + 1);
    /* from the first replayed step of the agent to its last: the turns
     * alone, without the continue's own commits (claiming the run, the
     * results past the crash) */
    r->replay_us = (g_replay_cpu1 - g_replay_cpu0) * 1e6 / a->turns;
    r->replay_wall_us = (g_replay_last - g_replay_first) * 1e6 / a->turns;
    r->replay_requests = atomic_load(&g_srv.requests) - before;
    pl_outcome_free(o);
    pl_engine_close(e);
    cJSON_Delete(p);
    pl_registry_free(reg);
    srv_stop();
    remove_store(path);
    /* the W1 floor, a synced commit of one record, in the same run */
    r->floor_us = 0;
    if (a->mode == PL_DURABILITY_SYNC) {
        floor_arg fa = {PL_DURABILITY_SYNC, 200, 1, false};
        floor_res fr;
        floor_puts(&fa, &fr);
        r->floor_us = fr.per_record_s * 1e6;
    }
}

/* W5 over HTTP: the engine's agent against the bare libcurl loop. */
static int report_w5_http(bool quick)
{
    static const int full[] = {10, 100, 1000}, small[] = {10, 100};
    const int *sizes = quick ? small : full;
    int n = quick ? 2 : 3, reps = quick ? 1 : 3;
    static const pl_durability hmodes[] = {PL_DURABILITY_SYNC,
                                           PL_DURABILITY_PROCESS};
    say("\nW5 agent over HTTP: K turns, each a model call to a loopback "
        "server (canned\n  OpenAI answers, keep-alive) and a tool call; the "
        "engine's LLM policy under\n  loop + invoke_action vs a bare libcurl + "
        "cJSON loop making the same requests; replay: the CPU time of a "
        "turn of\n  the same agent's loop replayed, the run having died at "
        "the model's final answer\n");
    say("  %-8s %5s %10s %10s %10s %8s %8s %10s %8s %10s\n", "mode", "K",
        "engine us", "bare us", "added us", "commits", "floor us", "replay us",
        "req", "bytes");
    cJSON *arr = cJSON_AddArrayToObject(g_json, "w5_agent_http");
    for (int m = 0; m < 2; m++) {
        w5h_res med[3];
        double added_med[3] = {0};
        for (int s = 0; s < n; s++) {
            double eng[REPS_MAX], bare[REPS_MAX], add[REPS_MAX], rep[REPS_MAX];
            w5h_res r = {0};
            int ok = 0;
            long reqs = 0;
            for (int k = 0; k < reps; k++) {
                w5h_arg a = {sizes[s], hmodes[m]};
                if (in_child(w5h_child, &a, &r, sizeof r))
                    continue;
                eng[ok] = r.engine_us;
                bare[ok] = r.bare_us;
                add[ok] = r.engine_us - r.bare_us;
                rep[ok] = r.replay_us;
                reqs += r.replay_requests;
                ok++;
            }
            if (!ok) {
                say("  %-8s %5d failed\n", pl_durability_name(hmodes[m]),
                    sizes[s]);
                return 1;
            }
            med[s] = r;
            med[s].engine_us = median(eng, ok);
            med[s].bare_us = median(bare, ok);
            med[s].replay_us = median(rep, ok);
            med[s].replay_requests = reqs;
            double added = median(add, ok);
            say("  %-8s %5d %10.1f %10.1f %10.1f %8.2f %8.1f %10.2f %8ld "
                "%10.0f\n",
                pl_durability_name(hmodes[m]), sizes[s], med[s].engine_us,
                med[s].bare_us, added, r.commits, r.floor_us, med[s].replay_us,
                reqs, r.bytes);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "mode", pl_durability_name(hmodes[m]));
            jnum(o, "turns", sizes[s]);
            jnum(o, "engine_us_per_turn", med[s].engine_us);
            jnum(o, "bare_us_per_turn", med[s].bare_us);
            jnum(o, "added_us_per_turn", added);
            jnum(o, "commits_per_turn", r.commits);
            jnum(o, "floor_commit_us", r.floor_us);
            jnum(o, "replay_us_per_turn", med[s].replay_us);
            jnum(o, "replay_wall_us_per_turn", r.replay_wall_us);
            jnum(o, "replay_total_us_per_turn", r.replay_total_us);
            jnum(o, "replay_requests", (double)reqs);
            jnum(o, "store_bytes_per_turn", r.bytes);
            cJSON_AddItemToArray(arr, o);
            added_med[s] = added;
        }
        const char *mn = pl_durability_name(hmodes[m]);
        char what[96];
        int last = n - 1;
        if (hmodes[m] == PL_DURABILITY_SYNC) {
            snprintf(what, sizeof what, "W5 http sync, K=%d: added - commits",
                     sizes[last]);
            /* what a turn's commits cost at the W1 floor */
            w5h_res *x = &med[last];
            floor_arg fa = {PL_DURABILITY_SYNC, 200, 1, false};
            floor_res fr;
            double floor_us = in_child(floor_puts, &fa, &fr, sizeof fr)
                                  ? 0
                                  : fr.per_record_s * 1e6;
            add_goal(what, added_med[last] - x->commits * floor_us, "us", true,
                     50);
        } else {
            snprintf(what, sizeof what, "W5 http process, K=%d: added",
                     sizes[last]);
            add_goal(what, added_med[last], "us", true, 50);
        }
        snprintf(what, sizeof what, "W5 http %s: turn at K=%d / K=10", mn,
                 sizes[last]);
        add_goal(what, med[last].engine_us / med[0].engine_us, "x", true, 1.5);
        snprintf(what, sizeof what, "W5 http %s: replayed turn K=%d / K=10", mn,
                 sizes[last]);
        add_goal(what, med[last].replay_us / med[0].replay_us, "x", true, 1.5);
        snprintf(what, sizeof what, "W5 http %s: replay requests", mn);
        long total = 0;
        for (int s = 0; s < n; s++)
            total += med[s].replay_requests;
        add_goal(what, (double)total, "", true, 0);
        snprintf(what, sizeof what, "W5 http %s: replayed turns/s, K=100", mn);
        add_goal(what, 1e6 / med[1].replay_us, "", false, 50000);
        snprintf(what, sizeof what, "W5 http %s: bytes/turn K=%d / K=10", mn,
                 sizes[last]);
        add_goal(what, med[last].bytes / med[0].bytes, "x", true, 1.1);
    }
    return 0;
}

int report_w5(bool quick)
{
    static const int sizes[] = {10, 100, 1000};
    double per_turn[3] = {0};
    say("\nW5 agent turns: loop + invoke_action, the ledger read every turn "
        "(process mode)\n");
    say("  %8s %12s %12s\n", "turns", "us/turn", "vs 10 turns");
    cJSON *jw5 = cJSON_AddArrayToObject(g_json, "w5_agent_turns");
    for (int s = 0; s < 3; s++) {
        double v[REPS_MAX];
        int ok = 0;
        for (int k = 0; k < g_reps; k++) {
            w5_res r;
            if (!in_child(w5_child, &sizes[s], &r, sizeof r))
                v[ok++] = r.us_per_turn;
        }
        if (!ok) {
            say("  %8d failed\n", sizes[s]);
            return 1;
        }
        per_turn[s] = median(v, ok);
        say("  %8d %12.1f %11.2fx\n", sizes[s], per_turn[s],
            per_turn[s] / per_turn[0]);
        cJSON *o = cJSON_CreateObject();
        jnum(o, "turns", sizes[s]);
        jnum(o, "us_per_turn", per_turn[s]);
        jnum(o, "ratio_to_10_turns", per_turn[s] / per_turn[0]);
        cJSON_AddItemToArray(jw5, o);
    }
    add_goal("W5: a turn at 1,000 turns vs at 10 (flat)",
             per_turn[2] / per_turn[0], "x", true, 1.5);
    return report_w5_http(quick);
}
