/**
 * @file policyledger_llm.h
 * LLM policies: a model behind a policy name, its every call recorded.
 *
 * pl_llm_register() registers a policy that asks a model what to do next.
 * Called with the allowed tools in action.actions, under the decorators
 * pl_decorator_loop() and pl_decorator_invoke_action(), it is an agent whose
 * every model call and tool call is durable:
 *
 *   - The conversation is rebuilt from the policy's own ledger on every turn:
 *     the system prompt, the payload's "text" (or the payload as JSON) as the
 *     user's message, seeded `text` steps as user messages, the model's own
 *     `text` steps as assistant messages, `action_call` steps as the
 *     assistant's tool calls (with the provider's call id, kept in the step
 *     as "call_id"), and `action_result` steps as tool results bound to
 *     those ids (error-as-data results too: the model reads them).  A
 *     result that carries an observation ({"observation": {...}, "raw":
 *     ...}, pl_decorator_observe()) is sent as its observation, not its raw
 *     result; any result larger than max_tool_result_bytes is sent cut,
 *     with a note, as pl_decorator_cap() cuts it.
 *   - The allowed actions become tool definitions from the registry: name,
 *     pl_policy_def.description and .input_schema ({"type":"object"} when a
 *     policy has none).  A policy name the provider refuses as a tool name
 *     (OpenAI, Anthropic, Ollama: [a-zA-Z0-9_-]{1,64}; Gemini: a letter or
 *     '_', then [a-zA-Z0-9_.:-], 64 at most), such as "orders.charge", is
 *     sent as a valid name of its own (the refused bytes as '_', cut, and a
 *     hash of the name after it: the same name always, distinct names
 *     apart), and the model's calls of it map back: steps, the ledger and
 *     the tools see the policy's own name.  The scripted model uses policy
 *     names as they are.
 *   - Gemini's requests carry no call ids: a result binds to its call by
 *     place and name (the functionResponse parts follow the model's
 *     functionCall parts in order, each under its call's name); a call
 *     that comes without an id (Gemini's, Ollama's) gets one made for its
 *     step, "call_EXCHANGE_INDEX" (the model calls before its own in the
 *     invocation, and its place in the answer, both from 0: the first
 *     call of the first answer is "call_0_0").
 *   - Each model call is one `side_effect` step named "llm_exchange" in the
 *     policy's ledger, durable before the answer is used: the answer
 *     (normalised: text and tool calls), the token usage, and the SHA-256 of
 *     the request body (never the request itself), so the store grows
 *     linearly in the number of model calls and a replay never contacts the
 *     model.
 *   - The answer becomes a `text` step and one `action_call` per tool call
 *     {"policy": tool, "payload": {arguments}, "call_id": id}.  The last
 *     step of each turn (that call, the text, the re-prompt or the error
 *     result) also carries the turn's tokens: "tokens", the model call's
 *     input + output tokens (what pl_decorator_budget() counts), and
 *     "tokens_in", "tokens_out", the invocation's input and output tokens
 *     so far, that call included: on the call's result, its usage (and
 *     what PL_EVENT_CALL_COMPLETED reports).  Model calls recorded before
 *     turns carried them (no top-level "tokens" in the recorded exchange)
 *     make the steps they made then, so those runs replay.  Arguments
 *     that are not a JSON object, or not valid against the tool's
 *     input_schema, arguments nested deeper than a tool call's step can
 *     hold (29 levels: a payload nests at most PL_MAX_JSON_DEPTH), an
 *     unknown tool or a missing field make the answer malformed
 *     (pl_llm_malformed), naming what came back; the model call is
 *     recorded all the same (deep arguments as their JSON text), so a
 *     continue never asks the model again.
 *   - A model call that fails for good becomes an error-as-data result:
 *     Unauthorized (401), Forbidden (403), NotFound (404), InvalidInput
 *     (other 4xx), RateLimited, RetryableServer or Timeout (429, 409,
 *     408, 5xx and transport errors, once retries are spent; the message
 *     then says why no further attempt was made and after how many), or
 *     InvalidModelAction
 *     (see pl_llm_malformed).  A response body that is not the protocol's
 *     JSON is InvalidInput, not retried; so is an answer of more than 128
 *     tool calls (Anthropic's: more than 1024 content blocks), streamed
 *     or not, and no tool runs.
 *   - Retries happen inside one model call, before it is recorded: up to
 *     max_attempts, waiting by decorrelated jitter, or what the server
 *     asks: retry-after-ms (milliseconds, as OpenAI and Anthropic send it)
 *     first, else Retry-After (seconds, or an HTTP date in any of
 *     RFC 9110's three forms; a date past means at once; one that is
 *     neither is ignored), never past total_timeout_ms: a wait that would
 *     end past it ends the call with the last error instead.  The call's
 *     deadline (pl_ctx_deadline(), a timeout decorator's), when it comes
 *     first, bounds the call as total_timeout_ms does (an attempt is cut
 *     at it: Timeout); past it already, the model is not asked (Timeout).
 *   - No API key for a provider's own server fails the run (PL_EINVAL, with
 *     the variable's name): nothing is recorded, so set the key and continue
 *     the run.
 *   - Each re-prompt (PL_LLM_MALFORMED_REPROMPT) is a turn of the loop and
 *     counts against loop(N): the turn ends with a `text` step
 *     {"text": what was wrong and the tool catalog, "reprompt": true,
 *      "again": true} (loop() goes on after it), and the next turn's
 *     exchange sends it as the user's message.  Without loop() the call
 *     ends with that step.
 *   - Replay rebuilds each request and compares its SHA-256 with the one
 *     recorded: a request that differs (another system prompt, other
 *     tools, another conversation) is a divergence (PL_EVENT_DIVERGED, the
 *     run fails with PL_ENONDET), never an answer served for it.
 *   - Under loop(N) a turn's request is built on the earlier turns': each
 *     step is encoded and hashed once, so a turn costs the same at turn
 *     1,000 as at turn 10.  The policy keeps this for up to 64 invocations
 *     at a time (the least recently used go first; a state is checked
 *     against the ledger's hash chain before it is used).
 *
 * Model URLs:
 *   openai://MODEL                 chat completions with tool calling;
 *                                  base URL from options.base_url, else
 *                                  $OPENAI_BASE_URL, else
 *                                  https://api.openai.com/v1; the key from
 *                                  $OPENAI_API_KEY (options.api_key_env
 *                                  names another variable).
 *   openai+http://HOST:PORT/PATH#MODEL
 *   openai+https://HOST/PATH#MODEL any OpenAI-compatible server (llama.cpp,
 *                                  vLLM) at that base URL; a key is sent
 *                                  only when the key's variable is set.
 *   anthropic://MODEL              the messages API with tool use; base URL
 *                                  from options.base_url, else
 *                                  $ANTHROPIC_BASE_URL, else
 *                                  https://api.anthropic.com/v1; the key
 *                                  from $ANTHROPIC_API_KEY (x-api-key).
 *   gemini://MODEL                 generateContent with function calling;
 *                                  base URL from options.base_url, else
 *                                  $GEMINI_BASE_URL, else
 *                                  https://generativelanguage.googleapis.com
 *                                  /v1beta; the key from $GEMINI_API_KEY
 *                                  (x-goog-api-key).
 *   ollama://HOST[:PORT]/MODEL     Ollama's /api/chat (no key; the port
 *                                  11434, Ollama's own, when none is
 *                                  given; a model may hold ':', e.g.
 *                                  qwen3:8b).
 *   scripted://PATH                a deterministic offline model playing
 *                                  back the JSON script at PATH (below), a
 *                                  regular file: another (a device, a
 *                                  FIFO) fails the call as a missing one
 *                                  does (PL_EIO).
 * Anything else (an unknown scheme, an empty model or path, a base URL
 * without a host, a port that is not 1 to 65535) is PL_EINVAL at
 * registration, with a message.
 *
 * API keys are read from the environment when a request is made; they are
 * never written to a ledger, an event, or an error message: what a
 * provider sends back is quoted with every occurrence of the key, whatever
 * its length, as "[redacted]" (so a key of a byte or two masks those bytes
 * wherever they stand in the quote).  A quote cut short (of a provider's
 * error, a stream's line, a malformed answer) is cut between characters:
 * a message, and a re-prompt that carries one, stays UTF-8.
 *
 * The scripted model's script is a JSON object:
 *
 *   {"responses": [
 *      {"text": "Let me add.",
 *       "tool_calls": [{"id": "c1", "name": "add",
 *                       "arguments": {"a": 1, "b": 2}}],
 *       "usage": {"input": 12, "output": 7}},
 *      {"tool_calls": [{"name": "add", "arguments": "{not json"}]},
 *      {"status": 429},
 *      {"text": "The sum is 3."}
 *   ]}
 *
 * Each model call plays the next response: an invocation's first call the
 * first, and every later call of it the one after the last it played (the
 * position is recorded in the exchange, so a crashed run continues where
 * the script was).  Every invocation, another run's or another call of the
 * policy in the same run, starts again at the first response.
 * "arguments" is an object, or a string the model "wrote" (so a script can
 * play arguments that are not JSON); a call without "id" gets one.  A
 * response {"status": N} is an HTTP failure: 408, 409, 429 and 5xx are
 * retried as over HTTP (the retry plays the next response, without
 * waiting; max_attempts spent, the message says so), any other status
 * fails the call as above.  "usage" is optional (default: a quarter of the
 * request's and the answer's bytes; so is a count that is not 0 to 1e15).
 * Past the last response, the call fails with InvalidInput.
 *
 * "stream_delay_ms" (a number, beside "responses") makes a streamed
 * scripted answer wait that long before each piece, as a model writing:
 * above 0 and below 10000; any other value waits not at all.
 *
 * The call's deadline (pl_ctx_deadline()) bounds the scripted model as it
 * bounds a provider's call: past it already, no response is played
 * (Timeout, "the model was not asked"); a retry it has come for is not
 * made (the last failure's code, the message saying why); a streamed
 * answer still being paced at it ends there with Timeout, nothing of it
 * recorded, its deltas void (PL_LLM_DELTA_RESTARTED).
 *
 * Streaming (pl_llm_options.on_delta): each model call asks for the
 * provider's stream (OpenAI's and Anthropic's server-sent events with
 * "stream": true, OpenAI's usage chunk included; Gemini's
 * streamGenerateContent?alt=sse; Ollama's NDJSON) and delivers the answer
 * as it is written: PL_LLM_DELTA_TEXT for text, PL_LLM_DELTA_TOOL_ARGS for
 * each call's arguments (Gemini and Ollama send a call's arguments whole:
 * one delta), with the run id, the invocation path and the turn.  An
 * OpenAI call's pieces are joined by their "index"; a piece with another
 * call's id where a call already is begins a call of its own (a server
 * that numbers every call 0).  The scripted model streams too: its text
 * word by word, its arguments in pieces of at most 8 bytes, cut between
 * characters (each piece UTF-8 on its own, as a provider's are).
 *   - What is recorded is what the same call without streaming records:
 *     the answer, assembled from the stream and parsed as the provider's
 *     whole response would be; its usage; the SHA-256 of the request as it
 *     is without streaming (the stream flags are added when it is sent).
 *     Replay, --check, token totals and the crash rules are unchanged, and
 *     a run recorded with streaming continues without it, and back.
 *   - A stream cut before its end (the connection dropped, no final
 *     event: OpenAI's [DONE], Anthropic's message_stop, Ollama's "done":
 *     true, Gemini's finishReason) or an error event in it is a failed
 *     attempt, retried as a failed request is; nothing of it is recorded.
 *     If it had delivered deltas, PL_LLM_DELTA_RESTARTED follows them.
 *     Once the final event came, the answer is whole: a connection cut
 *     after it, or held open with nothing more, changes nothing, and
 *     what comes past it is not read.  Ollama's last line may end the
 *     body without its newline (read when it is whole JSON).
 *   - Once the answer is recorded, PL_LLM_DELTA_END says it is whole;
 *     an answer the store then fails to record ends with
 *     PL_LLM_DELTA_RESTARTED instead.
 *   - A turn served from the ledger (a replay, a continued run) delivers
 *     its recorded answer at once, with replayed set: its text as one
 *     delta, each tool call's arguments as one, then PL_LLM_DELTA_END.
 *   - A stream is held to max_response_bytes in all, up to its final
 *     event (what comes past it is not counted), as a body is; a
 *     stream that is not the protocol's (a line that is neither an SSE
 *     field nor a comment, data that is not JSON, an NDJSON line that is
 *     not a JSON object) fails the call with InvalidInput, not retried.
 *     A server that answers a stream request with a whole JSON body
 *     (Content-Type application/json) is read as one: its answer is one
 *     delta.
 *
 * For tests and demos, every response played is counted in the file
 * PATH.served beside the script: one line per response, appended as it is
 * played (its number in the script).  Its lines say how many requests the
 * model answered; a replay that serves every answer from the ledger adds
 * none.  Delete the file to count afresh.
 */
#ifndef POLICYLEDGER_LLM_H
#define POLICYLEDGER_LLM_H

#include <policyledger.h>

#ifdef __cplusplus
extern "C" {
#endif

/* clang-format off */

/** The error code of a model answer that cannot become steps. */
#define PL_LLM_ERR_INVALID_MODEL_ACTION "InvalidModelAction"

/** What to do with a model answer that cannot become steps. */
typedef enum pl_llm_malformed {
    /** Fail the call at once with an InvalidModelAction error result that
     *  names what came back (the default). */
    PL_LLM_MALFORMED_FAIL = 0,
    /** Ask again, telling the model what was wrong and which tools exist,
     *  up to reprompt_limit times (each attempt a recorded exchange), then
     *  fail as PL_LLM_MALFORMED_FAIL does. */
    PL_LLM_MALFORMED_REPROMPT = 1
} pl_llm_malformed;

/** What to do when a tool the model called returned an error result. */
typedef enum pl_llm_tool_errors {
    /** Send the error to the model as the tool's result, and go on: the
     *  model reads it and may try otherwise (the default). */
    PL_LLM_TOOL_ERRORS_CONTINUE = 0,
    /** End the call at once with the first such error as its result,
     *  without asking the model again. */
    PL_LLM_TOOL_ERRORS_FAIL = 1
} pl_llm_tool_errors;

/** What a streamed delta carries (pl_llm_delta). */
typedef enum pl_llm_delta_kind {
    /** A piece of the answer's text. */
    PL_LLM_DELTA_TEXT = 0,
    /** A piece of a tool call's arguments (JSON text, as the model writes
     *  it): tool and index say which call. */
    PL_LLM_DELTA_TOOL_ARGS = 1,
    /** The deltas delivered so far for this turn are void: the stream was
     *  cut, and the model call is tried again (or, attempts spent, fails
     *  as a failed request does); or the answer came whole but could not
     *  be recorded (the store failed at the turn's commit: the run fails
     *  with the store's error).  A viewer clears what it showed. */
    PL_LLM_DELTA_RESTARTED = 2,
    /** The turn's answer is whole and recorded: the deltas since the last
     *  PL_LLM_DELTA_RESTARTED are the answer.  A call that fails for good
     *  ends with PL_LLM_DELTA_RESTARTED instead (when it delivered any). */
    PL_LLM_DELTA_END = 3
} pl_llm_delta_kind;

/** One streamed delta (see pl_llm_options.on_delta).  Everything in it is
 *  borrowed for the callback's duration.  Fields may be appended (as
 *  pl_event's are); a callback reads those it knows. */
typedef struct pl_llm_delta {
    pl_llm_delta_kind kind;
    const char *run_id;   /**< the run */
    const char *path;     /**< the LLM policy's invocation path */
    unsigned turn;        /**< the model call's number in the invocation,
                               from 1: the exchanges its ledger holds,
                               this one included */
    const char *text;     /**< the piece (not NUL-terminated; "" for
                               PL_LLM_DELTA_RESTARTED and _END) */
    size_t len;           /**< its bytes */
    const char *tool;     /**< PL_LLM_DELTA_TOOL_ARGS: the policy the call
                               is of, once the model has named it; else
                               NULL */
    unsigned tool_index;  /**< PL_LLM_DELTA_TOOL_ARGS: the call's place
                               among the answer's tool calls, from 0:
                               the place the recorded answer gives it
                               (the calls in the order they begin), not
                               the index a server numbers it with
                               (OpenAI's tool_calls[].index may leave
                               gaps: 0, then 2 is places 0 and 1) */
    int replayed;         /**< 1: the turn's recorded answer, served from
                               the ledger, delivered whole */
} pl_llm_delta;

/** The delta callback: called on the thread running the policy, in the
 *  order the model wrote; it must not call back into the engine for the
 *  same run.  Kinds may be added: ignore those you do not know. */
typedef void (*pl_llm_delta_fn)(const pl_llm_delta *delta, void *user);

/** Version 2 appended max_tool_result_bytes, version 3 on_delta and
 *  delta_user; an older struct is still taken (with their defaults). */
#define PL_LLM_OPTIONS_VERSION 3

/** Options of an LLM policy.  Start from PL_LLM_OPTIONS_INIT. */
typedef struct pl_llm_options {
    unsigned version;          /**< PL_LLM_OPTIONS_VERSION */
    const char *description;   /**< the policy's description, or NULL */
    double temperature;        /**< < 0: the provider's default */
    unsigned max_tokens;       /**< 0: the provider's default (Anthropic,
                                    whose API requires one: 1024) */
    /** JSON Schema text (an object) of the final answer, or NULL.  With no
     *  tools it goes to the provider as the response format (Anthropic,
     *  whose messages API has none: as the tool below, alone, which the
     *  model is told to call); with tools, a tool "submit" with it as
     *  parameters is offered, whose call is the final answer.  The answer must be JSON valid against the schema
     *  (pl_schema_validate(); else it is a malformed answer); the final
     *  `text` step is then {"text": the JSON text, "json": its value}.
     *  A schema that does not compile is PL_EINVAL at registration. */
    const char *output_schema;
    pl_llm_malformed malformed; /**< default PL_LLM_MALFORMED_FAIL */
    unsigned reprompt_limit;   /**< re-prompts in a row, each a turn of
                                    the loop; default 2 */
    const char *base_url;      /**< overrides the provider's base URL */
    const char *api_key_env;   /**< the key's variable; NULL: the default
                                    (empty, or holding '=': PL_EINVAL) */
    unsigned connect_timeout_ms; /**< 0: 10 s */
    unsigned timeout_ms;       /**< one attempt, in all; 0: 120 s */
    unsigned max_attempts;     /**< attempts per model call; 0: 4 */
    unsigned total_timeout_ms; /**< all attempts and waits; 0: 300 s */
    unsigned backoff_base_ms;  /**< first retry's least wait; 0: 250 ms */
    unsigned backoff_max_ms;   /**< longest wait; 0: 20 s */
    size_t max_response_bytes; /**< larger bodies fail; 0: 8 MiB */
    pl_llm_tool_errors tool_errors; /**< default: continue */
    /** Since version 2: the most bytes of one tool result sent to the
     *  model (its compact JSON text; the observation when the result has
     *  one, see pl_decorator_observe()).  A larger one is sent as cap sends
     *  it (pl_decorator_cap()): {"truncated": true, "original_bytes",
     *  "max_bytes", "note", "preview"}, within the cap, an error result's
     *  still an error ("error": true, its "code", a "message"); the ledger
     *  keeps it whole.  0: 512000. */
    size_t max_tool_result_bytes;
    /** Since version 3: stream the model's answers.  Not NULL: each model
     *  call asks the provider for a stream and calls on_delta with each
     *  piece of text and of tool-call arguments as it arrives (see
     *  "Streaming" above).  What is recorded does not change.  NULL: the
     *  default, one response body per call. */
    pl_llm_delta_fn on_delta;
    void *delta_user;          /**< on_delta's user pointer */
} pl_llm_options;

#define PL_LLM_OPTIONS_INIT                                                    \
    { PL_LLM_OPTIONS_VERSION, NULL, -1.0, 0, NULL, PL_LLM_MALFORMED_FAIL, 2,   \
      NULL, NULL, 0, 0, 0, 0, 0, 0, 0, PL_LLM_TOOL_ERRORS_CONTINUE, 0, NULL,   \
      NULL }

/**
 * Register an LLM policy.
 * @param name          the policy's name.
 * @param model_url     see "Model URLs" above.
 * @param system_prompt the system message, or NULL for none.
 * @param opts          NULL for the defaults.
 * @return PL_OK; PL_EINVAL (a NULL argument, a bad or unknown model URL,
 *         bad options, an output schema that is not a JSON object; a model
 *         over HTTP in a library built without libcurl, PL_WITH_CURL=OFF,
 *         where only scripted:// models work); PL_EEXIST
 *         and the rest as pl_registry_add(); PL_ENOMEM.
 */
int pl_llm_register(pl_registry *reg, const char *name, const char *model_url,
                    const char *system_prompt, const pl_llm_options *opts);

#define PL_LLM_TOKENS_VERSION 1

/** Token totals of a run's model calls.  Initialise with
 *  PL_LLM_TOKENS_INIT. */
typedef struct pl_llm_tokens {
    unsigned version;   /**< PL_LLM_TOKENS_VERSION */
    uint64_t input;     /**< prompt tokens */
    uint64_t output;    /**< completion tokens */
    uint64_t exchanges; /**< recorded model calls */
} pl_llm_tokens;

#define PL_LLM_TOKENS_INIT { PL_LLM_TOKENS_VERSION, 0, 0, 0 }

/**
 * Sum the token usage of every model call recorded in a run (all ledgers).
 * @param[out] out made with PL_LLM_TOKENS_INIT.
 * @return PL_OK; PL_EINVAL (a NULL argument, a bad version); PL_ENOTFOUND
 *         (no such run); as pl_run_walk().
 */
int pl_llm_run_tokens(pl_llm_tokens *out, pl_engine *engine,
                      const char *run_id);

/* clang-format on */

#ifdef __cplusplus
}
#endif

#endif /* POLICYLEDGER_LLM_H */
