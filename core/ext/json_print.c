/*
 * json_print.c -- pl_json_print: cJSON's text with numbers that read back
 * as themselves; and compact text that is UTF-8 whatever bytes the
 * strings hold (the trace's lines, the exporter's requests).
 *
 * cJSON 1.7 prints a number with "%1.15g" when that text reads back within
 * a relative DBL_EPSILON of it (its compare_double()), which is not the
 * number whenever the two differ in the last bits: 2^53 - 1 reads back as
 * 2^53 - 2.  The tree is printed as cJSON prints it when no number is such
 * (the common case: nothing copied); otherwise a copy is printed in which
 * each such number is a raw "%1.17g", which always reads back exactly.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

/* Whether cJSON would print @p n as another number: not its "%d" form (an
 * integral value that fits an int), and 15 digits that read back as
 * something else. */
static bool inexact(const cJSON *n)
{
    double d = n->valuedouble;
    if (!isfinite(d) || (d >= INT_MIN && d <= INT_MAX && d == (int)d))
        return false;
    char text[32];
    snprintf(text, sizeof text, "%1.15g", d);
    double back = strtod(text, NULL);
    return back < d || back > d;
}

static bool any_inexact(const cJSON *v)
{
    if (cJSON_IsNumber(v))
        return inexact(v);
    for (const cJSON *c = v->child; c; c = c->next)
        if (any_inexact(c))
            return true;
    return false;
}

static cJSON *exact_number(double d)
{
    char text[32];
    snprintf(text, sizeof text, "%1.17g", d);
    return cJSON_CreateRaw(text);
}

/* Replaces, in a tree of our own, every number cJSON would misprint by its
 * raw digits; false when memory ran out. */
static bool make_exact(cJSON *v)
{
    for (cJSON *c = v->child, *next; c; c = next) {
        next = c->next;
        if (!cJSON_IsNumber(c)) {
            if (!make_exact(c))
                return false;
            continue;
        }
        if (!inexact(c))
            continue;
        cJSON *raw = exact_number(c->valuedouble);
        if (!raw)
            return false;
        /* the member's key moves to the raw value, as it is (a constant
         * key stays one) */
        raw->string = c->string;
        raw->type |= c->type & cJSON_StringIsConst;
        c->string = NULL;
        cJSON_ReplaceItemViaPointer(v, c, raw);
    }
    return true;
}

char *pl_json_print(const cJSON *json, bool formatted)
{
    if (!json)
        return NULL;
    if (!any_inexact(json))
        return formatted ? cJSON_Print(json) : cJSON_PrintUnformatted(json);
    cJSON *copy = cJSON_IsNumber(json) ? exact_number(json->valuedouble)
                                       : cJSON_Duplicate(json, true);
    char *text = NULL;
    if (copy && (cJSON_IsRaw(copy) || make_exact(copy)))
        text = formatted ? cJSON_Print(copy) : cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    return text;
}

/* The length of the well-formed UTF-8 character at @p p (Unicode's table
 * 3-7: shortest form, no surrogates, at most U+10FFFF), or 0. */
static size_t char_len(const unsigned char *p)
{
    static const struct {
        unsigned char lead_lo, lead_hi, next_lo, next_hi, len;
    } forms[] = {{0xC2, 0xDF, 0x80, 0xBF, 2}, {0xE0, 0xE0, 0xA0, 0xBF, 3},
                 {0xE1, 0xEC, 0x80, 0xBF, 3}, {0xED, 0xED, 0x80, 0x9F, 3},
                 {0xEE, 0xEF, 0x80, 0xBF, 3}, {0xF0, 0xF0, 0x90, 0xBF, 4},
                 {0xF1, 0xF3, 0x80, 0xBF, 4}, {0xF4, 0xF4, 0x80, 0x8F, 4}};
    if (p[0] < 0x80)
        return 1;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (p[0] < forms[i].lead_lo || p[0] > forms[i].lead_hi)
            continue;
        if (p[1] < forms[i].next_lo || p[1] > forms[i].next_hi)
            return 0;
        for (size_t k = 2; k < forms[i].len; k++)
            if ((p[k] & 0xC0) != 0x80)
                return 0;
        return forms[i].len;
    }
    return 0;
}

char *pl__json_print_utf8(const cJSON *json)
{
    char *text = cJSON_PrintUnformatted(json);
    if (!text)
        return NULL;
    const unsigned char *p = (const unsigned char *)text;
    size_t len = strlen(text), bad = 0;
    for (size_t i = 0; i < len;) {
        size_t k = char_len(p + i);
        bad += !k;
        i += k ? k : 1;
    }
    if (!bad)
        return text;
    char *out = cJSON_malloc(len + 2 * bad + 1);
    size_t o = 0;
    for (size_t i = 0; out && i < len;) {
        size_t k = char_len(p + i);
        memcpy(out + o, k ? text + i : "\xef\xbf\xbd", k ? k : 3);
        o += k ? k : 3;
        i += k ? k : 1;
    }
    if (out)
        out[o] = '\0';
    cJSON_free(text);
    return out;
}
