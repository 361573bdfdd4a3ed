/*
 * replay_report.c -- how ledger-replay reports: what the engine's events say,
 * each run's summary and the exit status; the trace file and the
 * OpenTelemetry exporter the events also go to (--trace, --otel).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay.h"

/* ---- command-line helpers ---------------------------------------------- */

void watch_add_change(watch *w, const char *step_id, const char *recorded,
                      const char *now)
{
    code_change *grown = realloc(w->changes,
                                 (w->n_changes + 1) * sizeof *grown);
    if (!grown) {
        w->oom = true;
        return;
    }
    w->changes = grown;
    code_change *c = &w->changes[w->n_changes++];
    c->step_id = dup_or_null(step_id, &w->oom);
    c->recorded = dup_or_null(recorded, &w->oom);
    c->now = dup_or_null(now, &w->oom);
    c->count = 1;
}

double now_ms(void) { return (double)cli_now_us() / 1e3; }

char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    else
        *oom = true;
    return d;
}

static bool same_str(const char *a, const char *b)
{
    return a && b ? strcmp(a, b) == 0 : a == b;
}

void watch_clear(watch *w)
{
    /* what a replay saw goes; where events go (--trace, --otel) stays */
    pl_trace *trace = w->trace;
    pl_otel *otel = w->otel;
    for (size_t i = 0; i < w->n_changes; i++) {
        free(w->changes[i].step_id);
        free(w->changes[i].recorded);
        free(w->changes[i].now);
    }
    free(w->changes);
    for (size_t i = 0; i < w->n_versions; i++) {
        free(w->versions[i].change);
        free(w->versions[i].path);
    }
    free(w->versions);
    for (size_t i = 0; i < w->n_woken; i++)
        free(w->woken[i].id);
    free(w->woken);
    free(w->sched_msg);
    free(w->sched_name);
    divergence *d = &w->div;
    free(d->step_id);
    free(d->path);
    free(d->rec_actor);
    free(d->rec_payload);
    free(d->rec_code);
    free(d->new_actor);
    free(d->new_payload);
    free(d->new_code);
    memset(w, 0, sizeof *w);
    w->trace = trace;
    w->otel = otel;
}

void on_event(const pl_event *ev, void *user)
{
    watch *w = user;
    if (w && w->trace)
        pl_trace_event(ev, w->trace);
    if (w && w->otel)
        pl_otel_event(ev, w->otel);
    if (w && w->wake)
        watch_woken(w, ev);
    /* a worker's store going away and coming back: one line each */
    if (ev->kind == PL_EVENT_STORE_LOST)
        cli_error("worker: lost the store: %s (%s)",
                  ev->detail ? ev->detail : "?", pl_status_name(ev->status));
    else if (ev->kind == PL_EVENT_STORE_BACK)
        cli_error("worker: the store is back: %s",
                  ev->detail ? ev->detail : "");
    if (w && ev->kind == PL_EVENT_VERSION && ev->detail) {
        version_seen *grown = realloc(w->versions,
                                      (w->n_versions + 1) * sizeof *grown);
        if (!grown) {
            w->oom = true;
            return;
        }
        w->versions = grown;
        version_seen *v = &w->versions[w->n_versions++];
        v->change = dup_or_null(ev->detail, &w->oom);
        v->path = dup_or_null(ev->path, &w->oom);
        v->seq = ev->seq;
        v->version = ev->version;
        v->recorded = ev->step_type == PL_STEP_SIDE_EFFECT;
        v->status = ev->status;
        return;
    }
    if (!w || !ev->diff)
        return;
    const pl_replay_diff *df = ev->diff;
    if (ev->kind == PL_EVENT_CODE_CHANGED) {
        for (size_t i = 0; i < w->n_changes; i++) {
            code_change *c = &w->changes[i];
            if (same_str(c->recorded, df->recorded_code) &&
                same_str(c->now, df->new_code)) {
                c->count++;
                return;
            }
        }
        watch_add_change(w, df->step_id, df->recorded_code, df->new_code);
    } else if (ev->kind == PL_EVENT_DIVERGED && !w->div.seen) {
        divergence *d = &w->div;
        d->seen = true;
        d->step_id = dup_or_null(df->step_id, &w->oom);
        d->path = dup_or_null(ev->path, &w->oom);
        d->seq = ev->seq;
        d->rec_type = df->recorded_type;
        d->new_type = df->new_type;
        d->rec_actor = dup_or_null(df->recorded_actor, &w->oom);
        d->rec_payload = dup_or_null(df->recorded_payload, &w->oom);
        d->rec_code = dup_or_null(df->recorded_code, &w->oom);
        d->new_actor = dup_or_null(df->new_actor, &w->oom);
        d->new_payload = dup_or_null(df->new_payload, &w->oom);
        d->new_code = dup_or_null(df->new_code, &w->oom);
    }
}

/* Raise the exit status: failures outrank suspensions outrank success. */
void worst(tool *t, int code)
{
    static const int rank[] = {[0] = 0,           [EXIT_SUSPENDED] = 1,
                               [EXIT_FAILED] = 2, [EXIT_SCHEDULE] = 3,
                               [EXIT_OPEN] = 4,   [EXIT_USAGE] = 5};
    if (rank[code] > rank[t->exit])
        t->exit = code;
}

cJSON *json_str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

const char *or_dash(const char *s) { return s && *s ? s : "-"; }

void print_refused(const id_list *ids, const int *why)
{
    for (size_t i = 0; i < ids->n; i++)
        printf("%s%s: %s", i ? ", " : " (", cli_text(ids->v[i]),
               pl_status_name(why[i]));
    if (ids->n)
        printf(")");
}

void set_summary(tool *t, cJSON *sum, bool ok)
{
    if (!ok) {
        cJSON_Delete(sum);
        sum = NULL;
        t->w.oom = true;
    }
    cJSON_Delete(t->summary);
    t->summary = sum;
}

cJSON *json_refused(const id_list *ids, const int *why)
{
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; list && i < ids->n; i++) {
        cJSON *r = cJSON_CreateObject();
        if (!r || !cJSON_AddItemToArray(list, r)) {
            cJSON_Delete(r); /* not the list's */
            cJSON_Delete(list);
            return NULL;
        }
        if (!cJSON_AddStringToObject(r, "run_id", ids->v[i]) ||
            !cJSON_AddStringToObject(r, "error", pl_status_name(why[i]))) {
            cJSON_Delete(list);
            return NULL;
        }
    }
    return list;
}

/* The JSON object for one run, added to t->runs (NULL without --json). */
cJSON *json_run(tool *t, const char *id)
{
    /* a full disk would lose the summary, and with it a new run's id:
     * say_lost() names the runs */
    if (!ids_push(&t->said, id))
        t->said.oom = true;
    if (!t->opt.json)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "run_id", id);
        cJSON_AddItemToArray(t->runs, o);
    }
    return o;
}

void json_counters(cJSON *j, const pl_outcome *o, double ms)
{
    cJSON_AddNumberToObject(j, "calls_served", (double)o->calls_served);
    cJSON_AddNumberToObject(j, "calls_executed", (double)o->calls_executed);
    cJSON_AddNumberToObject(j, "steps_replayed", (double)o->steps_replayed);
    cJSON_AddNumberToObject(j, "steps_appended", (double)o->steps_appended);
    cJSON_AddNumberToObject(j, "elapsed_ms", ms);
}

/* Whether run @p id is stored (not deleted). */
static bool stored(tool *t, const char *id)
{
    pl_run_info *ri = NULL;
    int st = id ? pl_run_get(&ri, t->engine, id) : PL_ENOTFOUND;
    pl_run_info_free(ri);
    return st != PL_ENOTFOUND;
}

/* Report a run's outcome, and fold it into the exit status. */
void report_outcome(tool *t, const pl_outcome *o, double ms, const char *note)
{
    cJSON *j = json_run(t, o->run_id);
    const char *status = pl_run_status_name(o->status);
    if (j) {
        cJSON_AddStringToObject(j, "status", status);
        if (note)
            cJSON_AddStringToObject(j, "note", note);
        json_counters(j, o, ms);
        if (!outcome_fields(j, o))
            t->w.oom = true;
    }
    if (!t->opt.json)
        printf("run %s: %s%s%s\n  calls served from the ledger %llu, "
               "executed %llu; %.2f ms\n",
               cli_text(o->run_id), status, note ? " " : "",
               note ? cli_text(note) : "", (unsigned long long)o->calls_served,
               (unsigned long long)o->calls_executed, ms);
    switch (o->status) {
    case PL_RUN_CONTINUED:
        if (!t->opt.json)
            printf("  continued as new: %s %s\n",
                   cli_text(or_dash(o->successor)),
                   stored(t, o->successor) ? "goes on" : "(deleted since)");
        t->n_ok++;
        break;
    case PL_RUN_COMPLETED: {
        size_t n = pl_steps_count(o->steps);
        const pl_step *last = n ? pl_steps_at(o->steps, n - 1) : NULL;
        const cJSON *res = last ? pl_step_payload(last) : NULL;
        if (!t->opt.json && res) {
            char *text = pl_json_print(res, false);
            printf("  result %s\n", text ? cli_text(text) : "?");
            free(text);
        }
        t->n_ok++;
        break;
    }
    case PL_RUN_SUSPENDED: {
        if (!t->opt.json) {
            char *text = o->prompt ? pl_json_print(o->prompt, false) : NULL;
            printf("  waiting at %s for an answer to %s\n  resume with: "
                   "--resume %s --answer JSON\n",
                   cli_text(or_dash(o->suspended_path)),
                   text ? cli_text(text) : "{}", cli_text(o->run_id));
            free(text);
        }
        t->n_suspended++;
        worst(t, EXIT_SUSPENDED);
        break;
    }
    case PL_RUN_WAITING: {
        char what[PL_MAX_NAME + 96];
        cli_wait_text(what, sizeof what, o->wake_ms, o->wait_event,
                      cli_now_us());
        if (!t->opt.json)
            printf("  waiting at %s %s\n", cli_text(or_dash(o->suspended_path)),
                   cli_text(what));
        t->n_suspended++;
        worst(t, EXIT_SUSPENDED);
        break;
    }
    default:
        if (!t->opt.json)
            printf("  reason: %s\n", cli_text(or_dash(o->reason)));
        t->n_failed++;
        worst(t, EXIT_FAILED);
        break;
    }
}

/* A run that could not be executed at all: say why, and fold it in. */
void report_refused(tool *t, const char *id, int st, int code)
{
    /* the engine's message names the run already, as "run ID: ..." or
     * "run 'ID' ...": say it once */
    const char *msg = pl_errmsg();
    char q[CLI_QUOTE_MAX], plain[PL_MAX_RUN_ID + 8], quoted[PL_MAX_RUN_ID + 8];
    snprintf(plain, sizeof plain, "run %s:", id);
    snprintf(quoted, sizeof quoted, "run '%s'", id);
    if (!strncmp(msg, plain, strlen(plain)) || strstr(msg, quoted))
        cli_error("%s (%s)", msg, pl_status_name(st));
    else
        cli_error("run %s: %s (%s)", cli_quote(q, sizeof q, id), msg,
                  pl_status_name(st));
    cJSON *j = json_run(t, id);
    if (j) {
        cJSON_AddStringToObject(j, "status", "not_run");
        cJSON_AddStringToObject(j, "error", pl_status_name(st));
        cJSON_AddStringToObject(j, "message", pl_errmsg());
    }
    if (code == EXIT_FAILED)
        t->n_failed++;
    t->n_refused++;
    t->refused_st = st;
    worst(t, code);
}

/* The exit status for a run the engine refused to execute, or stopped
 * executing: a store that cannot be written (full, read-only, failing)
 * is the store's fault, and the run is left as it was, to be continued. */
int report_damaged(tool *t, const char *id, const char *msg)
{
    worst(t, EXIT_OPEN);
    cli_error("run %s: skipped: its record cannot be read: %s", QUOTE(id), msg);
    if (!ids_push(&t->damaged, id))
        t->w.oom = true;
    if (!t->opt.json)
        return 0;
    cJSON *s = cJSON_CreateObject();
    if (s && cJSON_AddStringToObject(s, "run_id", id) &&
        cJSON_AddStringToObject(s, "reason", "its record cannot be read") &&
        cJSON_AddStringToObject(s, "message", msg))
        cJSON_AddItemToArray(t->skipped, s);
    else
        cJSON_Delete(s);
    return 0;
}

int refused_code(int st)
{
    if (write_code(st) == EXIT_OPEN)
        return EXIT_OPEN;
    switch (st) {
    case PL_ENOTFOUND: return EXIT_OPEN; /* no such run, root not loaded */
    case PL_EBUSY:
    case PL_ESTATE:
    case PL_ETOKEN:
    case PL_ENEWERCODE: /* left for newer code's workers: no failure */
    case PL_EINVAL: return EXIT_USAGE;
    default: return EXIT_FAILED;
    }
}

/* The exit status when writing to the store failed: the store's fault (it
 * cannot be written: full, read-only, failing, out of memory), or else the
 * request's. */
int write_code(int st)
{
    switch (st) {
    case PL_ESTORE:
    case PL_EMAPFULL:
    case PL_ENOMEM:
    case PL_EIO:
    case PL_ENOSPC:
    case PL_EACCES: return EXIT_OPEN;
    default: return EXIT_USAGE;
    }
}

void ids_free(id_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

bool ids_push(id_list *l, const char *id)
{
    char **grown = realloc(l->v, (l->n + 1) * sizeof *grown);
    char *d = grown ? dup_or_null(id, &l->oom) : NULL;
    if (!grown || !d) {
        if (grown)
            l->v = grown;
        l->oom = true;
        return false;
    }
    l->v = grown;
    l->v[l->n++] = d;
    return true;
}

/* ---- --trace and --otel --------------------------------------------------- */

/* Open the trace file and the exporter the options ask for; 0 or -1. */
int open_observers(tool *t)
{
    const char *trace = t->opt.trace;
    if (trace) {
        const char *path = strcmp(trace, "-") ? trace : "/dev/stderr";
        struct stat sb;
        t->trace_made = strcmp(trace, "-") && lstat(path, &sb) &&
                        errno == ENOENT;
        int st = pl_trace_open(&t->w.trace, path);
        if (st) {
            cli_error("--trace: %s (%s)", pl_errmsg(), pl_status_name(st));
            return -1;
        }
    }
    const char *env_url = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    const char *env_traces = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if (t->opt.otel || (env_url && *env_url) || (env_traces && *env_traces)) {
        pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
        oo.endpoint = t->opt.otel;
        /* the tool's name unless the variable names one (set empty, it
         * names none: pl_otel_open() would fall back to "policyledger") */
        const char *svc = getenv("OTEL_SERVICE_NAME");
        oo.service_name = svc && *svc ? NULL : "ledger-replay";
        int st = pl_otel_open(&t->w.otel, &oo);
        if (st) {
            /* name what asked for the exporter: the flag, else the
             * variable pl_otel_open() took the endpoint from; the headers
             * come from the environment alone */
            const char *from = t->opt.otel ? "--otel"
                               : env_traces && *env_traces
                                   ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
                                   : "OTEL_EXPORTER_OTLP_ENDPOINT";
            const char *hdrs = getenv("OTEL_EXPORTER_OTLP_HEADERS");
            cli_error("%s%s: %s (%s)", from,
                      hdrs && *hdrs ? " with OTEL_EXPORTER_OTLP_HEADERS" : "",
                      pl_errmsg(), pl_status_name(st));
            return -1;
        }
    }
    return 0;
}

/* Send what is left and close both; a loss is a warning, never a failure
 * of the runs. */
void close_observers(tool *t, int rc)
{
    if (t->w.otel && pl_otel_close(t->w.otel))
        cli_error("warning: %s", pl_errmsg());
    if (t->w.trace && pl_trace_close(t->w.trace))
        cli_error("warning: %s", pl_errmsg());
    struct stat sb;
    if (t->w.trace && t->trace_made && (rc == EXIT_USAGE || rc == EXIT_OPEN) &&
        !stat(t->opt.trace, &sb) && S_ISREG(sb.st_mode) && sb.st_size == 0)
        unlink(t->opt.trace);
    t->w.otel = NULL;
    t->w.trace = NULL;
}

const char *mode_name(enum mode m)
{
    switch (m) {
    case MODE_RUN: return "run";
    case MODE_ALL: return "all";
    case MODE_RESUME: return "resume";
    case MODE_CHECK: return "check";
    case MODE_FORK: return "fork";
    case MODE_IMPORT: return "import";
    case MODE_WORKER: return "worker";
    case MODE_SUBMIT: return "submit";
    case MODE_PRUNE: return "prune";
    case MODE_UPGRADE: return "upgrade";
    case MODE_SCHED_PUT: return "schedule-put";
    case MODE_SCHED_DELETE: return "schedule-delete";
    case MODE_SIGNAL: return "signal";
    case MODE_CANCEL: return "cancel";
    case MODE_WAKE: return "wake";
    default: return "none";
    }
}

/* The output is lost (a full disk): name the runs it summed up, whose
 * ids (a new run's: --submit, --fork, --import) went nowhere else. */
void say_lost(const tool *t)
{
    if (!t->said.n)
        return;
    char ids[768] = "";
    size_t used = 0, shown = 0;
    for (; shown < t->said.n; shown++) {
        int n = snprintf(ids + used, sizeof ids - used, "%s%s",
                         shown ? ", " : "", cli_text(t->said.v[shown]));
        if (n < 0 || (size_t)n >= sizeof ids - used)
            break;
        used += (size_t)n;
    }
    ids[used] = '\0';
    cli_error("the summaries of %zu run(s) were lost with it: %s%s "
              "(ledger-dump STORE --run ID says what each is now)",
              t->said.n, ids, shown < t->said.n ? ", ..." : "");
}

/* --json's one document, printed whatever the command came to: its runs
 * and their summaries, the exit status, and for a failure (bad usage too) the first
 * message said (`message`) and the library's status where one says why
 * (`error`: a plugin, an MCP server or the store that cannot be had, else
 * t->why: no such run, a refused fork or import).
 * Returns the exit status, EXIT_FAILED when the document cannot be made. */
int print_document(tool *t, int rc, const char *error)
{
    if (!t->opt.json || t->printed)
        return rc;
    t->printed = true;
    cJSON *doc = cJSON_CreateObject();
    if (doc) {
        cli_json_string_or_null(doc, "store",
                                t->opt.store ? cli_store_shown(t->opt.store)
                                             : NULL);
        cJSON_AddStringToObject(doc, "mode", mode_name(t->opt.mode));
        cJSON_AddItemToObject(doc, "runs",
                              t->runs ? t->runs : cJSON_CreateArray());
        cJSON_AddItemToObject(doc, "skipped",
                              t->skipped ? t->skipped : cJSON_CreateArray());
        t->runs = t->skipped = NULL;
        if (t->summary)
            cJSON_AddItemToObject(doc, "summary", t->summary);
        t->summary = NULL;
        if (t->sched_json)
            cJSON_AddItemToObject(doc, "schedule", t->sched_json);
        t->sched_json = NULL;
        cJSON_AddNumberToObject(doc, "exit", rc);
        if (rc && !error && t->why)
            error = pl_status_name(t->why);
        if (rc && error)
            cJSON_AddStringToObject(doc, "error", error);
        if (rc && cli_first_error())
            cJSON_AddStringToObject(doc, "message", cli_first_error());
    }
    char *text = doc ? cli_json_safe(pl_json_print(doc, true)) : NULL;
    if (text)
        printf("%s\n", text);
    else {
        cli_error("out of memory printing the summary");
        rc = EXIT_FAILED;
    }
    free(text);
    cJSON_Delete(doc);
    return rc;
}
