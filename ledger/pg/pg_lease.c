/*
 * pg_lease.c -- leases and the queue on the store on PostgreSQL.
 */
#include "pg_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- leases -------------------------------------------------------------- */

/*
 * LEASES (store.h) on PostgreSQL: one more table and two functions in the
 * store's schema, made on every writable open (an older store gains them).
 *
 *   | leases | run bigint PK, gen bigint, owner text, id text,          |
 *   |        | expires bigint (Unix us by the server's clock), cancel  |
 *   |        | boolean (a cancellation waits: LEASE MARKS below)        |
 *   | pl_fences(runs[], gens[], drops[]) | for each run, in run order:  |
 *   |        | raises SQLSTATE PLOWN unless its lease has that          |
 *   |        | generation (locking its row); drops it if drop           |
 *   | pl_fence(run, gen, drop) | the same for one run (what stores    |
 *   |        | written by earlier versions call)                        |
 *   | pl_fence_lost(runs[], gens[]) | raises the error of the first    |
 *   |        | run, in run order, whose lease is not that generation     |
 *   |        | (what a commit calls when its fences failed)             |
 *   | pl_cancel_mark(run) | marks the run's lease; answers the run     |
 *   |        | (what a claim calls when a cancellation waits)            |
 *
 * Every expiry is the server's clock_timestamp(): hosts need not agree on
 * the time.  A worker takes a queued or expired lease with one UPDATE whose
 * row comes from SELECT ... FOR UPDATE SKIP LOCKED, so two workers never
 * take the same row and neither waits for the other.  A commit's fence
 * locks the lease row until the commit ends, so a take waits for it and
 * then finds the generation it must increment.
 *
 * A commit's fences are plain SQL in its statement (pg_one.c):
 * SELECT ... FOR UPDATE of the lease rows that hold, in run order, and
 * pl_fence_lost() only when fewer hold than it fences.  The older
 * pl_fences() did the same in PL/pgSQL on every commit, which cost the
 * server more than the rest of the commit's statement (bench/README.md,
 * "Where the time goes on PostgreSQL"); it stays for stores that older
 * versions of this library still write to.
 */
/*
 * LEASE MARKS: leases.cancel, true once a cancellation waits in the run's
 * inbox, is what a commit under a fence answers (pg_one.c): its fence
 * locks and reads the lease row anyway, where a look at the inbox cost the
 * server a relation and an index scan more on every call.  A mark is
 * never cleared on a row (a cancellation stays in the inbox until the run
 * is deleted); a row made anew starts unmarked.
 *
 * A delivery and a lease made at the same time must not miss each other:
 * under READ COMMITTED neither statement sees the other's uncommitted
 * row.  Both serialise on the run's state row, which every delivery and
 * every claim locks (FOR UPDATE) in a statement before the one that
 * marks, so the statement that marks takes its snapshot after the lock:
 *
 *   - a delivery that stores a cancellation marks the run's lease after
 *     its state's lock (pg_time.c: T_CANCEL_PUT, T_INBOX_PUT's variant;
 *     Q_INBOX_ADD, an import's, after its commit's state write), so it
 *     sees any lease committed before it took the lock (a ride's record,
 *     T_RIDE_PUT, marks none: the ride's take, after it, marks);
 *   - every lease made or taken for an execution is marked from the inbox
 *     after that lock, so it sees any delivery committed before it:
 *       T_ACQUIRE, T_RIDE_TAKE (a delivery's take, after the lock and the
 *         record) and a ride's statement (ONE_RIDE, after T_RIDE_LOCK) in
 *         their own INSERT;
 *       L_ACQUIRE (pl_run_continue()), L_TAKE and pl_take() (a worker's)
 *         and L_TAKE_DUES (a wake's) take the lock in the same statement
 *         or none:
 *         the claim that follows, which every execution starts with,
 *         marks, its state written without a fence (pg_one.c's one-run
 *         statement, by pl_cancel_mark() when its look in the inbox finds
 *         a cancellation; a group's Q_WRITE, by L_MARK after it);
 *   - L_CREATE, L_CREATE_FROM and L_CREATE_SUCC make a run's first
 *     lease, with the run: its inbox is empty; L_RENEW sets the expiry
 *     alone; the rest delete.
 *
 * A delivery locks the state, then the lease; a commit, the lease (its
 * fence), then the state it writes: a cancellation's mark (T_CANCEL_PUT)
 * waits for the lease a bounded time and, when that runs out, is rolled
 * back and delivered again (pg_time.c), so the two never deadlock.  A
 * claim's mark waits for nobody's commit: its lease is new.
 */
#define FENCE_STATE "PLOWN"
/* PL/pgSQL: the error of the fence of run rs[i], generation gs[i], whose
 * lease is now hgen, held by holder (NULL: none) */
#define FENCE_RAISE                                                            \
    "IF hgen = gs[i] THEN RAISE EXCEPTION 'run #%%: this worker''s lease "     \
    "(generation %%) ran out, and its concurrency key''s place may have "      \
    "gone to another run; nothing more is written', rs[i], gs[i] USING "       \
    "ERRCODE = '" FENCE_STATE "'; END IF; "                                    \
    "RAISE EXCEPTION 'run #%%: this worker''s lease (generation %%) was "      \
    "taken over by %%; nothing more is written', rs[i], gs[i], "               \
    "CASE WHEN holder IS NULL THEN 'nobody (it was dropped)' WHEN "            \
    "holder = '' THEN 'the queue' ELSE holder END "                            \
    "USING ERRCODE = '" FENCE_STATE "'; "

/* The queue's head (h: run, fkey), locked, in the queue's order (qrank,
 * run) of the runs a take may take: the earlier of two candidates, each
 * the first of its own index that no other transaction holds (FOR UPDATE
 * SKIP LOCKED).  e: a lease run out while still owned (a crashed
 * worker's, or one handed back), by leases_live, whose rows are the live
 * leases and those, sorted by rank (none, mostly); q: the first queued run
 * ahead of it, by leases_queue, which holds the queued runs alone, so a
 * take never passes the runs that are running.  When q wins, e's row
 * stays locked until the take's transaction ends (another take passes
 * over it meanwhile).  e reads nothing unless leases_live's first entry
 * has run out (LIVE_RUN_OUT, a gate the server tests once), and then the
 * range of it that ran out: its lower bound, a parameter too, makes the
 * server plan a narrow range (where a bound on one side alone it
 * estimated as a third of the live leases, and read the table whole once
 * renewals had left it dead rows); three schemas. */
#define I64_MAX "9223372036854775807"
#define I64_MIN "(-9223372036854775807 - 1)"
#define TAKE_HEAD                                                                       \
    "e AS MATERIALIZED (SELECT l.run, l.fkey, l.qrank FROM \"%s\".leases l "            \
    "WHERE l.owner <> '' AND l.expires <= " NOW_ONCE " AND l.expires >= "               \
    "(SELECT " I64_MIN ") AND " LIVE_RUN_OUT(                                           \
        "%s") " ORDER BY l.qrank, "                                                     \
              "l.run LIMIT 1 FOR UPDATE OF l SKIP LOCKED), q AS MATERIALIZED (SELECT "  \
              "l.run, l.fkey FROM \"%s\".leases l WHERE l.owner = '' AND (l.qrank, "    \
              "l.run) < (coalesce((SELECT e.qrank FROM e), " I64_MAX                    \
              "), coalesce(("                                                           \
              "SELECT e.run FROM e), " I64_MAX                                          \
              ")) ORDER BY l.qrank, l.run LIMIT 1 FOR "                                 \
              "UPDATE OF l SKIP LOCKED), h AS MATERIALIZED (SELECT q.run, q.fkey FROM " \
              "q UNION ALL SELECT e.run, e.fkey FROM e WHERE NOT EXISTS (SELECT FROM "  \
              "q))"

/* What a take reads of the run it took (t: run, gen, expires_in, owner,
 * id), in binary: its info, its state locked (or, locked by another, NULL
 * and state_busy), whether it has steps, whether a cancellation waits,
 * and, taken by pl_take() (a keyed head), whether its key or limit is
 * damaged (pg_flow.c, KEY SUMS: what pl_take() admitted it by, read
 * after it, not as the statement's snapshot has it, which may be older
 * than pl_take()'s reads; the row is this take's, locked); six schemas. */
#define TAKE_READS                                                             \
    "s AS MATERIALIZED (SELECT x.run, x.v FROM \"%s\".state x JOIN t ON "      \
    "x.run = t.run FOR UPDATE OF x SKIP LOCKED) SELECT t.run, t.gen, "         \
    "t.expires_in, t.owner, t.id, r.info, s.v, s.run IS NULL AND EXISTS "      \
    "(SELECT 1 FROM \"%s\".state y WHERE y.run = t.run), EXISTS (SELECT 1 "    \
    "FROM \"%s\".steps k WHERE k.k >= int8send(t.run) AND k.k < "              \
    "int8send(t.run + 1)), EXISTS (SELECT 1 FROM \"%s\".inbox i WHERE i.run "  \
    "= t.run AND i.cancel), CASE WHEN EXISTS (SELECT FROM h WHERE h.fkey IS "  \
    "NOT NULL) THEN \"%s\".pl_key_damaged(t.run) END FROM t LEFT JOIN "        \
    "\"%s\".runs r ON r.num = t.run "                                          \
    "LEFT JOIN s ON s.run = t.run"

int pl__pg_lease_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    switch (which) {
    case L_RUN_LOAD:
    case L_READ_ROOT:
        return (*out = pl__pg_read_sql(s, which)) ? PL_OK : PL_ENOMEM;
    case L_ACQUIRE: return pl__pg_time_sql(s, which, out);
    case L_GET:
        *out = pl__asprintf("SELECT run, gen, expires - " NOW_US ", owner, id "
                            "FROM \"%s\".leases WHERE run = $1::bigint",
                            n);
        break;
    case L_GETS: /* $1: "{3,17}" */
        *out = pl__asprintf("SELECT run, gen, expires - " NOW_US ", owner, id "
                            "FROM \"%s\".leases WHERE run = ANY($1::bigint[])",
                            n);
        break;
    case L_RATE:
    case L_RATE_GET:
    case L_UNITS:
    case L_UNITS_GET: return pl__pg_flow_sql(s, which, out);
    case L_RENEW:
        /* rows a commit has locked (its fence) are skipped, not waited
         * for: renewed next time, never a deadlock with a group commit */
        *out = pl__asprintf(
            "WITH mine AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) "
            "AS u(run, gen)), locked AS (SELECT l.run FROM \"%s\".leases l "
            "JOIN mine ON l.run = mine.run AND l.gen = mine.gen WHERE "
            "l.fkey IS NULL OR l.expires > " NOW_US " ORDER BY "
            "l.run FOR UPDATE OF l SKIP LOCKED), upd AS (UPDATE \"%s\".leases "
            "l SET expires = " NOW_US " + $3::bigint FROM locked WHERE "
            "l.run = locked.run RETURNING l.run) SELECT mine.run FROM mine "
            "WHERE NOT EXISTS (SELECT 1 FROM \"%s\".leases l WHERE l.run = "
            "mine.run AND l.gen = mine.gen AND (l.fkey IS NULL OR l.expires > " NOW_US
            " OR l.run IN (SELECT run FROM locked)))",
            n, n, n);
        break;
    case L_RELEASE:
        *out = pl__asprintf("DELETE FROM \"%s\".leases WHERE run = $1::bigint "
                            "AND gen = $2::bigint",
                            n);
        break;
    case L_MARK:
        /* the claims of a group (pl__pg_put_batches()), whose Q_WRITE
         * marks no lease: after their states' locks (LEASE MARKS) */
        *out = pl__asprintf("UPDATE \"%s\".leases l SET cancel = true WHERE "
                            "l.run = ANY($1::bigint[]) AND NOT l.cancel AND "
                            "EXISTS (SELECT FROM \"%s\".inbox i WHERE "
                            "i.cancel AND i.run = l.run)",
                            n, n);
        break;
    case L_CREATE_SUCC:
        /* after a continued run's successor's creation, before its
         * predecessor's lease goes: queued at the predecessor's place
         * (none: now), with its key */
        *out = pl__asprintf(
            "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
            "fkey, flimit, ksum) SELECT r.num, 0, '', $1, 0, coalesce(p.qrank, " NOW_US
            "), p.fkey, coalesce(p.flimit, 0), p.ksum FROM \"%s\".runs r "
            "LEFT JOIN \"%s\".leases p ON p.run = $2::bigint WHERE r.id = "
            "convert_to($1, 'UTF8') AND r.num = currval('\"%s\".run_num')",
            n, n, n, n);
        break;
    case L_CREATE_FROM:
        /* L_CREATE of a fork's or an upgrade's new run: the key and limit
         * of run $5 (pl__batch.flow_from), its parked row's, else its
         * lease's (TIMER_KEY's order), with their sum: a damaged one stays
         * damaged (pg_flow.c, KEY SUMS); none when it has none */
        *out = pl__asprintf(
            "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
            "fkey, flimit, ksum) SELECT r.num, CASE WHEN $2 = '' THEN 0 ELSE "
            "1 END, $2, $1, CASE WHEN $2 = '' THEN 0 ELSE " NOW_US
            " + $3::bigint END, " NOW_US " - $4::bigint * %d000, k.fkey, "
            "coalesce(k.flimit, 0), k.ksum FROM \"%s\".runs r LEFT JOIN "
            "LATERAL (SELECT x.fkey, x.flimit, x.ksum FROM (SELECT 0 AS o, "
            "p.fkey, p.flimit, p.ksum FROM \"%s\".parked p WHERE p.run = "
            "$5::bigint UNION ALL SELECT 1, l.fkey, l.flimit, l.ksum FROM "
            "\"%s\".leases l WHERE l.run = $5::bigint) x WHERE x.fkey IS NOT "
            "NULL ORDER BY x.o LIMIT 1) k ON true WHERE r.id = convert_to($1, "
            "'UTF8') AND r.num = currval('\"%s\".run_num')",
            n, PL_PRIORITY_STEP_MS, n, n, n, n);
        break;
    case L_TAKE:
        /* the take (pg_flow.c): the queue's head locked (h) and, without
         * a key, taken here (u), where pl_take()'s PL/pgSQL cost a take
         * more than its statements (bench/README.md); with a key, by
         * pl_take(), which counts the key's places.  Then what the claim
         * needs, in binary: the run's info, its state locked (or, locked
         * by another, NULL and state_busy), whether it has steps, whether
         * a cancellation waits.  Neither the take nor the lock waits for
         * another transaction's */
        *out = pl__asprintf(
            "WITH " TAKE_HEAD ", u AS (UPDATE \"%s\".leases l SET "
            "gen = l.gen + 1, owner = $1, expires = " NOW_US " + $2::bigint "
            "FROM h WHERE l.run = h.run AND h.fkey IS NULL RETURNING l.run, "
            "l.gen, l.expires - " NOW_US " AS expires_in, l.owner, l.id), t AS "
            "MATERIALIZED (SELECT * FROM u UNION ALL SELECT * FROM "
            "\"%s\".pl_take($1, $2::bigint) WHERE EXISTS (SELECT 1 FROM h "
            "WHERE h.fkey IS NOT NULL) LIMIT 1), " TAKE_READS,
            n, n, n, n, n, n, n, n, n, n, n);
        break;
    case L_TAKE_DUES: return pl__pg_wake_sql(s, out);
    case L_TAKE_READ:
        /* TAKE_READS of run $1, whose lease this take holds (t, as L_TAKE
         * answers it; h: no keyed head, its key's check L_TAKE's), in a
         * snapshot of its own (pl__pg_take_read()); with $2, a wake's: the
         * run's timer and parked row, which pl_wake() locked and L_TAKE_DUES
         * may not have seen, deleted too; nine schemas */
        *out = pl__asprintf(
            "WITH dt AS (DELETE FROM \"%s\".timers WHERE run = $1::bigint AND "
            "$2::boolean), dp AS (DELETE FROM \"%s\".parked WHERE run = "
            "$1::bigint AND $2::boolean), t AS MATERIALIZED (SELECT l.run, "
            "l.gen, l.expires - " NOW_US " AS expires_in, l.owner, l.id FROM "
            "\"%s\".leases l WHERE l.run = $1::bigint), h AS (SELECT NULL::text "
            "AS fkey WHERE false), " TAKE_READS,
            n, n, n, n, n, n, n, n, n);
        break;
    case L_POLL:
        /* what pl_take() and the timers' take (L_TAKE_DUES) look for, by
         * index (the clock read once: a bound the index can use), without
         * taking or locking: a run queued or a lease run out, a timer
         * due, and the earliest timer; in binary.  Each of the leases'
         * indexes is read at its first entry (min()): an EXISTS of a
         * partial index's rows the server would plan as a sequential
         * scan, which passes every live lease */
        *out = pl__asprintf(
            "SELECT (SELECT min(qrank) FROM \"%s\".leases WHERE owner = '') "
            "IS NOT NULL OR coalesce(" LIVE_RUN_OUT(
                "%s") ", false), EXISTS (SELECT 1 FROM \"%s\".timers "
                      "WHERE due <= " NOW_ONCE
                      "), (SELECT min(due) FROM \"%s\".timers)",
            n, n, n, n);
        break;
    default: /* L_CREATE: after the run's creation, in its transaction;
              * its flow (pg_flow.c) with it */
        *out = pl__asprintf(
            "INSERT INTO \"%s\".leases (run, gen, owner, id, expires, qrank, "
            "fkey, flimit) SELECT num, CASE WHEN $2 = '' THEN 0 ELSE 1 END, "
            "$2, $1, CASE WHEN $2 = '' THEN 0 ELSE " NOW_US " + $3::bigint "
            "END, " NOW_US " - $4::bigint * %d000, NULLIF($5, ''), "
            "$6::integer FROM \"%s\".runs WHERE id = convert_to($1, 'UTF8') "
            "AND num = currval('\"%s\".run_num')",
            n, PL_PRIORITY_STEP_MS, n, n);
        break;
    }
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

/* Make the leases table and the fence function if they are not there. */
char *pl__pg_lease_ddl(const pl__pg_store *s)
{
    const char *n = s->schema;
    return pl__asprintf(
        "CREATE TABLE IF NOT EXISTS \"%s\".leases (run bigint PRIMARY KEY, "
        "gen bigint NOT NULL, owner text NOT NULL, id text NOT NULL, "
        "expires bigint NOT NULL);"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_fence(r bigint, g bigint, "
        "dropit boolean) RETURNS void LANGUAGE plpgsql AS $f$ "
        "DECLARE holder text; BEGIN "
        "PERFORM 1 FROM \"%s\".leases WHERE run = r AND gen = g FOR UPDATE; "
        "IF NOT FOUND THEN "
        "SELECT owner INTO holder FROM \"%s\".leases WHERE run = r; "
        "RAISE EXCEPTION 'run #%%: this worker''s lease (generation %%) was "
        "taken over by %%; nothing more is written', r, g, "
        "CASE WHEN holder IS NULL THEN 'nobody (it was dropped)' WHEN "
        "holder = '' THEN 'the queue' ELSE holder END "
        "USING ERRCODE = '" FENCE_STATE "'; END IF; "
        "IF dropit THEN DELETE FROM \"%s\".leases WHERE run = r; END IF; "
        "END $f$;"
        /* the fences of a commit's batches (pg_commit.c), in the order
         * of their runs, so that two commits lock rows in one order */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_fences(rs bigint[], gs bigint[], "
        "ds boolean[]) RETURNS void LANGUAGE plpgsql AS $f$ "
        "DECLARE i bigint; holder text; hgen bigint; BEGIN "
        "FOR i IN SELECT o FROM unnest(rs) WITH ORDINALITY AS u(r, o) "
        "ORDER BY r, o LOOP "
        /* a lease of a run with a concurrency key that ran out lost its
         * place too (pg_flow.c) */
        "PERFORM 1 FROM \"%s\".leases WHERE run = rs[i] AND gen = gs[i] "
        "AND (fkey IS NULL OR expires > " NOW_US ") FOR UPDATE; "
        "IF NOT FOUND THEN "
        "SELECT owner, gen INTO holder, hgen FROM \"%s\".leases WHERE run = "
        "rs[i]; " FENCE_RAISE "END IF; "
        "IF ds[i] THEN DELETE FROM \"%s\".leases WHERE run = rs[i]; END IF; "
        "END LOOP; END $f$;"
        /* what a commit whose fence failed calls (Q_WRITE: the fences
         * themselves are plain SQL): the error of the first run, in run
         * order, whose lease the commit no longer holds; it always
         * raises */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_fence_lost(rs bigint[], "
        "gs bigint[]) RETURNS boolean LANGUAGE plpgsql AS $f$ "
        "DECLARE i bigint; holder text; hgen bigint; live boolean; BEGIN "
        "FOR i IN SELECT o FROM unnest(rs) WITH ORDINALITY AS u(r, o) "
        "ORDER BY r, o LOOP "
        "holder := NULL; hgen := NULL; live := NULL; "
        "SELECT owner, gen, fkey IS NULL OR expires > " NOW_US " INTO holder, "
        "hgen, live FROM \"%s\".leases WHERE run = rs[i]; "
        "IF hgen = gs[i] AND live THEN CONTINUE; END IF; " FENCE_RAISE
        "END LOOP; "
        "RAISE EXCEPTION 'run #%%: this worker''s lease was taken over; "
        "nothing more is written', rs[1] USING ERRCODE = '" FENCE_STATE "'; "
        "END $f$;",
        n, n, n, n, n, n, n, n, n, n, n);
}

/* The leases' marks (LEASE MARKS above), after the inbox is made: a store
 * made before them gains the column, each lease marked as its run's inbox
 * says; and pl_cancel_mark(run), which marks the run's lease and answers
 * the run's number (a claim's statement calls it: pg_one.c). */
char *pl__pg_marks_ddl(const pl__pg_store *s)
{
    const char *n = s->schema;
    return pl__asprintf(
        "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute WHERE "
        "attrelid = '\"%s\".leases'::regclass AND attname = 'cancel' AND "
        "NOT attisdropped) THEN ALTER TABLE \"%s\".leases ADD COLUMN IF NOT "
        "EXISTS cancel boolean NOT NULL DEFAULT false; UPDATE \"%s\".leases "
        "l SET cancel = true WHERE EXISTS (SELECT FROM \"%s\".inbox i WHERE "
        "i.cancel AND i.run = l.run); END IF; END $d$;"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_cancel_mark(r bigint) RETURNS "
        "text LANGUAGE plpgsql AS $f$ BEGIN UPDATE \"%s\".leases SET cancel "
        "= true WHERE run = r AND NOT cancel; RETURN r::text; END $f$;",
        n, n, n, n, n, n);
}

/* Run a lease statement with text parameters and text results. */
int pl__pg_lease_exec(pl__pg_store *s, int which, int n,
                      const char *const *vals, PGresult **out, const char *what)
{
    *out = NULL;
    if (s->read_only && which != L_GET && which != L_GETS)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    PGresult *r = pl__pg_exec_q(s, c, which, n, vals, NULL, NULL);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK) {
        st = pl__pg_err(s, c, r, what);
        PQclear(r);
        r = NULL;
    }
    pl__pg_conn_put(s, c);
    *out = r;
    return st;
}

bool pl__pg_parse_i64(const char *p, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p || *end)
        return false;
    *out = v;
    return true;
}

/* Row @p i of (run, gen, expires_in, owner, id) into @p out. */
static int lease_row(const pl__pg_store *s, PGresult *r, int i, pl__lease *out)
{
    int64_t run, gen, in;
    const char *owner = PQgetvalue(r, i, 3), *id = PQgetvalue(r, i, 4);
    if (PQnfields(r) != 5 || !pl__pg_parse_i64(PQgetvalue(r, i, 0), &run) ||
        !pl__pg_parse_i64(PQgetvalue(r, i, 1), &gen) ||
        !pl__pg_parse_i64(PQgetvalue(r, i, 2), &in) ||
        strlen(owner) >= sizeof out->owner || strlen(id) >= sizeof out->id)
        return pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                       s->path);
    out->run = (uint64_t)run;
    out->gen = (uint64_t)gen;
    out->expires_in_us = in;
    snprintf(out->owner, sizeof out->owner, "%s", owner);
    snprintf(out->id, sizeof out->id, "%s", id);
    return PL_OK;
}

int pl__pg_lease_get(pl__pg_store *s, uint64_t run, pl__lease *out)
{
    char a[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    const char *vals[1] = {a};
    PGresult *r;
    int st = pl__pg_lease_exec(s, L_GET, 1, vals, &r, "reading a lease");
    if (!st && PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "run #%llu holds no lease",
                     (unsigned long long)run);
    else if (!st)
        st = lease_row(s, r, 0, out);
    PQclear(r);
    return st;
}

int pl__pg_leases_get(pl__pg_store *s, const uint64_t *runs, size_t n,
                      pl__lease *out, bool *found)
{
    for (size_t i = 0; i < n; i++)
        found[i] = false;
    if (!n)
        return PL_OK;
    pl__buf a = {0};
    int st = pl__pg_int_array(&a, runs, n);
    PGresult *r = NULL;
    if (!st) {
        const char *vals[1] = {(const char *)a.data};
        st = pl__pg_lease_exec(s, L_GETS, 1, vals, &r, "reading leases");
    }
    for (int j = 0; !st && j < PQntuples(r); j++) {
        pl__lease l;
        if ((st = lease_row(s, r, j, &l)))
            break;
        for (size_t i = 0; i < n; i++)
            if (runs[i] == l.run) {
                out[i] = l;
                found[i] = true;
            }
    }
    PQclear(r);
    pl__buf_free(&a);
    return st;
}

int pl__pg_lease_acquire(pl__pg_store *s, uint64_t run, const char *run_id,
                         const char *owner, int64_t lease_us,
                         uint64_t steal_gen, bool wake, uint64_t *gen,
                         bool *had, pl__lease *held)
{
    char a[24], d[24], g[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    snprintf(g, sizeof g, "%llu", (unsigned long long)steal_gen);
    const char *vals[5] = {a, owner, run_id, d, g};
    int tries = 0;
    PGresult *r;
    int st;
again:
    /* as a wake: a delivery's take of the lease (pg_time.c), a run parked
     * with a key only while the key has room, the lease getting it back */
    st = pl__pg_lease_exec(s, wake ? T_ACQUIRE : L_ACQUIRE, 5, vals, &r,
                           "taking a lease");
    if (st)
        return st;
    int64_t v = 0, x = 0;
    if (PQntuples(r) == 1) {
        if (!pl__pg_parse_i64(PQgetvalue(r, 0, 0), &v) ||
            !pl__pg_parse_i64(PQgetvalue(r, 0, 1), &x))
            st = pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                         s->path);
        else if (v == -1) /* L_ACQUIRE's */
            st = pl__err(PL_ECORRUPT,
                         "store '%s': the concurrency key of run #%llu (its "
                         "parked row) is damaged",
                         s->path, (unsigned long long)run);
        *gen = (uint64_t)v;
        *had = x != 0;
        PQclear(r);
        return st;
    }
    PQclear(r);
    /* held by another: say by whom (it may have gone meanwhile) */
    st = pl__pg_lease_get(s, run, held);
    if (wake && (st == PL_ENOTFOUND ||
                 (!st && (held->expires_in_us <= 0 || !*held->owner)))) {
        memset(held, 0, sizeof *held); /* its key is full */
        return pl__err(PL_EBUSY, "run #%llu waits for its concurrency key",
                       (unsigned long long)run);
    }
    /* gone between the two statements (its execution ended and dropped
     * it): free now, so taken as any free lease, never reported held */
    if (st == PL_ENOTFOUND && tries++ < 3) {
        pl__err_clear();
        goto again;
    }
    if (st == PL_ENOTFOUND)
        snprintf(held->owner, sizeof held->owner, "another worker");
    return pl__err(PL_EBUSY, "run #%llu is leased to %s",
                   (unsigned long long)run, held->owner);
}

/* ---- a worker's take ------------------------------------------------------ */

/*
 * TAKE (store.h) in one transaction, two round trips: BEGIN and L_TAKE
 * (pl_take(), the run's info, its state locked, whether it has steps and
 * a cancellation waiting), then the claimed state written with COMMIT (or
 * COMMIT alone: the lease kept unclaimed; or the lease dropped first), so
 * one WAL flush (a run queued since L_TAKE began, which pl_take() may
 * take, one round trip more: take_again()).  Nothing waits for another
 * transaction: pl_take() skips locked leases and keys, and a state
 * another transaction holds (a delivery, a deletion, which lock the state
 * before the lease) rolls the take back, to be taken next time, instead
 * of waiting for it in the opposite order.
 */
typedef struct take_row {
    pl__pg_store *s;
    PGconn *c;
    bool found, state_busy, has_info, has_state;
    bool damaged; /* its key or limit (TAKE_READS) */
    pl__taken t;
    pl__buf info, state;
} take_row;

static bool bin_i64(const PGresult *r, int col, int64_t *v)
{
    if (PQgetisnull(r, 0, col) || PQgetlength(r, 0, col) != 8)
        return false;
    *v = (int64_t)pl__get_be64((const uint8_t *)PQgetvalue(r, 0, col));
    return true;
}

static bool bin_true(const PGresult *r, int col)
{
    return PQgetlength(r, 0, col) == 1 && *PQgetvalue(r, 0, col) != 0;
}

static int bin_text(const PGresult *r, int col, char *out, size_t n)
{
    int len = PQgetlength(r, 0, col);
    if (PQgetisnull(r, 0, col) || len < 0 || (size_t)len >= n)
        return PL_ECORRUPT;
    memcpy(out, PQgetvalue(r, 0, col), (size_t)len);
    out[len] = '\0';
    return PL_OK;
}

/* The results of BEGIN and L_TAKE, then of what ends the transaction. */
static int take_result(size_t i, PGresult *r, void *user)
{
    take_row *x = user;
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK)
        return pl__pg_err(x->s, x->c, r, "taking a queued run");
    if (i != 1 || x->found || PQntuples(r) == 0)
        return PL_OK;
    int64_t run, gen, in;
    pl__lease *l = &x->t.lease;
    if (PQnfields(r) != 11 || !bin_i64(r, 0, &run) || !bin_i64(r, 1, &gen) ||
        !bin_i64(r, 2, &in) || bin_text(r, 3, l->owner, sizeof l->owner) ||
        bin_text(r, 4, l->id, sizeof l->id))
        return pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                       x->s->path);
    x->found = true;
    l->run = (uint64_t)run;
    l->gen = (uint64_t)gen;
    l->expires_in_us = in;
    x->has_info = !PQgetisnull(r, 0, 5);
    x->has_state = !PQgetisnull(r, 0, 6);
    x->state_busy = bin_true(r, 7);
    x->t.known = true;
    x->t.no_steps = !bin_true(r, 8);
    x->t.inbox_cancel = bin_true(r, 9);
    x->damaged = bin_true(r, 10);
    int st = PL_OK;
    if (x->has_info)
        st = pl__buf_append(&x->info, PQgetvalue(r, 0, 5),
                            (size_t)PQgetlength(r, 0, 5));
    if (!st && x->has_state)
        st = pl__buf_append(&x->state, PQgetvalue(r, 0, 6),
                            (size_t)PQgetlength(r, 0, 6));
    return st;
}

/* End the take's transaction: the claimed @p state written (len 0: none),
 * the lease dropped first if @p drop (with a state: the run ended, its
 * state written under the lease's fence, which drops it), and COMMIT; one
 * round trip. */
static int take_end(take_row *x, const pl__buf *state, bool drop)
{
    pl__pg_store *s = x->s;
    const pl__lease *l = &x->t.lease;
    if (state->len && drop) {
        pl__batch b = {.run = l->run, .gen = l->gen, .release = true};
        b.state = *state; /* borrowed: not freed here */
        pl__batch *one[1] = {&b};
        return pl__pg_put_batches(s, x->c, one, 1, 0);
    }
    if (state->len) {
        pl__kvs none = {0};
        return pl__pg_put_state(s, x->c, l->run, state, &none);
    }
    if (!drop)
        return pl__pg_command(s, x->c, "COMMIT", "committing");
    char a[24], g[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)l->run);
    snprintf(g, sizeof g, "%llu", (unsigned long long)l->gen);
    const char *vals[2] = {a, g};
    if (PQenterPipelineMode(x->c) != 1)
        return pl__pg_err(s, x->c, NULL, "entering pipeline mode");
    int st = pl__pg_send(s, x->c, L_RELEASE, 2, vals, NULL, NULL,
                         "dropping a lease");
    if (!st)
        st = pl__pg_send(s, x->c, Q_COMMIT, 0, NULL, NULL, NULL, "committing");
    return st ? st
              : pl__pg_pipeline_finish(s, x->c, 2, take_result, x,
                                       "dropping a lease");
}

int pl__pg_begin_with(pl__pg_store *s, PGconn *c, int which, int n,
                      const char *const *vals, pl__pg_result_fn fn, void *user,
                      const char *what)
{
    if (PQenterPipelineMode(c) != 1)
        return pl__pg_err(s, c, NULL, "entering pipeline mode");
    int st = pl__pg_send(s, c, Q_BEGIN, 0, NULL, NULL, NULL,
                         "beginning a transaction");
    if (!st)
        st = pl__pg_send(s, c, which, n, vals, NULL, NULL, what);
    return st ? st : pl__pg_pipeline_finish(s, c, 2, fn, user, what);
}

/*
 * A run a take took whose records its statement may not have seen: the
 * statement reads them as of its start, and pl_take() and pl_wake(),
 * VOLATILE functions whose statements each read the newest rows, may
 * take a run queued (past a full key's head) or made waiting after that.
 * Such a run is whole: its records are read again by a statement of the
 * take's transaction (L_TAKE_READ, its state locked as L_TAKE locks it),
 * and only a record missing from that read is missing.  Read as missing,
 * it was set aside as a damaged run is, its lease dropped, and no worker
 * took it again: a run queued behind a full key while a worker took
 * never ran.
 */
int pl__pg_take_read(pl__pg_store *s, PGconn *c, uint64_t run, bool wake,
                     PGresult **out)
{
    char a[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    const char *vals[2] = {a, wake ? "true" : "false"};
    PGresult *r = pl__pg_exec_q(s, c, L_TAKE_READ, 2, vals, NULL, NULL);
    int st = PL_OK;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pl__pg_err(s, c, r, "reading a run taken");
    else if (PQntuples(r) != 1) /* the lease this transaction holds */
        st = pl__err(PL_ESTORE, "store '%s': run #%llu's lease is gone",
                     s->path, (unsigned long long)run);
    if (st) {
        PQclear(r);
        r = NULL;
    }
    *out = r;
    return st;
}

/* pl__pg_take_read() of the run L_TAKE took whose info or state it did
 * not see, or whose steps it did not see and another worker may have
 * written: a lease held before (its generation past 1) and run out, its
 * holder alive and, the run without a key, not fenced by the clock, may
 * have committed its first steps after L_TAKE began and before it locked
 * the lease.  The state is read as locked, newest; the steps' EXISTS as
 * of the statement's start. */
static int take_again(take_row *x)
{
    PGresult *r;
    int st = pl__pg_take_read(x->s, x->c, x->t.lease.run, false, &r);
    if (st)
        return st;
    bool damaged = x->damaged; /* asked by L_TAKE, after pl_take() */
    pl__buf_reset(&x->info);
    pl__buf_reset(&x->state);
    x->found = x->has_info = x->has_state = false;
    st = take_result(1, r, x);
    PQclear(r);
    x->damaged = damaged;
    return st;
}

/* A take by statement @p which: L_TAKE (the queue; due timers: pg_wake.c). */
static int take_by(pl__pg_store *s, int which, const char *owner,
                   int64_t lease_us, pl__take_fn fn, void *user, pl__lease *out,
                   bool *taken)
{
    *taken = false;
    if (s->read_only)
        return pl__pg_read_only(s);
    take_row x = {.s = s};
    int st = pl__pg_conn_get(s, &x.c);
    if (st)
        return st;
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    const char *vals[2] = {owner, d};
    st = pl__pg_begin_with(s, x.c, which, 2, vals, take_result, &x,
                           "taking a queued run");
    if (!st && x.found && !x.state_busy &&
        (!x.has_info || !x.has_state || (x.t.no_steps && x.t.lease.gen > 1)))
        st = take_again(&x);
    if (!st && !x.found)
        st = PL_ENOTFOUND;
    else if (!st && x.state_busy)
        st = pl__err(PL_EBUSY,
                     "run #%llu's state is being written by another "
                     "transaction: it is taken next time",
                     (unsigned long long)x.t.lease.run);
    else if (!st) {
        pl__buf claimed = {0};
        bool drop = false;
        int fst;
        if (!x.has_info || !x.has_state) {
            /* never runnable: its lease dropped, not taken again */
            fst = pl__err(PL_ECORRUPT, "run '%s' (#%llu) has no %s record",
                          x.t.lease.id, (unsigned long long)x.t.lease.run,
                          x.has_info ? "state" : "info");
            drop = true;
        } else {
            x.t.info = x.info.data;
            x.t.info_len = x.info.len;
            x.t.state = x.state.data;
            x.t.state_len = x.state.len;
            /* taken past its key's limit, maybe: never executed, fn
             * fails it (pg_flow.c, KEY SUMS) */
            x.t.key_damaged = x.damaged;
            fst = fn(&x.t, &claimed, &drop, user);
        }
        if (fst && !drop)
            pl__buf_reset(&claimed); /* the lease alone */
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        st = take_end(&x, &claimed, fst && drop);
        pl__buf_free(&claimed);
        if (!st) {
            *out = x.t.lease;
            *taken = true;
            pl__errmsg_restore(saved);
            st = fst;
        }
    }
    if (st && !*taken)
        x.c = pl__pg_rollback(s, x.c);
    pl__pg_conn_put(s, x.c);
    pl__buf_free(&x.info);
    pl__buf_free(&x.state);
    return st;
}

int pl__pg_take(pl__pg_store *s, const char *owner, int64_t lease_us,
                pl__take_fn fn, void *user, pl__lease *out, bool *taken)
{
    return take_by(s, L_TAKE, owner, lease_us, fn, user, out, taken);
}

/* POLL (store.h): L_POLL, one round trip, in its own implicit
 * transaction: read-only, it neither takes nor waits. */
int pl__pg_poll(pl__pg_store *s, bool *queued, bool *due, int64_t *next_due_us)
{
    *queued = *due = false;
    *next_due_us = 0;
    if (s->read_only)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    PGresult *r = pl__pg_exec_q(s, c, L_POLL, 0, NULL, NULL, NULL);
    int64_t next = 0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pl__pg_err(s, c, r, "looking at the queue");
    else if (PQntuples(r) != 1 || PQnfields(r) != 3 ||
             PQgetlength(r, 0, 0) != 1 || PQgetlength(r, 0, 1) != 1 ||
             (!PQgetisnull(r, 0, 2) && !bin_i64(r, 2, &next)))
        st = pl__err(PL_ECORRUPT, "store '%s': the queue's answer is malformed",
                     s->path);
    else {
        *queued = bin_true(r, 0);
        *due = bin_true(r, 1);
        *next_due_us = next;
    }
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}

int pl__pg_lease_renew(pl__pg_store *s, const uint64_t *runs,
                       const uint64_t *gens, size_t n, int64_t lease_us,
                       bool *lost)
{
    if (!n)
        return PL_OK;
    pl__buf ra = {0}, ga = {0};
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    int st = pl__pg_int_array(&ra, runs, n);
    if (!st)
        st = pl__pg_int_array(&ga, gens, n);
    PGresult *r = NULL;
    if (!st) {
        const char *vals[3] = {(const char *)ra.data, (const char *)ga.data, d};
        st = pl__pg_lease_exec(s, L_RENEW, 3, vals, &r, "renewing leases");
    }
    /* the rows returned are the leases no longer held */
    for (size_t i = 0; !st && i < n; i++) {
        lost[i] = false;
        for (int j = 0; j < PQntuples(r); j++) {
            int64_t v;
            if (pl__pg_parse_i64(PQgetvalue(r, j, 0), &v) &&
                (uint64_t)v == runs[i])
                lost[i] = true;
        }
    }
    PQclear(r);
    pl__buf_free(&ra);
    pl__buf_free(&ga);
    return st;
}

int pl__pg_lease_release(pl__pg_store *s, uint64_t run, uint64_t gen)
{
    char a[24], g[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    snprintf(g, sizeof g, "%llu", (unsigned long long)gen);
    const char *vals[2] = {a, g};
    PGresult *r;
    int st = pl__pg_lease_exec(s, L_RELEASE, 2, vals, &r, "dropping a lease");
    PQclear(r);
    return st;
}

/* The status of a failed lease statement of a commit. */
int pl__pg_lease_failed(pl__pg_store *s, PGconn *c, const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!code || strcmp(code, FENCE_STATE) != 0)
        return pl__pg_err(s, c, r, "committing");
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    return pl__err(PL_EBUSY, "%s",
                   m ? m
                     : "this worker's lease was taken "
                       "over");
}
