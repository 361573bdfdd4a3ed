/*
 * test_abi.c -- plugins and hosts across versions, with a real dlopen:
 *
 *   - a plugin and a host built against the earlier struct versions
 *     (policyledger_prev.h) work with today's library, which reads no
 *     further than each struct's own version;
 *   - a plugin in C++, and one built with -fvisibility=hidden, load and
 *     run; an exception a C++ policy lets escape ends the process, the
 *     run left as after a crash;
 *   - the library's version and ABI are the shared library's name;
 *   - a plugin built for another ABI is refused, naming both versions;
 *   - every versioned struct is refused at version 0 and past the current
 *     version, with a message naming it.
 *
 * This program links the shared library, as a host that loads plugins
 * must (test_static_host.c shows what happens otherwise).
 */
#define _GNU_SOURCE /* dladdr */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "old_host.h"

static char g_dir[256];

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pl-abi-XXXXXX", tmp ? tmp : "/tmp");
    cr_assert(mkdtemp(g_dir));
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(abi, .init = setup, .fini = teardown);

static const char *plugin(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s.so", PL_TEST_ABI_DIR, name);
    return path;
}

static const char *store(void)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/store.db", g_dir);
    return path;
}

static pl_registry *loaded(const char *name)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin(name)), PL_OK, "%s", pl_errmsg());
    return reg;
}

/* Run @p policy of @p reg on @p payload with today's API, in a store of its
 * own, and expect @p want, the result as JSON text. */
static void expect_result(const pl_registry *reg, const char *policy,
                          const char *payload, const char *want)
{
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store(), reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    cJSON *p = cJSON_Parse(payload);
    cr_assert(p);
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = p;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    size_t n = pl_steps_count(o->steps);
    cr_assert(n > 0);
    char *text = cJSON_PrintUnformatted(pl_step_payload(pl_steps_at(o->steps,
                                                                    n - 1)));
    cr_expect_str_eq(text, want);
    free(text);
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
}

Test(abi, a_plugin_built_against_earlier_struct_versions_runs)
{
    pl_registry *reg = loaded("plugin_prev");
    cr_expect_eq(pl_registry_count(reg), 2);
    const pl_policy_def *add = pl_registry_find(reg, "old_add");
    cr_assert(add);
    cr_expect_eq(add->version, PL_POLICY_DEF_VERSION, "kept at today's");
    cr_expect_str_eq(add->description, "Adds a and b.");
    cr_expect_eq(strncmp(add->code_version, "build-id:", 9), 0);
    /* what lay past its version 1 def was not read as output_schema */
    cr_expect_null(add->output_schema);
    cr_expect_null(pl_registry_find(reg, "old_sum")->output_schema);

    expect_result(reg, "old_sum", "{\"a\": 2, \"b\": 3}", "{\"total\":5}");
    pl_registry_free(reg);
}

Test(abi, a_host_built_against_earlier_struct_versions_runs)
{
    pl_registry *reg = loaded("plugin_prev");
    pl_engine *e = NULL;
    /* version 2 engine options: host_id and lease_ms take their defaults,
     * not the bytes past the struct (a host id too long to be one) */
    cr_assert_eq(old_host_open(&e, store(), reg), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(pl_engine_durability(e), PL_DURABILITY_PROCESS);
    char *r = NULL;
    cr_assert_eq(old_host_run(&r, e, "old_sum", "{\"a\": 40, \"b\": 2}",
                              "old-1"),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(r, "{\"total\":42}");
    free(r);
    /* a replay in check mode: the recorded results served, none executed */
    uint64_t executed = 99;
    cr_assert_eq(old_host_check(&r, &executed, e, "old-1"), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_str_eq(r, "{\"total\":42}");
    cr_expect_eq(executed, 0);
    free(r);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(abi, a_cxx_plugin_loads_and_runs)
{
    pl_registry *reg = loaded("plugin_cxx");
    const pl_policy_def *d = pl_registry_find(reg, "cxx_greet");
    cr_assert(d);
    cr_expect_str_eq(d->description, "Greets by name.");
    expect_result(reg, "cxx_greet", "{\"name\": \"ada\"}",
                  "{\"greeting\":\"hello, ada\"}");
    pl_registry_free(reg);
}

static pl_outcome *run_in(pl_engine *e, const char *policy, const char *id)
{
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    return o;
}

static int fixed(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_resultf(out, "{s:b}", "fixed", 1);
}

/* Plugins, versions and the ABI: a C++ policy catches its exceptions and
 * returns a status; one that lets an exception escape ends the process
 * (std::terminate: the library is C and passes none on), and its run is
 * left as a crash leaves it, continued by the next process. */
Test(abi, an_exception_must_not_leave_a_cxx_policy)
{
    pl_registry *reg = loaded("plugin_cxx");
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store(), reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome *o = run_in(e, "cxx_catch", "caught");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EPOLICY);
    pl_outcome_free(o);
    pl_engine_close(e);

    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        if (pl_engine_open(&e, store(), reg, NULL) == PL_OK)
            pl_outcome_free(run_in(e, "cxx_throw", "thrown"));
        _exit(0); /* not reached: the exception ends the process */
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_expect(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT, "status %#x", ws);
    pl_registry_free(reg);

    /* the fixed build finishes it */
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "cxx_throw", fixed, NULL), PL_OK);
    cr_assert_eq(pl_engine_open(&e, store(), reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, e, "thrown"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ri->status, PL_RUN_RUNNING);
    pl_run_info_free(ri);
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "thrown", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(abi, a_plugin_built_with_hidden_visibility_loads_and_runs)
{
    pl_registry *reg = loaded("plugin_hidden");
    cr_expect_eq(pl_registry_count(reg), 3);
    /* h_root calls h_echo through the context */
    expect_result(reg, "h_root", "{\"x\": [1, 2]}", "{\"x\":[1,2]}");
    pl_registry_free(reg);
}

Test(abi, the_abi_is_the_shared_librarys_major_version)
{
    cr_expect_str_eq(pl_version(), PL_VERSION_STRING);
    cr_expect_eq(PL_ABI_VERSION, PL_VERSION_MAJOR);
    /* the copy this program runs is libpolicyledger.so.<ABI> */
    Dl_info info;
    void *addr;
    const char *(*fn)(void) = pl_version;
    memcpy(&addr, &fn, sizeof addr);
    cr_assert(dladdr(addr, &info) && info.dli_fname);
    char soname[64];
    snprintf(soname, sizeof soname, "libpolicyledger.so.%d", PL_ABI_VERSION);
    cr_expect(strstr(info.dli_fname, soname), "%s is not %s", info.dli_fname,
              soname);
}

Test(abi, a_plugin_of_another_abi_is_refused_naming_both_versions)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    const char *path = plugin("plugin_abi_1");
    cr_expect_eq(pl_plugin_load(reg, path), PL_EVERSION);
    const char *m = pl_errmsg();
    char want[200];
    snprintf(want, sizeof want,
             "built for ABI version 1, this library (%s) "
             "has ABI version %d",
             PL_VERSION_STRING, PL_ABI_VERSION);
    cr_expect(strstr(m, path) && strstr(m, want), "%s", m);
    cr_expect_eq(pl_registry_count(reg), 0);
    pl_registry_free(reg);
}

/* @p st is PL_EINVAL and the message names the struct and the version. */
static void expect_refused(int st, const char *name, unsigned version)
{
    char want[120];
    if (version)
        snprintf(want, sizeof want,
                 "%s version %u is newer than this "
                 "library's",
                 name, version);
    else
        snprintf(want, sizeof want, "%s version 0: it was not made with", name);
    cr_expect_eq(st, PL_EINVAL, "%s", name);
    cr_expect(strstr(pl_errmsg(), want), "%s: %s", want, pl_errmsg());
}

static int nop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_result(out, pl_json_empty());
}

Test(abi, every_struct_is_refused_at_version_0_and_past_the_current)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def good = PL_POLICY_DEF_INIT;
    good.name = "nop";
    good.fn = nop;
    cr_assert_eq(pl_registry_add(reg, &good), PL_OK);
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store(), reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_schema *schema = NULL;
    cr_assert_eq(pl_schema_compile_text(&schema, "{\"type\": \"object\"}"),
                 PL_OK);

    for (int bad = 0; bad < 2; bad++) {
#define BAD(NAME) (bad ? NAME##_VERSION + 1u : 0u)
        pl_policy_def d = good;
        d.name = "other";
        d.version = BAD(PL_POLICY_DEF);
        expect_refused(pl_registry_add(reg, &d), "pl_policy_def", d.version);

        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.version = BAD(PL_ENGINE_OPTIONS);
        pl_engine *e2 = NULL;
        expect_refused(pl_engine_open(&e2, store(), reg, &eo),
                       "pl_engine_options", eo.version);

        pl_action a = PL_ACTION_INIT;
        a.policy = "nop";
        a.payload = pl_json_empty();
        pl_outcome *o = NULL;
        a.version = BAD(PL_ACTION);
        expect_refused(pl_run_start(&o, e, &a, NULL), "pl_action", a.version);
        a.version = PL_ACTION_VERSION;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.version = BAD(PL_RUN_OPTIONS);
        expect_refused(pl_run_start(&o, e, &a, &ro), "pl_run_options",
                       ro.version);
        expect_refused(pl_run_continue(&o, e, "any", &ro), "pl_run_options",
                       ro.version);
        cr_expect_null(o);

        pl_pool_options po = PL_POOL_OPTIONS_INIT;
        po.version = BAD(PL_POOL_OPTIONS);
        pl_pool *pool = NULL;
        expect_refused(pl_pool_new(&pool, e, &po), "pl_pool_options",
                       po.version);
        pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
        wo.version = BAD(PL_WORKER_OPTIONS);
        expect_refused(pl_worker_run(e, &wo), "pl_worker_options", wo.version);

        pl_store_stats ss = PL_STORE_STATS_INIT;
        ss.version = BAD(PL_STORE_STATS);
        expect_refused(pl_engine_stats(&ss, e), "pl_store_stats", ss.version);
        pl_schema_error se = PL_SCHEMA_ERROR_INIT;
        se.version = BAD(PL_SCHEMA_ERROR);
        expect_refused(pl_schema_validate(&se, schema, pl_json_empty()),
                       "pl_schema_error", se.version);
        pl_llm_tokens lt = PL_LLM_TOKENS_INIT;
        lt.version = BAD(PL_LLM_TOKENS);
        expect_refused(pl_llm_run_tokens(&lt, e, "any"), "pl_llm_tokens",
                       lt.version);

        pl_decorator deco;
        pl_retry_options rt = PL_RETRY_OPTIONS_INIT;
        rt.version = BAD(PL_RETRY_OPTIONS);
        expect_refused(pl_decorator_retry(&deco, &rt), "pl_retry_options",
                       rt.version);
        pl_budget bu = PL_BUDGET_INIT;
        bu.max_steps = 1;
        bu.version = BAD(PL_BUDGET);
        expect_refused(pl_decorator_budget(&deco, &bu), "pl_budget",
                       bu.version);

        pl_paginate_options pg = PL_PAGINATE_OPTIONS_INIT;
        pg.version = BAD(PL_PAGINATE_OPTIONS);
        expect_refused(pl_decorator_paginate(&deco, &pg), "pl_paginate_options",
                       pg.version);
        pl_observe_options ob = PL_OBSERVE_OPTIONS_INIT;
        ob.version = BAD(PL_OBSERVE_OPTIONS);
        expect_refused(pl_decorator_observe(&deco, &ob), "pl_observe_options",
                       ob.version);

#if PL_WITH_CURL /* without libcurl there is no exporter to open */
        pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
        oo.endpoint = "http://127.0.0.1:9";
        oo.version = BAD(PL_OTEL_OPTIONS);
        pl_otel *otel = NULL;
        expect_refused(pl_otel_open(&otel, &oo), "pl_otel_options", oo.version);
#endif
        pl_sandbox_options so = PL_SANDBOX_OPTIONS_INIT;
        so.version = BAD(PL_SANDBOX_OPTIONS);
        pl_sandbox *sb = NULL;
        expect_refused(pl_sandbox_new(&sb, g_dir, &so), "pl_sandbox_options",
                       so.version);
        pl_tools_options to = PL_TOOLS_OPTIONS_INIT;
        to.version = BAD(PL_TOOLS_OPTIONS);
        pl_tools *tools = NULL;
        expect_refused(pl_tools_new(&tools, &to), "pl_tools_options",
                       to.version);
        pl_llm_options lo = PL_LLM_OPTIONS_INIT;
        lo.version = BAD(PL_LLM_OPTIONS);
        expect_refused(pl_llm_register(reg, "llm", "scripted:///dev/null", NULL,
                                       &lo),
                       "pl_llm_options", lo.version);
#undef BAD
    }
#if PL_WITH_CURL /* without libcurl there is no exporter to count */
    /* the otel counts: refused before anything is written */
    pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
    oo.endpoint = "http://127.0.0.1:9";
    pl_otel *otel = NULL;
    cr_assert_eq(pl_otel_open(&otel, &oo), PL_OK, "%s", pl_errmsg());
    pl_otel_counts oc = PL_OTEL_COUNTS_INIT;
    cr_expect_eq(pl_otel_stats(&oc, otel), PL_OK);
    oc.version = 0;
    expect_refused(pl_otel_stats(&oc, otel), "pl_otel_counts", 0);
    oc.version = PL_OTEL_COUNTS_VERSION + 1;
    expect_refused(pl_otel_stats(&oc, otel), "pl_otel_counts",
                   PL_OTEL_COUNTS_VERSION + 1);
    pl_otel_close(otel);
#endif
    pl_schema_free(schema);
    pl_engine_close(e);
    pl_registry_free(reg);
}
