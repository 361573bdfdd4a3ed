/*
 * diverge.c -- describing a replay that differs from its ledger.
 *
 * The messages of PL_ENONDET name both steps for a person; the events made
 * here carry the same facts as fields (pl_replay_diff), so that a tool can
 * report a divergence, or a call recorded by other code, without reading
 * a message.  Nothing here changes the run: the caller fails it.
 *
 * A step's code identity is its own for an action_call (the callee's), else
 * its invocation's: the code its caller's action_call names (read back
 * from the store: a divergence is rare), or for the root the code the run's
 * record names.
 */
#include <stdio.h>
#include <stdlib.h>

#include "diverge.h"
#include "path.h"

/* The code the ledger names for invocation @p c; caller frees. */
static char *invocation_code(pl_ctx *c)
{
    pl__run *r = c->run;
    if (!c->parent)
        return r->root_code ? pl__strdup(r->root_code) : NULL;
    pl__kvs got = {0};
    char *code = NULL;
    pl__rec call;
    pl_ctx *p = c->parent;
    if (!pl__store_read(r->e->store, p->prefix, p->prefix_len, c->call_seq, 1,
                        1, &got) &&
        got.n == 1 &&
        !pl__rec_decode_lazy(&call, pl__kvs_val(&got, 0), got.e[0].vlen) &&
        call.type == PL_STEP_ACTION_CALL && call.code)
        code = pl__strndup(call.code, call.code_len);
    pl__kvs_free(&got);
    return code;
}

char *pl__recorded_code(pl_ctx *c, const pl__rec *rec)
{
    if (rec->type == PL_STEP_ACTION_CALL) /* a call names its callee's */
        return rec->code ? pl__strndup(rec->code, rec->code_len) : NULL;
    return invocation_code(c);
}

static void emit_diff(pl_ctx *c, pl_event_kind kind, const pl__rec *rec,
                      pl_step_type type, const char *actor, char *new_payload,
                      const char *code, const char *detail)
{
    pl__run *r = c->run;
    char id[PL__PATH_MAX + 16], rec_actor[PL_MAX_NAME + 1];
    snprintf(id, sizeof id, "%s:%u", c->path, c->next_seq);
    snprintf(rec_actor, sizeof rec_actor, "%.*s", (int)rec->actor_len,
             rec->actor);
    char *was = rec->mirrored
                    ? NULL
                    : pl__payload_text(rec->payload, rec->payload_len, 200);
    char *rcode = pl__recorded_code(c, rec);
    pl_replay_diff d = {
        .step_id = id,
        .recorded_type = rec->type,
        .recorded_actor = rec_actor,
        .recorded_payload = was,
        .recorded_code = rcode,
        .new_type = type,
        .new_actor = type ? actor : NULL,
        .new_payload = new_payload,
        .new_code = type == PL_STEP_ACTION_CALL ? code : c->def->code_version,
    };
    pl__emit_diff(r, kind, c->path, c->next_seq, rec_actor, rec->type, detail,
                  &d);
    free(was);
    free(rcode);
}

void pl__diverged(pl_ctx *c, const pl__rec *rec, pl_step_type type,
                  const char *actor, const uint8_t *mp, size_t mp_len,
                  const char *code)
{
    if (!c->run->e->on_event || !rec)
        return;
    char *now = mp ? pl__payload_text(mp, mp_len, 200) : NULL;
    emit_diff(c, PL_EVENT_DIVERGED, rec, type, actor, now, code, NULL);
    free(now);
}

void pl__diverged_text(pl_ctx *c, const pl__rec *rec, pl_step_type type,
                       const char *actor, const char *now_text,
                       const char *detail)
{
    if (!c->run->e->on_event || !rec)
        return;
    char *now = now_text ? pl__strdup(now_text) : NULL;
    emit_diff(c, PL_EVENT_DIVERGED, rec, type, actor, now, NULL, detail);
    free(now);
}

void pl__code_changed(pl_ctx *c, const pl__rec *rec, const char *actor,
                      const char *code)
{
    pl__run *r = c->run;
    if (!r->e->on_event)
        return;
    char *detail = pl__asprintf(
        "step %s:%u was recorded by code '%.*s', replayed by '%s'", c->path,
        c->next_seq, rec->code ? (int)rec->code_len : 1,
        rec->code ? rec->code : "-", code ? code : "-");
    char *now = rec->mirrored
                    ? NULL
                    : pl__payload_text(rec->payload, rec->payload_len, 200);
    emit_diff(c, PL_EVENT_CODE_CHANGED, rec, rec->type, actor, now, code,
              detail);
    free(now);
    free(detail);
}
