/*
 * policyledger/observe.h -- traces, and the OpenTelemetry exporter.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_OBSERVE_H
#define POLICYLEDGER_OBSERVE_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/observe.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Traces                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * A JSON-lines trace: one line per engine event, written and flushed as it
 * happens.  Each line is an object with the fields that apply:
 *
 *   ts_us       when it was written, Unix microseconds (always)
 *   trace_id    the run id (always: "" for a worker's events of no run,
 *               store_lost, store_back and a schedule_failed that names
 *               no run)
 *   event       pl_event_kind_name(), e.g. "call_completed" (always)
 *   path        the invocation path ("0" is the root)
 *   seq         step events: the step; call events: the action_call's
 *               position; commit: how many steps became durable;
 *               run_suspended: the step that parked the run; version:
 *               its marker, when recorded
 *   policy      call events: the callee; step events: the actor; run
 *               events: the root policy
 *   step_type   step events: "action_call", ...; run_suspended:
 *               "suspend" (for a human) or "wait" (a sleep, an event);
 *               version: "side_effect" when its marker is recorded
 *   outcome     call and run ends: "served", "completed", "failed",
 *               "suspended"; run_stopped: "stopped"
 *   status      a failure's pl_status name, e.g. "PL_EPOLICY"
 *   detail      an error code or reason
 *   elapsed_ns  call and run ends, commits
 *   tokens      a call's end that carries a model's tokens
 *               (pl_event.tokens_in / tokens_out): {"input", "output"}
 *   version     version: the version the run takes (pl_event.version)
 *   schedule    schedule_failed: the schedule (pl_event.schedule)
 *
 * Every line is UTF-8, as JSON text is: a byte of a detail or a name that
 * is not part of well-formed UTF-8 is written as U+FFFD (as the export
 * writes it).  Every integer (ts_us, seq, elapsed_ns, the tokens,
 * version) is written as its digits, whatever its size (elapsed_ns up to
 * UINT64_MAX), never in exponent form.
 *
 * Install it as the engine's event callback:
 *
 *     pl_trace *t;
 *     pl_trace_open(&t, "run.jsonl");
 *     opts.on_event = pl_trace_event;
 *     opts.event_user = t;
 *
 * A program with an event callback of its own keeps it and calls
 * pl_trace_event(event, t) from it.  Lines from concurrent runs never mix.
 */
typedef struct pl_trace pl_trace;

/**
 * Open a trace file for appending (created if missing).  A FIFO is taken
 * when a process reads it (a line then waits for that reader); one no
 * process reads is refused at once, never waited on.  A reader that goes
 * away costs the lines after it (counted, as any line not written), never
 * the process: no SIGPIPE reaches the program for them.
 * @param[out] out caller owns; close with pl_trace_close() after the last
 *             engine using it has closed.
 * @return PL_OK; PL_EINVAL (NULL argument); PL_EIO (cannot open it, or a
 *         FIFO no process reads: pl_errmsg() says why); PL_ENOMEM.
 */
int pl_trace_open(pl_trace **out, const char *path);

/**
 * Write one event as a line: a pl_event_fn whose user is the pl_trace.
 * A line that cannot be written is counted, never reported here (an event
 * callback returns nothing): pl_trace_close() reports it.  A NULL
 * @p event or @p trace does nothing.
 */
void pl_trace_event(const pl_event *event, void *trace);

/**
 * Close a trace.  NULL does nothing.
 * @return PL_OK; PL_EIO when any line could not be written or the file
 *         could not be closed (pl_errmsg() says how many and why).
 */
int pl_trace_close(pl_trace *trace);

/* ------------------------------------------------------------------------ */
/* OpenTelemetry                                                            */
/* ------------------------------------------------------------------------ */

/*
 * An OpenTelemetry exporter on the event callback: a span per run and per
 * call, sent as OTLP/HTTP JSON (POST .../v1/traces) by a background thread.
 *
 *   span      name         parent               span id
 *   the run   "run " root  none (the root)      of (run id, "0")
 *   a call    the callee   the caller's span    of (run id, callee's path)
 *
 * Ids are derived, never random: the trace id is the first 16 bytes of
 * SHA-256 of the run id, a span id the first 8 of SHA-256 of "run id NUL
 * path".  So every execution of a run (a replay after a crash, a resume)
 * sends its spans in the same trace under the same ids, and a served call
 * (a result the ledger returned) carries the id of the execution that
 * recorded it.  Attributes (all spans): policyledger.run_id,
 * policyledger.path, policyledger.policy, policyledger.outcome
 * ("completed", "failed", "served", "suspended", "lease_lost": this
 * worker stalled past its lease, PL_EVENT_LEASE_LOST; "stopped" and
 * "interrupted": see below); calls add
 * policyledger.step (the action_call's position in the caller) and
 * policyledger.served (true for a served call); a failure adds
 * policyledger.status (the pl_status name) or policyledger.error_code (an
 * error result's code) and the span's status is ERROR with the detail as
 * its message (a lease lost too).  Spans still open when a run suspends,
 * fails or loses its lease end with it.  An execution that stops with no
 * end of the run (PL_EVENT_RUN_STOPPED: a check that reaches where the
 * record ends, a run left for newer code, a store that refuses a commit:
 * the run stays as it was, and its caller gets that status) ends its
 * open spans then, "stopped", with policyledger.status saying why; the
 * span's status is ERROR but for PL_ECHECK and PL_ENEWERCODE, the run's
 * way.  Spans of an execution whose process died are ended by the run's
 * next execution on this exporter, "interrupted", status ERROR.
 * An executed call whose end event carries a model's tokens (an LLM
 * policy's result: pl_event.tokens_in / tokens_out) adds
 * gen_ai.usage.input_tokens and gen_ai.usage.output_tokens.  A request is
 * UTF-8 whatever bytes a detail holds (each byte that is not part of
 * well-formed UTF-8 as U+FFFD): a receiver refuses one that is not, and
 * every span in it.
 *
 * Attach it like pl_trace (the event callback, with the exporter as user):
 *
 *     pl_otel *x;
 *     pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
 *     oo.endpoint = "http://127.0.0.1:4318";
 *     pl_otel_open(&x, &oo);
 *     opts.on_event = pl_otel_event;
 *     opts.event_user = x;
 *
 * @note The event path never waits on the network: a finished span goes to
 * a bounded queue (a full queue drops it and counts it), and the thread
 * sends batches.  A receiver that fails, hangs or is down never blocks a
 * call or fails a run; its spans are counted as dropped.  Safe from many
 * threads at once (concurrent runs, fan-out).  No exporter attached costs
 * nothing.
 */
typedef struct pl_otel pl_otel;

#define PL_OTEL_OPTIONS_VERSION 1

/** Exporter options.  Initialise with PL_OTEL_OPTIONS_INIT. */
typedef struct pl_otel_options {
    unsigned version;     /**< PL_OTEL_OPTIONS_VERSION */
    /**
     * The OTLP/HTTP base URL; spans go to ENDPOINT/v1/traces.  NULL: the
     * environment's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is),
     * else OTEL_EXPORTER_OTLP_ENDPOINT (plus /v1/traces).
     */
    const char *endpoint;
    /**
     * Extra request headers, "key=value,key2=value2" (values may be
     * percent-encoded).  NULL: OTEL_EXPORTER_OTLP_HEADERS.  Their values
     * never appear in a message.
     */
    const char *headers;
    /** The resource's service.name; NULL: OTEL_SERVICE_NAME, else
     *  "policyledger". */
    const char *service_name;
    size_t max_queue;             /**< spans waiting; 0 = 2048 */
    size_t max_batch;             /**< spans per request; 0 = 512 */
    unsigned flush_interval_ms;   /**< longest wait to send; 0 = 1000 */
    unsigned timeout_ms;          /**< per request; 0 = 10000 */
    unsigned shutdown_timeout_ms; /**< pl_otel_close()'s flush; 0 = 5000 */
} pl_otel_options;

#define PL_OTEL_OPTIONS_INIT                                                   \
    { PL_OTEL_OPTIONS_VERSION, NULL, NULL, NULL, 0, 0, 0, 0, 0 }

#define PL_OTEL_COUNTS_VERSION 1

/** What an exporter did so far (pl_otel_stats()).  Initialise with
 *  PL_OTEL_COUNTS_INIT. */
typedef struct pl_otel_counts {
    unsigned version;  /**< PL_OTEL_COUNTS_VERSION */
    uint64_t spans;    /**< finished spans handed to the queue */
    uint64_t sent;     /**< spans the receiver accepted (HTTP 2xx) */
    uint64_t dropped;  /**< spans lost: queue full, a request that failed
                            or timed out, or left at shutdown */
    uint64_t requests; /**< HTTP requests made */
    uint64_t failures; /**< requests that failed */
} pl_otel_counts;

#define PL_OTEL_COUNTS_INIT { PL_OTEL_COUNTS_VERSION, 0, 0, 0, 0, 0 }

/**
 * Open an exporter and start its thread.
 * @param[out] out caller owns; close with pl_otel_close() after the last
 *             engine using it has closed.
 * @param opts NULL for defaults (the endpoint from the environment).
 * @return PL_OK; PL_ENOTFOUND (no endpoint: none given, none in the
 *         environment); PL_EINVAL (NULL @p out, a bad version, an endpoint
 *         that is not http:// or https://, or names no host or a port
 *         outside 1..65535, a header without '=');
 *         PL_ENOMEM; PL_EIO (libcurl or the thread could not start; or
 *         a library built without libcurl, PL_WITH_CURL=OFF, saying so).
 */
int pl_otel_open(pl_otel **out, const pl_otel_options *opts);

/** Take one event: a pl_event_fn whose user is the pl_otel.  A NULL
 *  @p event or @p otel does nothing. */
void pl_otel_event(const pl_event *event, void *otel);

/** Copy the exporter's counters into @p out, made with PL_OTEL_COUNTS_INIT.
 *  @return PL_OK; PL_EINVAL (NULL, a bad version). */
int pl_otel_stats(pl_otel_counts *out, const pl_otel *otel);

/**
 * Wait until every span queued so far has been sent (or dropped), at most
 * @p timeout_ms.  Never needed for correctness: pl_otel_close() flushes.
 * @return PL_OK; PL_EINVAL (NULL); PL_EBUSY (spans still waiting when the
 *         time ran out).
 */
int pl_otel_flush(pl_otel *otel, unsigned timeout_ms);

/**
 * Send what is queued (waiting at most shutdown_timeout_ms: a request in
 * flight past it is cut off), stop the thread and free the exporter.
 * NULL does nothing.
 * @return PL_OK; PL_EIO when spans were dropped over the exporter's life
 *         (pl_errmsg() says how many and the first reason, never a header
 *         value).
 */
int pl_otel_close(pl_otel *otel);

/*
 * validate: JSON Schema checks of a callee's input and result, written with
 * this header alone too (core/ext/validate.c; the validator is in the "JSON
 * Schema" section below).
 */

/** Compiled schemas of the policies pl_decorator_validate() checks.  Opaque;
 *  thread-safe. */
typedef struct pl_schema_cache pl_schema_cache;

/**
 * Create a cache of compiled schemas, keyed by policy name: each policy's
 * schemas are compiled at its first validated call, never again.  Use one
 * cache with one registry (a policy's schemas are taken to stay as they
 * were registered).
 * @param[out] out caller owns; free with pl_schema_cache_free() after every
 *             run that uses it has ended.
 * @return PL_OK; PL_EINVAL (NULL out); PL_ENOMEM.
 */
int pl_schema_cache_new(pl_schema_cache **out);

/** Free a schema cache.  NULL does nothing. */
void pl_schema_cache_free(pl_schema_cache *cache);

/**
 * validate: check the callee's input (action->payload) against its
 * registered input_schema before it runs, and its result (the last step it
 * returns, {} if none) against its output_schema.  An invalid input is an
 * `error` step {"error": true, "code": "InvalidInput", "message", "path",
 * "keyword"} and the callee does NOT run; a result that does not match is
 * followed by such a step with code "OutputSchemaMismatch", which becomes
 * the call's result.  "path" is a JSON pointer into the payload or result
 * ("" for the whole), "keyword" the schema keyword that failed.  An
 * error-as-data result is passed on unchecked.  A policy without schemas is
 * called as is.  Both steps are recorded, so a replay serves them as it
 * serves any result.
 * @param cache borrowed; holds the compiled schemas (see
 *        pl_schema_cache_new()); must outlive every call using the
 *        decorator.
 * @return PL_OK; PL_EINVAL (NULL @p out or @p cache).
 * @note A value too costly to check (PL_ELIMIT, see PL_SCHEMA_MAX_WORK)
 *       fails the run with that status and pl_errmsg()'s reason.
 */
int pl_decorator_validate(pl_decorator *out, pl_schema_cache *cache);

/* clang-format on */

#endif /* POLICYLEDGER_OBSERVE_H */
