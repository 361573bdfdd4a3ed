/*
 * engine.c -- engine lifecycle, commits, run ownership and events.
 *
 * GROUP COMMIT
 *
 * In PL_DURABILITY_GROUP, a thread that wants its batch durable joins a queue.
 * The thread at the head is the leader: it takes every batch queued behind it
 * (up to PL__GROUP_MAX), writes them in one transaction with one fsync, marks
 * them done and hands leadership to the next waiter.  Batches that arrive
 * while a commit is in flight therefore share the next one, and every caller
 * still returns only after its own batch is durable.  If the shared commit
 * fails, each batch is retried alone, so one run's bad batch cannot fail
 * another's.  A group of two or more batches goes through the store's
 * journal, so that one commit of many runs syncs a few contiguous pages, not
 * a page per run; a lone batch goes straight to its place, as in sync mode,
 * which writes the same pages now and saves the journal's later move.
 *
 * A writer is a thread with its batch, or a pool thread (pool.c) with the
 * batches of all its tasks that wait: a group takes whole writers.  A pool
 * thread that leads hands the lead on as soon as its own batches are
 * durable, since its tasks cannot run while it commits other groups.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "retention.h"

#define LEAD_MAX 8 /* groups one leader commits before handing on */
#define REMOTE_LEASE_US (60 * 1000000LL)
#define LEASE_MS_DEFAULT 30000u
#define LEASE_MS_MIN 100u

enum { W_WAITING = 0, W_DONE = 1, W_LEAD = 2 };

struct pl__writer {
    pl__gc_item *items;
    size_t n;
    bool hand_on;           /* leads no longer than its own batches need */
    _Atomic uint32_t state; /* W_*: a futex word */
    pl__writer *next;       /* in the queue */
    pl__writer *wake[2];    /* done in the same group: wake them once done */
};

/*
 * A waiter sleeps on its own state word and is woken without any lock
 * held, so it does not wake only to block on the queue's mutex.  Once a
 * writer sees W_DONE it may return at once; waking its (stale) address
 * after that is harmless: futex waiters re-check their word.
 */
static void state_wait(_Atomic uint32_t *word)
{
    while (atomic_load_explicit(word, memory_order_acquire) == W_WAITING)
        pl__futex_wait(word, W_WAITING);
}

static void state_set(_Atomic uint32_t *word, uint32_t v)
{
    atomic_store_explicit(word, v, memory_order_release);
    pl__futex_wake(word);
}

/* ---- names ---------------------------------------------------------------------- */

static const char *const durability_names[] = {"sync", "group", "process"};

const char *pl_durability_name(pl_durability d)
{
    return (unsigned)d < PL__ARRAY_LEN(durability_names) ? durability_names[d]
                                                         : NULL;
}

int pl_durability_parse(pl_durability *out, const char *name)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_durability_parse: out is NULL");
    for (size_t i = 0; name && i < PL__ARRAY_LEN(durability_names); i++) {
        if (strcmp(name, durability_names[i]) == 0) {
            *out = (pl_durability)i;
            return PL_OK;
        }
    }
    return pl__err(PL_EINVAL, "unknown durability '%s' (sync, group, process)",
                   name ? name : "");
}

static const char *const run_status_names[] = {
    NULL,        "running", "suspended", "completed",  "failed",
    "submitted", "waiting", "cancelled", "superseded", "continued"};

const char *pl_run_status_name(pl_run_status s)
{
    return (unsigned)s < PL__ARRAY_LEN(run_status_names) ? run_status_names[s]
                                                         : NULL;
}

static const char *const event_names[] = {
    NULL,
    "run_started",
    "call_started",
    "call_served",
    "call_completed",
    "call_failed",
    "step_appended",
    "step_replayed",
    "commit",
    "code_changed",
    "run_suspended",
    "run_completed",
    "run_failed",
    "diverged",
    "store_lost",
    "store_back",
    "schedule_failed",
    "version",
    "lease_lost",
    "run_stopped",
};

const char *pl_event_kind_name(pl_event_kind k)
{
    return (unsigned)k < PL__ARRAY_LEN(event_names) ? event_names[k] : NULL;
}

/* ---- process identity --------------------------------------------------------------- */

bool pl__owner_alive(pl_engine *e, const pl__run_state *st)
{
    if (st->owner_pid <= 0)
        return false;
    if (strcmp(st->owner_host, e->host) != 0)
        return pl__now_us() - st->heartbeat_us < REMOTE_LEASE_US;
    if (st->owner_pid == e->pid)
        return false; /* this process; the active set decides */
    if (kill((pid_t)st->owner_pid, 0) != 0 && errno == ESRCH)
        return false;
    uint64_t start;
    bool zombie;
    if (!pl__proc_stat(st->owner_pid, &start, &zombie))
        return false;
    return !zombie && start == st->owner_start;
}

int pl__engine_writable(const pl_engine *e, const char *fn)
{
    return e->read_only ? pl__err(PL_ESTATE, "%s: store '%s' is open read-only",
                                  fn, pl__store_path(e->store))
                        : PL_OK;
}

/* ---- lifecycle -------------------------------------------------------------------- */

/* The largest max_payload an engine takes: 1 GiB (see pl_engine_options). */
#define PL_MAX_PAYLOAD_LIMIT ((size_t)1 << 30)

int pl_engine_open(pl_engine **out, const char *path,
                   const pl_registry *registry, const pl_engine_options *opts)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_engine_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return pl__err(PL_EINVAL, "pl_engine_open: a store path is required");
    if (!registry)
        return pl__err(PL_EINVAL, "pl_engine_open: a registry is required");
    pl_engine_options o;
    if (pl__struct_in(&o, opts, &pl__engine_options_layout, "pl_engine_open"))
        return PL_EINVAL;
    opts = &o;
    if (!pl_durability_name(opts->durability))
        return pl__err(PL_EINVAL, "pl_engine_open: unknown durability %d",
                       (int)opts->durability);
    /* a stored record's length is 32 bits (the journal's, for one): a
     * payload, with its record's header and the call that wraps it, must
     * fit with room to spare */
    if (opts->max_payload > PL_MAX_PAYLOAD_LIMIT)
        return pl__err(PL_EINVAL,
                       "pl_engine_open: max_payload %zu is larger than "
                       "the most a store can hold, %zu bytes",
                       opts->max_payload, (size_t)PL_MAX_PAYLOAD_LIMIT);
    /* a first map past the growth limit contradicts it: neither wins
     * silently (the default map_size under a smaller maximum is that
     * maximum, ledger/lmdb/lmdb_env.c) */
    if (opts->map_size && opts->map_size_max &&
        opts->map_size > opts->map_size_max)
        return pl__err(PL_EINVAL,
                       "pl_engine_open: map_size %zu is larger than "
                       "map_size_max %zu, the most the map may grow to",
                       opts->map_size, opts->map_size_max);
    /* LMDB sizes its lock file by it: UINT_MAX slots are 256 GiB */
    if (opts->max_readers > PL_MAX_READERS)
        return pl__err(PL_EINVAL,
                       "pl_engine_open: max_readers %u is more than "
                       "PL_MAX_READERS, %u",
                       opts->max_readers, PL_MAX_READERS);
    const char *host_id = opts->host_id;
    unsigned lease_ms = opts->lease_ms;
    if (!host_id)
        host_id = getenv("PL_WORKER_HOST");
    /* it names a lease's holder in the store (a PostgreSQL text column)
     * and in the tools' lines and JSON: a name's rules */
    if (host_id && !pl__name_ok(host_id))
        return pl__err(PL_EINVAL,
                       "pl_engine_open: a host id is 1 to 255 bytes of "
                       "UTF-8 with no control characters (host_id or "
                       "PL_WORKER_HOST)");
    if (lease_ms && lease_ms < LEASE_MS_MIN)
        return pl__err(PL_EINVAL,
                       "pl_engine_open: lease_ms %u is shorter than "
                       "the shortest lease, %u ms",
                       lease_ms, LEASE_MS_MIN);
    if (pl__retain_ok(opts->retain_ms, opts->retain_failed_ms,
                      "pl_engine_open"))
        return PL_EINVAL;
    pl_engine *e = calloc(1, sizeof *e);
    if (!e)
        return pl__err(PL_ENOMEM, "out of memory opening an engine");
    e->lease_us = (int64_t)(lease_ms ? lease_ms : LEASE_MS_DEFAULT) * 1000;
    e->retain_ms = opts->retain_ms;
    e->retain_failed_ms = opts->retain_failed_ms;
    /* past PL_RETAIN_MS_MAX, for good: a delete's clock plus INT64_MAX / 2
     * cannot overflow (retention.c), where a tombstone_ms near
     * INT64_MAX / 1000 wrapped to an expiry before the delete */
    e->tombstone_us = !opts->tombstone_ms ? (int64_t)7 * 24 * 3600 * 1000000
                      : opts->tombstone_ms > PL_RETAIN_MS_MAX
                          ? INT64_MAX / 2
                          : (int64_t)opts->tombstone_ms * 1000;
    /* the renewer's waits are on the monotonic clock (lease.c) */
    int cerr = pl__cond_init_mono(&e->renew_cv);
    if (cerr) {
        free(e);
        return pl__err(PL_ENOMEM,
                       "pl_engine_open: cannot make a condition "
                       "variable: %s",
                       strerror(cerr));
    }
    atomic_init(&e->worker_stop, 0);
    atomic_init(&e->workers, 0);
    atomic_init(&e->wait_in_place_ms, -1);
    e->reg = registry;
    e->durability = opts->durability;
    e->max_payload = opts->max_payload ? opts->max_payload : (size_t)16 << 20;
    e->on_event = opts->on_event;
    e->event_user = opts->event_user;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->gc_mu, NULL);
    e->pid = getpid();
    bool zombie;
    if (!pl__proc_stat(e->pid, &e->pstart, &zombie))
        e->pstart = 0;
    if (host_id)
        snprintf(e->host, sizeof e->host, "%s", host_id);
    else
        pl__host_name(e->host, sizeof e->host);
    snprintf(e->worker, sizeof e->worker, "%lld.%llu@%s", (long long)e->pid,
             (unsigned long long)e->pstart, e->host);

    e->read_only = opts->read_only;
    pl__store_options so = {
        opts->map_size,    opts->map_size_max,
        opts->max_readers, opts->durability == PL_DURABILITY_PROCESS,
        opts->read_only,   opts->no_create};
    int rc = pl__store_open(&e->store, path, &so);
    if (rc) {
        pl_engine_close(e);
        return rc;
    }
    *out = e;
    return PL_OK;
}

void pl_engine_close(pl_engine *e)
{
    if (!e)
        return;
    pl__engine_lease_stop(e);
    pl__store_close(e->store);
    pthread_cond_destroy(&e->renew_cv);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->gc_mu);
    free(e->active);
    free(e);
}

const pl_registry *pl_engine_registry(const pl_engine *e)
{
    return e ? e->reg : NULL;
}

int pl_engine_stats(pl_store_stats *out, pl_engine *e)
{
    if (!out || !e)
        return pl__err(PL_EINVAL, "pl_engine_stats: an output and an engine "
                                  "are required");
    int st = pl__struct_version_ok(out->version, &pl__store_stats_layout,
                                   "pl_engine_stats");
    pl__store_stats ss;
    if (!st)
        st = pl__store_stats_get(e->store, &ss);
    if (st)
        return st;
    pl_store_stats full = {
        PL_STORE_STATS_VERSION, ss.file_bytes, ss.map_bytes, ss.page_size,
        ss.used_pages,          ss.free_pages, ss.runs,      ss.step_records};
    pl__struct_out(out, &full, &pl__store_stats_layout);
    return PL_OK;
}
int pl_engine_change_mark(uint64_t *out, pl_engine *e)
{
    if (out)
        *out = 0;
    if (!out || !e)
        return pl__err(PL_EINVAL, "pl_engine_change_mark: an output and an "
                                  "engine are required");
    return pl__store_mark(e->store, out);
}

pl_durability pl_engine_durability(const pl_engine *e)
{
    return e ? e->durability : PL_DURABILITY_SYNC;
}

/* ---- the active set --------------------------------------------------------------- */

int pl__engine_claim(pl_engine *e, uint64_t num, const char *id)
{
    int rc = PL_OK;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active; i++) {
        if (e->active[i].num == num) {
            rc = pl__err(PL_EBUSY,
                         "run '%s' is being executed by another "
                         "thread of this process",
                         id);
            goto done;
        }
    }
    pl__active *a = pl__grow(e->active, &e->cap_active, e->n_active, sizeof *a,
                             16);
    if (!a) {
        rc = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    e->active = a;
    e->active[e->n_active++] = (pl__active){num, 0, NULL};
done:
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void pl__engine_release(pl_engine *e, uint64_t num)
{
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active; i++) {
        if (e->active[i].num == num) {
            e->active[i] = e->active[--e->n_active];
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
}

bool pl__engine_owns(pl_engine *e, uint64_t num)
{
    bool found = false;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active && !found; i++)
        found = e->active[i].num == num;
    pthread_mutex_unlock(&e->mu);
    return found;
}

/* ---- commits ------------------------------------------------------------------------ */

/* Commit @p n batches in one transaction; if that fails, each alone, so
 * one bad batch fails only itself. */
static void commit_items(pl_engine *e, pl__gc_item *const *its,
                         pl__batch **batches, size_t n, bool journal)
{
    int rc = pl__store_commit(e->store, batches, n, journal);
    for (size_t i = 0; i < n; i++) {
        pl__gc_item *it = its[i];
        it->rc = rc;
        if (rc && n > 1) /* find whose batch failed */
            it->rc = pl__store_commit(e->store, &batches[i], 1, journal);
        if (it->rc)
            snprintf(it->msg, sizeof it->msg, "%s", pl_errmsg());
    }
}

static void group_commit(pl_engine *e, pl__gc_item *items, size_t n,
                         bool hand_on)
{
    pl__writer w = {.items = items, .n = n, .hand_on = hand_on};
    /* invariant: the queue is empty, or someone leads (or is promoted to) */
    pthread_mutex_lock(&e->gc_mu);
    if (e->gc_tail)
        e->gc_tail->next = &w;
    else
        e->gc_head = &w;
    e->gc_tail = &w;
    if (!e->gc_leading) {
        e->gc_leading = true;
        atomic_store_explicit(&w.state, W_LEAD, memory_order_relaxed);
    }
    pthread_mutex_unlock(&e->gc_mu);
    state_wait(&w.state);
    if (atomic_load_explicit(&w.state, memory_order_acquire) == W_DONE) {
        for (int i = 0; i < 2; i++) /* still waiting, so still there */
            if (w.wake[i])
                state_set(&w.wake[i]->state, W_DONE);
        return;
    }

    /*
     * The leader commits the queue as it stands; if more batches queued
     * meanwhile, it commits those too, up to LEAD_MAX groups, before it hands
     * the lead on: a handoff costs a wakeup, which on a busy machine can
     * cost as much as the commit.  A pool thread hands on at once: it has
     * tasks of its own to run.
     */
    bool mine_done = false;
    for (int led = 0; !mine_done || (led < LEAD_MAX && !w.hand_on); led++) {
        pl__batch *batches[PL__GROUP_MAX];
        pl__gc_item *its[PL__GROUP_MAX];
        pl__writer *members[PL__GROUP_MAX];
        size_t n_b = 0, n_w = 0;
        pthread_mutex_lock(&e->gc_mu);
        pl__writer *x = e->gc_head;
        /* whole writers only; the first always fits (n <= PL__GROUP_MAX) */
        for (; x && n_b + x->n <= PL__GROUP_MAX; x = x->next) {
            members[n_w++] = x;
            for (size_t i = 0; i < x->n; i++) {
                its[n_b] = &x->items[i];
                batches[n_b++] = x->items[i].batch;
            }
        }
        e->gc_head = x;
        if (!x)
            e->gc_tail = NULL;
        pthread_mutex_unlock(&e->gc_mu);
        if (!n_w)
            break;

        commit_items(e, its, batches, n_b, n_b > 1); /* lone: in place */
        /*
         * Wake the group as a binary tree: member k, once awake, wakes
         * members 2k+1 and 2k+2.  The wakeups then run on every CPU, and
         * the leader goes on to its next commit after one instead of n.
         */
        size_t k = 0;
        for (size_t i = 0; i < n_w; i++) {
            if (members[i] == &w)
                mine_done = true;
            else
                members[k++] = members[i];
        }
        for (size_t i = 0; i < k; i++)
            for (size_t j = 0; j < 2; j++)
                members[i]->wake[j] = 2 * i + 1 + j < k ? members[2 * i + 1 + j]
                                                        : NULL;
        if (k)
            state_set(&members[0]->state, W_DONE);
        /* while the group works on, move a full journal: its steps are
         * durable already, and a failure leaves them for the next try */
        pl__store_maintain(e->store);
    }
    pthread_mutex_lock(&e->gc_mu);
    pl__writer *next = e->gc_head; /* hand the lead on, or lay it down */
    if (!next)
        e->gc_leading = false;
    pthread_mutex_unlock(&e->gc_mu);
    if (next) /* woken outside the lock it takes first; waits till then */
        state_set(&next->state, W_LEAD);
}

void pl__engine_commit_many(pl_engine *e, pl__gc_item *items, size_t n)
{
    if (e->durability == PL_DURABILITY_GROUP) {
        group_commit(e, items, n, true);
        return;
    }
    pl__batch *batches[PL__GROUP_MAX];
    pl__gc_item *its[PL__GROUP_MAX];
    for (size_t i = 0; i < n; i++) {
        its[i] = &items[i];
        batches[i] = items[i].batch;
    }
    commit_items(e, its, batches, n, false);
}

int pl__engine_commit(pl_engine *e, pl__batch *b)
{
    if (e->durability == PL_DURABILITY_SYNC ||
        e->durability == PL_DURABILITY_PROCESS)
        return pl__store_commit(e->store, &b, 1, false);
    pl__gc_item it = {.batch = b};
    group_commit(e, &it, 1, false);
    return it.rc ? pl__err(it.rc, "%s", it.msg) : PL_OK;
}

/* ---- events ----------------------------------------------------------------------- */

/* The fields every event has; the rest start 0 or NULL. */
static pl_event event_of(const pl__run *r, pl_event_kind kind, const char *path,
                         uint32_t seq, const char *policy, pl_step_type type,
                         const char *detail)
{
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.run_id = r->id;
    ev.path = path;
    ev.seq = seq;
    ev.policy = policy;
    ev.step_type = type;
    ev.detail = detail;
    return ev;
}

void pl__emit_engine(pl_engine *e, pl_event_kind kind, int status,
                     const char *detail, const char *schedule,
                     const char *run_id)
{
    if (!e->on_event)
        return;
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.status = status;
    ev.detail = detail;
    ev.schedule = schedule && *schedule ? schedule : NULL;
    ev.run_id = run_id && *run_id ? run_id : NULL;
    e->on_event(&ev, e->event_user);
}

void pl__emit(pl__run *r, pl_event_kind kind, const char *path, uint32_t seq,
              const char *policy, pl_step_type type, int status,
              uint64_t elapsed_ns, const char *detail)
{
    pl_engine *e = r->e;
    if (kind == PL_EVENT_RUN_COMPLETED || kind == PL_EVENT_RUN_FAILED ||
        kind == PL_EVENT_RUN_SUSPENDED || kind == PL_EVENT_LEASE_LOST ||
        kind == PL_EVENT_RUN_STOPPED)
        r->end_said = true; /* runner.c: the execution's end is told */
    if (!e->on_event)
        return;
    pl_event ev = event_of(r, kind, path, seq, policy, type, detail);
    ev.status = status;
    ev.elapsed_ns = elapsed_ns;
    e->on_event(&ev, e->event_user);
}

void pl__emit_call_end(pl__run *r, pl_event_kind kind, const char *path,
                       uint32_t seq, const char *policy, uint64_t elapsed_ns,
                       const char *detail, uint64_t tokens_in,
                       uint64_t tokens_out)
{
    pl_engine *e = r->e;
    if (!e->on_event)
        return;
    pl_event ev = event_of(r, kind, path, seq, policy, PL_STEP_ACTION_RESULT,
                           detail);
    ev.elapsed_ns = elapsed_ns;
    ev.tokens_in = tokens_in;
    ev.tokens_out = tokens_out;
    e->on_event(&ev, e->event_user);
}

void pl__emit_diff(pl__run *r, pl_event_kind kind, const char *path,
                   uint32_t seq, const char *policy, pl_step_type type,
                   const char *detail, const pl_replay_diff *diff)
{
    pl_engine *e = r->e;
    if (!e->on_event)
        return;
    pl_event ev = event_of(r, kind, path, seq, policy, type, detail);
    ev.diff = diff;
    e->on_event(&ev, e->event_user);
}

void pl__emit_version(pl__run *r, const char *path, uint32_t seq,
                      const char *policy, const char *change, int version,
                      bool recorded, int status)
{
    pl_engine *e = r->e;
    if (!e->on_event)
        return;
    pl_event ev = event_of(r, PL_EVENT_VERSION, path, seq, policy,
                           recorded ? PL_STEP_SIDE_EFFECT : (pl_step_type)0,
                           change);
    ev.version = version;
    ev.status = status;
    e->on_event(&ev, e->event_user);
}

/* How long a wait may wait on its thread (wait.c, wait_in_place_ms()). */
int pl_engine_set_wait_in_place(pl_engine *e, int64_t ms)
{
    if (!e || ms < -1)
        return pl__err(PL_EINVAL, "pl_engine_set_wait_in_place: an engine "
                                  "and ms >= 0 (-1: the default) are "
                                  "required");
    atomic_store(&e->wait_in_place_ms, (long long)ms);
    return PL_OK;
}
