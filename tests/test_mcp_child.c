/*
 * test_mcp_child.c -- what the guide and policyledger_mcp.h promise of a
 * stdio MCP server's process: it gets only HOME, LOGNAME, PATH, SHELL,
 * TERM, USER, LANG and the variables opts.env names; its standard error
 * is appended to opts.stderr_path; it runs in a process group of its own;
 * its spec is split at spaces with no shell; and it dies with the
 * engine's process.  tests/mcp_fake_server.py serves the tools, started
 * by a small Python wrapper that first writes down what it was given.
 */
#include "support_mcp.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(mcp_child, .init = setup, .fini = teardown, .timeout = 120);

/* The wrapper: writes its environment, its argv, its pid and process
 * group to files in DIR, a line to its stderr, then becomes the fake
 * server (mode ok). */
static const char k_wrapper[] =
    "import json, os, sys\n"
    "d = sys.argv[1]\n"
    "with open(os.path.join(d, 'seen.json'), 'w') as f:\n"
    "    json.dump({'env': dict(os.environ), 'argv': sys.argv[1:],\n"
    "               'pid': os.getpid(), 'pgid': os.getpgid(0)}, f)\n"
    "sys.stderr.write('from the server\\n')\n"
    "sys.stderr.flush()\n"
    "os.execvp('python3', ['python3', '" FAKE "', 'ok', d])\n";

/* The interpreter itself: "python3" in PATH may be a launcher (pyenv's
 * shim) that adds variables of its own before the wrapper sees them. */
static void spec_of(char *spec, size_t n, const char *extra)
{
    char py[4096] = "";
    FILE *p = popen("python3 -c 'import sys; print(sys.executable)'", "r");
    cr_assert_not_null(p);
    cr_assert_not_null(fgets(py, sizeof py, p));
    pclose(p);
    py[strcspn(py, "\n")] = '\0';
    cr_assert(py[0] == '/' && !strchr(py, ' '), "python3 is at '%s'", py);
    write_file(F.dir, "wrap.py", k_wrapper);
    snprintf(spec, n, "stdio:%s %s/wrap.py %s%s", py, F.dir, F.dir, extra);
}

static cJSON *seen(void)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/seen.json", F.dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "the wrapper wrote nothing");
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s", buf);
    return j;
}

static const char *const k_always[] = {"HOME", "LOGNAME", "PATH", "SHELL",
                                       "TERM", "USER",    "LANG"};

Test(mcp_child, only_the_listed_environment_reaches_the_server)
{
    setenv("PL_TEST_MCP_SECRET", "do-not-pass", 1);
    setenv("PL_TEST_MCP_PASSED", "yes", 1);
    setenv("LANG", "C.UTF-8", 1);
    setenv("TERM", "dumb", 1);
    static const char *const env[] = {"PL_TEST_MCP_PASSED", "UNSET_X"};
    pl_mcp_options o = quiet();
    o.env = env;
    o.n_env = 2;
    char spec[9000];
    spec_of(spec, sizeof spec, "");
    cr_assert_eq(open_reg("fake", spec, &o), PL_OK, "%s", pl_errmsg());
    cJSON *s = seen();
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "env");
    const cJSON *v;
    cJSON_ArrayForEach(v, e)
    {
        bool listed = !strcmp(v->string, "PL_TEST_MCP_PASSED");
        for (size_t i = 0; i < sizeof k_always / sizeof *k_always; i++)
            listed = listed || !strcmp(v->string, k_always[i]);
        cr_expect(listed, "the server got %s=%s", v->string,
                  cJSON_IsString(v) ? v->valuestring : "?");
    }
    for (size_t i = 0; i < sizeof k_always / sizeof *k_always; i++) {
        const char *want = getenv(k_always[i]);
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(e, k_always[i]);
        if (want)
            cr_expect(cJSON_IsString(got) && !strcmp(got->valuestring, want),
                      "%s", k_always[i]);
    }
    v = cJSON_GetObjectItemCaseSensitive(e, "PL_TEST_MCP_PASSED");
    cr_expect(cJSON_IsString(v) && !strcmp(v->valuestring, "yes"));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(e, "PL_TEST_MCP_SECRET"));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(e, "UNSET_X"));
    cJSON_Delete(s);
}

Test(mcp_child, stderr_appended_own_group_and_no_shell)
{
    pl_mcp_options o = quiet(); /* F.dir/stderr */
    write_file(F.dir, "stderr", "before\n");
    char spec[9000];
    spec_of(spec, sizeof spec, " $HOME;echo|x 'a b'");
    cr_assert_eq(open_reg("fake", spec, &o), PL_OK, "%s", pl_errmsg());
    cJSON *s = seen();
    /* split at spaces, nothing expanded, quotes kept */
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(s, "argv");
    cr_assert_eq(cJSON_GetArraySize(argv), 4);
    cr_expect_str_eq(cJSON_GetArrayItem(argv, 1)->valuestring, "$HOME;echo|x");
    cr_expect_str_eq(cJSON_GetArrayItem(argv, 2)->valuestring, "'a");
    cr_expect_str_eq(cJSON_GetArrayItem(argv, 3)->valuestring, "b'");
    /* a process group of its own */
    double pid = cJSON_GetObjectItemCaseSensitive(s, "pid")->valuedouble;
    double pgid = cJSON_GetObjectItemCaseSensitive(s, "pgid")->valuedouble;
    cr_expect_eq(pid, pgid, "pid %.0f in group %.0f", pid, pgid);
    cr_expect_neq((pid_t)pgid, getpgrp());
    cJSON_Delete(s);
    /* what was in the file stays, the server's line after it */
    char path[4300], buf[4096];
    snprintf(path, sizeof path, "%s/stderr", F.dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cr_expect(!strncmp(buf, "before\nfrom the server\n", 23), "%s", buf);
}

Test(mcp_child, the_server_dies_with_the_engines_process)
{
    char spec[9000], ready[4300];
    spec_of(spec, sizeof spec, "");
    snprintf(ready, sizeof ready, "%s/ready", F.dir);
    fflush(NULL);
    pid_t child = fork();
    cr_assert_neq(child, -1);
    if (child == 0) { /* never asserts: exits with a status instead */
        pl_mcp_options o = quiet();
        if (open_reg("fake", spec, &o) != PL_OK)
            _exit(3);
        FILE *f = fopen(ready, "w");
        if (!f)
            _exit(4);
        fclose(f);
        sleep(600);
        _exit(5);
    }
    struct timespec ts = {0, 10000000};
    int status = 0;
    for (int i = 0; i < 6000 && access(ready, F_OK) != 0; i++) {
        cr_assert_eq(waitpid(child, &status, WNOHANG), 0,
                     "the child ended, status %d", status);
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(access(ready, F_OK), 0, "the child never registered");
    cJSON *s = seen();
    long server = (long)cJSON_GetObjectItemCaseSensitive(s, "pid")->valuedouble;
    cJSON_Delete(s);
    cr_assert(!t_proc_gone(server), "the server runs");
    kill(child, SIGKILL);
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_expect(t_proc_ends(server), "server %ld outlived the engine's process",
              server);
    if (!t_proc_gone(server))
        kill((pid_t)server, SIGKILL);
}
