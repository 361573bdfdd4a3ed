/*
 * platform.c -- Linux and glibc: futexes, /proc, the host name, getrandom,
 * a writer-first rwlock and ucontext fibers (see platform.h).
 *
 * The one file of the library that needs _GNU_SOURCE.
 */
#define _GNU_SOURCE /* syscall, gethostname, getrandom, MAP_STACK, dladdr,
                       pthread_getattr_np, pthread_rwlockattr_setkind_np,
                       _Fork */
#include "platform.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/close_range.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- loaded objects ------------------------------------------------------ */

bool pl__symbol_elsewhere(void *handle, const char *symbol, const char **where)
{
    /* a function of this file: its address is in this object, whatever
     * the program's symbol bindings */
    bool (*self)(void *, const char *, const char **) = pl__symbol_elsewhere;
    void *here;
    memcpy(&here, &self, sizeof here);
    Dl_info ours, theirs;
    dlerror();
    void *addr = dlsym(handle, symbol);
    if (!addr || !dladdr(here, &ours) || !dladdr(addr, &theirs) ||
        theirs.dli_fbase == ours.dli_fbase)
        return false;
    *where = theirs.dli_fname ? theirs.dli_fname : "(unnamed)";
    return true;
}

/* ---- waiting on a word --------------------------------------------------- */

void pl__futex_wait(_Atomic uint32_t *word, uint32_t val)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

void pl__futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ---- processes and hosts ------------------------------------------------- */

/* Start time of a process in clock ticks since boot (field 22 of stat), and
 * whether it is a zombie.  Returns false if it cannot be read. */
bool pl__file_mapping(const void *p, uintptr_t *lo, uintptr_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    /* "start-end perms offset dev inode path", numbers in hex but inode */
    char line[4096 + 128];
    uintptr_t at = (uintptr_t)p;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long a, b, off, ino;
        char perms[8];
        unsigned maj, min;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &a, &b, perms, &off,
                   &maj, &min, &ino) == 7 &&
            at >= a && at < b && ino != 0 && off <= a) {
            *lo = (uintptr_t)(a - off);
            *hi = (uintptr_t)b;
            found = true;
        }
    }
    fclose(f);
    return found;
}

bool pl__proc_stat(int64_t pid, uint64_t *start, bool *zombie)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold anything */
    if (!p || p[1] != ' ')
        return false;
    p += 2;
    *zombie = *p == 'Z' || *p == 'X';
    /* p is at field 3; skip to field 22 */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return false;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || end == p)
        return false;
    *start = v;
    return true;
}

void pl__host_name(char *out, size_t n)
{
    /* a name that fills the buffer need not end in a NUL */
    out[n - 1] = '\0';
    if (gethostname(out, n - 1) != 0)
        snprintf(out, n, "localhost");
}

bool pl__child_prepare(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        return false;
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return true;
    /* before Linux 5.11: one descriptor at a time */
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536
                  ? (int)rl.rlim_cur
                  : 65536;
    for (int fd = 3; fd < max; fd++) {
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0)
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
    }
    return true;
}

void pl__child_exec(pid_t parent, int in, int out, int err, int dirfd,
                    int errfd, char *const *argv, char **env)
{
    int e = 0;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (setpgid(0, 0) != 0 || !pl__child_prepare(parent))
        e = errno ? errno : ECHILD;
    if (!e &&
        (dup2(in, 0) < 0 || dup2(out, 1) < 0 || (err >= 0 && dup2(err, 2) < 0)))
        e = errno;
    if (!e && dirfd >= 0 && fchdir(dirfd) != 0)
        e = errno;
    if (!e) {
        environ = env;
        execvp(argv[0], argv);
        e = errno;
    }
    ssize_t w = write(errfd, &e, sizeof e);
    (void)w;
    _exit(127);
}

bool pl__child_errand(void (*fn)(void *), void *arg, unsigned bound_ms)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
    pid_t pid = _Fork();
#else
    pid_t pid = fork();
#endif
    if (pid < 0)
        return false;
    if (pid == 0) {
        fn(arg);
        _exit(0);
    }
    uint64_t end = pl__mono_ns() + (uint64_t)bound_ms * 1000000u;
    for (;;) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid) /* or reaped by another (SIGCHLD ignored): gone */
            return true;
        if (w < 0 && errno != EINTR)
            return true;
        if (pl__mono_ns() >= end)
            break;
        struct timespec nap = {0, 1000000}; /* 1 ms */
        nanosleep(&nap, NULL);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return false;
}

/* ---- randomness ---------------------------------------------------------- */

int pl__random(void *out, size_t n)
{
    uint8_t *p = out;
    while (n) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return pl__err(PL_EIO, "getrandom failed: %s", strerror(errno));
        }
        p += got;
        n -= (size_t)got;
    }
    return PL_OK;
}

/* ---- files --------------------------------------------------------------- */

int pl__openat_beneath(int dirfd, const char *path, int flags, unsigned mode)
{
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(unsigned)flags;
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
#ifndef SYS_openat2
    (void)dirfd, (void)path;
    return -ENOSYS;
#else
    for (int attempt = 0;; attempt++) {
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if ((errno == EAGAIN && attempt < 8) || errno == EINTR)
            continue;
        return -errno;
    }
#endif
}

/* ---- locks --------------------------------------------------------------- */

void pl__rwlock_init_writer_first(pthread_rwlock_t *lock)
{
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(lock, &ra);
    pthread_rwlockattr_destroy(&ra);
}

/* ---- fibers -------------------------------------------------------------- */

/* Valgrind is told where each stack is, or it takes a fiber's stack frames
 * for stray accesses below the stack pointer. */
#ifdef PL_HAVE_VALGRIND_H /* CMakeLists.txt */
#include <valgrind/valgrind.h>
#define stack_register(lo, hi) VALGRIND_STACK_REGISTER(lo, hi)
#define stack_deregister(id) VALGRIND_STACK_DEREGISTER(id)
#endif
#ifndef stack_register
#define stack_register(lo, hi) ((void)(lo), (void)(hi), 0u)
#define stack_deregister(id) ((void)(id))
#endif

/* AddressSanitizer is told about every switch, so it knows which stack is
 * live. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define switch_begin(save, bottom, size)                                       \
    __sanitizer_start_switch_fiber(save, bottom, size)
#define switch_end(save, bottom, size)                                         \
    __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define switch_begin(save, bottom, size)                                       \
    ((void)(save), (void)(bottom), (void)(size))
#define switch_end(save, bottom, size)                                         \
    ((void)(save), (void)(bottom), (void)(size))
#endif

/* ThreadSanitizer is told about every switch too: each fiber is a fiber of
 * its own to it, so that it sees the order a thread runs its fibers in.  It
 * is switched right before the context is: a function that returned in
 * between would unbalance the fiber's record of calls. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define tsan_current() __tsan_get_current_fiber()
#define tsan_create() __tsan_create_fiber(0)
#define tsan_destroy(f) __tsan_destroy_fiber(f)
#define tsan_switch(f) __tsan_switch_to_fiber(f, 0)
#else
#define tsan_current() NULL
#define tsan_create() NULL
#define tsan_destroy(f) ((void)(f))
#define tsan_switch(f) ((void)(f))
#endif

/* A fiber's uses before ThreadSanitizer is given a new fiber for it (see
 * pl__fiber_prepare()). */
#define TSAN_USES 1024

bool pl__fiber_init(pl__fiber *f, size_t page, size_t size)
{
    f->map_len = page + size;
    f->map = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return false;
    }
    if (mprotect(f->map, page, PROT_NONE) != 0) {
        munmap(f->map, f->map_len);
        f->map = NULL;
        return false;
    }
    f->bottom = f->map + page;
    f->size = size;
    f->vg_stack = stack_register(f->map + page, f->map + f->map_len);
    return true;
}

void pl__fiber_init_thread(pl__fiber *f)
{
    pthread_attr_t attr;
    void *addr;
    size_t size;
    f->tsan = tsan_current();
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        f->bottom = addr;
        f->size = size;
    }
    pthread_attr_destroy(&attr);
}

void pl__fiber_destroy(pl__fiber *f)
{
    if (f->map) {
        stack_deregister(f->vg_stack);
        munmap(f->map, f->map_len);
        f->map = NULL;
    }
    if (f->tsan) {
        tsan_destroy(f->tsan);
        f->tsan = NULL;
    }
}

bool pl__fiber_prepare(pl__fiber *f, void (*fn)(void))
{
    if (getcontext(&f->ctx) != 0)
        return false;
    /* ThreadSanitizer keeps a fiber's calls in a record of 64K frames, and
     * a fiber's function never returns (it ends by switching away), so each
     * use leaves frames there: a new ThreadSanitizer fiber every
     * TSAN_USES uses keeps the record short, at little cost */
    if (f->uses++ % TSAN_USES == 0) {
        if (f->tsan)
            tsan_destroy(f->tsan);
        f->tsan = tsan_create();
    }
    f->ctx.uc_stack.ss_sp = (void *)f->bottom;
    f->ctx.uc_stack.ss_size = f->size;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, fn, 0);
    return true;
}

void pl__fiber_started(void) { switch_end(NULL, NULL, NULL); }

void pl__fiber_switch(pl__fiber *from, pl__fiber *to)
{
    switch_begin(&from->asan_fake, to->bottom, to->size);
    tsan_switch(to->tsan);
    swapcontext(&from->ctx, &to->ctx);
    switch_end(from->asan_fake, NULL, NULL);
}

void pl__fiber_exit(pl__fiber *to)
{
    switch_begin(NULL, to->bottom, to->size);
    tsan_switch(to->tsan);
    setcontext(&to->ctx);
}

/* ---- memory -------------------------------------------------------------- */

void pl__heap_release(void)
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}
