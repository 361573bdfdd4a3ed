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

static bool row_shown(const opts *o, const srow *w)
{
    return (!o->has_type || w->type == o->type) &&
           (!o->actor || !strcmp(w->actor, o->actor)) &&
           (!o->policy || !strcmp(w->actor, o->policy)) &&
           (!o->invocation || under(w->path, o->invocation)) &&
           (!o->has_since || w->time_us >= o->since_us);
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
    /* what the store holds, its control characters escaped (cli_text()) */
    printf("%*s%-10s %-13s %-16s %s", (int)(2 * depth + 2), "", cli_text(w->id),
           pl_step_type_name(w->type), cli_text(w->actor),
           payload ? cli_text(payload) : "?");
    if (w->code)
        printf("  [code %s]", cli_text(w->code));
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

/* How run @p id ended, from its record or, deleted, its tombstone; 0 when
 * neither can be read. */
static pl_run_status ended_as(pl_engine *e, const char *id)
{
    pl_run_info *ri = NULL;
    pl_tombstone t = PL_TOMBSTONE_INIT;
    pl_run_status s = (pl_run_status)0;
    if (!pl_run_get(&ri, e, id))
        s = ri->status;
    else if (!pl_run_tombstone(&t, e, id))
        s = t.status;
    pl_run_info_free(ri);
    return s;
}

/* The links of a run to the runs before and after it: an upgrade's
 * (pl_run_upgrade(): superseded by newer code) or a chain's
 * (pl_ctx_continue_as_new()), told apart by how the earlier run ended. */
static void print_links(pl_engine *e, const pl_run_info *ri)
{
    if (ri->predecessor) {
        pl_run_status s = ended_as(e, ri->predecessor);
        printf(
            s == PL_RUN_CONTINUED ? "  continues   %s (continued as new "
                                    "into this run)\n"
            : s == PL_RUN_SUPERSEDED
                ? "  upgrade of  %s (superseded by this run)\n"
                : "  follows     %s (its record is gone or cannot be read)\n",
            cli_text(ri->predecessor));
    }
    if (ri->successor && ri->status == PL_RUN_CONTINUED)
        printf("  CONTINUED as %s (pl_ctx_continue_as_new(): the chain goes "
               "on there)\n",
               cli_text(ri->successor));
    else if (ri->successor)
        printf("  SUPERSEDED by %s (which continues it with newer code)\n",
               cli_text(ri->successor));
}

static void print_run_header(pl_engine *e, const pl_run_info *ri, size_t stored)
{
    pl_llm_tokens t = PL_LLM_TOKENS_INIT;
    char created[40], updated[40];
    cli_time_human(created, sizeof created, ri->created_us);
    cli_time_human(updated, sizeof updated, ri->updated_us);
    /* what the store holds, its control characters escaped (cli_text()) */
    printf("run %s\n", cli_text(ri->id));
    printf("  policy   %s\n", cli_text(ri->policy));
    printf("  status   %s\n", cli_text(status_text(ri)));
    if (ri->status == PL_RUN_RUNNING && stored != ri->steps)
        printf("  steps    %zu (the record counted %llu at its owner's last "
               "heartbeat)\n",
               stored, (unsigned long long)ri->steps);
    else
        printf("  steps    %zu\n", stored);
    printf("  created  %s UTC\n", created);
    printf("  updated  %s UTC\n", updated);
    if (ri->owner_pid == 0 && (!ri->owner_host || !*ri->owner_host))
        /* queued (or made by a fork or an import): no process took it */
        printf("  owner    none yet, %u attempt(s)\n", ri->attempts);
    else
        printf("  owner    pid %lld on %s, %u attempt(s)\n",
               (long long)ri->owner_pid,
               ri->owner_host ? cli_text(ri->owner_host) : "?", ri->attempts);
    if (run_tokens(&t, e, ri->id))
        printf("  tokens   %llu in, %llu out, over %llu model call(s)\n",
               (unsigned long long)t.input, (unsigned long long)t.output,
               (unsigned long long)t.exchanges);
    if (ri->code)
        printf("  code     %s\n", cli_text(ri->code));
    print_links(e, ri);
    if (ri->status == PL_RUN_FAILED)
        printf("  FAILED   %s: %s\n", pl_strerror(ri->error),
               ri->reason ? cli_text(ri->reason) : "(no reason recorded)");
    if (ri->status == PL_RUN_CANCELLED)
        printf("  CANCELLED  %s\n", ri->reason && *ri->reason
                                        ? cli_text(ri->reason)
                                        : "(no reason given)");
    if (ri->status == PL_RUN_WAITING)
        printf("  WAITING at invocation %s\n",
               ri->suspended_path ? cli_text(ri->suspended_path) : "?");
    if (ri->deadline_ms) {
        char dl[64];
        bool date = cli_ms_human(dl, sizeof dl, ri->deadline_ms);
        printf("  deadline %s%s\n", dl, date ? " UTC" : "");
    }
    if (ri->status == PL_RUN_SUSPENDED) {
        char *prompt = ri->prompt ? cli_json_compact(ri->prompt) : NULL;
        printf("  SUSPENDED at invocation %s\n",
               ri->suspended_path ? cli_text(ri->suspended_path) : "?");
        printf("  prompt   %s\n", prompt ? cli_text(prompt) : "{}");
        printf("  resume token  %s\n", ri->resume_token
                                           ? cli_text(ri->resume_token)
                                           : "(none recorded)");
        free(prompt);
    }
    printf("steps:\n");
}

/* The ids of the steps --follow has printed, sorted (strcmp).  The rows
 * come in tree order, which is not the order steps are appended in: the
 * callees of a fan-out (pl_ctx_call_all()) append theirs side by side, so
 * a new step can come before one printed.  Rows are told apart by id. */
typedef struct seen_ids {
    char **v;
    size_t n, cap;
} seen_ids;

static int id_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool seen(const seen_ids *s, const char *id)
{
    return s && s->n && bsearch(&id, s->v, s->n, sizeof *s->v, id_cmp);
}

/* Add the ids of @p r that @p s has not; false on OOM. */
static bool seen_add(seen_ids *s, const rows *r)
{
    size_t had = s->n;
    for (size_t i = 0; i < r->n; i++) {
        if (had && bsearch(&r->v[i].id, s->v, had, sizeof *s->v, id_cmp))
            continue;
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 64;
            char **v = realloc(s->v, cap * sizeof *v);
            if (!v)
                return false;
            s->v = v;
            s->cap = cap;
        }
        if (!(s->v[s->n] = cli_strdup(r->v[i].id)))
            return false;
        s->n++;
    }
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, id_cmp);
    return true;
}

static void seen_free(seen_ids *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

/* ---- --follow: where a poll can find new steps ---------------------------------- */

/*
 * Steps are only appended, each to its own ledger, and a step's key is
 * its place in the run's tree (design.md 7.2): a ledger's next step sits
 * after the subtree of its last one, a new callee's first step right
 * after its action_call.  A callee's ledger grows only while its call is
 * unanswered (a ledger's action_results answer its action_calls in the
 * order they were made: each right after its call, or a fan-out's block
 * after its block of calls, design.md 13); the root's may always grow.
 * So the earliest place in tree order that a poll can find a step not
 * printed is the least of "L:(last + 1)" over those ledgers L: --follow
 * reads from there on (pl_run_walk_from()), not the whole run.  A result
 * answers the earliest call left unanswered in its ledger; one with no
 * call left (a one-step callee's own) answers none, so a call is never
 * taken for answered too soon: at worst a poll reads from further back.
 */
/* An invocation path's length at most, with room for a callee one level
 * past PL_MAX_DEPTH: "0" and a ".N" a level (N of 10 digits at most), and
 * the NUL; a step id's, with ":SEQ". */
#define STEP_PATH_MAX (1 + 11 * (PL_MAX_DEPTH + 2) + 1)
#define STEP_ID_MAX (STEP_PATH_MAX + 11)

typedef struct ledger_calls {
    char *path;
    int64_t last; /* its last seq printed; -1: none yet */
    uint32_t *calls;
    size_t n, cap, answered;
} ledger_calls;

typedef struct frontier {
    ledger_calls *v;
    size_t n, cap;
} frontier;

static ledger_calls *ledger_find(const frontier *f, const char *path)
{
    for (size_t i = f->n; i > 0; i--) /* the ledgers last added first */
        if (!strcmp(f->v[i - 1].path, path))
            return &f->v[i - 1];
    return NULL;
}

/* Take the steps of @p r not in @p skip into @p f; false on OOM. */
static bool frontier_add(frontier *f, const rows *r, const seen_ids *skip)
{
    for (size_t i = 0; i < r->n; i++) {
        const srow *w = &r->v[i];
        if (seen(skip, w->id))
            continue;
        ledger_calls *l = ledger_find(f, w->path);
        if (!l) {
            if (f->n == f->cap) {
                size_t cap = f->cap ? 2 * f->cap : 16;
                ledger_calls *v = realloc(f->v, cap * sizeof *v);
                if (!v)
                    return false;
                f->v = v;
                f->cap = cap;
            }
            l = &f->v[f->n];
            memset(l, 0, sizeof *l);
            if (!(l->path = cli_strdup(w->path)))
                return false;
            l->last = -1;
            f->n++;
        }
        if ((int64_t)w->seq > l->last)
            l->last = w->seq;
        if (w->type == PL_STEP_ACTION_RESULT && l->answered < l->n)
            l->answered++;
        if (w->type != PL_STEP_ACTION_CALL)
            continue;
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 8;
            uint32_t *v = realloc(l->calls, cap * sizeof *v);
            if (!v)
                return false;
            l->calls = v;
            l->cap = cap;
        }
        l->calls[l->n++] = w->seq;
    }
    return true;
}

static void frontier_free(frontier *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].path);
        free(f->v[i].calls);
    }
    free(f->v);
}

/* Tree order of step (@p pa, @p sa) and (@p pb, @p sb): the paths'
 * numbers after the root's, then the seq, compared in turn, a prefix
 * first, as the step keys sort. */
static unsigned long next_number(const char **p, uint32_t seq)
{
    if (!*p)
        return seq;
    char *end;
    unsigned long x = strtoul(*p + 1, &end, 10);
    *p = *end == '.' ? end : NULL;
    return x;
}

static int tree_cmp(const char *pa, uint32_t sa, const char *pb, uint32_t sb)
{
    const char *a = strchr(pa, '.'), *b = strchr(pb, '.');
    for (;;) {
        bool a_seq = !a, b_seq = !b;
        unsigned long x = next_number(&a, sa), y = next_number(&b, sb);
        if (x != y)
            return x < y ? -1 : 1;
        if (a_seq || b_seq) /* a seq met: the key that ended is first */
            return a_seq && b_seq ? 0 : a_seq ? -1 : 1;
    }
}

/* Where the next poll reads from (see above), into @p out: the least
 * next step of the root's ledger and of each unanswered call's callee. */
static void frontier_from(const frontier *f, const char *root, char *out,
                          size_t n)
{
    const ledger_calls *r = ledger_find(f, root);
    char best[STEP_PATH_MAX];
    uint32_t best_seq = r ? (uint32_t)(r->last + 1) : 0;
    snprintf(best, sizeof best, "%s", root);
    for (size_t i = 0; i < f->n; i++) {
        const ledger_calls *l = &f->v[i];
        for (size_t k = l->answered; k < l->n; k++) {
            char callee[sizeof best];
            snprintf(callee, sizeof callee, "%s.%u", l->path, l->calls[k]);
            const ledger_calls *c = ledger_find(f, callee);
            uint32_t next = c ? (uint32_t)(c->last + 1) : 0;
            if (tree_cmp(callee, next, best, best_seq) < 0) {
                snprintf(best, sizeof best, "%s", callee);
                best_seq = next;
            }
        }
    }
    snprintf(out, n, "%s:%u", best, best_seq);
}

/* Print the rows that pass the filters, but those in @p skip.  @p cut:
 * the rows end where a step could not be read, so a call whose answer
 * may lie past them is not known to be in doubt, or waiting. */
static bool print_rows(const opts *o, const rows *r, const seen_ids *skip,
                       const pl_run_info *ri, cJSON *array, bool cut)
{
    for (size_t i = 0; i < r->n; i++) {
        const srow *w = &r->v[i];
        if (!row_shown(o, w) || seen(skip, w->id))
            continue;
        const char *mark = mark_name(r, i, ri);
        if (cut && call_mark_of(r, i, ri) != MARK_NONE)
            mark = NULL;
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
    if (st == PL_ENOTFOUND && cli_say_deleted(e, id))
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
    if (!mark_export_line(line, m->r, m->ri, &m->next) ||
        !cli_json_times_as_digits(line))
        return PL_ENOMEM;
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
    /* a step that cannot be read (damaged) ends the walk: the steps read
     * before it are shown (none when it is the first), and where it
     * stopped said, but for an export, which --import would take for the
     * whole run, and --follow; a store that fails before any step is read
     * is no damage */
    char cut[1024] = "";
    if (st && !r.oom && (r.n || st == PL_ECORRUPT || st == PL_EVERSION) &&
        !o->follow && (o->format != FMT_JSONL || filtered(o))) {
        snprintf(cut, sizeof cut, "%s", pl_errmsg());
        st = PL_OK;
    }
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
                  (ri->status != PL_RUN_RUNNING || cut[0] ||
                   run_json_set_steps(run, r.n)) &&
                  (!cut[0] || cJSON_AddStringToObject(doc, "damaged", cut)) &&
                  print_rows(o, &r, NULL, ri, steps, cut[0]);
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
    if (o->format == FMT_TEXT) /* cut short: the record's count */
        print_run_header(e, ri, cut[0] ? ri->steps : r.n);
    if (!print_rows(o, &r, NULL, ri, NULL, cut[0])) {
        cli_error("out of memory");
        rc = CLI_EXIT_STORE;
        goto done;
    }
    if (!o->follow)
        goto done;
    /* --follow: poll until the run ends or suspends, or its owner is gone
     * and nothing changes any more; a run queued for a worker or waiting
     * for its time or an event is followed until it goes on and ends */
    seen_ids printed = {0};
    frontier fr = {0};
    bool quiet_once = false;
    if (!frontier_add(&fr, &r, NULL) || !seen_add(&printed, &r)) {
        cli_error("out of memory");
        rc = CLI_EXIT_STORE;
        goto followed;
    }
    for (;;) {
        if (ri->status != PL_RUN_RUNNING && ri->status != PL_RUN_SUBMITTED &&
            ri->status != PL_RUN_WAITING) {
            cli_error("run %s is %s", QUOTE(o->run),
                      pl_run_status_name(ri->status));
            break;
        }
        sleep_ms(FOLLOW_POLL_MS);
        pl_run_info *next = NULL;
        if ((rc = get_run(e, o->run, &next)))
            break;
        pl_run_info_free(ri);
        ri = next;
        char from[STEP_ID_MAX];
        frontier_from(&fr, "0", from, sizeof from);
        if ((st = read_rows_from(e, o->run, from, &r))) {
            cli_error("cannot read run %s: %s", QUOTE(o->run), pl_errmsg());
            rc = CLI_EXIT_STORE;
            break;
        }
        bool changed = false;
        for (size_t i = 0; i < r.n && !changed; i++)
            changed = !seen(&printed, r.v[i].id);
        if (changed &&
            (!print_rows(o, &r, &printed, ri, NULL, false) ||
             !frontier_add(&fr, &r, &printed) || !seen_add(&printed, &r))) {
            cli_error("out of memory");
            rc = CLI_EXIT_STORE;
            break;
        }
        if (ri->status == PL_RUN_RUNNING && !ri->owner_alive && !changed) {
            /* one more quiet poll, so steps committed just before the
             * owner exited are not missed */
            if (quiet_once) {
                cli_error("run %s is still running but its owner (pid "
                          "%lld) is gone: it crashed; stopping.  Finish it "
                          "with pl_run_continue() (ledger-replay)",
                          QUOTE(o->run), (long long)ri->owner_pid);
                break;
            }
            quiet_once = true;
        } else {
            quiet_once = false;
        }
    }
followed:
    seen_free(&printed);
    frontier_free(&fr);
done:
    if (cut[0] && !rc) {
        cli_error("cannot read all of run %s: %s; %s (ledger-dump --verify "
                  "checks the run)",
                  QUOTE(o->run), cut,
                  r.n ? "the steps before it are shown"
                      : "no step before it, its record is shown");
        rc = CLI_EXIT_STORE;
    }
    rows_free(&r);
    pl_run_info_free(ri);
    return rc;
}
