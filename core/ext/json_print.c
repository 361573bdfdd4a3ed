/*
 * json_print.c -- pl_json_print: cJSON's text with numbers that read back
 * as themselves.
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
