/*
 * bench_stream.c -- W5 streamed: the time from asking to the first delta
 * of a streamed answer, the LLM policy (with on_delta, a run of its own
 * each time, in process durability) against a bare libcurl loop reading
 * the same stream from the same loopback server (model_server.c) in the
 * same child process, interleaved.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <policyledger_llm.h>

#include "bench.h"

#define W5S_RUNS 200
#define W5S_RUNS_QUICK 50

typedef struct w5s_res {
    double engine_ms, bare_ms; /* medians of the time to the first delta */
    double engine_p90_ms, bare_p90_ms;
    double deltas; /* the engine's deltas per answer */
} w5s_res;

static double g_first;  /* when the first delta came, 0 before */
static long g_n_deltas; /* deltas delivered */

static void on_delta(const pl_llm_delta *d, void *user)
{
    (void)user;
    if (d->kind == PL_LLM_DELTA_TEXT && g_first == 0)
        g_first = now_s();
    g_n_deltas++;
}

/* The bare loop's body: the first event read is its first delta. */
static size_t bare_body(char *p, size_t size, size_t n, void *user)
{
    (void)user;
    size_t len = size * n;
    if (g_first == 0 && len > 6 && !memcmp(p, "data: ", 6)) {
        const char *end = memmem(p, len, "\n\n", 2);
        cJSON *ev = cJSON_ParseWithLength(p + 6, end ? (size_t)(end - p) - 6
                                                     : len - 6);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ev,
                                                                    "choices"),
                                   0),
                "delta"),
            "content");
        if (cJSON_IsString(c))
            g_first = now_s();
        cJSON_Delete(ev);
    }
    return len;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double at(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[(int)(p * (n - 1) + 0.5)];
}

static void w5s_child(const void *varg, void *vres)
{
    int runs = *(const int *)varg;
    w5s_res *r = vres;
    char path[1100], url[96], model[96];
    path_in(path, sizeof path, "w5s.db");
    remove_store(path);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    srv_start();
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions",
             g_srv.port);
    snprintf(model, sizeof model, "openai+http://127.0.0.1:%d/v1#bench",
             g_srv.port);
    pl_registry *reg;
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.on_delta = on_delta;
    if (pl_registry_new(&reg) ||
        pl_llm_register(reg, "model", model, "You are terse.", &o))
        die("W5 stream registry");
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: "
                                                   "application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bare_body);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    cJSON *payload = cJSON_CreateObject();
    cJSON_AddStringToObject(payload, "text", "Say eight words.");
    double *eng = calloc((size_t)runs, sizeof *eng);
    double *bare = calloc((size_t)runs, sizeof *bare);
    if (!eng || !bare)
        die("W5 stream: out of memory");
    g_n_deltas = 0;
    for (int i = -1; i < runs; i++) { /* -1: a warm-up of each */
        /* the bare loop: build the request, send it, read to the end */
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "model", "bench");
        cJSON_AddTrueToObject(req, "stream");
        cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "role", "user");
        cJSON_AddStringToObject(u, "content", "Say eight words.");
        cJSON_AddItemToArray(msgs, u);
        g_first = 0;
        double t0 = now_s();
        char *body = cJSON_PrintUnformatted(req);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(c) != CURLE_OK || g_first == 0)
            die("W5 stream: bare loop");
        if (i >= 0)
            bare[i] = (g_first - t0) * 1e3;
        free(body);
        cJSON_Delete(req);

        /* the engine: a run of the LLM policy, its answer streamed */
        char id[32];
        snprintf(id, sizeof id, "s%d", i + 1);
        pl_action root = PL_ACTION_INIT;
        root.policy = "model";
        root.payload = payload;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        pl_outcome *out = NULL;
        g_first = 0;
        t0 = now_s();
        if (pl_run_start(&out, e, &root, &ro))
            die("W5 stream: engine run");
        if (out->status != PL_RUN_COMPLETED || g_first == 0) {
            fprintf(stderr, "pl-bench: W5 stream: run %s: %s (%ld deltas)\n",
                    pl_run_status_name(out->status),
                    out->reason ? out->reason : "no first delta", g_n_deltas);
            _exit(1);
        }
        if (i >= 0)
            eng[i] = (g_first - t0) * 1e3;
        pl_outcome_free(out);
    }
    r->deltas = (double)g_n_deltas / (runs + 1);
    r->engine_ms = at(eng, runs, 0.5);
    r->engine_p90_ms = at(eng, runs, 0.9);
    r->bare_ms = at(bare, runs, 0.5);
    r->bare_p90_ms = at(bare, runs, 0.9);
    free(eng);
    free(bare);
    cJSON_Delete(payload);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    pl_engine_close(e);
    pl_registry_free(reg);
    srv_stop();
    remove_store(path);
}

int report_w5_stream(bool quick)
{
    int runs = quick ? W5S_RUNS_QUICK : W5S_RUNS;
    say("\nW5 streamed: time to the first delta of a streamed answer (OpenAI "
        "SSE from a\n  loopback server, %d deltas an answer): a run of the "
        "LLM policy with on_delta,\n  process mode, vs a bare libcurl + cJSON "
        "loop reading the same stream; %d of each\n",
        STREAM_DELTAS, runs);
    w5s_res r;
    if (in_child(w5s_child, &runs, &r, sizeof r)) {
        say("  failed\n");
        return 1;
    }
    say("  %-10s %12s %12s\n", "", "median ms", "p90 ms");
    say("  %-10s %12.3f %12.3f\n", "engine", r.engine_ms, r.engine_p90_ms);
    say("  %-10s %12.3f %12.3f\n", "bare", r.bare_ms, r.bare_p90_ms);
    say("  %-10s %12.3f   (deltas an answer: %.1f)\n", "added",
        r.engine_ms - r.bare_ms, r.deltas);
    cJSON *o = cJSON_AddObjectToObject(g_json, "w5_stream");
    jnum(o, "runs", runs);
    jnum(o, "engine_first_delta_ms", r.engine_ms);
    jnum(o, "engine_first_delta_p90_ms", r.engine_p90_ms);
    jnum(o, "bare_first_delta_ms", r.bare_ms);
    jnum(o, "bare_first_delta_p90_ms", r.bare_p90_ms);
    jnum(o, "added_ms", r.engine_ms - r.bare_ms);
    add_goal("W5 stream process: first delta, added", r.engine_ms - r.bare_ms,
             "ms", true, 1.0);
    return 0;
}
