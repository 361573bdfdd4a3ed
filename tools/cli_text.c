/*
 * cli_text.c -- strings as the tools show them (see cli.h): a stored or a
 * user's string in text output and in messages, with every control
 * character escaped, and the UTF-8 of JSON output.
 *
 * A string the tools print may come from a store anyone could have
 * written (a run's reason, a policy's error message, a host name, a code
 * identity) or from outside (a model's answer, an MCP server's).  Printed
 * as it is, ESC [ ... rewrites the operator's terminal, a carriage return
 * or a line feed forges a line of the output; escaped, each shows as the
 * bytes it is.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t cli_control_escape(char out[8], const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { /* C1: two bytes */
        snprintf(out, 8, "\\u%04x", p[1]);
        return 2;
    }
    if (p[0] == '\n')
        snprintf(out, 8, "\\n");
    else if (p[0] == '\t')
        snprintf(out, 8, "\\t");
    else if (p[0] == '\r')
        snprintf(out, 8, "\\r");
    else if ((p[0] < 0x20 && p[0]) || p[0] == 0x7f)
        snprintf(out, 8, "\\x%02x", p[0]);
    else
        return 0;
    return 1;
}

const char *cli_quote(char *out, size_t n, const char *s)
{
    if (!s) {
        snprintf(out, n, "(null)");
        return out;
    }
    size_t len = strlen(s), o = 0, shown = 0;
    /* room for the closing quote, "...", " (N bytes)" and the NUL */
    size_t limit = n > 40 ? n - 32 : n / 2;
    out[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned c = *p;
        char esc[8];
        size_t used = cli_control_escape(esc, (const char *)p);
        size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (k > len - (size_t)((const char *)p - s))
            k = len - (size_t)((const char *)p - s);
        if (used) {
            k = used;
        } else if (c == '"' || c == '\\') {
            snprintf(esc, sizeof esc, "\\%c", c);
        } else if (c < 0x80 || cli_utf8_bad((const char *)p, k) == k) {
            memcpy(esc, p, k); /* one character, never cut */
            esc[k] = '\0';
        } else { /* a byte that is not part of well-formed UTF-8 */
            snprintf(esc, sizeof esc, "\\x%02x", c);
            k = 1;
        }
        size_t el = strlen(esc);
        if (o + el > limit)
            break;
        memcpy(out + o, esc, el);
        o += el;
        p += k;
        shown = (size_t)((const char *)p - s);
    }
    out[o++] = '"';
    out[o] = '\0';
    if (shown < len)
        snprintf(out + o, n - o, "... (%zu bytes)", len);
    return out;
}

/* The strings cli_text() made on this thread, the oldest replaced by the
 * next: a printf() of a few of them finds each still there. */
#define TEXT_RING 16
static _Thread_local char *t_ring[TEXT_RING];
static _Thread_local unsigned t_next;

/* Whether @p s (@p len bytes) is shown as it is: well-formed UTF-8 with
 * no control character. */
static bool plain(const char *s, size_t len)
{
    char esc[8];
    if (cli_utf8_bad(s, len) != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (cli_control_escape(esc, s + i))
            return false;
    return true;
}

const char *cli_text(const char *s)
{
    if (!s)
        return "(null)";
    size_t len = strlen(s);
    if (plain(s, len))
        return s; /* nothing copied */
    /* a byte becomes at most 4 ("\x1b", "\xff"), a C1's two 6 */
    char *out = malloc(4 * len + 1);
    if (!out)
        return "(out of memory)";
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        char esc[8];
        size_t used = cli_control_escape(esc, s + i);
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (n > len - i)
            n = len - i;
        if (used) {
            memcpy(out + o, esc, strlen(esc));
            o += strlen(esc);
            i += used;
        } else if (cli_utf8_bad(s + i, n) == n) { /* one character */
            memcpy(out + o, s + i, n);
            o += n;
            i += n;
        } else { /* a byte that is not part of well-formed UTF-8 */
            o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
            i++;
        }
    }
    out[o] = '\0';
    free(t_ring[t_next]);
    t_ring[t_next] = out;
    t_next = (t_next + 1) % TEXT_RING;
    return out;
}

size_t cli_utf8_bad(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (!len || i + len > n)
            return i;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xc0) != 0x80)
                return i;
        /* no overlong three- or four-byte form, no surrogate, nothing
         * past U+10FFFF */
        if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] > 0x9f) ||
            (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] > 0x8f))
            return i;
        i += len;
    }
    return n;
}

/* @p text (well-formed UTF-8 JSON) with DEL and each C1 control, which
 * cJSON prints as they are, as a \u escape: they occur in JSON only inside
 * strings, where the escape means the same.  Takes @p text; NULL on OOM. */
static char *json_controls(char *text)
{
    size_t n = 0, len = strlen(text);
    char esc[8];
    for (size_t i = 0; i < len; i++)
        n += text[i] == 0x7f || cli_control_escape(esc, text + i) == 2;
    if (!n)
        return text;
    /* DEL grows by 5 bytes, a C1's two by 4 */
    char *out = malloc(len + 5 * n + 1), *o = out;
    for (size_t i = 0; out && i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == 0x7f || cli_control_escape(esc, text + i) == 2) {
            o += snprintf(o, 7, "\\u%04x",
                          c == 0x7f ? c : (unsigned char)text[++i]);
        } else {
            *o++ = (char)c;
        }
    }
    if (out)
        *o = '\0';
    free(text);
    return out;
}

/* @p text with each byte that is not part of well-formed UTF-8 as U+FFFD:
 * JSON is UTF-8, and a request's bytes or a store's may not be (cJSON
 * keeps any bytes in a string).  Takes @p text; NULL on OOM. */
static char *utf8_only(char *text)
{
    if (!text)
        return NULL;
    size_t len = strlen(text), at = cli_utf8_bad(text, len);
    if (at == len)
        return text;
    char *out = malloc(3 * len + 1), *o = out;
    for (size_t i = 0; out && i < len;) {
        size_t ok = cli_utf8_bad(text + i, len - i);
        memcpy(o, text + i, ok);
        o += ok;
        i += ok;
        if (i < len) {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    if (out)
        *o = '\0';
    free(text);
    return out;
}

char *cli_json_safe(char *text)
{
    text = utf8_only(text);
    return text ? json_controls(text) : NULL;
}
