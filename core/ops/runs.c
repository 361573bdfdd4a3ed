/*
 * runs.c -- a run's records and the run list: pl_run_get(), each run's
 * info and state decoded into a pl_run_info, and pl_engine_runs() /
 * pl_engine_runs_from() a page at a time: the store's run records, then
 * the states of the whole page in one read, and the leases of its running
 * runs in another (on PostgreSQL one query each, never one a run).  A run
 * deleted while it is listed is left out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CHUNK 256 /* runs a page */

/* ---- run records ------------------------------------------------------------------- */

typedef struct info_impl {
    pl_run_info pub; /* first: pl_run_info_free() casts back */
    char *id;
    pl__run_info ri;
    pl__run_state st;
    cJSON *payload;
    cJSON *prompt;
} info_impl;

void pl_run_info_free(pl_run_info *pub)
{
    info_impl *in = (info_impl *)pub;
    if (!in)
        return;
    free(in->id);
    pl__run_info_clear(&in->ri);
    pl__run_state_clear(&in->st);
    cJSON_Delete(in->payload);
    cJSON_Delete(in->prompt);
    free(in);
}

/* pl__run_info_build(): internal.h */
int pl__run_info_build(pl_engine *e, const char *id, size_t id_len,
                       uint64_t num, const uint8_t *info, size_t info_len,
                       const pl__buf *state, bool *lease_later,
                       pl_run_info **out)
{
    *out = NULL;
    info_impl *in = calloc(1, sizeof *in);
    if (!in || !(in->id = pl__strndup(id, id_len))) {
        free(in);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    pl__buf sb = {0};
    int st = PL_OK;
    /* the id is the runs key: bytes that are no run id (a NUL, say) are
     * corruption, and the records' checksums bind them to the id */
    if (strlen(in->id) != id_len || !pl__run_id_ok(in->id))
        st = pl__err(PL_ECORRUPT, "a run's id is malformed");
    if (!st)
        st = pl__run_info_decode(&in->ri, in->id, info, info_len);
    if (!st && !state)
        st = pl__store_state_get(e->store, num, &sb);
    if (!st)
        st = state ? pl__run_state_decode(&in->st, in->id, state->data,
                                          state->len)
                   : pl__run_state_decode(&in->st, in->id, sb.data, sb.len);
    pl__buf_free(&sb);
    uint64_t again;
    if (st == PL_ECORRUPT && /* deleted since its record was read */
        pl__store_run_find(e->store, in->id, &again, NULL) == PL_ENOTFOUND)
        st = PL_ENOTFOUND;
    if (!st)
        st = pl__payload_decode(&in->payload, in->ri.payload,
                                in->ri.payload_len);
    /* a suspended run's alone: one cancelled while suspended has none,
     * also when an older version's cancellation kept them in its record */
    bool suspended = in->st.status == PL_RUN_SUSPENDED;
    if (!st && suspended && in->st.prompt)
        st = pl__payload_decode(&in->prompt, in->st.prompt, in->st.prompt_len);
    if (st) {
        int keep = st;
        pl__err_run(st, in->id);
        pl_run_info_free(&in->pub);
        return keep;
    }
    pl_run_info *p = &in->pub;
    p->id = in->id;
    p->policy = in->ri.policy;
    p->payload = in->payload;
    p->status = in->st.status;
    p->steps = in->st.steps;
    p->created_us = in->ri.created_us;
    p->updated_us = in->st.updated_us;
    p->heartbeat_us = in->st.heartbeat_us;
    p->owner_pid = in->st.owner_pid;
    p->owner_host = in->st.owner_host;
    p->owner_alive = in->st.status == PL_RUN_RUNNING &&
                     (pl__owner_alive(e, &in->st) ||
                      (in->st.owner_pid == e->pid &&
                       !strcmp(in->st.owner_host, e->host) &&
                       pl__engine_owns(e, num)));
    bool ask = p->status == PL_RUN_RUNNING && !pl__engine_owns(e, num);
    if (lease_later)
        *lease_later = ask;
    else if (ask)
        p->owner_alive = pl__run_lease_alive(e, num, p->owner_alive);
    p->attempts = in->st.attempts;
    p->error = in->st.error;
    p->reason = in->st.reason;
    p->suspended_path = suspended || in->st.status == PL_RUN_WAITING
                            ? in->st.susp_path
                            : NULL;
    p->prompt = in->prompt;
    p->resume_token = in->st.status == PL_RUN_SUSPENDED && in->st.token[0]
                          ? in->st.token
                          : NULL;
    p->wake_ms = in->st.wait_until_ms;
    p->wait_event = in->st.wait_event;
    p->deadline_ms = in->ri.deadline_ms;
    p->code = in->ri.code;
    p->successor = in->st.succ;
    p->predecessor = in->st.pred;
    *out = p;
    return PL_OK;
}

int pl_run_get(pl_run_info **out, pl_engine *e, const char *run_id)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_run_get: out is NULL");
    *out = NULL;
    if (!e || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_get: an engine and a valid run id "
                                  "are required");
    uint64_t num;
    pl__buf info = {0};
    int st = pl__store_settle(e->store); /* steps may be in the journal */
    if (!st)
        st = pl__store_run_find(e->store, run_id, &num, &info);
    if (!st)
        st = pl__run_info_build(e, run_id, strlen(run_id), num, info.data,
                                info.len, NULL, NULL, out);
    pl__buf_free(&info);
    return st;
}

int pl_engine_runs(pl_engine *e, pl_run_visit_fn visit, void *user)
{
    if (!e || !visit)
        return pl__err(PL_EINVAL, "pl_engine_runs: engine and visitor are "
                                  "required");
    return pl_engine_runs_from(e, NULL, visit, user);
}

/* The states of a page's runs, and the leases of its running runs that
 * this engine does not execute, each read with one query. */
typedef struct page_reads {
    uint64_t *nums;
    pl__buf *states; /* NULL: read one by one (pl__run_info_build()) */
    pl_run_info **infos;
    bool *ask;
    uint64_t *lease_nums;
    pl__lease *leases;
    bool *found;
} page_reads;

static void page_reads_free(page_reads *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r->states)
            pl__buf_free(&r->states[i]);
        pl_run_info_free(r->infos[i]);
    }
    free(r->nums);
    free(r->states);
    free(r->infos);
    free(r->ask);
    free(r->lease_nums);
    free(r->leases);
    free(r->found);
}

/* Ask the leases of the runs [@p from, @p n) of @p r that need it, in one
 * query; a lease that cannot be read leaves what the state record says, as
 * pl__run_lease_alive() does. */
static void page_leases(pl_engine *e, page_reads *r, size_t from, size_t n)
{
    size_t m = 0;
    for (size_t i = from; i < n; i++)
        if (r->infos[i] && r->ask[i])
            r->lease_nums[m++] = r->nums[i];
    if (!m)
        return;
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    int st = pl__store_leases_get(e->store, r->lease_nums, m, r->leases,
                                  r->found);
    pl__errmsg_restore(saved);
    for (size_t i = from, k = 0; i < n; i++) {
        if (!r->infos[i] || !r->ask[i])
            continue;
        pl_run_info *p = r->infos[i];
        p->owner_alive = st ? pl__run_lease_alive(e, r->nums[i], p->owner_alive)
                            : pl__lease_alive(e,
                                              r->found[k] ? &r->leases[k]
                                                          : NULL,
                                              p->owner_alive);
        k++;
    }
}

/* PL_ECORRUPT for run record @p i of @p page, too short for its number or
 * under a key longer than an id (named by the run before it). */
static int malformed(const pl__kvs *page, size_t i, const char *after)
{
    const pl__kv *kv = &page->e[i];
    if (kv->klen <= PL_MAX_RUN_ID)
        return pl__err(PL_ECORRUPT, "run '%.*s': its record is malformed",
                       (int)kv->klen, (const char *)pl__kvs_key(page, i));
    const pl__kv *prev = i ? &page->e[i - 1] : NULL;
    return pl__err(PL_ECORRUPT, "a run record after run '%.*s' is malformed",
                   prev ? (int)prev->klen : (int)strlen(after),
                   prev ? (const char *)pl__kvs_key(page, i - 1) : after);
}

/* Tell @p o->damaged of run @p i of @p page, whose record failed with
 * @p st (its message set): PL_ECORRUPT with an id that can be told, else
 * @p st itself, which ends the listing. */
static int tell_damaged(const pl_runs_options *o, const pl__kvs *page, size_t i,
                        int st, void *user)
{
    const pl__kv *kv = &page->e[i];
    if (!o->damaged || st != PL_ECORRUPT || kv->klen > PL_MAX_RUN_ID)
        return st;
    char id[PL_MAX_RUN_ID + 1], why[PL__ERRMSG_MAX];
    memcpy(id, pl__kvs_key(page, i), kv->klen);
    id[kv->klen] = '\0';
    pl__errmsg_save(why);
    pl__err_clear();
    return o->damaged(id, st, why, user);
}

/*
 * Visit the runs of @p page.  Their states are read together (when that
 * fails, each with its run, so that a run whose records are bad fails
 * where it stands, after the runs before it were visited); a run whose
 * record cannot be read goes to @p o->damaged, when set, and the runs past
 * it are visited in turn.
 */
static int visit_page(pl_engine *e, const pl__kvs *page, const char *after,
                      const pl_runs_options *o, pl_run_visit_fn visit,
                      void *user)
{
    size_t n = page->n;
    page_reads r = {0};
    r.nums = calloc(n, sizeof *r.nums);
    r.infos = calloc(n, sizeof *r.infos);
    r.ask = calloc(n, sizeof *r.ask);
    r.lease_nums = calloc(n, sizeof *r.lease_nums);
    r.leases = calloc(n, sizeof *r.leases);
    r.found = calloc(n, sizeof *r.found);
    if (!r.nums || !r.infos || !r.ask || !r.lease_nums || !r.leases ||
        !r.found) {
        page_reads_free(&r, 0);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    int st = PL_OK;
    for (size_t i = 0; i < n; i++) {
        const pl__kv *kv = &page->e[i];
        if (kv->vlen >= 8 && kv->klen <= PL_MAX_RUN_ID) /* else said below */
            r.nums[i] = pl__get_be64(pl__kvs_val(page, i));
    }
    char saved[PL__ERRMSG_MAX];
    pl__errmsg_save(saved);
    if ((r.states = calloc(n, sizeof *r.states)) &&
        pl__store_states_get(e->store, r.nums, n, r.states) != PL_OK) {
        for (size_t i = 0; i < n; i++)
            pl__buf_free(&r.states[i]);
        free(r.states);
        r.states = NULL;
    }
    pl__errmsg_restore(saved);
    /* build every info first (stopping at the first bad run), so that
     * the leases are asked together; then visit; then go past the bad run
     * when o->damaged is told of it */
    for (size_t from = 0; !st && from < n;) {
        size_t built = from;
        int build_st = PL_OK;
        for (; built < n; built++) {
            const pl__kv *kv = &page->e[built];
            if (kv->vlen < 8 || kv->klen > PL_MAX_RUN_ID) {
                build_st = malformed(page, built, after);
                break;
            }
            const uint8_t *v = pl__kvs_val(page, built);
            build_st = pl__run_info_build(e,
                                          (const char *)pl__kvs_key(page,
                                                                    built),
                                          kv->klen, r.nums[built], v + 8,
                                          kv->vlen - 8,
                                          r.states ? &r.states[built] : NULL,
                                          &r.ask[built], &r.infos[built]);
            if (build_st == PL_ENOTFOUND) { /* deleted meanwhile: gone */
                pl__err_clear();
                build_st = PL_OK;
                continue;
            }
            if (build_st)
                break;
        }
        char built_err[PL__ERRMSG_MAX];
        pl__errmsg_save(built_err);
        page_leases(e, &r, from, built);
        for (size_t i = from; !st && i < built; i++)
            if (r.infos[i])
                st = visit(r.infos[i], user);
        if (st || !build_st)
            break;
        pl__errmsg_restore(built_err);
        st = tell_damaged(o, page, built, build_st, user);
        from = built + 1;
    }
    page_reads_free(&r, n);
    return st;
}

int pl_engine_runs_from(pl_engine *e, const pl_runs_options *opts,
                        pl_run_visit_fn visit, void *user)
{
    if (!e || !visit)
        return pl__err(PL_EINVAL, "pl_engine_runs_from: engine and visitor "
                                  "are required");
    pl_runs_options o;
    int st = pl__struct_in(&o, opts, &pl__runs_options_layout,
                           "pl_engine_runs_from");
    if (st)
        return st;
    char after[PL_MAX_RUN_ID + 1] = "";
    if (o.after) {
        size_t n = strlen(o.after);
        if (n > PL_MAX_RUN_ID)
            return pl__err(PL_EINVAL, "pl_engine_runs_from: the cursor is "
                                      "longer than a run id");
        memcpy(after, o.after, n + 1);
    }
    pl__kvs page = {0};
    st = pl__store_settle(e->store);
    for (; !st;) {
        /* the store hands out ids in strictly increasing (reverse:
         * decreasing) order, each past after, or fails: no run is listed
         * twice */
        st = pl__store_runs(e->store, after[0] ? after : NULL, o.reverse, CHUNK,
                            &page);
        if (st) {
            st = pl__err(st, "listing runs after '%s': %s", after, pl_errmsg());
            break;
        }
        if (!page.n)
            break;
        st = visit_page(e, &page, after, &o, visit, user);
        if (st)
            break;
        const pl__kv *last = &page.e[page.n - 1];
        if (last->klen > PL_MAX_RUN_ID) { /* told, but no cursor passes it */
            st = malformed(&page, page.n - 1, after);
            break;
        }
        memcpy(after, pl__kvs_key(&page, page.n - 1), last->klen);
        after[last->klen] = '\0';
    }
    pl__kvs_free(&page);
    return st;
}
