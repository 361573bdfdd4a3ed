/*
 * test_store_chain.c -- the LMDB store's hash chain, and what verification
 * makes of a store tampered with through the LMDB C API (changed payloads, a
 * changed last step); a call's result stored once, and which callee ledgers
 * fold.
 */
#include "support.h"
#include "support_store.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the hash chain ------------------------------------------------------ */

static void expect_hex(const uint8_t d[PL_HASH_LEN], const char *want)
{
    char hex[2 * PL_HASH_LEN + 1];
    pl__hex(hex, d, PL_HASH_LEN);
    cr_assert_str_eq(hex, want);
}

/* The chain is SHA-256 as published (the values below are Python's
 * hashlib), so stores written by any build verify with any other. */
Test(store, hash_is_sha256)
{
    pl__hasher *h;
    cr_assert_eq(pl__hasher_new(&h), PL_OK);
    uint8_t d[PL_HASH_LEN];
    cr_assert_eq(pl__genesis_hash(h, "chained", d), PL_OK);
    expect_hex(d, "58900026e5663a0a5bba653f13dbddfe"
                  "3c039b9e66bdbc024a19a47943400b3b");

    /* key then record, across four blocks */
    static const uint8_t key[] = {0, 0, 0, 0, 0, 0, 0, 1, '0', 0, 0, 0, 0, 5};
    uint8_t rec[200];
    memset(rec, 'x', sizeof rec);
    cr_assert_eq(pl__step_hash(h, key, sizeof key, rec, sizeof rec, d), PL_OK);
    expect_hex(d, "ba2b1c36a800308b1cb0a999c2640b89"
                  "ae9b8d5cb894d2164af6e6540ce1f3e6");

    /* in parts, reusing the context: FIPS 180-2's "abc", then 1,000 'a' */
    cr_assert_eq(pl__hash_init(h), PL_OK);
    cr_assert_eq(pl__hash_update(h, "ab", 2), PL_OK);
    cr_assert_eq(pl__hash_update(h, "c", 1), PL_OK);
    cr_assert_eq(pl__hash_final(h, d), PL_OK);
    expect_hex(d, "ba7816bf8f01cfea414140de5dae2223"
                  "b00361a396177a9cb410ff61f20015ad");
    memset(rec, 'a', sizeof rec);
    cr_assert_eq(pl__hash_init(h), PL_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(pl__hash_update(h, rec, sizeof rec), PL_OK);
    cr_assert_eq(pl__hash_final(h, d), PL_OK);
    expect_hex(d, "41edece42d63e8d9bf515a9ba6932e1c"
                  "20cbc9f5a5d134645adb5db1b9737ea3");
    pl__hasher_free(h);
}

Test(store, hash_chain_links_every_step)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 2, \"fanout\": 2}", "chained");
    cr_assert_eq(pl_run_verify(e, "chained"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_verify(e, "missing"), PL_ENOTFOUND);
    cr_assert_eq(pl_run_verify(e, "bad id"), PL_EINVAL);
    cr_assert_eq(pl_run_verify(NULL, "chained"), PL_EINVAL);

    /* step 0 of every ledger links to the run's genesis hash */
    pl__hasher *h;
    cr_assert_eq(pl__hasher_new(&h), PL_OK);
    uint8_t genesis[PL_HASH_LEN];
    cr_assert_eq(pl__genesis_hash(h, "chained", genesis), PL_OK);
    static const char *const paths[] = {"0", "0.0", "0.2", "0.0.0", "0.2.2"};
    for (size_t i = 0; i < 5; i++) {
        pl_steps *l;
        cr_assert_eq(pl_run_ledger(&l, e, "chained", paths[i]), PL_OK);
        cr_assert_gt(pl_steps_count(l), 0, "ledger %s", paths[i]);
        uint8_t got[PL_HASH_LEN];
        cr_assert_eq(pl_step_prev_hash(got, pl_steps_at(l, 0)), PL_OK);
        cr_assert_eq(memcmp(got, genesis, PL_HASH_LEN), 0, "ledger %s",
                     paths[i]);
        pl_steps_free(l);
    }
    pl_engine_close(e);

    /* every later step holds the hash of the stored step before it:
     * SHA-256 of that step's key and record */
    raw r;
    raw_open(&r, path, false);
    uint64_t num = raw_run_num(&r, "chained");
    uint32_t comps[1] = {2};
    for (unsigned depth = 0; depth < 2; depth++) {
        for (uint32_t seq = 1; seq < 6; seq++) {
            uint8_t key[64], pkey[64];
            size_t kl = step_key(key, num, comps, depth, seq);
            size_t pkl = step_key(pkey, num, comps, depth, seq - 1);
            size_t n, pn;
            uint8_t *rec = raw_get_step(&r, key, kl, &n);
            uint8_t *prev = raw_get_step(&r, pkey, pkl, &pn);
            pl__rec dr; /* the callee's last step is a mirror */
            cr_assert_eq(pl__rec_decode_lazy(&dr, rec, n), PL_OK);
            cr_assert_eq(dr.seq, seq);
            uint8_t link[PL_HASH_LEN];
            cr_assert_eq(pl__step_hash(h, pkey, pkl, prev, pn, link), PL_OK);
            cr_assert_eq(memcmp(dr.prev_hash, link, PL_HASH_LEN), 0,
                         "depth %u seq %u", depth, seq);
            free(rec);
            free(prev);
        }
    }
    raw_close(&r);
    pl__hasher_free(h);
    pl_registry_free(reg);
}

Test(store, verify_detects_a_changed_payload)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "tampered", &r);
    /* 0:3 is add's second result, {"sum": 1}: make it {"sum": 5} */
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 3), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    size_t off = payload_offset(rec, n);
    static const uint8_t sum1[] = {0x81, 0xa3, 's', 'u', 'm', 0x01};
    cr_assert_eq(n - off, sizeof sum1);
    cr_assert_eq(memcmp(rec + off, sum1, sizeof sum1), 0);
    rec[n - 1] ^= 0x04;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    int st = pl_run_verify(e, "tampered");
    cr_assert_eq(st, PL_ECORRUPT, "verify gave %s", pl_status_name(st));
    const char *msg = pl_errmsg();
    cr_assert(strstr(msg, "tampered") != NULL, "names the run: %s", msg);
    cr_assert(strstr(msg, "0:4") != NULL,
              "names where the chain breaks "
              "(the step after the changed one): %s",
              msg);
    cr_assert(strstr(msg, "hash") != NULL, "%s", msg);
    /* it still verifies as broken after more reads */
    cr_assert_eq(pl_run_verify(e, "tampered"), PL_ECORRUPT);
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * The last step of a ledger has no successor to store its hash, yet "a step
 * that changes, moves or goes missing breaks the chain" (hash.h) and verify
 * is the tamper check: something must vouch for the last step too -- the run
 * record for the root's result, the caller's ledger for a callee's.
 */
Test(store, verify_detects_a_changed_last_step)
{
    pl_registry *reg = registry();
    for (int which = 0; which < 2; which++) {
        const char *path = t_store_path();
        char id[16];
        snprintf(id, sizeof id, "last-%d", which);
        raw r;
        uint64_t num = which ? nest_then_raw(path, reg, id, &r)
                             : chain_then_raw(path, reg, id, &r);
        /* the root's result {"total": 10}, or the last call's last step */
        uint32_t comps[1] = {4};
        uint8_t key[64];
        size_t kl = which ? step_key(key, num, comps, 1, 1)
                          : step_key(key, num, NULL, 0, 10);
        size_t n;
        uint8_t *rec = raw_get_step(&r, key, kl, &n);
        if (which) {
            /* a mirror: its result is 0:5's; change when it was made */
            cr_assert(rec[1] == PL__FORMAT_V2 && rec[n - 1] == 0xc0);
            cr_assert_eq(rec[3], 0xcf, "the time, as a uint 64");
            rec[11] ^= 1;
        } else {
            cr_assert_eq(rec[n - 1], 10);
            rec[n - 1] = 11;
        }
        raw_put_step(&r, key, kl, rec, n);
        free(rec);
        raw_close(&r);

        pl_engine *e = open_with(path, reg, 0, 0);
        int st = pl_run_verify(e, id);
        cr_expect_eq(st, PL_ECORRUPT, "%s: a changed %s passed verification",
                     id,
                     which ? "last step of a callee's ledger (0.4:1)"
                           : "result of the run (0:10)");
        pl_engine_close(e);
    }
    pl_registry_free(reg);
}

/*
 * A call's result is stored once: in its caller's action_result.  A callee
 * whose ledger is the one step that returned it is folded into that
 * record; a longer ledger's last step is a mirror.  Every reader shows
 * both as if stored (codec.c).
 */
Test(store, a_call_result_is_stored_once)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "bulk", "{\"n\": 3, \"size\": 65536}", "once");
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 2}", "mirrored");
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    uint64_t num = raw_run_num(&r, "once");
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t comps[1] = {2 * i};
        uint8_t key[64];
        size_t n, kl = step_key(key, num, comps, 1, 0);
        cr_assert_not(raw_has_step(&r, key, kl), "0.%u:0 is folded", 2 * i);
        kl = step_key(key, num, NULL, 0, 2 * i + 1);
        uint8_t *rec = raw_get_step(&r, key, kl, &n);
        /* the result is the 64 KiB string its action_call holds: it
         * refers to it (share.c) */
        cr_assert(rec[0] == 0xc1 && n < 200,
                  "0:%u refers to the string of 0:%u (%zu bytes)", 2 * i + 1,
                  2 * i, n);
        free(rec);
    }
    num = raw_run_num(&r, "mirrored");
    uint32_t comps[1] = {2};
    uint8_t key[64];
    size_t n, kl = step_key(key, num, comps, 1, 1);
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    cr_assert(rec[1] == PL__FORMAT_V2 && rec[n - 1] == 0xc0 && n < 200,
              "0.2:1 is a mirror of %zu bytes", n);
    free(rec);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    static const struct {
        const char *run, *callee, *caller;
        size_t n, at, result_at;
    } cases[] = {{"once", "0.2", "0", 1, 0, 3},
                 {"mirrored", "0.2", "0", 2, 1, 3}};
    for (size_t i = 0; i < PL__ARRAY_LEN(cases); i++) {
        pl_steps *callee = NULL, *root = NULL;
        cr_assert_eq(pl_run_ledger(&callee, e, cases[i].run, cases[i].callee),
                     PL_OK, "%s", pl_errmsg());
        cr_assert_eq(pl_run_ledger(&root, e, cases[i].run, cases[i].caller),
                     PL_OK, "%s", pl_errmsg());
        cr_assert_eq(pl_steps_count(callee), cases[i].n);
        const pl_step *mine = pl_steps_at(callee, cases[i].at);
        const pl_step *res = pl_steps_at(root, cases[i].result_at);
        cr_assert_eq(pl_step_type_of(mine), PL_STEP_ACTION_RESULT);
        cr_assert_eq(pl_step_seq(mine), cases[i].at);
        cr_assert(cJSON_Compare(pl_step_payload(mine), pl_step_payload(res), 1),
                  "%s", cases[i].run);
        cr_assert(pl_step_time_us(mine) > 0);
        if (cases[i].at == 0) { /* a folded step follows the genesis */
            uint8_t genesis[PL_HASH_LEN], got[PL_HASH_LEN];
            pl__hasher *h;
            cr_assert_eq(pl__hasher_new(&h), PL_OK);
            cr_assert_eq(pl__genesis_hash(h, cases[i].run, genesis), PL_OK);
            cr_assert_eq(pl_step_prev_hash(got, mine), PL_OK);
            cr_assert_eq(memcmp(got, genesis, PL_HASH_LEN), 0);
            pl__hasher_free(h);
        }
        pl_steps_free(callee);
        pl_steps_free(root);
        cr_assert_eq(pl_run_verify(e, cases[i].run), PL_OK, "%s", pl_errmsg());
    }
    const cJSON *blob = NULL;
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "once", "0.4"), PL_OK);
    blob = cJSON_GetObjectItemCaseSensitive(pl_step_payload(pl_steps_at(l, 0)),
                                            "blob");
    cr_assert(cJSON_IsString(blob) && strlen(blob->valuestring) == 65536);
    pl_steps_free(l);

    seen sn = {0};
    cr_assert_eq(pl_run_walk(e, "once", collect, &sn), PL_OK, "%s",
                 pl_errmsg());
    wants w = {0};
    want_add(&w, "0", 0, PL_STEP_ACTION_CALL);
    want_add(&w, "0.0", 0, PL_STEP_ACTION_RESULT);
    want_add(&w, "0", 1, PL_STEP_ACTION_RESULT);
    cr_assert_eq(sn.got.n, 3 * 3 + 1, "every step, folded ones too");
    for (size_t i = 0; i < w.n; i++)
        cr_assert_str_eq(sn.got.v[i].id, w.v[i].id, "in key order");
    free(w.v);
    free(sn.got.v);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "once"), PL_OK);
    cr_assert_eq(info->steps, 10, "folded steps count");
    pl_run_info_free(info);

    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "once", NULL), PL_OK);
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert(o->calls_served == 3 && o->calls_executed == 0);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The offset of the first piece that refers to another step in the shared
 * value @p v (ledger/codec/share.c), or 0. */
static size_t ref_piece(const uint8_t *v, size_t n)
{
    size_t i = 2;
    while (i + 5 <= n) {
        if (v[i] == 0x01)
            return i;
        i += 5 + ((size_t)v[i + 1] << 24 | (size_t)v[i + 2] << 16 |
                  (size_t)v[i + 3] << 8 | v[i + 4]);
    }
    return 0;
}

/*
 * A shared value that is cut short, of another version, or refers to a
 * step that is not there or to bytes its step does not hold is refused
 * with a clear status by every reader (verify, walk, replay), never a
 * crash; the sound value reads again.
 */
Test(store, a_broken_shared_value_is_refused)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "bulk", "{\"n\": 1, \"size\": 65536}", "shared");
    pl_engine_close(e);
    raw r;
    raw_open(&r, path, false);
    uint64_t num = raw_run_num(&r, "shared");
    uint8_t key[64];
    size_t n, kl = step_key(key, num, NULL, 0, 1);
    uint8_t *sound = raw_get_step(&r, key, kl, &n);
    raw_close(&r);
    cr_assert(sound[0] == 0xc1 && n < 200, "0:1 is a shared value");
    size_t at = ref_piece(sound, n);
    cr_assert(at > 0 && sound[at + 1] == 4, "0:1 refers to a root step");
    static const struct {
        const char *what;
        int want;
    } cases[] = {{"of version 2", PL_EVERSION},
                 {"cut short", PL_ECORRUPT},
                 {"naming a step that is not there", PL_ECORRUPT},
                 {"past the end of its step", PL_ECORRUPT},
                 {"one byte longer", PL_ECORRUPT},
                 {"sound again", PL_OK}};
    for (size_t c = 0; c < PL__ARRAY_LEN(cases); c++) {
        uint8_t v[256];
        size_t vn = n;
        memcpy(v, sound, n);
        uint8_t *off = v + at + 2 + 4, *len = off + 4;
        switch (c) {
        case 0: v[1] = 2; break;
        case 1: vn -= 3; break;
        case 2: be32(v + at + 2, 7); break;
        case 3: be32(off, 1u << 30); break;
        case 4: len[3]++; break;
        default: break;
        }
        raw_open(&r, path, false);
        raw_put_step(&r, key, kl, v, vn);
        raw_close(&r);
        e = open_with(path, reg, 0, 0);
        int st = pl_run_verify(e, "shared");
        cr_expect_eq(st, cases[c].want, "verify, a shared value %s: %s (%s)",
                     cases[c].what, pl_status_name(st), pl_errmsg());
        pl_outcome *o = NULL;
        st = pl_run_continue(&o, e, "shared", NULL);
        cr_expect_eq(st, cases[c].want, "replay, a shared value %s: %s (%s)",
                     cases[c].what, pl_status_name(st), pl_errmsg());
        if (c < 4)
            cr_expect(strstr(pl_errmsg(), "shared step value"),
                      "the message says what is wrong: %s", pl_errmsg());
        pl_outcome_free(o);
        pl_engine_close(e);
    }
    free(sound);
    pl_registry_free(reg);
}

/*
 * Which callee ledgers fold: one step by the callee, of any type.  One step
 * by another actor, or two steps, are stored, the last as a mirror.
 */
Test(store, only_a_callee_ledger_of_its_own_one_step_folds)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "ask",
             "{\"calls\": [[\"say\", {\"text\": \"own\"}],"
             " [\"say\", {\"actor\": \"model\", \"text\": \"other\"}],"
             " [\"say_twice\", {\"text\": \"twice\"}]]}",
             "shapes");
    cr_assert_eq(pl_run_verify(e, "shapes"), PL_OK, "%s", pl_errmsg());
    static const struct {
        const char *ledger, *actor, *text;
        size_t n;
        bool stored, mirror;
    } cases[] = {{"0.0", "say", "own", 1, false, false},
                 {"0.2", "model", "other", 1, true, true},
                 {"0.4", "say_twice", "twice", 2, true, true}};
    for (size_t i = 0; i < PL__ARRAY_LEN(cases); i++) {
        pl_steps *l = NULL;
        cr_assert_eq(pl_run_ledger(&l, e, "shapes", cases[i].ledger), PL_OK,
                     "%s", pl_errmsg());
        cr_assert_eq(pl_steps_count(l), cases[i].n, "%s", cases[i].ledger);
        const pl_step *last = pl_steps_at(l, cases[i].n - 1);
        cr_assert_eq(pl_step_type_of(last), PL_STEP_TEXT, "%s",
                     cases[i].ledger);
        cr_assert_str_eq(pl_step_actor(last), cases[i].actor);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(pl_step_payload(last),
                                                          "text");
        cr_assert(cJSON_IsString(t) && !strcmp(t->valuestring, cases[i].text),
                  "%s", cases[i].ledger);
        pl_steps_free(l);
    }
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "shapes"), PL_OK);
    cr_assert_eq(info->steps, 6 + 4,
                 "3 calls of 2 root steps (ask "
                 "returns nothing), 4 callee steps");
    pl_run_info_free(info);
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    uint64_t num = raw_run_num(&r, "shapes");
    for (size_t i = 0; i < PL__ARRAY_LEN(cases); i++) {
        uint32_t comps[1] = {(uint32_t)(2 * i)};
        uint8_t key[64];
        size_t n, kl = step_key(key, num, comps, 1, (uint32_t)cases[i].n - 1);
        cr_assert_eq(raw_has_step(&r, key, kl), cases[i].stored, "%s",
                     cases[i].ledger);
        if (!cases[i].stored)
            continue;
        uint8_t *rec = raw_get_step(&r, key, kl, &n);
        cr_assert_eq(rec[1] == PL__FORMAT_V2 && rec[n - 1] == 0xc0,
                     cases[i].mirror, "%s", cases[i].ledger);
        free(rec);
    }
    raw_close(&r);
    pl_registry_free(reg);
}
