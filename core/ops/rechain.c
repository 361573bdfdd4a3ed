/*
 * rechain.c -- a run's steps copied under another run number and id.
 *
 * A step's hash covers its key, whose first 8 bytes are the run's number
 * (ledger/codec/keys.c), and step 0 of every ledger links to the run's genesis
 * hash, which covers its id (ledger/codec/hash.c).  A step copied into another
 * run keeps its record but for two hashes:
 *
 *   | field                  | becomes                                   |
 *   |------------------------|-------------------------------------------|
 *   | 5, previous-step hash  | the hash of the new predecessor (its new  |
 *   |                        | key and record), or the new genesis hash  |
 *   | 7, an action_result's  | the new hash of its callee ledger's last  |
 *   | link (not a folded one)| step, or the new genesis hash if it has   |
 *   |                        | none                                      |
 *
 * Everything else (times, actors, payloads, code identities, folds and
 * mirrors) is the old run's, byte for byte.  Steps are re-chained in key
 * order, which is the run's tree in order, so a callee ledger is complete
 * before the step that links to it.
 *
 * Copied under the same number and id, an intact run comes out byte for
 * byte as it went in: that is how an import checks an export's chains.
 *
 * A run's inbox records (events and cancellations delivered, not yet
 * consumed) name their run in their checksums: copied to another run they
 * are decoded with the old id and encoded with the new one, under the
 * seqs they had (pl__rechain_inbox(): an import's, an upgrade's).
 */
#include "rechain.h"

#include <stdlib.h>

int pl__rechain_init(pl__rechain *w, const char *new_id)
{
    memset(w, 0, sizeof *w);
    int st = pl__hasher_new(&w->hasher);
    return st ? st : pl__genesis_hash(w->hasher, new_id, w->genesis);
}

void pl__rechain_free(pl__rechain *w)
{
    for (size_t i = 0; i < PL__ARRAY_LEN(w->lv); i++)
        free(w->lv[i].children);
    pl__hasher_free(w->hasher);
    memset(w, 0, sizeof *w);
}

bool pl__rechain_head(const pl__rechain *w, uint8_t out[PL_HASH_LEN])
{
    if (!w->lv[0].open)
        return false;
    memcpy(out, w->lv[0].prev, PL_HASH_LEN);
    return true;
}

static int close_level(pl__rechain *w, unsigned d)
{
    pl__rechain_level *l = &w->lv[d];
    if (!l->open)
        return PL_OK;
    l->open = false;
    if (d == 0)
        return PL_OK;
    pl__rechain_level *p = &w->lv[d - 1];
    pl__rechain_child *grown = pl__grow(p->children, &p->cap_children,
                                        p->n_children, sizeof *grown, 16);
    if (!grown)
        return pl__err(PL_ENOMEM, "out of memory");
    p->children = grown;
    pl__rechain_child *c = &p->children[p->n_children++];
    c->comp = l->comps[d - 1];
    memcpy(c->head, l->prev, PL_HASH_LEN);
    return PL_OK;
}

int pl__rechain_step(pl__rechain *w, uint64_t num, const uint8_t *key,
                     size_t klen, const uint8_t *val, size_t vlen, pl__kvs *out,
                     uint8_t hash[PL_HASH_LEN])
{
    uint64_t run;
    uint32_t comps[PL_MAX_DEPTH], seq;
    unsigned d;
    if (!pl__key_parse(key, klen, &run, comps, &d, &seq))
        return pl__err(PL_ECORRUPT, "a step key is malformed");
    pl__rec rec;
    int st = pl__rec_decode_lazy(&rec, val, vlen);
    if (st)
        return st;
    for (unsigned i = PL_MAX_DEPTH; i > d; i--) /* subtrees behind us */
        if ((st = close_level(w, i)))
            return st;
    pl__rechain_level *l = &w->lv[d];
    if (!l->open || memcmp(l->comps, comps, d * sizeof *comps) != 0) {
        if ((st = close_level(w, d)))
            return st;
        l->open = true;
        memcpy(l->comps, comps, d * sizeof *comps);
        memcpy(l->prev, w->genesis, PL_HASH_LEN);
        l->n_children = 0;
    }
    size_t prev_at = (size_t)(rec.prev_hash - val);
    size_t link_at = rec.link_hash ? (size_t)(rec.link_hash - val) : 0;
    if ((st = pl__kvs_begin(out, key, klen)))
        return st;
    uint8_t *nk = out->data.data + out->e[out->n].koff;
    pl__put_be64(nk, num);
    if (pl__buf_append(&out->data, val, vlen)) {
        pl__kvs_cancel(out);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    pl__kvs_end(out);
    size_t i = out->n - 1;
    uint8_t *nv = out->data.data + out->e[i].voff;
    memcpy(nv + prev_at, l->prev, PL_HASH_LEN);
    if (rec.link_hash) {
        const uint8_t *head = w->genesis; /* a callee that recorded nothing */
        for (size_t c = l->n_children; c-- > 0;) {
            if (l->children[c].comp == rec.link_seq) {
                head = l->children[c].head;
                break;
            }
        }
        memcpy(nv + link_at, head, PL_HASH_LEN);
    }
    w->steps += pl__rec_steps(nv, vlen);
    st = pl__step_hash(w->hasher, pl__kvs_key(out, i), klen, nv, vlen, l->prev);
    if (!st && hash)
        memcpy(hash, l->prev, PL_HASH_LEN);
    return st;
}

int pl__rechain_inbox(const pl__kvs *in, const char *from_id, const char *to_id,
                      uint64_t after, pl__kvs *out, uint64_t *last)
{
    int st = PL_OK;
    pl__buf b = {0};
    for (size_t i = 0; !st && i < in->n; i++) {
        const uint8_t *key = pl__kvs_key(in, i);
        if (!pl__inbox_seq_ok(key, in->e[i].klen)) {
            st = pl__err(PL_ECORRUPT, "run '%s': an inbox key is malformed",
                         from_id);
            break;
        }
        uint64_t seq = pl__get_be64(key);
        if (seq <= after)
            continue;
        pl__inbox_rec r = {0};
        pl__buf_reset(&b);
        st = pl__inbox_decode(&r, from_id, pl__kvs_val(in, i), in->e[i].vlen);
        if (!st)
            st = pl__inbox_encode(&b, to_id, &r);
        if (!st)
            st = pl__kvs_add(out, key, 8, b.data, b.len);
        pl__inbox_clear(&r);
        if (!st && last)
            *last = seq;
    }
    pl__buf_free(&b);
    return st;
}
