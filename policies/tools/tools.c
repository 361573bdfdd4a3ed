/*
 * tools.c -- the tool policies' settings and their registration, with the
 * description and input JSON Schema a model sees for each.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "tools.h"

#if PL_WITH_CURL
#include <curl/curl.h>
#endif

#define DEFAULT_CAP (1024 * 1024)
#define DEFAULT_CONNECT_MS 5000
#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_REDIRECTS 5
#define MAX_CAP (1 << 30)
#define DEFAULT_COMMAND_MS 10000
#define DEFAULT_OUTPUT (64 * 1024)
#define MAX_OUTPUT (16 * 1024 * 1024)

static const char calculator_schema[] =
    "{\"type\":\"object\","
    "\"properties\":{\"expression\":{\"type\":\"string\","
    "\"description\":\"An arithmetic expression: numbers (decimals, "
    "optional exponent), + - * / % ^ and parentheses, e.g. (2.5 + 3) * -4 "
    "^ 2\",\"minLength\":1,\"maxLength\":4096}},"
    "\"required\":[\"expression\"],\"additionalProperties\":false}";

static const char read_file_schema[] =
    "{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\","
    "\"description\":\"A path relative to the working directory (or "
    "absolute inside it)\",\"minLength\":1,\"maxLength\":4095}},"
    "\"required\":[\"path\"],\"additionalProperties\":false}";

static const char run_command_schema[] =
    "{\"type\":\"object\","
    "\"properties\":{"
    "\"argv\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"maxLength\":4095},\"minItems\":1,\"maxItems\":256,"
    "\"description\":\"The program (an allowed name, no path) and its "
    "arguments; no shell\"},"
    "\"cwd\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4095,"
    "\"description\":\"The directory to run in, under the working "
    "directory\"},"
    "\"stdin\":{\"type\":\"string\",\"maxLength\":16777216,"
    "\"description\":\"Text given as standard input\"},"
    "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1,"
    "\"description\":\"At most this long, in milliseconds\"}},"
    "\"required\":[\"argv\"],\"additionalProperties\":false}";

#if PL_WITH_CURL
static const char http_get_schema[] =
    "{\"type\":\"object\","
    "\"properties\":{\"url\":{\"type\":\"string\","
    "\"description\":\"The URL to fetch; only allowed hosts and schemes "
    "answer\",\"minLength\":1,\"maxLength\":8192}},"
    "\"required\":[\"url\"],\"additionalProperties\":false}";
#endif

/* ---- text ---------------------------------------------------------------- */

long long pl__text_len(const char *s, size_t len, bool cut, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        size_t n;
        uint32_t min;
        if (c == 0) {
            *bad = i;
            return -1;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            n = 2, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            n = 3, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 4, min = 0x10000;
        else {
            *bad = i;
            return -1;
        }
        if (i + n > len) {
            if (cut) { /* a character cut by the cap: check what is there */
                for (size_t k = i + 1; k < len; k++)
                    if ((p[k] & 0xc0) != 0x80) {
                        *bad = k;
                        return -1;
                    }
                return (long long)i;
            }
            *bad = i;
            return -1;
        }
        uint32_t cp = c & (0xff >> (n + 1));
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                *bad = i + k;
                return -1;
            }
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            *bad = i;
            return -1;
        }
        i += n;
    }
    return (long long)len;
}

/* ---- settings ------------------------------------------------------------ */

static void allow_free(pl__allow *a)
{
    free(a->scheme);
    free(a->host);
}

/* Parse an allow entry: "file://" or scheme://host[:port][/]. */
static int allow_parse(pl__allow *a, const char *entry, bool have_root)
{
    memset(a, 0, sizeof *a);
    a->port = -1;
    if (!entry)
        return pl__err(PL_EINVAL, "pl_tools_new: NULL allow entry");
    if (strcmp(entry, "file://") == 0) {
        if (!have_root)
            return pl__err(PL_EINVAL,
                           "pl_tools_new: allow entry 'file://' needs a root");
        a->file = true;
        return PL_OK;
    }
#if !PL_WITH_CURL
    return pl__err(PL_EINVAL,
                   "pl_tools_new: allow entry '%s' is for http_get, which is "
                   "absent: policyledger was built without libcurl "
                   "(PL_WITH_CURL=OFF)",
                   entry);
}
#else
    int st = PL_OK;
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL,
         *query = NULL, *user = NULL;
    if (!u)
        return pl__err(PL_ENOMEM, "pl_tools_new: out of memory");
    if (curl_url_set(u, CURLUPART_URL, entry, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        st = pl__err(PL_EINVAL, "pl_tools_new: allow entry '%s' is not a URL",
                     entry);
        goto done;
    }
    if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
        st = pl__err(PL_EINVAL,
                     "pl_tools_new: allow entry '%s': scheme '%s' is not "
                     "http, https or file",
                     entry, scheme);
        goto done;
    }
    curl_url_get(u, CURLUPART_PATH, &path, 0);
    curl_url_get(u, CURLUPART_QUERY, &query, 0);
    curl_url_get(u, CURLUPART_USER, &user, 0);
    if ((path && strcmp(path, "/") != 0) || query || user) {
        st = pl__err(PL_EINVAL,
                     "pl_tools_new: allow entry '%s' must be scheme://host "
                     "or scheme://host:port, nothing more",
                     entry);
        goto done;
    }
    if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK && port) {
        char *end;
        long v = strtol(port, &end, 10);
        if (*end || v <= 0 || v > 65535) {
            st = pl__err(PL_EINVAL, "pl_tools_new: allow entry '%s': bad port",
                         entry);
            goto done;
        }
        a->port = v;
    }
    a->scheme = pl__strdup(scheme);
    a->host = pl__strdup(host);
    if (!a->scheme || !a->host)
        st = pl__err(PL_ENOMEM, "pl_tools_new: out of memory");
done:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_free(user);
    curl_url_cleanup(u);
    if (st)
        allow_free(a);
    return st;
}
#endif /* PL_WITH_CURL */

int pl_tools_new(pl_tools **out, const pl_tools_options *opts)
{
    static const char *const loopback[] = {
        "http://127.0.0.1", "http://localhost", "http://[::1]", "file://"};
    if (out)
        *out = NULL;
    if (!out)
        return pl__err(PL_EINVAL, "pl_tools_new: NULL out");
    pl_tools_options o;
    if (pl__struct_in(&o, opts, &pl__tools_options_layout, "pl_tools_new"))
        return PL_EINVAL;
    opts = &o;
    size_t n_cmds = opts->n_commands + opts->n_path_commands;
    if ((opts->n_commands && !opts->commands) ||
        (opts->n_path_commands && !opts->path_commands) ||
        (opts->n_env && !opts->env))
        return pl__err(PL_EINVAL, "pl_tools_new: a count of commands or "
                                  "variables without its list");
    if (n_cmds && !opts->root)
        return pl__err(PL_EINVAL, "pl_tools_new: run_command's commands "
                                  "need a root to run in");
    if (opts->command_timeout_ms < 0 || opts->max_output_bytes > MAX_OUTPUT)
        return pl__err(PL_EINVAL,
                       "pl_tools_new: a negative command_timeout_ms, or "
                       "max_output_bytes past %d bytes",
                       MAX_OUTPUT);
    if (opts->command_in_doubt != PL_IN_DOUBT_RERUN &&
        opts->command_in_doubt != PL_IN_DOUBT_FAIL &&
        opts->command_in_doubt != PL_IN_DOUBT_SUSPEND)
        return pl__err(PL_EINVAL, "pl_tools_new: unknown command_in_doubt %d",
                       (int)opts->command_in_doubt);
    for (size_t i = 0; i < opts->n_env; i++)
        if (!opts->env[i] || !opts->env[i][0] || strchr(opts->env[i], '='))
            return pl__err(PL_EINVAL,
                           "pl_tools_new: environment variable name %zu is "
                           "NULL, empty or holds '='",
                           i);
    if (opts->connect_timeout_ms < 0 || opts->timeout_ms < 0 ||
        opts->max_redirects < -1)
        return pl__err(PL_EINVAL,
                       "pl_tools_new: negative timeout or max_redirects "
                       "below -1");
    if (opts->max_file_bytes > MAX_CAP || opts->max_body_bytes > MAX_CAP)
        return pl__err(PL_EINVAL,
                       "pl_tools_new: max_file_bytes and max_body_bytes may "
                       "be at most %d bytes",
                       MAX_CAP);
    if (opts->n_allow && !opts->allow)
        return pl__err(PL_EINVAL, "pl_tools_new: %zu allow entries, NULL list",
                       opts->n_allow);

    int st = PL_OK;
    pl_tools *t = calloc(1, sizeof *t);
    if (!t)
        return pl__err(PL_ENOMEM, "pl_tools_new: out of memory");
    t->max_file_bytes = opts->max_file_bytes ? opts->max_file_bytes
                                             : DEFAULT_CAP;
    t->max_body_bytes = opts->max_body_bytes ? opts->max_body_bytes
                                             : DEFAULT_CAP;
    t->connect_timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms
                                                     : DEFAULT_CONNECT_MS;
    t->timeout_ms = opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
    t->max_redirects = opts->max_redirects < 0 ? DEFAULT_REDIRECTS
                                               : opts->max_redirects;
#if PL_WITH_CURL
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        st = pl__err(PL_EIO, "pl_tools_new: libcurl cannot be initialised");
        goto done;
    }
    t->curl_ready = true;
#endif
    t->command_timeout_ms = opts->command_timeout_ms ? opts->command_timeout_ms
                                                     : DEFAULT_COMMAND_MS;
    t->max_output_bytes = opts->max_output_bytes ? opts->max_output_bytes
                                                 : DEFAULT_OUTPUT;
    t->command_idempotent = opts->command_idempotent;
    t->command_in_doubt = opts->command_in_doubt;
    t->commands = n_cmds > 0;
    if (opts->root) {
        pl_sandbox_options so = PL_SANDBOX_OPTIONS_INIT;
        so.commands = opts->commands;
        so.n_commands = opts->n_commands;
        so.path_commands = opts->path_commands;
        so.n_path_commands = opts->n_path_commands;
        st = pl_sandbox_new(&t->sb, opts->root, &so);
        if (st)
            goto done;
    }
    static const char *const default_env[] = {"PATH", "LANG", "LC_ALL", "TZ"};
    const char *const *env = opts->n_env ? opts->env : default_env;
    size_t n_env = opts->n_env ? opts->n_env : PL__ARRAY_LEN(default_env);
    if (!(t->env = calloc(n_env, sizeof *t->env))) {
        st = pl__err(PL_ENOMEM, "pl_tools_new: out of memory");
        goto done;
    }
    for (; t->n_env < n_env; t->n_env++)
        if (!(t->env[t->n_env] = pl__strdup(env[t->n_env]))) {
            st = pl__err(PL_ENOMEM, "pl_tools_new: out of memory");
            goto done;
        }
    const char *const *list = opts->allow;
    size_t n = opts->n_allow;
    if (!n) {
        list = loopback;
        n = opts->root ? PL__ARRAY_LEN(loopback) : PL__ARRAY_LEN(loopback) - 1;
#if !PL_WITH_CURL /* no http_get: file:// alone */
        list = loopback + PL__ARRAY_LEN(loopback) - 1;
        n = opts->root ? 1 : 0;
#endif
    }
    t->allow = n ? calloc(n, sizeof *t->allow) : NULL;
    if (n && !t->allow) {
        st = pl__err(PL_ENOMEM, "pl_tools_new: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        st = allow_parse(&t->allow[i], list[i], opts->root != NULL);
        if (st)
            goto done;
        t->n_allow++;
    }
done:
    if (st)
        pl_tools_free(t);
    else
        *out = t;
    return st;
}

void pl_tools_free(pl_tools *tools)
{
    if (!tools)
        return;
    for (size_t i = 0; i < tools->n_allow; i++)
        allow_free(&tools->allow[i]);
    free(tools->allow);
    for (size_t i = 0; i < tools->n_env; i++)
        free(tools->env[i]);
    free(tools->env);
    pl_sandbox_free(tools->sb);
#if PL_WITH_CURL
    if (tools->curl_ready)
        curl_global_cleanup();
#endif
    free(tools);
}

/* ---- registration -------------------------------------------------------- */

int pl_tools_register(pl_registry *reg, const pl_tools *tools)
{
    if (!reg || !tools)
        return pl__err(PL_EINVAL, "pl_tools_register: NULL %s",
                       !reg ? "registry" : "tools");
    pl_policy_def defs[4];
    size_t n = 0;

    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "calculator";
    d.fn = pl__tool_calculator;
    d.description = "Evaluate an arithmetic expression and return "
                    "{\"result\": number}.";
    d.input_schema = calculator_schema;
    d.code_version = "policyledger/calculator/1";
    defs[n++] = d;

#if PL_WITH_CURL /* else absent: pl_tools_new() says why */
    d.name = "http_get";
    d.fn = pl__tool_http_get;
    d.user = (void *)tools;
    d.description = "Fetch a URL with HTTP GET and return its status, "
                    "content type and body (text, cut at a size cap). Only "
                    "allowed hosts answer.";
    d.input_schema = http_get_schema;
    d.code_version = "policyledger/http_get/1";
    defs[n++] = d;
#endif

    if (tools->sb) {
        d.name = "read_file";
        d.fn = pl__tool_read_file;
        d.user = (void *)tools;
        d.description = "Read a UTF-8 text file under the working directory "
                        "and return its content (cut at a size cap).";
        d.input_schema = read_file_schema;
        d.code_version = "policyledger/read_file/1";
        defs[n++] = d;
    }
    if (tools->sb && tools->commands) {
        d.name = "run_command";
        d.fn = pl__tool_run_command;
        d.user = (void *)tools;
        d.description = "Run an allowed program (an argument vector, no "
                        "shell) in the working directory and return its "
                        "exit status and output (cut at a size cap).";
        d.input_schema = run_command_schema;
        d.code_version = "policyledger/run_command/1";
        d.idempotent = tools->command_idempotent;
        d.in_doubt = tools->command_in_doubt;
        defs[n++] = d;
    }
    /* All or none: a taken name is refused before any is added, and the
     * ones added before a later failure (out of memory) are taken back,
     * since the caller frees @p tools, which they point to */
    for (size_t i = 0; i < n; i++)
        if (pl_registry_find(reg, defs[i].name))
            return pl__err(PL_EEXIST,
                           "pl_tools_register: policy '%s' is registered "
                           "already",
                           defs[i].name);
    size_t before = pl_registry_count(reg);
    for (size_t i = 0; i < n; i++) {
        int st = pl_registry_add(reg, &defs[i]);
        if (st) {
            pl__registry_truncate(reg, before);
            return st;
        }
    }
    return PL_OK;
}
