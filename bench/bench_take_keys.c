/*
 * bench_take_keys.c -- take, keyed: a worker's take on PostgreSQL
 * (pl__pg_take(), docs/design.md §14) with many runs of one concurrency
 * key queued, next to the libpq floor's commit in the same run.
 *
 *   room: a key of limit 2 with one run running and QUEUED_KEY queued:
 *         each take takes the key's next run (its count reads the key's
 *         live leases, not its queued runs);
 *   full: a key of limit 1 with one run running and QUEUED_KEY queued,
 *         ranked ahead of runs without a key and runs of a second key
 *         with room, taken in turn: each take passes over the full key's
 *         queued runs.
 *
 * After each take its lease is dropped (outside the time measured), so
 * every take finds the store as the first did.  The server's buffers a
 * take reads are EXPLAIN (ANALYZE, BUFFERS)'s of pl_take() (the keyed
 * take's walk and counts; the statement around it reads the queue's head
 * alone), in a transaction rolled back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_take() */

#define QUEUED_KEY 10000
#define TAIL 2000
#define RUNNING 1000 /* without a key, ahead of all: a busy fleet's */

/* What follows a key's queued runs: nothing, or TAIL runs without a key
 * (odd) and of keys of limit 1 (even): one key, or each its own. */
enum { NO_TAIL, TAIL_ONE_KEY, TAIL_KEYS };

/* Schema @p n: run 1 running with key @p key (limit @p lim), runs
 * 2..QUEUED_KEY + 1 queued with it, then the @p tail queued after them;
 * and RUNNING runs numbered after them running without a key, ranked
 * ahead of all (the leases a key's count must not read either). */
static void keys_fill(PGconn *c, const char *n, const char *key, int lim,
                      int tail)
{
    char sql[1400];
    int queued = QUEUED_KEY + 1 + (tail ? TAIL : 0), total = queued + RUNNING;
    take_runs(c, n, total);
    snprintf(
        sql, sizeof sql,
        "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
        "fkey, flimit) SELECT num, CASE WHEN num = 1 OR num > %d THEN 1 "
        "ELSE 0 END, CASE WHEN num = 1 OR num > %d THEN 'other@host' "
        "ELSE '' END, 'key-' || num, CASE WHEN num = 1 OR num > %d THEN "
        "(extract(epoch from clock_timestamp()) * 1e6)::bigint + "
        "3600000000 ELSE 0 END, CASE WHEN num > %d THEN 0 ELSE num END, "
        "CASE WHEN num <= %d THEN '%s' WHEN num > %d THEN NULL WHEN num "
        "%% 2 = 0 THEN 'other' || CASE WHEN %d = 1 THEN num::text ELSE '' END "
        "END, CASE WHEN num <= %d THEN %d WHEN num "
        "> %d THEN 0 WHEN num %% 2 = 0 THEN 1 ELSE 0 END FROM \"%s\".runs",
        n, queued, queued, queued, queued, QUEUED_KEY + 1, key, queued,
        tail == TAIL_KEYS, QUEUED_KEY + 1, lim, queued, n);
    pg_sql(c, sql);
    snprintf(sql, sizeof sql,
             "ANALYZE \"%s\".runs, \"%s\".state, \"%s\".leases", n, n, n);
    pg_sql(c, sql);
}

/* One case: @p takes takes, each expected to take run @p first + i *
 * @p step, timed; 1 on a wrong take. */
static int keys_case(const char *name, const char *what, const char *key,
                     int lim, int tail, int takes, uint64_t first,
                     uint64_t step, double floor, cJSON *o)
{
    say("  %s: %s\n", name, what);
    char path[1200];
    pl__pg_store *s;
    const char *schema = take_open(name, path, sizeof path, &s);
    PGconn *c = pg_connect();
    keys_fill(c, schema, key, lim, tail);
    /* pl_take()'s buffers: its second call's (the first reads the
     * catalogs too, to compile and plan the function's statements, as a
     * connection's first take does) */
    char sql[256];
    snprintf(sql, sizeof sql,
             "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM "
             "\"%s\".pl_take('bench@host', 60000000)",
             schema);
    long buffers = explain_buffers(c, sql);
    double *t = malloc(sizeof *t * (size_t)takes);
    if (!t)
        die("out of memory");
    int done;
    int failures = timed_takes(s, c, schema, false, takes, first, step, t,
                               &done);
    double p50 = percentile(t, (size_t)done, 0.5),
           p99 = percentile(t, (size_t)done, 0.99);
    say("    a take, p50 / p99              %8.2f / %.2f ms (floor %.1fx)\n"
        "    pl_take()'s buffers, one take  %8ld\n",
        p50 * 1e3, p99 * 1e3, floor > 0 ? p50 / floor : 0, buffers);
    cJSON *k = cJSON_AddObjectToObject(o, name);
    jnum(k, "queued_of_key", QUEUED_KEY);
    jnum(k, "takes", done);
    take_case_end(k, p50, p99, buffers, t, c, s, path);
    return failures;
}

int report_take_keys(bool quick, cJSON *o)
{
    int n = quick ? 100 : 500;
    double floor = floor_commit_s();
    say("\ntake, keyed: %d runs of one key queued (%d takes each; one "
        "commit of the floor %.2f ms)\n",
        QUEUED_KEY, n, floor * 1e3);
    int f = keys_case("take_key_room",
                      "its key has room (limit 2, one running)", "tenant", 2,
                      NO_TAIL, n, 2, 1, floor, o);
    /* the tail starts at QUEUED_KEY + 2, without a key; each take's
     * lease dropped, the second key has room again */
    f |= keys_case("take_key_full",
                   "past them, its key full (limit 1, one running)", "tenant",
                   1, TAIL_ONE_KEY, n, QUEUED_KEY + 2, 1, floor, o);
    /* the same, the tail's keyed runs each of its own key: 1,000 keys
     * queued, whose heads a take reads in turns with the queue */
    f |= keys_case("take_key_full_keys",
                   "past them, its key full, 1,000 keys queued after", "tenant",
                   1, TAIL_KEYS, n, QUEUED_KEY + 2, 1, floor, o);
    jnum(o, "keys_floor_ms", floor * 1e3);
    return f | report_keys_scale(quick, o);
}
