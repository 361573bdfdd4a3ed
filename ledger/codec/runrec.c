/*
 * runrec.c -- run records: a run's info, written once when it starts, and
 * its state, rewritten as it goes.
 *
 * RUN RECORDS are msgpack maps with short keys; readers ignore keys they do
 * not know, so fields can be added without a version bump.  A record's "v"
 * is the format version: 1, or 2 (PL__RUNREC_VERSION), which adds the
 * checksum below, or for a run state 3 (PL__RUNSTATE_VERSION), which adds
 * "open"; a reader fails any other with PL_EVERSION.  Version 1 records stay
 * readable: they simply have no checksum to check; version 2 states, no
 * open ledgers to check.
 *
 * CHECKSUM (version 2): the last pair of the map is "sum", a bin of
 * PL_HASH_LEN bytes: SHA-256 of "policyledger/runrec" NUL, 'i' (info) or
 * 's' (state), the run's id, NUL, and every byte of the record before the
 * "sum" key (pl__runrec_sum, hash.c).  It binds the record to its run: a
 * changed byte, a record moved to another run or under another number, a
 * changed run id, all fail with PL_ECORRUPT naming the run.  A version 2
 * record without it, or with pairs after it, is PL_ECORRUPT too.
 *
 * RUN INFO (stored after the run's number under its id, see lmdb_store.c)
 *
 *   | key     | msgpack type | meaning                                     |
 *   |---------|--------------|---------------------------------------------|
 *   | v       | uint         | format version (1 or 2)                     |
 *   | policy  | str          | the root policy                             |
 *   | payload | map          | the root payload                            |
 *   | actions | [str]        | names the root policy may have invoked      |
 *   | seed    | array        | optional: the steps that open the root      |
 *   |         |              | ledger, each [type, actor, payload]         |
 *   | created | int          | when the run started, Unix us               |
 *   | code    | str          | optional: the root policy's code identity   |
 *   |         |              | (code_version or plugin build id)           |
 *   | deadline| int          | optional: Unix ms past which the run fails  |
 *   |         |              | (pl_run_options.deadline_ms)                |
 *   | sum     | bin (32)     | version 2, last: the checksum (above)       |
 *
 * RUN STATE (stored under the run's number)
 *
 *   | key       | msgpack type | meaning                                   |
 *   |-----------|--------------|-------------------------------------------|
 *   | v         | uint         | format version (1 or 2)                   |
 *   | status    | uint         | pl_run_status                             |
 *   | steps     | uint         | its durable steps, all ledgers, as of     |
 *   |           |              | this record                               |
 *   | updated   | int          | when this record was written, Unix us     |
 *   | heartbeat | int          | the owner's last heartbeat, Unix us       |
 *   | pid       | int          | the owner process                         |
 *   | pstart    | uint         | its start time (clock ticks since boot)   |
 *   | host      | str          | its host                                  |
 *   | attempts  | uint         | executions so far                         |
 *   | error     | int          | failed: the pl_status; else 0             |
 *   | reason    | str          | optional; failed: why                     |
 *   | token     | str          | optional; suspended: resume token (hex)   |
 *   | spath     | str          | optional; suspended: invocation path      |
 *   | sseq      | uint         | with spath: the suspend step's seq        |
 *   |           |              | (waiting: the wait step's)                |
 *   | until     | int          | optional; waiting: wakes at, Unix ms      |
 *   | wevent    | str          | optional; waiting: for this event         |
 *   | prompt    | map          | optional; suspended: the prompt           |
 *   | result    | map          | optional, read and no longer written:     |
 *   |           |              | the root's result, which is the payload   |
 *   |           |              | of the root ledger's last step ("head")   |
 *   | head      | bin (32)     | optional: the hash of the root ledger's   |
 *   |           |              | last step, written with that step (see    |
 *   |           |              | record.c)                                 |
 *   | open      | array        | optional, version 3: the ledgers open     |
 *   |           |              | when the record was written, each         |
 *   |           |              | [[comp...], seq, bin (32)]: its path      |
 *   |           |              | below the root, its last step's seq and   |
 *   |           |              | that step's hash (at most 33)             |
 *   | succ      | str          | optional; superseded (ledger-replay       |
 *   |           |              | --upgrade) or continued: the id of the    |
 *   |           |              | run that goes on from it                  |
 *   | pred      | str          | optional: the id of the run this one      |
 *   |           |              | supersedes or continues, written with     |
 *   |           |              | that run's "succ" in one commit           |
 *   | sum       | bin (32)     | version 2 and 3, last: the checksum       |
 *
 * OPEN LEDGERS.  A ledger's last step is hashed by nothing in its run until
 * a later step, a caller's result or "head" links it; "open" closes that
 * gap for the ledgers open when the state is written (commit.c says when).
 * The steps an entry names were durable before or with the record, and a
 * durable step never changes, so an entry stays true as its ledger grows.
 */
#include "runrec.h"
#include "runrec_io.h"

#include "hash.h"
#include "mp.h"
#include "record.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- run records --------------------------------------------------------- */

int pl__rr_pack_key(msgpack_packer *pk, const char *k)
{
    return pack_cstr(pk, k);
}

/* Append the "sum" pair to the record begun at @p start of @p out. */
int pl__rr_pack_sum(msgpack_packer *pk, pl__buf *out, size_t start, char kind,
                    const char *run_id)
{
    uint8_t sum[PL_HASH_LEN];
    int rc = pl__runrec_sum(kind, run_id, out->data + start, out->len - start,
                            sum);
    if (rc)
        return rc;
    if (pl__rr_pack_key(pk, "sum") ||
        msgpack_pack_bin_with_body(pk, sum, PL_HASH_LEN))
        return pl__err(PL_ENOMEM, "out of memory encoding a run record");
    return PL_OK;
}

/* A run info map: RUN INFO above. */
int pl__run_info_encode(pl__buf *out, const char *run_id,
                        const pl__run_info *ri)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    int rc = msgpack_pack_map(&pk, 6 + (ri->seed != NULL) + (ri->code != NULL) +
                                       (ri->deadline_ms != 0));
    rc = rc ? rc : pl__rr_pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, PL__RUNREC_VERSION);
    rc = rc ? rc : pl__rr_pack_key(&pk, "policy");
    rc = rc ? rc : pack_cstr(&pk, ri->policy);
    rc = rc ? rc : pl__rr_pack_key(&pk, "payload");
    rc = rc ? rc : (pl__buf_append(out, ri->payload, ri->payload_len) ? -1 : 0);
    rc = rc ? rc : pl__rr_pack_key(&pk, "actions");
    rc = rc ? rc : msgpack_pack_array(&pk, ri->n_actions);
    for (size_t i = 0; !rc && i < ri->n_actions; i++)
        rc = pack_cstr(&pk, ri->actions[i]);
    if (!rc && ri->seed) {
        rc = pl__rr_pack_key(&pk, "seed");
        rc = rc ? rc : (pl__buf_append(out, ri->seed, ri->seed_len) ? -1 : 0);
    }
    rc = rc ? rc : pl__rr_pack_key(&pk, "created");
    rc = rc ? rc : msgpack_pack_int64(&pk, ri->created_us);
    if (!rc && ri->code) {
        rc = pl__rr_pack_key(&pk, "code");
        rc = rc ? rc : pack_cstr(&pk, ri->code);
    }
    if (!rc && ri->deadline_ms) {
        rc = pl__rr_pack_key(&pk, "deadline");
        rc = rc ? rc : msgpack_pack_int64(&pk, ri->deadline_ms);
    }
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a run record");
    }
    if ((rc = pl__rr_pack_sum(&pk, out, start, 'i', run_id)))
        out->len = start;
    return rc;
}

bool pl__rr_key_is(const uint8_t *k, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(k, want, n) == 0;
}

char *pl__rr_dup_bytes(const uint8_t *p, size_t n)
{
    return pl__strndup((const char *)p, n);
}

uint8_t *pl__rr_dup_mem(const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* A record's "v" field: PL_OK for a version this build reads (1 or 2). */
int pl__rr_read_version(rd *r, const char *run_id, const char *what,
                        unsigned max, uint64_t *version)
{
    if (rd_uint(r, version))
        return pl__err(PL_ECORRUPT, "run '%s': its %s is malformed", run_id,
                       what);
    if (*version < PL__FORMAT_VERSION || *version > max)
        return pl__err(
            PL_EVERSION,
            "run '%s': its %s has format version %llu; this build reads versions %u to %u",
            run_id, what, (unsigned long long)*version, PL__FORMAT_VERSION,
            max);
    return PL_OK;
}

/*
 * The "sum" pair at @p key (the start of its key; r is past the key): it
 * must be the record's last pair (@p last) and match the bytes before it.
 */
int pl__rr_read_sum(rd *r, const uint8_t *data, const uint8_t *key, bool last,
                    char kind, const char *run_id, const char *what)
{
    const uint8_t *v;
    size_t vn;
    uint8_t want[PL_HASH_LEN];
    if (!last || rd_bytes(r, T_BIN, &v, &vn) || vn != PL_HASH_LEN)
        return pl__err(PL_ECORRUPT, "run '%s': its %s has a malformed checksum",
                       run_id, what);
    int rc = pl__runrec_sum(kind, run_id, data, (size_t)(key - data), want);
    if (rc)
        return rc;
    if (memcmp(want, v, PL_HASH_LEN) != 0)
        return pl__err(
            PL_ECORRUPT,
            "run '%s': its %s does not match its checksum (the record changed, or belongs to another run)",
            run_id, what);
    return PL_OK;
}

/*
 * A run record holds a policy's value up to RECORD_OUTER containers deep (a
 * seed step's payload: the record, its seed list, the seed entry), so the
 * structural walks of a record start that many levels above a payload's
 * level 1; each payload is then checked at its own depth.
 */
#define RECORD_OUTER 3

/* Start reading a record map: check it whole, then position on its pairs. */
int pl__rr_map_begin(rd *r, const uint8_t *data, size_t len, uint64_t *n,
                     const char *what)
{
    if (!data || !len) /* an empty value (LMDB may give no pointer) */
        return pl__err(PL_ECORRUPT, "%s is empty", what);
    rd chk = {data, data + len};
    head h;
    if (pl__mp_walk(&chk, 1 - RECORD_OUTER, MODE_ANY, NULL) || chk.p != chk.end)
        return pl__err(PL_ECORRUPT, "%s is malformed", what);
    r->p = data;
    r->end = data + len;
    if (rd_head(r, &h) || h.t != T_MAP)
        return pl__err(PL_ECORRUPT, "%s is not a map", what);
    *n = h.u;
    return PL_OK;
}

/* The extent of the value at r (already checked). */
void pl__rr_value_span(rd *r, const uint8_t **v, size_t *n)
{
    *v = r->p;
    (void)pl__mp_walk(r, 2 - RECORD_OUTER, MODE_ANY, NULL);
    *n = (size_t)(r->p - *v);
}

int pl__run_info_decode(pl__run_info *out, const char *run_id,
                        const uint8_t *data, size_t len)
{
    memset(out, 0, sizeof *out);
    rd r;
    uint64_t n, version = 0;
    int rc = pl__rr_map_begin(&r, data, len, &n, "run record");
    if (rc)
        return pl__err(rc, "run '%s': %s", run_id, pl_errmsg());
    bool have_v = false, have_sum = false;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        const uint8_t *at = r.p;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (pl__rr_key_is(k, kn, "v")) {
            if ((rc = pl__rr_read_version(&r, run_id, "run record",
                                          PL__RUNREC_VERSION, &version))) {
                pl__run_info_clear(out);
                return rc;
            }
            have_v = true;
        } else if (pl__rr_key_is(k, kn, "sum")) {
            if ((rc = pl__rr_read_sum(&r, data, at, i + 1 == n, 'i', run_id,
                                      "run record"))) {
                pl__run_info_clear(out);
                return rc;
            }
            have_sum = true;
        } else if (pl__rr_key_is(k, kn, "policy")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || !pl__actor_ok(v, vn))
                goto bad;
            free(out->policy);
            if (!(out->policy = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "payload")) {
            pl__rr_value_span(&r, &v, &vn);
            if (pl__payload_check(v, vn, true))
                goto bad;
            free(out->payload);
            if (!(out->payload = pl__rr_dup_mem(v, vn)))
                goto oom;
            out->payload_len = vn;
        } else if (pl__rr_key_is(k, kn, "actions")) {
            head h;
            if (rd_head(&r, &h) || h.t != T_ARRAY || out->actions)
                goto bad;
            out->actions = calloc(h.u ? h.u : 1, sizeof *out->actions);
            if (!out->actions)
                goto oom;
            for (uint64_t j = 0; j < h.u; j++) {
                if (rd_bytes(&r, T_STR, &v, &vn) || !pl__actor_ok(v, vn))
                    goto bad;
                if (!(out->actions[j] = pl__rr_dup_bytes(v, vn)))
                    goto oom;
                out->n_actions++;
            }
        } else if (pl__rr_key_is(k, kn, "seed")) {
            pl__rr_value_span(&r, &v, &vn);
            free(out->seed);
            if (!(out->seed = pl__rr_dup_mem(v, vn)))
                goto oom;
            out->seed_len = vn;
        } else if (pl__rr_key_is(k, kn, "created")) {
            if (rd_int(&r, &out->created_us))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "code")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn > 4096 || out->code)
                goto bad;
            if (!(out->code = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "deadline")) {
            if (rd_int(&r, &out->deadline_ms) || out->deadline_ms <= 0)
                goto bad;
        } else {
            pl__rr_value_span(&r, &v, &vn); /* a newer field: skip */
        }
    }
    if (have_v && version >= PL__RUNREC_VERSION && !have_sum) {
        pl__run_info_clear(out);
        return pl__err(PL_ECORRUPT, "run '%s': its run record has no checksum",
                       run_id);
    }
    if (!have_v || !out->policy || !out->payload)
        goto bad;
    return PL_OK;
bad:
    pl__run_info_clear(out);
    return pl__err(PL_ECORRUPT, "run '%s': its run record is malformed",
                   run_id);
oom:
    pl__run_info_clear(out);
    return pl__err(PL_ENOMEM, "out of memory reading a run record");
}

void pl__run_info_clear(pl__run_info *ri)
{
    free(ri->policy);
    free(ri->payload);
    for (size_t i = 0; i < ri->n_actions; i++)
        free(ri->actions[i]);
    free(ri->actions);
    free(ri->seed);
    free(ri->code);
    memset(ri, 0, sizeof *ri);
}

/* A run state map: RUN STATE above. */
int pl__run_state_encode(pl__buf *out, const char *run_id,
                         const pl__run_state *st)
{
    msgpack_packer pk;
    packer_init(&pk, out);
    size_t start = out->len;
    size_t n = 11 + (st->reason != NULL) + (st->token[0] != 0) +
               (st->wait_until_ms != 0) + (st->wait_event != NULL) +
               (st->susp_path != NULL) * 2 + (st->prompt != NULL) +
               (st->result != NULL) + st->has_head + (st->n_open != 0) +
               (st->succ != NULL) + (st->pred != NULL);
    assert(st->n_open <= PL__ANCHORS_MAX);
    int rc = msgpack_pack_map(&pk, n);
    rc = rc ? rc : pl__rr_pack_key(&pk, "v");
    rc = rc ? rc : msgpack_pack_uint32(&pk, PL__RUNSTATE_VERSION);
    rc = rc ? rc : pl__rr_pack_key(&pk, "status");
    rc = rc ? rc : msgpack_pack_uint32(&pk, (uint32_t)st->status);
    rc = rc ? rc : pl__rr_pack_key(&pk, "steps");
    rc = rc ? rc : msgpack_pack_uint64(&pk, st->steps);
    rc = rc ? rc : pl__rr_pack_key(&pk, "updated");
    rc = rc ? rc : msgpack_pack_int64(&pk, st->updated_us);
    rc = rc ? rc : pl__rr_pack_key(&pk, "heartbeat");
    rc = rc ? rc : msgpack_pack_int64(&pk, st->heartbeat_us);
    rc = rc ? rc : pl__rr_pack_key(&pk, "pid");
    rc = rc ? rc : msgpack_pack_int64(&pk, st->owner_pid);
    rc = rc ? rc : pl__rr_pack_key(&pk, "pstart");
    rc = rc ? rc : msgpack_pack_uint64(&pk, st->owner_start);
    rc = rc ? rc : pl__rr_pack_key(&pk, "host");
    rc = rc ? rc : pack_cstr(&pk, st->owner_host);
    rc = rc ? rc : pl__rr_pack_key(&pk, "attempts");
    rc = rc ? rc : msgpack_pack_uint32(&pk, st->attempts);
    rc = rc ? rc : pl__rr_pack_key(&pk, "error");
    rc = rc ? rc : msgpack_pack_int32(&pk, st->error);
    if (!rc && st->reason) {
        rc = pl__rr_pack_key(&pk, "reason");
        rc = rc ? rc : pack_cstr(&pk, st->reason);
    }
    if (!rc && st->token[0]) {
        rc = pl__rr_pack_key(&pk, "token");
        rc = rc ? rc : pack_cstr(&pk, st->token);
    }
    if (!rc && st->susp_path) {
        rc = pl__rr_pack_key(&pk, "spath");
        rc = rc ? rc : pack_cstr(&pk, st->susp_path);
        rc = rc ? rc : pl__rr_pack_key(&pk, "sseq");
        rc = rc ? rc : msgpack_pack_uint32(&pk, st->susp_seq);
    }
    if (!rc && st->wait_until_ms) {
        rc = pl__rr_pack_key(&pk, "until");
        rc = rc ? rc : msgpack_pack_int64(&pk, st->wait_until_ms);
    }
    if (!rc && st->wait_event) {
        rc = pl__rr_pack_key(&pk, "wevent");
        rc = rc ? rc : pack_cstr(&pk, st->wait_event);
    }
    if (!rc && st->prompt) {
        rc = pl__rr_pack_key(&pk, "prompt");
        rc = rc ? rc
                : (pl__buf_append(out, st->prompt, st->prompt_len) ? -1 : 0);
    }
    if (!rc && st->result) {
        rc = pl__rr_pack_key(&pk, "result");
        rc = rc ? rc
                : (pl__buf_append(out, st->result, st->result_len) ? -1 : 0);
    }
    if (!rc && st->succ) {
        rc = pl__rr_pack_key(&pk, "succ");
        rc = rc ? rc : pack_cstr(&pk, st->succ);
    }
    if (!rc && st->pred) {
        rc = pl__rr_pack_key(&pk, "pred");
        rc = rc ? rc : pack_cstr(&pk, st->pred);
    }
    if (!rc && st->has_head) {
        rc = pl__rr_pack_key(&pk, "head");
        rc = rc ? rc : msgpack_pack_bin_with_body(&pk, st->head, PL_HASH_LEN);
    }
    if (!rc && st->n_open) {
        rc = pl__rr_pack_key(&pk, "open");
        rc = rc ? rc : msgpack_pack_array(&pk, st->n_open);
    }
    for (size_t i = 0; !rc && i < st->n_open; i++) {
        const pl__anchor *a = &st->open[i];
        rc = msgpack_pack_array(&pk, 3);
        rc = rc ? rc : msgpack_pack_array(&pk, a->depth);
        for (unsigned d = 0; !rc && d < a->depth; d++)
            rc = msgpack_pack_uint32(&pk, a->comps[d]);
        rc = rc ? rc : msgpack_pack_uint32(&pk, a->seq);
        rc = rc ? rc : msgpack_pack_bin_with_body(&pk, a->hash, PL_HASH_LEN);
    }
    if (rc) {
        out->len = start;
        return pl__err(PL_ENOMEM, "out of memory encoding a run state");
    }
    if ((rc = pl__rr_pack_sum(&pk, out, start, 's', run_id)))
        out->len = start;
    return rc;
}

/* A run state's "open" array (OPEN LEDGERS above) into @p st. */
static int read_open(rd *r, pl__run_state *st)
{
    head h, c;
    uint64_t u;
    const uint8_t *v;
    size_t vn;
    if (rd_head(r, &h) || h.t != T_ARRAY || h.u == 0 || h.u > PL__ANCHORS_MAX)
        return PL_ECORRUPT;
    if (!(st->open = calloc(h.u, sizeof *st->open)))
        return PL_ENOMEM;
    for (uint64_t i = 0; i < h.u; i++) {
        pl__anchor *a = &st->open[i];
        if (rd_head(r, &c) || c.t != T_ARRAY || c.u != 3 || rd_head(r, &c) ||
            c.t != T_ARRAY || c.u > PL_MAX_DEPTH)
            return PL_ECORRUPT;
        a->depth = (unsigned)c.u;
        for (unsigned d = 0; d < a->depth; d++) {
            if (rd_uint(r, &u) || u > UINT32_MAX)
                return PL_ECORRUPT;
            a->comps[d] = (uint32_t)u;
        }
        if (rd_uint(r, &u) || u > UINT32_MAX || rd_bytes(r, T_BIN, &v, &vn) ||
            vn != PL_HASH_LEN)
            return PL_ECORRUPT;
        a->seq = (uint32_t)u;
        memcpy(a->hash, v, PL_HASH_LEN);
        st->n_open++;
    }
    return PL_OK;
}

int pl__run_state_decode(pl__run_state *out, const char *run_id,
                         const uint8_t *data, size_t len)
{
    memset(out, 0, sizeof *out);
    rd r;
    uint64_t n, u, version = 0;
    int64_t i64;
    int rc = pl__rr_map_begin(&r, data, len, &n, "run state");
    if (rc)
        return pl__err(rc, "run '%s': %s", run_id, pl_errmsg());
    bool have_v = false, have_sum = false;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        const uint8_t *at = r.p;
        if (rd_bytes(&r, T_STR, &k, &kn))
            goto bad;
        if (pl__rr_key_is(k, kn, "v")) {
            if ((rc = pl__rr_read_version(&r, run_id, "run state",
                                          PL__RUNSTATE_VERSION, &version))) {
                pl__run_state_clear(out);
                return rc;
            }
            have_v = true;
        } else if (pl__rr_key_is(k, kn, "sum")) {
            if ((rc = pl__rr_read_sum(&r, data, at, i + 1 == n, 's', run_id,
                                      "run state"))) {
                pl__run_state_clear(out);
                return rc;
            }
            have_sum = true;
        } else if (pl__rr_key_is(k, kn, "status")) {
            if (rd_uint(&r, &u) || u < PL_RUN_RUNNING ||
                (u > PL_RUN_CANCELLED && u != PL_RUN_SUPERSEDED &&
                 u != PL_RUN_CONTINUED))
                goto bad;
            out->status = (pl_run_status)u;
        } else if (pl__rr_key_is(k, kn, "steps")) {
            if (rd_uint(&r, &out->steps))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "updated")) {
            if (rd_int(&r, &out->updated_us))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "heartbeat")) {
            if (rd_int(&r, &out->heartbeat_us))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "pid")) {
            if (rd_int(&r, &out->owner_pid))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "pstart")) {
            if (rd_uint(&r, &out->owner_start))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "host")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn >= sizeof out->owner_host)
                goto bad;
            memcpy(out->owner_host, v, vn);
            out->owner_host[vn] = '\0';
        } else if (pl__rr_key_is(k, kn, "attempts")) {
            if (rd_uint(&r, &u) || u > UINT32_MAX)
                goto bad;
            out->attempts = (uint32_t)u;
        } else if (pl__rr_key_is(k, kn, "error")) {
            if (rd_int(&r, &i64) || i64 < -10000 || i64 > 0)
                goto bad;
            out->error = (int)i64;
        } else if (pl__rr_key_is(k, kn, "reason")) {
            if (rd_bytes(&r, T_STR, &v, &vn))
                goto bad;
            free(out->reason);
            if (!(out->reason = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "token")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || vn >= sizeof out->token)
                goto bad;
            memcpy(out->token, v, vn);
            out->token[vn] = '\0';
        } else if (pl__rr_key_is(k, kn, "spath")) {
            if (rd_bytes(&r, T_STR, &v, &vn))
                goto bad;
            free(out->susp_path);
            if (!(out->susp_path = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "succ") ||
                   pl__rr_key_is(k, kn, "pred")) {
            char **dst = pl__rr_key_is(k, kn, "succ") ? &out->succ : &out->pred;
            if (rd_bytes(&r, T_STR, &v, &vn) || vn == 0 || vn > PL_MAX_RUN_ID)
                goto bad;
            free(*dst);
            if (!(*dst = pl__rr_dup_bytes(v, vn)))
                goto oom;
            if (strlen(*dst) != vn || !pl__run_id_ok(*dst))
                goto bad;
        } else if (pl__rr_key_is(k, kn, "sseq")) {
            if (rd_uint(&r, &u) || u > UINT32_MAX)
                goto bad;
            out->susp_seq = (uint32_t)u;
        } else if (pl__rr_key_is(k, kn, "until")) {
            if (rd_int(&r, &out->wait_until_ms) || out->wait_until_ms <= 0)
                goto bad;
        } else if (pl__rr_key_is(k, kn, "wevent")) {
            if (rd_bytes(&r, T_STR, &v, &vn) || !pl__actor_ok(v, vn) ||
                out->wait_event)
                goto bad;
            if (!(out->wait_event = pl__rr_dup_bytes(v, vn)))
                goto oom;
        } else if (pl__rr_key_is(k, kn, "head")) {
            if (rd_bytes(&r, T_BIN, &v, &vn) || vn != PL_HASH_LEN)
                goto bad;
            memcpy(out->head, v, PL_HASH_LEN);
            out->has_head = true;
        } else if (pl__rr_key_is(k, kn, "open")) {
            if (out->open || (rc = read_open(&r, out)))
                goto fail;
        } else if (pl__rr_key_is(k, kn, "prompt") ||
                   pl__rr_key_is(k, kn, "result")) {
            bool prompt = pl__rr_key_is(k, kn, "prompt");
            pl__rr_value_span(&r, &v, &vn);
            if (pl__payload_check(v, vn, true))
                goto bad;
            uint8_t **dst = prompt ? &out->prompt : &out->result;
            free(*dst);
            if (!(*dst = pl__rr_dup_mem(v, vn)))
                goto oom;
            *(prompt ? &out->prompt_len : &out->result_len) = vn;
        } else {
            pl__rr_value_span(&r, &v, &vn);
        }
    }
    if (have_v && version >= PL__RUNREC_VERSION && !have_sum) {
        pl__run_state_clear(out);
        return pl__err(PL_ECORRUPT, "run '%s': its run state has no checksum",
                       run_id);
    }
    if (!have_v || !out->status || (out->open && version < 3) ||
        (out->succ != NULL) != (out->status == PL_RUN_SUPERSEDED ||
                                out->status == PL_RUN_CONTINUED))
        goto bad;
    return PL_OK;
fail:
    if (rc == PL_ENOMEM)
        goto oom;
bad:
    pl__run_state_clear(out);
    return pl__err(PL_ECORRUPT, "run '%s': its run state is malformed", run_id);
oom:
    pl__run_state_clear(out);
    return pl__err(PL_ENOMEM, "out of memory reading a run state");
}

void pl__run_state_clear(pl__run_state *st)
{
    free(st->reason);
    free(st->susp_path);
    free(st->wait_event);
    free(st->prompt);
    free(st->result);
    free(st->open);
    free(st->succ);
    free(st->pred);
    memset(st, 0, sizeof *st);
}

int pl__run_state_copy(pl__run_state *dst, const pl__run_state *src)
{
    *dst = *src;
    dst->reason = NULL;
    dst->susp_path = NULL;
    dst->wait_event = NULL;
    dst->prompt = NULL;
    dst->result = NULL;
    dst->open = NULL;
    dst->succ = NULL;
    dst->pred = NULL;
    if ((src->succ && !(dst->succ = pl__strdup(src->succ))) ||
        (src->pred && !(dst->pred = pl__strdup(src->pred))) ||
        (src->n_open &&
         !(dst->open = (pl__anchor *)pl__rr_dup_mem((const uint8_t *)src->open,
                                                    src->n_open *
                                                        sizeof *src->open))) ||
        (src->reason && !(dst->reason = pl__strdup(src->reason))) ||
        (src->susp_path && !(dst->susp_path = pl__strdup(src->susp_path))) ||
        (src->wait_event && !(dst->wait_event = pl__strdup(src->wait_event))) ||
        (src->prompt &&
         !(dst->prompt = pl__rr_dup_mem(src->prompt, src->prompt_len))) ||
        (src->result &&
         !(dst->result = pl__rr_dup_mem(src->result, src->result_len)))) {
        pl__run_state_clear(dst);
        return pl__err(PL_ENOMEM, "out of memory copying a run state");
    }
    return PL_OK;
}
