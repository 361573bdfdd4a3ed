/*
 * worker.c -- the worker loop: take queued and crashed runs from the store
 * and execute them, until asked to stop.
 *
 * A run waits in the queue as a lease nobody holds (pl_run_submit()) or a
 * lease whose holder stopped renewing it (a crashed worker).  Each of the
 * worker's threads takes one such lease and claims its run in one store
 * transaction (claim.c; PostgreSQL: pl_take(), whose UPDATE takes a row
 * that SELECT ... FOR UPDATE SKIP LOCKED chose), executes the run as
 * pl_run_continue() does, and takes the next; with nothing queued, it
 * takes a waiting run whose timer is due (TIMERS in store.h) the same way:
 * the timer, the lease, the run's records read and its claim in one store
 * transaction (pl__run_take_due()).  pl_worker_stop() sets a flag that every thread checks
 * before it takes a run and while it waits, and that a run taken from the
 * queue checks before each call it starts (call.c): a stop lets the calls
 * under way finish, stops their runs before their next call, and hands
 * those runs back to the queue for another worker.
 *
 * A store that stops answering (a PostgreSQL server restarting, a network
 * gone) is reported once, as PL_EVENT_STORE_LOST with the cause, and its
 * coming back once, as PL_EVENT_STORE_BACK.  The runs the worker was
 * executing when it failed are still its own (their leases hold until they
 * run out): it takes them back as soon as the store answers again, before
 * anything from the queue, instead of leaving them `running` until their
 * leases expire.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "claim.h"
#include "internal.h"
#include "retention.h"
#include "run.h"

#define CONCURRENCY_MAX 256
#define POLL_MS_DEFAULT 100
#define NAP_MS 20 /* the longest a waiting thread sleeps between checks */
#define SCHED_LOOK_MS 1000 /* schedules are read at least this often */
/* A thread that woke for a timer and found it taken by another worker
 * looks at the next one this much after it is due (doubled at each such
 * loss, to LOST_MAX_US; a random part of it, so that the threads that lost
 * do not wake together; back to 0 once it takes a run). */
#define LOST_MIN_US 500
#define LOST_MAX_US 4000
/* A run newer code recorded (PL_ENEWERCODE, a rolling deploy) goes back to
 * the queue with its lease held this long, so that this worker does not
 * take it again at once: doubled at each such run in a row, to
 * NEWER_MAX_US, and back to NEWER_MIN_US once the thread executes another
 * run.  A worker running the newer code takes it once the lease runs out;
 * with none, it keeps being offered. */
#define NEWER_MIN_US 100000
#define NEWER_MAX_US 4000000
/* the longest wait between two tries of a store that refuses writes */
#define BACKOFF_MAX_NS 5000000000ull

typedef struct worker {
    pl_engine *e;
    unsigned poll_ms;
    pthread_mutex_t mu; /* guards the counters and fatal */
    uint64_t completed, suspended, waiting, failed, cancelled, skipped;
    int fatal; /* a read-only engine, or this worker's own failure */
    char fatal_msg[PL__ERRMSG_MAX];
    /* this worker's own failure (a thread it could not start or set up):
     * its threads stop, the engine's other workers go on (worker_stop,
     * pl_worker_stop(), stops them all) */
    atomic_int stop;
    /* the store (guarded by mu) */
    bool down;        /* its last answer was a failure */
    bool down_writes; /* one of writes refused (full, not writable) */
    uint64_t retry_ns, backoff_ns; /* then: when a thread tries again */
    uint64_t down_ns;              /* since when */
    pl__lease *retake;             /* runs cut off by the failure: still ours */
    size_t n_retake, cap_retake;
    unsigned retaken;
    /* the retention rule (pl_worker_options.retain_ms, .retain_failed_ms:
     * the failed and cancelled runs' own) */
    uint64_t retain_ms, retain_failed_ms;
    uint64_t prune_every_ns;
    _Atomic uint64_t prune_next_ns; /* when a thread prunes next */
    /* schedules (guarded by mu): when to fire them next, and whether a
     * thread is at it */
    int64_t sched_at_ms;
    bool sched_busy;
} worker;

/* Apply the retention rule when it is due: one thread at a time (the one
 * that moves prune_next_ns on), the others go on taking runs. */
static void maybe_prune(worker *w)
{
    if (!w->retain_ms && !w->retain_failed_ms)
        return;
    uint64_t now = pl__mono_ns(), due = atomic_load(&w->prune_next_ns);
    if (now < due || !atomic_compare_exchange_strong(&w->prune_next_ns, &due,
                                                     now + w->prune_every_ns))
        return;
    char msg[PL__ERRMSG_MAX];
    pl__errmsg_save(msg);
    /* a failure is retried at the next turn; the runs wait meanwhile */
    if (pl__retain(w->e, w->retain_ms, w->retain_failed_ms)) {
    }
    pl__errmsg_restore(msg);
}

/* Writes refused until the cause is gone: full (PL_ENOSPC, PL_EMAPFULL),
 * or not writable (PL_EACCES). */
static bool writes_refused(int st)
{
    return st == PL_ENOSPC || st == PL_EMAPFULL || st == PL_EACCES;
}

/* A failure of the store itself, not of the request: it stopped answering,
 * or it refuses writes. */
static bool store_fault(int st)
{
    return st == PL_ESTORE || st == PL_EIO || writes_refused(st);
}

/* The store failed with @p st: say so once; keep @p cut (a run it cut
 * off, or NULL) to take back. */
static void store_lost(worker *w, int st, const pl__lease *cut)
{
    char msg[PL__ERRMSG_MAX];
    pl__errmsg_save(msg);
    pthread_mutex_lock(&w->mu);
    if (cut && w->n_retake == w->cap_retake) {
        size_t cap = w->cap_retake ? 2 * w->cap_retake : 8;
        pl__lease *g = realloc(w->retake, cap * sizeof *g);
        if (g) {
            w->retake = g;
            w->cap_retake = cap;
        }
    }
    if (cut && w->n_retake < w->cap_retake)
        w->retake[w->n_retake++] = *cut; /* else it expires on its own */
    /* writes refused: a look that answers says nothing of them, and each
     * try of a run makes its next call again before its commit fails;
     * one thread tries again, less often each time (write_wait()) */
    w->down_writes = writes_refused(st);
    if (w->down_writes) {
        uint64_t first = (uint64_t)w->poll_ms * 1000000;
        w->backoff_ns = !w->backoff_ns                   ? first
                        : w->backoff_ns < BACKOFF_MAX_NS ? 2 * w->backoff_ns
                                                         : BACKOFF_MAX_NS;
        w->retry_ns = pl__mono_ns() + w->backoff_ns;
    }
    if (!w->down) {
        w->down = true;
        w->down_ns = pl__mono_ns();
        pl__emit_engine(w->e, PL_EVENT_STORE_LOST, st, msg, NULL, NULL);
    }
    pthread_mutex_unlock(&w->mu);
}

/* What says the store is back: a look that found nothing queued or due
 * (with nothing cut off: nothing of the worker's waits to be written), a
 * look that answered, or a run executed with no failure of the store. */
typedef enum { BACK_EMPTY, BACK_LOOK, BACK_RAN } back_sign;

/* The store answered: say so once after a failure.  After writes were
 * refused, only a run executed, or a look when nothing waits to be
 * written, says they go through again. */
static void store_back(worker *w, back_sign sign)
{
    pthread_mutex_lock(&w->mu);
    if (w->down && (!w->down_writes || sign == BACK_RAN ||
                    (sign == BACK_EMPTY && !w->n_retake))) {
        w->down = false;
        w->down_writes = false;
        w->backoff_ns = 0;
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the store answers again after %llu ms; %zu run(s) it cut "
                 "off are taken back now",
                 (unsigned long long)((pl__mono_ns() - w->down_ns) / 1000000),
                 w->n_retake);
        pl__emit_engine(w->e, PL_EVENT_STORE_BACK, 0, msg, NULL, NULL);
    }
    pthread_mutex_unlock(&w->mu);
}

/* While the store refuses writes: true while this thread should wait,
 * false when it is the one to try again (the next try pushed back). */
static bool write_wait(worker *w)
{
    pthread_mutex_lock(&w->mu);
    bool wait = false;
    if (w->down && w->down_writes) {
        uint64_t now = pl__mono_ns();
        wait = now < w->retry_ns;
        if (!wait)
            w->retry_ns = now + w->backoff_ns;
    }
    pthread_mutex_unlock(&w->mu);
    return wait;
}

/* A run the store's failure cut off, to take back now; false if none.
 * While writes are refused, the try write_wait() let through. */
static bool next_retake(worker *w, pl__lease *out)
{
    pthread_mutex_lock(&w->mu);
    bool any = (!w->down || w->down_writes) && w->n_retake > 0;
    if (any) {
        *out = w->retake[--w->n_retake];
        w->retaken++;
    }
    pthread_mutex_unlock(&w->mu);
    return any;
}

/* The stop of the worker whose thread this is (NULL: none): a run it
 * executes looks at it too (pl__worker_stopping()). */
static _Thread_local atomic_int *tl_own_stop;

bool pl__worker_stopping(const pl_engine *e)
{
    return atomic_load(&((pl_engine *)e)->worker_stop) != 0 ||
           (tl_own_stop && atomic_load(tl_own_stop) != 0);
}

static bool stopping(worker *w)
{
    return atomic_load(&w->e->worker_stop) != 0 || atomic_load(&w->stop) != 0;
}

/* This worker's own failure @p st (its message the thread's): its threads
 * stop; the engine's other workers go on. */
static void fail_own(worker *w, int st)
{
    pthread_mutex_lock(&w->mu);
    if (!w->fatal) {
        w->fatal = st;
        pl__errmsg_save(w->fatal_msg);
    }
    pthread_mutex_unlock(&w->mu);
    atomic_store(&w->stop, 1);
}

/* Sleep @p us microseconds, in naps of NAP_MS at most, unless a stop is
 * asked for: to the microsecond, so that a thread waiting for a timer
 * looks when it is due, not up to a millisecond later. */
static void idle(worker *w, int64_t us)
{
    while (us > 0 && !stopping(w)) {
        int64_t nap = us < NAP_MS * 1000 ? us : NAP_MS * 1000;
        struct timespec ts = {0, (long)nap * 1000L};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
        us -= nap;
    }
}

/*
 * Fire the schedules when their time has come (schedule.c), on one thread
 * at a time: at their next tick, and at least every SCHED_LOOK_MS, for a
 * schedule put meanwhile by another process.
 */
static void fire_schedules(worker *w)
{
    int64_t now = pl__now_us() / 1000, next = 0;
    pthread_mutex_lock(&w->mu);
    bool mine = !w->sched_busy && now >= w->sched_at_ms;
    if (mine)
        w->sched_busy = true;
    pthread_mutex_unlock(&w->mu);
    if (!mine)
        return;
    char failed[PL_MAX_NAME + 1];
    int st = pl__schedule_fire(w->e, now, NULL, NULL, NULL, &next, failed);
    if (st)
        pl__emit_engine(w->e, PL_EVENT_SCHEDULE_FAILED, st, pl_errmsg(), failed,
                        NULL);
    int64_t at = now + SCHED_LOOK_MS;
    pthread_mutex_lock(&w->mu);
    w->sched_at_ms = next && next < at ? next : at;
    w->sched_busy = false;
    pthread_mutex_unlock(&w->mu);
}

/* Microseconds from @p now_us until the schedules are next to be fired
 * (fire_schedules()): an idle thread looks then at the latest, whatever
 * its poll_ms, so that a tick fires on time (one left to a long poll would
 * pass its minute of grace, PL_CATCH_UP_SKIP's, and never start). */
static int64_t sched_in_us(worker *w, int64_t now_us)
{
    pthread_mutex_lock(&w->mu);
    int64_t at_ms = w->sched_at_ms;
    pthread_mutex_unlock(&w->mu);
    return at_ms * 1000 - now_us;
}

/*
 * What a thread takes when it has no run to take back: a queued run, or
 * else a waiting one whose timer is due, claimed and executed (*taken).  After a look that found nothing
 * (@p idle), it asks the store first whether either may be there
 * (pl__store_poll(): one round trip on PostgreSQL, where a take that
 * finds nothing costs two and a look at the timers two more), and takes
 * only what may be; a run queued since is found by the next look.  A
 * thread that starts looks first too.
 */
static int take_next(worker *w, pl__woken *wk, bool idle, pl_outcome **o,
                     pl__lease *lease, bool *taken, int64_t *next_due,
                     bool *woke)
{
    pl_engine *e = w->e;
    *woke = false;
    /* the runs of the last batch of wakes first: claimed, theirs to run */
    if (pl__woken_pending(wk)) {
        *woke = true;
        return pl__run_take_due(o, wk, lease, taken, next_due);
    }
    bool known = false, queued = true, timers = true;
    int st = idle ? pl__store_poll(e->store, &known, &queued, &timers, next_due)
                  : PL_OK;
    if (!st)
        st = queued || !known ? pl__run_take_next(o, e, lease, taken)
                              : PL_ENOTFOUND;
    if (st != PL_ENOTFOUND || *taken)
        return st;
    /* no queued run: waiting ones due?  Not looked for when none is, and
     * the next is due later by this host's clock too */
    if (known && !timers && (!*next_due || *next_due > pl__now_us()))
        return PL_ENOTFOUND;
    *next_due = 0;
    *woke = true;
    return pl__run_take_due(o, wk, lease, taken, next_due);
}

static void *work(void *arg)
{
    worker *w = arg;
    pl_engine *e = w->e;
    bool idle_last = true; /* the last look found nothing (a thread that
                              starts looks first) */
    int64_t slept_for = 0; /* the timer the last sleep waited for */
    int64_t lost_us = 0;   /* the thread's delay after a timer's due time */
    int64_t newer_us = 0;  /* the hand-back of a run newer code recorded */
    unsigned seed = (unsigned)(pl__mono_ns() ^ (uintptr_t)&seed);
    pl__woken *wk; /* this thread's batch of wakes */
    if (pl__woken_new(&wk, e)) {
        fail_own(w, PL_ENOMEM); /* this worker's, not the engine's */
        return NULL;
    }
    tl_own_stop = &w->stop;
    while (!stopping(w)) {
        if (write_wait(w)) {
            idle(w, (int64_t)w->poll_ms * 1000);
            continue;
        }
        fire_schedules(w);
        pl__lease lease;
        int st = PL_OK;
        int64_t next_due = 0;
        pl_outcome *o = NULL;
        bool taken = false; /* from the queue, claimed and executed */
        maybe_prune(w);
        bool woke = false;
        if (!next_retake(w, &lease))
            st = take_next(w, wk, idle_last, &o, &lease, &taken, &next_due,
                           &woke);
        /* a batch of wakes that took every run due it saw, executed: the
         * next look asks first, as after a look that found nothing (one
         * round trip on PostgreSQL, where taking from the queue and then
         * the timers blind costs four or five) */
        idle_last = (st == PL_ENOTFOUND && !taken) ||
                    (taken && woke && pl__woken_spent(wk));
        if (!taken && st == PL_ESTATE) {
            /* the engine's store is read-only: no worker of it ever will */
            pthread_mutex_lock(&w->mu);
            w->fatal = st;
            pl__errmsg_save(w->fatal_msg);
            pthread_mutex_unlock(&w->mu);
            atomic_store(&e->worker_stop, 1);
            break;
        }
        /* a run taken and executed answered for the store, unless its
         * execution met the store's failure (said below, with the run) */
        if (taken ? !store_fault(st) : st == PL_ENOTFOUND || !st)
            store_back(w, taken                ? BACK_RAN
                          : st == PL_ENOTFOUND ? BACK_EMPTY
                                               : BACK_LOOK);
        else if (!taken && store_fault(st))
            store_lost(w, st, NULL);
        if (st && !taken) {
            /* nothing queued or due, or the store failed (a server
             * restarting): look again later, or when the next timer is
             * due if that is sooner */
            int64_t us = (int64_t)w->poll_ms * 1000, now = pl__now_us();
            /* a timer this thread waited for, taken by another: the
             * others keep up, or soon will not, and it looks later */
            if (st == PL_ENOTFOUND && slept_for && slept_for <= now)
                lost_us = lost_us ? lost_us * 2 : LOST_MIN_US;
            lost_us = lost_us < LOST_MAX_US ? lost_us : LOST_MAX_US;
            int64_t until = next_due ? next_due - now : 0;
            if (next_due && lost_us)
                until += lost_us / 2 + rand_r(&seed) % (lost_us / 2 + 1);
            slept_for = next_due && until < us ? next_due : 0;
            if (next_due && until < us)
                us = until > 0 ? until : 1000;
            int64_t sched = sched_in_us(w, now);
            if (sched < us)
                us = sched > 1000 ? sched : 1000;
            idle(w, us);
            continue;
        }
        lost_us = 0; /* it took a run */
        slept_for = 0;
        if (!taken)
            st = pl__run_continue_leased(&o, e, &lease);
        if (store_fault(st) && !stopping(w)) {
            store_lost(w, st, &lease);
            continue; /* not counted: it goes on once the store is back */
        }
        if (!st)
            store_back(w, BACK_RAN);
        if (st == PL_ENEWERCODE) {
            /* left for newer code: back to the queue, not at once to this
             * worker (a stopping one hands it back at once) */
            newer_us = newer_us ? newer_us * 2 : NEWER_MIN_US;
            newer_us = newer_us < NEWER_MAX_US ? newer_us : NEWER_MAX_US;
            pl__run_hand_back(e, lease.run, lease.gen,
                              stopping(w) ? PL__HAND_BACK_US : newer_us);
        } else {
            newer_us = 0;
        }
        if (st && st != PL_ENEWERCODE && stopping(w)) {
            /* stopped between two calls (call.c): hand the run back, so
             * that another worker takes it now, not once the lease has
             * run out; a lease taken over meanwhile is left alone */
            pl__run_hand_back(e, lease.run, lease.gen, PL__HAND_BACK_US);
        }
        pthread_mutex_lock(&w->mu);
        if (st || !o)
            w->skipped++;
        else if (o->status == PL_RUN_COMPLETED ||
                 o->status == PL_RUN_CONTINUED) /* its successor is queued */
            w->completed++;
        else if (o->status == PL_RUN_SUSPENDED)
            w->suspended++;
        else if (o->status == PL_RUN_WAITING)
            w->waiting++;
        else if (o->status == PL_RUN_CANCELLED)
            w->cancelled++;
        else
            w->failed++;
        pthread_mutex_unlock(&w->mu);
        pl_outcome_free(o);
    }
    pl__woken_free(wk); /* its runs not executed go back to the queue */
    tl_own_stop = NULL;
    return NULL;
}

int pl_worker_run(pl_engine *e, const pl_worker_options *opts)
{
    if (!e)
        return pl__err(PL_EINVAL, "pl_worker_run: engine is NULL");
    if (e->read_only) /* nothing it would take could run: not even wait */
        return pl__engine_writable(e, "pl_worker_run");
    pl_worker_options o;
    if (pl__struct_in(&o, opts, &pl__worker_options_layout, "pl_worker_run"))
        return PL_EINVAL;
    opts = &o;
    if (opts->concurrency > CONCURRENCY_MAX)
        return pl__err(PL_EINVAL,
                       "pl_worker_run: concurrency %u is more than %d",
                       opts->concurrency, CONCURRENCY_MAX);
    if (pl__retain_ok(opts->retain_ms, opts->retain_failed_ms, "pl_worker_run"))
        return PL_EINVAL;
    worker w = {.e = e,
                .poll_ms = opts->poll_ms ? opts->poll_ms : POLL_MS_DEFAULT};
    /* field by field the worker's, else the engine's; the failed runs'
     * rule set on neither is the others' */
    w.retain_ms = opts->retain_ms ? opts->retain_ms : e->retain_ms;
    w.retain_failed_ms = opts->retain_failed_ms ? opts->retain_failed_ms
                         : e->retain_failed_ms  ? e->retain_failed_ms
                                                : w.retain_ms;
    /* the shorter rule sets the pace */
    uint64_t shorter = !w.retain_ms ? w.retain_failed_ms
                       : w.retain_failed_ms && w.retain_failed_ms < w.retain_ms
                           ? w.retain_failed_ms
                           : w.retain_ms;
    uint64_t every_ms = shorter / 10;
    every_ms = every_ms < 1000 ? 1000 : every_ms > 60000 ? 60000 : every_ms;
    w.prune_every_ns = every_ms * 1000000;
    atomic_init(&w.prune_next_ns, pl__mono_ns());
    unsigned n = opts->concurrency ? opts->concurrency : 1;
    pthread_t *th = calloc(n, sizeof *th);
    if (!th)
        return pl__err(PL_ENOMEM, "out of memory");
    atomic_fetch_add(&e->workers, 1);
    pthread_mutex_init(&w.mu, NULL);
    atomic_init(&w.stop, 0);
    int st = PL_OK;
    unsigned started = 0;
    sigset_t all, old;
    sigfillset(&all);
    /* the caller's thread takes the signals it asked for, not ours */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (; started + 1 < n; started++) {
        int err = pthread_create(&th[started], NULL, work, &w);
        if (err) {
            st = pl__err(PL_ENOMEM, "pl_worker_run: cannot start a thread: %s",
                         strerror(err));
            atomic_store(&w.stop, 1); /* its threads, not the engine's */
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!st)
        work(&w);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    /* the stop is consumed once every worker of the engine has seen it:
     * the first to return would otherwise take it back from the others,
     * one of which may be in a call, to look at it before its next */
    if (atomic_fetch_sub(&e->workers, 1) == 1)
        atomic_store(&e->worker_stop, 0);
    if (!st && w.fatal) {
        pl__errmsg_restore(w.fatal_msg);
        st = w.fatal;
    }
    pthread_mutex_destroy(&w.mu);
    free(w.retake); /* leases not taken back expire on their own */
    free(th);
    if (opts->completed)
        *opts->completed = w.completed;
    /* a version 3 caller, or one not asking apart: counted as before */
    if (opts->waiting)
        *opts->waiting = w.waiting;
    else
        w.suspended += w.waiting;
    if (opts->cancelled)
        *opts->cancelled = w.cancelled;
    else
        w.failed += w.cancelled;
    if (opts->suspended)
        *opts->suspended = w.suspended;
    if (opts->failed)
        *opts->failed = w.failed;
    if (opts->skipped)
        *opts->skipped = w.skipped;
    return st;
}

void pl_worker_stop(pl_engine *e)
{
    if (e)
        atomic_store(&e->worker_stop, 1);
}
