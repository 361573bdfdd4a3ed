/*
 * retention.c -- deleting runs, their tombstones, and pruning (the
 * header's "Retention" section).
 *
 * A delete reads each run's records, checks that it has ended for good,
 * makes its tombstone, and hands the runs to the store, which deletes them
 * in one transaction only if their state records are still the bytes read
 * (DELETING in store.h): a run that moved on meanwhile is left as it is.
 * The steps of deleted runs are then removed a bounded number per
 * transaction (pl__store_purge()); a purge interrupted by a crash is
 * finished by the next prune.  So no transaction of a prune is long, and a
 * kill at any instant leaves every run whole or gone.
 */
#include <stdio.h>
#include <stdlib.h>

#include "export.h"
#include "retention.h"
#include "run.h"

#define BATCH_DEFAULT 64
#define BATCH_MAX 1024
#define PURGE_STEPS 2048 /* steps removed per transaction */
#define EXPIRE_MAX 512   /* tombstones removed per transaction */

/* ---- tombstones ---------------------------------------------------------- */

int pl__tomb_load(pl_engine *e, const char *id, pl__tomb *t)
{
    pl__buf rec = {0};
    int st = pl__store_tomb_get(e->store, id, &rec);
    if (!st)
        st = pl__tomb_decode(t, id, rec.data, rec.len);
    pl__buf_free(&rec);
    if (!st && t->expires_us <= pl__now_us())
        st = pl__err(PL_ENOTFOUND, "the tombstone of run '%s' has expired", id);
    return st;
}

int pl__tomb_taken(const char *id, const pl__tomb *t)
{
    char del[40], exp[40];
    pl__export_time_iso(del, sizeof del, t->deleted_us);
    pl__export_time_iso(exp, sizeof exp, t->expires_us);
    return pl__err(PL_EEXIST,
                   "run '%s' was deleted on %s; its tombstone keeps the id "
                   "until %s",
                   id, del, exp);
}

int pl__tomb_outcome(pl_outcome **out, const char *id, const pl__tomb *t)
{
    char del[40];
    pl__export_time_iso(del, sizeof del, t->deleted_us);
    pl_outcome *o = calloc(1, sizeof *o);
    bool succ = t->status == PL_RUN_CONTINUED; /* named by the ids' rule */
    if (o) {
        o->status = t->status;
        o->run_id = pl__strdup(id);
        o->reason = pl__asprintf("deleted on %s", del);
        int st = succ && (o->successor = malloc(PL_MAX_RUN_ID + 1))
                     ? pl__successor_id(o->successor, id)
                     : PL_OK;
        if (st) {
            pl_outcome_free(o);
            return st;
        }
    }
    if (!o || !o->run_id || !o->reason || (succ && !o->successor)) {
        pl_outcome_free(o);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    *out = o;
    return PL_OK;
}

int pl_run_tombstone(pl_tombstone *out, pl_engine *e, const char *run_id)
{
    if (!out || !e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_tombstone: out, an engine and a "
                                  "valid run id are required");
    int st = pl__struct_version_ok(out->version, &pl__tombstone_layout,
                                   "pl_run_tombstone");
    if (st)
        return st;
    pl__buf rec = {0};
    pl__tomb t;
    st = pl__store_tomb_get(e->store, run_id, &rec);
    if (!st)
        st = pl__tomb_decode(&t, run_id, rec.data, rec.len);
    pl__buf_free(&rec);
    if (st)
        return st;
    pl_tombstone full = PL_TOMBSTONE_INIT;
    full.status = t.status;
    full.has_head = t.has_head;
    memcpy(full.head, t.head, PL_HASH_LEN);
    full.created_us = t.created_us;
    full.deleted_us = t.deleted_us;
    full.expires_us = t.expires_us;
    memcpy(full.policy, t.policy, sizeof full.policy);
    pl__struct_out(out, &full, &pl__tombstone_layout);
    return PL_OK;
}

/* ---- deleting ------------------------------------------------------------ */

/* What a prune deletes; a single delete has none. */
typedef struct rule {
    unsigned statuses; /* bits (1u << status) */
    int64_t before_us; /* last written at or before this */
    bool dry_run;
    pl_prune_fn before;
    void *user;
    pl_prune_done_fn after; /* what became of each run chosen */
} rule;

/* Tell the rule's @p after what became of run @p id. */
static void done(const rule *r, const char *id, int status)
{
    if (r && r->after)
        r->after(id, status, r->user);
}

static bool rule_match(const rule *r, pl_run_status status, int64_t updated)
{
    return (r->statuses & (1u << status)) && updated <= r->before_us;
}

/* One run being deleted: its records as read, its tombstone. */
typedef struct victim {
    pl__buf state, tomb;
    pl__delete d;
} victim;

/*
 * Read run @p id and make its delete in @p v.  PL_ESTATE when it has not
 * ended (or, with @p r, does not match the rule any more), PL_ENOTFOUND
 * when it is gone.
 */
static int victim_load(pl_engine *e, const char *id, const rule *r, victim *v)
{
    uint64_t num;
    pl__buf info = {0};
    pl__run_info ri = {0};
    pl__run_state rs = {0};
    int st = pl__store_run_find(e->store, id, &num, &info);
    if (!st)
        st = pl__store_state_get(e->store, num, &v->state);
    if (!st)
        st = pl__run_info_decode(&ri, id, info.data, info.len);
    if (!st)
        st = pl__run_state_decode(&rs, id, v->state.data, v->state.len);
    if (!st && !pl__status_final(rs.status))
        st = pl__err(PL_ESTATE,
                     "run '%s' is %s: only a run that has ended "
                     "(completed, failed, cancelled, superseded or "
                     "continued) may be "
                     "deleted",
                     id, pl_run_status_name(rs.status));
    if (!st && r && !rule_match(r, rs.status, rs.updated_us))
        st = PL_ESTATE;
    if (!st) {
        int64_t now = pl__now_us();
        pl__tomb t = {.status = rs.status,
                      .has_head = rs.has_head,
                      .created_us = ri.created_us,
                      .deleted_us = now,
                      .expires_us = now + e->tombstone_us};
        memcpy(t.head, rs.head, PL_HASH_LEN);
        snprintf(t.policy, sizeof t.policy, "%s", ri.policy);
        st = pl__tomb_encode(&v->tomb, id, &t);
    }
    if (!st) {
        v->d.id = id;
        v->d.num = num;
        v->d.state = v->state.data;
        v->d.state_len = v->state.len;
        v->d.tomb = &v->tomb;
    }
    pl__buf_free(&info);
    pl__run_info_clear(&ri);
    pl__run_state_clear(&rs);
    return st;
}

/* Remove the steps of deleted runs, a bounded number per transaction. */
static int purge_all(pl_engine *e)
{
    bool more = true;
    int st = PL_OK;
    while (!st && more) {
        size_t removed;
        st = pl__store_purge(e->store, PURGE_STEPS, &removed, &more);
    }
    return st;
}

/* Offer run @p id to the rule's visitor. */
static int offer(pl_engine *e, const rule *r, const char *id)
{
    pl_run_info *info;
    int st = pl_run_get(&info, e, id);
    if (st)
        return st;
    int rc = r->before(info, r->user);
    pl_run_info_free(info);
    if (rc && !pl__status_failure(rc))
        return pl__err(PL_EINVAL,
                       "pl_engine_prune: the visitor returned %d, "
                       "which is no pl_status",
                       rc);
    return rc;
}

/*
 * Delete runs @p ids[0..n) in one transaction: those @p r still matches
 * (all, with no rule: any that cannot be deleted fails the call), each
 * offered to the rule's visitor first.  *deleted counts those deleted.
 */
static int delete_batch(pl_engine *e, char *const *ids, size_t n, const rule *r,
                        uint64_t *deleted)
{
    victim *v = calloc(n, sizeof *v);
    pl__delete *d = calloc(n, sizeof *d);
    if (!v || !d) {
        free(v);
        free(d);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    size_t k = 0;
    int st = PL_OK;
    for (size_t i = 0; !st && i < n; i++) {
        st = victim_load(e, ids[i], r, &v[i]);
        if (r && (st == PL_ESTATE || st == PL_ENOTFOUND)) {
            done(r, ids[i], st); /* ended otherwise, or gone meanwhile */
            st = PL_OK;
            continue;
        }
        if (!st && r && r->before)
            st = offer(e, r, ids[i]);
        if (!st)
            d[k++] = v[i].d;
    }
    /* a visitor that stopped the prune stopped it after the runs before */
    int stop = st;
    if (r && r->dry_run) {
        *deleted += k;
        for (size_t i = 0; i < k; i++)
            done(r, d[i].id, PL_OK);
        k = 0;
    }
    if (k && (!stop || r)) {
        int dst = pl__store_delete(e->store, d, k);
        for (size_t i = 0; !dst && i < k; i++) {
            if (d[i].rc == PL_OK)
                ++*deleted;
            /* said once the transaction is durable: left, or deleted */
            done(r, d[i].id,
                 d[i].rc == PL_OK || d[i].rc == PL_ENOTFOUND ? d[i].rc
                                                             : PL_EBUSY);
            if (d[i].rc != PL_OK && !r)
                dst = d[i].rc == PL_ENOTFOUND
                          ? pl__err(PL_ENOTFOUND, "run '%s' is gone already",
                                    d[i].id)
                          : pl__err(PL_EBUSY,
                                    "run '%s' changed while it was being "
                                    "deleted, or a worker is replaying it: "
                                    "nothing of it was deleted",
                                    d[i].id);
        }
        if (!dst)
            dst = purge_all(e);
        if (!stop)
            st = dst;
    }
    for (size_t i = 0; i < n; i++) {
        pl__buf_free(&v[i].state);
        pl__buf_free(&v[i].tomb);
    }
    free(v);
    free(d);
    return st;
}

int pl_run_delete(pl_engine *e, const char *run_id)
{
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_delete: an engine and a valid run "
                                  "id are required");
    uint64_t deleted = 0;
    char *ids[1] = {(char *)run_id};
    int st = pl__store_settle(e->store); /* steps may be in the journal */
    if (!st)
        st = delete_batch(e, ids, 1, NULL, &deleted);
    return st;
}

/* ---- pruning ------------------------------------------------------------- */

/* The ids a pass over the runs chose. */
typedef struct chosen {
    const rule *r;
    char **ids;
    size_t n, cap;
    size_t damaged;                   /* runs whose record cannot be read */
    char damaged_msg[PL__ERRMSG_MAX]; /* the first one's */
} chosen;

/* A run whose record cannot be read: passed over, the first one's
 * message kept. */
static int pass_damaged(const char *id, int st, const char *why, void *user)
{
    (void)id, (void)st;
    chosen *c = user;
    if (!c->damaged++)
        snprintf(c->damaged_msg, sizeof c->damaged_msg, "%s", why);
    return 0;
}

static int choose(const pl_run_info *info, void *user)
{
    chosen *c = user;
    if (!rule_match(c->r, info->status, info->updated_us))
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        char **g = realloc(c->ids, cap * sizeof *g);
        if (!g)
            return pl__err(PL_ENOMEM, "out of memory");
        c->ids = g;
        c->cap = cap;
    }
    if (!(c->ids[c->n] = pl__strdup(info->id)))
        return pl__err(PL_ENOMEM, "out of memory");
    c->n++;
    return 0;
}

/* Remove the expired tombstones, a bounded number per transaction. */
static int expire_all(pl_engine *e)
{
    pl__buf after = {0};
    bool more = true;
    int st = PL_OK;
    int64_t now = pl__now_us();
    while (!st && more) {
        size_t removed;
        st = pl__store_tombs_expire(e->store, now, EXPIRE_MAX, &after, &removed,
                                    &more);
    }
    pl__buf_free(&after);
    return st;
}

/* A run whose record cannot be read is passed over, never deleted (its
 * status and age are not known): the others are chosen and deleted, and
 * then the first such run's PL_ECORRUPT is returned. */
static int prune(pl_engine *e, const rule *r, unsigned batch, uint64_t *deleted)
{
    chosen c = {r, NULL, 0, 0, 0, ""};
    pl_runs_options ro = PL_RUNS_OPTIONS_INIT;
    ro.damaged = pass_damaged;
    /* what an interrupted prune left, first */
    int st = r->dry_run ? PL_OK : purge_all(e);
    if (!st)
        st = pl_engine_runs_from(e, &ro, choose, &c);
    for (size_t i = 0; !st && i < c.n; i += batch)
        st = delete_batch(e, c.ids + i, c.n - i < batch ? c.n - i : batch, r,
                          deleted);
    if (!st && !r->dry_run)
        st = expire_all(e);
    if (!st && c.damaged) {
        pl__err(PL_ECORRUPT, "%s", c.damaged_msg);
        st = PL_ECORRUPT;
    }
    for (size_t i = 0; i < c.n; i++)
        free(c.ids[i]);
    free(c.ids);
    return st;
}

int pl_engine_prune(pl_engine *e, const pl_prune_options *opts,
                    uint64_t *deleted)
{
    uint64_t none;
    if (!deleted)
        deleted = &none;
    *deleted = 0;
    if (!e)
        return pl__err(PL_EINVAL, "pl_engine_prune: engine is NULL");
    pl_prune_options o;
    if (pl__struct_in(&o, opts, &pl__prune_options_layout, "pl_engine_prune"))
        return PL_EINVAL;
    unsigned mask = o.statuses;
    for (unsigned s = 0; !o.statuses && s < 32; s++)
        mask |= pl__status_final((pl_run_status)s) ? 1u << s : 0;
    for (unsigned s = 0; s < 32; s++)
        if ((mask & (1u << s)) && !pl__status_final((pl_run_status)s))
            return pl__err(PL_EINVAL,
                           "pl_engine_prune: status %u is not a final "
                           "status: only runs that have ended are deleted",
                           s);
    if (o.batch > BATCH_MAX)
        return pl__err(PL_EINVAL, "pl_engine_prune: batch %u is more than %d",
                       o.batch, BATCH_MAX);
    if (o.older_than_ms > PL_RETAIN_MS_MAX)
        return pl__err(PL_EINVAL, "pl_engine_prune: older_than_ms is too "
                                  "large");
    rule r = {mask,      pl__now_us() - (int64_t)o.older_than_ms * 1000,
              o.dry_run, o.before,
              o.user,    o.after};
    return prune(e, &r, o.batch ? o.batch : BATCH_DEFAULT, deleted);
}

int pl__retain_ok(uint64_t retain_ms, uint64_t retain_failed_ms, const char *fn)
{
    bool ms_bad = retain_ms > PL_RETAIN_MS_MAX;
    if (!ms_bad && retain_failed_ms <= PL_RETAIN_MS_MAX)
        return PL_OK;
    return pl__err(PL_EINVAL,
                   "%s: %s %llu is more than PL_RETAIN_MS_MAX (%llu ms)", fn,
                   ms_bad ? "retain_ms" : "retain_failed_ms",
                   (unsigned long long)(ms_bad ? retain_ms : retain_failed_ms),
                   (unsigned long long)PL_RETAIN_MS_MAX);
}

/* The runs a retention rule keeps to be looked into: failed, cancelled. */
#define FAILED_BITS ((1u << PL_RUN_FAILED) | (1u << PL_RUN_CANCELLED))

static int retain_pass(pl_engine *e, uint64_t ms, unsigned statuses)
{
    pl_prune_options o = PL_PRUNE_OPTIONS_INIT;
    o.older_than_ms = ms;
    o.statuses = statuses;
    uint64_t deleted;
    return pl_engine_prune(e, &o, &deleted);
}

int pl__retain(pl_engine *e, uint64_t retain_ms, uint64_t failed_ms)
{
    if (retain_ms == failed_ms)
        return retain_ms ? retain_pass(e, retain_ms, 0) : PL_OK;
    unsigned rest = 0;
    for (unsigned s = 0; s < 32; s++)
        rest |= pl__status_final((pl_run_status)s) ? 1u << s : 0;
    rest &= ~FAILED_BITS;
    int st = retain_ms ? retain_pass(e, retain_ms, rest) : PL_OK;
    int fst = failed_ms ? retain_pass(e, failed_ms, FAILED_BITS) : PL_OK;
    return st ? st : fst;
}
