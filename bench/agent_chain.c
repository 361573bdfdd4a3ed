/*
 * agent_chain.c -- pl-bench's long agent: an LLM agent that has run 10,000
 * turns, 100 a run, each run continued as new (pl_ctx_continue_as_new())
 * into the next.  The model is scripted (a policy answering from a script,
 * offline), so the figures are the engine's alone.
 *
 * Each turn the agent reads its ledger (as a model policy does to build its
 * conversation), asks the model, and calls the tool the model names.  Once
 * the chain has run its turns, a new chain's first link is measured
 * against the long chain's next link, in turns (so that the host's drift
 * touches both alike):
 *   - executing a link (its 100 turns);
 *   - replaying a link (pl_run_continue() of a continued link: every result
 *     served, nothing written);
 *   - recovering a link that failed half way (the tool fails once at its
 *     50th turn; pl_run_continue() replays 50 turns and executes the rest);
 *   - the process's resident memory after the first links and the last.
 * Each link is a run of its own, so the last link's figures are the
 * first's: the goal is within 25%, time and memory.
 */
#include "bench.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PER_LINK 100

static int g_fail_turn = -1; /* the tool fails once at this turn */

static int chain_model(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a->payload, "turn");
    char reply[96];
    snprintf(reply, sizeof reply, "turn %d: looking that up",
             cJSON_IsNumber(t) ? t->valueint : -1);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "reply", reply);
    cJSON_AddStringToObject(r, "tool", "chain_tool");
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int chain_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a->payload, "turn");
    int turn = cJSON_IsNumber(t) ? t->valueint : -1;
    if (turn == g_fail_turn) {
        g_fail_turn = -1;
        return PL_EPOLICY; /* once: the run fails, and is recovered */
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "turn", turn);
    cJSON_AddStringToObject(r, "found",
                            "the answer, in a hundred bytes or "
                            "so, as a tool's result would be");
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int call(pl_ctx *ctx, const char *policy, int turn, int seen,
                pl_step **res)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "turn", turn);
    cJSON_AddNumberToObject(p, "context_steps", seen);
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    *res = NULL;
    int st = pl_ctx_call(res, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    return st;
}

/* {"turn": T, "until": N}: turns T .. T+PER_LINK-1, then continue as new. */
static int chain_agent(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)user;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(a->payload, "turn");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(a->payload, "until");
    int from = cJSON_IsNumber(t) ? t->valueint : 0;
    int until = cJSON_IsNumber(u) ? u->valueint : 0;
    int turn = from;
    for (; turn < until && turn < from + PER_LINK; turn++) {
        const pl_steps *l = NULL;
        pl_step *res = NULL;
        int st = pl_ctx_ledger(&l, ctx);
        if (!st)
            st = call(ctx, "chain_model", turn, (int)pl_steps_count(l), &res);
        pl_step_free(res);
        res = NULL;
        if (!st)
            st = call(ctx, "chain_tool", turn, (int)pl_steps_count(l), &res);
        pl_step_free(res);
        if (st)
            return st;
    }
    if (turn < until) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddNumberToObject(next, "turn", turn);
        cJSON_AddNumberToObject(next, "until", until);
        int st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "turns", turn);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static double best(const double *v, size_t n)
{
    double m = INFINITY;
    for (size_t i = 0; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static void link_id(char *out, size_t n, const char *base, int k)
{
    if (k)
        snprintf(out, n, "%s~%d", base, k);
    else
        snprintf(out, n, "%s", base);
}

/* Execute link @p k of chain @p base (k 0: start it, with turns up to
 * @p until), failing once at its 50th turn and recovered when @p fail;
 * its time in ms. */
static double link_run(pl_engine *e, const char *base, int k, int until,
                       bool fail, int *st)
{
    char id[64];
    link_id(id, sizeof id, base, k);
    g_fail_turn = fail ? k * PER_LINK + PER_LINK / 2 : -1;
    pl_outcome *o = NULL;
    double t0 = now_s();
    if (k == 0) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "turn", 0);
        cJSON_AddNumberToObject(p, "until", until);
        pl_action root = {PL_ACTION_VERSION, "chain_agent", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        *st = pl_run_start(&o, e, &root, &ro);
        cJSON_Delete(p);
    } else {
        *st = pl_run_continue(&o, e, id, NULL);
    }
    if (!*st && fail) { /* recover it: replay half, execute the rest */
        if (o->status != PL_RUN_FAILED)
            *st = pl_errorf(PL_ESTATE, "link %s did not fail (%s)", id,
                            pl_run_status_name(o->status));
        pl_outcome_free(o);
        o = NULL;
        if (!*st)
            *st = pl_run_continue(&o, e, id, NULL);
        if (!*st && !o->calls_served)
            *st = pl_errorf(PL_ESTATE,
                            "link %s: its recovery served nothing from its "
                            "ledger",
                            id);
    }
    double ms = (now_s() - t0) * 1e3;
    if (!*st && o->status != PL_RUN_CONTINUED)
        *st = pl_errorf(PL_ESTATE, "link %s ended %s", id,
                        pl_run_status_name(o->status));
    pl_outcome_free(o);
    return ms;
}

/* Replay link @p k of the chain (continued: every result served). */
static double link_replay(pl_engine *e, int k, int *st)
{
    char id[64];
    link_id(id, sizeof id, "agent", k);
    pl_outcome *o = NULL;
    double t0 = now_s();
    *st = pl_run_continue(&o, e, id, NULL);
    double ms = (now_s() - t0) * 1e3;
    if (!*st && o->calls_executed)
        *st = pl_errorf(PL_ESTATE, "replaying %s executed calls", id);
    pl_outcome_free(o);
    return ms;
}

/* The heap in use, in KiB (the engine's own memory, not LMDB's map). */
static double heap_kib(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks / 1024.0;
}

/* Interleaved measurements of each pair; the best of them is the figure,
 * the one least touched by other work on a shared host. */
#define ROUNDS 9

int agent_chain_run(const agent_chain_config *cfg, agent_chain_result *out)
{
    memset(out, 0, sizeof *out);
    int links = cfg->turns / PER_LINK;
    /* the chain goes on past its turns: the links measured after them */
    int until = cfg->turns + (2 * ROUNDS + 1) * PER_LINK;
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    int st = pl_registry_new(&reg);
    if (!st)
        st = pl_registry_add_fn(reg, "chain_model", chain_model, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "chain_tool", chain_tool, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "chain_agent", chain_agent, NULL);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    if (!st)
        st = pl_engine_open(&e, cfg->store, reg, &eo);
    /* the chain's first `turns` turns (a worker would take each link from
     * the queue; here they are continued one after the other) */
    for (int k = 0; !st && k < links; k++) {
        link_run(e, "agent", k, until, false, &st);
        if (k == 9)
            out->heap_first_kib = heap_kib();
    }
    out->heap_last_kib = heap_kib();
    /* then, in turns so that the host's drift touches both alike: a new
     * chain's first link against the long chain's next, plain and failed
     * and recovered; and the long chain's second link replayed against
     * its last */
    double ef[ROUNDS], el[ROUNDS], rf[ROUNDS], rl[ROUNDS], pf[ROUNDS],
        pl[ROUNDS];
    for (int i = 0; !st && i < ROUNDS; i++) {
        char fresh[32], freshr[32];
        snprintf(fresh, sizeof fresh, "fresh-%d", i);
        snprintf(freshr, sizeof freshr, "recover-%d", i);
        ef[i] = link_run(e, fresh, 0, until, false, &st);
        if (!st)
            el[i] = link_run(e, "agent", links + 2 * i, until, false, &st);
        if (!st)
            rf[i] = link_run(e, freshr, 0, until, true, &st);
        if (!st)
            rl[i] = link_run(e, "agent", links + 2 * i + 1, until, true, &st);
        if (!st)
            pf[i] = link_replay(e, 1, &st);
        if (!st)
            pl[i] = link_replay(e, links - 1, &st);
    }
    if (!st) {
        out->exec_first_ms = best(ef, ROUNDS);
        out->exec_last_ms = best(el, ROUNDS);
        out->recover_first_ms = best(rf, ROUNDS);
        out->recover_last_ms = best(rl, ROUNDS);
        out->replay_first_ms = best(pf, ROUNDS);
        out->replay_last_ms = best(pl, ROUNDS);
    }
    out->links = links;
    if (st)
        fprintf(stderr, "pl-bench: long agent: %s (%s)\n", pl_errmsg(),
                pl_status_name(st));
    pl_engine_close(e);
    pl_registry_free(reg);
    return st;
}

/* ---- in pl-bench's report ------------------------------------------------- */

static void ratio_line(bool quiet, cJSON *j, const char *what, const char *key,
                       double first, double last, const char *unit)
{
    double r = first > 0 ? last / first : NAN;
    char k[64];
    snprintf(k, sizeof k, "%s_first", key);
    cJSON_AddNumberToObject(j, k, isfinite(first) ? first : 0);
    snprintf(k, sizeof k, "%s_last", key);
    cJSON_AddNumberToObject(j, k, isfinite(last) ? last : 0);
    snprintf(k, sizeof k, "%s_ratio", key);
    cJSON_AddNumberToObject(j, k, isfinite(r) ? r : 0);
    if (!quiet)
        printf("  %-34s first %9.2f %s, last %9.2f %s: %.2fx %s\n", what, first,
               unit, last, unit, r, r <= 1.25 ? "met" : "NOT MET");
}

int agent_chain_report(bool quick, bool quiet, const char *dir, cJSON *json)
{
    char store[1100];
    snprintf(store, sizeof store, "%s/agent_chain.db", dir);
    agent_chain_config cfg = {store, quick ? 2000 : 10000};
    agent_chain_result r;
    int st = agent_chain_run(&cfg, &r);
    char lock[1200];
    snprintf(lock, sizeof lock, "%s-lock", store);
    remove(store);
    remove(lock);
    cJSON *j = cJSON_AddObjectToObject(json, "long_agent");
    cJSON_AddNumberToObject(j, "turns", cfg.turns);
    cJSON_AddNumberToObject(j, "links", r.links);
    if (!quiet)
        printf("Long agent: %d turns, %d a run, %d runs continued as new; a "
               "new chain's first link\n  against the long chain's next "
               "(best of %d, in turns; goal: within 1.25x)\n",
               cfg.turns, PER_LINK, r.links, ROUNDS);
    if (!st) {
        ratio_line(quiet, j, "executing a link", "exec_ms", r.exec_first_ms,
                   r.exec_last_ms, "ms");
        ratio_line(quiet, j, "failing half way, then recovered", "recover_ms",
                   r.recover_first_ms, r.recover_last_ms, "ms");
        ratio_line(quiet, j, "replaying a link", "replay_ms", r.replay_first_ms,
                   r.replay_last_ms, "ms");
        ratio_line(quiet, j, "heap in use (after link 10, at the end)",
                   "heap_kib", r.heap_first_kib, r.heap_last_kib, "KiB");
    }
    if (!quiet)
        printf("\n");
    return st ? 1 : 0;
}
