/*
 * test_mcp.c -- MCP servers' tools as policies (policies/mcp/): the
 * reference servers from npm (server-everything and server-filesystem,
 * installed into the build tree by tests/npm_setup.sh; the tests that need
 * them are skipped with a message when npm could not fetch them, and fail
 * with PL_NPM_REQUIRED=1, where nothing may skip), and
 * tests/mcp_fake_server.py for a server that pages its tool list, asks
 * the client, or misbehaves.  Every call runs through the real engine and
 * is recorded; a continued run serves it; an engine killed with SIGKILL
 * sends no completed call again.  test_mcp_fake.c: the fake server,
 * Streamable HTTP and ledger-replay --mcp; support_mcp.c: what they share.
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

/* A second server under a name whose tools are registered is PL_EEXIST,
 * whatever its tools (the fake server's share none with the filesystem
 * server's), and is not started: the first's tools stay as they were,
 * and are called. */
Test(mcp, a_second_server_under_a_name_taken_is_refused)
{
    need(FILESYSTEM);
    char root[4300], spec[9000], fake[9000];
    snprintf(root, sizeof root, "%s/root", F.dir);
    cr_assert_eq(mkdir(root, 0755), 0);
    write_file(root, "a.txt", "alpha\n");
    snprintf(spec, sizeof spec, "stdio:node " FILESYSTEM " %s", root);
    pl_mcp_options o = quiet();
    cr_assert_eq(open_reg("fs", spec, &o), PL_OK, "%s", pl_errmsg());
    size_t count = pl_registry_count(F.reg);
    const pl_policy_def *read = pl_registry_find(F.reg, "fs.read_text_file");
    cr_assert_not_null(read);
    snprintf(fake, sizeof fake, "stdio:python3 " FAKE " ok %s", F.dir);
    pl_mcp *second = NULL;
    cr_expect_eq(pl_mcp_register(&second, F.reg, "fs", fake, &o), PL_EEXIST);
    cr_expect(strstr(pl_errmsg(), "MCP server fs:"), "%s", pl_errmsg());
    cr_expect_null(second);
    pl_mcp_close(second);
    cr_expect_eq(pl_registry_count(F.reg), count);
    cr_expect_null(pl_registry_find(F.reg, "fs.echo"));
    cr_expect_eq(pl_registry_find(F.reg, "fs.read_text_file"), read);
    char pids[4300];
    snprintf(pids, sizeof pids, "%s/pids", F.dir);
    cr_expect_neq(access(pids, F_OK), 0, "the second server was started");
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    char calls[5000];
    snprintf(calls, sizeof calls,
             "[{\"tool\": \"fs.read_text_file\", \"args\": {\"path\": "
             "\"%s/a.txt\"}}]",
             root);
    cJSON *got = run("r1", calls, 1);
    cr_expect_str_eq(first_text(at(got, 0)), "alpha\n");
    cJSON_Delete(got);
}

/* ------------------------------------------------------------------------ */
/* Crashes                                                                  */
/* ------------------------------------------------------------------------ */

/* Fork an engine that registers @p spec and runs policy @p root with
 * @p payload (JSON text) as run "c"; kill it (SIGKILL) once @p log shows
 * @p a (and @p b). */
static void run_as_and_kill(const char *spec, const pl_mcp_options *o,
                            const char *root, const char *payload,
                            const char *log, const char *a, const char *b)
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
        cJSON *p = cJSON_Parse(payload);
        pl_action act = {PL_ACTION_VERSION, root, p, NULL, 0, NULL};
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

/* run_as_and_kill() of "use" making @p calls (JSON text of its array). */
static void run_and_kill(const char *spec, const pl_mcp_options *o,
                         const char *calls, const char *log, const char *a,
                         const char *b)
{
    char text[8192];
    snprintf(text, sizeof text, "{\"calls\": %s}", calls);
    run_as_and_kill(spec, o, "use", text, log, a, b);
}

/* The fake server's log and spec (4300 and 9000 bytes), its "slow" tool
 * held (it never answers while F.dir/hold exists). */
static void held_fake(char *log, char *spec)
{
    snprintf(log, 4300, "%s/log", F.dir);
    snprintf(spec, 9000, "stdio:python3 " FAKE " ok %s", F.dir);
    write_file(F.dir, "hold", "");
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
    held_fake(log, spec);
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
    held_fake(log, spec);
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

/* A check replays and writes nothing, and sends nothing either: a run of
 * the tool itself, killed while its call waited for the answer, has
 * recorded the tool list and no result; its check says how far the
 * record goes and never asks the server again (it did, and waited the
 * whole timeout for the answer). */
Test(mcp, a_check_of_a_tool_run_killed_in_flight_sends_nothing)
{
    char log[4300], spec[9000];
    held_fake(log, spec);
    pl_mcp_options o = quiet();
    o.timeout_ms = 1000;
    run_as_and_kill(spec, &o, "x.slow", "{}", log, "tools/call", "slow");
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *r = NULL;
    int st = pl_run_continue(&r, F.engine, "c", &ro);
    cr_expect(st == PL_OK || st == PL_ECHECK, "%s", pl_errmsg());
    pl_outcome_free(r);
    close_all();
    cr_expect_eq(count_lines(log, "tools/call", "\"slow\""), 1,
                 "the check sent the call");
}

/* A run whose root is the tool itself keeps the rule of a call from a
 * policy: killed while its call of a tool not idempotent was in flight
 * (server-everything's long operation, its read-only hint ignored, behind
 * the tap that logs what the server is sent), the continued run ends with an InDoubt error result
 * and the server is never sent the call again; a check of it sends
 * nothing either. */
Test(mcp, a_tool_run_killed_in_flight_is_in_doubt_never_sent_again)
{
    need(EVERYTHING);
    char log[4300], spec[9000];
    snprintf(log, sizeof log, "%s/calls", F.dir);
    snprintf(spec, sizeof spec, "stdio:sh " TAP " %s node " EVERYTHING " stdio",
             log);
    pl_mcp_options o = quiet();
    o.ignore_hints = true; /* it says readOnlyHint: as a tool that acts */
    const char *tool = "x.trigger-long-running-operation";
    run_as_and_kill(spec, &o, tool, "{\"duration\": 60, \"steps\": 60}", log,
                    "tools/call", "long-running");
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_find(F.reg, tool)->idempotent, false);
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_outcome *r = NULL;
    cr_assert_eq(pl_run_continue(&r, F.engine, "c", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s", r->reason ? r->reason : "");
    expect_error(pl_outcome_result(r), PL_ERR_IN_DOUBT, "in flight");
    cr_expect_eq(r->calls_executed, 0);
    pl_outcome_free(r);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    cr_expect_eq(pl_run_continue(&r, F.engine, "c", &ro), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome_free(r);
    close_all();
    cr_expect_eq(count_lines(log, "tools/call", "long-running"), 1,
                 "the call in flight was sent again");
}

/* Its rule is the tool's: PL_IN_DOUBT_SUSPEND asks, as for a call from a
 * policy; "rerun" sends the call again (with the same key), "fail" or a
 * result does not; and a rerun itself killed in flight asks again. */
Test(mcp, a_tool_run_killed_in_flight_asks_when_its_rule_says_so)
{
    char log[4300], spec[9000], hold[4300];
    held_fake(log, spec);
    snprintf(hold, sizeof hold, "%s/hold", F.dir);
    pl_mcp_options o = quiet();
    o.in_doubt = PL_IN_DOUBT_SUSPEND;
    run_as_and_kill(spec, &o, "x.slow", "{}", log, "tools/call", "slow");
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_outcome *r = NULL;
    cr_assert_eq(pl_run_continue(&r, F.engine, "c", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(r->status, PL_RUN_SUSPENDED, "%s", r->reason ? r->reason : "");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r->prompt,
                                                            "in_doubt")));
    cr_expect_str_eq(s_of(r->prompt, "policy"), "x.slow");
    char token[256];
    snprintf(token, sizeof token, "%s", r->resume_token);
    pl_outcome_free(r);
    cr_expect_eq(count_lines(log, "tools/call", "\"slow\""), 1, "sent again");
    /* rerun, with the server still holding its answer: killed again */
    close_all();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        in_child = true;
        pl_engine *e = NULL;
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_PROCESS;
        if (open_reg("x", spec, &o) || pl_engine_open(&e, F.store, F.reg, &eo))
            _exit(11);
        cJSON *ans = cJSON_Parse("{\"decision\": \"rerun\"}");
        pl_run_resume(&r, e, "c", token, ans);
        _exit(3);
    }
    wait_for(log, "tools/call", "\"slow\"");
    for (int i = 0; i < 6000 && count_lines(log, "tools/call", "\"slow\"") < 2;
         i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(count_lines(log, "tools/call", "\"slow\""), 2,
                 "the rerun was not sent");
    kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status));
    cr_assert_eq(unlink(hold), 0);
    cr_assert_eq(open_reg("x", spec, &o), PL_OK, "%s", pl_errmsg());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    cr_assert_eq(pl_run_continue(&r, F.engine, "c", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(r->status, PL_RUN_SUSPENDED, "%s", r->reason ? r->reason : "");
    snprintf(token, sizeof token, "%s", r->resume_token);
    pl_outcome_free(r);
    cJSON *ans = cJSON_Parse("{\"decision\": \"result\", \"result\": "
                             "{\"content\": [{\"type\": \"text\", "
                             "\"text\": \"it ran\"}]}}");
    cr_assert_eq(pl_run_resume(&r, F.engine, "c", token, ans), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ans);
    cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s", r->reason ? r->reason : "");
    cr_expect_str_eq(first_text(pl_outcome_result(r)), "it ran");
    pl_outcome_free(r);
    close_all();
    cr_expect_eq(count_lines(log, "tools/call", "\"slow\""), 2);
}

/* The text of run @p id's result, from the store F.store (caller frees). */
static char *result_text(const char *id)
{
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_steps *steps = NULL;
    cr_assert_eq(pl_run_ledger(&steps, F.engine, id, "0"), PL_OK, "%s",
                 pl_errmsg());
    const pl_step *last = pl_steps_at(steps, pl_steps_count(steps) - 1);
    char *text = t_text(pl_step_payload(last));
    pl_steps_free(steps);
    close_all();
    return text;
}

/* ledger-replay --mcp-env NAME=VAR: the process of server-everything gets
 * the variable (its get-env tool lists what it got), and without the
 * flag it does not; a variable that is not set, or the flag for a server
 * no --mcp names, is a usage error. */
Test(mcp, ledger_replay_passes_the_variables_its_flags_name)
{
    need(EVERYTHING);
    t_lmdb_only("ledger-replay opens the store by its path");
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    setenv("PL_TEST_MCP_VALUE", "value-for-the-server", 1);
    const char *spec = "ev=stdio:node " EVERYTHING " stdio";
    const char *with[] = {F.store,
                          "--mcp",
                          spec,
                          "--mcp-env",
                          "ev=PL_TEST_MCP_VALUE",
                          "--submit",
                          "ev.get-env",
                          "--payload",
                          "{}",
                          "--new-id",
                          "e1",
                          NULL};
    cr_assert_eq(replay_tool(with), 0);
    with[5] = "--run";
    with[6] = "e1";
    with[7] = NULL;
    cr_assert_eq(replay_tool(with), 0);
    const char *without[] = {F.store,      "--mcp",     spec, "--submit",
                             "ev.get-env", "--payload", "{}", "--new-id",
                             "e2",         NULL};
    cr_assert_eq(replay_tool(without), 0);
    without[3] = "--run";
    without[4] = "e2";
    without[5] = NULL;
    cr_assert_eq(replay_tool(without), 0);
    char *got = result_text("e1");
    cr_expect(strstr(got, "value-for-the-server"), "%s", got);
    free(got);
    got = result_text("e2");
    cr_expect(strstr(got, "PATH") && !strstr(got, "PL_TEST_MCP_VALUE"), "%s",
              got);
    free(got);
    unsetenv("PL_TEST_MCP_UNSET");
    const char *unset[] = {
        F.store,   "--mcp", spec, "--mcp-env", "ev=PL_TEST_MCP_UNSET",
        "--check", NULL};
    cr_expect_eq(replay_tool(unset), 1);
    const char *other[] = {
        F.store,   "--mcp", spec, "--mcp-env", "fs=PL_TEST_MCP_VALUE",
        "--check", NULL};
    cr_expect_eq(replay_tool(other), 1);
}

/* What is not the protocol is an error, never a result made of nothing: a
 * tools/call result that is not an object, or content items that are no
 * content items, are ToolBug (they were an empty, successful result); a
 * tools/list answer whose "tools" is not an array fails the registration
 * (one with an object of tools by name registered them). */
Test(mcp, a_result_or_a_tool_list_that_is_not_the_protocol_is_an_error)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    pl_mcp_options o = quiet();
    open_all("fake", spec, &o);
    static const char *const bad[][2] = {
        {"\"hello\"", "not an object"},
        {"null", "not an object"},
        {"{\"content\": [\"x\"]}", "content item 0"},
        {"{\"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"text\": 1}]}",
         "content item 1"}};
    for (int i = 0; i < 4; i++) {
        char calls[512], id[8];
        snprintf(calls, sizeof calls,
                 "[{\"tool\": \"fake.fail\", \"args\": {\"result\": %s}}]",
                 bad[i][0]);
        snprintf(id, sizeof id, "r%d", i);
        cJSON *got = run(id, calls, 1);
        expect_error(at(got, 0), PL_ERR_TOOL_BUG, bad[i][1]);
        cJSON_Delete(got);
    }
    close_all();
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " toolsobj %s", F.dir);
    o.start_timeout_ms = 20000;
    cr_expect_eq(open_reg("fake", spec, &o), PL_EIO);
    cr_expect(strstr(pl_errmsg(), "\"tools\" array"), "%s", pl_errmsg());
    cr_expect_null(F.mcp);
    cr_expect_null(pl_registry_find(F.reg, "fake.echo"));
}

/* JSON that escapes a lone UTF-16 surrogate (a string cut inside a pair,
 * as JavaScript's slice() and JSON.stringify() make it, or Python's
 * json.dumps() of a name not UTF-8) is read with U+FFFD in its place: the
 * answer was skipped as no JSON, and the call waited its whole timeout
 * for one that had come. */
Test(mcp, an_answer_with_a_lone_surrogate_is_read_not_skipped)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    pl_mcp_options o = quiet();
    o.timeout_ms = 3000;
    open_all("fake", spec, &o);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.fail\", \"args\": "
                     "{\"surrogates\": true}}]",
                     1);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(at(got, 0), "content");
    cr_assert_eq(cJSON_GetArraySize(c), 2, "%s", t_text(got));
    cr_expect_str_eq(s_of(cJSON_GetArrayItem(c, 0), "text"), "cut \ufffd");
    cr_expect_str_eq(s_of(cJSON_GetArrayItem(c, 1), "text"),
                     "\ufffd low, \\ud83d kept, pair \U0001F600");
    cJSON_Delete(got);
}

/* An answer holding \u0000 is the call's error, naming where: cJSON ends
 * a string at its NUL, and the result "ok\u0000 rm -rf /" was recorded as
 * "ok", as if whole.  The call does not wait for another answer, and the
 * server goes on answering. */
Test(mcp, an_answer_holding_u0000_is_an_error_naming_it)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    pl_mcp_options o = quiet();
    o.timeout_ms = 20000;
    open_all("fake", spec, &o);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.fail\", \"args\": {\"nul\": true}}, "
                     "{\"tool\": \"fake.echo\", \"args\": {\"text\": "
                     "\"after\"}}]",
                     2);
    expect_error(at(got, 0), PL_ERR_TOOL_BUG,
                 "the string at '/result/content/0/text' holds \\u0000");
    cr_expect(strstr(first_text(at(got, 1)), "after"), "%s", t_text(got));
    cJSON_Delete(got);
}

/* A request the server does not read in time, cut off part-way, stops
 * the server: what was written of it would run into the next message on
 * the same line, which the server then could not read either (the next
 * call was lost to a timeout too). */
Test(mcp, a_request_cut_off_part_way_stops_the_server)
{
    char log[4300], spec[9000];
    held_fake(log, spec);
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " patient %s", F.dir);
    pl_mcp_options o = quiet();
    o.timeout_ms = 4000; /* the call after starts python again in it */
    open_all("fake", spec, &o);
    /* "slow" keeps the server from reading; then 4 MB it cannot take */
    size_t big = (size_t)4 << 20;
    char *text = malloc(big + 256);
    cr_assert_not_null(text);
    int k = snprintf(text, 256,
                     "{\"calls\": [{\"tool\": \"fake.slow\"}, {\"tool\": "
                     "\"fake.echo\", \"args\": {\"text\": \"");
    memset(text + k, 'x', big);
    snprintf(text + k + big, 64, "\"}}]}");
    pl_outcome *r = t_start(F.engine, "use", text, "r1");
    free(text);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(r),
                                                        "got");
    expect_error(at(got, 0), PL_ERR_TIMEOUT, "no answer in time");
    expect_error(at(got, 1), PL_ERR_TIMEOUT, "does not read its input");
    pl_outcome_free(r);
    char hold[4300];
    snprintf(hold, sizeof hold, "%s/hold", F.dir);
    cr_assert_eq(unlink(hold), 0);
    cJSON *after = run("r2",
                       "[{\"tool\": \"fake.echo\", \"args\": {\"text\": "
                       "\"after\"}}]",
                       1);
    cr_expect(strstr(first_text(at(after, 0)), "after"), "%s", t_text(after));
    cJSON_Delete(after);
}
