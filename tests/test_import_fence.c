/*
 * test_import_fence.c -- pl_run_import()'s second commit is fenced by the
 * lease its first took, as pl_run_fork()'s is: a process that stalls
 * between the two (SIGSTOP) while another takes the new run's lease fails
 * with PL_EBUSY and leaves the run `failed` ("did not complete"), never
 * `running` with no lease a worker could take.  On LMDB, and on
 * PostgreSQL as pg_test_import_fence.
 *
 * The stall is caught by watching the store for the run the first commit
 * makes; an import whose second commit is written before the take (before
 * the watch saw the first, or sent before the stop) is tried again under
 * another id.
 */
#include "support_import.h"

#include "internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRIES 30
#define F_BOUND_MS 60000 /* the longest any condition is waited for */

static void f_nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* In a child: import @p text as @p id into @p path with a 100 ms lease;
 * its status and message down @p fd. */
static void import_child(const char *path, const pl_registry *reg,
                         const char *text, const char *id, int fd)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.lease_ms = 100;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, path, reg, &o))
        _exit(3);
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f)
        _exit(4);
    char *got = NULL;
    int st = pl_run_import(&got, e, f, id);
    char msg[600];
    int n = snprintf(msg, sizeof msg, "%d %s", st, pl_errmsg());
    if (write(fd, msg, (size_t)n) != n)
        _exit(2);
    _exit(0);
}

/* Run @p id's status in @p e, or -1 while it does not exist. */
static int status_now(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    if (pl_run_get(&info, e, id) != PL_OK)
        return -1;
    int s = (int)info->status;
    pl_run_info_free(info);
    return s;
}

/* Another's take of the importer's lease, once it has run out, on a
 * thread of its own: the importer, stopped, may hold the store's writer
 * (LMDB) in its second commit, which the take then waits for. */
typedef struct taker {
    pl_engine *e;
    uint64_t num;
    const char *id;
    int st;
    uint64_t gen;
    atomic_bool done;
} taker;

static void *take_lease(void *arg)
{
    taker *t = arg;
    bool had = false;
    pl__lease held;
    for (int ms = 0; ms < F_BOUND_MS; ms += 10) {
        t->st = pl__store_lease_acquire(t->e->store, t->num, t->id, "taker",
                                        60000000, 0, false, &t->gen, &had,
                                        &held);
        if (t->st != PL_EBUSY)
            break;
        f_nap_ms(10);
    }
    atomic_store(&t->done, true);
    return NULL;
}

/* Take run @p id's lease in @p e while the importer @p kid is stopped;
 * should the take wait 3 s (the importer stopped in its second commit),
 * the importer goes on (*resumed). */
static void take_over(pl_engine *e, const char *id, pid_t kid, bool *resumed)
{
    taker t = {.e = e, .id = id};
    pl__buf info = {0};
    cr_assert_eq(pl__store_run_find(e->store, id, &t.num, &info), PL_OK, "%s",
                 pl_errmsg());
    pl__buf_free(&info);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, take_lease, &t), 0);
    for (int ms = 0; !atomic_load(&t.done) && ms < 3000; ms += 10)
        f_nap_ms(10);
    *resumed = !atomic_load(&t.done);
    if (*resumed)
        kill(kid, SIGCONT);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(t.st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(t.gen, 2);
}

Test(import_fence, a_stall_between_the_commits_leaves_the_run_failed,
     .fini = t_cleanup, .timeout = 300)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    /* a run of ~1,000 steps, left running by a fork: an import with a
     * lease between its commits, which rechain every step */
    pl_outcome *o = t_start(a, "chain", "{\"n\": 600}", "long");
    pl_outcome_free(o);
    char *fid = NULL;
    cr_assert_eq(pl_run_fork(&fid, a, "long", "0:1000", "forked"), PL_OK, "%s",
                 pl_errmsg());
    free(fid);
    char *text = export_text(a, "forked");
    cr_assert(strstr(text, "\"status\":\"running\""));
    const char *path = t_store_path();
    pl_engine *b = t_engine(path, reg, PL_DURABILITY_PROCESS);
    bool caught = false;
    for (int k = 0; k < TRIES && !caught; k++) {
        char id[32];
        snprintf(id, sizeof id, "imp-%d", k);
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        fflush(NULL);
        pid_t kid = fork();
        cr_assert_geq(kid, 0);
        if (kid == 0) {
            close(fds[0]);
            import_child(path, reg, text, id, fds[1]);
        }
        close(fds[1]);
        /* the first commit made it `failed`; stop the importer there */
        int s = -1, ws = 0;
        bool reaped = false, resumed = false;
        for (int spins = 0; !reaped && (s = status_now(b, id)) < 0; spins++) {
            cr_assert_lt(spins, 10000000, "the import never made its run");
            reaped = waitpid(kid, &ws, WNOHANG) == kid;
        }
        if (!reaped) {
            kill(kid, SIGSTOP);
            if (s == PL_RUN_FAILED)
                take_over(b, id, kid, &resumed);
        }
        /* caught between the commits: the take came before the second
         * (a statement sent before the stop may have been written since,
         * on PostgreSQL: then this try missed) */
        caught = !reaped && s == PL_RUN_FAILED &&
                 status_now(b, id) == PL_RUN_FAILED;
        if (caught)
            fprintf(stderr,
                    "import_fence: taken between the commits at try "
                    "%d\n",
                    k + 1);
        if (!reaped && !resumed)
            kill(kid, SIGCONT);
        cr_assert(reaped || waitpid(kid, &ws, 0) == kid);
        cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the importer died");
        char msg[600] = {0};
        cr_assert_gt(read(fds[0], msg, sizeof msg - 1), 0);
        close(fds[0]);
        int ist = 1;
        cr_assert_eq(sscanf(msg, "%d", &ist), 1, "%s", msg);
        if (!caught) {
            cr_assert_eq(ist, PL_OK, "%s", msg);
            continue;
        }
        cr_assert_eq(ist, PL_EBUSY, "the stalled import: %s", msg);
        cr_assert(strstr(msg, "lease"), "%s", msg);
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, b, id), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(info->status, PL_RUN_FAILED, "%s",
                     pl_run_status_name(info->status));
        cr_assert(info->reason && strstr(info->reason, "did not complete"),
                  "%s", info->reason ? info->reason : "(none)");
        cr_assert_eq(info->steps, 0);
        pl_run_info_free(info);
    }
    cr_assert(caught, "no import was seen between its two commits in %d tries",
              TRIES);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
}
