/*
 * replay_time.c -- ledger-replay --signal, --cancel and --wake: an event
 * for a run, a run cancelled, the waiting runs whose time has come.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* A delivery's result: the run's outcome when it was continued here. */
static void report_delivery(tool *t, const char *what, int st, pl_outcome *o,
                            double t0)
{
    if (st) {
        cli_error("cannot %s run %s: %s (%s)", what, QUOTE(t->opt.run),
                  pl_errmsg(), pl_status_name(st));
        worst(t, st == PL_ESTATE || st == PL_EINVAL || st == PL_EJSON ||
                         st == PL_ELIMIT
                     ? EXIT_USAGE
                 : st == PL_ENOTFOUND ? EXIT_OPEN
                                      : write_code(st));
        return;
    }
    if (o) {
        report_outcome(t, o, now_ms() - t0, NULL);
        return;
    }
    cJSON *j = json_run(t, t->opt.run);
    if (j)
        cJSON_AddStringToObject(j, "status", "delivered");
    if (!t->opt.json)
        printf("run %s: %s delivered\n", t->opt.run, what);
}

/* The payload is checked before the store is opened: a refused signal
 * opens and writes nothing. */
int prepare_signal(tool *t)
{
    t->payload = cli_parse_object(t->opt.payload, "--payload");
    return t->payload ? 0 : EXIT_USAGE;
}

void mode_signal(tool *t)
{
    double t0 = now_ms();
    pl_outcome *o = NULL;
    /* with policies loaded, a run waiting for it goes on here */
    int st = pl_run_signal(t->opt.n_plugins ? &o : NULL, t->engine, t->opt.run,
                           t->opt.name, t->payload);
    report_delivery(t, "signal", st, o, t0);
    pl_outcome_free(o);
}

void mode_cancel(tool *t)
{
    double t0 = now_ms();
    int st = pl_run_cancel(t->engine, t->opt.run,
                           t->opt.reason ? t->opt.reason : "");
    report_delivery(t, "cancel", st, NULL, t0);
    pl_run_info *ri = NULL;
    if (!st && !pl_run_get(&ri, t->engine, t->opt.run) && !t->opt.json)
        printf("  now %s%s\n", pl_run_status_name(ri->status),
               ri->status == PL_RUN_WAITING
                   ? " (its policies are not loaded here: a worker, or "
                     "--wake with its plugin, ends it)"
               : ri->status == PL_RUN_RUNNING
                   ? " (it sees the cancellation at its next call)"
                   : "");
    pl_run_info_free(ri);
}

void mode_wake(tool *t)
{
    int64_t next = 0;
    int st = pl_engine_wake(t->engine, &next);
    if (st) {
        cli_error("cannot wake the waiting runs: %s (%s)", pl_errmsg(),
                  pl_status_name(st));
        worst(t, write_code(st));
        return;
    }
    char when[40] = "none";
    if (next)
        cli_time_human(when, sizeof when, next * 1000);
    if (t->opt.json) {
        cJSON *j = json_run(t, "next_due");
        if (j)
            cJSON_AddNumberToObject(j, "due_ms", (double)next);
    } else {
        printf("next due: %s%s\n", when, next ? " UTC" : "");
    }
}
