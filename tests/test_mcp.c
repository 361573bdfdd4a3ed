/*
 * test_mcp.c -- MCP servers' tools as policies (policies/mcp/): the
 * reference servers from npm (server-everything and server-filesystem,
 * installed into the build tree by tests/npm_setup.sh; the tests that need
 * them are skipped with a message when npm could not fetch them, and fail
 * with PL_NPM_REQUIRED=1, where nothing may skip), and
 * tests/mcp_fake_server.py for a server that pages its tool list, asks
 * the client, or misbehaves.  Every call runs through the real engine and
 * is recorded; a continued run serves it; an engine killed with SIGKILL
 * sends no completed call again.
 */
#include "support.h"

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

#define NPM PL_TEST_BIN_DIR "/npm/node_modules/@modelcontextprotocol"
#define EVERYTHING NPM "/server-everything/dist/index.js"
#define FILESYSTEM NPM "/server-filesystem/dist/index.js"
#define FAKE PL_TEST_SRC_DIR "/mcp_fake_server.py"
#define TAP PL_TEST_SRC_DIR "/mcp_tap.sh"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static bool in_child;         /* the engine that is killed */
static pl_decorator per_call; /* each call's decorator, if set */
static char halt_marker[4200];

/*
 * The root policy: {"calls": [{"tool": name, "args": {...}}, ...]} calls
 * each and returns {"got": [each result or error object]}.
 */
static int use(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
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

typedef struct fixture {
    pl_registry *reg;
    pl_mcp *mcp;
    pl_engine *engine;
    char store[4200];
    char dir[1024]; /* a temporary directory */
} fixture;

static fixture F;

static void need(const char *server) { t_need_npm(server, "mcp_setup"); }

static pl_mcp_options quiet(void)
{
    static char err[4300];
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    snprintf(err, sizeof err, "%s/stderr", F.dir);
    o.stderr_path = err;
    return o;
}

/* A registry with "use", "halt" and the server's tools. */
static int open_reg(const char *name, const char *spec, const pl_mcp_options *o)
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

static void open_all(const char *name, const char *spec,
                     const pl_mcp_options *o)
{
    int st = open_reg(name, spec, o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    if (!F.store[0])
        snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
}

static void close_all(void)
{
    pl_engine_close(F.engine);
    pl_mcp_close(F.mcp);
    pl_registry_free(F.reg);
    F.engine = NULL;
    F.mcp = NULL;
    F.reg = NULL;
}

static void setup(void) { snprintf(F.dir, sizeof F.dir, "%s", t_tmpdir()); }

static void teardown(void)
{
    close_all();
    t_cleanup();
}

/* Run @p calls (JSON text of the "calls" array) as run @p id; the "got"
 * array (caller frees). */
static cJSON *run(const char *id, const char *calls, int executed)
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

static const cJSON *at(const cJSON *got, int i)
{
    const cJSON *r = cJSON_GetArrayItem(got, i);
    cr_assert_not_null(r, "no result %d", i);
    return r;
}

static const char *s_of(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    cr_assert(cJSON_IsString(s), "no string \"%s\" in %s", key, t_text(v));
    return s->valuestring;
}

/* The text of the first content item of a result. */
static const char *first_text(const cJSON *r)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "content");
    cr_assert(cJSON_IsArray(c), "no content in %s", t_text(r));
    return s_of(cJSON_GetArrayItem(c, 0), "text");
}

static void expect_error(const cJSON *r, const char *code, const char *part)
{
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")),
              "not an error: %s", t_text(r));
    cr_expect_str_eq(s_of(r, "code"), code, "%s", t_text(r));
    if (part)
        cr_expect(strstr(s_of(r, "message"), part), "%s", t_text(r));
}

/* How many lines of @p path contain both @p a and @p b. */
static int count_lines(const char *path, const char *a, const char *b)
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

static void wait_for(const char *path, const char *a, const char *b)
{
    for (int i = 0; i < 6000 && count_lines(path, a, b) == 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_gt(count_lines(path, a, b), 0, "never saw %s in %s", a, path);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* server-everything                                                        */
/* ------------------------------------------------------------------------ */

static void open_everything(void)
{
    need(EVERYTHING);
    pl_mcp_options o = quiet();
    open_all("ev", "stdio:node " EVERYTHING " stdio", &o);
}

TestSuite(mcp, .init = setup, .fini = teardown);

Test(mcp, everything_tools_are_registered_with_descriptions_and_schemas)
{
    open_everything();
    cr_expect_str_eq(pl_mcp_protocol_version(F.mcp), "2025-06-18");
    cr_expect_gt(pl_mcp_tool_count(F.mcp), 5);
    const pl_policy_def *d = pl_registry_find(F.reg, "ev.echo");
    cr_assert_not_null(d, "no ev.echo");
    cr_expect_not_null(d->description);
    cr_assert_not_null(d->input_schema);
    cr_expect(strstr(d->input_schema, "\"message\""), "%s", d->input_schema);
    cr_expect(d->idempotent, "echo says readOnlyHint");
    d = pl_registry_find(F.reg, "ev.toggle-simulated-logging");
    cr_assert_not_null(d);
    cr_expect(!d->idempotent, "a tool that changes state is not idempotent");
    cr_expect_eq(d->in_doubt, PL_IN_DOUBT_FAIL);
}

Test(mcp, everything_echo_sum_structured_links_and_image)
{
    open_everything();
    const char *calls =
        "[{\"tool\": \"ev.echo\", \"args\": {\"message\": \"hello\"}},"
        " {\"tool\": \"ev.get-sum\", \"args\": {\"a\": 2, \"b\": 40}},"
        " {\"tool\": \"ev.get-structured-content\","
        "  \"args\": {\"location\": \"Chicago\"}},"
        " {\"tool\": \"ev.get-resource-links\", \"args\": {\"count\": 2}},"
        " {\"tool\": \"ev.get-tiny-image\", \"args\": {}}]";
    cJSON *got = run("r1", calls, 5);
    cr_expect(strstr(first_text(at(got, 0)), "hello"), "%s", t_text(got));
    cr_expect(strstr(first_text(at(got, 1)), "42"), "%s", t_text(at(got, 1)));
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(at(got, 2),
                                                       "structuredContent");
    cr_expect(cJSON_IsObject(sc), "%s", t_text(at(got, 2)));
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(at(got, 3), "content");
    int links = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, c)
    {
        if (strcmp(s_of(it, "type"), "resource_link") == 0) {
            links++;
            cr_expect(strlen(s_of(it, "uri")) > 0);
        }
    }
    cr_expect_eq(links, 2, "%s", t_text(c));
    bool image = false;
    cJSON_ArrayForEach(it,
                       cJSON_GetObjectItemCaseSensitive(at(got, 4), "content"))
    {
        if (strcmp(s_of(it, "type"), "image") == 0) {
            image = true;
            cr_expect_str_eq(s_of(it, "mimeType"), "image/png");
            cr_expect_gt(
                cJSON_GetObjectItemCaseSensitive(it, "bytes")->valuedouble, 0);
        }
    }
    cr_expect(image, "%s", t_text(at(got, 4)));
    cJSON_Delete(got);

    /* a continued run serves every call from the ledger */
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, F.engine, "r1", NULL), PL_OK);
    cr_expect_eq(o->calls_executed, 0);
    pl_outcome_free(o);
}

Test(mcp, everything_image_past_the_inline_cap_is_a_reference)
{
    need(EVERYTHING);
    pl_mcp_options o = quiet();
    o.max_inline_bytes = 16;
    open_all("ev", "stdio:node " EVERYTHING " stdio", &o);
    cJSON *got = run("r1", "[{\"tool\": \"ev.get-tiny-image\"}]", 1);
    const cJSON *it;
    bool seen = false;
    cJSON_ArrayForEach(it,
                       cJSON_GetObjectItemCaseSensitive(at(got, 0), "content"))
    {
        if (strcmp(s_of(it, "type"), "image") == 0) {
            seen = true;
            cr_expect_null(cJSON_GetObjectItemCaseSensitive(it, "data"));
            cr_expect(
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "omitted")));
        }
    }
    cr_expect(seen);
    cJSON_Delete(got);
}

Test(mcp, everything_bad_arguments_are_an_error_result)
{
    open_everything();
    cJSON *got = run("r1",
                     "[{\"tool\": \"ev.get-sum\", \"args\": {\"a\": \"x\"}}]",
                     1);
    expect_error(at(got, 0), PL_ERR_INVALID_INPUT, NULL);
    cJSON_Delete(got);
}

/* ------------------------------------------------------------------------ */
/* server-filesystem                                                        */
/* ------------------------------------------------------------------------ */

Test(mcp, filesystem_reads_lists_and_refuses_a_path_outside_its_roots)
{
    need(FILESYSTEM);
    char root[4300], spec[9000];
    snprintf(root, sizeof root, "%s/root", F.dir);
    cr_assert_eq(mkdir(root, 0755), 0);
    write_file(root, "a.txt", "alpha\n");
    write_file(root, "b.txt", "beta\n");
    write_file(F.dir, "secret.txt", "secret\n");
    snprintf(spec, sizeof spec, "stdio:node " FILESYSTEM " %s", root);
    pl_mcp_options o = quiet();
    open_all("fs", spec, &o);
    cr_expect(pl_registry_find(F.reg, "fs.write_file") &&
              !pl_registry_find(F.reg, "fs.write_file")->idempotent);
    char calls[20000];
    snprintf(calls, sizeof calls,
             "[{\"tool\": \"fs.read_text_file\", \"args\": {\"path\": "
             "\"%s/a.txt\"}},"
             " {\"tool\": \"fs.list_directory\", \"args\": {\"path\": "
             "\"%s\"}},"
             " {\"tool\": \"fs.read_text_file\", \"args\": {\"path\": "
             "\"%s/secret.txt\"}},"
             " {\"tool\": \"fs.read_text_file\", \"args\": {\"path\": "
             "\"%s/none.txt\"}}]",
             root, root, F.dir, root);
    cJSON *got = run("r1", calls, 4);
    cr_expect_str_eq(first_text(at(got, 0)), "alpha\n");
    const char *list = first_text(at(got, 1));
    cr_expect(strstr(list, "a.txt") && strstr(list, "b.txt"), "%s", list);
    expect_error(at(got, 2), PL_ERR_FORBIDDEN, "outside");
    char *refused = t_text(at(got, 2));
    cr_expect(!strstr(refused, "secret\n"), "%s", refused);
    free(refused);
    cr_expect_str_neq(s_of(at(got, 3), "code"), PL_ERR_TOOL_BUG, "%s",
                      t_text(at(got, 3)));
    cJSON_Delete(got);
}

/* ------------------------------------------------------------------------ */
/* Crashes                                                                  */
/* ------------------------------------------------------------------------ */

/* Fork an engine that registers @p spec and runs @p calls as run "c";
 * kill it (SIGKILL) once @p log shows @p a (and @p b). */
static void run_and_kill(const char *spec, const pl_mcp_options *o,
                         const char *calls, const char *log, const char *a,
                         const char *b)
{
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        in_child = true;
        if (open_reg("x", spec, o))
            _exit(11);
        pl_engine *e = NULL;
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_PROCESS;
        if (pl_engine_open(&e, F.store, F.reg, &eo))
            _exit(12);
        char text[8192];
        snprintf(text, sizeof text, "{\"calls\": %s}", calls);
        cJSON *p = cJSON_Parse(text);
        pl_action act = {PL_ACTION_VERSION, "use", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c";
        pl_outcome *out = NULL;
        pl_run_start(&out, e, &act, &ro);
        _exit(3);
    }
    for (int i = 0; i < 6000; i++) {
        if (count_lines(log, a, b) > 0)
            break;
        int status;
        cr_assert_eq(waitpid(pid, &status, WNOHANG), 0,
                     "the engine ended before it was killed (%d)",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    wait_for(log, a, b);
    kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status));
}

static cJSON *continue_c(int executed)
{
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_outcome *r = NULL;
    cr_assert_eq(pl_run_continue(&r, F.engine, "c", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s", r->reason ? r->reason : "");
    cr_expect_eq(r->calls_executed, (uint64_t)executed);
    cJSON *got = cJSON_Duplicate(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(r), "got"), 1);
    pl_outcome_free(r);
    return got;
}

Test(mcp, an_engine_killed_mid_run_sends_no_completed_call_again)
{
    need(EVERYTHING);
    char log[4300], spec[9000];
    snprintf(log, sizeof log, "%s/calls", F.dir);
    snprintf(halt_marker, sizeof halt_marker, "%s/halted", F.dir);
    snprintf(spec, sizeof spec, "stdio:sh " TAP " %s node " EVERYTHING " stdio",
             log);
    pl_mcp_options o = quiet();
    const char
        *calls = "[{\"tool\": \"x.echo\", \"args\": {\"message\": \"one\"}},"
                 " {\"tool\": \"x.get-sum\", \"args\": {\"a\": 1, \"b\": 2}},"
                 " {\"tool\": \"halt\"},"
                 " {\"tool\": \"x.echo\", \"args\": {\"message\": \"three\"}}]";
    run_and_kill(spec, &o, calls, halt_marker, "halted", NULL);
    cr_expect_eq(count_lines(log, "tools/call", "\"one\""), 1);
    cr_expect_eq(count_lines(log, "tools/call", "get-sum"), 1);
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    cJSON *got = continue_c(2); /* halt and the last echo */
    cr_expect(strstr(first_text(at(got, 0)), "one"));
    cr_expect(strstr(first_text(at(got, 1)), "3"));
    cr_expect(strstr(first_text(at(got, 3)), "three"));
    cJSON_Delete(got);
    close_all();
    cr_expect_eq(count_lines(log, "tools/call", "\"one\""), 1,
                 "a completed call was sent again");
    cr_expect_eq(count_lines(log, "tools/call", "get-sum"), 1,
                 "a completed call was sent again");
    cr_expect_eq(count_lines(log, "tools/call", "\"three\""), 1);
}

Test(mcp, an_idempotent_call_in_flight_is_sent_again_with_its_key)
{
    char log[4300], spec[9000];
    snprintf(log, sizeof log, "%s/log", F.dir);
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    write_file(F.dir, "hold", "");
    pl_mcp_options o = quiet();
    const char *idem[] = {"slow"};
    o.idempotent = idem;
    o.n_idempotent = 1;
    run_and_kill(spec, &o, "[{\"tool\": \"x.slow\"}]", log, "tools/call",
                 "slow");
    char hold[4300];
    snprintf(hold, sizeof hold, "%s/hold", F.dir);
    cr_assert_eq(unlink(hold), 0);
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    cJSON *got = continue_c(1);
    cr_expect_str_eq(first_text(at(got, 0)), "done");
    cJSON_Delete(got);
    close_all();
    /* the same key both times: "<run id>/<step>" */
    cr_expect_eq(count_lines(log, "\"slow\"",
                             "\"policyledger/idempotencyKey\":\"c/"),
                 2);
    FILE *f = fopen(log, "r");
    char line[4096], first[128] = "";
    int same = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *k = strstr(line, "idempotencyKey\":\"");
        if (!k || !strstr(line, "\"slow\""))
            continue;
        k += strlen("idempotencyKey\":\"");
        k[strcspn(k, "\"")] = '\0';
        if (!first[0])
            snprintf(first, sizeof first, "%s", k);
        same += strcmp(first, k) == 0;
    }
    if (f)
        fclose(f);
    cr_expect_eq(same, 2, "the keys differ");
}

Test(mcp, a_call_in_flight_of_a_tool_not_idempotent_is_in_doubt)
{
    char log[4300], spec[9000];
    snprintf(log, sizeof log, "%s/log", F.dir);
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    write_file(F.dir, "hold", "");
    pl_mcp_options o = quiet();
    run_and_kill(spec, &o, "[{\"tool\": \"x.slow\"}]", log, "tools/call",
                 "slow");
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    cJSON *got = continue_c(0);
    expect_error(at(got, 0), PL_ERR_IN_DOUBT, NULL);
    cJSON_Delete(got);
    close_all();
    cr_expect_eq(count_lines(log, "tools/call", "\"slow\""), 1, "sent again");
}

/* ------------------------------------------------------------------------ */
/* A fake server                                                            */
/* ------------------------------------------------------------------------ */

static void open_fake(const char *mode, pl_mcp_options *o)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " %s %s", mode, F.dir);
    open_all("fake", spec, o);
}

static int register_fake(const char *mode, pl_mcp_options *o)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " %s %s", mode, F.dir);
    return open_reg("fake", spec, o);
}

Test(mcp, tool_list_pages_are_followed_and_server_requests_answered)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    cr_expect_eq(pl_mcp_tool_count(F.mcp), 5);
    cr_expect_not_null(pl_registry_find(F.reg, "fake.asks"));
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.asks\"},"
                     " {\"tool\": \"fake.echo\", \"args\": {\"text\": \"hi\"}},"
                     " {\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"File not found: x\"}},"
                     " {\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"Something broke\"}},"
                     " {\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"bad params\", \"rpc\": -32602}},"
                     " {\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"late\", \"rpc\": -32001}},"
                     " {\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"internal\", \"rpc\": -32603}}]",
                     7);
    cr_expect_str_eq(first_text(at(got, 0)), "asked");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(at(got, 1),
                                                       "structuredContent");
    cr_expect_str_eq(s_of(cJSON_GetObjectItemCaseSensitive(sc, "args"), "text"),
                     "hi");
    expect_error(at(got, 2), PL_ERR_NOT_FOUND, "File not found: x");
    expect_error(at(got, 3), PL_ERR_TOOL_BUG, "Something broke");
    expect_error(at(got, 4), PL_ERR_INVALID_INPUT, "error -32602: bad params");
    expect_error(at(got, 5), PL_ERR_TIMEOUT, "error -32001: late");
    expect_error(at(got, 6), PL_ERR_TOOL_BUG, "error -32603: internal");
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "\"s1\"", "\"result\""), 1, "no pong");
    cr_expect_eq(count_lines(log, "\"s2\"", "-32601"), 1);
    cr_expect_eq(count_lines(log, "notifications/initialized", NULL), 1);
    cr_expect_eq(count_lines(log, "\"cursor\"", "page2"), 1);
}

Test(mcp, the_validate_decorator_checks_arguments_against_input_schema)
{
    pl_mcp_options o = quiet();
    int st = register_fake("ok", &o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    pl_schema_cache *cache = NULL;
    cr_assert_eq(pl_schema_cache_new(&cache), PL_OK);
    cr_assert_eq(pl_decorator_validate(&per_call, cache), PL_OK, "%s",
                 pl_errmsg());
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    /* "text" is required and a string: the server is never asked */
    cJSON *got = run("r1", "[{\"tool\": \"fake.fail\", \"args\": {}}]", -1);
    expect_error(at(got, 0), PL_ERR_INVALID_INPUT, NULL);
    cJSON_Delete(got);
    close_all();
    pl_schema_cache_free(cache);
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "tools/call", NULL), 0);
}

Test(mcp, a_server_that_prints_garbage_is_a_timeout_not_a_hang)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 500;
    open_fake("garbage", &o);
    cJSON *got = run("r1", "[{\"tool\": \"fake.echo\"}]", 1);
    expect_error(at(got, 0), PL_ERR_TIMEOUT, "not JSON-RPC were skipped");
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "notifications/cancelled", "\"requestId\""),
                 1);
}

Test(mcp, a_50_MB_answer_is_a_clear_error_and_the_server_restarts)
{
    pl_mcp_options o = quiet();
    open_fake("huge", &o);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.echo\"}, {\"tool\": "
                     "\"fake.echo\"}]",
                     2);
    expect_error(at(got, 0), PL_ERR_TOOL_BUG, "longer than 4194304 bytes");
    expect_error(at(got, 1), PL_ERR_TOOL_BUG, "longer than");
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "\"initialize\"", NULL), 2,
                 "the server was not started again");
}

Test(mcp, a_server_that_exits_or_never_answers_fails_registration)
{
    /* a busy machine may take seconds to start python: only "silent"
     * waits for its whole timeout */
    pl_mcp_options o = quiet();
    o.start_timeout_ms = 20000;
    int st = register_fake("exit", &o);
    cr_expect_eq(st, PL_EIO);
    cr_expect(strstr(pl_errmsg(), "exited"), "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    close_all();
    o.start_timeout_ms = 1000;
    st = register_fake("silent", &o);
    cr_expect_eq(st, PL_EIO);
    cr_expect(strstr(pl_errmsg(), "no answer in time"), "%s", pl_errmsg());
    close_all();
    o.start_timeout_ms = 20000;
    st = register_fake("badversion", &o);
    cr_expect_eq(st, PL_EIO);
    cr_expect(strstr(pl_errmsg(), "1999-01-01"), "%s", pl_errmsg());
    close_all();
    st = open_reg("fake", "stdio:/nonexistent/server", &o);
    cr_expect_eq(st, PL_EIO);
    cr_expect(strstr(pl_errmsg(), "cannot run"), "%s", pl_errmsg());
}

Test(mcp, a_server_that_dies_is_started_again_at_the_next_call)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.die\"},"
                     " {\"tool\": \"fake.echo\", \"args\": {\"text\": \"c\"}}]",
                     2);
    expect_error(at(got, 0), PL_ERR_RETRYABLE_SERVER, "exited");
    cr_expect(strstr(first_text(at(got, 1)), "\"c\""), "%s", t_text(got));
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "\"initialize\"", NULL), 2);
    cr_expect_eq(count_lines(log, "tools/list", NULL), 2,
                 "one list, in two "
                 "pages, not read again");
}

Test(mcp, bad_arguments_are_refused)
{
    pl_mcp_options o = quiet();
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "fs", "node x", &o), PL_EINVAL);
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "fs", "stdio:   ", &o),
                 PL_EINVAL);
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "a.b", "stdio:true", &o),
                 PL_EINVAL);
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "", "stdio:true", &o),
                 PL_EINVAL);
    o.version = 99;
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "fs", "stdio:true", &o),
                 PL_EINVAL);
    o = quiet();
    o.timeout_ms = -1;
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "fs", "stdio:true", &o),
                 PL_EINVAL);
    cr_expect_null(F.mcp);
    cr_expect_eq(pl_registry_count(F.reg), 0);
    pl_mcp_close(NULL);
}

Test(mcp, a_name_taken_registers_none)
{
    pl_mcp_options o = quiet();
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "fake.slow";
    d.fn = use;
    cr_assert_eq(pl_registry_add(F.reg, &d), PL_OK);
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "fake", spec, &o), PL_EEXIST);
    cr_expect_eq(pl_registry_count(F.reg), 1);
}

Test(mcp, a_call_records_the_tool_list_it_was_made_against)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    cJSON *got = run("r1", "[{\"tool\": \"fake.echo\"}]", 1);
    cJSON_Delete(got);
    const cJSON *snap = NULL;
    pl_steps *s = NULL;
    for (int i = 0; i < 4 && !snap; i++) {
        char path[16];
        snprintf(path, sizeof path, "0.%d", i);
        pl_steps_free(s);
        s = NULL;
        if (pl_run_ledger(&s, F.engine, "r1", path) != PL_OK)
            continue;
        for (size_t k = 0; k < pl_steps_count(s); k++) {
            const pl_step *st = pl_steps_at(s, k);
            if (pl_step_type_of(st) == PL_STEP_SIDE_EFFECT)
                snap = pl_step_payload(st);
        }
    }
    cr_assert_not_null(snap, "no side effect in the tool's ledger");
    cr_expect_str_eq(s_of(snap, "name"), "mcp.tools");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(snap, "value");
    cr_expect_str_eq(s_of(v, "server"), "fake");
    cr_expect_str_eq(s_of(v, "protocol"), "2025-06-18");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(v, "tools")->valuedouble, 5);
    cr_expect_eq(strncmp(s_of(v, "fingerprint"), "fnv1a64:", 8), 0);
    cr_expect_eq(strlen(s_of(v, "fingerprint")), 24);
    pl_steps_free(s);
}

#if PL_WITH_CURL /* the HTTP transport is built with libcurl */
/* ------------------------------------------------------------------------ */
/* Streamable HTTP                                                          */
/* ------------------------------------------------------------------------ */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static pid_t http_pid;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static bool listening(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* server-everything in its Streamable HTTP mode; its URL. */
/* Node.js 18 (Debian 12's) has no global `crypto`, which the server's HTTP
 * transport uses, unless --experimental-global-webcrypto asks for it; later
 * versions have it, and need not know the flag: it is given where node
 * takes it. */
static bool node_takes_webcrypto_flag(void)
{
    fflush(NULL);
    pid_t p = fork();
    cr_assert_neq(p, -1);
    if (p == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execlp("node", "node", "--experimental-global-webcrypto", "-e", "0",
               (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    cr_assert_eq(waitpid(p, &ws, 0), p);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

static void start_http(char *url, size_t n)
{
    need(EVERYTHING);
    bool webcrypto = node_takes_webcrypto_flag();
    int port = free_port();
    char env[32], log[1100];
    snprintf(env, sizeof env, "%d", port);
    snprintf(log, sizeof log, "%s/http.log", F.dir);
    fflush(NULL);
    http_pid = fork();
    cr_assert_neq(http_pid, -1);
    if (http_pid == 0) {
        setenv("PORT", env, 1);
        if (!freopen(log, "a", stdout) || !freopen(log, "a", stderr))
            _exit(126);
        if (webcrypto)
            execlp("node", "node", "--experimental-global-webcrypto",
                   EVERYTHING, "streamableHttp", (char *)NULL);
        else
            execlp("node", "node", EVERYTHING, "streamableHttp", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 3000 && !listening(port); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert(listening(port), "server-everything did not listen on %d", port);
    snprintf(url, n, "http://127.0.0.1:%d/mcp", port);
}

static bool contains(const char *data, size_t len, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= len; i++)
        if (memcmp(data + i, word, w) == 0)
            return true;
    return false;
}

static void stop_http(void)
{
    teardown();
    if (http_pid > 0) {
        kill(http_pid, SIGKILL);
        waitpid(http_pid, NULL, 0);
    }
}

Test(mcp, everything_over_streamable_http, .fini = stop_http)
{
    char url[128];
    start_http(url, sizeof url);
    setenv("PL_TEST_MCP_TOKEN", "s3cret-token-value", 1);
    pl_mcp_options o = quiet();
    o.token_env = "PL_TEST_MCP_TOKEN";
    open_all("evh", url, &o);
    cr_expect_str_eq(pl_mcp_protocol_version(F.mcp), "2025-06-18");
    cr_assert_not_null(pl_registry_find(F.reg, "evh.get-sum"));
    cJSON *got = run(
        "r1",
        "[{\"tool\": \"evh.echo\", \"args\": {\"message\": \"over http\"}},"
        " {\"tool\": \"evh.get-sum\", \"args\": {\"a\": 20, \"b\": 22}},"
        " {\"tool\": \"evh.get-sum\", \"args\": {\"a\": \"x\"}}]",
        3);
    cr_expect(strstr(first_text(at(got, 0)), "over http"), "%s", t_text(got));
    cr_expect(strstr(first_text(at(got, 1)), "42"), "%s", t_text(got));
    expect_error(at(got, 2), PL_ERR_INVALID_INPUT, NULL);
    cJSON_Delete(got);
    pl_outcome *r = NULL;
    cr_assert_eq(pl_run_continue(&r, F.engine, "r1", NULL), PL_OK);
    cr_expect_eq(r->calls_executed, 0);
    pl_outcome_free(r);
    close_all();
    /* the token went in a header, never into the store */
    if (!t_on_pg()) {
        FILE *f = fopen(F.store, "rb");
        cr_assert_not_null(f, "%s", F.store);
        static char data[64 << 20];
        size_t len = fread(data, 1, sizeof data, f);
        fclose(f);
        cr_expect_gt(len, 0);
        cr_expect(!contains(data, len, "s3cret-token"));
        cr_expect(contains(data, len, "over http"));
    }
}

Test(mcp, an_http_endpoint_that_is_not_there_fails_registration)
{
    pl_mcp_options o = quiet();
    o.start_timeout_ms = 5000;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/mcp", free_port());
    int st = open_reg("evh", url, &o);
    cr_expect_eq(st, PL_EIO);
    cr_expect(strstr(pl_errmsg(), "initialize") ||
                  strstr(pl_errmsg(), "onnect"),
              "%s", pl_errmsg());
    cr_expect_null(F.mcp);
}

#endif

/* ------------------------------------------------------------------------ */
/* ledger-replay --mcp                                                      */
/* ------------------------------------------------------------------------ */

/* Run ledger-replay with @p args; its exit status. */
static int replay_tool(const char *const *args)
{
    const char *argv[16] = {PL_TEST_BIN_DIR "/tools/ledger-replay"};
    size_t n = 1;
    for (; args[n - 1] && n < 15; n++)
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

Test(mcp, ledger_replay_checks_a_run_of_mcp_tools_without_calling_them)
{
    t_lmdb_only("ledger-replay opens the store by its path");
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    pl_outcome *r = t_start(F.engine, "fake.echo", "{\"text\": \"x\"}", "r1");
    cr_assert_eq(r->status, PL_RUN_COMPLETED);
    pl_outcome_free(r);
    close_all();
    char log[1100], spec[2200];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_assert_eq(count_lines(log, "tools/call", NULL), 1);
    snprintf(spec, sizeof spec, "fake=stdio:python3 " FAKE " ok %s", F.dir);
    const char *check[] = {F.store, "--mcp", spec, "--check", NULL};
    cr_expect_eq(replay_tool(check), 0);
    cr_expect_eq(count_lines(log, "\"initialize\"", NULL), 2);
    cr_expect_eq(count_lines(log, "tools/call", NULL), 1,
                 "a recorded call was sent again");
    const char *bad[] = {F.store, "--mcp", "fake", "--check", NULL};
    cr_expect_eq(replay_tool(bad), 1);
    const char *none[] = {F.store, "--mcp", "fake=stdio:/nonexistent/x",
                          "--check", NULL};
    cr_expect_eq(replay_tool(none), 2);
}
