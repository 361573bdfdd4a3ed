/*
 * mcp.h -- what the protocol (mcp.c, mcp_rpc.c, mcp_call.c) and
 * mcp_http.c (the Streamable HTTP transport, over libcurl) share.
 */
#ifndef PL_MCP_INTERNAL_H
#define PL_MCP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "util.h"

/*
 * How a transport exchange ended.  A call reads each as the error
 * taxonomy (mcp_call.c): T_DEAD (the server is gone, a 5xx, a stream cut
 * short) and T_EXPIRED (a 404 of the session) RetryableServer, T_TIMEOUT
 * Timeout, T_TOOBIG and T_BAD (what the server sent is not the protocol:
 * a 3xx, a bad session id, a body that is not the answer) ToolBug, T_AUTH
 * (401) Unauthorized, T_FORBIDDEN (403) Forbidden, T_NOTFOUND (404 of no
 * session) NotFound, T_RATE (429) RateLimited, T_INVALID (400, 422)
 * InvalidInput.
 */
enum {
    T_OK = 0,
    T_DEAD,
    T_TIMEOUT,
    T_TOOBIG,
    T_NOMEM,
    T_AUTH,
    T_FORBIDDEN,
    T_NOTFOUND,
    T_RATE,
    T_INVALID,
    T_BAD,
    T_EXPIRED
};

/* Parse the JSON text @p text (@p len bytes, changed in place) into *out
 * (caller frees): as it is, or else with each escaped lone UTF-16
 * surrogate ("\ud83d" with no low half after it, as a string cut inside a
 * pair prints) made "\ufffd", which cJSON refuses (mcp_rpc.c).  PL_OK,
 * *out NULL when it is no JSON; PL_ENOMEM when memory ran out. */
PL__HIDDEN int pl__mcp_parse(cJSON **out, char *text, size_t len);

/* The longest Mcp-Session-Id taken. */
#define PL__MCP_SESSION_MAX 1024

typedef struct pl__mcp_http pl__mcp_http;

#ifdef PL_MCP_HTTP

/* What is wrong with the endpoint @p url ("http://" or "https://" and
 * more), or NULL when it is a URL with a host, which pl__mcp_http_new()
 * takes. */
PL__HIDDEN const char *pl__mcp_http_url_bad(const char *url);

/* A connection to the endpoint @p url; the bearer token, if any, is read
 * from the environment variable @p token_env at each request.  NULL when
 * out of memory or libcurl cannot start. */
PL__HIDDEN pl__mcp_http *pl__mcp_http_new(const char *url,
                                          const char *token_env,
                                          size_t max_msg);

/*
 * POST the message @p body (@p len bytes of JSON).  For a request
 * (@p id > 0) read the answer of that id, from a JSON body or an event
 * stream, into *answer (the whole message; caller frees).  The session id the server gives is kept and sent, and
 * @p version (once known) as MCP-Protocol-Version.  A T_ code; @p why
 * says what failed.  T_EXPIRED after a 404 of a session: the session is
 * to be left (pl__mcp_http_forget(), then initialize again).
 */
PL__HIDDEN int pl__mcp_http_post(pl__mcp_http *h, const char *body, size_t len,
                                 int64_t id, const char *version,
                                 int64_t timeout_ms, cJSON **answer, char *why,
                                 size_t n);

/* The answer of id @p id (the whole message; caller frees) in a 2xx
 * response's body that came in @p n pieces (@p pieces, @p lens bytes
 * each), read as a transfer reads it: an event stream (@p stream, read
 * up to the answer) or a JSON body; NULL when it is not there, with
 * *too_big when the body or an event passed max_msg.  What the server
 * sends, apart from libcurl (the fuzz harness). */
PL__HIDDEN cJSON *pl__mcp_http_read(pl__mcp_http *h, int64_t id, bool stream,
                                    const char *const *pieces,
                                    const size_t *lens, size_t n,
                                    bool *too_big);

/* The Retry-After of the last exchange's 429 or 5xx, in milliseconds;
 * -1 when it had none. */
PL__HIDDEN long pl__mcp_http_retry_after(const pl__mcp_http *h);

/* Leave the session, to start a new one with the next initialize: a
 * DELETE of it first, best effort, in at most min(@p timeout_ms, 1 s)
 * (none when <= 0). */
PL__HIDDEN void pl__mcp_http_forget(pl__mcp_http *h, int64_t timeout_ms);

/* Whether a stream read since the last call brought
 * notifications/tools/list_changed. */
PL__HIDDEN bool pl__mcp_http_list_changed(pl__mcp_http *h);

/* In a child made by fork(): let go of the parent's session (never
 * ended) and of libcurl's connections, whose sockets the parent shares
 * (nothing libcurl writes on closing them reaches the server); the next
 * request begins a session of this process's own. */
PL__HIDDEN void pl__mcp_http_forsake(pl__mcp_http *h);

/* Forget the session (sending DELETE for it) and free.  NULL: nothing. */
PL__HIDDEN void pl__mcp_http_free(pl__mcp_http *h);

#else /* built without libcurl: no connection is ever made */

static inline int pl__mcp_http_post(pl__mcp_http *h, const char *body,
                                    size_t len, int64_t id, const char *version,
                                    int64_t timeout_ms, cJSON **answer,
                                    char *why, size_t n)
{
    (void)h, (void)body, (void)len, (void)id, (void)version, (void)timeout_ms;
    *answer = NULL;
    snprintf(why, n, "built without libcurl");
    return T_DEAD;
}
static inline long pl__mcp_http_retry_after(const pl__mcp_http *h)
{
    (void)h;
    return -1;
}
static inline void pl__mcp_http_forget(pl__mcp_http *h, int64_t timeout_ms)
{
    (void)h, (void)timeout_ms;
}
static inline bool pl__mcp_http_list_changed(pl__mcp_http *h)
{
    (void)h;
    return false;
}
static inline void pl__mcp_http_forsake(pl__mcp_http *h) { (void)h; }
static inline void pl__mcp_http_free(pl__mcp_http *h) { (void)h; }

#endif

#endif
