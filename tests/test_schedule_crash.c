/*
 * test_schedule_crash.c -- a schedule's tick starts exactly one run
 * whatever process dies where (docs/design.md §14.1), on the store the
 * suite runs on: LMDB, and PostgreSQL as pg_test_schedule_crash.
 *
 * The boundaries of a fire are its store commits: this binary is linked
 * with -Wl,--wrap=pl__store_commit (tests/CMakeLists.txt), so each commit
 * the library makes passes through __wrap_pl__store_commit() below, which
 * counts them and SIGKILLs the process just before or just after the k-th.
 * A reference fire counts a fire's commits; then for every k, before and
 * after, a forked child fires and dies there, and a fresh process fires
 * the same "now" again: each due tick has exactly one run, with the id
 * and payload the schedule gives it, the runs the two fires created add
 * up to the ticks, the cursor is on the last tick handled and names its
 * run, and the next tick starts one run more.  Time is the caller's
 * (pl_schedule_fire() takes "now"): nothing is timed.
 */
#include "support.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIN_MS 60000LL
/* 2026-01-01T00:00Z: the ticks of "* * * * *" after it are T0 + k min */
#define T0 1767225600000LL

/* ---- the commits, counted and killed at -------------------------------- */

static long g_commits;     /* since the count was reset */
static long g_kill_before; /* SIGKILL before this commit; 0: never */
static long g_kill_after;  /* SIGKILL after this one; 0: never */

/* The store's commit as the library calls it (ledger/store.h); its types
 * are the library's own, passed through untouched. */
int __real_pl__store_commit(void *s, void *const *batches, size_t n,
                            bool journal);
int __wrap_pl__store_commit(void *s, void *const *batches, size_t n,
                            bool journal);

int __wrap_pl__store_commit(void *s, void *const *batches, size_t n,
                            bool journal)
{
    long k = ++g_commits;
    if (k == g_kill_before)
        raise(SIGKILL);
    int st = __real_pl__store_commit(s, batches, n, journal);
    if (k == g_kill_after)
        raise(SIGKILL);
    return st;
}

/* ---- schedules ---------------------------------------------------------- */

static pl_engine *open_engine(const char *path, pl_registry **reg)
{
    *reg = t_registry();
    return t_engine(path, *reg, PL_DURABILITY_SYNC);
}

static void close_engine(pl_engine *e, pl_registry *reg)
{
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct plan {
    const char *name;
    pl_schedule_catch_up catch_up;
    unsigned catch_up_max;
    pl_schedule_overlap overlap;
} plan;

static void put(const char *path, const plan *p)
{
    pl_registry *reg;
    pl_engine *e = open_engine(path, &reg);
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = p->name;
    s.cron = "* * * * *";
    s.policy = "echo";
    cJSON *payload = t_json("{\"from\":\"schedule\",\"n\":7}");
    s.payload = payload;
    s.catch_up = p->catch_up;
    s.catch_up_max = p->catch_up_max;
    s.overlap = p->overlap;
    s.start_ms = T0;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(payload);
    close_engine(e, reg);
}

static long g_fire_commits; /* the last fire()'s commits */

/* Fire at @p now in this process: the runs it created. */
static size_t fire(const char *path, int64_t now)
{
    pl_registry *reg;
    pl_engine *e = open_engine(path, &reg);
    size_t n = 99;
    g_commits = 0;
    cr_assert_eq(pl_schedule_fire(e, now, &n, NULL), PL_OK, "%s", pl_errmsg());
    g_fire_commits = g_commits;
    close_engine(e, reg);
    return n;
}

/* In a forked child: fire at @p now, killed before commit @p kill_before
 * or after @p kill_after of the fire (0: not); the fire's status. */
static int child_fire(const char *path, int64_t now, long kill_before,
                      long kill_after)
{
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_SYNC;
    int st = pl_engine_open(&e, path, reg, &eo);
    g_commits = 0;
    g_kill_before = kill_before;
    g_kill_after = kill_after;
    size_t n = 0;
    if (!st)
        st = pl_schedule_fire(e, now, &n, NULL);
    pl_engine_close(e);
    pl_registry_free(reg);
    return st;
}

/* Fire at @p now in a child killed before (@p before) or after commit
 * @p k of the fire; it must die there, unless @p may_finish (a rival did
 * the fire's work first: it made fewer commits) and it fired without an
 * error. */
static void fire_killed_or(const char *path, int64_t now, long k, bool before,
                           bool may_finish)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) /* not killed: the parent names the status */
        _exit(child_fire(path, now, before ? k : 0, before ? 0 : k) ? 3 : 4);
    char when[96];
    snprintf(when, sizeof when, "%s commit %ld of the fire",
             before ? "before" : "after", k);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (may_finish && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0 &&
        si.si_code == CLD_EXITED && si.si_status == 4) {
        int ws;
        cr_assert_eq(waitpid(pid, &ws, 0), pid);
        return;
    }
    t_expect_killed(pid, when);
}

static void fire_killed(const char *path, int64_t now, long k, bool before)
{
    fire_killed_or(path, now, k, before, false);
}

static void tick_id(char *out, size_t n, const char *name, int k)
{
    time_t secs = (time_t)((T0 + k * MIN_MS) / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, n, "%s@%04d-%02d-%02dT%02d:%02dZ", name, tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min);
}

/* Ticks 1..@p n with a run, as 0s and 1s; each run found is checked to be
 * the schedule's: its id, root policy and payload. */
static const char *ticks(const char *path, const char *name, int n)
{
    static char out[32];
    pl_registry *reg;
    pl_engine *e = open_engine(path, &reg);
    for (int k = 1; k <= n; k++) {
        char id[160];
        tick_id(id, sizeof id, name, k);
        pl_run_info *ri = NULL;
        int st = pl_run_get(&ri, e, id);
        out[k - 1] = st == PL_OK ? '1' : '0';
        if (st == PL_OK) {
            cr_assert_str_eq(ri->id, id);
            cr_assert_str_eq(ri->policy, "echo", "%s", id);
            char *p = t_text(ri->payload);
            cr_assert_str_eq(p, "{\"from\":\"schedule\",\"n\":7}", "%s", id);
            free(p);
            pl_run_info_free(ri);
        } else {
            cr_assert_eq(st, PL_ENOTFOUND, "%s: %s", id, pl_errmsg());
        }
    }
    out[n] = '\0';
    close_engine(e, reg);
    return out;
}

/* The schedule's cursor is on tick @p k and names the run @p run_tick
 * started (0: none). */
static void expect_cursor(const char *path, const char *name, int k,
                          int run_tick, const char *when)
{
    pl_registry *reg;
    pl_engine *e = open_engine(path, &reg);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(cJSON_GetArraySize(list), 1);
    const cJSON *s = cJSON_GetArrayItem(list, 0);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(s, "cursor_ms");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "last_run");
    cr_assert(cJSON_IsNumber(c) && cJSON_IsString(l));
    cr_assert_eq((int64_t)c->valuedouble, T0 + k * MIN_MS,
                 "%s: the cursor is %.0f min past T0, not %d", when,
                 (c->valuedouble - (double)T0) / (double)MIN_MS, k);
    char id[160] = "";
    if (run_tick)
        tick_id(id, sizeof id, name, run_tick);
    cr_assert_str_eq(l->valuestring, id, "%s: the last run", when);
    cJSON_Delete(list);
    close_engine(e, reg);
}

/* The runs that exist among ticks 1..n. */
static size_t count_runs(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '1';
    return n;
}

/*
 * The matrix of plan @p p fired at T0 + @p due min + 1 s: the reference
 * fire starts @p want (ticks 1..due+1 as 0s and 1s) with the cursor on
 * tick @p due naming the run of @p last; every crash and refire ends the
 * same, and the next minute starts tick due+1.
 */
static void matrix(const plan *p, int due, const char *want, int last)
{
    int64_t now = T0 + due * MIN_MS + 1000;
    char ref[4300];
    t_store_in(ref, sizeof ref, t_tmpdir(), "ref");
    put(ref, p);
    size_t n = fire(ref, now);
    long commits = g_fire_commits;
    cr_assert_str_eq(ticks(ref, p->name, due + 1), want);
    cr_assert_eq(n, count_runs(want));
    /* one commit a run, the cursor with it; one more for the cursor when
     * the last tick due started no run */
    cr_assert_eq(commits, (long)count_runs(want) + (want[due - 1] == '0'),
                 "the reference fire made %ld commits", commits);
    expect_cursor(ref, p->name, due, last, "the reference");
    for (long k = 1; k <= commits; k++) {
        for (int before = 1; before >= 0; before--) {
            char store[4300], name[32], when[96];
            snprintf(name, sizeof name, "k%ld%c", k, before ? 'b' : 'a');
            snprintf(when, sizeof when, "killed %s commit %ld of %ld",
                     before ? "before" : "after", k, commits);
            t_store_in(store, sizeof store, t_tmpdir(), name);
            put(store, p);
            fire_killed(store, now, k, before);
            size_t left = count_runs(ticks(store, p->name, due + 1));
            size_t again = fire(store, now);
            cr_assert_str_eq(ticks(store, p->name, due + 1), want, "%s", when);
            cr_assert_eq(left + again, count_runs(want),
                         "%s: %zu runs before the refire, %zu by it", when,
                         left, again);
            expect_cursor(store, p->name, due, last, when);
            /* and the next tick, on time */
            size_t next = fire(store, now + MIN_MS);
            char more[32];
            snprintf(more, sizeof more, "%s", want);
            more[due] = p->overlap == PL_OVERLAP_ALLOW ? '1' : '0';
            cr_assert_eq(next, (size_t)(more[due] == '1'), "%s", when);
            cr_assert_str_eq(ticks(store, p->name, due + 1), more, "%s", when);
        }
    }
}

Test(schedule_crash, catch_up_all_overlap_allow_at_every_commit)
{
    plan p = {"every", PL_CATCH_UP_ALL, 5, PL_OVERLAP_ALLOW};
    matrix(&p, 3, "1110", 3);
}

Test(schedule_crash, overlap_skip_at_every_commit)
{
    /* tick 1's run is submitted, so live: ticks 2 and 3 pass */
    plan p = {"skips", PL_CATCH_UP_ALL, 5, PL_OVERLAP_SKIP};
    matrix(&p, 3, "1000", 1);
}

Test(schedule_crash, catch_up_latest_at_every_commit)
{
    plan p = {"latest", PL_CATCH_UP_LATEST, 0, PL_OVERLAP_ALLOW};
    matrix(&p, 3, "0010", 3);
}

/* A fire killed after its first run's commit, its cursor not moved, and
 * the next fire minutes later: the run it made is live, so under
 * PL_OVERLAP_SKIP the ticks since pass, as they would had it lived. */
static void overlap_after_crash(pl_schedule_catch_up cu)
{
    plan p = {"later", cu, 0, PL_OVERLAP_SKIP};
    char store[4300];
    t_store_in(store, sizeof store, t_tmpdir(), "later");
    put(store, &p);
    fire_killed(store, T0 + MIN_MS + 1000, 1, false);
    cr_assert_str_eq(ticks(store, p.name, 4), "1000");
    cr_assert_eq(fire(store, T0 + 3 * MIN_MS + 1000), 0);
    cr_assert_str_eq(ticks(store, p.name, 4), "1000");
    expect_cursor(store, p.name, 3, 1, "refired two minutes later");
}

Test(schedule_crash, overlap_skip_sees_the_run_of_a_killed_fire_latest)
{
    overlap_after_crash(PL_CATCH_UP_LATEST);
}

Test(schedule_crash, overlap_skip_sees_the_run_of_a_killed_fire_skip)
{
    overlap_after_crash(PL_CATCH_UP_SKIP);
}

/* Two processes fire the same minutes at once, one killed after its k-th
 * commit: every tick has one run, after a last fire. */
Test(schedule_crash, a_rival_fires_while_one_is_killed)
{
    plan p = {"rival", PL_CATCH_UP_ALL, 5, PL_OVERLAP_ALLOW};
    int64_t now = T0 + 3 * MIN_MS + 1000;
    char ref[4300];
    t_store_in(ref, sizeof ref, t_tmpdir(), "ref");
    put(ref, &p);
    cr_assert_eq(fire(ref, now), 3);
    long commits = g_fire_commits;
    for (long k = 1; k <= commits; k++) {
        char store[4300], name[32];
        snprintf(name, sizeof name, "r%ld", k);
        t_store_in(store, sizeof store, t_tmpdir(), name);
        put(store, &p);
        pid_t rival = fork();
        cr_assert_geq(rival, 0);
        if (rival == 0)
            _exit(child_fire(store, now, 0, 0) ? 1 : 0);
        fire_killed_or(store, now, k, false, true);
        int ws;
        cr_assert_eq(waitpid(rival, &ws, 0), rival);
        cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                  "the rival fire failed (k %ld)", k);
        size_t left = count_runs(ticks(store, p.name, 4));
        size_t again = fire(store, now);
        cr_assert_str_eq(ticks(store, p.name, 4), "1110", "k %ld", k);
        cr_assert_eq(left + again, 3, "k %ld", k);
        expect_cursor(store, p.name, 3, 3, "a rival, one killed");
    }
}

TestSuite(schedule_crash, .fini = t_cleanup, .timeout = 120);
