/*
 * pg_commit.c -- writing to the store on PostgreSQL: a commit's batches in
 * one round trip, and the read-modify-write of a run's state in two.
 *
 * A COMMIT is one pipeline (libpq's pipeline mode) ended by one Sync, so
 * its statements run as one implicit transaction and cost one round trip,
 * whatever the number of batches (a group commit's runs) or steps:
 *
 *   | statement        | sent                                             |
 *   |------------------|--------------------------------------------------|
 *   | Q_CREATE         | once per batch that creates a run: the run, its  |
 *   |                  | first state                                      |
 *   | L_CREATE         | after it, when the new run is leased or queued   |
 *   |                  | (L_CREATE_FROM: with another run's key)          |
 *   | Q_CREATE_SUCC    | once per batch whose run ends continued: its     |
 *   |                  | successor, and L_CREATE_SUCC its queued lease at |
 *   |                  | the predecessor's place, with its key            |
 *   | plone<shape>     | when one batch writes a run (a call's commit):   |
 *   |                  | the fence of its lease (its row locked; the      |
 *   |                  | lease of a finished execution dropped), its      |
 *   |                  | steps, its state, its timer, the inbox record it |
 *   |                  | consumes, with scalars and only the parts that   |
 *   |                  | batch has (pg_one.c); each shape prepared first  |
 *   |                  | in the pipeline the first time a connection uses |
 *   |                  | it; plain SQL, no function called unless a fence |
 *   |                  | or a consumption failed                          |
 *   | Q_GENERIC        | instead, when several batches write runs (a      |
 *   |                  | group commit): the plans kept generic until the  |
 *   |                  | transaction ends, then                           |
 *   | Q_WRITE          | once for all of them: the same parts as arrays   |
 *   |                  | that unnest() turns into rows, the lease rows    |
 *   |                  | locked in run order, every fence before any drop |
 *   | Q_STEPS          | only past STEPS_ROWS rows or STEPS_BYTES bytes   |
 *   |                  | of steps: the rest, as many as it takes          |
 *   | Q_SCHED          | once per batch that writes a schedule            |
 *   |                  | (pg_sched.c)                                     |
 *   | Q_INBOX_ADD      | once per inbox record an import writes (rare:    |
 *   |                  | not worth an array of Q_WRITE's; pg_time.c)      |
 *
 * Every one is a prepared statement (pg_conn.c prepares them on each
 * connection), so the server parses and plans none of them again.  The
 * arrays travel in PostgreSQL's binary array format (arr_*() below).
 *
 * A NEW RECORD TYPE written with a commit goes in the same round trip:
 * give pl__batch a field for it, a part for it in pg_one.c's statements
 * (a bit of the shape, a scalar parameter), and an array (or two) in
 * Q_WRITE's statement in pg_one.c (another data-modifying CTE, `INSERT
 * ... SELECT * FROM unnest($8::..., $9::...)`) filled here in write_all(),
 * as the states are; or, for rows that must come before the others,
 * another prepared statement sent in pl__pg_commit() before the Sync.
 * Either way the commit stays one transaction and one round trip, and an
 * error in any statement rolls all of it back.
 *
 * Why one statement for a group and not one a run: each statement costs
 * the server its bind and the start and end of its plan's nodes, ~25 us,
 * and a group commit mostly carries one call a run.  Q_WRITE's plan is
 * generic over arrays of any size, which the server, once the tables have
 * statistics, would find dearer than a plan for the arrays at hand and so
 * plan again on every commit (bench/README.md, "On PostgreSQL"); Q_GENERIC
 * before it keeps it generic, for that transaction only.
 *
 * Errors: an existing step key (unique_violation) fails the commit with
 * PL_EBUSY, as on LMDB; a fence that fails (SQLSTATE PLOWN) is PL_EBUSY
 * naming the lease's new holder, and so is an inbox record consumed by
 * another execution first (pg_time.c); a new schedule past the most a
 * store keeps (PLSCH, pg_sched.c) is PL_ELIMIT; anything else is the
 * server's error.
 * After an error the Sync rolls back everything before it: nothing of the
 * commit is durable.  A connection lost before the Sync's answer leaves
 * the outcome unknown to this process (PL_ESTORE says so), never partial.
 */
#include "pg_int.h"
#include "runrec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS_ROWS 1000         /* rows of steps per statement */
#define STEPS_BYTES (32u << 20) /* bytes of steps per statement */

/* Element types of the arrays sent (pg_type.oid). */
#define OID_BOOL 16
#define OID_BYTEA 17
#define OID_INT8 20
#define OID_TEXT 25

/* ---- arrays in PostgreSQL's binary format -------------------------------- */

/*
 * A one-dimensional array without NULLs:
 *
 *   | offset | size | field                                        |
 *   |--------|------|----------------------------------------------|
 *   | 0      | 4    | number of dimensions (1; 0 when empty)       |
 *   | 4      | 4    | flags (0: no NULLs)                          |
 *   | 8      | 4    | element type oid                             |
 *   | 12     | 4    | number of elements (absent when empty)       |
 *   | 16     | 4    | lower bound, 1 (absent when empty)           |
 *   | 20     | ...  | each element: its length (4), its bytes      |
 *
 * All integers big-endian.  arr_begin() writes the header for one
 * dimension, arr_add() an element, arr_end() the count (or the empty
 * form).
 */
typedef struct arr {
    pl__buf b;
    size_t n;
} arr;

static int arr_begin(arr *a, uint32_t oid)
{
    uint8_t h[20];
    pl__put_be32(h, 1);
    pl__put_be32(h + 4, 0);
    pl__put_be32(h + 8, oid);
    pl__put_be32(h + 12, 0);
    pl__put_be32(h + 16, 1);
    pl__buf_reset(&a->b);
    a->n = 0;
    return pl__buf_append(&a->b, h, sizeof h);
}

static int arr_add(arr *a, const void *p, size_t len)
{
    if (len > INT32_MAX)
        return pl__err(PL_EINVAL,
                       "a value of %zu bytes is too long for the "
                       "server",
                       len);
    uint8_t l[4];
    pl__put_be32(l, (uint32_t)len);
    int st = pl__buf_append(&a->b, l, 4);
    if (!st && len)
        st = pl__buf_append(&a->b, p, len);
    if (!st)
        a->n++;
    return st;
}

static int arr_add_i64(arr *a, uint64_t v)
{
    uint8_t x[8];
    pl__put_be64(x, v);
    return arr_add(a, x, 8);
}

static void arr_end(arr *a)
{
    if (a->n) {
        pl__put_be32(a->b.data + 12, (uint32_t)a->n);
        return;
    }
    pl__put_be32(a->b.data, 0); /* empty: no dimensions */
    a->b.len = 12;
}

/* The arrays of one Q_WRITE or Q_STEPS statement. */
enum {
    A_FENCE_RUN,
    A_FENCE_GEN,
    A_FENCE_DROP,
    A_KEY,
    A_VAL,
    A_STATE_RUN,
    A_STATE,
    A_TIMER_RUN,
    A_TIMER_DUE,
    A_TIMER_ID,
    A_TIMER_REC,
    A_INBOX_RUN,
    A_INBOX_SEQ,
    A_RUNS, /* every run written: whose inbox to look in */
    A_PARK, /* the runs that park: their keys kept (pg_flow.c) */
    A_N
};

static const uint32_t arr_oid[A_N] = {OID_INT8,  OID_INT8, OID_BOOL,  OID_BYTEA,
                                      OID_BYTEA, OID_INT8, OID_BYTEA, OID_INT8,
                                      OID_INT8,  OID_TEXT, OID_BYTEA, OID_INT8,
                                      OID_INT8,  OID_INT8, OID_INT8};

typedef struct write_set {
    arr a[A_N];
} write_set;

static void write_set_free(write_set *w)
{
    for (int i = 0; i < A_N; i++)
        pl__buf_free(&w->a[i].b);
}

/* Send Q_WRITE (@p first) or Q_STEPS with the arrays of @p w. */
static int write_send(pl__pg_store *s, PGconn *c, write_set *w, bool first)
{
    const char *vals[A_N];
    int lens[A_N], fmts[A_N];
    int from = first ? 0 : A_KEY, to = first ? A_N : A_VAL + 1;
    for (int i = from; i < to; i++) {
        arr_end(&w->a[i]);
        if (w->a[i].b.len > INT32_MAX)
            return pl__err(PL_EINVAL,
                           "store '%s': a commit too large for "
                           "the server",
                           s->path);
        vals[i - from] = (const char *)w->a[i].b.data;
        lens[i - from] = (int)w->a[i].b.len;
        fmts[i - from] = 1;
    }
    return pl__pg_send(s, c, first ? Q_WRITE : Q_STEPS, to - from, vals, lens,
                       fmts, "sending a commit");
}

/* Send the arrays' first chunk of steps with @p one's write (pg_one.c),
 * or, for any other commit, Q_WRITE with all of them (@p first) or Q_STEPS. */
static int chunk_send(pl__pg_store *s, PGconn *c, write_set *w, bool first,
                      const pl__batch *one, unsigned shape)
{
    if (!first || !one)
        return write_send(s, c, w, first);
    arr_end(&w->a[A_KEY]);
    arr_end(&w->a[A_VAL]);
    if (w->a[A_KEY].b.len > INT32_MAX || w->a[A_VAL].b.len > INT32_MAX)
        return pl__err(PL_EINVAL,
                       "store '%s': a commit too large for the "
                       "server",
                       s->path);
    return pl__pg_one_send(s, c, one, shape, &w->a[A_KEY].b, &w->a[A_VAL].b);
}

/* Begin the arrays of a statement: all of them (@p first) or the steps'. */
static int write_begin(write_set *w, bool first)
{
    int st = PL_OK;
    for (int i = first ? 0 : A_KEY; !st && i < (first ? A_N : A_VAL + 1); i++)
        st = arr_begin(&w->a[i], arr_oid[i]);
    return st;
}

/* Whether a later batch than @p b of @p batches writes the same run's
 * state: only the last of them is written (one row per run). */
static bool state_overwritten(pl__batch *const *batches, size_t n, size_t b)
{
    for (size_t j = b + 1; j < n; j++)
        if (!batches[j]->create_id && batches[j]->state.len &&
            batches[j]->run == batches[b]->run)
            return true;
    return false;
}

/* Whether another batch of @p batches sets the same run's timer to an
 * earlier time than @p b does (or the same, before it): one row per run,
 * the earliest (store.h, TIMERS). */
static bool timer_overridden(pl__batch *const *batches, size_t n, size_t b)
{
    const pl__batch *x = batches[b];
    for (size_t j = 0; j < n; j++) {
        const pl__batch *y = batches[j];
        if (j != b && !y->create_id && y->timer_us && y->run == x->run &&
            (y->timer_us < x->timer_us ||
             (y->timer_us == x->timer_us && j < b)))
            return true;
    }
    return false;
}

/* Add batch @p bt's timer and inbox consumption to @p w's arrays. */
static int time_add(write_set *w, const pl__batch *bt, bool timer)
{
    int st = PL_OK;
    if (timer) {
        pl__buf rec = {0};
        st = pl__timer_encode(&rec, bt->timer_id, bt->timer_us);
        if (!st && !(st = arr_add_i64(&w->a[A_TIMER_RUN], bt->run)) &&
            !(st = arr_add_i64(&w->a[A_TIMER_DUE], (uint64_t)bt->timer_us)) &&
            !(st = arr_add(&w->a[A_TIMER_ID], bt->timer_id,
                           strlen(bt->timer_id))))
            st = arr_add(&w->a[A_TIMER_REC], rec.data, rec.len);
        pl__buf_free(&rec);
    }
    if (!st && bt->inbox_del &&
        !(st = arr_add_i64(&w->a[A_INBOX_RUN], bt->run)))
        st = arr_add_i64(&w->a[A_INBOX_SEQ], bt->inbox_del);
    return st;
}

/*
 * Send the steps, states, fences, timers and inbox consumptions of every
 * batch that creates no run: Q_WRITE, or for @p one, the only such batch,
 * the statement of its @p shape (pg_one.c); and Q_STEPS for steps past
 * their limits.  *nsent counts the statements sent.
 */
static int write_all(pl__pg_store *s, PGconn *c, pl__batch *const *batches,
                     size_t n, const pl__batch *one, unsigned shape,
                     size_t *nsent)
{
    write_set w = {0};
    /* one's fences, states, timers and inbox records go as scalars, and
     * with ONE_PAIR its steps too: no array is built for them */
    if (one && (shape & ONE_PAIR)) {
        int st = pl__pg_one_send(s, c, one, shape, NULL, NULL);
        if (!st)
            ++*nsent;
        return st;
    }
    int st = write_begin(&w, !one);
    /* the fences and states first: they all go with Q_WRITE, which the
     * steps' first chunk completes */
    for (size_t b = 0; !st && !one && b < n; b++) {
        const pl__batch *bt = batches[b];
        if (bt->create_id)
            continue;
        if (bt->gen) {
            uint8_t drop = bt->release;
            if (!(st = arr_add_i64(&w.a[A_FENCE_RUN], bt->run)) &&
                !(st = arr_add_i64(&w.a[A_FENCE_GEN], bt->gen)))
                st = arr_add(&w.a[A_FENCE_DROP], &drop, 1);
        }
        if (!st && bt->state.len && !state_overwritten(batches, n, b) &&
            !(st = arr_add_i64(&w.a[A_STATE_RUN], bt->run)))
            st = arr_add(&w.a[A_STATE], bt->state.data, bt->state.len);
        if (!st)
            st = time_add(&w, bt,
                          bt->timer_us && !timer_overridden(batches, n, b));
        if (!st)
            st = arr_add_i64(&w.a[A_RUNS], bt->run);
        if (!st && bt->park && bt->gen)
            st = arr_add_i64(&w.a[A_PARK], bt->run);
    }
    bool first = true;
    size_t rows = 0, bytes = 0;
    for (size_t b = 0; !st && b < n; b++) {
        const pl__batch *bt = batches[b];
        for (size_t i = 0; !st && !bt->create_id && i < bt->steps.n; i++) {
            const pl__kv *e = &bt->steps.e[i];
            if (rows && (rows == STEPS_ROWS ||
                         bytes + e->klen + e->vlen > STEPS_BYTES)) {
                if ((st = chunk_send(s, c, &w, first, one, shape)))
                    break;
                ++*nsent;
                first = false;
                rows = bytes = 0;
                if ((st = write_begin(&w, false)))
                    break;
            }
            if (!(st = arr_add(&w.a[A_KEY], pl__kvs_key(&bt->steps, i),
                               e->klen)))
                st = arr_add(&w.a[A_VAL], pl__kvs_val(&bt->steps, i), e->vlen);
            rows++;
            bytes += e->klen + e->vlen;
        }
    }
    /* the last chunk: Q_WRITE if none went yet, else Q_STEPS; a commit of
     * nothing but creations sends neither */
    bool any = !first || w.a[A_FENCE_RUN].n || w.a[A_STATE_RUN].n ||
               w.a[A_KEY].n || w.a[A_TIMER_RUN].n || w.a[A_INBOX_RUN].n ||
               shape;
    if (!st && any && (st = chunk_send(s, c, &w, first, one, shape)) == PL_OK)
        ++*nsent;
    write_set_free(&w);
    return st;
}

/* Send the writes of @p batches as @p o plans them: the one batch's as its
 * statement (pg_one.c), or a group's as Q_GENERIC and Q_WRITE.  *nsent
 * counts the statements sent. */
static int writes_send(pl__pg_store *s, PGconn *c, pl__batch *const *batches,
                       size_t n, const pl__pg_ones *o, size_t *nsent)
{
    if (o->group) {
        int st = pl__pg_send(s, c, Q_GENERIC, 0, NULL, NULL, NULL,
                             "sending a commit");
        if (st)
            return st;
        ++*nsent;
        return write_all(s, c, batches, n, NULL, 0, nsent);
    }
    if (!o->one)
        return PL_OK;
    pl__batch *const one[1] = {o->one};
    return write_all(s, c, one, 1, o->one,
                     pl__pg_one_shape(o->one, o->one->timer_us != 0), nsent);
}

int pl__pg_one_write_send(pl__pg_store *s, PGconn *c, const pl__batch *bt,
                          unsigned shape, size_t *nsent)
{
    pl__batch *one[1] = {(pl__batch *)bt};
    return write_all(s, c, one, 1, bt, shape, nsent);
}

/* What a statement sent in the pipeline was. */
typedef enum { SENT_CREATE, SENT_LEASE, SENT_WRITE, SENT_SUCC } sent_kind;

typedef struct sent {
    sent_kind kind;
    pl__batch *batch;
} sent;

typedef struct commit_ctx {
    pl__pg_store *s;
    PGconn *c;
    sent *q;   /* the creations' statements, in order */
    size_t nq; /* how many; every statement after them is a write */
    pl__batch *const *batches;
    size_t n;
    pl__pg_ones o; /* how the writes go (pg_one.c) */
} commit_ctx;

/* A write's answer: the runs written with a cancellation in their inbox,
 * "3,17" (NULL: none), in its last column: Q_WRITE's third (the others
 * are the checks') for every run it wrote, a batch's statement's only
 * column for its run (pg_one.c). */
static int cancels_seen(commit_ctx *x, PGresult *r)
{
    const pl__batch *one = x->o.group ? NULL : x->o.one;
    int col = x->o.group ? 2 : 0;
    if (PQntuples(r) != 1 || PQnfields(r) != col + 1 || (!x->o.group && !one))
        return pl__err(PL_ECORRUPT,
                       "store '%s': a commit's answer is malformed",
                       x->s->path);
    const char *p = PQgetisnull(r, 0, col) ? "" : PQgetvalue(r, 0, col);
    for (size_t b = 0; b < x->n; b++)
        if (!x->batches[b]->create_id &&
            (!one || x->batches[b]->run == one->run))
            x->batches[b]->inbox_known = true;
    while (*p) {
        char *end;
        unsigned long long run = strtoull(p, &end, 10);
        if (end == p || (*end && *end != ','))
            return pl__err(PL_ECORRUPT,
                           "store '%s': a commit's answer is malformed",
                           x->s->path);
        for (size_t b = 0; b < x->n; b++)
            if (x->batches[b]->inbox_known && x->batches[b]->run == run)
                x->batches[b]->inbox_cancel = true;
        p = *end ? end + 1 : end;
    }
    return PL_OK;
}

/* Send the creation of a run: Q_CREATE, and L_CREATE for its lease. */
static int create_send(commit_ctx *x, pl__batch *bt)
{
    if (bt->steps.n || bt->timer_us || bt->inbox_del)
        return pl__err(PL_EINVAL,
                       "store '%s': a batch that creates a run carries no "
                       "steps, timer or inbox consumption",
                       x->s->path);
    const char *vals[3] = {bt->create_id, (const char *)bt->create_info->data,
                           (const char *)bt->state.data};
    int lens[3] = {(int)strlen(bt->create_id), (int)bt->create_info->len,
                   (int)bt->state.len};
    int fmts[3] = {1, 1, 1};
    int st = pl__pg_send(x->s, x->c, Q_CREATE, 3, vals, lens, fmts,
                         "sending a run's creation");
    if (st)
        return st;
    x->q[x->nq++] = (sent){SENT_CREATE, bt};
    if (!bt->lease_owner)
        return PL_OK;
    char d[24], p[16], l[16];
    snprintf(d, sizeof d, "%lld", (long long)bt->lease_us);
    snprintf(p, sizeof p, "%d", (int)bt->priority);
    snprintf(l, sizeof l, "%u", bt->flow_key ? (unsigned)bt->flow_limit : 0u);
    char from[24]; /* or L_CREATE_FROM: another run's key */
    snprintf(from, sizeof from, "%llu", (unsigned long long)bt->flow_from);
    const char *lv[6] = {bt->create_id,
                         bt->lease_owner,
                         d,
                         p,
                         bt->flow_from  ? from
                         : bt->flow_key ? bt->flow_key
                                        : "",
                         l};
    if ((st = pl__pg_send(x->s, x->c, bt->flow_from ? L_CREATE_FROM : L_CREATE,
                          bt->flow_from ? 5 : 6, lv, NULL, NULL,
                          "sending a lease")))
        return st;
    x->q[x->nq++] = (sent){SENT_LEASE, bt};
    return PL_OK;
}

/* Send the creation of a continued run's successor, and its queued lease:
 * its predecessor's place in the queue and key (pg_lease.c). */
static int succ_send(commit_ctx *x, pl__batch *bt)
{
    const char *vals[3] = {bt->succ_id, (const char *)bt->succ_info->data,
                           (const char *)bt->succ_state->data};
    int lens[3] = {(int)strlen(bt->succ_id), (int)bt->succ_info->len,
                   (int)bt->succ_state->len};
    int fmts[3] = {1, 1, 1};
    int st = pl__pg_send(x->s, x->c, Q_CREATE_SUCC, 3, vals, lens, fmts,
                         "sending a successor's creation");
    if (st)
        return st;
    x->q[x->nq++] = (sent){SENT_SUCC, bt};
    char pred[24];
    snprintf(pred, sizeof pred, "%llu", (unsigned long long)bt->run);
    const char *lv[2] = {bt->succ_id, pred};
    if ((st = pl__pg_send(x->s, x->c, L_CREATE_SUCC, 2, lv, NULL, NULL,
                          "sending a lease")))
        return st;
    x->q[x->nq++] = (sent){SENT_LEASE, bt};
    return PL_OK;
}

/* The result of the commit's statement @p i (pl__pg_pipeline_finish()). */
static int commit_result(size_t i, PGresult *r, void *user)
{
    commit_ctx *x = user;
    if (i < x->o.nprep)
        return pl__pg_ones_prepared_result(x->s, x->c, &x->o, i, r);
    i -= x->o.nprep;
    sent_kind kind = i < x->nq ? x->q[i].kind : SENT_WRITE;
    ExecStatusType es = PQresultStatus(r);
    if (x->o.group && i == x->nq) /* Q_GENERIC's, before Q_WRITE */
        return es == PGRES_TUPLES_OK ? PL_OK
                                     : pl__pg_err(x->s, x->c, r, "committing");
    if (es == PGRES_TUPLES_OK && kind == SENT_CREATE) {
        pl__batch *bt = x->q[i].batch;
        if (PQntuples(r) == 0)
            bt->rc = PL_EEXIST;
        else if (PQgetlength(r, 0, 0) == 8)
            bt->run = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
        else
            return pl__err(PL_ECORRUPT, "store '%s': a run number is malformed",
                           x->s->path);
        return PL_OK;
    }
    if (es == PGRES_TUPLES_OK && kind == SENT_WRITE) /* Q_WRITE's */
        return cancels_seen(x, r);
    if (es == PGRES_TUPLES_OK || es == PGRES_COMMAND_OK)
        return PL_OK;
    if (kind == SENT_SUCC && pl__pg_unique_violation(r))
        return pl__err(PL_EEXIST,
                       "run '%s' exists already: it cannot be the successor "
                       "of the run continued as new; nothing was written",
                       x->q[i].batch->succ_id);
    if (kind == SENT_WRITE && pl__pg_unique_violation(r))
        return pl__pg_busy();
    int st = kind == SENT_WRITE ? pl__pg_time_failed(r) : PL_OK;
    if (!st && kind == SENT_WRITE)
        st = pl__pg_sched_failed(r);
    /* else a fence, or any error */
    return st ? st : pl__pg_lease_failed(x->s, x->c, r);
}

int pl__pg_commit(pl__pg_store *s, pl__batch *const *batches, size_t n,
                  bool journal)
{
    (void)journal; /* no journal: steps go to their place at once */
    if (s->read_only)
        return pl__pg_read_only(s);
    size_t creates = 0;
    for (size_t b = 0; b < n; b++) {
        batches[b]->rc = PL_OK;
        batches[b]->inbox_known = batches[b]->inbox_cancel = false;
        creates += (batches[b]->create_id != NULL) +
                   (batches[b]->succ_id != NULL);
    }
    commit_ctx x = {s, NULL, NULL, 0, batches, n, {0}};
    if (creates && !(x.q = calloc(2 * creates, sizeof *x.q)))
        return pl__err(PL_ENOMEM, "out of memory");
    int st = pl__pg_conn_get(s, &x.c);
    if (st) {
        free(x.q);
        return st;
    }
    size_t writes = 0;
    st = pl__pg_ones_plan(&x.o, x.c, batches, n);
    if (!st && PQenterPipelineMode(x.c) != 1)
        st = pl__pg_err(s, x.c, NULL, "entering pipeline mode");
    if (!st)
        st = pl__pg_ones_prepare(s, x.c, &x.o);
    for (size_t b = 0; !st && b < n; b++) {
        if (batches[b]->create_id)
            st = create_send(&x, batches[b]);
        if (!st && batches[b]->succ_id)
            st = succ_send(&x, batches[b]);
    }
    if (!st)
        st = writes_send(s, x.c, batches, n, &x.o, &writes);
    /* schedules, each its statement, in the same pipeline (a creation's
     * too, whether or not its id is taken: store.h, SCHEDULES) */
    for (size_t b = 0; !st && b < n; b++)
        if (batches[b]->sched_name &&
            (st = pl__pg_sched_send(s, x.c, batches[b])) == PL_OK)
            writes++;
    /* an import's inbox records, each its statement, too */
    for (size_t b = 0; !st && b < n; b++)
        if (batches[b]->inbox_add && !batches[b]->create_id)
            st = pl__pg_inbox_add_send(s, x.c, batches[b], &writes);
    /* the Sync ends the implicit transaction: commits it, or rolls back
     * everything after an error; after a failed send nothing is synced,
     * and the connection, left in pipeline mode, is dropped, which rolls
     * it back too */
    size_t nsent = x.o.nprep + x.nq + writes;
    if (!st && nsent)
        st = pl__pg_pipeline_finish(s, x.c, nsent, commit_result, &x,
                                    "committing");
    else if (!st)
        PQexitPipelineMode(x.c);
    free(x.q);
    pl__pg_conn_put(s, x.c);
    pl__pg_cache_commit(s, batches, n, st);
    return st;
}

int pl__pg_settle(pl__pg_store *s)
{
    (void)s;
    return PL_OK;
}

void pl__pg_maintain(pl__pg_store *s) { (void)s; }

/* ---- read-modify-write of a state ---------------------------------------- */

typedef struct lock_ctx {
    pl__pg_store *s;
    PGconn *c;
    uint64_t num;
    pl__buf *state;
    pl__pg_ones o; /* pl__pg_put_batches()'s writes (pg_one.c) */
} lock_ctx;

/* The results of BEGIN and of the SELECT ... FOR UPDATE. */
static int lock_result(size_t i, PGresult *r, void *user)
{
    lock_ctx *x = user;
    if (PQresultStatus(r) != (i ? PGRES_TUPLES_OK : PGRES_COMMAND_OK))
        return pl__pg_err(x->s, x->c, r,
                          i ? "reading a run state"
                            : "beginning a transaction");
    if (!i)
        return PL_OK;
    if (PQntuples(r) == 0)
        return pl__err(PL_ECORRUPT, "run #%llu has no state record",
                       (unsigned long long)x->num);
    return pl__buf_append(x->state, PQgetvalue(r, 0, 0),
                          (size_t)PQgetlength(r, 0, 0));
}

/* BEGIN and the SELECT ... FOR UPDATE in one pipeline. */
int pl__pg_lock_state(pl__pg_store *s, PGconn *c, uint64_t num, pl__buf *state)
{
    uint8_t key[8];
    pl__put_be64(key, num);
    const char *vals[1] = {(const char *)key};
    int lens[1] = {8}, fmts[1] = {1};
    if (PQenterPipelineMode(c) != 1)
        return pl__pg_err(s, c, NULL, "entering pipeline mode");
    int st = pl__pg_send(s, c, Q_BEGIN, 0, NULL, NULL, NULL,
                         "beginning a transaction");
    if (!st)
        st = pl__pg_send(s, c, Q_STATE_LOCK, 1, vals, lens, fmts,
                         "reading a run state");
    lock_ctx x = {s, c, num, state, {0}};
    return st ? st
              : pl__pg_pipeline_finish(s, c, 2, lock_result, &x,
                                       "reading a run state");
}

/* The results of the writes and of COMMIT: a step there already, an
 * inbox record consumed or a fence that failed is PL_EBUSY. */
static int put_result(size_t i, PGresult *r, void *user)
{
    lock_ctx *x = user;
    if (i < x->o.nprep)
        return pl__pg_ones_prepared_result(x->s, x->c, &x->o, i, r);
    ExecStatusType es = PQresultStatus(r);
    if (es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK)
        return PL_OK;
    if (pl__pg_unique_violation(r))
        return pl__pg_busy();
    int st = pl__pg_time_failed(r);
    return st ? st : pl__pg_lease_failed(x->s, x->c, r);
}

int pl__pg_put_batches(pl__pg_store *s, PGconn *c, pl__batch *const *batches,
                       size_t n, uint64_t drop_timer)
{
    size_t nq = 0;
    lock_ctx x = {s, c, n ? batches[0]->run : 0, NULL, {0}};
    int st = pl__pg_ones_plan(&x.o, c, batches, n);
    if (st)
        return st;
    if (PQenterPipelineMode(c) != 1)
        st = pl__pg_err(s, c, NULL, "entering pipeline mode");
    if (!st)
        st = pl__pg_ones_prepare(s, c, &x.o);
    if (!st)
        st = writes_send(s, c, batches, n, &x.o, &nq);
    if (!st && x.o.group) /* Q_WRITE marks no claim's lease (pg_one.c) */
        st = pl__pg_marks_send(s, c, batches, n, &nq);
    char run[24];
    snprintf(run, sizeof run, "%llu", (unsigned long long)drop_timer);
    const char *vals[1] = {run};
    if (!st && drop_timer &&
        !(st = pl__pg_send(s, c, T_DROP, 1, vals, NULL, NULL,
                           "dropping a timer")))
        nq++;
    if (!st)
        st = pl__pg_send(s, c, Q_COMMIT, 0, NULL, NULL, NULL, "committing");
    if (!st)
        st = pl__pg_pipeline_finish(s, c, x.o.nprep + nq + 1, put_result, &x,
                                    "writing a run state");
    return st;
}

/* Write the new state and @p extra's steps, and COMMIT, in one round trip
 * (pg_int.h). */
int pl__pg_put_state(pl__pg_store *s, PGconn *c, uint64_t num,
                     const pl__buf *state, const pl__kvs *extra)
{
    pl__batch b = {0};
    b.run = num;
    b.steps = *extra; /* borrowed: not freed here */
    b.state = *state;
    pl__batch *one[1] = {&b};
    return pl__pg_put_batches(s, c, one, 1, 0);
}

PGconn *pl__pg_rollback(pl__pg_store *s, PGconn *c)
{
    /* a failure leaves the transaction open, or aborted: roll it back
     * (unless the connection is left in pipeline mode: dropped, it rolls
     * back by itself) */
    if (!pl__pg_lost(c) && PQpipelineStatus(c) == PQ_PIPELINE_OFF &&
        PQtransactionStatus(c) != PQTRANS_IDLE) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        if (pl__pg_command(s, c, "ROLLBACK", "rolling back")) {
            PQfinish(c);
            c = NULL;
        }
        pl__errmsg_restore(saved);
    }
    return c;
}

int pl__pg_state_update(pl__pg_store *s, uint64_t num, pl__state_fn fn,
                        void *user)
{
    if (s->read_only)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    pl__buf state = {0};
    pl__kvs extra = {0};
    st = pl__pg_lock_state(s, c, num, &state);
    if (!st)
        st = fn(&state, &extra, user);
    if (!st)
        st = pl__pg_put_state(s, c, num, &state, &extra);
    if (st)
        c = pl__pg_rollback(s, c);
    pl__pg_conn_put(s, c);
    pl__buf_free(&state);
    pl__kvs_free(&extra);
    return st;
}

/* ---- deleting runs ------------------------------------------------------- */

/* The delete's arrays: Q_DELETE's parameters, in order. */
enum { D_ID, D_NUM, D_STATE, D_TOMB, D_EXPIRES, D_N };

typedef struct delete_ctx {
    pl__pg_store *s;
    PGconn *c;
    pl__delete *d;
    size_t n;
} delete_ctx;

/* Q_DELETE's rows: the ids it deleted.  The others were changed, taken or
 * gone since they were read. */
static int delete_result(size_t i, PGresult *r, void *user)
{
    (void)i;
    delete_ctx *x = user;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return pl__pg_err(x->s, x->c, r, "deleting runs");
    for (size_t j = 0; j < x->n; j++)
        x->d[j].rc = PL_EBUSY;
    for (int row = 0; row < PQntuples(r); row++) {
        size_t len = (size_t)PQgetlength(r, row, 0);
        const char *id = PQgetvalue(r, row, 0);
        for (size_t j = 0; j < x->n; j++)
            if (strlen(x->d[j].id) == len && !memcmp(x->d[j].id, id, len))
                x->d[j].rc = PL_OK;
    }
    return PL_OK;
}

/*
 * Delete runs: one statement (Q_DELETE) with the runs as arrays, in one
 * round trip, so that each run is whole or gone.  A tombstone's expiry is
 * read from its record for the tombs table's `expires` column.
 */
int pl__pg_delete(pl__pg_store *s, pl__delete *d, size_t n)
{
    if (s->read_only)
        return pl__pg_read_only(s);
    static const uint32_t oids[D_N] = {OID_BYTEA, OID_INT8, OID_BYTEA,
                                       OID_BYTEA, OID_INT8};
    arr a[D_N] = {0};
    int st = PL_OK;
    for (int i = 0; !st && i < D_N; i++)
        st = arr_begin(&a[i], oids[i]);
    for (size_t j = 0; !st && j < n; j++) {
        int64_t expires = 0;
        if (d[j].tomb) {
            pl__tomb t;
            st = pl__tomb_decode(&t, d[j].id, d[j].tomb->data, d[j].tomb->len);
            expires = t.expires_us;
        }
        if (!st)
            st = arr_add(&a[D_ID], d[j].id, strlen(d[j].id));
        if (!st)
            st = arr_add_i64(&a[D_NUM], d[j].num);
        if (!st)
            st = arr_add(&a[D_STATE], d[j].state, d[j].state_len);
        if (!st)
            st = d[j].tomb
                     ? arr_add(&a[D_TOMB], d[j].tomb->data, d[j].tomb->len)
                     : arr_add(&a[D_TOMB], "", 0);
        if (!st)
            st = arr_add_i64(&a[D_EXPIRES], (uint64_t)expires);
    }
    PGconn *c = NULL;
    if (!st)
        st = pl__pg_conn_get(s, &c);
    if (!st) {
        const char *vals[D_N];
        int lens[D_N], fmts[D_N];
        for (int i = 0; i < D_N; i++) {
            arr_end(&a[i]);
            vals[i] = (const char *)a[i].b.data;
            lens[i] = (int)a[i].b.len;
            fmts[i] = 1;
        }
        delete_ctx x = {s, c, d, n};
        if (PQenterPipelineMode(c) != 1)
            st = pl__pg_err(s, c, NULL, "entering pipeline mode");
        if (!st)
            st = pl__pg_send(s, c, Q_DELETE, D_N, vals, lens, fmts,
                             "sending a delete");
        if (!st)
            st = pl__pg_pipeline_finish(s, c, 1, delete_result, &x,
                                        "deleting runs");
        pl__pg_conn_put(s, c);
    }
    for (int i = 0; i < D_N; i++)
        pl__buf_free(&a[i].b);
    return st;
}
