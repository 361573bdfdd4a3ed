/*
 * platform.h -- what the operating system gives beyond C11 and POSIX: a
 * port to another system replaces platform.c (and the types below) and
 * nothing else.
 *
 *   | need                    | Linux, glibc (platform.c)                   |
 *   |-------------------------|---------------------------------------------|
 *   | wait on a word, wake it | futex(2), FUTEX_WAIT/WAKE_PRIVATE           |
 *   | a process's start time  | /proc/PID/stat, fields 3 and 22             |
 *   | the host's name         | gethostname(2)                              |
 *   | random bytes            | getrandom(2)                                |
 *   | a writer-first rwlock   | pthread_rwlockattr_setkind_np()             |
 *   | who defines a symbol    | dlsym(3), dladdr(3)                         |
 *   | a command's child       | prctl(PR_SET_PDEATHSIG), close_range(2)     |
 *   | a bounded errand child  | _Fork() (glibc 2.34: no atfork handlers)    |
 *   | freed pages back now    | malloc_trim(3) (glibc; elsewhere nothing)   |
 *   | a file mapping's bounds | /proc/self/maps                             |
 *   | fibers                  | ucontext (getcontext, makecontext,          |
 *   |                         | swapcontext, setcontext), mmap'd stacks,    |
 *   |                         | pthread_getattr_np() for a thread's stack   |
 *
 * Fibers also tell Valgrind, AddressSanitizer and ThreadSanitizer about
 * every stack and every switch, when the build has them.
 */
#ifndef PL_PLATFORM_H
#define PL_PLATFORM_H

#include <pthread.h>
#include <sys/types.h>
#include <stdatomic.h>
#include <ucontext.h>

#include "util.h"

/* ---- loaded objects ------------------------------------------------------ */

/*
 * Whether @p symbol, looked up in a dlopen()ed object @p handle and its
 * dependencies, is defined in another object than the one this library's
 * code is in: then true, with *@p where (borrowed, static) naming that
 * object's file.  false when they define it in this one, or not at all.
 */
PL__HIDDEN bool pl__symbol_elsewhere(void *handle, const char *symbol,
                                     const char **where);

/* ---- memory -------------------------------------------------------------- */

/*
 * Give the free pages of the heap back to the system now, after a large
 * block was freed (pl__free_sized(), util.h): once a large block has been
 * unmapped, glibc serves blocks of that size from its heap and keeps their
 * pages when they are freed.  Nothing where the allocator gives no way.
 */
PL__HIDDEN void pl__heap_release(void);

/* ---- waiting on a word --------------------------------------------------- */

/*
 * Sleep while *@p word holds @p val.  May return early, or at once if it
 * holds something else: callers wait in a loop that re-checks the word.
 * Only threads of this process wait on and wake a word.
 */
PL__HIDDEN void pl__futex_wait(_Atomic uint32_t *word, uint32_t val);

/* Wake one thread sleeping on @p word, if any.  Harmless when none is, and
 * on a word whose owner has stopped waiting on it. */
PL__HIDDEN void pl__futex_wake(_Atomic uint32_t *word);

/* ---- processes and hosts ------------------------------------------------- */

/*
 * The start time of process @p pid on this host (in clock ticks since boot:
 * with the pid, it names the process even once the pid is reused), and
 * whether it has ended but not been reaped (a zombie).  false if it cannot
 * be read, as for a process that does not exist.
 */
PL__HIDDEN bool pl__proc_stat(int64_t pid, uint64_t *start, bool *zombie);

/*
 * The mapping of a file that holds address @p p: *lo the address of the
 * file's offset 0 in it, *hi the mapping's end.  false when @p p is in no
 * file's mapping or the mappings cannot be read.
 */
PL__HIDDEN bool pl__file_mapping(const void *p, uintptr_t *lo, uintptr_t *hi);

/* This host's name into @p out, @p n bytes with the NUL; "localhost" if it
 * cannot be read. */
PL__HIDDEN void pl__host_name(char *out, size_t n);

/*
 * In a child just forked to exec a command (async-signal-safe calls only):
 * have it killed when the thread that forked it ends (the engine's process
 * dies), and mark every descriptor from 3 up close-on-exec, so that the
 * command inherits only its standard streams.  false when the parent is
 * gone already.
 */
PL__HIDDEN bool pl__child_prepare(pid_t parent);

/*
 * In a child just forked: unblock every signal, restore SIGPIPE, become a
 * process group of its own, pl__child_prepare(), take @p in, @p out and
 * @p err (-1: keep the parent's) as the standard streams, go to @p dirfd
 * (-1: stay), and execvp() @p argv with the environment @p env.  On
 * failure, write errno (an int) to @p errfd and _exit(127).  Never
 * returns.
 */
PL__HIDDEN _Noreturn void pl__child_exec(pid_t parent, int in, int out, int err,
                                         int dirfd, int errfd,
                                         char *const *argv, char **env);

/*
 * Run @p fn(@p arg) in a child process and wait for it at most
 * @p bound_ms: past that the child is killed (SIGKILL) and reaped.  For an
 * errand that may block on something outside (a socket to a server that
 * stopped answering) and must never hold the caller longer.  @p fn runs
 * in a child of a process that may have threads: it makes
 * async-signal-safe calls only, and returns (the child then _exit()s).
 * The child is made without the process's atfork handlers (which take
 * locks another thread may hold).  true when the child ended by itself
 * (returned, or died) within the bound; false when it was killed, or
 * could not be made.
 */
PL__HIDDEN bool pl__child_errand(void (*fn)(void *), void *arg,
                                 unsigned bound_ms);

/* ---- randomness ---------------------------------------------------------- */

/* Fill @p out with random bytes from the kernel.  PL_OK or PL_EIO. */
PL__HIDDEN int pl__random(void *out, size_t n);

/* ---- files --------------------------------------------------------------- */

/*
 * openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: open @p path
 * under the directory @p dirfd, never leaving it.  Returns the descriptor,
 * or -errno: -EXDEV for an escape, -ENOSYS where the kernel (or a seccomp
 * filter) has no openat2.  EAGAIN (a rename raced the lookup) is retried
 * a few times here.  Sets no message.
 */
PL__HIDDEN int pl__openat_beneath(int dirfd, const char *path, int flags,
                                  unsigned mode);

/* ---- locks --------------------------------------------------------------- */

/* Initialise a rwlock that lets a waiting writer in before new readers, so
 * that a stream of readers cannot keep a writer out for ever. */
PL__HIDDEN void pl__rwlock_init_writer_first(pthread_rwlock_t *lock);

/* ---- fibers -------------------------------------------------------------- */

/*
 * A fiber is a stack and where the code on it stands while it is switched
 * away.  One thread switches between its fibers, and its own stack, which
 * it describes as a fiber too (pl__fiber_init_thread()).
 */
typedef struct pl__fiber {
    ucontext_t ctx;
    unsigned char *map; /* guard page, then the stack; NULL: a thread's own */
    size_t map_len;
    const void *bottom; /* the stack: lowest address, */
    size_t size;        /* and size */
    void *asan_fake;    /* AddressSanitizer's fake stack while away */
    void *tsan;         /* ThreadSanitizer's fiber */
    unsigned uses;      /* times prepared */
    unsigned vg_stack;  /* Valgrind's id for the stack */
} pl__fiber;

/*
 * Give @p f (zeroed) a stack of @p size bytes, a multiple of @p page, above
 * a guard page.  false when the memory cannot be had (no message).
 */
PL__HIDDEN bool pl__fiber_init(pl__fiber *f, size_t page, size_t size);

/* Describe the calling thread's own stack in @p f (zeroed), so that its
 * fibers can switch back to it.  Nothing to free. */
PL__HIDDEN void pl__fiber_init_thread(pl__fiber *f);

/* Free the stack of a fiber pl__fiber_init() made, or tried to make. */
PL__HIDDEN void pl__fiber_destroy(pl__fiber *f);

/*
 * Set @p f, not running, to start @p fn on its stack when it is next
 * switched to.  fn calls pl__fiber_started() first, and must not return:
 * it ends with pl__fiber_exit().  A fiber that has ended may be prepared
 * again.  false if the context cannot be made.
 */
PL__HIDDEN bool pl__fiber_prepare(pl__fiber *f, void (*fn)(void));

/* The first thing a fiber's function does on its new stack. */
PL__HIDDEN void pl__fiber_started(void);

/* Leave the running fiber @p from for @p to.  Returns once a switch comes
 * back to @p from. */
PL__HIDDEN void pl__fiber_switch(pl__fiber *from, pl__fiber *to);

/* Leave the running fiber, which has ended, for @p to.  Does not return
 * unless the switch fails. */
PL__HIDDEN void pl__fiber_exit(pl__fiber *to);

#endif /* PL_PLATFORM_H */
