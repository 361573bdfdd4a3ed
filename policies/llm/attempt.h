/*
 * attempt.h -- one model call's attempts, as transport.c (HTTP, and the
 * recorded exchange) and scripted.c (the scripted model) share them.
 */
#ifndef PL_LLM_ATTEMPT_H
#define PL_LLM_ATTEMPT_H

#include "llm.h"

/* max_attempts when the options give none. */
#define PL__LLM_DEF_ATTEMPTS 4u

/* What one attempt came to. */
typedef struct pl__llm_attempt {
    long status; /* HTTP status, 0 for a transport error */
    bool retryable;
    bool timed_out;
    long retry_after_ms; /* -1: none */
    char *error_code;    /* final error, else NULL (static strings) */
    char *message;       /* owned */
    cJSON *answer;       /* owned */
    long in_tokens, out_tokens;
} pl__llm_attempt;

/* Free what @p a holds and make it empty (no Retry-After). */
PL__HIDDEN void pl__llm_attempt_clear(pl__llm_attempt *a);

/* Sleep @p ms, whatever signals come. */
PL__HIDDEN void pl__llm_sleep_ms(long ms);

/* The error code of an HTTP status that is a failure. */
PL__HIDDEN const char *pl__llm_status_code(long status);

/* As the official SDKs retry: a timeout (408), a conflict (409), a rate
 * limit (429), and the server's errors. */
PL__HIDDEN bool pl__llm_status_retryable(long status);

/* Say in a retryable failure's message why it was not tried again, and
 * after how many attempts. */
PL__HIDDEN void pl__llm_gave_up(pl__llm_attempt *a, const char *fmt,
                                unsigned attempts, ...) PL__PRINTF(2, 4);

/*
 * One call of the scripted model (scripted.c): the responses from *pos
 * on, retried as over HTTP, *pos left after the last one played and
 * *attempts counted; the answer streamed to @p deltas (not NULL).  PL_OK
 * with *a the outcome (an answer, or an error code and message); another
 * status for a local error or a script that cannot be read.
 */
PL__HIDDEN int pl__llm_scripted_exchange(pl__llm_attempt *a, unsigned *attempts,
                                         long *pos, const pl__llm *m,
                                         const char *body, int64_t deadline_ms,
                                         pl__llm_deltas *deltas);

#endif /* PL_LLM_ATTEMPT_H */
