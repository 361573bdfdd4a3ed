/*
 * kvs.c -- the containers the store interface passes around: lists of keys
 * and values, back to back in one buffer, and batches of them.  Nothing
 * here depends on the backend.
 */
#include "store.h"

#include <stdlib.h>

int pl__kvs_begin(pl__kvs *l, const uint8_t *key, size_t klen)
{
    pl__kv *grown = pl__grow(l->e, &l->cap, l->n, sizeof *grown, 16);
    if (!grown)
        return pl__err(PL_ENOMEM, "out of memory growing a batch");
    l->e = grown;
    pl__kv *e = &l->e[l->n];
    e->koff = l->data.len;
    e->klen = klen;
    int rc = pl__buf_append(&l->data, key, klen);
    if (rc)
        return rc;
    e->voff = l->data.len;
    e->vlen = 0;
    return PL_OK;
}

void pl__kvs_end(pl__kvs *l)
{
    assert(l->n < l->cap); /* after a pl__kvs_begin() that succeeded */
    pl__kv *e = &l->e[l->n];
    assert(e->voff <= l->data.len);
    e->vlen = l->data.len - e->voff;
    l->n++;
}

void pl__kvs_cancel(pl__kvs *l)
{
    assert(l->n < l->cap && l->e[l->n].koff <= l->data.len);
    l->data.len = l->e[l->n].koff;
}

int pl__kvs_add(pl__kvs *l, const uint8_t *key, size_t klen, const uint8_t *val,
                size_t vlen)
{
    int rc = pl__kvs_begin(l, key, klen);
    if (!rc)
        rc = pl__buf_append(&l->data, val, vlen);
    if (rc) {
        if (l->n < l->cap)
            pl__kvs_cancel(l);
        return rc;
    }
    pl__kvs_end(l);
    return PL_OK;
}

void pl__kvs_reset(pl__kvs *l)
{
    l->data.len = 0;
    l->n = 0;
}

void pl__kvs_trim(pl__kvs *l, size_t keep)
{
    pl__kvs_reset(l);
    if (l->data.cap > keep)
        pl__buf_free(&l->data);
}

void pl__kvs_free(pl__kvs *l)
{
    pl__buf_free(&l->data);
    free(l->e);
    memset(l, 0, sizeof *l);
}

void pl__batch_free(pl__batch *b)
{
    pl__kvs_free(&b->steps);
    pl__buf_free(&b->state);
}
