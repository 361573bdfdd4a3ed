/*
 * pg_time.c -- timers and inboxes on the store on PostgreSQL.
 *
 * TIMERS and INBOXES (store.h) on PostgreSQL: two more tables and a
 * function in the store's schema, made on every writable open (an older
 * store gains them).
 *
 *   | timers | run bigint PK, due bigint (Unix us, indexed with run),   |
 *   |        | id text, rec bytea (the timer record, runrec.c), fkey    |
 *   |        | text (its run's key: pg_flow.c, TIMER KEYS)              |
 *   | inbox  | run bigint, seq bigint, rec bytea (the inbox record),    |
 *   |        | cancel boolean (a cancellation); PK (run, seq); the      |
 *   |        | cancellations' runs indexed alone (inbox_cancel)         |
 *   | pl_consumed(want, got) | raises SQLSTATE PLINB when got < want    |
 *
 * A commit's timers and inbox consumptions go with its other writes, in
 * its one statement (pg_commit.c): a timer keeps an earlier due time; a
 * consumption is a DELETE whose rows pl_consumed() counts, failing the
 * whole commit when a record is gone (PL_EBUSY: another execution
 * consumed it).  The same statement answers whether the inbox of each run
 * it writes holds a cancellation (pl__batch.inbox_cancel), so a run looks
 * for one at its call boundaries without a round trip of its own; it reads
 * inbox_cancel, which holds the cancellations alone, so the signals
 * waiting in an inbox cost a commit nothing (by the primary key, the plan
 * the server keeps read every record of the run, or the whole inbox).
 *
 * A take is one statement: the earliest due timer whose run holds no live
 * lease, locked with FOR UPDATE SKIP LOCKED, deleted, and the run's lease
 * taken for the worker, so two workers never take the same timer and
 * neither waits for the other (a worker's wake takes it so in the
 * statement that also reads the run, in batches: pg_wake.c's L_TAKE_DUES).  A delivery locks the run's state row (as a
 * claim does) and then writes, so it never slips between a run's look at
 * its inbox and its parking: the parking commit, which writes the state,
 * waits for it and keeps the earlier due time it set.  It takes two round
 * trips: BEGIN with the state's lock, then the record, the timer and
 * COMMIT in one statement and one pipeline.  A delivery that also takes
 * the run (pl__inbox_take) sends the lease's statement in place of COMMIT
 * (T_ACQUIRE: a run parked with a key only while the key has room, its
 * lease given the key back, as a wake's),
 * then the claimed state, the run's next commit when it goes with it
 * (Q_WRITE's statement), and COMMIT: three round trips, one commit.  When
 * the record's seq is not the one that commit saw, all is rolled back
 * (PL_EBUSY).  A ride (the run's next commit going with the delivery,
 * and the state it expects known) first tries all of it in one round
 * trip (ride_fast() below), checks on the server raising RIDE_STATE.
 *
 * Due times are written on the writing host's clock (a wake time from the
 * recorded clock, a delivery's "now") and compared with the server's: a
 * host whose clock runs ahead of the server's has its wakes that much late.
 *
 * Every statement here is prepared on each connection of a writable store
 * (pg_int.h); they answer in text.
 */
#include "pg_int.h"
#include "runrec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONSUMED_STATE "PLINB"
#define RIDE_STATE "PLRDE" /* a ride refused: the delivery goes alone */
#define LOCK_WAIT "50ms"   /* a cancellation's wait for its run's lease */
#define LOCK_STATE "55P03" /* lock_not_available: LOCK_WAIT ran out */

/* A delivery's record and its run's timer made due now (keeping an
 * earlier one): $1 run, $2 record, $3 due, $4 id, $5 timer record, $6
 * whether a cancellation; five schemas. */
#define INBOX_PUT                                                              \
    "WITH i AS (INSERT INTO \"%s\".inbox (run, seq, rec, cancel) SELECT "      \
    "$1::bigint, coalesce(max(seq), 0) + 1, $2::bytea, $6::boolean FROM "      \
    "\"%s\".inbox WHERE run = $1::bigint RETURNING seq), t AS (INSERT INTO "   \
    "\"%s\".timers AS t (run, due, id, rec, fkey) VALUES ($1::bigint, "        \
    "$3::bigint, $4, $5::bytea, " TIMER_KEY(                                   \
        "%s", "$1::bigint") ") " TIMER_UPSERT("t") ") "

/* A take of the lease in g: $1 run, $2 owner, $3 id, $4 lease_us, $5 the
 * generation it may take over.  A run parked with a key only while @p room
 * (an SQL expression of its parked row z), the lease getting its key back
 * and the parked row going, and its mark (LEASE MARKS, pg_lease.c) from
 * the inbox; four schemas, and @p room's. */
#define ACQUIRE_IF(room)                                                       \
    "WITH p AS MATERIALIZED (SELECT z.fkey, z.flimit, " room " AS room "       \
    "FROM \"%s\".parked z WHERE z.run = "                                      \
    "$1::bigint), g AS (INSERT INTO \"%s\".leases AS l (run, gen, owner, "     \
    "id, expires, fkey, flimit, cancel) SELECT $1::bigint, 1, $2::text, "      \
    "$3::text, " NOW_US " + $4::bigint, (SELECT fkey FROM p), coalesce(("      \
    "SELECT flimit FROM p), 0), EXISTS (SELECT FROM \"%s\".inbox i WHERE "     \
    "i.cancel AND i.run = $1::bigint) WHERE coalesce((SELECT room FROM p), "   \
    "true) ON CONFLICT (run) DO UPDATE SET gen = l.gen + 1, owner = "          \
    "excluded.owner, id = excluded.id, expires = excluded.expires, fkey = "    \
    "coalesce(excluded.fkey, l.fkey), flimit = CASE WHEN excluded.fkey IS "    \
    "NULL THEN l.flimit ELSE excluded.flimit END, cancel = l.cancel OR "       \
    "excluded.cancel WHERE l.expires <= " NOW_US " OR l.owner = "              \
    "excluded.owner OR l.gen = $5::bigint RETURNING l.run, l.gen, (l.xmax "    \
    "<> 0)::int AS had), k AS (DELETE FROM \"%s\".parked z USING g WHERE "     \
    "z.run = g.run) "
/* A delivery's: only while the key has room (pl_key_room(), as its wake);
 * five schemas. */
#define ACQUIRE                                                                \
    ACQUIRE_IF("CASE WHEN " PARKED_OK " THEN \"%s\".pl_key_room(z.fkey, "      \
               "z.flimit) ELSE false END")

int pl__pg_time_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    switch (which) {
    case T_SET:
        *out = pl__asprintf(
            "INSERT INTO \"%s\".timers AS t (run, due, id, rec, fkey) VALUES "
            "($1::bigint, $2::bigint, $3, $4::bytea, " TIMER_KEY(
                "%s", "$1::bigint") ") " TIMER_UPSERT("t"),
            n, n, n);
        break;
    case T_NEXT:
        /* the earliest timer, and the earliest not due at $1 */
        *out = pl__asprintf("SELECT (SELECT min(due) FROM \"%s\".timers), "
                            "(SELECT min(due) FROM \"%s\".timers WHERE due > "
                            "$1::bigint)",
                            n, n);
        break;
    case T_GET:
        *out = pl__asprintf("SELECT due, rec FROM \"%s\".timers WHERE run = "
                            "$1::bigint",
                            n);
        break;
    case T_INBOX_PUT:
        /* the record, and the timer due now (keeping an earlier one) */
        *out = pl__asprintf(INBOX_PUT "SELECT seq FROM i", n, n, n, n, n);
        break;
    case T_CANCEL_PUT:
        /* the same, marking the lease (LEASE MARKS, pg_lease.c; apart: it
         * cost a signal 24k instructions).  Holding the state, it waits
         * LOCK_WAIT at most for the lease, which a commit holds and may
         * want the state after: it gives up first, pl__pg_inbox_put()
         * delivers again (a deadlock would fail the run's commit) */
        *out = pl__asprintf(INBOX_PUT
                            ", w AS MATERIALIZED (SELECT set_config("
                            "'lock_timeout', '" LOCK_WAIT "', true)), c AS "
                            "(UPDATE \"%s\".leases SET cancel = true WHERE "
                            "run = $1::bigint AND NOT cancel AND EXISTS "
                            "(SELECT FROM w)) SELECT seq FROM i",
                            n, n, n, n, n, n);
        break;
    case T_RIDE_PUT:
        /* the same, in a ride: the record must get the seq the run saw */
        *out = pl__asprintf(INBOX_PUT
                            "SELECT seq, CASE WHEN $7::bigint = 0 OR seq = "
                            "$7::bigint THEN true ELSE \"%s\".pl_ride(false, "
                            "'another delivery came first') END FROM i",
                            n, n, n, n, n, n);
        break;
    case T_DROP:
        *out = pl__asprintf("DELETE FROM \"%s\".timers WHERE run = $1::bigint",
                            n);
        break;
    case T_ACQUIRE:
        *out = pl__asprintf(ACQUIRE "SELECT gen, had FROM g", n, n, n, n, n);
        break;
    case L_ACQUIRE:
        /* pl_run_continue()'s: an operator's override, which counts
         * against the key whether it has room or not; a damaged parked
         * key takes no lease, and its row (-1) says so */
        *out = pl__asprintf(ACQUIRE_IF(PARKED_OK) "SELECT gen, had FROM g "
                                                  "UNION ALL SELECT -1, 0 FROM "
                                                  "p WHERE NOT p.room",
                            n, n, n, n);
        break;
    case T_RIDE_TAKE:
        /* the same, in a ride: the lease must be taken */
        *out = pl__asprintf(ACQUIRE "SELECT (SELECT gen FROM g), CASE WHEN "
                                    "EXISTS (SELECT FROM g) THEN true ELSE "
                                    "\"%s\".pl_ride(false, 'another holds "
                                    "its lease, or its concurrency key is "
                                    "full') END",
                            n, n, n, n, n, n);
        break;
    case T_RIDE_LOCK:
        /* a ride's first: the run's state locked, as the ride read it */
        *out = pl__asprintf(
            "WITH x AS (SELECT v FROM \"%s\".state WHERE run = $1::bigint "
            "FOR UPDATE) SELECT CASE WHEN (SELECT v = $2::bytea FROM x) THEN "
            "true ELSE \"%s\".pl_ride(false, 'its state changed since it "
            "was read') END",
            n, n);
        break;
    default: /* T_INBOX_READ */
        *out = pl__asprintf("SELECT seq, rec FROM \"%s\".inbox WHERE run = "
                            "$1::bigint ORDER BY seq",
                            n);
        break;
    }
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

char *pl__pg_time_ddl(const pl__pg_store *s)
{
    const char *n = s->schema;
    return pl__asprintf(
        "CREATE TABLE IF NOT EXISTS \"%s\".timers (run bigint PRIMARY KEY, "
        "due bigint NOT NULL, id text NOT NULL, rec bytea NOT NULL);"
        "CREATE TABLE IF NOT EXISTS \"%s\".inbox (run bigint NOT NULL, "
        "seq bigint NOT NULL, rec bytea NOT NULL, cancel boolean NOT NULL "
        "DEFAULT false, PRIMARY KEY (run, seq));"
        /* the wakes' order, ties by run (pl_wake(), pg_flow.c): a store
         * made with an index on due alone gains it, and loses that one;
         * the cancellations alone: every commit looks for its run's */
        "DO $d$ BEGIN IF to_regclass('\"%s\".timers_due_run') IS NULL THEN "
        "CREATE INDEX timers_due_run ON \"%s\".timers (due, run); END IF; "
        "IF to_regclass('\"%s\".inbox_cancel') IS NULL THEN CREATE INDEX "
        "inbox_cancel ON \"%s\".inbox (run) WHERE cancel; END IF; END $d$;"
        "DROP INDEX IF EXISTS \"%s\".timers_due;"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_consumed(want integer, got "
        "bigint) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN "
        "IF got < want THEN RAISE EXCEPTION 'an inbox record this commit "
        "consumes was consumed by another execution; nothing is written' "
        "USING ERRCODE = '" CONSUMED_STATE "'; END IF; END $f$;"
        /* a ride's check (pl__pg_inbox_put()): ok, or SQLSTATE PLRDE */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_ride(ok boolean, why text) "
        "RETURNS boolean LANGUAGE plpgsql AS $f$ BEGIN IF ok IS NOT TRUE "
        "THEN RAISE EXCEPTION 'the delivery cannot take the run: %%', why "
        "USING ERRCODE = '" RIDE_STATE "'; END IF; RETURN true; END $f$;",
        n, n, n, n, n, n, n, n, n);
}

int pl__pg_time_failed(const PGresult *r)
{
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!code || strcmp(code, CONSUMED_STATE) != 0)
        return PL_OK;
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    return pl__err(PL_EBUSY, "%s",
                   m ? m : "an inbox record was consumed by another execution");
}

/* Run statement @p which on @p c, with text parameters but @p fmts. */
static int time_exec(pl__pg_store *s, PGconn *c, int which, int n,
                     const char *const *vals, const int *lens, const int *fmts,
                     PGresult **out, const char *what)
{
    PGresult *r = pl__pg_exec_q(s, c, which, n, vals, lens, fmts);
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK) {
        int st = pl__pg_err(s, c, r, what);
        PQclear(r);
        *out = NULL;
        return st;
    }
    *out = r;
    return PL_OK;
}

/* The parameters of a timer's row: run, due, id, record. */
typedef struct timer_row {
    char run[24], due[24];
    pl__buf rec;
} timer_row;

static int timer_row_make(timer_row *t, uint64_t run, const char *run_id,
                          int64_t due_us)
{
    snprintf(t->run, sizeof t->run, "%llu", (unsigned long long)run);
    snprintf(t->due, sizeof t->due, "%lld", (long long)due_us);
    return pl__timer_encode(&t->rec, run_id, due_us);
}

int pl__pg_timer_set(pl__pg_store *s, uint64_t run, const char *run_id,
                     int64_t due_us)
{
    if (s->read_only)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    timer_row t = {0};
    st = timer_row_make(&t, run, run_id, due_us);
    if (!st) {
        const char *vals[4] = {t.run, t.due, run_id, (const char *)t.rec.data};
        int lens[4] = {0, 0, 0, (int)t.rec.len}, fmts[4] = {0, 0, 0, 1};
        PGresult *r;
        st = time_exec(s, c, T_SET, 4, vals, lens, fmts, &r, "setting a timer");
        PQclear(r);
    }
    pl__buf_free(&t.rec);
    pl__pg_conn_put(s, c);
    return st;
}

/*
 * When to look at the timers again, into *out (0: none), on @p c: when the
 * earliest is due; or, one being due already though a take just found
 * none (another's take holds it until it commits; or its run's state is
 * being written, its key is full), when the next is due, and @p again_us
 * from now at the latest.  A worker that lost a timer to another's take
 * looks again at the next one, not @p again_us later: with timers due
 * every millisecond (100,000 runs sleeping a minute), a look put off by
 * 10 ms left ten runs due meanwhile, late, to the workers still looking.
 */
static int next_due(pl__pg_store *s, PGconn *c, int64_t again_us, int64_t *out)
{
    *out = 0;
    int64_t now = pl__now_us();
    char a[24];
    snprintf(a, sizeof a, "%lld", (long long)now);
    const char *vals[1] = {a};
    PGresult *r;
    int st = time_exec(s, c, T_NEXT, 1, vals, NULL, NULL, &r,
                       "reading the timers");
    int64_t due = 0, later = 0;
    /* due times are written on the writers' clocks (see above) */
    if (!st && PQntuples(r) == 1 && PQnfields(r) == 2 &&
        !PQgetisnull(r, 0, 0) && pl__pg_parse_i64(PQgetvalue(r, 0, 0), &due)) {
        if (PQgetisnull(r, 0, 1) ||
            !pl__pg_parse_i64(PQgetvalue(r, 0, 1), &later))
            later = 0;
        *out = due;
    }
    PQclear(r);
    if (*out && *out <= now) {
        *out = now + again_us;
        if (later && later < *out)
            *out = later;
    }
    return st;
}

int pl__pg_timer_next(pl__pg_store *s, int64_t again_us, int64_t *next_due_us)
{
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    st = next_due(s, c, again_us, next_due_us);
    pl__pg_conn_put(s, c);
    return st;
}

/* Run statement @p which for run @p run on a connection taken for it
 * (given back by the caller, also on a failure but the first). */
static int exec_run(pl__pg_store *s, PGconn **c, int which, uint64_t run,
                    PGresult **r, const char *what)
{
    *r = NULL;
    int st = pl__pg_conn_get(s, c);
    if (st)
        return st;
    char a[24];
    snprintf(a, sizeof a, "%llu", (unsigned long long)run);
    const char *vals[1] = {a};
    return time_exec(s, *c, which, 1, vals, NULL, NULL, r, what);
}

int pl__pg_timer_get(pl__pg_store *s, uint64_t run, int64_t *due_us)
{
    PGconn *c = NULL;
    PGresult *r;
    int st = exec_run(s, &c, T_GET, run, &r, "reading a timer");
    if (!c)
        return st;
    if (!st && PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "run #%llu has no timer",
                     (unsigned long long)run);
    else if (!st && !pl__pg_parse_i64(PQgetvalue(r, 0, 0), due_us))
        st = pl__err(PL_ECORRUPT, "store '%s': a timer is malformed", s->path);
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}

typedef struct put_ctx {
    pl__pg_store *s;
    PGconn *c;
    uint64_t *seq;
    pl__inbox_take *take;
    bool *locked; /* LOCK_WAIT ran out: deliver again */
} put_ctx;

/* Whether @p r says LOCK_WAIT ran out (*x->locked). */
static void put_locked(put_ctx *x, const PGresult *r)
{
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (code && strcmp(code, LOCK_STATE) == 0)
        *x->locked = true;
}

/* The results of T_INBOX_PUT and of COMMIT. */
static int put_result(size_t i, PGresult *r, void *user)
{
    put_ctx *x = user;
    ExecStatusType es = PQresultStatus(r);
    put_locked(x, r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK)
        return pl__pg_err(x->s, x->c, r, "delivering to an inbox");
    if (i)
        return PL_OK;
    int64_t v;
    if (PQntuples(r) != 1 || !pl__pg_parse_i64(PQgetvalue(r, 0, 0), &v))
        return pl__err(PL_ECORRUPT, "store '%s': an inbox seq is malformed",
                       x->s->path);
    *x->seq = (uint64_t)v;
    return PL_OK;
}

/* Whether inbox record @p rec is a cancellation, in *cancel ("t", "f"):
 * marked as one, for the commits that look. */
static int cancel_mark(const uint8_t *rec, size_t len, const char **cancel)
{
    bool yes = false;
    int st = pl__inbox_is_cancel(rec, len, &yes);
    *cancel = yes ? "t" : "f";
    return st;
}

/* The results of T_INBOX_PUT and L_ACQUIRE (a row: the lease taken). */
static int take_result(size_t i, PGresult *r, void *user)
{
    put_ctx *x = user;
    if (!i)
        return put_result(0, r, user);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        put_locked(x, r);
        return pl__pg_err(x->s, x->c, r, "taking a lease");
    }
    int64_t g;
    if (PQntuples(r) == 0)
        return PL_OK; /* another's: not taken */
    if (PQnfields(r) < 1 || !pl__pg_parse_i64(PQgetvalue(r, 0, 0), &g))
        return pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                       x->s->path);
    x->take->gen = (uint64_t)g;
    x->take->taken = true;
    return PL_OK;
}

/*
 * In the transaction that locked the run's state: send the record and the
 * timer due now, then COMMIT, in one round trip.  With @p take (its claim
 * of the state in @p claimed), the lease after the record and the timer
 * (in the order a timer's take locks them) instead of COMMIT; then the
 * claimed state and COMMIT in a second round trip (or COMMIT alone, when
 * the lease is another's).
 */
static int put_send(pl__pg_store *s, PGconn *c, uint64_t run,
                    const char *run_id, const uint8_t *rec, size_t len,
                    pl__inbox_take *take, const pl__buf *claimed, uint64_t *seq,
                    bool *locked)
{
    /* due now, on this host's clock: a wake is asked for */
    timer_row t = {0};
    const char *cancel = "f";
    int st = timer_row_make(&t, run, run_id, pl__now_us());
    if (!st && PQenterPipelineMode(c) != 1)
        st = pl__pg_err(s, c, NULL, "entering pipeline mode");
    if (!st)
        st = cancel_mark(rec, len, &cancel);
    if (!st) {
        const char *vals[6] = {t.run,  (const char *)rec,        t.due,
                               run_id, (const char *)t.rec.data, cancel};
        int lens[6] = {0, (int)len, 0, 0, (int)t.rec.len, 0};
        int fmts[6] = {0, 1, 0, 0, 1, 0};
        st = pl__pg_send(s, c, *cancel == 't' ? T_CANCEL_PUT : T_INBOX_PUT, 6,
                         vals, lens, fmts, "delivering to an inbox");
    }
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)(take ? take->lease_us : 0));
    const char *lv[5] = {t.run, take ? take->owner : "", run_id, d, "0"};
    if (!st && take)
        st = pl__pg_send(s, c, T_ACQUIRE, 5, lv, NULL, NULL, "taking a lease");
    else if (!st)
        st = pl__pg_send(s, c, Q_COMMIT, 0, NULL, NULL, NULL, "committing");
    put_ctx x = {s, c, seq, take, locked};
    if (!st)
        st = pl__pg_pipeline_finish(s, c, 2, take ? take_result : put_result,
                                    &x, "delivering to an inbox");
    pl__buf_free(&t.rec);
    if (st || !take)
        return st;
    if (!take->taken)
        return pl__pg_command(s, c, "COMMIT", "committing");
    if (take->then_seq && take->then_seq != *seq) /* rolled back */
        return pl__err(PL_EBUSY, "run #%llu: another delivery came first",
                       (unsigned long long)run);
    pl__batch b = {0};
    b.run = run;
    b.state = *claimed; /* borrowed: not freed here */
    if (!take->then)
        return pl__pg_put_batches(s, c, (pl__batch *[]){&b}, 1, 0);
    /* the run's next commit: its state, when it has one, is the later;
     * when it ends the execution, the timer made due goes */
    take->then->gen = take->gen;
    bool ends = take->then->release && !take->then->timer_us;
    return pl__pg_put_batches(s, c, (pl__batch *[]){&b, take->then}, 2,
                              ends ? run : 0);
}

/* The claim of @p take on @p state, into @p claimed: false when refused. */
static bool claim(pl__inbox_take *take, const pl__buf *state, pl__buf *claimed)
{
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    pl__kvs extra = {0};
    int st = pl__buf_append(claimed, state->data, state->len);
    if (!st)
        st = take->claim(claimed, &extra, take->user);
    bool none = extra.n == 0;
    pl__kvs_free(&extra);
    pl__errmsg_restore(saved);
    return !st && !NEVER(!none);
}

/* ---- a ride in one round trip ----------------------------------------------- */

typedef struct ride_ctx {
    pl__pg_store *s;
    PGconn *c;
    pl__inbox_take *take;
    unsigned shape;
    pl__pg_ones ones; /* the shape's statement prepared first, if need be */
    bool folded;      /* the delivery in the write's statement (ONE_RIDE) */
    bool refused;     /* a check said no (RIDE_STATE): nothing was written */
    uint64_t seq;     /* the record's, from T_RIDE_PUT */
} ride_ctx;

/* The results of [the shape's preparation,] T_RIDE_LOCK, then T_RIDE_PUT,
 * T_RIDE_TAKE and the run's next commit, or (folded) the commit with the
 * delivery in it (its statement first, Q_STEPS after), and T_DROP. */
static int ride_result(size_t i, PGresult *r, void *user)
{
    ride_ctx *x = user;
    if (i < x->ones.nprep)
        return pl__pg_ones_prepared_result(x->s, x->c, &x->ones, i, r);
    i -= x->ones.nprep;
    size_t commit = x->folded ? 1 : 3; /* the commit's statement */
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK) {
        const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (i <= commit && code && strcmp(code, RIDE_STATE) == 0) {
            x->refused = true;
            return pl__err(PL_EBUSY, "%s",
                           PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
        }
        /* a folded ride inserts the parked run's lease (pg_one.c): a row
         * there is another's (a wake's, another delivery's), the ride
         * refused as by its checks */
        const char *key = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);
        if (x->folded && i == commit && pl__pg_unique_violation(r) && key &&
            strcmp(key, "leases_pkey") == 0) {
            x->refused = true;
            return pl__err(PL_EBUSY, "another holds the run's lease");
        }
        if (i < commit)
            return pl__pg_err(x->s, x->c, r, "delivering to an inbox");
        if (pl__pg_unique_violation(r))
            return pl__pg_busy();
        int st = pl__pg_time_failed(r);
        return st ? st : pl__pg_err(x->s, x->c, r, "committing");
    }
    int64_t v;
    if (!x->folded && (i == 1 || i == 2)) { /* the seq; the lease's gen */
        if (PQntuples(r) != 1 || !pl__pg_parse_i64(PQgetvalue(r, 0, 0), &v))
            return pl__err(PL_ECORRUPT,
                           "store '%s': a ride's answer is "
                           "malformed",
                           x->s->path);
        if (i == 1)
            x->seq = (uint64_t)v;
        else
            x->take->gen = (uint64_t)v;
    } else if (i == commit) { /* whether a cancellation waits [, the gen]:
                                 * pg_one.c's answer, 1 column, a ride's 6 */
        if (PQntuples(r) != 1 || PQnfields(r) != (x->folded ? 6 : 1) ||
            (x->folded && PQgetlength(r, 0, 3) != 8))
            return pl__err(PL_ECORRUPT,
                           "store '%s': a commit's answer is "
                           "malformed",
                           x->s->path);
        if (x->folded)
            x->take->gen = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 3));
        x->take->then->inbox_known = true;
        x->take->then->inbox_cancel = !PQgetisnull(r, 0, x->folded ? 2 : 0);
    }
    return PL_OK;
}

/* Whether @p take's ride can go in one round trip: a commit of the run's
 * own writes (no creation, schedule or import), with its state. */
static bool ride_fits(const pl__inbox_take *take)
{
    const pl__batch *b = take->then;
    return b && take->expect && b->state.len && !b->create_id && !b->succ_id &&
           !b->sched_name && !b->inbox_add;
}

/* Whether @p take's delivery can go in its commit's own statement
 * (ONE_RIDE): the commit consumes the record at the seq the run saw it at,
 * so the record need not be written (nor then removed), and the run goes
 * on holding the lease (no end, no park, no timer of its own: the lease
 * taken is not dropped in the statement that takes it). */
static bool ride_folds(const pl__inbox_take *take)
{
    const pl__batch *b = take->then;
    return take->then_seq && b->inbox_del == take->then_seq && !b->release &&
           !b->park && !b->timer_us;
}

/*
 * The ride in one pipeline, one round trip and one implicit transaction
 * (the Sync commits it, or rolls all back): the state checked and claimed
 * here on the state the ride read (take->expect), then on the server the
 * state locked and compared with it (T_RIDE_LOCK, a statement of its own:
 * the next reads the inbox in a snapshot taken after the lock, so that it
 * sees a delivery committed meanwhile), then either
 *
 *   - folded (ride_folds()): the run's next commit as the one-run
 *     statement of its shape with ONE_RIDE (pg_one.c): the lease taken,
 *     the timer due now, and the checks that the record would get the seq
 *     the run saw and that the lease was taken; the record itself, which
 *     that commit consumes, is never written: its consumption, the `event`
 *     step, is;
 *   - or the record at the seq the run saw and the timer due now
 *     (T_RIDE_PUT), the lease (T_RIDE_TAKE: as T_ACQUIRE), the run's next
 *     commit (pg_one.c's statement, without a fence: this transaction
 *     holds the lease it took), and, when that commit ends the execution,
 *     the timer dropped.
 *
 * Each check that says no raises RIDE_STATE: *refused, nothing written,
 * and the caller goes the longer way, which writes the delivery alone or
 * refuses as before.
 */
static int ride_fast(pl__pg_store *s, PGconn *c, uint64_t run,
                     const char *run_id, pl__inbox_check_fn check, void *user,
                     const uint8_t *rec, size_t len, pl__inbox_take *take,
                     uint64_t *seq, bool *refused)
{
    *refused = true;
    if (!take->claimed) { /* checked and claimed here, on the state read */
        pl__buf claimed = {0};
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        int cst = check(take->expect->data, take->expect->len, user);
        pl__errmsg_restore(saved);
        bool ok = !cst && claim(take, take->expect, &claimed);
        pl__buf_free(&claimed); /* the next commit's state is the later */
        if (!ok)
            return PL_OK; /* the longer way says why */
    }
    pl__batch *then = take->then;
    then->gen = 1; /* for its shape: the lease dropped, the key kept */
    ride_ctx x = {s, c, take, 0, {0}, ride_folds(take), false, 0};
    x.shape = pl__pg_one_shape(then, then->timer_us != 0) &
              ~(unsigned)(ONE_FENCE | ONE_GEN);
    then->gen = 0;
    if (x.folded) /* a run kept has no key: the parked table is not read */
        x.shape = (x.shape & ~(unsigned)ONE_INBOX) | ONE_RIDE |
                  (pl__pg_cache_unkeyed(s, run) ? ONE_UNKEYED : 0u);
    bool ends = then->release && !then->timer_us;
    int64_t now = pl__now_us();
    timer_row t = {0};
    const char *cancel = "f";
    int st = timer_row_make(&t, run, run_id, now);
    if (!st)
        st = cancel_mark(rec, len, &cancel);
    *refused = false;
    if (!st && PQenterPipelineMode(c) != 1)
        st = pl__pg_err(s, c, NULL, "entering pipeline mode");
    if (!st && !(st = pl__pg_ones_shape(&x.ones, c, x.shape)))
        st = pl__pg_ones_prepare(s, c, &x.ones);
    const char *lv0[2] = {t.run, (const char *)take->expect->data};
    int ll0[2] = {0, (int)take->expect->len}, lf0[2] = {0, 1};
    if (!st)
        st = pl__pg_send(s, c, T_RIDE_LOCK, 2, lv0, ll0, lf0,
                         "delivering to an inbox");
    char then_seq[24];
    snprintf(then_seq, sizeof then_seq, "%llu",
             (unsigned long long)take->then_seq);
    const char *pv[7] = {t.run,   (const char *)rec,        t.due,
                         run_id,  (const char *)t.rec.data, cancel,
                         then_seq};
    int pl[7] = {0, (int)len, 0, 0, (int)t.rec.len, 0, 0};
    int pf[7] = {0, 1, 0, 0, 1, 0, 0};
    if (!st && !x.folded)
        st = pl__pg_send(s, c, T_RIDE_PUT, 7, pv, pl, pf,
                         "delivering to an inbox");
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)take->lease_us);
    const char *lv[5] = {t.run, take->owner, run_id, d, "0"};
    if (!st && !x.folded)
        st = pl__pg_send(s, c, T_RIDE_TAKE, 5, lv, NULL, NULL,
                         "taking a lease");
    size_t nq = x.folded ? 1 : 3;
    /* folded: the delivery's lease and timer go as the batch's, for the
     * statement's parameters (pl__pg_one_send()) */
    const char *owner = then->lease_owner, *tid = then->timer_id;
    int64_t lease_us = then->lease_us;
    if (x.folded) {
        then->lease_owner = take->owner;
        then->lease_us = take->lease_us;
        then->timer_us = now;
        then->timer_id = run_id;
    }
    if (!st)
        st = pl__pg_one_write_send(s, c, then, x.shape, &nq);
    if (x.folded) {
        then->lease_owner = owner;
        then->lease_us = lease_us;
        then->timer_us = 0;
        then->timer_id = tid;
    }
    const char *dv[1] = {t.run};
    if (!st && ends &&
        !(st = pl__pg_send(s, c, T_DROP, 1, dv, NULL, NULL,
                           "dropping a timer")))
        nq++;
    if (!st)
        st = pl__pg_pipeline_finish(s, c, x.ones.nprep + nq, ride_result, &x,
                                    "delivering to an inbox");
    pl__buf_free(&t.rec);
    *refused = x.refused;
    if (st)
        return st;
    *seq = x.folded ? take->then_seq : x.seq;
    then->gen = take->gen;
    take->taken = true;
    return PL_OK;
}

int pl__pg_inbox_put(pl__pg_store *s, uint64_t run, const char *run_id,
                     pl__inbox_check_fn check, void *user, const uint8_t *rec,
                     size_t len, pl__inbox_take *take, uint64_t *seq)
{
    if (take)
        take->taken = false;
    if (s->read_only)
        return pl__pg_read_only(s);
    if (len > INT32_MAX)
        return pl__err(PL_EINVAL, "an inbox record of %zu bytes is too long",
                       len);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    bool refused = true;
    if (take && ride_fits(take)) {
        st = ride_fast(s, c, run, run_id, check, user, rec, len, take, seq,
                       &refused);
        if (st && !refused)
            c = pl__pg_rollback(s, c);
        if (!refused) {
            pl__pg_conn_put(s, c);
            pl__pg_cache_ride(s, run, take, !st);
            return st;
        }
        pl__err_clear(); /* nothing written: the longer way */
        take->taken = false;
        take->then->inbox_known = false;
    }
    pl__pg_cache_drop(s, run); /* its inbox, if kept, is no longer empty */
    pl__buf state = {0}, claimed = {0};
    pl__inbox_take *taking = take;
    for (int tries = 1;; tries++) { /* again while LOCK_WAIT runs out */
        bool locked = false;
        take = taking;
        pl__buf_reset(&state);
        pl__buf_reset(&claimed);
        st = pl__pg_lock_state(s, c, run, &state);
        if (!st)
            st = check(state.data, state.len, user);
        if (take && !st && !claim(take, &state, &claimed))
            take = NULL; /* refused: the delivery alone */
        if (!st)
            st = put_send(s, c, run, run_id, rec, len, take, &claimed, seq,
                          &locked);
        if (st) {
            c = pl__pg_rollback(s, c);
            if (take)
                take->taken = false;
        }
        if (!st || !locked || !c || tries == 100)
            break;
        pl__err_clear();
        nanosleep(&(struct timespec){0, (tries % 10 + 1) * 1000000L}, NULL);
    }
    pl__pg_conn_put(s, c);
    pl__buf_free(&state);
    pl__buf_free(&claimed);
    return st;
}

int pl__pg_inbox_read(pl__pg_store *s, uint64_t run, pl__kvs *out)
{
    pl__kvs_reset(out);
    PGconn *c = NULL;
    PGresult *r;
    int st = exec_run(s, &c, T_INBOX_READ, run, &r, "reading an inbox");
    if (!c)
        return st;
    for (int i = 0; !st && i < PQntuples(r); i++) {
        int64_t seq;
        size_t n = 0;
        const char *hex = PQgetvalue(r, i, 1);
        unsigned char *rec = PQunescapeBytea((const unsigned char *)hex, &n);
        if (!rec || !pl__pg_parse_i64(PQgetvalue(r, i, 0), &seq))
            st = pl__err(rec ? PL_ECORRUPT : PL_ENOMEM,
                         "store '%s': reading an inbox record", s->path);
        else {
            uint8_t key[8];
            pl__put_be64(key, (uint64_t)seq);
            st = pl__kvs_add(out, key, 8, rec, n);
        }
        PQfreemem(rec);
    }
    PQclear(r);
    pl__pg_conn_put(s, c);
    return st;
}
