/*
 * runs.c -- reading runs' records: pl_run_get() and the run list
 * (pl_engine_runs(), pl_engine_runs_from()), each run's info and state
 * decoded into a pl_run_info.
 *
 * It reads in bounded chunks (short read transactions, copied out), so a
 * visitor may take its time and even write to the store.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CHUNK 256 /* run records per read */

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

static int info_build(pl_engine *e, const char *id, size_t id_len, uint64_t num,
                      const uint8_t *info, size_t info_len, pl_run_info **out)
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
    if (!st)
        st = pl__store_state_get(e->store, num, &sb);
    uint64_t again;
    if (st == PL_ECORRUPT && /* deleted since its record was read */
        pl__store_run_find(e->store, in->id, &again, NULL) == PL_ENOTFOUND)
        st = PL_ENOTFOUND;
    if (!st)
        st = pl__run_state_decode(&in->st, in->id, sb.data, sb.len);
    pl__buf_free(&sb);
    if (!st)
        st = pl__payload_decode(&in->payload, in->ri.payload,
                                in->ri.payload_len);
    if (!st && in->st.prompt)
        st = pl__payload_decode(&in->prompt, in->st.prompt, in->st.prompt_len);
    if (st) {
        int keep = st;
        pl__err(st, "run '%s': %s", in->id, pl_errmsg());
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
    if (p->status == PL_RUN_RUNNING && !pl__engine_owns(e, num))
        p->owner_alive = pl__run_lease_alive(e, num, p->owner_alive);
    p->attempts = in->st.attempts;
    p->error = in->st.error;
    p->reason = in->st.reason;
    p->suspended_path = in->st.susp_path;
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
        st = info_build(e, run_id, strlen(run_id), num, info.data, info.len,
                        out);
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
        for (size_t i = 0; !st && i < page.n; i++) {
            const pl__kv *kv = &page.e[i];
            if (kv->vlen < 8 || kv->klen > PL_MAX_RUN_ID) {
                st = pl__err(PL_ECORRUPT,
                             "a run record after run '%s' is "
                             "malformed",
                             after);
                break;
            }
            const uint8_t *v = pl__kvs_val(&page, i);
            pl_run_info *info;
            st = info_build(e, (const char *)pl__kvs_key(&page, i), kv->klen,
                            pl__get_be64(v), v + 8, kv->vlen - 8, &info);
            if (st == PL_ENOTFOUND) { /* deleted meanwhile: gone */
                pl__err_clear();
                st = PL_OK;
                continue;
            }
            if (st)
                break;
            st = visit(info, user);
            pl_run_info_free(info);
        }
        if (st)
            break;
        const pl__kv *last = &page.e[page.n - 1];
        memcpy(after, pl__kvs_key(&page, page.n - 1), last->klen);
        after[last->klen] = '\0';
    }
    pl__kvs_free(&page);
    return st;
}
