/*
 * test_integrity.c -- run records' checksums, and the smaller hazards of
 * stored bytes: a taken run number, a recorded time out of range, a
 * max_payload past what a store can hold.  (test_bitflip.c flips every bit
 * of a store; these are the cases one by one, with what each must say.)
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#include "codec.h"
#include "internal.h"

/* ---- the raw store ------------------------------------------------------- */

typedef struct raw {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, runs, state;
} raw;

static void raw_open(raw *r, const char *path)
{
    memset(r, 0, sizeof *r);
    cr_assert_eq(mdb_env_create(&r->env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(r->env, 8), 0);
    cr_assert_eq(mdb_env_set_mapsize(r->env, (size_t)256 << 20), 0);
    cr_assert_eq(mdb_env_open(r->env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(r->env, NULL, 0, &r->txn), 0);
    cr_assert_eq(mdb_dbi_open(r->txn, "meta", 0, &r->meta), 0);
    cr_assert_eq(mdb_dbi_open(r->txn, "runs", 0, &r->runs), 0);
    cr_assert_eq(mdb_dbi_open(r->txn, "state", 0, &r->state), 0);
}

static void raw_close(raw *r)
{
    cr_assert_eq(mdb_txn_commit(r->txn), 0);
    mdb_env_close(r->env);
}

/* A copy of a record: caller frees. */
static uint8_t *raw_get(raw *r, MDB_dbi dbi, const void *key, size_t klen,
                        size_t *len)
{
    MDB_val k = {klen, (void *)key}, v;
    cr_assert_eq(mdb_get(r->txn, dbi, &k, &v), 0);
    uint8_t *c = malloc(v.mv_size);
    cr_assert_not_null(c);
    memcpy(c, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return c;
}

static void raw_put(raw *r, MDB_dbi dbi, const void *key, size_t klen,
                    const void *val, size_t vlen)
{
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    cr_assert_eq(mdb_put(r->txn, dbi, &k, &v, 0), 0);
}

static void state_key(uint8_t key[8], const uint8_t *runs_value)
{
    memcpy(key, runs_value, 8);
}

/* Two completed runs of "chain", "a" and "b", in a fresh store. */
static const char *two_runs(pl_registry *reg)
{
    const char *path = t_store_path();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 2}", "a"));
    pl_outcome_free(t_start(e, "chain", "{\"n\": 2}", "b"));
    pl_engine_close(e);
    return path;
}

/* ---- checksums ----------------------------------------------------------- */

/*
 * A version 2 record (or a version 3 run state without open ledgers) made
 * version 1: "v" 1 and no "sum" (its last pair: the key "sum" and a bin 8
 * of 32 bytes, 38 bytes in all).
 */
static size_t make_v1(uint8_t *rec, size_t len)
{
    cr_assert(rec[0] >= 0x81 && rec[0] <= 0x8f, "a fixmap record");
    cr_assert(!memcmp(rec + 1, "\xa1v\x02", 3) ||
                  !memcmp(rec + 1, "\xa1v\x03", 3),
              "\"v\": 2 or 3 first");
    cr_assert_eq(memcmp(rec + len - 38, "\xa3sum\xc4\x20", 6), 0,
                 "\"sum\" last");
    rec[0]--;
    rec[3] = 1;
    return len - 38;
}

Test(integrity, records_of_format_1_without_a_checksum_stay_readable)
{
    pl_registry *reg = t_registry();
    const char *path = two_runs(reg);
    raw r;
    raw_open(&r, path);
    size_t ilen, slen;
    uint8_t *info = raw_get(&r, r.runs, "a", 1, &ilen);
    uint8_t skey[8];
    state_key(skey, info);
    uint8_t *state = raw_get(&r, r.state, skey, 8, &slen);
    size_t ilen1 = 8 + make_v1(info + 8, ilen - 8);
    size_t slen1 = make_v1(state, slen);
    raw_put(&r, r.runs, "a", 1, info, ilen1);
    raw_put(&r, r.state, skey, 8, state, slen1);
    raw_close(&r);
    free(info);
    free(state);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_run_info *ri;
    cr_assert_eq(pl_run_get(&ri, e, "a"), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(ri->policy, "chain");
    cr_assert_eq(ri->status, PL_RUN_COMPLETED);
    pl_run_info_free(ri);
    cr_assert_eq(pl_run_verify(e, "a"), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "a", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int count_step(const pl_step *s, void *user)
{
    (void)s;
    ++*(size_t *)user;
    return 0;
}

Test(integrity, a_changed_run_record_is_corrupt_and_named)
{
    pl_registry *reg = t_registry();
    const char *path = two_runs(reg);
    raw r;
    raw_open(&r, path);
    size_t ilen;
    uint8_t *info = raw_get(&r, r.runs, "a", 1, &ilen);
    /* the root policy's name, still a valid name: "chain" -> "chaim" */
    uint8_t *at = memmem(info, ilen, "chain", 5);
    cr_assert_not_null(at);
    at[4] = 'm';
    raw_put(&r, r.runs, "a", 1, info, ilen);
    raw_close(&r);
    free(info);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    cr_assert_eq(pl_run_verify(e, "a"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "run 'a'") && strstr(pl_errmsg(), "checksum"),
              "%s", pl_errmsg());
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "a"), PL_ECORRUPT);
    cr_assert_null(ri);
    /* the run is named once, not once by the record and again around it */
    cr_assert(strstr(pl_errmsg(), "run 'a'") &&
                  !strstr(strstr(pl_errmsg(), "run 'a'") + 1, "run 'a'"),
              "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "a", NULL), PL_ECORRUPT);
    size_t n = 0;
    cr_assert_eq(pl_run_walk(e, "a", count_step, &n), PL_ECORRUPT);
    cr_assert_eq(n, 0);
    cr_assert_eq(pl_run_verify(e, "b"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(integrity, a_state_record_of_another_run_is_corrupt)
{
    pl_registry *reg = t_registry();
    const char *path = two_runs(reg);
    /* b's run record names a's run number: b's reads find a's state */
    raw r;
    raw_open(&r, path);
    size_t alen, blen;
    uint8_t *ia = raw_get(&r, r.runs, "a", 1, &alen);
    uint8_t *ib = raw_get(&r, r.runs, "b", 1, &blen);
    uint8_t *ib_was = malloc(blen);
    cr_assert_not_null(ib_was);
    memcpy(ib_was, ib, blen);
    memcpy(ib, ia, 8);
    raw_put(&r, r.runs, "b", 1, ib, blen);
    raw_close(&r);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    size_t n = 0;
    cr_assert_eq(pl_run_walk(e, "b", count_step, &n), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "run 'b'"), "%s", pl_errmsg());
    cr_assert_eq(n, 0, "b's walk handed out a's steps");
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "b", "0"), PL_ECORRUPT);
    cr_assert_null(l);
    cr_assert_eq(pl_run_verify(e, "b"), PL_ECORRUPT);
    cr_assert_eq(pl_run_verify(e, "a"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);

    /* b put back, and a's state record replaced by b's */
    raw_open(&r, path);
    raw_put(&r, r.runs, "b", 1, ib_was, blen);
    uint8_t ka[8], kb[8];
    state_key(ka, ia);
    state_key(kb, ib_was);
    size_t sb;
    uint8_t *stb = raw_get(&r, r.state, kb, 8, &sb);
    raw_put(&r, r.state, ka, 8, stb, sb);
    raw_close(&r);
    free(ia);
    free(ib);
    free(ib_was);
    free(stb);

    e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    cr_assert_eq(pl_run_verify(e, "a"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "run 'a'"), "%s", pl_errmsg());
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "a"), PL_ECORRUPT);
    cr_assert_eq(pl_run_verify(e, "b"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(integrity, a_taken_run_number_is_refused)
{
    pl_registry *reg = t_registry();
    const char *path = two_runs(reg);
    raw r;
    raw_open(&r, path);
    static const uint8_t one[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    raw_put(&r, r.meta, "next_run", 8, one, 8);
    raw_close(&r);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "c";
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "next run number"), "%s", pl_errmsg());
    cr_assert_null(o);
    cJSON_Delete(p);
    /* nothing of run a was touched */
    cr_assert_eq(pl_run_verify(e, "a"), PL_OK, "%s", pl_errmsg());
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "c"), PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a recorded time out of range ---------------------------------------- */

static int g_clock_mode; /* 0: record a value as "now"; 1: pl_ctx_now */
static double g_clock_value;

static int produce(cJSON **out, void *user)
{
    (void)user;
    *out = cJSON_CreateNumber(g_clock_value);
    return PL_OK;
}

/* clock: the time (recorded as "now"), then the human "approve". */
static int clock_policy(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                        void *user)
{
    (void)a;
    (void)user;
    int64_t ms = 0;
    cJSON *v = NULL;
    int st = g_clock_mode ? pl_ctx_now(&ms, ctx)
                          : pl_ctx_side_effect(&v, ctx, "now", produce, NULL);
    cJSON_Delete(v);
    if (st)
        return st;
    cJSON *ok = NULL;
    if ((st = pl_ctx_invokef(&ok, ctx, "approve", "{s:b}", "ok?", 1)))
        return st;
    cJSON_Delete(ok);
    return pl_steps_add_resultf(out, "{s:f}", "ms", (double)ms);
}

/* Record @p value as the time, then resume the run reading it with
 * pl_ctx_now(); returns the outcome. */
static pl_outcome *replay_time(double value, pl_registry *reg)
{
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    g_clock_mode = 0;
    g_clock_value = value;
    pl_outcome *o = t_start(e, "clock", "{}", "t");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED, "%s", o->reason);
    char token[64];
    snprintf(token, sizeof token, "%s", o->resume_token);
    pl_outcome_free(o);
    g_clock_mode = 1;
    cJSON *answer = t_json("{\"yes\": true}");
    o = NULL;
    cr_assert_eq(pl_run_resume(&o, e, "t", token, answer), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(answer);
    pl_engine_close(e);
    return o;
}

static pl_registry *clock_registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "clock", clock_policy, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    return reg;
}

Test(integrity, a_recorded_time_past_int64_fails_the_run)
{
    pl_registry *reg = clock_registry();
    static const double bad[] = {1e300, -1e300, 9.3e18, -9.3e18};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_outcome *o = replay_time(bad[i], reg);
        cr_assert_eq(o->status, PL_RUN_FAILED, "%g: not failed", bad[i]);
        cr_assert_eq(o->error, PL_ECORRUPT, "%g: %s", bad[i],
                     pl_status_name(o->error));
        cr_assert(strstr(o->reason, "time"), "%s", o->reason);
        pl_outcome_free(o);
    }
    /* in range, it is the time */
    pl_outcome *o = replay_time(9.2e18, reg);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    pl_registry_free(reg);
}

/* ---- max_payload --------------------------------------------------------- */

Test(integrity, a_max_payload_past_what_a_store_holds_is_refused)
{
    pl_registry *reg = t_registry();
    const char *path = t_store_path();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    pl_engine *e = NULL;
    o.max_payload = ((size_t)1 << 30) + 1;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "max_payload"), "%s", pl_errmsg());
    o.max_payload = (size_t)1 << 32; /* past a 32-bit record length */
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_EINVAL);
    o.max_payload = (size_t)1 << 30;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}
