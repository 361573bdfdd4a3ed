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
        /* the message first: a tombstone looked for replaces it */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pl_errmsg());
        t->why = st;
        if (st != PL_ENOTFOUND || !cli_say_deleted(t->engine, t->opt.run))
            cli_error("cannot %s run %s: %s (%s)", what, QUOTE(t->opt.run), msg,
                      pl_status_name(st));
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
        printf("run %s: %s delivered\n", cli_text(t->opt.run), cli_text(what));
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

static void report_woken(tool *t, const woken *r);

/* The run a cancellation reached: @p id, or the link its chain has gone
 * on to (a delivery goes to the link that is going on, past deleted
 * ones); NULL if unread. */
static pl_run_info *cancelled_link(tool *t, const char *id)
{
    char cur[PL_MAX_RUN_ID + 1];
    snprintf(cur, sizeof cur, "%s", id);
    for (int hops = 0;; hops++) {
        pl_run_info *ri = NULL;
        pl_tombstone tomb = PL_TOMBSTONE_INIT;
        if (pl_run_get(&ri, t->engine, cur)) {
            pl_run_info_free(ri);
            /* deleted after it continued as new: on past it */
            char next[PL_MAX_RUN_ID + 1];
            if (hops == 1000 || pl_run_tombstone(&tomb, t->engine, cur) ||
                tomb.status != PL_RUN_CONTINUED ||
                !cli_chain_next_id(next, cur))
                return NULL;
            memcpy(cur, next, sizeof cur);
            continue;
        }
        if (ri->status != PL_RUN_CONTINUED || !ri->successor || hops == 1000)
            return ri;
        snprintf(cur, sizeof cur, "%s", ri->successor);
        pl_run_info_free(ri);
    }
}

/* A run the cancellation ended here is summed up as --run sums it up and
 * folded into the exit status (5: cancelled); one only marked (waiting,
 * its policies not loaded here; running in another process) is
 * "delivered", and what it is now is said. */
void mode_cancel(tool *t)
{
    double t0 = now_ms();
    t->w.wake = true; /* the run continued here, if it is, as --wake notes */
    int st = pl_run_cancel(t->engine, t->opt.run,
                           t->opt.reason ? t->opt.reason : "");
    t->w.wake = false;
    if (st) {
        report_delivery(t, "cancel", st, NULL, t0);
        return;
    }
    bool ended = false;
    for (size_t i = 0; i < t->w.n_woken; i++)
        if (t->w.woken[i].ended) {
            report_woken(t, &t->w.woken[i]);
            ended = true;
        }
    if (ended)
        return;
    pl_run_info *ri = cancelled_link(t, t->opt.run);
    if (ri && ri->status == PL_RUN_CANCELLED) {
        /* suspended or submitted: it ended at once, no policy ran */
        char id[PL_MAX_RUN_ID + 1];
        snprintf(id, sizeof id, "%s", ri->id);
        woken r = {.id = id, .elapsed_ns = (uint64_t)((now_ms() - t0) * 1e6)};
        report_woken(t, &r);
        pl_run_info_free(ri);
        return;
    }
    report_delivery(t, "cancel", st, NULL, t0);
    const char *now = ri ? pl_run_status_name(ri->status) : "unknown";
    cJSON *j = t->opt.json ? cJSON_GetArrayItem(t->runs,
                                                cJSON_GetArraySize(t->runs) - 1)
                           : NULL;
    if (j && !cJSON_AddStringToObject(j, "now", now))
        t->w.oom = true;
    if (!t->opt.json)
        printf("  now %s%s\n", now,
               !ri ? ""
               : ri->status == PL_RUN_WAITING
                   ? " (its policies are not loaded here: a worker, or "
                     "--wake with its plugin, ends it)"
               : ri->status == PL_RUN_RUNNING
                   ? " (it sees the cancellation at its next call)"
                   : "");
    pl_run_info_free(ri);
}

void watch_woken(watch *w, const pl_event *ev)
{
    if (ev->kind == PL_EVENT_SCHEDULE_FAILED && !w->sched_st) {
        w->sched_st = ev->status;
        w->sched_msg = dup_or_null(ev->detail ? ev->detail : "", &w->oom);
        w->sched_name = dup_or_null(ev->schedule, &w->oom);
    }
    if (!ev->run_id)
        return;
    woken *r = NULL;
    for (size_t i = w->n_woken; i-- > 0 && !r;)
        if (!strcmp(w->woken[i].id, ev->run_id))
            r = &w->woken[i];
    if (!r && ev->kind == PL_EVENT_RUN_STARTED) {
        woken *grown = realloc(w->woken, (w->n_woken + 1) * sizeof *grown);
        char *id = dup_or_null(ev->run_id, &w->oom);
        if (!grown || !id) {
            free(id);
            w->oom = true;
            if (grown)
                w->woken = grown;
            return;
        }
        w->woken = grown;
        r = &w->woken[w->n_woken++];
        memset(r, 0, sizeof *r);
        r->id = id;
    }
    if (!r)
        return;
    switch (ev->kind) {
    case PL_EVENT_CALL_SERVED: r->served++; break;
    case PL_EVENT_CALL_COMPLETED:
    case PL_EVENT_CALL_FAILED: r->executed++; break;
    case PL_EVENT_STEP_REPLAYED: r->replayed++; break;
    case PL_EVENT_STEP_APPENDED: r->appended++; break;
    case PL_EVENT_RUN_COMPLETED:
    case PL_EVENT_RUN_FAILED:
    case PL_EVENT_RUN_SUSPENDED:
        r->ended = true;
        r->elapsed_ns = ev->elapsed_ns;
        break;
    default: break;
    }
}

/* A run --wake continued, summed up as --run sums up its outcome. */
static void report_woken(tool *t, const woken *r)
{
    pl_run_info *ri = NULL;
    int st = pl_run_get(&ri, t->engine, r->id);
    if (st) {
        report_refused(t, r->id, st, refused_code(st));
        return;
    }
    pl_steps *root = NULL;
    if (ri->status == PL_RUN_COMPLETED &&
        pl_run_ledger(&root, t->engine, r->id, "0"))
        root = NULL; /* the summary goes without its result */
    /* the outcome's fields, borrowed from the record */
    pl_outcome o = {
        .status = ri->status,
        .run_id = r->id,
        .steps = root,
        .resume_token = (char *)ri->resume_token,
        .prompt = (cJSON *)ri->prompt,
        .suspended_path = (char *)ri->suspended_path,
        .error = ri->error,
        .reason = (char *)ri->reason,
        .calls_served = r->served,
        .calls_executed = r->executed,
        .steps_replayed = r->replayed,
        .steps_appended = r->appended,
        .wake_ms = ri->wake_ms,
        .wait_event = (char *)ri->wait_event,
        .successor = (char *)ri->successor,
    };
    report_outcome(t, &o, (double)r->elapsed_ns / 1e6, NULL);
    pl_steps_free(root);
    pl_run_info_free(ri);
}

/* --wake's runs woken, and the schedule that failed: said on stderr, and
 * exit 3 (docs/tools.md); returns what the JSON summary says of it
 * (caller owns), NULL when out of memory. */
static cJSON *report_schedule_failed(tool *t, size_t n_ended, const char *msg)
{
    const char *name = t->w.sched_name;
    /* the message names the schedule ("schedule 'NAME': ..."): once */
    char prefix[PL_MAX_NAME + 16];
    snprintf(prefix, sizeof prefix, "schedule '%s': ", name ? name : "");
    const char *why = name && !strncmp(msg, prefix, strlen(prefix))
                          ? msg + strlen(prefix)
                          : msg;
    cli_error("schedule %s failed: %s (%s); the %zu due run(s) were woken "
              "all the same",
              name ? QUOTE(name) : "(not named)", why,
              pl_status_name(t->w.sched_st), n_ended);
    worst(t, EXIT_SCHEDULE);
    cJSON *f = cJSON_CreateObject();
    if (!f || !cJSON_AddItemToObject(f, "schedule", json_str_or_null(name)) ||
        !cJSON_AddStringToObject(f, "error", pl_status_name(t->w.sched_st)) ||
        !cJSON_AddStringToObject(f, "message", msg)) {
        cJSON_Delete(f);
        f = NULL;
    }
    return f;
}

void mode_wake(tool *t)
{
    int64_t next = 0;
    t->w.wake = true;
    int st = pl_engine_wake(t->engine, &next);
    t->w.wake = false;
    /* every run it continued, before any failure that stopped it */
    size_t n_ended = 0;
    for (size_t i = 0; i < t->w.n_woken; i++)
        if (t->w.woken[i].ended) {
            report_woken(t, &t->w.woken[i]);
            n_ended++;
        }
    /* a schedule's failure, which pl_engine_wake() returns only when the
     * runs were woken, apart from one that stopped the waking */
    bool sched = st && st == t->w.sched_st && t->w.sched_msg &&
                 !strcmp(pl_errmsg(), t->w.sched_msg);
    cJSON *failed = NULL; /* the summary's schedule_failed */
    if (sched && !(failed = report_schedule_failed(t, n_ended, t->w.sched_msg)))
        t->w.oom = true;
    if (st && !sched) {
        cli_error("cannot wake the waiting runs: %s (%s); %zu woken before",
                  pl_errmsg(), pl_status_name(st), n_ended);
        worst(t, write_code(st));
        return;
    }
    char when[64] = "none";
    bool date = next && cli_ms_human(when, sizeof when, next);
    if (t->opt.json) {
        char iso[40];
        if (date)
            cli_time_iso(iso, sizeof iso, next * 1000, false);
        cJSON *sum = cJSON_CreateObject();
        cJSON *sf = failed ? failed : cJSON_CreateNull();
        failed = NULL;
        if (!sum || !sf || !cJSON_AddItemToObject(sum, "schedule_failed", sf)) {
            cJSON_Delete(sf);
            cJSON_Delete(sum);
            sum = NULL;
        } else if (!cli_json_add_int(sum, "next_due_ms", next) ||
                   !cJSON_AddItemToObject(sum, "next_due",
                                          json_str_or_null(date ? iso
                                                                : NULL)) ||
                   !cli_json_add_int(sum, "woken", (int64_t)n_ended)) {
            cJSON_Delete(sum);
            sum = NULL;
        }
        if (!sum)
            t->w.oom = true;
        cJSON_Delete(t->summary);
        t->summary = sum;
    } else {
        printf("next due: %s%s\n", when, date ? " UTC" : "");
    }
    cJSON_Delete(failed);
}
