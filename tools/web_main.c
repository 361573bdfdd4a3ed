/*
 * ledger-web -- a web view of a store, and its operators' actions, on the
 * public API.
 *
 *   ledger-web STORE [--plugin LIB.so ...] [--listen HOST:PORT]
 *              [--read-only] [--token-file FILE] [--stall-timeout S]
 *
 * Serves the page (tools/web/, embedded at build time) and its JSON API
 * (docs/tools.md) until SIGINT or SIGTERM.  Binds to loopback unless told
 * otherwise; any other address needs a token (--token-file, or the
 * PL_WEB_TOKEN environment variable).
 *
 * Exit status: 0 stopped by a signal (or --help); 1 bad flags or values;
 * 2 the store cannot be opened, a plugin cannot be loaded, or the address
 * cannot be bound.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "web.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ledger-web STORE [--plugin LIB.so ...] [--listen HOST:PORT]\n"
        "                  [--read-only] [--token-file FILE]\n"
        "                  [--stall-timeout SECONDS]\n"
        "\n"
        "Serve a web view of STORE (an LMDB store or a postgresql:// URI):\n"
        "its runs, each run's steps and timeline, an overview, the inbox of\n"
        "runs waiting for an answer, and the operators' actions (answer,\n"
        "continue, fork, upgrade, check, verify, signal, cancel, delete;\n"
        "continue, cancel and delete in batches), with the JSON API under\n"
        "/api/ that the page uses (docs/tools.md).\n"
        "\n"
        "  --plugin LIB.so     load a plugin's policies (repeatable): what\n"
        "                      continuing, answering and checking runs need\n"
        "  --listen HOST:PORT  the address to serve on, HOST an IP address\n"
        "                      or localhost (default 127.0.0.1:8080; port 0\n"
        "                      picks a free one).  An address other than\n"
        "                      loopback needs a token\n"
        "  --read-only         open the store read-only, as ledger-dump does:\n"
        "                      every action but verify is refused (403)\n"
        "  --token-file FILE   the token every request must carry (%d..%d\n"
        "                      bytes; the first line of FILE); else the\n"
        "                      environment variable PL_WEB_TOKEN.  Open\n"
        "                      /login?token=TOKEN once in the browser, or\n"
        "                      send 'Authorization: Bearer TOKEN'\n"
        "  --stall-timeout S   close an answer or event stream whose client\n"
        "                      has taken none of it for S seconds (1..%d;\n"
        "                      default %d)\n"
        "  -h, --help          this text\n"
        "\n"
        "Prints the URL to open, then serves until interrupted.  Exports\n"
        "are written to unnamed files in $TMPDIR (else /tmp).\n"
        "\n"
        "Exit status: 0 stopped (SIGINT, SIGTERM); 1 bad flags or values;\n"
        "2 the store cannot be opened, a plugin cannot be loaded, or the\n"
        "address cannot be used.\n",
        WEB_TOKEN_MIN, WEB_TOKEN_MAX, WEB_STALL_MAX, WEB_STALL_S);
}

typedef struct args {
    const char *store;
    const char **plugins;
    size_t n_plugins;
    const char *listen;
    const char *token_file;
    bool read_only;
    unsigned stall_s;
} args;

/* 0, -1 (--help: exit 0), or the exit status. */
static int parse_args(args *a, int argc, char **argv)
{
    a->listen = "127.0.0.1:8080";
    a->stall_s = WEB_STALL_S;
    a->plugins = calloc((size_t)argc, sizeof *a->plugins);
    if (!a->plugins) {
        cli_error("out of memory");
        return CLI_EXIT_USAGE;
    }
    static const char *const one[] = {"--listen", "--token-file",
                                      "--stall-timeout", NULL};
    cli_seen seen = {0};
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!cli_once(&seen, argv[i], one))
            return CLI_EXIT_USAGE;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout); /* a help lost to a full disk says so */
            return cli_stdout_ok() ? -1 : CLI_EXIT_STORE;
        } else if (cli_option(argc, argv, &i, "--plugin", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            a->plugins[a->n_plugins++] = v;
        } else if (cli_option(argc, argv, &i, "--listen", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            a->listen = v;
        } else if (cli_option(argc, argv, &i, "--token-file", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            a->token_file = v;
        } else if (cli_option(argc, argv, &i, "--stall-timeout", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            char *end;
            errno = 0;
            unsigned long n = strtoul(v, &end, 10);
            if (v[0] < '0' || v[0] > '9' || *end || errno || n < 1 ||
                n > WEB_STALL_MAX) {
                cli_error("--stall-timeout %s: seconds, 1..%d", QUOTE(v),
                          WEB_STALL_MAX);
                return CLI_EXIT_USAGE;
            }
            a->stall_s = (unsigned)n;
        } else if (!strcmp(argv[i], "--read-only")) {
            a->read_only = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_error("unknown option %s (see --help)", QUOTE(argv[i]));
            return CLI_EXIT_USAGE;
        } else if (a->store) {
            cli_error("one store only: %s and %s",
                      QUOTE(cli_store_shown(a->store)), QUOTE(argv[i]));
            return CLI_EXIT_USAGE;
        } else {
            a->store = argv[i];
        }
    }
    if (!a->store) {
        cli_error("no store given (see --help)");
        return CLI_EXIT_USAGE;
    }
    if (!*a->store) {
        cli_error("the store path is empty");
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* Split "HOST:PORT" ("[::1]:8080" for IPv6) into @p host and *port. */
static bool parse_listen(const char *text, char *host, size_t n, unsigned *port)
{
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text)
        return false;
    const char *h = text, *he = colon;
    if (*h == '[') {
        if (he[-1] != ']')
            return false;
        h++;
        he--;
    }
    if ((size_t)(he - h) >= n || he == h)
        return false;
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    /* digits only: strtoul would take " 80", "+80" and "-0" */
    if (colon[1] < '0' || colon[1] > '9' || errno || *end || p > 65535)
        return false;
    *port = (unsigned)p;
    return true;
}

/* An address web_http_start() can bind: an IP address, or localhost. */
static bool is_address(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    return !strcmp(host, "localhost") || inet_pton(AF_INET, host, &a4) == 1 ||
           inet_pton(AF_INET6, host, &a6) == 1;
}

static bool is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (!strcmp(host, "localhost"))
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

/* The token from --token-file or PL_WEB_TOKEN; *token NULL when neither.
 * False (said why) for a token that cannot be read or is too short. */
static bool read_token(const args *a, char **token)
{
    *token = NULL;
    char *text = NULL;
    const char *src = getenv("PL_WEB_TOKEN");
    if (a->token_file) {
        if (!(text = cli_read_all(a->token_file, WEB_TOKEN_MAX)))
            return false;
        text[strcspn(text, "\r\n")] = '\0';
        src = text;
    }
    if (!src || !src[0]) {
        free(text);
        if (a->token_file) {
            cli_error("the token file %s is empty", QUOTE(a->token_file));
            return false;
        }
        return true;
    }
    /* the login's cookie holds it whole, with HttpOnly and SameSite
     * after it: a header cut to fit would lose them, or the token */
    size_t len = strlen(src);
    if (len < WEB_TOKEN_MIN || len > WEB_TOKEN_MAX) {
        cli_error("the token (%s) is too %s: %d..%d bytes",
                  a->token_file ? "--token-file" : "PL_WEB_TOKEN",
                  len < WEB_TOKEN_MIN ? "short" : "long", WEB_TOKEN_MIN,
                  WEB_TOKEN_MAX);
        free(text);
        return false;
    }
    for (const char *p = src; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == ';' || *p == ',' ||
            (unsigned char)*p >= 0x7f) {
            cli_error("the token may hold printable ASCII only, without "
                      "spaces, ';' or ','");
            free(text);
            return false;
        }
    *token = cli_strdup(src);
    free(text);
    if (!*token)
        cli_error("out of memory");
    return *token != NULL;
}

static bool make_csrf(web *w)
{
    unsigned char raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        cli_error("cannot read random bytes: %s", strerror(errno));
        return false;
    }
    cli_hex(w->csrf, raw, sizeof raw);
    return true;
}

static int open_store(web *w, const args *a)
{
    if (a->read_only) {
        if (a->n_plugins)
            cli_error("note: --plugin with --read-only: no action runs, so "
                      "the plugins are not loaded");
        return cli_open_store(&w->engine, &w->reg, a->store) ? CLI_EXIT_OK
                                                             : CLI_EXIT_STORE;
    }
    int st = pl_registry_new(&w->reg);
    for (size_t i = 0; !st && i < a->n_plugins; i++) {
        st = cli_plugin_load(w->reg, a->plugins[i]);
        if (st) {
            cli_error("cannot load plugin: %s (%s)", pl_errmsg(),
                      pl_status_name(st));
            return CLI_EXIT_STORE;
        }
    }
    if (st) {
        cli_error("%s", pl_errmsg());
        return CLI_EXIT_STORE;
    }
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.no_create = true;
    o.on_event = web_on_event;
    o.event_user = w;
    st = pl_engine_open(&w->engine, a->store, w->reg, &o);
    if (st) {
        cli_error("cannot open store %s: %s", QUOTE(w->store), pl_errmsg());
        if (st == PL_EACCES)
            cli_error("to only look at it, add --read-only");
        return CLI_EXIT_STORE;
    }
    return CLI_EXIT_OK;
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

int main(int argc, char **argv)
{
    cli_set_name(argv[0]);
    args a;
    memset(&a, 0, sizeof a);
    web w;
    memset(&w, 0, sizeof w);
    char host[128];
    unsigned port = 0;
    int rc = parse_args(&a, argc, argv);
    if (rc)
        goto done;
    if (!parse_listen(a.listen, host, sizeof host, &port)) {
        cli_error("--listen %s: expected HOST:PORT (127.0.0.1:8080, "
                  "[::1]:8080, 0.0.0.0:8080)",
                  QUOTE(a.listen));
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    if (!is_address(host)) { /* a bad value, said before the store opens */
        cli_error("--listen %s: HOST is an IP address (127.0.0.1, ::1, "
                  "0.0.0.0) or localhost, not a name to look up",
                  QUOTE(a.listen));
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    if (!read_token(&a, &w.token)) {
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    w.loopback = is_loopback(host);
    if (!w.loopback && !w.token) {
        cli_error("refusing to serve on %s without a token: anyone who can "
                  "reach it could read every run%s.  Give --token-file FILE "
                  "(or PL_WEB_TOKEN), or listen on 127.0.0.1",
                  QUOTE(a.listen), a.read_only ? "" : " and act on it");
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    if (!make_csrf(&w)) {
        rc = CLI_EXIT_STORE;
        goto done;
    }
    /* SIGINT and SIGTERM are blocked in every thread (the server's
     * inherit the mask) and taken by the main thread's sigsuspend() */
    sigset_t stop, orig;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &orig);
    sigdelset(&orig, SIGINT);
    sigdelset(&orig, SIGTERM);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    w.store = cli_store_shown(
        a.store); /* no password in a message or an answer */
    w.read_only = a.read_only;
    w.stall_s = a.stall_s;
    w.tmp_dir = getenv("TMPDIR");
    if (!w.tmp_dir || !w.tmp_dir[0])
        w.tmp_dir = "/tmp";
    if ((rc = open_store(&w, &a)))
        goto done;
    if (!web_live_start(&w)) {
        rc = CLI_EXIT_STORE;
        goto done;
    }
    if (!web_http_start(&w, host, port)) {
        rc = CLI_EXIT_STORE;
        goto done;
    }
    printf("ledger-web: serving %s%s on %s\n", cli_text(w.store),
           w.read_only ? " (read-only)" : "", w.url);
    if (w.token)
        printf("ledger-web: log in once at %s/login?token=... (the token "
               "given)\n",
               w.url);
    fflush(stdout);
    while (!stop_signal)
        sigsuspend(&orig);
    fprintf(stderr, "ledger-web: stopping (signal %d)\n", (int)stop_signal);
    rc = CLI_EXIT_OK;
done:
    web_http_stop(&w);
    web_live_stop(&w);
    if (w.engine || w.reg)
        cli_close_store(w.engine, w.reg);
    free(w.token);
    free(a.plugins);
    return rc < 0 ? 0 : rc;
}
