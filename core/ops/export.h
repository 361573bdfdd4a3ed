/*
 * export.h -- the format of a run's export, which export.c writes and
 * import.c reads.
 *
 * THE EXPORT (format 2): one JSON object a line, '\n'-terminated.
 *
 *   line 1, the run:
 *   | field          | value                                              |
 *   |----------------|----------------------------------------------------|
 *   | kind, format   | "run", 2 (PL__EXPORT_FORMAT)                       |
 *   | run            | the run's id                                       |
 *   | run_number     | its number in the store it came from (the first    |
 *   |                | 8 bytes of its step keys: the hashes cover it)     |
 *   | policy, payload| its root policy and payload                        |
 *   | status         | running, suspended, completed or failed            |
 *   | created_us,    | when it was created and last written (µs since     |
 *   | updated_us     | 1970)                                              |
 *   | steps, records | its steps (folded callees counted) and the number  |
 *   |                | of step lines with a record that follow            |
 *   | head           | hex hash of its root ledger's last step, or null   |
 *   | code           | the root policy's code identity, or null           |
 *   | info, state    | hex: its two run records (ledger/codec/runrec.c) as      |
 *   |                | stored; they are checksummed and bound to its id   |
 *   | inbox          | the number of inbox lines at the end (format 2)    |
 *
 *   then one line a step, in key order (the run's tree in order), with the
 *   fields ledger-dump's jsonl prints: run, path, seq, id, actor, type,
 *   payload, time, time_us, code, hash, prev_hash; and either
 *   | record         | hex: the stored step record (ledger/codec/record.c)      |
 *   or
 *   | derived        | true: a folded callee's one step, which has no     |
 *   |                | record of its own (its caller's action_result      |
 *   |                | holds it); hash is null and an import skips it     |
 *
 *   then, format 2, one line a record in the run's inbox (what was
 *   delivered to it and not yet consumed: events, a cancellation not yet
 *   seen), in delivery order:
 *   | kind           | "inbox"                                            |
 *   | run, seq       | the run's id; the record's place in delivery order |
 *   | name, payload  | an event's name and payload (absent: a             |
 *   |                | cancellation)                                      |
 *   | reason         | a cancellation's reason (absent: an event)         |
 *   | sent_us        | when it was delivered (µs since 1970)              |
 *   | record         | hex: the inbox record (ledger/codec/siderec.c) as  |
 *   |                | stored, checksummed and bound to the run's id      |
 *
 * Format 1 is format 2 without inbox lines (and without "inbox"): an
 * import reads both.  The human fields are a reading aid: an import checks
 * that they say what the records say, and writes only the records.
 */
#ifndef PL_EXPORT_H
#define PL_EXPORT_H

#include "util.h"

#define PL__EXPORT_FORMAT 2
#define PL__EXPORT_FORMAT_MIN 1 /* the oldest an import reads */

/* "2026-11-24T15:04:05.123456Z" (proleptic Gregorian, UTC): a line's
 * "time" (export.c). */
PL__HIDDEN void pl__export_time_iso(char *out, size_t n, int64_t us);

/* Does an export line's JSON @p theirs say the record's @p mine?  The
 * export prints a byte that is not UTF-8 as U+FFFD (JSON text is UTF-8),
 * so the two are compared as it prints them.  OOM compares unequal. */
PL__HIDDEN bool pl__export_same_json(const cJSON *mine, const cJSON *theirs);
/* The same for the record's text @p mine of @p n bytes. */
PL__HIDDEN bool pl__export_same_text(const char *mine, size_t n,
                                     const char *theirs);

#endif /* PL_EXPORT_H */
