/*
 * pg_wake.c -- waiting runs whose timers are due, taken in batches, on the
 * store on PostgreSQL (pl__store_take_dues() in store.h).
 *
 * A batch is one transaction, two round trips and one WAL flush, however
 * many runs it holds (up to PL__DUES_MAX):
 *
 *   1. BEGIN and L_TAKE_DUES, one statement: the earliest due timers whose
 *      runs hold no live lease (and whose concurrency keys have room, in
 *      their order: pl_wake(), pg_flow.c), locked with FOR UPDATE SKIP
 *      LOCKED; of those, the runs whose state rows it can
 *      lock without waiting (FOR UPDATE SKIP LOCKED: a delivery or a
 *      deletion holding one leaves that run, and its timer, for the next
 *      take); their timers and parked rows deleted, their leases taken
 *      with their keys; and for each run its info and state, whether it
 *      has steps and a cancellation waiting, and its root ledger's first
 *      records (as L_READ_ROOT reads them), in due order;
 *   2. each run's claim (its state, written as a commit writes one) and
 *      COMMIT, in one pipeline (a run step 1 may not have seen whole, one
 *      round trip more before it: WAKE AGAIN below).
 *
 * Exactly once across workers and hosts: a timer row is taken by the one
 * transaction that locked it, and deleted by it; a worker killed before
 * step 2 took nothing (the server rolls back), and one killed after it
 * leaves claimed runs whose leases run out, taken from the queue by
 * another worker as any crashed run is.
 *
 * WAKE AGAIN: step 1 reads the runs' records as of its start, while
 * pl_wake(), a VOLATILE function whose statements each read the newest
 * rows, may take a run made waiting (or given a timer) after that: a run
 * that parked meanwhile, whose timer row is newer than the statement, or
 * whose timer a delivery made due while it executed and whose last commit
 * came meanwhile.  Its timer the statement did not see is not deleted, its
 * steps and its ledger's first records are read as they were before that
 * commit.  The statement answers every run it leased, with whether it may
 * not have seen it whole (its timer not deleted, or the state row it
 * locked, FOR UPDATE following the row to its newest version, not the
 * version its snapshot reads: every commit that ends or parks an
 * execution writes the state; or its info or state missing), and such a
 * run is read again, its timer and parked row deleted, by L_TAKE_READ
 * (pl__pg_take_read(), pg_lease.c), a statement of the batch's
 * transaction, before any claim; its ledger is left to its execution to
 * read.  Before, such a run's timer was left and the run not answered,
 * its lease taken for a worker that never knew of it (nothing executed it
 * until that lease ran out); or the run was answered with no steps, or
 * its ledger's last records missing, so that its execution would begin
 * again from a recorded call and make it again (test_pg_damage,
 * a_run_parked_during_a_wake_is_taken_whole).  A run read again whose
 * state another transaction holds by then rolls the batch back, to be
 * taken next time.
 *
 * The timers' due index is scanned with the server's clock read once
 * (pl_wake()'s tnow): an index bound, so a take reads the due timers it
 * looks at and no others.  With clock_timestamp() in the condition itself
 * the scan tested it as a filter on every timer, due or not: a take that
 * found nothing due read the whole index (100,000 waiting runs: tens of
 * milliseconds of the server's time a look).
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A due timer not taken (its run's state held, its key full): when to
 * look again */
#define LOOK_AGAIN_US 10000

int pl__pg_wake_sql(const pl__pg_store *s, char **out)
{
    const char *n = s->schema;
    /* $1 owner, $2 lease_us, $3 how many, $4 and $5 the ledger read's
     * limits (rows, bytes: L_READ_ROOT's); in binary */
    char *cols = pl__pg_pair_cols(s, "t"), *split = pl__pg_pair_split(s, "pr");
    *out = NULL;
    if (cols && split)
        *out = pl__asprintf(
            "WITH m AS MATERIALIZED (SELECT w.run, w.due, w.id, w.fkey, "
            "w.flimit FROM \"%s\".pl_wake($3::integer) w), "
            /* the states this transaction can lock now; a run without one is
         * taken too (and fails: else its timer is due for ever) */
            "s AS MATERIALIZED (SELECT x.run, x.v, x.ctid AS at FROM \"%s\".state "
            "x JOIN m ON x.run = m.run FOR UPDATE OF x SKIP LOCKED), "
            /* a lease another transaction took since pl_wake() looked (a
         * take of the queue, a ride) is live: not taken over, and the
         * run's timer stays */
            "g AS (INSERT INTO \"%s\".leases AS y (run, gen, owner, id, expires, "
            "fkey, flimit) SELECT m.run, 1, $1, m.id, " NOW_US " + $2::bigint, "
            "m.fkey, greatest(coalesce(m.flimit, 0), 0) FROM m WHERE EXISTS (SELECT 1 FROM s "
            "WHERE s.run = m.run) OR NOT EXISTS (SELECT 1 FROM \"%s\".state y "
            "WHERE y.run = m.run) ON CONFLICT (run) DO UPDATE SET gen = "
            "y.gen + 1, owner = excluded.owner, id = excluded.id, expires = "
            "excluded.expires, fkey = coalesce(excluded.fkey, y.fkey), flimit = "
            "CASE WHEN excluded.fkey IS NULL THEN y.flimit ELSE excluded.flimit "
            "END WHERE y.expires <= " NOW_US
            " RETURNING y.run, y.gen, y.expires "
            "- " NOW_US " AS expires_in, y.owner, y.id), "
            "d AS (DELETE FROM \"%s\".timers x USING m, g WHERE x.run = m.run "
            "AND g.run = m.run RETURNING m.run), "
            "k AS (DELETE FROM \"%s\".parked z USING g WHERE z.run = g.run) "
            "SELECT g.run, g.gen, g.expires_in, g.owner, g.id, r.info, s.v, "
            /* written since the statement began (WAKE AGAIN below): its
             * timer not seen, or the state it locked not the one it reads */
            "d.run IS NULL OR s.at IS DISTINCT FROM (SELECT y.ctid FROM "
            "\"%s\".state y WHERE y.run = g.run), EXISTS (SELECT 1 FROM \"%s\".steps k WHERE k.k >= int8send(g.run) "
            "AND k.k < int8send(g.run + 1)), EXISTS (SELECT 1 FROM \"%s\".inbox "
            "i WHERE i.run = g.run AND i.cancel), "
            /* and whether its key was damaged (pl_wake()'s limit -1): taken
             * keyless, to be failed (pg_flow.c, KEY SUMS) */
            "m.flimit < 0, (SELECT string_agg(int4send("
            "length(q.k)) || q.k || int4send(length(q.v)) || q.v, ''::bytea "
            "ORDER BY q.k) FROM (SELECT w.k, w.v, sum(length(w.v)) OVER (ORDER "
            "BY w.k ROWS UNBOUNDED PRECEDING) - length(w.v) AS before FROM "
            /* the rows split into their steps (pg_read.c, PAIRS) */
            "(SELECT x.k, x.v FROM (SELECT %s FROM \"%s\".steps t WHERE t.k >= "
            "int8send(g.run) || '\\x00000000'::bytea AND t.k <= int8send(g.run) "
            "|| '\\xffffffff'::bytea AND length(t.k) = 12 ORDER BY t.k LIMIT "
            "$4::bigint) pr(k, v, v1, k2, v2) %s WHERE x.k IS NOT NULL ORDER BY x.k "
            "LIMIT $4::bigint) w) q WHERE q.before = 0 OR q.before < $5::bigint) "
            "FROM g JOIN m ON m.run = g.run LEFT JOIN d ON d.run = g.run LEFT "
            "JOIN \"%s\".runs r ON r.num = g.run LEFT JOIN s ON s.run = g.run "
            "ORDER BY m.due, m.run",
            n, n, n, n, n, n, n, n, n, cols, n, split, n);
    free(cols);
    free(split);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

typedef struct dues_ctx {
    pl__pg_store *s;
    PGconn *c;
    PGresult *r; /* L_TAKE_DUES's rows, kept */
} dues_ctx;

static int dues_result(size_t i, PGresult *r, void *user)
{
    dues_ctx *x = user;
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK)
        return pl__pg_err(x->s, x->c, r, "taking due timers");
    if (i != 1)
        return PL_OK;
    x->r = PQcopyResult(r, PG_COPYRES_ATTRS | PG_COPYRES_TUPLES);
    return x->r ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

static bool col_i64(const PGresult *r, int row, int col, int64_t *v)
{
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8)
        return false;
    *v = (int64_t)pl__get_be64((const uint8_t *)PQgetvalue(r, row, col));
    return true;
}

static bool col_true(const PGresult *r, int row, int col)
{
    return PQgetlength(r, row, col) == 1 && *PQgetvalue(r, row, col) != 0;
}

static bool col_text(const PGresult *r, int row, int col, char *out, size_t n)
{
    int len = PQgetlength(r, row, col);
    if (PQgetisnull(r, row, col) || len < 0 || (size_t)len >= n)
        return false;
    memcpy(out, PQgetvalue(r, row, col), (size_t)len);
    out[len] = '\0';
    return true;
}

/* Run @p i of the batch: its lease into out->lease[i], its ledger read,
 * and the claim @p fn answers (out->st[i]: a refusal, or a run with no
 * records, keeps the lease unclaimed; *drop: it goes after the commit).
 * Read from row @p row of L_TAKE_DUES's @p r, or, read again, from the
 * one row of L_TAKE_READ's @p again (its columns up to the inbox's are
 * L_TAKE_DUES's; its ledger left to the execution to read). */
static int dues_row(pl__pg_store *s, PGresult *r, int row,
                    const PGresult *again, size_t ahead_n, size_t ahead_bytes,
                    pl__take_fn fn, void *user, pl__dues *out, pl__buf *claimed,
                    bool *drop)
{
    size_t i = (size_t)row;
    const PGresult *q = again ? again : r;
    int qr = again ? 0 : row;
    pl__lease *l = &out->lease[i];
    int64_t run, gen, in;
    if (PQnfields(r) != 12 || (again && PQnfields(again) != 11) ||
        !col_i64(q, qr, 0, &run) || !col_i64(q, qr, 1, &gen) ||
        !col_i64(q, qr, 2, &in) ||
        !col_text(q, qr, 3, l->owner, sizeof l->owner) ||
        !col_text(q, qr, 4, l->id, sizeof l->id))
        return pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                       s->path);
    l->run = (uint64_t)run;
    l->gen = (uint64_t)gen;
    l->expires_in_us = in;
    out->n = i + 1;
    out->ledger_read[i] = false;
    pl__kvs_reset(&out->ledger[i]);
    *drop = false;
    pl__taken t = {.lease = *l,
                   .known = true,
                   .no_steps = !col_true(q, qr, 8),
                   .inbox_cancel = col_true(q, qr, 9),
                   .key_damaged = col_true(r, row, 10),
                   .index = i};
    if (PQgetisnull(q, qr, 5) || PQgetisnull(q, qr, 6)) {
        out->st[i] = pl__err(PL_ECORRUPT, "run '%s' (#%llu) has no %s record",
                             l->id, (unsigned long long)l->run,
                             PQgetisnull(q, qr, 5) ? "info" : "state");
        pl__errmsg_save(out->msg[i]);
        return PL_OK;
    }
    if (ahead_n && !again) {
        int st = pl__pg_ledger_first(s, l->run,
                                     (const uint8_t *)PQgetvalue(r, row, 11),
                                     PQgetisnull(r, row, 11)
                                         ? 0
                                         : (size_t)PQgetlength(r, row, 11),
                                     ahead_n, ahead_bytes, &out->ledger[i]);
        if (st) {
            out->st[i] = st; /* the lease alone: it runs out */
            pl__errmsg_save(out->msg[i]);
            return PL_OK;
        }
        out->ledger_read[i] = true;
    }
    t.info = (const uint8_t *)PQgetvalue(q, qr, 5);
    t.info_len = (size_t)PQgetlength(q, qr, 5);
    t.state = (const uint8_t *)PQgetvalue(q, qr, 6);
    t.state_len = (size_t)PQgetlength(q, qr, 6);
    out->st[i] = fn(&t, claimed, drop, user);
    *drop = *drop && out->st[i];
    if (out->st[i]) {
        pl__errmsg_save(out->msg[i]);
        if (!*drop) /* refused; dropped with its ended state: written */
            pl__buf_reset(claimed);
    }
    return PL_OK;
}

/* Row @p row of L_TAKE_DUES's @p r read again, into *again, if the
 * statement may not have seen the run whole (WAKE AGAIN above); a run
 * whose state another transaction holds now rolls the batch back. */
static int wake_again(pl__pg_store *s, PGconn *c, PGresult *r, int row,
                      PGresult **again)
{
    int64_t run;
    *again = NULL;
    if (PQnfields(r) != 12 || !col_i64(r, row, 0, &run))
        return pl__err(PL_ECORRUPT, "store '%s': a lease row is malformed",
                       s->path);
    if (!col_true(r, row, 7) && !PQgetisnull(r, row, 5) &&
        !PQgetisnull(r, row, 6))
        return PL_OK;
    int st = pl__pg_take_read(s, c, (uint64_t)run, true, again);
    if (!st && PQnfields(*again) == 11 && col_true(*again, 0, 7))
        st = pl__err(PL_EBUSY,
                     "run #%llu's state is being written by another "
                     "transaction: it is woken next time",
                     (unsigned long long)run);
    return st;
}

int pl__pg_take_dues(pl__pg_store *s, const char *owner, int64_t lease_us,
                     size_t max, size_t ahead_n, size_t ahead_bytes,
                     pl__take_fn fn, void *user, pl__dues *out,
                     int64_t *next_due_us)
{
    out->n = 0;
    *next_due_us = 0;
    if (s->read_only)
        return pl__pg_read_only(s);
    if (!max)
        return pl__err(PL_EINVAL, "a take of no due timer");
    max = max < PL__DUES_MAX ? max : PL__DUES_MAX;
    dues_ctx x = {.s = s};
    int st = pl__pg_conn_get(s, &x.c);
    if (st)
        return st;
    char d[24], m[24], an[24], ab[24];
    unsigned long long bytes = ahead_bytes < INT64_MAX ? ahead_bytes
                                                       : INT64_MAX;
    snprintf(d, sizeof d, "%lld", (long long)lease_us);
    snprintf(m, sizeof m, "%zu", max);
    snprintf(an, sizeof an, "%zu", ahead_n < READ_MAX ? ahead_n : READ_MAX);
    snprintf(ab, sizeof ab, "%llu", bytes);
    const char *vals[5] = {owner, d, m, an, ab};
    st = pl__pg_begin_with(s, x.c, L_TAKE_DUES, 5, vals, dues_result, &x,
                           "taking due timers");
    int rows = st ? 0 : PQntuples(x.r);
    if (!st && rows > (int)max)
        st = pl__err(PL_ECORRUPT, "store '%s': a take of %zu timers took %d",
                     s->path, max, rows);
    pl__buf claimed[PL__DUES_MAX] = {{0}};
    pl__batch b[PL__DUES_MAX];
    pl__batch *put[PL__DUES_MAX];
    bool drop[PL__DUES_MAX] = {false};
    PGresult *again[PL__DUES_MAX] = {NULL};
    size_t nput = 0;
    /* every run read whole before any is claimed */
    for (int row = 0; !st && row < rows; row++)
        st = wake_again(s, x.c, x.r, row, &again[row]);
    for (int row = 0; !st && row < rows; row++)
        st = dues_row(s, x.r, row, again[row], ahead_n, ahead_bytes, fn, user,
                      out, &claimed[row], &drop[row]);
    for (size_t i = 0; i < PL__DUES_MAX; i++)
        PQclear(again[i]);
    PQclear(x.r);
    /* the claims and COMMIT: one round trip */
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    for (size_t i = 0; !st && i < out->n; i++) {
        if (!claimed[i].len)
            continue;
        memset(&b[nput], 0, sizeof b[nput]);
        b[nput].run = out->lease[i].run;
        b[nput].state = claimed[i]; /* borrowed */
        if (drop[i]) { /* ended (key_damaged): its lease dropped with it */
            b[nput].gen = out->lease[i].gen;
            b[nput].release = true;
            drop[i] = false;
        }
        put[nput] = &b[nput];
        nput++;
    }
    if (!st && rows)
        st = nput ? pl__pg_put_batches(s, x.c, put, nput, 0)
                  : pl__pg_command(s, x.c, "COMMIT", "committing");
    for (size_t i = 0; i < PL__DUES_MAX; i++)
        pl__buf_free(&claimed[i]);
    if (st || !rows) {
        /* nothing taken: rolled back (none found: nothing to end) */
        for (size_t i = 0; i < out->n; i++)
            pl__kvs_free(&out->ledger[i]);
        out->n = 0;
        x.c = pl__pg_rollback(s, x.c);
    }
    pl__pg_conn_put(s, x.c);
    if (st)
        return st;
    pl__errmsg_restore(saved);
    for (size_t i = 0; i < out->n; i++)
        if (drop[i] &&
            pl__pg_lease_release(s, out->lease[i].run, out->lease[i].gen)) {
            /* it expires on its own */
        }
    pl__errmsg_restore(saved);
    if (out->n)
        return PL_OK;
    /* none taken: when to look again (a due timer not taken now: at the
     * next one, or soon) */
    st = pl__pg_timer_next(s, LOOK_AGAIN_US, next_due_us);
    return st ? st : PL_ENOTFOUND;
}

/* pl__store_take_due(): a batch of one, its ledger not read. */
int pl__pg_take_due(pl__pg_store *s, const char *owner, int64_t lease_us,
                    pl__take_fn fn, void *user, pl__lease *out, bool *taken,
                    int64_t *next_due_us)
{
    pl__dues *d = calloc(1, sizeof *d);
    if (!d)
        return pl__err(PL_ENOMEM, "out of memory");
    int st = pl__pg_take_dues(s, owner, lease_us, 1, 0, 0, fn, user, d,
                              next_due_us);
    *taken = !st && d->n == 1;
    if (*taken) {
        *out = d->lease[0];
        if ((st = d->st[0]))
            pl__errmsg_restore(d->msg[0]);
    }
    pl__kvs_free(&d->ledger[0]);
    free(d);
    return st;
}
