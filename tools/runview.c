/*
 * runview.c -- a run as the tools show it in JSON: its record, its steps
 * read in tree order and marked (in-doubt calls, waiting calls, error
 * results, the suspension), its model tokens.  ledger-dump and ledger-web
 * share it, so that both give the same objects.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger_llm.h>

#include "runview.h"

/* ---- a run's record ---------------------------------------------------------- */

const char *status_text(const pl_run_info *ri)
{
    static _Thread_local char buf[PL_MAX_NAME + 128];
    if (ri->status == PL_RUN_RUNNING)
        return ri->owner_alive ? "running (owner alive)"
                               : "running (owner gone: crashed)";
    if (ri->status == PL_RUN_WAITING) {
        char what[PL_MAX_NAME + 96];
        cli_wait_text(what, sizeof what, ri->wake_ms, ri->wait_event,
                      cli_now_us());
        snprintf(buf, sizeof buf, "waiting %s", what);
        return buf;
    }
    return pl_run_status_name(ri->status);
}

bool crashed(const pl_run_info *ri)
{
    return ri->status == PL_RUN_RUNNING && !ri->owner_alive;
}

bool run_ended(const pl_run_info *ri)
{
    return ri->status == PL_RUN_COMPLETED || ri->status == PL_RUN_FAILED ||
           ri->status == PL_RUN_CANCELLED || ri->status == PL_RUN_SUPERSEDED ||
           ri->status == PL_RUN_CONTINUED;
}

cJSON *run_json(const pl_run_info *ri)
{
    char created[40], updated[40], hb[40];
    cli_time_iso(created, sizeof created, ri->created_us, false);
    cli_time_iso(updated, sizeof updated, ri->updated_us, false);
    cli_time_iso(hb, sizeof hb, ri->heartbeat_us, false);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", ri->id);
    cJSON_AddStringToObject(o, "policy", ri->policy);
    cJSON_AddStringToObject(o, "status", pl_run_status_name(ri->status));
    cJSON_AddNumberToObject(o, "steps", (double)ri->steps);
    cJSON_AddStringToObject(o, "created", created);
    cli_json_add_int(o, "created_us", ri->created_us);
    cJSON_AddStringToObject(o, "updated", updated);
    cli_json_add_int(o, "updated_us", ri->updated_us);
    cJSON_AddStringToObject(o, "heartbeat", hb);
    cJSON_AddNumberToObject(o, "owner_pid", (double)ri->owner_pid);
    cJSON_AddStringToObject(o, "owner_host",
                            ri->owner_host ? ri->owner_host : "");
    cJSON_AddBoolToObject(o, "owner_alive", ri->owner_alive);
    cJSON_AddBoolToObject(o, "crashed", crashed(ri));
    cJSON_AddNumberToObject(o, "attempts", ri->attempts);
    if (ri->payload)
        cJSON_AddItemToObject(o, "payload", cJSON_Duplicate(ri->payload, 1));
    if (ri->code)
        cJSON_AddStringToObject(o, "code", ri->code);
    if (ri->successor)
        cJSON_AddStringToObject(o, "successor", ri->successor);
    if (ri->predecessor)
        cJSON_AddStringToObject(o, "predecessor", ri->predecessor);
    if (ri->status == PL_RUN_FAILED || ri->status == PL_RUN_CANCELLED) {
        cli_json_string_or_null(o, "reason", ri->reason);
        cJSON_AddStringToObject(o, "error", pl_strerror(ri->error));
    }
    if (ri->status == PL_RUN_WAITING) {
        cJSON_AddStringToObject(o, "waiting_path",
                                ri->suspended_path ? ri->suspended_path : "");
        if (ri->wake_ms) {
            char wake[40];
            /* a time past 2^53 ms: no date, and its number exact */
            if (ri->wake_ms > 0 && ri->wake_ms <= INT64_C(1) << 53) {
                cli_time_iso(wake, sizeof wake, ri->wake_ms * 1000, false);
                cJSON_AddStringToObject(o, "wake", wake);
            }
            cli_json_add_int(o, "wake_ms", ri->wake_ms);
        }
        if (ri->wait_event)
            cJSON_AddStringToObject(o, "wait_event", ri->wait_event);
    }
    if (ri->deadline_ms) /* its digits: exact past 2^53 too */
        cli_json_add_int(o, "deadline_ms", ri->deadline_ms);
    if (ri->status == PL_RUN_SUSPENDED) {
        cJSON_AddStringToObject(o, "suspended_path",
                                ri->suspended_path ? ri->suspended_path : "");
        if (ri->prompt)
            cJSON_AddItemToObject(o, "prompt", cJSON_Duplicate(ri->prompt, 1));
        if (ri->resume_token)
            cJSON_AddStringToObject(o, "resume_token", ri->resume_token);
    }
    return o;
}

bool run_json_set_steps(cJSON *o, uint64_t steps)
{
    cJSON *n = cJSON_CreateNumber((double)steps);
    if (n && cJSON_ReplaceItemInObjectCaseSensitive(o, "steps", n))
        return true;
    cJSON_Delete(n);
    return false;
}

/* ---- a check's verdict -------------------------------------------------------- */

const char *check_verdict(int st, pl_run_status recorded, int recorded_error,
                          const char **note)
{
    *note = NULL;
    /* a completed run (or one continued as new) is final: the loaded code
     * making a call past the end of its record would not end it the same
     * way, a code change as a divergence is (runs.h, pl_run_continue()) */
    if (st == PL_ECHECK &&
        (recorded == PL_RUN_COMPLETED || recorded == PL_RUN_CONTINUED)) {
        *note = "the loaded code goes on past where the record of the "
                "ended run stops: it would not end it the same way";
        return "diverged";
    }
    if (st == PL_ECHECK)
        *note = "replays cleanly up to where its record ends";
    else if (st == PL_ENONDET)
        return "diverged";
    else if (st == PL_ECODEVERSION)
        return "unsupported_version";
    else if (st == PL_ENEWERCODE)
        return "needs_newer_code";
    else if (st && recorded == PL_RUN_FAILED && st == recorded_error)
        *note = "fails as recorded";
    else if (st)
        return "error";
    return "ok";
}

/* ---- its steps ---------------------------------------------------------------- */

void rows_free(rows *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].id);
        free(r->v[i].path);
        free(r->v[i].actor);
        free(r->v[i].code);
        cJSON_Delete(r->v[i].payload);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

bool rows_add(rows *r, const pl_step *s, bool payload)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        srow *v = realloc(r->v, cap * sizeof *v);
        if (!v) {
            r->oom = true;
            return false;
        }
        r->v = v;
        r->cap = cap;
    }
    srow *w = &r->v[r->n];
    memset(w, 0, sizeof *w);
    const char *id = pl_step_id(s);
    const char *colon = strrchr(id, ':');
    const cJSON *p = pl_step_payload(s);
    w->id = cli_strdup(id);
    w->path = cli_strdup(id);
    w->actor = cli_strdup(pl_step_actor(s));
    w->payload = p && payload ? cJSON_Duplicate(p, 1) : cJSON_CreateNull();
    w->code = pl_step_code(s) ? cli_strdup(pl_step_code(s)) : NULL;
    r->n++;
    if (!w->id || !w->path || !w->actor || !w->payload ||
        (pl_step_code(s) && !w->code) || !colon) {
        r->oom = true;
        return false;
    }
    w->path[colon - id] = '\0';
    w->seq = pl_step_seq(s);
    w->type = pl_step_type_of(s);
    w->time_us = pl_step_time_us(s);
    w->has_hash = pl_step_hash(w->hash, s) == PL_OK;
    if (pl_step_prev_hash(w->prev, s))
        memset(w->prev, 0, sizeof w->prev);
    w->is_error = pl_step_is_error(s);
    return true;
}

static int rows_visit(const pl_step *s, void *user)
{
    return rows_add(user, s, true) ? 0 : 1;
}

/* Read every step of a run into @p r.  Returns a pl_status. */
int read_rows(pl_engine *e, const char *run, rows *r)
{
    return read_rows_from(e, run, NULL, r);
}

int read_rows_from(pl_engine *e, const char *run, const char *from, rows *r)
{
    rows_free(r);
    int st = pl_run_walk_from(e, run, from, rows_visit, r);
    if (r->oom)
        return pl_errorf(PL_ENOMEM, "out of memory reading run '%s'", run);
    return st;
}

/* Does @p path lie at or below @p top? */
bool under(const char *path, const char *top)
{
    size_t n = strlen(top);
    return !strncmp(path, top, n) && (path[n] == '\0' || path[n] == '.');
}

call_mark call_mark_of(const rows *r, size_t i, const pl_run_info *ri)
{
    const srow *w = &r->v[i];
    if (w->type != PL_STEP_ACTION_CALL)
        return MARK_NONE;
    /* the next step of the same ledger, past engine suspensions */
    for (size_t j = i + 1; j < r->n; j++) {
        const srow *x = &r->v[j];
        if (strcmp(x->path, w->path) != 0)
            continue;
        if (x->type == PL_STEP_SUSPEND || x->type == PL_STEP_RESUME)
            continue;
        return MARK_NONE; /* answered, or a call the policy returned */
    }
    return call_mark_unanswered(w->path, w->seq, ri);
}

call_mark call_mark_unanswered(const char *path, uint32_t seq,
                               const pl_run_info *ri)
{
    char callee[PL_MAX_RUN_ID + 64];
    snprintf(callee, sizeof callee, "%s.%u", path, seq);
    if (ri->status == PL_RUN_RUNNING && ri->owner_alive)
        return MARK_NONE; /* in flight now */
    if (ri->status == PL_RUN_SUSPENDED && ri->suspended_path &&
        under(ri->suspended_path, callee))
        return MARK_WAITING;
    return MARK_IN_DOUBT;
}

cJSON *row_json(const char *run, const srow *w, const char *mark)
{
    char t[48], h[2 * PL_HASH_LEN + 1], ph[2 * PL_HASH_LEN + 1];
    cli_time_iso(t, sizeof t, w->time_us, true);
    cli_hex(ph, w->prev, PL_HASH_LEN);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "run", run);
    cJSON_AddStringToObject(o, "path", w->path);
    cJSON_AddNumberToObject(o, "seq", w->seq);
    cJSON_AddStringToObject(o, "id", w->id);
    cJSON_AddStringToObject(o, "actor", w->actor);
    cJSON_AddStringToObject(o, "type", pl_step_type_name(w->type));
    cJSON_AddItemToObject(o, "payload", cJSON_Duplicate(w->payload, 1));
    cJSON_AddStringToObject(o, "time", t);
    cli_json_add_int(o, "time_us", w->time_us);
    if (w->code)
        cJSON_AddStringToObject(o, "code", w->code);
    else
        cJSON_AddNullToObject(o, "code");
    if (w->has_hash) {
        cli_hex(h, w->hash, PL_HASH_LEN);
        cJSON_AddStringToObject(o, "hash", h);
    } else {
        cJSON_AddNullToObject(o, "hash"); /* folded into its caller's result */
    }
    cJSON_AddStringToObject(o, "prev_hash", ph);
    if (mark)
        cJSON_AddStringToObject(o, "mark", mark);
    return o;
}

const char *mark_name(const rows *r, size_t i, const pl_run_info *ri)
{
    return mark_text(call_mark_of(r, i, ri), &r->v[i], ri);
}

const char *mark_text(call_mark m, const srow *w, const pl_run_info *ri)
{
    switch (m) {
    case MARK_IN_DOUBT: return "in_doubt";
    case MARK_WAITING: return "waiting";
    case MARK_NONE: break;
    }
    if (w->is_error)
        return "error";
    if (w->type == PL_STEP_SUSPEND && ri->status == PL_RUN_SUSPENDED &&
        ri->suspended_path && !strcmp(ri->suspended_path, w->path))
        return "suspended";
    return NULL;
}

/* The token totals of the run's model calls (none: nothing is added). */
bool run_tokens(pl_llm_tokens *t, pl_engine *e, const char *id)
{
    return pl_llm_run_tokens(t, e, id) == PL_OK && t->exchanges > 0;
}

bool add_tokens(cJSON *run, pl_engine *e, const char *id)
{
    pl_llm_tokens t = PL_LLM_TOKENS_INIT;
    if (!run_tokens(&t, e, id))
        return true;
    cJSON *o = cJSON_AddObjectToObject(run, "tokens");
    return o && cJSON_AddNumberToObject(o, "input", (double)t.input) &&
           cJSON_AddNumberToObject(o, "output", (double)t.output) &&
           cJSON_AddNumberToObject(o, "model_calls", (double)t.exchanges);
}

bool mark_export_line(cJSON *line, const rows *r, const pl_run_info *ri,
                      size_t *next)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(line, "id");
    if (!cJSON_IsString(id) || *next >= r->n)
        return true;
    size_t i = (*next)++;
    const char *mark = !strcmp(id->valuestring, r->v[i].id)
                           ? mark_name(r, i, ri)
                           : NULL;
    return !mark || cJSON_AddStringToObject(line, "mark", mark);
}

bool outcome_fields(cJSON *j, const pl_outcome *o)
{
    switch (o->status) {
    case PL_RUN_COMPLETED: {
        const cJSON *res = pl_outcome_result(o);
        return cJSON_AddItemToObject(j, "result",
                                     res ? cJSON_Duplicate(res, true)
                                         : cJSON_CreateNull());
    }
    case PL_RUN_SUSPENDED:
        return cli_json_string_or_null(j, "suspended_path",
                                       o->suspended_path) &&
               cli_json_string_or_null(j, "resume_token", o->resume_token) &&
               cJSON_AddItemToObject(j, "prompt",
                                     o->prompt ? cJSON_Duplicate(o->prompt, 1)
                                               : cJSON_CreateNull());
    case PL_RUN_WAITING:
        return cli_json_string_or_null(j, "waiting_path", o->suspended_path) &&
               (o->wake_ms ? cJSON_AddNumberToObject(j, "wake_ms",
                                                     (double)o->wake_ms) != NULL
                           : cJSON_AddNullToObject(j, "wake_ms") != NULL) &&
               cli_json_string_or_null(j, "wait_event", o->wait_event);
    case PL_RUN_CONTINUED:
        return cli_json_string_or_null(j, "successor", o->successor);
    default:
        return cJSON_AddStringToObject(j, "error", pl_status_name(o->error)) &&
               cli_json_string_or_null(j, "reason", o->reason);
    }
}
