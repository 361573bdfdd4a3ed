/*
 * test_pg_rideflip.c -- hostile bytes under a ride, on PostgreSQL and on
 * LMDB: a signal that continues a waiting run in the caller's thread, its
 * delivery riding the run's next commit (core/replay/run.h, RIDES;
 * docs/design.md §12.1), when the records the ride reads are damaged.
 *
 * The store holds two runs of "rider" (an effect, a wait for the event
 * "go" of a day at most, so a timer, an effect), each parked: "ride-k"
 * with a concurrency key (PostgreSQL: its parked row; LMDB: its flow
 * record), "ride-p" without; each has an event "other" in its inbox, which
 * the wait passes over.  Every STRIDE-th bit of their timers, inbox
 * records and parked rows (PostgreSQL: each bytea and bigint column, as
 * the catalogue gives them, support_pgflip.h; LMDB: the values of the
 * timers and inbox databases, the inbox's keys (run, seq) and the flow
 * records, written back through
 * LMDB as a damaged disk would hand them over) is flipped in a copy of the
 * store, then a forked child signals "go" to both runs with an outcome
 * asked for (the ride).  Each flip must: never run a call the ledger has
 * a result for (each run's first effect ran before the flip), never run
 * the second twice, answer the signal PL_OK, PL_ECORRUPT or PL_EVERSION,
 * fail a run only with PL_ECORRUPT or PL_EVERSION, complete one only with
 * the undamaged ride's result, and never crash nor hang.  A run may be
 * left waiting.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"
#include "support_flip.h"
#include "support_pgflip.h"

TestSuite(pg_rideflip, .timeout = 540);

#define STRIDE (T_SANITIZED ? 29 : 17)
#define CHILD_MS 30000

static const char *const g_ids[] = {"ride-k", "ride-p"};
static char g_effects[4200];

/* ---- the policies ------------------------------------------------------ */

/* rider: an effect, the event "go" (a day at most), an effect. */
static int rider(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a->payload, "id");
    const char *s = cJSON_IsString(id) ? id->valuestring : "?";
    char k1[64], k2[64];
    snprintf(k1, sizeof k1, "%s-1", s);
    snprintf(k2, sizeof k2, "%s-2", s);
    cJSON *p = NULL, *y = NULL;
    int st = pl_ctx_invokef(NULL, ctx, "eff", "{s:s}", "k", k1);
    if (!st)
        st = pl_ctx_wait_event(&p, ctx, "go", 86400000);
    if (!st)
        st = pl_ctx_invokef(&y, ctx, "eff", "{s:s}", "k", k2);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "got", p, "y", y);
    cJSON_Delete(p);
    cJSON_Delete(y);
    return st;
}

static pl_registry *ride_registry(bool with_rider)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "eff", t_flip_eff, g_effects), PL_OK);
    if (with_rider)
        cr_assert_eq(pl_registry_add_fn(reg, "rider", rider, NULL), PL_OK);
    return reg;
}

static pl_engine *engine(const char *path, const pl_registry *reg)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

/* ---- the store --------------------------------------------------------- */

static void build(const char *path)
{
    pl_registry *reg = ride_registry(true);
    pl_engine *e = engine(path, reg);
    for (int i = 0; i < 2; i++) {
        t_flip_submit(e, g_ids[i], "rider", 0, i ? NULL : "slot");
        pl_outcome *o = NULL;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        cr_assert_eq(pl_run_continue(&o, e, g_ids[i], &ro), PL_OK, "%s",
                     pl_errmsg());
        cr_assert_eq(o->status, PL_RUN_WAITING, "%s: status %d", g_ids[i],
                     o->status);
        pl_outcome_free(o);
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    /* an event the wait passes over, in each inbox: delivered where
     * rider is not registered, so nothing continues */
    reg = ride_registry(false);
    e = engine(path, reg);
    cJSON *ev = t_json("{\"n\": 7}");
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pl_run_signal(NULL, e, g_ids[i], "other", ev), PL_OK, "%s",
                     pl_errmsg());
    cJSON_Delete(ev);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- a ride ------------------------------------------------------------ */

typedef struct sweep {
    const char *base, *copy;
    char *effects; /* the effects file as built */
    size_t effects_len;
    uint64_t want[2];
    size_t flips, refused, reported, left;
} sweep;

/* The child's exit status: per run, 0 the signal said PL_OK, 1
 * PL_ECORRUPT or PL_EVERSION, 2 another status (run 0 in the low bits,
 * run 1 times 3), 9 and up: the engine could not be opened. */
static int ride(const char *path)
{
    fflush(NULL);
    pid_t kid = fork();
    cr_assert_neq(kid, -1);
    if (kid == 0) {
        pl_registry *reg = ride_registry(true);
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_SYNC;
        pl_engine *e = NULL;
        int st = pl_engine_open(&e, path, reg, &o);
        if (st)
            _exit(st == PL_ECORRUPT || st == PL_EVERSION ? 9 : 10);
        if (pl_engine_set_wait_in_place(e, 0))
            _exit(10);
        cJSON *ev = t_json("{\"x\": 1}");
        int code = 0;
        for (int i = 0; i < 2; i++) {
            pl_outcome *out = NULL;
            st = pl_run_signal(&out, e, g_ids[i], "go", ev);
            pl_outcome_free(out);
            int c = !st ? 0 : st == PL_ECORRUPT || st == PL_EVERSION ? 1 : 2;
            if (c == 2)
                fprintf(stderr, "%s: signal %d: %s\n", g_ids[i], st,
                        pl_errmsg());
            code += c * (i ? 3 : 1);
        }
        cJSON_Delete(ev);
        pl_engine_close(e);
        _exit(code);
    }
    return t_flip_wait(kid, CHILD_MS, "a ride");
}

/* The copy ridden: what it must hold to (@p what: the flip; NULL: the
 * undamaged store, whose results are kept). */
static void ride_and_hold(sweep *s, const char *what)
{
    t_flip_put(g_effects, s->effects, s->effects_len);
    int x = ride(s->copy);
    const char *w = what ? what : "undamaged";
    cr_assert(x == 9 || (x < 9 && x % 3 != 2 && x / 3 != 2),
              "%s: the signal failed quietly (%d)", w, x);
    for (int i = 0; i < 2; i++) {
        char k[64];
        snprintf(k, sizeof k, "%s-1", g_ids[i]);
        cr_assert_eq(t_flip_counted(g_effects, k), 1, "%s: %s ran again", w, k);
        snprintf(k, sizeof k, "%s-2", g_ids[i]);
        cr_assert_leq(t_flip_counted(g_effects, k), 1, "%s: %s ran twice", w,
                      k);
    }
    pl_registry *reg = ride_registry(true);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    pl_engine *e = NULL;
    bool loud = x != 0, left = false;
    if (pl_engine_open(&e, s->copy, reg, &o) == PL_OK) {
        for (int i = 0; i < 2; i++) {
            pl_run_info *info = NULL;
            int st = pl_run_get(&info, e, g_ids[i]);
            int status = st ? -1 : (int)info->status;
            int err = st ? 0 : info->error;
            pl_run_info_free(info);
            loud |= status == -1;
            cr_assert(status != PL_RUN_FAILED || err == PL_ECORRUPT ||
                          err == PL_EVERSION,
                      "%s: run %s failed quietly (%d)", w, g_ids[i], err);
            loud |= status == PL_RUN_FAILED;
            left |= status == PL_RUN_WAITING;
            if (status != PL_RUN_COMPLETED) {
                cr_assert(what, "run %s: status %d undamaged", g_ids[i],
                          status);
                continue;
            }
            pl_run_options ro = PL_RUN_OPTIONS_INIT;
            ro.check = true;
            pl_outcome *out = NULL;
            uint64_t h = 0;
            if (pl_run_continue(&out, e, g_ids[i], &ro) == PL_OK && out &&
                out->status == PL_RUN_COMPLETED)
                t_mix_json(&h, pl_outcome_result(out));
            else
                loud = true, h = 0;
            pl_outcome_free(out);
            if (!what)
                s->want[i] = h;
            else if (h)
                cr_assert_eq(h, s->want[i],
                             "%s: run %s completed with another result", w,
                             g_ids[i]);
        }
        pl_engine_close(e);
    } else {
        loud = true;
    }
    pl_registry_free(reg);
    if (what) {
        s->flips++;
        s->reported += loud;
        s->left += left;
    } else {
        cr_assert_eq(x, 0, "the undamaged signals: %d", x);
    }
}

static void setup(sweep *s, const char *kind, char *base, char *copy,
                  size_t cap)
{
    setenv("PL_TEST_STORE", kind, 1);
    snprintf(g_effects, sizeof g_effects, "%s/effects", t_tmpdir());
    t_store_in(base, cap, t_tmpdir(), "base.db");
    build(base);
    t_store_in(copy, cap, t_tmpdir(), "copy.db");
    t_store_copy(copy, base);
    *s = (sweep){.base = base, .copy = copy};
    s->effects = t_flip_slurp(g_effects, &s->effects_len);
    ride_and_hold(s, NULL);
}

static void summary(sweep *s, const char *kind)
{
    fprintf(stderr,
            "rideflip on %s: %zu flips (every %d-th bit): %zu reported (a "
            "signal's or a run's PL_ECORRUPT or PL_EVERSION, or a run "
            "unreadable), %zu a run left waiting; %zu refused by the table\n",
            kind, s->flips, STRIDE, s->reported, s->left, s->refused);
    cr_assert_gt(s->flips, 0);
    free(s->effects);
}

/* ---- the sweeps -------------------------------------------------------- */

Test(pg_rideflip, every_ride_column)
{
    char base[4200], copy[4200];
    sweep s;
    setup(&s, "postgresql", base, copy, sizeof base);
    PGconn *c = t_pg_admin();
    const char *schema = t_pg_schema(base);
    static const char *const tables[] = {"timers", "inbox", "parked"};
    size_t values = 0;
    for (size_t i = 0; i < 3; i++) {
        t_pg_table t;
        cr_assert(t_pg_find_table(c, schema, tables[i], &t), "no %s",
                  tables[i]);
        PGresult *rows = t_pg_rows_of(c, schema, &t);
        cr_assert_gt(PQntuples(rows), 0, "%s: no rows", tables[i]);
        size_t was = s.flips;
        for (int row = 0; row < PQntuples(rows); row++)
            for (int k = 0; k < t.n_flip; k++) {
                int col = t.flip[k];
                size_t len = (size_t)PQgetlength(rows, row, col);
                if (PQgetisnull(rows, row, col))
                    continue;
                const char *keyv[T_PG_COLS_MAX];
                int keylen[T_PG_COLS_MAX];
                for (int j = 0; j < t.n_key; j++) {
                    keyv[j] = PQgetvalue(rows, row, t.key[j]);
                    keylen[j] = PQgetlength(rows, row, t.key[j]);
                }
                uint8_t *buf = malloc(len);
                cr_assert_not_null(buf);
                for (size_t bit = values++ % STRIDE; bit < len * 8;
                     bit += STRIDE) {
                    t_pg_refill(copy, base);
                    memcpy(buf, PQgetvalue(rows, row, col), len);
                    buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                    if (!t_pg_set_col(c, t_pg_schema(copy), &t, col, buf, len,
                                      keyv, keylen)) {
                        s.refused++;
                        continue;
                    }
                    char what[200];
                    snprintf(what, sizeof what, "%s.%s of row %d, bit %zu",
                             t.name, t.col[col], row, bit);
                    ride_and_hold(&s, what);
                }
                free(buf);
            }
        fprintf(stderr, "pg_rideflip: %s, %d rows: %zu flips\n", t.name,
                PQntuples(rows), s.flips - was);
        PQclear(rows);
    }
    PQfinish(c);
    summary(&s, "PostgreSQL");
}

/* LMDB: the records of @p db (of the flow database, the runs' flow
 * records, 'r'), their keys and their values' sizes. */
typedef struct rec {
    char db[8];
    uint8_t key[64];
    size_t klen, vlen;
} rec;

static size_t lmdb_records(const char *path, rec *out, size_t cap)
{
    static const char *const dbs[] = {"timers", "inbox", "flow"};
    size_t n = 0;
    for (size_t i = 0; i < 3; i++) {
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_cursor *cur;
        MDB_env *env = t_flip_lmdb_open(path, dbs[i], MDB_RDONLY, &txn, &dbi);
        cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
        MDB_val k, v;
        for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (i == 2 && ((const uint8_t *)k.mv_data)[0] != 'r')
                continue;
            cr_assert_lt(n, cap);
            cr_assert_leq(k.mv_size, sizeof out[n].key);
            snprintf(out[n].db, sizeof out[n].db, "%s", dbs[i]);
            memcpy(out[n].key, k.mv_data, k.mv_size);
            out[n].klen = k.mv_size;
            out[n++].vlen = v.mv_size;
        }
        mdb_cursor_close(cur);
        mdb_txn_abort(txn);
        mdb_env_close(env);
    }
    return n;
}

Test(pg_rideflip, every_ride_record_on_lmdb)
{
    char base[4200], copy[4200], lock[4300];
    sweep s;
    setup(&s, "lmdb", base, copy, sizeof base);
    snprintf(lock, sizeof lock, "%s-lock", copy);
    rec recs[16];
    size_t n = lmdb_records(base, recs, 16);
    size_t values = 0;
    for (size_t i = 0; i < n; i++) {
        size_t was = s.flips;
        /* the values; an inbox record's key too (its seq) */
        bool inbox = strcmp(recs[i].db, "inbox") == 0;
        size_t vbits = recs[i].vlen * 8, kbits = inbox ? recs[i].klen * 8 : 0;
        for (size_t bit = values++ % STRIDE; bit < vbits + kbits;
             bit += STRIDE) {
            bool key = bit >= vbits;
            size_t b = key ? bit - vbits : bit;
            t_store_copy(copy, base);
            unlink(lock);
            t_flip_lmdb(copy, recs[i].db, recs[i].key, recs[i].klen, b, key);
            char what[200];
            snprintf(what, sizeof what, "the %s of a %.8s record, bit %zu",
                     key ? "key" : "value", recs[i].db, b);
            ride_and_hold(&s, what);
        }
        fprintf(stderr, "pg_rideflip: a %s record: %zu flips\n", recs[i].db,
                s.flips - was);
    }
    summary(&s, "LMDB");
}
