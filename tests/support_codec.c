/* The record tests' shared helpers: building msgpack bytes, decoding, JSON. */
#include "support_codec.h"

void put(pl__buf *b, const void *p, size_t n)
{
    cr_assert_eq(pl__buf_append(b, p, n), PL_OK, "out of memory in a test");
}

void put_u8(pl__buf *b, uint8_t v) { put(b, &v, 1); }

void put_be(pl__buf *b, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_u8(b, (uint8_t)(v >> (8 * (n - 1 - i))));
}

void mp_nil(pl__buf *b) { put_u8(b, 0xc0); }

void mp_uint(pl__buf *b, uint64_t v)
{
    if (v <= 0x7f) {
        put_u8(b, (uint8_t)v);
    } else if (v <= 0xff) {
        put_u8(b, 0xcc);
        put_be(b, v, 1);
    } else if (v <= 0xffff) {
        put_u8(b, 0xcd);
        put_be(b, v, 2);
    } else if (v <= 0xffffffffu) {
        put_u8(b, 0xce);
        put_be(b, v, 4);
    } else {
        put_u8(b, 0xcf);
        put_be(b, v, 8);
    }
}

void mp_int(pl__buf *b, int64_t v)
{
    if (v >= 0) {
        mp_uint(b, (uint64_t)v);
    } else if (v >= -32) {
        put_u8(b, (uint8_t)(int8_t)v);
    } else {
        put_u8(b, 0xd3);
        put_be(b, (uint64_t)v, 8);
    }
}

void mp_str(pl__buf *b, const char *s, size_t n)
{
    if (n <= 31) {
        put_u8(b, (uint8_t)(0xa0 | n));
    } else if (n <= 0xff) {
        put_u8(b, 0xd9);
        put_be(b, n, 1);
    } else if (n <= 0xffff) {
        put_u8(b, 0xda);
        put_be(b, n, 2);
    } else {
        put_u8(b, 0xdb);
        put_be(b, n, 4);
    }
    put(b, s, n);
}

void mp_cstr(pl__buf *b, const char *s) { mp_str(b, s, strlen(s)); }

void mp_bin(pl__buf *b, const void *p, size_t n)
{
    put_u8(b, 0xc4);
    put_be(b, n, 1);
    put(b, p, n);
}

void mp_array(pl__buf *b, uint32_t n)
{
    if (n <= 15) {
        put_u8(b, (uint8_t)(0x90 | n));
    } else if (n <= 0xffff) {
        put_u8(b, 0xdc);
        put_be(b, n, 2);
    } else {
        put_u8(b, 0xdd);
        put_be(b, n, 4);
    }
}

void mp_map(pl__buf *b, uint32_t n)
{
    if (n <= 15) {
        put_u8(b, (uint8_t)(0x80 | n));
    } else if (n <= 0xffff) {
        put_u8(b, 0xde);
        put_be(b, n, 2);
    } else {
        put_u8(b, 0xdf);
        put_be(b, n, 4);
    }
}

void mp_f64(pl__buf *b, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    put_u8(b, 0xcb);
    put_be(b, bits, 8);
}

/* Encode a JSON text as a payload (no size limit), expecting success. */
void payload_of(pl__buf *b, const char *json)
{
    cJSON *j = t_json(json);
    int st = pl__payload_encode(b, j, 0);
    cJSON_Delete(j);
    cr_assert_eq(st, PL_OK, "encoding %s: %s", json, pl_errmsg());
}

const uint8_t empty_map[] = {0x80};

uint8_t hash_bytes[64];

spec spec_default(void)
{
    for (size_t i = 0; i < sizeof hash_bytes; i++)
        hash_bytes[i] = (uint8_t)(i * 7 + 3);
    spec s = {7,
              PL__FORMAT_VERSION,
              5,
              1700000000000000,
              PL_STEP_TEXT,
              "model",
              5,
              PL_HASH_LEN,
              NULL,
              0,
              empty_map,
              1};
    return s;
}

void rec_build(pl__buf *b, const spec *s)
{
    mp_array(b, s->nfields);
    mp_uint(b, s->version);
    mp_uint(b, s->seq);
    mp_int(b, s->time_us);
    mp_uint(b, s->type);
    mp_str(b, s->actor, s->actor_len);
    mp_bin(b, hash_bytes, s->hash_len);
    if (s->code)
        mp_str(b, s->code, s->code_len);
    else
        mp_nil(b);
    put(b, s->payload, s->payload_len);
}

const char sentinel[] = "sentinel message set by the test";

void set_sentinel(void)
{
    /* any failing pl_ call sets the thread's message; make it recognisable */
    (void)pl__err(PL_EINVAL, "%s", sentinel);
}

/* A heap copy of exactly n bytes, so that ASan sees any over-read. */
uint8_t *exact_copy(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    cr_assert_not_null(c);
    if (n)
        memcpy(c, p, n);
    return c;
}

/* Check a payload as stored bytes: pl__payload_check and pl__payload_decode
 * agree, and a step record carrying it decodes the same way. */
void expect_payload(const uint8_t *p, size_t n, int want, const char *what)
{
    uint8_t *c = exact_copy(p, n);
    set_sentinel();
    int st = pl__payload_check(c, n, true);
    /* non-fatal: the caller's buffers are still freed when this fails */
    cr_expect_eq(st, want, "%s: pl__payload_check gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    if (st == want && want)
        cr_assert(strcmp(pl_errmsg(), sentinel) != 0, "%s: no message", what);
    cJSON *j = NULL;
    st = pl__payload_decode(&j, c, n);
    cr_expect_eq(st, want, "%s: pl__payload_decode gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    if (st)
        cr_assert_null(j, "%s: a failed decode returned a value", what);
    else
        cr_assert(cJSON_IsObject(j), "%s: decoded payload is not an object",
                  what);
    cJSON_Delete(j);
    free(c);

    spec s = spec_default();
    s.payload = p;
    s.payload_len = n;
    pl__buf b = {0};
    rec_build(&b, &s);
    c = exact_copy(b.data, b.len);
    pl__rec r;
    st = pl__rec_decode(&r, c, b.len);
    cr_expect_eq(st, want, "%s: pl__rec_decode gave %s (%s)", what,
                 pl_status_name(st), pl_errmsg());
    free(c);
    pl__buf_free(&b);
}

/* Encode, check, decode; the caller frees the result. */
/* Every container's children are linked as cJSON links them: the first
 * child's prev is the last, the last's next is NULL, prev mirrors next. */
void expect_cjson_links(const cJSON *v)
{
    const cJSON *first = v->child;
    if (!first)
        return;
    const cJSON *c = first, *last = NULL;
    for (; c; last = c, c = c->next) {
        if (last)
            cr_assert_eq(c->prev, last, "prev does not mirror next");
        cr_assert_eq(c->string != NULL, cJSON_IsObject(v),
                     "members have keys, array items do not");
        expect_cjson_links(c);
    }
    cr_assert_eq(first->prev, last, "the first child's prev is not the last");
}

/* Node by node the same (cJSON_Compare() is not: with a key twice in an
 * object it compares only the first). */
static void expect_same_tree(const cJSON *a, const cJSON *b)
{
    cr_assert_eq(a->type, b->type);
    cr_assert_eq(a->string != NULL, b->string != NULL);
    if (a->string)
        cr_assert_str_eq(a->string, b->string);
    cr_assert_eq(a->valuestring != NULL, b->valuestring != NULL);
    if (a->valuestring)
        cr_assert_str_eq(a->valuestring, b->valuestring);
    cr_assert(a->valuedouble == b->valuedouble);
    cr_assert_eq(a->valueint, b->valueint);
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        expect_same_tree(x, y);
    cr_assert(!x && !y, "a different number of children");
}

/* Decode @p mp into a block of exactly the measured size (so that a
 * sanitizer sees any write past it) and check it against the owned tree
 * pl__payload_decode() gives. */
void expect_block_tree(const uint8_t *mp, size_t len, const cJSON *want)
{
    pl__tree_size ts;
    cr_assert_eq(pl__payload_measure(&ts, mp, len, 0), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(ts.bytes, ts.nodes * sizeof(cJSON) + ts.text);
    void *block = malloc(ts.bytes);
    cr_assert_not_null(block);
    cJSON *t = pl__payload_build(mp, len, &ts, block);
    cr_assert_not_null(t, "a measured payload did not build");
    expect_same_tree(t, want);
    expect_cjson_links(t);
    char *a = t_text(t), *b = t_text(want);
    cr_assert_str_eq(a, b, "the block tree prints differently");
    cJSON_free(a);
    cJSON_free(b);
    free(block);
}

/* {"a": [[...[1]...]]}: one object and @p levels - 1 arrays. */
cJSON *nest_arrays(int levels, bool scalar)
{
    cJSON *inner = cJSON_CreateArray();
    cr_assert_not_null(inner);
    if (scalar)
        cJSON_AddItemToArray(inner, cJSON_CreateNumber(1));
    for (int i = 2; i < levels; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, inner);
        inner = a;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "a", inner);
    return o;
}

/* {"a": [[...]]}: a map and @p levels - 1 arrays of one element, built as
 * stored bytes; the deepest array holds a scalar or nothing. */
void stored_nest(pl__buf *b, int levels, bool scalar)
{
    mp_map(b, 1);
    mp_cstr(b, "a");
    for (int i = 1; i < levels; i++)
        mp_array(b, 1);
    if (scalar)
        mp_uint(b, 1);
    else
        b->data[b->len - 1] = 0x90; /* the deepest array is empty */
}

/*
 * Replay reads a record's header with pl__rec_decode_lazy() and checks the
 * payload with pl__rec_check() only when it interprets it: together they
 * must judge every buffer as pl__rec_decode() does.
 */
void lazy_agrees(const uint8_t *c, size_t n, int full, unsigned long iter)
{
    pl__rec lz;
    int st = pl__rec_decode_lazy(&lz, c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__rec_decode_lazy returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK) {
        cr_assert(lz.payload >= c && lz.payload + lz.payload_len == c + n);
        st = pl__rec_check(&lz);
    }
    cr_assert_eq(st, full,
                 "iteration %lu: the lazy path says %s, the full "
                 "decode %s",
                 iter, pl_status_name(st), pl_status_name(full));
}

uint64_t rng_state;

uint64_t rng(void)
{
    /* xorshift64*: fixed seed, the same buffers on every run */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

size_t below(size_t n) { return n ? (size_t)(rng() % n) : 0; }

const uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91,
                               0x9f, 0xa0, 0xa1, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3,
                               0xc4, 0xc5, 0xc6, 0xc7, 0xca, 0xcb, 0xcc, 0xcf,
                               0xd0, 0xd3, 0xd4, 0xd8, 0xd9, 0xda, 0xdb, 0xdc,
                               0xdd, 0xde, 0xdf, 0xe0, 0xff};

/* Turn @p in into a mutated copy in @p out. */
void mutate(pl__buf *out, const pl__buf *in, const pl__buf *other)
{
    pl__buf_reset(out);
    put(out, in->data, in->len);
    int rounds = 1 + (int)below(4);
    for (int r = 0; r < rounds; r++) {
        size_t n = out->len;
        switch (below(8)) {
        case 0: /* bit flip */
        case 1:
            if (n)
                out->data[below(n)] ^= (uint8_t)(1u << below(8));
            break;
        case 2: /* an interesting byte */
            if (n)
                out->data[below(n)] = interesting[below(sizeof interesting)];
            break;
        case 3: /* a random byte */
            if (n)
                out->data[below(n)] = (uint8_t)rng();
            break;
        case 4: /* truncate */ out->len = below(n + 1); break;
        case 5: { /* delete a run of bytes */
            if (!n)
                break;
            size_t at = below(n), k = 1 + below(8);
            if (k > n - at)
                k = n - at;
            memmove(out->data + at, out->data + at + k, n - at - k);
            out->len -= k;
            break;
        }
        case 6: { /* insert bytes */
            size_t at = below(n + 1), k = 1 + below(8);
            uint8_t ins[8];
            for (size_t i = 0; i < k; i++)
                ins[i] = below(2) ? interesting[below(sizeof interesting)]
                                  : (uint8_t)rng();
            cr_assert_eq(pl__buf_reserve(out, k), PL_OK);
            memmove(out->data + at + k, out->data + at, n - at);
            memcpy(out->data + at, ins, k);
            out->len += k;
            break;
        }
        default: { /* splice in the tail of another record */
            size_t at = below(n + 1), from = below(other->len + 1);
            out->len = at;
            put(out, other->data + from, other->len - from);
            break;
        }
        }
    }
}

/* Whatever decoded must be usable: the payload decodes, its text renders. */
static void use_rec(const pl__rec *r, const uint8_t *base, size_t len)
{
    cr_assert(r->type >= PL_STEP_TEXT && r->type <= PL_STEP_CANCEL);
    cr_assert(r->actor_len >= 1 && r->actor_len <= PL_MAX_NAME);
    cr_assert(r->payload >= base && r->payload + r->payload_len == base + len);
    cr_assert((const uint8_t *)r->actor >= base &&
              (const uint8_t *)r->actor + r->actor_len <= base + len);
    cr_assert(r->prev_hash >= base && r->prev_hash + PL_HASH_LEN <= base + len);
    cJSON *j = NULL;
    int st = pl__payload_decode(&j, r->payload, r->payload_len);
    cr_assert_eq(st, PL_OK,
                 "a record that decodes has a payload that does "
                 "not: %s",
                 pl_errmsg());
    cr_assert(cJSON_IsObject(j));
    cJSON_Delete(j);
    char *text = pl__payload_text(r->payload, r->payload_len, 64);
    cr_assert_not_null(text);
    free(text);
    const uint8_t *v;
    size_t vn;
    (void)pl__map_find(r->payload, r->payload_len, "text", &v, &vn);
}

void fuzz_one(const uint8_t *p, size_t n, unsigned long iter)
{
    uint8_t *c = exact_copy(p, n);
    pl__rec r;
    int st = pl__rec_decode(&r, c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__rec_decode returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK)
        use_rec(&r, c, n);
    lazy_agrees(c, n, st, iter);

    /* the bare-payload readers on the same bytes */
    st = pl__payload_check(c, n, false);
    cr_assert(st == PL_OK || st == PL_ECORRUPT, "iteration %lu: check gave %s",
              iter, pl_status_name(st));
    cJSON *j = NULL;
    int dst = pl__payload_decode(&j, c, n);
    cr_assert_eq(dst, st, "iteration %lu: check said %s, decode said %s", iter,
                 pl_status_name(st), pl_status_name(dst));
    if (j)
        expect_block_tree(c, n, j);
    cJSON_Delete(j);
    (void)pl__payload_equal(c, n, c, n);

    /* and the run record readers */
    pl__run_info ri;
    st = pl__run_info_decode(&ri, "r", c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__run_info_decode returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK)
        pl__run_info_clear(&ri);
    pl__run_state rs;
    st = pl__run_state_decode(&rs, "r", c, n);
    cr_assert(st == PL_OK || st == PL_ECORRUPT || st == PL_EVERSION,
              "iteration %lu: pl__run_state_decode returned %s", iter,
              pl_status_name(st));
    if (st == PL_OK)
        pl__run_state_clear(&rs);
    free(c);
}
