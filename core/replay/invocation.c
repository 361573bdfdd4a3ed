/*
 * invocation.c -- an invocation's ledger and its cursor: the one rule of
 * replay (docs/design.md §3).
 *
 * Every append goes through pl__inv_append(): while the invocation's ledger
 * has a recorded step at the cursor, the new step is compared with it (type,
 * actor, payload) and the cursor advances; a difference fails the run with
 * PL_ENONDET naming both steps.  Past the recorded end, the step is encoded,
 * chained to its predecessor's hash, and added to the run's pending batch,
 * which commit.c makes durable.
 *
 * READING.  A replaying invocation reads its recorded steps ahead in bounded
 * batches (short read transactions, copied out), so replay memory does not
 * grow with ledger length and no read transaction stays open across policy
 * code.
 *
 * INVOCATIONS are strictly nested, so the run keeps one invocation structure
 * per depth and reuses it (and its read-ahead buffer) for the next call at
 * that depth.  The innermost one running is r->cur: a child opens only from
 * its parent while the parent runs, and its parent is current again once it
 * returns.
 *
 * THE CURSOR (struct pl_ctx in internal.h) keeps, between calls here:
 *
 *   next_seq          where the next append goes; steps 0 .. next_seq-1 are
 *                     in the store or in the run's pending batch
 *   replaying         recorded steps may remain at next_seq; once it is
 *                     false the invocation is live (appends are writes)
 *                     until the structure is opened again
 *   ahead[ahead_pos]  while replaying and ahead_pos < ahead.n: the record of
 *                     step next_seq
 *   peeked            rec is ahead[ahead_pos] decoded; rec.seq == next_seq
 *   the head          what the next append links to: last_hash when
 *                     last_hash_ok; else the batch's entry pending_at when
 *                     hash_pending (pending_at < the batch's length); else
 *                     the record in last_rec.  Asked for only once live.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "diverge.h"
#include "invocation.h"
#include "path.h"
#include "run.h"

int pl__inv_open(pl__run *r, pl_ctx *parent, uint32_t call_seq, bool replaying,
                 const pl_policy_def *def, pl_ctx **out)
{
    unsigned depth = parent ? parent->depth + 1 : 0;
    if (depth > PL_MAX_DEPTH)
        return pl__run_fail(r, PL_ELIMIT,
                            "run %s: invocation %s calls '%s' "
                            "deeper than %d levels",
                            r->id, parent->path, def->name, PL_MAX_DEPTH);
    /* a child opens only from the running invocation, after its caller's
     * action_call; the root, before anything runs */
    assert(parent == r->cur);
    assert(!parent || call_seq < parent->next_seq);
    assert(depth < PL__ARRAY_LEN(r->inv));
    pl_ctx *c = r->inv[depth];
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return pl__run_fail(r, PL_ENOMEM, "out of memory");
        r->inv[depth] = c;
    }
    c->run = r;
    c->parent = parent;
    c->def = def;
    c->depth = depth;
    c->call_seq = call_seq;
    c->idem[0] = '\0';
    c->deadline_ms = parent ? parent->deadline_ms : r->deadline_ms;
    if (parent) {
        memcpy(c->comps, parent->comps, parent->depth * sizeof *c->comps);
        c->comps[depth - 1] = call_seq;
        size_t n = strlen(parent->path);
        assert(n + 1 + 10 < sizeof c->path); /* a dot, 10 digits, NUL */
        memcpy(c->path, parent->path, n);
        c->path[n] = '.';
        *pl__utoa(c->path + n + 1, call_seq) = '\0';
    } else {
        c->path[0] = '0';
        c->path[1] = '\0';
    }
    c->prefix_len = pl__ledger_prefix(c->prefix, r->num, c->comps, depth);
    c->next_seq = 0;
    c->replaying = replaying;
    pl__kvs_reset(&c->ahead);
    c->ahead_pos = 0;
    c->ahead_end = false;
    c->peeked = false;
    pl__buf_reset(&c->last_rec);
    c->last_hash_ok = true;
    c->hash_pending = false;
    memcpy(c->last_hash, r->genesis, PL_HASH_LEN);
    pl_steps_clear(&c->view);
    c->view.default_actor = NULL;
    if (c->resolved)
        memset(c->resolved, 0, c->resolved_cap);
    r->cur = c;
    *out = c;
    return PL_OK;
}

/* Read the next batch of recorded steps; at the end, go live.  A read
 * that stopped short of its limits stopped at the ledger's end: once its
 * records are replayed the invocation goes live without reading again. */
static int inv_load(pl_ctx *c)
{
    pl__run *r = c->run;
    if (c->ahead_end) {
        pl__kvs_reset(&c->ahead);
        c->ahead_pos = 0;
        c->peeked = false;
        c->replaying = false; /* live from here; last_rec holds the tail */
        c->last_hash_ok = c->next_seq == 0;
        return PL_OK;
    }
    /* read with the run (a ride's, a wake's) */
    pl__kvs **firstp = r->ride ? &r->ride->ledger : &r->first_read;
    pl__kvs *first = *firstp;
    int st = PL_OK;
    if (first && !c->depth && !c->next_seq) {
        pl__kvs t = c->ahead; /* taken over, once */
        c->ahead = *first;
        *first = t;
        *firstp = NULL;
    } else {
        st = pl__store_read(r->e->store, c->prefix, c->prefix_len, c->next_seq,
                            PL__AHEAD_N, PL__AHEAD_BYTES, &c->ahead);
    }
    if (st)
        return pl__run_fail(r, st,
                            "run %s, invocation %s: reading the "
                            "ledger: %s",
                            r->id, c->path, pl_errmsg());
    c->ahead_pos = 0;
    c->peeked = false;
    c->ahead_end = c->ahead.n < PL__AHEAD_N &&
                   c->ahead.data.len < PL__AHEAD_BYTES;
    if (c->ahead.n == 0) {
        c->replaying = false; /* live from here; last_rec holds the tail */
        c->last_hash_ok = c->next_seq == 0;
        return PL_OK;
    }
    /* the last record read may be the last one recorded: keep it */
    size_t last = c->ahead.n - 1;
    pl__buf_reset(&c->last_rec);
    st = pl__buf_append(&c->last_rec, pl__kvs_val(&c->ahead, last),
                        c->ahead.e[last].vlen);
    return st ? pl__run_fail(r, st, "%s", pl_errmsg()) : PL_OK;
}

/* The recorded step at the cursor, or NULL past the recorded end. */
int pl__inv_peek(pl_ctx *c, const pl__rec **out)
{
    *out = NULL;
    if (!c->replaying)
        return PL_OK;
    if (c->ahead_pos >= c->ahead.n) {
        int st = inv_load(c);
        if (st || !c->replaying)
            return st;
    }
    assert(c->ahead_pos < c->ahead.n); /* the cursor is in what was read */
    if (!c->peeked) {
        pl__run *r = c->run;
        int st = pl__rec_decode_lazy(&c->rec,
                                     pl__kvs_val(&c->ahead, c->ahead_pos),
                                     c->ahead.e[c->ahead_pos].vlen);
        if (st)
            return pl__run_fail(r, st, "run %s: step %s:%u is unreadable: %s",
                                r->id, c->path, c->next_seq, pl_errmsg());
        if (c->rec.seq != c->next_seq)
            return pl__run_fail(r, PL_ECORRUPT,
                                "run %s: step %s:%u records "
                                "seq %u",
                                r->id, c->path, c->next_seq, c->rec.seq);
        /* a callee runs again only when its caller records no result, and
         * a mirror is only ever written with that result */
        if (c->rec.mirrored)
            return pl__run_fail(r, PL_ECORRUPT,
                                "run %s: step %s:%u holds "
                                "its caller's result, but "
                                "the caller records none",
                                r->id, c->path, c->next_seq);
        c->peeked = true;
    }
    *out = &c->rec;
    return PL_OK;
}

static void inv_consume(pl_ctx *c)
{
    assert(c->peeked && c->rec.seq == c->next_seq);
    pl__run *r = c->run;
    r->replayed++;
    if (r->e->on_event) {
        char actor[PL_MAX_NAME + 1];
        snprintf(actor, sizeof actor, "%.*s", (int)c->rec.actor_len,
                 c->rec.actor);
        pl__emit(r, PL_EVENT_STEP_REPLAYED, c->path, c->next_seq, actor,
                 c->rec.type, 0, 0, NULL);
    }
    c->ahead_pos++;
    c->next_seq++;
    c->peeked = false;
}

/* The hash of the record @p rec stored at position @p seq of this ledger. */
static int hash_at(pl_ctx *c, uint32_t seq, const uint8_t *rec, size_t len,
                   uint8_t out[PL_HASH_LEN])
{
    uint8_t key[PL__KEY_MAX];
    memcpy(key, c->prefix, c->prefix_len);
    pl__put_be32(key + c->prefix_len, seq);
    return pl__step_hash(c->run->hasher, key, c->prefix_len + 4, rec, len, out);
}

/*
 * Consume a recorded step whose payload goes to policy code without being
 * compared (a served result, a side effect's value, a resume answer): the
 * next recorded step must still link to it, or the store changed under the
 * run.  (The last step of a ledger is anchored by its caller's link, which
 * pl_run_verify() checks.)
 */
int pl__inv_consume_checked(pl_ctx *c)
{
    pl__run *r = c->run;
    uint8_t h[PL_HASH_LEN];
    uint32_t seq = c->next_seq;
    assert(c->peeked); /* the step at the cursor is the one to consume */
    int st = hash_at(c, seq, pl__kvs_val(&c->ahead, c->ahead_pos),
                     c->ahead.e[c->ahead_pos].vlen, h);
    if (st)
        return pl__run_fail(r, st, "%s", pl_errmsg());
    inv_consume(c);
    const pl__rec *next;
    if ((st = pl__inv_peek(c, &next)))
        return st;
    if (!next) { /* it was the last: the head an append links to */
        memcpy(c->last_hash, h, PL_HASH_LEN);
        c->last_hash_ok = true;
    } else if (memcmp(next->prev_hash, h, PL_HASH_LEN) != 0) {
        return pl__run_fail(r, PL_ECORRUPT,
                            "run %s: step %s:%u changed in "
                            "the store: the step after it "
                            "does not link to it",
                            r->id, c->path, seq);
    }
    return PL_OK;
}

/*
 * The hash of the invocation's last step (its head), or the run's genesis
 * for an empty ledger.  Valid once the invocation is live or has read to
 * the end of its record.
 */
int pl__inv_head(pl_ctx *c, uint8_t out[PL_HASH_LEN])
{
    pl__run *r = c->run;
    /* while replaying, last_hash is stale and last_rec may not be the last
     * step: the head is known only once the invocation is live */
    assert(!c->replaying);
    if (!c->last_hash_ok) {
        assert(c->next_seq > 0); /* an empty ledger's head is the genesis */
        const pl__kvs *l = &r->batch.steps;
        const uint8_t *rec = c->last_rec.data;
        size_t len = c->last_rec.len;
        if (c->hash_pending) {
            assert(c->pending_at < l->n); /* commits settle it first */
            rec = pl__kvs_val(l, c->pending_at);
            len = l->e[c->pending_at].vlen;
            c->hash_pending = false;
        }
        int st = hash_at(c, c->next_seq - 1, rec, len, c->last_hash);
        if (st)
            return pl__run_fail(r, st, "%s", pl_errmsg());
        c->last_hash_ok = true;
    }
    memcpy(out, c->last_hash, PL_HASH_LEN);
    return PL_OK;
}

static bool rec_code_is(const pl__rec *rec, const char *code)
{
    if (!rec->code || !code)
        return !rec->code && !code;
    size_t n = strlen(code);
    return rec->code_len == n && memcmp(rec->code, code, n) == 0;
}

/*
 * Does the recorded step at the cursor still link to its successor?  Only
 * asked when a replay differs: a step changed in the store is corruption,
 * not the code's non-determinism.  True when the successor is not at hand.
 */
static bool rec_intact(pl_ctx *c)
{
    if (c->ahead_pos + 1 >= c->ahead.n)
        return true;
    pl__rec next;
    uint8_t h[PL_HASH_LEN];
    if (pl__rec_decode_lazy(&next, pl__kvs_val(&c->ahead, c->ahead_pos + 1),
                            c->ahead.e[c->ahead_pos + 1].vlen) ||
        hash_at(c, c->next_seq, pl__kvs_val(&c->ahead, c->ahead_pos),
                c->ahead.e[c->ahead_pos].vlen, h))
        return false;
    return memcmp(next.prev_hash, h, PL_HASH_LEN) == 0;
}

/* A replay differs from a recorded step that no longer links to the next:
 * corruption, not the code's non-determinism. */
static int changed_in_store(pl_ctx *c)
{
    pl__run *r = c->run;
    return pl__run_fail(r, PL_ECORRUPT,
                        "run %s: step %s:%u changed in "
                        "the store: the step after it "
                        "does not link to it",
                        r->id, c->path, c->next_seq);
}

/* Fail the run: the recorded step and the new one (@p now: its payload's
 * text, or what it is; @p type 0: the policy ended there) differ.  The
 * code behind each is an action_call's callee's, else the invocation's,
 * as the events give it (diverge.c). */
static int nondet_text(pl_ctx *c, const pl__rec *rec, pl_step_type type,
                       const char *actor, const char *now, const char *code)
{
    pl__run *r = c->run;
    char *was = pl__payload_text(rec->payload, rec->payload_len, 200);
    char *rcode = pl__recorded_code(c, rec);
    if (type != PL_STEP_ACTION_CALL)
        code = c->def->code_version;
    char *is = type ? pl__asprintf("appends %s by '%s' %s",
                                   pl_step_type_name(type), actor,
                                   now ? now : "?")
                    : NULL;
    int st = pl__run_fail(
        r, PL_ENONDET,
        "non-determinism in run %s, invocation %s, step %u (id %s:%u): the "
        "ledger records %s by '%.*s' %s (code %s); the policy now %s (code "
        "%s)",
        r->id, c->path, c->next_seq, c->path, c->next_seq,
        pl_step_type_name(rec->type), (int)rec->actor_len, rec->actor,
        was ? was : "?", rcode ? rcode : "-",
        type ? (is ? is : "appends another step") : "ends there",
        code ? code : "-");
    free(was);
    free(rcode);
    free(is);
    return st;
}

static int nondet(pl_ctx *c, const pl__rec *rec, pl_step_type type,
                  const char *actor, const uint8_t *mp, size_t mp_len,
                  const char *code)
{
    if (!rec_intact(c))
        return changed_in_store(c);
    pl__diverged(c, rec, type, actor, mp, mp_len, code);
    char *now = pl__payload_text(mp, mp_len, 200);
    int st = nondet_text(c, rec, type, actor, now, code);
    free(now);
    return st;
}

int pl__inv_nondet_result(pl_ctx *c, const pl__rec *rec, const char *callee,
                          uint32_t call_seq)
{
    if (!rec_intact(c))
        return changed_in_store(c);
    pl__diverged(c, rec, PL_STEP_ACTION_RESULT, callee, NULL, 0, NULL);
    char now[PL__PATH_MAX + 48];
    snprintf(now, sizeof now, "(the result of the action_call at %s:%u)",
             c->path, call_seq);
    return nondet_text(c, rec, PL_STEP_ACTION_RESULT, callee, now,
                       c->def->code_version);
}

/* An invocation that ends must have used up its recorded steps. */
int pl__inv_finish(pl_ctx *c)
{
    const pl__rec *rec;
    int st = pl__inv_peek(c, &rec);
    if (st || !rec)
        return st;
    pl__diverged(c, rec, 0, NULL, NULL, 0, NULL);
    return nondet_text(c, rec, 0, NULL, NULL, NULL);
}

/*
 * The recorded step at the cursor matched the one appended: report a call
 * recorded by other code, and move on.
 */
void pl__inv_matched(pl_ctx *c, const char *actor, const char *code)
{
    const pl__rec *rec = &c->rec;
    if (rec->type == PL_STEP_ACTION_CALL && !rec_code_is(rec, code))
        pl__code_changed(c, rec, actor, code);
    inv_consume(c);
}

/* A payload's bytes, copied into its record. */
typedef struct put_bytes {
    pl__run *r;
    const uint8_t *mp;
    size_t len;
} put_bytes;

static int put(pl__buf *out, void *user)
{
    const put_bytes *b = user;
    if (pl__buf_append(out, b->mp, b->len))
        return pl__run_fail(b->r, PL_ENOMEM, "out of memory encoding a step");
    return PL_OK;
}

/*
 * Write a step past the recorded end of invocation @p c: its record's
 * header, then its payload, which @p w writes straight into the record.
 * A failure of @p w is returned as it is, nothing appended.
 */
static int append_live(pl_ctx *c, pl_step_type type, const char *actor,
                       const char *code, const pl__link *link,
                       pl__payload_writer w, void *user, int64_t *time_us)
{
    pl__run *r = c->run;
    assert(!c->replaying); /* past the recorded end: live */
    if (r->check)
        return pl__run_fail(r, PL_ECHECK,
                            "check: run %s, invocation %s: the "
                            "record ends before step %u (%s by "
                            "'%s')",
                            r->id, c->path, c->next_seq,
                            pl_step_type_name(type), actor);
    if (c->next_seq == UINT32_MAX)
        return pl__run_fail(r, PL_ELIMIT, "run %s: ledger %s is full", r->id,
                            c->path);

    uint8_t key[PL__KEY_MAX], prev[PL_HASH_LEN];
    int st = pl__inv_head(c, prev);
    if (st)
        return st;
    memcpy(key, c->prefix, c->prefix_len);
    pl__put_be32(key + c->prefix_len, c->next_seq);
    pl__kvs *l = &r->batch.steps;
    int64_t now = pl__now_us();
    if ((st = pl__kvs_begin(l, key, c->prefix_len + 4)))
        return pl__run_fail(r, st, "%s", pl_errmsg());
    st = pl__rec_encode_head(&l->data, c->next_seq, now, type, actor, prev,
                             code, link);
    if (st) {
        pl__kvs_cancel(l);
        return pl__run_fail(r, st, "%s", pl_errmsg());
    }
    if ((st = w(&l->data, user))) {
        pl__kvs_cancel(l);
        return st;
    }
    c->last_hash_ok = false; /* pl__inv_head() hashes it when it is needed */
    c->hash_pending = true;
    c->pending_at = l->n;
    pl__kvs_end(l);
    if (time_us)
        *time_us = now;
    r->appended++;
    pl__emit(r, PL_EVENT_STEP_APPENDED, c->path, c->next_seq, actor, type, 0, 0,
             NULL);
    c->next_seq++;
    return PL_OK;
}

/* The recorded step where a step is to be appended, or NULL; the run's
 * failure once it has stopped. */
static int append_at(pl_ctx *c, const pl__rec **rec)
{
    return c->run->stop ? c->run->stop : pl__inv_peek(c, rec);
}

/*
 * Append a step to invocation @p c: compare it with the recorded step at the
 * cursor, or write it past the recorded end.  *replayed says which.
 */
int pl__inv_append(pl_ctx *c, pl_step_type type, const char *actor,
                   const uint8_t *mp, size_t mp_len, const char *code,
                   const pl__link *link, bool *replayed, int64_t *time_us)
{
    pl__run *r = c->run;
    const pl__rec *rec;
    int st = append_at(c, &rec);
    if (st)
        return st;
    if (rec) {
        bool same_bytes = rec->payload_len == mp_len &&
                          memcmp(rec->payload, mp, mp_len) == 0;
        if (!same_bytes && (st = pl__rec_check(rec)))
            return pl__run_fail(r, st, "run %s: step %s:%u is corrupt: %s",
                                r->id, c->path, c->next_seq, pl_errmsg());
        if (rec->type != type || !pl__rec_actor_is(rec, actor) ||
            (!same_bytes &&
             !pl__payload_equal(rec->payload, rec->payload_len, mp, mp_len)))
            return nondet(c, rec, type, actor, mp, mp_len, code);
        if (time_us)
            *time_us = rec->time_us;
        *replayed = true;
        pl__inv_matched(c, actor, code);
        return PL_OK;
    }
    put_bytes b = {r, mp, mp_len};
    *replayed = false;
    return append_live(c, type, actor, code, link, put, &b, time_us);
}

int pl__inv_append_written(pl_ctx *c, pl_step_type type, const char *actor,
                           pl__payload_writer w, void *user)
{
    pl__run *r = c->run;
    const pl__rec *rec;
    int st = append_at(c, &rec);
    if (st)
        return st;
    if (NEVER(rec != NULL)) /* the caller replays what is recorded */
        return pl__run_fail(r, PL_EINVAL,
                            "run %s: step %s:%u is recorded already", r->id,
                            c->path, c->next_seq);
    return append_live(c, type, actor, NULL, NULL, w, user, NULL);
}

/* Seed steps open a new ledger. */
int pl__inv_append_seed(pl_ctx *c, const pl_steps *seed)
{
    pl__run *r = c->run;
    for (size_t i = 0; seed && i < seed->n; i++) {
        const pl_step *s = seed->v[i];
        bool replayed;
        if (s->mp_len > r->e->max_payload)
            return pl__run_fail(r, PL_ELIMIT,
                                "run %s, invocation %s: seed "
                                "step %zu has a payload of %zu "
                                "bytes; the limit is %zu",
                                r->id, c->path, i, s->mp_len,
                                r->e->max_payload);
        int st = pl__inv_append(c, s->type, s->actor, s->mp, s->mp_len, NULL,
                                NULL, &replayed, NULL);
        if (st)
            return st;
    }
    return PL_OK;
}
