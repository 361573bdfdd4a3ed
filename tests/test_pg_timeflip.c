/*
 * test_pg_timeflip.c -- hostile bytes in the PostgreSQL store's records of
 * time.  The store holds a run parked waiting for an event ("parked"), with
 * its state record, its timer record, and an event of another name and a
 * cancellation in its inbox.  Bit after bit of each of those records (every
 * STRIDE-th: a fixed stride, so the same bits every time) is flipped in a
 * copy of the store (a schema of its own, its rows made the store's as
 * built again before each flip), and the engine then lists the
 * runs, reads, verifies and continues the run (in check mode, then for
 * real: it is cancelled and makes a compensating call) and wakes what is
 * due.  Each flip must be reported (a call returns PL_ECORRUPT or
 * PL_EVERSION) or change nothing the calls give back; never a crash, a
 * hang or a silent wrong answer.  test_bitflip.c flips every bit of an
 * LMDB store.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* every STRIDE-th bit; under the sanitizers, where each flip costs more,
 * fewer (still a fixed stride) */
#define STRIDE (T_SANITIZED ? 29 : 23)

/* waitev: waits a day for "go"; cancelled, it makes a compensating call. */
static int waitev(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", 86400000);
    if (st == PL_ECANCELLED) {
        st = pl_ctx_invokef(NULL, ctx, "echo", "{s:s}", "undo", "x");
        return st ? st : PL_ECANCELLED;
    }
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "got", p);
    cJSON_Delete(p);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "waitev", waitev, NULL), PL_OK);
    return reg;
}

/* What the calls give back, mixed (FNV-1a), and whether one reported. */
typedef struct report {
    bool reported;
    uint64_t digest;
} report;

static void note(report *r, int st)
{
    if (st == PL_ECORRUPT || st == PL_EVERSION)
        r->reported = true;
    t_mix(&r->digest, &st, sizeof st);
}

static void mix_outcome(report *r, const pl_outcome *o)
{
    if (!o)
        return;
    t_mix(&r->digest, &o->status, sizeof o->status);
    t_mix(&r->digest, &o->error, sizeof o->error);
    t_mix_str(&r->digest, o->reason);
    if (o->error == PL_ECORRUPT || o->error == PL_EVERSION)
        r->reported = true;
    size_t n = o->steps ? pl_steps_count(o->steps) : 0;
    for (size_t i = 0; i < n; i++)
        t_mix_json(&r->digest, pl_step_payload(pl_steps_at(o->steps, i)));
}

static int visit_run(const pl_run_info *info, void *user)
{
    report *r = user;
    t_mix_str(&r->digest, info->id);
    t_mix(&r->digest, &info->status, sizeof info->status);
    t_mix(&r->digest, &info->steps, sizeof info->steps);
    t_mix_str(&r->digest, info->reason);
    t_mix(&r->digest, &info->wake_ms, sizeof info->wake_ms);
    t_mix_str(&r->digest, info->wait_event);
    t_mix(&r->digest, &info->deadline_ms, sizeof info->deadline_ms);
    return 0;
}

/* Every call on the store at @p path, in turn. */
static report exercise(const char *path, const pl_registry *reg)
{
    report r = {false, 14695981039346656037ull};
    pl_engine *e = NULL;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    int st = pl_engine_open(&e, path, reg, &o);
    note(&r, st);
    if (st)
        return r;
    note(&r, pl_engine_runs(e, visit_run, &r));
    pl_steps *l = NULL;
    st = pl_run_ledger(&l, e, "parked", "0");
    note(&r, st);
    for (size_t j = 0; !st && j < pl_steps_count(l); j++)
        t_mix_json(&r.digest, pl_step_payload(pl_steps_at(l, j)));
    pl_steps_free(l);
    note(&r, pl_run_verify(e, "parked"));
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *out = NULL;
    note(&r, pl_run_continue(&out, e, "parked", &ro));
    mix_outcome(&r, out);
    pl_outcome_free(out);
    out = NULL;
    note(&r, pl_run_continue(&out, e, "parked", NULL));
    mix_outcome(&r, out);
    pl_outcome_free(out);
    int64_t next = 0;
    note(&r, pl_engine_wake(e, &next));
    t_mix(&r.digest, &next, sizeof next);
    pl_run_info *info = NULL;
    st = pl_run_get(&info, e, "parked");
    note(&r, st);
    if (!st)
        visit_run(info, &r);
    pl_run_info_free(info);
    pl_engine_close(e);
    return r;
}

/* The records flipped: their table, the column of their bytes, the
 * column that keys a row of the run's. */
typedef struct target {
    const char *what, *table, *bytes, *key;
} target;

static const target targets[] = {
    {"state record", "state", "v", "run"},
    {"timer record", "timers", "rec", "run"},
    {"inbox record", "inbox", "rec", "seq"},
};

Test(pg_timeflip, every_time_record)
{
    setenv("PL_TEST_STORE", "postgresql", 1);
    pl_registry *reg = registry();
    char base[4200];
    t_store_in(base, sizeof base, NULL, "base");
    pl_engine *e = t_engine(base, reg, PL_DURABILITY_PROCESS);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    pl_outcome *o = t_start(e, "waitev", "{}", "parked");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cJSON *ev = t_json("{\"x\": 1}");
    cr_assert_eq(pl_run_signal(NULL, e, "parked", "other", ev), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ev);
    pl_engine_close(e);
    /* where waitev is not registered, the cancellation waits in the inbox */
    pl_registry *bare = NULL;
    cr_assert_eq(pl_registry_new(&bare), PL_OK);
    e = t_engine(base, bare, PL_DURABILITY_PROCESS);
    cr_assert_eq(pl_run_cancel(e, "parked", "stop"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(bare);

    /* the store as built, exercised in a copy: what every flip is held to */
    char copy[4200];
    t_store_in(copy, sizeof copy, NULL, "copy");
    t_store_copy(copy, base);
    report want = exercise(copy, reg);
    cr_assert(!want.reported, "the unflipped store reports corruption: %s",
              pl_errmsg());

    PGconn *c = t_pg_admin();
    const char *schema = t_pg_schema(base);
    char q[512], num[32] = "";
    snprintf(q, sizeof q, "SELECT num FROM \"%s\".runs", schema);
    PGresult *res = PQexec(c, q);
    cr_assert_eq(PQntuples(res), 1);
    snprintf(num, sizeof num, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    size_t flips = 0, reported = 0, records = 0;
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
        const target *tg = &targets[t];
        snprintf(q, sizeof q, "SELECT %s, %s FROM \"%s\".%s WHERE run = %s",
                 tg->bytes, tg->key, schema, tg->table, num);
        PGresult *rows = PQexecParams(c, q, 0, NULL, NULL, NULL, NULL, 1);
        cr_assert_eq(PQresultStatus(rows), PGRES_TUPLES_OK, "%s: %s", q,
                     PQresultErrorMessage(rows));
        cr_assert_gt(PQntuples(rows), 0, "no %s", tg->what);
        for (int row = 0; row < PQntuples(rows); row++, records++) {
            size_t len = (size_t)PQgetlength(rows, row, 0);
            const uint8_t *orig = (const uint8_t *)PQgetvalue(rows, row, 0);
            uint64_t key_be;
            memcpy(&key_be, PQgetvalue(rows, row, 1), sizeof key_be);
            char key[32];
            snprintf(key, sizeof key, "%llu",
                     (unsigned long long)__builtin_bswap64(key_be));
            uint8_t *buf = malloc(len);
            cr_assert_not_null(buf);
            for (size_t bit = row % STRIDE; bit < len * 8; bit += STRIDE) {
                t_pg_refill(copy, base); /* the store as built, again */
                memcpy(buf, orig, len);
                buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                char w[512];
                snprintf(w, sizeof w,
                         "UPDATE \"%s\".%s SET %s = $1 WHERE run = %s AND "
                         "%s = $2::bigint",
                         t_pg_schema(copy), tg->table, tg->bytes, num, tg->key);
                const char *v[2] = {(const char *)buf, key};
                int lens[2] = {(int)len, 0}, fmts[2] = {1, 0};
                PQclear(t_pg_params(c, w, 2, v, lens, fmts, PGRES_COMMAND_OK));
                report got = exercise(copy, reg);
                cr_assert(got.reported || got.digest == want.digest,
                          "%s %d, bit %zu of %zu: what the calls give back "
                          "changed, and no call reported it",
                          tg->what, row, bit, len * 8);
                reported += got.reported;
                flips++;
            }
            free(buf);
        }
        PQclear(rows);
    }
    snprintf(q, sizeof q, "DROP SCHEMA \"%s\" CASCADE", t_pg_schema(copy));
    PQclear(PQexec(c, q));
    cr_log_info("%zu flips in %zu records, %zu reported", flips, records,
                reported);
    cr_assert_geq(records, 4, "state, timer, an event and a cancellation");
    cr_assert_gt(reported, 0);
    PQfinish(c);
    pl_registry_free(reg);
}
