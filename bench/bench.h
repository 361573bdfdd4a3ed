/*
 * bench.h -- what pl-bench's files share: clocks, child processes, stores,
 * the raw-LMDB floor, the report and its goals, the noise probe, the
 * loopback model server.
 *
 *   bench.c         the workloads W1..W6 and fanout, the goals, main()
 *   bench_time.c    W7 (parked timers) and W8 (a signal to a waiting run)
 *   bench_rate.c    rate (one rate limit shared by three processes)
 *   model_server.c  the loopback model server W5 talks to
 *   bench_stream.c  W5 streamed: time to the first delta
 *   bench_mcp.c     mcp: a recorded MCP call against a bare JSON-RPC one
 */
#ifndef PL_BENCH_H
#define PL_BENCH_H

#include <cjson/cJSON.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

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

/* ---- stores ---- */
extern const char *g_pg_uri; /* --store postgresql://..., or NULL */
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
typedef struct drift {
    pl_durability mode;
    double before[PROBE_REPS];
    int nb;
    char note[64]; /* "" or "floor moved N%: noisy host" */
} drift;
void drift_begin(drift *d, pl_durability mode);
const char *drift_end(drift *d, cJSON *o);

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

/* ---- bench_mcp.c: the mcp workload (--only mcp); the failures ---- */
#define ONLY_MCP (1u << 18)
int report_mcp(bool quick);

/* ---- bench_rate.c ---- */
/* The rate workload on the store at @p path; the failures. */
int bench_rate(bool quick, const char *path);

#endif /* PL_BENCH_H */
