/*
 * support_wrap.h -- the allocator as a binary linked with -Wl,--wrap for
 * malloc, calloc, realloc and free sees it (tests/CMakeLists.txt): the
 * library's calls go to the binary's __wrap_ functions, which reach the
 * allocator through the __real_ ones.
 */
#ifndef PL_TEST_SUPPORT_WRAP_H
#define PL_TEST_SUPPORT_WRAP_H

#include <stdbool.h>
#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

/* support_wrap.c's wrappers, for the binaries that fail allocations in
 * turn: whether this allocation fails (the binary's own rule), and the
 * allocations made and not yet freed. */
bool t_alloc_fails(void);
extern _Atomic long t_alloc_live;

/* PL_LSAN in a build with AddressSanitizer: LeakSanitizer can be asked. */
#if defined(__SANITIZE_ADDRESS__)
#define PL_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PL_LSAN 1
#endif
#endif
#ifdef PL_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#endif
