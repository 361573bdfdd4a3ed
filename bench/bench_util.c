/*
 * bench_util.c -- pl-bench's clocks and memory, child processes, stores,
 * the report and the goals.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- clocks and memory ------------------------------------------------------ */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A field of /proc/self/status in kB ("VmHWM", "RssAnon"). */
long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Repetitions of every workload and of its floor, interleaved; the medians
 * are reported.  5, or 3 with --quick; W1's short runs (process mode, and
 * 1,000 calls in any mode: a fraction of a second each, which the host's
 * CPU or disk speed moves the most) run SHORT_REPS times as many. */
int g_reps = REPS;
bool g_quick;

/* The median of n values (sorts them). */
double median(double *v, int n)
{
    double tmp[REPS_MAX];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return tmp[n / 2];
}

double percentile(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

void die(const char *what)
{
    fprintf(stderr, "pl-bench: %s: %s\n", what, pl_errmsg());
    _exit(1);
}

/* ---- child processes ---------------------------------------------------------- */

void child_bind(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(1);
}

/* Start fn(arg, result) in a child that sends its result back through a
 * pipe; child_finish() collects it.  Returns the pid, or -1. */

pid_t child_start(child_fn fn, const void *arg, void *result, size_t size,
                  int *from_child)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        child_bind(parent);
        close(fds[0]);
        memset(result, 0, size);
        fn(arg, result);
        const char *p = result;
        size_t left = size;
        while (left) {
            ssize_t w = write(fds[1], p, left);
            if (w <= 0)
                _exit(1);
            p += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    *from_child = fds[0];
    return pid;
}

/* Read the result of a child_start()ed child and reap it: 0 if it ran to
 * the end and sent all of it. */
int child_finish(pid_t pid, int from_child, void *result, size_t size)
{
    char *p = result;
    size_t left = size;
    while (left) {
        ssize_t r = read(from_child, p, left);
        if (r <= 0)
            break;
        p += r;
        left -= (size_t)r;
    }
    close(from_child);
    int status;
    waitpid(pid, &status, 0);
    return left == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Run fn(arg, result) in a child and wait for its result. */
int in_child(child_fn fn, const void *arg, void *result, size_t size)
{
    int fd;
    pid_t pid = child_start(fn, arg, result, size, &fd);
    return pid < 0 ? -1 : child_finish(pid, fd, result, size);
}

char g_dir[1024];
const char *g_pg_uri; /* --store postgresql://...: see report_pg() */

void path_in(char *out, size_t n, const char *name)
{
    if (g_pg_uri) {
        pg_path_in(out, n, name);
        return;
    }
    snprintf(out, n, "%s/%s", g_dir, name);
}

void remove_store(const char *path)
{
    if (g_pg_uri) {
        pg_remove(path);
        return;
    }
    char lock[1200];
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(path);
    unlink(lock);
}

/* ---- reporting -------------------------------------------------------------------- */

cJSON *g_json;
bool g_print_json;

void jnum(cJSON *o, const char *k, double v)
{
    cJSON_AddNumberToObject(o, k, isfinite(v) ? v : 0);
}

const pl_durability modes[] = {PL_DURABILITY_SYNC, PL_DURABILITY_GROUP,
                               PL_DURABILITY_PROCESS};

void say(const char *fmt, ...)
{
    if (g_print_json)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* ---- goals: the figures the project aims for, checked for the reader ---------------- */

typedef struct goal {
    char what[96];
    double value;
    char unit[8];
    bool at_most; /* the goal is a ceiling (else a floor) */
    double target;
    char noise[64]; /* "" or why the figure is not judged (drift_end) */
} goal;

static goal g_goals[40];
static int g_ngoals;

/* A goal for a timed figure, @p noise "" or the drift_end() note of the
 * workload that measured it: a noisy figure is shown, not judged. */
void add_goal_noted(const char *what, double value, const char *unit,
                    bool at_most, double target, const char *noise)
{
    if (g_ngoals < (int)(sizeof g_goals / sizeof *g_goals)) {
        goal *gl = &g_goals[g_ngoals++];
        snprintf(gl->noise, sizeof gl->noise, "%s", noise ? noise : "");
        snprintf(gl->what, sizeof gl->what, "%s", what);
        snprintf(gl->unit, sizeof gl->unit, "%s", unit);
        gl->value = value;
        gl->at_most = at_most;
        gl->target = target;
    }
}

void add_goal(const char *what, double value, const char *unit, bool at_most,
              double target)
{
    add_goal_noted(what, value, unit, at_most, target, NULL);
}

/* Print the goals met and missed in this run (figures, not a test). */
void report_goals(bool quick)
{
    if (!g_ngoals)
        return;
    say("\nGoals%s:\n", quick ? " (quick sizes; the goals are set for the "
                                "full ones)"
                              : "");
    cJSON *arr = cJSON_AddArrayToObject(g_json, "goals");
    for (int i = 0; i < g_ngoals; i++) {
        const goal *gl = &g_goals[i];
        bool met = gl->at_most ? gl->value <= gl->target
                               : gl->value >= gl->target;
        char verdict[96];
        snprintf(verdict, sizeof verdict, "%s%s",
                 gl->noise[0] ? "not judged: "
                 : met        ? "met"
                              : "MISSED",
                 gl->noise);
        /* a figure that rounds to its target but misses it (1.204x
         * against 1.20x) is shown with the digit that tells them apart */
        char v2[32], t2[32];
        snprintf(v2, sizeof v2, "%.2f", gl->value);
        snprintf(t2, sizeof t2, "%.2f", gl->target);
        int prec = !strcmp(v2, t2) && gl->value != gl->target ? 3 : 2;
        say("  %-44s %8.*f%-3s %s %6.2f%-3s %s\n", gl->what, prec, gl->value,
            gl->unit, gl->at_most ? "<=" : ">=", gl->target, gl->unit, verdict);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "goal", gl->what);
        if (gl->noise[0])
            cJSON_AddStringToObject(o, "not_judged", gl->noise);
        jnum(o, "value", gl->value);
        jnum(o, "target", gl->target);
        cJSON_AddBoolToObject(o, "at_most", gl->at_most);
        /* not judged: neither met nor missed, as the table says it */
        if (gl->noise[0])
            cJSON_AddNullToObject(o, "met");
        else
            cJSON_AddBoolToObject(o, "met", met);
        cJSON_AddItemToArray(arr, o);
    }
}
