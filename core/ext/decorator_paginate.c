/*
 * decorator_paginate.c -- paginate: read every page of a tool whose result
 * carries a continuation, each page a recorded call of its own.
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be; only the reading of its options' version is
 * the library's own (util.h).
 *
 * The decorator runs in the call's invocation and ends its chain: instead
 * of running the rest of the chain it calls the same policy once per page
 * (pl_ctx_call(), wrapped by the options' per-page decorators), the first
 * page with the call's payload, each later one with the continuation the
 * page before returned put into that payload.  So the invocation's ledger
 * reads
 *
 *   step            by         payload
 *   action_call     paginate   page 1's request
 *   action_result   the tool   page 1's result
 *   action_call     paginate   page 2's request (the continuation in it)
 *   ...
 *   action_result   paginate   the merged result (below)
 *
 * and a replay serves every page from it: a run that crashed after page 7
 * continues with page 8.  A first page without a continuation (or an error)
 * is passed on as it is, so the decorator may wrap tools that do not
 * paginate.  Otherwise the merged result is the first page's result with
 * the items of every page read in its items array (or, with no items
 * pointer, {"results": [each page's result]}), without the continuation,
 * and a member "pagination" that says how many pages were read and merged,
 * whether it stopped early and why: never a silent cut.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

#include "ext.h"

#define DEFAULT_MAX_PAGES 100
#define DEFAULT_MAX_BYTES 512000

/* ---- JSON pointers (RFC 6901) ------------------------------------------- */

/* The next reference token of @p p (after its '/') into @p tok, unescaped;
 * *p moves past it.  false when the token is too long or badly escaped. */
static bool next_token(const char **p, char *tok, size_t cap)
{
    const char *s = *p + 1; /* past the '/' */
    size_t n = 0;
    for (; *s && *s != '/'; s++) {
        char c = *s;
        if (c == '~') {
            if (s[1] == '0')
                c = '~';
            else if (s[1] == '1')
                c = '/';
            else
                return false;
            s++;
        }
        if (n + 1 >= cap)
            return false;
        tok[n++] = c;
    }
    tok[n] = '\0';
    *p = s;
    return true;
}

/* Is @p ptr a pointer this decorator takes: "/a", "/a/b", ... */
static bool pointer_ok(const char *ptr)
{
    char tok[256];
    if (!ptr || ptr[0] != '/')
        return false;
    for (const char *p = ptr; *p;)
        if (!next_token(&p, tok, sizeof tok))
            return false;
    return true;
}

/* The member of object @p o (or item of array @p o) named @p tok. */
static cJSON *child(const cJSON *o, const char *tok)
{
    if (cJSON_IsObject(o))
        return cJSON_GetObjectItemCaseSensitive(o, tok);
    size_t n = strlen(tok);
    if (!cJSON_IsArray(o) || !n || n > 9 || strspn(tok, "0123456789") != n)
        return NULL;
    return cJSON_GetArrayItem(o, (int)strtol(tok, NULL, 10)); /* < 10^9 */
}

/* The value @p ptr names in @p doc, or NULL. */
static cJSON *pointer_get(const cJSON *doc, const char *ptr)
{
    char tok[256];
    const cJSON *v = doc;
    for (const char *p = ptr; v && *p;) {
        if (!next_token(&p, tok, sizeof tok))
            return NULL;
        v = child(v, tok);
    }
    return (cJSON *)v;
}

/* Put @p value (taken over) at @p ptr in the object @p doc, making the
 * objects on the way; an array's item on the way (or at the end: replaced)
 * must be there.  false when something on the way is neither, or out of
 * memory (value freed either way). */
static bool pointer_set(cJSON *doc, const char *ptr, cJSON *value)
{
    char tok[256];
    cJSON *o = doc;
    for (const char *p = ptr;;) {
        if (!(cJSON_IsObject(o) || cJSON_IsArray(o)) ||
            !next_token(&p, tok, sizeof tok))
            break;
        cJSON *c = child(o, tok);
        if (cJSON_IsArray(o) && !c)
            break;
        if (!*p) {
            if (cJSON_IsArray(o)) {
                if (cJSON_ReplaceItemViaPointer(o, c, value))
                    return true;
                break;
            }
            cJSON_DeleteItemFromObjectCaseSensitive(o, tok);
            return cJSON_AddItemToObject(o, tok, value);
        }
        if (!c && !(c = cJSON_AddObjectToObject(o, tok)))
            break;
        o = c;
    }
    cJSON_Delete(value);
    return false;
}

/* Remove what @p ptr names from @p doc, if anything. */
static void pointer_remove(cJSON *doc, const char *ptr)
{
    const char *slash = strrchr(ptr, '/');
    char tok[256];
    char parent[1024];
    size_t plen = (size_t)(slash - ptr);
    if (plen >= sizeof parent)
        return;
    memcpy(parent, ptr, plen);
    parent[plen] = '\0';
    cJSON *o = plen ? pointer_get(doc, parent) : doc;
    const char *p = slash;
    if (cJSON_IsObject(o) && next_token(&p, tok, sizeof tok))
        cJSON_DeleteItemFromObjectCaseSensitive(o, tok);
}

/* ---- options ------------------------------------------------------------- */

static const char *check_options(const pl_paginate_options *o)
{
    if (!pointer_ok(o->next))
        return "next is not a JSON pointer such as \"/next_token\"";
    if (o->param && !pointer_ok(o->param))
        return "param is not a JSON pointer such as \"/page_token\"";
    if (o->items && !pointer_ok(o->items))
        return "items is not a JSON pointer such as \"/results\"";
    if (o->n_per_page && !o->per_page)
        return "n_per_page without per_page";
    return NULL;
}

/* Read @p in (NULL: the defaults) into @p o, at the current version, and
 * check it: PL_OK, or PL_EINVAL with a message that starts with @p fn. */
static int read_options(pl_paginate_options *o, const pl_paginate_options *in,
                        const char *fn)
{
    PL__EXT_ONE_VERSION(PL_PAGINATE_OPTIONS);
    const pl_paginate_options def = PL_PAGINATE_OPTIONS_INIT;
    if (in && PL__EXT_VERSION_OK(in->version, pl_paginate_options,
                                 PL_PAGINATE_OPTIONS, fn))
        return PL_EINVAL;
    *o = in ? *in : def;
    const char *bad = check_options(o);
    if (bad)
        return pl_errorf(PL_EINVAL, "%s: %s", fn, bad);
    char where[64];
    snprintf(where, sizeof where, "%s: per-page", fn);
    return pl__ext_decorators_ok(o->per_page, o->n_per_page, where);
}

/* A continuation: anything but a missing member, null, false or "". */
static const cJSON *continuation(const cJSON *result, const char *ptr)
{
    const cJSON *v = pointer_get(result, ptr);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v) ||
        (cJSON_IsString(v) && !v->valuestring[0]))
        return NULL;
    return v;
}

static size_t json_bytes(const cJSON *v, bool *oom)
{
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        *oom = true;
        return 0;
    }
    size_t n = strlen(t);
    free(t);
    return n;
}

/* ---- the decorator ------------------------------------------------------- */

/* What the pages read so far add up to. */
typedef struct merge {
    cJSON *base;   /* the first page's result (a copy), items emptied */
    cJSON *items;  /* its items array, or the "results" array */
    unsigned read; /* pages read */
    unsigned merged;
    size_t bytes; /* compact JSON bytes of what was merged */
} merge;

/* Merge @p page (a result) into @p m; *fits false when it would pass
 * @p max_bytes (nothing merged), *malformed when its items are not an
 * array. */
static int merge_page(merge *m, const cJSON *page, const char *items_ptr,
                      size_t max_bytes, bool *fits, bool *malformed)
{
    bool oom = false;
    *fits = true;
    *malformed = false;
    const cJSON *src = items_ptr ? pointer_get(page, items_ptr) : page;
    if (items_ptr && src && !cJSON_IsArray(src)) {
        *malformed = true;
        return PL_OK;
    }
    size_t n = src ? json_bytes(src, &oom) : 0;
    if (oom)
        return pl_errorf(PL_ENOMEM, "paginate: out of memory");
    if (m->merged > 0 && m->bytes + n > max_bytes) {
        *fits = false;
        return PL_OK;
    }
    if (items_ptr) {
        const cJSON *it;
        cJSON_ArrayForEach(it, src)
        {
            cJSON *c = cJSON_Duplicate(it, true);
            if (!c || !cJSON_AddItemToArray(m->items, c)) {
                cJSON_Delete(c);
                return pl_errorf(PL_ENOMEM, "paginate: out of memory");
            }
        }
    } else {
        cJSON *c = cJSON_Duplicate(page, true);
        if (!c || !cJSON_AddItemToArray(m->items, c)) {
            cJSON_Delete(c);
            return pl_errorf(PL_ENOMEM, "paginate: out of memory");
        }
    }
    m->merged++;
    m->bytes += n;
    return PL_OK;
}

/* Start the merge from the first page. */
static int merge_start(merge *m, const cJSON *first, const char *next_ptr,
                       const char *items_ptr)
{
    memset(m, 0, sizeof *m);
    if (items_ptr) {
        m->base = cJSON_Duplicate(first, true);
        if (!m->base)
            return pl_errorf(PL_ENOMEM, "paginate: out of memory");
        pointer_remove(m->base, next_ptr);
        m->items = cJSON_CreateArray();
        if (!m->items)
            return pl_errorf(PL_ENOMEM, "paginate: out of memory");
        /* the merged items go where the first page had its own */
        if (!pointer_set(m->base, items_ptr, m->items)) {
            m->items = NULL;
            return pl_errorf(PL_ENOMEM, "paginate: cannot put the items at "
                                        "the items pointer");
        }
        return PL_OK;
    }
    m->base = cJSON_CreateObject();
    m->items = m->base ? cJSON_AddArrayToObject(m->base, "results") : NULL;
    return m->items ? PL_OK : pl_errorf(PL_ENOMEM, "paginate: out of memory");
}

/* The request of the page after one whose continuation is @p next. */
static int page_payload(cJSON **out, const cJSON *first_payload,
                        const char *param, const cJSON *next)
{
    *out = cJSON_Duplicate(first_payload, true);
    cJSON *v = cJSON_Duplicate(next, true);
    if (!*out || !v) {
        cJSON_Delete(v);
        return pl_errorf(PL_ENOMEM, "paginate: out of memory");
    }
    if (!pointer_set(*out, param, v))
        return pl_errorf(PL_EJSON,
                         "paginate: the continuation cannot go at %s in the "
                         "request (something on the way is not an object)",
                         param);
    return PL_OK;
}

static int add_pagination(cJSON *base, const merge *m, const char *stopped,
                          const cJSON *next, const cJSON *error,
                          const pl_paginate_options *o, unsigned max_pages,
                          size_t max_bytes)
{
    bool complete = strcmp(stopped, "end") == 0;
    char note[320];
    note[0] = '\0';
    if (!complete)
        snprintf(note, sizeof note,
                 "incomplete: %u of the pages read %s merged, stopped "
                 "(%s) with more to read; call again with %s set to "
                 "\"next\" to go on",
                 m->merged, m->merged == 1 ? "is" : "are", stopped,
                 o->param ? o->param : o->next);
    cJSON *p = NULL;
    int st = pl_json_pack(&p,
                          "{s:i, s:i, s:b, s:s, s:I, s:i, s:I, s:O*, "
                          "s:s*, s:O*}",
                          "pages", (int)m->read, "merged", (int)m->merged,
                          "complete", complete, "stopped", stopped, "bytes",
                          (int64_t)m->bytes, "max_pages", (int)max_pages,
                          "max_bytes", (int64_t)max_bytes, "next",
                          complete ? NULL : next, "note",
                          complete ? NULL : note, "error", error);
    if (st)
        return st;
    cJSON_DeleteItemFromObjectCaseSensitive(base, "pagination");
    if (!cJSON_AddItemToObject(base, "pagination", p)) {
        cJSON_Delete(p);
        return pl_errorf(PL_ENOMEM, "paginate: out of memory");
    }
    return PL_OK;
}

/* The page that @p cont asked for already in this call (1-based), or 0. */
static unsigned asked_before(const cJSON *seen, const cJSON *cont)
{
    unsigned k = 1;
    for (const cJSON *it = seen->child; it; it = it->next, k++)
        if (cJSON_Compare(it, cont, true))
            return k;
    return 0;
}

/* The error of a continuation @p cont that page @p page returned and that
 * asked for page @p again before. */
static int loop_error(cJSON **err, const cJSON *cont, unsigned page,
                      unsigned again)
{
    char *text = cJSON_PrintUnformatted(cont);
    if (!text)
        return pl_errorf(PL_ENOMEM, "paginate: out of memory");
    char why[400];
    size_t len = strlen(text), n = len;
    if (n > 200) /* cut at a character */
        for (n = 200; n && ((unsigned char)text[n] & 0xC0) == 0x80; n--)
            ;
    snprintf(why, sizeof why,
             "page %u returned the continuation %.*s%s, which asked for "
             "page %u already: the tool pages in a loop",
             page, (int)n, text, n < len ? "..." : "", again);
    free(text);
    return pl_json_pack(err, "{s:b, s:s, s:s}", "error", true, "code",
                        PL_ERR_TOOL_BUG, "message", why);
}

static int paginate_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                       const pl_decorator *self, pl_next *next)
{
    (void)next; /* the pages are calls of their own: the chain ends here */
    pl_paginate_options current;
    if (read_options(&current, self->user, "paginate"))
        return PL_EINVAL;
    const pl_paginate_options *o = &current;
    unsigned max_pages = o->max_pages ? o->max_pages : DEFAULT_MAX_PAGES;
    size_t max_bytes = o->max_bytes ? o->max_bytes : DEFAULT_MAX_BYTES;
    const char *param = o->param ? o->param : o->next;

    pl_action page = *action;
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &page, o->per_page, o->n_per_page);
    if (st && st != PL_ERESULT) { /* an error result is passed on below */
        pl_step_free(res);
        return st;
    }
    const cJSON *first = pl_step_payload(res);
    if (!first) {
        pl_step_free(res);
        return pl_errorf(PL_ENOMEM, "paginate: out of memory");
    }
    const cJSON *items = o->items ? pointer_get(first, o->items) : NULL;
    if (pl_step_is_error(res) || !continuation(first, o->next) ||
        (items && !cJSON_IsArray(items)))
        return pl_steps_push(out, res); /* one page: passed on as it is */

    merge m;
    /* seen: item k the continuation that asked for page k + 1 (null for
     * a first page asked with none) */
    cJSON *payload = NULL, *seen = cJSON_CreateArray(), *err = NULL;
    const char *stopped = "end";
    bool fits = true, malformed = false;
    if (!(st = merge_start(&m, first, o->next, o->items)))
        st = merge_page(&m, first, o->items, max_bytes, &fits, &malformed);
    m.read = 1;
    /* the continuation of the last page merged, a copy */
    cJSON *cont = st ? NULL
                     : cJSON_Duplicate(continuation(first, o->next), true);
    pl_step_free(res);
    res = NULL;
    if (!st && (!cont || !seen))
        st = pl_errorf(PL_ENOMEM, "paginate: out of memory");
    /* the continuation that asked for the first page: the call's own, when
     * its request carries one (a caller going on from an earlier "next") */
    const cJSON *asked = continuation(action->payload, param);
    if (!st && !cJSON_AddItemToArray(seen, asked ? cJSON_Duplicate(asked, true)
                                                 : cJSON_CreateNull()))
        st = pl_errorf(PL_ENOMEM, "paginate: out of memory");
    while (!st && cont) {
        if (m.read >= max_pages) {
            stopped = "page_limit";
            break;
        }
        if (m.bytes >= max_bytes) {
            stopped = "byte_cap";
            break;
        }
        unsigned again = asked_before(seen, cont);
        if (again) {
            /* a tool paging in a loop (A -> B -> A) would be read to the
             * page limit, its pages merged over and over */
            stopped = "repeated_continuation";
            st = loop_error(&err, cont, m.read, again);
            break;
        }
        cJSON_Delete(payload);
        payload = NULL;
        if ((st = page_payload(&payload, action->payload, param, cont))) {
            /* the request (a model's arguments) has no room for it: the
             * reading ends as at a failed page, the run goes on */
            if (st == PL_EJSON) {
                char why[300];
                snprintf(why, sizeof why, "%s", pl_errmsg());
                stopped = "error";
                st = pl_json_pack(&err, "{s:b, s:s, s:s}", "error", true,
                                  "code", PL_ERR_INVALID_INPUT, "message", why);
            }
            break;
        }
        page.payload = payload;
        st = pl_ctx_call(&res, ctx, &page, o->per_page, o->n_per_page);
        if (st == PL_ERESULT) /* an error page ends the merge, below */
            st = PL_OK;
        if (st)
            break;
        m.read++;
        const cJSON *r = pl_step_payload(res);
        if (!r) {
            st = pl_errorf(PL_ENOMEM, "paginate: out of memory");
            break;
        }
        if (pl_step_is_error(res)) {
            stopped = "error";
            if (!(err = cJSON_Duplicate(r, true)))
                st = pl_errorf(PL_ENOMEM, "paginate: out of memory");
            break;
        }
        if ((st = merge_page(&m, r, o->items, max_bytes, &fits, &malformed)))
            break;
        if (malformed) {
            stopped = "malformed_page";
            break;
        }
        if (!fits) {
            stopped = "byte_cap";
            break;
        }
        /* the page is merged: its continuation is the next one */
        cJSON_AddItemToArray(seen, cont); /* cannot fail: an array */
        cont = NULL;
        const cJSON *c = continuation(r, o->next);
        if (c && !(cont = cJSON_Duplicate(c, true)))
            st = pl_errorf(PL_ENOMEM, "paginate: out of memory");
        pl_step_free(res);
        res = NULL;
    }
    /* "next" (cont) is what reads the first page not merged */
    if (!st)
        st = add_pagination(m.base, &m, stopped, cont, err, o, max_pages,
                            max_bytes);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ACTION_RESULT, "paginate", m.base);
    pl_step_free(res);
    cJSON_Delete(m.base);
    cJSON_Delete(payload);
    cJSON_Delete(seen);
    cJSON_Delete(cont);
    cJSON_Delete(err);
    return st;
}

int pl_decorator_paginate(pl_decorator *out, const pl_paginate_options *opts)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_paginate: out is NULL");
    pl_paginate_options current;
    if (read_options(&current, opts, "pl_decorator_paginate"))
        return PL_EINVAL;
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = paginate_fn;
    d.name = "paginate";
    d.user = (void *)opts;
    *out = d;
    return PL_OK;
}
