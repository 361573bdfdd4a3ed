/*
 * chain.c -- the decorator chain: a call's decorators, outermost first, and
 * at its end the policy, whose returned steps are appended to its ledger.
 *
 * pl_next_call() runs the next decorator, or the policy once none is left;
 * a decorator may run the rest of the chain any number of times (loop) or
 * not at all.  A step recorded with pl_ctx_emit() is appended at once; when
 * a policy returns it in its list, it is passed on, not appended again.
 * The root invocation of a run is opened here too: a chain with no
 * decorators.
 */
#include <assert.h>
#include <stdlib.h>

#include "chain.h"
#include "ctx.h"
#include "invocation.h"
#include "run.h"

/* The end of every decorator chain: run the policy, record its steps. */
static int run_policy(pl_ctx *c, const pl_action *a, pl_steps *out)
{
    pl__run *r = c->run;
    pl_steps ret = {.default_actor = c->def->name};
    pl__err_clear(); /* so that a message after it is the policy's own */
    int st = c->def->fn(c, a, &ret, c->def->user);
    if (r->stop) {
        st = r->stop;
    } else if (st == PL_ECANCELLED && r->cancelled) {
        /* the run's cancellation, handed on to the caller (wait.c) */
        for (size_t i = 0; i < ret.n; i++)
            pl_step_free(ret.v[i]);
        free(ret.v);
        return st;
    } else if (st) {
        bool said = pl__errmsg_set();
        /* out of memory is this process's failure, not the policy's: the
         * run is not failed for it (see runner.c) */
        st = pl__run_fail(r, st == PL_ENOMEM ? PL_ENOMEM : PL_EPOLICY,
                          "run %s: policy '%s' at %s returned "
                          "%s%s%s",
                          r->id, c->def->name, c->path, pl_status_name(st),
                          said ? ": " : "", said ? pl_errmsg() : "");
    }
    for (size_t i = 0; !st && i < ret.n; i++) {
        pl_step *s = ret.v[i];
        if (s->in_ledger) { /* pl_ctx_emit() recorded it already */
            assert(s->id);  /* pl__step_place() named it */
            if (pl__steps_push(out, s))
                st = pl__run_fail(r, PL_ENOMEM, "out of memory");
            else
                ret.v[i] = NULL;
            continue;
        }
        if (s->mp_len > r->e->max_payload) {
            st = pl__run_fail(r, PL_ELIMIT,
                              "run %s: policy '%s' at %s "
                              "returned a step with a payload "
                              "of %zu bytes; the limit is %zu",
                              r->id, c->def->name, c->path, s->mp_len,
                              r->e->max_payload);
            break;
        }
        const char *code = NULL;
        if (s->type == PL_STEP_ACTION_CALL) {
            const uint8_t *v;
            size_t vn;
            const char *name;
            size_t name_len;
            if (pl__map_find(s->mp, s->mp_len, "policy", &v, &vn) &&
                pl__mp_str(v, vn, &name, &name_len)) {
                const pl_policy_def *d = pl__registry_find_n(r->e->reg, name,
                                                             name_len);
                code = d ? d->code_version : NULL;
            }
        }
        int64_t time_us;
        uint32_t seq = c->next_seq;
        st = pl__inv_append(c, s->type, s->actor, s->mp, s->mp_len, code, NULL,
                            &s->replayed, &time_us);
        if (!st && (pl__step_place(s, c->path, seq, time_us) ||
                    pl__steps_push(out, s)))
            st = pl__run_fail(r, PL_ENOMEM, "out of memory");
        if (!st)
            ret.v[i] = NULL; /* moved into out */
    }
    for (size_t i = 0; i < ret.n; i++)
        pl_step_free(ret.v[i]);
    free(ret.v);
    return st;
}

int pl_next_call(pl_next *next, pl_ctx *c, const pl_action *in, pl_steps *out)
{
    int st = pl__ctx_check(c, "pl_next_call");
    if (st)
        return st;
    if (!next || !in || !out)
        return pl__err(PL_EINVAL, "pl_next_call: NULL argument");
    /* a decorator may pass on an action of its own, of its version */
    pl_action current;
    if (pl__struct_in(&current, in, &pl__action_layout, "pl_next_call"))
        return PL_EINVAL;
    const pl_action *a = &current;
    if (c->run->stop)
        return c->run->stop;
    assert(next->i <= next->n); /* each link passes on the rest */
    if (next->i < next->n) {
        pl_next sub = *next;
        sub.i++;
        const pl_decorator *d = &next->d[next->i];
        return d->fn(c, a, out, d, &sub);
    }
    return run_policy(c, a, out);
}

int pl__run_root(pl__run *r, const pl_policy_def *def, const pl_action *root,
                 bool replaying, pl_steps *out)
{
    pl_ctx *c = NULL;
    int st = pl__inv_open(r, NULL, 0, replaying, def, &c);
    if (!st)
        st = pl__inv_append_seed(c, root->seed);
    if (st)
        return st;
    out->default_actor = def->name;
    pl_next next = {NULL, 0, 0};
    const void *outer = pl__running_run(); /* a run started in a policy */
    pl__set_running_run(r);
    st = pl_next_call(&next, c, root, out);
    pl__set_running_run(outer);
    assert(r->cur == c || r->stop); /* as for a callee (callee.c) */
    return st ? st : pl__inv_finish(c);
}

/* ---- emitting steps from decorators -------------------------------------------------------- */

int pl_ctx_emit(pl_ctx *c, pl_steps *out, pl_step_type type, const char *actor,
                const cJSON *payload)
{
    int st = pl__ctx_check(c, "pl_ctx_emit");
    if (st)
        return st;
    if (!out || !payload)
        return pl__err(PL_EINVAL, "pl_ctx_emit: NULL %s",
                       out ? "payload" : "list");
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    if (!actor)
        actor = c->def->name;
    if (!pl_step_type_name(type) || type > PL_STEP_ERROR)
        return pl__err(PL_EINVAL,
                       "pl_ctx_emit: step type %d is not one a policy "
                       "emits",
                       (int)type);
    if (!pl__name_ok(actor))
        return pl__err(PL_EINVAL,
                       "pl_ctx_emit: bad actor name (1..%d bytes of UTF-8, "
                       "no control characters)",
                       PL_MAX_NAME);
    pl__buf b = {0};
    st = pl__payload_encode(&b, payload, r->e->max_payload);
    if (st) {
        pl__buf_free(&b);
        return st;
    }
    pl_step *s = pl__step_new(type, actor, strlen(actor), b.data, b.len);
    pl__buf_free(&b);
    if (!s)
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    uint32_t seq = c->next_seq;
    int64_t time_us;
    st = pl__inv_append(c, type, actor, s->mp, s->mp_len, NULL, NULL,
                        &s->replayed, &time_us);
    if (!st && (st = pl__step_place(s, c->path, seq, time_us)))
        st = pl__run_fail(r, st, "out of memory");
    if (!st && (st = pl__steps_push(out, s)))
        st = pl__run_fail(r, st, "out of memory");
    if (st)
        pl_step_free(s);
    return st;
}
