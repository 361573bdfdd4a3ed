/*
 * replay_check.c -- ledger-replay --check: replay every recorded result,
 * execute and write nothing, report the first divergence; with --live,
 * only the runs not yet final, as a deploy gate (replay_versions.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* ---- --check ---------------------------------------------------------------- */

static cJSON *json_step(pl_step_type type, const char *actor,
                        const char *payload, const char *code)
{
    cJSON *s = cJSON_CreateObject();
    if (!s)
        return NULL;
    cJSON_AddItemToObject(s, "type",
                          json_str_or_null(type ? pl_step_type_name(type)
                                                : NULL));
    cJSON_AddItemToObject(s, "actor", json_str_or_null(actor));
    cJSON_AddItemToObject(s, "payload", json_str_or_null(payload));
    cJSON_AddItemToObject(s, "code", json_str_or_null(code));
    return s;
}

/* What the store and the code hold is printed with its control characters
 * escaped (cli_text()). */
static void print_step(const char *label, pl_step_type type, const char *actor,
                       const char *payload, const char *code)
{
    if (!type)
        printf("    %s nothing: the policy ended here (code %s)\n", label,
               cli_text(or_dash(code)));
    else
        printf("    %s %s by '%s' %s (code %s)\n", label,
               pl_step_type_name(type), cli_text(or_dash(actor)),
               payload ? cli_text(payload) : "(the engine's own step)",
               cli_text(or_dash(code)));
}

/* ---- a changed MCP tool: both its listings ------------------------------ */

/* An MCP tool's code identity: "mcp:" POLICY "@" FINGERPRINT
 * (policyledger_mcp.h). */
static bool mcp_code(const char *code)
{
    return code && strncmp(code, "mcp:", 4) == 0 && strrchr(code, '@');
}

/* The policy an MCP code identity names. */
static void mcp_policy(char *out, size_t n, const char *code)
{
    snprintf(out, n, "%.*s", (int)(strrchr(code, '@') - code - 4), code + 4);
}

typedef struct find_tool {
    const char *code;
    cJSON *found; /* the tool's entry in a recorded list */
} find_tool;

/* A side effect "mcp.tools" whose list holds the tool of that identity. */
static int visit_snapshot(const pl_step *s, void *user)
{
    find_tool *f = user;
    const cJSON *p = pl_step_payload(s);
    const char *name = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(p, "name"));
    if (f->found || pl_step_type_of(s) != PL_STEP_SIDE_EFFECT || !name ||
        strcmp(name, "mcp.tools") != 0)
        return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    const cJSON *codes = cJSON_GetObjectItemCaseSensitive(v, "codes");
    int i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, codes)
    {
        if (cJSON_IsString(c) && strcmp(c->valuestring, f->code) == 0) {
            f->found = cJSON_Duplicate(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(v, "list"),
                                   i),
                1);
            break;
        }
        i++;
    }
    return 0;
}

/* The MCP tool of identity @p code as run @p id recorded it, and of
 * identity @p now as its server (--mcp) lists it now. */
static void mcp_tools(tool *t, const char *id, const char *code,
                      const char *now, cJSON **was, cJSON **is)
{
    *was = *is = NULL;
    if (!mcp_code(code) || !mcp_code(now))
        return;
    find_tool f = {code, NULL};
    pl_run_walk(t->engine, id, visit_snapshot, &f); /* NULL when not found */
    *was = f.found;
    char policy[PL_MAX_NAME + 1];
    mcp_policy(policy, sizeof policy, now);
    for (size_t i = 0; !*is && t->mcps && i < t->opt.mcp.n; i++)
        *is = cJSON_Duplicate(pl_mcp_tool(t->mcps[i], policy), 1);
}

/* A run whose root is an MCP tool: its record names the tool's code
 * identity, which changes with the tool (no action_call names it). */
static void root_changed(tool *t, const char *code)
{
    if (!mcp_code(code))
        return;
    char policy[PL_MAX_NAME + 1];
    mcp_policy(policy, sizeof policy, code);
    const pl_policy_def *d = pl_registry_find(t->reg, policy);
    if (!d || !d->code_version || !strcmp(d->code_version, code))
        return;
    watch_add_change(&t->w, "0", code, d->code_version);
}

static void print_tool(const char *label, const cJSON *v)
{
    char *text = v ? pl_json_print(v, false) : NULL;
    printf("    %s %s\n", label, text ? cli_text(text) : "(not found)");
    free(text);
}

/* Check one run.  @p recorded is its status in the store, @p code the
 * code identity that started it. */
static void check_one(tool *t, const char *id, pl_run_status recorded,
                      int recorded_error, const char *code)
{
    watch_clear(&t->w);
    pl_outcome *o = NULL;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    double t0 = now_ms();
    int st = pl_run_continue(&o, t->engine, id, &ro);
    double ms = now_ms() - t0;
    char *msg = st ? strdup(pl_errmsg()) : NULL;
    root_changed(t, code);
    const char *note;
    const char *verdict = check_verdict(st, recorded, recorded_error, &note);
    const divergence *d = &t->w.div;

    cJSON *j = json_run(t, id);
    if (j) {
        cJSON_AddStringToObject(j, "check", verdict);
        cJSON_AddStringToObject(j, "status", pl_run_status_name(recorded));
        cJSON_AddItemToObject(j, "code", json_str_or_null(code));
        cJSON_AddItemToObject(j, "versions", json_versions(&t->w));
        if (note)
            cJSON_AddStringToObject(j, "note", note);
        if (o)
            json_counters(j, o, ms);
        else
            cJSON_AddNumberToObject(j, "elapsed_ms", ms);
        cJSON *cc = cJSON_AddArrayToObject(j, "code_changed");
        for (size_t i = 0; cc && i < t->w.n_changes; i++) {
            const code_change *c = &t->w.changes[i];
            cJSON *x = cJSON_CreateObject();
            if (!x)
                break;
            cJSON_AddItemToObject(x, "first_step",
                                  json_str_or_null(c->step_id));
            cJSON_AddItemToObject(x, "recorded_code",
                                  json_str_or_null(c->recorded));
            cJSON_AddItemToObject(x, "new_code", json_str_or_null(c->now));
            cJSON_AddNumberToObject(x, "calls", c->count);
            cJSON *was, *is;
            mcp_tools(t, id, c->recorded, c->now, &was, &is);
            if (was || is) {
                cJSON_AddItemToObject(x, "recorded_tool",
                                      was ? was : cJSON_CreateNull());
                cJSON_AddItemToObject(x, "new_tool",
                                      is ? is : cJSON_CreateNull());
            }
            cJSON_AddItemToArray(cc, x);
        }
        if (st == PL_ENONDET) {
            cJSON *dv = cJSON_AddObjectToObject(j, "divergence");
            if (dv && d->seen) {
                cJSON_AddItemToObject(dv, "step_id",
                                      json_str_or_null(d->step_id));
                cJSON_AddItemToObject(dv, "invocation",
                                      json_str_or_null(d->path));
                cJSON_AddNumberToObject(dv, "position", d->seq);
                cJSON_AddItemToObject(dv, "recorded",
                                      json_step(d->rec_type, d->rec_actor,
                                                d->rec_payload, d->rec_code));
                cJSON_AddItemToObject(dv, "new",
                                      json_step(d->new_type, d->new_actor,
                                                d->new_payload, d->new_code));
            }
        }
        if (msg && strcmp(verdict, "ok") != 0)
            cJSON_AddStringToObject(j, "message", msg);
    }
    if (!t->opt.json) {
        printf("check %s (%s): %s%s%s\n", cli_text(id),
               pl_run_status_name(recorded), verdict, note ? ", " : "",
               note ? cli_text(note) : "");
        for (size_t i = 0; i < t->w.n_changes; i++) {
            const code_change *c = &t->w.changes[i];
            printf("  recorded by other code%s: %s -> %s (%u call%s, first "
                   "at %s)\n",
                   st == PL_ENONDET ? "" : " that replays the same",
                   cli_text(or_dash(c->recorded)), cli_text(or_dash(c->now)),
                   c->count, c->count == 1 ? "" : "s",
                   cli_text(or_dash(c->step_id)));
            cJSON *was, *is;
            mcp_tools(t, id, c->recorded, c->now, &was, &is);
            if (was || is) { /* an MCP server changed the tool */
                print_tool("the MCP tool as recorded:", was);
                print_tool("the MCP tool now:        ", is);
            }
            cJSON_Delete(was);
            cJSON_Delete(is);
        }
        if (st == PL_ENONDET && d->seen) {
            printf("  first divergence at step %s (invocation %s, position "
                   "%u)\n",
                   cli_text(or_dash(d->step_id)), cli_text(or_dash(d->path)),
                   d->seq);
            print_step("recorded:", d->rec_type, d->rec_actor, d->rec_payload,
                       d->rec_code);
            print_step("now:     ", d->new_type, d->new_actor, d->new_payload,
                       d->new_code);
        }
        for (size_t i = 0; i < t->w.n_versions; i++) {
            const version_seen *v = &t->w.versions[i];
            printf("  change '%s' at %s:%u: version %d%s%s\n",
                   cli_text(v->change), cli_text(or_dash(v->path)), v->seq,
                   v->version,
                   v->recorded ? "" : " (the default: recorded before it)",
                   v->status == PL_ENEWERCODE
                       ? ", by newer code than the loaded one"
                   : v->status ? ", which the loaded code does not support"
                               : "");
        }
        if (msg && strcmp(verdict, "ok") != 0 && !d->seen)
            printf("  %s\n", cli_text(msg));
        if (o)
            printf("  calls served from the ledger %llu; %.2f ms\n",
                   (unsigned long long)o->calls_served, ms);
    }
    bool newer = st == PL_ENEWERCODE; /* left for it: not a failure */
    if (!strcmp(verdict, "ok")) {
        t->n_ok++;
    } else if (newer) {
        t->n_newer++;
    } else {
        if (st == PL_ENONDET || st == PL_ECODEVERSION ||
            !strcmp(verdict, "diverged"))
            t->n_diverged++;
        else
            t->n_failed++;
        worst(t, EXIT_FAILED);
    }
    if (is_live(recorded)) {
        t->n_live++;
        tally_run(t, id, code);
        if (strcmp(verdict, "ok") != 0 && !newer &&
            !ids_push(&t->would_fail, id))
            t->would_fail.oom = true;
    }
    free(msg);
    pl_outcome_free(o);
}

typedef struct check_ctx {
    id_list ids;
    pl_run_status *status;
    int *error;
    id_list codes; /* "" for none */
    size_t cap;
    bool live; /* --live: only the runs not yet final */
    tool *t;
} check_ctx;

/* A run whose record cannot be read is passed over, the others checked. */
static int check_damaged(const char *id, const char *msg, void *user)
{
    check_ctx *c = user;
    return report_damaged(c->t, id, msg);
}

static int visit_any(const pl_run_info *info, void *user)
{
    check_ctx *c = user;
    if (c->live && !is_live(info->status))
        return 0;
    if (c->ids.n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        pl_run_status *s = realloc(c->status, cap * sizeof *s);
        if (s)
            c->status = s;
        int *e = s ? realloc(c->error, cap * sizeof *e) : NULL;
        if (e)
            c->error = e;
        if (!s || !e)
            return PL_ENOMEM;
        c->cap = cap;
    }
    c->status[c->ids.n] = info->status;
    c->error[c->ids.n] = info->error;
    if (!ids_push(&c->codes, info->code ? info->code : ""))
        return PL_ENOMEM;
    return ids_push(&c->ids, info->id) ? 0 : PL_ENOMEM;
}

void mode_check(tool *t)
{
    check_ctx c = {{0}, NULL, NULL, {0}, 0, t->opt.live, t};
    int st;
    if (t->opt.run) {
        pl_run_info *info = NULL;
        st = pl_run_get(&info, t->engine, t->opt.run);
        if (!st)
            st = visit_any(info, &c);
        pl_run_info_free(info);
        if (st == PL_ENOTFOUND) {
            t->why = st;
            if (!cli_say_deleted(t->engine, t->opt.run))
                cli_error("no run %s in the store", QUOTE(t->opt.run));
            worst(t, EXIT_OPEN);
            goto done;
        }
    } else {
        st = cli_runs_each(t->engine, NULL, visit_any, check_damaged, &c);
    }
    if (st) {
        cli_error("reading the runs of %s: %s (%s)",
                  QUOTE(cli_store_shown(t->opt.store)),
                  st == PL_ENOMEM ? "out of memory" : pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
        goto done;
    }
    for (size_t i = 0; i < c.ids.n; i++)
        check_one(t, c.ids.v[i], c.status[i], c.error[i],
                  c.codes.v[i][0] ? c.codes.v[i] : NULL);
    if (!t->opt.json)
        printf("checked %zu %srun(s): %u ok, %u diverged, %u failed to "
               "replay%s\n",
               c.ids.n, t->opt.live ? "live " : "", t->n_ok, t->n_diverged,
               t->n_failed,
               t->damaged.n ? ", and runs whose record cannot be read (above)"
                            : "");
    if (!t->opt.json && t->n_newer)
        printf("%u run(s) need newer code: recorded by it, left for its "
               "workers\n",
               t->n_newer);
    report_tallies(t);
done:
    ids_free(&c.ids);
    ids_free(&c.codes);
    free(c.status);
    free(c.error);
}
