/*
 * json_parse.c -- pl_json_parse: JSON text from outside, parsed whole or
 * refused.
 *
 * cJSON decodes a string into a C string: the escape \u0000 (and a raw
 * NUL byte, which cJSON takes inside a string) becomes a NUL that ends it,
 * and every byte after it is lost without a word.  A model's answer, an
 * MCP server's message, a payload given on a command line would then be
 * recorded cut, as if whole.  The text is parsed as cJSON parses it, and
 * then, only when it holds a NUL byte or a backslash, scanned once for
 * such a string; the first one is refused, named by its JSON pointer.
 * Nothing may follow the value but white space.
 *
 * RFC 8259 leaves an object whose names repeat to the reader: cJSON reads
 * the first of them, most others (JavaScript, Python, jq) the last, so the
 * text that passed a check here could mean another thing to the system
 * that wrote it.  Such an object is refused too, named by its pointer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

/* Where the NUL (a byte, or the escape \u0000) of the string starting
 * after the quote at text[i] is, or the offset of its closing quote in
 * *end when it has none. */
static bool string_nul(const char *text, size_t len, size_t i, size_t *at,
                       size_t *end)
{
    for (size_t j = i + 1; j < len; j++) {
        if (text[j] == '"') {
            *end = j;
            return false;
        }
        if (text[j] == '\0') {
            *at = j;
            return true;
        }
        if (text[j] != '\\')
            continue;
        if (j + 5 < len && memcmp(text + j + 1, "u0000", 5) == 0) {
            *at = j;
            return true;
        }
        j++; /* the escaped character, a quote or a backslash too */
    }
    *end = len;
    return false;
}

typedef struct frame {
    bool array;
    bool want_key; /* an object's next string is a key */
    long index;    /* an array's item */
    size_t key, n; /* an object's last key, as written in the text */
} frame;

/* Append @p n bytes of @p key (NULL: the item @p index) to the JSON
 * pointer @p path as a token ('~' is "~0", '/' is "~1", a control byte
 * '?'), cut at @p cap. */
static void pointer_add(char *path, size_t cap, const char *key, size_t n,
                        long index)
{
    size_t at = strlen(path);
    if (!key) {
        snprintf(path + at, cap - at, "/%ld", index);
        return;
    }
    if (at + 1 < cap)
        path[at++] = '/';
    for (size_t k = 0; k < n && at + 2 < cap; k++) {
        unsigned char c = (unsigned char)key[k];
        if (c == '~' || c == '/') {
            path[at++] = '~';
            path[at++] = c == '~' ? '0' : '1';
        } else {
            path[at++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
        }
    }
    path[at] = '\0';
}

/* Append the pointer token of @p f to @p path (the key as the text writes
 * it). */
static void token(char *path, size_t cap, const char *text, const frame *f)
{
    pointer_add(path, cap, f->array ? NULL : text + f->key, f->n, f->index);
}

/* The first string of @p text (valid JSON) holding a NUL: PL_EJSON naming
 * it, or PL_OK when none does. */
static int refuse_nul(const char *text, size_t len)
{
    int depth = 0;
    frame *st = malloc(sizeof(frame) * (CJSON_NESTING_LIMIT + 1));
    if (!st)
        return pl_errorf(PL_ENOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        frame *top = depth ? &st[depth - 1] : NULL;
        if (c == '{' || c == '[') {
            if (depth > CJSON_NESTING_LIMIT)
                break; /* cJSON took no deeper text */
            st[depth++] = (frame){.array = c == '[', .want_key = c == '{'};
        } else if (c == '}' || c == ']') {
            depth -= depth > 0;
        } else if (c == '\0') {
            free(st);
            return pl_errorf(PL_EJSON,
                             "not JSON: a NUL byte outside any string (at "
                             "byte %zu)",
                             i);
        } else if (c == ',' && top) {
            top->index++;
            top->want_key = !top->array;
        } else if (c == '"') {
            size_t at = 0, end = 0;
            bool key = top && !top->array && top->want_key;
            if (string_nul(text, len, i, &at, &end)) {
                char path[256] = "";
                for (int d = 0; d < depth - (key ? 1 : 0); d++)
                    token(path, sizeof path, text, &st[d]);
                const char *what = text[at] ? "\\u0000" : "a NUL byte";
                free(st);
                if (key)
                    return pl_errorf(PL_EJSON,
                                     "a key of the object at '%s' holds %s "
                                     "(at byte %zu): a string here ends at "
                                     "a NUL, and the rest of it would be "
                                     "lost",
                                     path, what, at);
                return pl_errorf(PL_EJSON,
                                 "the string at '%s' holds %s (at byte %zu): "
                                 "a string here ends at a NUL, and the rest "
                                 "of it would be lost",
                                 path, what, at);
            }
            if (key) {
                top->key = i + 1;
                top->n = end - i - 1;
                top->want_key = false;
            }
            i = end;
        }
    }
    free(st);
    return PL_OK;
}

/* ---- a name twice -------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name two members of object @p o share, in *twice (NULL: none).
 * A few members are compared pair by pair; more, their names sorted. */
static int name_twice(const cJSON *o, const char **twice)
{
    *twice = NULL;
    int n = cJSON_GetArraySize(o);
    if (n <= 16) {
        for (const cJSON *a = o->child; a && !*twice; a = a->next)
            for (const cJSON *b = a->next; b && !*twice; b = b->next)
                if (!strcmp(a->string, b->string))
                    *twice = a->string;
        return PL_OK;
    }
    const char **names = malloc(sizeof *names * (size_t)n);
    if (!names)
        return pl_errorf(PL_ENOMEM, "out of memory");
    int k = 0;
    for (const cJSON *a = o->child; a; a = a->next)
        names[k++] = a->string;
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (k = 1; k < n && !*twice; k++)
        if (!strcmp(names[k - 1], names[k]))
            *twice = names[k];
    free(names);
    return PL_OK;
}

/* PL_EJSON naming the first object in @p v (at pointer @p path, of
 * @p cap bytes) with a name twice; PL_OK when none has. */
static int refuse_twice(const cJSON *v, char *path, size_t cap)
{
    if (cJSON_IsObject(v)) {
        const char *twice;
        int st = name_twice(v, &twice);
        if (st)
            return st;
        if (twice) {
            char name[64] = "";
            pointer_add(name, sizeof name, twice, strlen(twice), 0);
            return pl_errorf(PL_EJSON,
                             "the object at '%s' has the name '%s' twice: "
                             "readers differ on which one counts",
                             path, name + 1);
        }
    }
    size_t at = strlen(path);
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        const char *key = cJSON_IsObject(v) ? c->string : NULL;
        pointer_add(path, cap, key, key ? strlen(key) : 0, i);
        int st = refuse_twice(c, path, cap);
        if (st)
            return st;
        path[at] = '\0';
    }
    return PL_OK;
}

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_blank(const char *t, size_t len, size_t i)
{
    while (i < len && blank(t[i]))
        i++;
    return i;
}

/* The UTF-16 unit of the 4 hex digits at t[i], or -1. */
static long hex4(const char *t, size_t len, size_t i)
{
    char u[5] = "";
    if (i + 4 > len)
        return -1;
    memcpy(u, t + i, 4);
    return strspn(u, "0123456789abcdefABCDEF") == 4 ? strtol(u, NULL, 16) : -1;
}

/* The end of the string opening at t[i] when cJSON takes it (no control
 * character, escapes of RFC 8259, a \u escape of a surrogate only in a
 * pair), else 0. */
static size_t string_end(const char *t, size_t len, size_t i)
{
    for (size_t j = i + 1; j < len; j++) {
        unsigned char c = (unsigned char)t[j];
        if (c == '"')
            return j + 1;
        if (c < 0x20)
            return 0;
        if (c != '\\')
            continue;
        if (++j >= len)
            return 0;
        if (strchr("\"\\/bfnrt", t[j]) && t[j])
            continue;
        long u = t[j] == 'u' ? hex4(t, len, j + 1) : -1;
        if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF))
            return 0;
        j += 4;
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = j + 2 < len && t[j + 1] == '\\' && t[j + 2] == 'u'
                          ? hex4(t, len, j + 3)
                          : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return 0;
            j += 6;
        }
    }
    return 0;
}

/* The end of the number at t[i] when it is one of RFC 8259 of at most 63
 * characters (the most some cJSON versions read of one), else 0. */
static size_t number_end(const char *t, size_t len, size_t i)
{
    size_t j = i + (t[i] == '-');
    size_t digits = j;
    while (j < len && t[j] >= '0' && t[j] <= '9')
        j++;
    if (j == digits || (t[digits] == '0' && j > digits + 1))
        return 0;
    if (j < len && t[j] == '.') {
        size_t f = ++j;
        while (j < len && t[j] >= '0' && t[j] <= '9')
            j++;
        if (j == f)
            return 0;
    }
    if (j < len && (t[j] == 'e' || t[j] == 'E')) {
        j += j + 1 < len && (t[j + 1] == '+' || t[j + 1] == '-') ? 2 : 1;
        size_t e = j;
        while (j < len && t[j] >= '0' && t[j] <= '9')
            j++;
        if (j == e)
            return 0;
    }
    return j - i < 64 ? j : 0;
}

/*
 * Whether @p text is one JSON value, white space around it, that cJSON
 * parses, allocating nothing: RFC 8259, with cJSON's limits (nesting
 * under CJSON_NESTING_LIMIT, no lone surrogate escaped).  Stricter than
 * cJSON where they differ (control characters in a string, a byte order
 * mark, numbers past 63 characters), never looser: when cJSON refuses
 * such a text, it is that an allocation failed.
 */
static bool parses(const char *t, size_t len)
{
    char open[CJSON_NESTING_LIMIT]; /* '{' or '[' of each level */
    int depth = 0;
    bool key = false; /* a key is next, not a value */
    size_t i = skip_blank(t, len, 0);
    for (;;) {
        if (i >= len)
            return false;
        char c = t[i];
        if (key) {
            i = c == '"' ? string_end(t, len, i) : 0;
            i = i ? skip_blank(t, len, i) : 0;
            if (!i || i >= len || t[i] != ':')
                return false;
            i = skip_blank(t, len, i + 1);
            key = false;
            continue;
        }
        if (c == '{' || c == '[') {
            if (depth >= CJSON_NESTING_LIMIT - 1)
                return false;
            open[depth++] = c;
            i = skip_blank(t, len, i + 1);
            if (i < len && t[i] == (c == '{' ? '}' : ']'))
                depth--, i++;
            else {
                key = c == '{';
                continue;
            }
        } else if (c == '"') {
            i = string_end(t, len, i);
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            i = number_end(t, len, i);
        } else {
            static const char *const words[] = {"null", "true", "false"};
            size_t w = 0;
            while (w < 3 && (len - i < strlen(words[w]) ||
                             memcmp(t + i, words[w], strlen(words[w])) != 0))
                w++;
            i = w < 3 ? i + strlen(words[w]) : 0;
        }
        /* after a value: a comma, the end of containers, or of the text */
        for (;;) {
            if (!i)
                return false;
            i = skip_blank(t, len, i);
            if (!depth)
                return i == len;
            if (i >= len)
                return false;
            if (t[i] != (open[depth - 1] == '{' ? '}' : ']'))
                break;
            depth--;
            i++;
        }
        if (t[i] != ',')
            return false;
        key = open[depth - 1] == '{';
        i = skip_blank(t, len, i + 1);
    }
}

int pl_json_parse(cJSON **out, const char *text, size_t len)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_json_parse: out is NULL");
    *out = NULL;
    if (!text)
        return pl_errorf(PL_EINVAL, "pl_json_parse: text is NULL");
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, false);
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text)
                                                        : 0;
    if (!v && parses(text, len))
        return pl_errorf(PL_ENOMEM, "out of memory reading %zu bytes of JSON",
                         len);
    if (!v)
        return pl_errorf(PL_EJSON, "not JSON (at byte %zu of %zu)", at, len);
    while (at < len && blank(text[at]))
        at++;
    if (at < len) {
        cJSON_Delete(v);
        return pl_errorf(PL_EJSON,
                         "not one JSON value: more follows it (at byte %zu "
                         "of %zu)",
                         at, len);
    }
    if (memchr(text, '\0', len) || memchr(text, '\\', len)) {
        int st = refuse_nul(text, len);
        if (st) {
            cJSON_Delete(v);
            return st;
        }
    }
    char path[256] = "";
    int st = refuse_twice(v, path, sizeof path);
    if (st) {
        cJSON_Delete(v);
        return st;
    }
    *out = v;
    return PL_OK;
}
