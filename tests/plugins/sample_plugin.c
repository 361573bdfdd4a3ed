/*
 * sample_plugin.c -- test plugins, one source, shaped by macros:
 *
 *   (none)            "p_root" calls "p_echo"; "p_versioned" names its
 *                     own code_version
 *   PREFIX=x          the same policies, named with another prefix
 *   NO_ENTRY          declares its ABI, has no entry point
 *   NO_ABI            has an entry point, declares no ABI
 *   ABI=n             declares ABI version n
 *   FAIL_AFTER_ONE    registers one policy, then fails with PL_EINVAL
 *   FAIL_ODD          fails with 42, which is not a pl_status
 *   UNDEFINED         calls a function no library defines
 *   CRASH_INIT        dies of SIGSEGV in pl_plugin_init
 *   OWNED             "p_echo" holds data of its own, released by a
 *                     function of the plugin's (pl_registry_add_owned())
 *   EMPTY             an entry point that registers nothing, and says
 *                     PL_OK
 */
#include <signal.h>
#include <stdlib.h>

#include <policyledger.h>

#ifndef PREFIX
#define PREFIX "p_"
#endif

#ifdef ABI
const unsigned pl_plugin_abi = ABI;
#elif !defined(NO_ABI)
PL_PLUGIN_DECLARE;
#endif

#ifdef UNDEFINED
void pl_test_function_nobody_defines(void);
#endif

static int echo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
#ifdef UNDEFINED
    pl_test_function_nobody_defines();
#endif
    return pl_steps_add_result(out, a->payload);
}

static int root(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, PREFIX "echo", a->payload);
    if (!st)
        st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* Every shape compiles the same policies, used or not. */
extern const pl_policy_fn sample_policies[2];
const pl_policy_fn sample_policies[2] = {echo, root};

#ifdef OWNED
/* Code of the plugin's own: the registry calls it when it is freed. */
static void release_data(void *user)
{
    int *data = user;
    *data = 0;
    free(data);
}
#endif

#ifndef NO_ENTRY
int pl_plugin_init(pl_registry *reg);

int pl_plugin_init(pl_registry *reg)
{
#ifdef EMPTY
    (void)reg; /* its policies forgotten, or behind a setting not given */
    return PL_OK;
#endif
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = PREFIX "echo";
    d.fn = echo;
    d.description = "Returns its payload.";
#ifdef OWNED
    int *data = malloc(sizeof *data);
    if (!data)
        return PL_ENOMEM;
    *data = 7;
    d.user = data;
    int st = pl_registry_add_owned(reg, &d, release_data);
    if (st)
        free(data);
#else
    int st = pl_registry_add(reg, &d);
#endif
#ifdef CRASH_INIT
    raise(SIGSEGV); /* as a stray pointer would */
    return st;
#elif defined(FAIL_AFTER_ONE)
    return st ? st : PL_EINVAL;
#elif defined(FAIL_ODD)
    return st ? st : 42;
#else
    d.name = PREFIX "root";
    d.fn = root;
    if (!st)
        st = pl_registry_add(reg, &d);
    d.name = PREFIX "versioned";
    d.fn = echo;
    d.code_version = "versioned/7";
    if (!st)
        st = pl_registry_add(reg, &d);
    return st;
#endif
}
#endif
