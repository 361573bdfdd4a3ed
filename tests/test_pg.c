/*
 * test_pg.c -- the PostgreSQL store (ledger/pg/), against a real
 * server that tests/pg_run.sh starts for this binary (PL_TEST_PG_URI).  Each
 * test works in a schema of its own.  Covers the store's functions directly
 * (run creation and numbering, steps refused twice, ledger reads with a gap,
 * scans, state updates, listing), and the engine on it through the public
 * API: start and complete, a crash (fork, SIGKILL) continued with nothing
 * finished done twice, suspend and resume, verification and a tampered
 * step, the runs' listing order, an unknown format version, bad URIs, an
 * unreachable server, and connections terminated in the middle of a run.
 */
#include "support.h"

#include "pg_store.h"
#include "runrec.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the server and a schema per test ----------------------------------- */

static const char *server_uri(void)
{
    const char *uri = getenv("PL_TEST_PG_URI");
    cr_assert(uri && *uri,
              "PL_TEST_PG_URI is not set: run this binary through "
              "tests/pg_run.sh (ctest does), which starts a PostgreSQL server");
    return uri;
}

/* The server's URI with schema=@p schema and application_name=@p schema. */
static char *store_uri(const char *schema)
{
    const char *base = server_uri();
    size_t n = strlen(base) + 2 * strlen(schema) + 64;
    char *uri = malloc(n);
    cr_assert_not_null(uri);
    snprintf(uri, n, "%s%cschema=%s&application_name=%s", base,
             strchr(base, '?') ? '&' : '?', schema, schema);
    return uri;
}

/* A plain libpq connection to the server, for what the tests do behind the
 * store's back. */
static PGconn *admin(void)
{
    PGconn *c = PQconnectdb(server_uri());
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

static void admin_exec(const char *sql)
{
    PGconn *c = admin();
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    cr_assert(es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

/* Terminate the server sessions of the engine whose schema is @p schema. */
static int terminate_sessions(const char *schema)
{
    PGconn *c = admin();
    const char *vals[1] = {schema};
    PGresult *r = PQexecParams(c,
                               "SELECT count(pg_terminate_backend(pid)) FROM "
                               "pg_stat_activity WHERE application_name = $1",
                               1, NULL, vals, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    int n = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return n;
}

/* ---- test policies ------------------------------------------------------- */

static char g_effects[512]; /* the effects file of "tick" */
static int g_kill_at = -1;  /* "tick" i SIGKILLs its process before acting */
static const char *g_sever; /* "tick" 1 terminates this schema's sessions */

/* "tick" {"i": i}: appends "i\n" to the effects file; returns {"i": i}. */
static int tick(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int i = cJSON_GetObjectItemCaseSensitive(a->payload, "i")->valueint;
    if (i == g_kill_at)
        raise(SIGKILL);
    FILE *f = fopen(g_effects, "a");
    if (!f)
        return pl_errorf(PL_EIO, "effects file: %s", strerror(errno));
    fprintf(f, "%d\n", i);
    fclose(f);
    if (i == 1 && g_sever)
        terminate_sessions(g_sever);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "i", i);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "ticks" {"n": n}: calls "tick" for i = 0..n-1; returns {"n": n}. */
static int ticks(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int n = cJSON_GetObjectItemCaseSensitive(a->payload, "n")->valueint;
    for (int i = 0; i < n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "i", i);
        pl_action call = {PL_ACTION_VERSION, "tick", p, NULL, 0, NULL};
        int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "n", n);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* "ask": calls "add", suspends with its payload as the prompt, then returns
 * {"answer": answer}. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *p = t_json("{\"a\": 1, \"b\": 2}");
    pl_action call = {PL_ACTION_VERSION, "add", p, NULL, 0, NULL};
    int st = pl_ctx_call(NULL, ctx, &call, NULL, 0);
    cJSON_Delete(p);
    if (st)
        return st;
    cJSON *ans = NULL;
    if ((st = pl_ctx_suspend(&ans, ctx, a->payload)))
        return st;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "answer", ans);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "tick", tick, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "ticks", ticks, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_add_fn(reg, "ask", ask, NULL), PL_OK, "%s",
                 pl_errmsg());
    return reg;
}

static void effects_init(void)
{
    snprintf(g_effects, sizeof g_effects, "%s/effects", t_tmpdir());
}

/* The effects file's lines joined, e.g. "0,1,2". */
static void effects_read(char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(g_effects, "r");
    if (!f)
        return;
    char line[32];
    size_t len = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "," : "",
                                line);
    }
    fclose(f);
}

static pl_run_status status_of(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
    pl_run_status s = info->status;
    pl_run_info_free(info);
    return s;
}

/* ---- the store's functions ----------------------------------------------- */

static void step_key(uint8_t key[12], uint64_t run, uint32_t seq)
{
    pl__put_be64(key, run);
    pl__put_be32(key + 8, seq);
}

Test(pg, store_functions)
{
    char *uri = store_uri("t_store");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(pl__pg_path(s), uri);

    /* two creations in one commit get two numbers; a taken id is skipped */
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);
    pl__batch a = {0}, b = {0};
    a.create_id = "run-a";
    a.create_info = &info;
    cr_assert_eq(pl__buf_append(&a.state, "sa", 2), PL_OK);
    b.create_id = "run-b";
    b.create_info = &info;
    cr_assert_eq(pl__buf_append(&b.state, "sb", 2), PL_OK);
    pl__batch *both[2] = {&a, &b};
    cr_assert_eq(pl__pg_commit(s, both, 2, false), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(a.rc, PL_OK);
    cr_expect_eq(b.rc, PL_OK);
    cr_expect_neq(a.run, b.run);
    pl__batch *again[1] = {&b};
    uint64_t b_num = b.run;
    cr_assert_eq(pl__pg_commit(s, again, 1, true), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(b.rc, PL_EEXIST);

    uint64_t num = 0;
    pl__buf got = {0};
    cr_assert_eq(pl__pg_run_find(s, "run-b", &num, &got), PL_OK);
    cr_expect_eq(num, b_num);
    cr_expect(got.len == 4 && memcmp(got.data, "info", 4) == 0);
    cr_expect_eq(pl__pg_run_find(s, "run-x", &num, NULL), PL_ENOTFOUND);
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sa", 2) == 0);
    cr_expect_eq(pl__pg_state_get(s, 999999, &got), PL_ECORRUPT);

    /* steps 0..2 of run a's root ledger, and a step of a callee of step 0 */
    pl__batch w = {0};
    w.run = a.run;
    uint8_t key[16];
    for (uint32_t i = 0; i < 3; i++) {
        step_key(key, a.run, i);
        char v[8];
        snprintf(v, sizeof v, "v%u", i);
        cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)v, 2), PL_OK);
    }
    step_key(key, a.run, 0);
    pl__put_be32(key + 12, 0);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 16, (uint8_t *)"c0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&w.state, "s2", 2), PL_OK);
    pl__batch *one[1] = {&w};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK);
    cr_expect(got.len == 2 && memcmp(got.data, "s2", 2) == 0);

    /* the same steps again: PL_EBUSY, and nothing of that commit is kept */
    pl__buf_reset(&w.state);
    cr_assert_eq(pl__buf_append(&w.state, "s3", 2), PL_OK);
    cr_expect_eq(pl__pg_commit(s, one, 1, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "exists already") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK);
    cr_expect(got.len == 2 && memcmp(got.data, "s2", 2) == 0);

    /* the root ledger reads 0, 1, 2 (not the callee's step) */
    pl__kvs out = {0};
    uint8_t prefix[8];
    pl__put_be64(prefix, a.run);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 0, 100, 1 << 20, &out), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(out.n, 3);
    cr_expect(memcmp(pl__kvs_val(&out, 2), "v2", 2) == 0);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 1, 1, 1 << 20, &out), PL_OK);
    cr_assert_eq(out.n, 1, "at most max_n");
    cr_expect(memcmp(pl__kvs_val(&out, 0), "v1", 2) == 0);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 3, 100, 1 << 20, &out), PL_OK);
    cr_expect_eq(out.n, 0, "past the end");

    /* a gap is corruption: write step 5 of a ledger that has no 4 */
    pl__kvs_reset(&w.steps);
    pl__buf_reset(&w.state);
    step_key(key, a.run, 5);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"v5", 2), PL_OK);
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl__pg_read(s, prefix, 8, 4, 100, 1 << 20, &out), PL_ECORRUPT);
    cr_expect(strstr(pl_errmsg(), "missing its step 4") != NULL, "%s",
              pl_errmsg());

    /* a scan returns every step of the run in key order, keys kept */
    cr_assert_eq(pl__pg_scan(s, a.run, NULL, 0, 100, &out), PL_OK);
    cr_assert_eq(out.n, 5);
    cr_expect_eq(out.e[1].klen, 16, "the callee's step sorts after step 0");
    cr_assert_eq(pl__pg_scan(s, a.run, pl__kvs_key(&out, 1), 16, 2, &out),
                 PL_OK);
    cr_assert_eq(out.n, 2);
    cr_expect(memcmp(pl__kvs_val(&out, 0), "v1", 2) == 0);
    pl__kvs_free(&out);
    pl__kvs_free(&w.steps);
    pl__buf_free(&w.state);
    pl__batch_free(&a);
    pl__batch_free(&b);
    pl__buf_free(&info);
    pl__buf_free(&got);
    pl__pg_close(s);
    free(uri);
}

static int count_step(const uint8_t *key, size_t klen, const uint8_t *val,
                      size_t vlen, void *user)
{
    (void)key;
    (void)klen;
    (void)val;
    (void)vlen;
    ++*(int *)user;
    return PL_OK;
}

/* A run longer than one page of pl__pg_each_step(), many INSERTs long. */
Test(pg, store_many_steps)
{
    char *uri = store_uri("t_many");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    pl__batch w = {0};
    w.run = 7;
    uint8_t key[12];
    for (uint32_t i = 0; i < 2500; i++) {
        step_key(key, 7, i);
        cr_assert_eq(pl__kvs_add(&w.steps, key, 12, key, 12), PL_OK);
    }
    pl__batch *one[1] = {&w};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    int n = 0;
    cr_assert_eq(pl__pg_each_step(s, 7, count_step, &n), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(n, 2500);
    pl__kvs out = {0};
    uint8_t prefix[8];
    pl__put_be64(prefix, 7);
    cr_assert_eq(pl__pg_read(s, prefix, 8, 0, SIZE_MAX, SIZE_MAX, &out), PL_OK);
    cr_expect_eq(out.n, 1024, "one read returns a bounded number of steps");
    pl__kvs_free(&out);
    pl__batch_free(&w);
    pl__pg_close(s);
    free(uri);
}

/* ---- round trips ---------------------------------------------------------- */

static pl__pg_counts counts(void)
{
    pl__pg_counts c;
    pl__pg_counts_get(&c);
    return c;
}

static size_t steps_of(pl__pg_store *s, uint64_t run)
{
    int n = 0;
    cr_assert_eq(pl__pg_each_step(s, run, count_step, &n), PL_OK, "%s",
                 pl_errmsg());
    return (size_t)n;
}

static int set_state(pl__buf *state, pl__kvs *extra, void *user)
{
    (void)extra;
    pl__buf_reset(state);
    return pl__buf_append(state, user, strlen(user));
}

/*
 * A commit is one round trip, however many runs (a group commit), steps
 * (more than one statement's worth) and leases it carries; a fence that
 * fails, or a step that exists, fails the whole commit and keeps nothing
 * of it; a state's read-modify-write is two round trips, a lease's take
 * one.
 */
Test(pg, a_commit_is_one_round_trip)
{
    char *uri = store_uri("t_rtrip");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);

    /* two leased creations */
    pl__batch a = {0}, b = {0};
    a.create_id = "rt-a";
    b.create_id = "rt-b";
    a.create_info = b.create_info = &info;
    a.lease_owner = b.lease_owner = "w1";
    a.lease_us = b.lease_us = 60 * 1000000LL;
    cr_assert_eq(pl__buf_append(&a.state, "s0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&b.state, "s0", 2), PL_OK);
    pl__batch *both[2] = {&a, &b};
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__pg_commit(s, both, 2, false), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.connects, c0.connects, "the open's connection is reused");
    cr_expect_eq(c1.statements - c0.statements, 4, "2 creations, 2 leases");

    /* a group of both runs: 2,500 steps of a (three statements' worth) and
     * one of b, both states, both fences, b's execution ending */
    pl__batch wa = {0}, wb = {0};
    wa.run = a.run;
    wb.run = b.run;
    wa.gen = wb.gen = 1;
    wb.release = true;
    uint8_t key[12];
    for (uint32_t i = 0; i < 2500; i++) {
        step_key(key, a.run, i);
        cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    }
    step_key(key, b.run, 0);
    cr_assert_eq(pl__kvs_add(&wb.steps, key, 12, (uint8_t *)"b0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&wa.state, "sa", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&wb.state, "sb", 2), PL_OK);
    pl__batch *group[2] = {&wa, &wb};
    c0 = counts();
    cr_assert_eq(pl__pg_commit(s, group, 2, false), PL_OK, "%s", pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 3, "1,000 steps a statement");
    cr_expect_eq(steps_of(s, a.run), 2500);
    cr_expect_eq(steps_of(s, b.run), 1);
    pl__buf got = {0};
    cr_assert_eq(pl__pg_state_get(s, b.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sb", 2) == 0);
    pl__lease l;
    cr_expect_eq(pl__pg_lease_get(s, b.run, &l), PL_ENOTFOUND,
                 "b's execution ended: its lease is dropped");
    cr_assert_eq(pl__pg_lease_get(s, a.run, &l), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(l.gen, 1);

    /* a fence of a lease taken over fails the group: nothing of it stays,
     * the other run's steps and state neither */
    pl__kvs_reset(&wa.steps);
    pl__kvs_reset(&wb.steps);
    step_key(key, a.run, 2500);
    cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    step_key(key, b.run, 1);
    cr_assert_eq(pl__kvs_add(&wb.steps, key, 12, key, 12), PL_OK);
    wb.gen = 0; /* b unleased now; a's fence names a generation gone */
    wb.release = false;
    wa.gen = 7;
    pl__buf_reset(&wb.state);
    cr_assert_eq(pl__buf_append(&wb.state, "sX", 2), PL_OK);
    pl__batch *stale[2] = {&wb, &wa};
    c0 = counts();
    cr_expect_eq(pl__pg_commit(s, stale, 2, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "taken over by w1") != NULL, "%s",
              pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(steps_of(s, a.run), 2500);
    cr_expect_eq(steps_of(s, b.run), 1);
    cr_assert_eq(pl__pg_state_get(s, b.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sb", 2) == 0);

    /* a step that exists, in the last statement of three: the same */
    wa.gen = 1;
    pl__kvs_reset(&wa.steps);
    for (uint32_t i = 2500; i < 4500; i++) {
        step_key(key, a.run, i);
        cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    }
    step_key(key, a.run, 0); /* there since the group */
    cr_assert_eq(pl__kvs_add(&wa.steps, key, 12, key, 12), PL_OK);
    cr_expect_eq(pl__pg_commit(s, stale, 2, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "exists already") != NULL, "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, a.run), 2500);
    cr_expect_eq(steps_of(s, b.run), 1);
    cr_assert_eq(pl__pg_lease_get(s, a.run, &l), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(l.gen, 1, "the lease is as it was");

    /* the connection came through both failures usable */
    c0 = counts();
    cr_assert_eq(pl__pg_state_update(s, a.run, set_state, "su"), PL_OK, "%s",
                 pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.connects, c0.connects);
    cr_expect_eq(c1.round_trips - c0.round_trips, 2,
                 "a read-modify-write is two round trips");
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "su", 2) == 0);
    /* a failing one keeps nothing */
    cr_expect_eq(pl__pg_state_update(s, 999999, set_state, "sv"), PL_ECORRUPT);
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "su", 2) == 0);

    pl__kvs_free(&wa.steps);
    pl__kvs_free(&wb.steps);
    pl__buf_free(&wa.state);
    pl__buf_free(&wb.state);
    pl__batch_free(&a);
    pl__batch_free(&b);
    pl__buf_free(&info);
    pl__buf_free(&got);
    pl__pg_close(s);
    free(uri);
}

static int inbox_open(const uint8_t *state, size_t len, void *user)
{
    (void)state;
    (void)len;
    return user ? pl__err(PL_ESTATE, "%s", (const char *)user) : PL_OK;
}

/*
 * Timers and inbox consumptions go in a commit's one statement: a parking
 * commit with its steps, state, timer and a consumed event is one round
 * trip; a timer keeps an earlier due time, also when two batches of one
 * run set it in one group; an event consumed already fails the whole
 * commit with PL_EBUSY and keeps nothing of it.  A delivery is two round
 * trips (the state locked, then the record, the timer and COMMIT), and one
 * its check refuses leaves nothing.
 */
Test(pg, timers_and_consumptions_go_in_the_commit)
{
    char *uri = store_uri("t_time");
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);
    pl__batch a = {0};
    a.create_id = "tm-a";
    a.create_info = &info;
    cr_assert_eq(pl__buf_append(&a.state, "s0", 2), PL_OK);
    pl__batch *one[1] = {&a};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());

    /* a delivery: two round trips; its record is seq 1, its timer due */
    uint64_t seq = 0;
    pl__buf ev = {0};
    pl__inbox_rec er = {
        .name = "go", .payload = (uint8_t *)"\x80", .payload_len = 1};
    cr_assert_eq(pl__inbox_encode(&ev, "tm-a", &er), PL_OK, "%s", pl_errmsg());
    pl__pg_counts c0 = counts();
    cr_assert_eq(pl__pg_inbox_put(s, a.run, "tm-a", inbox_open, NULL, ev.data,
                                  ev.len, &seq),
                 PL_OK, "%s", pl_errmsg());
    pl__pg_counts c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 2);
    cr_expect_eq(seq, 1);
    int64_t due = 0, now = pl__now_us();
    cr_assert_eq(pl__pg_timer_get(s, a.run, &due), PL_OK, "%s", pl_errmsg());
    cr_expect(due > 0 && due <= now, "due at the delivery: %lld",
              (long long)due);
    /* one its check refuses leaves nothing, and the connection usable */
    cr_expect_eq(pl__pg_inbox_put(s, a.run, "tm-a", inbox_open, "ended",
                                  ev.data, ev.len, &seq),
                 PL_ESTATE);
    cr_expect_str_eq(pl_errmsg(), "ended");
    pl__kvs ib = {0};
    cr_assert_eq(pl__pg_inbox_read(s, a.run, &ib), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ib.n, 1);

    /* a parking commit consuming the event: one round trip, one statement;
     * its later due time does not push back the one the delivery set */
    pl__batch w = {0};
    w.run = a.run;
    uint8_t key[12];
    step_key(key, a.run, 0);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"w0", 2), PL_OK);
    cr_assert_eq(pl__buf_append(&w.state, "sw", 2), PL_OK);
    w.timer_us = now + 3600 * 1000000LL;
    w.timer_id = "tm-a";
    w.inbox_del = 1;
    one[0] = &w;
    c0 = counts();
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    c1 = counts();
    cr_expect_eq(c1.round_trips - c0.round_trips, 1);
    cr_expect_eq(c1.statements - c0.statements, 1);
    cr_assert_eq(pl__pg_inbox_read(s, a.run, &ib), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ib.n, 0, "consumed with the commit");
    int64_t kept = 0;
    cr_assert_eq(pl__pg_timer_get(s, a.run, &kept), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(kept, due, "the earlier due time is kept");
    cr_expect_eq(steps_of(s, a.run), 1);
    cr_expect(w.inbox_known && !w.inbox_cancel,
              "the commit says no cancellation waits");

    /* two batches of the run in one group set its timer earlier: one row,
     * the earliest */
    pl__batch g1 = {0}, g2 = {0};
    g1.run = g2.run = a.run;
    g1.timer_id = g2.timer_id = "tm-a";
    g1.timer_us = due - 2000;
    g2.timer_us = due - 5000;
    pl__batch *group[2] = {&g1, &g2};
    cr_assert_eq(pl__pg_commit(s, group, 2, false), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_timer_get(s, a.run, &kept), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(kept, due - 5000);

    /* an event consumed already: the whole commit fails, nothing stays */
    pl__kvs_reset(&w.steps);
    step_key(key, a.run, 1);
    cr_assert_eq(pl__kvs_add(&w.steps, key, 12, (uint8_t *)"w1", 2), PL_OK);
    pl__buf_reset(&w.state);
    cr_assert_eq(pl__buf_append(&w.state, "sx", 2), PL_OK);
    w.timer_us = due - 9000;
    one[0] = &w;
    cr_expect_eq(pl__pg_commit(s, one, 1, false), PL_EBUSY);
    cr_expect(strstr(pl_errmsg(), "consumed by another execution") != NULL,
              "%s", pl_errmsg());
    cr_expect_eq(steps_of(s, a.run), 1);
    pl__buf got = {0};
    cr_assert_eq(pl__pg_state_get(s, a.run, &got), PL_OK, "%s", pl_errmsg());
    cr_expect(got.len == 2 && memcmp(got.data, "sw", 2) == 0);
    cr_assert_eq(pl__pg_timer_get(s, a.run, &kept), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(kept, due - 5000, "the timer is as it was");

    /* a cancellation delivered: the next commit of the run says so */
    pl__inbox_rec cr = {.reason = "stop"};
    pl__buf_reset(&ev);
    cr_assert_eq(pl__inbox_encode(&ev, "tm-a", &cr), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl__pg_inbox_put(s, a.run, "tm-a", inbox_open, NULL, ev.data,
                                  ev.len, &seq),
                 PL_OK, "%s", pl_errmsg());
    pl__batch k = {0};
    k.run = a.run;
    cr_assert_eq(pl__buf_append(&k.state, "sk", 2), PL_OK);
    one[0] = &k;
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_expect(k.inbox_known && k.inbox_cancel);
    pl__buf_free(&k.state);

    /* the due timer is taken once, with the run's lease */
    pl__lease l;
    int64_t next = -1;
    cr_assert_eq(pl__pg_timer_take(s, "w1", 60 * 1000000LL, &l, &next), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(l.run, a.run);
    cr_expect_str_eq(l.id, "tm-a");
    cr_expect_str_eq(l.owner, "w1");
    cr_expect_eq(pl__pg_timer_take(s, "w2", 60 * 1000000LL, &l, &next),
                 PL_ENOTFOUND);
    cr_expect_eq(next, 0, "no timer is left");
    cr_expect_eq(pl__pg_timer_get(s, a.run, &kept), PL_ENOTFOUND);

    pl__kvs_free(&ib);
    pl__kvs_free(&w.steps);
    pl__buf_free(&w.state);
    pl__buf_free(&got);
    pl__buf_free(&ev);
    pl__batch_free(&a);
    pl__buf_free(&info);
    pl__pg_close(s);
    free(uri);
}

/* Through the engine: every call more is one round trip more (its commit). */
Test(pg, a_call_is_one_round_trip)
{
    char *uri = store_uri("t_rtcall");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl__pg_counts c[3];
    c[0] = counts();
    pl_outcome *o = t_start(e, "chain", "{\"n\": 10}", "rt-10");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    c[1] = counts();
    o = t_start(e, "chain", "{\"n\": 30}", "rt-30");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
    c[2] = counts();
    uint64_t ten = c[1].round_trips - c[0].round_trips,
             thirty = c[2].round_trips - c[1].round_trips;
    cr_expect_eq(c[2].connects, c[0].connects);
    cr_expect_eq(thirty - ten, 20, "%llu round trips for 10 calls, %llu for 30",
                 (unsigned long long)ten, (unsigned long long)thirty);
    cr_expect_eq(c[2].statements - c[1].statements -
                     (c[1].statements - c[0].statements),
                 20, "one statement a call");
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* ---- the engine on it ---------------------------------------------------- */

Test(pg, start_complete_and_replay)
{
    char *uri = store_uri("t_start");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "chain", "{\"n\": 3}", "run-1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(t_calls.add, 3);
    char *first = t_text(pl_outcome_result(o));
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(e, "run-1"), PL_OK, "%s", pl_errmsg());

    /* continuing a completed run replays it, executing nothing */
    cr_assert_eq(pl_run_continue(&o, e, "run-1", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(o->calls_served, 3);
    cr_expect_eq(t_calls.add, 3);
    char *again = t_text(pl_outcome_result(o));
    cr_expect_str_eq(first, again);
    pl_outcome_free(o);

    /* the same id again is taken */
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "run-1";
    o = NULL;
    cr_expect_eq(pl_run_start(&o, e, &a, &ro), PL_EEXIST);
    cr_expect_null(o);
    cJSON_Delete(p);
    pl_engine_close(e);

    /* another engine (a fresh connection) sees the same run */
    e = t_engine(uri, reg, PL_DURABILITY_PROCESS);
    cr_expect_eq(status_of(e, "run-1"), PL_RUN_COMPLETED);
    pl_steps *steps = NULL;
    cr_assert_eq(pl_run_ledger(&steps, e, "run-1", "0"), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_gt(pl_steps_count(steps), 6);
    pl_steps_free(steps);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(first);
    free(again);
    free(uri);
}

typedef struct group_arg {
    pl_engine *e;
    char id[16];
    int st;
    pl_run_status status;
} group_arg;

static void *group_thread(void *user)
{
    group_arg *g = user;
    cJSON *p = cJSON_Parse("{\"n\": 4}");
    pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = g->id;
    pl_outcome *o = NULL;
    g->st = pl_run_start(&o, g->e, &a, &ro);
    g->status = o ? o->status : PL_RUN_FAILED;
    pl_outcome_free(o);
    cJSON_Delete(p);
    return NULL;
}

/* Runs on several threads share group commits, on several sessions. */
Test(pg, group_commit_on_threads)
{
    char *uri = store_uri("t_group");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_GROUP);
    group_arg g[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        g[i] = (group_arg){e, {0}, -1, PL_RUN_FAILED};
        snprintf(g[i].id, sizeof g[i].id, "g-%d", i);
        cr_assert_eq(pthread_create(&th[i], NULL, group_thread, &g[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(g[i].st, PL_OK, "%s", pl_status_name(g[i].st));
        cr_expect_eq(g[i].status, PL_RUN_COMPLETED);
        cr_expect_eq(pl_run_verify(e, g[i].id), PL_OK, "%s", pl_errmsg());
    }
    cr_expect_eq(t_calls.add, 16);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

typedef struct pool_run {
    char id[16];
    int st;
    pl_run_status status;
} pool_run;

static void pool_task(pl_engine *e, void *user)
{
    pool_run *r = user;
    cJSON *p = cJSON_Parse("{\"n\": 3}");
    pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = r->id;
    pl_outcome *o = NULL;
    r->st = pl_run_start(&o, e, &a, &ro);
    r->status = o ? o->status : PL_RUN_FAILED;
    pl_outcome_free(o);
    cJSON_Delete(p);
}

/* A pool's tasks, on stacks of their own, share commits in both modes that
 * group them. */
Test(pg, pool_tasks_share_commits)
{
    char *uri = store_uri("t_pool");
    pl_registry *reg = registry();
    pl_durability modes[2] = {PL_DURABILITY_GROUP, PL_DURABILITY_PROCESS};
    for (int m = 0; m < 2; m++) {
        pl_engine *e = t_engine(uri, reg, modes[m]);
        pl_pool_options po = PL_POOL_OPTIONS_INIT;
        po.threads = 2;
        pl_pool *pool = NULL;
        cr_assert_eq(pl_pool_new(&pool, e, &po), PL_OK, "%s", pl_errmsg());
        pool_run runs[12];
        for (int i = 0; i < 12; i++) {
            runs[i] = (pool_run){{0}, -1, PL_RUN_FAILED};
            snprintf(runs[i].id, sizeof runs[i].id, "p%d-%d", m, i);
            cr_assert_eq(pl_pool_submit(pool, pool_task, &runs[i]), PL_OK);
        }
        cr_assert_eq(pl_pool_wait(pool), PL_OK, "%s", pl_errmsg());
        pl_pool_free(pool);
        for (int i = 0; i < 12; i++) {
            cr_expect_eq(runs[i].st, PL_OK, "%s", pl_status_name(runs[i].st));
            cr_expect_eq(runs[i].status, PL_RUN_COMPLETED);
            cr_expect_eq(pl_run_verify(e, runs[i].id), PL_OK, "%s",
                         pl_errmsg());
        }
        pl_engine_close(e);
    }
    cr_expect_eq(t_calls.add, 72);
    pl_registry_free(reg);
    free(uri);
}

/* In a forked child: open an engine of its own and start "ticks", which
 * SIGKILLs the child in tick @p kill_at. */
static void crash_child(const char *uri, int kill_at)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_kill_at = kill_at;
        pl_registry *reg = registry();
        pl_engine *e = NULL;
        if (pl_engine_open(&e, uri, reg, NULL))
            _exit(3);
        cJSON *p = cJSON_Parse("{\"n\": 5}");
        pl_action a = {PL_ACTION_VERSION, "ticks", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "crashed";
        pl_outcome *o = NULL;
        pl_run_start(&o, e, &a, &ro);
        _exit(4); /* it was to die in tick kill_at */
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
              "the child did not die of SIGKILL (status %d)", ws);
}

Test(pg, crash_then_continue_repeats_nothing_finished)
{
    char *uri = store_uri("t_crash");
    effects_init();
    pl_registry *reg = registry();
    /* the parent's engine is open across the fork: the child leaves its
     * connections alone */
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    crash_child(uri, 3);
    char fx[128];
    effects_read(fx, sizeof fx);
    cr_expect_str_eq(fx, "0,1,2");

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "crashed"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(info->status, PL_RUN_RUNNING);
    cr_expect(!info->owner_alive, "the killed owner counts as alive");
    pl_run_info_free(info);
    cr_expect_eq(pl_run_verify(e, "crashed"), PL_OK, "%s", pl_errmsg());

    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "crashed", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(o->calls_served, 3, "ticks 0..2 come from the ledger");
    cr_expect_eq(o->calls_executed, 2, "ticks 3 and 4 run");
    pl_outcome_free(o);
    effects_read(fx, sizeof fx);
    cr_expect_str_eq(fx, "0,1,2,3,4", "nothing finished ran twice");
    cr_expect_eq(pl_run_verify(e, "crashed"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

Test(pg, suspend_and_resume)
{
    char *uri = store_uri("t_suspend");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "ask", "{\"question\": \"ship?\"}", "s-1");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    cr_assert_not_null(o->resume_token);
    cr_expect_eq(t_calls.add, 1);
    cr_expect_eq(status_of(e, "s-1"), PL_RUN_SUSPENDED);
    pl_outcome *o2 = NULL;
    cr_expect_eq(pl_run_continue(&o2, e, "s-1", NULL), PL_ESTATE);
    cJSON *ans = t_json("{\"yes\": true}");
    cr_expect_eq(pl_run_resume(&o2, e, "s-1", "wrong-token", ans), PL_ETOKEN);
    pl_engine_close(e);

    /* resumed by another engine: add is served, not executed again */
    e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_resume(&o2, e, "s-1", o->resume_token, ans), PL_OK,
                 "%s", pl_errmsg());
    cr_expect_eq(o2->status, PL_RUN_COMPLETED, "%s", o2->reason);
    cr_expect_eq(t_calls.add, 1);
    char *r = t_text(pl_outcome_result(o2));
    cr_expect_str_eq(r, "{\"answer\":{\"yes\":true}}");
    free(r);
    cr_expect_eq(pl_run_verify(e, "s-1"), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(ans);
    pl_outcome_free(o);
    pl_outcome_free(o2);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

Test(pg, verify_finds_a_tampered_step)
{
    char *uri = store_uri("t_verify");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "chain", "{\"n\": 5}", "v-1");
    pl_outcome_free(o);
    o = t_start(e, "chain", "{\"n\": 5}", "bystander");
    pl_outcome_free(o);
    uint8_t head[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, e, "v-1"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_verify(e, "v-1"), PL_OK, "%s", pl_errmsg());
    /* 0:3 is add's second result, {"sum": 1}: make it {"sum": 5} */
    admin_exec("UPDATE t_verify.steps SET v = set_byte(v, length(v) - 1, "
               "get_byte(v, length(v) - 1) # 4) WHERE k = int8send((SELECT "
               "num FROM t_verify.runs WHERE id = 'v-1'::bytea)) || "
               "'\\x00000003'::bytea");
    int st = pl_run_verify(e, "v-1");
    cr_expect_eq(st, PL_ECORRUPT, "verify gave %s", pl_status_name(st));
    cr_expect(strstr(pl_errmsg(), "0:4") && strstr(pl_errmsg(), "hash"),
              "names where the chain breaks: %s", pl_errmsg());
    cr_expect_eq(pl_run_verify(e, "bystander"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* approver: asks the human "approve" and returns the answer. */
static int approver(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *y = NULL;
    int st = pl_ctx_invokef(&y, ctx, "approve", "{s:b}", "ok?", 1);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "answer", y);
    cJSON_Delete(y);
    return st;
}

/*
 * A suspended run's suspend step is in its callee's ledger, 0.0, which is
 * open: the run's state records its head (written and read back as the
 * same bytes as on LMDB), so a changed byte of it is reported.
 */
Test(pg, a_suspended_runs_open_ledger_is_anchored)
{
    char *uri = store_uri("t_anchor");
    pl_registry *reg = registry();
    cr_assert_eq(pl_registry_add_fn(reg, "approver", approver, NULL), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "approver", "{}", "a-1");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    cr_assert_str_eq(o->suspended_path, "0.0");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_verify(e, "a-1"), PL_OK, "%s", pl_errmsg());
    /* the suspend step, 0.0:0, its last byte (in the prompt) changed */
    admin_exec("UPDATE t_anchor.steps SET v = set_byte(v, length(v) - 1, "
               "get_byte(v, length(v) - 1) # 1) WHERE k = int8send((SELECT "
               "num FROM t_anchor.runs WHERE id = 'a-1'::bytea)) || "
               "'\\x0000000000000000'::bytea");
    int st = pl_run_verify(e, "a-1");
    cr_expect_eq(st, PL_ECORRUPT, "verify gave %s", pl_status_name(st));
    cr_expect(strstr(pl_errmsg(), "0.0:0"), "names the step: %s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

typedef struct seen_runs {
    char ids[8][16];
    int n;
} seen_runs;

static int visit(const pl_run_info *info, void *user)
{
    seen_runs *s = user;
    if (s->n < 8)
        snprintf(s->ids[s->n], sizeof s->ids[0], "%s", info->id);
    s->n++;
    return 0;
}

Test(pg, runs_are_listed_in_id_byte_order)
{
    char *uri = store_uri("t_runs");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_PROCESS);
    const char *ids[] = {"b", "ab", "a", "B", "a0"};
    for (size_t i = 0; i < 5; i++)
        pl_outcome_free(t_start(e, "echo", "{}", ids[i]));
    seen_runs s = {0};
    cr_assert_eq(pl_engine_runs(e, visit, &s), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(s.n, 5);
    const char *want[] = {"B", "a", "a0", "ab", "b"};
    for (int i = 0; i < 5; i++)
        cr_expect_str_eq(s.ids[i], want[i]);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

Test(pg, unknown_format_is_eversion)
{
    char *uri = store_uri("t_format");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    admin_exec("UPDATE t_format.meta SET v = 99 WHERE k = 'format'");
    e = NULL;
    cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_EVERSION);
    cr_expect_null(e);
    cr_expect(strstr(pl_errmsg(), "format 99") != NULL, "%s", pl_errmsg());
    pl_registry_free(reg);
    free(uri);
}

Test(pg, bad_uris_and_an_unreachable_server)
{
    pl_registry *reg = registry();
    pl_engine *e = NULL;
    char *uri = store_uri("Bad-Name");
    cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "schema") != NULL, "%s", pl_errmsg());
    free(uri);
    uri = store_uri("");
    cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_EINVAL);
    free(uri);
    cr_expect_eq(pl_engine_open(&e,
                                "postgresql:///postgres?host=/nonexistent-dir",
                                reg, NULL),
                 PL_ESTORE);
    cr_expect(strstr(pl_errmsg(), "cannot connect") != NULL, "%s", pl_errmsg());
    cr_expect_eq(pl_engine_open(&e, "postgres://[bad", reg, NULL), PL_ESTORE);
    /* a password is not repeated in messages */
    cr_expect_eq(pl_engine_open(&e,
                                "postgresql://u:secret@/postgres?host=/"
                                "nonexistent-dir",
                                reg, NULL),
                 PL_ESTORE);
    cr_expect(strstr(pl_errmsg(), "secret") == NULL, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "u:***@") != NULL, "%s", pl_errmsg());
    cr_expect_null(e);
    pl_registry_free(reg);
}

Test(pg, connection_loss_is_estore_and_the_run_continues)
{
    char *uri = store_uri("t_loss");
    effects_init();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    /* tick 1 terminates the engine's sessions before it returns */
    g_sever = "t_loss";
    cJSON *p = t_json("{\"n\": 4}");
    pl_action a = {PL_ACTION_VERSION, "ticks", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "lost";
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    g_sever = NULL;
    if (st == PL_OK) { /* it ran, and failed with a recorded reason */
        cr_expect_eq(o->status, PL_RUN_FAILED);
        cr_expect_eq(o->error, PL_ESTORE, "%s", o->reason);
        pl_outcome_free(o);
    } else {
        cr_expect_eq(st, PL_ESTORE, "%s: %s", pl_status_name(st), pl_errmsg());
        cr_expect(strstr(pl_errmsg(), "connection") != NULL, "%s", pl_errmsg());
        cr_expect_null(o);
    }
    /* the next calls reconnect; the run goes on from its durable steps */
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "lost", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    cr_expect_eq(o->calls_served, 1, "tick 0 was durable");
    pl_outcome_free(o);
    char fx[128];
    effects_read(fx, sizeof fx);
    cr_expect_str_eq(fx, "0,1,1,2,3",
                     "tick 1 was in flight, no other ran "
                     "twice");
    cr_expect_eq(pl_run_verify(e, "lost"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* Under every durability mode, a second engine in another process sees
 * what the first committed. */
Test(pg, durability_modes_commit)
{
    char *uri = store_uri("t_modes");
    pl_registry *reg = registry();
    pl_durability modes[] = {PL_DURABILITY_SYNC, PL_DURABILITY_GROUP,
                             PL_DURABILITY_PROCESS};
    for (int i = 0; i < 3; i++) {
        pl_engine *e = t_engine(uri, reg, modes[i]);
        char id[16];
        snprintf(id, sizeof id, "m-%d", i);
        pl_outcome_free(t_start(e, "chain", "{\"n\": 2}", id));
        pl_engine_close(e);
    }
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    seen_runs s = {0};
    cr_assert_eq(pl_engine_runs(e, visit, &s), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(s.n, 3);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* Processes opening a new schema at once all get it, created once. */
Test(pg, first_opens_race)
{
    char *uri = store_uri("t_race");
    pid_t pids[4];
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1, "fork: %s", strerror(errno));
        if (pids[i] == 0) {
            pl_registry *reg = registry();
            pl_engine *e = NULL;
            int st = pl_engine_open(&e, uri, reg, NULL);
            if (st) {
                fprintf(stderr, "open: %s\n", pl_errmsg());
                _exit(1);
            }
            pl_engine_close(e);
            pl_registry_free(reg);
            _exit(0);
        }
    }
    for (int i = 0; i < 4; i++) {
        int ws = 0;
        cr_assert_eq(waitpid(pids[i], &ws, 0), pids[i]);
        cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                  "open %d failed (status %d)", i, ws);
    }
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "echo", "{}", "after-race"));
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* A read-only engine reads a store it may not write, and needs it there. */
Test(pg, read_only_and_statistics)
{
    char *uri = store_uri("t_readonly");
    pl_registry *reg = registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.read_only = true;
    pl_engine *ro = NULL;
    cr_expect_eq(pl_engine_open(&ro, uri, reg, &o), PL_ENOTFOUND,
                 "a schema that is not there: %s", pl_errmsg());
    cr_expect_null(ro);

    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 2}", "r-1"));
    pl_store_stats stats = {PL_STORE_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(pl_engine_stats(&stats, e), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(stats.runs, 1);
    cr_expect_gt(stats.step_records, 4);
    cr_expect_eq(stats.page_size, 8192);
    cr_expect_gt(stats.file_bytes, 0);
    cr_expect_geq(stats.used_pages * stats.page_size, stats.file_bytes);
    pl_engine_close(e);

    cr_assert_eq(pl_engine_open(&ro, uri, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(ro, "r-1"), PL_RUN_COMPLETED);
    cr_expect_eq(pl_run_verify(ro, "r-1"), PL_OK, "%s", pl_errmsg());
    cJSON *p = t_json("{}");
    pl_action a = {PL_ACTION_VERSION, "echo", p, NULL, 0, NULL};
    pl_outcome *out = NULL;
    int st = pl_run_start(&out, ro, &a, NULL);
    cr_expect_eq(st, PL_ESTATE, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect_null(out);
    cJSON_Delete(p);
    pl_engine_close(ro);
    pl_registry_free(reg);
    free(uri);
}
