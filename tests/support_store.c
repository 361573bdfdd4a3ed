/*
 * The LMDB store tests' shared policies, expected ledgers and raw LMDB
 * access.
 */
#include "support_store.h"

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

/* "nap" {"ms": n}: sleeps n ms (a long one parks the run), then returns. */
static int nap(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)out;
    (void)user;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    return pl_ctx_sleep(ctx, cJSON_IsNumber(ms) ? (int64_t)ms->valuedouble : 0);
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    static const struct {
        const char *name;
        pl_policy_fn fn;
        const char *code;
    } defs[] = {
        {"nest", nest, "nest-v1"},    {"bulk", bulk, NULL},
        {"self_get", self_get, NULL}, {"two_then_fail", two_then_fail, NULL},
        {"say", say, NULL},           {"say_twice", say_twice, NULL},
        {"ask", ask, NULL},           {"nap", nap, NULL}};
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
pl_engine *open_sized(const char *path, const pl_registry *reg, pl_durability d,
                      size_t map_size, size_t map_size_max)
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

pl_engine *open_with(const char *path, const pl_registry *reg, size_t map_size,
                     size_t map_size_max)
{
    return open_sized(path, reg, PL_DURABILITY_PROCESS, map_size, map_size_max);
}

void start_ok(pl_engine *e, const char *policy, const char *payload,
              const char *id)
{
    pl_outcome *o = t_start(e, policy, payload, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run %s: %s", id,
                 o->reason ? o->reason : "");
    pl_outcome_free(o);
}

void want_add(wants *w, const char *path, uint32_t seq, pl_step_type type)
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
void nest_expect(wants *w, const char *path, int depth, int fanout)
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

int collect(const pl_step *s, void *user)
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

size_t walk_count(pl_engine *e, const char *id)
{
    seen sn = {0};
    int st = pl_run_walk(e, id, collect, &sn);
    cr_assert_eq(st, PL_OK, "walk %s: %s", id, pl_errmsg());
    size_t n = sn.got.n;
    free(sn.got.v);
    return n;
}

void expect_walk(pl_engine *e, const char *id, const wants *w)
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
void expect_ledgers(pl_engine *e, const char *id, const wants *w,
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

void raw_open(raw *r, const char *path, bool dir)
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

void raw_close(raw *r)
{
    int rc = mdb_txn_commit(r->txn);
    cr_assert_eq(rc, 0, "commit: %s", mdb_strerror(rc));
    mdb_env_close(r->env);
}

void be32(uint8_t *p, uint32_t v)
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
uint64_t raw_run_num(raw *r, const char *id)
{
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = mdb_get(r->txn, r->runs, &k, &v);
    cr_assert_eq(rc, 0, "run %s: %s", id, mdb_strerror(rc));
    cr_assert_geq(v.mv_size, 8);
    return get_be64(v.mv_data);
}

/* A step key as the layout table says: the run number (u64), each path
 * component (u32), the seq (u32), all big-endian. */
size_t step_key(uint8_t *out, uint64_t num, const uint32_t *comps,
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
uint8_t *raw_get_step(raw *r, const uint8_t *key, size_t klen, size_t *len)
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

void raw_put_step(raw *r, const uint8_t *key, size_t klen, const uint8_t *val,
                  size_t vlen)
{
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    int rc = mdb_put(r->txn, r->steps, &k, &v, 0);
    cr_assert_eq(rc, 0, "put: %s", mdb_strerror(rc));
}

/* Where a record's payload starts: after the 7-field header. */
size_t payload_offset(const uint8_t *rec, size_t len)
{
    pl__rec r;
    cr_assert_eq(pl__rec_decode(&r, rec, len), PL_OK, "%s", pl_errmsg());
    return (size_t)(r.payload - rec);
}

int list_visit(const pl_run_info *info, void *user)
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
uint64_t chain_then_raw(const char *path, pl_registry *reg, const char *id,
                        raw *r)
{
    return run_then_raw(path, reg, "chain", "{\"n\": 5}", id, r);
}

/* The bystander run, untouched, still verifies and replays. */
void bystander_fine(pl_engine *e)
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
uint64_t nest_then_raw(const char *path, pl_registry *reg, const char *id,
                       raw *r)
{
    return run_then_raw(path, reg, "nest", "{\"depth\": 1, \"fanout\": 3}", id,
                        r);
}

/* Whether the store holds a step record at @p key. */
bool raw_has_step(raw *r, const uint8_t *key, size_t klen)
{
    MDB_val k = {klen, (void *)key}, v;
    int rc = mdb_get(r->txn, r->steps, &k, &v);
    cr_assert(rc == 0 || rc == MDB_NOTFOUND, "%s", mdb_strerror(rc));
    return rc == 0;
}

off_t file_size(const char *path)
{
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "stat %s: %s", path, strerror(errno));
    return sb.st_size;
}
