/*
 * mcp.c -- tools of a Model Context Protocol server as policies
 * (policyledger_mcp.h has the rules): the handshake, the tool list and
 * registration.  The transports are in mcp_rpc.c (stdio) and mcp_http.c
 * (Streamable HTTP); a tool call is in mcp_call.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mcp_int.h"
#include "platform.h"
#include "registry.h"

#define MAX_ARGS 256
#define MAX_TOOLS 1024
#define MAX_PAGES 100
#define MAX_PREFIX 64

static const char *const versions[] = {"2025-06-18", "2025-03-26",
                                       "2024-11-05"};
static const char *const base_env[] = {"HOME", "LOGNAME", "PATH", "SHELL",
                                       "TERM", "USER",    "LANG"};

static bool known_version(const char *v)
{
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

/* Start the server if it is not running, and perform the handshake. */
int pl__mcp_ensure(pl_mcp *m, int64_t deadline, char *why, size_t n)
{
    if (m->http && m->up)
        return T_OK;
    if (m->http) {
        /* a new session; the old one ended first, at most half of what
         * is left of the call's time spent on it */
        pl__mcp_http_forget(m->http, (deadline - pl__mcp_mono_ms()) / 2);
    } else if (m->pid > 0) {
        /* an exit noticed here rather than on the next read; not asked
         * when a drain has just found the server's output open */
        if (m->quiet) {
            m->quiet = false;
            return T_OK;
        }
        if (waitpid(m->pid, NULL, WNOHANG) == m->pid) {
            m->pid = 0;
            pl__mcp_stop(m);
        } else {
            return T_OK;
        }
    }
    int t = m->http ? T_OK : pl__mcp_spawn(m, why, n);
    if (t != T_OK)
        return t;
    cJSON *p = cJSON_CreateObject();
    cJSON *info = p ? cJSON_AddObjectToObject(p, "clientInfo") : NULL;
    if (!info ||
        !cJSON_AddStringToObject(p, "protocolVersion",
                                 PL_MCP_PROTOCOL_VERSION) ||
        !cJSON_AddObjectToObject(p, "capabilities") ||
        !cJSON_AddStringToObject(info, "name", "policyledger") ||
        !cJSON_AddStringToObject(info, "version", "0.1.0")) {
        cJSON_Delete(p);
        pl__mcp_stop(m);
        return T_NOMEM;
    }
    cJSON *r = NULL, *e = NULL;
    t = pl__mcp_rpc(m, "initialize", p, deadline, &r, &e, why, n);
    if (t == T_OK && e) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        snprintf(why, n, "initialize failed: %s",
                 cJSON_IsString(msg) ? msg->valuestring : "(no message)");
        t = T_DEAD;
    } else if (t == T_OK) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "protocolVersion");
        if (!cJSON_IsString(v) || !known_version(v->valuestring)) {
            snprintf(why, n,
                     "the server speaks protocol version %.40s, "
                     "not one of 2024-11-05, 2025-03-26, 2025-06-18",
                     cJSON_IsString(v) ? v->valuestring : "(none)");
            t = T_DEAD;
        } else {
            snprintf(m->version, sizeof m->version, "%s", v->valuestring);
        }
    }
    cJSON_Delete(r);
    cJSON_Delete(e);
    if (t != T_OK) {
        pl__mcp_stop(m);
        return t;
    }
    m->up = true; /* before: a 404 of the notification says it is not */
    char said[200];
    t = pl__mcp_notify(m, "notifications/initialized", NULL, said, sizeof said);
    if (t != T_OK && t != T_EXPIRED) {
        /* a server that did not take it is not ready for requests */
        snprintf(why, n, "notifications/initialized: %s", said);
        pl__mcp_stop(m);
        return t;
    }
    if (m->list) /* started again: it may be another version of itself */
        m->list_changed = true;
    return T_OK;
}

/* ------------------------------------------------------------------------ */
/* Across fork()                                                            */
/* ------------------------------------------------------------------------ */

/*
 * A child made by fork() never uses nor ends what its parent's handle
 * holds (docs/design.md §15): the server process (never signalled nor
 * waited for), the pipes to it (never written), the HTTP session (never
 * DELETEd) and libcurl's connections.  A handle keeps the process it
 * belongs to; the first use in another one (a call, pl_mcp_close()) drops
 * that process's copies, and a call then starts a server, or a session,
 * of the child's own, as after a restart.  The process's handles are
 * listed so that a fork's child handler makes each one's lock anew: a
 * thread of the parent inside a call holds it, and that thread has no
 * copy in the child.  The list's lock is held across the fork, so the
 * list is whole in both processes.
 */
static pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
static pl_mcp *g_open;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
/* This process's id, kept: set before the first handle is made, and again
 * in a child by the fork handler, which fork() runs before it returns. */
static _Atomic pid_t g_pid;

static void fork_prepare(void) { pthread_mutex_lock(&g_open_mu); }

static void fork_parent(void) { pthread_mutex_unlock(&g_open_mu); }

static void fork_child(void)
{
    atomic_store_explicit(&g_pid, getpid(), memory_order_relaxed);
    for (pl_mcp *m = g_open; m; m = m->next_open)
        pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_unlock(&g_open_mu);
}

static void fork_once(void)
{
    atomic_store_explicit(&g_pid, getpid(), memory_order_relaxed);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static pid_t self(void)
{
    return atomic_load_explicit(&g_pid, memory_order_relaxed);
}

/* A new handle, of this process; its lock made. */
static pl_mcp *handle_new(void)
{
    pthread_once(&g_fork_once, fork_once);
    pl_mcp *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    m->owner = self();
    pthread_mutex_lock(&g_open_mu);
    m->next_open = g_open;
    g_open = m;
    pthread_mutex_unlock(&g_open_mu);
    return m;
}

static void handle_unlist(pl_mcp *m)
{
    pthread_mutex_lock(&g_open_mu);
    pl_mcp **pp = &g_open;
    while (*pp && *pp != m)
        pp = &(*pp)->next_open;
    if (*pp)
        *pp = m->next_open;
    pthread_mutex_unlock(&g_open_mu);
}

/* In a child: drop the parent's server, pipes and session, saying nothing
 * to them; and the runs known to hold the tool list, which this process
 * has recorded in none. */
static void forsake(pl_mcp *m)
{
    pl__mcp_close_fd(&m->wfd); /* a copy: the parent's stays open */
    pl__mcp_close_fd(&m->rfd);
    m->pid = 0;
    m->len = 0;
    m->rcv_ms = 0;
    m->up = m->quiet = false;
    if (m->http)
        pl__mcp_http_forsake(m->http);
    /* the next call starts the server, or a session, and lists its tools
     * before it records which it is made against */
    m->list_changed = m->list != NULL;
    memset(m->runs, 0, sizeof m->runs);
    m->next_run = m->last_seen = 0;
    m->owner = self();
}

void pl__mcp_lock(pl_mcp *m)
{
    pthread_mutex_lock(&m->lock);
    if (m->owner != self())
        forsake(m);
}

/* ------------------------------------------------------------------------ */
/* Registration                                                             */
/* ------------------------------------------------------------------------ */

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* "stdio:COMMAND ARG..." as an argument vector. */
static int parse_spec(char ***out, const char *spec)
{
    *out = NULL;
    if (!spec || strncmp(spec, "stdio:", 6) != 0)
        return pl__err(PL_EINVAL,
                       "MCP server spec '%.80s': expected "
                       "\"stdio:COMMAND ARG...\"%s",
                       spec ? spec : "(null)",
#ifdef PL_MCP_HTTP
                       " or an http(s):// URL"
#else
                       ""
#endif
        );
    char **v = calloc(MAX_ARGS + 1, sizeof *v);
    if (!v)
        return PL_ENOMEM;
    size_t n = 0;
    for (const char *p = spec + 6; *p;) {
        while (*p == ' ')
            p++;
        size_t k = strcspn(p, " ");
        if (!k)
            break;
        if (n == MAX_ARGS) {
            free_strv(v);
            return pl__err(PL_EINVAL, "MCP server spec: more than %d words",
                           MAX_ARGS);
        }
        if (!(v[n++] = pl__strndup(p, k))) {
            free_strv(v);
            return PL_ENOMEM;
        }
        p += k;
    }
    if (!n) {
        free(v);
        return pl__err(PL_EINVAL, "MCP server spec '%s': no command", spec);
    }
    *out = v;
    return PL_OK;
}

static int make_env(char ***out, const pl_mcp_options *o)
{
    size_t nb = sizeof base_env / sizeof base_env[0];
    char **env = calloc(nb + o->n_env + 1, sizeof *env);
    if (!env)
        return PL_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < nb + o->n_env; i++) {
        /* names checked with the options (check_options()) */
        const char *k = i < nb ? base_env[i] : o->env[i - nb];
        const char *v = getenv(k);
        if (v && !(env[n++] = pl__asprintf("%s=%s", k, v))) {
            free_strv(env);
            return PL_ENOMEM;
        }
    }
    *out = env;
    return PL_OK;
}

static bool listed(const char *name, const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] && strcmp(v[i], name) == 0)
            return true;
    return false;
}

/* Every tool of the server, following nextCursor.  Caller frees. */
static int list_tools(cJSON **out, pl_mcp *m, int64_t deadline)
{
    *out = cJSON_CreateArray();
    /* the cursors followed: one given twice is a server paging in a loop,
     * which would be asked to MAX_PAGES and refused for its length */
    cJSON *cursors = cJSON_CreateArray();
    if (!*out || !cursors) {
        cJSON_Delete(*out);
        cJSON_Delete(cursors);
        *out = NULL;
        return PL_ENOMEM;
    }
    char *cursor = NULL;
    char why[256];
    int st = PL_OK;
    for (int page = 0;; page++) {
        if (page == MAX_PAGES) {
            st = pl__err(PL_EIO, "MCP server %s: more than %d pages of tools",
                         m->name, MAX_PAGES);
            break;
        }
        cJSON *p = cJSON_CreateObject();
        if (!p || (cursor && !cJSON_AddStringToObject(p, "cursor", cursor))) {
            cJSON_Delete(p);
            st = PL_ENOMEM;
            break;
        }
        cJSON *r = NULL, *e = NULL;
        int t = pl__mcp_rpc(m, "tools/list", p, deadline, &r, &e, why,
                            sizeof why);
        if (t != T_OK || e) {
            const char *msg = e ? pl__mcp_str(e, "message") : why;
            st = t == T_NOMEM ? PL_ENOMEM
                              : pl__err(PL_EIO, "MCP server %s: tools/list: %s",
                                        m->name, msg ? msg : "an error");
            cJSON_Delete(r);
            cJSON_Delete(e);
            break;
        }
        cJSON *tools = cJSON_GetObjectItemCaseSensitive(r, "tools");
        if (!cJSON_IsArray(tools)) {
            st = pl__err(PL_EIO,
                         "MCP server %s: tools/list: an answer without a "
                         "\"tools\" array",
                         m->name);
            cJSON_Delete(r);
            break;
        }
        cJSON *it;
        cJSON_ArrayForEach(it, tools)
        {
            if (cJSON_GetArraySize(*out) >= MAX_TOOLS) {
                st = pl__err(PL_EIO, "MCP server %s: more than %d tools",
                             m->name, MAX_TOOLS);
                break;
            }
            /* a tool lost here would be a tool never registered */
            if (!cJSON_AddItemToArray(*out, cJSON_Duplicate(it, 1))) {
                st = PL_ENOMEM;
                break;
            }
        }
        const cJSON *nc = cJSON_GetObjectItemCaseSensitive(r, "nextCursor");
        if (!st && nc && !cJSON_IsNull(nc) && !cJSON_IsString(nc))
            /* more tools, and nothing that asks for them: the list is not
             * taken for whole */
            st = pl__err(PL_EIO,
                         "MCP server %s: tools/list: page %d has a "
                         "\"nextCursor\" that is not a string",
                         m->name, page + 1);
        const char *next = pl__mcp_str(r, "nextCursor");
        free(cursor);
        cursor = next && *next ? pl__strdup(next) : NULL;
        bool more = next && *next;
        cJSON_Delete(r);
        if (st || !more)
            break;
        if (!cursor) {
            st = PL_ENOMEM;
            break;
        }
        const cJSON *c;
        cJSON_ArrayForEach(c, cursors)
        {
            if (strcmp(c->valuestring, cursor) == 0) {
                st = pl__err(PL_EIO,
                             "MCP server %s: tools/list: page %d gave the "
                             "cursor \"%.80s\" again: the server pages in "
                             "a loop",
                             m->name, page + 1, cursor);
                break;
            }
        }
        if (!st && !cJSON_AddItemToArray(cursors, cJSON_CreateString(cursor)))
            st = PL_ENOMEM;
        if (st)
            break;
    }
    cJSON_Delete(cursors);
    free(cursor);
    if (st) {
        cJSON_Delete(*out);
        *out = NULL;
    } else {
        /* a change the server announced before its answer is in it */
        m->list_changed = false;
    }
    return st;
}

/* Register @p list's tools; every name and schema is checked first. */
static int register_tools(pl_mcp *m, pl_registry *reg, const cJSON *list,
                          const pl_mcp_options *o)
{
    size_t n = (size_t)cJSON_GetArraySize(list);
    char **names = calloc(n + 1, sizeof *names);
    char **schemas = calloc(n + 1, sizeof *schemas);
    m->tools = calloc(n + 1, sizeof *m->tools);
    int st = names && schemas && m->tools ? PL_OK : PL_ENOMEM;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (st)
            break;
        const char *tn = pl__mcp_str(it, "name");
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(it, "inputSchema");
        if (!tn || !*tn) {
            st = pl__err(PL_EIO, "MCP server %s: a tool without a name",
                         m->name);
            break;
        }
        names[i] = pl__asprintf("%s.%s", m->name, tn);
        m->tools[i].mcp = m;
        m->tools[i].name = pl__strdup(tn);
        if (!names[i] || !m->tools[i].name) {
            st = PL_ENOMEM;
            break;
        }
        if (!pl__name_ok(names[i]))
            st = pl__err(PL_EINVAL,
                         "MCP server %s: tool name '%.80s' "
                         "makes a bad policy name",
                         m->name, tn);
        else if (pl_registry_find(reg, names[i]))
            st = pl__err(PL_EEXIST, "MCP server %s: policy '%s' exists",
                         m->name, names[i]);
        /* one name twice would register the first and then fail, leaving
         * the registry a policy of a handle that is closed */
        for (size_t k = 0; !st && k < i; k++)
            if (strcmp(names[k], names[i]) == 0)
                st = pl__err(PL_EIO,
                             "MCP server %s: the tool list names '%.80s' "
                             "twice",
                             m->name, tn);
        if (!st && in && !cJSON_IsObject(in) && !o->unchecked_schemas) {
            /* a malformed schema: registered without it only when asked */
            st = pl__err(PL_EINVAL,
                         "MCP server %s, tool %s: inputSchema: not a JSON "
                         "object (pl_mcp_options.unchecked_schemas registers "
                         "such a tool without it)",
                         m->name, tn);
        } else if (!st && cJSON_IsObject(in)) {
            pl_schema *s = NULL;
            if (!(schemas[i] = cJSON_PrintUnformatted(in)))
                st = PL_ENOMEM;
            else if ((st = pl_schema_compile_text(&s, schemas[i])) &&
                     st != PL_ENOMEM && o->unchecked_schemas) {
                /* registered without it, as the option says */
                free(schemas[i]);
                schemas[i] = NULL;
                st = PL_OK;
            } else if (st && st != PL_ENOMEM) {
                st = pl_errorf(st,
                               "MCP server %s, tool %s: inputSchema: %s "
                               "(pl_mcp_options.unchecked_schemas registers "
                               "such a tool without it)",
                               m->name, tn, pl_errmsg());
            }
            pl_schema_free(s);
        }
        i++;
    }
    /* a tool named idempotent that the server does not list: a typo, or
     * a server that is not the one meant; registering the others as if
     * it were listed would run it (once the server lists it) without the
     * rule asked for */
    for (size_t k = 0; !st && k < o->n_idempotent; k++) {
        size_t j = 0;
        while (j < n && strcmp(m->tools[j].name, o->idempotent[k]) != 0)
            j++;
        if (j == n)
            st = pl__err(PL_EINVAL,
                         "MCP server %s: pl_mcp_options.idempotent names "
                         "'%.80s', a tool the server does not list",
                         m->name, o->idempotent[k]);
    }
    m->n_tools = st ? 0 : n;
    /* all or none: a policy added before one that fails (out of memory)
     * would point into this handle, which the failure closes */
    size_t before = pl_registry_count(reg);
    for (i = 0; !st && i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(list, (int)i);
        const cJSON *ann = cJSON_GetObjectItemCaseSensitive(t, "annotations");
        bool ro = !o->ignore_hints &&
                  cJSON_IsTrue(
                      cJSON_GetObjectItemCaseSensitive(ann, "readOnlyHint"));
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = names[i];
        d.fn = pl__mcp_call_tool;
        d.user = &m->tools[i];
        d.description = pl__mcp_str(t, "description");
        d.input_schema = schemas[i];
        d.idempotent = ro ||
                       listed(m->tools[i].name, o->idempotent, o->n_idempotent);
        d.in_doubt = o->in_doubt;
        m->tools[i].idempotent = d.idempotent;
        const char *code = cJSON_GetStringValue(cJSON_GetArrayItem(m->codes,
                                                                   (int)i));
        snprintf(m->tools[i].code, sizeof m->tools[i].code, "%s",
                 code ? code : "mcp:");
        d.code_version = m->tools[i].code;
        st = pl_registry_add(reg, &d);
    }
    if (st) {
        pl__registry_truncate(reg, before);
        m->n_tools = 0;
    }
    for (i = 0; i < n; i++) {
        free(names ? names[i] : NULL);
        free(schemas ? schemas[i] : NULL);
    }
    free(names);
    free(schemas);
    return st;
}

/* "fnv1a64:" and the FNV-1a (64 bits) of @p v's compact text. */
static int fnv(char out[32], const cJSON *v)
{
    char *text = cJSON_PrintUnformatted(v);
    if (!text)
        return PL_ENOMEM;
    uint64_t h = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 0x100000001b3u;
    free(text);
    snprintf(out, 32, "fnv1a64:%016llx", (unsigned long long)h);
    return PL_OK;
}

/*
 * Take @p list (the tool list as the server listed it) as the server's:
 * its fingerprint, and each tool's code identity, "mcp:" NAME "." TOOL "@"
 * and the fingerprint of the tool's own entry (its description, schemas,
 * annotations), which changes when the server changes the tool.
 */
static int set_list(pl_mcp *m, cJSON *list)
{
    char fp[32], h[32];
    cJSON *codes = cJSON_CreateArray();
    int st = codes ? fnv(fp, list) : PL_ENOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        const char *tn = pl__mcp_str(it, "name");
        char code[PL__MCP_CODE_MAX];
        if (st || (st = fnv(h, it)))
            break;
        snprintf(code, sizeof code, "mcp:%s.%.*s@%s", m->name, PL_MAX_NAME,
                 tn ? tn : "", h);
        if (!cJSON_AddItemToArray(codes, cJSON_CreateString(code)))
            st = PL_ENOMEM;
    }
    if (st) {
        cJSON_Delete(codes);
        cJSON_Delete(list);
        return st;
    }
    /* the new lists in place before the old ones go: a child forked
     * meanwhile (by another thread) holds no list freed */
    cJSON *old_list = m->list, *old_codes = m->codes;
    m->list = list;
    m->codes = codes;
    m->list_size = cJSON_GetArraySize(list);
    m->list_gen++;
    memcpy(m->fingerprint, fp, sizeof fp);
    cJSON_Delete(old_list);
    cJSON_Delete(old_codes);
    return PL_OK;
}

int pl__mcp_take_list(pl_mcp *m, pl_registry *reg, cJSON *list,
                      const pl_mcp_options *o)
{
    int st = set_list(m, list); /* takes the list */
    return st ? st : register_tools(m, reg, m->list, o);
}

int pl__mcp_relist(pl_mcp *m, int64_t deadline)
{
    cJSON *list = NULL;
    int st = list_tools(&list, m, deadline);
    return st ? st : set_list(m, list);
}

/* A timeout of @p ms, @p dflt when 0; past TIMEOUT_MAX_MS (34 years) one
 * that never comes: deadlines are the monotonic clock plus a timeout,
 * which must not overflow. */
#define TIMEOUT_MAX_MS ((int64_t)1 << 40)
static int64_t timeout_or(long ms, int64_t dflt)
{
    if (!ms)
        return dflt;
    return (int64_t)ms < TIMEOUT_MAX_MS ? (int64_t)ms : TIMEOUT_MAX_MS;
}

/* A variable's name as getenv() takes one: not empty, no '='. */
static bool var_ok(const char *k) { return k && *k && !strchr(k, '='); }

static int check_options(const pl_mcp_options *o)
{
    if (o->timeout_ms < 0 || o->start_timeout_ms < 0)
        return pl__err(PL_EINVAL, "pl_mcp_options: a negative timeout");
    if (o->max_message_bytes > (size_t)256 << 20)
        return pl__err(PL_EINVAL,
                       "pl_mcp_options: max_message_bytes past 256 MiB");
    if ((o->n_env && !o->env) || (o->n_idempotent && !o->idempotent))
        return pl__err(PL_EINVAL, "pl_mcp_options: a count without its list");
    for (size_t i = 0; i < o->n_idempotent; i++)
        if (!o->idempotent[i] || !*o->idempotent[i])
            return pl__err(PL_EINVAL,
                           "pl_mcp_options: idempotent[%zu] names no tool", i);
    if (o->in_doubt != PL_IN_DOUBT_RERUN && o->in_doubt != PL_IN_DOUBT_FAIL &&
        o->in_doubt != PL_IN_DOUBT_SUSPEND)
        return pl__err(PL_EINVAL, "pl_mcp_options: bad in_doubt");
    /* whatever the transport (a stdio server has no use for a token, an
     * endpoint none for variables): a bad one is refused, not ignored */
    for (size_t i = 0; i < o->n_env; i++)
        if (!var_ok(o->env[i]))
            return pl__err(PL_EINVAL,
                           "pl_mcp_options: bad variable name '%.80s' in env",
                           o->env[i] ? o->env[i] : "(null)");
    if (o->token_env && !var_ok(o->token_env))
        return pl__err(PL_EINVAL, "pl_mcp_options: bad token_env '%.80s'",
                       o->token_env);
    return PL_OK;
}

/* Whether @p reg holds tools of a server registered as @p name: a second
 * server under it would have its tools mixed in among the first's (or,
 * with the same tools, in their place), its list recorded under the same
 * name. */
static bool server_named(const pl_registry *reg, const char *name)
{
    size_t k = strlen(name);
    for (size_t i = 0, n = pl_registry_count(reg); i < n; i++) {
        const pl_policy_def *d = pl_registry_at(reg, i);
        if (d && d->fn == pl__mcp_call_tool && strncmp(d->name, name, k) == 0 &&
            d->name[k] == '.')
            return true;
    }
    return false;
}

int pl_mcp_register(pl_mcp **out, pl_registry *reg, const char *name,
                    const char *spec, const pl_mcp_options *opts)
{
    if (out)
        *out = NULL;
    if (!out || !reg)
        return pl__err(PL_EINVAL, "pl_mcp_register: NULL %s",
                       !out ? "out" : "registry");
    pl_mcp_options current;
    if (pl__struct_in(&current, opts, &pl__mcp_options_layout,
                      "pl_mcp_register"))
        return PL_EINVAL;
    const pl_mcp_options *o = &current;
    int st = check_options(o);
    if (st)
        return st;
    if (!name || !*name || strlen(name) > MAX_PREFIX || strchr(name, '.') ||
        !pl__name_ok(name))
        return pl__err(PL_EINVAL,
                       "MCP server name '%.80s': 1..%d bytes, no "
                       "dot or control character",
                       name ? name : "(null)", MAX_PREFIX);
    /* before the server is started; the name is reserved whatever tools
     * the server lists, none included (a registry that adopted another's
     * policies holds its servers' tools without their names) */
    if (server_named(reg, name) ||
        (st = pl__registry_reserve(reg, name)) == PL_EEXIST)
        return pl__err(PL_EEXIST,
                       "MCP server %s: a server of that name is registered",
                       name);
    if (st)
        return st;
    pl_mcp *m = handle_new();
    if (!m) {
        pl__registry_unreserve(reg, name);
        return PL_ENOMEM;
    }
    m->wfd = m->rfd = m->err_fd = -1;
    m->retry_after_ms = -1;
    m->timeout_ms = (long)timeout_or(o->timeout_ms, 30000);
    m->start_timeout_ms = (long)timeout_or(o->start_timeout_ms, 60000);
    m->max_msg = o->max_message_bytes ? o->max_message_bytes : 4 << 20;
    m->max_inline = o->max_inline_bytes ? o->max_inline_bytes : 64 << 10;
    cJSON *list = NULL;
    if (!(m->name = pl__strdup(name)) || !(m->buf = malloc(m->max_msg + 1))) {
        st = PL_ENOMEM;
        goto done;
    }
    if (spec && (strncmp(spec, "http://", 7) == 0 ||
                 strncmp(spec, "https://", 8) == 0)) {
#ifdef PL_MCP_HTTP
        const char *bad = pl__mcp_http_url_bad(spec);
        if (bad) {
            /* not the URL itself: it may hold a password */
            st = pl__err(PL_EINVAL,
                         "MCP server %s: the endpoint is no http(s) URL "
                         "(%s): expected http://HOST[:PORT]/PATH or "
                         "https://...",
                         name, bad);
            goto done;
        }
        if (!(m->http = pl__mcp_http_new(spec, o->token_env, m->max_msg))) {
            st = pl__err(PL_ENOMEM, "MCP server %s: cannot start libcurl",
                         name);
            goto done;
        }
#else
        st = pl__err(PL_EINVAL,
                     "MCP server %s: built without libcurl, "
                     "so without the HTTP transport",
                     name);
        goto done;
#endif
    } else if ((st = parse_spec(&m->argv, spec)) ||
               (st = make_env(&m->env, o))) {
        goto done;
    }
    if (o->stderr_path) {
        m->err_fd = open(o->stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (m->err_fd < 0) {
            st = pl__err(PL_EIO, "MCP server %s: cannot open %s: %s", name,
                         o->stderr_path, strerror(errno));
            goto done;
        }
        pl__mcp_cloexec(m->err_fd);
    }
    char why[256] = "";
    int64_t deadline = pl__mcp_mono_ms() + m->start_timeout_ms;
    int t = pl__mcp_ensure(m, deadline, why, sizeof why);
    if (t != T_OK) {
        /* an endpoint's password (user:PASSWORD@host) is not said */
        const char *host = strstr(spec, "://");
        const char *at = host ? strpbrk(host + 3, "@/") : NULL;
        const char *colon = at && *at == '@'
                                ? memchr(host + 3, ':', (size_t)(at - host - 3))
                                : NULL;
        st = t == T_NOMEM ? PL_ENOMEM
             : colon
                 ? pl__err(PL_EIO, "MCP server %s (%.*s***%s): %s", name,
                           (int)(colon + 1 - spec), spec, at, why)
                 : pl__err(PL_EIO, "MCP server %s (%s): %s", name, spec, why);
        goto done;
    }
    if ((st = list_tools(&list, m, deadline)))
        goto done;
    st = pl__mcp_take_list(m, reg, list, o);
    list = NULL;
    if (st)
        goto done;
    *out = m;
done:
    cJSON_Delete(list);
    if (st) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        pl_mcp_close(m);
        pl__registry_unreserve(reg, name);
        pl__errmsg_restore(saved);
    }
    return st;
}

const char *pl_mcp_protocol_version(const pl_mcp *mcp)
{
    return mcp ? mcp->version : NULL;
}

size_t pl_mcp_tool_count(const pl_mcp *mcp) { return mcp ? mcp->n_tools : 0; }

const cJSON *pl_mcp_tool(const pl_mcp *mcp, const char *policy)
{
    size_t n = mcp && policy ? strlen(mcp->name) : 0;
    if (!n || strncmp(policy, mcp->name, n) != 0 || policy[n] != '.')
        return NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, mcp->list)
    {
        const char *tn = pl__mcp_str(it, "name");
        if (tn && strcmp(tn, policy + n + 1) == 0)
            return it;
    }
    return NULL;
}

void pl_mcp_close(pl_mcp *m)
{
    if (!m)
        return;
    handle_unlist(m);
    if (m->owner != self()) /* inherited: nothing of the parent's is ended */
        forsake(m);
    pl__mcp_stop(m);
    pl__mcp_http_free(m->http);
    pl__mcp_close_fd(&m->err_fd);
    pthread_mutex_destroy(&m->lock);
    for (size_t i = 0; m->tools && m->tools[i].name; i++)
        free(m->tools[i].name);
    free(m->tools);
    cJSON_Delete(m->list);
    cJSON_Delete(m->codes);
    free_strv(m->argv);
    free_strv(m->env);
    free(m->buf);
    pl__buf_free(&m->out);
    free(m->name);
    free(m);
}
