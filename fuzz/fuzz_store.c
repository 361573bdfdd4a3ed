/*
 * fuzz_store.c -- the store reader over arbitrary value bytes.
 *
 * Once, a small real store is made with the engine (LMDB, a file): a
 * completed run "done" with nested calls and a recorded time, a run
 * "waiting" suspended for a human, a run "parked" waiting for an event
 * (its timer, and an event of another name in its inbox), a parked run
 * "stopping" with a cancellation waiting in its inbox, and a run
 * "cancelled" in its wait, after a compensating call, and a run "woke"
 * that took its event.  For each input, a copy of that store gets the
 * input's bytes (after the first) as the value of one of its records (a step,
 * a run record, a state record, a timer, its due index or an inbox entry;
 * the first byte picks which), written with LMDB itself; then the engine
 * opens the copy and lists its runs, walks, reads, verifies and continues
 * each run (in check mode, then for real), and wakes what is due.
 * Whatever the bytes: a status and a message, never a crash, hang or leak.
 */
#define _GNU_SOURCE
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <policyledger.h>

#include "fuzz.h"

/* ---- the policies -------------------------------------------------------- */

static int echo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    return pl_steps_add_result(out, a->payload);
}

/* calls echo n times, then returns how many it made */
static int chain(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int n = 0;
    if (pl_json_unpack(a->payload, "{s:i}", "n", &n) || n < 0 || n > 8)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "bad n");
    for (int i = 0; i < n; i++) {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, "echo", "{s:i}", "i", i);
        cJSON_Delete(r);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:i}", "made", n);
}

/* outer: chain(2), a recorded time, and an echo. */
static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *r = NULL;
    int64_t t = 0;
    int st = pl_ctx_invokef(&r, ctx, "chain", "{s:i}", "n", 2);
    cJSON_Delete(r);
    r = NULL;
    if (!st)
        st = pl_ctx_now(&t, ctx);
    if (!st)
        st = pl_ctx_invokef(&r, ctx, "echo", "{s:s}", "m", "x");
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "echo", r);
    cJSON_Delete(r);
    return st;
}

/* ask: echo, then the human "approve" (the run suspends there). */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invokef(&r, ctx, "echo", "{s:i}", "q", 1);
    cJSON_Delete(r);
    r = NULL;
    if (!st)
        st = pl_ctx_invokef(&r, ctx, "approve", "{s:b}", "ok?", 1);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "answer", r);
    cJSON_Delete(r);
    return st;
}

/* waitev: waits a day for the event "go"; cancelled, it makes a
 * compensating call to echo. */
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

static pl_registry *g_reg;
static char g_dir[256], g_template[300], g_work[300];
static uint8_t *g_bytes; /* the template store's data file */
static size_t g_len;

typedef struct record {
    int db; /* an index in g_dbs */
    uint8_t key[64];
    size_t key_len;
} record;
static record g_records[256];
static size_t g_n_records;

static pl_engine *open_engine(const char *path)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    pl_engine *e = NULL;
    return pl_engine_open(&e, path, g_reg, &o) ? NULL : e;
}

static const char *const g_dbs[] = {"steps",  "runs", "state",
                                    "timers", "due",  "inbox"};
#define N_DBS (sizeof g_dbs / sizeof *g_dbs)

/* With PL_FUZZ_SEEDS set to a folder, the records of the store are written
 * there as seeds: step values for fuzz_step_record, run and state values
 * for fuzz_run_record, and each (record number, value) for this harness. */
static void seed(const char *dir, const char *fuzzer, size_t i, uint8_t pick,
                 const MDB_val *v)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/seed-%03zu", dir, fuzzer, i);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (strcmp(fuzzer, "fuzz_store") == 0)
        CHECK(fwrite(&pick, 1, 1, f) == 1);
    CHECK(fwrite(v->mv_data, 1, v->mv_size, f) == v->mv_size);
    CHECK(fclose(f) == 0);
}

static void list_records(void)
{
    const char *seeds = getenv("PL_FUZZ_SEEDS");
    MDB_env *env;
    MDB_txn *txn;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 16) == 0);
    CHECK(mdb_env_open(env, g_template, MDB_NOSUBDIR | MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0);
    for (int d = 0; d < (int)N_DBS; d++) {
        MDB_dbi dbi;
        MDB_cursor *c;
        MDB_val k, v;
        CHECK(mdb_dbi_open(txn, g_dbs[d], 0, &dbi) == 0);
        CHECK(mdb_cursor_open(txn, dbi, &c) == 0);
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            if (g_n_records == sizeof g_records / sizeof g_records[0] ||
                k.mv_size > sizeof g_records[0].key)
                continue;
            record *r = &g_records[g_n_records++];
            r->db = d;
            memcpy(r->key, k.mv_data, k.mv_size);
            r->key_len = k.mv_size;
            if (seeds) {
                seed(seeds, d ? "fuzz_run_record" : "fuzz_step_record",
                     g_n_records, 0, &v);
                seed(seeds, "fuzz_store", g_n_records,
                     (uint8_t)(g_n_records - 1), &v);
            }
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    CHECK(g_n_records > 10);
}

static void setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/plfuzz.XXXXXX",
             base && *base ? base : "/tmp");
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_template, sizeof g_template, "%s/template.db", g_dir);
    snprintf(g_work, sizeof g_work, "%s/work.db", g_dir);
    CHECK(pl_registry_new(&g_reg) == PL_OK);
    CHECK(pl_registry_add_fn(g_reg, "echo", echo, NULL) == PL_OK);
    CHECK(pl_registry_add_fn(g_reg, "chain", chain, NULL) == PL_OK);
    CHECK(pl_registry_add_fn(g_reg, "outer", outer, NULL) == PL_OK);
    CHECK(pl_registry_add_fn(g_reg, "ask", ask, NULL) == PL_OK);
    CHECK(pl_registry_add_fn(g_reg, "waitev", waitev, NULL) == PL_OK);
    CHECK(pl_registry_add_human(g_reg, "approve") == PL_OK);

    pl_engine *e = open_engine(g_template);
    CHECK(e != NULL);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    cJSON *p = cJSON_CreateObject();
    pl_action a = {PL_ACTION_VERSION, "outer", p, NULL, 0, NULL};
    pl_outcome *o = NULL;
    ro.run_id = "done";
    CHECK(pl_run_start(&o, e, &a, &ro) == PL_OK &&
          o->status == PL_RUN_COMPLETED);
    pl_outcome_free(o);
    a.policy = "ask";
    ro.run_id = "waiting";
    CHECK(pl_run_start(&o, e, &a, &ro) == PL_OK &&
          o->status == PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    CHECK(pl_engine_set_wait_in_place(e, 0) == PL_OK);
    a.policy = "waitev";
    static const char *const parked[] = {"parked", "stopping", "cancelled",
                                         "woke"};
    for (size_t i = 0; i < 4; i++) {
        ro.run_id = parked[i];
        CHECK(pl_run_start(&o, e, &a, &ro) == PL_OK &&
              o->status == PL_RUN_WAITING);
        pl_outcome_free(o);
    }
    cJSON *ev = cJSON_Parse("{\"x\": 1}");
    CHECK(pl_run_signal(NULL, e, "parked", "other", ev) == PL_OK);
    CHECK(pl_run_signal(&o, e, "woke", "go", ev) == PL_OK && o &&
          o->status == PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cJSON_Delete(ev);
    CHECK(pl_run_cancel(e, "cancelled", "withdrawn") == PL_OK);
    cJSON_Delete(p);
    pl_engine_close(e);
    /* where waitev is not registered, a cancellation waits in the inbox */
    pl_registry *bare = NULL;
    CHECK(pl_registry_new(&bare) == PL_OK);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    CHECK(pl_engine_open(&e, g_template, bare, &eo) == PL_OK);
    CHECK(pl_run_cancel(e, "stopping", "stop") == PL_OK);
    pl_engine_close(e);
    pl_registry_free(bare);
    list_records();

    g_bytes = read_whole(g_template, &g_len);
}

static void cleanup(void)
{
    char lock[320];
    remove(g_template);
    remove(g_work);
    snprintf(lock, sizeof lock, "%s-lock", g_template);
    remove(lock);
    snprintf(lock, sizeof lock, "%s-lock", g_work);
    remove(lock);
    rmdir(g_dir);
    free(g_bytes);
    pl_registry_free(g_reg);
}

/* The copy of the template with @p value under record @p r. */
static void plant(const record *r, const uint8_t *value, size_t n)
{
    FILE *f = fopen(g_work, "wb");
    CHECK(f && fwrite(g_bytes, 1, g_len, f) == g_len && fclose(f) == 0);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 16) == 0);
    CHECK(mdb_env_open(env, g_work, MDB_NOSUBDIR | MDB_NOSYNC, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    CHECK(mdb_dbi_open(txn, g_dbs[r->db], 0, &dbi) == 0);
    MDB_val k = {r->key_len, (void *)r->key}, v = {n, (void *)value};
    CHECK(mdb_put(txn, dbi, &k, &v, 0) == 0);
    CHECK(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

static int visit_run(const pl_run_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

static int visit_step(const pl_step *step, void *user)
{
    (void)step;
    (*(int *)user)++;
    return 0;
}

static void read_run(pl_engine *e, const char *id)
{
    int n = 0;
    (void)pl_run_walk(e, id, visit_step, &n);
    pl_steps *steps = NULL;
    if (pl_run_ledger(&steps, e, id, "0") == PL_OK)
        pl_steps_free(steps);
    (void)pl_run_verify(e, id);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    pl_outcome *o = NULL;
    if (pl_run_continue(&o, e, id, &ro) == PL_OK)
        pl_outcome_free(o);
    o = NULL;
    ro.check = false;
    if (pl_run_continue(&o, e, id, &ro) == PL_OK)
        pl_outcome_free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup();
        atexit(cleanup);
        ready = true;
    }
    if (size < 1)
        return 0;
    plant(&g_records[data[0] % g_n_records], data + 1, size - 1);
    pl_engine *e = open_engine(g_work);
    if (!e)
        return 0;
    int n = 0;
    (void)pl_engine_runs(e, visit_run, &n);
    static const char *const runs[] = {"done",     "waiting",   "parked",
                                       "stopping", "cancelled", "woke"};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
        read_run(e, runs[i]);
    int64_t next = 0;
    (void)pl_engine_wake(e, &next);
    pl_engine_close(e);
    return 0;
}
