/*
 * step.c -- immutable steps and step lists.
 *
 * A step keeps its payload encoded (the form it is stored and compared in).
 * A step the policy made decodes it to cJSON only when asked; a step read
 * from the store is decoded at once, since decoding is also the check of
 * its stored bytes.  The decoded tree is read-only and lives in one block:
 * the step's own allocation when read from the store, else s->tree.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "path.h"

static const char *const type_names[] = {
    NULL,          "text",  "action_call", "action_result", "suspend", "resume",
    "side_effect", "error", "wait",        "event",         "cancel",
};

const char *pl_step_type_name(pl_step_type type)
{
    if ((int)type < 1 || (size_t)type >= PL__ARRAY_LEN(type_names))
        return NULL;
    return type_names[type];
}

int pl_step_type_parse(pl_step_type *out, const char *name)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_step_type_parse: out is NULL");
    for (size_t i = 1; name && i < PL__ARRAY_LEN(type_names); i++) {
        if (strcmp(name, type_names[i]) == 0) {
            *out = (pl_step_type)i;
            return PL_OK;
        }
    }
    return pl__err(PL_EINVAL, "unknown step type '%s'", name ? name : "");
}

/* ---- steps ------------------------------------------------------------------- */

/*
 * A large payload's bytes (at least PL__SHARE_MIN) are a block of their own,
 * shared by the steps that hold the same payload: the callee's last step
 * and the result its caller gets, or a result and the step a policy makes
 * of its decoded payload (pl_steps_add() of pl_step_payload()), so that a
 * long answer passed on is not copied at each hand.  The last step that
 * holds a block frees it.
 */
typedef struct pl__mp_block {
    atomic_size_t refs;
    uint8_t *data;
    size_t size;
} pl__mp_block;

static void block_drop(pl__mp_block *b)
{
    if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
        pl__free_sized(b->data, b->size);
        free(b);
    }
}

/*
 * The decoded payloads of the steps that hold a shared block, the last few
 * decoded: pl_steps_add() finds its payload among them and takes the
 * step's bytes instead of encoding the tree again.  A step leaves the
 * table before it is freed, so an entry never outlives its tree.
 */
#define LISTED_MAX 8
static struct {
    pthread_mutex_t mu;
    const cJSON *root[LISTED_MAX];
    pl_step *step[LISTED_MAX];
    unsigned next;
} g_listed = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0};

static void list_step(pl_step *s)
{
    pthread_mutex_lock(&g_listed.mu);
    unsigned i = g_listed.next++ % LISTED_MAX;
    if (g_listed.step[i])
        g_listed.step[i]->listed = false;
    g_listed.root[i] = s->json;
    g_listed.step[i] = s;
    s->listed = true;
    pthread_mutex_unlock(&g_listed.mu);
}

static void unlist_step(pl_step *s)
{
    pthread_mutex_lock(&g_listed.mu);
    for (unsigned i = 0; s->listed && i < LISTED_MAX; i++)
        if (g_listed.step[i] == s) {
            g_listed.step[i] = NULL;
            g_listed.root[i] = NULL;
            s->listed = false;
        }
    pthread_mutex_unlock(&g_listed.mu);
}

/* The block of the step whose decoded payload is @p root, with a reference
 * taken for the caller, and that step's type; NULL when none is listed. */
static pl__mp_block *listed_block(const cJSON *root, pl_step_type *type,
                                  size_t *len)
{
    pl__mp_block *b = NULL;
    pthread_mutex_lock(&g_listed.mu);
    for (unsigned i = 0; !b && i < LISTED_MAX; i++)
        if (g_listed.root[i] == root && g_listed.step[i]) {
            b = g_listed.step[i]->mp_block;
            *type = g_listed.step[i]->type;
            *len = g_listed.step[i]->mp_len;
            atomic_fetch_add(&b->refs, 1);
        }
    pthread_mutex_unlock(&g_listed.mu);
    return b;
}

/* A step with room for a decoded tree of @p tree_bytes after its own
 * fields, at *tree. */
static pl_step *step_alloc(pl_step_type type, const char *actor,
                           size_t actor_len, const uint8_t *mp, size_t mp_len,
                           size_t tree_bytes, void **tree)
{
    const size_t align = _Alignof(max_align_t);
    size_t fields = sizeof(pl_step) + actor_len + 1 + mp_len;
    size_t at = (fields + align - 1) / align * align;
    pl_step *s = at >= fields && tree_bytes <= SIZE_MAX - at
                     ? malloc(at + tree_bytes)
                     : NULL;
    if (!s) {
        pl__err(PL_ENOMEM, "out of memory creating a step");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->type = type;
    s->actor = (char *)(s + 1);
    memcpy(s->actor, actor, actor_len);
    s->actor[actor_len] = '\0';
    s->mp = (uint8_t *)s->actor + actor_len + 1;
    memcpy(s->mp, mp, mp_len);
    s->mp_len = mp_len;
    *tree = (char *)s + at;
    return s;
}

pl_step *pl__step_new(pl_step_type type, const char *actor, size_t actor_len,
                      const uint8_t *mp, size_t mp_len)
{
    void *tree;
    return step_alloc(type, actor, actor_len, mp, mp_len, 0, &tree);
}

/* A step of the bytes of shared block @p b, @p len long, whose reference it
 * takes over (dropped on failure). */
static pl_step *step_of_block(pl_step_type type, const char *actor,
                              pl__mp_block *b, size_t len)
{
    pl_step *s = pl__step_new(type, actor, strlen(actor), (const uint8_t *)"",
                              0); /* mp is the block's */
    if (!s) {
        block_drop(b);
        return NULL;
    }
    s->mp = b->data;
    s->mp_len = len;
    s->mp_block = b;
    return s;
}

pl_step *pl__step_like(pl_step_type type, const char *actor,
                       const pl_step *from)
{
    if (!from->mp_block)
        return pl__step_new(type, actor, strlen(actor), from->mp, from->mp_len);
    atomic_fetch_add(&from->mp_block->refs, 1);
    return step_of_block(type, actor, from->mp_block, from->mp_len);
}

int pl__step_from_rec(const pl__rec *rec, const char *path, pl_step **out)
{
    *out = NULL;
    if (rec->mirrored)
        return pl__rec_check(rec); /* says why it cannot be read alone */
    /* decoding checks the stored bytes; the policy reads them next, from a
     * tree in the step's own allocation */
    pl__tree_size ts;
    int st = pl__payload_measure(&ts, rec->payload, rec->payload_len,
                                 pl__step_wrapping(rec->type));
    if (st)
        return pl__err(st, "step record %u: %s", rec->seq, pl_errmsg());
    void *tree;
    pl_step *s = step_alloc(rec->type, rec->actor, rec->actor_len, rec->payload,
                            rec->payload_len, ts.bytes, &tree);
    if (!s)
        return PL_ENOMEM;
    /* from the step's copy of the bytes that were measured */
    if (!(s->json = pl__payload_build(s->mp, s->mp_len, &ts, tree))) {
        pl_step_free(s);
        return pl__err(PL_ECORRUPT,
                       "step record %u: its payload changed "
                       "while decoding it",
                       rec->seq);
    }
    s->decoded = true;
    if ((rec->code && !(s->code = pl__strndup(rec->code, rec->code_len))) ||
        pl__step_place(s, path, rec->seq, rec->time_us)) {
        pl_step_free(s);
        return pl__err(PL_ENOMEM, "out of memory creating a step");
    }
    memcpy(s->prev, rec->prev_hash, PL_HASH_LEN);
    *out = s;
    return PL_OK;
}

int pl__step_place(pl_step *s, const char *path, uint32_t seq, int64_t time_us)
{
    size_t n = strlen(path);
    char *id = n + 12 <= sizeof s->idbuf ? s->idbuf : malloc(n + 12);
    if (!id)
        return pl__err(PL_ENOMEM, "out of memory naming a step");
    memcpy(id, path, n);
    id[n] = ':';
    *pl__utoa(id + n + 1, seq) = '\0';
    if (s->id != s->idbuf)
        free(s->id);
    s->id = id;
    s->seq = seq;
    s->time_us = time_us;
    s->in_ledger = true;
    return PL_OK;
}

pl_step_type pl_step_type_of(const pl_step *s)
{
    return s ? s->type : (pl_step_type)0;
}
const char *pl_step_actor(const pl_step *s) { return s ? s->actor : NULL; }
const char *pl_step_id(const pl_step *s) { return s && s->id ? s->id : ""; }
uint32_t pl_step_seq(const pl_step *s) { return s ? s->seq : 0; }
int64_t pl_step_time_us(const pl_step *s) { return s ? s->time_us : 0; }
const char *pl_step_code(const pl_step *s) { return s ? s->code : NULL; }

const cJSON *pl_step_payload(const pl_step *cs)
{
    pl_step *s = (pl_step *)cs; /* the decoded form is a cache */
    if (!s)
        return NULL;
    if (!s->decoded) {
        pl__tree_size ts;
        if (pl__payload_measure(&ts, s->mp, s->mp_len,
                                pl__step_wrapping(s->type)) ||
            !(s->tree = malloc(ts.bytes)))
            return NULL;
        s->json = pl__payload_build(s->mp, s->mp_len, &ts, s->tree);
        s->decoded = true;
        if (s->json && s->mp_block)
            list_step(s);
    }
    return s->json;
}

bool pl_step_flag(const pl_step *s, const char *name)
{
    const uint8_t *v;
    size_t n;
    return s && name && pl__map_find(s->mp, s->mp_len, name, &v, &n) &&
           n == 1 && v[0] == 0xc3;
}

bool pl_step_is_error(const pl_step *s) { return pl_step_flag(s, "error"); }

const char *pl_step_error_code(const pl_step *s)
{
    if (!pl_step_is_error(s))
        return NULL;
    const cJSON *p = pl_step_payload(s);
    const cJSON *code = p ? cJSON_GetObjectItemCaseSensitive(p, "code") : NULL;
    return cJSON_IsString(code) ? code->valuestring : NULL;
}

int pl_step_hash(uint8_t out[PL_HASH_LEN], const pl_step *s)
{
    if (!s || !out)
        return pl__err(PL_EINVAL, "pl_step_hash: a step and an output "
                                  "buffer are required");
    if (!s->has_hash)
        return pl__err(PL_ENOTFOUND,
                       "step '%s' has no hash of its own: it "
                       "is not stored on its own",
                       pl_step_id(s));
    memcpy(out, s->hash, PL_HASH_LEN);
    return PL_OK;
}

const uint8_t *pl__step_mp(const pl_step *s, size_t *len)
{
    *len = s->mp_len;
    return s->mp;
}

int pl_step_prev_hash(uint8_t out[PL_HASH_LEN], const pl_step *s)
{
    if (!s || !out)
        return pl__err(PL_EINVAL, "pl_step_prev_hash: a step and an output "
                                  "buffer are required");
    if (!s->in_ledger)
        return pl__err(PL_ENOTFOUND, "the step is not in a ledger");
    memcpy(out, s->prev, PL_HASH_LEN);
    return PL_OK;
}

void pl_step_free(pl_step *s)
{
    if (!s)
        return;
    if (s->mp_block) /* only such a step is listed */
        unlist_step(s);
    /* a decoded tree is about as large as its payload */
    pl__free_sized(s->tree, s->tree ? s->mp_len : 0);
    block_drop(s->mp_block);
    if (s->id != s->idbuf)
        free(s->id);
    free(s->code);
    free(s);
}

/* ---- lists --------------------------------------------------------------------- */

int pl_steps_new(pl_steps **out)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_steps_new: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory creating a list");
}

void pl_steps_free(pl_steps *l)
{
    if (!l)
        return;
    pl_steps_clear(l);
    free(l->v);
    free(l);
}

void pl_steps_clear(pl_steps *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        pl_step_free(l->v[i]);
    l->n = 0;
}

int pl_steps_move(pl_steps *dst, pl_steps *src)
{
    if (!dst || !src || dst == src)
        return pl__err(PL_EINVAL, "pl_steps_move: two different lists are "
                                  "required");
    if (src->n > SIZE_MAX - dst->n)
        return pl__err(PL_ENOMEM, "out of memory growing a step list");
    while (dst->cap < dst->n + src->n) { /* all or nothing */
        pl_step **v = pl__grow(dst->v, &dst->cap, dst->cap, sizeof *v, 4);
        if (!v)
            return pl__err(PL_ENOMEM, "out of memory growing a step list");
        dst->v = v;
    }
    if (src->n)
        memcpy(dst->v + dst->n, src->v, src->n * sizeof *src->v);
    dst->n += src->n;
    src->n = 0;
    return PL_OK;
}

const cJSON *pl_json_empty(void)
{
    static const cJSON empty = {.type = cJSON_Object};
    return &empty;
}

size_t pl_steps_count(const pl_steps *l) { return l ? l->n : 0; }

const pl_step *pl_steps_at(const pl_steps *l, size_t i)
{
    return l && i < l->n ? l->v[i] : NULL;
}

int pl__steps_push(pl_steps *l, pl_step *s)
{
    pl_step **v = pl__grow(l->v, &l->cap, l->n, sizeof *v, 4);
    if (!v)
        return pl__err(PL_ENOMEM, "out of memory growing a step list");
    l->v = v;
    l->v[l->n++] = s;
    return PL_OK;
}

/* The checks of a step a policy adds; PL_OK, or the error with its
 * message.  *actor defaults to the list's. */
static int step_ok(const pl_steps *l, pl_step_type type, const char **actor)
{
    if (!pl_step_type_name(type))
        return pl__err(PL_EINVAL, "unknown step type %d", (int)type);
    if (type > PL_STEP_ERROR) /* wait, event, cancel: the engine's own */
        return pl__err(PL_EINVAL,
                       "step type %s is recorded by the engine only "
                       "(pl_ctx_sleep, pl_ctx_wait_event, pl_run_cancel)",
                       pl_step_type_name(type));
    if (!*actor)
        *actor = l->default_actor;
    if (!*actor)
        return pl__err(PL_EINVAL, "a step needs an actor");
    if (!pl__name_ok(*actor))
        return pl__err(PL_EINVAL,
                       "bad actor name (1..%d bytes of UTF-8, no control "
                       "characters)",
                       PL_MAX_NAME);
    return PL_OK;
}

static int push_new(pl_steps *l, pl_step *s)
{
    if (!s)
        return PL_ENOMEM;
    int rc = pl__steps_push(l, s);
    if (rc)
        pl_step_free(s);
    return rc;
}

/* pl__steps_add_mp(), the bytes in @p own (NULL: copied from mp), which a
 * step of a large payload takes over rather than copying. */
static int steps_add(pl_steps *l, pl_step_type type, const char *actor,
                     const uint8_t *mp, size_t mp_len, pl__buf *own)
{
    int rc = step_ok(l, type, &actor);
    if (rc)
        return rc;
    if (!own || mp_len < PL__SHARE_MIN)
        return push_new(l,
                        pl__step_new(type, actor, strlen(actor), mp, mp_len));
    pl__mp_block *b = malloc(sizeof *b);
    if (!b)
        return pl__err(PL_ENOMEM, "out of memory creating a step");
    atomic_init(&b->refs, 1);
    b->data = own->data;
    b->size = own->cap;
    *own = (pl__buf){0};
    return push_new(l, step_of_block(type, actor, b, mp_len));
}

int pl__steps_add_mp(pl_steps *l, pl_step_type type, const char *actor,
                     const uint8_t *mp, size_t mp_len)
{
    return steps_add(l, type, actor, mp, mp_len, NULL);
}

int pl_steps_add(pl_steps *l, pl_step_type type, const char *actor,
                 const cJSON *payload)
{
    if (!l || !payload)
        return pl__err(PL_EINVAL, "pl_steps_add: %s is NULL%s",
                       l ? "the payload" : "the list",
                       l ? " (an empty payload is {}: pl_json_empty())" : "");
    /* a step's decoded payload, as large as a shared block: the step's
     * bytes, not encoded again (unless this type nests the payload deeper
     * than the step's: then it is encoded, and checked as it is) */
    pl_step_type from = PL_STEP_TEXT;
    size_t len = 0;
    pl__mp_block *shared = listed_block(payload, &from, &len);
    if (shared && pl__step_wrapping(type) <= pl__step_wrapping(from)) {
        int rc = step_ok(l, type, &actor);
        if (rc) {
            block_drop(shared);
            return rc;
        }
        return push_new(l, step_of_block(type, actor, shared, len));
    }
    block_drop(shared);
    pl__buf b = {0};
    int rc = pl__payload_encode(&b, payload, 0);
    if (!rc)
        rc = steps_add(l, type, actor, b.data, b.len, &b);
    pl__buf_free(&b);
    return rc;
}

/* Build a small object payload and add it. */
static int add_built(pl_steps *l, pl_step_type type, const char *actor,
                     cJSON *obj)
{
    if (!obj)
        return pl__err(PL_ENOMEM, "out of memory building a payload");
    int rc = pl_steps_add(l, type, actor, obj);
    cJSON_Delete(obj);
    return rc;
}

int pl_steps_add_text(pl_steps *l, const char *actor, const char *text)
{
    if (!text)
        return pl__err(PL_EINVAL, "pl_steps_add_text: text is NULL");
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "text", text)) {
        cJSON_Delete(o);
        o = NULL;
    }
    return add_built(l, PL_STEP_TEXT, actor, o);
}

int pl_steps_add_result(pl_steps *l, const cJSON *payload)
{
    return pl_steps_add(l, PL_STEP_ACTION_RESULT, NULL, payload);
}

int pl_steps_add_call(pl_steps *l, const char *policy, const cJSON *payload)
{
    if (!l || !pl__name_ok(policy) || !payload)
        return pl__err(PL_EINVAL, "pl_steps_add_call: bad list or policy "
                                  "name, or a NULL payload");
    pl__buf b = {0};
    int rc = pl__call_payload_encode(&b, policy, payload, NULL, 0, NULL, 0);
    if (!rc)
        rc = pl__steps_add_mp(l, PL_STEP_ACTION_CALL, NULL, b.data, b.len);
    pl__buf_free(&b);
    return rc;
}

int pl__error_payload(pl__buf *out, const char *code, const char *message)
{
    cJSON *o = cJSON_CreateObject();
    int rc = PL_ENOMEM;
    if (o && cJSON_AddTrueToObject(o, "error") &&
        cJSON_AddStringToObject(o, "code", code) &&
        cJSON_AddStringToObject(o, "message", message ? message : ""))
        rc = pl__payload_encode(out, o, 0);
    else
        pl__err(rc, "out of memory building an error payload");
    cJSON_Delete(o);
    return rc;
}

int pl_steps_add_error(pl_steps *l, const char *code, const char *message)
{
    if (!l || !code || !*code)
        return pl__err(PL_EINVAL, "pl_steps_add_error: list and code are "
                                  "required");
    pl__buf b = {0};
    int rc = pl__error_payload(&b, code, message);
    if (!rc)
        rc = pl__steps_add_mp(l, PL_STEP_ACTION_RESULT, NULL, b.data, b.len);
    pl__buf_free(&b);
    return rc;
}

int pl_steps_push(pl_steps *l, pl_step *s)
{
    if (!l || !s) {
        pl_step_free(s);
        return pl__err(PL_EINVAL, "pl_steps_push: NULL %s",
                       !l ? "list" : "step");
    }
    int rc = pl__steps_push(l, s);
    if (rc)
        pl_step_free(s);
    return rc;
}
