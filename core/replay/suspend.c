/*
 * suspend.c -- suspending a run to wait for an answer from outside.
 *
 * A suspension is a `suspend` step holding the prompt; the run stops with
 * PL_ESUSPENDED and records a resume token, the suspend step's place and the
 * prompt.  pl_run_resume() (runner.c) writes the answer as a `resume` step
 * right after it, and the replay that follows reads it back, here for a
 * policy's suspension, in indoubt.c for the engine's own:
 *
 *   seq     type      actor                       payload
 *   n       suspend   the policy, or "engine"     {"prompt": {...}}
 *   n + 1   resume    "human"                     {"answer": {...}}
 *
 * Until the answer is there, every replay that reaches the suspension
 * suspends again, with a new token.
 */
#include <assert.h>
#include <stdio.h>

#include "ctx.h"
#include "diverge.h"
#include "invocation.h"
#include "path.h"
#include "run.h"
#include "suspend.h"

void pl__suspend_here(pl_ctx *c, uint32_t seq, const uint8_t *prompt,
                      size_t prompt_len)
{
    pl__run *r = c->run;
    /* only a going run suspends, at a step its ledger holds */
    assert(!r->stop && seq < c->next_seq);
    uint8_t tok[16];
    if (pl__random(tok, sizeof tok)) {
        pl__run_fail(r, PL_EIO, "%s", pl_errmsg());
        return;
    }
    pl__hex(r->token, tok, sizeof tok);
    snprintf(r->susp_path, sizeof r->susp_path, "%s", c->path);
    r->susp_seq = seq;
    pl__buf_reset(&r->prompt);
    if (prompt && pl__buf_append(&r->prompt, prompt, prompt_len)) {
        pl__run_fail(r, PL_ENOMEM, "out of memory");
        return;
    }
    r->stop = PL_ESUSPENDED;
    pl__err(PL_ESUSPENDED, "run %s suspended at %s:%u", r->id, c->path, seq);
}

int pl_ctx_suspend(cJSON **out_answer, pl_ctx *c, const cJSON *prompt)
{
    if (out_answer)
        *out_answer = NULL;
    int st = pl__ctx_check(c, "pl_ctx_suspend");
    if (st)
        return st;
    if (!out_answer || !prompt)
        return pl__err(PL_EINVAL, "pl_ctx_suspend: %s is NULL",
                       prompt ? "out_answer" : "the prompt");
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    if (!cJSON_IsObject(prompt))
        return pl__run_fail(r, PL_EJSON,
                            "run %s: policy '%s' at %s: the "
                            "suspend prompt must be an object",
                            r->id, c->def->name, c->path);
    pl__buf b = {0};
    st = pl__wrap_encode(&b, "prompt", prompt, r->e->max_payload);
    if (st) {
        pl__buf_free(&b);
        return pl__run_fail(r, st, "run %s: suspend at %s: %s", r->id, c->path,
                            pl_errmsg());
    }
    uint32_t seq = c->next_seq;
    bool replayed;
    st = pl__inv_append(c, PL_STEP_SUSPEND, c->def->name, b.data, b.len, NULL,
                        NULL, &replayed, NULL);
    if (!st && !replayed) {
        const uint8_t *v;
        size_t vn;
        if (pl__map_find(b.data, b.len, "prompt", &v, &vn))
            pl__suspend_here(c, seq, v, vn);
        st = r->stop;
    }
    pl__buf_free(&b);
    if (st)
        return st;
    const pl__rec *rec;
    if ((st = pl__suspend_answer(c, seq, &rec)))
        return st;
    const uint8_t *v;
    size_t vn;
    if (!pl__map_find(rec->payload, rec->payload_len, "answer", &v, &vn)) {
        pl__diverged(c, rec, PL_STEP_RESUME, "human", NULL, 0, NULL);
        return pl__run_fail(r, PL_ENONDET,
                            "run %s: after the suspension at %s:%u the "
                            "ledger records a resume without an answer",
                            r->id, c->path, seq);
    }
    if ((st = pl__payload_decode(out_answer, v, vn)))
        return pl__run_fail(r, st, "run %s: %s", r->id, pl_errmsg());
    if ((st = pl__inv_consume_checked(c))) {
        cJSON_Delete(*out_answer);
        *out_answer = NULL;
    }
    return st;
}

int pl__suspend_answer(pl_ctx *c, uint32_t seq, const pl__rec **rec)
{
    pl__run *r = c->run;
    int st = pl__inv_peek(c, rec);
    if (st)
        return st;
    if (!*rec) {
        if (r->check)
            return pl__run_fail(r, PL_ECHECK,
                                "check: run %s is suspended at %s:%u", r->id,
                                c->path, seq);
        pl__suspend_here(c, seq, NULL, 0); /* no answer yet: wait again */
        return r->stop;
    }
    if ((*rec)->type != PL_STEP_RESUME) {
        pl__diverged(c, *rec, PL_STEP_RESUME, "human", NULL, 0, NULL);
        return pl__run_fail(r, PL_ENONDET,
                            "run %s: after the suspension at %s:%u the "
                            "ledger records %s, not a resume",
                            r->id, c->path, seq,
                            pl_step_type_name((*rec)->type));
    }
    return PL_OK;
}

/* The `resume` step of pl_run_resume() (suspend.h). */
int pl__suspend_resume_step(pl__run *r, const char *token, const cJSON *answer,
                            pl__kvs *out)
{
    pl_engine *e = r->e;
    pl__buf sb = {0}, payload = {0}, rec = {0};
    pl__kvs got = {0};
    pl__run_state st = {0};
    uint32_t comps[PL_MAX_DEPTH];
    unsigned depth;
    int rc = pl__store_state_get(e->store, r->num, &sb);
    if (!rc)
        rc = pl__run_state_decode(&st, r->id, sb.data, sb.len);
    if (rc)
        goto done;
    if (st.status != PL_RUN_SUSPENDED) {
        rc = pl__err(PL_ESTATE, "run '%s' is %s, not suspended", r->id,
                     pl_run_status_name(st.status));
        goto done;
    }
    if (strcmp(token, st.token) != 0) {
        rc = pl__err(PL_ETOKEN, "wrong resume token for run '%s'", r->id);
        goto done;
    }
    if (!st.susp_path || pl__path_parse(st.susp_path, comps, &depth)) {
        rc = pl__err(PL_ECORRUPT,
                     "run '%s' is suspended at a malformed "
                     "path",
                     r->id);
        goto done;
    }
    uint8_t key[PL__KEY_MAX];
    size_t plen = pl__ledger_prefix(key, r->num, comps, depth);
    rc = pl__store_read(e->store, key, plen, st.susp_seq, 1, 1, &got);
    pl__rec sr;
    if (!rc && (got.n != 1 ||
                pl__rec_decode(&sr, pl__kvs_val(&got, 0), got.e[0].vlen) ||
                sr.type != PL_STEP_SUSPEND))
        rc = pl__err(PL_ECORRUPT, "run '%s': no suspend step at %s:%u", r->id,
                     st.susp_path, st.susp_seq);
    uint8_t prev[PL_HASH_LEN];
    pl__put_be32(key + plen, st.susp_seq);
    if (!rc)
        rc = pl__step_hash(r->hasher, key, plen + 4, pl__kvs_val(&got, 0),
                           got.e[0].vlen, prev);
    if (!rc)
        rc = pl__wrap_encode(&payload, "answer", answer, e->max_payload);
    uint32_t seq = st.susp_seq + 1;
    if (!rc)
        rc = pl__rec_encode(&rec, seq, pl__now_us(), PL_STEP_RESUME, "human",
                            prev, NULL, NULL, payload.data, payload.len);
    pl__put_be32(key + plen, seq);
    if (!rc)
        rc = pl__kvs_add(out, key, plen + 4, rec.data, rec.len);
done:
    pl__buf_free(&sb);
    pl__buf_free(&payload);
    pl__buf_free(&rec);
    pl__kvs_free(&got);
    pl__run_state_clear(&st);
    return rc;
}
