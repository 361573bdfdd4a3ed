/*
 * test_pg_fork.c -- a process that forks while another of its threads
 * uses its store on PostgreSQL (tests/pg_run.sh starts the server): the
 * child's calls never wait for a lock that thread held at the fork (the
 * connection pool's, pg_conn.c; the kept runs', pg_cache.c), and the
 * child forgets the runs its parent kept, as it forgets its connections
 * (both know a child by its process id, kept by the store: pl__pg_pid()).
 */
#include "support.h"

#include "pg_int.h"
#include "pg_store.h"
#include "support_pg_store.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(pg_fork, .fini = t_cleanup, .timeout = 120);

#define FORKS 100
/* A child's few calls take milliseconds; one still waiting after this
 * long waits for a lock nobody will give back: SIGALRM ends it, and the
 * parent says so (a hang, not a timing) */
#define CHILD_ALARM_S 30

static atomic_bool g_stop;

/* Parked run "kept" of @p s, created and parked by this process: kept. */
static void park_kept(pl__pg_store *s)
{
    pl__batch p = {0};
    p.run = leased_run(s, "kept");
    p.gen = 1;
    p.release = true;
    p.park = true;
    cr_assert_eq(pl__buf_append(&p.state, "s1", 2), PL_OK);
    pl__batch *one[1] = {&p};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    pl__batch_free(&p);
}

/* Whether run "kept" is kept by @p s: PL_OK, or PL_ENOTFOUND. */
static int kept(pl__pg_store *s)
{
    pl__buf info = {0}, state = {0};
    pl__kvs rows = {0};
    uint64_t num = 0;
    int st = pl__pg_cache_get(s, "kept", 64, (size_t)1 << 20, &num, &info,
                              &state, &rows);
    pl__buf_free(&info);
    pl__buf_free(&state);
    pl__kvs_free(&rows);
    return st;
}

/* The store's locks taken over and over: the kept runs' and the pool's. */
static void *hammer(void *arg)
{
    pl__pg_store *s = arg;
    while (!atomic_load(&g_stop)) {
        if (kept(s) != PL_OK)
            return "run 'kept' is no longer kept";
        PGconn *c;
        if (pl__pg_conn_get(s, &c))
            return "no connection";
        pl__pg_conn_put(s, c);
    }
    return NULL;
}

/* The child: its own process id as the store keeps it (pl__pg_pid()),
 * its own connection, and nothing kept (exit 0), or a status that says
 * what went wrong. */
static void child(pl__pg_store *s)
{
    alarm(CHILD_ALARM_S);
    if (pl__pg_pid() != getpid())
        _exit(5);
    pl__pg_cache_drop(s, 1 << 30); /* the kept runs' lock, none dropped */
    if (kept(s) != PL_ENOTFOUND)
        _exit(2);
    PGconn *c;
    if (pl__pg_conn_get(s, &c))
        _exit(3);
    PGresult *r = PQexec(c, "SELECT 1");
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    pl__pg_conn_put(s, c);
    _exit(ok ? 0 : 4);
}

Test(pg_fork, a_child_forked_beside_a_busy_thread_uses_the_store)
{
    pl__pg_store *s = pg_store("t_fork");
    park_kept(s);
    cr_assert_eq(kept(s), PL_OK, "the run this process parked is kept");
    cr_assert_eq(pl__pg_pid(), getpid());
    atomic_store(&g_stop, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, hammer, s), 0);
    int hung = 0, failed = 0, last = 0;
    for (int i = 0; i < FORKS && !hung && !failed; i++) {
        pid_t pid = fork();
        cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
        if (pid == 0)
            child(s);
        int ws;
        cr_assert_eq(waitpid(pid, &ws, 0), pid);
        if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM)
            hung++;
        else if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
            failed++;
            last = WIFEXITED(ws) ? WEXITSTATUS(ws) : -WTERMSIG(ws);
        }
    }
    atomic_store(&g_stop, true);
    void *why;
    cr_assert_eq(pthread_join(th, &why), 0);
    cr_expect_null(why, "the busy thread: %s", why ? (char *)why : "");
    cr_expect_eq(hung, 0, "a child waited for a lock for ever");
    cr_expect_eq(failed, 0, "a child failed (status %d)", last);
    cr_expect_eq(kept(s), PL_OK, "the parent keeps its run");
    pl__pg_close(s);
}
