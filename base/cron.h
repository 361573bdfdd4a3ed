/*
 * cron.h -- cron expressions and their next fire time in a time zone.
 *
 * An expression has five fields, separated by blanks:
 *
 *   minute 0-59   hour 0-23   day of month 1-31   month 1-12 or JAN-DEC
 *   day of week 0-7 or SUN-SAT (0 and 7 are Sunday)
 *
 * A field is a list of items separated by ','; an item is '*' (or '?'),
 * a value, a range a-b (a <= b), any of these followed by /step (a/step
 * means a to the field's maximum), names case-insensitive.  Or the whole
 * expression is one of @yearly (@annually), @monthly, @weekly, @daily,
 * @hourly, case-insensitive too (as names are; cron-parser takes them in
 * lower case only).  A day matches when its month matches and: when both day
 * fields are restricted (neither is written as a bare '*'), either one
 * matches; else the restricted one (or any day).  An expression whose
 * day of month never occurs in its months (0 0 30 2 *) is refused.
 *
 * Time zones (tz.h): a minute is fired at the instant the zone's wall
 * clock reads it.  Where the clock jumps:
 *   - set forward (a local time that does not exist): when the hour field
 *     names hours, a time in the gap fires as read with the offset before
 *     the jump (02:30 on a day New York skips 02:00-03:00 fires at 03:30
 *     EDT); when the hour field is every hour, the times the gap skips
 *     are not fired (an hourly job runs once less);
 *   - set back (a local time that happens twice): when the hour field
 *     names hours, it fires once, at the first occurrence; when it is
 *     every hour, at both (an every-15-minutes job keeps its rhythm).
 * Two times that fall on one instant fire once.  This is the behaviour of
 * the npm package cron-parser, which the suite checks it against.
 */
#ifndef PL_CRON_H
#define PL_CRON_H

#include <stdbool.h>
#include <stdint.h>

#include "tz.h"
#include "util.h"

/* The longest expression accepted, in bytes. */
#define PL__CRON_MAX 1024

typedef struct pl__cron {
    uint64_t minutes;          /* bit n: minute n */
    uint32_t hours;            /* bit n: hour n */
    uint32_t mdays;            /* bit n: day n of the month, 1..31 */
    uint16_t months;           /* bit n: month n, 1..12 */
    uint8_t wdays;             /* bit n: weekday n, 0 (Sunday)..6 */
    bool mday_star, wday_star; /* the field is a bare '*' */
} pl__cron;

/*
 * Parse @p expr into @p out.
 * @return PL_OK; PL_EINVAL with a message naming the field and what is
 *         wrong with it.
 */
PL__HIDDEN int pl__cron_parse(pl__cron *out, const char *expr) PL__MUST_CHECK;

/*
 * The first fire time of @p c in zone @p z strictly after @p after_ms
 * (Unix milliseconds, from 0 to the year 9000): *@p out_ms.
 * @return PL_OK; PL_EINVAL (@p after_ms out of range); PL_ENOTFOUND
 *         (no fire time within the next ten years, which a parsed
 *         expression always has).
 */
PL__HIDDEN int pl__cron_next(int64_t *out_ms, const pl__cron *c,
                             const pl__tz *z, int64_t after_ms) PL__MUST_CHECK;

/* The latest time a cron expression is read after: 9000-01-01 in Unix
 * milliseconds (pl__cron_next() takes 0 <= after_ms < this). */
#define PL__CRON_TIME_MAX 221845392000000LL

/* Both in one: parse @p expr, load zone @p zone (NULL: UTC), and give
 * the first fire time after @p after_ms. */
PL__HIDDEN int pl__cron_next_fire(int64_t *out_ms, const char *expr,
                                  const char *zone,
                                  int64_t after_ms) PL__MUST_CHECK;

#endif
