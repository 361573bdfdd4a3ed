/*
 * mcp_flags.h -- the MCP servers of a command line (mcp_flags.c), for
 * ledger-replay and agent-demo: --mcp NAME=SPEC, --mcp-env NAME=VAR and
 * --mcp-token-env NAME=VAR.  Uses only the public API.
 */
#ifndef PL_MCP_FLAGS_H
#define PL_MCP_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

#include <policyledger_mcp.h>

/* The most servers, and variables of one server, a command line gives. */
#define MCP_FLAGS_MAX 16
#define MCP_FLAGS_MAX_ENV 32

/* One --mcp server and what the other flags give it. */
typedef struct mcp_server_flags {
    char name[65];
    const char *spec;                   /* borrowed from argv */
    const char *env[MCP_FLAGS_MAX_ENV]; /* --mcp-env's VARs, borrowed */
    size_t n_env;
    const char *token_env; /* --mcp-token-env's VAR, borrowed; or NULL */
} mcp_server_flags;

/* The room a quote function gets (cli_quote()'s CLI_QUOTE_MAX fits). */
#define MCP_FLAGS_QUOTE_MAX 128

typedef struct mcp_flags {
    /* How a message shows a user's string (cli_quote()); NULL: in single
     * quotes, cut at 64 bytes, control characters as '?' */
    const char *(*quote)(char *out, size_t n, const char *s);
    mcp_server_flags v[MCP_FLAGS_MAX];
    size_t n;
    /* --mcp-env and --mcp-token-env as given, for mcp_flags_check() */
    const char *env[MCP_FLAGS_MAX * MCP_FLAGS_MAX_ENV];
    size_t n_env;
    const char *token[MCP_FLAGS_MAX];
    size_t n_token;
} mcp_flags;

/* Whether @p flag is --mcp, --mcp-env or --mcp-token-env (each takes a
 * value and may be given again). */
bool mcp_flags_takes(const char *flag);

/* Keep @p value of @p flag (one mcp_flags_takes() accepts): 0; or -1, a
 * usage error, its message in @p why (@p n bytes). */
int mcp_flags_add(mcp_flags *f, const char *flag, const char *value, char *why,
                  size_t n);

/* Whether server @p m's form is one pl_mcp_register() can take: a NAME
 * without a dot or control character, a SPEC "stdio:" and a command, or
 * an http:// or https:// URL with a host (no white space or control
 * character in it).  What the server then says of itself (it cannot
 * start, its tools) is for pl_mcp_register(). */
bool mcp_flags_server_ok(const mcp_server_flags *m);

/* Once every flag is kept: give each --mcp-env and --mcp-token-env to its
 * server and check them (a server --mcp names, a variable set here, an
 * --mcp-env of a stdio: server, an --mcp-token-env of an http(s):// one,
 * neither given twice): 0; or -1, a usage error, its message in @p why. */
int mcp_flags_check(mcp_flags *f, char *why, size_t n);

/* pl_mcp_register() of server @p i, with @p base's options (NULL: the
 * defaults) and the variables its flags give it. */
int mcp_flags_register(pl_mcp **out, pl_registry *reg, const mcp_flags *f,
                       size_t i, const pl_mcp_options *base);

#endif
