/*
 * internal.h -- the engine's data structures, shared by the core modules.
 *
 * The module map: every file of core/, by folder (tests/module_map.sh
 * checks that it names each one, and nothing else).  A module others call
 * declares what it shares in the header named after it.
 *
 *   replay/          the replay engine, from the public entry points down
 *     runner.c       the runner: start, continue, resume, ownership
 *     claim.c        a run claimed for an execution: its state's claim,
 *                    a worker's take and claim in one transaction, of a
 *                    queued run or a due one (claim.h), pl_engine_wake;
 *                    a delivery riding the run's next commit (run.h, RIDES)
 *     outcome.c      new run ids; outcomes freed and their result read,
 *                    the outcome a state record holds; a run's end
 *                    cancelled or waiting recorded
 *     fanout.c       pl_ctx_call_all: several calls at once, on threads
 *     call.c         pl_ctx_call and friends: how a call resolves (call.h)
 *     indoubt.c      recovering a call in flight at a crash (indoubt.h)
 *     callee.c       serve or execute a callee; the result ends the call
 *                    (callee.h)
 *     chain.c        the decorator chain, the policy at its end, the root
 *                    invocation (chain.h)
 *     recorded.c     now, random, uuid and side effects, recorded once
 *     version.c      pl_ctx_version: code versions inside a policy
 *     suspend.c      suspending a run for an answer from outside (suspend.h)
 *     wait.c         sleeps, waits for events, cancellation, deadlines,
 *                    a cancelled or parked run's end
 *                    (wait.h)
 *     deliver.c      pl_run_signal, pl_run_cancel: an event or a
 *                    cancellation put in a run's inbox
 *     continued.c    a run continued as new: its successor (run.h)
 *     commit.c       a run's pending steps made durable; the sync points
 *                    (commit.h)
 *     invocation.c   an invocation's ledger and cursor: append-or-compare,
 *                    the hash chain's head (invocation.h)
 *     diverge.c      a replay that differs from its ledger, as events
 *                    (diverge.h)
 *     ctx.c          a policy's context: is it the running one, its ledger
 *                    view, accessors (ctx.h)
 *     run.c          a run in execution: create, fail, free (run.h)
 *     step.c         pl_step / pl_steps
 *     path.c         invocation paths and step ids (path.h)
 *
 *   engine/          the engine's lifecycle and what it owns
 *     pool.c         many runs on a few threads; a task's commit (pl__commit)
 *     worker.c       the worker loop: queued and crashed runs taken and run
 *     lease.c        the leases of the runs this engine executes, renewed
 *     flow.c         flow control: run options' priority and key, rate
 *                    limits' budgets in the store (pl_rate_take)
 *     schedule.c     schedules: cron ticks that start runs, exactly once
 *     engine.c       engine lifecycle, commits (including group commit),
 *                    events
 *     plugin.c       policies from a shared object (registry.h)
 *     registry.c     policies by name
 *
 *   ops/             operations on stored runs
 *     runs.c         a run's records (pl_run_get) and the run list, a
 *                    page at a time
 *     inspect.c      reading ledgers, verification
 *     walk.c         a run's steps in tree order (pl_run_walk)
 *     fork.c         a new run from a prefix of another's ledgers
 *     export.c       a run as JSON lines (the format: export.h)
 *     import.c       an export back into a store, checked before written
 *     rechain.c      steps copied under another run number and id, their
 *                    hashes made anew (rechain.h)
 *     retention.c    deleting runs, tombstones, pruning (retention.h)
 *
 *   ext/             extensions on the public API alone (the build gives
 *                    them include/ and no header of ours besides ext/'s)
 *     decorators.c   loop, invoke_action
 *     decorator_retry.c    retry: bounded attempts, recorded backoff
 *     decorator_timeout.c  timeout: a cooperative deadline
 *     decorator_budget.c   budget: steps, time and model tokens
 *     decorator_cap.c      cap: a result too large for its caller
 *     decorator_rate.c     rate_limit: a budget shared through the store
 *     decorator_paginate.c paginate: every page a recorded call
 *     decorator_observe.c  observe: a raw result and what a model sees
 *     validate.c     the validate decorator
 *     schema_compile.c     JSON Schema: compiling (schema.h, draft 7)
 *     schema_eval.c  JSON Schema: validating
 *     schema_regex.c JSON Schema: patterns, ECMA-262, matched without backtracking
 *     json.c         pl_json_pack / pl_json_unpack
 *     json_calls.c   pl_steps_add_resultf, pl_ctx_invokef
 *     json_print.c   pl_json_print: numbers that read back as themselves
 *     json_parse.c   pl_json_parse: JSON text parsed whole, or refused
 *     trace.c        the JSON-lines trace writer
 *     otel.c         the OpenTelemetry exporter (PL_WITH_CURL)
 *     otel_json.c    its request body: spans as OTLP/HTTP JSON
 *     otel_none.c    its stand-in without libcurl: it refuses to open
 *
 * The store (ledger/) is beneath all of these; its map is in store.h.
 */
#ifndef PL_INTERNAL_H
#define PL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "codec.h"
#include "hash.h"
#include "platform.h"
#include "share.h"
#include "store.h"
#include "util.h"

/* ---- steps ------------------------------------------------------------------- */

struct pl_step {
    pl_step_type type;
    uint32_t seq;
    int64_t time_us;
    bool in_ledger; /* seq, id, time and prev are known */
    bool replayed;  /* matched a recorded step during this execution */
    bool decoded;   /* json is valid (possibly NULL after OOM) */
    char *actor;    /* in the same allocation as the step */
    uint8_t *mp;    /* payload, msgpack map; in the same allocation */
    size_t mp_len;
    struct pl__mp_block *mp_block; /* a large payload's bytes, shared by
                                      the steps that hold them, or NULL */
    bool listed; /* its decoded payload is in the table of shareable ones */
    char *id;    /* NULL until in a ledger; idbuf when it fits */
    char *code;  /* may be NULL */
    cJSON *json; /* decoded payload, on first use; read-only, its
                         nodes in the step's allocation or in tree */
    void *tree;  /* the block a lazily decoded json lives in */
    uint8_t prev[PL_HASH_LEN];
    bool has_hash; /* hash is known: read from the store on its own */
    uint8_t hash[PL_HASH_LEN];
    char idbuf[40];
};

struct pl_steps {
    pl_step **v;
    size_t n, cap;
    const char *default_actor; /* borrowed */
};

/* A step holding copies of the given fields.  NULL on OOM (message set). */
PL__HIDDEN pl_step *pl__step_new(pl_step_type type, const char *actor,
                                 size_t actor_len, const uint8_t *mp,
                                 size_t mp_len);
/* A step of @p type by @p actor holding the payload bytes of @p from: the
 * same bytes when @p from holds a large payload's shared block, else a
 * copy.  NULL on OOM (message set). */
PL__HIDDEN pl_step *pl__step_like(pl_step_type type, const char *actor,
                                  const pl_step *from);
/* A step from a record read with pl__rec_decode_lazy() (decoding the payload
 * checks it), with its id "<path>:<seq>".  PL_ECORRUPT or PL_ENOMEM. */
PL__HIDDEN int pl__step_from_rec(const pl__rec *rec, const char *path,
                                 pl_step **out) PL__MUST_CHECK;
/* The callee's one step that the result @p answer folds (its ledger
 * @p callee_path, first step, chained to the run's @p genesis hash), as
 * pl__step_from_rec() makes it.  PL_ECORRUPT or PL_ENOMEM. */
PL__HIDDEN int pl__step_folded(const pl__rec *answer, const uint8_t *genesis,
                               const char *callee_path,
                               pl_step **out) PL__MUST_CHECK;
/* Reading a run (ops/inspect.c, ops/walk.c): its number, its records
 * checked; the run's genesis hash, made with *hasher (created when NULL);
 * a mirror's payload lent from its caller's result (@p hold keeps that
 * record). */
PL__HIDDEN int pl__run_find_checked(pl_engine *e, const char *run_id,
                                    uint64_t *num) PL__MUST_CHECK;
PL__HIDDEN int pl__genesis_of(pl__hasher **hasher, const char *run_id,
                              uint8_t out[PL_HASH_LEN]) PL__MUST_CHECK;
PL__HIDDEN int pl__read_mirror(pl_engine *e, pl__hasher **hasher, uint64_t num,
                               const uint32_t *comps, unsigned depth,
                               const uint8_t *key, size_t klen,
                               const uint8_t *val, size_t vlen, pl__rec *rec,
                               pl__kvs *hold) PL__MUST_CHECK;
/* Every step record of run @p num in key order, after key @p after (NULL:
 * from the first), a chunk at a time (at most 256 records and 1 MiB, or
 * one larger record), to @p fn; its non-zero value stops. */
typedef int (*pl__rec_fn)(const uint8_t *key, size_t klen, const uint8_t *val,
                          size_t vlen, void *user);
PL__HIDDEN int pl__scan_run(pl_engine *e, const char *run_id, uint64_t num,
                            const uint8_t *after, size_t after_len,
                            pl__rec_fn fn, void *user) PL__MUST_CHECK;
/* Give a step its place in a ledger. */
PL__HIDDEN int pl__step_place(pl_step *s, const char *path, uint32_t seq,
                              int64_t time_us) PL__MUST_CHECK;
PL__HIDDEN int pl__steps_push(pl_steps *l, pl_step *s) PL__MUST_CHECK;
/* The step's payload as stored (a msgpack map); borrowed, as the step. */
PL__HIDDEN const uint8_t *pl__step_mp(const pl_step *s, size_t *len);
/* Add a step with an already encoded payload. */
PL__HIDDEN int pl__steps_add_mp(pl_steps *l, pl_step_type type,
                                const char *actor, const uint8_t *mp,
                                size_t mp_len) PL__MUST_CHECK;
/* Encode {"error": true, "code": code, "message": message}. */
PL__HIDDEN int pl__error_payload(pl__buf *out, const char *code,
                                 const char *message) PL__MUST_CHECK;

/* ---- registry ----------------------------------------------------------------- */

PL__HIDDEN const pl_policy_def *pl__registry_find_n(const pl_registry *reg,
                                                    const char *name,
                                                    size_t len);

/* ---- engine ------------------------------------------------------------------- */

typedef struct pl__writer pl__writer; /* batches waiting for group commit */

/* A run executing in this engine, and its lease (generation 0: none). */
typedef struct pl__active {
    uint64_t num, gen;
    atomic_bool *lost; /* the run's: set when a renewal finds it taken */
} pl__active;

/* A batch in a group commit, and what became of it. */
typedef struct pl__gc_item {
    pl__batch *batch;
    int rc;
    char msg[512]; /* pl_errmsg() of a failed commit */
} pl__gc_item;

#define PL__GROUP_MAX 256 /* batches in one group commit */

struct pl_engine {
    pl__store *store;
    const pl_registry *reg;
    pl_durability durability;
    size_t max_payload;
    pl_event_fn on_event;
    void *event_user;

    pthread_mutex_t mu; /* guards the active set and the renewer */
    pl__active *active; /* runs executing in this engine */
    size_t n_active, cap_active;

    pthread_mutex_t gc_mu; /* group commit queue */
    pl__writer *gc_head, *gc_tail;
    bool gc_leading; /* a thread is committing groups */

    int64_t pid;
    uint64_t pstart;
    char host[256]; /* the host id (pl_engine_options.host_id) */

    /* leases (lease.c) */
    char worker[PL__WORKER_ID_MAX]; /* "pid.start@host" */
    int64_t lease_us;
    pthread_cond_t renew_cv;
    pthread_t renewer;
    bool renewing, renew_stop; /* under mu */
    atomic_int worker_stop;    /* pl_worker_stop() */
    atomic_int workers;        /* pl_worker_run() calls under way: the
                                  last to return consumes the stop */

    /* retention (retention.c) */
    uint64_t retain_ms;   /* pl_engine_options.retain_ms: 0 = none */
    bool read_only;       /* pl_engine_options.read_only: nothing writes */
    int64_t tombstone_us; /* how long a tombstone keeps its id */
    /* pl_engine_options.retain_failed_ms: 0 = retain_ms */
    uint64_t retain_failed_ms;
    /* time (wait.c): waits shorter than this hold their thread */
    atomic_llong wait_in_place_ms;
};

/*
 * Commit a batch as the engine's durability mode says: in a pool's task,
 * with its thread's other tasks (pool.c); anywhere else, alone or in the
 * engine's group commit (pl__engine_commit, engine.c).
 */
PL__HIDDEN int pl__commit(pl_engine *e, pl__batch *b) PL__MUST_CHECK;

/*
 * Schedules (schedule.c).  pl_schedule_fire() with @p fn told each run id
 * created; and pl_engine_wake()'s part: fire what is due now and execute
 * the runs it starts, here; *next_ms the next tick (0: none).  On a
 * schedule's failure, @p failed (PL_MAX_NAME + 1 bytes, or NULL) gets the
 * name of the first schedule that failed ("" when none did, or the store
 * failed before any); for pl_engine_wake()'s part, when that failure is a
 * run its tick started that could not be executed here (cancelled
 * meanwhile, say), @p failed_run (PL_MAX_RUN_ID + 1 bytes, or NULL) gets
 * the run's id ("" otherwise).
 */
typedef void (*pl__schedule_run_fn)(const char *run_id, void *user);
PL__HIDDEN int pl__schedule_fire(pl_engine *e, int64_t now_ms,
                                 pl__schedule_run_fn fn, void *user,
                                 size_t *started, int64_t *next_ms,
                                 char *failed) PL__MUST_CHECK;
PL__HIDDEN int pl__schedules_wake(pl_engine *e, int64_t *next_ms, char *failed,
                                  char *failed_run) PL__MUST_CHECK;
/*
 * pl_run_submit() whose creation writes schedule @p sched_name's record
 * @p rec in the same commit, over @p expect only (pl__batch.sched_*): a
 * tick's run and the cursor moved past it are one transaction (schedule.c,
 * docs/design.md §14.1).  A taken id is PL_EEXIST as for pl_run_submit();
 * the record may have been written with it or not.  A record changed since
 * @p expect was read is PL_EBUSY: nothing written, no run made.
 */
PL__HIDDEN int pl__run_submit_sched(pl_engine *e, const pl_action *root,
                                    const pl_run_options *opts,
                                    const char *sched_name, const pl__buf *rec,
                                    const pl__buf *expect) PL__MUST_CHECK;
PL__HIDDEN int pl__engine_commit(pl_engine *e, pl__batch *b) PL__MUST_CHECK;
/*
 * Make @p n (at most PL__GROUP_MAX) batches durable together, as one writer;
 * each item's rc and msg say how its batch fared.  In group mode they join
 * the engine's group commits, and a thread that leads hands the lead on as
 * soon as these are durable; otherwise they share one transaction.  Not for
 * sync mode, where every commit is a caller's own.
 */
PL__HIDDEN void pl__engine_commit_many(pl_engine *e, pl__gc_item *items,
                                       size_t n);
/* Mark a run as executing here; PL_EBUSY when it is already. */
PL__HIDDEN int pl__engine_claim(pl_engine *e, uint64_t num,
                                const char *id) PL__MUST_CHECK;
PL__HIDDEN void pl__engine_release(pl_engine *e, uint64_t num);
PL__HIDDEN bool pl__engine_owns(pl_engine *e, uint64_t num);
/* Note that run @p num, executing here, holds its lease's generation
 * @p gen: the engine renews it until pl__engine_release(), and sets
 * *lost if a renewal finds it taken over (lease.c). */
PL__HIDDEN int pl__engine_lease(pl_engine *e, uint64_t num, uint64_t gen,
                                atomic_bool *lost) PL__MUST_CHECK;
/* Stop the renewer thread, if one runs (lease.c). */
PL__HIDDEN void pl__engine_lease_stop(pl_engine *e);
/*
 * Build the run info of run @p num from its info record and its state
 * record (@p state, or NULL: read here).  With @p lease_later, a running
 * run this engine does not execute is left with what its state record
 * says of its owner, *lease_later set for the caller to ask its lease
 * (pl__lease_alive()) (inspect.c).
 */
PL__HIDDEN int pl__run_info_build(pl_engine *e, const char *id, size_t id_len,
                                  uint64_t num, const uint8_t *info,
                                  size_t info_len, const pl__buf *state,
                                  bool *lease_later,
                                  pl_run_info **out) PL__MUST_CHECK;
/* Whether a running run that this engine does not execute has a live
 * owner by its lease; @p by_record (pl__owner_alive()) for a run without
 * a lease (lease.c). */
PL__HIDDEN bool pl__run_lease_alive(pl_engine *e, uint64_t num, bool by_record);
/* The same for a lease read already: @p l, or NULL for none. */
PL__HIDDEN bool pl__lease_alive(pl_engine *e, const pl__lease *l,
                                bool by_record);
/* Whether run options' priority and concurrency key are in range, and
 * given to pl_run_submit() only (@p submit) (flow.c); PL_EINVAL naming
 * @p fn. */
PL__HIDDEN int pl__flow_options_ok(const pl_run_options *o, const char *fn,
                                   bool submit) PL__MUST_CHECK;
/* Whether worker id @p owner names a dead process on this host. */
PL__HIDDEN bool pl__worker_dead(pl_engine *e, const char *owner);
/* PL_OK, or PL_ESTATE naming @p fn when @p e is read-only: for what would
 * write, or wait for something to write, refused before it looks. */
PL__HIDDEN int pl__engine_writable(const pl_engine *e, const char *fn);
/* Is the owner recorded in @p st a live process other than this one? */
PL__HIDDEN bool pl__owner_alive(pl_engine *e, const pl__run_state *st);

/* ---- runs and invocations ------------------------------------------------------- */

#define PL__PATH_MAX (2 + PL_MAX_DEPTH * 11)

/* The latest wake time of a wait, and the latest deadline of a run: the
 * wait step records its wake time as a JSON number, exact up to 2^53 (the
 * year 287396), and the tools show both as times. */
#define PL__TIME_MAX_MS (INT64_C(1) << 53)
#define PL__HEARTBEAT_US                                                       \
    1000000 /* how often a running run's state is
                                    rewritten */

typedef struct pl__run {
    pl_engine *e;
    char id[PL_MAX_RUN_ID + 1];
    uint64_t num;

    pl__run_state state; /* steps = durable steps; written at claim, at the
                            end, and with a commit once per heartbeat */
    int64_t state_written_us;
    bool check;          /* replay only; never write */
    bool end_said;       /* an event ended this execution (pl__emit()) */
    bool crashed_before; /* the previous execution died while running */
    char *root_code;     /* the root's code identity in the run's record */

    /* its lease (lease.c) */
    atomic_bool lease_lost; /* a renewal found it taken over */
    bool lease_told;        /* PL_EVENT_LEASE_LOST emitted */
    bool worker;            /* taken from the queue by pl_worker_run() */

    int stop;     /* 0 while going; else PL_ESUSPENDED or the failure */
    char *reason; /* the failure, recorded in the run state */

    pl__batch batch; /* steps appended since the last commit */
    /* the large strings this execution stored whole, which later steps
     * refer to (ledger/codec/share.c); made when the first is written */
    pl__share_table *share;
    pl__hasher *hasher;
    uint8_t genesis[PL_HASH_LEN]; /* what step 0 of each ledger links to */
    pl__buf scratch;              /* payload encoding */

    pl_ctx *inv[PL_MAX_DEPTH + 1]; /* the invocation at each depth */
    pl_ctx *cur; /* the innermost running one: the only usable context */

    /* time (wait.c) */
    int64_t deadline_ms; /* the run's deadline, Unix ms; 0 = none */
    bool cancelled;      /* its cancellation was seen (a cancel step) */
    char *cancel_reason;
    bool parked;           /* stop is PL_ESUSPENDED for a wait: the run
                               parks (susp_path, susp_seq: the wait step) */
    int64_t wait_until_ms; /* parked: wakes then (0: an event only) */
    char *wait_event;      /* parked: for this event; NULL: a sleep */
    /* a delivery that goes with the run's next commit (run.h, RIDES) */
    struct pl__ride *ride;
    /* its root ledger's first read, made with its take (claim.c), or
     * NULL: taken over by its first read (invocation.c) */
    pl__kvs *first_read;

    /* set when the run suspends */
    char token[33];
    char susp_path[PL__PATH_MAX];
    uint32_t susp_seq;
    pl__buf prompt;

    bool branch; /* a fan-out branch (fanout.c): one callee on a thread of
                    its own, its steps in its own batch under the run's
                    fence; never writes the run's state */
    struct pl__run *owner; /* a branch's: the run's own (its lease) */

    /* pl_ctx_continue_as_new() (continued.c): the successor's payload and
     * id, and what its creation writes */
    pl__buf cont;
    char succ_id[PL_MAX_RUN_ID + 1];
    pl__buf succ_info, succ_state;

    uint64_t served, executed, replayed, appended;
    uint64_t folded; /* steps of the batch folded into a caller's record */
} pl__run;

struct pl_ctx {
    pl__run *run;
    pl_ctx *parent;
    const pl_policy_def *def;
    unsigned depth;
    uint32_t comps[PL_MAX_DEPTH];
    uint32_t call_seq; /* the action_call in the parent that made it */
    char path[PL__PATH_MAX];
    char idem[PL_MAX_RUN_ID + PL__PATH_MAX + 16]; /* made on first use */
    uint8_t prefix[PL__PREFIX_MAX];
    size_t prefix_len;

    uint32_t next_seq;   /* where the next append goes */
    bool replaying;      /* recorded steps may remain at next_seq */
    int64_t deadline_ms; /* pl_ctx_deadline(): Unix ms, 0 = none; a callee
                            starts with its caller's */

    /* recorded steps read ahead of the cursor */
    pl__kvs ahead;
    size_t ahead_pos;
    bool ahead_end; /* that read stopped at the ledger's end */
    bool peeked;    /* rec holds the decoded record at ahead_pos */
    pl__rec rec;

    /*
     * The chain: the hash of step next_seq-1, which the next append links
     * to (and a caller's action_result, for a ledger's last step).  It is
     * made when first asked for: an append leaves its record in the run's
     * batch, and a replay reaching the end of the record keeps the last
     * recorded step.  (A callee's last step may still become a mirror,
     * so hashing it at once could be wasted.)  A commit hashes what is
     * pending before it empties the batch.
     */
    bool last_hash_ok; /* last_hash holds it */
    uint8_t last_hash[PL_HASH_LEN];
    bool hash_pending; /* else: batch entry pending_at */
    size_t pending_at;
    pl__buf last_rec; /* else: step next_seq-1's record */

    pl_steps view; /* pl_ctx_ledger(): steps 0..view.n-1, read so far */

    /* the action_calls of this ledger whose result it holds, bit seq
     * (callee.c): pl_ctx_call_step() resolves a call once */
    uint8_t *resolved;
    size_t resolved_cap; /* bytes */
};

struct pl_next {
    const pl_decorator *d;
    size_t n;
    size_t i;
};

/* What works on these lives in the modules above: a run in run.h and
 * commit.h, an invocation's cursor in invocation.h, a context in ctx.h. */

/* Monotonic nanoseconds for event timings; 0 when nobody listens (a clock
 * read is a measurable share of a call). */
static inline uint64_t pl__ev_clock(const pl__run *r)
{
    return r->e->on_event ? pl__mono_ns() : 0;
}

/* Whether a run a worker executes on this thread should stop before its
 * next call (worker.c): pl_worker_stop() on @p e, or the failure of the
 * worker whose thread it is (not another worker's). */
PL__HIDDEN bool pl__worker_stopping(const pl_engine *e);

/* An event of the engine's, not of a run's: the store lost or back
 * (worker.c), schedule @p schedule ("" or NULL: not known) failed to fire
 * (PL_EVENT_SCHEDULE_FAILED, from pl_worker_run() and pl_engine_wake()),
 * or its tick's run @p run_id ("" or NULL: none) could not be executed. */
PL__HIDDEN void pl__emit_engine(pl_engine *e, pl_event_kind kind, int status,
                                const char *detail, const char *schedule,
                                const char *run_id);
PL__HIDDEN void pl__emit(pl__run *r, pl_event_kind kind, const char *path,
                         uint32_t seq, const char *policy, pl_step_type type,
                         int status, uint64_t elapsed_ns, const char *detail);
/* A call's end (PL_EVENT_CALL_COMPLETED or _FAILED) with the model tokens
 * its result carries. */
PL__HIDDEN void pl__emit_call_end(pl__run *r, pl_event_kind kind,
                                  const char *path, uint32_t seq,
                                  const char *policy, uint64_t elapsed_ns,
                                  const char *detail, uint64_t tokens_in,
                                  uint64_t tokens_out);
/* An event that compares a recorded step with its replay (diverge.c). */
PL__HIDDEN void pl__emit_diff(pl__run *r, pl_event_kind kind, const char *path,
                              uint32_t seq, const char *policy,
                              pl_step_type type, const char *detail,
                              const pl_replay_diff *diff);

/* A version point (version.c): PL_EVENT_VERSION for change @p change, the
 * run taking @p version, @p recorded when its marker is at @p seq; @p status
 * PL_ECODEVERSION when this code does not support it, PL_ENEWERCODE when
 * newer code recorded it. */
PL__HIDDEN void pl__emit_version(pl__run *r, const char *path, uint32_t seq,
                                 const char *policy, const char *change,
                                 int version, bool recorded, int status);
#endif /* PL_INTERNAL_H */
