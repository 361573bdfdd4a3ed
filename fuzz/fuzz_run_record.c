/*
 * fuzz_run_record.c -- the run record decoders (ledger/codec/runrec.c), the run's
 * info and its state, the inbox and timer records, a deleted run's tombstone
 * and purge record, and the schedule record (schedrec.c), over arbitrary
 * bytes.  Whatever the bytes: a status, no read outside them, no leak; a
 * record that decodes encodes again to a record that decodes to the same
 * fields (a version 1 record, which has no checksum, is how the fuzzer
 * reaches past the checksum check).  The same bytes also go to flow
 * control's decoders (ledger/codec/flowrec.c): a queued run's flow record,
 * a rate budget and a budget in units, checked the same way.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowrec.h"
#include "runrec.h"
#include "schedrec.h"
#include "fuzz.h"

#define RUN_ID "run-1"

static bool same_bytes(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return an == bn && (!an || memcmp(a, b, an) == 0);
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void info(const uint8_t *data, size_t size)
{
    pl__run_info ri;
    int rc = pl__run_info_decode(&ri, RUN_ID, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (rc)
        return;
    pl__buf b = {0};
    CHECK(pl__run_info_encode(&b, RUN_ID, &ri) == PL_OK);
    pl__run_info back;
    CHECK(pl__run_info_decode(&back, RUN_ID, b.data, b.len) == PL_OK);
    CHECK(strcmp(ri.policy, back.policy) == 0);
    CHECK(same_bytes(ri.payload, ri.payload_len, back.payload,
                     back.payload_len));
    CHECK(same_bytes(ri.seed, ri.seed_len, back.seed, back.seed_len));
    CHECK(ri.n_actions == back.n_actions && ri.created_us == back.created_us);
    for (size_t i = 0; i < ri.n_actions; i++)
        CHECK(strcmp(ri.actions[i], back.actions[i]) == 0);
    CHECK(same_str(ri.code, back.code));
    CHECK(ri.deadline_ms == back.deadline_ms);
    /* bound to its run: the same bytes under another id do not read */
    CHECK(pl__run_info_decode(&back, "run-2", b.data, b.len) != PL_OK);
    pl__buf_free(&b);
    pl__run_info_clear(&ri);
}

static void state(const uint8_t *data, size_t size)
{
    pl__run_state st;
    int rc = pl__run_state_decode(&st, RUN_ID, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (rc)
        return;
    pl__run_state copy;
    CHECK(pl__run_state_copy(&copy, &st) == PL_OK);
    pl__buf b = {0};
    CHECK(pl__run_state_encode(&b, RUN_ID, &copy) == PL_OK);
    pl__run_state back;
    CHECK(pl__run_state_decode(&back, RUN_ID, b.data, b.len) == PL_OK);
    CHECK(back.status == st.status && back.steps == st.steps &&
          back.updated_us == st.updated_us &&
          back.heartbeat_us == st.heartbeat_us &&
          back.owner_pid == st.owner_pid &&
          back.owner_start == st.owner_start &&
          strcmp(back.owner_host, st.owner_host) == 0 &&
          back.attempts == st.attempts && back.error == st.error &&
          strcmp(back.token, st.token) == 0 && back.has_head == st.has_head);
    CHECK(same_str(back.reason, st.reason) &&
          same_str(back.susp_path, st.susp_path));
    /* a superseded or continued run names its successor, and only it does */
    CHECK(same_str(back.succ, st.succ) && same_str(back.pred, st.pred));
    CHECK((st.succ != NULL) ==
          (st.status == PL_RUN_SUPERSEDED || st.status == PL_RUN_CONTINUED));
    /* the suspend step's seq belongs to its path: written only with it */
    CHECK(!st.susp_path || back.susp_seq == st.susp_seq);
    CHECK(!st.has_head || memcmp(back.head, st.head, PL_HASH_LEN) == 0);
    CHECK(same_bytes(back.prompt, back.prompt_len, st.prompt, st.prompt_len));
    CHECK(same_bytes(back.result, back.result_len, st.result, st.result_len));
    CHECK(back.wait_until_ms == st.wait_until_ms &&
          same_str(back.wait_event, st.wait_event));
    pl__buf_free(&b);
    pl__run_state_clear(&back);
    pl__run_state_clear(&copy);
    pl__run_state_clear(&st);
}

/* A deleted run's tombstone, and the purge record of its steps. */
static void tomb(const uint8_t *data, size_t size)
{
    pl__tomb t;
    int rc = pl__tomb_decode(&t, RUN_ID, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (!rc) {
        pl__buf b = {0};
        CHECK(pl__tomb_encode(&b, RUN_ID, &t) == PL_OK);
        pl__tomb back;
        CHECK(pl__tomb_decode(&back, RUN_ID, b.data, b.len) == PL_OK);
        CHECK(back.status == t.status && back.has_head == t.has_head &&
              back.created_us == t.created_us &&
              back.deleted_us == t.deleted_us &&
              back.expires_us == t.expires_us &&
              strcmp(back.policy, t.policy) == 0);
        CHECK(!t.has_head || memcmp(back.head, t.head, PL_HASH_LEN) == 0);
        CHECK(pl__tomb_decode(&back, "run-2", b.data, b.len) != PL_OK);
        pl__buf_free(&b);
    }
    char id[PL_MAX_RUN_ID + 1];
    rc = pl__purge_decode(id, 7, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (!rc) {
        pl__buf b = {0};
        char back[PL_MAX_RUN_ID + 1];
        CHECK(pl__purge_encode(&b, 7, id) == PL_OK);
        CHECK(pl__purge_decode(back, 7, b.data, b.len) == PL_OK);
        CHECK(strcmp(back, id) == 0);
        CHECK(pl__purge_decode(back, 8, b.data, b.len) == PL_ECORRUPT);
        pl__buf_free(&b);
    }
}

static void flow(const uint8_t *data, size_t size)
{
    pl__flow f;
    int rc = pl__flow_decode(&f, 1, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT);
    if (rc)
        return;
    CHECK(f.priority >= -PL_PRIORITY_MAX && f.priority <= PL_PRIORITY_MAX);
    CHECK((*f.key != '\0') == (f.limit > 0));
    pl__buf b = {0};
    CHECK(pl__flow_encode(&b, 1, &f) == PL_OK);
    pl__flow back;
    CHECK(pl__flow_decode(&back, 1, b.data, b.len) == PL_OK);
    CHECK(back.rank_us == f.rank_us && back.priority == f.priority &&
          back.limit == f.limit && strcmp(back.key, f.key) == 0);
    /* bound to its run: the same bytes under another run do not read */
    CHECK(pl__flow_decode(&back, 2, b.data, b.len) == PL_ECORRUPT);
    pl__buf_free(&b);
}

static void budget(const uint8_t *data, size_t size)
{
    pl__rate_budget r;
    int rc = pl__rate_decode(&r, "provider", data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT);
    if (rc)
        return;
    CHECK(r.window_ms >= 1 && r.limit >= 1 && r.count <= r.limit);
    pl__buf b = {0};
    CHECK(pl__rate_encode(&b, "provider", &r) == PL_OK);
    pl__rate_budget back;
    CHECK(pl__rate_decode(&back, "provider", b.data, b.len) == PL_OK);
    CHECK(back.window_ms == r.window_ms && back.limit == r.limit &&
          back.start_ms == r.start_ms && back.count == r.count);
    CHECK(pl__rate_decode(&back, "other", b.data, b.len) == PL_ECORRUPT);
    /* counting never passes the limit, and a spent window names the next */
    int64_t retry = 0, now = r.start_ms;
    bool ok = pl__rate_admit(&r, r.window_ms, r.limit, now, &retry);
    CHECK(r.count <= r.limit);
    CHECK(ok || retry > now);
    pl__buf_free(&b);
}

static void units(const uint8_t *data, size_t size)
{
    pl__unit_budget u;
    int rc = pl__units_decode(&u, "provider", "tokens", data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT);
    if (rc)
        return;
    CHECK(u.window_ms >= 1 && u.limit >= 1 && u.limit <= PL_RATE_MAX_UNITS &&
          u.used <= PL__UNITS_USED_MAX);
    pl__buf b = {0};
    CHECK(pl__units_encode(&b, "provider", "tokens", &u) == PL_OK);
    pl__unit_budget back;
    CHECK(pl__units_decode(&back, "provider", "tokens", b.data, b.len) ==
          PL_OK);
    CHECK(back.window_ms == u.window_ms && back.limit == u.limit &&
          back.start_ms == u.start_ms && back.used == u.used);
    /* bound to its resource and unit */
    CHECK(pl__units_decode(&back, "other", "tokens", b.data, b.len) ==
          PL_ECORRUPT);
    CHECK(pl__units_decode(&back, "provider", "requests", b.data, b.len) ==
          PL_ECORRUPT);
    pl__buf_free(&b);
    /* a take never charges past the budget; a spent window names the next;
     * a correction never leaves the bounds */
    pl__units_grant g;
    uint64_t amount = size % 2 ? u.limit : u.limit / 2;
    uint64_t was = u.used;
    pl__units_admit(&u, u.window_ms, u.limit, amount, u.start_ms, &g);
    CHECK(!g.admitted || (u.used <= u.limit && u.used >= amount));
    CHECK(g.admitted || (g.retry_at_ms > u.start_ms && u.used == was));
    pl__units_settle(&u, u.window_ms, u.limit, u.start_ms,
                     -(int64_t)PL_RATE_MAX_UNITS, u.start_ms, &g);
    CHECK(u.used == 0);
    pl__units_settle(&u, u.window_ms, u.limit, u.start_ms - 1,
                     (int64_t)PL_RATE_MAX_UNITS, u.start_ms, &g);
    CHECK(u.used <= PL__UNITS_USED_MAX);
}

/* An inbox record (checksummed: only its own bytes decode) encodes again
 * to the same fields, bound to its run. */
static void inbox(const uint8_t *data, size_t size)
{
    pl__inbox_rec ib;
    int rc = pl__inbox_decode(&ib, RUN_ID, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (rc)
        return;
    CHECK(!ib.reason != !ib.name); /* an event or a cancellation */
    pl__buf b = {0};
    CHECK(pl__inbox_encode(&b, RUN_ID, &ib) == PL_OK);
    pl__inbox_rec back;
    CHECK(pl__inbox_decode(&back, RUN_ID, b.data, b.len) == PL_OK);
    CHECK(same_str(ib.name, back.name) && same_str(ib.reason, back.reason) &&
          back.sent_us == ib.sent_us &&
          same_bytes(ib.payload, ib.payload_len, back.payload,
                     back.payload_len));
    pl__inbox_clear(&back);
    CHECK(pl__inbox_decode(&back, "run-2", b.data, b.len) != PL_OK);
    pl__buf_free(&b);
    pl__inbox_clear(&ib);
}

static void timer(const uint8_t *data, size_t size)
{
    int64_t due;
    char id[PL_MAX_RUN_ID + 1];
    int rc = pl__timer_decode(&due, id, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (rc)
        return;
    pl__buf b = {0};
    CHECK(pl__timer_encode(&b, id, due) == PL_OK);
    int64_t due2;
    char id2[PL_MAX_RUN_ID + 1];
    CHECK(pl__timer_decode(&due2, id2, b.data, b.len) == PL_OK);
    CHECK(due2 == due && strcmp(id, id2) == 0);
    pl__buf_free(&b);
}

/* A schedule record (schedrec.c) under the name "sched-1". */
static void sched(const uint8_t *data, size_t size)
{
    pl__sched_rec r;
    int rc = pl__sched_rec_decode(&r, "sched-1", data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION);
    if (rc)
        return;
    pl__buf b = {0};
    CHECK(pl__sched_rec_encode(&b, "sched-1", &r) == PL_OK);
    pl__sched_rec back;
    CHECK(pl__sched_rec_decode(&back, "sched-1", b.data, b.len) == PL_OK);
    CHECK(strcmp(r.cron, back.cron) == 0 && strcmp(r.zone, back.zone) == 0 &&
          strcmp(r.policy, back.policy) == 0 &&
          strcmp(r.payload, back.payload) == 0 &&
          strcmp(r.last_run, back.last_run) == 0 && r.overlap == back.overlap &&
          r.catch_up == back.catch_up && r.catch_up_max == back.catch_up_max &&
          r.created_ms == back.created_ms && r.cursor_ms == back.cursor_ms &&
          r.priority == back.priority && r.flow_limit == back.flow_limit &&
          !r.flow_key == !back.flow_key &&
          (!r.flow_key || strcmp(r.flow_key, back.flow_key) == 0) &&
          r.deadline_in_ms == back.deadline_in_ms);
    pl__sched_rec_clear(&back);
    /* bound to its name: the same bytes under another do not read */
    CHECK(pl__sched_rec_decode(&back, "sched-2", b.data, b.len) != PL_OK);
    pl__buf_free(&b);
    pl__sched_rec_clear(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    info(data, size);
    state(data, size);
    tomb(data, size);
    inbox(data, size);
    timer(data, size);
    sched(data, size);
    flow(data, size);
    budget(data, size);
    units(data, size);
    return 0;
}
