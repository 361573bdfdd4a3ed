/*
 * tz.h -- time zones from the system's tz database, read without the C
 * library's localtime() and without setenv("TZ"): a zone is a value that
 * any thread may use at once.
 *
 * A zone is "UTC" or a name of the tz database ("Europe/London"), read
 * from the TZif file of that name under /usr/share/zoneinfo (RFC 8536,
 * versions 1 to 4).  The reader is bounded and checks every count, index,
 * offset and the order of the transitions: a corrupt or hostile file is
 * PL_EINVAL with a message naming the zone and what is wrong, never
 * undefined behaviour.  Past its last transition a zone follows the POSIX
 * TZ rule in the file's footer ("EST5EDT,M3.2.0,M11.1.0").  Leap-second
 * ("right/") zones are refused.
 *
 * Times are seconds since the Unix epoch (UTC); an offset is the seconds
 * to add to UTC to get the local wall clock (east positive).
 */
#ifndef PL_TZ_H
#define PL_TZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct pl__tz pl__tz;

/* The longest zone name accepted. */
#define PL__TZ_NAME_MAX 128

/*
 * Load the zone @p name: "UTC" (no file is read), or a tz database name
 * (letters, digits, '_', '-', '+', '/' between parts; no "." or ".."
 * part) read from the directory @p dir (NULL for /usr/share/zoneinfo).
 * The caller owns *@p out; free it with pl__tz_free().
 * @return PL_OK; PL_EINVAL (a bad name, no such zone, a corrupt file);
 *         PL_ENOMEM.  The message names the zone.
 */
PL__HIDDEN int pl__tz_load(pl__tz **out, const char *name,
                           const char *dir) PL__MUST_CHECK;

/* The same from the bytes of a TZif file (what the tests and the fuzz
 * corpus give), @p name only for messages. */
PL__HIDDEN int pl__tz_parse(pl__tz **out, const char *name, const uint8_t *data,
                            size_t len) PL__MUST_CHECK;

/* Drop the zone: a zone pl__tz_load() read from a file is shared with
 * its cache (see THE CACHE in tz.c) and freed with its last reference. */
PL__HIDDEN void pl__tz_free(pl__tz *z);

/* The zones the cache holds (at most 32), and emptying it (the tests). */
PL__HIDDEN size_t pl__tz_cache_count(void);
PL__HIDDEN void pl__tz_cache_clear(void);

/* The zone's name as loaded. Borrowed: valid until pl__tz_free(). */
PL__HIDDEN const char *pl__tz_name(const pl__tz *z);

/* The offset in effect at the instant @p t. */
PL__HIDDEN int32_t pl__tz_offset(const pl__tz *z, int64_t t);

/*
 * The first instant after @p t at which the offset changes: true and
 * *@p next, or false when it never changes again.
 */
PL__HIDDEN bool pl__tz_next_change(const pl__tz *z, int64_t t, int64_t *next);

/*
 * The instants whose local wall clock reads @p local (seconds since the
 * epoch, counted as if the zone were UTC): 1 (the usual case), 2 (the
 * local time is repeated when the clock is set back; earlier first), or 0
 * (it is skipped when the clock is set forward; then *@p gap_start is the
 * instant the clock jumped, so that @p local read with the offset before
 * the jump is local - (offset before)).
 * @return the number of instants written to @p out.
 */
PL__HIDDEN int pl__tz_instants(const pl__tz *z, int64_t local, int64_t out[2],
                               int32_t *offset_before);

/* Civil dates in the proleptic Gregorian calendar. */
PL__HIDDEN int64_t pl__days_from_civil(int64_t y, unsigned m, unsigned d);
PL__HIDDEN void pl__civil_from_days(int64_t z, int64_t *y, unsigned *m,
                                    unsigned *d);

#endif
