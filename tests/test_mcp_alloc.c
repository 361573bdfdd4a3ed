/*
 * test_mcp_alloc.c -- registering an MCP server's tools is all or nothing:
 * an allocation that fails while the tools are added to the registry
 * (tests/mcp_fake_server.py, five tools) leaves none of them, and nothing
 * allocated.  Before, the tools added before the failure stayed in the
 * registry, pointing into the handle the failure closed: a use after free
 * at their first call.  pl_tools_register() the same way.
 *
 * This binary is linked with -Wl,--wrap for malloc, calloc, realloc and
 * free (tests/CMakeLists.txt), as test_alloc.c is, with support_wrap.c's
 * wrappers; cJSON's allocations go through them too (cJSON_InitHooks).
 * t_alloc_fails() below fails the k-th
 * allocation made once the registry holds more policies than before the
 * registration, for every k until one registers with nothing failing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_mcp.h"
#include "support_wrap.h"

/* ---- which allocation fails (support_wrap.c's wrappers ask) -------------- */

static const pl_registry *g_reg; /* armed: counting (and failing) */
static size_t g_base;            /* its policies before the registration */
static _Atomic long g_count;     /* allocations once it holds more */
static long g_fail_at;           /* this one fails; 0: none */
static _Atomic bool g_failed;    /* the k-th has failed */

bool t_alloc_fails(void)
{
    if (!g_reg || pl_registry_count(g_reg) <= g_base)
        return false;
    if (++g_count != g_fail_at)
        return false;
    g_failed = true;
    return true;
}

/* cJSON's allocations of this size fail, the first one alone; 0: none */
static size_t g_fail_size;

static void *hook_malloc(size_t n)
{
    if (g_fail_size && n == g_fail_size) {
        g_fail_size = 0;
        g_failed = true;
        return NULL;
    }
    return __wrap_malloc(n);
}
static void hook_free(void *p) { __wrap_free(p); }

static void init(void)
{
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    setup();
}

static void fini(void)
{
    teardown();
    cJSON_InitHooks(NULL);
}

TestSuite(mcp_alloc, .init = init, .fini = fini, .timeout = 600);

/* Arm the wrapper on @p reg, failing the @p k-th allocation. */
static void arm(const pl_registry *reg, long k)
{
    g_base = pl_registry_count(reg);
    g_count = 0;
    g_fail_at = k;
    g_failed = false;
    t_alloc_live = 0;
    g_reg = reg;
}

static void disarm(void) { g_reg = NULL; }

/* The policies of @p reg whose names begin with @p prefix. */
static size_t count_prefixed(const pl_registry *reg, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < pl_registry_count(reg); i++)
        n += strncmp(pl_registry_at(reg, i)->name, prefix, strlen(prefix)) == 0;
    return n;
}

/* Call @p add (@p arg its argument) with the k-th allocation of the
 * additions failing, for k = 1, 2, ... until it registers with nothing
 * failing: each failure a status with a message that leaves the registry
 * as it was and nothing allocated.  How many failed. */
static long sweep(int (*add)(void *), void *arg)
{
    size_t before = pl_registry_count(F.reg);
    long failures = 0;
    for (long k = 1;; k++) {
        arm(F.reg, k);
        int st = add(arg);
        disarm();
        if (!g_failed) {
            cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
            return failures;
        }
        failures++;
        /* PL_ENOMEM, or PL_EJSON when it is cJSON_Parse()'s (the
         * registry's check of a schema cannot tell the two apart) */
        cr_assert(st < 0 && *pl_errmsg(), "allocation %ld failing: %s (%s)", k,
                  pl_status_name(st), pl_errmsg());
        cr_assert_null(F.mcp);
        cr_assert_eq(pl_registry_count(F.reg), before,
                     "allocation %ld failing: %zu policies left behind", k,
                     pl_registry_count(F.reg) - before);
        cr_assert_eq(t_alloc_live, 0,
                     "allocation %ld failing: %ld allocations not freed", k,
                     t_alloc_live);
    }
}

static int add_fake(void *spec)
{
    pl_mcp_options o = quiet();
    o.start_timeout_ms = 20000;
    return pl_mcp_register(&F.mcp, F.reg, "fake", spec, &o);
}

static int add_tools(void *tools) { return pl_tools_register(F.reg, tools); }

Test(mcp_alloc, a_failing_allocation_while_adding_the_tools_registers_none)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(F.reg, "use", use, NULL), PL_OK);
    long failures = sweep(add_fake, spec);
    /* the tools' additions allocate: each of them failed in turn */
    cr_expect_gt(failures, 20);
    cr_expect_eq(count_prefixed(F.reg, "fake."), 5);
    cr_expect_eq(pl_mcp_tool_count(F.mcp), 5);
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    cJSON *got = run("r1",
                     "[{\"tool\": \"fake.echo\", \"args\": {\"text\": \"x\"}}]",
                     1);
    cr_expect(strstr(first_text(at(got, 0)), "\"x\""), "%s", t_text(got));
    cJSON_Delete(got);
    printf("mcp_alloc: %ld allocations failed in turn while the tools were "
           "added\n",
           failures);
#ifdef PL_LSAN
    close_all();
    cr_expect_eq(__lsan_do_recoverable_leak_check(), 0);
#endif
}

Test(mcp_alloc, a_failing_allocation_while_adding_the_tools_policies_adds_none)
{
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(F.reg, "use", use, NULL), PL_OK);
    pl_tools_options to = PL_TOOLS_OPTIONS_INIT;
    to.root = F.dir;
    pl_tools *tools = NULL;
    cr_assert_eq(pl_tools_new(&tools, &to), PL_OK, "%s", pl_errmsg());
    cr_expect_gt(sweep(add_tools, tools), 5);
    cr_expect_not_null(pl_registry_find(F.reg, "read_file"));
    pl_registry_free(F.reg);
    F.reg = NULL;
    pl_tools_free(tools);
}

/* The tool list as the server lists it is copied, page by page, before
 * any tool is registered: a tool whose copy fails (out of memory) fails
 * the registration.  It was left out of the list, and the others
 * registered without it, with nothing said.  The copy of "die"'s
 * description (tests/mcp_fake_server.py longdesc: 5000 bytes, no other
 * allocation of the list that size; cJSON's reading of it takes 5002)
 * is the allocation that fails. */
Test(mcp_alloc, a_tool_whose_copy_fails_fails_the_registration)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " longdesc %s", F.dir);
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(F.reg, "use", use, NULL), PL_OK);
    g_failed = false;
    g_fail_size = 5001;
    int st = add_fake(spec);
    g_fail_size = 0;
    cr_assert(g_failed, "the copy of the description was not made");
    cr_expect_eq(st, PL_ENOMEM, "%s: %s (%zu tools)", pl_status_name(st),
                 pl_errmsg(), pl_mcp_tool_count(F.mcp));
    cr_expect_null(F.mcp);
    cr_expect_eq(pl_registry_count(F.reg), 1);
    pl_mcp_close(F.mcp);
    F.mcp = NULL;
    cr_assert_eq(add_fake(spec), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_mcp_tool_count(F.mcp), 5);
    cr_expect_not_null(pl_registry_find(F.reg, "fake.die"));
}

/* A message of the server that cannot be read for want of memory fails
 * the call with PL_ENOMEM, as any allocation failing does.  It was taken
 * for a message that is not JSON: the call's result an error -32700,
 * ToolBug, "not JSON" (when its id could be read again; else a line
 * skipped, and Timeout).  What fails is cJSON's reading of echo's text,
 * '{"text": "zzz..."}' of a 6000-byte text: 6014 bytes, no other
 * allocation of the call that size.  Over stdio; over Streamable HTTP as
 * one JSON body, then as an event stream. */
static void expect_call_out_of_memory(const char *server, const char *run_id)
{
    static char calls[7000], payload[7100];
    int k = snprintf(calls, sizeof calls,
                     "[{\"tool\": \"%s.echo\", \"args\": {\"text\": \"",
                     server);
    memset(calls + k, 'z', 6000);
    snprintf(calls + k + 6000, sizeof calls - (size_t)k - 6000, "\"}}]");
    snprintf(payload, sizeof payload, "{\"calls\": %s}", calls);
    cJSON *p = cJSON_Parse(payload);
    cr_assert_not_null(p);
    pl_action a = {PL_ACTION_VERSION, "use", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = run_id;
    pl_outcome *o = NULL;
    g_failed = false;
    g_fail_size = 6014;
    int st = pl_run_start(&o, F.engine, &a, &ro);
    g_fail_size = 0;
    cr_assert(g_failed, "the answer's text was not read");
    cr_expect_eq(st, PL_ENOMEM, "%s: %s (the run's result: %s)",
                 pl_status_name(st), st ? pl_errmsg() : "",
                 o ? t_text(pl_outcome_result(o)) : "none");
    cr_expect(st != PL_ENOMEM || strstr(pl_errmsg(), "out of memory"), "%s",
              pl_errmsg());
    pl_outcome_free(o);
    /* memory back, the run goes on: the call was sent and may have acted
     * (echo is not idempotent), so it is in doubt, as after a crash */
    o = NULL;
    st = pl_run_continue(&o, F.engine, run_id, NULL);
    cr_expect_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert(o && o->status == PL_RUN_COMPLETED, "run %s: %s", run_id,
              o && o->reason ? o->reason : "");
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                        "got");
    expect_error(at(got, 0), "InDoubt", "in flight");
    pl_outcome_free(o);
    cJSON_Delete(p);
}

Test(mcp_alloc, an_answer_not_read_for_want_of_memory_fails_the_call)
{
    char spec[9000];
    snprintf(spec, sizeof spec, "stdio:python3 " FAKE " ok %s", F.dir);
    pl_mcp_options o = quiet();
    o.timeout_ms = 3000;
    open_all("fake", spec, &o);
    expect_call_out_of_memory("fake", "r1");
}

#if PL_WITH_CURL /* the HTTP transport is built with libcurl */
Test(mcp_alloc, an_http_answer_not_read_for_want_of_memory_fails_the_call,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 3000;
    open_on("{\"call\": [null, null, {\"sse\": true}]}", &o);
    expect_call_out_of_memory("h", "r1");
    expect_call_out_of_memory("h", "r2");
}
#endif
