/*
 * test_multiproc.c -- several processes at once on one store, each killed
 * (SIGKILL) and restarted several times.
 *
 * Four processes each run a run of their own ("job-0" .. "job-3") on one
 * store, in the durability modes sync, group, process and process.  A run
 * makes CALLS calls of "effect", which appends a line "run gen call" to an
 * effects file (O_APPEND, one write) before it returns: the line is the
 * call's effect, gen the process's generation (0 for the first, one more
 * at every restart).  Each generation but the last stops at a call drawn
 * from a seeded random sequence, either before making its effect or right
 * after (the call in flight), tells the parent through a pipe and waits;
 * the parent kills it there with SIGKILL and starts the next generation,
 * which continues the run.  So the kills are placed by the run's progress,
 * not by time, and each lands while the other processes go on writing.
 *
 * At the end every run is completed with the right result and verifies,
 * every call made its effect, and nothing that finished ran twice: a call
 * whose effect appears again in a later generation was the last call its
 * generation made (the one in flight when it was killed).
 *
 * The seed is printed; PL_SEED=n repeats a run of the test.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

#define N_PROCS 4
#define CALLS 40
#define KILLS 4

static char g_effects[4200];
static int g_run, g_gen;  /* this process's run and generation */
static int g_calls;       /* calls of "effect" this process made */
static int g_stop_at;     /* ... and at which one it stops (0: none) */
static bool g_stop_after; /* after making its effect, or before */
static int g_tell = -1;   /* the pipe to tell the parent it stopped */

/* Stop here until killed. */
static void stop(void)
{
    if (write(g_tell, "s", 1) != 1)
        _exit(2);
    for (;;)
        pause();
}

static int effect(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int call = -1;
    if (pl_json_unpack(a->payload, "{s:i}", "call", &call))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "no call");
    if (++g_calls == g_stop_at && !g_stop_after)
        stop();
    char line[64];
    int n = snprintf(line, sizeof line, "%d %d %d\n", g_run, g_gen, call);
    int fd = open(g_effects, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0 || write(fd, line, (size_t)n) != n) {
        if (fd >= 0)
            close(fd);
        return PL_EIO;
    }
    close(fd);
    if (g_calls == g_stop_at && g_stop_after)
        stop();
    return pl_steps_add_resultf(out, "{s:i}", "done", call);
}

static int job(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    long sum = 0;
    for (int i = 0; i < CALLS; i++) {
        cJSON *r = NULL;
        int done = -1;
        int st = pl_ctx_invokef(&r, ctx, "effect", "{s:i}", "call", i);
        if (!st)
            st = pl_json_unpack(r, "{s:i}", "done", &done);
        cJSON_Delete(r);
        if (st)
            return st;
        sum += done;
    }
    return pl_steps_add_resultf(out, "{s:i}", "sum", (int)sum);
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg))
        return NULL;
    int st = pl_registry_add_fn(reg, "job", job, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "effect", effect, NULL);
    if (st) {
        pl_registry_free(reg);
        return NULL;
    }
    return reg;
}

static const pl_durability g_modes[N_PROCS] = {
    PL_DURABILITY_SYNC, PL_DURABILITY_GROUP, PL_DURABILITY_PROCESS,
    PL_DURABILITY_PROCESS};

/* One generation of one run's process: start or continue the run until it
 * ends.  Exit 0 when it completed; 1 (and why on stderr) otherwise. */
static void child(const char *path, int run, int gen)
{
    g_run = run;
    g_gen = gen;
    pl_registry *reg = registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = g_modes[run];
    pl_engine *e = NULL;
    int st = reg ? pl_engine_open(&e, path, reg, &o) : PL_ENOMEM;
    char id[16];
    snprintf(id, sizeof id, "job-%d", run);
    pl_outcome *out = NULL;
    if (!st && gen == 0) {
        cJSON *p = cJSON_CreateObject();
        pl_action a = {PL_ACTION_VERSION, "job", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        st = pl_run_start(&out, e, &a, &ro);
        cJSON_Delete(p);
    } else if (!st) {
        st = pl_run_continue(&out, e, id, NULL);
    }
    int code = 0;
    if (st || out->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "%s, generation %d: %s %s\n", id, gen,
                st ? pl_errmsg() : pl_run_status_name(out->status),
                st || !out->reason ? "" : out->reason);
        code = 1;
    }
    pl_outcome_free(out);
    pl_engine_close(e);
    pl_registry_free(reg);
    _exit(code);
}

typedef struct proc {
    pid_t pid;
    int tell; /* read end: a byte when it stopped */
    int gen, kills;
    bool done;
} proc;

/* Start generation p->gen of run @p run: it stops at its @p stop_at-th call
 * (0: runs to the end). */
static void spawn(proc *p, const char *path, int run, int stop_at, bool after)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* dies with the test, should the test fail while it waits */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(3);
        close(fds[0]);
        g_tell = fds[1];
        g_stop_at = stop_at;
        g_stop_after = after;
        child(path, run, p->gen);
    }
    close(fds[1]);
    cr_assert_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
    p->pid = pid;
    p->tell = fds[0];
}

/* Each generation makes at most this many new calls before it stops, so
 * every kill lands before its run ends (KILLS * STOP_MAX < CALLS). */
#define STOP_MAX 8

static void spawn_next(proc *p, const char *path, int run)
{
    if (p->kills == KILLS)
        spawn(p, path, run, 0, false);
    else
        spawn(p, path, run, 1 + rand() % STOP_MAX, rand() % 2);
}

Test(multiproc, four_processes_killed_and_restarted, .timeout = 600)
{
    unsigned seed = 20261124;
    const char *env = getenv("PL_SEED");
    if (env && *env)
        seed = (unsigned)strtoul(env, NULL, 10);
    printf("multiproc: seed %u (PL_SEED=%u repeats it)\n", seed, seed);
    fflush(stdout);
    srand(seed);

    const char *dir = t_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/store.db", dir);
    snprintf(g_effects, sizeof g_effects, "%s/effects", dir);
    { /* the store exists before the processes race to open it */
        pl_registry *reg = registry();
        cr_assert_not_null(reg);
        pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
        pl_engine_close(e);
        pl_registry_free(reg);
    }

    proc procs[N_PROCS];
    memset(procs, 0, sizeof procs);
    for (int r = 0; r < N_PROCS; r++)
        spawn_next(&procs[r], path, r);
    int n_done = 0;
    while (n_done < N_PROCS) {
        for (int r = 0; r < N_PROCS; r++) {
            proc *p = &procs[r];
            if (p->done)
                continue;
            int ws;
            char b;
            if (read(p->tell, &b, 1) == 1) { /* it stopped: kill it there */
                cr_assert_eq(kill(p->pid, SIGKILL), 0);
                cr_assert_eq(waitpid(p->pid, &ws, 0), p->pid);
                cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
                close(p->tell);
                p->kills++;
                p->gen++;
                spawn_next(p, path, r);
                continue;
            }
            pid_t w = waitpid(p->pid, &ws, WNOHANG);
            cr_assert(w >= 0);
            if (w == 0)
                continue;
            cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                      "job-%d generation %d did not complete (see above)", r,
                      p->gen);
            cr_assert_eq(p->kills, KILLS, "job-%d completed before its kills",
                         r);
            close(p->tell);
            p->done = true;
            n_done++;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }

    /* every run completed, verifies, and has its result */
    pl_registry *reg = registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    for (int r = 0; r < N_PROCS; r++) {
        char id[16];
        snprintf(id, sizeof id, "job-%d", r);
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(info->status, PL_RUN_COMPLETED, "%s is %s", id,
                     pl_run_status_name(info->status));
        pl_run_info_free(info);
        cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s: %s", id, pl_errmsg());
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.check = true;
        pl_outcome *o = NULL;
        cr_assert_eq(pl_run_continue(&o, e, id, &ro), PL_OK, "%s: %s", id,
                     pl_errmsg());
        int sum = 0;
        cr_assert_eq(pl_json_unpack(pl_outcome_result(o), "{s:i}", "sum", &sum),
                     PL_OK, "%s: %s", id, pl_errmsg());
        cr_assert_eq(sum, CALLS * (CALLS - 1) / 2, "%s: sum %d", id, sum);
        pl_outcome_free(o);
    }
    pl_engine_close(e);
    pl_registry_free(reg);

    /* the effects: each call's at least once; again in a later generation
     * only for the last call of the generation that was killed */
    static int seen[N_PROCS][CALLS];     /* times made */
    static int first[N_PROCS][CALLS];    /* the generation that first made it */
    static int last[N_PROCS][KILLS + 1]; /* each generation's last call */
    memset(last, -1, sizeof last);
    FILE *f = fopen(g_effects, "r");
    cr_assert_not_null(f);
    int run, g, call, lines = 0, repeats = 0;
    while (fscanf(f, "%d %d %d", &run, &g, &call) == 3) {
        cr_assert(run >= 0 && run < N_PROCS && g >= 0 && g <= KILLS &&
                  call >= 0 && call < CALLS);
        if (seen[run][call]++) {
            repeats++;
            int was = first[run][call];
            cr_assert(was < g && last[run][was] == call,
                      "job-%d call %d made again by generation %d, though "
                      "generation %d finished it (its last call was %d)",
                      run, call, g, was, last[run][was]);
        } else {
            first[run][call] = g;
        }
        last[run][g] = call;
        lines++;
    }
    fclose(f);
    for (int r = 0; r < N_PROCS; r++)
        for (int c = 0; c < CALLS; c++)
            cr_assert_gt(seen[r][c], 0, "job-%d call %d never made", r, c);
    printf("multiproc: %d runs, %d kills, %d effects, %d repeated (calls in "
           "flight at a kill)\n",
           N_PROCS, N_PROCS * KILLS, lines, repeats);
}

/*
 * A new store that several processes open at once: one of them creates
 * it while the others may find its file half made (LMDB's two meta pages
 * not yet written, or the file shorter than them).  Every opener must get
 * the store, none a refusal as a truncated or foreign file.
 */
#define OPENERS 4
#define OPEN_ROUNDS 100

static int open_new(const char *path, int go, int i)
{
    char b;
    if (read(go, &b, 1) != 0) /* the parent closing its end starts all */
        return 3;
    pl_registry *reg = registry();
    pl_engine *e = NULL;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = i % 2 ? PL_DURABILITY_PROCESS : PL_DURABILITY_SYNC;
    o.read_only = i == 3;
    int st = reg ? pl_engine_open(&e, path, reg, &o) : PL_ENOMEM;
    if (st == PL_ENOTFOUND && o.read_only)
        st = PL_OK; /* not made yet */
    if (st)
        fprintf(stderr, "open_race: %s: %s\n", pl_status_name(st), pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    return st ? 1 : 0;
}

Test(multiproc, processes_opening_a_new_store_at_once_all_get_it,
     .timeout = 600)
{
    t_lmdb_only("the file LMDB creates");
    const char *dir = t_tmpdir();
    int refused = 0;
    for (int round = 0; round < OPEN_ROUNDS; round++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/new-%d.db", dir, round);
        int go[2];
        cr_assert_eq(pipe(go), 0);
        pid_t pids[OPENERS];
        for (int i = 0; i < OPENERS; i++) {
            pids[i] = fork();
            cr_assert_geq(pids[i], 0);
            if (pids[i] == 0) {
                close(go[1]);
                _exit(open_new(path, go[0], i));
            }
        }
        close(go[0]);
        close(go[1]);
        for (int i = 0; i < OPENERS; i++) {
            int ws;
            cr_assert_eq(waitpid(pids[i], &ws, 0), pids[i]);
            cr_assert(WIFEXITED(ws), "an opener died of signal %d",
                      WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
            refused += WEXITSTATUS(ws) != 0;
        }
    }
    cr_assert_eq(refused, 0, "%d of %d opens of a new store were refused",
                 refused, OPENERS * OPEN_ROUNDS);
}
