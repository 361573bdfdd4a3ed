/*
 * options.h -- pl-bench's command line (options.c): the usage, and the
 * workloads --only names.
 */
#ifndef PL_BENCH_OPTIONS_H
#define PL_BENCH_OPTIONS_H

#include <stdio.h>

/* A bit per workload: w1..w8 as 1 << 1 .. 1 << 8, and these. */
#define ONLY_FANOUT (1u << 16) /* --only fanout */
#define ONLY_CHURN (1u << 17)  /* --only churn (churn.c) */
#define ONLY_AGENT (1u << 18)  /* --only agent (agent_chain.c) */
#define ONLY_ALL (0x1feu | ONLY_FANOUT | ONLY_CHURN | ONLY_AGENT)
#define ONLY_NAMES "w1..w8, fanout, churn and agent"

void usage(FILE *f);

/* "w1,churn" -> their bits; 0 when malformed. */
unsigned parse_only(const char *list);

#endif /* PL_BENCH_OPTIONS_H */
