/*
 * test_runs_page.c -- pl_engine_runs_from(): runs from a cursor, either
 * way, every run once across pages; pl_engine_runs(): the engine's ids
 * oldest first; and pl_engine_change_mark(): it moves when a run is
 * written, by this process or another, and not otherwise.
 * Run on both stores.
 */
#include "support.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct page {
    char ids[64][PL_MAX_RUN_ID + 1];
    size_t n, max;
} page;

static int take(const pl_run_info *ri, void *user)
{
    page *p = user;
    if (p->n == p->max)
        return 1;
    snprintf(p->ids[p->n++], PL_MAX_RUN_ID + 1, "%s", ri->id);
    return 0;
}

static size_t list(pl_engine *e, const char *after, bool reverse, size_t max,
                   page *p)
{
    memset(p, 0, sizeof *p);
    p->max = max;
    pl_runs_options o = PL_RUNS_OPTIONS_INIT;
    o.after = after;
    o.reverse = reverse;
    int st = pl_engine_runs_from(e, &o, take, p);
    cr_assert(st == PL_OK || st == 1, "%s", pl_errmsg());
    return p->n;
}

static pl_registry *g_reg; /* with_runs()'s, freed by done() */

static void done(pl_engine *e)
{
    pl_engine_close(e);
    pl_registry_free(g_reg);
    g_reg = NULL;
}

static pl_engine *with_runs(const char *const *ids, size_t n)
{
    g_reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), g_reg, PL_DURABILITY_SYNC);
    for (size_t i = 0; i < n; i++)
        pl_outcome_free(t_start(e, "echo", "{}", ids[i]));
    return e;
}

static const char *const IDS[] = {"b", "a", "c-2", "c", "c-10", "d.x", "ab"};
#define N_IDS (sizeof IDS / sizeof IDS[0])
/* in byte order: a ab b c c-10 c-2 d.x */

Test(runs_page, forward_and_back_from_a_cursor)
{
    pl_engine *e = with_runs(IDS, N_IDS);
    page p;
    cr_assert_eq(list(e, NULL, false, 64, &p), N_IDS);
    const char *asc[] = {"a", "ab", "b", "c", "c-10", "c-2", "d.x"};
    for (size_t i = 0; i < N_IDS; i++)
        cr_assert_str_eq(p.ids[i], asc[i]);
    cr_assert_eq(list(e, NULL, true, 64, &p), N_IDS);
    for (size_t i = 0; i < N_IDS; i++)
        cr_assert_str_eq(p.ids[i], asc[N_IDS - 1 - i]);
    /* a cursor that is a run, and one that is none */
    cr_assert_eq(list(e, "c", false, 2, &p), 2);
    cr_assert_str_eq(p.ids[0], "c-10");
    cr_assert_str_eq(p.ids[1], "c-2");
    cr_assert_eq(list(e, "c", true, 2, &p), 2);
    cr_assert_str_eq(p.ids[0], "b");
    cr_assert_str_eq(p.ids[1], "ab");
    cr_assert_eq(list(e, "bz", false, 1, &p), 1);
    cr_assert_str_eq(p.ids[0], "c");
    cr_assert_eq(list(e, "bz", true, 1, &p), 1);
    cr_assert_str_eq(p.ids[0], "b");
    /* past either end: nothing */
    cr_assert_eq(list(e, "z", false, 64, &p), 0);
    cr_assert_eq(list(e, "a", true, 64, &p), 0);
    cr_assert_eq(list(e, "~", true, 64, &p), N_IDS);
    /* "" is the start, as NULL */
    cr_assert_eq(list(e, "", true, 64, &p), N_IDS);
    done(e);
}

Test(runs_page, pages_cover_every_run_once)
{
    const char *ids[40];
    char buf[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(buf[i], sizeof buf[i], "run-%02d", (i * 17) % 40);
        ids[i] = buf[i];
    }
    pl_engine *e = with_runs(ids, 40);
    for (int rev = 0; rev < 2; rev++) {
        char after[PL_MAX_RUN_ID + 1] = "";
        size_t seen = 0;
        page p;
        while (list(e, after, rev, 7, &p)) {
            for (size_t i = 0; i < p.n; i++) {
                char want[16];
                snprintf(want, sizeof want, "run-%02zu",
                         rev ? 39 - seen : seen);
                cr_assert_str_eq(p.ids[i], want);
                seen++;
            }
            snprintf(after, sizeof after, "%s", p.ids[p.n - 1]);
        }
        cr_assert_eq(seen, 40);
    }
    done(e);
}

/* Unix milliseconds of the wall clock. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* pl_engine_runs(): the ids the engine makes (UUIDv7) list in creation
 * order, each run started in a later millisecond than the one before (the
 * clock waited for, not slept on). */
Test(runs_page, engine_made_ids_list_oldest_first)
{
    g_reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), g_reg, PL_DURABILITY_PROCESS);
    char made[6][PL_MAX_RUN_ID + 1];
    int64_t last = 0;
    for (int i = 0; i < 6; i++) {
        while (wall_ms() <= last)
            ; /* the next millisecond */
        pl_outcome *o = t_start(e, "echo", "{}", NULL);
        last = wall_ms();
        cr_assert_eq(strlen(o->run_id), PL_UUID_LEN);
        cr_assert_eq(o->run_id[14], '7', "not a UUIDv7: %s", o->run_id);
        snprintf(made[i], sizeof made[i], "%s", o->run_id);
        pl_outcome_free(o);
    }
    page p = {.max = 64};
    cr_assert_eq(pl_engine_runs(e, take, &p), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(p.n, 6);
    for (int i = 0; i < 6; i++)
        cr_expect_str_eq(p.ids[i], made[i], "run %d of 6", i);
    done(e);
}

Test(runs_page, refuses_bad_arguments)
{
    pl_engine *e = with_runs(IDS, 1);
    page p = {.max = 64};
    cr_assert_eq(pl_engine_runs_from(NULL, NULL, take, &p), PL_EINVAL);
    cr_assert_eq(pl_engine_runs_from(e, NULL, NULL, &p), PL_EINVAL);
    pl_runs_options o = PL_RUNS_OPTIONS_INIT;
    o.version = 0;
    cr_assert_eq(pl_engine_runs_from(e, &o, take, &p), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "pl_runs_options"), "%s", pl_errmsg());
    o.version = PL_RUNS_OPTIONS_VERSION + 1;
    cr_assert_eq(pl_engine_runs_from(e, &o, take, &p), PL_EINVAL);
    char long_id[PL_MAX_RUN_ID + 2];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    o = (pl_runs_options)PL_RUNS_OPTIONS_INIT;
    o.after = long_id;
    cr_assert_eq(pl_engine_runs_from(e, &o, take, &p), PL_EINVAL);
    /* NULL options: pl_engine_runs() */
    cr_assert_eq(pl_engine_runs_from(e, NULL, take, &p), PL_OK);
    cr_assert_eq(p.n, 1);
    uint64_t m;
    cr_assert_eq(pl_engine_change_mark(NULL, e), PL_EINVAL);
    cr_assert_eq(pl_engine_change_mark(&m, NULL), PL_EINVAL);
    done(e);
}

Test(runs_page, the_change_mark_moves_with_writes)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    uint64_t a, b, c;
    cr_assert_eq(pl_engine_change_mark(&a, e), PL_OK);
    pl_runs_options o = PL_RUNS_OPTIONS_INIT;
    page p = {.max = 64};
    cr_assert(pl_engine_runs_from(e, &o, take, &p) >= 0);
    cr_assert_eq(pl_engine_change_mark(&b, e), PL_OK);
    if (!t_on_pg()) /* the server's WAL moves with anything it does */
        cr_assert_eq(a, b, "reading moved the mark");
    pl_outcome_free(t_start(e, "echo", "{}", "one"));
    cr_assert_eq(pl_engine_change_mark(&c, e), PL_OK);
    cr_assert_neq(b, c, "a run written did not move the mark");
    pl_engine_close(e);
    /* another process's writes move it too */
    pl_engine_options ro = PL_ENGINE_OPTIONS_INIT;
    ro.read_only = true;
    pl_engine *r = NULL;
    cr_assert_eq(pl_engine_open(&r, path, reg, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_change_mark(&a, r), PL_OK);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        pl_engine *w = NULL;
        int st = pl_engine_open(&w, path, reg, NULL);
        pl_outcome *out = NULL;
        pl_action act = PL_ACTION_INIT;
        act.policy = "echo";
        act.payload = pl_json_empty();
        pl_run_options rop = PL_RUN_OPTIONS_INIT;
        rop.run_id = "two";
        if (!st)
            st = pl_run_start(&out, w, &act, &rop);
        pl_outcome_free(out);
        pl_engine_close(w);
        _exit(st ? 1 : 0);
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    cr_assert_eq(pl_engine_change_mark(&b, r), PL_OK);
    cr_assert_neq(a, b, "another process's write did not move the mark");
    memset(&p, 0, sizeof p);
    p.max = 64;
    o.reverse = true;
    cr_assert_eq(pl_engine_runs_from(r, &o, take, &p), PL_OK);
    cr_assert_eq(p.n, 2);
    cr_assert_str_eq(p.ids[0], "two");
    pl_engine_close(r);
    pl_registry_free(reg);
}
