/*
 * test_pg_stepflip.c -- hostile bytes in the PostgreSQL store's ledgers:
 * the steps (their keys included), the runs, the leases and the meta
 * records.  The store holds a completed run with nested calls (a callee
 * that makes calls of its own) and a call that failed after its retries
 * ("done"), a run suspended mid-way ("waiting"), a run created after
 * them ("tail"), one queued with a priority ("queued", its lease row),
 * and one whose 70,000-byte string is stored once and referred to by its
 * later steps ("big": shared values, share.c): adjacent run numbers, so a
 * step key whose run number changes by one lands in a neighbour's range.
 *
 * The columns flipped are found, not listed: every bytea and bigint column
 * of every row of the tables below, as the server's catalogue gives them
 * (a column added later is flipped too), each row found by its primary
 * key.  Every STRIDE-th bit of each value (a fixed stride, from bit
 * v % STRIDE of the v-th value: the same bits every time; of a value over
 * LONG_VALUE bytes, in its first and last WINDOW bytes; a step record's
 * hashes once each, flip_column()) is flipped in a
 * copy of the store (a schema of its own), and the engine then lists the
 * runs and, for each, reads its record, walks every ledger, reads its root
 * ledger, verifies it and continues it in check mode; every
 * LEDGER_DUMP_EVERY-th flip, `ledger-dump --verify` runs on the copy as a
 * process.  Each flip must be reported (a call returns PL_ECORRUPT or
 * PL_EVERSION) or change nothing the calls give back, run by run: the
 * calls on a run whose answers changed must report it themselves (a step
 * moved into its range, not only the run that lost it; a run its id no
 * longer finds is the list's to report); a flip of a step's
 * key (a step its run lost), of the format or of the identity must be
 * reported; ledger-dump exits 0, 2 or 3, and not 0 once pl_run_verify()
 * reported.  A flip the table refuses (a key made equal to another's)
 * changes nothing and is counted apart.  The row is then put back, and
 * the copy must hold what the store as built holds: no call wrote to the
 * damaged store.  Then every step's key is moved on purpose: into each
 * neighbour's range, into a gap, past its ledger's end, before its run's
 * first step, and to keys of other lengths; each must be reported, and
 * ledger-dump --verify (every MOVE_DUMP_EVERY-th) must exit 2 or 3.
 * test_pg_timeflip.c flips the records of time; test_bitflip.c every bit
 * of an LMDB store.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"
#include "support_pgflip.h"

/* A flip opens the store afresh and makes every call on it: ~0.1 s alone,
 * several times that on a loaded host.  The bound is the test's guard
 * against a hang, within ctest's 600 s, not a measure of its speed. */
TestSuite(pg_stepflip, .timeout = 540);

/* every STRIDE-th bit; under the sanitizers, where each flip costs more,
 * fewer (still a fixed stride, prime to 8) */
#define STRIDE (T_SANITIZED ? 53 : 23)
/* ledger-dump --verify runs after every LEDGER_DUMP_EVERY-th flip, and
 * every MOVE_DUMP_EVERY-th key moved */
#define LEDGER_DUMP_EVERY 16
#define MOVE_DUMP_EVERY 4

static const char *const g_runs[] = {"done", "waiting", "tail", "queued",
                                     "big"};
#define N_RUNS 5
/* A value longer than this is flipped in its first and last WINDOW bytes
 * alone (its header, and the tail of a long string). */
#define LONG_VALUE 4096
#define WINDOW 64

/* ---- the policies ------------------------------------------------------ */

/* flaky: fails every attempt with an error its caller's retry retries. */
static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER, "down");
}

static int no_sleep(int64_t ms, void *user)
{
    (void)ms;
    (void)user;
    return 0;
}

/* outer: chain (a callee that calls add twice), then flaky under a retry
 * of three attempts; returns both. */
static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    static pl_retry_options ro = PL_RETRY_OPTIONS_INIT;
    ro.sleep = no_sleep;
    pl_decorator retry = PL_DECORATOR_INIT;
    int st = pl_decorator_retry(&retry, &ro);
    cJSON *x = NULL;
    if (!st)
        st = pl_ctx_invokef(&x, ctx, "chain", "{s:i}", "n", 2);
    pl_step *r = NULL;
    if (!st) {
        cJSON *p = t_json("{\"q\": 1}");
        pl_action call = {PL_ACTION_VERSION, "flaky", p, NULL, 0, NULL};
        st = pl_ctx_call(&r, ctx, &call, &retry, 1);
        cJSON_Delete(p);
        if (st == PL_ERESULT)
            st = PL_OK;
    }
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "x", x, "failed",
                                  pl_step_payload(r));
    pl_step_free(r);
    cJSON_Delete(x);
    return st;
}

/* ask: echo, then the human "approve": suspends. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *y = NULL;
    int st = pl_ctx_invokef(NULL, ctx, "echo", "{s:i}", "q", 1);
    if (!st)
        st = pl_ctx_invokef(&y, ctx, "approve", "{s:b}", "ok?", 1);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "answer", y);
    cJSON_Delete(y);
    return st;
}

/* big: echoes a string of 70,000 bytes and returns it: its call's result
 * and its own are stored as shared values, referring to the call's. */
static int big(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    char *text = malloc(70001);
    if (!text)
        return PL_ENOMEM;
    for (size_t i = 0; i < 70000; i++)
        text[i] = (char)('a' + i % 26);
    text[70000] = '\0';
    cJSON *x = NULL;
    int st = pl_ctx_invokef(&x, ctx, "echo", "{s:s}", "s", text);
    free(text);
    if (!st)
        st = pl_steps_add_result(out, x);
    cJSON_Delete(x);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "big", big, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "flaky", flaky, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "outer", outer, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "ask", ask, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    return reg;
}

/* ---- what the calls give back ------------------------------------------ */

/* What the calls give back, mixed (FNV-1a), and whether one reported:
 * for the open and the list (p[0]), and for each run (p[1 + i]: the calls
 * on g_runs[i]). */
typedef struct part {
    bool reported;
    bool gone; /* a run not found by its id */
    uint64_t digest;
} part;

typedef struct report {
    bool reported;        /* by any call */
    bool refused;         /* by the open: no call went further */
    bool verify_reported; /* by pl_run_verify() */
    part p[N_RUNS + 1];
} report;

static bool corrupt(int st) { return st == PL_ECORRUPT || st == PL_EVERSION; }

static void note(report *r, part *p, int st)
{
    p->reported |= corrupt(st);
    r->reported |= corrupt(st);
    t_mix(&p->digest, &st, sizeof st);
}

/* Every call on the store at @p path, in turn. */
static report exercise(const char *path, const pl_registry *reg)
{
    report r = {0};
    for (size_t i = 0; i <= N_RUNS; i++)
        r.p[i].digest = 14695981039346656037ull;
    pl_engine *e = NULL;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    int st = pl_engine_open(&e, path, reg, &o);
    note(&r, &r.p[0], st);
    if (st) {
        r.refused = r.verify_reported = r.reported;
        return r;
    }
    note(&r, &r.p[0], pl_engine_runs(e, t_visit_mix_run, &r.p[0].digest));
    for (size_t i = 0; i < N_RUNS; i++) {
        part *p = &r.p[1 + i];
        pl_run_info *info = NULL;
        st = pl_run_get(&info, e, g_runs[i]);
        note(&r, p, st);
        p->gone = st == PL_ENOTFOUND;
        if (!st)
            t_mix_run(&p->digest, info);
        pl_run_info_free(info);
        note(&r, p, pl_run_walk(e, g_runs[i], t_visit_mix_step, &p->digest));
        pl_steps *l = NULL;
        st = pl_run_ledger(&l, e, g_runs[i], "0");
        note(&r, p, st);
        for (size_t j = 0; !st && j < pl_steps_count(l); j++)
            t_mix_step(&p->digest, pl_steps_at(l, j));
        pl_steps_free(l);
        st = pl_run_verify(e, g_runs[i]);
        note(&r, p, st);
        r.verify_reported |= corrupt(st);
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.check = true;
        pl_outcome *out = NULL;
        note(&r, p, pl_run_continue(&out, e, g_runs[i], &ro));
        if (out) {
            t_mix(&p->digest, &out->status, sizeof out->status);
            t_mix(&p->digest, &out->error, sizeof out->error);
            t_mix_str(&p->digest, out->reason);
            p->reported |= corrupt(out->error);
            r.reported |= corrupt(out->error);
            t_mix_json(&p->digest, pl_outcome_result(out));
        }
        pl_outcome_free(out);
    }
    pl_engine_close(e);
    return r;
}

/* Whether @p got holds to @p want: the store refused when opened, or each
 * run's calls give back what they gave or one of them reported (a run
 * whose answers changed says so itself, whatever another run says; a run
 * its id no longer finds, the list of runs), and the list the same or a
 * call reported.  NULL, or what did not hold. */
static const char *unheld(const report *got, const report *want)
{
    if (got->refused)
        return NULL;
    if (got->p[0].digest != want->p[0].digest && !got->reported)
        return "the list of runs";
    for (size_t i = 0; i < N_RUNS; i++)
        if (got->p[1 + i].digest != want->p[1 + i].digest &&
            !got->p[1 + i].reported &&
            !(got->p[1 + i].gone && got->p[0].reported))
            return g_runs[i];
    return NULL;
}

/* `ledger-dump STORE --verify`, as an operator runs it: its exit status
 * (a crash fails the test). */
static int ledger_dump_verify(const char *store)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) ||
            !freopen("/dev/null", "w", stderr))
            _exit(126);
        execl(PL_TEST_BIN_DIR "/tools/ledger-dump", "ledger-dump", store,
              "--verify", (char *)NULL);
        _exit(127);
    }
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        cr_assert_eq(errno, EINTR);
    cr_assert(WIFEXITED(ws), "ledger-dump --verify died of signal %d",
              WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    return WEXITSTATUS(ws);
}

/* ---- the store --------------------------------------------------------- */

static void build(const char *path, const pl_registry *reg)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(e, "outer", "{}", "done");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    o = t_start(e, "ask", "{}", "waiting");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_outcome_free(o);
    o = t_start(e, "chain", "{\"n\": 1}", "tail");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* a run in the queue: its lease row, unowned */
    cJSON *p = t_json("{\"n\": 1}");
    pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "queued";
    ro.priority = 3;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    o = t_start(e, "big", "{}", "big");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    pl_engine_close(e);
}

static void quiet(void *user, const char *message)
{
    (void)user;
    (void)message;
}

/* A connection of the test's own, its server's notices unprinted. */
static PGconn *admin(void)
{
    PGconn *c = t_pg_admin();
    PQsetNoticeProcessor(c, quiet, NULL);
    return c;
}

static bool keyis(const char *v, int len, const char *text)
{
    return (size_t)len == strlen(text) && memcmp(v, text, (size_t)len) == 0;
}

/* A statement whose one value says whether the store at @p copy holds
 * what @p base holds: every row of every table of @p base, and every
 * sequence's value (free it); but meta's 'setup', the digest of each
 * schema's own catalogue (pg_setup.c), which a copy's setup writes. */
static char *same_sql(PGconn *c, const char *base, const char *copy)
{
    const char *bs = t_pg_schema(base), *cs = t_pg_schema(copy);
    const char *v[1] = {bs};
    PGresult *r = PQexecParams(
        c,
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON "
        "n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', "
        "'S') ORDER BY 1",
        1, NULL, v, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    size_t cap = 64 + (size_t)PQntuples(r) * 512, w = 0;
    char *q = malloc(cap);
    cr_assert_not_null(q);
    w += (size_t)snprintf(q, cap, "SELECT true");
    for (int i = 0; i < PQntuples(r); i++) {
        const char *name = PQgetvalue(r, i, 0);
        const char *agg = *PQgetvalue(r, i, 1) == 'S'
                              ? "last_value::text"
                              : "md5(coalesce(string_agg(x::text, ',' ORDER BY "
                                "x::text), ''))";
        const char *only = strcmp(name, "meta") == 0 ? " WHERE x.k <> 'setup'"
                                                     : "";
        w += (size_t)snprintf(q + w, cap - w,
                              " AND (SELECT %s FROM \"%s\".\"%s\" x%s) = "
                              "(SELECT %s FROM \"%s\".\"%s\" x%s)",
                              agg, cs, name, only, agg, bs, name, only);
        cr_assert_lt(w, cap);
    }
    PQclear(r);
    return q;
}

/* Whether @p same (same_sql()) says the copy holds what its base does. */
static bool same(PGconn *c, const char *same)
{
    PGresult *r = t_pg_params(c, same, 0, NULL, NULL, NULL, PGRES_TUPLES_OK);
    bool yes = PQntuples(r) == 1 && PQgetlength(r, 0, 0) == 1 &&
               *PQgetvalue(r, 0, 0) == 1;
    PQclear(r);
    return yes;
}

/* ---- a step record's hashes ------------------------------------------- */

/* The size of the msgpack scalar at @p p (@p n bytes left): 0 for one
 * that is not a number, string, binary, nil or boolean, or runs past. */
static size_t mp_scalar(const uint8_t *p, size_t n)
{
    if (!n)
        return 0;
    uint8_t b = p[0];
    size_t head = 1, body = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        body = 0;
    else if (b >= 0xa0 && b <= 0xbf)
        body = b & 0x1f;
    else if (b == 0xcc || b == 0xd0)
        body = 1;
    else if (b == 0xcd || b == 0xd1)
        body = 2;
    else if (b == 0xce || b == 0xd2 || b == 0xca)
        body = 4;
    else if (b == 0xcf || b == 0xd3 || b == 0xcb)
        body = 8;
    else if ((b == 0xd9 || b == 0xc4) && n >= 2)
        head = 2, body = p[1];
    else if ((b == 0xda || b == 0xc5) && n >= 3)
        head = 3, body = (size_t)p[1] << 8 | p[2];
    else
        return 0;
    return head + body <= n ? head + body : 0;
}

/* The offsets of the 32-byte hashes in the step record @p v (@p len
 * bytes; record.c, STEP RECORD): its header's field 5, the previous step's
 * hash, and the hash of field 7's link, if it has one; into @p at, how
 * many (none for a value that is no such record: a shared value, a
 * record the parse does not follow). */
static size_t record_hashes(const uint8_t *v, size_t len, size_t at[2])
{
    if (len < 1 || (v[0] != 0x97 && v[0] != 0x98))
        return 0;
    size_t pos = 1, n = 0;
    for (int field = 0; field < 7; field++) {
        if (field == 5) {
            if (len - pos < 34 || v[pos] != 0xc4 || v[pos + 1] != 32)
                return 0;
            at[n++] = pos + 2;
        }
        size_t k = mp_scalar(v + pos, len - pos);
        if (!k)
            return 0;
        pos += k;
    }
    if (v[0] == 0x98 && len - pos > 1 && v[pos] == 0x92) {
        size_t k = mp_scalar(v + pos + 1, len - pos - 1);
        pos += 1 + k;
        if (k && len - pos >= 34 && v[pos] == 0xc4 && v[pos + 1] == 32)
            at[n++] = pos + 2;
    }
    return n;
}

/* The sweep's counts, and what it holds the copy to. */
typedef struct tally {
    size_t values, bits, flips, reported, refused, dumps;
    size_t hashes, hashed; /* hashes flipped once, the stride's flips they
                              stand for (flip_column()) */
    size_t shared;         /* steps stored as shared values (share.c) */
    const char *same;      /* same_sql() */
} tally;

/* Put back column @p col of the row of @p t whose key columns held
 * @p keyv (@p keylen long) and now hold @p now in place of that column's
 * (if a key column), in the store at @p copy: its bytes @p orig.  The
 * copy must then hold what its base holds (@p same_q, same_sql()): the
 * calls made on it after the change @p what wrote nothing. */
static void put_back(PGconn *c, const char *copy, const char *same_q,
                     const t_pg_table *t, int col, const uint8_t *orig,
                     size_t len, const char *const *keyv, const int *keylen,
                     const uint8_t *now, size_t now_len, const char *what)
{
    const char *kv[T_PG_COLS_MAX];
    int kl[T_PG_COLS_MAX];
    for (int i = 0; i < t->n_key; i++) {
        bool self = t->key[i] == col;
        kv[i] = self ? (const char *)now : keyv[i];
        kl[i] = self ? (int)now_len : keylen[i];
    }
    cr_assert(t_pg_set_col(c, t_pg_schema(copy), t, col, orig, len, kv, kl));
    cr_assert(same(c, same_q), "%s: a call on the damaged store wrote to it",
              what);
}

/* Flip the bits of column @p col of row @p row (of @p rows, table @p t)
 * that fall on the stride, each in turn in the store at @p copy, and hold
 * the calls to @p want.  A step record's 32-byte hashes (the previous
 * step's, a call's link to its callee's ledger: record_hashes()) are
 * flipped once each, in their first byte, in place of the stride's bits
 * in them: a hash's bytes are never interpreted, only compared whole with
 * the one computed (pl_run_verify(), a replay's chain, ledger-dump), so
 * any of its bits changed reaches what every other one does.  They were
 * a third of the bits of the steps' values (324 of 1,007 flips), every
 * one reported. */
static void flip_column(PGconn *c, const char *copy, const pl_registry *reg,
                        const report *want, const t_pg_table *t, PGresult *rows,
                        int row, int col, tally *n)
{
    if (PQgetisnull(rows, row, col))
        return;
    size_t len = (size_t)PQgetlength(rows, row, col);
    const uint8_t *orig = (const uint8_t *)PQgetvalue(rows, row, col);
    const char *keyv[T_PG_COLS_MAX];
    int keylen[T_PG_COLS_MAX], self = -1; /* col's place in the key, if there */
    for (int i = 0; i < t->n_key; i++) {
        keyv[i] = PQgetvalue(rows, row, t->key[i]);
        keylen[i] = PQgetlength(rows, row, t->key[i]);
        if (t->key[i] == col)
            self = i;
    }
    /* a step's key moved is a step its run lost; the format and the
     * identity are read by every open */
    bool must = (strcmp(t->name, "steps") == 0 && self >= 0) ||
                (strcmp(t->name, "meta") == 0 && t->n_key == 1 &&
                 (keyis(keyv[0], keylen[0], "format") ||
                  keyis(keyv[0], keylen[0], "identity")));
    uint8_t *buf = malloc(len ? len : 1);
    cr_assert_not_null(buf);
    size_t hash[2], n_hash = 0;
    if (strcmp(t->name, "steps") == 0 && self < 0)
        n_hash = record_hashes(orig, len, hash);
    n->hashes += n_hash;
    size_t first = n->values++ % STRIDE; /* the phase moves along */
    for (size_t bit = first, h = 0;;) {
        if (len > LONG_VALUE && bit >= WINDOW * 8 && bit < (len - WINDOW) * 8)
            bit = (len - WINDOW) * 8 + (bit - WINDOW * 8) % STRIDE;
        size_t at; /* the bit flipped */
        if (h < n_hash && (bit >= len * 8 || bit >= hash[h] * 8)) {
            at = hash[h++] * 8 + first % 8; /* a hash's one flip */
        } else if (bit < len * 8) {
            at = bit;
            bit += STRIDE;
            bool in_hash = false;
            for (size_t i = 0; i < n_hash; i++)
                in_hash |= at >= hash[i] * 8 && at < (hash[i] + 32) * 8;
            if (in_hash) {
                n->hashed++;
                continue;
            }
        } else {
            break;
        }
        memcpy(buf, orig, len);
        buf[at / 8] ^= (uint8_t)(1u << (at % 8));
        if (!t_pg_set_col(c, t_pg_schema(copy), t, col, buf, len, keyv,
                          keylen)) {
            n->refused++;
            continue;
        }
        report got = exercise(copy, reg);
        char what[256];
        snprintf(what, sizeof what, "%s.%s of row %d, bit %zu of %zu", t->name,
                 t->col[col], row, at, len * 8);
        const char *bad = unheld(&got, want);
        cr_assert(!bad,
                  "%s: what the calls on %s give back changed, and none "
                  "of them reported it",
                  what, bad);
        cr_assert(got.reported || !must, "%s: no call reported it", what);
        if (n->flips++ % LEDGER_DUMP_EVERY == 0) {
            int x = ledger_dump_verify(copy);
            cr_assert(x == 0 || x == 2 || x == 3,
                      "%s: ledger-dump --verify exited %d", what, x);
            cr_assert(!got.verify_reported || x != 0,
                      "%s: pl_run_verify() reported it, ledger-dump "
                      "--verify exited 0",
                      what);
            cr_assert(got.reported || x == 0,
                      "%s: ledger-dump --verify exited %d on a store whose "
                      "calls gave back what they did before",
                      what, x);
            n->dumps++;
        }
        n->reported += got.reported;
        put_back(c, copy, n->same, t, col, orig, len, keyv, keylen, buf, len,
                 what);
    }
    n->bits += len > LONG_VALUE ? 2 * WINDOW * 8 : len * 8;
    n->shared += len >= 2 && orig[0] == 0xc1 && strcmp(t->name, "steps") == 0;
    free(buf);
}

/* A store as built (base), its copy that the flips damage, what the
 * calls give back on it whole, and a connection of the test's. */
typedef struct fixture {
    pl_registry *reg;
    char base[4200], copy[4200];
    report want;
    PGconn *c;
    char *same_q; /* same_sql() */
} fixture;

static void fixture_open(fixture *f)
{
    setenv("PL_TEST_STORE", "postgresql", 1);
    f->reg = registry();
    t_store_in(f->base, sizeof f->base, NULL, "base");
    build(f->base, f->reg);
    t_store_in(f->copy, sizeof f->copy, NULL, "copy");
    t_store_copy(f->copy, f->base);
    f->want = exercise(f->copy, f->reg);
    cr_assert(!f->want.reported, "the unflipped store reports corruption: %s",
              pl_errmsg());
    cr_assert_eq(ledger_dump_verify(f->copy), 0);
    f->c = admin();
    f->same_q = same_sql(f->c, f->base, f->copy);
    cr_assert(same(f->c, f->same_q), "the calls wrote to the whole store");
}

static void fixture_close(fixture *f)
{
    char q[512];
    snprintf(q, sizeof q, "DROP SCHEMA \"%s\" CASCADE", t_pg_schema(f->copy));
    PQclear(PQexec(f->c, q));
    PQfinish(f->c);
    free(f->same_q);
    pl_registry_free(f->reg);
}

/* Flip every column of every row of the tables @p names (those the store
 * has), and hold the calls to what they gave on the store whole. */
static void flip_tables(const char *const *names, size_t n_names)
{
    fixture f;
    fixture_open(&f);
    PGconn *c = f.c;
    const char *schema = t_pg_schema(f.base);
    tally n = {0};
    n.same = f.same_q;
    size_t cols = 0, rows_seen = 0;
    for (size_t i = 0; i < n_names; i++) {
        t_pg_table t;
        if (!t_pg_find_table(c, schema, names[i], &t))
            continue;
        PGresult *rows = t_pg_rows_of(c, schema, &t);
        if (strcmp(t.name, "steps") == 0 || strcmp(t.name, "runs") == 0)
            cr_assert_gt(PQntuples(rows), 0, "no rows in %s", t.name);
        tally was = n;
        for (int row = 0; row < PQntuples(rows); row++, rows_seen++)
            for (int k = 0; k < t.n_flip; k++)
                flip_column(c, f.copy, f.reg, &f.want, &t, rows, row, t.flip[k],
                            &n);
        if (strcmp(t.name, "steps") == 0)
            cr_assert_gt(n.shared, was.shared,
                         "no step is stored as a shared value");
        cols += (size_t)t.n_flip;
        fprintf(stderr,
                "pg_stepflip: %s, %d rows, %d columns flipped: %zu flips, "
                "%zu reported, %zu refused by the table\n",
                t.name, PQntuples(rows), t.n_flip, n.flips - was.flips,
                n.reported - was.reported, n.refused - was.refused);
        PQclear(rows);
    }
    fprintf(stderr,
            "pg_stepflip: %zu flips (every %d-th of %zu bits) in %zu columns "
            "of %zu rows: %zu reported, %zu refused by the table; "
            "ledger-dump run %zu times; %zu hashes flipped once each, for "
            "%zu flips of the stride\n",
            n.flips, STRIDE, n.bits, cols, rows_seen, n.reported, n.refused,
            n.dumps, n.hashes, n.hashed);
    cr_assert_gt(n.reported, 0);
    fixture_close(&f);
}

/* The steps apart from the other tables: two tests, each with a timeout of
 * its own, that Criterion's two jobs run side by side. */
Test(pg_stepflip, every_column_of_the_steps)
{
    static const char *const steps[] = {"steps"};
    flip_tables(steps, 1);
}

Test(pg_stepflip, every_column_of_runs_leases_meta_and_tombs)
{
    static const char *const rest[] = {"runs", "leases", "meta", "tombs"};
    flip_tables(rest, sizeof rest / sizeof *rest);
}

/* ---- step keys moved on purpose ---------------------------------------- */

/* The number of run @p id, and how many steps its root ledger has. */
static void run_num(PGconn *c, const char *schema, const char *id,
                    uint64_t *num, uint32_t *root_steps)
{
    char q[512];
    snprintf(q, sizeof q,
             "SELECT r.num, (SELECT count(*) FROM \"%s\".steps s WHERE "
             "length(s.k) = 12 AND substr(s.k, 1, 8) = int8send(r.num)) "
             "FROM \"%s\".runs r WHERE r.id = $1::bytea",
             schema, schema);
    const char *v[1] = {id};
    int lens[1] = {(int)strlen(id)}, fmts[1] = {1};
    PGresult *r = t_pg_params(c, q, 1, v, lens, fmts, PGRES_TUPLES_OK);
    cr_assert_eq(PQntuples(r), 1, "no run %s", id);
    uint64_t be, cnt;
    memcpy(&be, PQgetvalue(r, 0, 0), 8);
    memcpy(&cnt, PQgetvalue(r, 0, 1), 8);
    *num = __builtin_bswap64(be);
    *root_steps = (uint32_t)__builtin_bswap64(cnt);
    PQclear(r);
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* A key a step is moved to, and what the move is. */
typedef struct moved {
    uint8_t k[64];
    size_t len;
    char what[96];
} moved;

/* Where step key @p k (@p len bytes, of run @p num among runs[]) is moved:
 * into each neighbour's range (its place, and after its root ledger's last
 * step), into a gap of its ledger, past its ledger's end, before its
 * run's first step, and to keys of other lengths. */
static size_t moves_of(const uint8_t *k, size_t len, uint64_t num,
                       const uint64_t *nums, const uint32_t *roots, moved *out)
{
    size_t n = 0;
    uint32_t seq = get_be32(k + len - 4);
    for (size_t i = 0; i < N_RUNS; i++) {
        if (nums[i] == num || (nums[i] != num + 1 && nums[i] + 1 != num))
            continue;
        moved *m = &out[n++]; /* the same place in the neighbour's tree */
        memcpy(m->k, k, len);
        put_be64(m->k, nums[i]);
        m->len = len;
        snprintf(m->what, sizeof m->what, "into run #%llu at its place",
                 (unsigned long long)nums[i]);
        m = &out[n++]; /* after the neighbour's root ledger's last step */
        put_be64(m->k, nums[i]);
        put_be32(m->k + 8, roots[i]);
        m->len = 12;
        snprintf(m->what, sizeof m->what,
                 "into run #%llu after its last root step",
                 (unsigned long long)nums[i]);
    }
    moved *m = &out[n++]; /* a gap in its own ledger */
    memcpy(m->k, k, len);
    put_be32(m->k + len - 4, seq + 1000);
    m->len = len;
    snprintf(m->what, sizeof m->what, "into a gap (seq %u)", seq + 1000);
    m = &out[n++]; /* one past where it was */
    memcpy(m->k, k, len);
    put_be32(m->k + len - 4, seq + 1);
    m->len = len;
    snprintf(m->what, sizeof m->what, "to seq %u", seq + 1);
    m = &out[n++]; /* before the run's first step: its number alone */
    put_be64(m->k, num);
    m->len = 8;
    snprintf(m->what, sizeof m->what, "before the run's first step (8 bytes)");
    m = &out[n++];
    put_be64(m->k, num);
    memset(m->k + 8, 0, 3);
    m->len = 11;
    snprintf(m->what, sizeof m->what, "before the run's first step (11 bytes)");
    m = &out[n++]; /* a byte short */
    memcpy(m->k, k, len - 1);
    m->len = len - 1;
    snprintf(m->what, sizeof m->what, "a byte short");
    m = &out[n++]; /* a byte more */
    memcpy(m->k, k, len);
    m->k[len] = 0;
    m->len = len + 1;
    snprintf(m->what, sizeof m->what, "a byte more");
    m = &out[n++]; /* a component more: the first step of a callee */
    memcpy(m->k, k, len);
    memset(m->k + len, 0, 4);
    m->len = len + 4;
    snprintf(m->what, sizeof m->what, "a component more (a callee's step)");
    if (len > 12) { /* a component less: a step of its caller's ledger */
        m = &out[n++];
        memcpy(m->k, k, len - 8);
        memcpy(m->k + len - 8, k + len - 4, 4);
        m->len = len - 4;
        snprintf(m->what, sizeof m->what, "a component less");
    }
    return n;
}

Test(pg_stepflip, every_step_moved_elsewhere_is_caught)
{
    fixture f;
    fixture_open(&f);
    PGconn *c = f.c;
    const char *schema = t_pg_schema(f.base);
    uint64_t nums[N_RUNS];
    uint32_t roots[N_RUNS];
    for (size_t i = 0; i < N_RUNS; i++)
        run_num(c, schema, g_runs[i], &nums[i], &roots[i]);
    for (size_t i = 1; i < N_RUNS; i++)
        cr_assert_eq(nums[i], nums[i - 1] + 1, "run numbers not adjacent");
    t_pg_table t;
    cr_assert(t_pg_find_table(c, schema, "steps", &t));
    int kcol = -1;
    for (int i = 0; i < t.n; i++)
        if (strcmp(t.col[i], "k") == 0)
            kcol = i;
    cr_assert(kcol >= 0 && t.n_key == 1 && t.key[0] == kcol,
              "steps is keyed by k alone");
    PGresult *rows = t_pg_rows_of(c, schema, &t);
    size_t cases = 0, caught = 0, refused = 0;
    for (int row = 0; row < PQntuples(rows); row++) {
        const uint8_t *k = (const uint8_t *)PQgetvalue(rows, row, kcol);
        size_t len = (size_t)PQgetlength(rows, row, kcol);
        cr_assert(len >= 12 && len <= 48 && len % 4 == 0);
        uint64_t num = 0;
        for (int i = 0; i < 8; i++)
            num = num << 8 | k[i];
        moved m[16];
        size_t n_moves = moves_of(k, len, num, nums, roots, m);
        const char *keyv[1] = {(const char *)k};
        int keylen[1] = {(int)len};
        for (size_t j = 0; j < n_moves; j++, cases++) {
            if (!t_pg_set_col(c, t_pg_schema(f.copy), &t, kcol, m[j].k,
                              m[j].len, keyv, keylen)) {
                refused++;
                continue;
            }
            char what[192];
            snprintf(what, sizeof what,
                     "step %d of run #%llu (a key of %zu bytes) moved %s", row,
                     (unsigned long long)num, len, m[j].what);
            report got = exercise(f.copy, f.reg);
            cr_assert(got.reported, "%s: no call reported it", what);
            const char *bad = unheld(&got, &f.want);
            cr_assert(!bad,
                      "%s: what the calls on %s give back changed, and "
                      "none of them reported it",
                      what, bad);
            if (caught++ % MOVE_DUMP_EVERY == 0) {
                int x = ledger_dump_verify(f.copy);
                cr_assert(x == 2 || x == 3,
                          "%s: ledger-dump --verify exited %d", what, x);
            }
            put_back(c, f.copy, f.same_q, &t, kcol, k, len, keyv, keylen,
                     m[j].k, m[j].len, what);
        }
    }
    PQclear(rows);
    cr_log_info("%zu step keys moved: %zu caught, %zu refused by the table",
                cases, caught, refused);
    fprintf(stderr,
            "pg_stepflip: %zu step keys moved: %zu caught, %zu refused by "
            "the table\n",
            cases, caught, refused);
    cr_assert_gt(caught, 0);
    fixture_close(&f);
}
