/*
 * version.c -- pl_ctx_version: code versions inside a policy
 * (docs/design.md §6.1).
 *
 * A version point is a `side_effect` step by the policy, its marker:
 *
 *   {"name": "version", "change": "<change id>", "version": <n>}
 *
 * recorded when a run first reaches the point, with the newest version the
 * code knows.  On replay the step at the cursor decides:
 *
 *   - a marker of this change: the run takes the recorded version, which
 *     must lie in [min_supported, max_supported];
 *   - any other step: the run was recorded before the change (or the point
 *     was added after it passed here), and takes PL_VERSION_DEFAULT without
 *     consuming anything;
 *   - nothing (past the recorded end): the marker is appended.
 *
 * A version below what the code supports fails the run at once with
 * PL_ECODEVERSION naming the change, rather than a divergence later.  A
 * recorded version above it means newer code recorded the run (a rolling
 * deploy, old and new workers on one queue): the execution stops with
 * PL_ENEWERCODE, a stop that records nothing and leaves the run as it was
 * for newer code (runner.c hands it back to the queue).  The
 * marker is a step like any other: the checked reader reads it, the hash
 * chain covers it, and it is committed with the run's next sync point.
 * A user's side effect ({"name", "value"}) never has "change": the two
 * cannot be taken for each other.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ctx.h"
#include "invocation.h"
#include "run.h"

/* The change id and version of a marker record, or false if @p rec is
 * no marker. */
static bool marker_of(const pl__rec *rec, const char *actor, const char **id,
                      size_t *id_len, uint64_t *version)
{
    const uint8_t *v;
    size_t vn;
    const char *name;
    size_t name_len;
    return rec->type == PL_STEP_SIDE_EFFECT && pl__rec_actor_is(rec, actor) &&
           pl__map_find(rec->payload, rec->payload_len, "name", &v, &vn) &&
           pl__mp_str(v, vn, &name, &name_len) && name_len == 7 &&
           memcmp(name, "version", 7) == 0 &&
           pl__map_find(rec->payload, rec->payload_len, "change", &v, &vn) &&
           pl__mp_str(v, vn, id, id_len) &&
           pl__map_find(rec->payload, rec->payload_len, "version", &v, &vn) &&
           pl__mp_uint(v, vn, version);
}

static int unsupported(pl_ctx *c, const char *change, unsigned long long got,
                       bool recorded, int min, int max)
{
    pl__run *r = c->run;
    bool newer = recorded && got > (unsigned long long)max;
    pl__emit_version(r, c->path, c->next_seq, c->def->name, change,
                     recorded ? (int)(got > INT32_MAX ? INT32_MAX : got)
                              : PL_VERSION_DEFAULT,
                     recorded, newer ? PL_ENEWERCODE : PL_ECODEVERSION);
    if (newer)
        return pl__run_fail(r, PL_ENEWERCODE,
                            "run %s, invocation %s, step %u: change '%s' was "
                            "recorded at version %llu, by newer code; this "
                            "code supports versions %d to %d: the run is left "
                            "as it was, for newer code",
                            r->id, c->path, c->next_seq, change, got, min, max);
    if (recorded)
        return pl__run_fail(r, PL_ECODEVERSION,
                            "run %s, invocation %s, step %u: change '%s' was "
                            "recorded at version %llu; this code supports "
                            "versions %d to %d",
                            r->id, c->path, c->next_seq, change, got, min, max);
    return pl__run_fail(r, PL_ECODEVERSION,
                        "run %s, invocation %s, step %u: the run was recorded "
                        "before change '%s' (version %d, the default); this "
                        "code supports versions %d to %d",
                        r->id, c->path, c->next_seq, change, PL_VERSION_DEFAULT,
                        min, max);
}

static int append_marker(pl_ctx *c, const char *change, int version)
{
    pl__run *r = c->run;
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "name", "version") ||
        !cJSON_AddStringToObject(m, "change", change) ||
        !cJSON_AddNumberToObject(m, "version", version)) {
        cJSON_Delete(m);
        return pl__run_fail(r, PL_ENOMEM, "out of memory");
    }
    pl__buf b = {0};
    int st = pl__payload_encode(&b, m, r->e->max_payload);
    cJSON_Delete(m);
    bool replayed;
    if (!st)
        st = pl__inv_append(c, PL_STEP_SIDE_EFFECT, c->def->name, b.data, b.len,
                            NULL, NULL, &replayed, NULL);
    else
        st = pl__run_fail(r, st, "run %s: version marker '%s': %s", r->id,
                          change, pl_errmsg());
    pl__buf_free(&b);
    return st;
}

int pl_ctx_version(int *out, pl_ctx *c, const char *change, int min, int max)
{
    if (out)
        *out = PL_VERSION_DEFAULT;
    if (!c || !out || !pl__name_ok(change))
        return pl__err(PL_EINVAL, "pl_ctx_version: ctx, out and a valid change "
                                  "id are required");
    if (min < PL_VERSION_DEFAULT || min > max || max < 1)
        return pl__err(PL_EINVAL,
                       "pl_ctx_version: change '%s': versions %d to %d "
                       "(need %d <= min_supported <= max_supported, and "
                       "max_supported >= 1)",
                       change, min, max, PL_VERSION_DEFAULT);
    int st = pl__ctx_check(c, "pl_ctx_version");
    if (st)
        return st;
    pl__run *r = c->run;
    if (r->stop)
        return r->stop;
    const pl__rec *rec;
    if ((st = pl__inv_peek(c, &rec)))
        return st;
    uint32_t seq = c->next_seq;
    if (!rec) {
        if (r->check)
            return pl__run_fail(r, PL_ECHECK,
                                "check: run %s, invocation %s: the record ends "
                                "before the version of change '%s'",
                                r->id, c->path, change);
        if ((st = append_marker(c, change, max)))
            return st;
        pl__emit_version(r, c->path, seq, c->def->name, change, max, true, 0);
        *out = max;
        return PL_OK;
    }
    const char *id;
    size_t id_len;
    uint64_t v;
    if (marker_of(rec, c->def->name, &id, &id_len, &v) &&
        id_len == strlen(change) && memcmp(id, change, id_len) == 0) {
        if (v < (uint64_t)min || v > (uint64_t)max)
            return unsupported(c, change, (unsigned long long)v, true, min,
                               max);
        if ((st = pl__inv_consume_checked(c)))
            return st;
        pl__emit_version(r, c->path, seq, c->def->name, change, (int)v, true,
                         0);
        *out = (int)v;
        return PL_OK;
    }
    /* recorded before the change: nothing is consumed */
    if (min > PL_VERSION_DEFAULT)
        return unsupported(c, change, PL_VERSION_DEFAULT, false, min, max);
    pl__emit_version(r, c->path, seq, c->def->name, change, PL_VERSION_DEFAULT,
                     false, 0);
    *out = PL_VERSION_DEFAULT;
    return PL_OK;
}
