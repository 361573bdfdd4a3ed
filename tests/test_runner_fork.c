/*
 * test_runner_fork.c -- a process of the suite forks while another of its
 * threads allocates, and the child allocates before it goes on.
 *
 * Criterion's runner forks each test's worker while its message thread
 * (nanomsg) allocates, and the child allocates before it executes the
 * worker: BoxFort, closing the descriptors it inherits, takes a buffer as
 * long as the descriptor limit and a directory stream.  The tests fork in
 * the same way, beside a pool's threads.  Under a sanitizer runtime that
 * holds none of its allocator's locks across fork() (GCC 12's ASan), a
 * child forked while the other thread held one waits on it forever, and
 * the runner waits for that child without a timeout.  Here a thread of the
 * runner allocates those sizes the whole time, so every worker is forked
 * beside it; and each test forks beside a thread of its own doing the
 * same, its child allocating them and exiting 0.  See docs/testing.md,
 * "The suite".
 */
#include "support.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child that hangs fails its test within this long; a worker that hangs
 * before its test begins is the program's CTest timeout. */
TestSuite(runner_fork, .timeout = 60);

/* glibc's directory stream: its 32 KiB buffer and its header */
#define DIR_STREAM_BYTES 32816

/* The bytes BoxFort's child takes to close the descriptors it inherits:
 * one a descriptor, up to the soft limit. */
static size_t fd_limit_bytes(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur > 1u << 20)
        return 1u << 20;
    return (size_t)rl.rlim_cur;
}

typedef struct churner {
    pthread_t thread;
    atomic_bool stop;
    atomic_long rounds;
    bool started;
} churner;

static void *churn(void *arg)
{
    churner *c = arg;
    size_t fd_bytes = fd_limit_bytes();
    while (!atomic_load(&c->stop)) {
        char *a = malloc(fd_bytes), *b = malloc(DIR_STREAM_BYTES),
             *m = malloc(64);
        if (a)
            a[0] = 1;
        if (b)
            b[0] = 1;
        free(a);
        free(b);
        free(m);
        atomic_fetch_add(&c->rounds, 1);
    }
    return NULL;
}

static bool churn_start(churner *c)
{
    atomic_store(&c->stop, false);
    atomic_store(&c->rounds, 0);
    c->started = !pthread_create(&c->thread, NULL, churn, c);
    return c->started;
}

static void churn_stop(churner *c)
{
    if (!c->started)
        return;
    atomic_store(&c->stop, true);
    pthread_join(c->thread, NULL);
    c->started = false;
}

/* the runner's thread: from before the first worker to after the last */
static churner runner_churn;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (!churn_start(&runner_churn)) {
        fputs("test_runner_fork: the runner's thread did not start\n", stderr);
        exit(1);
    }
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    churn_stop(&runner_churn);
}

/* One fork beside a thread allocating: the child allocates what BoxFort's
 * does, writes it, and exits 0; a child that cannot allocate exits 3. */
static void fork_beside_allocations(void)
{
    churner c = {0};
    cr_assert(churn_start(&c), "pthread_create failed");
    while (atomic_load(&c.rounds) < 10) /* it has allocated, and goes on */
        sched_yield();
    pid_t pid = fork();
    if (pid == 0) {
        size_t n = fd_limit_bytes();
        char *a = malloc(n), *b = malloc(DIR_STREAM_BYTES);
        if (!a || !b)
            _exit(3);
        memset(a, 1, n);
        memset(b, 1, DIR_STREAM_BYTES);
        free(a);
        free(b);
        _exit(0);
    }
    int status = 0;
    pid_t w = pid > 0 ? waitpid(pid, &status, 0) : -1;
    churn_stop(&c);
    cr_assert_gt(pid, 0, "fork failed");
    cr_assert_eq(w, pid, "waitpid failed");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child forked beside the allocating thread ended with "
              "status %d",
              status);
}

/* Many workers, each forked by the runner beside its allocating thread,
 * each forking beside one of its own. */
#define FORK_TEST(n)                                                           \
    Test(runner_fork, fork_##n) { fork_beside_allocations(); }
FORK_TEST(0)
FORK_TEST(1)
FORK_TEST(2)
FORK_TEST(3)
FORK_TEST(4)
FORK_TEST(5)
FORK_TEST(6)
FORK_TEST(7)
FORK_TEST(8)
FORK_TEST(9)
FORK_TEST(10)
FORK_TEST(11)
FORK_TEST(12)
FORK_TEST(13)
FORK_TEST(14)
FORK_TEST(15)
FORK_TEST(16)
FORK_TEST(17)
FORK_TEST(18)
FORK_TEST(19)
FORK_TEST(20)
FORK_TEST(21)
FORK_TEST(22)
FORK_TEST(23)
