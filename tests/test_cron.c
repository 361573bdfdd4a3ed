/*
 * test_cron.c -- base/cron.c and base/tz.c: the syntax, what is refused
 * and why, the rules where a zone's clock jumps, and zone files that are
 * corrupt or hostile.  (tests/cron_diff.js compares the fire times of a
 * thousand random expressions with the npm package cron-parser.)
 */
#include "support.h"

#include "cron.h"
#include "tz.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Unix milliseconds of a UTC date and time. */
static int64_t utc(int y, unsigned mo, unsigned d, int h, int mi)
{
    return (pl__days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60) * 1000;
}

static int64_t next(const char *expr, const char *zone, int64_t after)
{
    int64_t t = 0;
    int rc = pl__cron_next_fire(&t, expr, zone, after);
    cr_assert_eq(rc, PL_OK, "%s in %s: %s", expr, zone, pl_errmsg());
    return t;
}

static void refused(const char *expr, const char *words)
{
    pl__cron c;
    cr_assert_eq(pl__cron_parse(&c, expr), PL_EINVAL, "'%s' accepted", expr);
    cr_assert(strstr(pl_errmsg(), words), "'%s': message '%s' lacks '%s'", expr,
              pl_errmsg(), words);
}

Test(cron, syntax)
{
    int64_t t0 = utc(2026, 1, 1, 0, 0); /* a Thursday */
    cr_assert_eq(next("* * * * *", "UTC", t0), utc(2026, 1, 1, 0, 1));
    cr_assert_eq(next("*/15 * * * *", "UTC", t0 + 1), utc(2026, 1, 1, 0, 15));
    cr_assert_eq(next("5-10/5,50 3 * * *", "UTC", t0), utc(2026, 1, 1, 3, 5));
    cr_assert_eq(next("55/3 3 * * *", "UTC", utc(2026, 1, 1, 3, 55)),
                 utc(2026, 1, 1, 3, 58));
    /* names, any case; 0 and 7 are Sunday */
    cr_assert_eq(next("0 9 * feb-Mar *", "UTC", t0), utc(2026, 2, 1, 9, 0));
    cr_assert_eq(next("0 9 * * SUN", "UTC", t0), utc(2026, 1, 4, 9, 0));
    cr_assert_eq(next("0 9 * * 7", "UTC", t0), utc(2026, 1, 4, 9, 0));
    cr_assert_eq(next("0 9 * * 0", "UTC", t0), utc(2026, 1, 4, 9, 0));
    cr_assert_eq(next("0 9 * * 5-7", "UTC", t0), utc(2026, 1, 2, 9, 0));
    /* both day fields restricted: either; one of them: that one */
    cr_assert_eq(next("0 0 15 * mon", "UTC", t0), utc(2026, 1, 5, 0, 0));
    cr_assert_eq(next("0 0 15 * *", "UTC", t0), utc(2026, 1, 15, 0, 0));
    cr_assert_eq(next("0 0 */1 * mon", "UTC", t0), utc(2026, 1, 2, 0, 0));
    /* a value twice is the value once */
    cr_assert_eq(next("1-5,3 0 * * *", "UTC", t0), utc(2026, 1, 1, 0, 1));
    /* the 29th of February: in leap years alone */
    cr_assert_eq(next("0 0 29 2 *", "UTC", t0), utc(2028, 2, 29, 0, 0));
    cr_assert_eq(next("@daily", "UTC", t0), utc(2026, 1, 2, 0, 0));
    cr_assert_eq(next("@weekly", "UTC", t0), utc(2026, 1, 4, 0, 0));
    cr_assert_eq(next("@yearly", "UTC", t0), utc(2027, 1, 1, 0, 0));
    cr_assert_eq(next("@monthly", "UTC", t0), utc(2026, 2, 1, 0, 0));
    cr_assert_eq(next("@hourly", "UTC", t0), utc(2026, 1, 1, 1, 0));
    /* nicknames in any case, as names are */
    cr_assert_eq(next("@YEARLY", "UTC", t0), utc(2027, 1, 1, 0, 0));
    cr_assert_eq(next("@Annually", "UTC", t0), utc(2027, 1, 1, 0, 0));
    cr_assert_eq(next(" @DAILY ", "UTC", t0), utc(2026, 1, 2, 0, 0));
    cr_assert_eq(next("@hOuRlY", "UTC", t0), utc(2026, 1, 1, 1, 0));
    /* the guide's: 9-17/2 is 9, 11, ..., 17; the 1st and every Monday */
    cr_assert_eq(next("0 9-17/2 * * *", "UTC", utc(2026, 1, 1, 15, 0)),
                 utc(2026, 1, 1, 17, 0));
    cr_assert_eq(next("0 9-17/2 * * *", "UTC", utc(2026, 1, 1, 17, 0)),
                 utc(2026, 1, 2, 9, 0));
    cr_assert_eq(next("0 0 1 * MON", "UTC", t0), utc(2026, 1, 5, 0, 0));
    cr_assert_eq(next("0 0 1 * MON", "UTC", utc(2026, 1, 26, 0, 0)),
                 utc(2026, 2, 1, 0, 0));
    cr_assert_eq(next("  0\t12  *  *  * ", "UTC", t0), utc(2026, 1, 1, 12, 0));
    /* strictly after the start */
    cr_assert_eq(next("0 0 * * *", "UTC", utc(2026, 1, 2, 0, 0)),
                 utc(2026, 1, 3, 0, 0));
    cr_assert_eq(next("0 0 * * *", "UTC", utc(2026, 1, 2, 0, 0) - 1),
                 utc(2026, 1, 2, 0, 0));
}

Test(cron, refused_with_reasons)
{
    refused("", "0 fields");
    refused("* * * *", "4 fields");
    refused("0 * * * * *", "more than 5 fields");
    refused("60 * * * *", "minute field: 60 is out of range 0-59");
    refused("* 24 * * *", "hour field: 24");
    refused("* * 0 * *", "day of month field: 0");
    refused("* * * 13 *", "month field: 13");
    refused("* * * * 8", "day of week field: 8");
    refused("5-1 * * * *", "runs backwards");
    refused("*/0 * * * *", "a step must be a number");
    refused("*/ * * * *", "a step must be a number");
    refused("1,,2 * * * *", "empty list item");
    refused("1, * * * *", "empty list item");
    refused("* * * foo *", "unknown name 'foo'");
    refused("* * * * monday", "unknown name");
    refused("jan * * * *", "only months and days have names");
    refused("L * * * *", "minute field");
    refused("* * L * *", "day of month field");
    refused("* * * * 5#2", "day of week field: cannot read");
    refused("*-5 * * * *", "minute field: cannot read");
    refused("1/2/3 * * * *", "minute field: cannot read");
    refused("-1 * * * *", "expected a number");
    refused("99999999999999999999 * * * *", "out of range");
    refused("0 0 30 2 *", "never fires: day 30");
    refused("0 0 31 4,6,9,11 *", "never fires: day 31");
    refused("@reboot", "is not one of @yearly");
    refused("@daily x", "is not one of");
    refused("@YEARLYX", "is not one of");
    refused("@", "is not one of");
    char big[PL__CRON_MAX + 2];
    memset(big, '*', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    refused(big, "longer than 1024 bytes");
    /* restricted days of week keep an impossible day of month usable */
    pl__cron c;
    cr_assert_eq(pl__cron_parse(&c, "0 0 30 2 mon"), PL_OK);
    int64_t t;
    cr_assert_eq(pl__cron_next_fire(&t, "* * * * *", "UTC", -1), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "from 1970 to 9000"));
}

Test(cron, new_york_clock_changes)
{
    /* 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z). */
    int64_t before = utc(2026, 3, 8, 0, 0);
    /* a skipped time fires read with the offset before: 02:30 EST */
    cr_assert_eq(next("30 2 * * *", "America/New_York", before),
                 utc(2026, 3, 8, 7, 30));
    /* 02:30 and 03:30 are one instant, fired once, then the next day */
    int64_t t = next("30 2,3 * * *", "America/New_York", before);
    cr_assert_eq(t, utc(2026, 3, 8, 7, 30));
    cr_assert_eq(next("30 2,3 * * *", "America/New_York", t),
                 utc(2026, 3, 9, 6, 30));
    /* every hour: the skipped hour is not fired */
    cr_assert_eq(next("30 * * * *", "America/New_York", utc(2026, 3, 8, 6, 30)),
                 utc(2026, 3, 8, 7, 30));
    /* 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z): 01:30 twice. */
    before = utc(2026, 11, 1, 0, 0);
    t = next("30 1 * * *", "America/New_York", before);
    cr_assert_eq(t, utc(2026, 11, 1, 5, 30)); /* the first, EDT */
    cr_assert_eq(next("30 1 * * *", "America/New_York", t),
                 utc(2026, 11, 2, 6, 30));
    t = next("30 * * * *", "America/New_York", utc(2026, 11, 1, 5, 0));
    cr_assert_eq(t, utc(2026, 11, 1, 5, 30));
    cr_assert_eq(next("30 * * * *", "America/New_York", t),
                 utc(2026, 11, 1, 6, 30)); /* the second, EST */
    /* far past the file's table: the footer's rule (2100-03-14) */
    cr_assert_eq(next("30 2 14 3 *", "America/New_York", utc(2100, 1, 1, 0, 0)),
                 utc(2100, 3, 14, 7, 30));
}

Test(cron, other_zones)
{
    /* Europe/London: 01:00 GMT becomes 02:00 BST on 2026-03-29 */
    cr_assert_eq(next("15 1 * * *", "Europe/London", utc(2026, 3, 29, 0, 0)),
                 utc(2026, 3, 29, 1, 15));
    /* Lord Howe: half an hour, 02:00 +1030 becomes 02:30 +11 (2026-10-04) */
    cr_assert_eq(next("15 2 * * *", "Australia/Lord_Howe",
                      utc(2026, 10, 3, 12, 0)),
                 utc(2026, 10, 3, 15, 45));
    cr_assert_eq(next("37 * * * *", "Australia/Lord_Howe",
                      utc(2026, 10, 3, 15, 30)),
                 utc(2026, 10, 3, 15, 37)); /* 02:37 +11 exists */
    /* a zone without changes, half an hour off UTC */
    cr_assert_eq(next("0 9 * * *", "Asia/Kolkata", utc(2026, 1, 1, 0, 0)),
                 utc(2026, 1, 1, 3, 30));
}

Test(tz, names_refused)
{
    const char *bad[] = {"",
                         "../etc/passwd",
                         "/etc/localtime",
                         "Europe/../../etc",
                         "Europe//London",
                         "-x",
                         "Europe/-x",
                         "a b",
                         "Europe/London/"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl__tz *z = (pl__tz *)1;
        cr_assert_eq(pl__tz_load(&z, bad[i], NULL), PL_EINVAL, "%s", bad[i]);
        cr_assert_null(z);
        cr_assert(strstr(pl_errmsg(), "not a tz database name"), "%s: %s",
                  bad[i], pl_errmsg());
    }
    pl__tz *z = NULL;
    cr_assert_eq(pl__tz_load(&z, "Mars/Olympus_Mons", NULL), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "not found"), "%s", pl_errmsg());
    /* a directory is no zone */
    cr_assert_eq(pl__tz_load(&z, "Europe", NULL), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "is not a TZif file"), "%s", pl_errmsg());
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    uint8_t *data = malloc(1 << 18);
    *len = fread(data, 1, 1 << 18, f);
    fclose(f);
    return data;
}

/* Every truncation and every single-byte change of a real zone file is
 * read or refused with a message: never a crash (the sanitizer build
 * checks), never an answer outside the offsets a zone may have. */
Test(tz, corrupt_files)
{
    size_t len;
    uint8_t *data = slurp("/usr/share/zoneinfo/Australia/Lord_Howe", &len);
    pl__tz *z = NULL;
    cr_assert_eq(pl__tz_parse(&z, "x", data, len), PL_OK, "%s", pl_errmsg());
    pl__tz_free(z);
    for (size_t n = 0; n < len; n++) {
        int rc = pl__tz_parse(&z, "x", data, n);
        cr_assert_eq(rc, PL_EINVAL, "%zu bytes read", n);
        cr_assert_null(z);
    }
    uint8_t *copy = malloc(len);
    unsigned refused = 0;
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(copy, data, len);
            copy[i] ^= (uint8_t)(1u << bit);
            int rc = pl__tz_parse(&z, "x", copy, len);
            if (rc) {
                cr_assert_eq(rc, PL_EINVAL);
                cr_assert(strstr(pl_errmsg(), "zone 'x'"), "%s", pl_errmsg());
                refused++;
                continue;
            }
            int64_t t;
            for (int64_t s = 0; s < 4000000000LL; s += 97000000) {
                int32_t off = pl__tz_offset(z, s);
                cr_assert(off >= -26 * 3600 && off <= 26 * 3600);
                if (pl__tz_next_change(z, s, &t))
                    cr_assert_gt(t, s);
            }
            pl__cron c;
            cr_assert_eq(pl__cron_parse(&c, "*/7 1-3 * * *"), PL_OK);
            int rc2 = pl__cron_next(&t, &c, z, 1700000000000);
            cr_assert(rc2 == PL_OK || rc2 == PL_ENOTFOUND);
            pl__tz_free(z);
        }
    }
    cr_assert_gt(refused, 0);
    /* a file bigger than any zone, and one whose counts lie */
    uint8_t hdr[44] = {'T', 'Z', 'i', 'f', '2'};
    hdr[35] = 0xff; /* timecnt 255 ... */
    hdr[34] = 0xff; /* ... 65535, past the limit */
    cr_assert_eq(pl__tz_parse(&z, "x", hdr, sizeof hdr), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "counts are out of range"), "%s",
              pl_errmsg());
    free(copy);
    free(data);
}

/* ---- the zone cache ------------------------------------------------------ */

/* Write @p len bytes of @p data as zone file @p name of @p dir, by a new
 * file renamed over the old one (as the tz database's updates do). */
static void put_zone(const char *dir, const char *name, const uint8_t *data,
                     size_t len)
{
    char tmp[4400], path[4400];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(tmp, "wb");
    cr_assert_not_null(f, "%s", tmp);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(tmp, path), 0);
}

static int32_t offset_at(const char *name, const char *dir, int64_t t,
                         pl__tz **held)
{
    pl__tz *z = NULL;
    cr_assert_eq(pl__tz_load(&z, name, dir), PL_OK, "%s", pl_errmsg());
    int32_t off = pl__tz_offset(z, t);
    if (held)
        *held = z;
    else
        pl__tz_free(z);
    return off;
}

/* A zone is read once and kept, parsed, until its file changes: then the
 * new file is what a load gives, and a broken one is refused, not served
 * from the cache. */
Test(tz, a_zone_is_cached_until_its_file_changes)
{
    pl__tz_cache_clear();
    const char *dir = t_tmpdir();
    size_t ny_len, tk_len;
    uint8_t *ny = slurp("/usr/share/zoneinfo/America/New_York", &ny_len);
    uint8_t *tk = slurp("/usr/share/zoneinfo/Asia/Tokyo", &tk_len);
    cr_assert_neq(ny_len, tk_len);
    put_zone(dir, "Here", ny, ny_len);
    int64_t jan = utc(2026, 1, 15, 12, 0) / 1000;
    pl__tz *a = NULL, *b = NULL;
    cr_expect_eq(offset_at("Here", dir, jan, &a), -5 * 3600);
    cr_expect_eq(pl__tz_cache_count(), 1);
    cr_expect_eq(offset_at("Here", dir, jan, &b), -5 * 3600);
    cr_expect_eq(a, b, "the second load is the cached zone");
    cr_expect_eq(pl__tz_cache_count(), 1);
    /* the file replaced: read again; the zones handed out stay valid */
    put_zone(dir, "Here", tk, tk_len);
    pl__tz *c = NULL;
    cr_expect_eq(offset_at("Here", dir, jan, &c), 9 * 3600);
    cr_expect_neq(c, a);
    cr_expect_eq(pl__tz_offset(a, jan), -5 * 3600);
    pl__tz_free(a);
    pl__tz_free(b);
    pl__tz_free(c);
    /* broken on disk: refused, though a good copy was cached */
    put_zone(dir, "Here", tk, 30);
    pl__tz *z = NULL;
    cr_expect_eq(pl__tz_load(&z, "Here", dir), PL_EINVAL);
    cr_expect_null(z);
    /* and gone: refused too */
    char path[4400];
    snprintf(path, sizeof path, "%s/Here", dir);
    cr_assert_eq(unlink(path), 0);
    cr_expect_eq(pl__tz_load(&z, "Here", dir), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "not found"), "%s", pl_errmsg());
    pl__tz_cache_clear();
    cr_expect_eq(pl__tz_cache_count(), 0);
    free(ny);
    free(tk);
}

/* The cache holds at most 32 zones, the least recently used making room;
 * an evicted zone still held by a caller stays valid until freed. */
Test(tz, the_zone_cache_is_bounded)
{
    pl__tz_cache_clear();
    const char *dir = t_tmpdir();
    size_t len;
    uint8_t *ny = slurp("/usr/share/zoneinfo/America/New_York", &len);
    int64_t jul = utc(2026, 7, 1, 12, 0) / 1000;
    pl__tz *first = NULL;
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "Z%02d", i);
        put_zone(dir, name, ny, len);
        cr_expect_eq(offset_at(name, dir, jul, i ? NULL : &first), -4 * 3600);
        cr_expect_leq(pl__tz_cache_count(), 32);
    }
    cr_expect_eq(pl__tz_cache_count(), 32);
    cr_expect_eq(pl__tz_offset(first, jul), -4 * 3600, "evicted, still held");
    pl__tz_free(first);
    /* UTC reads no file and is not cached */
    cr_expect_eq(offset_at("UTC", NULL, jul, NULL), 0);
    pl__tz_cache_clear();
    free(ny);
}

typedef struct tz_thread_arg {
    const char *dir;
    int id;
    int bad; /* wrong answers seen */
} tz_thread_arg;

static void *tz_loader(void *arg)
{
    tz_thread_arg *a = arg;
    int64_t jan = utc(2026, 1, 15, 12, 0) / 1000;
    for (int i = 0; i < 2000; i++) {
        char name[16];
        snprintf(name, sizeof name, "T%02d", (i + a->id) % 40);
        pl__tz *z = NULL;
        if (pl__tz_load(&z, name, a->dir) || pl__tz_offset(z, jan) != 3600)
            a->bad++;
        pl__tz_free(z);
    }
    return NULL;
}

/* Threads load, use and free zones at once, more zones than the cache
 * holds, so that entries are replaced under them (the sanitizer builds
 * check the memory). */
Test(tz, threads_share_the_zone_cache)
{
    pl__tz_cache_clear();
    const char *dir = t_tmpdir();
    size_t len;
    uint8_t *paris = slurp("/usr/share/zoneinfo/Europe/Paris", &len);
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "T%02d", i);
        put_zone(dir, name, paris, len);
    }
    pthread_t th[4];
    tz_thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (tz_thread_arg){dir, i * 7, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, tz_loader, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(args[i].bad, 0, "thread %d", i);
    }
    pl__tz_cache_clear();
    free(paris);
}
