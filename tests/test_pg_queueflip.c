/*
 * test_pg_queueflip.c -- hostile bytes in the queue: what a worker does on
 * damaged leases, timers, inboxes, parked rows and state records, on
 * PostgreSQL and on LMDB.  The store holds queued runs (with and without a
 * concurrency key, with priorities), a run parked on a timer already due
 * ("timer"), a run waiting for an event that was delivered ("inbox"), both
 * with a concurrency key (their parked rows), a run whose worker died
 * between two calls ("crashed": its lease ran out, two of its three calls
 * done) and a completed run ("done").  Every call of the runs is of
 * "eff", which counts its effect: a line in a file of the test's.
 *
 * On PostgreSQL the columns flipped are found, not listed: every bytea and
 * bigint column of the tables below, as the server's catalogue gives them
 * (support_pgflip.h); on LMDB every key and value of the databases of
 * leases, timers, inboxes, state and flow, at the bytes LMDB points to in
 * its data file (support_bitflip.h).  Every STRIDE-th bit (LMDB_STRIDE-th)
 * is flipped in a copy of the store, made the store as built again before
 * each flip, and a worker in a forked child drains the copy:
 * pl_worker_run() with a lease renewed every second, stopped after IDLE_MS
 * without an event (or T_FLIP_BOUND_MS in all: a worker still busy then
 * fails the test, as does a child that does not end; support_flip.h).  Each flip must: never execute
 * a call the ledger has a result for (no effect counted twice), never
 * complete a run with a result other than the undamaged store's drain
 * gives, never fail a run quietly (its error PL_ECORRUPT or PL_EVERSION),
 * never crash nor hang.  A run may wait, fail loudly or be left as it
 * was.  A flip's drain is in the file's own process tree: a test of
 * LMDB here, beside the PostgreSQL one, rather than a file of its own.
 * test_pg_stepflip.c flips the ledgers, test_pg_timeflip.c and
 * test_bitflip.c the records of time, read and continued, not drained.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"
#include "support_bitflip.h"
#include "support_flip.h"
#include "support_pgflip.h"

/* A flip opens the store afresh and makes every call on it: ~0.1 s alone,
 * several times that on a loaded host.  The bound is the test's guard
 * against a hang, within ctest's 600 s, not a measure of its speed. */
TestSuite(pg_queueflip, .timeout = 540);

/* every STRIDE-th bit; under the sanitizers, where each flip costs more,
 * fewer (still a fixed stride, prime to 8) */
#define STRIDE (T_SANITIZED ? 97 : 47)
#define LMDB_STRIDE (T_SANITIZED ? 131 : 67)
/* a drain stops after IDLE_MS without an event (the undamaged store's,
 * SETTLE_MS: all its runs must end) */
#define IDLE_MS 60
#define SETTLE_MS 1000

static const char *const g_runs[] = {"q-plain", "q-first", "q-key-a", "q-key-b",
                                     "timer",   "inbox",   "crashed", "done"};
#define N_RUNS 8

/* The tables flipped, where the store has them. */
static const char *const g_tables[] = {"leases", "timers", "inbox", "parked",
                                       "state",  "units",  "rates"};

/* ---- the policies ------------------------------------------------------ */

static char g_effects[4200]; /* the file eff counts its effects in */
static bool g_crash;         /* crasher dies before its third call */

/* Call eff with k = "<run's id>-<n>". */
static int effect(pl_ctx *ctx, const pl_action *a, int n, cJSON **got)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a->payload, "id");
    char k[96];
    snprintf(k, sizeof k, "%s-%d", cJSON_IsString(id) ? id->valuestring : "?",
             n);
    return pl_ctx_invokef(got, ctx, "eff", "{s:s}", "k", k);
}

/* job: two effects; returns both. */
static int job(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int st = effect(ctx, a, 1, &x);
    if (!st)
        st = effect(ctx, a, 2, &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "x", x, "y", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* napper: an effect, a sleep of NAP_MS, an effect. */
#define NAP_MS 1500
static int napper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *y = NULL;
    int st = effect(ctx, a, 1, NULL);
    if (!st)
        st = pl_ctx_sleep(ctx, NAP_MS);
    if (!st)
        st = effect(ctx, a, 2, &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "y", y);
    cJSON_Delete(y);
    return st;
}

/* waiter: an effect, the event "go", an effect; returns the event. */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *p = NULL;
    int st = effect(ctx, a, 1, NULL);
    if (!st)
        st = pl_ctx_wait_event(&p, ctx, "go", 86400000);
    if (!st)
        st = effect(ctx, a, 2, NULL);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "got", p);
    cJSON_Delete(p);
    return st;
}

/* crasher: two effects, then (g_crash) its process dies; a third. */
static int crasher(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *z = NULL;
    int st = effect(ctx, a, 1, NULL);
    if (!st)
        st = effect(ctx, a, 2, NULL);
    if (!st && g_crash)
        _exit(0);
    if (!st)
        st = effect(ctx, a, 3, &z);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "z", z);
    cJSON_Delete(z);
    return st;
}

static pl_registry *q_registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"eff", t_flip_eff},
                {"job", job},
                {"napper", napper},
                {"waiter", waiter},
                {"crasher", crasher}};
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++)
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn,
                                        i ? NULL : g_effects),
                     PL_OK, "%s", pl_errmsg());
    return reg;
}

/* ---- the store --------------------------------------------------------- */

static pl_engine *engine(const char *path, const pl_registry *reg,
                         unsigned lease_ms)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_SYNC;
    o.lease_ms = lease_ms;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

static pl_outcome *start(pl_engine *e, const char *policy, const char *id)
{
    char json[128];
    snprintf(json, sizeof json, "{\"id\": \"%s\"}", id);
    return t_start(e, policy, json, id);
}

static int run_status(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
    int st = info->status;
    pl_run_info_free(info);
    return st;
}

static void build(const char *path, const pl_registry *reg)
{
    /* two runs with keys, drained until they wait (their parked rows):
     * one for a timer, due once the store is built, one for an event */
    pl_engine *e = engine(path, reg, 0);
    t_flip_submit(e, "timer", "napper", 0, "slot");
    t_flip_submit(e, "inbox", "waiter", 0, "slot");
    /* drained until both wait (a drain that stopped first goes on), the
     * timer not yet due */
    for (int i = 0; i < 5 && (run_status(e, "timer") != PL_RUN_WAITING ||
                              run_status(e, "inbox") != PL_RUN_WAITING);
         i++)
        cr_assert_eq(t_flip_drain(path, reg, IDLE_MS * 2, 1), 0);
    cr_assert_eq(run_status(e, "timer"), PL_RUN_WAITING);
    cr_assert_eq(run_status(e, "inbox"), PL_RUN_WAITING);
    t_flip_submit(e, "q-plain", "job", 0, NULL);
    t_flip_submit(e, "q-first", "job", 5, NULL);
    t_flip_submit(e, "q-key-a", "job", 0, "cust");
    t_flip_submit(e, "q-key-b", "job", -2, "cust");
    pl_outcome *o = start(e, "job", "done");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    pl_engine_close(e);
    /* the event, delivered where waiter is not registered: in the inbox */
    pl_registry *bare = NULL;
    cr_assert_eq(pl_registry_new(&bare), PL_OK);
    e = engine(path, bare, 0);
    cJSON *ev = t_json("{\"x\": 1}");
    cr_assert_eq(pl_run_signal(NULL, e, "inbox", "go", ev), PL_OK, "%s",
                 pl_errmsg());
    cJSON_Delete(ev);
    pl_engine_close(e);
    pl_registry_free(bare);
    /* a worker that dies between two calls, its lease short */
    fflush(NULL);
    pid_t kid = fork();
    cr_assert_neq(kid, -1);
    if (kid == 0) {
        g_crash = true;
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_SYNC;
        eo.lease_ms = 100;
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, path, reg, &eo))
            _exit(2);
        cJSON *p = t_json("{\"id\": \"crashed\"}");
        pl_action a = {PL_ACTION_VERSION, "crasher", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "crashed";
        pl_outcome *out = NULL;
        pl_run_start(&out, ce, &a, &ro);
        _exit(3); /* crasher did not die */
    }
    int ws;
    cr_assert_eq(waitpid(kid, &ws, 0), kid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the crash: status %d",
              ws);
    usleep((NAP_MS + 100) * 1000); /* its lease runs out, the timer due */
}

/* ---- what a drain leaves ----------------------------------------------- */

typedef struct after {
    int status[N_RUNS]; /* -1: not read (reported) */
    int error[N_RUNS];  /* failed: its pl_status */
    uint64_t result[N_RUNS];
    char reason[N_RUNS][160];
} after;

/* The effects counted in the file: NULL, or a key counted twice. */
static char *twice(void)
{
    static char dup[128];
    FILE *f = fopen(g_effects, "r");
    cr_assert_not_null(f);
    char seen[64][96];
    size_t n = 0;
    char line[96];
    char *bad = NULL;
    while (!bad && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        for (size_t i = 0; i < n && !bad; i++)
            if (strcmp(seen[i], line) == 0) {
                snprintf(dup, sizeof dup, "%s", line);
                bad = dup;
            }
        cr_assert_lt(n, 64);
        snprintf(seen[n++], sizeof seen[0], "%s", line);
    }
    fclose(f);
    return bad;
}

/* Each run's status and, completed, its result: read in this process. */
static after read_runs(const char *path, const pl_registry *reg)
{
    after a;
    memset(&a, 0, sizeof a);
    for (size_t i = 0; i < N_RUNS; i++) {
        a.status[i] = -1;
        a.result[i] = 14695981039346656037ull;
    }
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    pl_engine *e = NULL;
    if (pl_engine_open(&e, path, reg, &o))
        return a;
    for (size_t i = 0; i < N_RUNS; i++) {
        pl_run_info *info = NULL;
        if (pl_run_get(&info, e, g_runs[i]) == PL_OK) {
            a.status[i] = info->status;
            a.error[i] = info->error;
            snprintf(a.reason[i], sizeof a.reason[i], "%s",
                     info->reason ? info->reason : "");
        }
        pl_run_info_free(info);
        if (a.status[i] != PL_RUN_COMPLETED)
            continue;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.check = true;
        pl_outcome *out = NULL;
        if (pl_run_continue(&out, e, g_runs[i], &ro) == PL_OK && out &&
            out->status == PL_RUN_COMPLETED)
            t_mix_json(&a.result[i], pl_outcome_result(out));
        else
            a.status[i] = -1; /* its result not read: reported */
        pl_outcome_free(out);
    }
    pl_engine_close(e);
    return a;
}

/* ---- the sweep --------------------------------------------------------- */

typedef struct sweep {
    const char *base, *copy;
    const pl_registry *reg;
    char *effects; /* the effects file as built */
    size_t effects_len;
    after want;
    size_t flips, refused, corrupt, changed, loud, left;
    size_t hashes, hashed; /* hashes flipped once, the stride's flips they
                              stand for (next_flip()) */
} sweep;

static void effects_reset(const sweep *s)
{
    t_flip_put(g_effects, s->effects, s->effects_len);
}

/* The copy drained: what it must hold to (@p what: the flip). */
static void drain_and_hold(sweep *s, const char *what)
{
    effects_reset(s);
    int x = t_flip_drain(s->copy, s->reg, IDLE_MS, 1);
    cr_assert(x == T_DRAIN_OK || x == T_DRAIN_REFUSED || x == T_DRAIN_RUN,
              "%s: the drain ended with %d%s", what, x,
              x == T_DRAIN_BUSY ? " (still busy after its bound)" : "");
    s->corrupt += x == T_DRAIN_REFUSED;
    const char *dup = twice();
    cr_assert(!dup, "%s: the call %s executed twice", what, dup);
    after got = read_runs(s->copy, s->reg);
    for (size_t i = 0; i < N_RUNS; i++) {
        if (got.status[i] == PL_RUN_FAILED)
            cr_assert(got.error[i] == PL_ECORRUPT ||
                          got.error[i] == PL_EVERSION,
                      "%s: run %s failed quietly (%d: %s)", what, g_runs[i],
                      got.error[i], got.reason[i]);
        if (got.status[i] != PL_RUN_COMPLETED)
            continue;
        cr_assert_eq(got.result[i], s->want.result[i],
                     "%s: run %s completed with another result", what,
                     g_runs[i]);
    }
    bool loud = false, left = false;
    for (size_t i = 0; i < N_RUNS; i++) {
        loud |= got.status[i] == -1 || got.status[i] == PL_RUN_FAILED;
        left |= got.status[i] != -1 && got.status[i] != PL_RUN_COMPLETED &&
                got.status[i] != PL_RUN_FAILED;
    }
    s->changed += memcmp(&got, &s->want, sizeof got) != 0;
    s->loud += loud;
    s->left += left;
}

/* ---- a run state's hashes ---------------------------------------------- */

/* The 32-byte hashes of the run state @p v (@p len bytes; runrec.c, RUN
 * STATE and CHECKSUM): its "head", the hash of its root ledger's last
 * step, and its "sum", the checksum of every byte before it: their
 * offsets into @p at, in order; how many.  A sweep flips each once, in
 * its first byte, in place of the stride's bits in it (next_flip()): a
 * hash is never interpreted, only compared whole with the one computed
 * (the sum as the state is read, which covers the head too), so one bit
 * of it reaches what all 256 do.  They stand for 60 of the states' 237
 * flips on PostgreSQL, 44 on LMDB. */
static size_t state_hashes(const uint8_t *v, size_t len, size_t at[2])
{
    static const char *const keys[] = {"\xa4head\xc4\x20", "\xa3sum\xc4\x20"};
    size_t n = 0;
    for (size_t i = 0; i < 2; i++) {
        size_t kl = strlen(keys[i]);
        const uint8_t *p = memmem(v, len, keys[i], kl);
        if (p && (size_t)(p - v) + kl + 32 <= len)
            at[n++] = (size_t)(p - v) + kl;
    }
    if (n == 2 && at[0] > at[1]) {
        size_t x = at[0];
        at[0] = at[1];
        at[1] = x;
    }
    return n;
}

/* The next bit a sweep of a value of @p len bytes flips, into *@p at:
 * every @p stride-th from *@p bit on, but those in the hashes @p hash
 * (@p n_hash, in order, 32 bytes each: state_hashes()), each flipped once
 * instead, at bit @p first % 8 of its first byte (*@p h of them so far;
 * *@p skipped counts the stride's bits they stand for).  False at the
 * end. */
static bool next_flip(size_t len, size_t stride, const size_t *hash,
                      size_t n_hash, size_t first, size_t *bit, size_t *h,
                      size_t *at, size_t *skipped)
{
    for (;;) {
        if (*h < n_hash && (*bit >= len * 8 || *bit >= hash[*h] * 8)) {
            *at = hash[(*h)++] * 8 + first % 8;
            return true;
        }
        if (*bit >= len * 8)
            return false;
        *at = *bit;
        *bit += stride;
        bool in = false;
        for (size_t i = 0; i < n_hash; i++)
            in |= *at >= hash[i] * 8 && *at < (hash[i] + 32) * 8;
        if (!in)
            return true;
        ++*skipped;
    }
}

static void flip_column(PGconn *c, sweep *s, const t_pg_table *t,
                        PGresult *rows, int row, int col, size_t *values)
{
    if (PQgetisnull(rows, row, col))
        return;
    size_t len = (size_t)PQgetlength(rows, row, col);
    const uint8_t *orig = (const uint8_t *)PQgetvalue(rows, row, col);
    const char *keyv[T_PG_COLS_MAX];
    int keylen[T_PG_COLS_MAX];
    for (int i = 0; i < t->n_key; i++) {
        keyv[i] = PQgetvalue(rows, row, t->key[i]);
        keylen[i] = PQgetlength(rows, row, t->key[i]);
    }
    uint8_t *buf = malloc(len ? len : 1);
    cr_assert_not_null(buf);
    size_t hash[2], n_hash = 0;
    if (strcmp(t->name, "state") == 0)
        n_hash = state_hashes(orig, len, hash);
    s->hashes += n_hash;
    size_t first = (*values)++ % STRIDE, next = first, h = 0, bit;
    while (next_flip(len, STRIDE, hash, n_hash, first, &next, &h, &bit,
                     &s->hashed)) {
        t_pg_refill(s->copy, s->base); /* the store as built, again */
        memcpy(buf, orig, len);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        if (!t_pg_set_col(c, t_pg_schema(s->copy), t, col, buf, len, keyv,
                          keylen)) {
            s->refused++;
            continue;
        }
        char what[256];
        snprintf(what, sizeof what, "%s.%s of row %d, bit %zu of %zu", t->name,
                 t->col[col], row, bit, len * 8);
        drain_and_hold(s, what);
        s->flips++;
    }
    free(buf);
}

/* The store on @p kind built at @p base, copied to @p copy and drained
 * there undamaged: what each flip's drain is held to. */
static void setup(sweep *s, const char *kind, char *base, char *copy,
                  size_t cap)
{
    setenv("PL_TEST_STORE", kind, 1);
    snprintf(g_effects, sizeof g_effects, "%s/effects", t_tmpdir());
    pl_registry *reg = q_registry();
    t_store_in(base, cap, t_tmpdir(), "base.db");
    build(base, reg);
    t_store_in(copy, cap, t_tmpdir(), "copy.db");
    t_store_copy(copy, base);
    *s = (sweep){.base = base, .copy = copy, .reg = reg};
    s->effects = t_flip_slurp(g_effects, &s->effects_len);

    /* the store undamaged: every run completes, each call once, the
     * crashed run's first two calls served from its ledger */
    effects_reset(s);
    cr_assert_eq(t_flip_drain(copy, reg, SETTLE_MS, 1), T_DRAIN_OK);
    cr_assert_null(twice(), "the undamaged drain ran a call twice");
    s->want = read_runs(copy, reg);
    for (size_t i = 0; i < N_RUNS; i++)
        cr_assert_eq(s->want.status[i], PL_RUN_COMPLETED,
                     "run %s: status %d after the undamaged drain", g_runs[i],
                     s->want.status[i]);
    size_t all_len;
    char *all = t_flip_slurp(g_effects, &all_len);
    cr_assert(memmem(all, all_len, "crashed-3\n", 10), "crashed-3 not run");
    cr_assert(memmem(s->effects, s->effects_len, "crashed-2\n", 10));
    free(all);
}

static void summary(const sweep *s, const char *kind, int stride,
                    size_t records)
{
    fprintf(stderr,
            "queueflip on %s: %zu flips (every %d-th bit) in %zu records: "
            "%zu changed what the runs end as (%zu a run failed or unread, "
            "%zu a run left waiting or queued), %zu refused at the open, "
            "%zu refused by the table; %zu hashes flipped once each, for "
            "%zu flips of the stride\n",
            kind, s->flips, stride, records, s->changed, s->loud, s->left,
            s->corrupt, s->refused, s->hashes, s->hashed);
    cr_assert_gt(s->flips, 0);
    cr_assert_gt(s->changed, 0, "no flip changed anything");
    free(s->effects);
    pl_registry_free((pl_registry *)s->reg);
}

Test(pg_queueflip, every_queue_column)
{
    char base[4200], copy[4200];
    sweep s;
    setup(&s, "postgresql", base, copy, sizeof base);

    PGconn *c = t_pg_admin();
    const char *schema = t_pg_schema(base);
    size_t values = 0, rows_seen = 0;
    for (size_t i = 0; i < sizeof g_tables / sizeof *g_tables; i++) {
        t_pg_table t;
        if (!t_pg_find_table(c, schema, g_tables[i], &t))
            continue;
        PGresult *rows = t_pg_rows_of(c, schema, &t);
        size_t was = s.flips;
        for (int row = 0; row < PQntuples(rows); row++, rows_seen++)
            for (int k = 0; k < t.n_flip; k++)
                flip_column(c, &s, &t, rows, row, t.flip[k], &values);
        fprintf(stderr, "pg_queueflip: %s, %d rows: %zu flips\n", t.name,
                PQntuples(rows), s.flips - was);
        PQclear(rows);
    }
    char q[512];
    snprintf(q, sizeof q, "DROP SCHEMA \"%s\" CASCADE", t_pg_schema(copy));
    PQclear(PQexec(c, q));
    PQfinish(c);
    summary(&s, "PostgreSQL", STRIDE, rows_seen);
}

/* On LMDB: every STRIDE-th bit of every key and value of the queue's,
 * time's, state's and flow's databases, flipped in the data file at the
 * bytes LMDB points to (support_bitflip.c), then drained as above. */
Test(pg_queueflip, every_queue_record_on_lmdb)
{
    char base[4200], copy[4200];
    sweep s;
    setup(&s, "lmdb", base, copy, sizeof base);
    static const char *const dbs[] = {"leases", "timers", "due",
                                      "inbox",  "state",  "flow"};
    targets keys = {0}, vals = {0};
    find_targets_in(base, dbs, sizeof dbs / sizeof *dbs, &keys, &vals, NULL, 0);
    size_t len;
    uint8_t *data = read_whole(base, &len);
    char lock[4300];
    snprintf(lock, sizeof lock, "%s-lock", copy);
    size_t values = 0;
    for (int pass = 0; pass < 2; pass++) {
        const targets *ts = pass ? &vals : &keys;
        for (size_t i = 0; i < ts->n; i++) {
            const target *t = &ts->v[i];
            size_t hash[2], n_hash = 0;
            if (pass && strcmp(t->db, "state") == 0)
                n_hash = state_hashes(data + t->off, t->len, hash);
            s.hashes += n_hash;
            size_t first = values++ % LMDB_STRIDE, next = first, h = 0, bit;
            while (next_flip(t->len, LMDB_STRIDE, hash, n_hash, first, &next,
                             &h, &bit, &s.hashed)) {
                data[t->off + bit / 8] ^= (uint8_t)(1u << (bit % 8));
                FILE *f = fopen(copy, "w");
                cr_assert_not_null(f);
                cr_assert_eq(fwrite(data, 1, len, f), len);
                cr_assert_eq(fclose(f), 0);
                data[t->off + bit / 8] ^= (uint8_t)(1u << (bit % 8));
                unlink(lock);
                char what[256];
                snprintf(what, sizeof what, "the %s of %s %s, bit %zu of %zu",
                         pass ? "value" : "key", t->db, t->key, bit,
                         t->len * 8);
                drain_and_hold(&s, what);
                s.flips++;
            }
        }
    }
    free(data);
    summary(&s, "LMDB", LMDB_STRIDE, keys.n);
    free(keys.v);
    free(vals.v);
}
