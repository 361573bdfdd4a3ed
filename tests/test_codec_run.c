/*
 * test_codec_run.c -- the run records and the inbox and timer records
 * (ledger/codec/runrec.c): info and state round-trip, and malformed input
 * gives PL_ECORRUPT or PL_EVERSION with a message, never a crash, an
 * over-read or a leak.
 */
#include "support.h"
#include "support_codec.h"

#include "codec.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- run records --------------------------------------------------------- */

static void info_sample(pl__run_info *ri, pl__buf *payload, pl__buf *seed,
                        char **actions, bool with_seed)
{
    memset(ri, 0, sizeof *ri);
    payload_of(payload, "{\"order\": 42, \"items\": [\"a\", \"b\"]}");
    cJSON *s = t_json("[[1, \"user\", {\"text\": \"hi\"}], "
                      "[6, \"engine\", {\"name\": \"now\", \"value\": 5}]]");
    cr_assert_eq(pl__json_encode(seed, s), PL_OK);
    cJSON_Delete(s);
    ri->policy = "root-policy";
    ri->payload = payload->data;
    ri->payload_len = payload->len;
    ri->actions = actions;
    ri->n_actions = actions ? 3 : 0;
    ri->seed = with_seed ? seed->data : NULL;
    ri->seed_len = with_seed ? seed->len : 0;
    ri->created_us = 1712345678901234;
}

Test(codec, run_info_roundtrip)
{
    char a0[] = "search", a1[] = "fetch", a2[] = "h\xc3\xa9";
    char *actions[] = {a0, a1, a2};
    for (int variant = 0; variant < 4; variant++) {
        bool with_seed = variant & 1, with_actions = variant & 2;
        pl__buf payload = {0}, seed = {0}, enc = {0};
        pl__run_info ri;
        info_sample(&ri, &payload, &seed, with_actions ? actions : NULL,
                    with_seed);
        cr_assert_eq(pl__run_info_encode(&enc, "r", &ri), PL_OK);
        pl__run_info got;
        int st = pl__run_info_decode(&got, "r", enc.data, enc.len);
        cr_assert_eq(st, PL_OK, "variant %d: %s", variant, pl_errmsg());
        cr_assert_str_eq(got.policy, "root-policy");
        cr_assert_eq(got.payload_len, payload.len);
        cr_assert_eq(memcmp(got.payload, payload.data, payload.len), 0);
        cr_assert_eq(got.n_actions, with_actions ? 3u : 0u);
        for (size_t i = 0; i < got.n_actions; i++)
            cr_assert_str_eq(got.actions[i], actions[i]);
        if (with_seed) {
            cr_assert_not_null(got.seed);
            cr_assert_eq(got.seed_len, seed.len);
            cr_assert_eq(memcmp(got.seed, seed.data, seed.len), 0);
        } else {
            cr_assert_null(got.seed, "no seed decodes as NULL");
            cr_assert_eq(got.seed_len, 0);
        }
        cr_assert_eq(got.created_us, 1712345678901234);
        pl__run_info_clear(&got);
        cr_assert_null(got.policy, "clear leaves the record empty");
        pl__buf_free(&payload);
        pl__buf_free(&seed);
        pl__buf_free(&enc);
    }
}

/* A run info map built by hand: which field to spoil, and how. */
enum {
    SPOIL_NONE,
    SPOIL_NO_V,
    SPOIL_V2,
    SPOIL_NO_POLICY,
    SPOIL_NO_PAYLOAD,
    SPOIL_POLICY_EMPTY,
    SPOIL_POLICY_CTL,
    SPOIL_POLICY_LONG,
    SPOIL_POLICY_INT,
    SPOIL_PAYLOAD_ARRAY,
    SPOIL_PAYLOAD_BIN,
    SPOIL_ACTIONS_MAP,
    SPOIL_ACTION_INT,
    SPOIL_ACTION_EMPTY,
    SPOIL_ACTIONS_TWICE,
    SPOIL_CREATED_STR,
    SPOIL_INT_KEY,
    SPOIL_UNKNOWN_KEY,
    SPOIL_TRAILING,
    SPOIL_COUNT
};

static void info_build(pl__buf *b, int spoil)
{
    char longname[PL_MAX_NAME + 1];
    memset(longname, 'p', sizeof longname);
    uint32_t n = 5 - (spoil == SPOIL_NO_V) - (spoil == SPOIL_NO_POLICY) -
                 (spoil == SPOIL_NO_PAYLOAD) + (spoil == SPOIL_ACTIONS_TWICE) +
                 (spoil == SPOIL_INT_KEY) + (spoil == SPOIL_UNKNOWN_KEY);
    mp_map(b, n);
    if (spoil == SPOIL_UNKNOWN_KEY) { /* a field from a newer writer */
        mp_cstr(b, "future");
        mp_map(b, 2);
        mp_cstr(b, "x");
        mp_bin(b, "\x00\x01", 2);
        mp_cstr(b, "y");
        mp_array(b, 2);
        mp_nil(b);
        mp_f64(b, NAN);
    }
    if (spoil != SPOIL_NO_V) {
        mp_cstr(b, "v");
        mp_uint(b, spoil == SPOIL_V2 ? 3 : 1);
    }
    if (spoil != SPOIL_NO_POLICY) {
        mp_cstr(b, "policy");
        if (spoil == SPOIL_POLICY_EMPTY)
            mp_str(b, "", 0);
        else if (spoil == SPOIL_POLICY_CTL)
            mp_cstr(b, "bad\nname");
        else if (spoil == SPOIL_POLICY_LONG)
            mp_str(b, longname, sizeof longname);
        else if (spoil == SPOIL_POLICY_INT)
            mp_uint(b, 7);
        else
            mp_cstr(b, "root");
    }
    if (spoil != SPOIL_NO_PAYLOAD) {
        mp_cstr(b, "payload");
        if (spoil == SPOIL_PAYLOAD_ARRAY) {
            mp_array(b, 0);
        } else if (spoil == SPOIL_PAYLOAD_BIN) {
            mp_map(b, 1);
            mp_cstr(b, "b");
            mp_bin(b, "x", 1);
        } else {
            mp_map(b, 1);
            mp_cstr(b, "k");
            mp_uint(b, 1);
        }
    }
    for (int twice = 0; twice < 1 + (spoil == SPOIL_ACTIONS_TWICE); twice++) {
        mp_cstr(b, "actions");
        if (spoil == SPOIL_ACTIONS_MAP) {
            mp_map(b, 0);
        } else {
            mp_array(b, 2);
            mp_cstr(b, "a");
            if (spoil == SPOIL_ACTION_INT)
                mp_uint(b, 1);
            else if (spoil == SPOIL_ACTION_EMPTY)
                mp_str(b, "", 0);
            else
                mp_cstr(b, "b");
        }
    }
    mp_cstr(b, "created");
    if (spoil == SPOIL_CREATED_STR)
        mp_cstr(b, "yesterday");
    else
        mp_int(b, 123);
    if (spoil == SPOIL_INT_KEY) {
        mp_uint(b, 1);
        mp_uint(b, 2);
    }
    if (spoil == SPOIL_TRAILING)
        mp_nil(b);
}

Test(codec, run_info_rejects_malformed)
{
    pl__buf b = {0};
    for (int spoil = 0; spoil < SPOIL_COUNT; spoil++) {
        pl__buf_reset(&b);
        info_build(&b, spoil);
        int want = spoil == SPOIL_NONE || spoil == SPOIL_UNKNOWN_KEY ? PL_OK
                   : spoil == SPOIL_V2 ? PL_EVERSION
                                       : PL_ECORRUPT;
        uint8_t *c = exact_copy(b.data, b.len);
        pl__run_info ri;
        set_sentinel();
        int st = pl__run_info_decode(&ri, "r", c, b.len);
        cr_assert_eq(st, want, "spoil %d: %s (%s)", spoil, pl_status_name(st),
                     pl_errmsg());
        if (st == PL_OK) {
            cr_assert_str_eq(ri.policy, "root");
            cr_assert_eq(ri.n_actions, 2);
            cr_assert_eq(ri.created_us, 123);
            pl__run_info_clear(&ri);
        } else {
            cr_assert(strcmp(pl_errmsg(), sentinel) != 0,
                      "spoil %d: no "
                      "message",
                      spoil);
            cr_assert_null(ri.policy,
                           "spoil %d: a failed decode left "
                           "memory behind",
                           spoil);
        }
        free(c);
    }
    /* every truncation of a good record */
    pl__buf_reset(&b);
    info_build(&b, SPOIL_NONE);
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *c = exact_copy(b.data, len);
        pl__run_info ri;
        cr_assert_eq(pl__run_info_decode(&ri, "r", c, len), PL_ECORRUPT,
                     "cut to %zu bytes", len);
        free(c);
    }
    /* not a map; forged counts; a bomb in an unknown field */
    static const uint8_t not_map[] = {0x92, 0xa1, 'v', 0x01};
    pl__run_info ri;
    cr_assert_eq(pl__run_info_decode(&ri, "r", not_map, sizeof not_map),
                 PL_ECORRUPT);
    pl__buf_reset(&b);
    put_u8(&b, 0xdf);
    put_be(&b, 0xffffffffu, 4);
    mp_cstr(&b, "v");
    mp_uint(&b, 1);
    cr_assert_eq(pl__run_info_decode(&ri, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "actions");
    put_u8(&b, 0xdd);
    put_be(&b, 0xffffffffu, 4);
    cr_assert_eq(pl__run_info_decode(&ri, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "zz");
    for (int i = 0; i < 100000; i++)
        mp_array(&b, 1);
    mp_nil(&b);
    cr_assert_eq(pl__run_info_decode(&ri, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_free(&b);
}

static void state_full(pl__run_state *st, bool optional)
{
    memset(st, 0, sizeof *st);
    st->status = optional ? PL_RUN_SUSPENDED : PL_RUN_COMPLETED;
    st->steps = 1234567890123ull;
    st->updated_us = 1712345678901234;
    st->heartbeat_us = 1712345678905678;
    st->owner_pid = 4242;
    st->owner_start = 99887766;
    snprintf(st->owner_host, sizeof st->owner_host, "host.example");
    st->attempts = 7;
    st->error = optional ? PL_EPOLICY : 0;
    if (optional) {
        st->reason = strdup("policy 'x' failed: because");
        snprintf(st->token, sizeof st->token, "%s",
                 "0123456789abcdef0123456789abcdef");
        st->susp_path = strdup("0.3.5");
        st->susp_seq = 17;
        pl__buf b = {0};
        payload_of(&b, "{\"question\": \"approve?\"}");
        st->prompt = b.data;
        st->prompt_len = b.len;
        pl__buf r = {0};
        payload_of(&r, "{\"sum\": 3}");
        st->result = r.data;
        st->result_len = r.len;
        st->open = calloc(2, sizeof *st->open);
        cr_assert_not_null(st->open);
        st->n_open = 2;
        st->open[0].seq = 4; /* the root */
        memset(st->open[0].hash, 0xab, PL_HASH_LEN);
        st->open[1].depth = 2; /* 0.3.5 */
        st->open[1].comps[0] = 3;
        st->open[1].comps[1] = 5;
        st->open[1].seq = 16;
        memset(st->open[1].hash, 0xcd, PL_HASH_LEN);
    }
}

static void state_same(const pl__run_state *a, const pl__run_state *b)
{
    cr_assert_eq(a->status, b->status);
    cr_assert_eq(a->steps, b->steps);
    cr_assert_eq(a->updated_us, b->updated_us);
    cr_assert_eq(a->heartbeat_us, b->heartbeat_us);
    cr_assert_eq(a->owner_pid, b->owner_pid);
    cr_assert_eq(a->owner_start, b->owner_start);
    cr_assert_str_eq(a->owner_host, b->owner_host);
    cr_assert_eq(a->attempts, b->attempts);
    cr_assert_eq(a->error, b->error);
    cr_assert_str_eq(a->token, b->token);
    cr_assert_eq(a->susp_seq, b->susp_seq);
    cr_assert_eq(!a->reason, !b->reason);
    if (a->reason)
        cr_assert_str_eq(a->reason, b->reason);
    cr_assert_eq(!a->susp_path, !b->susp_path);
    if (a->susp_path)
        cr_assert_str_eq(a->susp_path, b->susp_path);
    cr_assert_eq(a->prompt_len, b->prompt_len);
    cr_assert_eq(!a->prompt, !b->prompt);
    if (a->prompt)
        cr_assert_eq(memcmp(a->prompt, b->prompt, a->prompt_len), 0);
    cr_assert_eq(a->result_len, b->result_len);
    cr_assert_eq(!a->result, !b->result);
    if (a->result)
        cr_assert_eq(memcmp(a->result, b->result, a->result_len), 0);
    cr_assert_eq(a->n_open, b->n_open);
    for (size_t i = 0; i < a->n_open; i++) {
        cr_assert_eq(a->open[i].depth, b->open[i].depth);
        cr_assert_eq(a->open[i].seq, b->open[i].seq);
        cr_assert_eq(memcmp(a->open[i].comps, b->open[i].comps,
                            a->open[i].depth * sizeof a->open[i].comps[0]),
                     0);
        cr_assert_eq(memcmp(a->open[i].hash, b->open[i].hash, PL_HASH_LEN), 0);
    }
}

Test(codec, run_state_roundtrip)
{
    for (int optional = 0; optional < 2; optional++) {
        pl__run_state st, got, copy;
        state_full(&st, optional);
        pl__buf enc = {0};
        cr_assert_eq(pl__run_state_encode(&enc, "r", &st), PL_OK);
        int rc = pl__run_state_decode(&got, "r", enc.data, enc.len);
        cr_assert_eq(rc, PL_OK, "%s", pl_errmsg());
        state_same(&st, &got);
        if (!optional) {
            cr_assert_null(got.reason);
            cr_assert_null(got.susp_path);
            cr_assert_null(got.prompt);
            cr_assert_null(got.result);
            cr_assert_str_eq(got.token, "");
        }
        cr_assert_eq(pl__run_state_copy(&copy, &got), PL_OK);
        state_same(&st, &copy);
        if (optional)
            cr_assert(copy.reason != got.reason && copy.prompt != got.prompt,
                      "the copy is deep");
        pl__run_state_clear(&copy);
        pl__run_state_clear(&got);
        pl__run_state_clear(&st);
        pl__buf_free(&enc);
    }
}

/* A run state map by hand with one field replaced (NULL value: left out). */
static void state_build(pl__buf *b, const char *key, const uint8_t *val,
                        size_t val_len, bool drop)
{
    static const char *const keys[] = {"v",       "status",    "steps",
                                       "updated", "heartbeat", "pid",
                                       "host",    "attempts",  "error"};
    uint32_t n = 9 - (drop ? 1 : 0);
    bool extra = true;
    for (size_t i = 0; i < 9; i++)
        if (!strcmp(keys[i], key))
            extra = false;
    if (extra && !drop)
        n++;
    mp_map(b, n);
    for (size_t i = 0; i < 9; i++) {
        bool hit = !strcmp(keys[i], key);
        if (hit && drop)
            continue;
        mp_cstr(b, keys[i]);
        if (hit) {
            put(b, val, val_len);
            continue;
        }
        switch (i) {
        case 0: mp_uint(b, 1); break;
        case 1: mp_uint(b, PL_RUN_FAILED); break;
        case 6: mp_cstr(b, "h"); break;
        case 8: mp_int(b, PL_EPOLICY); break;
        default: mp_uint(b, 5); break;
        }
    }
    if (extra && !drop) {
        mp_cstr(b, key);
        put(b, val, val_len);
    }
}

Test(codec, run_state_rejects_malformed)
{
    static const struct {
        const char *key;
        const char *val; /* raw msgpack */
        size_t len;
        bool drop;
        int want;
    } cases[] = {
        {"zz", "\xc0", 1, false, PL_OK},      /* unknown: skipped */
        {"v", "\x04", 1, false, PL_EVERSION}, /* 3 is the newest */
        {"v", "", 0, true, PL_ECORRUPT},      /* no version */
        {"v",
         "\xa1"
         "1",
         2, false, PL_ECORRUPT},
        {"status", "", 0, true, PL_ECORRUPT}, /* no status */
        {"status", "\x00", 1, false, PL_ECORRUPT},
        {"status", "\x08", 1, false, PL_ECORRUPT},
        {"status", "\xff", 1, false, PL_ECORRUPT},
        {"steps", "\xff", 1, false, PL_ECORRUPT}, /* negative */
        {"attempts", "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 9, false,
         PL_ECORRUPT},                                    /* past u32 */
        {"error", "\x01", 1, false, PL_ECORRUPT},         /* positive */
        {"error", "\xd1\xd8\xf0", 3, false, PL_OK},       /* -10000 */
        {"error", "\xd1\xd8\xef", 3, false, PL_ECORRUPT}, /* -10001 */
        {"host", "\x01", 1, false, PL_ECORRUPT},
        {"token",
         "\xd9\x21"
         "012345678901234567890123456789012",
         35, false, PL_ECORRUPT}, /* 33 chars */
        {"token",
         "\xa2"
         "ab",
         3, false, PL_OK},
        {"reason", "\x01", 1, false, PL_ECORRUPT},
        {"spath", "\xc0", 1, false, PL_ECORRUPT},
        {"sseq",
         "\xa1"
         "x",
         2, false, PL_ECORRUPT},
        {"prompt", "\x90", 1, false, PL_ECORRUPT}, /* not a map */
        {"prompt", "\x81\x01\x02", 3, false, PL_ECORRUPT},
        {"result",
         "\x81\xa1"
         "b\xc4\x00",
         5, false, PL_ECORRUPT},
        {"result",
         "\x81\xa1"
         "b\x01",
         4, false, PL_OK},
        {"updated", "\xa0", 1, false, PL_ECORRUPT},
    };
    pl__buf b = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl__buf_reset(&b);
        state_build(&b, cases[i].key, (const uint8_t *)cases[i].val,
                    cases[i].len, cases[i].drop);
        uint8_t *c = exact_copy(b.data, b.len);
        pl__run_state st;
        set_sentinel();
        int rc = pl__run_state_decode(&st, "r", c, b.len);
        cr_assert_eq(rc, cases[i].want, "case %zu (%s): %s (%s)", i,
                     cases[i].key, pl_status_name(rc), pl_errmsg());
        if (rc == PL_OK) {
            cr_assert_eq(st.status, PL_RUN_FAILED);
            if (strcmp(cases[i].key, "error") != 0)
                cr_assert_eq(st.error, PL_EPOLICY);
            pl__run_state_clear(&st);
        } else {
            cr_assert(strcmp(pl_errmsg(), sentinel) != 0,
                      "case %zu: no "
                      "message",
                      i);
            cr_assert_null(st.reason);
            cr_assert_null(st.prompt);
        }
        free(c);
    }
    /* every truncation of a good, full state */
    pl__run_state full;
    state_full(&full, true);
    pl__buf_reset(&b);
    cr_assert_eq(pl__run_state_encode(&b, "r", &full), PL_OK);
    pl__run_state_clear(&full);
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *c = exact_copy(b.data, len);
        pl__run_state st;
        cr_assert_eq(pl__run_state_decode(&st, "r", c, len), PL_ECORRUPT,
                     "cut to %zu bytes", len);
        free(c);
    }
    /* trailing bytes after the map */
    put_u8(&b, 0xc0);
    pl__run_state st;
    cr_assert_eq(pl__run_state_decode(&st, "r", b.data, b.len), PL_ECORRUPT);
    pl__buf_free(&b);
}

/*
 * A checksummed run state of format @p v by hand: "v", "status" and, when
 * @p key is not NULL, @p key with the raw value @p val, then "sum".
 */
static void state_v(pl__buf *b, unsigned v, const char *key, const pl__buf *val)
{
    mp_map(b, 3 + (key != NULL));
    mp_cstr(b, "v");
    mp_uint(b, v);
    mp_cstr(b, "status");
    mp_uint(b, PL_RUN_RUNNING);
    if (key) {
        mp_cstr(b, key);
        put(b, val->data, val->len);
    }
    uint8_t sum[PL_HASH_LEN];
    cr_assert_eq(pl__runrec_sum('s', "r", b->data, b->len, sum), PL_OK);
    mp_cstr(b, "sum");
    put_u8(b, 0xc4);
    put_u8(b, PL_HASH_LEN);
    put(b, sum, PL_HASH_LEN);
}

/* One "open" entry: [[comps...], seq, bin of hash_len bytes]. */
static void open_entry(pl__buf *b, unsigned depth, uint64_t seq,
                       size_t hash_len)
{
    put_u8(b, 0x93);
    mp_array(b, depth);
    for (unsigned d = 0; d < depth; d++)
        mp_uint(b, d);
    mp_uint(b, seq);
    put_u8(b, 0xc4);
    put_u8(b, (uint8_t)hash_len);
    for (size_t i = 0; i < hash_len; i++)
        put_u8(b, 0x5a);
}

Test(codec, run_state_open_ledgers_are_checked)
{
    static const struct {
        unsigned v, n, depth;
        uint64_t seq;
        size_t hash_len;
        int want;
    } cases[] = {
        {3, 1, 2, 7, PL_HASH_LEN, PL_OK},
        {3, PL_MAX_DEPTH + 1, PL_MAX_DEPTH, 7, PL_HASH_LEN, PL_OK},
        {3, 0, 0, 0, PL_HASH_LEN, PL_ECORRUPT},                /* empty */
        {3, PL_MAX_DEPTH + 2, 1, 0, PL_HASH_LEN, PL_ECORRUPT}, /* too many */
        {3, 1, PL_MAX_DEPTH + 1, 0, PL_HASH_LEN, PL_ECORRUPT}, /* too deep */
        {3, 1, 1, 1ull << 32, PL_HASH_LEN, PL_ECORRUPT},       /* past u32 */
        {3, 1, 1, 0, PL_HASH_LEN - 1, PL_ECORRUPT},            /* short */
        {2, 1, 1, 0, PL_HASH_LEN, PL_ECORRUPT}, /* not in format 2 */
    };
    pl__buf val = {0}, b = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl__buf_reset(&val);
        pl__buf_reset(&b);
        mp_array(&val, cases[i].n);
        for (unsigned j = 0; j < cases[i].n; j++)
            open_entry(&val, cases[i].depth, cases[i].seq, cases[i].hash_len);
        state_v(&b, cases[i].v, "open", &val);
        uint8_t *c = exact_copy(b.data, b.len);
        pl__run_state st;
        int rc = pl__run_state_decode(&st, "r", c, b.len);
        cr_assert_eq(rc, cases[i].want, "case %zu: %s (%s)", i,
                     pl_status_name(rc), pl_errmsg());
        if (!rc) {
            cr_assert_eq(st.n_open, cases[i].n);
            cr_assert_eq(st.open[0].depth, cases[i].depth);
            cr_assert_eq(st.open[0].seq, cases[i].seq);
        }
        pl__run_state_clear(&st);
        free(c);
    }
    /* format 2 without open ledgers stays readable; 4 is not */
    for (unsigned v = 2; v <= 4; v++) {
        pl__buf_reset(&b);
        state_v(&b, v, NULL, NULL);
        pl__run_state st;
        int rc = pl__run_state_decode(&st, "r", b.data, b.len);
        cr_assert_eq(rc, v == 4 ? PL_EVERSION : PL_OK, "v %u: %s", v,
                     pl_errmsg());
        pl__run_state_clear(&st);
    }
    pl__buf_free(&val);
    pl__buf_free(&b);
}

Test(codec, fuzz_run_records, .timeout = 300)
{
    rng_state = 0x2545f4914f6cdd1dull;
    pl__buf seeds[3] = {{0}, {0}, {0}};
    pl__buf payload = {0}, seedarr = {0};
    char a0[] = "search";
    char *actions[] = {a0, a0, a0};
    pl__run_info ri;
    info_sample(&ri, &payload, &seedarr, actions, true);
    cr_assert_eq(pl__run_info_encode(&seeds[0], "r", &ri), PL_OK);
    pl__run_state st;
    state_full(&st, true);
    cr_assert_eq(pl__run_state_encode(&seeds[1], "r", &st), PL_OK);
    pl__run_state_clear(&st);
    state_full(&st, false);
    cr_assert_eq(pl__run_state_encode(&seeds[2], "r", &st), PL_OK);
    pl__run_state_clear(&st);

    pl__buf m = {0};
    for (unsigned long i = 0; i < 60000; i++) {
        mutate(&m, &seeds[below(3)], &seeds[below(3)]);
        fuzz_one(m.data, m.len, i);
    }
    for (int i = 0; i < 3; i++)
        pl__buf_free(&seeds[i]);
    pl__buf_free(&payload);
    pl__buf_free(&seedarr);
    pl__buf_free(&m);
}

/*
 * A stored payload of one-byte values decodes to a 64-byte cJSON node per
 * byte: past PL__TREE_MAX the reader refuses it (PL_ELIMIT) before it
 * allocates anything, and a smaller one still decodes.
 */
Test(codec, a_payload_that_would_decode_too_big_is_refused)
{
    size_t n = PL__TREE_MAX / sizeof(cJSON) + 1000; /* {"a": [0, 0, ...]} */
    pl__buf b = {0};
    mp_map(&b, 1);
    mp_cstr(&b, "a");
    put_u8(&b, 0xdd);
    for (int i = 3; i >= 0; i--)
        put_u8(&b, (uint8_t)(n >> (8 * i)));
    uint8_t *zeros = calloc(n, 1);
    cr_assert_not_null(zeros);
    put(&b, zeros, n);
    free(zeros);
    cJSON *j = NULL;
    int st = pl__payload_decode(&j, b.data, b.len);
    cr_assert_eq(st, PL_ELIMIT, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(j);
    cr_assert(strstr(pl_errmsg(), "would decode to"), "%s", pl_errmsg());
    pl__tree_size ts;
    cr_assert_eq(pl__payload_measure(&ts, b.data, b.len, 0), PL_ELIMIT);

    /* the same shape, 100000 values: decodes */
    pl__buf_reset(&b);
    mp_map(&b, 1);
    mp_cstr(&b, "a");
    mp_array(&b, 100000);
    for (int i = 0; i < 100000; i++)
        put_u8(&b, 0);
    cr_assert_eq(pl__payload_decode(&j, b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "a")), 100000);
    cJSON_Delete(j);
    pl__buf_free(&b);
}

/* ---- inbox and timer records (runrec.c) ------------------------------------ */

static void read_seed(const char *name, pl__buf *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/../fuzz/corpus/fuzz_run_record/%s",
             PL_TEST_SRC_DIR, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    pl__buf_reset(out);
    cr_assert_eq(pl__buf_append(out, buf, n), PL_OK);
}

Test(codec, inbox_and_timer_records_round_trip_and_are_bound_to_their_run)
{
    uint8_t pay[] = {0x81, 0xa2, 'b', 'y', 0xa3, 'b', 'o', 'b'};
    pl__inbox_rec ev = {.name = "approved",
                        .payload = pay,
                        .payload_len = sizeof pay,
                        .sent_us = 123};
    pl__buf b = {0};
    cr_assert_eq(pl__inbox_encode(&b, "run-1", &ev), PL_OK);
    pl__inbox_rec back;
    cr_assert_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK);
    cr_expect_str_eq(back.name, "approved");
    cr_expect_null(back.reason);
    cr_expect_eq(back.sent_us, 123);
    cr_expect_eq(back.payload_len, sizeof pay);
    pl__inbox_clear(&back);
    set_sentinel();
    cr_expect_eq(pl__inbox_decode(&back, "run-2", b.data, b.len), PL_ECORRUPT);
    cr_expect(strstr(pl_errmsg(), "run-2") != NULL, "%s", pl_errmsg());
    for (size_t i = 0; i < b.len; i++) { /* every byte matters */
        b.data[i] ^= 0x01;
        int st = pl__inbox_decode(&back, "run-1", b.data, b.len);
        cr_expect(st == PL_ECORRUPT || st == PL_EVERSION, "byte %zu: %s", i,
                  pl_status_name(st));
        if (!st)
            pl__inbox_clear(&back);
        b.data[i] ^= 0x01;
    }
    pl__inbox_rec ca = {.reason = "", .sent_us = 5};
    pl__buf_reset(&b);
    cr_assert_eq(pl__inbox_encode(&b, "run-1", &ca), PL_OK);
    cr_assert_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK);
    cr_expect_str_eq(back.reason, "");
    cr_expect_null(back.name);
    pl__inbox_clear(&back);
    /* a copy is the record, field by field, its own memory */
    pl__inbox_rec cp;
    cr_assert_eq(pl__inbox_copy(&cp, &ca), PL_OK);
    cr_expect_str_eq(cp.reason, "");
    cr_expect(cp.reason != ca.reason && !cp.name && !cp.payload);
    cr_expect_eq(cp.sent_us, 5);
    pl__inbox_clear(&cp);
    cr_assert_eq(pl__inbox_copy(&cp, &ev), PL_OK);
    cr_expect_str_eq(cp.name, "approved");
    cr_expect(!cp.reason && cp.payload != ev.payload);
    cr_expect_eq(cp.payload_len, sizeof pay);
    cr_expect_arr_eq(cp.payload, pay, sizeof pay);
    cr_expect_eq(cp.sent_us, 123);
    pl__inbox_clear(&cp);
    /* what a store marks a record it is given as: an event or not */
    bool cancel = false;
    cr_expect_eq(pl__inbox_is_cancel(b.data, b.len, &cancel), PL_OK);
    cr_expect(cancel);
    pl__buf_reset(&b);
    cr_assert_eq(pl__inbox_encode(&b, "run-1", &ev), PL_OK);
    cr_expect_eq(pl__inbox_is_cancel(b.data, b.len, &cancel), PL_OK);
    cr_expect(!cancel);
    cr_expect_eq(pl__inbox_is_cancel(b.data + 1, b.len - 1, &cancel),
                 PL_EINVAL);
    cr_expect_eq(pl__inbox_is_cancel(NULL, 0, &cancel), PL_EINVAL);

    int64_t due;
    char id[PL_MAX_RUN_ID + 1];
    pl__buf_reset(&b);
    cr_assert_eq(pl__timer_encode(&b, "run-1", 987654321), PL_OK);
    cr_assert_eq(pl__timer_decode(&due, id, b.data, b.len), PL_OK);
    cr_expect_eq(due, 987654321);
    cr_expect_str_eq(id, "run-1");
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x10;
        int st = pl__timer_decode(&due, id, b.data, b.len);
        cr_expect(st == PL_ECORRUPT || st == PL_EVERSION, "byte %zu: %s", i,
                  pl_status_name(st));
        b.data[i] ^= 0x10;
    }
    cr_expect_eq(pl__timer_decode(&due, id, b.data, 3), PL_ECORRUPT);
    cr_expect_eq(pl__timer_decode(&due, id, NULL, 0), PL_ECORRUPT);

    /* the fuzz corpus's seeds are real records */
    read_seed("seed-inbox-event", &b);
    cr_expect_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    pl__inbox_clear(&back);
    read_seed("seed-inbox-cancel", &b);
    cr_expect_eq(pl__inbox_decode(&back, "run-1", b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    pl__inbox_clear(&back);
    read_seed("seed-timer", &b);
    cr_expect_eq(pl__timer_decode(&due, id, b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    read_seed("seed-state-waiting", &b);
    pl__run_state st;
    cr_assert_eq(pl__run_state_decode(&st, "run-1", b.data, b.len), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(st.status, PL_RUN_WAITING);
    cr_expect_str_eq(st.wait_event, "approved");
    cr_expect_eq(st.wait_until_ms, 1764300000000);
    pl__run_state_clear(&st);
    pl__buf_free(&b);
}
