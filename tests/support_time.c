/*
 * support_time.c -- what the tests of durable timers, events,
 * cancellation and deadlines (test_time*.c) share: their policies and
 * registry, an engine that parks waiting runs, and waking them.
 */
#include "support_time.h"

#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Policies                                                                 */
/* ------------------------------------------------------------------------ */

atomic_int g_undo, g_inflight;

/* "sleeper": echo, sleep payload.ms, add; returns {"slept": true}. */
static int sleeper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "echo", a->payload);
    if (st)
        return st;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    if ((st = pl_ctx_sleep(ctx, (int64_t)ms->valuedouble)))
        return st;
    cJSON *p = t_json("{\"a\":1,\"b\":2}");
    st = pl_ctx_invoke(NULL, ctx, "add", p);
    cJSON_Delete(p);
    return st ? st : pl_steps_add_resultf(out, "{s:b}", "slept", 1);
}

/* "undo": the compensating call; counts g_undo. */
static int undo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)ctx;
    (void)a;
    (void)u;
    atomic_fetch_add(&g_undo, 1);
    return pl_steps_add_resultf(out, "{s:b}", "undone", 1);
}

/*
 * "waiter": waits for payload.name (timeout payload.timeout, absent:
 * forever) payload.times times (default 1); returns {"got": [payloads]}
 * or {"timeout": true}.  On cancellation calls "undo" and returns
 * PL_ECANCELLED.
 */
static int waiter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "name");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(a->payload, "timeout");
    const cJSON *times = cJSON_GetObjectItemCaseSensitive(a->payload, "times");
    int n = cJSON_IsNumber(times) ? times->valueint : 1;
    cJSON *got = cJSON_CreateArray();
    int st = PL_OK;
    for (int i = 0; i < n && !st; i++) {
        cJSON *p = NULL;
        st = pl_ctx_wait_event(&p, ctx, name->valuestring,
                               cJSON_IsNumber(to) ? (int64_t)to->valuedouble
                                                  : PL_WAIT_FOREVER);
        if (!st)
            cJSON_AddItemToArray(got, p);
    }
    if (st == PL_ETIMEDOUT) {
        cJSON_Delete(got);
        return pl_steps_add_resultf(out, "{s:b}", "timeout", 1);
    }
    if (st == PL_ECANCELLED) {
        cJSON_Delete(got);
        int ust = pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty());
        return ust ? ust : PL_ECANCELLED;
    }
    if (st) {
        cJSON_Delete(got);
        return st;
    }
    int rs = pl_steps_add_resultf(out, "{s:O}", "got", got);
    cJSON_Delete(got);
    return rs;
}

/* "cancel_me": its first execution cancels its own run from inside a call
 * ("inflight"), as another process would while the call runs. */
static int inflight(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    atomic_fetch_add(&g_inflight, 1);
    /* the root's run id: the context's idempotency key starts with it */
    char id[PL_MAX_RUN_ID + 1];
    snprintf(id, sizeof id, "%s", pl_ctx_run_id(ctx));
    int st = pl_run_cancel(pl_ctx_engine(ctx), id, "customer asked");
    if (st)
        return st;
    return pl_steps_add_resultf(out, "{s:b}", "charged", 1);
}

/* Call "echo"; cancelled, call "undo" and return PL_ECANCELLED. */
static int echo_or_undo(pl_ctx *ctx, pl_steps *out)
{
    int st = pl_ctx_invoke(NULL, ctx, "echo", pl_json_empty());
    if (st == PL_ECANCELLED) {
        if ((st = pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty())))
            return st;
        return PL_ECANCELLED;
    }
    return st ? st : pl_steps_add_resultf(out, "{}");
}

static int cancel_me(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "inflight", pl_json_empty());
    return st ? st : echo_or_undo(ctx, out);
}

/* "nested": calls "waiter" (which compensates and hands the cancellation
 * on), then notes what its call returned. */
static int nested(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "waiter", a->payload);
    if (st == PL_ECANCELLED)
        return pl_steps_add_resultf(out, "{s:b}", "saw_cancel", 1);
    return st ? st : pl_steps_add_resultf(out, "{}");
}

/* "book" and "saga": a saga of two calls, "book" then "echo" (the rest
 * of its work), which on cancellation undoes what it booked ("undo")
 * and returns PL_ECANCELLED.  With g_book_stops set, "book" asks the
 * engine's workers to stop, so the run is handed back to the queue after
 * it; with g_saga_dies set, the process dies once "book" has returned. */
atomic_int g_booked, g_book_stops, g_saga_dies;

static int book(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    atomic_fetch_add(&g_booked, 1);
    if (atomic_load(&g_book_stops))
        pl_worker_stop(pl_ctx_engine(ctx));
    return pl_steps_add_resultf(out, "{s:b}", "booked", 1);
}

static int saga(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)a;
    (void)u;
    int st = pl_ctx_invoke(NULL, ctx, "book", pl_json_empty());
    if (!st && atomic_load(&g_saga_dies))
        _exit(0); /* a crash between two calls, the first one durable */
    return st ? st : echo_or_undo(ctx, out);
}

/*
 * "undo_waits": waits for "go"; cancelled, its compensation waits too
 * (payload.then "sleep": an hour; else for the event "ack", forever),
 * keeps what that wait returned in g_comp_wait, calls "undo" and returns
 * PL_ECANCELLED.
 */
atomic_int g_comp_wait;

static int undo_waits(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *u)
{
    (void)u;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    p = NULL;
    if (st != PL_ECANCELLED)
        return st ? st : pl_steps_add_resultf(out, "{}");
    const cJSON *then = cJSON_GetObjectItemCaseSensitive(a->payload, "then");
    int w = cJSON_IsString(then) && strcmp(then->valuestring, "sleep") == 0
                ? pl_ctx_sleep(ctx, 3600000)
                : pl_ctx_wait_event(&p, ctx, "ack", PL_WAIT_FOREVER);
    cJSON_Delete(p);
    atomic_store(&g_comp_wait, w);
    if (w && w != PL_ECANCELLED)
        return w;
    int ust = pl_ctx_invoke(NULL, ctx, "undo", pl_json_empty());
    return ust ? ust : PL_ECANCELLED;
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"sleeper", sleeper},
                {"undo", undo},
                {"waiter", waiter},
                {"inflight", inflight},
                {"cancel_me", cancel_me},
                {"nested", nested},
                {"book", book},
                {"saga", saga},
                {"undo_waits", undo_waits}};
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

pl_engine *engine_parking(const pl_registry *reg)
{
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    return e;
}

pl_run_info *info_of(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "%s", pl_errmsg());
    return info;
}

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wake due runs until run @p id is no longer waiting. */
void wake_until_done(pl_engine *e, const char *id)
{
    for (int i = 0; i < 60000 && status_of(e, id) == PL_RUN_WAITING; i++) {
        int64_t next = 0;
        cr_assert_eq(pl_engine_wake(e, &next), PL_OK, "%s", pl_errmsg());
        if (status_of(e, id) != PL_RUN_WAITING)
            break;
        nap_ms(5);
    }
}

const cJSON *result_of(const pl_outcome *o) { return pl_outcome_result(o); }
