/*
 * reminder.c -- wait for an approval; each time none comes within the
 * period, send a reminder and wait again.
 *
 * The run holds no thread while it waits: it is parked in the store with
 * its wake time, and pl_engine_wake() (or a worker) continues it when the
 * period is over.  The approval is an event that anyone can send with
 * pl_run_signal() (or `ledger-replay STORE --signal ID --name approved
 * --payload JSON`).  Here one process plays every part: the approver
 * answers after the run's second reminder, counted in its ledger, so a
 * run killed and started again is approved as one never killed.
 *
 *   reminder [STORE] [PERIOD_MS]     (default: reminder.db, 200 ms)
 *
 * PERIOD_MS is the run's: run again on a store whose run exists, the run
 * goes on with its own period, and another PERIOD_MS is bad usage.
 *
 * Exit status: 0 approved, 1 the run failed or gave up (no approval after
 * its third reminder) or the store cannot be opened, 2 bad usage.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger.h>

#include "help.h"

static int g_sent; /* reminders sent by this process */

/* The side effect: here a line on stdout; an e-mail in real life. */
static int send_reminder(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *to = cJSON_GetObjectItem(a->payload, "to");
    printf("reminder sent to %s\n", cJSON_IsString(to) ? to->valuestring : "?");
    g_sent++;
    return pl_steps_add_resultf(out, "{s:b}", "sent", 1);
}

/* The workflow: the whole of the waiting and reminding logic. */
static int approval(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *period = cJSON_GetObjectItem(a->payload, "period_ms");
    for (int reminders = 0; reminders < 3; reminders++) {
        cJSON *answer = NULL;
        int st = pl_ctx_wait_event(&answer, ctx, "approved",
                                   (int64_t)period->valuedouble);
        if (st == PL_OK) { /* approved: the event's payload is the answer */
            st = pl_steps_add_resultf(out, "{s:O, s:i}", "answer", answer,
                                      "reminders", reminders);
            cJSON_Delete(answer);
            return st;
        }
        if (st != PL_ETIMEDOUT) /* parked (PL_ESUSPENDED), cancelled, ... */
            return st;
        if ((st = pl_ctx_invoke(NULL, ctx, "send_reminder", a->payload)))
            return st;
    }
    return pl_steps_add_resultf(out, "{s:b}", "gave_up", 1);
}

/* The reminders run @p id has sent: send_reminder's results in its root
 * ledger, whichever process sent them (a run continued after a crash has
 * sent some before this process began). */
static int reminders_of(pl_engine *e, const char *id, int64_t *n)
{
    pl_steps *steps = NULL;
    int st = pl_run_ledger(&steps, e, id, "0");
    for (size_t i = 0; !st && i < pl_steps_count(steps); i++) {
        const pl_step *s = pl_steps_at(steps, i);
        *n += pl_step_type_of(s) == PL_STEP_ACTION_RESULT &&
              !strcmp(pl_step_actor(s), "send_reminder");
    }
    pl_steps_free(steps);
    return st;
}

#define BAD_USAGE 2 /* an exit status; no pl_status (those are negative) */

/* The period of run @p id when it exists: *period, when given, must be its
 * own (else BAD_USAGE, said); when not, it becomes the run's own.  A new
 * run's is *period, or 200 ms.  A pl_status when the run cannot be read. */
static int run_period(pl_engine *e, const char *id, long *period)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    const cJSON *had = st ? NULL
                          : cJSON_GetObjectItemCaseSensitive(info->payload,
                                                             "period_ms");
    long own = cJSON_IsNumber(had) ? (long)had->valuedouble : 200;
    if (st == PL_ENOTFOUND || (!st && !*period)) {
        *period = *period ? *period : own;
        st = PL_OK;
    } else if (!st && *period != own) {
        fprintf(stderr,
                "reminder: run %s waits with a period of %ld ms, not %ld: "
                "give that PERIOD_MS, none, or another STORE\n",
                id, own, *period);
        st = BAD_USAGE;
    }
    pl_run_info_free(info);
    return st;
}

/* Sleep until @p due_ms (Unix ms), or a moment when it is past. */
static void nap_until(int64_t due_ms)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ms = due_ms - ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    if (ms < 1)
        ms = 1;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static pl_run_status status_of(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    pl_run_status s = pl_run_get(&info, e, id) ? PL_RUN_FAILED : info->status;
    pl_run_info_free(info);
    return s;
}

/* The arguments: 0; 2 for bad usage (said in one line); -1 for a --help
 * printed, 1 for one that could not be. */
static int parse_args(int argc, char **argv, const char **path, long *period)
{
    static const char use[] = "usage: reminder [STORE] [PERIOD_MS]";
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        printf("%s   (default: reminder.db, 200 ms; a run that exists "
               "keeps its own)\n",
               use);
        return help_written("reminder") ? 1 : -1;
    }
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && (argv[i][1] < '0' || argv[i][1] > '9')) {
            fprintf(stderr, "reminder: unknown option '%s' (%s)\n", argv[i],
                    use);
            return 2;
        }
    if (argc > 3) {
        fprintf(stderr, "reminder: too many arguments (%s)\n", use);
        return 2;
    }
    *path = argc > 1 ? argv[1] : "reminder.db";
    *period = 0; /* not given: 200 ms, or the run's own */
    if (argc > 2) {
        char *end;
        errno = 0;
        *period = strtol(argv[2], &end, 10);
        if (errno || end == argv[2] || *end || *period < 1 ||
            *period > INT_MAX) {
            fprintf(stderr,
                    "reminder: PERIOD_MS is a number of milliseconds from 1 "
                    "to %d, not '%s'\n",
                    INT_MAX, argv[2]);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path;
    long period;
    int usage = parse_args(argc, argv, &path, &period);
    if (usage)
        return usage < 0 ? 0 : usage;
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_outcome *o = NULL;
    cJSON *payload = NULL, *yes = NULL;
    pl_policy_def d1 = PL_POLICY_DEF_INIT, d2 = PL_POLICY_DEF_INIT;
    d1.name = "approval";
    d1.fn = approval;
    d2.name = "send_reminder";
    d2.fn = send_reminder;
    int st = pl_registry_new(&reg);
    if (!st)
        st = pl_registry_add(reg, &d1);
    if (!st)
        st = pl_registry_add(reg, &d2);
    if (!st)
        st = pl_engine_open(&e, path, reg, NULL);
    if (!st) /* every wait parks the run, however short */
        st = pl_engine_set_wait_in_place(e, 0);
    if (!st && (st = run_period(e, "approval-1", &period)) == BAD_USAGE)
        goto done; /* another PERIOD_MS than the run's: said */
    if (!st)
        st = pl_json_pack(&payload, "{s:s, s:i}", "to", "alice@example.com",
                          "period_ms", (int)period);
    pl_action root = PL_ACTION_INIT;
    root.policy = "approval";
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "approval-1";
    /* a second time, the run exists: its ledger is replayed instead */
    ro.if_exists = PL_IF_EXISTS_CONTINUE;
    if (!st)
        st = pl_run_start(&o, e, &root, &ro);
    if (!st)
        printf("run %s: %s\n", o->run_id, pl_run_status_name(o->status));
    /* the embedder's loop: continue what is due, sleep until the next;
     * after the run's second reminder, someone approves */
    bool approved = false;
    while (!st && status_of(e, ro.run_id) == PL_RUN_WAITING) {
        int64_t next = 0, sent = 0;
        if (!approved && !(st = reminders_of(e, ro.run_id, &sent)) &&
            sent >= 2) {
            approved = true;
            pl_outcome_free(o);
            o = NULL;
            if (!(st = pl_json_pack(&yes, "{s:s}", "by", "bob")))
                st = pl_run_signal(&o, e, ro.run_id, "approved", yes);
        } else if (!st && !(st = pl_engine_wake(e, &next)) && next) {
            nap_until(next);
        }
    }
    if (!st && (!o || o->status != PL_RUN_COMPLETED)) {
        pl_outcome_free(o);
        st = pl_run_continue(&o, e, ro.run_id, NULL); /* replays the end */
    }
    if (!st) {
        size_t n = pl_steps_count(o->steps);
        char *r = n ? cJSON_PrintUnformatted(
                          pl_step_payload(pl_steps_at(o->steps, n - 1)))
                    : NULL;
        printf("run %s: %s %s (reminders sent by this process: %d)\n",
               o->run_id, pl_run_status_name(o->status), r ? r : "", g_sent);
        free(r);
    }
    if (!st && o->status != PL_RUN_COMPLETED) /* it failed: say so */
        st = pl_errorf(PL_EPOLICY, "run %s ended %s: %s", o->run_id,
                       pl_run_status_name(o->status),
                       o->reason ? o->reason : "");
    else if (!st && !cJSON_HasObjectItem(pl_outcome_result(o), "answer"))
        st = pl_errorf(PL_EPOLICY, /* completed, but no approval came */
                       "run %s gave up: no approval after 3 reminders",
                       o->run_id);
    if (st)
        fprintf(stderr, "reminder: %s (%s)\n", pl_errmsg(), pl_status_name(st));
done:
    cJSON_Delete(yes);
    cJSON_Delete(payload);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
    return st == BAD_USAGE ? BAD_USAGE : st ? 1 : 0;
}
