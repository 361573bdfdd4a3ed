/*
 * test_disk.c -- a store that cannot be written (lmdb_env.c's error
 * mapping): a data file that may not grow (the process's file size limit,
 * RLIMIT_FSIZE, standing in for a full disk) and a store whose files may
 * not be written (a store of another user's).  Each gives a status and a
 * message that name the cause and the store's path, loses nothing durable,
 * and the run goes on once the cause is gone.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

/* ---- the policies -------------------------------------------------------- */

#define N_CALLS 400
#define PAD 4096

static char g_log[4200]; /* effect appends each call's i here */

/* effect: {"i": i, "pad": ...} -> {"i": i}; logs i (its side effect). */
static int effect(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    double i = 0;
    if (pl_json_unpack(a->payload, "{s:f}", "i", &i))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    FILE *f = fopen(g_log, "a");
    if (!f)
        return pl_errorf(PL_EIO, "cannot open the effect log");
    fprintf(f, "%d\n", (int)i);
    fclose(f);
    return pl_steps_add_resultf(out, "{s:f}", "i", i);
}

/* many: N_CALLS calls of effect, each with PAD bytes of payload. */
static int many(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    static char pad[PAD + 1];
    memset(pad, 'x', PAD);
    for (int i = 0; i < N_CALLS; i++) {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, "effect", "{s:i, s:s}", "i", i, "pad",
                                pad);
        cJSON_Delete(r);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:i}", "calls", N_CALLS);
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "effect", effect, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "many", many, NULL), PL_OK, "%s",
                 pl_errmsg());
    return reg;
}

/* ---- a child's report ---------------------------------------------------- */

typedef struct report {
    int first;          /* the status of the run's start under the limit */
    char msg[512];      /* its message */
    int then;           /* the status of its continuation without it */
    pl_run_status done; /* the outcome's status */
} report;

/* A child that reports through a pipe: fds[1] the child's (its end of
 * fds[0] closed), fds[0] the parent's (fds[1] closed); fork()'s pid. */
static pid_t fork_reporting(int fds[2])
{
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    close(fds[pid == 0 ? 0 : 1]);
    return pid;
}

static void send_report(int fd, const report *r)
{
    ssize_t w = write(fd, r, sizeof *r);
    _exit(w == (ssize_t)sizeof *r ? 0 : 3);
}

static report receive(int fd, pid_t pid)
{
    report r;
    memset(&r, 0, sizeof r);
    ssize_t got = read(fd, &r, sizeof r);
    close(fd);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "the child failed (status %#x)", ws);
    cr_assert_eq(got, (ssize_t)sizeof r, "no report from the child");
    return r;
}

/* ---- a data file that may not grow ------------------------------------- */

/* How many times each call's effect ran, from the log. */
static void count_effects(int counts[N_CALLS])
{
    memset(counts, 0, N_CALLS * sizeof *counts);
    FILE *f = fopen(g_log, "r");
    cr_assert_not_null(f);
    int i;
    while (fscanf(f, "%d", &i) == 1) {
        cr_assert(i >= 0 && i < N_CALLS, "a logged call %d", i);
        counts[i]++;
    }
    fclose(f);
}

/* In a child: SIGXFSZ ignored, and the process's file size limit set to
 * the size of the file at @p path (the one before in *old); false on a
 * failure. */
static bool limit_to_size(const char *path, struct rlimit *old)
{
    struct stat sb;
    signal(SIGXFSZ, SIG_IGN);
    if (stat(path, &sb) || getrlimit(RLIMIT_FSIZE, old))
        return false;
    struct rlimit lim = *old;
    lim.rlim_cur = (rlim_t)sb.st_size;
    return setrlimit(RLIMIT_FSIZE, &lim) == 0;
}

/*
 * In a child, with SIGXFSZ ignored and the file size limit at the data
 * file's size, the run's commit that must grow the file fails: PL_ENOSPC,
 * naming the limit and the store.  The limit lifted, the same engine
 * continues the run to its end; every call ran once, but for the one in
 * flight when the commit failed, whose result was never durable.
 */
Test(disk, a_data_file_that_cannot_grow_is_enospc_and_the_run_goes_on,
     .timeout = 300)
{
    const char *path = t_store_path();
    snprintf(g_log, sizeof g_log, "%s.effects", path);
    pl_registry *reg = registry();
    int fds[2];
    pid_t pid = fork_reporting(fds);
    if (pid == 0) {
        report r;
        memset(&r, 0, sizeof r);
        pl_engine *e = NULL;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        if (pl_engine_open(&e, path, reg, &o))
            _exit(4);
        struct rlimit old;
        if (!limit_to_size(path, &old))
            _exit(5);
        cJSON *p = cJSON_CreateObject();
        pl_action a = {PL_ACTION_VERSION, "many", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "big";
        pl_outcome *out = NULL;
        r.first = pl_run_start(&out, e, &a, &ro);
        snprintf(r.msg, sizeof r.msg, "%s", pl_errmsg());
        pl_outcome_free(out);
        out = NULL;
        cJSON_Delete(p);
        if (setrlimit(RLIMIT_FSIZE, &old))
            _exit(7);
        r.then = pl_run_continue(&out, e, "big", NULL);
        r.done = out ? out->status : 0;
        if (r.then)
            snprintf(r.msg, sizeof r.msg, "continue: %s", pl_errmsg());
        pl_outcome_free(out);
        pl_engine_close(e);
        send_report(fds[1], &r);
    }
    report r = receive(fds[0], pid);
    cr_assert_eq(r.first, PL_ENOSPC, "the start gave %s: %s",
                 pl_status_name(r.first), r.msg);
    cr_assert(strstr(r.msg, "RLIMIT_FSIZE") && strstr(r.msg, path),
              "the message names the cause and the store: %s", r.msg);
    cr_log_info("%s", r.msg);
    cr_assert_eq(r.then, PL_OK, "%s", r.msg);
    cr_assert_eq(r.done, PL_RUN_COMPLETED);

    /* the store is whole, and no call whose result was durable ran again */
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_verify(e, "big"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    int counts[N_CALLS], twice = 0;
    count_effects(counts);
    for (int i = 0; i < N_CALLS; i++) {
        cr_assert(counts[i] == 1 || counts[i] == 2, "call %d ran %d times", i,
                  counts[i]);
        twice += counts[i] == 2;
    }
    cr_assert_leq(twice, 1,
                  "only the call in flight at the failure may run "
                  "again");
    cr_assert_eq(twice, 1, "the limit was met before the run's end");
    pl_registry_free(reg);
}

/* ---- a worker on a full store ------------------------------------------ */

typedef struct worker_report {
    int lost, back;     /* PL_EVENT_STORE_LOST and _BACK seen */
    int lost_status;    /* the first loss's status */
    char lost_msg[512]; /* and its cause */
    int rc;             /* pl_worker_run()'s */
    pl_run_status done; /* the run's status at the end */
} worker_report;

static worker_report g_wr;
static pthread_mutex_t g_wr_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_store_event(const pl_event *ev, void *user)
{
    (void)user;
    pthread_mutex_lock(&g_wr_mu);
    if (ev->kind == PL_EVENT_STORE_LOST && !g_wr.lost++) {
        g_wr.lost_status = ev->status;
        snprintf(g_wr.lost_msg, sizeof g_wr.lost_msg, "%s",
                 ev->detail ? ev->detail : "");
    }
    g_wr.back += ev->kind == PL_EVENT_STORE_BACK;
    pthread_mutex_unlock(&g_wr_mu);
}

static int events_seen(bool back)
{
    pthread_mutex_lock(&g_wr_mu);
    int n = back ? g_wr.back : g_wr.lost;
    pthread_mutex_unlock(&g_wr_mu);
    return n;
}

static void *run_worker(void *e)
{
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 10;
    g_wr.rc = pl_worker_run(e, &wo);
    return NULL;
}

/* Run @p id's status, 0 if it cannot be read (no assertion: a child's). */
static pl_run_status stored_status(pl_engine *e, const char *id)
{
    pl_run_info *ri = NULL;
    pl_run_status s = pl_run_get(&ri, e, id) ? 0 : ri->status;
    pl_run_info_free(ri);
    return s;
}

/*
 * A worker whose store is full (the file size limit, as above) says so
 * once, PL_EVENT_STORE_LOST with PL_ENOSPC and a cause that names it, and
 * once more when the store has room again; then it finishes the run the
 * failure cut off, at once (not when its lease runs out), each call made
 * once but the one in flight.  The store stays full for 300 ms: the worker
 * tries again less often each time (10, 20, 40 ms... with polls of 10 ms),
 * each try making the call in flight again before its commit fails, and
 * says nothing more until a run goes through.
 */
Test(disk, a_worker_on_a_full_store_says_so_and_goes_on, .timeout = 300)
{
    const char *path = t_store_path();
    snprintf(g_log, sizeof g_log, "%s.effects", path);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_action a = {PL_ACTION_VERSION, "many", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "big";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    int fds[2];
    pid_t pid = fork_reporting(fds);
    if (pid == 0) {
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.on_event = on_store_event;
        o.durability = PL_DURABILITY_PROCESS; /* no fsync: the test's time */
        e = NULL;
        struct rlimit old;
        pthread_t th;
        if (pl_engine_open(&e, path, reg, &o) || !limit_to_size(path, &old) ||
            pthread_create(&th, NULL, run_worker, e))
            _exit(4);
        struct timespec nap = {0, 5 * 1000000L};
        for (int i = 0; i < 12000 && !events_seen(false); i++)
            nanosleep(&nap, NULL);
        struct timespec full = {0, 300 * 1000000L}; /* the store stays full */
        nanosleep(&full, NULL);
        if (setrlimit(RLIMIT_FSIZE, &old))
            _exit(6);
        for (int i = 0;
             i < 12000 && stored_status(e, "big") != PL_RUN_COMPLETED; i++)
            nanosleep(&nap, NULL);
        pl_worker_stop(e);
        pthread_join(th, NULL);
        g_wr.done = stored_status(e, "big");
        pl_engine_close(e);
        ssize_t w = write(fds[1], &g_wr, sizeof g_wr);
        _exit(w == (ssize_t)sizeof g_wr ? 0 : 3);
    }
    worker_report r;
    memset(&r, 0, sizeof r);
    ssize_t got = read(fds[0], &r, sizeof r);
    close(fds[0]);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "the child failed (status %#x)", ws);
    cr_assert_eq(got, (ssize_t)sizeof r, "no report from the child");
    cr_assert_eq(r.lost, 1, "the worker said %d times that it lost the store",
                 r.lost);
    cr_assert_eq(r.lost_status, PL_ENOSPC, "%s: %s",
                 pl_status_name(r.lost_status), r.lost_msg);
    cr_assert(strstr(r.lost_msg, "RLIMIT_FSIZE") && strstr(r.lost_msg, path),
              "the cause names the limit and the store: %s", r.lost_msg);
    cr_assert_eq(r.back, 1, "the store back: said %d times", r.back);
    cr_assert_eq(r.rc, PL_OK);
    cr_assert_eq(r.done, PL_RUN_COMPLETED);

    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_verify(e, "big"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    int counts[N_CALLS], again = 0;
    count_effects(counts);
    for (int i = 0; i < N_CALLS; i++) {
        /* the call in flight: once, once more at each try (about six in
         * 300 ms), and once the store took it */
        cr_assert(counts[i] >= 1 && counts[i] <= 10, "call %d ran %d times", i,
                  counts[i]);
        again += counts[i] > 1;
    }
    cr_assert_leq(again, 1, "only the call in flight may run again");
    pl_registry_free(reg);
}

/* ---- a store that may not be written ----------------------------------- */

/*
 * A completed run in a store whose directory and data file belong to
 * another user and may be read but not written (the lock file is shared,
 * as it is for readers of a store other users own).  Opening it to write
 * is PL_EACCES naming the store; opening it read-only reads the run whole.
 * As root, permission bits stop nothing, so the opening is done by a child
 * that becomes the unprivileged user "nobody" (uid 65534).
 */
Test(disk, a_store_that_may_not_be_written_is_eacces)
{
    char dir[] = "/tmp/pldisk.XXXXXX"; /* a place every user can reach */
    cr_assert_not_null(mkdtemp(dir));
    char path[256], lock[300];
    snprintf(path, sizeof path, "%s/store.db", dir);
    snprintf(lock, sizeof lock, "%s-lock", path);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 3}", "kept"));
    pl_engine_close(e);
    bool root = geteuid() == 0;
    cr_assert_eq(chmod(dir, 0555), 0);
    cr_assert_eq(chmod(path, 0444), 0);
    cr_assert_eq(chmod(lock, 0666), 0);

    int fds[2];
    pid_t pid = fork_reporting(fds);
    if (pid == 0) {
        report r;
        memset(&r, 0, sizeof r);
        if (root && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
            _exit(4);
        pl_engine *ce = NULL;
        r.first = pl_engine_open(&ce, path, reg, NULL);
        snprintf(r.msg, sizeof r.msg, "%s", pl_errmsg());
        pl_engine_close(ce);
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.read_only = true;
        ce = NULL;
        r.then = pl_engine_open(&ce, path, reg, &o);
        if (!r.then)
            r.then = pl_run_verify(ce, "kept");
        pl_engine_close(ce);
        send_report(fds[1], &r);
    }
    report r = receive(fds[0], pid);
    cr_assert_eq(r.first, PL_EACCES, "opening to write gave %s: %s",
                 pl_status_name(r.first), r.msg);
    cr_assert(strstr(r.msg, "permission denied") && strstr(r.msg, path),
              "the message names the cause and the store: %s", r.msg);
    cr_log_info("%s", r.msg);
    cr_assert_eq(r.then, PL_OK, "read-only, the run reads whole");

    /* writable again: nothing was lost, and the store takes runs */
    cr_assert_eq(chmod(dir, 0700), 0);
    cr_assert_eq(chmod(path, 0600), 0);
    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_verify(e, "kept"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(t_start(e, "chain", "{\"n\": 1}", "after"));
    pl_engine_close(e);
    t_rmtree(dir);
    pl_registry_free(reg);
}

/* ---- a real full disk, a real read-only file system ------------------------ */

/*
 * In a child: a mount namespace of its own (as root, or as the owner of a
 * user namespace), with a tmpfs of @p size at @p dir.  false when the
 * system allows neither.
 */
static bool own_tmpfs(const char *dir, const char *size)
{
    if (unshare(CLONE_NEWNS) &&
        (errno != EPERM || unshare(CLONE_NEWUSER | CLONE_NEWNS)))
        return false;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
        return false;
    char opts[64];
    snprintf(opts, sizeof opts, "size=%s", size);
    return mount("tmpfs", dir, "tmpfs", 0, opts) == 0;
}

static bool remount(const char *dir, unsigned long flags, const char *opts)
{
    return mount("tmpfs", dir, "tmpfs", MS_REMOUNT | flags, opts) == 0;
}

/* The child's report when it could not have a tmpfs of its own. */
#define NO_NAMESPACE 1000

/*
 * A tmpfs of 2 MiB fills up under the run: PL_ENOSPC naming "no space
 * left on device" and the store; grown to 64 MiB, the same engine goes on
 * and finishes the run, each call once but the one in flight.
 */
Test(disk, a_full_file_system_is_enospc_and_the_run_goes_on, .timeout = 300)
{
    const char *dir = t_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/store.db", dir);
    snprintf(g_log, sizeof g_log, "%s.effects", dir); /* outside the tmpfs */
    pl_registry *reg = registry();
    int fds[2];
    pid_t pid = fork_reporting(fds);
    if (pid == 0) {
        report r;
        memset(&r, 0, sizeof r);
        if (!own_tmpfs(dir, "2m")) {
            r.first = NO_NAMESPACE;
            snprintf(r.msg, sizeof r.msg, "%s", strerror(errno));
            send_report(fds[1], &r);
        }
        pl_engine *e = NULL;
        if (pl_engine_open(&e, path, reg, NULL))
            _exit(4);
        cJSON *p = cJSON_CreateObject();
        pl_action a = {PL_ACTION_VERSION, "many", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "full";
        pl_outcome *out = NULL;
        r.first = pl_run_start(&out, e, &a, &ro);
        snprintf(r.msg, sizeof r.msg, "%s", pl_errmsg());
        pl_outcome_free(out);
        out = NULL;
        cJSON_Delete(p);
        if (!remount(dir, 0, "size=64m"))
            _exit(5);
        r.then = pl_run_continue(&out, e, "full", NULL);
        if (!r.then && (r.then = pl_run_verify(e, "full")))
            snprintf(r.msg, sizeof r.msg, "verify: %s", pl_errmsg());
        r.done = out ? out->status : 0;
        if (r.then)
            snprintf(r.msg, sizeof r.msg, "continue: %s", pl_errmsg());
        pl_outcome_free(out);
        pl_engine_close(e);
        send_report(fds[1], &r);
    }
    report r = receive(fds[0], pid);
    if (r.first == NO_NAMESPACE) {
        pl_registry_free(reg);
        cr_skip_test("no mount namespace of its own for a tmpfs (%s): the "
                     "file size limit test stands in for a full disk",
                     r.msg);
    }
    cr_assert_eq(r.first, PL_ENOSPC, "the start gave %s: %s",
                 pl_status_name(r.first), r.msg);
    cr_assert(strstr(r.msg, "no space left on device") && strstr(r.msg, path),
              "the message names the cause and the store: %s", r.msg);
    cr_log_info("%s", r.msg);
    cr_assert_eq(r.then, PL_OK, "%s", r.msg);
    cr_assert_eq(r.done, PL_RUN_COMPLETED);
    int counts[N_CALLS], twice = 0;
    count_effects(counts);
    for (int i = 0; i < N_CALLS; i++) {
        cr_assert(counts[i] == 1 || counts[i] == 2, "call %d ran %d times", i,
                  counts[i]);
        twice += counts[i] == 2;
    }
    cr_assert_eq(twice, 1, "only the call in flight at the failure ran again");
    pl_registry_free(reg);
}

/*
 * A store on a file system remounted read-only: opening it to write is
 * PL_EACCES naming "read-only (EROFS)" and the store; it opens read-only
 * and reads whole; remounted writable, it takes runs again.
 */
Test(disk, a_read_only_file_system_is_eacces)
{
    const char *dir = t_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/store.db", dir);
    pl_registry *reg = registry();
    int fds[2];
    pid_t pid = fork_reporting(fds);
    if (pid == 0) {
        report r;
        memset(&r, 0, sizeof r);
        if (!own_tmpfs(dir, "16m")) {
            r.first = NO_NAMESPACE;
            snprintf(r.msg, sizeof r.msg, "%s", strerror(errno));
            send_report(fds[1], &r);
        }
        pl_engine *e = NULL;
        pl_outcome *out = NULL;
        cJSON *p = cJSON_Parse("{\"n\": 2}");
        pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "kept";
        if (pl_engine_open(&e, path, reg, NULL) ||
            pl_run_start(&out, e, &a, &ro))
            _exit(4);
        pl_outcome_free(out);
        pl_engine_close(e);
        if (!remount(dir, MS_RDONLY, NULL))
            _exit(5);
        e = NULL;
        r.first = pl_engine_open(&e, path, reg, NULL);
        snprintf(r.msg, sizeof r.msg, "%s", pl_errmsg());
        pl_engine_close(e);
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.read_only = true;
        e = NULL;
        r.then = pl_engine_open(&e, path, reg, &o);
        if (!r.then)
            r.then = pl_run_verify(e, "kept");
        pl_engine_close(e);
        /* writable again: it takes runs */
        if (!remount(dir, 0, NULL))
            _exit(6);
        e = NULL;
        ro.run_id = "after";
        out = NULL;
        int st = pl_engine_open(&e, path, reg, NULL);
        if (!st)
            st = pl_run_start(&out, e, &a, &ro);
        r.done = st ? 0 : out->status;
        pl_outcome_free(out);
        pl_engine_close(e);
        cJSON_Delete(p);
        send_report(fds[1], &r);
    }
    report r = receive(fds[0], pid);
    if (r.first == NO_NAMESPACE) {
        pl_registry_free(reg);
        cr_skip_test("no mount namespace of its own for a tmpfs (%s): the "
                     "permission test stands in for a read-only store",
                     r.msg);
    }
    cr_assert_eq(r.first, PL_EACCES, "opening to write gave %s: %s",
                 pl_status_name(r.first), r.msg);
    cr_assert(strstr(r.msg, "read-only (EROFS)") && strstr(r.msg, path),
              "the message names the cause and the store: %s", r.msg);
    cr_log_info("%s", r.msg);
    cr_assert_eq(r.then, PL_OK, "read-only, the run reads whole");
    cr_assert_eq(r.done, PL_RUN_COMPLETED, "writable again, a run completes");
    pl_registry_free(reg);
}
