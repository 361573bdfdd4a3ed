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
 *   AGENT_STREAM optional: "1" streams the model's answers to standard
 *                output as they are written (each turn's text, then each
 *                tool call's arguments; a turn served from the ledger
 *                comes whole, marked "from the ledger").
 *   AGENT_MCP    optional: NAME=SPEC, an MCP server this plugin mounts
 *                (pl_mcp_register(): its tools become NAME.TOOL); as
 *                "fs", the filesystem server, the model reads the data
 *                through it.  The server stops when the plugin is
 *                unloaded.  AGENT_MCP_LOG: a file for its standard error.
 *
 * A run recorded with one model must be continued with the same model URL.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger_mcp.h>

#include "agent.h"

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg);

/* The tools' settings must outlive every engine on the registry: they live
 * as long as the plugin, and are freed when the registry unloads it. */
static pl_tools *tools;
static pl_sandbox *data_dir; /* search_notes' */
/* AGENT_MCP's server, once for each registry that loaded the plugin */
#define MAX_MOUNTS 8
static pl_mcp *mounts[MAX_MOUNTS];
static size_t n_mounts;

__attribute__((destructor)) static void agent_plugin_unload(void)
{
    for (size_t i = 0; i < n_mounts; i++)
        pl_mcp_close(mounts[i]);
    n_mounts = 0;
    pl_tools_free(tools);
    tools = NULL;
    pl_sandbox_free(data_dir);
    data_dir = NULL;
}

/* AGENT_STREAM: the model's answers as they are written.  A turn's text
 * follows its heading; each tool call's arguments follow its name. */
static bool line_open; /* a turn is being printed */
static long last_tool = -1;

static void print_delta(const pl_llm_delta *d, void *user)
{
    (void)user;
    if (d->kind == PL_LLM_DELTA_RESTARTED || d->kind == PL_LLM_DELTA_END) {
        printf("%s\n", d->kind == PL_LLM_DELTA_END
                           ? ""
                           : "  [the stream was cut: what it wrote is void]");
        line_open = false;
        fflush(stdout);
        return;
    }
    if (d->kind != PL_LLM_DELTA_TEXT && d->kind != PL_LLM_DELTA_TOOL_ARGS)
        return;
    if (!line_open) {
        printf("   model, turn %u%s: ", d->turn,
               d->replayed ? " (from the ledger)" : "");
        line_open = true;
        last_tool = -1;
    }
    if (d->kind == PL_LLM_DELTA_TOOL_ARGS && (long)d->tool_index != last_tool) {
        printf("\n      -> %s ", d->tool ? d->tool : "?");
        last_tool = (long)d->tool_index;
    }
    fwrite(d->text, 1, d->len, stdout);
    fflush(stdout);
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
    const char *mcp = env("AGENT_MCP"), *eq = mcp ? strchr(mcp, '=') : NULL;
    if (mcp) {
        char name[80];
        if (!eq || eq == mcp || eq - mcp >= (long)sizeof name)
            return pl_errorf(PL_EINVAL,
                             "agent-plugin: AGENT_MCP is NAME=SPEC, "
                             "not '%s'",
                             mcp);
        if (n_mounts == MAX_MOUNTS)
            return pl_errorf(PL_EINVAL, "agent-plugin: AGENT_MCP: loaded into "
                                        "too many registries");
        snprintf(name, sizeof name, "%.*s", (int)(eq - mcp), mcp);
        pl_mcp_options o = PL_MCP_OPTIONS_INIT;
        o.stderr_path = env("AGENT_MCP_LOG");
        int st = pl_mcp_register(&mounts[n_mounts], reg, name, eq + 1, &o);
        if (st)
            return st;
        n_mounts++;
    }
    const char *stream = env("AGENT_STREAM");
    return agent_register(reg, model, tools, data_dir,
                          stream && !strcmp(stream, "1") ? print_delta : NULL);
}
