/*
 * policyledger/engine.h -- events, and the engine: its options, opening, closing, statistics.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_ENGINE_H
#define POLICYLEDGER_ENGINE_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/engine.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum pl_event_kind {
    PL_EVENT_RUN_STARTED = 1,    /**< a run starts or continues */
    PL_EVENT_CALL_STARTED = 2,   /**< a call is about to execute its callee */
    PL_EVENT_CALL_SERVED = 3,    /**< a call's result came from the ledger */
    PL_EVENT_CALL_COMPLETED = 4, /**< a call executed and has its result */
    PL_EVENT_CALL_FAILED = 5,    /**< a call ended in an error result or
                                      failed the run (status says which) */
    PL_EVENT_STEP_APPENDED = 6,  /**< a new step was appended (not yet
                                      durable: see PL_EVENT_COMMIT) */
    PL_EVENT_STEP_REPLAYED = 7,  /**< an append matched the recorded step */
    PL_EVENT_COMMIT = 8,         /**< appended steps became durable; seq is
                                      how many */
    PL_EVENT_CODE_CHANGED = 9,   /**< a replayed call was recorded by other
                                      code (detail and diff name both) */
    PL_EVENT_RUN_SUSPENDED = 10, /**< the run suspended (step_type
                                      PL_STEP_SUSPEND), or parked at a
                                      wait (PL_STEP_WAIT; detail: the
                                      event waited for, NULL for a
                                      sleep); path and seq say where */
    PL_EVENT_RUN_COMPLETED = 11, /**< completed, or continued as new */
    PL_EVENT_RUN_FAILED = 12,    /**< failed (status: the pl_status), or
                                      ended cancelled (status
                                      PL_ECANCELLED, detail the reason);
                                      a run cancelled while suspended or
                                      submitted runs nothing and reports
                                      no event */
    PL_EVENT_DIVERGED = 13,      /**< a replayed step differs from the one
                                      recorded (diff says how); the run
                                      stops with PL_ENONDET */
    PL_EVENT_STORE_LOST = 14,    /**< pl_worker_run(): the store stopped
                                      answering, or refuses writes (full:
                                      PL_ENOSPC, PL_EMAPFULL; not writable:
                                      PL_EACCES); detail is the cause,
                                      status the pl_status; no run_id.
                                      Once per outage.  Refused writes are
                                      tried again by one thread, poll_ms
                                      later, then twice as long each time
                                      up to 5 s; each try makes the cut-off
                                      run's call in flight again */
    PL_EVENT_STORE_BACK = 15,    /**< pl_worker_run(): the store answers
                                      again (detail says after how long);
                                      the runs the outage cut off are taken
                                      back at once, their leases being the
                                      worker's own */
    PL_EVENT_SCHEDULE_FAILED = 16, /**< pl_worker_run() and
                                       pl_engine_wake(): firing the
                                       schedules failed (status and detail
                                       say why, schedule names the one
                                       that failed; no run_id); a worker
                                       tries again a second later.  Also
                                       pl_engine_wake()'s failure to
                                       execute a run a tick of it started
                                       (cancelled meanwhile, say): schedule
                                       names the schedule, run_id the run,
                                       detail starts "schedule 'NAME': " */
    PL_EVENT_VERSION = 17,       /**< a pl_ctx_version() point: detail is
                                      the change id, version the version
                                      the run takes; step_type is
                                      PL_STEP_SIDE_EFFECT when its marker
                                      is recorded (seq: the marker), 0 when
                                      the run was recorded before the
                                      change (PL_VERSION_DEFAULT); status
                                      PL_ECODEVERSION when this code does
                                      not support that version (the run
                                      stops there), PL_ENEWERCODE when
                                      newer code recorded it (the run is
                                      left for that code) */
    PL_EVENT_LEASE_LOST = 18,    /**< a run's lease was lost: this
                                      process stalled longer than lease_ms
                                      and another worker took the run (or,
                                      keyed, its place): the run stops at
                                      its next commit, which writes nothing
                                      (status PL_EBUSY, detail why), and a
                                      worker goes on with the others; the
                                      call it was in may run again where
                                      the run went.  Once an execution */
    PL_EVENT_RUN_STOPPED = 19    /**< an execution stopped with no end of
                                      the run (none of the events above
                                      ended it): status says why,
                                      PL_ECHECK (a check reached where the
                                      record ends), PL_ENEWERCODE (left
                                      for newer code), PL_ENONDET (a
                                      replay diverged), or a failure of
                                      the store or of this process (the
                                      run stays as it was, to go on from
                                      its last durable step); detail is
                                      the message */
} pl_event_kind;

/** @return "run_started", "call_served", ... or NULL. */
const char *pl_event_kind_name(pl_event_kind kind);

/**
 * A recorded step set beside what replay produced in its place, for
 * PL_EVENT_DIVERGED (the first difference of a run) and
 * PL_EVENT_CODE_CHANGED (a call that replays the same under other code).
 *
 * The code identities say which code stands behind the step: the step's own
 * for an `action_call` (its callee's code_version or plugin build id), else
 * that of the invocation that appended it (named by its caller's
 * `action_call`, or for the root by the run's record).  recorded_code is
 * what the ledger names, NULL when it names none; new_code what the
 * registry has now, NULL when it has none.
 */
typedef struct pl_replay_diff {
    const char *step_id;          /**< "<path>:<seq>" of the position */
    pl_step_type recorded_type;   /**< the recorded step */
    const char *recorded_actor;
    const char *recorded_payload; /**< compact JSON, cut to about 200
                                       bytes ("..."); NULL if unreadable */
    const char *recorded_code;
    pl_step_type new_type;        /**< the new step; 0 when the policy
                                       ended there and appended none */
    const char *new_actor;        /**< NULL when new_type is 0 */
    const char *new_payload;      /**< as recorded_payload; NULL when the
                                       engine expected a step of its own
                                       (a call's result, a resume) */
    const char *new_code;
} pl_replay_diff;

/** One transition.  Every pointer is borrowed for the callback's duration. */
typedef struct pl_event {
    pl_event_kind kind;
    const char *run_id;
    const char *path;       /**< invocation path ("0" is the root) */
    uint32_t seq;           /**< step events: the step; call events: the
                                 action_call's position in the caller */
    const char *policy;     /**< call events: the callee; step events: the
                                 actor; run events: the root policy */
    pl_step_type step_type; /**< step events */
    int status;             /**< failures: the pl_status (0 for an error
                                 result) */
    uint64_t elapsed_ns;    /**< call and run ends, commits */
    const char *detail;     /**< a reason, an error code, or NULL */
    const pl_replay_diff *diff; /**< PL_EVENT_DIVERGED and
                                     PL_EVENT_CODE_CHANGED; else NULL */
    uint64_t tokens_in;  /**< PL_EVENT_CALL_COMPLETED and _FAILED of an
                              executed call whose result carries the
                              numbers "tokens_in" and "tokens_out" (an
                              LLM policy's usage, policyledger_llm.h):
                              the model's input tokens; else 0 */
    uint64_t tokens_out; /**< likewise, the output tokens */
    int version;         /**< PL_EVENT_VERSION: the version; else 0 */
    const char *schedule; /**< PL_EVENT_SCHEDULE_FAILED: the name of the
                               schedule whose firing (or its tick's run)
                               failed (the first of them), NULL when the
                               store failed before any; else NULL */
} pl_event;

/**
 * Event callback.  Called synchronously on the thread running the run (and
 * on a fan-out's threads, concurrently: pl_ctx_call_all()); it must not
 * call back into the engine for the same run.
 */
typedef void (*pl_event_fn)(const pl_event *event, void *user);

/* ------------------------------------------------------------------------ */
/* Engine                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum pl_durability {
    PL_DURABILITY_SYNC = 0,   /**< fsync per commit (default) */
    PL_DURABILITY_GROUP = 1,  /**< concurrent runs share commits and fsyncs */
    PL_DURABILITY_PROCESS = 2 /**< no fsync: survives process crashes only */
} pl_durability;

/** @return "sync", "group", "process" or NULL. */
const char *pl_durability_name(pl_durability d);

/** Parse "sync", "group" or "process".  @return PL_OK or PL_EINVAL. */
int pl_durability_parse(pl_durability *out, const char *name);

/* Version 2 appended read_only, version 3 host_id and lease_ms, version 4
 * no_create, version 5 retain_ms and tombstone_ms, version 6
 * retain_failed_ms. */
#define PL_ENGINE_OPTIONS_VERSION 6

/** The longest retention rule (pl_engine_options.retain_ms and
 *  .retain_failed_ms, pl_worker_options' the same), in milliseconds: the
 *  longest age pl_engine_prune() takes, some 146,000 years. */
#define PL_RETAIN_MS_MAX ((uint64_t)INT64_MAX / 2000)

/** The most reader slots an engine takes (pl_engine_options.max_readers):
 *  LMDB's lock file holds 64 bytes a slot, 4 MiB at this bound.  Each
 *  read transaction open at once, in every process of the store, holds
 *  one; more is PL_EINVAL (UINT_MAX made a lock file of 256 GiB). */
#define PL_MAX_READERS 65536u

/** Engine options.  Initialise with PL_ENGINE_OPTIONS_INIT. */
typedef struct pl_engine_options {
    unsigned version;          /**< PL_ENGINE_OPTIONS_VERSION */
    pl_durability durability;  /**< default PL_DURABILITY_SYNC */
    /* map_size, map_size_max and max_readers are LMDB's: a PostgreSQL
     * store has no map and no reader table, and ignores them, as it
     * ignores a value LMDB would take; a value their rules refuse
     * (map_size above map_size_max, max_readers above PL_MAX_READERS) is
     * PL_EINVAL on either store, before anything is opened. */
    size_t map_size;           /**< initial map size; 0 = 64 MiB, or
                                    map_size_max when that is smaller;
                                    one the process cannot map is
                                    PL_ENOMEM, naming it */
    size_t map_size_max;       /**< growth limit; 0 = no limit; a
                                    map_size above it is PL_EINVAL */
    unsigned max_readers;      /**< LMDB reader slots; 0 = 126; at
                                    most PL_MAX_READERS */
    size_t max_payload;        /**< largest encoded payload; 0 = 16 MiB;
                                    at most 1 GiB (more is PL_EINVAL) */
    pl_event_fn on_event;      /**< may be NULL */
    void *event_user;          /**< passed to on_event */
    /**
     * Since version 2.  Open an existing store for reading only: never
     * create one (a missing path is PL_ENOTFOUND, a file that is not a
     * store PL_ECORRUPT), never write, never take a run's ownership.  Works
     * while another process writes the store.  Every call that would write
     * fails with PL_ESTATE: pl_run_start() (in every if_exists mode),
     * pl_run_resume(), a pl_run_continue() that would execute (a run not
     * completed), and the writers of runs.h and time.h; a check
     * (pl_run_options.check) and the replay of a completed run, which
     * write nothing, work.  Steps a writer has committed in
     * PL_DURABILITY_GROUP but not yet moved from its journal are not seen
     * until the writer (or any writable engine) moves them.
     */
    bool read_only;
    /**
     * Since version 3.  This engine's host in its worker id (host id, pid
     * and process start time), which names the holder of every run lease
     * it takes: NULL = the PL_WORKER_HOST environment variable, else the
     * host name.  Engines on different machines sharing a PostgreSQL store
     * need distinct host ids; 1 to 255 bytes of UTF-8 with no control
     * characters (else PL_EINVAL).
     */
    const char *host_id;
    /**
     * Since version 3.  How long a run's lease lasts, in milliseconds: 0 =
     * 30000.  The engine renews its leases every lease_ms / 3 from a thread
     * of its own, also while a call blocks; a run whose lease has expired
     * (its worker died or stopped renewing) may be taken by any worker.
     * At least 100.
     */
    unsigned lease_ms;
    /**
     * Since version 4.  Open an existing store only, for writing: never
     * create one.  A missing file, directory or PostgreSQL schema is
     * PL_ENOTFOUND, an empty file PL_ECORRUPT, and nothing is created.
     * false (the default) creates the store when it is missing.
     */
    bool no_create;
    /**
     * Since version 5.  The retention rule: runs that have ended (completed,
     * failed, cancelled, superseded, continued) whose last write is at
     * least this many milliseconds old are deleted by the engine's workers
     * (pl_worker_run(), see pl_worker_options.retain_ms), leaving
     * tombstones.  0 (the default) keeps every run.  Since version 6 it
     * is the rule of the failed and cancelled runs only while
     * retain_failed_ms is 0.  At most PL_RETAIN_MS_MAX (more:
     * pl_engine_open() fails with PL_EINVAL, naming the field).
     */
    uint64_t retain_ms;
    /**
     * Since version 5.  How long a deleted run's tombstone keeps its id,
     * in milliseconds: 0 = 7 days; more than PL_RETAIN_MS_MAX: for good.
     */
    uint64_t tombstone_ms;
    /**
     * Since version 6.  The retention rule of the runs that ended failed
     * or cancelled, in place of retain_ms for them: kept this many
     * milliseconds after their last write, to be looked into, while
     * completed ones go after retain_ms (see
     * pl_worker_options.retain_failed_ms, which overrides it for a
     * worker).  0 (the default): retain_ms applies to them too.  At most
     * PL_RETAIN_MS_MAX.
     */
    uint64_t retain_failed_ms;
} pl_engine_options;

#define PL_ENGINE_OPTIONS_INIT                                                 \
    { PL_ENGINE_OPTIONS_VERSION, PL_DURABILITY_SYNC, 0, 0, 0, 0, NULL, NULL,   \
      false, NULL, 0, false, 0, 0, 0 }

/**
 * Open (creating if needed) a store and an engine on it.
 * @param[out] out      caller owns; close with pl_engine_close().
 * @param path          an existing directory (LMDB's data.mdb and lock.mdb
 *                      go inside), or a file path (the data file; the lock
 *                      file is PATH-lock); or a postgresql:// (postgres://)
 *                      connection URI, which opens a PostgreSQL store in
 *                      the schema its `schema=NAME` parameter names
 *                      (default "policyledger"), creating it if needed;
 *                      `answer_timeout_ms=N` bounds each statement's wait
 *                      for the server's answer (1 to 86400000; absent:
 *                      30000; 0, or anything but such a number, is
 *                      PL_EINVAL naming it): a server that stops answering
 *                      fails the call with PL_ESTORE ("did not answer in
 *                      N ms"), its statement is cancelled and the
 *                      connection dropped.  libpq's
 *                      connect_timeout is 30 s unless the URI sets one.
 *                      A URI libpq cannot parse, a bad schema name, or a
 *                      connection option libpq refuses (an unknown
 *                      parameter, a value such as sslmode=bogus) is
 *                      PL_EINVAL, with libpq's reason, before any
 *                      connection.  A library
 *                      built without PostgreSQL (PL_WITH_POSTGRESQL=OFF)
 *                      refuses such a URI with PL_EINVAL, saying so.
 * @param registry      borrowed: must outlive the engine and not change
 *                      while the engine runs.
 * @param opts          NULL for defaults.
 * @return PL_OK; PL_EINVAL (also max_payload over 1 GiB, a retention age
 *         past PL_RETAIN_MS_MAX, a map_size above map_size_max,
 *         max_readers above PL_MAX_READERS); PL_EBUSY (this
 *         process has the LMDB store open already; a PostgreSQL store
 *         may be opened by many engines); PL_EVERSION (store written
 *         by an unknown format); PL_ECORRUPT (not a policyledger store:
 *         another program's file, LMDB environment or schema, in which
 *         nothing is created; or a store file shorter than LMDB's record
 *         of its last page, which is never mapped); PL_ENOTFOUND (no
 *         store there, with no_create or read_only);
 *         PL_EACCES (the store cannot be written: a read-only file
 *         system or no permission; open it with read_only to read it);
 *         PL_ENOSPC; PL_EMAPFULL (map_size_max too small for a new
 *         store's databases); PL_ESTORE; PL_ENOMEM.
 */
int pl_engine_open(pl_engine **out, const char *path,
                   const pl_registry *registry,
                   const pl_engine_options *opts);

/**
 * Close an engine.  No run may be executing on it, and every pool on it
 * must have been freed.  NULL does nothing.
 */
void pl_engine_close(pl_engine *engine);

/** @return the engine's registry (borrowed); NULL for a NULL engine. */
const pl_registry *pl_engine_registry(const pl_engine *engine);

/** @return the engine's durability mode; PL_DURABILITY_SYNC, the default,
 *  for a NULL engine. */
pl_durability pl_engine_durability(const pl_engine *engine);

#define PL_STORE_STATS_VERSION 1

/** A store's size and contents, from pl_engine_stats().  Initialise with
 *  PL_STORE_STATS_INIT. */
typedef struct pl_store_stats {
    unsigned version;     /**< PL_STORE_STATS_VERSION */
    uint64_t file_bytes;  /**< the data file's size on disk */
    uint64_t map_bytes;   /**< the store's current map size */
    uint64_t page_size;   /**< bytes per page */
    uint64_t used_pages;  /**< pages in use, free ones included */
    uint64_t free_pages;  /**< pages freed and awaiting reuse */
    uint64_t runs;        /**< run records */
    uint64_t step_records; /**< stored step records (folded steps and
                                steps still in the journal not counted) */
} pl_store_stats;

#define PL_STORE_STATS_INIT { PL_STORE_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0 }

/**
 * Read a store's statistics, in one read transaction.
 * @param[out] out made with PL_STORE_STATS_INIT.
 * @return PL_OK; PL_EINVAL (NULL argument or unknown version); PL_ESTORE.
 */
int pl_engine_stats(pl_store_stats *out, pl_engine *engine);

/**
 * A number that moves whenever the store may have changed, read in one
 * cheap step, for a program that polls a store others write (a viewer):
 * while it stays the same, nothing was committed.  LMDB: the last write
 * transaction's id, moved by every process's writes; PostgreSQL: the
 * server's WAL position, which writes to other schemas and databases of
 * the server move too.  Only equality means anything.
 * @param[out] out the mark; 0 on failure.
 * @return PL_OK; PL_EINVAL (NULL argument); PL_ESTORE.
 */
int pl_engine_change_mark(uint64_t *out, pl_engine *engine);

/* clang-format on */

#endif /* POLICYLEDGER_ENGINE_H */
