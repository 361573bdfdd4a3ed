/*
 * path.c -- the names of invocations and steps, derived from position.
 *
 * Identity comes from where a thing sits in the run's tree, never from a
 * clock or a random id (docs/design.md §4), so the same program replaying
 * the same ledger names everything the same way:
 *
 *   what                    form                       example
 *   ----------------------  -------------------------  --------
 *   the root invocation     "0"                        0
 *   a callee                caller's path "." seq      0.3.5
 *                           (seq: the caller's action_call)
 *   a step                  path ":" seq               0.3.5:7
 *   a call's idempotency    run "/" caller's path ":"  r1/0.3:5
 *   key (ctx.c)             seq; the root's: run "/0"
 *
 * Components are decimal numbers below UINT32_MAX.  A path has at most
 * PL_MAX_DEPTH components after the "0", so it fits in PL__PATH_MAX bytes
 * (the "0", PL_MAX_DEPTH times a dot and up to 10 digits, the NUL).
 */
#include <assert.h>

#include "path.h"

char *pl__utoa(char *out, uint32_t v)
{
    char tmp[10];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *out++ = tmp[--n];
    return out;
}

void pl__path_format(char *out, const uint32_t *comps, unsigned depth)
{
    assert(depth <= PL_MAX_DEPTH); /* out has PL__PATH_MAX bytes */
    char *p = out;
    *p++ = '0';
    for (unsigned i = 0; i < depth; i++) {
        *p++ = '.';
        p = pl__utoa(p, comps[i]);
    }
    *p = '\0';
}

int pl__path_parse(const char *path, uint32_t *comps, unsigned *depth)
{
    if (!path || path[0] != '0' || (path[1] != '\0' && path[1] != '.'))
        return pl__err(PL_EINVAL,
                       "bad invocation path '%s' (expected \"0\", "
                       "\"0.3\", ...)",
                       path ? path : "");
    const char *p = path + 1;
    unsigned d = 0;
    while (*p) {
        if (*p != '.' || p[1] < '0' || p[1] > '9' || d >= PL_MAX_DEPTH)
            return pl__err(PL_EINVAL, "bad invocation path '%s'", path);
        p++;
        uint64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (uint64_t)(*p++ - '0');
            if (v > UINT32_MAX - 1)
                return pl__err(PL_EINVAL, "bad invocation path '%s'", path);
        }
        comps[d++] = (uint32_t)v;
    }
    *depth = d;
    return PL_OK;
}
