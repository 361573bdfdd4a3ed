/*
 * pg_one.c -- the statements of a commit's writes: one run's (a call's
 * commit) made of the parts the write has and nothing else, and a group's
 * (Q_WRITE), every run's at once.
 *
 * Q_WRITE writes any number of runs, and for that it carries every kind of
 * record a commit may write as arrays, one data-modifying CTE each: for a
 * call's commit, which writes two steps under its lease's fence, it made
 * the server start and end all of them (the state, timers, inbox, parked
 * runs and dropped leases, their tables and indexes opened for nothing).
 *
 * In one run's statement the run's number, its fence's generation, its
 * state, timer and inbox record are scalars, and the statement has a part
 * only for what the write has:
 *
 *   | part      | when                        | what                       |
 *   |-----------|-----------------------------|----------------------------|
 *   | ONE_FENCE | the write holds a lease     | its row locked, if it is   |
 *   |           | (pl__batch.gen)             | still that generation: one |
 *   |           |                             | index probe, in the main   |
 *   |           |                             | query's check              |
 *   | ONE_GEN   | the fence's generation is   | the fence does not ask     |
 *   |           | known to hold no            | whether a keyed lease ran  |
 *   |           | concurrency key             | out (5.5k instructions)    |
 *   | ONE_DROP  | the execution ended         | the lease dropped          |
 *   | ONE_STEPS | steps                       | inserted from two arrays   |
 *   | ONE_PAIR  | two steps (a call's         | inserted as one row of     |
 *   |           | action_call and its result) | scalars (VALUES): no array |
 *   |           | of at most PAIR_BYTES, the  | to build or take apart,    |
 *   |           | second's key the next of    | one tuple and one index    |
 *   |           | the first's                 | entry (pg_read.c, PAIRS)   |
 *   | ONE_STATE | a state                     | upserted                   |
 *   | ONE_TIMER | a timer                     | upserted, an earlier one   |
 *   |           |                             | kept                       |
 *   | ONE_INBOX | an inbox record consumed    | deleted; it must be there  |
 *   | ONE_PARK  | the run parks with its key  | its key kept (pg_flow.c)   |
 *   |           | (ONE_DROP without it: its   | (its row deleted)          |
 *   |           | execution ends)             |                            |
 *   | ONE_RIDE  | a delivery rides the write  | the lease taken, the timer |
 *   |           | and the write consumes its  | due now, the record's seq  |
 *   |           | record (pg_time.c)          | and the lease checked      |
 *   | ONE_      | with ONE_RIDE: a run this   | the same, its parked row   |
 *   | UNKEYED   | store made without a key    | neither read nor deleted   |
 *   |           | (pg_cache.c)                | (it has none)              |
 *
 * and always whether a cancellation waits for the run, the answer's one
 * column (the run's number when one does; ONE_RIDE: its third, as
 * Q_WRITE's, before the ride's): with ONE_FENCE the mark on the lease row
 * the fence locks and reads anyway (LEASE MARKS, pg_lease.c); without a
 * fence, a look in its inbox (an EXISTS, which stops at the first entry
 * of inbox_cancel; a state written without a fence, a claim's, marks the
 * run's lease when it finds one).  Its errors are Q_WRITE's: a fence that
 * failed calls pl_fence_lost(), a record consumed by another execution
 * pl_consumed(), before anything is written.
 *
 * Each combination of parts is its own prepared statement, made on a
 * connection the first time a commit of that shape goes through it: sent
 * first in the commit's pipeline, so the commit is still one round trip.
 * A connection remembers the shapes it has prepared (libpq's instance
 * data).  With scalars and no part that writes nothing, the plan the
 * server keeps is the one it would make for the values at hand, so it
 * keeps it.
 *
 * A group commit (several batches that write runs) goes as one statement
 * of arrays instead, Q_WRITE (below): its fences, steps, states, timers
 * and inbox records for every run at once, the lease rows locked in run
 * order, every fence before any lease is dropped, a run's last state and
 * earliest timer kept.  A statement a run costs the server each one's
 * bind, start and end of its plan's nodes, ~25 us, for the one call a run
 * a group commit mostly carries; Q_WRITE costs that once a group.  Its
 * plan is kept generic on purpose (Q_GENERIC), for that transaction only.
 */
#include "pg_int.h"
#include "runrec.h"

#include <assert.h>
#include <libpq-events.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parameters, in the order every shape's statement numbers them: a
 * shape is prepared with, and sends, those up to the last it uses (the
 * server looks up each parameter's type on every Bind, NULL or not), so
 * the call's shape (ONE_FENCE | ONE_PAIR) has six. */
enum {
    P_RUN,
    P_GEN,
    P_K1, /* ONE_PAIR: the two steps' keys and values */
    P_V1,
    P_K2,
    P_V2,
    P_KEYS,
    P_VALS,
    P_STATE,
    P_DUE,
    P_TID,
    P_TREC,
    P_SEQ,
    P_OWNER,
    P_LEASE,
    P_N
};

/* A lease's mark from the inbox (LEASE MARKS, pg_lease.c): whether a
 * cancellation waits there for run $1, read by a ride's take and a claim
 * in a statement whose snapshot comes after the run's state's lock (an
 * earlier statement: T_RIDE_LOCK, the claim's); one schema. */
#define INBOX_MARK                                                             \
    "EXISTS (SELECT FROM \"%s\".inbox i WHERE i.cancel AND i.run = $1)"

/* A pair of steps of at most this many bytes goes as scalars (ONE_PAIR);
 * a larger one as arrays, chunked as any steps are (pg_commit.c). */
#define PAIR_BYTES (1u << 20)

/* Their types (pg_type.oid): given when the statement is prepared, so a
 * shape need not use them all. */
static const Oid param_types[P_N] = {20 /* int8 */,
                                     20,
                                     17 /* bytea */,
                                     17,
                                     17,
                                     17,
                                     1001 /* bytea[] */,
                                     1001,
                                     17,
                                     20,
                                     25 /* text */,
                                     17,
                                     20,
                                     25,
                                     20};

/* How many parameters shape @p m's statement has: up to the last it
 * uses. */
static int one_nparams(unsigned m)
{
    if (m & ONE_RIDE)
        return P_LEASE + 1;
    if (m & ONE_INBOX)
        return P_SEQ + 1;
    if (m & ONE_TIMER)
        return P_TREC + 1;
    if (m & ONE_STATE)
        return P_STATE + 1;
    if (m & ONE_STEPS)
        return P_VALS + 1;
    if (m & ONE_PAIR)
        return P_V2 + 1;
    return m & ONE_FENCE ? P_GEN + 1 : P_RUN + 1;
}

/* Whether @p steps are two of at most PAIR_BYTES together, the second's
 * key the one right after the first's (ONE_PAIR: one row, pg_read.c,
 * PAIRS). */
static bool pair_fits(const pl__kvs *steps)
{
    if (steps->n != 2)
        return false;
    uint64_t bytes = 0;
    for (size_t i = 0; i < 2; i++)
        bytes += (uint64_t)steps->e[i].klen + steps->e[i].vlen;
    size_t len = steps->e[0].klen;
    const uint8_t *a = pl__kvs_key(steps, 0), *b = pl__kvs_key(steps, 1);
    return bytes <= PAIR_BYTES && len >= 12 && steps->e[1].klen == len &&
           !memcmp(a, b, len - 4) &&
           pl__get_be32(b + len - 4) == pl__get_be32(a + len - 4) + 1 &&
           pl__get_be32(b + len - 4) != 0;
}

unsigned pl__pg_one_shape(const pl__batch *bt, bool timer)
{
    unsigned m = 0;
    if (bt->gen)
        m |= ONE_FENCE | (bt->release ? ONE_DROP : 0) |
             (bt->park ? ONE_PARK : 0) |
             (bt->nokey_gen == bt->gen ? ONE_GEN : 0);
    if (pair_fits(&bt->steps))
        m |= ONE_PAIR;
    else if (bt->steps.n)
        m |= ONE_STEPS;
    if (bt->state.len)
        m |= ONE_STATE;
    if (timer)
        m |= ONE_TIMER;
    if (bt->inbox_del)
        m |= ONE_INBOX;
    return m;
}

/* ---- the shapes a connection has prepared -------------------------------- */

/* One bit a shape: ONE_SHAPES of them. */
typedef struct prepared {
    uint64_t bits[(ONE_SHAPES + 63) / 64];
} prepared;

static int conn_event(PGEventId id, void *info, void *pass)
{
    (void)pass;
    if (id == PGEVT_CONNDESTROY) {
        const PGEventConnDestroy *d = info;
        free(PQinstanceData(d->conn, conn_event));
    }
    return 1;
}

static bool one_prepared(PGconn *c, unsigned shape)
{
    const prepared *p = PQinstanceData(c, conn_event);
    return p && (p->bits[shape / 64] >> (shape % 64) & 1);
}

/* @p c's record of its shapes, made the first time (NULL: no memory). */
static prepared *conn_prepared(PGconn *c)
{
    prepared *p = PQinstanceData(c, conn_event);
    if (p)
        return p;
    if (!(p = calloc(1, sizeof *p)))
        return NULL;
    /* registered once a connection: its destruction frees the record */
    (void)PQregisterEventProc(c, conn_event, "policyledger", NULL);
    if (!PQsetInstanceData(c, conn_event, p)) {
        free(p);
        return NULL;
    }
    return p;
}

/* ---- the statements ------------------------------------------------------- */

/* "plone<shape>", the statement's name (written by hand: on every
 * commit, where snprintf() cost more than the rest of the send). */
static void one_name(char *out, size_t n, unsigned shape)
{
    char digits[12];
    size_t k = 0, at = 5;
    do
        digits[k++] = (char)('0' + shape % 10);
    while ((shape /= 10) && k < sizeof digits);
    assert(n > at + k);
    (void)n; /* 24 bytes, always */
    memcpy(out, "plone", at);
    while (k)
        out[at++] = digits[--k];
    out[at] = '\0';
}

/* Shape @p m's statement for schema @p n (NULL: out of memory). */
static char *one_sql(const char *n, unsigned m)
{
    pl__buf b = {0};
    int st = PL_OK;
    const char *sep = "WITH ";
#define PART(bit, ...)                                                         \
    do {                                                                       \
        if (!st && (m & (bit))) {                                              \
            char *x = pl__asprintf(__VA_ARGS__);                               \
            st = x ? pl__buf_append(&b, sep, strlen(sep)) : PL_ENOMEM;         \
            if (!st)                                                           \
                st = pl__buf_append(&b, x, strlen(x));                         \
            free(x);                                                           \
            sep = ", ";                                                        \
        }                                                                      \
    } while (0)
    PART(ONE_DROP, "dr AS (DELETE FROM \"%s\".leases WHERE run = $1)", n);
    PART(ONE_STEPS,
         "k AS (INSERT INTO \"%s\".steps (k, v) SELECT * FROM unnest($7, "
         "$8))",
         n);
    PART(
        ONE_PAIR,
        "k AS (INSERT INTO \"%s\".steps (k, v, v1, k2, v2) VALUES ($3, " PAIR_MARK
        ", $4, $5, $6))",
        n);
    PART(ONE_STATE,
         "t AS (INSERT INTO \"%s\".state (run, v) VALUES ($1, $9) ON "
         "CONFLICT (run) DO UPDATE SET v = excluded.v)",
         n);
    /* an earlier due time is kept (store.h, TIMERS); the timer's key is
     * the run's (pg_flow.c, TIMER KEYS), none when its execution ends
     * without parking */
    bool ends = (m & ONE_DROP) && !(m & ONE_PARK);
    PART(ONE_TIMER,
         ends ? "m AS (INSERT INTO \"%s\".timers AS x (run, due, id, rec, "
                "fkey) VALUES ($1, $10, $11, $12, NULL%.0s%.0s) " TIMER_UPSERT(
                    "x") ")"
              : "m AS (INSERT INTO \"%s\".timers AS x (run, due, id, rec, "
                "fkey) VALUES ($1, $10, $11, $12, " TIMER_KEY(
                    "%s", "$1") ") " TIMER_UPSERT("x") ")",
         n, n, n);
    PART(ONE_INBOX,
         "d AS (DELETE FROM \"%s\".inbox WHERE run = $1 AND seq = $13 "
         "RETURNING 1)",
         n);
    /* from the lease row as it was before dr dropped it */
    PART(ONE_PARK,
         "p AS (INSERT INTO \"%s\".parked AS z (run, fkey, flimit, ksum) "
         "SELECT l.run, l.fkey, l.flimit, l.ksum FROM \"%s\".leases l WHERE "
         "l.run = $1 AND l.fkey IS NOT NULL ON CONFLICT (run) DO UPDATE SET "
         "fkey = excluded.fkey, flimit = excluded.flimit, ksum = "
         "excluded.ksum)",
         n, n);
    /* a delivery riding the write (pg_time.c, ONE_RIDE below): the lease
     * inserted, a plain INSERT (a parked run has no lease row: one there
     * is another's, and its unique violation refuses the ride, as the
     * ride's checks do; bench/README.md has what ON CONFLICT cost), a run
     * parked with a key only while the key has room, the lease given the
     * key back, the parked row gone, the timer due now ($10; the write
     * has no timer of its own: should this process die holding the lease,
     * the timer is what continues the run where no worker takes from the
     * queue, pl_engine_wake() taking due timers alone), or,
     * when the write ends the execution, the run's timer gone (a wake
     * would find nothing to do).  A run without a key (ONE_UNKEYED) has
     * no parked row, and its lease no key to get back: the parked table
     * is not read */
    if (!(m & ONE_UNKEYED))
        PART(ONE_RIDE,
             "rp AS MATERIALIZED (SELECT z.fkey, z.flimit, CASE WHEN " PARKED_OK
             " THEN \"%s\".pl_key_room(z.fkey, z.flimit) ELSE false END AS "
             "room FROM \"%s\".parked z "
             "WHERE z.run = $1), "
             "rg AS (INSERT INTO \"%s\".leases AS l (run, gen, owner, id, "
             "expires, fkey, flimit, cancel) SELECT $1, 1, $14, $11, " NOW_US
             " + $15, (SELECT fkey FROM rp), coalesce((SELECT flimit FROM "
             "rp), 0), " INBOX_MARK " WHERE coalesce((SELECT room FROM rp), "
             "true) RETURNING l.run, l.gen), "
             "rk AS (DELETE FROM \"%s\".parked z USING rg WHERE z.run = "
             "rg.run)",
             n, n, n, n, n);
    else /* its key columns as they are: NULL and 0 */
        PART(ONE_RIDE,
             "rg AS (INSERT INTO \"%s\".leases AS l (run, gen, owner, id, "
             "expires, cancel) VALUES ($1, 1, $14, $11, " NOW_US
             " + $15, " INBOX_MARK ") RETURNING l.run, l.gen)",
             n, n);
    PART(ONE_RIDE,
         ends ? "rt AS (DELETE FROM \"%s\".timers WHERE run = $1%.0s%.0s)"
              : "rt AS (INSERT INTO \"%s\".timers AS x (run, due, id, rec, "
                "fkey) VALUES ($1, $10, $11, $12, " TIMER_KEY(
                    "%s", "$1") ") " TIMER_UPSERT("x") ")",
         n, n, n);
    /* an execution that ends without parking keeps no key: its run's
     * parked row, if a continue by hand left one, goes (pg_flow.c) */
    if (!(m & ONE_PARK))
        PART(ONE_DROP, "pe AS (DELETE FROM \"%s\".parked WHERE run = $1)", n);
    /* nor a timer: one a delivery made due meanwhile (a ride's, a signal
     * while it ran) would wake it for nothing */
    if (ends && !(m & (ONE_TIMER | ONE_RIDE)))
        PART(ONE_DROP, "te AS (DELETE FROM \"%s\".timers WHERE run = $1)", n);
#undef PART
    /* the checks (the main query runs them first, the data-modifying CTEs
     * after it: a failure raises before anything is written), then the
     * run's cancellation, as Q_WRITE answers.  The fence locks its lease row
     * in the EXISTS itself (an InitPlan of the main query), not in a CTE
     * the EXISTS would read: no CTE scan, no tuplestore */
    /* the fence answers the lease row's mark (true: a cancellation
     * waits), or, no row of that generation, raises; a keyed lease must
     * not have run out (its key's place may have gone to another run): a
     * lease known to have no key (ONE_GEN) passes that test whatever the
     * time, and the statement leaves it out */
    char *fence = m & ONE_FENCE
                      ? pl__asprintf(
                            "coalesce((SELECT l.cancel FROM \"%s\"."
                            "leases l WHERE l.run = $1 AND l.gen = $2 %s "
                            "FOR UPDATE), \"%s\".pl_fence_lost(ARRAY[$1], "
                            "ARRAY[$2]))",
                            n,
                            m & ONE_GEN ? ""
                                        : "AND (l.fkey IS NULL OR "
                                          "l.expires > " NOW_US ")",
                            n)
                      : pl__strdup("NULL");
    char *inbox = m & ONE_INBOX ? pl__asprintf("CASE WHEN NOT EXISTS (SELECT "
                                               "FROM d) THEN \"%s\".pl_"
                                               "consumed(1, 0) END",
                                               n)
                                : pl__strdup("NULL");
    /* a ride's: the lease's generation, then its checks (pl_ride(), a
     * PL/pgSQL call made only when one fails, as pl_consumed() above): the
     * record would get the seq the run saw ($13; the write consumes it, so
     * it is not written), and the lease was taken */
    char *ride = m & ONE_RIDE
                     ? pl__asprintf(", (SELECT gen FROM rg), CASE WHEN ("
                                    "SELECT coalesce(max(seq), 0) + 1 FROM "
                                    "\"%s\".inbox WHERE run = $1) = $13 THEN "
                                    "true ELSE \"%s\".pl_ride(false, "
                                    "'another delivery came first') END, CASE "
                                    "WHEN EXISTS (SELECT FROM rg) THEN true "
                                    "ELSE \"%s\".pl_ride(false, 'another "
                                    "holds its lease, or its concurrency key "
                                    "is full') END",
                                    n, n, n)
                     : pl__strdup("");
    /* the answer: a ride's, the checks' columns, the cancellation and the
     * ride's (pg_time.c reads them); any other shape's, one column, the
     * cancellation, after the checks, in order (each NULL, or it raises):
     * without a fence, coalesce() runs the consumption's check before the
     * look in the inbox; with one, its CASE the fence (the lease's mark)
     * before the consumption's.  The server describes and sends every
     * column of every answer: two columns fewer are 4k of a call's 151k
     * instructions on the server (bench/README.md) */
#define PROBE                                                                  \
    "CASE WHEN EXISTS (SELECT FROM \"%s\".inbox i WHERE i.cancel AND i.run = " \
    "$1) THEN $1::text END"
    /* a state written without a fence is a claim's (or a write of a run
     * that holds no lease): when its look finds a cancellation, the run's
     * lease, if it has one, is marked (LEASE MARKS, pg_lease.c), in this
     * statement's snapshot, which a claim takes after its state's lock
     * (an earlier statement).  pl_cancel_mark() runs only then: an UPDATE
     * in the statement cost every claim 35-45k instructions */
    bool claim = (m & ONE_STATE) && !(m & (ONE_FENCE | ONE_DROP | ONE_RIDE));
    char *x =
        !(fence && inbox && ride) ? NULL
        : m & ONE_RIDE
            ? pl__asprintf(" SELECT %s, %s, " PROBE "%s", fence, inbox, n, ride)
        : claim
            ? pl__asprintf(" SELECT coalesce((%s)::text, CASE WHEN " INBOX_MARK
                           " THEN \"%s\".pl_cancel_mark($1) "
                           "END)",
                           inbox, n, n)
        : !(m & ONE_FENCE)
            ? pl__asprintf(" SELECT coalesce((%s)::text, " PROBE ")", inbox, n)
        : m & ONE_INBOX
            ? pl__asprintf(" SELECT CASE WHEN %s THEN coalesce((%s)::"
                           "text, $1::text) ELSE (%s)::text END",
                           fence, inbox, inbox)
            : pl__asprintf(" SELECT CASE WHEN %s THEN $1::text END", fence);
#undef PROBE
    free(fence);
    free(inbox);
    free(ride);
    if (!st)
        st = x ? pl__buf_append(&b, x, strlen(x) + 1) : PL_ENOMEM;
    free(x);
    if (st) {
        pl__buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* Send the preparation of @p shape's statement in a pipeline. */
static int one_prepare(pl__pg_store *s, PGconn *c, unsigned shape)
{
    char name[24];
    one_name(name, sizeof name, shape);
    /* the record first: a shape prepared is always remembered */
    char *sql = conn_prepared(c) ? one_sql(s->schema, shape) : NULL;
    if (!sql)
        return pl__err(PL_ENOMEM, "out of memory");
    int ok = PQsendPrepare(c, name, sql, one_nparams(shape), param_types);
    free(sql);
    pl__pg_count_prepare();
    return ok ? PL_OK : pl__pg_err(s, c, NULL, "preparing a commit");
}

/* ---- a group's statement -------------------------------------------------- */

/*
 * Q_WRITE, a commit's writes of any number of runs (pg_commit.c), in plain
 * SQL: no function runs unless the commit fails.  f locks the lease rows
 * of the fences that hold, in run order, and the main query counts them
 * first: a fence that failed calls pl_fence_lost(), which raises its error
 * (before any row is written: the data-modifying CTEs no query reads run
 * after the main query); then d, the inbox records consumed, each of which
 * must still be there (pl_consumed() raises otherwise); the other CTEs
 * after, to completion.  It answers with the runs of $14 with a
 * cancellation in their inbox.  Each join names its table's rows with
 * = ANY as well, so that the generic plan reads them by index, not the
 * whole table.
 *
 * Q_GENERIC goes before it in the same transaction: a generic plan does
 * not know the arrays' sizes (the server guesses 10 elements), so once the
 * tables have statistics the server would find it dearer than a plan for
 * the arrays at hand and plan Q_WRITE again on every commit, which costs it
 * more than running it; set for the transaction alone (set_config()'s
 * is_local), it leaves every other commit's plans to the server's choice.
 */
int pl__pg_write_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    if (which == Q_WRITE)
        *out = pl__asprintf(
            "WITH f AS (SELECT l.run FROM \"%s\".leases l JOIN "
            "unnest($1::bigint[], $2::bigint[]) AS u(run, gen) ON l.run = "
            "u.run AND l.gen = u.gen WHERE l.run = ANY($1::bigint[]) AND "
            "(l.fkey IS NULL OR l.expires > " NOW_US ") ORDER BY l.run FOR "
            "UPDATE OF l), "
            /* the leases of finished executions, dropped */
            "dr AS (DELETE FROM \"%s\".leases l USING unnest($1::bigint[], "
            "$3::boolean[]) AS u(run, dropit) WHERE u.dropit AND l.run = "
            "u.run AND l.run = ANY($1::bigint[])), "
            "k AS (INSERT INTO \"%s\".steps (k, v) SELECT * FROM "
            "unnest($4::bytea[], $5::bytea[])), "
            "t AS (INSERT INTO \"%s\".state (run, v) SELECT * FROM "
            "unnest($6::bigint[], $7::bytea[]) ON CONFLICT (run) DO UPDATE "
            "SET v = excluded.v), "
            /* timers keep an earlier due time (store.h, TIMERS); a
             * timer's key is its run's (pg_flow.c, TIMER KEYS): none for
             * a run whose execution ends without parking */
            "m AS (INSERT INTO \"%s\".timers AS x (run, due, id, rec, fkey) "
            "SELECT u.*, CASE WHEN u.run = ANY($15::bigint[]) OR NOT EXISTS "
            "(SELECT FROM unnest($1::bigint[], $3::boolean[]) AS e(run, "
            "dropit) WHERE e.dropit AND e.run = u.run) THEN " TIMER_KEY(
                "%s",
                "u.run") " END FROM unnest($8::bigint[], $9::bigint[], "
                         "$10::text[], $11::bytea[]) AS u(run, due, id, rec) " TIMER_UPSERT(
                             "x") "), "
                                  /* inbox records consumed: each must still be there */
                                  "d AS (DELETE FROM \"%s\".inbox x USING unnest($12::bigint[], "
                                  "$13::bigint[]) AS u(run, seq) WHERE x.run = u.run AND x.seq = "
                                  "u.seq AND x.run = ANY($12::bigint[]) RETURNING 1), "
                                  /* a run that parks keeps its key for its wake (pg_flow.c): from
             * its lease row as it was before dr dropped it */
                                  "p AS (INSERT INTO \"%s\".parked AS z (run, fkey, flimit, ksum) "
                                  "SELECT l.run, l.fkey, l.flimit, l.ksum FROM \"%s\".leases l "
                                  "WHERE l.run = ANY($15::bigint[]) AND l.fkey IS NOT NULL ON "
                                  "CONFLICT (run) DO UPDATE SET fkey = excluded.fkey, flimit = "
                                  "excluded.flimit, ksum = excluded.ksum), "
                                  /* a run whose execution ends without parking (it ended, failed,
             * was cancelled, suspends) has no key to keep: its row goes */
                                  "pe AS (DELETE FROM \"%s\".parked z USING unnest($1::bigint[], "
                                  "$3::boolean[]) AS u(run, dropit) WHERE u.dropit AND z.run = "
                                  "u.run AND z.run = ANY($1::bigint[]) AND NOT z.run = "
                                  "ANY($15::bigint[])), "
                                  /* nor a timer, unless this commit sets one */
                                  "te AS (DELETE FROM \"%s\".timers z USING unnest($1::bigint[], "
                                  "$3::boolean[]) AS u(run, dropit) WHERE u.dropit AND z.run = "
                                  "u.run AND z.run = ANY($1::bigint[]) AND NOT z.run = "
                                  "ANY($15::bigint[]) AND NOT z.run = ANY($8::bigint[])) "
                                  "SELECT CASE WHEN (SELECT count(*) FROM f) < "
                                  "cardinality($1::bigint[]) THEN \"%s\".pl_fence_lost("
                                  "$1::bigint[], $2::bigint[]) END, CASE WHEN (SELECT count(*) "
                                  "FROM d) < cardinality($12::bigint[]) THEN \"%s\".pl_consumed("
                                  "cardinality($12::bigint[]), (SELECT count(*) FROM d)) END, "
                                  "(SELECT string_agg(DISTINCT i.run::text, ',') FROM \"%s\".inbox "
                                  "i WHERE i.cancel AND i.run = ANY($14::bigint[]))",
            n, n, n, n, n, n, n, n, n, n, n, n, n, n, n);
    else if (which == Q_INBOX_ADD) /* an import's record (below); a
                                    * cancellation marks the lease (LEASE
                                    * MARKS, pg_lease.c) */
        *out = pl__asprintf("WITH i AS (INSERT INTO \"%s\".inbox (run, seq, "
                            "rec, cancel) VALUES ($1::bigint, $2::bigint, "
                            "$3::bytea, $4::boolean)) UPDATE \"%s\".leases "
                            "SET cancel = true WHERE run = $1::bigint AND "
                            "$4::boolean AND NOT cancel",
                            n, n);
    else if (which == Q_STEPS)
        *out = pl__asprintf("INSERT INTO \"%s\".steps (k, v) SELECT * FROM "
                            "unnest($1::bytea[], $2::bytea[])",
                            n);
    else
        *out = pl__strdup("SELECT set_config('plan_cache_mode', "
                          "'force_generic_plan', true)");
    return *out ? PL_OK : PL_ENOMEM;
}

/* ---- a commit's writes, a statement each ---------------------------------- */

int pl__pg_ones_plan(pl__pg_ones *o, PGconn *c, pl__batch *const *batches,
                     size_t n)
{
    *o = (pl__pg_ones){0};
    for (size_t b = 0; b < n; b++) {
        pl__batch *bt = batches[b];
        if (bt->create_id || !pl__pg_one_shape(bt, bt->timer_us != 0))
            continue; /* creates its run, or writes none of the parts */
        if (o->one) {
            o->group = true; /* Q_WRITE, prepared on every connection */
            return PL_OK;
        }
        o->one = bt;
    }
    unsigned m = o->one ? pl__pg_one_shape(o->one, o->one->timer_us != 0) : 0;
    if (m && !one_prepared(c, m))
        o->prep[o->nprep++] = m;
    return PL_OK;
}

int pl__pg_ones_shape(pl__pg_ones *o, PGconn *c, unsigned shape)
{
    *o = (pl__pg_ones){0};
    if (!one_prepared(c, shape))
        o->prep[o->nprep++] = shape;
    return PL_OK;
}

int pl__pg_ones_prepare(pl__pg_store *s, PGconn *c, const pl__pg_ones *o)
{
    int st = PL_OK;
    for (size_t i = 0; !st && i < o->nprep; i++)
        st = one_prepare(s, c, o->prep[i]);
    return st;
}

int pl__pg_ones_prepared_result(pl__pg_store *s, PGconn *c,
                                const pl__pg_ones *o, size_t i,
                                const PGresult *r)
{
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return pl__pg_err(s, c, r, "preparing a commit");
    unsigned shape = o->prep[i];
    prepared *p = PQinstanceData(c, conn_event); /* one_prepare()'s */
    p->bits[shape / 64] |= (uint64_t)1 << (shape % 64);
    return PL_OK;
}

int pl__pg_one_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                    unsigned shape, const pl__buf *keys, const pl__buf *vals)
{
    uint8_t run[8], gen[8], due[8], seq[8];
    pl__buf rec = {0};
    const char *v[P_N] = {0};
    int len[P_N] = {0};
    int fmt[P_N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    pl__put_be64(run, bt->run);
    v[P_RUN] = (const char *)run;
    len[P_RUN] = 8;
    if (shape & ONE_FENCE) {
        pl__put_be64(gen, bt->gen);
        v[P_GEN] = (const char *)gen;
        len[P_GEN] = 8;
    }
    if (shape & ONE_STEPS) {
        v[P_KEYS] = (const char *)keys->data;
        len[P_KEYS] = (int)keys->len;
        v[P_VALS] = (const char *)vals->data;
        len[P_VALS] = (int)vals->len;
    }
    if (shape & ONE_PAIR) { /* at most PAIR_BYTES: each fits an int */
        for (size_t i = 0; i < 2; i++) {
            const pl__kv *e = &bt->steps.e[i];
            const uint8_t *k = pl__kvs_key(&bt->steps, i),
                          *x = pl__kvs_val(&bt->steps, i);
            /* never NULL, which would be SQL's NULL: an empty value */
            v[P_K1 + 2 * i] = k ? (const char *)k : "";
            len[P_K1 + 2 * i] = (int)e->klen;
            v[P_V1 + 2 * i] = x ? (const char *)x : "";
            len[P_V1 + 2 * i] = (int)e->vlen;
        }
    }
    if (shape & ONE_STATE) {
        if (bt->state.len > INT32_MAX)
            return pl__err(PL_EINVAL,
                           "store '%s': a state too large for the server",
                           s->path);
        v[P_STATE] = (const char *)bt->state.data;
        len[P_STATE] = (int)bt->state.len;
    }
    int st = PL_OK;
    char lease[8];
    if (shape & ONE_RIDE) { /* the delivery's lease: bt->lease_* */
        pl__put_be64((uint8_t *)lease, (uint64_t)bt->lease_us);
        v[P_OWNER] = bt->lease_owner;
        len[P_OWNER] = (int)strlen(bt->lease_owner);
        v[P_LEASE] = lease;
        len[P_LEASE] = 8;
    }
    if (shape & (ONE_TIMER | ONE_RIDE)) {
        st = pl__timer_encode(&rec, bt->timer_id, bt->timer_us);
        pl__put_be64(due, (uint64_t)bt->timer_us);
        v[P_DUE] = (const char *)due;
        len[P_DUE] = 8;
        v[P_TID] = bt->timer_id;
        len[P_TID] = (int)strlen(bt->timer_id);
        v[P_TREC] = (const char *)rec.data;
        len[P_TREC] = (int)rec.len;
    }
    if (shape & (ONE_INBOX | ONE_RIDE)) {
        pl__put_be64(seq, bt->inbox_del);
        v[P_SEQ] = (const char *)seq;
        len[P_SEQ] = 8;
    }
    char name[24];
    one_name(name, sizeof name, shape);
    if (!st &&
        !PQsendQueryPrepared(c, name, one_nparams(shape), v, len, fmt, 1))
        st = pl__pg_err(s, c, NULL, "sending a commit");
    pl__buf_free(&rec);
    return st;
}

/* The leases of the runs of @p batches whose states they write without a
 * fence (claims, which a one-run statement marks itself), marked when a
 * cancellation waits (LEASE MARKS, pg_lease.c): L_MARK, sent after a
 * group's Q_WRITE in the transaction that locked those states; *nsent
 * counts it. */
int pl__pg_marks_send(pl__pg_store *s, PGconn *c, pl__batch *const *batches,
                      size_t n, size_t *nsent)
{
    uint64_t *runs = n ? calloc(n, sizeof *runs) : NULL;
    size_t k = 0;
    if (n && !runs)
        return pl__err(PL_ENOMEM, "out of memory");
    for (size_t b = 0; b < n; b++)
        if (!batches[b]->gen && batches[b]->state.len && !batches[b]->create_id)
            runs[k++] = batches[b]->run;
    pl__buf a = {0};
    int st = k ? pl__pg_int_array(&a, runs, k) : PL_OK;
    const char *vals[1] = {(const char *)a.data};
    if (!st && k &&
        !(st = pl__pg_send(s, c, L_MARK, 1, vals, NULL, NULL,
                           "marking leases")))
        ++*nsent;
    pl__buf_free(&a);
    free(runs);
    return st;
}

/* An import's inbox records (pl__batch.inbox_add), each its statement,
 * Q_INBOX_ADD (pl__pg_write_sql() above), in the commit's pipeline. */
int pl__pg_inbox_add_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                          size_t *nsent)
{
    const pl__kvs *a = bt->inbox_add;
    char run[24], seq[24];
    snprintf(run, sizeof run, "%llu", (unsigned long long)bt->run);
    int st = PL_OK;
    for (size_t i = 0; !st && a && i < a->n; i++) {
        const char *cancel = "f";
        if (NEVER(a->e[i].klen != 8) || a->e[i].vlen > INT32_MAX)
            return pl__err(PL_EINVAL, "an inbox record to write is malformed");
        snprintf(seq, sizeof seq, "%llu",
                 (unsigned long long)pl__get_be64(pl__kvs_key(a, i)));
        /* its id is the run's: the record is bound to it */
        pl__inbox_rec ib = {0};
        st = NEVER(!bt->timer_id)
                 ? pl__err(PL_EINVAL, "inbox records to write name no run")
                 : pl__inbox_decode(&ib, bt->timer_id, pl__kvs_val(a, i),
                                    a->e[i].vlen);
        cancel = ib.reason ? "t" : "f";
        pl__inbox_clear(&ib);
        const char *vals[4] = {run, seq, (const char *)pl__kvs_val(a, i),
                               cancel};
        int lens[4] = {0, 0, (int)a->e[i].vlen, 0}, fmts[4] = {0, 0, 1, 0};
        if (!st)
            st = pl__pg_send(s, c, Q_INBOX_ADD, 4, vals, lens, fmts,
                             "writing an inbox record");
        if (!st)
            (*nsent)++;
    }
    return st;
}
