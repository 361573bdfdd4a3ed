/*
 * payload_cmp.c -- comparing payloads without encoding them again.
 *
 *   Objects keep their key order when they are encoded (mp_write.c), so
 *   equal cJSON trees encode to equal bytes: replay compares bytes first
 *   and falls back to comparing two payloads as JSON, key order ignored
 *   (pl__payload_equal()).  It compares a recorded call with the new one by
 *   walking the recorded bytes against the cJSON call
 *   (pl__call_payload_same(), which checks as it goes), so that a call it
 *   finds recorded need not be encoded at all.
 */
#include "mp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- two payloads as JSON ------------------------------------------------ */

typedef struct member {
    const cJSON *c;
    size_t at; /* position in its object: equal keys keep their order */
} member;

static int member_cmp(const void *x, const void *y)
{
    const member *a = x, *b = y;
    int c = strcmp(a->c->string, b->c->string);
    return c ? c : (a->at > b->at) - (a->at < b->at);
}

/* The @p n members of @p obj sorted by key; NULL when out of memory. */
static member *sorted_members(const cJSON *obj, size_t n)
{
    member *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next, i++)
        v[i] = (member){c, i};
    qsort(v, n, sizeof *v, member_cmp);
    return v;
}

/*
 * Equal JSON values, objects compared without regard to key order.  Each
 * pair of subtrees is compared once (cJSON_Compare compares every object's
 * members from both sides, which doubles the work at every level).
 */
static bool json_equal(const cJSON *a, const cJSON *b)
{
    int t = a->type & 0xff;
    if (t != (b->type & 0xff))
        return false;
    switch (t) {
    case cJSON_False:
    case cJSON_True:
    case cJSON_NULL: return true;
    case cJSON_Number: return a->valuedouble == b->valuedouble;
    case cJSON_String: return strcmp(a->valuestring, b->valuestring) == 0;
    case cJSON_Array: {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!json_equal(x, y))
                return false;
        return !x && !y;
    }
    case cJSON_Object: {
        size_t n = 0, m = 0;
        bool same_order = true;
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next, n++, m++)
            same_order = same_order && strcmp(x->string, y->string) == 0;
        for (; x; x = x->next)
            n++;
        for (; y; y = y->next)
            m++;
        if (n != m)
            return false;
        if (same_order) {
            for (x = a->child, y = b->child; x; x = x->next, y = y->next)
                if (!json_equal(x, y))
                    return false;
            return true;
        }
        member *va = sorted_members(a, n), *vb = sorted_members(b, n);
        bool eq = va && vb; /* out of memory: not shown equal */
        for (size_t i = 0; eq && i < n; i++)
            eq = strcmp(va[i].c->string, vb[i].c->string) == 0 &&
                 json_equal(va[i].c, vb[i].c);
        free(va);
        free(vb);
        return eq;
    }
    default: return false; /* nothing else comes out of pl__mp_walk() */
    }
}

bool pl__payload_equal(const uint8_t *a, size_t alen, const uint8_t *b,
                       size_t blen)
{
    if (alen == blen && memcmp(a, b, alen) == 0)
        return true;
    void *ba = NULL, *bb = NULL;
    const cJSON *ja, *jb;
    bool eq = !pl__payload_decode_block(&ja, &ba, a, alen, 1) &&
              !pl__payload_decode_block(&jb, &bb, b, blen, 1) &&
              json_equal(ja, jb);
    free(ba);
    free(bb);
    return eq;
}

/* ---- comparing a recorded call with a new one, without encoding it ------- */

/* The str of @p n bytes at the reader is @p s, all of it.  Names and most
 * values are short: a loop over them costs less than two calls. */
static bool same_str(rd *r, uint64_t n, const char *s)
{
    if (!s || n > rd_left(r))
        return false;
    if (n > 32) {
        if (strnlen(s, (size_t)n + 1) != n || memcmp(r->p, s, (size_t)n))
            return false;
    } else {
        for (size_t i = 0; i < n; i++) /* stops at the NUL of a shorter s */
            if (!s[i] || (uint8_t)s[i] != r->p[i])
                return false;
        if (s[n])
            return false;
    }
    r->p += n;
    return true;
}

static bool same_key(rd *r, const char *key)
{
    head h;
    return !rd_head(r, &h) && h.t == T_STR && same_str(r, h.u, key);
}

/*
 * Is the recorded value at the reader @p v, member for member in the same
 * order, as json_equal() would find the two?  False also for whatever
 * pl__pack_json() refuses (non-finite numbers, raw items, too deep), so that
 * the caller's slow path reports it.
 */
static bool same_json(rd *r, const cJSON *v, unsigned depth)
{
    head h;
    if (rd_head(r, &h))
        return false;
    switch (v->type & 0xff) {
    case cJSON_NULL: return h.t == T_NIL;
    case cJSON_False:
    case cJSON_True:
        return h.t == T_BOOL && h.b == ((v->type & 0xff) == cJSON_True);
    case cJSON_Number: {
        double d = v->valuedouble;
        return isfinite(d) && ((h.t == T_UINT && (double)h.u == d) ||
                               (h.t == T_INT && (double)h.i == d) ||
                               ((h.t == T_F32 || h.t == T_F64) && h.d == d));
    }
    case cJSON_String: return h.t == T_STR && same_str(r, h.u, v->valuestring);
    case cJSON_Array:
    case cJSON_Object: {
        bool obj = (v->type & 0xff) == cJSON_Object;
        if (depth > PL_MAX_JSON_DEPTH || h.t != (obj ? T_MAP : T_ARRAY))
            return false;
        uint64_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next, n++)
            if (n == h.u || (obj && !same_key(r, c->string)) ||
                !same_json(r, c, depth + 1))
                return false;
        return n == h.u;
    }
    default: return false;
    }
}

bool pl__call_payload_same(const uint8_t *mp, size_t len, const char *policy,
                           const cJSON *payload, const char *const *actions,
                           size_t n_actions, const char *seed_digest,
                           size_t max_bytes)
{
    rd r = {mp, mp + len};
    head h;
    if (rd_head(&r, &h) || h.t != T_MAP ||
        h.u != 2u + (n_actions > 0) + (seed_digest != NULL) ||
        !same_key(&r, "policy") || !same_key(&r, policy) ||
        !same_key(&r, "payload"))
        return false;
    const uint8_t *at = r.p;
    if (payload ? !cJSON_IsObject(payload) || !same_json(&r, payload, 1)
                : rd_head(&r, &h) || h.t != T_MAP || h.u != 0)
        return false;
    if (max_bytes && (size_t)(r.p - at) > max_bytes)
        return false;
    if (n_actions) {
        if (!same_key(&r, "actions") || rd_head(&r, &h) || h.t != T_ARRAY ||
            h.u != n_actions)
            return false;
        for (size_t i = 0; i < n_actions; i++)
            if (!same_key(&r, actions[i]))
                return false;
    }
    if (seed_digest && (!same_key(&r, "seed") || !same_key(&r, seed_digest)))
        return false;
    return r.p == r.end;
}
