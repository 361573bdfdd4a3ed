/*
 * replay_run.c -- ledger-replay --run, --all, --resume and --fork.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* ---- modes ------------------------------------------------------------------ */

/* Continue one run and report it.  @p note goes into the summary. */
/* Continue run @p id; @p next gets its successor's id when it ended
 * continued as new ("" otherwise). */
static void continue_link(tool *t, const char *id, const char *note, char *next)
{
    next[0] = '\0';
    pl_run_info *owner = NULL;
    if (!pl_run_get(&owner, t->engine, id) && owner->owner_alive) {
        cli_error("run %s is running in live process %lld on %s: not touched",
                  id, (long long)owner->owner_pid, or_dash(owner->owner_host));
        cJSON *j = json_run(t, id);
        if (j) {
            cJSON_AddStringToObject(j, "status", "not_run");
            cJSON_AddStringToObject(j, "error", "PL_EBUSY");
        }
        worst(t, EXIT_USAGE);
        pl_run_info_free(owner);
        return;
    }
    pl_run_info_free(owner);
    pl_outcome *o = NULL;
    double t0 = now_ms();
    int st = pl_run_continue(&o, t->engine, id, NULL);
    double ms = now_ms() - t0;
    if (st == PL_ESTATE) {
        /* suspended: there is nothing to continue until it is answered */
        pl_run_info *info = NULL;
        if (!pl_run_get(&info, t->engine, id) &&
            info->status == PL_RUN_SUSPENDED) {
            cli_error("run %s is suspended at %s: answer it with --resume %s "
                      "--answer JSON",
                      id, or_dash(info->suspended_path), id);
            cJSON *j = json_run(t, id);
            if (j) {
                cJSON_AddStringToObject(j, "status", "suspended");
                cJSON_AddStringToObject(j, "suspended_path",
                                        or_dash(info->suspended_path));
                cJSON_AddStringToObject(j, "resume_token",
                                        or_dash(info->resume_token));
            }
            t->n_suspended++;
            worst(t, EXIT_SUSPENDED);
            pl_run_info_free(info);
            return;
        }
        pl_run_info_free(info);
    }
    if (st) {
        report_refused(t, id, st, refused_code(st));
        return;
    }
    report_outcome(t, o, ms, note);
    if (o->status == PL_RUN_CONTINUED && o->successor)
        snprintf(next, PL_MAX_RUN_ID + 1, "%s", o->successor);
    pl_outcome_free(o);
}

/* A chain's link @p id, deleted after it ended as @p tomb says: the
 * chain's end, reported as its tombstone keeps it and folded into the exit
 * status as the run's end was. */
static void report_deleted_end(tool *t, const char *id,
                               const pl_tombstone *tomb)
{
    char del[40];
    cli_time_iso(del, sizeof del, tomb->deleted_us, false);
    const char *status = pl_run_status_name(tomb->status);
    cJSON *j = json_run(t, id);
    if (j && !(cJSON_AddStringToObject(j, "status", status) &&
               cJSON_AddStringToObject(j, "deleted", del)))
        t->w.oom = true;
    if (!t->opt.json)
        printf("run %s: %s, deleted on %s (its tombstone: nothing to "
               "continue)\n",
               id, status, del);
    if (tomb->status == PL_RUN_FAILED || tomb->status == PL_RUN_CANCELLED) {
        t->n_failed++;
        worst(t, EXIT_FAILED);
    } else {
        t->n_ok++;
    }
}

/* Continue run @p id, and along its chain when it continues as new (a
 * continued link replays, writing nothing; a deleted link is passed, or
 * ends the chain, as its tombstone says), as a worker would. */
void continue_one(tool *t, const char *id, const char *note)
{
    char cur[PL_MAX_RUN_ID + 1], next[PL_MAX_RUN_ID + 1];
    snprintf(cur, sizeof cur, "%s", id);
    for (bool first = true;; first = false) {
        pl_tombstone end;
        if (!first && !cli_chain_link(t->engine, cur, &end)) {
            report_deleted_end(t, cur, &end);
            return;
        }
        continue_link(t, cur, first ? note : "(successor)", next);
        if (!next[0])
            return;
        memcpy(cur, next, sizeof cur);
    }
}

/* A run must exist before anything is done to it: exit 2 if not. */
int need_run(tool *t, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, t->engine, id);
    pl_run_info_free(info);
    if (st && !t->why)
        t->why = st == PL_EINVAL ? PL_ENOTFOUND : st;
    if (st == PL_ENOTFOUND && cli_say_deleted(t->engine, id)) {
        worst(t, EXIT_OPEN);
        return -1;
    }
    if (st == PL_ENOTFOUND || st == PL_EINVAL) {
        cli_error("no run %s in the store", QUOTE(id));
        worst(t, EXIT_OPEN);
        return -1;
    }
    if (st) {
        cli_error("run %s: %s (%s)", QUOTE(id), pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
        return -1;
    }
    return 0;
}

typedef struct all_ctx {
    tool *t;
    id_list todo;
    unsigned damaged; /* runs whose record cannot be read */
    id_list refused;  /* runs the engine refused to execute */
    int *why;         /* each one's status */
} all_ctx;

static int visit_crashed(const pl_run_info *info, void *user)
{
    all_ctx *a = user;
    if (info->status != PL_RUN_RUNNING)
        return 0;
    if (!info->owner_alive)
        return ids_push(&a->todo, info->id) ? 0 : PL_ENOMEM;
    tool *t = a->t;
    t->n_skipped++;
    if (t->opt.json) {
        cJSON *s = cJSON_CreateObject();
        if (s) {
            cJSON_AddStringToObject(s, "run_id", info->id);
            cJSON_AddNumberToObject(s, "owner_pid", (double)info->owner_pid);
            cli_json_string_or_null(s, "owner_host", info->owner_host);
            cJSON_AddStringToObject(s, "reason", "owned by a live process");
            cJSON_AddItemToArray(t->skipped, s);
        }
    } else {
        printf("run %s: skipped: running in live process %lld on %s\n",
               cli_text(info->id), (long long)info->owner_pid,
               cli_text(or_dash(info->owner_host)));
    }
    return 0;
}

/* A run whose record cannot be read is skipped, saying why; the others
 * are continued, and the exit status is the store's. */
static int skip_damaged(const char *id, const char *msg, void *user)
{
    all_ctx *a = user;
    a->damaged++;
    return report_damaged(a->t, id, msg);
}

/* Continue run @p id for --all: refused (a run newer code recorded, one a
 * process took meanwhile, ...) is kept apart, with its status. */
static void continue_crashed(all_ctx *a, const char *id)
{
    tool *t = a->t;
    unsigned before = t->n_refused;
    continue_one(t, id, "(was crashed)");
    if (t->n_refused == before)
        return;
    int *why = realloc(a->why, (a->refused.n + 1) * sizeof *why);
    if (why)
        a->why = why;
    if (!why || !ids_push(&a->refused, id)) {
        t->w.oom = true;
        return;
    }
    a->why[a->refused.n - 1] = t->refused_st;
}

/* --all's last words: the runs continued, refused (each with why) and
 * skipped; --json: the summary {continued, refused: [{run_id, error}],
 * skipped, damaged}. */
static void all_summary(all_ctx *a)
{
    tool *t = a->t;
    size_t continued = a->todo.n - a->refused.n;
    if (!t->opt.json) {
        printf("%zu crashed run(s) continued, %zu refused", continued,
               a->refused.n);
        print_refused(&a->refused, a->why);
        printf(", %u skipped (owned by a live process)%s\n", t->n_skipped,
               a->damaged ? ", and runs whose record cannot be read (above)"
                          : "");
        return;
    }
    cJSON *sum = cJSON_CreateObject(),
          *list = json_refused(&a->refused, a->why);
    bool ok = sum && list &&
              cli_json_add_int(sum, "continued", (int64_t)continued);
    if (ok && cJSON_AddItemToObject(sum, "refused", list)) {
        list = NULL;
        ok = cli_json_add_int(sum, "skipped", t->n_skipped) &&
             cli_json_add_int(sum, "damaged", a->damaged);
    } else {
        ok = false;
    }
    cJSON_Delete(list);
    set_summary(t, sum, ok);
}

void mode_all(tool *t)
{
    all_ctx a = {t, {0}, 0, {0}, NULL};
    int st = cli_runs_each(t->engine, NULL, visit_crashed, skip_damaged, &a);
    if (st) {
        cli_error("listing the runs of %s: %s (%s)",
                  QUOTE(cli_store_shown(t->opt.store)),
                  st == PL_ENOMEM ? "out of memory" : pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
    }
    for (size_t i = 0; !st && i < a.todo.n; i++)
        continue_crashed(&a, a.todo.v[i]);
    if (!st)
        all_summary(&a);
    ids_free(&a.todo);
    ids_free(&a.refused);
    free(a.why);
}

int prepare_resume(tool *t)
{
    const char *src = t->opt.answer;
    char *text = NULL;
    if (src[0] == '@' || !strcmp(src, "-")) {
        text = cli_read_all(src[0] == '@' ? src + 1 : src, ANSWER_MAX);
        if (!text)
            return EXIT_USAGE;
        src = text;
    }
    t->answer = cli_parse_object(src, "--answer");
    free(text);
    return t->answer ? 0 : EXIT_USAGE;
}

void mode_resume(tool *t)
{
    const char *id = t->opt.run;
    if (need_run(t, id))
        return;
    const cJSON *answer = t->answer;
    char *token = NULL;
    if (t->opt.token) {
        bool oom = false;
        token = dup_or_null(t->opt.token, &oom);
    } else {
        pl_run_info *info = NULL;
        int st = pl_run_get(&info, t->engine, id);
        if (!st && info->status != PL_RUN_SUSPENDED) {
            cli_error("run %s is %s, not suspended: there is nothing to resume",
                      id, pl_run_status_name(info->status));
            worst(t, EXIT_USAGE);
        } else if (!st && !info->resume_token) {
            cli_error("run %s records no resume token: give --token", id);
            worst(t, EXIT_USAGE);
        } else if (st) {
            cli_error("run %s: %s", id, pl_errmsg());
            worst(t, EXIT_OPEN);
        } else {
            bool oom = false;
            token = dup_or_null(info->resume_token, &oom);
        }
        pl_run_info_free(info);
    }
    if (token) {
        pl_outcome *o = NULL;
        double t0 = now_ms();
        int st = pl_run_resume(&o, t->engine, id, token, answer);
        double ms = now_ms() - t0;
        if (st)
            report_refused(t, id, st, refused_code(st));
        else
            report_outcome(t, o, ms, "(resumed)");
        pl_outcome_free(o);
    } else if (!t->exit) {
        cli_error("out of memory");
        worst(t, EXIT_FAILED);
    }
    free(token);
}

void mode_fork(tool *t)
{
    const char *id = t->opt.run;
    if (need_run(t, id))
        return;
    char *new_id = NULL;
    int st = pl_run_fork(&new_id, t->engine, id, t->opt.at, t->opt.new_id);
    if (st) {
        cli_error("cannot fork run %s at %s: %s (%s)", id, QUOTE(t->opt.at),
                  pl_errmsg(), pl_status_name(st));
        t->why = st;
        worst(t, st == PL_ENOTFOUND || st == PL_EINVAL || st == PL_EBUSY ||
                         st == PL_EEXIST
                     ? EXIT_USAGE
                     : EXIT_FAILED);
        return;
    }
    char note[PL_MAX_RUN_ID + 64];
    snprintf(note, sizeof note, "(forked from %s at %s)", id, t->opt.at);
    continue_one(t, new_id, note);
    if (t->opt.json) {
        cJSON *last = cJSON_GetArrayItem(t->runs,
                                         cJSON_GetArraySize(t->runs) - 1);
        if (last) {
            cJSON_AddStringToObject(last, "forked_from", id);
            cJSON_AddStringToObject(last, "forked_at", t->opt.at);
        }
    }
    free(new_id);
}
