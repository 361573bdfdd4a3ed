/*
 * flowrec.c -- flow control's records (flowrec.h), in msgpack, each a
 * fixed array whose last element is its checksum:
 *
 *   a run's flow (LMDB's `flow` database, key 'r' and the run's number)
 *   | # | field    | type       |                                          |
 *   |---|----------|------------|------------------------------------------|
 *   | 0 | format   | uint       | 1                                        |
 *   | 1 | rank     | int        | the queue's order (Unix us, see flowrec.h)|
 *   | 2 | priority | int        | -PL_PRIORITY_MAX..PL_PRIORITY_MAX        |
 *   | 3 | limit    | uint       | 1..2^32-1 with a key, else 0             |
 *   | 4 | key      | str        | 0..PL__FLOW_KEY_MAX bytes                |
 *   | 5 | sum      | bin (32)   | pl__runrec_sum('f', "#<run number>", the |
 *   |   |          |            | bytes before it)                         |
 *
 *   a rate limit's budget (LMDB: key 'b' and the resource's name)
 *   | 0 | format   | uint       | 1                                        |
 *   | 1 | window   | uint       | the window's length, ms (1 or more)      |
 *   | 2 | limit    | uint       | calls per window (1 or more)             |
 *   | 3 | start    | int        | the current window's start, Unix ms      |
 *   | 4 | count    | uint       | calls admitted in it, at most limit      |
 *   | 5 | sum      | bin (32)   | pl__runrec_sum('b', the resource, the    |
 *   |   |          |            | bytes before it)                         |
 *
 *   a budget in units (LMDB: key 'u', the resource's name's length (u8),
 *   the name, the unit)
 *   | 0 | format   | uint       | 1                                        |
 *   | 1 | window   | uint       | the window's length, ms: 1..2^53         |
 *   | 2 | limit    | uint       | units per window, 1..PL_RATE_MAX_UNITS   |
 *   | 3 | start    | int        | the current window's start, Unix ms,     |
 *   |   |          |            | 0..2^62                                  |
 *   | 4 | used     | uint       | units charged in it, 0..2^62 (may pass   |
 *   |   |          |            | limit: a call's actual use corrected)    |
 *   | 5 | sum      | bin (32)   | pl__runrec_sum('u', "<unit>:<resource>", |
 *   |   |          |            | the bytes before it)                     |
 *
 * The reader is mp.h's checked one: every length is checked against the
 * bytes that remain, and a record longer than its fields is refused.
 */
#include "flowrec.h"
#include "hash.h"
#include "mp.h"

#include <stdio.h>

#define FORMAT 1u
#define FIELDS 6u

static int end_sum(msgpack_packer *pk, pl__buf *out, char kind, const char *id)
{
    uint8_t sum[PL_HASH_LEN];
    int st = pl__runrec_sum(kind, id, out->data, out->len, sum);
    if (st)
        return st;
    if (msgpack_pack_bin_with_body(pk, sum, PL_HASH_LEN))
        return pl__err(PL_ENOMEM, "out of memory");
    return PL_OK;
}

/* Check the sum element (r is at it) against the bytes before it. */
static int check_sum(rd *r, const uint8_t *data, char kind, const char *id,
                     const char *what)
{
    const uint8_t *at = r->p, *v;
    size_t vn;
    uint8_t want[PL_HASH_LEN];
    if (rd_bytes(r, T_BIN, &v, &vn) || vn != PL_HASH_LEN || rd_left(r))
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    int st = pl__runrec_sum(kind, id, data, (size_t)(at - data), want);
    if (st)
        return st;
    if (memcmp(want, v, PL_HASH_LEN) != 0)
        return pl__err(PL_ECORRUPT,
                       "%s does not match its checksum (the record changed, "
                       "or belongs elsewhere)",
                       what);
    return PL_OK;
}

/* The array's head and format; PL_ECORRUPT (no message) if not ours. */
static int open_rec(rd *r, const uint8_t *data, size_t len)
{
    head h;
    uint64_t format;
    r->p = data;
    r->end = data + len;
    if (!data || rd_head(r, &h) || h.t != T_ARRAY || h.u != FIELDS ||
        rd_uint(r, &format) || format != FORMAT)
        return PL_ECORRUPT;
    return PL_OK;
}

int pl__flow_encode(pl__buf *out, uint64_t run, const pl__flow *f)
{
    char id[24];
    snprintf(id, sizeof id, "#%llu", (unsigned long long)run);
    msgpack_packer pk;
    out->len = 0;
    packer_init(&pk, out);
    if (msgpack_pack_array(&pk, FIELDS) || msgpack_pack_uint32(&pk, FORMAT) ||
        msgpack_pack_int64(&pk, f->rank_us) ||
        msgpack_pack_int32(&pk, f->priority) ||
        msgpack_pack_uint32(&pk, f->limit) || pack_cstr(&pk, f->key))
        return pl__err(PL_ENOMEM, "out of memory");
    return end_sum(&pk, out, 'f', id);
}

int pl__flow_decode(pl__flow *out, uint64_t run, const uint8_t *data,
                    size_t len)
{
    char id[24], what[64];
    snprintf(id, sizeof id, "#%llu", (unsigned long long)run);
    snprintf(what, sizeof what, "the queue record of run #%llu",
             (unsigned long long)run);
    rd r;
    int64_t prio;
    uint64_t limit;
    const uint8_t *key;
    size_t klen;
    if (open_rec(&r, data, len) || rd_int(&r, &out->rank_us) ||
        rd_int(&r, &prio) || prio < -PL_PRIORITY_MAX ||
        prio > PL_PRIORITY_MAX || rd_uint(&r, &limit) || limit > UINT32_MAX ||
        rd_bytes(&r, T_STR, &key, &klen) || klen > PL__FLOW_KEY_MAX ||
        (klen > 0) != (limit > 0))
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    out->priority = (int32_t)prio;
    out->limit = (uint32_t)limit;
    memcpy(out->key, key, klen);
    out->key[klen] = '\0';
    return check_sum(&r, data, 'f', id, what);
}

int pl__rate_encode(pl__buf *out, const char *resource,
                    const pl__rate_budget *b)
{
    msgpack_packer pk;
    out->len = 0;
    packer_init(&pk, out);
    if (msgpack_pack_array(&pk, FIELDS) || msgpack_pack_uint32(&pk, FORMAT) ||
        msgpack_pack_uint64(&pk, (uint64_t)b->window_ms) ||
        msgpack_pack_uint32(&pk, b->limit) ||
        msgpack_pack_int64(&pk, b->start_ms) ||
        msgpack_pack_uint32(&pk, b->count))
        return pl__err(PL_ENOMEM, "out of memory");
    return end_sum(&pk, out, 'b', resource);
}

int pl__rate_decode(pl__rate_budget *out, const char *resource,
                    const uint8_t *data, size_t len)
{
    char what[PL__FLOW_KEY_MAX + 64];
    snprintf(what, sizeof what, "the rate budget of '%s'", resource);
    rd r;
    uint64_t window, limit, count;
    if (open_rec(&r, data, len) || rd_uint(&r, &window) || window == 0 ||
        window > INT64_MAX || rd_uint(&r, &limit) || limit == 0 ||
        limit > UINT32_MAX || rd_int(&r, &out->start_ms) ||
        rd_uint(&r, &count) || count > limit)
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    out->window_ms = (int64_t)window;
    out->limit = (uint32_t)limit;
    out->count = (uint32_t)count;
    return check_sum(&r, data, 'b', resource, what);
}

bool pl__rate_admit(pl__rate_budget *b, int64_t window_ms, uint32_t limit,
                    int64_t now_ms, int64_t *retry_at_ms)
{
    int64_t start = now_ms - (now_ms % window_ms + window_ms) % window_ms;
    /* a clock that went back stays in the window the budget counts */
    if (b->window_ms == window_ms && b->limit == limit && b->start_ms > start)
        start = b->start_ms;
    if (b->window_ms != window_ms || b->limit != limit ||
        b->start_ms != start) {
        b->window_ms = window_ms;
        b->limit = limit;
        b->start_ms = start;
        b->count = 0;
    }
    if (b->count < limit) {
        b->count++;
        return true;
    }
    *retry_at_ms = start + window_ms;
    return false;
}

/* ---- budgets in units ----------------------------------------------------- */

static void units_id(char *out, size_t cap, const char *resource,
                     const char *unit)
{
    snprintf(out, cap, "%s:%s", unit, resource);
}

int pl__units_encode(pl__buf *out, const char *resource, const char *unit,
                     const pl__unit_budget *b)
{
    char id[PL__FLOW_KEY_MAX + PL_MAX_RATE_UNIT + 2];
    units_id(id, sizeof id, resource, unit);
    msgpack_packer pk;
    out->len = 0;
    packer_init(&pk, out);
    if (msgpack_pack_array(&pk, FIELDS) || msgpack_pack_uint32(&pk, FORMAT) ||
        msgpack_pack_uint64(&pk, (uint64_t)b->window_ms) ||
        msgpack_pack_uint64(&pk, b->limit) ||
        msgpack_pack_int64(&pk, b->start_ms) ||
        msgpack_pack_uint64(&pk, b->used))
        return pl__err(PL_ENOMEM, "out of memory");
    return end_sum(&pk, out, 'u', id);
}

int pl__units_decode(pl__unit_budget *out, const char *resource,
                     const char *unit, const uint8_t *data, size_t len)
{
    char id[PL__FLOW_KEY_MAX + PL_MAX_RATE_UNIT + 2];
    char what[PL__FLOW_KEY_MAX + PL_MAX_RATE_UNIT + 64];
    units_id(id, sizeof id, resource, unit);
    snprintf(what, sizeof what, "the %s budget of '%s'", unit, resource);
    rd r;
    uint64_t window;
    if (open_rec(&r, data, len) || rd_uint(&r, &window) || window == 0 ||
        window > PL_RATE_MAX_UNITS || rd_uint(&r, &out->limit) ||
        out->limit == 0 || out->limit > PL_RATE_MAX_UNITS ||
        rd_int(&r, &out->start_ms) || out->start_ms < 0 ||
        (uint64_t)out->start_ms > PL__UNITS_USED_MAX ||
        rd_uint(&r, &out->used) || out->used > PL__UNITS_USED_MAX)
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    out->window_ms = (int64_t)window;
    return check_sum(&r, data, 'u', id, what);
}

/* The start of the window @p now_ms is in, for budget @p b: a clock that
 * went back stays in the window the budget counts.  A budget of another
 * window length, or of an earlier window, starts afresh. */
static int64_t units_window(pl__unit_budget *b, int64_t window_ms,
                            int64_t now_ms)
{
    int64_t start = now_ms - (now_ms % window_ms + window_ms) % window_ms;
    if (b->window_ms == window_ms && b->start_ms > start)
        start = b->start_ms;
    if (b->window_ms != window_ms || b->start_ms != start) {
        b->window_ms = window_ms;
        b->start_ms = start;
        b->used = 0;
    }
    return start;
}

static uint64_t units_add(uint64_t used, uint64_t n)
{
    return n > PL__UNITS_USED_MAX - used ? PL__UNITS_USED_MAX : used + n;
}

bool pl__units_admit(pl__unit_budget *b, int64_t window_ms, uint64_t limit,
                     uint64_t amount, int64_t now_ms, pl__units_grant *g)
{
    pl__unit_budget was = *b;
    int64_t start = units_window(b, window_ms, now_ms);
    b->limit = limit;
    *g = (pl__units_grant){.at_ms = now_ms, .start_ms = start};
    if (amount <= limit && b->used <= limit - amount) {
        b->used += amount;
        g->admitted = true;
    } else {
        g->retry_at_ms = start + window_ms;
    }
    g->used = b->used;
    return memcmp(&was, b, sizeof was) != 0;
}

bool pl__units_settle(pl__unit_budget *b, int64_t window_ms, uint64_t limit,
                      int64_t start_ms, int64_t delta, int64_t now_ms,
                      pl__units_grant *g)
{
    pl__unit_budget was = *b;
    int64_t start = units_window(b, window_ms, now_ms);
    b->limit = limit;
    *g = (pl__units_grant){.at_ms = now_ms, .start_ms = start};
    if (delta > 0) {
        b->used = units_add(b->used, (uint64_t)delta);
        g->admitted = true;
    } else if (delta < 0 && start == start_ms) {
        uint64_t back = (uint64_t)(-(delta + 1)) + 1; /* no overflow */
        b->used = back >= b->used ? 0 : b->used - back;
        g->admitted = true;
    }
    g->used = b->used;
    return memcmp(&was, b, sizeof was) != 0;
}
