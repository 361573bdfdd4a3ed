/*
 * policyledger/time.h -- time and events (sleeps, timers, signals, cancellation), the
 * queue and its workers, schedules.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_TIME_H
#define POLICYLEDGER_TIME_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/time.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Time and events                                                          */
/* ------------------------------------------------------------------------ */

/*
 * A run can wait: sleep (pl_ctx_sleep()), wait for a named event that
 * anyone sends it (pl_ctx_wait_event(), pl_run_signal()), and be cancelled
 * (pl_run_cancel()) or pass its deadline (pl_run_options.deadline_ms).
 *
 * DETERMINISM.  A wait's wake time is computed from the recorded clock and
 * recorded in a `wait` step, so a replay never waits from zero: a run that
 * crashed or was stopped during a sleep wakes at the original time, and a
 * run continued after it goes on at once.  What ended a wait for an event
 * is recorded in an `event` step (the event, or the timeout), and a seen
 * cancellation in a `cancel` step: a replay returns the same, whatever the
 * clock or the inbox say by then.  Only a wait at the end of a ledger looks
 * at the clock and the inbox.
 *
 * PARKING.  A wait that cannot end yet parks the run: its policy gets
 * PL_ESUSPENDED (return it, as for pl_ctx_suspend(); every caller unwinds),
 * and the run is recorded `waiting` (pl_run_info.wake_ms, .wait_event),
 * holding no thread and no memory, with a timer in the store.  A worker
 * (pl_worker_run()) takes due timers exactly once across processes and
 * hosts and continues the runs; an embedder without workers calls
 * pl_engine_wake().  A wait no longer than the engine's wait-in-place time
 * (pl_engine_set_wait_in_place(), 1 s by default) waits on its thread,
 * its `wait` step durable first (but parks in a worker asked to stop).
 *
 * EVENTS are buffered: one sent before the run waits for it waits in the
 * run's inbox.  A wait takes the first event of its name in delivery
 * order and consumes it (first wins: with several events of a name, each
 * wait takes the next; events of other names stay for the waits that ask
 * for them).  An event delivered by the time the wait looks wins over the
 * wait's timeout.
 *
 * CANCELLATION is seen at a call boundary (pl_ctx_call() and friends,
 * pl_ctx_call_all()) at the end of a ledger, and in a wait: that call or
 * wait returns PL_ECANCELLED and the run is cancelled from then on.  The
 * policy may go on to make compensating calls (a saga), recorded and
 * replayed as any call, but no wait: a sleep or a wait for an event
 * after the cancellation returns PL_ECANCELLED at once (recorded as a
 * `cancel` step), so a cancelled run never parks again; whatever the
 * policy returns, the run then ends `cancelled` with the reason.  A
 * call in flight when the cancellation arrives finishes, and its result
 * is recorded.  A callee that returns
 * PL_ECANCELLED gives its caller a "Cancelled" error result and
 * PL_ECANCELLED from the call, so a cancellation climbs to the root
 * unless a policy handles it.  Calls already running in a
 * pl_ctx_call_all() fan-out finish; the fan-out's caller sees the
 * cancellation at its next call.
 *
 * CLOCKS.  Wake times are Unix ms on this host's clock, due times on the
 * store's: on PostgreSQL, hosts whose clocks differ from the server's wake
 * runs that much late (or early, in which case the run parks again).
 */

#define PL_WAIT_FOREVER (-1) /**< pl_ctx_wait_event(): no timeout */

/**
 * Sleep @p ms milliseconds of the recorded clock (see Time and events).
 * @return PL_OK once the time has come; PL_ESUSPENDED (the run parks:
 *         return it from the policy); PL_ECANCELLED (the run was
 *         cancelled meanwhile); PL_EINVAL (a negative @p ms, a wake
 *         time past 2^53 ms: the year 287396, the largest a JSON number
 *         holds exactly; a stale context, a call of a pl_ctx_call_all()
 *         fan-out); the run-stopping statuses of pl_ctx_call(),
 *         PL_EDEADLINE among them.
 */
int pl_ctx_sleep(pl_ctx *ctx, int64_t ms);

/** As pl_ctx_sleep(), until the Unix time @p unix_ms (a time past goes on
 *  at once; the time is compared on replay). */
int pl_ctx_sleep_until(pl_ctx *ctx, int64_t unix_ms);

/**
 * Wait for the next event named @p name sent to this run with
 * pl_run_signal(), and consume it.
 * @param[out] out_payload the event's payload, a JSON object; caller owns,
 *             free with cJSON_Delete().
 * @param timeout_ms how long to wait, on the recorded clock;
 *        PL_WAIT_FOREVER for no timeout, 0 to take only what is there.
 * @return PL_OK; PL_ETIMEDOUT (recorded: a replay times out here too; the
 *         run goes on); PL_ESUSPENDED (the run parks: return it);
 *         PL_ECANCELLED; PL_EINVAL (a bad name, a timeout below -1 or
 *         ending past 2^53 ms, as for pl_ctx_sleep()); the run-stopping
 *         statuses of pl_ctx_call().
 */
int pl_ctx_wait_event(cJSON **out_payload, pl_ctx *ctx, const char *name,
                      int64_t timeout_ms);

/**
 * Send the event @p name with @p payload to run @p run_id, from any
 * process: it is durable in the run's inbox when this returns, and a run
 * waiting for it is woken.  A run continued as new
 * (pl_ctx_continue_as_new()) passes it on: it goes to the link of the
 * chain that is going on (as does a pl_run_cancel()), also past links
 * deleted (pl_run_delete(), a prune) while their tombstones last; only to
 * a successor that goes on from it (not from a copy of a link imported
 * under another id: PL_ESTATE).
 * @param[out] out NULL: deliver only (a worker, or pl_engine_wake(),
 *             continues a waiting run).  Else, when the run was waiting,
 *             it is continued here, in the caller's thread, as
 *             pl_run_continue() would, and *out is its outcome (NULL when
 *             the run was not waiting, or another process took it first,
 *             or another event came first, or the run has a concurrency
 *             key that is full, or its root policy is not registered in
 *             @p engine: the event is delivered and the run's timer wakes
 *             it, a keyed run's once its key has room, in a process that
 *             has its policy).  The delivery then rides the run's
 *             next commit: both are durable in one transaction, one sync,
 *             and nothing is until it (a crash before it leaves the run
 *             waiting, the event not delivered: send it again).
 * @param payload a JSON object; borrowed.
 * @return PL_OK; PL_ESTATE (the run has ended: completed, failed or
 *         cancelled, or superseded by an upgrade, whose successor
 *         pl_errmsg() names to send it to; for a run continued as new, the
 *         link it went on to has, also one deleted since while its
 *         tombstone lasts; nothing is delivered; also a
 *         read-only engine); PL_ENOTFOUND; PL_EINVAL; PL_EJSON; PL_ELIMIT;
 *         the store's errors; with @p out, those of pl_run_continue().
 */
int pl_run_signal(pl_outcome **out, pl_engine *engine, const char *run_id,
                  const char *name, const cJSON *payload);

/**
 * Cancel run @p run_id, from any process; the request is durable when
 * this returns.  A running run sees it at its next call boundary (see
 * Time and events; on either store, one that arrives after a call's
 * result was committed is seen at the boundary after the next commit),
 * or in the wait on its thread (a short sleep or wait for an event
 * waiting in place) it is in, which returns PL_ECANCELLED; a
 * waiting run is continued at once, here when its
 * root policy is registered in @p engine (else by the worker or
 * pl_engine_wake() of a process that has it, which its timer wakes), and
 * its wait returns PL_ECANCELLED (here, the request rides the
 * run's next commit as a signal's delivery does: with no compensating
 * call, the request, the `cancel` step, the run's end, its timer's removal
 * and its lease are one transaction); a waiting run with a concurrency key
 * that is full is not continued here: it ends when a worker or
 * pl_engine_wake() takes it once its key has room (its policy, which may
 * make compensating calls, executes under its key).  A run that ran part
 * of its work and went back to the queue (handed back by a stopping
 * worker, or its worker dead) is `running` with no live owner: it does
 * not end here, but sees the cancellation at its next call boundary once
 * a worker (or pl_run_continue()) takes it again, its replay serving what
 * it did, so its policy compensates as a running run's does.  A submitted
 * run (queued, never taken) and a suspended run end `cancelled` at once,
 * no policy of theirs running again: a suspended run's calls before its
 * suspension get no compensating call.  A run that ends before its next
 * call boundary ends as it would have: its status says whether the
 * cancellation was seen.
 * @param reason recorded with the run ("" when NULL), at most 4096 bytes.
 * @return PL_OK; PL_ESTATE (the run has ended, superseded included, as
 *         for pl_run_signal(); also a read-only engine); PL_ENOTFOUND;
 *         PL_EINVAL; the store's errors.
 */
int pl_run_cancel(pl_engine *engine, const char *run_id, const char *reason);

/**
 * Continue, in the caller's thread, every waiting run whose timer is due
 * (each taken exactly once, as a worker takes it), and report when the
 * next is due: the loop of an embedder without pl_worker_run() is
 * `pl_engine_wake(e, &next); sleep until next (or an event); repeat`.
 * The schedules' ticks due now are fired first (pl_schedule_fire(), on
 * this host's clock) and the runs they start executed here too, one after
 * the other, as pl_run_continue() executes a queued run: at once, a run
 * with a concurrency key counted under it but not held back by it (a
 * program that shares a key with workers lets the workers execute its
 * schedules' runs, which wait for the key's room).
 * A due run whose root policy is not registered in @p engine is left to
 * a process that has it: its timer is due again once the lease this wake
 * took of it runs out (pl_engine_options.lease_ms).
 * @param[out] next_due_ms when the next timer or schedule tick is due
 *             (Unix ms; 0: none); may be NULL.
 * @return PL_OK; PL_ESTATE (a read-only engine); the store's errors
 *         (taking or executing the due runs: some may not be woken);
 *         else the first failure of a schedule (see pl_schedule_fire():
 *         the due runs are woken all the same, and *next_due_ms set), or
 *         of a run its tick started that this call could not execute
 *         (PL_ESTATE: cancelled after the tick fired; a run another
 *         worker took meanwhile goes on there, no failure), also told to
 *         the engine's on_event as PL_EVENT_SCHEDULE_FAILED naming the
 *         schedule (and that run, as its run_id), with this status and
 *         pl_errmsg()'s message, "schedule 'NAME': ...", as its detail,
 *         before any waiting run is woken: a caller tells the two
 *         failures apart by it.
 */
int pl_engine_wake(pl_engine *engine, int64_t *next_due_ms);

/**
 * Waits of at most @p ms wait on their thread instead of parking the run
 * (0: every wait parks; -1: the default, 1000; any larger value: no wait
 * of at most that parks).
 * @return PL_OK; PL_EINVAL (a NULL engine, @p ms below -1).
 */
int pl_engine_set_wait_in_place(pl_engine *engine, int64_t ms);

/* ------------------------------------------------------------------------ */
/* The queue and workers                                                    */
/* ------------------------------------------------------------------------ */

/**
 * Record a run of @p root to be executed later by a worker
 * (pl_worker_run(), in this process or any other sharing the store),
 * without executing it.  The run is created `submitted`, with a lease
 * nobody holds, in one commit; the first worker to take the lease executes
 * it.  pl_run_continue() executes a submitted run at once, as a worker
 * would.
 * @param[out] out the run's id; caller owns, free with free().  May be
 *        NULL when opts->run_id names it.
 * @param root and @p opts as for pl_run_start(); the root policy must be
 *        registered here too (its code identity is recorded).
 * @return PL_OK; PL_EINVAL; PL_EEXIST (run id taken); PL_ENOTFOUND (root
 *         policy not registered); PL_EJSON; PL_ELIMIT; PL_ESTATE (a
 *         read-only engine); PL_ESTORE / PL_EMAPFULL / PL_ENOSPC /
 *         PL_EACCES (the store failed: nothing was queued); PL_EIO (no
 *         run id given, and the system's random source failed while
 *         making one: nothing was queued); PL_ENOMEM.
 */
int pl_run_submit(char **out, pl_engine *engine, const pl_action *root,
                  const pl_run_options *opts);

/* Version 2 appended retain_ms, version 3 retain_failed_ms, version 4
 * waiting and cancelled. */
#define PL_WORKER_OPTIONS_VERSION 4

/** Worker options.  Initialise with PL_WORKER_OPTIONS_INIT. */
typedef struct pl_worker_options {
    unsigned version;     /**< PL_WORKER_OPTIONS_VERSION */
    unsigned concurrency; /**< runs executed at once, each on a thread of
                               its own; 0 = 1, at most 256 */
    unsigned poll_ms;     /**< how long an idle worker waits before it
                               looks for work again; 0 = 100 (the
                               schedules are fired on time all the same:
                               at their next tick, and once a second) */
    /** Counters, written when pl_worker_run() returns (may be NULL):
     *  executions that ended completed (or continued as new), suspended
     *  (or waiting, unless @c waiting is given) and failed (or cancelled,
     *  unless @c cancelled is given), and runs taken but not finished
     *  here (handed back at a stop, taken over, or not executable: a
     *  policy not registered here, a store failure). */
    uint64_t *completed, *suspended, *failed, *skipped;
    /**
     * Since version 2.  The retention rule this worker applies: about
     * every retain_ms / 10 (at least a second, at most a minute) one of
     * its threads deletes the runs that have ended whose last write is at
     * least retain_ms old, as pl_engine_prune() does.  0 = the
     * engine's pl_engine_options.retain_ms (0 there too: none).  Since
     * version 3 it is the rule of the runs that ended completed,
     * superseded or continued, and of failed and cancelled ones only
     * while retain_failed_ms leaves them to it.  At most
     * PL_RETAIN_MS_MAX (more: pl_worker_run() fails with PL_EINVAL,
     * naming the field).
     */
    uint64_t retain_ms;
    /**
     * Since version 3.  The age of the runs that ended failed or
     * cancelled, kept to be looked into: they are deleted once their last
     * write is at least retain_failed_ms old, whatever retain_ms says
     * (longer or shorter); retain_ms is then the age of the other ended
     * runs (completed, superseded, continued), and with retain_ms 0 those
     * are kept for good.  0 = the engine's
     * pl_engine_options.retain_failed_ms; 0 there too: retain_ms applies
     * to every outcome, as before version 3.  To keep failed runs for good
     * beside a retain_ms, give a long age (100 years, say).  At most
     * PL_RETAIN_MS_MAX.  A worker with both rules prunes once a rule
     * (pl_engine_prune() with each one's statuses), at the interval the
     * shorter gives.
     */
    uint64_t retain_failed_ms;
    /**
     * Since version 4.  Counters, as the ones above: the executions that
     * ended waiting (for a time or an event) and those that ended
     * cancelled.  Each given is counted here and not in @c suspended or
     * @c failed; NULL: counted there, as before version 4.
     */
    uint64_t *waiting, *cancelled;
} pl_worker_options;

#define PL_WORKER_OPTIONS_INIT                                                 \
    { PL_WORKER_OPTIONS_VERSION, 0, 0, NULL, NULL, NULL, NULL, 0, 0,         \
      NULL, NULL }

/**
 * Execute queued and crashed runs until pl_worker_stop().  Each of
 * opts->concurrency threads takes a run whose lease is free or expired (a
 * submitted run, or a run whose worker died: one conditional update, so
 * exactly one worker takes it), executes it as pl_run_continue() would,
 * and takes the next; with no such run it takes a waiting run whose timer
 * is due (see Time and events), and with nothing to take it waits
 * opts->poll_ms (less when a timer is due sooner).  Suspended runs are
 * never taken: they wait for pl_run_resume().
 *
 * THE QUEUE'S ORDER.  Every queued or crashed run has a rank: the time it
 * was queued (by the store's clock; a run started by pl_run_start() that
 * crashed: when its lease was made) less its priority times
 * PL_PRIORITY_STEP_MS.  A worker takes the run of least rank (ties: the
 * run made first) among those it may start: a run with a concurrency key
 * may start only while fewer than its limit of runs with that key are
 * live (executing under a lease that has not expired).  So:
 *   - higher priority first, first in first out within a priority;
 *   - no starvation: a run is passed only by runs queued before it or
 *     within its priority difference's worth of time after it
 *     (PL_PRIORITY_STEP_MS a level), so every run waits a bounded time
 *     behind the work that was there or came soon after;
 *   - a run waiting for its key holds no worker and blocks no run of
 *     another key; within a key, the runs start in rank order;
 *   - a crashed run keeps its rank: it is taken again before the runs
 *     queued after it.
 * The limit binds runs taken from the queue; pl_run_continue() of a queued
 * run executes it at once (an operator's override), and counts.  A run
 * that parks (a durable sleep, a wait for an event) leaves the queue while
 * it waits, giving up its key's place: woken (by its timer, or an event
 * or a cancellation continuing it in the caller's thread), it takes a
 * place again, and while its key is full its wake waits for one (a signal
 * or cancellation then delivers alone, and the run's timer, due, wakes it
 * once a place frees).
 *
 * While it executes a run the engine renews the run's lease (see
 * pl_engine_options.lease_ms); a worker whose lease was taken over anyway
 * (it stalled longer than the lease) stops that run at its next commit
 * with PL_EBUSY, writing nothing into it.
 *
 * @note Same API on both stores: LMDB (many processes on one host) and
 *       PostgreSQL (many hosts); give each host its own
 *       pl_engine_options.host_id.
 * @param opts NULL for defaults.
 * @return PL_OK once stopped: the calls under way have finished and their
 *         runs have stopped before their next call, handed back to the
 *         queue (durable up to that call) for another worker to go on with;
 *         PL_EINVAL (bad options: a retention age past
 *         PL_RETAIN_MS_MAX among them, the field named); PL_ESTATE (a
 *         read-only engine: every worker of the engine stops);
 *         PL_ENOMEM (or threads could not be started: this worker's own
 *         failure, which stops its threads only; the engine's other
 *         workers go on).
 */
int pl_worker_run(pl_engine *engine, const pl_worker_options *opts);

/**
 * Ask every pl_worker_run() on @p engine to stop: they take no more runs,
 * let the calls under way finish, hand their runs back to the queue before
 * their next call, and return.  Async-signal-safe (it
 * sets a flag), so it may be called from a SIGTERM or SIGINT handler.  The
 * request is consumed when the last pl_worker_run() under way on the engine
 * returns (each of them stops); a stop asked before one starts makes it
 * return at once.  NULL does nothing.
 */
void pl_worker_stop(pl_engine *engine);

/* ------------------------------------------------------------------------ */
/* Schedules                                                                */
/* ------------------------------------------------------------------------ */

/*
 * A schedule starts a run of a root action at every tick of a cron
 * expression, in UTC or a named time zone.  It lives in the store, so every
 * process and host sharing the store sees it; the workers (pl_worker_run())
 * fire it, and an embedder without workers calls pl_schedule_fire().
 *
 * CRON.  Five fields: minute (0-59), hour (0-23), day of month (1-31),
 * month (1-12 or JAN-DEC), day of week (0-7 or SUN-SAT; 0 and 7 are
 * Sunday).  A field is a list (a,b), ranges (a-b), steps (x/n, where x is
 * '*', a range, or a value a meaning a to the field's maximum) and '*';
 * names in any case; or the whole expression @yearly, @annually, @monthly,
 * @weekly, @daily, @hourly, in any case too (@YEARLY).  When both day
 * fields are restricted (neither is a bare '*'), a day matches when
 * either does, as in classic cron.
 * Minute resolution: no seconds field.  An expression that can never fire
 * ("0 0 30 2 *") is refused.
 *
 * TIME ZONES.  "UTC", or a tz database name ("Europe/London") read from
 * the system's /usr/share/zoneinfo (Debian's tzdata).  Where the zone's
 * clock jumps forward, a time it skips fires at the same distance after
 * the jump (02:30 on the day New York skips 02:00-03:00 fires at 03:30
 * EDT) when the hour field names hours, and not at all when the hour
 * field is '*'; where the clock goes back, a repeated time fires once, at
 * its first occurrence, when the hour field names hours, and at both when
 * it is '*'.  This is the behaviour of classic cron and of the npm package
 * cron-parser, which the suite checks the parser against.
 *
 * TICKS AND RUNS.  A tick starts one run with the id "<name>@<tick>", the
 * tick in UTC to the minute ("nightly@2026-11-28T02:00Z"), submitted to the
 * queue (pl_run_submit()) for a worker to execute.  However many processes
 * or hosts fire at once, each tick's run is created once: the id is the
 * same for all and the store creates an id once.
 *
 * CATCH-UP.  Ticks pass unfired while nothing fires the schedule (no
 * worker ran).  When firing resumes, PL_CATCH_UP_SKIP starts none of the
 * missed ticks (only a tick less than a minute old, the one on time);
 * PL_CATCH_UP_LATEST starts the latest missed tick alone;
 * PL_CATCH_UP_ALL starts each missed tick, the last catch_up_max of them,
 * in order.  The others are skipped for good.
 *
 * OVERLAP.  PL_OVERLAP_SKIP skips a tick while the schedule's previous run
 * is still live (submitted, running, suspended or waiting; a run continued
 * as new or superseded by an upgrade is live while its successor is, a
 * continued one also once deleted, while its tombstone lasts);
 * PL_OVERLAP_ALLOW starts it anyway.
 *
 * RUN OPTIONS.  A schedule may give its ticks' runs a priority, a
 * concurrency key and its limit, and a deadline after the tick
 * (pl_schedule version 2): each run is submitted with them, as
 * pl_run_submit() with pl_run_options.priority, .concurrency_key,
 * .concurrency_limit and .deadline_ms = tick + deadline_in_ms (at most
 * 2^53 ms) would submit it, whatever rule started it (a missed tick run
 * late by a catch-up included: its deadline still counts from its tick).
 * So a nightly export under the key of the on-demand exports shares
 * their limit with them (at most limit runs of the key execute at once,
 * the schedule's and the submitted alike), and a schedule of low
 * priority yields to interactive work queued near its tick (see
 * pl_worker_run(), the queue's order).  A run waiting in the queue for
 * its key's place is live: with PL_OVERLAP_SKIP the next tick is skipped
 * while it waits.  A run past its deadline fails with PL_EDEADLINE at its
 * next call boundary or wait, as a submitted run does.
 *
 * A process fires only the schedules whose root policy it has registered
 * (the run records the policy's code identity); the others wait for a
 * process that has it.
 */

/** What a tick does while the schedule's previous run is live. */
typedef enum pl_schedule_overlap {
    PL_OVERLAP_SKIP = 0, /**< skip the tick (the default) */
    PL_OVERLAP_ALLOW = 1 /**< start it anyway */
} pl_schedule_overlap;

/** Which missed ticks start when firing resumes after a pause. */
typedef enum pl_schedule_catch_up {
    PL_CATCH_UP_SKIP = 0,   /**< none (the default) */
    PL_CATCH_UP_LATEST = 1, /**< the latest, once */
    PL_CATCH_UP_ALL = 2     /**< each, the last catch_up_max of them */
} pl_schedule_catch_up;

/* Version 2 appended what a tick's run is submitted with: priority, the
 * concurrency key and its limit, and a deadline after its tick; a version 1
 * struct is still accepted, its ticks' runs submitted without them. */
#define PL_SCHEDULE_VERSION 2

/** A schedule's definition.  Initialise with PL_SCHEDULE_INIT. */
typedef struct pl_schedule {
    unsigned version;     /**< PL_SCHEDULE_VERSION */
    const char *name;     /**< 1..100 bytes of [A-Za-z0-9._-] */
    const char *cron;     /**< the cron expression (above) */
    const char *zone;     /**< "UTC" or a tz database name; NULL = UTC */
    const char *policy;   /**< the root action of each run */
    const cJSON *payload; /**< its payload, a JSON object of at most 64 KiB
                               as text; NULL = {}; borrowed */
    pl_schedule_overlap overlap;
    pl_schedule_catch_up catch_up;
    unsigned catch_up_max; /**< PL_CATCH_UP_ALL: 1..1000 */
    /** The ticks after this Unix time (ms) are due; 0 = from now.  A time
     *  in the past makes the ticks since then missed ones (catch-up); one
     *  from the year 9000 on, when no tick comes, is refused. */
    int64_t start_ms;
    /*
     * Since version 2: what each tick's run is submitted with, as
     * pl_run_options has them for pl_run_submit() (checked as it checks
     * them, the same errors and messages).  See RUN OPTIONS above.
     */
    int priority;                /**< -PL_PRIORITY_MAX..PL_PRIORITY_MAX;
                                      0 by default */
    const char *concurrency_key; /**< 1..PL_MAX_FLOW_KEY bytes of UTF-8,
                                      no control characters; NULL: none */
    unsigned concurrency_limit;  /**< with the key: 1 or more; else 0 */
    /** The run must end within this many ms of its tick (its deadline,
     *  pl_run_options.deadline_ms, is the tick plus this); 0 = none. */
    int64_t deadline_in_ms;
} pl_schedule;

#define PL_SCHEDULE_INIT                                                       \
    { PL_SCHEDULE_VERSION, NULL, NULL, NULL, NULL, NULL, PL_OVERLAP_SKIP,      \
      PL_CATCH_UP_SKIP, 0, 0, 0, NULL, 0, 0 }

/**
 * Create schedule @p schedule->name, or replace the schedule of that name
 * (its ticks then count from start_ms, or from now; the run it started
 * last is kept, for the overlap rule: the last as the store has it when
 * the put writes, also when a tick fires meanwhile).  Durable when this
 * returns.
 * @return PL_OK; PL_EINVAL (a bad name, expression, zone, policy name,
 *         rule or run option: the message says which and why; nothing is
 *         written);
 *         PL_EJSON (a payload that is not an object); PL_ELIMIT (a payload
 *         over 64 KiB, or one pl_run_submit() would refuse each tick's run:
 *         nested deeper than PL_MAX_JSON_DEPTH, over the engine's
 *         max_payload; a new schedule in a store that holds 4096, the most
 *         it keeps: delete one first, counted in the transaction that
 *         writes it, so that puts of processes at once never pass it);
 *         PL_EBUSY (the schedule changed under the put a thousand times
 *         over, each time by another put or a tick that went through:
 *         nothing written, put it again);
 *         PL_ESTATE (a read-only engine); the store's errors; PL_ENOMEM.
 */
int pl_schedule_put(pl_engine *engine, const pl_schedule *schedule);

/**
 * Delete schedule @p name.  The runs it started stay.
 * @return PL_OK; PL_ENOTFOUND; PL_EINVAL (a NULL engine, a bad name);
 *         PL_ESTATE (a read-only engine); the store's errors.
 */
int pl_schedule_delete(pl_engine *engine, const char *name);

/**
 * Every schedule, in name order, as a JSON array of objects: "name",
 * "cron", "zone", "policy", "payload", "overlap" ("skip", "allow"),
 * "catch_up" ("skip", "latest", "all"), "catch_up_max", "priority",
 * "concurrency_key" ("" for none), "concurrency_limit", "deadline_in_ms"
 * (0 for none), "created_ms",
 * "cursor_ms" (the ticks up to it are handled), "due_ms" (the first tick
 * after the cursor: at or before @p now_ms, ticks are waiting to fire),
 * "next_ms" (the first tick after @p now_ms and the cursor) and
 * "last_run" (the id of the run it started last, or "").
 * @param[out] out caller owns; free with cJSON_Delete().  NULL on failure.
 * @return PL_OK; PL_EINVAL (a NULL argument, @p now_ms outside 0 to the
 *         year 9000); PL_ECORRUPT (a damaged schedule record: the
 *         message names it); PL_EVERSION; the store's errors; PL_ENOMEM.
 */
int pl_schedule_list(cJSON **out, pl_engine *engine, int64_t now_ms);

/**
 * Fire the schedules' ticks due at @p now_ms (Unix ms): for each schedule
 * whose policy is registered here, the ticks since it last fired, by its
 * catch-up and overlap rules.  pl_worker_run() calls it about once a
 * second; an embedder without workers calls it itself, and sleeps until
 * *next_ms.  Any number of processes may call it at once (each tick's run
 * is created once).  @p now_ms is the caller's: the clock, or in a test a
 * chosen time.
 * @param[out] started the runs this call created (may be NULL).
 * @param[out] next_ms the earliest next tick of all schedules, 0 when
 *        there is none (may be NULL).
 * @return PL_OK; PL_EINVAL (a NULL engine, @p now_ms outside 0 to the
 *         year 9000); PL_ESTATE (a read-only engine); the first
 *         failure of a schedule (a damaged record, PL_ECORRUPT, naming it:
 *         the other schedules are fired all the same); the store's errors.
 */
int pl_schedule_fire(pl_engine *engine, int64_t now_ms, size_t *started,
                     int64_t *next_ms);

/**
 * The first tick of cron expression @p cron in zone @p zone strictly after
 * @p after_ms (Unix ms, from 0 to the year 9000), by the rules above; no
 * engine needed.  Thread-safe (no setenv(), no localtime()).
 * @param zone "UTC", a tz database name, or NULL for UTC.
 * @param[out] out_ms the tick; 0 on failure.
 * @return PL_OK; PL_EINVAL (a NULL @p out_ms or @p cron, a bad expression
 *         or zone, a time out of range: the message says which and why);
 *         PL_ENOMEM.
 */
int pl_cron_next(int64_t *out_ms, const char *cron, const char *zone,
                 int64_t after_ms);

/* clang-format on */

#endif /* POLICYLEDGER_TIME_H */
