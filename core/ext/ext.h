/*
 * ext.h -- what the extensions in core/ext share besides the public API.
 *
 * core/ext is compiled with include/ alone on its include path: everything
 * here is written on the public API (policyledger.h), cJSON, and the C and
 * POSIX libraries, as a decorator outside the library would be.
 */
#ifndef PL_EXT_H
#define PL_EXT_H

#include <stddef.h>

#include <policyledger.h>

#if defined(__GNUC__)
#define PL__EXT_HIDDEN __attribute__((visibility("hidden")))
#define PL__EXT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PL__EXT_HIDDEN
#define PL__EXT_PRINTF(f, a)
#endif

#define PL__EXT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* "object", "array", "string", ...: what a value is, for messages
 * (json.c). */
PL__EXT_HIDDEN const char *pl__json_type_name(const cJSON *v);

/* cJSON_PrintUnformatted(@p json) with each byte that is not part of
 * well-formed UTF-8 as U+FFFD (cJSON keeps a string's bytes as they are;
 * JSON text is UTF-8), as the export prints (json_print.c).  Caller
 * frees with cJSON_free(); NULL when out of memory. */
PL__EXT_HIDDEN char *pl__json_print_utf8(const cJSON *json);

/* ---- versioned structs --------------------------------------------------- */

/*
 * The header's VERSIONS AND THE ABI for the structs core/ext reads, on the
 * public API alone (base/versioned.c keeps the rule for the rest of the
 * library, and lists these structs' versions too): a struct is taken at
 * every version from 1 to its PL_*_VERSION.  Each struct read here has one
 * version so far, so one accepted is read whole; PL__EXT_ONE_VERSION()
 * beside its reader stops the build when the struct grows, until the reader
 * takes an older version's bytes as base/versioned.c's table has them.
 */
#define PL__EXT_ONE_VERSION(NAME)                                              \
    _Static_assert(NAME##_VERSION == 1,                                        \
                   #NAME "_VERSION grew: read the older versions' bytes as "   \
                         "base/versioned.c's table has them")

/* PL_OK when @p version is one of 1..@p current, else PL_EINVAL: the
 * message names @p fn, the struct @p type, its @p init and both versions. */
static inline int pl__ext_version_ok(unsigned version, unsigned current,
                                     const char *type, const char *init,
                                     const char *fn)
{
    if (version >= 1 && version <= current)
        return PL_OK;
    if (version == 0)
        return pl_errorf(PL_EINVAL, "%s: %s version 0: it was not made with %s",
                         fn, type, init);
    return pl_errorf(PL_EINVAL,
                     "%s: %s version %u is newer than this library's (it "
                     "takes 1..%u): built against a newer header",
                     fn, type, version, current);
}

/* pl__ext_version_ok() for struct @p type, whose macros start with NAME. */
#define PL__EXT_VERSION_OK(version, type, NAME, fn)                            \
    pl__ext_version_ok((version), NAME##_VERSION, #type, #NAME "_INIT", (fn))

/*
 * A decorator list a decorator keeps for later calls: @p n decorators of
 * one version, each with a function (decorators.c).
 * @return PL_OK; PL_EINVAL (the message names @p fn and the index).
 */
PL__EXT_HIDDEN int pl__ext_decorators_ok(const pl_decorator *list, size_t n,
                                         const char *fn);

/* The real clock, Unix ms, and a real sleep (a pl_sleep_fn): what the
 * decorators that wait use unless their options give another
 * (decorators.c). */
PL__EXT_HIDDEN int64_t pl__ext_now_ms(void);
PL__EXT_HIDDEN int pl__ext_sleep(int64_t ms, void *user);

#endif /* PL_EXT_H */
