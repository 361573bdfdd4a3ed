/*
 * pl-bench -- policyledger against the physical floor.
 *
 *   pl-bench [--quick] [--json] [--dir DIR] [--only w1,...,w8,fanout,rate,mcp]
 *   pl-bench [--quick] [--json] --store postgresql://...   (see report_pg)
 *
 * Every workload runs in a fresh child process (so peak RSS is its own),
 * next to a raw-LMDB floor measured the same way, on the same disk, in the
 * same run:
 *
 *   W1 sequential  one run of N calls to a tool returning ~100 bytes of JSON;
 *                  calls/s, p50/p95 per call, peak RSS, commits per call.
 *                  Floor: raw LMDB, one put (MDB_APPEND, the keys being in
 *                  order) + commit per record, same durability; and
 *                  "rawcall", the same committing a call's records each
 *                  time (what storing a call costs).  The floors are plain
 *                  LMDB: they lengthen the file as they go, where the
 *                  engine's synced modes keep a zeroed tail past it (see
 *                  lmdb_env.c), so a ratio includes what that saves.
 *   W2 recovery    a run of 2M calls SIGKILLed after M; the restart's time
 *                  to its first newly executed call and to completion, and
 *                  calls served vs executed.  Floor: opening raw LMDB and
 *                  reading the same number of records.
 *   W3 concurrency R runs x C calls, all in flight at once, two ways:
 *                  "threads", one thread per run, and "pool", the runs as
 *                  tasks of a pl_pool with a thread per CPU; total calls/s.
 *                  Floor: R threads doing raw put + commit per record.
 *   W4 replay      continue a finished run of N calls, every result served
 *                  from the ledger; steps/s, peak RSS (which includes the
 *                  LMDB file pages mapped) and the replay's own growth in
 *                  anonymous memory, for growing N.
 *                  Floor: a raw LMDB cursor scan of the same records.
 *   W5 agent turns an agent's loop: a policy under loop(K) + invoke_action
 *                  that asks for its ledger every turn (pl_ctx_ledger, as an
 *                  LLM policy does to build its conversation; it reads only
 *                  the last step, so the figure is the engine's share)
 *                  and calls the tool
 *                  until turn K; time per turn at K = 10, 100, 1000, in
 *                  process mode (no fsync, so reading shows).  Flat is the
 *                  goal: a turn must not cost more as the ledger grows.
 *                  Over HTTP: the LLM policy (openai+http) against a
 *                  loopback model server run by a thread of pl-bench, K =
 *                  10, 100, 1000 turns in sync and process mode, next to a
 *                  bare libcurl + cJSON loop making the same requests;
 *                  what the engine adds per turn, commits per turn, the
 *                  replay's requests (counted at the server) and time, and
 *                  store bytes per turn.
 *   fanout         call_all of 10 calls to a tool that waits 10 ms on I/O
 *                  against the same 10 calls one after another (wall time
 *                  per run); and the CPU time per call of a call bare,
 *                  under an empty retry and under validate, in process
 *                  mode.  No floor: the figures are ratios to each other.
 *   W6 workers     1,000 submitted runs of 10 calls drained by 1, 2 and 4
 *                  worker processes (pl_worker_run) sharing the store, in
 *                  sync mode; runs/s and the scaling over one worker.  No
 *                  floor: the figures are ratios to each other.
 *   W7 timers      N runs each sleeping a random 0..60 s (0..5 s with
 *                  --quick), parked on one store by one process while
 *                  worker processes (pl_worker_run: one on LMDB, four on
 *                  PostgreSQL) wake them, for N = 10,000 and 100,000
 *                  (200 and 2,000 with --quick): the workers' peak RSS
 *                  and peak anonymous RSS (flat in N is the goal: a
 *                  parked run holds no memory), store bytes per waiting
 *                  run, and wake lateness (woken minus due) p50/p99.
 *                  bench_time.c.
 *   W8 signal      a run parked waiting for an event; pl_run_signal()
 *                  continues it in the caller's thread, which consumes the
 *                  event and makes one call: the time from the signal to
 *                  the run's next step being durable, and to the call's
 *                  result being durable, sync mode.  Floor: one raw LMDB
 *                  put + commit, synced.  bench_time.c.
 *   rate           one rate limit shared by three processes (bench_rate.c).
 *
 * W1 and W3 run in each durability mode (sync, group, process).  Every
 * workload and its floor are repeated, interleaved, and the medians shown;
 * a ratio of two figures measured together (W1's engine to its floor, W3's
 * group to sync) is the median of the repetitions' own ratios, since the
 * host's speed drifts between repetitions.  W1's synced modes go further:
 * the run and its floors take turns at the disk every 100 calls, since a
 * flush's cost drifts within a repetition too.  Figures are printed as a
 * table, or with --json as one JSON document holding every figure and every
 * ratio to its floor, and end with the project's goals, each marked met or
 * missed by this run.  Nothing here is a pass/fail test: the exit status
 * says only whether every workload ran.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- clocks and memory ------------------------------------------------------ */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A field of /proc/self/status in kB ("VmHWM", "RssAnon"). */
long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Repetitions of every workload and of its floor, interleaved; the medians
 * are reported.  5, or 3 with --quick; W1's short runs (process mode, and
 * 1,000 calls in any mode: a fraction of a second each, which the host's
 * CPU or disk speed moves the most) run SHORT_REPS times as many. */
static int g_reps = REPS;

/* The median of n values (sorts them). */
double median(double *v, int n)
{
    double tmp[REPS_MAX];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return tmp[n / 2];
}

double percentile(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

void die(const char *what)
{
    fprintf(stderr, "pl-bench: %s: %s\n", what, pl_errmsg());
    _exit(1);
}

/* ---- child processes ---------------------------------------------------------- */

/* Start fn(arg, result) in a child that sends its result back through a
 * pipe; child_finish() collects it.  Returns the pid, or -1. */

static pid_t child_start(child_fn fn, const void *arg, void *result,
                         size_t size, int *from_child)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        memset(result, 0, size);
        fn(arg, result);
        const char *p = result;
        size_t left = size;
        while (left) {
            ssize_t w = write(fds[1], p, left);
            if (w <= 0)
                _exit(1);
            p += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    *from_child = fds[0];
    return pid;
}

/* Read the result of a child_start()ed child and reap it: 0 if it ran to
 * the end and sent all of it. */
static int child_finish(pid_t pid, int from_child, void *result, size_t size)
{
    char *p = result;
    size_t left = size;
    while (left) {
        ssize_t r = read(from_child, p, left);
        if (r <= 0)
            break;
        p += r;
        left -= (size_t)r;
    }
    close(from_child);
    int status;
    waitpid(pid, &status, 0);
    return left == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Run fn(arg, result) in a child and wait for its result. */
int in_child(child_fn fn, const void *arg, void *result, size_t size)
{
    int fd;
    pid_t pid = child_start(fn, arg, result, size, &fd);
    return pid < 0 ? -1 : child_finish(pid, fd, result, size);
}

static char g_dir[1024];
const char *g_pg_uri; /* --store postgresql://...: see report_pg() */
static void pg_path_in(char *out, size_t n, const char *name);
static void pg_remove(const char *path);

void path_in(char *out, size_t n, const char *name)
{
    if (g_pg_uri) {
        pg_path_in(out, n, name);
        return;
    }
    snprintf(out, n, "%s/%s", g_dir, name);
}

void remove_store(const char *path)
{
    if (g_pg_uri) {
        pg_remove(path);
        return;
    }
    char lock[1200];
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(path);
    unlink(lock);
}

/* ---- the policies under test ---------------------------------------------------- */

/* Tool: returns a ~100-byte JSON object derived from its input. */
static int bench_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)ctx;
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    /* W2 registers the tool with a kill point: die inside that call */
    if (user && cJSON_IsNumber(i) && i->valueint + 1 == *(const int *)user)
        raise(SIGKILL);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "i", cJSON_IsNumber(i) ? i->valuedouble : -1);
    cJSON_AddStringToObject(r, "status", "ok");
    cJSON_AddStringToObject(r, "message",
                            "the quick brown fox jumps over the lazy dog");
    cJSON *items = cJSON_AddArrayToObject(r, "items");
    for (int k = 1; k <= 3; k++)
        cJSON_AddItemToArray(items, cJSON_CreateNumber(k));
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Latencies of the calls a root makes, when measuring (W1). */
static double *g_lat;
static size_t g_nlat;
static double g_first_exec; /* W2: when the tool first ran after restart */

/* W1's turns with its floors (see w1_turns): every TURN calls the root
 * hands the disk to the floors' process and waits for it to hand back. */
#define TURN 100

static struct {
    int out, in;   /* to and from the floors' process, or -1 */
    int pending;   /* calls made since the last turn */
    double paused; /* time spent waiting for the floors */
} g_turn = {-1, -1, 0, 0};

static void hand_over(void)
{
    double t0 = now_s();
    int n = g_turn.pending;
    char done;
    if (write(g_turn.out, &n, sizeof n) != (ssize_t)sizeof n ||
        read(g_turn.in, &done, 1) != 1) {
        fprintf(stderr, "pl-bench: W1: the floors' process is gone\n");
        _exit(1);
    }
    g_turn.pending = 0;
    g_turn.paused += now_s() - t0;
}

static int bench_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    int count = cJSON_IsNumber(n) ? n->valueint : 0;
    cJSON *p = cJSON_CreateObject();
    cJSON *iv = cJSON_AddNumberToObject(p, "i", 0);
    double sum = 0;
    for (int i = 0; i < count; i++) {
        cJSON_SetNumberValue(iv, i);
        pl_action call = {PL_ACTION_VERSION, "tool", p, NULL, 0, NULL};
        pl_step *res = NULL;
        double t0 = g_lat ? now_s() : 0;
        int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        if (st) {
            cJSON_Delete(p);
            return st;
        }
        if (g_lat && g_nlat < (size_t)count)
            g_lat[g_nlat++] = now_s() - t0;
        if (g_turn.out >= 0 && (++g_turn.pending == TURN || i + 1 == count))
            hand_over();
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                          "i");
        sum += cJSON_IsNumber(v) ? v->valuedouble : 0;
        pl_step_free(res);
    }
    cJSON_Delete(p);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "sum", sum);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* W5's agent: one turn.  Reads its whole ledger, as a model policy does to
 * build its conversation, and calls the tool until it has K results. */
static int bench_agent(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    /* each turn adds a call and its result; the last one is read */
    size_t n = pl_steps_count(l);
    int results = (int)(n / 2);
    bool read = !n || pl_step_payload(pl_steps_at(l, n - 1));
    if (results + 1 >= (cJSON_IsNumber(k) ? k->valueint : 1))
        return pl_steps_add_text(out, NULL, read ? "done" : "unread");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "i", results);
    st = pl_steps_add_call(out, "tool", p);
    cJSON_Delete(p);
    return st;
}

/* W5's root: the agent under loop + invoke_action. */
static int bench_agent_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                            void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const char *tools[] = {"tool"};
    pl_decorator decos[2];
    pl_decorator_loop(&decos[0], cJSON_IsNumber(k) ? (unsigned)k->valueint : 1);
    pl_decorator_invoke_action(&decos[1]);
    pl_action call = PL_ACTION_INIT;
    call.policy = "agent";
    call.payload = a->payload;
    call.actions = tools;
    call.n_actions = 1;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, decos, 2);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

static int g_kill_at; /* W2 */

static void w2_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_CALL_STARTED && g_first_exec == 0)
        g_first_exec = now_s();
}

pl_registry *make_registry(bool killer)
{
    pl_registry *reg;
    if (pl_registry_new(&reg))
        die("registry");
    if (pl_registry_add_fn(reg, "tool", bench_tool,
                           killer ? &g_kill_at : NULL) ||
        pl_registry_add_fn(reg, "root", bench_root, NULL) ||
        pl_registry_add_fn(reg, "agent", bench_agent, NULL) ||
        pl_registry_add_fn(reg, "agent_root", bench_agent_root, NULL))
        die("registry");
    return reg;
}

static uint64_t g_commits;

static void count_commits(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_COMMIT)
        g_commits++;
}

pl_engine *open_engine(const char *path, pl_registry *reg, pl_durability d,
                       pl_event_fn fn)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = d;
    o.on_event = fn;
    pl_engine *e;
    if (pl_engine_open(&e, path, reg, &o))
        die("open");
    return e;
}

static int start_run(pl_engine *e, int n, const char *run_id)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n", n);
    pl_action root = {PL_ACTION_VERSION, "root", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = run_id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &root, &ro);
    cJSON_Delete(p);
    if (!st && o->status != PL_RUN_COMPLETED)
        st = o->error ? o->error : PL_EPOLICY;
    pl_outcome_free(o);
    return st;
}

/* ---- floors: raw LMDB --------------------------------------------------------- */

typedef struct floor_arg {
    pl_durability mode;
    int n; /* commits per thread */
    int threads;
    bool call; /* commit a call's records each time, not one */
} floor_arg;

typedef struct floor_res {
    double per_record_s; /* wall time / commits */
    double records_per_s;
} floor_res;

static MDB_env *raw_env(const char *path, pl_durability mode)
{
    MDB_env *env;
    mdb_env_create(&env);
    mdb_env_set_mapsize(env, (size_t)1 << 30);
    mdb_env_set_maxdbs(env, 4);
    unsigned flags = MDB_NOSUBDIR | MDB_NOTLS |
                     (mode == PL_DURABILITY_PROCESS ? MDB_NOSYNC : 0);
    if (mdb_env_open(env, path, flags, 0600)) {
        fprintf(stderr, "pl-bench: cannot open raw LMDB at %s\n", path);
        _exit(1);
    }
    return env;
}

/* A fresh raw LMDB store in the bench directory, with one database. */
MDB_env *raw_open(const char *name, pl_durability mode, MDB_dbi *dbi)
{
    char path[1100];
    path_in(path, sizeof path, name);
    remove_store(path);
    MDB_env *env = raw_env(path, mode);
    MDB_txn *txn;
    if (mdb_txn_begin(env, NULL, 0, &txn) ||
        mdb_dbi_open(txn, "floor", MDB_CREATE, dbi) || mdb_txn_commit(txn)) {
        fprintf(stderr, "pl-bench: cannot create raw LMDB at %s\n", path);
        _exit(1);
    }
    return env;
}

void raw_close(MDB_env *env, const char *name)
{
    char path[1100];
    path_in(path, sizeof path, name);
    mdb_env_close(env);
    remove_store(path);
}

/*
 * The records W1's engine commits for one call, by size: the caller's
 * action_call and its action_result, into which the tool's one step, the
 * result, is folded.
 */
static const size_t call_record_sizes[] = {80, 133};

/*
 * Make writer id's commits from .. from+n-1: each one record of 160 B, or with
 * call, a call's records.  A lone writer's keys come in order, so it
 * puts them with MDB_APPEND, as the engine puts a run's steps: appending
 * fills pages to the end and writes a commit's pages in fewer, longer
 * writes, which on a synced commit is worth 3-6% here.  Writers that
 * share the database interleave their keys and put them the plain way.
 */
void raw_commits(MDB_env *env, MDB_dbi dbi, int id, int from, int n, bool call,
                 bool alone)
{
    unsigned put_flags = alone ? MDB_APPEND : 0;
    char val[200];
    memset(val, 'v', sizeof val);
    size_t one = 160;
    const size_t *sizes = call ? call_record_sizes : &one;
    int per_commit = call ? (int)(sizeof call_record_sizes /
                                  sizeof call_record_sizes[0])
                          : 1;
    for (int i = from; i < from + n; i++) {
        MDB_txn *txn;
        if (mdb_txn_begin(env, NULL, 0, &txn))
            goto fail;
        for (int r = 0; r < per_commit; r++) {
            char key[32];
            int kl = snprintf(key, sizeof key, "%04d-%012d%.*s", id, i, r,
                              "abc");
            MDB_val k = {(size_t)kl, key}, v = {sizes[r], val};
            if (mdb_put(txn, dbi, &k, &v, put_flags)) {
                mdb_txn_abort(txn);
                goto fail;
            }
        }
        if (mdb_txn_commit(txn))
            goto fail;
    }
    return;
fail:
    fprintf(stderr, "pl-bench: raw put failed\n");
    _exit(1);
}

typedef struct raw_thread {
    MDB_env *env;
    MDB_dbi dbi;
    int n;
    int id;
    bool call;
    bool alone; /* the only writer */
} raw_thread;

static void *raw_puts(void *arg)
{
    raw_thread *t = arg;
    raw_commits(t->env, t->dbi, t->id, 0, t->n, t->call, t->alone);
    return NULL;
}

/* Run fn on each of @p threads arguments (args, @p size bytes apart), on
 * threads of their own, or on this one when there is one, each making @p n
 * records: the floor's records per second, and time per record, to @p r. */
static void timed_threads(void *(*fn)(void *), void *args, size_t size,
                          int threads, int n, floor_res *r)
{
    pthread_t th[256];
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        void *arg = (char *)args + (size_t)i * size;
        if (threads == 1)
            fn(arg);
        else
            pthread_create(&th[i], NULL, fn, arg);
    }
    for (int i = 0; threads > 1 && i < threads; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    double total = (double)n * threads;
    r->per_record_s = dt / total;
    r->records_per_s = total / dt;
}

static void floor_puts(const void *varg, void *vres)
{
    const floor_arg *a = varg;
    floor_res *r = vres;
    MDB_dbi dbi;
    MDB_env *env = raw_open("floor.mdb", a->mode, &dbi);
    raw_thread args[256];
    int threads = a->threads < 1 ? 1 : a->threads > 256 ? 256 : a->threads;
    for (int i = 0; i < threads; i++)
        args[i] = (raw_thread){env, dbi, a->n, i, a->call, threads == 1};
    timed_threads(raw_puts, args, sizeof *args, threads, a->n, r);
    raw_close(env, "floor.mdb");
}

typedef struct scan_res {
    double open_read_s; /* open the env and read n records */
    double records_per_s;
} scan_res;

/* Write n records (no sync), then in a child: open and scan them. */
static void floor_scan_child(const void *varg, void *vres)
{
    const int *n = varg;
    scan_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "scan.mdb");
    double t0 = now_s();
    MDB_env *env = raw_env(path, PL_DURABILITY_SYNC);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    mdb_dbi_open(txn, "scan", 0, &dbi);
    mdb_cursor_open(txn, dbi, &cur);
    int count = 0;
    size_t bytes = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        bytes += v.mv_size + ((const unsigned char *)v.mv_data)[0];
        count++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    double dt = now_s() - t0;
    mdb_env_close(env);
    r->open_read_s = dt;
    r->records_per_s = count / dt;
    if (count != *n || !bytes)
        _exit(1);
}

/* Write n records (no sync) for floor_scan_child(). */
static void floor_scan_write_child(const void *varg, void *vres)
{
    const int *n = varg;
    (void)vres;
    char path[1100];
    path_in(path, sizeof path, "scan.mdb");
    MDB_env *env = raw_env(path, PL_DURABILITY_PROCESS);
    MDB_txn *txn;
    MDB_dbi dbi;
    mdb_txn_begin(env, NULL, 0, &txn);
    mdb_dbi_open(txn, "scan", MDB_CREATE, &dbi);
    char val[160];
    memset(val, 'v', sizeof val);
    for (int i = 0; i < *n; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "%012d", i);
        MDB_val k = {(size_t)kl, key}, v = {sizeof val, val};
        mdb_put(txn, dbi, &k, &v, MDB_APPEND);
    }
    if (mdb_txn_commit(txn))
        _exit(1);
    mdb_env_close(env);
}

/* The records are written in a child too: the parent's heap would grow,
 * and every later child would inherit it in its peak RSS. */
static int floor_scan(int n, scan_res *r)
{
    char path[1100];
    path_in(path, sizeof path, "scan.mdb");
    remove_store(path);
    char done;
    int rc = in_child(floor_scan_write_child, &n, &done, sizeof done);
    if (!rc)
        rc = in_child(floor_scan_child, &n, r, sizeof *r);
    remove_store(path);
    return rc;
}

/* ---- W1: sequential ------------------------------------------------------------- */

/*
 * In sync and group mode the engine's run and its floors take turns at the
 * disk: the run hands over every TURN calls to a second process, which
 * makes as many commits to the floor and to rawcall (each going first in
 * turn) and hands back.  A synced commit costs what the disk's flush costs
 * at that moment, and on a shared host that drifts by tens of percent
 * over seconds; runs of 10,000 calls one after another (~2 s each) would
 * put the drift into the ratio, turns of ~20 ms put it into all three.
 * The engine's time leaves out the time it waited.  Process mode is bound
 * by CPU and caches instead, which turns would empty for each other every
 * few hundred microseconds; it runs whole runs back to back.
 */
typedef struct w1_turns {
    int to_floors[2]; /* run -> floors: commits to make (an int) */
    int to_run[2];    /* floors -> run: made them (a byte) */
} w1_turns;

typedef struct w1_arg {
    pl_durability mode;
    int n;
    const w1_turns *turns; /* sync, group: take turns with the floors */
} w1_arg;

typedef struct turns_res {
    double floor_s, rawcall_s; /* time spent committing to each */
    int n;                     /* commits made to each */
} turns_res;

/* The floors' side of the turns: floor and rawcall stores, fresh. */
static void floors_in_turns(const void *varg, void *vres)
{
    const w1_arg *a = varg;
    turns_res *r = vres;
    signal(SIGPIPE, SIG_IGN);
    close(a->turns->to_floors[1]);
    close(a->turns->to_run[0]);
    MDB_dbi d1, dc;
    MDB_env *e1 = raw_open("floor.mdb", a->mode, &d1);
    MDB_env *ec = raw_open("rawcall.mdb", a->mode, &dc);
    int n;
    for (int turn = 0;
         read(a->turns->to_floors[0], &n, sizeof n) == (ssize_t)sizeof n;
         turn++) {
        for (int j = 0; j < 2; j++) {
            bool call = (turn + j) % 2;
            double t0 = now_s();
            raw_commits(call ? ec : e1, call ? dc : d1, 0, r->n, n, call, true);
            *(call ? &r->rawcall_s : &r->floor_s) += now_s() - t0;
        }
        r->n += n;
        char done = 1;
        if (write(a->turns->to_run[1], &done, 1) != 1)
            break;
    }
    raw_close(e1, "floor.mdb");
    raw_close(ec, "rawcall.mdb");
}

typedef struct w1_res {
    double calls_per_s;
    double per_call_s;
    double p50_s, p95_s;
    long peak_rss_kb;
    long anon_rss_kb;
    double commits_per_call;
    /* on PostgreSQL, what one call more costs: round trips to the server
     * and statements (a run of 2k calls less one of k) */
    double round_trips_per_call, statements_per_call;
    double wait_per_call_s; /* time in round trips, a call (the timed run) */
} w1_res;

static void w1_child(const void *varg, void *vres)
{
    const w1_arg *a = varg;
    w1_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w1.db");
    remove_store(path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, a->mode, NULL);
    g_lat = calloc((size_t)a->n, sizeof *g_lat);
    g_nlat = 0;
    if (a->turns) {
        signal(SIGPIPE, SIG_IGN); /* a gone partner is an error, said */
        close(a->turns->to_floors[0]);
        close(a->turns->to_run[1]);
        g_turn.out = a->turns->to_floors[1];
        g_turn.in = a->turns->to_run[0];
    }
    pl__pg_counts w0, w1;
    pl__pg_counts_get(&w0);
    double t0 = now_s();
    if (start_run(e, a->n, "w1"))
        die("W1 run");
    double dt = now_s() - t0 - g_turn.paused;
    pl__pg_counts_get(&w1);
    r->wait_per_call_s = (double)(w1.wait_ns - w0.wait_ns) / 1e9 / a->n;
    if (a->turns) { /* the floors' process ends at end of file */
        close(g_turn.out);
        close(g_turn.in);
        g_turn.out = g_turn.in = -1;
    }
    r->calls_per_s = a->n / dt;
    r->per_call_s = dt / a->n;
    r->p50_s = percentile(g_lat, g_nlat, 0.50);
    r->p95_s = percentile(g_lat, g_nlat, 0.95);
    r->peak_rss_kb = status_kb("VmHWM");
    r->anon_rss_kb = status_kb("RssAnon");
    free(g_lat);
    g_lat = NULL;
    pl_engine_close(e);
    remove_store(path);

    /* commits per call, counted on a small separate run */
    e = open_engine(path, reg, a->mode, count_commits);
    g_commits = 0;
    int n = a->n < 200 ? a->n : 200;
    if (start_run(e, n, "w1-commits"))
        die("W1 commit count");
    r->commits_per_call = (double)(g_commits - 1) / n; /* minus the end */
    if (g_pg_uri) {
        pl__pg_counts c0, c1, c2;
        pl__pg_counts_get(&c0);
        if (start_run(e, n / 2, "w1-rt-half"))
            die("W1 round trips");
        pl__pg_counts_get(&c1);
        if (start_run(e, n, "w1-rt-whole"))
            die("W1 round trips");
        pl__pg_counts_get(&c2);
        double k = n - n / 2;
        r->round_trips_per_call = ((double)(c2.round_trips - c1.round_trips) -
                                   (double)(c1.round_trips - c0.round_trips)) /
                                  k;
        r->statements_per_call = ((double)(c2.statements - c1.statements) -
                                  (double)(c1.statements - c0.statements)) /
                                 k;
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
}

/* One repetition of W1 in turns: the run and the floors, side by side. */
static int w1_turns_rep(const w1_arg *a, w1_res *run, turns_res *floors)
{
    w1_turns t;
    if (pipe(t.to_floors))
        return -1;
    if (pipe(t.to_run)) {
        close(t.to_floors[0]);
        close(t.to_floors[1]);
        return -1;
    }
    w1_arg ta = *a;
    ta.turns = &t;
    int from_floors, from_run;
    pid_t fpid = child_start(floors_in_turns, &ta, floors, sizeof *floors,
                             &from_floors);
    pid_t rpid = fpid < 0
                     ? -1
                     : child_start(w1_child, &ta, run, sizeof *run, &from_run);
    /* only the two children hold the pipes now: either one's end is the
     * other's end of file */
    close(t.to_floors[0]);
    close(t.to_floors[1]);
    close(t.to_run[0]);
    close(t.to_run[1]);
    int rc = rpid < 0 ? -1 : child_finish(rpid, from_run, run, sizeof *run);
    if (fpid >= 0 &&
        child_finish(fpid, from_floors, floors, sizeof *floors) == 0 &&
        floors->n == a->n)
        return rc;
    return -1;
}

/*
 * One repetition of W1: the run, and per record the floor's and rawcall's
 * time.  Sync and group take turns; process runs the three back to back,
 * each first in turn (k).
 */
static int w1_rep(const w1_arg *a, int k, w1_res *run, double *floor_s,
                  double *rawcall_s)
{
    if (a->mode != PL_DURABILITY_PROCESS) {
        turns_res tr;
        if (w1_turns_rep(a, run, &tr))
            return -1;
        *floor_s = tr.floor_s / a->n;
        *rawcall_s = tr.rawcall_s / a->n;
        return 0;
    }
    floor_arg fa = {a->mode, a->n, 1, false}; /* the same tree size */
    floor_arg fac = {a->mode, a->n, 1, true};
    floor_res fr, frc;
    for (int j = 0; j < 3; j++) {
        int rc;
        switch ((k + j) % 3) {
        case 0: rc = in_child(w1_child, a, run, sizeof *run); break;
        case 1: rc = in_child(floor_puts, &fa, &fr, sizeof fr); break;
        default: rc = in_child(floor_puts, &fac, &frc, sizeof frc);
        }
        if (rc)
            return -1;
    }
    *floor_s = fr.per_record_s;
    *rawcall_s = frc.per_record_s;
    return 0;
}

/* ---- W2: recovery ---------------------------------------------------------------- */

typedef struct w2_arg {
    int recorded; /* calls done before the kill */
    int total;
} w2_arg;

typedef struct w2_res {
    double to_first_exec_s;
    double to_done_s;
    uint64_t served, executed;
} w2_res;

static void w2_crash_child(const void *varg, void *vres)
{
    const w2_arg *a = varg;
    (void)vres;
    char path[1100];
    path_in(path, sizeof path, "w2.db");
    g_kill_at = a->recorded + 1; /* die inside the next call */
    pl_registry *reg = make_registry(true);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, NULL);
    start_run(e, a->total, "w2");
    _exit(3); /* never reached: the tool kills the process */
}

static void w2_recover_child(const void *varg, void *vres)
{
    (void)varg;
    w2_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w2.db");
    double t0 = now_s(); /* the restart */
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, w2_event);
    pl_outcome *o = NULL;
    g_first_exec = 0;
    if (pl_run_continue(&o, e, "w2", NULL) || o->status != PL_RUN_COMPLETED)
        die("W2 recovery");
    double t1 = now_s();
    r->to_first_exec_s = g_first_exec - t0;
    r->to_done_s = t1 - t0;
    r->served = o->calls_served;
    r->executed = o->calls_executed;
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int w2(const w2_arg *a, w2_res *r)
{
    char path[1100];
    path_in(path, sizeof path, "w2.db");
    remove_store(path);
    w2_res dummy;
    /* the crash: a real SIGKILL, so in_child reports failure */
    if (in_child(w2_crash_child, a, &dummy, sizeof dummy) == 0)
        return -1;
    int rc = in_child(w2_recover_child, a, r, sizeof *r);
    remove_store(path);
    return rc;
}

/* ---- W3: concurrency --------------------------------------------------------------- */

typedef struct w3_arg {
    pl_durability mode;
    int runs, calls, threads;
    bool pool; /* runs as tasks of a pl_pool of `threads` threads */
} w3_arg;

typedef struct w3_res {
    double calls_per_s;
    double round_trips_per_call; /* on PostgreSQL */
} w3_res;

typedef struct w3_pool {
    pl_engine *e;
    const w3_arg *a;
    atomic_int next;
    atomic_int failed;
} w3_pool;

static void *w3_worker(void *arg)
{
    w3_pool *p = arg;
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->a->runs)
            return NULL;
        char id[32];
        snprintf(id, sizeof id, "w3-%d", i);
        if (start_run(p->e, p->a->calls, id)) {
            fprintf(stderr, "pl-bench: W3 run %s: %s\n", id, pl_errmsg());
            atomic_store(&p->failed, 1);
        }
    }
}

static void w3_task(pl_engine *e, void *user)
{
    w3_pool *p = user;
    int i = atomic_fetch_add(&p->next, 1);
    char id[32];
    snprintf(id, sizeof id, "w3-%d", i);
    if (start_run(e, p->a->calls, id)) {
        fprintf(stderr, "pl-bench: W3 run %s: %s\n", id, pl_errmsg());
        atomic_store(&p->failed, 1);
    }
}

/* The runs as tasks of a pool: a.threads threads, each carrying its share. */
static void w3_on_pool(pl_engine *e, const w3_arg *a, w3_pool *state)
{
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = (unsigned)a->threads;
    po.tasks_per_thread = (unsigned)((a->runs + a->threads - 1) / a->threads);
    pl_pool *pool;
    if (pl_pool_new(&pool, e, &po))
        die("W3 pool");
    for (int i = 0; i < a->runs; i++)
        if (pl_pool_submit(pool, w3_task, state))
            die("W3 pool");
    pl_pool_free(pool);
}

static void w3_child(const void *varg, void *vres)
{
    const w3_arg *a = varg;
    w3_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w3.db");
    remove_store(path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, a->mode, NULL);
    w3_pool pool = {e, a, 0, 0};
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    pthread_t th[256];
    int threads = a->threads > 256 ? 256 : a->threads;
    double t0 = now_s();
    if (a->pool) {
        w3_on_pool(e, a, &pool);
    } else {
        for (int i = 0; i < threads; i++)
            pthread_create(&th[i], NULL, w3_worker, &pool);
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
    }
    double dt = now_s() - t0;
    if (atomic_load(&pool.failed))
        die("W3");
    double calls = (double)a->runs * a->calls;
    r->calls_per_s = calls / dt;
    pl__pg_counts_get(&c1);
    r->round_trips_per_call = (double)(c1.round_trips - c0.round_trips) / calls;
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
}

/* ---- W4: replay ---------------------------------------------------------------------- */

typedef struct w4_arg {
    int n;
} w4_arg;

typedef struct w4_res {
    double steps_per_s;
    double seconds;
    uint64_t steps;
    long peak_rss_kb;
    long anon_rss_kb;
} w4_res;

static void w4_build_child(const void *varg, void *vres)
{
    const w4_arg *a = varg;
    (void)vres;
    char path[1100];
    path_in(path, sizeof path, "w4.db");
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    if (start_run(e, a->n, "w4"))
        die("W4 build");
    pl_engine_close(e);
    pl_registry_free(reg);
}

static void w4_replay_child(const void *varg, void *vres)
{
    (void)varg;
    w4_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w4.db");
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_SYNC, NULL);
    pl_outcome *o = NULL;
    long anon0 = status_kb("RssAnon");
    double t0 = now_s();
    if (pl_run_continue(&o, e, "w4", NULL) || o->status != PL_RUN_COMPLETED ||
        o->calls_executed != 0)
        die("W4 replay");
    double dt = now_s() - t0;
    r->steps = o->steps_replayed;
    r->seconds = dt;
    r->steps_per_s = (double)o->steps_replayed / dt;
    r->peak_rss_kb = status_kb("VmHWM");
    r->anon_rss_kb = status_kb("RssAnon") - anon0; /* the replay's own */
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int w4(int n, w4_res *r)
{
    char path[1100];
    path_in(path, sizeof path, "w4.db");
    remove_store(path);
    w4_arg a = {n};
    w4_res dummy;
    int rc = in_child(w4_build_child, &a, &dummy, sizeof dummy);
    if (!rc)
        rc = in_child(w4_replay_child, &a, r, sizeof *r);
    remove_store(path);
    return rc;
}

/* ---- W5: agent turns -------------------------------------------------------------- */

typedef struct w5_res {
    double us_per_turn;
} w5_res;

static void w5_child(const void *varg, void *vres)
{
    const int *turns = varg;
    w5_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w5.db");
    remove_store(path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "turns", *turns);
    pl_action root = PL_ACTION_INIT;
    root.policy = "agent_root";
    root.payload = p;
    pl_outcome *o = NULL;
    double t0 = now_s();
    if (pl_run_start(&o, e, &root, NULL) || o->status != PL_RUN_COMPLETED ||
        o->calls_executed != (uint64_t)*turns)
        die("W5 run");
    r->us_per_turn = (now_s() - t0) * 1e6 / *turns;
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
}

/* ---- W5 over HTTP: an agent against a loopback model server ------------------------ */

typedef struct pl_buf_like {
    char *data;
    size_t len, cap;
} pl_buf_like;

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    pl_buf_like *b = user;
    size_t len = size * n;
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *g = realloc(b->data, cap);
        if (!g)
            return 0;
        b->data = g;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, len);
    b->len += len;
    b->data[b->len] = '\0';
    return len;
}

/* The bare loop: the same K + 1 requests with libcurl and cJSON alone, on
 * one keep-alive handle, the conversation kept in memory; each turn runs
 * the tool's work (the same ~100 B result) and sends it back. */
static double bare_loop(int turns)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions",
             g_srv.port);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: "
                                                   "application/json");
    pl_buf_like b = {0};
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", "bench");
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", "{\"turns\":1}");
    cJSON_AddItemToArray(msgs, u);
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{"
                               "\"name\":\"tool\",\"parameters\":{\"type\":"
                               "\"object\"}}}]");
    cJSON_AddItemToObject(req, "tools", tools);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    atomic_store(&g_srv.tools, turns);
    double t0 = now_s();
    for (int t = 0; t <= turns; t++) {
        char *body = cJSON_PrintUnformatted(req);
        b.len = 0;
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(c) != CURLE_OK)
            die("W5 bare loop");
        free(body);
        cJSON *r = cJSON_Parse(b.data);
        cJSON *m = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "choices"),
                               0),
            "message");
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        cJSON *call = cJSON_GetArrayItem(calls, 0);
        if (!call) {
            cJSON_Delete(r);
            break;
        }
        cJSON *args = cJSON_Parse(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(call, "function"), "arguments")
                ->valuestring);
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(args, "i");
        cJSON *res = cJSON_CreateObject();
        cJSON_AddNumberToObject(res, "i",
                                cJSON_IsNumber(i) ? i->valuedouble : -1);
        cJSON_AddStringToObject(res, "status", "ok");
        cJSON_AddStringToObject(res, "message",
                                "the quick brown fox jumps over the lazy dog");
        cJSON *items = cJSON_AddArrayToObject(res, "items");
        for (int k = 1; k <= 3; k++)
            cJSON_AddItemToArray(items, cJSON_CreateNumber(k));
        char *out = cJSON_PrintUnformatted(res);
        cJSON *tm = cJSON_CreateObject();
        cJSON_AddStringToObject(tm, "role", "tool");
        cJSON_AddStringToObject(tm, "tool_call_id",
                                cJSON_GetObjectItemCaseSensitive(call, "id")
                                    ->valuestring);
        cJSON_AddStringToObject(tm, "content", out);
        cJSON_DetachItemViaPointer(
            r, cJSON_GetObjectItemCaseSensitive(
                   cJSON_GetArrayItem(
                       cJSON_GetObjectItemCaseSensitive(r, "choices"), 0),
                   "message"));
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddItemToArray(msgs, tm);
        free(out);
        cJSON_Delete(res);
        cJSON_Delete(args);
        cJSON_Delete(r);
    }
    double dt = now_s() - t0;
    cJSON_Delete(req);
    free(b.data);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return dt;
}

/* The engine's agent: "model" (the LLM policy against the loopback
 * server) under loop(K + 1) + invoke_action with the tool. */
static int bench_llm_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                          void *user)
{
    (void)user;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "turns");
    const char *tools[] = {"tool"};
    pl_decorator decos[2];
    pl_decorator_loop(&decos[0],
                      cJSON_IsNumber(k) ? (unsigned)k->valueint + 1 : 1);
    pl_decorator_invoke_action(&decos[1]);
    pl_action call = PL_ACTION_INIT;
    call.policy = "model";
    call.payload = a->payload;
    call.actions = tools;
    call.n_actions = 1;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, decos, 2);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

typedef struct w5h_arg {
    int turns;
    pl_durability mode;
} w5h_arg;

typedef struct w5h_res {
    double engine_us, bare_us; /* per turn */
    double commits;            /* per turn */
    double floor_us;           /* one synced commit of the W1 floor */
    double replay_us;          /* per replayed turn, the agent's loop */
    double replay_wall_us;     /* the same on the wall clock */
    double replay_total_us;    /* the whole continue, per turn */
    long replay_requests;      /* requests the replay made */
    double bytes;              /* store pages in use per turn */
} w5h_res;

static pl_registry *w5h_registry(void)
{
    pl_registry *reg = make_registry(false);
    char url[96];
    snprintf(url, sizeof url, "openai+http://127.0.0.1:%d/v1#bench",
             g_srv.port);
    if (pl_llm_register(reg, "model", url, NULL, NULL) ||
        pl_registry_add_fn(reg, "llm_root", bench_llm_root, NULL))
        die("W5 registry");
    return reg;
}

/* The process that dies: when the model's final answer is appended, its
 * exchange is durable and the call's result is not. */
static void w5h_die_at_answer(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STEP_APPENDED && ev->step_type == PL_STEP_TEXT &&
        ev->policy && strcmp(ev->policy, "model") == 0)
        _exit(0);
}

/* The replay's clocks at its first and last replayed step of the agent:
 * the wall clock, and the replaying thread's CPU time (what the replay
 * costs, whatever else the host runs meanwhile). */
static double g_replay_first, g_replay_last, g_replay_cpu0, g_replay_cpu1;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void w5h_replayed(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_STEP_REPLAYED && strcmp(ev->path, "0.0") == 0) {
        g_replay_last = now_s();
        g_replay_cpu1 = thread_cpu_s();
        if (g_replay_first == 0) {
            g_replay_first = g_replay_last;
            g_replay_cpu0 = g_replay_cpu1;
        }
    }
}

/* Run "agent-r" in a child process that dies at the model's final answer,
 * so that finishing it replays the model's loop turn by turn. */
static void w5h_crashed_run(const char *path, const w5h_arg *a,
                            const pl_action *root)
{
    pid_t pid = fork();
    if (pid < 0)
        die("W5 fork");
    if (pid == 0) {
        pl_registry *reg = w5h_registry();
        pl_engine *e = open_engine(path, reg, a->mode, w5h_die_at_answer);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "agent-r";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, root, &ro);
        _exit(3); /* it should have died before its end */
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        die("W5 crashed run");
}

static void w5h_child(const void *varg, void *vres)
{
    const w5h_arg *a = varg;
    w5h_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w5h.db");
    remove_store(path);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    srv_start();
    pl_registry *reg = w5h_registry();
    /* the bare loop first, then the engine */
    r->bare_us = bare_loop(a->turns) * 1e6 / a->turns;
    g_commits = 0;
    pl_engine *e = open_engine(path, reg, a->mode, count_commits);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "turns", a->turns);
    pl_action root = PL_ACTION_INIT;
    root.policy = "llm_root";
    root.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "agent";
    pl_outcome *o = NULL;
    atomic_store(&g_srv.tools, a->turns);
    double t0 = now_s();
    if (pl_run_start(&o, e, &root, &ro) || o->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "pl-bench: W5: %s\n",
                o && o->reason ? o->reason : pl_errmsg());
        die("W5 agent run");
    }
    r->engine_us = (now_s() - t0) * 1e6 / a->turns;
    r->commits = (double)g_commits / a->turns;
    pl_outcome_free(o);
    pl_engine_close(e);
    /* the store as the run left it, before the replay's run adds to it */
    MDB_env *env = raw_env(path, PL_DURABILITY_PROCESS);
    MDB_envinfo info;
    MDB_stat ms;
    mdb_env_info(env, &info);
    mdb_env_stat(env, &ms);
    r->bytes = (double)(info.me_last_pgno + 1) * ms.ms_psize / a->turns;
    mdb_env_close(env);
    pl_registry_free(reg); /* closes its connection: the server serves one */

    /* the replay: the same agent, crashed at its final answer, finished;
     * every turn's exchange and tool call is served from the ledger */
    atomic_store(&g_srv.tools, a->turns);
    w5h_crashed_run(path, a, &root);
    reg = w5h_registry();
    e = open_engine(path, reg, a->mode, w5h_replayed);
    long before = atomic_load(&g_srv.requests);
    g_replay_first = g_replay_last = 0;
    t0 = now_s();
    if (pl_run_continue(&o, e, "agent-r", NULL) ||
        o->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "pl-bench: W5 replay: %s\n",
                o && o->reason ? o->reason : pl_errmsg());
        die("W5 replay");
    }
    r->replay_total_us = (now_s() - t0) * 1e6 / (a->turns + 1);
    /* from the first replayed step of the agent to its last: the turns
     * alone, without the continue's own commits (claiming the run, the
     * results past the crash) */
    r->replay_us = (g_replay_cpu1 - g_replay_cpu0) * 1e6 / a->turns;
    r->replay_wall_us = (g_replay_last - g_replay_first) * 1e6 / a->turns;
    r->replay_requests = atomic_load(&g_srv.requests) - before;
    pl_outcome_free(o);
    pl_engine_close(e);
    cJSON_Delete(p);
    pl_registry_free(reg);
    srv_stop();
    remove_store(path);
    /* the W1 floor, a synced commit of one record, in the same run */
    r->floor_us = 0;
    if (a->mode == PL_DURABILITY_SYNC) {
        floor_arg fa = {PL_DURABILITY_SYNC, 200, 1, false};
        floor_res fr;
        floor_puts(&fa, &fr);
        r->floor_us = fr.per_record_s * 1e6;
    }
}

/* ---- reporting -------------------------------------------------------------------- */

cJSON *g_json;
bool g_print_json;

void jnum(cJSON *o, const char *k, double v)
{
    cJSON_AddNumberToObject(o, k, isfinite(v) ? v : 0);
}

static const pl_durability modes[] = {PL_DURABILITY_SYNC, PL_DURABILITY_GROUP,
                                      PL_DURABILITY_PROCESS};

void say(const char *fmt, ...)
{
    if (g_print_json)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* ---- goals: the figures the project aims for, checked for the reader ---------------- */

typedef struct goal {
    char what[96];
    double value;
    char unit[8];
    bool at_most; /* the goal is a ceiling (else a floor) */
    double target;
    char noise[64]; /* "" or why the figure is not judged (drift_end) */
} goal;

static goal g_goals[40];
static int g_ngoals;

/* A goal for a timed figure, @p noise "" or the drift_end() note of the
 * workload that measured it: a noisy figure is shown, not judged. */
void add_goal_noted(const char *what, double value, const char *unit,
                    bool at_most, double target, const char *noise)
{
    if (g_ngoals < (int)(sizeof g_goals / sizeof *g_goals)) {
        goal *gl = &g_goals[g_ngoals++];
        snprintf(gl->noise, sizeof gl->noise, "%s", noise ? noise : "");
        snprintf(gl->what, sizeof gl->what, "%s", what);
        snprintf(gl->unit, sizeof gl->unit, "%s", unit);
        gl->value = value;
        gl->at_most = at_most;
        gl->target = target;
    }
}

void add_goal(const char *what, double value, const char *unit, bool at_most,
              double target)
{
    add_goal_noted(what, value, unit, at_most, target, NULL);
}

/* Print the goals met and missed in this run (figures, not a test). */
static void report_goals(bool quick)
{
    if (!g_ngoals)
        return;
    say("\nGoals%s:\n", quick ? " (quick sizes; the goals are set for the "
                                "full ones)"
                              : "");
    cJSON *arr = cJSON_AddArrayToObject(g_json, "goals");
    for (int i = 0; i < g_ngoals; i++) {
        const goal *gl = &g_goals[i];
        bool met = gl->at_most ? gl->value <= gl->target
                               : gl->value >= gl->target;
        char verdict[96];
        snprintf(verdict, sizeof verdict, "%s%s",
                 gl->noise[0] ? "not judged: "
                 : met        ? "met"
                              : "MISSED",
                 gl->noise);
        say("  %-44s %8.2f%-3s %s %6.2f%-3s %s\n", gl->what, gl->value,
            gl->unit, gl->at_most ? "<=" : ">=", gl->target, gl->unit, verdict);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "goal", gl->what);
        if (gl->noise[0])
            cJSON_AddStringToObject(o, "not_judged", gl->noise);
        jnum(o, "value", gl->value);
        jnum(o, "target", gl->target);
        cJSON_AddBoolToObject(o, "at_most", gl->at_most);
        cJSON_AddBoolToObject(o, "met", met);
        cJSON_AddItemToArray(arr, o);
    }
}

/* ---- noise: the floor's drift over a workload ----------------------------------- */

/*
 * A workload's figures stand against a floor measured in the same run;
 * when the host's speed changes while the workload runs (other jobs come
 * and go), the floor moves and the figures with it.  So the floor is
 * probed before a workload and after it: PROBE_REPS short measurements
 * of PROBE_N commits each (the workload's floor: raw LMDB, or on
 * PostgreSQL the libpq INSERT), and the medians compared.  A move larger
 * than the probes' own spread (the larger relative range of the two sets
 * of repetitions) and than NOISE_MIN marks the workload's figures: "floor
 * moved 23%: noisy host" beside them, and their goals not judged; so does
 * a spread above UNSTEADY_MAX ("floor unsteady (spread 60%)"), a floor
 * that does not hold still for a second, before or after.
 */
#define PROBE_N 100
#define NOISE_MIN 0.05
#define UNSTEADY_MAX 0.25

static void pg_floor(const void *varg, void *vres);

/* Probe the floor: its time per commit, up to PROBE_REPS times. */
static int probe(pl_durability mode, double *out)
{
    floor_arg fa = {mode, PROBE_N, 1, false};
    int n = 0;
    for (int i = 0; i < PROBE_REPS; i++) {
        floor_res fr;
        if (!in_child(g_pg_uri ? pg_floor : floor_puts, &fa, &fr, sizeof fr))
            out[n++] = fr.per_record_s;
    }
    return n;
}

static double rel_range(double *v, int n)
{
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    double m = median(v, n);
    return m > 0 ? (hi - lo) / m : 0;
}

void drift_begin(drift *d, pl_durability mode)
{
    memset(d, 0, sizeof *d);
    d->mode = mode;
    d->nb = probe(mode, d->before);
}

/* Probe again; d->note says whether the floor moved (also in @p o). */
const char *drift_end(drift *d, cJSON *o)
{
    double after[PROBE_REPS];
    int na = probe(d->mode, after);
    if (!d->nb || !na)
        return d->note;
    double b = median(d->before, d->nb), a = median(after, na);
    double moved = b > 0 ? fabs(a - b) / b : 0;
    double sb = rel_range(d->before, d->nb), sa = rel_range(after, na);
    double spread = sb > sa ? sb : sa;
    if (moved > spread && moved > NOISE_MIN)
        snprintf(d->note, sizeof d->note, "floor moved %.0f%%: noisy host",
                 moved * 100);
    else if (spread > UNSTEADY_MAX)
        snprintf(d->note, sizeof d->note,
                 "floor unsteady (spread %.0f%%): noisy host", spread * 100);
    if (o) {
        jnum(o, "floor_probe_before_us", b * 1e6);
        jnum(o, "floor_probe_after_us", a * 1e6);
        jnum(o, "floor_probe_spread", spread);
        if (d->note[0])
            cJSON_AddStringToObject(o, "noise", d->note);
    }
    return d->note;
}

/* W1's floor holding a call's records, per mode and size. */
typedef struct w1_rawcall {
    double per_call_s;
    double of_floor;  /* its time / the floor's */
    double engine_of; /* the engine's time / its */
} w1_rawcall;

/* W1 in every mode and size, next to its floors; returns the failures. */
static int report_w1(bool quick)
{
    int failures = 0;
    w1_rawcall rawcall[3][2];
    bool have_rawcall[3][2] = {{false}};
    int w1_sizes_full[] = {1000, 10000}, w1_sizes_quick[] = {1000};
    int *w1_sizes = quick ? w1_sizes_quick : w1_sizes_full;
    int w1_n = quick ? 1 : 2;
    cJSON *jw1 = cJSON_AddArrayToObject(g_json, "w1_sequential");
    say("W1 sequential: one run, N calls of a tool returning ~100 B; floors "
        "measured in turns\n  with the run every %d calls (sync, group) or "
        "back to back (process)\n",
        TURN);
    say("  %-8s %6s %11s %9s %9s %9s %10s %9s %8s %8s\n", "mode", "N",
        "calls/s", "us/call", "p50 us", "p95 us", "floor us", "ratio",
        "commits", "peak MB");
    for (size_t m = 0; m < 3; m++) {
        for (int s = 0; s < w1_n; s++) {
            /* the medians of the repetitions are reported, so one burst of
             * disk noise moves none, and a ratio is the median of the
             * repetitions' own ratios, so the host's speed changing
             * between repetitions does not move it either */
            w1_arg a = {modes[m], w1_sizes[s], NULL};
            w1_res runs[REPS_MAX];
            double eng[REPS_MAX], flo[REPS_MAX], pair[REPS_MAX];
            double floc[REPS_MAX], of_floor[REPS_MAX], engine_of[REPS_MAX];
            bool short_runs = modes[m] == PL_DURABILITY_PROCESS || a.n <= 1000;
            int reps = g_reps * (short_runs ? SHORT_REPS : 1);
            int ok = 0;
            drift d;
            drift_begin(&d, modes[m]);
            for (int k = 0; k < reps; k++) {
                if (w1_rep(&a, k, &runs[ok], &flo[ok], &floc[ok]))
                    continue;
                eng[ok] = runs[ok].per_call_s;
                pair[ok] = eng[ok] / flo[ok];
                of_floor[ok] = floc[ok] / flo[ok];
                engine_of[ok] = eng[ok] / floc[ok];
                ok++;
            }
            drift_end(&d, NULL);
            if (!ok) {
                say("  %-8s %6d failed\n", pl_durability_name(modes[m]), a.n);
                failures++;
                continue;
            }
            double floor_s = median(flo, ok), eng_s = median(eng, ok);
            w1_res r = runs[0];
            for (int k = 0; k < ok; k++) /* the run with the median time */
                if (runs[k].per_call_s == eng_s)
                    r = runs[k];
            floor_res fr = {floor_s, 1 / floor_s};
            double ratio = median(pair, ok);
            w1_rawcall rcall = {median(floc, ok), median(of_floor, ok),
                                median(engine_of, ok)};
            rawcall[m][s] = rcall;
            have_rawcall[m][s] = true;
            say("  %-8s %6d %11.0f %9.1f %9.1f %9.1f %10.1f %8.2fx %8.2f "
                "%8.1f  %s\n",
                pl_durability_name(modes[m]), a.n, r.calls_per_s,
                r.per_call_s * 1e6, r.p50_s * 1e6, r.p95_s * 1e6,
                fr.per_record_s * 1e6, ratio, r.commits_per_call,
                (double)r.peak_rss_kb / 1024, d.note);
            char what[96];
            if (modes[m] != PL_DURABILITY_GROUP) {
                snprintf(what, sizeof what,
                         "W1 %s, N=%d: time per call / "
                         "floor",
                         pl_durability_name(modes[m]), a.n);
                add_goal_noted(what, ratio, "x", true,
                               modes[m] == PL_DURABILITY_SYNC ? 1.1 : 2.0,
                               d.note);
            }
            if (modes[m] == PL_DURABILITY_SYNC && s == w1_n - 1)
                add_goal("W1 sync: LMDB commits per call", r.commits_per_call,
                         "", true, 1.0);
            if (a.n == 10000) {
                snprintf(what, sizeof what, "W1 %s, N=10000: peak RSS",
                         pl_durability_name(modes[m]));
                add_goal(what, (double)r.peak_rss_kb / 1024, "MB", true, 10.0);
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "durability",
                                    pl_durability_name(modes[m]));
            jnum(o, "n", a.n);
            jnum(o, "calls_per_s", r.calls_per_s);
            jnum(o, "us_per_call", r.per_call_s * 1e6);
            jnum(o, "p50_us", r.p50_s * 1e6);
            jnum(o, "p95_us", r.p95_s * 1e6);
            jnum(o, "peak_rss_kb", (double)r.peak_rss_kb);
            jnum(o, "anon_rss_kb", (double)r.anon_rss_kb);
            jnum(o, "commits_per_call", r.commits_per_call);
            jnum(o, "floor_us_per_record", fr.per_record_s * 1e6);
            cJSON_AddStringToObject(o, "floor_measured",
                                    modes[m] == PL_DURABILITY_PROCESS
                                        ? "back to back"
                                        : "in turns");
            jnum(o, "ratio_to_floor", ratio);
            jnum(o, "rawcall_us_per_call", rcall.per_call_s * 1e6);
            jnum(o, "rawcall_ratio_to_floor", rcall.of_floor);
            jnum(o, "ratio_to_rawcall", rcall.engine_of);
            cJSON_AddItemToArray(jw1, o);
        }
    }
    say("\n  rawcall: the floor committing what a call commits, two records "
        "of 80 and 133 B;\n  the engine's time over it is what the "
        "engine adds to storing a call, less what\n  its zeroed tail "
        "saves the synced modes (the floors, plain LMDB, lengthen the "
        "file):\n");
    say("  %-8s %6s %11s %14s %15s\n", "mode", "N", "rawcall us",
        "rawcall/floor", "engine/rawcall");
    for (size_t m = 0; m < 3; m++)
        for (int s = 0; s < w1_n; s++)
            if (have_rawcall[m][s])
                say("  %-8s %6d %11.1f %13.2fx %14.2fx\n",
                    pl_durability_name(modes[m]), w1_sizes[s],
                    rawcall[m][s].per_call_s * 1e6, rawcall[m][s].of_floor,
                    rawcall[m][s].engine_of);
    return failures;
}

/* W2 next to its floor; returns the failures. */
static int report_w2(void)
{
    int failures = 0;
    say("\nW2 recovery: a run SIGKILLed after M of 2M calls, then restarted\n");
    {
        w2_arg a = {500, 1000};
        w2_res r, runs[REPS_MAX];
        scan_res fr;
        double first[REPS_MAX], flo[REPS_MAX];
        int ok = 0;
        for (int k = 0; k < g_reps; k++) {
            if (w2(&a, &runs[ok]) || floor_scan(2 * a.recorded, &fr))
                continue;
            first[ok] = runs[ok].to_first_exec_s;
            flo[ok++] = fr.open_read_s;
        }
        if (!ok) {
            say("  failed\n");
            failures++;
        } else {
            double mid = median(first, ok);
            r = runs[0];
            for (int k = 0; k < ok; k++)
                if (runs[k].to_first_exec_s == mid)
                    r = runs[k];
            fr.open_read_s = median(flo, ok);
            double ratio = r.to_first_exec_s / fr.open_read_s;
            say("  %d recorded calls: restart -> first new call %.2f ms "
                "(floor: open + read %d records %.2f ms, %.1fx); restart -> "
                "done %.1f ms; served %llu, executed %llu\n",
                a.recorded, r.to_first_exec_s * 1e3, 2 * a.recorded,
                fr.open_read_s * 1e3, ratio, r.to_done_s * 1e3,
                (unsigned long long)r.served, (unsigned long long)r.executed);
            add_goal("W2: restart to first new call", r.to_first_exec_s * 1e3,
                     "ms", true, 5.0);
            cJSON *o = cJSON_AddObjectToObject(g_json, "w2_recovery");
            jnum(o, "recorded_calls", a.recorded);
            jnum(o, "total_calls", a.total);
            jnum(o, "ms_to_first_new_call", r.to_first_exec_s * 1e3);
            jnum(o, "ms_to_done", r.to_done_s * 1e3);
            jnum(o, "served", (double)r.served);
            jnum(o, "executed", (double)r.executed);
            jnum(o, "floor_ms_open_and_read", fr.open_read_s * 1e3);
            jnum(o, "ratio_to_floor", ratio);
        }
    }
    return failures;
}

/* W3 in every mode, next to its floors; returns the failures. */
static int report_w3(bool quick)
{
    int failures = 0;
    int runs = quick ? 50 : 100, calls = quick ? 40 : 100;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int pool_threads = ncpu > 2 && ncpu < 64 ? (int)ncpu : 2;
    /* threads: one per run, every run in flight at once; pool: as many
     * threads as CPUs, carrying every run at once between them */
    const w3_arg drivers[] = {
        {PL_DURABILITY_SYNC, runs, calls, runs, false},
        {PL_DURABILITY_SYNC, runs, calls, pool_threads, true},
    };
    say("\nW3 concurrency: %d runs x %d calls; threads: one per run; pool: "
        "pl_pool, %d threads\n",
        runs, calls, pool_threads);
    say("  %-8s %-8s %11s %12s %10s\n", "driver", "mode", "calls/s",
        "floor rec/s", "ratio");
    cJSON *jw3 = cJSON_AddArrayToObject(g_json, "w3_concurrency");
    /*
     * Each repetition runs every mode, each mode's floor and drivers back
     * to back.  The table shows medians; group / sync is the median of the
     * repetitions' own ratios, so a stretch of slow disk that falls on one
     * mode's runs does not move it.
     */
    double eng[3][2][REPS_MAX], flo[3][REPS_MAX], pair[2][REPS_MAX];
    int ok[3] = {0}, pairs = 0;
    drift dr;
    drift_begin(&dr, PL_DURABILITY_SYNC);
    for (int k = 0; k < g_reps; k++) {
        double got[3][2];
        bool have[3] = {false, false, false};
        for (size_t m = 0; m < 3; m++) {
            /* the floor: raw LMDB, a put and commit per record, on one
             * thread per run */
            floor_arg fa = {modes[m], quick ? 20 : 50, runs, false};
            floor_res frk;
            w3_res rk[2];
            w3_arg a0 = drivers[0], a1 = drivers[1];
            a0.mode = a1.mode = modes[m];
            if (in_child(floor_puts, &fa, &frk, sizeof frk) ||
                in_child(w3_child, &a0, &rk[0], sizeof rk[0]) ||
                in_child(w3_child, &a1, &rk[1], sizeof rk[1]))
                continue;
            for (int d = 0; d < 2; d++)
                eng[m][d][ok[m]] = got[m][d] = rk[d].calls_per_s;
            flo[m][ok[m]++] = frk.records_per_s;
            have[m] = true;
        }
        if (have[0] && have[1]) {
            for (int d = 0; d < 2; d++)
                pair[d][pairs] = got[1][d] / got[0][d];
            pairs++;
        }
    }
    drift_end(&dr, NULL);
    if (dr.note[0]) {
        say("  %s: these figures are not a steady host's\n", dr.note);
        cJSON_AddStringToObject(g_json, "w3_noise", dr.note);
    }
    for (size_t m = 0; m < 3; m++) {
        if (!ok[m]) {
            say("  %-8s failed\n", pl_durability_name(modes[m]));
            failures++;
            continue;
        }
        double floor_rate = median(flo[m], ok[m]);
        for (int d = 0; d < 2; d++) {
            double rate = median(eng[m][d], ok[m]);
            double ratio = rate / floor_rate;
            const char *driver = drivers[d].pool ? "pool" : "threads";
            say("  %-8s %-8s %11.0f %12.0f %9.2fx\n", driver,
                pl_durability_name(modes[m]), rate, floor_rate, ratio);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "driver", driver);
            cJSON_AddStringToObject(o, "durability",
                                    pl_durability_name(modes[m]));
            jnum(o, "runs", runs);
            jnum(o, "calls_per_run", calls);
            jnum(o, "threads", drivers[d].threads);
            jnum(o, "calls_per_s", rate);
            jnum(o, "floor_records_per_s", floor_rate);
            jnum(o, "ratio_to_floor", ratio);
            cJSON_AddItemToArray(jw3, o);
        }
    }
    if (pairs) {
        double t = median(pair[0], pairs), p = median(pair[1], pairs);
        say("  group / sync (the median of each repetition's): threads "
            "%.1fx, pool %.1fx\n",
            t, p);
        add_goal_noted("W3, pool: group / sync calls per second", p, "x", false,
                       20.0, dr.note);
        jnum(g_json, "w3_group_over_sync", p);
        jnum(g_json, "w3_threads_group_over_sync", t);
    }
    return failures;
}

/* W4 at every size, next to its floors; returns the failures. */
static int report_w4(bool quick)
{
    int failures = 0;
    int w4_full[] = {1000, 10000, 100000}, w4_quick[] = {1000, 10000};
    int *w4_sizes = quick ? w4_quick : w4_full;
    int w4_n = quick ? 2 : 3;
    say("\nW4 replay: continue a finished run, every result from the ledger\n");
    say("  %8s %10s %12s %12s %10s %9s %11s\n", "calls", "steps", "steps/s",
        "floor rec/s", "ratio", "peak MB", "+anon kB");
    cJSON *jw4 = cJSON_AddArrayToObject(g_json, "w4_replay");
    for (int s = 0; s < w4_n; s++) {
        w4_res r, runs[REPS_MAX];
        scan_res fr;
        double rate[REPS_MAX], flo[REPS_MAX];
        int ok = 0;
        for (int k = 0; k < g_reps; k++) {
            if (w4(w4_sizes[s], &runs[ok]) || floor_scan(2 * w4_sizes[s], &fr))
                continue;
            rate[ok] = runs[ok].steps_per_s;
            flo[ok++] = fr.records_per_s;
        }
        if (!ok) {
            say("  %8d failed\n", w4_sizes[s]);
            failures++;
            continue;
        }
        double mid = median(rate, ok);
        r = runs[0];
        for (int k = 0; k < ok; k++)
            if (runs[k].steps_per_s == mid)
                r = runs[k];
        fr.records_per_s = median(flo, ok);
        double ratio = r.steps_per_s / fr.records_per_s;
        say("  %8d %10llu %12.0f %12.0f %9.2fx %9.1f %11ld\n", w4_sizes[s],
            (unsigned long long)r.steps, r.steps_per_s, fr.records_per_s, ratio,
            (double)r.peak_rss_kb / 1024, r.anon_rss_kb);
        if (w4_sizes[s] >= 10000) {
            char what[96];
            snprintf(what, sizeof what, "W4, %d calls: replayed steps per s",
                     w4_sizes[s]);
            add_goal(what, r.steps_per_s / 1e6, "M", false, 1.0);
            /* flat: the replay's own heap does not grow with the ledger */
            snprintf(what, sizeof what, "W4, %d calls: anonymous memory added",
                     w4_sizes[s]);
            add_goal(what, (double)r.anon_rss_kb / 1024, "MB", true, 1.0);
        }
        cJSON *o = cJSON_CreateObject();
        jnum(o, "calls", w4_sizes[s]);
        jnum(o, "steps", (double)r.steps);
        jnum(o, "steps_per_s", r.steps_per_s);
        jnum(o, "seconds", r.seconds);
        jnum(o, "peak_rss_kb", (double)r.peak_rss_kb);
        jnum(o, "anon_rss_growth_kb", (double)r.anon_rss_kb);
        jnum(o, "floor_records_per_s", fr.records_per_s);
        jnum(o, "ratio_to_floor", ratio);
        cJSON_AddItemToArray(jw4, o);
    }
    return failures;
}

/* W5 over HTTP: the engine's agent against the bare libcurl loop. */
static int report_w5_http(bool quick)
{
    static const int full[] = {10, 100, 1000}, small[] = {10, 100};
    const int *sizes = quick ? small : full;
    int n = quick ? 2 : 3, reps = quick ? 1 : 3;
    static const pl_durability hmodes[] = {PL_DURABILITY_SYNC,
                                           PL_DURABILITY_PROCESS};
    say("\nW5 agent over HTTP: K turns, each a model call to a loopback "
        "server (canned\n  OpenAI answers, keep-alive) and a tool call; the "
        "engine's LLM policy under\n  loop + invoke_action vs a bare libcurl + "
        "cJSON loop making the same requests; replay: the CPU time of a "
        "turn of\n  the same agent's loop replayed, the run having died at "
        "the model's final answer\n");
    say("  %-8s %5s %10s %10s %10s %8s %8s %10s %8s %10s\n", "mode", "K",
        "engine us", "bare us", "added us", "commits", "floor us", "replay us",
        "req", "bytes");
    cJSON *arr = cJSON_AddArrayToObject(g_json, "w5_agent_http");
    for (int m = 0; m < 2; m++) {
        w5h_res med[3];
        double added_med[3] = {0};
        for (int s = 0; s < n; s++) {
            double eng[REPS_MAX], bare[REPS_MAX], add[REPS_MAX], rep[REPS_MAX];
            w5h_res r = {0};
            int ok = 0;
            long reqs = 0;
            for (int k = 0; k < reps; k++) {
                w5h_arg a = {sizes[s], hmodes[m]};
                if (in_child(w5h_child, &a, &r, sizeof r))
                    continue;
                eng[ok] = r.engine_us;
                bare[ok] = r.bare_us;
                add[ok] = r.engine_us - r.bare_us;
                rep[ok] = r.replay_us;
                reqs += r.replay_requests;
                ok++;
            }
            if (!ok) {
                say("  %-8s %5d failed\n", pl_durability_name(hmodes[m]),
                    sizes[s]);
                return 1;
            }
            med[s] = r;
            med[s].engine_us = median(eng, ok);
            med[s].bare_us = median(bare, ok);
            med[s].replay_us = median(rep, ok);
            med[s].replay_requests = reqs;
            double added = median(add, ok);
            say("  %-8s %5d %10.1f %10.1f %10.1f %8.2f %8.1f %10.2f %8ld "
                "%10.0f\n",
                pl_durability_name(hmodes[m]), sizes[s], med[s].engine_us,
                med[s].bare_us, added, r.commits, r.floor_us, med[s].replay_us,
                reqs, r.bytes);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "mode", pl_durability_name(hmodes[m]));
            jnum(o, "turns", sizes[s]);
            jnum(o, "engine_us_per_turn", med[s].engine_us);
            jnum(o, "bare_us_per_turn", med[s].bare_us);
            jnum(o, "added_us_per_turn", added);
            jnum(o, "commits_per_turn", r.commits);
            jnum(o, "floor_commit_us", r.floor_us);
            jnum(o, "replay_us_per_turn", med[s].replay_us);
            jnum(o, "replay_wall_us_per_turn", r.replay_wall_us);
            jnum(o, "replay_total_us_per_turn", r.replay_total_us);
            jnum(o, "replay_requests", (double)reqs);
            jnum(o, "store_bytes_per_turn", r.bytes);
            cJSON_AddItemToArray(arr, o);
            added_med[s] = added;
        }
        const char *mn = pl_durability_name(hmodes[m]);
        char what[96];
        int last = n - 1;
        if (hmodes[m] == PL_DURABILITY_SYNC) {
            snprintf(what, sizeof what, "W5 http sync, K=%d: added - commits",
                     sizes[last]);
            /* what a turn's commits cost at the W1 floor */
            w5h_res *x = &med[last];
            floor_arg fa = {PL_DURABILITY_SYNC, 200, 1, false};
            floor_res fr;
            double floor_us = in_child(floor_puts, &fa, &fr, sizeof fr)
                                  ? 0
                                  : fr.per_record_s * 1e6;
            add_goal(what, added_med[last] - x->commits * floor_us, "us", true,
                     50);
        } else {
            snprintf(what, sizeof what, "W5 http process, K=%d: added",
                     sizes[last]);
            add_goal(what, added_med[last], "us", true, 50);
        }
        snprintf(what, sizeof what, "W5 http %s: turn at K=%d / K=10", mn,
                 sizes[last]);
        add_goal(what, med[last].engine_us / med[0].engine_us, "x", true, 1.5);
        snprintf(what, sizeof what, "W5 http %s: replayed turn K=%d / K=10", mn,
                 sizes[last]);
        add_goal(what, med[last].replay_us / med[0].replay_us, "x", true, 1.5);
        snprintf(what, sizeof what, "W5 http %s: replay requests", mn);
        long total = 0;
        for (int s = 0; s < n; s++)
            total += med[s].replay_requests;
        add_goal(what, (double)total, "", true, 0);
        snprintf(what, sizeof what, "W5 http %s: replayed turns/s, K=100", mn);
        add_goal(what, 1e6 / med[1].replay_us, "", false, 50000);
        snprintf(what, sizeof what, "W5 http %s: bytes/turn K=%d / K=10", mn,
                 sizes[last]);
        add_goal(what, med[last].bytes / med[0].bytes, "x", true, 1.1);
    }
    return 0;
}

static int report_w5(bool quick)
{
    static const int sizes[] = {10, 100, 1000};
    double per_turn[3] = {0};
    say("\nW5 agent turns: loop + invoke_action, the ledger read every turn "
        "(process mode)\n");
    say("  %8s %12s %12s\n", "turns", "us/turn", "vs 10 turns");
    cJSON *jw5 = cJSON_AddArrayToObject(g_json, "w5_agent_turns");
    for (int s = 0; s < 3; s++) {
        double v[REPS_MAX];
        int ok = 0;
        for (int k = 0; k < g_reps; k++) {
            w5_res r;
            if (!in_child(w5_child, &sizes[s], &r, sizeof r))
                v[ok++] = r.us_per_turn;
        }
        if (!ok) {
            say("  %8d failed\n", sizes[s]);
            return 1;
        }
        per_turn[s] = median(v, ok);
        say("  %8d %12.1f %11.2fx\n", sizes[s], per_turn[s],
            per_turn[s] / per_turn[0]);
        cJSON *o = cJSON_CreateObject();
        jnum(o, "turns", sizes[s]);
        jnum(o, "us_per_turn", per_turn[s]);
        jnum(o, "ratio_to_10_turns", per_turn[s] / per_turn[0]);
        cJSON_AddItemToArray(jw5, o);
    }
    add_goal("W5: a turn at 1,000 turns vs at 10 (flat)",
             per_turn[2] / per_turn[0], "x", true, 1.5);
    return report_w5_http(quick);
}

/* ---- fan-out: call_all against sequential calls; the cost of a wrap -------------- */

/*
 * A tool that waits FAN_WAIT_MS on I/O: poll() on a pipe nobody writes, as
 * a tool waits for a reply.  "fan_root" makes FAN_CALLS calls to it, all at
 * once (pl_ctx_call_all) or one after another; "wrap_root" makes n calls
 * to the plain tool bare, under an empty retry, or under validate (the
 * tool's input schema {"type": "object"}).  Process mode throughout.
 */
#define FAN_CALLS 10
#define FAN_WAIT_MS 10

static int g_fan_pipe[2] = {-1, -1};

static int io_wait_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                        void *user)
{
    (void)ctx, (void)user;
    struct pollfd pfd = {g_fan_pipe[0], POLLIN, 0};
    int left = FAN_WAIT_MS;
    double until = now_s() + FAN_WAIT_MS / 1e3;
    while (left > 0 && poll(&pfd, 1, left) >= 0)
        left = (int)((until - now_s()) * 1e3 + 0.999);
    return pl_steps_add_result(out, a->payload);
}

static int fan_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    bool all = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a->payload,
                                                             "all"));
    cJSON *p[FAN_CALLS];
    pl_action acts[FAN_CALLS];
    pl_call_spec specs[FAN_CALLS];
    pl_step *res[FAN_CALLS] = {NULL};
    int st = PL_OK;
    for (int i = 0; i < FAN_CALLS; i++) {
        p[i] = cJSON_CreateObject();
        cJSON_AddNumberToObject(p[i], "i", i);
        acts[i] = (pl_action)PL_ACTION_INIT;
        acts[i].policy = "io_wait";
        acts[i].payload = p[i];
        specs[i] = (pl_call_spec)PL_CALL_SPEC_INIT;
        specs[i].action = &acts[i];
    }
    if (all)
        st = pl_ctx_call_all(res, ctx, specs, FAN_CALLS);
    for (int i = 0; !all && !st && i < FAN_CALLS; i++)
        st = pl_ctx_call(&res[i], ctx, &acts[i], NULL, 0);
    for (int i = 0; i < FAN_CALLS; i++) {
        pl_step_free(res[i]);
        cJSON_Delete(p[i]);
    }
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

static int wrap_root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    pl_schema_cache *cache = user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    int wrap = cJSON_GetObjectItemCaseSensitive(a->payload, "wrap")->valueint;
    pl_decorator d = PL_DECORATOR_INIT;
    int st = wrap == 1   ? pl_decorator_retry(&d, NULL)
             : wrap == 2 ? pl_decorator_validate(&d, cache)
                         : PL_OK;
    cJSON *p = cJSON_CreateObject();
    cJSON *iv = cJSON_AddNumberToObject(p, "i", 0);
    for (int i = 0; !st && i < n; i++) {
        cJSON_SetNumberValue(iv, i);
        pl_action call = PL_ACTION_INIT;
        call.policy = "tool";
        call.payload = p;
        pl_step *res = NULL;
        st = pl_ctx_call(&res, ctx, &call, wrap ? &d : NULL, wrap ? 1 : 0);
        pl_step_free(res);
    }
    cJSON_Delete(p);
    return st ? st : pl_steps_add_text(out, NULL, "done");
}

typedef struct fan_arg {
    int what; /* 0 sequential, 1 call_all; 10 + wrap: wrap_root */
    int n;    /* fan_root: runs; wrap_root: calls in its one run */
} fan_arg;

typedef struct fan_res {
    double s;     /* the runs' wall time */
    double cpu_s; /* ... and the process's CPU time meanwhile */
} fan_res;

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fan_child(const void *varg, void *vres)
{
    const fan_arg *a = varg;
    fan_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "fanout.db");
    remove_store(path);
    pl_schema_cache *cache = NULL;
    pl_registry *reg = NULL;
    if (pl_schema_cache_new(&cache) || pl_registry_new(&reg) ||
        pipe(g_fan_pipe))
        die("fan-out setup");
    static const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"io_wait", io_wait_tool},
                {"fan_root", fan_root},
                {"wrap_root", wrap_root},
                {"tool", bench_tool}};
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.user = i == 2 ? (void *)cache : NULL;
        d.input_schema = i == 3 ? "{\"type\": \"object\"}" : NULL;
        if (pl_registry_add(reg, &d))
            die("registry");
    }
    pl_engine *e = open_engine(path, reg, PL_DURABILITY_PROCESS, NULL);
    cJSON *p = cJSON_CreateObject();
    int runs = 1;
    if (a->what < 10) {
        cJSON_AddBoolToObject(p, "all", a->what == 1);
        runs = a->n;
    } else {
        cJSON_AddNumberToObject(p, "n", a->n);
        cJSON_AddNumberToObject(p, "wrap", a->what - 10);
    }
    pl_action root = PL_ACTION_INIT;
    root.policy = a->what < 10 ? "fan_root" : "wrap_root";
    root.payload = p;
    double t0 = now_s(), c0 = cpu_now_s();
    for (int i = 0; i < runs; i++) {
        pl_outcome *o = NULL;
        if (pl_run_start(&o, e, &root, NULL) || o->status != PL_RUN_COMPLETED)
            die("fan-out run");
        pl_outcome_free(o);
    }
    r->s = now_s() - t0;
    r->cpu_s = cpu_now_s() - c0;
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
    pl_schema_cache_free(cache);
    remove_store(path);
}

/*
 * Run the @p n workloads of @p a interleaved, each rep in a child of its
 * own; each[w][k] is rep k's time of workload w, wall or (@p cpu) CPU
 * time (< 0: it failed), per[w] the median.  Returns -1 when a workload never ran.
 */
static int fan_interleaved(const fan_arg *a, int n, bool cpu,
                           double each[][REPS_MAX], double *per)
{
    double v[4][REPS_MAX];
    int ok[4] = {0};
    for (int k = 0; k < g_reps; k++)
        for (int w = 0; w < n; w++) {
            fan_res r;
            each[w][k] = -1;
            if (!in_child(fan_child, &a[w], &r, sizeof r))
                v[w][ok[w]++] = each[w][k] = cpu ? r.cpu_s : r.s;
        }
    for (int w = 0; w < n; w++) {
        if (!ok[w])
            return -1;
        per[w] = median(v[w], ok[w]);
    }
    return 0;
}

/* The median of the reps' own ratios of workload @p w to workload 0. */
static double fan_ratio(double each[][REPS_MAX], int w)
{
    double ratios[REPS_MAX];
    int nr = 0;
    for (int k = 0; k < g_reps; k++)
        if (each[w][k] > 0 && each[0][k] > 0)
            ratios[nr++] = each[w][k] / each[0][k];
    return nr ? median(ratios, nr) : NAN;
}

static int report_fanout(bool quick)
{
    int runs = quick ? 5 : 20;
    say("\nFan-out: %d calls whose tools each wait %d ms on I/O, %d runs "
        "(process mode)\n",
        FAN_CALLS, FAN_WAIT_MS, runs);
    fan_arg fa[2] = {{0, runs}, {1, runs}};
    double each[3][REPS_MAX], per[3];
    if (fan_interleaved(fa, 2, false, each, per)) {
        say("  failed\n");
        return 1;
    }
    double speedup = 1 / fan_ratio(each, 1);
    say("  %-22s %10.2f ms/run\n  %-22s %10.2f ms/run %6.2fx faster\n",
        "sequential pl_ctx_call", per[0] * 1e3 / runs, "pl_ctx_call_all",
        per[1] * 1e3 / runs, speedup);
    cJSON *jf = cJSON_AddObjectToObject(g_json, "fanout");
    jnum(jf, "sequential_ms", per[0] * 1e3 / runs);
    jnum(jf, "call_all_ms", per[1] * 1e3 / runs);
    jnum(jf, "speedup", speedup);
    add_goal("Fan-out: call_all of 10 vs sequential", speedup, "x", false, 8);

    /* CPU time: in process mode a call waits for nothing, and CPU time
     * is what a host busy with other work disturbs least */
    int n = quick ? 2000 : 20000;
    say("\nWrap cost: %d calls, bare or wrapped (process mode, CPU time)\n", n);
    say("  %-22s %10s %10s\n", "call", "us/call", "vs bare");
    fan_arg wa[3] = {{10, n}, {11, n}, {12, n}};
    if (fan_interleaved(wa, 3, true, each, per)) {
        say("  failed\n");
        return 1;
    }
    static const char *const names[] = {"bare", "empty retry",
                                        "validate {type:object}"};
    static const char *const keys[] = {"bare", "retry", "validate"};
    cJSON *jw = cJSON_AddObjectToObject(g_json, "wrap_cost");
    for (int w = 0; w < 3; w++) {
        double ratio = w ? fan_ratio(each, w) : 1;
        say("  %-22s %10.2f %9.2fx\n", names[w], per[w] * 1e6 / n, ratio);
        cJSON *o = cJSON_AddObjectToObject(jw, keys[w]);
        jnum(o, "cpu_us_per_call", per[w] * 1e6 / n);
        jnum(o, "ratio_to_bare", ratio);
        if (w == 1)
            add_goal("Wrap: empty retry vs a bare call", ratio, "x", true, 1.1);
        if (w == 2)
            add_goal("Wrap: validate vs a bare call", ratio, "x", true, 1.1);
    }
    return 0;
}

/* ---- W6: workers draining a queue ------------------------------------------------ */

/*
 * W6: @p runs submitted runs of 10 calls, drained by 1, 2 and 4 worker
 * processes (pl_worker_run(), concurrency 1 each, a host id each, on one
 * store).  A worker's event callback writes a byte to a pipe per run it
 * completes; the parent times from "go" to the last byte, then stops the
 * workers with SIGTERM (their handler calls pl_worker_stop()).  More bytes
 * than runs would mean a run completed twice: that fails the workload.
 */
#define W6_CALLS 10

typedef struct w6_arg {
    pl_durability mode;
    int runs;
    int workers;
    char path[1100]; /* set by w6(): a PostgreSQL schema names its pid */
} w6_arg;

typedef struct w6_res {
    double runs_per_s;
    double calls_per_s;
} w6_res;

static pl_engine *g_w6_engine;
static int g_w6_done_fd = -1;

static void w6_on_term(int sig)
{
    (void)sig;
    pl_worker_stop(g_w6_engine);
}

static void w6_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_RUN_COMPLETED && g_w6_done_fd >= 0 &&
        write(g_w6_done_fd, "c", 1) != 1)
        _exit(1);
}

/* Submit the queue (in a child of its own: no engine is open in the parent
 * when it forks the workers). */
static void w6_submit_child(const void *varg, void *vres)
{
    const w6_arg *a = varg;
    (void)vres;
    remove_store(a->path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(a->path, reg, PL_DURABILITY_PROCESS, NULL);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n", W6_CALLS);
    pl_action root = {PL_ACTION_VERSION, "root", p, NULL, 0, NULL};
    for (int i = 0; i < a->runs; i++) {
        char id[32];
        snprintf(id, sizeof id, "w6-%05d", i);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        char *got = NULL;
        if (pl_run_submit(&got, e, &root, &ro))
            die("W6 submit");
        free(got);
    }
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A worker: open, say ready, wait for go, work until SIGTERM. */
static void w6_worker(const w6_arg *a, int id, int ready_fd, int go_fd,
                      int done_fd)
{
    char host[32];
    snprintf(host, sizeof host, "bench-%d", id);
    pl_registry *reg = make_registry(false);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = a->mode;
    o.on_event = w6_event;
    o.host_id = host;
    if (pl_engine_open(&g_w6_engine, a->path, reg, &o))
        die("W6 worker open");
    g_w6_done_fd = done_fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = w6_on_term;
    sigaction(SIGTERM, &sa, NULL);
    char c;
    if (write(ready_fd, "r", 1) != 1 || read(go_fd, &c, 1) != 1)
        _exit(1);
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 5;
    if (pl_worker_run(g_w6_engine, &wo))
        die("W6 worker");
    pl_engine_close(g_w6_engine);
    pl_registry_free(reg);
    _exit(0);
}

static int w6(w6_arg *a, w6_res *r)
{
    path_in(a->path, sizeof a->path, "w6");
    w6_res none;
    if (in_child(w6_submit_child, a, &none, sizeof none))
        return -1;
    int ready[2], go[2], done[2];
    if (pipe(ready) || pipe(go) || pipe(done))
        die("W6 pipes");
    pid_t kids[4];
    int n = 0;
    fflush(NULL);
    for (; n < a->workers; n++) {
        if ((kids[n] = fork()) < 0)
            break;
        if (kids[n] == 0) {
            close(ready[0]);
            close(go[1]);
            close(done[0]);
            w6_worker(a, n, ready[1], go[0], done[1]);
        }
    }
    close(ready[1]);
    close(go[0]);
    close(done[1]);
    int rc = n == a->workers ? 0 : -1;
    char c;
    for (int i = 0; !rc && i < n; i++)
        if (read(ready[0], &c, 1) != 1)
            rc = -1;
    double t0 = now_s();
    for (int i = 0; !rc && i < n; i++)
        if (write(go[1], "g", 1) != 1)
            rc = -1;
    int got = 0;
    while (!rc && got < a->runs) {
        char buf[256];
        struct pollfd pf = {done[0], POLLIN, 0};
        ssize_t k = poll(&pf, 1, 60000) == 1 ? read(done[0], buf, sizeof buf)
                                             : -1;
        if (k <= 0) { /* every worker died, or none got on for a minute */
            fprintf(stderr,
                    "pl-bench: W6: the workers stopped after %d "
                    "of %d runs\n",
                    got, a->runs);
            rc = -1;
        } else
            got += (int)k;
    }
    double t1 = now_s();
    for (int i = 0; i < n; i++)
        kill(kids[i], SIGTERM);
    close(go[1]);
    for (int i = 0; i < n; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status))
            rc = -1;
    }
    /* every worker is gone: whatever is left in the pipe came late */
    char buf[256];
    ssize_t k;
    while ((k = read(done[0], buf, sizeof buf)) > 0)
        got += (int)k;
    close(done[0]);
    close(ready[0]);
    if (!rc && got != a->runs) {
        fprintf(stderr, "pl-bench: W6: %d completions of %d runs\n", got,
                a->runs);
        rc = -1;
    }
    remove_store(a->path);
    if (rc)
        return rc;
    r->runs_per_s = a->runs / (t1 - t0);
    r->calls_per_s = r->runs_per_s * W6_CALLS;
    return 0;
}

/* W6's round trips a run: one worker in this child drains W6_COUNT runs. */
#define W6_COUNT 20

static int g_w6_left;

static void w6_count_event(const pl_event *ev, void *user)
{
    (void)user;
    if (ev->kind == PL_EVENT_RUN_COMPLETED && --g_w6_left == 0)
        pl_worker_stop(g_w6_engine);
}

static void w6_count_child(const void *varg, void *vres)
{
    const w6_arg *a = varg;
    double *per_run = vres;
    w6_res none;
    w6_submit_child(a, &none);
    pl_registry *reg = make_registry(false);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = a->mode;
    o.on_event = w6_count_event;
    o.host_id = "bench-count";
    if (pl_engine_open(&g_w6_engine, a->path, reg, &o))
        die("W6 count open");
    g_w6_left = a->runs;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 5;
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    if (pl_worker_run(g_w6_engine, &wo))
        die("W6 count worker");
    pl__pg_counts_get(&c1);
    *per_run = (double)(c1.round_trips - c0.round_trips) / a->runs;
    pl_engine_close(g_w6_engine);
    pl_registry_free(reg);
    remove_store(a->path);
}

/* W6 with 1, 2 and 4 workers; returns the failures. */
static int report_w6(bool quick)
{
    static const int counts[] = {1, 2, 4};
    int runs = quick ? 100 : 1000, reps = g_reps < 3 ? g_reps : 3;
    int failures = 0;
    pl_durability mode = PL_DURABILITY_SYNC;
    say("\nW6 workers: %d submitted runs of %d calls drained by N worker "
        "processes\n  (pl_worker_run, concurrency 1 each, %s mode; median "
        "of %d)\n",
        runs, W6_CALLS, pl_durability_name(mode), reps);
    say("  %-8s %10s %10s %9s\n", "workers", "runs/s", "calls/s", "scaling");
    cJSON *jw6 = cJSON_AddArrayToObject(g_json, "w6_workers");
    double rate[3][REPS_MAX];
    int ok[3] = {0};
    drift d;
    drift_begin(&d, mode);
    /* interleaved, so drift between repetitions touches every count */
    for (int k = 0; k < reps; k++)
        for (size_t w = 0; w < 3; w++) {
            w6_arg a = {mode, runs, counts[w], ""};
            w6_res r;
            if (!w6(&a, &r))
                rate[w][ok[w]++] = r.runs_per_s;
        }
    drift_end(&d, NULL);
    if (d.note[0]) {
        say("  %s: the scaling below is not a steady host's\n", d.note);
        cJSON_AddStringToObject(g_json, "w6_noise", d.note);
    }
    double one = ok[0] ? median(rate[0], ok[0]) : 0;
    if (g_pg_uri) { /* round trips a run (deterministic but for polls) */
        w6_arg a = {mode, W6_COUNT, 1, ""};
        path_in(a.path, sizeof a.path, "w6count");
        double per_run = 0;
        if (in_child(w6_count_child, &a, &per_run, sizeof per_run))
            failures++;
        else {
            say("  round trips a run, one worker: %.1f\n", per_run);
            jnum(g_json, "pg_w6_round_trips_per_run", per_run);
        }
    }
    for (size_t w = 0; w < 3; w++) {
        if (!ok[w]) {
            say("  %-8d failed\n", counts[w]);
            failures++;
            continue;
        }
        double m = median(rate[w], ok[w]);
        say("  %-8d %10.0f %10.0f %8.2fx\n", counts[w], m, m * W6_CALLS,
            one > 0 ? m / one : 0);
        cJSON *o = cJSON_CreateObject();
        jnum(o, "workers", counts[w]);
        jnum(o, "runs", runs);
        jnum(o, "calls_per_run", W6_CALLS);
        cJSON_AddStringToObject(o, "durability", pl_durability_name(mode));
        jnum(o, "runs_per_s", m);
        jnum(o, "calls_per_s", m * W6_CALLS);
        if (one > 0)
            jnum(o, "scaling", m / one);
        cJSON_AddItemToArray(jw6, o);
    }
    return failures;
}

/* ---- PostgreSQL: W1 and W3 on the PostgreSQL store ------------------------------ */

/*
 * With --store postgresql://...: W1 and W3 on the PostgreSQL store, next to
 * a raw libpq floor on the same server in the same run: a 160 B record
 * INSERTed and committed by itself (autocommit: the statement and its
 * commit in one round trip, a prepared statement), with the engine's
 * synchronous_commit for the mode (on for sync and group, off for
 * process).  Every store and floor is a schema of its own, made fresh for
 * each repetition and dropped after it; path_in() and remove_store() name
 * and drop them, so the LMDB workloads' children run unchanged.
 */
/* "w1.db" -> plbench_w1_db_<pid>: a schema of this run's own. */
static void pg_schema(char *out, size_t n, const char *name)
{
    int len = snprintf(out, n, "plbench_%s_%ld", name, (long)getpid());
    for (int i = 0; i < len && (size_t)i < n; i++)
        if (out[i] == '.' || out[i] == '-')
            out[i] = '_';
}

static void pg_path_in(char *out, size_t n, const char *name)
{
    char schema[128];
    pg_schema(schema, sizeof schema, name);
    snprintf(out, n, "%s%cschema=%s", g_pg_uri,
             strchr(g_pg_uri, '?') ? '&' : '?', schema);
}

static void pg_quiet(void *user, const char *message)
{
    (void)user;
    (void)message;
}

static PGconn *pg_connect(void)
{
    PGconn *c = PQconnectdb(g_pg_uri);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pl-bench: cannot connect to %s: %s", g_pg_uri,
                PQerrorMessage(c));
        _exit(1);
    }
    PQsetNoticeProcessor(c, pg_quiet, NULL); /* DROP ... CASCADE's */
    return c;
}

static void pg_sql(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK) {
        fprintf(stderr, "pl-bench: %s: %s", sql, PQresultErrorMessage(r));
        _exit(1);
    }
    PQclear(r);
}

/* Drop the schema of a pg_path_in() path. */
static void pg_remove(const char *path)
{
    const char *schema = strstr(path, "schema=");
    if (!schema)
        return;
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
             schema + 7);
    PGconn *c = pg_connect();
    pg_sql(c, sql);
    PQfinish(c);
}

/* A floor session: the mode's synchronous_commit, the INSERT prepared. */
static PGconn *pg_floor_session(pl_durability mode, const char *schema)
{
    PGconn *c = pg_connect();
    pg_sql(c, mode == PL_DURABILITY_PROCESS ? "SET synchronous_commit = off"
                                            : "SET synchronous_commit = on");
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO \"%s\".r (k, v) VALUES ($1, $2)",
             schema);
    PGresult *r = PQprepare(c, "put", sql, 2, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "pl-bench: %s: %s", sql, PQresultErrorMessage(r));
        _exit(1);
    }
    PQclear(r);
    return c;
}

/* Writer @p id's records from .. from+n-1, each committed alone. */
static void pg_floor_puts(PGconn *c, int id, int from, int n)
{
    char key[12], val[160];
    memset(val, 'v', sizeof val);
    const char *vals[2] = {key, val};
    int lens[2] = {sizeof key, sizeof val}, fmts[2] = {1, 1};
    for (int i = from; i < from + n; i++) {
        uint32_t be[3] = {htonl((uint32_t)id), 0, htonl((uint32_t)i)};
        memcpy(key, be, sizeof key);
        PGresult *r = PQexecPrepared(c, "put", 2, vals, lens, fmts, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "pl-bench: floor insert: %s",
                    PQresultErrorMessage(r));
            _exit(1);
        }
        PQclear(r);
    }
}

/* A fresh floor table in @p schema (a pg_schema() of "floor"). */
static void pg_floor_create(const char *path, const char *schema)
{
    char sql[512];
    pg_remove(path);
    PGconn *c = pg_connect();
    snprintf(sql, sizeof sql,
             "CREATE SCHEMA \"%s\"; CREATE TABLE \"%s\".r (k bytea PRIMARY "
             "KEY, v bytea NOT NULL)",
             schema, schema);
    pg_sql(c, sql);
    PQfinish(c);
}

typedef struct pg_floor_thread {
    const floor_arg *a;
    const char *schema;
    int id;
} pg_floor_thread;

static void *pg_floor_commits(void *arg)
{
    const pg_floor_thread *t = arg;
    PGconn *c = pg_floor_session(t->a->mode, t->schema);
    pg_floor_puts(c, t->id, 0, t->a->n);
    PQfinish(c);
    return NULL;
}

/* The floor: a->threads sessions making a->n commits each. */
static void pg_floor(const void *varg, void *vres)
{
    const floor_arg *a = varg;
    floor_res *r = vres;
    char path[1100], schema[128];
    path_in(path, sizeof path, "floor");
    pg_schema(schema, sizeof schema, "floor");
    pg_floor_create(path, schema);
    pg_floor_thread args[256];
    int threads = a->threads < 1 ? 1 : a->threads > 256 ? 256 : a->threads;
    for (int i = 0; i < threads; i++)
        args[i] = (pg_floor_thread){a, schema, i};
    timed_threads(pg_floor_commits, args, sizeof *args, threads, a->n, r);
    pg_remove(path);
}

/* The floor's side of W1's turns (see w1_turns) on PostgreSQL. */
static void pg_floor_in_turns(const void *varg, void *vres)
{
    const w1_arg *a = varg;
    turns_res *r = vres;
    signal(SIGPIPE, SIG_IGN);
    close(a->turns->to_floors[1]);
    close(a->turns->to_run[0]);
    char path[1100], schema[128];
    path_in(path, sizeof path, "floor");
    pg_schema(schema, sizeof schema, "floor");
    pg_floor_create(path, schema);
    PGconn *c = pg_floor_session(a->mode, schema);
    int n;
    while (read(a->turns->to_floors[0], &n, sizeof n) == (ssize_t)sizeof n) {
        double t0 = now_s();
        pg_floor_puts(c, 0, r->n, n);
        r->floor_s += now_s() - t0;
        r->n += n;
        char done = 1;
        if (write(a->turns->to_run[1], &done, 1) != 1)
            break;
    }
    PQfinish(c);
    pg_remove(path);
}

/* One repetition of W1 on PostgreSQL: sync and group take turns with the
 * floor every TURN calls, process runs back to back, first in turn (k). */
static int pg_w1_rep(const w1_arg *a, int k, w1_res *run, double *floor_s)
{
    if (a->mode == PL_DURABILITY_PROCESS) {
        floor_arg fa = {a->mode, a->n, 1, false};
        floor_res fr;
        int rc = k % 2 ? in_child(pg_floor, &fa, &fr, sizeof fr) ||
                             in_child(w1_child, a, run, sizeof *run)
                       : in_child(w1_child, a, run, sizeof *run) ||
                             in_child(pg_floor, &fa, &fr, sizeof fr);
        *floor_s = fr.per_record_s;
        return rc;
    }
    w1_turns t;
    if (pipe(t.to_floors))
        return -1;
    if (pipe(t.to_run)) {
        close(t.to_floors[0]);
        close(t.to_floors[1]);
        return -1;
    }
    w1_arg ta = *a;
    ta.turns = &t;
    turns_res floors;
    int from_floor, from_run;
    pid_t fpid = child_start(pg_floor_in_turns, &ta, &floors, sizeof floors,
                             &from_floor);
    pid_t rpid = fpid < 0
                     ? -1
                     : child_start(w1_child, &ta, run, sizeof *run, &from_run);
    /* only the two children hold the pipes now */
    close(t.to_floors[0]);
    close(t.to_floors[1]);
    close(t.to_run[0]);
    close(t.to_run[1]);
    int rc = rpid < 0 ? -1 : child_finish(rpid, from_run, run, sizeof *run);
    if (fpid < 0 ||
        child_finish(fpid, from_floor, &floors, sizeof floors) != 0 ||
        floors.n != a->n)
        return -1;
    *floor_s = floors.floor_s / a->n;
    return rc;
}

/* W1 on PostgreSQL in every mode, next to the floor; returns the failures. */
static int report_pg_w1(bool quick)
{
    int failures = 0, n = quick ? 300 : 2000;
    cJSON *jw1 = cJSON_AddArrayToObject(g_json, "pg_w1_sequential");
    say("W1 sequential on PostgreSQL: one run, %d calls; floor: a 160 B "
        "INSERT committed alone\n  (same synchronous_commit), measured in "
        "turns with the run every %d calls (sync,\n  group) or back to back "
        "(process)\n",
        n, TURN);
    say("  %-8s %6s %9s %8s %8s %8s %9s %7s %6s %6s %8s\n", "mode", "N",
        "calls/s", "us/call", "p50 us", "p95 us", "floor us", "ratio", "rt",
        "stmts", "rt us");
    for (size_t m = 0; m < 3; m++) {
        w1_arg a = {modes[m], n, NULL};
        w1_res runs[REPS_MAX];
        double eng[REPS_MAX], flo[REPS_MAX], pair[REPS_MAX];
        int ok = 0;
        cJSON *o = cJSON_CreateObject();
        drift d;
        drift_begin(&d, modes[m]);
        for (int k = 0; k < g_reps; k++) {
            if (pg_w1_rep(&a, k, &runs[ok], &flo[ok]))
                continue;
            eng[ok] = runs[ok].per_call_s;
            pair[ok] = eng[ok] / flo[ok];
            ok++;
        }
        drift_end(&d, o);
        if (!ok) {
            say("  %-8s %6d failed\n", pl_durability_name(modes[m]), n);
            failures++;
            cJSON_Delete(o);
            continue;
        }
        double eng_s = median(eng, ok), floor_s = median(flo, ok);
        double ratio = median(pair, ok);
        w1_res r = runs[0];
        for (int k = 0; k < ok; k++) /* the run with the median time */
            if (runs[k].per_call_s == eng_s)
                r = runs[k];
        say("  %-8s %6d %9.0f %8.1f %8.1f %8.1f %9.1f %6.2fx %6.2f %6.2f %8.1f"
            "  %s\n",
            pl_durability_name(modes[m]), n, r.calls_per_s, eng_s * 1e6,
            r.p50_s * 1e6, r.p95_s * 1e6, floor_s * 1e6, ratio,
            r.round_trips_per_call, r.statements_per_call,
            r.wait_per_call_s * 1e6, d.note);
        if (modes[m] == PL_DURABILITY_SYNC)
            add_goal_noted("PostgreSQL W1 sync: time per call / floor", ratio,
                           "x", true, 1.2, d.note);
        cJSON_AddStringToObject(o, "durability", pl_durability_name(modes[m]));
        jnum(o, "n", n);
        jnum(o, "calls_per_s", r.calls_per_s);
        jnum(o, "us_per_call", eng_s * 1e6);
        jnum(o, "p50_us", r.p50_s * 1e6);
        jnum(o, "p95_us", r.p95_s * 1e6);
        jnum(o, "commits_per_call", r.commits_per_call);
        jnum(o, "round_trips_per_call", r.round_trips_per_call);
        jnum(o, "statements_per_call", r.statements_per_call);
        jnum(o, "round_trip_us_per_call", r.wait_per_call_s * 1e6);
        jnum(o, "floor_us_per_record", floor_s * 1e6);
        jnum(o, "ratio_to_floor", ratio);
        cJSON_AddItemToArray(jw1, o);
    }
    return failures;
}

/* W3 on PostgreSQL (the pool driver) in every mode; returns the failures. */
static int report_pg_w3(bool quick)
{
    int failures = 0, runs = quick ? 50 : 100, calls = quick ? 40 : 100;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 2 && ncpu < 64 ? (int)ncpu : 2;
    cJSON *jw3 = cJSON_AddArrayToObject(g_json, "pg_w3_concurrency");
    say("\nW3 concurrency on PostgreSQL: %d runs x %d calls as tasks of a "
        "pl_pool of %d threads;\n  floor: %d sessions, each a 160 B INSERT "
        "committed alone\n",
        runs, calls, threads, threads);
    say("  %-8s %11s %12s %10s %8s\n", "mode", "calls/s", "floor rec/s",
        "ratio", "rt/call");
    double eng[3][REPS_MAX], flo[3][REPS_MAX], pair[REPS_MAX], rt[3] = {0};
    int ok[3] = {0}, pairs = 0;
    drift d;
    drift_begin(&d, PL_DURABILITY_SYNC);
    for (int k = 0; k < g_reps; k++) {
        double got[3];
        bool have[3] = {false, false, false};
        for (size_t m = 0; m < 3; m++) {
            floor_arg fa = {modes[m], quick ? 100 : 250, threads, false};
            w3_arg a = {modes[m], runs, calls, threads, true};
            floor_res fr;
            w3_res r;
            if (in_child(pg_floor, &fa, &fr, sizeof fr) ||
                in_child(w3_child, &a, &r, sizeof r))
                continue;
            eng[m][ok[m]] = got[m] = r.calls_per_s;
            flo[m][ok[m]++] = fr.records_per_s;
            rt[m] = r.round_trips_per_call; /* the last repetition's */
            have[m] = true;
        }
        if (have[0] && have[1])
            pair[pairs++] = got[1] / got[0];
    }
    drift_end(&d, NULL);
    for (size_t m = 0; m < 3; m++) {
        if (!ok[m]) {
            say("  %-8s failed\n", pl_durability_name(modes[m]));
            failures++;
            continue;
        }
        double rate = median(eng[m], ok[m]), floor_rate = median(flo[m], ok[m]);
        say("  %-8s %11.0f %12.0f %9.2fx %8.3f\n", pl_durability_name(modes[m]),
            rate, floor_rate, rate / floor_rate, rt[m]);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "durability", pl_durability_name(modes[m]));
        jnum(o, "runs", runs);
        jnum(o, "calls_per_run", calls);
        jnum(o, "threads", threads);
        jnum(o, "calls_per_s", rate);
        jnum(o, "floor_records_per_s", floor_rate);
        jnum(o, "ratio_to_floor", rate / floor_rate);
        jnum(o, "round_trips_per_call", rt[m]);
        cJSON_AddItemToArray(jw3, o);
    }
    if (pairs) {
        double p = median(pair, pairs);
        say("  group / sync (the median of each repetition's): %.1fx  %s\n", p,
            d.note);
        add_goal_noted("PostgreSQL W3, pool: group / sync calls per s", p, "x",
                       false, 10.0, d.note);
        if (d.note[0])
            cJSON_AddStringToObject(g_json, "pg_w3_noise", d.note);
        jnum(g_json, "pg_w3_group_over_sync", p);
    }
    return failures;
}

/* The rate workload (bench_rate.c) on a store of its own. */
static int report_rate(bool quick)
{
    char path[1200];
    path_in(path, sizeof path, "rate");
    int failures = bench_rate(quick, path);
    remove_store(path);
    return failures;
}

/* W1, W3, W6, W7 and rate (as @p only selects them) on PostgreSQL; returns the
 * failures. */
static int report_pg(bool quick, unsigned only)
{
    say("on PostgreSQL: %s\n\n", g_pg_uri);
    cJSON_AddStringToObject(g_json, "store", "postgresql");
    return (only & 1u << 1 ? report_pg_w1(quick) : 0) +
           (only & 1u << 3 ? report_pg_w3(quick) : 0) +
           (only & 1u << 6 ? report_w6(quick) : 0) +
           (only & 1u << 7 ? report_w7(quick) : 0) +
           (only & ONLY_RATE ? report_rate(quick) : 0);
}

int main(int argc, char **argv)
{
    unsigned only = ONLY_ALL;
    bool quick = false;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
            g_reps = 3;
        } else if (!strcmp(argv[i], "--json"))
            g_print_json = true;
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--store") && i + 1 < argc)
            g_pg_uri = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            if (!(only = parse_only(argv[++i]))) {
                fprintf(stderr,
                        "pl-bench: --only takes workloads " ONLY_NAMES ", "
                        "comma-separated, not '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--dir") || !strcmp(argv[i], "--only") ||
                   !strcmp(argv[i], "--store")) {
            fprintf(stderr, "pl-bench: %s needs a value\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            fprintf(stderr, "pl-bench: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (g_pg_uri && ((strncmp(g_pg_uri, "postgresql://", 13) &&
                      strncmp(g_pg_uri, "postgres://", 11)) ||
                     strstr(g_pg_uri, "schema="))) {
        fprintf(stderr, "pl-bench: --store takes a postgresql:// URI "
                        "without schema= (it makes schemas of its own)\n");
        return 2;
    }
    if (dir) {
        snprintf(g_dir, sizeof g_dir, "%s", dir);
        struct stat sb;
        if ((mkdir(g_dir, 0700) && errno != EEXIST) || stat(g_dir, &sb) ||
            !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "pl-bench: cannot use %s as a directory\n", g_dir);
            return 1;
        }
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/pl-bench.XXXXXX",
                 t && *t ? t : "/tmp");
        if (!mkdtemp(g_dir)) {
            fprintf(stderr, "pl-bench: cannot create a temporary directory\n");
            return 1;
        }
    }

    g_json = cJSON_CreateObject();
    struct utsname u;
    uname(&u);
    cJSON *machine = cJSON_AddObjectToObject(g_json, "machine");
    cJSON_AddStringToObject(machine, "system", u.sysname);
    cJSON_AddStringToObject(machine, "release", u.release);
    cJSON_AddStringToObject(machine, "arch", u.machine);
    jnum(machine, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddStringToObject(g_json, "mode", quick ? "quick" : "full");
    cJSON_AddStringToObject(g_json, "version", pl_version());
    say("policyledger %s benchmark (%s), stores in %s, %ld cpus\n\n",
        pl_version(), quick ? "quick" : "full", g_dir,
        sysconf(_SC_NPROCESSORS_ONLN));
    int failures = 0;

    if (g_pg_uri) { /* W1, W3, W6, W7 and rate on PostgreSQL instead */
        failures += report_pg(quick, only);
        only &= ONLY_CHURN;
    }
    if (only & 1u << 1)
        failures += report_w1(quick);
    if (only & 1u << 2)
        failures += report_w2();
    if (only & 1u << 3)
        failures += report_w3(quick);
    if (only & 1u << 4)
        failures += report_w4(quick);
    if (only & 1u << 5)
        failures += report_w5(quick) + report_w5_stream(quick);
    if (only & ONLY_FANOUT)
        failures += report_fanout(quick);
    if (only & 1u << 6)
        failures += report_w6(quick);
    if (only & 1u << 7)
        failures += report_w7(quick);
    if (only & 1u << 8)
        failures += report_w8();
    if (only & ONLY_RATE)
        failures += report_rate(quick);
    if (only & ONLY_MCP)
        failures += report_mcp(quick);
    churn_report cr = {quick, g_print_json, g_dir, g_pg_uri, g_json};
    failures += (only & ONLY_CHURN ? churn_report_run(&cr) : 0) +
                (only & ONLY_AGENT && !g_pg_uri
                     ? agent_chain_report(quick, g_print_json, g_dir, g_json)
                     : 0);
    report_goals(quick);

    jnum(g_json, "failures", failures);
    if (g_print_json) {
        char *s = cJSON_Print(g_json);
        puts(s);
        free(s);
    }
    cJSON_Delete(g_json);
    if (!dir)
        rmdir(g_dir);
    return failures ? 1 : 0;
}
