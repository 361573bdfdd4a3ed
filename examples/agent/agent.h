/*
 * agent.h -- a research-and-approve agent: a model researches a question
 * with tools (calculator, read_file, http_get, ask_human), then a human
 * approves or rejects its answer.  search_notes, a search of the notes,
 * answers in pages; the model sees a normalised observation of them.  Every model call, tool call and the
 * approval are durable steps of the run.
 */
#ifndef AGENT_H
#define AGENT_H

#include <policyledger_llm.h>

/** The root policy: payload {"question": "..."}. */
#define AGENT_ROOT "agent"
/** The model's policy, called by the root under loop + invoke_action. */
#define AGENT_MODEL_POLICY "researcher"
/** The human who approves (pl_registry_add_human()). */
#define AGENT_HUMAN "ask_human"
/** Turns the model may take before the loop gives up. */
#define AGENT_MAX_TURNS 12
/** Times the human is asked when an answer is neither yes nor no. */
#define AGENT_MAX_ASKS 3
/** With "approval_timeout_ms" in the root's payload, the approval is an
 *  event of this name (pl_run_signal()) awaited that long, else the run
 *  escalates. */
#define AGENT_APPROVAL_EVENT "approval"
/** Tells the approver an answer awaits them (the timed approval). */
#define AGENT_NOTIFY "notify_approver"
/** Escalates an approval that did not come in time. */
#define AGENT_ESCALATE "escalate"
/** With the reference filesystem MCP server mounted as "fs"
 *  (pl_mcp_register()), the model reads files with this tool of it, by
 *  absolute path, instead of read_file, and may list its roots with
 *  AGENT_MCP_ROOTS. */
#define AGENT_MCP_READ "fs.read_text_file"
#define AGENT_MCP_ROOTS "fs.list_allowed_directories"

/**
 * Register the agent's policies in @p reg: the model at @p model_url, the
 * tools of @p tools (pl_tools_register()), search_notes (a paginated
 * search of the notes in @p data), ask_human, notify_approver, escalate
 * and the root.
 * @param tools, data borrowed: must outlive every engine using @p reg.
 * @param on_delta the model's answers streamed to it (pl_llm_options), or
 *        NULL.
 * @return PL_OK, or the first registration's failure.
 */
int agent_register(pl_registry *reg, const char *model_url,
                   const pl_tools *tools, const pl_sandbox *data,
                   pl_llm_delta_fn on_delta);

#endif /* AGENT_H */
