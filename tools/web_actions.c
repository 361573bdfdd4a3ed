/*
 * web_actions.c -- the POST actions: each does what ledger-replay's
 * command does (the same library calls, so the run records the same), and
 * answers with the summary ledger-replay --json prints for it.
 *
 *   /api/runs/ID/answer    --resume ID --answer BODY (the token the run
 *                          records)
 *   /api/runs/ID/continue  --run ID
 *   /api/runs/ID/fork      --fork ID --at AT [--new-id NEW]: body
 *                          {"at": "0:N", "new_id": optional}; the new run is
 *                          continued at once, as ledger-replay does
 *   /api/runs/ID/upgrade   --upgrade ID at the step a check names: body
 *                          {"at": "0:N", "new_id": optional}; the run ends
 *                          superseded, the new run is continued at once
 *   /api/runs/ID/check     --check ID: replay, execute and write nothing
 *   /api/runs/ID/verify    ledger-dump --verify ID: the hash chains
 *   /api/runs/ID/signal    --signal ID --name NAME --payload JSON: body
 *                          {"name": ..., "payload": {...}}; a run waiting
 *                          for it goes on here
 *   /api/runs/ID/cancel    --cancel ID [--reason TEXT]: body {"reason":
 *                          optional}
 *   /api/runs/ID/delete    pl_run_delete(): a run that has ended, leaving
 *                          its tombstone; a live run is refused (409)
 *   /api/batch/continue    --all, on the runs a filter selects (crashed
 *                          ones only are continued)
 *   /api/batch/cancel      --cancel, on the unfinished runs a filter (one
 *                          at least) selects
 *   /api/batch/delete      pl_run_delete() on the ended runs a filter (one
 *                          at least) selects ("status=failed&until=7d":
 *                          the failed runs created over a week ago)
 *
 * A batch acts on at most the filter's limit of runs a request (1..BATCH_MAX,
 * the list's default when not given: a limit over it is refused, never
 * cut); "truncated" says more may match.  With dry_run=1 it acts on none and
 * lists the runs it would act on.
 */
#include <stdlib.h>
#include <string.h>

#include "web.h"

#define BATCH_MAX 100 /* runs one batch request acts on */
/* the longest reason pl_run_cancel() takes (policyledger/time.h) */
#define CANCEL_REASON_MAX 4096

/* ---- what a check saw (the engine's events, on the running thread) ----- */

typedef struct seen {
    bool diverged;
    cJSON *divergence;
    cJSON *code_changed;
} seen;

static _Thread_local seen *g_seen;

static cJSON *diff_step(pl_step_type type, const char *actor,
                        const char *payload, const char *code)
{
    cJSON *s = cJSON_CreateObject();
    if (!s)
        return NULL;
    const char *tn = type ? pl_step_type_name(type) : NULL;
    cJSON_AddItemToObject(s, "type",
                          tn ? cJSON_CreateString(tn) : cJSON_CreateNull());
    cJSON_AddItemToObject(s, "actor",
                          actor ? cJSON_CreateString(actor)
                                : cJSON_CreateNull());
    cJSON_AddItemToObject(s, "payload",
                          payload ? cJSON_CreateString(payload)
                                  : cJSON_CreateNull());
    cJSON_AddItemToObject(s, "code",
                          code ? cJSON_CreateString(code) : cJSON_CreateNull());
    return s;
}

void web_on_event(const pl_event *ev, void *user)
{
    (void)user;
    seen *s = g_seen;
    if (!s || !ev->diff)
        return;
    const pl_replay_diff *d = ev->diff;
    if (ev->kind == PL_EVENT_DIVERGED && !s->diverged) {
        s->diverged = true;
        cJSON *j = s->divergence = cJSON_CreateObject();
        if (!j)
            return;
        cli_json_string_or_null(j, "step", d->step_id);
        cli_json_string_or_null(j, "invocation", ev->path);
        cJSON_AddNumberToObject(j, "seq", ev->seq);
        cJSON_AddItemToObject(j, "recorded",
                              diff_step(d->recorded_type, d->recorded_actor,
                                        d->recorded_payload, d->recorded_code));
        cJSON_AddItemToObject(j, "now",
                              diff_step(d->new_type, d->new_actor,
                                        d->new_payload, d->new_code));
    } else if (ev->kind == PL_EVENT_CODE_CHANGED && s->code_changed &&
               cJSON_GetArraySize(s->code_changed) < 100) {
        cJSON *c = cJSON_CreateObject();
        if (!c)
            return;
        cli_json_string_or_null(c, "first_step", d->step_id);
        cJSON_AddItemToObject(c, "recorded",
                              d->recorded_code
                                  ? cJSON_CreateString(d->recorded_code)
                                  : cJSON_CreateNull());
        cJSON_AddItemToObject(c, "now",
                              d->new_code ? cJSON_CreateString(d->new_code)
                                          : cJSON_CreateNull());
        cJSON_AddItemToArray(s->code_changed, c);
    }
}

/* ---- summaries --------------------------------------------------------------- */

static double ms_since(int64_t t0) { return (double)(cli_now_us() - t0) / 1e3; }

/* An outcome as ledger-replay --json summarises it. */
static cJSON *outcome_json(const pl_outcome *o, double ms, const char *note)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "run_id", o->run_id);
    cJSON_AddStringToObject(j, "status", pl_run_status_name(o->status));
    if (note)
        cJSON_AddStringToObject(j, "note", note);
    cJSON_AddNumberToObject(j, "calls_served", (double)o->calls_served);
    cJSON_AddNumberToObject(j, "calls_executed", (double)o->calls_executed);
    cJSON_AddNumberToObject(j, "steps_replayed", (double)o->steps_replayed);
    cJSON_AddNumberToObject(j, "steps_appended", (double)o->steps_appended);
    cJSON_AddNumberToObject(j, "elapsed_ms", ms);
    if (!outcome_fields(j, o)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* A run the engine would not execute, as ledger-replay reports it. */
static cJSON *refused_json(const char *id, int st)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "run_id", id);
    cJSON_AddStringToObject(j, "status", "not_run");
    cJSON_AddStringToObject(j, "error", pl_status_name(st));
    cJSON_AddStringToObject(j, "message", pl_errmsg());
    return j;
}

/*
 * The links of a chain after one that continued as new, @p next the
 * first, continued in turn as ledger-replay --run continues them (a link
 * deleted after it continued is passed; one deleted after it ended is the
 * chain's end): each summarised in @p doc's "successors", as the run is
 * (a refusal as one, its error named), up to the link that did not
 * continue as new.  false on a failure of memory.
 */
static bool follow_chain(web *w, const char *next, cJSON *doc)
{
    cJSON *links = cJSON_AddArrayToObject(doc, "successors");
    char cur[PL_MAX_RUN_ID + 1];
    snprintf(cur, sizeof cur, "%s", next);
    for (bool more = links != NULL; more;) {
        pl_tombstone end;
        cJSON *one = NULL;
        more = false;
        if (!cli_chain_link(w->engine, cur, &end)) {
            char del[40];
            cli_time_iso(del, sizeof del, end.deleted_us, false);
            if ((one = cJSON_CreateObject()) &&
                !(cJSON_AddStringToObject(one, "run_id", cur) &&
                  cJSON_AddStringToObject(one, "status",
                                          pl_run_status_name(end.status)) &&
                  cJSON_AddStringToObject(one, "deleted", del))) {
                cJSON_Delete(one);
                one = NULL;
            }
        } else {
            pl_outcome *o = NULL;
            int64_t t0 = cli_now_us();
            int st = pl_run_continue(&o, w->engine, cur, NULL);
            one = st ? refused_json(cur, st)
                     : outcome_json(o, ms_since(t0), "(successor)");
            more = !st && o->status == PL_RUN_CONTINUED && o->successor;
            if (more)
                snprintf(cur, sizeof cur, "%s", o->successor);
            pl_outcome_free(o);
        }
        if (!one)
            return false;
        cJSON_AddItemToArray(links, one);
    }
    return links != NULL;
}

/* Continue run @p id; its summary in *out (refused: an error status). */
static int continue_run(web *w, const char *id, const char *note, cJSON **out)
{
    pl_run_info *ri = NULL;
    int st = pl_run_get(&ri, w->engine, id);
    if (!st && ri->status == PL_RUN_RUNNING && ri->owner_alive) {
        int http = web_fail(out, 409, "PL_EBUSY",
                            "run %s is running in live process %lld on %s: "
                            "not touched",
                            QUOTE(id), (long long)ri->owner_pid,
                            ri->owner_host ? ri->owner_host : "-");
        pl_run_info_free(ri);
        return http;
    }
    if (!st && ri->status == PL_RUN_SUSPENDED) {
        int http = web_fail(out, 409, "PL_ESTATE",
                            "run %s is suspended at %s: answer it", QUOTE(id),
                            ri->suspended_path ? ri->suspended_path : "-");
        pl_run_info_free(ri);
        return http;
    }
    pl_run_info_free(ri);
    if (st == PL_ENOTFOUND)
        return web_fail(out, 404, "not_found", "no run %s in the store",
                        QUOTE(id));
    if (st)
        return web_fail_status(out, st, "reading the run");
    pl_outcome *o = NULL;
    int64_t t0 = cli_now_us();
    st = pl_run_continue(&o, w->engine, id, NULL);
    if (st) {
        *out = refused_json(id, st);
        return web_http_status(st);
    }
    *out = outcome_json(o, ms_since(t0), note);
    if (*out && o->status == PL_RUN_CONTINUED && o->successor &&
        !follow_chain(w, o->successor, *out)) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    pl_outcome_free(o);
    return *out ? 200 : web_fail(out, 500, "PL_ENOMEM", "out of memory");
}

/* The request body as one JSON object; else a 400 in *out. */
static int body_object(const web_req *r, cJSON **obj, cJSON **out)
{
    *obj = NULL;
    if (!r->body || !r->len)
        return web_fail(out, 400, "bad_json", "the body must be a JSON object");
    size_t bad = cli_utf8_bad(r->body, r->len);
    if (bad < r->len)
        return web_fail(out, 400, "bad_json",
                        "the body is not UTF-8 (at byte %zu)", bad);
    /* refused, saying where: a body that is not one JSON value, a NUL
     * byte in it, a string holding \u0000 (cJSON would cut it there:
     * {"name": "a\u0000b"} would signal "a") */
    int st = pl_json_parse(obj, r->body, r->len);
    if (st == PL_ENOMEM)
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    if (st)
        return web_fail(out, 400, "bad_json", "the body: %s", pl_errmsg());
    if (!cJSON_IsObject(*obj)) {
        cJSON_Delete(*obj);
        *obj = NULL;
        return web_fail(out, 400, "bad_json",
                        "the body is not one JSON object");
    }
    return 200;
}

/* ---- one run --------------------------------------------------------------------- */

static int do_answer(web *w, const char *id, const web_req *r, cJSON **out)
{
    cJSON *answer;
    int http = body_object(r, &answer, out);
    if (http != 200)
        return http;
    pl_run_info *ri = NULL;
    int st = pl_run_get(&ri, w->engine, id);
    if (st) {
        cJSON_Delete(answer);
        return st == PL_ENOTFOUND
                   ? web_fail(out, 404, "not_found", "no run %s in the store",
                              QUOTE(id))
                   : web_fail_status(out, st, "reading the run");
    }
    if (ri->status != PL_RUN_SUSPENDED || !ri->resume_token) {
        http = web_fail(out, 409, "PL_ESTATE",
                        "run %s is %s, not suspended: there is nothing to "
                        "answer",
                        QUOTE(id), pl_run_status_name(ri->status));
        pl_run_info_free(ri);
        cJSON_Delete(answer);
        return http;
    }
    char *token = cli_strdup(ri->resume_token);
    pl_run_info_free(ri);
    pl_outcome *o = NULL;
    int64_t t0 = cli_now_us();
    st = token ? pl_run_resume(&o, w->engine, id, token, answer) : PL_ENOMEM;
    free(token);
    cJSON_Delete(answer);
    if (st) {
        *out = refused_json(id, st);
        return web_http_status(st);
    }
    *out = outcome_json(o, ms_since(t0), "(resumed)");
    pl_outcome_free(o);
    return *out ? 200 : web_fail(out, 500, "PL_ENOMEM", "out of memory");
}

/*
 * Can run @p id's record be read?  200, or the answer a read gives: 500
 * PL_ECORRUPT for a damaged record, before an action is asked of the
 * engine: pl_run_signal() and pl_run_cancel() judge the run by the status
 * a damaged record still names (refusing it as ended, or marking it), and
 * the others say it in words of their own.  A run not in the store is
 * left to the action, which says so.
 */
static int readable(web *w, const char *id, cJSON **out)
{
    pl_run_info *ri = NULL;
    int st = pl_run_get(&ri, w->engine, id);
    pl_run_info_free(ri);
    return !st || st == PL_ENOTFOUND
               ? 200
               : web_fail_status(out, st, "reading the run");
}

/*
 * The check ledger-replay --upgrade makes first (executing and writing
 * nothing): 200 when run @p id diverges under the loaded code (a changed
 * step, or a code version it does not support), which is what an upgrade
 * is for; 409 not_needed when it replays; else the check's own refusal (a
 * policy not loaded, a step that cannot be read), nothing forked or
 * superseded.
 */
static int needs_upgrade(web *w, const char *id, cJSON **out)
{
    pl_outcome *o = NULL;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    int st = pl_run_continue(&o, w->engine, id, &ro);
    pl_outcome_free(o);
    if (st == PL_ENONDET || st == PL_ECODEVERSION)
        return 200;
    if (st == PL_OK || st == PL_ECHECK)
        return web_fail(out, 409, "not_needed",
                        "run %s replays under the loaded code: nothing to "
                        "upgrade",
                        QUOTE(id));
    return web_fail_status(out, st, "checking the run before its upgrade");
}

/* Fork run @p id at a root step, or (@p upgrade) upgrade it there: fork
 * it and end it superseded (pl_run_upgrade()); the new run continued. */
static int do_fork(web *w, const char *id, const web_req *r, bool upgrade,
                   cJSON **out)
{
    const char *verb = upgrade ? "upgrade" : "fork";
    cJSON *body;
    int http = body_object(r, &body, out);
    if (http != 200)
        return http;
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(body, "at");
    const cJSON *nid = cJSON_GetObjectItemCaseSensitive(body, "new_id");
    if (!cJSON_IsString(at) ||
        (nid && !cJSON_IsNull(nid) &&
         (!cJSON_IsString(nid) || !cli_run_id_ok(nid->valuestring)))) {
        cJSON_Delete(body);
        return web_fail(out, 400, "bad_request",
                        "%s: {\"at\": \"0:N\" (a step of the root ledger), "
                        "\"new_id\": a run id (optional)}",
                        verb);
    }
    if ((http = readable(w, id, out)) != 200) {
        cJSON_Delete(body);
        return http;
    }
    if (upgrade && (http = needs_upgrade(w, id, out)) != 200) {
        cJSON_Delete(body);
        return http;
    }
    char *new_id = NULL;
    const char *want = cJSON_IsString(nid) ? nid->valuestring : NULL;
    int st = upgrade
                 ? pl_run_upgrade(&new_id, w->engine, id, at->valuestring, want)
                 : pl_run_fork(&new_id, w->engine, id, at->valuestring, want);
    if (st) {
        http = web_fail(out, web_http_status(st), pl_status_name(st),
                        "cannot %s run %s at %s: %s", verb, QUOTE(id),
                        QUOTE(at->valuestring), pl_errmsg());
        cJSON_Delete(body);
        return http;
    }
    char note[PL_MAX_RUN_ID + 64];
    snprintf(note, sizeof note, "(%s from %s at %s)",
             upgrade ? "upgraded" : "forked", id, at->valuestring);
    http = continue_run(w, new_id, note, out);
    if (*out) {
        cJSON_AddStringToObject(*out, "forked_from", id);
        cJSON_AddStringToObject(*out, "forked_at", at->valuestring);
        cJSON_AddStringToObject(*out, "new_run", new_id);
        if (upgrade)
            cJSON_AddStringToObject(*out, "superseded", id);
    }
    free(new_id);
    cJSON_Delete(body);
    return http;
}

static int do_check(web *w, const char *id, cJSON **out)
{
    pl_run_info *ri = NULL;
    int st = pl_run_get(&ri, w->engine, id);
    if (st)
        return st == PL_ENOTFOUND
                   ? web_fail(out, 404, "not_found", "no run %s in the store",
                              QUOTE(id))
                   : web_fail_status(out, st, "reading the run");
    pl_run_status recorded = ri->status;
    int recorded_error = ri->error;
    pl_run_info_free(ri);
    seen s = {false, NULL, cJSON_CreateArray()};
    g_seen = &s;
    pl_outcome *o = NULL;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    int64_t t0 = cli_now_us();
    st = pl_run_continue(&o, w->engine, id, &ro);
    double ms = ms_since(t0);
    g_seen = NULL;
    const char *note;
    const char *verdict = check_verdict(st, recorded, recorded_error, &note);
    cJSON *j = cJSON_CreateObject();
    if (j) {
        cJSON_AddStringToObject(j, "run_id", id);
        cJSON_AddStringToObject(j, "check", verdict);
        cJSON_AddStringToObject(j, "status", pl_run_status_name(recorded));
        if (note)
            cJSON_AddStringToObject(j, "note", note);
        cJSON_AddNumberToObject(j, "elapsed_ms", ms);
        if (o) {
            cJSON_AddNumberToObject(j, "calls_served", (double)o->calls_served);
            cJSON_AddNumberToObject(j, "steps_replayed",
                                    (double)o->steps_replayed);
        }
        if (s.code_changed)
            cJSON_AddItemToObject(j, "code_changed", s.code_changed);
        else
            cJSON_AddArrayToObject(j, "code_changed");
        s.code_changed = NULL;
        if (s.divergence) {
            cJSON_AddItemToObject(j, "divergence", s.divergence);
            s.divergence = NULL;
        }
        if (!strcmp(verdict, "error")) {
            cJSON_AddStringToObject(j, "error", pl_status_name(st));
            cJSON_AddStringToObject(j, "message", pl_errmsg());
        }
    }
    cJSON_Delete(s.code_changed);
    cJSON_Delete(s.divergence);
    pl_outcome_free(o);
    *out = j;
    return j ? 200 : web_fail(out, 500, "PL_ENOMEM", "out of memory");
}

static int do_verify(web *w, const char *id, cJSON **out)
{
    int64_t t0 = cli_now_us();
    int st = pl_run_verify(w->engine, id);
    if (st == PL_ENOTFOUND)
        return web_fail(out, 404, "not_found", "no run %s in the store",
                        QUOTE(id));
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    cJSON_AddStringToObject(j, "run_id", id);
    cJSON_AddStringToObject(j, "verify", st ? "fault" : "ok");
    cJSON_AddNumberToObject(j, "elapsed_ms", ms_since(t0));
    if (st) {
        cJSON_AddStringToObject(j, "error", pl_status_name(st));
        cJSON_AddStringToObject(j, "message", pl_errmsg());
    }
    *out = j;
    return 200;
}

/* What a delivery (a signal, a cancellation) says when no run went on
 * here: as ledger-replay --json, the run's status now, and whether it has
 * ended (a cancellation ends a suspended or submitted run at once, and a
 * waiting one whose policies are loaded here is continued to its end). */
static cJSON *delivered_json(web *w, const char *id)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "run_id", id);
    cJSON_AddStringToObject(j, "status", "delivered");
    pl_run_info *ri = NULL;
    if (!pl_run_get(&ri, w->engine, id)) {
        cJSON_AddStringToObject(j, "now", web_status_name(ri));
        cJSON_AddBoolToObject(j, "ended", run_ended(ri));
    }
    pl_run_info_free(ri);
    return j;
}

static int do_signal(web *w, const char *id, const web_req *r, cJSON **out)
{
    cJSON *body;
    int http = body_object(r, &body, out);
    if (http != 200)
        return http;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(body, "name");
    const cJSON *payload = cJSON_GetObjectItemCaseSensitive(body, "payload");
    if (!cJSON_IsString(name) || !name->valuestring[0] ||
        (payload && !cJSON_IsObject(payload))) {
        cJSON_Delete(body);
        return web_fail(out, 400, "bad_request",
                        "signal: {\"name\": the event's name, \"payload\": "
                        "a JSON object (optional)}");
    }
    if ((http = readable(w, id, out)) != 200) {
        cJSON_Delete(body);
        return http;
    }
    pl_outcome *o = NULL;
    int64_t t0 = cli_now_us();
    int st = pl_run_signal(&o, w->engine, id, name->valuestring,
                           payload ? payload : pl_json_empty());
    cJSON_Delete(body);
    if (st)
        return web_fail(out, web_http_status(st), pl_status_name(st),
                        "cannot signal run %s: %s", QUOTE(id), pl_errmsg());
    *out = o ? outcome_json(o, ms_since(t0), "(signalled)")
             : delivered_json(w, id);
    pl_outcome_free(o);
    return *out ? 200 : web_fail(out, 500, "PL_ENOMEM", "out of memory");
}

/* Cancel run @p id for @p reason; its summary in *out. */
static int cancel_run(web *w, const char *id, const char *reason, cJSON **out)
{
    int st = pl_run_cancel(w->engine, id, reason);
    if (st)
        return web_fail(out, web_http_status(st), pl_status_name(st),
                        "cannot cancel run %s: %s", QUOTE(id), pl_errmsg());
    *out = delivered_json(w, id);
    return *out ? 200 : web_fail(out, 500, "PL_ENOMEM", "out of memory");
}

static int do_cancel(web *w, const char *id, const web_req *r, cJSON **out)
{
    cJSON *body = NULL;
    if (r->len) {
        int http = body_object(r, &body, out);
        if (http != 200)
            return http;
    }
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(body, "reason");
    if (reason && !cJSON_IsString(reason)) {
        cJSON_Delete(body);
        return web_fail(out, 400, "bad_request",
                        "cancel: {\"reason\": a string (optional)}");
    }
    int http = readable(w, id, out);
    if (http == 200)
        http = cancel_run(w, id, reason ? reason->valuestring : "", out);
    cJSON_Delete(body);
    return http;
}

/* Delete run @p id, which must have ended; its tombstone stays. */
static int do_delete(web *w, const char *id, cJSON **out)
{
    int http = readable(w, id, out);
    if (http != 200)
        return http;
    int st = pl_run_delete(w->engine, id);
    if (st)
        return web_fail(out, web_http_status(st), pl_status_name(st),
                        "cannot delete run %s: %s", QUOTE(id), pl_errmsg());
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "run_id", id) ||
        !cJSON_AddTrueToObject(o, "deleted")) {
        cJSON_Delete(o);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    *out = o;
    return 200;
}

static int run_action(web *w, const char *id, const char *action,
                      const web_req *r, cJSON **out)
{
    if (!strcmp(action, "answer"))
        return do_answer(w, id, r, out);
    if (!strcmp(action, "continue"))
        return continue_run(w, id, NULL, out);
    if (!strcmp(action, "fork"))
        return do_fork(w, id, r, false, out);
    if (!strcmp(action, "upgrade"))
        return do_fork(w, id, r, true, out);
    if (!strcmp(action, "check"))
        return do_check(w, id, out);
    if (!strcmp(action, "verify"))
        return do_verify(w, id, out);
    if (!strcmp(action, "signal"))
        return do_signal(w, id, r, out);
    if (!strcmp(action, "cancel"))
        return do_cancel(w, id, r, out);
    return do_delete(w, id, out);
}

static const char *const actions[] = {"answer",  "continue", "fork",
                                      "upgrade", "check",    "verify",
                                      "signal",  "cancel",   "delete"};
static const char *const verbs[] = {"continue", "cancel", "delete"};

bool web_is_action(const char *what, bool batch)
{
    const char *const *names = batch ? verbs : actions;
    size_t n = batch ? sizeof verbs / sizeof *verbs
                     : sizeof actions / sizeof *actions;
    for (size_t k = 0; k < n; k++)
        if (!strcmp(what, names[k]))
            return true;
    return false;
}

int api_action(web *w, const char *id, const char *action, const web_req *r,
               cJSON **out)
{
    size_t k = 0;
    while (k < sizeof actions / sizeof *actions && strcmp(action, actions[k]))
        k++;
    if (k == sizeof actions / sizeof *actions)
        return web_fail(out, 404, "not_found",
                        "no action %s: answer, continue, fork, upgrade, "
                        "check, verify, signal, cancel or delete",
                        QUOTE(action));
    int http = run_action(w, id, action, r, out);
    if (http < 400 || http >= 500 || !*out)
        return http;
    /* a run that is not there is said as the reads say it, whatever the
     * action: deleted (what its tombstone keeps) or not_found */
    pl_run_info *ri = NULL;
    if (http == 404 && pl_run_get(&ri, w->engine, id) == PL_ENOTFOUND)
        http = web_get_run(w, id, &ri, out);
    pl_run_info_free(ri);
    /* a refusal is the run not run, as ledger-replay --json says it */
    if (*out && !cJSON_GetObjectItemCaseSensitive(*out, "status")) {
        if (!cJSON_GetObjectItemCaseSensitive(*out, "run_id"))
            cJSON_AddStringToObject(*out, "run_id", id);
        cJSON_AddStringToObject(*out, "status", "not_run");
    }
    return http;
}

/* ---- batches ----------------------------------------------------------------------- */

typedef enum { PICK_CRASHED, PICK_UNFINISHED, PICK_ENDED } pick_what;

/* The runs a batch acts on, each {run_id, state, root_policy, created_us}
 * in a JSON array (the dry run's answer); and those it passes over, whose
 * record cannot be read (damaged), each {run_id, reason, message}. */
typedef struct pick {
    web *w;
    const web_filter *f;
    pick_what what;
    cJSON *runs, *skipped;
    size_t n, scanned;
    web_search search;
    bool truncated, oom;
} pick;

static int pick_visit(const pl_run_info *ri, void *user)
{
    pick *p = user;
    /* past the prefix's range: nothing further can match (runs are
     * listed in id order), the batch is whole */
    if (web_past_prefix(p->f, ri->id))
        return 1;
    if (p->n == p->f->limit || p->scanned == WEB_SCAN_MAX) {
        p->truncated = true;
        return 1;
    }
    bool take = p->what == PICK_CRASHED      ? crashed(ri)
                : p->what == PICK_UNFINISHED ? !run_ended(ri)
                                             : run_ended(ri);
    int m = take ? web_filter_match(p->w, p->f, ri, &p->search) : 0;
    if (m == WEB_SEARCH_SPENT) { /* the search's bounds: a request more */
        p->truncated = true;
        return 1;
    }
    if (p->search.oom) {
        p->oom = true;
        return 1;
    }
    p->scanned++;
    if (!m)
        return 0;
    cJSON *r = cJSON_CreateObject();
    if (!r || !cJSON_AddStringToObject(r, "run_id", ri->id) ||
        !cJSON_AddStringToObject(r, "state", web_status_name(ri)) ||
        !cJSON_AddStringToObject(r, "root_policy", ri->policy) ||
        !cli_json_add_int(r, "created_us", ri->created_us) ||
        !cJSON_AddItemToArray(p->runs, r)) {
        cJSON_Delete(r);
        p->oom = true;
        return 1;
    }
    p->n++;
    return 0;
}

/* A run whose record cannot be read: not acted on, and named as skipped,
 * whatever the filters but its prefix; the others are picked past it. */
static int pick_damaged(const char *id, const char *msg, void *user)
{
    pick *p = user;
    if (web_past_prefix(p->f, id))
        return 1;
    if (p->n == p->f->limit || p->scanned == WEB_SCAN_MAX) {
        p->truncated = true;
        return 1;
    }
    p->scanned++;
    if (p->f->prefix && strncmp(id, p->f->prefix, strlen(p->f->prefix)) != 0)
        return 0;
    cJSON *r = cJSON_CreateObject();
    if (!r || !cJSON_AddStringToObject(r, "run_id", id) ||
        !cJSON_AddStringToObject(r, "reason", "its record cannot be read") ||
        !cJSON_AddStringToObject(r, "message", msg) ||
        !cJSON_AddItemToArray(p->skipped, r)) {
        cJSON_Delete(r);
        p->oom = true;
        return 1;
    }
    return 0;
}

int api_batch(web *w, const char *action, const web_req *r, cJSON **out)
{
    static const char *const done_key[] = {"continued", "cancelled", "deleted"};
    int k = 0;
    while (k < 3 && strcmp(action, verbs[k]) != 0)
        k++;
    if (k == 3)
        return web_fail(out, 404, "not_found",
                        "no batch action %s: continue, cancel or delete",
                        QUOTE(action));
    web_filter f;
    int http = web_filter_parse(&f, r, BATCH_MAX, out);
    if (http != 200)
        return http;
    if (k > 0 && !f.status && !f.policy && !f.prefix && !f.q && !f.since_us &&
        !f.until_us)
        return web_fail(out, 400, "no_filter",
                        "a batch %s needs a filter (status, policy, prefix, "
                        "q, since or until): it would %s every %s run",
                        verbs[k], verbs[k], k == 1 ? "unfinished" : "ended");
    const char *dry = web_arg(r, "dry_run");
    if (dry && *dry && strcmp(dry, "0") != 0 && strcmp(dry, "1") != 0)
        return web_fail(out, 400, "bad_dry_run", "dry_run: 0 or 1");
    bool dry_run = dry && !strcmp(dry, "1");
    /* what pl_run_cancel() refuses, refused before any run is picked: a
     * dry run says what the action would do */
    const char *reason = web_arg(r, "reason");
    if (k == 1 && reason && strlen(reason) > CANCEL_REASON_MAX)
        return web_fail(out, 400, "bad_reason", "reason: at most %d bytes",
                        CANCEL_REASON_MAX);
    pick p = {.w = w,
              .f = &f,
              .what = k == 0   ? PICK_CRASHED
                      : k == 1 ? PICK_UNFINISHED
                               : PICK_ENDED,
              .runs = cJSON_CreateArray(),
              .skipped = cJSON_CreateArray()};
    cJSON *doc = cJSON_CreateObject(), *acted = NULL;
    if (!p.runs || !p.skipped || !doc ||
        (!dry_run && !(acted = cJSON_CreateArray()))) {
        cJSON_Delete(p.runs);
        cJSON_Delete(p.skipped);
        cJSON_Delete(doc);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    char start[PL_MAX_RUN_ID + 3];
    web_filter_start(&f, start, sizeof start);
    pl_runs_options o = PL_RUNS_OPTIONS_INIT;
    o.after = start;
    o.reverse = !f.asc;
    int st = cli_runs_each(w->engine, &o, pick_visit, pick_damaged, &p);
    if (st < 0)
        http = web_fail_status(out, st, "listing runs");
    else if (p.oom)
        http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
    unsigned done = 0, refused = 0;
    const cJSON *run, *todo = http == 200 && !dry_run ? p.runs : NULL;
    cJSON_ArrayForEach(run, todo)
    {
        const char *id = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(run, "run_id"));
        cJSON *one = NULL;
        int h = k == 0   ? continue_run(w, id, "(was crashed)", &one)
                : k == 1 ? cancel_run(w, id, reason ? reason : "", &one)
                         : do_delete(w, id, &one);
        if (h == 200)
            done++;
        else
            refused++;
        /* a refusal says which run, and why */
        if (one && !cJSON_GetObjectItemCaseSensitive(one, "run_id"))
            cJSON_AddStringToObject(one, "run_id", id);
        if (one)
            cJSON_AddItemToArray(acted, one);
    }
    if (http != 200) {
        cJSON_Delete(p.runs);
        cJSON_Delete(p.skipped);
        cJSON_Delete(acted);
        cJSON_Delete(doc);
        return http;
    }
    cJSON_AddItemToObject(doc, "skipped", p.skipped);
    if (dry_run) {
        cJSON_AddTrueToObject(doc, "dry_run");
        cJSON_AddStringToObject(doc, "action", verbs[k]);
        cJSON_AddNumberToObject(doc, "matched", (double)p.n);
        cJSON_AddItemToObject(doc, "runs", p.runs);
    } else {
        cJSON_Delete(p.runs);
        cJSON_AddItemToObject(doc, "runs", acted);
        cJSON_AddNumberToObject(doc, done_key[k], done);
        cJSON_AddNumberToObject(doc, "refused", refused);
    }
    cJSON_AddNumberToObject(doc, "scanned", (double)p.scanned);
    cJSON_AddBoolToObject(doc, "truncated", p.truncated);
    if (!web_search_json(&f, &p.search, doc)) {
        cJSON_Delete(doc);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    *out = doc;
    return 200;
}
