/*
 * test_mcp_tools.c -- an MCP server's tool list over time
 * (policies/mcp/): each run records the list at its first call; a server
 * that announces notifications/tools/list_changed is listed again before
 * the next call; a run replayed after the server changed its tools is
 * served from its ledger while the tools' code identities say they
 * changed (tests/agent_mcp.sh has ledger-replay --check report it).
 *
 * The server is the reference filesystem server from npm (installed into
 * the build tree by tests/npm_setup.sh; skipped with a message without
 * it), behind tests/mcp_alter.py, which logs what it is sent and changes
 * the tool list on request.
 */
#include "support.h"

#include <fcntl.h>
#include <policyledger_mcp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FS_SERVER                                                              \
    PL_TEST_BIN_DIR "/npm/node_modules/@modelcontextprotocol/"                 \
                    "server-filesystem/dist/index.js"
#define ALTER PL_TEST_SRC_DIR "/mcp_alter.py"
#define READ "fs.read_text_file"
#define ROOTS "fs.list_allowed_directories"

static struct {
    char dir[1024];  /* the server's log and switches; its root */
    char spec[4096]; /* stdio:python3 ALTER DIR node FS_SERVER DIR */
    char store[4200];
    char errlog[1100];
    pl_registry *reg;
    pl_mcp *mcp;
    pl_engine *engine;
} T;

/* The root: {"paths": [...]} reads each file with fs.read_text_file, then
 * lists the roots; returns {"n": calls}. */
static int reader(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *p;
    int n = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(a->payload, "paths"))
    {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, READ, "{s:s}", "path", p->valuestring);
        cJSON_Delete(r);
        if (st)
            return st;
        n++;
    }
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, ROOTS, pl_json_empty());
    cJSON_Delete(r);
    return st ? st : pl_steps_add_resultf(out, "{s:i}", "n", n + 1);
}

static void start(void)
{
    t_need_npm(FS_SERVER, "mcp_setup");
    cr_assert_eq(pl_registry_new(&T.reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "reader";
    d.fn = reader;
    cr_assert_eq(pl_registry_add(T.reg, &d), PL_OK);
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    o.stderr_path = T.errlog;
    int st = pl_mcp_register(&T.mcp, T.reg, "fs", T.spec, &o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    T.engine = t_engine(T.store, T.reg, PL_DURABILITY_PROCESS);
}

static void stop(void)
{
    /* the engine first, then the server, then the registry */
    pl_engine_close(T.engine);
    T.engine = NULL;
    pl_mcp_close(T.mcp);
    T.mcp = NULL;
    pl_registry_free(T.reg);
    T.reg = NULL;
}

static void setup(void)
{
    snprintf(T.dir, sizeof T.dir, "%s", t_tmpdir());
    snprintf(T.spec, sizeof T.spec, "stdio:python3 %s %s node %s %s", ALTER,
             T.dir, FS_SERVER, T.dir);
    snprintf(T.store, sizeof T.store, "%s", t_store_path());
    snprintf(T.errlog, sizeof T.errlog, "%s/stderr", T.dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/a.txt", T.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("alpha\n", f);
    fclose(f);
}

static void teardown(void)
{
    stop();
    t_cleanup();
}

TestSuite(mcp_tools, .init = setup, .fini = teardown);

/* Lines of the wrapper's log @p file (in DIR) that hold @p word. */
static int lines_with(const char *file, const char *word)
{
    char path[1100], line[65536];
    snprintf(path, sizeof path, "%s/%s", T.dir, file);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, word) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Lines sent to the server, and from it, that hold @p word. */
static int sent(const char *word) { return lines_with("log", word); }
static int server_said(const char *word) { return lines_with("out.log", word); }

/* Run @p id of "reader" over the file a.txt read @p reads times. */
static void read_run(const char *id, int reads)
{
    cJSON *paths = cJSON_CreateArray();
    char path[1100];
    snprintf(path, sizeof path, "%s/a.txt", T.dir);
    for (int i = 0; i < reads; i++)
        cJSON_AddItemToArray(paths, cJSON_CreateString(path));
    cJSON *p = NULL;
    cr_assert_eq(pl_json_pack(&p, "{s:o}", "paths", paths), PL_OK);
    char *payload = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    pl_outcome *o = t_start(T.engine, "reader", payload, id);
    cJSON_free(payload);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run %s: %s", id,
                 o->reason ? o->reason : "");
    pl_outcome_free(o);
}

/* The values of run @p id's "mcp.tools" side effects, in order (caller
 * frees the array). */
static int collect(const pl_step *s, void *user)
{
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    if (pl_step_type_of(s) == PL_STEP_SIDE_EFFECT && cJSON_IsString(name) &&
        strcmp(name->valuestring, "mcp.tools") == 0)
        cJSON_AddItemToArray(
            user,
            cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p, "value"), 1));
    return 0;
}

static cJSON *snapshots(const char *id)
{
    cJSON *all = cJSON_CreateArray();
    cr_assert_eq(pl_run_walk(T.engine, id, collect, all), PL_OK);
    return all;
}

static const char *str(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    cr_assert(cJSON_IsString(s), "no \"%s\" in %s", key, t_text(v));
    return s->valuestring;
}

/* The entry of tool @p name in a snapshot's list, or NULL. */
static const cJSON *listed(const cJSON *snap, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(snap, "list"))
    {
        if (!strcmp(str(t, "name"), name))
            return t;
    }
    return NULL;
}

static const char *code_of(const char *policy)
{
    const pl_policy_def *d = pl_registry_find(T.reg, policy);
    cr_assert_not_null(d, "%s", policy);
    cr_assert_not_null(d->code_version, "%s", policy);
    return d->code_version;
}

Test(mcp_tools, a_run_records_the_tool_list_at_its_first_call)
{
    start();
    cr_expect_eq(strncmp(code_of(READ), "mcp:" READ "@fnv1a64:", 27), 0, "%s",
                 code_of(READ));
    cr_expect_str_neq(code_of(READ), code_of(ROOTS));
    read_run("r1", 2);
    read_run("r2", 1);
    cJSON *s1 = snapshots("r1"), *s2 = snapshots("r2");
    cr_assert_eq(cJSON_GetArraySize(s1), 3, "%s", t_text(s1));
    cr_assert_eq(cJSON_GetArraySize(s2), 2, "%s", t_text(s2));
    /* the list once, at each run's first call */
    const cJSON *first = cJSON_GetArrayItem(s1, 0);
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(first, "list"));
    cr_expect_eq((size_t)n, pl_mcp_tool_count(T.mcp));
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(first,
                                                                     "codes")),
                 n);
    cr_expect_not_null(listed(first, "read_text_file"));
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(s2,
                                                                           0),
                                                        "list"));
    for (int i = 1; i < 3; i++)
        cr_expect_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(s1,
                                                                           i),
                                                        "list"),
                       "call %d recorded the list again", i);
    /* every call names the list and the tool it was made against */
    for (int i = 0; i < 3; i++) {
        const cJSON *s = cJSON_GetArrayItem(s1, i);
        cr_expect_str_eq(str(s, "fingerprint"), str(first, "fingerprint"));
        cr_expect_str_eq(str(s, "tool"), code_of(i < 2 ? READ : ROOTS));
    }
    cJSON_Delete(s1);
    cJSON_Delete(s2);
}

/* Change the server's list (@p what: mcp_alter.py's DIR/altered) and have
 * it say so; return once it has. */
static void change_server(const char *what, bool announce)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/altered", T.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(what, f);
    fclose(f);
    if (!announce)
        return;
    snprintf(path, sizeof path, "%s/announce", T.dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
    for (int i = 0; i < 1000 && access(path, F_OK) == 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_neq(access(path, F_OK), 0, "the wrapper did not announce");
}

Test(mcp_tools, a_list_the_server_says_changed_is_read_again_for_new_calls)
{
    start();
    read_run("r1", 1);
    cr_expect_eq(sent("\"tools/list\""), 1);
    change_server("read_text_file description\n", true);
    read_run("r2", 1);
    cr_expect_eq(sent("\"tools/list\""), 2, "the list was not read again");
    read_run("r3", 1);
    cr_expect_eq(sent("\"tools/list\""), 2, "read again with no change");
    cJSON *s1 = snapshots("r1"), *s2 = snapshots("r2"), *s3 = snapshots("r3");
    const cJSON *a = cJSON_GetArrayItem(s1, 0), *b = cJSON_GetArrayItem(s2, 0);
    cr_expect_str_neq(str(a, "fingerprint"), str(b, "fingerprint"));
    cr_expect_str_eq(str(b, "fingerprint"),
                     str(cJSON_GetArrayItem(s3, 0), "fingerprint"));
    cr_expect_null(strstr(str(listed(a, "read_text_file"), "description"),
                          "(changed)"));
    cr_expect_not_null(strstr(str(listed(b, "read_text_file"), "description"),
                              "(changed)"));
    /* the changed tool has another identity; the other tools keep theirs */
    cr_expect_str_eq(str(a, "tool"), code_of(READ));
    cr_expect_str_neq(str(b, "tool"), code_of(READ));
    cr_expect_str_eq(str(cJSON_GetArrayItem(s2, 1), "tool"), code_of(ROOTS));
    cJSON_Delete(s1);
    cJSON_Delete(s2);
    cJSON_Delete(s3);
}

static int g_code_changed;   /* PL_EVENT_CODE_CHANGED seen */
static char g_codes[2][512]; /* the last one's, recorded and new */

static void on_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind != PL_EVENT_CODE_CHANGED || !ev->diff)
        return;
    g_code_changed++;
    const char *c[2] = {ev->diff->recorded_code, ev->diff->new_code};
    for (int k = 0; k < 2; k++)
        snprintf(g_codes[k], sizeof g_codes[k], "%s", c[k] ? c[k] : "");
}

Test(mcp_tools, a_replay_after_the_server_changed_its_tools_is_served)
{
    start();
    read_run("r1", 1);
    char old_code[512];
    snprintf(old_code, sizeof old_code, "%s", code_of(READ));
    const char *title = str(pl_mcp_tool(T.mcp, READ), "title");
    cr_expect_null(strstr(title, "(changed)"), "%s", title);
    stop();
    /* the server changes a tool the run used: the next process sees it */
    change_server("read_text_file title\n", false);
    int calls = sent("\"tools/call\"");
    start();
    cr_expect_str_neq(code_of(READ), old_code);
    title = str(pl_mcp_tool(T.mcp, READ), "title");
    cr_expect_not_null(strstr(title, "(changed)"), "%s", title);
    cr_expect_null(pl_mcp_tool(T.mcp, "fs.no_such_tool"));
    cr_expect_null(pl_mcp_tool(T.mcp, "other.read_text_file"));
    cr_expect_null(pl_mcp_tool(T.mcp, "read_text_file"));
    cr_expect_null(pl_mcp_tool(NULL, READ));
    /* the run replays from its ledger: the server is sent no call, and
     * the tools it recorded stay as recorded; the changed tool's call is
     * reported as recorded by other code */
    pl_engine_close(T.engine);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = on_event;
    cr_assert_eq(pl_engine_open(&T.engine, T.store, T.reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, T.engine, "r1", NULL), PL_OK);
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(o->calls_executed, 0);
    pl_outcome_free(o);
    cr_expect_eq(g_code_changed, 1);
    cr_expect_str_eq(g_codes[0], old_code);
    cr_expect_str_eq(g_codes[1], code_of(READ));
    cr_expect_eq(sent("\"tools/call\""), calls, "a replay sent a call");
    cJSON *s1 = snapshots("r1");
    const cJSON *first = cJSON_GetArrayItem(s1, 0);
    cr_expect_str_eq(str(first, "tool"), old_code);
    cr_expect_null(strstr(str(listed(first, "read_text_file"), "title"),
                          "(changed)"));
    cJSON_Delete(s1);
    /* a new run records the list as it is now */
    read_run("r2", 1);
    cJSON *s2 = snapshots("r2");
    cr_expect_str_eq(str(cJSON_GetArrayItem(s2, 0), "tool"), code_of(READ));
    cJSON_Delete(s2);
}

/* ledger-replay STORE --mcp fs=SPEC --check [--json]: its exit status;
 * its output in DIR/out. */
static int check(bool json)
{
    char spec[4200], out[1100];
    snprintf(spec, sizeof spec, "fs=%s", T.spec);
    snprintf(out, sizeof out, "%s/out", T.dir);
    char *argv[] = {PL_TEST_BIN_DIR "/tools/ledger-replay",
                    T.store,
                    "--mcp",
                    spec,
                    "--check",
                    json ? "--json" : NULL,
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&fa, 2, T.errlog,
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    pid_t pid;
    extern char **environ;
    int e = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(e, 0, "%s", strerror(e));
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static char out_text[1 << 20]; /* ledger-replay's output */

/* Whether ledger-replay's output holds @p text. */
static bool printed(const char *text)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/out", T.dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    out_text[fread(out_text, 1, sizeof out_text - 1, f)] = '\0';
    fclose(f);
    return strstr(out_text, text) != NULL;
}

Test(mcp_tools, the_check_reports_a_changed_tool_with_both_listings)
{
    t_lmdb_only("ledger-replay opens the store by its path");
    start();
    char payload[1200];
    snprintf(payload, sizeof payload, "{\"path\": \"%s/a.txt\"}", T.dir);
    pl_outcome *o = t_start(T.engine, READ, payload, "r1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    stop();
    cr_expect_eq(check(false), 0);
    cr_expect(printed("check r1 (completed): ok"));
    cr_expect(!printed("recorded by other code"));
    int calls = sent("\"tools/call\"");
    change_server("read_text_file title\n", false);
    cr_expect_eq(check(false), 0);
    cr_expect(printed("check r1 (completed): ok"));
    cr_expect(printed("recorded by other code that replays the same: mcp:" READ
                      "@fnv1a64:"));
    cr_expect(printed("    the MCP tool as recorded: {\"name\":"
                      "\"read_text_file\",\"title\":\"Read Text File\","));
    cr_expect(printed("    the MCP tool now:         {\"name\":"
                      "\"read_text_file\",\"title\":\"Read Text File "
                      "(changed)\","));
    cr_expect_eq(check(true), 0);
    cr_expect(printed(""));
    cJSON *doc = cJSON_Parse(out_text);
    const cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "runs"),
                               0),
            "code_changed"),
        0);
    cr_assert_not_null(c, "%s", out_text);
    cr_expect_str_eq(str(cJSON_GetObjectItemCaseSensitive(c, "recorded_tool"),
                         "title"),
                     "Read Text File");
    cr_expect_str_eq(str(cJSON_GetObjectItemCaseSensitive(c, "new_tool"),
                         "title"),
                     "Read Text File (changed)");
    cJSON_Delete(doc);
    cr_expect_eq(sent("\"tools/call\""), calls, "a check sent a call");
}

Test(mcp_tools, a_tool_the_server_no_longer_lists_is_not_sent)
{
    start();
    change_server("read_text_file title\nlist_allowed_directories gone\n",
                  true);
    int calls = sent("\"tools/call\"");
    pl_outcome *o = t_start(T.engine, ROOTS, "{}", "r1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const pl_step *last = pl_steps_at(o->steps, pl_steps_count(o->steps) - 1);
    cr_expect(pl_step_is_error(last), "%s", t_text(pl_step_payload(last)));
    cr_expect_str_eq(pl_step_error_code(last), PL_ERR_NOT_FOUND);
    cr_expect_not_null(strstr(str(pl_step_payload(last), "message"),
                              "no longer lists"));
    cr_expect_eq(sent("\"tools/call\""), calls);
    cJSON *s = snapshots("r1");
    const cJSON *v = cJSON_GetArrayItem(s, 0);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(v, "tool")), "%s",
              t_text(v));
    cr_expect_null(listed(v, "list_allowed_directories"));
    cr_expect_not_null(listed(v, "read_text_file"));
    cJSON_Delete(s);
    pl_outcome_free(o);
    /* the tools it still lists are called */
    char payload[1200];
    snprintf(payload, sizeof payload, "{\"path\": \"%s/a.txt\"}", T.dir);
    o = t_start(T.engine, READ, payload, "r2");
    last = pl_steps_at(o->steps, pl_steps_count(o->steps) - 1);
    cr_expect(!pl_step_is_error(last), "%s", t_text(pl_step_payload(last)));
    pl_outcome_free(o);
    cr_expect_eq(sent("\"tools/call\""), calls + 1);
}

/* ------------------------------------------------------------------------ */
/* server-everything: a long operation that reports progress                */
/* ------------------------------------------------------------------------ */

#define EVERYTHING                                                             \
    PL_TEST_BIN_DIR "/npm/node_modules/@modelcontextprotocol/"                 \
                    "server-everything/dist/index.js"

/* server-everything behind the wrapper, as "ev", calls timing out after
 * @p timeout_ms. */
static void start_everything(long timeout_ms)
{
    t_need_npm(EVERYTHING, "mcp_setup");
    snprintf(T.spec, sizeof T.spec, "stdio:python3 %s %s node %s stdio", ALTER,
             T.dir, EVERYTHING);
    cr_assert_eq(pl_registry_new(&T.reg), PL_OK);
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    o.stderr_path = T.errlog;
    o.timeout_ms = timeout_ms;
    int st = pl_mcp_register(&T.mcp, T.reg, "ev", T.spec, &o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    T.engine = t_engine(T.store, T.reg, PL_DURABILITY_PROCESS);
}

/* Whether @p v's text holds @p word. */
static bool holds(const cJSON *v, const char *word)
{
    char *text = t_text(v);
    bool found = text && strstr(text, word);
    free(text);
    return found;
}

Test(mcp_tools, a_long_operation_reports_progress_and_finishes)
{
    start_everything(0);
    cr_assert_not_null(pl_registry_find(T.reg, "ev.trigger-long-running-"
                                               "operation"));
    pl_outcome *o = t_start(T.engine, "ev.trigger-long-running-operation",
                            "{\"duration\": 1, \"steps\": 4}", "r1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const pl_step *last = pl_steps_at(o->steps, pl_steps_count(o->steps) - 1);
    cr_assert(!pl_step_is_error(last), "%s", t_text(pl_step_payload(last)));
    cr_expect(holds(pl_step_payload(last), "completed"));
    pl_outcome_free(o);
    /* the server reported each step on the call's progress token */
    cr_expect_eq(server_said("notifications/progress"), 4);
    cr_expect_eq(server_said("\"progressToken\""), 4);
    cr_expect_eq(sent("\"progressToken\""), 1);
}

Test(mcp_tools, a_long_operation_past_the_timeout_is_cancelled)
{
    start_everything(1500);
    pl_outcome *o = t_start(T.engine, "ev.trigger-long-running-operation",
                            "{\"duration\": 30, \"steps\": 30}", "r1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const pl_step *last = pl_steps_at(o->steps, pl_steps_count(o->steps) - 1);
    cr_expect(pl_step_is_error(last));
    cr_expect_str_eq(pl_step_error_code(last), PL_ERR_TIMEOUT);
    pl_outcome_free(o);
    cr_expect_gt(server_said("notifications/progress"), 0);
    /* the server goes on answering */
    o = t_start(T.engine, "ev.echo", "{\"message\": \"still here\"}", "r2");
    last = pl_steps_at(o->steps, pl_steps_count(o->steps) - 1);
    cr_expect(holds(pl_step_payload(last), "still here"));
    pl_outcome_free(o);
    /* the cancellation went before the echo on the same pipe, so the
     * wrapper has logged it by the time the echo was answered */
    cr_expect_eq(sent("notifications/cancelled"), 1);
}

Test(mcp_tools, no_sampling_or_elicitation_is_offered_to_a_client_without_them)
{
    /* the client declares no sampling or elicitation capability: the
     * server registers no tool that would ask for them */
    start_everything(0);
    cr_expect_not_null(pl_registry_find(T.reg, "ev.echo"));
    cr_expect_null(pl_registry_find(T.reg, "ev.trigger-sampling-request"));
    cr_expect_null(pl_registry_find(T.reg, "ev.trigger-elicitation-request"));
    cr_expect_eq(sent("\"sampling\""), 0);
}
