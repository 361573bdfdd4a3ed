/*
 * test_chain.c -- runs continued as new (pl_ctx_continue_as_new()): a run
 * ends `continued` and its successor is queued in the same commit; the
 * links name each other; workers and pl_run_continue() go on with the
 * successor; a continued link replays, writing nothing.  On the store the
 * suite runs on: LMDB, and PostgreSQL as pg_test_chain.
 */
#include "support.h"

#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* {"left": L}: two calls to "add", then, while L > 0, continue as new with
 * {"left": L - 1}; the result is {"left": L}. */
static int looper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(a->payload, "left");
    int left = cJSON_IsNumber(l) ? l->valueint : 0;
    for (int i = 0; i < 2; i++) {
        cJSON *p = t_json("{\"a\": 1, \"b\": 2}");
        pl_action call = {PL_ACTION_VERSION, "add", p, NULL, 0, NULL};
        pl_step *res = NULL;
        int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        pl_step_free(res);
        if (st)
            return st;
    }
    if (left > 0) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddNumberToObject(next, "left", left - 1);
        int st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "left", left);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Misuses, each reporting what pl_ctx_continue_as_new() returned. */
static int g_misuse_rc[4];

static int callee_continues(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                            void *user)
{
    (void)a;
    (void)user;
    g_misuse_rc[0] = pl_ctx_continue_as_new(ctx, pl_json_empty());
    return pl_steps_add_result(out, pl_json_empty());
}

static int misuser(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    pl_action call = {
        PL_ACTION_VERSION, "callee_continues", pl_json_empty(), NULL, 0, NULL};
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
    pl_step_free(res);
    if (st)
        return st;
    cJSON *arr = cJSON_CreateArray();
    g_misuse_rc[1] = pl_ctx_continue_as_new(ctx, arr);
    cJSON_Delete(arr);
    g_misuse_rc[2] = pl_ctx_continue_as_new(ctx, pl_json_empty());
    g_misuse_rc[3] = pl_ctx_continue_as_new(ctx, pl_json_empty());
    return pl_steps_add_result(out, pl_json_empty());
}

static pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    const struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"looper", looper},
                {"misuser", misuser},
                {"callee_continues", callee_continues}};
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

static pl_run_info *get(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s: %s", id, pl_errmsg());
    return info;
}

Test(chain, a_run_continues_as_new_and_links_both_ways)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "looper", "{\"left\": 2}", "loop");
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    cr_assert_str_eq(o->successor, "loop~1");
    const cJSON *left = cJSON_GetObjectItem(pl_outcome_result(o), "left");
    cr_assert(cJSON_IsNumber(left) && left->valueint == 2, "its result kept");
    pl_outcome_free(o);

    pl_run_info *info = get(e, "loop");
    cr_assert_eq(info->status, PL_RUN_CONTINUED);
    cr_assert_str_eq(pl_run_status_name(info->status), "continued");
    cr_assert_str_eq(info->successor, "loop~1");
    cr_assert_null(info->predecessor);
    pl_run_info_free(info);
    info = get(e, "loop~1");
    cr_assert_eq(info->status, PL_RUN_SUBMITTED, "queued for a worker");
    cr_assert_str_eq(info->predecessor, "loop");
    cr_assert_null(info->successor);
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(info->payload, "left")));
    cr_assert_eq(cJSON_GetObjectItem(info->payload, "left")->valueint, 1);
    pl_run_info_free(info);

    /* on along the chain */
    cr_assert_eq(pl_run_continue(&o, e, "loop~1", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    cr_assert_str_eq(o->successor, "loop~2");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_continue(&o, e, "loop~2", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_null(o->successor);
    pl_outcome_free(o);
    info = get(e, "loop~2");
    cr_assert_str_eq(info->predecessor, "loop~1");
    pl_run_info_free(info);

    /* a continued link replays, executing and writing nothing */
    int adds = t_calls.add;
    uint8_t before[PL_HASH_LEN], after[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(before, e, "loop"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_continue(&o, e, "loop", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    cr_assert_str_eq(o->successor, "loop~1");
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->calls_served, 2);
    pl_outcome_free(o);
    cr_assert_eq(t_calls.add, adds);
    cr_assert_eq(pl_run_head(after, e, "loop"), PL_OK);
    cr_assert_eq(memcmp(before, after, PL_HASH_LEN), 0);
    static const char *const links[] = {"loop", "loop~1", "loop~2"};
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(pl_run_verify(e, links[i]), PL_OK, "%s: %s", links[i],
                     pl_errmsg());

    /* a start asking for the outcome gets the recorded one */
    cJSON *p = t_json("{\"left\": 2}");
    pl_action a = {PL_ACTION_VERSION, "looper", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "loop";
    ro.if_exists = PL_IF_EXISTS_OUTCOME;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    cr_assert_str_eq(o->successor, "loop~1");
    pl_outcome_free(o);

    /* a continued link has ended: it may be deleted */
    cr_assert_eq(pl_run_delete(e, "loop"), PL_OK, "%s", pl_errmsg());
    pl_tombstone t = PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, "loop"), PL_OK);
    cr_assert_eq(t.status, PL_RUN_CONTINUED);
    cr_assert_eq(pl_run_verify(e, "loop~1"), PL_OK, "the rest stays whole");
    /* ... and pruned as one: the continued link, not the completed one */
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    po.statuses = 1u << PL_RUN_CONTINUED;
    uint64_t pruned = 0;
    cr_assert_eq(pl_engine_prune(e, &po, &pruned), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pruned, 1);
    t = (pl_tombstone)PL_TOMBSTONE_INIT;
    cr_assert_eq(pl_run_tombstone(&t, e, "loop~1"), PL_OK);
    cr_expect_eq(t.status, PL_RUN_CONTINUED);
    pl_run_info_free(get(e, "loop~2"));
    pl_engine_close(e);
    pl_registry_free(reg);
}

typedef struct worker_arg {
    pl_engine *e;
    int rc;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *w = p;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 10;
    w->rc = pl_worker_run(w->e, &wo);
    return NULL;
}

Test(chain, a_worker_goes_on_along_the_chain)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cJSON *p = t_json("{\"left\": 3}");
    pl_action a = {PL_ACTION_VERSION, "looper", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "w";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    worker_arg w = {e, -1};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, worker_main, &w), 0);
    pl_run_status last = 0;
    for (int i = 0; i < 6000 && last != PL_RUN_COMPLETED; i++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
        pl_run_info *info = NULL;
        if (pl_run_get(&info, e, "w~3") == PL_OK)
            last = info->status;
        pl_run_info_free(info);
    }
    pl_worker_stop(e);
    pthread_join(th, NULL);
    cr_assert_eq(w.rc, PL_OK);
    cr_assert_eq(last, PL_RUN_COMPLETED, "the last link ran to its end");
    static const char *const links[] = {"w", "w~1", "w~2"};
    for (size_t i = 0; i < 3; i++) {
        pl_run_info *info = get(e, links[i]);
        cr_assert_eq(info->status, PL_RUN_CONTINUED, "%s", links[i]);
        pl_run_info_free(info);
    }
    cr_assert_eq(t_calls.add, 8, "each link's calls made once");
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(chain, misuse_is_refused)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "misuser", "{}", "mis");
    cr_assert_eq(g_misuse_rc[0], PL_EINVAL, "only the root continues");
    cr_assert_eq(g_misuse_rc[1], PL_EINVAL, "a payload is an object");
    cr_assert_eq(g_misuse_rc[2], PL_OK);
    cr_assert_eq(g_misuse_rc[3], PL_ESTATE, "once per execution");
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    cr_assert_eq(pl_ctx_continue_as_new(NULL, pl_json_empty()), PL_EINVAL);

    /* a chain numbers its links; an id with no room left is refused */
    char id[PL_MAX_RUN_ID + 1];
    memset(id, 'x', PL_MAX_RUN_ID - 1);
    id[PL_MAX_RUN_ID - 1] = '\0';
    cJSON *p = t_json("{\"left\": 1}");
    pl_action a = {PL_ACTION_VERSION, "looper", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_FAILED);
    cr_assert(strstr(o->reason, "longer than"), "%s", o->reason);
    pl_outcome_free(o);

    /* a successor's id taken by a live run: nothing is written */
    ro.run_id = "taken~1";
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK);
    ro.run_id = "taken";
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_EEXIST);
    cr_assert(strstr(pl_errmsg(), "successor"), "%s", pl_errmsg());
    pl_run_info *info = get(e, "taken~1");
    cr_assert_eq(info->status, PL_RUN_SUBMITTED);
    cr_assert_null(info->predecessor);
    pl_run_info_free(info);
    info = get(e, "taken");
    cr_assert_neq(info->status, PL_RUN_CONTINUED);
    pl_run_info_free(info);
    cJSON_Delete(p);

    /* "~" counts on from a chain's number */
    o = t_start(e, "looper", "{\"left\": 1}", "chat~7");
    cr_assert_str_eq(o->successor, "chat~8");
    pl_outcome_free(o);
    o = t_start(e, "looper", "{\"left\": 1}", "odd~07");
    cr_assert_str_eq(o->successor, "odd~07~1");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* {"n": N}: wait for the event "ping" N times, then continue as new with
 * {"n": N} again, at most twice along the chain (payload "left"). */
static int pinger(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(a->payload, "left");
    int left = cJSON_IsNumber(l) ? l->valueint : 0;
    cJSON *got = NULL;
    int st = pl_ctx_wait_event(&got, ctx, "ping", PL_WAIT_FOREVER);
    if (st)
        return st;
    cJSON_Delete(got);
    if (left > 0) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddNumberToObject(next, "left", left - 1);
        st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    return pl_steps_add_result(out, pl_json_empty());
}

/* Run @p id of pinger, waiting, is signalled: it continues as new, and
 * its successor @p next is run to its wait. */
static void ping_on(pl_engine *e, const char *id, const char *next)
{
    cJSON *ev = t_json("{}");
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_signal(&o, e, id, "ping", ev), PL_OK, "%s",
                 pl_errmsg());
    cr_assert(o && o->status == PL_RUN_CONTINUED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_continue(&o, e, next, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    cJSON_Delete(ev);
}

/* An engine on a new store whose registry has "pinger", waits parking. */
static pl_engine *pinger_engine(pl_registry **reg)
{
    *reg = registry();
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "pinger";
    d.fn = pinger;
    cr_assert_eq(pl_registry_add(*reg, &d), PL_OK);
    pl_engine *e = t_engine(t_store_path(), *reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

Test(chain, events_sent_to_a_continued_run_reach_its_successor)
{
    pl_registry *reg = NULL;
    pl_engine *e = pinger_engine(&reg);
    pl_outcome *o = t_start(e, "pinger", "{\"left\": 1}", "pi");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    /* to "pi": it continues as "pi~1", which waits */
    ping_on(e, "pi", "pi~1");
    cJSON *ev = t_json("{}");
    /* still to "pi": it reaches "pi~1", which completes */
    cr_assert_eq(pl_run_signal(&o, e, "pi", "ping", ev), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_not_null(o, "the successor was continued here");
    cr_assert_str_eq(o->run_id, "pi~1");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    /* the chain has ended: refused, naming the last link */
    cr_assert_eq(pl_run_signal(NULL, e, "pi", "ping", ev), PL_ESTATE);
    cr_assert(strstr(pl_errmsg(), "pi~1"), "%s", pl_errmsg());
    /* a cancellation goes the same way (time.h): to the waiting link */
    o = t_start(e, "pinger", "{\"left\": 1}", "pc");
    pl_outcome_free(o);
    ping_on(e, "pc", "pc~1");
    cr_assert_eq(pl_run_cancel(e, "pc", "stop"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(status_of(e, "pc"), PL_RUN_CONTINUED);
    cr_expect_eq(status_of(e, "pc~1"), PL_RUN_CANCELLED);
    cJSON_Delete(ev);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Continued links are final, and pruned as such (guide: Long-lived runs):
 * an event or a cancellation sent to the chain by the id its senders know
 * still reaches the link that goes on past deleted ones while their
 * tombstones last; a run deleted that had ended otherwise, or whose
 * tombstone is gone, is not found. */
Test(chain, events_reach_the_successor_past_deleted_links)
{
    pl_registry *reg = NULL;
    pl_engine *e = pinger_engine(&reg);
    pl_outcome *o = t_start(e, "pinger", "{\"left\": 3}", "pd");
    pl_outcome_free(o);
    ping_on(e, "pd", "pd~1");
    ping_on(e, "pd~1", "pd~2");
    cr_assert_eq(pl_run_delete(e, "pd"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_delete(e, "pd~1"), PL_OK, "%s", pl_errmsg());
    /* to "pd", deleted, and "pd~1", deleted: both reach "pd~2" */
    cJSON *ev = t_json("{}");
    cr_assert_eq(pl_run_signal(NULL, e, "pd~1", "ping", ev), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_run_signal(&o, e, "pd", "ping", ev), PL_OK, "%s",
                 pl_errmsg());
    cr_assert(o && !strcmp(o->run_id, "pd~2") && o->status == PL_RUN_CONTINUED);
    pl_outcome_free(o);
    cr_assert_eq(status_of(e, "pd~3"), PL_RUN_SUBMITTED);
    cr_assert_eq(pl_run_cancel(e, "pd", "stop"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(status_of(e, "pd~3"), PL_RUN_CANCELLED,
                 "the cancel reached it");
    /* its outcome asked again: continued, naming its successor (runs.h) */
    cJSON *p = t_json("{\"left\": 3}");
    pl_action a = {PL_ACTION_VERSION, "pinger", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "pd~1";
    ro.if_exists = PL_IF_EXISTS_OUTCOME;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    cr_assert(o->successor && !strcmp(o->successor, "pd~2"), "%s",
              o->successor ? o->successor : "no successor");
    pl_outcome_free(o);
    cJSON_Delete(p);
    /* a deleted run that did not continue: not found, as before */
    o = t_start(e, "looper", "{\"left\": 0}", "done");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_delete(e, "done"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_signal(NULL, e, "done", "ping", ev), PL_ENOTFOUND);
    cr_assert(strstr(pl_errmsg(), "done"), "%s", pl_errmsg());
    cr_assert_eq(pl_run_signal(NULL, e, "done~1", "ping", ev), PL_ENOTFOUND);
    cJSON_Delete(ev);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A chain whose last link ended and was then deleted (a prune of the
 * completed runs keeps the continued ones) has ended: an event or a
 * cancellation sent to a link still stored is refused with PL_ESTATE, as
 * before the delete, naming the link and when it was deleted; it was
 * PL_ENOTFOUND, "no run 'end~1'", for a run that is there. */
Test(chain, a_chain_whose_last_link_was_deleted_has_ended)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "looper", "{\"left\": 1}", "end");
    pl_outcome_free(o);
    cr_assert_eq(pl_run_continue(&o, e, "end~1", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cr_assert_eq(pl_run_delete(e, "end~1"), PL_OK, "%s", pl_errmsg());
    cJSON *ev = t_json("{}");
    for (int cancel = 0; cancel < 2; cancel++) {
        int st = cancel ? pl_run_cancel(e, "end", "stop")
                        : pl_run_signal(&o, e, "end", "ping", ev);
        cr_assert_eq(st, PL_ESTATE, "%s: %s", pl_status_name(st), pl_errmsg());
        cr_assert(strstr(pl_errmsg(), "'end~1'") &&
                      strstr(pl_errmsg(), "completed") &&
                      strstr(pl_errmsg(), "deleted on"),
                  "%s", pl_errmsg());
    }
    cr_assert_null(o);
    cr_assert_eq(status_of(e, "end"), PL_RUN_CONTINUED, "left as it was");
    cJSON_Delete(ev);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A continued link imported under another id is a copy: its record still
 * names the original's successor, but events and cancellations sent to
 * the copy are refused, never passed on into the original chain. */
Test(chain, a_copy_imported_under_another_id_passes_nothing_on)
{
    pl_registry *reg = NULL;
    pl_engine *e = pinger_engine(&reg);
    pl_outcome *o = t_start(e, "pinger", "{\"left\": 1}", "pk");
    pl_outcome_free(o);
    ping_on(e, "pk", "pk~1");
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    cr_assert_eq(pl_run_export(e, "pk", f), PL_OK, "%s", pl_errmsg());
    rewind(f);
    char *id = NULL;
    cr_assert_eq(pl_run_import(&id, e, f, "pk-copy"), PL_OK, "%s", pl_errmsg());
    free(id);
    fclose(f);
    cJSON *ev = t_json("{}");
    cr_assert_eq(pl_run_signal(NULL, e, "pk-copy", "ping", ev), PL_ESTATE);
    cr_assert(strstr(pl_errmsg(), "pk-copy"), "%s", pl_errmsg());
    cr_assert_eq(pl_run_cancel(e, "pk-copy", "no"), PL_ESTATE);
    cr_assert_eq(status_of(e, "pk~1"), PL_RUN_WAITING, "the chain was reached");
    /* the original still passes them on */
    cr_assert_eq(pl_run_signal(&o, e, "pk", "ping", ev), PL_OK, "%s",
                 pl_errmsg());
    cr_assert(o && !strcmp(o->run_id, "pk~1") && o->status == PL_RUN_COMPLETED);
    pl_outcome_free(o);
    cJSON_Delete(ev);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the successor's place in the queue ------------------------------------ */

/* A take's claim that writes the run's state as it was. */
static int as_it_was(const pl__taken *t, pl__buf *state, bool *drop, void *user)
{
    (void)drop;
    (void)user;
    pl__buf_reset(state);
    return pl__buf_append(state, t->state, t->state_len);
}

/* Queue run @p id of looper {"left": 1}, with @p priority and, unless
 * NULL, the concurrency key @p key of limit 1. */
static void submit(pl_engine *e, const char *id, int priority, const char *key)
{
    cJSON *p = t_json("{\"left\": 1}");
    pl_action a = {PL_ACTION_VERSION, "looper", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.priority = priority;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? 1 : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

/* pl__store_take() for worker "w": the run taken, or "" for none. */
static const char *take(pl_engine *e, pl__lease *l)
{
    bool taken = false;
    int st = pl__store_take(e->store, "w", 60000000, as_it_was, NULL, l,
                            &taken);
    cr_assert(st == PL_OK || (st == PL_ENOTFOUND && !taken), "%s", pl_errmsg());
    return taken ? l->id : "";
}

/* The successor is queued at its predecessor's place, with its priority
 * and its concurrency key: before a run of that priority queued after the
 * predecessor and a run of a lower priority queued before it, and held
 * back by its key as the predecessor would be. */
Test(chain, the_successor_takes_its_predecessors_place_in_the_queue)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    submit(e, "low", 0, NULL);
    submit(e, "hi", 5, NULL);
    submit(e, "second", 5, NULL);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "hi", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    cr_assert_str_eq(o->successor, "hi~1");
    pl_outcome_free(o);
    static const char *const order[] = {"hi~1", "second", "low"};
    pl__lease l;
    for (size_t i = 0; i < 3; i++)
        cr_expect_str_eq(take(e, &l), order[i], "take %zu", i);

    /* the key: while the successor runs, a run of its key waits */
    submit(e, "k", 0, "K");
    cr_assert_eq(pl_run_continue(&o, e, "k", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    submit(e, "k-next", 0, "K");
    cr_expect_str_eq(take(e, &l), "k~1");
    cr_expect_str_eq(take(e, &l), "", "k-next waits for its key");
    pl_engine_close(e);
    pl_registry_free(reg);
}
