/*
 * test_pg_restart_signal.c -- a signal that continues a waiting run in the
 * caller's thread (pl_run_signal() with an outcome pointer), across a
 * PostgreSQL server stopped in immediate mode (no shutdown checkpoint,
 * crash recovery on start: what is not in the WAL the server flushed is
 * gone).  The delivery rides the run's next commit (core/replay/run.h,
 * RIDES): a stop before that commit leaves nothing of it, a stop after it
 * leaves the delivery and its consumption both; a signal acknowledged
 * (PL_OK) is never lost; the event is consumed once.  (A stop keeps what
 * the server wrote to the kernel, which a commit not waiting for its
 * flush has mostly done within milliseconds too: that a signal's commits
 * are synced is counted by test_pg_ride.)  A binary of its own,
 * so that the restarts cut no other test's sessions (tests/pg_run.sh
 * starts a server per binary).
 */
#include "support.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(pg_restart_signal, .fini = t_cleanup, .timeout = 120);

#define SCHEMA "t_restart_signal"

/* Where the hook restarts the server: not, at the first step the
 * signalled run appends (before the ride's commit), or at its first
 * commit (the ride's: before the run's end is written). */
typedef enum { AT_NONE, AT_STEP, AT_COMMIT } restart_at;
static restart_at g_at = AT_NONE;
static int g_restarts;

static void restart_server(void)
{
    t_pg_restart();
    g_restarts++;
}

/* After a restart: the engine's idle connections to the server that was
 * stopped fail once each, and are dropped; until a look at run @p id
 * succeeds. */
static void settle(pl_engine *e, const char *id)
{
    int st = PL_ESTORE;
    for (int i = 0; i < 20 && st == PL_ESTORE; i++) {
        pl_run_info *ri = NULL;
        st = pl_run_get(&ri, e, id);
        pl_run_info_free(ri);
    }
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
}

static void on_event(const pl_event *ev, void *user)
{
    (void)user;
    if ((g_at == AT_STEP && ev->kind == PL_EVENT_STEP_APPENDED) ||
        (g_at == AT_COMMIT && ev->kind == PL_EVENT_COMMIT)) {
        g_at = AT_NONE;
        restart_server();
    }
}

/* "waiter": waits for "go", then calls "mark" and completes. */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "mark", "{}");
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static int mark(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_resultf(out, "{}");
}

static pl_engine *open_engine(pl_registry **reg)
{
    *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(*reg, "waiter", waiter, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(*reg, "mark", mark, NULL), PL_OK);
    char *uri = t_pg_store_uri(SCHEMA);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_SYNC;
    eo.on_event = on_event;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, uri, *reg, &eo), PL_OK, "%s", pl_errmsg());
    free(uri);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

static void park(pl_engine *e, const char *id)
{
    pl_action a = {PL_ACTION_VERSION, "waiter", pl_json_empty(), NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
}

static int signal_go(pl_engine *e, const char *id, pl_outcome **o)
{
    cJSON *p = cJSON_CreateObject();
    int st = pl_run_signal(o, e, id, "go", p);
    cJSON_Delete(p);
    return st;
}

static int count_event(const pl_step *s, void *user)
{
    *(int *)user += pl_step_type_of(s) == PL_STEP_EVENT;
    return 0;
}

/* Run @p id's events: consumed (its `event` steps), and waiting in its
 * inbox, as the server has them now (a connection of its own). */
static void events_of(pl_engine *e, const char *id, int *consumed, int *waiting)
{
    *consumed = 0;
    cr_assert_eq(pl_run_walk(e, id, count_event, consumed), PL_OK, "%s",
                 pl_errmsg());
    PGconn *c = t_pg_admin();
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM " SCHEMA ".inbox i JOIN " SCHEMA
             ".runs r ON r.num = i.run WHERE r.id = convert_to('%s', 'UTF8')",
             id);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
                 PQresultErrorMessage(r));
    *waiting = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
}

/* Continue run @p id here until it has completed (a store error on the
 * way is the restart's); its events once consumed, none waiting. */
static void finish(pl_engine *e, const char *id)
{
    for (int i = 0; i < 5 && status_of(e, id) != PL_RUN_COMPLETED; i++) {
        pl_outcome *o = NULL;
        (void)pl_run_continue(&o, e, id, NULL);
        pl_outcome_free(o);
    }
    cr_expect_eq(status_of(e, id), PL_RUN_COMPLETED, "%s: %s", id,
                 pl_run_status_name(status_of(e, id)));
    int consumed, waiting;
    events_of(e, id, &consumed, &waiting);
    cr_expect_eq(consumed, 1, "%s: the event consumed %d times", id, consumed);
    cr_expect_eq(waiting, 0, "%s: %d events left in the inbox", id, waiting);
    cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s: %s", id, pl_errmsg());
}

Test(pg_restart_signal, a_signal_survives_an_immediate_stop_or_leaves_nothing)
{
    pl_registry *reg;
    pl_engine *e = open_engine(&reg);
    int consumed, waiting;

    /* acknowledged, then the server stopped at once: the event is there,
     * consumed with the run's steps (nothing was waiting on a later
     * flush of the WAL) */
    park(e, "acked");
    pl_outcome *o = NULL;
    cr_assert_eq(signal_go(e, "acked", &o), PL_OK, "%s", pl_errmsg());
    cr_assert_not_null(o, "continued in the caller's thread");
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    restart_server();
    settle(e, "acked");
    finish(e, "acked");

    /* stopped before the ride's commit: nothing of the signal was
     * acknowledged by that commit; whatever pl_run_signal() then says,
     * an acknowledged signal is durable and an unacknowledged one is
     * there whole or not at all */
    park(e, "before");
    g_at = AT_STEP;
    int restarts = g_restarts;
    o = NULL;
    int st = signal_go(e, "before", &o);
    pl_outcome_free(o);
    cr_assert_eq(g_restarts, restarts + 1, "the server was restarted");
    restart_server(); /* what was acknowledged is flushed, or lost here */
    settle(e, "before");
    events_of(e, "before", &consumed, &waiting);
    if (st == PL_OK)
        cr_expect_eq(consumed + waiting, 1,
                     "an acknowledged signal: %d consumed, %d waiting",
                     consumed, waiting);
    else
        cr_expect(consumed + waiting <= 1, "%s: %d consumed, %d waiting",
                  pl_status_name(st), consumed, waiting);
    if (consumed + waiting == 0) { /* not delivered: sent again */
        cr_expect_eq(status_of(e, "before"), PL_RUN_WAITING);
        o = NULL;
        cr_assert_eq(signal_go(e, "before", &o), PL_OK, "%s", pl_errmsg());
        pl_outcome_free(o);
    }
    finish(e, "before");

    /* stopped after the ride's commit, before the run's end: the delivery
     * and its consumption are both durable; the run goes on from there */
    park(e, "after");
    g_at = AT_COMMIT;
    restarts = g_restarts;
    o = NULL;
    st = signal_go(e, "after", &o);
    pl_outcome_free(o);
    cr_assert_eq(g_restarts, restarts + 1, "the server was restarted");
    settle(e, "after");
    events_of(e, "after", &consumed, &waiting);
    cr_expect_eq(consumed, 1, "%s: the ride's commit was lost (%d consumed)",
                 pl_status_name(st), consumed);
    cr_expect_eq(waiting, 0, "%d waiting", waiting);
    finish(e, "after");

    pl_engine_close(e);
    pl_registry_free(reg);
}
