/*
 * pg_commit.c -- writing to the store on PostgreSQL: a commit's batches
 * in one pipeline, and the read-modify-write of a run's state (COMMIT at
 * the top of pg_conn.c).
 */
#include "pg_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- commit -------------------------------------------------------------- */

/* What a statement sent in the pipeline was. */
typedef enum { SENT_CREATE, SENT_STEPS, SENT_STATE, SENT_LEASE } sent_kind;

typedef struct sent {
    sent_kind kind;
    pl__batch *batch;
} sent;

typedef struct params {
    const char **vals;
    int *lens, *fmts;
    size_t cap;
} params;

static int params_room(params *p, size_t n)
{
    if (n <= p->cap)
        return PL_OK;
    const char **v = realloc(p->vals, n * sizeof *v);
    if (v)
        p->vals = v;
    int *l = v ? realloc(p->lens, n * sizeof *l) : NULL;
    if (l)
        p->lens = l;
    int *f = l ? realloc(p->fmts, n * sizeof *f) : NULL;
    if (!f)
        return pl__err(PL_ENOMEM, "out of memory");
    p->fmts = f;
    for (size_t i = p->cap; i < n; i++)
        f[i] = 1;
    p->cap = n;
    return PL_OK;
}

static void params_free(params *p)
{
    free(p->vals);
    free(p->lens);
    free(p->fmts);
}

/*
 * Build the multi-row INSERT of steps [from, from + n) of @p l into @p sql
 * and @p p.  Called in pipeline mode (send) or not.
 */
static int steps_insert(const pl__pg_store *s, const pl__kvs *l, size_t from,
                        size_t n, pl__buf *sql, params *p)
{
    pl__buf_reset(sql);
    int st = params_room(p, 2 * n);
    if (!st)
        st = pl__buf_append(sql, s->steps_sql, strlen(s->steps_sql));
    for (size_t i = 0; !st && i < n; i++) {
        char row[48];
        int len = snprintf(row, sizeof row, "%s($%zu::bytea,$%zu::bytea)",
                           i ? "," : " ", 2 * i + 1, 2 * i + 2);
        st = pl__buf_append(sql, row, (size_t)len);
        const pl__kv *e = &l->e[from + i];
        p->vals[2 * i] = (const char *)pl__kvs_key(l, from + i);
        p->lens[2 * i] = (int)e->klen;
        p->vals[2 * i + 1] = (const char *)pl__kvs_val(l, from + i);
        p->lens[2 * i + 1] = (int)e->vlen;
    }
    return st ? st : pl__buf_append(sql, "", 1);
}

/* Send the statements of the commit; *nsent is how many were sent. */
static int commit_send(pl__pg_store *s, PGconn *c, pl__batch *const *batches,
                       size_t n, sent **out, size_t *nsent)
{
    sent *q = NULL;
    size_t nq = 0, cap = 0;
    pl__buf sql = {0};
    params p = {0};
    int st = PL_OK;
    for (size_t b = 0; !st && b < n; b++) {
        pl__batch *bt = batches[b];
        bt->rc = PL_OK;
        size_t want = nq + 3 + (bt->steps.n + ROWS_MAX - 1) / ROWS_MAX;
        sent *g = pl__grow(q, &cap, want, sizeof *q, 16);
        if (!g) {
            st = pl__err(PL_ENOMEM, "out of memory");
            break;
        }
        q = g;
        if (bt->create_id) {
            if (bt->steps.n) {
                st = pl__err(PL_EINVAL,
                             "store '%s': a batch that creates a "
                             "run carries no steps",
                             s->path);
                break;
            }
            const char *vals[3] = {bt->create_id,
                                   (const char *)bt->create_info->data,
                                   (const char *)bt->state.data};
            int lens[3] = {(int)strlen(bt->create_id),
                           (int)bt->create_info->len, (int)bt->state.len};
            int fmts[3] = {1, 1, 1};
            if (!PQsendQueryParams(c, s->q[Q_CREATE], 3, NULL, vals, lens, fmts,
                                   1)) {
                st = pl__pg_err(s, c, NULL, "sending a run's creation");
                break;
            }
            q[nq++] = (sent){SENT_CREATE, bt};
        }
        bool leased;
        if ((st = pl__pg_lease_send(s, c, bt, &leased)))
            break;
        if (leased)
            q[nq++] = (sent){SENT_LEASE, bt};
        if (bt->create_id)
            continue;
        for (size_t i = 0; !st && i < bt->steps.n; i += ROWS_MAX) {
            size_t k = bt->steps.n - i < ROWS_MAX ? bt->steps.n - i : ROWS_MAX;
            if ((st = steps_insert(s, &bt->steps, i, k, &sql, &p)))
                break;
            if (!PQsendQueryParams(c, (const char *)sql.data, (int)(2 * k),
                                   NULL, p.vals, p.lens, p.fmts, 1))
                st = pl__pg_err(s, c, NULL, "sending steps");
            else
                q[nq++] = (sent){SENT_STEPS, bt};
        }
        if (!st && bt->state.len) {
            uint8_t run[8];
            pl__put_be64(run, bt->run);
            const char *vals[2] = {(const char *)run,
                                   (const char *)bt->state.data};
            int lens[2] = {8, (int)bt->state.len}, fmts[2] = {1, 1};
            if (!PQsendQueryParams(c, s->q[Q_STATE_PUT], 2, NULL, vals, lens,
                                   fmts, 1))
                st = pl__pg_err(s, c, NULL, "sending a run state");
            else
                q[nq++] = (sent){SENT_STATE, bt};
        }
    }
    pl__buf_free(&sql);
    params_free(&p);
    *out = q;
    *nsent = nq;
    return st;
}

/* Read the results of the commit's statements and of its Sync. */
static int commit_results(pl__pg_store *s, PGconn *c, const sent *q, size_t nq)
{
    int st = PL_OK;
    for (size_t i = 0; i < nq; i++) {
        PGresult *r = PQgetResult(c);
        if (!r)
            return st ? st : pl__pg_err(s, c, NULL, "committing");
        ExecStatusType es = PQresultStatus(r);
        if (es == PGRES_TUPLES_OK && q[i].kind == SENT_CREATE) {
            pl__batch *bt = q[i].batch;
            if (PQntuples(r) == 0)
                bt->rc = PL_EEXIST;
            else if (PQgetlength(r, 0, 0) == 8)
                bt->run = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
            else if (!st)
                st = pl__err(PL_ECORRUPT,
                             "store '%s': a run number is "
                             "malformed",
                             s->path);
        } else if (es != PGRES_TUPLES_OK && es != PGRES_COMMAND_OK &&
                   es != PGRES_PIPELINE_ABORTED && !st) {
            st = q[i].kind == SENT_STEPS && pl__pg_unique_violation(r)
                     ? pl__pg_busy()
                 : q[i].kind == SENT_LEASE ? pl__pg_lease_failed(s, c, r)
                                           : pl__pg_err(s, c, r, "committing");
        }
        PQclear(r);
        if (pl__pg_lost(c))
            return st ? st : pl__pg_err(s, c, NULL, "committing");
        if ((r = PQgetResult(c))) { /* the NULL that ends each statement's */
            PQclear(r);
            return st ? st : pl__pg_err(s, c, NULL, "committing: out of step");
        }
    }
    PGresult *r = PQgetResult(c);
    ExecStatusType es = PQresultStatus(r);
    PQclear(r);
    if (es != PGRES_PIPELINE_SYNC && !st)
        st = pl__pg_err(s, c, NULL, "committing");
    return st;
}

int pl__pg_commit(pl__pg_store *s, pl__batch *const *batches, size_t n,
                  bool journal)
{
    (void)journal; /* no journal: steps go to their place at once */
    if (s->read_only)
        return pl__pg_read_only(s);
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    sent *q = NULL;
    size_t nq = 0;
    if (PQenterPipelineMode(c) != 1) {
        st = pl__pg_err(s, c, NULL, "entering pipeline mode");
        goto done;
    }
    st = commit_send(s, c, batches, n, &q, &nq);
    /* the Sync ends the implicit transaction: commits it, or rolls back
     * everything after an error; after a failed send nothing is synced,
     * and the connection is dropped, which rolls it back too */
    if (!st && PQpipelineSync(c) != 1)
        st = pl__pg_err(s, c, NULL, "committing");
    if (!st)
        st = commit_results(s, c, q, nq);
    if (!pl__pg_lost(c) && PQpipelineStatus(c) != PQ_PIPELINE_OFF &&
        PQexitPipelineMode(c) != 1) {
        PQfinish(c); /* left in a state no other call can use */
        c = NULL;
    }
done:
    free(q);
    pl__pg_conn_put(s, c);
    return st;
}

int pl__pg_settle(pl__pg_store *s)
{
    (void)s;
    return PL_OK;
}

void pl__pg_maintain(pl__pg_store *s) { (void)s; }

/* The body of pl__pg_state_update(), inside its transaction. */
static int update_body(pl__pg_store *s, PGconn *c, uint64_t num,
                       pl__state_fn fn, void *user, pl__buf *state,
                       pl__kvs *extra)
{
    uint8_t key[8];
    pl__put_be64(key, num);
    const char *vals[2] = {(const char *)key, NULL};
    int lens[2] = {8, 0};
    PGresult *r = pl__pg_exec(c, s->q[Q_STATE_LOCK], 1, vals, lens);
    int st = PL_OK;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pl__pg_err(s, c, r, "reading a run state");
    else if (PQntuples(r) == 0)
        st = pl__err(PL_ECORRUPT, "run #%llu has no state record",
                     (unsigned long long)num);
    else
        st = pl__buf_append(state, PQgetvalue(r, 0, 0),
                            (size_t)PQgetlength(r, 0, 0));
    PQclear(r);
    if (st || (st = fn(state, extra, user)))
        return st;
    vals[1] = (const char *)state->data;
    lens[1] = (int)state->len;
    r = pl__pg_exec(c, s->q[Q_STATE_PUT], 2, vals, lens);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        st = pl__pg_err(s, c, r, "writing a run state");
    PQclear(r);
    pl__buf sql = {0};
    params p = {0};
    for (size_t i = 0; !st && i < extra->n; i += ROWS_MAX) {
        size_t k = extra->n - i < ROWS_MAX ? extra->n - i : ROWS_MAX;
        if ((st = steps_insert(s, extra, i, k, &sql, &p)))
            break;
        r = PQexecParams(c, (const char *)sql.data, (int)(2 * k), NULL, p.vals,
                         p.lens, p.fmts, 1);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            st = pl__pg_unique_violation(r)
                     ? pl__pg_busy()
                     : pl__pg_err(s, c, r, "writing steps");
        PQclear(r);
    }
    pl__buf_free(&sql);
    params_free(&p);
    return st;
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
    st = pl__pg_command(s, c, "BEGIN", "beginning a transaction");
    if (!st)
        st = update_body(s, c, num, fn, user, &state, &extra);
    if (!st)
        st = pl__pg_command(s, c, "COMMIT", "committing");
    else if (!pl__pg_lost(c)) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        if (pl__pg_command(s, c, "ROLLBACK", "rolling back")) {
            PQfinish(c);
            c = NULL;
        }
        pl__errmsg_restore(saved);
    }
    pl__pg_conn_put(s, c);
    pl__buf_free(&state);
    pl__kvs_free(&extra);
    return st;
}
