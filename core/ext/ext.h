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

#endif /* PL_EXT_H */
