/*
 * test_schedule_put.c -- what pl_schedule_put() refuses so that no fire of
 * the schedule could fail for it afterwards (core/engine/schedule.c): a
 * payload its ticks' runs could not be submitted with, a schedule past the
 * most a store keeps, also when processes put them at once; a put again
 * that keeps the last run as the store has it when it writes, whatever
 * fires meanwhile.  On LMDB, and PostgreSQL as pg_test_schedule_put.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "support.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIN_MS 60000LL
/* 2026-01-01T00:00Z: the ticks of "* * * * *" after it are T0 + k min */
#define T0 1767225600000LL

static pl_registry *s_reg; /* the open engine's */

static void s_close(pl_engine *e)
{
    pl_engine_close(e);
    pl_registry_free(s_reg);
    s_reg = NULL;
}

/* A payload nested @p depth objects deep ({"a":{"a":...1}}), parsed. */
static cJSON *nested(int depth)
{
    char text[1024];
    size_t n = 0;
    for (int i = 0; i < depth - 1; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"a\":");
    n += (size_t)snprintf(text + n, sizeof text - n, "{\"a\":1}");
    for (int i = 0; i < depth - 1; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "}");
    cr_assert_lt(n, sizeof text);
    return t_json(text);
}

/* pl_schedule_put() takes only a payload each tick's run can be submitted
 * with, as pl_run_submit() checks a root payload: one nested deeper than
 * PL_MAX_JSON_DEPTH, or larger than the engine's max_payload, was taken
 * and then failed every fire of the schedule, for good. */
Test(schedule_put, a_payload_no_tick_could_submit_is_refused)
{
    s_reg = t_registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.max_payload = 1024;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), s_reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    char big[1200];
    snprintf(big, sizeof big, "{\"s\":\"%01100d\"}", 0);
    cJSON *bad[] = {nested(PL_MAX_JSON_DEPTH + 1), t_json(big)};
    for (size_t i = 0; i < 2; i++) {
        pl_schedule s = PL_SCHEDULE_INIT;
        s.name = "x";
        s.cron = "* * * * *";
        s.policy = "echo";
        s.payload = bad[i];
        s.start_ms = T0;
        cr_expect_eq(pl_schedule_put(e, &s), PL_ELIMIT, "case %zu: %s", i,
                     pl_errmsg());
        cr_expect(strncmp(pl_errmsg(), "schedule 'x': ", 14) == 0,
                  "case %zu: '%s'", i, pl_errmsg());
        cJSON_Delete(bad[i]);
    }
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK);
    cr_expect_eq(cJSON_GetArraySize(list), 0, "nothing was written");
    cJSON_Delete(list);
    /* the deepest a run takes is taken, and its tick's run starts */
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = "deepest";
    s.cron = "* * * * *";
    s.policy = "echo";
    cJSON *p = nested(PL_MAX_JSON_DEPTH);
    s.payload = p;
    s.start_ms = T0;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    size_t n = 0;
    cr_expect_eq(pl_schedule_fire(e, T0 + MIN_MS + 1000, &n, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(n, 1);
    pl_run_info *ri = NULL;
    cr_expect_eq(pl_run_get(&ri, e, "deepest@2026-01-01T00:01Z"), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info_free(ri);
    s_close(e);
}

/* What the racing processes saw, in memory they share. */
typedef struct race {
    atomic_int ok, limit, other;
    atomic_int named; /* PL_ELIMIT messages naming their schedule and 4096 */
    char first_other[256];
} race;

#define RACERS 4
#define FILL_PUTS 1040 /* each racer's first round: 4160 in all, 64 past */
#define ROUNDS 3       /* then: 32 deleted, 64 put at once, again */
#define FREED 32

/* Racer @p k of round @p round: waits on @p go, then puts @p n new
 * schedules through an engine of its own, and counts what each put
 * said. */
static void racer(const char *path, int round, int k, int n, int go, race *r)
{
    char byte;
    if (read(go, &byte, 1) < 0) {
        /* closed by the parent: start */
    }
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    if (pl_registry_new(&reg) || pl_engine_open(&e, path, reg, &o)) {
        atomic_fetch_add(&r->other, n);
        _exit(1);
    }
    pl_schedule s = PL_SCHEDULE_INIT;
    s.cron = "0 0 1 1 *";
    s.policy = "echo";
    char name[32], want[64];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "r%d-p%d-%04d", round, k, i);
        s.name = name;
        int st = pl_schedule_put(e, &s);
        snprintf(want, sizeof want, "schedule '%s': ", name);
        if (st == PL_OK) {
            atomic_fetch_add(&r->ok, 1);
        } else if (st == PL_ELIMIT) {
            atomic_fetch_add(&r->limit, 1);
            if (strncmp(pl_errmsg(), want, strlen(want)) == 0 &&
                strstr(pl_errmsg(), "4096"))
                atomic_fetch_add(&r->named, 1);
        } else if (atomic_fetch_add(&r->other, 1) == 0) {
            snprintf(r->first_other, sizeof r->first_other, "%s: %s (%s)", name,
                     pl_errmsg(), pl_status_name(st));
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    _exit(0);
}

/* RACERS processes, each putting @p n new schedules, all at once. */
static void race_round(const char *path, int round, int n, race *r)
{
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t kids[RACERS];
    for (int k = 0; k < RACERS; k++) {
        kids[k] = fork();
        cr_assert_geq(kids[k], 0);
        if (kids[k] == 0) {
            close(go[1]);
            racer(path, round, k, n, go[0], r);
        }
    }
    close(go[0]);
    close(go[1]); /* all start */
    for (int k = 0; k < RACERS; k++) {
        int ws = 0;
        cr_assert_eq(waitpid(kids[k], &ws, 0), kids[k]);
        cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "racer %d: %#x", k,
                  ws);
    }
}

/* A store keeps at most 4096 schedules (PL__SCHED_MAX), and reads more as
 * a damaged store: every list, fire, put and delete failed with
 * PL_ECORRUPT, every schedule stopped firing and none could be deleted to
 * mend it.  A put past them is refused, also of processes putting at
 * once: the count is the store's, in the transaction that writes (on
 * PostgreSQL under a lock, each put counting after the one before has
 * committed).  Counted outside it, two puts that both read 4095 both
 * wrote.  The store is filled by the racers, then FREED schedules are
 * deleted and raced for again; a put that replaces a schedule of a full
 * store, or comes after a delete, is taken. */
Test(schedule_put, processes_putting_at_once_stop_at_the_most_a_store_keeps,
     .timeout = 300)
{
    race *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(r, MAP_FAILED);
    memset(r, 0, sizeof *r);
    char path[4200], name[32];
    snprintf(path, sizeof path, "%s", t_store_path());
    s_reg = t_registry();
    pl_engine_close(t_engine(path, s_reg, PL_DURABILITY_PROCESS)); /* made */
    race_round(path, 0, FILL_PUTS, r);
    for (int round = 1; round <= ROUNDS; round++) {
        /* no engine open across the fork() of the racers */
        pl_engine *e = t_engine(path, s_reg, PL_DURABILITY_PROCESS);
        for (int i = 0; i < FREED; i++) {
            snprintf(name, sizeof name, "r0-p%d-%04d", i % RACERS,
                     i / RACERS + (round - 1) * FREED / RACERS);
            cr_assert_eq(pl_schedule_delete(e, name), PL_OK, "%s: %s", name,
                         pl_errmsg());
        }
        pl_engine_close(e);
        race_round(path, round, 2 * FREED / RACERS, r);
    }
    cr_expect_eq(atomic_load(&r->other), 0, "first: %s", r->first_other);
    cr_expect_eq(atomic_load(&r->ok), 4096 + ROUNDS * FREED);
    cr_expect_eq(atomic_load(&r->limit),
                 RACERS * FILL_PUTS - 4096 + ROUNDS * FREED);
    cr_expect_eq(atomic_load(&r->named), atomic_load(&r->limit),
                 "each refusal names its schedule and the most");
    /* the store reads whole, exactly full */
    pl_engine *e = t_engine(path, s_reg, PL_DURABILITY_PROCESS);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(cJSON_GetArraySize(list), 4096);
    char first[32], second[32];
    snprintf(first, sizeof first, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(list,
                                                                         0),
                                                      "name")));
    snprintf(second, sizeof second, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(list,
                                                                         1),
                                                      "name")));
    cJSON_Delete(list);
    cr_expect_eq(pl_schedule_fire(e, T0, NULL, NULL), PL_OK, "%s", pl_errmsg());
    pl_schedule s = PL_SCHEDULE_INIT;
    s.cron = "0 0 1 1 *";
    s.policy = "echo";
    s.name = "one-more";
    cr_expect_eq(pl_schedule_put(e, &s), PL_ELIMIT, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "4096"), "%s", pl_errmsg());
    s.name = first; /* replaced: still 4096 */
    s.cron = "0 0 2 1 *";
    cr_expect_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_schedule_delete(e, second), PL_OK, "%s", pl_errmsg());
    s.name = "one-more";
    cr_expect_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    s_close(e);
    munmap(r, sizeof *r);
}

/* ---- a put again while ticks fire ---------------------------------------- */

#define FIRES 150 /* ticks started, each followed by a tick skipped */

/* The tick @p k of "* * * * *" after T0: its run's id. */
static void tick_id(char out[64], int k)
{
    time_t secs = (time_t)((T0 + k * MIN_MS) / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, 64, "again@%04d-%02d-%02dT%02d:%02dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min);
}

typedef struct again {
    pl_engine *e;
    atomic_int handled; /* the ticks up to it are handled */
    atomic_bool done;
    int puts, st; /* the putter's: how many, and its first failure */
    char msg[256];
} again;

/* Schedule "again": "echo" every minute, the latest tick missed caught
 * up, a tick skipped while the last run is live. */
static pl_schedule again_def(void)
{
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = "again";
    s.cron = "* * * * *";
    s.policy = "echo";
    s.catch_up = PL_CATCH_UP_LATEST;
    s.overlap = PL_OVERLAP_SKIP;
    return s;
}

/* Put schedule "again" again and again, from the tick handled last, until
 * the firing is done. */
static void *putter(void *arg)
{
    again *a = arg;
    pl_schedule s = again_def();
    while (!atomic_load(&a->done) && !a->st) {
        s.start_ms = T0 + atomic_load(&a->handled) * MIN_MS;
        a->st = pl_schedule_put(a->e, &s);
        if (a->st)
            snprintf(a->msg, sizeof a->msg, "%s", pl_errmsg());
        a->puts++;
    }
    return NULL;
}

static void last_run(pl_engine *e, int64_t now, char out[64])
{
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, now), PL_OK, "%s", pl_errmsg());
    const char *v = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "last_run"));
    snprintf(out, 64, "%s", v ? v : "(none)");
    cJSON_Delete(list);
}

/* A schedule put again keeps the run it started last, as the store has it
 * when the put writes: read before, a tick fired between the read and the
 * write was lost from the record, which named the run before it again, and
 * the overlap rule, looking at that finished run, started the next tick
 * while the tick's own run was live.  One thread puts the schedule again
 * without pause (from the tick handled last, so that it starts no tick
 * again); the other fires tick 2k - 1 (its run is left live), finds it the
 * last run, fires tick 2k (skipped: that run is live), then executes the
 * run.  Every odd tick has its run, no even one. */
Test(schedule_put, a_put_again_while_ticks_fire_keeps_each_fire_once,
     .timeout = 300)
{
    s_reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), s_reg, PL_DURABILITY_PROCESS);
    again a = {.e = e};
    atomic_init(&a.handled, 0);
    atomic_init(&a.done, false);
    pl_schedule s = again_def();
    s.start_ms = T0;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, putter, &a), 0);
    int lost = 0, twice = 0, wrong = 0;
    char first_lost[160] = "", first_wrong[160] = "";
    for (int k = 1; k <= FIRES; k++) {
        int tick = 2 * k - 1;
        char id[64], last[64];
        tick_id(id, tick);
        size_t n = 0;
        int64_t now = T0 + tick * MIN_MS + 1000;
        cr_assert_eq(pl_schedule_fire(e, now, &n, NULL), PL_OK, "%s",
                     pl_errmsg());
        if (n != 1 && !wrong++)
            snprintf(first_wrong, sizeof first_wrong, "tick %d: %zu run(s)",
                     tick, n);
        last_run(e, now, last);
        if (strcmp(last, id) != 0 && !lost++)
            snprintf(first_lost, sizeof first_lost, "tick %d: last run %s",
                     tick, last);
        atomic_store(&a.handled, tick);
        now += MIN_MS;
        size_t skipped = 0;
        cr_assert_eq(pl_schedule_fire(e, now, &skipped, NULL), PL_OK, "%s",
                     pl_errmsg());
        twice += skipped != 0;
        atomic_store(&a.handled, tick + 1);
        pl_outcome *o = NULL;
        if (n == 1)
            cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s: %s", id,
                         pl_errmsg());
        pl_outcome_free(o);
    }
    atomic_store(&a.done, true);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_expect_eq(a.st, PL_OK, "put: %s", a.msg);
    cr_expect_gt(a.puts, 0);
    cr_expect_eq(lost, 0, "%d fires lost from the record (%s)", lost,
                 first_lost);
    cr_expect_eq(twice, 0, "%d ticks started while the last run was live",
                 twice);
    cr_expect_eq(wrong, 0, "%d ticks that did not start their run (%s)", wrong,
                 first_wrong);
    for (int tick = 1; tick <= 2 * FIRES; tick++) {
        char id[64];
        tick_id(id, tick);
        pl_run_info *ri = NULL;
        int st = pl_run_get(&ri, e, id);
        cr_expect_eq(st, tick % 2 ? PL_OK : PL_ENOTFOUND, "%s: %s", id,
                     pl_errmsg());
        pl_run_info_free(ri);
    }
    s_close(e);
}
