/*
 * bench.h -- what pl-bench's workloads share: clocks, child processes,
 * stores, the raw-LMDB floor, the report and its goals, the noise probe.
 * bench.c holds the workloads W1..W6 and the main program; bench_time.c
 * holds W7 (parked timers) and W8 (a signal to a waiting run).
 */
#ifndef PL_BENCH_H
#define PL_BENCH_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>

#include <policyledger.h>

/* ---- clocks and memory ---- */
double now_s(void);                /* monotonic, s */
long status_kb(const char *field); /* /proc/self/status: "VmHWM", ... */
double percentile(double *v, size_t n, double p); /* sorts v */
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

/* ---- the raw-LMDB floor ---- */
MDB_env *raw_open(const char *name, pl_durability mode, MDB_dbi *dbi);
void raw_close(MDB_env *env, const char *name);
void raw_commits(MDB_env *env, MDB_dbi dbi, int id, int from, int n, bool call,
                 bool alone);

/* ---- the report ---- */
extern cJSON *g_json;
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

/* ---- bench_time.c ---- */
int report_w7(bool quick);
int report_w8(void);

#endif /* PL_BENCH_H */
