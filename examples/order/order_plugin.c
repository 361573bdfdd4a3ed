/*
 * order_plugin.c -- the order workflow as a plugin.
 *
 * The tools and order-demo load it with pl_plugin_load().  Its tools append
 * their side effects to the file named by ORDER_EFFECTS (default
 * order-demo.effects), read once, when the plugin is loaded.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "order.h"

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg);

static char effects[PATH_MAX];

int pl_plugin_init(pl_registry *reg)
{
    const char *path = getenv("ORDER_EFFECTS");
    if (!path || !*path)
        path = "order-demo.effects";
    if ((size_t)snprintf(effects, sizeof effects, "%s", path) >= sizeof effects)
        return PL_EINVAL;
    return order_register(reg, effects);
}
