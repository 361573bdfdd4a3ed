/*
 * support_pgflip.h -- the columns a bit-flip sweep of the PostgreSQL store
 * damages, found in the server's catalogue (test_pg_stepflip.c,
 * test_pg_queueflip.c); support_pg.c.
 */
#ifndef PL_SUPPORT_PGFLIP_H
#define PL_SUPPORT_PGFLIP_H

#include "support.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A table's columns: those flipped (bytea, bigint) and those of its
 * primary key, each with its type as SQL writes it. */
#define T_PG_COLS_MAX 16
typedef struct t_pg_table {
    const char *name;
    int n, n_flip, n_key;
    char col[T_PG_COLS_MAX][64], type[T_PG_COLS_MAX][32];
    int flip[T_PG_COLS_MAX], key[T_PG_COLS_MAX]; /* indexes into col[] */
} t_pg_table;

/* Table @p name of @p schema, from the catalogue: false if there is none. */
bool t_pg_find_table(PGconn *c, const char *schema, const char *name,
                     t_pg_table *t);
/* Every row of table @p t in @p schema, its columns in binary. */
PGresult *t_pg_rows_of(PGconn *c, const char *schema, const t_pg_table *t);
/* Set column @p col of the row of @p t in @p schema whose key columns hold
 * @p keyv (binary values, @p keylen long) to @p val: 1 done, 0 refused
 * by the table (a unique key taken). */
int t_pg_set_col(PGconn *c, const char *schema, const t_pg_table *t, int col,
                 const uint8_t *val, size_t len, const char *const *keyv,
                 const int *keylen);

#endif
