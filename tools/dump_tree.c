/*
 * dump_tree.c -- ledger-dump --run: one run as a tree of invocations,
 * as JSON, as its export, and --follow.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger_llm.h>

#include "dump.h"

/* ---- one run's steps ---------------------------------------------------------- */

/* A step as read, kept for marking (in-doubt calls need what follows). */
typedef struct srow {
    char *id;
    char *path;
    uint32_t seq;
    pl_step_type type;
    char *actor;
    cJSON *payload;
    int64_t time_us;
    char *code;
    bool has_hash;
    uint8_t hash[PL_HASH_LEN];
    uint8_t prev[PL_HASH_LEN];
    bool is_error;
} srow;

typedef struct rows {
    srow *v;
    size_t n, cap;
    bool oom;
} rows;

static void rows_free(rows *r)
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

static int rows_visit(const pl_step *s, void *user)
{
    rows *r = user;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        srow *v = realloc(r->v, cap * sizeof *v);
        if (!v) {
            r->oom = true;
            return 1;
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
    w->payload = p ? cJSON_Duplicate(p, 1) : NULL;
    w->code = pl_step_code(s) ? cli_strdup(pl_step_code(s)) : NULL;
    r->n++;
    if (!w->id || !w->path || !w->actor || !w->payload ||
        (pl_step_code(s) && !w->code) || !colon) {
        r->oom = true;
        return 1;
    }
    w->path[colon - id] = '\0';
    w->seq = pl_step_seq(s);
    w->type = pl_step_type_of(s);
    w->time_us = pl_step_time_us(s);
    w->has_hash = pl_step_hash(w->hash, s) == PL_OK;
    if (pl_step_prev_hash(w->prev, s))
        memset(w->prev, 0, sizeof w->prev);
    w->is_error = pl_step_is_error(s);
    return 0;
}

/* Read every step of a run into @p r.  Returns a pl_status. */
static int read_rows(pl_engine *e, const char *run, rows *r)
{
    rows_free(r);
    int st = pl_run_walk(e, run, rows_visit, r);
    if (r->oom)
        return pl_errorf(PL_ENOMEM, "out of memory reading run '%s'", run);
    return st;
}

/* Does @p path lie at or below @p top? */
static bool under(const char *path, const char *top)
{
    size_t n = strlen(top);
    return !strncmp(path, top, n) && (path[n] == '\0' || path[n] == '.');
}

static bool row_shown(const opts *o, const srow *w)
{
    return (!o->has_type || w->type == o->type) &&
           (!o->actor || !strcmp(w->actor, o->actor)) &&
           (!o->policy || !strcmp(w->actor, o->policy)) &&
           (!o->invocation || under(w->path, o->invocation)) &&
           (!o->has_since || w->time_us >= o->since_us);
}

/* The marks of row @p i: in-doubt calls, waiting calls, error results. */
typedef enum { MARK_NONE, MARK_IN_DOUBT, MARK_WAITING } call_mark;

static call_mark call_mark_of(const rows *r, size_t i, const pl_run_info *ri)
{
    const srow *w = &r->v[i];
    if (w->type != PL_STEP_ACTION_CALL)
        return MARK_NONE;
    char callee[PL_MAX_RUN_ID + 64];
    snprintf(callee, sizeof callee, "%s.%u", w->path, w->seq);
    /* the next step of the same ledger, past engine suspensions */
    for (size_t j = i + 1; j < r->n; j++) {
        const srow *x = &r->v[j];
        if (strcmp(x->path, w->path) != 0)
            continue;
        if (x->type == PL_STEP_SUSPEND || x->type == PL_STEP_RESUME)
            continue;
        return MARK_NONE; /* answered, or a call the policy returned */
    }
    if (ri->status == PL_RUN_RUNNING && ri->owner_alive)
        return MARK_NONE; /* in flight now */
    if (ri->status == PL_RUN_SUSPENDED && ri->suspended_path &&
        under(ri->suspended_path, callee))
        return MARK_WAITING;
    return MARK_IN_DOUBT;
}

static cJSON *row_json(const char *run, const srow *w, const char *mark)
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
    cJSON_AddNumberToObject(o, "time_us", (double)w->time_us);
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

static const char *mark_name(const rows *r, size_t i, const pl_run_info *ri)
{
    switch (call_mark_of(r, i, ri)) {
    case MARK_IN_DOUBT: return "in_doubt";
    case MARK_WAITING: return "waiting";
    case MARK_NONE: break;
    }
    if (r->v[i].is_error)
        return "error";
    if (r->v[i].type == PL_STEP_SUSPEND && ri->status == PL_RUN_SUSPENDED &&
        ri->suspended_path && !strcmp(ri->suspended_path, r->v[i].path))
        return "suspended";
    return NULL;
}

static void print_row_text(const opts *o, const srow *w, const char *mark)
{
    unsigned depth = 0;
    for (const char *p = w->path; *p; p++)
        depth += *p == '.';
    char *payload = cli_json_compact(w->payload);
    if (payload && !o->full)
        cli_shorten(payload, SHORT_PAYLOAD);
    char t[40];
    cli_time_human(t, sizeof t, w->time_us);
    printf("%*s%-10s %-13s %-16s %s", (int)(2 * depth + 2), "", w->id,
           pl_step_type_name(w->type), w->actor, payload ? payload : "?");
    if (w->code)
        printf("  [code %s]", w->code);
    if (mark && !strcmp(mark, "in_doubt"))
        printf("  <-- IN DOUBT: no result recorded");
    else if (mark && !strcmp(mark, "waiting"))
        printf("  <-- waiting: suspended below");
    else if (mark && !strcmp(mark, "error"))
        printf("  <-- ERROR result");
    else if (mark && !strcmp(mark, "suspended"))
        printf("  <-- suspended here");
    printf("\n");
    free(payload);
}

/* The token totals of the run's model calls (none: nothing is added). */
static bool run_tokens(pl_llm_tokens *t, pl_engine *e, const char *id)
{
    return pl_llm_run_tokens(t, e, id) == PL_OK && t->exchanges > 0;
}

static bool add_tokens(cJSON *run, pl_engine *e, const char *id)
{
    pl_llm_tokens t = PL_LLM_TOKENS_INIT;
    if (!run_tokens(&t, e, id))
        return true;
    cJSON *o = cJSON_AddObjectToObject(run, "tokens");
    return o && cJSON_AddNumberToObject(o, "input", (double)t.input) &&
           cJSON_AddNumberToObject(o, "output", (double)t.output) &&
           cJSON_AddNumberToObject(o, "model_calls", (double)t.exchanges);
}

static void print_run_header(pl_engine *e, const pl_run_info *ri, size_t stored)
{
    pl_llm_tokens t = PL_LLM_TOKENS_INIT;
    char created[40], updated[40];
    cli_time_human(created, sizeof created, ri->created_us);
    cli_time_human(updated, sizeof updated, ri->updated_us);
    printf("run %s\n", ri->id);
    printf("  policy   %s\n", ri->policy);
    printf("  status   %s\n", status_text(ri));
    if (ri->status == PL_RUN_RUNNING && stored != ri->steps)
        printf("  steps    %zu (the record counted %llu at its owner's last "
               "heartbeat)\n",
               stored, (unsigned long long)ri->steps);
    else
        printf("  steps    %zu\n", stored);
    printf("  created  %s UTC\n", created);
    printf("  updated  %s UTC\n", updated);
    printf("  owner    pid %lld on %s, %u attempt(s)\n",
           (long long)ri->owner_pid, ri->owner_host ? ri->owner_host : "?",
           ri->attempts);
    if (run_tokens(&t, e, ri->id))
        printf("  tokens   %llu in, %llu out, over %llu model call(s)\n",
               (unsigned long long)t.input, (unsigned long long)t.output,
               (unsigned long long)t.exchanges);
    if (ri->status == PL_RUN_FAILED)
        printf("  FAILED   %s: %s\n", pl_strerror(ri->error),
               ri->reason ? ri->reason : "(no reason recorded)");
    if (ri->status == PL_RUN_CANCELLED)
        printf("  CANCELLED  %s\n", ri->reason ? ri->reason : "");
    if (ri->status == PL_RUN_WAITING)
        printf("  WAITING at invocation %s\n",
               ri->suspended_path ? ri->suspended_path : "?");
    if (ri->deadline_ms) {
        char dl[40];
        cli_time_human(dl, sizeof dl, ri->deadline_ms * 1000);
        printf("  deadline %s UTC\n", dl);
    }
    if (ri->status == PL_RUN_SUSPENDED) {
        char *prompt = ri->prompt ? cli_json_compact(ri->prompt) : NULL;
        printf("  SUSPENDED at invocation %s\n",
               ri->suspended_path ? ri->suspended_path : "?");
        printf("  prompt   %s\n", prompt ? prompt : "{}");
        printf("  resume token  %s\n",
               ri->resume_token ? ri->resume_token : "(none recorded)");
        free(prompt);
    }
    printf("steps:\n");
}

/* Print rows [from, r->n) that pass the filters. */
static bool print_rows(const opts *o, const rows *r, size_t from,
                       const pl_run_info *ri, cJSON *array)
{
    for (size_t i = from; i < r->n; i++) {
        const srow *w = &r->v[i];
        if (!row_shown(o, w))
            continue;
        const char *mark = mark_name(r, i, ri);
        if (o->format == FMT_TEXT) {
            print_row_text(o, w, mark);
            continue;
        }
        cJSON *j = row_json(ri->id, w, mark);
        if (!j)
            return false;
        if (array) {
            cJSON_AddItemToArray(array, j);
        } else {
            bool ok = cli_json_line(stdout, j);
            cJSON_Delete(j);
            if (!ok)
                return false;
        }
    }
    fflush(stdout);
    return true;
}

/* A deleted run: what its tombstone says (false: it has none). */
static bool say_deleted(pl_engine *e, const char *id)
{
    pl_tombstone t = PL_TOMBSTONE_INIT;
    if (pl_run_tombstone(&t, e, id))
        return false;
    char del[40], exp[40], head[2 * PL_HASH_LEN + 1] = "none";
    cli_time_iso(del, sizeof del, t.deleted_us, false);
    cli_time_iso(exp, sizeof exp, t.expires_us, false);
    if (t.has_head)
        cli_hex(head, t.head, PL_HASH_LEN);
    cli_error("run %s was deleted on %s: it was %s (policy %s, head %s); "
              "its tombstone keeps the id until %s",
              QUOTE(id), del, pl_run_status_name(t.status), t.policy, head,
              exp);
    return true;
}

static int get_run(pl_engine *e, const char *id, pl_run_info **out)
{
    int st = pl_run_get(out, e, id);
    if (st == PL_ENOTFOUND && say_deleted(e, id))
        return CLI_EXIT_STORE;
    if (st == PL_ENOTFOUND || st == PL_EINVAL) {
        cli_error("no run %s in the store", QUOTE(id));
        return CLI_EXIT_STORE;
    }
    if (st) {
        cli_error("cannot read run %s: %s", QUOTE(id), pl_errmsg());
        return CLI_EXIT_STORE;
    }
    return CLI_EXIT_OK;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* jsonl with no filter: the run's export (pl_run_export()), its step
 * lines marked as the other formats mark them. */
typedef struct export_marks {
    const rows *r;
    const pl_run_info *ri;
    size_t next;
} export_marks;

static int export_line(cJSON *line, void *user)
{
    export_marks *m = user;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(line, "id");
    if (cJSON_IsString(id) && m->next < m->r->n) {
        size_t i = m->next++;
        const char *mark = !strcmp(id->valuestring, m->r->v[i].id)
                               ? mark_name(m->r, i, m->ri)
                               : NULL;
        if (mark && !cJSON_AddStringToObject(line, "mark", mark))
            return PL_ENOMEM;
    }
    return cli_json_line(stdout, line) ? 0 : PL_EIO;
}

static bool filtered(const opts *o)
{
    return o->has_type || o->actor || o->policy || o->invocation ||
           o->has_since;
}

int cmd_run(pl_engine *e, const opts *o)
{
    pl_run_info *ri = NULL;
    int rc = get_run(e, o->run, &ri);
    if (rc)
        return rc;
    rows r = {0};
    int st = read_rows(e, o->run, &r);
    if (st) {
        cli_error("cannot read run %s: %s", QUOTE(o->run), pl_errmsg());
        rows_free(&r);
        pl_run_info_free(ri);
        return CLI_EXIT_STORE;
    }
    rc = CLI_EXIT_OK;
    if (o->format == FMT_JSONL && !o->follow && !filtered(o)) {
        export_marks m = {&r, ri, 0};
        if (pl_run_export_each(e, o->run, export_line, &m)) {
            cli_error("cannot export run %s: %s", QUOTE(o->run), pl_errmsg());
            rc = CLI_EXIT_STORE;
        }
        goto done;
    }
    if (o->format == FMT_JSON) {
        cJSON *doc = cJSON_CreateObject(), *steps = cJSON_CreateArray();
        cJSON *run = run_json(ri);
        bool ok = doc && steps && run && add_tokens(run, e, ri->id) &&
                  print_rows(o, &r, 0, ri, steps);
        if (ok) {
            cJSON_AddItemToObject(doc, "run", run);
            cJSON_AddItemToObject(doc, "steps", steps);
            ok = cli_json_document(stdout, doc);
            run = steps = NULL;
        }
        cJSON_Delete(run);
        cJSON_Delete(steps);
        cJSON_Delete(doc);
        if (!ok) {
            cli_error("out of memory");
            rc = CLI_EXIT_STORE;
        }
        goto done;
    }
    if (o->format == FMT_TEXT)
        print_run_header(e, ri, r.n);
    if (!print_rows(o, &r, 0, ri, NULL)) {
        cli_error("out of memory");
        rc = CLI_EXIT_STORE;
        goto done;
    }
    if (!o->follow)
        goto done;
    /* --follow: poll until the run ends, or its owner is gone and nothing
     * changes any more */
    size_t printed = r.n;
    bool quiet_once = false;
    for (;;) {
        if (ri->status != PL_RUN_RUNNING) {
            fprintf(stderr, "%s: run '%s' is %s\n", cli_name(), o->run,
                    pl_run_status_name(ri->status));
            break;
        }
        sleep_ms(FOLLOW_POLL_MS);
        pl_run_info *next = NULL;
        if ((rc = get_run(e, o->run, &next)))
            break;
        pl_run_info_free(ri);
        ri = next;
        if ((st = read_rows(e, o->run, &r))) {
            cli_error("cannot read run %s: %s", QUOTE(o->run), pl_errmsg());
            rc = CLI_EXIT_STORE;
            break;
        }
        bool changed = r.n != printed;
        if (r.n > printed && !print_rows(o, &r, printed, ri, NULL)) {
            cli_error("out of memory");
            rc = CLI_EXIT_STORE;
            break;
        }
        if (r.n > printed)
            printed = r.n;
        if (ri->status == PL_RUN_RUNNING && !ri->owner_alive && !changed) {
            /* one more quiet poll, so steps committed just before the
             * owner exited are not missed */
            if (quiet_once) {
                fprintf(stderr,
                        "%s: run '%s' is still running but its owner (pid "
                        "%lld) is gone: it crashed; stopping.  Finish it "
                        "with pl_run_continue() (ledger-replay)\n",
                        cli_name(), o->run, (long long)ri->owner_pid);
                break;
            }
            quiet_once = true;
        } else {
            quiet_once = false;
        }
    }
done:
    rows_free(&r);
    pl_run_info_free(ri);
    return rc;
}
