/*
 * dump.h -- what the files of ledger-dump share: its options and one
 * function per command.  ledger-dump.c parses the command line and
 * dispatches; dump_list.c lists runs and counts them (--stats);
 * dump_tree.c shows one run (--run, --follow, the export); dump_verify.c
 * is --verify; dump_sched.c --schedules.
 */
#ifndef PL_DUMP_H
#define PL_DUMP_H

#include "runview.h"

#define SHORT_PAYLOAD 120 /* bytes of payload shown without --full */
#define FOLLOW_POLL_MS 200
#define TOP_RUNS 5
/* The highest run status a store may hold (pl_run_status; some are unused). */
#define STATUS_MAX 15

typedef enum { FMT_TEXT, FMT_JSON, FMT_JSONL } out_format;

typedef struct opts {
    const char *store;
    const char *run;
    out_format format;
    bool full, follow, verify, stats, chain, schedules;
    bool has_status;
    pl_run_status status;
    const char *policy, *actor, *invocation;
    bool has_type;
    pl_step_type type;
    bool has_since;
    int64_t since_us;
} opts;

/* ---- dump_list.c ---- */

/* Each command returns the tool's exit status. */
int cmd_list(pl_engine *e, const opts *o);
int cmd_stats(pl_engine *e, const opts *o);
/* --run ID --chain: the links of a chain of runs continued as new */
int cmd_chain(pl_engine *e, const opts *o);
/* dump_tree.c */
int cmd_run(pl_engine *e, const opts *o);
/* dump_verify.c */
int cmd_verify(pl_engine *e, const opts *o);
/* dump_sched.c */
int cmd_schedules(pl_engine *e, const opts *o);

#endif /* PL_DUMP_H */
