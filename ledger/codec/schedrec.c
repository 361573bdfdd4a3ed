/*
 * schedrec.c -- the schedule record: a schedule's definition and where its
 * ticks have got to, stored under its name (see SCHEDULES in store.h).
 *
 * A msgpack map with short keys, read by the checked reader (mp_read.c);
 * unknown keys are skipped, so fields can be added without a version bump.
 *
 *   | key      | msgpack type | meaning                                    |
 *   |----------|--------------|--------------------------------------------|
 *   | v        | uint         | format version: 1, or 2 with run options   |
 *   | cron     | str          | the cron expression (base/cron.h)          |
 *   | zone     | str          | "UTC" or a tz database name                |
 *   | policy   | str          | the root action of each run                |
 *   | payload  | str          | its payload: JSON text of an object        |
 *   | overlap  | uint         | pl_schedule_overlap                        |
 *   | catchup  | uint         | pl_schedule_catch_up                       |
 *   | max      | uint         | PL_CATCH_UP_ALL: at most this many ticks   |
 *   | created  | int          | when it was put, Unix ms                   |
 *   | cursor   | int          | the ticks at or before it (Unix ms) are    |
 *   |          |              | handled: started or skipped                |
 *   | last     | str          | the id of the last run it started, or ""   |
 *   | prio     | int          | v 2, optional: each run's priority,        |
 *   |          |              | nonzero, -PL_PRIORITY_MAX..PL_PRIORITY_MAX |
 *   | key      | str          | v 2, optional: each run's concurrency key  |
 *   |          |              | (1..PL_MAX_FLOW_KEY bytes), with limit     |
 *   | limit    | uint         | with key: its limit, 1..INT32_MAX          |
 *   | deadline | int          | v 2, optional: each run's deadline, this   |
 *   |          |              | many ms after its tick (1..INT64_MAX / 4)  |
 *   | sum      | bin (32)     | last: the checksum                         |
 *
 * RUN OPTIONS (prio, key and limit, deadline) are written only when set,
 * and a record that has one is version 2: a schedule without them keeps
 * the version 1 record of the builds before them (whose records read with
 * none), and a build that predates them refuses one that has them
 * (PL_EVERSION: it fires the other schedules) rather than skip the keys as
 * unknown and start runs without the key's limit or the deadline.  A
 * version 2 record without a run option, a version 1 record with one, a
 * value out of its range, a key without its limit or a limit without its
 * key is PL_ECORRUPT.
 *
 * CHECKSUM: as run records' (runrec.c), SHA-256 of "policyledger/runrec"
 * NUL, 'c', the schedule's name, NUL and the bytes before "sum": a changed
 * byte, or a record under another name, is PL_ECORRUPT naming it.
 */
#include "schedrec.h"

#include "hash.h"
#include "mp.h"
#include "record.h"

#include <stdlib.h>

#define STR_MAX 1024 /* cron, zone, run id: far more than they may be */

bool pl__sched_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > PL__SCHED_NAME_MAX)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

int pl__sched_rec_encode(pl__buf *out, const char *name, const pl__sched_rec *r)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    bool key = r->flow_key != NULL;
    uint32_t opts = (r->priority != 0) + 2 * key + (r->deadline_in_ms != 0);
    int rc = msgpack_pack_map(&pk, 12 + opts);
    rc = rc ? rc : pack_cstr(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, opts ? 2 : 1);
    rc = rc ? rc : pack_cstr(&pk, "cron");
    rc = rc ? rc : pack_cstr(&pk, r->cron);
    rc = rc ? rc : pack_cstr(&pk, "zone");
    rc = rc ? rc : pack_cstr(&pk, r->zone);
    rc = rc ? rc : pack_cstr(&pk, "policy");
    rc = rc ? rc : pack_cstr(&pk, r->policy);
    rc = rc ? rc : pack_cstr(&pk, "payload");
    rc = rc ? rc : pack_cstr(&pk, r->payload);
    rc = rc ? rc : pack_cstr(&pk, "overlap");
    rc = rc ? rc : msgpack_pack_uint32(&pk, r->overlap);
    rc = rc ? rc : pack_cstr(&pk, "catchup");
    rc = rc ? rc : msgpack_pack_uint32(&pk, r->catch_up);
    rc = rc ? rc : pack_cstr(&pk, "max");
    rc = rc ? rc : msgpack_pack_uint32(&pk, r->catch_up_max);
    rc = rc ? rc : pack_cstr(&pk, "created");
    rc = rc ? rc : msgpack_pack_int64(&pk, r->created_ms);
    rc = rc ? rc : pack_cstr(&pk, "cursor");
    rc = rc ? rc : msgpack_pack_int64(&pk, r->cursor_ms);
    rc = rc ? rc : pack_cstr(&pk, "last");
    rc = rc ? rc : pack_cstr(&pk, r->last_run ? r->last_run : "");
    if (r->priority) {
        rc = rc ? rc : pack_cstr(&pk, "prio");
        rc = rc ? rc : msgpack_pack_int32(&pk, r->priority);
    }
    if (key) {
        rc = rc ? rc : pack_cstr(&pk, "key");
        rc = rc ? rc : pack_cstr(&pk, r->flow_key);
        rc = rc ? rc : pack_cstr(&pk, "limit");
        rc = rc ? rc : msgpack_pack_uint32(&pk, r->flow_limit);
    }
    if (r->deadline_in_ms) {
        rc = rc ? rc : pack_cstr(&pk, "deadline");
        rc = rc ? rc : msgpack_pack_int64(&pk, r->deadline_in_ms);
    }
    uint8_t sum[PL_HASH_LEN];
    if (!rc && (rc = pl__runrec_sum('c', name, out->data + start,
                                    out->len - start, sum))) {
        out->len = start;
        return rc;
    }
    rc = rc ? rc : pack_cstr(&pk, "sum");
    rc = rc ? rc : msgpack_pack_bin_with_body(&pk, sum, PL_HASH_LEN);
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding schedule '%s'", name);
    }
    return PL_OK;
}

static bool key_is(const uint8_t *k, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(k, want, n) == 0;
}

/* A str of at most @p max bytes, without NUL, copied into *out. */
static int read_str(rd *r, size_t max, char **out)
{
    const uint8_t *v;
    size_t n;
    if (rd_bytes(r, T_STR, &v, &n) || n > max || memchr(v, 0, n) || *out)
        return PL_ECORRUPT;
    if (!(*out = pl__strndup((const char *)v, n)))
        return PL_ENOMEM;
    return PL_OK;
}

static int read_small(rd *r, uint64_t max, unsigned *out)
{
    uint64_t v;
    if (rd_uint(r, &v) || v > max)
        return PL_ECORRUPT;
    *out = (unsigned)v;
    return PL_OK;
}

int pl__sched_rec_decode(pl__sched_rec *out, const char *name,
                         const uint8_t *data, size_t len)
{
    memset(out, 0, sizeof *out);
    int rc = PL_ECORRUPT;
    rd r = {data, data + len};
    head h;
    if (!data || !len || pl__mp_walk(&r, 1, MODE_ANY, NULL) || r.p != r.end)
        goto bad;
    r.p = data;
    if (rd_head(&r, &h) || h.t != T_MAP || h.u > 64)
        goto bad;
    bool have_v = false, have_sum = false;
    unsigned version = 0;
    unsigned seen = 0;
    for (uint64_t i = 0; i < h.u; i++) {
        const uint8_t *k, *at = r.p;
        size_t kn;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (key_is(k, kn, "v")) {
            uint64_t v;
            if (rd_uint(&r, &v))
                goto bad;
            if (v < 1 || v > PL__SCHEDREC_VERSION) {
                pl__sched_rec_clear(out);
                return pl__err(PL_EVERSION,
                               "schedule '%s' has format version %llu; this "
                               "build reads versions 1 to %d",
                               name, (unsigned long long)v,
                               PL__SCHEDREC_VERSION);
            }
            have_v = true;
            version = (unsigned)v;
        } else if (key_is(k, kn, "sum")) {
            const uint8_t *v;
            size_t vn;
            uint8_t want[PL_HASH_LEN];
            if (i + 1 != h.u || rd_bytes(&r, T_BIN, &v, &vn) ||
                vn != PL_HASH_LEN)
                goto bad;
            if ((rc = pl__runrec_sum('c', name, data, (size_t)(at - data),
                                     want)))
                goto fail;
            rc = PL_ECORRUPT;
            if (memcmp(want, v, PL_HASH_LEN) != 0) {
                pl__sched_rec_clear(out);
                return pl__err(PL_ECORRUPT,
                               "schedule '%s' does not match its checksum "
                               "(the record changed, or belongs to another "
                               "schedule)",
                               name);
            }
            have_sum = true;
        } else {
            static const char *const keys[] = {
                "cron",    "zone", "policy",  "payload", "overlap",
                "catchup", "max",  "created", "cursor",  "last",
                "prio",    "key",  "limit",   "deadline"};
            int64_t iv = 0;
            int which = -1, st = PL_OK;
            for (int j = 0; j < (int)PL__ARRAY_LEN(keys); j++)
                if (key_is(k, kn, keys[j]))
                    which = j;
            switch (which) {
            case 0: st = read_str(&r, STR_MAX, &out->cron); break;
            case 1: st = read_str(&r, STR_MAX, &out->zone); break;
            case 2:
                st = read_str(&r, PL_MAX_NAME, &out->policy);
                if (!st && !pl__actor_ok((const uint8_t *)out->policy,
                                         strlen(out->policy)))
                    st = PL_ECORRUPT;
                break;
            case 3:
                st = read_str(&r, PL__SCHED_PAYLOAD_MAX, &out->payload);
                break;
            case 4: st = read_small(&r, 1, &out->overlap); break;
            case 5: st = read_small(&r, 2, &out->catch_up); break;
            case 6: st = read_small(&r, 100000, &out->catch_up_max); break;
            case 7: st = rd_int(&r, &out->created_ms); break;
            case 8: st = rd_int(&r, &out->cursor_ms); break;
            case 9: st = read_str(&r, PL_MAX_RUN_ID, &out->last_run); break;
            case 10:
                st = rd_int(&r, &iv) || !iv || iv < -PL_PRIORITY_MAX ||
                             iv > PL_PRIORITY_MAX
                         ? PL_ECORRUPT
                         : PL_OK;
                out->priority = (int32_t)iv;
                break;
            case 11:
                st = read_str(&r, PL_MAX_FLOW_KEY, &out->flow_key);
                if (!st && !*out->flow_key)
                    st = PL_ECORRUPT;
                break;
            case 12:
                st = read_small(&r, INT32_MAX, &out->flow_limit);
                if (!st && !out->flow_limit)
                    st = PL_ECORRUPT;
                break;
            case 13:
                st = rd_int(&r, &iv) || iv < 1 || iv > PL__SCHED_DEADLINE_MAX
                         ? PL_ECORRUPT
                         : PL_OK;
                out->deadline_in_ms = iv;
                break;
            default: /* a field of a later build */
                st = pl__mp_walk(&r, 2, MODE_ANY, NULL) ? PL_ECORRUPT : PL_OK;
            }
            if (st == PL_ENOMEM) {
                rc = pl__err(PL_ENOMEM, "out of memory reading schedule '%s'",
                             name);
                goto fail;
            }
            if (st)
                goto bad;
            if (which >= 0) {
                if (seen >> which & 1)
                    goto bad;
                seen |= 1u << which;
            }
        }
    }
    /* the ten fields every build writes; a key and its limit together; run
     * options in a version 2 record, and only there */
    if (!have_v || !have_sum || (seen & ((1u << 10) - 1)) != (1u << 10) - 1 ||
        !(seen >> 11 & 1) != !(seen >> 12 & 1) ||
        (version == 2) != (seen >> 10 != 0))
        goto bad;
    return PL_OK;
bad:
    rc = pl__err(PL_ECORRUPT, "schedule '%s' has a malformed record", name);
fail:
    pl__sched_rec_clear(out);
    return rc;
}

void pl__sched_rec_clear(pl__sched_rec *r)
{
    free(r->cron);
    free(r->zone);
    free(r->policy);
    free(r->payload);
    free(r->last_run);
    free(r->flow_key);
    memset(r, 0, sizeof *r);
}
