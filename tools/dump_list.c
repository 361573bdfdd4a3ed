/*
 * dump_list.c -- ledger-dump's run list and --stats.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger_llm.h>

#include "dump.h"

/* ---- runs ------------------------------------------------------------------- */

/*
 * A crashed run's record counts its steps as of its owner's last heartbeat
 * (pl_run_info.steps), written at most once a second: a run killed in its
 * first second would list none of the steps it made durable.  Nothing is
 * appended to it until it is continued, so the list counts them: the first
 * pass notes the crashed runs listed, each is walked, then the list is
 * printed with those counts.
 */
typedef struct counted {
    char *id;
    uint64_t steps;
    bool ok;
} counted;

typedef struct list_ctx {
    const opts *o;
    cJSON *all; /* json: the array */
    size_t shown;
    int status_width; /* text: the widest status listed, at least 30 */
    bool oom;
    counted *crashed; /* in the listing's order */
    size_t n_crashed, cap_crashed, next_crashed;
    size_t damaged; /* runs whose record could not be read */
} list_ctx;

static bool listed(const opts *o, const pl_run_info *ri)
{
    return !((o->has_status && ri->status != o->status) ||
             (o->policy && strcmp(ri->policy, o->policy) != 0) ||
             (o->has_since && ri->updated_us < o->since_us));
}

/* The first pass: the crashed runs listed, and (text) the width of the
 * status column (a waiting run's says what it waits for), so that the
 * columns after it line up */
static int width_visit(const pl_run_info *ri, void *user)
{
    list_ctx *c = user;
    int n = listed(c->o, ri) ? (int)strlen(cli_text(status_text(ri))) : 0;
    if (n > c->status_width)
        c->status_width = n;
    if (!n || !crashed(ri))
        return 0;
    if (c->n_crashed == c->cap_crashed) {
        size_t cap = c->cap_crashed ? 2 * c->cap_crashed : 16;
        counted *m = realloc(c->crashed, cap * sizeof *m);
        if (!m) {
            c->oom = true;
            return 1;
        }
        c->crashed = m;
        c->cap_crashed = cap;
    }
    counted *k = &c->crashed[c->n_crashed];
    if (!(k->id = strdup(ri->id))) {
        c->oom = true;
        return 1;
    }
    k->steps = 0;
    k->ok = false;
    c->n_crashed++;
    return 0;
}

static int count_visit(const pl_step *s, void *user)
{
    (void)s;
    ++*(uint64_t *)user;
    return 0;
}

/* Each crashed run noted, walked; one that cannot be read keeps its
 * record's count (--verify says what is wrong with it). */
static void count_crashed(pl_engine *e, list_ctx *c)
{
    for (size_t i = 0; i < c->n_crashed; i++) {
        counted *k = &c->crashed[i];
        k->ok = pl_run_walk(e, k->id, count_visit, &k->steps) == PL_OK;
    }
}

/* The steps to list for @p ri: counted, for a crashed run noted in the
 * first pass (the passes go in the same order), else its record's. */
static uint64_t listed_steps(list_ctx *c, const pl_run_info *ri)
{
    if (!crashed(ri))
        return ri->steps;
    while (c->next_crashed < c->n_crashed &&
           strcmp(c->crashed[c->next_crashed].id, ri->id) < 0)
        c->next_crashed++; /* gone since the first pass */
    if (c->next_crashed >= c->n_crashed ||
        strcmp(c->crashed[c->next_crashed].id, ri->id) != 0)
        return ri->steps;
    const counted *k = &c->crashed[c->next_crashed++];
    return k->ok ? k->steps : ri->steps;
}

static void list_free(list_ctx *c)
{
    for (size_t i = 0; i < c->n_crashed; i++)
        free(c->crashed[i].id);
    free(c->crashed);
    cJSON_Delete(c->all);
}

static int list_visit(const pl_run_info *ri, void *user)
{
    list_ctx *c = user;
    const opts *o = c->o;
    if (!listed(o, ri))
        return 0;
    c->shown++;
    uint64_t steps = listed_steps(c, ri);
    if (o->format == FMT_TEXT) {
        char created[40], updated[40];
        cli_time_human(created, sizeof created, ri->created_us);
        cli_time_human(updated, sizeof updated, ri->updated_us);
        /* what the store holds, its control characters escaped */
        printf("%-36s  %-16s  %-*s  %6llu  %s  %s\n", cli_text(ri->id),
               cli_text(ri->policy), c->status_width, cli_text(status_text(ri)),
               (unsigned long long)steps, created, updated);
        return 0;
    }
    cJSON *j = run_json(ri);
    if (j && steps != ri->steps && !run_json_set_steps(j, steps)) {
        cJSON_Delete(j);
        j = NULL;
    }
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

static int width_damaged(const char *id, const char *msg, void *user)
{
    (void)id;
    (void)msg;
    (void)user;
    return 0;
}

/* A run whose record cannot be read is listed as damaged, whatever the
 * filters: the others are listed past it, and the exit status says so. */
static int list_damaged(const char *id, const char *msg, void *user)
{
    list_ctx *c = user;
    c->damaged++;
    if (c->o->format == FMT_TEXT) {
        printf("%-36s  damaged: %s\n", cli_text(id), cli_text(msg));
        return 0;
    }
    cJSON *j = cJSON_CreateObject();
    if (!j || !cJSON_AddStringToObject(j, "id", id) ||
        !cJSON_AddStringToObject(j, "damaged", msg)) {
        cJSON_Delete(j);
        c->oom = true;
    } else if (c->o->format == FMT_JSONL) {
        c->oom = !cli_json_line(stdout, j);
        cJSON_Delete(j);
    } else {
        cJSON_AddItemToArray(c->all, j);
    }
    return c->oom;
}

int cmd_list(pl_engine *e, const opts *o)
{
    list_ctx c = {o, NULL, 0, 30, false, NULL, 0, 0, 0, 0};
    if (o->format == FMT_JSON && !(c.all = cJSON_CreateArray()))
        c.oom = true;
    int st = c.oom ? PL_ENOMEM
                   : cli_runs_each(e, NULL, width_visit, width_damaged, &c);
    if (!st) {
        count_crashed(e, &c);
        if (o->format == FMT_TEXT)
            printf("%-36s  %-16s  %-*s  %6s  %-19s  %s\n", "RUN", "POLICY",
                   c.status_width, "STATUS", "STEPS", "CREATED (UTC)",
                   "UPDATED (UTC)");
        st = cli_runs_each(e, NULL, list_visit, list_damaged, &c);
    }
    if (c.oom) {
        cli_error("out of memory");
        list_free(&c);
        return CLI_EXIT_STORE;
    }
    if (st) {
        cli_error("cannot list the runs: %s", pl_errmsg());
        list_free(&c);
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
    list_free(&c);
    if (c.damaged) {
        cli_error("%zu run record(s) could not be read (damaged, listed "
                  "above): ledger-dump --verify checks them",
                  c.damaged);
        return CLI_EXIT_STORE;
    }
    return CLI_EXIT_OK;
}

/* ---- chains -------------------------------------------------------------------- */

/* A link in JSON: a line (jsonl), or into @p all (json).  Takes @p j. */
static void chain_json(cJSON *all, cJSON *j, bool *oom)
{
    if (!j) {
        *oom = true;
    } else if (all) {
        if (!cJSON_AddItemToArray(all, j)) {
            cJSON_Delete(j);
            *oom = true;
        }
    } else {
        *oom |= !cli_json_line(stdout, j);
        cJSON_Delete(j);
    }
}

/* A link: its record in *ri (1), or, deleted, its tombstone in *t (2),
 * or 3 when its record cannot be read (damaged: pl_errmsg() says why); 0
 * when the store has neither. */
static int chain_get(pl_engine *e, const char *id, pl_run_info **ri,
                     pl_tombstone *t)
{
    *ri = NULL;
    int st = pl_run_get(ri, e, id);
    if (!st)
        return 1;
    if (st != PL_ENOTFOUND && st != PL_EINVAL)
        return 3;
    *t = (pl_tombstone)PL_TOMBSTONE_INIT;
    return pl_run_tombstone(t, e, id) ? 0 : 2;
}

/* The link before @p id in @p prev ("" at the first link still known):
 * a record's predecessor, or for a deleted or damaged link the run its id
 * follows by the ids' rule.  Its record, or for a deleted one the ids'
 * rule, must make @p id its successor (a copy of a link imported under
 * another id names the original's predecessor); a damaged one, whose
 * record says nothing, is taken as the link before. */
static void chain_prev(pl_engine *e, const char *id, char *prev)
{
    pl_run_info *ri;
    pl_tombstone t;
    int got = chain_get(e, id, &ri, &t);
    prev[0] = '\0';
    if (got == 1 && ri->predecessor)
        snprintf(prev, PL_MAX_RUN_ID + 1, "%s", ri->predecessor);
    else if (got == 2 || got == 3)
        cli_chain_prev_id(prev, id);
    pl_run_info_free(ri);
    if (!prev[0])
        return;
    got = chain_get(e, prev, &ri, &t);
    char succ[PL_MAX_RUN_ID + 1];
    bool linked = got == 1 ? ri->successor && !strcmp(ri->successor, id)
                  : got == 2
                      ? t.status == PL_RUN_CONTINUED &&
                            cli_chain_next_id(succ, prev) && !strcmp(succ, id)
                      : got == 3;
    pl_run_info_free(ri);
    if (!linked)
        prev[0] = '\0';
}

/* Print one link (its record, its tombstone when deleted, or that its
 * record cannot be read), or with --format json add it to @p all; the id
 * of the link after it in @p next ("" at the end).  false when there is
 * none, or when its record does not go on from @p from, the link before it
 * (a copy of a link, imported under another id, names the original's
 * successor).  A damaged link adds to *damaged; the chain goes on past it
 * by the ids' rule, as past a deleted one. */
static bool chain_link(pl_engine *e, const opts *o, const char *id,
                       const char *from, bool asked, char *next, cJSON *all,
                       bool *oom, size_t *damaged)
{
    pl_run_info *ri = NULL;
    pl_tombstone t;
    next[0] = '\0';
    int got = chain_get(e, id, &ri, &t);
    if (got == 1 && from[0] &&
        (!ri->predecessor || strcmp(ri->predecessor, from))) {
        pl_run_info_free(ri);
        return false;
    }
    if (!got)
        return false;
    if (got == 3) {
        ++*damaged;
        if (o->format == FMT_TEXT) {
            printf("%s %-40s  damaged: %s\n", asked ? "*" : " ", cli_text(id),
                   cli_text(pl_errmsg()));
        } else {
            cJSON *j = cJSON_CreateObject();
            if (j && (!cJSON_AddStringToObject(j, "id", id) ||
                      !cJSON_AddStringToObject(j, "damaged", pl_errmsg()))) {
                cJSON_Delete(j);
                j = NULL;
            }
            chain_json(all, j, oom);
        }
        if (!cli_chain_next_id(next, id))
            next[0] = '\0';
        return true;
    }
    if (got == 2) {
        char del[40];
        cli_time_iso(del, sizeof del, t.deleted_us, false);
        if (o->format == FMT_TEXT) {
            printf("%s %-40s  %-10s  deleted on %s\n", asked ? "*" : " ",
                   cli_text(id), pl_run_status_name(t.status), del);
        } else {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "id", id);
            cJSON_AddStringToObject(j, "status", pl_run_status_name(t.status));
            cJSON_AddStringToObject(j, "deleted", del);
            chain_json(all, j, oom);
        }
        /* a deleted link continued as new: its successor by the ids' rule */
        if (t.status == PL_RUN_CONTINUED && !cli_chain_next_id(next, id))
            next[0] = '\0';
        return true;
    }
    if (o->format == FMT_TEXT) {
        char created[40];
        cli_time_iso(created, sizeof created, ri->created_us, false);
        printf("%s %-40s  %-10s  %6llu steps  created %s\n", asked ? "*" : " ",
               cli_text(id), pl_run_status_name(ri->status),
               (unsigned long long)ri->steps, created);
    } else {
        chain_json(all, run_json(ri), oom);
    }
    if (ri->successor)
        snprintf(next, PL_MAX_RUN_ID + 1, "%s", ri->successor);
    pl_run_info_free(ri);
    return true;
}

int cmd_chain(pl_engine *e, const opts *o)
{
    /* back to the first link still known: stored, or deleted with its
     * tombstone kept */
    char first[PL_MAX_RUN_ID + 1], prev[PL_MAX_RUN_ID + 1];
    char next[PL_MAX_RUN_ID + 1];
    snprintf(first, sizeof first, "%s", o->run);
    for (unsigned hops = 0; hops < 1000000; hops++) {
        chain_prev(e, first, prev);
        if (!prev[0])
            break;
        memcpy(first, prev, sizeof first);
    }
    /* json: one document, {"chain": [the links]} */
    cJSON *all = o->format == FMT_JSON ? cJSON_CreateArray() : NULL;
    bool oom = o->format == FMT_JSON && !all, any = false;
    size_t damaged = 0;
    char id[PL_MAX_RUN_ID + 1], from[PL_MAX_RUN_ID + 1] = "";
    snprintf(id, sizeof id, "%s", first);
    for (unsigned hops = 0; hops < 1000000 && id[0] && !oom &&
                            chain_link(e, o, id, from, !strcmp(id, o->run),
                                       next, all, &oom, &damaged);
         hops++) {
        any = true;
        memcpy(from, id, sizeof from);
        memcpy(id, next, sizeof id);
    }
    if (any && !oom && all) {
        cJSON *doc = cJSON_CreateObject();
        if (doc && cJSON_AddItemToObject(doc, "chain", all)) {
            all = NULL;
            oom = !cli_json_document(stdout, doc);
        } else {
            oom = true;
        }
        cJSON_Delete(doc);
    }
    cJSON_Delete(all);
    if (oom)
        cli_error("out of memory");
    if (!any && !oom) {
        cli_error("no run %s in the store", QUOTE(o->run));
        return CLI_EXIT_STORE;
    }
    if (damaged)
        cli_error("%zu link(s) of the chain could not be read (damaged, "
                  "listed above): ledger-dump --verify checks them",
                  damaged);
    return oom || damaged ? CLI_EXIT_STORE : CLI_EXIT_OK;
}

/* ---- stats --------------------------------------------------------------------- */

typedef struct top_run {
    char id[PL_MAX_RUN_ID + 1];
    char policy[PL_MAX_NAME + 1];
    uint64_t steps;
} top_run;

typedef struct stats_ctx {
    uint64_t by_status[STATUS_MAX + 1];
    uint64_t crashed, steps, runs;
    uint64_t damaged; /* runs whose record cannot be read, in runs */
    top_run top[TOP_RUNS];
    size_t n_top;
} stats_ctx;

static int stats_visit(const pl_run_info *ri, void *user)
{
    stats_ctx *c = user;
    c->runs++;
    if (ri->status >= PL_RUN_RUNNING && ri->status <= STATUS_MAX)
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

/* A run whose record cannot be read is counted apart, the others read on
 * (as the list goes past it); said on stderr, and the exit status is 2. */
static int stats_damaged(const char *id, const char *msg, void *user)
{
    stats_ctx *c = user;
    c->runs++;
    c->damaged++;
    cli_error("run %s: its record cannot be read: %s", QUOTE(id), msg);
    return 0;
}

int cmd_stats(pl_engine *e, const opts *o)
{
    stats_ctx c;
    memset(&c, 0, sizeof c);
    pl_store_stats ss = {.version = PL_STORE_STATS_VERSION};
    int st = pl_engine_stats(&ss, e);
    if (!st)
        st = cli_runs_each(e, NULL, stats_visit, stats_damaged, &c);
    if (st) {
        cli_error("cannot read the store's statistics: %s", pl_errmsg());
        return CLI_EXIT_STORE;
    }
    int rc = c.damaged ? CLI_EXIT_STORE : CLI_EXIT_OK;
    if (o->format == FMT_TEXT) {
        printf("runs         %llu\n", (unsigned long long)c.runs);
        for (int s = PL_RUN_RUNNING; s <= STATUS_MAX; s++)
            if (pl_run_status_name((pl_run_status)s))
                printf("  %-10s %llu\n", pl_run_status_name((pl_run_status)s),
                       (unsigned long long)c.by_status[s]);
        printf("  (crashed)  %llu\n", (unsigned long long)c.crashed);
        if (c.damaged)
            printf("  (damaged)  %llu (their records cannot be read: "
                   "ledger-dump --verify)\n",
                   (unsigned long long)c.damaged);
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
            printf("  %-36s  %-16s  %llu steps\n", cli_text(c.top[i].id),
                   cli_text(c.top[i].policy),
                   (unsigned long long)c.top[i].steps);
        return rc;
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
    for (int s = PL_RUN_RUNNING; s <= STATUS_MAX; s++)
        if (pl_run_status_name((pl_run_status)s))
            cJSON_AddNumberToObject(by, pl_run_status_name((pl_run_status)s),
                                    (double)c.by_status[s]);
    cJSON_AddItemToObject(doc, "by_status", by);
    cJSON_AddNumberToObject(doc, "crashed", (double)c.crashed);
    cJSON_AddNumberToObject(doc, "damaged", (double)c.damaged);
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
    return rc;
}
