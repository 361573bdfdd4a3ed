/*
 * ctx.h -- the context a policy holds (ctx.c).
 */
#ifndef PL_CTX_H
#define PL_CTX_H

#include "internal.h"

/* PL_OK when @p c is the running invocation's context; else PL_EINVAL,
 * with a message naming @p fn. */
PL__HIDDEN int pl__ctx_check(const pl_ctx *c, const char *fn) PL__MUST_CHECK;

#endif /* PL_CTX_H */
