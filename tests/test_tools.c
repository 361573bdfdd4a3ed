/*
 * test_tools.c -- the tool policies (policies/tools/): calculator,
 * read_file and http_get, each run through the real engine by a root
 * policy that calls it, so every result is recorded in a ledger and a
 * continued run serves it without running the tool again.  HTTP is real,
 * over loopback, against tests/http_server.py, which each HTTP test starts.
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * The root policy: {"tool": name, "args": {...}} calls the tool with args
 * and returns {"got": <its result or its error object>}.
 */
static int use_tool(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                    void *user)
{
    (void)user;
    const char *tool = NULL;
    const cJSON *args = NULL;
    int st = pl_json_unpack(action->payload, "{s:s, s:o}", "tool", &tool,
                            "args", &args);
    if (st)
        return st;
    /* "deadline_in_ms": the call's deadline, from the recorded clock */
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(action->payload,
                                                       "deadline_in_ms");
    int64_t now;
    if (cJSON_IsNumber(in) &&
        ((st = pl_ctx_now(&now, ctx)) ||
         (st = pl_ctx_set_deadline(ctx, now + (int64_t)in->valuedouble))))
        return st;
    cJSON *r = NULL;
    st = pl_ctx_invoke(&r, ctx, tool, args);
    if (st && st != PL_ERESULT)
        return st;
    return pl_steps_add_resultf(out, "{s:o}", "got", r);
}

typedef struct fixture {
    pl_registry *reg;
    pl_tools *tools;
    pl_engine *engine;
    char dir[4096]; /* the sandbox directory */
    char outside[4096];
    int runs;
    long deadline_in_ms; /* not 0: the tool's call has this deadline */
} fixture;

static fixture F;

static void make_file(const char *dir, const char *name, const void *data,
                      size_t n)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f, "cannot create %s", p);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Open an engine whose registry has the tools (built from @p o) and
 * use_tool.  The sandbox is F.dir, with F.outside beside it. */
static void open_with(pl_tools_options *o)
{
    const char *d = t_tmpdir();
    snprintf(F.dir, sizeof F.dir, "%s/work", d);
    snprintf(F.outside, sizeof F.outside, "%s/outside", d);
    cr_assert(mkdir(F.dir, 0755) == 0);
    cr_assert(mkdir(F.outside, 0755) == 0);
    make_file(F.outside, "secret", "secret", 6);
    if (o && !o->root)
        o->root = F.dir;
    pl_tools_options defaults = PL_TOOLS_OPTIONS_INIT;
    defaults.root = F.dir;
    int st = pl_tools_new(&F.tools, o ? o : &defaults);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    st = pl_tools_register(F.reg, F.tools);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(F.reg, "use_tool", use_tool, NULL), PL_OK);
    F.engine = t_engine(t_store_path(), F.reg, PL_DURABILITY_PROCESS);
}

static void close_all(void)
{
    pl_engine_close(F.engine);
    pl_registry_free(F.reg);
    pl_tools_free(F.tools);
    memset(&F, 0, sizeof F);
}

/*
 * Run @p tool with @p args (JSON text) in a new run; expect it to complete
 * and return what the tool gave (caller frees).  The run id goes to
 * @p run_id (64 bytes).
 */
static cJSON *run_tool_id(const char *tool, const char *args, char *run_id)
{
    snprintf(run_id, 64, "r%d", ++F.runs);
    cJSON *payload = cJSON_CreateObject();
    cJSON_AddStringToObject(payload, "tool", tool);
    cJSON_AddItemToObject(payload, "args", t_json(args));
    if (F.deadline_in_ms)
        cJSON_AddNumberToObject(payload, "deadline_in_ms",
                                (double)F.deadline_in_ms);
    pl_action root = PL_ACTION_INIT;
    root.policy = "use_tool";
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = run_id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, F.engine, &root, &ro);
    cJSON_Delete(payload);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run %s: %s", run_id,
                 o->reason ? o->reason : "");
    cr_assert_eq(o->calls_executed, 1);
    cJSON *got = cJSON_Duplicate(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "got"), 1);
    cr_assert_not_null(got);
    pl_outcome_free(o);
    return got;
}

static cJSON *run_tool(const char *tool, const char *args)
{
    char id[64];
    return run_tool_id(tool, args, id);
}

/* Continue a completed run: the tool's result must come from the ledger. */
static cJSON *continue_served(const char *run_id)
{
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, F.engine, run_id, NULL);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(o->calls_executed, 0, "the tool ran again");
    cr_expect_eq(o->calls_served, 1);
    cJSON *got = cJSON_Duplicate(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "got"), 1);
    pl_outcome_free(o);
    return got;
}

static const char *str_of(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static double num_of(const cJSON *v, const char *key)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, key);
    cr_assert(cJSON_IsNumber(n), "no number '%s' in %s", key, t_text(v));
    return n->valuedouble;
}

static bool bool_of(const cJSON *v, const char *key)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(v, key);
    cr_assert(cJSON_IsBool(b), "no bool '%s'", key);
    return cJSON_IsTrue(b);
}

/* The tool must have answered with the error @p code, whose message holds
 * @p what. */
static void expect_error(cJSON *got, const char *code, const char *what)
{
    char *text = t_text(got);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(got, "error")),
              "not an error: %s", text);
    const char *c = str_of(got, "code");
    cr_expect(c && strcmp(c, code) == 0, "expected %s, got %s", code, text);
    const char *m = str_of(got, "message");
    cr_expect(m && strstr(m, what), "expected \"%s\" in %s", what, text);
    free(text);
    cJSON_Delete(got);
}

static void expect_calc(const char *expr, double want)
{
    cJSON *args = cJSON_CreateObject();
    cJSON_AddStringToObject(args, "expression", expr);
    char *a = t_text(args);
    cJSON *got = run_tool("calculator", a);
    char *text = t_text(got);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(got, "result");
    cr_expect(cJSON_IsNumber(r) && r->valuedouble == want,
              "%s: expected %g, got %s", expr, want, text);
    free(text);
    free(a);
    cJSON_Delete(args);
    cJSON_Delete(got);
}

static void expect_calc_error(const char *expr, const char *what)
{
    cJSON *args = cJSON_CreateObject();
    cJSON_AddStringToObject(args, "expression", expr);
    char *a = t_text(args);
    expect_error(run_tool("calculator", a), PL_ERR_INVALID_INPUT, what);
    free(a);
    cJSON_Delete(args);
}

/* ---- the HTTP server ----------------------------------------------------- */

static pid_t server_pid;
static int server_port;

static void server_start(void)
{
    char script[4096];
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    cr_assert_not_null(slash);
    snprintf(slash + 1, sizeof script - (size_t)(slash + 1 - script),
             "http_server.py");
    int fds[2];
    cr_assert(pipe(fds) == 0);
    server_pid = fork();
    cr_assert(server_pid >= 0);
    if (server_pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp("python3", "python3", script, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    cr_assert_not_null(f);
    char line[64] = {0};
    cr_assert_not_null(fgets(line, sizeof line, f),
                       "the test server did not start (python3 %s)", script);
    fclose(f);
    char *end;
    long port = strtol(line, &end, 10);
    cr_assert(port > 0 && port < 65536 && (*end == '\n' || !*end));
    server_port = (int)port;
}

static void server_stop(void)
{
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = 0;
    }
}

/* {"url": "http://127.0.0.1:PORT<path>"} */
static char *url_args(const char *path)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", server_port, path);
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "url", url);
    char *s = t_text(a);
    cJSON_Delete(a);
    return s;
}

static cJSON *get(const char *path)
{
    char *a = url_args(path);
    cJSON *got = run_tool("http_get", a);
    free(a);
    return got;
}

static void http_fixture(void)
{
    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    o.timeout_ms = 700; /* /hang must time out; the rest answer at once */
    o.connect_timeout_ms = 2000;
    o.max_body_bytes = 64 * 1024;
    o.max_redirects = 3;
    open_with(&o);
    server_start();
}

static void http_done(void)
{
    server_stop();
    close_all();
}

/* ------------------------------------------------------------------------ */
/* Registration                                                             */
/* ------------------------------------------------------------------------ */

Test(tools, registered_with_descriptions_and_schemas)
{
    open_with(NULL);
    const char *names[] = {"calculator", "read_file", "http_get"};
    for (size_t i = 0; i < 3; i++) {
        const pl_policy_def *d = pl_registry_find(F.reg, names[i]);
        cr_assert_not_null(d, "%s not registered", names[i]);
        cr_expect(d->description && *d->description);
        cJSON *schema = cJSON_Parse(d->input_schema);
        cr_assert_not_null(schema, "%s: schema is not JSON", names[i]);
        cr_expect_str_eq(str_of(schema, "type"), "object");
        cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(schema,
                                                            "required"));
        cr_expect(d->idempotent, "%s should be idempotent", names[i]);
        cJSON_Delete(schema);
    }
    /* Twice: nothing is registered the second time. */
    size_t before = pl_registry_count(F.reg);
    cr_expect_eq(pl_tools_register(F.reg, F.tools), PL_EEXIST);
    cr_expect(strstr(pl_errmsg(), "calculator") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_registry_count(F.reg), before);
    cr_expect_eq(pl_tools_register(NULL, F.tools), PL_EINVAL);
    cr_expect_eq(pl_tools_register(F.reg, NULL), PL_EINVAL);
    /* A later name taken: the names are checked first, so none is added */
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "read_file", use_tool, NULL), PL_OK);
    cr_expect_eq(pl_tools_register(reg, F.tools), PL_EEXIST);
    cr_expect(strstr(pl_errmsg(), "read_file") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_registry_count(reg), 1);
    cr_expect_null(pl_registry_find(reg, "calculator"));
    pl_registry_free(reg);
    close_all();
}

Test(tools, without_a_root_there_is_no_read_file)
{
    pl_tools *t = NULL;
    cr_assert_eq(pl_tools_new(&t, NULL), PL_OK, "%s", pl_errmsg());
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_tools_register(reg, t), PL_OK);
    cr_expect_not_null(pl_registry_find(reg, "calculator"));
    cr_expect_not_null(pl_registry_find(reg, "http_get"));
    cr_expect_null(pl_registry_find(reg, "read_file"));
    pl_registry_free(reg);
    pl_tools_free(t);
    pl_tools_free(NULL);
}

Test(tools, bad_options)
{
    pl_tools *t = (pl_tools *)1;
    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    o.version = 7;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    cr_expect_null(t);
    cr_expect_eq(pl_tools_new(NULL, NULL), PL_EINVAL);
    const char *bad[][1] = {{"ftp://127.0.0.1"},
                            {"http://127.0.0.1/path"},
                            {"http://h?x=1"},
                            {"not a url"},
                            {"file://"}, /* no root */
                            {NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = (pl_tools_options)PL_TOOLS_OPTIONS_INIT;
        o.allow = bad[i];
        o.n_allow = 1;
        cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL, "entry %zu: %s", i,
                     pl_errmsg());
    }
    o = (pl_tools_options)PL_TOOLS_OPTIONS_INIT;
    o.timeout_ms = -1;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    o = (pl_tools_options)PL_TOOLS_OPTIONS_INIT;
    o.max_redirects = -2;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    o = (pl_tools_options)PL_TOOLS_OPTIONS_INIT;
    o.max_body_bytes = (size_t)-1;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "at most") != NULL, "%s", pl_errmsg());
    o = (pl_tools_options)PL_TOOLS_OPTIONS_INIT;
    o.root = "/nonexistent/policyledger/dir";
    cr_expect_eq(pl_tools_new(&t, &o), PL_ENOTFOUND);
}

/* ------------------------------------------------------------------------ */
/* calculator                                                               */
/* ------------------------------------------------------------------------ */

Test(tools, calculator_evaluates)
{
    open_with(NULL);
    expect_calc("1 + 2 * 3", 7);
    expect_calc("(1 + 2) * 3", 9);
    expect_calc("-2 ^ 2", -4);
    expect_calc("2 ^ 3 ^ 2", 512);
    expect_calc("2 ^ -1", 0.5);
    expect_calc("10 % 4", 2);
    expect_calc("-7 % 3", -1);
    expect_calc("7 / 2", 3.5);
    expect_calc("--3", 3);
    expect_calc("+-+3", -3);
    expect_calc("1.5e3 + .5", 1500.5);
    expect_calc("2.E2", 200);
    expect_calc("-(4 - 6)", 2);
    expect_calc("  42\n", 42);
    expect_calc("1 - 1", 0);
    expect_calc("-0", 0);
    expect_calc("8 - 3 - 2", 3);
    expect_calc("64 / 4 / 2", 8);
    expect_calc("(1 + 2) * -3 ^ 2", -27); /* the guide's example */
    expect_calc("2 * (3 + 4) ^ 2", 98);   /* the header's */
    close_all();
}

Test(tools, calculator_refuses_bad_input_as_data)
{
    open_with(NULL);
    expect_calc_error("1 / 0", "division by zero at offset 2");
    expect_calc_error("5 % (2 - 2)", "remainder by zero");
    expect_calc_error("10 ^ 400", "overflows");
    expect_calc_error("1e400", "overflows");
    expect_calc_error("1e308 * 10", "overflows");
    expect_calc_error("(-8) ^ 0.5", "not a number");
    expect_calc_error("0 ^ -1", "overflows");
    expect_calc_error("2 +", "at the end");
    expect_calc_error("abc", "offset 0");
    expect_calc_error("1 2", "an operator or the end at offset 2");
    expect_calc_error("((1)", "never closed");
    expect_calc_error("(1))", "offset 3");
    expect_calc_error("", "empty expression");
    expect_calc_error("   ", "empty expression");
    expect_calc_error("1e", "exponent");
    expect_calc_error("1e+", "exponent");
    expect_calc_error("0x10", "offset 1");
    expect_calc_error("inf", "offset 0");
    expect_calc_error("nan", "offset 0");
    expect_calc_error(".", "offset 0");
    expect_calc_error("1 + \x01", "0x01");
    expect_calc_error("3 \xc3\xa9", "0xc3");

    /* Nesting: 64 levels are fine, 65 are not. */
    static char e[20000];
    size_t n = 0;
    for (int i = 0; i < 64; i++)
        e[n++] = '(';
    e[n++] = '1';
    for (int i = 0; i < 64; i++)
        e[n++] = ')';
    e[n] = '\0';
    expect_calc(e, 1);
    n = 0;
    for (int i = 0; i < 65; i++)
        e[n++] = '(';
    e[n++] = '1';
    for (int i = 0; i < 65; i++)
        e[n++] = ')';
    e[n] = '\0';
    expect_calc_error(e, "nested deeper than 64");
    memset(e, '-', 200);
    e[200] = '1';
    e[201] = '\0';
    expect_calc_error(e, "nested deeper than 64");
    /* A long expression: 4096 bytes fine, 4097 not. */
    memset(e, ' ', 4095);
    e[4095] = '1';
    e[4096] = '\0';
    expect_calc(e, 1);
    memset(e, '(', 4097);
    e[4097] = '\0';
    expect_calc_error(e, "longer than 4096");
    memset(e, '(', 19999);
    e[19999] = '\0';
    expect_calc_error(e, "longer than 4096");

    /* Payloads of the wrong shape. */
    expect_error(run_tool("calculator", "{\"expression\": 5}"),
                 PL_ERR_INVALID_INPUT, "expression");
    expect_error(run_tool("calculator", "{}"), PL_ERR_INVALID_INPUT,
                 "expression");
    expect_error(run_tool("calculator", "{\"expression\":\"1\",\"x\":1}"),
                 PL_ERR_INVALID_INPUT, "x");
    close_all();
}

Test(tools, calculator_result_is_served_on_continue)
{
    open_with(NULL);
    char id[64];
    cJSON *got = run_tool_id("calculator", "{\"expression\":\"6*7\"}", id);
    cr_expect_eq(num_of(got, "result"), 42);
    cJSON *again = continue_served(id);
    cr_expect(cJSON_Compare(got, again, 1));
    cJSON_Delete(got);
    cJSON_Delete(again);
    close_all();
}

/* ------------------------------------------------------------------------ */
/* read_file                                                                */
/* ------------------------------------------------------------------------ */

Test(tools, read_file_reads_and_replay_serves)
{
    open_with(NULL);
    make_file(F.dir, "notes.txt", "caf\xc3\xa9 au lait\n", 14);
    char id[64];
    cJSON *got = run_tool_id("read_file", "{\"path\":\"notes.txt\"}", id);
    cr_expect_str_eq(str_of(got, "content"), "caf\xc3\xa9 au lait\n");
    cr_expect_eq(num_of(got, "bytes"), 14);
    cr_expect(!bool_of(got, "truncated"));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(got, "note"));

    /* The file goes away: the recorded result is served, nothing read. */
    char p[8400];
    snprintf(p, sizeof p, "%s/notes.txt", F.dir);
    cr_assert(unlink(p) == 0);
    cJSON *again = continue_served(id);
    cr_expect(cJSON_Compare(got, again, 1));
    cJSON_Delete(again);
    cJSON_Delete(got);
    /* A new run does read, and finds nothing. */
    expect_error(run_tool("read_file", "{\"path\":\"notes.txt\"}"),
                 PL_ERR_NOT_FOUND, "notes.txt");
    close_all();
}

Test(tools, read_file_errors_as_data)
{
    open_with(NULL);
    char p[8400];
    snprintf(p, sizeof p, "%s/sub", F.dir);
    cr_assert(mkdir(p, 0755) == 0);
    make_file(F.dir, "bin", "ab\0cd", 5);
    make_file(F.dir, "latin1", "caf\xe9", 4);
    snprintf(p, sizeof p, "%s/out", F.dir);
    cr_assert(symlink("../outside/secret", p) == 0);

    expect_error(run_tool("read_file", "{\"path\":\"../outside/secret\"}"),
                 PL_ERR_FORBIDDEN, "../outside/secret");
    expect_error(run_tool("read_file", "{\"path\":\"out\"}"), PL_ERR_FORBIDDEN,
                 "out");
    expect_error(run_tool("read_file", "{\"path\":\"/etc/passwd\"}"),
                 PL_ERR_FORBIDDEN, "/etc/passwd");
    expect_error(run_tool("read_file", "{\"path\":\"missing\"}"),
                 PL_ERR_NOT_FOUND, "missing");
    expect_error(run_tool("read_file", "{\"path\":\"bin/x\"}"),
                 PL_ERR_NOT_FOUND, "not a directory");
    expect_error(run_tool("read_file", "{\"path\":\"sub\"}"),
                 PL_ERR_INVALID_INPUT, "a directory");
    expect_error(run_tool("read_file", "{\"path\":\"bin\"}"),
                 PL_ERR_INVALID_INPUT, "offset 2");
    expect_error(run_tool("read_file", "{\"path\":\"latin1\"}"),
                 PL_ERR_INVALID_INPUT, "0xe9");
    /* a FIFO no one writes is refused, not waited on for ever */
    snprintf(p, sizeof p, "%s/pipe", F.dir);
    cr_assert(mkfifo(p, 0600) == 0);
    expect_error(run_tool("read_file", "{\"path\":\"pipe\"}"),
                 PL_ERR_INVALID_INPUT, "a special file");
#if PL_WITH_CURL
    char url[8500];
    snprintf(url, sizeof url, "{\"url\":\"file://%s\"}", p);
    expect_error(run_tool("http_get", url), PL_ERR_INVALID_INPUT,
                 "a special file");
#endif
    expect_error(run_tool("read_file", "{\"path\":\"\"}"), PL_ERR_INVALID_INPUT,
                 "empty path");
    expect_error(run_tool("read_file", "{\"path\":\"a\\nb\"}"),
                 PL_ERR_INVALID_INPUT, "0x0a");
    expect_error(run_tool("read_file", "{\"path\":7}"), PL_ERR_INVALID_INPUT,
                 "path");
    expect_error(run_tool("read_file", "{\"path\":\"x\",\"mode\":\"w\"}"),
                 PL_ERR_INVALID_INPUT, "mode");
    static char longp[5200];
    memset(longp, 0, sizeof longp);
    memcpy(longp, "{\"path\":\"", 9);
    memset(longp + 9, 'a', 5000);
    memcpy(longp + 5009, "\"}", 2);
    expect_error(run_tool("read_file", longp), PL_ERR_INVALID_INPUT,
                 "longer than 4095");
    close_all();
}

Test(tools, read_file_cut_at_the_cap)
{
    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    o.max_file_bytes = 999;
    open_with(&o);
    static char big[4000];
    for (size_t i = 0; i < sizeof big; i += 2)
        big[i] = (char)0xc3, big[i + 1] = (char)0xa9; /* "é" */
    make_file(F.dir, "big.txt", big, sizeof big);
    make_file(F.dir, "exact.txt", big, 998);
    cJSON *got = run_tool("read_file", "{\"path\":\"big.txt\"}");
    cr_expect(bool_of(got, "truncated"));
    cr_expect_eq(num_of(got, "bytes"), 998, "cut at a character boundary");
    cr_expect_eq(strlen(str_of(got, "content")), 998);
    cr_expect(strstr(str_of(got, "note"), "larger than 999 bytes"));
    cJSON_Delete(got);
    got = run_tool("read_file", "{\"path\":\"exact.txt\"}");
    cr_expect(!bool_of(got, "truncated"));
    cr_expect_eq(num_of(got, "bytes"), 998);
    cJSON_Delete(got);
    close_all();
}

/* ------------------------------------------------------------------------ */
/* http_get                                                                 */
/* ------------------------------------------------------------------------ */

Test(tools, http_get_200_and_replay_serves)
{
    http_fixture();
    char id[64];
    char *a = url_args("/ok");
    cJSON *got = run_tool_id("http_get", a, id);
    free(a);
    cr_expect_eq(num_of(got, "status"), 200);
    cr_expect_str_eq(str_of(got, "body"), "hello");
    cr_expect_str_eq(str_of(got, "content_type"), "text/plain");
    cr_expect(!bool_of(got, "truncated"));
    /* With the server gone, the continued run is served from its ledger. */
    server_stop();
    cJSON *again = continue_served(id);
    cr_expect(cJSON_Compare(got, again, 1));
    cJSON_Delete(again);
    cJSON_Delete(got);
    /* A new run does connect, and is refused. */
    char *b = url_args("/ok");
    expect_error(run_tool("http_get", b), PL_ERR_RETRYABLE_SERVER, "GET");
    free(b);
    http_done();
}

Test(tools, http_get_sends_the_idempotency_key)
{
    http_fixture();
    char id[64];
    char *a = url_args("/key");
    cJSON *got = run_tool_id("http_get", a, id);
    free(a);
    char want[128];
    snprintf(want, sizeof want, "%s/0:0", id);
    cr_expect_str_eq(str_of(got, "body"), want);
    cJSON_Delete(got);
    http_done();
}

Test(tools, http_get_status_codes_as_data)
{
    http_fixture();
    expect_error(get("/notfound"), PL_ERR_NOT_FOUND, "HTTP 404");
    expect_error(get("/auth"), PL_ERR_UNAUTHORIZED, "HTTP 401");
    expect_error(get("/forbidden"), PL_ERR_FORBIDDEN, "HTTP 403");
    expect_error(get("/gone"), PL_ERR_NOT_FOUND, "HTTP 410");
    expect_error(get("/teapot"), PL_ERR_INVALID_INPUT, "HTTP 418");
    expect_error(get("/limited"), PL_ERR_RATE_LIMITED, "Retry-After: 7");
    expect_error(get("/error"), PL_ERR_RETRYABLE_SERVER, "HTTP 500");
    expect_error(get("/unavailable"), PL_ERR_RETRYABLE_SERVER, "HTTP 503");
    expect_error(get("/binary"), PL_ERR_INVALID_INPUT, "not UTF-8");
    http_done();
}

Test(tools, http_get_timeout)
{
    http_fixture();
    expect_error(get("/hang"), PL_ERR_TIMEOUT, "/hang");
    /* timeout_ms is the whole request's, redirects included (0.8 s here) */
    expect_error(get("/slow-redirect"), PL_ERR_TIMEOUT, "700 ms");
    /* the call's deadline (a timeout decorator's) when it comes first, and
     * one already passed sends nothing (400 ms: before the 700 ms of
     * timeout_ms, and after a loaded host's stall before the request) */
    F.deadline_in_ms = 400;
    expect_error(get("/hang"), PL_ERR_TIMEOUT, "the call's deadline");
    F.deadline_in_ms = -1000;
    expect_error(get("/hang"), PL_ERR_TIMEOUT, "was not sent");
    http_done();
}

Test(tools, http_get_cuts_an_oversized_body)
{
    http_fixture();
    cJSON *got = get("/big");
    cr_expect_eq(num_of(got, "status"), 200);
    cr_expect(bool_of(got, "truncated"));
    cr_expect_eq(num_of(got, "bytes"), 64 * 1024);
    cr_expect_eq(strlen(str_of(got, "body")), 64 * 1024);
    cr_expect(strstr(str_of(got, "note"), "larger than 65536 bytes"));
    cJSON_Delete(got);
    http_done();
}

Test(tools, http_get_redirects_checked_again)
{
    http_fixture();
    cJSON *got = get("/redirect-in");
    cr_expect_eq(num_of(got, "status"), 200);
    cr_expect_str_eq(str_of(got, "body"), "hello");
    cr_expect(strstr(str_of(got, "url"), "/ok") != NULL);
    cJSON_Delete(got);
    expect_error(get("/redirect-out"), PL_ERR_FORBIDDEN, "example.com");
    expect_error(get("/redirect-file"), PL_ERR_FORBIDDEN, "file:///etc/passwd");
    expect_error(get("/redirect-loop"), PL_ERR_INVALID_INPUT,
                 "more than 3 redirects");
    http_done();
}

Test(tools, http_get_refuses_urls_outside_the_allowlist)
{
    http_fixture();
    make_file(F.dir, "page.txt", "from a file", 11);
    expect_error(run_tool("http_get", "{\"url\":\"http://example.com/\"}"),
                 PL_ERR_FORBIDDEN, "not in the allowlist");
    expect_error(run_tool("http_get",
                          "{\"url\":\"http://127.0.0.1@example.com/\"}"),
                 PL_ERR_FORBIDDEN, "example.com");
    expect_error(run_tool("http_get", "{\"url\":\"http://127.0.0.1.nip.io/\"}"),
                 PL_ERR_FORBIDDEN, "127.0.0.1.nip.io");
    expect_error(run_tool("http_get", "{\"url\":\"https://127.0.0.1/\"}"),
                 PL_ERR_FORBIDDEN, "https://127.0.0.1");
    expect_error(run_tool("http_get", "{\"url\":\"ftp://127.0.0.1/x\"}"),
                 PL_ERR_FORBIDDEN, "ftp");
    expect_error(run_tool("http_get", "{\"url\":\"file:///etc/passwd\"}"),
                 PL_ERR_FORBIDDEN, "/etc/passwd");
    expect_error(run_tool("http_get", "{\"url\":\"file://evil.com/x\"}"),
                 PL_ERR_INVALID_INPUT, "evil.com");
    expect_error(run_tool("http_get", "{\"url\":\"not a url\"}"),
                 PL_ERR_INVALID_INPUT, "not a valid URL");
    expect_error(run_tool("http_get", "{\"url\":\"http://127.0.0.1/\\r\\n\"}"),
                 PL_ERR_INVALID_INPUT, "control byte");
    expect_error(run_tool("http_get", "{\"uri\":\"http://127.0.0.1/\"}"),
                 PL_ERR_INVALID_INPUT, "url");

    /* file:// reads through the sandbox. */
    cJSON *u = cJSON_CreateObject();
    char url[8400];
    snprintf(url, sizeof url, "file://%s/page.txt", F.dir);
    cJSON_AddStringToObject(u, "url", url);
    char *a = t_text(u);
    cJSON *got = run_tool("http_get", a);
    cr_expect_str_eq(str_of(got, "body"), "from a file");
    cJSON_Delete(got);
    free(a);
    snprintf(url, sizeof url, "file://%s/../outside/secret", F.dir);
    cJSON_ReplaceItemInObject(u, "url", cJSON_CreateString(url));
    a = t_text(u);
    expect_error(run_tool("http_get", a), PL_ERR_FORBIDDEN, "secret");
    free(a);
    cJSON_Delete(u);
    http_done();
}

/* Also: a proxy the environment names is never used (a dead one here: a
 * request through it would fail), and max_redirects 0 follows none. */
Test(tools, http_get_with_an_allowlist_of_its_own)
{
    const char *allow[] = {"http://localhost"};
    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    o.allow = allow;
    o.n_allow = 1;
    o.timeout_ms = 5000;
    o.max_redirects = 0;
    open_with(&o);
    server_start();
    const char *vars[] = {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        cr_assert_eq(setenv(vars[i], "http://127.0.0.1:1", 1), 0);
    cr_assert_eq(unsetenv("no_proxy"), 0);
    cr_assert_eq(unsetenv("NO_PROXY"), 0);
    char url[128];
    snprintf(url, sizeof url, "{\"url\":\"http://localhost:%d/ok\"}",
             server_port);
    cJSON *got = run_tool("http_get", url);
    cr_expect_eq(num_of(got, "status"), 200);
    cr_expect_str_eq(str_of(got, "body"), "hello");
    cJSON_Delete(got);
    snprintf(url, sizeof url, "{\"url\":\"http://localhost:%d/redirect-in\"}",
             server_port);
    expect_error(run_tool("http_get", url), PL_ERR_INVALID_INPUT,
                 "more than 0 redirects");
    snprintf(url, sizeof url, "{\"url\":\"http://127.0.0.1:%d/ok\"}",
             server_port);
    expect_error(run_tool("http_get", url), PL_ERR_FORBIDDEN,
                 "not in the allowlist");
    /* No "file://" in the list: file URLs are refused, root or not. */
    expect_error(run_tool("http_get", "{\"url\":\"file:///x\"}"),
                 PL_ERR_FORBIDDEN, "file:///x");
    server_stop();
    close_all();
}

/* ------------------------------------------------------------------------ */
/* The tools as a model sees them: loop + invoke_action                      */
/* ------------------------------------------------------------------------ */

/*
 * model: a scripted stand-in for an LLM.  Its first turn asks for three
 * tools; its next turn answers with a text step listing, for each result
 * in its ledger, the error code or the result's "result" / "content".
 */
static int model(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    char buf[512] = "";
    size_t len = 0, results = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_RESULT)
            continue;
        results++;
        const cJSON *p = pl_step_payload(s);
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "result");
        const char *c = str_of(p, "content");
        if (pl_step_is_error(s))
            len += (size_t)snprintf(buf + len, sizeof buf - len, "[%s]",
                                    pl_step_error_code(s));
        else if (cJSON_IsNumber(r))
            len += (size_t)snprintf(buf + len, sizeof buf - len, "[%g]",
                                    r->valuedouble);
        else
            len += (size_t)snprintf(buf + len, sizeof buf - len, "[%s]",
                                    c ? c : "?");
    }
    if (results)
        return pl_steps_add_text(out, NULL, buf);
    cJSON *calc = t_json("{\"expression\":\"6 * 7\"}");
    cJSON *file = t_json("{\"path\":\"notes.txt\"}");
    cJSON *http = t_json("{\"url\":\"http://127.0.0.1:1/\"}");
    st = pl_steps_add_call(out, "calculator", calc);
    if (!st)
        st = pl_steps_add_call(out, "read_file", file);
    if (!st)
        st = pl_steps_add_call(out, "http_get", http); /* not allowed */
    cJSON_Delete(calc);
    cJSON_Delete(file);
    cJSON_Delete(http);
    return st;
}

static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a, (void)user;
    static const char *const allowed[] = {"calculator", "read_file"};
    pl_decorator decos[2];
    cr_assert_eq(pl_decorator_loop(&decos[0], 4), PL_OK);
    cr_assert_eq(pl_decorator_invoke_action(&decos[1]), PL_OK);
    pl_action call = PL_ACTION_INIT;
    call.policy = "model";
    call.payload = pl_json_empty();
    call.actions = allowed;
    call.n_actions = 2;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, decos, 2);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

Test(tools, a_model_loop_calls_only_the_allowed_tools)
{
    open_with(NULL);
    make_file(F.dir, "notes.txt", "tea", 3);
    cr_assert_eq(pl_registry_add_fn(F.reg, "model", model, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(F.reg, "agent", agent, NULL), PL_OK);

    pl_outcome *o = t_start(F.engine, "agent", "{}", "agent-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(str_of(pl_outcome_result(o), "text"),
                     "[42][tea][NotAllowed]");
    cr_expect_eq(o->calls_executed, 3, "model and the two allowed tools: %llu",
                 (unsigned long long)o->calls_executed);
    pl_outcome_free(o);

    /* Continued: the whole conversation is served, no tool runs. */
    char p[8400];
    snprintf(p, sizeof p, "%s/notes.txt", F.dir);
    cr_assert(unlink(p) == 0);
    cr_assert_eq(pl_run_continue(&o, F.engine, "agent-1", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_str_eq(str_of(pl_outcome_result(o), "text"),
                     "[42][tea][NotAllowed]");
    cr_expect_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    close_all();
}
