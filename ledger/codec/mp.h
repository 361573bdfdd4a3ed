/*
 * mp.h -- the msgpack writer and the checked reader, as the codec files
 * (mp_write.c, mp_read.c, payload_cmp.c, record.c, runrec.c) share them.
 * Nothing else includes this (the engine goes through codec.h), so the
 * reader's types keep short names: rd, head, T_*, MODE_*.
 */
#ifndef PL_MP_H
#define PL_MP_H

#include <msgpack.h>

#include "payload.h"

/* ---- writing ------------------------------------------------------------- */

/* msgpack-c's writer: called for every few bytes, so the common case is
 * inline. */
static inline int buf_write(void *data, const char *p, size_t n)
{
    pl__buf *b = data;
    if (n > b->cap - b->len && pl__buf_reserve(b, n))
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static inline void packer_init(msgpack_packer *pk, pl__buf *out)
{
    msgpack_packer_init(pk, out, buf_write);
}

static inline int pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str_with_body(pk, s, n);
}

/*
 * Pack a JSON value @p depth containers deep (the payload object is level
 * 1; see mp_write.c).  PL_EJSON, PL_ELIMIT or PL_ENOMEM, with a message.
 */
PL__HIDDEN int pl__pack_json(msgpack_packer *pk, const cJSON *v,
                             unsigned depth);

/* ---- reading: a bounds-checked msgpack reader ---------------------------- */

typedef struct rd {
    const uint8_t *p;
    const uint8_t *end;
} rd;

enum { MODE_ANY = 0, MODE_JSON = 1 };

static inline size_t rd_left(const rd *r) { return (size_t)(r->end - r->p); }

/*
 * Read one value's head: its first byte and, for sized types, the size
 * that follows.  Advances past the head only.
 */
typedef enum {
    T_NIL,
    T_BOOL,
    T_UINT,
    T_INT,
    T_F32,
    T_F64,
    T_STR,
    T_BIN,
    T_EXT,
    T_ARRAY,
    T_MAP
} mtype;

typedef struct head {
    mtype t;
    uint64_t u; /* uint value, element count, or byte length */
    int64_t i;  /* int value */
    double d;
    bool b;
} head;

/* The heads that are not one byte of type and small size (rd_head()'s
 * slow path). */
PL__HIDDEN int pl__rd_head_long(rd *r, head *h, uint8_t c);

static inline int rd_head(rd *r, head *h)
{
    if (!rd_left(r))
        return PL_ECORRUPT;
    uint8_t c = *r->p++;
    if (c <= 0x7f) {
        h->t = T_UINT, h->u = c;
        return PL_OK;
    }
    if (c <= 0x8f) {
        h->t = T_MAP, h->u = c & 0x0f;
        return PL_OK;
    }
    if (c <= 0x9f) {
        h->t = T_ARRAY, h->u = c & 0x0f;
        return PL_OK;
    }
    if (c <= 0xbf) {
        h->t = T_STR, h->u = c & 0x1f;
        return PL_OK;
    }
    return pl__rd_head_long(r, h, c);
}

static inline int rd_uint(rd *r, uint64_t *v)
{
    head h;
    if (rd_head(r, &h))
        return PL_ECORRUPT;
    if (h.t == T_UINT) {
        *v = h.u;
        return PL_OK;
    }
    if (h.t == T_INT && h.i >= 0) {
        *v = (uint64_t)h.i;
        return PL_OK;
    }
    return PL_ECORRUPT;
}

static inline int rd_int(rd *r, int64_t *v)
{
    head h;
    if (rd_head(r, &h))
        return PL_ECORRUPT;
    if (h.t == T_INT) {
        *v = h.i;
        return PL_OK;
    }
    if (h.t == T_UINT && h.u <= INT64_MAX) {
        *v = (int64_t)h.u;
        return PL_OK;
    }
    return PL_ECORRUPT;
}

/* A str or bin, by type; *p points into the record. */
static inline int rd_bytes(rd *r, mtype want, const uint8_t **p, size_t *n)
{
    head h;
    if (rd_head(r, &h) || h.t != want || h.u > rd_left(r))
        return PL_ECORRUPT;
    *p = r->p;
    *n = (size_t)h.u;
    r->p += h.u;
    return PL_OK;
}

/*
 * Walk one value, checking every length against the bytes that remain and,
 * in MODE_JSON, the JSON rules; with @p ts, count the tree it decodes to
 * (MODE_JSON only).  @p depth is the value's level if it is a container
 * (as in pl__pack_json()).  PL_ECORRUPT, no message.
 */
PL__HIDDEN int pl__mp_walk(rd *r, int depth, int mode, pl__tree_size *ts);

/* Walk a whole payload that holds a policy's value @p outer containers
 * deep; the errors carry a message. */
PL__HIDDEN int pl__payload_walk(pl__tree_size *ts, const uint8_t *mp,
                                size_t len, bool want_map, unsigned outer);

/* Decode into one new block: *out is the tree in it, read-only.  Free the
 * block with free(). */
PL__HIDDEN int pl__payload_decode_block(const cJSON **out, void **block,
                                        const uint8_t *mp, size_t len,
                                        unsigned outer) PL__MUST_CHECK;

#endif /* PL_MP_H */
