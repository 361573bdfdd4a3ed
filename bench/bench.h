/*
 * bench.h -- what pl-bench's files share: clocks, child processes, stores,
 * the raw-LMDB floor, the report and its goals, the noise probe, the
 * loopback model server.
 *
 *   bench.c           the workloads described, --only, --store, main()
 *   bench_util.c      clocks, child processes, stores, the report, goals
 *   bench_policies.c  the policies the workloads run, their registry
 *   bench_floor.c     the raw-LMDB floor, and the noise probe
 *   bench_w1.c .. bench_w4.c, bench_w5.c, bench_w6.c, bench_fanout.c
 *                     the workloads W1..W6 and fanout
 *   bench_pg.c        W1 and W3 on PostgreSQL, next to a libpq floor
 *   bench_time.c      W7 (parked timers) and W8 (a signal to a waiting run)
 *   bench_rate.c      rate (one rate limit shared by three processes)
 *   model_server.c    the loopback model server W5 talks to
 *   bench_stream.c    W5 streamed: time to the first delta
 *   bench_mcp.c       mcp: a recorded MCP call against a bare JSON-RPC one
 *   churn.c           churn (runs created and pruned, cycle after cycle)
 *   agent_chain.c     the long agent (a chain of runs continued as new)
 *   options.c         the command line: the usage, --only's names
 */
#ifndef PL_BENCH_H
#define PL_BENCH_H

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <pthread.h>

#include <policyledger.h>

/* Repetitions of every workload and of its floor: 5, 3 with --quick; the
 * shortest run SHORT_REPS times as many. */
#define REPS 5
#define SHORT_REPS 3
#define REPS_MAX (REPS * SHORT_REPS)

/* ---- clocks and memory ---- */
double now_s(void);                /* monotonic, s */
long status_kb(const char *field); /* /proc/self/status: "VmHWM", ... */
double median(double *v, int n);   /* of n values, at most REPS_MAX */
double percentile(double *v, size_t n, double p); /* sorts v */
/* Say what failed (with pl_errmsg()) and end the process. */
void die(const char *what) __attribute__((noreturn));

/* ---- child processes: fn(arg, result) in a child; 0 when it succeeded ---- */
typedef void (*child_fn)(const void *arg, void *result);
int in_child(child_fn fn, const void *arg, void *result, size_t size);
/* Called first in every forked child: it ends when @p parent (the pid that
 * forked it) does, so a pl-bench killed leaves no workload running. */
void child_bind(pid_t parent);

/* ---- stores ---- */
extern const char *g_pg_uri; /* --store postgresql://..., or NULL */
/* A connection to g_pg_uri, and a statement run on it (bench_pg.c): each
 * ends the process when it fails. */
PGconn *pg_connect(void);
void pg_sql(PGconn *c, const char *sql);
void path_in(char *out, size_t n, const char *name); /* a store's path */
void remove_store(const char *path);
pl_registry *make_registry(bool killer); /* "tool" and the bench roots */
pl_engine *open_engine(const char *path, pl_registry *reg, pl_durability d,
                       pl_event_fn fn);

/* The write transactions of the store of @p e so far, each one sync in
 * sync mode: LMDB's last transaction id; on PostgreSQL the server's next
 * transaction id (every writing transaction takes one), read on a
 * connection of the process's own. */
uint64_t store_commits(pl_engine *e);
/* The floor's time per commit, synced, alone: one raw LMDB put (or, with
 * --store, one 160 B INSERT) and commit; median of PROBE_REPS probes. */
double floor_commit_s(void);

/* ---- the raw-LMDB floor ---- */
MDB_env *raw_open(const char *name, pl_durability mode, MDB_dbi *dbi);
void raw_close(MDB_env *env, const char *name);
void raw_commits(MDB_env *env, MDB_dbi dbi, int id, int from, int n, bool call,
                 bool alone);

/* ---- the report: the JSON document, a line of the table (not with
 * --json), a number in an object, a goal (a ceiling when @p at_most) ---- */
extern cJSON *g_json;
extern bool g_print_json;
void jnum(cJSON *o, const char *k, double v);
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void add_goal(const char *what, double value, const char *unit, bool at_most,
              double target);
/* A goal not judged when @p noise is a drift_end() note. */
void add_goal_noted(const char *what, double value, const char *unit,
                    bool at_most, double target, const char *noise);

/* ---- noise: the floor probed before and after a workload ---- */
#define PROBE_REPS 3
typedef struct probe_res {
    double s[PROBE_REPS]; /* time per commit */
    int n;
} probe_res;
typedef struct drift {
    pl_durability mode;
    bool settle; /* on PostgreSQL: pg_settle() before each probe */
    double before[PROBE_REPS], after[PROBE_REPS];
    int nb, na;
    char note[64]; /* "" or "floor moved N%: noisy host" */
} drift;
void drift_begin(drift *d, pl_durability mode);
/* drift_begin(), the server settled before each probe (pg_settle()). */
void drift_begin_settled(drift *d, pl_durability mode);
const char *drift_end(drift *d, cJSON *o);
/* The probes' medians, their spread and the note of drift_end() in @p o,
 * beside the figures they judge (--json). */
void drift_json(drift *d, cJSON *o);

/*
 * ---- model_server.c ----
 * A thread serving canned OpenAI chat-completions answers over loopback,
 * HTTP/1.1 with keep-alive, each connection (SRV_CONNS at most) on a thread
 * of its own.  While tools is above 0 an answer is a call of "tool"; then a
 * final text.  A request with "stream":true is answered with a stream of
 * server-sent events (chunked): a text in STREAM_DELTAS deltas, its usage
 * and [DONE].  It counts every request.
 */
#define STREAM_DELTAS 8
#define SRV_CONNS 8
typedef struct bench_srv {
    int fd, port;
    atomic_int tools;     /* tool-call answers left to give */
    atomic_long requests; /* requests served */
    atomic_bool stop;
    atomic_int conns[SRV_CONNS]; /* the connections served, or -1 */
    pthread_t th;
} bench_srv;
extern bench_srv g_srv;
void srv_start(void);
void srv_stop(void);

/* ---- bench_stream.c: W5 streamed; the number of failures ---- */
int report_w5_stream(bool quick);

/* ---- bench_time.c: W7 and W8; the number of failures ---- */
int report_w7(bool quick);
int report_w8(void);

/* ---- options.c: the usage, and the workloads --only names ---- */
/* A bit per workload: w1..w8 as 1 << 1 .. 1 << 8, and these. */
#define ONLY_FANOUT (1u << 16) /* --only fanout */
#define ONLY_CHURN (1u << 17)  /* --only churn (churn.c) */
#define ONLY_AGENT (1u << 18)  /* --only agent (agent_chain.c) */
#define ONLY_RATE (1u << 19)   /* --only rate (bench_rate.c) */
#define ONLY_MCP (1u << 20)    /* --only mcp (bench_mcp.c) */
#define ONLY_TAKE (1u << 21)   /* --only take (bench_take.c) */
#define ONLY_ALL                                                               \
    (0x1feu | ONLY_FANOUT | ONLY_CHURN | ONLY_AGENT | ONLY_RATE | ONLY_MCP |   \
     ONLY_TAKE)
#define ONLY_NAMES "w1..w8, fanout, churn, agent, rate, mcp and take"

void usage(FILE *f);
/* "w1,churn" -> their bits; 0 when malformed. */
unsigned parse_only(const char *list);

/* ---- churn.c: runs created and pruned cycle after cycle, the store's size ---- */
typedef struct churn_config {
    const char *store;     /* an LMDB path, or a postgresql:// URI */
    const char *pg_server; /* PostgreSQL: the server's URI, to VACUUM */
    const char *pg_schema; /* and the store's schema */
    pl_durability durability;
    uint64_t tombstone_ms; /* pl_engine_options.tombstone_ms */
    unsigned runs, cycles; /* runs per cycle; cycles */
    unsigned warm;         /* the cycle whose size is the reference */
    void (*progress)(unsigned cycle, uint64_t bytes, void *user);
    void *progress_user;
} churn_config;

typedef struct churn_result {
    uint64_t bytes_warm, bytes_last; /* after cycle warm, after the last */
    uint64_t runs_left, steps_left;  /* records after the last prune */
    double ratio;                    /* bytes_last / bytes_warm */
    double seconds;
} churn_result;

/* Run the workload: PL_OK, or the status that stopped it. */
int churn_run(const churn_config *cfg, churn_result *out);

/* pl-bench's report of it: LMDB in @p dir, or PostgreSQL on @p pg_uri. */
typedef struct churn_report {
    bool quick, quiet; /* quiet: --json */
    const char *dir, *pg_uri;
    cJSON *json; /* the figures go in "churn" or "churn_pg" */
} churn_report;

/* 0, or 1 when the workload could not run. */
int churn_report_run(const churn_report *r);

/* ---- agent_chain.c: 10,000 turns as a chain of runs continued as new ---- */
typedef struct agent_chain_config {
    const char *store; /* an LMDB path */
    int turns;         /* in all; 100 a link */
} agent_chain_config;

typedef struct agent_chain_result {
    int links;
    double exec_first_ms, exec_last_ms;       /* a link's 100 turns */
    double replay_first_ms, replay_last_ms;   /* a continued link replayed */
    double recover_first_ms, recover_last_ms; /* failed half way, recovered */
    double heap_first_kib, heap_last_kib;     /* after link 10, at the end */
} agent_chain_result;

int agent_chain_run(const agent_chain_config *cfg, agent_chain_result *out);

/* pl-bench's report (the figures in @p json's "long_agent"): 0, or 1 when
 * it could not run. */
int agent_chain_report(bool quick, bool quiet, const char *dir, cJSON *json);

/* ---- bench_mcp.c: the mcp workload (--only mcp); the failures ---- */
int report_mcp(bool quick);
/* take (bench_take.c): a take of the queue's head with many runs running
 * ahead of it, on PostgreSQL only; 0, or 1 when it failed. */
int report_take(bool quick);
int report_take_keys(bool quick, cJSON *o); /* within take's */
/* bench_keys_scale.c: a wake and a take past what keys refuse */
int report_keys_scale(bool quick, cJSON *o);
/* The shared buffers the EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) @p sql
 * reports, hit or read, on its second run (the first plans it), in a
 * transaction rolled back; -1 if unknown. */
long explain_buffers(PGconn *c, const char *sql);
/* @p n wakes (@p wake) or takes of store @p s (schema @p schema), each
 * timed into t[i] and expected to take run @p first + i * @p step, its
 * lease dropped after it (outside the time): 1 on a wrong one; *done
 * those done before. */
struct pl__pg_store;
int timed_takes(struct pl__pg_store *s, PGconn *c, const char *schema,
                bool wake, int n, uint64_t first, uint64_t step, double *t,
                int *done);
/* A take case's end: its figures into @p k, @p t freed, @p c, @p s and
 * the store at @p path gone. */
void take_case_end(cJSON *k, double p50, double p99, long buffers, double *t,
                   PGconn *c, struct pl__pg_store *s, const char *path);
int report_keys_scale_lmdb(bool quick, cJSON *o); /* without --store */
/* bench_take.c: a new PostgreSQL store open, its schema; runs 1..count
 * of its schema, each with a state; a take's claim refused (the lease
 * kept) */
void take_runs(PGconn *c, const char *schema, int count);
struct pl__taken;
struct pl__buf;
struct pl__pg_store;
const char *take_open(const char *name, char *path, size_t size,
                      struct pl__pg_store **s);
int take_refuse(const struct pl__taken *t, struct pl__buf *state, bool *drop,
                void *user);

/* ---- bench_rate.c ---- */
/* The rate workload on the store at @p path; the failures. */
int bench_rate(bool quick, const char *path);

/* ---- what the workloads' files share (see bench.c for the workloads) ---- */
extern int g_reps;                   /* REPS, or fewer with --quick */
extern bool g_quick;                 /* --quick: proves each workload runs */
extern char g_dir[1024];             /* where the stores go */
extern const pl_durability modes[3]; /* sync, group, process */

/* bench_util.c: fn(arg, result) in a child, started and collected apart */
pid_t child_start(child_fn fn, const void *arg, void *result, size_t size,
                  int *from_child);
int child_finish(pid_t pid, int from_child, void *result, size_t size);
void report_goals(bool quick);

/* bench_policies.c */
/* W1's turns with its floors (see w1_turns): every TURN calls the root
 * hands the disk to the floors' process and waits for it to hand back. */
#define TURN 100

typedef struct turn_state {
    int out, in;   /* to and from the floors' process, or -1 */
    int pending;   /* calls made since the last turn */
    double paused; /* time spent waiting for the floors */
} turn_state;

extern turn_state g_turn;
extern double *g_lat; /* latencies of the calls a root makes (W1) */
extern size_t g_nlat;
extern double g_first_exec; /* W2: when the tool first ran after restart */
extern int g_kill_at;       /* W2 */
extern uint64_t g_commits;
int bench_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user);
void w2_event(const pl_event *ev, void *user);
void count_commits(const pl_event *ev, void *user);
int start_run(pl_engine *e, int n, const char *run_id);

/* bench_floor.c */
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

typedef struct scan_res {
    double open_read_s; /* open the env and read n records */
    double records_per_s;
} scan_res;

MDB_env *raw_env(const char *path, pl_durability mode);
void timed_threads(void *(*fn)(void *), void *args, size_t size, int threads,
                   int n, floor_res *r);
void floor_puts(const void *varg, void *vres);
int floor_scan(int n, scan_res *r);

/* bench_w1.c */
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

void w1_child(const void *varg, void *vres);
int report_w1(bool quick);

/* bench_w2.c, bench_w4.c, bench_w5.c, bench_w6.c, bench_fanout.c */
int report_w2(void);
int report_w4(bool quick);
int report_w5(bool quick);
int report_w6(bool quick);
int report_fanout(bool quick);

/* bench_w3.c */
typedef struct w3_arg {
    pl_durability mode;
    int runs, calls, threads;
    bool pool; /* runs as tasks of a pl_pool of `threads` threads */
} w3_arg;

typedef struct w3_res {
    double calls_per_s;
    double round_trips_per_call; /* on PostgreSQL */
    /* on PostgreSQL: CPU seconds a call, the server's (< 0: not on this
     * host) and this process's */
    double server_cpu_per_call, client_cpu_per_call;
} w3_res;

void w3_child(const void *varg, void *vres);
int report_w3(bool quick);

/* bench_pg.c */
void pg_path_in(char *out, size_t n, const char *name);
void pg_remove(const char *path);
void pg_floor(const void *varg, void *vres);
/* The drift's probe: PROBE_REPS times per commit, after a warm-up, each
 * of floor_arg.n commits on one session (a probe_res). */
void pg_probe(const void *varg, void *vres);
/* Write the server's dirty pages and wait for its autovacuum workers. */
void pg_settle(void);
/* A floor taken one commit at a time, in turns with a workload (W8): a
 * fresh table @p name and a session in @p mode; pg_floor_turn() makes one
 * 160 B INSERT committed alone (record @p i), pg_floor_turns_end() drops
 * the table. */
PGconn *pg_floor_turns(const char *name, pl_durability mode);
void pg_floor_turn(PGconn *c, int i);
void pg_floor_turns_end(PGconn *c, const char *name);
/* The postmaster's pid, the parent of a session's backend (-1: the server
 * is not on this host, or its processes cannot be read). */
long long pg_postmaster(void);
/* CPU seconds the server of postmaster @p pm has used: its live processes'
 * (/proc/PID/schedstat) and its reaped children's (cutime, cstime); < 0
 * when they cannot be read. */
double pg_server_cpu_s(long long pm);
/* The server's WAL flushes (pg_stat_wal's wal_sync) and its database's
 * commits so far, once every other session has ended (their statistics
 * reach the server as they end); -1 when they cannot be read. */
int pg_wal_counts(long long *syncs, long long *commits);
/* The CPU seconds a /proc/.../schedstat file says its task has run; 0 when
 * it cannot be read (the task has ended). */
double schedstat_s(const char *path);
/* CPU seconds this process has used (getrusage()). */
double self_cpu_s(void);
int report_pg_w1(bool quick);
int report_pg_w3(bool quick);

#endif /* PL_BENCH_H */
