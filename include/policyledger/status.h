/*
 * policyledger/status.h -- status codes (PL_OK, PL_E...) and the codes of errors as data.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_STATUS_H
#define POLICYLEDGER_STATUS_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/status.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/*
 * Every function that can fail returns int: PL_OK (0) or a negative
 * pl_status.  Codes are append-only: a code is never renumbered or removed.
 *
 * A store's own failures: PL_ENOSPC when its file system is full, a quota
 * or the process's file size limit (RLIMIT_FSIZE) is reached, PL_EACCES
 * when it is read-only (EROFS) or not permitted (EACCES, EPERM), PL_EMAPFULL
 * when it may not grow past map_size_max, PL_ESTORE for anything else (a
 * failing disk's EIO, say); each message names the cause and the store's
 * path.  None loses anything durable: a run that met one continues with
 * pl_run_continue() once the cause is gone.
 */
#define PL_STATUS_MAP(X)                                                       \
    X(OK, 0, "success")                                                        \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of memory")                                             \
    X(ESTORE, -3, "store failure")                                             \
    X(EMAPFULL, -4, "store is full and cannot grow")                           \
    X(ECORRUPT, -5, "corrupted or malformed stored data")                      \
    X(EVERSION, -6, "unknown format version")                                  \
    X(ENOTFOUND, -7, "not found")                                              \
    X(EEXIST, -8, "already exists")                                            \
    X(ENONDET, -9, "non-determinism: replay diverged from the ledger")         \
    X(ESUSPENDED, -10, "run suspended")                                        \
    X(ESTATE, -11, "run is not in a state that allows this")                   \
    X(ETOKEN, -12, "wrong resume token")                                       \
    X(EBUSY, -13, "in use by another owner")                                   \
    X(EPOLICY, -14, "policy failed")                                           \
    X(ELIMIT, -15, "limit exceeded")                                           \
    X(EJSON, -16, "malformed JSON or payload is not a JSON object")            \
    X(EIO, -17, "I/O error")                                                   \
    X(ECHECK, -18, "check mode: replay would have to execute")               \
    X(ERESULT, -19, "the called policy returned an error result")            \
    X(EPLUGIN, -20, "plugin cannot be loaded")                                 \
    X(EFORBIDDEN, -21, "refused by the sandbox")                               \
    X(ENOSPC, -22, "no space left for the store")                              \
    X(EACCES, -23, "store is read-only or not accessible")                    \
    X(ECANCELLED, -24, "run cancelled")                                        \
    X(ETIMEDOUT, -25, "wait timed out")                                        \
    X(EDEADLINE, -26, "run deadline exceeded")                                 \
    X(ECODEVERSION, -27, "run recorded by a code version this code does not support") \
    X(ENEWERCODE, -28, "run recorded by newer code; left for it")

typedef enum pl_status {
#define PL__STATUS_ENUM(name, value, text) PL_##name = value,
    PL_STATUS_MAP(PL__STATUS_ENUM)
#undef PL__STATUS_ENUM
} pl_status;

/** @return a static description of @p status ("unknown status" if none). */
const char *pl_strerror(int status);

/** @return the status's symbolic name, e.g. "PL_ENONDET". */
const char *pl_status_name(int status);

/**
 * @return the calling thread's message for the last failure of any pl_
 *         function: what failed and where (run, invocation, step).  Never
 *         NULL; borrowed, valid until the thread's next failing pl_ call.
 */
const char *pl_errmsg(void);

/**
 * Set the calling thread's message (read with pl_errmsg()) from a printf
 * format, and return @p status: for user policies and decorators,
 * `return pl_errorf(PL_EINVAL, "bad limit %d", n);`.  The message may
 * quote pl_errmsg() itself.  A NULL @p fmt sets the status's name.
 * @return @p status.
 */
int pl_errorf(int status, const char *fmt, ...);

/* ------------------------------------------------------------------------ */
/* Error-as-data codes                                                      */
/* ------------------------------------------------------------------------ */

/*
 * A recoverable failure of a tool or sub-policy is not a status: it is an
 * `action_result` whose payload is
 *     {"error": true, "code": "<code>", "message": "..."}
 * so that the calling policy (an LLM, say) can decide what to do.
 */
#define PL_ERR_INVALID_INPUT "InvalidInput"
#define PL_ERR_TIMEOUT "Timeout"
#define PL_ERR_RETRYABLE_SERVER "RetryableServer"
#define PL_ERR_RATE_LIMITED "RateLimited"
#define PL_ERR_OUTPUT_SCHEMA_MISMATCH "OutputSchemaMismatch"
#define PL_ERR_NO_RESULTS "NoResults"
#define PL_ERR_TOOL_BUG "ToolBug"
#define PL_ERR_UNAUTHORIZED "Unauthorized"
#define PL_ERR_FORBIDDEN "Forbidden"
#define PL_ERR_NOT_FOUND "NotFound"
#define PL_ERR_NOT_ALLOWED "NotAllowed"
#define PL_ERR_BUDGET_EXCEEDED "BudgetExceeded"
#define PL_ERR_IN_DOUBT "InDoubt"
#define PL_ERR_CANCELLED "Cancelled"
#define PL_ERR_DEADLINE_EXCEEDED "DeadlineExceeded"

/* clang-format on */

#endif /* POLICYLEDGER_STATUS_H */
