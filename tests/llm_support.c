/*
 * llm_support.c -- the loopback model server, an agent, a tool.
 */
#define _XOPEN_SOURCE 700
#include "llm_support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

char t_effects_path[4400];

static pid_t g_pids[8];
static int g_n_pids;

static void kill_servers(void)
{
    for (int i = 0; i < g_n_pids; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGKILL);
            waitpid(g_pids[i], NULL, 0);
            g_pids[i] = 0;
        }
}

const char *t_write_file(const char *name, const char *text)
{
    static char path[8][4200];
    static int next;
    char *p = path[next++ & 7];
    snprintf(p, sizeof path[0], "%s/%s", t_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
    return p;
}

char *t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (len)
            *len = 0;
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    fclose(f);
    cr_assert_not_null(b);
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

void t_server_start(t_server *s, const char *script_json)
{
    memset(s, 0, sizeof *s);
    const char *dir = t_tmpdir();
    char script[4200], portf[4200];
    snprintf(script, sizeof script, "%s/server-script.json", dir);
    snprintf(portf, sizeof portf, "%s/port", dir);
    snprintf(s->log, sizeof s->log, "%s/requests.log", dir);
    FILE *f = fopen(script, "wb");
    cr_assert_not_null(f);
    fputs(script_json, f);
    fclose(f);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork");
    if (pid == 0) {
        execlp("python3", "python3", PL_TEST_SRC_DIR "/llm_server.py",
               "--script", script, "--log", s->log, "--port-file", portf,
               (char *)NULL);
        _exit(127);
    }
    if (g_n_pids == 0)
        atexit(kill_servers);
    cr_assert_lt(g_n_pids, 8);
    g_pids[g_n_pids++] = pid;
    s->pid = pid;
    for (int i = 0; i < 1000; i++) { /* up to 20 s for python to start */
        char *t = t_read_file(portf, NULL);
        if (t) {
            s->port = (int)strtol(t, NULL, 10);
            free(t);
            break;
        }
        int wst;
        cr_assert_eq(waitpid(pid, &wst, WNOHANG), 0,
                     "the loopback server exited at start");
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    cr_assert_gt(s->port, 0, "the loopback server did not start");
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d/v1", s->port);
}

const char *t_model_on(char *out, size_t n, const t_server *s,
                       const char *protocol, const char *url)
{
    setenv("OPENAI_API_KEY", "sk-loopback-1234", 1);
    setenv("ANTHROPIC_API_KEY", "sk-loopback-1234", 1);
    setenv("GEMINI_API_KEY", "sk-loopback-1234", 1);
    if (strcmp(protocol, "ollama") != 0) {
        snprintf(out, n, "%s", url);
        return s->base;
    }
    snprintf(out, n, "ollama://127.0.0.1:%d/m", s->port);
    return NULL;
}

void t_server_stop(t_server *s)
{
    for (int i = 0; i < g_n_pids; i++)
        if (g_pids[i] == s->pid) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            g_pids[i] = 0;
        }
    s->pid = 0;
}

cJSON *t_server_log(const t_server *s)
{
    cJSON *arr = cJSON_CreateArray();
    char *t = t_read_file(s->log, NULL);
    char *save = NULL;
    for (char *line = t ? strtok_r(t, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *e = cJSON_Parse(line);
        cr_assert_not_null(e, "bad log line: %s", line);
        cJSON_AddItemToArray(arr, e);
    }
    free(t);
    return arr;
}

int t_server_requests(const t_server *s)
{
    cJSON *l = t_server_log(s);
    int n = cJSON_GetArraySize(l);
    cJSON_Delete(l);
    return n;
}

const char *t_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *acts = cJSON_GetObjectItemCaseSensitive(a->payload, "actions");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(a->payload, "max_turns");
    const char *names[8];
    size_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, acts)
    {
        if (n < 8 && cJSON_IsString(it))
            names[n++] = it->valuestring;
    }
    cJSON *p = NULL;
    int st = pl_json_pack(&p, "{s:s}", "text",
                          t_str(a->payload, "text") ? t_str(a->payload, "text")
                                                    : "");
    if (st)
        return st;
    /* "deadline_in_ms": the model calls' deadline, from the recorded
     * clock */
    const cJSON *din = cJSON_GetObjectItemCaseSensitive(a->payload,
                                                        "deadline_in_ms");
    int64_t now;
    if (cJSON_IsNumber(din) &&
        ((st = pl_ctx_now(&now, ctx)) ||
         (st = pl_ctx_set_deadline(ctx, now + (int64_t)din->valuedouble)))) {
        cJSON_Delete(p);
        return st;
    }
    /* "max_tokens": n puts budget(max_tokens = n) inside the loop */
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(a->payload,
                                                       "max_tokens");
    pl_budget b = PL_BUDGET_INIT;
    b.max_tokens = cJSON_IsNumber(mx) ? (uint64_t)mx->valueint : 0;
    /* [loop, invoke_action], or [loop, budget, invoke_action] */
    pl_decorator d[3];
    size_t n_d = 2;
    if ((st = pl_decorator_loop(&d[0], cJSON_IsNumber(mt)
                                           ? (unsigned)mt->valueint
                                           : 6)) ||
        (st = pl_decorator_invoke_action(&d[1])) ||
        (st = pl_decorator_invoke_action(&d[2]))) {
        cJSON_Delete(p);
        return st;
    }
    if (b.max_tokens) {
        st = pl_decorator_budget(&d[1], &b);
        n_d = 3;
    }
    pl_action call = PL_ACTION_INIT;
    call.policy = "llm";
    call.payload = p;
    call.actions = names;
    call.n_actions = n;
    pl_step *res = NULL;
    if (!st)
        st = pl_ctx_call(&res, ctx, &call, d, n_d);
    cJSON_Delete(p);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static int effect(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *key = pl_ctx_idempotency_key(ctx);
    if (!t_str(a->payload, "note"))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "note: required");
    if (t_effects_path[0]) {
        FILE *f = fopen(t_effects_path, "a");
        if (f) {
            fprintf(f, "%s\n", key);
            fclose(f);
        }
    }
    return pl_steps_add_resultf(out, "{s:b, s:s}", "ok", 1, "key", key);
}

pl_registry *t_llm_registry(const char *model_url, const pl_llm_options *opts)
{
    return t_llm_registry_prompt(model_url, "You are terse.", opts);
}

pl_registry *t_llm_registry_prompt(const char *model_url,
                                   const char *system_prompt,
                                   const pl_llm_options *opts)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "agent", agent, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "effect";
    d.fn = effect;
    d.description = "Record a note.";
    d.input_schema = "{\"type\":\"object\",\"properties\":{\"note\":"
                     "{\"type\":\"string\"}},\"required\":[\"note\"]}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    int st = pl_llm_register(reg, "llm", model_url, system_prompt, opts);
    cr_assert_eq(st, PL_OK, "pl_llm_register(%s): %s", model_url, pl_errmsg());
    return reg;
}

pl_outcome *t_agent(pl_engine *e, const char *text, const char *actions_json,
                    const char *run_id)
{
    char payload[2048];
    snprintf(payload, sizeof payload, "{\"text\": \"%s\", \"actions\": %s}",
             text, actions_json);
    return t_start(e, "agent", payload, run_id);
}

uint64_t t_scripted_served(const char *script)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.served", script);
    FILE *f = fopen(path, "rb");
    cr_assert(f || errno == ENOENT, "%s: %s", path, strerror(errno));
    uint64_t n = 0;
    for (int ch; f && (ch = getc(f)) != EOF;)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

const char *t_pad(void)
{
    static char pad[256];
    memset(pad, 'x', sizeof pad - 1);
    return pad;
}

int t_delta_kinds[4];

void t_count_delta(const pl_llm_delta *d, void *user)
{
    (void)user;
    if ((unsigned)d->kind < 4)
        t_delta_kinds[d->kind]++;
}
