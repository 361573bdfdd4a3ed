/*
 * llm.h -- what the files of policies/llm share.
 *
 *   url.c        model URLs: provider, model, base URL
 *   request.c    the ledger as a provider's request body
 *   response.c   a provider's response body as a normalised answer, and a
 *                normalised answer as steps
 *   names.c      policy names as the tool names each provider accepts
 *   transport.c  one model call: HTTP with retries; the recorded exchange
 *   scripted.c   the scripted model (attempt.h: what the two share)
 *   retry_after.c a server's Retry-After as a wait
 *   stream.c     a streamed answer: SSE or NDJSON, deltas, the whole
 *   reqcache.c   the request of a loop's turn, built on the last turn's
 *                (each earlier step encoded and hashed once)
 *   llm.c        registration, the policy, token totals
 *
 * A normalised answer, as recorded:
 *   {"text": "..." (optional),
 *    "tool_calls": [{"id": "...", "name": "...", "arguments": "raw text"}]}
 */
#ifndef PL_LLM_INTERNAL_H
#define PL_LLM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <policyledger_llm.h>

#include "util.h"

typedef enum pl__llm_provider {
    PL__LLM_SCRIPTED = 1,
    PL__LLM_OPENAI = 2,    /* chat completions */
    PL__LLM_ANTHROPIC = 3, /* messages */
    PL__LLM_OLLAMA = 4,    /* /api/chat */
    PL__LLM_GEMINI = 5     /* generateContent */
} pl__llm_provider;

/* A parsed model URL. */
typedef struct pl__llm_url {
    pl__llm_provider provider;
    char *model;    /* the model; scripted: the script's path */
    char *base_url; /* without a trailing '/'; NULL: the provider's default */
} pl__llm_url;

PL__HIDDEN int pl__llm_url_parse(pl__llm_url *out, const char *url);
/* What is wrong with @p b as "http://HOST[:PORT][/PATH]" or https (HOST
 * not empty, PORT 1 to 65535), or NULL when nothing is. */
PL__HIDDEN const char *pl__llm_base_bad(const char *b);
PL__HIDDEN void pl__llm_url_free(pl__llm_url *u);

/* A registered LLM policy's configuration (the policy's user pointer). */
typedef struct pl__llm {
    char *name;
    pl__llm_url url;
    char *system_prompt;
    cJSON *output_schema;    /* NULL: none */
    pl_schema *output_check; /* output_schema compiled */
    char *api_key_env;
    pl_llm_options o;          /* strings in it are not used: copied above */
    struct pl__llm_conn *conn; /* the kept HTTP handle (transport.c) */
    struct pl__llm_reqcache *cache; /* the turns' requests (reqcache.c) */
} pl__llm;

/* The policy's kept HTTP handle: one libcurl handle reused by its calls, so
 * they share a keep-alive connection instead of each opening its own. */
PL__HIDDEN struct pl__llm_conn *pl__llm_conn_new(void);
PL__HIDDEN void pl__llm_conn_free(struct pl__llm_conn *c);

/* The longest tool name the HTTP providers take, and room for any name. */
#define PL__LLM_WIRE_MAX 64
#define PL__LLM_WIRE_CAP (PL_MAX_NAME + 1)

/* One tool the model may call. */
typedef struct pl__llm_tool {
    const char *name;            /* the policy's name */
    char wire[PL__LLM_WIRE_CAP]; /* the name the provider sees (names.c) */
    const char *description;     /* may be NULL */
    cJSON *parameters;           /* owned */
    pl_schema *check;            /* parameters compiled, or NULL; owned */
    bool submit;                 /* the final answer's tool (PL__LLM_SUBMIT) */
} pl__llm_tool;

/* names.c: whether @p name is a tool name provider @p p accepts. */
PL__HIDDEN bool pl__llm_wire_ok(pl__llm_provider p, const char *name);
/* The name provider @p p sees for the policy @p name, on its own (the
 * name, or a narrowed form with a hash of the name; see names.c). */
PL__HIDDEN int pl__llm_wire_name(char out[PL__LLM_WIRE_CAP], pl__llm_provider p,
                                 const char *name);
/* Set every tool's wire name, kept apart within the set; PL_EINVAL (with a
 * message) if two cannot be. */
PL__HIDDEN int pl__llm_tool_names(pl__llm_tool *tools, size_t n,
                                  pl__llm_provider p);
/* The wire name of policy @p name: its tool's, or (a tool not offered
 * this turn) computed into @p buf.  Borrowed from @p tools or @p buf. */
PL__HIDDEN const char *pl__llm_wire_of(char buf[PL__LLM_WIRE_CAP],
                                       pl__llm_provider p,
                                       const pl__llm_tool *tools, size_t n,
                                       const char *name);
/* The tool whose wire name is @p wire, or NULL. */
PL__HIDDEN const pl__llm_tool *pl__llm_tool_by_wire(const pl__llm_tool *tools,
                                                    size_t n, const char *wire);

/* With an output schema and tools, the final answer comes as a call of this
 * tool (unless a policy of that name is offered); so it does without tools
 * for Anthropic, whose messages API has no response format. */
#define PL__LLM_SUBMIT "submit"
PL__HIDDEN bool pl__llm_has_submit(const pl__llm *m, const pl_action *action);

/* The conversation, provider-neutral: an array of
 *   {"role": "system"|"user"|"assistant"|"tool", "content": "...",
 *    "tool_calls": [{"id", "name", "arguments": "text"}], "tool_call_id"}
 * built step by step: start, then one call per ledger step. */
typedef struct pl__llm_conv {
    cJSON *msgs;         /* the messages (an array) */
    cJSON *open;         /* the assistant message tool calls join, or NULL */
    const cJSON **calls; /* tool calls waiting for results, in msgs */
    size_t n, head, cap; /* calls[head..n) wait */
} pl__llm_conv;

/* The system prompt (unless @p with_system is false) and the user's
 * message from the action.  On failure *cv is empty. */
PL__HIDDEN int pl__llm_conv_start(pl__llm_conv *cv, const pl__llm *m,
                                  const pl_action *action, bool with_system);
PL__HIDDEN int pl__llm_conv_step(pl__llm_conv *cv, const pl__llm *m,
                                 const pl_step *s);
PL__HIDDEN void pl__llm_conv_free(pl__llm_conv *cv);

/* The body in parts: a body is its head (*out up to *head_len, ending in
 * the conversation array's '['), the encoded messages joined by ',', and
 * its tail (*out from *head_len: ']' and all that follows).  The frame is
 * the body of no messages, but for a provider that keeps the system prompt
 * apart (pl__llm_system_apart()): there it is in the tail, and the
 * conversation to encode starts without it.  *out: caller frees. */
PL__HIDDEN int pl__llm_body_frame(char **out, size_t *head_len,
                                  const pl__llm *m, const pl__llm_tool *tools,
                                  size_t n_tools);
PL__HIDDEN bool pl__llm_system_apart(const pl__llm *m);
/* Does the provider join a run of tool results into one message? */
PL__HIDDEN bool pl__llm_joins_tool_results(const pl__llm *m);

/* Append @p messages, encoded for the provider, to @p out (after a ','
 * when @p comma and the encoding is not empty).  A run of "tool" messages
 * must not be split across two calls where the provider joins them. */
PL__HIDDEN int pl__llm_encode_messages(pl__buf *out, const pl__llm *m,
                                       const cJSON *messages, bool comma);

/* The most tool calls one answer may hold, and (Anthropic) content
 * blocks: an answer past them is refused alike, streamed or not. */
#define PL__LLM_MAX_CALLS 128
#define PL__LLM_MAX_BLOCKS 1024

/* Parse a provider's response body into a normalised answer and usage. */
PL__HIDDEN int pl__llm_parse_response(cJSON **answer, long *in_tokens,
                                      long *out_tokens, const pl__llm *m,
                                      const char *body, size_t len);
/* The same, from the body parsed. */
PL__HIDDEN int pl__llm_parse_value(cJSON **answer, long *in_tokens,
                                   long *out_tokens, const pl__llm *m,
                                   const cJSON *response);

/* Where a turn's deltas go (stream.c): NULL when the policy does not
 * stream. */
typedef struct pl__llm_deltas {
    const pl__llm *m;
    const char *run_id, *path;
    unsigned turn;
    const pl__llm_tool *tools; /* to name a call by its policy */
    size_t n_tools;
    bool sent; /* deltas delivered since the last restart */
} pl__llm_deltas;

/* Deliver one delta (nothing for an empty piece); @p wire is a call's
 * name as the provider sent it, or NULL. */
PL__HIDDEN void pl__llm_delta_send(pl__llm_deltas *d, pl_llm_delta_kind kind,
                                   const char *p, size_t n, const char *wire,
                                   unsigned index, bool replayed);
/* Deliver an answer whole: its text as one delta, each call's arguments
 * as one (a turn served from the ledger: @p replayed). */
PL__HIDDEN void pl__llm_delta_whole(pl__llm_deltas *d, const cJSON *answer,
                                    bool replayed);

/* A normalised answer's call: its arguments as text (*printed, caller
 * frees, when they had to be printed) and its name, or NULL. */
PL__HIDDEN const char *pl__llm_args_text(const cJSON *call, char **printed);
PL__HIDDEN const char *pl__llm_call_name(const cJSON *call);

/* A stream being read: feed it what arrives, then end it.  A failure is
 * PL__LLM_STREAM_BAD (not the protocol, too large: final) or
 * PL__LLM_STREAM_ERROR (cut, or an error event: retried). */
#define PL__LLM_STREAM_BAD 1
#define PL__LLM_STREAM_ERROR 2
typedef struct pl__llm_stream pl__llm_stream;
PL__HIDDEN pl__llm_stream *pl__llm_stream_new(const pl__llm *m,
                                              pl__llm_deltas *d, size_t cap,
                                              const char *key);
PL__HIDDEN void pl__llm_stream_free(pl__llm_stream *s);
/* 0, or -1 once the stream failed (see pl__llm_stream_failed()). */
PL__HIDDEN int pl__llm_stream_feed(pl__llm_stream *s, const char *p, size_t n);
/* The answer assembled; -1 if the stream failed or ended before its end. */
PL__HIDDEN int pl__llm_stream_end(pl__llm_stream *s, cJSON **answer,
                                  long *in_tokens, long *out_tokens);
/* 0, or the failure's kind with *why (borrowed). */
PL__HIDDEN int pl__llm_stream_failed(const pl__llm_stream *s, const char **why);
PL__HIDDEN bool pl__llm_stream_done(const pl__llm_stream *s);
/* @p s (taken over) with every @p key in it, whatever its length,
 * replaced by "[redacted]"; NULL when out of memory. */
PL__HIDDEN char *pl__llm_redact(char *s, const char *key);
/* Back @p n off the UTF-8 continuation bytes of @p s (which holds more
 * than @p n bytes): where a cut at @p n falls between characters. */
PL__HIDDEN size_t pl__llm_char_start(const char *s, size_t n);
/* How many bytes of @p s a message quotes of it, "%.*s", to quote at most
 * @p max: all of it, or a cut between characters. */
PL__HIDDEN int pl__llm_cut(const char *s, size_t max);
/* What a server sent, @p n bytes at @p p, for a message: @p key redacted,
 * then cut to @p max bytes (between characters), control characters as
 * spaces.  Caller frees;
 * NULL when out of memory. */
PL__HIDDEN char *pl__llm_quote(const char *p, size_t n, size_t max,
                               const char *key);
/* Byte offset of the value of the top-level member @p key of the JSON
 * object @p body, or -1. */
PL__HIDDEN long pl__llm_member_at(const char *body, size_t len,
                                  const char *key);

/* Turn a normalised answer into steps; on a malformed answer return
 * PL_EJSON with *why set (caller frees) naming what came back.  The last
 * step gets the fields of @p tok (the turn's tokens) when it is not NULL. */
PL__HIDDEN int pl__llm_answer_steps(pl_steps *out, char **why, const pl__llm *m,
                                    const cJSON *answer,
                                    const pl_action *action,
                                    const pl__llm_tool *tools, size_t n_tools,
                                    unsigned exchange, const cJSON *tok);

/* llm.c: add copies of @p tok's fields to @p payload. */
PL__HIDDEN int pl__llm_add_tokens(cJSON *payload, const cJSON *tok);

/* transport.c: a Retry-After value (RFC 9110 10.2.3) as milliseconds
 * from @p now_ms (Unix milliseconds): delay-seconds, or an HTTP-date in
 * any of its three forms (IMF-fixdate, RFC 850, asctime); a date in the
 * past gives 0, and anything past a day is a day.  PL_EINVAL (with a
 * message) for anything else. */
PL__HIDDEN int pl__llm_retry_after(long *out_ms, const char *value,
                                   int64_t now_ms);
#define RETRY_AFTER_MAX_MS 86400000L /* a day: past every time budget */

/* The recorded exchange's value, if @p s is one. */
#define PL__LLM_EXCHANGE "llm_exchange"
PL__HIDDEN const cJSON *pl__llm_exchange_of(const pl_step *s);

/* One model call.  *out is the recorded exchange value:
 *   {"request_sha256", "request_bytes", "attempts", "status",
 *    "usage": {"input", "output"}, "answer": {...}}
 * or with "error": {"code", "message"} instead of "answer".  A scripted
 * exchange adds "script_next".  With @p deltas (not NULL), the answer is
 * streamed to them.  @p body is @p len bytes and a NUL;
 * @p sha256_hex its SHA-256 in hex.  @p deadline_ms (Unix ms, 0: none), the
 * call's deadline, bounds an HTTP call as total_timeout_ms does.  Fails
 * only on a local error (memory). */
PL__HIDDEN int pl__llm_exchange(cJSON **out, const pl__llm *m, const char *body,
                                size_t len, const char *sha256_hex,
                                long script_pos, int64_t deadline_ms,
                                pl__llm_deltas *deltas);

/* A turn's request, built on what the policy kept of the invocation's
 * earlier turns (reqcache.c). */
typedef struct pl__llm_request {
    const char *body; /* borrowed: valid until pl__llm_request_done() */
    size_t len;
    char sha256[2 * PL_HASH_LEN + 1]; /* the body's, in hex */
    unsigned n_exchanges;             /* exchanges in the ledger */
    long script_pos;                  /* the scripted model's next answer */
    struct pl__llm_reqstate *state;   /* the kept state, checked out */
} pl__llm_request;

PL__HIDDEN int pl__llm_request_build(pl__llm_request *out, pl_ctx *ctx,
                                     const pl__llm *m, const pl_action *a,
                                     const pl__llm_tool *tools, size_t n_tools);
/* Give the state back for the next turn (@p keep) or drop it. */
PL__HIDDEN void pl__llm_request_done(pl__llm_request *r, const pl__llm *m,
                                     bool keep);

PL__HIDDEN struct pl__llm_reqcache *pl__llm_reqcache_new(void);
PL__HIDDEN void pl__llm_reqcache_free(struct pl__llm_reqcache *c);

#endif
