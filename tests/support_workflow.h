/*
 * support_workflow.h -- the order workflow test_workflow.c runs with its
 * workers killed, and tests/workflow_plugin.c gives ledger-replay: the
 * features of the engine in one run.
 *
 *   order    {"n", "rounds", "round"?, "timeout"?, "paid"?, "dup"?}:
 *            a version point ("invoice-child": 1 invoices after the
 *            fan-out, 2 before it; the newest WORKFLOW_VERSION says, 1 or
 *            2, default 1); in round 0 with a "timeout" (ms, -1 for
 *            none), a wait for the event "payment" {"amount"}: a timeout
 *            calls "release" and ends {"order", "status": "expired"}; a
 *            cancellation calls "release" (the saga's compensation) and
 *            ends the run cancelled; a payment is followed by a look for a
 *            second one (timeout 0: "dup").  Then a fan-out (call_all) of
 *            "reserve", "charge" (under the rate limit "psp", 1 call per
 *            200 ms) and "ship", and the child "invoice"; then, while
 *            round + 1 < rounds, continue as new with round + 1; the last
 *            round ends {"order", "status": "done", "paid", "rounds",
 *            "dup", "note": the invoice's note}.
 *   invoice  {"n", "round", "amount"}: calls "post", "crm.echo" {"n"}
 *            (an MCP server's tool) and "note"; {"invoice", "amount",
 *            "note": the note's text}.
 *   note     an LLM policy on the scripted model whose script
 *            WORKFLOW_SCRIPT names (scripted://).
 *   reserve, charge, ship, release, post: tools.  Each appends to the file
 *            WORKFLOW_FX names "B <run> <pid> <realtime ns>", then
 *            "E <idempotency key> <tool> <pid>" (its effect), then
 *            "L <run> <pid> <realtime ns>", each line one write(); they
 *            sleep WORKFLOW_TOOL_MS (default 10) ms between B and L.
 *
 * Every policy has the code identity WORKFLOW_CODE, in the test and in
 * the plugin alike.
 */
#ifndef PL_TESTS_SUPPORT_WORKFLOW_H
#define PL_TESTS_SUPPORT_WORKFLOW_H

#include <policyledger.h>
#include <policyledger_mcp.h>

#define WORKFLOW_CODE "workflow-1"

/* The rate limit on "charge". */
#define WORKFLOW_RATE_RESOURCE "psp"
#define WORKFLOW_RATE_LIMIT 1
#define WORKFLOW_RATE_WINDOW_MS 200

/* Register the policies above in @p reg: PL_OK, PL_EINVAL (no
 * WORKFLOW_SCRIPT), or the registry's status. */
int workflow_register(pl_registry *reg);

/* The prefix of the MCP server's tools. */
#define WORKFLOW_MCP_NAME "crm"

/* Start the MCP server WORKFLOW_MCP gives ("stdio:COMMAND ARG...") and
 * register its tools as "crm.<tool>", "echo" idempotent:
 * pl_mcp_register()'s status (PL_EINVAL without WORKFLOW_MCP).  The
 * plugin leaves them to ledger-replay's --mcp. */
int workflow_register_mcp(pl_mcp **out, pl_registry *reg);

#endif
