/*
 * retry_after.c -- a server's Retry-After header as milliseconds to wait.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llm.h"

/* ------------------------------------------------------------------------ */
/* Retry-After                                                              */
/* ------------------------------------------------------------------------ */

/*
 * RFC 9110 10.2.3: Retry-After = HTTP-date / delay-seconds.  An HTTP-date
 * is one of (5.6.7), and a recipient takes all three:
 *
 *   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"     the form to send
 *   RFC 850      "Sunday, 06-Nov-94 08:49:37 GMT"    obsolete
 *   asctime      "Sun Nov  6 08:49:37 1994"          obsolete
 *
 * Parsed here byte by byte, in English and UTC whatever the locale (no
 * strptime); the day of the week must be a real one but is not checked
 * against the date.  A two-digit RFC 850 year more than 50 years ahead is
 * taken as the last century's.
 */

static const char *const g_wkday[7] = {"Mon", "Tue", "Wed", "Thu",
                                       "Fri", "Sat", "Sun"};
static const char *const g_weekday[7] = {"Monday",   "Tuesday", "Wednesday",
                                         "Thursday", "Friday",  "Saturday",
                                         "Sunday"};
static const char *const g_month[12] = {"Jan", "Feb", "Mar", "Apr",
                                        "May", "Jun", "Jul", "Aug",
                                        "Sep", "Oct", "Nov", "Dec"};

/* Match one of @p names (exact case) at *p; its index, or -1. */
static int word(const char **p, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (strncmp(*p, names[i], l) == 0) {
            *p += l;
            return i;
        }
    }
    return -1;
}

/* Exactly @p n digits at *p (a leading space allowed for asctime's day
 * when @p pad); -1 if not. */
static long digits(const char **p, int n, bool pad)
{
    long v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*p)[i];
        if (pad && i == 0 && c == ' ')
            continue;
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *p += n;
    return v;
}

static bool lit(const char **p, const char *s)
{
    size_t l = strlen(s);
    if (strncmp(*p, s, l) != 0)
        return false;
    *p += l;
    return true;
}

/* "HH:MM:SS" as seconds of the day, or -1. */
static long clock_of(const char **p)
{
    long h = digits(p, 2, false);
    if (h < 0 || !lit(p, ":"))
        return -1;
    long m = digits(p, 2, false);
    if (m < 0 || !lit(p, ":"))
        return -1;
    long s = digits(p, 2, false);
    if (s < 0 || h > 23 || m > 59 || s > 60) /* 60: a leap second */
        return -1;
    return h * 3600 + m * 60 + (s > 59 ? 59 : s);
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; m 1..12). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool date_ok(long y, int m, long d)
{
    static const int mdays[12] = {31, 29, 31, 30, 31, 30,
                                  31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return y >= 1900 && m >= 1 && m <= 12 && d >= 1 && d <= mdays[m - 1] &&
           !(m == 2 && d == 29 && !leap);
}

/* An HTTP-date as Unix seconds; false if @p s is not one. */
static bool http_date(int64_t *out, const char *s, int64_t now_s)
{
    const char *p = s;
    long day, year, secs;
    int mon;
    if (word(&p, g_weekday, 7) >= 0) { /* RFC 850 */
        if (!lit(&p, ", ") || (day = digits(&p, 2, false)) < 0 ||
            !lit(&p, "-") || (mon = word(&p, g_month, 12)) < 0 ||
            !lit(&p, "-") || (year = digits(&p, 2, false)) < 0 ||
            !lit(&p, " ") || (secs = clock_of(&p)) < 0 || !lit(&p, " GMT"))
            return false;
        long this_year = (long)(1970 + now_s / 31556952);
        year += 2000;
        if (year > this_year + 50)
            year -= 100;
    } else if (word(&p, g_wkday, 7) >= 0) {
        if (lit(&p, ", ")) { /* IMF-fixdate */
            if ((day = digits(&p, 2, false)) < 0 || !lit(&p, " ") ||
                (mon = word(&p, g_month, 12)) < 0 || !lit(&p, " ") ||
                (year = digits(&p, 4, false)) < 0 || !lit(&p, " ") ||
                (secs = clock_of(&p)) < 0 || !lit(&p, " GMT"))
                return false;
        } else { /* asctime */
            if (!lit(&p, " ") || (mon = word(&p, g_month, 12)) < 0 ||
                !lit(&p, " ") || (day = digits(&p, 2, true)) < 0 ||
                !lit(&p, " ") || (secs = clock_of(&p)) < 0 || !lit(&p, " ") ||
                (year = digits(&p, 4, false)) < 0)
                return false;
        }
    } else {
        return false;
    }
    if (*p || !date_ok(year, mon + 1, day))
        return false;
    *out = days_from_civil(year, mon + 1, (int)day) * 86400 + secs;
    return true;
}

int pl__llm_retry_after(long *out_ms, const char *value, int64_t now_ms)
{
    *out_ms = -1;
    const char *v = value ? value : "";
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r' ||
                 v[n - 1] == '\n'))
        n--;
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    char buf[48];
    if (n == 0 || n >= sizeof buf)
        return pl__err(PL_EINVAL, "Retry-After: %s",
                       n ? "too long for a date or a delay" : "empty");
    memcpy(buf, v, n);
    buf[n] = '\0';
    if (buf[0] >= '0' && buf[0] <= '9') { /* delay-seconds = 1*DIGIT */
        long secs = 0; /* stops growing past a day: no overflow */
        for (const char *p = buf; *p; p++) {
            if (*p < '0' || *p > '9')
                return pl__err(PL_EINVAL,
                               "Retry-After: '%s' is neither a number of "
                               "seconds nor an HTTP date",
                               buf);
            if (secs <= RETRY_AFTER_MAX_MS / 1000)
                secs = secs * 10 + (*p - '0');
        }
        *out_ms = secs >= RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS
                                                    : secs * 1000;
        return PL_OK;
    }
    int64_t t;
    if (!http_date(&t, buf, now_ms / 1000))
        return pl__err(PL_EINVAL,
                       "Retry-After: '%s' is neither a number of seconds nor "
                       "an HTTP date (IMF-fixdate, RFC 850 or asctime)",
                       buf);
    int64_t wait = t * 1000 - now_ms;
    *out_ms = wait <= 0                   ? 0
              : wait > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS
                                          : (long)wait;
    return PL_OK;
}
