/*
 * web_list.c -- GET /api/runs and /api/inbox: runs in id order (newest
 * first by default), filtered, a page at a time.
 *
 * A page starts at its cursor by key (pl_engine_runs_from()), so the
 * first page of a store of any size costs the runs it shows.  Filters are
 * applied to the records read; a request reads at most WEB_SCAN_MAX
 * records, and a page that filled no further says so ("truncated") and
 * hands back the cursor to go on from.  A run id prefix narrows the range
 * read, not only the rows shown.  A search (q) reads a run's steps when
 * its record does not match, within bounds per run and per request (see
 * web_filter_match()); a request whose search bounds are spent stops
 * before the run it could not decide, the same way.
 *
 * A run whose record cannot be read (damaged: its checksum fails) is
 * shown where it stands, whatever the filters but its prefix, as
 * web_damaged_json() makes it, and the listing goes on past it
 * (cli_runs_each()); status=damaged shows those alone.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "web.h"

#define WALK_MAX 2000   /* runs of more steps show no tokens in the list */
#define PAGE_WALK 50000 /* steps a page reads for tokens, at most */
#define PREVIEW_MAX 200 /* bytes of a root payload the list shows */

const char *web_status_name(const pl_run_info *ri)
{
    return crashed(ri) ? "crashed" : pl_run_status_name(ri->status);
}

bool web_add_tokens(cJSON *o, web *w, const char *id)
{
    pl_llm_tokens t = PL_LLM_TOKENS_INIT;
    if (pl_llm_run_tokens(&t, w->engine, id) != PL_OK)
        return cJSON_AddNullToObject(o, "tokens") != NULL;
    cJSON *tk = cJSON_AddObjectToObject(o, "tokens");
    return tk && cJSON_AddNumberToObject(tk, "input", (double)t.input) &&
           cJSON_AddNumberToObject(tk, "output", (double)t.output) &&
           cJSON_AddNumberToObject(tk, "model_calls", (double)t.exchanges);
}

/* ---- filters ---------------------------------------------------------------- */

static bool parse_size(const char *text, size_t *out)
{
    char *end;
    if (text[0] < '0' || text[0] > '9') /* no sign, no space */
        return false;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || errno)
        return false;
    *out = (size_t)v;
    return true;
}

int web_filter_parse(web_filter *f, const web_req *r, size_t limit_max,
                     cJSON **out)
{
    memset(f, 0, sizeof *f);
    f->limit = WEB_PAGE_DEFAULT;
    const char *v;
    if ((v = web_arg(r, "status")) && *v) {
        if (!strcmp(v, "crashed"))
            f->status = -1;
        else if (!strcmp(v, "damaged"))
            f->status = WEB_DAMAGED;
        else {
            for (int s = 1; s < WEB_STATUS_N; s++)
                if (pl_run_status_name((pl_run_status)s) &&
                    !strcmp(v, pl_run_status_name((pl_run_status)s)))
                    f->status = s;
            if (!f->status)
                return web_fail(out, 400, "bad_status",
                                "status: one of running, crashed, suspended, "
                                "completed, failed, submitted, waiting, "
                                "cancelled, superseded, continued, damaged");
        }
    }
    if ((v = web_arg(r, "policy")) && *v)
        f->policy = v;
    if ((v = web_arg(r, "prefix")) && *v) {
        if (strlen(v) > PL_MAX_RUN_ID)
            return web_fail(out, 400, "bad_prefix",
                            "prefix: longer than a "
                            "run id");
        f->prefix = v;
    }
    if ((v = web_arg(r, "q")) && *v) {
        if (strlen(v) > 256)
            return web_fail(out, 400, "bad_q", "q: at most 256 bytes");
        f->q = v;
    }
    int64_t now = cli_now_us();
    if ((v = web_arg(r, "since")) && *v &&
        !cli_parse_time(&f->since_us, v, now))
        return web_fail(out, 400, "bad_time",
                        "since: a date (2026-11-24), a UTC time "
                        "(2026-11-24T15:04Z) or an age (10m, 2h, 3d)");
    if ((v = web_arg(r, "until")) && *v &&
        !cli_parse_time(&f->until_us, v, now))
        return web_fail(out, 400, "bad_time",
                        "until: a date (2026-11-24), a UTC time "
                        "(2026-11-24T15:04Z) or an age (10m, 2h, 3d)");
    if ((v = web_arg(r, "limit")) && *v &&
        (!parse_size(v, &f->limit) || f->limit < 1 || f->limit > limit_max))
        return web_fail(out, 400, "bad_limit", "limit: 1..%zu", limit_max);
    if ((v = web_arg(r, "order")) && *v) {
        if (!strcmp(v, "asc"))
            f->asc = true;
        else if (strcmp(v, "desc") != 0)
            return web_fail(out, 400, "bad_order", "order: asc or desc");
    }
    if ((v = web_arg(r, "cursor")) && *v) {
        if (!cli_run_id_ok(v))
            return web_fail(out, 400, "bad_cursor",
                            "cursor: a run id, as next_cursor gave it");
        f->cursor = v;
    }
    return 200;
}

/* Does @p needle occur in the run's payload, prompt or reason? */
static bool text_match(const pl_run_info *ri, const char *needle)
{
    if (strstr(ri->id, needle) || strstr(ri->policy, needle) ||
        (ri->reason && strstr(ri->reason, needle)))
        return true;
    const cJSON *parts[2] = {ri->payload, ri->prompt};
    for (int i = 0; i < 2; i++) {
        if (!parts[i])
            continue;
        char *text = pl_json_print(parts[i], false);
        bool hit = text && strstr(text, needle);
        free(text);
        if (hit)
            return true;
    }
    return false;
}

/* A search through a run's steps, step by step. */
typedef struct search_walk {
    const char *needle;
    size_t steps, bytes;           /* read */
    size_t left_steps, left_bytes; /* of the request's bounds */
    bool hit, cut, spent, oom;
} search_walk;

static int search_visit(const pl_step *s, void *user)
{
    search_walk *x = user;
    if (x->steps == WEB_SEARCH_RUN_STEPS || x->bytes >= WEB_SEARCH_RUN_BYTES) {
        x->cut = true; /* the run's bounds: searched as far as they go */
        return 1;
    }
    if (x->steps == x->left_steps || x->bytes >= x->left_bytes) {
        x->spent = true;
        return 1;
    }
    x->steps++;
    const cJSON *payload = pl_step_payload(s);
    if (!payload)
        return 0;
    char *text = pl_json_print(payload, false);
    if (!text) {
        x->oom = true;
        return 1;
    }
    x->bytes += strlen(text);
    x->hit = strstr(text, x->needle) != NULL;
    free(text);
    return x->hit;
}

/*
 * Does @p q occur in the payload of one of the run's steps?  At most
 * WEB_SEARCH_RUN_STEPS steps and WEB_SEARCH_RUN_BYTES of payloads (as
 * compact JSON) of a run are read, from its first; and, but for the first
 * run a request searches, only as much as the request's bounds
 * (WEB_SEARCH_STEPS, WEB_SEARCH_BYTES) have left: past them, the run is
 * not decided (WEB_SEARCH_SPENT).  Whether a run matches never depends on
 * where a page starts.
 */
static int steps_match(web *w, const char *q, const pl_run_info *ri,
                       web_search *s)
{
    search_walk x = {
        .needle = q, .left_steps = SIZE_MAX, .left_bytes = SIZE_MAX};
    if (s->runs) {
        x.left_steps = s->steps < WEB_SEARCH_STEPS ? WEB_SEARCH_STEPS - s->steps
                                                   : 0;
        x.left_bytes = s->bytes < WEB_SEARCH_BYTES ? WEB_SEARCH_BYTES - s->bytes
                                                   : 0;
    }
    int st = pl_run_walk(w->engine, ri->id, search_visit, &x);
    s->steps += x.steps;
    s->bytes += x.bytes;
    if (x.oom || st == PL_ENOMEM) {
        s->oom = true;
        return 0;
    }
    if (x.spent && !x.hit)
        return WEB_SEARCH_SPENT;
    s->runs++;
    s->cut += x.cut;
    s->unreadable += st < 0; /* a damaged run: its record alone */
    return x.hit;
}

int web_filter_match(web *w, const web_filter *f, const pl_run_info *ri,
                     web_search *s)
{
    if (f->status == WEB_DAMAGED)
        return 0;
    if (f->status == -1
            ? !crashed(ri)
            : f->status && ((int)ri->status != f->status || crashed(ri)))
        return 0;
    if (f->policy && strcmp(ri->policy, f->policy) != 0)
        return 0;
    if (f->prefix && strncmp(ri->id, f->prefix, strlen(f->prefix)) != 0)
        return 0;
    if (f->since_us && ri->created_us < f->since_us)
        return 0;
    if (f->until_us && ri->created_us > f->until_us)
        return 0;
    if (!f->q || text_match(ri, f->q))
        return 1;
    return steps_match(w, f->q, ri, s);
}

bool web_search_json(const web_filter *f, const web_search *s, cJSON *into)
{
    if (!f->q)
        return true;
    cJSON *j = cJSON_AddObjectToObject(into, "search");
    return j && cJSON_AddNumberToObject(j, "runs", (double)s->runs) &&
           cJSON_AddNumberToObject(j, "steps", (double)s->steps) &&
           cJSON_AddNumberToObject(j, "bytes", (double)s->bytes) &&
           cJSON_AddNumberToObject(j, "runs_cut", (double)s->cut) &&
           cJSON_AddNumberToObject(j, "unreadable", (double)s->unreadable) &&
           cJSON_AddNumberToObject(j, "run_steps", WEB_SEARCH_RUN_STEPS) &&
           cJSON_AddNumberToObject(j, "run_bytes", WEB_SEARCH_RUN_BYTES) &&
           cJSON_AddNumberToObject(j, "request_steps", WEB_SEARCH_STEPS) &&
           cJSON_AddNumberToObject(j, "request_bytes",
                                   (double)WEB_SEARCH_BYTES);
}

/* ---- a run as the list shows it ------------------------------------------------ */

cJSON *web_damaged_json(const char *id, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "id", id) ||
        !cJSON_AddStringToObject(o, "state", "damaged") ||
        !cJSON_AddStringToObject(o, "damaged", msg)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *web_run_summary(web *w, const pl_run_info *ri, size_t *budget)
{
    bool walk = ri->steps <= WALK_MAX && ri->steps <= *budget;
    if (walk)
        *budget -= ri->steps;
    cJSON *o = run_json(ri);
    if (!o)
        return NULL;
    /* the root payload and prompt can be megabytes: a preview here, the
     * whole of them in GET /api/runs/ID */
    cJSON_DeleteItemFromObjectCaseSensitive(o, "payload");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "prompt");
    char *preview = ri->payload ? cli_json_compact(ri->payload) : NULL;
    if (preview)
        cli_shorten(preview, PREVIEW_MAX);
    bool ok = cJSON_AddStringToObject(o, "root_policy", ri->policy) &&
              cJSON_AddStringToObject(o, "state", web_status_name(ri)) &&
              cJSON_AddStringToObject(o, "payload_preview",
                                      preview ? preview : "");
    free(preview);
    /* tokens and in-doubt calls need the steps: read for runs small
     * enough while the page's budget lasts, else null (the run's page
     * has them) */
    if (ok && walk)
        ok = web_add_tokens(o, w, ri->id);
    else if (ok)
        ok = cJSON_AddNullToObject(o, "tokens") != NULL;
    if (ok && crashed(ri) && walk) {
        /* read anyway: its steps counted there too (its record counts
         * them as of its owner's last heartbeat, as ledger-dump's list
         * says) */
        rows rs = {0};
        bool doubt = false, read = read_rows(w->engine, ri->id, &rs) == PL_OK;
        for (size_t i = 0; read && !doubt && i < rs.n; i++)
            doubt = call_mark_of(&rs, i, ri) == MARK_IN_DOUBT;
        ok = cJSON_AddBoolToObject(o, "in_doubt", doubt) != NULL &&
             (!read || rs.n == ri->steps || run_json_set_steps(o, rs.n));
        rows_free(&rs);
    } else if (ok) { /* not crashed: none; crashed but not read: unknown */
        ok = (crashed(ri)
                  ? cJSON_AddNullToObject(o, "in_doubt")
                  : cJSON_AddBoolToObject(o, "in_doubt", false)) != NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- a page ------------------------------------------------------------------- */

typedef struct page {
    web *w;
    const web_filter *f;
    cJSON *runs;
    bool with_prompt; /* the inbox shows each prompt */
    size_t shown, scanned;
    char last[PL_MAX_RUN_ID + 1]; /* the last id read */
    bool more;                    /* stopped before the end */
    bool truncated;               /* stopped by WEB_SCAN_MAX or the search */
    size_t budget;                /* steps left to read for tokens */
    web_search search;
    bool oom;
} page;

bool web_past_prefix(const web_filter *f, const char *id)
{
    return f->prefix && strncmp(id, f->prefix, strlen(f->prefix)) != 0 &&
           (f->asc ? strcmp(id, f->prefix) > 0 : strcmp(id, f->prefix) < 0);
}

/* Is page @p p full (the next page starts with the run at hand)? */
static bool page_full(page *p)
{
    if (p->shown < p->f->limit && p->scanned < WEB_SCAN_MAX)
        return false;
    p->more = true;
    p->truncated = p->shown < p->f->limit;
    return true;
}

/* Show @p j (NULL: out of memory, the page stops). */
static int page_add(page *p, cJSON *j)
{
    if (!j) {
        p->oom = true;
        return 1;
    }
    cJSON_AddItemToArray(p->runs, j);
    p->shown++;
    return 0;
}

static int page_visit(const pl_run_info *ri, void *user)
{
    page *p = user;
    const web_filter *f = p->f;
    if (web_past_prefix(f, ri->id) || page_full(p))
        return 1;
    int m = web_filter_match(p->w, f, ri, &p->search);
    if (m == WEB_SEARCH_SPENT) { /* the next page starts with this run */
        p->more = p->truncated = true;
        return 1;
    }
    if (p->search.oom) {
        p->oom = true;
        return 1;
    }
    p->scanned++;
    snprintf(p->last, sizeof p->last, "%s", ri->id);
    if (!m)
        return 0;
    cJSON *j = web_run_summary(p->w, ri, &p->budget);
    if (j && p->with_prompt && ri->prompt)
        cJSON_AddItemToObject(j, "prompt", cJSON_Duplicate(ri->prompt, 1));
    return page_add(p, j);
}

/* A run whose record cannot be read: shown, whatever the filters but the
 * prefix (its status, policy and times are not known). */
static int page_damaged(const char *id, const char *msg, void *user)
{
    page *p = user;
    const web_filter *f = p->f;
    if (web_past_prefix(f, id) || page_full(p))
        return 1;
    p->scanned++;
    snprintf(p->last, sizeof p->last, "%s", id);
    if (f->prefix && strncmp(id, f->prefix, strlen(f->prefix)) != 0)
        return 0;
    return page_add(p, web_damaged_json(id, msg));
}

/*
 * Where a listing starts: the cursor, else the prefix's range: ascending
 * just below the prefix (its last byte one less, then '~', which sorts
 * after every byte a run id holds), descending just past it (the prefix
 * and '~').
 */
void web_filter_start(const web_filter *f, char *out, size_t n)
{
    out[0] = '\0';
    if (f->cursor) {
        snprintf(out, n, "%s", f->cursor);
        return;
    }
    if (!f->prefix)
        return;
    size_t len = strlen(f->prefix);
    if (f->asc) {
        snprintf(out, n, "%.*s%c~", (int)(len - 1), f->prefix,
                 f->prefix[len - 1] - 1);
    } else {
        snprintf(out, n, "%s~", f->prefix);
    }
}

static int list(web *w, const web_filter *f, bool with_prompt, cJSON **out)
{
    page p = {.w = w, .f = f, .with_prompt = with_prompt, .budget = PAGE_WALK};
    cJSON *doc = cJSON_CreateObject();
    p.runs = cJSON_CreateArray();
    if (!doc || !p.runs) {
        cJSON_Delete(doc);
        cJSON_Delete(p.runs);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    cJSON_AddItemToObject(doc, "runs", p.runs);
    char start[PL_MAX_RUN_ID + 3];
    web_filter_start(f, start, sizeof start);
    pl_runs_options o = PL_RUNS_OPTIONS_INIT;
    o.after = start;
    o.reverse = !f->asc;
    int st = cli_runs_each(w->engine, &o, page_visit, page_damaged, &p);
    if (st < 0) {
        cJSON_Delete(doc);
        return web_fail_status(out, st, "listing runs");
    }
    if (p.oom) {
        cJSON_Delete(doc);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    if (p.more)
        cJSON_AddStringToObject(doc, "next_cursor", p.last);
    else
        cJSON_AddNullToObject(doc, "next_cursor");
    cJSON_AddNumberToObject(doc, "scanned", (double)p.scanned);
    cJSON_AddBoolToObject(doc, "truncated", p.truncated);
    cJSON_AddStringToObject(doc, "order", f->asc ? "asc" : "desc");
    if (!web_search_json(f, &p.search, doc) || !web_counts_json(w, doc)) {
        cJSON_Delete(doc);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    *out = doc;
    return 200;
}

int api_runs(web *w, const web_req *r, cJSON **out)
{
    web_filter f;
    int http = web_filter_parse(&f, r, WEB_PAGE_MAX, out);
    return http != 200 ? http : list(w, &f, false, out);
}

/* Runs waiting for a human: suspended, oldest first, with their prompts. */
int api_inbox(web *w, const web_req *r, cJSON **out)
{
    web_filter f;
    int http = web_filter_parse(&f, r, WEB_PAGE_MAX, out);
    if (http != 200)
        return http;
    f.status = PL_RUN_SUSPENDED;
    const char *order = web_arg(r, "order");
    if (!order || !*order) /* "order=" is not given, as for every filter */
        f.asc = true;
    return list(w, &f, true, out);
}
