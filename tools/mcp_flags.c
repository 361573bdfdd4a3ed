/*
 * mcp_flags.c -- the MCP servers of a command line, for ledger-replay and
 * agent-demo (docs/tools.md):
 *
 *   --mcp NAME=SPEC           a server (pl_mcp_register()), its tools
 *                             NAME.TOOL; NAME 1..64 bytes
 *   --mcp-env NAME=VAR        the variable VAR of this process's
 *                             environment is passed on to the process of
 *                             server NAME (stdio: only;
 *                             pl_mcp_options.env); repeatable
 *   --mcp-token-env NAME=VAR  server NAME's bearer token is VAR's value,
 *                             read at each request (http(s):// only;
 *                             pl_mcp_options.token_env); once a server
 *
 * A value goes by its variable's name, never on the command line, where
 * every user of the host could read it (ps).  Each flag is checked before
 * a server is started, and a bad one is a usage error: a malformed
 * NAME=VAR, a NAME no --mcp gives, a VAR that is not a variable's name
 * or is not set here (a server without its token answers 401 at its
 * first call, and one without its variable fails in its own way), a
 * flag the server's transport has no use for, one given twice.
 */
#include "mcp_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mcp_flags_takes(const char *flag)
{
    return !strcmp(flag, "--mcp") || !strcmp(flag, "--mcp-env") ||
           !strcmp(flag, "--mcp-token-env");
}

/* @p s as a message shows it: f->quote's, or in single quotes, at most
 * 64 bytes of it, control characters as '?'. */
static const char *shown(const mcp_flags *f, char out[MCP_FLAGS_QUOTE_MAX],
                         const char *s)
{
    if (f->quote)
        return f->quote(out, MCP_FLAGS_QUOTE_MAX, s);
    size_t i = 0;
    out[0] = '\'';
    for (; s[i] && i < 64; i++)
        out[i + 1] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    snprintf(out + i + 1, MCP_FLAGS_QUOTE_MAX - i - 1, "'%s",
             s[i] ? "..." : "");
    return out;
}

static bool http_spec(const char *spec)
{
    return !strncmp(spec, "http://", 7) || !strncmp(spec, "https://", 8);
}

/* A variable's name, as the shell writes one: [A-Za-z_][A-Za-z0-9_]*. */
static bool var_name(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
            return false;
    return true;
}

int mcp_flags_add(mcp_flags *f, const char *flag, const char *value, char *why,
                  size_t n)
{
    char v[MCP_FLAGS_QUOTE_MAX];
    const char *eq = strchr(value, '=');
    if (!strcmp(flag, "--mcp")) {
        if (!eq || eq == value || eq - value > 64) {
            snprintf(why, n, "--mcp needs NAME=SPEC (NAME 1..64 bytes), not %s",
                     shown(f, v, value));
            return -1;
        }
        size_t len = (size_t)(eq - value);
        for (size_t i = 0; i < f->n; i++)
            if (strlen(f->v[i].name) == len &&
                !strncmp(f->v[i].name, value, len)) {
                snprintf(why, n, "--mcp %s names its server twice",
                         shown(f, v, value));
                return -1;
            }
        if (f->n == MCP_FLAGS_MAX) {
            snprintf(why, n, "--mcp: at most %d servers", MCP_FLAGS_MAX);
            return -1;
        }
        mcp_server_flags *s = &f->v[f->n++];
        memset(s, 0, sizeof *s);
        memcpy(s->name, value, len);
        s->name[len] = '\0';
        s->spec = eq + 1;
        return 0;
    }
    bool token = !strcmp(flag, "--mcp-token-env");
    if (!eq || eq == value || !var_name(eq + 1)) {
        snprintf(why, n,
                 "%s needs NAME=VAR (an --mcp server's NAME, the name of "
                 "a variable of this environment), not %s",
                 flag, shown(f, v, value));
        return -1;
    }
    size_t max = token ? MCP_FLAGS_MAX : MCP_FLAGS_MAX * MCP_FLAGS_MAX_ENV;
    size_t *count = token ? &f->n_token : &f->n_env;
    if (*count == max) {
        snprintf(why, n, "%s: at most %zu", flag, max);
        return -1;
    }
    (token ? f->token : f->env)[(*count)++] = value;
    return 0;
}

/* The server @p value ("NAME=VAR") names, or NULL. */
static mcp_server_flags *server_of(mcp_flags *f, const char *value)
{
    size_t len = (size_t)(strchr(value, '=') - value);
    for (size_t i = 0; i < f->n; i++)
        if (strlen(f->v[i].name) == len && !strncmp(f->v[i].name, value, len))
            return &f->v[i];
    return NULL;
}

/* Give @p value of @p flag to its server: 0, or -1 with @p why. */
static int give(mcp_flags *f, const char *flag, const char *value, char *why,
                size_t n)
{
    char v[MCP_FLAGS_QUOTE_MAX];
    mcp_server_flags *s = server_of(f, value);
    const char *var = strchr(value, '=') + 1;
    bool token = !strcmp(flag, "--mcp-token-env");
    if (!s) {
        snprintf(why, n, "%s %s: no --mcp NAME=SPEC names that server", flag,
                 shown(f, v, value));
        return -1;
    }
    if (http_spec(s->spec) != token) {
        char w[MCP_FLAGS_QUOTE_MAX];
        snprintf(why, n, "%s %s: server %s is %s", flag, shown(f, v, value),
                 shown(f, w, s->name),
                 token ? "not an http(s):// endpoint (its process gets "
                         "variables by --mcp-env)"
                       : "an http(s):// endpoint, started by nobody here "
                         "(its token goes by --mcp-token-env)");
        return -1;
    }
    const char *val = getenv(var);
    if (!val || (token && !*val)) {
        snprintf(why, n, "%s %s: %s is not set in this environment", flag,
                 shown(f, v, value), var);
        return -1;
    }
    bool twice = token && s->token_env;
    for (size_t i = 0; !token && i < s->n_env; i++)
        twice = twice || !strcmp(s->env[i], var);
    if (twice) {
        snprintf(why, n, "%s %s is given twice", flag, shown(f, v, value));
        return -1;
    }
    if (token) {
        s->token_env = var;
    } else if (s->n_env == MCP_FLAGS_MAX_ENV) {
        snprintf(why, n, "--mcp-env: at most %d variables a server",
                 MCP_FLAGS_MAX_ENV);
        return -1;
    } else {
        s->env[s->n_env++] = var;
    }
    return 0;
}

/* An --mcp server's form, a usage error when it is not: a NAME without a
 * dot or control character, a SPEC "stdio:" and a command, or an http://
 * or https:// URL with a host (no white space or control character in
 * it).  What the server then says of itself (it cannot start, its tools)
 * is an MCP server that cannot be opened. */
bool mcp_flags_server_ok(const mcp_server_flags *m)
{
    for (const char *p = m->name; *p; p++)
        if (*p == '.' || (unsigned char)*p < 0x20 || *p == 0x7f)
            return false;
    const char *spec = m->spec;
    if (http_spec(spec)) {
        const char *host = strstr(spec, "://") + 3;
        for (const char *p = spec; *p; p++)
            if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                return false;
        return *host && !strchr("/?#:@", *host);
    }
    return !strncmp(spec, "stdio:", 6) && spec[6 + strspn(spec + 6, " ")];
}

int mcp_flags_check(mcp_flags *f, char *why, size_t n)
{
    for (size_t i = 0; i < f->n_env; i++)
        if (give(f, "--mcp-env", f->env[i], why, n))
            return -1;
    for (size_t i = 0; i < f->n_token; i++)
        if (give(f, "--mcp-token-env", f->token[i], why, n))
            return -1;
    return 0;
}

int mcp_flags_register(pl_mcp **out, pl_registry *reg, const mcp_flags *f,
                       size_t i, const pl_mcp_options *base)
{
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    if (base)
        o = *base;
    const mcp_server_flags *s = &f->v[i];
    o.env = s->env;
    o.n_env = s->n_env;
    o.token_env = s->token_env;
    return pl_mcp_register(out, reg, s->name, s->spec, &o);
}
