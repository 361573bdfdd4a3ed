/*
 * test_mcp_fake.c -- MCP servers' tools as policies, as test_mcp.c, with
 * tests/mcp_fake_server.py for a server that pages its tool list, asks the
 * client, or misbehaves (garbage, a 50 MB answer, an exit, no answer, a
 * death between calls); bad arguments, a name taken and a tool listed
 * twice; the tool list a call was made against; server-everything over
 * Streamable HTTP; and ledger-replay --mcp checking a run of MCP tools
 * without calling them.
 */
#include "support_mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <policyledger_mcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(mcp, .init = setup, .fini = teardown);

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

/* An inputSchema with a keyword the validator refuses: the server is
 * refused, naming tool, keyword and where, unless unchecked_schemas lets
 * that tool in without a schema (and only that one). */
Test(mcp, an_input_schema_the_validator_refuses)
{
    pl_mcp_options o = quiet();
    cr_expect_eq(register_fake("unevaluated", &o), PL_EINVAL);
    const char *msg = pl_errmsg();
    cr_expect(strstr(msg, "tool strict") &&
                  strstr(msg, "#/unevaluatedProperties") &&
                  strstr(msg, "unchecked_schemas"),
              "%s", msg);
    cr_expect_null(F.mcp);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
    close_all();
    /* version 1 of the options has no unchecked_schemas: it is false */
    o.unchecked_schemas = true;
    o.version = 1;
    cr_expect_eq(register_fake("unevaluated", &o), PL_EINVAL);
    close_all();
    o.version = PL_MCP_OPTIONS_VERSION;
    cr_assert_eq(register_fake("unevaluated", &o), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_mcp_tool_count(F.mcp), 6);
    const pl_policy_def *strict = pl_registry_find(F.reg, "fake.strict");
    cr_assert_not_null(strict);
    cr_expect_null(strict->input_schema);
    const pl_policy_def *fail = pl_registry_find(F.reg, "fake.fail");
    cr_assert_not_null(fail);
    cr_expect(fail->input_schema && strstr(fail->input_schema, "required"));
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.strict\", \"args\": "
                     "{\"text\": \"hi\"}}]",
                     1);
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(at(got, 0),
                                                       "structuredContent");
    cr_expect_str_eq(s_of(cJSON_GetObjectItemCaseSensitive(sc, "args"), "text"),
                     "hi");
    cJSON_Delete(got);
    close_all();
}

Test(mcp, a_server_that_prints_garbage_is_a_timeout_not_a_hang)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 2000; /* the garbage all printed, on a loaded host too */
    open_fake("garbage", &o);
    cJSON *got = run("r1", "[{\"tool\": \"fake.echo\"}]", 1);
    /* six, the blank "\r\n" line before them not counted (it was, when the
     * byte looked at was the next line's) */
    expect_error(at(got, 0), PL_ERR_TIMEOUT,
                 "(6 lines that are not JSON-RPC were skipped)");
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "notifications/cancelled", "\"requestId\""),
                 1);
}

/* A decorator that gives the call a deadline long past, as a run
 * continued after its timeout decorator's deadline has one. */
static int past_deadline(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         const pl_decorator *self, pl_next *next)
{
    (void)self;
    cr_assert_eq(pl_ctx_set_deadline(ctx, 1000), PL_OK);
    return pl_next_call(next, ctx, a, out);
}

/* A call whose deadline has passed is a Timeout and is not sent, as
 * http_get's and run_command's are not: a request with no time left to
 * answer it could only act on the server (it was sent, over stdio, and
 * then cancelled; over HTTP, never sent yet cancelled). */
Test(mcp, a_call_past_its_deadline_is_not_sent)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    per_call = (pl_decorator)PL_DECORATOR_INIT;
    per_call.fn = past_deadline;
    per_call.name = "past_deadline";
    cJSON *got = run("r1", "[{\"tool\": \"fake.echo\"}]", 1);
    expect_error(at(got, 0), PL_ERR_TIMEOUT, "deadline has passed");
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "tools/call", NULL), 0, "sent");
    cr_expect_eq(count_lines(log, "notifications/cancelled", NULL), 0);
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
    /* timeouts that never come: the deadlines made of them at the
     * registration, the calls and the restart do not overflow */
    o.timeout_ms = o.start_timeout_ms = LONG_MAX;
    open_fake("ok", &o);
    /* a server that exits, then one that closes its output, alive */
    const char *const deaths[][3] = {
        {"r1", "{}", "exited"},
        {"r3", "{\"mute\": true}", "closed its output"}};
    cJSON *got;
    for (int k = 0; k < 2; k++) {
        char calls[256];
        snprintf(calls, sizeof calls,
                 "[{\"tool\": \"fake.die\", \"args\": %s},"
                 " {\"tool\": \"fake.echo\", \"args\": {\"text\": \"c\"}}]",
                 deaths[k][1]);
        got = run(deaths[k][0], calls, 2);
        expect_error(at(got, 0), PL_ERR_RETRYABLE_SERVER, deaths[k][2]);
        cr_expect(strstr(first_text(at(got, 1)), "\"c\""), "%s", t_text(got));
        cJSON_Delete(got);
    }
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "\"initialize\"", NULL), 3);
    cr_expect_eq(count_lines(log, "tools/list", NULL), 4,
                 "one list, in two pages, read again at the call after "
                 "the first restart");
    /* the server started again may be another version of itself: the
     * call after the one that started it lists its tools again */
    got = run("r2", "[{\"tool\": \"fake.echo\", \"args\": {}}]", 1);
    cJSON_Delete(got);
    close_all();
    cr_expect_eq(count_lines(log, "tools/list", NULL), 6, "listed again");
}

/* A JSON-RPC error's code is taken as sent: one past an int's range
 * (found by fuzz/fuzz_mcp.c: converted to an int, undefined behaviour)
 * or not whole is no known code, a ToolBug naming it. */
Test(mcp, an_error_code_out_of_range_is_a_tool_bug_naming_it)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"far\", \"rpc\": -8.9e106}},"
                     " {\"tool\": \"fake.fail\", \"args\": {\"text\": "
                     "\"half\", \"rpc\": -32602.5}}]",
                     2);
    expect_error(at(got, 0), PL_ERR_TOOL_BUG, "error -8.9e+106: far");
    expect_error(at(got, 1), PL_ERR_TOOL_BUG, "error -32602.5: half");
    cJSON_Delete(got);
    close_all();
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

/* A tools/call's arguments, short and long (the request is written into a
 * buffer kept from one request to the next, grown when one does not fit),
 * with escapes, non-ASCII text and numbers: the server gets them as
 * given, each time. */
Test(mcp, arguments_reach_the_server_as_given_short_or_long)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    static const size_t lens[] = {5, 20000, 3, 70000, 300};
    enum { N = sizeof lens / sizeof lens[0] };
    cJSON *args[N], *calls = cJSON_CreateArray();
    for (size_t i = 0; i < N; i++) {
        char *text = malloc(lens[i] + 1);
        cr_assert_not_null(text);
        for (size_t k = 0; k < lens[i]; k++)
            text[k] = (char)('a' + (i + k) % 26);
        text[lens[i]] = '\0';
        args[i] = NULL;
        cr_assert_eq(pl_json_pack(&args[i],
                                  "{s:s, s:s, s:f, s:f, s:[i, s, n, b]}",
                                  "text", text, "esc",
                                  "quote\" back\\ nl\n tab\t \xc3\xa9 "
                                  "\xe2\x9c\x93 \x01",
                                  "n", 12345678901.0, "x", -0.5, "list", 1,
                                  "two", 1),
                     PL_OK);
        free(text);
        cJSON *c = NULL;
        cr_assert_eq(pl_json_pack(&c, "{s:s, s:O}", "tool", "fake.echo", "args",
                                  args[i]),
                     PL_OK);
        cJSON_AddItemToArray(calls, c);
    }
    cJSON *in = cJSON_CreateObject();
    cJSON_AddItemToObject(in, "calls", calls);
    char *text = cJSON_PrintUnformatted(in);
    cJSON_Delete(in);
    pl_outcome *r = t_start(F.engine, "use", text, "r1");
    free(text);
    cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s", r->reason ? r->reason : "");
    cr_expect_eq(r->calls_executed, (uint64_t)N);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(r),
                                                        "got");
    for (size_t i = 0; i < N; i++) {
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(at(got, (int)i),
                                                           "structuredContent");
        cr_expect(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(sc, "args"),
                                args[i], true),
                  "call %zu: the server got other arguments", i);
        cJSON_Delete(args[i]);
    }
    pl_outcome_free(r);
}

/* A tool whose name JSON must escape, and each call's _meta (its
 * idempotency key, "RUN/CALLER'S PATH:SEQ", as the progress token too):
 * the request's params are written straight into the message, and the
 * server gets them as given. */
Test(mcp, an_escaped_tool_name_and_the_meta_reach_the_server_as_given)
{
    pl_mcp_options o = quiet();
    open_fake("oddname", &o);
    static const char odd[] = "say \"hi\" \\ \xc3\xa9/\xe2\x9c\x93";
    enum { N = 6 }; /* the last call's seq has two digits */
    cJSON *calls = cJSON_CreateArray();
    for (int i = 0; i < N; i++) {
        char tool[64];
        snprintf(tool, sizeof tool, "fake.%s", i % 2 ? "echo" : odd);
        cJSON *c = NULL;
        cr_assert_eq(pl_json_pack(&c, "{s:s, s:{s:i}}", "tool", tool, "args",
                                  "i", i),
                     PL_OK);
        cJSON_AddItemToArray(calls, c);
    }
    char *text = cJSON_PrintUnformatted(calls);
    cJSON_Delete(calls);
    cJSON *got = run("r1", text, N);
    free(text);
    for (int i = 0; i < N; i++) {
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(at(got, i),
                                                           "structuredContent");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(sc, "meta");
        const char *name = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(sc, "name"));
        const char *key = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            meta, "policyledger/idempotencyKey"));
        const char *token = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(meta, "progressToken"));
        cr_assert(name && key && token, "call %d: %s", i, t_text(got));
        cr_expect_str_eq(name, i % 2 ? "echo" : odd);
        char want[32];
        snprintf(want, sizeof want, "r1/0:%d", 2 * i);
        cr_expect_str_eq(key, want);
        cr_expect_str_eq(token, key);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(sc, "args");
        cr_expect_eq(
            cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(args, "i")),
            i);
    }
    cJSON_Delete(got);
}

/* The guide: a tool is registered idempotent only when opts.idempotent
 * names it or it says readOnlyHint (unless opts.ignore_hints); every other
 * tool gets opts.in_doubt. */
static void expect_kind(const char *name, bool idempotent, pl_in_doubt rule)
{
    const pl_policy_def *d = pl_registry_find(F.reg, name);
    cr_assert_not_null(d, "%s", name);
    cr_expect_eq(d->idempotent, idempotent, "%s", name);
    if (!idempotent)
        cr_expect_eq(d->in_doubt, rule, "%s", name);
}

Test(mcp, idempotent_by_name_or_hint_and_the_in_doubt_rule)
{
    pl_mcp_options o = quiet();
    cr_assert_eq(register_fake("hinted", &o), PL_OK, "%s", pl_errmsg());
    expect_kind("fake.echo", true, PL_IN_DOUBT_FAIL);
    expect_kind("fake.fail", false, PL_IN_DOUBT_FAIL);
    expect_kind("fake.slow", false, PL_IN_DOUBT_FAIL);
    close_all();

    static const char *const idem[] = {"slow"};
    o.ignore_hints = true;
    o.idempotent = idem;
    o.n_idempotent = 1;
    o.in_doubt = PL_IN_DOUBT_SUSPEND;
    cr_assert_eq(register_fake("hinted", &o), PL_OK, "%s", pl_errmsg());
    expect_kind("fake.echo", false, PL_IN_DOUBT_SUSPEND);
    expect_kind("fake.fail", false, PL_IN_DOUBT_SUSPEND);
    expect_kind("fake.slow", true, PL_IN_DOUBT_SUSPEND);
}

/* pl_mcp_options.idempotent naming a tool the server does not list (a
 * typo: "ehco") fails the registration, naming it, and registers none:
 * it was ignored, the tool it meant registered not idempotent.  A NULL
 * or empty name is refused before the server is started. */
Test(mcp, an_idempotent_name_the_server_does_not_list_registers_none)
{
    pl_mcp_options o = quiet();
    static const char *const typo[] = {"slow", "ehco"};
    o.idempotent = typo;
    o.n_idempotent = 2;
    cr_expect_eq(register_fake("ok", &o), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "'ehco'") &&
                  strstr(pl_errmsg(), "does not list"),
              "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    cr_expect_eq(pl_registry_count(F.reg), 2); /* "use" and "halt" */
    close_all();

    static const char *const none[] = {"slow", ""};
    o.idempotent = none;
    cr_expect_eq(register_fake("ok", &o), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "idempotent[1]"), "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    close_all();

    static const char *const listed[] = {"slow", "echo"};
    o.idempotent = listed;
    cr_assert_eq(register_fake("ok", &o), PL_OK, "%s", pl_errmsg());
    expect_kind("fake.echo", true, PL_IN_DOUBT_FAIL);
    expect_kind("fake.slow", true, PL_IN_DOUBT_FAIL);
    expect_kind("fake.fail", false, PL_IN_DOUBT_FAIL);
}

/* The guide: a server that answers 2025-03-26 or 2024-11-05 is accepted,
 * and pl_mcp_protocol_version() says which; its tools are called as any. */
Test(mcp, the_two_earlier_protocol_versions_are_accepted)
{
    static const char *const versions[] = {"2025-03-26", "2024-11-05"};
    for (size_t i = 0; i < 2; i++) {
        char mode[32];
        snprintf(mode, sizeof mode, "v%s", versions[i]);
        pl_mcp_options o = quiet();
        F.store[0] = '\0';
        open_fake(mode, &o);
        cr_expect_str_eq(pl_mcp_protocol_version(F.mcp), versions[i]);
        cJSON *got = run(versions[i],
                         "[{\"tool\": \"fake.echo\", \"args\": {\"text\": "
                         "\"hi\"}}]",
                         1);
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(at(got, 0),
                                                           "structuredContent");
        cr_expect_str_eq(s_of(cJSON_GetObjectItemCaseSensitive(sc, "args"),
                              "text"),
                         "hi");
        cJSON_Delete(got);
        close_all();
    }
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

/* A result's items as the header keeps them, with max_inline_bytes 8:
 * audio, image and a blob as their size and, within the cap, their data;
 * a resource's text cut at a character within it; a resource_link as
 * sent; data "==" no bytes (it was 2^64 - 2).  An isError result's code read from its text, each rule once; a
 * JSON-RPC error -32002 or -32601 NotFound.  ('' is ", for legibility.) */
static const char *const g_kinds =
    "[{'tool': 'fake.fail', 'args': {'text': '', 'result': {'content': ["
    "{'type': 'audio', 'mimeType': 'audio/wav', 'data': 'UklGRiQAAABXQVZF'},"
    "{'type': 'image', 'mimeType': 'image/png', 'data': 'iVBO'},"
    "{'type': 'resource', 'resource': {'uri': 'file:///a', 'mimeType': "
    "'text/plain', 'text': 'abcdefg\u00e9 tail'}},"
    "{'type': 'resource', 'resource': {'uri': 'file:///b', 'mimeType': "
    "'application/octet-stream', 'blob': 'AAECAwQFBgc='}},"
    "{'type': 'resource_link', 'uri': 'file:///c', 'name': 'c', 'x': 1},"
    "{'type': 'image', 'mimeType': 'image/png', 'data': '=='}]}}},"
    "{'tool': 'fake.fail', 'args': {'text': 'Access denied: /etc'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'path outside the roots'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'no PERMISSION here'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'writes not allowed'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'Unauthorized caller'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'the query timed out'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'Timeout reached'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'Invalid date'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'schema validation: bad'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'x is required'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'ENOENT: /x'}},"
    "{'tool': 'fake.fail', 'args': {'text': 'No such table'}},"
    "{'tool': 'fake.fail', 'args': {'text': '', 'result': {'isError': true, "
    "'content': [{'type': 'text', 'text': 'first'}, {'type': 'image', "
    "'data': 'iVBO'}, {'type': 'text', 'text': 'second'}]}}},"
    "{'tool': 'fake.fail', 'args': {'text': 'gone', 'rpc': -32002}},"
    "{'tool': 'fake.fail', 'args': {'text': 'no method', 'rpc': -32601}}]";

static const cJSON *item_of(const cJSON *r, int i)
{
    const cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(r, "content"), i);
    cr_assert_not_null(c, "no item %d in %s", i, t_text(r));
    return c;
}

static double num_of(const cJSON *v, const char *key)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, key);
    cr_assert(cJSON_IsNumber(n), "no number \"%s\" in %s", key, t_text(v));
    return n->valuedouble;
}

Test(mcp, each_kind_of_content_and_error_text_reads_as_documented)
{
    pl_mcp_options o = quiet();
    o.max_inline_bytes = 8;
    open_fake("ok", &o);
    char calls[4096];
    snprintf(calls, sizeof calls, "%s", g_kinds);
    for (char *p = calls; *p; p++)
        *p = *p == '\'' ? '"' : *p;
    cJSON *got = run("r1", calls, 16);
    const cJSON *r = at(got, 0), *it = item_of(r, 0);
    cr_expect_str_eq(s_of(it, "type"), "audio");
    cr_expect_str_eq(s_of(it, "mimeType"), "audio/wav");
    cr_expect_eq(num_of(it, "bytes"), 12);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "omitted")));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(it, "data"));
    it = item_of(r, 1);
    cr_expect_str_eq(s_of(it, "data"), "iVBO");
    cr_expect_eq(num_of(it, "bytes"), 3);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(item_of(r, 2),
                                                        "resource");
    cr_expect_str_eq(s_of(res, "uri"), "file:///a");
    cr_expect_str_eq(s_of(res, "mimeType"), "text/plain");
    cr_expect_str_eq(s_of(res, "text"), "abcdefg", "cut before the \u00e9");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "truncated")));
    res = cJSON_GetObjectItemCaseSensitive(item_of(r, 3), "resource");
    cr_expect_str_eq(s_of(res, "uri"), "file:///b");
    cr_expect_eq(num_of(res, "bytes"), 8);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "omitted")));
    cJSON *link = t_json("{\"type\": \"resource_link\", \"uri\": "
                         "\"file:///c\", \"name\": \"c\", \"x\": 1}");
    cr_expect(cJSON_Compare(item_of(r, 4), link, 1), "%s", t_text(r));
    cJSON_Delete(link);
    cr_expect_eq(num_of(item_of(r, 5), "bytes"), 0, "'==' is no data");
    const char *codes[] = {
        PL_ERR_FORBIDDEN,     PL_ERR_FORBIDDEN,     PL_ERR_FORBIDDEN,
        PL_ERR_FORBIDDEN,     PL_ERR_UNAUTHORIZED,  PL_ERR_TIMEOUT,
        PL_ERR_TIMEOUT,       PL_ERR_INVALID_INPUT, PL_ERR_INVALID_INPUT,
        PL_ERR_INVALID_INPUT, PL_ERR_NOT_FOUND,     PL_ERR_NOT_FOUND};
    for (int i = 0; i < 12; i++)
        expect_error(at(got, 1 + i), codes[i], NULL);
    expect_error(at(got, 13), PL_ERR_TOOL_BUG, "first\nsecond");
    expect_error(at(got, 14), PL_ERR_NOT_FOUND, "error -32002: gone");
    expect_error(at(got, 15), PL_ERR_NOT_FOUND, "error -32601: no method");
    cJSON_Delete(got);
    close_all();
}

/* A tool list that names a tool twice is refused before any of its tools
 * is registered (found by fuzz/fuzz_mcp.c: the first was registered, the
 * second refused as taken, and the registry kept a policy of the closed
 * handle). */
Test(mcp, a_tool_list_naming_a_tool_twice_registers_none)
{
    pl_mcp_options o = quiet();
    o.start_timeout_ms = 20000;
    cr_expect_eq(register_fake("twice", &o), PL_EIO);
    cr_expect(strstr(pl_errmsg(), "names 'echo' twice"), "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
    cr_expect_eq(pl_registry_count(F.reg), 2); /* "use" and "halt" */
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
    /* an endpoint without a host is bad usage, not a server not there */
    const char *nohost[] = {F.store, "--mcp", "h=http://", "--check", NULL};
    cr_expect_eq(replay_tool(nohost), 1);
    nohost[2] = "h=https:///mcp";
    cr_expect_eq(replay_tool(nohost), 1);
    const char *none[] = {F.store, "--mcp", "fake=stdio:/nonexistent/x",
                          "--check", NULL};
    cr_expect_eq(replay_tool(none), 2);
}
