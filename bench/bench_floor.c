/*
 * bench_floor.c -- the raw-LMDB floor (commits, a call's records, a
 * scan), and the noise probe: the floor measured before and after a workload.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- floors: raw LMDB --------------------------------------------------------- */

MDB_env *raw_env(const char *path, pl_durability mode)
{
    MDB_env *env;
    mdb_env_create(&env);
    mdb_env_set_mapsize(env, (size_t)1 << 30);
    mdb_env_set_maxdbs(env, 4);
    unsigned flags = MDB_NOSUBDIR | MDB_NOTLS |
                     (mode == PL_DURABILITY_PROCESS ? MDB_NOSYNC : 0);
    if (mdb_env_open(env, path, flags, 0600)) {
        fprintf(stderr, "pl-bench: cannot open raw LMDB at %s\n", path);
        _exit(1);
    }
    return env;
}

/* A fresh raw LMDB store in the bench directory, with one database. */
MDB_env *raw_open(const char *name, pl_durability mode, MDB_dbi *dbi)
{
    char path[1100];
    path_in(path, sizeof path, name);
    remove_store(path);
    MDB_env *env = raw_env(path, mode);
    MDB_txn *txn;
    if (mdb_txn_begin(env, NULL, 0, &txn) ||
        mdb_dbi_open(txn, "floor", MDB_CREATE, dbi) || mdb_txn_commit(txn)) {
        fprintf(stderr, "pl-bench: cannot create raw LMDB at %s\n", path);
        _exit(1);
    }
    return env;
}

void raw_close(MDB_env *env, const char *name)
{
    char path[1100];
    path_in(path, sizeof path, name);
    mdb_env_close(env);
    remove_store(path);
}

/*
 * The records W1's engine commits for one call, by size: the caller's
 * action_call and its action_result, into which the tool's one step, the
 * result, is folded.
 */
static const size_t call_record_sizes[] = {80, 133};

/*
 * Make writer id's commits from .. from+n-1: each one record of 160 B, or with
 * call, a call's records.  A lone writer's keys come in order, so it
 * puts them with MDB_APPEND, as the engine puts a run's steps: appending
 * fills pages to the end and writes a commit's pages in fewer, longer
 * writes, which on a synced commit is worth 3-6% here.  Writers that
 * share the database interleave their keys and put them the plain way.
 */
void raw_commits(MDB_env *env, MDB_dbi dbi, int id, int from, int n, bool call,
                 bool alone)
{
    unsigned put_flags = alone ? MDB_APPEND : 0;
    char val[200];
    memset(val, 'v', sizeof val);
    size_t one = 160;
    const size_t *sizes = call ? call_record_sizes : &one;
    int per_commit = call ? (int)(sizeof call_record_sizes /
                                  sizeof call_record_sizes[0])
                          : 1;
    for (int i = from; i < from + n; i++) {
        MDB_txn *txn;
        if (mdb_txn_begin(env, NULL, 0, &txn))
            goto fail;
        for (int r = 0; r < per_commit; r++) {
            char key[32];
            int kl = snprintf(key, sizeof key, "%04d-%012d%.*s", id, i, r,
                              "abc");
            MDB_val k = {(size_t)kl, key}, v = {sizes[r], val};
            if (mdb_put(txn, dbi, &k, &v, put_flags)) {
                mdb_txn_abort(txn);
                goto fail;
            }
        }
        if (mdb_txn_commit(txn))
            goto fail;
    }
    return;
fail:
    fprintf(stderr, "pl-bench: raw put failed\n");
    _exit(1);
}

typedef struct raw_thread {
    MDB_env *env;
    MDB_dbi dbi;
    int n;
    int id;
    bool call;
    bool alone; /* the only writer */
} raw_thread;

static void *raw_puts(void *arg)
{
    raw_thread *t = arg;
    raw_commits(t->env, t->dbi, t->id, 0, t->n, t->call, t->alone);
    return NULL;
}

/* Run fn on each of @p threads arguments (args, @p size bytes apart), on
 * threads of their own, or on this one when there is one, each making @p n
 * records: the floor's records per second, and time per record, to @p r. */
void timed_threads(void *(*fn)(void *), void *args, size_t size, int threads,
                   int n, floor_res *r)
{
    pthread_t th[256];
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        void *arg = (char *)args + (size_t)i * size;
        if (threads == 1)
            fn(arg);
        else
            pthread_create(&th[i], NULL, fn, arg);
    }
    for (int i = 0; threads > 1 && i < threads; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    double total = (double)n * threads;
    r->per_record_s = dt / total;
    r->records_per_s = total / dt;
}

void floor_puts(const void *varg, void *vres)
{
    const floor_arg *a = varg;
    floor_res *r = vres;
    MDB_dbi dbi;
    MDB_env *env = raw_open("floor.mdb", a->mode, &dbi);
    raw_thread args[256];
    int threads = a->threads < 1 ? 1 : a->threads > 256 ? 256 : a->threads;
    for (int i = 0; i < threads; i++)
        args[i] = (raw_thread){env, dbi, a->n, i, a->call, threads == 1};
    timed_threads(raw_puts, args, sizeof *args, threads, a->n, r);
    raw_close(env, "floor.mdb");
}

/* Write n records (no sync), then in a child: open and scan them. */
static void floor_scan_child(const void *varg, void *vres)
{
    const int *n = varg;
    scan_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "scan.mdb");
    double t0 = now_s();
    MDB_env *env = raw_env(path, PL_DURABILITY_SYNC);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    mdb_dbi_open(txn, "scan", 0, &dbi);
    mdb_cursor_open(txn, dbi, &cur);
    int count = 0;
    size_t bytes = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        bytes += v.mv_size + ((const unsigned char *)v.mv_data)[0];
        count++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    double dt = now_s() - t0;
    mdb_env_close(env);
    r->open_read_s = dt;
    r->records_per_s = count / dt;
    if (count != *n || !bytes)
        _exit(1);
}

/* Write n records (no sync) for floor_scan_child(). */
static void floor_scan_write_child(const void *varg, void *vres)
{
    const int *n = varg;
    (void)vres;
    char path[1100];
    path_in(path, sizeof path, "scan.mdb");
    MDB_env *env = raw_env(path, PL_DURABILITY_PROCESS);
    MDB_txn *txn;
    MDB_dbi dbi;
    mdb_txn_begin(env, NULL, 0, &txn);
    mdb_dbi_open(txn, "scan", MDB_CREATE, &dbi);
    char val[160];
    memset(val, 'v', sizeof val);
    for (int i = 0; i < *n; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "%012d", i);
        MDB_val k = {(size_t)kl, key}, v = {sizeof val, val};
        mdb_put(txn, dbi, &k, &v, MDB_APPEND);
    }
    if (mdb_txn_commit(txn))
        _exit(1);
    mdb_env_close(env);
}

/* The records are written in a child too: the parent's heap would grow,
 * and every later child would inherit it in its peak RSS. */
int floor_scan(int n, scan_res *r)
{
    char path[1100];
    path_in(path, sizeof path, "scan.mdb");
    remove_store(path);
    char done;
    int rc = in_child(floor_scan_write_child, &n, &done, sizeof done);
    if (!rc)
        rc = in_child(floor_scan_child, &n, r, sizeof *r);
    remove_store(path);
    return rc;
}

/* ---- noise: the floor's drift over a workload ----------------------------------- */

/*
 * A workload's figures stand against a floor measured in the same run;
 * when the host's speed changes while the workload runs (other jobs come
 * and go), the floor moves and the figures with it.  So the floor is
 * probed before a workload and after it: PROBE_REPS short measurements
 * of PROBE_N commits each (a fifth with --quick; the workload's floor: raw LMDB, or on
 * PostgreSQL the libpq INSERT), and the medians compared.  A move larger
 * than the probes' own spread (the larger relative range of the two sets
 * of repetitions) and than NOISE_MIN marks the workload's figures: "floor
 * moved 23%: noisy host" beside them, and their goals not judged; so does
 * a spread above UNSTEADY_MAX ("floor unsteady (spread 60%)"), a floor
 * that does not hold still for a second, before or after.
 */
#define PROBE_N 400
#define PG_PROBE_N 2000 /* PostgreSQL, commits not synced: ~30 us each */
#define NOISE_MIN 0.05
#define UNSTEADY_MAX 0.25

/* Probe the floor: its time per commit, up to PROBE_REPS times (on
 * PostgreSQL: after pg_settle() when @p settle). */
static int probe(pl_durability mode, bool settle, double *out)
{
    int n = g_pg_uri && mode == PL_DURABILITY_PROCESS ? PG_PROBE_N : PROBE_N;
    floor_arg fa = {mode, g_quick ? n / 5 : n, 1, false};
    if (g_pg_uri) {
        probe_res pr;
        memset(&pr, 0, sizeof pr);
        if (settle)
            pg_settle();
        if (in_child(pg_probe, &fa, &pr, sizeof pr))
            return 0;
        memcpy(out, pr.s, (size_t)pr.n * sizeof *out);
        return pr.n;
    }
    int k = 0;
    for (int i = 0; i < PROBE_REPS; i++) {
        floor_res fr;
        if (!in_child(floor_puts, &fa, &fr, sizeof fr))
            out[k++] = fr.per_record_s;
    }
    return k;
}

double floor_commit_s(void)
{
    double v[PROBE_REPS];
    int n = probe(PL_DURABILITY_SYNC, false, v);
    return n ? median(v, n) : 0;
}

static double rel_range(double *v, int n)
{
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    double m = median(v, n);
    return m > 0 ? (hi - lo) / m : 0;
}

void drift_begin(drift *d, pl_durability mode)
{
    memset(d, 0, sizeof *d);
    d->mode = mode;
    d->nb = probe(mode, false, d->before);
}

void drift_begin_settled(drift *d, pl_durability mode)
{
    memset(d, 0, sizeof *d);
    d->mode = mode;
    d->settle = true;
    d->nb = probe(mode, true, d->before);
}

/* The larger relative range of the two sets of probes. */
static double drift_spread(drift *d)
{
    double sb = rel_range(d->before, d->nb), sa = rel_range(d->after, d->na);
    return sb > sa ? sb : sa;
}

/* Probe again; d->note says whether the floor moved (also in @p o). */
const char *drift_end(drift *d, cJSON *o)
{
    double *after = d->after;
    int na = d->na = probe(d->mode, d->settle, after);
    if (!d->nb || !na)
        return d->note;
    double b = median(d->before, d->nb), a = median(after, na);
    double moved = b > 0 ? fabs(a - b) / b : 0;
    double spread = drift_spread(d);
    if (moved > spread && moved > NOISE_MIN)
        snprintf(d->note, sizeof d->note, "floor moved %.0f%%: noisy host",
                 moved * 100);
    else if (spread > UNSTEADY_MAX)
        snprintf(d->note, sizeof d->note,
                 "floor unsteady (spread %.0f%%): noisy host", spread * 100);
    drift_json(d, o);
    return d->note;
}

void drift_json(drift *d, cJSON *o)
{
    if (!o || !d->nb || !d->na)
        return;
    jnum(o, "floor_probe_before_us", median(d->before, d->nb) * 1e6);
    jnum(o, "floor_probe_after_us", median(d->after, d->na) * 1e6);
    jnum(o, "floor_probe_spread", drift_spread(d));
    if (d->note[0])
        cJSON_AddStringToObject(o, "noise", d->note);
}
