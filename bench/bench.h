/*
 * bench.h -- what pl-bench's workloads in files of their own (bench_*.c)
 * take from bench.c: where to print, the JSON document, the goals.
 */
#ifndef PL_BENCH_H
#define PL_BENCH_H

#include <stdbool.h>

#include <cjson/cJSON.h>

typedef struct bench_out {
    /* print a line of the table (nothing with --json) */
    void (*say)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
    cJSON *json; /* the document: a workload adds its object */
    /* a goal checked for the reader: @p value against @p target, a ceiling
     * when @p at_most */
    void (*goal)(const char *what, double value, const char *unit, bool at_most,
                 double target);
} bench_out;

/* The rate workload (bench_rate.c) on the store at @p path; the failures. */
int bench_rate(bool quick, const char *path, const bench_out *out);

#endif /* PL_BENCH_H */
