/*
 * The contexts the fragments of docs/guide.md and README.md compile in
 * (tests/doc_samples.py).  A fragment marked `<!-- sample: body NAME -->`
 * is compiled as the body of the function PL_SAMPLE_CTX_NAME selects here;
 * one marked `file NAME` at file scope, before it (what follows its line
 * `/ * ... * /` as that body).  Each context declares what the guide's text
 * around the fragment speaks of and the fragment does not show: the
 * policy's parameters, the engine a program opened, helpers (declared, never
 * defined: fragments are compiled, not linked).  Everything it declares is
 * used once ((void)) so that a fragment need not use it all; the fragment
 * sits in a block of its own, so it may declare a name again.
 */
#include <policyledger.h>
#include <policyledger_llm.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* What the guide's policies and programs call beside the library. */
int keep(pl_steps *out, cJSON *answer); /* a result from an event's payload */
int one_turn(pl_ctx *ctx, int turn);    /* a chat's turn */
void print(const cJSON *result);
void report(const pl_outcome *outcome);
struct id_list {
    size_t n;
    char **v;
};
int id_list_add(void *list, const char *id); /* a copy of id */
int archive_it(const pl_run_info *info, void *user);
#ifdef PL_SAMPLE_CTX_rate
extern const pl_rate_limit_options openai_rpm; /* the sample before */
#endif
#ifdef PL_SAMPLE_CTX_observe
extern const pl_observe_options observe_opts;
extern const pl_paginate_options paginate_opts;
#endif

#ifdef PL_SAMPLE_FILE
#include PL_SAMPLE_FILE
#endif

#ifdef PL_SAMPLE_CTX_alone
/* File-scope code that needs nothing more: no function around it. */
#define PL_SAMPLE_NO_BODY 1
#endif

#if defined(PL_SAMPLE_CTX_policy) || defined(PL_SAMPLE_CTX_order) ||           \
    defined(PL_SAMPLE_CTX_fanout) || defined(PL_SAMPLE_CTX_rate) ||            \
    defined(PL_SAMPLE_CTX_observe)
/* A policy's body: ctx, a (its action), out, user; st, its status; res, a
 * call's result step; call, an action to call. */
int sample(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user);
int sample(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    int st = 0;
#ifndef PL_SAMPLE_CTX_order
    pl_step *res = NULL;
#else
    const char *res = "R-A-1"; /* examples/order/order.c: the reservation */
#endif
    pl_action call = PL_ACTION_INIT;
    call.policy = "tool";
    call.payload = a->payload;
#ifdef PL_SAMPLE_CTX_order
    /* examples/order/order.c: the order's id, the result of ship */
    const char *id = "A-1";
    cJSON *shipped = NULL;
    (void)id, (void)shipped;
#endif
#ifdef PL_SAMPLE_CTX_fanout
    pl_action search = call, fetch = call, lookup = call;
    pl_decorator retry;
    if ((st = pl_decorator_retry(&retry, NULL)))
        return st;
#endif
#ifdef PL_SAMPLE_CTX_observe
    pl_action model_call = call;
    (void)model_call;
#endif
    (void)ctx, (void)out, (void)user, (void)res, (void)call;
    {
#ifdef PL_SAMPLE_BODY
#include PL_SAMPLE_BODY
#endif
    }
    return st;
}
#endif

#if defined(PL_SAMPLE_CTX_main) || defined(PL_SAMPLE_CTX_worker)
/* A program's main once its registry and engine are made: reg, engine (the
 * worker context: a static engine of the fragment's own), root (the root
 * action of a run), payload, outcome, opts (the engine's options), e (an
 * engine to open), st. */
int main(int argc, char **argv)
{
    int st = 0;
    pl_registry *reg = NULL;
#ifndef PL_SAMPLE_CTX_worker
    pl_engine *engine = NULL;
#endif
    pl_engine *e = NULL;
    pl_engine_options opts = PL_ENGINE_OPTIONS_INIT;
    pl_outcome *outcome = NULL;
    pl_action root = PL_ACTION_INIT;
    cJSON *payload = NULL; /* a JSON object */
    struct id_list ids = {0, NULL};
    char *id = NULL;
    FILE *archive = NULL;
    root.policy = "order";
    root.payload = payload;
    (void)argc, (void)argv, (void)reg, (void)root, (void)e, (void)opts;
    (void)outcome, (void)ids, (void)id, (void)archive;
#ifndef PL_SAMPLE_CTX_worker
    (void)engine;
#endif
    {
#ifdef PL_SAMPLE_BODY
#include PL_SAMPLE_BODY
#endif
    }
    return st;
}
#endif

#if defined(PL_SAMPLE_NO_BODY) && defined(PL_SAMPLE_BODY)
#error "the context 'alone' takes no statements"
#endif
