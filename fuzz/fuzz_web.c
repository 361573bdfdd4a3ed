/*
 * fuzz_web.c -- ledger-web's answer to a request, below the socket: the
 * input is decoded to a request and handed to web_handle() (the function
 * libmicrohttpd's callback calls), on a real LMDB store.
 *
 * The input: a byte for the server (bit 0: it asks for a token, bit 1:
 * --read-only), then a request as its text says it,
 *     METHOD TARGET ...\n  (the rest of the line ignored)
 *     Name: value\n        (headers, up to a blank line)
 *     body                 (what is left)
 * The target's path is %XX-decoded and its query split and decoded as
 * libmicrohttpd does it (with ledger-web's own decoder and its cut of a
 * query of too many parameters); the Cookie header gives the cookies.
 * The server's CSRF token is CSRF below and its token TOKEN, so inputs can
 * hold them.  PL_FUZZ_WEB_SHOW=1 prints each answer's status and start.
 *
 * Once, a store is made with the engine: runs completed (with a nested
 * call), failed, suspended for a human, waiting for an event, cancelled.
 * Every answer must be JSON (an object, UTF-8, an error with its code and
 * message), one of the page's files, an export whose every line is JSON,
 * an event stream, or the login's redirect, with a status the API's
 * manual gives (docs/tools.md); never a crash, a leak or a hang.  Actions
 * change the store: it is copied back from the one made every RESET_EVERY
 * inputs, and when its file grows past RESET_BYTES.  The server's
 * background threads (counts, change poller) are not started
 * (web_live_open()), so an input's answer is the same each time.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "web.h"
#include "web_guard.h"
#include "fuzz.h"

#define CSRF "fuzz-csrf-token"
#define TOKEN "fuzz-token-0123456789"
#define RESET_EVERY 256
#define RESET_BYTES (8 << 20)
#define MAX_HEADERS 64
#define MAX_ARGS (WEB_ARGS_MAX + 1)

/* ---- the store ------------------------------------------------------------ */

static int job(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, "leaf", a->payload);
    cJSON_Delete(r);
    return st ? st : pl_steps_add_result(out, a->payload);
}

static int leaf(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    return pl_steps_add_result(out, a->payload);
}

static int boom(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    return pl_errorf(PL_EPOLICY, "declined: \xff <b>");
}

static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_invoke(&answer, ctx, "human", a->payload);
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static int waitev(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", PL_WAIT_FOREVER);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "got", p);
    cJSON_Delete(p);
    return st;
}

static web g_w;
static char g_dir[256], g_template[300], g_work[300];
static uint8_t *g_bytes; /* the store as made */
static size_t g_len;
static unsigned g_inputs;

static void add(pl_registry *reg, const char *name, pl_policy_fn fn)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = fn;
    d.code_version = "fuzz-1";
    CHECK(pl_registry_add(reg, &d) == PL_OK);
}

static pl_engine *open_engine(const char *path)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.on_event = web_on_event;
    o.event_user = &g_w;
    pl_engine *e = NULL;
    return pl_engine_open(&e, path, g_w.reg, &o) ? NULL : e;
}

static void start(pl_engine *e, const char *id, const char *policy,
                  const char *payload, pl_run_status want)
{
    cJSON *p = cJSON_Parse(payload);
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = p;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    CHECK((st == PL_OK || st == PL_EPOLICY) && o && o->status == want);
    pl_outcome_free(o);
    cJSON_Delete(p);
}

static void make_store(void)
{
    pl_engine *e = open_engine(g_template);
    CHECK(e != NULL);
    start(e, "done-1", "job", "{\"n\": 1, \"text\": \"caf\\u00e9 <i>\"}",
          PL_RUN_COMPLETED);
    start(e, "done-2", "job", "{\"n\": 2}", PL_RUN_COMPLETED);
    start(e, "failed-1", "boom", "{}", PL_RUN_FAILED);
    start(e, "asking-1", "ask", "{\"question\": \"ship it?\"}",
          PL_RUN_SUSPENDED);
    CHECK(pl_engine_set_wait_in_place(e, 0) == PL_OK);
    start(e, "waiting-1", "waitev", "{}", PL_RUN_WAITING);
    start(e, "cancelled-1", "waitev", "{}", PL_RUN_WAITING);
    CHECK(pl_run_cancel(e, "cancelled-1", "withdrawn") == PL_OK);
    pl_engine_close(e);
    g_bytes = read_whole(g_template, &g_len);
}

/* The store as made, opened for the server. */
static void reset(void)
{
    if (g_w.engine) {
        web_live_stop(&g_w);
        pl_engine_close(g_w.engine);
    }
    FILE *f = fopen(g_work, "wb");
    CHECK(f && fwrite(g_bytes, 1, g_len, f) == g_len && fclose(f) == 0);
    CHECK((g_w.engine = open_engine(g_work)) != NULL);
    CHECK(web_live_open(&g_w));
    g_inputs = 0;
}

static void cleanup(void)
{
    char lock[320];
    web_live_stop(&g_w);
    pl_engine_close(g_w.engine);
    pl_registry_free(g_w.reg);
    remove(g_template);
    remove(g_work);
    snprintf(lock, sizeof lock, "%s-lock", g_template);
    remove(lock);
    snprintf(lock, sizeof lock, "%s-lock", g_work);
    remove(lock);
    rmdir(g_dir);
    free(g_bytes);
}

static void setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/plfuzzweb.XXXXXX",
             base && *base ? base : "/tmp");
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_template, sizeof g_template, "%s/template.db", g_dir);
    snprintf(g_work, sizeof g_work, "%s/work.db", g_dir);
    CHECK(pl_registry_new(&g_w.reg) == PL_OK);
    add(g_w.reg, "job", job);
    add(g_w.reg, "leaf", leaf);
    add(g_w.reg, "boom", boom);
    add(g_w.reg, "ask", ask);
    add(g_w.reg, "waitev", waitev);
    CHECK(pl_registry_add_human(g_w.reg, "human") == PL_OK);
    g_w.store = g_work;
    g_w.tmp_dir = g_dir;
    g_w.stall_s = WEB_STALL_S;
    g_w.loopback = true;
    snprintf(g_w.csrf, sizeof g_w.csrf, "%s", CSRF);
    make_store();
    reset();
    atexit(cleanup);
}

/* ---- the request ---------------------------------------------------------- */

typedef struct pair {
    const char *name, *value; /* value NULL: a parameter without '=' */
} pair;

typedef struct fuzz_req {
    pair headers[MAX_HEADERS], cookies[MAX_HEADERS], args[MAX_ARGS];
    size_t n_headers, n_cookies, n_args;
} fuzz_req;

/* The first value of @p name, without case, as libmicrohttpd looks up
 * every kind of value. */
static const char *lookup(const pair *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(v[i].name, name))
            return v[i].value;
    return NULL;
}

static const char *get(void *conn, web_kind kind, const char *name)
{
    fuzz_req *q = conn;
    return kind == WEB_HEADER   ? lookup(q->headers, q->n_headers, name)
           : kind == WEB_COOKIE ? lookup(q->cookies, q->n_cookies, name)
                                : lookup(q->args, q->n_args, name);
}

static void each_arg(void *conn, void (*fn)(void *cls, const char *name),
                     void *cls)
{
    fuzz_req *q = conn;
    for (size_t i = 0; i < q->n_args; i++)
        fn(cls, q->args[i].name);
}

static const web_src fuzz_src = {get, each_arg};

/* '+' as a space, then %XX as ledger-web decodes it (libmicrohttpd's
 * order). */
static void unescape(char *s)
{
    for (char *p = s; *p; p++)
        if (*p == '+')
            *p = ' ';
    web_unescape(NULL, NULL, s);
}

/* The query @p s (written on) into @p q's arguments, as libmicrohttpd
 * splits it: at '&', each at its first '='. */
static void parse_query(fuzz_req *q, char *s)
{
    while (s && *s && q->n_args < MAX_ARGS) {
        char *amp = strchr(s, '&');
        if (amp)
            *amp++ = '\0';
        char *eq = strchr(s, '=');
        if (eq)
            *eq++ = '\0';
        unescape(s);
        if (eq)
            unescape(eq);
        q->args[q->n_args++] = (pair){s, eq};
        s = amp;
    }
}

/* "a=1; b=2" (written on) into @p q's cookies. */
static void parse_cookies(fuzz_req *q, char *s)
{
    char *save = NULL;
    for (char *tok = strtok_r(s, ";", &save); tok && q->n_cookies < MAX_HEADERS;
         tok = strtok_r(NULL, ";", &save)) {
        while (*tok == ' ')
            tok++;
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq++ = '\0';
        size_t n = strlen(eq);
        if (n >= 2 && eq[0] == '"' && eq[n - 1] == '"') {
            eq[n - 1] = '\0';
            eq++;
        }
        q->cookies[q->n_cookies++] = (pair){tok, eq};
    }
}

/* ---- the answer ----------------------------------------------------------- */

static bool status_listed(int s)
{
    static const int listed[] = {200, 303, 304, 400, 401, 403, 404,
                                 405, 409, 413, 414, 431, 503};
    for (size_t i = 0; i < sizeof listed / sizeof *listed; i++)
        if (s == listed[i])
            return true;
    return false;
}

static void check_json(const char *text, size_t len, int status)
{
    CHECK(cli_utf8_bad(text, len) == len);
    CHECK(!memchr(text, '<', len) && !memchr(text, '>', len) &&
          !memchr(text, '&', len));
    cJSON *doc = cJSON_ParseWithLength(text, len);
    CHECK(cJSON_IsObject(doc));
    if (status >= 400) {
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(doc, "error")));
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(doc, "message")));
    }
    cJSON_Delete(doc);
}

/* An export: every line JSON (of UTF-8). */
static void check_export(int fd, size_t len)
{
    CHECK(len > 0 && len <= WEB_EXPORT_MAX);
    char *text = malloc(len + 1);
    CHECK(text && pread(fd, text, len, 0) == (ssize_t)len);
    text[len] = '\0';
    CHECK(cli_utf8_bad(text, len) == len && text[len - 1] == '\n');
    for (char *line = text, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        cJSON *v = cJSON_ParseWithLength(line, (size_t)(nl - line));
        CHECK(cJSON_IsObject(v));
        cJSON_Delete(v);
    }
    free(text);
}

static void check(const web_reply *out)
{
    CHECK(status_listed(out->status));
    if (out->events) {
        CHECK(out->status == 200 && !strcmp(out->type, "text/event-stream"));
    } else if (out->fd >= 0) {
        CHECK(out->status == 200 && out->slot);
        check_export(out->fd, out->len);
    } else if (out->status == 303) {
        CHECK(out->n_headers == 2 && !out->len);
    } else if (out->type && !strcmp(out->type, "application/json")) {
        CHECK(out->api && out->body);
        check_json(out->body, out->len, out->status);
    } else if (out->type && !strncmp(out->type, "text/plain", 10)) {
        CHECK(out->status == 400 && out->len &&
              out->body[out->len - 1] == '\n');
    } else {
        /* one of the page's files, whole, or unchanged */
        CHECK(out->type && (out->status == 200 || out->status == 304));
        CHECK(out->status == 304 ? !out->len : out->len > 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_w.reg)
        setup();
    if (size < 1)
        return 0;
    struct stat sb;
    if (++g_inputs >= RESET_EVERY ||
        (stat(g_work, &sb) == 0 && sb.st_size > RESET_BYTES))
        reset();
    g_w.token = data[0] & 1 ? TOKEN : NULL;
    g_w.read_only = data[0] & 2;
    char *text = malloc(size);
    CHECK(text != NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    size_t text_len = size - 1;

    /* the request line, the headers, the body */
    char *eol = strchr(text, '\n');
    char *rest = eol ? eol + 1 : text + strlen(text);
    if (eol)
        *eol = '\0';
    char *sp = strchr(text, ' ');
    char *target = sp ? sp + 1 : text + strlen(text);
    if (sp)
        *sp = '\0';
    char *end = strchr(target, ' ');
    if (end)
        *end = '\0';
    fuzz_req q;
    memset(&q, 0, sizeof q);
    char *cookie = NULL;
    size_t lines = 0;
    while (rest < text + text_len && *rest && *rest != '\n') {
        char *line = rest;
        eol = strchr(line, '\n');
        rest = eol ? eol + 1 : line + strlen(line);
        if (eol)
            *eol = '\0';
        lines++;
        char *colon = strchr(line, ':');
        if (!colon || q.n_headers == MAX_HEADERS)
            continue;
        *colon = '\0';
        char *value = colon + 1;
        while (*value == ' ')
            value++;
        q.headers[q.n_headers++] = (pair){line, value};
        if (!strcasecmp(line, "Cookie"))
            cookie = value;
    }
    if (rest < text + text_len && *rest == '\n')
        rest++;
    size_t body_len = rest < text + text_len ? (size_t)(text + text_len - rest)
                                             : 0;

    web_req *r = web_uri_seen(NULL, target, NULL);
    CHECK(r != NULL);
    char *query = strchr(target, '?');
    if (query)
        *query++ = '\0';
    char *cookie_copy = cookie ? strdup(cookie) : NULL;
    if (cookie_copy)
        parse_cookies(&q, cookie_copy);
    parse_query(&q, query);
    web_unescape(NULL, NULL, target);
    r->conn = &q;
    r->src = &fuzz_src;
    struct sockaddr_in client = {.sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    r->client = (const struct sockaddr *)&client;
    r->method = text;
    r->url = target;
    r->head_lines = lines;
    r->head_bytes = (size_t)(rest - text);
    const char *cl = get(&q, WEB_HEADER, "Content-Length");
    r->too_big = (cl && strtoull(cl, NULL, 10) > WEB_BODY_MAX) ||
                 body_len > WEB_BODY_MAX;
    if (body_len && !r->too_big) {
        r->body = malloc(body_len + 1);
        CHECK(r->body != NULL);
        memcpy(r->body, rest, body_len);
        r->body[body_len] = '\0';
        r->len = body_len;
    }

    web_reply out;
    web_handle(&g_w, r, &out);
    if (getenv("PL_FUZZ_WEB_SHOW")) /* each answer's status and start */
        fprintf(stderr, "%s %.60s: %d %.*s\n", r->method, target, out.status,
                out.body ? (int)(out.len < 200 ? out.len : 200) : 0,
                out.body ? out.body : "");
    check(&out);
    web_reply_free(&g_w, &out);
    free(r->body);
    free(r);
    free(cookie_copy);
    free(text);
    return 0;
}
