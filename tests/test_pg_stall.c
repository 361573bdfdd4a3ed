/*
 * test_pg_stall.c -- a PostgreSQL server that stops answering: its
 * processes are stopped (SIGSTOP) with a connection of the engine's open.
 * A call made then fails with PL_ESTORE saying the server did not answer
 * in the URI's answer_timeout_ms, instead of hanging; once the server runs
 * again, the engine works (a new connection) and nothing committed was
 * lost.  A binary of its own, so that the stopped server stalls no other
 * test (tests/pg_run.sh starts a server per binary); its tests take turns
 * (one_at_a_time()).
 *
 * A statement cut at the bound is cancelled too: its backend, left to
 * itself, would go on with it (here, asleep in a trigger) and hold its
 * row locks until it next wrote to the socket; another session must get
 * them once the call has failed.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define ANSWER_MS 1000
#define BOUND_S 20 /* the call must end long before this */

static char g_data[512]; /* the server's data directory */

/* Signal @p sig to the postmaster (postmaster.pid's first line) and each
 * of its children (by /proc's ppid). */
static void signal_server(int sig)
{
    char path[600];
    snprintf(path, sizeof path, "%s/postmaster.pid", g_data);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    int pm = 0;
    cr_assert_eq(fscanf(f, "%d", &pm), 1, "%s: no pid", path);
    fclose(f);
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (pid <= 0 || pid > INT_MAX || *end)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *st = fopen(path, "r");
        if (!st)
            continue;
        char line[512] = {0};
        size_t len = fread(line, 1, sizeof line - 1, st);
        fclose(st);
        line[len] = '\0';
        const char *rp = strrchr(line, ')'); /* "pid (comm) S ppid ..." */
        int ppid = 0;
        if (rp && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == pm &&
            kill((pid_t)pid, sig) == 0)
            n++;
    }
    closedir(d);
    cr_assert_eq(kill(pm, sig), 0, "postmaster %d: %s", pm, strerror(errno));
    cr_assert_gt(n, 0, "the postmaster %d has no children", pm);
}

/* This binary's tests one at a time (Criterion runs two at once): a
 * server stopped by one would stall the other's statements.  The lock
 * goes with the test's process. */
static void one_at_a_time(const char *host, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%.*s/stall.lock", (int)n, host);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        cr_assert_eq(errno, EINTR, "%s: %s", path, strerror(errno));
}

static pl_engine *stall_engine(pl_registry **reg, const char *schema)
{
    const char *base = getenv("PL_TEST_PG_URI");
    cr_assert(base && *base, "PL_TEST_PG_URI is not set: run this binary "
                             "through tests/pg_run.sh (ctest does)");
    const char *host = strstr(base, "host=");
    cr_assert_not_null(host, "PL_TEST_PG_URI names no host: %s", base);
    snprintf(g_data, sizeof g_data, "%.*s/data", (int)strcspn(host + 5, "&"),
             host + 5);
    one_at_a_time(host + 5, strcspn(host + 5, "&"));
    char uri[1024];
    snprintf(uri, sizeof uri, "%s&schema=%s&answer_timeout_ms=%d", base, schema,
             ANSWER_MS);
    *reg = t_registry();
    return t_engine(uri, *reg, PL_DURABILITY_SYNC);
}

static int start_done(pl_engine *e, const char *id)
{
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    if (!st && o->status != PL_RUN_COMPLETED)
        st = PL_EINVAL;
    pl_outcome_free(o);
    return st;
}

typedef struct caller {
    pl_engine *e;
    int st;
    char msg[512];
} caller;

static void *stalled_call(void *arg)
{
    caller *c = arg;
    c->st = start_done(c->e, "stalled");
    snprintf(c->msg, sizeof c->msg, "%s", pl_errmsg());
    return NULL;
}

Test(pg_stall, a_stopped_server_fails_the_call_instead_of_hanging)
{
    pl_registry *reg = NULL;
    pl_engine *e = stall_engine(&reg, "t_stall");
    cr_assert_eq(start_done(e, "before"), PL_OK, "%s", pl_errmsg());

    /* the call runs on a thread, on the connection the engine keeps; this
     * one waits a bound far above answer_timeout_ms */
    signal_server(SIGSTOP);
    caller c = {e, 0, {0}};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, stalled_call, &c), 0);
    struct timespec bound;
    clock_gettime(CLOCK_REALTIME, &bound);
    bound.tv_sec += BOUND_S;
    int done = pthread_timedjoin_np(th, NULL, &bound) == 0;
    signal_server(SIGCONT);
    if (!done)
        pthread_join(th, NULL);
    cr_assert(done, "the call still hung after %d s", BOUND_S);
    cr_expect_eq(c.st, PL_ESTORE, "%s: %s", pl_status_name(c.st), c.msg);
    char want[64];
    snprintf(want, sizeof want, "did not answer in %d ms", ANSWER_MS);
    cr_expect(strstr(c.msg, want) != NULL, "%s", c.msg);

    /* the server runs again: the engine works, nothing committed lost */
    cr_expect_eq(pl_run_verify(e, "before"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(start_done(e, "after"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_run_verify(e, "after"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void admin_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql,
                 PQerrorMessage(c));
    PQclear(r);
}

/*
 * A run's claim that the server does not finish (a trigger on the state
 * row it writes sleeps for an hour) fails at answer_timeout_ms; its
 * statement is cancelled, so the row lock it held is free: another
 * session's SELECT ... FOR UPDATE of that row gets it, waiting a minute
 * at most (lock_timeout), where without the cancel it waited the hour.
 */
Test(pg_stall, a_statement_cut_at_the_bound_is_cancelled)
{
    pl_registry *reg = NULL;
    pl_engine *e = stall_engine(&reg, "t_cut");
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "held";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    PGconn *c = t_pg_admin();
    admin_ok(c, "CREATE TABLE t_cut.slow (on_ bool); "
                "CREATE FUNCTION t_cut.slow() RETURNS trigger LANGUAGE plpgsql "
                "AS $$ BEGIN IF EXISTS (SELECT 1 FROM t_cut.slow) THEN "
                "PERFORM pg_sleep(3600); END IF; RETURN NEW; END $$; "
                "CREATE TRIGGER slow AFTER INSERT OR UPDATE ON t_cut.state "
                "FOR EACH ROW EXECUTE FUNCTION t_cut.slow(); "
                "INSERT INTO t_cut.slow VALUES (true)");

    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "held", NULL);
    cr_expect_eq(st, PL_ESTORE, "%s: %s", pl_status_name(st), pl_errmsg());
    char want[64];
    snprintf(want, sizeof want, "did not answer in %d ms", ANSWER_MS);
    cr_expect(strstr(pl_errmsg(), want) != NULL, "%s", pl_errmsg());
    pl_outcome_free(o);

    admin_ok(c, "SET lock_timeout = '60s'");
    PGresult *r = PQexec(c, "SELECT 1 FROM t_cut.state s JOIN t_cut.runs n "
                            "ON n.num = s.run WHERE n.id = 'held'::bytea FOR "
                            "UPDATE OF s");
    cr_expect_eq(PQresultStatus(r), PGRES_TUPLES_OK,
                 "the cut statement's backend still holds the row: %s",
                 PQerrorMessage(c));
    cr_expect_eq(PQntuples(r), 1);
    PQclear(r);
    admin_ok(c, "DELETE FROM t_cut.slow");
    PQfinish(c);

    /* the engine goes on, on a new connection: the run completes */
    cr_expect_eq(pl_run_continue(&o, e, "held", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect(o && o->status == PL_RUN_COMPLETED);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
