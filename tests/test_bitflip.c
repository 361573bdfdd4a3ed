/*
 * test_bitflip.c -- hostile store bytes: every bit of every key, and every
 * bit of every value, of a small store, flipped in turn.
 *
 * The store holds five runs: a completed one with nested calls and a
 * version marker ("done"), a suspended one ("waiting"), one whose process
 * was killed (SIGKILL) inside a non-idempotent call ("crashed"), one parked
 * waiting for an event ("parked", with its timer, an event of another name
 * and a cancellation in its inbox: continued, it is cancelled and makes a
 * compensating call), and one queued with a priority and a concurrency key
 * ("queued"); a rate limit's budget and a budget in tokens; and a
 * schedule.  Each flip is made in
 * a copy of the data file, in place, at the bytes LMDB itself points to (so
 * a changed key stays where it was in its page, out of order in the B-tree,
 * as real corruption would leave it).  A forked child (one for 32 flips in
 * a row, each on a new copy) then opens the copy and runs pl_engine_runs, pl_schedule_list, and for each run pl_run_walk,
 * pl_run_ledger, pl_run_verify, pl_run_continue with the check option and
 * pl_run_continue for real, then pl_engine_wake, pl_rate_take and
 * pl_rate_take_units, reporting
 * through a pipe which call it is in.  A child stuck in one call for a
 * minute is killed and fails the test (a hang), as does one that dies of a
 * signal (a crash) or a sanitizer report.
 *
 * For values, each flip is also classified: reported (a call returned
 * PL_ECORRUPT or PL_EVERSION), caught by replay (PL_ENONDET), or harmless
 * (everything read back is what the unflipped store gives, and the byte is
 * the next run number's, which only run creation reads and checks).  A
 * flip that changes what is read back and that no call reports fails the
 * test: the newest steps of the unfinished runs (the suspended run's suspend
 * step, the crashed run's last root step) are anchored by the heads of the
 * open ledgers that their state records hold (see runrec.c).
 *
 * Every bit of every key and every bit of every value is flipped (about
 * 32,000 flips, 75 s of CPU).  Under the sanitizers, every SAMPLE-th bit of
 * each (7: every byte, support_bitflip.h).  PL_BITFLIP_SLICE="k/N" takes
 * the k-th of N slices of the flips (the i-th flip of each sweep with
 * i % N == k): the suite runs them as N tests, test_bitflip_0.., in
 * parallel.
 *
 * A store of deleted and continued runs has its own sweep
 * (test_bitflip_deleted.c); support_bitflip.c holds what both share.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support_bitflip.h"

static const char *const g_runs[] = {"done", "waiting", "crashed", "parked",
                                     "queued"};
#define N_RUNS 5
#define BUDGET "bitflip-budget" /* a rate limit's, taken once in build() */
#define BUDGET_WINDOW_MS 3600000
/* the store's one schedule is listed as of this time (2026-01-01) */
#define SCHED_NOW_MS 1767225600000LL

/* Build the store; returns the data file's bytes. */
static uint8_t *build(const char *path, const pl_registry *reg, size_t *len)
{
    pl_engine *e = open_engine(path, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_outcome *o = t_start(e, "outer", "{}", "done");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    o = t_start(e, "ask", "{}", "waiting");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    pl_schedule sc = PL_SCHEDULE_INIT;
    sc.name = "nightly";
    sc.cron = "30 2 * * 1-5";
    sc.zone = "Europe/London";
    sc.policy = "outer";
    sc.catch_up = PL_CATCH_UP_ALL;
    sc.catch_up_max = 3;
    sc.start_ms = SCHED_NOW_MS;
    cr_assert_eq(pl_schedule_put(e, &sc), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        g_die = true;
        pl_engine *ce = open_engine(path, reg);
        cJSON *p = cJSON_CreateObject();
        pl_action a = {PL_ACTION_VERSION, "boom", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "crashed";
        pl_outcome *co = NULL;
        if (ce)
            (void)pl_run_start(&co, ce, &a, &ro);
        _exit(3); /* not reached: die killed the process */
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
              "the run was to be killed inside 'die'");

    /* a parked run, its timer, and an event it does not wait for */
    e = open_engine(path, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    o = t_start(e, "waitev", "{}", "parked");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cJSON *ev = cJSON_Parse("{\"x\": 1}");
    cr_assert_eq(pl_run_signal(NULL, e, "parked", "other", ev), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ev);
    /* a queued run with its flow record, and a rate budget */
    cJSON *qp = cJSON_CreateObject();
    pl_action qa = {PL_ACTION_VERSION, "outer", qp, NULL, 0, NULL};
    pl_run_options qo = PL_RUN_OPTIONS_INIT;
    qo.run_id = "queued";
    qo.priority = 3;
    qo.concurrency_key = "tenant";
    qo.concurrency_limit = 1;
    cr_assert_eq(pl_run_submit(NULL, e, &qa, &qo), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(qp);
    bool ok;
    int64_t at, retry;
    cr_assert_eq(pl_rate_take(&ok, &at, &retry, e, BUDGET, 5, BUDGET_WINDOW_MS),
                 PL_OK);
    pl_rate_grant g = PL_RATE_GRANT_INIT;
    cr_assert_eq(pl_rate_take_units(&g, e, BUDGET, "tokens", 500,
                                    BUDGET_WINDOW_MS, 120),
                 PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    /* where waitev is not registered, a cancellation waits in the inbox */
    pl_registry *bare = NULL;
    cr_assert_eq(pl_registry_new(&bare), PL_OK);
    e = open_engine(path, bare);
    cr_assert_not_null(e, "%s", pl_errmsg());
    cr_assert_eq(pl_run_cancel(e, "parked", "stop"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(bare);

    return read_whole(path, len);
}

/* ---- where the keys and values are (support_bitflip.c) ------------------ */

static void find_targets(const char *path, targets *keys, targets *vals,
                         uint64_t crashed_num, const uint8_t *crashed_last,
                         size_t crashed_last_len)
{
    static const char *const dbs[] = {"meta",    "runs",     "state", "steps",
                                      "journal", "timers",   "due",   "inbox",
                                      "flow",    "schedules"};
    (void)crashed_num;
    find_targets_in(path, dbs, PL__ARRAY_LEN(dbs), keys, vals, crashed_last,
                    crashed_last_len);
}

/* In the child: every call on the store at @p path. */
static report child(const char *path, const pl_registry *reg, int fd)
{
    report r = {false, false, 14695981039346656037ull};
    stage(fd, 'o');
    pl_engine *e = open_engine(path, reg);
    if (!e) {
        note(&r, pl_errmsg()[0] ? PL_ECORRUPT : PL_ESTORE);
    } else {
        stage(fd, 'l'); /* list */
        note(&r, pl_engine_runs(e, t_visit_mix_run, &r.digest));
        stage(fd, 's');
        cJSON *scheds = NULL;
        note(&r, pl_schedule_list(&scheds, e, SCHED_NOW_MS));
        t_mix_json(&r.digest, scheds);
        cJSON_Delete(scheds);
        for (size_t i = 0; i < N_RUNS; i++) {
            stage(fd, 'w');
            note(&r, pl_run_walk(e, g_runs[i], t_visit_mix_step, &r.digest));
            stage(fd, 'g');
            pl_steps *l = NULL;
            int st = pl_run_ledger(&l, e, g_runs[i], "0");
            note(&r, st);
            for (size_t j = 0; !st && j < pl_steps_count(l); j++)
                t_mix_step(&r.digest, pl_steps_at(l, j));
            pl_steps_free(l);
            stage(fd, 'v');
            note(&r, pl_run_verify(e, g_runs[i]));
            stage(fd, 'c');
            pl_run_options ro = PL_RUN_OPTIONS_INIT;
            ro.check = true;
            pl_outcome *o = NULL;
            note(&r, pl_run_continue(&o, e, g_runs[i], &ro));
            if (o) {
                t_mix(&r.digest, &o->status, sizeof o->status);
                t_mix_str(&r.digest, o->reason);
            }
            pl_outcome_free(o);
        }
        /* for real, last: it writes */
        for (size_t i = 0; i < N_RUNS; i++) {
            stage(fd, 'r');
            pl_outcome *o = NULL;
            int st = pl_run_continue(&o, e, g_runs[i], NULL);
            if (st == PL_ECORRUPT || st == PL_EVERSION ||
                (o && o->status == PL_RUN_FAILED &&
                 (o->error == PL_ECORRUPT || o->error == PL_EVERSION)))
                r.reported = true;
            pl_outcome_free(o);
        }
        /* the timers: the earliest is read, the due ones taken */
        stage(fd, 't');
        int64_t next = 0;
        note(&r, pl_engine_wake(e, &next));
        t_mix(&r.digest, &next, sizeof next);
        /* the rate budget: read and counted */
        stage(fd, 'b');
        bool ok = false;
        int64_t at, retry;
        note(&r,
             pl_rate_take(&ok, &at, &retry, e, BUDGET, 5, BUDGET_WINDOW_MS));
        t_mix(&r.digest, &ok, sizeof ok);
        /* the budget in tokens: read and charged */
        stage(fd, 'u');
        pl_rate_grant g = PL_RATE_GRANT_INIT;
        note(&r, pl_rate_take_units(&g, e, BUDGET, "tokens", 500,
                                    BUDGET_WINDOW_MS, 100));
        t_mix(&r.digest, &g.admitted, sizeof g.admitted);
        t_mix(&r.digest, &g.used, sizeof g.used);
        pl_engine_close(e);
    }
    return r;
}

/* The key of the crashed run's root ledger's last step (run number 3). */
static void crashed_last_key(uint8_t key[12])
{
    memset(key, 0, 12);
    key[7] = 3;  /* the third run created */
    key[11] = 2; /* its root ledger: call add, result add, call die */
}

typedef struct setup {
    const char *path;
    pl_registry *reg;
    uint8_t *data;
    size_t len;
    targets keys, vals;
} setup;

static void prepare(setup *s)
{
    const char *dir = t_tmpdir();
    static char orig[4200], copy[4200];
    snprintf(orig, sizeof orig, "%s/orig.db", dir);
    snprintf(copy, sizeof copy, "%s/flip.db", dir);
    s->reg = registry();
    s->data = build(orig, s->reg, &s->len);
    uint8_t last[12];
    crashed_last_key(last);
    memset(&s->keys, 0, sizeof s->keys);
    memset(&s->vals, 0, sizeof s->vals);
    find_targets(orig, &s->keys, &s->vals, 3, last, sizeof last);
    for (size_t i = 0; i < s->keys.n; i++)
        cr_assert_leq(s->keys.v[i].off + s->keys.v[i].len, s->len);
    for (size_t i = 0; i < s->vals.n; i++)
        cr_assert_leq(s->vals.v[i].off + s->vals.v[i].len, s->len);
    s->path = copy;
}

static void finish(setup *s)
{
    free(s->keys.v);
    free(s->vals.v);
    free(s->data);
    pl_registry_free(s->reg);
}

/* ---- the tests ------------------------------------------------------------ */

Test(bitflip, a_store_as_built_reads_back_whole)
{
    setup s;
    prepare(&s);
    /* the unflipped copy: nothing reported, and the crashed run found */
    report base = try_unflipped(child, s.path, s.reg, s.data, s.len);
    cr_assert_not(base.reported);
    pl_engine *e = open_engine(s.path, s.reg);
    cr_assert_not_null(e);
    for (size_t i = 0; i < N_RUNS; i++)
        cr_assert_eq(pl_run_verify(e, g_runs[i]), PL_OK, "%s: %s", g_runs[i],
                     pl_errmsg());
    pl_engine_close(e);
    bool found = false;
    for (size_t i = 0; i < s.keys.n; i++)
        found |= s.keys.v[i].root_last_of_running;
    cr_assert(found, "the crashed run's last root step is not where the "
                     "test expects it");
    finish(&s);
}

Test(bitflip, every_bit_of_every_key_ends_every_walk, .timeout = 600)
{
    setup s;
    prepare(&s);
    long slice, slices;
    t_slice("PL_BITFLIP_SLICE", &slice, &slices);
    flip_list fs = {0};
    size_t seen = 0;
    for (size_t i = 0; i < s.keys.n; i++) {
        const target *t = &s.keys.v[i];
        for (size_t byte = 0; byte < t->len; byte++) {
            for (unsigned bit = 0; bit < 8; bit++) {
                if ((byte * 8 + bit) % SAMPLE != 0)
                    continue;
                if (seen++ % (size_t)slices != (size_t)slice)
                    continue;
                flip_add(&fs, t->off + byte, bit, t,
                         "key %s/%s, byte %zu, bit %u", t->db, t->key, byte,
                         bit);
            }
        }
    }
    report *rs = try_flips_in(child, s.path, s.reg, s.data, s.len, &fs);
    size_t flips = fs.n, reported = 0;
    for (size_t i = 0; i < fs.n; i++)
        reported += rs[i].reported;
    free(rs);
    free(fs.v);
    cr_log_info("keys: %zu bits flipped in %zu keys (slice %ld/%ld); every "
                "call returned; %zu reported PL_ECORRUPT or PL_EVERSION",
                flips, s.keys.n, slice, slices, reported);
    fprintf(stderr,
            "bitflip keys: %zu bits in %zu keys flipped (every %d%s, slice "
            "%ld/%ld), every call returned; %zu flips reported\n",
            flips, s.keys.n, SAMPLE, SAMPLE == 1 ? "" : ", sanitizer build",
            slice, slices, reported);
    finish(&s);
}

Test(bitflip, every_bit_of_every_value_is_reported_or_harmless, .timeout = 600)
{
    setup s;
    prepare(&s);
    /* the unflipped store's answers */
    report base = try_unflipped(child, s.path, s.reg, s.data, s.len);
    cr_assert_not(base.reported, "the unflipped store reports corruption");
    long slice, slices;
    t_slice("PL_BITFLIP_SLICE", &slice, &slices);
    flip_list fs = {0};
    size_t seen = 0;
    for (size_t i = 0; i < s.vals.n; i++) {
        const target *t = &s.vals.v[i];
        for (size_t byte = 0; byte < t->len; byte++) {
            for (unsigned bit = 0; bit < 8; bit++) {
                if ((byte * 8 + bit) % SAMPLE != 0)
                    continue;
                if (seen++ % (size_t)slices != (size_t)slice)
                    continue;
                flip_add(&fs, t->off + byte, bit, t,
                         "value of %s/%s, byte %zu, bit %u", t->db, t->key,
                         byte, bit);
            }
        }
    }
    report *rs = try_flips_in(child, s.path, s.reg, s.data, s.len, &fs);
    size_t flips = fs.n, reported = 0, nondet = 0, harmless = 0;
    for (size_t i = 0; i < fs.n; i++) {
        const report *r = &rs[i];
        const target *t = fs.v[i].t;
        const char *what = fs.v[i].what;
        if (r->reported)
            reported++;
        else if (r->nondet)
            nondet++;
        else if (r->digest == base.digest && !strcmp(t->db, "meta") &&
                 !strcmp(t->key, "next_run"))
            harmless++; /* read by run creation only, which refuses a taken
                           number (test_integrity.c) */
        else if (r->digest == base.digest)
            cr_assert_fail("%s: nothing read back changed; which reader does "
                           "this byte matter to?",
                           what);
        else
            cr_assert_fail("%s: changed what the store reads back, and no "
                           "call reported it",
                           what);
    }
    free(rs);
    free(fs.v);
    fprintf(stderr,
            "bitflip values: %zu bits flipped (every %d%s, slice %ld/%ld): "
            "%zu reported (PL_ECORRUPT/PL_EVERSION), %zu caught by replay "
            "(PL_ENONDET), %zu harmless, 0 changed unnoticed\n",
            flips, SAMPLE, SAMPLE == 1 ? "" : ", sanitizer build", slice,
            slices, reported, nondet, harmless);
    finish(&s);
}
