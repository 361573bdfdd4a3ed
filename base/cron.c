/*
 * cron.c -- the cron expression parser and the next fire time (cron.h says
 * what an expression means).
 *
 * The next fire time walks the zone's local calendar day by day (a month
 * at a time where the month does not match).  A day whose surroundings
 * have one offset maps every local minute to one instant; a day near a
 * change of offset takes each local minute through pl__tz_instants() and
 * the rules for skipped and repeated times.  The walk starts a day before
 * the local date of the start, since a skipped time read with the offset
 * before the jump may fall on the next local day.
 */
#include "cron.h"

#include <stdio.h>
#include <stdlib.h>

enum { F_MINUTE, F_HOUR, F_MDAY, F_MONTH, F_WDAY, F_COUNT };

static const struct field {
    const char *name;
    int min, max;
} fields[F_COUNT] = {
    {"minute", 0, 59}, {"hour", 0, 23},       {"day of month", 1, 31},
    {"month", 1, 12},  {"day of week", 0, 7},
};

static const char *const month_names[] = {"jan", "feb", "mar", "apr",
                                          "may", "jun", "jul", "aug",
                                          "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed",
                                        "thu", "fri", "sat"};

static const struct {
    const char *name, *expr;
} macros[] = {
    {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
    {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},   {"@hourly", "0 * * * *"},
};

static char lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

/* Whether the @p n bytes at @p s are @p name (lower case) in any case. */
static bool same_name(const char *s, const char *name, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != name[i])
            return false;
    return true;
}

static bool is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' ||
           ch == '\f';
}

/* A value of field @p f at *p (digits, or a name where the field has
 * them): *v, *p moved past it. */
static int parse_value(const char **p, const char *end, int f, int *v)
{
    const struct field *fd = &fields[f];
    const char *s = *p;
    if (s < end && is_alpha(*s)) {
        const char *const *names = f == F_MONTH  ? month_names
                                   : f == F_WDAY ? day_names
                                                 : NULL;
        size_t count = f == F_MONTH ? 12 : 7, n = 0;
        while (s + n < end && is_alpha(s[n]))
            n++;
        if (names && n == 3)
            for (size_t i = 0; i < count; i++)
                if (lower(s[0]) == names[i][0] && lower(s[1]) == names[i][1] &&
                    lower(s[2]) == names[i][2]) {
                    *v = (int)i + (f == F_MONTH);
                    *p = s + 3;
                    return PL_OK;
                }
        return pl__err(PL_EINVAL, "cron %s field: unknown name '%.*s'%s",
                       fd->name, (int)(n > 16 ? 16 : n), s,
                       names ? "" : " (only months and days have names)");
    }
    int x = 0, digits = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (x < 1000)
            x = x * 10 + (*s - '0');
        s++;
        digits++;
    }
    if (!digits)
        return pl__err(PL_EINVAL, "cron %s field: expected a number at '%.*s'",
                       fd->name, (int)(end - s > 16 ? 16 : end - s), s);
    if (x < fd->min || x > fd->max)
        return pl__err(PL_EINVAL, "cron %s field: %d is out of range %d-%d",
                       fd->name, x, fd->min, fd->max);
    *v = x;
    *p = s;
    return PL_OK;
}

/* One item: '*', a, a-b, each with an optional /step; its bits into *bits. */
static int parse_item(const char *s, const char *end, int f, uint64_t *bits)
{
    const struct field *fd = &fields[f];
    int lo, hi, step = 1, rc;
    const char *p = s;
    bool star = false;
    if (p < end && (*p == '*' || *p == '?')) {
        lo = fd->min;
        hi = fd->max;
        star = true;
        p++;
    } else {
        if ((rc = parse_value(&p, end, f, &lo)))
            return rc;
        hi = lo;
        if (p < end && *p == '-') {
            p++;
            if ((rc = parse_value(&p, end, f, &hi)))
                return rc;
            if (hi < lo)
                return pl__err(PL_EINVAL,
                               "cron %s field: range %d-%d runs backwards",
                               fd->name, lo, hi);
        }
    }
    if (p < end && *p == '/') {
        const char *q = ++p;
        step = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (step < 1000)
                step = step * 10 + (*p - '0');
            p++;
        }
        if (p == q || step == 0)
            return pl__err(PL_EINVAL,
                           "cron %s field: a step must be a number from 1 "
                           "in '%.*s'",
                           fd->name, (int)(end - s), s);
        if (!star && hi == lo && memchr(s, '-', (size_t)(q - s)) == NULL)
            hi = fd->max; /* a/step: from a to the field's maximum */
    }
    if (p != end)
        return pl__err(PL_EINVAL, "cron %s field: cannot read '%.*s'", fd->name,
                       (int)(end - s > 32 ? 32 : end - s), s);
    for (int v = lo; v <= hi; v += step)
        *bits |= (uint64_t)1 << (f == F_WDAY ? v % 7 : v);
    return PL_OK;
}

static int parse_field(const char *s, const char *end, int f, uint64_t *bits)
{
    *bits = 0;
    for (const char *p = s;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (stop == p)
            return pl__err(PL_EINVAL, "cron %s field: an empty list item",
                           fields[f].name);
        int rc = parse_item(p, stop, f, bits);
        if (rc)
            return rc;
        if (!comma)
            return PL_OK;
        p = comma + 1;
    }
}

int pl__cron_parse(pl__cron *out, const char *expr)
{
    memset(out, 0, sizeof *out);
    if (!expr)
        return pl__err(PL_EINVAL, "cron expression is NULL");
    size_t len = strnlen(expr, PL__CRON_MAX + 1);
    if (len > PL__CRON_MAX)
        return pl__err(PL_EINVAL, "cron expression is longer than %d bytes",
                       PL__CRON_MAX);
    const char *p = expr, *end = expr + len;
    while (p < end && is_blank(*p))
        p++;
    while (end > p && is_blank(end[-1]))
        end--;
    if (p < end && *p == '@') {
        /* in any case, as names are (@YEARLY is @yearly) */
        for (size_t i = 0; i < PL__ARRAY_LEN(macros); i++)
            if ((size_t)(end - p) == strlen(macros[i].name) &&
                same_name(p, macros[i].name, (size_t)(end - p)))
                return pl__cron_parse(out, macros[i].expr);
        return pl__err(PL_EINVAL,
                       "cron expression '%.*s' is not one of @yearly, "
                       "@annually, @monthly, @weekly, @daily, @hourly",
                       (int)(end - p > 32 ? 32 : end - p), p);
    }
    const char *at[F_COUNT], *stop[F_COUNT];
    int n = 0;
    while (p < end) {
        if (n == F_COUNT)
            return pl__err(PL_EINVAL,
                           "cron expression has more than 5 fields (minute "
                           "hour day-of-month month day-of-week; no "
                           "seconds)");
        at[n] = p;
        while (p < end && !is_blank(*p))
            p++;
        stop[n++] = p;
        while (p < end && is_blank(*p))
            p++;
    }
    if (n < F_COUNT)
        return pl__err(PL_EINVAL,
                       "cron expression has %d field%s, not 5 (minute hour "
                       "day-of-month month day-of-week)",
                       n, n == 1 ? "" : "s");
    uint64_t bits[F_COUNT];
    for (int f = 0; f < F_COUNT; f++) {
        int rc = parse_field(at[f], stop[f], f, &bits[f]);
        if (rc)
            return rc;
    }
    out->minutes = bits[F_MINUTE];
    out->hours = (uint32_t)bits[F_HOUR];
    out->mdays = (uint32_t)bits[F_MDAY];
    out->months = (uint16_t)bits[F_MONTH];
    out->wdays = (uint8_t)bits[F_WDAY];
    out->mday_star = stop[F_MDAY] - at[F_MDAY] == 1 &&
                     (*at[F_MDAY] == '*' || *at[F_MDAY] == '?');
    out->wday_star = stop[F_WDAY] - at[F_WDAY] == 1 &&
                     (*at[F_WDAY] == '*' || *at[F_WDAY] == '?');
    /* A day of month that no chosen month has would never fire. */
    if (out->wday_star) {
        static const int longest[13] = {0,  31, 29, 31, 30, 31, 30,
                                        31, 31, 30, 31, 30, 31};
        int most = 0, first = 1;
        for (int m = 1; m <= 12; m++)
            if (out->months >> m & 1 && longest[m] > most)
                most = longest[m];
        while (!(out->mdays >> first & 1))
            first++;
        if (first > most)
            return pl__err(PL_EINVAL,
                           "cron expression never fires: day %d of the "
                           "month does not occur in its months",
                           first);
    }
    return PL_OK;
}

/* ---- the next fire time -------------------------------------------------- */

static bool day_matches(const pl__cron *c, int64_t day)
{
    int64_t y;
    unsigned m, mday, wday = (unsigned)((day % 7 + 11) % 7); /* day 0: Thu */
    pl__civil_from_days(day, &y, &m, &mday);
    if (!(c->months >> m & 1))
        return false;
    bool dom = c->mdays >> mday & 1, dow = c->wdays >> wday & 1;
    if (!c->mday_star && !c->wday_star)
        return dom || dow;
    if (!c->mday_star)
        return dom;
    if (!c->wday_star)
        return dow;
    return true;
}

#define ALL_HOURS 0xffffffu

/*
 * The first fire time of local day @p day (days since 1970-01-01) after
 * @p after (seconds; a fire time is a whole local minute, so strictly
 * after the millisecond start means at or after after + 1 once rounded),
 * into *best when earlier than it.
 */
static void day_first(const pl__cron *c, const pl__tz *z, int64_t day,
                      int64_t after_ms, int64_t *best)
{
    int64_t start = day * 86400, next;
    int32_t off = pl__tz_offset(z, start - 26 * 3600);
    bool steady = !pl__tz_next_change(z, start - 26 * 3600, &next) ||
                  next > start + 86400 + 26 * 3600;
    bool every_hour = (c->hours & ALL_HOURS) == ALL_HOURS;
    for (int h = 0; h < 24; h++) {
        if (!(c->hours >> h & 1))
            continue;
        for (int m = 0; m < 60; m++) {
            if (!(c->minutes >> m & 1))
                continue;
            int64_t local = start + h * 3600 + m * 60, at[2];
            int n;
            if (steady) {
                at[0] = local - off;
                n = 1;
            } else {
                int32_t before = 0;
                n = pl__tz_instants(z, local, at, &before);
                if (n == 0) { /* skipped by a jump forward */
                    if (every_hour)
                        continue;
                    at[0] = local - before;
                    n = 1;
                } else if (n == 2 && !every_hour) {
                    n = 1; /* repeated: the first occurrence alone */
                }
            }
            for (int i = 0; i < n; i++)
                if (at[i] * 1000 > after_ms && at[i] < *best) {
                    *best = at[i];
                    if (steady)
                        return; /* a steady day's instants ascend */
                }
        }
    }
}

#define AFTER_MAX PL__CRON_TIME_MAX

int pl__cron_next(int64_t *out_ms, const pl__cron *c, const pl__tz *z,
                  int64_t after_ms)
{
    if (after_ms < 0 || after_ms >= AFTER_MAX)
        return pl__err(PL_EINVAL,
                       "a cron start time must be from 1970 to 9000, not "
                       "%lld ms",
                       (long long)after_ms);
    int64_t after_s = after_ms / 1000;
    int64_t local = after_s + pl__tz_offset(z, after_s);
    int64_t day = local / 86400 - 1, last = day + 3700 + 366;
    int64_t best = INT64_MAX;
    while (day <= last) {
        int64_t y;
        unsigned m, d;
        pl__civil_from_days(day, &y, &m, &d);
        if (!(c->months >> m & 1)) { /* on to the 1st of the next month */
            day = pl__days_from_civil(m == 12 ? y + 1 : y, m % 12 + 1, 1);
            continue;
        }
        if (day_matches(c, day)) {
            int64_t found = best;
            day_first(c, z, day, after_ms, &found);
            if (found != INT64_MAX) {
                /* The next day may hold an earlier one (a skipped time
                 * read with the offset before the jump). */
                if (day_matches(c, day + 1))
                    day_first(c, z, day + 1, after_ms, &found);
                *out_ms = found * 1000;
                return PL_OK;
            }
        }
        day++;
    }
    return pl__err(PL_ENOTFOUND, "cron expression has no fire time within "
                                 "ten years");
}

int pl__cron_next_fire(int64_t *out_ms, const char *expr, const char *zone,
                       int64_t after_ms)
{
    pl__cron c;
    pl__tz *z = NULL;
    int rc = pl__cron_parse(&c, expr);
    if (!rc)
        rc = pl__tz_load(&z, zone ? zone : "UTC", NULL);
    if (!rc)
        rc = pl__cron_next(out_ms, &c, z, after_ms);
    pl__tz_free(z);
    return rc;
}
