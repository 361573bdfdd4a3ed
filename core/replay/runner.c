/*
 * runner.c -- the runner: start, continue and resume runs.
 *
 * Every execution of a run goes the same way: claim the run (its state
 * record names this process as owner; a live owner elsewhere means
 * PL_EBUSY), replay the root invocation from its ledger, and record how the
 * execution ended -- completed (with the root's result), suspended (with a
 * resume token), or failed (with the reason) -- in one final commit together
 * with the steps still pending.
 *
 * A failed execution records its reason but drops the steps appended since
 * the last sync point: nobody has seen them, and keeping them would pin the
 * fixed code to the broken code's output.  Outcomes are freed in outcome.c.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "chain.h"
#include "claim.h"
#include "commit.h"
#include "internal.h"
#include "invocation.h"
#include "path.h"
#include "retention.h"
#include "run.h"
#include "suspend.h"
#include "wait.h"

/* ---- root actions -------------------------------------------------------------------- */

void pl__root_clear(pl__root_action *ra)
{
    pl__run_info_clear(&ra->info);
    cJSON_Delete(ra->payload);
    pl_steps_free(ra->seed);
    memset(ra, 0, sizeof *ra);
}

/* Seed steps are stored as an array of [type, actor, payload]. */
static void seed_item(const void *steps, size_t i, pl_step_type *type,
                      const char **actor, const uint8_t **mp, size_t *mp_len)
{
    const pl_step *s = ((const pl_steps *)steps)->v[i];
    *type = s->type;
    *actor = s->actor;
    *mp = s->mp;
    *mp_len = s->mp_len;
}

static int seed_decode(pl_steps **out, const uint8_t *mp, size_t len)
{
    cJSON *arr = NULL;
    /* [[type, actor, payload], ...]: each payload two containers deep */
    int st = pl__payload_decode_in(&arr, mp, len, 2);
    if (!st)
        st = pl_steps_new(out);
    const cJSON *row;
    cJSON_ArrayForEach(row, arr)
    {
        if (st)
            break;
        const cJSON *t = cJSON_GetArrayItem(row, 0);
        const cJSON *a = cJSON_GetArrayItem(row, 1);
        const cJSON *p = cJSON_GetArrayItem(row, 2);
        if (!cJSON_IsNumber(t) || !cJSON_IsString(a) || !cJSON_IsObject(p)) {
            st = pl__err(PL_ECORRUPT, "a run's seed steps are malformed");
            break;
        }
        st = pl_steps_add(*out, (pl_step_type)t->valueint, a->valuestring, p);
    }
    if (!st && !cJSON_IsArray(arr))
        st = pl__err(PL_ECORRUPT, "a run's seed steps are malformed");
    cJSON_Delete(arr);
    if (st) {
        pl_steps_free(*out);
        *out = NULL;
    }
    return st;
}

int pl__root_decode(pl__root_action *ra, const char *id, const uint8_t *info,
                    size_t len)
{
    memset(ra, 0, sizeof *ra);
    int st = pl__run_info_decode(&ra->info, id, info, len);
    if (!st)
        st = pl__payload_decode(&ra->payload, ra->info.payload,
                                ra->info.payload_len);
    if (!st && ra->info.seed)
        st = seed_decode(&ra->seed, ra->info.seed, ra->info.seed_len);
    if (st) {
        pl__root_clear(ra);
        return st;
    }
    ra->action.version = PL_ACTION_VERSION;
    ra->action.policy = ra->info.policy;
    ra->action.payload = ra->payload;
    ra->action.actions = (const char *const *)ra->info.actions;
    ra->action.n_actions = ra->info.n_actions;
    ra->action.seed = ra->seed;
    return PL_OK;
}

/* Run @p id's number and root action, and with @p state its state record
 * (on PostgreSQL in the same query). */
static int root_load(pl_engine *e, const char *id, uint64_t *num,
                     pl__root_action *ra, pl__buf *state, pl__run_more *more)
{
    memset(ra, 0, sizeof *ra);
    pl__buf info = {0};
    int st = state ? pl__store_run_load(e->store, id, num, &info, state, more)
                   : pl__store_run_find(e->store, id, num, &info);
    if (!st)
        st = pl__root_decode(ra, id, info.data, info.len);
    pl__buf_free(&info);
    return st;
}

/* Check the root action @p in, read into @p a (of the current version). */
static int check_root(pl_engine *e, const pl_action *in, pl_action *a,
                      const pl_policy_def **def, const char *fn)
{
    if (!in)
        return pl__err(PL_EINVAL, "the root action is NULL: it needs a "
                                  "valid policy name");
    if (pl__struct_in(a, in, &pl__action_layout, fn))
        return PL_EINVAL;
    if (!pl__name_ok(a->policy))
        return pl__err(PL_EINVAL, "the root action needs a valid policy name");
    if (!a->payload)
        return pl__err(PL_EINVAL, "the root payload is NULL (an empty "
                                  "payload is {}: pl_json_empty())");
    if (!cJSON_IsObject(a->payload))
        return pl__err(PL_EJSON, "the root payload must be a JSON object");
    if (a->n_actions && !a->actions)
        return pl__err(PL_EINVAL, "n_actions without actions");
    for (size_t i = 0; i < a->n_actions; i++)
        if (!pl__name_ok(a->actions[i]))
            return pl__err(PL_EINVAL, "bad name in the root's actions");
    *def = pl_registry_find(e->reg, a->policy);
    if (!*def)
        return pl__err(PL_ENOTFOUND, "no policy named '%s' is registered",
                       a->policy);
    return PL_OK;
}

/* ---- executing ----------------------------------------------------------------------- */

/* A failure of this process or its store, not of the run: nothing about it
 * is recorded, the run stays as it was, and continuing it later goes on
 * from its last durable step.  Out of memory is one: a run must not end
 * failed, for good, because one allocation failed once. */
static bool store_failure(int st)
{
    return st == PL_ESTORE || st == PL_EMAPFULL || st == PL_EBUSY ||
           st == PL_EIO || st == PL_ENOSPC || st == PL_EACCES ||
           st == PL_ENOMEM;
}

static int execute(pl__run *r, const pl_policy_def *def, const pl_action *root,
                   bool replaying, pl_outcome **out, uint64_t t0)
{
    pl_steps *steps = NULL;
    int st = pl_steps_new(&steps);
    /* a run failed before it started (claim.c: its steps unreadable) is
     * not executed: its failure is recorded below */
    if (!st && !r->stop)
        st = pl__run_root(r, def, root, replaying, steps);
    if (!st && r->stop)
        st = r->stop;
    if (r->cancelled && (!st || st == PL_ECANCELLED) && !r->stop) {
        pl_steps_free(steps);
        return pl__end_cancelled(r, def, t0, out);
    }
    if (st && !r->stop) /* also when the step list could not be made */
        pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
    pl__run_state *rs = &r->state;
    pl_outcome *o = NULL;

    if (r->check) {
        if (st) {
            pl__err(r->stop, "%s", r->reason ? r->reason : "");
            pl_steps_free(steps);
            return r->stop;
        }
        o = pl__outcome_new(r, PL_RUN_COMPLETED);
        if (!o) {
            pl_steps_free(steps);
            return pl__err(PL_ENOMEM, "out of memory");
        }
        pl__emit(r, PL_EVENT_RUN_COMPLETED, "0", 0, def->name, 0, 0,
                 pl__ev_clock(r) - t0, NULL);
        o->steps = steps;
        *out = o;
        return PL_OK;
    }

    if (!st) {
        rs->status = PL_RUN_COMPLETED;
        if ((st = pl__run_head(r, rs->head))) {
            pl_steps_free(steps);
            return st;
        }
        rs->has_head = true;
        /* the result is the root ledger's last step, which "head" hashes:
         * the state does not repeat it (runrec.c) */
        free(rs->result);
        rs->result = NULL;
        rs->result_len = 0;
        if ((r->cont.len && (st = pl__run_continued(r))) ||
            (st = pl__run_write(r, true))) {
            pl_steps_free(steps);
            return st;
        }
        pl__emit(r, PL_EVENT_RUN_COMPLETED, "0", 0, def->name, 0, 0,
                 pl__ev_clock(r) - t0, NULL);
        if (!(o = pl__outcome_new(r, rs->status))) {
            pl_steps_free(steps);
            return pl__err(PL_ENOMEM, "out of memory");
        }
        o->steps = steps;
        *out = o;
        return PL_OK;
    }
    pl_steps_free(steps);

    if (r->stop == PL_ESUSPENDED && r->parked)
        return pl__end_waiting(r, def, t0, out);
    if (r->stop == PL_ESUSPENDED) {
        rs->status = PL_RUN_SUSPENDED;
        if ((st = pl__run_head(r, rs->head)))
            return st;
        rs->has_head = true;
        snprintf(rs->token, sizeof rs->token, "%s", r->token);
        free(rs->susp_path);
        rs->susp_path = pl__strdup(r->susp_path);
        rs->susp_seq = r->susp_seq;
        free(rs->prompt);
        rs->prompt = NULL;
        rs->prompt_len = 0;
        if (r->prompt.len) {
            rs->prompt = malloc(r->prompt.len);
            if (rs->prompt) {
                memcpy(rs->prompt, r->prompt.data, r->prompt.len);
                rs->prompt_len = r->prompt.len;
            }
        }
        if (!rs->susp_path || (r->prompt.len && !rs->prompt))
            return pl__err(PL_ENOMEM, "out of memory");
        if ((st = pl__run_write(r, true)))
            return st;
        pl__emit(r, PL_EVENT_RUN_SUSPENDED, r->susp_path, r->susp_seq,
                 def->name, PL_STEP_SUSPEND, 0, pl__ev_clock(r) - t0, NULL);
        if (!(o = pl__outcome_new(r, PL_RUN_SUSPENDED)))
            return pl__err(PL_ENOMEM, "out of memory");
        o->resume_token = pl__strdup(r->token);
        o->suspended_path = pl__strdup(r->susp_path);
        if (r->prompt.len &&
            pl__payload_decode(&o->prompt, r->prompt.data, r->prompt.len)) {
            pl_outcome_free(o);
            return pl__err(PL_ENOMEM, "out of memory");
        }
        if (!o->resume_token || !o->suspended_path) {
            pl_outcome_free(o);
            return pl__err(PL_ENOMEM, "out of memory");
        }
        *out = o;
        return PL_OK;
    }

    /* failed: the reason is recorded, the unseen pending steps are not */
    st = r->stop;
    assert(st < 0); /* every way here went through pl__run_fail() */
    /* newer code recorded the run (version.c): it is left as it was, for
     * that code, as after a failure of the store */
    if (store_failure(st) || st == PL_ENEWERCODE) {
        pl__err(st, "%s", r->reason ? r->reason : pl_strerror(st));
        if (st == PL_EBUSY && atomic_load(&r->lease_lost))
            (void)pl__run_lease_lost(r, st); /* a branch's commit saw it */
        return st;
    }
    pl__kvs_reset(&r->batch.steps);
    r->batch.inbox_del = 0; /* an event consumed unseen stays delivered */
    r->folded = 0;
    rs->status = PL_RUN_FAILED;
    rs->has_head = false; /* the unseen steps were dropped */
    rs->error = st;
    free(rs->reason);
    rs->reason = pl__strdup(r->reason ? r->reason : pl_strerror(st));
    int wst = pl__run_write(r, true);
    if (wst)
        return wst;
    pl__emit(r, PL_EVENT_RUN_FAILED, "0", 0, def->name, 0, st,
             pl__ev_clock(r) - t0, r->reason);
    if (!(o = pl__outcome_new(r, PL_RUN_FAILED)))
        return pl__err(PL_ENOMEM, "out of memory");
    o->error = st;
    o->reason = pl__strdup(r->reason ? r->reason : pl_strerror(st));
    *out = o;
    pl__err(st, "%s", o->reason ? o->reason : "");
    return PL_OK;
}

/* Execute the run, told as events: its start, and its end.  An execution
 * that stopped with no end of the run (a check at its record's end, a run
 * left for newer code, a failure of the store) says so, so that what
 * follows it (an exporter's spans) does not wait for its next one. */
int pl__run_execute(pl__run *r, const pl_policy_def *def, const pl_action *root,
                    bool replaying, pl_outcome **out)
{
    uint64_t t0 = pl__ev_clock(r);
    r->end_said = false;
    pl__emit(r, PL_EVENT_RUN_STARTED, "0", 0, def->name, 0, 0, 0, NULL);
    int st = execute(r, def, root, replaying, out, t0);
    if (!r->end_said) {
        char msg[PL__ERRMSG_MAX];
        pl__errmsg_save(msg);
        pl__emit(r, PL_EVENT_RUN_STOPPED, "0", 0, def->name, 0,
                 st ? st : r->stop, pl__ev_clock(r) - t0, msg);
        pl__errmsg_restore(msg);
    }
    return st;
}

/* ---- start ---------------------------------------------------------------------------- */

static int start_existing(pl_outcome **out, pl_engine *e, const char *id,
                          const pl_action *root, pl_if_exists how);

/* The caller's options, of any of their versions, as a current struct in
 * @p dst (NULL: the defaults), by util.h's one rule. */
static int run_options(pl_run_options *dst, const pl_run_options *src,
                       const char *fn)
{
    if (pl__struct_in(dst, src, &pl__run_options_layout, fn))
        return PL_EINVAL;
    if ((unsigned)dst->if_exists > PL_IF_EXISTS_OUTCOME)
        return pl__err(PL_EINVAL, "%s: unknown if_exists %d", fn,
                       (int)dst->if_exists);
    return pl__flow_options_ok(dst, fn, strcmp(fn, "pl_run_submit") == 0);
}

/*
 * Start a run (@p submit false: execute it now, under a lease of this
 * worker's) or queue it (@p submit: `submitted`, with a lease nobody holds,
 * for a worker to take).  *out is the outcome of the execution; with
 * @p submit, *out_id is the new run's id.  *exists is set when the run id
 * is taken (PL_EEXIST).
 */
static int start_run(pl_outcome **out, char **out_id, pl_engine *e,
                     const pl_action *root, const pl_run_options *opts,
                     bool submit, bool *exists, const pl__batch *sched)
{
    const char *fn = submit ? "pl_run_submit" : "pl_run_start";
    if (!e)
        return pl__err(PL_EINVAL, "%s: engine is NULL", fn);
    if (submit && opts->if_exists != PL_IF_EXISTS_FAIL)
        return pl__err(PL_EINVAL,
                       "%s: if_exists applies to pl_run_start "
                       "only",
                       fn);
    if (opts->deadline_ms < 0 || opts->deadline_in_ms < 0)
        return pl__err(PL_EINVAL, "%s: a negative deadline", fn);
    int64_t now_ms = pl__now_us() / 1000;
    if (opts->deadline_ms > PL__TIME_MAX_MS ||
        opts->deadline_in_ms > PL__TIME_MAX_MS - now_ms)
        return pl__err(PL_EINVAL, "%s: a deadline past 2^53 ms", fn);
    int64_t deadline = opts->deadline_ms;
    int64_t rel = opts->deadline_in_ms ? now_ms + opts->deadline_in_ms : 0;
    if (rel && (!deadline || rel < deadline))
        deadline = rel;
    if (opts->check)
        return pl__err(PL_EINVAL,
                       "%s: check applies to "
                       "pl_run_continue only",
                       fn);
    const pl_policy_def *def;
    pl_action a;
    int st = check_root(e, root, &a, &def, fn);
    if (st)
        return st;
    root = &a;
    char idbuf[PL_UUID_LEN + 1];
    const char *id = opts->run_id;
    if (id && !pl__run_id_ok(id))
        return pl__err(PL_EINVAL,
                       "bad run id '%s' (1..%d bytes of "
                       "[A-Za-z0-9._:@~-])",
                       id, PL_MAX_RUN_ID);
    if (!id) {
        if ((st = pl__new_run_id(idbuf)))
            return st;
        id = idbuf;
    }

    pl__run *r = NULL;
    pl__buf info = {0}, payload = {0}, seed = {0};
    pl__batch create = {0};
    pl__run_info ri = {0};
    if ((st = pl__payload_encode(&payload, root->payload, e->max_payload)))
        goto done;
    if (root->seed && root->seed->n &&
        (st = pl__seed_encode(&seed, root->seed, root->seed->n, seed_item)))
        goto done;
    ri.policy = (char *)root->policy;
    ri.payload = payload.data;
    ri.payload_len = payload.len;
    ri.actions = (char **)root->actions;
    ri.n_actions = root->n_actions;
    ri.seed = seed.len ? seed.data : NULL;
    ri.seed_len = seed.len;
    ri.created_us = pl__now_us();
    ri.code = (char *)def->code_version;
    ri.deadline_ms = deadline;
    if ((st = pl__run_info_encode(&info, id, &ri)) ||
        (st = pl__run_new(e, id, &r)))
        goto done;
    r->deadline_ms = deadline;
    if (def->code_version && !(r->root_code = pl__strdup(def->code_version))) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    r->state.status = submit ? PL_RUN_SUBMITTED : PL_RUN_RUNNING;
    r->state.attempts = submit ? 0 : 1;
    if (submit)
        r->state.updated_us = r->state.heartbeat_us = pl__now_us();
    else
        pl__set_owner(e, &r->state);
    /* the run is created by a commit of its own, which group commit shares
     * with other runs' commits; its lease with it */
    create.create_id = id;
    create.create_info = &info;
    create.lease_owner = submit ? "" : e->worker;
    create.lease_us = e->lease_us;
    create.priority = opts->priority;
    create.flow_key = opts->concurrency_key;
    create.flow_limit = opts->concurrency_limit;
    if (sched) { /* a schedule's cursor, moved in the same commit */
        create.sched_name = sched->sched_name;
        create.sched_rec = sched->sched_rec;
        create.sched_expect = sched->sched_expect;
        create.sched_strict = sched->sched_strict;
    }
    if ((st = pl__run_state_encode(&create.state, id, &r->state)) ||
        (st = pl__commit(e, &create)))
        goto done;
    if (create.rc) {
        pl__tomb t;
        *exists = true;
        st = pl__tomb_load(e, id, &t)
                 ? pl__err(PL_EEXIST, "run '%s' exists already", id)
                 : pl__tomb_taken(id, &t);
        goto done;
    }
    r->num = create.run;
    if (submit) {
        if (out_id && !(*out_id = pl__strdup(id)))
            st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    if ((st = pl__engine_claim(e, r->num, id)))
        goto done;
    r->batch.gen = 1; /* the lease the creation took */
    /* made without a key, which only a later generation could have */
    r->batch.nokey_gen = opts->concurrency_key ? 0 : 1;
    /* its inbox was empty when it was made: its first call boundary does
     * not look (a cancellation delivered since is seen after its next
     * commit, as after any commit that answered; a wait that parks keeps
     * the due time a delivery set) */
    r->batch.inbox_known = true;
    r->batch.inbox_cancel = false;
    st = pl__engine_lease(e, r->num, 1, &r->lease_lost);
    r->state_written_us = pl__now_us();
    if (!st)
        st = pl__run_execute(r, def, root, false, out);
    pl__engine_release(e, r->num);
done:
    pl__buf_free(&info);
    pl__batch_free(&create);
    pl__buf_free(&payload);
    pl__buf_free(&seed);
    pl__run_free(r);
    return st;
}

int pl_run_start(pl_outcome **out, pl_engine *e, const pl_action *root,
                 const pl_run_options *opts)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_run_start: out is NULL");
    *out = NULL;
    pl_run_options o;
    bool exists = false;
    int st = run_options(&o, opts, "pl_run_start");
    if (!st)
        st = start_run(out, NULL, e, root, &o, false, &exists, NULL);
    if (!exists || !o.run_id || o.if_exists == PL_IF_EXISTS_FAIL)
        return st; /* (a new UUIDv7 taken already is PL_EEXIST, always) */
    return start_existing(out, e, o.run_id, root, o.if_exists);
}

int pl_run_submit(char **out, pl_engine *e, const pl_action *root,
                  const pl_run_options *opts)
{
    if (out)
        *out = NULL;
    if (!out && !(opts && opts->run_id))
        return pl__err(PL_EINVAL, "pl_run_submit: out is NULL and no run id "
                                  "is given");
    pl_outcome *none = NULL;
    pl_run_options o;
    bool exists = false;
    int st = run_options(&o, opts, "pl_run_submit");
    return st ? st : start_run(&none, out, e, root, &o, true, &exists, NULL);
}

int pl__run_submit_sched(pl_engine *e, const pl_action *root,
                         const pl_run_options *opts, const char *sched_name,
                         const pl__buf *rec, const pl__buf *expect)
{
    pl_outcome *none = NULL;
    pl_run_options o;
    bool exists = false;
    pl__batch sched = {0};
    sched.sched_name = sched_name;
    sched.sched_rec = rec;
    sched.sched_expect = expect;
    sched.sched_strict = true; /* changed meanwhile: PL_EBUSY, no run */
    int st = run_options(&o, opts, "pl_run_submit");
    return st ? st : start_run(&none, NULL, e, root, &o, true, &exists, &sched);
}

/* ---- continue --------------------------------------------------------------------------- */

/* The lease of a run to execute; with @p wake, taken as a wake takes it:
 * a run parked with a concurrency key only while the key has room. */
static int take_lease(pl_engine *e, uint64_t num, const char *id, bool wake,
                      uint64_t *gen, bool *had)
{
    pl__lease held = {0};
    int st = pl__store_lease_acquire(e->store, num, id, e->worker, e->lease_us,
                                     0, wake, gen, had, &held);
    if (st == PL_EBUSY && pl__worker_dead(e, held.owner))
        st = pl__store_lease_acquire(e->store, num, id, e->worker, e->lease_us,
                                     held.gen, wake, gen, had, &held);
    if (st == PL_EBUSY && !*held.owner)
        st = pl__err(PL_EBUSY,
                     "run '%s' waits for a place under its concurrency key "
                     "(the key is full): a worker or pl_engine_wake() "
                     "continues it once one frees",
                     id);
    else if (st == PL_EBUSY)
        st = pl__err(PL_EBUSY,
                     "run '%s' is leased to worker %s for %.1f s more "
                     "(it is running there)",
                     id, held.owner, (double)held.expires_in_us / 1e6);
    return st;
}

/* The lease of a run to execute (run.h). */
int pl__run_take_lease(pl_engine *e, uint64_t num, const char *id,
                       uint64_t *gen, bool *had)
{
    return take_lease(e, num, id, false, gen, had);
}

/* Renew a lease this engine holds for a copy (run.h). */
int pl__run_keep_lease(pl_engine *e, uint64_t num, const char *id, uint64_t gen,
                       atomic_bool *lost)
{
    int st = pl__engine_claim(e, num, id);
    if (!st && (st = pl__engine_lease(e, num, gen, lost)))
        pl__engine_release(e, num);
    return st;
}

/* Drop a lease taken for an execution that did not start, keeping the
 * message of why it did not. */
static void drop_lease(pl_engine *e, uint64_t num, uint64_t gen)
{
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    if (pl__store_lease_release(e->store, num, gen)) {
        /* it expires on its own */
    }
    pl__errmsg_restore(saved);
}

/* Hand a run's lease back to the queue (run.h). */
void pl__run_hand_back(pl_engine *e, uint64_t num, uint64_t gen,
                       int64_t hold_us)
{
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    bool lost;
    if (pl__store_lease_renew(e->store, &num, &gen, 1, hold_us, &lost)) {
        /* it expires on its own */
    }
    pl__errmsg_restore(saved);
}

/* Continue run @p id (see pl_run_continue(), pl_run_resume()); leased by
 * a worker's take (@p leased), with a delivery riding its next commit
 * (@p dv), or, @p wake, as a wake takes a run: a run parked with a
 * concurrency key only while the key has room. */
static int continue_run(pl_engine *e, const char *id, bool check,
                        const char *token, const cJSON *answer,
                        pl_outcome **out, const pl__lease *leased,
                        pl__delivery *dv, bool wake)
{
    uint64_t num;
    pl__root_action ra;
    /* the run's steps may still be in the journal of a group commit */
    int st = pl__store_settle(e->store);
    if (st)
        return st;
    pl__buf sb = {0}; /* its state record, read with it */
    /* a delivery's: the run's key as its wake would find it, its inbox and
     * its root ledger's first records (invocation.c's first read) */
    pl__run_more more = {
        .room = true, .ledger_n = PL__AHEAD_N, .ledger_bytes = PL__AHEAD_BYTES};
    st = root_load(e, id, &num, &ra, &sb, dv ? &more : NULL);
    if (st) {
        pl__buf_free(&sb);
        pl__kvs_free(&more.inbox);
        pl__kvs_free(&more.ledger);
        return st;
    }
    const pl_policy_def *def = pl_registry_find(e->reg, ra.action.policy);
    pl__run *r = NULL;
    pl__kvs resume = {0};
    pl__ride ride = {0};
    bool claimed = false;
    if (!def && dv) /* not executable here: the caller delivers alone */
        goto done;
    if (!def) {
        st = pl__err(PL_ENOTFOUND,
                     "run '%s' has root policy '%s', which is "
                     "not registered",
                     id, ra.action.policy);
        goto done;
    }
    if ((st = pl__run_new(e, id, &r)))
        goto done;
    r->num = num;
    r->root_code = ra.info.code; /* the run takes it over */
    ra.info.code = NULL;
    st = pl__run_state_decode(&r->state, id, sb.data, sb.len);
    if (st)
        goto done;
    r->deadline_ms = ra.info.deadline_ms;
    if (dv && r->state.status != PL_RUN_WAITING)
        goto done; /* the caller delivers alone */
    /* a run parked with a key whose key is full: nothing of it runs here;
     * the delivery alone makes its timer due, for its wake */
    if (dv && more.keyed && !more.room)
        goto done;
    if (leased && r->state.status != PL_RUN_RUNNING &&
        r->state.status != PL_RUN_SUBMITTED &&
        r->state.status != PL_RUN_WAITING) {
        drop_lease(e, num, leased->gen); /* a stale lease: nothing to do */
        st = pl__err(PL_ESTATE, "run '%s' is %s: nothing to execute", id,
                     pl_run_status_name(r->state.status));
        goto done;
    }
    if (!check && r->state.status == PL_RUN_CANCELLED) {
        st = pl__err(PL_ESTATE, "run '%s' is cancelled: %s", id,
                     r->state.reason ? r->state.reason : "");
        goto done;
    }
    if (!check && r->state.status == PL_RUN_SUPERSEDED) {
        st = pl__err(PL_ESTATE, "run '%s' was superseded by run '%s'", id,
                     r->state.succ);
        goto done;
    }
    /* a completed (or continued) run is final: replaying it writes nothing */
    r->check = check || (!token && (r->state.status == PL_RUN_COMPLETED ||
                                    r->state.status == PL_RUN_CONTINUED));
    if (r->check) {
        st = pl__run_execute(r, def, &ra.action, true, out);
        goto done;
    }
    /* a resume the run refuses is refused before its lease is taken, so
     * that it writes nothing (pl__suspend_resume_step() checks again under the lease) */
    if (token && r->state.status != PL_RUN_SUSPENDED) {
        st = pl__err(PL_ESTATE, "run '%s' is %s, not suspended", id,
                     pl_run_status_name(r->state.status));
        goto done;
    }
    if (token && strcmp(token, r->state.token) != 0) {
        st = pl__err(PL_ETOKEN, "wrong resume token for run '%s'", id);
        goto done;
    }
    if (!dv) /* claimed from the store's state; a ride's, from this one */
        pl__run_state_clear(&r->state);
    if (leased && leased->run != num) {
        st = pl__err(PL_ECORRUPT,
                     "the lease of run #%llu names run '%s', "
                     "which is run #%llu",
                     (unsigned long long)leased->run, id,
                     (unsigned long long)num);
        goto done;
    }
    if ((st = pl__engine_claim(e, num, id))) {
        if (dv) /* executing in this process: the caller delivers alone */
            pl__err_clear(), st = PL_OK;
        goto done;
    }
    claimed = true;
    if (dv) {
        ride.keyed = more.keyed;
        ride.inbox = &more.inbox;
        ride.ledger = more.ledger_read ? &more.ledger : NULL;
        if (!(st = pl__run_ride_begin(r, dv, &sb, &ride)))
            st = pl__run_execute(r, def, &ra.action, true, out);
        r->ride = NULL;
        goto done;
    }
    bool had = true;
    uint64_t gen = leased ? leased->gen : 0;
    if (!leased && (st = take_lease(e, num, id, wake, &gen, &had)))
        goto done;
    r->batch.gen = gen;
    r->batch.nokey_gen = 0; /* a key is not known of: the fence asks */
    r->worker = leased != NULL;
    if ((st = pl__engine_lease(e, num, gen, &r->lease_lost)) ||
        (token && (st = pl__suspend_resume_step(r, token, answer, &resume)))) {
        drop_lease(e, num, gen);
        goto done;
    }
    pl__claim_ctx cc = {.e = e,
                        .id = id,
                        .resume = token != NULL,
                        .token = token,
                        .leased = had,
                        .worker = leased != NULL,
                        .out = &r->state,
                        .steps = &resume};
    if ((st = pl__store_state_update(e->store, num, pl__claim_fn, &cc))) {
        drop_lease(e, num, gen);
        goto done;
    }
    r->state_written_us = pl__now_us();
    r->crashed_before = cc.before == PL_RUN_RUNNING;
    /* a crashed run's step count is as of its last heartbeat */
    if (r->crashed_before && (st = pl__count_steps(e, num, &r->state.steps)))
        goto done;
    st = pl__run_execute(r, def, &ra.action, true, out);
done:
    if (claimed)
        pl__engine_release(e, num);
    /* a run newer code recorded, continued directly: handed back to the
     * queue at once, for a worker running that code (a worker's take hands
     * it back itself, with its back-off: worker.c) */
    if (claimed && st == PL_ENEWERCODE && !leased && !dv && r && !r->check)
        pl__run_hand_back(e, num, r->batch.gen, PL__HAND_BACK_US);
    pl__buf_free(&sb);
    pl__buf_free(&ride.expect);
    pl__kvs_free(&more.inbox);
    pl__kvs_free(&more.ledger);
    pl__kvs_free(&resume);
    pl__run_free(r);
    pl__root_clear(&ra);
    return st;
}

int pl_run_continue(pl_outcome **out, pl_engine *e, const char *run_id,
                    const pl_run_options *opts)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_run_continue: out is NULL");
    *out = NULL;
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_continue: an engine and a valid run "
                                  "id are required");
    pl_run_options o;
    int st = run_options(&o, opts, "pl_run_continue");
    if (st)
        return st;
    if (o.if_exists != PL_IF_EXISTS_FAIL)
        return pl__err(PL_EINVAL, "pl_run_continue: if_exists applies to "
                                  "pl_run_start only");
    if (o.deadline_ms || o.deadline_in_ms) /* recorded when a run starts */
        return pl__err(PL_EINVAL, "pl_run_continue: a deadline applies to "
                                  "pl_run_start and pl_run_submit only");
    return continue_run(e, run_id, o.check, NULL, NULL, out, NULL, NULL, false);
}

int pl_run_resume(pl_outcome **out, pl_engine *e, const char *run_id,
                  const char *token, const cJSON *answer)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_run_resume: out is NULL");
    *out = NULL;
    if (!e || !pl__run_id_ok(run_id) || !token || !answer)
        return pl__err(PL_EINVAL, "pl_run_resume: an engine, a valid run id, "
                                  "a token and an answer are required");
    if (!cJSON_IsObject(answer))
        return pl__err(PL_EJSON, "pl_run_resume: the answer must be a JSON "
                                 "object");
    return continue_run(e, run_id, false, token, answer, out, NULL, NULL,
                        false);
}

/*
 * pl_run_start() found run @p id there already, and @p how says what to do:
 * continue it (a suspended one gives its recorded outcome) or give its
 * outcome without executing anything new.  Either way its root must be the
 * one asked for.
 */
static int start_existing(pl_outcome **out, pl_engine *e, const char *id,
                          const pl_action *root, pl_if_exists how)
{
    uint64_t num;
    pl__root_action ra;
    pl__tomb t;
    int st = pl__store_settle(e->store);
    if (!st)
        st = root_load(e, id, &num, &ra, NULL, NULL);
    if (st == PL_ENOTFOUND && !pl__tomb_load(e, id, &t))
        return strcmp(t.policy, root->policy) != 0
                   ? pl__err(PL_EEXIST,
                             "run '%s' existed with another root policy "
                             "('%s') and was deleted: not the run asked for",
                             id, t.policy)
                   : pl__tomb_outcome(out, id, &t);
    if (st)
        return st;
    if (strcmp(ra.action.policy, root->policy) != 0 ||
        !cJSON_Compare(ra.payload, root->payload, true))
        st = pl__err(PL_EEXIST,
                     "run '%s' exists already with another root (policy "
                     "'%s', or another payload): not the run asked for",
                     id, ra.action.policy);
    pl__root_clear(&ra);
    if (st)
        return st;
    pl__run_state rs = {0};
    pl__buf sb = {0};
    st = pl__store_state_get(e->store, num, &sb);
    if (!st)
        st = pl__run_state_decode(&rs, id, sb.data, sb.len);
    pl__buf_free(&sb);
    bool recorded = rs.status == PL_RUN_SUSPENDED ||
                    (how == PL_IF_EXISTS_OUTCOME &&
                     rs.status != PL_RUN_COMPLETED);
    if (!st && recorded)
        st = pl__recorded_outcome(out, id, &rs);
    else if (!st) /* as pl_run_continue(): a completed run is replayed */
        st = continue_run(e, id, false, NULL, NULL, out, NULL, NULL, false);
    pl__run_state_clear(&rs);
    return st;
}

int pl__run_continue_leased(pl_outcome **out, pl_engine *e,
                            const pl__lease *lease)
{
    *out = NULL;
    /* a run this worker cannot execute (its policy is not registered
     * here) keeps its lease until it expires: another worker may */
    return continue_run(e, lease->id, false, NULL, NULL, out, lease, NULL,
                        false);
}

int pl__run_continue_delivered(pl_outcome **out, pl_engine *e, const char *id,
                               pl__delivery *dv)
{
    *out = NULL;
    dv->tried = false;
    return continue_run(e, id, false, NULL, NULL, out, NULL, dv, false);
}

int pl__run_continue_woken(pl_outcome **out, pl_engine *e, const char *id)
{
    *out = NULL;
    return continue_run(e, id, false, NULL, NULL, out, NULL, NULL, true);
}
