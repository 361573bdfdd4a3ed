/*
 * test_mcp_promises.c -- the promises of policyledger_mcp.h and of the
 * guide's "MCP tools", one case each where the code once broke them:
 * tests/mcp_fake_server.py for a server that misbehaves in the way each
 * needs.
 */
#include "support_mcp.h"

#include <limits.h>
#include <policyledger_mcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(mcp_promises, .init = setup, .fini = teardown, .timeout = 60);

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

/* ---- a call's deadline bounds the tool list read before it -------------- */

/* Each call: a deadline half a second away. */
static int soon(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                const pl_decorator *self, pl_next *next)
{
    (void)self;
    int64_t now = 0;
    cr_assert_eq(pl_ctx_now(&now, ctx), PL_OK);
    cr_assert_eq(pl_ctx_set_deadline(ctx, now + 500), PL_OK);
    return pl_next_call(next, ctx, a, out);
}

/* A server that says its tool list changed and then never lists it: the
 * next call's list is read at most until the call's deadline, as every
 * wait of a call is (context.h), not for start_timeout_ms (here one that
 * never comes: the call would hang). */
Test(mcp_promises, a_list_changed_is_read_again_within_the_calls_deadline)
{
    pl_mcp_options o = quiet();
    o.start_timeout_ms = LONG_MAX;
    open_fake("relisthang", &o);
    per_call = (pl_decorator)PL_DECORATOR_INIT;
    per_call.fn = soon;
    per_call.name = "soon";
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.echo\", \"args\": {\"text\": \"a\"}},"
                     " {\"tool\": \"fake.echo\", \"args\": {\"text\": \"b\"}}]",
                     2);
    cr_expect(strstr(first_text(at(got, 0)), "\"a\""), "%s", t_text(got));
    expect_error(at(got, 1), PL_ERR_TIMEOUT, NULL);
    cJSON_Delete(got);
    close_all();
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "tools/call", NULL), 1,
                 "a call past its deadline was sent");
}

/* ---- a server started again at a call: start_timeout_ms --------------- */

/* The handshake of a server started again at a call waits
 * start_timeout_ms, as every handshake does, not the call's timeout_ms,
 * which is the wait for the tool's answer: a server slower to start than
 * a call is long (here 2 s, and calls of half a second) was stopped at
 * each call that started it again, and its tools never answered again. */
Test(mcp_promises, a_server_started_again_gets_start_timeout_ms_to_start)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 500;
    o.start_timeout_ms = 30000;
    open_fake("slowrestart", &o);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.die\"},"
                     " {\"tool\": \"fake.echo\", \"args\": {\"text\": \"b\"}},"
                     " {\"tool\": \"fake.echo\", \"args\": {\"text\": \"c\"}}]",
                     3);
    expect_error(at(got, 0), PL_ERR_RETRYABLE_SERVER, "exited");
    cr_expect(strstr(first_text(at(got, 1)), "\"b\""), "%s", t_text(got));
    cr_expect(strstr(first_text(at(got, 2)), "\"c\""), "%s", t_text(got));
    cJSON_Delete(got);
}

/* ---- a server that reads no more --------------------------------------- */

/* A server that stops reading its input is stopped when a request cannot
 * be written to it in time, and started again at the next call, as the
 * header says of "a server that does not read a request to its end": it
 * was stopped only when part of the request had been taken, but a short
 * request goes in whole or not at all, so with its input full the server
 * was never stopped and every call waited its timeout, unsent (and was
 * then "cancelled", a notification for a request the server never
 * had). */
Test(mcp_promises, a_server_that_reads_no_more_is_started_again)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 1;
    open_fake("deaf", &o);
    char pids[4300];
    snprintf(pids, sizeof pids, "%s/pids", F.dir);
    cr_assert_eq(count_lines(pids, "", NULL), 1);
    /* small calls, each one unanswered, until the server's input is full */
    int k = 0;
    for (bool full = false; !full; k++) {
        cr_assert_lt(k, 20000, "the server's input never filled");
        char id[32];
        snprintf(id, sizeof id, "r%d", k);
        cJSON *got = run(id, "[{\"tool\": \"fake.echo\"}]", 1);
        expect_error(at(got, 0), PL_ERR_TIMEOUT, NULL);
        full = strstr(s_of(at(got, 0), "message"), "does not read its input");
        cJSON_Delete(got);
    }
    cr_expect_eq(count_lines(pids, "", NULL), 1);
    cJSON *got = run("last", "[{\"tool\": \"fake.echo\"}]", 1);
    cJSON_Delete(got);
    cr_expect_eq(count_lines(pids, "", NULL), 2,
                 "the server that reads nothing was not started again "
                 "(%d calls)",
                 k);
}

/* ---- an inputSchema that is no schema ----------------------------------- */

/* A tool whose inputSchema is not a JSON object is a malformed schema:
 * refused, naming the tool, unless unchecked_schemas registers it
 * without one. */
Test(mcp_promises, an_input_schema_that_is_no_object_is_refused)
{
    pl_mcp_options o = quiet();
    int st = register_fake("schemaless", &o);
    cr_expect_eq(st, PL_EINVAL, "%s", pl_status_name(st));
    cr_expect(strstr(pl_errmsg(), "loose"), "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "unchecked_schemas"), "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
    close_all();
    o.unchecked_schemas = true;
    open_fake("schemaless", &o);
    const pl_policy_def *d = pl_registry_find(F.reg, "fake.loose");
    cr_assert_not_null(d);
    cr_expect_null(d->input_schema);
    cr_expect_not_null(pl_registry_find(F.reg, "fake.echo")->input_schema);
}

/* ---- an endpoint URL that names no host --------------------------------- */

/* A spec "http://" or "https://" without a host (libcurl reads
 * "http:///mcp" as the host "mcp") is a bad spec, PL_EINVAL, as the
 * header says: not a server that cannot be reached (PL_EIO), which
 * agent-demo calls a failure (exit 1) and not bad usage.  Built without
 * libcurl, every http(s) spec is PL_EINVAL. */
Test(mcp_promises, a_url_without_a_host_is_a_bad_spec)
{
    pl_mcp_options o = quiet();
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    static const char *const bad[] = {
        "http://",        "https://",   "http:///mcp",   "http://:8080/mcp",
        "http://a b/mcp", "https://?x", "http://@h/mcp", "http://h:99999/mcp"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int st = pl_mcp_register(&F.mcp, F.reg, "h", bad[i], &o);
        cr_expect_eq(st, PL_EINVAL, "%s: %s (%s)", bad[i], pl_status_name(st),
                     pl_errmsg());
        cr_expect_null(F.mcp);
    }
#if PL_WITH_CURL
    cr_expect(strstr(pl_errmsg(), "expected http://HOST"), "%s", pl_errmsg());
    /* a spec of neither form names both */
    cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "h", "ftp://h/x", &o),
                 PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "or an http(s):// URL"), "%s", pl_errmsg());
#endif
    cr_expect_eq(pl_registry_count(F.reg), 0);
}

/* ---- a bad option, whatever the transport ------------------------------- */

/* A variable name that is none ("A=B", "") in env or token_env is a bad
 * option, PL_EINVAL, before anything starts, whether or not the server's
 * transport uses it: env was checked only for a stdio server and
 * token_env only for an endpoint, the other registering (or failing to
 * reach its server, PL_EIO) with the option ignored. */
Test(mcp_promises, a_bad_variable_name_is_refused_whatever_the_transport)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    static const char *const bad_env[] = {"HOME", "A=B"};
    static const char *const empty_env[] = {""};
    const char *const specs[] = {spec, "http://127.0.0.1:1/mcp"};
    for (int k = 0; k < 2; k++) {
        pl_mcp_options o = quiet();
        o.env = bad_env;
        o.n_env = 2;
        cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "s", specs[k], &o),
                     PL_EINVAL, "%s: %s", specs[k], pl_errmsg());
        cr_expect(strstr(pl_errmsg(), "'A=B'"), "%s", pl_errmsg());
        o.env = empty_env;
        o.n_env = 1;
        cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "s", specs[k], &o),
                     PL_EINVAL, "%s: %s", specs[k], pl_errmsg());
        o = quiet();
        o.token_env = "TOKEN=x";
        cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "s", specs[k], &o),
                     PL_EINVAL, "%s: %s", specs[k], pl_errmsg());
        cr_expect(strstr(pl_errmsg(), "token_env"), "%s", pl_errmsg());
        o.token_env = "";
        cr_expect_eq(pl_mcp_register(&F.mcp, F.reg, "s", specs[k], &o),
                     PL_EINVAL, "%s: %s", specs[k], pl_errmsg());
        cr_expect_null(F.mcp);
    }
    cr_expect_eq(pl_registry_count(F.reg), 0);
    /* nothing was started */
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "initialize", NULL), 0);
}

/* ---- a name is the server's, whatever its tools ------------------------- */

/* How many servers of F.dir were started (a line each in F.dir/pids). */
static int started(void)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/pids", F.dir);
    return count_lines(path, "", "");
}

/* A server registered under a name holds it though it lists no tools: a
 * second registration under that name is PL_EEXIST, as with tools, and
 * the second server is not started.  A registration that failed holds
 * no name. */
Test(mcp_promises, a_name_is_taken_by_a_server_without_tools)
{
    pl_mcp_options o = quiet();
    cr_assert_eq(register_fake("notools", &o), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_mcp_tool_count(F.mcp), 0);
    cr_expect_eq(started(), 1);
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " notools %s", F.dir);
    pl_mcp *second = (pl_mcp *)1;
    int st = pl_mcp_register(&second, F.reg, "fake", spec, &o);
    cr_expect_eq(st, PL_EEXIST, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect_null(second);
    pl_mcp_close(st ? NULL : second);
    cr_expect(strstr(pl_errmsg(), "MCP server fake:"), "%s", pl_errmsg());
    /* a server with tools under it too */
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    second = (pl_mcp *)1;
    st = pl_mcp_register(&second, F.reg, "fake", spec, &o);
    cr_expect_eq(st, PL_EEXIST, "%s: %s", pl_status_name(st), pl_errmsg());
    pl_mcp_close(st ? NULL : second);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
    cr_expect_eq(started(), 1, "a server under a name taken was started");
    /* another name is free; a registration that fails takes none */
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " exit %s", F.dir);
    pl_mcp *other = NULL;
    cr_expect_eq(pl_mcp_register(&other, F.reg, "gone", spec, &o), PL_EIO);
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " notools %s", F.dir);
    cr_expect_eq(pl_mcp_register(&other, F.reg, "gone", spec, &o), PL_OK, "%s",
                 pl_errmsg());
    pl_mcp_close(other);
}

/* ---- a tool list that pages in a loop ----------------------------------- */

/* A server whose tools/list cursors go page2 -> page3 -> page2 pages in a
 * loop: the registration fails at the cursor given the second time,
 * naming it, after three requests, not after a hundred with "more than
 * 100 pages of tools", which says nothing of what is wrong. */
Test(mcp_promises, a_tool_list_that_pages_in_a_loop_is_refused_at_once)
{
    pl_mcp_options o = quiet();
    int st = register_fake("cursorloop", &o);
    cr_expect_eq(st, PL_EIO, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "\"page2\"") && strstr(pl_errmsg(), "loop"),
              "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
    char log[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    cr_expect_eq(count_lines(log, "tools/list", NULL), 3);
}

/* ---- lines that are JSON but no JSON-RPC -------------------------------- */

/* A server that prints JSON objects that are no JSON-RPC message (neither
 * a method nor an id) prints lines that are not JSON-RPC: skipped and
 * counted, as the header says, so that the Timeout says why no answer
 * came rather than only that none did. */
Test(mcp_promises, json_objects_that_are_no_json_rpc_are_counted_as_skipped)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 1000;
    open_fake("objects", &o);
    cJSON *got = run("r1", "[{\"tool\": \"fake.echo\"}]", 1);
    expect_error(at(got, 0), PL_ERR_TIMEOUT,
                 "3 lines that are not JSON-RPC were skipped");
    cJSON_Delete(got);
}

/* ---- a nextCursor that is no cursor ------------------------------------- */

/* MCP's cursors are strings.  A tools/list page whose nextCursor is
 * something else (here the number 2) says there are more tools and gives
 * nothing that asks for them: the registration fails, saying so, rather
 * than registering the first page's tools as if they were all. */
Test(mcp_promises, a_next_cursor_that_is_no_string_fails_the_listing)
{
    pl_mcp_options o = quiet();
    int st = register_fake("numcursor", &o);
    cr_expect_eq(st, PL_EIO, "%s: %s (%zu tools)", pl_status_name(st),
                 pl_errmsg(), pl_mcp_tool_count(F.mcp));
    cr_expect(strstr(pl_errmsg(), "nextCursor"), "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
}

/* ---- the size of base64 data -------------------------------------------- */

/* "bytes" is the size of the decoded data, padded or not: base64 without
 * its '=' padding ("QUJDREU", "ABCDE"; "QUI", "AB") was counted in whole
 * groups of four only (3 and 0 bytes). */
Test(mcp_promises, the_bytes_of_base64_data_without_padding)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    cJSON *got = run(
        "r1",
        "[{\"tool\": \"fake.fail\", \"args\": {\"text\": \"\", \"result\": "
        "{\"content\": [{\"type\": \"image\", \"mimeType\": \"image/png\", "
        "\"data\": \"QUJDREU\"}, {\"type\": \"audio\", \"mimeType\": "
        "\"audio/wav\", \"data\": \"QUI\"}, {\"type\": \"image\", "
        "\"mimeType\": \"image/png\", \"data\": \"QUJDREU=\"}, {\"type\": "
        "\"resource\", \"resource\": {\"uri\": \"file:///b\", \"blob\": "
        "\"QUJDRA\"}}]}}}]",
        1);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(at(got, 0), "content");
    const double want[] = {5, 2, 5};
    for (int i = 0; i < 3; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c,
                                                                             i),
                                                          "bytes");
        cr_expect(cJSON_IsNumber(b) && b->valuedouble == want[i], "item %d: %s",
                  i, t_text(at(got, 0)));
    }
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c,
                                                                           3),
                                                        "resource");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(res, "bytes");
    cr_expect(cJSON_IsNumber(b) && b->valuedouble == 4, "%s",
              t_text(at(got, 0)));
    cJSON_Delete(got);
}

/* ---- a structuredContent that is no object ------------------------------ */

/* A result whose "structuredContent" is not an object (MCP has it one) is
 * a ToolBug, as a "content" that is not an array is: it was dropped, and
 * the result read as if the server had sent none.  null is none. */
Test(mcp_promises, a_structured_content_that_is_no_object_is_a_tool_bug)
{
    pl_mcp_options o = quiet();
    open_fake("ok", &o);
    cJSON *got = run(
        "r1",
        "[{\"tool\": \"fake.fail\", \"args\": {\"text\": \"\", \"result\": "
        "{\"content\": [], \"structuredContent\": \"42 rows\"}}},"
        " {\"tool\": \"fake.fail\", \"args\": {\"text\": \"\", \"result\": "
        "{\"content\": [], \"structuredContent\": [1]}}},"
        " {\"tool\": \"fake.fail\", \"args\": {\"text\": \"\", \"result\": "
        "{\"content\": [], \"structuredContent\": null}}}]",
        3);
    expect_error(at(got, 0), PL_ERR_TOOL_BUG, "structuredContent");
    expect_error(at(got, 1), PL_ERR_TOOL_BUG, "structuredContent");
    cr_expect(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(at(got, 2),
                                                             "content")),
              "%s", t_text(at(got, 2)));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(at(got, 2),
                                                    "structuredContent"));
    cJSON_Delete(got);
}
