/*
 * pg_flow.c -- flow control on the store on PostgreSQL (FLOW in store.h):
 * the queue's order, concurrency keys and rate budgets.
 *
 * LAYOUT: three columns of the leases table (pg_lease.c) and one table,
 * made on every writable open (an older store gains them):
 *
 *   | leases.qrank  | bigint: the queue's order (Unix us, server clock), |
 *   |               | indexed with run for the queued runs alone         |
 *   |               | (leases_queue: owner ''); the owned leases' expiry |
 *   |               | has an index of its own (leases_live)              |
 *   | leases.fkey   | text: the concurrency key, or NULL; indexed as      |
 *   |               | KEYS says                                           |
 *   | leases.flimit | integer: its limit (0 without a key)                |
 *   | rates         | name text PK, window_ms, lim, start_ms, count       |
 *   |               | (bigint, checked: window_ms >= 1, lim >= 1,         |
 *   |               | 0 <= count <= lim): a rate budget (flowrec.h)       |
 *   | units         | name text, unit text (PK both), window_ms, lim,     |
 *   |               | start_ms, used (bigint, checked: 1 <= window_ms and |
 *   |               | lim <= 2^53, start_ms >= 0, 0 <= used <= 2^62): a   |
 *   |               | budget in units (flowrec.h)                         |
 *   | rates.sum,    | bytea: SHA-256 of the row (BUDGET SUMS below)       |
 *   | units.sum     |                                                     |
 *   | parked        | run bigint PK, fkey text, flimit integer: the key   |
 *   |               | of a run that parked (a wait), kept for its wake    |
 *   | leases.ksum,  | bytea: SHA-256 of the row's key and limit (KEY SUMS |
 *   | parked.ksum   | below)                                              |
 *
 * KEYS: two partial indexes serve what is read of a key, so that nothing
 * of a key reads its queued runs but what it needs of them:
 *
 *   | leases_key_live  | (fkey, expires) WHERE fkey IS NOT NULL AND owner |
 *   |                  | <> '': a key's owned leases, what its count      |
 *   |                  | reads (KEY_LIVE, pg_int.h: up to its limit, in   |
 *   |                  | this index's order, which no other gives) and a  |
 *   |                  | wake's look for a lease of the key run out ahead |
 *   |                  | of its run                                       |
 *   | leases_key_queue | (fkey, qrank, run) WHERE owner = '': the queue   |
 *   |                  | by key, each key's in order (the runs without a  |
 *   |                  | key, NULL, last): what a wake's look for a run   |
 *   |                  | of the key queued ahead reads, and the keys'     |
 *   |                  | heads and the queue without a key that pl_take() |
 *   |                  | reads past its first batches                     |
 *
 * A queued run's row has an entry in leases_queue and leases_key_queue;
 * an owned one in leases_live and, with a key, leases_key_live.
 * leases_fkey (fkey, every keyed row), which a store made before them
 * has, is dropped at a writable open, under the store's lock: a count
 * through it read every queued run of the key.
 *
 * A TAKE is the worker's take statement (pg_lease.c, which reads the run
 * in the same statement).  It locks the queue's head, the first expired
 * lease in the queue's order that no other transaction holds (FOR UPDATE
 * SKIP LOCKED: pg_lease.c's TAKE_HEAD, the earlier of the first queued
 * run, by leases_queue, and the first owned lease run out, by
 * leases_live; the runs running are in neither's way), and takes it in
 * plain SQL if it has no key; a head with a key goes to
 * pl_take(owner, lease_us): a function
 * that walks the expired leases in the queue's order and takes the first
 * it may (the head itself if its key has room: the head's lock is this
 * transaction's own).  A keyed head passed over stays locked until the
 * take's transaction ends, a few ms: another take passes over it
 * meanwhile, as over a key whose advisory lock it cannot take, and a
 * fence of it waits for that end (nothing the take holds waits for
 * anything: no deadlock).  It reads them TAKE_BATCH at a time by the two
 * indexes, merged, each batch after the last lease read, against the
 * server's clock read once: a take reads the head of the queue, not the
 * whole queue sorted (which cost a take more than the rest of a run's
 * statements together on a queue of 1,000).  After each batch passed (a
 * full key's queued runs, mostly) it reads the heads of TAKE_BATCH more
 * keys, in the keys' order: each key's first queued run past the last
 * read, of the keys not refused (by leases_key_queue: a loose scan, a
 * key's first entry read on from the last key's).  Once it has every
 * key's, it walks them
 * instead of the queue, merged in the queue's order with the queued
 * runs without a key (by leases_key_queue, whose NULL key is theirs) and
 * the owned leases run out, TAKE_BATCH at a time: every keyed run the
 * walk passed refused its key, so the first queued run of a key not
 * refused is its first past the last read, and the walk takes what a
 * walk of the whole queue would (a head another take took since it was
 * read is passed over with its key, as one another take holds).  A take
 * so reads in turns the queued
 * runs it passes and the keys queued, till the one or the other ends:
 * never all the runs of a full key with few keys queued (a walk of a
 * full key's 10,000 queued runs: 2,000 buffers and 9 ms a take,
 * bench/README.md), nor, with a few runs ahead, the heads of thousands
 * of keys.  The keys it refused are a set it hashes (REFUSED below:
 * a check a hash and a slot or two, not a scan of every key refused so
 * far, which cost a take past 5,000 full keys a second); a key's head
 * is checked once, when the walk reaches it: once it has every key's
 * the heads are sorted in the queue's order once and walked from where
 * the walk is, never filtered whole again.  For a run with a key it first takes the
 * key's transaction-scoped advisory lock, without waiting
 * (pg_try_advisory_xact_lock: a key another worker is taking on is passed
 * over this time, never waited for, so no two takes deadlock), then counts
 * the key's live leases in a snapshot taken after the lock: two workers
 * never both take a key's last place.  The row is taken with FOR UPDATE
 * SKIP LOCKED and its expiry checked again; a keyed row another
 * transaction holds (another take's head, whose key's lock that take has
 * not reached yet) is passed over with its key, as a key whose lock this
 * take cannot have: taking the key's next run instead would put it first.
 *
 * A WAKE (pg_time.c's T_TAKE, pg_wake.c's L_TAKE_DUES) chooses its due
 * timers with pl_wake(most): a function that walks them in the order of
 * the timers_due index (due, run), TAKE_BATCH at a time against the
 * server's clock read once, and locks each it takes (FOR UPDATE SKIP
 * LOCKED).  A run with a live lease is executing: its timer waits.  A run
 * with a key (the key its parking kept, or, for a run whose lease ran
 * out, the lease's: queued, and a delivery made its timer due, or its
 * worker gone) is taken only while the key has room, counted as a take
 * counts (pl_key_room(): the key's advisory lock, then its live leases),
 * and a run whose lease ran out only as the first of its key's queue;
 * a key refused once (full, its lock another's, a run of it ahead in the
 * queue, its timer locked by another transaction) is passed over for the
 * rest of the walk, as pl_take()'s refused keys (the same hashed set,
 * REFUSED below: each run's key and each head checked in a slot or two,
 * where every key refused so far was scanned; and its later timers not
 * read: TIMER KEYS below).  So the key's places go to
 * its timers in due order (ties: the run's number): counted as a plain
 * statement's scan read them (a filter on the rows, in the order of the
 * plan's choice), a run of the key due with another, or after another the
 * key refused and then had room for, took the key's place first; and a
 * queued run that a delivery made due took its key's place ahead of the
 * runs queued before it, or with no place counted at all.  A woken
 * parked run gets its key back on its lease; one whose key is full keeps
 * its due timer, taken once a place frees.  The wake's statement takes a
 * lease only if it ran out: a take of the queue or a ride that got it
 * after pl_wake() looked keeps it, and the run's timer stays.  A run's
 * parked row is written by its parking commit (pg_one.c's statements, from
 * the lease row the same commit drops) and deleted by its wake, by a
 * commit that ends an execution of it without parking (a run continued
 * by hand while parked, and cancelled or failed), and with the run by a
 * delete (Q_DELETE); a prune sweeps the rows of runs gone (pg_delete.c).
 *
 * TIMER KEYS: a timer row keeps in fkey the key a wake finds for its run
 * (TIMER_KEY, pg_int.h: its parked row's, else its lease's; none for a
 * run whose execution ends without parking), written with the timer by
 * every statement that writes one, and timers_key (fkey, due, run) holds
 * the timers by key, each key's in due order (those without a key, NULL,
 * last).  pl_wake() walks timers_due_run a batch at a time; after each
 * batch passed (a full key's due timers, mostly) it reads TAKE_BATCH keys
 * more (a loose scan of timers_key), and once it has every key's, each
 * key's first due timer past the last read, of the keys not refused, is
 * its head: it walks those instead, merged in due order with the timers
 * without a key (timers_key's NULL key); a key's head taken or passed
 * (executing) is replaced by the key's next, and the batch read again
 * from there.  So a wake reads in turns the due timers it passes and the
 * keys with timers, never all of a full key's (10,000 due: a wake read
 * them all, 625 batches; bench/README.md).  A store made before them
 * gains the column, filled from the parked rows and leases, and the
 * index at its next writable open, under its lock; a timer without a key
 * in the column is still read, and its run's key counted, as before.
 * The column follows the run's key whatever statement changes it:
 * triggers on the leases (a keyed row made or dropped, a row's key set)
 * and the parked rows (made, set, dropped) rewrite the run's timer's
 * key (pl_timer_key(), a probe of timers by run; a row without a key
 * before and after fires none).  Without them a timer kept the key its
 * last write found, and a run whose parked row or lease changed its key
 * after (a parked row dropped, a lease of another key made by a
 * statement that wrote no timer) waited behind the key it no longer had
 * once the wake read the timers by key and refused that key
 * (test_pg_keys).
 *
 * BUDGET SUMS: a budget's row carries sum, SHA-256 of "policyledger/budget"
 * NUL, its kind ('r' calls, 'u' units) NUL, name NUL, unit ('' for calls)
 * NUL and its four numbers (int8send), pl_budget_sum(), which a trigger
 * sets on every write of the row, whichever process (or version) writes
 * it.  Every read checks it: a row whose sum is not its own is refused
 * (PL_ECORRUPT), never counted on nor started again, since a value the
 * CHECKs let pass (a count lowered, a window or limit changed, which
 * starts a new window, a start moved on) would admit past the limit or
 * defer the retry past the window (docs/design.md §14, test_pg_liveflip).
 * A row without a sum was written before them: read as it is, and given
 * one by its next write.
 *
 * KEY SUMS: a keyed row of the leases or the parked runs carries ksum,
 * SHA-256 of "policyledger/key" NUL, its key NUL and its limit
 * (int4send), pl_key_sum(): a trigger sets it on every write that makes
 * a keyed row or changes its key or limit (BEFORE INSERT OR UPDATE OF
 * fkey, flimit, WHEN the key is not NULL: a row without a key, and a
 * take or renewal, which sets neither, fire nothing), unless the write
 * brings one (a run that parks copies its lease's key and sum to its
 * parked row, a continued run's successor its predecessor's: the copy
 * keeps the damage it was given, and is refused as the original would
 * be).  Every read that admits a run by them checks it: the take (a
 * keyed head, pl_take(): pg_lease.c's L_TAKE asks pl_key_damaged() of
 * the row it took) and the wake (pl_wake(): a parked or queued run's
 * row), and a damaged one is never executed: taken in its place and told
 * to its claim (pl__taken.key_damaged), which fails it (PL_ECORRUPT, a
 * reason naming the run, core/replay/claim.c), its failed state written
 * and its lease dropped in the take's or wake's transaction (pl_wake()
 * answers it with no key and the limit -1: its lease gets no key).  A
 * ride (ONE_RIDE) or a delivery's take (T_ACQUIRE) passes over it, as a
 * full key: the delivery alone, its timer due, and the wake fails it.  A limit raised
 * or a key changed would otherwise admit a run past its key's limit (docs/design.md §14,
 * test_pg_liveflip).  A row without a sum (a store made before them
 * gains the column at its next writable open, under its lock, and its
 * keyed rows their sums then) is read as it is.  What the sums do not
 * cover: a key's count (KEY_LIVE, pg_int.h) reads the live leases by
 * their key, so a holder whose key was changed is not counted, and
 * another run of its key may go beside it (docs/design.md §14).
 *
 * A RATE TAKE is one prepared statement: INSERT ... ON CONFLICT DO UPDATE
 * on the budget's row, which the server locks and counts in place, only
 * while the window has room, by the server's clock.  A take or correction
 * of a budget in units is one too: pl_units(), a function that locks the
 * row (made first if need be) and applies flowrec.c's rule
 * (pl__units_admit(), pl__units_settle()) by the server's clock.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW_MS "(extract(epoch from clock_timestamp()) * 1000)::bigint"
#define I64_MIN "(-9223372036854775807 - 1)"
/* the expired leases pl_take() reads at a time, in the queue's order */
#define TAKE_BATCH "16"
#define UNITS_MAX "9007199254740992"   /* PL_RATE_MAX_UNITS */
#define USED_MAX "4611686018427387904" /* PL__UNITS_USED_MAX */
/* a budget's row b whole (BUDGET SUMS above): of rates, of units */
#define RATE_OK(b)                                                             \
    "(" b ".sum IS NULL OR " b ".sum = \"%s\".pl_budget_sum('r', " b           \
    ".name, '', " b ".window_ms, " b ".lim, " b ".start_ms, " b ".count))"
#define UNITS_OK(b)                                                            \
    "(" b ".sum IS NULL OR " b ".sum = \"%s\".pl_budget_sum('u', " b           \
    ".name, " b ".unit, " b ".window_ms, " b ".lim, " b ".start_ms, " b        \
    ".used))"
/* pl_take()'s gate of the leases run out, and the live leases of a key
 * pl_key_room() and pl_take() count (pg_int.h), as of t and tk, read
 * after the key's lock: one schema each */
#define RUN_OUT LIVE_RUN_OUT("%s")
#define ROOM_LIVE KEY_LIVE("%s", "k", "lim", "t")
#define TAKE_LIVE KEY_LIVE("%s", "c.k", "c.lim", "tk")
/* pl_take()'s and pl_wake()'s keys refused, a set each hashes itself
 * (REFUSED_VARS: its own text[] fs of fm + 1 slots, open addressing, at
 * most half full; doubled as it fills): REFUSED(k) leaves fi at k's
 * slot, NULL if k was not refused, REFUSE(k) then puts it there.  A
 * check is a hash and a slot or two, whatever the keys refused: an array
 * scanned (= ANY) cost a take past 5,000 full keys some 60 million
 * comparisons (bench/README.md).  In a query, REFUSED_AT(k) is true when
 * k is at its first slot: refused for sure, and most keys refused are
 * there; one further on is not seen, and is checked when the walk
 * reaches it */
#define REFUSED_VARS                                                           \
    "fs text[] := array_fill(NULL::text, ARRAY[64]); fm integer := 63; fc "    \
    "integer := 0; fi integer; fo text[]; fx text; "
#define REFUSED_AT(k) "fs[(hashtext(" k ") & fm) + 1] IS NOT DISTINCT FROM " k
#define REFUSED(k)                                                             \
    "fi := (hashtext(" k ") & fm) + 1; WHILE fs[fi] IS NOT NULL AND fs[fi] "   \
    "<> " k " LOOP fi := (fi & fm) + 1; END LOOP; "
#define REFUSE(k)                                                              \
    "IF fs[fi] IS NULL THEN fs[fi] := " k "; fc := fc + 1; IF fc * 2 > fm "    \
    "THEN fo := fs; fm := fm * 2 + 1; fs := array_fill(NULL::text, "           \
    "ARRAY[fm + 1]); FOREACH fx IN ARRAY fo LOOP CONTINUE WHEN fx IS NULL; "   \
    "fi := (hashtext(fx) & fm) + 1; WHILE fs[fi] IS NOT NULL LOOP fi := (fi "  \
    "& fm) + 1; END LOOP; fs[fi] := fx; END LOOP; END IF; END IF; "
/* pl_wake()'s checks of its keys refused: a head's key (c.tk), a run's
 * (k), and k's refusal; and its heads read, those of keys refused left
 * out as REFUSED_AT sees them */
#define WAKE_REFUSED_HEAD REFUSED("c.tk")
#define WAKE_REFUSED REFUSED("k")
#define WAKE_REFUSE REFUSE("k")
#define WAKE_HEAD_OK REFUSED_AT("x.k")
/* and whether the run's key and limit, its parked row's or else its
 * lease's, are whole (KEY SUMS above) */
#define WAKE_Q_OK KEY_OK("c.qs", "c.qk", "c.ql")
#define WAKE_P_OK KEY_OK("c.ps", "c.pk", "c.pl")
#define WAKE_KEY_OK                                                            \
    "(CASE WHEN c.pk IS NULL THEN " WAKE_Q_OK " ELSE " WAKE_P_OK " END)"
/* a timer's key (TIMER_KEY, pg_int.h) of its row t, and of a run r */
#define TIMER_KEY_T TIMER_KEY("%s", "t.run")
#define TIMER_KEY_R TIMER_KEY("%s", "r")
/* the keys' heads pl_take() keeps: past the last run read (a key's
 * refused or not, checked once, when the walk reaches its head) */
#define HEAD_OK "FILTER (WHERE h.r IS NOT NULL OR (ks.q, ks.r) > (aq, ar))"
/* a head's fields, in the queue's order once it has every key's, the
 * next TAKE_BATCH from hi on */
#define HEADS_AT(a) a "[hi:hi + " TAKE_BATCH " - 1]"

int pl__pg_flow_sql(const pl__pg_store *s, int which, char **out)
{
    const char *n = s->schema;
    if (which == L_RATE_GET)
        *out = pl__asprintf("SELECT window_ms, lim, start_ms, count, " RATE_OK(
                                "b") " FROM \"%s\".rates b WHERE name = $1",
                            n, n);
    else if (which == L_UNITS_GET)
        *out = pl__asprintf("SELECT window_ms, lim, start_ms, used, " UNITS_OK(
                                "b") " FROM \"%s\".units b WHERE name = $1 AND "
                                     "unit = $2",
                            n, n);
    else if (which == L_UNITS)
        *out = pl__asprintf(
            "SELECT * FROM \"%s\".pl_units($1, $2, $3::bigint, $4::bigint, "
            "$5::boolean, $6::bigint, $7::bigint, $8::bigint)",
            n);
    else /* L_RATE: $1 name, $2 window, $3 limit */
        *out = pl__asprintf(
            "WITH t AS (SELECT " NOW_MS " AS ms), w AS (SELECT ms, ms - "
            "mod(ms, $2::bigint) AS ws FROM t), up AS (INSERT INTO "
            "\"%s\".rates AS b (name, window_ms, lim, start_ms, count) "
            "SELECT $1, $2::bigint, $3::bigint, ws, 1 FROM w ON CONFLICT "
            "(name) DO UPDATE SET start_ms = CASE WHEN b.window_ms = "
            "excluded.window_ms AND b.lim = excluded.lim AND b.start_ms >= "
            "excluded.start_ms THEN b.start_ms ELSE excluded.start_ms END, "
            "count = CASE WHEN b.window_ms = excluded.window_ms AND b.lim = "
            "excluded.lim AND b.start_ms >= excluded.start_ms THEN b.count + "
            "1 ELSE 1 END, window_ms = excluded.window_ms, lim = excluded.lim "
            "WHERE NOT (b.window_ms = excluded.window_ms AND b.lim = "
            "excluded.lim AND b.start_ms >= excluded.start_ms AND b.count >= "
            "b.lim) AND " RATE_OK(
                "b") " RETURNING b.start_ms) SELECT (SELECT "
                     "count(*) FROM up), w.ms, coalesce((SELECT start_ms FROM up), "
                     "(SELECT start_ms FROM \"%s\".rates WHERE name = $1), w.ws), "
                     "coalesce((SELECT " RATE_OK(
                         "r") " FROM \"%s\".rates r WHERE "
                              "r.name = $1), true) FROM w",
            n, n, n, n, n);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

/* KEY SUMS above: the sum, the column of the leases and parked rows (a
 * store made before it gains it, its keyed rows summed), the triggers
 * that set it; and pl_key_damaged(), whether a lease row's key or limit
 * is damaged, by a snapshot of its own (VOLATILE: pg_lease.c's take asks
 * after pl_take(), which may have read the row after the take's
 * statement began); eighteen schemas */
#define KEY_SUM_OF KEY_SUM("k", "lim")
#define LEASE_D_OK KEY_OK("d.ksum", "d.fkey", "d.flimit")
#define KEY_SUMS                                                               \
    "CREATE OR REPLACE FUNCTION \"%s\".pl_key_sum(k text, lim integer) "       \
    "RETURNS bytea LANGUAGE sql IMMUTABLE AS $f$ SELECT " KEY_SUM_OF " $f$;"   \
    "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = "   \
    "'\"%s\".leases'::regclass AND attname = 'ksum' AND NOT attisdropped) "    \
    "THEN ALTER TABLE \"%s\".leases ADD COLUMN ksum bytea; ALTER TABLE "       \
    "\"%s\".parked ADD COLUMN IF NOT EXISTS ksum bytea; UPDATE \"%s\".leases " \
    "SET ksum = \"%s\".pl_key_sum(fkey, flimit) WHERE fkey IS NOT NULL; "      \
    "UPDATE \"%s\".parked SET ksum = \"%s\".pl_key_sum(fkey, flimit); END "    \
    "IF; END $d$;"                                                             \
    "CREATE OR REPLACE FUNCTION \"%s\".pl_key_sum_set() RETURNS trigger "      \
    "LANGUAGE plpgsql AS $f$ BEGIN IF TG_OP = 'INSERT' THEN IF NEW.ksum IS "   \
    "NULL THEN NEW.ksum := \"%s\".pl_key_sum(NEW.fkey, NEW.flimit); END IF; "  \
    "ELSIF NEW.ksum IS NOT DISTINCT FROM OLD.ksum AND (NEW.fkey IS DISTINCT "  \
    "FROM OLD.fkey OR NEW.flimit IS DISTINCT FROM OLD.flimit) THEN NEW.ksum "  \
    ":= \"%s\".pl_key_sum(NEW.fkey, NEW.flimit); END IF; RETURN NEW; END $f$;" \
    "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = "      \
    "'\"%s\".parked'::regclass AND tgname = 'parked_key_sum') THEN CREATE "    \
    "TRIGGER leases_key_sum BEFORE INSERT OR UPDATE OF fkey, flimit ON "       \
    "\"%s\".leases FOR EACH ROW WHEN (NEW.fkey IS NOT NULL) EXECUTE FUNCTION " \
    "\"%s\".pl_key_sum_set(); CREATE TRIGGER parked_key_sum BEFORE INSERT OR " \
    "UPDATE OF fkey, flimit ON \"%s\".parked FOR EACH ROW EXECUTE FUNCTION "   \
    "\"%s\".pl_key_sum_set(); END IF; END $d$;"                                \
    "CREATE OR REPLACE FUNCTION \"%s\".pl_key_damaged(r bigint) RETURNS "      \
    "boolean LANGUAGE sql VOLATILE AS $f$ SELECT NOT " LEASE_D_OK " FROM "     \
    "\"%s\".leases d WHERE d.run = r $f$;"

char *pl__pg_flow_ddl(const pl__pg_store *s)
{
    const char *n = s->schema;
    return pl__asprintf(
        "DO $d$ BEGIN IF (SELECT count(*) FROM pg_attribute WHERE attrelid "
        "= '\"%s\".leases'::regclass AND attname IN ('qrank', 'fkey', "
        "'flimit') AND NOT attisdropped) < 3 THEN "
        "ALTER TABLE \"%s\".leases ADD COLUMN IF NOT EXISTS qrank bigint NOT "
        "NULL DEFAULT " NOW_US ", ADD COLUMN IF NOT EXISTS fkey text, ADD "
        "COLUMN IF NOT EXISTS flimit integer NOT NULL DEFAULT 0; END IF; END "
        "$d$;"
        /* the queue and the live leases indexed apart (pg_lease.c,
         * TAKE_HEAD); a store made before them loses the indexes of the
         * whole table, here, under the store's lock */
        "DO $d$ BEGIN IF to_regclass('\"%s\".leases_queue') IS NULL THEN "
        "CREATE INDEX leases_queue ON \"%s\".leases (qrank, "
        "run) WHERE owner = ''; END IF; END $d$;"
        "DO $d$ BEGIN IF to_regclass('\"%s\".leases_live') IS NULL THEN "
        "CREATE INDEX leases_live ON \"%s\".leases (expires) "
        "WHERE owner <> ''; END IF; END $d$;"
        "DROP INDEX IF EXISTS \"%s\".leases_qrank;"
        "DROP INDEX IF EXISTS \"%s\".leases_expires;"
        /* the keys (KEYS below); leases_fkey, of every keyed row, went
         * with them */
        "DO $d$ BEGIN IF to_regclass('\"%s\".leases_key_live') IS NULL THEN "
        "CREATE INDEX leases_key_live ON \"%s\".leases (fkey, "
        "expires) WHERE fkey IS NOT NULL AND owner <> ''; END IF; END $d$;"
        "DO $d$ BEGIN IF to_regclass('\"%s\".leases_key_queue') IS NULL THEN "
        "CREATE INDEX leases_key_queue ON \"%s\".leases (fkey, "
        "qrank, run) WHERE owner = ''; END IF; END $d$;"
        "DROP INDEX IF EXISTS \"%s\".leases_fkey;"
        "CREATE TABLE IF NOT EXISTS \"%s\".rates (name text PRIMARY KEY, "
        "window_ms bigint NOT NULL CHECK (window_ms >= 1), lim bigint NOT "
        "NULL CHECK (lim >= 1), start_ms bigint NOT NULL, count bigint NOT "
        "NULL, CHECK (count >= 0 AND count <= lim));"
        "CREATE TABLE IF NOT EXISTS \"%s\".units (name text, unit text, "
        "window_ms bigint NOT NULL CHECK (window_ms >= 1 AND window_ms <= " UNITS_MAX
        "), lim bigint NOT NULL CHECK (lim >= 1 AND lim <= " UNITS_MAX
        "), start_ms bigint NOT NULL CHECK (start_ms >= 0), used bigint NOT NULL CHECK (used >= 0 AND used <= " USED_MAX
        "), PRIMARY KEY (name, unit));"
        /* BUDGET SUMS: the column (a store made before it gains it), the
         * sum, the triggers that set it on every write */
        "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid "
        "= '\"%s\".rates'::regclass AND attname = 'sum' AND NOT "
        "attisdropped) THEN ALTER TABLE \"%s\".rates ADD COLUMN IF NOT "
        "EXISTS sum bytea; END IF; END $d$;"
        "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid "
        "= '\"%s\".units'::regclass AND attname = 'sum' AND NOT "
        "attisdropped) THEN ALTER TABLE \"%s\".units ADD COLUMN IF NOT "
        "EXISTS sum bytea; END IF; END $d$;"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_budget_sum(kd text, nm text, un "
        "text, win bigint, lm bigint, sm bigint, c bigint) RETURNS bytea "
        "LANGUAGE sql IMMUTABLE AS $f$ SELECT sha256(convert_to("
        "'policyledger/budget', 'UTF8') || '\\x00'::bytea || convert_to(kd, "
        "'UTF8') || '\\x00'::bytea || convert_to(nm, 'UTF8') || "
        "'\\x00'::bytea || convert_to(un, 'UTF8') || '\\x00'::bytea || "
        "int8send(win) || int8send(lm) || int8send(sm) || int8send(c)) $f$;"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_rates_sum() RETURNS trigger "
        "LANGUAGE plpgsql AS $f$ BEGIN NEW.sum := \"%s\".pl_budget_sum('r', "
        "NEW.name, '', NEW.window_ms, NEW.lim, NEW.start_ms, NEW.count); "
        "RETURN NEW; END $f$;"
        "CREATE OR REPLACE FUNCTION \"%s\".pl_units_sum() RETURNS trigger "
        "LANGUAGE plpgsql AS $f$ BEGIN NEW.sum := \"%s\".pl_budget_sum('u', "
        "NEW.name, NEW.unit, NEW.window_ms, NEW.lim, NEW.start_ms, "
        "NEW.used); RETURN NEW; END $f$;"
        "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = "
        "'\"%s\".units'::regclass AND tgname = 'units_sum') THEN "
        "CREATE TRIGGER rates_sum BEFORE INSERT OR UPDATE ON \"%s\".rates FOR "
        "EACH ROW EXECUTE FUNCTION \"%s\".pl_rates_sum(); CREATE TRIGGER "
        "units_sum BEFORE INSERT OR UPDATE ON \"%s\".units FOR EACH ROW "
        "EXECUTE FUNCTION \"%s\".pl_units_sum(); END IF; END $d$;"
        /* flowrec.c's pl__units_admit() and pl__units_settle() */
        "CREATE OR REPLACE FUNCTION \"%s\".pl_units(nm text, un text, win "
        "bigint, lm bigint, stl boolean, amt bigint, ws bigint, dl bigint) "
        "RETURNS TABLE (ok boolean, at_ms bigint, start_ms bigint, used "
        "bigint) LANGUAGE plpgsql AS $f$ "
        "#variable_conflict use_column\n"
        "DECLARE t bigint := " NOW_MS "; w bigint := t - mod(t, win); "
        "b record; u bigint; done boolean := false; BEGIN "
        "INSERT INTO \"%s\".units AS x (name, unit, window_ms, lim, "
        "start_ms, used) VALUES (nm, un, win, lm, w, 0) ON CONFLICT (name, "
        "unit) DO NOTHING; "
        "SELECT x.window_ms AS wm, x.start_ms AS sm, x.used AS us, " UNITS_OK(
            "x") " AS ok INTO b FROM \"%s\".units x WHERE x.name = nm AND "
                 "x.unit = un FOR UPDATE; "
                 /* a damaged row: neither counted on nor started again */
                 "IF NOT b.ok THEN RETURN QUERY SELECT NULL::boolean, t, w, b.us; "
                 "RETURN; END IF; "
                 "u := b.us; "
                 "IF b.wm = win AND b.sm > w THEN w := b.sm; END IF; "
                 "IF b.wm <> win OR b.sm <> w THEN u := 0; END IF; "
                 "IF stl THEN "
                 "IF dl > 0 THEN u := least(u + dl, " USED_MAX
                 "); done := true; "
                 "ELSIF dl < 0 AND w = ws THEN u := greatest(u + dl, 0); done := "
                 "true; END IF; "
                 "ELSIF amt <= lm AND u <= lm - amt THEN u := u + amt; done := true; "
                 "END IF; "
                 "UPDATE \"%s\".units x SET window_ms = win, lim = lm, start_ms = w, "
                 "used = u WHERE x.name = nm AND x.unit = un; "
                 "RETURN QUERY SELECT done, t, w, u; END $f$;"
                 "CREATE TABLE IF NOT EXISTS \"%s\".parked (run bigint PRIMARY KEY, "
                 "fkey text NOT NULL, flimit integer NOT NULL);" KEY_SUMS
                 /* the timers' keys (TIMER KEYS above): a store made before them
         * gains the column, filled from the runs' parked rows and leases,
         * and the index, under the store's lock */
                 "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid "
                 "= '\"%s\".timers'::regclass AND attname = 'fkey' AND NOT "
                 "attisdropped) THEN ALTER TABLE \"%s\".timers ADD COLUMN fkey text; "
                 "UPDATE \"%s\".timers t SET fkey = " TIMER_KEY_T "; "
                 "END IF; END $d$;"
                 "DO $d$ BEGIN IF to_regclass('\"%s\".timers_key') IS NULL THEN "
                 "CREATE INDEX timers_key ON \"%s\".timers (fkey, due, "
                 "run); END IF; END $d$;"
                 /* a run's key changed (its lease's or parked row's, made, set or
         * dropped), its timer's follows, whatever statement changed it
         * (TIMER KEYS above) */
                 "CREATE OR REPLACE FUNCTION \"%s\".pl_timer_key() RETURNS trigger "
                 "LANGUAGE plpgsql AS $f$ DECLARE r bigint; BEGIN IF TG_OP = "
                 "'DELETE' THEN r := OLD.run; ELSE r := NEW.run; END IF; UPDATE "
                 "\"%s\".timers t SET fkey = w.k FROM (SELECT " TIMER_KEY_R
                 " AS k) w WHERE t.run = r AND t.fkey IS DISTINCT FROM w.k; RETURN "
                 "NULL; END $f$;"
                 "DO $d$ BEGIN IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = "
                 "'\"%s\".parked'::regclass AND tgname = 'parked_timer_key') THEN "
                 "CREATE TRIGGER leases_timer_key_made AFTER INSERT ON \"%s\".leases "
                 "FOR EACH ROW WHEN (NEW.fkey IS NOT NULL) EXECUTE FUNCTION "
                 "\"%s\".pl_timer_key(); CREATE TRIGGER leases_timer_key_set AFTER "
                 "UPDATE OF fkey ON \"%s\".leases FOR EACH ROW WHEN (OLD.fkey IS "
                 "DISTINCT FROM NEW.fkey) EXECUTE FUNCTION \"%s\".pl_timer_key(); "
                 "CREATE TRIGGER leases_timer_key_gone AFTER DELETE ON \"%s\".leases "
                 "FOR EACH ROW WHEN (OLD.fkey IS NOT NULL) EXECUTE FUNCTION "
                 "\"%s\".pl_timer_key(); CREATE TRIGGER parked_timer_key AFTER INSERT "
                 "OR UPDATE OR DELETE ON \"%s\".parked FOR EACH ROW EXECUTE FUNCTION "
                 "\"%s\".pl_timer_key(); END IF; END $d$;"
                 /* the places this transaction gave already count: a take of
         * several timers inserts their leases after all its looks */
                 "CREATE OR REPLACE FUNCTION \"%s\".pl_key_room(k text, lim integer) "
                 "RETURNS boolean LANGUAGE plpgsql AS $f$ DECLARE live bigint; "
                 "g text := 'pl_granted.k' || md5(k); given bigint; t bigint; BEGIN "
                 "IF NOT pg_try_advisory_xact_lock(hashtextextended('%s/' || k, 0)) "
                 "THEN RETURN false; END IF; "
                 "given := coalesce(nullif(current_setting(g, true), ''), '0')::bigint; "
                 "t := " NOW_US "; live := " ROOM_LIVE "; "
                 "IF live + given >= lim THEN RETURN false; END IF; "
                 "PERFORM set_config(g, (given + 1)::text, true); "
                 "RETURN true; END $f$;"
                 /* a wake's choice of due timers (pg_wake.c's L_TAKE_DUES);
         * ROWS: a batch's few (PL__DUES_MAX), which the
         * statements around it are planned for (planned for the default
         * thousand, they read the whole state and timers tables) */
                 "CREATE OR REPLACE FUNCTION \"%s\".pl_wake(most integer) RETURNS "
                 "TABLE (run bigint, due bigint, id text, rec bytea, fkey text, "
                 "flimit integer) LANGUAGE plpgsql ROWS 8 AS $f$ "
                 "#variable_conflict use_column\n"
                 "DECLARE c record; k text; lim integer; " REFUSED_VARS
                 "tnow bigint := " NOW_US "; ad bigint := " I64_MIN
                 "; ar bigint := " I64_MIN "; n integer; took integer := 0; "
                 "heads boolean := false; again boolean; keys text[] := '{}'; kk "
                 "text; nk bigint; kl text[]; hr bigint[]; hk text[]; hd bigint[]; "
                 "j integer; nr bigint; nd bigint; BEGIN "
                 "LOOP n := 0; again := false; "
                 /* the next batch in due order: of timers_due_run, then of the
         * timers without a key (timers_key's NULL key) and the keys'
         * heads (TIMER KEYS above) */
                 "FOR c IN SELECT tm.run AS r, w.due AS d, tm.id AS i, tm.rec AS b, "
                 "w.k AS tk, p.fkey AS pk, p.flimit AS pl, q.fkey AS qk, q.flimit "
                 "AS ql, q.qrank AS qq, q.run AS qr, q.expires AS qe, p.ksum AS ps, "
                 "q.ksum AS qs FROM ((SELECT "
                 "t.run, t.due, NULL::text AS k FROM \"%s\".timers t WHERE NOT heads AND t.due <= tnow "
                 "AND (t.due, t.run) > (ad, ar) ORDER BY t.due, t.run LIMIT " TAKE_BATCH
                 ") UNION ALL (SELECT t.run, t.due, NULL FROM \"%s\".timers t WHERE heads "
                 "AND t.fkey IS NULL AND t.due <= tnow AND (t.due, t.run) > (ad, ar) "
                 "ORDER BY t.fkey, t.due, t.run LIMIT " TAKE_BATCH
                 ") UNION ALL "
                 "(SELECT h.r, h.d, h.k FROM unnest(hr, hk, hd) h(r, k, d) WHERE heads AND "
                 "(h.d, h.r) > (ad, ar) ORDER BY h.d, h.r "
                 "LIMIT " TAKE_BATCH
                 ")) w JOIN \"%s\".timers tm ON tm.run = w.run "
                 "LEFT JOIN \"%s\".parked p ON p.run = tm.run LEFT JOIN \"%s\".leases "
                 "q ON q.run = tm.run WHERE tm.due <= tnow ORDER BY w.due, w.run "
                 "LIMIT " TAKE_BATCH " LOOP "
                 /* a key's head read: its next in its place, and the batch read
         * again from here (that next may come before the batch's rest) */
                 "IF again THEN EXIT; END IF; "
                 "n := n + 1; ad := c.d; ar := c.r; "
                 /* a head of a key refused since the heads were read (or one
         * REFUSED_AT did not see): passed, the key's later timers with it */
                 "IF c.tk IS NOT NULL THEN " WAKE_REFUSED_HEAD
                 "IF fs[fi] IS NOT NULL "
                 "THEN CONTINUE; END IF; j := array_position(hk, c.tk); "
                 "SELECT t.run, t.due INTO nr, nd FROM \"%s\".timers t WHERE t.fkey "
                 ">= c.tk AND t.fkey <= c.tk AND t.due <= tnow AND (t.due, t.run) > "
                 "(ad, ar) ORDER BY t.fkey, t.due, t.run LIMIT 1; hr[j] := nr; hd[j] "
                 ":= nd; again := true; END IF; "
                 /* executing: it parks again or ends */
                 "IF c.qr IS NOT NULL AND c.qe > " NOW_US
                 " THEN CONTINUE; END IF; "
                 "k := coalesce(c.pk, c.qk); "
                 /* its key or limit damaged (KEY SUMS above): taken with
         * no key and the limit -1, to be failed, never executed */
                 "IF k IS NOT NULL AND NOT " WAKE_KEY_OK " THEN PERFORM 1 FROM "
                 "\"%s\".timers x WHERE x.run = c.r AND x.due <= tnow FOR UPDATE "
                 "SKIP LOCKED; IF NOT FOUND THEN CONTINUE; END IF; run := c.r; "
                 "due := c.d; id := c.i; rec := c.b; fkey := NULL; flimit := -1; "
                 "RETURN NEXT; took := took + 1; IF took >= most THEN RETURN; END "
                 "IF; CONTINUE; END IF; "
                 "IF k IS NOT NULL THEN " WAKE_REFUSED
                 "IF fs[fi] IS NOT NULL THEN "
                 "CONTINUE; END IF; "
                 "lim := CASE WHEN c.pk IS NULL THEN c.ql ELSE c.pl END; "
                 /* queued, its key's first in the queue's order, or the queue's */
                 "IF (c.pk IS NULL AND coalesce((SELECT true FROM \"%s\".leases o WHERE "
                 "o.fkey >= k AND o.fkey <= k AND o.owner = '' AND (o.qrank, o.run) < "
                 "(c.qq, c.qr) AND o.expires <= " NOW_US
                 " ORDER BY o.fkey, o.qrank, "
                 "o.run LIMIT 1) OR (SELECT true FROM \"%s\".leases o WHERE o.fkey "
                 ">= k AND o.fkey <= k AND o.owner <> '' AND o.expires <= " NOW_US
                 " AND (o.qrank, o.run) < (c.qq, c.qr) ORDER BY o.fkey, o.expires "
                 "LIMIT 1), false)) OR NOT \"%s\".pl_key_room(k, lim) THEN " WAKE_REFUSE
                 "CONTINUE; END IF; END IF; "
                 "PERFORM 1 FROM \"%s\".timers x WHERE x.run = c.r AND x.due <= "
                 "tnow FOR UPDATE SKIP LOCKED; "
                 "IF NOT FOUND THEN IF k IS NOT NULL THEN " WAKE_REFUSED
                     WAKE_REFUSE "END IF; CONTINUE; END IF; "
                 "run := c.r; due := c.d; id := c.i; rec := c.b; fkey := c.pk; "
                 "flimit := c.pl; RETURN NEXT; took := took + 1; "
                 "IF took >= most THEN RETURN; END IF; END LOOP; "
                 /* the heads read before this statement: one taken by another wake
         * since is not in the batch, which may then come short of the
         * rest: read on till a batch finds none */
                 "IF NOT again AND (n = 0 OR (n < " TAKE_BATCH
                 " AND NOT heads)) THEN "
                 "RETURN; END IF; "
                 /* a batch passed: TAKE_BATCH keys more, after kk in the keys'
         * order (timers_key, a loose scan); once it has every key's, each
         * key's first due timer past the last read, of those not refused,
         * is its head */
                 "IF NOT heads THEN "
                 "SELECT max(ks.k), count(*), array_agg(ks.k) INTO kk, nk, kl FROM "
                 "(WITH RECURSIVE ks(k, i) AS ((SELECT a.k, 1 FROM ((SELECT t.fkey AS "
                 "k FROM \"%s\".timers t WHERE kk IS NULL AND t.fkey IS NOT NULL ORDER "
                 "BY t.fkey LIMIT 1) UNION ALL (SELECT t.fkey FROM \"%s\".timers t "
                 "WHERE t.fkey > kk ORDER BY t.fkey LIMIT 1)) a LIMIT 1) UNION ALL "
                 "SELECT x.k, ks.i + 1 FROM ks CROSS JOIN LATERAL (SELECT t.fkey AS k "
                 "FROM \"%s\".timers t WHERE t.fkey > ks.k ORDER BY t.fkey LIMIT 1) x "
                 "WHERE ks.i < " TAKE_BATCH ") SELECT * FROM ks) ks; "
                 "keys := keys || kl; heads := nk < " TAKE_BATCH "; "
                 "IF heads THEN SELECT array_agg(h.run), array_agg(x.k), "
                 "array_agg(h.due) INTO hr, hk, hd FROM unnest(keys) x(k) CROSS JOIN "
                 "LATERAL (SELECT t.run, t.due FROM \"%s\".timers t WHERE t.fkey >= "
                 "x.k AND t.fkey <= x.k AND t.due <= tnow AND (t.due, t.run) > (ad, "
                 "ar) ORDER BY t.fkey, t.due, t.run LIMIT 1) h WHERE NOT " WAKE_HEAD_OK
                 "; END IF; END IF; "
                 "END LOOP; END $f$;"
                 "CREATE OR REPLACE FUNCTION \"%s\".pl_take(who text, dur bigint) "
                 "RETURNS TABLE (run bigint, gen bigint, expires_in bigint, owner "
                 "text, id text) LANGUAGE plpgsql AS $f$ "
                 "#variable_conflict use_column\n"
                 "DECLARE c record; live bigint; got bigint; tnow bigint := " NOW_US
                 "; aq bigint := " I64_MIN "; ar bigint := " I64_MIN
                 "; lo bigint := " I64_MIN
                 "; crashed boolean := coalesce(" RUN_OUT
                 ", false); n integer; heads boolean := false; hr bigint[] := '{}'; "
                 "hk text[] := '{}'; hl integer[] := '{}'; hq bigint[] := '{}'; hi "
                 "integer := 1; tk bigint; kk text; nk bigint; kr bigint[]; kh "
                 "text[]; kl integer[]; kq bigint[]; " REFUSED_VARS "BEGIN "
                 "LOOP n := 0; "
                 /* the heads the walk passed (in the queue's order, each read once) */
                 "IF heads THEN WHILE hi <= cardinality(hr) AND (hq[hi], hr[hi]) <= "
                 "(aq, ar) LOOP hi := hi + 1; END LOOP; END IF; "
                 /* the next batch in the queue's order: first of the queued runs
         * (leases_queue), then of the queued runs without a key
         * (leases_key_queue's NULL key) and the keys' heads; merged with the
         * leases run out while owned (leases_live, read only when there
         * are some, by the range that ran out: pg_lease.c, TAKE_HEAD) */
                 "FOR c IN SELECT * FROM ((SELECT l.run AS r, l.fkey AS k, l.flimit "
                 "AS lim, l.qrank AS q FROM \"%s\".leases l WHERE NOT heads AND "
                 "l.owner = '' AND (l.qrank, l.run) > (aq, ar) ORDER BY l.qrank, "
                 "l.run LIMIT " TAKE_BATCH ") UNION ALL (SELECT l.run, l.fkey, "
                 "l.flimit, l.qrank FROM \"%s\".leases l WHERE heads AND l.fkey IS "
                 "NULL AND l.owner = '' AND (l.qrank, l.run) > (aq, ar) ORDER BY "
                 "l.fkey, l.qrank, l.run LIMIT " TAKE_BATCH
                 ") UNION ALL (SELECT h.r, h.k, h.lim, h.q FROM unnest(" HEADS_AT("hr") ", " HEADS_AT("hk") ", " HEADS_AT("hl") ", " HEADS_AT(
                     "hq") ") h(r, k, lim, q) WHERE heads AND (h.q, h.r) > (aq, ar) ORDER BY "
                           "h.q, h.r LIMIT " TAKE_BATCH
                           ") UNION ALL (SELECT l.run, l.fkey, "
                           "l.flimit, l.qrank FROM \"%s\".leases l WHERE crashed AND l.owner "
                           "<> '' AND l.expires <= tnow AND l.expires >= lo AND (l.qrank, "
                           "l.run) > (aq, ar) ORDER BY l.qrank, l.run LIMIT " TAKE_BATCH
                           ")) b "
                           "ORDER BY b.q, b.r LIMIT " TAKE_BATCH " LOOP "
                           "n := n + 1; aq := c.q; ar := c.r; "
                           "IF c.k IS NOT NULL THEN " REFUSED(
                               "c.k") "IF fs[fi] IS NOT NULL THEN CONTINUE; END IF; "
                                      "IF NOT pg_try_advisory_xact_lock(hashtextextended('%s/' || c.k, "
                                      "0)) THEN " REFUSE(
                                          "c.k") "CONTINUE; END IF; "
                                                 "tk := " NOW_US
                                                 "; live := " TAKE_LIVE "; "
                                                 "IF live >= c.lim THEN " REFUSE(
                                                     "c.k") "CONTINUE; END IF; END IF; "
                                                            "SELECT x.run INTO got FROM \"%s\".leases x WHERE x.run = c.r AND "
                                                            "x.expires <= " NOW_US
                                                            " FOR UPDATE SKIP LOCKED; "
                                                            /* held by another transaction (another take, which locked it as
         * its head): its key is passed over with it, or a later run of
         * the key would go first and leave this one waiting behind it */
                                                            "IF NOT FOUND THEN IF c.k IS NOT NULL THEN " REFUSED("c.k") REFUSE(
                                                                "c.k") "END IF; CONTINUE; END IF; "
                                                                       "RETURN QUERY UPDATE \"%s\".leases l SET gen = l.gen + 1, owner = "
                                                                       "who, expires = " NOW_US
                                                                       " + dur WHERE l.run = got RETURNING l.run, "
                                                                       "l.gen, l.expires - " NOW_US
                                                                       ", l.owner, l.id; "
                                                                       "RETURN; END LOOP; "
                                                                       "IF n < " TAKE_BATCH
                                                                       " THEN RETURN; END IF; "
                                                                       /* a batch passed: the heads of the next TAKE_BATCH keys, after kk
         * in the keys' order (TAKE above): each key's first entry in
         * leases_key_queue, read on from the last key's, is its head,
         * unless the walk has passed it (a run queued since, ranked ahead:
         * then its first past the last read), its key checked when the
         * walk reaches it; once it has every key's, the heads sorted in
         * the queue's order, once */
                                                                       "IF NOT heads THEN "
                                                                       "SELECT max(ks.k), count(*), array_agg(coalesce(h.r, ks.r)) " HEAD_OK
                                                                       ", array_agg(ks.k) " HEAD_OK
                                                                       ", array_agg(coalesce(h.lim, ks.lim)) " HEAD_OK
                                                                       ", array_agg(coalesce(h.q, ks.q)) " HEAD_OK
                                                                       " INTO kk, nk, kr, kh, kl, kq FROM "
                                                                       "(WITH RECURSIVE ks(k, q, r, lim, "
                                                                       "i) AS ((SELECT a.*, 1 FROM ((SELECT l.fkey, l.qrank, l.run, "
                                                                       "l.flimit FROM \"%s\".leases l WHERE kk IS NULL AND l.fkey IS NOT "
                                                                       "NULL AND l.owner = '' ORDER BY l.fkey, l.qrank, l.run LIMIT 1) "
                                                                       "UNION ALL (SELECT l.fkey, l.qrank, l.run, l.flimit FROM \"%s\"."
                                                                       "leases l WHERE l.fkey > kk AND l.owner = '' ORDER BY l.fkey, "
                                                                       "l.qrank, l.run LIMIT 1)) a LIMIT 1) UNION ALL SELECT x.*, ks.i + 1 "
                                                                       "FROM ks CROSS JOIN LATERAL (SELECT l.fkey, l.qrank, l.run, "
                                                                       "l.flimit FROM \"%s\".leases l WHERE l.fkey > ks.k AND l.owner = '' "
                                                                       "ORDER BY l.fkey, l.qrank, l.run LIMIT 1) x WHERE ks.i < " TAKE_BATCH
                                                                       ") SELECT * FROM ks) ks LEFT JOIN LATERAL (SELECT l.run AS r, "
                                                                       "l.flimit AS lim, l.qrank AS q FROM \"%s\".leases l WHERE (ks.q, "
                                                                       "ks.r) <= (aq, ar) AND l.fkey >= ks.k AND l.fkey <= ks.k AND "
                                                                       "l.owner = '' AND (l.qrank, l.run) > (aq, ar) ORDER BY l.fkey, "
                                                                       "l.qrank, l.run LIMIT 1) h ON true; "
                                                                       "hr := hr || kr; hk := hk || kh; hl := hl || kl; hq := hq || kq; "
                                                                       "heads := nk < " TAKE_BATCH
                                                                       "; "
                                                                       "IF heads THEN SELECT coalesce(array_agg(h.r ORDER BY h.q, h.r), "
                                                                       "'{}'), coalesce(array_agg(h.k ORDER BY h.q, h.r), '{}'), "
                                                                       "coalesce(array_agg(h.lim ORDER BY h.q, h.r), '{}'), "
                                                                       "coalesce(array_agg(h.q ORDER BY h.q, h.r), '{}') INTO hr, hk, hl, "
                                                                       "hq FROM unnest(hr, hk, hl, hq) h(r, k, lim, q); END IF; END IF; "
                                                                       "END LOOP; END $f$;",
        n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n,
        n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n,
        n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n,
        n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n,
        n, n, n, n, n, n, n, n, n);
}

/* ---- rate budgets --------------------------------------------------------- */

int pl__pg_rate_take(pl__pg_store *s, const char *resource, uint32_t limit,
                     int64_t window_ms, bool *admitted, int64_t *at_ms,
                     int64_t *retry_at_ms)
{
    char w[24], l[16];
    snprintf(w, sizeof w, "%lld", (long long)window_ms);
    snprintf(l, sizeof l, "%u", (unsigned)limit);
    const char *vals[3] = {resource, w, l};
    PGresult *r;
    int st = pl__pg_lease_exec(s, L_RATE, 3, vals, &r, "taking a rate budget");
    if (st)
        return st;
    int64_t took, now, start;
    if (PQntuples(r) == 1 && PQnfields(r) == 4 &&
        strcmp(PQgetvalue(r, 0, 3), "t") != 0)
        st = pl__err(PL_ECORRUPT,
                     "store '%s': the rate budget of '%s' is damaged (its "
                     "sum is not its own)",
                     s->path, resource);
    else if (PQntuples(r) != 1 || PQnfields(r) != 4 ||
             !pl__pg_parse_i64(PQgetvalue(r, 0, 0), &took) ||
             !pl__pg_parse_i64(PQgetvalue(r, 0, 1), &now) ||
             !pl__pg_parse_i64(PQgetvalue(r, 0, 2), &start))
        st = pl__err(PL_ECORRUPT,
                     "store '%s': the rate budget of '%s' is malformed",
                     s->path, resource);
    PQclear(r);
    if (st)
        return st;
    *admitted = took == 1;
    /* the clock was read before the budget's row lock was waited for: a
     * take that waited while another moved the window on is charged to
     * that later window (the start the update returned), and says so */
    *at_ms = *admitted && start > now ? start : now;
    *retry_at_ms = *admitted ? 0 : start + window_ms;
    return PL_OK;
}

int pl__pg_rate_get(pl__pg_store *s, const char *resource, pl__rate_budget *out)
{
    const char *vals[1] = {resource};
    PGresult *r;
    int st = pl__pg_lease_exec(s, L_RATE_GET, 1, vals, &r,
                               "reading a rate budget");
    if (st)
        return st;
    int64_t v[4];
    if (PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "rate limit '%s' has no budget yet",
                     resource);
    for (int i = 0; !st && i < 5; i++)
        if (PQnfields(r) != 5 ||
            (i < 4 ? !pl__pg_parse_i64(PQgetvalue(r, 0, i), &v[i])
                   : strcmp(PQgetvalue(r, 0, i), "t") != 0))
            st = pl__err(PL_ECORRUPT,
                         "store '%s': the rate budget of '%s' is malformed",
                         s->path, resource);
    PQclear(r);
    if (st)
        return st;
    out->window_ms = v[0];
    out->limit = (uint32_t)v[1];
    out->start_ms = v[2];
    out->count = (uint32_t)v[3];
    return PL_OK;
}

/* ---- budgets in units ------------------------------------------------------ */

int pl__pg_units(pl__pg_store *s, const pl__units_op *op, pl__units_grant *out)
{
    char w[24], l[24], a[24], ws[24], d[24];
    snprintf(w, sizeof w, "%lld", (long long)op->window_ms);
    snprintf(l, sizeof l, "%llu", (unsigned long long)op->limit);
    snprintf(a, sizeof a, "%llu", (unsigned long long)op->amount);
    snprintf(ws, sizeof ws, "%lld", (long long)op->start_ms);
    snprintf(d, sizeof d, "%lld", (long long)op->delta);
    const char *vals[8] = {op->resource,           op->unit, w,  l,
                           op->settle ? "t" : "f", a,        ws, d};
    PGresult *r;
    int st = pl__pg_lease_exec(s, L_UNITS, 8, vals, &r,
                               op->settle ? "correcting a rate budget"
                                          : "taking a rate budget");
    if (st)
        return st;
    int64_t v[3];
    const char *ok = PQntuples(r) == 1 && PQnfields(r) == 4
                         ? PQgetvalue(r, 0, 0)
                         : "";
    for (int i = 0; !st && i < 3; i++)
        if (!*ok || !pl__pg_parse_i64(PQgetvalue(r, 0, i + 1), &v[i]))
            st = pl__err(PL_ECORRUPT,
                         "store '%s': the %s budget of '%s' is malformed",
                         s->path, op->unit, op->resource);
    *out = (pl__units_grant){0};
    if (!st && (v[2] < 0 || (uint64_t)v[2] > PL__UNITS_USED_MAX))
        st = pl__err(PL_ECORRUPT,
                     "store '%s': the %s budget of '%s' is malformed", s->path,
                     op->unit, op->resource);
    if (!st) {
        out->admitted = strcmp(ok, "t") == 0;
        out->at_ms = v[0];
        out->start_ms = v[1];
        out->used = (uint64_t)v[2];
        if (!op->settle && !out->admitted)
            out->retry_at_ms = v[1] + op->window_ms;
    }
    PQclear(r);
    return st;
}

int pl__pg_units_get(pl__pg_store *s, const char *resource, const char *unit,
                     pl__unit_budget *out)
{
    const char *vals[2] = {resource, unit};
    PGresult *r;
    int st = pl__pg_lease_exec(s, L_UNITS_GET, 2, vals, &r,
                               "reading a rate budget");
    if (st)
        return st;
    int64_t v[4];
    if (PQntuples(r) == 0)
        st = pl__err(PL_ENOTFOUND, "rate limit '%s' has no %s budget yet",
                     resource, unit);
    for (int i = 0; !st && i < 5; i++)
        if (PQnfields(r) != 5 ||
            (i < 4 ? !pl__pg_parse_i64(PQgetvalue(r, 0, i), &v[i])
                   : strcmp(PQgetvalue(r, 0, i), "t") != 0))
            st = pl__err(PL_ECORRUPT,
                         "store '%s': the %s budget of '%s' is malformed",
                         s->path, unit, resource);
    PQclear(r);
    if (st)
        return st;
    out->window_ms = v[0];
    out->limit = (uint64_t)v[1];
    out->start_ms = v[2];
    out->used = (uint64_t)v[3];
    return PL_OK;
}
