/*
 * otel.h -- what the OpenTelemetry exporter (otel.c) and its encoding
 * (otel_json.c) share.
 */
#ifndef PL_CORE_EXT_OTEL_H
#define PL_CORE_EXT_OTEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ext.h"

#define PATH_BUF (16 + PL_MAX_DEPTH * 11) /* a callee's path and NUL */

/* A span: open in the table, then finished in the queue. */
typedef struct pl__otel_span {
    char *run_id, *path, *policy, *detail;
    int64_t start_ns, end_ns;
    uint32_t step;
    bool is_call, served;
    const char *outcome;            /* static */
    int status;                     /* pl_status of a failure; 0 */
    uint64_t tokens_in, tokens_out; /* a model's usage; 0 when none */
} pl__otel_span;

/* The request body for the @p k spans @p v of service @p service, or NULL
 * when out of memory (caller frees). */
PL__EXT_HIDDEN char *pl__otel_body(const char *service, pl__otel_span *const *v,
                                   size_t k);

#endif
