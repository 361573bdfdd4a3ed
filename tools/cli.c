/*
 * cli.c -- what the command-line tools share (see cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *g_name = "policyledger";

void cli_set_name(const char *argv0)
{
    /* a store or a file growing past the file size limit (ulimit -f) is
     * a write that fails with EFBIG, said as any failed write, not a
     * SIGXFSZ that kills the tool without a word */
    signal(SIGXFSZ, SIG_IGN);
    if (!argv0 || !*argv0)
        return;
    const char *slash = strrchr(argv0, '/');
    g_name = slash ? slash + 1 : argv0;
}

const char *cli_name(void) { return g_name; }

/* The longest message cli_error() prints, before "... (N bytes)". */
#define MESSAGE_MAX 1024

/* The first message said since cli_keep_first_error(true), as said. */
static bool g_keep;
static char g_first[MESSAGE_MAX * 4 + 32];

void cli_keep_first_error(bool on)
{
    g_keep = on;
    g_first[0] = '\0';
}

const char *cli_first_error(void) { return g_first[0] ? g_first : NULL; }

void cli_error(const char *fmt, ...)
{
    char small[MESSAGE_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    /* one line whatever it holds: a library's line breaks (libpq's
     * "\n\t") become spaces, any other control character an escape, and a
     * long message is cut */
    size_t len = strlen(small);
    if ((size_t)n > len) { /* cut before a character, not inside one */
        while (len && ((unsigned char)small[len - 1] & 0xc0) == 0x80)
            len--;
        if (len && (unsigned char)small[len - 1] >= 0xc0)
            len--;
    }
    /* a byte becomes at most 4 ("\x1f"; two, "\u009f"): it fits */
    char line[sizeof g_first], esc[8];
    size_t o = 0, used;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)small[i];
        if (c == '\n' || c == '\r' || c == '\t') {
            while (i + 1 < len &&
                   (small[i + 1] == '\n' || small[i + 1] == '\r' ||
                    small[i + 1] == '\t' || small[i + 1] == ' '))
                i++;
            if (i + 1 < len)
                line[o++] = ' ';
        } else if ((used = cli_control_escape(esc, small + i))) {
            memcpy(line + o, esc, strlen(esc));
            o += strlen(esc);
            i += used - 1;
        } else {
            line[o++] = (char)c;
        }
    }
    if ((size_t)n > len)
        o += (size_t)snprintf(line + o, sizeof line - o, "... (%d bytes)", n);
    line[o] = '\0';
    /* the line is written whole: the threads of a server may each say
     * something at the same moment */
    flockfile(stderr);
    fprintf(stderr, "%s: %s\n", g_name, line);
    if (g_keep && !g_first[0])
        memcpy(g_first, line, o + 1);
    funlockfile(stderr);
}

bool cli_option(int argc, char **argv, int *i, const char *name,
                const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return false;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return true;
    }
    if (arg[n] != '\0')
        return false;
    if (*i + 1 >= argc) {
        cli_error("%s needs a value", name);
        *value = NULL;
        return true;
    }
    *value = argv[++*i];
    return true;
}

bool cli_once(cli_seen *seen, const char *arg, const char *const *one)
{
    size_t len = strcspn(arg, "=");
    for (; one && *one; one++)
        if (strlen(*one) == len && !strncmp(arg, *one, len))
            break;
    if (one && !*one)
        return true; /* not an option of one value */
    for (size_t i = 0; i < seen->n; i++)
        if (strcspn(seen->names[i], "=") == len &&
            !strncmp(seen->names[i], arg, len)) {
            cli_error("%.*s is given twice: it takes one value", (int)len, arg);
            return false;
        }
    if (seen->n < sizeof seen->names / sizeof seen->names[0])
        seen->names[seen->n++] = arg;
    return true;
}

void cli_hex(char *out, const uint8_t *b, size_t len)
{
    static const char digits_hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits_hex[b[i] >> 4];
        out[2 * i + 1] = digits_hex[b[i] & 15];
    }
    out[2 * len] = '\0';
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Whether the URI parameter name @p p (@p n bytes, percent-encoded as
 * libpq decodes it) names a password: password, sslpassword. */
static bool secret_name(const char *p, size_t n)
{
    char name[16];
    size_t k = 0;
    for (size_t i = 0; i < n; i++, k++) {
        if (k + 1 >= sizeof name)
            return false;
        int hi = p[i] == '%' && i + 2 < n ? hex_digit(p[i + 1]) : -1;
        int lo = hi >= 0 ? hex_digit(p[i + 2]) : -1;
        name[k] = lo >= 0 ? (char)(hi << 4 | lo) : p[i];
        i += lo >= 0 ? 2 : 0;
    }
    name[k] = '\0';
    return !strcmp(name, "password") || !strcmp(name, "sslpassword");
}

/* @p uri with its password (user part, password= parameters) as "***":
 * each replaced value grows by at most 3 bytes, and there are fewer of
 * them than bytes. */
static char *mask_password(const char *uri)
{
    size_t len = strlen(uri);
    char *out = malloc(4 * len + 4);
    if (!out)
        return NULL;
    const char *host = strstr(uri, "://") + 3;
    size_t hostpart = strcspn(host, "/?");
    const char *at = memchr(host, '@', hostpart);
    const char *colon = at ? memchr(host, ':', (size_t)(at - host)) : NULL;
    size_t o = 0;
    const char *p = uri;
    if (colon) { /* user:PASSWORD@host */
        o = (size_t)(colon + 1 - uri);
        memcpy(out, uri, o);
        memcpy(out + o, "***", 3);
        o += 3;
        p = at;
    }
    size_t head = strcspn(p, "?");
    memcpy(out + o, p, head);
    o += head;
    p += head;
    while (*p) { /* at '?' or '&': the separator, then one parameter */
        out[o++] = *p++;
        size_t n = strcspn(p, "&"), name = strcspn(p, "=&");
        bool secret = p[name] == '=' && secret_name(p, name);
        memcpy(out + o, p, secret ? name + 1 : n);
        o += secret ? name + 1 : n;
        if (secret) {
            memcpy(out + o, "***", 3);
            o += 3;
        }
        p += n;
    }
    out[o] = '\0';
    return out;
}

const char *cli_store_shown(const char *path)
{
    static const char *given;
    static char *shown;
    if (!path)
        return "(null)";
    if (path == given && shown)
        return shown;
    if (strncmp(path, "postgresql://", 13) && strncmp(path, "postgres://", 11))
        return path;
    char *m = mask_password(path);
    if (!m)
        return "(the store)"; /* out of memory: never the URI */
    free(shown);
    shown = m;
    given = path;
    return shown;
}

bool cli_run_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (!n || n > PL_MAX_RUN_ID)
        return false;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || strchr("._:@~-", *p)))
            return false;
    return true;
}

bool cli_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > PL_MAX_NAME)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

/*
 * A link's successor by the engine's rule for the ids of a chain
 * (docs/design.md §12.2): "<id>~1" after "<id>", "<base>~<n+1>"
 * after "<base>~<n>" (n from 1, no leading zero, under 10^12).  This is
 * how the successor of a deleted link is found: a tombstone keeps its
 * status, not its links.  false when the id would be too long.
 */
bool cli_chain_next_id(char *out, const char *id)
{
    const char *tilde = strrchr(id, '~');
    size_t base = strlen(id);
    unsigned long long n = 0;
    if (tilde && tilde[1] >= '1' && tilde[1] <= '9') {
        char *end;
        unsigned long long v = strtoull(tilde + 1, &end, 10);
        if (!*end && v < 1000000000000ull) {
            base = (size_t)(tilde - id);
            n = v;
        }
    }
    int w = snprintf(out, PL_MAX_RUN_ID + 1, "%.*s~%llu", (int)base, id, n + 1);
    return w > 0 && w <= PL_MAX_RUN_ID;
}

/* The one id whose successor @p id is by that rule ("" if none). */
void cli_chain_prev_id(char *out, const char *id)
{
    const char *tilde = strrchr(id, '~');
    char back[PL_MAX_RUN_ID + 1];
    out[0] = '\0';
    if (!tilde || tilde == id || tilde[1] < '1' || tilde[1] > '9')
        return;
    unsigned long long n = strtoull(tilde + 1, NULL, 10);
    if (n == 1)
        snprintf(out, PL_MAX_RUN_ID + 1, "%.*s", (int)(tilde - id), id);
    else
        snprintf(out, PL_MAX_RUN_ID + 1, "%.*s~%llu", (int)(tilde - id), id,
                 n - 1);
    if (!cli_chain_next_id(back, out) || strcmp(back, id))
        out[0] = '\0';
}

bool cli_chain_link(pl_engine *e, char *cur, pl_tombstone *end)
{
    for (int hops = 0; hops < 1000; hops++) {
        pl_run_info *ri = NULL;
        int st = pl_run_get(&ri, e, cur);
        pl_run_info_free(ri);
        pl_tombstone tomb = PL_TOMBSTONE_INIT;
        char next[PL_MAX_RUN_ID + 1];
        if (st != PL_ENOTFOUND || pl_run_tombstone(&tomb, e, cur) ||
            tomb.expires_us <= cli_now_us())
            return true;
        if (tomb.status != PL_RUN_CONTINUED) {
            *end = tomb;
            return false;
        }
        if (!cli_chain_next_id(next, cur))
            return true;
        memcpy(cur, next, sizeof next);
    }
    return true;
}

char *cli_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *cli_json_compact(const cJSON *item) { return pl_json_print(item, false); }

void cli_shorten(char *text, size_t max)
{
    size_t n = strlen(text);
    if (n <= max)
        return;
    size_t cut = max - 3;
    while (cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80)
        cut--; /* not inside a UTF-8 sequence */
    memcpy(text + cut, "...", 4);
}

cJSON *cli_json_add_int(cJSON *o, const char *name, int64_t v)
{
    char digits[24];
    snprintf(digits, sizeof digits, "%lld", (long long)v);
    return cJSON_AddRawToObject(o, name, digits);
}

bool cli_json_times_as_digits(cJSON *o)
{
    cJSON *m = o ? o->child : NULL;
    while (m) {
        cJSON *next = m->next;
        size_t n = m->string ? strlen(m->string) : 0;
        /* in int64's range only (a damaged record's time stays a number:
         * its cast would be undefined) */
        if (cJSON_IsNumber(m) && n > 3 && !strcmp(m->string + n - 3, "_us") &&
            m->valuedouble >= -9.2e18 && m->valuedouble <= 9.2e18) {
            char digits[24];
            snprintf(digits, sizeof digits, "%lld", (long long)m->valuedouble);
            cJSON *raw = cJSON_CreateRaw(digits);
            if (!raw ||
                !cJSON_ReplaceItemInObjectCaseSensitive(o, m->string, raw)) {
                cJSON_Delete(raw);
                return false;
            }
        }
        m = next;
    }
    return true;
}

int64_t cli_json_int_of(const cJSON *o, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, name);
    if (cJSON_IsNumber(m)) /* in range first: the cast of any other is UB */
        return m->valuedouble >= -9.2e18 && m->valuedouble <= 9.2e18
                   ? (int64_t)m->valuedouble
                   : 0;
    return cJSON_IsRaw(m) && m->valuestring ? strtoll(m->valuestring, NULL, 10)
                                            : 0;
}

bool cli_stdout_ok(void)
{
    errno = 0;
    bool flushed = fflush(stdout) == 0;
    int err = errno;
    if (flushed && !ferror(stdout))
        return true;
    cli_error("cannot write the output: %s",
              err ? strerror(err) : "a write to it failed");
    return false;
}

bool cli_json_line(FILE *f, const cJSON *item)
{
    char *s = cli_json_safe(pl_json_print(item, false));
    if (!s)
        return false;
    fputs(s, f);
    fputc('\n', f);
    free(s);
    return true;
}

bool cli_json_document(FILE *f, const cJSON *item)
{
    char *s = cli_json_safe(pl_json_print(item, true));
    if (!s)
        return false;
    fputs(s, f);
    fputc('\n', f);
    free(s);
    return true;
}

/* ---- a plugin that crashes while it loads ---------------------------------- */

/* A plugin is trusted code run in-process: one that dies in its
 * constructors or pl_plugin_init takes the tool down, but with a line that
 * names it, written (async-signal-safely) by this handler, and exit 2. */
static char g_crash_line[512];
static size_t g_crash_len;

static void on_plugin_crash(int sig)
{
    static const char *const names[] = {[SIGSEGV] = "SIGSEGV",
                                        [SIGBUS] = "SIGBUS",
                                        [SIGILL] = "SIGILL",
                                        [SIGFPE] = "SIGFPE",
                                        [SIGABRT] = "SIGABRT"};
    const char *name = sig < (int)(sizeof names / sizeof names[0]) && names[sig]
                           ? names[sig]
                           : "a signal";
    ssize_t w = write(STDERR_FILENO, g_crash_line, g_crash_len);
    w = write(STDERR_FILENO, name, strlen(name));
    w = write(STDERR_FILENO, ")\n", 2);
    (void)w;
    _exit(CLI_EXIT_STORE);
}

/* Catch the signals of a crash while @p path loads; NULL: stop. */
static void guard_plugin(const char *path)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    static struct sigaction old[sizeof sigs / sizeof sigs[0]];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_plugin_crash;
    sa.sa_flags = (int)SA_RESETHAND;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        if (path)
            sigaction(sigs[i], &sa, &old[i]);
        else
            sigaction(sigs[i], &old[i], NULL);
    }
    if (path) {
        int n = snprintf(g_crash_line, sizeof g_crash_line,
                         "%s: the plugin %s crashed while loading (in its "
                         "constructors or pl_plugin_init): nothing was "
                         "opened or written (",
                         cli_name(), QUOTE(path));
        g_crash_len = n < 0 ? 0
                      : (size_t)n < sizeof g_crash_line
                          ? (size_t)n
                          : sizeof g_crash_line - 1;
    }
}

int cli_plugin_load(pl_registry *reg, const char *path)
{
    guard_plugin(path);
    int st = pl_plugin_load(reg, path);
    guard_plugin(NULL);
    return st;
}

bool cli_open_store(pl_engine **engine, pl_registry **registry,
                    const char *path)
{
    *engine = NULL;
    *registry = NULL;
    int st = pl_registry_new(registry);
    if (st) {
        cli_error("%s", pl_errmsg());
        return false;
    }
    pl_engine_options opts = PL_ENGINE_OPTIONS_INIT;
    opts.read_only = true;
    st = pl_engine_open(engine, path, *registry, &opts);
    if (st) {
        char q[CLI_QUOTE_MAX];
        cli_error("cannot open store %s: %s",
                  cli_quote(q, sizeof q, cli_store_shown(path)), pl_errmsg());
        pl_registry_free(*registry);
        *registry = NULL;
        return false;
    }
    return true;
}

typedef struct runs_each {
    pl_run_visit_fn visit;
    cli_damaged_fn damaged;
    void *user;
} runs_each;

static int each_visit(const pl_run_info *ri, void *user)
{
    runs_each *x = user;
    return x->visit(ri, x->user);
}

static int each_damaged(const char *id, int st, const char *why, void *user)
{
    (void)st;
    runs_each *x = user;
    return x->damaged(id, why, x->user);
}

int cli_runs_each(pl_engine *e, const pl_runs_options *from,
                  pl_run_visit_fn visit, cli_damaged_fn damaged, void *user)
{
    runs_each x = {visit, damaged, user};
    pl_runs_options ro = PL_RUNS_OPTIONS_INIT;
    if (from)
        ro = *from;
    ro.version = PL_RUNS_OPTIONS_VERSION;
    ro.damaged = each_damaged;
    return pl_engine_runs_from(e, &ro, each_visit, &x);
}

bool cli_say_deleted(pl_engine *e, const char *id)
{
    pl_tombstone t = PL_TOMBSTONE_INIT;
    if (pl_run_tombstone(&t, e, id))
        return false;
    char del[40], exp[40], head[2 * PL_HASH_LEN + 1] = "none";
    cli_time_iso(del, sizeof del, t.deleted_us, false);
    cli_time_iso(exp, sizeof exp, t.expires_us, false);
    if (t.has_head)
        cli_hex(head, t.head, PL_HASH_LEN);
    /* past its time (a prune removes it): the id is a new run's */
    bool gone = t.expires_us <= cli_now_us();
    cli_error("run %s was deleted on %s: it was %s (policy %s, head %s); "
              "its tombstone %s the id until %s%s",
              QUOTE(id), del, pl_run_status_name(t.status), t.policy, head,
              gone ? "kept" : "keeps", exp,
              gone ? ": the id is free again" : "");
    return true;
}

void cli_close_store(pl_engine *engine, pl_registry *registry)
{
    pl_engine_close(engine);
    pl_registry_free(registry);
}

/* ---- input ---------------------------------------------------------------- */

/*
 * Read a whole file ("-" for stdin) of at most @p max bytes, NUL-terminated.
 * Returns NULL (and says why on stderr) on any failure, a file holding a
 * NUL byte among them (its text would end there).  Caller frees.
 */
char *cli_read_all(const char *path, size_t max)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        int err = errno;
        cli_error("cannot open %s: %s", QUOTE(path), strerror(err));
        return NULL;
    }
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap), *nul = NULL;
    while (buf) {
        if (cap - len < 2) {
            char *grown = cap > max ? NULL : realloc(buf, cap * 2);
            if (!grown) {
                if (cap > max)
                    cli_error("%s is larger than %zu bytes", QUOTE(path), max);
                else
                    cli_error("out of memory reading %s", QUOTE(path));
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                int err = errno;
                cli_error("cannot read %s: %s", QUOTE(path), strerror(err));
                free(buf);
                buf = NULL;
            } else if ((nul = memchr(buf, '\0', len))) {
                /* the text would end there, the rest of it unread */
                cli_error("%s holds a NUL byte (at byte %zu): it must be "
                          "text",
                          QUOTE(path), (size_t)(nul - buf));
                free(buf);
                buf = NULL;
            } else {
                buf[len] = '\0';
            }
            break;
        }
    }
    if (f != stdin)
        fclose(f);
    return buf;
}

/*
 * Parse @p text as one JSON object.  On failure says what is wrong (and
 * where) on stderr, naming @p what, and returns NULL.  Caller frees.
 */
cJSON *cli_parse_object(const char *text, const char *what)
{
    /* a string cJSON would cut at a NUL is refused, naming it */
    cJSON *v = NULL;
    if (pl_json_parse(&v, text, strlen(text))) {
        cli_error("%s: %s", what, pl_errmsg());
        return NULL;
    }
    if (!cJSON_IsObject(v)) {
        cli_error("%s must be a JSON object, like {\"approved\": true}", what);
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* see cli.h */

bool cli_json_string_or_null(cJSON *o, const char *key, const char *v)
{
    return v && *v ? cJSON_AddStringToObject(o, key, v) != NULL
                   : cJSON_AddNullToObject(o, key) != NULL;
}

void cli_json_schedule(cJSON *s)
{
    const char *last = cJSON_GetStringValue(cJSON_GetObjectItem(s, "last_run"));
    if (last && !*last)
        cJSON_ReplaceItemInObjectCaseSensitive(s, "last_run",
                                               cJSON_CreateNull());
    const char *key = cJSON_GetStringValue(
        cJSON_GetObjectItem(s, "concurrency_key"));
    if (key && !*key)
        cJSON_ReplaceItemInObjectCaseSensitive(s, "concurrency_key",
                                               cJSON_CreateNull());
}
