/*
 * tz.c -- the TZif reader and the POSIX TZ rules of its footer.
 *
 * A TZif file (RFC 8536), as far as it is read here (integers big-endian):
 *
 *   offset  size         field
 *   0       4            magic "TZif"
 *   4       1            version: 0, '2', '3' or '4'
 *   5       15           unused
 *   20      6 x 4        isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
 *   44      timecnt x T  transition times (T = 4 in the v1 block, 8 after)
 *           timecnt      the local time type index of each transition
 *           typecnt x 6  local time types: utoff (int32), isdst, desigidx
 *           charcnt      designations (NUL-terminated strings)
 *           leapcnt x (T + 4), isstdcnt, isutcnt
 *
 * Version 2 and later repeat the header and the block with 64-bit times,
 * then a footer "\n<POSIX TZ string>\n" for the instants past the last
 * transition.  Only that second block (or the v1 block of a version-1
 * file) is kept.  The limits below bound every count; the transitions
 * must ascend strictly, every index name a type, every offset lie within
 * a day and two hours of UTC.
 *
 * THE CACHE.  A zone read from a file is kept, parsed, for the next load
 * of the same path: a schedule's every firing loads its zone.  At most
 * TZ_CACHE_MAX zones are kept (the one used least recently makes room);
 * an entry is used only while the file's identity (device, inode, size,
 * modification time) is the one it was read with, so a zone updated on
 * disk is read again.  A zone is shared: a count of references, one the
 * cache's, one each load's, and freed with the last.  One mutex guards the
 * cache; no file is read while it is held.
 */
#include "tz.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TZ_FILE_MAX (256u * 1024u)
#define TZ_TIMES_MAX 4096u
#define TZ_TYPES_MAX 256u
#define TZ_CHARS_MAX 1024u
#define TZ_OFFSET_MAX (26 * 3600)
/* Transitions beyond these are no zone's (2^40 s is the year 36812). */
#define TZ_TIME_MIN (-((int64_t)1 << 60))
#define TZ_TIME_MAX ((int64_t)1 << 40)

/* A POSIX TZ rule's date: Jn, n or Mm.w.d, and its time of day. */
typedef struct tz_date {
    char kind; /* 'J', 'n' or 'M' */
    int n, m, w, d;
    int32_t secs;
} tz_date;

typedef struct tz_rule {
    int32_t std_off, dst_off;
    bool has_dst;
    tz_date start, end;
} tz_rule;

struct pl__tz {
    char name[PL__TZ_NAME_MAX + 1];
    size_t ntimes, ntypes;
    int64_t *times;
    uint8_t *idx;
    int32_t *offs;
    bool has_rule;
    tz_rule rule;
    atomic_int refs; /* 0: not shared (made by pl__tz_parse()) */
};

/* ---- civil dates --------------------------------------------------------- */

int64_t pl__days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void pl__civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
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

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* ---- the POSIX TZ rule --------------------------------------------------- */

/* <name> or at least three letters. */
static const char *rule_name(const char *p)
{
    if (*p == '<') {
        const char *q = p + 1;
        while (*q && *q != '>' && q - p < 64)
            q++;
        return *q == '>' && q - p >= 4 ? q + 1 : NULL;
    }
    const char *q = p;
    while ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z'))
        q++;
    return q - p >= 3 ? q : NULL;
}

/* [+-]h[h[h]][:mm[:ss]], hours up to @p hmax; *secs as written. */
static const char *rule_time(const char *p, int hmax, int32_t *secs)
{
    int sign = 1;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    int v[3] = {0, 0, 0};
    for (int part = 0; part < 3; part++) {
        if (part && *p != ':')
            break;
        if (part)
            p++;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 3) {
            v[part] = v[part] * 10 + (*p++ - '0');
            digits++;
        }
        if (!digits || (part && (digits != 2 || v[part] > 59)))
            return NULL;
    }
    if (v[0] > hmax)
        return NULL;
    *secs = sign * (v[0] * 3600 + v[1] * 60 + v[2]);
    return p;
}

static const char *rule_num(const char *p, int lo, int hi, int *out)
{
    int v = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 4) {
        v = v * 10 + (*p++ - '0');
        digits++;
    }
    if (!digits || v < lo || v > hi)
        return NULL;
    *out = v;
    return p;
}

static const char *rule_date(const char *p, tz_date *dt)
{
    if (*p == 'J') {
        dt->kind = 'J';
        p = rule_num(p + 1, 1, 365, &dt->n);
    } else if (*p == 'M') {
        dt->kind = 'M';
        p = rule_num(p + 1, 1, 12, &dt->m);
        if (p && *p == '.')
            p = rule_num(p + 1, 1, 5, &dt->w);
        else
            p = NULL;
        if (p && *p == '.')
            p = rule_num(p + 1, 0, 6, &dt->d);
        else
            p = NULL;
    } else {
        dt->kind = 'n';
        p = rule_num(p, 0, 365, &dt->n);
    }
    dt->secs = 2 * 3600;
    if (p && *p == '/')
        p = rule_time(p + 1, 167, &dt->secs);
    return p;
}

/* Parse the footer's TZ string (empty: no rule). */
static int rule_parse(pl__tz *z, const char *s)
{
    tz_rule *r = &z->rule;
    const char *p = rule_name(s);
    int32_t off;
    if (!p || !(p = rule_time(p, 24, &off)))
        goto bad;
    r->std_off = r->dst_off = -off;
    if (*p) {
        if (!(p = rule_name(p)))
            goto bad;
        r->has_dst = true;
        r->dst_off = r->std_off + 3600;
        if (*p && *p != ',') {
            if (!(p = rule_time(p, 24, &off)))
                goto bad;
            r->dst_off = -off;
        }
        if (*p != ',' || !(p = rule_date(p + 1, &r->start)) || *p != ',' ||
            !(p = rule_date(p + 1, &r->end)))
            goto bad;
    }
    if (*p)
        goto bad;
    z->has_rule = true;
    return PL_OK;
bad:
    return pl__err(PL_EINVAL,
                   "zone '%s': the file's rule '%s' is not a POSIX TZ "
                   "string this reader knows",
                   z->name, s);
}

/* The instant, local seconds of year @p y, a rule date names. */
static int64_t rule_local(const tz_date *dt, int64_t y)
{
    int64_t jan1 = pl__days_from_civil(y, 1, 1);
    int64_t day;
    if (dt->kind == 'J')
        day = jan1 + dt->n - 1 + (is_leap(y) && dt->n >= 60);
    else if (dt->kind == 'n')
        day = jan1 + dt->n;
    else {
        static const unsigned mdays[12] = {31, 28, 31, 30, 31, 30,
                                           31, 31, 30, 31, 30, 31};
        int64_t first = pl__days_from_civil(y, (unsigned)dt->m, 1);
        int wday = (int)((first % 7 + 11) % 7); /* 1970-01-01 was a Thursday */
        int64_t d = first + (dt->d - wday + 7) % 7 + (dt->w - 1) * 7;
        unsigned len = mdays[dt->m - 1] + (dt->m == 2 && is_leap(y));
        if (d >= first + len)
            d -= 7;
        day = d;
    }
    return day * 86400 + dt->secs;
}

/* The rule's changes in year @p y: at[0] to DST, at[1] back. */
static void rule_changes(const tz_rule *r, int64_t y, int64_t at[2])
{
    at[0] = rule_local(&r->start, y) - r->std_off;
    at[1] = rule_local(&r->end, y) - r->dst_off;
}

static int64_t year_of(int64_t t)
{
    int64_t y;
    unsigned m, d;
    pl__civil_from_days(floor_div(t, 86400), &y, &m, &d);
    return y;
}

static int32_t rule_offset(const tz_rule *r, int64_t t)
{
    if (!r->has_dst)
        return r->std_off;
    /* The last change at or before t, among three years' changes. */
    int64_t y = year_of(t), best = INT64_MIN;
    int32_t off = r->std_off;
    for (int64_t k = y - 1; k <= y + 1; k++) {
        int64_t at[2];
        rule_changes(r, k, at);
        for (int i = 0; i < 2; i++)
            if (at[i] <= t && at[i] >= best) {
                best = at[i];
                off = i == 0 ? r->dst_off : r->std_off;
            }
    }
    return off;
}

static bool rule_next(const tz_rule *r, int64_t t, int64_t *next)
{
    if (!r->has_dst || r->dst_off == r->std_off)
        return false;
    int64_t y = year_of(t), best = INT64_MAX;
    for (int64_t k = y - 1; k <= y + 1; k++) {
        int64_t at[2];
        rule_changes(r, k, at);
        for (int i = 0; i < 2; i++)
            if (at[i] > t && at[i] < best)
                best = at[i];
    }
    *next = best;
    return best != INT64_MAX;
}

/* ---- lookups ------------------------------------------------------------- */

/* The index of the last transition at or before t, or -1. */
static ptrdiff_t last_at(const pl__tz *z, int64_t t)
{
    size_t lo = 0, hi = z->ntimes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->times[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

int32_t pl__tz_offset(const pl__tz *z, int64_t t)
{
    ptrdiff_t i = last_at(z, t);
    if (z->has_rule && (z->ntimes == 0 || i == (ptrdiff_t)z->ntimes - 1))
        return rule_offset(&z->rule, t);
    return z->offs[i < 0 ? 0 : z->idx[i]];
}

bool pl__tz_next_change(const pl__tz *z, int64_t t, int64_t *next)
{
    int32_t now = pl__tz_offset(z, t);
    for (size_t i = (size_t)(last_at(z, t) + 1); i < z->ntimes; i++)
        if (z->offs[z->idx[i]] != now) {
            *next = z->times[i];
            return true;
        } else {
            t = z->times[i];
        }
    if (!z->has_rule)
        return false;
    /* A table's last transition may leave an offset the rule then keeps. */
    for (int guard = 0; guard < 4; guard++) {
        if (!rule_next(&z->rule, t, next))
            return false;
        if (pl__tz_offset(z, *next) != now)
            return true;
        t = *next;
    }
    return false;
}

int pl__tz_instants(const pl__tz *z, int64_t local, int64_t out[2],
                    int32_t *offset_before)
{
    /* Every instant t with t + offset(t) == local lies within the widest
     * offsets of it; the offsets in force there are few. */
    int64_t lo = local - TZ_OFFSET_MAX, hi = local + TZ_OFFSET_MAX;
    int32_t offs[8];
    int64_t at[8];
    int n = 0;
    offs[n] = pl__tz_offset(z, lo);
    at[n++] = lo;
    int64_t t = lo, next;
    while (n < 8 && pl__tz_next_change(z, t, &next) && next <= hi) {
        offs[n] = pl__tz_offset(z, next);
        at[n++] = next;
        t = next;
    }
    int found = 0;
    for (int i = 0; i < n && found < 2; i++) {
        int64_t cand = local - offs[i];
        if (pl__tz_offset(z, cand) != offs[i])
            continue;
        if (found == 1 && out[0] == cand)
            continue;
        out[found++] = cand;
    }
    if (found == 2 && out[1] < out[0]) {
        int64_t x = out[0];
        out[0] = out[1];
        out[1] = x;
    }
    if (found == 0) {
        /* The jump that skipped @p local: the offset before it. */
        *offset_before = offs[0];
        for (int i = 1; i < n; i++)
            if (at[i] + offs[i - 1] <= local && local < at[i] + offs[i])
                *offset_before = offs[i - 1];
    }
    return found;
}

/* ---- the file ------------------------------------------------------------ */

typedef struct tz_counts {
    uint32_t isut, isstd, leap, time, type, chr;
} tz_counts;

static int read_header(const pl__tz *z, const uint8_t *p, size_t left,
                       tz_counts *c, int *version)
{
    if (left < 44 || memcmp(p, "TZif", 4) != 0)
        return pl__err(PL_EINVAL, "zone '%s': not a TZif file", z->name);
    if (p[4] != 0 && (p[4] < '2' || p[4] > '4'))
        return pl__err(PL_EINVAL, "zone '%s': TZif version %u is unknown",
                       z->name, p[4]);
    *version = p[4] ? p[4] - '0' : 1;
    c->isut = pl__get_be32(p + 20);
    c->isstd = pl__get_be32(p + 24);
    c->leap = pl__get_be32(p + 28);
    c->time = pl__get_be32(p + 32);
    c->type = pl__get_be32(p + 36);
    c->chr = pl__get_be32(p + 40);
    if (c->time > TZ_TIMES_MAX || c->type == 0 || c->type > TZ_TYPES_MAX ||
        c->chr == 0 || c->chr > TZ_CHARS_MAX || c->leap > TZ_TIMES_MAX ||
        (c->isut && c->isut != c->type) || (c->isstd && c->isstd != c->type))
        return pl__err(PL_EINVAL,
                       "zone '%s': the TZif header's counts are out of "
                       "range",
                       z->name);
    return PL_OK;
}

static size_t block_size(const tz_counts *c, size_t tsize)
{
    return (size_t)c->time * (tsize + 1) + (size_t)c->type * 6 + c->chr +
           (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

static int read_block(pl__tz *z, const uint8_t *p, const tz_counts *c,
                      size_t tsize)
{
    if (c->leap)
        return pl__err(PL_EINVAL,
                       "zone '%s': leap-second zones are not supported",
                       z->name);
    z->times = malloc(((size_t)c->time + 1) * sizeof *z->times);
    z->idx = malloc((size_t)c->time + 1);
    z->offs = malloc((size_t)c->type * sizeof *z->offs);
    if (!z->times || !z->idx || !z->offs)
        return pl__err(PL_ENOMEM, "out of memory reading zone '%s'", z->name);
    z->ntimes = c->time;
    z->ntypes = c->type;
    for (size_t i = 0; i < c->time; i++) {
        z->times[i] = tsize == 8 ? (int64_t)pl__get_be64(p + i * 8)
                                 : (int32_t)pl__get_be32(p + i * 4);
        if (z->times[i] < TZ_TIME_MIN || z->times[i] > TZ_TIME_MAX ||
            (i && z->times[i] <= z->times[i - 1]))
            return pl__err(PL_EINVAL,
                           "zone '%s': the transitions are out of range or "
                           "not in order",
                           z->name);
    }
    p += (size_t)c->time * tsize;
    for (size_t i = 0; i < c->time; i++)
        if ((z->idx[i] = p[i]) >= c->type)
            return pl__err(PL_EINVAL,
                           "zone '%s': a transition names a local time "
                           "type the file lacks",
                           z->name);
    p += c->time;
    for (size_t i = 0; i < c->type; i++) {
        int32_t off = (int32_t)pl__get_be32(p + i * 6);
        if (off < -TZ_OFFSET_MAX || off > TZ_OFFSET_MAX || p[i * 6 + 4] > 1 ||
            p[i * 6 + 5] >= c->chr)
            return pl__err(PL_EINVAL,
                           "zone '%s': a local time type is out of range",
                           z->name);
        z->offs[i] = off;
    }
    return PL_OK;
}

int pl__tz_parse(pl__tz **out, const char *name, const uint8_t *data,
                 size_t len)
{
    *out = NULL;
    pl__tz *z = calloc(1, sizeof *z);
    if (!z)
        return pl__err(PL_ENOMEM, "out of memory reading a zone");
    snprintf(z->name, sizeof z->name, "%s", name);
    tz_counts c = {0};
    int version = 0, rc = read_header(z, data, len, &c, &version);
    if (rc)
        goto done;
    size_t need = 44 + block_size(&c, 4), tsize = 4;
    const uint8_t *p = data + 44;
    if (need > len)
        goto short_file;
    if (version >= 2) {
        int v2 = 0;
        if ((rc = read_header(z, data + need, len - need, &c, &v2)))
            goto done;
        p = data + need + 44;
        need += 44 + block_size(&c, 8);
        tsize = 8;
        if (need > len)
            goto short_file;
    }
    if ((rc = read_block(z, p, &c, tsize)))
        goto done;
    if (version >= 2) {
        /* The footer: "\n" TZ "\n", ending the file. */
        const uint8_t *f = data + need, *end = data + len;
        char rule[128];
        size_t n = 0;
        if (f >= end || *f != '\n')
            goto bad_footer;
        for (f++; f < end && *f != '\n'; f++) {
            if (n + 1 >= sizeof rule || *f < 0x20 || *f > 0x7e)
                goto bad_footer;
            rule[n++] = (char)*f;
        }
        if (f + 1 != end)
            goto bad_footer;
        rule[n] = '\0';
        if (n && (rc = rule_parse(z, rule)))
            goto done;
    }
    *out = z;
    return PL_OK;
short_file:
    rc = pl__err(PL_EINVAL, "zone '%s': the TZif file is truncated", z->name);
    goto done;
bad_footer:
    rc = pl__err(PL_EINVAL, "zone '%s': the TZif file's footer is malformed",
                 z->name);
done:
    pl__tz_free(z);
    return rc;
}

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > PL__TZ_NAME_MAX || name[0] == '/' || name[n - 1] == '/')
        return false;
    for (const char *p = name; *p; p++) {
        char ch = *p;
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9');
        if (!alnum && ch != '_' && ch != '-' && ch != '+' && ch != '/')
            return false;
        if (ch == '/' && p[1] == '/')
            return false;
    }
    /* A part may not start with '-' either (no option-like names). */
    for (const char *p = name; p; p = strchr(p, '/')) {
        p += *p == '/';
        if (*p == '-')
            return false;
    }
    return true;
}

/* ---- the cache ------------------------------------------------------------ */

#define TZ_CACHE_MAX 32

/* What a file is: the cached zone is used only while it is the same. */
typedef struct tz_ident {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} tz_ident;

typedef struct tz_entry {
    char path[PL__TZ_NAME_MAX + 256];
    tz_ident id;
    pl__tz *z;     /* NULL: a free slot */
    uint64_t used; /* when it was last used, by g_tick */
} tz_entry;

static pthread_mutex_t g_tz_mu = PTHREAD_MUTEX_INITIALIZER;
static tz_entry g_tz_cache[TZ_CACHE_MAX];
static uint64_t g_tick;

static tz_ident ident_of(const struct stat *st)
{
    return (tz_ident){st->st_dev, st->st_ino, st->st_size, st->st_mtim};
}

static bool same_ident(const tz_ident *a, const tz_ident *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Drop one reference to @p z: the last frees it. */
static void tz_unref(pl__tz *z)
{
    if (atomic_fetch_sub(&z->refs, 1) != 1)
        return;
    free(z->times);
    free(z->idx);
    free(z->offs);
    free(z);
}

/* The cached zone of @p path if the file is still @p id (a reference the
 * caller owns), else NULL. */
static pl__tz *cache_get(const char *path, const tz_ident *id)
{
    pl__tz *z = NULL;
    pthread_mutex_lock(&g_tz_mu);
    for (size_t i = 0; i < TZ_CACHE_MAX; i++) {
        tz_entry *c = &g_tz_cache[i];
        if (c->z && strcmp(c->path, path) == 0 && same_ident(&c->id, id)) {
            z = c->z;
            atomic_fetch_add(&z->refs, 1);
            c->used = ++g_tick;
            break;
        }
    }
    pthread_mutex_unlock(&g_tz_mu);
    return z;
}

/* Keep @p z, read from @p path as it was @p id, in the cache, in the slot
 * of that path, else a free one, else the least recently used. */
static void cache_put(const char *path, const tz_ident *id, pl__tz *z)
{
    pthread_mutex_lock(&g_tz_mu);
    tz_entry *slot = NULL, *free_slot = NULL, *lru = &g_tz_cache[0];
    for (size_t i = 0; i < TZ_CACHE_MAX && !slot; i++) {
        tz_entry *c = &g_tz_cache[i];
        if (c->z && strcmp(c->path, path) == 0)
            slot = c;
        else if (!c->z && !free_slot)
            free_slot = c;
        else if (c->z && c->used < lru->used)
            lru = c;
    }
    if (!slot)
        slot = free_slot ? free_slot : lru;
    pl__tz *old = slot->z;
    snprintf(slot->path, sizeof slot->path, "%s", path);
    slot->id = *id;
    slot->z = z;
    slot->used = ++g_tick;
    atomic_fetch_add(&z->refs, 1);
    pthread_mutex_unlock(&g_tz_mu);
    if (old)
        tz_unref(old);
}

size_t pl__tz_cache_count(void)
{
    size_t n = 0;
    pthread_mutex_lock(&g_tz_mu);
    for (size_t i = 0; i < TZ_CACHE_MAX; i++)
        n += g_tz_cache[i].z != NULL;
    pthread_mutex_unlock(&g_tz_mu);
    return n;
}

void pl__tz_cache_clear(void)
{
    pl__tz *drop[TZ_CACHE_MAX];
    size_t n = 0;
    pthread_mutex_lock(&g_tz_mu);
    for (size_t i = 0; i < TZ_CACHE_MAX; i++) {
        if (g_tz_cache[i].z)
            drop[n++] = g_tz_cache[i].z;
        g_tz_cache[i].z = NULL;
    }
    pthread_mutex_unlock(&g_tz_mu);
    for (size_t i = 0; i < n; i++)
        tz_unref(drop[i]);
}

/* ---- loading ------------------------------------------------------------- */

int pl__tz_load(pl__tz **out, const char *name, const char *dir)
{
    *out = NULL;
    if (!name || !name_ok(name))
        return pl__err(PL_EINVAL,
                       "time zone '%.64s' is not a tz database name "
                       "(\"UTC\", or like \"Europe/London\")",
                       name ? name : "(null)");
    if (strcmp(name, "UTC") == 0) {
        pl__tz *z = calloc(1, sizeof *z);
        int32_t *offs = malloc(sizeof *offs);
        if (!z || !offs) {
            free(z);
            free(offs);
            return pl__err(PL_ENOMEM, "out of memory making zone UTC");
        }
        snprintf(z->name, sizeof z->name, "UTC");
        offs[0] = 0;
        z->offs = offs;
        z->ntypes = 1;
        *out = z;
        return PL_OK;
    }
    char path[PL__TZ_NAME_MAX + 256];
    int n = snprintf(path, sizeof path, "%s/%s",
                     dir ? dir : "/usr/share/zoneinfo", name);
    if (n < 0 || (size_t)n >= sizeof path)
        return pl__err(PL_EINVAL, "time zone '%s': the path is too long", name);
    struct stat st;
    tz_ident id;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        id = ident_of(&st);
        if ((*out = cache_get(path, &id)))
            return PL_OK;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return pl__err(PL_EINVAL, "time zone '%s' not found (%s: %s)", name,
                       path, strerror(errno));
    uint8_t *data = NULL;
    int rc;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 44 ||
        st.st_size > (off_t)TZ_FILE_MAX) {
        rc = pl__err(PL_EINVAL,
                     "time zone '%s': %s is not a TZif file of at most "
                     "%u bytes",
                     name, path, TZ_FILE_MAX);
        goto done;
    }
    size_t len = (size_t)st.st_size, got = 0;
    if (!(data = malloc(len))) {
        rc = pl__err(PL_ENOMEM, "out of memory reading zone '%s'", name);
        goto done;
    }
    while (got < len) {
        ssize_t r = read(fd, data + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = pl__err(PL_EINVAL, "time zone '%s': cannot read %s", name,
                         path);
            goto done;
        }
        got += (size_t)r;
    }
    rc = pl__tz_parse(out, name, data, len);
    if (!rc) { /* shared from now on: the caller's reference, the cache's */
        atomic_store(&(*out)->refs, 1);
        id = ident_of(&st);
        cache_put(path, &id, *out);
    }
done:
    free(data);
    close(fd);
    return rc;
}

void pl__tz_free(pl__tz *z)
{
    if (!z)
        return;
    if (atomic_load(&z->refs) == 0)
        atomic_store(&z->refs, 1); /* not shared: this is the one */
    tz_unref(z);
}

const char *pl__tz_name(const pl__tz *z) { return z->name; }
