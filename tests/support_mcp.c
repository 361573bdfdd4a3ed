/*
 * support_mcp.c -- what the tests of MCP servers' tools (test_mcp*.c)
 * share: the root policy "use" and "halt", the fixture, the checks of a
 * result, and the scripted server over Streamable HTTP
 * (tests/mcp_http_server.py).
 */
#include "support_mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <policyledger_mcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

bool in_child;         /* the engine that is killed */
pl_decorator per_call; /* each call's decorator, if set */
char halt_marker[4200];

/*
 * The root policy: {"calls": [{"tool": name, "args": {...}}, ...]} calls
 * each and returns {"got": [each result or error object]}.
 */
int use(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(a->payload, "calls");
    cJSON *got = cJSON_CreateArray();
    const cJSON *c;
    cJSON_ArrayForEach(c, calls)
    {
        const cJSON *tool = cJSON_GetObjectItemCaseSensitive(c, "tool");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "args");
        cJSON *r = NULL;
        int st;
        if (per_call.fn) {
            pl_action act = PL_ACTION_INIT;
            act.policy = tool->valuestring;
            act.payload = args ? args : pl_json_empty();
            pl_step *s = NULL;
            st = pl_ctx_call(&s, ctx, &act, &per_call, 1);
            if (s) /* PL_OK, or PL_ERESULT with the error result */
                r = cJSON_Duplicate(pl_step_payload(s), 1);
            pl_step_free(s);
        } else {
            st = pl_ctx_invoke(&r, ctx, tool->valuestring,
                               args ? args : pl_json_empty());
        }
        if (st && st != PL_ERESULT) {
            cJSON_Delete(got);
            return st;
        }
        cJSON_AddItemToArray(got, r);
    }
    int st = pl_steps_add_resultf(out, "{s:o}", "got", got);
    return st;
}

/* "halt": in the killed engine, note that it runs and wait to be killed. */
static int halt(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)user;
    if (in_child) {
        FILE *f = fopen(halt_marker, "w");
        if (f) {
            fputs("halted\n", f);
            fclose(f);
        }
        sleep(600);
        _exit(9);
    }
    return pl_steps_add_resultf(out, "{s:b}", "halted", 1);
}

fixture F;

void need(const char *server) { t_need_npm(server, "mcp_setup"); }

pl_mcp_options quiet(void)
{
    static char err[4300];
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    snprintf(err, sizeof err, "%s/stderr", F.dir);
    o.stderr_path = err;
    return o;
}

/* A registry with "use", "halt" and the server's tools. */
int open_reg(const char *name, const char *spec, const pl_mcp_options *o)
{
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "use";
    d.fn = use;
    cr_assert_eq(pl_registry_add(F.reg, &d), PL_OK);
    d.name = "halt";
    d.fn = halt;
    cr_assert_eq(pl_registry_add(F.reg, &d), PL_OK);
    return pl_mcp_register(&F.mcp, F.reg, name, spec, o);
}

void open_all(const char *name, const char *spec, const pl_mcp_options *o)
{
    int st = open_reg(name, spec, o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    if (!F.store[0])
        snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
}

void close_all(void)
{
    pl_engine_close(F.engine);
    pl_mcp_close(F.mcp);
    pl_registry_free(F.reg);
    F.engine = NULL;
    F.mcp = NULL;
    F.reg = NULL;
}

void setup(void) { snprintf(F.dir, sizeof F.dir, "%s", t_tmpdir()); }

void teardown(void)
{
    close_all();
    t_cleanup();
}

/* Run @p calls (JSON text of the "calls" array) as run @p id; the "got"
 * array (caller frees). */
cJSON *run(const char *id, const char *calls, int executed)
{
    char text[8192];
    snprintf(text, sizeof text, "{\"calls\": %s}", calls);
    pl_outcome *o = t_start(F.engine, "use", text, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run %s: %s", id,
                 o->reason ? o->reason : "");
    if (executed >= 0)
        cr_expect_eq(o->calls_executed, (uint64_t)executed);
    cJSON *got = cJSON_Duplicate(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "got"), 1);
    pl_outcome_free(o);
    return got;
}

const cJSON *at(const cJSON *got, int i)
{
    const cJSON *r = cJSON_GetArrayItem(got, i);
    cr_assert_not_null(r, "no result %d", i);
    return r;
}

const char *s_of(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    cr_assert(cJSON_IsString(s), "no string \"%s\" in %s", key, t_text(v));
    return s->valuestring;
}

/* The text of the first content item of a result. */
const char *first_text(const cJSON *r)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "content");
    cr_assert(cJSON_IsArray(c), "no content in %s", t_text(r));
    return s_of(cJSON_GetArrayItem(c, 0), "text");
}

void expect_error(const cJSON *r, const char *code, const char *part)
{
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")),
              "not an error: %s", t_text(r));
    cr_expect_str_eq(s_of(r, "code"), code, "%s", t_text(r));
    if (part)
        cr_expect(strstr(s_of(r, "message"), part), "%s", t_text(r));
}

/* How many lines of @p path contain both @p a and @p b. */
int count_lines(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    static char line[1 << 16];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, a) && (!b || strstr(line, b)))
            n++;
    fclose(f);
    return n;
}

void wait_for(const char *path, const char *a, const char *b)
{
    for (int i = 0; i < 6000 && count_lines(path, a, b) == 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_gt(count_lines(path, a, b), 0, "never saw %s in %s", a, path);
}

void write_file(const char *dir, const char *name, const char *text)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* The scripted server over Streamable HTTP                                 */
/* ------------------------------------------------------------------------ */

scripted g_servers[2];

void stop_servers(void)
{
    for (int i = 0; i < 2; i++)
        if (g_servers[i].pid > 0) {
            kill(g_servers[i].pid, SIGKILL);
            waitpid(g_servers[i].pid, NULL, 0);
            g_servers[i].pid = 0;
        }
}

void teardown_http(void)
{
    teardown();
    stop_servers();
}

/* Start server @p k on @p host with the script @p script (JSON text). */
scripted *start_scripted(int k, const char *host, const char *script)
{
    scripted *s = &g_servers[k];
    char path[4300], portf[4300];
    snprintf(path, sizeof path, "%s/script-%d.json", F.dir, k);
    snprintf(portf, sizeof portf, "%s/port-%d", F.dir, k);
    snprintf(s->log, sizeof s->log, "%s/requests-%d.log", F.dir, k);
    write_file(F.dir, strrchr(path, '/') + 1, script);
    unlink(portf);
    unlink(s->log);
    setenv("PL_TEST_MCP_TOKEN", TOKEN, 1);
    fflush(NULL);
    s->pid = fork();
    cr_assert_neq(s->pid, -1);
    if (s->pid == 0) {
        execlp("python3", "python3", PL_TEST_SRC_DIR "/mcp_http_server.py",
               "--script", path, "--log", s->log, "--port-file", portf,
               "--host", host, (char *)NULL);
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 1000 && !port; i++) { /* up to 20 s for python */
        FILE *f = fopen(portf, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (!port) {
            cr_assert_eq(waitpid(s->pid, NULL, WNOHANG), 0,
                         "the scripted server exited at start");
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert_gt(port, 0, "the scripted server did not start");
    snprintf(s->url, sizeof s->url, "http://%s:%d/mcp", host, port);
    return s;
}

/* Register server 0 (started on @p script) as "h", with the token. */
int register_on(const char *script, pl_mcp_options *o)
{
    scripted *s = start_scripted(0, "127.0.0.1", script);
    o->token_env = "PL_TEST_MCP_TOKEN";
    if (!o->start_timeout_ms)
        o->start_timeout_ms = 20000;
    return open_reg("h", s->url, o);
}

void open_on(const char *script, pl_mcp_options *o)
{
    int st = register_on(script, o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
}

/* The log's entries (a JSON array; caller frees). */
cJSON *log_of(const scripted *s)
{
    cJSON *arr = cJSON_CreateArray();
    FILE *f = fopen(s->log, "r");
    static char line[1 << 16];
    while (f && fgets(line, sizeof line, f))
        cJSON_AddItemToArray(arr, cJSON_Parse(line));
    if (f)
        fclose(f);
    return arr;
}

bool is_request(const cJSON *e, const char *method, const char *sid)
{
    const char *m = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(e, "method"));
    const char *in = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(e, "session"));
    return m && strcmp(m, method) == 0 &&
           (!sid || (in && strcmp(in, sid) == 0));
}

int requests_in(const scripted *s, const char *method, const char *sid)
{
    cJSON *l = log_of(s);
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, l) { n += is_request(e, method, sid); }
    cJSON_Delete(l);
    return n;
}

int requests(const scripted *s, const char *method)
{
    return requests_in(s, method, NULL);
}

int replay_tool(const char *const *args)
{
    const char *argv[24] = {PL_TEST_BIN_DIR "/tools/ledger-replay"};
    size_t n = 1;
    for (; args[n - 1] && n < 23; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    cr_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}
