/*
 * json.c -- build and read small JSON values from a format string:
 * pl_json_pack() and pl_json_unpack(), after jansson's json_pack() and
 * json_unpack().
 *
 * THE FORMAT
 *
 *   One value, described by the letters below.  Whitespace, ':' and ',' are
 *   ignored anywhere between letters, so "{s:i, s:[ii]}" reads as "{si s[ii]}".
 *
 *   letter  pack: argument            unpack: argument     unpack: accepts
 *   ------  ------------------------  -------------------  -----------------
 *   {...}   (none)                    (none)               an object
 *   [...]   (none)                    (none)               an array
 *   s       const char * (copied)     const char **        a string
 *   n       (none)                    (none)               null
 *   b       int (non-zero is true)    bool *               true or false
 *   i       int                       int *                an integral
 *                                                          number in int
 *   I       int64_t, |v| <= 2^53      int64_t *            an integral
 *                                                          number, |v| <= 2^53
 *   f       double, finite            double *             a number
 *   o       cJSON * (taken over)      const cJSON **       anything
 *                                                          (borrowed)
 *   O       const cJSON * (copied)    cJSON ** (a copy)    anything
 *
 *   Inside {...} each member is a key, the letter 's' (its argument a
 *   const char *), then a value.  Modifiers:
 *
 *   pack    s? o? O?  a NULL argument gives null
 *           s* o* O*  a NULL argument gives nothing: no array item, no
 *                     member (its key is dropped); only inside {...} or [...]
 *   unpack  {s?...}   an optional key: when it is missing, the value's
 *                     arguments are read but nothing is stored
 *           !         right before } or ]: strict, no member or item the
 *                     format does not read may be present
 *           *         right before } or ]: not strict (the default)
 *
 *   A format nests at most PL_MAX_JSON_DEPTH containers deep.
 *
 * HOW A CALL GOES
 *
 *   check_format() first reads the format alone, so a malformed one fails
 *   (PL_EINVAL, or PL_ELIMIT when too deep) before any argument is read.  The
 *   walk that reads the arguments may then assume a well-formed format.
 *
 *   Pack walks the whole format even after a failure: it keeps reading
 *   arguments, building nothing, so that every 'o' argument is freed and
 *   ownership never depends on where the failure was.  Unpack stops at its
 *   first failure, then frees what its 'O' letters had copied.
 *
 *   A failure's message names the value's path, "$" for the whole value,
 *   ".key" or ["key"] for a member, "[i]" for an array item.  The path is
 *   kept as a stack of keys and indexes and written out only on failure.
 */
#include <assert.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

/* Room for one more element in a doubling array of @p n elements of @p size
 * bytes: @p items while n < *cap, else the array reallocated (first to
 * @p first elements) and *cap updated; NULL when out of memory. */
static void *grow(void *items, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return items;
    size_t next = *cap ? *cap * 2 : first;
    if (next < *cap || next > SIZE_MAX / size)
        return NULL;
    void *p = realloc(items, next * size);
    if (p)
        *cap = next;
    return p;
}

/* 2^53: integers up to this magnitude are exact in a double. */
#define EXACT_INT_MAX (INT64_C(1) << 53)

/* ---- reading the format -------------------------------------------------- */

typedef struct scan {
    const char *fmt;  /* the whole format, for messages */
    const char *p;    /* the next character */
    const char *verb; /* "pack" or "unpack", for messages */
} scan;

static bool ignorable(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v' || c == ':' || c == ',';
}

/* The next significant character, left in place; '\0' at the end. */
static char tok_peek(scan *s)
{
    while (ignorable(*s->p))
        s->p++;
    return *s->p;
}

/* The next significant character, consumed; '\0' at the end. */
static char tok_next(scan *s)
{
    char c = tok_peek(s);
    if (c)
        s->p++;
    return c;
}

/* The character at s->p, shown printably, for a message. */
static const char *shown(const scan *s, char buf[8])
{
    unsigned char c = (unsigned char)*s->p;
    if (c == '\0')
        snprintf(buf, 8, "the end");
    else if (c >= 0x20 && c < 0x7f)
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "0x%02x", c);
    return buf;
}

/* A failure of the format at s->p. */
static int fmt_err(const scan *s, int status, const char *fmt, ...)
    PL__EXT_PRINTF(3, 4);
static int fmt_err(const scan *s, int status, const char *fmt, ...)
{
    char why[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return pl_errorf(status, "%s: format \"%s\", offset %zu: %s", s->verb,
                     s->fmt, (size_t)(s->p - s->fmt), why);
}

static int check_value(scan *s, bool unpack, int depth, bool in_container);

/* The members or items of a container whose opening character was read. */
static int check_container(scan *s, bool unpack, int depth, char open)
{
    char close = open == '{' ? '}' : ']';
    char buf[8];
    for (;;) {
        char c = tok_peek(s);
        if (c == close) {
            s->p++;
            return PL_OK;
        }
        if (c == '\0')
            return fmt_err(s, PL_EINVAL, "unclosed '%c'", open);
        if (c == '}' || c == ']')
            return fmt_err(s, PL_EINVAL, "'%c' does not close the '%c'", c,
                           open);
        if (unpack && (c == '!' || c == '*')) {
            s->p++;
            if (tok_peek(s) != close)
                return fmt_err(s, PL_EINVAL,
                               "expected '%c' after '%c', "
                               "got %s",
                               close, c, shown(s, buf));
            continue;
        }
        if (open == '{') {
            if (c != 's')
                return fmt_err(s, PL_EINVAL,
                               "expected a key ('s') or '}', "
                               "got %s",
                               shown(s, buf));
            s->p++;
            if (unpack && tok_peek(s) == '?')
                s->p++;
        }
        int rc = check_value(s, unpack, depth, true);
        if (rc)
            return rc;
    }
}

/* One value.  @p depth counts the containers around it. */
static int check_value(scan *s, bool unpack, int depth, bool in_container)
{
    char buf[8];
    char c = tok_peek(s);
    switch (c) {
    case '{':
    case '[':
        if (depth >= PL_MAX_JSON_DEPTH)
            return fmt_err(s, PL_ELIMIT,
                           "'%c' nests deeper than "
                           "PL_MAX_JSON_DEPTH (%d)",
                           c, PL_MAX_JSON_DEPTH);
        s->p++;
        return check_container(s, unpack, depth + 1, c);
    case 's':
    case 'o':
    case 'O':
        s->p++;
        if (unpack)
            return PL_OK;
        c = tok_peek(s);
        if (c == '*' && !in_container)
            return fmt_err(s, PL_EINVAL,
                           "'*' is only allowed inside an "
                           "object or array");
        if (c == '?' || c == '*')
            s->p++;
        return PL_OK;
    case 'n':
    case 'b':
    case 'i':
    case 'I':
    case 'f': s->p++; return PL_OK;
    default:
        return fmt_err(s, PL_EINVAL, "expected a value, got %s", shown(s, buf));
    }
}

/* PL_OK when @p fmt is exactly one well-formed value; else a message. */
static int check_format(const char *fmt, const char *verb, bool unpack)
{
    scan s = {fmt, fmt, verb};
    char buf[8];
    int rc = check_value(&s, unpack, 0, false);
    if (!rc && tok_peek(&s) != '\0')
        rc = fmt_err(&s, PL_EINVAL, "%s after the value", shown(&s, buf));
    return rc;
}

/* ---- the walk and its path ----------------------------------------------- */

/* One step of a path: a member's key, or (key NULL) an item's index. */
typedef struct seg {
    const char *key;
    size_t index;
} seg;

/* A copy that 'O' made: freed, and its variable cleared, on failure. */
typedef struct copied {
    cJSON **var;
    cJSON *copy;
} copied;

typedef struct walk {
    scan s;
    va_list ap;
    int rc;       /* the first failure, PL_OK until then */
    size_t depth; /* segments in path */
    seg path[PL_MAX_JSON_DEPTH];
    copied *dups; /* unpack: the copies 'O' made */
    size_t n_dups, cap_dups;
} walk;

/* A bounded string: what does not fit is cut. */
typedef struct text {
    char *buf;
    size_t size, len; /* len < size */
    bool cut;
} text;

static void put(text *t, const char *p, size_t n)
{
    size_t room = t->size - 1 - t->len;
    if (n > room) {
        n = room;
        t->cut = true;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static bool identifier(const char *k)
{
    if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
        return false;
    for (k++; *k; k++)
        if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') ||
              (*k >= '0' && *k <= '9') || *k == '_'))
            return false;
    return true;
}

/* The path to the current value: $, $.a, $.a[2], $["b c"], ... */
static void path_text(const walk *w, char *buf, size_t size)
{
    text t = {buf, size, 0, false};
    buf[0] = '\0';
    put(&t, "$", 1);
    for (size_t i = 0; i < w->depth; i++) {
        const seg *g = &w->path[i];
        char num[32];
        if (!g->key) {
            int n = snprintf(num, sizeof num, "[%zu]", g->index);
            put(&t, num, (size_t)n);
        } else if (identifier(g->key)) {
            put(&t, ".", 1);
            put(&t, g->key, strlen(g->key));
        } else {
            put(&t, "[\"", 2);
            for (const char *k = g->key; *k; k++) {
                if (*k == '"' || *k == '\\') {
                    put(&t, "\\", 1);
                    put(&t, k, 1);
                } else if ((unsigned char)*k < 0x20) {
                    int n = snprintf(num, sizeof num, "\\u%04x",
                                     (unsigned)(unsigned char)*k);
                    put(&t, num, (size_t)n);
                } else {
                    put(&t, k, 1);
                }
            }
            put(&t, "\"]", 2);
        }
    }
    if (t.cut && size > 4)
        memcpy(buf + size - 4, "...", 4);
}

/* Record the walk's first failure, at the current path, and return it.  A
 * later failure keeps the first one's status and message. */
static int fail(walk *w, int status, const char *fmt, ...) PL__EXT_PRINTF(3, 4);
static int fail(walk *w, int status, const char *fmt, ...)
{
    if (w->rc)
        return w->rc;
    char path[384], why[256];
    path_text(w, path, sizeof path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    w->rc = status;
    return pl_errorf(status, "%s: %s: %s", w->s.verb, path, why);
}

/* Enter a member or item: the path of the values read until leave(). */
static void enter(walk *w, size_t level, const char *key, size_t index)
{
    assert(level < PL_MAX_JSON_DEPTH);
    w->path[level].key = key;
    w->path[level].index = index;
    w->depth = level + 1;
}

static void leave(walk *w, size_t level) { w->depth = level; }

/* A number as cJSON would print it: the shortest of %.15g and %.17g that
 * reads back the same. */
static void number_text(double d, char out[32])
{
    snprintf(out, 32, "%.15g", d);
    if (isfinite(d) && strtod(out, NULL) != d)
        snprintf(out, 32, "%.17g", d);
}

const char *pl__json_type_name(const cJSON *v)
{
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsRaw(v))
        return "raw JSON";
    return "an invalid value";
}

/* ---- pack ---------------------------------------------------------------- */

static cJSON *pack_value(walk *w, bool *omitted);

/* Add @p v under @p key, replacing a member of that key. */
static bool object_set(cJSON *obj, const char *key, cJSON *v)
{
    if (cJSON_GetObjectItemCaseSensitive(obj, key))
        return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v);
    return cJSON_AddItemToObject(obj, key, v);
}

/* The members after '{'.  After a failure, reads the arguments and builds
 * nothing (returns NULL). */
static cJSON *pack_object(walk *w)
{
    size_t level = w->depth;
    cJSON *obj = NULL;
    if (!w->rc && !(obj = cJSON_CreateObject()))
        fail(w, PL_ENOMEM, "out of memory");
    for (;;) {
        char c = tok_next(&w->s);
        if (c == '}')
            break;
        assert(c == 's');
        const char *key = va_arg(w->ap, const char *);
        if (!key)
            fail(w, PL_EINVAL, "a key is NULL");
        enter(w, level, key ? key : "", 0);
        bool omitted;
        cJSON *v = pack_value(w, &omitted);
        if (!w->rc && !omitted && !object_set(obj, key, v)) {
            cJSON_Delete(v);
            fail(w, PL_ENOMEM, "out of memory");
        } else if (w->rc) {
            cJSON_Delete(v);
        }
        leave(w, level);
    }
    if (w->rc) {
        cJSON_Delete(obj);
        return NULL;
    }
    return obj;
}

/* The items after '['.  After a failure, as pack_object(). */
static cJSON *pack_array(walk *w)
{
    size_t level = w->depth, n = 0;
    cJSON *arr = NULL;
    if (!w->rc && !(arr = cJSON_CreateArray()))
        fail(w, PL_ENOMEM, "out of memory");
    while (tok_peek(&w->s) != ']') {
        enter(w, level, NULL, n);
        bool omitted;
        cJSON *v = pack_value(w, &omitted);
        if (!w->rc && !omitted && !cJSON_AddItemToArray(arr, v)) {
            cJSON_Delete(v);
            fail(w, PL_ENOMEM, "out of memory");
        } else if (w->rc) {
            cJSON_Delete(v);
        }
        if (!omitted)
            n++;
        leave(w, level);
    }
    w->s.p++;
    if (w->rc) {
        cJSON_Delete(arr);
        return NULL;
    }
    return arr;
}

/* One value and its arguments.  Returns NULL after a failure (this one or an
 * earlier one), and for an omitted value ('*' with a NULL argument), which
 * sets *omitted. */
static cJSON *pack_value(walk *w, bool *omitted)
{
    *omitted = false;
    char c = tok_next(&w->s);
    char mod = 0;
    if (c == 's' || c == 'o' || c == 'O') {
        char m = tok_peek(&w->s);
        if (m == '?' || m == '*')
            mod = tok_next(&w->s);
    }
    cJSON *v = NULL;
    switch (c) {
    case '{': return pack_object(w);
    case '[': return pack_array(w);
    case 'n':
        if (!w->rc)
            v = cJSON_CreateNull();
        break;
    case 'b': {
        int b = va_arg(w->ap, int);
        if (!w->rc)
            v = cJSON_CreateBool(b != 0);
        break;
    }
    case 'i': {
        int i = va_arg(w->ap, int);
        if (!w->rc)
            v = cJSON_CreateNumber((double)i);
        break;
    }
    case 'I': {
        int64_t i = va_arg(w->ap, int64_t);
        if (i > EXACT_INT_MAX || i < -EXACT_INT_MAX) {
            fail(w, PL_EJSON,
                 "integer %" PRId64 " is past 2^53 in "
                 "magnitude, more than a JSON number holds exactly",
                 i);
            return NULL;
        }
        if (!w->rc)
            v = cJSON_CreateNumber((double)i);
        break;
    }
    case 'f': {
        double d = va_arg(w->ap, double);
        if (!isfinite(d)) {
            char num[32];
            number_text(d, num);
            fail(w, PL_EJSON, "non-finite number (%s)", num);
            return NULL;
        }
        if (!w->rc)
            v = cJSON_CreateNumber(d);
        break;
    }
    case 's':
    case 'o':
    case 'O': {
        const char *str = NULL;
        cJSON *take = NULL;
        const cJSON *copy = NULL;
        if (c == 's')
            str = va_arg(w->ap, const char *);
        else if (c == 'o')
            take = va_arg(w->ap, cJSON *);
        else
            copy = va_arg(w->ap, const cJSON *);
        if (w->rc) {
            cJSON_Delete(take);
            return NULL;
        }
        if (!str && !take && !copy) {
            if (mod == '*') {
                *omitted = true;
                return NULL;
            }
            if (mod != '?') {
                fail(w, PL_EINVAL,
                     "NULL argument for '%c' (use '%c?' for "
                     "null)",
                     c, c);
                return NULL;
            }
            v = cJSON_CreateNull();
        } else if (c == 's') {
            v = cJSON_CreateString(str);
        } else if (c == 'o') {
            v = take;
        } else {
            v = cJSON_Duplicate(copy, true);
        }
        break;
    }
    default:
        assert(!"check_format() let an unknown letter through");
        return NULL;
    }
    if (!v && !w->rc)
        fail(w, PL_ENOMEM, "out of memory");
    return v;
}

int pl_json_vpack(cJSON **out, const char *fmt, va_list ap)
{
    if (out)
        *out = NULL;
    if (!fmt)
        return pl_errorf(PL_EINVAL, "pack: fmt is NULL");
    int rc = check_format(fmt, "pack", false);
    if (rc)
        return rc;
    walk w = {.s = {fmt, fmt, "pack"}};
    va_copy(w.ap, ap);
    if (!out)
        w.rc = pl_errorf(PL_EINVAL, "pack: out is NULL");
    bool omitted;
    cJSON *v = pack_value(&w, &omitted);
    va_end(w.ap);
    assert(!omitted);
    if (w.rc) {
        cJSON_Delete(v);
        return w.rc;
    }
    *out = v;
    return PL_OK;
}

int pl_json_pack(cJSON **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = pl_json_vpack(out, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- unpack -------------------------------------------------------------- */

static int unpack_value(walk *w, const cJSON *v);

static int mismatch(walk *w, const cJSON *v, const char *want)
{
    return fail(w, PL_EJSON, "expected %s, got %s", want,
                pl__json_type_name(v));
}

/* Does the container whose members start at @p p end in '!'?  The format is
 * well formed, so only the depth needs counting. */
static bool strict_ahead(const char *p)
{
    int depth = 0;
    for (;; p++) {
        if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            if (depth-- == 0)
                return false;
        } else if (*p == '!' && depth == 0) {
            return true;
        }
    }
}

static bool key_listed(const char *const *keys, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0)
            return true;
    return false;
}

/* The members after '{'.  @p v NULL: an optional key was missing, so read
 * the arguments and store nothing. */
static int unpack_object(walk *w, const cJSON *v)
{
    if (v && !cJSON_IsObject(v))
        return mismatch(w, v, "an object");
    size_t level = w->depth;
    bool strict = v && strict_ahead(w->s.p);
    const char **keys = NULL; /* strict: the keys the format reads */
    size_t n_keys = 0, cap_keys = 0;
    int rc = PL_OK;
    for (;;) {
        char c = tok_next(&w->s);
        if (c == '}')
            break;
        if (c == '!' || c == '*')
            continue;
        assert(c == 's');
        bool optional = false;
        if (tok_peek(&w->s) == '?') {
            w->s.p++;
            optional = true;
        }
        const char *key = va_arg(w->ap, const char *);
        if (!key) {
            rc = fail(w, PL_EINVAL, "a key is NULL");
            goto done;
        }
        if (strict) {
            const char **k = grow(keys, &cap_keys, n_keys, sizeof *keys, 8);
            if (!k) {
                rc = fail(w, PL_ENOMEM, "out of memory");
                goto done;
            }
            keys = k;
            keys[n_keys++] = key;
        }
        const cJSON *item = v ? cJSON_GetObjectItemCaseSensitive(v, key) : NULL;
        enter(w, level, key, 0);
        if (v && !item && !optional)
            rc = fail(w, PL_EJSON, "missing key");
        else
            rc = unpack_value(w, item);
        leave(w, level);
        if (rc)
            goto done;
    }
    for (const cJSON *m = strict ? v->child : NULL; m; m = m->next) {
        if (m->string && key_listed(keys, n_keys, m->string))
            continue;
        enter(w, level, m->string ? m->string : "", 0);
        rc = fail(w, PL_EJSON,
                  "unexpected key (the format is strict: "
                  "'!')");
        leave(w, level);
        break;
    }
done:
    free(keys);
    return rc;
}

/* The items after '['.  @p v NULL: as unpack_object(). */
static int unpack_array(walk *w, const cJSON *v)
{
    if (v && !cJSON_IsArray(v))
        return mismatch(w, v, "an array");
    size_t level = w->depth, n = 0;
    const cJSON *item = v ? v->child : NULL;
    for (;;) {
        char c = tok_peek(&w->s);
        if (c == ']') {
            w->s.p++;
            return PL_OK;
        }
        if (c == '*') {
            w->s.p++;
            continue;
        }
        if (c == '!') {
            w->s.p++;
            if (item)
                return fail(w, PL_EJSON,
                            "expected %zu item%s, got %d "
                            "(the format is strict: '!')",
                            n, n == 1 ? "" : "s", cJSON_GetArraySize(v));
            continue;
        }
        enter(w, level, NULL, n);
        int rc;
        if (v && !item)
            rc = fail(w, PL_EJSON, "missing item (the array has %zu)", n);
        else
            rc = unpack_value(w, item);
        leave(w, level);
        if (rc)
            return rc;
        if (item)
            item = item->next;
        n++;
    }
}

/* Remember a copy 'O' made, to free it on failure. */
static int keep_dup(walk *w, cJSON **var, cJSON *copy)
{
    copied *d = grow(w->dups, &w->cap_dups, w->n_dups, sizeof *d, 4);
    if (!d) {
        cJSON_Delete(copy);
        return fail(w, PL_ENOMEM, "out of memory");
    }
    w->dups = d;
    d[w->n_dups].var = var;
    d[w->n_dups].copy = copy;
    w->n_dups++;
    *var = copy;
    return PL_OK;
}

/* A pointer argument of letter @p c; NULL is an error. */
#define UNPACK_ARG(w, type, c, name)                                           \
    type name = va_arg((w)->ap, type);                                         \
    if (!name)                                                                 \
    return fail((w), PL_EINVAL, "NULL pointer argument for '%c'", (c))

/* One value.  @p v NULL: nothing to read (an optional key was missing), so
 * read the arguments and store nothing. */
static int unpack_value(walk *w, const cJSON *v)
{
    char c = tok_next(&w->s);
    char num[32];
    switch (c) {
    case '{': return unpack_object(w, v);
    case '[': return unpack_array(w, v);
    case 'n':
        if (v && !cJSON_IsNull(v))
            return mismatch(w, v, "null");
        return PL_OK;
    case 'b': {
        UNPACK_ARG(w, bool *, c, out);
        if (!v)
            return PL_OK;
        if (!cJSON_IsBool(v))
            return mismatch(w, v, "a boolean");
        *out = cJSON_IsTrue(v);
        return PL_OK;
    }
    case 's': {
        UNPACK_ARG(w, const char **, c, out);
        if (!v)
            return PL_OK;
        if (!cJSON_IsString(v) || !v->valuestring)
            return mismatch(w, v, "a string");
        *out = v->valuestring;
        return PL_OK;
    }
    case 'f': {
        UNPACK_ARG(w, double *, c, out);
        if (!v)
            return PL_OK;
        if (!cJSON_IsNumber(v))
            return mismatch(w, v, "a number");
        *out = v->valuedouble;
        return PL_OK;
    }
    case 'i':
    case 'I': {
        int *out_i = NULL;
        int64_t *out_I = NULL;
        if (c == 'i')
            out_i = va_arg(w->ap, int *);
        else
            out_I = va_arg(w->ap, int64_t *);
        if (!out_i && !out_I)
            return fail(w, PL_EINVAL, "NULL pointer argument for '%c'", c);
        if (!v)
            return PL_OK;
        if (!cJSON_IsNumber(v))
            return mismatch(w, v, "a number");
        double d = v->valuedouble;
        number_text(d, num);
        if (!isfinite(d) || d != floor(d))
            return fail(w, PL_EJSON, "expected an integer, got %s", num);
        if (out_i && (d < INT_MIN || d > INT_MAX))
            return fail(w, PL_EJSON,
                        "expected an integer that fits in "
                        "int, got %s",
                        num);
        if (out_I && (d < -(double)EXACT_INT_MAX || d > (double)EXACT_INT_MAX))
            return fail(w, PL_EJSON,
                        "expected an integer of at most 2^53 "
                        "in magnitude, got %s",
                        num);
        if (out_i)
            *out_i = (int)d;
        else
            *out_I = (int64_t)d;
        return PL_OK;
    }
    case 'o': {
        UNPACK_ARG(w, const cJSON **, c, out);
        if (v)
            *out = v;
        return PL_OK;
    }
    case 'O': {
        UNPACK_ARG(w, cJSON **, c, out);
        if (!v)
            return PL_OK;
        cJSON *copy = cJSON_Duplicate(v, true);
        if (!copy)
            return fail(w, PL_ENOMEM, "out of memory");
        return keep_dup(w, out, copy);
    }
    default:
        assert(!"check_format() let an unknown letter through");
        return fail(w, PL_EINVAL, "unknown letter");
    }
}

int pl_json_vunpack(const cJSON *json, const char *fmt, va_list ap)
{
    if (!fmt)
        return pl_errorf(PL_EINVAL, "unpack: fmt is NULL");
    if (!json)
        return pl_errorf(PL_EINVAL, "unpack: json is NULL");
    int rc = check_format(fmt, "unpack", true);
    if (rc)
        return rc;
    walk w = {.s = {fmt, fmt, "unpack"}};
    va_copy(w.ap, ap);
    rc = unpack_value(&w, json);
    va_end(w.ap);
    for (size_t i = 0; rc && i < w.n_dups; i++) {
        if (*w.dups[i].var == w.dups[i].copy)
            *w.dups[i].var = NULL;
        cJSON_Delete(w.dups[i].copy);
    }
    free(w.dups);
    return rc;
}

int pl_json_unpack(const cJSON *json, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = pl_json_vunpack(json, fmt, ap);
    va_end(ap);
    return rc;
}
