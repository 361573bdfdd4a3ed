/*
 * validate.c -- the validate decorator: a callee's input checked against
 * its registered input_schema before it runs, its result against its
 * output_schema after.
 *
 * Written with the public API alone (include/policyledger.h), as
 * decorators.c is.  Compiled schemas live in a pl_schema_cache the caller
 * owns: one entry per policy name, compiled at the policy's first validated
 * call under the cache's lock and immutable after, so concurrent runs share
 * them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

typedef struct cached {
    char *name;
    pl_schema *in, *out; /* NULL: the policy has no such schema */
} cached;

struct pl_schema_cache {
    pthread_mutex_t lock;
    cached *v;
    size_t n, cap;
};

int pl_schema_cache_new(pl_schema_cache **out)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_schema_cache_new: out is NULL");
    pl_schema_cache *c = calloc(1, sizeof *c);
    if (!c)
        return pl_errorf(PL_ENOMEM, "out of memory");
    if (pthread_mutex_init(&c->lock, NULL)) {
        free(c);
        return pl_errorf(PL_ENOMEM, "pl_schema_cache_new: no mutex");
    }
    *out = c;
    return PL_OK;
}

void pl_schema_cache_free(pl_schema_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        pl_schema_free(c->v[i].in);
        pl_schema_free(c->v[i].out);
    }
    free(c->v);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static int compile(pl_schema **out, const char *text)
{
    *out = NULL;
    return text ? pl_schema_compile_text(out, text) : PL_OK;
}

/* The compiled schemas of @p def, compiled now if this is the first call.
 * *out is a copy: the table moves when it grows (a call validated inside
 * this one may add to it), while a compiled schema stays until the cache
 * is freed. */
static int lookup(cached *out, pl_schema_cache *c, const pl_policy_def *def)
{
    int st = PL_OK;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->v[i].name, def->name) == 0) {
            *out = c->v[i];
            goto done;
        }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        cached *v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            st = pl_errorf(PL_ENOMEM, "validate: out of memory");
            goto done;
        }
        c->v = v;
        c->cap = cap;
    }
    cached e = {NULL, NULL, NULL};
    size_t len = strlen(def->name);
    if (!(e.name = malloc(len + 1)))
        st = pl_errorf(PL_ENOMEM, "validate: out of memory");
    else
        memcpy(e.name, def->name, len + 1);
    if (!st)
        st = compile(&e.in, def->input_schema);
    if (!st)
        st = compile(&e.out, def->output_schema);
    if (st) {
        free(e.name);
        pl_schema_free(e.in);
        pl_schema_free(e.out);
        goto done;
    }
    c->v[c->n++] = e;
    *out = e;
done:
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* Record the error step of a mismatch @p e, with @p code. */
static int refuse(pl_ctx *ctx, pl_steps *out, const pl_schema_error *e,
                  const char *code, const char *what)
{
    char msg[PL_SCHEMA_PATH_MAX + sizeof e->message + 96];
    snprintf(msg, sizeof msg, "%s of '%s' at \"%s\": %s: %s", what,
             pl_ctx_policy(ctx), e->path, e->keyword, e->message);
    cJSON *err = NULL;
    int st = pl_json_pack(&err, "{s:b, s:s, s:s, s:s, s:s}", "error", 1, "code",
                          code, "message", msg, "path", e->path, "keyword",
                          e->keyword);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_ERROR, "validate", err);
    cJSON_Delete(err);
    return st;
}

static int validate_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                       const pl_decorator *self, pl_next *next)
{
    pl_schema_cache *cache = self->user;
    const pl_registry *reg = pl_engine_registry(pl_ctx_engine(ctx));
    const pl_policy_def *def = pl_registry_find(reg, pl_ctx_policy(ctx));
    if (!cache || !def)
        return pl_errorf(PL_EINVAL, "validate: %s",
                         cache ? "the callee is not registered"
                               : "the decorator has no schema cache (made "
                                 "without pl_decorator_validate()?)");
    cached c = {NULL, NULL, NULL};
    int st = lookup(&c, cache, def);
    if (st)
        return st;
    pl_schema_error e = PL_SCHEMA_ERROR_INIT;
    if (c.in) {
        st = pl_schema_validate(&e, c.in, action->payload);
        if (st == PL_EJSON) /* refused: the callee does not run */
            return refuse(ctx, out, &e, PL_ERR_INVALID_INPUT, "the input");
        if (st)
            return st;
    }
    if (!c.out)
        return pl_next_call(next, ctx, action, out);

    pl_steps *turn = NULL;
    if ((st = pl_steps_new(&turn)))
        return st;
    st = pl_next_call(next, ctx, action, turn);
    size_t n = pl_steps_count(turn);
    const pl_step *last = n ? pl_steps_at(turn, n - 1) : NULL;
    const cJSON *result = last ? pl_step_payload(last) : pl_json_empty();
    bool mismatch = false;
    if (!st && !result)
        st = pl_errorf(PL_ENOMEM, "validate: out of memory");
    if (!st && !(last && pl_step_is_error(last))) {
        st = pl_schema_validate(&e, c.out, result);
        mismatch = st == PL_EJSON;
        if (mismatch)
            st = PL_OK;
    }
    if (!st)
        st = pl_steps_move(out, turn);
    if (!st && mismatch)
        st = refuse(ctx, out, &e, PL_ERR_OUTPUT_SCHEMA_MISMATCH, "the result");
    pl_steps_free(turn);
    return st;
}

int pl_decorator_validate(pl_decorator *out, pl_schema_cache *cache)
{
    if (!out || !cache)
        return pl_errorf(PL_EINVAL, "pl_decorator_validate: %s is NULL",
                         out ? "cache" : "out");
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = validate_fn;
    d.name = "validate";
    d.user = cache;
    *out = d;
    return PL_OK;
}
