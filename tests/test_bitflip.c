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
 * ("queued"); a rate limit's budget; and a schedule.  Each flip is made in
 * a copy of the data file, in place, at the bytes LMDB itself points to (so
 * a changed key stays where it was in its page, out of order in the B-tree,
 * as real corruption would leave it).  A forked child then opens the copy
 * and runs pl_engine_runs, pl_schedule_list, and for each run pl_run_walk,
 * pl_run_ledger, pl_run_verify, pl_run_continue with the check option and
 * pl_run_continue for real, then pl_engine_wake and pl_rate_take, reporting
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
 * 18000 flips, 30 s).  Under the sanitizers, where each child costs more,
 * every bit of the keys but only every SAMPLE-th bit of the values (4): a
 * fixed stride, so the same bits every time.
 *
 * A second store holds deleted runs (retention.c): every bit of its
 * tombstones and of a purge record is flipped too.
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

#include "internal.h"
#include "support.h"

#if defined(__SANITIZE_ADDRESS__)
#define SAMPLE 4
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SAMPLE 4
#endif
#endif
#ifndef SAMPLE
#define SAMPLE 1
#endif

/*
 * A child that reports no progress (enters no next call) for this long is
 * hung.  A guard, not a timing: the calls of a hang loop forever, so it is
 * set far above what one call takes on a slow, shared machine under the
 * sanitizers, and the clock restarts at every call the child enters.
 */
#define HANG_MS 60000

static const char *const g_runs[] = {"done", "waiting", "crashed", "parked",
                                     "queued"};
#define N_RUNS 5
#define BUDGET "bitflip-budget" /* a rate limit's, taken once in build() */
#define BUDGET_WINDOW_MS 3600000
/* the store's one schedule is listed as of this time (2026-01-01) */
#define SCHED_NOW_MS 1767225600000LL

/* ---- the policies -------------------------------------------------------- */

static bool g_die; /* set in the child that makes the crashed run */

static int call_one(pl_ctx *ctx, const char *policy, const char *json,
                    cJSON **out)
{
    cJSON *p = cJSON_Parse(json);
    int st = pl_ctx_invoke(out, ctx, policy, p);
    cJSON_Delete(p);
    return st;
}

/* outer: chain(n=1), a version point (its marker step), then echo;
 * returns both. */
static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int v = 0;
    int st = call_one(ctx, "chain", "{\"n\": 1}", &x);
    if (!st)
        st = pl_ctx_version(&v, ctx, "flip", 0, 1);
    if (!st)
        st = call_one(ctx, "echo", "{\"m\": 7}", &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "x", x, "y", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* ask: echo, then the human "approve". */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int st = call_one(ctx, "echo", "{\"q\": 1}", &x);
    if (!st)
        st = call_one(ctx, "approve", "{\"ok?\": true}", &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "answer", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* die: not idempotent; kills its own process when g_die is set. */
static int die(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    if (g_die)
        kill(getpid(), SIGKILL);
    return pl_steps_add_result(out, a->payload);
}

/* boom: add, then die. */
static int boom(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int st = call_one(ctx, "add", "{\"a\": 1, \"b\": 2}", &x);
    if (!st)
        st = call_one(ctx, "die", "{\"d\": 1}", &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "y", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* A run that continues as new once: {} -> {"next": true}. */
static int chain_once(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)user;
    if (!cJSON_GetObjectItem(a->payload, "next")) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddTrueToObject(next, "next");
        int st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    return pl_steps_add_result(out, pl_json_empty());
}

/* waitev: waits a day for the event "go"; cancelled, it makes a
 * compensating call. */
static int waitev(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", 86400000);
    if (st == PL_ECANCELLED) {
        st = call_one(ctx, "echo", "{\"undo\": 1}", NULL);
        return st ? st : PL_ECANCELLED;
    }
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "got", p);
    cJSON_Delete(p);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
        bool idem;
    } defs[] = {{"chain_once", chain_once, true},
                {"outer", outer, true},
                {"ask", ask, true},
                {"boom", boom, true},
                {"die", die, false},
                {"waitev", waitev, true}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.idempotent = defs[i].idem;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    return reg;
}

static pl_engine *open_engine(const char *path, const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS; /* no zeroed tail: a small file */
    pl_engine *e = NULL;
    return pl_engine_open(&e, path, reg, &o) ? NULL : e;
}

/* A file's bytes (caller frees). */
static uint8_t *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    struct stat sb;
    cr_assert_eq(fstat(fileno(f), &sb), 0);
    uint8_t *data = malloc((size_t)sb.st_size);
    cr_assert_not_null(data);
    cr_assert_eq(fread(data, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    *len = (size_t)sb.st_size;
    return data;
}

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

/* ---- where the keys and values are --------------------------------------- */

typedef struct target {
    size_t off, len;
    char db[16];
    char key[160];             /* the record's key, printable, for messages */
    bool root_last_of_running; /* the crashed run's root ledger's last step */
    unsigned run;              /* steps: the run's number */
} target;

typedef struct targets {
    target *v;
    size_t n, cap;
} targets;

static void add_target(targets *t, const target *x)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->v = realloc(t->v, t->cap * sizeof *t->v);
        cr_assert_not_null(t->v);
    }
    t->v[t->n++] = *x;
}

static void printable(char *out, size_t n, const MDB_val *k)
{
    size_t w = 0;
    const uint8_t *p = k->mv_data;
    for (size_t i = 0; i < k->mv_size && w + 4 < n; i++)
        w += (size_t)snprintf(out + w, n - w,
                              p[i] >= 0x20 && p[i] < 0x7f ? "%c" : "\\x%02x",
                              p[i]);
}

/*
 * Where a pointer LMDB gave into its map is in the data file: its page
 * starts at the page boundary below it (the map is page-aligned; a big
 * value's overflow pages start one), and a page's header begins with its
 * page number.
 */
static size_t file_offset(const void *p, size_t psize)
{
    uintptr_t at = (uintptr_t)p, page = at & ~(uintptr_t)(psize - 1);
    uint64_t pgno;
    memcpy(&pgno, (const void *)page, sizeof pgno);
    return (size_t)pgno * psize + (size_t)(at - page);
}

/*
 * Find every key and value of the store's databases through LMDB: their
 * offsets in the data file are where LMDB's pointers point in its map.
 */
static void find_targets_in(const char *path, const char *const *dbs,
                            size_t n_dbs, targets *keys, targets *vals,
                            const uint8_t *crashed_last,
                            size_t crashed_last_len);

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

static void find_targets_in(const char *path, const char *const *dbs,
                            size_t n_dbs, targets *keys, targets *vals,
                            const uint8_t *crashed_last,
                            size_t crashed_last_len)
{
    MDB_env *env;
    MDB_txn *txn;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_RDONLY | MDB_NOSUBDIR, 0600), 0);
    MDB_stat ms;
    cr_assert_eq(mdb_env_stat(env, &ms), 0);
    size_t psize = ms.ms_psize;
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    for (size_t d = 0; d < n_dbs; d++) {
        MDB_dbi dbi;
        cr_assert_eq(mdb_dbi_open(txn, dbs[d], 0, &dbi), 0);
        MDB_cursor *cur;
        cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
        MDB_val k, v;
        for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            target t = {0};
            snprintf(t.db, sizeof t.db, "%s", dbs[d]);
            printable(t.key, sizeof t.key, &k);
            t.root_last_of_running = crashed_last && d == 3 &&
                                     k.mv_size == crashed_last_len &&
                                     !memcmp(k.mv_data, crashed_last,
                                             crashed_last_len);
            t.run = d == 3 && k.mv_size >= 8 ? ((const uint8_t *)k.mv_data)[7]
                                             : 0;
            t.off = file_offset(k.mv_data, psize);
            t.len = k.mv_size;
            add_target(keys, &t);
            t.off = file_offset(v.mv_data, psize);
            t.len = v.mv_size;
            add_target(vals, &t);
        }

        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

/* ---- one flip ------------------------------------------------------------- */

/* What a child reports: the call it is in ('S'tage), then at the end its
 * findings. */
typedef struct report {
    bool reported;   /* a call returned PL_ECORRUPT or PL_EVERSION */
    bool nondet;     /* a replay returned PL_ENONDET */
    uint64_t digest; /* of everything read back (no check of real continue) */
} report;

static void note(report *r, int st)
{
    if (st == PL_ECORRUPT || st == PL_EVERSION)
        r->reported = true;
    if (st == PL_ENONDET)
        r->nondet = true;
    t_mix(&r->digest, &st, sizeof st);
}

static int visit_run(const pl_run_info *info, void *user)
{
    uint64_t *h = user;
    t_mix_str(h, info->id);
    t_mix_str(h, info->policy);
    t_mix_json(h, info->payload);
    t_mix(h, &info->status, sizeof info->status);
    t_mix(h, &info->steps, sizeof info->steps);
    t_mix(h, &info->created_us, sizeof info->created_us);
    t_mix(h, &info->updated_us, sizeof info->updated_us);
    t_mix(h, &info->heartbeat_us, sizeof info->heartbeat_us);
    t_mix(h, &info->owner_pid, sizeof info->owner_pid);
    t_mix_str(h, info->owner_host);
    t_mix(h, &info->attempts, sizeof info->attempts);
    t_mix(h, &info->error, sizeof info->error);
    t_mix_str(h, info->reason);
    t_mix_str(h, info->suspended_path);
    t_mix_json(h, info->prompt);
    t_mix(h, &info->wake_ms, sizeof info->wake_ms);
    t_mix_str(h, info->wait_event);
    t_mix(h, &info->deadline_ms, sizeof info->deadline_ms);
    return 0;
}

static void mix_step(uint64_t *h, const pl_step *s)
{
    pl_step_type t = pl_step_type_of(s);
    t_mix(h, &t, sizeof t);
    t_mix_str(h, pl_step_actor(s));
    t_mix_str(h, pl_step_id(s));
    t_mix_str(h, pl_step_code(s));
    int64_t us = pl_step_time_us(s);
    t_mix(h, &us, sizeof us);
    uint8_t prev[PL_HASH_LEN] = {0};
    (void)pl_step_prev_hash(prev, s);
    t_mix(h, prev, sizeof prev);
    t_mix_json(h, pl_step_payload(s));
}

static int visit_step(const pl_step *s, void *user)
{
    mix_step(user, s);
    return 0;
}

static void stage(int fd, char c)
{
    ssize_t w = write(fd, &c, 1);
    (void)w;
}

/* In the child: every call on the store at @p path; never returns. */
static void child(const char *path, const pl_registry *reg, int fd)
{
    report r = {false, false, 14695981039346656037ull};
    stage(fd, 'o');
    pl_engine *e = open_engine(path, reg);
    if (!e) {
        note(&r, pl_errmsg()[0] ? PL_ECORRUPT : PL_ESTORE);
    } else {
        stage(fd, 'l'); /* list */
        note(&r, pl_engine_runs(e, visit_run, &r.digest));
        stage(fd, 's');
        cJSON *scheds = NULL;
        note(&r, pl_schedule_list(&scheds, e, SCHED_NOW_MS));
        t_mix_json(&r.digest, scheds);
        cJSON_Delete(scheds);
        for (size_t i = 0; i < N_RUNS; i++) {
            stage(fd, 'w');
            note(&r, pl_run_walk(e, g_runs[i], visit_step, &r.digest));
            stage(fd, 'g');
            pl_steps *l = NULL;
            int st = pl_run_ledger(&l, e, g_runs[i], "0");
            note(&r, st);
            for (size_t j = 0; !st && j < pl_steps_count(l); j++)
                mix_step(&r.digest, pl_steps_at(l, j));
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
        pl_engine_close(e);
    }
    stage(fd, '=');
    ssize_t w = write(fd, &r, sizeof r);
    (void)w;
    _exit(0);
}

static const char *stage_name(char c)
{
    switch (c) {
    case 'o': return "pl_engine_open";
    case 'l': return "pl_engine_runs";
    case 's': return "pl_schedule_list";
    case 'w': return "pl_run_walk";
    case 'g': return "pl_run_ledger";
    case 'v': return "pl_run_verify";
    case 'c': return "pl_run_continue (check)";
    case 'r': return "pl_run_continue";
    case 'b': return "pl_rate_take";
    case 't': return "pl_engine_wake";
    case 'd': return "pl_run_tombstone";
    case 'i': return "pl_run_get";
    case 'n': return "pl_run_start";
    case 'p': return "pl_engine_prune";
    default: return "?";
    }
}

/*
 * Write @p data with bit @p bit of byte @p off flipped to @p path (its lock
 * file removed), run the child on it, and return its report.  A hang, a
 * crash or a lost report fails the test, naming @p what.
 */
typedef void (*child_fn)(const char *path, const pl_registry *reg, int fd);

static report try_flip_in(child_fn fn, const char *path, const pl_registry *reg,
                          const uint8_t *data, size_t len, size_t off,
                          unsigned bit, const char *what);

static report try_flip(const char *path, const pl_registry *reg,
                       const uint8_t *data, size_t len, size_t off,
                       unsigned bit, const char *what)
{
    return try_flip_in(child, path, reg, data, len, off, bit, what);
}

static report try_flip_in(child_fn fn, const char *path, const pl_registry *reg,
                          const uint8_t *data, size_t len, size_t off,
                          unsigned bit, const char *what)
{
    char lock[4200];
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(lock);
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(f >= 0);
    cr_assert_eq(write(f, data, len), (ssize_t)len);
    if (bit < 8) { /* 8: no flip, the store as built */
        uint8_t b = (uint8_t)(data[off] ^ (1u << bit));
        cr_assert_eq(pwrite(f, &b, 1, (off_t)off), 1);
    }
    close(f);

    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        fn(path, reg, fds[1]);
    }
    close(fds[1]);
    /* read the child's stages and report until the pipe closes (it has
     * exited), or kill it once HANG_MS have passed */
    char last = '?';
    report r;
    size_t got = 0;
    bool in_report = false;
    int ws = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long spent = (now.tv_sec - t0.tv_sec) * 1000 +
                     (now.tv_nsec - t0.tv_nsec) / 1000000;
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int ready = spent < HANG_MS ? poll(&pfd, 1, (int)(HANG_MS - spent)) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            close(fds[0]);
            cr_assert_fail("%s: %s made no progress for %d ms (a hang)", what,
                           stage_name(last), HANG_MS);
        }
        uint8_t buf[256];
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;                           /* the child has exited */
        clock_gettime(CLOCK_MONOTONIC, &t0); /* progress: the guard restarts */
        for (ssize_t i = 0; i < n; i++) {
            if (in_report) {
                if (got < sizeof r)
                    ((uint8_t *)&r)[got++] = buf[i];
            } else if (buf[i] == '=') {
                in_report = true;
            } else {
                last = (char)buf[i];
            }
        }
    }
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    close(fds[0]);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "%s: the child died in %s (status %#x)", what, stage_name(last),
              ws);
    cr_assert_eq(got, sizeof r, "%s: no report from the child", what);
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
    report base = try_flip(s.path, s.reg, s.data, s.len, 0, 8, "baseline");
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
    size_t flips = 0, reported = 0;
    for (size_t i = 0; i < s.keys.n; i++) {
        const target *t = &s.keys.v[i];
        for (size_t byte = 0; byte < t->len; byte++) {
            for (unsigned bit = 0; bit < 8; bit++) {
                char what[256];
                snprintf(what, sizeof what, "key %s/%s, byte %zu, bit %u",
                         t->db, t->key, byte, bit);
                report r = try_flip(s.path, s.reg, s.data, s.len, t->off + byte,
                                    bit, what);
                flips++;
                reported += r.reported;
            }
        }
    }
    cr_log_info("keys: %zu bits flipped in %zu keys; every call returned; "
                "%zu reported PL_ECORRUPT or PL_EVERSION",
                flips, s.keys.n, reported);
    fprintf(stderr,
            "bitflip keys: %zu bits in %zu keys flipped, every call "
            "returned; %zu flips reported\n",
            flips, s.keys.n, reported);
    finish(&s);
}

Test(bitflip, every_bit_of_every_value_is_reported_or_harmless, .timeout = 600)
{
    setup s;
    prepare(&s);
    /* the unflipped store's answers */
    report base = try_flip(s.path, s.reg, s.data, s.len, 0, 8, "baseline");
    cr_assert_not(base.reported, "the unflipped store reports corruption");
    size_t flips = 0, reported = 0, nondet = 0, harmless = 0;
    for (size_t i = 0; i < s.vals.n; i++) {
        const target *t = &s.vals.v[i];
        for (size_t byte = 0; byte < t->len; byte++) {
            for (unsigned bit = 0; bit < 8; bit++) {
                if ((byte * 8 + bit) % SAMPLE != 0)
                    continue;
                char what[256];
                snprintf(what, sizeof what, "value of %s/%s, byte %zu, bit %u",
                         t->db, t->key, byte, bit);
                report r = try_flip(s.path, s.reg, s.data, s.len, t->off + byte,
                                    bit, what);
                flips++;
                if (r.reported)
                    reported++;
                else if (r.nondet)
                    nondet++;
                else if (r.digest == base.digest && !strcmp(t->db, "meta") &&
                         !strcmp(t->key, "next_run"))
                    harmless++; /* read by run creation only, which
                                   refuses a taken number
                                   (test_integrity.c) */
                else if (r.digest == base.digest)
                    cr_assert_fail("%s: nothing read back changed; which "
                                   "reader does this byte matter to?",
                                   what);
                else
                    cr_assert_fail("%s: changed what the store reads back, "
                                   "and no call reported it",
                                   what);
            }
        }
    }
    fprintf(stderr,
            "bitflip values: %zu bits flipped (every %d%s): %zu reported "
            "(PL_ECORRUPT/PL_EVERSION), %zu caught by replay (PL_ENONDET), "
            "%zu harmless, 0 changed unnoticed\n",
            flips, SAMPLE, SAMPLE == 1 ? "" : ", sanitizer build", reported,
            nondet, harmless);
    finish(&s);
}

/* ---- deleted runs: tombstones and purge records -------------------------- */

/*
 * A store with a completed run ("done"), a run deleted ("gone-1": its
 * tombstone), one deleted but whose steps are not yet removed ("gone-2":
 * its tombstone, and its purge record, as a prune killed between the two
 * leaves them), and a run continued as new ("chain", whose state names its
 * successor "chain~1", whose state names it).  A child reads both
 * tombstones and both links, tries to start "gone-1" again, prunes (which
 * goes through the purge record first), and verifies "done": a flip in a
 * tombstone, a purge record or a link's state record is reported, and
 * never costs "done" a step.
 */
static void deleted_child(const char *path, const pl_registry *reg, int fd)
{
    report r = {false, false, 14695981039346656037ull};
    stage(fd, 'o');
    pl_engine *e = open_engine(path, reg);
    if (!e) {
        note(&r, PL_ECORRUPT);
    } else {
        static const char *const gone[] = {"gone-1", "gone-2"};
        for (size_t i = 0; i < 2; i++) {
            stage(fd, 'd');
            pl_tombstone t = PL_TOMBSTONE_INIT;
            int st = pl_run_tombstone(&t, e, gone[i]);
            note(&r, st);
            t_mix(&r.digest, &st, sizeof st);
            if (!st)
                t_mix(&r.digest, &t, sizeof t);
        }
        static const char *const links[] = {"chain", "chain~1"};
        for (size_t i = 0; i < 2; i++) {
            stage(fd, 'i');
            pl_run_info *ri = NULL;
            int st = pl_run_get(&ri, e, links[i]);
            note(&r, st);
            t_mix(&r.digest, &st, sizeof st);
            if (!st) {
                t_mix(&r.digest, &ri->status, sizeof ri->status);
                t_mix_str(&r.digest, ri->successor);
                t_mix_str(&r.digest, ri->predecessor);
            }
            pl_run_info_free(ri);
        }
        stage(fd, 'n');
        cJSON *p = cJSON_CreateObject();
        pl_action a = {PL_ACTION_VERSION, "outer", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "gone-1";
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, e, &a, &ro);
        note(&r, st);
        t_mix(&r.digest, &st, sizeof st);
        pl_outcome_free(o);
        cJSON_Delete(p);
        stage(fd, 'p');
        pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
        po.statuses = 1u << PL_RUN_FAILED; /* "done" stays */
        note(&r, pl_engine_prune(e, &po, NULL));
        stage(fd, 'v');
        /* whatever the flip, "done" is whole: nothing else counts */
        r.nondet = pl_run_verify(e, "done") != PL_OK;
        pl_engine_close(e);
    }
    stage(fd, '=');
    ssize_t w = write(fd, &r, sizeof r);
    (void)w;
    _exit(0);
}

static uint8_t *build_deleted(const char *path, const pl_registry *reg,
                              size_t *len)
{
    pl_engine *e = open_engine(path, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    static const char *const ids[] = {"done", "gone-1", "gone-2"};
    for (size_t i = 0; i < 3; i++) {
        pl_outcome *o = t_start(e, "outer", "{}", ids[i]);
        cr_assert_eq(o->status, PL_RUN_COMPLETED);
        pl_outcome_free(o);
    }
    cr_assert_eq(pl_run_delete(e, "gone-1"), PL_OK, "%s", pl_errmsg());
    /* gone-2: deleted, its steps left under its purge record */
    uint64_t num;
    pl__buf state = {0}, tomb = {0};
    cr_assert_eq(pl__store_run_find(e->store, "gone-2", &num, NULL), PL_OK);
    cr_assert_eq(pl__store_state_get(e->store, num, &state), PL_OK);
    pl__tomb t = {.status = PL_RUN_COMPLETED,
                  .created_us = 1,
                  .deleted_us = 2,
                  .expires_us = INT64_MAX / 2};
    snprintf(t.policy, sizeof t.policy, "outer");
    cr_assert_eq(pl__tomb_encode(&tomb, "gone-2", &t), PL_OK);
    pl__delete d = {"gone-2", num, state.data, state.len, &tomb, -1};
    cr_assert_eq(pl__store_delete(e->store, &d, 1), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(d.rc, PL_OK);
    pl__buf_free(&state);
    pl__buf_free(&tomb);
    /* chain -> chain~1 (run numbers 4 and 5) */
    pl_outcome *o = t_start(e, "chain_once", "{}", "chain");
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    pl_engine_close(e);

    return read_whole(path, len);
}

Test(bitflip, every_bit_of_tombstones_and_purge_records, .timeout = 600)
{
    const char *dir = t_tmpdir();
    char orig[4200], copy[4200];
    snprintf(orig, sizeof orig, "%s/orig.db", dir);
    snprintf(copy, sizeof copy, "%s/flip.db", dir);
    pl_registry *reg = registry();
    size_t len;
    uint8_t *data = build_deleted(orig, reg, &len);
    targets keys = {0}, vals = {0};
    static const char *const dbs[] = {"tombs", "purge", "state"};
    find_targets_in(orig, dbs, 3, &keys, &vals, NULL, 0);
    /* of the state records, the two links' (run numbers 4 and 5) */
    size_t kept = 0;
    for (size_t i = 0; i < keys.n; i++) {
        if (!strcmp(keys.v[i].db, "state") &&
            (keys.v[i].len != 8 || data[keys.v[i].off + 7] < 4))
            continue;
        keys.v[kept] = keys.v[i];
        vals.v[kept++] = vals.v[i];
    }
    keys.n = vals.n = kept;
    cr_assert_eq(vals.n, 5, "two tombstones, a purge record, two links");
    report base = try_flip_in(deleted_child, copy, reg, data, len, 0, 8,
                              "baseline");
    cr_assert_not(base.reported, "the unflipped store reports corruption");
    cr_assert_not(base.nondet, "the unflipped store's \"done\" is whole");
    size_t flips = 0, reported = 0;
    for (int pass = 0; pass < 2; pass++) {
        const targets *ts = pass ? &vals : &keys;
        for (size_t i = 0; i < ts->n; i++) {
            const target *t = &ts->v[i];
            for (size_t byte = 0; byte < t->len; byte++) {
                for (unsigned bit = 0; bit < 8; bit++) {
                    if (pass && (byte * 8 + bit) % SAMPLE != 0)
                        continue;
                    char what[256];
                    snprintf(what, sizeof what, "%s of %s/%s, byte %zu, bit %u",
                             pass ? "value" : "key", t->db, t->key, byte, bit);
                    report r = try_flip_in(deleted_child, copy, reg, data, len,
                                           t->off + byte, bit, what);
                    flips++;
                    reported += r.reported;
                    /* a changed key may hide "done"'s own records (a B-tree
                     * out of order), which is reported; a purge that took
                     * its steps unreported would not be */
                    cr_assert(!r.nondet || (!pass && r.reported),
                              "%s: \"done\" lost a step", what);
                    /* every byte of a record is checksummed and bound to
                     * its id or number: a changed value is reported */
                    cr_assert(!pass || r.reported,
                              "%s: changed a record, and no call reported it",
                              what);
                }
            }
        }
    }
    fprintf(stderr,
            "bitflip deleted and continued runs: %zu bits flipped in %zu "
            "keys and %zu values (tombstones, purge record, chain links): "
            "%zu reported, \"done\" whole after every one\n",
            flips, keys.n, vals.n, reported);
    free(keys.v);
    free(vals.v);
    free(data);
    pl_registry_free(reg);
}
