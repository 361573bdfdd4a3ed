/*
 * web_steps.c -- a run's steps a page at a time, so that a run of any
 * length opens at once with bounded memory: GET /api/runs/ID/steps (from a
 * cursor, at most a limit of steps and about WEB_PAGE_BYTES of payloads,
 * each payload over WEB_PAYLOAD_CAP cut to a preview), GET
 * /api/runs/ID/step?id=STEP (one step whole), and the first page that GET
 * /api/runs/ID answers with.  Also the calls of a stream of steps with
 * what answered them (web_track), which the marks, the timeline and the
 * overview use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web.h"

/* ---- calls and their answers --------------------------------------------------- */

void web_track_free(web_tracker *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].path);
    free(t->v);
    memset(t, 0, sizeof *t);
}

/*
 * Steps come in tree order: a ledger's steps, each callee's after its
 * call.  An invocation's calls are answered in the order they were made
 * (one after another, or a fan-out's calls all made before their results
 * come, in the same order), so a step of a ledger answers the oldest call
 * of that ledger still awaiting one (a result or anything else but another
 * call or the engine's suspend and resume).  A call still awaiting one
 * when the steps leave its ledger's subtree is unanswered.
 */
bool web_track(web_tracker *t, const char *path, pl_step_type type, void *call,
               web_end_fn end, void *user)
{
    bool taken = !path || type == PL_STEP_ACTION_CALL ||
                 type == PL_STEP_SUSPEND || type == PL_STEP_RESUME;
    size_t k = 0;
    for (size_t j = 0; j < t->n; j++) {
        web_pending c = t->v[j];
        if (path && !taken && !strcmp(path, c.path)) {
            end(c.call, true, user); /* the oldest of this ledger's calls */
            taken = true;
            free(c.path);
        } else if (path && under(path, c.path)) {
            t->v[k++] = c; /* still inside its caller's subtree */
        } else {
            end(c.call, false, user);
            free(c.path);
        }
    }
    t->n = k;
    if (!path || type != PL_STEP_ACTION_CALL)
        return true;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        web_pending *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return false;
        t->v = v;
        t->cap = cap;
    }
    if (!(t->v[t->n].path = cli_strdup(path)))
        return false;
    t->v[t->n++].call = call;
    return true;
}

void web_step_path(const pl_step *s, char *out, size_t n)
{
    const char *id = pl_step_id(s);
    const char *colon = strrchr(id, ':');
    snprintf(out, n, "%.*s", colon ? (int)(colon - id) : 0, id);
}

/* ---- a run's marks from one walk ----------------------------------------------- */

void web_marks_free(web_marks *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->id[i]);
    free(m->id);
    free(m->mark);
    memset(m, 0, sizeof *m);
}

typedef struct marks_walk {
    web_marks *m;
    const pl_run_info *ri;
    web_tracker t;
    size_t max;
} marks_walk;

static void marks_end(void *call, bool answered, void *user)
{
    marks_walk *x = user;
    char *id = call;
    const char *colon = strrchr(id, ':');
    call_mark cm = MARK_NONE;
    if (!answered && !x->m->truncated && colon) {
        char path[PL_MAX_RUN_ID + 64];
        snprintf(path, sizeof path, "%.*s", (int)(colon - id), id);
        cm = call_mark_unanswered(path, (uint32_t)strtoul(colon + 1, NULL, 10),
                                  x->ri);
    }
    web_marks *m = x->m;
    if (cm == MARK_NONE || m->oom) {
        free(id);
        return;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        char **ids = realloc(m->id, cap * sizeof *ids);
        if (ids)
            m->id = ids;
        const char **marks = ids ? realloc(m->mark, cap * sizeof *marks) : NULL;
        if (marks)
            m->mark = marks;
        if (!ids || !marks) {
            m->oom = true;
            free(id);
            return;
        }
        m->cap = cap;
    }
    m->id[m->n] = id;
    m->mark[m->n++] = cm == MARK_WAITING ? "waiting" : "in_doubt";
}

static int marks_visit(const pl_step *s, void *user)
{
    marks_walk *x = user;
    if (x->max && x->m->steps == x->max) {
        x->m->truncated = true;
        return 1;
    }
    x->m->steps++;
    x->m->errors += pl_step_is_error(s);
    const char *id = pl_step_id(s);
    char path[WEB_STEP_ID_MAX + 1];
    web_step_path(s, path, sizeof path);
    pl_step_type type = pl_step_type_of(s);
    char *call = NULL;
    if (type == PL_STEP_ACTION_CALL && !(call = cli_strdup(id))) {
        x->m->oom = true;
        return 1;
    }
    if (!web_track(&x->t, path, type, call, marks_end, x)) {
        free(call);
        x->m->oom = true;
        return 1;
    }
    return 0;
}

int web_run_marks(web *w, const pl_run_info *ri, size_t max_steps, web_marks *m)
{
    memset(m, 0, sizeof *m);
    marks_walk x = {.m = m, .ri = ri, .max = max_steps};
    int st = pl_run_walk(w->engine, ri->id, marks_visit, &x);
    if (st > 0)
        st = PL_OK;
    web_track(&x.t, NULL, PL_STEP_TEXT, NULL, marks_end, &x);
    web_track_free(&x.t);
    if (!st && m->oom)
        st = PL_ENOMEM;
    return st;
}

const char *web_marks_find(const web_marks *m, const char *step_id)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->id[i], step_id))
            return m->mark[i];
    return NULL;
}

/* ---- a page of steps ------------------------------------------------------------- */

/* About the length of @p v as JSON, counted until it passes @p cap. */
static size_t json_size(const cJSON *v, size_t cap)
{
    size_t n = (v->string ? strlen(v->string) + 4 : 0) +
               (cJSON_IsString(v)   ? strlen(v->valuestring) + 2
                : cJSON_IsNumber(v) ? 24
                                    : 6);
    for (const cJSON *c = v->child; c && n <= cap; c = c->next)
        n += json_size(c, cap);
    return n;
}

typedef struct page {
    rows rs;
    size_t limit, bytes;
    bool whole; /* one step, its payload whole */
    bool more;  /* steps follow the page */
    char next[WEB_STEP_ID_MAX + 1];
    char **cut;   /* a payload's preview where it was cut, else NULL */
    size_t *size; /* its length as JSON, where it was cut */
} page;

static void page_free(page *p)
{
    for (size_t i = 0; p->cut && i < p->rs.n; i++)
        free(p->cut[i]);
    free(p->cut);
    free(p->size);
    rows_free(&p->rs);
}

static int page_visit(const pl_step *s, void *user)
{
    page *p = user;
    if (p->rs.n == p->limit || (p->rs.n && p->bytes >= WEB_PAGE_BYTES)) {
        snprintf(p->next, sizeof p->next, "%s", pl_step_id(s));
        p->more = true;
        return 1;
    }
    size_t i = p->rs.n;
    const cJSON *payload = pl_step_payload(s);
    size_t n = p->whole || !payload ? 0 : json_size(payload, WEB_PAYLOAD_CAP);
    if (!rows_add(&p->rs, s, n <= WEB_PAYLOAD_CAP))
        return 1;
    if (p->whole) {
        p->more = true; /* for the marks: maybe */
        return 1;
    }
    if (n <= WEB_PAYLOAD_CAP) {
        p->bytes += n;
        return 0;
    }
    /* too long for a page: its start, and its length (the payload is not
     * copied) */
    char *text = pl_json_print(payload, false);
    if (!text) {
        p->rs.oom = true;
        return 1;
    }
    n = strlen(text);
    size_t cut = n < WEB_PAYLOAD_PREVIEW ? n : WEB_PAYLOAD_PREVIEW;
    while (cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80)
        cut--; /* not inside a character */
    text[cut] = '\0';
    char *preview = cli_strdup(text);
    free(text);
    if (!preview) {
        p->rs.oom = true;
        return 1;
    }
    p->cut[i] = preview;
    p->size[i] = n;
    p->bytes += cut;
    return 0;
}

/* Looks past a page for the step that answers call (path, seq). */
typedef struct lookup {
    const char *path;
    bool answered;
} lookup;

static int lookup_visit(const pl_step *s, void *user)
{
    lookup *l = user;
    const char *id = pl_step_id(s);
    size_t n = strlen(l->path);
    if (strncmp(id, l->path, n) != 0 || id[n] != ':')
        return 1; /* the ledger ended: unanswered */
    pl_step_type t = pl_step_type_of(s);
    if (t == PL_STEP_SUSPEND || t == PL_STEP_RESUME)
        return 0;
    l->answered = true;
    return 1;
}

/* The mark of the page's step @p i in *mark.  A pl_status. */
static int page_mark(web *w, const pl_run_info *ri, const page *p, size_t i,
                     const char **mark)
{
    const srow *s = &p->rs.v[i];
    call_mark cm = p->more ? MARK_NONE : call_mark_of(&p->rs, i, ri);
    if (p->more && s->type == PL_STEP_ACTION_CALL &&
        call_mark_of(&p->rs, i, ri) != MARK_NONE) {
        /* nothing on the page answers it: look after the page */
        lookup l = {s->path, false};
        char from[WEB_STEP_ID_MAX + 16];
        snprintf(from, sizeof from, "%s:%u", s->path, s->seq + 1);
        int st = pl_run_walk_from(w->engine, ri->id, from, lookup_visit, &l);
        if (st < 0)
            return st;
        if (!l.answered)
            cm = call_mark_unanswered(s->path, s->seq, ri);
    }
    *mark = mark_text(cm, s, ri);
    return PL_OK;
}

/* A page of run @p ri's steps from @p cursor (NULL: the first) into @p doc:
 * steps, next, limit, payload_cap.  The HTTP status; on failure a reply
 * in *out. */
static int page_into(web *w, const pl_run_info *ri, const char *cursor,
                     size_t limit, cJSON *doc, cJSON **out)
{
    page p = {.limit = limit,
              .cut = calloc(limit, sizeof(char *)),
              .size = calloc(limit, sizeof(size_t))};
    int st = p.cut && p.size
                 ? pl_run_walk_from(w->engine, ri->id, cursor, page_visit, &p)
                 : PL_ENOMEM;
    if (st > 0 || (st == 0 && p.rs.oom))
        st = p.rs.oom ? PL_ENOMEM : PL_OK;
    /* a cursor names a step the page starts at: one the run has not (a
     * stale or made-up cursor) is refused, not answered with no steps */
    if (!st && cursor && (!p.rs.n || strcmp(p.rs.v[0].id, cursor) != 0)) {
        page_free(&p);
        return web_fail(out, 400, "bad_cursor", "cursor: run %s has no step %s",
                        QUOTE(ri->id), cursor);
    }
    cJSON *steps = st ? NULL : cJSON_AddArrayToObject(doc, "steps");
    if (!st && !steps)
        st = PL_ENOMEM;
    for (size_t i = 0; !st && i < p.rs.n; i++) {
        const char *mark = NULL;
        cJSON *j = NULL;
        if (!(st = page_mark(w, ri, &p, i, &mark)) &&
            !(j = row_json(ri->id, &p.rs.v[i], mark)))
            st = PL_ENOMEM;
        if (j && p.cut[i]) {
            cJSON_AddBoolToObject(j, "payload_truncated", true);
            cJSON_AddNumberToObject(j, "payload_bytes", (double)p.size[i]);
            cJSON_AddStringToObject(j, "payload_preview", p.cut[i]);
        }
        if (j)
            cJSON_AddItemToArray(steps, j);
    }
    if (!st) {
        if (p.more)
            cJSON_AddStringToObject(doc, "next", p.next);
        else
            cJSON_AddNullToObject(doc, "next");
        cJSON_AddNumberToObject(doc, "limit", (double)limit);
        cJSON_AddNumberToObject(doc, "payload_cap", WEB_PAYLOAD_CAP);
    }
    page_free(&p);
    if (st == PL_EINVAL)
        return web_fail(out, 400, "bad_cursor", "%s", pl_errmsg());
    return st ? web_fail_status(out, st, "reading the run's steps") : 200;
}

int web_first_page(web *w, const pl_run_info *ri, cJSON *doc, cJSON **out)
{
    return page_into(w, ri, NULL, WEB_STEP_PAGE_DEFAULT, doc, out);
}

/* A step id as the API takes it: "path:seq" of digits, dots and a colon. */
static bool step_id_ok(const char *s)
{
    size_t n = strlen(s);
    return n >= 3 && n <= WEB_STEP_ID_MAX && strspn(s, "0123456789.:") == n &&
           strchr(s, ':');
}

/* A 404 for deleted run @p id, with what its tombstone says; false when
 * it has none. */
static bool deleted(web *w, const char *id, cJSON **out)
{
    pl_tombstone t = PL_TOMBSTONE_INIT;
    if (pl_run_tombstone(&t, w->engine, id))
        return false;
    char del[40], exp[40], created[40], head[2 * PL_HASH_LEN + 1] = "";
    cli_time_iso(del, sizeof del, t.deleted_us, false);
    cli_time_iso(exp, sizeof exp, t.expires_us, false);
    cli_time_iso(created, sizeof created, t.created_us, false);
    if (t.has_head)
        cli_hex(head, t.head, PL_HASH_LEN);
    const char *status = pl_run_status_name(t.status);
    web_fail(out, 404, "deleted",
             "run %s was deleted on %s: it was %s; its tombstone keeps the "
             "id until %s",
             QUOTE(id), del, status ? status : "?", exp);
    cJSON *j = *out ? cJSON_AddObjectToObject(*out, "tombstone") : NULL;
    if (j) {
        cJSON_AddStringToObject(j, "run_id", id);
        cJSON_AddStringToObject(j, "status", status ? status : "?");
        cJSON_AddStringToObject(j, "root_policy", t.policy);
        cJSON_AddStringToObject(j, "created", created);
        cli_json_add_int(j, "created_us", t.created_us);
        cJSON_AddStringToObject(j, "deleted", del);
        cli_json_add_int(j, "deleted_us", t.deleted_us);
        cJSON_AddStringToObject(j, "expires", exp);
        cli_json_add_int(j, "expires_us", t.expires_us);
        if (t.has_head)
            cJSON_AddStringToObject(j, "head", head);
        else
            cJSON_AddNullToObject(j, "head");
    }
    return true;
}

int web_get_run(web *w, const char *id, pl_run_info **ri, cJSON **out)
{
    int st = pl_run_get(ri, w->engine, id);
    if (st == PL_ENOTFOUND && deleted(w, id, out))
        return 404;
    if (st == PL_ENOTFOUND)
        return web_fail(out, 404, "not_found", "no run %s in the store",
                        QUOTE(id));
    return st ? web_fail_status(out, st, "reading the run") : 200;
}

int api_steps(web *w, const char *id, const web_req *r, cJSON **out)
{
    const char *cursor = web_arg(r, "cursor");
    const char *lim = web_arg(r, "limit");
    if (cursor && !*cursor) /* empty: not given, as for every parameter */
        cursor = NULL;
    if (lim && !*lim)
        lim = NULL;
    if (cursor && !step_id_ok(cursor))
        return web_fail(out, 400, "bad_cursor",
                        "cursor: a step id as \"next\" gives it (\"0:200\")");
    size_t limit = WEB_STEP_PAGE_DEFAULT;
    if (lim) {
        char *end;
        unsigned long v = strtoul(lim, &end, 10);
        if (*lim < '0' || *lim > '9' || *end || v < 1 || v > WEB_STEP_PAGE_MAX)
            return web_fail(out, 400, "bad_limit", "limit: 1..%d",
                            WEB_STEP_PAGE_MAX);
        limit = v;
    }
    pl_run_info *ri = NULL;
    int http = web_get_run(w, id, &ri, out);
    if (http != 200)
        return http;
    cJSON *doc = cJSON_CreateObject();
    if (!doc || !cJSON_AddStringToObject(doc, "run", ri->id))
        http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
    else
        http = page_into(w, ri, cursor, limit, doc, out);
    pl_run_info_free(ri);
    if (http != 200) {
        cJSON_Delete(doc);
        return http;
    }
    *out = doc;
    return 200;
}

int api_step(web *w, const char *id, const web_req *r, cJSON **out)
{
    const char *sid = web_arg(r, "id");
    if (!sid || !step_id_ok(sid))
        return web_fail(out, 400, "bad_step",
                        "id: a step id, \"path:seq\" (\"0.3:1\")");
    pl_run_info *ri = NULL;
    int http = web_get_run(w, id, &ri, out);
    if (http != 200)
        return http;
    page p = {.limit = 1,
              .whole = true,
              .cut = calloc(1, sizeof(char *)),
              .size = calloc(1, sizeof(size_t))};
    int st = p.cut && p.size
                 ? pl_run_walk_from(w->engine, id, sid, page_visit, &p)
                 : PL_ENOMEM;
    if (st > 0 || (st == 0 && p.rs.oom))
        st = p.rs.oom ? PL_ENOMEM : PL_OK;
    const char *mark = NULL;
    cJSON *doc = NULL, *j = NULL;
    if (st == PL_EINVAL)
        http = web_fail(out, 400, "bad_step", "%s", pl_errmsg());
    else if (st)
        http = web_fail_status(out, st, "reading the step");
    else if (!p.rs.n || strcmp(p.rs.v[0].id, sid) != 0)
        http = web_fail(out, 404, "not_found", "run %s has no step %s",
                        QUOTE(id), sid);
    else if ((st = page_mark(w, ri, &p, 0, &mark)))
        http = web_fail_status(out, st, "reading the run's steps");
    else if (!(doc = cJSON_CreateObject()) ||
             !(j = row_json(ri->id, &p.rs.v[0], mark)))
        http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
    else
        cJSON_AddItemToObject(doc, "step", j);
    if (http != 200)
        cJSON_Delete(doc);
    else
        *out = doc;
    page_free(&p);
    pl_run_info_free(ri);
    return http;
}
