/*
 * old_host.c -- a host's calls as code built against the earlier struct
 * versions (policyledger_prev.h) makes them: engine options at version 2,
 * run options at version 1.  What lies past each struct, or in its
 * padding, is what a newer version's fields would read there (a host id
 * longer than any allowed, bytes that are no valid value): the library
 * must take the defaults for them instead.
 */
#include <string.h>

#include "old_host.h"
#include "policyledger_prev.h"

static char g_long_host[300];

int old_host_open(pl_engine **out, const char *path, const pl_registry *reg)
{
    struct {
        pl_engine_options o;
        const char *host_id; /* where version 3's host_id is */
        unsigned lease_ms;
    } x;
    memset(&x, 0xab, sizeof x);
    x.o = (pl_engine_options)PL_ENGINE_OPTIONS_INIT;
    x.o.durability = PL_DURABILITY_PROCESS;
    memset(g_long_host, 'h', sizeof g_long_host - 1);
    x.host_id = g_long_host;
    x.lease_ms = 1; /* below the least lease */
    return pl_engine_open(out, path, reg, &x.o);
}

/* Version 1 run options, their padding not zero. */
static void run_options(pl_run_options *o, const char *run_id, bool check)
{
    memset(o, 0xab, sizeof *o);
    o->version = PL_RUN_OPTIONS_VERSION;
    o->run_id = run_id;
    o->check = check;
}

/* The result of a completed run as JSON text, or NULL. */
static char *result_of(const pl_outcome *o)
{
    size_t n = o && o->status == PL_RUN_COMPLETED ? pl_steps_count(o->steps)
                                                  : 0;
    const cJSON *p = n ? pl_step_payload(pl_steps_at(o->steps, n - 1)) : NULL;
    return p ? cJSON_PrintUnformatted(p) : NULL;
}

int old_host_run(char **result, pl_engine *e, const char *policy,
                 const char *payload, const char *run_id)
{
    *result = NULL;
    cJSON *p = cJSON_Parse(payload);
    if (!p)
        return PL_EINVAL;
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = p;
    pl_run_options ro;
    run_options(&ro, run_id, false);
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    *result = result_of(o);
    pl_outcome_free(o);
    cJSON_Delete(p);
    return st;
}

int old_host_check(char **result, uint64_t *executed, pl_engine *e,
                   const char *run_id)
{
    *result = NULL;
    pl_run_options ro;
    run_options(&ro, NULL, true);
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, run_id, &ro);
    *result = result_of(o);
    *executed = o ? o->calls_executed : 0;
    pl_outcome_free(o);
    return st;
}
