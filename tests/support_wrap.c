/*
 * support_wrap.c -- the allocator wrappers of the binaries that fail
 * allocations in turn (test_alloc.c, test_mcp_alloc.c; linked with
 * -Wl,--wrap, tests/CMakeLists.txt): each allocation asks the binary's
 * t_alloc_fails() whether it fails, and t_alloc_live counts those made
 * and not yet freed (atomically: a run's threads allocate at once).
 */
#include "support_wrap.h"

#include <stdbool.h>

_Atomic long t_alloc_live;

void *__wrap_malloc(size_t n)
{
    if (t_alloc_fails())
        return NULL;
    void *p = __real_malloc(n);
    t_alloc_live += p != NULL;
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (t_alloc_fails())
        return NULL;
    void *p = __real_calloc(n, size);
    t_alloc_live += p != NULL;
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    if (t_alloc_fails())
        return NULL;
    void *q = __real_realloc(p, n);
    t_alloc_live += !p && q;
    return q;
}

void __wrap_free(void *p)
{
    t_alloc_live -= p != NULL;
    __real_free(p);
}
