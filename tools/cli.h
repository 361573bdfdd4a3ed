/*
 * cli.h -- what the command-line tools share: option values, times, JSON
 * output and opening a store for reading.  Uses only the public API.
 */
#ifndef PL_CLI_H
#define PL_CLI_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <policyledger.h>

/* Exit codes every tool uses. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_USAGE = 1, /* bad flags or values */
    CLI_EXIT_STORE = 2, /* the store cannot be opened, or no such run */
    CLI_EXIT_FAULT = 3  /* a check found a fault */
};

/* The tool's name for messages (set once from argv[0]'s last part); and
 * a write past the file size limit an error, not SIGXFSZ (its first
 * call, in main()). */
void cli_set_name(const char *argv0);
const char *cli_name(void);

/* Print "NAME: message" and a newline on stderr. */
void cli_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* From cli_keep_first_error(true) on, the first message cli_error() says
 * is kept, as it was said (without "NAME: "), for a document that reports
 * it (ledger-replay --json); cli_first_error() is NULL while none was. */
void cli_keep_first_error(bool on);
const char *cli_first_error(void);

/*
 * Take an option's value: for argv[*i] either "--name=value" or "--name"
 * followed by the value in argv[*i + 1] (then *i advances).  Returns true
 * when argv[*i] is this option; *value is NULL (and an error printed) when
 * the value is missing.
 */
bool cli_option(int argc, char **argv, int *i, const char *name,
                const char **value);

/*
 * The options of one value met so far.  cli_once() looks at argument
 * @p arg ("--run", or "--run=ID"): when it is an option of one value (one
 * of @p one, NULL-terminated; any @p arg when @p one is NULL) met before,
 * it prints "--run is given twice: it takes one value" and returns false,
 * and the caller refuses the command (exit 1) rather than let the last
 * value silently win (`--cancel A --cancel B` would cancel B alone); else
 * true.
 */
typedef struct cli_seen {
    const char *names[48];
    size_t n;
} cli_seen;
bool cli_once(cli_seen *seen, const char *arg, const char *const *one);

/* Now, Unix microseconds (the wall clock). */
int64_t cli_now_us(void);

/* Initialise @p cv for timed waits on CLOCK_MONOTONIC: a wait for a span
 * of time (a poll's period, a stream's wait) that a wall clock set back
 * must not stretch; true, or false when it cannot be made. */
bool cli_cond_init_mono(pthread_cond_t *cv);
/* The deadline @p ms from now for such a condition variable. */
struct timespec cli_deadline_ms(long ms);

/*
 * Parse a time given by a person: an ISO 8601 date ("2026-11-24"), a UTC
 * date-time ("2026-11-24T15:04", "...:05", "...:05.123456", optional "Z"),
 * or a time before @p now_us: "90s", "10m", "2h", "3d".  Returns false
 * for anything else.
 */
bool cli_parse_time(int64_t *out_us, const char *text, int64_t now_us);

/* A duration given by a person ("90s", "10m", "2h", "3d"), more than zero,
 * in ms; false for anything else (a date among them: it is no duration). */
bool cli_parse_duration_ms(int64_t *out_ms, const char *text);

/* Unix microseconds as ISO 8601 UTC: "2026-11-24T15:04:05Z", or with
 * @p micro "2026-11-24T15:04:05.123456Z".  @p n at least 32. */
void cli_time_iso(char *out, size_t n, int64_t us, bool micro);

/* Unix microseconds for a person: "2026-11-24 15:04:05" (UTC). */
void cli_time_human(char *out, size_t n, int64_t us);

/*
 * Unix milliseconds for a person, as cli_time_human() says them, and true;
 * or, for a time the library never writes (before 1970, past 2^53 ms: the
 * year 287396; a record of an older version, or damaged), its number,
 * "18446744073709 ms since 1970, out of range", and false: never a date
 * it is not (ms * 1000 past int64 would wrap to 1969).
 */
bool cli_ms_human(char *out, size_t n, int64_t ms);

/* A duration (ms, not negative) in its two largest units: "2 d 23 h",
 * "5 min 3 s", "40 ms". */
void cli_span_text(char *out, size_t n, int64_t ms);

/* What a waiting run waits for, for a person: "until 2026-12-01 02:00:00
 * (in 2 d 23 h)", "for the event 'approve'", or both ("for the event
 * 'approve' until ..."); a time past says "(due)". */
void cli_wait_text(char *out, size_t n, int64_t wake_ms, const char *event,
                   int64_t now_us);

/* Hex of @p len bytes into @p out (2 * len + 1 bytes). */
void cli_hex(char *out, const uint8_t *bytes, size_t len);

/* The room cli_quote() needs at most. */
#define CLI_QUOTE_MAX 112

/*
 * A user's string (a run id, a policy name, a path, a server's message) as
 * a message shows it: in double quotes, every control character (newline,
 * tab, escape, C1), every quote and backslash and every byte that is not
 * part of well-formed UTF-8 (\xNN, as cli_text()) escaped C-style, and cut
 * after about 64 bytes with "..." and its length, so that it can neither
 * split a one-line message, reach the terminal as a control sequence, nor
 * make a line of kilobytes.  Writes into @p out (at least 16 bytes;
 * CLI_QUOTE_MAX holds every answer) and returns it.  NULL is "(null)".
 */
const char *cli_quote(char *out, size_t n, const char *s);

/* cli_quote() into a buffer of the calling expression's own: for one
 * argument of a message (a compound literal lives to the end of the
 * enclosing block). */
#define QUOTE(s) cli_quote((char[CLI_QUOTE_MAX]){0}, CLI_QUOTE_MAX, (s))

/*
 * A stored or outside-supplied string (a reason, an error message, a
 * name, a host, a result's text) as text output prints it, whole: each
 * control character escaped as cli_quote() escapes it (\n, \r, \t,
 * \x1b, \u009b), and each byte that is not part of well-formed UTF-8 as
 * \xNN, so that it can neither reach the terminal as a control sequence
 * nor forge a line; the rest, quotes and backslashes too, as it is.
 * Returns @p s itself when nothing is escaped, else a copy of the calling
 * thread's own, valid until its 16th next call (a printf() may take a
 * few).  NULL is "(null)"; "(out of memory)" when memory ran out.
 */
const char *cli_text(const char *s);

/*
 * The escape of the control character (C0 but NUL, DEL, or a C1 as its
 * two bytes) at @p s into @p out, and the number of bytes it takes; 0
 * (nothing written) when @p s is no control character.
 */
size_t cli_control_escape(char out[8], const char *s);

/*
 * The store as messages and outputs name it: for a postgresql:// (or
 * postgres://) URI, the password of its user part and the value of a
 * password= parameter shown as "***"; any other path as given.  The
 * password of a store is a secret no tool prints.  Returns a copy of its
 * own, made on the first call for @p path and kept (a tool names one
 * store; call it first from the main thread).  NULL is "(null)".
 */
const char *cli_store_shown(const char *path);

/* Is @p id a run id: 1..PL_MAX_RUN_ID bytes of [A-Za-z0-9._:@~-]? */
bool cli_run_id_ok(const char *id);

/* Is @p s a name the engine could take (an event's, a policy's): 1..
 * PL_MAX_NAME bytes, no control character?  Its UTF-8 is left to the
 * engine; this lets a tool refuse a bad flag before it opens a store. */
bool cli_name_ok(const char *s);

/* The id of a link's successor in a chain of runs continued as new, by
 * the engine's rule ("<id>~1", then "<base>~<n+1>"): how the successor of
 * a deleted link is found, a tombstone keeping no links.  @p out holds
 * PL_MAX_RUN_ID + 1 bytes; false when the id would be too long. */
bool cli_chain_next_id(char *out, const char *id);
/* The one id whose successor @p id is by that rule, or "". */
void cli_chain_prev_id(char *out, const char *id);
/* After a link of a chain that continued as new, @p cur its successor's
 * id: the link to continue, past links deleted after they continued too,
 * while their tombstones last (@p cur changed to it).  false when the
 * chain ended at a deleted link, @p cur, its tombstone in *end; true with
 * @p cur the link to continue (stored, or unknown: continuing it says
 * so).  What ledger-replay --run and ledger-web's continue follow. */
bool cli_chain_link(pl_engine *e, char *cur, pl_tombstone *end);

/* A copy of @p s, caller frees with free(); NULL on OOM. */
char *cli_strdup(const char *s);

/* Compact JSON of @p item, caller frees with free(); NULL on OOM. */
char *cli_json_compact(const cJSON *item);

/*
 * Shorten @p text in place to at most @p max bytes, ending in "..." when
 * cut (never inside a UTF-8 sequence).  @p max at least 8.
 */
void cli_shorten(char *text, size_t max);

/*
 * Add @p v to @p o as a JSON integer with its digits written out.  cJSON
 * prints a number of 16 digits (a time in microseconds) in exponent form
 * when that reads back the same (1.7959603720989e+15), which JSON readers
 * take for a float.  Returns the member, or NULL on OOM.
 */
cJSON *cli_json_add_int(cJSON *o, const char *name, int64_t v);

/* The members of @p o named "..._us" that are numbers, as
 * cli_json_add_int() writes them (for a line made by the library, such as
 * pl_run_export_each()'s).  False on OOM. */
bool cli_json_times_as_digits(cJSON *o);

/* A member cli_json_add_int() added (or a number): its value; 0 if none. */
int64_t cli_json_int_of(const cJSON *o, const char *name);

/*
 * Flush stdout and say (once, on stderr) if anything written to it was
 * lost: a full disk or a closed pipe must not pass for output written.
 * Returns false then.
 */
bool cli_stdout_ok(void);

/* The offset of the first byte of @p s (@p n bytes) that is not part of
 * well-formed UTF-8; @p n if none. */
size_t cli_utf8_bad(const char *s, size_t n);

/*
 * JSON text as the tools print it: each byte that is not part of
 * well-formed UTF-8 as U+FFFD (JSON is UTF-8, and a request's bytes or a
 * store's may not be: cJSON keeps any bytes in a string), and DEL and the C1
 * controls, which cJSON prints as they are (it escapes only C0), as \u
 * escapes (\u007f, \u009b), so that JSON read on a terminal can no more
 * drive it than text output can (cli_text()).  Takes @p text (NULL gives
 * NULL); NULL on OOM.
 */
char *cli_json_safe(char *text);

/* Print @p item as one line of JSON on @p f (cli_json_safe()).
 * Returns false on OOM. */
bool cli_json_line(FILE *f, const cJSON *item);

/* Print @p item as an indented JSON document on @p f, UTF-8.  False on
 * OOM. */
bool cli_json_document(FILE *f, const cJSON *item);

/* Add @p key to @p o: the string @p v, or null when there is none (NULL or
 * ""): a field a script reads is null when it has no value, never "" or
 * "-".  False when out of memory. */
bool cli_json_string_or_null(cJSON *o, const char *key, const char *v);

/* A schedule as pl_schedule_list() gives it, made as the tools print it:
 * "last_run" null for a schedule that has started none, "concurrency_key"
 * null for one without a key. */
void cli_json_schedule(cJSON *s);

/*
 * pl_plugin_load(), and a plugin that crashes while it loads (in its
 * constructors or pl_plugin_init: SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGABRT) ends the tool with a line on stderr naming the plugin and the
 * signal, and exit CLI_EXIT_STORE, instead of dying without a word.  A
 * plugin is trusted code run in-process: nothing more is attempted.
 */
int cli_plugin_load(pl_registry *reg, const char *path);

/*
 * Open an existing store read-only, with an empty registry: nothing is
 * created or written, no run is taken over.  On failure prints why and
 * returns false.  Close with cli_close_store().
 */
bool cli_open_store(pl_engine **engine, pl_registry **registry,
                    const char *path);
void cli_close_store(pl_engine *engine, pl_registry *registry);

/* Run @p id is not in the store: if it was deleted, say (one line on
 * stderr) when, how it had ended and until when its tombstone keeps the
 * id, and return true; false when it has no tombstone. */
bool cli_say_deleted(pl_engine *engine, const char *id);

/* A run whose record cannot be read, met by cli_runs_each(): non-zero to
 * stop the listing (that value is returned). */
typedef int (*cli_damaged_fn)(const char *id, const char *msg, void *user);

/*
 * Every run's record from @p from (pl_engine_runs_from()'s options; NULL:
 * every run, in id order), as it gives them to @p visit, and past the
 * records it cannot read: a run whose record is damaged goes to
 * @p damaged, with the listing's message, and the listing goes on after it
 * (pl_runs_options.damaged).  Returns PL_OK,
 * @p visit's or @p damaged's non-zero value, or the listing's error where
 * it names no run.
 */
int cli_runs_each(pl_engine *engine, const pl_runs_options *from,
                  pl_run_visit_fn visit, cli_damaged_fn damaged, void *user);

/*
 * Read a whole file ("-" for stdin) of at most @p max bytes, NUL-terminated.
 * Returns NULL (and says why on stderr) on any failure, a file holding a
 * NUL byte among them (its text would end there).  Caller frees.
 */
char *cli_read_all(const char *path, size_t max);

/*
 * Parse @p text as one JSON object (pl_json_parse(): a string holding
 * \u0000 is refused).  On failure says what is wrong (and where) on
 * stderr, naming @p what, and returns NULL.  Caller frees.
 */
cJSON *cli_parse_object(const char *text, const char *what);

#endif /* PL_CLI_H */
