/*
 * mp_read.c -- the checked msgpack reader, and decoding payloads with it.
 *
 * SAFETY
 *
 *   Stored bytes are untrusted.  msgpack-c writes them (mp_write.c); they
 *   are read back by pl__mp_walk(), a reader of our own that checks every
 *   length against the bytes that remain (so a forged count cannot make it
 *   allocate gigabytes), bounds nesting, allows only JSON-compatible types,
 *   and counts the cJSON tree the bytes decode to.  build() then makes that
 *   tree in one block of memory, nodes and strings together: a served
 *   result costs one allocation, not one per value.
 */
#include "mp.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- reading: a bounds-checked msgpack reader ---------------------------- */

/* A big-endian integer of n = 0, 1, 2, 4 or 8 bytes (msgpack's sizes),
 * written out so that the compiler makes each a load and a byte swap. */
static uint64_t rd_be(const uint8_t *p, size_t n)
{
    switch (n) {
    case 1: return p[0];
    case 2: return (uint64_t)p[0] << 8 | p[1];
    case 4:
        return (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 |
               (uint64_t)p[2] << 8 | p[3];
    case 8:
        return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 |
               (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
               (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
               (uint64_t)p[6] << 8 | p[7];
    default: return 0;
    }
}

/* The heads that are not one byte of type and small size. */
int pl__rd_head_long(rd *r, head *h, uint8_t c)
{
    size_t need = 0;
    if (c >= 0xe0) {
        h->t = T_INT, h->i = (int8_t)c;
        return PL_OK;
    }
    switch (c) {
    case 0xc0: h->t = T_NIL; return PL_OK;
    case 0xc2: h->t = T_BOOL, h->b = false; return PL_OK;
    case 0xc3: h->t = T_BOOL, h->b = true; return PL_OK;
    case 0xc4: h->t = T_BIN, need = 1; break;
    case 0xc5: h->t = T_BIN, need = 2; break;
    case 0xc6: h->t = T_BIN, need = 4; break;
    case 0xc7: h->t = T_EXT, need = 1; break;
    case 0xc8: h->t = T_EXT, need = 2; break;
    case 0xc9: h->t = T_EXT, need = 4; break;
    case 0xca: h->t = T_F32, need = 4; break;
    case 0xcb: h->t = T_F64, need = 8; break;
    case 0xcc: h->t = T_UINT, need = 1; break;
    case 0xcd: h->t = T_UINT, need = 2; break;
    case 0xce: h->t = T_UINT, need = 4; break;
    case 0xcf: h->t = T_UINT, need = 8; break;
    case 0xd0: h->t = T_INT, need = 1; break;
    case 0xd1: h->t = T_INT, need = 2; break;
    case 0xd2: h->t = T_INT, need = 4; break;
    case 0xd3: h->t = T_INT, need = 8; break;
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        h->t = T_EXT, need = 0;
        h->u = 1u << (c - 0xd4);
        if (rd_left(r) < 1)
            return PL_ECORRUPT;
        r->p++; /* ext type byte; data follows */
        return PL_OK;
    case 0xd9: h->t = T_STR, need = 1; break;
    case 0xda: h->t = T_STR, need = 2; break;
    case 0xdb: h->t = T_STR, need = 4; break;
    case 0xdc: h->t = T_ARRAY, need = 2; break;
    case 0xdd: h->t = T_ARRAY, need = 4; break;
    case 0xde: h->t = T_MAP, need = 2; break;
    case 0xdf: h->t = T_MAP, need = 4; break;
    default: return PL_ECORRUPT; /* 0xc1: never used */
    }
    if (rd_left(r) < need)
        return PL_ECORRUPT;
    uint64_t v = rd_be(r->p, need);
    r->p += need;
    switch (h->t) {
    case T_UINT: h->u = v; break;
    case T_INT:
        if (need == 1)
            h->i = (int8_t)v;
        else if (need == 2)
            h->i = (int16_t)v;
        else if (need == 4)
            h->i = (int32_t)v;
        else
            h->i = (int64_t)v;
        break;
    case T_F32: {
        uint32_t bits = (uint32_t)v;
        float f;
        memcpy(&f, &bits, sizeof f);
        h->d = f;
        break;
    }
    case T_F64: memcpy(&h->d, &v, sizeof h->d); break;
    case T_EXT:
        h->u = v;
        if (rd_left(r) < 1)
            return PL_ECORRUPT;
        r->p++; /* type byte */
        break;
    default: h->u = v; break;
    }
    return PL_OK;
}

/*
 * Walk one value, checking every length against the bytes that remain and,
 * in MODE_JSON, the JSON rules; with @p ts, count the tree it decodes to
 * (MODE_JSON only).  @p depth is the value's level if it is a container
 * (as in pl__pack_json()).  PL_ECORRUPT, no message.
 */
int pl__mp_walk(rd *r, int depth, int mode, pl__tree_size *ts)
{
    head h;
    if (rd_head(r, &h))
        return PL_ECORRUPT;
    if (ts)
        ts->nodes++;
    switch (h.t) {
    case T_NIL:
    case T_BOOL:
    case T_UINT:
    case T_INT: return PL_OK;
    case T_F32:
    case T_F64:
        return mode == MODE_JSON && !isfinite(h.d) ? PL_ECORRUPT : PL_OK;
    case T_STR:
        if (h.u > rd_left(r) ||
            (mode == MODE_JSON && memchr(r->p, 0, (size_t)h.u)))
            return PL_ECORRUPT;
        if (ts)
            ts->text += (size_t)h.u + 1;
        r->p += h.u;
        return PL_OK;
    case T_BIN:
    case T_EXT:
        if (mode == MODE_JSON || h.u > rd_left(r))
            return PL_ECORRUPT;
        r->p += h.u;
        return PL_OK;
    case T_ARRAY:
    case T_MAP: break;
    }
    bool map = h.t == T_MAP;
    /* every element takes at least a byte, every member two */
    if (depth > PL_MAX_JSON_DEPTH || h.u > rd_left(r) / (map ? 2 : 1))
        return PL_ECORRUPT;
    for (uint64_t i = 0; i < h.u; i++) {
        if (map && mode == MODE_JSON) { /* keys must be strings */
            head kh;
            if (rd_head(r, &kh) || kh.t != T_STR || kh.u > rd_left(r) ||
                memchr(r->p, 0, (size_t)kh.u))
                return PL_ECORRUPT;
            if (ts)
                ts->text += (size_t)kh.u + 1;
            r->p += kh.u;
        } else if (map && pl__mp_walk(r, depth + 1, mode, NULL)) {
            return PL_ECORRUPT;
        }
        if (pl__mp_walk(r, depth + 1, mode, ts))
            return PL_ECORRUPT;
    }
    return PL_OK;
}

/* Walk a whole payload that holds a policy's value @p outer containers
 * deep; the errors carry a message. */
int pl__payload_walk(pl__tree_size *ts, const uint8_t *mp, size_t len,
                     bool want_map, unsigned outer)
{
    rd r = {mp, mp + len};
    if (!len)
        return pl__err(PL_ECORRUPT, "empty payload");
    if (want_map &&
        !((mp[0] >= 0x80 && mp[0] <= 0x8f) || mp[0] == 0xde || mp[0] == 0xdf))
        return pl__err(PL_ECORRUPT, "payload is not a map");
    if (pl__mp_walk(&r, 1 - (int)outer, MODE_JSON, ts))
        return pl__err(
            PL_ECORRUPT,
            "malformed or truncated payload, or one nested deeper than %d levels",
            PL_MAX_JSON_DEPTH);
    if (r.p != r.end)
        return pl__err(PL_ECORRUPT, "%zu stray bytes after the payload",
                       rd_left(&r));
    return PL_OK;
}

/* ---- payloads: checking and decoding ------------------------------------- */

int pl__payload_measure(pl__tree_size *ts, const uint8_t *mp, size_t len,
                        unsigned outer)
{
    *ts = (pl__tree_size){0, 0, 0};
    int st = pl__payload_walk(ts, mp, len, false, outer);
    if (st)
        return st;
    /* both are at most a few times len, so only a 32-bit size_t can
     * overflow */
    if (ts->nodes > (SIZE_MAX - ts->text) / sizeof(cJSON))
        return pl__err(PL_ENOMEM,
                       "a payload of %zu bytes is too big to decode here", len);
    ts->bytes = ts->nodes * sizeof(cJSON) + ts->text;
    if (ts->bytes > PL__TREE_MAX)
        return pl__err(
            PL_ELIMIT,
            "a payload of %zu bytes would decode to %zu bytes of JSON, more than the limit of %zu",
            len, ts->bytes, PL__TREE_MAX);
    return PL_OK;
}

/* Where pl__payload_build() puts the next node and the next string. */
typedef struct tree_at {
    cJSON *node, *node_end;
    char *text, *text_end;
} tree_at;

static char *tree_text(tree_at *t, const uint8_t *p, size_t n)
{
    if ((size_t)(t->text_end - t->text) <= n)
        return NULL;
    char *s = t->text;
    memcpy(s, p, n);
    s[n] = '\0';
    t->text += n + 1;
    return s;
}

/* cJSON_CreateNumber's two fields: valueint saturates. */
static void tree_number(cJSON *v, double d)
{
    v->type = cJSON_Number;
    v->valuedouble = d;
    v->valueint = d >= INT_MAX           ? INT_MAX
                  : d <= (double)INT_MIN ? INT_MIN
                                         : (int)d;
}

/*
 * Build one value, from bytes pl__mp_walk() accepted as JSON and counted, into
 * @p t.  The nodes are linked as cJSON links them: a container's first
 * child's prev is its last.  NULL only if the bytes or the block are not
 * the ones measured.
 */
static cJSON *build(rd *r, tree_at *t)
{
    head h;
    if (t->node == t->node_end || rd_head(r, &h))
        return NULL;
    cJSON *v = t->node++;
    memset(v, 0, sizeof *v);
    switch (h.t) {
    case T_NIL: v->type = cJSON_NULL; return v;
    case T_BOOL: v->type = h.b ? cJSON_True : cJSON_False; return v;
    case T_UINT: tree_number(v, (double)h.u); return v;
    case T_INT: tree_number(v, (double)h.i); return v;
    case T_F32:
    case T_F64: tree_number(v, h.d); return v;
    case T_STR:
        if (h.u > rd_left(r) ||
            !(v->valuestring = tree_text(t, r->p, (size_t)h.u)))
            return NULL;
        v->type = cJSON_String;
        r->p += h.u;
        return v;
    case T_ARRAY:
    case T_MAP: break;
    default: return NULL;
    }
    bool map = h.t == T_MAP;
    v->type = map ? cJSON_Object : cJSON_Array;
    cJSON *last = NULL;
    for (uint64_t i = 0; i < h.u; i++) {
        char *key = NULL;
        if (map) {
            head kh;
            if (rd_head(r, &kh) || kh.t != T_STR || kh.u > rd_left(r) ||
                !(key = tree_text(t, r->p, (size_t)kh.u)))
                return NULL;
            r->p += kh.u;
        }
        cJSON *item = build(r, t);
        if (!item)
            return NULL;
        item->string = key;
        if (last) {
            last->next = item;
            item->prev = last;
        } else {
            v->child = item;
        }
        last = item;
    }
    if (last)
        v->child->prev = last;
    return v;
}

cJSON *pl__payload_build(const uint8_t *mp, size_t len, const pl__tree_size *ts,
                         void *block)
{
    tree_at t = {block, (cJSON *)block + ts->nodes, NULL,
                 (char *)block + ts->bytes};
    t.text = (char *)t.node_end;
    rd r = {mp, mp + len};
    cJSON *root = build(&r, &t);
    return root && r.p == r.end ? root : NULL;
}

int pl__payload_check(const uint8_t *mp, size_t len, bool want_map)
{
    return pl__payload_walk(NULL, mp, len, want_map, 0);
}

int pl__payload_decode(cJSON **out, const uint8_t *mp, size_t len)
{
    return pl__payload_decode_in(out, mp, len, 0);
}

int pl__payload_decode_block(const cJSON **out, void **block, const uint8_t *mp,
                             size_t len, unsigned outer)
{
    pl__tree_size ts;
    *block = NULL;
    int st = pl__payload_measure(&ts, mp, len, outer);
    if (st)
        return st;
    if (!(*block = malloc(ts.bytes)))
        return pl__err(PL_ENOMEM, "out of memory decoding a payload");
    /* the bytes pl__payload_measure() accepted build, or they changed */
    if (NEVER(!(*out = pl__payload_build(mp, len, &ts, *block)))) {
        free(*block);
        *block = NULL;
        return pl__err(PL_ECORRUPT, "a payload changed while decoding it");
    }
    return PL_OK;
}

static int decode(cJSON **out, const uint8_t *mp, size_t len, unsigned outer,
                  void (*release)(void *), void *user)
{
    void *block;
    const cJSON *root;
    *out = NULL;
    int st = pl__payload_decode_block(&root, &block, mp, len, outer);
    if (release)
        release(user);
    if (st)
        return st;
    /* a tree the caller owns is one cJSON_Delete() can free */
    *out = cJSON_Duplicate(root, true);
    pl__free_sized(block, len); /* a tree is about as large as its bytes */
    return *out ? PL_OK
                : pl__err(PL_ENOMEM, "out of memory decoding a payload");
}

int pl__payload_decode_in(cJSON **out, const uint8_t *mp, size_t len,
                          unsigned outer)
{
    return decode(out, mp, len, outer, NULL, NULL);
}

int pl__payload_decode_release(cJSON **out, const uint8_t *mp, size_t len,
                               void (*release)(void *), void *user)
{
    return decode(out, mp, len, 0, release, user);
}

char *pl__payload_text(const uint8_t *mp, size_t len, size_t max)
{
    cJSON *j = NULL;
    if (pl__payload_decode_in(&j, mp, len, 1))
        return pl__strdup("<undecodable payload>");
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        return NULL;
    char *out;
    size_t n = strlen(s);
    if (max >= 4 && n > max) {
        out = pl__asprintf("%.*s...", (int)(max - 3), s);
    } else {
        out = pl__strdup(s);
    }
    cJSON_free(s);
    return out;
}

/* ---- finding a value without decoding ------------------------------------ */

bool pl__map_find(const uint8_t *mp, size_t len, const char *key,
                  const uint8_t **val, size_t *val_len)
{
    rd r = {mp, mp + len};
    head h;
    size_t klen = strlen(key);
    if (rd_head(&r, &h) || h.t != T_MAP)
        return false;
    for (uint64_t i = 0; i < h.u; i++) {
        const uint8_t *k;
        size_t kn;
        if (rd_bytes(&r, T_STR, &k, &kn))
            return false;
        const uint8_t *v = r.p;
        if (pl__mp_walk(&r, 1, MODE_ANY, NULL))
            return false;
        if (kn == klen && memcmp(k, key, kn) == 0) {
            *val = v;
            *val_len = (size_t)(r.p - v);
            return true;
        }
    }
    return false;
}

bool pl__mp_uint(const uint8_t *mp, size_t len, uint64_t *v)
{
    rd r = {mp, mp + len};
    return rd_uint(&r, v) == PL_OK;
}

bool pl__mp_str(const uint8_t *mp, size_t len, const char **s, size_t *n)
{
    rd r = {mp, mp + len};
    const uint8_t *p;
    if (rd_bytes(&r, T_STR, &p, n))
        return false;
    *s = (const char *)p;
    return true;
}
