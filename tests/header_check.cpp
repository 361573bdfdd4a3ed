/*
 * The public header compiles as C++ under -std=c++11 -pedantic -Werror: its
 * declarations link as C, its enums and option structs work, and the _INIT
 * macros initialise the option structs.  Compiled only, never run.
 */
#include <policyledger.h>
#include <policyledger_llm.h>
#include <policyledger_mcp.h>

int pl_header_check_cxx(void);

static int policy(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                  void *user)
{
    (void)action;
    (void)user;
    return pl_steps_add_text(out, pl_ctx_policy(ctx), "hello");
}

int pl_header_check_cxx(void)
{
    pl_policy_def def = PL_POLICY_DEF_INIT;
    def.name = "hello";
    def.fn = policy;
    pl_engine_options eopts = PL_ENGINE_OPTIONS_INIT;
    eopts.durability = PL_DURABILITY_GROUP;
    pl_run_options ropts = PL_RUN_OPTIONS_INIT;
    ropts.run_id = "r1";
    pl_pool_options popts = PL_POOL_OPTIONS_INIT;
    popts.threads = 2;
    pl_decorator decorators[2];
    pl_decorator_loop(&decorators[0], 4);
    pl_decorator_invoke_action(&decorators[1]);
    pl_decorator user_decorator = PL_DECORATOR_INIT;
    (void)user_decorator;
    pl_llm_options lopts = PL_LLM_OPTIONS_INIT;
    lopts.malformed = PL_LLM_MALFORMED_REPROMPT;

    pl_registry *reg = NULL;
    int st = pl_registry_new(&reg);
    if (st == PL_OK)
        st = pl_registry_add(reg, &def);
    if (st == PL_OK)
        st = pl_llm_register(reg, "model", "scripted://x.json", NULL, &lopts);
    pl_engine *engine = NULL;
    if (st == PL_OK)
        st = pl_engine_open(&engine, "/nonexistent", reg, &eopts);
    pl_outcome *outcome = NULL;
    pl_action root = PL_ACTION_INIT;
    root.policy = "hello";
    root.payload = pl_json_empty();
    if (st == PL_OK)
        st = pl_run_start(&outcome, engine, &root, &ropts);
    pl_outcome_free(outcome);
    pl_pool *pool = NULL;
    if (st == PL_OK && pl_pool_new(&pool, engine, &popts) == PL_OK)
        pl_pool_free(pool);
    pl_engine_close(engine);
    pl_registry_free(reg);

    pl_sandbox_options sopts = PL_SANDBOX_OPTIONS_INIT;
    sopts.walk_only = true;
    pl_sandbox *sb = NULL;
    if (pl_sandbox_new(&sb, "/nonexistent", &sopts) == PL_OK)
        pl_sandbox_free(sb);
    pl_tools_options topts = PL_TOOLS_OPTIONS_INIT;
    topts.max_redirects = 0;
    pl_tools *tools = NULL;
    if (pl_tools_new(&tools, &topts) == PL_OK)
        pl_tools_free(tools);

    def.output_schema = "{\"type\": \"object\"}";
    pl_schema *schema = NULL;
    pl_schema_error serr = PL_SCHEMA_ERROR_INIT;
    if (pl_schema_compile_text(&schema, def.output_schema) == PL_OK)
        (void)pl_schema_validate(&serr, schema, pl_json_empty());
    pl_schema_free(schema);
    pl_schema_cache *cache = NULL;
    pl_decorator validate = PL_DECORATOR_INIT;
    if (pl_schema_cache_new(&cache) == PL_OK)
        (void)pl_decorator_validate(&validate, cache);
    pl_schema_cache_free(cache);
    pl_store_stats stats = PL_STORE_STATS_INIT;
    pl_otel_counts counts = PL_OTEL_COUNTS_INIT;
    pl_llm_tokens tokens = PL_LLM_TOKENS_INIT;
    pl_side_effect_match match = PL_SIDE_EFFECT_MATCH_INIT;
    if (stats.version + counts.version + tokens.version + match.version != 4)
        return PL_EINVAL;

    pl_status status = PL_ENONDET;
    pl_step_type type = PL_STEP_ACTION_RESULT;
    return (pl_strerror(status)[0] && pl_step_type_name(type) &&
            decorators[0].fn && PL_MAX_NAME > 0)
               ? st
               : PL_EINVAL;
}

// A plugin's two symbols, defined as a C++ plugin does: they keep the C
// linkage and default visibility the header declares.
PL_PLUGIN_DECLARE;
int pl_plugin_init(pl_registry *reg) { return reg ? PL_OK : PL_EINVAL; }
