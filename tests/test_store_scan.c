/*
 * test_store_scan.c -- a run's steps read a page at a time
 * (pl__store_scan(), and pl__scan_run() under pl_run_walk() and
 * pl_run_verify(); pl__store_each_step()), on runs of large payloads: a
 * page holds at most its number of records and its bytes (a larger record
 * alone), every step comes exactly once, in key order, from any starting
 * key; and a walk of a run of 1 MiB payloads holds about one page in
 * memory, not the run.
 * On LMDB, and on PostgreSQL as pg_test_store_scan.
 *
 * This binary is linked with -Wl,--wrap for malloc, calloc, realloc and
 * free (tests/CMakeLists.txt): the wrappers below count the bytes the
 * library's own code holds (cJSON's too, by cJSON_InitHooks), so a test
 * reads the largest amount held during a walk.  libpq, LMDB and libc
 * allocate inside their own shared objects, out of its reach.
 */
#include "support.h"
#include "support_store.h"
#include "support_wrap.h"

#include "store.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wrapper --------------------------------------------------------- */

static atomic_llong g_live; /* bytes held, as malloc_usable_size() says */
static atomic_llong g_peak; /* the most held since peak_reset() */

static void held(long long d)
{
    long long now = atomic_fetch_add(&g_live, d) + d;
    long long p = atomic_load(&g_peak);
    while (now > p && !atomic_compare_exchange_weak(&g_peak, &p, now))
        ;
}

void *__wrap_malloc(size_t n)
{
    void *p = __real_malloc(n);
    if (p)
        held((long long)malloc_usable_size(p));
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p = __real_calloc(n, size);
    if (p)
        held((long long)malloc_usable_size(p));
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    long long was = p ? (long long)malloc_usable_size(p) : 0;
    void *q = __real_realloc(p, n);
    if (q)
        held((long long)malloc_usable_size(q) - was);
    else if (!n)
        held(-was);
    return q;
}

void __wrap_free(void *p)
{
    if (p)
        held(-(long long)malloc_usable_size(p));
    __real_free(p);
}

static void hooks(void)
{
    cJSON_Hooks h = {__wrap_malloc, __wrap_free};
    cJSON_InitHooks(&h);
}

/* Start measuring; what is held then is the baseline. */
static long long peak_reset(void)
{
    long long now = atomic_load(&g_live);
    atomic_store(&g_peak, now);
    return now;
}

/* ---- a run of large payloads --------------------------------------------- */

#define MIB ((size_t)1 << 20)

/* A store holding "big": "bulk" calling "echo" @p n times with a string of
 * @p size bytes, each distinct (no step shares another's).  Its steps in
 * tree order: 0:2i, 0.2i:0, 0:2i+1 for each call, then 0:2n. */
static const char *big_store(pl_registry *reg, int n, size_t size)
{
    const char *path = t_store_path();
    pl_engine *e = open_with(path, reg, 0, 0);
    char payload[64];
    snprintf(payload, sizeof payload, "{\"n\": %d, \"size\": %zu}", n, size);
    start_ok(e, "bulk", payload, "big");
    pl_engine_close(e);
    return path;
}

static size_t page_bytes(const pl__kvs *p)
{
    size_t b = 0;
    for (size_t i = 0; i < p->n; i++)
        b += p->e[i].klen + p->e[i].vlen;
    return b;
}

/* Every page of run @p num after key @p after (NULL: from the first) of at
 * most @p max_n records and @p max_bytes bytes, checked against @p all
 * (every record of the run, from index @p from on): each page within its
 * bounds and as full as they allow, every record once, in order. */
static void pages_check(pl__store *s, uint64_t num, const pl__kvs *all,
                        size_t from, size_t max_n, size_t max_bytes)
{
    pl__kvs page = {0};
    uint8_t after[PL__KEY_MAX];
    size_t after_len = 0, next = from, pages = 0;
    if (from > 0) {
        after_len = all->e[from - 1].klen;
        memcpy(after, pl__kvs_key(all, from - 1), after_len);
    }
    for (;;) {
        cr_assert_eq(pl__store_scan(s, num, after_len ? after : NULL, after_len,
                                    max_n, max_bytes, &page),
                     PL_OK, "%s", pl_errmsg());
        if (!page.n)
            break;
        pages++;
        size_t b = page_bytes(&page);
        cr_assert_leq(page.n, max_n, "a page of at most %zu records", max_n);
        cr_assert(page.n == 1 || b <= max_bytes,
                  "a page of %zu records holds %zu bytes, over %zu", page.n, b,
                  max_bytes);
        for (size_t i = 0; i < page.n; i++, next++) {
            cr_assert_lt(next, all->n, "a record after the run's last");
            cr_assert(page.e[i].klen == all->e[next].klen &&
                          memcmp(pl__kvs_key(&page, i), pl__kvs_key(all, next),
                                 page.e[i].klen) == 0,
                      "record %zu of a page is not the run's record %zu", i,
                      next);
            cr_assert(page.e[i].vlen == all->e[next].vlen &&
                          memcmp(pl__kvs_val(&page, i), pl__kvs_val(all, next),
                                 page.e[i].vlen) == 0,
                      "record %zu's value differs", next);
        }
        /* as full as the bounds allow: the next record would pass one */
        if (next < all->n && page.n < max_n)
            cr_assert_gt(b + all->e[next].klen + all->e[next].vlen, max_bytes,
                         "a page of %zu bytes stopped before record %zu, "
                         "which fits",
                         b, next);
        after_len = page.e[page.n - 1].klen;
        memcpy(after, pl__kvs_key(&page, page.n - 1), after_len);
    }
    cr_assert_eq(next, all->n,
                 "paging (%zu records, %zu bytes) from %zu "
                 "returned %zu of the run's %zu records",
                 max_n, max_bytes, from, next - from, all->n - from);
    cr_assert_geq(pages, max_n == 1 ? all->n - from : 1);
    pl__kvs_free(&page);
}

Test(scan, pages_hold_at_most_their_records_and_bytes, .fini = t_cleanup)
{
    hooks();
    pl_registry *reg = registry();
    /* 8 calls of 200 KiB strings: 17 records (each callee's result folded
     * into its caller's), 16 of them over 200 KiB */
    const char *path = big_store(reg, 8, 200 << 10);
    pl__store *s = NULL;
    pl__store_options o = {0};
    o.no_create = true;
    cr_assert_eq(pl__store_open(&s, path, &o), PL_OK, "%s", pl_errmsg());
    uint64_t num = 0;
    cr_assert_eq(pl__store_run_find(s, "big", &num, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl__kvs all = {0};
    cr_assert_eq(pl__store_scan(s, num, NULL, 0, 1000, SIZE_MAX, &all), PL_OK,
                 "%s", pl_errmsg());
    cr_assert_eq(all.n, 17, "the run's records: %zu", all.n);
    size_t largest = 0;
    for (size_t i = 0; i < all.n; i++)
        if (all.e[i].vlen > largest)
            largest = all.e[i].vlen;
    cr_assert_gt(largest, 200 << 10);

    static const struct {
        size_t n, bytes;
    } bounds[] = {
        {1000, 1},         /* every record alone: each is over the bound */
        {1000, 500 << 10}, /* two large records a page */
        {1000, 1 << 20},   /* four or five */
        {3, SIZE_MAX},     /* by records alone */
        {2, 500 << 10},    /* whichever comes first */
        {1, SIZE_MAX},     {1000, SIZE_MAX}, /* the whole run at once */
    };
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
        for (size_t from = 0; from < all.n; from += 5)
            pages_check(s, num, &all, from, bounds[b].n, bounds[b].bytes);

    /* after the last key: nothing; after a key past the run: nothing */
    pl__kvs page = {0};
    cr_assert_eq(pl__store_scan(s, num, pl__kvs_key(&all, all.n - 1),
                                all.e[all.n - 1].klen, 10, 1, &page),
                 PL_OK);
    cr_assert_eq(page.n, 0);
    uint8_t past[9];
    pl__put_be64(past, num);
    past[8] = 0xff;
    cr_assert_eq(pl__store_scan(s, num, past, sizeof past, 10, 1, &page),
                 PL_OK);
    cr_assert_eq(page.n, 0);
    pl__kvs_free(&page);
    pl__kvs_free(&all);
    pl__store_close(s);
    pl_registry_free(reg);
}

/* Steps visited: their ids, in order. */
typedef struct visited {
    char (*id)[32];
    size_t n, cap;
    size_t payload_bytes; /* the longest "blob" seen */
} visited;

static int visit(const pl_step *s, void *user)
{
    visited *v = user;
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->id = realloc(v->id, v->cap * sizeof *v->id);
        cr_assert_not_null(v->id);
    }
    snprintf(v->id[v->n++], sizeof *v->id, "%s", pl_step_id(s));
    const cJSON *blob = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                         "blob");
    if (cJSON_IsString(blob) && strlen(blob->valuestring) > v->payload_bytes)
        v->payload_bytes = strlen(blob->valuestring);
    return 0;
}

/* The ids of "big"'s steps from the @p k-th on are those @p v holds. */
static void ids_check(const visited *v, int calls, size_t k)
{
    char want[32];
    size_t total = 3 * (size_t)calls + 1;
    cr_assert_eq(v->n, total - k, "%zu steps from the %zu-th, not %zu", v->n, k,
                 total - k);
    for (size_t j = k; j < total; j++) {
        size_t i = j / 3;
        if (j == total - 1)
            snprintf(want, sizeof want, "0:%d", 2 * calls);
        else if (j % 3 == 0)
            snprintf(want, sizeof want, "0:%zu", 2 * i);
        else if (j % 3 == 1)
            snprintf(want, sizeof want, "0.%zu:0", 2 * i);
        else
            snprintf(want, sizeof want, "0:%zu", 2 * i + 1);
        cr_assert_str_eq(v->id[j - k], want, "step %zu of the walk", j - k);
    }
}

/* Records pl__store_each_step() handed out, checked against all. */
typedef struct each_seen {
    pl__kvs all;
    size_t n;
} each_seen;

static int each_rec(const uint8_t *key, size_t klen, const uint8_t *val,
                    size_t vlen, void *user)
{
    each_seen *es = user;
    cr_assert_lt(es->n, es->all.n, "a record after the run's last");
    size_t i = es->n++;
    cr_assert(klen == es->all.e[i].klen &&
                  memcmp(key, pl__kvs_key(&es->all, i), klen) == 0,
              "each step's record %zu is not the run's", i);
    cr_assert(vlen == es->all.e[i].vlen &&
                  memcmp(val, pl__kvs_val(&es->all, i), vlen) == 0,
              "each step's record %zu has another value", i);
    return 0;
}

Test(scan, a_walk_of_large_payloads_holds_a_page_not_the_run, .fini = t_cleanup)
{
    hooks();
    pl_registry *reg = registry();
    enum { CALLS = 16 };
    /* 49 steps, 48 of them of 1 MiB: the whole run is about 48 MiB */
    const char *path = big_store(reg, CALLS, MIB);
    pl_engine *e = open_with(path, reg, 0, 0);

    visited v = {0};
    long long base = peak_reset();
    cr_assert_eq(pl_run_walk(e, "big", visit, &v), PL_OK, "%s", pl_errmsg());
    long long walk_peak = atomic_load(&g_peak) - base;
    ids_check(&v, CALLS, 0);
    cr_assert_eq(v.payload_bytes, MIB, "the payloads come whole");
    /* a page, a record held for a mirror, a step made of one, its JSON:
     * a few records, never the run */
    cr_assert_lt(walk_peak, (long long)(8 * MIB),
                 "a walk of a 48 MiB run held %lld bytes at once", walk_peak);

    /* from every step on: that step and each one after it, once */
    visited all = v;
    for (size_t k = 0; k < all.n; k += 5) {
        visited from = {0};
        base = peak_reset();
        cr_assert_eq(pl_run_walk_from(e, "big", all.id[k], visit, &from), PL_OK,
                     "from %s: %s", all.id[k], pl_errmsg());
        long long peak = atomic_load(&g_peak) - base;
        ids_check(&from, CALLS, k);
        cr_assert_lt(peak, (long long)(8 * MIB),
                     "a walk from %s held %lld bytes at once", all.id[k], peak);
        free(from.id);
    }
    free(all.id);

    /* the verifier reads the run the same way */
    base = peak_reset();
    cr_assert_eq(pl_run_verify(e, "big"), PL_OK, "%s", pl_errmsg());
    long long verify_peak = atomic_load(&g_peak) - base;
    cr_assert_lt(verify_peak, (long long)(8 * MIB),
                 "verifying a 48 MiB run held %lld bytes at once", verify_peak);
    cr_log_info("held at most: walk %lld, verify %lld bytes", walk_peak,
                verify_peak);
    pl_engine_close(e);

    /* every record once, in order, to a reader of each (an export's, a
     * fork's), which reads pages of its own */
    pl__store *s = NULL;
    pl__store_options o = {0};
    o.no_create = true;
    cr_assert_eq(pl__store_open(&s, path, &o), PL_OK, "%s", pl_errmsg());
    uint64_t num = 0;
    cr_assert_eq(pl__store_run_find(s, "big", &num, NULL), PL_OK);
    each_seen es = {0};
    cr_assert_eq(pl__store_scan(s, num, NULL, 0, 1000, SIZE_MAX, &es.all),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(es.all.n, 2 * CALLS + 1);
    cr_assert_eq(pl__store_each_step(s, num, each_rec, &es), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(es.n, es.all.n, "each step: %zu records of %zu", es.n,
                 es.all.n);
    pl__kvs_free(&es.all);
    pl__store_close(s);
    pl_registry_free(reg);
}
