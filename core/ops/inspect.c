/*
 * inspect.c -- reading ledgers, and verifying them (a run's records:
 * runs.c).
 *
 * Everything here reads in bounded chunks (short read transactions, copied
 * out), so a visitor may take its time and even write to the store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "path.h"

#define CHUNK 256

/* ---- ledgers ------------------------------------------------------------------------- */

/*
 * The action_result answering the call that made ledger @p comps (depth
 * >= 1) and linking to its ledger: the first step after the call in the
 * caller's ledger but for the engine's suspensions and resumptions of an
 * in-doubt call.  *found is false when the caller's ledger ends first or
 * another step comes.  @p hold keeps the record; @p at names it
 * ("path:seq").
 */
static int find_answer(pl_engine *e, uint64_t num, const uint32_t *comps,
                       unsigned depth, pl__kvs *hold, pl__rec *answer,
                       bool *found, char at[PL__PATH_MAX + 16])
{
    uint8_t prefix[PL__PREFIX_MAX];
    size_t plen = pl__ledger_prefix(prefix, num, comps, depth - 1);
    uint32_t call = comps[depth - 1], seq = call;
    char cpath[PL__PATH_MAX];
    pl__path_format(cpath, comps, depth - 1);
    *found = false;
    pl__kvs_reset(hold);
    for (size_t i = 0;; i++, seq++) {
        if (i == hold->n) {
            pl__kvs_reset(hold);
            i = 0;
            /* one record at a time: it is nearly always the next one */
            int st = seq == UINT32_MAX ? PL_OK
                                       : pl__store_read(e->store, prefix, plen,
                                                        seq + 1, 1, 1, hold);
            if (st || !hold->n)
                return st;
        }
        snprintf(at, PL__PATH_MAX + 16, "%s:%u", cpath, seq + 1);
        int st = pl__rec_decode_lazy(answer, pl__kvs_val(hold, i),
                                     hold->e[i].vlen);
        if (st)
            return pl__err(st, "its caller's step %s: %s", at, pl_errmsg());
        if (answer->type != PL_STEP_SUSPEND && answer->type != PL_STEP_RESUME)
            break;
    }
    *found = answer->type == PL_STEP_ACTION_RESULT && answer->has_link &&
             answer->link_seq == call;
    return PL_OK;
}

/*
 * A mirror's payload is its caller's action_result's (see ledger/codec/record.c): find
 * it, check that it links to the mirror (key @p key, record @p val), and
 * lend its payload to @p rec.  @p hold keeps the caller's record.
 */
int pl__read_mirror(pl_engine *e, pl__hasher **hasher, uint64_t num,
                    const uint32_t *comps, unsigned depth, const uint8_t *key,
                    size_t klen, const uint8_t *val, size_t vlen, pl__rec *rec,
                    pl__kvs *hold)
{
    if (depth == 0)
        return pl__err(PL_ECORRUPT, "a root step holds its caller's result, "
                                    "but the root ledger has no caller");
    pl__rec caller;
    bool found;
    char at[PL__PATH_MAX + 16];
    int st = find_answer(e, num, comps, depth, hold, &caller, &found, at);
    if (st)
        return pl__err(st, "it holds its caller's result, but %s", pl_errmsg());
    if (!found)
        return pl__err(PL_ECORRUPT, "it holds its caller's result, but the "
                                    "caller records none");
    uint8_t h[PL_HASH_LEN];
    if ((!*hasher && (st = pl__hasher_new(hasher))) ||
        (st = pl__step_hash(*hasher, key, klen, val, vlen, h)))
        return st;
    if (caller.link_folded || memcmp(h, caller.link_hash, PL_HASH_LEN) != 0)
        return pl__err(PL_ECORRUPT,
                       "it holds its caller's result, but that "
                       "result, %s, does not link to it",
                       at);
    pl__rec_mirror(rec, &caller);
    if ((st = pl__rec_check(rec)))
        return pl__err(st, "its caller's result, %s: %s", at, pl_errmsg());
    return PL_OK;
}

/*
 * The one step of callee ledger @p callee_path that the folded
 * action_result @p answer stands for (see ledger/codec/record.c).
 */
int pl__step_folded(const pl__rec *answer, const uint8_t *genesis,
                    const char *callee_path, pl_step **out)
{
    pl__rec one = *answer;
    one.seq = 0;
    one.type = answer->link_type;
    one.prev_hash = genesis;
    one.code = NULL;
    one.code_len = 0;
    one.has_link = false;
    one.link_folded = false;
    return pl__step_from_rec(&one, callee_path, out);
}

/* The run's genesis hash, made with *hasher (created when NULL). */
int pl__genesis_of(pl__hasher **hasher, const char *run_id,
                   uint8_t out[PL_HASH_LEN])
{
    int st = *hasher ? PL_OK : pl__hasher_new(hasher);
    return st ? st : pl__genesis_hash(*hasher, run_id, out);
}

int pl_run_ledger(pl_steps **out, pl_engine *e, const char *run_id,
                  const char *path)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_run_ledger: out is NULL");
    *out = NULL;
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_ledger: an engine and a valid run "
                                  "id are required");
    uint32_t comps[PL_MAX_DEPTH];
    unsigned depth;
    uint64_t num;
    int st = pl__path_parse(path, comps, &depth);
    if (!st)
        st = pl__run_find_checked(e, run_id, &num);
    if (st)
        return st;
    char canon[PL__PATH_MAX];
    pl__path_format(canon, comps, depth);
    uint8_t prefix[PL__PREFIX_MAX];
    size_t plen = pl__ledger_prefix(prefix, num, comps, depth);
    pl_steps *l;
    if ((st = pl_steps_new(&l)))
        return st;
    pl__kvs recs = {0}, hold = {0};
    pl__hasher *hasher = NULL;
    uint32_t seq = 0;
    for (;;) {
        st = pl__store_read(e->store, prefix, plen, seq, CHUNK, (size_t)1 << 20,
                            &recs);
        if (st) {
            st = pl__err(st, "run '%s', ledger %s, from step %u: %s", run_id,
                         canon, seq, pl_errmsg());
            break;
        }
        if (!recs.n)
            break;
        for (size_t i = 0; !st && i < recs.n; i++, seq++) {
            pl__rec rec;
            st = pl__rec_decode_lazy(&rec, pl__kvs_val(&recs, i),
                                     recs.e[i].vlen);
            if (!st && rec.seq != seq)
                st = pl__err(PL_ECORRUPT, "the record says step %u", rec.seq);
            if (!st && rec.mirrored) {
                uint8_t key[PL__KEY_MAX];
                memcpy(key, prefix, plen);
                pl__put_be32(key + plen, seq);
                st = pl__read_mirror(e, &hasher, num, comps, depth, key,
                                     plen + 4, pl__kvs_val(&recs, i),
                                     recs.e[i].vlen, &rec, &hold);
            }
            if (st) {
                st = pl__err(st, "run '%s', step %s:%u: %s", run_id, canon, seq,
                             pl_errmsg());
                break;
            }
            pl_step *s = NULL;
            uint8_t key[PL__KEY_MAX];
            memcpy(key, prefix, plen);
            pl__put_be32(key + plen, seq);
            if ((st = pl__step_from_rec(&rec, canon, &s)) ||
                (!hasher && (st = pl__hasher_new(&hasher))) ||
                (st = pl__step_hash(hasher, key, plen + 4,
                                    pl__kvs_val(&recs, i), recs.e[i].vlen,
                                    s->hash)) ||
                (s->has_hash = true, st = pl__steps_push(l, s))) {
                pl_step_free(s);
                st = pl__err(st, "run '%s', step %s:%u: %s", run_id, canon, seq,
                             pl_errmsg());
            }
        }
        if (st)
            break;
    }
    if (!st && seq == 0 && depth > 0) {
        /* nothing stored: a folded callee's one step is in its caller's
         * result, if the call has one */
        pl__rec answer;
        bool found;
        char at[PL__PATH_MAX + 16];
        uint8_t genesis[PL_HASH_LEN];
        pl_step *s = NULL;
        st = find_answer(e, num, comps, depth, &hold, &answer, &found, at);
        if (!st && found && answer.link_folded &&
            !(st = pl__genesis_of(&hasher, run_id, genesis)) &&
            !(st = pl__step_folded(&answer, genesis, canon, &s)))
            st = pl__steps_push(l, s);
        if (st) {
            pl_step_free(s);
            st = pl__err(st, "run '%s', ledger %s: %s", run_id, canon,
                         pl_errmsg());
        }
    }
    pl__kvs_free(&recs);
    pl__kvs_free(&hold);
    pl__hasher_free(hasher);
    if (st) {
        pl_steps_free(l);
        return st;
    }
    *out = l;
    return PL_OK;
}

/* ---- verification ----------------------------------------------------------------------- */

/*
 * Steps come in key order, which is the run's tree in order: a ledger's
 * steps interleaved with the subtrees of its calls.  The walk keeps, for
 * each depth, the ledger open there: its path, next seq, the hash its next
 * step must store, and the type of its last step (a subtree must hang off
 * an action_call).
 */
typedef struct vchild {
    uint32_t comp;
    uint8_t head[PL_HASH_LEN];
} vchild;

typedef struct vlevel {
    bool open;
    uint32_t comps[PL_MAX_DEPTH];
    uint32_t next_seq;
    uint8_t prev[PL_HASH_LEN]; /* the hash of its last step: its head */
    pl_step_type last_type;
    bool last_mirror;   /* its last step is a mirror */
    bool owes;          /* a callee ended in a mirror: the result is due */
    uint32_t owed_call; /* for the call at this seq */
    vchild *children;   /* heads of its callee ledgers, closed so far */
    size_t n_children, cap_children;
} vlevel;

typedef struct verify_ctx {
    const char *id;
    pl__hasher *hasher;
    uint8_t genesis[PL_HASH_LEN];
    vlevel lv[PL_MAX_DEPTH + 1];
    uint64_t steps;
    const pl__run_state *rs;        /* its open ledgers' heads */
    bool anchored[PL__ANCHORS_MAX]; /* found in the walk */
} verify_ctx;

/*
 * The step @p seq of the ledger at @p comps (depth @p d), whose hash is
 * @p hash: where the run's state records it as an open ledger's head, the
 * hashes must agree.
 */
static int check_anchor(verify_ctx *v, const uint32_t *comps, unsigned d,
                        uint32_t seq, const uint8_t hash[PL_HASH_LEN],
                        const char *path)
{
    for (size_t i = 0; i < v->rs->n_open; i++) {
        const pl__anchor *a = &v->rs->open[i];
        if (a->seq != seq || a->depth != d ||
            memcmp(a->comps, comps, d * sizeof *comps) != 0)
            continue;
        v->anchored[i] = true;
        if (memcmp(a->hash, hash, PL_HASH_LEN) != 0)
            return pl__err(PL_ECORRUPT,
                           "run '%s', step %s:%u does not match the head "
                           "of its ledger that the run's state records "
                           "(the step changed)",
                           v->id, path, seq);
    }
    return PL_OK;
}

/* Every open ledger's head the run's state records was found. */
static int anchors_found(const verify_ctx *v)
{
    for (size_t i = 0; i < v->rs->n_open; i++) {
        if (v->anchored[i])
            continue;
        const pl__anchor *a = &v->rs->open[i];
        char path[PL__PATH_MAX];
        pl__path_format(path, a->comps, a->depth);
        return pl__err(PL_ECORRUPT,
                       "run '%s': its state records step %s:%u as the head "
                       "of an open ledger, but the ledger holds no such "
                       "step (it is missing or changed)",
                       v->id, path, a->seq);
    }
    return PL_OK;
}

/*
 * A callee ledger that ends in a mirror leaves its caller owing the result:
 * the first step after the call, but for the engine's suspensions and
 * resumptions of an in-doubt call, must be the action_result answering it.
 * @p rec is the caller's next step, NULL at the caller's end.
 */
static int mirror_answered(const verify_ctx *v, unsigned d, const pl__rec *rec)
{
    const vlevel *l = &v->lv[d];
    if (!l->owes)
        return PL_OK;
    if (rec && ((rec->type == PL_STEP_ACTION_RESULT && rec->has_link &&
                 rec->link_seq == l->owed_call) ||
                rec->type == PL_STEP_SUSPEND || rec->type == PL_STEP_RESUME))
        return PL_OK;
    char path[PL__PATH_MAX];
    pl__path_format(path, l->comps, d);
    return pl__err(PL_ECORRUPT,
                   "run '%s': the last step of ledger %s.%u "
                   "holds its caller's result, but the caller "
                   "records none",
                   v->id, path, l->owed_call);
}

/* A ledger is complete: hand its head to its caller's level. */
static int close_level(verify_ctx *v, unsigned d)
{
    vlevel *l = &v->lv[d];
    if (!l->open)
        return PL_OK;
    int st = mirror_answered(v, d, NULL);
    if (st)
        return st;
    l->open = false;
    if (d == 0 || !v->lv[d - 1].open)
        return PL_OK;
    vlevel *p = &v->lv[d - 1];
    vchild *grown = pl__grow(p->children, &p->cap_children, p->n_children,
                             sizeof *grown, 16);
    if (!grown)
        return pl__err(PL_ENOMEM, "out of memory");
    p->children = grown;
    vchild *c = &p->children[p->n_children++];
    c->comp = l->comps[d - 1];
    memcpy(c->head, l->prev, PL_HASH_LEN);
    if (l->last_mirror) {
        p->owes = true;
        p->owed_call = c->comp;
    }
    return PL_OK;
}

/* An action_result's link must name its callee ledger's head. */
static int check_link(verify_ctx *v, unsigned d, const char *path, uint32_t seq,
                      const pl__rec *rec)
{
    const vlevel *l = &v->lv[d];
    if (rec->link_folded) { /* the callee's one step is in this record */
        for (size_t i = 0; i < l->n_children; i++)
            if (l->children[i].comp == rec->link_seq)
                return pl__err(PL_ECORRUPT,
                               "run '%s', step %s:%u: the "
                               "result holds its callee's one "
                               "step, but ledger %s.%u holds "
                               "steps too",
                               v->id, path, seq, path, rec->link_seq);
        v->steps++;
        return PL_OK;
    }
    const uint8_t *head = v->genesis; /* a callee that recorded nothing */
    for (size_t i = l->n_children; i-- > 0;) {
        if (l->children[i].comp == rec->link_seq) {
            head = l->children[i].head;
            break;
        }
    }
    if (memcmp(head, rec->link_hash, PL_HASH_LEN) != 0)
        return pl__err(PL_ECORRUPT,
                       "run '%s', step %s:%u: the result does "
                       "not match the ledger %s.%u of the call "
                       "it answers (its last step changed or "
                       "is missing)",
                       v->id, path, seq, path, rec->link_seq);
    return PL_OK;
}

static int verify_rec(const uint8_t *key, size_t klen, const uint8_t *val,
                      size_t vlen, void *user)
{
    verify_ctx *v = user;
    uint64_t run;
    uint32_t comps[PL_MAX_DEPTH], seq;
    unsigned d;
    int st;
    if (!pl__key_parse(key, klen, &run, comps, &d, &seq))
        return pl__err(PL_ECORRUPT, "run '%s' has a malformed step key", v->id);
    char path[PL__PATH_MAX];
    pl__path_format(path, comps, d);
    for (unsigned i = PL_MAX_DEPTH; i > d; i--) /* subtrees behind us */
        if ((st = close_level(v, i)))
            return st;
    vlevel *l = &v->lv[d];
    bool same = l->open && memcmp(l->comps, comps, d * sizeof *comps) == 0;
    if (!same && (st = close_level(v, d)))
        return st;
    if (d > 0) {
        const vlevel *p = &v->lv[d - 1];
        if (!p->open || memcmp(p->comps, comps, (d - 1) * sizeof *comps) != 0 ||
            p->next_seq != comps[d - 1] + 1 ||
            p->last_type != PL_STEP_ACTION_CALL)
            return pl__err(PL_ECORRUPT,
                           "run '%s': ledger %s does not follow "
                           "the action_call that created it",
                           v->id, path);
    }
    if (!same) { /* a ledger begins */
        l->open = true;
        memcpy(l->comps, comps, d * sizeof *comps);
        l->next_seq = 0;
        l->n_children = 0;
        l->last_mirror = false;
        l->owes = false;
        memcpy(l->prev, v->genesis, PL_HASH_LEN);
    }
    if (seq != l->next_seq)
        return pl__err(PL_ECORRUPT,
                       "run '%s': ledger %s is missing step %u "
                       "(found step %u next)",
                       v->id, path, l->next_seq, seq);
    if (l->last_mirror)
        return pl__err(PL_ECORRUPT,
                       "run '%s', step %s:%u follows a step "
                       "that holds its caller's result, which "
                       "only a ledger's last step may",
                       v->id, path, seq);
    pl__rec rec;
    st = pl__rec_decode_lazy(&rec, val, vlen);
    if (!st && rec.mirrored && d == 0)
        st = pl__err(PL_ECORRUPT, "a root step holds its caller's result, "
                                  "but the root ledger has no caller");
    if (!st && !rec.mirrored) /* a mirror's payload is checked with its
                                 caller's action_result */
        st = pl__rec_check(&rec);
    if (st)
        return pl__err(st, "run '%s', step %s:%u: %s", v->id, path, seq,
                       pl_errmsg());
    if ((st = mirror_answered(v, d, &rec)))
        return st;
    if (rec.type != PL_STEP_SUSPEND && rec.type != PL_STEP_RESUME)
        l->owes = false;
    if (rec.seq != seq)
        return pl__err(PL_ECORRUPT, "run '%s', step %s:%u records seq %u",
                       v->id, path, seq, rec.seq);
    if (memcmp(rec.prev_hash, l->prev, PL_HASH_LEN) != 0)
        return pl__err(PL_ECORRUPT,
                       "run '%s', step %s:%u: the hash chain is "
                       "broken (its stored hash of the previous "
                       "step does not match)",
                       v->id, path, seq);
    if (rec.has_link && (st = check_link(v, d, path, seq, &rec)))
        return st;
    if ((st = pl__step_hash(v->hasher, key, klen, val, vlen, l->prev)))
        return st;
    if ((st = check_anchor(v, comps, d, seq, l->prev, path)))
        return st;
    l->last_type = rec.type;
    l->last_mirror = rec.mirrored;
    l->next_seq++;
    v->steps++;
    return PL_OK;
}

/*
 * Read run @p run_id's number, its run record and its state record (the
 * journal settled), checking both records' checksums: a run number that
 * changed finds no state, or another run's, which names another id.
 */
static int state_load(pl_engine *e, const char *run_id, uint64_t *num,
                      pl__run_state *rs)
{
    pl__buf ib = {0}, sb = {0};
    pl__run_info ri;
    int st = pl__store_settle(e->store);
    if (!st)
        st = pl__store_run_find(e->store, run_id, num, &ib);
    if (!st && !(st = pl__run_info_decode(&ri, run_id, ib.data, ib.len)))
        pl__run_info_clear(&ri);
    if (!st)
        st = pl__store_state_get(e->store, *num, &sb);
    if (!st && (st = pl__run_state_decode(rs, run_id, sb.data, sb.len)))
        pl__err(st, "run '%s' (#%llu): %s", run_id, (unsigned long long)*num,
                pl_errmsg());
    pl__buf_free(&ib);
    pl__buf_free(&sb);
    return st;
}

/* Find a run to read its steps: its number, its records checked. */
int pl__run_find_checked(pl_engine *e, const char *run_id, uint64_t *num)
{
    pl__run_state rs = {0};
    int st = state_load(e, run_id, num, &rs);
    pl__run_state_clear(&rs);
    return st;
}

int pl_run_head(uint8_t out[PL_HASH_LEN], pl_engine *e, const char *run_id)
{
    if (!out || !e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_head: out, an engine and a valid "
                                  "run id are required");
    uint64_t num;
    pl__run_state rs = {0};
    int st = state_load(e, run_id, &num, &rs);
    if (!st && (!rs.has_head || (rs.status != PL_RUN_COMPLETED &&
                                 rs.status != PL_RUN_CONTINUED &&
                                 rs.status != PL_RUN_SUSPENDED)))
        st = pl__err(PL_ESTATE,
                     "run '%s' is %s: only a completed, continued or "
                     "suspended run records its head",
                     run_id,
                     pl_run_status_name(rs.status)
                         ? pl_run_status_name(rs.status)
                         : "in an unknown state");
    if (!st)
        memcpy(out, rs.head, PL_HASH_LEN);
    pl__run_state_clear(&rs);
    return st;
}

/*
 * A run queued (submitted) or running has a lease (docs/design.md §14): a
 * worker takes a run by its lease alone, so one without is taken by none,
 * ever (its lease row deleted by hand, a store restored from a partial
 * dump).  Missing, it is looked for once more after the state is read
 * again: an execution that ended meanwhile dropped its lease with the
 * state that says so.
 */
static int lease_found(pl_engine *e, const char *run_id, uint64_t num,
                       pl_run_status status)
{
    if (status != PL_RUN_SUBMITTED && status != PL_RUN_RUNNING)
        return PL_OK;
    pl__lease l;
    int st = pl__store_lease_get(e->store, num, &l);
    if (st != PL_ENOTFOUND)
        return st;
    pl__run_state again = {0};
    uint64_t n;
    st = state_load(e, run_id, &n, &again);
    pl_run_status now = again.status;
    pl__run_state_clear(&again);
    if (st || now != status || n != num)
        return st;
    if ((st = pl__store_lease_get(e->store, num, &l)) != PL_ENOTFOUND)
        return st;
    return pl__err(PL_ECORRUPT,
                   "run '%s' (#%llu) is %s but has no lease: no worker will "
                   "take it (its lease was deleted); continuing it by hand "
                   "(pl_run_continue(), ledger-replay --run) executes it",
                   run_id, (unsigned long long)num, pl_run_status_name(status));
}

int pl_run_verify(pl_engine *e, const char *run_id)
{
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_verify: engine and a valid run id "
                                  "are required");
    uint64_t num;
    pl__run_state rs = {0};
    int st = state_load(e, run_id, &num, &rs);
    if (st) {
        pl__run_state_clear(&rs);
        return st;
    }
    verify_ctx v = {.id = run_id, .rs = &rs};
    if (!(st = pl__hasher_new(&v.hasher)) &&
        !(st = pl__genesis_hash(v.hasher, run_id, v.genesis)))
        st = pl__scan_run(e, run_id, num, NULL, 0, verify_rec, &v);
    /* the ledgers open at the end: the root stays open for its head */
    for (unsigned d = PL__ARRAY_LEN(v.lv) - 1; !st && d > 0; d--)
        st = close_level(&v, d);
    if (!st && v.lv[0].open)
        st = mirror_answered(&v, 0, NULL);
    if (!st)
        st = anchors_found(&v);
    if (!st && rs.has_head && rs.status != PL_RUN_RUNNING) {
        /* the root ledger's last step is anchored in the run's record */
        const uint8_t *head = v.lv[0].open ? v.lv[0].prev : v.genesis;
        if (memcmp(head, rs.head, PL_HASH_LEN) != 0 && v.lv[0].open &&
            v.lv[0].next_seq > 0)
            st = pl__err(PL_ECORRUPT,
                         "run '%s', step 0:%u: the root ledger's last step "
                         "does not match the run's record (it changed, or "
                         "steps after it are missing)",
                         run_id, v.lv[0].next_seq - 1);
        else if (memcmp(head, rs.head, PL_HASH_LEN) != 0)
            st = pl__err(PL_ECORRUPT,
                         "run '%s': the root ledger's last step "
                         "does not match the run's record (it "
                         "changed or is missing)",
                         run_id);
    }
    for (size_t i = 0; i < PL__ARRAY_LEN(v.lv); i++)
        free(v.lv[i].children);
    if (!st && rs.status != PL_RUN_RUNNING && v.steps != rs.steps)
        st = pl__err(PL_ECORRUPT,
                     "run '%s' records %llu steps but holds "
                     "%llu",
                     run_id, (unsigned long long)rs.steps,
                     (unsigned long long)v.steps);
    if (!st)
        st = lease_found(e, run_id, num, rs.status);
    pl__hasher_free(v.hasher);
    pl__run_state_clear(&rs);
    return st;
}
