/*
 * path.h -- invocation paths and step ids (path.c).
 */
#ifndef PL_PATH_H
#define PL_PATH_H

#include "internal.h"

/* Parse "0.3.5" into components [3, 5]. */
PL__HIDDEN int pl__path_parse(const char *path, uint32_t *comps,
                              unsigned *depth) PL__MUST_CHECK;
/* Format components as "0.3.5". */
PL__HIDDEN void pl__path_format(char *out, const uint32_t *comps,
                                unsigned depth);
/* Write @p v in decimal at @p out; returns the end (no NUL written). */
PL__HIDDEN char *pl__utoa(char *out, uint32_t v);

#endif /* PL_PATH_H */
