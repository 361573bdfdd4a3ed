/*
 * store.h -- the storage interface the engine is written against.
 *
 * The engine sees keys, values, runs and atomic batches; nothing here names
 * LMDB, so another backend can implement this header.  The LMDB files
 * (lmdb_env.c, lmdb_store.c, lmdb_journal.c) are the embedded default;
 * pg_store.c is the store on PostgreSQL, for a postgresql:// path.  store.c
 * implements these functions by handing each call to the store's backend.
 * The key layout (keys.h) and the containers (kvs.c) are every backend's.
 *
 * Thread rules: one store per process and path; all functions may be called
 * from any thread at once.
 */
#ifndef PL_STORE_H
#define PL_STORE_H

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
PL__HIDDEN void pl__kvs_free(pl__kvs *l);

/* Entry @p i's key and value; NULL while no byte has been stored (empty
 * entries only), which the decoders take for an empty record. */
static inline const uint8_t *pl__kvs_key(const pl__kvs *l, size_t i)
{
    return l->data.data ? l->data.data + l->e[i].koff : NULL;
}

static inline const uint8_t *pl__kvs_val(const pl__kvs *l, size_t i)
{
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
 * from the first), at most @p max_n.  Keys are kept.  An empty result means
 * the end.
 */
PL__HIDDEN int pl__store_scan(pl__store *s, uint64_t run, const uint8_t *after,
                              size_t after_len, size_t max_n,
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

/* Read a run's state record. */
PL__HIDDEN int pl__store_state_get(pl__store *s, uint64_t num,
                                   pl__buf *state) PL__MUST_CHECK;

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
 * followed by the info record.
 */
PL__HIDDEN int pl__store_runs(pl__store *s, const char *after, size_t max_n,
                              pl__kvs *out) PL__MUST_CHECK;

#endif /* PL_STORE_H */
