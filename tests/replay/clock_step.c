/*
 * clock_step.c -- an LD_PRELOAD library for the tests: the wall clock of a
 * host that was an hour ahead and is stepped back (an NTP step, an
 * operator), as one process sees it, without touching the machine's clock
 * (other processes share it).
 *
 *   CLOCK_STEP_S     seconds the wall clock is ahead before the step
 *   CLOCK_STEP_FILE  the step is armed once this file exists
 *
 * clock_gettime(CLOCK_REALTIME) reads CLOCK_STEP_S ahead of the kernel's
 * wall clock until the step is armed; the first reading after that is
 * still ahead, and every later one is the kernel's: the step lands right
 * after a reading, the worst instant for whatever took a deadline from it.
 * A wait the kernel times on CLOCK_REALTIME (pthread_cond_timedwait() on
 * a condition variable with default attributes) measures the kernel's
 * clock, which the library does not move: a deadline read before the step
 * comes CLOCK_STEP_S late, as it does when the machine's clock is set
 * back.  Other clocks are passed through.
 *
 * The kernel's clock is read with the system call itself, not libc's
 * clock_gettime() found through dlsym(): under AddressSanitizer the first
 * reading comes while its runtime starts, and a dlsym() there re-entered
 * this function from inside itself (a double free in dlsym's state).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_state; /* 0 ahead, 1 the last reading ahead, 2 stepped */

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc || id != CLOCK_REALTIME || atomic_load(&g_state) == 2)
        return rc;
    const char *s = getenv("CLOCK_STEP_S"), *file = getenv("CLOCK_STEP_FILE");
    long ahead = s ? strtol(s, NULL, 10) : 0;
    if (file && access(file, F_OK) == 0) {
        int ahead_once = 0;
        /* one reading ahead after the step is armed, then none */
        if (!atomic_compare_exchange_strong(&g_state, &ahead_once, 1)) {
            atomic_store(&g_state, 2);
            return rc;
        }
    }
    ts->tv_sec += ahead;
    return rc;
}
