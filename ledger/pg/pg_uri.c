/*
 * pg_uri.c -- the PostgreSQL store's URI: checked, its password kept out
 * of every message, and split into what libpq reads and what we do.
 *
 * postgresql://[user[:password]@][host][:port][/dbname][?param=value&...]
 * (or postgres://), as libpq reads it, plus our `schema=NAME` ([a-z_][a-z0-9_]*
 * up to 63 bytes, no pg_; default `policyledger`) and `answer_timeout_ms=N`
 * (how long a statement waits for the server's answer, pg_wait.c: 1 to
 * 86,400,000; absent, 30,000; anything else, 0 included, PL_EINVAL), cut
 * before libpq sees them.  libpq's connect_timeout is 30 s unless the URI
 * sets it.
 *
 * A password in it (the user part's, a password= or sslpassword=
 * parameter's, the parameter's name percent-encoded or not, as libpq
 * decodes it) is never shown: the store's name in messages (s->path) has
 * it as "***", and a libpq message about a URI that holds one is cut
 * before the part of the URI it quotes.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool schema_ok(const char *p, size_t n) /* see the top */
{
    if (!n || n > SCHEMA_MAX || (p[0] >= '0' && p[0] <= '9') ||
        !strncmp(p, "pg_", 3)) /* pg_catalog, pg_temp, ... */
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
              p[i] == '_'))
            return false;
    return true;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Whether the URI parameter @p p (its name percent-encoded, as libpq
 * decodes it) is a password's: password=, sslpassword=. */
static bool secret_param(const char *p)
{
    char name[16];
    size_t k = 0;
    for (; *p && *p != '=' && *p != '&'; p++, k++) {
        int hi, lo;
        if (k + 1 >= sizeof name)
            return false;
        if (*p == '%' && (hi = hex_digit(p[1])) >= 0 &&
            (lo = hex_digit(p[2])) >= 0) {
            name[k] = (char)(hi << 4 | lo);
            p += 2;
        } else {
            name[k] = *p;
        }
    }
    name[k] = '\0';
    return *p == '=' &&
           (!strcmp(name, "password") || !strcmp(name, "sslpassword"));
}

/* The URI for messages: its password, if any (the user part's, a
 * password= or sslpassword= parameter's), shown as "***". */
static char *masked(const char *uri)
{
    const char *user = strstr(uri, "://");
    user = user ? user + 3 : uri;
    size_t hostpart = strcspn(user, "/?");
    const char *at = memchr(user, '@', hostpart);
    const char *colon = at ? memchr(user, ':', (size_t)(at - user)) : NULL;
    char *m = colon ? pl__asprintf("%.*s***%s", (int)(colon + 1 - uri), uri, at)
                    : pl__strdup(uri);
    for (char *p = m ? strchr(m, '?') : NULL; p; p = strchr(p + 1, '&'))
        if (secret_param(p + 1)) { /* its value: at most "***" */
            char *v = strchr(p + 1, '=') + 1;
            size_t n = strcspn(v, "&"), k = n < 3 ? n : 3;
            memset(v, '*', k);
            memmove(v + k, v + n, strlen(v + n) + 1);
        }
    return m;
}

/* Where check_options() points libpq: a socket under a file, which no
 * system has, so that its connection fails at once, no packet sent. */
#define NOWHERE "/dev/null/policyledger"

/*
 * The values of the URI's libpq options (sslmode=bogus, a port or
 * hostaddr list that does not match its hosts, a service not defined), which
 * PQconninfoParse() does not check, checked as libpq checks them before
 * it connects, without connecting: a ping of the same options with every
 * host NOWHERE (hostaddr dropped, the host list as long as the URI's) is
 * PQPING_NO_ATTEMPT only when libpq refused the options themselves, and
 * then a start of that connection says why.  A bad value is the caller's
 * error (PL_EINVAL with libpq's reason), not a store that failed.
 */
static int check_options(const pl__pg_store *s, const PQconninfoOption *opts)
{
    size_t n = 0, hosts = 1, of[2] = {0, 0}; /* host, hostaddr values */
    for (const PQconninfoOption *o = opts; o->keyword; o++, n++) {
        bool addr = !strcmp(o->keyword, "hostaddr");
        if (o->val && *o->val && (addr || !strcmp(o->keyword, "host"))) {
            size_t k = 1;
            for (const char *p = o->val; *p; p++)
                k += *p == ',';
            of[addr] = k;
            hosts = k > hosts ? k : hosts;
        }
    }
    /* the check the ping below, without hostaddr, cannot make */
    if (of[0] && of[1] && of[0] != of[1])
        return pl__err(PL_EINVAL,
                       "store '%s': a connection option is not valid: could "
                       "not match %zu host names to %zu hostaddr values",
                       s->path, of[0], of[1]);
    const char **kw = calloc(n + 2, sizeof *kw);
    const char **val = calloc(n + 2, sizeof *val);
    pl__buf where = {0};
    int st = kw && val ? PL_OK : PL_ENOMEM;
    for (size_t i = 0; !st && i < hosts; i++)
        st = pl__buf_append(&where, i ? "," NOWHERE : NOWHERE,
                            strlen(NOWHERE) + (i ? 1 : 0));
    if (!st)
        st = pl__buf_append(&where, "", 1);
    if (st) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    size_t m = 0;
    kw[m] = "host";
    val[m++] = (const char *)where.data;
    for (const PQconninfoOption *o = opts; o->keyword; o++)
        if (o->val && strcmp(o->keyword, "host") &&
            strcmp(o->keyword, "hostaddr")) {
            kw[m] = o->keyword;
            val[m++] = o->val;
        }
    if (PQpingParams(kw, val, 0) == PQPING_NO_ATTEMPT) {
        char buf[512];
        PGconn *c = PQconnectStartParams(kw, val, 0);
        st = c ? pl__err(PL_EINVAL,
                         "store '%s': a connection option is not valid: %s",
                         s->path, pl__pg_conn_msg(c, buf, sizeof buf))
               : pl__err(PL_ENOMEM, "out of memory");
        PQfinish(c);
    }
done:
    free(kw);
    free(val);
    pl__buf_free(&where);
    return st;
}

/*
 * A URI libpq cannot parse is a bad argument, not a store that failed: it
 * is refused before any connection, with libpq's reason (cut before the
 * URI it quotes, which may hold a password).
 */
static int check_conninfo(const pl__pg_store *s, const char *conninfo,
                          bool secret)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
    if (opts) {
        int st = check_options(s, opts);
        PQconninfoFree(opts);
        return st;
    }
    if (!err)
        return pl__err(PL_ENOMEM, "out of memory");
    size_t len = strcspn(err, secret ? "\n\"" : "\n");
    const char *quote = strstr(err, " in URI");
    if (quote && (size_t)(quote - err) < len)
        len = (size_t)(quote - err);
    while (len && strchr(": ", err[len - 1])) /* a quote cut off */
        len--;
    int st = pl__err(PL_EINVAL,
                     "store '%s': not a valid postgresql:// URI: "
                     "%.*s",
                     s->path, (int)len, err);
    PQfreemem(err);
    return st;
}

/* answer_timeout_ms=N (see URI above): 1 to ANSWER_MS_MAX, in decimal
 * digits alone (leading zeros read).  0 is refused: PostgreSQL's own
 * timeouts (statement_timeout, connect_timeout) read it as "no bound",
 * which this one never is; absent is the default. */
static int answer_ms(pl__pg_store *s, const char *v, size_t n)
{
    unsigned long ms = 0;
    size_t i = 0;
    for (; i < n && v[i] >= '0' && v[i] <= '9' && ms <= ANSWER_MS_MAX; i++)
        ms = ms * 10 + (unsigned long)(v[i] - '0');
    if (!n || i != n || !ms || ms > ANSWER_MS_MAX)
        return pl__err(PL_EINVAL,
                       "store '%s': answer_timeout_ms '%.*s' is not a number "
                       "of milliseconds from 1 to %d (absent: %d)",
                       s->path, (int)(n < 32 ? n : 32), v, ANSWER_MS_MAX,
                       ANSWER_MS_DEFAULT);
    s->answer_ms = (int)ms;
    return PL_OK;
}

/*
 * Split schema=NAME off the URI's query string, and give libpq a
 * connect_timeout unless the URI has one: a host that does not answer
 * fails the call instead of hanging it.
 */
int pl__pg_uri_parse(pl__pg_store *s, const char *uri)
{
    if (!(s->path = masked(uri)))
        return pl__err(PL_ENOMEM, "out of memory");
    const char *q = strchr(uri, '?');
    pl__buf ci = {0};
    const char *schema = SCHEMA_DEFAULT;
    s->answer_ms = ANSWER_MS_DEFAULT;
    size_t schema_len = strlen(SCHEMA_DEFAULT);
    int st = pl__buf_append(&ci, uri, q ? (size_t)(q - uri) : strlen(uri));
    char sep = '?';
    for (const char *p = q ? q + 1 : NULL; !st && p && *p;) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= 18 && memcmp(p, "answer_timeout_ms=", 18) == 0) {
            st = answer_ms(s, p + 18, len - 18);
        } else if (len >= 7 && memcmp(p, "schema=", 7) == 0) {
            schema = p + 7;
            schema_len = len - 7;
            if (!schema_ok(schema, schema_len))
                st = pl__err(PL_EINVAL,
                             "store '%s': schema must be 1 to %d of a-z, 0-9 "
                             "and _, not starting with a digit or pg_",
                             s->path, SCHEMA_MAX);
        } else if (len) {
            if (!(st = pl__buf_append(&ci, &sep, 1)))
                st = pl__buf_append(&ci, p, len);
            sep = '&';
        }
        p = end ? end + 1 : NULL;
    }
    if (!st && !strstr(uri, "connect_timeout="))
        st = pl__buf_append(&ci,
                            sep == '?' ? "?connect_timeout=30"
                                       : "&connect_timeout=30",
                            19);
    if (!st)
        st = pl__buf_append(&ci, "", 1);
    if (!st)
        st = check_conninfo(s, (const char *)ci.data, strcmp(s->path, uri));
    if (!st && !(s->schema = pl__strndup(schema, schema_len)))
        st = PL_ENOMEM;
    if (!st) {
        s->conninfo = (char *)ci.data;
        return PL_OK;
    }
    pl__buf_free(&ci);
    return st ? st : pl__err(PL_ENOMEM, "out of memory");
}
