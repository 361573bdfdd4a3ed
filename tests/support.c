/*
 * support.c -- shared test helpers.
 */
#define _XOPEN_SOURCE 700
#include "support.h"

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

t_counters t_calls;

static char *dirs[64];
static int n_dirs;

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void t_rmtree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void t_expect_killed(int pid, const char *when)
{
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) == -1 && errno == EINTR)
        ;
    cr_assert_eq(w, pid, "waitpid: %s", strerror(errno));
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "the child should have died of SIGKILL %s, but exited with %d",
              when, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

typedef struct probe {
    pl__store *store;
    atomic_bool done;
    int st;
    char msg[512];
} probe;

/* A write transaction that writes nothing: the renewal of a lease that
 * does not exist (a run number past any, in PostgreSQL's bigint too). */
static void *probe_write(void *arg)
{
    probe *p = arg;
    uint64_t run = INT64_MAX, gen = 1;
    bool lost = false;
    p->st = pl__store_lease_renew(p->store, &run, &gen, 1, 1000000, &lost);
    snprintf(p->msg, sizeof p->msg, "%s", p->st ? pl_errmsg() : "");
    atomic_store(&p->done, true);
    return NULL;
}

void t_stop_outside_writes(int pid, pl_engine *e)
{
    for (int tries = 0;; tries++) {
        if (tries == 50)
            kill(pid, SIGKILL); /* not left stopped for the runner to wait */
        cr_assert_lt(tries, 50, "pid %d was always stopped in a write", pid);
        int status = 0;
        kill(pid, SIGSTOP);
        cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
        cr_assert(WIFSTOPPED(status), "pid %d ended before its stop", pid);
        probe p = {.store = e->store};
        atomic_init(&p.done, false);
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, probe_write, &p), 0);
        for (int ms = 0; !atomic_load(&p.done) && ms < 3000; ms += 10)
            nap_ms(10);
        bool held = !atomic_load(&p.done);
        if (held)
            kill(pid, SIGCONT);
        cr_assert_eq(pthread_join(th, NULL), 0);
        if (p.st)
            kill(pid, SIGKILL);
        cr_assert_eq(p.st, PL_OK, "the probe: %s", p.msg);
        if (!held)
            return;
        /* a write of its that waited for the probe's goes first; a nap
         * out of step with its renewer's period */
        nap_ms(100 + tries * 37 % 100);
    }
}

void t_cleanup(void)
{
    for (int i = 0; i < n_dirs; i++) {
        t_rmtree(dirs[i]);
        free(dirs[i]);
    }
    n_dirs = 0;
}

const char *t_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/pltest.XXXXXX",
             base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d, "mkdtemp failed");
    cr_assert(n_dirs < 64);
    dirs[n_dirs] = strdup(d);
    if (n_dirs == 0)
        atexit(t_cleanup);
    return dirs[n_dirs++];
}

void t_slice(const char *var, long *k, long *n)
{
    const char *s = getenv(var);
    *k = 0;
    *n = 1;
    if (!s || !*s)
        return;
    char *end;
    errno = 0;
    *k = strtol(s, &end, 10);
    cr_assert(errno == 0 && *end == '/', "%s '%s' is not k/N", var, s);
    *n = strtol(end + 1, &end, 10);
    cr_assert(errno == 0 && !*end && *n > 0 && *k >= 0 && *k < *n,
              "%s '%s' is not k/N with 0 <= k < N", var, s);
}

int t_stride(void)
{
    const char *s = getenv("PL_TEST_STRIDE");
    if (!s || !*s)
        return 1;
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    cr_assert(errno == 0 && !*end && n >= 1 && n <= 100,
              "PL_TEST_STRIDE '%s' is not a number from 1 to 100", s);
    return (int)n;
}

void t_need_npm(const char *path, const char *setup)
{
    if (access(path, R_OK) == 0)
        return;
    const char *req = getenv("PL_NPM_REQUIRED");
    if (req && !strcmp(req, "1"))
        cr_assert_fail(
            "%s is not installed, and PL_NPM_REQUIRED=1, where "
            "nothing may skip: see the output of %s (tests/npm_setup.sh)",
            path, setup);
    cr_skip_test("%s is not installed: %s (tests/npm_setup.sh) could not "
                 "fetch it from npm (see its output in the test log)",
                 path, setup);
}

/* ---- the backend ---------------------------------------------------------- */

bool t_on_pg(void)
{
    const char *b = getenv("PL_TEST_STORE");
    if (!b || !*b || strcmp(b, "lmdb") == 0)
        return false;
    cr_assert_str_eq(b, "postgresql",
                     "PL_TEST_STORE is lmdb or postgresql, not '%s'", b);
    cr_assert(PL_WITH_POSTGRESQL, "PL_TEST_STORE is postgresql, and this "
                                  "build has no PostgreSQL store "
                                  "(PL_WITH_POSTGRESQL=OFF)");
    return true;
}

const char *t_pg_server(void)
{
    const char *uri = getenv("PL_TEST_PG_URI");
    cr_assert(uri && *uri && strchr(uri, '?'),
              "PL_TEST_STORE=postgresql needs PL_TEST_PG_URI (with a query "
              "string): run the test through tests/pg_run.sh, which starts a "
              "server and sets it");
    return uri;
}

/* A schema no other store on the server has: a binary's tests, each in a
 * process of its own, share one server, and a pid may come back. */
static void pg_schema_new(char *out, size_t n)
{
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, n, "t%ld_%u_%lx", (long)getpid(), counter++,
             (unsigned long)ts.tv_sec * 1000000000ul +
                 (unsigned long)ts.tv_nsec);
}

void t_store_in(char *out, size_t n, const char *dir, const char *name)
{
    int len;
    if (t_on_pg()) {
        char schema[64];
        pg_schema_new(schema, sizeof schema);
        len = snprintf(out, n, "%s&schema=%s", t_pg_server(), schema);
    } else {
        len = snprintf(out, n, "%s/%s", dir, name);
    }
    cr_assert(len > 0 && (size_t)len < n, "a store path is too long");
}

const char *t_store_path(void)
{
    static char path[4200];
    t_store_in(path, sizeof path, t_on_pg() ? NULL : t_tmpdir(), "store.db");
    return path;
}

void t_lmdb_only(const char *why)
{
    if (t_on_pg())
        cr_skip_test("LMDB only: %s", why);
}

void t_copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY);
    if (in < 0 && errno == ENOENT)
        return;
    cr_assert_geq(in, 0, "open %s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(out, 0, "open %s: %s", to, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        cr_assert_eq(write(out, buf, (size_t)n), n, "write %s", to);
    cr_assert_eq(n, 0, "read %s: %s", from, strerror(errno));
    close(in);
    close(out);
}

int t_count_lines(const char *path, const char *line)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char buf[512];
    int n = 0;
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        n += !strcmp(buf, line);
    }
    fclose(f);
    return n;
}

void t_store_copy(const char *to, const char *from)
{
#if PL_WITH_POSTGRESQL
    if (t_on_pg()) {
        t_pg_copy(to, from);
        return;
    }
#endif
    t_copy_file(from, to);
}

void t_mix(uint64_t *h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ b[i]) * 1099511628211ull;
}

void t_mix_str(uint64_t *h, const char *s)
{
    t_mix(h, s ? s : "(null)", strlen(s ? s : "(null)") + 1);
}

void t_mix_json(uint64_t *h, const cJSON *j)
{
    char *t = j ? cJSON_PrintUnformatted(j) : NULL;
    t_mix_str(h, t);
    cJSON_free(t);
}

void t_mix_run(uint64_t *h, const pl_run_info *info)
{
    t_mix_str(h, info->id);
    t_mix_str(h, info->policy);
    t_mix_json(h, info->payload);
    t_mix(h, &info->status, sizeof info->status);
    t_mix(h, &info->steps, sizeof info->steps);
    t_mix(h, &info->created_us, sizeof info->created_us);
    t_mix(h, &info->updated_us, sizeof info->updated_us);
    t_mix(h, &info->heartbeat_us, sizeof info->heartbeat_us);
    t_mix(h, &info->owner_pid, sizeof info->owner_pid);
    t_mix_str(h, info->owner_host);
    t_mix(h, &info->attempts, sizeof info->attempts);
    t_mix(h, &info->error, sizeof info->error);
    t_mix_str(h, info->reason);
    t_mix_str(h, info->suspended_path);
    t_mix_json(h, info->prompt);
    t_mix_str(h, info->resume_token);
    t_mix(h, &info->wake_ms, sizeof info->wake_ms);
    t_mix_str(h, info->wait_event);
    t_mix(h, &info->deadline_ms, sizeof info->deadline_ms);
    t_mix_str(h, info->code);
}

void t_mix_step(uint64_t *h, const pl_step *s)
{
    pl_step_type t = pl_step_type_of(s);
    t_mix(h, &t, sizeof t);
    t_mix_str(h, pl_step_actor(s));
    t_mix_str(h, pl_step_id(s));
    t_mix_str(h, pl_step_code(s));
    int64_t us = pl_step_time_us(s);
    t_mix(h, &us, sizeof us);
    uint8_t prev[PL_HASH_LEN] = {0};
    (void)pl_step_prev_hash(prev, s);
    t_mix(h, prev, sizeof prev);
    t_mix_json(h, pl_step_payload(s));
}

int t_visit_mix_run(const pl_run_info *info, void *h)
{
    t_mix_run(h, info);
    return 0;
}

int t_visit_mix_step(const pl_step *s, void *h)
{
    t_mix_step(h, s);
    return 0;
}

cJSON *t_json(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "bad JSON in a test: %s", text);
    return j;
}

char *t_text(const cJSON *v) { return cJSON_PrintUnformatted(v); }

static int echo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    t_calls.echo++;
    return pl_steps_add_result(out, a->payload);
}

static int add(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    t_calls.add++;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a->payload, "a");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(a->payload, "b");
    if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "a and b must be "
                                  "numbers");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "sum", x->valuedouble + y->valuedouble);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int fail(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    return PL_EPOLICY;
}

static int oops(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_error(out, PL_ERR_TOOL_BUG, "something broke");
}

static int chain(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    t_calls.chain++;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    int count = cJSON_IsNumber(n) ? n->valueint : 3;
    double total = 0;
    for (int i = 0; i < count; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "a", i);
        cJSON_AddNumberToObject(p, "b", total);
        pl_action call = {PL_ACTION_VERSION, "add", p, NULL, 0, NULL};
        pl_step *res = NULL;
        int st = pl_ctx_call(&res, ctx, &call, NULL, 0);
        cJSON_Delete(p);
        if (st)
            return st;
        total = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res), "sum")
                    ->valuedouble;
        pl_step_free(res);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "total", total);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

pl_registry *t_registry(void)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"echo", echo},
                {"add", add},
                {"fail", fail},
                {"oops", oops},
                {"chain", chain}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

pl_engine *t_engine(const char *path, const pl_registry *reg,
                    pl_durability durability)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = durability;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &o);
    cr_assert_eq(st, PL_OK, "pl_engine_open(%s): %s", path, pl_errmsg());
    return e;
}

pl_run_status status_of(pl_engine *e, const char *id)
{
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, id), PL_OK, "run %s: %s", id,
                 pl_errmsg());
    pl_run_status s = info->status;
    pl_run_info_free(info);
    return s;
}

int t_try_start(pl_outcome **o, pl_engine *e, const char *policy,
                const char *json, const char *id)
{
    cJSON *payload = cJSON_Parse(json);
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    *o = NULL;
    int st = payload ? pl_run_start(o, e, &a, &ro) : PL_EJSON;
    cJSON_Delete(payload);
    return st;
}

pl_outcome *t_start(pl_engine *e, const char *policy, const char *payload_json,
                    const char *run_id)
{
    cJSON *p = t_json(payload_json ? payload_json : "{}");
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = run_id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    cr_assert_eq(st, PL_OK, "pl_run_start(%s): %s", policy, pl_errmsg());
    cr_assert_not_null(o);
    return o;
}

bool t_proc_gone(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return !p || p[2] == 'Z' || p[2] == 'X';
}

bool t_proc_ends(long pid)
{
    for (int i = 0; i < 6000 && !t_proc_gone(pid); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return t_proc_gone(pid);
}

static void *t_worker_main(void *arg)
{
    t_worker *w = arg;
    pl_worker_options o = PL_WORKER_OPTIONS_INIT;
    o.concurrency = w->concurrency;
    o.poll_ms = 10;
    w->rc = pl_worker_run(w->e, &o);
    return NULL;
}

void t_worker_start(t_worker *w, pl_engine *e, unsigned concurrency)
{
    memset(w, 0, sizeof *w);
    w->e = e;
    w->concurrency = concurrency;
    cr_assert_eq(pthread_create(&w->th, NULL, t_worker_main, w), 0);
}

void t_worker_stop(t_worker *w)
{
    pl_worker_stop(w->e);
    cr_assert_eq(pthread_join(w->th, NULL), 0);
    cr_assert_eq(w->rc, PL_OK, "the worker: %s", pl_errmsg());
}

bool t_utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80                    ? 1
                   : p[i] >= 0xC2 && p[i] <= 0xDF ? 2
                   : p[i] >= 0xE0 && p[i] <= 0xEF ? 3
                   : p[i] >= 0xF0 && p[i] <= 0xF4 ? 4
                                                  : 0;
        if (!k || i + k > n)
            return false;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
        if ((p[i] == 0xE0 && p[i + 1] < 0xA0) ||
            (p[i] == 0xED && p[i + 1] > 0x9F) ||
            (p[i] == 0xF0 && p[i + 1] < 0x90) ||
            (p[i] == 0xF4 && p[i + 1] > 0x8F))
            return false;
        i += k;
    }
    return true;
}
