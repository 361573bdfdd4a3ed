/*
 * support_workflow_fx.h -- what test_workflow.c reads back: the file the
 * tools of the order workflow (support_workflow.h) write, and the runs'
 * ledgers.
 */
#ifndef PL_TESTS_SUPPORT_WORKFLOW_FX_H
#define PL_TESTS_SUPPORT_WORKFLOW_FX_H

#include "support.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A worker process's end. */
typedef struct death {
    long pid;
    long long t; /* reaped: the process was dead by then */
    bool mid;    /* killed while the runs went on (not at the end) */
} death;

/* A run whose lease a worker lost (PL_EVENT_LEASE_LOST: it stalled longer
 * than the lease), or whose execution stopped with the run left as it was
 * (PL_EVENT_RUN_STOPPED: a commit the store failed on a loaded host, a run
 * left for newer code): the run went on in another; the call it was in
 * may have run again there, as for a worker killed.  "<pid> <run> <kind>
 * <status> <detail>" a line. */
typedef struct lapse {
    long pid;
    char run[PL_MAX_RUN_ID + 1];
    char why[200]; /* the rest of its line: kind, status, detail */
} lapse;

/* Whether process @p pid lost run @p run so (one of @p lp). */
bool fx_lapsed(const lapse *lp, int nl, long pid, const char *run);

/* A tool's effect: "E <key> <tool> <pid>". */
typedef struct exec_rec {
    char key[PL_MAX_RUN_ID + 64];
    char tool[16];
    long pid;
} exec_rec;

/* A tool's entry (+1) or exit (-1) of a call of run @p run. */
typedef struct edge {
    long long t;
    int delta; /* +1 enter, -1 leave */
    char run[PL_MAX_RUN_ID + 1];
} edge;

typedef struct effects {
    exec_rec *x;
    size_t nx, capx;
    edge *ev;
    size_t nev, capev;
} effects;

/* Read the effects file @p path into @p fx; a call a process was inside
 * when it died (one of @p d) ends at its death; the calls of a run whose
 * lease its process lost (one of @p lp) are not counted inside. */
void fx_read(effects *fx, const char *path, const death *d, int nd,
             const lapse *lp, int nl);

/* The most runs whose id begins "order-" inside a call at one instant. */
int fx_most_inside(effects *fx);

/* Whether process @p pid was killed while the runs went on. */
bool fx_died_mid(const death *d, int nd, long pid);

/* The realtime (ns) of the last "B" line of @p key's run by @p pid before
 * the effect line of @p key by @p pid: the start of that execution. */
long long fx_started_ns(const char *path, const char *key, long pid);

/* What wf_visit_step() (a pl_run_walk() visitor) counts: the rate
 * limit's takes by window, the tools' calls, and the run's version. */
typedef struct walk {
    pl_engine *e;
    const char *run;
    int windows[4096]; /* admitted charges by window, modulo */
    long long window_of[4096];
    int worst; /* most admitted in one window */
    int takes;
    int tool_calls; /* calls of the tools */
    int notes;      /* calls of the model's policy "note" */
    int crm;        /* calls of the MCP server's "echo" */
    int refused;    /* takes refused: the call waited */
    /* this run's root ledger: its version, where it invoiced */
    int version;
    bool reserved, invoiced_first;
    int steps;
    int runs_of[3]; /* runs that invoiced, by version */
} walk;

int wf_visit_step(const pl_step *s, void *user);

/* When the result of the call whose idempotency key is @p key was
 * appended to its caller's ledger (Unix us). */
int64_t wf_result_us(pl_engine *e, const char *key);

/* The tools/call requests the MCP server's log @p log holds: *distinct
 * idempotency keys, *total requests. */
void fx_mcp_calls(const char *log, int *distinct, int *total);

#endif
