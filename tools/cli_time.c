/*
 * cli_time.c -- the tools' times: now, a time given on a command line
 * (an ISO 8601 UTC time, or one relative to now), and times and spans as
 * the tools print them (see cli.h).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int64_t cli_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

bool cli_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a))
        return false;
    bool ok = !pthread_condattr_setclock(&a, CLOCK_MONOTONIC) &&
              !pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return ok;
}

struct timespec cli_deadline_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

/* Read exactly @p n digits at *p. */
static bool digits(const char **p, int n, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*p)[i];
        if (c < '0' || c > '9')
            return false;
        v = v * 10 + (unsigned)(c - '0');
    }
    *p += n;
    *out = v;
    return true;
}

static bool parse_relative(int64_t *out, const char *t, int64_t now_us)
{
    int64_t v = 0;
    const char *p = t;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > 1000000) /* past 10^7 days: no use, and it would overflow */
            return false;
        v = v * 10 + (*p - '0');
    }
    int64_t unit;
    switch (*p) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return false;
    }
    if (p[1] != '\0')
        return false;
    *out = now_us - v * unit * 1000000;
    return true;
}

bool cli_parse_duration_ms(int64_t *out_ms, const char *t)
{
    int64_t before;
    if (!t || !parse_relative(&before, t, 0) || before == 0)
        return false;
    *out_ms = -before / 1000;
    return true;
}

bool cli_parse_time(int64_t *out_us, const char *t, int64_t now_us)
{
    if (!t || !*t)
        return false;
    if (parse_relative(out_us, t, now_us))
        return true;
    const char *p = t;
    unsigned y, mo, d, h = 0, mi = 0, s = 0, frac = 0;
    if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) ||
        *p++ != '-' || !digits(&p, 2, &d))
        return false;
    if (*p == 'T' || *p == ' ') {
        p++;
        if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi))
            return false;
        if (*p == ':') {
            p++;
            if (!digits(&p, 2, &s))
                return false;
            if (*p == '.') {
                p++;
                int n = 0;
                for (; *p >= '0' && *p <= '9'; p++, n++)
                    if (n < 6)
                        frac = frac * 10 + (unsigned)(*p - '0');
                if (n == 0)
                    return false;
                for (; n < 6; n++)
                    frac *= 10;
            }
        }
        if (*p == 'Z')
            p++;
    }
    if (*p != '\0')
        return false;
    static const unsigned mdays[] = {31, 29, 31, 30, 31, 30,
                                     31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 || s > 60)
        return false;
    int64_t days = days_from_civil(y, mo, d);
    *out_us = ((days * 86400 + h * 3600 + mi * 60 + s) * 1000000) + frac;
    return true;
}

static void split(int64_t us, int64_t *y, unsigned *mo, unsigned *d,
                  unsigned *h, unsigned *mi, unsigned *s, unsigned *frac)
{
    int64_t secs = us >= 0 ? us / 1000000 : (us - 999999) / 1000000;
    *frac = (unsigned)(us - secs * 1000000);
    int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
    int64_t rem = secs - days * 86400;
    civil_from_days(days, y, mo, d);
    *h = (unsigned)(rem / 3600);
    *mi = (unsigned)(rem % 3600 / 60);
    *s = (unsigned)(rem % 60);
}

void cli_time_iso(char *out, size_t n, int64_t us, bool micro)
{
    int64_t y;
    unsigned mo, d, h, mi, s, frac;
    split(us, &y, &mo, &d, &h, &mi, &s, &frac);
    if (micro)
        snprintf(out, n, "%04lld-%02u-%02uT%02u:%02u:%02u.%06uZ", (long long)y,
                 mo, d, h, mi, s, frac);
    else
        snprintf(out, n, "%04lld-%02u-%02uT%02u:%02u:%02uZ", (long long)y, mo,
                 d, h, mi, s);
}

void cli_time_human(char *out, size_t n, int64_t us)
{
    int64_t y;
    unsigned mo, d, h, mi, s, frac;
    split(us, &y, &mo, &d, &h, &mi, &s, &frac);
    snprintf(out, n, "%04lld-%02u-%02u %02u:%02u:%02u", (long long)y, mo, d, h,
             mi, s);
}

void cli_span_text(char *out, size_t n, int64_t ms)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } u[] = {{"d", 86400000}, {"h", 3600000}, {"min", 60000}, {"s", 1000}};
    for (size_t i = 0; i < sizeof u / sizeof *u; i++) {
        if (ms < u[i].ms)
            continue;
        int64_t a = ms / u[i].ms, rest = ms % u[i].ms;
        if (i + 1 < sizeof u / sizeof *u && rest >= u[i + 1].ms)
            snprintf(out, n, "%lld %s %lld %s", (long long)a, u[i].unit,
                     (long long)(rest / u[i + 1].ms), u[i + 1].unit);
        else
            snprintf(out, n, "%lld %s", (long long)a, u[i].unit);
        return;
    }
    snprintf(out, n, "%lld ms", (long long)ms);
}

bool cli_ms_human(char *out, size_t n, int64_t ms)
{
    if (ms >= 0 && ms <= INT64_C(1) << 53) {
        cli_time_human(out, n, ms * 1000);
        return true;
    }
    snprintf(out, n, "%lld ms since 1970, out of range", (long long)ms);
    return false;
}

void cli_wait_text(char *out, size_t n, int64_t wake_ms, const char *event,
                   int64_t now_us)
{
    char when[64] = "", left[40] = "";
    if (wake_ms && cli_ms_human(when, sizeof when, wake_ms) &&
        wake_ms > now_us / 1000)
        cli_span_text(left, sizeof left, wake_ms - now_us / 1000);
    if (event && wake_ms)
        snprintf(out, n, "for the event '%s' until %s (%s%s)", event, when,
                 *left ? "in " : "due", left);
    else if (event)
        snprintf(out, n, "for the event '%s'", event);
    else
        snprintf(out, n, "until %s (%s%s)", when, *left ? "in " : "due", left);
}
