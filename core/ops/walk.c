/*
 * walk.c -- a run's steps in tree order: every step record read in key
 * order, a chunk at a time (pl__scan_run()), and handed out as steps
 * (pl_run_walk(), from its start or from a given step).  A chunk is at
 * most CHUNK records and CHUNK_BYTES bytes (one larger record alone), so a
 * walk holds about one chunk, whatever the size of the run's payloads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "path.h"

#define CHUNK 256
#define CHUNK_BYTES ((size_t)1 << 20)

int pl__scan_run(pl_engine *e, const char *run_id, uint64_t num,
                 const uint8_t *from, size_t from_len, pl__rec_fn fn,
                 void *user)
{
    pl__kvs page = {0};
    uint8_t after[PL__KEY_MAX];
    size_t after_len = from && from_len <= sizeof after ? from_len : 0;
    if (after_len)
        memcpy(after, from, after_len);
    /* a walk from a step is often stopped soon after: start small */
    size_t chunk = after_len ? 16 : CHUNK;
    int st;
    for (;;) {
        /* every key the store hands out sorts after the one before it and
         * after `after`, or it fails: no step is handed out twice */
        st = pl__store_scan(e->store, num, after_len ? after : NULL, after_len,
                            chunk, CHUNK_BYTES, &page);
        chunk = CHUNK;
        if (st) {
            st = pl__err_run(st, run_id);
            break;
        }
        if (!page.n)
            break;
        for (size_t i = 0; !st && i < page.n; i++)
            st = fn(pl__kvs_key(&page, i), page.e[i].klen,
                    pl__kvs_val(&page, i), page.e[i].vlen, user);
        if (st)
            break;
        const pl__kv *last = &page.e[page.n - 1];
        if (last->klen > sizeof after) {
            st = pl__err(PL_ECORRUPT, "a step key is too long");
            break;
        }
        memcpy(after, pl__kvs_key(&page, page.n - 1), last->klen);
        after_len = last->klen;
    }
    pl__kvs_free(&page);
    return st;
}

typedef struct walk_ctx {
    pl_engine *e;
    const char *id;
    uint64_t num;
    pl_step_visit_fn visit;
    void *user;
    pl__hasher *hasher; /* for mirrors and folds, made when one is met */
    bool have_genesis;
    uint8_t genesis[PL_HASH_LEN];
    pl__kvs hold;
    const uint8_t *from; /* the first key visited, or NULL */
    size_t from_len;
    /* the ledgers on the path to the last step visited, of depths below
     * `open`: that of depth d is the ledger of comps[0..d-1], and if
     * seen[d], its next step is next[d]; a step that is not that one
     * means steps are missing */
    unsigned open;
    uint32_t comps[PL_MAX_DEPTH];
    uint32_t next[PL_MAX_DEPTH + 1];
    bool seen[PL_MAX_DEPTH + 1];
    /* a walk from a step: the ledger of that step, which the walk, and
     * the ledgers above it, enter part way rather than at step 0 */
    unsigned from_depth;
    uint32_t from_comps[PL_MAX_DEPTH];
} walk_ctx;

/* Whether step @p seq of ledger @p path (@p comps, @p depth) is the one
 * that comes next in its ledger: no step of a ledger is passed over in
 * silence (pl_run_ledger() and pl_run_verify() refuse a gap too). */
static int walk_gapless(walk_ctx *w, const uint32_t *comps, unsigned depth,
                        uint32_t seq, const char *path)
{
    /* the ledgers still on the path: those the two steps share */
    unsigned keep = 0;
    if (w->open) {
        unsigned lim = depth < w->open - 1 ? depth : w->open - 1;
        while (keep < lim && w->comps[keep] == comps[keep])
            keep++;
        keep++;
    }
    for (unsigned d = keep; d < depth; d++)
        w->seen[d] = false; /* entered below a step not visited */
    bool same = depth < keep && w->seen[depth];
    /* a ledger met first: from step 0, but for those a walk from a step
     * enters part way */
    size_t n = depth * sizeof *comps;
    bool part = w->from && depth <= w->from_depth &&
                memcmp(w->from_comps, comps, n) == 0;
    if (same ? seq != w->next[depth] : seq != 0 && !part)
        return pl__err(PL_ECORRUPT,
                       "run '%s': ledger %s is missing step %u (found step "
                       "%u next)",
                       w->id, path, same ? w->next[depth] : 0, seq);
    memcpy(w->comps, comps, n);
    w->next[depth] = seq + 1;
    w->seen[depth] = true;
    w->open = depth + 1;
    return PL_OK;
}

/* Key order: bytes, then length (a ledger's prefix before its steps). */
static int key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static int walk_rec(const uint8_t *key, size_t klen, const uint8_t *val,
                    size_t vlen, void *user)
{
    walk_ctx *w = user;
    uint64_t run;
    uint32_t comps[PL_MAX_DEPTH], seq;
    unsigned depth;
    if (!pl__key_parse(key, klen, &run, comps, &depth, &seq))
        return pl__err(PL_ECORRUPT, "run '%s' has a malformed step key", w->id);
    char path[PL__PATH_MAX];
    pl__path_format(path, comps, depth);
    int st = walk_gapless(w, comps, depth, seq, path);
    if (st)
        return st;
    pl__rec rec;
    st = pl__rec_decode_lazy(&rec, val, vlen);
    if (!st && rec.seq != seq)
        st = pl__err(PL_ECORRUPT, "the record says step %u", rec.seq);
    if (!st && rec.mirrored)
        st = pl__read_mirror(w->e, &w->hasher, w->num, comps, depth, key, klen,
                             val, vlen, &rec, &w->hold);
    if (st)
        return pl__err(st, "run '%s', step %s:%u: %s", w->id, path, seq,
                       pl_errmsg());
    uint8_t fkey[PL__KEY_MAX];
    size_t fklen = klen - 4 + 8; /* the folded callee's first step's key */
    if (rec.has_link && rec.link_folded && fklen <= sizeof fkey) {
        memcpy(fkey, key, klen - 4);
        pl__put_be32(fkey + klen - 4, rec.link_seq);
        pl__put_be32(fkey + klen, 0);
    }
    if (rec.has_link && rec.link_folded &&
        (!w->from || fklen > sizeof fkey ||
         key_cmp(fkey, fklen, w->from, w->from_len) >= 0)) {
        /* the callee's ledger, folded into this result, comes first (but
         * for a walk that starts after it) */
        char callee[PL__PATH_MAX + 16];
        snprintf(callee, sizeof callee, "%s.%u", path, rec.link_seq);
        pl_step *one = NULL;
        if (!w->have_genesis &&
            !(st = pl__genesis_of(&w->hasher, w->id, w->genesis)))
            w->have_genesis = true;
        if (!st)
            st = pl__step_folded(&rec, w->genesis, callee, &one);
        if (st)
            return pl__err(st, "run '%s', step %s:0: %s", w->id, callee,
                           pl_errmsg());
        st = w->visit(one, w->user);
        pl_step_free(one);
        if (st)
            return st;
    }
    pl_step *s;
    if ((st = pl__step_from_rec(&rec, path, &s)))
        return pl__err(st, "run '%s', step %s:%u: %s", w->id, path, seq,
                       pl_errmsg());
    if ((!w->hasher && (st = pl__hasher_new(&w->hasher))) ||
        (st = pl__step_hash(w->hasher, key, klen, val, vlen, s->hash))) {
        pl_step_free(s);
        return st;
    }
    s->has_hash = true;
    st = w->visit(s, w->user);
    pl_step_free(s);
    return st;
}

int pl_run_walk(pl_engine *e, const char *run_id, pl_step_visit_fn visit,
                void *user)
{
    return pl_run_walk_from(e, run_id, NULL, visit, user);
}

/*
 * The key of step @p step_id ("path:seq") of run @p num in @p key, and in
 * @p after the greatest key that sorts before it (length 0: none).
 */
static int from_keys(uint64_t num, const char *step_id, uint8_t *key,
                     size_t *klen, uint8_t *after, size_t *after_len)
{
    const char *colon = strrchr(step_id, ':');
    char path[PL__PATH_MAX];
    uint32_t comps[PL_MAX_DEPTH];
    unsigned depth;
    char *end;
    errno = 0;
    unsigned long seq = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || (size_t)(colon - step_id) >= sizeof path || colon[1] < '0' ||
        colon[1] > '9' || *end || errno || seq > UINT32_MAX - 1)
        return pl__err(PL_EINVAL,
                       "bad step id '%s' (expected \"0:4\", "
                       "\"0.3:0\", ...)",
                       step_id);
    memcpy(path, step_id, (size_t)(colon - step_id));
    path[colon - step_id] = '\0';
    int st = pl__path_parse(path, comps, &depth);
    if (st)
        return st;
    size_t plen = pl__ledger_prefix(key, num, comps, depth);
    pl__put_be32(key + plen, (uint32_t)seq);
    *klen = plen + 4;
    *after_len = 0;
    if (seq > 0) {
        /* step seq-1 and every key of its callee's subtree (path
         * components never reach UINT32_MAX) */
        memcpy(after, key, plen);
        pl__put_be32(after + plen, (uint32_t)seq - 1);
        memset(after + plen + 4, 0xff, PL__KEY_MAX - plen - 4);
        *after_len = PL__KEY_MAX;
    } else if (depth > 0) {
        /* the call that made this ledger */
        memcpy(after, key, plen);
        *after_len = plen;
    }
    return PL_OK;
}

int pl_run_walk_from(pl_engine *e, const char *run_id, const char *from_step,
                     pl_step_visit_fn visit, void *user)
{
    if (!e || !visit || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_walk: engine, valid run id and "
                                  "visitor are required");
    uint64_t num;
    uint8_t key[PL__KEY_MAX], after[PL__KEY_MAX];
    size_t klen = 0, after_len = 0;
    int st = from_step ? from_keys(0, from_step, key, &klen, after, &after_len)
                       : PL_OK;
    if (!st)
        st = pl__run_find_checked(e, run_id, &num);
    if (st)
        return st;
    walk_ctx w = {
        .e = e, .id = run_id, .num = num, .visit = visit, .user = user};
    if (from_step) {
        pl__put_be64(key, num);
        pl__put_be64(after, num);
        w.from = key;
        w.from_len = klen;
        uint64_t run;
        uint32_t seq;
        if (!pl__key_parse(key, klen, &run, w.from_comps, &w.from_depth, &seq))
            return pl__err(PL_EINVAL, "bad step id '%s'", from_step);
    }
    st = pl__scan_run(e, run_id, num, after, after_len, walk_rec, &w);
    pl__kvs_free(&w.hold);
    pl__hasher_free(w.hasher);
    return st;
}
