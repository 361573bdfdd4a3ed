/*
 * agent_plugin.c -- the research-and-approve agent as a plugin
 * (agent-plugin.so), for agent-demo and for ledger-replay.
 *
 * Configuration comes from the environment, read once when the plugin is
 * loaded (the host sets it before pl_plugin_load()):
 *
 *   AGENT_MODEL  the model URL (policyledger_llm.h): scripted://PATH,
 *                openai://gpt-4o-mini, ...  Required.
 *   AGENT_DATA   the data directory: read_file's sandbox and the only
 *                place file:// URLs may read.  Required.
 *   AGENT_ALLOW  optional: one more URL prefix http_get may fetch
 *                ("https://example.org"); loopback http is always allowed.
 *
 * A run recorded with one model must be continued with the same model URL.
 */
#include <stdlib.h>

#include "agent.h"

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg);

/* The tools' settings must outlive every engine on the registry: they live
 * as long as the plugin, and are freed when the registry unloads it. */
static pl_tools *tools;
static pl_sandbox *data_dir; /* search_notes' */

__attribute__((destructor)) static void agent_plugin_unload(void)
{
    pl_tools_free(tools);
    tools = NULL;
    pl_sandbox_free(data_dir);
    data_dir = NULL;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int pl_plugin_init(pl_registry *reg)
{
    const char *model = env("AGENT_MODEL"), *data = env("AGENT_DATA");
    if (!model)
        return pl_errorf(PL_EINVAL, "agent-plugin: set AGENT_MODEL to the "
                                    "model URL (e.g. scripted://PATH)");
    if (!data)
        return pl_errorf(PL_EINVAL, "agent-plugin: set AGENT_DATA to the "
                                    "data directory");
    const char *allow[] = {"file://", "http://127.0.0.1", "http://localhost",
                           "http://[::1]", env("AGENT_ALLOW")};
    pl_tools_options to = PL_TOOLS_OPTIONS_INIT;
    to.root = data;
    to.allow = allow;
    to.n_allow = allow[4] ? 5 : 4;
    if (!tools) {
        int st = pl_tools_new(&tools, &to);
        if (st)
            return st;
    }
    if (!data_dir) {
        int st = pl_sandbox_new(&data_dir, data, NULL);
        if (st)
            return st;
    }
    return agent_register(reg, model, tools, data_dir);
}
