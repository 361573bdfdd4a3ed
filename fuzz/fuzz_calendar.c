/*
 * fuzz_calendar.c -- schedules' calendar specs: a cron expression
 * (base/cron.c) and a zone's TZif bytes (base/tz.c), and the fire times of
 * the one in the other.  The first 8 bytes give the start time (the top
 * bit of the 8th: taken as it is, else brought into 1970..9000), then the
 * expression up to a '\n', then the zone file (none: UTC; '@' and a name:
 * that zone of the system's tz database).  Whatever the bytes: a status,
 * PL_EINVAL with a message for what is refused (the zone named in it),
 * never a crash; a zone loaded by name is the one asked, under the
 * database's folder (no '.', no leading '/').  A zone that reads keeps its offsets within
 * 26 hours, names its next change after the time asked, and its instants
 * of a wall-clock time read that time.  A parsed expression gives, from
 * the start, fire times that each come strictly after the one before,
 * eight in a row (in UTC always one, and it is a minute the expression
 * names, by the C library's calendar, with no minute it names between the
 * start and it when they are a day apart or less); a start out of range
 * is PL_EINVAL.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cron.h"
#include "tz.h"
#include "fuzz.h"

#define AFTER_MAX 221845392000000LL /* 9000-01-01 in Unix milliseconds */
#define OFFSET_MAX (26 * 3600)

/* Does the UTC minute @p s (seconds) match @p c, by gmtime_r()? */
static bool fires_at(const pl__cron *c, int64_t s)
{
    time_t t = (time_t)s;
    struct tm tm;
    CHECK(gmtime_r(&t, &tm) != NULL);
    if (tm.tm_sec || !(c->minutes >> tm.tm_min & 1) ||
        !(c->hours >> tm.tm_hour & 1) || !(c->months >> (tm.tm_mon + 1) & 1))
        return false;
    bool dom = c->mdays >> tm.tm_mday & 1, dow = c->wdays >> tm.tm_wday & 1;
    if (!c->mday_star && !c->wday_star)
        return dom || dow;
    return (c->mday_star || dom) && (c->wday_star || dow);
}

static void check_zone(const pl__tz *z, int64_t from)
{
    for (int64_t s = from - 400 * 86400LL; s < from + 400 * 86400LL;
         s += 29 * 86400LL + 3607) {
        int32_t off = pl__tz_offset(z, s);
        CHECK(off >= -OFFSET_MAX && off <= OFFSET_MAX);
        int64_t next;
        if (pl__tz_next_change(z, s, &next))
            CHECK(next > s);
        /* the wall clock's time at s, and half an hour either side */
        for (int64_t d = -1800; d <= 1800; d += 1800) {
            int64_t local = s + off + d, at[2];
            int32_t before = 0;
            int n = pl__tz_instants(z, local, at, &before);
            CHECK(n >= 0 && n <= 2);
            for (int i = 0; i < n; i++)
                CHECK(at[i] + pl__tz_offset(z, at[i]) == local);
            CHECK(n < 2 || at[0] < at[1]);
            CHECK(n > 0 || (before >= -OFFSET_MAX && before <= OFFSET_MAX));
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t seed = 0;
    for (int i = 7; i >= 0; i--)
        seed = seed << 8 | data[i];
    int64_t after = data[7] & 0x80 ? (int64_t)seed
                                   : (int64_t)(seed % (uint64_t)AFTER_MAX);
    const char *text = (const char *)data + 8;
    size_t rest = size - 8;
    const char *nl = memchr(text, '\n', rest);
    size_t el = nl ? (size_t)(nl - text) : rest;
    char *expr = malloc(el + 1);
    CHECK(expr != NULL);
    memcpy(expr, text, el);
    expr[el] = '\0';
    const uint8_t *zdata = nl ? (const uint8_t *)nl + 1 : NULL;
    size_t zlen = nl ? rest - el - 1 : 0;

    pl__tz *z = NULL;
    int zrc;
    if (zlen && zdata[0] == '@') { /* a zone by name, read from the system */
        char *name = malloc(zlen);
        CHECK(name != NULL);
        memcpy(name, zdata + 1, zlen - 1);
        name[zlen - 1] = '\0';
        zrc = pl__tz_load(&z, name, NULL);
        CHECK(zrc == PL_OK || zrc == PL_EINVAL || zrc == PL_ENOMEM);
        /* one that loads is the name asked, under the zones' folder */
        CHECK(zrc || (!strchr(name, '.') && name[0] != '/' &&
                      strcmp(pl__tz_name(z), name) == 0));
        free(name);
    } else {
        zrc = zlen ? pl__tz_parse(&z, "x", zdata, zlen)
                   : pl__tz_load(&z, "UTC", NULL);
        CHECK(zrc == PL_OK || zrc == PL_EINVAL || zrc == PL_ENOMEM);
        CHECK(zrc != PL_EINVAL || strstr(pl_errmsg(), "zone 'x'"));
    }
    CHECK(!zrc == !!z);
    if (z)
        check_zone(z,
                   after >= 0 && after < AFTER_MAX ? after / 1000 : 1700000000);

    pl__cron c;
    int rc = pl__cron_parse(&c, expr);
    CHECK(rc == PL_OK || rc == PL_EINVAL);
    CHECK(rc == PL_OK || *pl_errmsg());
    if (rc == PL_OK && z) {
        bool utc = !zlen;
        int64_t t = after, n = 0;
        for (int k = 0; k < 8; k++) {
            rc = pl__cron_next(&n, &c, z, t);
            if (t < 0 || t >= AFTER_MAX) {
                CHECK(rc == PL_EINVAL);
                break;
            }
            CHECK(rc == PL_OK || (!utc && rc == PL_ENOTFOUND));
            if (rc)
                break;
            CHECK(n > t);
            if (utc) {
                CHECK(n % 60000 == 0 && fires_at(&c, n / 1000));
                /* none missed: no minute it names in between */
                int64_t m = (t / 60000 + 1) * 60;
                if (n / 1000 - m <= 86400)
                    for (; m < n / 1000; m += 60)
                        CHECK(m * 1000 <= t || !fires_at(&c, m));
            }
            t = n;
        }
    }
    pl__tz_free(z);
    free(expr);
    return 0;
}
