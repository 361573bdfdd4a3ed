/*
 * store.h -- the storage interface the engine is written against.
 *
 * The engine sees keys, values, runs and atomic batches; nothing here names
 * LMDB, so another backend can implement this header.  store.c implements
 * these functions by handing each call to the store's backend.  The key
 * layout (keys.h) and the containers (kvs.c) are every backend's.
 *
 * The module map: every file of ledger/, by folder (tests/module_map.sh
 * checks that it names each one, and nothing else).
 *
 *   store.c          which backend a path opens; each call handed to it
 *   kvs.c            key/value lists and batches (below)
 *
 *   codec/           records and keys, every backend's (codec.h)
 *     record.c       the step record: what a step is, as stored, and seed
 *                    steps (record.h)
 *     runrec.c       run records: a run's info and state (runrec.h;
 *                    runrec_io.h, how they are read and written)
 *     siderec.c      records beside a run's: inbox, timer, tombstone and
 *                    purge records (runrec.h)
 *     flowrec.c      flow control's records: a queued run's flow, a rate
 *                    limit's budget, a budget in units (flowrec.h)
 *     mp_write.c     the msgpack writer (mp.h)
 *     mp_read.c      the checked msgpack reader, and payloads decoded
 *     payload_cmp.c  payloads compared without encoding them again
 *                    (payload.h)
 *     keys.c         step keys: where each step of a run sits (keys.h)
 *     hash.c         the hash chain's digests, the run records' checksums
 *                    (hash.h, on base/sha256.h)
 *     schedrec.c     the schedule record (schedrec.h)
 *     share.c        large strings stored once per run: shared step
 *                    values, made and put back together (share.h)
 *
 *   lmdb/            the embedded default (lmdb_store.h, lmdb_int.h)
 *     lmdb_ident.c   what a file must be before LMDB maps it, and what
 *                    makes an environment a policyledger store
 *     lmdb_env.c     opening and closing the environment, its growth
 *     lmdb_bounds.c  every key and value read checked to lie inside the
 *                    data file (a damaged size is no crash)
 *     lmdb_store.c   committing batches, reading ledgers and runs
 *     lmdb_journal.c the group commit journal
 *     lmdb_lease.c   run leases (LEASES below)
 *     lmdb_delete.c  deleting runs: tombstones, steps removed in bounded
 *                    transactions (DELETING below)
 *     lmdb_sched.c   schedules (SCHEDULES below)
 *     lmdb_time.c    timers and inboxes (TIMERS below)
 *     lmdb_flow.c    the queue's order, concurrency keys, rate budgets
 *                    (FLOW below)
 *
 *   pg/              the store on PostgreSQL, for a postgresql:// path
 *                    (pg_store.h; built with PL_WITH_POSTGRESQL)
 *     pg_conn.c      connections, open (pg_int.h)
 *     pg_uri.c       the URI: checked, split, its password never shown
 *     pg_setup.c     the schema: made, upgraded, or found current in one read
 *     pg_commit.c    a commit: one transaction, one round trip
 *     pg_one.c       the statement of one run's write in a commit
 *     pg_read.c      reading ledgers, runs and states
 *     pg_reopen.c    a read-only open of a format 1 store that meets pairs
 *                    a writer gave it since: its reads of pairs made
 *     pg_lease.c     leases and the queue
 *     pg_delete.c    deleting runs, tombstones (DELETING below)
 *     pg_sched.c     schedules (SCHEDULES below)
 *     pg_time.c      timers and inboxes (TIMERS below)
 *     pg_wake.c      due timers' runs taken in batches (pl__store_take_dues())
 *     pg_wait.c      every statement's answer waited for with a bound
 *     pg_cache.c     the runs this process parked, for a signal that continues one
 *     pg_fork.c      the open stores across fork(), the process's id
 *     pg_flow.c      the queue's order, concurrency keys, rate budgets
 *
 * Thread rules: one store per process and path; all functions may be called
 * from any thread at once.
 */
#ifndef PL_STORE_H
#define PL_STORE_H

#include "flowrec.h"
#include "keys.h"
#include "util.h"

typedef struct pl__store pl__store;

typedef struct pl__store_options {
    size_t map_size;     /* initial size; 0 = default */
    size_t map_size_max; /* 0 = unlimited */
    unsigned max_readers;
    bool nosync; /* skip fsync: survives process crashes only */
    /* open an existing store only, and never write to it: every write
     * fails with PL_ESTATE, and the journal is left to writers */
    bool read_only;
    /* never create a store: a missing one is PL_ENOTFOUND */
    bool no_create;
} pl__store_options;

PL__HIDDEN int pl__store_open(pl__store **out, const char *path,
                              const pl__store_options *opts) PL__MUST_CHECK;
PL__HIDDEN void pl__store_close(pl__store *s);
PL__HIDDEN const char *pl__store_path(const pl__store *s);

/* The store's size and contents (see pl_store_stats in the public header). */
typedef struct pl__store_stats {
    uint64_t file_bytes, map_bytes, page_size, used_pages, free_pages;
    uint64_t runs, step_records;
} pl__store_stats;
PL__HIDDEN int pl__store_stats_get(pl__store *s,
                                   pl__store_stats *out) PL__MUST_CHECK;

/* A number that moves whenever the store may have changed, in one cheap
 * read (see pl_engine_change_mark() in the public header). */
PL__HIDDEN int pl__store_mark(pl__store *s, uint64_t *out) PL__MUST_CHECK;

/* ---- key/value lists (kvs.c) ------------------------------------------------- */

typedef struct pl__kv {
    size_t koff, klen, voff, vlen;
} pl__kv;

/* Keys and values back to back in one buffer. */
typedef struct pl__kvs {
    pl__buf data;
    pl__kv *e;
    size_t n, cap;
} pl__kvs;

/* Start an entry with @p key; the caller then appends the value to data. */
PL__HIDDEN int pl__kvs_begin(pl__kvs *l, const uint8_t *key,
                             size_t klen) PL__MUST_CHECK;
/* Close the entry begun last: its value is everything appended since. */
PL__HIDDEN void pl__kvs_end(pl__kvs *l);
/* Drop the entry begun last (after a failed encode). */
PL__HIDDEN void pl__kvs_cancel(pl__kvs *l);
PL__HIDDEN int pl__kvs_add(pl__kvs *l, const uint8_t *key, size_t klen,
                           const uint8_t *val, size_t vlen) PL__MUST_CHECK;
PL__HIDDEN void pl__kvs_reset(pl__kvs *l);
/* Empty @p l, and give its memory back if it holds more than @p keep. */
PL__HIDDEN void pl__kvs_trim(pl__kvs *l, size_t keep);
PL__HIDDEN void pl__kvs_free(pl__kvs *l);

/* Entry @p i's key and value; NULL while no byte has been stored (empty
 * entries only), which the decoders take for an empty record. */
static inline const uint8_t *pl__kvs_key(const pl__kvs *l, size_t i)
{
    assert(i < l->n);
    return l->data.data ? l->data.data + l->e[i].koff : NULL;
}

static inline const uint8_t *pl__kvs_val(const pl__kvs *l, size_t i)
{
    assert(i < l->n);
    return l->data.data ? l->data.data + l->e[i].voff : NULL;
}

/* ---- batches ----------------------------------------------------------------- */

/*
 * Steps and a run's new state, written atomically; or the creation of a
 * run (its id, info record and first state), for which the store assigns
 * the run's number.
 */
typedef struct pl__batch {
    pl__kvs steps;              /* step key -> record */
    uint64_t run;               /* whose state; set by the store for a create */
    pl__buf state;              /* the new state; len 0 = unchanged */
    const char *create_id;      /* create this run (NULL: no create) */
    const pl__buf *create_info; /* its info record */
    int rc; /* set by pl__store_commit(): PL_EEXIST when create_id is taken
               (the batch is skipped; the others are written) */
    /* the run's lease (see LEASES below), checked and changed in the same
     * transaction: */
    uint64_t gen;            /* fence: nonzero = the run's lease must still
                                have this generation, else PL_EBUSY */
    uint64_t nokey_gen;      /* = gen: that generation's lease is known to
                                have no concurrency key (FLOW below), so
                                its fence need not ask whether a key's
                                lease ran out; any other value: not known */
    bool release;            /* the execution ended: drop the run's lease */
    const char *lease_owner; /* create: the new run's lease, held by this
                                worker (generation 1), or "" = queued:
                                generation 0, claimable at once */
    int64_t lease_us;        /* create: how long the lease lasts */
    /* the run ends continued: create its successor in the same
     * transaction, queued (a lease nobody holds), taking the id over from
     * a tombstone; a live run with that id fails the whole commit with
     * PL_EEXIST */
    const char *succ_id;
    const pl__buf *succ_info, *succ_state;
    /* a schedule written in the same transaction (SCHEDULES below): */
    const char *sched_name;      /* NULL: none */
    const pl__buf *sched_rec;    /* its new record; NULL: delete it */
    const pl__buf *sched_expect; /* non-NULL: write only over this record
                                    (else nothing, and no error) */
    bool sched_strict; /* with sched_rec: only over sched_expect, or where
                          there is none when it is NULL; else the commit
                          fails with PL_EBUSY, writing nothing */
    /* time (TIMERS and INBOXES below), in the same transaction: */
    int64_t timer_us;         /* > 0: the run's timer is due then, or at the
                            earlier time it has (a run that parks) */
    const char *timer_id;     /* with timer_us: the run's id */
    uint64_t inbox_del;       /* nonzero: the inbox record of the run with this
                             seq is consumed: drop it (gone: PL_EBUSY) */
    const pl__kvs *inbox_add; /* non-NULL: inbox records of the run, keys
                                 their seqs (u64 BE), written as they are
                                 (an import's; a seq taken: PL_EBUSY);
                                 timer_id names the run they are bound to */
    /* set by a commit that looks in the run's inbox as it writes:
     * whether a cancellation waits there (inbox_known false: not known,
     * the engine reads the inbox itself).  PostgreSQL answers in the
     * commit's one statement; LMDB knows only an empty inbox, in the
     * commit's transaction, and leaves any other unknown. */
    bool inbox_known;
    bool inbox_cancel;
    /* with release: the run parks (a wait), and keeps its concurrency key
     * for its wake (FLOW below) */
    bool park;
    /* create, queued: the run's flow (FLOW below) */
    int32_t priority;
    const char *flow_key; /* NULL: none */
    uint32_t flow_limit;  /* with flow_key: 1 or more */
    /* create, instead of flow_key: the concurrency key and limit of run
     * flow_from as this transaction finds them (its lease's, or its
     * parked key's: FLOW below; none when it has none), for a fork's or
     * an upgrade's new run; 0: none */
    uint64_t flow_from;
} pl__batch;

PL__HIDDEN void pl__batch_free(pl__batch *b);

/*
 * Write batches in one transaction, durable as the store's options say,
 * growing the store when it is full.  All or nothing.  A step key that
 * exists already fails with PL_EBUSY (someone else appended to the run).
 *
 * With @p journal, the steps are appended as one record to the journal
 * (a few contiguous pages, whatever the number of runs) and moved to their
 * places later, many commits at a time (see lmdb_journal.c).  Steps in the
 * journal are durable but not yet readable: call pl__store_settle() before
 * reading steps that may be there.
 */
PL__HIDDEN int pl__store_commit(pl__store *s, pl__batch *const *batches,
                                size_t n, bool journal) PL__MUST_CHECK;

/* Move everything in the journal to its place, if it holds anything. */
PL__HIDDEN int pl__store_settle(pl__store *s) PL__MUST_CHECK;

/*
 * Settle the journal if it has grown full, in a transaction of its own.
 * Its steps are durable either way: a failure leaves them in the journal
 * for the next try (and for pl__store_settle() to report).
 */
PL__HIDDEN void pl__store_maintain(pl__store *s);

/* ---- reading ----------------------------------------------------------------- */

/*
 * Read the steps of one ledger from @p from_seq on, in order, at most
 * @p max_n records or about @p max_bytes bytes (always at least one),
 * hopping over the subtrees of its calls.  Keys are not kept.  A missing
 * step fails with PL_ECORRUPT.
 */
PL__HIDDEN int pl__store_read(pl__store *s, const uint8_t *prefix,
                              size_t prefix_len, uint32_t from_seq,
                              size_t max_n, size_t max_bytes,
                              pl__kvs *out) PL__MUST_CHECK;

/*
 * Read steps of run @p run in key order, starting after @p after (NULL:
 * from the first), at most @p max_n records and @p max_bytes bytes of keys
 * and records (a shared value counted as the record it stands for), but
 * always one record: a record that would take the page past @p max_bytes
 * starts the next page, or comes alone.  Keys are kept, so the next page
 * starts after the last key of this one.  An empty result means the end.
 */
PL__HIDDEN int pl__store_scan(pl__store *s, uint64_t run, const uint8_t *after,
                              size_t after_len, size_t max_n, size_t max_bytes,
                              pl__kvs *out) PL__MUST_CHECK;

/*
 * Hand every step of run @p run to @p fn, in key order: its key and value,
 * borrowed for the call only.  Reads in short transactions of a bounded
 * number of steps each, so that a long run never holds one open; a run
 * written meanwhile may be seen part way through.  @p fn returns PL_OK to
 * go on, or a status that stops the walk and is returned; it must not call
 * the store.
 */
typedef int (*pl__step_fn)(const uint8_t *key, size_t klen, const uint8_t *val,
                           size_t vlen, void *user);
PL__HIDDEN int pl__store_each_step(pl__store *s, uint64_t run, pl__step_fn fn,
                                   void *user) PL__MUST_CHECK;

/* ---- runs -------------------------------------------------------------------- */

/* Find a run by id: its number and (if @p info) its info record. */
PL__HIDDEN int pl__store_run_find(pl__store *s, const char *id, uint64_t *num,
                                  pl__buf *info) PL__MUST_CHECK;

/* What a delivery that would continue a run reads with it: whether the
 * run is parked with a concurrency key and that key has room for one more
 * live run now (FLOW below; read only: a take looks again, in its own
 * transaction), and its inbox (pl__store_inbox_read()); and, asked with
 * @c ledger_n (0: not), its root ledger's first records, as
 * pl__store_read() of the root ledger from seq 0 with @c ledger_n and
 * @c ledger_bytes (@c ledger_read: read; a store may leave it to that). */
typedef struct pl__run_more {
    bool keyed, room;
    pl__kvs inbox;
    size_t ledger_n, ledger_bytes;
    bool ledger_read;
    pl__kvs ledger;
} pl__run_more;

/* pl__store_run_find() with @p info, and the run's state record, and, with
 * @p more (NULL: not asked; the caller frees its inbox), what a delivery
 * reads with it: on PostgreSQL one query. */
PL__HIDDEN int pl__store_run_load(pl__store *s, const char *id, uint64_t *num,
                                  pl__buf *info, pl__buf *state,
                                  pl__run_more *more) PL__MUST_CHECK;

/* Read a run's state record. */
PL__HIDDEN int pl__store_state_get(pl__store *s, uint64_t num,
                                   pl__buf *state) PL__MUST_CHECK;

/* Read the state records of runs @p nums[0 .. n) into @p states[0 .. n)
 * (each reset first): on PostgreSQL one query for them all.  A run without
 * one is PL_ECORRUPT. */
PL__HIDDEN int pl__store_states_get(pl__store *s, const uint64_t *nums,
                                    size_t n, pl__buf *states) PL__MUST_CHECK;

/*
 * Read-modify-write a run's state in one write transaction: @p fn gets the
 * current state bytes and replaces them in @p state (it may also add step
 * records to @p extra, written in the same transaction).  A non-zero return
 * from fn aborts with that status.
 */
typedef int (*pl__state_fn)(pl__buf *state, pl__kvs *extra, void *user);
PL__HIDDEN int pl__store_state_update(pl__store *s, uint64_t num,
                                      pl__state_fn fn,
                                      void *user) PL__MUST_CHECK;

/*
 * List runs in id order after @p after (NULL: from the first), at most
 * @p max_n: keys are run ids, values are their number (8 bytes big-endian)
 * followed by the info record.  With @p desc, in descending id order,
 * before @p after (NULL: from the last).
 */
PL__HIDDEN int pl__store_runs(pl__store *s, const char *after, bool desc,
                              size_t max_n, pl__kvs *out) PL__MUST_CHECK;

/* ---- leases ------------------------------------------------------------------ */

/*
 * LEASES.  A run being executed, or queued for execution, has a lease: a
 * row of its own beside the run's records (LMDB: the `leases` database;
 * PostgreSQL: the `leases` table), never inside the state record.  A lease
 * names its holder (a worker id, "" while queued), a generation that every
 * change of holder increments, and an expiry on the store's clock (LMDB:
 * this host's; PostgreSQL: the server's).  An expired lease is a crashed or
 * queued run that any worker may take, exactly once: a take is one
 * conditional update.  A commit that carries a generation (pl__batch.gen)
 * checks it in its own transaction, so a worker whose lease was taken over
 * never writes into the run again.  A finished execution drops the lease
 * (pl__batch.release).
 */
#define PL__WORKER_ID_MAX 300

typedef struct pl__lease {
    uint64_t run, gen;
    int64_t expires_in_us; /* from now, by the store's clock; <= 0: expired */
    char owner[PL__WORKER_ID_MAX];
    char id[PL_MAX_RUN_ID + 1];
} pl__lease;

/*
 * Take run @p run's lease for @p owner, for @p lease_us: when there is
 * none, when it expired, when @p owner holds it, or when its generation
 * is @p steal_gen (nonzero: a holder known to be dead).  *gen is the new
 * generation and *had whether a lease was there.  A lease held by another
 * is PL_EBUSY with the holder in @p held (no message set).  With @p wake,
 * taken as a wake takes it (FLOW below): a run parked with a concurrency
 * key only while the key has room, the lease getting the key back; a key
 * that is full is PL_EBUSY too, with an empty held->owner (no message).
 */
PL__HIDDEN int pl__store_lease_acquire(pl__store *s, uint64_t run,
                                       const char *run_id, const char *owner,
                                       int64_t lease_us, uint64_t steal_gen,
                                       bool wake, uint64_t *gen, bool *had,
                                       pl__lease *held) PL__MUST_CHECK;

/*
 * TAKE.  What a worker does before it executes a queued or crashed run, in
 * one transaction: take the first expired lease for @p owner, for
 * @p lease_us (exactly once; FLOW below has the order), read its run's
 * info and state, and claim the run: @p fn gets them, the state locked,
 * and answers with the run's new state in @p state, written with the
 * lease.  On PostgreSQL: 2 round trips, one WAL flush, and the store says
 * too whether the run has any step and a cancellation waiting, so that the
 * engine reads neither.  @p fn may be called more than once (LMDB reads
 * the state again in the claim's transaction).
 *
 * @p fn refuses with a status, returned: the lease alone is taken, and
 * kept until it runs out (a run this worker cannot execute: another may),
 * or dropped with *drop (a run with nothing to execute); dropped with a
 * state in @p state, that state is written in the same transaction (a run
 * ended unexecuted: pl__taken.key_damaged).  *taken says
 * whether a lease was taken (in @p out), the run claimed or not.
 * PL_ENOTFOUND when no lease is expired; on PostgreSQL PL_EBUSY when
 * another transaction holds the first run's state (it is taken next time:
 * a take never waits); otherwise a failure of the store's, nothing of the
 * transaction this worker's.
 */
typedef struct pl__taken {
    pl__lease lease;
    const uint8_t *info, *state; /* the run's info and state records */
    size_t info_len, state_len;
    bool known;        /* the store read the two below (PostgreSQL) */
    bool no_steps;     /* the run has no step yet */
    bool inbox_cancel; /* a cancellation waits in its inbox */
    bool key_damaged;  /* its concurrency key or limit, as the store keeps
                          it, is damaged: it must not be executed, and
                          fails (docs/design.md §14) */
    size_t index;      /* its place in a batch (pl__store_take_dues()) */
} pl__taken;
typedef int (*pl__take_fn)(const pl__taken *t, pl__buf *state, bool *drop,
                           void *user);
PL__HIDDEN int pl__store_take(pl__store *s, const char *owner, int64_t lease_us,
                              pl__take_fn fn, void *user, pl__lease *out,
                              bool *taken) PL__MUST_CHECK;

/*
 * The take of a waiting run whose timer is due (TIMERS below), as
 * pl__store_take() takes a queued one: the earliest due timer whose run may
 * wake (no live lease; its concurrency key, if it parked with one, with
 * room), deleted, the run's lease taken (with its key), its records read
 * and @p fn's claim written, in one transaction (on PostgreSQL two round
 * trips).  PL_ENOTFOUND when none is due: *next_due_us is when the next
 * timer is (0: none).
 */
PL__HIDDEN int pl__store_take_due(pl__store *s, const char *owner,
                                  int64_t lease_us, pl__take_fn fn, void *user,
                                  pl__lease *out, bool *taken,
                                  int64_t *next_due_us) PL__MUST_CHECK;

/*
 * The same for up to @p max (at most PL__DUES_MAX) due runs, in due order,
 * in one transaction: each timer deleted, its run's lease taken and its
 * claim written, as pl__store_take_due() takes one; @p fn is called for
 * each (pl__taken.index its place in @p out).  Exactly once across
 * workers and hosts: a timer is taken by one transaction, and a run whose
 * state another transaction holds is left for the next take.  With
 * @p ahead_n nonzero the store may read each run's root ledger's first
 * records as well, as pl__store_read() of it from seq 0 with @p ahead_n
 * and @p ahead_bytes (out->ledger_read[i]: read).  PostgreSQL: two round
 * trips and one WAL flush for the batch (BEGIN and one statement that
 * takes, locks and reads; the claims and COMMIT), however many it holds;
 * LMDB takes one at a time.  PL_OK with out->n >= 1, out->st[i] saying
 * what @p fn answered (as pl__store_take_due()'s status with *taken);
 * PL_ENOTFOUND when none is due (*next_due_us as there); otherwise a
 * failure of the store's, nothing taken.  The caller frees out->ledger[].
 */
#define PL__DUES_MAX 8
typedef struct pl__dues {
    size_t n;
    pl__lease lease[PL__DUES_MAX];
    int st[PL__DUES_MAX];
    pl__kvs ledger[PL__DUES_MAX];
    bool ledger_read[PL__DUES_MAX];
    char msg[PL__DUES_MAX][PL__ERRMSG_MAX]; /* with st[i]: its message */
} pl__dues;
PL__HIDDEN int pl__store_take_dues(pl__store *s, const char *owner,
                                   int64_t lease_us, size_t max, size_t ahead_n,
                                   size_t ahead_bytes, pl__take_fn fn,
                                   void *user, pl__dues *out,
                                   int64_t *next_due_us) PL__MUST_CHECK;

/*
 * POLL.  What an idle worker asks before it takes: whether
 * pl__store_take() or pl__store_take_due() may find anything, read
 * without taking or locking, in one round trip on PostgreSQL.  *known is
 * false when the store cannot say (LMDB: its takes read memory, and cost
 * no more); else *queued says a lease has run out (a queued or crashed
 * run, whose key may still be full), *due that a timer is due (its run
 * may still be executing), and *next_due_us is the earliest timer's due
 * time (0: none).  A hint, never a take: a take after it may find
 * nothing, and a run queued after it is seen by the next.
 */
PL__HIDDEN int pl__store_poll(pl__store *s, bool *known, bool *queued,
                              bool *due, int64_t *next_due_us) PL__MUST_CHECK;

/* Extend the leases of runs @p runs whose generation is still @p gens[i] by
 * @p lease_us from now, in one transaction; lost[i] says which are not. */
PL__HIDDEN int pl__store_lease_renew(pl__store *s, const uint64_t *runs,
                                     const uint64_t *gens, size_t n,
                                     int64_t lease_us,
                                     bool *lost) PL__MUST_CHECK;

/* Drop run @p run's lease if its generation is still @p gen. */
PL__HIDDEN int pl__store_lease_release(pl__store *s, uint64_t run,
                                       uint64_t gen) PL__MUST_CHECK;

/* Read run @p run's lease: PL_ENOTFOUND when it has none. */
PL__HIDDEN int pl__store_lease_get(pl__store *s, uint64_t run,
                                   pl__lease *out) PL__MUST_CHECK;

/* Read the leases of runs @p runs[0 .. n) into @p out[0 .. n), @p found[i]
 * false for a run that has none: on PostgreSQL one query for them all. */
PL__HIDDEN int pl__store_leases_get(pl__store *s, const uint64_t *runs,
                                    size_t n, pl__lease *out,
                                    bool *found) PL__MUST_CHECK;
/* ---- deleting runs --------------------------------------------------------- */

/*
 * DELETING.  Runs are deleted in one transaction per call: each run's id,
 * info, state and lease go, and its tombstone (siderec.c) takes its id for
 * as long as the tombstone says (an unexpired tombstone makes a create of
 * that id PL_EEXIST, in the create's own transaction).  A run is whole or
 * gone: nothing of it is readable once that transaction commits.  Its steps
 * are removed in the same transaction on PostgreSQL; on LMDB they are left
 * under a purge record (its number) for pl__store_purge(), which removes
 * them in bounded transactions (a run's number is never given again, so
 * nothing can see them meanwhile).
 */
typedef struct pl__delete {
    const char *id;
    uint64_t num;         /* its number, as found */
    const uint8_t *state; /* its state record as read (and found final): */
    size_t state_len;     /* deleted only if it is still these bytes */
    const pl__buf *tomb;  /* its tombstone record, or NULL: none */
    int rc; /* set: PL_OK, PL_ENOTFOUND (gone already), PL_EBUSY (changed
               since read, executing, or steps of it held apart) */
} pl__delete;

/* Delete @p n runs in one transaction (those whose rc is not PL_OK are
 * left as they were). */
PL__HIDDEN int pl__store_delete(pl__store *s, pl__delete *d,
                                size_t n) PL__MUST_CHECK;

/* Remove deleted runs' steps, at most about @p max_steps in one
 * transaction; *more when some are left. */
PL__HIDDEN int pl__store_purge(pl__store *s, size_t max_steps, size_t *removed,
                               bool *more) PL__MUST_CHECK;

/* A deleted run's tombstone record (expired or not): PL_ENOTFOUND when there
 * is none. */
PL__HIDDEN int pl__store_tomb_get(pl__store *s, const char *id,
                                  pl__buf *rec) PL__MUST_CHECK;

/* Remove at most @p max tombstones expired at @p now_us, in one
 * transaction, looking at those whose ids sort after @p after (empty: from
 * the first), which is left at the last id looked at; *more when there are
 * more to look at. */
PL__HIDDEN int pl__store_tombs_expire(pl__store *s, int64_t now_us, size_t max,
                                      pl__buf *after, size_t *removed,
                                      bool *more) PL__MUST_CHECK;

/* ---- schedules --------------------------------------------------------------- */

/*
 * SCHEDULES.  A schedule (core/engine/schedule.c) is one record under its
 * name (LMDB: the `schedules` database; PostgreSQL: the `schedules`
 * table), its format in ledger/codec/schedrec.c.  It is written by a
 * commit: pl__batch.sched_name puts, replaces or deletes it, in the
 * commit's transaction (on PostgreSQL in its one round trip); with
 * sched_expect only over the record the writer read, so that a worker's
 * step forward never undoes a change made meanwhile; with sched_strict a
 * write that finds another record than the one read fails the commit with
 * PL_EBUSY instead (a put that carries what it read, which it reads again
 * and retries: core/engine/schedule.c).  A batch that creates
 * a run (create_id) writes its schedule whether or not the id is taken: a
 * tick's run and the cursor moved past it are one transaction, and a tick
 * another process fired first is handled all the same (docs/design.md
 * §14.1).  A put of a new schedule (no sched_expect) counts them in that
 * transaction too: past PL__SCHED_MAX the commit fails (below).
 */
#define PL__SCHED_MAX 4096 /* schedules a store holds at most */
/* A commit's put of a new schedule (sched_rec, no sched_expect) counts
 * them in its transaction: past PL__SCHED_MAX the commit fails,
 * PL_ELIMIT, this message naming the schedule (%s) and the most (%d). */
#define PL__SCHED_FULL_MSG                                                     \
    "schedule '%s': the store holds %d schedules, the most it keeps: delete "  \
    "one first"
/* A strict write (sched_strict) that finds another record than the one
 * its writer read: PL_EBUSY, this message naming the schedule (%s). */
#define PL__SCHED_CHANGED_MSG                                                  \
    "schedule '%s' changed while it was being written: read it again"

/* Every schedule, in name order: keys are names, values records. */
PL__HIDDEN int pl__store_scheds(pl__store *s, pl__kvs *out) PL__MUST_CHECK;

/* ---- timers and inboxes ------------------------------------------------------ */

/*
 * TIMERS.  A waiting run (see TIME in core/replay/wait.c) has a timer: a
 * record of its own (LMDB: the `timers` database and its index by due
 * time, `due`; PostgreSQL: the `timers` table, indexed by due), holding
 * the run's id and when it is due, on the store's clock.  A run has at
 * most one; setting it keeps an earlier due time, so a wake asked for
 * (a signal, a cancellation) is never pushed back by a run that parks.
 * A due timer is taken exactly once, with the run's lease, by one
 * conditional update, as a queued run is; a timer whose run holds a live
 * lease is left for later (the run is executing: it parks again or ends).
 * A timer whose run turns out not to be waiting is simply dropped by
 * whoever takes it.
 *
 * INBOXES.  What is delivered to a run from outside, events and
 * cancellations, waits in its inbox (LMDB: the `inbox` database; PostgreSQL:
 * the `inbox` table), keyed by the run's number and a sequence number the
 * store assigns in delivery order, until a wait consumes it: the step that
 * records the consumption and the record's removal are one commit
 * (pl__batch.inbox_del).
 */

/* Set run @p run's timer to @p due_us (Unix us), keeping an earlier one. */
PL__HIDDEN int pl__store_timer_set(pl__store *s, uint64_t run,
                                   const char *run_id,
                                   int64_t due_us) PL__MUST_CHECK;

/* Run @p run's timer: PL_ENOTFOUND when it has none. */
PL__HIDDEN int pl__store_timer_get(pl__store *s, uint64_t run,
                                   int64_t *due_us) PL__MUST_CHECK;

/* Whether a delivery may go in (see pl__store_inbox_put()): PL_OK, or a
 * status that refuses it (message set).  @p state is the run's state. */
typedef int (*pl__inbox_check_fn)(const uint8_t *state, size_t len, void *user);

/*
 * What a delivery may also do in its transaction: take the run's lease for
 * @c owner and claim its state with @c claim (the new state; PL_OK to
 * claim), so that the caller executes the run without two transactions
 * more.  Taken only when no live lease of another owner is there, the
 * run is not parked with a concurrency key that is full (the lease then
 * gets the key back, as a wake's does), and @c claim returns PL_OK (its refusal is no error: the delivery alone is
 * written); then @c taken is true and @c gen the lease's generation.
 */
typedef struct pl__inbox_take {
    const char *owner;
    int64_t lease_us;
    pl__state_fn claim; /* given no extra records to write */
    void *user;
    bool taken;
    uint64_t gen;
    /* non-NULL: the run's next commit, written in the same transaction
     * once the lease is taken and the state claimed (its gen set to the
     * lease's), so that the delivery and that commit are one sync. */
    pl__batch *then;
    /* nonzero: taken only when the record gets this seq, the one the run
     * saw it at; else the delivery alone is written (LMDB) or nothing is,
     * PL_EBUSY (PostgreSQL) */
    uint64_t then_seq;
    /* non-NULL: the state @c claim expects, refusing any other; a store
     * may then check and claim it before it reads the run's state, and
     * write all in one round trip when the state is still that one
     * (PostgreSQL) */
    const pl__buf *expect;
    /* with expect: the caller has claimed that state already, in memory
     * (a waiting run's, which a delivery's check lets in), and @c then
     * writes the state: a store that finds the run's state is still that
     * one need neither check nor claim it again */
    bool claimed;
} pl__inbox_take;

/*
 * In one transaction: @p check run @p run's state, append @p rec to its
 * inbox (its seq in *seq), and make its timer due now (keeping an earlier
 * one), so that a waiting run wakes to look; with @p take (NULL: none),
 * also take the run's lease and claim its state (pl__inbox_take).
 */
PL__HIDDEN int pl__store_inbox_put(pl__store *s, uint64_t run,
                                   const char *run_id, pl__inbox_check_fn check,
                                   void *user, const uint8_t *rec, size_t len,
                                   pl__inbox_take *take,
                                   uint64_t *seq) PL__MUST_CHECK;

/* Run @p run's inbox in delivery order: keys are seqs (u64 BE), values the
 * records. */
PL__HIDDEN int pl__store_inbox_read(pl__store *s, uint64_t run,
                                    pl__kvs *out) PL__MUST_CHECK;
/* ---- flow control ------------------------------------------------------------ */

/*
 * FLOW.  Every run holding a lease has a place in the queue, its rank:
 * when its lease was made (a queued run: its submission; by the store's
 * clock), less its priority times PL_PRIORITY_STEP_MS; and, when queued
 * with one, a concurrency key and its limit.  pl__store_take() takes
 * the expired lease of least rank (ties: least run number) whose key, if
 * it has one, has fewer than its limit of live leases (held, not expired).
 * A run that parks (pl__batch.park) keeps its key while it waits, and a
 * wake (pl__store_take_dues(), a delivery's take) takes it only while its
 * key has room: a woken run whose key is full stays due, taken once a
 * place frees.  On PostgreSQL (pl_wake(), pg_flow.c) a key's places go
 * to its woken runs in due order (ties: the run's number), and to a run
 * queued with a key whose timer a delivery made due only as the first of
 * its key's queue.
 * LMDB keeps them in the `flow` database (lmdb_flow.c): the run's flow
 * record, an index by rank, and one by key; PostgreSQL as columns of the
 * lease row (pg_flow.c).  They go with the lease.  A run created with
 * pl__batch.flow_from (a fork, an upgrade's successor) takes that run's
 * key and limit, not its rank: a key damaged there is refused on LMDB
 * (PL_ECORRUPT, the commit writes nothing) and carried, its sum with it,
 * on PostgreSQL, where the new run's take fails it as it would the
 * original.
 *
 * RATE BUDGETS.  A named rate limit's budget (fixed windows, flowrec.h) is
 * a record of the store's own, read and counted in one transaction; so is
 * a budget in units (tokens), one per resource and unit, apart from the
 * call budgets.
 */

/* Take one call of rate limit @p resource's budget (see pl_rate_take()). */
PL__HIDDEN int pl__store_rate_take(pl__store *s, const char *resource,
                                   uint32_t limit, int64_t window_ms,
                                   bool *admitted, int64_t *at_ms,
                                   int64_t *retry_at_ms) PL__MUST_CHECK;

/* Rate limit @p resource's budget as stored: PL_ENOTFOUND when it has
 * none. */
PL__HIDDEN int pl__store_rate_get(pl__store *s, const char *resource,
                                  pl__rate_budget *out) PL__MUST_CHECK;

/* A budget in units: take or correct (@p op, pl__units_admit() and
 * pl__units_settle() in one transaction), *out what happened. */
PL__HIDDEN int pl__store_units(pl__store *s, const pl__units_op *op,
                               pl__units_grant *out) PL__MUST_CHECK;

/* The budget of @p resource in @p unit as stored: PL_ENOTFOUND when it has
 * none. */
PL__HIDDEN int pl__store_units_get(pl__store *s, const char *resource,
                                   const char *unit,
                                   pl__unit_budget *out) PL__MUST_CHECK;

#endif /* PL_STORE_H */
