/*
 * agent_chain.h -- pl-bench's long agent (agent_chain.c): 10,000 turns as
 * a chain of runs continued as new, its last links against its first.
 */
#ifndef PL_BENCH_AGENT_CHAIN_H
#define PL_BENCH_AGENT_CHAIN_H

#include <policyledger.h>

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

#endif /* PL_BENCH_AGENT_CHAIN_H */
