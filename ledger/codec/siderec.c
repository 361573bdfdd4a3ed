/*
 * siderec.c -- the records kept beside a run's own (runrec.c): what is
 * delivered to its inbox, its timer, and, once it is deleted, its
 * tombstone and the purge record of its steps.  Each is checksummed as a
 * run record is (runrec.c, CHECKSUM), with a kind of its own, and bound to
 * the run's id.
 *
 * TOMBSTONES (stored under a deleted run's id, in place of its records;
 * checksummed, kind 'd', bound to the id)
 *
 *   | key     | msgpack type | meaning                                     |
 *   |---------|--------------|---------------------------------------------|
 *   | v       | uint         | format version (1)                          |
 *   | status  | uint         | the final pl_run_status it was deleted in   |
 *   | head    | bin (32)     | optional: its head when deleted             |
 *   | policy  | str          | its root policy                             |
 *   | created | int          | when it started, Unix us                    |
 *   | deleted | int          | when it was deleted, Unix us                |
 *   | expires | int          | when the tombstone is forgotten, Unix us    |
 *   | sum     | bin (32)     | last: the checksum                          |
 *
 * PURGE (stored under a deleted run's number while its steps are removed;
 * kind 'p', bound to the run's id): {"v": 1, "num": the number, "id": the
 * run's id, "sum"}.  A purge record that does not name its own number is
 * PL_ECORRUPT: no step is removed for it.
 *
 */
#include "runrec.h"
#include "runrec_io.h"

#include "hash.h"
#include "mp.h"
#include "record.h"

#include <stdlib.h>
#include <string.h>

/* ---- inbox and timer records --------------------------------------------- */

/*
 * INBOX RECORDS: what pl_run_signal() and pl_run_cancel() deliver to a run,
 * kept beside its records until a wait consumes it (store.h, INBOXES).
 * Checksummed as run records are, kind 'e', bound to the run's id.
 *
 *   | key     | msgpack type | meaning                                     |
 *   |---------|--------------|---------------------------------------------|
 *   | v       | uint         | 1                                           |
 *   | sent    | int          | when it was delivered, Unix us              |
 *   | name    | str          | an event: its name                          |
 *   | payload | map          | an event: its payload                       |
 *   | cancel  | str          | a cancellation: its reason                  |
 *   | sum     | bin (32)     | last: the checksum                          |
 *
 * TIMER RECORDS: a waiting run's wake time (store.h, TIMERS), kind 't'.
 *
 *   | v   | uint     | 1                                                    |
 *   | due | int      | Unix us, by the store's clock                        |
 *   | id  | str      | the run's id, which the checksum binds               |
 *   | sum | bin (32) | last: the checksum                                   |
 */
#define TIMEREC_VERSION 1u

int pl__inbox_encode(pl__buf *out, const char *run_id, const pl__inbox_rec *ib)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    bool cancel = ib->reason != NULL;
    int rc = msgpack_pack_map(&pk, cancel ? 4 : 5);
    rc = rc ? rc : pl__rr_pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, TIMEREC_VERSION);
    rc = rc ? rc : pl__rr_pack_key(&pk, "sent");
    rc = rc ? rc : msgpack_pack_int64(&pk, ib->sent_us);
    if (cancel) {
        rc = rc ? rc : pl__rr_pack_key(&pk, "cancel");
        rc = rc ? rc : pack_cstr(&pk, ib->reason);
    } else {
        rc = rc ? rc : pl__rr_pack_key(&pk, "name");
        rc = rc ? rc : pack_cstr(&pk, ib->name);
        rc = rc ? rc : pl__rr_pack_key(&pk, "payload");
        rc = rc ? rc
                : (pl__buf_append(out, ib->payload, ib->payload_len) ? -1 : 0);
    }
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding an inbox record");
    }
    if ((rc = pl__rr_pack_sum(&pk, out, start, 'e', run_id)))
        out->len = start;
    return rc;
}

int pl__inbox_copy(pl__inbox_rec *to, const pl__inbox_rec *from)
{
    memset(to, 0, sizeof *to);
    to->sent_us = from->sent_us;
    to->payload_len = from->payload_len;
    if ((from->name && !(to->name = pl__strdup(from->name))) ||
        (from->reason && !(to->reason = pl__strdup(from->reason))) ||
        (from->payload &&
         !(to->payload = pl__rr_dup_mem(from->payload, from->payload_len)))) {
        pl__inbox_clear(to);
        return pl__err(PL_ENOMEM, "out of memory copying an inbox record");
    }
    return PL_OK;
}

int pl__inbox_is_cancel(const uint8_t *data, size_t len, bool *cancel)
{
    /* a map of 4 entries (v, sent, cancel, sum) or of 5 (v, sent, name,
     * payload, sum): a fixmap's first byte */
    *cancel = len > 0 && data[0] == 0x84;
    if (!len || (data[0] != 0x84 && data[0] != 0x85))
        return pl__err(PL_EINVAL, "not an inbox record");
    return PL_OK;
}

void pl__inbox_clear(pl__inbox_rec *ib)
{
    free(ib->name);
    free(ib->payload);
    free(ib->reason);
    memset(ib, 0, sizeof *ib);
}

int pl__inbox_decode(pl__inbox_rec *out, const char *run_id,
                     const uint8_t *data, size_t len)
{
    memset(out, 0, sizeof *out);
    rd r;
    uint64_t n, version = 0;
    int rc = pl__rr_map_begin(&r, data, len, &n, "inbox record");
    if (rc)
        return pl__err(rc, "run '%s': %s", run_id, pl_errmsg());
    bool have_v = false, have_sum = false, have_sent = false;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        const uint8_t *at = r.p;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (pl__rr_key_is(k, kn, "v")) {
            if (rd_uint(&r, &version) || version != TIMEREC_VERSION) {
                pl__inbox_clear(out);
                return pl__err(PL_EVERSION,
                               "run '%s': an inbox record has format "
                               "version %llu; this build reads version %u",
                               run_id, (unsigned long long)version,
                               TIMEREC_VERSION);
            }
            have_v = true;
        } else if (pl__rr_key_is(k, kn, "sum")) {
            if ((rc = pl__rr_read_sum(&r, data, at, i + 1 == n, 'e', run_id,
                                      "inbox record"))) {
                pl__inbox_clear(out);
                return rc;
            }
            have_sum = true;
        } else if (pl__rr_key_is(k, kn, "sent")) {
            if (rd_int(&r, &out->sent_us))
                goto bad;
            have_sent = true;
        } else if (pl__rr_key_is(k, kn, "name")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || !pl__actor_ok(v, vn) ||
                out->name)
                goto bad;
            if (!(out->name = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "cancel")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn > 4096 || out->reason)
                goto bad;
            if (!(out->reason = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "payload")) {
            pl__rr_value_span(&r, &v, &vn);
            if (out->payload || pl__payload_check(v, vn, true))
                goto bad;
            if (!(out->payload = pl__rr_dup_mem(v, vn)))
                goto oom;
            out->payload_len = vn;
        } else {
            pl__rr_value_span(&r, &v, &vn);
        }
    }
    /* exactly one of an event (name and payload) and a cancellation */
    if (!have_v || !have_sum || !have_sent ||
        (out->reason ? out->name || out->payload : !out->name || !out->payload))
        goto bad;
    return PL_OK;
bad:
    pl__inbox_clear(out);
    return pl__err(PL_ECORRUPT, "run '%s': an inbox record is malformed",
                   run_id);
oom:
    pl__inbox_clear(out);
    return pl__err(PL_ENOMEM, "out of memory reading an inbox record");
}

int pl__timer_encode(pl__buf *out, const char *run_id, int64_t due_us)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_map(&pk, 4);
    rc = rc ? rc : pl__rr_pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, TIMEREC_VERSION);
    rc = rc ? rc : pl__rr_pack_key(&pk, "due");
    rc = rc ? rc : msgpack_pack_int64(&pk, due_us);
    rc = rc ? rc : pl__rr_pack_key(&pk, "id");
    rc = rc ? rc : pack_cstr(&pk, run_id);
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a timer");
    }
    if ((rc = pl__rr_pack_sum(&pk, out, start, 't', run_id)))
        out->len = start;
    return rc;
}

int pl__timer_decode(int64_t *due_us, char id[PL_MAX_RUN_ID + 1],
                     const uint8_t *data, size_t len)
{
    rd r;
    uint64_t n, version = 0;
    int rc = pl__rr_map_begin(&r, data, len, &n, "timer record");
    if (rc)
        return rc;
    bool have_v = false, have_due = false;
    id[0] = '\0';
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        const uint8_t *at = r.p;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (pl__rr_key_is(k, kn, "v")) {
            if (rd_uint(&r, &version) || version != TIMEREC_VERSION)
                return pl__err(PL_EVERSION,
                               "a timer record has format version %llu; "
                               "this build reads version %u",
                               (unsigned long long)version, TIMEREC_VERSION);
            have_v = true;
        } else if (pl__rr_key_is(k, kn, "due")) {
            if (rd_int(&r, due_us) || *due_us < 0)
                goto bad;
            have_due = true;
        } else if (pl__rr_key_is(k, kn, "id")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn == 0 || vn > PL_MAX_RUN_ID)
                goto bad;
            memcpy(id, v, vn);
            id[vn] = '\0';
            if (!pl__run_id_ok(id))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "sum")) {
            /* the id comes before the sum, which binds it */
            if (!id[0])
                goto bad;
            if ((rc = pl__rr_read_sum(&r, data, at, i + 1 == n, 't', id,
                                      "timer record")))
                return rc;
            return have_v && have_due ? PL_OK
                                      : pl__err(PL_ECORRUPT,
                                                "run '%s': its timer "
                                                "record is malformed",
                                                id);
        } else {
            pl__rr_value_span(&r, &v, &vn);
        }
    }
bad:
    return pl__err(PL_ECORRUPT, "a timer record is malformed");
}

/* ---- tombstones and purges ----------------------------------------------- */

bool pl__status_final(pl_run_status status)
{
    return status == PL_RUN_COMPLETED || status == PL_RUN_FAILED ||
           status == PL_RUN_CANCELLED || status == PL_RUN_SUPERSEDED ||
           status == PL_RUN_CONTINUED;
}

int pl__tomb_encode(pl__buf *out, const char *run_id, const pl__tomb *t)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_map(&pk, 7 + t->has_head);
    rc = rc ? rc : pl__rr_pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, 1);
    rc = rc ? rc : pl__rr_pack_key(&pk, "status");
    rc = rc ? rc : msgpack_pack_uint32(&pk, (uint32_t)t->status);
    if (!rc && t->has_head) {
        rc = pl__rr_pack_key(&pk, "head");
        rc = rc ? rc : msgpack_pack_bin_with_body(&pk, t->head, PL_HASH_LEN);
    }
    rc = rc ? rc : pl__rr_pack_key(&pk, "policy");
    rc = rc ? rc : pack_cstr(&pk, t->policy);
    rc = rc ? rc : pl__rr_pack_key(&pk, "created");
    rc = rc ? rc : msgpack_pack_int64(&pk, t->created_us);
    rc = rc ? rc : pl__rr_pack_key(&pk, "deleted");
    rc = rc ? rc : msgpack_pack_int64(&pk, t->deleted_us);
    rc = rc ? rc : pl__rr_pack_key(&pk, "expires");
    rc = rc ? rc : msgpack_pack_int64(&pk, t->expires_us);
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a tombstone");
    }
    if ((rc = pl__rr_pack_sum(&pk, out, start, 'd', run_id)))
        out->len = start;
    return rc;
}

int pl__tomb_decode(pl__tomb *out, const char *run_id, const uint8_t *data,
                    size_t len)
{
    memset(out, 0, sizeof *out);
    rd r;
    uint64_t n, u, version = 0;
    int rc = pl__rr_map_begin(&r, data, len, &n, "tombstone");
    if (rc)
        return pl__err(rc, "run '%s': %s", run_id, pl_errmsg());
    bool have_sum = false, have_v = false, have_policy = false;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        const uint8_t *at = r.p;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (pl__rr_key_is(k, kn, "v")) {
            if ((rc = pl__rr_read_version(&r, run_id, "tombstone", 1,
                                          &version)))
                return rc;
            have_v = true;
        } else if (pl__rr_key_is(k, kn, "sum")) {
            if ((rc = pl__rr_read_sum(&r, data, at, i + 1 == n, 'd', run_id,
                                      "tombstone")))
                return rc;
            have_sum = true;
        } else if (pl__rr_key_is(k, kn, "status")) {
            if (rd_uint(&r, &u) || !pl__status_final((pl_run_status)u))
                goto bad;
            out->status = (pl_run_status)u;
        } else if (pl__rr_key_is(k, kn, "head")) {
            if (rd_bytes(&r, T_BIN, &v, &vn) || vn != PL_HASH_LEN)
                goto bad;
            memcpy(out->head, v, PL_HASH_LEN);
            out->has_head = true;
        } else if (pl__rr_key_is(k, kn, "policy")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || !pl__actor_ok(v, vn))
                goto bad;
            memcpy(out->policy, v, vn);
            out->policy[vn] = '\0';
            have_policy = true;
        } else if (pl__rr_key_is(k, kn, "created")) {
            if (rd_int(&r, &out->created_us))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "deleted")) {
            if (rd_int(&r, &out->deleted_us))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "expires")) {
            if (rd_int(&r, &out->expires_us))
                goto bad;
        } else {
            pl__rr_value_span(&r, &v, &vn);
        }
    }
    if (!have_v || !have_sum || !have_policy || !out->status)
        goto bad;
    return PL_OK;
bad:
    memset(out, 0, sizeof *out);
    return pl__err(PL_ECORRUPT, "run '%s': its tombstone is malformed", run_id);
}

int pl__purge_encode(pl__buf *out, uint64_t num, const char *run_id)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_map(&pk, 4);
    rc = rc ? rc : pl__rr_pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, 1);
    rc = rc ? rc : pl__rr_pack_key(&pk, "num");
    rc = rc ? rc : msgpack_pack_uint64(&pk, num);
    rc = rc ? rc : pl__rr_pack_key(&pk, "id");
    rc = rc ? rc : pack_cstr(&pk, run_id);
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a purge record");
    }
    if ((rc = pl__rr_pack_sum(&pk, out, start, 'p', run_id)))
        out->len = start;
    return rc;
}

int pl__purge_decode(char *id, uint64_t num, const uint8_t *data, size_t len)
{
    /* the id comes first (the checksum is over it): read it, then check */
    rd r;
    uint64_t n, u = 0, version;
    bool have_num = false;
    id[0] = '\0';
    int rc = pl__rr_map_begin(&r, data, len, &n, "purge record");
    for (uint64_t i = 0; !rc && i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        if (rd_bytes(&r, T_STR, &k, &kn))
            rc = PL_ECORRUPT;
        else if (pl__rr_key_is(k, kn, "id")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || !vn || vn > PL_MAX_RUN_ID)
                rc = PL_ECORRUPT;
            else {
                memcpy(id, v, vn);
                id[vn] = '\0';
                rc = pl__run_id_ok(id) ? PL_OK : PL_ECORRUPT;
            }
        } else if (pl__rr_key_is(k, kn, "num")) {
            have_num = !rd_uint(&r, &u);
        } else
            pl__rr_value_span(&r, &v, &vn);
    }
    if (rc || !id[0] || !have_num || u != num)
        return pl__err(PL_ECORRUPT,
                       "the purge record of run #%llu is malformed or names "
                       "another run",
                       (unsigned long long)num);
    /* now the whole record, checksum included, as a record of that id */
    (void)pl__rr_map_begin(&r, data, len, &n, "purge record");
    bool have_sum = false;
    for (uint64_t i = 0; !rc && i < n; i++) {
        const uint8_t *k = NULL, *v;
        size_t kn = 0, vn;
        const uint8_t *at = r.p;
        (void)rd_bytes(&r, T_STR, &k, &kn);
        if (pl__rr_key_is(k, kn, "v"))
            rc = pl__rr_read_version(&r, id, "purge record", 1, &version);
        else if (pl__rr_key_is(k, kn, "sum")) {
            rc = pl__rr_read_sum(&r, data, at, i + 1 == n, 'p', id,
                                 "purge record");
            have_sum = !rc;
        } else
            pl__rr_value_span(&r, &v, &vn);
    }
    if (!rc && !have_sum)
        rc = pl__err(PL_ECORRUPT, "run '%s': its purge record has no checksum",
                     id);
    return rc;
}
