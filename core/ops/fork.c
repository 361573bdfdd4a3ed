/*
 * fork.c -- pl_run_fork: a new run made of a prefix of another run.
 *
 * The new run holds copies of the old run's steps before a step of its
 * root ledger: the root steps before it, and the callee ledgers of the
 * calls among them that were answered before it.  The callee ledger of a
 * call whose result falls at or after the cut is left out: its last step
 * may be a mirror of that result (ledger/codec/record.c), and the new run runs
 * the call again anyway.
 *
 * A copied step keeps its record but for the hashes that name the run,
 * made anew as rechain.c says.
 *
 * Writing takes two commits, because the store numbers a run when it
 * creates it and the keys (so the hashes) need that number: the run is
 * created `failed`, with a reason saying the fork did not complete, and the
 * second commit writes its steps and makes it `running` with no owner.
 * Continuing it (pl_run_continue()) replays the copied steps and goes on
 * with the code loaded now.
 *
 * The new run is created with its lease, held here until the run is whole (the
 * second commit is fenced by it) and renewed meanwhile as an executing run's
 * is, however long the copy takes, then handed to the queue: a worker of any
 * process that has the root policy takes it, as it takes a run whose owner is
 * gone, also when this process has no such policy and cannot continue it
 * itself.  Without a lease no worker would ever take it.  A crash between the
 * commits leaves the lease to run out and the run `failed`, which a worker's
 * take leaves as it is; a crash after the second leaves the run to be taken
 * once the lease has run out.  The lease is made with the old run's concurrency
 * key and limit, as the store finds them in the creating commit
 * (pl__batch.flow_from: the old run's lease, or the key it keeps parked in a
 * wait), so a worker takes the new run only while the key has room: an
 * upgrade's successor replaces its run under the key, and a fork is the same
 * work again.
 *
 * pl_run_upgrade is a fork that replaces its run: it holds the old run's lease
 * (renewed too) from before it reads the run, and its second commit also ends
 * the old run `superseded`, naming the new run ("succ" in its state), whose
 * state names it back ("pred"), and drops the lease, fenced by its
 * generation.  One transaction (a store commit of the two batches, never a
 * group commit that could retry them apart), so a crash leaves the old run as
 * it was or superseded with its successor whole.  A crash between the two
 * commits leaves the new run `failed` ("upgrade ... did not complete") and the
 * old one untouched.
 */
#include <stdio.h>
#include <stdlib.h>

#include "claim.h"
#include "internal.h"
#include "path.h"
#include "rechain.h"
#include "retention.h"
#include "run.h"

/* Parse "0:<seq>", a step of the root ledger. */
static int parse_root_step(const char *id, uint32_t *seq)
{
    if (!id || id[0] != '0' || id[1] != ':' || id[2] < '0' || id[2] > '9')
        return pl__err(PL_EINVAL,
                       "bad step id '%s': a fork is made at a "
                       "step of the root ledger, \"0:<seq>\"",
                       id ? id : "");
    uint64_t v = 0;
    const char *p = id + 2;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p++ - '0');
        if (v >= UINT32_MAX)
            break;
    }
    if (*p || v >= UINT32_MAX)
        return pl__err(PL_EINVAL, "bad step id '%s' (expected \"0:<seq>\")",
                       id);
    *seq = (uint32_t)v;
    return PL_OK;
}

/* ---- reading the old run --------------------------------------------------------- */

typedef struct collect {
    uint32_t at;          /* the cut: root steps before it are kept */
    const bool *answered; /* root seq < at -> its call was answered */
    pl__kvs *out;
    uint64_t total; /* every step of the old run, folded ones counted */
} collect;

static int collect_step(const uint8_t *key, size_t klen, const uint8_t *val,
                        size_t vlen, void *user)
{
    collect *c = user;
    uint64_t run;
    uint32_t comps[PL_MAX_DEPTH], seq;
    unsigned depth;
    if (!pl__key_parse(key, klen, &run, comps, &depth, &seq))
        return pl__err(PL_ECORRUPT, "a step key is malformed");
    bool keep = depth == 0 ? seq < c->at
                           : comps[0] < c->at && c->answered[comps[0]];
    c->total += pl__rec_steps(val, vlen);
    return keep ? pl__kvs_add(c->out, key, klen, val, vlen) : PL_OK;
}

/* Which calls of the root ledger's first @p at steps are answered before
 * the cut; fails unless step @p at exists.  *out: caller frees. */
static int root_answers(pl_engine *e, uint64_t num, uint32_t at, const char *id,
                        bool **out)
{
    uint8_t prefix[PL__PREFIX_MAX];
    size_t plen = pl__ledger_prefix(prefix, num, NULL, 0);
    pl__kvs got = {0};
    /* the step first: a table of @p at entries is made for a step that is
     * there, never for any number a caller gives */
    int st = pl__store_read(e->store, prefix, plen, at, 1, 1, &got);
    if (!st && got.n != 1)
        st = pl__err(PL_ENOTFOUND,
                     "run '%s' has no step 0:%u in its root "
                     "ledger",
                     id, at);
    bool *answered = st ? NULL : calloc((size_t)at + 1, sizeof *answered);
    if (!st && !answered)
        st = pl__err(PL_ENOMEM, "out of memory");
    for (uint32_t seq = 0; !st && seq < at;) {
        pl__kvs_reset(&got);
        st = pl__store_read(e->store, prefix, plen, seq, 256, (size_t)1 << 20,
                            &got);
        if (!st && !got.n)
            st = pl__err(PL_ECORRUPT, "run '%s': root step 0:%u is missing", id,
                         seq);
        for (size_t i = 0; !st && i < got.n && seq < at; i++, seq++) {
            pl__rec rec;
            st = pl__rec_decode_lazy(&rec, pl__kvs_val(&got, i), got.e[i].vlen);
            if (st)
                st = pl__err(st, "run '%s', step 0:%u: %s", id, seq,
                             pl_errmsg());
            else if (rec.has_link && rec.link_seq < at)
                answered[rec.link_seq] = true;
        }
    }
    pl__kvs_free(&got);
    if (st) {
        free(answered);
        return st;
    }
    *out = answered;
    return PL_OK;
}

/* ---- the fork --------------------------------------------------------------------- */

static int encode_state(pl__buf *out, const char *run_id, pl_run_status status,
                        uint64_t steps, const char *reason, const char *pred)
{
    pl__run_state rs = {0};
    rs.pred = (char *)pred;
    rs.status = status;
    rs.steps = steps;
    rs.updated_us = rs.heartbeat_us = pl__now_us();
    if (status == PL_RUN_FAILED) {
        rs.error = PL_ESTATE;
        rs.reason = (char *)reason;
    }
    return pl__run_state_encode(out, run_id, &rs);
}

/* The state that ends run @p id as superseded by @p succ. */
static int encode_superseded(pl__buf *out, const char *id,
                             const pl__run_state *was, const char *succ)
{
    pl__run_state rs;
    int st = pl__run_state_copy(&rs, was);
    if (st)
        return st;
    free(rs.reason);
    free(rs.susp_path);
    free(rs.prompt);
    free(rs.wait_event);
    rs.wait_event = NULL;
    rs.wait_until_ms = 0;
    rs.reason = rs.susp_path = NULL;
    rs.prompt = NULL;
    rs.prompt_len = 0;
    rs.token[0] = '\0';
    rs.error = 0;
    rs.status = PL_RUN_SUPERSEDED;
    rs.updated_us = pl__now_us();
    if (!(rs.succ = pl__strdup(succ)))
        st = pl__err(PL_ENOMEM, "out of memory");
    if (!st)
        st = pl__run_state_encode(out, id, &rs);
    pl__run_state_clear(&rs);
    return st;
}

/* May run @p id, whose state is @p rs, be upgraded? */
static int upgradable(const char *id, const pl__run_state *rs)
{
    if (rs->status == PL_RUN_COMPLETED)
        return pl__err(PL_ESTATE,
                       "pl_run_upgrade: run '%s' is completed: a completed "
                       "run is final, and nothing of it is left to run",
                       id);
    if (rs->status == PL_RUN_CANCELLED)
        return pl__err(PL_ESTATE,
                       "pl_run_upgrade: run '%s' is cancelled: a cancelled "
                       "run is final",
                       id);
    if (rs->status == PL_RUN_CONTINUED) /* its successor goes on: one more
                                           would do its work twice */
        return pl__err(PL_ESTATE,
                       "pl_run_upgrade: run '%s' was continued as new by run "
                       "'%s': a continued run is final (upgrade the link "
                       "of its chain that goes on)",
                       id, rs->succ ? rs->succ : "?");
    if (rs->status == PL_RUN_SUPERSEDED)
        return pl__err(PL_ESTATE,
                       "pl_run_upgrade: run '%s' was superseded by run '%s' "
                       "already",
                       id, rs->succ ? rs->succ : "?");
    return PL_OK;
}

/* PL_OK when no run and no tombstone holds @p id: a new run's id is
 * refused before anything is written (the create's own check stays). */
static int id_free(pl_engine *e, const char *fn, const char *id)
{
    uint64_t num;
    pl__tomb t;
    int st = pl__store_run_find(e->store, id, &num, NULL);
    if (!st)
        return pl__err(PL_EEXIST, "%s: run '%s' exists already", fn, id);
    if (st == PL_ENOTFOUND && !(st = pl__tomb_load(e, id, &t)))
        st = pl__tomb_taken(id, &t);
    if (st == PL_ENOTFOUND) {
        pl__err_clear();
        return PL_OK;
    }
    return pl__err(st, "%s: %s", fn, pl_errmsg());
}

/*
 * What reached the old run @p num (@p id) of an upgrade after its inbox
 * was read and before the commit that superseded it (a delivery checks
 * the run's state in its own transaction, so none comes after), past seq
 * @p after: moved to its successor @p new_num (@p new_id), whose lease
 * the upgrade still holds, before the successor is handed to the queue.
 * A failure leaves them in the old run's inbox, durable (its export shows
 * them), and the upgrade done.
 */
static void inbox_late(pl_engine *e, uint64_t num, const char *id,
                       uint64_t new_num, const char *new_id, uint64_t after)
{
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    pl__kvs ib = {0}, moved = {0};
    pl__batch late = {0};
    if (!pl__store_inbox_read(e->store, num, &ib) &&
        !pl__rechain_inbox(&ib, id, new_id, after, &moved, NULL) && moved.n) {
        late.run = new_num;
        late.gen = 1; /* the successor's lease, still the creation's */
        late.inbox_add = &moved;
        late.timer_id = new_id;
        if (pl__engine_commit(e, &late)) {
            /* left where they are */
        }
    }
    pl__batch_free(&late);
    pl__kvs_free(&ib);
    pl__kvs_free(&moved);
    pl__errmsg_restore(saved);
}

/*
 * Fork @p run_id at @p at_step_id into a new run; with @p upgrade, end
 * @p run_id as superseded by it in the commit that completes the new run.
 */
static int fork_run(char **out_new_id, pl_engine *e, const char *run_id,
                    const char *at_step_id, const char *new_id, bool upgrade)
{
    const char *fn = upgrade ? "pl_run_upgrade" : "pl_run_fork";
    if (!out_new_id)
        return pl__err(PL_EINVAL, "%s: out_new_id is NULL", fn);
    *out_new_id = NULL;
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL,
                       "%s: an engine and a valid run id are "
                       "required",
                       fn);
    if (new_id && !pl__run_id_ok(new_id))
        return pl__err(PL_EINVAL,
                       "%s: bad new run id '%s' (1..%d bytes of "
                       "[A-Za-z0-9._:@~-])",
                       fn, new_id, PL_MAX_RUN_ID);
    uint32_t at = 0;
    int st = parse_root_step(at_step_id, &at);
    if (st || (st = pl__engine_writable(e, fn)))
        return st; /* a read-only engine: refused before the run is read */

    char idbuf[PL_UUID_LEN + 1];
    uint64_t num, new_num = 0, gen = 0;
    pl__buf info = {0}, sb = {0}, new_info = {0};
    pl__run_info ri = {0};
    pl__run_state rs = {0};
    pl__kvs old = {0}, ib = {0}, moved = {0};
    uint64_t moved_to = 0; /* the last seq of the old inbox moved */
    pl__batch create = {0}, fill = {0}, end = {0};
    bool *answered = NULL;
    pl__rechain w = {0};
    char *reason = NULL, *id_copy = NULL;
    /* the leases this engine renews meanwhile: the old run's (an
     * upgrade's) and the new run's */
    atomic_bool lost_old = false, lost_new = false;
    bool kept_old = false, kept_new = false;

    if ((st = pl__store_settle(e->store)) ||
        (st = pl__store_run_find(e->store, run_id, &num, &info))) {
        st = pl__err(st, "%s: run '%s': %s", fn, run_id, pl_errmsg());
        goto done;
    }
    if (new_id && (st = id_free(e, fn, new_id)))
        goto done; /* before the lease: a refusal writes nothing */
    /* an upgrade holds the old run's lease from here to the commit that
     * ends it, so nobody executes or resumes it meanwhile */
    bool had;
    if (upgrade && (st = pl__run_take_lease(e, num, run_id, &gen, &had)))
        goto done;
    if ((st = pl__store_state_get(e->store, num, &sb)) ||
        (st = pl__run_state_decode(&rs, run_id, sb.data, sb.len)) ||
        (st = pl__run_info_decode(&ri, run_id, info.data, info.len))) {
        st = pl__err(st, "%s: run '%s': %s", fn, run_id, pl_errmsg());
        goto done;
    }
    /* alive as pl_run_get() says: by the run's lease, which its owner's
     * engine renews while a call blocks, not by its last write */
    if (rs.status == PL_RUN_RUNNING &&
        (pl__engine_owns(e, num) ||
         (!upgrade && pl__run_lease_alive(e, num, pl__owner_alive(e, &rs))) ||
         (upgrade && pl__owner_alive(e, &rs)))) {
        st = pl__err(PL_EBUSY,
                     "%s: run '%s' is running in live process %lld on %s: "
                     "%s it once it stops",
                     fn, run_id, (long long)rs.owner_pid, rs.owner_host,
                     upgrade ? "upgrade" : "fork");
        goto done;
    }
    if (upgrade && (st = upgradable(run_id, &rs)))
        goto done;
    /* renewed, unless a thread of this process is about to execute the
     * run (claimed it, its lease not yet taken): the lease held here keeps
     * that one out, and the upgrade goes on as it did unrenewed */
    if (upgrade) {
        char saved[PL__ERRMSG_MAX];
        pl__errmsg_save(saved);
        st = pl__run_keep_lease(e, num, run_id, gen, &lost_old);
        kept_old = !st;
        if (st == PL_EBUSY) {
            pl__errmsg_restore(saved);
            st = PL_OK;
        }
    }
    if (st || (st = root_answers(e, num, at, run_id, &answered)))
        goto done;
    collect cc = {at, answered, &old, 0};
    if ((st = pl__store_each_step(e->store, num, collect_step, &cc)) ||
        (upgrade && (st = pl__store_inbox_read(e->store, num, &ib)))) {
        st = pl__err(st, "%s: reading run '%s': %s", fn, run_id, pl_errmsg());
        goto done;
    }

    if (!new_id) {
        if ((st = pl__new_run_id(idbuf)))
            goto done;
        new_id = idbuf;
    }
    if (!(id_copy = pl__strdup(new_id)) ||
        !(reason = pl__asprintf("%s of run '%s' at %s did not complete",
                                upgrade ? "upgrade" : "fork", run_id,
                                at_step_id))) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    ri.created_us = pl__now_us();
    /* the successor is the loaded code's: its root's identity is */
    const pl_policy_def *root = upgrade ? pl_registry_find(e->reg, ri.policy)
                                        : NULL;
    if (root) {
        free(ri.code);
        ri.code = NULL;
        if (root->code_version && !(ri.code = pl__strdup(root->code_version))) {
            st = pl__err(PL_ENOMEM, "out of memory");
            goto done;
        }
    }
    if ((st = pl__run_info_encode(&new_info, new_id, &ri)) ||
        (st = encode_state(&create.state, new_id, PL_RUN_FAILED, 0, reason,
                           NULL)))
        goto done;
    create.create_id = new_id;
    create.create_info = &new_info;
    create.lease_owner = e->worker; /* generation 1, until it is whole */
    create.lease_us = e->lease_us;
    create.flow_from = num; /* the same work: under the old run's key */
    if ((st = pl__engine_commit(e, &create))) {
        st = pl__err(st, "%s: creating run '%s' from run '%s': %s", fn, new_id,
                     run_id, pl_errmsg());
        goto done;
    }
    if (create.rc) {
        st = pl__err(PL_EEXIST, "%s: run '%s' exists already", fn, new_id);
        goto done;
    }
    new_num = create.run;
    if ((st = pl__run_keep_lease(e, new_num, new_id, 1, &lost_new)))
        goto done;
    kept_new = true;

    if ((st = pl__rechain_init(&w, new_id)))
        goto done;
    for (size_t i = 0; !st && i < old.n; i++)
        st = pl__rechain_step(&w, new_num, pl__kvs_key(&old, i), old.e[i].klen,
                              pl__kvs_val(&old, i), old.e[i].vlen, &fill.steps,
                              NULL);
    if (st) {
        st = pl__err(st, "%s: copying run '%s': %s", fn, run_id, pl_errmsg());
        goto done;
    }
    fill.run = new_num;
    fill.gen = 1; /* the new run's lease is still the creation's */
    if ((st = encode_state(&fill.state, new_id, PL_RUN_RUNNING, w.steps, NULL,
                           upgrade ? run_id : NULL)))
        goto done;
    /* what was delivered to the old run and not consumed (an approval
     * sent before the deploy, a cancellation) is its successor's: the old
     * run, superseded, never reads it again */
    if (upgrade && ib.n &&
        (st = pl__rechain_inbox(&ib, run_id, new_id, 0, &moved, &moved_to)))
        goto done;
    if (moved.n) {
        fill.inbox_add = &moved;
        fill.timer_id = new_id;
    }
    if (!upgrade) {
        st = pl__engine_commit(e, &fill);
    } else {
        /* the new run's steps and the old run's end: one transaction, so a
         * crash leaves the old run untouched or superseded with its
         * successor complete, never one without the other */
        end.run = num;
        end.gen = gen;
        end.release = true;
        pl__batch *both[2] = {&fill, &end};
        rs.steps = cc.total; /* exact: a crashed run's is a heartbeat's */
        if (!(st = encode_superseded(&end.state, run_id, &rs, new_id)))
            st = pl__store_commit(e->store, both, 2, false);
        if (!st && kept_old) {
            pl__engine_release(e, num); /* nothing left to renew */
            kept_old = false;
        }
        if (!st)
            gen = 0; /* released with the commit */
    }
    if (st)
        goto done;
    if (upgrade)
        inbox_late(e, num, run_id, new_num, new_id, moved_to);
    /* to the queue, first in it: a worker with the root policy takes it */
    pl__engine_release(e, new_num);
    kept_new = false;
    pl__run_hand_back(e, new_num, 1, PL__HAND_BACK_US);
    *out_new_id = id_copy;
    id_copy = NULL;
done:
    if (kept_new)
        pl__engine_release(e, new_num);
    if (kept_old)
        pl__engine_release(e, num);
    if (gen && pl__store_lease_release(e->store, num, gen)) {
        /* it expires on its own */
    }
    pl__rechain_free(&w);
    free(answered);
    free(reason);
    free(id_copy);
    pl__batch_free(&create);
    pl__batch_free(&fill);
    pl__batch_free(&end);
    pl__kvs_free(&old);
    pl__kvs_free(&ib);
    pl__kvs_free(&moved);
    pl__run_info_clear(&ri);
    pl__run_state_clear(&rs);
    pl__buf_free(&info);
    pl__buf_free(&sb);
    pl__buf_free(&new_info);
    return st;
}

int pl_run_fork(char **out_new_id, pl_engine *e, const char *run_id,
                const char *at_step_id, const char *new_id)
{
    return fork_run(out_new_id, e, run_id, at_step_id, new_id, false);
}

int pl_run_upgrade(char **out_new_id, pl_engine *e, const char *run_id,
                   const char *at_step_id, const char *new_id)
{
    return fork_run(out_new_id, e, run_id, at_step_id, new_id, true);
}
