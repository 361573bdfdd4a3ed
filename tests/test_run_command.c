/*
 * test_run_command.c -- the run_command tool (policies/tools/run_command.c)
 * and the sandbox's path arguments (pl_sandbox_check_command_in()), with
 * real processes: the allowlist, paths that leave the root, the
 * environment, stdin, a timeout that kills a process group, 10 MB of output
 * in bounded memory, and a kill of the engine while a command runs.
 *
 * A root policy "use" calls run_command with its payload's "args" and
 * returns {"got": the result or the error result}.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int use(pl_ctx *ctx, const pl_action *action, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(action->payload,
                                                         "args");
    const cJSON *within = cJSON_GetObjectItemCaseSensitive(action->payload,
                                                           "within_ms");
    cJSON *r = NULL;
    int st;
    if (cJSON_IsNumber(within)) { /* under a timeout decorator */
        pl_decorator d;
        pl_action call = PL_ACTION_INIT;
        call.policy = "run_command";
        call.payload = args;
        pl_step *s = NULL;
        if ((st = pl_decorator_timeout(&d, (int64_t)within->valuedouble)))
            return st;
        st = pl_ctx_call(&s, ctx, &call, &d, 1);
        if (s)
            r = cJSON_Duplicate(pl_step_payload(s), 1);
        pl_step_free(s);
    } else {
        st = pl_ctx_invoke(&r, ctx, "run_command", args);
    }
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
    char store[4400];
} fixture;

static fixture F;

static const char *const k_commands[] = {"echo", "sh", "env", "head",
                                         "no-such-program-x"};
static const char *const k_path_commands[] = {"cat", "ls", "mkdir", "cp"};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s", path);
    fputs(text, f);
    fclose(f);
}

static pl_tools_options options(void)
{
    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    o.commands = k_commands;
    o.n_commands = sizeof k_commands / sizeof *k_commands;
    o.path_commands = k_path_commands;
    o.n_path_commands = sizeof k_path_commands / sizeof *k_path_commands;
    return o;
}

static void make_dirs(void)
{
    const char *d = t_tmpdir();
    snprintf(F.dir, sizeof F.dir, "%s/work", d);
    snprintf(F.outside, sizeof F.outside, "%s/outside", d);
    cr_assert(mkdir(F.dir, 0755) == 0);
    cr_assert(mkdir(F.outside, 0755) == 0);
    char p[8400];
    snprintf(p, sizeof p, "%s/secret", F.outside);
    write_file(p, "secret\n");
    snprintf(p, sizeof p, "%s/inside.txt", F.dir);
    write_file(p, "inside\n");
    snprintf(p, sizeof p, "%s/sub", F.dir);
    cr_assert(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/sub/deeper.txt", F.dir);
    write_file(p, "deeper\n");
    snprintf(p, sizeof p, "%s/out", F.dir); /* a symlink that leaves */
    cr_assert(symlink(F.outside, p) == 0);
    t_store_in(F.store, sizeof F.store, d, "store.db");
}

static void open_with(pl_tools_options *o)
{
    make_dirs();
    o->root = F.dir;
    cr_assert_eq(pl_tools_new(&F.tools, o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    cr_assert_eq(pl_tools_register(F.reg, F.tools), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(F.reg, "use", use, NULL), PL_OK);
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
}

static void close_all(void)
{
    pl_engine_close(F.engine);
    pl_registry_free(F.reg);
    pl_tools_free(F.tools);
    memset(&F, 0, sizeof F);
    t_cleanup();
}

/* Run "use" with {"args": ARGS}; the outcome (completed). */
static pl_outcome *run(const char *id, const char *args)
{
    char payload[8192];
    snprintf(payload, sizeof payload, "{\"args\": %s}", args);
    pl_outcome *o = t_start(F.engine, "use", payload, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    return o;
}

static const cJSON *got(const pl_outcome *o)
{
    return cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o), "got");
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The error code of the result of running ARGS ("" for a result). */
static char *code_of(const char *id, const char *args)
{
    pl_outcome *o = run(id, args);
    const char *c = str(got(o), "code");
    char *r = strdup(c ? c : "");
    pl_outcome_free(o);
    return r;
}

static void expect_code(const char *id, const char *args, const char *code)
{
    char *c = code_of(id, args);
    cr_expect_str_eq(c, code, "%s", args);
    free(c);
}

Test(run_command, runs_a_program_and_replays_its_result, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    pl_outcome *r = run("r", "{\"argv\": [\"echo\", \"hello\", \"world\"]}");
    const cJSON *g = got(r);
    cr_expect_str_eq(str(g, "stdout"), "hello world\n");
    cr_expect_str_eq(str(g, "stderr"), "");
    cr_expect_eq(num(g, "exit_code"), 0);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(g, "signal")));
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(g, "timed_out")));
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(g, "truncated")));
    /* a continued run serves it */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, F.engine, "r", NULL), PL_OK);
    cr_expect_eq(again->calls_executed, 0);
    pl_outcome_free(again);
    pl_outcome_free(r);

    /* exit status, stderr, stdin, a signal */
    r = run("s", "{\"argv\": [\"sh\", \"-c\", \"echo oops >&2; exit 3\"]}");
    cr_expect_eq(num(got(r), "exit_code"), 3);
    cr_expect_str_eq(str(got(r), "stderr"), "oops\n");
    pl_outcome_free(r);
    r = run("i", "{\"argv\": [\"sh\", \"-c\", \"read a; echo got:$a\"], "
                 "\"stdin\": \"abc\\n\"}");
    cr_expect_str_eq(str(got(r), "stdout"), "got:abc\n");
    pl_outcome_free(r);
    r = run("n", "{\"argv\": [\"sh\", \"-c\", \"cat; echo end\"]}");
    cr_expect_str_eq(str(got(r), "stdout"), "end\n", "stdin is /dev/null");
    pl_outcome_free(r);
    r = run("k", "{\"argv\": [\"sh\", \"-c\", \"kill -SEGV $$\"]}");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(got(r), "exit_code")));
    cr_expect_str_eq(str(got(r), "signal"), "SIGSEGV");
    pl_outcome_free(r);
    /* bytes that are not UTF-8 become U+FFFD */
    r = run("u", "{\"argv\": [\"sh\", \"-c\", \"printf 'a\\\\377b'\"]}");
    cr_expect_str_eq(str(got(r), "stdout"), "a\xef\xbf\xbd"
                                            "b");
    pl_outcome_free(r);
    /* the working directory */
    r = run("w", "{\"argv\": [\"ls\"], \"cwd\": \"sub\"}");
    cr_expect_str_eq(str(got(r), "stdout"), "deeper.txt\n");
    pl_outcome_free(r);
}

Test(run_command, the_environment_is_reduced_to_the_allowlist,
     .fini = close_all)
{
    setenv("PL_TEST_SECRET", "do-not-pass", 1);
    setenv("PL_TEST_PASSED", "yes", 1);
    static const char *const env[] = {"PATH", "PL_TEST_PASSED", "UNSET_X"};
    pl_tools_options o = options();
    o.env = env;
    o.n_env = 3;
    open_with(&o);
    pl_outcome *r = run("e", "{\"argv\": [\"env\"]}");
    const char *out = str(got(r), "stdout");
    cr_assert_not_null(out);
    cr_expect(strstr(out, "PL_TEST_PASSED=yes\n"), "%s", out);
    cr_expect(strstr(out, "PATH="), "%s", out);
    cr_expect_null(strstr(out, "PL_TEST_SECRET"), "%s", out);
    cr_expect_null(strstr(out, "HOME="), "%s", out);
    pl_outcome_free(r);
}

/* The guide: by default the program gets PATH, LANG, LC_ALL and TZ alone,
 * and no descriptor but its stdin, stdout and stderr, even one the
 * engine's process holds without FD_CLOEXEC. */
Test(run_command, default_environment_and_no_other_descriptor,
     .fini = close_all)
{
    setenv("PL_TEST_SECRET", "do-not-pass", 1);
    setenv("LANG", "C.UTF-8", 1);
    setenv("LC_ALL", "C", 1);
    setenv("TZ", "UTC", 1);
    pl_tools_options o = options();
    open_with(&o);
    int fd = open("/dev/null", O_RDONLY); /* inheritable */
    cr_assert_geq(fd, 3);
    pl_outcome *r = run("e", "{\"argv\": [\"env\"]}");
    const char *out = str(got(r), "stdout");
    cr_assert_not_null(out);
    int lines = 0;
    for (const char *p = out; *p; p = strchr(p, '\n') + 1) {
        cr_expect(!strncmp(p, "PATH=", 5) ||
                      !strncmp(p, "LANG=C.UTF-8\n", 13) ||
                      !strncmp(p, "LC_ALL=C\n", 9) ||
                      !strncmp(p, "TZ=UTC\n", 7),
                  "%s", out);
        lines++;
        if (!strchr(p, '\n'))
            break;
    }
    cr_expect_eq(lines, 4, "%s", out);
    pl_outcome_free(r);
    /* the shell's descriptors, listed by a child (a "; true" keeps the
     * shell from becoming ls, whose own directory would show) */
    r = run("fd", "{\"argv\": [\"sh\", \"-c\", "
                  "\"ls /proc/$$/fd; true\"]}");
    cr_expect_str_eq(str(got(r), "stdout"), "0\n1\n2\n");
    pl_outcome_free(r);
    close(fd);
}

Test(run_command, refused_before_anything_runs, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    char marker[8400];
    snprintf(marker, sizeof marker, "%s/made", F.dir);
    char args[9000];
    snprintf(args, sizeof args, "{\"argv\": [\"touch\", \"%s\"]}", marker);
    expect_code("a", args, PL_ERR_FORBIDDEN);
    cr_expect_neq(access(marker, F_OK), 0, "touch ran");
    snprintf(args, sizeof args,
             "{\"argv\": [\"/bin/sh\", \"-c\", \"touch %s\"]}", marker);
    expect_code("b", args, PL_ERR_FORBIDDEN);
    cr_expect_neq(access(marker, F_OK), 0, "a program by path ran");
    expect_code("c", "{\"argv\": [\"echo\", \"a\\u0001b\"]}",
                PL_ERR_INVALID_INPUT);
    expect_code("d", "{\"argv\": []}", PL_ERR_INVALID_INPUT);
    expect_code("e", "{\"argv\": [\"echo\"], \"shell\": true}",
                PL_ERR_INVALID_INPUT);
    expect_code("f", "{\"argv\": [\"no-such-program-x\"]}", PL_ERR_NOT_FOUND);
    expect_code("g", "{\"argv\": [\"echo\"], \"cwd\": \"nope\"}",
                PL_ERR_NOT_FOUND);
    expect_code("h", "{\"argv\": [\"echo\"], \"cwd\": \"inside.txt\"}",
                PL_ERR_INVALID_INPUT);
    expect_code("h2", "{\"argv\": [\"echo\"], \"cwd\": \"inside.txt/\"}",
                PL_ERR_INVALID_INPUT);
    expect_code("i", "{\"argv\": [\"echo\"], \"cwd\": \"../outside\"}",
                PL_ERR_FORBIDDEN);
    expect_code("j", "{\"argv\": [\"echo\"], \"cwd\": \"out\"}",
                PL_ERR_FORBIDDEN);
    /* a FIFO as the directory: refused, not waited on */
    char fifo[8400];
    snprintf(fifo, sizeof fifo, "%s/pipe", F.dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    expect_code("m", "{\"argv\": [\"echo\"], \"cwd\": \"pipe\"}",
                PL_ERR_INVALID_INPUT);
    /* the tool's schema says "minimum": 1: a timeout of 0 is not "none" */
    expect_code("k", "{\"argv\": [\"echo\"], \"timeout_ms\": 0}",
                PL_ERR_INVALID_INPUT);
    expect_code("l", "{\"argv\": [\"echo\"], \"timeout_ms\": -5}",
                PL_ERR_INVALID_INPUT);
}

Test(run_command, path_arguments_stay_under_the_root, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    char args[9000];
    /* inside: relative, absolute, through "..", from a cwd */
    pl_outcome *r = run("ok", "{\"argv\": [\"cat\", \"inside.txt\", "
                              "\"sub/../sub/deeper.txt\"]}");
    cr_expect_str_eq(str(got(r), "stdout"), "inside\ndeeper\n");
    pl_outcome_free(r);
    snprintf(args, sizeof args, "{\"argv\": [\"cat\", \"%s/inside.txt\"]}",
             F.dir);
    r = run("abs", args);
    cr_expect_str_eq(str(got(r), "stdout"), "inside\n");
    pl_outcome_free(r);
    r = run("cwd", "{\"argv\": [\"cat\", \"../inside.txt\", \"deeper.txt\"], "
                   "\"cwd\": \"sub\"}");
    cr_expect_str_eq(str(got(r), "stdout"), "inside\ndeeper\n");
    pl_outcome_free(r);
    /* outside, every way */
    snprintf(args, sizeof args, "{\"argv\": [\"cat\", \"%s/secret\"]}",
             F.outside);
    expect_code("x1", args, PL_ERR_FORBIDDEN);
    expect_code("x2", "{\"argv\": [\"cat\", \"../outside/secret\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("x3", "{\"argv\": [\"cat\", \"out/secret\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("x4", "{\"argv\": [\"cat\", \"missing/../../outside/secret\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("x5",
                "{\"argv\": [\"cat\", \"../../outside/secret\"], "
                "\"cwd\": \"sub\"}",
                PL_ERR_FORBIDDEN);
    expect_code("x6", "{\"argv\": [\"cat\", \"--\", \"/etc/passwd\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("x7", "{\"argv\": [\"ls\", \"--directory=/etc\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("x8", "{\"argv\": [\"ls\", \"-I/etc\"]}", PL_ERR_FORBIDDEN);
    expect_code("x9", "{\"argv\": [\"cat\", \"/etc/passwd\"]}",
                PL_ERR_FORBIDDEN);
    /* options and "-" are not paths; a missing file is the program's */
    r = run("opt", "{\"argv\": [\"ls\", \"-1\", \"sub\"]}");
    cr_expect_str_eq(str(got(r), "stdout"), "deeper.txt\n");
    pl_outcome_free(r);
    r = run("miss", "{\"argv\": [\"cat\", \"missing.txt\"]}");
    cr_expect_neq(num(got(r), "exit_code"), 0);
    cr_expect_null(str(got(r), "code"));
    pl_outcome_free(r);
    /* a command that is not a path command may name anything */
    r = run("echo", "{\"argv\": [\"echo\", \"/etc/passwd\"]}");
    cr_expect_str_eq(str(got(r), "stdout"), "/etc/passwd\n");
    pl_outcome_free(r);
}

static bool exists(const char *dir, const char *name)
{
    char p[8400];
    struct stat sst;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &sst) == 0;
}

/* A path through parts a program makes on its way leaves the root no more
 * than a path as written does. */
Test(run_command, made_parts_stay_under_the_root, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    /* mkdir -p makes "x", so "x/.." is the root and "out" the symlink */
    expect_code("m1", "{\"argv\": [\"mkdir\", \"-p\", \"x/../out/pwned\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("m2",
                "{\"argv\": [\"mkdir\", \"-p\", \"x/y/../../out/pwned\"]}",
                PL_ERR_FORBIDDEN);
    cr_expect(!exists(F.outside, "pwned"), "nothing was made outside");
    cr_expect(!exists(F.dir, "x"), "nothing ran");
    /* made parts that stay inside run */
    pl_outcome *r = run("in1", "{\"argv\": [\"mkdir\", \"-p\", "
                               "\"x/y/../z\", \"n/../sub/new\"]}");
    cr_expect_eq(num(got(r), "exit_code"), 0, "%s", str(got(r), "stderr"));
    pl_outcome_free(r);
    cr_expect(exists(F.dir, "x/z") && exists(F.dir, "sub/new"));
}

/* A short option with ".." attached names the parent as "-C/x" would. */
Test(run_command, attached_dots_stay_under_the_root, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    /* "-t.." is cp's target directory: the root's parent */
    expect_code("c1", "{\"argv\": [\"cp\", \"-t..\", \"inside.txt\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("c2", "{\"argv\": [\"cp\", \"-vt..\", \"inside.txt\"]}",
                PL_ERR_FORBIDDEN);
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/..", F.dir);
    cr_expect(!exists(parent, "inside.txt"), "nothing was copied above");
    pl_outcome *r = run("in2",
                        "{\"argv\": [\"cp\", \"-t\", \"sub\", \"inside.txt\"], "
                        "\"cwd\": \".\"}");
    cr_expect_eq(num(got(r), "exit_code"), 0, "%s", str(got(r), "stderr"));
    pl_outcome_free(r);
}

/* The pid a command printed on its stdout, or 0. */
static long pid_of(const cJSON *g)
{
    const char *s = str(g, "stdout");
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : 0;
    return end && end != s ? v : 0;
}

Test(run_command, a_timeout_kills_the_whole_group, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    /* the program forks a child and waits: both go at the timeout */
    pl_outcome *r = run("t", "{\"argv\": [\"sh\", \"-c\", \"sleep 600 & "
                             "echo $!; wait\"], \"timeout_ms\": 300}");
    const cJSON *g = got(r);
    cr_expect_str_eq(str(g, "code"), PL_ERR_TIMEOUT);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(g, "timed_out")));
    cr_expect_str_eq(str(g, "signal"), "SIGKILL");
    long child = pid_of(g);
    cr_assert_gt(child, 1, "the child's pid: %s", t_text(g));
    cr_expect(t_proc_ends(child), "the child %ld outlived the timeout", child);
    pl_outcome_free(r);
    /* a child that outlives its parent, holding its output */
    r = run("u", "{\"argv\": [\"sh\", \"-c\", \"sleep 600 & echo $!\"], "
                 "\"timeout_ms\": 300}");
    g = got(r);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(g, "timed_out")));
    child = pid_of(g);
    cr_assert_gt(child, 1);
    cr_expect(t_proc_ends(child), "the orphan %ld outlived the timeout", child);
    pl_outcome_free(r);
    /* one that left its output: the group still goes when it ends */
    r = run("v", "{\"argv\": [\"sh\", \"-c\", \"sleep 600 >/dev/null 2>&1 & "
                 "echo $!\"], \"timeout_ms\": 60000}");
    g = got(r);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(g, "timed_out")), "%s",
              t_text(g));
    cr_expect_eq(num(g, "exit_code"), 0);
    child = pid_of(g);
    cr_assert_gt(child, 1);
    cr_expect(t_proc_ends(child), "the detached %ld outlived the call", child);
    pl_outcome_free(r);
}

/* The guide: the timeout is the least of "timeout_ms",
 * opts.command_timeout_ms and the call's deadline (a timeout decorator's);
 * the Timeout result names the one that applied. */
Test(run_command, the_least_timeout_applies, .fini = close_all)
{
    pl_tools_options o = options();
    o.command_timeout_ms = 300;
    open_with(&o);
    pl_outcome *r = run("opt", "{\"argv\": [\"sh\", \"-c\", \"sleep 60\"], "
                               "\"timeout_ms\": 60000}");
    const cJSON *g = got(r);
    cr_expect_str_eq(str(g, "code"), PL_ERR_TIMEOUT);
    cr_expect(strstr(str(g, "message"), "timeout of 300 ms"), "%s",
              str(g, "message"));
    pl_outcome_free(r);
    r = run("arg", "{\"argv\": [\"sh\", \"-c\", \"sleep 60\"], "
                   "\"timeout_ms\": 200}");
    g = got(r);
    cr_expect(strstr(str(g, "message"), "timeout of 200 ms"), "%s",
              str(g, "message"));
    pl_outcome_free(r);
    /* a decorator's deadline of 100 ms: less than either */
    char payload[256];
    snprintf(payload, sizeof payload,
             "{\"within_ms\": 100, \"args\": {\"argv\": [\"sh\", \"-c\", "
             "\"sleep 60\"], \"timeout_ms\": 250}}");
    r = t_start(F.engine, "use", payload, "deadline");
    cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s", r->reason ? r->reason : "");
    cr_expect_str_eq(str(got(r), "code"), PL_ERR_TIMEOUT);
    pl_outcome_free(r);
    /* the decorator ends the call with its own Timeout; the command's
     * result, in the call's ledger, names the timeout it was given */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, F.engine, "deadline", "0.0"), PL_OK, "%s",
                 pl_errmsg());
    long ms = -1;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const char *m = str(pl_step_payload(pl_steps_at(l, i)), "message");
        const char *at = m ? strstr(m, "timeout of ") : NULL;
        if (at)
            ms = strtol(at + strlen("timeout of "), NULL, 10);
    }
    pl_steps_free(l);
    cr_expect(ms >= 0 && ms <= 100, "the command's timeout: %ld ms", ms);
}

/* The longest command_timeout_ms there is (a program that wants no real
 * limit) is a timeout that never comes, not an overflow of the clock. */
Test(run_command, the_longest_timeout_never_comes, .fini = close_all)
{
    pl_tools_options o = options();
    o.command_timeout_ms = LONG_MAX;
    open_with(&o);
    pl_outcome *r = run("long", "{\"argv\": [\"sh\", \"-c\", \"echo ok\"]}");
    const cJSON *g = got(r);
    cr_expect_str_eq(str(g, "stdout"), "ok\n", "%s", t_text(g));
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(g, "timed_out")));
    cr_expect_eq(num(g, "exit_code"), 0);
    pl_outcome_free(r);
}

Test(run_command, ten_megabytes_of_output_in_bounded_memory, .fini = close_all)
{
    pl_tools_options o = options();
    o.max_output_bytes = 4096;
    open_with(&o);
    pl_outcome *r = run("big", "{\"argv\": [\"head\", \"-c\", \"10485760\", "
                               "\"/dev/zero\"]}");
    const cJSON *g = got(r);
    cr_expect_eq(num(g, "stdout_bytes"), 10485760);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(g, "truncated")));
    cr_expect(str(g, "note") && strstr(str(g, "note"), "truncated"));
    /* NULs kept as U+FFFD, 3 bytes each: as many as fit in 4096 bytes */
    cr_expect_eq(strlen(str(g, "stdout")), 3 * 1365);
    cr_expect_eq(num(g, "exit_code"), 0);
    pl_outcome_free(r);
    /* the peak memory does not follow the output: 200 MB read, a few MB
     * more at most */
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    r = run("huge", "{\"argv\": [\"head\", \"-c\", \"209715200\", "
                    "\"/dev/zero\"]}");
    getrusage(RUSAGE_SELF, &after);
    cr_expect_eq(num(got(r), "stdout_bytes"), 209715200);
    long grew_kb = after.ru_maxrss - before.ru_maxrss;
    cr_expect_lt(grew_kb, 50 * 1024, "the peak grew by %ld KiB", grew_kb);
    pl_outcome_free(r);
}

/* Each stream keeps at most max_output_bytes of text, U+FFFD included, so
 * two streams of bytes that are not UTF-8 fit one result of a max_payload
 * of 4 times the cap (1 MiB here). */
Test(run_command, each_stream_keeps_at_most_the_cap_as_text, .fini = close_all)
{
    pl_tools_options o = options();
    o.max_output_bytes = 256 << 10;
    open_with(&o);
    pl_engine_close(F.engine);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.max_payload = 1 << 20;
    cr_assert_eq(pl_engine_open(&F.engine, F.store, F.reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome *r = run("bin", "{\"argv\": [\"sh\", \"-c\", \"head -c 300000 "
                               "/dev/zero; head -c 300000 /dev/zero >&2\"]}");
    const cJSON *g = got(r);
    cr_expect_eq(num(g, "stdout_bytes"), 300000);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(g, "truncated")));
    const char *out = str(g, "stdout"), *err = str(g, "stderr");
    cr_assert(out && err);
    cr_expect_eq(strlen(out), (size_t)(256 << 10) / 3 * 3);
    cr_expect_eq(strlen(err), (size_t)(256 << 10) / 3 * 3);
    pl_outcome_free(r);
}

/* In a forked child: run @p root with a command that notes it ran and
 * then waits ("use" calls run_command; run_command is the run's root
 * itself); the parent kills the child (the engine) while it runs, and
 * continues the run: an InDoubt result, the command never run again. */
static void crash_while_it_runs(const char *root)
{
    pl_tools_options o = options();
    open_with(&o);
    char marker[8400];
    snprintf(marker, sizeof marker, "%s/ran", F.dir);
    const char *command = "{\"argv\": [\"sh\", \"-c\", \"echo $$ >> ran; "
                          "exec sleep 600\"]}";
    char args[9000];
    snprintf(args, sizeof args, strcmp(root, "use") ? "%s" : "{\"args\": %s}",
             command);
    pl_engine_close(F.engine);
    F.engine = NULL;
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_engine *e = NULL;
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_PROCESS;
        if (pl_engine_open(&e, F.store, F.reg, &eo))
            _exit(11);
        cJSON *p = cJSON_Parse(args);
        pl_action a = {PL_ACTION_VERSION, root, p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c";
        pl_outcome *out = NULL;
        pl_run_start(&out, e, &a, &ro);
        _exit(3);
    }
    struct stat sb;
    for (int i = 0; i < 6000 && !(stat(marker, &sb) == 0 && sb.st_size >= 2);
         i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(stat(marker, &sb), 0, "the command never ran");
    kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    cr_assert(WIFSIGNALED(status));
    /* the command (sh, then the sleep it became) died with the engine */
    FILE *pf = fopen(marker, "r");
    cr_assert_not_null(pf);
    long cmd = 0;
    cr_assert_eq(fscanf(pf, "%ld", &cmd), 1);
    fclose(pf);
    cr_expect(t_proc_ends(cmd), "the command outlived the engine's process");
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_outcome *r = NULL;
    cr_assert_eq(pl_run_continue(&r, F.engine, "c", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(r->status, PL_RUN_COMPLETED, "%s", r->reason ? r->reason : "");
    const cJSON *res = strcmp(root, "use") ? pl_outcome_result(r) : got(r);
    cr_expect_str_eq(str(res, "code"), PL_ERR_IN_DOUBT);
    cr_expect_eq(r->calls_executed, 0, "the command ran again");
    FILE *f = fopen(marker, "r");
    cr_assert_not_null(f);
    char line[16];
    int lines = 0;
    while (fgets(line, sizeof line, f))
        lines++;
    fclose(f);
    cr_expect_eq(lines, 1, "the command ran %d times", lines);
    pl_outcome_free(r);
}

Test(run_command, a_crash_while_it_runs_is_in_doubt_never_a_rerun,
     .fini = close_all)
{
    crash_while_it_runs("use");
}

/* A run whose root is run_command keeps the same rule: a root has no
 * caller whose ledger holds its call, so it calls the tool itself. */
Test(run_command, a_crash_of_a_run_of_the_command_itself_is_in_doubt_too,
     .fini = close_all)
{
    crash_while_it_runs("run_command");
}

Test(run_command, options_are_checked, .fini = close_all)
{
    make_dirs();
    pl_tools *t = NULL;
    pl_tools_options o = options();
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL, "commands without a root");
    o.root = F.dir;
    static const char *const bad_env[] = {"A=B"};
    o.env = bad_env;
    o.n_env = 1;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    o = options();
    o.root = F.dir;
    o.n_env = 2;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL, "n_env without env");
    o = options();
    o.root = F.dir;
    o.command_in_doubt = (pl_in_doubt)7;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    o = options();
    o.root = F.dir;
    o.max_output_bytes = (size_t)1 << 30;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    static const char *const bad_cmd[] = {"bin/sh"};
    o = options();
    o.root = F.dir;
    o.commands = bad_cmd;
    o.n_commands = 1;
    cr_expect_eq(pl_tools_new(&t, &o), PL_EINVAL);
    /* a version 1 struct (no command fields) is taken: no run_command */
    o = (pl_tools_options)PL_TOOLS_OPTIONS_INIT;
    o.version = 1;
    o.root = F.dir;
    cr_assert_eq(pl_tools_new(&t, &o), PL_OK, "%s", pl_errmsg());
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_tools_register(reg, t), PL_OK);
    cr_expect_null(pl_registry_find(reg, "run_command"));
    cr_expect_not_null(pl_registry_find(reg, "read_file"));
    pl_registry_free(reg);
    pl_tools_free(t);
    /* with commands: not idempotent, in doubt it fails */
    o = options();
    o.root = F.dir;
    cr_assert_eq(pl_tools_new(&t, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_tools_register(reg, t), PL_OK);
    const pl_policy_def *d = pl_registry_find(reg, "run_command");
    cr_assert_not_null(d);
    cr_expect(!d->idempotent);
    cr_expect_eq(d->in_doubt, PL_IN_DOUBT_FAIL);
    pl_registry_free(reg);
    pl_tools_free(t);
    /* the guide: opts.command_in_doubt is its rule, and
     * opts.command_idempotent makes it idempotent */
    o.command_in_doubt = PL_IN_DOUBT_SUSPEND;
    cr_assert_eq(pl_tools_new(&t, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_tools_register(reg, t), PL_OK);
    d = pl_registry_find(reg, "run_command");
    cr_expect(!d->idempotent);
    cr_expect_eq(d->in_doubt, PL_IN_DOUBT_SUSPEND);
    pl_registry_free(reg);
    pl_tools_free(t);
    o.command_idempotent = true;
    cr_assert_eq(pl_tools_new(&t, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_tools_register(reg, t), PL_OK);
    cr_expect(pl_registry_find(reg, "run_command")->idempotent);
    pl_registry_free(reg);
    pl_tools_free(t);
}

/* A character the cap cuts in two is left out, not shown as U+FFFD: the
 * output was valid UTF-8, only longer than the cap. */
Test(run_command, a_character_cut_by_the_cap_is_left_out, .fini = close_all)
{
    pl_tools_options o = options();
    o.max_output_bytes = 8;
    open_with(&o);
    /* "aaaaa", U+1F600 (4 bytes), "zz": the cap falls inside the emoji */
    pl_outcome *r = run("cut", "{\"argv\": [\"sh\", \"-c\", \"printf "
                               "'aaaaa\\\\360\\\\237\\\\230\\\\200zz'\"]}");
    const cJSON *g = got(r);
    cr_expect_str_eq(str(g, "stdout"), "aaaaa");
    cr_expect_eq(num(g, "stdout_bytes"), 11);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(g, "truncated")));
    pl_outcome_free(r);
}

/* A symlink that leaves, glued to a short option ("-tout") or given as an
 * option's value that starts with '-', is refused as "-t.." is: nothing is
 * copied outside. */
Test(run_command, attached_symlinks_stay_under_the_root, .fini = close_all)
{
    pl_tools_options o = options();
    open_with(&o);
    expect_code("g1", "{\"argv\": [\"cp\", \"-tout\", \"inside.txt\"]}",
                PL_ERR_FORBIDDEN);
    expect_code("g2", "{\"argv\": [\"cp\", \"-vtout\", \"inside.txt\"]}",
                PL_ERR_FORBIDDEN);
    /* the value of "-t" given on its own, a name that starts with '-' */
    char p[8400];
    snprintf(p, sizeof p, "%s/-o", F.dir);
    cr_assert(symlink(F.outside, p) == 0);
    expect_code("g3", "{\"argv\": [\"cp\", \"-t\", \"-o\", \"inside.txt\"]}",
                PL_ERR_FORBIDDEN);
    cr_expect(!exists(F.outside, "inside.txt"), "a file was copied outside");
    pl_outcome *r = run("g4",
                        "{\"argv\": [\"cp\", \"-tsub\", \"inside.txt\"]}");
    cr_expect_eq(num(got(r), "exit_code"), 0, "%s", str(got(r), "stderr"));
    pl_outcome_free(r);
}
