/*
 * test_api_args_ctx.c -- test_api_args.c's tables for what runs without an
 * engine (steps, the registry, JSON, schemas, the sandbox, tools, traces,
 * decorators, models, MCP servers), for a running policy's context (each
 * row in a run of its own: the run goes on or stops as the header says,
 * and a refused call leaves no step), and the NULL-safe accessors.
 */
#define _GNU_SOURCE /* strcasestr */
#include "support_api_args.h"

#include <stdio.h>
#include <string.h>

TestSuite(api_args_ctx, .timeout = 120);

/* ------------------------------------------------------------------------ */
/* Without an engine: steps, the registry, JSON, schemas, the sandbox,      */
/* tools, traces, decorators, models and MCP servers                        */
/* ------------------------------------------------------------------------ */

static int noop_policy(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_result(out, pl_json_empty());
}

static void noop_release(void *user) { (void)user; }

/* pl_json_vpack() and pl_json_vunpack(), through a va_list */
static int vpack(cJSON **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = pl_json_vpack(out, fmt, ap);
    va_end(ap);
    return st;
}

static int vunpack(const cJSON *json, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = pl_json_vunpack(json, fmt, ap);
    va_end(ap);
    return st;
}

#define DEF(v, nm, pf)                                                         \
    (&(pl_policy_def){.version = (v), .name = (nm), .fn = (pf)})
static pl_steps *g_steps;   /* an empty list */
static pl_sandbox *g_sb;    /* a sandbox on a temporary directory */
static pl_schema *g_schema; /* {"type": "object"} */
static pl_decorator g_dec;  /* a constructor's output */
static const char *const g_argv[] = {"true", NULL};
/* clang-format off */
#define PURE_ROWS(X)                                                                       \
    X(dur_out, PL_EINVAL, "durability", OUT_ANY, pl_durability_parse(NULL, "sync"))       \
    X(dur_name, PL_EINVAL, "durability", OUT_ANY, pl_durability_parse(&f->out.dur, NULL)) \
    X(dur_bad, PL_EINVAL, "durability", OUT_ANY, pl_durability_parse(&f->out.dur, "fast")) \
    X(type_out, PL_EINVAL, "out", OUT_ANY, pl_step_type_parse(NULL, "text"))        \
    X(type_bad, PL_EINVAL, "step type", OUT_ANY, pl_step_type_parse(&f->out.type, "txt")) \
    X(prev_hash_step, PL_EINVAL, "step", OUT_ANY, pl_step_prev_hash(f->out.hash, NULL))   \
    X(hash_step, PL_EINVAL, "step", OUT_ANY, pl_step_hash(f->out.hash, NULL))             \
    X(steps_new, PL_EINVAL, "out", OUT_ANY, pl_steps_new(NULL))                           \
    X(steps_move_dst, PL_EINVAL, "lists", OUT_ANY, pl_steps_move(NULL, g_steps))           \
    X(steps_move_same, PL_EINVAL, "different", OUT_ANY, pl_steps_move(g_steps, g_steps))       \
    X(steps_push_list, PL_EINVAL, "list", OUT_ANY, pl_steps_push(NULL, NULL))             \
    X(steps_push_step, PL_EINVAL, "step", OUT_ANY, pl_steps_push(g_steps, NULL))          \
    X(steps_add_list, PL_EINVAL, "list", OUT_ANY, pl_steps_add(NULL, PL_STEP_TEXT, "a", f->obj)) \
    X(steps_add_type, PL_EINVAL, "step type", OUT_ANY, pl_steps_add(g_steps, (pl_step_type)99, "a", f->obj)) \
    X(steps_add_wait, PL_EINVAL, "engine", OUT_ANY, pl_steps_add(g_steps, PL_STEP_WAIT, "a", f->obj)) \
    X(steps_add_actor, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, NULL, f->obj)) \
    X(steps_add_actor_empty, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, "", f->obj)) \
    X(steps_add_actor_long, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, f->long_name, f->obj)) \
    X(steps_add_actor_utf8, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, BAD_UTF8, f->obj)) \
    X(steps_add_actor_ctrl, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, CTRL_ID, f->obj)) \
    X(steps_add_payload, PL_EINVAL, "payload", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, "a", NULL)) \
    X(steps_add_payload_arr, PL_EJSON, "payload", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, "a", f->arr)) \
    X(steps_text_list, PL_EINVAL, "list", OUT_ANY, pl_steps_add_text(NULL, "a", "hi"))    \
    X(steps_text_text, PL_EINVAL, "text", OUT_ANY, pl_steps_add_text(g_steps, "a", NULL)) \
    X(steps_result_payload, PL_EINVAL, "payload", OUT_ANY, pl_steps_add_result(g_steps, NULL)) \
    X(steps_result_arr, PL_EJSON, "payload", OUT_ANY, pl_steps_add_result(g_steps, f->arr)) \
    X(steps_call_policy, PL_EINVAL, "policy", OUT_ANY, pl_steps_add_call(g_steps, NULL, f->obj)) \
    X(steps_call_policy_long, PL_EINVAL, "policy", OUT_ANY, pl_steps_add_call(g_steps, f->long_name, f->obj)) \
    X(steps_call_arr, PL_EJSON, "payload", OUT_ANY, pl_steps_add_call(g_steps, "echo", f->arr)) \
    X(steps_error_code, PL_EINVAL, "code", OUT_ANY, pl_steps_add_error(g_steps, NULL, "m")) \
    X(steps_error_code_empty, PL_EINVAL, "code", OUT_ANY, pl_steps_add_error(g_steps, "", "m")) \
    X(steps_resultf_fmt, PL_EINVAL, "fmt", OUT_ANY, pl_steps_add_resultf(g_steps, NULL))  \
    X(steps_resultf_arr, PL_EJSON, "object", OUT_ANY, pl_steps_add_resultf(g_steps, "[i]", 1)) \
    X(reg_new, PL_EINVAL, "out", OUT_ANY, pl_registry_new(NULL))                          \
    X(reg_add_reg, PL_EINVAL, "registry", OUT_ANY, pl_registry_add(NULL, DEF(PL_POLICY_DEF_VERSION, "x", noop_policy))) \
    X(reg_add_def, PL_EINVAL, "def", OUT_ANY, pl_registry_add(f->reg, NULL))              \
    X(reg_add_v0, PL_EINVAL, "version", OUT_ANY, pl_registry_add(f->reg, DEF(0, "x", noop_policy))) \
    X(reg_add_v99, PL_EINVAL, "version", OUT_ANY, pl_registry_add(f->reg, DEF(99, "x", noop_policy))) \
    X(reg_add_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, NULL, noop_policy))) \
    X(reg_add_name_empty, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, "", noop_policy))) \
    X(reg_add_name_long, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, f->long_name, noop_policy))) \
    X(reg_add_name_utf8, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, BAD_UTF8, noop_policy))) \
    X(reg_add_name_ctrl, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, CTRL_ID, noop_policy))) \
    X(reg_add_fn, PL_EINVAL, "function", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, "x", NULL))) \
    X(reg_add_taken, PL_EEXIST, "echo", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, "echo", noop_policy))) \
    X(reg_add_schema_arr, PL_EJSON, "schema", OUT_ANY, pl_registry_add(f->reg, (&(pl_policy_def){.version = PL_POLICY_DEF_VERSION, .name = "x", .fn = noop_policy, .input_schema = "[]"}))) \
    X(reg_add_schema_bad, PL_EJSON, "schema", OUT_ANY, pl_registry_add(f->reg, (&(pl_policy_def){.version = PL_POLICY_DEF_VERSION, .name = "x", .fn = noop_policy, .input_schema = "{"}))) \
    X(reg_owned_release, PL_EINVAL, "release", OUT_ANY, pl_registry_add_owned(f->reg, DEF(PL_POLICY_DEF_VERSION, "x", noop_policy), NULL)) \
    X(reg_owned_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add_owned(f->reg, DEF(PL_POLICY_DEF_VERSION, "", noop_policy), noop_release)) \
    X(reg_fn_reg, PL_EINVAL, "registry", OUT_ANY, pl_registry_add_fn(NULL, "x", noop_policy, NULL)) \
    X(reg_fn_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add_fn(f->reg, NULL, noop_policy, NULL)) \
    X(reg_fn_fn, PL_EINVAL, "function", OUT_ANY, pl_registry_add_fn(f->reg, "x", NULL, NULL))   \
    X(reg_human_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add_human(f->reg, NULL))    \
    X(reg_human_reg, PL_EINVAL, "registry", OUT_ANY, pl_registry_add_human(NULL, "h"))    \
    X(plugin_reg, PL_EINVAL, "registry", OUT_ANY, pl_plugin_load(NULL, "/nonexistent.so")) \
    X(plugin_path, PL_EINVAL, "path", OUT_ANY, pl_plugin_load(f->reg, NULL))              \
    X(plugin_path_empty, PL_EINVAL, "path", OUT_ANY, pl_plugin_load(f->reg, ""))          \
    X(plugin_missing, PL_ENOTFOUND, "/nonexistent", OUT_ANY, pl_plugin_load(f->reg, "/nonexistent/p.so")) \
    X(pack_out, PL_EINVAL, "out", OUT_ANY, pl_json_pack(NULL, "{s:i}", "a", 1))           \
    X(pack_fmt, PL_EINVAL, "fmt", OUT_ZERO, pl_json_pack(&f->out.json, NULL))             \
    X(pack_fmt_bad, PL_EINVAL, "format", OUT_ZERO, pl_json_pack(&f->out.json, "{s:i", "a", 1)) \
    X(pack_key, PL_EINVAL, "key", OUT_ZERO, pl_json_pack(&f->out.json, "{s:i}", (const char *)NULL, 1)) \
    X(pack_str, PL_EINVAL, "NULL", OUT_ZERO, pl_json_pack(&f->out.json, "{s:s}", "a", (const char *)NULL)) \
    X(unpack_json, PL_EINVAL, "json", OUT_ANY, pl_json_unpack(NULL, "{}"))                \
    X(unpack_fmt, PL_EINVAL, "fmt", OUT_ANY, pl_json_unpack(f->obj, NULL))                \
    X(schema_out, PL_EINVAL, "out", OUT_ANY, pl_schema_compile(NULL, f->obj))             \
    X(schema_null, PL_EINVAL, "schema", OUT_ZERO, pl_schema_compile(&f->out.schema, NULL)) \
    X(schema_arr, PL_EJSON, "object", OUT_ZERO, pl_schema_compile(&f->out.schema, f->arr)) \
    X(schema_text_null, PL_EINVAL, "text", OUT_ZERO, pl_schema_compile_text(&f->out.schema, NULL)) \
    X(schema_text_bad, PL_EJSON, "JSON", OUT_ZERO, pl_schema_compile_text(&f->out.schema, "{")) \
    X(schema_text_empty, PL_EJSON, "JSON", OUT_ZERO, pl_schema_compile_text(&f->out.schema, "")) \
    X(validate_schema, PL_EINVAL, "schema", OUT_ANY, pl_schema_validate(NULL, NULL, f->obj)) \
    X(validate_instance, PL_EINVAL, "instance", OUT_ANY, pl_schema_validate(NULL, g_schema, NULL)) \
    X(validate_v0, PL_EINVAL, "version", OUT_ANY, pl_schema_validate(V(pl_schema_error, 0), g_schema, f->obj)) \
    X(sb_out, PL_EINVAL, "out", OUT_ANY, pl_sandbox_new(NULL, "/tmp", NULL))              \
    X(sb_root, PL_EINVAL, "root", OUT_ZERO, pl_sandbox_new(&f->out.sb, NULL, NULL))       \
    X(sb_root_empty, PL_EINVAL, "root", OUT_ZERO, pl_sandbox_new(&f->out.sb, "", NULL))   \
    X(sb_root_missing, PL_ENOTFOUND, "/nonexistent", OUT_ZERO, pl_sandbox_new(&f->out.sb, "/nonexistent/dir", NULL)) \
    X(sb_v0, PL_EINVAL, "version", OUT_ZERO, pl_sandbox_new(&f->out.sb, "/tmp", V(pl_sandbox_options, 0))) \
    X(sb_v99, PL_EINVAL, "version", OUT_ZERO, pl_sandbox_new(&f->out.sb, "/tmp", V(pl_sandbox_options, 99))) \
    X(sb_resolve_out, PL_EINVAL, "out", OUT_ANY, pl_sandbox_resolve(NULL, g_sb, "a", 1))  \
    X(sb_resolve_sb, PL_EINVAL, "sandbox", OUT_ZERO, pl_sandbox_resolve(&f->out.str, NULL, "a", 1)) \
    X(sb_resolve_path, PL_EINVAL, "path", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, NULL, 1)) \
    X(sb_resolve_escape, PL_EFORBIDDEN, "..", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, "../x", 4)) \
    X(sb_resolve_nul, PL_EINVAL, "NUL", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, "a\0b", 3)) \
    X(sb_resolve_huge, PL_ELIMIT, "longer", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, "a", SIZE_MAX)) \
    X(sb_open_out, PL_EINVAL, "out", OUT_ANY, pl_sandbox_open_file(NULL, g_sb, "a", 1, 0, 0)) \
    X(sb_open_escape, PL_EFORBIDDEN, "..", OUT_ANY, pl_sandbox_open_file(&f->out.fd, g_sb, "../x", 4, 0, 0)) \
    X(sb_cmd_sb, PL_EINVAL, "sandbox", OUT_ANY, pl_sandbox_check_command(NULL, g_argv, 1)) \
    X(sb_cmd_argv, PL_EINVAL, "argv", OUT_ANY, pl_sandbox_check_command(g_sb, NULL, 1))   \
    X(sb_cmd_argc, PL_EINVAL, "empty", OUT_ANY, pl_sandbox_check_command(g_sb, g_argv, 0)) \
    X(sb_cmd_argc_huge, PL_EINVAL, "NULL", OUT_ANY, pl_sandbox_check_command(g_sb, g_argv, 2)) \
    X(sb_cmd_in_sb, PL_EINVAL, "sandbox", OUT_ANY, pl_sandbox_check_command_in(NULL, ".", g_argv, 1)) \
    X(tools_out, PL_EINVAL, "out", OUT_ANY, pl_tools_new(NULL, NULL))                     \
    X(tools_v0, PL_EINVAL, "version", OUT_ZERO, pl_tools_new(&f->out.tools, V(pl_tools_options, 0))) \
    X(tools_reg, PL_EINVAL, "registry", OUT_ANY, pl_tools_register(NULL, NULL))           \
    X(trace_out, PL_EINVAL, "out", OUT_ANY, pl_trace_open(NULL, "/tmp/x"))                \
    X(trace_path, PL_EINVAL, "path", OUT_ZERO, pl_trace_open(&f->out.trace, NULL))        \
    X(trace_path_empty, PL_EIO, "cannot open", OUT_ZERO, pl_trace_open(&f->out.trace, ""))    \
    X(otel_out, PL_WITH_CURL ? PL_EINVAL : PL_EIO, "pl_otel_open", OUT_ANY, pl_otel_open(NULL, NULL)) \
    X(otel_v0, PL_WITH_CURL ? PL_EINVAL : PL_EIO, "pl_otel_open", OUT_ZERO, pl_otel_open(&f->out.otel, V(pl_otel_options, 0))) \
    X(vpack_fmt, PL_EINVAL, "fmt", OUT_ZERO, vpack(&f->out.json, NULL))                   \
    X(vunpack_json, PL_EINVAL, "json", OUT_ANY, vunpack(NULL, "{}"))                      \
    X(otel_stats, PL_EINVAL, "otel", OUT_ANY, pl_otel_stats(V(pl_otel_counts, 1), NULL))  \
    X(otel_flush, PL_EINVAL, "otel", OUT_ANY, pl_otel_flush(NULL, 10))                    \
    X(cache_out, PL_EINVAL, "out", OUT_ANY, pl_schema_cache_new(NULL))                    \
    X(dec_validate_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_validate(NULL, NULL))     \
    X(dec_loop_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_loop(NULL, 3))                \
    X(dec_invoke_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_invoke_action(NULL))        \
    X(dec_invoke_with_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_invoke_action_with(NULL, NULL, 0)) \
    X(dec_invoke_with_per, PL_EINVAL, "list", OUT_ANY, pl_decorator_invoke_action_with(&g_dec, NULL, 2)) \
    X(dec_retry_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_retry(NULL, NULL))           \
    X(dec_retry_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_retry(&g_dec, V(pl_retry_options, 0))) \
    X(dec_retry_v99, PL_EINVAL, "version", OUT_ANY, pl_decorator_retry(&g_dec, V(pl_retry_options, 99))) \
    X(dec_timeout_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_timeout(NULL, 100))        \
    X(dec_timeout_zero, PL_EINVAL, "ms", OUT_ANY, pl_decorator_timeout(&g_dec, 0))        \
    X(dec_timeout_neg, PL_EINVAL, "ms", OUT_ANY, pl_decorator_timeout(&g_dec, -5))        \
    X(dec_timeout_huge, PL_EINVAL, "ms", OUT_ANY, pl_decorator_timeout(&g_dec, INT64_MAX)) \
    X(dec_budget_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_budget(NULL, V(pl_budget, 1))) \
    X(dec_budget_null, PL_EINVAL, "limits", OUT_ANY, pl_decorator_budget(&g_dec, NULL))   \
    X(dec_budget_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_budget(&g_dec, V(pl_budget, 0))) \
    X(dec_cap_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_cap(NULL, 100))                \
    X(dec_cap_zero, PL_EINVAL, "cap", OUT_ANY, pl_decorator_cap(&g_dec, 0))         \
    X(dec_rate_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_rate_limit(NULL, NULL))       \
    X(dec_rate_null, PL_EINVAL, "options", OUT_ANY, pl_decorator_rate_limit(&g_dec, NULL))   \
    X(dec_rate_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_rate_limit(&g_dec, V(pl_rate_limit_options, 0))) \
    X(dec_page_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_paginate(NULL, NULL))         \
    X(dec_page_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_paginate(&g_dec, V(pl_paginate_options, 0))) \
    X(dec_observe_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_observe(NULL, NULL))       \
    X(dec_observe_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_observe(&g_dec, V(pl_observe_options, 0))) \
    X(observation_out, PL_EINVAL, "out", OUT_ANY, pl_observation_default(NULL, "t", f->obj)) \
    X(observation_raw, PL_EINVAL, "raw", OUT_ZERO, pl_observation_default(&f->out.json, "t", NULL)) \
    X(llm_reg, PL_EINVAL, "reg", OUT_ANY, pl_llm_register(NULL, "m", "scripted://x", NULL, NULL)) \
    X(llm_name, PL_EINVAL, "name", OUT_ANY, pl_llm_register(f->reg, NULL, "scripted://x", NULL, NULL)) \
    X(llm_name_utf8, PL_EINVAL, "name", OUT_ANY, pl_llm_register(f->reg, BAD_UTF8, "scripted://x", NULL, NULL)) \
    X(llm_url, PL_EINVAL, "url", OUT_ANY, pl_llm_register(f->reg, "m", NULL, NULL, NULL)) \
    X(llm_url_bad, PL_EINVAL, "url", OUT_ANY, pl_llm_register(f->reg, "m", "gopher://x", NULL, NULL)) \
    X(llm_v0, PL_EINVAL, "version", OUT_ANY, pl_llm_register(f->reg, "m", "scripted://x", NULL, V(pl_llm_options, 0))) \
    X(mcp_out, PL_EINVAL, "out", OUT_ANY, pl_mcp_register(NULL, f->reg, "m", "stdio:true", NULL)) \
    X(mcp_reg, PL_EINVAL, "registry", OUT_ZERO, pl_mcp_register(&f->out.mcp, NULL, "m", "stdio:true", NULL)) \
    X(mcp_name, PL_EINVAL, "name", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, NULL, "stdio:true", NULL)) \
    X(mcp_name_utf8, PL_EINVAL, "name", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, BAD_UTF8, "stdio:true", NULL)) \
    X(mcp_spec, PL_EINVAL, "spec", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", NULL, NULL)) \
    X(mcp_spec_empty, PL_EINVAL, "spec", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", "", NULL)) \
    X(mcp_http, PL_WITH_CURL ? PL_EIO : PL_EINVAL, "http", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", "http://127.0.0.1:1/mcp", NULL)) \
    X(mcp_v0, PL_EINVAL, "version", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", "stdio:true", V(pl_mcp_options, 0)))
/* clang-format on */

PURE_ROWS(ROW_FN)

Test(api_args_ctx, without_an_engine)
{
    fx f;
    memset(&f, 0, sizeof f);
    fx_names(&f);
    f.reg = t_registry();
    size_t policies = pl_registry_count(f.reg);
    cr_assert_eq(pl_steps_new(&g_steps), PL_OK);
    cr_assert_eq(pl_sandbox_new(&g_sb, t_tmpdir(), NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_schema_compile_text(&g_schema, "{\"type\":\"object\"}"),
                 PL_OK, "%s", pl_errmsg());
    RUN_TABLE(&f, PURE_ROWS);
    /* nothing was added by a refused call */
    cr_expect_eq(pl_steps_count(g_steps), 0, "a refused step was added");
    cr_expect_eq(pl_registry_count(f.reg), policies,
                 "a refused policy was registered");
    pl_schema_free(g_schema);
    pl_sandbox_free(g_sb);
    pl_steps_free(g_steps);
    fx_close(&f);
}

/* ------------------------------------------------------------------------ */
/* The context: what a running policy is given                              */
/* ------------------------------------------------------------------------ */

static int se_fn(cJSON **out_value, void *user)
{
    (void)user;
    *out_value = cJSON_CreateObject();
    return *out_value ? PL_OK : PL_ENOMEM;
}

static bool se_match(const cJSON *recorded, char *why, size_t why_size,
                     void *user)
{
    (void)recorded;
    (void)why;
    (void)why_size;
    (void)user;
    return true;
}

#define SPEC(v, action) (&(pl_call_spec){(v), (action), NULL, 0})
#define MATCH_V(v) (&(pl_side_effect_match){(v), se_match, NULL})
/* a decorator of a version this library does not know */
#define DEC_V(v) (&(pl_decorator){.version = (v)})
static pl_steps *g_out; /* a policy's output list, in the probe */
static char g_uuid[PL_UUID_LEN + 1];
static int g_version;

/* clang-format off */
#define CTX_ROWS(X)                                                                        \
    X(call_ctx, PL_EINVAL, "ctx", OUT_ZERO, GOES, pl_ctx_call(&f->out.step, NULL, ACT("echo", f->obj), NULL, 0)) \
    X(call_action, PL_EINVAL, "action", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, NULL, NULL, 0)) \
    X(call_policy, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT(NULL, f->obj), NULL, 0)) \
    X(call_policy_empty, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT("", f->obj), NULL, 0)) \
    X(call_policy_long, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT(f->long_name, f->obj), NULL, 0)) \
    X(call_policy_utf8, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT(BAD_UTF8, f->obj), NULL, 0)) \
    X(call_payload, PL_EINVAL, "payload", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT("echo", NULL), NULL, 0)) \
    X(call_payload_arr, PL_EJSON, "payload", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT("echo", f->arr), NULL, 0)) \
    X(call_action_v0, PL_EINVAL, "version", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, (&(pl_action){0, "echo", f->obj, NULL, 0, NULL}), NULL, 0)) \
    X(call_decorators, PL_EINVAL, "decorators", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT("echo", f->obj), NULL, 2)) \
    X(call_decorator_v0, PL_EINVAL, "version", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT("echo", f->obj), DEC_V(0), 1)) \
    X(call_decorator_v99, PL_EINVAL, "version", OUT_ZERO, STOPS, pl_ctx_call(&f->out.step, f->ctx, ACT("echo", f->obj), DEC_V(99), 1)) \
    X(invoke_ctx, PL_EINVAL, "ctx", OUT_ZERO, GOES, pl_ctx_invoke(&f->out.json, NULL, "echo", f->obj)) \
    X(invoke_policy, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_invoke(&f->out.json, f->ctx, NULL, f->obj)) \
    X(invoke_policy_ctrl, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_invoke(&f->out.json, f->ctx, CTRL_ID, f->obj)) \
    X(invoke_payload, PL_EINVAL, "payload", OUT_ZERO, STOPS, pl_ctx_invoke(&f->out.json, f->ctx, "echo", NULL)) \
    X(invoke_payload_arr, PL_EJSON, "payload", OUT_ZERO, STOPS, pl_ctx_invoke(&f->out.json, f->ctx, "echo", f->arr)) \
    X(invokef_policy, PL_EINVAL, "policy", OUT_ZERO, STOPS, pl_ctx_invokef(&f->out.json, f->ctx, NULL, "{}")) \
    X(invokef_fmt, PL_EINVAL, "fmt", OUT_ZERO, GOES, pl_ctx_invokef(&f->out.json, f->ctx, "echo", NULL)) \
    X(invokef_arr, PL_EJSON, "object", OUT_ZERO, GOES, pl_ctx_invokef(&f->out.json, f->ctx, "echo", "[i]", 1)) \
    X(call_step_call, PL_EINVAL, "call", OUT_ZERO, GOES, pl_ctx_call_step(&f->out.step, f->ctx, NULL, NULL)) \
    X(call_step_ctx, PL_EINVAL, "ctx", OUT_ZERO, GOES, pl_ctx_call_step(&f->out.step, NULL, NULL, NULL)) \
    X(call_step_with_call, PL_EINVAL, "call", OUT_ZERO, GOES, pl_ctx_call_step_with(&f->out.step, f->ctx, NULL, NULL, NULL, 0)) \
    X(call_all_calls, PL_EINVAL, "calls", OUT_ANY, GOES, pl_ctx_call_all(NULL, f->ctx, NULL, 2)) \
    X(call_all_many, PL_ELIMIT, "at most", OUT_ANY, GOES, pl_ctx_call_all(NULL, f->ctx, SPEC(1, ACT("echo", f->obj)), PL_CALL_ALL_MAX + 1)) \
    X(call_all_v0, PL_EINVAL, "version", OUT_ANY, STOPS, pl_ctx_call_all(NULL, f->ctx, SPEC(0, ACT("echo", f->obj)), 1)) \
    X(call_all_action, PL_EINVAL, "action", OUT_ANY, STOPS, pl_ctx_call_all(NULL, f->ctx, SPEC(1, NULL), 1)) \
    X(ledger_out_ctx, PL_EINVAL, "out", OUT_ANY, GOES, pl_ctx_ledger(NULL, f->ctx))             \
    X(ledger_ctx, PL_EINVAL, "ctx", OUT_ZERO, GOES, pl_ctx_ledger(&f->out.view, NULL)) \
    X(emit_ctx, PL_EINVAL, "ctx", OUT_ANY, GOES, pl_ctx_emit(NULL, g_out, PL_STEP_TEXT, "a", f->obj)) \
    X(emit_out, PL_EINVAL, "list", OUT_ANY, GOES, pl_ctx_emit(f->ctx, NULL, PL_STEP_TEXT, "a", f->obj)) \
    X(emit_type, PL_EINVAL, "step type", OUT_ANY, GOES, pl_ctx_emit(f->ctx, g_out, (pl_step_type)99, "a", f->obj)) \
    X(emit_payload_arr, PL_EJSON, "payload", OUT_ANY, GOES, pl_ctx_emit(f->ctx, g_out, PL_STEP_TEXT, "a", f->arr)) \
    X(emit_actor_utf8, PL_EINVAL, "actor", OUT_ANY, GOES, pl_ctx_emit(f->ctx, g_out, PL_STEP_TEXT, BAD_UTF8, f->obj)) \
    X(now_out, PL_EINVAL, "out", OUT_ANY, GOES, pl_ctx_now(NULL, f->ctx))                       \
    X(now_ctx, PL_EINVAL, "ctx", OUT_ZERO, GOES, pl_ctx_now(&f->out.i64, NULL))             \
    X(random_out, PL_EINVAL, "out", OUT_ANY, GOES, pl_ctx_random(NULL, f->ctx))                 \
    X(random_ctx, PL_EINVAL, "ctx", OUT_ZERO, GOES, pl_ctx_random(&f->out.u64, NULL))       \
    X(uuid_out, PL_EINVAL, "out", OUT_ANY, GOES, pl_ctx_uuid(NULL, f->ctx))                     \
    X(uuid_ctx, PL_EINVAL, "ctx", OUT_ANY, GOES, pl_ctx_uuid(g_uuid, NULL))                 \
    X(se_out, PL_EINVAL, "out", OUT_ANY, GOES, pl_ctx_side_effect(NULL, f->ctx, "se", se_fn, NULL)) \
    X(se_name, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_side_effect(&f->out.json, f->ctx, NULL, se_fn, NULL)) \
    X(se_name_empty, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_side_effect(&f->out.json, f->ctx, "", se_fn, NULL)) \
    X(se_name_long, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_side_effect(&f->out.json, f->ctx, f->long_name, se_fn, NULL)) \
    X(se_name_utf8, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_side_effect(&f->out.json, f->ctx, BAD_UTF8, se_fn, NULL)) \
    X(se_fn, PL_EINVAL, "fn", OUT_ZERO, GOES, pl_ctx_side_effect(&f->out.json, f->ctx, "se", NULL, NULL)) \
    X(capture_name, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_capture(&f->out.json, f->ctx, CTRL_ID, se_fn, NULL)) \
    X(checked_match, PL_EINVAL, "match", OUT_ZERO, GOES, pl_ctx_side_effect_checked(&f->out.json, f->ctx, "se", se_fn, NULL, NULL)) \
    X(checked_v0, PL_EINVAL, "version", OUT_ZERO, GOES, pl_ctx_side_effect_checked(&f->out.json, f->ctx, "se", se_fn, MATCH_V(0), NULL)) \
    X(version_out, PL_EINVAL, "out", OUT_ANY, GOES, pl_ctx_version(NULL, f->ctx, "c", 1, 2))    \
    X(version_change, PL_EINVAL, "change", OUT_ANY, GOES, pl_ctx_version(&g_version, f->ctx, NULL, 1, 2)) \
    X(version_change_utf8, PL_EINVAL, "change", OUT_ANY, GOES, pl_ctx_version(&g_version, f->ctx, BAD_UTF8, 1, 2)) \
    X(version_range, PL_EINVAL, "max", OUT_ANY, GOES, pl_ctx_version(&g_version, f->ctx, "c", 3, 2)) \
    X(suspend_prompt, PL_EINVAL, "prompt", OUT_ZERO, GOES, pl_ctx_suspend(&f->out.json, f->ctx, NULL)) \
    X(suspend_prompt_arr, PL_EJSON, "prompt", OUT_ZERO, STOPS, pl_ctx_suspend(&f->out.json, f->ctx, f->arr)) \
    X(can_payload, PL_EINVAL, "payload", OUT_ANY, GOES, pl_ctx_continue_as_new(f->ctx, NULL))   \
    X(can_payload_arr, PL_EINVAL, "payload", OUT_ANY, GOES, pl_ctx_continue_as_new(f->ctx, f->arr)) \
    X(sleep_neg, PL_EINVAL, "ms", OUT_ANY, GOES, pl_ctx_sleep(f->ctx, -1))                      \
    X(sleep_huge, PL_EINVAL, "ms", OUT_ANY, GOES, pl_ctx_sleep(f->ctx, INT64_MAX))              \
    X(sleep_ctx, PL_EINVAL, "ctx", OUT_ANY, GOES, pl_ctx_sleep(NULL, 10))                   \
    X(sleep_until_neg, PL_EINVAL, "negative", OUT_ANY, GOES, pl_ctx_sleep_until(f->ctx, -1))     \
    X(sleep_past_2_53, PL_EINVAL, "2^53", OUT_ANY, GOES, pl_ctx_sleep(f->ctx, (INT64_C(1) << 53) + 1)) \
    X(sleep_until_huge, PL_EINVAL, "2^53", OUT_ANY, GOES, pl_ctx_sleep_until(f->ctx, INT64_MAX)) \
    X(wait_name, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_wait_event(&f->out.json, f->ctx, NULL, 0)) \
    X(wait_name_utf8, PL_EINVAL, "name", OUT_ZERO, GOES, pl_ctx_wait_event(&f->out.json, f->ctx, BAD_UTF8, 0)) \
    X(wait_timeout_neg, PL_EINVAL, "timeout", OUT_ZERO, GOES, pl_ctx_wait_event(&f->out.json, f->ctx, "ev", -5)) \
    X(wait_timeout_huge, PL_EINVAL, "timeout", OUT_ZERO, GOES, pl_ctx_wait_event(&f->out.json, f->ctx, "ev", INT64_MAX)) \
    X(wait_timeout_past_2_53, PL_EINVAL, "2^53", OUT_ZERO, GOES, pl_ctx_wait_event(&f->out.json, f->ctx, "ev", (INT64_C(1) << 53) + 1)) \
    X(deadline_neg, PL_EINVAL, "deadline", OUT_ANY, GOES, pl_ctx_set_deadline(f->ctx, -5))      \
    X(deadline_ctx, PL_EINVAL, "ctx", OUT_ANY, GOES, pl_ctx_set_deadline(NULL, 5))          \
    X(next_call, PL_EINVAL, "next", OUT_ANY, GOES, pl_next_call(NULL, f->ctx, ACT("echo", f->obj), g_out))
/* clang-format on */

#define STOPS true /* the run has stopped: the policy returns the status */
#define GOES false /* refused without touching the run */

typedef struct ctx_row {
    row r;
    bool stops;
} ctx_row;

#define CTX_ROW_FN(id, want, word, out, stops, call)                           \
    ROW_FN(id, want, word, out, call)
#define CTX_ROW_ENTRY(id, want, word, out, stops, call)                        \
    {{#call, want, word, out, row_##id}, stops},

CTX_ROWS(CTX_ROW_FN)

static const ctx_row g_ctx_rows[] = {CTX_ROWS(CTX_ROW_ENTRY)};

/* The NULL-safe accessors: each true. */
#define NULL_SAFE(X)                                                           \
    X(pl_ctx_run_id(NULL) == NULL)                                             \
    X(pl_ctx_path(NULL) == NULL)                                               \
    X(pl_ctx_policy(NULL) == NULL)                                             \
    X(pl_ctx_idempotency_key(NULL) == NULL)                                    \
    X(!pl_ctx_replaying(NULL))                                                 \
    X(pl_ctx_deadline(NULL) == 0)                                              \
    X(pl_ctx_engine(NULL) == NULL)                                             \
    X(pl_step_type_of(NULL) == 0)                                              \
    X(pl_step_actor(NULL) == NULL)                                             \
    X(pl_step_payload(NULL) == NULL)                                           \
    X(strcmp(pl_step_id(NULL), "") == 0)                                       \
    X(pl_step_seq(NULL) == 0)                                                  \
    X(pl_step_time_us(NULL) == 0)                                              \
    X(pl_step_code(NULL) == NULL)                                              \
    X(!pl_step_is_error(NULL))                                                 \
    X(!pl_step_flag(NULL, "again"))                                            \
    X(pl_step_error_code(NULL) == NULL)                                        \
    X(pl_steps_count(NULL) == 0)                                               \
    X(pl_steps_at(NULL, 0) == NULL)                                            \
    X(pl_registry_find(NULL, "echo") == NULL)                                  \
    X(pl_registry_count(NULL) == 0)                                            \
    X(pl_registry_at(NULL, 0) == NULL)                                         \
    X(pl_outcome_result(NULL) != NULL)                                         \
    X(pl_sandbox_root(NULL) == NULL)                                           \
    X(pl_mcp_protocol_version(NULL) == NULL)                                   \
    X(pl_mcp_tool_count(NULL) == 0)                                            \
    X(pl_mcp_tool(NULL, "t") == NULL)                                          \
    X(pl_run_status_name((pl_run_status)99) == NULL)                           \
    X(pl_step_type_name((pl_step_type)99) == NULL)                             \
    X(pl_event_kind_name((pl_event_kind)99) == NULL)                           \
    X(pl_durability_name((pl_durability)99) == NULL)                           \
    X(strcmp(pl_strerror(12345), "unknown status") == 0)                       \
    X(pl_status_name(12345) != NULL)                                           \
    X(pl_engine_registry(NULL) == NULL)                                        \
    X(pl_engine_durability(NULL) == PL_DURABILITY_SYNC)                        \
    X(pl_trace_close(NULL) == PL_OK)                                           \
    X(pl_otel_close(NULL) == PL_OK)
#define NULL_SAFE_CHECK(expr) cr_expect(expr, "%s", #expr);

Test(api_args_ctx, null_safe_accessors)
{
    NULL_SAFE(NULL_SAFE_CHECK)
    /* what frees, closes or takes an event: NULL does nothing */
    pl_engine_close(NULL);
    pl_pool_free(NULL);
    pl_outcome_free(NULL);
    pl_run_info_free(NULL);
    pl_step_free(NULL);
    pl_steps_free(NULL);
    pl_steps_clear(NULL);
    pl_registry_free(NULL);
    pl_schema_free(NULL);
    pl_schema_cache_free(NULL);
    pl_sandbox_free(NULL);
    pl_tools_free(NULL);
    pl_mcp_close(NULL);
    pl_worker_stop(NULL);
    pl_trace_event(NULL, NULL);
    pl_otel_event(NULL, NULL);
    cr_expect_eq(pl_errorf(PL_EINVAL, NULL), PL_EINVAL);
    cr_expect_str_eq(pl_errmsg(), "PL_EINVAL");
}

/* What a probe saw of its row, read by the test once the run ended. */
static struct {
    int status;
    char msg[512];
    uint64_t out;
    bool stopped; /* pl_ctx_now() failed after it: the run had stopped */
} g_seen;
static fx *g_probe;

/* probe: calls row payload.row with its own context, and returns what
 * the row's header says a policy does then. */
static int probe(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const ctx_row *cr =
        &g_ctx_rows[(int)cJSON_GetObjectItemCaseSensitive(a->payload, "row")
                        ->valuedouble];
    fx *f = g_probe;
    f->ctx = ctx;
    g_out = out;
    memset(&f->out, 0xA5, sizeof f->out);
    pl_errorf(PL_OK, "(no message)");
    fprintf(stderr, "api_args: %s\n", cr->r.call); /* named if it crashes */
    g_seen.status = cr->r.fn(f);
    snprintf(g_seen.msg, sizeof g_seen.msg, "%s", pl_errmsg());
    g_seen.out = f->out.u64;
    int64_t ms = 0;
    int st = pl_ctx_now(&ms, ctx);
    g_seen.stopped = st != PL_OK;
    if (st)
        return st;
    return pl_steps_add_result(out, pl_json_empty());
}

/* plain: what a probe whose call touched nothing records */
static int plain(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int64_t ms = 0;
    int st = pl_ctx_now(&ms, ctx);
    return st ? st : pl_steps_add_result(out, pl_json_empty());
}

Test(api_args_ctx, in_a_policy)
{
    fx f;
    memset(&f, 0, sizeof f);
    fx_names(&f);
    f.reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(f.reg, "probe", probe, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(f.reg, "plain", plain, NULL), PL_OK);
    g_store = t_store_path();
    f.e = t_engine(g_store, f.reg, PL_DURABILITY_PROCESS);
    g_probe = &f;
    pl_outcome_free(t_start(f.e, "plain", "{}", "plain"));
    pl_steps *want = NULL;
    cr_assert_eq(pl_run_ledger(&want, f.e, "plain", "0"), PL_OK, "%s",
                 pl_errmsg());
    for (size_t i = 0; i < sizeof g_ctx_rows / sizeof g_ctx_rows[0]; i++) {
        const ctx_row *cr = &g_ctx_rows[i];
        const char *call = cr->r.call;
        char id[32], payload[32];
        snprintf(id, sizeof id, "probe%zu", i);
        snprintf(payload, sizeof payload, "{\"row\":%zu}", i);
        pl_outcome *o = t_start(f.e, "probe", payload, id);
        cr_expect_eq(g_seen.status, cr->r.want, "%s: %s, want %s (%s)", call,
                     pl_status_name(g_seen.status), pl_status_name(cr->r.want),
                     g_seen.msg);
        if (g_seen.status != PL_OK)
            cr_expect(strcasestr(g_seen.msg, cr->r.word) != NULL,
                      "%s: the message does not name \"%s\": %s", call,
                      cr->r.word, g_seen.msg);
        if (cr->r.out == OUT_ZERO)
            cr_expect(g_seen.out == 0, "%s: out-parameter left 0x%llx", call,
                      (unsigned long long)g_seen.out);
        cr_expect_eq(g_seen.stopped, cr->stops, "%s: the run %s", call,
                     g_seen.stopped ? "stopped" : "went on");
        /* stopped, the run failed with the call's message as its reason;
         * else it completed as a plain run: the refused call left no step */
        cr_expect_eq(o->status, cr->stops ? PL_RUN_FAILED : PL_RUN_COMPLETED,
                     "%s: the run %s (%s)", call, pl_run_status_name(o->status),
                     o->reason ? o->reason : "");
        if (cr->stops)
            cr_expect(o->reason && strstr(o->reason, g_seen.msg),
                      "%s: the run's reason is not the call's message: %s",
                      call, o->reason ? o->reason : "(none)");
        pl_outcome_free(o);
        pl_steps *got = NULL;
        cr_assert_eq(pl_run_ledger(&got, f.e, id, "0"), PL_OK, "%s",
                     pl_errmsg());
        cr_expect_eq(pl_steps_count(got), cr->stops ? 0 : pl_steps_count(want),
                     "%s: the ledger holds %zu steps", call,
                     pl_steps_count(got));
        pl_steps_free(got);
        cr_expect_eq(pl_run_verify(f.e, id), PL_OK, "%s", pl_errmsg());
    }
    pl_steps_free(want);
    fx_close(&f);
}
