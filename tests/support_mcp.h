/*
 * support_mcp.h -- what the tests of MCP servers' tools (test_mcp*.c)
 * share (support_mcp.c): the servers (the scripted one over Streamable
 * HTTP started here), the fixture, the root policy "use" and "halt", and
 * the checks of a result.
 */
#ifndef PL_TESTS_SUPPORT_MCP_H
#define PL_TESTS_SUPPORT_MCP_H

#include "support.h"

#include <policyledger_mcp.h>
#include <sys/types.h>

/* The servers: the reference ones from npm (tests/mcp_setup.sh), the fake
 * one, and the tap that copies a server's traffic to a file. */
#define NPM PL_TEST_BIN_DIR "/npm/node_modules/@modelcontextprotocol"
#define EVERYTHING NPM "/server-everything/dist/index.js"
#define FILESYSTEM NPM "/server-filesystem/dist/index.js"
#define FAKE PL_TEST_SRC_DIR "/mcp_fake_server.py"
#define TAP PL_TEST_SRC_DIR "/mcp_tap.sh"

typedef struct fixture {
    pl_registry *reg;
    pl_mcp *mcp;
    pl_engine *engine;
    char store[4200];
    char dir[1024]; /* a temporary directory */
} fixture;

/* The fixture of the running test. */
extern fixture F;
extern bool in_child;         /* the engine that is killed */
extern pl_decorator per_call; /* each call's decorator, if set */
extern char halt_marker[4200];

/* The root policy "use": {"calls": [{"tool": name, "args": {...}}, ...]}
 * calls each and returns {"got": [each result or error object]}. */
int use(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user);
/* Skip the test when the npm server @p server is not installed. */
void need(const char *server);
/* Options that send the server's stderr to a file in F.dir. */
pl_mcp_options quiet(void);
/* A registry with "use", "halt" and the server's tools. */
int open_reg(const char *name, const char *spec, const pl_mcp_options *o);
/* open_reg(), then an engine on F.store (a new store if unset). */
void open_all(const char *name, const char *spec, const pl_mcp_options *o);
void close_all(void);
/* The suite's init and fini. */
void setup(void);
void teardown(void);
/* Run @p calls (JSON text of the "calls" array) as run @p id; the "got"
 * array (caller frees). */
cJSON *run(const char *id, const char *calls, int executed);
/* Result @p i of @p got. */
const cJSON *at(const cJSON *got, int i);
/* The string @p key of @p v. */
const char *s_of(const cJSON *v, const char *key);
/* The text of the first content item of a result. */
const char *first_text(const cJSON *r);
/* An error result of @p code whose message holds @p part (unless NULL). */
void expect_error(const cJSON *r, const char *code, const char *part);
/* How many lines of @p path contain both @p a and @p b. */
int count_lines(const char *path, const char *a, const char *b);
/* Wait until a line of @p path contains both @p a and @p b. */
void wait_for(const char *path, const char *a, const char *b);
/* Run ledger-replay with @p args (NULL-terminated, at most 22; its
 * standard output to /dev/null): its exit status. */
int replay_tool(const char *const *args);
/* Write @p text to the file @p name in @p dir. */
void write_file(const char *dir, const char *name, const char *text);

/* The scripted MCP server over Streamable HTTP (tests/mcp_http_server.py):
 * servers 0 and 1 of a test, each its process, request log and URL.  The
 * bearer token it expects is TOKEN, in $PL_TEST_MCP_TOKEN. */
#define TOKEN "s3cret-token-value"
typedef struct scripted {
    pid_t pid;
    char log[4200];
    char url[96];
} scripted;
extern scripted g_servers[2];
/* Start server @p k on @p host with the script @p script (JSON text). */
scripted *start_scripted(int k, const char *host, const char *script);
void stop_servers(void);
/* The fini of a test that starts them: teardown(), then stop_servers(). */
void teardown_http(void);
/* Register server 0 (started on @p script) as "h", with the token. */
int register_on(const char *script, pl_mcp_options *o);
/* register_on(), then an engine on a new store F.store. */
void open_on(const char *script, pl_mcp_options *o);
/* The log's entries (a JSON array; caller frees). */
cJSON *log_of(const scripted *s);
/* Whether log entry @p e is a request @p method of session @p sid (NULL:
 * any). */
bool is_request(const cJSON *e, const char *method, const char *sid);
/* How many of the log's requests are @p method; _in: of session @p sid
 * (NULL: any). */
int requests(const scripted *s, const char *method);
int requests_in(const scripted *s, const char *method, const char *sid);

#endif
