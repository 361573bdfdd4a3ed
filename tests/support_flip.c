/*
 * support_flip.c -- see support_flip.h.
 */
#define _GNU_SOURCE
#include "support_flip.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int t_flip_count(const char *path, const char *k)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0)
        return PL_EIO;
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", k);
    bool ok = n > 0 && (size_t)n < sizeof line &&
              write(fd, line, (size_t)n) == n;
    close(fd);
    return ok ? PL_OK : PL_EIO;
}

int t_flip_eff(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a->payload, "k");
    if (!cJSON_IsString(k))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "no k");
    int st = t_flip_count(user, k->valuestring);
    return st ? st : pl_steps_add_resultf(out, "{s:s}", "k", k->valuestring);
}

int t_flip_counted(const char *path, const char *k)
{
    return t_count_lines(path, k);
}

char *t_flip_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    char *b = malloc(4096);
    cr_assert_not_null(b);
    *len = fread(b, 1, 4096, f);
    cr_assert(feof(f), "%s: longer than 4,096 bytes", path);
    fclose(f);
    return b;
}

int t_flip_wait(pid_t kid, int ms, const char *what)
{
    int ws = 0;
    pid_t got = 0;
    for (int t = 0; (got = waitpid(kid, &ws, WNOHANG)) == 0; t += 5) {
        if (t > ms) {
            kill(kid, SIGKILL);
            waitpid(kid, &ws, 0);
            cr_assert_fail("%s did not end in %d ms", what, ms);
        }
        usleep(5 * 1000);
    }
    cr_assert_eq(got, kid, "%s: %s", what, strerror(errno));
    cr_assert(WIFEXITED(ws), "%s died of signal %d", what,
              WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    return WEXITSTATUS(ws);
}

void t_flip_submit(pl_engine *e, const char *id, const char *policy,
                   int priority, const char *key)
{
    char json[128];
    snprintf(json, sizeof json, "{\"id\": \"%s\"}", id);
    cJSON *p = t_json(json);
    pl_action a = {PL_ACTION_VERSION, policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    ro.priority = priority;
    ro.concurrency_key = key;
    ro.concurrency_limit = key ? 1 : 0;
    cr_assert_eq(pl_run_submit(NULL, e, &a, &ro), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

void t_flip_put(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* ---- a drain ------------------------------------------------------------- */

static _Atomic int64_t g_last;  /* the child's last event, ms */
static _Atomic int64_t g_first; /* its first, 0 before it */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void t_flip_alive(void)
{
    int64_t t = now_ms(), none = 0;
    atomic_store(&g_last, t);
    atomic_compare_exchange_strong(&g_first, &none, t);
}

static void on_event(const pl_event *ev, void *user)
{
    (void)ev;
    (void)user;
    t_flip_alive();
}

typedef struct watch {
    pl_engine *e;
    int idle_ms, start_ms;
    bool busy; /* still busy at its bound */
} watch;

static void *watcher(void *arg)
{
    watch *w = arg;
    int64_t t0 = now_ms();
    for (;;) {
        usleep(10 * 1000);
        int64_t t = now_ms(), first = atomic_load(&g_first);
        if (!first) { /* opened, no run taken yet */
            if (t - t0 > w->start_ms)
                break;
            continue;
        }
        w->busy = t - first > T_FLIP_BOUND_MS;
        if (w->busy || t - atomic_load(&g_last) > w->idle_ms)
            break;
    }
    pl_worker_stop(w->e);
    return NULL;
}

pid_t t_flip_drain_start(const char *path, const pl_registry *reg, int idle_ms,
                         int start_ms, unsigned concurrency, unsigned lease_ms)
{
    fflush(NULL);
    pid_t kid = fork();
    cr_assert_neq(kid, -1);
    if (kid)
        return kid;
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_SYNC;
    eo.lease_ms = lease_ms; /* renewed every third of it */
    eo.on_event = on_event;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &eo);
    if (st)
        _exit(st == PL_ECORRUPT || st == PL_EVERSION ? T_DRAIN_REFUSED
                                                     : T_DRAIN_OPEN);
    if (pl_engine_set_wait_in_place(e, 0))
        _exit(T_DRAIN_OPEN);
    watch w = {e, idle_ms, start_ms, false};
    pthread_t th;
    if (pthread_create(&th, NULL, watcher, &w))
        _exit(T_DRAIN_OPEN);
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.poll_ms = 10;
    wo.concurrency = concurrency;
    st = pl_worker_run(e, &wo);
    pthread_join(th, NULL);
    pl_engine_close(e);
    _exit(w.busy ? T_DRAIN_BUSY : st ? T_DRAIN_RUN : T_DRAIN_OK);
}

int t_flip_drain_end(pid_t kid) { return t_flip_wait(kid, 30000, "a drain"); }

int t_flip_drain(const char *path, const pl_registry *reg, int idle_ms,
                 unsigned concurrency)
{
    return t_flip_drain_end(t_flip_drain_start(path, reg, idle_ms, idle_ms,
                                               concurrency,
                                               T_FLIP_DRAIN_LEASE_MS));
}

/* ---- LMDB ----------------------------------------------------------------- */

MDB_env *t_flip_lmdb_open(const char *path, const char *db, unsigned flags,
                          MDB_txn **txn, MDB_dbi *dbi)
{
    MDB_env *env = NULL;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOTLS, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, flags, txn), 0);
    cr_assert_eq(mdb_dbi_open(*txn, db, 0, dbi), 0, "no database %s", db);
    return env;
}

size_t t_flip_lmdb_get(const char *path, const char *db, const uint8_t *key,
                       size_t klen, uint8_t *out, size_t cap)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_env *env = t_flip_lmdb_open(path, db, MDB_RDONLY, &txn, &dbi);
    MDB_val k = {klen, (void *)key}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0, "no %s record", db);
    size_t n = v.mv_size;
    if (out)
        memcpy(out, v.mv_data, n < cap ? n : cap);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return n;
}

void t_flip_lmdb(const char *path, const char *db, const uint8_t *key,
                 size_t klen, size_t bit, bool in_key)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_env *env = t_flip_lmdb_open(path, db, 0, &txn, &dbi);
    MDB_val k = {klen, (void *)key}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0, "no %s record", db);
    uint8_t val[1024], kb[512];
    cr_assert_leq(v.mv_size, sizeof val);
    cr_assert_leq(klen, sizeof kb);
    memcpy(val, v.mv_data, v.mv_size);
    memcpy(kb, key, klen);
    uint8_t *p = in_key ? kb : val;
    size_t bits = (in_key ? klen : v.mv_size) * 8;
    cr_assert_gt(bits, 0);
    bit %= bits;
    p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    v.mv_data = val;
    if (in_key)
        cr_assert_eq(mdb_del(txn, dbi, &k, NULL), 0);
    k.mv_data = kb;
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}
