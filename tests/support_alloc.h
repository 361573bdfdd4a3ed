/*
 * support_alloc.h -- the sweep of the binaries that fail the n-th
 * allocation of a scenario, for every n (test_alloc.c,
 * test_alloc_paths.c; linked with support_wrap.c and -Wl,--wrap).
 *
 * A first child counts the scenario's allocations, N; then for every n in
 * 1..N (PL_ALLOC_SHARD="k/S": those with n % S == k alone) a child runs
 * it with the n-th failing.  The call that meets it must return a status
 * with a message (a PL_ESTATE from the scenario is a wrong state reached),
 * and once the scenario's world is closed nothing it allocated may be
 * left (the wrapper's count; LeakSanitizer too under the sanitizers);
 * then, allocation restored, the binary's finish() must finish and check
 * the store.  PL_ALLOC_AT=n runs one n; PL_ALLOC_BT=1 prints where the
 * failing allocation was made.
 */
#ifndef PL_TEST_SUPPORT_ALLOC_H
#define PL_TEST_SUPPORT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

#include <policyledger.h>

/* The policy "pay": {"n": 0..2} counted in t_paid[n], a receipt 100 + n
 * returned. */
extern int t_paid[3];
int t_pay(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user);

/* A registry its @p add fills, and an engine on @p path, durability
 * `process`; closed (and NULLs) by t_world_close(). */
typedef struct t_world {
    pl_registry *reg;
    pl_engine *e;
} t_world;
int t_world_open(t_world *w, const char *path, int (*add)(pl_registry *));
void t_world_close(t_world *w);

/* What run @p id is now: its status, or -1 when there is none. */
int t_run_status(pl_engine *e, const char *id);

typedef struct t_alloc_case {
    const char *name; /* printed */
    /* The scenario on a new store at @p path, opening @p w; stops at the
     * first call that fails and returns its status.  The sweep closes
     * @p w. */
    int (*scenario)(t_world *w, const char *path);
    /* With allocation restored: finish and check; false and @p why. */
    bool (*finish)(const char *path, char *why, size_t wn);
} t_alloc_case;

/* The sweep, as a Criterion test's body; fails it on a mishandled n. */
void t_alloc_sweep(const t_alloc_case *c);

#endif
