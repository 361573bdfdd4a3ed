/*
 * support_pg_store.h -- what test_pg.c, test_pg_plans.c and test_pg_fork.c
 * share (and test_pg_engine.c, test_pg_pairs.c, test_pg_damage.c): a
 * store opened, a statement of the test's own, a step's key, the steps a
 * run has, the store's counts, a run made with a lease or queued.
 */
#ifndef PL_SUPPORT_PG_STORE_H
#define PL_SUPPORT_PG_STORE_H

#include "support.h"

#include "pg_store.h"

#include <libpq-fe.h>

/* Store @p schema on the test server, open (pl__pg_close() it). */
static inline pl__pg_store *pg_store(const char *schema)
{
    char *uri = t_pg_store_uri(schema);
    pl__pg_store *s = NULL;
    cr_assert_eq(pl__pg_open(&s, uri, NULL), PL_OK, "%s", pl_errmsg());
    free(uri);
    return s;
}

/* Run @p sql behind the store's back, on a connection of its own
 * (t_pg_admin()); the test fails on an error. */
static inline void pg_admin_exec(const char *sql)
{
    PGconn *c = t_pg_admin();
    PGresult *r = PQexec(c, sql);
    ExecStatusType es = PQresultStatus(r);
    cr_assert(es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK, "%s: %s", sql,
              PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

/* Step @p seq of @p run's root invocation: its key. */
static inline void step_key(uint8_t key[12], uint64_t run, uint32_t seq)
{
    pl__put_be64(key, run);
    pl__put_be32(key + 8, seq);
}

/* Steps @p from and @p from + 1 of @p run's root invocation into @p w,
 * each valued with its key: a call's pair. */
static inline void two_steps(pl__batch *w, uint64_t run, uint32_t from)
{
    uint8_t key[12];
    for (uint32_t i = from; i < from + 2; i++) {
        step_key(key, run, i);
        cr_assert_eq(pl__kvs_add(&w->steps, key, 12, key, 12), PL_OK);
    }
}

static inline int count_step(const uint8_t *key, size_t klen,
                             const uint8_t *val, size_t vlen, void *user)
{
    (void)key;
    (void)klen;
    (void)val;
    (void)vlen;
    ++*(int *)user;
    return PL_OK;
}

/* The steps @p run has in store @p s. */
static inline size_t steps_of(pl__pg_store *s, uint64_t run)
{
    int n = 0;
    cr_assert_eq(pl__pg_each_step(s, run, count_step, &n), PL_OK, "%s",
                 pl_errmsg());
    return (size_t)n;
}

/* The store's counts of round trips and statements, now. */
static inline pl__pg_counts counts(void)
{
    pl__pg_counts c;
    pl__pg_counts_get(&c);
    return c;
}

/* A run "id" of store @p s with concurrency key @p key (limit 1; NULL:
 * none): leased to @p owner (generation 1, for 600 s), or queued ("": a
 * lease nobody holds). */
static inline uint64_t made_run(pl__pg_store *s, const char *id,
                                const char *owner, const char *key)
{
    pl__buf info = {0};
    cr_assert_eq(pl__buf_append(&info, "info", 4), PL_OK);
    pl__batch a = {0};
    a.create_id = id;
    a.create_info = &info;
    a.lease_owner = owner;
    a.lease_us = 600 * 1000000LL;
    a.flow_key = key;
    a.flow_limit = key ? 1 : 0;
    cr_assert_eq(pl__buf_append(&a.state, "s0", 2), PL_OK);
    pl__batch *one[1] = {&a};
    cr_assert_eq(pl__pg_commit(s, one, 1, false), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(a.rc, PL_OK);
    pl__batch_free(&a);
    pl__buf_free(&info);
    return a.run;
}

/* A leased run "id" of store @p s, its lease's generation 1, with
 * concurrency key @p key (limit 1; NULL: none). */
static inline uint64_t leased_keyed_run(pl__pg_store *s, const char *id,
                                        const char *key)
{
    return made_run(s, id, "w1", key);
}

/* A leased run "id" of store @p s, its lease's generation 1. */
static inline uint64_t leased_run(pl__pg_store *s, const char *id)
{
    return leased_keyed_run(s, id, NULL);
}

#endif
