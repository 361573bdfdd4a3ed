/*
 * util.h -- small internal helpers shared by every module: growable byte
 * buffers, error reporting, strings and clocks.  (Randomness, like all
 * that is particular to the operating system, is in platform.h.)
 *
 * Everything here is hidden from the shared library's exports.  It lives
 * in base/, which every folder may use and which uses nothing of core/ or
 * ledger/ (only the public header, for the status codes and limits).
 */
#ifndef PL_UTIL_H
#define PL_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "policyledger.h"

#if defined(__GNUC__)
#define PL__HIDDEN __attribute__((visibility("hidden")))
#define PL__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define PL__MUST_CHECK __attribute__((warn_unused_result))
#else
#define PL__HIDDEN
#define PL__PRINTF(f, a)
#define PL__MUST_CHECK
#endif

#define PL__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Invariants.  assert() states what the code guarantees by itself (an
 * argument its callers always pass right, a state it always leaves); the
 * default and the sanitizer builds check them, a Release build drops them.
 * ALWAYS(X) and NEVER(X) mark a defensive branch: a condition the code
 * makes impossible by an earlier check, but whose branch is kept because
 * the bytes or the transaction come from outside (a store file, a
 * journal).  Where asserts are on they assert it; in a Release build they
 * evaluate X and the branch handles it:
 *
 *     if (NEVER(len > left))
 *         return pl__err(PL_ECORRUPT, "...");
 *
 * A condition that hostile input can bring about is no invariant: it gets
 * a plain if and an error, never these.
 */
#include <assert.h>
#ifdef NDEBUG
#define ALWAYS(X) (X)
#define NEVER(X) (X)
#else
#define ALWAYS(X) ((X) ? 1 : (assert(0 && "ALWAYS(" #X ")"), 0))
#define NEVER(X) ((X) ? (assert(0 && "NEVER(" #X ")"), 1) : 0)
#endif

/* ---- growable byte buffer ------------------------------------------------ */

typedef struct pl__buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} pl__buf;

/* Make room for @p more bytes past len.  PL_OK or PL_ENOMEM. */
PL__HIDDEN int pl__buf_reserve(pl__buf *b, size_t more) PL__MUST_CHECK;
PL__HIDDEN int pl__buf_append(pl__buf *b, const void *p,
                              size_t n) PL__MUST_CHECK;
PL__HIDDEN void pl__buf_free(pl__buf *b);

/*
 * Free a block of @p size bytes; when it is a large one (PL__LARGE_FREE or
 * more), give the heap's free pages back to the system at once
 * (pl__heap_release(), platform.h).  A model's long answer passes through
 * several blocks of its size in turn; the allocator would otherwise keep
 * each one's pages, and the process would hold the answer's size once
 * more for each.
 */
#define PL__LARGE_FREE ((size_t)1 << 20)
PL__HIDDEN void pl__free_sized(void *p, size_t size);

static inline void pl__buf_reset(pl__buf *b) { b->len = 0; }

/*
 * Room for one more element in a doubling array of @p n elements of @p size
 * bytes: returns @p items itself while n < *cap, else the array reallocated
 * (its first size is @p first elements) with *cap updated, or NULL when out
 * of memory (the array and *cap are then unchanged).  Sets no message.
 */
PL__HIDDEN void *pl__grow(void *items, size_t *cap, size_t n, size_t size,
                          size_t first);

/* Big-endian integers, the byte order of every key. */
static inline void pl__put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void pl__put_be64(uint8_t *p, uint64_t v)
{
    pl__put_be32(p, (uint32_t)(v >> 32));
    pl__put_be32(p + 4, (uint32_t)v);
}

static inline uint32_t pl__get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static inline uint64_t pl__get_be64(const uint8_t *p)
{
    return (uint64_t)pl__get_be32(p) << 32 | pl__get_be32(p + 4);
}

/* ---- errors -------------------------------------------------------------- */

/*
 * Set the calling thread's error message and return @p status, so that a
 * failure reads `return pl__err(PL_EINVAL, "bad name '%s'", name);`.
 */
PL__HIDDEN int pl__err(int status, const char *fmt, ...) PL__PRINTF(2, 3);
/* pl__err(status, "run 'ID': MESSAGE") with the message set now, unless
 * that message names run @p run_id first already (a record's own check
 * does): the run is named once. */
PL__HIDDEN int pl__err_run(int status, const char *run_id);
PL__HIDDEN int pl__verr(int status, const char *fmt, va_list ap);

/* Is @p status a pl_status that says a failure (negative, and one of
 * PL_STATUS_MAP)?  What user code returns (a policy, a decorator, a side
 * effect's function) is not always one: "non-zero: failed" is C's habit. */
PL__HIDDEN bool pl__status_failure(int status);

/* Forget the thread's message (before running user code), and ask whether
 * one was set since. */
PL__HIDDEN void pl__err_clear(void);
PL__HIDDEN bool pl__errmsg_set(void);

/* Copy of the thread's current message (for recording it); NULL on OOM. */
PL__HIDDEN char *pl__errmsg_dup(void);

/* Save the thread's message, and put a saved one back: a pool task keeps its
 * own message while other tasks run on its thread. */
#define PL__ERRMSG_MAX 1024
PL__HIDDEN void pl__errmsg_save(char out[PL__ERRMSG_MAX]);
PL__HIDDEN void pl__errmsg_restore(const char saved[PL__ERRMSG_MAX]);

/* The run whose policies this thread runs now (NULL: none), for telling a
 * context of another run from the running one: set around a run's
 * execution, and kept by each pool task as its message is. */
PL__HIDDEN const void *pl__running_run(void);
PL__HIDDEN void pl__set_running_run(const void *run);

/* ---- versioned structs --------------------------------------------------- */

/*
 * The rule of the public header's VERSIONS AND THE ABI, kept here alone: a
 * versioned struct is accepted at every version from 1 to the current one.
 * A struct's versions are one pl__layout (base/versioned.c lists them all):
 * the bytes a caller built against each version has, and the _INIT values
 * that stand for the fields an older version lacks.
 */
typedef struct pl__layout {
    const char *name;     /* "pl_run_options" */
    const char *init;     /* "PL_RUN_OPTIONS_INIT", for messages */
    unsigned current;     /* its PL_*_VERSION */
    const size_t *sizes;  /* sizes[v - 1]: the bytes of version v */
    size_t align;         /* its alignment, for arrays of it */
    const void *defaults; /* a current struct as its _INIT makes it */
} pl__layout;

/*
 * Read a caller's struct @p in (whose first field is its version) into
 * @p out, a struct of the current version: the fields @p in has are
 * copied, the rest take their defaults, and out's version is the current
 * one.  A NULL @p in gives the defaults.  @p fn names the caller's
 * function in the message.
 * @return PL_OK; PL_EINVAL (version 0 or newer than the library's: the
 *         message names @p fn, the struct and both versions).
 */
PL__HIDDEN int pl__struct_in(void *out, const void *in, const pl__layout *l,
                             const char *fn) PL__MUST_CHECK;

/* PL_OK when @p version is one of @p l's, else PL_EINVAL as above. */
PL__HIDDEN int pl__struct_version_ok(unsigned version, const pl__layout *l,
                                     const char *fn) PL__MUST_CHECK;

/*
 * Write a current-version struct @p full into a caller's @p out, whose
 * version pl__struct_version_ok() has accepted: only the fields of out's
 * version are written, and out's version stays.
 */
PL__HIDDEN void pl__struct_out(void *out, const void *full,
                               const pl__layout *l);

/*
 * An array of @p n structs of one version (the first element's) as an array
 * of the current version: @p in itself when it is current, else a copy in
 * *@p owned, which the caller frees.  NULL @p in with n == 0 gives NULL.
 * @return PL_OK; PL_EINVAL (a bad version, or an element whose version is
 *         not the first's: the message names @p fn and the index);
 *         PL_ENOMEM.
 */
PL__HIDDEN int pl__struct_array_in(const void **out, void **owned,
                                   const void *in, size_t n,
                                   const pl__layout *l,
                                   const char *fn) PL__MUST_CHECK;

/*
 * A decorator list a decorator keeps for later calls: @p n decorators of
 * one of pl_decorator's versions, each with a function.
 * @return PL_OK; PL_EINVAL (the message names @p fn); PL_ENOMEM.
 */
PL__HIDDEN int pl__decorators_ok(const pl_decorator *list, size_t n,
                                 const char *fn) PL__MUST_CHECK;

/* Every versioned public struct's layout. */
PL__HIDDEN extern const pl__layout pl__action_layout, pl__policy_def_layout,
    pl__engine_options_layout, pl__store_stats_layout, pl__run_options_layout,
    pl__worker_options_layout, pl__schedule_layout, pl__pool_options_layout,
    pl__call_spec_layout, pl__decorator_layout, pl__side_effect_match_layout,
    pl__retry_options_layout, pl__budget_layout, pl__paginate_options_layout,
    pl__observe_options_layout, pl__otel_options_layout, pl__otel_counts_layout,
    pl__sandbox_options_layout, pl__tools_options_layout,
    pl__schema_error_layout, pl__llm_options_layout, pl__llm_tokens_layout,
    pl__mcp_options_layout, pl__runs_options_layout, pl__tombstone_layout,
    pl__prune_options_layout, pl__rate_limit_options_layout,
    pl__rate_grant_layout;

/* ---- strings ------------------------------------------------------------- */

PL__HIDDEN char *pl__strdup(const char *s);
PL__HIDDEN char *pl__strndup(const char *s, size_t n);
/* printf into a new string; NULL on OOM. */
PL__HIDDEN char *pl__asprintf(const char *fmt, ...) PL__PRINTF(1, 2);

/* 1..@p max bytes of well-formed UTF-8 with no control characters: what
 * the store may keep as text (PostgreSQL's text refuses other bytes) and
 * the tools may print on a line. */
PL__HIDDEN bool pl__text_ok(const char *s, size_t max);
/* A copy of @p s with each byte that is not part of well-formed UTF-8 as
 * U+FFFD, as the export prints a string (JSON text is UTF-8); malloc'd,
 * NULL on OOM. */
PL__HIDDEN char *pl__utf8_fixed(const char *s);
/* A valid policy/actor name: pl__text_ok() within PL_MAX_NAME. */
PL__HIDDEN bool pl__name_ok(const char *s);
/* A valid run id: 1..PL_MAX_RUN_ID bytes of [A-Za-z0-9._:@~-]. */
PL__HIDDEN bool pl__run_id_ok(const char *s);

/* ---- time ---------------------------------------------------------------- */

PL__HIDDEN int64_t pl__now_us(void);   /* wall clock, Unix microseconds */
PL__HIDDEN uint64_t pl__mono_ns(void); /* monotonic nanoseconds */
/* Initialise @p cv for timed waits measured on CLOCK_MONOTONIC, so that a
 * wall clock set back (an NTP step, an operator) does not stretch a wait,
 * nor one set forward cut it short; 0 or pthread_cond_init()'s errno. */
PL__HIDDEN int pl__cond_init_mono(pthread_cond_t *cv);
/* The deadline @p us from now, for pthread_cond_timedwait() on a condition
 * variable made by pl__cond_init_mono(). */
PL__HIDDEN struct timespec pl__mono_deadline(int64_t us);

/* Lower-case hex of @p n bytes into out (2n chars + NUL). */
PL__HIDDEN void pl__hex(char *out, const uint8_t *p, size_t n);

#endif /* PL_UTIL_H */
