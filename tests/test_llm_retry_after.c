/*
 * test_llm_retry_after.c -- Retry-After values (policies/llm/transport.c):
 * seconds and the three HTTP-date forms of RFC 9110, dates past and
 * future, huge values, and garbage refused with a message.
 */
#include "support.h"

#include <string.h>

#include "../policies/llm/llm.h"

/* 1994-11-06 08:49:37 UTC, RFC 9110's example, in Unix milliseconds. */
#define EXAMPLE_MS 784111777000LL

static long ok(const char *v, int64_t now_ms)
{
    long ms = -2;
    cr_assert_eq(pl__llm_retry_after(&ms, v, now_ms), PL_OK, "'%s': %s", v,
                 pl_errmsg());
    return ms;
}

Test(llm_retry_after, seconds)
{
    cr_expect_eq(ok("0", 0), 0);
    cr_expect_eq(ok("1", 0), 1000);
    cr_expect_eq(ok(" 120\r\n", 0), 120000, "surrounding space is no part");
    cr_expect_eq(ok("86400", 0), 86400000L);
    cr_expect_eq(ok("86401", 0), 86400000L, "at most a day");
    cr_expect_eq(ok("99999999999999999999999999999999999", 0), 86400000L,
                 "huge: no overflow");
}

Test(llm_retry_after, the_three_date_forms)
{
    const char *forms[] = {"Sun, 06 Nov 1994 08:49:37 GMT",
                           "Sunday, 06-Nov-94 08:49:37 GMT",
                           "Sun Nov  6 08:49:37 1994"};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(ok(forms[i], EXAMPLE_MS - 2000), 2000, "%s", forms[i]);
        cr_expect_eq(ok(forms[i], EXAMPLE_MS - 1500), 1500, "%s", forms[i]);
    }
    cr_expect_eq(ok("Thu, 01 Jan 1970 00:00:05 GMT", 0), 5000);
    cr_expect_eq(ok("Tue, 29 Feb 2028 00:00:00 GMT", 1835395200000LL - 1), 1,
                 "a leap day");
    cr_expect_eq(ok("Fri, 31 Dec 2027 23:59:60 GMT", 1830297599000LL - 3000),
                 3000, "a leap second counts as :59");
    /* RFC 850's two-digit year: within 50 years ahead, else last century */
    cr_expect_eq(ok("Monday, 01-Jan-24 00:00:00 GMT", 1704067200000LL - 10),
                 10);
}

Test(llm_retry_after, a_past_date_is_now)
{
    cr_expect_eq(ok("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE_MS), 0);
    cr_expect_eq(ok("Sun, 06 Nov 1994 08:49:37 GMT", EXAMPLE_MS + 3600000), 0);
}

Test(llm_retry_after, a_far_date_is_a_day)
{
    cr_expect_eq(ok("Fri, 31 Dec 9999 23:59:59 GMT", 0), 86400000L);
}

Test(llm_retry_after, garbage_is_refused_clearly)
{
    const char *bad[] = {
        "",
        "   ",
        "-1",
        "1.5",
        "12abc",
        "soon",
        "Sun, 06 Nov 1994 08:49:37",       /* no GMT */
        "Sun, 06 Nov 1994 08:49:37 UTC",   /* not GMT */
        "sun, 06 nov 1994 08:49:37 GMT",   /* case matters */
        "Sun, 6 Nov 1994 08:49:37 GMT",    /* two digits */
        "Sun, 31 Feb 1994 08:49:37 GMT",   /* no such day */
        "Sun, 29 Feb 1900 08:49:37 GMT",   /* not a leap year */
        "Sun, 06 Nov 1994 24:00:00 GMT",   /* no such hour */
        "Sun, 06 Nov 1994 08:60:00 GMT",   /* no such minute */
        "Sun, 06 Xyz 1994 08:49:37 GMT",   /* no such month */
        "Sux, 06 Nov 1994 08:49:37 GMT",   /* no such day of the week */
        "Sun, 06 Nov 1994 08:49:37 GMT x", /* trailing bytes */
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun, 06 Nov 0094 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT Sun, 06 Nov 1994 08:49:37 GMT",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long ms = 5;
        cr_expect_eq(pl__llm_retry_after(&ms, bad[i], 0), PL_EINVAL, "'%s'",
                     bad[i]);
        cr_expect_eq(ms, -1, "'%s'", bad[i]);
        cr_expect(strstr(pl_errmsg(), "Retry-After"), "%s", pl_errmsg());
    }
    long ms;
    cr_expect_eq(pl__llm_retry_after(&ms, NULL, 0), PL_EINVAL);
}
