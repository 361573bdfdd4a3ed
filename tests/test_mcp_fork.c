/*
 * test_mcp_fork.c -- MCP handles across fork(): a child made by fork()
 * never writes to, signals, waits for nor ends its parent's server or
 * session.  A tool called in the child on the handle it inherited starts
 * a server (stdio: tests/mcp_fake_server.py, which logs what each of its
 * processes hears) or a session (Streamable HTTP: the scripted
 * tests/mcp_http_server.py, which logs each request's session and every
 * DELETE) of the child's own, even while a thread of the parent was
 * inside a call of that handle at the fork; the child's close ends only
 * what is its own; the parent's server and session go on answering
 * after the child has exited.  The children never call cr_assert: they
 * exit with a status the parent reads (child_said()).
 */
#include "support_mcp.h"
#include "support_wrap.h" /* PL_LSAN */

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(mcp_fork, .init = setup, .fini = teardown_http, .timeout = 180);

/* A child's few calls take a second or two; one still running after this
 * long waits for something nobody will give (a lock its parent's thread
 * held at the fork): SIGALRM ends it, and the parent says so (a hang, not
 * a timing). */
#define CHILD_ALARM_S 60

/* What a child's exit status says. */
enum { C_OK, C_ENGINE, C_RUN, C_RESULT, C_LEAK };

static const char *child_said(int ws)
{
    static char text[96];
    if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM)
        return "hung (killed by its alarm)";
    if (WIFSIGNALED(ws)) {
        snprintf(text, sizeof text, "was killed by signal %d", WTERMSIG(ws));
        return text;
    }
    switch (WEXITSTATUS(ws)) {
    case C_OK: return "exited 0";
    case C_ENGINE: return "could not open an engine of its own";
    case C_RUN: return "ran its call, and the run did not complete";
    case C_RESULT: return "got a result that is not the echo of its call";
    case C_LEAK: return "left memory unfreed (LeakSanitizer said so)";
    }
    snprintf(text, sizeof text, "exited %d", WEXITSTATUS(ws));
    return text;
}

static void expect_child_ok(pid_t pid)
{
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == C_OK, "the child %s",
              child_said(ws));
}

/* The echo's arguments {"who": WHO} as the first content item's text. */
static bool echoes(const cJSON *r, const char *who)
{
    const cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(r, "content"), 0);
    const char *text = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(c, "text"));
    char want[64];
    snprintf(want, sizeof want, "\"who\": \"%s\"", who);
    return !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "error")) &&
           text && strstr(text, want);
}

/*
 * Start run @p id of "use" on @p e: one call of @p tool with
 * {"who": @p who}.  No cr_assert: children and threads call it.
 */
static int start_use(pl_outcome **o, pl_engine *e, const char *id,
                     const char *tool, const char *who)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"calls\": [{\"tool\": \"%s\", \"args\": {\"who\": \"%s\"}}]}",
             tool, who);
    return t_try_start(o, e, "use", text, id);
}

/* The result of the call of a completed run of "use" (NULL if none). */
static const cJSON *got_of(const pl_outcome *o)
{
    return cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "got"), 0);
}

/* The parent's run @p id: one call of @p tool, answered with its echo. */
static void parent_calls(const char *id, const char *tool, const char *who)
{
    pl_outcome *o = NULL;
    cr_assert_eq(start_use(&o, F.engine, id, tool, who), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect(echoes(got_of(o), who), "%s", t_text(got_of(o)));
    pl_outcome_free(o);
}

/* The child's end: @p code, or C_LEAK when LeakSanitizer (built with
 * AddressSanitizer) finds memory no longer reachable, the handle's
 * included.  Not asked after a fork during a call (@p ask false): what
 * the thread making it held is reachable from no stack in the child. */
static _Noreturn void child_exit(int code, bool ask)
{
#ifdef PL_LSAN
    if (!code && ask && __lsan_do_recoverable_leak_check())
        code = C_LEAK;
#else
    (void)ask;
#endif
    _exit(code);
}

/*
 * The child: a run of "use" calling @p tool with {"who": "child"} on an
 * engine of its own on @p store (the parent's engine is never carried
 * across fork()), then that engine and the inherited handle closed.  Exits
 * C_OK when the call was answered with its echo.
 */
static _Noreturn void child_calls(const char *store, const char *tool,
                                  bool ask_leaks)
{
    alarm(CHILD_ALARM_S);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, store, F.reg, &eo) != PL_OK)
        _exit(C_ENGINE);
    pl_outcome *o = NULL;
    int code = C_OK;
    if (start_use(&o, e, "child", tool, "child") != PL_OK ||
        o->status != PL_RUN_COMPLETED)
        code = C_RUN;
    else if (!echoes(got_of(o), "child"))
        code = C_RESULT;
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_mcp_close(F.mcp);
    child_exit(code, ask_leaks);
}

/* Fork a child that calls @p tool (child_calls(), on a store apart from
 * the parent's) and wait for it to exit 0. */
static void fork_child_calling(const char *tool, bool ask_leaks)
{
    char store[4200];
    snprintf(store, sizeof store, "%s", t_store_path());
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0)
        child_calls(store, tool, ask_leaks);
    expect_child_ok(pid);
}

/* ------------------------------------------------------------------------ */
/* stdio                                                                    */
/* ------------------------------------------------------------------------ */

static void open_fake(const char *mode)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " %s %s", mode, F.dir);
    pl_mcp_options o = quiet();
    open_all("fake", spec, &o);
}

/* The fake servers started in F.dir, by process id, in order. */
static int server_pids(pid_t *out, int max)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/pids", F.dir);
    FILE *f = fopen(path, "r");
    int n = 0, pid;
    while (f && n < max && fscanf(f, "%d", &pid) == 1)
        out[n++] = pid;
    if (f)
        fclose(f);
    return n;
}

/* The log of what fake server @p pid heard. */
static const char *log_of_pid(pid_t pid)
{
    static char path[2][4300];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/log-%d", F.dir, (int)pid);
    return path[k];
}

/* Two servers were started, the parent's (first) and the child's; the
 * parent's heard its handshake once and its calls @p parent_whos, nothing
 * of the child; the child's heard the child's call; and the child's close
 * ended it. */
static void servers_kept_apart(const char *const *parent_whos, int n_whos)
{
    pid_t pids[4];
    int n = server_pids(pids, 4);
    cr_assert_eq(n, 2,
                 "%d server(s) started: one of the parent's and one of the "
                 "child's are wanted",
                 n);
    const char *mine = log_of_pid(pids[0]), *its = log_of_pid(pids[1]);
    cr_expect_eq(count_lines(mine, "\"child\"", NULL), 0,
                 "the child wrote to the parent's server");
    cr_expect_eq(count_lines(mine, "\"initialize\"", NULL), 1);
    for (int i = 0; i < n_whos; i++)
        cr_expect_eq(count_lines(mine, "tools/call", parent_whos[i]), 1, "%s",
                     parent_whos[i]);
    cr_expect_eq(count_lines(its, "tools/call", "\"child\""), 1);
    cr_expect_eq(kill(pids[1], 0), -1, "the child's server outlived it");
}

Test(mcp_fork, a_childs_call_starts_its_own_server_and_leaves_the_parents)
{
    open_fake("ok");
    parent_calls("p1", "fake.echo", "before");
    fork_child_calling("fake.echo", true);
    /* the parent's server answers as before: not started again */
    parent_calls("p2", "fake.echo", "after");
    const char *whos[] = {"\"before\"", "\"after\""};
    servers_kept_apart(whos, 2);
}

/* A run "slow" of one call of a tool that is slow to answer, on a thread
 * of its own (started by slow_start()). */
typedef struct slow_call {
    const char *tool;
    pthread_t thread;
    pl_outcome *o;
    int st;
} slow_call;

/* The thread: no cr_assert here. */
static void *run_slow(void *arg)
{
    slow_call *c = arg;
    c->st = start_use(&c->o, F.engine, "slow", c->tool, "slow");
    return NULL;
}

static void slow_start(slow_call *c, const char *tool)
{
    *c = (slow_call){.tool = tool, .st = -1};
    cr_assert_eq(pthread_create(&c->thread, NULL, run_slow, c), 0);
}

/* Wait for the slow run to end; the result of its call (a copy; caller
 * frees). */
static cJSON *slow_result(slow_call *c)
{
    cr_assert_eq(pthread_join(c->thread, NULL), 0);
    cr_assert_eq(c->st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(c->o->status, PL_RUN_COMPLETED, "%s",
                 c->o->reason ? c->o->reason : "");
    cJSON *r = cJSON_Duplicate(got_of(c->o), 1);
    pl_outcome_free(c->o);
    cr_assert_not_null(r);
    return r;
}

/* A fork while a thread of the parent waits inside a call (holding the
 * handle's lock): the child's call neither waits for that lock nor takes
 * that answer; the parent's call is answered when the server goes on. */
Test(mcp_fork, a_fork_during_a_call_leaves_that_call_to_the_parent)
{
    open_fake("patient");
    write_file(F.dir, "hold", "");
    char log[4300], hold[4300];
    snprintf(log, sizeof log, "%s/log", F.dir);
    snprintf(hold, sizeof hold, "%s/hold", F.dir);
    slow_call c;
    slow_start(&c, "fake.slow");
    wait_for(log, "tools/call", "\"slow\"");
    fork_child_calling("fake.echo", false);
    cr_assert_eq(unlink(hold), 0);
    cJSON *r = slow_result(&c);
    cr_expect_str_eq(first_text(r), "done", "%s", t_text(r));
    cJSON_Delete(r);
    parent_calls("p2", "fake.echo", "after");
    const char *whos[] = {"\"slow\"", "\"after\""};
    servers_kept_apart(whos, 2);
}

/* ------------------------------------------------------------------------ */
/* Streamable HTTP                                                          */
/* ------------------------------------------------------------------------ */

#if PL_WITH_CURL /* the HTTP transport is built with libcurl */

/* How many requests @p method of session @p sid server 0 logged. */
static int in_session(const char *method, const char *sid)
{
    return requests_in(&g_servers[0], method, sid);
}

Test(mcp_fork, a_child_closing_an_inherited_http_handle_ends_no_session)
{
    pl_mcp_options o = quiet();
    open_on("{}", &o);
    parent_calls("p1", "h.echo", "before");
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        alarm(CHILD_ALARM_S);
        pl_mcp_close(F.mcp);
        child_exit(C_OK, true);
    }
    expect_child_ok(pid);
    cr_expect_eq(requests(&g_servers[0], "DELETE"), 0,
                 "the child ended the parent's session");
    parent_calls("p2", "h.echo", "after");
    cr_expect_eq(requests(&g_servers[0], "initialize"), 1);
    cr_expect_eq(in_session("tools/call", "s-1"), 2);
    close_all();
    cr_expect_eq(requests(&g_servers[0], "DELETE"), 1);
    cr_expect_eq(in_session("DELETE", "s-1"), 1);
}

Test(mcp_fork, a_childs_http_call_begins_and_ends_a_session_of_its_own)
{
    pl_mcp_options o = quiet();
    open_on("{}", &o);
    parent_calls("p1", "h.echo", "before");
    fork_child_calling("h.echo", true);
    /* the child's call went in a session it began, which its close ended */
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
    cr_expect_eq(in_session("tools/call", "s-2"), 1);
    cr_expect_eq(in_session("DELETE", "s-2"), 1);
    cr_expect_eq(in_session("DELETE", "s-1"), 0,
                 "the child ended the parent's session");
    parent_calls("p2", "h.echo", "after");
    cr_expect_eq(in_session("tools/call", "s-1"), 2);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
    close_all();
    cr_expect_eq(in_session("DELETE", "s-1"), 1);
    cr_expect_eq(requests(&g_servers[0], "DELETE"), 2);
}

/* A fork while a thread of the parent reads an event stream that never
 * brings its answer: the child's call begins a session of its own at
 * once, and libcurl's transfer in flight is let go in the child with no
 * word to the server; the parent's call ends at its timeout, in its
 * session, which goes on. */
Test(mcp_fork, a_fork_during_an_http_call_leaves_that_call_to_the_parent)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 3000;
    open_on("{\"call\": [null, {\"forever\": true, \"sse\": true}]}", &o);
    parent_calls("p1", "h.echo", "before");
    slow_call c;
    slow_start(&c, "h.echo");
    for (int i = 0; i < 6000 && requests(&g_servers[0], "tools/call") < 2; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    cr_assert_eq(requests(&g_servers[0], "tools/call"), 2);
    fork_child_calling("h.echo", false);
    cJSON *r = slow_result(&c);
    expect_error(r, PL_ERR_TIMEOUT, "no answer in time");
    cJSON_Delete(r);
    parent_calls("p2", "h.echo", "after");
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
    cr_expect_eq(in_session("tools/call", "s-2"), 1);
    cr_expect_eq(in_session("DELETE", "s-2"), 1);
    cr_expect_eq(in_session("DELETE", "s-1"), 0,
                 "the child ended the parent's session");
    cr_expect_eq(in_session("tools/call", "s-1"), 3);
}

#endif
