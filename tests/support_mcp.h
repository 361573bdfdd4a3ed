/*
 * support_mcp.h -- what the tests of MCP servers' tools (test_mcp*.c)
 * share (support_mcp.c): the servers, the fixture, the root policy "use"
 * and "halt", and the checks of a result.
 */
#ifndef PL_TESTS_SUPPORT_MCP_H
#define PL_TESTS_SUPPORT_MCP_H

#include "support.h"

#include <policyledger_mcp.h>

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
/* Write @p text to the file @p name in @p dir. */
void write_file(const char *dir, const char *name, const char *text);

#endif
