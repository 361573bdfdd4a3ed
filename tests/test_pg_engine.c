/*
 * test_pg_engine.c -- the engine on the PostgreSQL store (ledger/pg/),
 * through the public API, against a real server that tests/pg_run.sh starts
 * for this binary (PL_TEST_PG_URI), each test in a schema of its own: start
 * and complete, group commit on threads and a pool, a crash (fork, SIGKILL)
 * continued with nothing finished done twice, suspend and resume,
 * verification and a tampered step, the runs' listing order, an unknown
 * format version, bad URIs, an unreachable server, connections terminated
 * in the middle of a run, durability modes, racing first opens, read-only
 * engines and statistics.  test_pg.c: the store's own functions.
 */
#include "support.h"

#include "pg_store.h"
#include "support_pg_store.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the server's sessions ------------------------------------------------ */

/* Terminate the server sessions of the engine whose schema is @p schema. */
static int terminate_sessions(const char *schema)
{
    PGconn *c = t_pg_admin();
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

/* ---- the engine on it ---------------------------------------------------- */

Test(pg, start_complete_and_replay)
{
    char *uri = t_pg_store_uri("t_start");
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
    char *uri = t_pg_store_uri("t_group");
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
    char *uri = t_pg_store_uri("t_pool");
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
    char *uri = t_pg_store_uri("t_crash");
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
    char *uri = t_pg_store_uri("t_suspend");
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
    char *uri = t_pg_store_uri("t_verify");
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
    /* (a row's step, a pair's first or its second: the call's
     * action_result) */
    pg_admin_exec(
        "WITH x AS (SELECT int8send((SELECT num FROM t_verify.runs "
        "WHERE id = 'v-1'::bytea)) || '\\x00000003'::bytea AS k) "
        "UPDATE t_verify.steps s SET v = CASE WHEN s.k = x.k AND s.v1 "
        "IS NULL THEN set_byte(s.v, length(s.v) - 1, get_byte(s.v, "
        "length(s.v) - 1) # 4) ELSE s.v END, v1 = CASE WHEN s.k = x.k "
        "THEN set_byte(s.v1, length(s.v1) - 1, get_byte(s.v1, "
        "length(s.v1) - 1) # 4) ELSE s.v1 END, v2 = CASE WHEN s.k2 = x.k THEN "
        "set_byte(s.v2, length(s.v2) - 1, get_byte(s.v2, length(s.v2) "
        "- 1) # 4) ELSE s.v2 END FROM x WHERE s.k = x.k OR s.k2 = x.k");
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
    char *uri = t_pg_store_uri("t_anchor");
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
    pg_admin_exec("UPDATE t_anchor.steps SET v = set_byte(v, length(v) - 1, "
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
    char *uri = t_pg_store_uri("t_runs");
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

typedef struct page_seen {
    size_t n, running, alive;
} page_seen;

static int page_visit(const pl_run_info *info, void *user)
{
    page_seen *s = user;
    s->n++;
    s->running += info->status == PL_RUN_RUNNING;
    s->alive += info->owner_alive;
    return 0;
}

/* Listing runs reads their states a page at a time (256 runs), and the
 * leases of a page's running runs together: never a round trip a run. */
Test(pg, a_page_of_runs_is_one_query_of_states)
{
    char *uri = t_pg_store_uri("t_runpage");
    effects_init();
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_PROCESS);
    crash_child(uri, 1); /* "crashed": running, its owner dead */
    for (int i = 0; i < 300; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%03d", i);
        pl_outcome_free(t_start(e, "echo", "{}", id));
    }
    pl__pg_counts c0, c1;
    pl__pg_counts_get(&c0);
    page_seen s = {0};
    cr_assert_eq(pl_engine_runs(e, page_visit, &s), PL_OK, "%s", pl_errmsg());
    pl__pg_counts_get(&c1);
    cr_expect_eq(s.n, 301);
    cr_expect_eq(s.running, 1);
    cr_expect_eq(s.alive, 0, "the killed owner counts as alive");
    /* pages of 256 and 45 runs, then an empty one: 3 lists, 2 reads of
     * states, 1 of leases (the page with the crashed run) */
    cr_expect_eq(c1.round_trips - c0.round_trips, 6,
                 "%llu round trips to list 301 runs",
                 (unsigned long long)(c1.round_trips - c0.round_trips));
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

Test(pg, unknown_format_is_eversion)
{
    char *uri = t_pg_store_uri("t_format");
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    pl_engine_close(e);
    pg_admin_exec("UPDATE t_format.meta SET v = 99 WHERE k = 'format'");
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
    char *uri = t_pg_store_uri("Bad-Name");
    cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "schema") != NULL, "%s", pl_errmsg());
    free(uri);
    uri = t_pg_store_uri("");
    cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_EINVAL);
    free(uri);
    cr_expect_eq(pl_engine_open(&e,
                                "postgresql:///postgres?host=/nonexistent-dir",
                                reg, NULL),
                 PL_ESTORE);
    cr_expect(strstr(pl_errmsg(), "cannot connect") != NULL, "%s", pl_errmsg());
    /* a URI libpq cannot read is refused before any connection */
    cr_expect_eq(pl_engine_open(&e, "postgres://[bad", reg, NULL), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "not a valid postgresql:// URI") != NULL,
              "%s", pl_errmsg());
    cr_expect_eq(pl_engine_open(&e, "postgresql://u:secret@[::1/postgres", reg,
                                NULL),
                 PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "secret") == NULL, "%s", pl_errmsg());
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
    char *uri = t_pg_store_uri("t_loss");
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
 * what the first committed, and each mode's commits ran with the
 * synchronous_commit the guide's table gives it (sync and group on,
 * process off): a trigger on the store's steps records the setting of the
 * session that inserts them. */
Test(pg, durability_modes_commit)
{
    char *uri = t_pg_store_uri("t_modes");
    pl_registry *reg = registry();
    pl_engine_close(t_engine(uri, reg, PL_DURABILITY_SYNC)); /* the schema */
    pg_admin_exec("CREATE TABLE public.t_modes_seen (v text)");
    pg_admin_exec("CREATE FUNCTION public.t_modes_probe() RETURNS trigger "
                  "LANGUAGE plpgsql AS $$BEGIN INSERT INTO "
                  "public.t_modes_seen VALUES "
                  "(current_setting('synchronous_commit')); RETURN NULL; "
                  "END$$");
    pg_admin_exec("CREATE TRIGGER probe AFTER INSERT ON t_modes.steps FOR "
                  "EACH STATEMENT EXECUTE FUNCTION public.t_modes_probe()");
    pl_durability modes[] = {PL_DURABILITY_SYNC, PL_DURABILITY_GROUP,
                             PL_DURABILITY_PROCESS};
    static const char *const want[] = {"on", "on", "off"};
    for (int i = 0; i < 3; i++) {
        pl_engine *e = t_engine(uri, reg, modes[i]);
        char id[16];
        snprintf(id, sizeof id, "m-%d", i);
        pl_outcome_free(t_start(e, "chain", "{\"n\": 2}", id));
        pl_engine_close(e);
        cr_expect_gt(t_pg_number("SELECT count(*) FROM public.t_modes_seen"), 0,
                     "mode %d inserted no steps", i);
        char sql[128];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM public.t_modes_seen WHERE v <> '%s'",
                 want[i]);
        cr_expect_eq(t_pg_number(sql), 0,
                     "mode %d committed without synchronous_commit = %s", i,
                     want[i]);
        pg_admin_exec("DELETE FROM public.t_modes_seen");
    }
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    seen_runs s = {0};
    cr_assert_eq(pl_engine_runs(e, visit, &s), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(s.n, 3);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* Processes opening a new schema at once all get it, created once, and
 * leave it current: the next open runs no setup (ledger/pg/pg_setup.c),
 * so no function of the schema, nor meta's 'setup', gets a new row
 * version. */
Test(pg, first_opens_race)
{
    char *uri = t_pg_store_uri("t_race");
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
    const char *versions =
        "SELECT ('x' || substr(md5((SELECT string_agg(p.oid::text || ':' || "
        "p.xmin::text, ',' ORDER BY p.oid) FROM pg_proc p JOIN pg_namespace "
        "n ON n.oid = p.pronamespace WHERE n.nspname = 't_race') || (SELECT "
        "string_agg(k || ':' || xmin::text, ',' ORDER BY k) FROM "
        "t_race.meta WHERE k = 'setup')), 1, 15))::bit(60)::bigint";
    long long before = t_pg_number(versions);
    pl_registry *reg = registry();
    pl_engine *e = t_engine(uri, reg, PL_DURABILITY_SYNC);
    cr_expect_eq(t_pg_number(versions), before,
                 "the racing opens left the schema not current");
    pl_outcome_free(t_start(e, "echo", "{}", "after-race"));
    pl_engine_close(e);
    pl_registry_free(reg);
    free(uri);
}

/* A read-only engine reads a store it may not write, and needs it there. */
Test(pg, read_only_and_statistics)
{
    char *uri = t_pg_store_uri("t_readonly");
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

/* The guide: postgres:// is postgresql://; without schema= the store is
 * the schema "policyledger", made of the tables meta, runs, state, steps
 * and leases and the sequence run_num; a schema name is
 * [a-z_][a-z0-9_]*, not beginning with pg_. */
Test(pg, the_default_schema_the_short_scheme_and_schema_names)
{
    pl_registry *reg = registry();
    const char *base = t_pg_server();
    cr_assert(!strncmp(base, "postgresql://", 13), "%s", base);
    pl_engine *e = t_engine(base, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "echo", "{}", "in-default"));
    pl_engine_close(e);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM information_schema.tables "
                             "WHERE table_schema = 'policyledger' AND "
                             "table_name IN ('meta', 'runs', 'state', "
                             "'steps', 'leases')"),
                 5);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM pg_sequences WHERE "
                             "schemaname = 'policyledger' AND "
                             "sequencename = 'run_num'"),
                 1);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM policyledger.runs"), 1);

    char *uri = t_pg_store_uri("_short_scheme_9");
    size_t n = strlen(uri) + 1;
    char *shorter = malloc(n);
    cr_assert_not_null(shorter);
    snprintf(shorter, n, "postgres://%s", uri + strlen("postgresql://"));
    e = t_engine(shorter, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "echo", "{}", "short"));
    pl_engine_close(e);
    cr_expect_eq(t_pg_number("SELECT count(*) FROM _short_scheme_9.runs"), 1);
    free(shorter);
    free(uri);

    /* pg_ begins the names PostgreSQL keeps for itself (pg_temp is a
     * session's own temporary schema): refused before any connection, as a
     * bad argument, not as a store that failed */
    static const char *const bad[] = {
        "9lives", "a-b", "a.b", "ab c", "Abc", "pg_temp", "pg_x", "pg_catalog"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uri = t_pg_store_uri(bad[i]);
        e = NULL;
        cr_expect_eq(pl_engine_open(&e, uri, reg, NULL), PL_EINVAL, "%s: %s",
                     bad[i], pl_errmsg());
        cr_expect_null(e);
        free(uri);
    }
    pl_registry_free(reg);
}
