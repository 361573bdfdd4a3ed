/*
 * test_store.c -- the LMDB store (ledger/lmdb_*.c, keys.c) and the public read
 * and verify API on it (core/ops/inspect.c), against real LMDB files in
 * temporary directories: ledger order and step ids, tree-order walks, run
 * listing and run records, the hash chain and what verification and replay
 * make of a store tampered with through the LMDB C API (changed payloads,
 * deleted steps, unknown record versions), map growth and a map that may not
 * grow (also under group commit), one open per process (and one more in a
 * forked child), files that are not stores, directory stores, store format
 * versions, pl_engine_open's argument checks, the group-commit journal, and
 * the step count of a crashed run longer than one read transaction.
 */
#include "support.h"

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

/* ---- test policies ------------------------------------------------------- */

/*
 * "nest" {"depth": d, "fanout": f}: when d > 0, calls "nest" with d - 1 f
 * times; then returns a text step {"text": "depth <d>"} and the result
 * {"depth": d}.  Its ledger is therefore f (action_call, action_result)
 * pairs, a text step and a result, and its calls' invocations sit at the
 * even positions 0, 2, 4, ...
 */
static int nest(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(a->payload, "depth");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(a->payload, "fanout");
    int depth = cJSON_IsNumber(d) ? d->valueint : 0;
    int fanout = cJSON_IsNumber(f) ? f->valueint : 2;
    for (int i = 0; depth > 0 && i < fanout; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "depth", depth - 1);
        cJSON_AddNumberToObject(p, "fanout", fanout);
        pl_action call = {PL_ACTION_VERSION, "nest", p, NULL, 0, NULL};
        int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
    }
    char text[32];
    snprintf(text, sizeof text, "depth %d", depth);
    int st = pl_steps_add_text(out, NULL, text);
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "depth", depth);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "bulk" {"n": n, "size": s}: calls "echo" n times with a string of s bytes. */
static int bulk(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    int size = cJSON_GetObjectItemCaseSensitive(a->payload, "size")->valueint;
    char *blob = malloc((size_t)size + 1);
    if (!blob)
        return PL_ENOMEM;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < size; k++)
            blob[k] = (char)('a' + (i + k) % 26);
        blob[size] = '\0';
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "i", i);
        cJSON_AddStringToObject(p, "blob", blob);
        pl_action call = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
        int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st) {
            free(blob);
            return st;
        }
    }
    free(blob);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "done", n);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "self_get": reads its own run's record while it runs. */
static int self_get(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, pl_ctx_engine(ctx), pl_ctx_run_id(ctx));
    if (st)
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "status", info->status);
    cJSON_AddBoolToObject(r, "alive", info->owner_alive);
    cJSON_AddNumberToObject(r, "pid", (double)info->owner_pid);
    pl_run_info_free(info);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "two_then_fail": calls "add" twice, then fails: a failed run, whose root
 * ledger (0 call, 1 result, 2 call, 3 result) no run record anchors. */
static int two_then_fail(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    (void)a;
    (void)out;
    (void)user;
    for (int i = 0; i < 2; i++) {
        cJSON *p = t_json("{\"a\": 1, \"b\": 2}");
        pl_action call = {PL_ACTION_VERSION, "add", p, NULL, 0, NULL};
        int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
    }
    return PL_EPOLICY;
}

/* "say" {"actor": a, "text": t}: returns one text step by actor a (NULL:
 * the policy); "say_twice" returns it twice. */
static int say_n(const pl_action *a, pl_steps *out, int n)
{
    const cJSON *actor = cJSON_GetObjectItemCaseSensitive(a->payload, "actor");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(a->payload, "text");
    for (int i = 0; i < n; i++) {
        int st = pl_steps_add_text(out,
                                   cJSON_IsString(actor) ? actor->valuestring
                                                         : NULL,
                                   text->valuestring);
        if (st)
            return st;
    }
    return PL_OK;
}

static int say(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    return say_n(a, out, 1);
}

static int say_twice(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    return say_n(a, out, 2);
}

/* "ask" {"calls": [[policy, payload], ...]}: makes the calls in order. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)out;
    (void)user;
    const cJSON *call;
    cJSON_ArrayForEach(call,
                       cJSON_GetObjectItemCaseSensitive(a->payload, "calls"))
    {
        pl_action c = {PL_ACTION_VERSION,
                       cJSON_GetArrayItem(call, 0)->valuestring,
                       cJSON_GetArrayItem(call, 1),
                       NULL,
                       0,
                       NULL};
        int st = pl_ctx_call(NULL, ctx, &c, NULL, 0);
        if (st)
            return st;
    }
    return PL_OK;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    static const struct {
        const char *name;
        pl_policy_fn fn;
        const char *code;
    } defs[] = {{"nest", nest, "nest-v1"},
                {"bulk", bulk, NULL},
                {"self_get", self_get, NULL},
                {"two_then_fail", two_then_fail, NULL},
                {"say", say, NULL},
                {"say_twice", say_twice, NULL},
                {"ask", ask, NULL}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.code_version = defs[i].code;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* An engine with map size options; fails the test unless it opens.  These
 * tests never crash the machine, so process durability (no fsync) keeps
 * them fast without weakening what they check. */
static pl_engine *open_sized(const char *path, const pl_registry *reg,
                             pl_durability d, size_t map_size,
                             size_t map_size_max)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = d;
    o.map_size = map_size;
    o.map_size_max = map_size_max;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &o);
    cr_assert_eq(st, PL_OK, "pl_engine_open(%s): %s", path, pl_errmsg());
    return e;
}

static pl_engine *open_with(const char *path, const pl_registry *reg,
                            size_t map_size, size_t map_size_max)
{
    return open_sized(path, reg, PL_DURABILITY_PROCESS, map_size, map_size_max);
}

static void start_ok(pl_engine *e, const char *policy, const char *payload,
                     const char *id)
{
    pl_outcome *o = t_start(e, policy, payload, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run %s: %s", id,
                 o->reason ? o->reason : "");
    pl_outcome_free(o);
}

/* ---- expected ledgers ---------------------------------------------------- */

typedef struct want_step {
    char path[64];
    char id[80];
    uint32_t seq;
    pl_step_type type;
} want_step;

typedef struct wants {
    want_step *v;
    size_t n, cap;
} wants;

static void want_add(wants *w, const char *path, uint32_t seq,
                     pl_step_type type)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        w->v = realloc(w->v, w->cap * sizeof *w->v);
        cr_assert_not_null(w->v);
    }
    want_step *x = &w->v[w->n++];
    snprintf(x->path, sizeof x->path, "%s", path);
    snprintf(x->id, sizeof x->id, "%s:%u", path, seq);
    x->seq = seq;
    x->type = type;
}

/*
 * The steps of a "nest" run in tree order: an invocation's steps, each
 * action_call followed by the ledger of the call it made (its callee's
 * invocation is at <path>.<seq of the action_call>).
 */
static void nest_expect(wants *w, const char *path, int depth, int fanout)
{
    uint32_t seq = 0;
    for (int i = 0; depth > 0 && i < fanout; i++) {
        char child[64];
        snprintf(child, sizeof child, "%s.%u", path, seq);
        want_add(w, path, seq++, PL_STEP_ACTION_CALL);
        nest_expect(w, child, depth - 1, fanout);
        want_add(w, path, seq++, PL_STEP_ACTION_RESULT);
    }
    want_add(w, path, seq++, PL_STEP_TEXT);
    want_add(w, path, seq++, PL_STEP_ACTION_RESULT);
}

/* The steps of a "chain" run with n calls to "add", in tree order. */
static void chain_expect(wants *w, int n)
{
    uint32_t seq = 0;
    for (int i = 0; i < n; i++) {
        char child[32];
        snprintf(child, sizeof child, "0.%u", seq);
        want_add(w, "0", seq++, PL_STEP_ACTION_CALL);
        want_add(w, child, 0, PL_STEP_ACTION_RESULT);
        want_add(w, "0", seq++, PL_STEP_ACTION_RESULT);
    }
    want_add(w, "0", seq, PL_STEP_ACTION_RESULT);
}

typedef struct seen {
    wants got;
    size_t stop_at; /* 0: never stop */
    int stop_with;
} seen;

static int collect(const pl_step *s, void *user)
{
    seen *sn = user;
    const char *id = pl_step_id(s);
    const char *colon = strrchr(id, ':');
    cr_assert_not_null(colon, "step id '%s' has no ':'", id);
    char path[64];
    snprintf(path, sizeof path, "%.*s", (int)(colon - id), id);
    want_add(&sn->got, path, pl_step_seq(s), pl_step_type_of(s));
    cr_assert_str_eq(sn->got.v[sn->got.n - 1].id, id, "id is path:seq");
    if (sn->stop_at && sn->got.n == sn->stop_at)
        return sn->stop_with;
    return 0;
}

static size_t walk_count(pl_engine *e, const char *id)
{
    seen sn = {0};
    int st = pl_run_walk(e, id, collect, &sn);
    cr_assert_eq(st, PL_OK, "walk %s: %s", id, pl_errmsg());
    size_t n = sn.got.n;
    free(sn.got.v);
    return n;
}

static void expect_walk(pl_engine *e, const char *id, const wants *w)
{
    seen sn = {0};
    int st = pl_run_walk(e, id, collect, &sn);
    cr_assert_eq(st, PL_OK, "walk %s: %s", id, pl_errmsg());
    cr_assert_eq(sn.got.n, w->n, "walk of %s visited %zu steps, expected %zu",
                 id, sn.got.n, w->n);
    for (size_t i = 0; i < w->n; i++) {
        cr_assert_str_eq(sn.got.v[i].id, w->v[i].id, "walk step %zu", i);
        cr_assert_eq(sn.got.v[i].type, w->v[i].type, "walk step %zu (%s)", i,
                     w->v[i].id);
    }
    free(sn.got.v);
}

/* Every invocation's ledger, read alone, holds exactly its expected steps,
 * in seq order. */
static void expect_ledgers(pl_engine *e, const char *id, const wants *w,
                           const char *actor)
{
    size_t total = 0;
    for (size_t i = 0; i < w->n; i++) {
        const char *path = w->v[i].path;
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = strcmp(w->v[j].path, path) != 0;
        if (!first)
            continue;
        pl_steps *l = NULL;
        int st = pl_run_ledger(&l, e, id, path);
        cr_assert_eq(st, PL_OK, "ledger %s: %s", path, pl_errmsg());
        size_t k = 0;
        for (size_t j = i; j < w->n; j++) {
            if (strcmp(w->v[j].path, path) != 0)
                continue;
            const pl_step *s = pl_steps_at(l, k++);
            cr_assert_not_null(s, "ledger %s ends before %s", path, w->v[j].id);
            cr_assert_str_eq(pl_step_id(s), w->v[j].id);
            cr_assert_eq(pl_step_seq(s), w->v[j].seq);
            cr_assert_eq(pl_step_type_of(s), w->v[j].type, "%s", w->v[j].id);
            if (actor)
                cr_assert_str_eq(pl_step_actor(s), actor, "%s", w->v[j].id);
            cr_assert_gt(pl_step_time_us(s), 0, "%s has no time", w->v[j].id);
            cr_assert(cJSON_IsObject(pl_step_payload(s)));
        }
        cr_assert_eq(pl_steps_count(l), k,
                     "ledger %s has %zu steps, "
                     "expected %zu",
                     path, pl_steps_count(l), k);
        total += k;
        pl_steps_free(l);
    }
    cr_assert_eq(total, w->n);
}

/* ---- raw LMDB access ----------------------------------------------------- */

typedef struct raw {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, runs, state, steps;
} raw;

static void raw_open(raw *r, const char *path, bool dir)
{
    memset(r, 0, sizeof *r);
    cr_assert_eq(mdb_env_create(&r->env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(r->env, 8), 0);
    cr_assert_eq(mdb_env_set_mapsize(r->env, (size_t)256 << 20), 0);
    int rc = mdb_env_open(r->env, path, dir ? 0 : MDB_NOSUBDIR, 0600);
    cr_assert_eq(rc, 0, "mdb_env_open(%s): %s", path, mdb_strerror(rc));
    cr_assert_eq(mdb_txn_begin(r->env, NULL, 0, &r->txn), 0);
    static const char *const names[] = {"meta", "runs", "state", "steps"};
    MDB_dbi *dbis[] = {&r->meta, &r->runs, &r->state, &r->steps};
    for (int i = 0; i < 4; i++) {
        rc = mdb_dbi_open(r->txn, names[i], 0, dbis[i]);
        cr_assert_eq(rc, 0, "no database '%s': %s", names[i], mdb_strerror(rc));
    }
}

static void raw_close(raw *r)
{
    int rc = mdb_txn_commit(r->txn);
    cr_assert_eq(rc, 0, "commit: %s", mdb_strerror(rc));
    mdb_env_close(r->env);
}

static void be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The run's number: the first 8 bytes of its `runs` value. */
static uint64_t raw_run_num(raw *r, const char *id)
{
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = mdb_get(r->txn, r->runs, &k, &v);
    cr_assert_eq(rc, 0, "run %s: %s", id, mdb_strerror(rc));
    cr_assert_geq(v.mv_size, 8);
    return get_be64(v.mv_data);
}

/* A step key as the layout table says: the run number (u64), each path
 * component (u32), the seq (u32), all big-endian. */
static size_t step_key(uint8_t *out, uint64_t num, const uint32_t *comps,
                       unsigned depth, uint32_t seq)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(num >> (56 - 8 * i));
    size_t n = 8;
    for (unsigned i = 0; i < depth; i++, n += 4)
        be32(out + n, comps[i]);
    be32(out + n, seq);
    return n + 4;
}

/* Copy out a stored step record (caller frees). */
static uint8_t *raw_get_step(raw *r, const uint8_t *key, size_t klen,
                             size_t *len)
{
    MDB_val k = {klen, (void *)key}, v;
    int rc = mdb_get(r->txn, r->steps, &k, &v);
    cr_assert_eq(rc, 0, "step: %s", mdb_strerror(rc));
    uint8_t *c = malloc(v.mv_size);
    cr_assert_not_null(c);
    memcpy(c, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return c;
}

static void raw_put_step(raw *r, const uint8_t *key, size_t klen,
                         const uint8_t *val, size_t vlen)
{
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    int rc = mdb_put(r->txn, r->steps, &k, &v, 0);
    cr_assert_eq(rc, 0, "put: %s", mdb_strerror(rc));
}

static void raw_del_step(raw *r, const uint8_t *key, size_t klen)
{
    MDB_val k = {klen, (void *)key};
    int rc = mdb_del(r->txn, r->steps, &k, NULL);
    cr_assert_eq(rc, 0, "del: %s", mdb_strerror(rc));
}

/* Where a record's payload starts: after the 7-field header. */
static size_t payload_offset(const uint8_t *rec, size_t len)
{
    pl__rec r;
    cr_assert_eq(pl__rec_decode(&r, rec, len), PL_OK, "%s", pl_errmsg());
    return (size_t)(r.payload - rec);
}

/* ---- ledgers and walks --------------------------------------------------- */

Test(store, ledgers_of_nested_invocations_in_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 3, \"fanout\": 3}", "nested");

    wants w = {0};
    nest_expect(&w, "0", 3, 3);
    cr_assert_eq(w.n, 158u, "13 inner invocations of 8 steps, 27 leaves of 2");
    expect_ledgers(e, "nested", &w, "nest");

    /* a closer look at a few steps */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0.2"), PL_OK);
    const pl_step *call = pl_steps_at(l, 2);
    cr_assert_str_eq(pl_step_id(call), "0.2:2");
    cr_assert_str_eq(pl_step_code(call), "nest-v1",
                     "an action_call records its callee's code");
    cJSON *want_call = t_json("{\"policy\": \"nest\", \"payload\": "
                              "{\"depth\": 1, \"fanout\": 3}}");
    cr_assert(cJSON_Compare(pl_step_payload(call), want_call, 1));
    cJSON_Delete(want_call);
    const pl_step *text = pl_steps_at(l, 6);
    cr_assert_null(pl_step_code(text));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(pl_step_payload(text),
                                                      "text")
                         ->valuestring,
                     "depth 2");
    uint8_t h[PL_HASH_LEN];
    cr_assert_eq(pl_step_prev_hash(h, text), PL_OK);
    pl_steps_free(l);

    /* the root's last step is its result */
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 8);
    const cJSON *res = pl_step_payload(pl_steps_at(l, 7));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(res, "depth")->valueint, 3);
    pl_steps_free(l);

    /* an invocation that does not exist has an empty ledger */
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0.1"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 0);
    pl_steps_free(l);
    cr_assert_eq(pl_run_ledger(&l, e, "nested", "0.0.0.0.0"), PL_OK);
    cr_assert_eq(pl_steps_count(l), 0);
    pl_steps_free(l);

    /* bad paths and runs */
    static const char *const bad[] = {"",     "1",           "0.",   "0..1",
                                      "0.a",  "00",          "0.1.", "x",
                                      "0.-1", "0.4294967295"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l = (pl_steps *)&w;
        cr_assert_eq(pl_run_ledger(&l, e, "nested", bad[i]), PL_EINVAL,
                     "path '%s'", bad[i]);
        cr_assert_null(l);
    }
    cr_assert_eq(pl_run_ledger(&l, e, "nested", NULL), PL_EINVAL);
    cr_assert_eq(pl_run_ledger(&l, e, "no-such-run", "0"), PL_ENOTFOUND);
    cr_assert_null(l);
    cr_assert_eq(pl_run_ledger(&l, e, "bad id!", "0"), PL_EINVAL);
    cr_assert_eq(pl_run_ledger(NULL, e, "nested", "0"), PL_EINVAL);

    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, long_ledgers_read_in_order_across_pages)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    /* 200 calls: a root ledger of 401 steps and 200 child ledgers whose
     * paths (0.0 ... 0.398) sort numerically, not as strings */
    start_ok(e, "chain", "{\"n\": 200}", "long");
    wants w = {0};
    chain_expect(&w, 200);
    expect_ledgers(e, "long", &w, NULL);
    expect_walk(e, "long", &w);

    pl_steps *l;
    cr_assert_eq(pl_run_ledger(&l, e, "long", "0"), PL_OK);
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        const char *want_actor = i % 2 && i < 400 ? "add" : "chain";
        cr_assert_str_eq(pl_step_actor(s), want_actor, "0:%zu", i);
    }
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(
        pl_step_payload(pl_steps_at(l, 400)), "total");
    cr_assert_eq(total->valuedouble, 19900.0, "sum of 0..199");
    pl_steps_free(l);
    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, walk_visits_every_step_in_tree_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 3, \"fanout\": 3}", "tree");
    /* a second run in the same store stays out of the first one's walk */
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 6}", "tree2");
    wants w = {0};
    nest_expect(&w, "0", 3, 3);
    expect_walk(e, "tree", &w);
    free(w.v);
    w = (wants){0};
    nest_expect(&w, "0", 1, 6);
    expect_walk(e, "tree2", &w);

    /* a visitor's non-zero return stops the walk and is returned */
    seen sn = {.stop_at = 5, .stop_with = 42};
    cr_assert_eq(pl_run_walk(e, "tree", collect, &sn), 42);
    cr_assert_eq(sn.got.n, 5, "the walk went on after the visitor stopped");
    free(sn.got.v);

    sn = (seen){0};
    cr_assert_eq(pl_run_walk(e, "missing", collect, &sn), PL_ENOTFOUND);
    cr_assert_eq(sn.got.n, 0);
    cr_assert_eq(pl_run_walk(e, "tree", NULL, NULL), PL_EINVAL);
    cr_assert_eq(pl_run_walk(NULL, "tree", collect, &sn), PL_EINVAL);
    cr_assert_eq(pl_run_walk(e, "", collect, &sn), PL_EINVAL);
    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, walk_from_starts_at_any_step)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 3, \"fanout\": 3}", "tree");
    start_ok(e, "chain", "{\"n\": 20}", "chain");
    const char *runs[] = {"tree", "chain"};
    for (size_t r = 0; r < 2; r++) {
        seen all = {0};
        cr_assert_eq(pl_run_walk_from(e, runs[r], NULL, collect, &all), PL_OK);
        cr_assert_gt(all.got.n, 20);
        /* from each step (stored, or folded into its caller's result):
         * that step and every one after it, in the same order */
        for (size_t k = 0; k < all.got.n; k++) {
            seen sn = {0};
            int st = pl_run_walk_from(e, runs[r], all.got.v[k].id, collect,
                                      &sn);
            cr_assert_eq(st, PL_OK, "from %s: %s", all.got.v[k].id,
                         pl_errmsg());
            cr_assert_eq(sn.got.n, all.got.n - k, "from %s", all.got.v[k].id);
            for (size_t i = 0; i < sn.got.n; i++)
                cr_assert_str_eq(sn.got.v[i].id, all.got.v[k + i].id,
                                 "from %s, step %zu", all.got.v[k].id, i);
            free(sn.got.v);
        }
        free(all.got.v);
    }
    /* a step not stored starts where it would sit */
    seen sn = {0};
    cr_assert_eq(pl_run_walk_from(e, "chain", "0.1:5", collect, &sn), PL_OK);
    cr_assert_str_eq(sn.got.v[0].id, "0:2", "after 0:1's subtree");
    free(sn.got.v);
    sn = (seen){0};
    cr_assert_eq(pl_run_walk_from(e, "chain", "0:9999", collect, &sn), PL_OK);
    cr_assert_eq(sn.got.n, 0, "past the end: nothing");
    sn = (seen){.stop_at = 2, .stop_with = 7};
    cr_assert_eq(pl_run_walk_from(e, "chain", "0:3", collect, &sn), 7);
    cr_assert_eq(sn.got.n, 2);
    free(sn.got.v);
    const char *bad[] = {"",     "0",    "x:1",          "0:", "0:1x",  "1:0",
                         "0.:1", "0:-1", "0:4294967295", ":3", "0..1:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sn = (seen){0};
        cr_assert_eq(pl_run_walk_from(e, "chain", bad[i], collect, &sn),
                     PL_EINVAL, "step id '%s'", bad[i]);
        cr_assert_eq(sn.got.n, 0);
    }
    cr_assert_eq(pl_run_walk_from(e, "missing", "0:0", collect, &sn),
                 PL_ENOTFOUND);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- runs ---------------------------------------------------------------- */

typedef struct listed {
    char ids[400][16];
    pl_run_status status[400];
    uint64_t steps[400];
    char policy[400][16];
    int error[400];
    bool has_reason[400];
    size_t n;
    size_t stop_at;
} listed;

static int list_visit(const pl_run_info *info, void *user)
{
    listed *l = user;
    cr_assert_lt(l->n, 400);
    snprintf(l->ids[l->n], sizeof l->ids[0], "%s", info->id);
    snprintf(l->policy[l->n], sizeof l->policy[0], "%s", info->policy);
    l->status[l->n] = info->status;
    l->steps[l->n] = info->steps;
    l->error[l->n] = info->error;
    l->has_reason[l->n] = info->reason != NULL;
    cr_assert(cJSON_IsObject(info->payload));
    l->n++;
    return l->stop_at && l->n == l->stop_at ? 42 : 0;
}

Test(store, engine_runs_lists_every_run_in_id_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    enum { N = 300 }; /* more than one page of the listing */
    /* created in a scrambled order: the listing is by id */
    for (int k = 0; k < N; k++) {
        int i = (k * 7) % N;
        char id[16], payload[32];
        snprintf(id, sizeof id, "run-%03d", i);
        snprintf(payload, sizeof payload, "{\"i\": %d}", i);
        start_ok(e, "echo", payload, id);
    }
    pl_outcome *o = t_start(e, "fail", NULL, "run-x-fail");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    start_ok(e, "chain", "{\"n\": 4}", "run-x-chain");

    listed *l = calloc(1, sizeof *l);
    cr_assert_not_null(l);
    cr_assert_eq(pl_engine_runs(e, list_visit, l), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(l->n, N + 2);
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "run-%03d", i);
        cr_assert_str_eq(l->ids[i], id, "listing position %d", i);
        cr_assert_eq(l->status[i], PL_RUN_COMPLETED);
        cr_assert_eq(l->steps[i], 1, "an echo run has one step");
        cr_assert_str_eq(l->policy[i], "echo");
        cr_assert_eq(l->error[i], 0);
        cr_assert_not(l->has_reason[i]);
    }
    cr_assert_str_eq(l->ids[N], "run-x-chain");
    cr_assert_eq(l->status[N], PL_RUN_COMPLETED);
    cr_assert_eq(l->steps[N], walk_count(e, "run-x-chain"));
    cr_assert_eq(l->steps[N], 9 + 4);
    cr_assert_str_eq(l->policy[N], "chain");
    cr_assert_str_eq(l->ids[N + 1], "run-x-fail");
    cr_assert_eq(l->status[N + 1], PL_RUN_FAILED);
    cr_assert_eq(l->error[N + 1], PL_EPOLICY);
    cr_assert(l->has_reason[N + 1]);

    /* the visitor's stop value comes back, and nothing is visited after */
    memset(l, 0, sizeof *l);
    l->stop_at = 10;
    cr_assert_eq(pl_engine_runs(e, list_visit, l), 42);
    cr_assert_eq(l->n, 10);
    memset(l, 0, sizeof *l);
    l->stop_at = 260; /* on the second page */
    cr_assert_eq(pl_engine_runs(e, list_visit, l), 42);
    cr_assert_eq(l->n, 260);
    cr_assert_str_eq(l->ids[259], "run-259");

    cr_assert_eq(pl_engine_runs(e, NULL, l), PL_EINVAL);
    cr_assert_eq(pl_engine_runs(NULL, list_visit, l), PL_EINVAL);
    free(l);
    pl_engine_close(e);

    /* an empty store lists nothing */
    e = open_with(t_store_path(), reg, 0, 0);
    listed *none = calloc(1, sizeof *none);
    cr_assert_eq(pl_engine_runs(e, list_visit, none), PL_OK);
    cr_assert_eq(none->n, 0);
    free(none);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, run_get_reports_the_record)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 5}", "r1");

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(info->id, "r1");
    cr_assert_str_eq(info->policy, "chain");
    cJSON *want = t_json("{\"n\": 5}");
    cr_assert(cJSON_Compare(info->payload, want, 1));
    cJSON_Delete(want);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, walk_count(e, "r1"),
                 "the record's step count is what the store holds");
    cr_assert_eq(info->steps, 11 + 5);
    cr_assert_eq(info->attempts, 1);
    cr_assert_eq(info->owner_pid, (int64_t)getpid());
    cr_assert_not_null(info->owner_host);
    cr_assert_gt(strlen(info->owner_host), 0);
    cr_assert_not(info->owner_alive, "a finished run has no live owner");
    cr_assert_gt(info->created_us, 0);
    cr_assert_gt(info->updated_us, 0);
    cr_assert_gt(info->heartbeat_us, 0);
    cr_assert_eq(info->error, 0);
    cr_assert_null(info->reason);
    cr_assert_null(info->suspended_path);
    cr_assert_null(info->prompt);
    pl_run_info_free(info);

    /* continuing a completed run replays it: no more steps */
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "r1", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(o->calls_served, 5);
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->steps_appended, 0);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, 16);
    cr_assert_eq(info->steps, walk_count(e, "r1"));
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);

    /* a failed run records why; retrying it is another attempt */
    o = t_start(e, "fail", NULL, "r2");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r2"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_FAILED);
    cr_assert_eq(info->error, PL_EPOLICY);
    cr_assert_not_null(info->reason);
    cr_assert(strstr(info->reason, "fail") != NULL, "%s", info->reason);
    cr_assert_eq(info->steps, walk_count(e, "r2"));
    cr_assert_eq(info->attempts, 1);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_continue(&o, e, "r2", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r2"), PL_OK);
    cr_assert_eq(info->attempts, 2);
    cr_assert_eq(info->owner_pid, (int64_t)getpid());
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);

    /* while running, the run is its own live owner */
    o = t_start(e, "self_get", NULL, "r3");
    const cJSON *seen_inside = pl_outcome_result(o);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(seen_inside, "status")
                     ->valueint,
                 PL_RUN_RUNNING);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(seen_inside,
                                                            "alive")),
              "a run executing in this engine has a live owner");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(seen_inside, "pid")
                     ->valuedouble,
                 (double)getpid());
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "r3"), PL_OK);
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);

    info = (pl_run_info *)&info;
    cr_assert_eq(pl_run_get(&info, e, "nope"), PL_ENOTFOUND);
    cr_assert_null(info);
    cr_assert(strstr(pl_errmsg(), "nope") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl_run_get(&info, e, "bad id"), PL_EINVAL);
    cr_assert_eq(pl_run_get(&info, e, ""), PL_EINVAL);
    cr_assert_eq(pl_run_get(NULL, e, "r1"), PL_EINVAL);
    cr_assert_eq(pl_run_get(&info, NULL, "r1"), PL_EINVAL);
    pl_run_info_free(NULL);
    pl_engine_close(e);

    /* the record outlives the engine */
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, 16);
    cr_assert_not(info->owner_alive);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_get(&info, e, "r2"), PL_OK);
    cr_assert_eq(info->attempts, 2);
    pl_run_info_free(info);
    pl_engine_close(e);
    pl_registry_free(reg);
}

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

/* Run @p policy with @p payload as @p id, and "chain" {"n": 2} as
 * "bystander"; close the engine, and open the store raw. */
static uint64_t run_then_raw(const char *path, pl_registry *reg,
                             const char *policy, const char *payload,
                             const char *id, raw *r)
{
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, policy, payload, id);
    start_ok(e, "chain", "{\"n\": 2}", "bystander");
    cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    raw_open(r, path, false);
    return raw_run_num(r, id);
}

/* Run "chain" {"n": 5} as @p id (steps 0:0..0:10 in the root, the result
 * of call k at 0:(2k+1), holding its callee's one step); open raw. */
static uint64_t chain_then_raw(const char *path, pl_registry *reg,
                               const char *id, raw *r)
{
    return run_then_raw(path, reg, "chain", "{\"n\": 5}", id, r);
}

/* The bystander run, untouched, still verifies and replays. */
static void bystander_fine(pl_engine *e)
{
    cr_assert_eq(pl_run_verify(e, "bystander"), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "bystander", NULL), PL_OK);
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
}

/* Run "nest" {"depth": 1, "fanout": 3} as @p id: the root records calls at
 * 0:0, 0:2, 0:4, their results at 0:1, 0:3, 0:5, a text at 0:6 and its
 * result at 0:7; each callee 0.k records a text at 0.k:0 and its result,
 * a mirror, at 0.k:1.  Then open raw. */
static uint64_t nest_then_raw(const char *path, pl_registry *reg,
                              const char *id, raw *r)
{
    return run_then_raw(path, reg, "nest", "{\"depth\": 1, \"fanout\": 3}", id,
                        r);
}

/* Whether the store holds a step record at @p key. */
static bool raw_has_step(raw *r, const uint8_t *key, size_t klen)
{
    MDB_val k = {klen, (void *)key}, v;
    int rc = mdb_get(r->txn, r->steps, &k, &v);
    cr_assert(rc == 0 || rc == MDB_NOTFOUND, "%s", mdb_strerror(rc));
    return rc == 0;
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

/* SIGKILL the process when the third call has its result. */
static void kill_at_third_result(const pl_event *ev, void *user)
{
    int *n = user;
    if (ev->kind == PL_EVENT_CALL_COMPLETED && ++*n == 3)
        raise(SIGKILL);
}

/* nest_then_raw()'s run, in a child killed when its third call has its
 * result (0:0..0:5 are durable); then open raw. */
static uint64_t nest_crashed_then_raw(const char *path, pl_registry *reg,
                                      const char *id, raw *r)
{
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 2}", "bystander");
    pl_engine_close(e);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int n = 0;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        o.on_event = kill_at_third_result;
        o.event_user = &n;
        pl_engine *ce;
        if (pl_engine_open(&ce, path, reg, &o))
            _exit(3);
        pl_outcome *out = NULL;
        cJSON *p = t_json("{\"depth\": 1, \"fanout\": 3}");
        pl_action a = {PL_ACTION_VERSION, "nest", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        (void)pl_run_start(&out, ce, &a, &ro);
        _exit(4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child did not die at the third result (status %d)", status);
    raw_open(r, path, false);
    return raw_run_num(r, id);
}

/* SIGKILL the process when its 550th call has its result. */
static void kill_at_550th_result(const pl_event *ev, void *user)
{
    int *n = user;
    if (ev->kind == PL_EVENT_CALL_COMPLETED && ++*n == 550)
        raise(SIGKILL);
}

/*
 * Continuing a crashed run counts its steps (its record holds them as of
 * its last heartbeat only), in read transactions of 1024 records at most:
 * a run of more records than that is counted whole, once, and its record
 * then agrees with its ledgers.
 */
Test(store, a_crashed_run_longer_than_a_read_is_counted_whole)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int n = 0;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        o.on_event = kill_at_550th_result;
        o.event_user = &n;
        pl_engine *ce;
        if (pl_engine_open(&ce, path, reg, &o))
            _exit(3);
        pl_outcome *out = NULL;
        cJSON *p = t_json("{\"n\": 600, \"size\": 8}");
        pl_action a = {PL_ACTION_VERSION, "bulk", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "long";
        (void)pl_run_start(&out, ce, &a, &ro);
        _exit(4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child did not die at the 550th result (status %d)", status);

    /* 550 calls of an action_call and an action_result each: 1100 records
     * at least, more than one read transaction counts */
    pl_engine *e = open_with(path, reg, 0, 0);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "long"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert_leq(info->steps, 3 * 550, "no more than were durable");
    pl_run_info_free(info);

    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "long", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_get(&info, e, "long"), PL_OK);
    cr_assert_eq(info->steps, 3 * 600 + 1,
                 "%llu steps: each call's two "
                 "root steps and the echo step folded into its result, "
                 "and the result",
                 (unsigned long long)info->steps);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "long"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A mirror whose caller's result is changed, missing or absent by design
 * (the root has no caller) is a clear error wherever it is read. */
Test(store, a_mirror_without_its_result_is_corrupt)
{
    pl_registry *reg = registry();
    for (int how = 0; how < 3; how++) {
        const char *path = t_store_path();
        char id[16];
        snprintf(id, sizeof id, "mirror-%d", how);
        raw r;
        uint64_t num = how == 1 ? nest_crashed_then_raw(path, reg, id, &r)
                                : nest_then_raw(path, reg, id, &r);
        uint32_t comps[1] = {2};
        uint8_t key[64];
        size_t n, kl;
        uint8_t *rec;
        const char *ledger = "0.2", *says;
        if (how == 0) { /* the mirror 0.2:1 changes */
            kl = step_key(key, num, comps, 1, 1);
            rec = raw_get_step(&r, key, kl, &n);
            cr_assert(rec[1] == PL__FORMAT_V2 && rec[n - 1] == 0xc0);
            cr_assert_eq(rec[3], 0xcf, "the time, as a uint 64");
            rec[11] ^= 1;
            raw_put_step(&r, key, kl, rec, n);
            free(rec);
            says = "does not link";
        } else if (how == 1) { /* the crashed run's root ends at 0:2 */
            for (uint32_t seq = 3; seq <= 5; seq++) {
                kl = step_key(key, num, NULL, 0, seq);
                raw_del_step(&r, key, kl);
            }
            uint32_t later[1] = {4}; /* and the third call's ledger */
            for (uint32_t seq = 0; seq <= 1; seq++) {
                kl = step_key(key, num, later, 1, seq);
                raw_del_step(&r, key, kl);
            }
            says = "records none";
        } else { /* the root's result 0:7 is made a mirror */
            ledger = "0";
            kl = step_key(key, num, NULL, 0, 7);
            rec = raw_get_step(&r, key, kl, &n);
            size_t off = payload_offset(rec, n);
            rec[1] = PL__FORMAT_V2;
            rec[off] = 0xc0;
            raw_put_step(&r, key, kl, rec, off + 1);
            free(rec);
            says = "root";
        }
        raw_close(&r);

        pl_engine *e = open_with(path, reg, 0, 0);
        cr_assert_eq(pl_run_verify(e, id), PL_ECORRUPT, "%s", id);
        cr_assert(strstr(pl_errmsg(), how == 2 ? "root" : "0.2") != NULL,
                  "%s: %s", id, pl_errmsg());
        pl_steps *l = NULL;
        cr_assert_eq(pl_run_ledger(&l, e, id, ledger), PL_ECORRUPT, "%s", id);
        cr_assert_null(l);
        cr_assert(strstr(pl_errmsg(), says) != NULL, "%s: %s", id, pl_errmsg());
        seen sn = {0};
        cr_assert_eq(pl_run_walk(e, id, collect, &sn), PL_ECORRUPT, "%s", id);
        cr_assert(strstr(pl_errmsg(), says) != NULL, "%s: %s", id, pl_errmsg());
        free(sn.got.v);
        if (how > 0) {
            /* replay meets the mirror: the callee runs again, or the root
             * compares its result; neither takes nil for a payload */
            pl_outcome *o = NULL;
            int st = pl_run_continue(&o, e, id, NULL);
            int err = st ? st : o->error;
            cr_assert(st != PL_OK || o->status == PL_RUN_FAILED, "%s", id);
            cr_assert_eq(err, PL_ECORRUPT, "%s: %s", id, pl_status_name(err));
            cr_assert(strstr(st ? pl_errmsg() : o->reason, "caller") != NULL,
                      "%s: %s", id, st ? pl_errmsg() : o->reason);
            pl_outcome_free(o);
        }
        bystander_fine(e);
        pl_engine_close(e);
    }
    pl_registry_free(reg);
}

/* A folded result whose callee ledger holds records after all: verify says
 * so. */
Test(store, a_folded_result_with_a_stored_callee_ledger_is_corrupt)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "refolded", &r);
    uint32_t comps[1] = {2};
    uint8_t key[64], ckey[64];
    size_t n, kl = step_key(key, num, NULL, 0, 0);
    size_t ckl = step_key(ckey, num, comps, 1, 0);
    cr_assert_not(raw_has_step(&r, ckey, ckl), "0.2:0 is folded into 0:3");
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    raw_put_step(&r, ckey, ckl, rec, n); /* any record will do */
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "refolded"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "0.2") != NULL, "%s", pl_errmsg());
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A recorded result whose value the policy ignores, changed in the store:
 * replay must not serve it as if nothing happened. */
Test(store, continue_refuses_a_changed_record)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 3}", "ignored");
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    uint64_t num = raw_run_num(&r, "ignored");
    /* 0:1 is the first call's result, {"depth": 0}: make it {"depth": 1} */
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 1), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    cr_assert_eq(rec[n - 1], 0x00);
    rec[n - 1] = 0x01;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "ignored"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "0:2") != NULL, "%s", pl_errmsg());

    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "ignored", NULL);
    cr_assert(st != PL_OK || o, "PL_OK without an outcome");
    int err = st ? st : o->error;
    const char *why = st ? pl_errmsg() : o->reason ? o->reason : "";
    /* non-fatal from here, so that the run's memory is still freed */
    cr_expect(st != PL_OK || o->status == PL_RUN_FAILED,
              "continue served a record whose hash chain is broken and "
              "completed the run as if nothing were wrong");
    cr_expect_eq(err, PL_ECORRUPT, "continue gave %s: %s", pl_status_name(err),
                 why);
    cr_expect(strstr(why, "0:1") != NULL || strstr(why, "0:2") != NULL,
              "the failure names the damaged step: %s", why);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, continue_fails_clearly_on_an_unreadable_record)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "garbled", &r);
    /* 0:3's payload map becomes the never-used byte 0xc1 */
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 3), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    rec[payload_offset(rec, n)] = 0xc1;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "garbled"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "garbled", "0"), PL_ECORRUPT);
    cr_assert_null(l);
    cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    seen sn = {0};
    cr_assert_eq(pl_run_walk(e, "garbled", collect, &sn), PL_ECORRUPT);
    /* 0:0, 0.0:0 (folded into 0:1), 0:1, 0:2, then the damaged 0:3, which
     * holds 0.2:0 too */
    cr_assert_eq(sn.got.n, 4, "the walk stops at the damaged result");
    cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    free(sn.got.v);

    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "garbled", NULL);
    if (st == PL_OK) {
        cr_assert_eq(o->status, PL_RUN_FAILED);
        cr_assert_eq(o->error, PL_ECORRUPT, "%s", pl_status_name(o->error));
        cr_assert(strstr(o->reason, "0:3") != NULL, "%s", o->reason);
    } else {
        cr_assert_eq(st, PL_ECORRUPT, "%s", pl_status_name(st));
        cr_assert(strstr(pl_errmsg(), "0:3") != NULL, "%s", pl_errmsg());
    }
    bool recorded = st == PL_OK;
    pl_outcome_free(o);
    /* a failure reported as an outcome is on record */
    pl_run_info *info;
    cr_assert_eq(pl_run_get(&info, e, "garbled"), PL_OK);
    if (recorded) {
        cr_assert_eq(info->status, PL_RUN_FAILED);
        cr_assert_eq(info->error, PL_ECORRUPT);
    }
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "garbled"), PL_ECORRUPT,
                 "nothing repaired or rewrote the damaged step");
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, verify_detects_deleted_steps)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "holes", &r);
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 3); /* a result in the middle */
    raw_del_step(&r, key, kl);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "holes"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "holes") != NULL, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "step 3") != NULL,
              "names the missing "
              "step: %s",
              pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "holes", "0"), PL_ECORRUPT,
                 "a ledger with a gap is not read as if whole");
    cr_assert_null(l);
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "holes", NULL);
    int err = st ? st : o->error;
    cr_assert(st != PL_OK || o->status == PL_RUN_FAILED);
    cr_assert_eq(err, PL_ECORRUPT, "%s", pl_status_name(err));
    pl_outcome_free(o);
    bystander_fine(e);
    pl_engine_close(e);

    /* the last step of a ledger: no gap, but fewer steps than recorded */
    raw_open(&r, path, false);
    uint64_t bnum = raw_run_num(&r, "bystander");
    kl = step_key(key, bnum, NULL, 0, 4); /* its root result */
    raw_del_step(&r, key, kl);
    raw_close(&r);
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "bystander"), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "bystander") != NULL, "%s", pl_errmsg());
    pl_engine_close(e);

    /* a whole child ledger (a nest's: an add's is folded into its result) */
    e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 3}", "orphan");
    pl_engine_close(e);
    raw_open(&r, path, false);
    uint64_t onum = raw_run_num(&r, "orphan");
    uint32_t comps[1] = {2};
    for (uint32_t seq = 0; seq < 2; seq++) {
        kl = step_key(key, onum, comps, 1, seq);
        raw_del_step(&r, key, kl);
    }
    raw_close(&r);
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "orphan"), PL_ECORRUPT);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/*
 * A step missing near the end of a ledger that no run record anchors (the
 * run failed), with only a few records after it: reading steps over small
 * subtrees, and must still tell a missing step from the ledger's end.
 */
Test(store, a_gap_near_the_end_of_a_ledger_is_not_its_end)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    pl_outcome *o = t_start(e, "two_then_fail", NULL, "short");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "short", "0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 4, "two calls, two results");
    pl_steps_free(l);
    pl_engine_close(e);
    raw r;
    raw_open(&r, path, false);
    uint8_t key[64];
    size_t kl = step_key(key, raw_run_num(&r, "short"), NULL, 0, 2);
    raw_del_step(&r, key, kl); /* the second call; its subtree stays */
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "short", "0"), PL_ECORRUPT,
                 "a ledger with a gap is not read as if it ended there");
    cr_assert_null(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, verify_reports_an_unknown_record_version)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    raw r;
    uint64_t num = chain_then_raw(path, reg, "future", &r);
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 2), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    cr_assert_eq(rec[0], 0x97, "a 7-field header");
    cr_assert_eq(rec[1], 0x01, "format version 1");
    rec[1] = 0x03;
    raw_put_step(&r, key, kl, rec, n);
    free(rec);
    raw_close(&r);

    pl_engine *e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "future"), PL_EVERSION, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "0:2") != NULL, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "version") != NULL, "%s", pl_errmsg());
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "future", "0"), PL_EVERSION);
    seen sn = {0};
    cr_assert_eq(pl_run_walk(e, "future", collect, &sn), PL_EVERSION);
    free(sn.got.v);
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, "future", NULL);
    int err = st ? st : o->error;
    cr_assert(st != PL_OK || o->status == PL_RUN_FAILED);
    cr_assert_eq(err, PL_EVERSION, "%s", pl_status_name(err));
    pl_outcome_free(o);
    bystander_fine(e);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- map size ------------------------------------------------------------ */

static off_t file_size(const char *path)
{
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "stat %s: %s", path, strerror(errno));
    return sb.st_size;
}

/* Check a "bulk" run's ledger: n calls, each echoing its blob. */
static void bulk_intact(pl_engine *e, const char *id, int n, int size)
{
    cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s: %s", id, pl_errmsg());
    pl_steps *l;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), (size_t)(2 * n + 1));
    for (int i = 0; i < n; i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, (size_t)(2 * i + 1)));
        const cJSON *blob = cJSON_GetObjectItemCaseSensitive(p, "blob");
        cr_assert(cJSON_IsString(blob));
        cr_assert_eq(strlen(blob->valuestring), (size_t)size);
        cr_assert_eq(blob->valuestring[0], (char)('a' + i % 26));
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(p, "i")->valueint, i);
    }
    pl_steps_free(l);
}

Test(store, map_grows_past_its_initial_size, .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, (size_t)64 << 10, 0);
    /* about 3 MB into a 64 KiB map */
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        start_ok(e, "bulk", "{\"n\": 16, \"size\": 16384}", id);
    }
    for (int i = 0; i < 50; i++) {
        char id[16];
        snprintf(id, sizeof id, "small-%02d", i);
        start_ok(e, "chain", "{\"n\": 2}", id);
    }
    cr_assert_gt(file_size(path), (off_t)1 << 20);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        bulk_intact(e, id, 16, 16384);
    }
    pl_engine_close(e);

    /* reopened with the same small map size, everything reads back */
    e = open_with(path, reg, (size_t)64 << 10, 0);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        bulk_intact(e, id, 16, 16384);
    }
    for (int i = 0; i < 50; i++) {
        char id[16];
        snprintf(id, sizeof id, "small-%02d", i);
        cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(walk_count(e, id), 5 + 2);
    }
    /* and it keeps growing */
    start_ok(e, "bulk", "{\"n\": 8, \"size\": 65536}", "bigger");
    bulk_intact(e, "bigger", 8, 65536);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the zeroed tail ------------------------------------------------------ */

/* The bytes LMDB uses of a store file: up to the end of its last page. */
static off_t raw_used(const char *path)
{
    raw r;
    MDB_envinfo info;
    MDB_stat ms;
    raw_open(&r, path, false);
    cr_assert_eq(mdb_env_info(r.env, &info), 0);
    cr_assert_eq(mdb_env_stat(r.env, &ms), 0);
    raw_close(&r); /* writes nothing: the transaction changed nothing */
    return ((off_t)info.me_last_pgno + 1) * (off_t)ms.ms_psize;
}

/* Every byte of @p path from @p from to its end is zero. */
static bool zeros_from(const char *path, off_t from)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fseeko(f, from, SEEK_SET), 0);
    int c;
    while ((c = fgetc(f)) != EOF && c == 0)
        ;
    fclose(f);
    return c == EOF;
}

Test(store, a_syncing_store_keeps_a_zeroed_tail)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    start_ok(e, "bulk", "{\"n\": 8, \"size\": 16384}", "first");
    pl_engine_close(e);
    /* past LMDB's last page, at least half a tail of 1 MiB, all zeros */
    off_t used = raw_used(path), size = file_size(path);
    cr_assert_geq(size, used + (512 << 10), "used %lld, file %lld",
                  (long long)used, (long long)size);
    cr_assert_leq(size, used + (1 << 20), "used %lld, file %lld",
                  (long long)used, (long long)size);
    cr_assert(zeros_from(path, used));

    /* growing past it (about 1.6 MB more) writes a new one */
    e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    start_ok(e, "bulk", "{\"n\": 48, \"size\": 32768}", "second");
    bulk_intact(e, "first", 8, 16384);
    bulk_intact(e, "second", 48, 32768);
    pl_engine_close(e);
    off_t used2 = raw_used(path), size2 = file_size(path);
    cr_assert_gt(used2, size, "the data went past the first tail");
    cr_assert_geq(size2, used2 + (512 << 10));
    cr_assert(zeros_from(path, used2));

    /* a store that does not sync keeps none */
    const char *other = t_store_path();
    e = open_sized(other, reg, PL_DURABILITY_PROCESS, 0, 0);
    start_ok(e, "bulk", "{\"n\": 8, \"size\": 16384}", "first");
    pl_engine_close(e);
    cr_assert_eq(file_size(other), raw_used(other));
    pl_registry_free(reg);
}

/* A file size limit that the tail would pass: SIGXFSZ ignored, its write
 * fails with EFBIG, as on a full disk. */
Test(store, a_tail_that_cannot_be_written_costs_no_commit)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        struct rlimit rl = {256 << 10, 256 << 10};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl))
            _exit(3);
        pl_engine *ce = t_engine(path, reg, PL_DURABILITY_SYNC);
        pl_outcome *o = t_start(ce, "chain", "{\"n\": 40}", "limited");
        int ok = o->status == PL_RUN_COMPLETED &&
                 pl_run_verify(ce, "limited") == PL_OK;
        pl_outcome_free(o);
        pl_engine_close(ce);
        _exit(ok ? 0 : 4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the run under the limit failed (status %d)", status);
    /* the failed tail was cut back: only LMDB's pages are left */
    cr_assert_eq(file_size(path), raw_used(path));
    pl_engine *e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    cr_assert_eq(pl_run_verify(e, "limited"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(walk_count(e, "limited"), 3 * 40 + 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, full_map_that_may_not_grow, .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    size_t max = (size_t)1 << 20;
    pl_engine *e = open_with(path, reg, (size_t)256 << 10, max);
    start_ok(e, "chain", "{\"n\": 3}", "early");
    start_ok(e, "bulk", "{\"n\": 2, \"size\": 1000}", "early-bulk");

    cJSON *p = t_json("{\"n\": 100, \"size\": 32768}");
    pl_action a = {PL_ACTION_VERSION, "bulk", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "too-big";
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    /* documented: PL_EMAPFULL, no outcome, nothing durable lost */
    cr_assert_eq(st, PL_EMAPFULL, "pl_run_start gave %s: %s",
                 pl_status_name(st), pl_errmsg());
    cr_assert_null(o);
    cr_assert(strstr(pl_errmsg(), "full") != NULL, "%s", pl_errmsg());
    cr_assert_leq(file_size(path), (off_t)max, "the file grew past the max");

    /* what was written before is all there */
    cr_assert_eq(pl_run_verify(e, "early"), PL_OK, "%s", pl_errmsg());
    bulk_intact(e, "early-bulk", 2, 1000);
    /* and so is what the failed run made durable before the map filled */
    cr_assert_eq(pl_run_verify(e, "too-big"), PL_OK, "%s", pl_errmsg());
    pl_steps *l;
    cr_assert_eq(pl_run_ledger(&l, e, "too-big", "0"), PL_OK);
    size_t kept = pl_steps_count(l);
    cr_assert_gt(kept, 0, "some calls were durable before the map filled");
    cr_assert_lt(kept, 200);
    cr_assert_eq(kept % 2, 0, "whole calls only");
    int64_t first_time = pl_step_time_us(pl_steps_at(l, 0));
    pl_steps_free(l);
    pl_run_info *info;
    cr_assert_eq(pl_run_get(&info, e, "too-big"), PL_OK);
    cr_assert_neq(info->status, PL_RUN_COMPLETED);
    cr_assert_not(info->owner_alive, "nothing runs it any more");
    pl_run_info_free(info);
    /* more writes still fail cleanly */
    o = NULL;
    cJSON *p2 = t_json("{\"n\": 40, \"size\": 32768}");
    pl_action a2 = {PL_ACTION_VERSION, "bulk", p2, NULL, 0, NULL};
    st = pl_run_start(&o, e, &a2, NULL);
    cJSON_Delete(p2);
    cr_assert_eq(st, PL_EMAPFULL, "%s", pl_status_name(st));
    cr_assert_null(o);
    pl_engine_close(e);

    /* reopened: still all there; with room to grow the run finishes,
     * serving the calls it had already made */
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "early"), PL_OK, "%s", pl_errmsg());
    bulk_intact(e, "early-bulk", 2, 1000);
    cr_assert_eq(pl_run_verify(e, "too-big"), PL_OK, "%s", pl_errmsg());
    o = NULL;
    st = pl_run_continue(&o, e, "too-big", NULL);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_assert_eq(o->calls_served, kept / 2);
    cr_assert_eq(o->calls_executed, 100 - kept / 2);
    pl_outcome_free(o);
    bulk_intact(e, "too-big", 100, 32768);
    cr_assert_eq(pl_run_ledger(&l, e, "too-big", "0"), PL_OK);
    cr_assert_eq(pl_step_time_us(pl_steps_at(l, 0)), first_time,
                 "the first attempt's steps were kept, not rewritten");
    pl_steps_free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A run started on its own thread (no Criterion asserts off the main one). */
typedef struct starter {
    pthread_t th;
    pl_engine *e;
    const char *policy;
    const char *payload;
    char id[32];
    int rc;
    pl_outcome *o;
} starter;

static void *starter_main(void *arg)
{
    starter *s = arg;
    cJSON *p = cJSON_Parse(s->payload);
    pl_action a = {PL_ACTION_VERSION, s->policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = s->id;
    s->rc = p ? pl_run_start(&s->o, s->e, &a, &ro) : PL_EINVAL;
    cJSON_Delete(p);
    return NULL;
}

/*
 * In group mode, a call whose batch can never fit the map (a 2 MB result in
 * a map that may not pass 1 MiB) fails alone with PL_EMAPFULL: the runs
 * whose batches shared its group commit are committed all the same.  Three
 * such runs start among ten small ones, so their batches usually share a
 * group with others (each is right whether or not it does).
 */
Test(store, in_group_mode_a_batch_too_big_for_the_map_fails_alone,
     .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    size_t max = (size_t)1 << 20;
    pl_engine *e = open_sized(path, reg, PL_DURABILITY_GROUP, (size_t)256 << 10,
                              max);
    enum { N = 13 };
    starter st[N];
    for (int i = 0; i < N; i++) {
        bool huge = i % 4 == 3;
        st[i] = (starter){.e = e,
                          .policy = huge ? "bulk" : "chain",
                          .payload = huge ? "{\"n\": 1, \"size\": 2000000}"
                                          : "{\"n\": 30}"};
        snprintf(st[i].id, sizeof st[i].id, "%s-%d", huge ? "huge" : "small",
                 i);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&st[i].th, NULL, starter_main, &st[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(st[i].th, NULL);

    for (int i = 0; i < N; i++) {
        if (i % 4 == 3) {
            cr_assert_eq(st[i].rc, PL_EMAPFULL, "%s: %s", st[i].id,
                         pl_status_name(st[i].rc));
            cr_assert_null(st[i].o);
            continue;
        }
        cr_assert_eq(st[i].rc, PL_OK, "%s: %s", st[i].id,
                     pl_status_name(st[i].rc));
        cr_assert_eq(st[i].o->status, PL_RUN_COMPLETED, "%s", st[i].id);
        cr_assert_eq(st[i].o->calls_executed, 30);
        pl_outcome_free(st[i].o);
        cr_assert_eq(pl_run_verify(e, st[i].id), PL_OK, "%s: %s", st[i].id,
                     pl_errmsg());
    }
    cr_assert_leq(file_size(path), (off_t)max, "the file grew past the max");
    pl_engine_close(e);

    /* and all of it reads back after a reopen */
    e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    for (int i = 0; i < N; i++) {
        if (i % 4 == 3)
            continue;
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, st[i].id), PL_OK);
        cr_assert_eq(info->status, PL_RUN_COMPLETED);
        pl_run_info_free(info);
        cr_assert_eq(pl_run_verify(e, st[i].id), PL_OK, "%s", pl_errmsg());
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- opening stores ------------------------------------------------------ */

Test(store, one_open_per_process)
{
    pl_registry *reg = registry();
    const char *paths[2] = {t_store_path(), t_tmpdir()};
    for (int i = 0; i < 2; i++) {
        pl_engine *e = open_with(paths[i], reg, 0, 0);
        start_ok(e, "echo", "{\"x\": 1}", "first");
        pl_engine *again = (pl_engine *)reg;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        int st = pl_engine_open(&again, paths[i], reg, &o);
        cr_assert_eq(st, PL_EBUSY, "second open of %s gave %s", paths[i],
                     pl_status_name(st));
        cr_assert_null(again);
        cr_assert(strstr(pl_errmsg(), "open already") != NULL, "%s",
                  pl_errmsg());
        /* the refused open did not disturb the first engine */
        start_ok(e, "echo", "{\"x\": 2}", "second");
        cr_assert_eq(pl_run_verify(e, "first"), PL_OK);
        pl_engine_close(e);

        e = open_with(paths[i], reg, 0, 0);
        cr_assert_eq(pl_run_verify(e, "first"), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(pl_run_verify(e, "second"), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
    }
    pl_engine_close(NULL);
    pl_registry_free(reg);
}

/*
 * A forked child opens the store its parent has open, as the header says it
 * must (the child holds none of its parent's stores), runs a run and exits;
 * the parent's engine goes on working, and sees the child's run.
 */
Test(store, a_forked_child_opens_its_own_engine)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 2}", "before");
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) { /* nothing of Criterion's here: exit with a status */
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, path, reg, NULL))
            _exit(3);
        cJSON *p = cJSON_Parse("{\"n\": 3}");
        pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "child";
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, ce, &a, &ro);
        bool ok = st == PL_OK && o->status == PL_RUN_COMPLETED;
        pl_outcome_free(o);
        cJSON_Delete(p);
        pl_engine_close(ce);
        _exit(ok ? 0 : 4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child died (status %d)", status);
    cr_assert_eq(WEXITSTATUS(status), 0, "the child %s",
                 WEXITSTATUS(status) == 3 ? "could not open the store"
                                          : "could not run its run");

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "child"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, 3 * 3 + 1);
    cr_assert_eq(info->owner_pid, (int64_t)pid);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "child"), PL_OK, "%s", pl_errmsg());
    start_ok(e, "chain", "{\"n\": 2}", "after");
    cr_assert_eq(pl_run_verify(e, "before"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Write @p n pseudo-random bytes to @p path. */
static void random_file(const char *path, size_t n, uint32_t seed)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    uint32_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        fputc((int)(x >> 24), f);
    }
    cr_assert_eq(fclose(f), 0);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char *buf = malloc(1 << 20);
    cr_assert_not_null(buf);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

Test(store, a_file_that_is_not_a_store)
{
    pl_registry *reg = registry();
    static const size_t sizes[] = {1, 100, 4096, 8192, 65536};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/junk.bin", t_tmpdir());
        random_file(path, sizes[i], (uint32_t)(i + 1));
        size_t before_n;
        char *before = slurp(path, &before_n);
        pl_engine *e = (pl_engine *)reg;
        int st = pl_engine_open(&e, path, reg, NULL);
        cr_assert_eq(st, PL_ECORRUPT, "%zu random bytes gave %s (%s)", sizes[i],
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), path) != NULL, "names the file: %s",
                  pl_errmsg());
        size_t after_n;
        char *after = slurp(path, &after_n);
        cr_assert_eq(after_n, before_n, "the file was changed");
        cr_assert_eq(memcmp(before, after, before_n), 0,
                     "the file was changed");
        free(before);
        free(after);
    }
    /* a directory whose data.mdb is junk */
    const char *dir = t_tmpdir();
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    random_file(data, 16384, 99);
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, dir, reg, NULL), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(e);
    pl_registry_free(reg);
}

Test(store, an_lmdb_store_of_someone_else)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
    /* a plain value where a named database would be */
    MDB_val k = {5, "steps"}, v = {5, "hello"};
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, NULL);
    cr_assert_eq(st, PL_ECORRUPT, "%s (%s)", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "not a policyledger store") != NULL, "%s",
              pl_errmsg());
    pl_registry_free(reg);
}

Test(store, directory_store)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    pl_engine *e = open_with(dir, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 2, \"fanout\": 2}", "in-a-dir");
    cr_assert_eq(pl_run_verify(e, "in-a-dir"), PL_OK);
    pl_engine_close(e);

    char data[4200], lock[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
    cr_assert_gt(file_size(data), 0, "LMDB's data file is inside");
    cr_assert_eq(access(lock, F_OK), 0, "LMDB's lock file is inside");

    /* the raw layout is the same as a file store's */
    raw r;
    raw_open(&r, dir, true);
    uint64_t num = raw_run_num(&r, "in-a-dir");
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 0), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    pl__rec dr;
    cr_assert_eq(pl__rec_decode(&dr, rec, n), PL_OK);
    cr_assert_eq(dr.type, PL_STEP_ACTION_CALL);
    free(rec);
    raw_close(&r);

    e = open_with(dir, reg, 0, 0);
    wants w = {0};
    nest_expect(&w, "0", 2, 2);
    expect_walk(e, "in-a-dir", &w);
    expect_ledgers(e, "in-a-dir", &w, "nest");
    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, store_format_record)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "echo", "{}", "kept");
    pl_engine_close(e);

    /* the format record says 1, as a big-endian u32 */
    raw r;
    raw_open(&r, path, false);
    MDB_val k = {6, "format"}, v;
    cr_assert_eq(mdb_get(r.txn, r.meta, &k, &v), 0);
    cr_assert_eq(v.mv_size, 4);
    cr_assert_eq(memcmp(v.mv_data, "\0\0\0\1", 4), 0);
    uint8_t two[4] = {0, 0, 0, 2};
    v.mv_size = 4;
    v.mv_data = two;
    cr_assert_eq(mdb_put(r.txn, r.meta, &k, &v, 0), 0);
    raw_close(&r);

    e = (pl_engine *)reg;
    int st = pl_engine_open(&e, path, reg, NULL);
    cr_assert_eq(st, PL_EVERSION, "%s (%s)", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "format 2") != NULL, "%s", pl_errmsg());

    /* the refused open left the store as it was */
    raw_open(&r, path, false);
    cr_assert_eq(mdb_get(r.txn, r.meta, &k, &v), 0);
    cr_assert_eq(memcmp(v.mv_data, two, 4), 0);
    /* a format record of the wrong size */
    v.mv_size = 3;
    v.mv_data = "\0\0\1";
    cr_assert_eq(mdb_put(r.txn, r.meta, &k, &v, 0), 0);
    raw_close(&r);
    cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(e);

    /* no format record, but runs */
    raw_open(&r, path, false);
    cr_assert_eq(mdb_del(r.txn, r.meta, &k, NULL), 0);
    raw_close(&r);
    cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(e);

    /* put right, the store opens and the run is there */
    raw_open(&r, path, false);
    v.mv_size = 4;
    v.mv_data = "\0\0\0\1";
    cr_assert_eq(mdb_put(r.txn, r.meta, &k, &v, 0), 0);
    raw_close(&r);
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "kept"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, engine_open_argument_errors)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    pl_engine *e = (pl_engine *)reg;

    cr_assert_eq(pl_engine_open(&e, NULL, reg, &o), PL_EINVAL);
    cr_assert_null(e, "*out is NULL after a failure");
    e = (pl_engine *)reg;
    cr_assert_eq(pl_engine_open(&e, "", reg, &o), PL_EINVAL);
    cr_assert_null(e);
    e = (pl_engine *)reg;
    cr_assert_eq(pl_engine_open(&e, path, NULL, &o), PL_EINVAL);
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "registry") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_open(NULL, path, reg, &o), PL_EINVAL);

    static const unsigned versions[] = {0, PL_ENGINE_OPTIONS_VERSION + 1, 99};
    for (size_t i = 0; i < 3; i++) {
        pl_engine_options bad = PL_ENGINE_OPTIONS_INIT;
        bad.version = versions[i];
        e = (pl_engine *)reg;
        cr_assert_eq(pl_engine_open(&e, path, reg, &bad), PL_EINVAL,
                     "options version %u", versions[i]);
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), "version") != NULL, "%s", pl_errmsg());
    }
    pl_engine_options badd = PL_ENGINE_OPTIONS_INIT;
    badd.durability = (pl_durability)7;
    cr_assert_eq(pl_engine_open(&e, path, reg, &badd), PL_EINVAL);
    cr_assert_null(e);

    /* none of that created the store */
    cr_assert_neq(access(path, F_OK), 0, "a refused open created %s", path);

    /* a path whose directory does not exist is refused, not crashed on */
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no/such/dir/store.db", t_tmpdir());
    e = (pl_engine *)reg;
    int st = pl_engine_open(&e, missing, reg, &o);
    cr_assert(st == PL_EINVAL || st == PL_ESTORE, "%s", pl_status_name(st));
    cr_assert_null(e);

    /* NULL options mean the defaults */
    cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_durability(e), PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_registry(e), reg);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, damaged_run_records)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    static const char *const ids[] = {"newer", "garbage", "stateless", "short",
                                      "fine"};
    for (int i = 0; i < 5; i++)
        start_ok(e, "chain", "{\"n\": 2}", ids[i]);
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    /* "newer": its info record says format version 3 */
    MDB_val k = {5, "newer"}, v;
    cr_assert_eq(mdb_get(r.txn, r.runs, &k, &v), 0);
    uint8_t *info = malloc(v.mv_size);
    cr_assert_not_null(info);
    memcpy(info, v.mv_data, v.mv_size);
    static const uint8_t v1[] = {0xa1, 'v', 0x02};
    uint8_t *at = NULL;
    for (size_t i = 8; i + sizeof v1 <= v.mv_size && !at; i++)
        if (!memcmp(info + i, v1, sizeof v1))
            at = info + i;
    cr_assert_not_null(at, "no \"v\": 2 in the run record");
    at[2] = 0x03;
    MDB_val nv = {v.mv_size, info};
    cr_assert_eq(mdb_put(r.txn, r.runs, &k, &nv, 0), 0);
    free(info);
    /* "garbage": its state record is not msgpack */
    uint8_t skey[8];
    uint64_t num = raw_run_num(&r, "garbage");
    for (int i = 0; i < 8; i++)
        skey[i] = (uint8_t)(num >> (56 - 8 * i));
    MDB_val sk = {8, skey}, sv = {4, "\xc1\xc1\xc1\xc1"};
    cr_assert_eq(mdb_put(r.txn, r.state, &sk, &sv, 0), 0);
    /* "stateless": no state record at all */
    num = raw_run_num(&r, "stateless");
    for (int i = 0; i < 8; i++)
        skey[i] = (uint8_t)(num >> (56 - 8 * i));
    cr_assert_eq(mdb_del(r.txn, r.state, &sk, NULL), 0);
    /* "short": a runs value too short to hold a run number */
    MDB_val shk = {5, "short"}, shv = {3, "abc"};
    cr_assert_eq(mdb_put(r.txn, r.runs, &shk, &shv, 0), 0);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    static const struct {
        const char *id;
        int want;
    } cases[] = {{"newer", PL_EVERSION},
                 {"garbage", PL_ECORRUPT},
                 {"stateless", PL_ECORRUPT},
                 {"short", PL_ECORRUPT}};
    for (size_t i = 0; i < 4; i++) {
        pl_run_info *ri = (pl_run_info *)&ri;
        int st = pl_run_get(&ri, e, cases[i].id);
        cr_assert_eq(st, cases[i].want, "pl_run_get(%s) gave %s: %s",
                     cases[i].id, pl_status_name(st), pl_errmsg());
        cr_assert_null(ri);
        cr_assert(strstr(pl_errmsg(), cases[i].id) != NULL ||
                      strstr(pl_errmsg(), "#") != NULL,
                  "the message names the run: %s", pl_errmsg());
        pl_outcome *o = NULL;
        st = pl_run_continue(&o, e, cases[i].id, NULL);
        cr_assert_eq(st, cases[i].want, "pl_run_continue(%s) gave %s: %s",
                     cases[i].id, pl_status_name(st), pl_errmsg());
        cr_assert_null(o);
    }
    /* the good run is untouched */
    cr_assert_eq(pl_run_verify(e, "fine"), PL_OK, "%s", pl_errmsg());
    pl_run_info *ri;
    cr_assert_eq(pl_run_get(&ri, e, "fine"), PL_OK);
    cr_assert_eq(ri->status, PL_RUN_COMPLETED);
    pl_run_info_free(ri);
    /* a listing that meets a damaged record stops with its error */
    listed *l = calloc(1, sizeof *l);
    cr_assert_not_null(l);
    int st = pl_engine_runs(e, list_visit, l);
    cr_assert(st == PL_ECORRUPT || st == PL_EVERSION, "%s", pl_status_name(st));
    cr_assert_eq(l->n, 1, "only \"fine\" sorts before the first damaged run");
    free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, one_open_per_file_whatever_the_path)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    pl_engine *e = open_with(dir, reg, 0, 0);
    start_ok(e, "echo", "{}", "here");
    /* the same directory by another name, and its data file opened as a
     * file store: the same store */
    char alias[4200], data[4200];
    snprintf(alias, sizeof alias, "%s/.", dir);
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    const char *names[] = {alias, data};
    for (int i = 0; i < 2; i++) {
        pl_engine *again = NULL;
        int st = pl_engine_open(&again, names[i], reg, NULL);
        cr_assert_eq(st, PL_EBUSY, "opening %s again gave %s (%s)", names[i],
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(again);
    }
    cr_assert_eq(pl_run_verify(e, "here"), PL_OK);
    pl_engine_close(e);
    e = open_with(alias, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "here"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the group-commit journal ------------------------------------------- */

/* Entries of one named database of a store file, read with raw LMDB. */
static size_t raw_entries(const char *path, const char *db)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat ms;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    mdb_env_set_mapsize(env, (size_t)1 << 30);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0, "no database %s", db);
    cr_assert_eq(mdb_stat(txn, dbi, &ms), 0);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return ms.ms_entries;
}

/* One of start_twins()' runs. */
typedef struct twin {
    const char *payload;
    const char *id;
    int st;
} twin;

static void twin_run(pl_engine *e, void *user)
{
    twin *t = user;
    cJSON *p = cJSON_Parse(t->payload);
    pl_action a = {PL_ACTION_VERSION, "bulk", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = t->id;
    pl_outcome *o = NULL;
    t->st = pl_run_start(&o, e, &a, &ro);
    if (!t->st && o->status != PL_RUN_COMPLETED)
        t->st = PL_EPOLICY;
    pl_outcome_free(o);
    cJSON_Delete(p);
}

typedef struct twins {
    pl_pool *pool;
    twin run[2];
} twins;

static void twins_submit(pl_engine *e, void *user)
{
    (void)e;
    twins *t = user;
    for (int i = 0; i < 2; i++)
        if (pl_pool_submit(t->pool, twin_run, &t->run[i]))
            t->run[i].st = PL_ENOMEM;
}

/*
 * Run "bulk" @p payload as @p id and as "<id>-twin" on a group-mode engine
 * so that every batch of both goes through the journal, which takes a
 * group of two or more (a lone batch goes straight to its place).  The
 * two are tasks of one pool thread, queued by a task so that the thread
 * admits both at once; it runs each until it waits for a commit, then
 * commits their batches as one group.  Returns the first failure.
 */
static int start_twins(pl_engine *e, const char *payload, const char *id)
{
    char twin_id[64];
    snprintf(twin_id, sizeof twin_id, "%s-twin", id);
    twins t = {NULL, {{payload, id, -1}, {payload, twin_id, -1}}};
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 1;
    int st = pl_pool_new(&t.pool, e, &po);
    if (!st)
        st = pl_pool_submit(t.pool, twins_submit, &t);
    if (!st)
        st = pl_pool_wait(t.pool);
    pl_pool_free(t.pool);
    return st ? st : t.run[0].st ? t.run[0].st : t.run[1].st;
}

/*
 * Run "bulk" {"n": 20} as @p run_id and its twin (start_twins) in group
 * mode in a child that is then SIGKILLed (no clean close), so the steps,
 * 61 of each run, stay in the journal.
 */
static void leave_in_journal(const char *path, const pl_registry *reg,
                             const char *run_id)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
        if (start_twins(e, "{\"n\": 20, \"size\": 100}", run_id))
            _exit(3);
        raise(SIGKILL);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child did not finish its run (status %d)", status);
    cr_assert_gt(raw_entries(path, "journal"), 1,
                 "the steps are still in the journal");
    cr_assert_eq(raw_entries(path, "steps"), 0, "and not yet in their places");
}

/* The run leave_in_journal() made reads, verifies and replays whole. */
static void expect_whole_journaled_run(const char *path, const pl_registry *reg,
                                       const char *run_id)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, run_id), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_COMPLETED);
    cr_expect_eq(info->steps, 61, "20 calls of 3 steps and the result");
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, run_id), PL_OK, "%s", pl_errmsg());
    pl_steps *root = NULL;
    cr_assert_eq(pl_run_ledger(&root, e, run_id, "0"), PL_OK);
    cr_expect_eq(pl_steps_count(root), 41);
    pl_steps_free(root);
    int echoes = t_calls.echo;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, run_id, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    cr_expect_eq(o->calls_served, 20);
    cr_expect_eq(t_calls.echo, echoes, "nothing executed again");
    pl_outcome_free(o);
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "journal"), 0, "reading moved them");
    /* 20 calls of 2 records (the echo's step is folded into its result)
     * and the result, for each run */
    cr_expect_eq(raw_entries(path, "steps"), 2 * 41, "its and its twin's");
}

/*
 * Group commits write steps to the journal first.  A process that dies
 * (SIGKILL, no clean close) leaves them there; another process, in another
 * durability mode, reads, verifies and replays them all the same.
 */
Test(store, journaled_steps_survive_a_crash_and_read_from_any_mode)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "journaled");
    expect_whole_journaled_run(path, reg, "journaled");
    pl_registry_free(reg);
}

/* A cursor on the journal of the store at @p path, in a write transaction
 * (LMDB C API); journal_cursor_done() commits it. */
static MDB_cursor *journal_cursor(const char *path, MDB_env **env,
                                  MDB_txn **txn)
{
    MDB_dbi dbi;
    MDB_cursor *cur;
    cr_assert_eq(mdb_env_create(env), 0);
    mdb_env_set_maxdbs(*env, 8);
    mdb_env_set_mapsize(*env, (size_t)1 << 30);
    cr_assert_eq(mdb_env_open(*env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(*env, NULL, 0, txn), 0);
    cr_assert_eq(mdb_dbi_open(*txn, "journal", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(*txn, dbi, &cur), 0);
    return cur;
}

static void journal_cursor_done(MDB_env *env, MDB_txn *txn, MDB_cursor *cur)
{
    mdb_cursor_close(cur);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/*
 * Moving the journal sorts its steps by run and journal position, which is
 * key order because a run appends in key order.  A journal whose records
 * are out of order (reversed here with the LMDB C API) is still moved in
 * key order, by the slower whole-key sort.
 */
Test(store, a_journal_out_of_key_order_is_moved_in_key_order)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "reversed");

    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *cur = journal_cursor(path, &env, &txn);
    MDB_val k, v;
    /* copy the records out, then write them back in reverse order */
    size_t n = 0;
    MDB_val vals[256];
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && n < 256;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        void *copy = malloc(v.mv_size);
        cr_assert_not_null(copy);
        memcpy(copy, v.mv_data, v.mv_size);
        vals[n].mv_size = v.mv_size;
        vals[n].mv_data = copy;
        n++;
    }
    size_t i = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc && i < n;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++)
        cr_assert_eq(mdb_cursor_put(cur, &k, &vals[n - 1 - i], MDB_CURRENT), 0);
    cr_assert_eq(i, n);
    journal_cursor_done(env, txn, cur);
    for (size_t j = 0; j < n; j++)
        free(vals[j].mv_data);

    expect_whole_journaled_run(path, reg, "reversed");
    pl_registry_free(reg);
}

/* Reading run @p id fails with @p want (the journal cannot be moved), with
 * @p says in the message if given, and the journal keeps its @p journaled
 * records. */
static void journal_refused(const char *path, const pl_registry *reg,
                            const char *id, size_t journaled, int want,
                            const char *says)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    cr_assert_eq(st, want, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert(!says || strstr(pl_errmsg(), says), "%s", pl_errmsg());
    cr_assert_null(info);
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "journal"), journaled,
                 "the journal is still whole");
}

/*
 * A journaled step whose key holds another value in `steps` already (as if
 * another process had written it, or a build that did not look) cannot be
 * moved.  The move holds that run's journaled steps apart and moves all the
 * rest: the run is stopped, PL_EBUSY naming it, while its twin, journaled
 * in the same records, reads, verifies and replays whole, and a new run in
 * the same store works.
 */
Test(store, a_journaled_step_that_conflicts_stops_only_its_run)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "clash");

    raw r;
    raw_open(&r, path, false);
    uint8_t key[64];
    uint64_t num = raw_run_num(&r, "clash");
    size_t kl = step_key(key, num, NULL, 0, 0);
    static const uint8_t other[] = {0x80}; /* not the journaled record */
    raw_put_step(&r, key, kl, other, sizeof other);
    raw_close(&r);

    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "clash"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(info); /* listed as it is */
    int st = pl_run_verify(e, "clash");
    cr_assert_eq(st, PL_EBUSY, "%s: %s", pl_status_name(st), pl_errmsg());
    char num_text[32];
    snprintf(num_text, sizeof num_text, "run #%llu", (unsigned long long)num);
    cr_assert(strstr(pl_errmsg(), "'clash'") && strstr(pl_errmsg(), num_text) &&
                  strstr(pl_errmsg(), "held apart"),
              "names the run and why: %s", pl_errmsg());
    pl_outcome *o = NULL;
    st = pl_run_continue(&o, e, "clash", NULL);
    cr_assert_eq(st, PL_EBUSY, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(o);

    /* the twin, journaled in the same records, is whole */
    cr_assert_eq(pl_run_verify(e, "clash-twin"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_continue(&o, e, "clash-twin", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* and a new run goes */
    o = t_start(e, "bulk", "{\"n\": 2, \"size\": 10}", "after");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(e, "after"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "journal"), 0, "the journal was moved");
    size_t held = raw_entries(path, "held");
    cr_expect_eq(held, 41, "clash's 41 step records (61 steps, 20 folded): %zu",
                 held);
    pl_registry_free(reg);
}

/* A batch of one step, @p val, at seq @p seq of run @p run's root ledger. */
static void one_step(pl__batch *b, uint64_t run, uint32_t seq, uint8_t val)
{
    uint8_t key[64];
    size_t kl = step_key(key, run, NULL, 0, seq);
    pl__kvs_reset(&b->steps);
    cr_assert_eq(pl__kvs_add(&b->steps, key, kl, &val, 1), PL_OK);
    b->run = run;
}

static pl__store *store_open(const char *path)
{
    pl__store *s = NULL;
    pl__store_options o = {0};
    o.nosync = true;
    cr_assert_eq(pl__store_open(&s, path, &o), PL_OK, "%s", pl_errmsg());
    return s;
}

/*
 * A group commit is refused, and nothing of it journaled, when a step of
 * it could not be moved into place later: its key is in place already, or
 * another process has steps of its run in the journal (two writers on one
 * run).  The caller learns it at once, never told the step is durable.
 */
Test(store, a_journaled_step_that_could_not_be_placed_is_refused_at_once)
{
    const char *path = t_store_path();
    pl__store *s = store_open(path);
    pl__batch a = {0}, b = {0};
    pl__batch *one[] = {&a}, *two[] = {&a, &b};
    one_step(&a, 7, 0, 1);
    cr_assert_eq(pl__store_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    /* run 7's step 0 again, another value, with run 8's first step */
    one_step(&a, 7, 0, 2);
    one_step(&b, 8, 0, 3);
    int st = pl__store_commit(s, two, 2, true);
    cr_assert_eq(st, PL_EBUSY, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "run #7") && strstr(pl_errmsg(), path), "%s",
              pl_errmsg());
    /* run 8 alone goes to the journal; this process is its writer */
    pl__batch *eight[] = {&b};
    cr_assert_eq(pl__store_commit(s, eight, 1, true), PL_OK, "%s", pl_errmsg());
    one_step(&b, 8, 1, 4);
    cr_assert_eq(pl__store_commit(s, eight, 1, true), PL_OK, "%s", pl_errmsg());
    pl__store_close(s);
    cr_assert_eq(raw_entries(path, "journal"), 2, "run 8's two commits");
    cr_assert_eq(raw_entries(path, "writers"), 1);

    /* another process is run 8's writer now (its record, by hand) */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "writers", 0, &dbi), 0);
    uint8_t rk[8] = {0, 0, 0, 0, 0, 0, 0, 8}, other[16] = {0xff};
    MDB_val k = {8, rk}, v = {16, other};
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    s = store_open(path);
    one_step(&b, 8, 2, 5);
    for (int journal = 0; journal < 2; journal++) {
        st = pl__store_commit(s, eight, 1, journal);
        cr_assert_eq(st, PL_EBUSY, "journal %d: %s: %s", journal,
                     pl_status_name(st), pl_errmsg());
        cr_assert(strstr(pl_errmsg(), "run #8") &&
                      strstr(pl_errmsg(), "another process"),
                  "%s", pl_errmsg());
    }
    /* another run is not concerned */
    one_step(&a, 9, 0, 6);
    cr_assert_eq(pl__store_commit(s, one, 1, true), PL_OK, "%s", pl_errmsg());
    /* once the journal is moved, the run's next writer may write */
    cr_assert_eq(pl__store_settle(s), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__store_commit(s, eight, 1, false), PL_OK, "%s",
                 pl_errmsg());
    pl__store_close(s);
    cr_assert_eq(raw_entries(path, "journal"), 0);
    cr_assert_eq(raw_entries(path, "steps"), 5, "7:0, 8:0-2, 9:0");
    pl__batch_free(&a);
    pl__batch_free(&b);
}

/* A journal record with a byte after its last step is malformed: reading
 * fails with PL_ECORRUPT, and the journal is kept as it is. */
Test(store, a_journal_record_with_stray_bytes_is_corrupt_and_kept)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    leave_in_journal(path, reg, "stray");
    size_t journaled = raw_entries(path, "journal");

    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *cur = journal_cursor(path, &env, &txn);
    MDB_val k, v;
    cr_assert_eq(mdb_cursor_get(cur, &k, &v, MDB_LAST), 0);
    uint8_t *longer = malloc(v.mv_size + 1);
    cr_assert_not_null(longer);
    memcpy(longer, v.mv_data, v.mv_size);
    longer[v.mv_size] = 0;
    MDB_val nv = {v.mv_size + 1, longer};
    cr_assert_eq(mdb_cursor_put(cur, &k, &nv, MDB_CURRENT), 0);
    journal_cursor_done(env, txn, cur);
    free(longer);

    journal_refused(path, reg, "stray", journaled, PL_ECORRUPT, "journal");
    pl_registry_free(reg);
}

/* A journal that fills is moved to its place in the middle of a run. */
Test(store, a_full_journal_is_moved_during_the_run)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_GROUP);
    /* twice 60 calls of ~50 KB echoed: ~18 MB through the journal */
    cr_assert_eq(start_twins(e, "{\"n\": 60, \"size\": 50000}", "big"), PL_OK,
                 "%s", pl_errmsg());
    pl_engine_close(e);
    size_t moved = raw_entries(path, "steps");
    cr_expect_gt(moved, 0, "the journal was moved while the runs went on");
    cr_expect_lt(moved, 2 * 121, "and not all of it (the rest waits)");

    e = t_engine(path, reg, PL_DURABILITY_GROUP);
    cr_assert_eq(pl_run_verify(e, "big"), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "big"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->steps, 181);
    pl_run_info_free(info);
    pl_engine_close(e);
    cr_expect_eq(raw_entries(path, "steps"), 2 * 121,
                 "181 steps in 121 "
                 "records: each echo's one step is folded into its result");
    pl_registry_free(reg);
}
