/*
 * lease.c -- keeping the leases of the runs this engine executes.
 *
 * A run's owner is a worker id, "pid.start@host" (the process, its start
 * time in clock ticks, and the engine's host id), holding the run's lease
 * in the store (see LEASES in ledger/store.h).  The lease is renewed by a
 * thread of the engine's own, every third of the lease, for every run in
 * the active set, in one store transaction: so a call that blocks for
 * minutes keeps its run, and a lease expires only when its process died
 * or stopped (SIGSTOP, a frozen machine, a lost network).  Renewal tied to
 * commits would take a run from a worker whose call merely took long;
 * renewal tied to the process's liveness is what "crashed" means.
 *
 * A renewal that finds a lease taken over (its generation changed: the
 * process stalled longer than the lease) marks the run lost; the run's next
 * commit fails with PL_EBUSY before it writes, and the store's fence check
 * in the commit transaction catches whatever a renewal has not seen yet.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define RENEW_MAX 1024 /* leases renewed per transaction */

/* Wait until @p us from now, or until the renewer is asked to stop.  The
 * deadline is on CLOCK_MONOTONIC (renew_cv is made so, engine.c): a wall
 * clock set back an hour would have held the renewer an hour, and every
 * lease it keeps would have expired under a process still executing. */
static void renew_wait(pl_engine *e, int64_t us)
{
    struct timespec ts = pl__mono_deadline(us);
    while (!e->renew_stop &&
           pthread_cond_timedwait(&e->renew_cv, &e->mu, &ts) != ETIMEDOUT)
        ;
}

static void *renewer(void *arg)
{
    pl_engine *e = arg;
    uint64_t runs[RENEW_MAX], gens[RENEW_MAX];
    bool lost[RENEW_MAX];
    pthread_mutex_lock(&e->mu);
    for (;;) {
        renew_wait(e, e->lease_us / 3);
        if (e->renew_stop)
            break;
        /* every lease, RENEW_MAX to a transaction; a run released
         * meanwhile moves the last entry into its slot, which may then be
         * passed over this time: the next period renews it, well within
         * the lease */
        for (size_t from = 0; from < e->n_active && !e->renew_stop;) {
            size_t n = 0;
            for (; from < e->n_active && n < RENEW_MAX; from++) {
                if (e->active[from].gen) {
                    runs[n] = e->active[from].num;
                    gens[n++] = e->active[from].gen;
                }
            }
            pthread_mutex_unlock(&e->mu);
            /* a failed renewal is tried again next time; the leases expire
             * only if the store stays unreachable for a whole lease */
            int st = pl__store_lease_renew(e->store, runs, gens, n, e->lease_us,
                                           lost);
            pthread_mutex_lock(&e->mu);
            for (size_t j = 0; !st && j < n; j++) {
                if (!lost[j])
                    continue;
                for (size_t i = 0; i < e->n_active; i++)
                    if (e->active[i].num == runs[j] &&
                        e->active[i].gen == gens[j] && e->active[i].lost)
                        atomic_store(e->active[i].lost, true);
            }
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int pl__engine_lease(pl_engine *e, uint64_t num, uint64_t gen,
                     atomic_bool *lost)
{
    int rc = PL_OK;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active; i++) {
        if (e->active[i].num == num) {
            e->active[i].gen = gen;
            e->active[i].lost = lost;
        }
    }
    if (!e->renewing && !e->renew_stop) {
        /* the renewer blocks no signal a caller means for its own threads */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int err = pthread_create(&e->renewer, NULL, renewer, e);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (err)
            rc = pl__err(PL_ENOMEM, "cannot start the lease renewer: %s",
                         strerror(err));
        else
            e->renewing = true;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void pl__engine_lease_stop(pl_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->renew_stop = true;
    /* a child made by fork() has no renewer, whatever its copy says */
    bool join = e->renewing && e->pid == getpid();
    e->renewing = false;
    pthread_cond_broadcast(&e->renew_cv);
    pthread_mutex_unlock(&e->mu);
    if (join)
        pthread_join(e->renewer, NULL);
}

/*
 * Whether a running run's owner is alive, by its lease: held and
 * not expired, by a process that is not known dead.  A run without a lease
 * (made before leases) keeps @p by_record, what its state record says.
 */
bool pl__run_lease_alive(pl_engine *e, uint64_t num, bool by_record)
{
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    pl__lease l;
    bool found = pl__store_lease_get(e->store, num, &l) == PL_OK;
    pl__errmsg_restore(saved);
    return pl__lease_alive(e, found ? &l : NULL, by_record);
}

bool pl__lease_alive(pl_engine *e, const pl__lease *l, bool by_record)
{
    /* this engine's own lease, of a run it no longer executes (the
     * caller checked), is a run nobody runs: its execution stopped */
    return l ? l->expires_in_us > 0 && *l->owner &&
                   strcmp(l->owner, e->worker) != 0 &&
                   !pl__worker_dead(e, l->owner)
             : by_record;
}

bool pl__worker_dead(pl_engine *e, const char *owner)
{
    char *end;
    errno = 0;
    long long pid = strtoll(owner, &end, 10);
    if (errno || end == owner || *end != '.' || pid <= 0)
        return false;
    const char *p = end + 1;
    unsigned long long start = strtoull(p, &end, 10);
    if (errno || end == p || *end != '@' || strcmp(end + 1, e->host) != 0)
        return false; /* another host's: only its lease tells */
    if (pid == e->pid)
        return start != e->pstart; /* an earlier process with this pid */
    uint64_t now_start;
    bool zombie;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return true;
    if (!pl__proc_stat(pid, &now_start, &zombie))
        return true;
    return zombie || now_start != start;
}
