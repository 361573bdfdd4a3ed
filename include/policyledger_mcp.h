/*
 * policyledger_mcp.h -- tools of Model Context Protocol servers as
 * policies.
 *
 * pl_mcp_register() starts an MCP server as a child process (the "stdio"
 * transport: JSON-RPC 2.0, one message a line, on the child's standard
 * input and output), performs the handshake, lists its tools and
 * registers each one as the policy "<name>.<tool>", with the tool's
 * description and inputSchema as the policy's description and
 * input_schema: the validate decorator checks arguments against it and
 * the LLM policies describe it to a model like any other tool.  A call of
 * the policy is one `tools/call`; its payload is the tool's arguments.
 *
 * Results.  A successful call returns
 *     {"content": [...], "structuredContent": {...}}
 * ("structuredContent" only when the server sent one).  Each content item
 * keeps its "type": "text" items their "text"; "resource_link" items as
 * sent; "image" and "audio" items their "mimeType" and "bytes" (the size
 * of the decoded data), and their base64 "data" only up to
 * max_inline_bytes (else "omitted": true); embedded "resource" items
 * their "uri", "mimeType" and "text" (cut at max_inline_bytes, with
 * "truncated": true) and a "blob" as an image's data.  A result that is
 * not an object, a "content" that is not an array or an item of it that
 * is not an object with a "type", or a "structuredContent" that is not an
 * object (null is none) is a ToolBug error result.
 *
 * Errors are error-as-data results {"error": true, "code", "message"},
 * never statuses, so the calling policy (a model) can read them:
 *   - a result with "isError": true: the message is its text content; the
 *     code is read from that text: NotFound ("not found", "no such",
 *     ENOENT), Forbidden ("access denied", "outside", "permission",
 *     "not allowed"), Unauthorized, Timeout ("timed out", "timeout"),
 *     InvalidInput ("invalid", "validation", "required"), else ToolBug.
 *     MCP gives tool errors no codes: this reading is a heuristic;
 *   - a JSON-RPC error: -32602 (invalid params; unknown tool) InvalidInput,
 *     -32601 (no such method) and -32002 (no such resource) NotFound,
 *     -32001 (request timeout) Timeout, anything else ToolBug;
 *   - the transport: a server that cannot be started, exits, or closes its
 *     output: RetryableServer (the next call starts it again, its
 *     handshake waiting start_timeout_ms as at registration, then the
 *     request its timeout, all within the call's deadline); no answer
 *     before the timeout (timeout_ms, or the call's deadline,
 *     pl_ctx_deadline(), if sooner): Timeout, after the server is sent
 *     `notifications/cancelled` for the request (never for initialize;
 *     over HTTP, only for a request the session that lives was sent, not
 *     for one whose session ended (404) and whose new session did not
 *     begin in time; a cancel the server does not take is named in the
 *     message; a call whose deadline
 *     has already passed is a Timeout that is never sent; a server
 *     that does not read a request to its end in that time, whether it
 *     took part of it or none, is stopped, the next call starting it
 *     again, and nothing is cancelled); a message
 *     longer than max_message_bytes: ToolBug, and the server is stopped
 *     (memory stays bounded: nothing past the cap is kept).  Lines on
 *     the server's output that are not JSON-RPC are skipped (a server
 *     that prints only garbage ends in Timeout, the message counts the
 *     lines skipped).  A message that cannot be read for want of memory
 *     fails the call with PL_ENOMEM, a status, as any allocation failing
 *     does (no result is recorded).  A string escaping a lone UTF-16 surrogate ("\ud83d"
 *     without its low half: a string cut inside a pair, as JavaScript and
 *     Python print it) is read with U+FFFD in its place, over either
 *     transport.
 *
 * Streamable HTTP (a spec "http://..." or "https://...", built with
 * libcurl): each message is one POST; the Mcp-Session-Id the server gives
 * at initialize (1..1024 visible ASCII characters) is sent with every
 * later request (after a 404 for it, a new session is started and the
 * request sent once more; a session left, after its 404 or an error, or
 * at pl_mcp_close(), is ended with a DELETE of it, best effort, in at
 * most 1 s, 2 s at close), the negotiated version as
 * MCP-Protocol-Version; an answer is read from a JSON body or an event
 * stream (left once the answer has come).  Redirects are not followed.
 * A status that is not 2xx: 401 Unauthorized, 403 Forbidden, 404 (of no
 * session) NotFound, 429 RateLimited, 5xx RetryableServer, 400 and 422
 * InvalidInput, others ToolBug; a Retry-After of a 429 or 5xx is the
 * result's number "retry_after_ms" (pl_decorator_retry() waits it).  A
 * 2xx without the answer, a bad session id or headers past 256 KiB:
 * ToolBug.  No server process is started: the endpoint must be running.
 *
 * Requests the server sends to the client are answered: "ping" with {},
 * any other with JSON-RPC error -32601 (over stdio; over HTTP they are
 * dropped).  Notifications (logs, progress)
 * are read and dropped.  One request is in flight per server at a time:
 * calls from several workers queue on the handle's lock.
 *
 * fork().  A handle belongs to the process that registered it.  A child
 * made by fork() never uses nor ends its parent's server or session: at
 * its first use of the handle it inherited, it drops its own copies of
 * them (its copies of the pipes closed, nothing written to them; the
 * server process never signalled nor waited for; the HTTP session never
 * DELETEd; libcurl's sockets let go without a byte sent on them), and a
 * call of a tool then starts a server of the child's own (stdio) or
 * begins a session of its own (HTTP), lists the tools again, and goes on
 * as after a restart; pl_mcp_close() in the child ends only that one.  So
 * a registry made before the fork serves the child's engine too.  A call
 * another thread was making at the fork stays the parent's: the child
 * neither waits for it (the handle's lock is made anew in the child) nor
 * reads its answer.  The parent's server and session go on as they were.
 *
 * Durability.  Calls are recorded like every policy's: a replay or a
 * continued run serves a recorded result and never sends that call to the
 * server; a check replay (pl_run_options.check) sends no call at all, not
 * even one whose result it lacks (a run of the tool itself, stopped while
 * its call was in flight).  (pl_mcp_register() itself talks to the
 * server, to list its tools, every time a process registers them.)  Each
 * tools/call carries the call's idempotency key
 * (pl_ctx_idempotency_key()) in its "_meta" as
 * "policyledger/idempotencyKey", and as its "progressToken" (the
 * server's notifications/progress are read and dropped).  MCP has no
 * standard idempotency: a server is free to ignore that key.  So a tool
 * is registered idempotent (a call in flight at a crash is sent again,
 * with the same key) only when it is named in the options' `idempotent`
 * list, or its annotations say "readOnlyHint": true (unless
 * ignore_hints).  Every other tool is registered not idempotent: its
 * action_call is durable before the request is sent, and a crash while
 * it is in flight applies `in_doubt` (by default PL_IN_DOUBT_FAIL: an
 * "InDoubt" error result, never a second request).  So does a run whose
 * root is such a tool (pl_run_start() of "<name>.<tool>"): its root
 * invocation calls the tool, as a policy would (as run_command's does),
 * and returns that call's
 * action_result, which is the run's result; the root's ledger holds the
 * action_call and the result, the callee's (path "0.0" when the run has
 * no seed) the "mcp.tools" and the request, whose key is
 * "<run id>/0:0".  Killed in flight, the run is continued into an
 * InDoubt result (or asks, or sends again, as `in_doubt` says), never
 * into a second request.  (A run recorded before this rule, its root
 * having sent the request itself, replays as it was recorded.)  An
 * idempotent tool as a root sends its request itself, with the key
 * "<run id>/0".
 *
 * The tool list.  Each call records, before its request, the side effect
 * "mcp.tools" {"server": name, "protocol": version, "tools": count,
 * "fingerprint": "fnv1a64:<16 hex digits>", "tool": identity}: which
 * server, speaking which version, with which tool list (its fingerprint
 * covers every name, description and schema as listed), and the called
 * tool's code identity in that list (null when the server no longer lists
 * it: the call is then not sent, and is a NotFound error result).  At a
 * run's first call in a process, and again when the list changed since
 * the run last recorded it, the value holds the list itself: "list" (the
 * tools as listed) and "codes" (their identities, in that order).  A
 * replay serves these values like the calls' results: a run replayed
 * after the server changed its tools is never sent a call it recorded,
 * and its ledger keeps the tools as they were.  A value without the list
 * is a capture (pl_ctx_capture()), durable with the call's result: a call
 * of an idempotent tool then costs the one commit of any idempotent call;
 * one with the list is made durable before the request.
 *
 * Code identity.  Each tool is registered with the code_version
 * "mcp:<name>.<tool>@fnv1a64:<16 hex digits>", a fingerprint of its entry
 * in the list (description, schemas, annotations, title) as listed at
 * registration; action_calls record it, so a process that registers a
 * server whose tool changed sees PL_EVENT_CODE_CHANGED for the calls
 * recorded before the change, and `ledger-replay --check --mcp` prints the
 * tool as recorded and as it is now (pl_mcp_tool()).  A model's recorded
 * turns hold the tools it was offered: the request of a turn replayed
 * after a tool's description or input schema changed differs from the one
 * recorded, a divergence (the check names it).  Only the turns of an LLM
 * invocation left unfinished (by a crash, a suspension) are replayed: a
 * finished one is served its result whole, so a finished run checks ok
 * after such a change.
 *
 * notifications/tools/list_changed (over stdio, read while waiting for an
 * answer and before each call; over HTTP, on the event streams of the
 * answers), and a server started again after it died, make the next call
 * list the tools again (the call that starts it again is sent on the list
 * as it was; the listing waits start_timeout_ms at most, and never past
 * the call's deadline: a list not read keeps the last one, and the next
 * call tries again): later calls record the new list.  The policies
 * stay those registered: a tool the server adds is registered by the next
 * pl_mcp_register(); one it removes answers NotFound.
 */
#ifndef POLICYLEDGER_MCP_H
#define POLICYLEDGER_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include <policyledger.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The protocol version sent in `initialize`. */
#define PL_MCP_PROTOCOL_VERSION "2025-06-18"

/** One MCP server and the tools it registered.  Opaque. */
typedef struct pl_mcp pl_mcp;

#define PL_MCP_OPTIONS_VERSION 2

/** Options.  Initialise with PL_MCP_OPTIONS_INIT. */
typedef struct pl_mcp_options {
    unsigned version; /**< PL_MCP_OPTIONS_VERSION */
    /** Environment variables the server gets from the engine's process,
     *  by name, beside HOME, LOGNAME, PATH, SHELL, TERM, USER and LANG,
     *  which it always gets (when set).  Every other variable is left
     *  out.  A name that is none (empty, or holding '=') is PL_EINVAL,
     *  over HTTP too, where no process gets them. */
    const char *const *env;
    size_t n_env;
    /** A file the server's standard error is appended to; NULL: the
     *  engine's own standard error. */
    const char *stderr_path;
    /** One request's longest wait; 0 = 30000.  Both timeouts: past 2^40
     *  ms (34 years), one that never comes. */
    long timeout_ms;
    long start_timeout_ms;    /**< the handshake's and tools/list's (at
                                registration, and when a call starts the
                                server again); 0 = 60000 */
    size_t max_message_bytes; /**< longest message read; 0 = 4 MiB, at most
                                   256 MiB.  Keep results below the
                                   engine's max_payload. */
    size_t max_inline_bytes;  /**< base64 data and resource text kept in a
                                   result; 0 = 64 KiB */
    /** Tools registered idempotent, by their name on the server.  A name
     *  the server does not list (a typo) fails pl_mcp_register() with
     *  PL_EINVAL naming it, rather than leaving the tool meant not
     *  idempotent; so does a NULL or empty one, before the server is
     *  started. */
    const char *const *idempotent;
    size_t n_idempotent;
    /** Do not read "readOnlyHint" as idempotent. */
    bool ignore_hints;
    pl_in_doubt in_doubt; /**< the rule of the other tools; default
                               PL_IN_DOUBT_FAIL */
    /** HTTP: the environment variable whose value is sent as
     *  "Authorization: Bearer <value>" (read at each request, never
     *  recorded); NULL: none.  A name that is none (empty, or holding
     *  '=') is PL_EINVAL, for a stdio server too, which has no use for
     *  it. */
    const char *token_env;
    /** A tool whose inputSchema the validator refuses (a keyword it does
     *  not evaluate, such as "unevaluatedProperties" or "$dynamicRef"; a
     *  malformed schema, or one that is not a JSON object; a tool
     *  listed without one has none) is registered without it: its policy's
     *  input_schema is NULL, its arguments go to the server unchecked,
     *  and a model offered it sees {"type": "object"}.  false: such a
     *  schema fails pl_mcp_register(), naming the tool, the keyword and
     *  where.  (version 2) */
    bool unchecked_schemas;
} pl_mcp_options;

#define PL_MCP_OPTIONS_INIT                                                    \
    {                                                                          \
        PL_MCP_OPTIONS_VERSION, NULL, 0, NULL, 0, 0, 0, 0, NULL, 0, false,     \
            PL_IN_DOUBT_FAIL, NULL, false                                      \
    }

/**
 * Start the MCP server @p spec, list its tools and register each one in
 * @p reg as "<name>.<tool>".
 * @param[out] out caller owns; close with pl_mcp_close() after every
 *             engine whose registry holds the tools is closed.
 * @param name the prefix of the policies' names (1..64 bytes, no dot or
 *             control character).
 * @param spec "stdio:COMMAND ARG...": the program (looked up in PATH) and
 *             its arguments, split at spaces (no quoting); or
 *             "http://HOST:PORT/PATH" or "https://...": a Streamable HTTP
 *             endpoint (in a build with libcurl; else PL_EINVAL); one
 *             without a host, or that is no URL, is a bad spec.
 * @param opts NULL for defaults.
 * @return PL_OK; PL_EINVAL (a bad name, spec or option; a tool name
 *         that makes a bad policy name; a name in `idempotent` the server does
 *         not list: none is registered); PL_EIO (the server cannot be
 *         started, exits, answers with an error or garbage, answers
 *         `initialize` with a protocol version this library does not
 *         speak, one of "2024-11-05", "2025-03-26" and "2025-06-18", lists
 *         a tool twice, pages its tool list in a loop (a nextCursor given
 *         twice, named) or with a nextCursor that is not a string, past
 *         100 pages or 1024 tools, or does not answer
 *         within start_timeout_ms: none
 *         is registered; a server that does not take
 *         notifications/initialized, over HTTP a status other than 2xx or
 *         404, is one that answers with an error); PL_EEXIST (a policy of
 *         that name exists, or a server was registered as @p name in
 *         @p reg, whatever tools either lists, none included: none is
 *         registered, this server is not started, and the first's tools
 *         stay as they were; a registration that failed takes no name);
 *         the errors of
 *         pl_registry_add() (a tool's inputSchema this library refuses,
 *         unless unchecked_schemas);
 *         PL_ENOMEM.  On failure *out is NULL, the server is stopped,
 *         and @p reg holds none of its tools.
 */
int pl_mcp_register(pl_mcp **out, pl_registry *reg, const char *name,
                    const char *spec, const pl_mcp_options *opts);

/**
 * @return the protocol version the server answered (borrowed, valid until
 *         pl_mcp_close()).
 */
const char *pl_mcp_protocol_version(const pl_mcp *mcp);

/** @return the number of tools registered. */
size_t pl_mcp_tool_count(const pl_mcp *mcp);

/**
 * The tool of policy @p policy ("<name>.<tool>") as the server last listed
 * it: its entry of tools/list ("name", "description", "inputSchema",
 * "annotations", ...).
 * @return borrowed, valid until the next call of one of the server's tools
 *         or pl_mcp_close(); NULL when the server lists no such tool.
 */
const cJSON *pl_mcp_tool(const pl_mcp *mcp, const char *policy);

/**
 * Stop the server (its standard input closed; SIGTERM to its process
 * group after a second; SIGKILL after another), or end the HTTP session
 * (DELETE), and free the handle.  In a child made by fork(), only what
 * the child started is stopped or ended: the parent's server and session
 * are left as they are (see "fork()" above).  NULL does nothing.
 */
void pl_mcp_close(pl_mcp *mcp);

#ifdef __cplusplus
}
#endif

#endif
