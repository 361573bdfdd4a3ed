/*
 * policyledger/runs.h -- runs: starting, continuing, resuming, reading and listing them,
 * their ledgers, verifying and forking them; export and import; deleting
 * and pruning them (tombstones).
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_RUNS_H
#define POLICYLEDGER_RUNS_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/runs.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Runs                                                                     */
/* ------------------------------------------------------------------------ */

/** Run status.  Stored on disk: values never change. */
typedef enum pl_run_status {
    PL_RUN_RUNNING = 1,   /**< executing now; or its owner crashed, or
                               a stopping worker handed it back to the
                               queue (pl_run_info.owner_alive false) */
    PL_RUN_SUSPENDED = 2, /**< waiting for pl_run_resume() */
    PL_RUN_COMPLETED = 3,
    PL_RUN_FAILED = 4,    /**< failed with a recorded reason */
    PL_RUN_SUBMITTED = 5, /**< queued by pl_run_submit(), not yet taken */
    PL_RUN_WAITING = 6,   /**< parked: sleeping, or waiting for an event
                               (see Time and events) */
    PL_RUN_CANCELLED = 7, /**< ended by pl_run_cancel(), with its reason */
    PL_RUN_SUPERSEDED = 8, /**< final: replaced by a successor that goes on
                                with newer code (pl_run_upgrade()) */
    PL_RUN_CONTINUED = 9   /**< final: ended by pl_ctx_continue_as_new(); its
                                successor goes on (pl_run_info.successor) */
} pl_run_status;

/** @return "running", "suspended", "completed", "failed", "submitted",
 *  "waiting", "cancelled", "superseded", "continued" or NULL. */
const char *pl_run_status_name(pl_run_status status);

/**
 * What pl_run_start() does when pl_run_options.run_id names a run that
 * exists already.  In every mode but PL_IF_EXISTS_FAIL the existing run's
 * root must be the policy and payload asked for: another root is PL_EEXIST.
 */
typedef enum pl_if_exists {
    /** PL_EEXIST, and no outcome (the default). */
    PL_IF_EXISTS_FAIL = 0,
    /** Continue it as pl_run_continue() does (finish a crashed run, retry a
     *  failed one, replay a completed one; PL_EBUSY while another owner runs
     *  it); a suspended run gives its suspended outcome, as recorded. */
    PL_IF_EXISTS_CONTINUE = 1,
    /** Execute nothing new: a completed run gives the outcome
     *  pl_run_continue() gives (a replay that writes nothing); a suspended,
     *  waiting, failed or cancelled one its recorded outcome (its
     *  suspension, its wait, its error and reason); a superseded or
     *  continued one its status and successor; one not ended (running,
     *  its owner alive or dead, or submitted) an outcome whose status says
     *  so (PL_RUN_RUNNING or PL_RUN_SUBMITTED) and that holds nothing else:
     *  pl_run_continue() finishes it. */
    PL_IF_EXISTS_OUTCOME = 2
} pl_if_exists;

/**
 * Version 2 appended if_exists, version 3 the deadline, version 4 priority
 * and the concurrency key; an older struct (built before them) is still
 * accepted, read with what it lacks at its default.
 */
#define PL_RUN_OPTIONS_VERSION 4

/** pl_run_options.priority: from -PL_PRIORITY_MAX to PL_PRIORITY_MAX. */
#define PL_PRIORITY_MAX 1000
/** What one level of priority is worth in the queue: a run of priority p
 *  is ordered as if it had been submitted p times this much earlier (see
 *  pl_worker_run(), the queue's order). */
#define PL_PRIORITY_STEP_MS 60000
/** The longest concurrency key and rate-limit resource name, in bytes. */
#define PL_MAX_FLOW_KEY 128

/** Options for starting or continuing a run.  Use PL_RUN_OPTIONS_INIT. */
typedef struct pl_run_options {
    unsigned version;   /**< PL_RUN_OPTIONS_VERSION */
    const char *run_id; /**< start: the new run's id; NULL = a new UUIDv7 */
    /**
     * continue only: replay the recorded ledgers with every result served
     * from them and write nothing.  The first step that would be appended or
     * executed ends the replay with PL_ECHECK; a divergence with PL_ENONDET.
     * The run's record is not touched.
     */
    bool check;
    /** pl_run_start() only: what to do when run_id exists (elsewhere only
     *  PL_IF_EXISTS_FAIL is accepted).  Since version 2. */
    pl_if_exists if_exists;
    /**
     * start and submit only (since version 3): the run's deadline, recorded
     * with the run.  Past it the run fails with PL_EDEADLINE, its reason
     * beginning "DeadlineExceeded", at its next call boundary or wait; a
     * waiting run is woken for it.  deadline_ms is absolute (Unix ms),
     * deadline_in_ms relative to the call (a submitted run's time in the
     * queue counts); the earlier of the two set counts; 0 = none; one
     * past 2^53 ms (the year 287396), given or reached, is PL_EINVAL.
     * Every invocation's pl_ctx_deadline() starts with it.
     * pl_run_continue() refuses a deadline (PL_EINVAL): a run keeps the
     * one it started with.
     */
    int64_t deadline_ms;
    int64_t deadline_in_ms;
    /** pl_run_submit() only (since version 4): the run's priority in the
     *  queue, higher first; 0 by default.  See pl_worker_run(). */
    int priority;
    /**
     * pl_run_submit() only (since version 4): the run's concurrency key, 1
     * to PL_MAX_FLOW_KEY bytes of UTF-8 with no control characters (NULL:
     * none).  Workers, in every
     * process and on every host sharing the store, execute at most
     * concurrency_limit runs with the same key at once; a run over the
     * limit waits in the queue, holding no worker.  One customer's runs
     * one at a time: the customer's id as key, limit 1.  A run that waits
     * (pl_ctx_sleep_until(), an event) gives up its place while it waits
     * and takes one again when woken: a run woken while its key is full
     * stays due, holding no worker, until a place frees.
     */
    const char *concurrency_key;
    /** With concurrency_key: 1 or more (required); without it: 0. */
    unsigned concurrency_limit;
} pl_run_options;

#define PL_RUN_OPTIONS_INIT                                                    \
    { PL_RUN_OPTIONS_VERSION, NULL, false, PL_IF_EXISTS_FAIL, 0, 0, 0, NULL, 0 }

/** What a run execution ended in.  Free with pl_outcome_free(). */
typedef struct pl_outcome {
    pl_run_status status;
    char *run_id;
    /** completed: the steps the root policy returned (last = result:
     *  pl_outcome_result()). */
    pl_steps *steps;
    /** suspended: pass to pl_run_resume(). */
    char *resume_token;
    /** suspended: the prompt the suspending policy gave. */
    cJSON *prompt;
    /** suspended: the path of the suspended invocation. */
    char *suspended_path;
    /** failed: the pl_status and the recorded reason. */
    int error;
    char *reason;
    /** counters for this execution */
    uint64_t calls_served;   /**< results returned from the ledger */
    uint64_t calls_executed; /**< callees that ran */
    uint64_t steps_replayed; /**< appends that matched the record */
    uint64_t steps_appended; /**< new steps written */
    /** waiting: when it wakes (Unix ms; 0 = only for its event), and the
     *  event it waits for (NULL: a sleep); suspended_path says where. */
    int64_t wake_ms;
    char *wait_event;
    /** continued: the id of its successor, which goes on from it */
    char *successor;
} pl_outcome;

/** Free an outcome.  NULL does nothing. */
void pl_outcome_free(pl_outcome *outcome);

/**
 * The result of a completed run: the payload of the last step its root
 * policy returned.
 * @return never NULL: borrowed from @p outcome, valid until
 *         pl_outcome_free(), read-only (as pl_step_payload()).  A NULL
 *         outcome, one not completed or a root that returned no steps gives
 *         the static empty object pl_json_empty() (so does running out of
 *         memory decoding the payload).
 */
const cJSON *pl_outcome_result(const pl_outcome *outcome);

/**
 * Start a new run of @p root.
 *
 * Two channels, never to be confused: the returned status says whether the
 * engine could run the run at all; a run that ran and failed returns PL_OK
 * with (*out)->status == PL_RUN_FAILED and the recorded reason in
 * (*out)->reason.  Check both:
 *
 *     int st = pl_run_start(&outcome, engine, &root, NULL);
 *     if (st)                                     // nothing ran
 *         fprintf(stderr, "%s\n", pl_errmsg());
 *     else if (outcome->status == PL_RUN_FAILED)  // it ran, and failed
 *         fprintf(stderr, "%s\n", outcome->reason);
 *
 * @param[out] out caller owns; free with pl_outcome_free().
 * @param root made with PL_ACTION_INIT; its payload must not be NULL.
 * @return PL_OK when the run reached an outcome (completed, suspended, or
 *         failed with a recorded reason: see (*out)->status); otherwise no
 *         outcome and: PL_EINVAL (bad action or options); PL_EEXIST (run id
 *         taken, and opts->if_exists is PL_IF_EXISTS_FAIL or that run has
 *         another root; otherwise what opts->if_exists says, with the
 *         statuses of pl_run_continue()); PL_ENOTFOUND (root policy not
 *         registered); PL_EJSON;
 *         PL_ELIMIT (root payload larger than max_payload);
 *         PL_ESTORE / PL_EMAPFULL / PL_ENOSPC / PL_EACCES (the store
 *         failed; nothing durable was lost, and pl_run_continue() goes on
 *         once the cause is gone); PL_EBUSY (this process stalled longer
 *         than the run's lease and another worker took the run over:
 *         nothing more was written, see pl_engine_options.lease_ms);
 *         PL_EIO (no opts->run_id, and the system's random source failed
 *         while making one: nothing was written); PL_ENOMEM.
 */
int pl_run_start(pl_outcome **out, pl_engine *engine, const pl_action *root,
                 const pl_run_options *opts);

/**
 * Continue a run: replay it from its ledgers and go on from where it
 * stopped.  Finishes a crashed run and retries a failed one.  A completed
 * run is final: it is replayed as with opts->check, writing nothing, and
 * gives the same outcome (or PL_ENONDET / PL_ECHECK when today's code no
 * longer replays it).
 * @return as pl_run_start(), plus PL_ENOTFOUND (no such run), PL_EBUSY
 *         (another live process or thread is running it: another worker
 *         holds its lease; or another process ran it to its end while
 *         this call was taking it: continue it again to replay it),
 *         PL_ESTATE (it is suspended: use pl_run_resume(); or superseded:
 *         continue its successor, pl_run_info.successor; or cancelled: a
 *         cancelled run has ended for good, it is not retried as a failed
 *         run is; also when it was cancelled or superseded while this call
 *         was taking it: nothing is written, and no policy of it runs).  With
 *         opts->check, PL_ECHECK and PL_ENONDET are returned as such (and
 *         *out is NULL).
 */
int pl_run_continue(pl_outcome **out, pl_engine *engine, const char *run_id,
                    const pl_run_options *opts);

/**
 * Resume a suspended run: record @p answer as the answer to its suspension
 * and continue it.
 * @param answer a JSON object, never NULL; borrowed.
 * @return as pl_run_continue(), plus PL_ESTATE (the run is not suspended)
 *         and PL_ETOKEN (wrong token).
 */
int pl_run_resume(pl_outcome **out, pl_engine *engine, const char *run_id, const char *token,
                  const cJSON *answer);

/**
 * A run's record, as pl_run_get() and pl_engine_runs() report it.  Every
 * pointer in it (strings and cJSON values) belongs to the record: valid
 * until pl_run_info_free() (for pl_engine_runs(), until the visitor
 * returns), read-only.
 */
typedef struct pl_run_info {
    const char *id;
    const char *policy;       /**< root policy */
    const cJSON *payload;     /**< root payload */
    pl_run_status status;
    uint64_t steps;           /**< durable steps in all its ledgers.
                                   For a run still running (or whose
                                   owner died running it), the count its
                                   state record held at heartbeat_us: the
                                   owner rewrites that at most once a
                                   second, so steps made durable since are
                                   not in it.  No step is read to count
                                   them. */
    int64_t created_us;       /**< Unix microseconds */
    int64_t updated_us;
    int64_t heartbeat_us;     /**< last time its owner wrote */
    int64_t owner_pid;        /**< last process to run it: the one that
                                   last claimed it for an execution, as its
                                   state record says */
    const char *owner_host;
    bool owner_alive;         /**< a process still runs it: the run's lease
                                   is held, unexpired (and, on this host,
                                   its holder lives); a run without a lease
                                   (made by an older version): the record's
                                   owner lives.  The lease decides, as it
                                   fences the run's commits; it and the
                                   record name one process, but for the
                                   instant between an execution taking the
                                   lease and claiming the record, when
                                   owner_pid still names the one before. */
    uint32_t attempts;        /**< executions so far */
    int error;                /**< failed: the pl_status */
    const char *reason;       /**< failed: why; else NULL */
    const char *suspended_path; /**< suspended: where; else NULL */
    const cJSON *prompt;      /**< suspended: the prompt; else NULL */
    const char *resume_token; /**< suspended: the token pl_run_resume()
                                   takes; else NULL.  Anyone who can read
                                   the store can read it. */
    int64_t wake_ms;          /**< waiting: wakes at (Unix ms); 0 = only
                                   for its event */
    const char *wait_event;   /**< waiting: for this event; NULL: a sleep
                                   (suspended_path says where) */
    int64_t deadline_ms;      /**< the run's deadline (Unix ms), 0 = none */
    const char *code;         /**< the root policy's code identity when the
                                   run started (its code_version or plugin
                                   build id), or NULL */
    const char *successor;    /**< superseded or continued: the run that
                                   goes on from it (pl_run_upgrade(),
                                   pl_ctx_continue_as_new()); else NULL */
    const char *predecessor;  /**< the run this one supersedes or
                                   continues, or NULL */
} pl_run_info;

/**
 * Read one run's record.
 * @param[out] out caller owns; free with pl_run_info_free().
 * @return PL_OK; PL_ENOTFOUND; PL_ECORRUPT (also: a run or state record
 *         that fails its checksum, or is another run's); PL_EVERSION (a
 *         record written by an unknown format); PL_ESTORE; PL_ENOMEM.
 */
int pl_run_get(pl_run_info **out, pl_engine *engine, const char *run_id);

/** Free a run record.  NULL does nothing. */
void pl_run_info_free(pl_run_info *info);

/** Visitor for pl_engine_runs(): return non-zero to stop (that value is
 *  returned by pl_engine_runs()). */
typedef int (*pl_run_visit_fn)(const pl_run_info *info, void *user);

/**
 * Visit every run's record, without reading its steps, in the byte order
 * of the run ids (as memcmp(), a shorter id before the longer ones it
 * begins).  For the ids the engine makes (UUIDv7, which begin with the wall
 * clock's milliseconds) that is creation order, to the millisecond; ids
 * given in pl_run_options.run_id sort by their bytes among them.  A running
 * run's steps are counted as of its last heartbeat (see pl_run_info.steps).
 * Each id listed sorts after the one before: a stored id out of that order
 * (a changed key) ends the listing with PL_ECORRUPT naming the run after
 * which it stands, so no run is visited twice.
 * @return PL_OK, the visitor's non-zero value, or an error as pl_run_get().
 */
int pl_engine_runs(pl_engine *engine, pl_run_visit_fn visit, void *user);

#define PL_RUNS_OPTIONS_VERSION 2

/**
 * Told of a run whose record cannot be read (pl_runs_options.damaged): its
 * id, the status (PL_ECORRUPT: the record fails its checksum or is
 * malformed) and pl_errmsg()'s text.  Return non-zero to stop (that value
 * is returned); the listing goes on past it otherwise.  @p user is the
 * visitor's.
 */
typedef int (*pl_run_damaged_fn)(const char *run_id, int status,
                                 const char *why, void *user);

/** Where pl_engine_runs_from() starts and which way it goes.  Initialise
 *  with PL_RUNS_OPTIONS_INIT. */
typedef struct pl_runs_options {
    unsigned version;  /**< PL_RUNS_OPTIONS_VERSION */
    const char *after; /**< the cursor: start just past this id, in the
                            listing's order (it need not be a stored run);
                            NULL or "" = from the start */
    bool reverse;      /**< descending byte order of the ids: for the ids
                            the engine makes, newest first */
    /* version 2 */
    pl_run_damaged_fn damaged; /**< NULL: a run record that cannot be read
                                    ends the listing with PL_ECORRUPT,
                                    naming the run; set: that run is told
                                    here, and the listing goes on past it
                                    (an id that is itself damaged, which
                                    no cursor can pass, still ends it) */
} pl_runs_options;

#define PL_RUNS_OPTIONS_INIT { PL_RUNS_OPTIONS_VERSION, NULL, false, NULL }

/**
 * pl_engine_runs() from a cursor, either way: every run whose id sorts
 * after opts->after (with opts->reverse, before it, newest first), until
 * the visitor stops.  A page of N runs costs N records read, wherever it
 * starts: the store seeks to the cursor by key.  To page, stop after N
 * runs and pass the last id visited as the next page's after.
 * @param opts NULL = pl_engine_runs().
 * @return as pl_engine_runs(); PL_EINVAL (an unknown version, an after
 *         longer than PL_MAX_RUN_ID).
 */
int pl_engine_runs_from(pl_engine *engine, const pl_runs_options *opts,
                        pl_run_visit_fn visit, void *user);

/**
 * Read one invocation's ledger.
 * @param path an invocation path: "0" (the root), "0.3", ...
 * @param[out] out caller owns; free with pl_steps_free().  Empty if the
 *        invocation has no steps.
 * @return PL_OK; PL_ENOTFOUND (no such run); PL_EINVAL (bad path);
 *         PL_ECORRUPT (also: the run's records fail their checksums, a
 *         step is missing, or a step key is out of order, named in
 *         pl_errmsg()); PL_EVERSION; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_ledger(pl_steps **out, pl_engine *engine, const char *run_id, const char *path);

/** Visitor for pl_run_walk(): return non-zero to stop.  @p step borrowed. */
typedef int (*pl_step_visit_fn)(const pl_step *step, void *user);

/**
 * Visit every step of every ledger of a run, in tree order: an invocation's
 * steps, each followed by the ledgers of the calls it made.  Each step key
 * sorts after the one before: a key out of order (a changed key) ends the
 * walk with PL_ECORRUPT naming the run and the steps, and no step is
 * visited twice.  Each ledger's steps follow one another from step 0: a
 * step missing (a gap) ends the walk with PL_ECORRUPT naming the ledger
 * and the step, as pl_run_ledger() refuses it, after the steps before it
 * were visited.
 * @return PL_OK, the visitor's non-zero value, or an error as pl_run_ledger().
 */
int pl_run_walk(pl_engine *engine, const char *run_id, pl_step_visit_fn visit,
                void *user);

/**
 * pl_run_walk() from step @p from_step_id ("path:seq", as pl_step_id()
 * gives it) on: that step and every one after it in tree order, so a
 * reader can take a long run a page at a time, each page costing only
 * the steps it reads.  A step that is not stored starts the walk where it
 * would sit: "0.3:0" is the first step of call 0:3's callee, "0:7" the
 * root ledger's step 7 (after the subtree of the call at 0:6).  NULL walks
 * the whole run.
 * @return as pl_run_walk(); PL_EINVAL also for a malformed step id.
 */
int pl_run_walk_from(pl_engine *engine, const char *run_id,
                     const char *from_step_id, pl_step_visit_fn visit,
                     void *user);

/**
 * Verify a run: its run and state records match their checksums, every
 * stored step decodes, every ledger is gapless and hangs
 * off the action_call that created it, every step's stored predecessor hash
 * matches, every executed call's action_result names its callee ledger's
 * last step, the run's state names the root ledger's last step (its head,
 * for a completed, suspended, waiting, cancelled or continued run) and the
 * last step of each ledger open when the state was written (every state
 * but the one an execution writes as it fails), and a run not running
 * holds the steps its state counts.  So no step of a completed run can
 * change or vanish unnoticed; of a run not ended, none but the steps a
 * crash left after its last state record; of a run whose execution
 * failed, whose state anchors no ledger, a vanished step shows in its
 * count, a changed last step of a ledger does not.  A run submitted or
 * running has its lease (a worker takes a run by its lease alone: one
 * whose lease was deleted is taken by none, ever; continuing it by hand,
 * pl_run_continue(), executes it).
 * @return PL_OK; PL_ECORRUPT or PL_EVERSION naming the first fault in
 *         pl_errmsg(); PL_ENOTFOUND; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_verify(pl_engine *engine, const char *run_id);

/**
 * Export a run's head: the SHA-256 of its root ledger's last step, which
 * anchors every step of the run (see pl_run_verify()).  The hashes are
 * unkeyed: they detect corruption and accidental change, not a writer who
 * rewrites every hash.  To detect that too, keep the head somewhere the
 * store's writers cannot change (a log, a signed record) and later check
 * that pl_run_verify() passes and pl_run_head() still gives the same bytes.
 * @return PL_OK; PL_ESTATE (only a completed, continued or suspended run
 *         records its head: not one running, submitted, waiting, failed,
 *         cancelled or superseded); PL_ENOTFOUND; PL_EINVAL;
 *         PL_ECORRUPT; PL_EVERSION; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_head(uint8_t out[PL_HASH_LEN], pl_engine *engine,
                const char *run_id);

/**
 * Fork a run: make a new run whose ledgers are @p run_id's up to, not
 * including, step @p at_step_id of its root ledger.  The new run holds the
 * root steps before that step and the whole callee ledger of every call
 * among them that was answered before it (a call whose result falls at or
 * after the cut is copied without its callee's steps, so the new run runs
 * it again).  Steps keep their records (times, payloads, code identities);
 * their hashes are made anew, chained from the new run's own genesis hash,
 * so pl_run_verify() checks the new run on its own.  The old run is only
 * read.
 *
 * The new run has the old one's root policy, payload, actions, seed and
 * deadline (pl_run_info.deadline_ms, so an upgrade's successor has it
 * too), and its concurrency key and limit (pl_run_options.concurrency_key)
 * as the old run holds them when the new run is written: it is the same
 * work again, so a worker takes it only while the key has room (an
 * upgrade's successor replaces its run under the key).  Not its priority:
 * it is queued afresh.  A run holds its key while it is queued, running
 * or waiting; one suspended or failed holds none (the key goes with its
 * lease), and neither does its fork.  It is left `running` with no
 * owner: continue it with
 * pl_run_continue() (a recovery tool's "finish every run whose owner is
 * gone" finishes it too), and it replays the copied steps and goes on
 * with the code loaded now.
 * Its lease is handed to the queue: a worker (pl_worker_run()) of any
 * process that registers its root policy takes it too, as it takes a run
 * whose owner is gone, so a fork made where the root policy is not
 * registered (there pl_run_continue() refuses it, PL_ENOTFOUND) is
 * continued by such a process.  A
 * call at the cut whose `action_call` was copied without a result counts as
 * in flight at a crash: its policy's in-doubt rule applies.
 *
 * The new run is written by two commits: should the process die between
 * them, it is left `failed` with a reason saying the fork did not complete.
 *
 * @param[out] out_new_id the new run's id; caller owns, free with free().
 * @param at_step_id a step of the root ledger, "0:<seq>"; "0:0" forks
 *        before the first step (the same root action, run afresh).
 * @param new_id the new run's id, or NULL for a new UUIDv7.
 * @return PL_OK; PL_EINVAL (NULL argument, a bad run id, a step id that is
 *         not "0:<seq>"); PL_ENOTFOUND (no such run, or its root ledger has
 *         no such step); PL_EBUSY (the run is running in a live process);
 *         PL_EEXIST (@p new_id is taken by a run, or by a deleted run's
 *         tombstone, which pl_errmsg() names; refused before anything is
 *         written); PL_ESTATE (a read-only engine); PL_ECORRUPT (also:
 *         the old run's concurrency key record fails its checksum, on
 *         LMDB; nothing is written); PL_EVERSION;
 *         PL_ESTORE / PL_EMAPFULL / PL_ENOSPC / PL_EACCES (the store
 *         failed; the old run is as it was, and the new run, if the
 *         failure came between the two commits, is left as above);
 *         PL_EIO (no @p new_id, and the system's random source failed
 *         while making one: nothing was written); PL_ENOMEM.
 */
int pl_run_fork(char **out_new_id, pl_engine *engine, const char *run_id,
                const char *at_step_id, const char *new_id);

/**
 * Upgrade a run that new code cannot replay (a "stranded" run): fork it as
 * pl_run_fork() does, at @p at_step_id (the root step before which its
 * replay first differs: `ledger-replay --upgrade` finds it), and end
 * @p run_id with the final status PL_RUN_SUPERSEDED.  The old run's
 * record names its successor (pl_run_info.successor) and the new run's
 * names it (pl_run_info.predecessor).  The new run is left `running` with
 * no owner: continue it with pl_run_continue(), under the new code (or
 * let a worker of the new code take it, as after pl_run_fork()).
 *
 * Side effects: every call the old run recorded at or after the cut ran
 * once already; the new run makes again those that the new code makes
 * again, under its own run id (so with other idempotency keys).  List
 * them before upgrading (`ledger-replay --upgrade ID --dry-run`).
 *
 * What was delivered to the old run and not consumed (events sent with
 * pl_run_signal(), a cancellation: its inbox) goes to the new run, in
 * delivery order, so that a wait of the new code takes an event sent
 * before the deploy, and a cancellation is seen; the old run, final,
 * never reads it.  (One delivered while the upgrade runs, after it read
 * the inbox, follows just after the transaction below; should that
 * commit fail, it stays in the old run's inbox, as pl_run_export() shows.)
 *
 * The new run's steps, its inbox, the old run's end and both links are
 * written by one transaction, which also drops the old run's lease (taken
 * before it is read, so that nobody runs or resumes it meanwhile): a crash
 * leaves the old run untouched, or superseded with its successor complete.  (A
 * crash before that commit may leave the new run `failed`, its reason
 * saying the upgrade did not complete, and the old run as it was.)
 *
 * @return as pl_run_fork() (PL_ESTATE for a read-only engine, the store's
 *         PL_ESTORE / PL_EMAPFULL / PL_ENOSPC / PL_EACCES among them), plus
 *         PL_ESTATE (the run is completed, cancelled or continued as new,
 *         which are final, or superseded already) and PL_EBUSY also when
 *         another worker holds the run's lease.
 */
int pl_run_upgrade(char **out_new_id, pl_engine *engine, const char *run_id,
                   const char *at_step_id, const char *new_id);

/* ------------------------------------------------------------------------ */
/* Export and import                                                        */
/* ------------------------------------------------------------------------ */

/**
 * Export a run as JSON lines to @p out: a first line describing the run
 * ({"kind":"run","format":2,"run":id,"run_number":N,"policy",...,"status",
 * "created_us","records":R,"head","info","state","inbox":I}: its two run
 * records as stored, in hex), then one line per step in key order (the
 * run's tree in order) with run, path, seq, id, actor, type, payload,
 * time, time_us, code, hash and prev_hash, and either "record" (the stored
 * step record, hex) or "derived":true (a folded callee's step, which has
 * no record of its own); then I lines, one per record in the run's inbox
 * in delivery order ({"kind":"inbox","run","seq","name","payload"} for an
 * event, "reason" for a cancellation, "sent_us", "record": the inbox
 * record, hex): what was delivered to it and not yet consumed.  The
 * format is written down in core/ops/export.h.
 * The export is complete: pl_run_import() makes the run again from it.
 * It is UTF-8: a byte of a string (a payload's, a code identity's, a
 * reason's) that is not part of well-formed UTF-8 is written as U+FFFD,
 * which the import takes for that byte (the record, in hex, keeps it).
 * A run being written meanwhile may fail with PL_EBUSY: export it once it
 * stops.  The store is only read (a read-only engine will do).
 * @return PL_OK; PL_EINVAL; PL_ENOTFOUND; PL_EBUSY; PL_EIO (writing to
 *         @p out failed); PL_ECORRUPT; PL_EVERSION; PL_ESTORE; PL_ENOMEM.
 */
int pl_run_export(pl_engine *engine, const char *run_id, FILE *out);

/**
 * The lines of pl_run_export(), handed to a visitor instead of printed.
 * @p line is borrowed for the call; the visitor may add fields to it (an
 * import ignores fields it does not know).  It returns 0 to go on; a
 * negative pl_status, or any other value, stops the export, which returns
 * that status (PL_EINVAL for a value that is none).
 */
typedef int (*pl_export_fn)(cJSON *line, void *user);
int pl_run_export_each(pl_engine *engine, const char *run_id,
                       pl_export_fn visit, void *user);

/**
 * Import a run exported by pl_run_export() from @p in into this engine's
 * store, as run @p new_id (NULL: the exported run's id).  Every line is
 * parsed and bound-checked, and every step's hash is recomputed from its
 * key in the exporting store and its record and checked against the
 * exported hash, its chain (previous-step hashes, step 0 against the run's
 * genesis hash, action_result links against their callee ledgers' last
 * steps), and its human fields; the first fault refuses the import, naming
 * the line and the step, and nothing is written.  Then the run is written
 * under the number this store gives it, its hashes made anew as
 * pl_run_fork() makes them, with its records restored: root policy,
 * payload, actions, seed, creation time, and status (completed, suspended
 * with its prompt and token, failed with its reason, cancelled with its
 * reason, waiting with its timer (due at its wake time or deadline, as
 * the wait set it), submitted (queued again, for the first worker to
 * take; the export holds no priority or concurrency key, so it has
 * none), or running with no owner, for pl_run_continue() or a worker
 * with its root policy to finish), and its inbox (events not yet consumed, a cancellation not yet
 * seen), so that a waiting run continues there as it would have where it
 * came from (a waiting run with an inbox is due at once, to look).
 * pl_run_verify() passes on it.  A superseded or continued run keeps the
 * ids of its links (pl_run_info.successor, .predecessor); imported under
 * another id it is a copy, from which nothing is passed on to them (an
 * event or a cancellation sent to it is refused, PL_ESTATE).  An export of format 1 (before inbox
 * lines) is read too.
 *
 * Writing takes two commits (the store numbers a run when it creates it):
 * should the process die between them, the run is left `failed` with a
 * reason saying the import did not complete, and its id stays taken.  A
 * queued or running run is created with a lease that fences the second
 * commit: should this process stall past it while another takes the run,
 * PL_EBUSY, and the run is left `failed` so.
 *
 * With a NULL @p engine the export is only checked, as above, and
 * nothing is opened or written: PL_OK means it would import (unless its
 * id is taken), *out_run_id the id it would take.  A tool checks an
 * export this way before it creates a store for it.
 *
 * @param[out] out_run_id the imported run's id; caller owns, free with
 *        free().  NULL on failure.
 * @return PL_OK; PL_EINVAL (NULL argument, bad @p new_id); PL_EJSON (a
 *         malformed line, a missing or mistyped field, a truncated line);
 *         PL_ECORRUPT (a record that does not decode, a hash or chain that
 *         does not match, lines out of key order, a duplicate or missing
 *         step: the export was changed); PL_EVERSION (another export
 *         format); PL_ELIMIT (a line longer than 64 MiB); PL_EEXIST (the
 *         run id is taken); PL_EIO; PL_ESTATE (a read-only engine);
 *         PL_EBUSY (its lease was taken, above); PL_ESTORE; PL_EMAPFULL;
 *         PL_ENOMEM.
 */
int pl_run_import(char **out_run_id, pl_engine *engine, FILE *in,
                  const char *new_id);

/* ------------------------------------------------------------------------ */
/* Retention: deleting runs, tombstones, pruning                            */
/* ------------------------------------------------------------------------ */

/*
 * A run that has ended for good (completed, failed, cancelled,
 * superseded, or continued: see pl_ctx_continue_as_new()) may be deleted:
 * its
 * records and every step go, in one transaction, so a crash at any instant
 * leaves it whole or gone, never half.  Its id keeps a TOMBSTONE (id, final
 * status, head, root policy, creation and deletion times) for
 * pl_engine_options.tombstone_ms, so that the id is not taken again by
 * mistake while callers may still retry a start with it:
 *
 *   - pl_run_start() with that id and PL_IF_EXISTS_FAIL, and pl_run_submit()
 *     and pl_run_import(), fail with PL_EEXIST, pl_errmsg() saying when the
 *     run was deleted;
 *   - pl_run_start() with PL_IF_EXISTS_OUTCOME or PL_IF_EXISTS_CONTINUE
 *     executes nothing and gives an outcome whose status is the recorded
 *     final status, with no steps, no result (pl_outcome_result() gives
 *     the empty object), error 0 and a reason saying "deleted on <time>"
 *     (a run continued as new still names its successor: see
 *     pl_ctx_continue_as_new() for its id);
 *   - pl_run_get(), pl_run_ledger() and the others give PL_ENOTFOUND;
 *     pl_run_tombstone() reads the tombstone.
 *
 * Once the tombstone has expired the id is free: a start makes a new run.
 * Expired tombstones are removed by pl_engine_prune().
 */

/**
 * Delete a run that has ended (completed, failed, cancelled, superseded
 * or continued), leaving its tombstone.
 * @return PL_OK; PL_EINVAL; PL_ENOTFOUND (no such run); PL_ESTATE (the run
 *         has not ended: running, suspended, submitted or waiting, which is
 *         never deleted); PL_EBUSY (it changed while being deleted, or a worker
 *         is replaying it: try again); PL_ECORRUPT; PL_ESTORE; PL_ENOMEM.
 *         A read-only engine gives PL_ESTATE.
 */
int pl_run_delete(pl_engine *engine, const char *run_id);

#define PL_TOMBSTONE_VERSION 1

/** A deleted run's tombstone, from pl_run_tombstone().  Initialise with
 *  PL_TOMBSTONE_INIT. */
typedef struct pl_tombstone {
    unsigned version;          /**< PL_TOMBSTONE_VERSION */
    pl_run_status status;      /**< its final status */
    bool has_head;             /**< head holds its head (pl_run_head()) */
    uint8_t head[PL_HASH_LEN];
    int64_t created_us;        /**< when it started, Unix microseconds */
    int64_t deleted_us;        /**< when it was deleted */
    int64_t expires_us;        /**< when the tombstone is forgotten */
    char policy[PL_MAX_NAME + 1]; /**< its root policy */
} pl_tombstone;

#define PL_TOMBSTONE_INIT { PL_TOMBSTONE_VERSION, (pl_run_status)0, false, {0}, 0, 0, 0, {0} }

/**
 * Read a deleted run's tombstone (also one that has expired but is not yet
 * removed: compare expires_us with the clock).
 * @return PL_OK; PL_EINVAL; PL_ENOTFOUND (no tombstone of that id: never
 *         deleted, or the tombstone is removed); PL_ECORRUPT (it fails its
 *         checksum); PL_ESTORE; PL_ENOMEM.
 */
int pl_run_tombstone(pl_tombstone *out, pl_engine *engine, const char *run_id);

/** Called by pl_engine_prune() for each run before it is deleted (@p info
 *  borrowed for the call): 0 to go on; any other value stops the prune
 *  before that run is deleted, and is returned (PL_EINVAL if it is no
 *  pl_status). */
typedef int (*pl_prune_fn)(const pl_run_info *info, void *user);

/** Called by pl_engine_prune() (since pl_prune_options version 2) for
 *  each run it chose, once what became of it is durable: @p status is
 *  PL_OK (deleted; a dry run: it would be), or why it was left as it is:
 *  PL_EBUSY (it changed after it was chosen, or a worker holds it:
 *  executing it, or replaying it), PL_ESTATE (it is no longer one the
 *  prune deletes: running again, say) or PL_ENOTFOUND (deleted
 *  meanwhile).  @p run_id is borrowed for the call.  Not called for a run
 *  the prune stopped before, nor when the transaction itself failed (the
 *  prune's status says so). */
typedef void (*pl_prune_done_fn)(const char *run_id, int status, void *user);

#define PL_PRUNE_OPTIONS_VERSION 2

/** What pl_engine_prune() deletes.  Initialise with PL_PRUNE_OPTIONS_INIT. */
typedef struct pl_prune_options {
    unsigned version;        /**< PL_PRUNE_OPTIONS_VERSION */
    /** Runs that ended (their last write, pl_run_info.updated_us) at least
     *  this long ago; 0 = whenever they ended; at most
     *  PL_RETAIN_MS_MAX. */
    uint64_t older_than_ms;
    /** Which final statuses: a bit (1u << status) for each; 0 = every
     *  final one (completed, failed, cancelled, superseded, continued).  A
     *  status that is not final (running, suspended, submitted, waiting)
     *  is PL_EINVAL: such runs are never deleted. */
    unsigned statuses;
    /** Runs deleted per transaction; 0 = 64, at most 1024. */
    unsigned batch;
    /** Delete nothing: visit (and count) what would be deleted. */
    bool dry_run;
    /** Called for each run before it is deleted (an archive's export,
     *  say); NULL = none. */
    pl_prune_fn before;
    void *user;              /**< passed to before and after */
    /** Since version 2: called for each run chosen once it is deleted or
     *  left (a run @p before was called for may still be left, changed
     *  meanwhile); NULL = none. */
    pl_prune_done_fn after;
} pl_prune_options;

#define PL_PRUNE_OPTIONS_INIT { PL_PRUNE_OPTIONS_VERSION, 0, 0, 0, false, NULL, NULL, NULL }

/**
 * Delete the runs @p opts chooses, leaving their tombstones, in
 * transactions of opts->batch runs each, so no transaction blocks the
 * store's other writers for long; and remove expired tombstones.  Runs
 * are chosen in one pass over the run records (pl_engine_runs()), each
 * checked again as it is deleted: a run that changed meanwhile is left.
 * A run whose record cannot be read (it fails its checksum) is passed
 * over and kept, its status and age unknown: the runs past it are chosen
 * and deleted all the same, and PL_ECORRUPT, naming the first such run,
 * is returned at the end.
 * A crash or kill at any instant leaves each run whole or gone.
 * @param opts NULL = PL_PRUNE_OPTIONS_INIT: every run that has ended is
 *        deleted.
 * @param[out] deleted the runs deleted (dry run: that would be); may be
 *        NULL.  A run chosen but left (changed meanwhile) is not counted:
 *        opts->after says which were left, and why.
 * @return PL_OK; PL_EINVAL; a status opts->before returned; PL_ESTATE (a
 *         read-only engine, unless dry_run); PL_ECORRUPT; PL_ESTORE;
 *         PL_ENOMEM.  Runs deleted before a failure stay deleted.
 */
int pl_engine_prune(pl_engine *engine, const pl_prune_options *opts,
                    uint64_t *deleted);

/* clang-format on */

#endif /* POLICYLEDGER_RUNS_H */
