/*
 * ledger-dump -- show what the runs of a policyledger store did.
 *
 * Reads the store through the public API only, opened read-only with an
 * empty registry: it never creates a store, writes, or takes over a run,
 * so it is safe on a store other processes are writing.  See usage() for
 * the surface and the exit codes.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger_llm.h>

#include "cli.h"

#define SHORT_PAYLOAD 120 /* bytes of payload shown without --full */
#define FOLLOW_POLL_MS 200
#define TOP_RUNS 5

typedef enum { FMT_TEXT, FMT_JSON, FMT_JSONL } out_format;

typedef struct opts {
    const char *store;
    const char *run;
    out_format format;
    bool full, follow, verify, stats;
    bool has_status;
    pl_run_status status;
    const char *policy, *actor, *invocation;
    bool has_type;
    pl_step_type type;
    bool has_since;
    int64_t since_us;
} opts;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ledger-dump STORE [options]\n"
        "\n"
        "Show the runs of a policyledger store and the steps they recorded.  The\n"
        "store is opened read-only: nothing is created or changed, and it is safe\n"
        "to use while other processes run workflows on it.\n"
        "\n"
        "With no options, one line per run: id, root policy, status, steps, and\n"
        "when it was created and last updated (UTC).  A run whose owner process\n"
        "died while running it shows as 'running (owner gone: crashed)'.\n"
        "\n"
        "Options:\n"
        "  --run ID            show run ID as a tree of invocations and their steps;\n"
        "                      in-doubt calls, error results, a failed run's reason\n"
        "                      and a suspended run's prompt and resume token are marked;\n"
        "                      an LLM agent's run shows its model calls' token totals\n"
        "  --full              print payloads whole (default: shortened to %d bytes)\n"
        "  --format FORMAT     text (default), json (one document) or jsonl (one\n"
        "                      object per line: per step with --run, else per run).\n"
        "                      With --run, jsonl fields are run, path, seq, id, actor,\n"
        "                      type, payload, time, time_us, code, hash, prev_hash,\n"
        "                      mark; with no filter and no --follow, the output is the\n"
        "                      run's complete export: a first line describing the run\n"
        "                      (\"kind\":\"run\") and each step's stored \"record\"\n"
        "                      (or \"derived\":true), which ledger-replay --import\n"
        "                      loads; with filters or --follow, step lines only\n"
        "  --status STATUS     runs with this status: running, suspended, completed,\n"
        "                      failed, submitted\n"
        "  --policy NAME       runs whose root policy is NAME; with --run, steps whose\n"
        "                      actor is NAME\n"
        "  --type TYPE         steps of this type (text, action_call, action_result,\n"
        "                      suspend, resume, side_effect, error)\n"
        "  --actor NAME        steps by this actor\n"
        "  --invocation PATH   steps of invocation PATH and the ones below it\n"
        "  --since TIME        runs updated, or steps recorded, at or after TIME: an\n"
        "                      ISO 8601 date or UTC date-time (2026-11-24,\n"
        "                      2026-11-24T15:04:05Z) or a time ago (90s, 10m, 2h, 3d)\n"
        "  --follow            with --run: print steps as they are appended, until\n"
        "                      the run completes, fails or suspends (or its owner is\n"
        "                      gone and nothing changes)\n"
        "  --verify            check every run (or the one of --run): every value\n"
        "                      decodes, every hash chain links, every run record\n"
        "                      matches its ledgers; each fault is printed\n"
        "  --stats             runs by status, steps, store size and free pages, and\n"
        "                      the largest runs\n"
        "  -h, --help          this text\n"
        "\n"
        "Exit codes: 0 fine; 1 bad usage; 2 the store cannot be opened or read, or\n"
        "the run does not exist; 3 --verify found a fault.\n"
        "\n"
        "Examples:\n"
        "  ledger-dump ./store                          list every run\n"
        "  ledger-dump ./store --status running         crashed or live runs\n"
        "  ledger-dump ./store --run 0192f3... --full   one run, payloads whole\n"
        "  ledger-dump ./store --run ID --type action_call --since 2h\n"
        "  ledger-dump ./store --run ID --format jsonl | jq -r .type\n"
        "  ledger-dump ./store --run ID --follow        watch a run as it goes\n"
        "  ledger-dump ./store --verify                 check every hash chain\n"
        "  ledger-dump ./store --stats --format json\n",
        SHORT_PAYLOAD);
}

/* ---- arguments ------------------------------------------------------------ */

static bool path_ok(const char *p)
{
    /* "0", "0.3", "0.3.1": numbers joined by dots */
    bool digit = false;
    for (; *p; p++) {
        if (*p >= '0' && *p <= '9')
            digit = true;
        else if (*p == '.' && digit)
            digit = false;
        else
            return false;
    }
    return digit;
}

static int parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->format = FMT_TEXT;
    int64_t now = cli_now_us();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(CLI_EXIT_OK);
        } else if (!strcmp(a, "--full")) {
            o->full = true;
        } else if (!strcmp(a, "--follow")) {
            o->follow = true;
        } else if (!strcmp(a, "--verify")) {
            o->verify = true;
        } else if (!strcmp(a, "--stats")) {
            o->stats = true;
        } else if (cli_option(argc, argv, &i, "--run", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!*v) {
                cli_error("--run needs a run id");
                return CLI_EXIT_USAGE;
            }
            o->run = v;
        } else if (cli_option(argc, argv, &i, "--format", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!strcmp(v, "text"))
                o->format = FMT_TEXT;
            else if (!strcmp(v, "json"))
                o->format = FMT_JSON;
            else if (!strcmp(v, "jsonl"))
                o->format = FMT_JSONL;
            else {
                cli_error("unknown --format '%s' (text, json or jsonl)", v);
                return CLI_EXIT_USAGE;
            }
        } else if (cli_option(argc, argv, &i, "--status", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            bool found = false;
            for (int s = PL_RUN_RUNNING; s <= PL_RUN_CANCELLED; s++)
                if (!strcmp(v, pl_run_status_name((pl_run_status)s))) {
                    o->status = (pl_run_status)s;
                    found = true;
                }
            if (!found) {
                cli_error("unknown --status '%s' (running, suspended, "
                          "completed, failed, submitted, waiting or "
                          "cancelled)",
                          v);
                return CLI_EXIT_USAGE;
            }
            o->has_status = true;
        } else if (cli_option(argc, argv, &i, "--policy", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            o->policy = v;
        } else if (cli_option(argc, argv, &i, "--actor", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            o->actor = v;
        } else if (cli_option(argc, argv, &i, "--type", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (pl_step_type_parse(&o->type, v)) {
                cli_error("unknown --type '%s' (text, action_call, "
                          "action_result, suspend, resume, side_effect, "
                          "error)",
                          v);
                return CLI_EXIT_USAGE;
            }
            o->has_type = true;
        } else if (cli_option(argc, argv, &i, "--invocation", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!path_ok(v)) {
                cli_error("bad --invocation '%s': an invocation path is "
                          "numbers joined by dots, like 0 or 0.3.1",
                          v);
                return CLI_EXIT_USAGE;
            }
            o->invocation = v;
        } else if (cli_option(argc, argv, &i, "--since", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!cli_parse_time(&o->since_us, v, now)) {
                cli_error("bad --since '%s': give an ISO 8601 date or UTC "
                          "date-time (2026-11-24, 2026-11-24T15:04:05Z) or "
                          "a time ago (90s, 10m, 2h, 3d)",
                          v);
                return CLI_EXIT_USAGE;
            }
            o->has_since = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            cli_error("unknown option '%s' (see --help)", a);
            return CLI_EXIT_USAGE;
        } else if (!o->store) {
            o->store = a;
        } else {
            cli_error("unexpected argument '%s': give one store (see --help)",
                      a);
            return CLI_EXIT_USAGE;
        }
    }
    if (!o->store) {
        cli_error("no store given (see --help)");
        return CLI_EXIT_USAGE;
    }
    if (!*o->store) {
        cli_error("the store path is empty");
        return CLI_EXIT_USAGE;
    }
    if ((o->full || o->follow || o->has_type || o->actor || o->invocation) &&
        !o->run) {
        cli_error("--full, --follow, --type, --actor and --invocation need "
                  "--run ID");
        return CLI_EXIT_USAGE;
    }
    if (o->has_status && o->run) {
        cli_error("--status filters the run list; it cannot be combined with "
                  "--run");
        return CLI_EXIT_USAGE;
    }
    if ((o->verify && (o->stats || o->follow)) || (o->stats && o->run) ||
        (o->follow && o->format == FMT_JSON)) {
        cli_error("--verify, --stats and --follow do not combine that way "
                  "(see --help)");
        return CLI_EXIT_USAGE;
    }
    return -1; /* go on */
}

/* ---- runs ------------------------------------------------------------------- */

static const char *status_text(const pl_run_info *ri)
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

static bool crashed(const pl_run_info *ri)
{
    return ri->status == PL_RUN_RUNNING && !ri->owner_alive;
}

static cJSON *run_json(const pl_run_info *ri)
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
    cJSON_AddNumberToObject(o, "created_us", (double)ri->created_us);
    cJSON_AddStringToObject(o, "updated", updated);
    cJSON_AddNumberToObject(o, "updated_us", (double)ri->updated_us);
    cJSON_AddStringToObject(o, "heartbeat", hb);
    cJSON_AddNumberToObject(o, "owner_pid", (double)ri->owner_pid);
    cJSON_AddStringToObject(o, "owner_host",
                            ri->owner_host ? ri->owner_host : "");
    cJSON_AddBoolToObject(o, "owner_alive", ri->owner_alive);
    cJSON_AddBoolToObject(o, "crashed", crashed(ri));
    cJSON_AddNumberToObject(o, "attempts", ri->attempts);
    if (ri->payload)
        cJSON_AddItemToObject(o, "payload", cJSON_Duplicate(ri->payload, 1));
    if (ri->status == PL_RUN_FAILED || ri->status == PL_RUN_CANCELLED) {
        cJSON_AddStringToObject(o, "reason", ri->reason ? ri->reason : "");
        cJSON_AddStringToObject(o, "error", pl_strerror(ri->error));
    }
    if (ri->status == PL_RUN_WAITING) {
        cJSON_AddStringToObject(o, "waiting_path",
                                ri->suspended_path ? ri->suspended_path : "");
        if (ri->wake_ms) {
            char wake[40];
            cli_time_iso(wake, sizeof wake, ri->wake_ms * 1000, false);
            cJSON_AddStringToObject(o, "wake", wake);
            cJSON_AddNumberToObject(o, "wake_ms", (double)ri->wake_ms);
        }
        if (ri->wait_event)
            cJSON_AddStringToObject(o, "wait_event", ri->wait_event);
    }
    if (ri->deadline_ms)
        cJSON_AddNumberToObject(o, "deadline_ms", (double)ri->deadline_ms);
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

typedef struct list_ctx {
    const opts *o;
    cJSON *all; /* json: the array */
    size_t shown;
    bool oom;
} list_ctx;

static int list_visit(const pl_run_info *ri, void *user)
{
    list_ctx *c = user;
    const opts *o = c->o;
    if ((o->has_status && ri->status != o->status) ||
        (o->policy && strcmp(ri->policy, o->policy) != 0) ||
        (o->has_since && ri->updated_us < o->since_us))
        return 0;
    c->shown++;
    if (o->format == FMT_TEXT) {
        char created[40], updated[40];
        cli_time_human(created, sizeof created, ri->created_us);
        cli_time_human(updated, sizeof updated, ri->updated_us);
        printf("%-36s  %-16s  %-30s  %6llu  %s  %s\n", ri->id, ri->policy,
               status_text(ri), (unsigned long long)ri->steps, created,
               updated);
        return 0;
    }
    cJSON *j = run_json(ri);
    if (!j) {
        c->oom = true;
        return 1;
    }
    if (o->format == FMT_JSONL) {
        c->oom = !cli_json_line(stdout, j);
        cJSON_Delete(j);
    } else {
        cJSON_AddItemToArray(c->all, j);
    }
    return c->oom;
}

static int cmd_list(pl_engine *e, const opts *o)
{
    list_ctx c = {o, NULL, 0, false};
    if (o->format == FMT_JSON && !(c.all = cJSON_CreateArray()))
        c.oom = true;
    if (o->format == FMT_TEXT)
        printf("%-36s  %-16s  %-30s  %6s  %-19s  %s\n", "RUN", "POLICY",
               "STATUS", "STEPS", "CREATED (UTC)", "UPDATED (UTC)");
    int st = c.oom ? PL_ENOMEM : pl_engine_runs(e, list_visit, &c);
    if (c.oom) {
        cli_error("out of memory");
        cJSON_Delete(c.all);
        return CLI_EXIT_STORE;
    }
    if (st) {
        cli_error("cannot list the runs: %s", pl_errmsg());
        cJSON_Delete(c.all);
        return CLI_EXIT_STORE;
    }
    if (o->format == FMT_JSON) {
        cJSON *doc = cJSON_CreateObject();
        if (doc) {
            cJSON_AddItemToObject(doc, "runs", c.all);
            c.all = NULL;
            cli_json_document(stdout, doc);
        }
        cJSON_Delete(doc);
    }
    cJSON_Delete(c.all);
    return CLI_EXIT_OK;
}

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

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
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
    w->id = dup_str(id);
    w->path = dup_str(id);
    w->actor = dup_str(pl_step_actor(s));
    w->payload = p ? cJSON_Duplicate(p, 1) : NULL;
    w->code = pl_step_code(s) ? dup_str(pl_step_code(s)) : NULL;
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
    pl_llm_tokens t;
    if (!run_tokens(&t, e, id))
        return true;
    cJSON *o = cJSON_AddObjectToObject(run, "tokens");
    return o && cJSON_AddNumberToObject(o, "input", (double)t.input) &&
           cJSON_AddNumberToObject(o, "output", (double)t.output) &&
           cJSON_AddNumberToObject(o, "model_calls", (double)t.exchanges);
}

static void print_run_header(pl_engine *e, const pl_run_info *ri, size_t stored)
{
    pl_llm_tokens t;
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

static int get_run(pl_engine *e, const char *id, pl_run_info **out)
{
    int st = pl_run_get(out, e, id);
    if (st == PL_ENOTFOUND || st == PL_EINVAL) {
        cli_error("no run '%s' in the store", id);
        return CLI_EXIT_STORE;
    }
    if (st) {
        cli_error("cannot read run '%s': %s", id, pl_errmsg());
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

static int cmd_run(pl_engine *e, const opts *o)
{
    pl_run_info *ri = NULL;
    int rc = get_run(e, o->run, &ri);
    if (rc)
        return rc;
    rows r = {0};
    int st = read_rows(e, o->run, &r);
    if (st) {
        cli_error("cannot read run '%s': %s", o->run, pl_errmsg());
        rows_free(&r);
        pl_run_info_free(ri);
        return CLI_EXIT_STORE;
    }
    rc = CLI_EXIT_OK;
    if (o->format == FMT_JSONL && !o->follow && !filtered(o)) {
        export_marks m = {&r, ri, 0};
        if (pl_run_export_each(e, o->run, export_line, &m)) {
            cli_error("cannot export run '%s': %s", o->run, pl_errmsg());
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
            cli_error("cannot read run '%s': %s", o->run, pl_errmsg());
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

/* ---- verify ------------------------------------------------------------------- */

typedef struct verify_ctx {
    pl_engine *e;
    const opts *o;
    size_t runs, faults;
    cJSON *faults_json;
    char **ids;
    size_t n_ids, cap_ids;
    bool oom;
} verify_ctx;

static int collect_id(const pl_run_info *ri, void *user)
{
    verify_ctx *v = user;
    if (v->n_ids == v->cap_ids) {
        size_t cap = v->cap_ids ? v->cap_ids * 2 : 64;
        char **ids = realloc(v->ids, cap * sizeof *ids);
        if (!ids) {
            v->oom = true;
            return 1;
        }
        v->ids = ids;
        v->cap_ids = cap;
    }
    if (!(v->ids[v->n_ids] = dup_str(ri->id))) {
        v->oom = true;
        return 1;
    }
    v->n_ids++;
    return 0;
}

static void fault(verify_ctx *v, const char *run, const char *msg)
{
    v->faults++;
    if (v->o->format == FMT_TEXT) {
        printf("FAULT run %s: %s\n", run ? run : "(store)", msg);
        return;
    }
    cJSON *f = cJSON_CreateObject();
    if (!f) {
        v->oom = true;
        return;
    }
    if (run)
        cJSON_AddStringToObject(f, "run", run);
    else
        cJSON_AddNullToObject(f, "run");
    cJSON_AddStringToObject(f, "message", msg);
    if (v->o->format == FMT_JSONL) {
        cli_json_line(stdout, f);
        cJSON_Delete(f);
    } else {
        cJSON_AddItemToArray(v->faults_json, f);
    }
}

static void verify_one(verify_ctx *v, const char *id)
{
    v->runs++;
    int st = pl_run_verify(v->e, id);
    if (st == PL_OK) {
        if (v->o->format == FMT_TEXT)
            printf("ok    run %s\n", id);
        return;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", pl_strerror(st), pl_errmsg());
    fault(v, id, msg);
}

static int cmd_verify(pl_engine *e, const opts *o)
{
    verify_ctx v = {0};
    v.e = e;
    v.o = o;
    if (o->format == FMT_JSON && !(v.faults_json = cJSON_CreateArray())) {
        cli_error("out of memory");
        return CLI_EXIT_STORE;
    }
    if (o->run) {
        pl_run_info *ri = NULL;
        int st = pl_run_get(&ri, e, o->run);
        pl_run_info_free(ri);
        if (st == PL_ENOTFOUND || st == PL_EINVAL) {
            cli_error("no run '%s' in the store", o->run);
            cJSON_Delete(v.faults_json);
            return CLI_EXIT_STORE;
        }
        verify_one(&v, o->run); /* a broken record is a fault too */
    } else {
        int st = pl_engine_runs(e, collect_id, &v);
        if (v.oom) {
            cli_error("out of memory");
        } else if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "the run list: %s: %s", pl_strerror(st),
                     pl_errmsg());
            fault(&v, NULL, msg);
        }
        for (size_t i = 0; i < v.n_ids; i++)
            verify_one(&v, v.ids[i]);
    }
    if (o->format == FMT_TEXT) {
        printf("%zu run(s) checked, %zu fault(s)\n", v.runs, v.faults);
    } else if (o->format == FMT_JSON) {
        cJSON *doc = cJSON_CreateObject();
        if (doc) {
            cJSON_AddNumberToObject(doc, "runs_checked", (double)v.runs);
            cJSON_AddNumberToObject(doc, "fault_count", (double)v.faults);
            cJSON_AddItemToObject(doc, "faults", v.faults_json);
            v.faults_json = NULL;
            cli_json_document(stdout, doc);
        }
        cJSON_Delete(doc);
    }
    cJSON_Delete(v.faults_json);
    for (size_t i = 0; i < v.n_ids; i++)
        free(v.ids[i]);
    free(v.ids);
    if (v.faults)
        return CLI_EXIT_FAULT;
    return v.oom ? CLI_EXIT_STORE : CLI_EXIT_OK;
}

/* ---- stats --------------------------------------------------------------------- */

typedef struct top_run {
    char id[PL_MAX_RUN_ID + 1];
    char policy[PL_MAX_NAME + 1];
    uint64_t steps;
} top_run;

typedef struct stats_ctx {
    uint64_t by_status[PL_RUN_CANCELLED + 1];
    uint64_t crashed, steps, runs;
    top_run top[TOP_RUNS];
    size_t n_top;
} stats_ctx;

static int stats_visit(const pl_run_info *ri, void *user)
{
    stats_ctx *c = user;
    c->runs++;
    if (ri->status >= PL_RUN_RUNNING && ri->status <= PL_RUN_CANCELLED)
        c->by_status[ri->status]++;
    c->crashed += crashed(ri);
    c->steps += ri->steps;
    size_t at = c->n_top;
    while (at > 0 && c->top[at - 1].steps < ri->steps)
        at--;
    if (at >= TOP_RUNS)
        return 0;
    size_t last = c->n_top < TOP_RUNS ? c->n_top : TOP_RUNS - 1;
    memmove(&c->top[at + 1], &c->top[at], (last - at) * sizeof c->top[0]);
    snprintf(c->top[at].id, sizeof c->top[at].id, "%s", ri->id);
    snprintf(c->top[at].policy, sizeof c->top[at].policy, "%s", ri->policy);
    c->top[at].steps = ri->steps;
    if (c->n_top < TOP_RUNS)
        c->n_top++;
    return 0;
}

static int cmd_stats(pl_engine *e, const opts *o)
{
    stats_ctx c;
    memset(&c, 0, sizeof c);
    pl_store_stats ss = {.version = PL_STORE_STATS_VERSION};
    int st = pl_engine_stats(&ss, e);
    if (!st)
        st = pl_engine_runs(e, stats_visit, &c);
    if (st) {
        cli_error("cannot read the store's statistics: %s", pl_errmsg());
        return CLI_EXIT_STORE;
    }
    if (o->format == FMT_TEXT) {
        printf("runs         %llu\n", (unsigned long long)c.runs);
        for (int s = PL_RUN_RUNNING; s <= PL_RUN_CANCELLED; s++)
            printf("  %-10s %llu\n", pl_run_status_name((pl_run_status)s),
                   (unsigned long long)c.by_status[s]);
        printf("  (crashed)  %llu\n", (unsigned long long)c.crashed);
        printf("steps        %llu (as the run records count them; a running "
               "run's as of its last heartbeat)\n",
               (unsigned long long)c.steps);
        printf("file size    %llu bytes\n", (unsigned long long)ss.file_bytes);
        printf("map size     %llu bytes\n", (unsigned long long)ss.map_bytes);
        printf("pages        %llu used, %llu free, %llu bytes each\n",
               (unsigned long long)ss.used_pages,
               (unsigned long long)ss.free_pages,
               (unsigned long long)ss.page_size);
        printf("largest runs:\n");
        for (size_t i = 0; i < c.n_top; i++)
            printf("  %-36s  %-16s  %llu steps\n", c.top[i].id, c.top[i].policy,
                   (unsigned long long)c.top[i].steps);
        return CLI_EXIT_OK;
    }
    cJSON *doc = cJSON_CreateObject(), *by = cJSON_CreateObject(),
          *top = cJSON_CreateArray();
    if (!doc || !by || !top) {
        cJSON_Delete(doc);
        cJSON_Delete(by);
        cJSON_Delete(top);
        cli_error("out of memory");
        return CLI_EXIT_STORE;
    }
    cJSON_AddNumberToObject(doc, "runs", (double)c.runs);
    for (int s = PL_RUN_RUNNING; s <= PL_RUN_CANCELLED; s++)
        cJSON_AddNumberToObject(by, pl_run_status_name((pl_run_status)s),
                                (double)c.by_status[s]);
    cJSON_AddItemToObject(doc, "by_status", by);
    cJSON_AddNumberToObject(doc, "crashed", (double)c.crashed);
    cJSON_AddNumberToObject(doc, "steps", (double)c.steps);
    cJSON_AddNumberToObject(doc, "file_bytes", (double)ss.file_bytes);
    cJSON_AddNumberToObject(doc, "map_bytes", (double)ss.map_bytes);
    cJSON_AddNumberToObject(doc, "page_size", (double)ss.page_size);
    cJSON_AddNumberToObject(doc, "used_pages", (double)ss.used_pages);
    cJSON_AddNumberToObject(doc, "free_pages", (double)ss.free_pages);
    cJSON_AddNumberToObject(doc, "step_records", (double)ss.step_records);
    for (size_t i = 0; i < c.n_top; i++) {
        cJSON *t = cJSON_CreateObject();
        if (!t)
            break;
        cJSON_AddStringToObject(t, "id", c.top[i].id);
        cJSON_AddStringToObject(t, "policy", c.top[i].policy);
        cJSON_AddNumberToObject(t, "steps", (double)c.top[i].steps);
        cJSON_AddItemToArray(top, t);
    }
    cJSON_AddItemToObject(doc, "largest", top);
    if (o->format == FMT_JSONL)
        cli_json_line(stdout, doc);
    else
        cli_json_document(stdout, doc);
    cJSON_Delete(doc);
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    cli_set_name(argc > 0 ? argv[0] : NULL);
    opts o;
    int rc = parse_args(&o, argc, argv);
    if (rc >= 0)
        return rc;
    pl_engine *e;
    pl_registry *reg;
    if (!cli_open_store(&e, &reg, o.store))
        return CLI_EXIT_STORE;
    if (o.verify)
        rc = cmd_verify(e, &o);
    else if (o.stats)
        rc = cmd_stats(e, &o);
    else if (o.run)
        rc = cmd_run(e, &o);
    else
        rc = cmd_list(e, &o);
    fflush(stdout);
    cli_close_store(e, reg);
    return rc;
}
