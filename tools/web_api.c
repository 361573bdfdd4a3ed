/*
 * web_api.c -- the JSON API's reads of one run: GET /api/session,
 * /api/runs/ID (the run and every step, marked, with its invocations),
 * /api/runs/ID/timeline (its calls with start and duration) and
 * /api/runs/ID/export (the JSON lines ledger-dump writes).  The objects
 * are ledger-dump --format json's (runview.c).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        "answer", "continue",       "fork",   "check",       "verify",
        "signal", "batch_continue", "cancel", "batch_cancel"};
    for (size_t i = 0; acts && !w->read_only && i < 9; i++)
        cJSON_AddItemToArray(acts, cJSON_CreateString(names[i]));
    *out = o;
    return 200;
}

/* Read run @p id's record and steps; on failure a reply in *out. */
static int load(web *w, const char *id, pl_run_info **ri, rows *rs, cJSON **out)
{
    int st = pl_run_get(ri, w->engine, id);
    if (st == PL_ENOTFOUND)
        return web_fail(out, 404, "not_found", "no run %s in the store",
                        QUOTE(id));
    if (st)
        return web_fail_status(out, st, "reading the run");
    if ((*ri)->steps > WEB_STEPS_MAX) {
        pl_run_info_free(*ri);
        *ri = NULL;
        return web_fail(out, 413, "too_large",
                        "run %s has more than %d steps: read it with "
                        "ledger-dump or its export",
                        QUOTE(id), WEB_STEPS_MAX);
    }
    if ((st = read_rows(w->engine, id, rs))) {
        pl_run_info_free(*ri);
        *ri = NULL;
        rows_free(rs);
        return web_fail_status(out, st, "reading the run's steps");
    }
    return 200;
}

const char *web_callee(const srow *call)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(call->payload, "policy");
    return cJSON_IsString(p) ? p->valuestring : call->actor;
}

/* Each invocation of the run: its path, its policy (the callee its call
 * names; the root's the run's), where its steps start in the list, and
 * how many. */
static cJSON *invocations(const rows *rs, const pl_run_info *ri)
{
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; list && i < rs->n; i++) {
        const srow *s = &rs->v[i];
        if (i > 0 && !strcmp(rs->v[i - 1].path, s->path))
            continue;
        /* a ledger's steps are contiguous but for its callees' subtrees:
         * count from the first time it shows */
        bool seen = false;
        for (int k = cJSON_GetArraySize(list) - 1; k >= 0 && !seen; k--) {
            cJSON *e = cJSON_GetArrayItem(list, k);
            seen = !strcmp(cJSON_GetObjectItem(e, "path")->valuestring,
                           s->path);
        }
        if (seen)
            continue;
        cJSON *e = cJSON_CreateObject();
        if (!e) {
            cJSON_Delete(list);
            return NULL;
        }
        cJSON_AddItemToArray(list, e);
        cJSON_AddStringToObject(e, "path", s->path);
        const char *dot = strrchr(s->path, '.');
        unsigned depth = 0;
        for (const char *p = s->path; *p; p++)
            depth += *p == '.';
        cJSON_AddNumberToObject(e, "depth", depth);
        const char *policy = ri->policy;
        if (dot) {
            char parent[256];
            snprintf(parent, sizeof parent, "%.*s", (int)(dot - s->path),
                     s->path);
            cJSON_AddStringToObject(e, "parent", parent);
            unsigned long seq = strtoul(dot + 1, NULL, 10);
            for (size_t j = i; j-- > 0;)
                if (!strcmp(rs->v[j].path, parent) && rs->v[j].seq == seq &&
                    rs->v[j].type == PL_STEP_ACTION_CALL) {
                    policy = web_callee(&rs->v[j]);
                    cJSON_AddStringToObject(e, "call", rs->v[j].id);
                    break;
                }
        } else {
            cJSON_AddNullToObject(e, "parent");
        }
        cJSON_AddStringToObject(e, "policy", policy);
        size_t n = 0;
        for (size_t j = i; j < rs->n; j++)
            n += !strcmp(rs->v[j].path, s->path);
        cJSON_AddNumberToObject(e, "steps", (double)n);
        cJSON_AddNumberToObject(e, "first", (double)i);
    }
    return list;
}

int api_run(web *w, const char *id, cJSON **out)
{
    pl_run_info *ri = NULL;
    rows rs = {0};
    int http = load(w, id, &ri, &rs, out);
    if (http != 200)
        return http;
    cJSON *doc = cJSON_CreateObject(), *steps = cJSON_CreateArray();
    cJSON *run = run_json(ri);
    bool ok = doc && steps && run && add_tokens(run, w->engine, id) &&
              cJSON_AddStringToObject(run, "root_policy", ri->policy) &&
              cJSON_AddStringToObject(run, "state", web_status_name(ri));
    size_t in_doubt = 0, errors = 0;
    for (size_t i = 0; ok && i < rs.n; i++) {
        const char *mark = mark_name(&rs, i, ri);
        in_doubt += mark && !strcmp(mark, "in_doubt");
        errors += mark && !strcmp(mark, "error");
        cJSON *j = row_json(id, &rs.v[i], mark);
        ok = j != NULL;
        if (ok)
            cJSON_AddItemToArray(steps, j);
    }
    if (ok) {
        cJSON_AddBoolToObject(run, "in_doubt", in_doubt > 0);
        cJSON_AddNumberToObject(run, "in_doubt_calls", (double)in_doubt);
        cJSON_AddNumberToObject(run, "error_results", (double)errors);
        cJSON_AddNumberToObject(run, "steps_read", (double)rs.n);
        cJSON *inv = invocations(&rs, ri);
        ok = inv != NULL;
        cJSON_AddItemToObject(doc, "run", run);
        cJSON_AddItemToObject(doc, "steps", steps);
        cJSON_AddItemToObject(doc, "invocations", inv);
        run = steps = NULL;
    }
    cJSON_Delete(run);
    cJSON_Delete(steps);
    rows_free(&rs);
    pl_run_info_free(ri);
    if (!ok) {
        cJSON_Delete(doc);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    *out = doc;
    return 200;
}

/* ---- the timeline --------------------------------------------------------------- */

/*
 * The calls of a run's rows, with their ends.  Rows come in tree order: a
 * ledger's rows, each callee's rows after its call.  An invocation's calls
 * are answered in the order they were made (one after another, or a
 * fan-out's calls all made before their results come, in the same order),
 * so a row of a ledger answers the oldest call of that ledger still
 * awaiting one (a result or anything else but another call or the engine's
 * suspend and resume).  A call still awaiting one when the rows leave its
 * ledger's subtree is unanswered.  @p fn is called for each call in row
 * order.  False on OOM.
 */
bool web_calls(const rows *rs, const pl_run_info *ri, web_call_fn fn,
               void *user)
{
    size_t *end = malloc((rs->n + 1) * sizeof *end);
    size_t *pend = malloc((rs->n + 1) * sizeof *pend);
    if (!end || !pend) {
        free(end);
        free(pend);
        return false;
    }
    size_t np = 0; /* pend[0..np): calls awaiting an answer, in row order */
    for (size_t i = 0; i <= rs->n; i++) {
        const srow *s = i < rs->n ? &rs->v[i] : NULL;
        bool answered = !s || s->type == PL_STEP_ACTION_CALL ||
                        s->type == PL_STEP_SUSPEND || s->type == PL_STEP_RESUME;
        size_t k = 0;
        for (size_t j = 0; j < np; j++) {
            const srow *c = &rs->v[pend[j]];
            if (s && !answered && !strcmp(s->path, c->path)) {
                end[pend[j]] = i; /* the oldest of this ledger's calls */
                answered = true;
            } else if (s && under(s->path, c->path)) {
                pend[k++] = pend[j]; /* still inside its caller's subtree */
            } else {
                end[pend[j]] = SIZE_MAX;
            }
        }
        np = k;
        if (s && s->type == PL_STEP_ACTION_CALL)
            pend[np++] = i;
    }
    for (size_t i = 0; i < rs->n; i++)
        if (rs->v[i].type == PL_STEP_ACTION_CALL)
            fn(rs, i, end[i], ri, user);
    free(end);
    free(pend);
    return true;
}

static double num_of(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(n) ? n->valuedouble : -1;
}

static void timeline_call(const rows *rs, size_t call, size_t end,
                          const pl_run_info *ri, void *user)
{
    cJSON *list = user;
    const srow *c = &rs->v[call];
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return;
    char callee[300];
    snprintf(callee, sizeof callee, "%s.%u", c->path, c->seq);
    unsigned depth = 0;
    for (const char *p = c->path; *p; p++)
        depth += *p == '.';
    cJSON_AddStringToObject(e, "id", c->id);
    cJSON_AddStringToObject(e, "path", c->path);
    cJSON_AddStringToObject(e, "callee_path", callee);
    cJSON_AddNumberToObject(e, "depth", depth);
    cJSON_AddStringToObject(e, "policy", web_callee(c));
    cJSON_AddStringToObject(e, "caller", c->actor);
    cJSON_AddNumberToObject(e, "start_us", (double)c->time_us);
    if (end != SIZE_MAX) {
        const srow *r = &rs->v[end];
        cJSON_AddNumberToObject(e, "end_us", (double)r->time_us);
        cJSON_AddNumberToObject(e, "duration_ms",
                                (double)(r->time_us - c->time_us) / 1e3);
        cJSON_AddStringToObject(e, "result", r->id);
        cJSON_AddStringToObject(e, "state", r->is_error ? "error" : "ok");
        double tin = num_of(r->payload, "tokens_in");
        double tout = num_of(r->payload, "tokens_out");
        if (tin >= 0 && tout >= 0) {
            cJSON_AddNumberToObject(e, "tokens_in", tin);
            cJSON_AddNumberToObject(e, "tokens_out", tout);
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->payload,
                                                              "model");
            if (cJSON_IsString(m))
                cJSON_AddStringToObject(e, "model", m->valuestring);
        }
    } else {
        cJSON_AddNullToObject(e, "end_us");
        cJSON_AddNullToObject(e, "duration_ms");
        const char *mark = mark_name(rs, call, ri);
        cJSON_AddStringToObject(e, "state", mark ? mark : "running");
    }
    cJSON_AddItemToArray(list, e);
}

int api_timeline(web *w, const char *id, cJSON **out)
{
    pl_run_info *ri = NULL;
    rows rs = {0};
    int http = load(w, id, &ri, &rs, out);
    if (http != 200)
        return http;
    cJSON *doc = cJSON_CreateObject();
    cJSON *calls = cJSON_CreateArray();
    bool ok = doc && calls;
    if (ok) {
        ok = web_calls(&rs, ri, timeline_call, calls);
        cJSON_AddStringToObject(doc, "run", ri->id);
        cJSON_AddStringToObject(doc, "state", web_status_name(ri));
        cJSON_AddNumberToObject(doc, "start_us", (double)ri->created_us);
        cJSON_AddNumberToObject(doc, "end_us",
                                (double)(rs.n && rs.v[rs.n - 1].time_us >
                                                     ri->updated_us
                                             ? rs.v[rs.n - 1].time_us
                                             : ri->updated_us));
        ok = ok && add_tokens(doc, w->engine, id);
        cJSON_AddItemToObject(doc, "calls", calls);
        calls = NULL;
    }
    cJSON_Delete(calls);
    rows_free(&rs);
    pl_run_info_free(ri);
    if (!ok) {
        cJSON_Delete(doc);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    *out = doc;
    return 200;
}

/* ---- the export ------------------------------------------------------------------ */

/* The export's lines, marked as ledger-dump --format jsonl marks them
 * (the rows are read only for a run of at most WEB_STEPS_MAX steps). */
typedef struct exporter {
    FILE *f;
    const rows *rs;
    const pl_run_info *ri;
    size_t next;
} exporter;

static int export_line(cJSON *line, void *user)
{
    exporter *x = user;
    if (x->rs && !mark_export_line(line, x->rs, x->ri, &x->next))
        return PL_ENOMEM;
    if (!cli_json_line(x->f, line))
        return PL_EIO;
    return ftell(x->f) > (long)WEB_EXPORT_MAX ? PL_ELIMIT : 0;
}

int api_export(web *w, const char *id, char **text, size_t *len, cJSON **out)
{
    *text = NULL;
    *len = 0;
    pl_run_info *ri = NULL;
    rows rs = {0};
    int st = pl_run_get(&ri, w->engine, id);
    if (st == PL_ENOTFOUND)
        return web_fail(out, 404, "not_found", "no run %s in the store",
                        QUOTE(id));
    if (st)
        return web_fail_status(out, st, "reading the run");
    bool marked = ri->steps <= WEB_STEPS_MAX &&
                  read_rows(w->engine, id, &rs) == PL_OK;
    exporter x = {open_memstream(text, len), marked ? &rs : NULL, ri, 0};
    if (!x.f)
        st = PL_ENOMEM;
    else
        st = pl_run_export_each(w->engine, id, export_line, &x);
    if (x.f && fclose(x.f) != 0 && !st)
        st = PL_ENOMEM;
    rows_free(&rs);
    pl_run_info_free(ri);
    if (st) {
        free(*text);
        *text = NULL;
        if (st == PL_ELIMIT)
            return web_fail(out, 413, "too_large",
                            "the export of run %s is over %d MiB: take it "
                            "with ledger-dump --run ID --format jsonl",
                            QUOTE(id), WEB_EXPORT_MAX >> 20);
        return web_fail_status(out, st, "exporting the run");
    }
    return 200;
}
