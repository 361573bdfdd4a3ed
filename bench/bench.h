/*
 * bench.h -- what pl-bench's files share:
 *
 *   bench.c         the workloads W1..W6 and fanout, the goals, main()
 *   model_server.c  the loopback model server W5 talks to
 *   bench_stream.c  W5 streamed: time to the first delta
 */
#ifndef PL_BENCH_H
#define PL_BENCH_H

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

/* The monotonic clock, in seconds. */
double now_s(void);
/* Say what failed (with pl_errmsg()) and end the process. */
void die(const char *what) __attribute__((noreturn));
/* The median of n values (at most REPS_MAX). */
double median(double *v, int n);

/* Run fn(arg, result) in a child process; result is size bytes sent back.
 * 0, or -1 if the child failed. */
typedef void (*child_fn)(const void *arg, void *result);
int in_child(child_fn fn, const void *arg, void *result, size_t size);

/* A store named @p name in the run's directory, and its removal. */
void path_in(char *out, size_t n, const char *name);
void remove_store(const char *path);
pl_engine *open_engine(const char *path, pl_registry *reg, pl_durability d,
                       pl_event_fn fn);

/* The report: the JSON document, a line of the table (not with --json),
 * a number in an object, a goal (a ceiling when @p at_most). */
extern cJSON *g_json;
extern bool g_print_json;
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void jnum(cJSON *o, const char *k, double v);
void add_goal(const char *what, double value, const char *unit, bool at_most,
              double target);

/*
 * model_server.c: a thread serving canned OpenAI chat-completions answers
 * over loopback, HTTP/1.1 with keep-alive, each connection (SRV_CONNS at
 * most) on a thread of its own.  While tools is above 0 an answer is a call of
 * "tool"; then a final text.  A request with "stream":true is answered
 * with a stream of server-sent events (chunked): a text in STREAM_DELTAS
 * deltas, its usage and [DONE].  It counts every request.
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

/* bench_stream.c: W5 streamed; the number of failures. */
int report_w5_stream(bool quick);

#endif
