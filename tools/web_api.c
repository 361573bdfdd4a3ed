/*
 * web_api.c -- the JSON API's reads of one run: GET /api/session,
 * /api/runs/ID (the run, marked, and the first page of its steps:
 * web_steps.c), /api/runs/ID/timeline (its calls with start and duration)
 * and /api/runs/ID/export (the JSON lines ledger-dump writes).  The
 * objects are ledger-dump --format json's (runview.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "web.h"

int api_session(web *w, const web_req *r, cJSON **out)
{
    (void)r;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    cJSON_AddStringToObject(o, "version", pl_version());
    cJSON_AddBoolToObject(o, "read_only", w->read_only);
    cJSON_AddStringToObject(o, "csrf", w->csrf);
    cJSON_AddStringToObject(o, "store", w->store);
    cJSON_AddBoolToObject(o, "token_required", w->token != NULL);
    cJSON *pols = cJSON_AddArrayToObject(o, "policies");
    const pl_registry *reg = pl_engine_registry(w->engine);
    for (size_t i = 0; pols && reg && i < pl_registry_count(reg); i++)
        cJSON_AddItemToArray(pols,
                             cJSON_CreateString(pl_registry_at(reg, i)->name));
    cJSON *acts = cJSON_AddArrayToObject(o, "actions");
    static const char *const names[] = {
        "answer", "continue",       "fork",         "upgrade",
        "check",  "verify",         "signal",       "cancel",
        "delete", "batch_continue", "batch_cancel", "batch_delete"};
    /* with --read-only, verify alone: it writes nothing */
    for (size_t i = 0; acts && i < sizeof names / sizeof *names; i++)
        if (!w->read_only || !strcmp(names[i], "verify"))
            cJSON_AddItemToArray(acts, cJSON_CreateString(names[i]));
    *out = o;
    return 200;
}

int api_run(web *w, const char *id, cJSON **out)
{
    pl_run_info *ri = NULL;
    int http = web_get_run(w, id, &ri, out);
    if (http != 200)
        return http;
    web_marks m;
    int st = web_run_marks(w, ri, WEB_RUN_SCAN_MAX, &m);
    cJSON *doc = cJSON_CreateObject();
    cJSON *run = run_json(ri);
    bool ok = doc && run && web_add_tokens(run, w, id) &&
              cJSON_AddStringToObject(run, "root_policy", ri->policy) &&
              cJSON_AddStringToObject(run, "state", web_status_name(ri));
    if (ok && st)
        http = web_fail_status(out, st, "reading the run's steps");
    else if (ok) {
        size_t in_doubt = 0;
        for (size_t i = 0; i < m.n; i++)
            in_doubt += !strcmp(m.mark[i], "in_doubt");
        cJSON_AddBoolToObject(run, "in_doubt", in_doubt > 0);
        cJSON_AddNumberToObject(run, "in_doubt_calls", (double)in_doubt);
        cJSON_AddNumberToObject(run, "error_results", (double)m.errors);
        cJSON_AddNumberToObject(run, "steps_scanned", (double)m.steps);
        cJSON_AddBoolToObject(run, "scan_truncated", m.truncated);
        cJSON_AddItemToObject(doc, "run", run);
        run = NULL;
        http = web_first_page(w, ri, doc, out);
    } else
        http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
    web_marks_free(&m);
    cJSON_Delete(run);
    pl_run_info_free(ri);
    if (http != 200) {
        cJSON_Delete(doc);
        return http;
    }
    *out = doc;
    return 200;
}

/* ---- the timeline --------------------------------------------------------------- */

/* The run's calls as the walk meets them, each ended by its answer. */
typedef struct timeline {
    const pl_run_info *ri;
    web_tracker t;
    cJSON *calls;
    const pl_step *at; /* the step being fed */
    size_t steps;
    int64_t last_us;
    bool truncated, oom;
} timeline;

static double num_of(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(n) ? n->valuedouble : -1;
}

static void timeline_end(void *call, bool answered, void *user)
{
    timeline *x = user;
    cJSON *e = call;
    if (answered) {
        const pl_step *r = x->at;
        int64_t t = pl_step_time_us(r);
        const cJSON *p = pl_step_payload(r);
        cli_json_add_int(e, "end_us", t);
        cJSON_AddNumberToObject(e, "duration_ms",
                                (double)(t - cli_json_int_of(e, "start_us")) /
                                    1e3);
        cJSON_AddStringToObject(e, "result", pl_step_id(r));
        cJSON_AddStringToObject(e, "state",
                                pl_step_is_error(r) ? "error" : "ok");
        double tin = num_of(p, "tokens_in"), tout = num_of(p, "tokens_out");
        if (tin >= 0 && tout >= 0) {
            cJSON_AddNumberToObject(e, "tokens_in", tin);
            cJSON_AddNumberToObject(e, "tokens_out", tout);
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(p, "model");
            if (cJSON_IsString(m))
                cJSON_AddStringToObject(e, "model", m->valuestring);
        }
        return;
    }
    cJSON_AddNullToObject(e, "end_us");
    cJSON_AddNullToObject(e, "duration_ms");
    const char *state = "unread"; /* answered past the steps read */
    if (!x->truncated) {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "path");
        const char *colon = strrchr(
            cJSON_GetStringValue(cJSON_GetObjectItem(e, "id")), ':');
        switch (call_mark_unanswered(path->valuestring,
                                     (uint32_t)strtoul(colon + 1, NULL, 10),
                                     x->ri)) {
        case MARK_IN_DOUBT: state = "in_doubt"; break;
        case MARK_WAITING: state = "waiting"; break;
        case MARK_NONE: state = "running"; break;
        }
    }
    cJSON_AddStringToObject(e, "state", state);
}

static int timeline_visit(const pl_step *s, void *user)
{
    timeline *x = user;
    if (x->steps == WEB_TIMELINE_STEPS) {
        x->truncated = true;
        return 1;
    }
    x->steps++;
    const char *id = pl_step_id(s);
    char path[WEB_STEP_ID_MAX + 1];
    web_step_path(s, path, sizeof path);
    if (pl_step_time_us(s) > x->last_us)
        x->last_us = pl_step_time_us(s);
    pl_step_type type = pl_step_type_of(s);
    cJSON *e = NULL;
    if (type == PL_STEP_ACTION_CALL) {
        if (!(e = cJSON_CreateObject())) {
            x->oom = true;
            return 1;
        }
        cJSON_AddItemToArray(x->calls, e);
        char callee[WEB_STEP_ID_MAX + 16];
        snprintf(callee, sizeof callee, "%s.%u", path, pl_step_seq(s));
        unsigned depth = 0;
        for (const char *p = path; *p; p++)
            depth += *p == '.';
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                            "policy");
        cJSON_AddStringToObject(e, "id", id);
        cJSON_AddStringToObject(e, "path", path);
        cJSON_AddStringToObject(e, "callee_path", callee);
        cJSON_AddNumberToObject(e, "depth", depth);
        cJSON_AddStringToObject(e, "policy",
                                cJSON_IsString(pol) ? pol->valuestring
                                                    : pl_step_actor(s));
        cJSON_AddStringToObject(e, "caller", pl_step_actor(s));
        cli_json_add_int(e, "start_us", pl_step_time_us(s));
    }
    x->at = s;
    if (!web_track(&x->t, path, type, e, timeline_end, x)) {
        x->oom = true;
        return 1;
    }
    return 0;
}

int api_timeline(web *w, const char *id, cJSON **out)
{
    pl_run_info *ri = NULL;
    int http = web_get_run(w, id, &ri, out);
    if (http != 200)
        return http;
    cJSON *doc = cJSON_CreateObject();
    timeline x = {.ri = ri, .calls = cJSON_CreateArray()};
    int st = doc && x.calls ? pl_run_walk(w->engine, id, timeline_visit, &x)
                            : PL_ENOMEM;
    if (st > 0)
        st = x.oom ? PL_ENOMEM : PL_OK;
    x.at = NULL;
    web_track(&x.t, NULL, PL_STEP_TEXT, NULL, timeline_end, &x);
    web_track_free(&x.t);
    if (!st) {
        cJSON_AddStringToObject(doc, "run", ri->id);
        cJSON_AddStringToObject(doc, "state", web_status_name(ri));
        cli_json_add_int(doc, "start_us", ri->created_us);
        cli_json_add_int(doc, "end_us",
                         (x.last_us > ri->updated_us ? x.last_us
                                                     : ri->updated_us));
        cJSON_AddNumberToObject(doc, "steps_read", (double)x.steps);
        cJSON_AddBoolToObject(doc, "truncated", x.truncated);
        if (!web_add_tokens(doc, w, id))
            st = PL_ENOMEM;
        cJSON_AddItemToObject(doc, "calls", x.calls);
        x.calls = NULL;
    }
    cJSON_Delete(x.calls);
    pl_run_info_free(ri);
    if (st) {
        cJSON_Delete(doc);
        return st == PL_ENOMEM
                   ? web_fail(out, 500, "PL_ENOMEM", "out of memory")
                   : web_fail_status(out, st, "reading the run");
    }
    *out = doc;
    return 200;
}

/* ---- the export ------------------------------------------------------------------ */

/* The export's lines, marked as ledger-dump --format jsonl marks them:
 * the unanswered calls found by a first walk, error results and the
 * suspension from the line itself. */
typedef struct exporter {
    FILE *f;
    const web_marks *m;
    const pl_run_info *ri;
    int err; /* errno of a failed write */
} exporter;

static int export_line(cJSON *line, void *user)
{
    exporter *x = user;
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(line, "id"));
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(line, "type"));
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItem(line, "path"));
    const cJSON *payload = cJSON_GetObjectItem(line, "payload");
    const char *mark = NULL;
    if (id && type && path && !cJSON_GetObjectItem(line, "kind")) {
        mark = web_marks_find(x->m, id);
        if (!mark && cJSON_IsTrue(cJSON_GetObjectItem(payload, "error")))
            mark = "error";
        else if (!mark && !strcmp(type, "suspend") &&
                 x->ri->status == PL_RUN_SUSPENDED && x->ri->suspended_path &&
                 !strcmp(x->ri->suspended_path, path))
            mark = "suspended";
    }
    if (!cli_json_times_as_digits(line) ||
        (mark && !cJSON_AddStringToObject(line, "mark", mark)))
        return PL_ENOMEM;
    if (!cli_json_line(x->f, line))
        return PL_ENOMEM;
    if (ferror(x->f)) { /* a full disk */
        x->err = errno;
        return PL_EIO;
    }
    return ftell(x->f) > (long)WEB_EXPORT_MAX ? PL_ELIMIT : 0;
}

/*
 * A file without a name in @p dir (O_TMPFILE; where the file system has
 * none, one named and removed at once): its space goes with its last
 * descriptor, however the download ends or the process does.  NULL (errno
 * set) if none can be made.
 */
static FILE *unnamed_file(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/ledger-web-export.XXXXXX", dir);
        if (n < 0 || (size_t)n >= sizeof path) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        if ((fd = mkostemp(path, O_CLOEXEC)) >= 0)
            unlink(path);
    }
    FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
    if (!f && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int api_export(web *w, const char *id, int *fd, size_t *len, cJSON **out)
{
    *fd = -1;
    *len = 0;
    pl_run_info *ri = NULL;
    int http = web_get_run(w, id, &ri, out);
    if (http != 200)
        return http;
    /* in a file, not in memory: the process stays small */
    exporter x = {unnamed_file(w->tmp_dir), NULL, ri, 0};
    if (!x.f) {
        http = web_fail(out, 500, "export_file",
                        "cannot make the export's file in %s: %s",
                        QUOTE(w->tmp_dir), strerror(errno));
        pl_run_info_free(ri);
        return http;
    }
    web_marks m;
    x.m = &m;
    int st = web_run_marks(w, ri, 0, &m);
    if (!st)
        st = pl_run_export_each(w->engine, id, export_line, &x);
    long size = !st ? ftell(x.f) : -1;
    if (!st && (fflush(x.f) != 0 || size < 0 || (*fd = dup(fileno(x.f))) < 0)) {
        x.err = errno;
        st = PL_EIO;
    }
    fclose(x.f);
    web_marks_free(&m);
    pl_run_info_free(ri);
    if (st) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        if (st == PL_ELIMIT)
            return web_fail(out, 413, "too_large",
                            "the export of run %s is over %d MiB: take it "
                            "with ledger-dump --run ID --format jsonl",
                            QUOTE(id), WEB_EXPORT_MAX >> 20);
        if (st == PL_EIO && x.err)
            return web_fail(out, 500, "export_file",
                            "cannot write the export's file in %s: %s",
                            QUOTE(w->tmp_dir), strerror(x.err));
        return web_fail_status(out, st, "exporting the run");
    }
    *len = (size_t)size;
    return 200;
}
