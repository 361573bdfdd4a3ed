/*
 * registry.h -- what the registry shares with the plugin loader.
 */
#ifndef PL_REGISTRY_H
#define PL_REGISTRY_H

#include "util.h"

/*
 * Copy every policy of @p from into @p reg, all or none: PL_EEXIST (naming
 * the policy and @p origin) when a name is taken, PL_ENOMEM.  A policy with
 * no code_version gets @p code.  On success @p reg keeps @p resource (the
 * plugin's handle) and takes over what @p from owns (the data of policies
 * such as LLM policies); when @p reg is freed it releases that data first,
 * then release(@p resource): the data's release may be code in it.
 */
PL__HIDDEN int pl__registry_adopt(pl_registry *reg, pl_registry *from,
                                  const char *code, const char *origin,
                                  void *resource,
                                  void (*release)(void *)) PL__MUST_CHECK;

/* Drop the policies registered after the first @p n. */
PL__HIDDEN void pl__registry_truncate(pl_registry *reg, size_t n);

/* Keep @p resource until the registry is freed, then release() it, after
 * the policies (whose code and data it may hold). */
PL__HIDDEN int pl__registry_own(pl_registry *reg, void *resource,
                                void (*release)(void *)) PL__MUST_CHECK;

/* Reserve @p name, an MCP server's (policyledger_mcp.h: a name is the
 * server's, whatever tools it lists, none included), for the registry's
 * life: PL_EEXIST (no message) when it is reserved already, PL_ENOMEM. */
PL__HIDDEN int pl__registry_reserve(pl_registry *reg,
                                    const char *name) PL__MUST_CHECK;

/* Drop the reservation of @p name (a registration that failed). */
PL__HIDDEN void pl__registry_unreserve(pl_registry *reg, const char *name);

#endif /* PL_REGISTRY_H */
