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

/* Append the pointer token of @p f to @p path (JSON Pointer: '~' is "~0",
 * '/' is "~1"; the key is as the text writes it, a control byte as '?'). */
static void token(char *path, size_t cap, const char *text, const frame *f)
{
    size_t at = strlen(path);
    if (f->array) {
        snprintf(path + at, cap - at, "/%ld", f->index);
        return;
    }
    if (at + 1 < cap)
        path[at++] = '/';
    for (size_t k = 0; k < f->n && at + 2 < cap; k++) {
        unsigned char c = (unsigned char)text[f->key + k];
        if (c == '~' || c == '/') {
            path[at++] = '~';
            path[at++] = c == '~' ? '0' : '1';
        } else {
            path[at++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
        }
    }
    path[at] = '\0';
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

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
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
    *out = v;
    return PL_OK;
}
