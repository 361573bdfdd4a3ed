/*
 * test_chain_crash.c -- what the guide promises of a crash around a
 * continue-as-new: "A crash before that commit leaves the run to replay to
 * the same point; after it, the successor is there."  A child starts a run
 * that continues as new and SIGKILLs itself at each step boundary in
 * turn (every step appended, every commit); the parent continues the run:
 * it ends `continued` with one successor, queued with the payload it was
 * given, both verify, and the successor runs to its end.  On the store the
 * suite runs on: LMDB, and PostgreSQL as pg_test_chain_crash.
 */
#include "support.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(chain_crash, .fini = t_cleanup, .timeout = 300);

/* {"left": L}: a call to "add", then, while L > 0, continue as new with
 * {"left": L - 1}; the result is {"left": L}. */
static int looper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(a->payload, "left");
    int left = cJSON_IsNumber(l) ? l->valueint : 0;
    cJSON *r = NULL, *p = cJSON_Parse("{\"a\": 1, \"b\": 2}");
    int st = p ? pl_ctx_invoke(&r, ctx, "add", p) : PL_ENOMEM;
    cJSON_Delete(p);
    cJSON_Delete(r);
    if (!st && left > 0) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddNumberToObject(next, "left", left - 1);
        st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
    }
    return st ? st : pl_steps_add_resultf(out, "{s:i}", "left", left);
}

typedef struct counter {
    long kill_at; /* SIGKILL at this boundary; 0 = never */
    long n;       /* boundaries so far */
} counter;

static void on_event(const pl_event *ev, void *user)
{
    counter *c = user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    if (++c->n == c->kill_at)
        raise(SIGKILL);
}

static pl_engine *open_counted(const char *path, const pl_registry *reg,
                               counter *c)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_SYNC;
    o.on_event = on_event;
    o.event_user = c;
    pl_engine *e = NULL;
    return pl_engine_open(&e, path, reg, &o) == PL_OK ? e : NULL;
}

/* Start run "loop" ({"left": 1}) on @p e; the status. */
static int start_loop(pl_engine *e, pl_outcome **o)
{
    cJSON *p = cJSON_Parse("{\"left\": 1}");
    if (!p)
        return PL_ENOMEM;
    pl_action a = PL_ACTION_INIT;
    a.policy = "looper";
    a.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "loop";
    int st = pl_run_start(o, e, &a, &ro);
    cJSON_Delete(p);
    return st;
}

Test(chain_crash, a_kill_at_every_boundary_leaves_one_successor)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "looper", looper, NULL), PL_OK);
    /* the boundaries of the first link, uncrashed */
    counter ref = {0, 0};
    pl_engine *e = open_counted(t_store_path(), reg, &ref);
    cr_assert_not_null(e, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(start_loop(e, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    pl_engine_close(e);
    long k_max = ref.n;
    cr_assert_gt(k_max, 2);

    for (long k = 1; k <= k_max; k += t_stride()) {
        const char *path = t_store_path();
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) { /* never asserts: it is killed, or exits */
            counter c = {k, 0};
            pl_engine *ce = open_counted(path, reg, &c);
            pl_outcome *co = NULL;
            int st = ce ? start_loop(ce, &co) : -1;
            _exit(st == PL_OK ? 0 : 3);
        }
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "k=%ld: the child was not killed (status %d)", k, status);

        e = t_engine(path, reg, PL_DURABILITY_SYNC);
        int st = pl_run_continue(&o, e, "loop", NULL);
        if (st == PL_ENOTFOUND) { /* killed before the run was made */
            st = start_loop(e, &o);
        }
        cr_assert_eq(st, PL_OK, "k=%ld: %s", k, pl_errmsg());
        cr_assert_eq(o->status, PL_RUN_CONTINUED, "k=%ld: %s", k,
                     pl_run_status_name(o->status));
        cr_assert_str_eq(o->successor, "loop~1", "k=%ld", k);
        pl_outcome_free(o);
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, "loop~1"), PL_OK, "k=%ld", k);
        cr_assert_eq(info->status, PL_RUN_SUBMITTED, "k=%ld", k);
        cr_assert_str_eq(info->predecessor, "loop");
        const cJSON *left = cJSON_GetObjectItemCaseSensitive(info->payload,
                                                             "left");
        cr_assert(cJSON_IsNumber(left) && left->valueint == 0, "k=%ld", k);
        pl_run_info_free(info);
        cr_assert_eq(pl_run_get(&info, e, "loop~2"), PL_ENOTFOUND, "k=%ld", k);
        cr_assert_eq(pl_run_verify(e, "loop"), PL_OK, "k=%ld: %s", k,
                     pl_errmsg());
        cr_assert_eq(pl_run_continue(&o, e, "loop~1", NULL), PL_OK, "k=%ld: %s",
                     k, pl_errmsg());
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "k=%ld", k);
        cr_assert_null(o->successor);
        pl_outcome_free(o);
        cr_assert_eq(pl_run_verify(e, "loop~1"), PL_OK, "k=%ld: %s", k,
                     pl_errmsg());
        pl_engine_close(e);
    }
    pl_registry_free(reg);
}
