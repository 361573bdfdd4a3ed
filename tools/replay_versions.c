/*
 * replay_versions.c -- what ledger-replay --check tells an operator about
 * deploying a change: which live runs still need which version of each
 * change (pl_ctx_version), which code identity recorded each live run,
 * and, with --live, the deploy gate's verdict.
 *
 * The versions come from the replay itself (PL_EVENT_VERSION), under the
 * code loaded now: a run recorded before a change shows the default
 * version, which is what it needs; a run whose record ends before a
 * version point needs none yet (it will record the newest there).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* Ids listed in a text line before "and N more". */
#define IDS_SHOWN 10

bool is_live(pl_run_status s)
{
    return s == PL_RUN_RUNNING || s == PL_RUN_SUSPENDED ||
           s == PL_RUN_SUBMITTED || s == PL_RUN_WAITING;
}

/* Count run @p id under (@p key, @p version, @p is_default), once. */
static void tally_add(tally *ty, const char *key, int version, bool is_default,
                      const char *id)
{
    tally_row *row = NULL;
    for (size_t i = 0; i < ty->n && !row; i++)
        if (!strcmp(ty->v[i].key, key) && ty->v[i].version == version &&
            ty->v[i].is_default == is_default)
            row = &ty->v[i];
    if (!row) {
        tally_row *grown = realloc(ty->v, (ty->n + 1) * sizeof *grown);
        if (!grown) {
            ty->oom = true;
            return;
        }
        ty->v = grown;
        row = &ty->v[ty->n];
        memset(row, 0, sizeof *row);
        if (!(row->key = dup_or_null(key, &ty->oom)))
            return;
        ty->n++;
        row->version = version;
        row->is_default = is_default;
    }
    if (row->runs.n && !strcmp(row->runs.v[row->runs.n - 1], id))
        return; /* this run passed the point again, in another invocation */
    if (!ids_push(&row->runs, id))
        ty->oom = true;
}

void tally_run(tool *t, const char *id, const char *code)
{
    const watch *w = &t->w;
    for (size_t i = 0; i < w->n_versions; i++)
        tally_add(&t->versions, w->versions[i].change, w->versions[i].version,
                  !w->versions[i].recorded, id);
    tally_add(&t->codes, code ? code : "(none recorded)", 0, false, id);
}

cJSON *json_versions(const watch *w)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < w->n_versions; i++) {
        const version_seen *v = &w->versions[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        char at[64];
        snprintf(at, sizeof at, "%s:%u", or_dash(v->path), v->seq);
        cli_json_string_or_null(o, "change", v->change);
        cJSON_AddNumberToObject(o, "version", v->version);
        cJSON_AddBoolToObject(o, "default", !v->recorded);
        cJSON_AddStringToObject(o, "at", at);
        if (v->status)
            cJSON_AddStringToObject(o, "error", pl_status_name(v->status));
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static void print_ids(const id_list *l)
{
    for (size_t i = 0; i < l->n && i < IDS_SHOWN; i++)
        printf("%s%s", i ? ", " : "", cli_text(l->v[i]));
    if (l->n > IDS_SHOWN)
        printf(" and %zu more", l->n - IDS_SHOWN);
    printf("\n");
}

static cJSON *json_ids(const id_list *l)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < l->n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(l->v[i]));
    return a;
}

static void text_tallies(const tool *t)
{
    if (t->versions.n)
        printf("live runs by the version of each change they replay "
               "(pl_ctx_version):\n");
    for (size_t i = 0; i < t->versions.n; i++) {
        const tally_row *r = &t->versions.v[i];
        printf("  %-24s version %d%s: %zu run%s: ", cli_text(r->key),
               r->version,
               r->is_default ? " (the default: recorded before the change)"
                             : "",
               r->runs.n, r->runs.n == 1 ? "" : "s");
        print_ids(&r->runs);
    }
    if (t->codes.n)
        printf("live runs by the code identity that recorded them:\n");
    for (size_t i = 0; i < t->codes.n; i++) {
        const tally_row *r = &t->codes.v[i];
        printf("  %s: %zu run%s: ", cli_text(r->key), r->runs.n,
               r->runs.n == 1 ? "" : "s");
        print_ids(&r->runs);
    }
    if (!t->opt.live)
        return;
    if (!t->would_fail.n && !t->damaged.n) {
        printf("deploy gate: PASS: %u live run(s) checked, every one replays "
               "under the loaded code\n",
               t->n_live);
        return;
    }
    if (t->would_fail.n) {
        printf("deploy gate: FAIL: %u live run(s) checked, %zu would fail "
               "under the loaded code: ",
               t->n_live, t->would_fail.n);
        print_ids(&t->would_fail);
    }
    /* a run that cannot be read may be live: nothing says it replays */
    if (t->damaged.n) {
        printf("deploy gate: FAIL: %zu run(s) whose record cannot be read, "
               "not checked: ",
               t->damaged.n);
        print_ids(&t->damaged);
    }
}

static cJSON *json_tallies(const tool *t)
{
    cJSON *s = cJSON_CreateObject();
    cJSON *vs = s ? cJSON_AddArrayToObject(s, "versions") : NULL;
    for (size_t i = 0; vs && i < t->versions.n; i++) {
        const tally_row *r = &t->versions.v[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "change", r->key);
        cJSON_AddNumberToObject(o, "version", r->version);
        cJSON_AddBoolToObject(o, "default", r->is_default);
        cJSON_AddNumberToObject(o, "live_runs", (double)r->runs.n);
        cJSON_AddItemToObject(o, "runs", json_ids(&r->runs));
        cJSON_AddItemToArray(vs, o);
    }
    cJSON *cs = s ? cJSON_AddArrayToObject(s, "codes") : NULL;
    for (size_t i = 0; cs && i < t->codes.n; i++) {
        const tally_row *r = &t->codes.v[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "code", r->key);
        cJSON_AddNumberToObject(o, "live_runs", (double)r->runs.n);
        cJSON_AddItemToObject(o, "runs", json_ids(&r->runs));
        cJSON_AddItemToArray(cs, o);
    }
    cJSON *g = s && t->opt.live ? cJSON_AddObjectToObject(s, "gate") : NULL;
    if (g) {
        cJSON_AddBoolToObject(g, "pass",
                              t->would_fail.n == 0 && t->damaged.n == 0);
        cJSON_AddNumberToObject(g, "live_runs", t->n_live);
        cJSON_AddItemToObject(g, "would_fail", json_ids(&t->would_fail));
        cJSON_AddItemToObject(g, "unreadable", json_ids(&t->damaged));
    }
    return s;
}

void report_tallies(tool *t)
{
    if (t->versions.oom || t->codes.oom || t->would_fail.oom ||
        t->damaged.oom) {
        cli_error("out of memory tallying the live runs");
        worst(t, EXIT_FAILED);
        return;
    }
    if (t->opt.json)
        t->summary = json_tallies(t);
    else
        text_tallies(t);
}

static void tally_free(tally *ty)
{
    for (size_t i = 0; i < ty->n; i++) {
        free(ty->v[i].key);
        ids_free(&ty->v[i].runs);
    }
    free(ty->v);
    memset(ty, 0, sizeof *ty);
}

void tallies_free(tool *t)
{
    tally_free(&t->versions);
    tally_free(&t->codes);
    ids_free(&t->would_fail);
    ids_free(&t->damaged);
    ids_free(&t->said);
    cJSON_Delete(t->summary);
    t->summary = NULL;
}
